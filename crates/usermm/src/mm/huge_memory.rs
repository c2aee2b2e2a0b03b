//! Transparent huge pages at the PMD: every operation on a huge PMD, side by side, as in the
//! kernel's `mm/huge_memory.c`.
//!
//! Mirrors `do_huge_pmd_anonymous_page` (with `__do_huge_pmd_anonymous_page`,
//! `vma_alloc_anon_folio_pmd`, `map_anon_folio_pmd`), `do_huge_pmd_wp_page`, `zap_huge_pmd`,
//! `__split_huge_pmd`, `copy_huge_pmd`, `move_huge_pmd`, `change_huge_pmd`,
//! `thp_vma_allowable_order`. The deposit list (`pgtable_trans_huge_deposit`/`_withdraw` of
//! `mm/pgtable-generic.c`) is the locked PMD table's: `pgtable::TableCursor::deposit`,
//! `withdraw` and `populate`. The huge zero page itself (its refcount policies, its shrinker)
//! is [`crate::huge_zero_page`]; the PTE-level fault, zap, copy and move paths that call into
//! this file are `fault/`, `memory.rs`, `fork.rs` and `mremap.rs`. Hugetlb PMDs pass through `zap_huge_pmd`, `copy_huge_pmd` and
//! `move_huge_pmd` too (the kernel's `mm/hugetlb.c` twins), never through a split.
//!
//! ```text
//!  PMD table page ── pmd_huge_pte ──► deposited PTE table ──► deposited PTE table ─► …
//!    entry: PSE | pfn of an order-9 folio (THP), of the huge zero page (special), or of a
//!           hugetlb page; every THP / huge-zero entry has one deposited table under it
//! ```
//!
//! # Invariants
//! 1. The deposit list of a PMD table page holds one table per THP or huge-zero PMD in it,
//!    taken at fault (or fork) time, so a split never allocates; hugetlb PMDs deposit none.
//! 2. A THP's entire mapcount counts its PMD mappings across the fork family; its 512 base
//!    pages are counted in `MM_ANONPAGES` of each mm that maps it whole.
//! 3. A split leaves the PMD invalidated but still huge (`pmdp_invalidate`) until the TLB is
//!    flushed, then points it at the PTE table: a lockless walker never sees it none.
//!
//! # Locks
//! Every entry change here is under the PMD lock of the entry's table (`pmd_lock`), which
//! also guards the deposit list: a `LockedSlot` or a `TablePair` of PMD tables (`pgtable`), so
//! the lock is in the type of every write. Lock order (`lib.rs`): `mmap_lock -> PMD lock -> PTE lock ->
//! pcp lock -> zone.lock`; across two mms or two PMDs, child before parent (`copy_huge_pmd`)
//! and old before new (`move_huge_pmd`). The huge zero page's references are atomics, taken
//! under the PMD lock at most.
//!
//! # Differences from Linux
//! A split of an exclusive THP splits the folio too, at once (`__split_huge_page`), where
//! Linux keeps it PTE-mapped and queues a deferred split; a THP shared with another mm stays
//! whole, PTE-mapped. No PUD-sized THP, no khugepaged (nothing collapses), no migration
//! entries: a split is one critical section under the PMD lock.

use std::sync::atomic::Ordering::Relaxed;

use super::mmu_gather::{FullMm, MmuGather};
use super::vma::{VmFlags, Vma, VmaKind};
use super::VmFault;
use super::{rmap, Mm, RssItem, VmFaultError, OOM};
use crate::addr::{Pfn, HPAGE_PMD_ORDER, PAGE_SIZE, PMD_SIZE, PTRS_PER_TABLE};
use crate::config::{HugeZeroWriteFault, ThpMode};
use crate::cpu::CpuId;
use crate::error::Errno;
use crate::page_alloc::meta::{PG_ANON, PG_ANON_EXCLUSIVE, PG_HUGETLB, PG_MLOCKED};
use crate::page_alloc::{Gfp, PhysMem};
use crate::pgtable::{
    self, Level, LockedSlot, TableCursor, TablePair, _PAGE_PRESENT, _PAGE_PROTNONE, _PAGE_PSE,
    _PAGE_RW, _PAGE_SPECIAL,
};
use crate::pgtable::{Entry, Slot};
use crate::stats::VmItem;
use crate::sync::vhook::Current;
use crate::sync::{charge, Cost};

