//! Several threads, each bound to its own emulated CPU, allocate, write, check and free percpu
//! objects at once (atomic requests mixed in) while the balance work runs on its worker. Each
//! thread's objects keep their bytes in every unit; at the end nothing leaks and every invariant
//! holds. 3 000 steps per thread, times `USERMM_TEST_SCALE`.

use std::sync::Arc;
use std::thread;

use usermm::config::MachineConfig;
use usermm::page_alloc::Gfp;
use usermm::pcpu::{PcpuAllocator, PcpuError, PcpuPtr};
use usermm::{CpuId, Machine};

const THREADS: u16 = 4;

fn machine(depopulate: bool) -> (Arc<Machine>, Arc<PcpuAllocator>) {
    let mut cfg = MachineConfig {
        mem: 128 << 20,
        cpus: THREADS,
        ..Default::default()
    };
    cfg.pcpu.unit_size = 64 << 10;
    cfg.pcpu.static_size = 16 << 10;
    cfg.pcpu.reserved_size = 4 << 10;
    cfg.pcpu.depopulate = depopulate;
    let m = Machine::new(cfg.clone()).unwrap();
    let p = PcpuAllocator::new(&cfg.pcpu, m.cpus().clone(), m.phys_arc()).unwrap();
    (m, Arc::new(p))
}

/// A tiny xorshift, so each thread's sequence is fixed.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn worker(p: &PcpuAllocator, cpu: CpuId, iters: usize, seed: u64) {
    // xorshift needs a non-zero state.
    let mut rng = (seed ^ (cpu.0 as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1;
    let mut live: Vec<(PcpuPtr, u8)> = Vec::new();
    for i in 0..iters {
        let r = next(&mut rng);
        if live.len() < 40 && !r.is_multiple_of(3) {
            let size = [8usize, 24, 200, 1000, 3000][(r >> 8) as usize % 5];
            let gfp = if r.is_multiple_of(7) {
                Gfp::NOWAIT
            } else {
                Gfp::KERNEL
            };
            match p.alloc_gfp(cpu, size, 8, gfp) {
                Ok(a) => {
                    let tag = (i as u8).wrapping_mul(13).wrapping_add(cpu.0 as u8);
                    for u in 0..THREADS {
                        p.write(a, CpuId(u), 0, &vec![tag ^ u as u8; a.size()])
                            .unwrap();
                    }
                    live.push((a, tag));
                }
                Err(PcpuError::NoMem) => assert_eq!(gfp, Gfp::NOWAIT),
                Err(e) => panic!("{e}"),
            }
        } else if !live.is_empty() {
            let (a, tag) = live.swap_remove((r >> 16) as usize % live.len());
            for u in 0..THREADS {
                let mut buf = vec![0; a.size()];
                p.read(a, CpuId(u), 0, &mut buf).unwrap();
                assert!(
                    buf.iter().all(|&b| b == tag ^ u as u8),
                    "{cpu}: object corrupted in unit {u}"
                );
            }
            p.free(cpu, a).unwrap();
        }
    }
    for (a, _) in live {
        p.free(cpu, a).unwrap();
    }
}

fn run(depopulate: bool) {
    let (m, p) = machine(depopulate);
    let before = p.stats().counters.nr_cur_alloc;
    // 3 000 steps per thread, times USERMM_TEST_SCALE, from USERMM_TEST_SEED.
    let iters = usermm_testscale::scaled(3000);
    let name = if depopulate {
        "pcpu_concurrent::patched"
    } else {
        "pcpu_concurrent::vanilla"
    };
    usermm_testscale::announce(name);
    let seed = usermm_testscale::seed_for(name);
    let handles: Vec<_> = (0..THREADS)
        .map(|c| {
            let p = Arc::clone(&p);
            thread::spawn(move || worker(&p, CpuId(c), iters as usize, seed))
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    p.validate_settled().unwrap();
    let s = p.stats();
    assert_eq!(s.counters.nr_cur_alloc, before);
    assert!(s.counters.nr_alloc > 1000);
    assert!(s.nr_free_chunks <= 2);
    drop(s);
    drop(p);
    m.validate().unwrap();
    usermm_testscale::report(name, u64::from(THREADS) * iters);
}

#[test]
fn concurrent_alloc_free_vanilla() {
    run(false);
}

#[test]
fn concurrent_alloc_free_patched() {
    run(true);
}
