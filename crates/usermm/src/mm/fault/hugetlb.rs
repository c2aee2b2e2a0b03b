//! Faults in `MAP_HUGETLB` VMAs: `hugetlb_fault` and `hugetlb_wp` of `mm/hugetlb.c`. A 2 MiB
//! page from the machine's pool, mapped by a PMD (never split, never PTE-mapped) under the
//! PMD lock; an empty pool is `VM_FAULT_SIGBUS`.
//!
//! Invariant: a hugetlb page's mapcount is the number of PMDs mapping it (`rmap.rs`).
//! Locks: the PMD lock of the entry. Differences: no reservations (`resv_map`), no hugetlbfs
//! page cache (a shared mapping's pages are the mapping's own, copied at fork: `fork.rs`).

use crate::mm::VmFault;
use crate::mm::{rmap, VmFaultError};
use crate::pgtable::{self, Level, _PAGE_PSE};
use crate::pgtable::{Entry, Slot};
use crate::sync::{charge, Cost};

/// A fault in a `MAP_HUGETLB` VMA: a 2 MiB page from the pool, PMD-mapped. An empty pool is
/// `VM_FAULT_SIGBUS` (`hugetlb_no_page`: `alloc_hugetlb_folio` fails with `-ENOSPC`); no
/// table for the PMD (`huge_pte_alloc`) is `VM_FAULT_OOM`.
pub(super) fn hugetlb_fault(vmf: &VmFault<'_>) -> Result<(), VmFaultError> {
    let (mm, vma, cpu) = (vmf.mm, vmf.vma, vmf.cpu);
    let machine = mm.machine();
    let phys = machine.phys();
    let pmd = pgtable::pmd_alloc(mm, cpu, vmf.address)?;
    let e = pmd.load(phys);
    if !e.is_none() {
        if vmf.write && e.present() && !e.writable() {
            return hugetlb_wp(vmf, pmd, e);
        }
        return Ok(());
    }
    let page = phys.alloc_hugetlb_page().ok_or(VmFaultError::Sigbus)?;
    phys.backing().zero_data(page, 512);
    charge(Cost::ClearPage, 512);
    let Some(pmd) = pmd.lock_if_same(phys, Level::Pmd, Entry::NONE) else {
        let _ = phys.put_page(cpu, page);
        return Ok(());
    };
    rmap::hugetlb_add_new_anon_rmap(phys, page);
    pmd.set(Entry::new(page, vma.leaf_bits(true) | _PAGE_PSE));
    Ok(())
}

/// `hugetlb_wp`: a write to a read-only hugetlb PMD of a private mapping shared with a forked
/// mm. Reuse the page if this PMD is its only mapping, else copy it into a page from the pool
/// (none left: `VM_FAULT_SIGBUS`, as for an empty pool at a first fault).
fn hugetlb_wp(vmf: &VmFault<'_>, pmd: Slot, e: Entry) -> Result<(), VmFaultError> {
    let (mm, vma, cpu) = (vmf.mm, vmf.vma, vmf.cpu);
    let phys = mm.machine().phys();
    let old = e.pfn();
    if !vma.is_cow_mapping() || phys.meta(old).map_count() == 1 {
        if let Some(pmd) = pmd.lock_if_same(phys, Level::Pmd, e) {
            pmd.set(Entry::new(old, vma.leaf_bits(true) | _PAGE_PSE));
        }
        return Ok(());
    }
    let page = phys.alloc_hugetlb_page().ok_or(VmFaultError::Sigbus)?;
    for i in 0..512 {
        phys.backing().copy_frame(old.add(i), page.add(i));
    }
    let Some(pmd) = pmd.lock_if_same(phys, Level::Pmd, e) else {
        let _ = phys.put_page(cpu, page);
        return Ok(());
    };
    pmd.set(Entry::NONE);
    mm.flush_tlb(cpu, Some(512));
    rmap::hugetlb_add_new_anon_rmap(phys, page);
    pmd.set(Entry::new(page, vma.leaf_bits(true) | _PAGE_PSE));
    rmap::hugetlb_remove_rmap(phys, old);
    drop(pmd);
    let _ = phys.put_page(cpu, old);
    Ok(())
}
