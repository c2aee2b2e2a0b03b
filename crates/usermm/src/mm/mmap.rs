//! The address-space system calls: `mmap`, `munmap`, `mprotect`, `madvise`, `mlock`,
//! `munlock`, and the driver-style `remap_pfn_range`.
//!
//! Mirrors `mm/mmap.c` (`do_mmap`, `mmap_region`, `__vm_munmap`, `do_vmi_align_munmap`),
//! `mm/vma.c` (`vms_gather_munmap_vmas`, `vms_complete_munmap_vmas`, `unmap_region`),
//! `mm/mprotect.c` (`do_mprotect_pkey`, `mprotect_fixup`), `mm/madvise.c`
//! (`madvise_walk_vmas`, `madvise_dontneed_free`, `madvise_update_vma`) and `mm/mlock.c`
//! (`apply_vma_lock_flags`, `mlock_fixup`). Every entry point checks its arguments in the
//! kernel's order and returns the kernel's errno (`peers.md` B.9), including the partial
//! effects of mprotect/madvise/mlock over holes.
//!
//! # munmap in phases (seed 003)
//! ```text
//!  write lock → find and split the VMAs at both ends (map_count: ENOMEM, nothing changed)
//!             → detach them from the tree              ← the point of no return
//!             → downgrade to read   (munmap.downgrade=on, no VM_LOCKED/HUGETLB/PFNMAP)
//!             → zap through the mmu_gather → free page tables between floor and ceiling
//!             → free the detached VMAs → unlock
//! ```
//! Because the VMAs are gone from the tree before the lock is downgraded, a fault racing into
//! the range under the read lock finds no VMA and gets `SEGV_MAPERR` — never the zero page
//! (which a merely-zapped range would give), never a fresh or a stale page.
//!
//! # Differences from Linux
//! `mmap_min_addr` is not enforced for `MAP_FIXED` (the process is taken to have
//! `CAP_SYS_RAWIO`, as root on the host does). No file mappings but `/dev/zero`. No
//! `RLIMIT_AS`/`RLIMIT_MEMLOCK`, no overcommit accounting. `MADV_FREE` keeps the pages (no
//! reclaim runs, so the lazily freed data stays readable, as on an unpressured host).

use std::time::Instant;

use super::memory::{change_protection, free_pgtables, zap_range};
use super::mmu_gather::{FullMm, MmuGather};
use super::vma::{VmFlags, Vma, VmaKind, VmaTree};
use super::{fault, Mm, UnmapStats};
use crate::addr::{align_up, Pfn, HPAGE_PMD_NR, PAGE_SIZE, PMD_SIZE, TASK_SIZE};
use crate::cpu::CpuId;
use crate::error::Errno;
use crate::pgtable::{leaf_bits, Slot, _PAGE_SPECIAL};
use crate::stats::VmItem;

pub const PROT_NONE: u32 = 0;
pub const PROT_READ: u32 = 1;
pub const PROT_WRITE: u32 = 2;
pub const PROT_EXEC: u32 = 4;
pub const PROT_SEM: u32 = 8;
pub const PROT_GROWSDOWN: u32 = 0x0100_0000;
pub const PROT_GROWSUP: u32 = 0x0200_0000;

