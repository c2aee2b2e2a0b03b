//! Write-protect faults on a PTE: `do_wp_page` of `mm/memory.c`, reusing an exclusive page
//! (`wp_page_reuse`) or copying a shared one (`wp_page_copy`, the copy-on-write after fork and
//! of the zero page).
//!
//! Invariant: the old translation is flushed before the new one appears
//! (`ptep_clear_flush`), so no CPU writes the old page after the copy was taken. Locks: the
//! PTE's PTL, from the re-check to the new entry; the old page's reference is put after it.
//! Differences: a subpage of a THP is always copied (no large-folio reuse, v6.9), and
//! "exclusive" is read from the mapcounts (no `PageAnonExclusive`).

use crate::addr::{Order, Pfn};
use crate::cpu::CpuId;
use crate::mm::VmFault;
use crate::mm::{rmap, Mm, RssItem, VmFaultError, OOM};
use crate::page_alloc::meta::PG_MLOCKED;
use crate::page_alloc::Gfp;
use crate::pgtable::Entry;
use crate::pgtable::Level;
use crate::stats::VmItem;
use crate::sync::vhook::Current;
use crate::sync::{charge, Cost};

/// `do_wp_page`: write to a present read-only PTE in a writable VMA.
///
/// `wp_page_reuse` when the anonymous page is exclusive (mapped by this PTE alone: an
/// order-0 page whose mapcount is 1); otherwise `wp_page_copy`: a new page with the old one's
/// data (zeroed for the zero page), installed after the old translation is flushed, and the
/// old mapping dropped (its mapcount and the reference it held). A subpage of a THP is always
/// copied (as before large folios could be reused, v6.9).
#[doc(alias = "wp_page_reuse")]
#[doc(alias = "wp_page_copy")]
pub(super) fn do_wp_page(vmf: &VmFault<'_>) -> Result<(), VmFaultError> {
    let (mm, vma, cpu, pte, e) = (vmf.mm, vmf.vma, vmf.cpu, vmf.pte(), vmf.orig_pte);
    let machine = mm.machine();
    let phys = machine.phys();
    if !e.special() && (!vma.is_cow_mapping() || rmap::pte_exclusive(phys, e.pfn())) {
        // wp_page_reuse: an exclusive anonymous page (or a shared mapping's page) only needs
        // the write bit.
        if let Some(pte) = pte.lock_if_same(phys, Level::Pte, e) {
            if vma.is_cow_mapping() {
                rmap::wp_reuse_anon(phys, e.pfn());
            }
            pte.set(Entry::new(e.pfn(), vma.leaf_bits(true)));
        }
        return Ok(());
    }
    rmap::anon_vma_prepare(mm, vmf.tree, vma);
    // A copy of the zero page is a zeroed page (`vma_alloc_zeroed_movable_folio`); any other
    // copy is allocated as it comes and overwritten whole (`folio_prealloc`, then
    // `__wp_page_copy_user`): it pays copy_page, not clear_page too.
    let gfp = if e.special() { Gfp::ZERO } else { Gfp::KERNEL };
    let page = phys.alloc_pages(cpu, Order(0), gfp).map_err(|_| OOM)?;
    // The new copy's memcg charge and accounting, as for a first write (`do_anonymous_page`).
    charge(Cost::NewAnonFolio, 1);
    if !e.special() {
        phys.backing().copy_frame(e.pfn(), page);
        charge(Cost::CopyPage, 1);
    }
    let Some(pte) = pte.lock_if_same(phys, Level::Pte, e) else {
        let _ = phys.free_pages(cpu, page, Order(0));
        return Ok(());
    };
    // ptep_clear_flush: the old translation must be gone before the new one appears.
    pte.set(Entry::NONE);
    mm.flush_tlb(cpu, Some(1));
    rmap::folio_add_new_anon_rmap(Current, mm, vma, cpu, page, 1);
    pte.set(Entry::new(page, vma.leaf_bits(true)));
    let old = (!e.special()).then(|| unmap_cow_source(mm, cpu, e.pfn()));
    drop(pte);
    phys.lru_cache_add(cpu, page);
    if let Some(head) = old {
        // The reference the old PTE held, dropped after the PTL (`folio_put`).
        let _ = phys.put_page(cpu, head);
    }
    Ok(())
}

/// `folio_remove_rmap_pte` of the page a COW copy replaced, under the PTL: this mm's rss
/// moves to the new page (already counted), the page's counts drop. Returns the folio head
/// whose reference the caller puts once the PTL is dropped.
fn unmap_cow_source(mm: &Mm, cpu: CpuId, pfn: Pfn) -> Pfn {
    let machine = mm.machine();
    let phys = machine.phys();
    let head = rmap::compound_head(phys, pfn);
    mm.add_rss(cpu, RssItem::AnonPages, -1);
    if rmap::folio_remove_rmap_pte(phys, pfn) {
        machine.vmstat().add(cpu, VmItem::NrAnonPages, -1);
        if phys.meta(head).test(PG_MLOCKED) {
            machine.vmstat().add(cpu, VmItem::NrMlock, -1);
        }
    }
    head
}
