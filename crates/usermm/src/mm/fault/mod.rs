//! Page faults: from an access that the "MMU" could not translate to a mapped page.
//!
//! Mirrors `arch/x86/mm/fault.c` (`do_user_addr_fault`, `access_error`), `mm/memory.c`
//! (`handle_mm_fault`, `__handle_mm_fault`, `handle_pte_fault`, `do_anonymous_page`,
//! `do_wp_page`) and `mm/hugetlb.c` (`hugetlb_fault`, `hugetlb_wp`). The huge-PMD faults
//! (`do_huge_pmd_anonymous_page`, `do_huge_pmd_wp_page`) are `huge_memory.rs`'s; the tables
//! on the way are allocated by `pgtable.rs` (`__pte_alloc`, `__pmd_alloc`, `__pud_alloc`).
//!
//! # Paths
//! - No VMA at the address → `SEGV_MAPERR`; an access the VMA does not allow → `SEGV_ACCERR`.
//! - No frame for the fault (a data page, a page table) → `VM_FAULT_OOM`, reported as
//!   [`SegvCode::Oom`]; an access the backing object cannot serve (hugetlb pool empty, an offset
//!   beyond a shmem object's size, a hole in a PFN map) → `VM_FAULT_SIGBUS`, reported as
//!   [`SegvCode::BusAdrErr`]. See "Out of memory" below.
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
//! # The fault as it goes down
//! `handle_vma_fault` (`__handle_mm_fault`) makes a `VmFault` (`struct vm_fault`,
//! `mm/vm_fault.rs`): the mm, the VMA, the CPU, the address, the access; the walk adds the PMD
//! slot, then the PTE slot and the entry it saw (`orig_pte`). Every handler below takes it.
//!
//! # Files, by kind of fault
//! This file: the entry (`handle_mm_fault`, the per-VMA-lock attempt, stack growth, the
//! access check) and the walk down to the entry (`__handle_mm_fault`, `handle_pte_fault`).
//! `anon.rs`: an empty PTE of anonymous memory (`do_anonymous_page`, `shmem_fault`). `wp.rs`:
//! a write to a read-only PTE (`do_wp_page`: reuse or copy). `hugetlb.rs`: `MAP_HUGETLB`
//! VMAs. A huge PMD's faults are `huge_memory.rs`'s.
//!
//! # Out of memory
//! Linux returns `VM_FAULT_OOM` from the fault path when a page or a page table cannot be
//! had (`do_anonymous_page`, `wp_page_copy`, `__pte_alloc`, `__pmd_alloc`, a PMD-mapped THP's
//! deposit table in `__do_huge_pmd_anonymous_page`); the allocator has by then tried the OOM
//! killer itself, and `pagefault_out_of_memory` (`mm/oom_kill.c`, since 5.16) only retries the
//! access. The engine has no OOM killer and no reclaim to wait for, so the outcome goes back to
//! the caller as a fault of its own, [`SegvCode::Oom`], never as `SEGV_MAPERR`: what was
//! written stays, nothing is half-mapped, and the access may be retried once memory is freed.
//! Each such fault counts `oom` in vmstat: the kernel's name for "an allocation was about to
//! fail and the OOM killer was considered" (memcg's `MEMCG_OOM`, the `oom` line of
//! `memory.events`; the engine's machine is one memory domain). `oom_kill` counts kills, which
//! the engine never does. A THP that cannot be allocated is not OOM: the fault falls back to
//! 4 KiB (`thp_fault_fallback`), as in Linux, whose high-order allocation does not invoke the
//! OOM killer.
//!
//! `VM_FAULT_SIGBUS` comes where Linux gives it: `hugetlb_no_page` when the pool has no page
//! (`alloc_hugetlb_folio` → `-ENOSPC`), `shmem_fault` past the object's size, `do_fault` of a
//! `VM_PFNMAP` VMA without a `->fault` and an empty entry. Populating callers turn both into
//! errnos as `vm_fault_to_errno` does: OOM → `ENOMEM`, SIGBUS → `EFAULT`.
//!
//! # Locks
//! `mmap_lock` (read) → `page_table_lock` (PGD/PUD entries) → PMD lock → PTE lock. Pages are
//! allocated before the PTL is taken; the entry is then locked and re-checked against what
//! the lockless walk saw (`pgtable::Slot::lock_if_same`, a `LockedSlot`), and a fault that
//! lost a race frees its page.
//!
//! # Per-VMA locks
//! With `vma.per_vma_lock`, [`handle_mm_fault`] first tries the VMA's read lock
//! (`lock_vma_under_rcu`, `lock_vma.rs`) and runs the fault with no mmap lock; it falls back to
//! the mmap read lock when the VMA does not qualify or is being changed.
//!
//! # Differences from Linux
//! No fault-around, no userfaultfd, no NUMA hinting.

