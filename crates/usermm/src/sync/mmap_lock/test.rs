//! Tests of the mmap lock: downgrades, trylocks and the lock_stat figures.

use std::{
    sync::{mpsc, Arc},
    thread,
};

use super::*;

/// Spin (yielding) until `cond` holds. Never an assertion about time: the test would hang,
/// not fail, if the condition never came.
#[track_caller]
fn wait_until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        thread::yield_now();
    }
}

mod downgrade {
    use super::*;

    #[test]
    fn readers_enter_but_no_writer_until_the_downgraded_guard_drops() {
        let lock = Arc::new(MmapLock::new(0u32));
        let mut w = lock.write();
        *w = 1;
        let r = w.downgrade();
        assert!(r.is_downgraded());
        assert!(r.exclusive_hold_ns().is_some());
        assert!(!lock.is_write_locked());

        // Another reader gets in while the downgraded guard is held.
        let (tx, rx) = mpsc::channel();
        let l = Arc::clone(&lock);
        thread::spawn(move || {
            let g = l.read();
            tx.send(*g).unwrap();
        })
        .join()
        .unwrap();
        assert_eq!(rx.recv().unwrap(), 1);

        // A writer has to wait.
        let (acquired_tx, acquired_rx) = mpsc::channel();
        let l = Arc::clone(&lock);
        let writer = thread::spawn(move || {
            let mut g = l.write();
            acquired_tx.send(*g).unwrap();
            *g = 2;
        });
        wait_until(|| lock.is_contended());
        assert!(
            acquired_rx.try_recv().is_err(),
            "writer got in beside a downgraded reader"
        );
        assert!(lock.try_write().is_none());
        assert_eq!(*r, 1);
        drop(r);

        // Once it is gone, the writer proceeds, and sees the downgrader's value.
        assert_eq!(acquired_rx.recv().unwrap(), 1);
        writer.join().unwrap();
        assert_eq!(*lock.read(), 2);
    }

    #[test]
    fn downgraded_guard_reads_its_own_write_under_a_waiting_writer() {
        let lock = Arc::new(MmapLock::new(0u32));
        let mut w = lock.write();
        let l = Arc::clone(&lock);
        let other = thread::spawn(move || *l.write() = 7);
        wait_until(|| lock.is_contended());
        *w = 5;
        let r = w.downgrade();
        assert_eq!(*r, 5, "a waiting writer slipped in during the downgrade");
        drop(r);
        other.join().unwrap();
        assert_eq!(Arc::into_inner(lock).unwrap().into_inner(), 7);
    }

    #[test]
    fn exclusive_hold_ends_at_the_downgrade() {
        let lock = MmapLock::new(());
        let r = lock.write().downgrade();
        let s = lock.stats();
        assert_eq!(
            s.exclusive_hold.count, 1,
            "recorded at the downgrade, not at unlock"
        );
        assert_eq!(
            lock.last_exclusive_hold_ns(),
            r.exclusive_hold_ns().unwrap()
        );
        drop(r);
        let s = lock.stats();
        assert_eq!(
            s.exclusive_hold.count, 1,
            "the read hold is not an exclusive hold"
        );
        assert_eq!(s.write.acquisitions, 1);
        assert_eq!(s.read.acquisitions, 1, "a downgrade is a read acquisition");
    }
}

mod trylock {
    use super::*;

    #[test]
    fn try_write_fails_while_read_held() {
        let lock = MmapLock::new(0u8);
        let r = lock.read();
        assert!(lock.try_write().is_none());
        let r2 = lock.try_read().expect("readers share");
        drop((r, r2));
        assert!(lock.try_write().is_some());
    }

    #[test]
    fn try_read_fails_while_write_held() {
        let lock = Arc::new(MmapLock::new(0u8));
        let _w = lock.write();
        let l = Arc::clone(&lock);
        let got = thread::spawn(move || l.try_read().is_some())
            .join()
            .unwrap();
        assert!(!got);
        assert!(lock.try_write().is_none());
        assert!(lock.is_write_locked());
    }
}

mod stats {
    use super::*;

    #[test]
    fn acquisitions_are_counted() {
        let lock = MmapLock::new(0u64);
        for _ in 0..3 {
            drop(lock.read());
        }
        drop(lock.try_read());
        *lock.write() += 1;
        drop(lock.try_write());
        let s = lock.stats();
        assert_eq!(s.read.name, "mmap_lock-R");
        assert_eq!(s.write.name, "mmap_lock-W");
        assert_eq!((s.read.acquisitions, s.read.contentions), (4, 0));
        assert_eq!((s.write.acquisitions, s.write.contentions), (2, 0));
    }

