//! Faults in `MAP_HUGETLB` VMAs: `hugetlb_fault` and `hugetlb_wp` of `mm/hugetlb.c`. A 2 MiB
//! page from the machine's pool, mapped by a PMD (never split, never PTE-mapped) under the
//! PMD lock; an empty pool is `VM_FAULT_SIGBUS`.
//!
//! Invariant: a hugetlb page's mapcount is the number of PMDs mapping it (`rmap.rs`).
//! Locks: the PMD lock of the entry. Differences: no reservations (`resv_map`), no hugetlbfs
//! page cache (a shared mapping's pages are the mapping's own, copied at fork: `fork.rs`).

use crate::cpu::CpuId;
use crate::mm::pgtable_alias::*;
use crate::mm::vma::Vma;
use crate::mm::{rmap, Mm, VmFault};
use crate::pgtable::{self, Level, _PAGE_PSE};
use crate::sync::{charge, Cost};

/// A fault in a `MAP_HUGETLB` VMA: a 2 MiB page from the pool, PMD-mapped. An empty pool is
/// `VM_FAULT_SIGBUS` (`hugetlb_no_page`: `alloc_hugetlb_folio` fails with `-ENOSPC`); no
/// table for the PMD (`huge_pte_alloc`) is `VM_FAULT_OOM`.
pub(super) fn hugetlb_fault(
    mm: &Mm,
    vma: &Vma,
    cpu: CpuId,
    addr: u64,
    write: bool,
) -> Result<(), VmFault> {
    let machine = mm.machine();
    let phys = machine.phys();
    let pmd = pgtable::pmd_alloc(mm, cpu, addr)?;
    let e = pmd.load(phys);
    if !e.is_none() {
        if write && e.present() && !e.writable() {
            return hugetlb_wp(mm, vma, cpu, pmd, e);
        }
        return Ok(());
    }
    let page = phys.alloc_hugetlb_page().ok_or(VmFault::Sigbus)?;
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
fn hugetlb_wp(mm: &Mm, vma: &Vma, cpu: CpuId, pmd: Slot, e: Entry) -> Result<(), VmFault> {
    let phys = mm.machine().phys();
    let old = e.pfn();
    if !vma.is_cow_mapping() || phys.meta(old).map_count() == 1 {
        if let Some(pmd) = pmd.lock_if_same(phys, Level::Pmd, e) {
            pmd.set(Entry::new(old, vma.leaf_bits(true) | _PAGE_PSE));
        }
        return Ok(());
    }
    let page = phys.alloc_hugetlb_page().ok_or(VmFault::Sigbus)?;
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
