//! The host implementation of [`MmapLock`](super::MmapLock): an instrumented
//! `parking_lot::RwLock`. The protocol and the instrumentation are documented in the parent
//! module.

use std::{
    fmt,
    ops::{Deref, DerefMut},
    sync::atomic::{
        AtomicU64, AtomicUsize,
        Ordering::{Acquire, Relaxed, Release},
    },
    time::Instant,
};

use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;
use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{
    elapsed_ns, HoldTimeSummary, LockStat, MmapLockStats, StripedLockStat, HOLD_HIST_HIGH_NS,
    HOLD_HIST_LOW_NS, HOLD_HIST_SIGFIG,
};

/// An mm's `mmap_lock`: a task-fair, downgradable reader-writer lock around `T` (the VMA
/// tree), with lock_stat figures and an exclusive-hold histogram.
///
/// See the [module documentation](crate::sync::mmap_lock) for the downgrade protocol and the
/// instrumentation.
#[doc(alias = "mmap_lock")]
#[doc(alias = "mmap_sem")]
#[doc(alias = "rw_semaphore")]
pub struct MmapLock<T> {
    /// The lock and the data it protects.
    rwsem: RwLock<T>,
    /// Threads past a failed fast path and not yet holding the lock (`rwsem_is_contended`).
    waiters: AtomicUsize,
    /// Read-side figures, striped by thread: concurrent readers (faults) write no shared
    /// line for them (the kernel's lock_stat is per CPU).
    read_stat: StripedLockStat,
    /// Write-side figures; hold times are exclusive holds.
    write_stat: CachePadded<LockStat>,
    /// Exclusive hold times in ns. A leaf lock: see the module's "Locks".
    exclusive_hold: Mutex<Histogram<u64>>,
    /// Length of the most recently ended exclusive hold, in ns.
    last_exclusive_hold_ns: AtomicU64,
}

/// Shared access to an [`MmapLock`]'s value; dropping it is `mmap_read_unlock`.
#[doc(alias = "mmap_read_unlock")]
#[must_use = "if unused the MmapLock is released at once"]
pub struct MmapReadGuard<'a, T> {
    /// `None` only inside `drop`, after the lock was released.
    guard: Option<RwLockReadGuard<'a, T>>,
    lock: &'a MmapLock<T>,
    since: Instant,
    /// `Some(exclusive hold in ns)` when this guard came from a downgrade.
    downgraded_from_ns: Option<u64>,
}

/// Exclusive access to an [`MmapLock`]'s value; dropping it is `mmap_write_unlock`.
#[doc(alias = "mmap_write_unlock")]
#[must_use = "if unused the MmapLock is released at once"]
pub struct MmapWriteGuard<'a, T> {
    /// `None` only after the exclusive hold has ended (downgrade or unlock), i.e. never while
    /// the guard is reachable by a caller.
    guard: Option<RwLockWriteGuard<'a, T>>,
    lock: &'a MmapLock<T>,
    since: Instant,
}

impl<T> MmapLock<T> {
    /// An unlocked lock around `value`, with zeroed statistics.
    #[doc(alias = "mmap_init_lock")]
    pub fn new(value: T) -> Self {
        let histogram =
            Histogram::new_with_bounds(HOLD_HIST_LOW_NS, HOLD_HIST_HIGH_NS, HOLD_HIST_SIGFIG)
                .expect("constant histogram bounds are valid");
        Self {
            rwsem: RwLock::new(value),
            waiters: AtomicUsize::new(0),
            read_stat: StripedLockStat::new("mmap_lock-R"),
            write_stat: CachePadded::new(LockStat::new("mmap_lock-W")),
            exclusive_hold: Mutex::new(histogram),
            last_exclusive_hold_ns: AtomicU64::new(0),
        }
    }

