//! The mm's `mmap_lock`: a downgradable reader-writer lock, instrumented.
//!
//! Mirrors `include/linux/mmap_lock.h` (the `mmap_*_lock` wrappers every caller goes through),
//! `mm/mmap_lock.c` (the tracepoints hung on those wrappers) and the `rw_semaphore` underneath
//! (`kernel/locking/rwsem.c`, in particular `downgrade_write`). One [`MmapLock`] protects one
//! address space's VMA tree: faults take it for read, `mmap`/`munmap`/`mprotect` for write.
//!
//! ```text
//!   mmap_read_lock ──► MmapReadGuard ──drop──► mmap_read_unlock
//!   mmap_write_lock ─► MmapWriteGuard ─drop / unlock()──► mmap_write_unlock
//!                           │
//!                           └─ downgrade() ──► MmapReadGuard (is_downgraded)  ── mmap_write_downgrade
//! ```
//!
//! # Why downgrade exists (seed 003)
//! `munmap` of a large range used to zap every PTE with the lock held for write, so every fault on
//! every *other* VMA of the mm stalled for the whole zap (seconds for 80 GB). Since Linux 4.20
//! ("mm: mmap: zap pages with read mmap_sem in munmap"; today `vms_complete_munmap_vmas` in
//! `mm/vma.c`) munmap only splits and detaches under the write lock, then downgrades and zaps
//! under the read lock. That is sound because of this sequence, which callers must keep:
//! 1. Under the write lock, detach the VMAs from the tree. From here no fault can find them.
//! 2. Downgrade. The downgrade is *atomic*: the lock goes from "one writer" to "one reader (us)"
//!    with no instant at which it is free, so no other writer (an `mmap` reusing the hole) can get
//!    in between, while readers (faults elsewhere in the mm) may now proceed.
//! 3. Zap the PTEs and free the page tables of the detached range under the read lock. A fault
//!    racing in the range finds no VMA and gets `SIGSEGV`; it can never repopulate the range,
//!    because it would need the VMA to do so (modelled in `tests/loom_mmap_lock.rs`).
//! 4. Unlock.
//!
//! # Invariants
//! - At any moment the lock is free, held by any number of readers, or held by one writer.
//! - A write guard's exclusive hold ends exactly once: at [`MmapWriteGuard::downgrade`], at
//!   [`MmapWriteGuard::unlock`] or at its drop. That length is recorded in the exclusive-hold
//!   histogram and published in [`MmapLock::last_exclusive_hold_ns`].
//! - Like an `rw_semaphore`, the lock is not recursive: a thread holding it for read that asks for
//!   it again may deadlock behind a queued writer (the lock is task-fair).
//!
//! # Instrumentation
//! Every acquisition goes through this file, so the counters live here, as the kernel hangs its
//! `mmap_lock` tracepoints on the wrappers in `mmap_lock.h`:
//! - two [`LockStat`] classes, `mmap_lock-R` and `mmap_lock-W`, in the columns of
//!   `/proc/lock_stat` (acquisitions, contentions, wait and hold times). A downgrade counts as an
//!   uncontended read acquisition, so read acquisitions and read holds pair up;
//! - an HDR histogram of exclusive (write-side) hold times in ns, 1 ns ..= 1 h, 3 significant
//!   digits: the figure seed 003 is about. A downgraded write's exclusive hold ends at the
//!   downgrade, not at the final unlock. It is made at the first write hold and grows to the
//!   longest hold recorded (its counts up to 1 h are 270 KiB: made with every mm, they were
//!   most of a fork);
//! - [`MmapLock::is_contended`] (`mmap_lock_is_contended`): a count of threads that failed the
//!   fast path and are waiting.
//!
//! The uncontended read path adds one `try_read`, one relaxed counter increment and one read
//! of the lock's [`LockstatClock`] (`lockstat_clock()`: the TSC in wall mode) to the bare lock;
//! the read unlock adds one more clock read and the `record_hold` atomics. Nothing allocates.
//! Slow paths are out of line. Write holds (the exclusive-hold histogram) and all waits are
//! timed with [`clock::now`].
//!
//! # Locks
//! The histogram is a leaf [`SpinLock`]. It is taken after the write lock is released, or
//! (at a downgrade) while holding the lock for read:
//! `mmap_lock (read) -> exclusive-hold histogram`. Nothing is ever taken under the histogram.
//!
//! # Host, loom and virtual time
//! The lock itself is the seam's [`RwSem`]: a `parking_lot::RwLock` on the host,
//! a loom state machine under `--cfg loom` (so loom checks that guards never overlap a writer,
//! `tests/loom_mmap_lock.rs`), and a lock in virtual time in a virtual run. This file adds only
//! the instrumentation, the same in every build; its times come from [`clock`], so in a virtual
//! run they are virtual waits and holds (under loom, waits are not timed: a contended
//! acquisition records 0 ns). A fault, which decided its clock at its entry
//! (`vhook::on_clock!`), takes the read side with [`MmapLock::read_on`]: the guard carries that
//! clock, and the rwsem's hooks test no flag at the acquisition or the release.
//!
//! # Differences from Linux
//! - On the host, built on `parking_lot::RwLock` (task-fair: new readers queue behind a parked writer, as
//!   rwsem readers queue behind a waiting writer), without the rwsem's optimistic spinning on
//!   the owner or its reader-stealing rules.
//! - No `_killable` variants. The per-VMA locks' `mm_lock_seq` lives here (bumped by every
//!   write unlock and downgrade); the locks themselves are [`VmaLock`](super::VmaLock)s.
//! - The statistics are per lock instance (one per mm), not per lock class as in lockdep. The
//!   read side's are striped by thread (the kernel keeps lock_stat per CPU), so that recording
//!   a fault's read acquisition writes no cache line other faulting threads share.
//! - Times are nanoseconds from [`clock::now`] (`CLOCK_MONOTONIC` on the host), read holds
//!   from the lock's [`LockstatClock`] (the TSC on the host, scaled per lock).

