//! Tearing mappings down: the zap walk, `free_pgtables`, `exit_mmap`; and the page-table
//! walkers that other paths share (protection changes, THP splits, validation).
//!
//! Mirrors `mm/memory.c` (`unmap_vmas`, `unmap_page_range`, `zap_pud_range`, `zap_pmd_range`,
//! `zap_pte_range`, `free_pgd_range`, `free_pgtables`), `mm/huge_memory.c` (`zap_huge_pmd`,
//! `__split_huge_pmd`, `change_huge_pmd`), `mm/mprotect.c` (`change_protection`) and
//! `mm/mmap.c` (`exit_mmap`).
//!
//! # zap_pte_range, as here
//! Lock the PTE page's PTL; for each entry: clear it, widen the gather's range, and — for a
//! normal page — drop its mapcount and queue it in the gather; count the rss change locally.
//! Publish the rss deltas while the PTL is held. If the gather reported full: flush the TLB
//! *before* dropping the PTL, then free after unlocking, and resume at the next address.
//!
//! # free_pgd_range, floor and ceiling
//! A table is freed only when the whole aligned span it maps lies between `floor` (end of the
//! previous VMA) and `ceiling` (start of the next; 0 = top of the address space). Arithmetic is
//! on `x − 1` so that a ceiling of 0 means the top, as in the kernel.
//!
//! # Differences from Linux
//! A PMD split also splits the THP itself into 512 order-0 pages at once (`__split_huge_page`),
//! where Linux keeps the folio PTE-mapped and splits it later (deferred split). No
//! `need_resched` break-outs: the walk never yields mid-table.

use std::sync::atomic::Ordering::Relaxed;

use super::mmu_gather::{FullMm, MmuGather};
use super::pgtable_alias::*;
use super::{rmap, Mm, RssItem, UnmapStats};
use crate::addr::{Pfn, PAGE_SIZE, PGDIR_SIZE, PMD_SIZE, PTRS_PER_TABLE, PUD_SIZE};
use crate::cpu::CpuId;
use crate::page_alloc::meta::{PG_ANON, PG_HUGETLB, PG_MLOCKED};
use crate::page_alloc::PhysMem;
use crate::pgtable::{_PAGE_PRESENT, _PAGE_PROTNONE, _PAGE_PSE, _PAGE_RW, _PAGE_SPECIAL};
use crate::stats::VmItem;
use crate::sync::class::{PMD_LOCK, PTL};
use crate::sync::{charge, Cost};

#[inline]
fn addr_end(addr: u64, size: u64, end: u64) -> u64 {
    ((addr & !(size - 1)) + size).min(end)
}

/// Zap every mapping in `[start, end)` (`unmap_page_range` over all levels; the body of
/// `unmap_single_vma`, which `unmap_vmas` calls per VMA).
#[doc(alias = "unmap_page_range")]
#[doc(alias = "unmap_single_vma")]
pub(crate) fn zap_range(tlb: &mut MmuGather<'_>, mm: &Mm, start: u64, end: u64) -> u64 {
    let phys = mm.machine().phys();
    let mut zapped = 0;
    let mut addr = start;
    while addr < end {
        let next = addr_end(addr, PGDIR_SIZE, end);
        let e = Slot {
            table: mm.pgd(),
            index: pgd_index(addr),
        }
        .load(phys);
        if !e.is_none() {
            let mut a = addr;
            while a < next {
                let n = addr_end(a, PUD_SIZE, next);
                let pud = Slot {
                    table: e.pfn(),
                    index: pud_index(a),
                }
                .load(phys);
                if !pud.is_none() {
                    // pgd_offset + pud_offset of this span.
                    charge(Cost::PtWalkLevel, 2);
                    zapped += zap_pmd_range(tlb, mm, pud.pfn(), a, n);
                }
                a = n;
            }
        }
        addr = next;
    }
    zapped
}

