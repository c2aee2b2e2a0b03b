//! The loom `RwSem` (`--cfg loom`): the lock word as a small state machine on
//! `loom::sync::{Mutex, Condvar}`, the value in a `loom::cell::UnsafeCell`, so that loom checks
//! every interleaving and that guards never overlap a writer. Same API as the host one; it
//! calls no virtual-time hooks.

#![expect(unsafe_code)] // fenced (lib.rs, "Unsafe"): loom's `UnsafeCell` pointers

use std::fmt;

use loom::{
    cell::{ConstPtr, MutPtr, UnsafeCell},
    sync::{Condvar, Mutex, MutexGuard},
};

use crate::sync::class::LockClass;
use crate::sync::vhook::{ClockKind, Current};

/// The lock word, as a small state machine protected by a loom mutex.
#[derive(Debug, Default)]
struct State {
    /// Readers holding the lock.
    readers: usize,
    /// A writer holds the lock. Never true while `readers > 0`.
    writer: bool,
    /// Threads blocked in `read` or `write`.
    waiters: usize,
}

/// Loom model of `struct rw_semaphore`.
pub struct RwSem<T> {
    class: &'static LockClass,
    state: Mutex<State>,
    /// Signalled when the lock may have become available.
    wake: Condvar,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through guards. The state machine hands out either one
// `MutPtr` (writer) or any number of `ConstPtr`s (readers), never both, so sharing the lock
// between threads gives them `&T` concurrently (needs `T: Sync`) or `&mut T` to one of them
// at a time (needs `T: Send`) — the bounds of `std::sync::RwLock`.
unsafe impl<T: Send + Sync> Sync for RwSem<T> {}

/// The host build's guard of `read_wall`; under loom a read guard.
pub(crate) type RwSemWallReadGuard<'a, T> = RwSemReadGuard<'a, T>;

/// Shared access to a loom [`RwSem`]'s value. `C`, the host guard's clock, is only carried
/// (no hooks under loom).
#[must_use = "if unused the RwSem is released at once"]
pub struct RwSemReadGuard<'a, T, C: ClockKind = Current> {
    lock: &'a RwSem<T>,
    /// Taken and dropped in `Drop::drop` before `readers` is decremented.
    ptr: Option<ConstPtr<T>>,
    _clock: C,
}

/// Exclusive access to a loom [`RwSem`]'s value.
#[must_use = "if unused the RwSem is released at once"]
pub struct RwSemWriteGuard<'a, T> {
    lock: &'a RwSem<T>,
    /// `None` once the exclusive hold has ended (downgrade or drop).
    ptr: Option<MutPtr<T>>,
}

impl<T> RwSem<T> {
    pub fn new(class: &'static LockClass, value: T) -> Self {
        Self {
            class,
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            value: UnsafeCell::new(value),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("no model thread panics while holding the state")
    }

    /// Wait on the condvar while `busy(state)`, counted as a waiter. Says whether it waited.
    fn wait_while<'s>(
        &'s self,
        mut st: MutexGuard<'s, State>,
        busy: impl Fn(&State) -> bool,
    ) -> (MutexGuard<'s, State>, bool) {
        let waited = busy(&st);
        if waited {
            st.waiters += 1;
            while busy(&st) {
                st = self
                    .wake
                    .wait(st)
                    .expect("no model thread panics while holding the state");
            }
            st.waiters -= 1;
        }
        (st, waited)
    }

