//! Page faults: from an access that the "MMU" could not translate to a mapped page.
//!
//! Mirrors `arch/x86/mm/fault.c` (`do_user_addr_fault`, `access_error`), `mm/memory.c`
//! (`handle_mm_fault`, `__handle_mm_fault`, `handle_pte_fault`, `do_anonymous_page`,
//! `do_wp_page`, `__pte_alloc`, `__pmd_alloc`, `__pud_alloc`) and `mm/huge_memory.c`
//! (`do_huge_pmd_anonymous_page`, `do_huge_pmd_wp_page`, `__do_huge_pmd_anonymous_page`).
//!
//! # Paths
//! - No VMA at the address → `SEGV_MAPERR`; an access the VMA does not allow → `SEGV_ACCERR`.
//! - Anonymous read of an empty PTE → the 4 KiB zero page, read-only, no rss.
//! - Anonymous read of an empty PMD in a THP-eligible VMA → the huge zero page (if it can be
//!   had), with a deposited PTE table; the reference policy is the huge zero page's.
//! - Anonymous write of an empty PMD in a THP-eligible VMA → a zeroed order-9 THP; if none can
//!   be allocated, `thp_fault_fallback` and 4 KiB.
//! - Write to a zero-page PTE → copy-on-write to a fresh zeroed page.
//! - Write to a huge-zero PMD → per `huge_zero.write_fault`: allocate a THP (falling back to the
//!   split), or split into zero PTEs and COW the one page.
//! - Shared anonymous memory → the page of the shmem object at that offset.
//!
//! # Locks
//! `mmap_lock` (read) → `page_table_lock` (PGD/PUD entries) → PMD lock → PTE lock. Pages are
//! allocated before the PTL is taken; a fault that loses a race frees its page.
//!
//! # Differences from Linux
//! No per-VMA lock fast path, no fault-around, no userfaultfd, no NUMA hinting.

use std::sync::atomic::Ordering::Relaxed;

use serde::Serialize;

use super::pgtable_alias::*;
use super::vma::{VmFlags, Vma, VmaKind, VmaTree, VmaWriteGuard};
use super::{Mm, RssItem};
use crate::addr::{Order, Pfn, HPAGE_PMD_ORDER, PMD_SIZE};
use crate::config::{HugeZeroWriteFault, ThpMode};
use crate::cpu::CpuId;
use crate::page_alloc::meta::{PG_ANON, PG_MLOCKED};
use crate::page_alloc::{Gfp, PhysMem};
use crate::pgtable::{self, leaf_bits, Walk, _PAGE_PSE, _PAGE_SPECIAL};
use crate::stats::VmItem;
use crate::sync::class::{PMD_LOCK, PTL};
use crate::sync::{charge, Cost};

/// `si_code` of the SIGSEGV a bad access raises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SegvCode {
    /// `SEGV_MAPERR`: no mapping at the address.
    MapErr = 1,
    /// `SEGV_ACCERR`: a mapping that does not allow the access.
    AccErr = 2,
}

/// A SIGSEGV-like result of an access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Fault {
    pub addr: u64,
    pub code: SegvCode,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = match self.code {
            SegvCode::MapErr => "SEGV_MAPERR",
            SegvCode::AccErr => "SEGV_ACCERR",
        };
        write!(f, "SIGSEGV ({c}) at {:#x}", self.addr)
    }
}

impl std::error::Error for Fault {}

/// The MMU's walk: the frame behind `addr` if the entry allows the access, else `None`.
#[inline]
pub(crate) fn translate(phys: &PhysMem, pgd: Pfn, addr: u64, write: bool) -> Option<Pfn> {
    match pgtable::walk(phys, pgd, addr) {
        Walk::Pte { entry, .. } if entry.present() && (!write || entry.writable()) => {
            Some(entry.pfn())
        }
        Walk::HugePmd { entry, .. } if entry.present() && (!write || entry.writable()) => {
            Some(entry.pfn().add((addr >> 12) & 511))
        }
        _ => None,
    }
}

