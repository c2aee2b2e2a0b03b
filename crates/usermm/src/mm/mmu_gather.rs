//! `mmu_gather`: batching the pages and tables that teardown frees, so the TLB is flushed once
//! per batch rather than once per page — and, optionally, freeing the batches in parallel.
//!
//! Mirrors `include/asm-generic/tlb.h` and `mm/mmu_gather.c` (`tlb_gather_mmu`,
//! `__tlb_remove_page_size`, `tlb_next_batch`, `tlb_flush_mmu_tlbonly`, `tlb_flush_mmu_free`,
//! `tlb_batch_pages_flush`, `tlb_remove_table`, `tlb_finish_mmu`), and the unmerged 2017 series
//! "mm: support parallel free of memory" (Aaron Lu), patches 1–3 and 5.
//!
//! ```text
//!  local: 8 on-stack slots ─next→ batch page (510 slots) ─next→ batch page ─ … (≤ max_batch_count)
//!  remove_page(): append; when the active batch is full, move to the next (reused, or a new page
//!  taken from the buddy with GFP_NOWAIT); when none can be had, report "full": the caller
//!  flushes (TLB, then free) before it goes on.
//! ```
//!
//! # Ordering (the rule the whole file exists for)
//! 1. The PTE is cleared (and the range widened) before the page is queued.
//! 2. The TLB flush of the range (`MmuGather::flush_tlbonly`) precedes every free and every
//!    hand-off to a worker — no CPU can reach a page once it is being freed.
//! 3. `MmuGather::finish` returns only after every page was freed, including those handed to
//!    workers (jobs are joined oldest first).
//!
//! A gather is built only inside the crate (its constructor and every method that queues or
//! frees are `pub(crate)`): a page handed to `remove_page` is freed, so only the zap, which
//! has just cleared the entry mapping it, may hand one. The huge zero page is the exception
//! that is gathered and never freed: its entry drops the zapped PMD's reference on it when
//! its batch is released (v4.7 to 2021's removal of that gathering; `crate::huge_zero_page`, "Where a zap's put happens").
//!
//! # The two free policies (`free.policy`, resolved once in [`GatherPolicy`])
//! - `inline`: `tlb_flush_mmu_free` releases every batch in the zapping task, in chunks of at
//!   most 512 entries (`MAX_NR_FOLIOS_PER_FREE`).
//! - `parallel`: once `page_nr ≥ free.threshold_pages` (256K), the batch list after `local` is
//!   detached into a job (allocation may fail — fault injection — and then the list is freed
//!   inline), queued on the machine's `batch_free_wq` (`max_active` workers), and the zapping
//!   task goes on with fresh batch pages. The 8 local slots are always freed inline. Workers free
//!   the pages *and* the batch pages. With this policy `max_batch_count` must be large enough
//!   for the threshold to be reached (the patch raises it to 515).
//!
//! # Differences from Linux
//! Batch pages are real frames from the buddy (counted), but the slots live in a Rust vector
//! beside them. Page-table pages go to their own batch (`MMU_GATHER_TABLE_FREE`) and are freed
//! right after the TLB flush, with no RCU delay (no lockless walker outlives a flush here: see
//! the TLB gate in `mm/tlb.rs`). No delayed rmap, no encoded "page + nr" pairs: a THP is one
//! entry.

use std::sync::atomic::Ordering::Relaxed;

use crate::addr::{Order, Pfn};
use crate::cpu::CpuId;
use crate::huge_zero_page::HugeZeroPage;
use crate::mm::Mm;
use crate::page_alloc::meta::PG_KERNEL;
use crate::page_alloc::{Gfp, PhysMem};
use crate::policy::{BatchFree, ParallelFree};
pub use crate::policy::{GatherPolicy, MAX_GATHER_BATCH, MMU_GATHER_BUNDLE};
use crate::stats::VmItem;
use crate::sync::workqueue::WorkHandle;

/// `MAX_TABLE_BATCH`: page-table pages per table batch.
pub const MAX_TABLE_BATCH: usize = 509;
/// `MAX_NR_FOLIOS_PER_FREE`: entries released between two yield points.
pub const MAX_NR_FOLIOS_PER_FREE: usize = 512;

/// One batch page: its frame, and its slots.
struct Batch {
    frame: Pfn,
    pages: Vec<Pfn>,
}

/// Release `pages` in chunks of `MAX_NR_FOLIOS_PER_FREE` (`tlb_batch_pages_flush`); a
/// gathered huge zero page's reference is dropped in its place (`release_gathered`).
fn free_batch_pages(phys: &PhysMem, hz: &HugeZeroPage, cpu: CpuId, pages: &[Pfn]) {
    let huge_zero = hz.pfn();
    for chunk in pages.chunks(MAX_NR_FOLIOS_PER_FREE) {
        phys.release_gathered(cpu, chunk, huge_zero, &mut || hz.release_put(cpu));
    }
}

