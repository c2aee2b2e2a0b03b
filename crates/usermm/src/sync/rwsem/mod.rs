//! [`RwSem`]: `rw_semaphore` with `downgrade_write` — many readers or one writer, waiters
//! sleep, and a writer can turn its hold into a read hold atomically.
//!
//! Two implementations with one API, chosen at compile time:
//! - `host.rs` (normal builds): a task-fair `parking_lot::RwLock` (new readers queue behind a
//!   parked writer, as rwsem readers queue behind a waiting writer) plus a waiter count for
//!   `rwsem_is_contended`, calling the [`vhook`](super::vhook) hooks around every host
//!   operation.
//! - `loom.rs` (`--cfg loom`): a small state machine on `loom::sync::{Mutex, Condvar}` with the
//!   value in a `loom::cell::UnsafeCell`, so that loom checks every interleaving and that no
//!   guard overlaps a writer (`tests/loom_mmap_lock.rs` drives it through `MmapLock`).
//!
//! # Invariants
//! - At any moment the lock is free, held by any number of readers, or held by one writer.
//! - [`RwSemWriteGuard::downgrade`] goes from "one writer" to "one reader (the caller)" with no
//!   instant at which the lock is free: no other writer can get in between.
//! - Not recursive: a reader that asks again may deadlock behind a queued writer.
//!
//! The engine's users: every mm's `mmap_lock` (through [`MmapLock`](super::MmapLock), which adds
//! lock_stat), the shrinker list (`shrinker_rwsem`) and the per-CPU TLB gates.

#[cfg(not(loom))]
mod host;
#[cfg(not(loom))]
pub(crate) use host::RwSemWallReadGuard;
#[cfg(not(loom))]
pub use host::{RwSem, RwSemReadGuard, RwSemWriteGuard};

#[cfg(loom)]
#[path = "loom.rs"]
mod loom_impl;
#[cfg(loom)]
pub(crate) use loom_impl::RwSemWallReadGuard;
#[cfg(loom)]
pub use loom_impl::{RwSem, RwSemReadGuard, RwSemWriteGuard};
