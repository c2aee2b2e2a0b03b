//! Where an unbound workqueue's workers run in virtual time: the per-node pools of v4.11.
//!
//! In the seeds' kernels (v4.10/v4.11) an `alloc_workqueue(..., WQ_UNBOUND, ...)` has one
//! `pool_workqueue` per NUMA node (`wq_numa_enabled`, `wq_update_unbound_numa`): `queue_work`
//! from a CPU puts the item on the pool of *that CPU's node*, whose kworkers are allowed on the
//! node's CPUs only (the pool's `attrs->cpumask`). Which CPU of the node a woken kworker then
//! runs on is the scheduler's choice: `select_idle_sibling` → `select_idle_core` (since 4.9)
//! prefers a core whose every hardware thread is idle, then an idle thread. So the patch's
//! `batch_free_wq`, queued from the zapping task, runs all `max_active` of its workers on the
//! zapping task's node: 32 workers share that node's 18 cores with the task, and past the idle
//! cores they land on SMT siblings (docs/two-clocks.md, "What the model prices").
//!
//! [`UnboundPools::workers_for`] makes that choice once per run, when the first item is queued
//! (the engine's workers are bound for the run; the kernel's may move between the node's CPUs,
//! which changes nothing the model prices as long as they stay on the node), as v4.11's
//! `select_idle_sibling` would for workers woken one after another by the queuer (the waker,
//! so the target of the scan): the node's CPUs in `for_each_cpu_wrap` order from the queuer,
//! first one CPU of each core whose threads are all idle (`select_idle_core`: the queuer's
//! core is not), then every other idle CPU in the same order (`select_idle_cpu`) — the
//! queuer's own SMT sibling among them, in its turn: a worker there slows the zapping task by
//! the profile's SMT factor. Past the node's CPUs they wrap (two workers take turns on one
//! CPU, as an overloaded node's runqueues would).
//!
//! Differences: the kernel's choice depends on load at each wake-up; here every CPU but the
//! queuer's is idle when the free starts, which is the seed's situation (one process freeing
//! on an otherwise idle machine). Host-thread workqueues (wall mode) keep their fixed CPUs.

use crate::cpu::CpuId;

/// The topology an unbound workqueue's per-node pools need: each CPU's node, core and SMT
/// thread (from the virtual run's placement).
#[doc(alias = "wq_numa_enabled")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnboundPools {
    node: Box<[u16]>,
    core: Box<[u32]>,
    thread: Box<[u8]>,
}

impl UnboundPools {
    /// One entry per CPU, indexed by CPU number: its node, machine-wide core and SMT thread.
    ///
    /// # Panics
    /// If the three slices differ in length or are empty.
    pub fn new(node: Vec<u16>, core: Vec<u32>, thread: Vec<u8>) -> Self {
        assert!(
            !node.is_empty() && node.len() == core.len() && core.len() == thread.len(),
            "unbound pools: one node, core and thread per CPU"
        );
        Self {
            node: node.into(),
            core: core.into(),
            thread: thread.into(),
        }
    }

    /// The CPUs `n` workers of the pool of `queuer`'s node run on (see the module doc).
    #[doc(alias = "select_idle_sibling")]
    #[doc(alias = "select_idle_core")]
    #[doc(alias = "select_idle_cpu")]
    pub fn workers_for(&self, queuer: CpuId, n: usize) -> Vec<CpuId> {
        let nr = self.node.len();
        let q = queuer.index().min(nr - 1);
        // `for_each_cpu_wrap(cpu, mask, target)`: the node's CPUs from the target (the
        // waking queuer) on, wrapping at the last CPU; the queuer itself is busy.
        let mut wrap: Vec<usize> = (0..nr)
            .filter(|&c| c != q && self.node[c] == self.node[q])
            .collect();
        wrap.sort_by_key(|&c| (c + nr - q) % nr);
        // select_idle_core: a core whose every thread is idle, named by its first CPU in
        // wrap order; the queuer's core is not idle.
        let mut cand: Vec<usize> = Vec::with_capacity(wrap.len());
        for &c in &wrap {
            let core = self.core[c];
            if core != self.core[q] && !cand.iter().any(|&d| self.core[d] == core) {
                cand.push(c);
            }
        }
        // Then select_idle_cpu: any idle CPU in wrap order, the queuer's sibling included.
        let rest: Vec<usize> = wrap.iter().copied().filter(|c| !cand.contains(c)).collect();
        cand.extend(rest);
        if cand.is_empty() {
            cand.push(q);
        }
        (0..n).map(|i| CpuId(cand[i % cand.len()] as u16)).collect()
    }
}
