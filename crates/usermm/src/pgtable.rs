//! Page tables: 4 levels of x86-64-shaped entries in real memory, with split locks.
//!
//! Mirrors `arch/x86/include/asm/pgtable_types.h` (the entry bits), `include/linux/pgtable.h`
//! (`pmd_addr_end` and its siblings), `mm/memory.c` (`__pte_alloc`, `__pmd_alloc`,
//! `__pud_alloc`: `pmd_alloc`, `pte_alloc`) and `include/linux/mm.h` (`pte_offset_map_lock`,
//! `pmd_lock`, `pte_lockptr`, `pmd_lockptr`, split PTLs in the `ptdesc`: `Slot::lock` and
//! `LockedSlot`; the locked table of a run of entries: `TableCursor`).
//!
//! ```text
//!  PGD page ─[47:39]→ PUD page ─[38:30]→ PMD page ─[29:21]→ PTE page ─[20:12]→ 4 KiB frame
//!                                            └─ PSE set: 2 MiB THP / huge zero page
//! ```
//! Every table page is a frame from [`PhysMem`], flagged `PG_table`,
//! counted in `nr_page_table_pages`, whose 512 entries are `AtomicU64` in the backing store.
//!
//! # Entry layout (x86-64)
//! bit 0 present, 1 RW, 2 user, 5 accessed, 6 dirty, 7 PSE (huge, at the PMD), 8 PROTNONE
//! (x86 reuses the global bit for `PROT_NONE` entries with present clear), 9 special
//! (`_PAGE_SPECIAL`: no `struct page` behind it — zero page, PFN maps), 12–51 the PFN,
//! 63 NX.
//!
//! # Locks and invariants
//! 1. Entries are read locklessly (a hardware walk). They are written under a lock — PGD and PUD
//!    entries under `mm.page_table_lock`, a PMD entry under the PMD table page's split lock
//!    (`pmd_lock`), a PTE under its PTE table page's split lock (`pte_lockptr`) — with one
//!    exception, as in the kernel: `free_pgtables` clears a PMD entry that points to a PTE
//!    table with no lock (`free_pte_range`'s `pmd_clear`). That is safe because the range's VMAs
//!    were detached under the mmap write lock first: no fault can find them to install an entry
//!    there, and the lockless walkers that may still read the old entry are waited out by the
//!    TLB flush before the table is freed (invariant 2).
//! 2. A table page is freed only after its parent entry was cleared and the range flushed
//!    from the TLB (`free_pgtables` via the gather).
//! 3. Lock order: `page_table_lock -> PMD lock -> PTE lock` (parent before child).
//! 4. A table is installed by the allocator under the lock of its parent level
//!    (`page_table_lock` for PGD and PUD entries, the PMD lock for a PMD entry), after a
//!    re-check that the slot is still none; the loser of a race frees its table.
//!
//! # Who writes an entry
//! Nothing outside this module and its `cursor` reaches a table page's entries for writing:
//! every write goes through a type that holds the lock that protects the entry.
//! - **One entry, split lock** — the fault paths. "Lock the PTL, load the entry again, compare
//!   it with what the lockless walk saw, bail if it changed": `Slot::lock` takes the split lock
//!   of the slot's table page and returns a `LockedSlot`, the proof that the lock is held;
//!   `LockedSlot::same` is the re-check (`pte_same`), `LockedSlot::set` the write
//!   (`set_pte_at`/`set_pmd_at`), and dropping it unlocks. `Slot::lock_if_same` is the whole
//!   sequence.
//! - **A run of entries, split lock** — zap, `change_protection`, fork's copy, mremap's move,
//!   the THP split: a `TableCursor` (`cursor.rs`) holds one PTE or PMD table page's lock and
//!   reads and writes its entries by address; a `TablePair` holds two (copy: child then
//!   parent; move: old then new).
//! - **PGD and PUD entries** — under `page_table_lock`: the allocator here (invariant 4) and
//!   `free_pgtables` (`pgd_clear`, `pud_clear`); `pmd_clear_detached` is invariant 1's
//!   exception.
//!
//! # Range walks (`walk.rs`)
//! Lockless, as the MMU's: [`walk()`] (one address), `pmd_tables` (the PGD and PUD levels of a
//! range, down to its PMD tables: zap and fork copy), `table_entries` (the entries of one table
//! over a range, with the `p?d_addr_end` steps: zap, copy and `free_pgd_range`), `find_pmd`
//! (mremap), and the whole-tree scans of reports and validation (`for_each_leaf`,
//! `for_each_table`, `scan_table`).
//!
//! # Differences from Linux
//! No p4d (folded, as with 4-level paging). The PGD page is counted in `PageTables` too.

