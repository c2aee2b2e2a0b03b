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
//! Where the hooks cluster (an allocator call's list operations, buddy checks, charges and
//! pcp lock; `release_pages`; an LRU-add batch; a fault, from its mmap lock down to its PTE
//! lock, allocation, rmap and LRU-add; a TLB gate's access), the operation reads the flag
//! once at its entry ([`on_clock!`]) and passes a
//! zero-sized [`Clock`] down: on [`Wall`] its inner hooks compile to nothing, as in a
//! `no_vtime_seam` build, so they take no thread-local test each.
//!
//! A lock with a [`LockMap`] and a [`SharedLine`](super::SharedLine) carry a [`Slot`]: the
//! index of their state in the running machine's table, which the `*_map`/`*_slot` hooks hand
//! to the runtime so that it finds the state without hashing the address
//! (`vtime/sched/table.rs`; the runtime checks the hint, so it is never wrong, only slow).
//!
//! Each hook forwards, one for one, to [`crate::vtime::hooks`], the runtime's side of the
//! contract; the types they exchange ([`Mode`], [`Acquired`], [`Cost`], and the classes) are
//! the runtime's, re-exported here, so that a class static is one object for both. Outside a
//! run every hook returns after the runtime's one thread-local test (`vtime::hooks::active`).
//!
//! | hook | called by |
//! |---|---|
//! | `lock_acquire_map` / `lock_release_map` | `SpinLock`, `Mutex`, `RwSem` (read: `Shared`), `MutexGuard::unlocked` (through their `LockMap`) |
//! | `lock_acquire` / `lock_release` | `PtLock` (no `LockMap`: its id and class are passed) |
//! | `lock_try_acquire_map` / `lock_try_acquire` | the `try_*` of the same |
//! | `lock_downgrade_map` | `RwSemWriteGuard::downgrade` |
//! | `lock_forget` | dropping a `SpinLock`/`Mutex`/`RwSem` (its `LockMap`); `PtLock::ptlock_free` |
//! | `line_rmw_slot` | every RMW of a `SharedLine` |
//! | `line_forget` | dropping a `SharedLine` |
//! | `cv_wait` / `cv_notify` | `CondVar::wait`, `CondVar::notify_*` (and so `Completion`) |
//! | `ipi` | `tlb_flush_ipi`: a shootdown's interrupt, charged to another CPU's occupant |
//! | `mem_touch_list` / `mem_touch_page` / `mem_touch_line` | `PfnList`'s operations; `release_pages`, `__free_one_page`'s buddy check, rmap; the free areas' and the LRU sizes' lines (the line model, `vtime/memory.rs`); [`Clock`]'s methods, on an operation's decided clock |
//! | `charge` | `sync::charge`: the named costs of the engine's code (zap, gather, free, faults, TLB flushes, ...) |
//! | `now_ns` / `thread_cpu_ns` | `clock::now`, `clock::thread_cpu_ns` |
//! | `sleep_ns` | `thread::sleep` |
//!
//! Thread start and join are not hooks: [`thread`](super::thread) calls the runtime's
//! `spawn`/`scope` itself in a run.

//!
//! Under `--cfg loom`, and in a build with the `no_vtime_seam` feature, `active` is the
//! constant `false` and every hook its wall-mode constant, so every primitive takes its host
//! path (loom's, there) and the hooks compile to nothing: loom explores the locks, not virtual
//! time, and the feature's build is the "engine without the seam" that wall-mode paths are
//! measured against.

#![cfg_attr(loom, allow(dead_code))] // the loom RwSem calls no hooks

use super::class::{LineClass, LockClass};
use crate::addr::Pfn;
use crate::vtime::hooks as vt;

pub use crate::vtime::Cost;
pub(crate) use crate::vtime::{Acquired, Mode, Slot};
pub(crate) use crate::vtime::{ListOp, Touch};

/// The seam is compiled in: not under loom, nor with the `no_vtime_seam` feature (the build
/// that wall-mode paths are measured against). Without it every hook below is its wall-mode
/// constant and `charge` does nothing, so the optimiser removes the hooks and their tests.
const SEAM: bool = !cfg!(any(loom, feature = "no_vtime_seam"));

