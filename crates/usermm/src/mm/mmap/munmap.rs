//! `munmap` in phases (`__vm_munmap`, `do_vmi_align_munmap`, `vms_complete_munmap_vmas`,
//! `unmap_region`): see the parent module for the protocol and why the downgrade is sound.

use crate::sync::clock;

use super::floor_ceiling;
use crate::addr::{align_up, PAGE_SIZE, TASK_SIZE};
use crate::cpu::CpuId;
use crate::error::Errno;
use crate::mm::memory::{free_pgtables, zap_range};
use crate::mm::mmu_gather::{FullMm, MmuGather};
use crate::mm::vma::{VmFlags, Vma, VmaWriteGuard};
use crate::mm::{Mm, UnmapStats};

impl Mm {
    /// `munmap(addr, len)`.
    #[doc(alias = "do_vmi_munmap")]
    #[doc(alias = "vm_munmap")]
    pub fn munmap(&self, cpu: CpuId, addr: u64, len: u64) -> Result<(), Errno> {
        self.munmap_stats(cpu, addr, len).map(|_| ())
    }

    /// `munmap`, returning how long the lock was held which way (seed 003's figures).
    #[doc(alias = "__vm_munmap")]
    #[doc(alias = "do_vmi_munmap")]
    #[doc(alias = "do_vmi_align_munmap")]
    pub fn munmap_stats(&self, cpu: CpuId, addr: u64, len: u64) -> Result<UnmapStats, Errno> {
        crate::sync::charge(crate::sync::Cost::Syscall, 1);
        if !addr.is_multiple_of(PAGE_SIZE) || addr > TASK_SIZE || len > TASK_SIZE - addr {
            return Err(Errno::EINVAL);
        }
        let len = align_up(len, PAGE_SIZE).ok_or(Errno::EINVAL)?;
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let (start, end) = (addr, addr + len);
        let t0 = clock::now();
        let mut tree = self.mmap_lock.write();
        // Hugetlb VMAs split only at 2 MiB boundaries (hugetlb_vm_op_split).
        tree.may_split_range(start, end)?;
        let vmas = tree.detach_range(start, end, self.machine().max_map_count())?;
        if vmas.is_empty() {
            let exclusive_ns = tree.unlock();
            return Ok(UnmapStats {
                total_ns: t0.elapsed_ns(),
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
        // The zap and the table teardown, under whichever lock the policy left held.
        let unmap = |st: &mut UnmapStats, downgraded: bool| {
            self.zap_window(downgraded);
            (st.pages_zapped, st.tlb_flushes) = self.unmap_region(cpu, &vmas, floor, ceiling);
        };
        if downgrade {
            let read = tree.downgrade();
            // The lock's own figure: the hold, without the wait for the write lock.
            st.exclusive_ns = read.exclusive_hold_ns().unwrap_or(0);
            let t1 = clock::now();
            unmap(&mut st, true);
            drop(vmas);
            st.read_ns = t1.elapsed_ns();
            drop(read);
        } else {
            unmap(&mut st, false);
            drop(vmas);
            st.exclusive_ns = tree.unlock();
        }
        st.total_ns = t0.elapsed_ns();
        Ok(st)
    }

    /// `do_vmi_munmap` with the mmap lock already held for writing (`mremap`, `brk`): split,
    /// detach, zap and free tables, never downgrading. `EINVAL` as munmap would for a range
    /// that is unaligned, empty, wraps or passes `TASK_SIZE`.
    pub(crate) fn do_munmap_locked(
        &self,
        tree: &mut VmaWriteGuard<'_>,
        cpu: CpuId,
        start: u64,
        end: u64,
    ) -> Result<(), Errno> {
        if !start.is_multiple_of(PAGE_SIZE)
            || !end.is_multiple_of(PAGE_SIZE)
            || start >= end
            || end > TASK_SIZE
        {
            return Err(Errno::EINVAL);
        }
        tree.may_split_range(start, end)?;
        let vmas = tree.detach_range(start, end, self.machine().max_map_count())?;
        if vmas.is_empty() {
            return Ok(());
        }
        for v in vmas.iter().filter(|v| v.flags.contains(VmFlags::VM_LOCKED)) {
            self.mlock_pages(cpu, v.start, v.end, false);
        }
        let (floor, ceiling) = floor_ceiling(tree, start, end);
        self.unmap_region(cpu, &vmas, floor, ceiling);
        Ok(())
    }

    /// `unmap_region`: zap the detached VMAs (`unmap_vmas`) and free their page tables
    /// (`free_pgtables`), all through one gather. Returns (pages zapped, TLB flushes).
    #[doc(alias = "unmap_vmas")]
    pub(super) fn unmap_region(
        &self,
        cpu: CpuId,
        vmas: &[Vma],
        floor: u64,
        ceiling: u64,
    ) -> (u64, u64) {
        let mut tlb = MmuGather::new(self, cpu, FullMm::No);
        self.update_hiwater_rss();
        let mut zapped = 0;
        for v in vmas {
            zapped += zap_range(&mut tlb, self, v.start, v.end);
        }
        let ranges: Vec<(u64, u64)> = vmas.iter().map(|v| (v.start, v.end)).collect();
        free_pgtables(&mut tlb, &ranges, floor, ceiling);
        let gs = tlb.finish();
        (zapped, gs.tlb_flushes)
    }
}
