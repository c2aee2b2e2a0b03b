//! The huge zero page and its reference counting (seed 002).
//!
//! Mirrors `mm/huge_memory.c`: `get_huge_zero_page`/`put_huge_zero_page` (4.8, the vanilla
//! policy), `mm_get_huge_zero_page`/`mm_put_huge_zero_page` with `MMF_HUGE_ZERO_PAGE` (4.9+,
//! "thp: reduce usage of huge zero page's atomic counter"), and the shrinker
//! (`shrink_huge_zero_page_count`/`_scan`).
//!
//! ```text
//!  huge_zero_pfn ──► order-9 zeroed frame, PG_reserved   (allocated lazily, installed by CAS)
//!  huge_zero_refcount: 0 = none; 1 = only the shrinker's bias; n+1 = n users
//! ```
//!
//! # The two policies
//! - `per_mm_ref = off` (vanilla): every read fault that maps it does `get` (an
//!   `atomic_inc_not_zero` CAS loop on the one global counter) and every PMD of it that is
//!   zapped, split or replaced gives a `put`. 72 processes faulting 2 MiB steps hammer one cache
//!   line: 54 % of cycles in the seed.
//! - `per_mm_ref = on` (merged in 4.9): the first use in an mm takes one reference and sets
//!   `MMF_HUGE_ZERO_PAGE`; later faults only test the flag; `__mmput` drops it after
//!   `exit_mmap`. Zaps touch nothing. The reference is not inherited: a forked child takes its own when it
//!   copies a huge-zero PMD (`mm/fork.rs`), since `MMF_HUGE_ZERO_PAGE` is not copied.
//!
//! # Where a zap's put happens
//! Since v4.7 ("thp: keep huge zero page pinned until tlb flush", Kirill Shutemov, 2016) the
//! zap does not put: `zap_huge_pmd` gathers the page into the `mmu_gather`
//! (`tlb_remove_page_size`) and `release_pages` puts it when the gather is flushed (its loop
//! tests `is_huge_zero_page` before touching the page), so the seed's v4.8 drops a zapped
//! mm's references in runs, one per gathered PMD, back to back in one loop
//! ([`HugeZeroPage::release_put`]). With the 4.9 patch `release_pages` skips the page instead;
//! the gathering itself went with "remove unnecessary tlb_remove_page_size() for huge zero
//! pmd" (Miaohe Lin, 2021), which the engine does not follow (one zap path for both policies).
//! A split (`__split_huge_zero_page_pmd`) and a write fault that replaces the PMD put at once,
//! as v4.8 did ([`HugeZeroPage::zap_put`]).
//!
//! # Invariants
//! 1. While the page exists, `refcount ≥ 1` (the shrinker's bias); only the shrinker moves it
//!    1 → 0 (by CAS) and frees the page; `put` never reaches 0.
//! 2. `pfn` is set only together with `refcount` = 2 (bias + the allocating caller).
//! 3. With `per_mm_ref`, an mm holds exactly one reference iff `MMF_HUGE_ZERO_PAGE` is set.
//!
//! # Locks
//! Atomics only; callers may hold a PMD lock.
//!
//! # Differences from Linux
//! The page is reached through its PFN (no folio pointer). The modern
//! `CONFIG_PERSISTENT_HUGE_ZERO_FOLIO` is not modelled. Every operation on the global counter
//! is counted (`usermm_huge_zero_ref_get`/`_put`), which the kernel exposes only through perf.

