//! VMA merging: `vma_merge_new_range` (mmap next to a compatible VMA) and
//! `vma_merge_existing_range` / `vma_modify` (mprotect, madvise, mlock changing part of a VMA),
//! with the rules of `is_mergeable_vma` and `is_mergeable_anon_vma` (see the parent module's
//! "Merge rules").
//!
//! Mirrors `mm/vma.c`. Every function here mutates the tree: the caller holds the mmap lock
//! for writing.

use std::sync::Arc;

#[cfg(test)]
use super::area::DEV_ZERO_FILE;
use super::area::{anon_compatible, first_anon, page_aligned, Vma, VmaKind};
use super::flags::VmFlags;
use super::tree::VmaTree;
use crate::addr::PAGE_SHIFT;
use crate::error::Errno;
use crate::mm::shmem::Shmem;

/// What `vma_merge_existing_range` decided: the merging neighbours as `(start, anon_vma)` of
/// prev and `(end, anon_vma)` of next, and the facts about the modified range it needs.
pub(super) struct ExistingMerge {
    anon: u64,
    pgoff: u64,
    left_side: bool,
    right_side: bool,
    prev: Option<(u64, u64)>,
    next: Option<(u64, u64)>,
}

/// `struct vma_merge_struct` (`vmg`): a new range to place by merging, with what the merge
/// rules compare — its flags, kind, file, shmem object, offset and anon_vma (0: none yet).
#[doc(alias = "vma_merge_struct")]
#[derive(Debug, Clone, Copy)]
pub(super) struct VmaMergeStruct<'a> {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) flags: VmFlags,
    pub(super) kind: VmaKind,
    pub(super) file: u64,
    pub(super) shmem: Option<&'a Arc<Shmem>>,
    pub(super) pgoff: u64,
    pub(super) anon_vma: u64,
}

impl VmaTree {
    #[cfg(test)] // exercised by the unit tests only: not compiled into the library
    /// `vma_merge_new_range`: try to place the new range `[start, end)` (free, page aligned) by
    /// expanding an adjacent VMA — prev, next, or prev swallowing next (three-way). Uses the
    /// kind's default file ([`DEV_ZERO_FILE`] for `DevZero`; `SharedAnon`/`Hugetlb` are new
    /// files and never merge). Returns the start of the VMA now covering the range, or `None`
    /// when no merge is possible (then the caller inserts a new VMA).
    #[doc(alias = "vma_merge_new_range")]
    pub(super) fn merge_new(
        &mut self,
        start: u64,
        end: u64,
        flags: VmFlags,
        kind: VmaKind,
        pgoff: u64,
    ) -> Option<u64> {
        if kind.file_per_mapping() {
            return None;
        }
        let file = if kind == VmaKind::DevZero {
            DEV_ZERO_FILE
        } else {
            0
        };
        self.merge_new_range(&VmaMergeStruct {
            start,
            end,
            flags,
            kind,
            file,
            shmem: None,
            pgoff,
            anon_vma: 0,
        })
    }

    /// The VMA-tree part of `__mmap_region`: merge `vma`'s range into a neighbour if the rules
    /// allow (using `vma`'s file and shmem object), else insert `vma` (a `SharedAnon`/`Hugetlb`
    /// one gets a new inode first, so it never merges). Returns the start of the VMA covering
    /// the new range. The range must be free and `map_count` checked by the caller (`do_mmap`).
    #[doc(alias = "__mmap_region", alias = "mmap_region")]
    pub(super) fn insert_or_merge(&mut self, mut vma: Vma) -> u64 {
        vm_bug_on!(vma.anon_vma() != 0, "a new VMA has no anon_vma");
        if vma.kind.file_per_mapping() && vma.file == 0 {
            vma.file = self.new_shmem_ino();
        }
        let merged = self.merge_new_range(&VmaMergeStruct {
            start: vma.start,
            end: vma.end,
            flags: vma.flags,
            kind: vma.kind,
            file: vma.file,
            shmem: vma.shmem.as_ref(),
            pgoff: vma.pgoff,
            anon_vma: 0,
        });
        match merged {
            Some(s) => s,
            None => {
                let s = vma.start;
                self.insert(vma);
                s
            }
        }
    }

