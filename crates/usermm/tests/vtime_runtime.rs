//! The virtual-time runtime as a runtime: determinism (also on a loaded host), contexts,
//! joins and scopes, panics and deadlocks, the hooks outside a run.

mod vtime_support;

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use usermm::vtime::{self, hooks, Mode, Profile, Runtime};
use vtime_support::*;

type Trace = Vec<(usize, &'static str, u64)>;

/// A bit of everything: spinlock, mutex and rwsem contention, a downgrade, a hammered line,
/// a condition variable, sleeps, SMT siblings, two contexts sharing a CPU.
fn mixed(rt: &Runtime) -> Trace {
    let trace = RefCell::new(Vec::new());
    let ev = |what: &'static str| {
        trace
            .borrow_mut()
            .push((vtime::current_cpu(), what, vtime::now()))
    };
    let ready = Cell::new(false);
    rt.run(0, || {
        vtime::scope(|s| {
            for cpu in [1usize, 9, 17, 2] {
                let ev = &ev;
                s.spawn_named(cpu, format!("w{cpu}"), move || {
                    for i in 0..20u64 {
                        lock(1, &SPIN);
                        vtime::work(100 + cpu as u64);
                        unlock(1, &SPIN);
                        hooks::line_rmw(0x10, &LINE, &LINE);
                        if i % 5 == 0 {
                            lock(2, &MUTEX);
                            vtime::work(300);
                            ev("mutex");
                            unlock(2, &MUTEX);
                        }
                        read_lock(3);
                        vtime::work(50);
                        read_unlock(3);
                    }
                    ev("done");
                });
            }
            let (ev, ready) = (&ev, &ready);
            s.spawn_named(3, "writer", move || {
                for _ in 0..5 {
                    hooks::lock_acquire(3, &RWSEM, Mode::Exclusive);
                    vtime::work(400);
                    hooks::lock_downgrade(3, &RWSEM);
                    vtime::work(200);
                    read_unlock(3);
                    vtime::sleep(700);
                }
                lock(4, &MUTEX);
                ready.set(true);
                hooks::cv_notify(5, true);
                unlock(4, &MUTEX);
                ev("writer done");
            });
            // Shares CPU 1 with w1: runs when w1 blocks.
            s.spawn_named(1, "waiter", move || {
                lock(4, &MUTEX);
                while !ready.get() {
                    hooks::cv_wait(5, 4, &MUTEX);
                }
                unlock(4, &MUTEX);
                ev("woken");
            });
        });
    });
    trace.into_inner()
}

#[test]
fn two_runs_of_a_mixed_scenario_are_identical() {
    let (rt1, rt2) = (rt(), rt());
    let (t1, t2) = (mixed(&rt1), mixed(&rt2));
    assert_eq!(t1, t2);
    let (r1, r2) = (rt1.report(), rt2.report());
    assert_eq!(r1, r2);
    assert_eq!(
        serde_json::to_string(&r1).unwrap(),
        serde_json::to_string(&r2).unwrap()
    );
    // The scenario did what it says.
    assert!(r1.lock("test.spin", Mode::Exclusive).unwrap().contentions > 0);
    assert!(r1.lock("test.rwsem", Mode::Shared).unwrap().contentions > 0);
    assert!(r1.line("test.line").unwrap().bounces > 0);
    assert_eq!(t1.iter().filter(|e| e.1 == "done").count(), 4);
    assert!(t1.iter().any(|e| e.1 == "woken"));
    assert_eq!(r1.time, "modelled (profile test-2s)");
}

#[test]
fn a_loaded_host_changes_nothing() {
    let quiet = rt();
    let expect = (mixed(&quiet), quiet.report());
    // A sibling host thread spins on the other core (and this one) while we run again.
    let stop = Arc::new(AtomicBool::new(false));
    let hog = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut x = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                std::hint::black_box(x);
            }
        })
    };
    let mut got = Vec::new();
    for _ in 0..3 {
        let loaded = rt();
        got.push((mixed(&loaded), loaded.report()));
    }
    stop.store(true, Ordering::Relaxed);
    hog.join().unwrap();
    for g in got {
        assert_eq!(g, expect);
    }
}

