//! The hooks of the sync seam (`sync/vhook.rs` forwards to these one for one), with the
//! signatures of the seam (`docs/two-clocks.md`, "The seam").
//!
//! Every seam primitive calls them around its host operation: `lock_acquire` before taking the
//! host lock, `lock_release` after releasing it, and so on. Outside a virtual run each returns
//! at once after one thread-local load and a branch: the value it returns then tells the seam
//! to behave as in wall mode (`lock_acquire` → uncontended, `lock_try_acquire` → `Some`,
//! `now_ns` → `None`, `sleep_ns` → `false`).
//!
//! The lock and line hooks come in two forms: by address (`lock_acquire(id, ..)`), and with
//! the [`Slot`] the host object carries (`lock_acquire_slot(id, slot, ..)`): the index of the
//! object's state in the run's table (`sched/table.rs`), checked against `id` before use, so
//! that the common case is an index and a compare instead of a hash lookup. Both reach the
//! same state by the same address; the slot changes no figure.
//!
//! Each hook is `#[inline]` and only tests the thread-local flag; the work of a run is in an
//! out-of-line function (`virt::*`), so that wall mode pays a load and a branch, not a call.
//!
//! [`charge`] is not a test: it adds `n` to a thread-local count per [`Cost`] and marks the
//! cost in a mask (a few instructions, no branch, no call; the seam calls it only in a run,
//! behind its flag test), and the runtime prices and applies the marked counts to the running
//! context's clock at its next synchronisation point or clock read. That is exact: between
//! two synchronisation points nothing else runs, so neither the context's CPU nor its SMT
//! sibling's state can change.
//!
//! [`mem_touch_page`] and [`mem_touch_list`] are kept likewise: in a run each stores its touch
//! in a thread-local buffer (a few instructions inline, a call only when the buffer is full),
//! and the runtime applies the context's touches, in order, at its next synchronisation point
//! or clock read, before its charges (`vtime/memory.rs`, "How a touch reaches the model").
//!
//! Inside a run every hook except `charge`, the two touches, `now_ns`, `thread_cpu_ns`,
//! `lock_forget` and `line_forget` is a synchronisation point: the caller first waits for its turn (its clock the smallest of the
//! run's ready contexts), then acts. Because only one context runs at a time and every
//! contender passes the virtual lock before touching the host lock, the host lock under a run
//! is always free when taken, and a guard may be held across a context switch.

#![deny(unsafe_code)]

use super::{
    class::{Acquired, LineClass, LockClass, Mode, Slot},
    memory::{ListOp, Touch, Touched},
    pending::push_touch,
    profile::Cost,
    runtime::{in_run, with_current},
};

/// A virtual run is active on this host thread (`Machine::run` in virtual mode).
#[inline]
pub fn active() -> bool {
    in_run()
}

/// Before taking the host lock. Blocks (in virtual time) until the lock is the caller's:
/// FIFO hand-over, spin or sleep by class. `id` = the lock's address.
#[inline]
pub fn lock_acquire(id: usize, class: &'static LockClass, mode: Mode) -> Acquired {
    if !in_run() {
        return Acquired::default();
    }
    virt::lock_acquire(id, None, class, mode)
}

/// [`lock_acquire`] of a lock that carries a [`Slot`]: the run finds its state through it
/// (`sched/table.rs`).
#[inline]
pub fn lock_acquire_slot(
    id: usize,
    slot: &Slot,
    class: &'static LockClass,
    mode: Mode,
) -> Acquired {
    if !in_run() {
        return Acquired::default();
    }
    virt::lock_acquire(id, Some(slot), class, mode)
}

/// try-lock: `None` when the lock is held (or has waiters) in virtual time at the caller's
/// clock.
#[inline]
pub fn lock_try_acquire(id: usize, class: &'static LockClass, mode: Mode) -> Option<Acquired> {
    if !in_run() {
        return Some(Acquired::default());
    }
    virt::lock_try_acquire(id, None, class, mode)
}

/// [`lock_try_acquire`] of a lock that carries a [`Slot`].
#[inline]
pub fn lock_try_acquire_slot(
    id: usize,
    slot: &Slot,
    class: &'static LockClass,
    mode: Mode,
) -> Option<Acquired> {
    if !in_run() {
        return Some(Acquired::default());
    }
    virt::lock_try_acquire(id, Some(slot), class, mode)
}

/// After releasing the host lock.
#[inline]
pub fn lock_release(id: usize, _class: &'static LockClass, mode: Mode) {
    if in_run() {
        virt::lock_release(id, None, mode);
    }
}

/// [`lock_release`] of a lock that carries a [`Slot`].
#[inline]
pub fn lock_release_slot(id: usize, slot: &Slot, _class: &'static LockClass, mode: Mode) {
    if in_run() {
        virt::lock_release(id, Some(slot), mode);
    }
}

/// `downgrade_write`: exclusive -> shared, waking queued readers.
#[inline]
pub fn lock_downgrade(id: usize, _class: &'static LockClass) {
    if in_run() {
        virt::lock_downgrade(id, None);
    }
}