    /// `vma_merge_new_range`: place the free range `vmg` describes by expanding a neighbour
    /// (prev, next, or prev swallowing next), when the merge rules allow; the neighbours must
    /// be compatible with the range's anon_vma too (a moved VMA's, in `copy_vma`). Returns the
    /// start of the VMA now covering the range, or `None`.
    pub(super) fn merge_new_range(&mut self, vmg: &VmaMergeStruct<'_>) -> Option<u64> {
        let &VmaMergeStruct {
            start,
            end,
            flags,
            kind,
            pgoff,
            anon_vma: anon,
            ..
        } = vmg;
        vm_bug_on!(start >= end || !page_aligned(start) || !page_aligned(end));
        vm_bug_on!(
            self.find_vma_intersection(start, end).is_some(),
            "new range {start:#x}-{end:#x} is mapped"
        );
        if flags.intersects(VmFlags::VM_SPECIAL) || !kind.can_merge() {
            return None;
        }
        let prev = self.mergeable_prev(vmg);
        let next = self.mergeable_next(vmg, prev);
        match (prev, next) {
            (None, None) => None,
            (Some((ps, pa)), Some((ne, na))) => {
                self.vmas.remove(&end);
                let mut p = self.vmas.get_mut(&ps).expect("prev");
                p.end = ne;
                p.set_anon_vma(first_anon(&[pa, anon, na]));
                Some(ps)
            }
            (Some((ps, pa)), None) => {
                let mut p = self.vmas.get_mut(&ps).expect("prev");
                p.end = end;
                p.set_anon_vma(first_anon(&[pa, anon]));
                Some(ps)
            }
            (None, Some((_, na))) => {
                let mut n = self.vmas.remove(&end).expect("next");
                n.start = start;
                n.pgoff = pgoff;
                n.set_anon_vma(first_anon(&[na, anon]));
                self.vmas.insert(start, n);
                Some(start)
            }
        }
    }

    /// `can_vma_merge_after` for the range `vmg` describes: the VMA that ends where the range
    /// starts and may grow over it (mergeable flags, file and offset, a compatible anon_vma),
    /// as its start and anon_vma.
    #[doc(alias = "can_vma_merge_after", alias = "can_vma_merge_left")]
    fn mergeable_prev(&self, vmg: &VmaMergeStruct<'_>) -> Option<(u64, u64)> {
        self.vmas
            .range(..vmg.start)
            .next_back()
            .map(|(_, p)| p)
            .filter(|p| {
                p.end == vmg.start
                    && p.is_mergeable(vmg.flags, vmg.kind, vmg.file, vmg.shmem)
                    && anon_compatible(vmg.anon_vma, p.anon_vma())
                    && p.pgoff + p.pages() == vmg.pgoff
            })
            .map(|p| (p.start, p.anon_vma()))
    }

    /// `can_vma_merge_before` for the range `vmg` describes: the VMA that starts where the range
    /// ends and may grow down over it, its anon_vma compatible with the range's and with
    /// `prev`'s (the one [`mergeable_prev`](Self::mergeable_prev) found), as its end and
    /// anon_vma.
    #[doc(alias = "can_vma_merge_before", alias = "can_vma_merge_right")]
    fn mergeable_next(
        &self,
        vmg: &VmaMergeStruct<'_>,
        prev: Option<(u64, u64)>,
    ) -> Option<(u64, u64)> {
        let pglen = (vmg.end - vmg.start) >> PAGE_SHIFT;
        self.vmas
            .get(&vmg.end)
            .filter(|n| {
                n.is_mergeable(vmg.flags, vmg.kind, vmg.file, vmg.shmem)
                    && anon_compatible(vmg.anon_vma, n.anon_vma())
                    && n.pgoff == vmg.pgoff + pglen
                    && prev.is_none_or(|(_, pa)| anon_compatible(pa, n.anon_vma()))
            })
            .map(|n| (n.end, n.anon_vma()))
    }