use crate::backing::TableEntry;
use crate::sync::primitive::atomic::Ordering::{Acquire, Release};

use crate::addr::{Order, Pfn, PAGE_SHIFT, PGDIR_SHIFT, PMD_SHIFT, PUD_SHIFT};
use crate::cpu::CpuId;
use crate::error::AllocError;
use crate::page_alloc::meta::PG_PGTABLE;
use crate::page_alloc::{Gfp, PhysMem};
use crate::stats::VmItem;
use crate::sync::class::{PMD_LOCK, PTL};
use crate::sync::vhook::{Clock, ClockKind, Current};
use crate::sync::{charge, Cost, LockClass, SpinLockGuard};

mod cursor;
mod walk;

pub(crate) use self::cursor::{TableCursor, TablePair};
pub(crate) use self::walk::{
    find_pmd, for_each_leaf, for_each_table, pmd_tables, scan_table, table_entries,
};
pub use self::walk::{walk, Walk};

pub const _PAGE_PRESENT: u64 = 1 << 0;
pub const _PAGE_RW: u64 = 1 << 1;
pub const _PAGE_USER: u64 = 1 << 2;
pub const _PAGE_ACCESSED: u64 = 1 << 5;
pub const _PAGE_DIRTY: u64 = 1 << 6;
pub const _PAGE_PSE: u64 = 1 << 7;
pub const _PAGE_PROTNONE: u64 = 1 << 8;
pub const _PAGE_SPECIAL: u64 = 1 << 9;
pub const _PAGE_NX: u64 = 1 << 63;
const PFN_MASK: u64 = ((1u64 << 52) - 1) & !((1u64 << PAGE_SHIFT) - 1);

/// A table entry value at any level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry(pub u64);

impl Entry {
    pub const NONE: Entry = Entry(0);

    #[inline]
    pub fn new(pfn: Pfn, bits: u64) -> Entry {
        Entry((pfn.0 << PAGE_SHIFT) & PFN_MASK | bits)
    }
    #[inline]
    pub fn is_none(self) -> bool {
        self.0 == 0
    }
    #[inline]
    pub fn present(self) -> bool {
        self.0 & _PAGE_PRESENT != 0
    }
    /// Present, or a `PROT_NONE` entry that still maps a frame.
    #[inline]
    pub fn maps_frame(self) -> bool {
        self.0 & (_PAGE_PRESENT | _PAGE_PROTNONE) != 0
    }
    #[inline]
    pub fn writable(self) -> bool {
        self.0 & _PAGE_RW != 0
    }
    #[inline]
    pub fn huge(self) -> bool {
        self.0 & _PAGE_PSE != 0
    }
    #[inline]
    pub fn special(self) -> bool {
        self.0 & _PAGE_SPECIAL != 0
    }
    #[inline]
    pub fn pfn(self) -> Pfn {
        Pfn((self.0 & PFN_MASK) >> PAGE_SHIFT)
    }
    #[inline]
    pub fn with_bits(self, set: u64, clear: u64) -> Entry {
        Entry((self.0 | set) & !clear)
    }
}

/// The leaf bits for a mapping with these permissions (`vm_get_page_prot` + `mk_pte`).
/// `write` must already account for copy-on-write (no RW on the zero page).
#[inline]
pub fn leaf_bits(read: bool, write: bool, exec: bool) -> u64 {
    if !read && !write && !exec {
        // PROT_NONE: not present to the hardware, but still mapping the frame.
        return _PAGE_PROTNONE | _PAGE_USER | _PAGE_ACCESSED;
    }
    let mut b = _PAGE_PRESENT | _PAGE_USER | _PAGE_ACCESSED;
    if write {
        b |= _PAGE_RW | _PAGE_DIRTY;
    }
    if !exec {
        b |= _PAGE_NX;
    }
    b
}

/// Bits of a table (non-leaf) entry.
pub const TABLE_BITS: u64 = _PAGE_PRESENT | _PAGE_RW | _PAGE_USER | _PAGE_ACCESSED;