/// A virtual run is active on this host thread (`Machine::run` in virtual mode): the runtime's
/// one thread-local flag, read with one load (the constant `false` without the seam).
#[inline(always)]
pub(crate) fn active() -> bool {
    SEAM && vt::active()
}

/// Before taking the host lock. Blocks (in virtual time) until the lock is the caller's:
/// FIFO hand-over, spin or sleep by class. `id` = the lock's address.
#[inline]
pub(crate) fn lock_acquire(id: usize, class: &'static LockClass, mode: Mode) -> Acquired {
    if !SEAM {
        return Acquired::default();
    }
    vt::lock_acquire(id, class, mode)
}

/// try-lock: `None` when the lock is held in virtual time at the caller's clock.
#[inline]
pub(crate) fn lock_try_acquire(
    id: usize,
    class: &'static LockClass,
    mode: Mode,
) -> Option<Acquired> {
    if !SEAM {
        return Some(Acquired::default());
    }
    vt::lock_try_acquire(id, class, mode)
}

/// After releasing the host lock.
#[inline]
pub(crate) fn lock_release(id: usize, class: &'static LockClass, mode: Mode) {
    if SEAM {
        vt::lock_release(id, class, mode);
    }
}

/// [`lock_acquire`] of a lock with a [`LockMap`]: its id, class and slot from the map.
#[inline]
pub(crate) fn lock_acquire_map(map: &LockMap, mode: Mode) -> Acquired {
    if !SEAM {
        return Acquired::default();
    }
    vt::lock_acquire_slot(map.id(), &map.slot, map.class, mode)
}

/// [`lock_try_acquire`] of a lock with a [`LockMap`].
#[inline]
pub(crate) fn lock_try_acquire_map(map: &LockMap, mode: Mode) -> Option<Acquired> {
    if !SEAM {
        return Some(Acquired::default());
    }
    vt::lock_try_acquire_slot(map.id(), &map.slot, map.class, mode)
}

/// [`lock_release`] of a lock with a [`LockMap`].
#[inline]
pub(crate) fn lock_release_map(map: &LockMap, mode: Mode) {
    if SEAM {
        vt::lock_release_slot(map.id(), &map.slot, map.class, mode);
    }
}

/// `downgrade_write` of a lock with a [`LockMap`]: exclusive -> shared, waking queued readers.
#[inline]
pub(crate) fn lock_downgrade_map(map: &LockMap) {
    if SEAM {
        vt::lock_downgrade_slot(map.id(), &map.slot, map.class);
    }
}

/// The lock is being dropped: forget its virtual state.
#[inline]
pub(crate) fn lock_forget(id: usize) {
    if SEAM {
        vt::lock_forget(id);
    }
}

/// Before an RMW on a modelled shared line of `class`, its time accounted to `site`; `slot`:
/// the index of the line's state in the run's table, carried by the line.
#[inline]
pub(crate) fn line_rmw_slot(
    id: usize,
    slot: &Slot,
    class: &'static LineClass,
    site: &'static LineClass,
) {
    if SEAM {
        vt::line_rmw_slot(id, slot, class, site);
    }
}

/// The shared line is being dropped: forget its virtual state (a reused address starts cold).
#[inline]
pub(crate) fn line_forget(id: usize) {
    if SEAM {
        vt::line_forget(id);
    }
}

/// Condition variable: called with the mutex `mutex_id` held (host lock already released by
/// the seam). Enqueue on `cv_id`, release `mutex_id` in virtual time, block until woken, then
/// re-acquire `mutex_id` in virtual time (the seam then re-takes the host lock).
#[inline]
pub(crate) fn cv_wait(cv_id: usize, mutex_id: usize, mutex_class: &'static LockClass) {
    if SEAM {
        vt::cv_wait(cv_id, mutex_id, mutex_class);
    }
}

/// The running CPU interrupts CPU `cpu` (a TLB shootdown's IPI): its occupant pays one
/// `cost` in virtual time. A synchronisation point.
#[inline]
pub(crate) fn ipi(cpu: usize, cost: Cost) {
    if SEAM {
        vt::ipi(cpu, cost);
    }
}

