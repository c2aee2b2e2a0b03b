//! The host `RwSem`: `parking_lot::RwLock` + a waiter count, with the virtual-time hooks.

use std::fmt;
use std::sync::atomic::{
    AtomicUsize,
    Ordering::{Acquire, Release},
};

use crate::sync::class::LockClass;
use crate::sync::clock;
use crate::sync::vhook::{self, ClockKind, Current, LockMap, Mode};

/// The host lock under an [`RwSem`].
type RawRwSem<T> = parking_lot::RwLock<T>;

/// Tells virtual time that a hold ended; a guard's last field, so it drops after the host
/// guard (after the host unlock). It keeps the lock's map, not its id and class: those are
/// derived from the map at the release, and only in virtual time, so a wall-mode guard
/// stores one word for them. `clock` is the hold's: on [`Current`] the release tests the
/// seam's flag, on a decided clock it does not (`RwSem::read_contended_on`).
#[derive(Debug)]
struct HoldEnd<'a, C: ClockKind = Current> {
    map: &'a LockMap,
    mode: Mode,
    clock: C,
}

impl<C: ClockKind> Drop for HoldEnd<'_, C> {
    #[inline]
    fn drop(&mut self) {
        if self.clock.is_virtual() {
            vhook::lock_release_map(self.map, self.mode);
        }
    }
}

/// `struct rw_semaphore` (see the module documentation of `sync::rwsem`).
pub struct RwSem<T> {
    map: LockMap,
    raw: RawRwSem<T>,
    /// Threads past a failed fast path and not yet holding the lock (`rwsem_is_contended`).
    waiters: AtomicUsize,
}

/// Shared access to an [`RwSem`]'s data; dropping it is `up_read`. `C` is the clock the
/// hold is on: [`Current`] (the release tests the seam's flag) unless an operation that
/// decided its clock took it ([`RwSem::read_contended_on`]).
#[must_use = "if unused the RwSem is released at once"]
pub struct RwSemReadGuard<'a, T, C: ClockKind = Current> {
    inner: parking_lot::RwLockReadGuard<'a, T>,
    /// Only its drop matters (after `inner`'s).
    _end: HoldEnd<'a, C>,
}

/// Shared access taken by an operation that knows it runs on the wall clock
/// ([`RwSem::read_wall`]): the host guard alone, with no release hook to test at its drop.
#[must_use = "if unused the RwSem is released at once"]
pub(crate) struct RwSemWallReadGuard<'a, T> {
    inner: parking_lot::RwLockReadGuard<'a, T>,
}

/// Exclusive access to an [`RwSem`]'s data; dropping it is `up_write`.
#[must_use = "if unused the RwSem is released at once"]
pub struct RwSemWriteGuard<'a, T> {
    inner: parking_lot::RwLockWriteGuard<'a, T>,
    end: HoldEnd<'a>,
}

impl<T> RwSem<T> {
    /// `init_rwsem`.
    pub const fn new(class: &'static LockClass, value: T) -> Self {
        Self {
            map: LockMap::new(class),
            raw: parking_lot::RwLock::new(value),
            waiters: AtomicUsize::new(0),
        }
    }

