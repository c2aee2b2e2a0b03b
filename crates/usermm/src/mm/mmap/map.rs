//! `mmap` (`do_mmap`, `mmap_region`), `MAP_POPULATE`/`mm_populate`, and the driver-style
//! `remap_pfn_range`.
//!
//! `remap_pfn_range` ([`Mm::map_pfn_range`]) maps a driver's block handed over as an
//! [`OwnedPages`]: the VMAs that map it hold it, munmap's zap leaves it alone, and it is freed
//! with the last of them (`vm_ops->close`), so no handle can free frames a PTE still maps.

use super::{floor_ceiling, MapFile, MapFileAt};
use crate::addr::{align_up, PAGE_SIZE, PMD_SIZE, TASK_SIZE};
use crate::cpu::CpuId;
use crate::error::Errno;
use crate::mm::mman::{
    LEGACY_MAP_MASK, MAP_ANONYMOUS, MAP_FIXED, MAP_FIXED_NOREPLACE, MAP_GROWSDOWN, MAP_HUGETLB,
    MAP_LOCKED, MAP_NONBLOCK, MAP_NORESERVE, MAP_POPULATE, MAP_PRIVATE, MAP_SHARED,
    MAP_SHARED_VALIDATE, MAP_TYPE, PROT_EXEC, PROT_READ, PROT_WRITE,
};
use crate::mm::vma::{PfnMapPages, VmFlags, Vma, VmaKind, VmaTree};
use crate::mm::{fault, Mm};
use crate::page_alloc::OwnedPages;
use crate::pgtable::{leaf_bits, Level, TableCursor, _PAGE_SPECIAL};
use crate::stats::VmItem;

impl Mm {
    /// `mmap(addr, len, prot, flags, fd, pgoff << PAGE_SHIFT)`: `src` is the file and the
    /// offset in it in pages (a [`MapFile`] alone maps it from its start; the offset places and
    /// names a `/dev/zero` mapping; anonymous memory ignores it).
    #[doc(alias = "do_mmap")]
    #[doc(alias = "mmap_pgoff")]
    pub fn mmap(
        &self,
        cpu: CpuId,
        addr: u64,
        len: u64,
        prot: u32,
        flags: u32,
        src: impl Into<MapFileAt>,
    ) -> Result<u64, Errno> {
        let MapFileAt { file, pgoff } = src.into();
        crate::sync::charge(crate::sync::Cost::Syscall, 1);
        if flags & MAP_ANONYMOUS == 0 && file == MapFile::None {
            return Err(Errno::EBADF);
        }
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        if self.is_exited() {
            return Err(Errno::ENOMEM);
        }
        let hugetlb = flags & MAP_HUGETLB != 0 && flags & MAP_ANONYMOUS != 0;
        let align = if hugetlb { PMD_SIZE } else { PAGE_SIZE };
        let len = align_up(len, align).ok_or(Errno::ENOMEM)?;
        // offset overflow?
        if pgoff.checked_add(len >> 12).is_none() {
            return Err(Errno::EOVERFLOW);
        }
        let mut flags = flags;
        if flags & MAP_FIXED_NOREPLACE != 0 {
            flags |= MAP_FIXED;
        }
        let fixed = flags & MAP_FIXED != 0;
        let anon = flags & MAP_ANONYMOUS != 0;
        let map_type = flags & MAP_TYPE;
        // The map type is only checked after the placement (do_mmap's switch); the placement
        // looks at the MAP_SHARED bit alone (__get_unmapped_area, get_unmapped_area_zero).
        let shared_type = match (anon, map_type) {
            (_, MAP_PRIVATE) => Some(false),
            (true, MAP_SHARED) => Some(true),
            (false, MAP_SHARED | MAP_SHARED_VALIDATE) => Some(true),
            _ => None,
        };
        let shared = flags & MAP_SHARED != 0;
        let mut tree = self.mmap_lock.write();
        if tree.map_count() > self.machine().max_map_count() {
            return Err(Errno::ENOMEM);
        }
        // __get_unmapped_area
        if len > TASK_SIZE {
            return Err(Errno::ENOMEM);
        }
        let start = if fixed {
            if addr > TASK_SIZE - len {
                return Err(Errno::ENOMEM);
            }
            if !addr.is_multiple_of(align) {
                return Err(Errno::EINVAL);
            }
            addr
        } else {
            if hugetlb {
                tree.hugetlb_get_unmapped_area(len, addr)?
            } else if !anon && !shared {
                // get_unmapped_area_zero: a private /dev/zero mapping is placed by its offset.
                tree.thp_get_unmapped_area(len, addr, pgoff << 12)?
            } else {
                let thp_align = anon && !shared && len % PMD_SIZE == 0;
                tree.get_unmapped_area(len, addr, thp_align)?
            }
        };
        let end = start + len;
        if flags & MAP_FIXED_NOREPLACE != 0 && tree.intersecting(start, end).next().is_some() {
            return Err(Errno::EEXIST);
        }
        if !anon {
            // file_mmap_ok for a character device (size limit ULONG_MAX).
            if pgoff > (u64::MAX - len) >> 12 {
                return Err(Errno::EOVERFLOW);
            }
            // MAP_SHARED_VALIDATE refuses what /dev/zero does not know (it has no MAP_SYNC).
            if map_type == MAP_SHARED_VALIDATE && flags & !LEGACY_MAP_MASK != 0 {
                return Err(Errno::EOPNOTSUPP);
            }
        }
        let shared = shared_type.ok_or(Errno::EINVAL)?;
        // Neither file mappings nor shared anonymous ones may grow down.
        if flags & MAP_GROWSDOWN != 0 && (shared || !anon) {
            return Err(Errno::EINVAL);
        }
        let mut vmf = mmap_vm_flags(prot, flags, shared);
        let kind = if hugetlb {
            vmf = vmf.union(VmFlags::VM_HUGETLB).union(VmFlags::VM_DONTEXPAND);
            if self.machine().phys().hugetlb_free() < len / PMD_SIZE {
                return Err(Errno::ENOMEM);
            }
            VmaKind::Hugetlb
        } else if shared {
            VmaKind::SharedAnon
        } else if anon {
            VmaKind::Anon
        } else {
            VmaKind::DevZero
        };
        // mmap_region: clear what is there (MAP_FIXED), then insert or merge.
        let old = if tree.intersecting(start, end).next().is_some() {
            let vmas = tree.detach_range(start, end, self.machine().max_map_count())?;
            Some(vmas)
        } else {
            None
        };
        if let Some(vmas) = old {
            let (floor, ceiling) = floor_ceiling(&tree, start, end);
            self.unmap_region(cpu, &vmas, floor, ceiling);
        }
        let pgoff = match kind {
            VmaKind::Anon => start >> 12,
            // /dev/zero keeps the file offset, also when shared (shmem_zero_setup).
            VmaKind::DevZero | VmaKind::SharedAnon if !anon => pgoff,
            _ => 0,
        };
        let mut vma = Vma::new(start, end, vmf, kind, pgoff);
        if shared {
            vma.shmem = Some(crate::mm::shmem::Shmem::new(self.machine().phys_arc()));
            vma.shmem_size = len >> 12;
        }
        tree.insert_or_merge(vma);
        drop(tree);
        let populate = (flags & MAP_POPULATE != 0 && flags & MAP_NONBLOCK == 0)
            || vmf.contains(VmFlags::VM_LOCKED);
        if populate {
            let write = vmf.contains(VmFlags::VM_WRITE) && !shared;
            self.populate(cpu, start, end, write);
        }
        Ok(start)
    }