/// Give the batch pages themselves back (`tlb_batch_list_free`).
fn free_batch_frames(phys: &PhysMem, cpu: CpuId, batches: &[Batch]) {
    let frames: Vec<Pfn> = batches.iter().map(|b| b.frame).collect();
    for &f in &frames {
        phys.meta(f).clear(PG_KERNEL);
    }
    phys.release_pages(cpu, &frames);
}

/// Counters of one gather's life, for the experiments.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct GatherStats {
    pub pages: u64,
    pub forced_flushes: u64,
    pub tlb_flushes: u64,
    pub jobs: u64,
    pub job_alloc_failures: u64,
    pub batch_pages: u64,
}

/// Whether the gather covers the whole address space (exit) or a range (munmap, DONTNEED).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FullMm {
    Yes,
    No,
}

impl std::fmt::Debug for MmuGather<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MmuGather")
            .field("fullmm", &self.fullmm)
            .field("batches", &self.batches.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// `struct mmu_gather`.
#[doc(alias = "mmu_gather")]
#[must_use = "a gather must be finished with finish()"]
pub struct MmuGather<'a> {
    mm: &'a Mm,
    phys: &'a PhysMem,
    policy: &'a GatherPolicy,
    cpu: CpuId,
    fullmm: bool,
    start: u64,
    end: u64,
    cleared: bool,
    freed_tables: bool,
    local: Vec<Pfn>,
    batches: Vec<Batch>,
    /// Index of the active batch in `batches`; `None` = `local`.
    active: Option<usize>,
    /// Entries added since the last free (`tlb->page_nr` of the patch).
    page_nr: u64,
    tables: Vec<Pfn>,
    jobs: Vec<WorkHandle>,
    finished: bool,
    pub stats: GatherStats,
}

impl<'a> MmuGather<'a> {
    /// `tlb_gather_mmu` / `tlb_gather_mmu_fullmm`.
    #[doc(alias = "tlb_gather_mmu")]
    #[doc(alias = "tlb_gather_mmu_fullmm")]
    pub(crate) fn new(mm: &'a Mm, cpu: CpuId, full: FullMm) -> Self {
        let machine = mm.machine();
        Self {
            mm,
            phys: machine.phys(),
            policy: machine.gather_policy(),
            cpu,
            fullmm: full == FullMm::Yes,
            start: u64::MAX,
            end: 0,
            cleared: false,
            freed_tables: false,
            local: Vec::with_capacity(MMU_GATHER_BUNDLE),
            batches: Vec::new(),
            active: None,
            page_nr: 0,
            tables: Vec::new(),
            jobs: Vec::new(),
            finished: false,
            stats: GatherStats::default(),
        }
    }

    pub fn cpu(&self) -> CpuId {
        self.cpu
    }