    /// The decision half of `vma_merge_existing_range`: which neighbours `[start, end)` (inside
    /// the VMA keyed `key`, about to carry `flags`) would merge with. `None`: no merge.
    pub(super) fn plan_existing_merge(
        &self,
        key: u64,
        start: u64,
        end: u64,
        flags: VmFlags,
    ) -> Option<ExistingMerge> {
        let vma = self.vmas.get(&key)?;
        vm_bug_on!(start < vma.start || end > vma.end || start >= end);
        let (vstart, vend, vpgoff, kind, file, anon) = (
            vma.start,
            vma.end,
            vma.pgoff,
            vma.kind,
            vma.file,
            vma.anon_vma(),
        );
        let left_side = start == vstart;
        let right_side = end == vend;
        if flags.intersects(VmFlags::VM_SPECIAL) || !kind.can_merge() || (!left_side && !right_side)
        {
            return None;
        }
        let pgoff = vpgoff + ((start - vstart) >> PAGE_SHIFT);
        let vmg = VmaMergeStruct {
            start,
            end,
            flags,
            kind,
            file,
            shmem: vma.shmem.as_ref(),
            pgoff,
            anon_vma: anon,
        };
        // On the left side `start` is the VMA's own start: the VMA below it is prev.
        let prev = left_side.then(|| self.mergeable_prev(&vmg)).flatten();
        let next = right_side
            .then(|| self.mergeable_next(&vmg, prev))
            .flatten();
        if prev.is_none() && next.is_none() {
            return None;
        }
        Some(ExistingMerge {
            anon,
            pgoff,
            left_side,
            right_side,
            prev,
            next,
        })
    }

    /// `vma_merge_existing_range`: `[start, end)` lies inside the VMA keyed `key` and is about to
    /// carry `flags`. Merge it into prev and/or next if it touches that side and the rules allow.
    /// On success the range carries `flags` and the start of the merged VMA is returned.
    pub(super) fn merge_existing_range(
        &mut self,
        key: u64,
        start: u64,
        end: u64,
        flags: VmFlags,
    ) -> Option<u64> {
        let plan = self.plan_existing_merge(key, start, end, flags)?;
        let anon = plan.anon;
        match (plan.prev, plan.next) {
            (None, None) => None,
            (Some((ps, pa)), Some((ne, na))) => {
                // |prev|**vma**|next| → prev extends over both; vma and next are deleted.
                self.vmas.remove(&key);
                self.vmas.remove(&end);
                let mut p = self.vmas.get_mut(&ps).expect("prev");
                p.end = ne;
                p.flags = flags;
                p.set_anon_vma(first_anon(&[pa, anon, na]));
                Some(ps)
            }
            (Some((ps, pa)), None) => {
                // |prev|**vma…| → prev extends to `end`; vma shrinks from the left or goes.
                let mut v = self.vmas.remove(&key).expect("vma");
                if !plan.right_side {
                    v.pgoff += (end - v.start) >> PAGE_SHIFT;
                    v.start = end;
                    self.vmas.insert(end, v);
                }
                let mut p = self.vmas.get_mut(&ps).expect("prev");
                p.end = end;
                p.flags = flags;
                p.set_anon_vma(first_anon(&[pa, anon]));
                Some(ps)
            }
            (None, Some((_, na))) => {
                // |…**vma**|next| → next extends down to `start`; vma shrinks or goes.
                let mut n = self.vmas.remove(&end).expect("next");
                if plan.left_side {
                    self.vmas.remove(&key);
                } else {
                    self.vmas.get_mut(&key).expect("vma").end = start;
                }
                n.start = start;
                n.pgoff = plan.pgoff;
                n.flags = flags;
                n.set_anon_vma(first_anon(&[na, anon]));
                self.vmas.insert(start, n);
                Some(start)
            }
        }
    }