/// Is an anonymous VMA eligible for THP at this address?
#[doc(alias = "thp_vma_allowable_order")]
#[inline]
pub(crate) fn thp_eligible(mm: &Mm, vma: &Vma, addr: u64) -> bool {
    // A private /dev/zero mapping is anonymous inside (vma_set_anonymous): eligible too.
    if !matches!(vma.kind, VmaKind::Anon | VmaKind::DevZero)
        || vma.flags.contains(VmFlags::VM_NOHUGEPAGE)
    {
        return false;
    }
    let allowed = match mm.machine().thp() {
        ThpMode::Never => false,
        ThpMode::Always => true,
        ThpMode::Madvise => vma.flags.contains(VmFlags::VM_HUGEPAGE),
    };
    let h = addr & !(PMD_SIZE - 1);
    allowed && h >= vma.start && h + PMD_SIZE <= vma.end
}

/// The tables deposited under the huge PMDs of the PMD table `pmd_table` (for validation; the
/// caller keeps the table stable).
pub(crate) fn deposited(phys: &PhysMem, pmd_table: Pfn) -> impl Iterator<Item = Pfn> + '_ {
    let mut cur = phys.meta(pmd_table).pmd_huge_pte();
    std::iter::from_fn(move || {
        let p = cur?;
        cur = phys.meta(p).deposit_next();
        Some(p)
    })
}

/// `vma_alloc_anon_folio_pmd`: a zeroed THP, never waiting; a failure counts
/// `thp_fault_fallback` and the caller falls back to 4 KiB pages.
#[doc(alias = "vma_alloc_anon_folio_pmd")]
fn alloc_anon_thp(mm: &Mm, cpu: CpuId) -> Option<Pfn> {
    let machine = mm.machine();
    match machine
        .phys()
        .alloc_pages(cpu, HPAGE_PMD_ORDER, Gfp::ZERO.union(Gfp::NOWAIT))
    {
        Ok(page) => Some(page),
        Err(_) => {
            machine.vmstat().inc(cpu, VmItem::ThpFaultFallback);
            None
        }
    }
}

/// `map_anon_folio_pmd`: map a fresh THP writable at an empty `pmd`, locked by the caller —
/// rmap, rss and the THP counters first, the PMD last. The caller adds the page to the LRU
/// once the PMD lock is dropped.
#[doc(alias = "map_anon_folio_pmd")]
fn map_anon_thp_pmd(mm: &Mm, vma: &Vma, cpu: CpuId, pmd: &LockedSlot<'_>, page: Pfn) {
    let machine = mm.machine();
    rmap::folio_add_new_anon_rmap(Current, mm, vma, cpu, page, 512);
    machine
        .vmstat()
        .inc(cpu, VmItem::NrAnonTransparentHugepages);
    machine.vmstat().inc(cpu, VmItem::ThpFaultAlloc);
    pmd.set(Entry::new(page, vma.leaf_bits(true) | _PAGE_PSE));
}

