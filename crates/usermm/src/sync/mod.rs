//! Synchronisation: the mm's `mmap_lock`, workqueues, and the std|loom facade.
//!
//! | module | mirrors |
//! |---|---|
//! | [`mmap_lock`] | `include/linux/mmap_lock.h`, `mm/mmap_lock.c`, `downgrade_write` in `kernel/locking/rwsem.c` |
//! | [`workqueue`] | `kernel/workqueue.c` (`alloc_workqueue`, `queue_work`, `flush_work`, `flush_workqueue`) |
//!
//! Every engine lock that model checking should see is reached through this module, so that one
//! `--cfg loom` build swaps them all (crossbeam's `primitive` pattern):
//! - [`MmapLock`] is an instrumented `parking_lot::RwLock` normally, and a small state machine on
//!   `loom::sync::{Mutex, Condvar}` under loom, with the same API.
//! - [`primitive`] re-exports `Arc`, `Mutex`, `Condvar`, the atomics and `thread` from `std`, or
//!   from `loom` under loom, for protocols that want a loom model of their own.
//!
//! The workqueue is not modelled: it uses host threads and channels in both builds.
//!
//! Loom models live in `tests/loom_*.rs` and run with `.ci/loom.sh`.
//!
//! # Lock order
//! `mmap_lock` is the outermost lock of an mm (see the crate's "Lock ordering"). Its
//! exclusive-hold histogram and the workqueue's flush lock are leaves.

pub mod mmap_lock;
pub mod workqueue;

pub use mmap_lock::{HoldTimeSummary, MmapLock, MmapLockStats, MmapReadGuard, MmapWriteGuard};
pub use workqueue::{
    thread_cpu_time_ns, WorkHandle, WorkOutcome, WorkerStats, Workqueue, WorkqueueStats,
};

/// `std` or `loom` synchronisation primitives, chosen by `--cfg loom`.
pub mod primitive {
    #[cfg(loom)]
    pub use loom::{
        sync::{atomic, Arc, Condvar, Mutex},
        thread,
    };
    #[cfg(not(loom))]
    pub use std::{
        sync::{atomic, Arc, Condvar, Mutex},
        thread,
    };
}
