//! Tearing mappings down: the zap walk, `free_pgtables`, `exit_mmap`.
//!
//! Mirrors `mm/memory.c` (`unmap_vmas`, `unmap_page_range`, `zap_pud_range`, `zap_pmd_range`,
//! `zap_pte_range`, `free_pgd_range`, `free_pgtables`) and `mm/mmap.c` (`exit_mmap`). A huge
//! PMD on the way is zapped or split by `huge_memory.rs` (`zap_huge_pmd`, `__split_huge_pmd`);
//! protection changes are `mmap/mprotect.rs`'s.
//!
//! # zap_pte_range, as here
//! Lock the PTE page's PTL (a `TableCursor`, `pgtable/cursor.rs`); for each entry: clear it,
//! widen the gather's range, and — for a normal page — drop its mapcount and queue it in the
//! gather; count the rss change locally.
//! Publish the rss deltas while the PTL is held. If the gather reported full: flush the TLB
//! *before* dropping the PTL, then free after unlocking, and resume at the next address.
//!
//! # free_pgd_range, floor and ceiling
//! A table is freed only when the whole aligned span it maps lies between `floor` (end of the
//! previous VMA) and `ceiling` (start of the next; 0 = top of the address space). Arithmetic is
//! on `x − 1` so that a ceiling of 0 means the top, as in the kernel. The walk's levels come
//! from `pgtable::table_entries`; its clears are `pgtable`'s `pgd_clear` and `pud_clear` (under
//! `page_table_lock`) and `pmd_clear_detached` (no lock: the range is detached).
//!
//! # Differences from Linux
//! No `need_resched` break-outs: the walk never yields mid-table. (How a THP split differs:
//! `huge_memory.rs`.)

use std::sync::atomic::Ordering::Relaxed;

use super::huge_memory::{split_huge_pmd, zap_huge_pmd};
use super::mmu_gather::{FullMm, MmuGather};
use super::{rmap, Mm, RssItem, UnmapStats};
use crate::addr::{Pfn, PAGE_SIZE, PGDIR_SIZE, PMD_SIZE, PUD_SIZE};
use crate::cpu::CpuId;
use crate::page_alloc::meta::{PG_ANON, PG_MLOCKED};
use crate::pgtable::Slot;
use crate::pgtable::{self, pmd_tables, table_entries, Level, TableCursor};
use crate::stats::VmItem;
use crate::sync::{charge, Cost};

/// Zap every mapping in `[start, end)` (`unmap_page_range` over all levels; the body of
/// `unmap_single_vma`, which `unmap_vmas` calls per VMA).
#[doc(alias = "unmap_page_range")]
#[doc(alias = "unmap_single_vma")]
pub(crate) fn zap_range(tlb: &mut MmuGather<'_>, mm: &Mm, start: u64, end: u64) -> u64 {
    let phys = mm.machine().phys();
    let mut zapped = 0;
    for (pmd_table, a, n) in pmd_tables(phys, mm.pgd(), start, end) {
        // pgd_offset + pud_offset of this span.
        charge(Cost::PtWalkLevel, 2);
        zapped += zap_pmd_range(tlb, mm, pmd_table, a, n);
    }
    zapped
}