    /// Take the lock for read, blocking while a writer holds it or waits for it.
    #[doc(alias = "mmap_read_lock")]
    #[inline]
    pub fn read(&self) -> MmapReadGuard<'_, T> {
        let guard = match self.rwsem.try_read() {
            Some(guard) => {
                self.read_stat.record_uncontended();
                guard
            }
            None => self.read_contended(),
        };
        MmapReadGuard {
            guard: Some(guard),
            lock: self,
            since: Instant::now(),
            downgraded_from_ns: None,
        }
    }

    #[cold]
    #[inline(never)]
    fn read_contended(&self) -> RwLockReadGuard<'_, T> {
        let t0 = Instant::now();
        self.waiters.fetch_add(1, Release);
        let guard = self.rwsem.read();
        self.waiters.fetch_sub(1, Release);
        self.read_stat.record_contended(elapsed_ns(t0));
        guard
    }

    /// Take the lock for read if that needs no waiting.
    #[doc(alias = "mmap_read_trylock")]
    #[inline]
    pub fn try_read(&self) -> Option<MmapReadGuard<'_, T>> {
        let guard = self.rwsem.try_read()?;
        self.read_stat.record_uncontended();
        Some(MmapReadGuard {
            guard: Some(guard),
            lock: self,
            since: Instant::now(),
            downgraded_from_ns: None,
        })
    }

    /// Take the lock for write, blocking while anyone holds it.
    #[doc(alias = "mmap_write_lock")]
    #[inline]
    pub fn write(&self) -> MmapWriteGuard<'_, T> {
        let guard = match self.rwsem.try_write() {
            Some(guard) => {
                self.write_stat.record_uncontended();
                guard
            }
            None => self.write_contended(),
        };
        MmapWriteGuard {
            guard: Some(guard),
            lock: self,
            since: Instant::now(),
        }
    }

    #[cold]
    #[inline(never)]
    fn write_contended(&self) -> RwLockWriteGuard<'_, T> {
        let t0 = Instant::now();
        self.waiters.fetch_add(1, Release);
        let guard = self.rwsem.write();
        self.waiters.fetch_sub(1, Release);
        self.write_stat.record_contended(elapsed_ns(t0));
        guard
    }

    /// Take the lock for write if that needs no waiting.
    #[doc(alias = "mmap_write_trylock")]
    #[inline]
    pub fn try_write(&self) -> Option<MmapWriteGuard<'_, T>> {
        let guard = self.rwsem.try_write()?;
        self.write_stat.record_uncontended();
        Some(MmapWriteGuard {
            guard: Some(guard),
            lock: self,
            since: Instant::now(),
        })
    }

    /// Whether some thread is waiting for the lock. Long read-side walks may poll this and
    /// back off. Advisory: the answer can be stale by the time it is used.
    #[doc(alias = "mmap_lock_is_contended")]
    #[doc(alias = "rwsem_is_contended")]
    pub fn is_contended(&self) -> bool {
        self.waiters.load(Acquire) != 0
    }

    /// Whether anyone holds the lock (for `vm_bug_on!`-style assertions).
    #[doc(alias = "rwsem_is_locked")]
    #[doc(alias = "mmap_assert_locked")]
    pub fn is_locked(&self) -> bool {
        self.rwsem.is_locked()
    }

    /// Whether a writer holds the lock (for `vm_bug_on!`-style assertions).
    #[doc(alias = "mmap_assert_write_locked")]
    pub fn is_write_locked(&self) -> bool {
        self.rwsem.is_locked_exclusive()
    }

    /// The lock_stat figures and the exclusive-hold distribution accumulated so far.
    pub fn stats(&self) -> MmapLockStats {
        let exclusive_hold = HoldTimeSummary::from_histogram(&self.exclusive_hold.lock());
        MmapLockStats {
            read: self.read_stat.snapshot(),
            write: self.write_stat.snapshot(),
            exclusive_hold,
        }
    }

    /// Zero every figure (like `echo 0 > /proc/lock_stat`). Holds in progress are still
    /// recorded when they end.
    pub fn reset_stats(&self) {
        self.read_stat.reset();
        self.write_stat.reset();
        self.exclusive_hold.lock().reset();
        self.last_exclusive_hold_ns.store(0, Relaxed);
    }

    /// Length in ns of the most recently ended exclusive hold (0 if none yet).
    ///
    /// Read while holding a guard returned by [`MmapWriteGuard::downgrade`], this is that
    /// write's own hold: no other writer can have ended a hold since. Otherwise a concurrent
    /// writer may have overwritten it; use [`MmapWriteGuard::unlock`] or
    /// [`MmapReadGuard::exclusive_hold_ns`] for a per-call figure.
    pub fn last_exclusive_hold_ns(&self) -> u64 {
        self.last_exclusive_hold_ns.load(Relaxed)
    }

    /// The value, by ownership: no lock needed.
    pub fn into_inner(self) -> T {
        self.rwsem.into_inner()
    }

    /// Record the end of an exclusive hold of `hold_ns`.
    fn exclusive_hold_ended(&self, hold_ns: u64) {
        self.write_stat.record_hold(hold_ns);
        self.last_exclusive_hold_ns.store(hold_ns, Relaxed);
        self.exclusive_hold
            .lock()
            .saturating_record(hold_ns.max(HOLD_HIST_LOW_NS));
    }
}

