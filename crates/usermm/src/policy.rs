//! Policies resolved once per machine and used by the mm: how `mmu_gather` frees its batches
//! (`free.policy`, seeds 000/001) and how `munmap` holds the mmap lock (seed 003).
//!
//! They live below both [`crate::machine`] (which builds them from the config) and
//! [`crate::mm`] (which follows them), so that neither imports the other for them. The gather's
//! slot counts are here too, because the policy's "full" thresholds derive from them; the
//! gather itself is in `mm/mmu_gather.rs`, which re-exports them.

use std::sync::atomic::AtomicU64;

use crate::config::{BatchSwitch, FreeConfig, FreePolicy, GatherConfig};
use crate::cpu::CpuId;
use crate::sync::workqueue::{UnboundPools, Workers, Workqueue};

/// `MMU_GATHER_BUNDLE`: on-stack slots of `tlb->local`.
pub const MMU_GATHER_BUNDLE: usize = 8;
/// `MAX_GATHER_BATCH`: slots in a batch page: (4096 − 16-byte header) / 8.
pub const MAX_GATHER_BATCH: usize = 510;

/// Aaron Lu's job: a detached list of batches being freed by a worker.
pub(crate) struct ParallelFree {
    pub(crate) wq: Workqueue,
    pub(crate) threshold: u64,
    pub(crate) fail_every: u64,
    pub(crate) attempts: AtomicU64,
}

pub(crate) enum BatchFree {
    Inline,
    Parallel(ParallelFree),
}

/// The gather's policy, resolved once per machine.
pub struct GatherPolicy {
    pub(crate) max_batch_count: u32,
    /// Entries at which `local` / a batch page counts as full: `max` (2017) or `max - 1`.
    pub(crate) local_full_at: usize,
    pub(crate) batch_full_at: usize,
    pub(crate) free: BatchFree,
}

impl std::fmt::Debug for GatherPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatherPolicy")
            .field("max_batch_count", &self.max_batch_count)
            .field("parallel", &matches!(self.free, BatchFree::Parallel(_)))
            .finish()
    }
}

impl GatherPolicy {
    pub(crate) fn new(
        g: &GatherConfig,
        f: &FreeConfig,
        worker_cpus: Vec<CpuId>,
        workers: Workers,
        pools: Option<UnboundPools>,
    ) -> Self {
        let free = match f.policy {
            FreePolicy::Inline => BatchFree::Inline,
            FreePolicy::Parallel => BatchFree::Parallel(ParallelFree {
                wq: {
                    let wq = Workqueue::with_workers(
                        "batch_free_wq",
                        f.max_active as usize,
                        worker_cpus,
                        workers,
                    );
                    // WQ_UNBOUND: per-node pools (v4.11), modelled in virtual time.
                    match pools {
                        Some(p) => wq.with_unbound_pools(p),
                        None => wq,
                    }
                },
                threshold: f.threshold_pages,
                fail_every: f.fail_job_alloc_every as u64,
                attempts: AtomicU64::new(0),
            }),
        };
        Self {
            max_batch_count: g.max_batch_count,
            local_full_at: full_at(MMU_GATHER_BUNDLE, g.batch_switch),
            batch_full_at: full_at(MAX_GATHER_BATCH, g.batch_switch),
            free,
        }
    }

    /// The workqueue of the parallel policy (its CPU-time accounting), if any.
    pub fn workqueue(&self) -> Option<&Workqueue> {
        match &self.free {
            BatchFree::Parallel(p) => Some(&p.wq),
            BatchFree::Inline => None,
        }
    }
}

/// When a list of `max` slots counts as full: v4.11 switches when it is full, later kernels
/// one entry earlier.
const fn full_at(max: usize, switch: BatchSwitch) -> usize {
    match switch {
        BatchSwitch::V2017 => max,
        BatchSwitch::Modern => max - 1,
    }
}

/// The resolved munmap policy (seed 003).
#[derive(Debug, Clone, Copy)]
pub struct MunmapPolicy {
    pub downgrade: bool,
    pub min_bytes: u64,
    pub stack_veto: bool,
}
