//! Where the modelled machine's CPUs sit: socket, core, SMT thread and memory node, and how
//! far a cache line travels between two of them.

#![deny(unsafe_code)]

use serde::Serialize;

use super::{Profile, ProfileError};

/// How far a cache line travels between two CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Distance {
    /// The line is already here: no transfer.
    SameCpu = 0,
    /// The other hardware thread of this core (shared L1/L2).
    SmtSibling = 1,
    /// Another core of this socket (through the shared L3).
    SameSocket = 2,
    /// A core of another socket (through the inter-socket link).
    OtherSocket = 3,
}

/// Where each emulated CPU sits: socket, core, SMT thread, memory node.
///
/// # Numbering
/// CPUs are spread over sockets in contiguous blocks of `ceil(nr_cpus / sockets)`, the rule the
/// engine uses to spread CPUs over nodes (`cpu_to_node` in `cpu.rs`), so that with one node per
/// socket a CPU's node and socket agree. Inside a socket's block the first CPUs take thread 0 of
/// each core, the next ones thread 1: a run with fewer CPUs than hardware threads gets whole
/// cores before it shares one. Linux on these Intel machines numbers all sockets' first threads
/// before any sibling (CPU `n` and `n + cores` share a core); the numbers differ, the shape —
/// which CPUs share a core, a socket — is the same.
///
/// # Fake NUMA
/// `nr_nodes` may exceed the profile's nodes (`numa=fake=`): the nodes are emulated as x86's
/// NUMA emulation does (`crate::cpu::Cpus::emulated`): node `i` is memory of physical node
/// `i % the profile's nodes`, and every CPU sits on the first emulated node of its physical node, the
/// others having memory and no CPU. Costs follow sockets, never nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    nr_cpus: usize,
    nr_nodes: usize,
    /// The profile's (physical) nodes: fewer than `nr_nodes` under emulation.
    nr_phys: usize,
    socket: Vec<u16>,
    /// Machine-wide core number (`socket * cores_per_socket + core`).
    core: Vec<u32>,
    thread: Vec<u8>,
    node: Vec<u16>,
}

impl Placement {
    /// Places `nr_cpus` CPUs and `nr_nodes` memory nodes on the profile's machine.
    pub fn new(profile: &Profile, nr_cpus: usize, nr_nodes: usize) -> Result<Self, ProfileError> {
        profile.check_cpus(nr_cpus)?;
        if nr_nodes == 0 || nr_nodes > usize::from(crate::cpu::MAX_NUMNODES) {
            return Err(profile.topology_error(
                "nodes",
                format!(
                    "{nr_nodes} nodes; must be between 1 and {}",
                    crate::cpu::MAX_NUMNODES
                ),
            ));
        }
        let t = profile.topology();
        let per_socket = nr_cpus.div_ceil(t.sockets as usize);
        let cps = t.cores_per_socket as usize;
        let mut p = Placement {
            nr_cpus,
            nr_nodes,
            nr_phys: (t.nodes as usize).max(1),
            socket: Vec::with_capacity(nr_cpus),
            core: Vec::with_capacity(nr_cpus),
            thread: Vec::with_capacity(nr_cpus),
            node: Vec::with_capacity(nr_cpus),
        };
        for cpu in 0..nr_cpus {
            let socket = cpu / per_socket;
            let local = cpu % per_socket;
            p.socket.push(socket as u16);
            p.core.push((socket * cps + local % cps) as u32);
            p.thread.push((local / cps) as u8);
            p.node.push(
                crate::cpu::emulated_node_of_cpu(cpu, nr_cpus, nr_nodes, t.nodes as usize) as u16,
            );
        }
        Ok(p)
    }

    pub fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }

    pub fn nr_nodes(&self) -> usize {
        self.nr_nodes
    }

    #[doc(alias = "topology_physical_package_id")]
    pub fn socket_of(&self, cpu: usize) -> usize {
        self.socket[cpu] as usize
    }

    /// The machine-wide core number of `cpu` (`socket * cores_per_socket + core`).
    #[doc(alias = "topology_core_id")]
    pub fn core_of(&self, cpu: usize) -> usize {
        self.core[cpu] as usize
    }

    /// Which hardware thread of its core `cpu` is (0 or 1 on the seeds' machines).
    pub fn thread_of(&self, cpu: usize) -> usize {
        self.thread[cpu] as usize
    }

    #[doc(alias = "cpu_to_node")]
    pub fn node_of(&self, cpu: usize) -> usize {
        self.node[cpu] as usize
    }

    /// The socket holding `node`'s memory: the socket of the first CPU of its physical node
    /// (under emulation, node `node % physical nodes`).
    pub fn socket_of_node(&self, node: usize) -> usize {
        let node = crate::cpu::phys_of_node(node, self.nr_nodes, self.nr_phys);
        match self.node.iter().position(|n| *n as usize == node) {
            Some(cpu) => self.socket_of(cpu),
            // A memory-only node (more nodes than CPUs): the socket of the last CPU on a
            // node below it, whose memory fake NUMA split it from.
            None => self
                .node
                .iter()
                .rposition(|n| (*n as usize) < node)
                .map_or(0, |cpu| self.socket_of(cpu)),
        }
    }

    /// How far a line travels from `from` to `to`.
    pub fn distance(&self, from: usize, to: usize) -> Distance {
        if from == to {
            Distance::SameCpu
        } else if self.core[from] == self.core[to] {
            Distance::SmtSibling
        } else if self.socket[from] == self.socket[to] {
            Distance::SameSocket
        } else {
            Distance::OtherSocket
        }
    }
}
