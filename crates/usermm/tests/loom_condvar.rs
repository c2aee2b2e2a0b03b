//! Loom models of the seam's waiting primitives: `usermm::sync::CondVar` (wait queues), the
//! `Completion` built on it (`struct completion`) and the `Barrier` built on it (a workload's
//! `pthread_barrier`).
//!
//! Run with `.ci/loom.sh`. Under `--cfg loom` the condvar is the seam's adapter on
//! `loom::sync::Condvar` and its mutex the adapter on `loom::sync::Mutex` (`sync/primitive.rs`),
//! so loom explores every interleaving of wait and notify; a thread left asleep with nobody to
//! wake it is reported by loom as a deadlock. Without `--cfg loom` this file compiles to
//! nothing.
//!
//! Models:
//! - [`condvar_no_lost_wakeup`]: a waiter that tests its condition under the mutex and waits in
//!   a loop, against a notifier that sets the condition under the mutex and notifies: the
//!   waiter always wakes (the workqueue's workers and `flush_work` wait this way).
//! - [`completion_wakes_every_waiter`]: `complete` wakes both of two waiters, whether they
//!   came before or after, and each gets the first completed value.
//! - [`barrier_orders_both_sides`]: two threads publish a value each, meet at a two-thread
//!   barrier and read the other's: never stale; exactly one is the serial thread; the barrier
//!   is reusable for a second round.
//! - [`condition_tested_outside_mutex_is_caught`]: the negative control for wake-ups, a waiter
//!   that tests the condition before taking the mutex and then waits once: loom must find the
//!   interleaving where the notify comes in between and the waiter sleeps forever.
//! - [`barrier_for_too_few_is_caught`]: the negative control for the barrier, a barrier sized
//!   for one thread where two meet: loom must find the stale read it then allows.
//!
//! A failure of the first three would mean a lost wake-up or a barrier that does not order:
//! workers asleep on queued work, workloads' phases overlapping.
#![cfg(loom)]

use loom::sync::atomic::{AtomicU32, Ordering::Relaxed};
use loom::sync::Arc;
use loom::thread;
use usermm::sync::class::{FUTEX, WORKQUEUE};
use usermm::sync::{Barrier, Completion, CondVar, Mutex};

/// A condition under a mutex and a condvar to wait for it.
struct Event {
    done: Mutex<bool>,
    cond: CondVar,
}

impl Event {
    fn new() -> Self {
        Self {
            done: Mutex::new(&WORKQUEUE, false),
            cond: CondVar::new(),
        }
    }

    fn signal(&self) {
        let mut d = self.done.lock();
        *d = true;
        self.cond.notify_one();
    }
}

/// A waiter (`wait`) against a signaller; the model ends only if the waiter wakes.
///
/// The event is leaked (a few bytes per explored interleaving), not shared through an `Arc`:
/// when loom reports a deadlock it unwinds the blocked threads, and an `Arc` dropped then
/// would call into loom again and abort the process instead of failing the test.
fn wait_vs_signal(wait: fn(&Event)) {
    loom::model(move || {
        let ev: &'static Event = Box::leak(Box::new(Event::new()));
        let waiter = thread::spawn(move || wait(ev));
        let signaller = thread::spawn(move || ev.signal());
        signaller.join().unwrap();
        waiter.join().unwrap();
        assert!(*ev.done.lock());
    });
}

#[test]
fn condvar_no_lost_wakeup() {
    wait_vs_signal(|ev| {
        let mut d = ev.done.lock();
        while !*d {
            ev.cond.wait(&mut d);
        }
    });
}

#[test]
fn completion_wakes_every_waiter() {
    loom::model(|| {
        let c = Arc::new(Completion::<u32>::new(&WORKQUEUE));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let c = Arc::clone(&c);
                thread::spawn(move || c.wait())
            })
            .collect();
        c.complete(7);
        c.complete(8); // completing twice keeps the first value
        for w in waiters {
            assert_eq!(w.join().unwrap(), 7);
        }
        assert_eq!(c.get(), Some(7));
    });
}

/// Two threads meet `rounds` times at `barrier`; before each meeting each publishes its round
/// number in its slot, after it each reads the other's.
fn two_at_barrier(n: usize, rounds: u32) {
    loom::model(move || {
        let barrier = Arc::new(Barrier::new(&FUTEX, n));
        let slots = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
        let ths: Vec<_> = (0..2)
            .map(|me| {
                let (b, s) = (Arc::clone(&barrier), Arc::clone(&slots));
                thread::spawn(move || {
                    let mut serial = 0;
                    for round in 1..=rounds {
                        s[me].store(round, Relaxed);
                        serial += u32::from(b.wait());
                        assert!(
                            s[1 - me].load(Relaxed) >= round,
                            "read a value from before the barrier"
                        );
                        if round < rounds {
                            // Nobody overwrites a slot before both have read this round's.
                            b.wait();
                        }
                    }
                    serial
                })
            })
            .collect();
        let serial: u32 = ths.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(serial, rounds, "not exactly one serial thread per round");
    });
}

#[test]
fn barrier_orders_both_sides() {
    two_at_barrier(2, 2);
}

/// Broken on purpose: the condition is tested before the mutex is taken, and the wait is not
/// in a loop — a notify between the test and the wait is lost.
#[test]
#[should_panic(expected = "deadlock")]
fn condition_tested_outside_mutex_is_caught() {
    wait_vs_signal(|ev| {
        let done = *ev.done.lock();
        if !done {
            let mut d = ev.done.lock();
            ev.cond.wait(&mut d);
        }
    });
}

/// Broken on purpose: a barrier for one thread lets each go on without the other.
#[test]
#[should_panic(expected = "read a value from before the barrier")]
fn barrier_for_too_few_is_caught() {
    two_at_barrier(1, 1);
}