pub const MAP_SHARED: u32 = 0x01;
pub const MAP_PRIVATE: u32 = 0x02;
pub const MAP_SHARED_VALIDATE: u32 = 0x03;
pub const MAP_TYPE: u32 = 0x0f;
pub const MAP_FIXED: u32 = 0x10;
pub const MAP_ANONYMOUS: u32 = 0x20;
pub const MAP_GROWSDOWN: u32 = 0x0100;
pub const MAP_LOCKED: u32 = 0x2000;
pub const MAP_NORESERVE: u32 = 0x4000;
pub const MAP_POPULATE: u32 = 0x8000;
pub const MAP_NONBLOCK: u32 = 0x1_0000;
pub const MAP_HUGETLB: u32 = 0x4_0000;
pub const MAP_FIXED_NOREPLACE: u32 = 0x10_0000;
/// `LEGACY_MAP_MASK`: the flags `MAP_SHARED_VALIDATE` accepts on a file without `MAP_SYNC`
/// (`MAP_SHARED`, `MAP_PRIVATE`, `MAP_FIXED`, `MAP_ANONYMOUS`, `MAP_DENYWRITE`,
/// `MAP_EXECUTABLE`, `MAP_UNINITIALIZED`, `MAP_GROWSDOWN`, `MAP_LOCKED`, `MAP_NORESERVE`,
/// `MAP_POPULATE`, `MAP_NONBLOCK`, `MAP_STACK`, `MAP_HUGETLB`). Not `MAP_FIXED_NOREPLACE`.
pub const LEGACY_MAP_MASK: u32 = 0x01
    | 0x02
    | 0x10
    | 0x20
    | 0x800
    | 0x1000
    | 0x400_0000
    | 0x100
    | 0x2000
    | 0x4000
    | 0x8000
    | 0x1_0000
    | 0x2_0000
    | 0x4_0000;

pub const MADV_NORMAL: i32 = 0;
pub const MADV_RANDOM: i32 = 1;
pub const MADV_SEQUENTIAL: i32 = 2;
pub const MADV_WILLNEED: i32 = 3;
pub const MADV_DONTNEED: i32 = 4;
pub const MADV_FREE: i32 = 8;
pub const MADV_REMOVE: i32 = 9;
pub const MADV_DONTFORK: i32 = 10;
pub const MADV_DOFORK: i32 = 11;
pub const MADV_MERGEABLE: i32 = 12;
pub const MADV_UNMERGEABLE: i32 = 13;
pub const MADV_HUGEPAGE: i32 = 14;
pub const MADV_NOHUGEPAGE: i32 = 15;
pub const MADV_DONTDUMP: i32 = 16;
pub const MADV_DODUMP: i32 = 17;
pub const MADV_WIPEONFORK: i32 = 18;
pub const MADV_KEEPONFORK: i32 = 19;
pub const MADV_COLD: i32 = 20;
pub const MADV_PAGEOUT: i32 = 21;
pub const MADV_POPULATE_READ: i32 = 22;
pub const MADV_POPULATE_WRITE: i32 = 23;

/// Top of the mmap area: where top-down placement starts (`mmap_base` with a 128 MiB stack gap
/// below a fixed, un-randomised stack top).
pub const MMAP_BASE: u64 = 0x7f00_0000_0000;

/// What backs a non-anonymous mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapFile {
    /// No file: valid only with `MAP_ANONYMOUS` (otherwise `EBADF`, a bad descriptor).
    None,
    /// `/dev/zero`, opened read-write (usemem's default backing).
    DevZero,
}

/// The resolved munmap policy (seed 003).
#[derive(Debug, Clone, Copy)]
pub struct MunmapPolicy {
    pub downgrade: bool,
    pub min_bytes: u64,
    pub stack_veto: bool,
}

impl Mm {
    /// `mmap(addr, len, prot, flags, fd, 0)`.
    pub fn mmap(
        &self,
        cpu: CpuId,
        addr: u64,
        len: u64,
        prot: u32,
        flags: u32,
        file: MapFile,
    ) -> Result<u64, Errno> {
        self.mmap_pgoff(cpu, addr, len, prot, flags, file, 0)
    }

