//! Mapcounts of anonymous folios shared between address spaces: the counting half of the
//! reverse map.
//!
//! Mirrors `mm/rmap.c` (`anon_vma_prepare`, as the fault's `vmf_anon_prepare` calls it;
//! `folio_add_new_anon_rmap`, `folio_add_anon_rmap_pte`, `folio_add_file_rmap_pte`,
//! `folio_try_dup_anon_rmap_pte/pmd`, `folio_remove_rmap_pte/pmd`, `hugetlb_add_new_anon_rmap`,
//! `hugetlb_try_dup_anon_rmap`, `hugetlb_remove_rmap`, `folio_mapcount`,
//! `folio_entire_mapcount`) and `include/linux/mm.h` (`compound_head`, `page_mapcount`,
//! `folio_mapped`).
//!
//! # Who writes a mapcount
//! Only this module: every PTE or PMD that starts or stops mapping a page goes through one of
//! the functions above, under the names the kernel gives them. The allocator is the one other
//! writer, as the kernel's is: a new page's counts are reset in `prep_new_page`, and
//! `split_compound` (`__split_huge_page`) clears the tails' before they become pages of their
//! own. `PageMeta`'s fields are crate-private, so outside the crate nothing writes them at
//! all; inside it, `tests/source_rules.rs` fails on a `mapcount` or `private` write outside
//! `mm/rmap.rs` and `page_alloc/`.
//!
//! # How a mapping is counted
//! ```text
//!  order-0 page     mapcount = PTEs mapping it (in every mm); each PTE holds one reference
//!  THP (order 9)    head.private  = `_entire_mapcount`: PMDs mapping the whole folio
//!                   sub[i].mapcount = PTEs mapping subpage i (the head is subpage 0)
//!                   head.refcount  = one per PMD + one per PTE (+ LRU batches): a PTE of a
//!                                    subpage pins the folio, never the subpage
//!  hugetlb (order 9) head.mapcount = PMDs mapping it (never PTE-mapped)
//! ```
//! A THP is PTE-mapped after a PMD split that could not split the folio itself: when another
//! mm still maps it (fork), or when subpages are already PTE-mapped elsewhere. Linux then
//! queues the folio for a deferred split; here it simply stays compound until its last
//! reference goes, when it is freed whole.
//!
//! # Invariant (checked by `Mm::validate` over a fork family)
//! For every frame: the mapcount equals the number of page-table entries, across every mm of
//! the family, that map it in that way (PTE → the subpage's mapcount, PMD → the entire
//! mapcount).
//!
//! # `NR_ANON_MAPPED` / `NR_ANON_THPS`
//! Counted once per page (folio), at the first mapping and at the last unmapping, as
//! `__folio_add_anon_rmap`/`__folio_remove_rmap` do — not once per mm.
//!
//! # Locks
//! Every count changes under the page-table lock of the entry that maps (or stops mapping) the
//! page; the counters are atomics, so two mms' PTLs need never nest.
//!
//! # Differences from Linux
//! No rmap trees (no `anon_vma` interval trees, no `page->index`): nothing walks from a page
//! to the mms mapping it. No `PageAnonExclusive`: "exclusive" is decided from the counts.

use crate::sync::vhook::{self, Clock, Touch};
use std::sync::atomic::Ordering::Relaxed;

use super::vma::{VmFlags, Vma, VmaTree};
use super::{Mm, RssItem};
use crate::addr::{Pfn, HPAGE_PMD_NR};
use crate::cpu::CpuId;
use crate::page_alloc::meta::{PageMeta, PG_ANON, PG_ANON_EXCLUSIVE, PG_HEAD, PG_MLOCKED, PG_TAIL};
use crate::page_alloc::PhysMem;
use crate::stats::VmItem;

/// `vmf_anon_prepare`: the VMA's anon_vma, allocated (or a neighbour's reused) under the mmap
/// lock (`tree`). Under a per-VMA lock (`None`) the VMA has one already: `lock_vma_under_rcu`
/// took only such VMAs.
#[doc(alias = "vmf_anon_prepare")]
#[inline]
pub(crate) fn anon_vma_prepare(mm: &Mm, tree: Option<&VmaTree>, vma: &Vma) {
    match tree {
        Some(t) => {
            t.anon_vma_prepare(vma, &mm.anon_vma_ids);
        }
        None => vm_bug_on!(vma.anon_vma() == 0, "VMA-locked fault without an anon_vma"),
    }
}

