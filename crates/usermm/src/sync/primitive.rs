//! The one place that says what the seam's primitives are built on: host primitives in normal
//! builds, loom's under `--cfg loom` (the idea of crossbeam-utils' `primitive` module).
//!
//! | here | host (normal build) | `--cfg loom` |
//! |---|---|---|
//! | [`atomic`] | `std::sync::atomic` | `loom::sync::atomic` (and `Ordering`, which loom re-exports from std) |
//! | the engine's atomics of the fault/zap race | the same, through [`atomic`] | the same (see below) |
//! | `RawMutex`, `RawMutexGuard` | `parking_lot::{Mutex, MutexGuard}` themselves | an adapter on `loom::sync::Mutex` with the part of parking_lot's API the seam uses |
//! | `RawCondvar` | `parking_lot::Condvar` itself | an adapter on `loom::sync::Condvar` |
//! | `parking` | `parking_lot_core` itself | a one-bucket parking lot on a loom mutex and condvar, same signatures |
//!
//! On the host these are re-exports of the very types the seam used before, so a normal build
//! compiles to the same code. Under loom, `SpinLock`/`Mutex` (`lock.rs`), `CondVar`,
//! `Completion` and `Barrier` (`condvar.rs`), `PtLock`'s state word and parking (`ptlock.rs`)
//! and `SharedLine` over loom atomics (`shared_line.rs`) are explored by loom; `RwSem` has its own
//! loom twin (`rwsem/loom.rs`). The virtual-time hooks compile to no-ops under loom
//! (`vhook::active` is `false`).
//!
//! Beyond the seam, the atomics a fault and a zap race on come from [`atomic`] too: the
//! page-table entries (`backing::TablePage`), a page's `refcount` and `mapcount`
//! (`page_alloc::PageMeta`) and an mm's rss. On the host they are std's, as before. Under loom
//! they are loom's, so a model of the engine's own tables sees every load and store of an
//! entry: `PageMeta` is then built element by element (`backing::ZeroValid::zeroed`) rather
//! than found zeroed, and a table page's entries are made on first use (`backing.rs`).
//!
//! # Where the loom adapters differ from parking_lot
//! - loom objects must be created inside `loom::model`, so the constructors are not `const`
//!   under loom (the seam's `new`s lose `const` there too).
//! - No poisoning: a lock held by a panicking model thread is taken as if it were not poisoned,
//!   like parking_lot.
//! - `RawMutex::is_locked` reads a plain host flag kept next to the loom mutex (set after the
//!   lock is taken, cleared before it is released): for assertions only, not explored by loom.
//! - `RawCondvar::notify_*` cannot say how many threads were woken: they return `false`/`0`.
//! - The parking lot: see [`parking`].

/// The seam's own atomics (`PtLock`'s state word) and the engine's that a fault races a zap
/// on: page-table entries (`backing::TablePage`), a page's `refcount` and `mapcount`
/// (`page_alloc::PageMeta`) and an mm's rss counters. The rest of the engine's atomics (page
/// flags and links, vmstat, the backing's bitmaps) are host atomics in every build.
#[cfg(not(loom))]
pub(crate) mod atomic {
    pub(crate) use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU64, AtomicU8, Ordering};
}

#[cfg(loom)]
pub(crate) mod atomic {
    pub(crate) use loom::sync::atomic::{AtomicI32, AtomicI64, AtomicU64, AtomicU8, Ordering};
}

#[cfg(not(loom))]
pub(crate) use parking_lot::{
    Condvar as RawCondvar, Mutex as RawMutex, MutexGuard as RawMutexGuard,
};

/// Parking on an address (`PtLock`'s slow paths): `parking_lot_core` itself on the host.
#[cfg(not(loom))]
pub(crate) use parking_lot_core as parking;

#[cfg(loom)]
pub(crate) use self::loom_impl::{RawCondvar, RawMutex, RawMutexGuard};