/// Wake one (or all) waiters of `cv_id` in virtual time.
#[inline]
pub(crate) fn cv_notify(cv_id: usize, all: bool) {
    if SEAM {
        vt::cv_notify(cv_id, all);
    }
}

/// Charge `n` units of a named cost to the current CPU: counted in a run, nothing on the wall
/// clock (the flag test keeps the wall path from writing the counts).
#[inline(always)]
pub(crate) fn charge(cost: Cost, n: u64) {
    if active() {
        vt::charge(cost, n);
    }
}

/// One `struct page` touched: priced (`Access`) or only moved (`Measured`).
#[inline]
pub(crate) fn mem_touch_page(pfn: u64, how: Touch) {
    if SEAM {
        vt::mem_touch_page(pfn, how);
    }
}

/// Virtual now in ns, `None` in wall mode.
#[inline]
pub(crate) fn now_ns() -> Option<u64> {
    if !SEAM {
        return None;
    }
    vt::now_ns()
}

/// Virtual busy time of the current context in ns, `None` in wall mode.
#[inline]
pub(crate) fn thread_cpu_ns() -> Option<u64> {
    if !SEAM {
        return None;
    }
    vt::thread_cpu_ns()
}

/// A section that must pass no synchronisation point while the guard lives: in a virtual run
/// nothing else runs meanwhile (checked in debug builds; nothing in release builds). The TLB
/// gates' stand-in in a run.
#[inline]
pub(crate) fn atomic_section() -> vt::AtomicSection {
    vt::AtomicSection::enter()
}

/// Sleep in virtual time; returns false in wall mode (the seam then sleeps on the host).
#[inline]
pub(crate) fn sleep_ns(ns: u64) -> bool {
    SEAM && vt::sleep_ns(ns)
}

/// Which clock an engine operation runs on, decided once at its entry (an allocator call, a
/// pcp drain, a `release_pages` batch, a fault) and passed down, so that the hooks of its
/// inner loops (the list operations of `page_alloc/meta.rs`, `__free_one_page`'s buddy checks,
/// the charges, the fault's locks) take no thread-local test each: [`Wall`] compiles every
/// hook out, as the `no_vtime_seam` build does, [`Virtual`] calls the runtime without asking,
/// and [`Current`] asks [`active`] at each hook (what every hook outside such an operation
/// does).
///
/// The kernel has nothing like it: its code runs on one clock. The decision is exact because
/// a virtual run is entered and left only by `Machine::run`, never inside an engine operation,
/// so the flag cannot change under one. Enter an operation through [`on_clock!`], which reads
/// the flag once and instantiates the operation for each clock.
///
/// A lock guard that outlives the call which took it (`PtLockGuard`, `RwSemReadGuard`,
/// `MmapReadGuard`) carries its clock as a type parameter, defaulting to [`Current`], and asks
/// it at its release; those guards are public, so what they ask of it is the public, sealed
/// [`ClockKind`], and the hooks are this crate-private extension of it.
pub(crate) trait Clock: ClockKind {
    /// [`charge`] on this clock.
    #[inline(always)]
    fn charge(self, cost: Cost, n: u64) {
        if SEAM && self.is_virtual() {
            vt::charge(cost, n);
        }
    }

    /// The lines of one list operation `op` (`page_alloc/meta.rs`): up to three `struct page`s
    /// (`NIL` entries skipped) and, when `head()` is not 0, the list head at that address,
    /// homed on the node of the first page; `op` says which line it reads and which it writes
    /// (`vtime/store_buffer.rs`). `head` is called only in virtual time.
    #[inline(always)]
    fn mem_touch_list(self, op: ListOp, head: impl FnOnce() -> usize, pfns: [u32; 3]) {
        if SEAM && self.is_virtual() {
            vt::mem_touch_list(op, head(), pfns);
        }
    }