#[test]
fn runs_continue_the_clock_and_accumulate_statistics() {
    let rt = rt();
    let a = rt.run(0, || {
        vtime::work(1000);
        vtime::now()
    });
    let b = rt.run(5, vtime::now);
    assert_eq!((a, b, rt.end_ns()), (1000, 1000, 1000));
    rt.run(5, || vtime::work(10));
    let r = rt.report();
    assert_eq!(
        (
            r.end_ns,
            r.cpus[0].time.busy_ns,
            r.cpus[5].time.busy_ns,
            r.contexts.len()
        ),
        (1010, 1000, 10, 3)
    );
}

#[test]
fn join_returns_results_and_detached_contexts_finish_before_run_returns() {
    let rt = rt();
    let finished = Cell::new(0);
    let h = rt.run(0, || {
        let detached = vtime::spawn(1, || {
            vtime::sleep(10_000);
            7
        });
        let joined = vtime::spawn_named(2, "j", || 6).join();
        assert_eq!(joined, 6);
        vtime::scope(|s| {
            for cpu in 3..6 {
                let finished = &finished;
                s.spawn(cpu, move || finished.set(finished.get() + 1));
            }
        });
        assert_eq!(finished.get(), 3);
        detached
    });
    // The run waited for the detached context; its handle works after the run.
    assert_eq!(rt.end_ns(), 10_000);
    assert_eq!(h.join(), 7);
    let names: Vec<_> = rt
        .report()
        .contexts
        .iter()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(names[..3], ["main", "ctx1", "j"]);
}

#[test]
fn many_short_contexts_reuse_stacks() {
    let rt = rt();
    let sum = rt.run(0, || {
        let mut sum = 0;
        for round in 0..50u64 {
            let hs: Vec<_> = (0..20u64)
                .map(|i| vtime::spawn((i % 32) as usize, move || round * i))
                .collect();
            sum += hs.into_iter().map(|h| h.join()).sum::<u64>();
        }
        sum
    });
    assert_eq!(sum, (0..50u64).sum::<u64>() * (0..20u64).sum::<u64>());
    assert_eq!(rt.report().contexts.len(), 1001);
}

#[test]
fn a_panic_in_a_context_propagates_out_of_run_with_its_payload() {
    let rt = rt();
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.run(0, || {
            vtime::spawn(1, || {
                lock(1, &MUTEX);
                vtime::sleep(10_000);
                unlock(1, &MUTEX);
            });
            vtime::spawn(2, || {
                vtime::sleep(10);
                lock(1, &MUTEX); // blocked when the panic comes
            });
            vtime::sleep(500);
            panic!("boom {}", std::hint::black_box(42));
        })
    }));
    let payload = r.unwrap_err();
    assert_eq!(payload.downcast_ref::<String>().unwrap(), "boom 42");
    assert!(!vtime::in_run() && !hooks::active());
    // The runtime refuses more runs; a new one works.
    let again = catch_unwind(AssertUnwindSafe(|| rt.run(0, || ())));
    let msg = again.unwrap_err().downcast::<&str>().unwrap();
    assert!(msg.contains("earlier run of this runtime failed"), "{msg}");
    assert_eq!(vtime_support::rt().run(0, || 5), 5);
}

#[test]
fn a_panic_in_a_child_context_ends_the_run() {
    let rt = rt();
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.run(0, || {
            vtime::scope(|s| {
                s.spawn(4, || {
                    vtime::work(100);
                    panic!("child");
                });
                s.spawn(5, || vtime::sleep(1_000_000));
            })
        })
    }));
    assert_eq!(*r.unwrap_err().downcast::<&str>().unwrap(), "child");
    assert!(!vtime::in_run());
}