    /// `mmap(addr, len, prot, flags, fd, pgoff << PAGE_SHIFT)`: `pgoff` is the file offset in
    /// pages (it places and names a `/dev/zero` mapping; anonymous memory ignores it).
    #[doc(alias = "do_mmap")]
    #[allow(clippy::too_many_arguments)]
    pub fn mmap_pgoff(
        &self,
        cpu: CpuId,
        addr: u64,
        len: u64,
        prot: u32,
        flags: u32,
        file: MapFile,
        pgoff: u64,
    ) -> Result<u64, Errno> {
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
            if addr % align != 0 {
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
            vma.shmem = Some(super::shmem::Shmem::new(self.machine().phys_arc()));
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
    /// VMA, going on past holes. PROT_NONE VMAs are skipped. `Err(EFAULT)` when a fault fails
    /// (a SIGBUS, or no memory), after populating what came before.
    fn populate_locked(
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
                    if fault::handle_vma_fault(self, tree, vma, cpu, addr, w).is_err() {
                        return Err(Errno::EFAULT);
                    }
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

    /// `munmap(addr, len)`.
    pub fn munmap(&self, cpu: CpuId, addr: u64, len: u64) -> Result<(), Errno> {
        self.munmap_stats(cpu, addr, len).map(|_| ())
    }

    /// `munmap`, returning how long the lock was held which way (seed 003's figures).
    #[doc(alias = "__vm_munmap")]
    #[doc(alias = "do_vmi_align_munmap")]
    pub fn munmap_stats(&self, cpu: CpuId, addr: u64, len: u64) -> Result<UnmapStats, Errno> {
        if addr % PAGE_SIZE != 0 || addr > TASK_SIZE || len > TASK_SIZE - addr {
            return Err(Errno::EINVAL);
        }
        let len = align_up(len, PAGE_SIZE).ok_or(Errno::EINVAL)?;
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let (start, end) = (addr, addr + len);
        let t0 = Instant::now();
        let mut tree = self.mmap_lock.write();
        // Hugetlb VMAs split only at 2 MiB boundaries (hugetlb_vm_op_split).
        tree.may_split_range(start, end)?;
        let vmas = tree.detach_range(start, end, self.machine().max_map_count())?;
        if vmas.is_empty() {
            let exclusive_ns = tree.unlock();
            return Ok(UnmapStats {
                total_ns: t0.elapsed().as_nanos() as u64,
                exclusive_ns,
                ..Default::default()
            });
        }
        // munlock_vma_pages_all, under the write lock before the zap (v4.20): the pages leave
        // the unevictable list and count as munlocked.
        for v in vmas.iter().filter(|v| v.flags.contains(VmFlags::VM_LOCKED)) {
            self.mlock_pages(cpu, v.start, v.end, false);
        }
        let (floor, ceiling) = floor_ceiling(&tree, start, end);
        let policy = self.machine().munmap_policy();
        let special = vmas.iter().any(|v| v.is_special());
        let size: u64 = vmas.iter().map(|v| v.end - v.start).sum();
        // The veto looks at the next VMA wherever it is: a stack above a gap can still grow
        // down into the range under the read lock (detach_vmas_to_be_unmapped, 2020).
        let stack_next = tree
            .find_vma(end)
            .is_some_and(|n| n.flags.contains(VmFlags::VM_GROWSDOWN));
        let downgrade = policy.downgrade
            && !special
            && size >= policy.min_bytes
            && !(policy.stack_veto && stack_next);
        let mut st = UnmapStats {
            downgraded: downgrade,
            ..Default::default()
        };
        if downgrade {
            let read = tree.downgrade();
            // The lock's own figure: the hold, without the wait for the write lock.
            st.exclusive_ns = read.exclusive_hold_ns().unwrap_or(0);
            let t1 = Instant::now();
            let (z, f) = self.unmap_region(cpu, &vmas, floor, ceiling);
            st.pages_zapped = z;
            st.tlb_flushes = f;
            drop(vmas);
            st.read_ns = t1.elapsed().as_nanos() as u64;
            drop(read);
        } else {
            let (z, f) = self.unmap_region(cpu, &vmas, floor, ceiling);
            st.pages_zapped = z;
            st.tlb_flushes = f;
            drop(vmas);
            st.exclusive_ns = tree.unlock();
        }
        st.total_ns = t0.elapsed().as_nanos() as u64;
        Ok(st)
    }

    /// `unmap_region`: zap the detached VMAs and free their page tables. Returns (pages
    /// zapped, TLB flushes).
    fn unmap_region(&self, cpu: CpuId, vmas: &[Vma], floor: u64, ceiling: u64) -> (u64, u64) {
        let mut tlb = MmuGather::new(self, cpu, FullMm::No);
        self.update_hiwater_rss();
        let mut zapped = 0;
        for v in vmas {
            zapped += zap_range(&mut tlb, self, v.start, v.end);
        }
        let ranges: Vec<(u64, u64)> = vmas.iter().map(|v| (v.start, v.end)).collect();
        free_pgtables(&mut tlb, self, &ranges, floor, ceiling);
        let gs = tlb.finish();
        (zapped, gs.tlb_flushes)
    }

    /// `mprotect(addr, len, prot)`.
    #[doc(alias = "do_mprotect_pkey")]
    pub fn mprotect(&self, cpu: CpuId, addr: u64, len: u64, prot: u32) -> Result<(), Errno> {
        if addr % PAGE_SIZE != 0 {
            return Err(Errno::EINVAL);
        }
        if len == 0 {
            return Ok(());
        }
        let len = align_up(len, PAGE_SIZE).ok_or(Errno::ENOMEM)?;
        let end = addr.checked_add(len).ok_or(Errno::ENOMEM)?;
        let valid = PROT_READ | PROT_WRITE | PROT_EXEC | PROT_SEM;
        if prot & !valid != 0 {
            return Err(Errno::EINVAL);
        }
        let want = VmFlags::from_prot(prot);
        let mut tree = self.mmap_lock.write();
        let max = self.machine().max_map_count();
        let Some(first) = tree.find_vma(addr) else {
            return Err(Errno::ENOMEM);
        };
        if first.start > addr {
            return Err(Errno::ENOMEM);
        }
        let mut nstart = addr;
        loop {
            let Some(vma) = tree.find_vma(nstart) else {
                return Err(Errno::ENOMEM);
            };
            if vma.start > nstart {
                return Err(Errno::ENOMEM);
            }
            let newflags = vma.flags.minus(VmFlags::VM_ACCESS_FLAGS).union(want);
            // The VM_MAY* bits must allow what is asked.
            if (newflags.0 & !(newflags.0 >> 4)) & VmFlags::VM_ACCESS_FLAGS.0 != 0 {
                return Err(Errno::EACCES);
            }
            // mprotect_fixup's commit accounting: a private mapping made writable is charged
            // (VM_ACCOUNT); an anonymous one made read-only before its first fault (no anon_vma)
            // is uncharged. VM_ACCOUNT takes part in merging.
            let newflags = if newflags.contains(VmFlags::VM_WRITE) {
                let exempt = VmFlags(
                    VmFlags::VM_ACCOUNT.0
                        | VmFlags::VM_WRITE.0
                        | VmFlags::VM_HUGETLB.0
                        | VmFlags::VM_SHARED.0
                        | VmFlags::VM_NORESERVE.0,
                );
                if vma.flags.intersects(exempt) {
                    newflags
                } else {
                    newflags.union(VmFlags::VM_ACCOUNT)
                }
            } else if vma.flags.contains(VmFlags::VM_ACCOUNT)
                && vma.is_anonymous()
                && vma.anon_vma() == 0
            {
                newflags.minus(VmFlags::VM_ACCOUNT)
            } else {
                newflags
            };
            let tmp = vma.end.min(end);
            let changed = vma.flags != newflags;
            // mprotect_fixup: a locked private mapping made writable has its pages
            // populated for writing (copy-on-write broken now, not at the first store).
            let lock_populate = vma.flags.0
                & (VmFlags::VM_WRITE.0 | VmFlags::VM_SHARED.0 | VmFlags::VM_LOCKED.0)
                == VmFlags::VM_LOCKED.0
                && newflags.contains(VmFlags::VM_WRITE);
            self.vma_modify_flags(cpu, &mut tree, nstart, tmp, newflags, max)?;
            if changed {
                change_protection(
                    self,
                    cpu,
                    nstart,
                    tmp,
                    newflags.contains(VmFlags::VM_READ),
                    newflags.contains(VmFlags::VM_WRITE),
                    newflags.contains(VmFlags::VM_EXEC),
                );
            }
            if lock_populate {
                let _ = self.populate_locked(&tree, cpu, nstart, tmp, true);
            }
            nstart = tmp;
            if nstart >= end {
                return Ok(());
            }
        }
    }

    /// Give `[start, end)` (inside one VMA) the flags `newflags`: split, set, merge
    /// (`vma_modify_flags`). Fails with ENOMEM, changing nothing, at the map_count limit.
    ///
    /// A new VMA boundary inside a 2 MiB block splits a huge PMD mapping that block first
    /// (`__split_vma`/`commit_merge` → `vma_adjust_trans_huge`): no huge mapping straddles VMAs.
    fn vma_modify_flags(
        &self,
        cpu: CpuId,
        tree: &mut VmaTree,
        start: u64,
        end: u64,
        newflags: VmFlags,
        max: usize,
    ) -> Result<(), Errno> {
        let Some((vs, ve, changed)) = tree
            .vma_lookup(start)
            .map(|v| (v.start, v.end, v.flags != newflags))
        else {
            return tree.vma_modify_flags(start, end, newflags, max).map(|_| ());
        };
        tree.vma_modify_flags(start, end, newflags, max)?;
        if changed {
            if start > vs {
                self.split_huge_pmd_address(cpu, start);
            }
            if end < ve {
                self.split_huge_pmd_address(cpu, end);
            }
        }
        Ok(())
    }

    /// `split_huge_pmd_address` for an address that is not 2 MiB aligned: split the huge PMD
    /// (THP or huge zero page) mapping it, if any.
    fn split_huge_pmd_address(&self, cpu: CpuId, addr: u64) {
        if addr % PMD_SIZE == 0 {
            return;
        }
        let phys = self.machine().phys();
        if let crate::pgtable::Walk::HugePmd { pmd, .. } =
            crate::pgtable::walk(phys, self.pgd(), addr)
        {
            super::memory::split_huge_pmd(self, cpu, pmd, addr & !(PMD_SIZE - 1));
        }
    }

    /// `madvise(addr, len, advice)`.
    #[doc(alias = "do_madvise")]
    pub fn madvise(&self, cpu: CpuId, addr: u64, len: u64, advice: i32) -> Result<(), Errno> {
        let (set, clear): (VmFlags, VmFlags) = match advice {
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
        };
        if addr % PAGE_SIZE != 0 {
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
                    if vflags.intersects(VmFlags(
                        VmFlags::VM_LOCKED.0 | VmFlags::VM_PFNMAP.0 | VmFlags::VM_HUGETLB.0,
                    )) {
                        return Err(Errno::EINVAL);
                    }
                    match advice {
                        MADV_DONTNEED => self.zap_page_range(cpu, start, tmp),
                        MADV_FREE if !matches!(vkind, VmaKind::Anon | VmaKind::DevZero) => {
                            return Err(Errno::EINVAL)
                        }
                        MADV_FREE => self.split_partial_thps(cpu, start, tmp),
                        // madvise_remove: no file → EINVAL; a file not mapped shared-writable
                        // (private /dev/zero) → EACCES.
                        MADV_REMOVE if matches!(vkind, VmaKind::DevZero) => {
                            return Err(Errno::EACCES)
                        }
                        MADV_REMOVE if !matches!(vkind, VmaKind::SharedAnon) => {
                            return Err(Errno::EINVAL)
                        }
                        MADV_REMOVE => {
                            self.zap_page_range(cpu, start, tmp);
                            if let Some(obj) = &vma.shmem {
                                obj.punch_hole(
                                    vma.pgoff + ((start - vma.start) >> 12),
                                    (tmp - start) >> 12,
                                );
                            }
                        }
                        _ => {}
                    }
                }
                // Only memory without a file (not even /dev/zero) can be wiped on fork.
                MADV_WIPEONFORK if !matches!(vkind, VmaKind::Anon) => return Err(Errno::EINVAL),
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
    }

    /// `madvise_populate`: fault `[start, end)` in VMA by VMA (`faultin_page_range` with
    /// `FOLL_MADV_POPULATE`). A hole is `ENOMEM`; a VMA that does not allow the access
    /// (no `VM_WRITE` for a write, no `VM_READ` for a read, or `VM_IO`/`VM_PFNMAP`) is `EINVAL`;
    /// what came before stays populated.
    #[doc(alias = "faultin_page_range")]
    fn madvise_populate(&self, cpu: CpuId, start: u64, end: u64, write: bool) -> Result<(), Errno> {
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
            // VM_FAULT_SIGBUS while populating: EFAULT.
            self.populate_locked(&tree, cpu, addr, stop, write)?;
            addr = stop;
        }
        Ok(())
    }

    /// The THP handling of `MADV_FREE`/`MADV_COLD`/`MADV_PAGEOUT` over `[start, end)` (inside
    /// one VMA): a PMD-mapped THP the range covers only in part is split, its zero-filled
    /// subpages going to the shared zero page (`split_folio`; see
    /// [`super::memory::split_thp_remap_zero`]). Whole THPs stay as they are (lazily freed,
    /// deactivated: nothing an observer sees without memory pressure).
    fn split_partial_thps(&self, cpu: CpuId, start: u64, end: u64) {
        let phys = self.machine().phys();
        for haddr in [start & !(PMD_SIZE - 1), (end - 1) & !(PMD_SIZE - 1)] {
            let whole = haddr >= start && haddr + PMD_SIZE <= end;
            if whole {
                continue;
            }
            if let crate::pgtable::Walk::HugePmd { pmd, .. } =
                crate::pgtable::walk(phys, self.pgd(), haddr)
            {
                super::memory::split_thp_remap_zero(self, cpu, pmd, haddr);
            }
        }
    }

    /// `zap_page_range_single`: drop the mappings of `[start, end)`, keep the VMAs and tables.
    fn zap_page_range(&self, cpu: CpuId, start: u64, end: u64) {
        let mut tlb = MmuGather::new(self, cpu, FullMm::No);
        self.update_hiwater_rss();
        zap_range(&mut tlb, self, start, end);
        let _ = tlb.finish();
    }

    /// `mlock(addr, len)`.
    pub fn mlock(&self, cpu: CpuId, addr: u64, len: u64) -> Result<(), Errno> {
        self.apply_vma_lock_flags(cpu, addr, len, true)
    }

    /// `munlock(addr, len)`.
    pub fn munlock(&self, cpu: CpuId, addr: u64, len: u64) -> Result<(), Errno> {
        self.apply_vma_lock_flags(cpu, addr, len, false)
    }

    fn apply_vma_lock_flags(&self, cpu: CpuId, addr: u64, len: u64, on: bool) -> Result<(), Errno> {
        let off = addr % PAGE_SIZE;
        let start = addr - off;
        let len =
            align_up(len.checked_add(off).ok_or(Errno::ENOMEM)?, PAGE_SIZE).ok_or(Errno::ENOMEM)?;
        let end = start.checked_add(len).ok_or(Errno::ENOMEM)?;
        if end == start {
            return Ok(());
        }
        let max = self.machine().max_map_count();
        let mut tree = self.mmap_lock.write();
        let Some(first) = tree.find_vma(start) else {
            return Err(Errno::ENOMEM);
        };
        if first.start > start {
            return Err(Errno::ENOMEM);
        }
        let mut nstart = start;
        let mut result = Ok(());
        while nstart < end {
            let Some(vma) = tree.find_vma(nstart) else {
                result = Err(Errno::ENOMEM);
                break;
            };
            if vma.start != nstart && vma.start > nstart {
                result = Err(Errno::ENOMEM);
                break;
            }
            let tmp = vma.end.min(end);
            let newflags = if on {
                vma.flags.union(VmFlags::VM_LOCKED)
            } else {
                vma.flags.minus(VmFlags::VM_LOCKED)
            };
            let special = vma
                .flags
                .intersects(VmFlags(VmFlags::VM_PFNMAP.0 | VmFlags::VM_HUGETLB.0));
            if !special && newflags != vma.flags {
                self.vma_modify_flags(cpu, &mut tree, nstart, tmp, newflags, max)?;
                self.mlock_pages(cpu, nstart, tmp, on);
            }
            nstart = tmp;
        }
        drop(tree);
        if on && result.is_ok() {
            // do_mlock's __mm_populate(start, len, 0), only after every VMA was locked. It skips
            // VM_IO/VM_PFNMAP and VM_LOCKONFAULT VMAs; a PROT_NONE one stops it with EFAULT,
            // which mlock reports as ENOMEM (__mlock_posix_error_return).
            let mut addr = start;
            while addr < end {
                let tree = self.mmap_lock.read();
                let Some(v) = tree.find_vma(addr).filter(|v| v.start < end) else {
                    break;
                };
                let (s, e) = (addr.max(v.start), v.end.min(end));
                let skip =
                    VmFlags(VmFlags::VM_IO.0 | VmFlags::VM_PFNMAP.0 | VmFlags::VM_LOCKONFAULT.0);
                if !v.flags.intersects(skip) {
                    if !v.flags.intersects(VmFlags::VM_ACCESS_FLAGS) {
                        return Err(Errno::ENOMEM);
                    }
                    // A failed fault is EFAULT, reported as ENOMEM too.
                    self.populate_locked(&tree, cpu, s, e, true)
                        .map_err(|_| Errno::ENOMEM)?;
                }
                addr = e;
            }
        }
        result
    }

    /// `mlock_folio`/`munlock_folio` on every page mapped in `[start, end)`.
    fn mlock_pages(&self, cpu: CpuId, start: u64, end: u64, on: bool) {
        let machine = self.machine();
        let phys = machine.phys();
        let mut n = 0i64;
        super::memory::for_each_leaf(phys, self.pgd(), |addr, e, huge| {
            if addr < start || addr >= end || e.special() {
                return;
            }
            let m = phys.meta(e.pfn());
            if m.test(crate::page_alloc::meta::PG_HUGETLB)
                || m.test(crate::page_alloc::meta::PG_MLOCKED) == on
            {
                return;
            }
            phys.lru_set_mlocked(cpu, e.pfn(), on);
            n += if huge { HPAGE_PMD_NR as i64 } else { 1 };
        });
        let stat = machine.vmstat();
        if on {
            stat.add(cpu, VmItem::NrMlock, n);
            stat.add(cpu, VmItem::UnevictablePgsMlocked, n);
        } else {
            stat.add(cpu, VmItem::NrMlock, -n);
            stat.add(cpu, VmItem::UnevictablePgsMunlocked, n);
        }
    }

    /// `remap_pfn_range` into a new mapping: a device-style `VM_PFNMAP` mapping of `nr` raw
    /// frames from `pfn`, which the caller owns (no refcounts are taken). Returns the address.
    pub fn map_pfn_range(&self, cpu: CpuId, pfn: Pfn, nr: u64, prot: u32) -> Result<u64, Errno> {
        if nr == 0 || pfn.0 + nr > self.machine().phys().nr_frames() {
            return Err(Errno::EINVAL);
        }
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
        let mut vma = Vma::new(start, start + len, flags, VmaKind::PfnMap, pfn.0);
        vma.pfn_base = pfn.0;
        let phys = self.machine().phys();
        let bits = leaf_bits(
            prot & PROT_READ != 0,
            prot & PROT_WRITE != 0,
            prot & PROT_EXEC != 0,
        ) | _PAGE_SPECIAL;
        for i in 0..nr {
            let addr = start + i * PAGE_SIZE;
            let pmd = fault::pmd_alloc_pub(self, cpu, addr).map_err(|_| Errno::ENOMEM)?;
            let pte_table = fault::pte_alloc_pub(self, cpu, pmd).map_err(|_| Errno::ENOMEM)?;
            let slot = Slot {
                table: pte_table,
                index: crate::pgtable::pte_index(addr),
            };
            let _ptl = phys.meta(pte_table).ptl.lock();
            slot.store(phys, crate::pgtable::Entry::new(pfn.add(i), bits));
        }
        tree.insert_or_merge(vma);
        Ok(start)
    }
}

/// The floor and ceiling for freeing tables of `[start, end)`: the end of the previous VMA
/// and the start of the next (0 = no limit).
fn floor_ceiling(tree: &VmaTree, start: u64, end: u64) -> (u64, u64) {
    let (prev, _) = tree.find_vma_prev(start);
    let floor = prev.filter(|p| p.end <= start).map_or(0, |p| p.end);
    let ceiling = tree.find_vma(end).map_or(0, |n| n.start);
    (floor, ceiling)
}