    #[test]
    fn contentions_are_counted() {
        let lock = Arc::new(MmapLock::new(0u64));

        // A reader behind a writer.
        let w = lock.write();
        let l = Arc::clone(&lock);
        let reader = thread::spawn(move || *l.read());
        wait_until(|| lock.is_contended());
        drop(w);
        reader.join().unwrap();

        // A writer behind a reader.
        let r = lock.read();
        let l = Arc::clone(&lock);
        let writer = thread::spawn(move || *l.write() += 1);
        wait_until(|| lock.is_contended());
        drop(r);
        writer.join().unwrap();

        assert!(!lock.is_contended());
        let s = lock.stats();
        assert_eq!((s.read.acquisitions, s.read.contentions), (2, 1));
        assert_eq!((s.write.acquisitions, s.write.contentions), (2, 1));
        assert!(s.read.waittime_max_ns >= s.read.waittime_min_ns);
        assert_eq!(s.read.waittime_total_ns, s.read.waittime_max_ns);
    }

    #[test]
    fn histogram_records_every_exclusive_hold() {
        let lock = MmapLock::new(0u64);
        let mut returned = Vec::new();
        for i in 0..5 {
            let mut w = lock.write();
            *w += i;
            returned.push(w.unlock());
            assert_eq!(lock.last_exclusive_hold_ns(), *returned.last().unwrap());
        }
        drop(lock.write()); // dropped, not unlocked
        drop(lock.write().downgrade());
        drop(lock.read()); // not an exclusive hold

        let s = lock.stats();
        let h = s.exclusive_hold;
        assert_eq!(h.count, 7);
        assert!(h.min_ns <= h.p50_ns && h.p50_ns <= h.p99_ns);
        assert!(h.p99_ns <= h.p999_ns && h.p999_ns <= h.max_ns);
        // The histogram's max is its bucket's upper edge: never below the largest hold.
        assert!(h.max_ns >= *returned.iter().max().unwrap());
        assert!(s.write.holdtime_total_ns >= returned.iter().sum::<u64>());
    }

    #[test]
    fn reset_zeroes_everything() {
        let lock = MmapLock::new(());
        drop(lock.write());
        drop(lock.read());
        lock.reset_stats();
        let s = lock.stats();
        assert_eq!(s.read.acquisitions + s.write.acquisitions, 0);
        assert_eq!(s.exclusive_hold, HoldTimeSummary::default());
        assert_eq!(lock.last_exclusive_hold_ns(), 0);
        drop(lock.write());
        assert_eq!(lock.stats().exclusive_hold.count, 1);
    }

    #[test]
    fn stats_serialize() {
        let lock = MmapLock::new(());
        drop(lock.write());
        let json = serde_json::to_value(lock.stats()).unwrap();
        assert_eq!(json["write"]["acquisitions"], 1);
        assert_eq!(json["exclusive_hold"]["count"], 1);
    }
}

mod lazy_histogram {
    use super::*;

    /// Regression (issue "Speed at scale"): every mm made a 270 KiB histogram bounded at one
    /// hour, zeroed (and faulted in) by each fork. Now none exists until a write hold ends, and
    /// the auto-resized one reports what the bounded one did, a hold past an hour included.
    #[test]
    fn no_histogram_until_a_write_hold_and_an_hour_still_caps_it() {
        let lock = MmapLock::new(());
        assert!(lock.exclusive_hold.lock().is_none());
        drop(lock.read());
        assert!(lock.exclusive_hold.lock().is_none());
        assert_eq!(lock.stats().exclusive_hold, HoldTimeSummary::default());
        lock.reset_stats();

        let mut bounded = Histogram::<u64>::new_with_bounds(
            HOLD_HIST_LOW_NS,
            HOLD_HIST_HIGH_NS,
            HOLD_HIST_SIGFIG,
        )
        .unwrap();
        for ns in [0, 1, 999, 12_345, 7_000_000, 2 * HOLD_HIST_HIGH_NS] {
            lock.exclusive_hold_ended(ns);
            bounded.saturating_record(ns.max(HOLD_HIST_LOW_NS));
        }
        let got = lock.stats().exclusive_hold;
        assert_eq!(got, HoldTimeSummary::from_histogram(&bounded));
        assert_eq!(got.count, 6);
        assert!(got.max_ns >= HOLD_HIST_HIGH_NS && got.max_ns < 2 * HOLD_HIST_HIGH_NS);
    }

    #[test]
    fn a_lock_on_a_sibling_clock_times_its_read_holds() {
        let clock = clock::LockstatClock::new();
        let lock = MmapLock::with_clock(0u8, clock.sibling());
        drop(lock.read());
        drop(lock.read());
        let s = lock.stats();
        assert_eq!(s.read.acquisitions, 2);
        assert!(s.read.holdtime_max_ns >= s.read.holdtime_min_ns);
    }
}