    #[inline]
    fn end<C: ClockKind>(&self, clock: C, mode: Mode) -> HoldEnd<'_, C> {
        HoldEnd {
            map: &self.map,
            mode,
            clock,
        }
    }

    /// `down_read`.
    #[doc(alias = "down_read")]
    #[inline]
    pub fn read(&self) -> RwSemReadGuard<'_, T> {
        self.read_contended().0
    }

    /// `down_read`, saying whether it was contended: `None` when the lock was taken at once,
    /// `Some(ns waited)` otherwise (for lock_stat).
    #[inline]
    pub fn read_contended(&self) -> (RwSemReadGuard<'_, T>, Option<u64>) {
        self.read_contended_on(Current)
    }

    /// [`Self::read_contended`] on the clock `clock`, decided by the caller (a fault's mmap
    /// lock): on [`Wall`](vhook::Wall) no test of the seam's flag here or at the release, on
    /// [`Virtual`](vhook::Virtual) the hooks without asking.
    #[inline]
    pub(crate) fn read_contended_on<C: ClockKind>(
        &self,
        clock: C,
    ) -> (RwSemReadGuard<'_, T, C>, Option<u64>) {
        let ((inner, _end), waited) =
            self.acquire(clock, Mode::Shared, RawRwSem::try_read, RawRwSem::read);
        (RwSemReadGuard { inner, _end }, waited)
    }

    /// `down_read` by a caller that has tested the clock already and is on the wall clock
    /// (`vhook::Wall`; a TLB gate's access): the host lock only, no hook and no test of the
    /// seam's flag, here or at the release.
    #[inline]
    pub(crate) fn read_wall(&self, _clock: vhook::Wall) -> RwSemWallReadGuard<'_, T> {
        let inner = match self.raw.try_read() {
            Some(inner) => inner,
            None => self.read_wall_slow(),
        };
        RwSemWallReadGuard { inner }
    }

    /// [`Self::read_wall`]'s wait, counted as a waiter (as `acquire_slow` does).
    #[cold]
    #[inline(never)]
    fn read_wall_slow(&self) -> parking_lot::RwLockReadGuard<'_, T> {
        self.waiters.fetch_add(1, Release);
        let inner = self.raw.read();
        self.waiters.fetch_sub(1, Release);
        inner
    }

    /// `down_read_trylock`.
    #[doc(alias = "down_read_trylock")]
    #[inline]
    pub fn try_read(&self) -> Option<RwSemReadGuard<'_, T>> {
        let (inner, _end) = self.try_acquire(Mode::Shared, RawRwSem::try_read)?;
        Some(RwSemReadGuard { inner, _end })
    }

    /// `down_write`.
    #[doc(alias = "down_write")]
    #[inline]
    pub fn write(&self) -> RwSemWriteGuard<'_, T> {
        self.write_contended().0
    }

    /// `down_write`, saying whether it was contended (see [`Self::read_contended`]).
    #[inline]
    pub fn write_contended(&self) -> (RwSemWriteGuard<'_, T>, Option<u64>) {
        let ((inner, end), waited) = self.acquire(
            Current,
            Mode::Exclusive,
            RawRwSem::try_write,
            RawRwSem::write,
        );
        (RwSemWriteGuard { inner, end }, waited)
    }

    /// `down_write_trylock`.
    #[doc(alias = "down_write_trylock")]
    #[inline]
    pub fn try_write(&self) -> Option<RwSemWriteGuard<'_, T>> {
        let (inner, end) = self.try_acquire(Mode::Exclusive, RawRwSem::try_write)?;
        Some(RwSemWriteGuard { inner, end })
    }

    /// `down_read` or `down_write` (by `mode`) on the host lock, whose `try_take` and `take`
    /// are the mode's: the host guard and its hold's end, and the wait as `*_contended` says.
    /// Virtual time first takes the lock in its own order (`vhook::lock_acquire`), after which
    /// the host lock is free; on the host a failed fast path counts the thread as a waiter
    /// while it blocks.
    #[inline]
    fn acquire<'a, G, C: ClockKind>(
        &'a self,
        clock: C,
        mode: Mode,
        try_take: impl FnOnce(&'a RawRwSem<T>) -> Option<G>,
        take: impl FnOnce(&'a RawRwSem<T>) -> G,
    ) -> ((G, HoldEnd<'a, C>), Option<u64>) {
        if clock.is_virtual() {
            return self.acquire_virtual(clock, mode, take);
        }
        match try_take(&self.raw) {
            Some(inner) => ((inner, self.end(clock, mode)), None),
            None => self.acquire_slow(clock, mode, take),
        }
    }

    #[cold]
    #[inline(never)]
    fn acquire_slow<'a, G, C: ClockKind>(
        &'a self,
        clock: C,
        mode: Mode,
        take: impl FnOnce(&'a RawRwSem<T>) -> G,
    ) -> ((G, HoldEnd<'a, C>), Option<u64>) {
        let t0 = clock::now();
        self.waiters.fetch_add(1, Release);
        let inner = take(&self.raw);
        self.waiters.fetch_sub(1, Release);
        ((inner, self.end(clock, mode)), Some(t0.elapsed_ns()))
    }

    #[cold]
    #[inline(never)]
    fn acquire_virtual<'a, G, C: ClockKind>(
        &'a self,
        clock: C,
        mode: Mode,
        take: impl FnOnce(&'a RawRwSem<T>) -> G,
    ) -> ((G, HoldEnd<'a, C>), Option<u64>) {
        let acq = vhook::lock_acquire_map(&self.map, mode);
        let inner = take(&self.raw);
        (
            (inner, self.end(clock, mode)),
            acq.contended.then_some(acq.waited_ns),
        )
    }

    /// `down_*_trylock` (by `mode`), with the mode's `try_take` on the host lock.
    #[inline]
    fn try_acquire<'a, G>(
        &'a self,
        mode: Mode,
        try_take: impl FnOnce(&'a RawRwSem<T>) -> Option<G>,
    ) -> Option<(G, HoldEnd<'a>)> {
        if vhook::active() {
            vhook::lock_try_acquire_map(&self.map, mode)?;
        }
        let inner = try_take(&self.raw)?;
        Some((inner, self.end(Current, mode)))
    }

    /// `rwsem_is_contended`: some thread waits for the lock. Advisory.
    #[doc(alias = "rwsem_is_contended")]
    pub fn is_contended(&self) -> bool {
        self.waiters.load(Acquire) != 0
    }

    /// `rwsem_is_locked`.
    #[doc(alias = "rwsem_is_locked")]
    pub fn is_locked(&self) -> bool {
        self.raw.is_locked()
    }

    /// A writer holds the lock.
    pub fn is_write_locked(&self) -> bool {
        self.raw.is_locked_exclusive()
    }

    /// The data, through exclusive ownership: no lock needed.
    pub fn get_mut(&mut self) -> &mut T {
        self.raw.get_mut()
    }

    /// The data, by ownership.
    pub fn into_inner(self) -> T {
        // Virtual time forgets the lock when its map drops, here, as the value leaves.
        let Self { map, raw, .. } = self;
        drop(map);
        raw.into_inner()
    }

    pub fn class(&self) -> &'static LockClass {
        self.map.class()
    }
}

impl<T> fmt::Debug for RwSem<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwSem")
            .field("class", &self.map.class().name)
            .field("locked", &self.is_locked())
            .field("write_locked", &self.is_write_locked())
            .finish_non_exhaustive()
    }
}

impl<'a, T> RwSemWriteGuard<'a, T> {
    /// `downgrade_write`: turn this write hold into a read hold, atomically.
    #[doc(alias = "downgrade_write")]
    pub fn downgrade(self) -> RwSemReadGuard<'a, T> {
        let RwSemWriteGuard { inner, end } = self;
        let map = end.map;
        // The hold goes on, as a read hold: no release.
        std::mem::forget(end);
        let inner = parking_lot::RwLockWriteGuard::downgrade(inner);
        if vhook::active() {
            vhook::lock_downgrade_map(map);
        }
        RwSemReadGuard {
            inner,
            _end: HoldEnd {
                map,
                mode: Mode::Shared,
                clock: Current,
            },
        }
    }
}

impl<T, C: ClockKind> std::ops::Deref for RwSemReadGuard<'_, T, C> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T: fmt::Debug, C: ClockKind> fmt::Debug for RwSemReadGuard<'_, T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

guard_deref!(RwSemWallReadGuard.inner);
guard_deref!(mut RwSemWriteGuard.inner);
guard_debug!(RwSemWriteGuard, RwSemWallReadGuard);
