//! What virtual time costs the host: a hook outside a run, a synchronisation point on the fast
//! path (no switch), a context switch, a lock hand-over between 8 contexts, and — for the
//! ratio — a hand-off between two host threads through a mutex and condition variable (what a
//! thread-per-CPU design would pay at every synchronisation point; docs/two-clocks.md).
//!
//! `cargo bench -p usermm --bench vtime`
//!
//! Wall-clock figures move with the host's load (it is shared); instruction counts do not.
//! `VTIME_BENCH_ONCE=<scenario>:<n>` runs one scenario once with `n` iterations and exits, so
//! that `valgrind --tool=callgrind` at two values of `n` gives exact instructions per operation:
//!
//! ```text
//! B=$(ls -t target/release/deps/vtime-* | grep -v '\.d$' | head -1)
//! for n in 100000 200000; do VTIME_BENCH_ONCE=switch:$n valgrind --tool=callgrind \
//!     --callgrind-out-file=/dev/null $B 2>&1 | grep Collected; done
//! ```
//! Scenarios: `outside`, `sync`, `lock`, `charge`, `switch`, `contended`.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use criterion::{criterion_group, BatchSize, Criterion, Throughput};
use usermm::vtime::{self, hooks, LockClass, Mode, Profile, Runtime, WaitKind};

static ZONE: LockClass = LockClass::new("zone.lock", WaitKind::Spin);

fn runtime() -> Runtime {
    Runtime::new(Arc::new(Profile::builtin("haswell-ex-4s").unwrap()), 16, 4).unwrap()
}

/// Times `f` inside one run; `iters` is what `f` loops over.
fn in_run(iters: u64, f: impl Fn(u64) + Copy + 'static) -> Duration {
    let rt = runtime();
    let t = Instant::now();
    rt.run(0, move || f(iters));
    t.elapsed()
}

fn hooks_outside_a_run(c: &mut Criterion) {
    let mut g = c.benchmark_group("vtime");
    g.bench_function("hook_outside_run", |b| {
        b.iter(|| {
            std::hint::black_box(hooks::lock_acquire(
                std::hint::black_box(0x1000),
                &ZONE,
                Mode::Exclusive,
            ))
        })
    });
    g.finish();
}

fn fast_path(c: &mut Criterion) {
    let mut g = c.benchmark_group("vtime");
    g.throughput(Throughput::Elements(1));
    // One context below a sleeping one: every synchronisation point is one compare with the
    // ready heap's top, no switch.
    g.bench_function("sync_point_fast_path", |b| {
        b.iter_custom(|iters| {
            in_run(iters, |n| {
                vtime::spawn(1, || vtime::sleep(u64::MAX / 4_000));
                for _ in 0..n {
                    vtime::sync_point();
                }
            })
        })
    });
    g.bench_function("lock_unlock_uncontended", |b| {
        b.iter_custom(|iters| {
            in_run(iters, |n| {
                vtime::spawn(1, || vtime::sleep(u64::MAX / 4_000));
                for _ in 0..n {
                    hooks::lock_acquire(0x40, &ZONE, Mode::Exclusive);
                    hooks::lock_release(0x40, &ZONE, Mode::Exclusive);
                }
            })
        })
    });
    g.bench_function("charge", |b| {
        b.iter_custom(|iters| {
            in_run(iters, |n| {
                for _ in 0..n {
                    vtime::charge(vtime::Cost::ZapPte, 1);
                }
            })
        })
    });
    g.finish();
}