/// `pgd_addr_end`, `pud_addr_end`, `pmd_addr_end`: the end of the `size`-aligned span (the
/// reach of one entry at that level) that holds `addr`, or `end` if that comes first. The
/// step of every range walk over the tables.
#[doc(alias = "pmd_addr_end")]
#[doc(alias = "pud_addr_end")]
#[doc(alias = "pgd_addr_end")]
#[inline]
pub fn addr_end(addr: u64, size: u64, end: u64) -> u64 {
    ((addr & !(size - 1)) + size).min(end)
}

/// Page-table level names, for walks, holes and the levels a cursor may lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Pgd,
    Pud,
    Pmd,
    Pte,
}

impl Level {
    /// How far one entry of this level reaches (`PGDIR_SIZE`, `PUD_SIZE`, `PMD_SIZE`,
    /// `PAGE_SIZE`).
    #[inline]
    pub fn entry_size(self) -> u64 {
        1 << self.shift()
    }

    #[inline]
    fn shift(self) -> u32 {
        match self {
            Level::Pgd => PGDIR_SHIFT,
            Level::Pud => PUD_SHIFT,
            Level::Pmd => PMD_SHIFT,
            Level::Pte => PAGE_SHIFT,
        }
    }

    /// The index of `addr`'s entry in a table of this level (`pgd_index` … `pte_index`).
    #[doc(
        alias = "pgd_index",
        alias = "pud_index",
        alias = "pmd_index",
        alias = "pte_index"
    )]
    #[inline]
    pub fn index(self, addr: u64) -> usize {
        ((addr >> self.shift()) & 511) as usize
    }

    /// The class of the split lock of a table page of this level: the PMD lock of a PMD
    /// table, the PTL of a PTE table. PGD and PUD entries are under `page_table_lock`, which
    /// is no split lock (see [`pgd_clear`]).
    #[inline]
    fn split_lock_class(self) -> &'static LockClass {
        match self {
            Level::Pmd => &PMD_LOCK,
            Level::Pte => &PTL,
            Level::Pgd | Level::Pud => {
                unreachable!("PGD and PUD tables have no split lock: page_table_lock")
            }
        }
    }
}

/// One entry slot: a table page and an index in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub table: Pfn,
    pub index: usize,
}

impl Slot {
    /// `pgd_offset`, `pud_offset`, `pmd_offset`, `pte_offset`: the slot of `addr` in `table`,
    /// a table of level `level`.
    #[doc(alias = "pgd_offset")]
    #[doc(alias = "pud_offset")]
    #[doc(alias = "pmd_offset")]
    #[doc(alias = "pte_offset_kernel")]
    #[inline]
    pub fn offset(table: Pfn, level: Level, addr: u64) -> Slot {
        Slot {
            table,
            index: level.index(addr),
        }
    }

