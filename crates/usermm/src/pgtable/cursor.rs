//! The table cursor: a page-table page with its split lock held, the one way to write a run of
//! its entries.
//!
//! Mirrors the locked inner loops of `mm/memory.c`, `mm/mprotect.c`, `mm/mremap.c` and
//! `mm/huge_memory.c`: `pte_offset_map_lock` (or `pmd_lock`), then `pte++`/`addr += PAGE_SIZE`
//! over the entries of one table, then `pte_unmap_unlock` — `zap_pte_range`,
//! `change_pte_range`, `copy_pte_range` (two tables), `move_ptes` (two), `move_normal_pmd` and
//! `move_huge_pmd` (two PMD tables), `__split_huge_pmd_locked`, and the deposit list of a PMD
//! table page (`pgtable_trans_huge_deposit`/`_withdraw`, `mm/pgtable-generic.c`).
//!
//! ```text
//!  TableCursor::lock(phys, table, Level::Pte)   takes the PTL (Level::Pmd: the PMD lock)
//!     .get(addr) .take(addr) .write(addr, e) .set(addr, e)    entries by virtual address
//!  drop                                          unlocks
//!  TablePair::lock(phys, level, first, second)   first's lock, then second's unless the same page
//! ```
//!
//! # Invariants
//! 1. An entry of a PTE or PMD table is written only through a cursor or a
//!    [`LockedSlot`](super::LockedSlot) (which is a cursor on one slot): the lock is in the
//!    type. Outside the table module only the backing that holds the entries reaches them
//!    (`tests/source_rules.rs` keeps `mm/` off them). A cursor borrows the [`PhysMem`] it locked in, so it cannot outlive it.
//! 2. Entries are addressed by virtual address, the index being the cursor's business: the
//!    caller names the address its loop is at, as the kernel's loops move `pte` and `addr`
//!    together.
//! 3. A table withdrawn from a PMD table's deposit list ([`Withdrawn`]) is filled only under
//!    that PMD table's lock, before the PMD points to it ([`TableCursor::populate`]): no walker
//!    can reach it, so its own lock is not needed, as in the kernel's split.
//!
//! # Locks
//! The lock is the table page's split lock (`PageMeta::ptl`), of class `PTL` for a PTE table
//! and `PMD_LOCK` for a PMD table. A [`TablePair`] takes its first table's lock, then the
//! second's (child before parent in fork's copy, old before new in mremap's move, as the
//! crate's lock order says) and releases them in the reverse order; one lock when both are the
//! same page.
//!
//! # Costs
//! [`TableCursor::set`] is `set_pte_at`/`set_pmd_at` and charges one `SetPte`, as
//! [`LockedSlot::set`](super::LockedSlot::set) does; [`TableCursor::write`] and
//! [`TableCursor::take`] are the run writers' stores and clears, which charge nothing: the
//! walks that make them price their runs themselves (`ZapPte` per cleared entry in the zap) or
//! not at all. Loads are free.
//!
//! # Differences
//! Asterinas's `ostd::mm::page_table::Cursor` is the same idea — an object that holds the locks
//! of the tables it may touch and moves over them by virtual address — with its own lock
//! protocol (a whole subtree locked for a range). This one keeps Linux's split locks: a cursor
//! locks one table page (two for a pair), and a walk that moves to the next table drops one
//! cursor and opens the next, as the kernel's loops do; the lockless upper levels are walked by
//! `walk.rs`.

use crate::backing::TableEntry;
use crate::sync::primitive::atomic::Ordering::{Relaxed, Release};

use super::{Entry, Level};
use crate::addr::Pfn;
use crate::page_alloc::PhysMem;
use crate::sync::vhook::{ClockKind, Current};
use crate::sync::{charge, Cost, PtLockGuard};

/// A PTE or PMD table page whose split lock is held: its entries, read and written by virtual
/// address. Dropping it unlocks. `C` is the clock its lock was taken on ([`PtLockGuard`]):
/// [`Current`] unless a fault that decided its clock took it ([`TableCursor::lock_on`]).
#[must_use = "if unused the page-table lock is released at once"]
pub(crate) struct TableCursor<'a, C: ClockKind = Current> {
    pub(super) phys: &'a PhysMem,
    table: Pfn,
    level: Level,
    _ptl: PtLockGuard<'a, C>,
}