/// `do_huge_pmd_anonymous_page`. `None` means "fall back to 4 KiB" (no huge zero page, no
/// THP); `Some(Err(Oom))` that the PMD's deposit table could not be had (`pte_alloc_one` →
/// `VM_FAULT_OOM`, as in Linux: the table is allocated first on the read path, after the THP
/// on the write path).
pub(crate) fn do_huge_pmd_anonymous_page(vmf: &VmFault<'_>) -> Option<Result<(), VmFaultError>> {
    let (mm, vma, cpu, pmd) = (vmf.mm, vmf.vma, vmf.cpu, vmf.pmd());
    let machine = mm.machine();
    let phys = machine.phys();
    // vmf_anon_prepare comes first, also for a read that maps the huge zero page: the VMA
    // gets its anon_vma (which then keeps VM_ACCOUNT across mprotect and decides merges).
    rmap::anon_vma_prepare(mm, vmf.tree, vma);
    if !vmf.write {
        let Ok(table) = pgtable::alloc_deposit_table(phys, cpu) else {
            return Some(Err(OOM));
        };
        let hz = machine.huge_zero();
        let Some(zero) = hz.fault_get(&mm.flags, cpu) else {
            pgtable::free_deposit_table(phys, cpu, table);
            return None;
        };
        let Some(pmd) = pmd.lock_if_same(phys, Level::Pmd, Entry::NONE) else {
            hz.fault_unused(cpu);
            pgtable::free_deposit_table(phys, cpu, table);
            return Some(Ok(()));
        };
        pmd.table().deposit(table);
        mm.nr_tables.fetch_add(1, Relaxed);
        let b = vma.leaf_bits(false) | _PAGE_PSE | _PAGE_SPECIAL;
        pmd.set(Entry::new(zero, b));
        return Some(Ok(()));
    }
    let page = alloc_anon_thp(mm, cpu)?;
    let Ok(table) = pgtable::alloc_deposit_table(phys, cpu) else {
        let _ = phys.free_pages(cpu, page, HPAGE_PMD_ORDER);
        return Some(Err(OOM));
    };
    let Some(pmd) = pmd.lock_if_same(phys, Level::Pmd, Entry::NONE) else {
        let _ = phys.free_pages(cpu, page, HPAGE_PMD_ORDER);
        pgtable::free_deposit_table(phys, cpu, table);
        return Some(Ok(()));
    };
    pmd.table().deposit(table);
    mm.nr_tables.fetch_add(1, Relaxed);
    map_anon_thp_pmd(mm, vma, cpu, &pmd, page);
    drop(pmd);
    phys.lru_cache_add(cpu, page);
    Some(Ok(()))
}

/// `do_huge_pmd_wp_page`: write to a read-only huge PMD. `None` is `VM_FAULT_FALLBACK`: the
/// PMD was split (a THP shared with another mm, or the huge zero page under the split
/// policy or with no THP to be had), and the caller handles the written 4 KiB page as a PTE
/// fault.
pub(crate) fn do_huge_pmd_wp_page(vmf: &VmFault<'_>) -> Option<Result<(), VmFaultError>> {
    let (mm, vma, cpu, pmd) = (vmf.mm, vmf.vma, vmf.cpu, vmf.pmd());
    let machine = mm.machine();
    let phys = machine.phys();
    let e = pmd.load(phys);
    let haddr = vmf.address & !(PMD_SIZE - 1);
    if !e.special() {
        if !vma.is_cow_mapping() || rmap::pmd_exclusive(phys, e.pfn()) {
            // An exclusive THP (it lost its write bit to mprotect, or the other side of a
            // fork let go of it): reuse it.
            if let Some(pmd) = pmd.lock_if_same(phys, Level::Pmd, e) {
                if vma.is_cow_mapping() {
                    // folio_move_anon_rmap + SetPageAnonExclusive: this mm's alone again.
                    rmap::wp_reuse_anon(phys, e.pfn());
                }
                pmd.set(Entry::new(e.pfn(), vma.leaf_bits(true) | _PAGE_PSE));
            }
            return Some(Ok(()));
        }
        // Shared with another mm (fork): split the PMD and copy the one 4 KiB page written
        // (`__split_huge_pmd` + `VM_FAULT_FALLBACK`, since v5.8).
        split_huge_pmd(mm, cpu, pmd, haddr);
        return None;
    }
    if machine.huge_zero().write_fault_policy() == HugeZeroWriteFault::AllocThp {
        rmap::anon_vma_prepare(mm, vmf.tree, vma);
        if let Some(page) = alloc_anon_thp(mm, cpu) {
            let Some(locked) = pmd.lock_if_same(phys, Level::Pmd, e) else {
                let _ = phys.free_pages(cpu, page, HPAGE_PMD_ORDER);
                return Some(Ok(()));
            };
            // Replace the huge zero PMD: clear, flush, install. The deposit stays.
            locked.set(Entry::NONE);
            mm.flush_tlb(cpu, Some(512));
            map_anon_thp_pmd(mm, vma, cpu, &locked, page);
            drop(locked);
            machine.huge_zero().zap_put(cpu);
            phys.lru_cache_add(cpu, page);
            return Some(Ok(()));
        }
    }
    // Split to zero-page PTEs, then COW the one page.
    split_huge_pmd(mm, cpu, pmd, haddr);
    None
}