use serde::Serialize;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;

use super::class::{MMAP_LOCK, MMAP_LOCK_HIST};
use super::clock::{self, Ktime, LockstatClock, LockstatStamp};
use super::lock::SpinLock;
use super::rwsem::{RwSem, RwSemReadGuard, RwSemWriteGuard};
use super::vhook::{ClockKind, Current};
use super::vma_lock::MmLockSeq;
use crate::stats::lockstat::{LockStat, LockStatSnapshot, StripedLockStat};
use std::sync::Arc;

/// Lowest value the exclusive-hold histogram distinguishes: 1 ns.
const HOLD_HIST_LOW_NS: u64 = 1;
/// Highest value the exclusive-hold histogram tracks: one hour; longer holds saturate.
const HOLD_HIST_HIGH_NS: u64 = 3_600 * 1_000_000_000;
/// Significant decimal digits of the exclusive-hold histogram (0.1 % resolution).
const HOLD_HIST_SIGFIG: u8 = 3;

/// The figures of one [`MmapLock`], for a report.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct MmapLockStats {
    /// Read-side lock_stat (`mmap_lock-R`); includes downgrades as acquisitions.
    pub read: LockStatSnapshot,
    /// Write-side lock_stat (`mmap_lock-W`); hold times are exclusive holds.
    pub write: LockStatSnapshot,
    /// Distribution of exclusive hold times.
    pub exclusive_hold: HoldTimeSummary,
}

/// Summary of a hold-time histogram, in nanoseconds. All zero when nothing was recorded.
///
/// Quantiles are HDR-histogram values: exact to 3 significant digits.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct HoldTimeSummary {
    pub count: u64,
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

impl HoldTimeSummary {
    fn from_histogram(h: &hdrhistogram::Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            count: h.len(),
            min_ns: h.min(),
            p50_ns: h.value_at_quantile(0.50),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
        }
    }
}

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
    rwsem: RwSem<T>,
    /// Read-side figures, striped by thread: concurrent readers (faults) write no shared
    /// line for them (the kernel's lock_stat is per CPU).
    read_stat: StripedLockStat,
    /// Write-side figures; hold times are exclusive holds.
    write_stat: CachePadded<LockStat>,
    /// Exclusive hold times in ns (`None` until the first). A leaf lock: see the module's
    /// "Locks".
    exclusive_hold: SpinLock<Option<Histogram<u64>>>,
    /// Length of the most recently ended exclusive hold, in ns.
    last_exclusive_hold_ns: AtomicU64,
    /// `mm->mm_lock_seq`: bumped as every write hold ends (`vma_end_write_all`), which
    /// releases every per-VMA write lock taken under it (see [`VmaLock`](super::VmaLock)).
    mm_lock_seq: Arc<MmLockSeq>,
    /// The read side's hold clock (the TSC in wall mode: two reads per fault).
    clock: LockstatClock,
}