    /// One line of a structure laid out as v4.10 did, by its key `addr()` (not 0), homed on
    /// frame `home`'s node: a load, or (`store`) a store nothing after it waits for
    /// (`vtime/hooks.rs`, `mem_touch_line`). `addr` is called only in virtual time.
    #[inline(always)]
    fn mem_touch_line(self, addr: impl FnOnce() -> usize, home: Pfn, store: bool) {
        if SEAM && self.is_virtual() {
            vt::mem_touch_line(addr(), home.0 as u32, store);
        }
    }

    /// [`mem_touch_page`] on this clock.
    #[inline(always)]
    fn mem_touch_page(self, pfn: u64, how: Touch) {
        if SEAM && self.is_virtual() {
            vt::mem_touch_page(pfn, how);
        }
    }
}

impl<C: ClockKind> Clock for C {}

mod sealed {
    /// Only this module's three clocks are [`ClockKind`](super::ClockKind)s.
    pub trait Sealed {}
}

/// What a lock guard asks of its [`Clock`]: whether its hold is in virtual time. Public only
/// because the guards that carry a clock are; sealed (implemented by [`Wall`], [`Virtual`]
/// and [`Current`] alone).
pub trait ClockKind: Copy + std::fmt::Debug + sealed::Sealed {
    /// The operation runs in virtual time (the hooks call the runtime).
    fn is_virtual(self) -> bool;
}

/// The wall clock: every hook is nothing.
#[derive(Debug, Clone, Copy)]
pub struct Wall;

/// A virtual run is active on this host thread (tested once, by [`on_clock!`]).
#[derive(Debug, Clone, Copy)]
pub struct Virtual;

/// Not decided: each hook tests [`active`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Current;

impl sealed::Sealed for Wall {}
impl sealed::Sealed for Virtual {}
impl sealed::Sealed for Current {}

impl ClockKind for Wall {
    #[inline(always)]
    fn is_virtual(self) -> bool {
        false
    }
}

impl ClockKind for Virtual {
    #[inline(always)]
    fn is_virtual(self) -> bool {
        SEAM
    }
}

impl ClockKind for Current {
    #[inline(always)]
    fn is_virtual(self) -> bool {
        active()
    }
}

/// `on_clock!(c => expr)`: `expr` with `c` bound to [`Virtual`] in a virtual run and to
/// [`Wall`] outside one: one flag test, and `expr` compiled once per clock (without the seam,
/// only the wall instance is reachable).
macro_rules! on_clock {
    ($c:ident => $e:expr) => {
        if $crate::sync::vhook::active() {
            let $c = $crate::sync::vhook::Virtual;
            $e
        } else {
            let $c = $crate::sync::vhook::Wall;
            $e
        }
    };
}
pub(crate) use on_clock;

/// `struct lockdep_map` (the `dep_map` inside a `spinlock_t` or an `rw_semaphore`): a lock as
/// virtual time knows it — its class, and its identity, which is the map's own address (a
/// non-empty field, so no two live locks share it). Dropping the map, with its lock, tells
/// virtual time the lock is gone ([`lock_forget`]): a lock built later at the same
/// address starts fresh.
///
/// It also carries the [`Slot`] where the running machine's table keeps the lock's virtual
/// state (the kernel's `lockdep_map` caches its class pointer the same way), so that the
/// `*_map` hooks find it by index, not by hashing the address (`vtime/sched/table.rs`). The
/// slot is a hint the runtime checks, so a map used by several runs, or by none, is safe.
/// Four bytes (eight with padding) more per lock; the page-table lock, which has no room,
/// has no map and no slot.
#[derive(Debug)]
pub(crate) struct LockMap {
    class: &'static LockClass,
    slot: Slot,
}

impl LockMap {
    pub(crate) const fn new(class: &'static LockClass) -> Self {
        Self {
            class,
            slot: Slot::new(),
        }
    }

    /// The lock's key in virtual time.
    #[inline]
    pub(crate) fn id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    #[inline]
    pub(crate) fn class(&self) -> &'static LockClass {
        self.class
    }
}

impl Drop for LockMap {
    fn drop(&mut self) {
        if active() {
            lock_forget(self.id());
        }
    }
}