impl<T: Default> Default for MmapLock<T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

impl<T> fmt::Debug for MmapLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MmapLock")
            .field("locked", &self.is_locked())
            .field("write_locked", &self.is_write_locked())
            .field("contended", &self.is_contended())
            .finish_non_exhaustive()
    }
}

impl<'a, T> MmapWriteGuard<'a, T> {
    /// Turn this write hold into a read hold, atomically: readers may enter from now on, but
    /// no writer can acquire the lock between the write hold and the read hold. Ends (and
    /// records) the exclusive hold.
    #[doc(alias = "mmap_write_downgrade")]
    #[doc(alias = "downgrade_write")]
    pub fn downgrade(mut self) -> MmapReadGuard<'a, T> {
        let guard = self
            .guard
            .take()
            .expect("write guard holds the lock until it ends");
        let hold_ns = elapsed_ns(self.since);
        let guard = RwLockWriteGuard::downgrade(guard);
        let since = Instant::now();
        // Lock order: mmap_lock (read) -> exclusive-hold histogram.
        self.lock.exclusive_hold_ended(hold_ns);
        self.lock.read_stat.record_uncontended();
        MmapReadGuard {
            guard: Some(guard),
            lock: self.lock,
            since,
            downgraded_from_ns: Some(hold_ns),
        }
    }

    /// Release the lock and return the length of this exclusive hold in ns (the same figure
    /// the histogram records). Dropping the guard does the same, discarding the figure.
    #[doc(alias = "mmap_write_unlock")]
    pub fn unlock(mut self) -> u64 {
        self.release()
            .expect("write guard holds the lock until it ends")
    }

    /// Nanoseconds since this write hold began.
    pub fn held_ns(&self) -> u64 {
        elapsed_ns(self.since)
    }

    /// End the exclusive hold if it has not ended yet; the histogram is updated after the
    /// lock is released.
    fn release(&mut self) -> Option<u64> {
        let guard = self.guard.take()?;
        let hold_ns = elapsed_ns(self.since);
        drop(guard);
        self.lock.exclusive_hold_ended(hold_ns);
        Some(hold_ns)
    }
}

impl<T> Deref for MmapWriteGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        match &self.guard {
            Some(guard) => guard,
            None => unreachable!("write guard used after its hold ended"),
        }
    }
}

impl<T> DerefMut for MmapWriteGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        match &mut self.guard {
            Some(guard) => guard,
            None => unreachable!("write guard used after its hold ended"),
        }
    }
}

impl<T> Drop for MmapWriteGuard<'_, T> {
    fn drop(&mut self) {
        self.release();
    }
}

impl<T: fmt::Debug> fmt::Debug for MmapWriteGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MmapWriteGuard")
            .field("value", &**self)
            .finish()
    }
}

impl<T> MmapReadGuard<'_, T> {
    /// Whether this read hold came from [`MmapWriteGuard::downgrade`].
    pub fn is_downgraded(&self) -> bool {
        self.downgraded_from_ns.is_some()
    }

    /// For a downgraded guard, the length in ns of the exclusive hold that preceded it.
    pub fn exclusive_hold_ns(&self) -> Option<u64> {
        self.downgraded_from_ns
    }

    /// Nanoseconds since this read hold began (at the downgrade, for a downgraded guard).
    pub fn held_ns(&self) -> u64 {
        elapsed_ns(self.since)
    }
}

impl<T> Deref for MmapReadGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        match &self.guard {
            Some(guard) => guard,
            None => unreachable!("read guard used after its hold ended"),
        }
    }
}

impl<T> Drop for MmapReadGuard<'_, T> {
    /// Release first, then record: the figures are not taken under the lock.
    #[inline]
    fn drop(&mut self) {
        let hold_ns = elapsed_ns(self.since);
        drop(self.guard.take());
        self.lock.read_stat.record_hold(hold_ns);
    }
}

impl<T: fmt::Debug> fmt::Debug for MmapReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MmapReadGuard")
            .field("value", &**self)
            .field("downgraded", &self.is_downgraded())
            .finish()
    }
}