/// Shared access to an [`MmapLock`]'s value; dropping it is `mmap_read_unlock`. `C` is the
/// clock the hold is on: [`Current`] unless a fault that decided its clock took it
/// ([`MmapLock::read_on`]), whose guard tests no flag at its release.
#[doc(alias = "mmap_read_unlock")]
#[must_use = "if unused the MmapLock is released at once"]
pub struct MmapReadGuard<'a, T, C: ClockKind = Current> {
    /// `None` only inside `drop`, after the lock was released.
    guard: Option<RwSemReadGuard<'a, T, C>>,
    lock: &'a MmapLock<T>,
    since: LockstatStamp,
    /// `Some(exclusive hold in ns)` when this guard came from a downgrade.
    downgraded_from_ns: Option<u64>,
}

/// Exclusive access to an [`MmapLock`]'s value; dropping it is `mmap_write_unlock`.
#[doc(alias = "mmap_write_unlock")]
#[must_use = "if unused the MmapLock is released at once"]
pub struct MmapWriteGuard<'a, T> {
    /// `None` only after the exclusive hold has ended (downgrade or unlock), i.e. never while
    /// the guard is reachable by a caller.
    guard: Option<RwSemWriteGuard<'a, T>>,
    lock: &'a MmapLock<T>,
    since: Ktime,
}

impl<T> MmapLock<T> {
    /// An unlocked lock around `value`, with zeroed statistics.
    #[doc(alias = "mmap_init_lock")]
    pub fn new(value: T) -> Self {
        Self::with_clock(value, LockstatClock::new())
    }

    /// [`MmapLock::new`] with the read side timed on `clock` (an mm's: its machine's clock's
    /// [`LockstatClock::sibling`]).
    pub fn with_clock(value: T, clock: LockstatClock) -> Self {
        Self {
            rwsem: RwSem::new(&MMAP_LOCK, value),
            read_stat: StripedLockStat::new("mmap_lock-R"),
            write_stat: CachePadded::new(LockStat::new("mmap_lock-W")),
            exclusive_hold: SpinLock::new(&MMAP_LOCK_HIST, None),
            last_exclusive_hold_ns: AtomicU64::new(0),
            mm_lock_seq: Arc::new(MmLockSeq::new()),
            clock,
        }
    }

    /// `mm->mm_lock_seq` (see [`VmaLock`](super::VmaLock)): shared with the structures that
    /// create VMA locks under a write hold.
    pub fn mm_lock_seq(&self) -> &Arc<MmLockSeq> {
        &self.mm_lock_seq
    }

    /// Take the lock for read, blocking while a writer holds it or waits for it.
    #[doc(alias = "mmap_read_lock")]
    #[inline]
    pub fn read(&self) -> MmapReadGuard<'_, T> {
        self.read_on(Current)
    }

    /// [`Self::read`] on the clock `clock`, decided by the caller (a fault, `vhook::on_clock!`):
    /// the rwsem's hooks test no flag, here or at the release ([`RwSem::read_contended_on`]).
    /// The lock_stat figures are the same on every clock.
    #[inline]
    pub(crate) fn read_on<C: ClockKind>(&self, clock: C) -> MmapReadGuard<'_, T, C> {
        let (guard, waited) = self.rwsem.read_contended_on(clock);
        match waited {
            None => self.read_stat.record_uncontended(),
            Some(ns) => self.read_stat.record_contended(ns),
        }
        MmapReadGuard {
            guard: Some(guard),
            lock: self,
            since: self.clock.now(),
            downgraded_from_ns: None,
        }
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
            since: self.clock.now(),
            downgraded_from_ns: None,
        })
    }

    /// Take the lock for write, blocking while anyone holds it.
    #[doc(alias = "mmap_write_lock")]
    #[inline]
    pub fn write(&self) -> MmapWriteGuard<'_, T> {
        let (guard, waited) = self.rwsem.write_contended();
        match waited {
            None => self.write_stat.record_uncontended(),
            Some(ns) => self.write_stat.record_contended(ns),
        }
        MmapWriteGuard {
            guard: Some(guard),
            lock: self,
            since: clock::now(),
        }
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
            since: clock::now(),
        })
    }

    /// Whether some thread is waiting for the lock. Long read-side walks may poll this and
    /// back off. Advisory: the answer can be stale by the time it is used.
    #[doc(alias = "mmap_lock_is_contended")]
    #[doc(alias = "rwsem_is_contended")]
    pub fn is_contended(&self) -> bool {
        self.rwsem.is_contended()
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
        self.rwsem.is_write_locked()
    }

    /// The lock_stat figures and the exclusive-hold distribution accumulated so far.
    pub fn stats(&self) -> MmapLockStats {
        let exclusive_hold = self
            .exclusive_hold
            .lock()
            .as_ref()
            .map_or_else(HoldTimeSummary::default, HoldTimeSummary::from_histogram);
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
        if let Some(h) = self.exclusive_hold.lock().as_mut() {
            h.reset();
        }
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

    /// Read-only access to the figures and state, not to the value.
    pub fn info(&self) -> MmapLockInfo<'_, T> {
        MmapLockInfo(self)
    }

    /// The value, by ownership: no lock needed.
    pub fn into_inner(self) -> T {
        self.rwsem.into_inner()
    }

    /// Record the end of an exclusive hold of `hold_ns`.
    fn exclusive_hold_ended(&self, hold_ns: u64) {
        self.write_stat.record_hold(hold_ns);
        self.last_exclusive_hold_ns.store(hold_ns, Relaxed);
        let v = hold_ns.clamp(HOLD_HIST_LOW_NS, HOLD_HIST_HIGH_NS);
        let mut h = self.exclusive_hold.lock();
        // Auto-resizing from 1 ns: the same buckets as a histogram bounded at 1 h, made only
        // as far as the longest hold needs (the clamp keeps them within 1 h).
        let h = h.get_or_insert_with(|| {
            Histogram::new(HOLD_HIST_SIGFIG).expect("constant histogram precision is valid")
        });
        if h.record(v).is_err() {
            h.saturating_record(v);
        }
    }
}

