//! [`SpinLock`] (`spinlock_t`) and [`Mutex`] (`struct mutex`): the engine's exclusive locks.
//!
//! Both are a host lock plus a [`LockClass`]. On the host they are the same `parking_lot`
//! mutex the engine used before the seam (a few spins, then parking), so wall-mode figures do
//! not move; the class says how a waiter waits in virtual time (a spinlock's CPU stays busy, a
//! mutex's goes idle) and names the lock in the cost profile.
//!
//! Under `--cfg loom` the host lock is [`primitive`](super::primitive)'s adapter on
//! `loom::sync::Mutex`, so loom explores every interleaving of lock, unlock and
//! [`SpinLockGuard::unlocked`] (`tests/loom_lock.rs`); the hooks are then no-ops. A loom
//! spinlock blocks rather than spins: the same exclusion, which is what loom checks.
//!
//! # Hooks (see [`vhook`])
//! `lock`: `vhook::lock_acquire` then the host lock; `try_lock`:
//! `vhook::lock_try_acquire`; the guard's drop: the host unlock then
//! `vhook::lock_release`; dropping the lock: `vhook::lock_forget`. Each is behind one
//! `vhook::active` test, so the host path pays a thread-local load and a branch. The guard
//! keeps the lock's `LockMap` (one word); the id and class the release hook needs are derived
//! from it only in virtual time. An operation that has decided its clock already
//! (`vhook::Clock`) takes the lock with `lock_wall` on the wall clock: the host guard alone,
//! with no test at either end (what `no_vtime_seam` builds for every lock).
//!
//! # Guards are the proof
//! A [`SpinLockGuard`] or [`MutexGuard`] is the only way to the data; functions that need the
//! lock held take the guard (or `&mut` of the data it derefs to).

use std::fmt;

use super::class::LockClass;
use super::clock;
use super::primitive::{RawMutex, RawMutexGuard};
use super::vhook::{self, Clock, Current, LockMap, Mode, Virtual, Wall};

/// Tells virtual time that an exclusive hold ended. A guard's last field: it drops after the
/// host guard, i.e. after the host lock is released. It keeps the lock's map; the id and
/// class are derived from it at the release, and only in virtual time (a wall-mode guard
/// stores one word for them, not two).
#[derive(Debug)]
struct ExclusiveRelease<'a> {
    map: &'a LockMap,
}

impl Drop for ExclusiveRelease<'_> {
    #[inline]
    fn drop(&mut self) {
        if vhook::active() {
            vhook::lock_release_map(self.map, Mode::Exclusive);
        }
    }
}

/// `spinlock_t`: mutual exclusion whose waiters spin (in virtual time; on the host, a
/// `parking_lot` mutex that spins briefly, then parks).
pub struct SpinLock<T> {
    map: LockMap,
    raw: RawMutex<T>,
}

/// A [`SpinLock`] held by an operation that knows it runs on the wall clock
/// ([`SpinLock::lock_wall`]): the host guard alone, no release hook to test at its drop.
#[must_use = "if unused the lock is released at once"]
pub(crate) struct SpinLockWallGuard<'a, T> {
    inner: RawMutexGuard<'a, T>,
}

/// A [`Clock`] that can take a [`SpinLock`]: on [`Wall`] the host guard alone
/// ([`SpinLock::lock_wall`]), otherwise the seam's guard with its release hook.
pub(crate) trait SpinClock: Clock {
    type SpinGuard<'a, T: 'a>: std::ops::DerefMut<Target = T>;

    /// `spin_lock` on this clock.
    fn spin_lock<T>(self, lock: &SpinLock<T>) -> Self::SpinGuard<'_, T>;
}

impl SpinClock for Wall {
    type SpinGuard<'a, T: 'a> = SpinLockWallGuard<'a, T>;

    #[inline(always)]
    fn spin_lock<T>(self, lock: &SpinLock<T>) -> SpinLockWallGuard<'_, T> {
        lock.lock_wall(self)
    }
}

impl SpinClock for Virtual {
    type SpinGuard<'a, T: 'a> = SpinLockGuard<'a, T>;

    #[inline(always)]
    fn spin_lock<T>(self, lock: &SpinLock<T>) -> SpinLockGuard<'_, T> {
        lock.lock()
    }
}

impl SpinClock for Current {
    type SpinGuard<'a, T: 'a> = SpinLockGuard<'a, T>;

    #[inline(always)]
    fn spin_lock<T>(self, lock: &SpinLock<T>) -> SpinLockGuard<'_, T> {
        lock.lock()
    }
}

/// Exclusive access to a [`SpinLock`]'s data; dropping it is `spin_unlock`.
#[must_use = "if unused the lock is released at once"]
pub struct SpinLockGuard<'a, T> {
    inner: RawMutexGuard<'a, T>,
    release: ExclusiveRelease<'a>,
}

impl<T> SpinLock<T> {
    const_unless_loom! {
        /// An unlocked lock of class `class` around `value` (`spin_lock_init`).
        pub fn new(class: &'static LockClass, value: T) -> Self {
            Self {
                map: LockMap::new(class),
                raw: RawMutex::new(value),
            }
        }
    }

    #[inline]
    fn guard<'a>(&'a self, inner: RawMutexGuard<'a, T>) -> SpinLockGuard<'a, T> {
        SpinLockGuard {
            inner,
            release: ExclusiveRelease { map: &self.map },
        }
    }