    /// `vma_modify_flags` + the flag update of `mprotect_fixup`/`madvise_update_vma`/
    /// `mlock_fixup`: give `[start, end)` — inside the one VMA containing `start` — the flags
    /// `new_flags`. In the kernel's order: first try to merge the range into a neighbour; failing
    /// that, split off the parts outside the range (`split_vma`, each `ENOMEM` at
    /// `map_count() >= max_map_count`) and set the flags on the middle. Returns the start of the
    /// VMA now covering the range. Equal flags change nothing (the callers' early exit).
    ///
    /// Errors: `ENOMEM` when `start` is unmapped (no change) or a split hits the limit — like
    /// Linux, a first split that succeeded is not undone when the second fails.
    #[doc(alias = "vma_modify")]
    pub(super) fn vma_modify_flags(
        &mut self,
        start: u64,
        end: u64,
        new_flags: VmFlags,
        max_map_count: usize,
    ) -> Result<u64, Errno> {
        vm_bug_on!(!page_aligned(start) || !page_aligned(end) || start >= end);
        let Some(vma) = self.vma_lookup(start) else {
            return Err(Errno::ENOMEM);
        };
        vm_bug_on!(end > vma.end, "range {start:#x}-{end:#x} leaves its VMA");
        let end = end.min(vma.end);
        let key = vma.start;
        if vma.flags == new_flags {
            return Ok(key);
        }
        if let Some(merged) = self.merge_existing_range(key, start, end, new_flags) {
            return Ok(merged);
        }
        if key < start {
            self.split(start, max_map_count)?;
        }
        if self.vmas[&start].end > end {
            self.split(end, max_map_count)?;
        }
        self.vmas.get_mut(&start).expect("middle").flags = new_flags;
        Ok(start)
    }

    /// The tree half of `expand_downwards`: the VMA starting at `start` now starts at
    /// `new_start` (page aligned, below, and free down to there), its `pgoff` moved back by as
    /// many pages. The caller checked the stack rules. Returns false if no VMA starts at
    /// `start` or `new_start` is not below it.
    pub(super) fn move_start_down(&mut self, start: u64, new_start: u64) -> bool {
        if new_start >= start || !page_aligned(new_start) || !self.vmas.contains_key(&start) {
            return false;
        }
        vm_bug_on!(
            self.find_vma_intersection(new_start, start).is_some(),
            "stack expansion over a mapping"
        );
        let mut v = self.vmas.remove(&start).expect("key just checked");
        v.pgoff -= (start - new_start) >> PAGE_SHIFT;
        v.start = new_start;
        self.vmas.insert(new_start, v);
        true
    }

    #[cfg(test)] // exercised by the unit tests only: not compiled into the library
    /// After the flags of the VMA containing `addr` changed in place (e.g. after a
    /// [`VmaTree::split`] and a direct flag update): merge it with prev and/or next if the rules
    /// allow. Returns the start of the resulting VMA (`addr`'s VMA's start if nothing merged),
    /// or `None` when `addr` is unmapped.
    pub(super) fn merge_after_change(&mut self, addr: u64) -> Option<u64> {
        let v = self.vma_lookup(addr)?;
        let (s, e, f) = (v.start, v.end, v.flags);
        Some(self.merge_existing_range(s, s, e, f).unwrap_or(s))
    }

    /// Whether giving `[start, end)` (inside the VMA containing `start`) the flags `flags` would
    /// merge it with a neighbour (`vma_merge_existing_range`'s decision, without the change).
    pub fn would_merge(&self, start: u64, end: u64, flags: VmFlags) -> bool {
        let Some(v) = self.vma_lookup(start) else {
            return false;
        };
        let (key, end) = (v.start, end.min(v.end));
        start < end && self.plan_existing_merge(key, start, end, flags).is_some()
    }
}
