//! `mlock`/`munlock` (`apply_vma_lock_flags`, `mlock_fixup`, `mlock_folio`).

use crate::addr::{align_up, HPAGE_PMD_NR, PAGE_SIZE};
use crate::cpu::CpuId;
use crate::error::Errno;
use crate::mm::vma::VmFlags;
use crate::mm::Mm;
use crate::stats::VmItem;

impl Mm {
    /// `mlock(addr, len)`.
    pub fn mlock(&self, cpu: CpuId, addr: u64, len: u64) -> Result<(), Errno> {
        self.apply_vma_lock_flags(cpu, addr, len, true)
    }

    /// `munlock(addr, len)`.
    pub fn munlock(&self, cpu: CpuId, addr: u64, len: u64) -> Result<(), Errno> {
        self.apply_vma_lock_flags(cpu, addr, len, false)
    }

    pub(super) fn apply_vma_lock_flags(
        &self,
        cpu: CpuId,
        addr: u64,
        len: u64,
        on: bool,
    ) -> Result<(), Errno> {
        crate::sync::charge(crate::sync::Cost::Syscall, 1);
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
                    // __mlock_posix_error_return: a SIGBUS (EFAULT) is reported as ENOMEM,
                    // out of memory (ENOMEM) as EAGAIN.
                    self.populate_locked(&tree, cpu, s, e, true)
                        .map_err(|e| match e {
                            Errno::ENOMEM => Errno::EAGAIN,
                            _ => Errno::ENOMEM,
                        })?;
                }
                addr = e;
            }
        }
        result
    }

    /// `mlock_folio`/`munlock_folio` on every page mapped in `[start, end)`.
    pub(super) fn mlock_pages(&self, cpu: CpuId, start: u64, end: u64, on: bool) {
        let machine = self.machine();
        let phys = machine.phys();
        let mut n = 0i64;
        crate::pgtable::for_each_leaf(phys, self.pgd(), |addr, e, huge| {
            if addr < start || addr >= end || e.special() {
                return;
            }
            let head = crate::mm::rmap::compound_head(phys, e.pfn());
            let m = phys.meta(head);
            if m.test(crate::page_alloc::meta::PG_HUGETLB)
                || m.test(crate::page_alloc::meta::PG_MLOCKED) == on
            {
                return;
            }
            phys.lru_set_mlocked(cpu, head, on);
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
}