/// [`lock_downgrade`] of a lock that carries a [`Slot`].
#[inline]
pub fn lock_downgrade_slot(id: usize, slot: &Slot, _class: &'static LockClass) {
    if in_run() {
        virt::lock_downgrade(id, Some(slot));
    }
}

/// The lock is being dropped: forget its virtual state.
#[inline]
pub fn lock_forget(id: usize) {
    if in_run() {
        virt::forget(id, false);
    }
}

/// Before an RMW on a modelled shared line of `class`; its time is accounted to `site` (the
/// class itself, or one that names the calling kernel function).
#[inline]
pub fn line_rmw(id: usize, class: &'static LineClass, site: &'static LineClass) {
    if in_run() {
        virt::line_rmw(id, None, class, site);
    }
}

/// [`line_rmw`] of a line that carries a [`Slot`].
#[inline]
pub fn line_rmw_slot(id: usize, slot: &Slot, class: &'static LineClass, site: &'static LineClass) {
    if in_run() {
        virt::line_rmw(id, Some(slot), class, site);
    }
}

/// The shared line is being dropped: forget its virtual state. (Beyond the spec's list: for
/// `SharedLine`'s `Drop`, so that a reused address starts cold.)
#[inline]
pub fn line_forget(id: usize) {
    if in_run() {
        virt::forget(id, true);
    }
}

/// Condition variable: called with the mutex `mutex_id` held (host lock already released by
/// the seam). Enqueue on `cv_id`, release `mutex_id` in virtual time, block until woken, then
/// re-acquire `mutex_id` in virtual time (the seam then re-takes the host lock).
#[inline]
pub fn cv_wait(cv_id: usize, mutex_id: usize, mutex_class: &'static LockClass) {
    if in_run() {
        virt::cv_wait(cv_id, mutex_id, mutex_class);
    }
}

/// Wakes one waiter of `cv_id` (or all), each at the caller's clock plus the wake-up latency.
#[inline]
pub fn cv_notify(cv_id: usize, all: bool) {
    if in_run() {
        virt::cv_notify(cv_id, all);
    }
}

/// Charge `n` units of a named cost to the current CPU: counted here, priced and applied at
/// the context's next synchronisation point or clock read (see the module documentation);
/// never read in wall mode.
#[inline(always)]
pub fn charge(cost: Cost, n: u64) {
    super::pending::add_pending(cost.index(), n);
}

/// The running CPU touches frame `pfn`'s `struct page` (`vtime/memory.rs`): not a
/// synchronisation point; its price, by where the line is, is added to the clock before
/// anything reads it (kept until the context's next synchronisation point or clock read and
/// applied there, in order: `pending.rs`, `TOUCHES`).
#[inline]
pub fn mem_touch_page(pfn: u64, how: Touch) {
    if in_run() {
        push_touch(Touched::Page { pfn, how }, flush_touches);
    }
}

/// The lines of one list operation `op`: the `struct page`s of `pfns` (`u32::MAX` entries
/// skipped) and, when `head` is not 0, the list head at that address, homed on the node of
/// the first page; each priced as a [`Touch::Access`], the line `op` reads first as a load and
/// the lines it writes as stores (`vtime/store_buffer.rs`). Kept and applied as
/// [`mem_touch_page`]'s are.
#[inline]
pub fn mem_touch_list(op: ListOp, head: usize, pfns: [u32; 3]) {
    if in_run() {
        push_touch(Touched::List { head, pfns, op }, flush_touches);
    }
}

/// One line of a kernel structure the engine lays out as v4.10 did (a free area's
/// `nr_free` or list head, a memcg's LRU sizes), by the key `addr` (not 0) the structure
/// makes, homed on frame `home`'s node: a load, or (`store`) a store whose value nothing
/// after it waits for (`vtime/store_buffer.rs`). Kept and applied as [`mem_touch_page`]'s
/// are.
#[inline]
pub fn mem_touch_line(addr: usize, home: u32, store: bool) {
    if in_run() {
        push_touch(Touched::Line { addr, home, store }, flush_touches);
    }
}

/// The touch buffer is full: apply the kept touches now (`pending.rs`; outside a context,
/// where a touch is a no-op, they are dropped).
#[cold]
#[inline(never)]
fn flush_touches() {
    with_current(|rt| rt.with_running_raw(|st, me| st.apply_touches(me)));
}

/// The running CPU interrupts CPU `cpu` (a shootdown's IPI; a synchronisation point): the
/// context occupying `cpu` pays one `cost` (`flush_tlb_func`) at its clock.
#[inline]
pub fn ipi(cpu: usize, cost: Cost) {
    if in_run() {
        virt::ipi(cpu, cost);
    }
}

/// Virtual now in ns, `None` in wall mode.
#[inline]
pub fn now_ns() -> Option<u64> {
    if !in_run() {
        return None;
    }
    virt::now_ns()
}

/// Virtual busy time of the current context in ns (work plus spinning: what
/// `CLOCK_THREAD_CPUTIME_ID` would show), `None` in wall mode.
#[inline]
pub fn thread_cpu_ns() -> Option<u64> {
    if !in_run() {
        return None;
    }
    virt::thread_cpu_ns()
}