/// `zap_huge_pmd`: a whole 2 MiB mapping (THP, huge zero page, hugetlb). `None` when the
/// PMD is no longer huge under its lock (a split won the race): the caller zaps the PTE table
/// instead.
pub(crate) fn zap_huge_pmd(tlb: &mut MmuGather<'_>, mm: &Mm, slot: Slot, addr: u64) -> Option<u64> {
    let machine = mm.machine();
    let phys = machine.phys();
    let cpu = tlb.cpu();
    let pmd = slot.lock(phys, Level::Pmd);
    if !pmd.get().huge() {
        return None;
    }
    let old = pmd.take();
    tlb.remove_tlb_entry(addr, PMD_SIZE);
    charge(Cost::ZapPte, 1);
    let deposit = pmd.table().withdraw();
    drop(pmd);
    if let Some(t) = deposit {
        // zap_deposited_table: the withdrawn table was never a live table.
        crate::pgtable::free_deposit_table(phys, cpu, t.pfn());
        mm.nr_tables.fetch_sub(1, Relaxed);
    }
    let pfn = old.pfn();
    // The huge zero page has no rmap or rss to drop; it is gathered like any page
    // (`tlb_remove_page_size`, v4.7's "thp: keep huge zero page pinned until tlb flush"), and
    // its reference is dropped after the TLB flush, by `release_pages`
    // (`HugeZeroPage::release_put`), not here.
    if !old.special() {
        zap_huge_pmd_rmap(mm, cpu, pfn);
    }
    charge(Cost::GatherPage, 1);
    if tlb.remove_page(pfn) {
        tlb.forced_flush();
    }
    Some(512)
}

/// What `zap_huge_pmd` drops for a mapped THP or hugetlb page (not the huge zero page): its
/// PMD mapping in the rmap, the mm's rss and the node's counters.
fn zap_huge_pmd_rmap(mm: &Mm, cpu: CpuId, pfn: Pfn) {
    let machine = mm.machine();
    let phys = machine.phys();
    let m = phys.meta(pfn);
    if m.test(PG_HUGETLB) {
        rmap::hugetlb_remove_rmap(phys, pfn);
        return;
    }
    let rss = if m.test(PG_ANON) {
        RssItem::AnonPages
    } else {
        RssItem::ShmemPages
    };
    mm.add_rss(cpu, rss, -512);
    let last_pmd = rmap::entire_mapcount(m) == 1;
    if rmap::folio_remove_rmap_pmd(phys, pfn) {
        machine.vmstat().add(cpu, VmItem::NrAnonPages, -512);
        if m.test(PG_MLOCKED) {
            machine.vmstat().add(cpu, VmItem::NrMlock, -512);
        }
    }
    if last_pmd {
        machine
            .vmstat()
            .add(cpu, VmItem::NrAnonTransparentHugepages, -1);
    }
}

