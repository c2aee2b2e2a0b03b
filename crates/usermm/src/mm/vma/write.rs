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
}