fn zap_pmd_range(tlb: &mut MmuGather<'_>, mm: &Mm, pmd_table: Pfn, start: u64, end: u64) -> u64 {
    let phys = mm.machine().phys();
    let mut zapped = 0;
    let mut addr = start;
    while addr < end {
        let next = addr_end(addr, PMD_SIZE, end);
        let slot = Slot {
            table: pmd_table,
            index: pmd_index(addr),
        };
        let mut e = slot.load(phys);
        if e.huge() {
            if addr.is_multiple_of(PMD_SIZE) && next - addr == PMD_SIZE {
                if let Some(n) = zap_huge_pmd(tlb, mm, slot, addr) {
                    zapped += n;
                    addr = next;
                    continue;
                }
                // A split won the PMD lock: zap the PTE table it left (fall through).
            } else {
                split_huge_pmd(mm, tlb.cpu(), slot, addr & !(PMD_SIZE - 1));
            }
            e = slot.load(phys);
        }
        if !e.is_none() {
            zapped += zap_pte_range(tlb, mm, e.pfn(), addr, next);
        }
        addr = next;
    }
    zapped
}

fn zap_pte_range(tlb: &mut MmuGather<'_>, mm: &Mm, pte_table: Pfn, start: u64, end: u64) -> u64 {
    let machine = mm.machine();
    let phys = machine.phys();
    let cpu = tlb.cpu();
    let table = phys.backing().table(pte_table);
    let mut addr = start;
    let mut zapped = 0;
    // pmd_offset + pte_offset_map of this table.
    charge(Cost::PtWalkLevel, 2);
    loop {
        let mut force_flush = false;
        // rss of this mm per entry; NR_ANON_MAPPED and NR_MLOCK once per page, at its last
        // unmapping (another mm of a fork may still map it).
        let (mut anon, mut shmem, mut mlocked, mut unmapped) = (0i64, 0i64, 0i64, 0i64);
        // Entries cleared and pages gathered under this hold of the PTL, charged (one batch per
        // table) before it is released.
        let (zapped0, mut gathered) = (zapped, 0u64);
        let ptl = phys.meta(pte_table).ptl.lock(&PTL);
        while addr < end {
            let slot = &table[pte_index(addr)];
            if slot.load(Relaxed) == 0 {
                addr += PAGE_SIZE;
                continue;
            }
            let old = Entry(slot.swap(0, Relaxed));
            tlb.remove_tlb_entry(addr, PAGE_SIZE);
            addr += PAGE_SIZE;
            zapped += 1;
            if old.special() {
                continue;
            }
            let pfn = old.pfn();
            let head = rmap::compound_head(phys, pfn);
            let m = phys.meta(head);
            let last = rmap::remove_pte_map(phys, pfn);
            if m.test(PG_ANON) {
                anon += 1;
                unmapped += i64::from(last);
            } else {
                shmem += 1;
            }
            if last && m.test(PG_MLOCKED) {
                mlocked += 1;
            }
            gathered += 1;
            // The PTE's reference is on the folio (its head), not on a subpage.
            if tlb.remove_page(head) {
                force_flush = true;
                break;
            }
        }
        // add_mm_rss_vec under the PTL.
        mm.add_rss(cpu, RssItem::AnonPages, -anon);
        mm.add_rss(cpu, RssItem::ShmemPages, -shmem);
        machine.vmstat().add(cpu, VmItem::NrAnonPages, -unmapped);
        if mlocked != 0 {
            machine.vmstat().add(cpu, VmItem::NrMlock, -mlocked);
        }
        charge(Cost::ZapPte, zapped - zapped0);
        charge(Cost::GatherPage, gathered);
        if force_flush {
            tlb.flush_tlbonly();
        }
        drop(ptl);
        if force_flush {
            tlb.forced_flush();
        }
        if addr >= end {
            return zapped;
        }
    }
}