impl<C: ClockKind> std::fmt::Debug for TableCursor<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableCursor")
            .field("table", &self.table)
            .field("level", &self.level)
            .finish_non_exhaustive()
    }
}

impl<'a> TableCursor<'a> {
    /// Take the split lock of `table`, a table page of level `level` (`Level::Pte`:
    /// `pte_offset_map_lock`, class `PTL`; `Level::Pmd`: `pmd_lock`, class `PMD_LOCK`).
    #[doc(alias = "pte_offset_map_lock")]
    #[doc(alias = "pmd_lock")]
    #[inline]
    pub(crate) fn lock(phys: &'a PhysMem, table: Pfn, level: Level) -> Self {
        Self::lock_on(Current, phys, table, level)
    }
}

impl<'a, C: ClockKind> TableCursor<'a, C> {
    /// [`TableCursor::lock`] on the clock `clock` ([`PtLock::lock_on`]).
    ///
    /// [`PtLock::lock_on`]: crate::sync::PtLock::lock_on
    #[inline]
    pub(crate) fn lock_on(clock: C, phys: &'a PhysMem, table: Pfn, level: Level) -> Self {
        let ptl = phys
            .meta(table)
            .ptl
            .lock_on(clock, level.split_lock_class());
        TableCursor {
            phys,
            table,
            level,
            _ptl: ptl,
        }
    }

    /// The locked table page.
    #[inline]
    pub(crate) fn table(&self) -> Pfn {
        self.table
    }

    #[inline]
    fn entry(&self, index: usize) -> &TableEntry {
        &self.phys.backing().table(self.table)[index]
    }

    /// The entry mapping `addr`, under the lock.
    #[inline]
    pub(crate) fn get(&self, addr: u64) -> Entry {
        Entry(self.entry(self.level.index(addr)).load(Relaxed))
    }

    /// Clear the entry mapping `addr` and return what it was (`ptep_get_and_clear`).
    #[doc(alias = "ptep_get_and_clear")]
    #[doc(alias = "ptep_get_and_clear_full")]
    #[inline]
    pub(crate) fn take(&self, addr: u64) -> Entry {
        self.take_index(self.level.index(addr))
    }

    #[inline]
    pub(super) fn take_index(&self, index: usize) -> Entry {
        Entry(self.entry(index).swap(0, Relaxed))
    }

    /// Store `e` as the entry mapping `addr`: a write of a run (`ptep_modify_prot_commit`,
    /// `ptep_set_wrprotect`, the copy's and the move's `set_pte_at`), priced by its walk, not
    /// here (module doc, "Costs").
    #[doc(alias = "ptep_modify_prot_commit")]
    #[doc(alias = "ptep_set_wrprotect")]
    #[inline]
    pub(crate) fn write(&self, addr: u64, e: Entry) {
        self.entry(self.level.index(addr)).store(e.0, Release);
    }

    /// `set_pte_at` / `set_pmd_at` of one entry: one `SetPte`.
    #[doc(alias = "set_pmd_at")]
    #[inline]
    pub(crate) fn set(&self, addr: u64, e: Entry) {
        charge(Cost::SetPte, 1);
        self.write(addr, e);
    }

    /// `pgtable_trans_huge_deposit`: put `table` on this PMD table's deposit list, for a huge
    /// PMD of it to split into later.
    ///
    /// As in the kernel with split PMD locks, the deposited tables of a PMD table page form a
    /// list headed in that page's descriptor (`ptdesc->pmd_huge_pte`) and threaded through the
    /// deposited pages' own list link (`pgtable->lru`): [`PageMeta::pmd_huge_pte`] and
    /// [`PageMeta::deposit_next`]. So a fault deposits with two stores: no allocation, no other
    /// lock. The list is under the PMD lock, which this cursor holds.
    ///
    /// [`PageMeta::pmd_huge_pte`]: crate::page_alloc::PageMeta::pmd_huge_pte
    /// [`PageMeta::deposit_next`]: crate::page_alloc::PageMeta::deposit_next
    #[doc(alias = "pgtable_trans_huge_deposit")]
    pub(crate) fn deposit(&self, table: Pfn) {
        vm_bug_on!(self.level != Level::Pmd, "deposit on a PTE table");
        let pmd_table = self.phys.meta(self.table);
        self.phys
            .meta(table)
            .set_deposit_next(pmd_table.pmd_huge_pte());
        pmd_table.set_pmd_huge_pte(Some(table));
    }

