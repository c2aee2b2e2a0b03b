//! `mprotect` (`do_mprotect_pkey`, `mprotect_fixup`), the per-VMA flag change
//! (`vma_modify_flags`) that madvise and mlock share, and the page-table side of a protection
//! change (`change_protection` and `change_pte_range` of `mm/mprotect.c`; a huge PMD's is
//! `huge_memory.rs`'s `change_huge_pmd`), one `TableCursor` per PTE table.

use crate::addr::{align_up, PAGE_SIZE, PMD_SIZE};
use crate::cpu::CpuId;
use crate::error::Errno;
use crate::mm::huge_memory::{change_huge_pmd, split_huge_pmd};
use crate::mm::mman::{PROT_EXEC, PROT_READ, PROT_SEM, PROT_WRITE};
use crate::mm::rmap;
use crate::mm::vma::{VmFlags, VmaWriteGuard};
use crate::mm::Mm;
use crate::pgtable::{addr_end, Entry, Level, TableCursor, Walk, _PAGE_SPECIAL};

impl Mm {
    /// `mprotect(addr, len, prot)`.
    #[doc(alias = "do_mprotect_pkey")]
    pub fn mprotect(&self, cpu: CpuId, addr: u64, len: u64, prot: u32) -> Result<(), Errno> {
        crate::sync::charge(crate::sync::Cost::Syscall, 1);
        if !addr.is_multiple_of(PAGE_SIZE) {
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
                change_protection(self, cpu, nstart, tmp, newflags);
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
    pub(super) fn vma_modify_flags(
        &self,
        cpu: CpuId,
        tree: &mut VmaWriteGuard<'_>,
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
    pub(super) fn split_huge_pmd_address(&self, cpu: CpuId, addr: u64) {
        if addr.is_multiple_of(PMD_SIZE) {
            return;
        }
        let phys = self.machine().phys();
        if let crate::pgtable::Walk::HugePmd { pmd, .. } =
            crate::pgtable::walk(phys, self.pgd(), addr)
        {
            crate::mm::huge_memory::split_huge_pmd(self, cpu, pmd, addr & !(PMD_SIZE - 1));
        }
    }
}

/// Rewrite the permission bits of every mapping in `[start, end)` to those of a VMA with
/// `newflags` (`change_protection`, with the VMA's new `vm_page_prot`). Exclusive anonymous
/// pages become writable at once when the VMA allows writing; the zero pages never do.
pub(crate) fn change_protection(mm: &Mm, cpu: CpuId, start: u64, end: u64, newflags: VmFlags) {
    let machine = mm.machine();
    let phys = machine.phys();
    let (read, write, exec) = (
        newflags.contains(VmFlags::VM_READ),
        newflags.contains(VmFlags::VM_WRITE),
        newflags.contains(VmFlags::VM_EXEC),
    );
    // is_cow_mapping: a private mapping that may be written shares pages copy-on-write.
    let cow = !newflags.contains(VmFlags::VM_SHARED) && newflags.contains(VmFlags::VM_MAYWRITE);
    let leaf = crate::pgtable::leaf_bits(read, write, exec);
    // x86 has no write-only pages: a write-only VMA's read-only entries (zero page, COW) stay
    // readable.
    let leaf_ro = crate::pgtable::leaf_bits(read || write, false, exec);
    let mut changed = false;
    let mut addr = start;
    while addr < end {
        match crate::pgtable::walk(phys, mm.pgd(), addr) {
            Walk::Hole { level, .. } => {
                // Past the reach of the none entry (a PGD, PUD or PMD entry).
                addr = addr_end(addr, level.entry_size(), end);
            }
            Walk::HugePmd { pmd, .. } => {
                let next = addr_end(addr, PMD_SIZE, end);
                if !addr.is_multiple_of(PMD_SIZE) || next - addr != PMD_SIZE {
                    split_huge_pmd(mm, cpu, pmd, addr & !(PMD_SIZE - 1));
                    continue;
                }
                changed |= change_huge_pmd(mm, pmd, leaf, leaf_ro, write, cow);
                addr = next;
            }
            Walk::Pte { pmd, .. } => {
                // change_pte_range: the PTE table's lock over the rest of the PMD's reach.
                let next = addr_end(addr, PMD_SIZE, end);
                let table = pmd.load(phys).pfn();
                let pte = TableCursor::lock(phys, table, Level::Pte);
                while addr < next {
                    let e = pte.get(addr);
                    if e.maps_frame() {
                        // can_change_pte_writable: only a PageAnonExclusive page.
                        let w = write
                            && !e.special()
                            && (!cow || rmap::pte_anon_exclusive(phys, e.pfn()));
                        let b = if w { leaf } else { leaf_ro };
                        pte.write(addr, Entry::new(e.pfn(), b | (e.0 & _PAGE_SPECIAL)));
                        changed = true;
                    }
                    addr += PAGE_SIZE;
                }
                drop(pte);
            }
        }
    }
    if changed {
        mm.flush_tlb(cpu, Some((end - start) / PAGE_SIZE));
    }
}
