//! lock_stat-style figures for the engine's instrumented locks.
//!
//! Mirrors the columns of `/proc/lock_stat` (`kernel/locking/lockdep_proc.c`, `lock_stat_show`):
//! contentions, acquisitions, and wait/hold time min, max and total, per lock class. The kernel
//! keeps these per CPU and folds them on read; we keep one set of relaxed atomics per lock class
//! (a zone lock, an LRU lock, an mm's mmap lock), which is where the kernel's figures end up too.
//! The locks that record them are in [`crate::sync`] (`StatMutex`, `MmapLock`).
//!
//! # Differences from Linux
//! - Times are nanoseconds from [`crate::sync::clock`]: waits and the mmap lock's write holds
//!   from `clock::now` (host `CLOCK_MONOTONIC`), the holds of `StatMutex` and of the mmap
//!   lock's read side from each lock's `LockstatClock` (the TSC scaled, like the kernel's
//!   `local_clock()`); in a virtual run, all of them virtual time.
//! - A "contention" is counted when the first `try_lock` fails; the wait is the time from there
//!   to acquisition. Uncontended acquisitions record a zero wait but are not timed.
//! - Classes are per lock instance, not per lock *class*: the engine has few instances of each.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::Serialize;

/// Lower `a` to `v`: a plain load when `v` does not change it (the common case), so that the
/// figures add no read-modify-write to every release.
#[inline]
fn update_min(a: &AtomicU64, v: u64) {
    if v < a.load(Relaxed) {
        a.fetch_min(v, Relaxed);
    }
}

/// Raise `a` to `v`, as [`update_min`].
#[inline]
fn update_max(a: &AtomicU64, v: u64) {
    if v > a.load(Relaxed) {
        a.fetch_max(v, Relaxed);
    }
}

/// Accumulated contention and hold figures of one lock. All fields are relaxed atomics: the
/// figures are statistics, never used to make a decision.
#[derive(Debug)]
pub struct LockStat {
    name: &'static str,
    acquisitions: AtomicU64,
    contentions: AtomicU64,
    wait_min_ns: AtomicU64,
    wait_max_ns: AtomicU64,
    wait_total_ns: AtomicU64,
    hold_min_ns: AtomicU64,
    hold_max_ns: AtomicU64,
    hold_total_ns: AtomicU64,
}

/// A copy of a [`LockStat`] at one moment, in the columns of `/proc/lock_stat`.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct LockStatSnapshot {
    pub name: String,
    pub con_bounces: u64,
    pub contentions: u64,
    pub waittime_min_ns: u64,
    pub waittime_max_ns: u64,
    pub waittime_total_ns: u64,
    pub acquisitions: u64,
    pub holdtime_min_ns: u64,
    pub holdtime_max_ns: u64,
    pub holdtime_total_ns: u64,
}

impl LockStat {
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            acquisitions: AtomicU64::new(0),
            contentions: AtomicU64::new(0),
            wait_min_ns: AtomicU64::new(u64::MAX),
            wait_max_ns: AtomicU64::new(0),
            wait_total_ns: AtomicU64::new(0),
            hold_min_ns: AtomicU64::new(u64::MAX),
            hold_max_ns: AtomicU64::new(0),
            hold_total_ns: AtomicU64::new(0),
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// An acquisition that got the lock at once.
    #[inline]
    pub fn record_uncontended(&self) {
        self.acquisitions.fetch_add(1, Relaxed);
    }

    /// An acquisition that had to wait `wait_ns`.
    #[inline]
    pub fn record_contended(&self, wait_ns: u64) {
        self.acquisitions.fetch_add(1, Relaxed);
        self.contentions.fetch_add(1, Relaxed);
        self.wait_total_ns.fetch_add(wait_ns, Relaxed);
        update_min(&self.wait_min_ns, wait_ns);
        update_max(&self.wait_max_ns, wait_ns);
    }

    /// The lock was held for `hold_ns` before release.
    #[inline]
    pub fn record_hold(&self, hold_ns: u64) {
        self.hold_total_ns.fetch_add(hold_ns, Relaxed);
        update_min(&self.hold_min_ns, hold_ns);
        update_max(&self.hold_max_ns, hold_ns);
    }

    pub fn snapshot(&self) -> LockStatSnapshot {
        Self::fold(self.name, std::slice::from_ref(self))
    }