mod anon;
mod hugetlb;
mod wp;

use serde::Serialize;

use super::vma::{VmFlags, Vma, VmaKind, VmaTree, VmaWriteGuard};
use super::{huge_memory, rmap, Mm, VmFault, VmFaultError, OOM};
use crate::addr::Pfn;
use crate::cpu::CpuId;
use crate::page_alloc::PhysMem;
use crate::pgtable::{self, Level, PtAllocError, Walk, _PAGE_SPECIAL};
use crate::pgtable::{Entry, Slot};
use crate::stats::VmItem;
use crate::sync::vhook::{on_clock, Clock};
use crate::sync::Cost;
use crate::sync::SpinClock;

/// How an access failed: the signal and `si_code` Linux would raise (`SIGSEGV` with
/// `SEGV_MAPERR`/`SEGV_ACCERR`, `SIGBUS` with `BUS_ADRERR`), or the fault handler's
/// out-of-memory outcome (`VM_FAULT_OOM`), which raises no signal: see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SegvCode {
    /// `SEGV_MAPERR`: no mapping at the address.
    MapErr,
    /// `SEGV_ACCERR`: a mapping that does not allow the access.
    AccErr,
    /// `SIGBUS`, `BUS_ADRERR` (`VM_FAULT_SIGBUS`): a mapping whose object cannot back the
    /// address (hugetlb pool exhausted, beyond a shmem object's size, a hole in a PFN map).
    #[doc(alias = "VM_FAULT_SIGBUS")]
    BusAdrErr,
    /// `VM_FAULT_OOM`: the fault needed a frame (data page or page table) and none was left.
    /// Linux would OOM-kill some task and retry the access; the engine reports it.
    #[doc(alias = "VM_FAULT_OOM")]
    Oom,
}

impl SegvCode {
    /// The signal Linux delivers for this outcome (`None` for `VM_FAULT_OOM`, which the fault
    /// path retries after the OOM killer, or ends with the task killed).
    pub fn signal(self) -> Option<&'static str> {
        match self {
            SegvCode::MapErr | SegvCode::AccErr => Some("SIGSEGV"),
            SegvCode::BusAdrErr => Some("SIGBUS"),
            SegvCode::Oom => None,
        }
    }

    /// The kernel's name for the outcome: the `si_code` or the `vm_fault_t` bit.
    pub fn name(self) -> &'static str {
        match self {
            SegvCode::MapErr => "SEGV_MAPERR",
            SegvCode::AccErr => "SEGV_ACCERR",
            SegvCode::BusAdrErr => "BUS_ADRERR",
            SegvCode::Oom => "VM_FAULT_OOM",
        }
    }
}

/// A failed access: where, and how it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Fault {
    pub addr: u64,
    pub code: SegvCode,
}

