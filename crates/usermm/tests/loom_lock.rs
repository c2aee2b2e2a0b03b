//! Loom models of the seam's exclusive locks, `usermm::sync::SpinLock` (`spinlock_t`) and
//! `usermm::sync::Mutex` (`struct mutex`).
//!
//! Run with `.ci/loom.sh`. Under `--cfg loom` both are the seam's adapter on
//! `loom::sync::Mutex` (`sync/primitive.rs`), so loom explores every interleaving of the
//! threads below, including those where a thread is preempted while holding the lock. Without
//! `--cfg loom` this file compiles to nothing.
//!
//! The data the models check lives in loom atomics accessed with `Relaxed` loads and stores, as
//! the engine's page metadata is: loom lets a `Relaxed` load return any value the memory model
//! allows, so a stale value shows up unless the lock orders the accesses.
//!
//! Models:
//! - [`spinlock_excludes`]: two threads each do a non-atomic read-modify-write of a counter
//!   under the lock; none is lost (mutual exclusion).
//! - [`spinlock_hands_over`]: what a holder wrote before `spin_unlock` (outside the lock's own
//!   value) is what the next holder reads: the release/acquire hand-over the engine relies on
//!   when page metadata written under `zone.lock` is read by the next holder.
//! - [`mutex_unlocked_lets_others_in`]: `MutexGuard::unlocked` (percpu drops `pcpu_lock` around
//!   chunk creation this way) really releases the mutex: the other thread's update, made while
//!   it was released, is seen once it is re-taken, and the guard still excludes afterwards.
//! - [`rmw_across_unlocked_is_caught`]: the negative control, a read-modify-write split by
//!   `SpinLockGuard::unlocked` — a check-then-act across a dropped lock. Loom must find the
//!   lost update: evidence that [`spinlock_excludes`] can see the bug it rules out.
//!
//! A failure of the first three would mean the seam's loom lock (and so the model of every
//! engine lock built on it) did not exclude or did not order: every other loom model of the
//! engine would then be checking nothing.
#![cfg(loom)]

use loom::sync::atomic::{AtomicU32, Ordering::Relaxed};
use loom::sync::Arc;
use loom::thread;
use usermm::sync::class::{PCPU_ALLOC_MUTEX, ZONE_LOCK};
use usermm::sync::{Mutex, SpinLock, SpinLockGuard};

/// A counter incremented by a `Relaxed` load then store: atomic only under a lock.
fn bump(c: &AtomicU32) {
    let v = c.load(Relaxed);
    c.store(v + 1, Relaxed);
}

#[test]
fn spinlock_excludes() {
    loom::model(|| {
        let lock = Arc::new(SpinLock::new(&ZONE_LOCK, 0u32));
        let side = Arc::new(AtomicU32::new(0));
        let ths: Vec<_> = (0..2)
            .map(|_| {
                let (lock, side) = (Arc::clone(&lock), Arc::clone(&side));
                thread::spawn(move || {
                    let mut g = lock.lock();
                    *g += 1;
                    bump(&side);
                })
            })
            .collect();
        for t in ths {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock(), 2, "an update under the lock was lost");
        assert_eq!(side.load(Relaxed), 2, "an update under the lock was lost");
        assert!(!lock.is_locked());
    });
}

#[test]
fn spinlock_hands_over() {
    loom::model(|| {
        // The lock's value says whether `data` was published; `data` itself is outside it.
        let lock = Arc::new(SpinLock::new(&ZONE_LOCK, false));
        let data = Arc::new(AtomicU32::new(0));

        let (l, d) = (Arc::clone(&lock), Arc::clone(&data));
        let writer = thread::spawn(move || {
            let mut g = l.lock();
            d.store(42, Relaxed);
            *g = true;
        });

        let (l, d) = (Arc::clone(&lock), Arc::clone(&data));
        let reader = thread::spawn(move || {
            let g = l.try_lock().unwrap_or_else(|| l.lock());
            if *g {
                assert_eq!(d.load(Relaxed), 42, "the hand-over lost the holder's write");
            }
        });

        writer.join().unwrap();
        reader.join().unwrap();
    });
}

#[test]
fn mutex_unlocked_lets_others_in() {
    loom::model(|| {
        let m = Arc::new(Mutex::new(&PCPU_ALLOC_MUTEX, 0u32));

        let m1 = Arc::clone(&m);
        let a = thread::spawn(move || {
            let mut g = m1.lock();
            *g += 1;
            let seen = *g;
            usermm::sync::MutexGuard::unlocked(&mut g, || {});
            // Either B got in while the mutex was released (and its add is visible), or not.
            assert!(*g == seen || *g == seen + 10, "stale value after re-lock");
            *g += 100;
        });

        let m2 = Arc::clone(&m);
        let b = thread::spawn(move || {
            *m2.lock() += 10;
        });

        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(
            *m.lock(),
            111,
            "an update was lost around MutexGuard::unlocked"
        );
    });
}

/// Broken on purpose: the value is read under the lock, the lock dropped and re-taken
/// (`SpinLockGuard::unlocked`), and the stale value written back.
#[test]
#[should_panic(expected = "an update under the lock was lost")]
fn rmw_across_unlocked_is_caught() {
    loom::model(|| {
        let lock = Arc::new(SpinLock::new(&ZONE_LOCK, 0u32));
        let ths: Vec<_> = (0..2)
            .map(|_| {
                let lock = Arc::clone(&lock);
                thread::spawn(move || {
                    let mut g = lock.lock();
                    let v = *g;
                    SpinLockGuard::unlocked(&mut g, || {});
                    *g = v + 1;
                })
            })
            .collect();
        for t in ths {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock(), 2, "an update under the lock was lost");
    });
}
