//! The hooks through which the sync seam calls into virtual time.
//!
//! Virtual time: every emulated CPU has a clock; code between two synchronisation points
//! charges named costs to it, and at each synchronisation point (these hooks) a context may go
//! on only while its CPU's clock is the smallest, so who waits for whom follows the modelled
//! machine, not the host.
//!
//! Every primitive of [`crate::sync`] calls these around its host operation, in this order:
//! `lock_acquire` before taking the host lock,
//! `lock_release` after releasing it, `line_rmw` before an RMW on a shared line, `cv_wait` with
//! the host mutex released, and so on. Outside a virtual run every hook is a no-op; the
//! primitives first test `active` (one thread-local load and a branch) and take the host path
//! when it is false, so wall mode pays only that test.
//!
//! Today no virtual run exists: `active` is always false and every body below is the wall
//! behaviour. The virtual-time runtime (`crate::vtime`) makes them forward to it; the
//! signatures are the contract between the seam and that runtime.
//!
//! | hook | called by |
//! |---|---|
//! | `lock_acquire` / `lock_release` | `SpinLock`, `Mutex`, `RwSem` (read: `Shared`), `PtLock`, `MutexGuard::unlocked` |
//! | `lock_try_acquire` | the `try_*` of the same |
//! | `lock_downgrade` | `RwSemWriteGuard::downgrade` |
//! | `lock_forget` | dropping a `SpinLock`/`Mutex`/`RwSem`; `PtLock::ptlock_free` |
//! | `line_rmw` | every RMW of a `SharedLine` |
//! | `cv_wait` / `cv_notify` | `CondVar::wait`, `CondVar::notify_*` (and so `Completion`) |
//! | `charge` | `sync::charge` (the TLB flush cost of `Mm::flush_tlb`) |
//! | `now_ns` / `thread_cpu_ns` | `clock::now`, `clock::thread_cpu_ns` |
//! | `sleep_ns` | `thread::sleep` |

#![cfg_attr(loom, allow(dead_code))] // the loom RwSem calls no hooks

use std::cell::Cell;

use super::class::{LineClass, LockClass};

/// How a lock is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Exclusive,
    Shared,
}

/// What an acquisition cost in virtual time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Acquired {
    /// The lock was held (in virtual time) when the caller arrived.
    pub contended: bool,
    /// Virtual ns the caller waited.
    pub waited_ns: u64,
}

/// A named cost charged to the current CPU in virtual time. Placeholder: the virtual-time
/// runtime owns the real list (and the cost profile that prices each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cost {
    ZapPte,
    GatherPage,
    FreeUnrefPage,
    FreeOneMerge,
    LruDel,
    ClearPage,
    FaultEntry,
    FaultExit,
    PtWalkLevel,
    PtAlloc,
    TlbFlushLocal,
    TlbFlushRemotePerCpu,
    WorkqueueWake,
    /// `tlb.flush_cost_ns`: the configured busy time of one TLB flush, in ns.
    TlbFlushConfiguredNs,
}

thread_local! {
    /// Set by the virtual-time runtime on the host thread that runs a virtual machine.
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
}

/// A virtual run is active on this host thread (`Machine::run` in virtual mode).
#[inline]
pub(crate) fn active() -> bool {
    ACTIVE.with(Cell::get)
}

/// Before taking the host lock. Blocks (in virtual time) until the lock is the caller's:
/// FIFO hand-over, spin or sleep by class. `id` = the lock's address.
pub(crate) fn lock_acquire(id: usize, class: &'static LockClass, mode: Mode) -> Acquired {
    let _ = (id, class, mode);
    Acquired::default()
}

/// try-lock: `None` when the lock is held in virtual time at the caller's clock.
pub(crate) fn lock_try_acquire(
    id: usize,
    class: &'static LockClass,
    mode: Mode,
) -> Option<Acquired> {
    let _ = (id, class, mode);
    Some(Acquired::default())
}

/// After releasing the host lock.
pub(crate) fn lock_release(id: usize, class: &'static LockClass, mode: Mode) {
    let _ = (id, class, mode);
}

/// `downgrade_write`: exclusive -> shared, waking queued readers.
pub(crate) fn lock_downgrade(id: usize, class: &'static LockClass) {
    let _ = (id, class);
}

/// The lock is being dropped: forget its virtual state.
pub(crate) fn lock_forget(id: usize) {
    let _ = id;
}

/// Before an RMW on a modelled shared line.
pub(crate) fn line_rmw(id: usize, class: &'static LineClass) {
    let _ = (id, class);
}

/// Condition variable: called with the mutex `mutex_id` held (host lock already released by
/// the seam). Enqueue on `cv_id`, release `mutex_id` in virtual time, block until woken, then
/// re-acquire `mutex_id` in virtual time (the seam then re-takes the host lock).
pub(crate) fn cv_wait(cv_id: usize, mutex_id: usize, mutex_class: &'static LockClass) {
    let _ = (cv_id, mutex_id, mutex_class);
}

/// Wake one (or all) waiters of `cv_id` in virtual time.
pub(crate) fn cv_notify(cv_id: usize, all: bool) {
    let _ = (cv_id, all);
}

/// Charge `n` units of a named cost to the current CPU (no-op in wall mode).
pub(crate) fn charge(cost: Cost, n: u64) {
    let _ = (cost, n);
}

/// Virtual now in ns, `None` in wall mode.
pub(crate) fn now_ns() -> Option<u64> {
    None
}

/// Virtual busy time of the current context in ns, `None` in wall mode.
pub(crate) fn thread_cpu_ns() -> Option<u64> {
    None
}

/// Sleep in virtual time; returns false in wall mode (the seam then sleeps on the host).
pub(crate) fn sleep_ns(ns: u64) -> bool {
    let _ = ns;
    false
}