/// `__split_huge_pmd`: replace a huge PMD by its deposited PTE table mapping the same memory
/// 4 KiB at a time. A THP is split into 512 order-0 pages; the huge zero page becomes 512
/// zero-page PTEs; hugetlb PMDs are never split.
#[doc(alias = "__split_huge_pmd")]
pub(crate) fn split_huge_pmd(mm: &Mm, cpu: CpuId, slot: Slot, haddr: u64) {
    let machine = mm.machine();
    let phys = machine.phys();
    let pmd = slot.lock(phys, Level::Pmd);
    let old = pmd.get();
    if !old.huge() {
        return;
    }
    let Some(table) = pmd.table().withdraw() else {
        vm_bug_on!(true, "huge PMD without a deposited table");
        return;
    };
    let bits = old.0 & !(_PAGE_PSE) & 0x8000_0000_0000_0fff;
    let pfn = old.pfn();
    // anon_exclusive of __split_huge_pmd_locked: the subpages inherit the THP's flag.
    let exclusive = phys.meta(pfn).test(PG_ANON_EXCLUSIVE);
    if old.special() {
        // The huge zero page: 512 read-only zero-page PTEs. The PMD's reference goes away.
        let zero = machine.zero_pfn();
        let b = (bits & !_PAGE_RW) | _PAGE_SPECIAL;
        pmd.table().populate(&table, |_| Entry::new(zero, b));
        machine.huge_zero().zap_put(cpu);
    } else if !rmap::pmd_exclusive(phys, pfn) {
        // Another mm maps the folio too (fork), by PMD or by PTEs: map its subpages from this
        // mm's PTEs and keep it whole (Linux would queue a deferred split). Each PTE holds a
        // reference on the folio where the PMD held one.
        vm_bug_on!(phys.meta(pfn).test(PG_HUGETLB), "splitting a hugetlb PMD");
        pmd.table().populate(&table, |i| {
            let p = pfn.add(i as u64);
            rmap::folio_add_anon_rmap_pte(phys, p, false);
            Entry::new(p, bits)
        });
        phys.meta(pfn)
            .refcount
            .fetch_add(PTRS_PER_TABLE as i32 - 1, Relaxed);
        if rmap::entire_mapcount(phys.meta(pfn)) == 1 {
            machine
                .vmstat()
                .add(cpu, VmItem::NrAnonTransparentHugepages, -1);
        }
        rmap::folio_remove_rmap_pmd(phys, pfn);
    } else {
        vm_bug_on!(phys.meta(pfn).test(PG_HUGETLB), "splitting a hugetlb PMD");
        // The only mapping: split the folio itself now (`__split_huge_page`).
        // Its one PMD mapping goes (entire mapcount 1 -> 0; no PTE maps it: pmd_exclusive).
        rmap::folio_remove_rmap_pmd(phys, pfn);
        let mlocked = phys.meta(pfn).test(PG_MLOCKED);
        phys.split_compound(cpu, pfn);
        pmd.table().populate(&table, |i| {
            let p = pfn.add(i as u64);
            let m = phys.meta(p);
            rmap::folio_add_anon_rmap_pte(phys, p, exclusive);
            m.set(PG_ANON);
            if mlocked {
                m.set(PG_MLOCKED);
            }
            if i > 0 {
                phys.lru_cache_add(cpu, p);
            }
            Entry::new(p, bits)
        });
        machine
            .vmstat()
            .add(cpu, VmItem::NrAnonTransparentHugepages, -1);
    }
    // pmdp_invalidate + populate: the TLB may hold the 2 MiB translation. The invalidated
    // PMD is not present to the MMU but still huge (not none) to software walkers, as the
    // kernel's pmd_mkinvalid keeps _PAGE_PSE: a zap running under the read lock (DONTNEED)
    // that reads it without the lock goes to zap_huge_pmd and waits for this lock, where a
    // none PMD would make it skip the 2 MiB and leave the split's 512 pages mapped.
    pmd.set(old.with_bits(0, _PAGE_PRESENT | _PAGE_PROTNONE));
    mm.flush_tlb(cpu, Some(512));
    pmd.set(Entry::new(table.pfn(), crate::pgtable::TABLE_BITS));
    drop(pmd);
    machine.vmstat().inc(cpu, VmItem::ThpSplitPmd);
    let _ = haddr;
}

