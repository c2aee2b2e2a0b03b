//! The VMA tree (`mm->mm_mt`): lookups, insertion and removal, splits, `detach_range` for
//! munmap, flag changes, anon_vma reuse, and `validate_mm`.
//!
//! Mirrors `mm/mmap.c` (`find_vma`, `find_vma_prev`), `mm/vma.c` (`__split_vma`,
//! `vms_gather_munmap_vmas`) and `mm/rmap.c` (`anon_vma_prepare`, `find_mergeable_anon_vma`).
//! The caller holds the mmap lock: for writing when it mutates, for reading when it looks up.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::area::{
    anon_vma_compatible, had_uncowed_parents, page_aligned, DevIno, Vma, VmaKind, ANON_VMA_FORKED,
    DEFAULT_START_BRK, FIRST_SHMEM_INO, TASK_UNMAPPED_BASE,
};
use super::flags::VmFlags;
use super::index::VmaIndex;
use super::map::VmaMap;
use crate::addr::{PAGE_SHIFT, PMD_SIZE, TASK_SIZE};
use crate::error::Errno;

/// The VMAs of one `mm_struct` (`mm->mm_mt`, `mm->map_count`, `mm->mmap_base`).
///
/// Protected by the mmap lock: `&mut self` needs it for writing, `&self` for reading.
#[derive(Debug)]
pub struct VmaTree {
    pub(super) vmas: VmaMap,
    /// `mm->mmap_base`: the top of the top-down search.
    pub(super) mmap_base: u64,
    /// `mm->mmap_legacy_base`: the bottom of the bottom-up fallback search.
    pub(super) mmap_legacy_base: u64,
    /// Inode numbers for new shared anonymous and hugetlb mappings.
    pub(super) next_shmem_ino: u64,
    /// What `/proc/<pid>/maps` shows for `/dev/zero`.
    pub(super) dev_zero: DevIno,
    /// `mm->start_brk`, `mm->brk`: the heap's first byte and the current break (byte
    /// granular; the heap VMA ends at the break rounded up to a page).
    pub(super) start_brk: u64,
    pub(super) brk: u64,
}

impl VmaTree {
    /// An empty address space whose top-down searches start below `mmap_base`.
    pub fn new(mmap_base: u64) -> VmaTree {
        vm_bug_on!(!page_aligned(mmap_base) || mmap_base > TASK_SIZE);
        VmaTree {
            vmas: VmaMap::new(),
            mmap_base,
            mmap_legacy_base: TASK_UNMAPPED_BASE,
            next_shmem_ino: FIRST_SHMEM_INO,
            // devtmpfs's /dev/zero on the probe host: `stat -c '%d %i' /dev/zero` → 6 4.
            dev_zero: DevIno {
                major: 0,
                minor: 6,
                ino: 4,
            },
            start_brk: DEFAULT_START_BRK,
            brk: DEFAULT_START_BRK,
        }
    }

    /// Turn per-VMA locks on: from now on every change publishes to `index` (see
    /// `index.rs`), which faults read without the mmap lock.
    pub(super) fn set_index(&mut self, index: Arc<VmaIndex>) {
        self.vmas.set_index(index);
    }

    /// The per-VMA-lock index, when per-VMA locks are on.
    pub fn index(&self) -> Option<&Arc<VmaIndex>> {
        self.vmas.index()
    }

    /// `mm->start_brk`.
    pub fn start_brk(&self) -> u64 {
        self.start_brk
    }

    /// `mm->brk`: the current program break.
    pub fn brk(&self) -> u64 {
        self.brk
    }

