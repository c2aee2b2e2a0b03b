//! The lockless walks of the page tables: one address ([`walk`], what the MMU does), a range
//! level by level (`pmd_tables`, `table_entries`, the `p?d_offset` loops with their
//! `p?d_addr_end` steps), and the whole-tree scans of reports and validation.
//!
//! Entries are loaded with `Acquire` and no lock (invariant 1 of the parent module): the
//! caller keeps the levels it walks stable (the mmap lock, or a detached range), and takes the
//! split lock of a table, through a [`TableCursor`](super::TableCursor) or a
//! [`LockedSlot`](super::LockedSlot), before it writes. A load costs nothing in virtual time; a
//! caller charges the levels it walked.

use crate::sync::primitive::atomic::Ordering::Relaxed;

use super::{addr_end, Entry, Level, Slot};
use crate::addr::{Pfn, PGDIR_SIZE, PUD_SIZE};
use crate::page_alloc::PhysMem;

/// The range walk from the PGD down to the PMD tables, written once: each present PMD table
/// that maps part of `[start, end)`, with the part `(table, addr, next)` it maps, in address
/// order — the `pgd_offset`/`pud_offset` loops with their `pgd_addr_end`/`pud_addr_end` steps
/// that `unmap_page_range` and `copy_page_range` open with. A none PGD entry skips its whole
/// span. Lockless, as those loops are: the caller keeps the upper levels stable (the range is
/// detached, or the mmap lock is held for writing). Entry loads cost nothing in virtual time;
/// a caller charges the levels it walked.
pub(crate) fn pmd_tables(phys: &PhysMem, pgd: Pfn, start: u64, end: u64) -> PmdTables<'_> {
    PmdTables {
        phys,
        pgd,
        addr: start,
        end,
    }
}

/// The iterator of [`pmd_tables`].
#[derive(Debug)]
pub(crate) struct PmdTables<'a> {
    phys: &'a PhysMem,
    pgd: Pfn,
    addr: u64,
    end: u64,
}

impl Iterator for PmdTables<'_> {
    /// A PMD table, and the part `[addr, next)` of the range it maps.
    type Item = (Pfn, u64, u64);

    fn next(&mut self) -> Option<(Pfn, u64, u64)> {
        while self.addr < self.end {
            let a = self.addr;
            let pgd = Slot::offset(self.pgd, Level::Pgd, a).load(self.phys);
            if pgd.is_none() {
                self.addr = addr_end(a, PGDIR_SIZE, self.end);
                continue;
            }
            let next = addr_end(a, PUD_SIZE, self.end);
            self.addr = next;
            let pud = Slot::offset(pgd.pfn(), Level::Pud, a).load(self.phys);
            if !pud.is_none() {
                return Some((pud.pfn(), a, next));
            }
        }
        None
    }
}

/// The PMD slot mapping `addr`, if the PGD and PUD entries above it are present; no table is
/// allocated (lockless, like [`pmd_tables`]).
#[doc(alias = "mm_find_pmd")]
pub(crate) fn find_pmd(phys: &PhysMem, pgd: Pfn, addr: u64) -> Option<Slot> {
    let (table, _, _) = pmd_tables(phys, pgd, addr, addr.checked_add(1)?).next()?;
    Some(Slot::offset(table, Level::Pmd, addr))
}

/// Where a lockless walk stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// No table at this level: the PGD/PUD/PMD entry at `slot` is none.
    Hole { level: Level, slot: Slot },
    /// A huge PMD entry.
    HugePmd { pmd: Slot, entry: Entry },
    /// The PTE slot (its value may be none).
    Pte { pmd: Slot, pte: Slot, entry: Entry },
}

/// A lockless walk from the PGD (what the MMU does): follows present table entries.
#[inline]
pub fn walk(phys: &PhysMem, pgd: Pfn, addr: u64) -> Walk {
    let mut table = pgd;
    for level in [Level::Pgd, Level::Pud] {
        let slot = Slot::offset(table, level, addr);
        let e = slot.load(phys);
        if e.is_none() {
            return Walk::Hole { level, slot };
        }
        table = e.pfn();
    }
    let pmd = Slot::offset(table, Level::Pmd, addr);
    let e = pmd.load(phys);
    if e.is_none() {
        return Walk::Hole {
            level: Level::Pmd,
            slot: pmd,
        };
    }
    if e.huge() {
        return Walk::HugePmd { pmd, entry: e };
    }
    let pte = Slot::offset(e.pfn(), Level::Pte, addr);
    Walk::Pte {
        pmd,
        pte,
        entry: pte.load(phys),
    }
}

