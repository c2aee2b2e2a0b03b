//! Faults on an empty PTE of anonymous memory: `do_anonymous_page` (private: the zero page
//! on a read, a new zeroed page on a write) and `shmem_fault` (shared: the page of the shmem
//! object at that offset), as in `mm/memory.c` and `mm/shmem.c`.
//!
//! Invariant: a zero-page PTE is read-only and special (no rss, no mapcount); a new private
//! page is accounted (`folio_add_new_anon_rmap`) before its PTE is set. Locks: the PTE's PTL,
//! taken after the page is had; the loser of a race gives its page back. Differences: no
//! fault-around, no userfaultfd, no mTHP (a page is 4 KiB or, in `huge_memory.rs`, 2 MiB).

use crate::addr::Order;
use crate::mm::VmFault;
use crate::mm::{rmap, RssItem, VmFaultError, OOM};
use crate::page_alloc::Gfp;
use crate::pgtable::Entry;
use crate::pgtable::Level;
use crate::pgtable::_PAGE_SPECIAL;
use crate::sync::Cost;
use crate::sync::SpinClock;

/// `do_anonymous_page`: the first touch of an empty PTE of private anonymous memory. A read
/// maps the shared zero page (read-only, special, no rss); a write maps a fresh zeroed page,
/// allocated before the PTL is taken and freed again if the entry was filled meanwhile. On
/// the fault's clock (`vmf.clock`): the PTE lock, the charges, the allocation, the rmap's
/// touch and the LRU-add test no flag.
pub(super) fn do_anonymous_page<C: SpinClock>(vmf: &VmFault<'_, C>) -> Result<(), VmFaultError> {
    let (c, mm, vma, cpu, pte) = (vmf.clock, vmf.mm, vmf.vma, vmf.cpu, vmf.pte());
    let machine = mm.machine();
    let phys = machine.phys();
    if !vmf.write {
        if let Some(pte) = pte.lock_if_same_on(c, phys, Level::Pte, Entry::NONE) {
            let b = vma.leaf_bits(false) | _PAGE_SPECIAL;
            pte.set_on(c, Entry::new(machine.zero_pfn(), b));
        }
        return Ok(());
    }
    rmap::anon_vma_prepare(mm, vmf.tree, vma);
    let page = phys
        .alloc_pages_on_clock(c, cpu, Order(0), Gfp::ZERO)
        .map_err(|_| OOM)?;
    // The memcg charge and the new folio's accounting, paid whether or not the race is won.
    c.charge(Cost::NewAnonFolio, 1);
    let Some(pte) = pte.lock_if_same_on(c, phys, Level::Pte, Entry::NONE) else {
        let _ = phys.free_pages(cpu, page, Order(0));
        return Ok(());
    };
    rmap::folio_add_new_anon_rmap(c, mm, vma, cpu, page, 1);
    pte.set_on(c, Entry::new(page, vma.leaf_bits(true)));
    drop(pte);
    phys.lru_cache_add_on(c, cpu, page);
    Ok(())
}

/// Shared anonymous memory: map the shmem object's page for this offset.
pub(super) fn shmem_fault(vmf: &VmFault<'_>) -> Result<(), VmFaultError> {
    let (mm, vma, cpu, pte, addr) = (vmf.mm, vmf.vma, vmf.cpu, vmf.pte(), vmf.address);
    let machine = mm.machine();
    let phys = machine.phys();
    let Some(obj) = vma.shmem.as_ref() else {
        return Err(VmFaultError::Sigbus);
    };
    let index = vma.pgoff + ((addr - vma.start) >> 12);
    if vma.shmem_size != 0 && index >= vma.shmem_size {
        // Beyond the object's i_size (a shared /dev/zero mapping at an offset): SIGBUS.
        return Err(VmFaultError::Sigbus);
    }
    // shmem_get_folio's -ENOMEM: vmf_error gives VM_FAULT_OOM.
    let page = obj.get_page(cpu, index).map_err(|_| OOM)?;
    let Some(pte) = pte.lock_if_same(phys, Level::Pte, Entry::NONE) else {
        let _ = phys.put_page(cpu, page);
        return Ok(());
    };
    rmap::folio_add_file_rmap_pte(phys, page);
    mm.add_rss(cpu, RssItem::ShmemPages, 1);
    pte.set(Entry::new(page, vma.leaf_bits(true)));
    drop(pte);
    Ok(())
}
