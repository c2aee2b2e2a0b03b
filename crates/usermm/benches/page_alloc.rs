//! Order-0 alloc + free through the per-CPU lists and the buddy: pairs per second on one and
//! on two threads (each on its own emulated CPU, same node, so they share `zone.lock`).
//!
//! `cargo bench -p usermm --bench page_alloc`

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use usermm::config::{BackingMode, MachineConfig};
use usermm::page_alloc::Gfp;
use usermm::{CpuId, Machine, Order};

fn machine() -> Arc<Machine> {
    Machine::new(MachineConfig {
        mem: 1 << 30,
        cpus: 2,
        backing: BackingMode::Sparse,
        ..Default::default()
    })
    .unwrap()
}

/// `iters` alloc+free pairs on each of `threads` threads, in batches of 64 so that the pcp
/// lists refill and drain as they do under real load; returns the wall time.
fn run(m: &Arc<Machine>, threads: u16, iters: u64) -> Duration {
    let barrier = Arc::new(Barrier::new(threads as usize + 1));
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let (m, b) = (Arc::clone(m), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let cpu = CpuId(t);
                let mut v = Vec::with_capacity(64);
                b.wait();
                let mut done = 0;
                while done < iters {
                    for _ in 0..64 {
                        v.push(m.phys().alloc_owned(cpu, Order(0), Gfp::KERNEL).unwrap());
                    }
                    // Each handle frees its page (`__free_pages`) as it drops.
                    v.clear();
                    done += 64;
                }
            })
        })
        .collect();
    barrier.wait();
    let t0 = Instant::now();
    for h in hs {
        h.join().unwrap();
    }
    t0.elapsed()
}

fn bench(c: &mut Criterion) {
    let m = machine();
    let mut g = c.benchmark_group("order0_alloc_free");
    g.measurement_time(Duration::from_secs(3));
    for threads in [1u16, 2] {
        g.throughput(Throughput::Elements(threads as u64));
        g.bench_function(format!("{threads}_threads"), |b| {
            b.iter_custom(|iters| run(&m, threads, iters.max(64)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