    /// `dup_mmap`'s copy of the VMAs (and `mmap_base`, the heap bounds) into a new mm.
    /// `VM_DONTCOPY` VMAs are left out; `VM_LOCKED`/`VM_LOCKONFAULT` are not inherited
    /// (`VM_LOCKED_MASK`); a VMA with an anon_vma gets a new one whose chain links the
    /// parent's (`anon_vma_fork`: a fresh id from `ids`, marked [`ANON_VMA_FORKED`]), except a
    /// `VM_WIPEONFORK` one, which starts with none. Returns the copies made, in address
    /// order, for the caller's `copy_page_range`.
    #[doc(alias = "dup_mmap")]
    #[doc(alias = "anon_vma_fork")]
    pub(super) fn dup_for_fork(&mut self, parent: &VmaTree, ids: &AtomicU64) -> Vec<Vma> {
        self.mmap_base = parent.mmap_base;
        self.mmap_legacy_base = parent.mmap_legacy_base;
        self.next_shmem_ino = parent.next_shmem_ino;
        self.dev_zero = parent.dev_zero;
        self.start_brk = parent.start_brk;
        self.brk = parent.brk;
        let mut copied = Vec::new();
        for v in parent.vmas.values() {
            if v.flags.contains(VmFlags::VM_DONTCOPY) {
                continue;
            }
            let mut c = v.clone();
            c.flags = c
                .flags
                .minus(VmFlags::VM_LOCKED.union(VmFlags::VM_LOCKONFAULT));
            let anon = if v.flags.contains(VmFlags::VM_WIPEONFORK) || v.anon_vma() == 0 {
                0
            } else {
                ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed) | ANON_VMA_FORKED
            };
            c.set_anon_vma(anon);
            copied.push(c.clone());
            self.vmas.insert(c.start, c);
        }
        copied
    }

    pub fn mmap_base(&self) -> u64 {
        self.mmap_base
    }

    #[cfg(test)] // exercised by the unit tests only: not compiled into the library
    /// The device and inode `/proc/<pid>/maps` shows for `/dev/zero` mappings.
    pub(super) fn set_dev_zero_id(&mut self, id: DevIno) {
        self.dev_zero = id;
    }

    pub fn dev_zero_id(&self) -> DevIno {
        self.dev_zero
    }

    /// `mm->map_count`.
    pub fn map_count(&self) -> usize {
        self.vmas.len()
    }

    pub fn is_empty(&self) -> bool {
        self.vmas.is_empty()
    }

    /// Every VMA in address order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Vma> + '_ {
        self.vmas.values()
    }

    /// The VMA starting exactly at `start`.
    pub fn get(&self, start: u64) -> Option<&Vma> {
        self.vmas.get(&start)
    }

    /// `find_vma`: the first VMA with `end > addr` (it may start above `addr`).
    ///
    /// `#[inline]` so that every codegen unit may inline it: the fault path's inlining of it
    /// otherwise depended on which unit the partitioning put it in, and moved with unrelated
    /// changes (13 M more instructions, 2 %, in a wall-clock `usemem`: callgrind).
    #[inline]
    pub fn find_vma(&self, addr: u64) -> Option<&Vma> {
        if let Some((_, v)) = self.vmas.range(..=addr).next_back() {
            if v.end > addr {
                return Some(v);
            }
        }
        self.vmas
            .range(addr.saturating_add(1)..)
            .next()
            .map(|(_, v)| v)
            .filter(|v| v.start > addr)
    }

    /// `vma_lookup`: the VMA containing `addr`.
    pub fn vma_lookup(&self, addr: u64) -> Option<&Vma> {
        self.find_vma(addr).filter(|v| v.start <= addr)
    }

    /// `find_vma_prev`, returned as `(prev, vma)`: `vma` is [`VmaTree::find_vma`]`(addr)` and
    /// `prev` the VMA before it (the last VMA when `vma` is `None`), so `prev` always ends at or
    /// below `addr`.
    pub fn find_vma_prev(&self, addr: u64) -> (Option<&Vma>, Option<&Vma>) {
        let vma = self.find_vma(addr);
        let prev = match vma {
            Some(v) => self.vmas.range(..v.start).next_back().map(|(_, p)| p),
            None => self.vmas.values().next_back(),
        };
        (prev, vma)
    }

    /// `find_vma_intersection`: the first VMA overlapping `[start, end)`.
    pub fn find_vma_intersection(&self, start: u64, end: u64) -> Option<&Vma> {
        self.find_vma(start)
            .filter(|v| v.start < end && start < end)
    }

    /// Every VMA overlapping `[start, end)`, in address order (`for_each_vma_range`).
    pub fn intersecting(&self, start: u64, end: u64) -> impl Iterator<Item = &Vma> + '_ {
        let first = if start < end {
            self.find_vma(start).map(|v| v.start)
        } else {
            None
        };
        let range = match first {
            Some(k) => self.vmas.range(k..),
            None => self.vmas.range(0..0),
        };
        range.map(|(_, v)| v).take_while(move |v| v.start < end)
    }

    /// Insert a VMA that overlaps none (`vma_link`). A `SharedAnon`/`Hugetlb` VMA with `file == 0`
    /// gets a fresh inode. The caller has checked `max_map_count`.
    #[doc(alias = "vma_link")]
    pub(super) fn insert(&mut self, mut vma: Vma) {
        vm_bug_on!(vma.start >= vma.end || !page_aligned(vma.start) || !page_aligned(vma.end));
        vm_bug_on!(
            self.find_vma_intersection(vma.start, vma.end).is_some(),
            "insert {:#x}-{:#x} overlaps",
            vma.start,
            vma.end
        );
        if vma.kind.file_per_mapping() && vma.file == 0 {
            vma.file = self.new_shmem_ino();
        }
        self.vmas.insert(vma.start, vma);
    }

    pub(super) fn new_shmem_ino(&mut self) -> u64 {
        let ino = self.next_shmem_ino;
        self.next_shmem_ino += 1;
        ino
    }

    #[cfg(test)] // exercised by the unit tests only: not compiled into the library
    /// Remove and return the VMA starting exactly at `start`.
    pub(super) fn remove(&mut self, start: u64) -> Option<Vma> {
        self.vmas.remove(&start)
    }

    /// Drop every VMA (`exit_mmap`'s `remove_vma` loop / `__mt_destroy`).
    pub(super) fn clear(&mut self) {
        self.vmas.clear();
    }

    /// The start of the VMA containing `addr` strictly after its first byte, if any.
    pub(super) fn key_strictly_inside(&self, addr: u64) -> Option<u64> {
        self.vmas
            .range(..addr)
            .next_back()
            .filter(|(_, v)| v.end > addr)
            .map(|(&k, _)| k)
    }

    /// `__split_vma`: split the VMA containing `addr` into `[start, addr)` and `[addr, end)`,
    /// without the `max_map_count` check. The upper half's `pgoff` (and `pfn_base`) advance;
    /// both halves keep the anon_vma, file and shmem object. Returns whether a split happened
    /// (false when `addr` is a VMA boundary or unmapped).
    #[doc(alias = "__split_vma")]
    pub(super) fn split_unchecked(&mut self, addr: u64) -> bool {
        vm_bug_on!(!page_aligned(addr));
        let Some(key) = self.key_strictly_inside(addr) else {
            return false;
        };
        let mut upper = self.vmas.get(&key).expect("key just found").clone();
        self.vmas.get_mut(&key).expect("key just found").end = addr;
        let delta = (addr - upper.start) >> PAGE_SHIFT;
        upper.start = addr;
        upper.pgoff += delta;
        if upper.kind == VmaKind::PfnMap {
            upper.pfn_base += delta;
        }
        self.vmas.insert(addr, upper);
        true
    }

    /// `split_vma`: [`VmaTree::split_unchecked`] at `addr`, but `ENOMEM` (and no change) when
    /// `map_count() >= max_map_count`, and `EINVAL` when `addr` is not on a huge-page boundary
    /// of a hugetlb VMA (`vm_ops->may_split`, `hugetlb_vm_op_split`). A no-op `Ok` when `addr`
    /// needs no split.
    #[doc(alias = "split_vma")]
    pub(super) fn split(&mut self, addr: u64, max_map_count: usize) -> Result<(), Errno> {
        let Some(key) = self.key_strictly_inside(addr) else {
            return Ok(());
        };
        if self.map_count() >= max_map_count {
            return Err(Errno::ENOMEM);
        }
        if matches!(self.vmas[&key].kind, VmaKind::Hugetlb) && !addr.is_multiple_of(PMD_SIZE) {
            return Err(Errno::EINVAL);
        }
        self.split_unchecked(addr);
        Ok(())
    }

    /// `vm_ops->may_split` for the two cuts an unmap of `[start, end)` makes: a hugetlb VMA
    /// cut off a 2 MiB boundary is `EINVAL` (`hugetlb_vm_op_split`). Changes nothing.
    pub fn may_split_range(&self, start: u64, end: u64) -> Result<(), Errno> {
        for cut in [start, end] {
            if let Some(key) = self.key_strictly_inside(cut) {
                if matches!(self.vmas[&key].kind, VmaKind::Hugetlb) && cut % PMD_SIZE != 0 {
                    return Err(Errno::EINVAL);
                }
            }
        }
        Ok(())
    }

    /// munmap's first phase (`vms_gather_munmap_vmas` + `vma_iter_clear_gfp`): split at `start`
    /// and `end` where they fall inside VMAs, remove every VMA in `[start, end)` and return them
    /// in address order. The caller zaps their pages, frees page tables and drops them.
    ///
    /// The kernel's only `max_map_count` check: when `start` splits a VMA that also extends past
    /// `end` (a hole punched in one VMA: net +1) and `map_count() >= max_map_count`, `ENOMEM`.
    /// Otherwise the count may exceed the limit by one between the two splits (munmap is
    /// allowed to free even at the limit) and ends at most where it started. On error nothing
    /// has changed. `start` and `end` must be page aligned with `start < end`.
    #[doc(alias = "vms_gather_munmap_vmas", alias = "do_vmi_align_munmap")]
    pub(super) fn detach_range(
        &mut self,
        start: u64,
        end: u64,
        max_map_count: usize,
    ) -> Result<Vec<Vma>, Errno> {
        vm_bug_on!(!page_aligned(start) || !page_aligned(end) || start >= end);
        let Some(first) = self.find_vma_intersection(start, end) else {
            return Ok(Vec::new());
        };
        if start > first.start && end < first.end && self.map_count() >= max_map_count {
            return Err(Errno::ENOMEM);
        }
        self.may_split_range(start, end)?;
        self.split_unchecked(start);
        self.split_unchecked(end);
        let keys: Vec<u64> = self.vmas.range(start..end).map(|(&k, _)| k).collect();
        let detached: Vec<Vma> = keys
            .iter()
            .map(|k| self.vmas.remove(k).expect("key just listed"))
            .collect();
        vm_bug_on!(detached.iter().any(|v| v.start < start || v.end > end));
        Ok(detached)
    }

    #[cfg(test)] // exercised by the unit tests only: not compiled into the library
    /// Set the flags of the VMA starting exactly at `start` (after the caller split it; follow
    /// with [`VmaTree::merge_after_change`]). Returns false if no VMA starts there.
    pub(super) fn set_flags(&mut self, start: u64, flags: VmFlags) -> bool {
        match self.vmas.get_mut(&start) {
            Some(mut v) => {
                v.flags = flags;
                true
            }
            None => false,
        }
    }

    #[cfg(test)] // exercised by the unit tests only: not compiled into the library
    /// Mutable access to the flags of the VMA starting at `start`, for callers that split first
    /// and then change flags in place (follow with [`VmaTree::merge_after_change`]).
    pub(super) fn flags_mut(&mut self, start: u64) -> Option<super::map::FlagsMut<'_>> {
        self.vmas.get_mut(&start).map(super::map::FlagsMut)
    }

    /// `anon_vma_prepare` under the mmap read lock: `vma`'s anon_vma, or else the anon_vma of an
    /// adjacent compatible VMA (next first, then prev: `find_mergeable_anon_vma`), or else a
    /// fresh id from `ids`. Reuse keeps mprotect-split pieces mergeable once faulted.
    #[doc(alias = "find_mergeable_anon_vma")]
    pub fn anon_vma_prepare(&self, vma: &Vma, ids: &AtomicU64) -> u64 {
        let cur = vma.anon_vma();
        if cur != 0 {
            return cur;
        }
        let reuse = self
            .vmas
            .get(&vma.end)
            .filter(|n| anon_vma_compatible(vma, n))
            .map(|n| n.anon_vma())
            .filter(|&a| a != 0 && !had_uncowed_parents(a))
            .or_else(|| {
                self.vmas
                    .range(..vma.start)
                    .next_back()
                    .map(|(_, p)| p)
                    .filter(|p| anon_vma_compatible(p, vma))
                    .map(|p| p.anon_vma())
                    .filter(|&a| a != 0 && !had_uncowed_parents(a))
            });
        match reuse {
            Some(id) => vma.install_anon_vma(id),
            None => vma.anon_vma_prepare(ids),
        }
    }
}

