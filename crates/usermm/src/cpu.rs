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
/// nodes, CPUs 0–3 are node 0 and 4–7 node 1. With more nodes than CPUs (memory-only nodes),
/// CPU `c` sits on node `c · nodes / cpus`, the first of its share of nodes; the others have
/// memory and no CPU.
///
/// # NUMA emulation (`numa=fake=N`)
/// A machine built on a profile whose hardware has fewer nodes than the run asks for
/// ([`Cpus::emulated`]) splits its physical nodes as x86's NUMA emulation does
/// (`arch/x86/mm/numa_emulation.c`, `split_nodes_interleave`; read in a v3.0-era tree and in
/// v5.10, alike):
/// - the RAM is cut into `N` equal emulated nodes handed out round robin over the physical
///   nodes, so emulated node `i` is memory of physical node `i % P`;
/// - `__apicid_to_node` is rewritten to the *first* emulated node of each CPU's physical node:
///   `cpu_to_node(c)` is the physical node of `c` (emulated node `p < P` is the first carved
///   from physical node `p`), and the other emulated nodes have memory and no CPU in
///   `cpu_to_node`'s view (`numa_add_cpu` still puts every CPU of `p` in each of their
///   `cpumask_of_node`, which the engine does not read);
/// - distances are the physical ones: the emulated nodes of one physical node are
///   `LOCAL_DISTANCE` apart, so a zonelist tries them right after the local node
///   (`page_alloc/zonemask.rs`).
///
/// So the workqueue's per-node pools (built from `cpu_to_node`) and every allocation's local
/// node stay per physical node, and what emulation adds is zones and LRU locks.
#[derive(Debug, Clone)]
pub struct Cpus {
    nr_cpus: u16,
    nr_nodes: u16,
    /// Physical nodes: `nr_nodes` unless emulated ([`Cpus::emulated`]).
    nr_phys: u16,
}

impl Cpus {
    pub fn new(nr_cpus: u16, nr_nodes: u16) -> Self {
        debug_assert!(nr_cpus >= 1 && nr_nodes >= 1);
        Self {
            nr_cpus,
            nr_nodes,
            nr_phys: nr_nodes,
        }
    }

    /// `nr_nodes` nodes emulated on a machine with `nr_phys` physical nodes (`numa=fake=`,
    /// see the type's doc); no emulation when `nr_nodes <= nr_phys`.
    #[doc(alias = "numa_emulation")]
    pub fn emulated(nr_cpus: u16, nr_nodes: u16, nr_phys: u16) -> Self {
        let c = Self::new(nr_cpus, nr_nodes);
        Self {
            nr_phys: nr_phys.clamp(1, nr_nodes),
            ..c
        }
    }

    /// The physical nodes the nodes were emulated on (`nr_nodes()` without emulation).
    pub fn nr_phys(&self) -> usize {
        self.nr_phys as usize
    }

    /// The physical node of `node` (`emu_nid_to_phys`): itself without emulation.
    #[doc(alias = "emu_nid_to_phys")]
    #[inline]
    pub fn phys_of(&self, node: NodeId) -> usize {
        phys_of_node(node.index(), self.nr_nodes as usize, self.nr_phys())
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
        let (cpus, nodes, phys) = (
            self.nr_cpus as usize,
            self.nr_nodes as usize,
            self.nr_phys as usize,
        );
        NodeId(emulated_node_of_cpu(cpu.index(), cpus, nodes, phys) as u16)
    }
}

/// The node of CPU `cpu` of `cpus` when `nodes` nodes are emulated on `phys` physical ones
/// (the rule of [`Cpus::emulated`]: the first emulated node of the CPU's physical node, which
/// is that physical node's number); [`node_of_cpu`] when nothing is emulated.
#[inline]
pub fn emulated_node_of_cpu(cpu: usize, cpus: usize, nodes: usize, phys: usize) -> usize {
    if phys >= nodes {
        node_of_cpu(cpu, cpus, nodes)
    } else {
        node_of_cpu(cpu, cpus, phys.max(1))
    }
}

/// The physical node of node `node` of `nodes` emulated on `phys` physical nodes (the rule of
/// [`Cpus::emulated`]: node `i` is memory of physical node `i % phys`); `node` itself when
/// nothing is emulated (`phys >= nodes`).
#[inline]
pub fn phys_of_node(node: usize, nodes: usize, phys: usize) -> usize {
    node % phys.clamp(1, nodes.max(1))
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

    /// numa=fake=16 on a 4-socket, 144-CPU machine: every CPU on the first emulated node of
    /// its physical node (that node's own number), nodes 4-15 memory-only, node n the memory
    /// of physical node n % 4; and no emulation when the nodes do not outnumber the physical.
    #[test]
    fn emulated_nodes_interleave_over_the_physical_ones() {
        let c = Cpus::emulated(144, 16, 4);
        let nodes: Vec<u16> = [0, 35, 36, 71, 72, 143]
            .iter()
            .map(|&n| c.node_of(CpuId(n)).0)
            .collect();
        assert_eq!(nodes, [0, 0, 1, 1, 2, 3]);
        assert_eq!((c.nr_nodes(), c.nr_phys()), (16, 4));
        let phys: Vec<usize> = (0..8).map(|n| c.phys_of(NodeId(n))).collect();
        assert_eq!(phys, [0, 1, 2, 3, 0, 1, 2, 3]);
        let plain = Cpus::emulated(144, 4, 4);
        assert!(plain
            .all()
            .all(|cpu| plain.node_of(cpu) == Cpus::new(144, 4).node_of(cpu)));
        assert_eq!(Cpus::emulated(8, 2, 4).nr_phys(), 2);
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
