//! Synchronisation: the seam every engine lock, condition variable, shared atomic, thread start
//! and clock read goes through — and the two services built on it, the mm's `mmap_lock` and
//! the workqueue.
//!
//! One place decides how the engine synchronises: host locks (wall mode), loom under
//! `--cfg loom`, and virtual time ([`vhook`] → [`crate::vtime`]). The types are the engine's
//! own, named for what they model:
//!
//! | here | models | waiters | users |
//! |---|---|---|---|
//! | [`SpinLock`] | `spinlock_t` | spin | zone.lock, pcp, lru_lock, lru_add batches, page_table_lock, pcpu_lock, hugetlb pool, shmem pages |
//! | [`PtLock`] | `ptdesc->ptl` (split PTE / PMD lock) | spin | page-table pages (in `PageMeta`) |
//! | [`Mutex`] | `struct mutex` | sleep | pcpu_alloc_mutex, workqueue state |
//! | [`StatMutex`] | a spinlock with `/proc/lock_stat` figures | spin | zone.lock, lru_lock |
//! | [`RwSem`] | `rw_semaphore` + `downgrade_write` | sleep | [`MmapLock`], shrinker list, the VMA index |
//! | [`TlbGate`] | a shootdown's acknowledgement: an [`RwSem`] on the host, an atomic section in virtual time | spin | the mm's TLB model |
//! | [`VmaLock`] | the per-VMA lock (`vm_lock` + `vm_lock_seq`, 6.4+), on an [`RwSem`] | readers never wait | faults and madvise without the mmap lock |
//! | [`CondVar`], [`Completion`] | wait queues, `struct completion` | sleep | workqueue |
//! | [`Barrier`] | a workload's `pthread_barrier` (on a futex) | sleep | usemem, munmap-test |
//! | [`SharedLine`] | an atomic on one cache line every CPU writes | — | huge zero page refcount |
//! | [`thread`] | kthreads and workload tasks on an emulated CPU | — | workqueue workers, workloads |
//! | [`clock`] | `ktime_get`, `lockstat_clock`, task cputime | — | lock_stat, mmap_lock, munmap, workqueue, workloads |
//! | [`charge`] | work the modelled CPU does between two synchronisation points | — | zap, gather, free, LRU, faults, tables, TLB, VMAs, syscalls |
//!
//! Each lock names a [`LockClass`] (each shared line a [`LineClass`]): `const` statics in
//! [`class`], like lockdep's class keys, saying how waiters wait and naming the lock for the
//! cost profile. Every primitive calls the hooks of [`vhook`] around its host operation; outside
//! a virtual run they are a thread-local test and a branch.
//!
//! # Virtual time through the seam
//! The class, mode, acquisition and cost types are the runtime's ([`crate::vtime`]),
//! re-exported here: one definition, one class static for both. Each hook of [`vhook`]
//! forwards to `vtime::hooks`, whose one thread-local flag says whether a run is active on this
//! host thread. In a run:
//! - a lock is first taken in virtual time (FIFO hand-over, spin or sleep by class), then on the
//!   host, where it is then always free; it is released on the host, then in virtual time;
//! - [`thread`] starts contexts of the run instead of host threads, [`thread::scope`] is the
//!   runtime's scope, [`thread::sleep`] sleeps in virtual time;
//! - [`clock::now`] and [`clock::thread_cpu_ns`] are the running context's virtual clock and
//!   busy time, so every duration the engine measures (lock_stat, the mmap lock's holds,
//!   munmap's phases, the workqueue's accounting) is virtual;
//! - [`charge`] counts units of a named cost of the profile in a thread-local tally; the
//!   runtime prices the tally and adds it to the running CPU's clock at the context's next
//!   synchronisation point or clock read — exact, since nothing else runs in between. Work
//!   charged under a lock is therefore hold time, as it is on a real CPU;
//! - a [`Workqueue`] made with [`workqueue::Workers::Virtual`] runs its workers as contexts,
//!   started by the run's first `queue_work` and ended with the run (`Machine::run`).
//!
//! - the model's cache lines are touched through [`vhook`] too, outside any lock: the buddy
//!   and pcp lists and the LRU (`page_alloc/meta.rs`'s list operations), the buddy check of
//!   `__free_one_page` (`page_alloc/buddy.rs`), `release_pages`' reference drop
//!   (`page_alloc/release.rs`) and the mapcount writes of `mm/rmap.rs`; each moves a line's
//!   owner and age in `vtime::memory` and charges what that line's place costs.
//!
//! Wall-mode code paths are those before virtual time existed, behind the one flag test. A
//! [`charge`] and a line touch are behind it as well: on the wall clock each costs one load of
//! the thread-local flag and a branch not taken, and writes nothing.
//!
//! Wall-mode implementations are those the engine used before the seam (`parking_lot` locks,
//! `CLOCK_MONOTONIC`, host threads), so wall figures do not move. Under `--cfg loom` every lock
//! of the seam is explored by loom: [`SpinLock`], [`Mutex`], [`CondVar`] (so [`Completion`]
//! and [`Barrier`]) and [`PtLock`] (its state word and its parking) through `primitive.rs`,
//! which re-exports either the host primitives or loom's; [`RwSem`] (and so [`MmapLock`])
//! through its own loom twin; [`SharedLine`] over loom atomics. The virtual-time hooks are
//! then no-ops, and lock_stat ([`StatMutex`]) still counts on host atomics and clocks,
//! unexplored. [`thread`] still starts host threads, so nothing that spawns through it (the
//! workqueue's workers) can run inside a loom model; the models spawn `loom::thread`s
//! themselves. `tests/source_rules.rs` checks that no engine file outside this directory names
//! `parking_lot`, `std::sync::{Mutex, RwLock, Condvar, Barrier}` or `crossbeam_channel`.
//!
//! | module | mirrors |
//! |---|---|
//! | [`mmap_lock`] | `include/linux/mmap_lock.h`, `mm/mmap_lock.c` |
//! | [`workqueue`] | `kernel/workqueue.c` (`alloc_workqueue`, `queue_work`, `flush_work`, `flush_workqueue`) |
//!
//! Loom models live in `tests/loom_*.rs` and run with `.ci/loom.sh`.
//!
//! # Lock order
//! The seam adds no lock of its own. `mmap_lock` is the outermost lock of an mm (see the
//! crate's "Lock ordering"); its exclusive-hold histogram and the workqueue's state lock are
//! leaves.