/// The entries of one table page of level `level` that map part of `[start, end)` and are not
/// none, in address order: `(slot, entry, addr, next)`, `[addr, next)` being the part the entry
/// maps — the `p?d_offset` loop with its `p?d_addr_end` step over one table that
/// `zap_pmd_range`, `copy_pmd_range` and the `free_p?d_range` walk run (skipping none entries,
/// as their `p?d_none_or_clear_bad` does). Each entry is loaded when the walk reaches it.
pub(crate) fn table_entries(
    phys: &PhysMem,
    table: Pfn,
    level: Level,
    start: u64,
    end: u64,
) -> TableEntries<'_> {
    TableEntries {
        phys,
        table,
        level,
        addr: start,
        end,
    }
}

/// The iterator of [`table_entries`].
#[derive(Debug)]
pub(crate) struct TableEntries<'a> {
    phys: &'a PhysMem,
    table: Pfn,
    level: Level,
    addr: u64,
    end: u64,
}

impl Iterator for TableEntries<'_> {
    /// The slot, its entry, and the part `[addr, next)` of the range it maps.
    type Item = (Slot, Entry, u64, u64);

    fn next(&mut self) -> Option<(Slot, Entry, u64, u64)> {
        while self.addr < self.end {
            let a = self.addr;
            let next = addr_end(a, self.level.entry_size(), self.end);
            self.addr = next;
            let slot = Slot::offset(self.table, self.level, a);
            let e = slot.load(self.phys);
            if !e.is_none() {
                return Some((slot, e, a, next));
            }
        }
        None
    }
}

/// The 512 entries of a table page, in index order (for validation; the caller keeps the
/// table stable).
pub(crate) fn scan_table(phys: &PhysMem, table: Pfn) -> impl Iterator<Item = Entry> + '_ {
    phys.backing()
        .table(table)
        .iter()
        .map(|e| Entry(e.load(Relaxed)))
}

/// Visit every mapped leaf (`(addr, entry, is_huge)`), for reports and validation. The
/// caller keeps the page tables stable (mmap lock).
pub(crate) fn for_each_leaf(phys: &PhysMem, pgd: Pfn, mut f: impl FnMut(u64, Entry, bool)) {
    for_each_entry(phys, pgd, Level::Pte, &mut |level, addr, e| match level {
        Level::Pmd if e.huge() => f(addr, e, true),
        Level::Pte if e.maps_frame() => f(addr, e, false),
        _ => {}
    });
}

/// Visit every table page below the PGD: `(base address, span it maps, table pfn)`.
pub(crate) fn for_each_table(phys: &PhysMem, pgd: Pfn, mut f: impl FnMut(u64, u64, Pfn)) {
    for_each_entry(phys, pgd, Level::Pmd, &mut |level, addr, e| {
        if !e.huge() {
            f(addr, level.entry_size(), e.pfn());
        }
    });
}

/// Every entry of the tree under `pgd` that is not none, down to level `deepest`, in address
/// order: `f(level, addr, entry)`, a table entry's table walked right after it (a huge PMD
/// has none).
fn for_each_entry(phys: &PhysMem, pgd: Pfn, deepest: Level, f: &mut impl FnMut(Level, u64, Entry)) {
    fn table(
        phys: &PhysMem,
        t: Pfn,
        level: Level,
        base: u64,
        deepest: Level,
        f: &mut impl FnMut(Level, u64, Entry),
    ) {
        for (i, e) in scan_table(phys, t).enumerate() {
            if e.is_none() {
                continue;
            }
            let addr = base + i as u64 * level.entry_size();
            f(level, addr, e);
            let below = match level {
                Level::Pgd => Some(Level::Pud),
                Level::Pud => Some(Level::Pmd),
                Level::Pmd if !e.huge() => Some(Level::Pte),
                _ => None,
            };
            if let Some(below) = below.filter(|_| level != deepest) {
                table(phys, e.pfn(), below, addr, deepest, f);
            }
        }
    }
    table(phys, pgd, Level::Pgd, 0, deepest, f);
}