/// Account a new anonymous page of `nr` base pages mapped in `vma` (`folio_add_new_anon_rmap`:
/// one PTE mapping of an order-0 page, or the entire mapping of a THP), with this mm's rss
/// and the mlock counters. The caller holds the PTL (or PMD lock) of the entry it will set.
/// Its line touch on the caller's clock `c` (a fault's decided clock, or `Current`).
pub(crate) fn folio_add_new_anon_rmap(
    c: impl Clock,
    mm: &Mm,
    vma: &Vma,
    cpu: CpuId,
    page: Pfn,
    nr: i64,
) {
    let machine = mm.machine();
    let m = machine.phys().meta(page);
    // The fault's store to the new page's struct page: its cost is in the measured write
    // fault (for a 4 KiB page, in `new_anon_folio`, the write fault's part beyond the rest).
    c.mem_touch_page(page.0, Touch::Measured);
    if nr == 1 {
        // One RMW on the flags for both bits: this is the anonymous fault's path.
        m.set(PG_ANON | PG_ANON_EXCLUSIVE);
        m.mapcount.store(1, Relaxed);
    } else {
        // A new THP is this mm's alone: its head carries the folio's PageAnonExclusive.
        m.set(PG_ANON | PG_ANON_EXCLUSIVE);
        m.private.store(1, Relaxed);
    }
    if vma.flags.contains(VmFlags::VM_LOCKED) {
        m.set(PG_MLOCKED);
        machine.vmstat().add(cpu, VmItem::NrMlock, nr);
        machine.vmstat().add(cpu, VmItem::UnevictablePgsMlocked, nr);
    }
    mm.add_rss(cpu, RssItem::AnonPages, nr);
    machine.vmstat().add(cpu, VmItem::NrAnonPages, nr);
}

/// `compound_head`: the head of the folio `pfn` belongs to (itself for an order-0 page).
#[inline]
pub(crate) fn compound_head(phys: &PhysMem, pfn: Pfn) -> Pfn {
    let m = phys.meta(pfn);
    if m.test(PG_TAIL) {
        Pfn(u64::from(m.private.load(Relaxed)))
    } else {
        pfn
    }
}

/// `folio_entire_mapcount`: PMD mappings of a THP (its head's `private`).
#[inline]
pub(crate) fn entire_mapcount(head: &PageMeta) -> i32 {
    head.private.load(Relaxed) as i32
}

/// A PMD now maps the whole folio (`folio_add_anon_rmap_pmd`, `folio_try_dup_anon_rmap_pmd`).
/// Returns whether this is the folio's first mapping of any kind.
#[inline]
pub(crate) fn folio_try_dup_anon_rmap_pmd(phys: &PhysMem, head: Pfn) -> bool {
    // Shared now (fork): neither side may make its PMD, or the PTEs of a split, writable
    // without a write fault, even after the other side lets go.
    let m = phys.meta(head);
    if m.test(PG_ANON_EXCLUSIVE) {
        m.clear(PG_ANON_EXCLUSIVE);
    }
    let first = m.private.fetch_add(1, Relaxed) == 0;
    first && !pte_mapped(phys, head)
}

/// A PMD stopped mapping the folio (`folio_remove_rmap_pmd`). Returns whether the folio is
/// now mapped nowhere.
#[inline]
pub(crate) fn folio_remove_rmap_pmd(phys: &PhysMem, head: Pfn) -> bool {
    let old = phys.meta(head).private.fetch_sub(1, Relaxed);
    vm_bug_on!(old == 0, "entire mapcount below zero at {:#x}", head.0);
    old == 1 && !pte_mapped(phys, head)
}

/// A PTE of a PMD split now maps subpage `pfn` of an anonymous THP
/// (`folio_add_anon_rmap_ptes` as `__split_huge_pmd_locked` calls it, one page at a time): one
/// mapcount on the subpage. The folio reference is the caller's to take. The subpage is
/// `PageAnonExclusive` only if the THP was (`RMAP_EXCLUSIVE`): counts are not enough, since
/// a THP shared by fork and let go by the other side stays non-exclusive until a write fault
/// reuses it.
#[inline]
pub(crate) fn folio_add_anon_rmap_pte(phys: &PhysMem, pfn: Pfn, exclusive: bool) {
    phys.meta(pfn).mapcount.fetch_add(1, Relaxed);
    if exclusive {
        phys.meta(pfn).set(PG_ANON_EXCLUSIVE);
    } else {
        phys.meta(pfn).clear(PG_ANON_EXCLUSIVE);
    }
}

/// `can_change_pmd_writable` for an anonymous THP: mapped by this PMD alone and
/// `PageAnonExclusive` (a new THP, or one a write fault reused since fork shared it).
#[inline]
pub(crate) fn pmd_anon_exclusive(phys: &PhysMem, head: Pfn) -> bool {
    pmd_exclusive(phys, head) && phys.meta(head).test(PG_ANON_EXCLUSIVE)
}

/// A PTE now maps the shmem page `pfn` (`folio_add_file_rmap_pte`); the reference it holds
/// came from the shmem object.
#[inline]
pub(crate) fn folio_add_file_rmap_pte(phys: &PhysMem, pfn: Pfn) {
    phys.meta(pfn).mapcount.fetch_add(1, Relaxed);
}

/// A PMD now maps a new hugetlb page from the pool (`hugetlb_add_new_anon_rmap`): its only
/// mapping. The caller holds the PMD lock.
#[inline]
pub(crate) fn hugetlb_add_new_anon_rmap(phys: &PhysMem, page: Pfn) {
    phys.meta(page).mapcount.store(1, Relaxed);
}