/// Read-only access to an [`MmapLock`]'s figures and state, without access to the data it
/// protects: what `Mm::mmap_lock_info` hands out.
pub struct MmapLockInfo<'a, T>(&'a MmapLock<T>);

impl<T> Clone for MmapLockInfo<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for MmapLockInfo<'_, T> {}

impl<T> MmapLockInfo<'_, T> {
    /// See [`MmapLock::stats`].
    pub fn stats(&self) -> MmapLockStats {
        self.0.stats()
    }

    /// See [`MmapLock::reset_stats`].
    pub fn reset_stats(&self) {
        self.0.reset_stats()
    }

    /// See [`MmapLock::last_exclusive_hold_ns`].
    pub fn last_exclusive_hold_ns(&self) -> u64 {
        self.0.last_exclusive_hold_ns()
    }

    /// See [`MmapLock::is_locked`].
    pub fn is_locked(&self) -> bool {
        self.0.is_locked()
    }

    /// See [`MmapLock::is_write_locked`].
    pub fn is_write_locked(&self) -> bool {
        self.0.is_write_locked()
    }

    /// See [`MmapLock::is_contended`].
    pub fn is_contended(&self) -> bool {
        self.0.is_contended()
    }
}

impl<T> fmt::Debug for MmapLockInfo<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.0, f)
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
        let hold_ns = self.since.elapsed_ns();
        // mmap_write_downgrade: vma_end_write_all, then downgrade_write.
        self.lock.mm_lock_seq.end_write_all();
        let guard = guard.downgrade();
        let since = self.lock.clock.now();
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
        self.since.elapsed_ns()
    }

    /// End the exclusive hold if it has not ended yet; the histogram is updated after the
    /// lock is released.
    fn release(&mut self) -> Option<u64> {
        let guard = self.guard.take()?;
        let hold_ns = self.since.elapsed_ns();
        // mmap_write_unlock: vma_end_write_all, then up_write.
        self.lock.mm_lock_seq.end_write_all();
        drop(guard);
        self.lock.exclusive_hold_ended(hold_ns);
        Some(hold_ns)
    }
}

guard_deref!(mut MmapWriteGuard.guard?, "write guard used after its hold ended");

impl<T> Drop for MmapWriteGuard<'_, T> {
    fn drop(&mut self) {
        self.release();
    }
}

guard_debug!(struct MmapWriteGuard);

impl<T, C: ClockKind> MmapReadGuard<'_, T, C> {
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
        self.lock.clock.elapsed_ns(self.since)
    }
}

impl<T, C: ClockKind> std::ops::Deref for MmapReadGuard<'_, T, C> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        match &self.guard {
            Some(guard) => guard,
            None => unreachable!("read guard used after its hold ended"),
        }
    }
}

impl<T, C: ClockKind> Drop for MmapReadGuard<'_, T, C> {
    /// Release first, then record: the figures are not taken under the lock.
    #[inline]
    fn drop(&mut self) {
        let hold_ns = self.lock.clock.elapsed_ns(self.since);
        drop(self.guard.take());
        self.lock.read_stat.record_hold(hold_ns);
    }
}

impl<T: fmt::Debug, C: ClockKind> fmt::Debug for MmapReadGuard<'_, T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MmapReadGuard")
            .field("value", &**self)
            .field("downgraded", &self.is_downgraded())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod test;