/// Parking on an address under loom: `parking_lot_core`'s `park`/`unpark_one`/`SpinWait`
/// with the same signatures and contract, on one loom mutex and condvar (the whole parking lot
/// is one bucket).
///
/// As in parking_lot, `validate` runs with the bucket locked before the caller is queued, and
/// `unpark_one`'s callback runs with the bucket locked before the woken thread can return from
/// `park`, so a lock's state word and its queue change together. Differences: no timeouts
/// (`park` panics on one) and no `unpark_all`/requeue; `SpinWait::spin` gives way to loom once,
/// then says "park" (parking_lot spins about 10 times); and `be_fair`, which parking_lot sets
/// about once every 0.5 ms, is set on every unpark that wakes a thread in a model execution
/// that asked for it (`parking::set_fair_unpark`), so that a model can explore the fair
/// hand-off on purpose.
#[cfg(loom)]
#[expect(unsafe_code)] // `unsafe fn` declarations only, to keep parking_lot_core's signatures
pub(crate) mod parking {
    use std::sync::PoisonError;
    use std::time::Instant;

    pub(crate) use parking_lot_core::{
        ParkResult, ParkToken, UnparkResult, UnparkToken, DEFAULT_PARK_TOKEN, DEFAULT_UNPARK_TOKEN,
    };

    /// The parking lot: threads parked on a key, oldest first, and the tokens of those woken
    /// but not yet returned from `park`.
    #[derive(Debug, Default)]
    struct Lot {
        parked: Vec<(usize, u64)>,
        woken: Vec<(u64, UnparkToken)>,
        next_id: u64,
        fair: bool,
    }

    loom::lazy_static! {
        static ref LOT: (loom::sync::Mutex<Lot>, loom::sync::Condvar) =
            (loom::sync::Mutex::new(Lot::default()), loom::sync::Condvar::new());
    }

    fn lot() -> loom::sync::MutexGuard<'static, Lot> {
        LOT.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// From now until the end of this model execution, every unpark that wakes a thread says
    /// `be_fair`.
    pub(crate) fn set_fair_unpark(fair: bool) {
        lot().fair = fair;
    }

    /// `parking_lot_core::park`, without timeouts.
    ///
    /// # Safety
    /// The contract of `parking_lot_core::park` (the callbacks must not panic or call into the
    /// parking lot); nothing here relies on it, the signature is kept for the call sites.
    pub(crate) unsafe fn park(
        key: usize,
        validate: impl FnOnce() -> bool,
        before_sleep: impl FnOnce(),
        _timed_out: impl FnOnce(usize, bool),
        _park_token: ParkToken,
        timeout: Option<Instant>,
    ) -> ParkResult {
        assert!(timeout.is_none(), "the loom parking lot has no timeouts");
        let mut lot = lot();
        if !validate() {
            return ParkResult::Invalid;
        }
        let id = lot.next_id;
        lot.next_id += 1;
        lot.parked.push((key, id));
        before_sleep();
        loop {
            if let Some(i) = lot.woken.iter().position(|&(w, _)| w == id) {
                return ParkResult::Unparked(lot.woken.swap_remove(i).1);
            }
            lot = LOT.1.wait(lot).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// `parking_lot_core::unpark_one`.
    ///
    /// # Safety
    /// As for [`park`].
    pub(crate) unsafe fn unpark_one(
        key: usize,
        callback: impl FnOnce(UnparkResult) -> UnparkToken,
    ) -> UnparkResult {
        let mut lot = lot();
        let mut result = UnparkResult::default();
        let Some(i) = lot.parked.iter().position(|&(k, _)| k == key) else {
            callback(result);
            return result;
        };
        let (_, id) = lot.parked.remove(i);
        result.unparked_threads = 1;
        result.have_more_threads = lot.parked.iter().any(|&(k, _)| k == key);
        result.be_fair = lot.fair;
        let token = callback(result);
        lot.woken.push((id, token));
        LOT.1.notify_all();
        result
    }

    /// `parking_lot_core::SpinWait`: under loom, one turn that gives way, then "park".
    #[derive(Debug, Default)]
    pub(crate) struct SpinWait {
        spun: bool,
    }

    impl SpinWait {
        pub(crate) fn new() -> Self {
            Self::default()
        }

        pub(crate) fn spin(&mut self) -> bool {
            if self.spun {
                return false;
            }
            self.spun = true;
            loom::thread::yield_now();
            true
        }

        pub(crate) fn reset(&mut self) {
            self.spun = false;
        }
    }
}

#[cfg(loom)]
mod loom_impl {
    use std::ops::{Deref, DerefMut};
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    use std::sync::PoisonError;

    /// `parking_lot::Mutex` as the seam uses it, on `loom::sync::Mutex`.
    #[derive(Debug)]
    pub(crate) struct RawMutex<T> {
        raw: loom::sync::Mutex<T>,
        /// For `is_locked` only: a host flag loom does not explore.
        held: AtomicBool,
    }

    /// `parking_lot::MutexGuard` as the seam uses it. `inner` is `None` only while the lock is
    /// released inside [`RawMutexGuard::unlocked`] or [`RawCondvar::wait`].
    pub(crate) struct RawMutexGuard<'a, T> {
        lock: &'a RawMutex<T>,
        inner: Option<loom::sync::MutexGuard<'a, T>>,
    }

    impl<T> RawMutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self {
                raw: loom::sync::Mutex::new(value),
                held: AtomicBool::new(false),
            }
        }