    /// The mm whose entries this gather collects (`tlb->mm`).
    #[inline]
    pub(crate) fn mm(&self) -> &'a Mm {
        self.mm
    }

    /// `tlb_remove_tlb_entry`: widen the range to flush by one cleared entry of `size` bytes.
    #[inline]
    pub(crate) fn remove_tlb_entry(&mut self, addr: u64, size: u64) {
        self.start = self.start.min(addr);
        self.end = self.end.max(addr + size);
        self.cleared = true;
    }

    /// `__tlb_remove_page_size`: queue a page whose PTE was cleared. Returns `true` when the
    /// gather is full and the caller must flush before queueing more.
    #[doc(alias = "tlb_remove_page")]
    #[inline]
    #[must_use]
    pub(crate) fn remove_page(&mut self, pfn: Pfn) -> bool {
        self.page_nr += 1;
        self.stats.pages += 1;
        let (len, full_at) = match self.active {
            None => {
                self.local.push(pfn);
                (self.local.len(), self.policy.local_full_at)
            }
            Some(i) => {
                let b = &mut self.batches[i].pages;
                b.push(pfn);
                (b.len(), self.policy.batch_full_at)
            }
        };
        if len >= full_at && !self.next_batch() {
            return true;
        }
        false
    }

    /// `tlb_next_batch`: reuse the next batch page or allocate one (never blocking).
    fn next_batch(&mut self) -> bool {
        let next = self.active.map_or(0, |i| i + 1);
        if next < self.batches.len() {
            self.active = Some(next);
            return true;
        }
        if self.batches.len() as u32 >= self.policy.max_batch_count {
            return false;
        }
        let Ok(frame) = self.phys.alloc_pages(self.cpu, Order(0), Gfp::NOWAIT) else {
            return false;
        };
        self.phys.meta(frame).set(PG_KERNEL);
        self.phys.stat().inc(self.cpu, VmItem::GatherBatchAlloc);
        self.stats.batch_pages += 1;
        self.batches.push(Batch {
            frame,
            pages: Vec::with_capacity(MAX_GATHER_BATCH),
        });
        self.active = Some(next);
        true
    }

    /// `tlb_remove_table`: queue a page-table page whose parent entry was cleared.
    pub(crate) fn remove_table(&mut self, table: Pfn) {
        self.freed_tables = true;
        self.tables.push(table);
        if self.tables.len() >= MAX_TABLE_BATCH {
            self.flush_tlbonly();
            self.free_tables();
        }
    }

    /// `tlb_flush_mmu_tlbonly`: flush the TLB for what was cleared since the last flush.
    pub(crate) fn flush_tlbonly(&mut self) {
        if !self.cleared && !self.freed_tables {
            return;
        }
        let pages = if self.fullmm || self.end <= self.start {
            None
        } else {
            Some((self.end - self.start) / crate::addr::PAGE_SIZE)
        };
        self.mm.flush_tlb(self.cpu, pages);
        self.stats.tlb_flushes += 1;
        self.start = u64::MAX;
        self.end = 0;
        self.cleared = false;
    }

    fn free_tables(&mut self) {
        for t in self.tables.drain(..) {
            crate::pgtable::free_table(self.phys, self.cpu, t);
        }
        self.freed_tables = false;
    }

    /// `tlb_flush_mmu_free`: free the tables, then the gathered pages — inline, or by handing
    /// the batch list to a worker (parallel policy).
    fn flush_free(&mut self) {
        self.free_tables();
        if let BatchFree::Parallel(p) = &self.policy.free {
            if self.page_nr >= p.threshold && !self.batches.is_empty() {
                self.hand_off(p);
            }
        }
        let hz = self.mm.machine().huge_zero();
        free_batch_pages(self.phys, hz, self.cpu, &self.local);
        self.local.clear();
        for b in &mut self.batches {
            if b.pages.is_empty() {
                break;
            }
            free_batch_pages(self.phys, hz, self.cpu, &b.pages);
            b.pages.clear();
        }
        self.active = None;
        self.page_nr = 0;
    }

    /// Patch 2/5: detach the list after `local` into a job and queue it.
    fn hand_off(&mut self, p: &ParallelFree) {
        let n = p.attempts.fetch_add(1, Relaxed) + 1;
        if p.fail_every != 0 && n.is_multiple_of(p.fail_every) {
            // kmalloc(GFP_NOWAIT) failed: free synchronously below.
            self.stats.job_alloc_failures += 1;
            self.phys.stat().inc(self.cpu, VmItem::FreeJobAllocFailed);
            return;
        }
        let batches = std::mem::take(&mut self.batches);
        let phys = self.mm.machine().phys_arc();
        let hz = self.mm.machine().huge_zero_arc();
        let handle = p.wq.queue(move |cpu| {
            for b in &batches {
                free_batch_pages(&phys, &hz, cpu, &b.pages);
            }
            free_batch_frames(&phys, cpu, &batches);
        });
        self.jobs.push(handle);
        self.stats.jobs += 1;
        self.phys.stat().inc(self.cpu, VmItem::FreeJobsQueued);
    }

    /// `tlb_flush_mmu`: TLB first, then free.
    pub(crate) fn flush(&mut self) {
        self.flush_tlbonly();
        self.flush_free();
    }

    /// Called by the zap walk when `MmuGather::remove_page` reported full.
    pub(crate) fn forced_flush(&mut self) {
        self.stats.forced_flushes += 1;
        self.phys.stat().inc(self.cpu, VmItem::GatherForcedFlush);
        self.flush();
    }

    /// `tlb_finish_mmu`: flush, wait for every job (oldest first), free the batch pages.
    #[doc(alias = "tlb_finish_mmu")]
    pub(crate) fn finish(mut self) -> GatherStats {
        self.finish_inner();
        self.stats
    }

    fn finish_inner(&mut self) {
        if self.finished {
            return;
        }
        self.flush();
        for j in self.jobs.drain(..) {
            j.wait();
        }
        free_batch_frames(self.phys, self.cpu, &std::mem::take(&mut self.batches));
        self.finished = true;
    }
}

impl Drop for MmuGather<'_> {
    fn drop(&mut self) {
        if !self.finished {
            vm_warn_on!(true);
            self.finish_inner();
        }
    }
}

/// The parallel policy keeps its workers' CPU time; a handle for reports.
pub fn worker_cpu_ns(policy: &GatherPolicy) -> u64 {
    policy.workqueue().map_or(0, |wq| wq.stats().cpu_ns)
}