impl Fault {
    /// The fault could not get a frame: out of memory, not a bad address.
    pub fn is_oom(&self) -> bool {
        self.code == SegvCode::Oom
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.code.signal() {
            Some(sig) => write!(f, "{sig} ({}) at {:#x}", self.code.name(), self.addr),
            None => write!(f, "out of memory at {:#x} (VM_FAULT_OOM)", self.addr),
        }
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

/// `access_error`: does the VMA allow this access?
#[inline]
pub(crate) fn access_ok(vma: &Vma, write: bool) -> bool {
    if write {
        vma.flags.contains(VmFlags::VM_WRITE)
    } else {
        vma.flags.intersects(VmFlags::VM_ACCESS_FLAGS)
    }
}

/// The fault in `vma`, read-locked by `lock_vma_under_rcu` (no mmap lock): the access check,
/// then `handle_mm_fault` with `FAULT_FLAG_VMA_LOCK`.
pub(crate) fn fault_vma_locked(
    c: impl SpinClock,
    mm: &Mm,
    vma: &Vma,
    cpu: CpuId,
    addr: u64,
    write: bool,
) -> Result<(), Fault> {
    if !access_ok(vma, write) {
        return Err(Fault {
            addr,
            code: SegvCode::AccErr,
        });
    }
    mm.machine().vmstat().inc(cpu, VmItem::Pgfault);
    handle_vma_fault_on(c, mm, None, vma, cpu, addr, write).map_err(|e| Fault {
        addr,
        code: e.code(),
    })
}

/// `handle_mm_fault`: first under the VMA's own lock when per-VMA locks are on and the VMA
/// qualifies (`lock_vma_under_rcu`), else under the mmap read lock. An access below a `VM_GROWSDOWN` VMA first
/// grows it down to the faulting page under the write lock (`lock_mm_and_find_vma` →
/// `expand_stack_locked`), then faults as usual.
///
/// One call is one page-fault exception: its entry and exit are charged around it (virtual
/// time; nothing on the host).
///
/// The fault's clock is decided here, once (`vhook::on_clock!`), and carried down: the mmap
/// lock, the walk's charges, the PTE lock and `do_anonymous_page`'s allocation, rmap and
/// LRU-add take no other test of the seam's flag (`VmFault::clock`).
#[doc(alias = "do_user_addr_fault")]
#[doc(alias = "asm_exc_page_fault")]
pub fn handle_mm_fault(mm: &Mm, cpu: CpuId, addr: u64, write: bool) -> Result<(), Fault> {
    on_clock!(c => {
        c.charge(Cost::FaultEntry, 1);
        let r = do_user_addr_fault(c, mm, cpu, addr, write);
        c.charge(Cost::FaultExit, 1);
        r
    })
}

// Inlined into both clocks' instances of `handle_mm_fault` (a call of its own costs more
// than the flag test saved).
#[inline(always)]
fn do_user_addr_fault(
    c: impl SpinClock,
    mm: &Mm,
    cpu: CpuId,
    addr: u64,
    write: bool,
) -> Result<(), Fault> {
    // The FAULT_FLAG_VMA_LOCK attempt (lock_vma.rs): `Some` when it ran under the VMA's lock.
    if mm.vma_index.is_some() {
        let r = mm.with_vma_read_locked(cpu, addr, |vma| {
            fault_vma_locked(c, mm, vma, cpu, addr, write)
        });
        if let Some(r) = r {
            return r;
        }
    }
    let mut tree = mm.mmap_lock.read_on(c);
    let below_stack = tree
        .find_vma(addr)
        .is_some_and(|v| v.start > addr && v.flags.contains(VmFlags::VM_GROWSDOWN));
    if below_stack {
        drop(tree);
        grow_stack(mm, addr)?;
        tree = mm.mmap_lock.read_on(c);
    }
    // One call site, so that each clock's instance inlines the fault once.
    fault_locked(c, mm, &tree, cpu, addr, write)
}

/// `lock_mm_and_find_vma`'s upgrade: with the mmap lock dropped, take it for write and grow
/// the stack VMA above `addr` down to it (`expand_stack_locked`). Out of line: rare.
#[cold]
#[inline(never)]
fn grow_stack(mm: &Mm, addr: u64) -> Result<(), Fault> {
    let mut tree = mm.mmap_lock.write();
    expand_downwards(mm, &mut tree, addr).map_err(|_| Fault {
        addr,
        code: SegvCode::MapErr,
    })
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

/// The fault, with the mmap lock already held (read or write), on the clock `c`. Inlined into
/// its one caller's instances, as it was before the clock was carried down.
#[inline(always)]
pub(crate) fn fault_locked(
    c: impl SpinClock,
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
    handle_vma_fault_on(c, mm, Some(tree), vma, cpu, addr, write).map_err(|e| Fault {
        addr,
        code: e.code(),
    })
}

impl VmFaultError {
    /// What the task sees.
    fn code(self) -> SegvCode {
        match self {
            VmFaultError::Oom => SegvCode::Oom,
            VmFaultError::Sigbus => SegvCode::BusAdrErr,
            // Resolved inside `handle_vma_fault`; never reaches a task.
            VmFaultError::Raced => SegvCode::MapErr,
        }
    }
}

/// `__handle_mm_fault` for one VMA; an out-of-memory outcome counts `oom` (module doc). For
/// a caller outside a fault (`mm_populate`): decides the clock, once.
pub(crate) fn handle_vma_fault(
    mm: &Mm,
    tree: Option<&VmaTree>,
    vma: &Vma,
    cpu: CpuId,
    addr: u64,
    write: bool,
) -> Result<(), VmFaultError> {
    on_clock!(c => handle_vma_fault_on(c, mm, tree, vma, cpu, addr, write))
}

/// [`handle_vma_fault`] on the clock `c` the fault decided: one instance per clock.
#[inline(never)]
fn handle_vma_fault_on<C: SpinClock>(
    c: C,
    mm: &Mm,
    tree: Option<&VmaTree>,
    vma: &Vma,
    cpu: CpuId,
    addr: u64,
    write: bool,
) -> Result<(), VmFaultError> {
    let vmf = VmFault::new(c, mm, tree, vma, cpu, addr, write);
    let r = vma_fault(vmf);
    if r == Err(VmFaultError::Oom) {
        mm.machine().vmstat().inc(cpu, VmItem::Oom);
    }
    r
}

#[doc(alias = "__handle_mm_fault")]
#[inline(always)]
fn vma_fault<C: SpinClock>(mut vmf: VmFault<'_, C>) -> Result<(), VmFaultError> {
    let c = vmf.clock;
    let (mm, vma, cpu, addr) = (vmf.mm, vmf.vma, vmf.cpu, vmf.address);
    let phys = mm.machine().phys();
    if matches!(vma.kind, VmaKind::Hugetlb) {
        return hugetlb::hugetlb_fault(&vmf.undecided());
    }
    if matches!(vma.kind, VmaKind::PfnMap) {
        // Populated at map time; an empty entry in a VM_PFNMAP VMA, which has no ->fault:
        // `do_fault` gives VM_FAULT_SIGBUS.
        return Err(VmFaultError::Sigbus);
    }
    // pgd_offset, pud_alloc, pmd_alloc.
    c.charge(Cost::PtWalkLevel, 3);
    let pmd = pgtable::pmd_alloc(mm, cpu, addr)?;
    vmf.pmd = Some(pmd);
    let e = pmd.load(phys);
    if e.is_none() && huge_memory::thp_eligible(mm, vma, addr) {
        if let Some(done) = huge_memory::do_huge_pmd_anonymous_page(&vmf.undecided()) {
            return done;
        }
    } else if e.huge() {
        if vmf.write && !e.writable() {
            if let Some(done) = huge_memory::do_huge_pmd_wp_page(&vmf.undecided()) {
                return done;
            }
            // VM_FAULT_FALLBACK: the PMD was split; the written page is a PTE fault now.
            let table = pmd.load(phys);
            if table.is_none() || table.huge() {
                return Ok(());
            }
            vmf.pte = Some(Slot::offset(table.pfn(), Level::Pte, addr));
            return handle_pte_fault(vmf);
        }
        // huge_pmd_set_accessed: someone else mapped it, or a split holds the PMD lock with
        // the PMD invalidated; take the lock so the retried access finds the result.
        drop(pmd.lock_on(c, phys, Level::Pmd));
        return Ok(());
    }
    let pte_table = match pgtable::pte_alloc(mm, cpu, pmd) {
        Ok(t) => t,
        Err(PtAllocError::HugePmd) => return Ok(()), // raced with a huge mapping: re-walk
        Err(PtAllocError::NoMem) => return Err(OOM),
    };
    vmf.pte = Some(Slot::offset(pte_table, Level::Pte, addr));
    c.charge(Cost::PtWalkLevel, 1);
    handle_pte_fault(vmf)
}

/// `handle_pte_fault`: load the entry at `vmf.pte` (`orig_pte`) and hand the fault to the
/// handler for what it holds, on the fault's clock.
fn handle_pte_fault<C: SpinClock>(mut vmf: VmFault<'_, C>) -> Result<(), VmFaultError> {
    let phys = vmf.mm.machine().phys();
    let pte = vmf.pte();
    let e = pte.load(phys);
    vmf.orig_pte = e;
    if e.is_none() {
        if matches!(vmf.vma.kind, VmaKind::SharedAnon) {
            return anon::shmem_fault(&vmf.undecided());
        }
        return anon::do_anonymous_page(&vmf);
    }
    if vmf.write && e.present() && !e.writable() {
        return wp::do_wp_page(&vmf.undecided());
    }
    if e.maps_frame() && !e.present() {
        // PROT_NONE entry in a VMA that now allows the access: a stale protection. A page
        // shared copy-on-write stays read-only (the write fault then copies it).
        if let Some(pte) = pte.lock_if_same_on(vmf.clock, phys, Level::Pte, e) {
            let vma = vmf.vma;
            let w =
                !e.special() && (!vma.is_cow_mapping() || rmap::pte_anon_exclusive(phys, e.pfn()));
            pte.set_on(
                vmf.clock,
                Entry::new(e.pfn(), vma.leaf_bits(w) | (e.0 & _PAGE_SPECIAL)),
            );
        }
    }
    Ok(())
}