    /// `__mm_populate`: fault in `[start, end)` under the read lock (errors are ignored, as
    /// the kernel ignores them for `MAP_POPULATE`). Write faults for private writable memory.
    #[doc(alias = "__mm_populate")]
    pub fn populate(&self, cpu: CpuId, start: u64, end: u64, write: bool) {
        let tree = self.mmap_lock.read();
        let _ = self.populate_locked(&tree, cpu, start, end, write);
    }

    /// [`Mm::populate`] with the mmap lock held (read or write): fault in `[start, end)` VMA by
    /// VMA, going on past holes. PROT_NONE VMAs are skipped. A failed fault ends it, after
    /// populating what came before, with `vm_fault_to_errno`'s errno: `ENOMEM` for
    /// `VM_FAULT_OOM`, `EFAULT` for `VM_FAULT_SIGBUS`.
    pub(super) fn populate_locked(
        &self,
        tree: &VmaTree,
        cpu: CpuId,
        start: u64,
        end: u64,
        write: bool,
    ) -> Result<(), Errno> {
        let phys = self.machine().phys();
        let mut addr = start;
        while addr < end {
            let Some(vma) = tree.find_vma(addr) else {
                break;
            };
            if vma.start >= end {
                break;
            }
            addr = addr.max(vma.start);
            let stop = vma.end.min(end);
            let w = write && vma.flags.contains(VmFlags::VM_WRITE);
            while addr < stop {
                let ok = self.with_tlb_gate(cpu, || {
                    fault::translate(phys, self.pgd(), addr, w).is_some()
                });
                if !ok && vma.flags.intersects(VmFlags::VM_ACCESS_FLAGS) {
                    self.machine().vmstat().inc(cpu, VmItem::Pgfault);
                    fault::handle_vma_fault(self, Some(tree), vma, cpu, addr, w)
                        .map_err(|e| e.errno())?;
                }
                // A huge mapping covers the rest of its 2 MiB.
                let huge = matches!(
                    crate::pgtable::walk(phys, self.pgd(), addr),
                    crate::pgtable::Walk::HugePmd { .. }
                );
                addr = if huge {
                    (addr & !(PMD_SIZE - 1)) + PMD_SIZE
                } else {
                    addr + PAGE_SIZE
                };
            }
        }
        Ok(())
    }