    /// One snapshot of several sets of figures of the same lock (the stripes of a
    /// [`StripedLockStat`]): counts and totals add up, minima and maxima combine.
    fn fold<'a>(name: &str, parts: impl IntoIterator<Item = &'a LockStat>) -> LockStatSnapshot {
        let (mut acq, mut con, mut wt, mut ht) = (0, 0, 0, 0);
        let (mut wmin, mut wmax, mut hmin, mut hmax) = (u64::MAX, 0, u64::MAX, 0);
        for p in parts {
            acq += p.acquisitions.load(Relaxed);
            con += p.contentions.load(Relaxed);
            wt += p.wait_total_ns.load(Relaxed);
            ht += p.hold_total_ns.load(Relaxed);
            wmin = wmin.min(p.wait_min_ns.load(Relaxed));
            hmin = hmin.min(p.hold_min_ns.load(Relaxed));
            wmax = wmax.max(p.wait_max_ns.load(Relaxed));
            hmax = hmax.max(p.hold_max_ns.load(Relaxed));
        }
        let min = |v: u64| if v == u64::MAX { 0 } else { v };
        LockStatSnapshot {
            name: name.to_string(),
            con_bounces: con,
            contentions: con,
            waittime_min_ns: min(wmin),
            waittime_max_ns: wmax,
            waittime_total_ns: wt,
            acquisitions: acq,
            holdtime_min_ns: min(hmin),
            holdtime_max_ns: hmax,
            holdtime_total_ns: ht,
        }
    }

    /// Zero every figure (like `echo 0 > /proc/lock_stat`).
    pub fn reset(&self) {
        for a in [
            &self.acquisitions,
            &self.contentions,
            &self.wait_max_ns,
            &self.wait_total_ns,
            &self.hold_max_ns,
            &self.hold_total_ns,
        ] {
            a.store(0, Relaxed);
        }
        self.wait_min_ns.store(u64::MAX, Relaxed);
        self.hold_min_ns.store(u64::MAX, Relaxed);
    }
}

/// Stripes of a [`StripedLockStat`] (a power of two).
const STRIPES: usize = 16;

/// This thread's stripe: a Fibonacci hash of the address of a thread-local, so that threads
/// spread over the stripes with no shared counter.
#[inline]
fn stripe() -> usize {
    thread_local!(static SLOT: u8 = const { 0 });
    SLOT.with(|s| {
        let a = std::ptr::from_ref(s) as usize;
        a.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (usize::BITS - STRIPES.trailing_zeros())
    })
}

/// The figures of one lock that many threads take at once for read (an mm's `mmap_lock`
/// read side), striped by thread so that recording them adds no shared cache line the lock
/// itself does not have — as the kernel's per-CPU lock_stat does. Read through [`Self::snapshot`].
#[derive(Debug)]
pub struct StripedLockStat {
    name: &'static str,
    stripes: Box<[crossbeam_utils::CachePadded<LockStat>]>,
}

impl StripedLockStat {
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            stripes: (0..STRIPES)
                .map(|_| crossbeam_utils::CachePadded::new(LockStat::new(name)))
                .collect(),
        }
    }

    #[inline]
    fn mine(&self) -> &LockStat {
        &self.stripes[stripe()]
    }

    /// See [`LockStat::record_uncontended`].
    #[inline]
    pub fn record_uncontended(&self) {
        self.mine().record_uncontended();
    }

    /// See [`LockStat::record_contended`].
    #[inline]
    pub fn record_contended(&self, wait_ns: u64) {
        self.mine().record_contended(wait_ns);
    }

    /// See [`LockStat::record_hold`].
    #[inline]
    pub fn record_hold(&self, hold_ns: u64) {
        self.mine().record_hold(hold_ns);
    }

    /// All stripes folded into one set of figures.
    pub fn snapshot(&self) -> LockStatSnapshot {
        LockStat::fold(self.name, self.stripes.iter().map(|s| &**s))
    }

    pub fn reset(&self) {
        for s in self.stripes.iter() {
            s.reset();
        }
    }
}

impl LockStatSnapshot {
    /// The figures accumulated between `earlier` and `self`, for a before/after report.
    /// Min and max cannot be differenced and are kept from `self`.
    pub fn since(&self, earlier: &LockStatSnapshot) -> LockStatSnapshot {
        LockStatSnapshot {
            name: self.name.clone(),
            con_bounces: self.con_bounces - earlier.con_bounces,
            contentions: self.contentions - earlier.contentions,
            waittime_total_ns: self.waittime_total_ns - earlier.waittime_total_ns,
            acquisitions: self.acquisitions - earlier.acquisitions,
            holdtime_total_ns: self.holdtime_total_ns - earlier.holdtime_total_ns,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod test {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn striped_figures_fold_into_one_snapshot() {
        let s = Arc::new(StripedLockStat::new("striped"));
        std::thread::scope(|sc| {
            for t in 0..8u64 {
                let s = &s;
                sc.spawn(move || {
                    for i in 0..1000 {
                        s.record_uncontended();
                        s.record_hold(10 + t);
                        if i == 0 {
                            s.record_contended(100 * (t + 1));
                        }
                    }
                });
            }
        });
        let snap = s.snapshot();
        assert_eq!(snap.acquisitions, 8 * 1000 + 8);
        assert_eq!(snap.contentions, 8);
        assert_eq!(snap.waittime_min_ns, 100);
        assert_eq!(snap.waittime_max_ns, 800);
        assert_eq!(snap.waittime_total_ns, 100 * (1..=8).sum::<u64>());
        assert_eq!(snap.holdtime_min_ns, 10);
        assert_eq!(snap.holdtime_max_ns, 17);
        assert_eq!(snap.holdtime_total_ns, 1000 * (10..18).sum::<u64>());
        s.reset();
        let z = s.snapshot();
        assert_eq!(
            (z.acquisitions, z.holdtime_min_ns, z.waittime_min_ns),
            (0, 0, 0)
        );
    }
}
