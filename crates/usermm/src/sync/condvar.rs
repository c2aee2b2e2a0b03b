//! [`CondVar`] (`wait_event`/`wake_up` on a wait queue), [`Completion`]
//! (`struct completion`) and [`Barrier`] (a workload's `pthread_barrier`): waiting for a
//! condition under a [`Mutex`].
//!
//! On the host, a `parking_lot::Condvar` paired with the mutex's host lock. In a virtual run
//! the seam releases the host lock and calls `vhook::cv_wait`, which queues the caller in
//! virtual time and returns once it is woken and owns the mutex again (the seam then re-takes
//! the host lock); [`CondVar::notify_one`]/[`CondVar::notify_all`] call `vhook::cv_notify`.
//! Like every condition variable, a waiter must re-check its condition in a loop.
//!
//! Under `--cfg loom` the host condvar is [`primitive`](super::primitive)'s adapter on
//! `loom::sync::Condvar` and the mutex a loom one, so loom checks wait/notify for lost
//! wake-ups (a waiter asleep forever is reported as a deadlock) and the [`Barrier`] built on
//! them (`tests/loom_condvar.rs`). The notify functions then return `false`/`0`: loom does not
//! say whom it woke.

use std::fmt;

use super::class::LockClass;
use super::lock::{Mutex, MutexGuard};
use super::primitive::{RawCondvar, RawMutexGuard};
use super::vhook;

/// A condition variable used with one [`Mutex`] at a time.
#[derive(Default)]
pub struct CondVar {
    raw: RawCondvar,
}

impl CondVar {
    const_unless_loom! {
        pub fn new() -> Self {
            Self {
                raw: RawCondvar::new(),
            }
        }
    }

    #[inline]
    fn id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// Release the mutex, sleep until notified, take the mutex again. May wake spuriously.
    #[doc(alias = "wait_event")]
    pub fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
        let (inner, mutex_id, class) = guard.parts();
        if vhook::active() {
            let cv = self.id();
            RawMutexGuard::unlocked(inner, || vhook::cv_wait(cv, mutex_id, class));
            return;
        }
        self.raw.wait(inner);
    }

    /// Wake one waiter. Returns whether a host thread was woken.
    #[doc(alias = "wake_up")]
    pub fn notify_one(&self) -> bool {
        if vhook::active() {
            vhook::cv_notify(self.id(), false);
        }
        self.raw.notify_one()
    }

    /// Wake every waiter. Returns how many host threads were woken.
    #[doc(alias = "wake_up_all")]
    pub fn notify_all(&self) -> usize {
        if vhook::active() {
            vhook::cv_notify(self.id(), true);
        }
        self.raw.notify_all()
    }
}

impl fmt::Debug for CondVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CondVar").finish_non_exhaustive()
    }
}

/// `struct completion`: a one-shot event carrying a value, completed once and waited for by
/// anyone (`complete_all` semantics: every waiter sees it).
pub struct Completion<T: Copy = ()> {
    done: Mutex<Option<T>>,
    cond: CondVar,
}

impl<T: Copy> Completion<T> {
    const_unless_loom! {
        /// `init_completion`; `class` names the completion's lock (the subsystem's).
        pub fn new(class: &'static LockClass) -> Self {
            Self {
                done: Mutex::new(class, None),
                cond: CondVar::new(),
            }
        }
    }

    /// `complete_all`: record `value` and wake every waiter. Completing twice keeps the first
    /// value.
    #[doc(alias = "complete_all")]
    pub fn complete(&self, value: T) {
        let mut d = self.done.lock();
        if d.is_none() {
            *d = Some(value);
        }
        self.cond.notify_all();
    }

    /// `wait_for_completion`: block until completed, and return the value.
    #[doc(alias = "wait_for_completion")]
    pub fn wait(&self) -> T {
        let mut d = self.done.lock();
        loop {
            if let Some(v) = *d {
                return v;
            }
            self.cond.wait(&mut d);
        }
    }

    /// `try_wait_for_completion` without consuming: the value if completed.
    #[doc(alias = "completion_done")]
    pub fn get(&self) -> Option<T> {
        *self.done.lock()
    }
}

impl<T: Copy> fmt::Debug for Completion<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completion")
            .field("done", &self.get().is_some())
            .finish()
    }
}

/// A barrier for `n` threads (`pthread_barrier_wait`): each [`Barrier::wait`] blocks until `n`
/// callers have arrived, then all go on; reusable. Built on the seam's [`Mutex`] and
/// [`CondVar`], so that it works in a virtual run, where a host barrier would block the one
/// host thread every context runs on.
pub struct Barrier {
    state: Mutex<BarrierState>,
    cond: CondVar,
    n: usize,
}

#[derive(Debug, Default)]
struct BarrierState {
    arrived: usize,
    generation: u64,
}

impl Barrier {
    const_unless_loom! {
        /// A barrier for `n` threads (`n == 0` behaves as 1); `class` names its lock (a
        /// workload's: [`FUTEX`](super::class::FUTEX)).
        pub fn new(class: &'static LockClass, n: usize) -> Self {
            Self {
                state: Mutex::new(
                    class,
                    BarrierState {
                        arrived: 0,
                        generation: 0,
                    },
                ),
                cond: CondVar::new(),
                n,
            }
        }
    }

    /// Block until `n` threads have called `wait` (this one included). Returns `true` in
    /// exactly one of them, the last to arrive (`PTHREAD_BARRIER_SERIAL_THREAD`).
    #[doc(alias = "pthread_barrier_wait")]
    pub fn wait(&self) -> bool {
        let mut st = self.state.lock();
        let gen = st.generation;
        st.arrived += 1;
        if st.arrived >= self.n {
            st.arrived = 0;
            st.generation += 1;
            self.cond.notify_all();
            return true;
        }
        while st.generation == gen {
            self.cond.wait(&mut st);
        }
        false
    }
}

impl fmt::Debug for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Barrier")
            .field("n", &self.n)
            .finish_non_exhaustive()
    }
}
