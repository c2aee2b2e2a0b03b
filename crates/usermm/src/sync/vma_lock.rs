//! [`VmaLock`]: the per-VMA lock of Linux 6.4+ (`vma->vm_lock`, `vma->vm_lock_seq`), built on
//! the seam's [`RwSem`] so that loom and virtual time see every acquisition.
//!
//! Mirrors `include/linux/mm.h` (`vma_start_read`, `vma_end_read`, `vma_start_write`,
//! `vma_mark_detached`, `vma_assert_write_locked`) and `include/linux/mmap_lock.h`
//! (`vma_end_write_all`) of the 6.4–6.14 design, where the lock is an `rw_semaphore` beside
//! a sequence number:
//! ```text
//!  mm_lock_seq   (in the MmapLock)  bumped by every mmap_write_unlock and mmap_write_downgrade
//!  vm_lock_seq   (per VMA)          = mm_lock_seq  ⇔  the VMA is write-locked
//!
//!  reader (a fault, no mmap_lock)           writer (holds mmap_lock for write)
//!  ───────────────────────────────          ──────────────────────────────────
//!  vm_lock_seq == mm_lock_seq? → fail       vm_lock_seq == mm_lock_seq? → done (already)
//!  try_read(rwsem)            → fail        write(rwsem)   (waits out the readers)
//!  vm_lock_seq == mm_lock_seq? → fail       vm_lock_seq = mm_lock_seq
//!  … the fault …                            up_write — the mark stays until the mmap lock's
//!  up_read                                  release bumps mm_lock_seq: every VMA it marked is
//!                                           unlocked at once
//! ```
//! A reader never waits: a VMA being changed makes it fall back to the mmap lock. A detached
//! VMA (removed from the tree by munmap or a merge) can never be read-locked again: its
//! readers re-walk the tree (`VMA_LOCK_MISS`).
//!
//! # Invariants
//! - A VMA's `vm_lock_seq` only changes under its mm's mmap lock held for writing, and only
//!   to that hold's `mm_lock_seq` (which no reader can see change while the hold lasts).
//! - Once `vma_start_write` returns, no reader holds the VMA and none can take it until the
//!   mmap lock is released; a detached VMA is never read-locked again.
//!
//! # Locks
//! `mmap_lock (write) -> vm_lock (write)`; readers take `vm_lock` (read) with no mmap lock
//! and may then take the page-table locks (`vm_lock (read) -> PMD lock -> PTE lock`).
//!
//! # Differences from Linux
//! The 6.4–6.14 rwsem is kept (v6.15 replaced it with a reference count, `vm_refcnt`, with
//! the same protocol); the sequence numbers are 64-bit and never wrap.

#[cfg(loom)]
use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::class::VMA_LOCK;
use super::rwsem::{RwSem, RwSemReadGuard};

/// `vm_lock_seq` of a VMA never write-locked: no `mm_lock_seq` ever reaches it.
const UNLOCKED_SEQ: u64 = u64::MAX;

/// `mm->mm_lock_seq`: the count of ended mmap write holds, which marks the current one.
#[derive(Debug, Default)]
pub struct MmLockSeq(AtomicU64);

impl MmLockSeq {
    pub fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    /// The current value (the sequence number of the write hold in progress, if any).
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// `vma_end_write_all`: every VMA write-locked under the hold that ends is unlocked.
    #[inline]
    pub(crate) fn end_write_all(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

/// The per-VMA lock (see the module documentation).
#[doc(alias = "vm_lock")]
#[doc(alias = "vm_lock_seq")]
#[derive(Debug)]
pub struct VmaLock {
    rwsem: RwSem<()>,
    vm_lock_seq: AtomicU64,
    detached: AtomicBool,
}

/// A held VMA read lock (`vma_start_read` succeeded); dropping it is `vma_end_read`.
#[doc(alias = "vma_end_read")]
#[must_use = "if unused the VMA lock is released at once"]
#[derive(Debug)]
pub struct VmaReadGuard<'a> {
    _guard: RwSemReadGuard<'a, ()>,
}

impl Default for VmaLock {
    fn default() -> Self {
        Self::new()
    }
}

impl VmaLock {
    /// An attached, unlocked VMA lock.
    pub fn new() -> Self {
        Self {
            rwsem: RwSem::new(&VMA_LOCK, ()),
            vm_lock_seq: AtomicU64::new(UNLOCKED_SEQ),
            detached: AtomicBool::new(false),
        }
    }

    /// A VMA lock created during an mmap write hold whose sequence number is `seq`: already
    /// write-locked, as a new VMA is (`vma_start_write` before it is linked).
    pub fn new_write_locked(seq: u64) -> Self {
        let l = Self::new();
        l.vm_lock_seq.store(seq, Ordering::Release);
        l
    }

    /// `vma_start_read`: take the VMA for reading without waiting, or fail when it is
    /// write-locked (or being write-locked) under the current mmap write hold, or detached.
    #[doc(alias = "vma_start_read")]
    #[inline]
    pub fn start_read<'a>(&'a self, mm_lock_seq: &MmLockSeq) -> Option<VmaReadGuard<'a>> {
        if self.vm_lock_seq.load(Ordering::Acquire) == mm_lock_seq.get() {
            return None;
        }
        let guard = self.rwsem.try_read()?;
        // A writer may have marked the VMA and released the rwsem between the test above and
        // the try_read: test again, under the read lock.
        if self.vm_lock_seq.load(Ordering::Acquire) == mm_lock_seq.get() {
            return None;
        }
        Some(VmaReadGuard { _guard: guard })
    }

    /// `vma_start_write`: mark the VMA write-locked for the mmap write hold numbered `seq`
    /// (the caller holds it), waiting for its readers to finish first. A no-op when already
    /// marked under this hold.
    #[doc(alias = "vma_start_write")]
    pub fn start_write(&self, seq: u64) {
        if self.vm_lock_seq.load(Ordering::Acquire) == seq {
            return;
        }
        let w = self.rwsem.write();
        self.vm_lock_seq.store(seq, Ordering::Release);
        drop(w);
    }

    /// `vma_assert_write_locked`: is the VMA marked under the hold numbered `seq`?
    pub fn is_write_locked(&self, seq: u64) -> bool {
        self.vm_lock_seq.load(Ordering::Acquire) == seq
    }

    /// `vma_mark_detached`: the VMA left the tree; no reader may take it from now on. The
    /// caller write-locked it first, so no reader holds it.
    #[doc(alias = "vma_mark_detached")]
    pub fn mark_detached(&self) {
        self.detached.store(true, Ordering::Release);
    }

    /// Was the VMA detached? (Readers test this once they hold the lock.)
    #[inline]
    pub fn is_detached(&self) -> bool {
        self.detached.load(Ordering::Acquire)
    }
}
