//! Virtual time's arithmetic through the sync seam: the engine's own `SpinLock`, `Mutex`,
//! `PtLock`, `RwSem` (with `downgrade`), `SharedLine`, `Workqueue`, `thread` and `clock`, run in
//! a `vtime::Runtime`, give the model's exact formulas (`vtime/mod.rs`, "Resources"). Every
//! figure asserted is a model output, never a host timing.

mod vtime_support;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use usermm::sync::workqueue::Workers;
use usermm::sync::{clock, thread, Mutex, PtLock, RwSem, SharedLine, SpinLock, Workqueue};
use usermm::vtime::{self, Cost, Mode};
use usermm::CpuId;
use vtime_support::*;

/// N tasks on the given CPUs, each taking `lock` K times and holding it `h`; each task's end.
fn n_by_k<L: Sync>(cpus: &[u16], k: u64, h: u64, lock: &L, take: fn(&L, u64)) -> Vec<u64> {
    thread::scope(|s| {
        let hs: Vec<_> = cpus
            .iter()
            .map(|&cpu| {
                s.spawn_on(CpuId(cpu), move || {
                    for _ in 0..k {
                        take(lock, h);
                    }
                    clock::now().as_ns()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn spinlock_n_cpus_k_times_is_n_k_hold_plus_hand_over() {
    let (n, k, h) = (4u64, 50u64, 1000u64);
    let rt = rt();
    let lock = SpinLock::new(&SPIN, 0u64);
    let ends = rt.run(31, || {
        n_by_k(&[0, 1, 2, 3], k, h, &lock, |l, h| {
            let mut g = l.lock();
            vtime::work(h);
            *g += 1;
        })
    });
    let total = U + n * k * h + (n * k - 1) * H_SOCK;
    assert_eq!(*ends.iter().max().unwrap(), total);
    assert_eq!(
        ends,
        [
            total - 3 * (h + H_SOCK),
            total - 2 * (h + H_SOCK),
            total - (h + H_SOCK),
            total
        ]
    );
    let r = rt.report();
    let ls = r.lock("test.spin", Mode::Exclusive).unwrap();
    assert_eq!((ls.acquisitions, ls.contentions), (n * k, n * k - 1));
    assert_eq!(ls.holdtime_total_ns, n * k * h);
    assert_eq!(lock.lock().to_owned(), n * k, "the host lock excluded too");
}

#[test]
fn mutex_waiters_sleep_and_pay_the_wake_up() {
    let (n, k, h) = (4u64, 10u64, 1000u64);
    let rt = rt();
    let lock = Mutex::new(&MUTEX, 0u64);
    let ends = rt.run(31, || {
        n_by_k(&[0, 1, 2, 3], k, h, &lock, |l, h| {
            let mut g = l.lock();
            vtime::work(h);
            *g += 1;
        })
    });
    assert_eq!(
        *ends.iter().max().unwrap(),
        U + n * k * h + (n * k - 1) * (W + H_SOCK)
    );
    let r = rt.report();
    assert!(r.cpus[..4].iter().all(|c| c.time.spin_ns == 0));
}

#[test]
fn ptlock_is_a_spinlock_in_virtual_time() {
    let (n, k, h) = (2u64, 30u64, 500u64);
    let rt = rt();
    let ptl = PtLock::new();
    let ends = rt.run(31, || {
        // CPU 0 on socket 0, CPU 16 on socket 1: every hand-over crosses sockets.
        n_by_k(&[0, 16], k, h, &ptl, |l, h| {
            let _g = l.lock(&SPIN);
            vtime::work(h);
        })
    });
    assert_eq!(
        *ends.iter().max().unwrap(),
        U + n * k * h + (n * k - 1) * H_REMOTE
    );
}

#[test]
fn disjoint_spinlocks_take_k_times_u_plus_h() {
    let (k, h) = (100u64, 700u64);
    let rt = rt();
    let locks: Vec<SpinLock<()>> = (0..6).map(|_| SpinLock::new(&SPIN, ())).collect();
    let ends = rt.run(31, || {
        thread::scope(|s| {
            let hs: Vec<_> = locks
                .iter()
                .enumerate()
                .map(|(cpu, l)| {
                    s.spawn_on(CpuId(cpu as u16), move || {
                        for _ in 0..k {
                            let _g = l.lock();
                            vtime::work(h);
                        }
                        clock::now().as_ns()
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        })
    });
    assert_eq!(ends, vec![k * (U + h); 6]);
    let r = rt.report();
    let ls = r.lock("test.spin", Mode::Exclusive).unwrap();
    assert_eq!((ls.contentions, ls.acq_bounces), (0, 0));
}

#[test]
fn rwsem_downgrade_hands_the_lock_to_queued_readers_and_a_waiting_writer_blocks_readers() {
    let rt = rt();
    let sem = RwSem::new(&RWSEM, 0u64);
    let log = parking_lot::Mutex::new(Vec::new());
    let at = |what: &'static str| log.lock().push((what, clock::now().as_ns()));
    rt.run(31, || {
        thread::scope(|s| {
            // W1 (cpu 0): write at 0, downgrade at U + 1000, read 5000 more.
            s.spawn_on(CpuId(0), || {
                let mut w = sem.write();
                at("w1 write");
                *w += 1;
                vtime::work(1000);
                let r = w.downgrade();
                vtime::work(5000);
                drop(r);
                at("w1 up_read");
            });
            for (cpu, delay, name) in [(1u16, 100u64, "r1"), (2, 200, "r2")] {
                let (at, sem) = (&at, &sem);
                s.spawn_on(CpuId(cpu), move || {
                    thread::sleep(std::time::Duration::from_nanos(delay));
                    let r = sem.read();
                    at(name);
                    assert_eq!(*r, 1, "the writer's update is visible to readers");
                    vtime::work(200);
                });
            }
            s.spawn_on(CpuId(3), || {
                thread::sleep(std::time::Duration::from_nanos(300));
                let mut w = sem.write();
                at("w2 write");
                *w += 1;
                vtime::work(1000);
            });
            s.spawn_on(CpuId(4), || {
                thread::sleep(std::time::Duration::from_nanos(4000));
                let _r = sem.read();
                at("r3");
                vtime::work(100);
            });
        })
    });
    // The formulas of tests/vtime_model.rs's hook-level case, through the seam's RwSem.
    let down = U + 1000;
    let r1 = down + W + U + T_SOCK;
    let r2 = r1 + U + T_SOCK;
    let w1_up = down + 5000 + T_SOCK;
    let w2 = w1_up + W + H_SOCK;
    let r3 = w2 + 1000 + W + U + T_SOCK;
    assert_eq!(
        log.into_inner(),
        [
            ("w1 write", U),
            ("r1", r1),
            ("r2", r2),
            ("w1 up_read", w1_up),
            ("w2 write", w2),
            ("r3", r3)
        ]
    );
    let r = rt.report();
    let w = r.lock("test.rwsem", Mode::Exclusive).unwrap();
    assert_eq!(
        (w.acquisitions, w.contentions, w.holdtime_total_ns),
        (2, 1, 2000)
    );
    let rd = r.lock("test.rwsem", Mode::Shared).unwrap();
    assert_eq!((rd.acquisitions, rd.contentions), (4, 3));
}

#[test]
fn a_shared_line_hammered_by_n_cpus_serialises_every_rmw() {
    let (n, k) = (4u64, 100u64);
    let rt = rt();
    let line = SharedLine::new(&LINE, AtomicU64::new(0));
    // Work after each RMW: the next one comes after the CPU's copy is gone (no kept RMW).
    let ends = rt.run(31, || {
        n_by_k(&[0, 1, 2, 3], k, T_SOCK, &line, |l, h| {
            l.fetch_add(1, Relaxed);
            vtime::work(h);
        })
    });
    assert_eq!(
        *ends.iter().max().unwrap(),
        A + (n * k - 1) * (A + T_SOCK) + T_SOCK
    );
    assert_eq!(line.load(Relaxed), n * k);
    let r = rt.report();
    let l = r.line("test.line").unwrap();
    assert_eq!((l.rmws, l.bounces, l.kept), (n * k, n * k - 1, 0));
    assert_eq!(l.time_ns + n * k * T_SOCK, r.busy_ns());
}

/// The engine's `Workqueue` with `max_active` M over J equal jobs of `d`, in a profile where
/// locks and line transfers are free, so that only the jobs, the queuer's wake-up cost and the
/// wake-up latency take time. Returns (flush end, queue start, each worker's busy time).
fn workqueue(m: usize, j: u64, d: u64) -> (u64, u64, Vec<u64>) {
    let rt = rt_with(|s| {
        for t in [
            &mut s.transfer.smt_sibling,
            &mut s.transfer.same_socket,
            &mut s.transfer.other_socket,
        ] {
            t.ns = Some(0.0);
            t.cycles = None;
            t.formula = Some("0".into());
        }
        let wq = s.locks.get_mut("workqueue").unwrap();
        (wq.acquire_ns, wq.acquire_cycles) = (Some(0.0), None);
        wq.formula = Some("0".into());
    });
    // Workers on CPUs 1..=M: each its own core of socket 0 (CPU 0 is the queuer's).
    let cpus = (1..=m as u16).map(CpuId).collect();
    let wq = Workqueue::with_workers("test_wq", m, cpus, Workers::Virtual);
    let ran = Arc::new(AtomicU64::new(0));
    let (end, t0) = rt.run(0, || {
        // Warm-up: the first queue starts the workers; let them all go idle.
        wq.queue(|_| {}).wait();
        thread::sleep(std::time::Duration::from_micros(100));
        let t0 = clock::now().as_ns();
        for _ in 0..j {
            let ran = Arc::clone(&ran);
            wq.queue(move |_| {
                vtime::work(d);
                ran.fetch_add(1, Relaxed);
            });
        }
        wq.flush();
        let end = clock::now().as_ns();
        wq.end_run();
        (end, t0)
    });
    assert_eq!(ran.load(Relaxed), j);
    let stats = wq.stats();
    assert_eq!(stats.items_done, j + 1);
    let busy = stats.workers.iter().map(|w| w.cpu_ns).collect();
    (end, t0, busy)
}

#[test]
fn workqueue_of_max_active_m_over_j_jobs() {
    let c_wake = test_profile().cost_ns(Cost::WorkqueueWake) as u64;
    let d = 10_000;
    for (m, j) in [(1usize, 5u64), (2, 8), (4, 12), (4, 10), (3, 2)] {
        let (end, t0, busy) = workqueue(m, j, d);
        // Every queue finds idle workers and pays the wake-up c: the i-th woken worker runs at
        // A + i·c, A = t0 + c + W, and the workers drain the jobs in ceil(J/M) rounds of d. The
        // flusher is woken by the first completion of each round (the first worker's), runs W
        // later — after the rest of the round, (M-1)·c ≤ W — and goes back to sleep until the
        // last round: it returns at A + ceil(J/M)·d + W.
        assert!(d > W && (m as u64 - 1) * c_wake <= W);
        let expect = t0 + c_wake + W + j.div_ceil(m as u64) * d + W;
        assert_eq!(end, expect, "M={m} J={j}");
        // Every job's d is its worker's CPU time: the workers did all the work.
        assert_eq!(busy.iter().sum::<u64>(), j * d, "M={m} J={j}");
        assert_eq!(busy.iter().filter(|&&b| b > 0).count(), m.min(j as usize));
    }
}

#[test]
fn the_seam_clock_and_thread_cpu_time_are_virtual_in_a_run() {
    let rt = rt();
    let (t, cpu, slept) = rt.run(5, || {
        let t0 = clock::now();
        vtime::work(1234);
        let (c, t) = (clock::thread_cpu_ns(), t0.elapsed_ns());
        thread::sleep(std::time::Duration::from_micros(10));
        (t, c, clock::now().as_ns())
    });
    assert_eq!((t, cpu, slept), (1234, 1234, 1234 + 10_000));
}

#[test]
fn a_barrier_releases_every_task_when_the_last_arrives() {
    let rt = rt();
    let b = usermm::sync::Barrier::new(&MUTEX, 3);
    let ends = rt.run(31, || {
        n_by_k(&[0, 1, 2], 1, 0, &b, |b, _| {
            // Arrive at 1000·cpu: the last (CPU 2) arrives at 2000 and wakes the others.
            let cpu = vtime::current_cpu() as u64;
            vtime::work(1000 * cpu);
            b.wait();
        })
    });
    // Each arrival takes the barrier's mutex from the previous CPU (H). CPU 2 arrives last and
    // goes on; CPU 0 and 1 (asleep on the condition variable) wake W after its notify and
    // re-take the mutex in turn: CPU 1 finds it held by CPU 0 and sleeps once more.
    let last = 2000 + H_SOCK;
    assert_eq!(
        ends,
        [last + W + H_SOCK, last + 2 * (W + H_SOCK), last],
        "{ends:?}"
    );
}

/// The objects of [`a_slot_written_elsewhere_changes_no_figure`]'s scenario.
struct SlotObjects {
    a: SpinLock<u64>,
    b: SpinLock<u64>,
    c: SpinLock<u64>,
    line: SharedLine<AtomicU64>,
}

impl SlotObjects {
    fn new() -> Self {
        SlotObjects {
            a: SpinLock::new(&SPIN, 0),
            b: SpinLock::new(&SPIN, 0),
            c: SpinLock::new(&SPIN, 0),
            line: SharedLine::new(&LINE, AtomicU64::new(0)),
        }
    }

    /// A run that meets `c` on CPU 16 (socket 1) first, then `a` and `b` on CPU 0: the
    /// entries c, a, b in the run's table, each lock word left on a different CPU.
    fn first_run(&self, rt: &vtime::Runtime) {
        rt.run(31, || {
            thread::scope(|s| {
                s.spawn_on(CpuId(16), || {
                    drop(self.c.lock());
                    self.line.fetch_add(1, Relaxed);
                })
                .join()
                .unwrap();
                s.spawn_on(CpuId(0), || {
                    drop(self.a.lock());
                    drop(self.b.lock());
                })
                .join()
                .unwrap();
            })
        });
    }

    /// The run compared: CPU 16 holds `c` long while CPUs 1-4 take `a` and `b` in turn and
    /// hit the line. Each context's end.
    fn second_run(&self, rt: &vtime::Runtime) -> Vec<u64> {
        rt.run(31, || {
            thread::scope(|s| {
                s.spawn_on(CpuId(16), || {
                    let _g = self.c.lock();
                    vtime::work(50_000);
                });
                let hs: Vec<_> = (1..5u16)
                    .map(|cpu| {
                        s.spawn_on(CpuId(cpu), move || {
                            for i in 0..20u16 {
                                let l = if (i + cpu) % 2 == 0 { &self.a } else { &self.b };
                                let mut g = l.lock();
                                vtime::work(300);
                                *g += 1;
                                drop(g);
                                self.line.fetch_add(1, Relaxed);
                            }
                            clock::now().as_ns()
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            })
        })
    }
}

/// Regression for the flat lock table (`vtime/sched/table.rs`): a lock's or line's slot is
/// only a hint. Written by another machine's run (one that met the objects in another order,
/// so that the hints point at other locks' entries or past the table), left from a lock taken
/// outside any run, or from a run's forgotten lock whose entry a new lock took, it must not
/// change a figure: the run gives what the same run with fresh objects gives.
#[test]
fn a_slot_written_elsewhere_changes_no_figure() {
    let want_rt = rt();
    let fresh = SlotObjects::new();
    fresh.first_run(&want_rt);
    let want = fresh.second_run(&want_rt);
    let want_report = want_rt.report();
    assert!(
        want_report
            .lock("test.spin", Mode::Exclusive)
            .unwrap()
            .contentions
            > 0
    );

    let o = SlotObjects::new();
    // Taken and released outside any run: no run knows them.
    drop(o.a.lock());
    drop(o.c.lock());
    let (rt_a, rt_b) = (rt(), rt());
    o.first_run(&rt_a);
    // Another machine meets `a`, then `b`, and the line after a line of its own: every slot
    // now names an entry of the other machine's table. In `rt_a`'s, `a`'s names `c`'s entry
    // (held through the second run), `b`'s names `a`'s, the line's is past the end.
    let other = SlotObjects::new();
    rt_b.run(31, || {
        drop(o.a.lock());
        drop(o.b.lock());
        other.line.fetch_add(1, Relaxed);
        o.line.fetch_add(1, Relaxed);
    });
    assert_eq!(o.second_run(&rt_a), want);
    assert_eq!(rt_a.report(), want_report);

    // A lock that dies in a run frees its entry, and the next new lock takes it: the dead
    // lock's slot value, carried by a lock that never ran here, does not find it.
    let rt_c = rt();
    let (x, y) = (SpinLock::new(&SPIN, 0u64), Mutex::new(&MUTEX, 0u64));
    rt_c.run(0, || {
        let dying = SpinLock::new(&SPIN, 0u64);
        let g = dying.lock();
        drop(g);
        drop(dying);
        let g = y.lock();
        vtime::work(1000);
        drop(g);
        drop(x.lock());
    });
    let r = rt_c.report();
    assert_eq!(
        r.lock("test.spin", Mode::Exclusive).unwrap().acquisitions,
        2
    );
    assert_eq!(r.lock("test.spin", Mode::Exclusive).unwrap().contentions, 0);
    assert_eq!(
        r.lock("test.mutex", Mode::Exclusive).unwrap().acquisitions,
        1
    );
}

/// The flat lock table's hint checked against ground truth: a lock whose slot names another
/// lock's entry (written by another machine's run) is found by its address, so it is free
/// while the other lock is held, and the other lock's lock_stat is untouched.
#[test]
fn a_lock_whose_slot_names_a_held_lock_is_still_free() {
    let (held, free) = (Mutex::new(&MUTEX, ()), SpinLock::new(&SPIN, ()));
    let (rt_a, rt_b) = (rt(), rt());
    // rt_a's table: `held` first, `free` second.
    rt_a.run(0, || {
        drop(held.lock());
        drop(free.lock());
    });
    // rt_b's: `free` first, so its slot names `held`'s entry in rt_a.
    rt_b.run(0, || drop(free.lock()));
    let end = rt_a.run(0, || {
        thread::scope(|s| {
            s.spawn_on(CpuId(1), || {
                let _g = held.lock();
                vtime::work(100_000);
            });
            s.spawn_on(CpuId(2), || {
                let start = clock::now().as_ns();
                drop(free.lock());
                clock::now().as_ns() - start
            })
            .join()
            .unwrap()
        })
    });
    assert!(
        end < 100_000,
        "the free lock waited for the held one: {end} ns"
    );
    let r = rt_a.report();
    assert_eq!(r.lock("test.spin", Mode::Exclusive).unwrap().contentions, 0);
    assert_eq!(
        r.lock("test.spin", Mode::Exclusive).unwrap().acquisitions,
        2
    );
    assert_eq!(
        r.lock("test.mutex", Mode::Exclusive).unwrap().acquisitions,
        2
    );
}