/// `zap_huge_pmd`: a whole 2 MiB mapping (THP, huge zero page, hugetlb). `None` when the
/// PMD is no longer huge under its lock (a split won the race): the caller zaps the PTE table
/// instead.
fn zap_huge_pmd(tlb: &mut MmuGather<'_>, mm: &Mm, slot: Slot, addr: u64) -> Option<u64> {
    let machine = mm.machine();
    let phys = machine.phys();
    let cpu = tlb.cpu();
    let ptl = phys.meta(slot.table).ptl.lock(&PMD_LOCK);
    if !slot.load(phys).huge() {
        return None;
    }
    let old = slot.take(phys);
    tlb.remove_tlb_entry(addr, PMD_SIZE);
    charge(Cost::ZapPte, 1);
    let deposit = withdraw_deposit(mm, slot);
    drop(ptl);
    if let Some(t) = deposit {
        // zap_deposited_table: the withdrawn table was never a live table.
        crate::pgtable::free_deposit_table(phys, cpu, t);
        mm.nr_tables.fetch_sub(1, Relaxed);
    }
    let pfn = old.pfn();
    if old.special() {
        machine.huge_zero().zap_put(cpu);
        return Some(512);
    }
    let m = phys.meta(pfn);
    if m.test(PG_HUGETLB) {
        m.mapcount.fetch_sub(1, Relaxed);
    } else {
        let rss = if m.test(PG_ANON) {
            RssItem::AnonPages
        } else {
            RssItem::ShmemPages
        };
        mm.add_rss(cpu, rss, -512);
        let last_pmd = rmap::entire_mapcount(m) == 1;
        if rmap::remove_pmd_map(phys, pfn) {
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
    charge(Cost::GatherPage, 1);
    if tlb.remove_page(pfn) {
        tlb.forced_flush();
    }
    Some(512)
}

/// Deposit a table for a huge PMD (`pgtable_trans_huge_deposit`). Caller holds the PMD lock
/// of `slot.table`, which protects the deposit list.
///
/// As in the kernel with split PMD locks, the deposited tables of a PMD table page form a
/// list headed in that page's descriptor (`ptdesc->pmd_huge_pte`) and threaded through the
/// deposited pages' own list link (`pgtable->lru`): [`PageMeta::pmd_huge_pte`] and
/// [`PageMeta::deposit_next`]. So a fault deposits with two stores: no allocation, no other
/// lock.
///
/// [`PageMeta::pmd_huge_pte`]: crate::page_alloc::PageMeta::pmd_huge_pte
/// [`PageMeta::deposit_next`]: crate::page_alloc::PageMeta::deposit_next
pub(crate) fn deposit(mm: &Mm, slot: Slot, table: Pfn) {
    let phys = mm.machine().phys();
    let pmd_table = phys.meta(slot.table);
    // assert_spin_locked(pmd_lockptr(mm, pmdp))
    vm_bug_on!(!pmd_table.ptl.is_locked(), "deposit without the PMD lock");
    phys.meta(table).set_deposit_next(pmd_table.pmd_huge_pte());
    pmd_table.set_pmd_huge_pte(Some(table));
}

/// `pgtable_trans_huge_withdraw`: take a deposited table off the list of `slot`'s PMD table
/// (any one: they are all unused). Caller holds the PMD lock.
pub(crate) fn withdraw_deposit(mm: &Mm, slot: Slot) -> Option<Pfn> {
    let phys = mm.machine().phys();
    let pmd_table = phys.meta(slot.table);
    vm_bug_on!(!pmd_table.ptl.is_locked(), "withdraw without the PMD lock");
    let first = pmd_table.pmd_huge_pte()?;
    let m = phys.meta(first);
    pmd_table.set_pmd_huge_pte(m.deposit_next());
    m.set_deposit_next(None);
    Some(first)
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

/// `__split_huge_pmd`: replace a huge PMD by its deposited PTE table mapping the same memory
/// 4 KiB at a time. A THP is split into 512 order-0 pages; the huge zero page becomes 512
/// zero-page PTEs; hugetlb PMDs are never split.
pub(crate) fn split_huge_pmd(mm: &Mm, cpu: CpuId, slot: Slot, haddr: u64) {
    let machine = mm.machine();
    let phys = machine.phys();
    let ptl = phys.meta(slot.table).ptl.lock(&PMD_LOCK);
    let old = slot.load(phys);
    if !old.huge() {
        return;
    }
    let Some(table) = withdraw_deposit(mm, slot) else {
        vm_bug_on!(true, "huge PMD without a deposited table");
        return;
    };
    let bits = old.0 & !(_PAGE_PSE) & 0x8000_0000_0000_0fff;
    let pfn = old.pfn();
    let entries = phys.backing().table(table);
    if old.special() {
        // The huge zero page: 512 read-only zero-page PTEs. The PMD's reference goes away.
        let zero = machine.zero_pfn();
        let b = (bits & !_PAGE_RW) | _PAGE_SPECIAL;
        for e in entries.iter() {
            e.store(Entry::new(zero, b).0, Relaxed);
        }
        machine.huge_zero().zap_put(cpu);
    } else if !rmap::pmd_exclusive(phys, pfn) {
        // Another mm maps the folio too (fork), by PMD or by PTEs: map its subpages from this
        // mm's PTEs and keep it whole (Linux would queue a deferred split). Each PTE holds a
        // reference on the folio where the PMD held one.
        vm_bug_on!(phys.meta(pfn).test(PG_HUGETLB), "splitting a hugetlb PMD");
        for (i, e) in entries.iter().enumerate() {
            let p = pfn.add(i as u64);
            phys.meta(p).mapcount.fetch_add(1, Relaxed);
            e.store(Entry::new(p, bits).0, Relaxed);
        }
        phys.meta(pfn)
            .refcount
            .fetch_add(PTRS_PER_TABLE as i32 - 1, Relaxed);
        if rmap::entire_mapcount(phys.meta(pfn)) == 1 {
            machine
                .vmstat()
                .add(cpu, VmItem::NrAnonTransparentHugepages, -1);
        }
        rmap::remove_pmd_map(phys, pfn);
    } else {
        vm_bug_on!(phys.meta(pfn).test(PG_HUGETLB), "splitting a hugetlb PMD");
        // The only mapping: split the folio itself now (`__split_huge_page`).
        phys.meta(pfn).private.store(0, Relaxed);
        let mlocked = phys.meta(pfn).test(PG_MLOCKED);
        phys.split_compound(cpu, pfn);
        for (i, e) in entries.iter().enumerate() {
            let p = pfn.add(i as u64);
            let m = phys.meta(p);
            m.mapcount.store(1, Relaxed);
            m.set(PG_ANON);
            if mlocked {
                m.set(PG_MLOCKED);
            }
            if i > 0 {
                phys.lru_cache_add(cpu, p);
            }
            e.store(Entry::new(p, bits).0, Relaxed);
        }
        machine
            .vmstat()
            .add(cpu, VmItem::NrAnonTransparentHugepages, -1);
    }
    // pmdp_invalidate + populate: the TLB may hold the 2 MiB translation. The invalidated
    // PMD is not present to the MMU but still huge (not none) to software walkers, as the
    // kernel's pmd_mkinvalid keeps _PAGE_PSE: a zap running under the read lock (DONTNEED)
    // that reads it without the lock goes to zap_huge_pmd and waits for this lock, where a
    // none PMD would make it skip the 2 MiB and leave the split's 512 pages mapped.
    slot.store(phys, old.with_bits(0, _PAGE_PRESENT | _PAGE_PROTNONE));
    mm.flush_tlb(cpu, Some(512));
    slot.store(phys, Entry::new(table, crate::pgtable::TABLE_BITS));
    drop(ptl);
    machine.vmstat().inc(cpu, VmItem::ThpSplitPmd);
    let _ = haddr;
}

/// `split_folio` of a PMD-mapped anonymous THP (what `MADV_FREE`, `MADV_COLD` and
/// `MADV_PAGEOUT` do to a THP they cover only in part): split the PMD, then
/// `remap_page(.., RMP_USE_SHARED_ZEROPAGE)` — every subpage whose data is all zero is
/// replaced by the shared zero page (read-only, not in Rss) and freed. Mlocked THPs are left
/// alone (the callers refuse `VM_LOCKED` VMAs anyway); the huge zero page is never split here.
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
    let entries = phys.backing().table(table.pfn());
    let mut tlb = MmuGather::new(mm, cpu, FullMm::No);
    let mut data = vec![0u8; PAGE_SIZE as usize];
    let mut i = 0;
    while i < PTRS_PER_TABLE {
        let mut force_flush = false;
        let mut freed = 0i64;
        let ptl = phys.meta(table.pfn()).ptl.lock(&PTL);
        while i < PTRS_PER_TABLE {
            let addr = haddr + i as u64 * PAGE_SIZE;
            let e = Entry(entries[i].load(Relaxed));
            i += 1;
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
            entries[i - 1].store(
                Entry::new(zero, (bits & !_PAGE_RW) | _PAGE_SPECIAL).0,
                Relaxed,
            );
            tlb.remove_tlb_entry(addr, PAGE_SIZE);
            m.mapcount.fetch_sub(1, Relaxed);
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
        drop(ptl);
        if force_flush {
            tlb.forced_flush();
        }
    }
    let _ = tlb.finish();
}

/// `free_pgd_range`: free the tables that map only `[addr, end)`, within `floor`/`ceiling`.
pub(crate) fn free_pgd_range(
    tlb: &mut MmuGather<'_>,
    mm: &Mm,
    addr: u64,
    end: u64,
    floor: u64,
    ceiling: u64,
) {
    let phys = mm.machine().phys();
    let mut addr = addr & !(PMD_SIZE - 1);
    if addr < floor {
        addr += PMD_SIZE;
        if addr == 0 {
            return;
        }
    }
    let mut end = end;
    if ceiling != 0 {
        let c = ceiling & !(PMD_SIZE - 1);
        if c == 0 {
            return;
        }
        if end.wrapping_sub(1) > c.wrapping_sub(1) {
            end -= PMD_SIZE;
        }
    }
    if addr > end.wrapping_sub(1) {
        return;
    }
    let mut a = addr;
    while a < end {
        let next = addr_end(a, PGDIR_SIZE, end);
        let slot = Slot {
            table: mm.pgd(),
            index: pgd_index(a),
        };
        let e = slot.load(phys);
        if !e.is_none() {
            free_pud_range(tlb, mm, slot, e.pfn(), a, next, floor, ceiling);
        }
        a = next;
    }
}

#[allow(clippy::too_many_arguments)]
fn free_pud_range(
    tlb: &mut MmuGather<'_>,
    mm: &Mm,
    pgd_slot: Slot,
    pud_table: Pfn,
    start: u64,
    end: u64,
    floor: u64,
    ceiling: u64,
) {
    let phys = mm.machine().phys();
    let mut a = start;
    while a < end {
        let next = addr_end(a, PUD_SIZE, end);
        let slot = Slot {
            table: pud_table,
            index: pud_index(a),
        };
        let e = slot.load(phys);
        if !e.is_none() {
            free_pmd_range(tlb, mm, slot, e.pfn(), a, next, floor, ceiling);
        }
        a = next;
    }
    if !span_free(start, end, PGDIR_SIZE, floor, ceiling) {
        return;
    }
    let _g = mm.page_table_lock.lock();
    pgd_slot.store(phys, Entry::NONE);
    drop(_g);
    mm.nr_tables.fetch_sub(1, Relaxed);
    tlb.remove_table(pud_table);
}

#[allow(clippy::too_many_arguments)]
fn free_pmd_range(
    tlb: &mut MmuGather<'_>,
    mm: &Mm,
    pud_slot: Slot,
    pmd_table: Pfn,
    start: u64,
    end: u64,
    floor: u64,
    ceiling: u64,
) {
    let phys = mm.machine().phys();
    let mut a = start;
    while a < end {
        let next = addr_end(a, PMD_SIZE, end);
        let slot = Slot {
            table: pmd_table,
            index: pmd_index(a),
        };
        let e = slot.load(phys);
        if !e.is_none() && !e.huge() {
            // free_pte_range
            slot.store(phys, Entry::NONE);
            mm.nr_tables.fetch_sub(1, Relaxed);
            tlb.remove_table(e.pfn());
        }
        a = next;
    }
    if !span_free(start, end, PUD_SIZE, floor, ceiling) {
        return;
    }
    let _g = mm.page_table_lock.lock();
    pud_slot.store(phys, Entry::NONE);
    drop(_g);
    mm.nr_tables.fetch_sub(1, Relaxed);
    tlb.remove_table(pmd_table);
}

/// May the table mapping the `size`-aligned span around `[start, end)` go?
fn span_free(start: u64, end: u64, size: u64, floor: u64, ceiling: u64) -> bool {
    let s = start & !(size - 1);
    if s < floor {
        return false;
    }
    if ceiling != 0 {
        let c = ceiling & !(size - 1);
        if c == 0 {
            return false;
        }
        if end.wrapping_sub(1) > c.wrapping_sub(1) {
            return false;
        }
    }
    true
}

/// `free_pgtables` for a list of detached ranges (address order), between `floor` and
/// `ceiling`: ranges closer than a PMD share one `free_pgd_range` call.
pub(crate) fn free_pgtables(
    tlb: &mut MmuGather<'_>,
    mm: &Mm,
    ranges: &[(u64, u64)],
    floor: u64,
    ceiling: u64,
) {
    let mut i = 0;
    while i < ranges.len() {
        let start = ranges[i].0;
        let mut end = ranges[i].1;
        let mut j = i + 1;
        while j < ranges.len() && ranges[j].0 <= end + PMD_SIZE {
            end = ranges[j].1;
            j += 1;
        }
        let ceil = if j < ranges.len() {
            ranges[j].0
        } else {
            ceiling
        };
        free_pgd_range(tlb, mm, start, end, floor, ceil);
        i = j;
    }
}

/// `exit_mmap`: zap everything with a full-mm gather, free every table but the PGD, free the
/// VMAs.
pub(crate) fn exit_mmap(mm: &Mm, cpu: CpuId) -> UnmapStats {
    let t0 = crate::sync::clock::now();
    let machine = mm.machine();
    machine.phys().lru_add_drain(cpu);
    let mut tree = mm.mmap_lock.write();
    let ranges: Vec<(u64, u64)> = tree
        .intersecting(0, u64::MAX)
        .map(|v| (v.start, v.end))
        .collect();
    // VM_LOCKED pages need no munlock pass: the zap drops NR_MLOCK and release_pages takes
    // them off the unevictable list.
    let mut tlb = MmuGather::new(mm, cpu, FullMm::Yes);
    let mut zapped = 0;
    for &(s, e) in &ranges {
        zapped += zap_range(&mut tlb, mm, s, e);
    }
    free_pgtables(&mut tlb, mm, &ranges, 0, 0);
    let gs = tlb.finish();
    tree.clear();
    drop(tree);
    UnmapStats {
        total_ns: t0.elapsed_ns(),
        exclusive_ns: t0.elapsed_ns(),
        read_ns: 0,
        downgraded: false,
        pages_zapped: zapped,
        tlb_flushes: gs.tlb_flushes,
    }
}

/// Rewrite the permission bits of every mapping in `[start, end)` (`change_protection`).
/// Exclusive anonymous pages become writable at once when the VMA allows writing; the zero
/// pages never do.
#[allow(clippy::too_many_arguments)]
pub(crate) fn change_protection(
    mm: &Mm,
    cpu: CpuId,
    start: u64,
    end: u64,
    read: bool,
    write: bool,
    exec: bool,
    cow: bool,
) {
    let machine = mm.machine();
    let phys = machine.phys();
    let leaf = crate::pgtable::leaf_bits(read, write, exec);
    // x86 has no write-only pages: a write-only VMA's read-only entries (zero page, COW) stay
    // readable.
    let leaf_ro = crate::pgtable::leaf_bits(read || write, false, exec);
    let mut changed = false;
    let mut addr = start;
    while addr < end {
        match crate::pgtable::walk(phys, mm.pgd(), addr) {
            crate::pgtable::Walk::Hole { level, .. } => {
                let size = match level {
                    crate::pgtable::Level::Pgd => PGDIR_SIZE,
                    crate::pgtable::Level::Pud => PUD_SIZE,
                    _ => PMD_SIZE,
                };
                addr = addr_end(addr, size, end);
            }
            crate::pgtable::Walk::HugePmd { pmd, .. } => {
                let next = addr_end(addr, PMD_SIZE, end);
                if !addr.is_multiple_of(PMD_SIZE) || next - addr != PMD_SIZE {
                    split_huge_pmd(mm, cpu, pmd, addr & !(PMD_SIZE - 1));
                    continue;
                }
                let ptl = phys.meta(pmd.table).ptl.lock(&PMD_LOCK);
                let e = pmd.load(phys);
                if e.huge() {
                    let keep = e.0 & (_PAGE_SPECIAL | _PAGE_PSE);
                    // can_change_pmd_writable: a folio another mm shares stays read-only.
                    let excl = !cow
                        || if phys.meta(e.pfn()).test(PG_HUGETLB) {
                            phys.meta(e.pfn()).map_count() == 1
                        } else {
                            rmap::pmd_exclusive(phys, e.pfn())
                        };
                    let w = write && !e.special() && excl;
                    let b = if w { leaf } else { leaf_ro };
                    pmd.store(phys, Entry::new(e.pfn(), b | keep));
                    changed = true;
                }
                drop(ptl);
                addr = next;
            }
            crate::pgtable::Walk::Pte { pmd, .. } => {
                let next = addr_end(addr, PMD_SIZE, end);
                let table = pmd.load(phys).pfn();
                let ptl = phys.meta(table).ptl.lock(&PTL);
                let entries = phys.backing().table(table);
                while addr < next {
                    let s = &entries[pte_index(addr)];
                    let e = Entry(s.load(Relaxed));
                    if e.maps_frame() {
                        // can_change_pte_writable: not a page shared copy-on-write.
                        let w =
                            write && !e.special() && (!cow || rmap::pte_exclusive(phys, e.pfn()));
                        let b = if w { leaf } else { leaf_ro };
                        s.store(Entry::new(e.pfn(), b | (e.0 & _PAGE_SPECIAL)).0, Relaxed);
                        changed = true;
                    }
                    addr += PAGE_SIZE;
                }
                drop(ptl);
            }
        }
    }
    if changed {
        mm.flush_tlb(cpu, Some((end - start) / PAGE_SIZE));
    }
}

/// Visit every mapped leaf (`(addr, entry, is_huge)`), for reports and validation. The
/// caller keeps the page tables stable (mmap lock).
pub(crate) fn for_each_leaf(phys: &PhysMem, pgd: Pfn, mut f: impl FnMut(u64, Entry, bool)) {
    let t = phys.backing().table(pgd);
    for (i, e) in t.iter().enumerate() {
        let e = Entry(e.load(Relaxed));
        if e.is_none() {
            continue;
        }
        let a0 = (i as u64) * PGDIR_SIZE;
        for (j, e) in phys.backing().table(e.pfn()).iter().enumerate() {
            let e = Entry(e.load(Relaxed));
            if e.is_none() {
                continue;
            }
            let a1 = a0 + j as u64 * PUD_SIZE;
            for (k, e) in phys.backing().table(e.pfn()).iter().enumerate() {
                let e = Entry(e.load(Relaxed));
                if e.is_none() {
                    continue;
                }
                let a2 = a1 + k as u64 * PMD_SIZE;
                if e.huge() {
                    f(a2, e, true);
                    continue;
                }
                for (l, e) in phys.backing().table(e.pfn()).iter().enumerate() {
                    let e = Entry(e.load(Relaxed));
                    if e.maps_frame() {
                        f(a2 + l as u64 * PAGE_SIZE, e, false);
                    }
                }
            }
        }
    }
}

/// Visit every table page below the PGD: `(base address, span it maps, table pfn)`.
pub(crate) fn for_each_table(phys: &PhysMem, pgd: Pfn, mut f: impl FnMut(u64, u64, Pfn)) {
    for (i, e) in phys.backing().table(pgd).iter().enumerate() {
        let e = Entry(e.load(Relaxed));
        if e.is_none() {
            continue;
        }
        let a0 = i as u64 * PGDIR_SIZE;
        f(a0, PGDIR_SIZE, e.pfn());
        for (j, e) in phys.backing().table(e.pfn()).iter().enumerate() {
            let e = Entry(e.load(Relaxed));
            if e.is_none() {
                continue;
            }
            let a1 = a0 + j as u64 * PUD_SIZE;
            f(a1, PUD_SIZE, e.pfn());
            for (k, e) in phys.backing().table(e.pfn()).iter().enumerate() {
                let e = Entry(e.load(Relaxed));
                if !e.is_none() && !e.huge() {
                    f(a1 + k as u64 * PMD_SIZE, PMD_SIZE, e.pfn());
                }
            }
        }
    }
}