/// Sleep in virtual time; returns false in wall mode (the seam then sleeps on the host).
#[inline]
pub fn sleep_ns(ns: u64) -> bool {
    in_run() && virt::sleep_ns(ns)
}

/// Runs `f`, which must not pass a synchronisation point: inside a run, no other context runs
/// until `f` returns. Debug builds check it (a synchronisation point inside panics); release
/// builds only call `f`.
#[inline]
pub fn atomic<R>(f: impl FnOnce() -> R) -> R {
    let _section = AtomicSection::enter();
    f()
}

/// The guard of an [`atomic`] section (zero-sized and free in release builds).
pub use super::runtime::AtomicSection;

/// The hooks' work inside a run, out of line.
mod virt {
    use super::super::{
        class::{Acquired, LineClass, LockClass, Mode, Slot},
        runtime::{current, with_current},
        sched::resources::AcquireStep,
    };

    #[inline(never)]
    pub(super) fn lock_acquire(
        id: usize,
        slot: Option<&Slot>,
        class: &'static LockClass,
        mode: Mode,
    ) -> Acquired {
        let Some(rt) = current() else {
            return Acquired::default();
        };
        match rt.sync(|st, me| st.lock_acquire(me, id, slot, class, mode)) {
            None => Acquired::default(),
            Some(AcquireStep::Done(a)) => a,
            Some(AcquireStep::Wait { since }) => {
                // Resumed only once the lock was handed to us, and only as the smallest clock.
                rt.block();
                rt.with_running(|st, me| st.lock_take(me, id, slot, mode, Some(since)))
                    .unwrap_or_default()
            }
        }
    }

    #[inline(never)]
    pub(super) fn lock_try_acquire(
        id: usize,
        slot: Option<&Slot>,
        class: &'static LockClass,
        mode: Mode,
    ) -> Option<Acquired> {
        let Some(rt) = current() else {
            return Some(Acquired::default());
        };
        rt.sync(|st, me| st.lock_try(me, id, slot, class, mode))
            .unwrap_or(Some(Acquired::default()))
    }

    #[inline(never)]
    pub(super) fn lock_release(id: usize, slot: Option<&Slot>, mode: Mode) {
        if let Some(rt) = current() {
            rt.sync(|st, me| st.lock_release(me, id, slot, mode));
        }
    }

    #[inline(never)]
    pub(super) fn lock_downgrade(id: usize, slot: Option<&Slot>) {
        if let Some(rt) = current() {
            rt.sync(|st, me| st.lock_downgrade(me, id, slot));
        }
    }

    /// Forgetting is not an event in time: no synchronisation point.
    #[inline(never)]
    pub(super) fn forget(id: usize, line: bool) {
        if let Some(rt) = current() {
            let mut st = rt.state.borrow_mut();
            if !st.failed {
                if line {
                    st.line_forget(id);
                } else {
                    st.lock_forget(id);
                }
            }
        }
    }

    #[inline(never)]
    pub(super) fn line_rmw(
        id: usize,
        slot: Option<&Slot>,
        class: &'static LineClass,
        site: &'static LineClass,
    ) {
        if let Some(rt) = current() {
            rt.sync(|st, me| st.line_rmw(me, id, slot, class, site));
        }
    }

    #[inline(never)]
    pub(super) fn cv_wait(cv_id: usize, mutex_id: usize, mutex_class: &'static LockClass) {
        let Some(rt) = current() else {
            return;
        };
        if rt
            .sync(|st, me| st.cv_wait_begin(me, cv_id, mutex_id))
            .is_none()
        {
            return;
        }
        rt.block();
        drop(rt);
        lock_acquire(mutex_id, None, mutex_class, Mode::Exclusive);
    }

    #[inline(never)]
    pub(super) fn cv_notify(cv_id: usize, all: bool) {
        if let Some(rt) = current() {
            rt.sync(|st, me| st.cv_notify(me, cv_id, all));
        }
    }

    #[inline(never)]
    pub(super) fn ipi(cpu: usize, cost: super::Cost) {
        if let Some(rt) = current() {
            rt.sync(|st, me| {
                let ps = st.model.profile.cost_ps[cost.index()];
                st.ipi(me, cpu, ps);
            });
        }
    }

    #[inline(never)]
    pub(super) fn now_ns() -> Option<u64> {
        with_current(|rt| rt.with_running(|st, me| st.ctxs[me as usize].now / 1000))
    }

    #[inline(never)]
    pub(super) fn thread_cpu_ns() -> Option<u64> {
        with_current(|rt| {
            rt.with_running(|st, me| {
                let c = &st.ctxs[me as usize];
                (c.busy + c.spin) / 1000
            })
        })
    }

    #[inline(never)]
    pub(super) fn sleep_ns(ns: u64) -> bool {
        let Some(rt) = current() else {
            return false;
        };
        if rt
            .sync(|st, me| st.sleep_begin(me, ns.saturating_mul(1000)))
            .is_none()
        {
            return false;
        }
        rt.block();
        true
    }
}
