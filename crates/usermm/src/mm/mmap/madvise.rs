//! `madvise` (`madvise_walk_vmas`, `madvise_dontneed_free`, `madvise_update_vma`,
//! `madvise_populate`).

use std::sync::{Arc, Weak};

use crate::addr::{align_up, PAGE_SIZE, PMD_SIZE};
use crate::cpu::CpuId;
use crate::error::Errno;
use crate::mm::memory::zap_range;
use crate::mm::mman::{
    MADV_COLD, MADV_DODUMP, MADV_DOFORK, MADV_DONTDUMP, MADV_DONTFORK, MADV_DONTNEED, MADV_FREE,
    MADV_HUGEPAGE, MADV_KEEPONFORK, MADV_MERGEABLE, MADV_NOHUGEPAGE, MADV_NORMAL, MADV_PAGEOUT,
    MADV_POPULATE_READ, MADV_POPULATE_WRITE, MADV_RANDOM, MADV_REMOVE, MADV_SEQUENTIAL,
    MADV_UNMERGEABLE, MADV_WILLNEED, MADV_WIPEONFORK,
};
use crate::mm::mmu_gather::{FullMm, MmuGather};
use crate::mm::shmem::Shmem;
use crate::mm::vma::{VmFlags, Vma, VmaKind, VmaTree};
use crate::mm::Mm;

impl Mm {
    /// `madvise(addr, len, advice)`.
    #[doc(alias = "do_madvise")]
    pub fn madvise(&self, cpu: CpuId, addr: u64, len: u64, advice: i32) -> Result<(), Errno> {
        crate::sync::charge(crate::sync::Cost::Syscall, 1);
        let (set, clear) = madvise_flags(advice)?;
        if !addr.is_multiple_of(PAGE_SIZE) {
            return Err(Errno::EINVAL);
        }
        let alen = align_up(len, PAGE_SIZE).ok_or(Errno::EINVAL)?;
        if len != 0 && alen == 0 {
            return Err(Errno::EINVAL);
        }
        let end = addr.checked_add(alen).ok_or(Errno::EINVAL)?;
        if end == addr {
            return Ok(());
        }
        if matches!(advice, MADV_POPULATE_READ | MADV_POPULATE_WRITE) {
            return self.madvise_populate(cpu, addr, end, advice == MADV_POPULATE_WRITE);
        }
        // 6.16: MADV_DONTNEED within one VMA needs only that VMA's read lock.
        if advice == MADV_DONTNEED && self.dontneed_vma_locked(cpu, addr, end).is_some() {
            return Ok(());
        }
        let flag_change = set.0 != 0 || clear.0 != 0;
        let max = self.machine().max_map_count();
        // Flag changes need the write lock; the rest run under the read lock.
        let mut wtree = None;
        let mut rtree = None;
        if flag_change {
            wtree = Some(self.mmap_lock.write());
        } else {
            rtree = Some(self.mmap_lock.read());
        }
        // Holes punched in shmem objects (MADV_REMOVE): other mappings may map them too.
        let mut punched = Vec::new();
        let r = (|| {
            let mut unmapped = false;
            let mut start = addr;
            loop {
                let tree: &VmaTree = match (&wtree, &rtree) {
                    (Some(w), _) => w,
                    (_, Some(r)) => r,
                    _ => unreachable!(),
                };
                let Some(vma) = tree.find_vma(start) else {
                    return Err(Errno::ENOMEM);
                };
                if start < vma.start {
                    unmapped = true;
                    start = vma.start;
                    if start >= end {
                        break;
                    }
                }
                let tmp = vma.end.min(end);
                let (vflags, vkind) = (vma.flags, vma.kind);
                match advice {
                    MADV_DONTNEED | MADV_FREE | MADV_REMOVE => {
                        self.madvise_dontneed_free(cpu, advice, vma, start, tmp, &mut punched)?
                    }
                    // Only memory without a file (not even /dev/zero) can be wiped on fork.
                    MADV_WIPEONFORK if !matches!(vkind, VmaKind::Anon) => {
                        return Err(Errno::EINVAL)
                    }
                    MADV_HUGEPAGE | MADV_NOHUGEPAGE
                        if matches!(vkind, VmaKind::Hugetlb | VmaKind::PfnMap) => {}
                    // can_madv_lru_vma.
                    MADV_COLD | MADV_PAGEOUT
                        if vflags.intersects(VmFlags(
                            VmFlags::VM_LOCKED.0 | VmFlags::VM_PFNMAP.0 | VmFlags::VM_HUGETLB.0,
                        )) =>
                    {
                        return Err(Errno::EINVAL)
                    }
                    MADV_COLD | MADV_PAGEOUT => self.split_partial_thps(cpu, start, tmp),
                    // vma_ksm_compatible: the advice is ignored elsewhere.
                    MADV_MERGEABLE
                        if vflags.intersects(VmFlags(
                            VmFlags::VM_SHARED.0
                                | VmFlags::VM_MAYSHARE.0
                                | VmFlags::VM_PFNMAP.0
                                | VmFlags::VM_IO.0
                                | VmFlags::VM_DONTEXPAND.0
                                | VmFlags::VM_HUGETLB.0
                                | VmFlags::VM_MIXEDMAP.0,
                        )) => {}
                    _ if flag_change => {
                        let newflags = vflags.minus(clear).union(set);
                        if newflags != vflags {
                            let w = wtree.as_mut().expect("write lock for flag changes");
                            self.vma_modify_flags(cpu, w, start, tmp, newflags, max)?;
                        }
                    }
                    _ => {}
                }
                start = tmp;
                if start >= end {
                    break;
                }
            }
            if unmapped {
                Err(Errno::ENOMEM)
            } else {
                Ok(())
            }
        })();
        drop(wtree);
        drop(rtree);
        if !punched.is_empty() {
            self.unmap_punched_in_family(cpu, &punched);
        }
        r
    }

