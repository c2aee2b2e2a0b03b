//! Emulated CPUs and per-CPU data.
//!
//! The seeds ran on boxes with 72 to 144 hardware threads; the host that runs usermm may have
//! far fewer (as few as one or two). An emulated CPU is
//! therefore a *name* a host thread carries, not a host core: every workload thread, and every
//! worker of a workqueue, is bound to one [`CpuId`] and passes it explicitly to the engine (there
//! is no thread-local "current CPU" — see "No globals" in `lib.rs`). Per-CPU structures are
//! indexed by it.
//!
//! Mirrors `include/linux/percpu-defs.h` (`this_cpu_*`, `per_cpu_ptr`) and the topology of
//! `include/linux/topology.h` (`cpu_to_node`).
//!
//! # Differences from Linux
//! In the kernel, per-CPU data needs no lock when preemption is off, because only the owning CPU
//! touches it. Here several host threads may share one emulated CPU (72 `usemem` workers on 2
//! cores, or more threads than `nr_possible_cpus`), so each per-CPU slot that is mutated carries
//! its own lock — a `pcp->lock`-style spinlock, which the kernel also grew in 5.14.

use std::ops::Index;

use crossbeam_utils::CachePadded;
use serde::Serialize;

/// An emulated CPU number, `0..nr_possible_cpus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct CpuId(pub u16);

impl CpuId {
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for CpuId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cpu{}", self.0)
    }
}

/// A NUMA node number, `0..nr_nodes`. Each node has one zone and one LRU (one contention domain).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct NodeId(pub u16);

impl NodeId {
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// The CPU topology: how many CPUs and nodes, and which node each CPU sits on.
///
/// CPUs are spread over nodes in contiguous blocks, as firmware numbers sockets: with 8 CPUs on 2
/// nodes, CPUs 0–3 are node 0 and 4–7 node 1. With more nodes than CPUs (fake NUMA splitting
/// each node's memory), CPU `c` sits on node `c · nodes / cpus`, the first of its share of
/// nodes; the others have memory and no CPU, as a memory-only node has.
#[derive(Debug, Clone)]
pub struct Cpus {
    nr_cpus: u16,
    nr_nodes: u16,
}

impl Cpus {
    pub fn new(nr_cpus: u16, nr_nodes: u16) -> Self {
        debug_assert!(nr_cpus >= 1 && nr_nodes >= 1);
        Self { nr_cpus, nr_nodes }
    }

    #[doc(alias = "nr_cpu_ids")]
    pub fn nr_possible(&self) -> usize {
        self.nr_cpus as usize
    }

    pub fn nr_nodes(&self) -> usize {
        self.nr_nodes as usize
    }

    /// Every possible CPU, in order.
    #[doc(alias = "for_each_possible_cpu")]
    pub fn all(&self) -> impl Iterator<Item = CpuId> + Clone {
        (0..self.nr_cpus).map(CpuId)
    }

    /// `Some(CpuId)` when `n` names a possible CPU.
    pub fn get(&self, n: usize) -> Option<CpuId> {
        (n < self.nr_cpus as usize).then_some(CpuId(n as u16))
    }

    #[doc(alias = "cpu_to_node")]
    #[inline]
    pub fn node_of(&self, cpu: CpuId) -> NodeId {
        NodeId(node_of_cpu(cpu.index(), self.nr_cpus as usize, self.nr_nodes as usize) as u16)
    }
}

/// `MAX_NUMNODES` with `NODES_SHIFT` 10: the most nodes a machine may have (fake NUMA's
/// memory-only nodes included). `config::MAX_NODES` is this bound.
pub const MAX_NUMNODES: u16 = 1024;

/// The node of CPU `cpu` of `cpus` on `nodes` nodes (the rule of [`Cpus`]; virtual time's
/// placement uses the same).
#[inline]
pub fn node_of_cpu(cpu: usize, cpus: usize, nodes: usize) -> usize {
    if nodes <= cpus {
        cpu / cpus.div_ceil(nodes)
    } else {
        cpu * nodes / cpus
    }
}

/// One `T` per emulated CPU, each on its own cache line pair.
///
/// `CachePadded` aligns to 128 bytes on x86-64: adjacent-line prefetch pulls cache lines in
/// pairs, so two CPUs' counters 64 bytes apart would still false-share (crossbeam's rationale).
#[derive(Debug)]
pub struct PerCpu<T> {
    slots: Box<[CachePadded<T>]>,
}

impl<T> PerCpu<T> {
    pub fn new(nr_cpus: usize, mut init: impl FnMut(CpuId) -> T) -> Self {
        let slots = (0..nr_cpus)
            .map(|i| CachePadded::new(init(CpuId(i as u16))))
            .collect();
        Self { slots }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().map(|s| &**s)
    }
}

impl<T> Index<CpuId> for PerCpu<T> {
    type Output = T;
    #[doc(alias = "per_cpu_ptr")]
    #[inline]
    fn index(&self, cpu: CpuId) -> &T {
        &self.slots[cpu.index()]
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn cpus_are_spread_over_nodes_in_blocks() {
        let c = Cpus::new(8, 2);
        let nodes: Vec<_> = c.all().map(|cpu| c.node_of(cpu).0).collect();
        assert_eq!(nodes, [0, 0, 0, 0, 1, 1, 1, 1]);
        let c = Cpus::new(144, 4);
        assert_eq!(c.node_of(CpuId(35)).0, 0);
        assert_eq!(c.node_of(CpuId(36)).0, 1);
        assert_eq!(c.node_of(CpuId(143)).0, 3);
        assert!(c.get(144).is_none());
    }

    #[test]
    fn per_cpu_slots_do_not_share_cache_lines() {
        let p = PerCpu::new(4, |c| c.0 as u64);
        let a = &p[CpuId(0)] as *const u64 as usize;
        let b = &p[CpuId(1)] as *const u64 as usize;
        assert!(b - a >= 128);
        assert_eq!(p.iter().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
    }
}