    /// `spin_lock`.
    #[doc(alias = "spin_lock")]
    #[inline]
    pub fn lock(&self) -> SpinLockGuard<'_, T> {
        if vhook::active() {
            return self.lock_virtual().0;
        }
        self.guard(self.raw.lock())
    }

    /// `spin_lock` by a caller that has tested the clock already and is on the wall clock
    /// (`vhook::Wall`, through `SpinClock::spin_lock`): the host lock only, no hook and no
    /// test of the seam's flag, here or at the release.
    #[inline]
    pub(crate) fn lock_wall(&self, _clock: vhook::Wall) -> SpinLockWallGuard<'_, T> {
        SpinLockWallGuard {
            inner: self.raw.lock(),
        }
    }

    /// `spin_trylock`.
    #[doc(alias = "spin_trylock")]
    #[inline]
    pub fn try_lock(&self) -> Option<SpinLockGuard<'_, T>> {
        if vhook::active() {
            vhook::lock_try_acquire_map(&self.map, Mode::Exclusive)?;
        }
        self.raw.try_lock().map(|g| self.guard(g))
    }

    /// Take the lock and say whether it was contended: `None` when it was free, `Some(ns
    /// waited)` when the caller had to wait (for lock_stat). On the host the wait is timed only
    /// when the first attempt fails.
    #[inline]
    pub(crate) fn lock_contended(&self) -> (SpinLockGuard<'_, T>, Option<u64>) {
        if vhook::active() {
            return self.lock_virtual();
        }
        match self.raw.try_lock() {
            Some(g) => (self.guard(g), None),
            None => self.lock_slow(),
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self) -> (SpinLockGuard<'_, T>, Option<u64>) {
        let t0 = clock::now();
        let g = self.raw.lock();
        (self.guard(g), Some(t0.elapsed_ns()))
    }

    #[cold]
    #[inline(never)]
    fn lock_virtual(&self) -> (SpinLockGuard<'_, T>, Option<u64>) {
        let acq = vhook::lock_acquire_map(&self.map, Mode::Exclusive);
        let g = self.raw.lock();
        (self.guard(g), acq.contended.then_some(acq.waited_ns))
    }

    /// The data, through exclusive ownership: no lock needed.
    pub fn get_mut(&mut self) -> &mut T {
        self.raw.get_mut()
    }

    pub fn class(&self) -> &'static LockClass {
        self.map.class()
    }

    /// Whether the lock is held (for assertions).
    #[doc(alias = "spin_is_locked")]
    pub fn is_locked(&self) -> bool {
        self.raw.is_locked()
    }
}

impl<T> fmt::Debug for SpinLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpinLock")
            .field("class", &self.map.class().name)
            .field("locked", &self.raw.is_locked())
            .finish_non_exhaustive()
    }
}

guard_deref!(mut SpinLockGuard.inner);
guard_deref!(mut SpinLockWallGuard.inner);

impl<T> SpinLockGuard<'_, T> {
    /// Release the lock while `f` runs, then take it again (the guard stays valid; the data may
    /// have changed meanwhile).
    pub fn unlocked<U>(s: &mut Self, f: impl FnOnce() -> U) -> U {
        if !vhook::active() {
            return RawMutexGuard::unlocked(&mut s.inner, f);
        }
        let map = s.release.map;
        RawMutexGuard::unlocked(&mut s.inner, || {
            vhook::lock_release_map(map, Mode::Exclusive);
            let r = f();
            vhook::lock_acquire_map(map, Mode::Exclusive);
            r
        })
    }
}

/// `struct mutex`: mutual exclusion whose waiters sleep. On the host the same lock as
/// [`SpinLock`]; the difference is its class's [`WaitKind`](super::WaitKind) in virtual time.
pub struct Mutex<T>(SpinLock<T>);

/// Exclusive access to a [`Mutex`]'s data; dropping it is `mutex_unlock`.
#[must_use = "if unused the mutex is released at once"]
pub struct MutexGuard<'a, T>(SpinLockGuard<'a, T>);

impl<T> Mutex<T> {
    const_unless_loom! {
        /// An unlocked mutex of class `class` around `value` (`mutex_init`).
        pub fn new(class: &'static LockClass, value: T) -> Self {
            Self(SpinLock::new(class, value))
        }
    }

    /// `mutex_lock`.
    #[doc(alias = "mutex_lock")]
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        MutexGuard(self.0.lock())
    }

    /// `mutex_trylock`.
    #[doc(alias = "mutex_trylock")]
    #[inline]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.0.try_lock().map(MutexGuard)
    }

    /// The data, through exclusive ownership: no lock needed.
    pub fn get_mut(&mut self) -> &mut T {
        self.0.get_mut()
    }

    pub fn class(&self) -> &'static LockClass {
        self.0.class()
    }

    /// Whether the mutex is held (for assertions).
    #[doc(alias = "mutex_is_locked")]
    pub fn is_locked(&self) -> bool {
        self.0.is_locked()
    }
}

impl<T> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mutex")
            .field("class", &self.0.class().name)
            .field("locked", &self.0.is_locked())
            .finish_non_exhaustive()
    }
}

impl<'a, T> MutexGuard<'a, T> {
    /// Release the mutex while `f` runs, then take it again (parking_lot's
    /// `MutexGuard::unlocked`): percpu drops `pcpu_lock` around chunk creation this way.
    pub fn unlocked<U>(s: &mut Self, f: impl FnOnce() -> U) -> U {
        SpinLockGuard::unlocked(&mut s.0, f)
    }

    /// The host guard and the lock's identity, for [`CondVar`](super::CondVar).
    pub(super) fn parts(&mut self) -> (&mut RawMutexGuard<'a, T>, usize, &'static LockClass) {
        let map = self.0.release.map;
        (&mut self.0.inner, map.id(), map.class())
    }
}

guard_deref!(mut MutexGuard.0);
guard_debug!(SpinLockGuard, MutexGuard, SpinLockWallGuard);