/// Is an anonymous VMA eligible for THP at this address (`thp_vma_allowable_order`)?
#[inline]
fn thp_eligible(mm: &Mm, vma: &Vma, addr: u64) -> bool {
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

/// `access_error`: does the VMA allow this access?
#[inline]
fn access_ok(vma: &Vma, write: bool) -> bool {
    if write {
        vma.flags.contains(VmFlags::VM_WRITE)
    } else {
        vma.flags.intersects(VmFlags::VM_ACCESS_FLAGS)
    }
}

/// `handle_mm_fault` under the mmap read lock. An access below a `VM_GROWSDOWN` VMA first
/// grows it down to the faulting page under the write lock (`lock_mm_and_find_vma` →
/// `expand_stack_locked`), then faults as usual.
///
/// One call is one page-fault exception: its entry and exit are charged around it (virtual
/// time; nothing on the host).
#[doc(alias = "do_user_addr_fault")]
#[doc(alias = "asm_exc_page_fault")]
pub fn handle_mm_fault(mm: &Mm, cpu: CpuId, addr: u64, write: bool) -> Result<(), Fault> {
    charge(Cost::FaultEntry, 1);
    let r = do_user_addr_fault(mm, cpu, addr, write);
    charge(Cost::FaultExit, 1);
    r
}

fn do_user_addr_fault(mm: &Mm, cpu: CpuId, addr: u64, write: bool) -> Result<(), Fault> {
    {
        let tree = mm.mmap_lock.read();
        let below_stack = tree
            .find_vma(addr)
            .is_some_and(|v| v.start > addr && v.flags.contains(VmFlags::VM_GROWSDOWN));
        if !below_stack {
            return fault_locked(mm, &tree, cpu, addr, write);
        }
    }
    {
        let mut tree = mm.mmap_lock.write();
        expand_downwards(mm, &mut tree, addr).map_err(|_| Fault {
            addr,
            code: SegvCode::MapErr,
        })?;
    }
    let tree = mm.mmap_lock.read();
    fault_locked(mm, &tree, cpu, addr, write)
}

/// `RLIMIT_STACK` (the usual 8 MiB soft limit): a stack VMA may not grow beyond it.
pub const STACK_RLIMIT: u64 = 8 << 20;

/// `expand_downwards` (mmap write lock held): grow the `VM_GROWSDOWN` VMA above `addr` down to
/// `addr`'s page. Refused below `mmap_min_addr`, closer than `stack_guard_gap` to an accessible
/// non-stack VMA below, or past [`STACK_RLIMIT`]. The VMA gets its anon_vma first. `Ok` also
/// when somebody else already covered `addr`.
#[doc(alias = "expand_stack_locked")]
fn expand_downwards(mm: &Mm, tree: &mut VmaWriteGuard<'_>, addr: u64) -> Result<(), ()> {
    let address = addr & !(crate::addr::PAGE_SIZE - 1);
    let (prev, vma) = tree.find_vma_prev(addr);
    let Some(vma) = vma else { return Err(()) };
    if vma.start <= addr {
        return Ok(());
    }
    if !vma.flags.contains(VmFlags::VM_GROWSDOWN) || address < crate::addr::MMAP_MIN_ADDR {
        return Err(());
    }
    if let Some(p) = prev {
        if !p.flags.contains(VmFlags::VM_GROWSDOWN)
            && p.flags.intersects(VmFlags::VM_ACCESS_FLAGS)
            && address - p.end < super::vma::STACK_GUARD_GAP
        {
            return Err(());
        }
    }
    let grow = (vma.start - address) >> 12;
    if grow > vma.pgoff || vma.end - address > STACK_RLIMIT {
        return Err(());
    }
    tree.anon_vma_prepare(vma, &mm.anon_vma_ids);
    let start = vma.start;
    if tree.move_start_down(start, address) {
        Ok(())
    } else {
        Err(())
    }
}

/// The fault, with the mmap lock already held (read or write).
pub(crate) fn fault_locked(
    mm: &Mm,
    tree: &VmaTree,
    cpu: CpuId,
    addr: u64,
    write: bool,
) -> Result<(), Fault> {
    let Some(vma) = tree.find_vma(addr).filter(|v| v.start <= addr) else {
        return Err(Fault {
            addr,
            code: SegvCode::MapErr,
        });
    };
    if !access_ok(vma, write) {
        return Err(Fault {
            addr,
            code: SegvCode::AccErr,
        });
    }
    mm.machine().vmstat().inc(cpu, VmItem::Pgfault);
    handle_vma_fault(mm, tree, vma, cpu, addr, write).map_err(|_| Fault {
        addr,
        code: SegvCode::MapErr,
    })
}

/// Out of memory inside a fault (`VM_FAULT_OOM`); reported to the task as a failed access.
#[derive(Debug)]
pub(crate) struct Oom;

/// Find or allocate the PMD slot for `addr` (`pud_alloc` + `pmd_alloc`).
fn pmd_alloc(mm: &Mm, cpu: CpuId, addr: u64) -> Result<Slot, Oom> {
    let pgd_slot = Slot {
        table: mm.pgd(),
        index: pgd_index(addr),
    };
    let pud_table = table_alloc(mm, cpu, pgd_slot, None)?;
    let pud_slot = Slot {
        table: pud_table,
        index: pud_index(addr),
    };
    let pmd_table = table_alloc(mm, cpu, pud_slot, None)?;
    Ok(Slot {
        table: pmd_table,
        index: pmd_index(addr),
    })
}

/// Return the table `slot` points to, allocating and installing one if it is none. The
/// install is done under `page_table_lock` (upper levels) or the PMD lock (`pmd_lock`, when
/// `pmd_ptl` names the PMD table).
fn table_alloc(mm: &Mm, cpu: CpuId, slot: Slot, pmd_ptl: Option<Pfn>) -> Result<Pfn, Oom> {
    let phys = mm.machine().phys();
    let e = slot.load(phys);
    if !e.is_none() {
        return Ok(e.pfn());
    }
    let new = pgtable::alloc_table(phys, cpu).map_err(|_| Oom)?;
    let installed = {
        // `pmd_lock` or `mm->page_table_lock`: whichever guards `slot`.
        let (_pmd_lock, _mm_lock) = match pmd_ptl {
            Some(t) => (Some(phys.meta(t).ptl.lock(&PMD_LOCK)), None),
            None => (None, Some(mm.page_table_lock.lock())),
        };
        let e = slot.load(phys);
        if e.is_none() {
            slot.store(phys, Entry::new(new, pgtable::TABLE_BITS));
            mm.nr_tables.fetch_add(1, Relaxed);
            Ok(new)
        } else {
            Err(e)
        }
    };
    match installed {
        Ok(t) => Ok(t),
        Err(e) => {
            pgtable::free_table(phys, cpu, new);
            if e.huge() {
                // A huge PMD appeared meanwhile; the caller re-walks.
                return Err(Oom);
            }
            Ok(e.pfn())
        }
    }
}

/// `pmd_alloc` for callers outside the fault path (`remap_pfn_range`).
pub(crate) fn pmd_alloc_pub(mm: &Mm, cpu: CpuId, addr: u64) -> Result<Slot, Oom> {
    pmd_alloc(mm, cpu, addr)
}

/// `pte_alloc` for callers outside the fault path.
pub(crate) fn pte_alloc_pub(mm: &Mm, cpu: CpuId, pmd: Slot) -> Result<Pfn, Oom> {
    table_alloc(mm, cpu, pmd, Some(pmd.table))
}

/// `__handle_mm_fault` for one VMA.
pub(crate) fn handle_vma_fault(
    mm: &Mm,
    tree: &VmaTree,
    vma: &Vma,
    cpu: CpuId,
    addr: u64,
    write: bool,
) -> Result<(), Oom> {
    let machine = mm.machine();
    let phys = machine.phys();
    if matches!(vma.kind, VmaKind::Hugetlb) {
        return hugetlb_fault(mm, vma, cpu, addr);
    }
    if matches!(vma.kind, VmaKind::PfnMap) {
        // Populated at map time; an empty slot inside a PFN map is a bad access.
        return Err(Oom);
    }
    // pgd_offset, pud_alloc, pmd_alloc.
    charge(Cost::PtWalkLevel, 3);
    let pmd = pmd_alloc(mm, cpu, addr)?;
    let e = pmd.load(phys);
    if e.is_none() && thp_eligible(mm, vma, addr) {
        if let Some(()) = huge_anonymous_fault(mm, tree, vma, cpu, pmd, addr, write) {
            return Ok(());
        }
    } else if e.huge() {
        if write && !e.writable() {
            return huge_wp_fault(mm, tree, vma, cpu, pmd, addr);
        }
        return Ok(()); // spurious: someone else mapped it
    }
    let pte_table = match table_alloc(mm, cpu, pmd, Some(pmd.table)) {
        Ok(t) => t,
        Err(Oom) if pmd.load(phys).huge() => return Ok(()), // raced with a huge mapping
        Err(o) => return Err(o),
    };
    let pte = Slot {
        table: pte_table,
        index: pte_index(addr),
    };
    charge(Cost::PtWalkLevel, 1);
    handle_pte_fault(mm, tree, vma, cpu, pte, addr, write)
}

/// Permission bits of a leaf for `vma`, before copy-on-write is considered. x86 has no
/// write-only pages: `VM_WRITE` alone maps readable (`protection_map[VM_WRITE]` is
/// `PAGE_COPY`), also while copy-on-write keeps the entry read-only.
#[inline]
fn vma_leaf_bits(vma: &Vma, writable: bool) -> u64 {
    let f = vma.flags;
    leaf_bits(
        f.intersects(VmFlags::VM_READ | VmFlags::VM_WRITE),
        writable && f.contains(VmFlags::VM_WRITE),
        f.contains(VmFlags::VM_EXEC),
    )
}

fn handle_pte_fault(
    mm: &Mm,
    tree: &VmaTree,
    vma: &Vma,
    cpu: CpuId,
    pte: Slot,
    addr: u64,
    write: bool,
) -> Result<(), Oom> {
    let machine = mm.machine();
    let phys = machine.phys();
    let e = pte.load(phys);
    if e.is_none() {
        if matches!(vma.kind, VmaKind::SharedAnon) {
            return shmem_fault(mm, vma, cpu, pte, addr);
        }
        if !write {
            // do_anonymous_page, read: map the zero page.
            let _ptl = phys.meta(pte.table).ptl.lock(&PTL);
            if pte.load(phys).is_none() {
                let b = vma_leaf_bits(vma, false) | _PAGE_SPECIAL;
                pte.store(phys, Entry::new(machine.zero_pfn(), b));
            }
            return Ok(());
        }
        tree.anon_vma_prepare(vma, &mm.anon_vma_ids);
        let page = phys
            .alloc_pages(cpu, Order(0), Gfp::ZERO)
            .map_err(|_| Oom)?;
        let ptl = phys.meta(pte.table).ptl.lock(&PTL);
        if !pte.load(phys).is_none() {
            drop(ptl);
            let _ = phys.free_pages(cpu, page, Order(0));
            return Ok(());
        }
        map_new_anon(mm, vma, cpu, page, 1);
        pte.store(phys, Entry::new(page, vma_leaf_bits(vma, true)));
        drop(ptl);
        phys.lru_cache_add(cpu, page);
        return Ok(());
    }
    if write && e.present() && !e.writable() {
        return do_wp_page(mm, tree, vma, cpu, pte, addr, e);
    }
    if e.maps_frame() && !e.present() {
        // PROT_NONE entry in a VMA that now allows the access: a stale protection.
        let _ptl = phys.meta(pte.table).ptl.lock(&PTL);
        let cur = pte.load(phys);
        if cur == e {
            pte.store(
                phys,
                Entry::new(
                    e.pfn(),
                    vma_leaf_bits(vma, !e.special()) | (e.0 & _PAGE_SPECIAL),
                ),
            );
        }
    }
    Ok(())
}

/// Account a new anonymous page of `nr` base pages mapped in `vma`.
fn map_new_anon(mm: &Mm, vma: &Vma, cpu: CpuId, page: Pfn, nr: i64) {
    let machine = mm.machine();
    let m = machine.phys().meta(page);
    m.set(PG_ANON);
    m.mapcount.store(1, Relaxed);
    if vma.flags.contains(VmFlags::VM_LOCKED) {
        m.set(PG_MLOCKED);
        machine.vmstat().add(cpu, VmItem::NrMlock, nr);
        machine.vmstat().add(cpu, VmItem::UnevictablePgsMlocked, nr);
    }
    mm.add_rss(cpu, RssItem::AnonPages, nr);
    machine.vmstat().add(cpu, VmItem::NrAnonPages, nr);
}

/// `do_wp_page`: write to a present read-only PTE in a writable VMA.
fn do_wp_page(
    mm: &Mm,
    tree: &VmaTree,
    vma: &Vma,
    cpu: CpuId,
    pte: Slot,
    addr: u64,
    e: Entry,
) -> Result<(), Oom> {
    let machine = mm.machine();
    let phys = machine.phys();
    if !e.special() && phys.meta(e.pfn()).map_count() == 1 {
        // wp_page_reuse: an exclusive anonymous page only needs the write bit.
        let _ptl = phys.meta(pte.table).ptl.lock(&PTL);
        if pte.load(phys) == e {
            pte.store(phys, Entry::new(e.pfn(), vma_leaf_bits(vma, true)));
        }
        return Ok(());
    }
    // wp_page_copy from the zero page (the only shared page here): a new zeroed page.
    tree.anon_vma_prepare(vma, &mm.anon_vma_ids);
    let page = phys
        .alloc_pages(cpu, Order(0), Gfp::ZERO)
        .map_err(|_| Oom)?;
    if !e.special() {
        phys.backing().copy_frame(e.pfn(), page);
        charge(Cost::CopyPage, 1);
    }
    let ptl = phys.meta(pte.table).ptl.lock(&PTL);
    if pte.load(phys) != e {
        drop(ptl);
        let _ = phys.free_pages(cpu, page, Order(0));
        return Ok(());
    }
    // ptep_clear_flush: the old translation must be gone before the new one appears.
    pte.store(phys, Entry::NONE);
    mm.flush_tlb(cpu, Some(1));
    map_new_anon(mm, vma, cpu, page, 1);
    pte.store(phys, Entry::new(page, vma_leaf_bits(vma, true)));
    drop(ptl);
    phys.lru_cache_add(cpu, page);
    let _ = addr;
    Ok(())
}

/// Shared anonymous memory: map the shmem object's page for this offset.
fn shmem_fault(mm: &Mm, vma: &Vma, cpu: CpuId, pte: Slot, addr: u64) -> Result<(), Oom> {
    let machine = mm.machine();
    let phys = machine.phys();
    let Some(obj) = vma.shmem.as_ref() else {
        return Err(Oom);
    };
    let index = vma.pgoff + ((addr - vma.start) >> 12);
    if vma.shmem_size != 0 && index >= vma.shmem_size {
        // Beyond the object's i_size (a shared /dev/zero mapping at an offset): SIGBUS.
        return Err(Oom);
    }
    let page = obj.get_page(cpu, index).map_err(|_| Oom)?;
    let ptl = phys.meta(pte.table).ptl.lock(&PTL);
    if !pte.load(phys).is_none() {
        drop(ptl);
        let _ = phys.put_page(cpu, page);
        return Ok(());
    }
    phys.meta(page).mapcount.fetch_add(1, Relaxed);
    mm.add_rss(cpu, RssItem::ShmemPages, 1);
    pte.store(phys, Entry::new(page, vma_leaf_bits(vma, true)));
    drop(ptl);
    Ok(())
}

/// `do_huge_pmd_anonymous_page`. `None` means "fall back to 4 KiB".
fn huge_anonymous_fault(
    mm: &Mm,
    tree: &VmaTree,
    vma: &Vma,
    cpu: CpuId,
    pmd: Slot,
    addr: u64,
    write: bool,
) -> Option<()> {
    let machine = mm.machine();
    let phys = machine.phys();
    let table = pgtable::alloc_deposit_table(phys, cpu).ok()?;
    // vmf_anon_prepare comes first, also for a read that maps the huge zero page: the VMA
    // gets its anon_vma (which then keeps VM_ACCOUNT across mprotect and decides merges).
    tree.anon_vma_prepare(vma, &mm.anon_vma_ids);
    if !write {
        let hz = machine.huge_zero();
        let Some(zero) = hz.fault_get(&mm.flags, cpu) else {
            pgtable::free_deposit_table(phys, cpu, table);
            return None;
        };
        let ptl = phys.meta(pmd.table).ptl.lock(&PMD_LOCK);
        if !pmd.load(phys).is_none() {
            drop(ptl);
            hz.fault_unused(cpu);
            pgtable::free_deposit_table(phys, cpu, table);
            return Some(());
        }
        super::memory::deposit(mm, pmd, table);
        mm.nr_tables.fetch_add(1, Relaxed);
        let b = vma_leaf_bits(vma, false) | _PAGE_PSE | _PAGE_SPECIAL;
        pmd.store(phys, Entry::new(zero, b));
        return Some(());
    }
    let Some(page) = alloc_anon_thp(mm, cpu) else {
        pgtable::free_deposit_table(phys, cpu, table);
        return None;
    };
    let ptl = phys.meta(pmd.table).ptl.lock(&PMD_LOCK);
    if !pmd.load(phys).is_none() {
        drop(ptl);
        let _ = phys.free_pages(cpu, page, HPAGE_PMD_ORDER);
        pgtable::free_deposit_table(phys, cpu, table);
        return Some(());
    }
    super::memory::deposit(mm, pmd, table);
    mm.nr_tables.fetch_add(1, Relaxed);
    map_anon_thp_pmd(mm, vma, cpu, pmd, page);
    drop(ptl);
    phys.lru_cache_add(cpu, page);
    let _ = addr;
    Some(())
}

/// `vma_alloc_anon_folio_pmd`: a zeroed THP, never waiting; a failure counts
/// `thp_fault_fallback` and the caller falls back to 4 KiB pages.
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

/// `map_anon_folio_pmd`: map a fresh THP writable at an empty `pmd` whose PTL the caller
/// holds — rmap, rss and the THP counters first, the PMD last. The caller adds the page to
/// the LRU once the PTL is dropped.
fn map_anon_thp_pmd(mm: &Mm, vma: &Vma, cpu: CpuId, pmd: Slot, page: Pfn) {
    let machine = mm.machine();
    map_new_anon(mm, vma, cpu, page, 512);
    machine
        .vmstat()
        .inc(cpu, VmItem::NrAnonTransparentHugepages);
    machine.vmstat().inc(cpu, VmItem::ThpFaultAlloc);
    pmd.store(
        machine.phys(),
        Entry::new(page, vma_leaf_bits(vma, true) | _PAGE_PSE),
    );
}

/// `do_huge_pmd_wp_page`: write to a read-only huge PMD.
fn huge_wp_fault(
    mm: &Mm,
    tree: &VmaTree,
    vma: &Vma,
    cpu: CpuId,
    pmd: Slot,
    addr: u64,
) -> Result<(), Oom> {
    let machine = mm.machine();
    let phys = machine.phys();
    let e = pmd.load(phys);
    if !e.special() {
        // An exclusive THP that lost its write bit to mprotect: reuse it.
        let _ptl = phys.meta(pmd.table).ptl.lock(&PMD_LOCK);
        if pmd.load(phys) == e {
            pmd.store(
                phys,
                Entry::new(e.pfn(), vma_leaf_bits(vma, true) | _PAGE_PSE),
            );
        }
        return Ok(());
    }
    let haddr = addr & !(PMD_SIZE - 1);
    if machine.huge_zero().write_fault_policy() == HugeZeroWriteFault::AllocThp {
        tree.anon_vma_prepare(vma, &mm.anon_vma_ids);
        if let Some(page) = alloc_anon_thp(mm, cpu) {
            let ptl = phys.meta(pmd.table).ptl.lock(&PMD_LOCK);
            if pmd.load(phys) != e {
                drop(ptl);
                let _ = phys.free_pages(cpu, page, HPAGE_PMD_ORDER);
                return Ok(());
            }
            // Replace the huge zero PMD: clear, flush, install. The deposit stays.
            pmd.store(phys, Entry::NONE);
            mm.flush_tlb(cpu, Some(512));
            map_anon_thp_pmd(mm, vma, cpu, pmd, page);
            drop(ptl);
            machine.huge_zero().zap_put(cpu);
            phys.lru_cache_add(cpu, page);
            return Ok(());
        }
    }
    // Split to zero-page PTEs, then COW the one page.
    super::memory::split_huge_pmd(mm, cpu, pmd, haddr);
    let table = pmd.load(phys);
    if table.is_none() || table.huge() {
        return Ok(());
    }
    let pte = Slot {
        table: table.pfn(),
        index: pte_index(addr),
    };
    handle_pte_fault(mm, tree, vma, cpu, pte, addr, true)
}

/// A fault in a `MAP_HUGETLB` VMA: a 2 MiB page from the pool, PMD-mapped.
fn hugetlb_fault(mm: &Mm, vma: &Vma, cpu: CpuId, addr: u64) -> Result<(), Oom> {
    let machine = mm.machine();
    let phys = machine.phys();
    let pmd = pmd_alloc(mm, cpu, addr)?;
    if !pmd.load(phys).is_none() {
        return Ok(());
    }
    let page = phys.alloc_hugetlb_page().ok_or(Oom)?;
    phys.backing().zero_data(page, 512);
    charge(Cost::ClearPage, 512);
    let ptl = phys.meta(pmd.table).ptl.lock(&PMD_LOCK);
    if !pmd.load(phys).is_none() {
        drop(ptl);
        let _ = phys.put_page(cpu, page);
        return Ok(());
    }
    phys.meta(page).mapcount.store(1, Relaxed);
    pmd.store(phys, Entry::new(page, vma_leaf_bits(vma, true) | _PAGE_PSE));
    Ok(())
}