#[test]
fn a_scope_joins_its_contexts_before_resuming_its_bodys_panic() {
    let rt = rt();
    let (caught, child_done, now) = rt.run(0, || {
        let flag = Cell::new(false);
        let r = catch_unwind(AssertUnwindSafe(|| {
            vtime::scope(|s| {
                s.spawn(1, || {
                    vtime::sleep(1000);
                    flag.set(true);
                });
                panic!("scope body");
            })
        }));
        (r.is_err(), flag.get(), vtime::now())
    });
    // The body panicked at 0; the scope waited for the child (ends at 1000) and woke (+W).
    assert_eq!((caught, child_done, now), (true, true, 1000 + W));
}

#[test]
fn a_deadlock_panics_naming_every_blocked_context() {
    let rt = rt();
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.run(0, || {
            vtime::scope(|s| {
                s.spawn_named(1, "a", || {
                    lock(1, &MUTEX);
                    vtime::sleep(100);
                    lock(2, &MUTEX);
                });
                s.spawn_named(2, "b", || {
                    lock(2, &MUTEX);
                    vtime::sleep(100);
                    lock(1, &MUTEX);
                });
            })
        })
    }));
    let msg = *r.unwrap_err().downcast::<String>().unwrap();
    assert!(msg.starts_with("vtime: deadlock at "), "{msg}");
    assert!(msg.contains("3 blocked"), "{msg}");
    assert!(
        msg.contains("ctx 1 `a` (cpu1)") && msg.contains("ctx 2 `b` (cpu2)"),
        "{msg}"
    );
    assert!(
        msg.contains("waits for test.mutex 0x2 (Exclusive), held by ctx 2 `b`"),
        "{msg}"
    );
    assert!(
        msg.contains("waits for test.mutex 0x1 (Exclusive), held by ctx 1 `a`"),
        "{msg}"
    );
    assert!(
        msg.contains("`main` (cpu0) at 0 ns joins ctx 1 `a`"),
        "{msg}"
    );
}

#[test]
fn a_spinner_behind_a_context_waiting_for_its_cpu_is_a_deadlock_too() {
    // Two contexts on CPU 0: the first spins on a lock the second holds, but the second can
    // only run when the first gives the CPU up (run-to-block). The kernel forbids this shape
    // (no sleeping with a spinlock); the model reports it.
    let rt = rt();
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.run(1, || {
            vtime::spawn_named(0, "holder", || {
                lock(1, &SPIN);
                lock(2, &MUTEX); // sleeps: CPU 0 is free for the spinner
                unlock(2, &MUTEX);
                unlock(1, &SPIN);
            });
            vtime::spawn_named(0, "spinner", || {
                vtime::work(1);
                lock(1, &SPIN);
                unlock(1, &SPIN);
            });
            lock(2, &MUTEX);
            vtime::sleep(10);
            unlock(2, &MUTEX);
        })
    }));
    let msg = *r.unwrap_err().downcast::<String>().unwrap();
    assert!(
        msg.contains("`holder` (cpu0) at ")
            && msg.contains("waits for its CPU, occupied by ctx 2 `spinner`"),
        "{msg}"
    );
}

#[test]
fn misuse_is_refused_with_a_clear_panic() {
    let rt = rt();
    let msg = |r: std::thread::Result<()>| -> String {
        let e = r.unwrap_err();
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap()
    };
    let m = msg(catch_unwind(AssertUnwindSafe(|| {
        vtime::spawn(0, || ());
    })));
    assert_eq!(m, "vtime::spawn called outside a virtual run");
    let m = msg(catch_unwind(AssertUnwindSafe(|| rt.run(32, || ()))));
    assert_eq!(m, "vtime: cpu 32 is not one of the run's 32 CPUs");
    let m = msg(catch_unwind(AssertUnwindSafe(|| {
        let inner = vtime_support::rt();
        rt.run(0, || inner.run(0, || ()))
    })));
    assert!(m.contains("inside a run"), "{m}");
    let m = msg(catch_unwind(AssertUnwindSafe(|| {
        vtime::now();
    })));
    assert_eq!(m, "vtime::now called outside a virtual run");
}