    /// `pgtable_trans_huge_withdraw`: take a deposited table off this PMD table's list (any
    /// one: they are all unused).
    #[doc(alias = "pgtable_trans_huge_withdraw")]
    pub(crate) fn withdraw(&self) -> Option<Withdrawn> {
        vm_bug_on!(self.level != Level::Pmd, "withdraw from a PTE table");
        let pmd_table = self.phys.meta(self.table);
        let first = pmd_table.pmd_huge_pte()?;
        let m = self.phys.meta(first);
        pmd_table.set_pmd_huge_pte(m.deposit_next());
        m.set_deposit_next(None);
        Some(Withdrawn(first))
    }

    /// Fill the 512 entries of a table withdrawn from this PMD table's deposit list, entry `i`
    /// with `f(i)` in index order, before a PMD of this table points to it (`set_ptes` into the
    /// withdrawn table of `__split_huge_pmd_locked`; invariant 3).
    #[doc(alias = "set_ptes")]
    pub(crate) fn populate(&self, table: &Withdrawn, mut f: impl FnMut(usize) -> Entry) {
        for (i, e) in self.phys.backing().table(table.0).iter().enumerate() {
            e.store(f(i).0, Relaxed);
        }
    }
}

/// A table taken off a PMD table's deposit list: not in the page-table tree, reachable by no
/// walker, written only by [`TableCursor::populate`] under the lock of the PMD table it came
/// from. The caller installs it (a split) or frees it.
#[must_use = "a withdrawn table is installed or freed"]
#[derive(Debug)]
pub(crate) struct Withdrawn(Pfn);

impl Withdrawn {
    /// The table page, for installing or freeing it.
    #[inline]
    pub(crate) fn pfn(&self) -> Pfn {
        self.0
    }
}

/// Two table pages of one level locked together: fork's copy (the child's table, then the
/// parent's) and mremap's move (the old table, then the new). One lock when both are the same
/// page, and then [`TablePair::first`] and [`TablePair::second`] are the same cursor.
#[must_use = "if unused the page-table locks are released at once"]
#[derive(Debug)]
pub(crate) struct TablePair<'a> {
    // Declared second first: fields drop in order, so the second lock is released before the
    // first, as two guards held in locals would be.
    second: Option<TableCursor<'a>>,
    first: TableCursor<'a>,
}

impl<'a> TablePair<'a> {
    /// Lock `first`, then `second` unless it is the same page (`spin_lock_nested`).
    pub(crate) fn lock(phys: &'a PhysMem, level: Level, first: Pfn, second: Pfn) -> Self {
        let first_cursor = TableCursor::lock(phys, first, level);
        let second = (second != first).then(|| TableCursor::lock(phys, second, level));
        TablePair {
            second,
            first: first_cursor,
        }
    }

    /// The table locked first.
    #[inline]
    pub(crate) fn first(&self) -> &TableCursor<'a> {
        &self.first
    }

    /// The table locked second (the first, when they are the same page).
    #[inline]
    pub(crate) fn second(&self) -> &TableCursor<'a> {
        self.second.as_ref().unwrap_or(&self.first)
    }
}

#[cfg(all(test, not(loom)))]
mod test {
    use std::sync::Arc;

    use super::*;
    use crate::addr::{PAGE_SIZE, PMD_SIZE};
    use crate::config::MachineConfig;
    use crate::cpu::{CpuId, Cpus};
    use crate::pgtable::{alloc_deposit_table, alloc_table, free_deposit_table, free_table, Slot};
    use crate::stats::VmStat;

    const C0: CpuId = CpuId(0);

    fn phys() -> PhysMem {
        let cfg = MachineConfig {
            mem: 4 << 20,
            cpus: 2,
            nodes: 1,
            ..Default::default()
        };
        PhysMem::new(&cfg, Cpus::new(2, 1), Arc::new(VmStat::new(2))).unwrap()
    }

