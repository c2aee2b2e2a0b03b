//! The free path of teardown, per page (seeds 000/001).
//!
//! - `release_pages`: the inline free of gathered batches — pages that were allocated, put on
//!   the LRU and mapped once, released in chunks of `MAX_NR_FOLIOS_PER_FREE` (LRU removal under
//!   the node's `lru_lock`, pcp lists, drains to the buddy under `zone.lock`).
//! - `populate`: write faults over a fresh anonymous mapping (`__mm_populate`), the setup cost
//!   of every bigfree row.
//! - `munmap_inline`: the whole munmap of a populated mapping, vanilla gather (zap + free).
//! - `release_pages_pcp_tune`: `release_pages` with 6.7+ pcp auto-tuning (`pcp.auto_tune`),
//!   whose drains grow with the run of frees: fewer `zone.lock` round trips per page.
//!
//! Each reports time per 4 KiB page (criterion's throughput in elements = pages). Small
//! sparse machines, few samples: the whole bench runs in well under a minute.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use usermm::config::{BackingMode, MachineConfig, ThpMode};
use usermm::mm::mmap::{MapFile, MAP_ANONYMOUS, MAP_PRIVATE, PROT_READ, PROT_WRITE};
use usermm::mm::mmu_gather::MAX_NR_FOLIOS_PER_FREE;
use usermm::page_alloc::Gfp;
use usermm::{CpuId, Machine, Order};

/// 64 MiB per iteration: 16 384 pages, enough to cycle the pcp lists and the buddy many times.
const BYTES: u64 = 64 << 20;
const PAGES: u64 = BYTES / 4096;

fn machine(pcp_auto_tune: bool) -> std::sync::Arc<Machine> {
    let mut cfg = MachineConfig {
        mem: 512 << 20,
        cpus: 4,
        nodes: 2,
        backing: BackingMode::Sparse,
        thp: ThpMode::Never,
        ..MachineConfig::default()
    };
    cfg.pcp.auto_tune = pcp_auto_tune;
    Machine::new(cfg).expect("bench machine")
}

/// Time `release_pages` of `PAGES` pages that the fault path left mapped once, on the LRU.
fn time_release(m: &Machine, iters: u64) -> Duration {
    let cpu = CpuId(0);
    let phys = m.phys();
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        // What the fault path leaves: one reference, on the LRU (batched add).
        let pages: Vec<_> = (0..PAGES)
            .map(|_| {
                let p = phys.alloc_pages(cpu, Order(0), Gfp::KERNEL).expect("page");
                phys.lru_cache_add(cpu, p);
                p
            })
            .collect();
        phys.lru_add_drain(cpu);
        // The LRU batch held a reference and dropped it at the drain: one left, as after the
        // zap cleared the PTE.
        let t = Instant::now();
        for chunk in pages.chunks(MAX_NR_FOLIOS_PER_FREE) {
            phys.release_pages(cpu, chunk);
        }
        total += t.elapsed();
    }
    total
}

fn release_pages(c: &mut Criterion) {
    let mut g = c.benchmark_group("free_path");
    g.throughput(Throughput::Elements(PAGES));
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let m = machine(false);
    let cpu = CpuId(0);
    g.bench_function(BenchmarkId::new("release_pages", "64M"), |b| {
        b.iter_custom(|iters| time_release(&m, iters))
    });
    let tuned = machine(true);
    g.bench_function(BenchmarkId::new("release_pages_pcp_tune", "64M"), |b| {
        b.iter_custom(|iters| time_release(&tuned, iters))
    });
    g.bench_function(BenchmarkId::new("populate", "64M"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mm = m.new_mm(cpu).expect("mm");
                let a = mm
                    .mmap(
                        cpu,
                        0,
                        BYTES,
                        PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS,
                        MapFile::None,
                    )
                    .expect("mmap");
                let t = Instant::now();
                mm.populate(cpu, a, a + BYTES, true);
                total += t.elapsed();
                mm.mmput(cpu);
            }
            total
        })
    });
    g.bench_function(BenchmarkId::new("munmap_inline", "64M"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mm = m.new_mm(cpu).expect("mm");
                let a = mm
                    .mmap(
                        cpu,
                        0,
                        BYTES,
                        PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS,
                        MapFile::None,
                    )
                    .expect("mmap");
                mm.populate(cpu, a, a + BYTES, true);
                let t = Instant::now();
                mm.munmap(cpu, a, BYTES).expect("munmap");
                total += t.elapsed();
                mm.mmput(cpu);
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, release_pages);
criterion_main!(benches);
