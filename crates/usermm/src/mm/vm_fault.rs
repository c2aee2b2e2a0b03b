//! `struct vm_fault` and `vm_fault_t`: a fault as its handlers pass it down (`fault/`,
//! `huge_memory.rs`), and why one could not be completed.
//!
//! Mirrors `include/linux/mm.h` (`struct vm_fault`) and `include/linux/mm_types.h`
//! (`vm_fault_t`, `VM_FAULT_OOM`, `VM_FAULT_SIGBUS`). A [`VmFault`] is made by
//! `fault::handle_vma_fault` (the kernel's `__handle_mm_fault`), which fills in the PMD slot
//! once the tables down to it exist; `handle_pte_fault` adds the PTE slot and the entry the
//! lockless walk saw. It is `Copy`: a handler that changes it works on its own copy.
//!
//! Differences from Linux: no `gfp_mask`, `pgoff`, `cow_page`, `prealloc_pte` or `ptl` (the
//! handlers allocate as they go, and the PTL is taken by `Slot::lock_if_same`, which returns
//! the guard); `tree` stands in for what the kernel reaches through `vma->vm_mm` under the mmap
//! lock. And one field the kernel has no need of: `clock`, the clock the fault runs on
//! (`vhook::Clock`), decided once at the fault's entry (`vhook::on_clock!`) and carried
//! down, so that the handlers it reaches take their locks and charges on it without testing
//! the seam's flag at each hook. A handler not yet written for a decided clock takes the
//! fault as [`VmFault::undecided`] (on `Current`: each of its hooks tests the flag).

use super::vma::{Vma, VmaTree};
use super::Mm;
use crate::cpu::CpuId;
use crate::pgtable::{Entry, Slot};
use crate::sync::vhook::{Clock, Current};

/// `struct vm_fault`: one fault, as the handlers below pass it down — what it is (the mm, the
/// VMA, the address, the access) from the start, and where it is in the tables once the walk
/// has got there (`pmd`, `pte`, and `orig_pte`, the entry the lockless walk saw, against which
/// the handler re-checks under the PTL).
#[doc(alias = "vm_fault")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct VmFault<'a, C: Clock = Current> {
    /// The clock the fault runs on (module doc): `Wall` or `Virtual` below
    /// `handle_vma_fault`, `Current` for a handler that tests the flag per hook.
    pub(crate) clock: C,
    /// `vma->vm_mm`.
    pub(crate) mm: &'a Mm,
    /// The VMAs, when the fault holds the mmap lock; `None` under the VMA's own lock
    /// (`FAULT_FLAG_VMA_LOCK`). `anon_vma_prepare` uses them to find a neighbour's anon_vma.
    pub(crate) tree: Option<&'a VmaTree>,
    pub(crate) vma: &'a Vma,
    /// The CPU taking the fault.
    pub(crate) cpu: CpuId,
    /// The faulting address (`real_address`; the kernel's `address` is its page).
    pub(crate) address: u64,
    /// `FAULT_FLAG_WRITE`.
    pub(crate) write: bool,
    /// `vmf->pmd`: the PMD slot, once `__handle_mm_fault` has allocated the tables down to it.
    pub(crate) pmd: Option<Slot>,
    /// `vmf->pte`: the PTE slot, once `handle_pte_fault` has it.
    pub(crate) pte: Option<Slot>,
    /// `vmf->orig_pte`: the PTE as the lockless walk saw it.
    pub(crate) orig_pte: Entry,
}

impl<'a, C: Clock> VmFault<'a, C> {
    /// A fault at `address` in `vma` on the clock `clock`, not yet walked.
    pub(crate) fn new(
        clock: C,
        mm: &'a Mm,
        tree: Option<&'a VmaTree>,
        vma: &'a Vma,
        cpu: CpuId,
        address: u64,
        write: bool,
    ) -> Self {
        VmFault {
            clock,
            mm,
            tree,
            vma,
            cpu,
            address,
            write,
            pmd: None,
            pte: None,
            orig_pte: Entry::NONE,
        }
    }

    /// `vmf->pmd`. Set before any PMD-level handler runs.
    pub(crate) fn pmd(&self) -> Slot {
        self.pmd.expect("vmf->pmd is set by __handle_mm_fault")
    }

    /// `vmf->pte`. Set before any PTE-level handler runs.
    pub(crate) fn pte(&self) -> Slot {
        self.pte.expect("vmf->pte is set by handle_pte_fault")
    }

    /// The same fault on `Current`, for a handler whose hooks test the flag each (module doc).
    pub(crate) fn undecided(&self) -> VmFault<'a> {
        let VmFault {
            clock: _,
            mm,
            tree,
            vma,
            cpu,
            address,
            write,
            pmd,
            pte,
            orig_pte,
        } = *self;
        VmFault {
            clock: Current,
            mm,
            tree,
            vma,
            cpu,
            address,
            write,
            pmd,
            pte,
            orig_pte,
        }
    }
}

/// Why a fault could not be completed: the error bits of `vm_fault_t` (`mm_types.h`). What a
/// task sees of each is `fault`'s `SegvCode`. (The fault itself, `struct vm_fault`, is
/// [`VmFault`].)
#[doc(alias = "vm_fault_t")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VmFaultError {
    /// `VM_FAULT_OOM`: no frame for a page or a page table.
    Oom,
    /// `VM_FAULT_SIGBUS`: the mapping's object cannot back the address.
    Sigbus,
    /// Not an error: the entry changed under the fault (a huge PMD appeared where a table
    /// was to go); the access re-walks, as after Linux's `pte_offset_map` failure.
    Raced,
}

impl VmFaultError {
    /// `vm_fault_to_errno` for callers that populate (`__get_user_pages`).
    pub(crate) fn errno(self) -> crate::error::Errno {
        match self {
            VmFaultError::Oom => crate::error::Errno::ENOMEM,
            VmFaultError::Sigbus | VmFaultError::Raced => crate::error::Errno::EFAULT,
        }
    }
}

/// An allocation for the fault failed.
#[doc(alias = "VM_FAULT_OOM")]
pub(crate) const OOM: VmFaultError = VmFaultError::Oom;

impl From<crate::pgtable::PtAllocError> for VmFaultError {
    fn from(e: crate::pgtable::PtAllocError) -> VmFaultError {
        match e {
            crate::pgtable::PtAllocError::NoMem => VmFaultError::Oom,
            crate::pgtable::PtAllocError::HugePmd => VmFaultError::Raced,
        }
    }
}