/// fork copied a PMD mapping the hugetlb page `page` (`hugetlb_try_dup_anon_rmap`); the caller
/// takes the reference (`folio_get`).
#[inline]
pub(crate) fn hugetlb_try_dup_anon_rmap(phys: &PhysMem, page: Pfn) {
    phys.meta(page).mapcount.fetch_add(1, Relaxed);
}

/// A PMD stopped mapping the hugetlb page `page` (`hugetlb_remove_rmap`); the reference it held
/// is the caller's to drop.
#[inline]
pub(crate) fn hugetlb_remove_rmap(phys: &PhysMem, page: Pfn) {
    let old = phys.meta(page).mapcount.fetch_sub(1, Relaxed);
    vm_bug_on!(old <= 0, "hugetlb mapcount below zero at {:#x}", page.0);
}

/// Does any PTE map a subpage of the THP at `head`?
pub(crate) fn pte_mapped(phys: &PhysMem, head: Pfn) -> bool {
    (0..HPAGE_PMD_NR).any(|i| phys.meta(head.add(i)).map_count() != 0)
}

/// `folio_mapcount` of the folio containing `pfn`'s point of view for a page: PTE mappings of
/// this page plus PMD mappings of its folio.
#[inline]
pub(crate) fn total_mapcount(phys: &PhysMem, pfn: Pfn) -> i32 {
    let head = compound_head(phys, pfn);
    let hm = phys.meta(head);
    let entire = if hm.test(PG_HEAD) {
        entire_mapcount(hm)
    } else {
        0
    };
    phys.meta(pfn).map_count() + entire
}

/// A PTE now maps `pfn` (`folio_try_dup_anon_rmap_pte` at fork, or a PMD split): one mapcount
/// on the page, one reference on its folio. Returns whether the page was mapped nowhere.
#[inline]
pub(crate) fn folio_try_dup_anon_rmap_pte(phys: &PhysMem, pfn: Pfn) -> bool {
    let first = total_mapcount(phys, pfn) == 0;
    // Shared now: neither side may make its PTE writable without a write fault.
    let m = phys.meta(pfn);
    if m.test(PG_ANON_EXCLUSIVE) {
        m.clear(PG_ANON_EXCLUSIVE);
    }
    phys.meta(pfn).mapcount.fetch_add(1, Relaxed);
    phys.get_page(compound_head(phys, pfn));
    first
}

/// A PTE stopped mapping `pfn` (`folio_remove_rmap_pte`); the reference it held is the
/// caller's to drop (through the gather, or `put_page` on [`compound_head`]). Returns whether
/// the page is now mapped nowhere.
#[inline]
pub(crate) fn folio_remove_rmap_pte(phys: &PhysMem, pfn: Pfn) -> bool {
    // The zap's write of the unmapped page's struct page: its cost is in the measured zap;
    // the line is now the zapping CPU's (where a worker that frees the page finds it).
    vhook::mem_touch_page(pfn.0, Touch::Measured);
    let old = phys.meta(pfn).mapcount.fetch_sub(1, Relaxed);
    vm_bug_on!(old <= 0, "mapcount below zero at {:#x}", pfn.0);
    total_mapcount(phys, pfn) == 0
}

/// Is the order-0 anonymous page at `pfn`, mapped by the caller's PTE, mapped by nobody else?
/// (`wp_can_reuse_anon_folio` before large folios could be reused: a subpage of a THP is never
/// reused, it is copied.)
#[inline]
pub(crate) fn pte_exclusive(phys: &PhysMem, pfn: Pfn) -> bool {
    let m = phys.meta(pfn);
    !m.test(PG_HEAD) && !m.test(PG_TAIL) && m.map_count() == 1
}

/// `can_change_pte_writable` for a private anonymous page: only a page marked
/// `PageAnonExclusive` ([`PG_ANON_EXCLUSIVE`]) — mapped new or reused by a write fault since
/// fork last shared it — may be made writable by mprotect without a fault. The counts alone
/// ([`pte_exclusive`]) are not enough: after the other side of a fork exits the page is
/// mapped once, yet Linux keeps its PTE read-only until a write fault reuses it.
#[inline]
pub(crate) fn pte_anon_exclusive(phys: &PhysMem, pfn: Pfn) -> bool {
    pte_exclusive(phys, pfn) && phys.meta(pfn).test(PG_ANON_EXCLUSIVE)
}

/// `wp_page_reuse` of an anonymous page: the write fault found it mapped once, so it is
/// exclusive again (`folio_move_anon_rmap` + `SetPageAnonExclusive`).
#[inline]
pub(crate) fn wp_reuse_anon(phys: &PhysMem, pfn: Pfn) {
    // Most reuses find it set already (a page written, mprotected read-only and back): a load,
    // no RMW, on the write fault's path.
    let m = phys.meta(pfn);
    if !m.test(PG_ANON_EXCLUSIVE) {
        m.set(PG_ANON_EXCLUSIVE);
    }
}

/// Is the THP at `head`, mapped by the caller's PMD, mapped by nothing else?
pub(crate) fn pmd_exclusive(phys: &PhysMem, head: Pfn) -> bool {
    entire_mapcount(phys.meta(head)) == 1 && !pte_mapped(phys, head)
}
