//! [`StatMutex`]: a [`SpinLock`] that records lock_stat figures (`/proc/lock_stat`'s columns,
//! [`LockStat`]) — the zone lock and the LRU lock, the two shared locks of the free path.
//!
//! The seam's lock says whether an acquisition waited and for how long (host time, or virtual
//! time in a virtual run); this adds the counting and the hold time, recorded after the release.
//! Hold times are read on the lock's own [`LockstatClock`] (`lockstat_clock()`: the TSC in wall
//! mode, virtual time in a virtual run), since every acquisition is timed.

use super::clock::{LockstatClock, LockstatStamp};
use super::{LockClass, SpinLock, SpinLockGuard};
use crate::stats::lockstat::LockStat;

/// A [`SpinLock`] that records lock_stat figures: the zone lock and the LRU lock.
#[derive(Debug)]
pub struct StatMutex<T> {
    inner: SpinLock<T>,
    stat: LockStat,
    clock: LockstatClock,
}

/// Guard of a [`StatMutex`]; records the hold time when dropped.
#[derive(Debug)]
pub struct StatMutexGuard<'a, T> {
    /// `None` only inside `drop`, after the lock was released.
    guard: Option<SpinLockGuard<'a, T>>,
    stat: &'a LockStat,
    clock: &'a LockstatClock,
    since: LockstatStamp,
}

impl<T> StatMutex<T> {
    /// A lock of class `class` whose lock_stat line is named `name` (`&zone->lock`).
    pub fn new(class: &'static LockClass, name: &'static str, value: T) -> Self {
        Self::with_clock(class, name, value, LockstatClock::new())
    }

    /// [`Self::new`] with hold times on `clock` (a machine's: [`LockstatClock::for_machine`]).
    pub fn with_clock(
        class: &'static LockClass,
        name: &'static str,
        value: T,
        clock: LockstatClock,
    ) -> Self {
        Self {
            inner: SpinLock::new(class, value),
            stat: LockStat::new(name),
            clock,
        }
    }

    #[inline]
    pub fn lock(&self) -> StatMutexGuard<'_, T> {
        let (guard, waited) = self.inner.lock_contended();
        match waited {
            None => self.stat.record_uncontended(),
            Some(ns) => self.stat.record_contended(ns),
        }
        StatMutexGuard {
            guard: Some(guard),
            stat: &self.stat,
            clock: &self.clock,
            since: self.clock.now(),
        }
    }

    pub fn stat(&self) -> &LockStat {
        &self.stat
    }

    /// Access without locking, through exclusive ownership.
    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut()
    }
}

guard_deref!(mut StatMutexGuard.guard?, "guard used after release");

impl<T> Drop for StatMutexGuard<'_, T> {
    /// Release first, then record: the figures are not taken under the lock.
    #[inline]
    fn drop(&mut self) {
        let hold_ns = self.clock.elapsed_ns(self.since);
        drop(self.guard.take());
        self.stat.record_hold(hold_ns);
    }
}

#[cfg(test)]
mod test {
    use std::sync::Arc;

    use super::*;

    /// The calling thread's id, from `/proc/thread-self` (a link to `<pid>/task/<tid>`).
    fn own_tid() -> String {
        let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
        link.file_name()
            .expect("<pid>/task/<tid>")
            .to_string_lossy()
            .into_owned()
    }

    /// The state letter of thread `tid` of this process (`/proc/self/task/<tid>/stat`): `S`
    /// while it sleeps (a parked waiter: futex wait), `R` while it runs or may.
    fn thread_state(tid: &str) -> char {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
            .expect("the thread's stat");
        // `tid (comm) state ...`: the comm may hold spaces and parentheses.
        let after = &stat[stat.rfind(')').expect("(comm)") + 1..];
        after.trim_start().chars().next().expect("state")
    }

    #[test]
    fn uncontended_and_contended_are_counted() {
        let m = Arc::new(StatMutex::new(
            &super::super::class::UNMODELLED,
            "test_lock",
            0u64,
        ));
        {
            let mut g = m.lock();
            *g += 1;
        }
        let s = m.stat().snapshot();
        assert_eq!(s.acquisitions, 1);
        assert_eq!(s.contentions, 0);
        // Contended, event-driven: hold the lock, let another thread try it, and release only
        // once that thread sleeps — parked inside `lock()`, which it gets to only after
        // finding the lock taken (nothing else on its way there sleeps). No time is guessed.
        let g = m.lock();
        let m2 = Arc::clone(&m);
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            tx.send(own_tid()).unwrap();
            *m2.lock() += 1;
        });
        let tid = rx.recv().unwrap();
        while thread_state(&tid) != 'S' {
            std::thread::yield_now();
        }
        drop(g);
        t.join().unwrap();
        let s = m.stat().snapshot();
        assert_eq!(s.acquisitions, 3);
        assert_eq!(s.contentions, 1);
        // One contended wait: it is the minimum, the maximum and the total.
        assert_eq!(
            (s.waittime_min_ns, s.waittime_max_ns),
            (s.waittime_total_ns, s.waittime_total_ns)
        );
        assert_eq!(*m.lock(), 2);
    }
}
