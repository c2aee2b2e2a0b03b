//! Virtual time's arithmetic on cases with known answers. Every figure asserted is a model
//! output (exact by construction), never a host timing. Formulas: `vtime/mod.rs`, "Resources".

mod vtime_support;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

use usermm::vtime::{self, hooks, Cost, Mode};
use vtime_support::*;

/// N workers each take one lock K times, hold `h`, nothing else; returns each worker's end.
fn one_lock(
    rt: &vtime::Runtime,
    cpus: &[usize],
    k: u64,
    h: u64,
    class: &'static usermm::vtime::LockClass,
) -> Vec<u64> {
    rt.run(31, || {
        vtime::scope(|s| {
            let hs: Vec<_> = cpus
                .iter()
                .map(|&cpu| {
                    s.spawn(cpu, move || {
                        for _ in 0..k {
                            lock(1, class);
                            vtime::work(h);
                            unlock(1, class);
                        }
                        vtime::now()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join()).collect()
        })
    })
}

#[test]
fn n_cpus_one_spinlock_take_n_k_hold_plus_hand_over() {
    let (n, k, h) = (4u64, 50u64, 1000u64);
    let rt = rt();
    let ends = one_lock(&rt, &[0, 1, 2, 3], k, h, &SPIN);
    // FIFO rotation 0,1,2,3,0,...: the first acquisition costs u (no previous owner), every
    // later one is a hand-over within the socket, H = u + T_sock·(1 + L).
    let total = U + n * k * h + (n * k - 1) * H_SOCK;
    assert_eq!(*ends.iter().max().unwrap(), total);
    // The last round goes 0,1,2,3: CPU 3 ends last, each earlier one H + h before the next.
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
    assert_eq!(ls.acquisitions, n * k);
    assert_eq!(ls.contentions, n * k - 1);
    assert_eq!(ls.acq_bounces, n * k - 1);
    assert_eq!(ls.con_bounces, n * k - 1);
    assert_eq!(
        (ls.holdtime_min_ns, ls.holdtime_max_ns, ls.holdtime_total_ns),
        (h, h, n * k * h)
    );
    assert_eq!(ls.wait, "spin");
    // Spinners keep their CPUs busy: each worker CPU is busy or spinning from 0 to its end.
    for (cpu, end) in ends.iter().enumerate() {
        let c = &r.cpus[cpu];
        assert_eq!(c.time.busy_ns + c.time.spin_ns, *end, "cpu{cpu}");
        assert!(c.time.spin_ns > 0);
    }
    // Busy time is the holds plus what each acquisition cost.
    let busy: u64 = r.cpus[..4].iter().map(|c| c.time.busy_ns).sum();
    assert_eq!(busy, n * k * h + U + (n * k - 1) * H_SOCK);
}

#[test]
fn hand_over_across_sockets_costs_the_remote_transfer() {
    let (k, h) = (20u64, 500u64);
    let rt = rt();
    // CPU 0 is socket 0, CPU 16 socket 1.
    let ends = one_lock(&rt, &[0, 16], k, h, &SPIN);
    assert_eq!(
        *ends.iter().max().unwrap(),
        U + 2 * k * h + (2 * k - 1) * H_REMOTE
    );
}

#[test]
fn sleeping_waiters_pay_the_wake_up_and_leave_their_cpus_idle() {
    let (n, k, h) = (4u64, 10u64, 1000u64);
    let rt = rt();
    let ends = one_lock(&rt, &[0, 1, 2, 3], k, h, &MUTEX);
    let total = U + n * k * h + (n * k - 1) * (W + H_SOCK);
    assert_eq!(*ends.iter().max().unwrap(), total);
    let r = rt.report();
    for (cpu, end) in ends.iter().enumerate() {
        let c = &r.cpus[cpu];
        assert_eq!(c.time.spin_ns, 0, "cpu{cpu}: sleepers do not spin");
        // Off its CPU while it waits: busy is its holds and acquisitions only.
        let hand_overs = if cpu == 0 { k - 1 } else { k };
        let first = if cpu == 0 { U } else { 0 };
        assert_eq!(
            c.time.busy_ns,
            k * h + first + hand_overs * H_SOCK,
            "cpu{cpu}"
        );
        assert_eq!(c.time.idle_ns, r.end_ns - c.time.busy_ns);
        assert!(*end <= r.end_ns);
    }
    assert_eq!(r.lock("test.mutex", Mode::Exclusive).unwrap().wait, "sleep");
}

#[test]
fn spin_and_sleep_waits_are_accounted_apart() {
    for (class, spin) in [(&SPIN, true), (&MUTEX, false)] {
        let rt = rt();
        rt.run(31, || {
            vtime::scope(|s| {
                s.spawn(0, || {
                    lock(7, class);
                    vtime::work(1000);
                    unlock(7, class);
                });
                s.spawn(1, || {
                    lock(7, class);
                    unlock(7, class);
                });
            })
        });
        let r = rt.report();
        // CPU 0 takes it at U, releases at U + 1000; CPU 1 queued at 0.
        let released = U + 1000;
        let (c1, ctx1) = (&r.cpus[1], &r.contexts[2]);
        assert_eq!(ctx1.cpu, 1);
        if spin {
            assert_eq!((c1.time.spin_ns, c1.time.busy_ns), (released, H_SOCK));
            assert_eq!(ctx1.end_ns, Some(released + H_SOCK));
        } else {
            assert_eq!((c1.time.spin_ns, c1.time.busy_ns), (0, H_SOCK));
            assert_eq!(ctx1.end_ns, Some(released + W + H_SOCK));
        }
        let ls = r.lock(class.name, Mode::Exclusive).unwrap();
        assert_eq!(ls.contentions, 1);
        let waited = if spin {
            released + H_SOCK
        } else {
            released + W + H_SOCK
        };
        assert_eq!((ls.waittime_min_ns, ls.waittime_max_ns), (waited, waited));
    }
}

#[test]
fn n_cpus_on_disjoint_locks_take_k_times_u_plus_h() {
    let (k, h) = (100u64, 700u64);
    let rt = rt();
    let ends = rt.run(31, || {
        vtime::scope(|s| {
            let hs: Vec<_> = (0..6usize)
                .map(|cpu| {
                    s.spawn(cpu, move || {
                        for _ in 0..k {
                            lock(100 + cpu, &SPIN);
                            vtime::work(h);
                            unlock(100 + cpu, &SPIN);
                        }
                        vtime::now()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join()).collect::<Vec<_>>()
        })
    });
    // Each lock only ever moves between a CPU and itself: no transfer, no wait.
    assert_eq!(ends, vec![k * (U + h); 6]);
    let r = rt.report();
    let ls = r.lock("test.spin", Mode::Exclusive).unwrap();
    assert_eq!((ls.contentions, ls.acq_bounces), (0, 0));
    assert!(r.cpus[..6].iter().all(|c| c.time.spin_ns == 0));
}

#[test]
fn rwsem_readers_share_a_waiting_writer_blocks_new_readers_and_downgrade_hands_over() {
    const SEM: usize = 9;
    let rt = rt();
    let log = RefCell::new(Vec::new());
    let at = |what: &'static str| log.borrow_mut().push((what, vtime::now()));
    rt.run(31, || {
        vtime::scope(|s| {
            // W1 (cpu 0): write at 0, downgrade at U + 1000, read 5000 more.
            s.spawn(0, || {
                hooks::lock_acquire(SEM, &RWSEM, Mode::Exclusive);
                at("w1 write");
                vtime::work(1000);
                hooks::lock_downgrade(SEM, &RWSEM);
                vtime::work(5000);
                read_unlock(SEM);
                at("w1 up_read");
            });
            // R1, R2 queue behind the writer; W2 behind them.
            for (cpu, delay, name) in [(1, 100, "r1"), (2, 200, "r2")] {
                let at = &at;
                s.spawn(cpu, move || {
                    vtime::sleep(delay);
                    read_lock(SEM);
                    at(name);
                    vtime::work(200);
                    read_unlock(SEM);
                });
            }
            s.spawn(3, || {
                vtime::sleep(300);
                hooks::lock_acquire(SEM, &RWSEM, Mode::Exclusive);
                at("w2 write");
                vtime::work(1000);
                hooks::lock_release(SEM, &RWSEM, Mode::Exclusive);
            });
            // R3 arrives while readers hold and W2 waits: it must queue behind W2.
            s.spawn(4, || {
                vtime::sleep(4000);
                read_lock(SEM);
                at("r3");
                vtime::work(100);
                read_unlock(SEM);
            });
        })
    });
    let down = U + 1000; // W1 downgrades; R1 and R2 are granted, W2 is not.
    let r1 = down + W + U + T_SOCK; // a reader pulls the count line only
    let r2 = r1 + U + T_SOCK; // R2 woke with R1 and queues behind its RMW on the count
                              // Readers release (each an RMW on the count); W1's read side ends at down + 5000 and
                              // pays the line back from R2's CPU; only then is W2 granted.
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
    // The downgrade counts as W1's read acquisition; R1, R2, R3 were all contended.
    assert_eq!((rd.acquisitions, rd.contentions), (4, 3));
    assert_eq!(rd.holdtime_total_ns, 5000 + 200 + 200 + 100);
}

#[test]
fn a_shared_line_hammered_by_n_cpus_serialises_every_rmw() {
    // Each CPU works T_sock after each RMW: its next one comes after its copy is gone (half
    // a transfer into the next CPU's), so none is served from a kept copy.
    let (n, k) = (4u64, 100u64);
    let rt = rt();
    let ends = rt.run(31, || {
        vtime::scope(|s| {
            let hs: Vec<_> = (0..n as usize)
                .map(|cpu| {
                    s.spawn(cpu, move || {
                        for _ in 0..k {
                            hooks::line_rmw(0x1000, &LINE, &LINE);
                            vtime::work(T_SOCK);
                        }
                        vtime::now()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join()).collect::<Vec<_>>()
        })
    });
    // Round robin: the first RMW is local (A); every later one waits for the previous and
    // pulls the line from the previous CPU: A + T_sock.
    let line_end = A + (n * k - 1) * (A + T_SOCK);
    assert_eq!(*ends.iter().max().unwrap(), line_end + T_SOCK);
    let r = rt.report();
    let l = r.line("test.line").unwrap();
    assert_eq!((l.rmws, l.bounces, l.kept), (n * k, n * k - 1, 0));
    // Besides the work, all the CPUs' busy time is time on the line.
    assert_eq!(l.time_ns + n * k * T_SOCK, r.busy_ns());
    // Each CPU waited for the N-1 others between two of its RMWs.
    assert_eq!(l.wait_ns, l.time_ns - n * k * A - (n * k - 1) * T_SOCK);
}

/// A CPU issuing RMWs back to back keeps the line until half-way through the transfer that
/// takes it away (`HOLDER_KEEPS_LINE`): the RMWs it starts and ends before then are done in its
/// own copy (A each, no queue, no transfer); the next one queues as usual.
#[test]
fn back_to_back_rmws_use_the_copy_kept_until_half_the_transfer_away() {
    let rt = rt();
    let ends = rt.run(31, || {
        vtime::scope(|s| {
            let hs: Vec<_> = [(0usize, 4u32), (1, 3)]
                .into_iter()
                .map(|(cpu, k)| {
                    s.spawn(cpu, move || {
                        for _ in 0..k {
                            hooks::line_rmw(0x3000, &LINE, &LINE);
                        }
                        vtime::now()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join()).collect::<Vec<_>>()
        })
    });
    // CPU 0: [0, A] local; CPU 1's transfer runs [A, 2A + T] and CPU 0's copy lasts until
    // A + T/2 = 30: its RMWs at 10 and 20 are kept; the one at 30 would end past it, so it
    // queues behind CPU 1's, pulls the line back over [60, 110] and leaves CPU 1 its copy
    // until 80, in which CPU 1 does its RMWs at 60 and 70.
    assert_eq!((A, T_SOCK), (10, 40));
    assert_eq!(ends, vec![110, 80]);
    let r = rt.report();
    let l = r.line("test.line").unwrap();
    assert_eq!((l.rmws, l.bounces, l.kept), (7, 2, 4));
    assert_eq!((l.wait_ns, l.time_ns), (10 + 30, 110 + 80));
}

#[test]
fn line_time_is_a_share_of_busy_time_beside_other_work() {
    let rt = rt();
    rt.run(0, || {
        for _ in 0..10 {
            vtime::work(90);
            hooks::line_rmw(0x2000, &LINE2, &LINE2);
        }
    });
    let r = rt.report();
    // One CPU, its own line: each RMW is A, local.
    assert_eq!(r.line("test.line2").unwrap().time_ns, 10 * A);
    assert_eq!(r.busy_ns(), 10 * (90 + A));
    assert_eq!(r.line_share("test.line2"), 0.1);
}

/// The workqueue shape: M workers drain J jobs of `d` from a queue on a mutex and condition
/// variables (lock and transfer costs zeroed, so only the jobs and wake-ups take time).
fn workqueue(m: usize, j: u64, d: u64) -> (u64, Vec<u64>, vtime::Report) {
    const Q: usize = 50;
    const CV_WORK: usize = 51;
    const CV_DONE: usize = 52;
    let rt = rt_with(|s| {
        for t in [
            &mut s.transfer.smt_sibling,
            &mut s.transfer.same_socket,
            &mut s.transfer.other_socket,
        ] {
            t.ns = Some(0.0);
            t.formula = Some("0".into());
        }
        let m = s.locks.get_mut("test.mutex").unwrap();
        (m.acquire_ns, m.formula) = (Some(0.0), Some("0".into()));
    });
    let queue = RefCell::new(VecDeque::new());
    let done = Cell::new(0u64);
    let stop = Cell::new(false);
    let end = rt.run(0, || {
        vtime::scope(|s| {
            for cpu in 1..=m {
                let (queue, done, stop) = (&queue, &done, &stop);
                s.spawn(cpu, move || {
                    lock(Q, &MUTEX);
                    loop {
                        let job = queue.borrow_mut().pop_front();
                        if let Some(d) = job {
                            unlock(Q, &MUTEX);
                            vtime::work(d);
                            lock(Q, &MUTEX);
                            done.set(done.get() + 1);
                            if done.get() == j {
                                hooks::cv_notify(CV_DONE, false);
                            }
                            continue;
                        }
                        if stop.get() {
                            break;
                        }
                        hooks::cv_wait(CV_WORK, Q, &MUTEX);
                    }
                    unlock(Q, &MUTEX);
                });
            }
            vtime::sleep(1000); // every worker is waiting by now
            lock(Q, &MUTEX);
            queue
                .borrow_mut()
                .extend(std::iter::repeat_n(d, j as usize));
            hooks::cv_notify(CV_WORK, true);
            unlock(Q, &MUTEX);
            lock(Q, &MUTEX);
            while done.get() < j {
                hooks::cv_wait(CV_DONE, Q, &MUTEX);
            }
            stop.set(true);
            hooks::cv_notify(CV_WORK, true);
            unlock(Q, &MUTEX);
        });
        vtime::now()
    });
    let r = rt.report();
    let busy = (1..=m).map(|c| r.cpus[c].time.busy_ns).collect();
    (end, busy, r)
}

#[test]
fn a_pool_of_m_workers_drains_j_jobs_in_ceil_j_over_m_rounds() {
    let d = 10_000;
    for (m, j) in [(4usize, 12u64), (4, 10), (1, 5), (6, 6)] {
        let (end, busy, r) = workqueue(m, j, d);
        let rounds = j.div_ceil(m as u64);
        // Jobs are queued at 1000 and the workers woken (+W); the last round ends after
        // `rounds` jobs; the waiter wakes (+W), stops the workers who wake (+W) and exit, and
        // the joiner wakes (+W).
        assert_eq!(end, 1000 + W + rounds * d + 3 * W, "M={m} J={j}");
        // Jobs go out in CPU order within a round: the first J mod M workers run one more.
        let extra = (j % m as u64) as usize;
        for (i, b) in busy.iter().enumerate() {
            let jobs = if extra == 0 || i < extra {
                rounds
            } else {
                rounds - 1
            };
            assert_eq!(*b, jobs * d, "M={m} J={j} worker {i}");
        }
        let ls = r.lock("test.mutex", Mode::Exclusive).unwrap();
        assert!(ls.acquisitions >= 2 * j);
    }
}

#[test]
fn sleep_is_exact_and_lets_another_context_use_the_cpu() {
    let rt = rt();
    let (b_start, end) = rt.run(0, || {
        let b = vtime::spawn(0, || {
            let start = vtime::now();
            vtime::work(300);
            start
        });
        vtime::work(1000);
        vtime::sleep(5000);
        (b.join(), vtime::now())
    });
    // B waits for CPU 0 until A sleeps at 1000 (run-to-block), A wakes exactly 5000 later.
    assert_eq!((b_start, end), (1000, 6000));
    let r = rt.report();
    assert_eq!(
        (r.cpus[0].time.busy_ns, r.cpus[0].time.idle_ns, r.end_ns),
        (1300, 4700, 6000)
    );
    assert_eq!(
        (r.contexts[1].start_ns, r.contexts[1].end_ns),
        (0, Some(1300))
    );
}

#[test]
fn smt_siblings_both_busy_run_at_the_sibling_factor() {
    let rt = rt();
    let ends = rt.run(31, || {
        vtime::scope(|s| {
            // CPUs 0 and 8 share core 0; CPU 1 is alone on core 1 (its sibling 9 is idle).
            let hs: Vec<_> = [0usize, 8, 1]
                .into_iter()
                .map(|cpu| {
                    s.spawn(cpu, || {
                        vtime::work(2);
                        vtime::sync_point();
                        vtime::work(1000);
                        vtime::now()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join()).collect::<Vec<_>>()
        })
    });
    // CPU 0 runs first: its sibling has no occupant yet, so its first 2 ns are unscaled; CPU 8
    // starts while CPU 0 is busy (×2 from then on), and so does CPU 0's 1000.
    let f = |ns: u64| (ns as f64 * SMT_FACTOR) as u64;
    assert_eq!(ends, [2 + f(1000), f(2) + f(1000), 2 + 1000]);
    // A sibling that sleeps is idle: work beside it is not slowed.
    let rt = vtime_support::rt();
    let end = rt.run(0, || {
        vtime::spawn(8, || vtime::sleep(100_000));
        vtime::sleep(10); // the sibling starts, then sleeps
        vtime::work(1000);
        vtime::now()
    });
    assert_eq!(end, 10 + 1000);
    assert_eq!(rt.report().end_ns, 100_000);
}

/// The SMT factor's extra is labelled by what the sibling did: work beside a busy sibling,
/// or beside one spinning on a lock the worker holds.
#[test]
fn smt_slowdown_beside_a_spinning_sibling_is_labelled_apart() {
    let rt = rt();
    rt.run(31, || {
        vtime::scope(|s| {
            // CPU 0 takes the lock and works; its sibling CPU 8 queues and spins meanwhile.
            s.spawn(0, || {
                lock(1, &SPIN);
                vtime::sync_point();
                vtime::work(1000);
                unlock(1, &SPIN);
            });
            s.spawn(8, || {
                vtime::work(1);
                lock(1, &SPIN);
                unlock(1, &SPIN);
            });
            // CPUs 1 and 9 share core 1, both working: a busy sibling.
            s.spawn(1, || {
                vtime::work(2);
                vtime::sync_point();
                vtime::work(500);
            });
            s.spawn(9, || {
                vtime::work(2);
                vtime::sync_point();
                vtime::work(500);
            });
        });
    });
    let r = rt.report();
    let extra = |ns: u64| (ns as f64 * (SMT_FACTOR - 1.0)) as u64;
    assert_eq!(r.cpus[0].time.smt_spinning_sibling_ns, extra(1000));
    assert_eq!(r.cpus[0].time.smt_busy_sibling_ns, 0);
    assert_eq!(
        (
            r.cpus[1].time.smt_busy_sibling_ns,
            r.cpus[9].time.smt_busy_sibling_ns
        ),
        (extra(500), extra(2) + extra(500))
    );
    assert_eq!(r.cpus[1].time.smt_spinning_sibling_ns, 0);
}

#[test]
fn named_costs_charge_the_profile_price_times_n() {
    let rt = rt();
    let p = rt.profile();
    let (t, cpu_time) = rt.run(3, || {
        vtime::charge(Cost::ZapPte, 512);
        vtime::charge(Cost::ClearPage, 2);
        (vtime::now(), hooks::thread_cpu_ns().unwrap())
    });
    let expect = (512.0 * p.cost_ns(Cost::ZapPte) + 2.0 * p.cost_ns(Cost::ClearPage)) as u64;
    assert_eq!((t, cpu_time), (expect, expect));
    assert_eq!(rt.report().cpus[3].time.busy_ns, expect);
}

#[test]
fn try_lock_fails_while_held_in_virtual_time() {
    let rt = rt();
    let (tried_held, tried_free) = rt.run(31, || {
        vtime::scope(|s| {
            s.spawn(0, || {
                lock(3, &SPIN);
                vtime::work(1000);
                unlock(3, &SPIN);
            });
            let h = s.spawn(1, || {
                vtime::work(500);
                let held = hooks::lock_try_acquire(3, &SPIN, Mode::Exclusive);
                vtime::work(2000);
                let free = hooks::lock_try_acquire(3, &SPIN, Mode::Exclusive);
                if free.is_some() {
                    unlock(3, &SPIN);
                }
                (held.is_some(), free.is_some())
            });
            h.join()
        })
    });
    assert_eq!((tried_held, tried_free), (false, true));
    let ls = rt.report();
    let ls = ls.lock("test.spin", Mode::Exclusive).unwrap();
    assert_eq!(
        (ls.acquisitions, ls.try_failures, ls.contentions),
        (2, 1, 0)
    );
}

#[test]
fn notify_one_wakes_waiters_in_fifo_order() {
    const M: usize = 60;
    const CV: usize = 61;
    let rt = rt();
    let order = RefCell::new(Vec::new());
    rt.run(31, || {
        vtime::scope(|s| {
            // They queue in the order 2, 0, 1 (not CPU order).
            for (cpu, delay) in [(2usize, 10u64), (0, 5000), (1, 10_000)] {
                let order = &order;
                s.spawn(cpu, move || {
                    vtime::sleep(delay);
                    lock(M, &MUTEX);
                    hooks::cv_wait(CV, M, &MUTEX);
                    order.borrow_mut().push((cpu, vtime::now()));
                    unlock(M, &MUTEX);
                });
            }
            vtime::sleep(20_000);
            for _ in 0..3 {
                hooks::cv_notify(CV, false);
                vtime::sleep(10_000);
            }
        })
    });
    // One waiter per notify, W after it, each re-taking the mutex from the CPU that last held
    // it (a hand-over within the socket: CPU 1, then 2, then 0).
    assert_eq!(
        order.into_inner(),
        [
            (2, 20_000 + W + H_SOCK),
            (0, 30_000 + W + H_SOCK),
            (1, 40_000 + W + H_SOCK)
        ]
    );
}