        fn guard<'a>(&'a self, g: loom::sync::MutexGuard<'a, T>) -> RawMutexGuard<'a, T> {
            self.held.store(true, Relaxed);
            RawMutexGuard {
                lock: self,
                inner: Some(g),
            }
        }

        pub(crate) fn lock(&self) -> RawMutexGuard<'_, T> {
            let g = self.raw.lock().unwrap_or_else(PoisonError::into_inner);
            self.guard(g)
        }

        pub(crate) fn try_lock(&self) -> Option<RawMutexGuard<'_, T>> {
            match self.raw.try_lock() {
                Ok(g) => Some(self.guard(g)),
                Err(std::sync::TryLockError::Poisoned(p)) => Some(self.guard(p.into_inner())),
                Err(std::sync::TryLockError::WouldBlock) => None,
            }
        }

        pub(crate) fn is_locked(&self) -> bool {
            self.held.load(Relaxed)
        }

        pub(crate) fn get_mut(&mut self) -> &mut T {
            self.raw.get_mut().unwrap_or_else(PoisonError::into_inner)
        }
    }

    impl<'a, T> RawMutexGuard<'a, T> {
        fn release(&mut self) -> loom::sync::MutexGuard<'a, T> {
            self.lock.held.store(false, Relaxed);
            self.inner.take().expect("guard holds the lock")
        }

        fn reacquire(&mut self, g: loom::sync::MutexGuard<'a, T>) {
            self.lock.held.store(true, Relaxed);
            self.inner = Some(g);
        }

        /// `parking_lot::MutexGuard::unlocked`: release the lock while `f` runs, then take it
        /// again.
        pub(crate) fn unlocked<U>(s: &mut Self, f: impl FnOnce() -> U) -> U {
            drop(s.release());
            let r = f();
            let g = s.lock.raw.lock().unwrap_or_else(PoisonError::into_inner);
            s.reacquire(g);
            r
        }
    }

    impl<T> Drop for RawMutexGuard<'_, T> {
        fn drop(&mut self) {
            if self.inner.is_some() {
                drop(self.release());
            }
        }
    }

    impl<T> Deref for RawMutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.inner.as_ref().expect("guard holds the lock")
        }
    }

    impl<T> DerefMut for RawMutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.inner.as_mut().expect("guard holds the lock")
        }
    }

    /// `parking_lot::Condvar` as the seam uses it, on `loom::sync::Condvar`.
    #[derive(Debug, Default)]
    pub(crate) struct RawCondvar {
        raw: loom::sync::Condvar,
    }

    impl RawCondvar {
        pub(crate) fn new() -> Self {
            Self {
                raw: loom::sync::Condvar::new(),
            }
        }

        /// Release the guard's lock, sleep until notified, take the lock again.
        pub(crate) fn wait<T>(&self, g: &mut RawMutexGuard<'_, T>) {
            let inner = g.release();
            let inner = self.raw.wait(inner).unwrap_or_else(PoisonError::into_inner);
            g.reacquire(inner);
        }

        /// Wake one waiter; loom does not say whether there was one.
        pub(crate) fn notify_one(&self) -> bool {
            self.raw.notify_one();
            false
        }

        /// Wake every waiter; loom does not say how many there were.
        pub(crate) fn notify_all(&self) -> usize {
            self.raw.notify_all();
            0
        }
    }
}