fn zap_pmd_range(tlb: &mut MmuGather<'_>, mm: &Mm, pmd_table: Pfn, start: u64, end: u64) -> u64 {
    let phys = mm.machine().phys();
    let mut zapped = 0;
    for (slot, mut e, addr, next) in table_entries(phys, pmd_table, Level::Pmd, start, end) {
        if e.huge() {
            if addr.is_multiple_of(PMD_SIZE) && next - addr == PMD_SIZE {
                if let Some(n) = zap_huge_pmd(tlb, mm, slot, addr) {
                    zapped += n;
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
    }
    zapped
}

fn zap_pte_range(tlb: &mut MmuGather<'_>, mm: &Mm, pte_table: Pfn, start: u64, end: u64) -> u64 {
    let machine = mm.machine();
    let phys = machine.phys();
    let cpu = tlb.cpu();
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
        let pte = TableCursor::lock(phys, pte_table, Level::Pte);
        while addr < end {
            if pte.get(addr).is_none() {
                addr += PAGE_SIZE;
                continue;
            }
            let old = pte.take(addr);
            tlb.remove_tlb_entry(addr, PAGE_SIZE);
            addr += PAGE_SIZE;
            zapped += 1;
            if old.special() {
                continue;
            }
            let pfn = old.pfn();
            let head = rmap::compound_head(phys, pfn);
            let m = phys.meta(head);
            let last = rmap::folio_remove_rmap_pte(phys, pfn);
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
        drop(pte);
        if force_flush {
            tlb.forced_flush();
        }
        if addr >= end {
            return zapped;
        }
    }
}

/// The bounds of a `free_p?d_range` walk: a table is freed only when the whole aligned span
/// it maps lies between `floor` and `ceiling` (0: the top of the address space).
#[derive(Debug, Clone, Copy)]
struct Bounds {
    floor: u64,
    ceiling: u64,
}

impl Bounds {
    /// May the table mapping the `size`-aligned span around `[start, end)` go?
    fn frees(self, start: u64, end: u64, size: u64) -> bool {
        if start & !(size - 1) < self.floor {
            return false;
        }
        if self.ceiling != 0 {
            let c = self.ceiling & !(size - 1);
            if c == 0 {
                return false;
            }
            if end.wrapping_sub(1) > c.wrapping_sub(1) {
                return false;
            }
        }
        true
    }
}

/// `free_pgd_range`: free the tables that map only `[addr, end)`, within `floor`/`ceiling`.
pub(crate) fn free_pgd_range(
    tlb: &mut MmuGather<'_>,
    addr: u64,
    end: u64,
    floor: u64,
    ceiling: u64,
) {
    let mm = tlb.mm();
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
    let bounds = Bounds { floor, ceiling };
    for (pgd, _, a, next) in table_entries(phys, mm.pgd(), Level::Pgd, addr, end) {
        free_pud_range(tlb, pgd, a, next, bounds);
    }
}

fn free_pud_range(tlb: &mut MmuGather<'_>, pgd: Slot, start: u64, end: u64, b: Bounds) {
    let mm = tlb.mm();
    let phys = mm.machine().phys();
    let pud_table = pgd.load(phys).pfn();
    for (pud, _, a, next) in table_entries(phys, pud_table, Level::Pud, start, end) {
        free_pmd_range(tlb, pud, a, next, b);
    }
    if b.frees(start, end, PGDIR_SIZE) {
        pgtable::pgd_clear(mm, pgd);
        free_table(tlb, pud_table);
    }
}

fn free_pmd_range(tlb: &mut MmuGather<'_>, pud: Slot, start: u64, end: u64, b: Bounds) {
    let mm = tlb.mm();
    let phys = mm.machine().phys();
    let pmd_table = pud.load(phys).pfn();
    for (pmd, e, _, _) in table_entries(phys, pmd_table, Level::Pmd, start, end) {
        if !e.huge() {
            // free_pte_range
            pgtable::pmd_clear_detached(phys, pmd);
            free_table(tlb, e.pfn());
        }
    }
    if b.frees(start, end, PUD_SIZE) {
        pgtable::pud_clear(mm, pud);
        free_table(tlb, pmd_table);
    }
}

/// `p?d_free_tlb` with `mm_dec_nr_p?ds`: count out a table whose entry was cleared and queue
/// it in the gather, which frees it after the TLB flush.
#[doc(alias = "pte_free_tlb")]
#[doc(alias = "pmd_free_tlb")]
#[doc(alias = "pud_free_tlb")]
fn free_table(tlb: &mut MmuGather<'_>, table: Pfn) {
    tlb.mm().nr_tables.fetch_sub(1, Relaxed);
    tlb.remove_table(table);
}

/// `free_pgtables` for a list of detached ranges (address order), between `floor` and
/// `ceiling`: ranges closer than a PMD share one `free_pgd_range` call.
pub(crate) fn free_pgtables(
    tlb: &mut MmuGather<'_>,
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
        free_pgd_range(tlb, start, end, floor, ceil);
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
    free_pgtables(&mut tlb, &ranges, 0, 0);
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