    #[test]
    fn entries_are_addressed_by_virtual_address_and_the_lock_is_held() {
        let p = phys();
        let t = alloc_table(&p, C0).unwrap();
        let base = 0x7f00_0000_0000u64;
        {
            let pte = TableCursor::lock(&p, t, Level::Pte);
            assert!(p.meta(t).ptl.is_locked());
            let e = Entry::new(Pfn(42), 1);
            pte.write(base + 3 * PAGE_SIZE, e);
            assert_eq!(pte.get(base + 3 * PAGE_SIZE), e);
            // The entry is the one a lockless walk of that address reads.
            assert_eq!(
                Slot::offset(t, Level::Pte, base + 3 * PAGE_SIZE).load(&p),
                e
            );
            assert_eq!(pte.take(base + 3 * PAGE_SIZE), e);
            assert!(pte.get(base + 3 * PAGE_SIZE).is_none());
        }
        assert!(!p.meta(t).ptl.is_locked(), "dropping the cursor unlocks");
        // A PMD table is indexed by 2 MiB.
        {
            let pmd = TableCursor::lock(&p, t, Level::Pmd);
            pmd.write(base + 5 * PMD_SIZE, Entry::new(Pfn(7), 1));
            assert_eq!(
                Slot::offset(t, Level::Pmd, base + 5 * PMD_SIZE).load(&p),
                Entry::new(Pfn(7), 1)
            );
            pmd.take(base + 5 * PMD_SIZE);
        }
        free_table(&p, C0, t);
        p.validate().unwrap();
    }

    #[test]
    fn a_pair_of_one_table_takes_one_lock() {
        let p = phys();
        let (a, b) = (alloc_table(&p, C0).unwrap(), alloc_table(&p, C0).unwrap());
        {
            let one = TablePair::lock(&p, Level::Pte, a, a);
            assert!(std::ptr::eq(one.first(), one.second()));
            assert!(p.meta(a).ptl.is_locked());
            one.second().write(0, Entry::new(Pfn(9), 1));
            assert_eq!(one.first().take(0), Entry::new(Pfn(9), 1));
        }
        assert!(!p.meta(a).ptl.is_locked());
        {
            let two = TablePair::lock(&p, Level::Pte, a, b);
            assert!(p.meta(a).ptl.is_locked() && p.meta(b).ptl.is_locked());
            assert_eq!((two.first().table(), two.second().table()), (a, b));
        }
        assert!(!p.meta(a).ptl.is_locked() && !p.meta(b).ptl.is_locked());
        free_table(&p, C0, a);
        free_table(&p, C0, b);
        p.validate().unwrap();
    }

    #[test]
    fn a_withdrawn_table_is_filled_under_the_pmd_lock() {
        let p = phys();
        let pmd_table = alloc_table(&p, C0).unwrap();
        let (d1, d2) = (
            alloc_deposit_table(&p, C0).unwrap(),
            alloc_deposit_table(&p, C0).unwrap(),
        );
        let pmd = TableCursor::lock(&p, pmd_table, Level::Pmd);
        pmd.deposit(d1);
        pmd.deposit(d2);
        // Last in, first out, like the kernel's list.
        let w = pmd.withdraw().expect("two deposited");
        assert_eq!(w.pfn(), d2);
        pmd.populate(&w, |i| Entry::new(Pfn(1000 + i as u64), 1));
        for i in [0usize, 1, 511] {
            let e = Slot {
                table: d2,
                index: i,
            }
            .load(&p);
            assert_eq!(e.pfn(), Pfn(1000 + i as u64));
        }
        assert_eq!(pmd.withdraw().map(|w| w.pfn()), Some(d1));
        assert!(pmd.withdraw().is_none());
        drop(pmd);
        for i in 0..512 {
            Slot {
                table: d2,
                index: i,
            }
            .store(&p, Entry::NONE);
        }
        free_deposit_table(&p, C0, d1);
        free_table(&p, C0, d2);
        free_table(&p, C0, pmd_table);
        p.validate().unwrap();
    }
}