    #[inline]
    fn atomic<'a>(&self, phys: &'a PhysMem) -> &'a TableEntry {
        &phys.backing().table(self.table)[self.index]
    }
    #[inline]
    pub fn load(&self, phys: &PhysMem) -> Entry {
        Entry(self.atomic(phys).load(Acquire))
    }
    /// Write the entry (`set_pte_at` and its siblings: one `SetPte`). Private to the table
    /// module: outside it an entry is written through the lock that protects it — a
    /// [`LockedSlot`] or a [`TableCursor`] (split locks), [`pgd_clear`]/[`pud_clear`]
    /// (`page_table_lock`) — or by [`pmd_clear_detached`] (invariant 1's exception).
    #[inline]
    fn store(&self, phys: &PhysMem, e: Entry) {
        self.store_on(Current, phys, e);
    }

    /// [`Self::store`], its charge on clock `c` (`vhook::Clock`: a fault's).
    #[inline]
    fn store_on(&self, c: impl Clock, phys: &PhysMem, e: Entry) {
        c.charge(Cost::SetPte, 1);
        self.atomic(phys).store(e.0, Release)
    }

    /// Under loom only, for the negative control of `tests/loom_fault_zap.rs`: write the entry
    /// with no lock, which nothing in the engine can do.
    #[cfg(loom)]
    pub(crate) fn store_unlocked(&self, phys: &PhysMem, e: Entry) {
        self.store(phys, e)
    }

    /// Take the split lock of this slot's table page (`pte_offset_map_lock` for a PTE slot,
    /// class `PTL`; `pmd_lock` for a PMD slot, class `PMD_LOCK`): `level` is the level of the
    /// slot's table.
    #[doc(alias = "pte_offset_map_lock")]
    #[doc(alias = "pmd_lock")]
    #[inline]
    pub(crate) fn lock(self, phys: &PhysMem, level: Level) -> LockedSlot<'_> {
        self.lock_on(Current, phys, level)
    }

    /// [`Slot::lock`] on the clock `clock` (a fault's: `PtLock::lock_on`).
    #[inline]
    pub(crate) fn lock_on<C: ClockKind>(
        self,
        clock: C,
        phys: &PhysMem,
        level: Level,
    ) -> LockedSlot<'_, C> {
        LockedSlot {
            table: TableCursor::lock_on(clock, phys, self.table, level),
            index: self.index,
        }
    }

    /// [`Slot::lock`], then the re-check: `None` (the lock released again) when the entry is
    /// no longer `seen`, the value the caller decided on without the lock.
    #[inline]
    pub(crate) fn lock_if_same(
        self,
        phys: &PhysMem,
        level: Level,
        seen: Entry,
    ) -> Option<LockedSlot<'_>> {
        self.lock_if_same_on(Current, phys, level, seen)
    }

    /// [`Slot::lock_if_same`] on the clock `clock` (a fault's).
    #[inline]
    pub(crate) fn lock_if_same_on<C: ClockKind>(
        self,
        clock: C,
        phys: &PhysMem,
        level: Level,
        seen: Entry,
    ) -> Option<LockedSlot<'_, C>> {
        let l = self.lock_on(clock, phys, level);
        l.same(seen).then_some(l)
    }
}

/// A [`Slot`] whose table page's split lock is held: the one-entry [`TableCursor`] of the
/// fault paths. Dropping it unlocks. (Lock order, `lib.rs`: PMD lock -> PTE lock; a fault
/// holds one.) `C` is the clock the lock was taken on, as for the cursor.
#[must_use = "if unused the page-table lock is released at once"]
pub(crate) struct LockedSlot<'a, C: ClockKind = Current> {
    table: TableCursor<'a, C>,
    index: usize,
}

impl<'a, C: ClockKind> LockedSlot<'a, C> {
    /// The entry, as it is under the lock.
    #[inline]
    pub(crate) fn get(&self) -> Entry {
        self.slot().load(self.table.phys)
    }

    /// The slot whose lock is held.
    #[inline]
    pub(crate) fn slot(&self) -> Slot {
        Slot {
            table: self.table.table(),
            index: self.index,
        }
    }

    /// The locked table the slot is in (a PMD table's deposit list is under the same lock).
    #[inline]
    pub(crate) fn table(&self) -> &TableCursor<'a, C> {
        &self.table
    }

    /// `pte_same` against a fresh load: is the entry still `seen`?
    #[doc(alias = "pte_same")]
    #[inline]
    pub(crate) fn same(&self, seen: Entry) -> bool {
        self.get() == seen
    }

    /// Clear the entry and return what it was (`ptep_get_and_clear`, `pmdp_huge_get_and_clear`).
    #[doc(alias = "pmdp_huge_get_and_clear")]
    #[inline]
    pub(crate) fn take(&self) -> Entry {
        self.table.take_index(self.index)
    }

    /// `set_pte_at` / `set_pmd_at`.
    #[doc(alias = "set_pte_at")]
    #[doc(alias = "set_pmd_at")]
    #[inline]
    pub(crate) fn set(&self, e: Entry) {
        self.slot().store(self.table.phys, e)
    }

    /// [`Self::set`], its charge on clock `c` (the fault's).
    #[inline]
    pub(crate) fn set_on(&self, c: impl Clock, e: Entry) {
        self.slot().store_on(c, self.table.phys, e)
    }
}