/// `split_folio` of a PMD-mapped anonymous THP (what `MADV_FREE`, `MADV_COLD` and
/// `MADV_PAGEOUT` do to a THP they cover only in part): split the PMD, then
/// `remap_page(.., RMP_USE_SHARED_ZEROPAGE)` — every subpage whose data is all zero is
/// replaced by the shared zero page (read-only, not in Rss) and freed. Mlocked THPs are left
/// alone (the callers refuse `VM_LOCKED` VMAs anyway); the huge zero page is never split here.
#[doc(alias = "split_folio")]
pub(crate) fn split_thp_remap_zero(mm: &Mm, cpu: CpuId, slot: Slot, haddr: u64) {
    let machine = mm.machine();
    let phys = machine.phys();
    let old = slot.load(phys);
    if !old.huge()
        || old.special()
        || phys.meta(old.pfn()).test(PG_HUGETLB)
        || phys.meta(old.pfn()).test(PG_MLOCKED)
        || !rmap::pmd_exclusive(phys, old.pfn())
    {
        return;
    }
    split_huge_pmd(mm, cpu, slot, haddr);
    let table = slot.load(phys);
    if table.is_none() || table.huge() {
        return;
    }
    let zero = machine.zero_pfn();
    let mut tlb = MmuGather::new(mm, cpu, FullMm::No);
    let mut data = vec![0u8; PAGE_SIZE as usize];
    let (mut addr, end) = (haddr, haddr + PMD_SIZE);
    while addr < end {
        let mut force_flush = false;
        let mut freed = 0i64;
        let pte = TableCursor::lock(phys, table.pfn(), Level::Pte);
        while addr < end {
            let a = addr;
            let e = pte.get(a);
            addr += PAGE_SIZE;
            if !e.maps_frame() || e.special() {
                continue;
            }
            let m = phys.meta(e.pfn());
            if !m.test(PG_ANON) || m.test(PG_MLOCKED) || m.map_count() != 1 {
                continue;
            }
            phys.backing().read(e.pfn(), 0, &mut data);
            if data.iter().any(|&b| b != 0) {
                continue;
            }
            let bits = e.0 & 0x8000_0000_0000_0fff;
            pte.write(a, Entry::new(zero, (bits & !_PAGE_RW) | _PAGE_SPECIAL));
            tlb.remove_tlb_entry(a, PAGE_SIZE);
            rmap::folio_remove_rmap_pte(phys, e.pfn());
            freed += 1;
            if tlb.remove_page(e.pfn()) {
                force_flush = true;
                break;
            }
        }
        mm.add_rss(cpu, RssItem::AnonPages, -freed);
        machine.vmstat().add(cpu, VmItem::NrAnonPages, -freed);
        if force_flush {
            tlb.flush_tlbonly();
        }
        drop(pte);
        if force_flush {
            tlb.forced_flush();
        }
    }
    let _ = tlb.finish();
}

