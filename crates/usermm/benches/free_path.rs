//! The free path of teardown, per page (seeds 000/001).
//!
//! - `populate`: write faults over a fresh anonymous mapping (`__mm_populate`), the setup cost
//!   of every bigfree row.
//! - `munmap_inline`: the whole munmap of a populated mapping, vanilla gather: the zap, then
//!   `release_pages` of the gathered batches in chunks of `MAX_NR_FOLIOS_PER_FREE` (LRU removal
//!   under the node's `lru_lock`, pcp lists, drains to the buddy under `zone.lock`).
//! - `munmap_inline_pcp_tune`: the same with 6.7+ pcp auto-tuning (`pcp.auto_tune`), whose
//!   drains grow with the run of frees: fewer `zone.lock` round trips per page.
//!
//! `release_pages` is not timed alone: it is crate-private (a library user cannot drop a
//! mapped page's references), so the free path is measured through munmap, whose zap costs
//! the same with and without the tuning.
//!
//! Each reports time per 4 KiB page (criterion's throughput in elements = pages). Small
//! sparse machines, few samples: the whole bench runs in well under a minute.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use usermm::config::{BackingMode, MachineConfig, ThpMode};
use usermm::mm::mmap::{MapFile, MAP_ANONYMOUS, MAP_PRIVATE, PROT_READ, PROT_WRITE};
use usermm::{CpuId, Machine};

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

/// A fresh mm with `BYTES` of private anonymous memory mapped (not populated).
fn fresh_mapping(m: &std::sync::Arc<Machine>, cpu: CpuId) -> (std::sync::Arc<usermm::Mm>, u64) {
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
    (mm, a)
}

/// Time the munmap of `BYTES` of populated anonymous memory, `iters` times.
fn time_munmap(m: &std::sync::Arc<Machine>, iters: u64) -> Duration {
    let cpu = CpuId(0);
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let (mm, a) = fresh_mapping(m, cpu);
        mm.populate(cpu, a, a + BYTES, true);
        let t = Instant::now();
        mm.munmap(cpu, a, BYTES).expect("munmap");
        total += t.elapsed();
        mm.mmput(cpu);
    }
    total
}

fn free_path(c: &mut Criterion) {
    let mut g = c.benchmark_group("free_path");
    g.throughput(Throughput::Elements(PAGES));
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let m = machine(false);
    let cpu = CpuId(0);
    g.bench_function(BenchmarkId::new("populate", "64M"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let (mm, a) = fresh_mapping(&m, cpu);
                let t = Instant::now();
                mm.populate(cpu, a, a + BYTES, true);
                total += t.elapsed();
                mm.mmput(cpu);
            }
            total
        })
    });
    g.bench_function(BenchmarkId::new("munmap_inline", "64M"), |b| {
        b.iter_custom(|iters| time_munmap(&m, iters))
    });
    let tuned = machine(true);
    g.bench_function(BenchmarkId::new("munmap_inline_pcp_tune", "64M"), |b| {
        b.iter_custom(|iters| time_munmap(&tuned, iters))
    });
    g.finish();
}

criterion_group!(benches, free_path);
criterion_main!(benches);