/// Allocate a zeroed table page (`pagetable_alloc` + the level's ctor).
pub(crate) fn alloc_table(phys: &PhysMem, cpu: CpuId) -> Result<Pfn, AllocError> {
    let pfn = phys.alloc_pages(cpu, Order(0), Gfp::KERNEL)?;
    phys.backing().zero_table(pfn);
    charge(Cost::PtAlloc, 1);
    charge(Cost::ClearPage, 1);
    // pmd_ptlock_init: no tables deposited yet (used only if this becomes a PMD table).
    phys.meta(pfn).set_pmd_huge_pte(None);
    phys.meta(pfn).set(PG_PGTABLE);
    phys.stat().inc(cpu, VmItem::NrPageTablePages);
    Ok(pfn)
}

/// Allocate a table to deposit under a huge PMD (`pte_alloc_one` for
/// `pgtable_trans_huge_deposit`). It is not zeroed: a split writes all 512 entries before the
/// table is used, and a withdrawn table is freed with [`free_deposit_table`]. So with sparse
/// backing a deposit costs the host nothing until it is used.
pub(crate) fn alloc_deposit_table(phys: &PhysMem, cpu: CpuId) -> Result<Pfn, AllocError> {
    let pfn = phys.alloc_pages(cpu, Order(0), Gfp::KERNEL)?;
    // The kernel's pte_alloc_one zeroes it (GFP_PGTABLE_USER has __GFP_ZERO): charged, though
    // the host skips it.
    charge(Cost::PtAlloc, 1);
    charge(Cost::ClearPage, 1);
    phys.meta(pfn).set(PG_PGTABLE);
    phys.stat().inc(cpu, VmItem::NrPageTablePages);
    Ok(pfn)
}

/// Free a deposited table that was never used as a table.
pub(crate) fn free_deposit_table(phys: &PhysMem, cpu: CpuId, pfn: Pfn) {
    charge(Cost::PtFree, 1);
    phys.meta(pfn).clear(PG_PGTABLE);
    phys.stat().add(cpu, VmItem::NrPageTablePages, -1);
    phys.release_pages(cpu, &[pfn]);
}

/// Free a table page whose entries are all clear (`pagetable_free` after the dtor).
pub(crate) fn free_table(phys: &PhysMem, cpu: CpuId, pfn: Pfn) {
    debug_assert!(phys.backing().table_is_clear(pfn));
    vm_bug_on!(
        phys.meta(pfn).pmd_huge_pte().is_some(),
        "freeing PMD table {pfn:?} with tables still deposited"
    );
    phys.meta(pfn).ptl.ptlock_free();
    charge(Cost::PtFree, 1);
    phys.meta(pfn).clear(PG_PGTABLE);
    phys.stat().add(cpu, VmItem::NrPageTablePages, -1);
    phys.release_pages(cpu, &[pfn]);
}

/// The page-table side of an address space, as the table allocators need it: `mm->pgd`,
/// `mm->page_table_lock`, `mm_inc_nr_ptes`. The mm implements it (`mm/mod.rs`); the trait keeps
/// this module below `mm` in the module graph.
pub(crate) trait MmTables {
    fn phys(&self) -> &PhysMem;
    /// The PGD table page.
    fn pgd_table(&self) -> Pfn;
    /// `mm->page_table_lock`, which guards PGD and PUD entries.
    fn page_table_lock(&self) -> SpinLockGuard<'_, ()>;
    /// One more table page in `mm_pgtables_bytes`.
    fn inc_nr_tables(&self);
}

/// Why [`pte_alloc`] or [`pmd_alloc`] returned no table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PtAllocError {
    /// No frame for the table (`-ENOMEM`; `VM_FAULT_OOM` in a fault).
    NoMem,
    /// A huge PMD appeared where the PTE table was to go: the caller re-walks (as after
    /// Linux's `pte_offset_map` failure).
    HugePmd,
}

/// `pud_alloc` + `pmd_alloc` (`__pud_alloc`, `__pmd_alloc`): the PMD slot for `addr`, with
/// the PUD and PMD tables on the way allocated if missing.
#[doc(alias = "__pmd_alloc")]
#[doc(alias = "__pud_alloc")]
#[doc(alias = "pud_alloc")]
pub(crate) fn pmd_alloc(mm: &impl MmTables, cpu: CpuId, addr: u64) -> Result<Slot, PtAllocError> {
    let pgd_slot = Slot::offset(mm.pgd_table(), Level::Pgd, addr);
    let pud_table = table_alloc(mm, cpu, pgd_slot, false)?;
    let pud_slot = Slot::offset(pud_table, Level::Pud, addr);
    let pmd_table = table_alloc(mm, cpu, pud_slot, false)?;
    Ok(Slot::offset(pmd_table, Level::Pmd, addr))
}