/// `copy_huge_pmd` (THP, huge zero page) and `copy_hugetlb_page_range` (one hugetlb PMD).
pub(crate) fn copy_huge_pmd(
    dst: &Mm,
    src: &Mm,
    cpu: CpuId,
    dst_pmd: Slot,
    src_pmd: Slot,
    cow: bool,
) -> Result<(), Errno> {
    let machine = src.machine();
    let phys = machine.phys();
    let e = src_pmd.load(phys);
    let hugetlb = !e.special() && phys.meta(e.pfn()).test(PG_HUGETLB);
    // A THP or huge-zero PMD needs a table deposited for a later split (pte_alloc_one).
    let table = if hugetlb {
        None
    } else {
        Some(pgtable::alloc_deposit_table(phys, cpu).map_err(|_| Errno::ENOMEM)?)
    };
    let zero = if e.special() {
        // mm_get_huge_zero_folio(dst_mm) / get_huge_zero_page: the page exists (the parent
        // holds it), so this never allocates.
        match machine.huge_zero().fault_get(&dst.flags, cpu) {
            Some(z) => Some(z),
            None => {
                if let Some(t) = table {
                    pgtable::free_deposit_table(phys, cpu, t);
                }
                return Err(Errno::ENOMEM);
            }
        }
    } else {
        None
    };
    // Lock order: child PMD lock -> parent PMD lock.
    let dst_locked = dst_pmd.lock(phys, Level::Pmd);
    let src_locked = src_pmd.lock(phys, Level::Pmd);
    let mut e = src_locked.get();
    vm_bug_on!(!e.huge(), "copy_huge_pmd of a PMD that stopped being huge");
    if let Some(z) = zero {
        vm_bug_on!(e.pfn() != z, "huge zero PMD maps another page");
    } else if hugetlb {
        rmap::hugetlb_try_dup_anon_rmap(phys, e.pfn());
        phys.get_page(e.pfn());
    } else {
        if rmap::folio_try_dup_anon_rmap_pmd(phys, e.pfn()) {
            machine.vmstat().add(cpu, VmItem::NrAnonPages, 512);
        }
        phys.get_page(e.pfn());
        dst.add_rss(cpu, RssItem::AnonPages, PTRS_PER_TABLE as i64);
    }
    if cow && e.writable() && zero.is_none() {
        e = e.with_bits(0, _PAGE_RW);
        src_locked.set(e);
    }
    if let Some(t) = table {
        dst_locked.table().deposit(t);
        dst.nr_tables.fetch_add(1, Relaxed);
    }
    dst_locked.set(e);
    Ok(())
}

/// `move_huge_pmd` (and `move_hugetlb_page_tables` for a hugetlb PMD): the entry mapping
/// `old_addr` in the PMD table `old` and its deposited table move to the entry mapping
/// `new_addr` in the PMD table `new`.
pub(crate) fn move_huge_pmd(mm: &Mm, old: Pfn, new: Pfn, old_addr: u64, new_addr: u64) {
    let phys = mm.machine().phys();
    // Lock order: old PMD lock -> new PMD lock.
    let pmds = TablePair::lock(phys, Level::Pmd, old, new);
    let e = pmds.first().take(old_addr);
    vm_bug_on!(
        !pmds.second().get(new_addr).is_none(),
        "move_huge_pmd onto a mapped PMD"
    );
    if !e.special() && phys.meta(e.pfn()).test(PG_HUGETLB) {
        pmds.second().set(new_addr, e);
        return;
    }
    if let Some(t) = pmds.first().withdraw() {
        pmds.second().deposit(t.pfn());
    }
    pmds.second().set(new_addr, e);
}

/// `change_huge_pmd`: rewrite the permission bits of one huge PMD that a protection change
/// covers whole, under its PMD lock: `leaf` if it may be writable, else `leaf_ro`. Returns
/// whether an entry changed (false when a split got there first). The huge zero page never
/// becomes writable, nor a folio another mm of the fork family shares (`cow`).
pub(crate) fn change_huge_pmd(
    mm: &Mm,
    pmd: Slot,
    leaf: u64,
    leaf_ro: u64,
    write: bool,
    cow: bool,
) -> bool {
    let phys = mm.machine().phys();
    let pmd = pmd.lock(phys, Level::Pmd);
    let e = pmd.get();
    if !e.huge() {
        return false;
    }
    let keep = e.0 & (_PAGE_SPECIAL | _PAGE_PSE);
    // can_change_pmd_writable: a folio another mm shares stays read-only.
    let excl = !cow
        || if phys.meta(e.pfn()).test(PG_HUGETLB) {
            phys.meta(e.pfn()).map_count() == 1
        } else {
            rmap::pmd_anon_exclusive(phys, e.pfn())
        };
    let w = write && !e.special() && excl;
    let b = if w { leaf } else { leaf_ro };
    pmd.set(Entry::new(e.pfn(), b | keep));
    true
}
