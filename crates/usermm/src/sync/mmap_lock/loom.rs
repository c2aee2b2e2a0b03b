//! The loom implementation of [`MmapLock`](super::MmapLock) (`--cfg loom`): a small state
//! machine on `loom::sync::{Mutex, Condvar}` with the value in a `loom::cell::UnsafeCell`, so
//! that loom checks that guards never overlap a writer. Same API; statistics read as zero.

use std::{
    fmt,
    ops::{Deref, DerefMut},
};

use loom::{
    cell::{ConstPtr, MutPtr, UnsafeCell},
    sync::{Condvar, Mutex, MutexGuard},
};

use super::MmapLockStats;

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

/// Loom model of the mm's `mmap_lock`; same API as the instrumented one, statistics read as
/// zero.
pub struct MmapLock<T> {
    state: Mutex<State>,
    /// Signalled when the lock may have become available.
    wake: Condvar,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through guards. The state machine hands out either one
// `MutPtr` (writer) or any number of `ConstPtr`s (readers), never both, so sharing the lock
// between threads gives them `&T` concurrently (needs `T: Sync`) or `&mut T` to one of them
// at a time (needs `T: Send`) — the bounds of `std::sync::RwLock`.
unsafe impl<T: Send + Sync> Sync for MmapLock<T> {}

/// Shared access to a loom [`MmapLock`]'s value.
#[must_use = "if unused the MmapLock is released at once"]
pub struct MmapReadGuard<'a, T> {
    lock: &'a MmapLock<T>,
    /// Taken and dropped in `Drop::drop` before `readers` is decremented.
    ptr: Option<ConstPtr<T>>,
    downgraded: bool,
}

/// Exclusive access to a loom [`MmapLock`]'s value.
#[must_use = "if unused the MmapLock is released at once"]
pub struct MmapWriteGuard<'a, T> {
    lock: &'a MmapLock<T>,
    /// `None` once the exclusive hold has ended (downgrade or unlock).
    ptr: Option<MutPtr<T>>,
}

impl<T> MmapLock<T> {
    pub fn new(value: T) -> Self {
        Self {
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

    /// Wait on the condvar while `busy(state)`, counted as a waiter.
    fn wait_while<'s>(
        &'s self,
        mut st: MutexGuard<'s, State>,
        busy: impl Fn(&State) -> bool,
    ) -> MutexGuard<'s, State> {
        if busy(&st) {
            st.waiters += 1;
            while busy(&st) {
                st = self
                    .wake
                    .wait(st)
                    .expect("no model thread panics while holding the state");
            }
            st.waiters -= 1;
        }
        st
    }

    pub fn read(&self) -> MmapReadGuard<'_, T> {
        let mut st = self.wait_while(self.state(), |s| s.writer);
        st.readers += 1;
        drop(st);
        MmapReadGuard {
            lock: self,
            ptr: Some(self.value.get()),
            downgraded: false,
        }
    }

    pub fn try_read(&self) -> Option<MmapReadGuard<'_, T>> {
        let mut st = self.state();
        if st.writer {
            return None;
        }
        st.readers += 1;
        drop(st);
        Some(MmapReadGuard {
            lock: self,
            ptr: Some(self.value.get()),
            downgraded: false,
        })
    }

    pub fn write(&self) -> MmapWriteGuard<'_, T> {
        let mut st = self.wait_while(self.state(), |s| s.writer || s.readers > 0);
        st.writer = true;
        drop(st);
        MmapWriteGuard {
            lock: self,
            ptr: Some(self.value.get_mut()),
        }
    }

    pub fn try_write(&self) -> Option<MmapWriteGuard<'_, T>> {
        let mut st = self.state();
        if st.writer || st.readers > 0 {
            return None;
        }
        st.writer = true;
        drop(st);
        Some(MmapWriteGuard {
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

    pub fn stats(&self) -> MmapLockStats {
        MmapLockStats::default()
    }

    pub fn reset_stats(&self) {}

    pub fn last_exclusive_hold_ns(&self) -> u64 {
        0
    }

    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }

    /// Wake every waiter if there is one; called with the state locked.
    fn wake_waiters(&self, st: &State) {
        if st.waiters != 0 {
            self.wake.notify_all();
        }
    }
}

impl<T: Default> Default for MmapLock<T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

impl<T> fmt::Debug for MmapLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MmapLock").finish_non_exhaustive()
    }
}

impl<'a, T> MmapWriteGuard<'a, T> {
    pub fn downgrade(mut self) -> MmapReadGuard<'a, T> {
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
        MmapReadGuard {
            lock: self.lock,
            ptr: Some(self.lock.value.get()),
            downgraded: true,
        }
    }

    pub fn unlock(mut self) -> u64 {
        self.release();
        0
    }

    pub fn held_ns(&self) -> u64 {
        0
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

impl<T> Deref for MmapWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        let ptr = self
            .ptr
            .as_ref()
            .expect("write guard used after its hold ended");
        // SAFETY: `ptr` exists only while this guard holds the lock for write (`writer` set,
        // no readers), so no other pointer to the value is live; the reference is bounded by
        // the borrow of the guard, which outlives neither `ptr` nor the lock.
        unsafe { ptr.deref() }
    }
}

impl<T> DerefMut for MmapWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        let ptr = self
            .ptr
            .as_ref()
            .expect("write guard used after its hold ended");
        // SAFETY: as for `deref`, and `&mut self` makes this the only reference the guard
        // hands out until it is released.
        unsafe { ptr.deref() }
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
    pub fn is_downgraded(&self) -> bool {
        self.downgraded
    }

    pub fn exclusive_hold_ns(&self) -> Option<u64> {
        self.downgraded.then_some(0)
    }

    pub fn held_ns(&self) -> u64 {
        0
    }
}

impl<T> Deref for MmapReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        let ptr = self
            .ptr
            .as_ref()
            .expect("read guard holds its pointer until dropped");
        // SAFETY: `ptr` exists only while this guard is counted in `readers`, so no writer
        // (no `MutPtr`) can exist; the reference is bounded by the borrow of the guard.
        unsafe { ptr.deref() }
    }
}

impl<T> Drop for MmapReadGuard<'_, T> {
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

impl<T: fmt::Debug> fmt::Debug for MmapReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MmapReadGuard")
            .field("value", &**self)
            .field("downgraded", &self.downgraded)
            .finish()
    }
}