#[test]
fn hooks_outside_a_run_are_wall_mode_answers() {
    assert!(!hooks::active());
    assert_eq!(
        hooks::lock_acquire(1, &SPIN, Mode::Exclusive),
        Default::default()
    );
    assert_eq!(
        hooks::lock_try_acquire(1, &SPIN, Mode::Shared),
        Some(Default::default())
    );
    hooks::lock_release(1, &SPIN, Mode::Exclusive);
    hooks::lock_downgrade(1, &RWSEM);
    hooks::lock_forget(1);
    hooks::line_rmw(1, &LINE, &LINE);
    hooks::line_forget(1);
    hooks::cv_wait(1, 2, &MUTEX);
    hooks::cv_notify(1, true);
    hooks::charge(vtime::Cost::ZapPte, 10);
    vtime::work(10);
    vtime::sync_point();
    assert_eq!(hooks::now_ns(), None);
    assert_eq!(hooks::thread_cpu_ns(), None);
    assert!(!hooks::sleep_ns(10));
    // And inside one, they answer.
    let rt = rt();
    rt.run(0, || {
        assert!(hooks::active() && vtime::in_run());
        assert_eq!(hooks::now_ns(), Some(0));
    });
}

#[test]
fn thread_cpu_time_is_busy_plus_spin() {
    let rt = rt();
    let t = rt.run(31, || {
        vtime::scope(|s| {
            s.spawn(0, || {
                lock(1, &SPIN);
                vtime::work(1000);
                unlock(1, &SPIN);
            });
            s.spawn(1, || {
                lock(1, &SPIN);
                unlock(1, &SPIN);
                hooks::thread_cpu_ns().unwrap()
            })
            .join()
        })
    });
    // Spun from 0 to U + 1000, then the hand-over.
    assert_eq!(t, U + 1000 + H_SOCK);
}

#[test]
fn new_rejects_cpus_and_nodes_that_do_not_fit_the_profile() {
    let p = Arc::new(Profile::builtin("haswell-ep-2s").unwrap());
    let e = Runtime::new(Arc::clone(&p), 73, 2).unwrap_err().to_string();
    assert_eq!(
        e,
        "cpus: 73 CPUs, but the machine has 72 hardware threads (profile haswell-ep-2s)"
    );
    let e = Runtime::new(Arc::clone(&p), 8, 0).unwrap_err().to_string();
    assert_eq!(
        e,
        "nodes: 0 nodes; must be between 1 and 1024 (profile haswell-ep-2s)"
    );
    let e = Runtime::new(Arc::clone(&p), 8, 1025)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("nodes: 1025 nodes"), "{e}");
    // Fake NUMA: more nodes than sockets is fine.
    let rt = Runtime::new(Arc::clone(&p), 72, 8).unwrap();
    assert_eq!(rt.placement().socket_of_node(7), 1);
    assert_eq!(rt.report().nr_nodes, 8);
    // ... and more nodes than CPUs (MAX_NUMNODES 1024), emulated as numa=fake=1024 does: each
    // CPU on its socket's first node, node n the memory of socket n % 2.
    let rt = Runtime::new(p, 72, 1024).unwrap();
    let pl = rt.placement();
    assert_eq!(
        (
            pl.node_of(0),
            pl.node_of(35),
            pl.node_of(36),
            pl.node_of(71)
        ),
        (0, 0, 1, 1)
    );
    assert_eq!(pl.socket_of_node(13), 1);
    assert_eq!(pl.socket_of_node(1022), 0);
    assert_eq!(rt.report().nr_nodes, 1024);
}

#[test]
fn an_unpriced_lock_class_is_named_in_the_panic() {
    static ODD: vtime::LockClass = vtime::LockClass::new("odd_lock", vtime::WaitKind::Spin);
    let rt = rt();
    let r = catch_unwind(AssertUnwindSafe(|| rt.run(0, || lock(1, &ODD))));
    let msg = *r.unwrap_err().downcast::<String>().unwrap();
    assert_eq!(
        msg,
        "vtime: lock class `odd_lock` has no price in profile test-2s (add [locks.\"odd_lock\"])"
    );
}