impl VmaTree {
    /// `validate_mm`: the invariants of the module doc. Returns the first violation.
    #[doc(alias = "validate_mm")]
    pub fn validate(&self, max_map_count: usize) -> Result<(), String> {
        let mut prev_end = 0u64;
        for (&k, v) in &self.vmas {
            let at = || format!("VMA {:#x}-{:#x} {:?} {:?}", v.start, v.end, v.kind, v.flags);
            if k != v.start {
                return Err(format!("{}: keyed at {k:#x}", at()));
            }
            if v.start >= v.end {
                return Err(format!("{}: empty or inverted", at()));
            }
            if !page_aligned(v.start) || !page_aligned(v.end) {
                return Err(format!("{}: not page aligned", at()));
            }
            if v.end > TASK_SIZE {
                return Err(format!("{}: beyond TASK_SIZE", at()));
            }
            if v.start < prev_end {
                return Err(format!(
                    "{}: overlaps the VMA ending at {prev_end:#x}",
                    at()
                ));
            }
            prev_end = v.end;
            let mayshare = v.flags.contains(VmFlags::VM_MAYSHARE);
            let shared = v.flags.contains(VmFlags::VM_SHARED);
            let ok = match v.kind {
                VmaKind::Anon => !mayshare && v.file == 0,
                VmaKind::DevZero => !mayshare && v.file != 0,
                VmaKind::SharedAnon => mayshare && shared && v.file != 0 && v.anon_vma() == 0,
                VmaKind::Hugetlb => v.flags.contains(VmFlags::VM_HUGETLB) && v.file != 0,
                VmaKind::PfnMap => v.flags.contains(VmFlags::VM_PFNMAP),
            };
            if !ok || (shared && !mayshare) {
                return Err(format!(
                    "{}: kind, flags, file {} and anon_vma {} disagree",
                    at(),
                    v.file,
                    v.anon_vma()
                ));
            }
        }
        if let Some(idx) = self.vmas.index() {
            idx.validate(self.vmas.raw())?;
        }
        self.vmas
            .gaps()
            .validate(self.vmas.values().map(|v| (v.start, v.end, v.start_gap())))?;
        // do_mmap refuses only `map_count > max_map_count`, so a process can hold one more.
        if self.map_count() > max_map_count.saturating_add(1) {
            return Err(format!(
                "map_count {} > max_map_count {max_map_count} + 1",
                self.map_count()
            ));
        }
        Ok(())
    }
}
