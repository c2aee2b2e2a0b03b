//! The one place that says what the seam's primitives are built on: host primitives in normal
//! builds, loom's under `--cfg loom` (the idea of crossbeam-utils' `primitive` module).
//!
//! | here | host (normal build) | `--cfg loom` |
//! |---|---|---|
//! | [`atomic`] | `std::sync::atomic` | `loom::sync::atomic` (and `Ordering`, which loom re-exports from std) |
//! | `RawMutex`, `RawMutexGuard` | `parking_lot::{Mutex, MutexGuard}` themselves | an adapter on `loom::sync::Mutex` with the part of parking_lot's API the seam uses |
//! | `RawCondvar` | `parking_lot::Condvar` itself | an adapter on `loom::sync::Condvar` |
//! | `spin_loop` | `std::hint::spin_loop` | `loom::thread::yield_now` (loom must see a spinning thread give way) |
//!
//! On the host these are re-exports of the very types the seam used before, so a normal build
//! compiles to the same code. Under loom, `SpinLock`/`Mutex` (`lock.rs`), `CondVar`,
//! `Completion` and `Barrier` (`condvar.rs`), `PtLock`'s state word (`ptlock.rs`) and
//! `SharedLine` over loom atomics (`shared_line.rs`) are explored by loom; `RwSem` has its own
//! loom twin (`rwsem/loom.rs`). The virtual-time hooks compile to no-ops under loom
//! (`vhook::active` is `false`).
//!
//! # Where the loom adapters differ from parking_lot
//! - loom objects must be created inside `loom::model`, so the constructors are not `const`
//!   under loom (the seam's `new`s lose `const` there too).
//! - No poisoning: a lock held by a panicking model thread is taken as if it were not poisoned,
//!   like parking_lot.
//! - `RawMutex::is_locked` reads a plain host flag kept next to the loom mutex (set after the
//!   lock is taken, cleared before it is released): for assertions only, not explored by loom.
//! - `RawCondvar::notify_*` cannot say how many threads were woken: they return `false`/`0`.

#[cfg(not(loom))]
pub(crate) mod atomic {
    pub(crate) use std::sync::atomic::{AtomicU8, Ordering};
}

#[cfg(loom)]
pub(crate) mod atomic {
    pub(crate) use loom::sync::atomic::{AtomicU8, Ordering};
}

#[cfg(not(loom))]
pub(crate) use parking_lot::{
    Condvar as RawCondvar, Mutex as RawMutex, MutexGuard as RawMutexGuard,
};

#[cfg(loom)]
pub(crate) use self::loom_impl::{RawCondvar, RawMutex, RawMutexGuard};

/// One turn of a spin-wait loop.
#[cfg(not(loom))]
#[inline]
#[allow(dead_code)] // the host PtLock spins through parking_lot_core's `SpinWait`
pub(crate) fn spin_loop() {
    std::hint::spin_loop();
}

/// One turn of a spin-wait loop: under loom, give way, so that the model sees the spinner wait
/// for another thread instead of looping forever.
#[cfg(loom)]
#[inline]
pub(crate) fn spin_loop() {
    loom::thread::yield_now();
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