    /// `remap_pfn_range` into a new mapping: a device-style `VM_PFNMAP` mapping of a driver's
    /// frames, `pages`, which the mapping takes over. Returns the address.
    ///
    /// No page references or mapcounts are taken (the PTEs are `_PAGE_SPECIAL`): the block is
    /// the driver's, and the VMA holds it as the driver's `vm_ops` would. munmap's zap leaves
    /// the frames alone; they are freed when the last VMA mapping them is gone (every piece of
    /// a split, every copy fork made: the driver's `vm_ops->close`), so dropping a handle can
    /// never free frames a page table still maps. `EINVAL` (and the block freed) when `pages`
    /// belongs to another machine.
    #[doc(alias = "remap_pfn_range")]
    pub fn map_pfn_range(
        &self,
        cpu: CpuId,
        pages: OwnedPages<'_>,
        prot: u32,
    ) -> Result<u64, Errno> {
        if !pages.is_of(self.machine().phys()) {
            return Err(Errno::EINVAL);
        }
        let (pfn, nr) = (pages.pfn(), pages.nr_pages());
        let len = nr * PAGE_SIZE;
        let mut tree = self.mmap_lock.write();
        let start = tree.get_unmapped_area(len, 0, false)?;
        let flags = VmFlags::from_prot(prot)
            .union(VmFlags::VM_MAYREAD)
            .union(VmFlags::VM_MAYWRITE)
            .union(VmFlags::VM_SHARED)
            .union(VmFlags::VM_MAYSHARE)
            .union(VmFlags::VM_PFNMAP)
            .union(VmFlags::VM_IO)
            .union(VmFlags::VM_DONTEXPAND);
        let phys = self.machine().phys();
        // Every table first: a failure then leaves no PTE mapping the block it frees.
        let mut tables = Vec::with_capacity(nr as usize);
        for i in 0..nr {
            let addr = start + i * PAGE_SIZE;
            let pmd = crate::pgtable::pmd_alloc(self, cpu, addr).map_err(|_| Errno::ENOMEM)?;
            tables.push(crate::pgtable::pte_alloc(self, cpu, pmd).map_err(|_| Errno::ENOMEM)?);
        }
        let mut vma = Vma::new(start, start + len, flags, VmaKind::PfnMap, pfn.0);
        vma.pfn_base = pfn.0;
        vma.pfnmap = Some(PfnMapPages::new(self.machine().phys_arc(), pages));
        let bits = leaf_bits(
            prot & PROT_READ != 0,
            prot & PROT_WRITE != 0,
            prot & PROT_EXEC != 0,
        ) | _PAGE_SPECIAL;
        for (i, &table) in (0..nr).zip(&tables) {
            let addr = start + i * PAGE_SIZE;
            TableCursor::lock(phys, table, Level::Pte)
                .set(addr, crate::pgtable::Entry::new(pfn.add(i), bits));
        }
        tree.insert_or_merge(vma);
        Ok(start)
    }
}

/// The VMA flags of a new mapping (`calc_vm_prot_bits` and `calc_vm_flag_bits` with
/// `do_mmap`'s own): from `prot`, the `MAP_` flags, and whether it is shared.
#[doc(alias = "calc_vm_flag_bits")]
fn mmap_vm_flags(prot: u32, flags: u32, shared: bool) -> VmFlags {
    let mut vmf = VmFlags::from_prot(prot)
        .union(VmFlags::VM_MAYREAD)
        .union(VmFlags::VM_MAYWRITE)
        .union(VmFlags::VM_MAYEXEC);
    if shared {
        vmf = vmf.union(VmFlags::VM_SHARED).union(VmFlags::VM_MAYSHARE);
    }
    if flags & MAP_LOCKED != 0 {
        vmf = vmf.union(VmFlags::VM_LOCKED);
    }
    if flags & MAP_NORESERVE != 0 {
        vmf = vmf.union(VmFlags::VM_NORESERVE);
    } else if !shared && prot & PROT_WRITE != 0 {
        vmf = vmf.union(VmFlags::VM_ACCOUNT);
    }
    if flags & MAP_GROWSDOWN != 0 {
        vmf = vmf.union(VmFlags::VM_GROWSDOWN);
    }
    vmf
}