fn switches(c: &mut Criterion) {
    let mut g = c.benchmark_group("vtime");
    g.throughput(Throughput::Elements(1));
    // Two contexts leapfrog: each synchronisation point parks one and resumes the other (one
    // resume = a switch into a context and back to the scheduler).
    g.bench_function("switch_ping_pong", |b| {
        b.iter_custom(|iters| {
            in_run(iters, |n| {
                vtime::scope(|s| {
                    for cpu in [1, 2] {
                        s.spawn(cpu, move || {
                            for _ in 0..n / 2 {
                                vtime::work(1);
                                vtime::sync_point();
                            }
                        });
                    }
                })
            })
        })
    });
    g.finish();

    let mut g = c.benchmark_group("vtime");
    g.sample_size(10);
    const N: u64 = 1_000_000;
    g.throughput(Throughput::Elements(8 * N));
    // 8 contexts × 1 M acquisitions of one spinlock: every acquisition is a FIFO hand-over.
    g.bench_function("lock_8x1M_contended", |b| {
        b.iter_batched(
            runtime,
            |rt| {
                rt.run(0, || {
                    vtime::scope(|s| {
                        for cpu in 1..=8 {
                            s.spawn(cpu, || {
                                for _ in 0..N {
                                    hooks::lock_acquire(0x80, &ZONE, Mode::Exclusive);
                                    vtime::work(20);
                                    hooks::lock_release(0x80, &ZONE, Mode::Exclusive);
                                }
                            });
                        }
                    })
                });
                rt
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

/// The alternative the design rejects: two host threads handing a token back and forth
/// through a mutex and condition variable.
fn host_handoff(c: &mut Criterion) {
    let mut g = c.benchmark_group("host");
    g.throughput(Throughput::Elements(1));
    g.bench_function("mutex_condvar_handoff", |b| {
        b.iter_custom(|iters| {
            let pair = Arc::new((Mutex::new(0u64), Condvar::new()));
            let other = {
                let pair = Arc::clone(&pair);
                std::thread::spawn(move || {
                    let (m, cv) = &*pair;
                    let mut turn = m.lock().unwrap();
                    for i in 0..iters {
                        while *turn != 2 * i + 1 {
                            turn = cv.wait(turn).unwrap();
                        }
                        *turn += 1;
                        cv.notify_one();
                    }
                })
            };
            let (m, cv) = &*pair;
            let t = Instant::now();
            let mut turn = m.lock().unwrap();
            for i in 0..iters {
                *turn = 2 * i + 1;
                cv.notify_one();
                while *turn != 2 * i + 2 {
                    turn = cv.wait(turn).unwrap();
                }
            }
            drop(turn);
            let e = t.elapsed();
            other.join().unwrap();
            // Two hand-offs per iteration.
            e / 2
        })
    });
    g.finish();
}

/// One scenario, `n` operations, no measurement (see the module doc).
fn once(scenario: &str, n: u64) {
    match scenario {
        "outside" => {
            for i in 0..n {
                std::hint::black_box(hooks::lock_acquire(
                    std::hint::black_box(i as usize),
                    &ZONE,
                    Mode::Exclusive,
                ));
            }
        }
        "sync" => {
            in_run(n, |n| {
                vtime::spawn(1, || vtime::sleep(u64::MAX / 4_000));
                for _ in 0..n {
                    vtime::sync_point();
                }
            });
        }
        "lock" => {
            in_run(n, |n| {
                vtime::spawn(1, || vtime::sleep(u64::MAX / 4_000));
                for _ in 0..n {
                    hooks::lock_acquire(0x40, &ZONE, Mode::Exclusive);
                    hooks::lock_release(0x40, &ZONE, Mode::Exclusive);
                }
            });
        }
        "charge" => {
            in_run(n, |n| {
                for _ in 0..n {
                    vtime::charge(vtime::Cost::ZapPte, 1);
                }
            });
        }
        "switch" => {
            in_run(n, |n| {
                vtime::scope(|s| {
                    for cpu in [1, 2] {
                        s.spawn(cpu, move || {
                            for _ in 0..n / 2 {
                                vtime::work(1);
                                vtime::sync_point();
                            }
                        });
                    }
                })
            });
        }
        "contended" => {
            in_run(n, |n| {
                vtime::scope(|s| {
                    for cpu in 1..=8 {
                        s.spawn(cpu, move || {
                            for _ in 0..n / 8 {
                                hooks::lock_acquire(0x80, &ZONE, Mode::Exclusive);
                                vtime::work(20);
                                hooks::lock_release(0x80, &ZONE, Mode::Exclusive);
                            }
                        });
                    }
                })
            });
        }
        other => panic!("VTIME_BENCH_ONCE: unknown scenario {other}"),
    }
}

criterion_group!(
    benches,
    hooks_outside_a_run,
    fast_path,
    switches,
    host_handoff
);

fn main() {
    if let Ok(spec) = std::env::var("VTIME_BENCH_ONCE") {
        let (scenario, n) = spec
            .split_once(':')
            .expect("VTIME_BENCH_ONCE=<scenario>:<n>");
        once(
            scenario,
            n.parse().expect("VTIME_BENCH_ONCE: n is a number"),
        );
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