/// `pte_alloc` (`__pte_alloc`): the PTE table the PMD entry `pmd` points to, allocated and
/// installed if the entry is none.
#[doc(alias = "__pte_alloc")]
pub(crate) fn pte_alloc(mm: &impl MmTables, cpu: CpuId, pmd: Slot) -> Result<Pfn, PtAllocError> {
    table_alloc(mm, cpu, pmd, true)
}

/// The table `slot` points to, allocating and installing one if it is none (invariant 4). The
/// install is done under `page_table_lock` (upper levels) or, for a PMD slot (`is_pmd`), the
/// PMD lock of the slot's table page (`pmd_lock`).
fn table_alloc(
    mm: &impl MmTables,
    cpu: CpuId,
    slot: Slot,
    is_pmd: bool,
) -> Result<Pfn, PtAllocError> {
    let phys = mm.phys();
    let e = slot.load(phys);
    if !e.is_none() {
        return Ok(e.pfn());
    }
    let new = alloc_table(phys, cpu).map_err(|_| PtAllocError::NoMem)?;
    let installed = {
        // `pmd_lock` or `mm->page_table_lock`: whichever guards `slot`.
        let (_pmd_lock, _mm_lock) = if is_pmd {
            (Some(phys.meta(slot.table).ptl.lock(&PMD_LOCK)), None)
        } else {
            (None, Some(mm.page_table_lock()))
        };
        let e = slot.load(phys);
        if e.is_none() {
            slot.store(phys, Entry::new(new, TABLE_BITS));
            mm.inc_nr_tables();
            Ok(new)
        } else {
            Err(e)
        }
    };
    match installed {
        Ok(t) => Ok(t),
        Err(e) => {
            free_table(phys, cpu, new);
            if e.huge() {
                // A huge PMD appeared meanwhile; the caller re-walks.
                return Err(PtAllocError::HugePmd);
            }
            Ok(e.pfn())
        }
    }
}

/// `pgd_clear` (`p4d_clear`) of `free_pud_range`: clear a PGD entry whose PUD table is being
/// freed, under `mm->page_table_lock`, the lock of the upper levels.
#[doc(alias = "p4d_clear")]
pub(crate) fn pgd_clear(mm: &impl MmTables, pgd: Slot) {
    let _g = mm.page_table_lock();
    pgd.store(mm.phys(), Entry::NONE);
}

/// `pud_clear` of `free_pmd_range`: clear a PUD entry whose PMD table is being freed, under
/// `mm->page_table_lock`.
pub(crate) fn pud_clear(mm: &impl MmTables, pud: Slot) {
    let _g = mm.page_table_lock();
    pud.store(mm.phys(), Entry::NONE);
}

/// `pmd_clear` of `free_pte_range`: clear a PMD entry whose PTE table is being freed, with no
/// lock — the one write of an entry without its lock (invariant 1): the range's VMAs are
/// detached, so no fault installs anything there, and the lockless walkers that may still read
/// the old entry are waited out by the TLB flush before the table is freed.
#[doc(alias = "free_pte_range")]
pub(crate) fn pmd_clear_detached(phys: &PhysMem, pmd: Slot) {
    pmd.store(phys, Entry::NONE);
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn entry_bits_round_trip() {
        let e = Entry::new(Pfn(0x12345), leaf_bits(true, true, false));
        assert!(e.present() && e.writable() && !e.huge() && !e.special());
        assert_eq!(e.pfn(), Pfn(0x12345));
        assert_ne!(e.0 & _PAGE_NX, 0);
        let n = Entry::new(Pfn(7), leaf_bits(false, false, false));
        assert!(!n.present() && n.maps_frame());
        assert_eq!(n.pfn(), Pfn(7));
        let ro = e.with_bits(0, _PAGE_RW);
        assert!(!ro.writable() && ro.present());
    }

    #[test]
    fn indexes_split_the_address() {
        let a = (3u64 << 39) | (5 << 30) | (7 << 21) | (11 << 12) | 0x123;
        assert_eq!(
            [Level::Pgd, Level::Pud, Level::Pmd, Level::Pte].map(|l| l.index(a)),
            [3, 5, 7, 11]
        );
    }
}