use std::sync::atomic::{
    AtomicI64, AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::Arc;

use crate::addr::{Pfn, HPAGE_PMD_NR, HPAGE_PMD_ORDER};
use crate::config::HugeZeroWriteFault;
use crate::cpu::CpuId;
use crate::page_alloc::meta::PG_RESERVED;
use crate::page_alloc::{Gfp, PhysMem, Shrinker};
use crate::stats::VmItem;
use crate::sync::class::{HUGE_ZERO_REFCOUNT, HUGE_ZERO_REFCOUNT_PUT};
use crate::sync::SharedLine;

/// `MMF_HUGE_ZERO_PAGE`: this mm holds a reference on the huge zero page (seed 002). A bit of
/// `mm->flags`, defined here with the only code that reads it; `mm` re-exports it.
pub const MMF_HUGE_ZERO_PAGE: u64 = 1 << 23;

const NO_PFN: u64 = u64::MAX;

/// The machine's huge zero page, with both reference policies: per fault
/// (`get_huge_zero_page` / `put_huge_zero_page`) or once per mm
/// (`mm_get_huge_zero_page` / `mm_put_huge_zero_page`, which the fault and exit paths use
/// through the crate-private `fault_get` and `mm_put`).
#[doc(alias = "mm_get_huge_zero_page")]
#[doc(alias = "mm_put_huge_zero_page")]
#[doc(alias = "huge_zero_folio")]
#[derive(Debug)]
pub struct HugeZeroPage {
    /// `huge_zero_pfn`.
    pfn: AtomicU64,
    /// `huge_zero_refcount`.
    /// `huge_zero_refcount`: one cache line every CPU that maps or zaps the page writes.
    refcount: SharedLine<AtomicI64>,
    per_mm_ref: bool,
    write_fault: HugeZeroWriteFault,
    phys: Arc<PhysMem>,
}

impl HugeZeroPage {
    pub(crate) fn new(
        phys: Arc<PhysMem>,
        per_mm_ref: bool,
        write_fault: HugeZeroWriteFault,
    ) -> Self {
        Self {
            pfn: AtomicU64::new(NO_PFN),
            refcount: SharedLine::new(&HUGE_ZERO_REFCOUNT, AtomicI64::new(0)),
            per_mm_ref,
            write_fault,
            phys,
        }
    }

    /// The frame, while it exists (`is_huge_zero_pfn`).
    #[inline]
    pub fn pfn(&self) -> Option<Pfn> {
        match self.pfn.load(Acquire) {
            NO_PFN => None,
            p => Some(Pfn(p)),
        }
    }

    pub fn refcount(&self) -> i64 {
        self.refcount.load(Relaxed)
    }

    pub fn per_mm_ref(&self) -> bool {
        self.per_mm_ref
    }

    pub fn write_fault_policy(&self) -> HugeZeroWriteFault {
        self.write_fault
    }

    /// `get_huge_zero_page`: a reference on the global counter, allocating the page if none.
    /// `None` when it cannot be allocated (the caller falls back to 4 KiB zero pages).
    #[inline(never)]
    pub(crate) fn get_huge_zero_page(&self, cpu: CpuId) -> Option<Pfn> {
        let stat = self.phys.stat();
        loop {
            // atomic_inc_not_zero: one RMW of the shared line (see SharedLine::fetch_update).
            if self
                .refcount
                .fetch_update(AcqRel, Relaxed, |c| (c != 0).then_some(c + 1))
                .is_ok()
            {
                stat.inc(cpu, VmItem::HugeZeroRefGet);
                // Refcount ≥ 2 pins the pfn (invariant 2).
                return self.pfn();
            }
            let Ok(page) =
                self.phys
                    .alloc_pages(cpu, HPAGE_PMD_ORDER, Gfp::ZERO.union(Gfp::NOWAIT))
            else {
                stat.inc(cpu, VmItem::ThpZeroPageAllocFailed);
                return None;
            };
            if self
                .pfn
                .compare_exchange(NO_PFN, page.0, AcqRel, Relaxed)
                .is_err()
            {
                // Lost the race: someone else installed one.
                let _ = self.phys.free_pages(cpu, page, HPAGE_PMD_ORDER);
                continue;
            }
            self.phys.meta(page).set(PG_RESERVED);
            // One for the caller, one the shrinker will put back.
            self.refcount.store(2, Release);
            stat.inc(cpu, VmItem::ThpZeroPageAlloc);
            stat.inc(cpu, VmItem::HugeZeroRefGet);
            return Some(page);
        }
    }

    /// `put_huge_zero_page`: drop a reference; never the last (invariant 1).
    #[inline(never)]
    pub(crate) fn put_huge_zero_page(&self, cpu: CpuId) {
        // Accounted apart from the gets (HUGE_ZERO_REFCOUNT_PUT): a profile of the seed's kernel
        // lists put_huge_zero_page's cycles on a line of their own.
        let old = self
            .refcount
            .fetch_sub_as(&HUGE_ZERO_REFCOUNT_PUT, 1, AcqRel);
        self.phys.stat().inc(cpu, VmItem::HugeZeroRefPut);
        vm_bug_on!(
            old <= 1,
            "put_huge_zero_page dropped the shrinker's reference"
        );
    }

    /// The reference a read fault takes to map the page: per fault (vanilla) or once per mm.
    #[doc(alias = "mm_get_huge_zero_page")]
    #[inline]
    pub(crate) fn fault_get(&self, mm_flags: &AtomicU64, cpu: CpuId) -> Option<Pfn> {
        if !self.per_mm_ref {
            return self.get_huge_zero_page(cpu);
        }
        if mm_flags.load(Relaxed) & MMF_HUGE_ZERO_PAGE != 0 {
            return self.pfn();
        }
        let pfn = self.get_huge_zero_page(cpu)?;
        if mm_flags.fetch_or(MMF_HUGE_ZERO_PAGE, AcqRel) & MMF_HUGE_ZERO_PAGE != 0 {
            self.put_huge_zero_page(cpu);
        }
        Some(pfn)
    }

    /// A fault that took a reference did not install the PMD after all.
    pub(crate) fn fault_unused(&self, cpu: CpuId) {
        if !self.per_mm_ref {
            self.put_huge_zero_page(cpu);
        }
    }

    /// A huge-zero PMD was split away or replaced (v4.8 puts at once there).
    pub(crate) fn zap_put(&self, cpu: CpuId) {
        if !self.per_mm_ref {
            self.put_huge_zero_page(cpu);
        }
    }

    /// `release_pages` met the huge zero page in a flushed gather (a zapped huge-zero PMD):
    /// v4.8 drops that PMD's reference here; with the per-mm reference there is none to drop.
    #[doc(alias = "release_pages")]
    pub(crate) fn release_put(&self, cpu: CpuId) {
        if !self.per_mm_ref {
            self.put_huge_zero_page(cpu);
        }
    }

    /// `mm_put_huge_zero_page` from `__mmput`.
    pub(crate) fn mm_put(&self, mm_flags: &AtomicU64, cpu: CpuId) {
        if self.per_mm_ref
            && mm_flags.fetch_and(!MMF_HUGE_ZERO_PAGE, AcqRel) & MMF_HUGE_ZERO_PAGE != 0
        {
            self.put_huge_zero_page(cpu);
        }
    }
}

impl Shrinker for HugeZeroPage {
    fn name(&self) -> &'static str {
        "huge_zero_page_shrinker"
    }

    /// `shrink_huge_zero_page_count`: 512 only when the shrinker's bias is the last reference.
    fn count(&self) -> u64 {
        if self.refcount.load(Relaxed) == 1 {
            HPAGE_PMD_NR
        } else {
            0
        }
    }

    /// `shrink_huge_zero_page_scan`: 1 → 0, then free the page.
    fn scan(&self, cpu: CpuId) -> u64 {
        if self
            .refcount
            .compare_exchange(1, 0, AcqRel, Relaxed)
            .is_err()
        {
            return 0;
        }
        let pfn = self.pfn.swap(NO_PFN, AcqRel);
        vm_bug_on!(pfn == NO_PFN, "huge zero refcount 1 without a page");
        let pfn = Pfn(pfn);
        self.phys.meta(pfn).clear(PG_RESERVED);
        let _ = self.phys.free_pages(cpu, pfn, HPAGE_PMD_ORDER);
        HPAGE_PMD_NR
    }
}