    pub fn read(&self) -> RwSemReadGuard<'_, T> {
        self.read_contended().0
    }

    /// Waits are not timed under loom: a contended acquisition reports `Some(0)`.
    pub fn read_contended(&self) -> (RwSemReadGuard<'_, T>, Option<u64>) {
        self.read_contended_on(Current)
    }

    /// The host build's `read_contended_on`: the clock is only carried.
    pub(crate) fn read_contended_on<C: ClockKind>(
        &self,
        clock: C,
    ) -> (RwSemReadGuard<'_, T, C>, Option<u64>) {
        let (mut st, waited) = self.wait_while(self.state(), |s| s.writer);
        st.readers += 1;
        drop(st);
        let g = RwSemReadGuard {
            lock: self,
            ptr: Some(self.value.get()),
            _clock: clock,
        };
        (g, waited.then_some(0))
    }

    /// The host build's `read_wall`: under loom the same as [`Self::read`] (no hooks here).
    pub(crate) fn read_wall(&self, _clock: crate::sync::vhook::Wall) -> RwSemWallReadGuard<'_, T> {
        self.read()
    }

    pub fn try_read(&self) -> Option<RwSemReadGuard<'_, T>> {
        let mut st = self.state();
        if st.writer {
            return None;
        }
        st.readers += 1;
        drop(st);
        Some(RwSemReadGuard {
            lock: self,
            ptr: Some(self.value.get()),
            _clock: Current,
        })
    }

    pub fn write(&self) -> RwSemWriteGuard<'_, T> {
        self.write_contended().0
    }

    pub fn write_contended(&self) -> (RwSemWriteGuard<'_, T>, Option<u64>) {
        let (mut st, waited) = self.wait_while(self.state(), |s| s.writer || s.readers > 0);
        st.writer = true;
        drop(st);
        let g = RwSemWriteGuard {
            lock: self,
            ptr: Some(self.value.get_mut()),
        };
        (g, waited.then_some(0))
    }

    pub fn try_write(&self) -> Option<RwSemWriteGuard<'_, T>> {
        let mut st = self.state();
        if st.writer || st.readers > 0 {
            return None;
        }
        st.writer = true;
        drop(st);
        Some(RwSemWriteGuard {
            lock: self,
            ptr: Some(self.value.get_mut()),
        })
    }

    pub fn is_contended(&self) -> bool {
        self.state().waiters != 0
    }

    pub fn is_locked(&self) -> bool {
        let st = self.state();
        st.writer || st.readers > 0
    }

    pub fn is_write_locked(&self) -> bool {
        self.state().writer
    }

    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }

    pub fn class(&self) -> &'static LockClass {
        self.class
    }

    /// Wake every waiter if there is one; called with the state locked.
    fn wake_waiters(&self, st: &State) {
        if st.waiters != 0 {
            self.wake.notify_all();
        }
    }
}

impl<T> fmt::Debug for RwSem<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwSem")
            .field("class", &self.class.name)
            .finish_non_exhaustive()
    }
}

impl<'a, T> RwSemWriteGuard<'a, T> {
    pub fn downgrade(mut self) -> RwSemReadGuard<'a, T> {
        // The write access ends before any reader can be admitted.
        drop(
            self.ptr
                .take()
                .expect("write guard holds the lock until it ends"),
        );
        let mut st = self.lock.state();
        st.writer = false;
        st.readers += 1;
        self.lock.wake_waiters(&st);
        drop(st);
        RwSemReadGuard {
            lock: self.lock,
            ptr: Some(self.lock.value.get()),
            _clock: Current,
        }
    }

    fn release(&mut self) {
        if let Some(ptr) = self.ptr.take() {
            drop(ptr);
            let mut st = self.lock.state();
            st.writer = false;
            self.lock.wake_waiters(&st);
        }
    }
}

impl<T> RwSemWriteGuard<'_, T> {
    fn value(&self) -> &T {
        let ptr = self.held();
        // SAFETY: `ptr` exists only while this guard holds the lock for write (`writer` set,
        // no readers), so no other pointer to the value is live; the reference is bounded by
        // the borrow of the guard, which outlives neither `ptr` nor the lock.
        unsafe { ptr.deref() }
    }

    fn value_mut(&mut self) -> &mut T {
        let ptr = self.held();
        // SAFETY: as for `value`, and `&mut self` makes this the only reference the guard
        // hands out until it is released.
        unsafe { ptr.deref() }
    }

    fn held(&self) -> &MutPtr<T> {
        self.ptr
            .as_ref()
            .expect("write guard used after its hold ended")
    }
}

guard_deref!(mut RwSemWriteGuard => value, value_mut);

impl<T> Drop for RwSemWriteGuard<'_, T> {
    fn drop(&mut self) {
        self.release();
    }
}

impl<T, C: ClockKind> RwSemReadGuard<'_, T, C> {
    fn value(&self) -> &T {
        let ptr = self
            .ptr
            .as_ref()
            .expect("read guard holds its pointer until dropped");
        // SAFETY: `ptr` exists only while this guard is counted in `readers`, so no writer
        // (no `MutPtr`) can exist; the reference is bounded by the borrow of the guard.
        unsafe { ptr.deref() }
    }
}

impl<T, C: ClockKind> std::ops::Deref for RwSemReadGuard<'_, T, C> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        self.value()
    }
}

impl<T, C: ClockKind> Drop for RwSemReadGuard<'_, T, C> {
    fn drop(&mut self) {
        // The read access ends before a writer can be admitted.
        drop(self.ptr.take());
        let mut st = self.lock.state();
        st.readers -= 1;
        if st.readers == 0 {
            self.lock.wake_waiters(&st);
        }
    }
}

guard_debug!(struct RwSemWriteGuard);

impl<T: fmt::Debug, C: ClockKind> fmt::Debug for RwSemReadGuard<'_, T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwSemReadGuard")
            .field("value", &**self)
            .finish()
    }
}