    /// `MADV_DONTNEED`, `MADV_FREE` and `MADV_REMOVE` over `[start, end)` of one VMA
    /// (`madvise_dontneed_free`, `madvise_remove`): a hole punched in a shmem object is
    /// recorded in `punched`, to be unmapped from the object's other mappings once the mmap
    /// lock is dropped.
    #[doc(alias = "madvise_remove")]
    fn madvise_dontneed_free(
        &self,
        cpu: CpuId,
        advice: i32,
        vma: &Vma,
        start: u64,
        end: u64,
        punched: &mut Vec<(Arc<Shmem>, u64, u64)>,
    ) -> Result<(), Errno> {
        let (vflags, vkind) = (vma.flags, vma.kind);
        if vflags.intersects(VmFlags(
            VmFlags::VM_LOCKED.0 | VmFlags::VM_PFNMAP.0 | VmFlags::VM_HUGETLB.0,
        )) {
            return Err(Errno::EINVAL);
        }
        match advice {
            MADV_DONTNEED => self.zap_page_range(cpu, start, end),
            MADV_FREE if !matches!(vkind, VmaKind::Anon | VmaKind::DevZero) => {
                return Err(Errno::EINVAL);
            }
            MADV_FREE => self.split_partial_thps(cpu, start, end),
            // madvise_remove: no file → EINVAL; a file not mapped shared-writable
            // (private /dev/zero) → EACCES.
            MADV_REMOVE if matches!(vkind, VmaKind::DevZero) => {
                return Err(Errno::EACCES);
            }
            MADV_REMOVE if !matches!(vkind, VmaKind::SharedAnon) => {
                return Err(Errno::EINVAL);
            }
            MADV_REMOVE => {
                self.zap_page_range(cpu, start, end);
                if let Some(obj) = &vma.shmem {
                    let (index, nr) =
                        (vma.pgoff + ((start - vma.start) >> 12), (end - start) >> 12);
                    obj.punch_hole(index, nr);
                    punched.push((Arc::clone(obj), index, nr));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// `unmap_mapping_range` after `shmem_fallocate(PUNCH_HOLE)`: zap the punched indices of
    /// each object wherever they are mapped, so that nothing goes on using a page the object
    /// dropped — in this mm's other mappings of the object too (a growing `mremap` that moves
    /// part of a mapping maps some indices twice), and in the other mms of the fork family.
    /// The engine has no `i_mmap` tree of an object's mappings; only fork shares an object
    /// between mms, so the family is where they are. Called with no mmap lock held; takes
    /// each mm's read lock in turn.
    #[doc(alias = "unmap_mapping_range")]
    fn unmap_punched_in_family(&self, cpu: CpuId, punched: &[(Arc<Shmem>, u64, u64)]) {
        let family: Vec<Arc<Mm>> = self
            .family
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for mm in family {
            let tree = mm.mmap_lock.read();
            if mm.is_exited() {
                continue;
            }
            let mut ranges = Vec::new();
            for v in tree.intersecting(0, u64::MAX) {
                let Some(obj) = &v.shmem else { continue };
                let pages = (v.end - v.start) >> 12;
                for (o, index, nr) in punched {
                    let lo = (*index).max(v.pgoff);
                    let hi = (index + nr).min(v.pgoff + pages);
                    if Arc::ptr_eq(o, obj) && lo < hi {
                        let at = |i: u64| v.start + ((i - v.pgoff) << 12);
                        ranges.push((at(lo), at(hi)));
                    }
                }
            }
            for (s, e) in ranges {
                mm.zap_page_range(cpu, s, e);
            }
        }
    }

    /// `madvise_populate`: fault `[start, end)` in VMA by VMA (`faultin_page_range` with
    /// `FOLL_MADV_POPULATE`). A hole is `ENOMEM`; a VMA that does not allow the access
    /// (no `VM_WRITE` for a write, no `VM_READ` for a read, or `VM_IO`/`VM_PFNMAP`) is `EINVAL`;
    /// what came before stays populated.
    #[doc(alias = "faultin_page_range")]
    pub(super) fn madvise_populate(
        &self,
        cpu: CpuId,
        start: u64,
        end: u64,
        write: bool,
    ) -> Result<(), Errno> {
        let mut addr = start;
        while addr < end {
            let tree = self.mmap_lock.read();
            let Some(vma) = tree.vma_lookup(addr) else {
                return Err(Errno::ENOMEM);
            };
            let need = if write {
                VmFlags::VM_WRITE
            } else {
                VmFlags::VM_READ
            };
            if vma
                .flags
                .intersects(VmFlags(VmFlags::VM_IO.0 | VmFlags::VM_PFNMAP.0))
                || !vma.flags.contains(need)
            {
                return Err(Errno::EINVAL);
            }
            let stop = vma.end.min(end);
            // VM_FAULT_SIGBUS while populating: EFAULT; VM_FAULT_OOM: ENOMEM.
            self.populate_locked(&tree, cpu, addr, stop, write)?;
            addr = stop;
        }
        Ok(())
    }

    /// The THP handling of `MADV_FREE`/`MADV_COLD`/`MADV_PAGEOUT` over `[start, end)` (inside
    /// one VMA): a PMD-mapped THP the range covers only in part is split, its zero-filled
    /// subpages going to the shared zero page (`split_folio`; see
    /// [`crate::mm::huge_memory::split_thp_remap_zero`]). Whole THPs stay as they are (lazily freed,
    /// deactivated: nothing an observer sees without memory pressure).
    pub(super) fn split_partial_thps(&self, cpu: CpuId, start: u64, end: u64) {
        let phys = self.machine().phys();
        for haddr in [start & !(PMD_SIZE - 1), (end - 1) & !(PMD_SIZE - 1)] {
            let whole = haddr >= start && haddr + PMD_SIZE <= end;
            if whole {
                continue;
            }
            if let crate::pgtable::Walk::HugePmd { pmd, .. } =
                crate::pgtable::walk(phys, self.pgd(), haddr)
            {
                crate::mm::huge_memory::split_thp_remap_zero(self, cpu, pmd, haddr);
            }
        }
    }

    /// `zap_page_range_single`: drop the mappings of `[start, end)`, keep the VMAs and tables.
    pub(crate) fn zap_page_range(&self, cpu: CpuId, start: u64, end: u64) {
        let mut tlb = MmuGather::new(self, cpu, FullMm::No);
        self.update_hiwater_rss();
        zap_range(&mut tlb, self, start, end);
        let _ = tlb.finish();
    }
}

/// The VMA flags `advice` sets and clears (`madvise_update_vma`'s new flags; none for an
/// advice that acts on the pages), or `EINVAL` for an advice the kernel does not know
/// (`madvise_behavior_valid`).
#[doc(alias = "madvise_behavior_valid")]
fn madvise_flags(advice: i32) -> Result<(VmFlags, VmFlags), Errno> {
    Ok(match advice {
        MADV_NORMAL => (
            VmFlags(0),
            VmFlags(VmFlags::VM_SEQ_READ.0 | VmFlags::VM_RAND_READ.0),
        ),
        MADV_RANDOM => (VmFlags::VM_RAND_READ, VmFlags::VM_SEQ_READ),
        MADV_SEQUENTIAL => (VmFlags::VM_SEQ_READ, VmFlags::VM_RAND_READ),
        MADV_DONTFORK => (VmFlags::VM_DONTCOPY, VmFlags(0)),
        MADV_DOFORK => (VmFlags(0), VmFlags::VM_DONTCOPY),
        MADV_DONTDUMP => (VmFlags::VM_DONTDUMP, VmFlags(0)),
        MADV_DODUMP => (VmFlags(0), VmFlags::VM_DONTDUMP),
        MADV_WIPEONFORK => (VmFlags::VM_WIPEONFORK, VmFlags(0)),
        MADV_KEEPONFORK => (VmFlags(0), VmFlags::VM_WIPEONFORK),
        MADV_HUGEPAGE => (VmFlags::VM_HUGEPAGE, VmFlags::VM_NOHUGEPAGE),
        MADV_NOHUGEPAGE => (VmFlags::VM_NOHUGEPAGE, VmFlags::VM_HUGEPAGE),
        // ksm_madvise (CONFIG_KSM=y): only the flag; there is no KSM daemon.
        MADV_MERGEABLE => (VmFlags::VM_MERGEABLE, VmFlags(0)),
        MADV_UNMERGEABLE => (VmFlags(0), VmFlags::VM_MERGEABLE),
        MADV_WILLNEED | MADV_DONTNEED | MADV_FREE | MADV_COLD | MADV_PAGEOUT
        | MADV_POPULATE_READ | MADV_POPULATE_WRITE | MADV_REMOVE => (VmFlags(0), VmFlags(0)),
        _ => return Err(Errno::EINVAL),
    })
}
