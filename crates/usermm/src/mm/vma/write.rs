//! The write side of an mm's VMA tree: every mutation, as a method of the mmap lock's write
//! guard.
//!
//! The mutators of [`VmaTree`] are private to this module; outside it, the only way to change
//! an mm's VMAs is through a [`VmaWriteGuard`] — `mmap_write_lock`'s guard, so holding one *is*
//! the proof that the lock is held for writing (Asterinas' page-table cursor plays the same
//! role). The guard is crate-private to obtain (`Mm::mmap_lock` is), so a library user cannot
//! remove or split a VMA behind the page tables' back; readers get the tree through
//! `Mm::mmap_read_lock`, read-only.
//!
//! Each method here forwards to the tree's own, documented there, and charges the tree
//! updates it makes in virtual time (`vma_modify`: one per VMA stored, split or removed,
//! counted from what the call returns). The tree's other mutators
//! (`insert`, `remove`, `split`, `set_flags`, `flags_mut`, `merge_new`, ...) are reached only
//! by these and by the tree's unit tests.

use super::area::Vma;
use super::flags::VmFlags;
use super::tree::VmaTree;
use crate::error::Errno;
use crate::sync::{charge, Cost, MmapWriteGuard};

/// An mm's VMA tree held for writing (`mmap_write_lock`).
pub(crate) type VmaWriteGuard<'a> = MmapWriteGuard<'a, VmaTree>;

impl MmapWriteGuard<'_, VmaTree> {
    /// `exit_mmap`'s removal of every VMA: see [`VmaTree::clear`].
    pub(crate) fn clear(&mut self) {
        charge(Cost::VmaModify, self.map_count() as u64);
        VmaTree::clear(self)
    }

    /// `vms_gather_munmap_vmas`: see [`VmaTree::detach_range`].
    pub(crate) fn detach_range(
        &mut self,
        start: u64,
        end: u64,
        max_map_count: usize,
    ) -> Result<Vec<Vma>, Errno> {
        let vmas = VmaTree::detach_range(self, start, end, max_map_count)?;
        // The VMAs removed, and the store of the hole (splits at the ends are among them).
        charge(Cost::VmaModify, vmas.len() as u64 + 1);
        Ok(vmas)
    }

    /// See [`VmaTree::insert_or_merge`].
    pub(crate) fn insert_or_merge(&mut self, vma: Vma) -> u64 {
        charge(Cost::VmaModify, 1);
        VmaTree::insert_or_merge(self, vma)
    }

    /// `vma_modify_flags`: see [`VmaTree::vma_modify_flags`].
    pub(crate) fn vma_modify_flags(
        &mut self,
        start: u64,
        end: u64,
        new_flags: VmFlags,
        max_map_count: usize,
    ) -> Result<u64, Errno> {
        charge(Cost::VmaModify, 1);
        VmaTree::vma_modify_flags(self, start, end, new_flags, max_map_count)
    }

    /// `expand_downwards`' move of `vm_start`: see [`VmaTree::move_start_down`].
    pub(crate) fn move_start_down(&mut self, start: u64, new_start: u64) -> bool {
        charge(Cost::VmaModify, 1);
        VmaTree::move_start_down(self, start, new_start)
    }

    /// `dup_mmap`'s VMA copy: see [`VmaTree::dup_for_fork`].
    pub(crate) fn dup_for_fork(
        &mut self,
        parent: &VmaTree,
        ids: &std::sync::atomic::AtomicU64,
    ) -> Vec<Vma> {
        VmaTree::dup_for_fork(self, parent, ids)
    }

    /// `vma_start_write` on every VMA (`dup_mmap`, which write-protects them all): with
    /// per-VMA locks, waits for the faults in them to finish and keeps new ones out until the
    /// mmap lock is released. A no-op without per-VMA locks.
    #[doc(alias = "vma_start_write")]
    pub(crate) fn vma_start_write_all(&mut self) {
        if let Some(idx) = self.index() {
            idx.start_write_range(0, u64::MAX);
        }
    }

    /// `vma_start_write` on the VMAs overlapping `[start, end)` (`move_vma` before it moves
    /// page tables out of a VMA it does not change yet). A no-op without per-VMA locks.
    pub(crate) fn vma_start_write(&mut self, start: u64, end: u64) {
        if let Some(idx) = self.index() {
            idx.start_write_range(start, end);
        }
    }

    /// Turn per-VMA locks on for this (empty or new) tree: see [`VmaTree::set_index`].
    pub(crate) fn set_index(&mut self, index: std::sync::Arc<super::VmaIndex>) {
        VmaTree::set_index(self, index)
    }

    /// `vma_merge_extend`: see [`VmaTree::merge_extend`].
    pub(crate) fn merge_extend(&mut self, key: u64, delta: u64) -> u64 {
        VmaTree::merge_extend(self, key, delta)
    }

    /// `copy_vma`: see [`VmaTree::copy_vma`].
    pub(crate) fn copy_vma(&mut self, src: &Vma, start: u64, end: u64, pgoff: u64) -> u64 {
        VmaTree::copy_vma(self, src, start, end, pgoff)
    }

    /// See [`VmaTree::set_flags_and_anon`].
    pub(crate) fn set_flags_and_anon(&mut self, key: u64, flags: VmFlags, anon: u64) {
        VmaTree::set_flags_and_anon(self, key, flags, anon)
    }

    /// Set `mm->brk`.
    pub(crate) fn set_brk(&mut self, brk: u64) {
        VmaTree::set_brk(self, brk)
    }

    /// `do_brk_flags`' tree step: expand the heap VMA starting at `prev` when the merge rules
    /// allow (`vma_merge_new_range` with `just_expand`: prev only, never next), else insert
    /// `vma`. Returns the start of the VMA covering the new range.
    pub(crate) fn brk_insert(&mut self, vma: Vma, prev: Option<u64>) -> u64 {
        VmaTree::brk_insert(self, vma, prev)
    }
}