// The guards' `Deref`/`Debug` and the `const` constructors: first, so every module below has them.
#[macro_use]
mod macros;

pub mod class;
pub mod clock;
mod condvar;
mod lock;
pub mod mmap_lock;
pub(crate) mod primitive;
mod ptlock;
mod rwsem;
mod shared_line;
mod stat_lock;
pub mod thread;
mod tlb_gate;
pub mod vhook;
mod vma_lock;
pub mod workqueue;

pub use self::class::{LineClass, LockClass, WaitKind};
pub use self::clock::Ktime;
pub use self::condvar::{Barrier, Completion, CondVar};
pub(crate) use self::lock::SpinClock;
pub use self::lock::{Mutex, MutexGuard, SpinLock, SpinLockGuard};
pub use self::mmap_lock::{
    HoldTimeSummary, MmapLock, MmapLockInfo, MmapLockStats, MmapReadGuard, MmapWriteGuard,
};
pub use self::ptlock::{PtLock, PtLockGuard};
pub use self::rwsem::{RwSem, RwSemReadGuard, RwSemWriteGuard};
pub use self::shared_line::{LineAtomic, SharedLine};
pub use self::stat_lock::{StatMutex, StatMutexGuard};
pub use self::tlb_gate::{tlb_flush_cost, tlb_flush_ipi, TlbGate, TlbGateGuard};
pub use self::vhook::Cost;
pub use self::vma_lock::{MmLockSeq, VmaLock, VmaReadGuard};
pub use self::workqueue::{WorkHandle, WorkOutcome, WorkerStats, Workqueue, WorkqueueStats};

/// Charge `n` units of the named cost to the current CPU: nothing on the host (the work itself
/// takes the time), the profile's price in a virtual run.
///
/// In a run it adds to a thread-local count, which the runtime prices at the running
/// context's next synchronisation point or clock read; on the wall clock it is the seam's one
/// flag test and writes nothing.
#[inline(always)]
pub fn charge(cost: Cost, n: u64) {
    vhook::charge(cost, n);
}

/// See [`clock::thread_cpu_ns`].
pub use self::clock::thread_cpu_ns as thread_cpu_time_ns;
