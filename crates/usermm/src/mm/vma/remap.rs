//! The VMA-tree half of `mremap` and `brk`: growing a VMA in place (`vma_merge_extend`,
//! `vma_expandable`), placing a moved VMA (`copy_vma`), and the heap bounds.
//!
//! Mirrors `mm/vma.c` (`copy_vma`, `vma_merge_extend`) and `mm/mremap.c` (`vma_expandable`).
//! The caller holds the mmap lock for writing and moves or zaps the page tables itself.

use super::area::{anon_compatible, first_anon, page_aligned, Vma};
use super::merge::VmaMergeStruct;
use super::tree::VmaTree;
use crate::addr::{PAGE_SHIFT, TASK_SIZE};

impl VmaTree {
    /// `vma_expandable`: may the VMA starting at `key` grow by `delta` bytes at its end? Only
    /// when the new end does not wrap or pass `TASK_SIZE` and nothing is mapped there.
    pub fn vma_expandable(&self, key: u64, delta: u64) -> bool {
        let Some(v) = self.vmas.get(&key) else {
            return false;
        };
        let Some(end) = v.end.checked_add(delta) else {
            return false;
        };
        end <= TASK_SIZE && self.find_vma_intersection(v.end, end).is_none()
    }

    /// `vma_merge_extend`: grow the VMA starting at `key` by `delta` bytes (the caller checked
    /// [`VmaTree::vma_expandable`]); if it now touches a compatible next VMA, they merge.
    /// Returns the start of the VMA covering the grown range.
    #[doc(alias = "vma_merge_extend")]
    pub(super) fn merge_extend(&mut self, key: u64, delta: u64) -> u64 {
        let v = self.vmas.get(&key).expect("a VMA to extend");
        let (start, end) = (v.start, v.end);
        let snapshot = v.clone();
        let new_end = end + delta;
        vm_bug_on!(self.find_vma_intersection(end, new_end).is_some());
        let next = self
            .vmas
            .get(&new_end)
            .filter(|n| {
                n.is_mergeable(
                    snapshot.flags,
                    snapshot.kind,
                    snapshot.file,
                    snapshot.shmem.as_ref(),
                ) && snapshot.pgoff + ((new_end - start) >> PAGE_SHIFT) == n.pgoff
                    && anon_compatible(snapshot.anon_vma(), n.anon_vma())
                    && snapshot.kind.can_merge()
                    && !snapshot.flags.intersects(super::VmFlags::VM_SPECIAL)
            })
            .map(|n| (n.end, n.anon_vma()));
        if let Some((ne, na)) = next {
            self.vmas.remove(&new_end);
            let mut v = self.vmas.get_mut(&key).expect("still there");
            let anon = first_anon(&[v.anon_vma(), na]);
            v.end = ne;
            v.set_anon_vma(anon);
        } else {
            self.vmas.get_mut(&key).expect("still there").end = new_end;
        }
        start
    }

    /// `copy_vma`: the VMA a move lands in — `[start, end)` (free, page aligned) with `src`'s
    /// kind, flags, file and anon_vma and offset `pgoff`, merged into a compatible neighbour
    /// when the rules allow (anon_vma included), else inserted. An anonymous `src` without an
    /// anon_vma takes `start >> PAGE_SHIFT` as its offset, to merge more often. Returns the
    /// start of the VMA now covering the range.
    pub(super) fn copy_vma(&mut self, src: &Vma, start: u64, end: u64, pgoff: u64) -> u64 {
        vm_bug_on!(start >= end || !page_aligned(start) || !page_aligned(end));
        let anon = src.anon_vma();
        let pgoff = if src.is_anonymous() && anon == 0 {
            start >> PAGE_SHIFT
        } else {
            pgoff
        };
        let merged = if src.kind.file_per_mapping() && src.shmem.is_none() {
            None
        } else {
            self.merge_new_range(&VmaMergeStruct {
                start,
                end,
                flags: src.flags,
                kind: src.kind,
                file: src.file,
                shmem: src.shmem.as_ref(),
                pgoff,
                anon_vma: anon,
            })
        };
        if let Some(s) = merged {
            return s;
        }
        let mut v = src.clone();
        v.start = start;
        v.end = end;
        v.pgoff = pgoff;
        if v.kind == super::VmaKind::PfnMap {
            v.pfn_base = src.pfn_base + (pgoff - src.pgoff);
        }
        v.set_anon_vma(anon);
        self.insert(v);
        start
    }

    /// Set the flags and anon_vma of the VMA starting at `key` as a whole, without splitting
    /// or merging (what `move_vma` does to the source of `MREMAP_DONTUNMAP`: `VM_LOCKED`
    /// cleared, the anon_vma unlinked when the whole VMA moved).
    pub(super) fn set_flags_and_anon(&mut self, key: u64, flags: super::VmFlags, anon: u64) {
        if let Some(mut v) = self.vmas.get_mut(&key) {
            v.flags = flags;
            v.set_anon_vma(anon);
        }
    }

    /// Set `mm->brk` (the caller changed the heap VMA to match).
    pub(super) fn set_brk(&mut self, brk: u64) {
        self.brk = brk;
    }

    /// See `VmaWriteGuard::brk_insert`.
    pub(super) fn brk_insert(&mut self, vma: Vma, prev: Option<u64>) -> u64 {
        if let Some(p) = prev.and_then(|k| self.vmas.get(&k)) {
            let ok = p.end == vma.start
                && p.is_mergeable(vma.flags, vma.kind, vma.file, None)
                && anon_compatible(0, p.anon_vma())
                && p.pgoff + p.pages() == vma.pgoff
                && !p.flags.intersects(super::VmFlags::VM_SPECIAL);
            if ok {
                let k = p.start;
                self.vmas.get_mut(&k).expect("prev").end = vma.end;
                return k;
            }
        }
        let s = vma.start;
        self.insert(vma);
        s
    }
}
