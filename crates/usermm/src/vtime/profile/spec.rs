//! The profile file's shape: what a `.toml` profile may say, field by field.
//!
//! Serde types only; the rules a profile must obey (every cost present, sources non-empty,
//! formulas that give the figures) are checked by [`Profile::from_spec`](super::Profile::from_spec)
//! and `provenance.rs`.

#![deny(unsafe_code)]

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A figure of the profile: exactly one of `ns`, `cycles` (converted at the profile's GHz) or
/// `bytes_per_ns` (only for costs that move bytes), and where it comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figure {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_ns: Option<f64>,
    /// The arithmetic that gives the value (in the unit the figure is written in) from the
    /// profile's `[inputs]`; the loader refuses a figure that disagrees with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formula: Option<String>,
    pub source: String,
}

/// `[topology]`: the machine, as the seed describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    pub sockets: u32,
    /// Memory nodes of the real machine (a run may use more: fake NUMA, see [`Placement`](super::Placement)).
    pub nodes: u32,
    pub cores_per_socket: u32,
    pub threads_per_core: u32,
    pub ghz: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gib: Option<u64>,
    pub source: String,
}

impl Topology {
    /// Hardware threads of the whole machine.
    pub fn hw_threads(&self) -> usize {
        self.sockets as usize * self.cores_per_socket as usize * self.threads_per_core as usize
    }

    /// Cores of the whole machine.
    pub fn cores(&self) -> usize {
        self.sockets as usize * self.cores_per_socket as usize
    }
}

/// `[transfer]`: moving one cache line that another CPU holds modified, by distance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transfers {
    pub smt_sibling: Figure,
    pub same_socket: Figure,
    pub other_socket: Figure,
}

/// `[smt]`: how much slower each of two busy hardware threads of one core runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Smt {
    /// Time multiplier (≥ 1) on work charged while the core's other thread is busy.
    pub sibling_factor: f64,
    /// The arithmetic that gives `sibling_factor` from the profile's `[inputs]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formula: Option<String>,
    pub source: String,
}

/// `[locks."NAME"]`: one lock class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockFigure {
    /// Uncontended acquire (the atomic on the lock word, the line already local).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquire_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquire_cycles: Option<f64>,
    /// Cache lines of protected data the previous holder dirtied that an exclusive hand-over
    /// carries (free-list heads, counters, list heads).
    pub data_lines: u32,
    /// Where `data_lines` comes from, apart from the acquire's `source` (a count of lines is
    /// an assumption until the memory hierarchy tracks real lines).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub data_lines_source: String,
    /// The arithmetic that gives the acquire (`acquire_ns` or `acquire_cycles`, whichever is
    /// written) from the profile's `[inputs]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formula: Option<String>,
    pub source: String,
}

/// A number that is not a time: a count of lines, a relative spread. Its `formula` over the
/// profile's `[inputs]` gives `value`, as a [`Figure`]'s does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quantity {
    pub value: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formula: Option<String>,
    pub source: String,
}

/// `[memory]`: where a line can be, and what fetching it from there costs, beyond what the
/// measured per-page costs already include (`vtime/memory.rs` states the rule).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySpec {
    /// Lines of the last-level cache of one socket (inclusive, shared by its cores).
    pub llc_lines: Quantity,
    /// Lines of one core's private L2.
    pub l2_lines: Quantity,
    /// A load that misses every cache and is served by this socket's memory.
    pub dram_local: Figure,
    /// The same, served by another socket's memory.
    pub dram_remote: Figure,
    /// A miss the hardware prefetcher saw coming: the next line of a sequential stream within
    /// one 4 KiB page, paid at streaming bandwidth instead of latency.
    pub dram_stream: Figure,
}

/// A profile file, as written (serialised into reports beside the config).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSpec {
    pub name: String,
    pub description: String,
    pub topology: Topology,
    pub transfer: Transfers,
    pub smt: Smt,
    /// Latency from a wake-up to the woken sleeper running on its (idle) CPU.
    pub wakeup: Figure,
    /// An atomic read-modify-write on a line this CPU already holds.
    pub atomic_rmw: Figure,
    pub locks: BTreeMap<String, LockFigure>,
    pub costs: BTreeMap<String, Figure>,
    /// The caches and DRAM that price the lines the engine touches (`vtime/memory.rs`);
    /// without it every line access is free (the measured per-page costs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemorySpec>,
    /// Seeded variability of the work between two synchronisation points (`vtime/jitter.rs`):
    /// its relative standard deviation, in percent; without it every cost is exactly its
    /// figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<Quantity>,
    /// The era whose factors multiply this profile's costs (`era.rs`): a built-in era's name.
    /// Without it the profile's figures are priced as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub era: Option<String>,
    /// The numbers the figures are computed from, by name: each measured (with the command
    /// that took it), published (with where), or an assumption (with why).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inputs: BTreeMap<String, Input>,
}

/// `[inputs.NAME]`: one number a figure's formula reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Input {
    pub value: f64,
    /// What the number counts: `ns`, `ns/page`, `cycles`, `GHz`, `bytes/ns`, `share`, ...
    pub unit: String,
    pub kind: InputKind,
    /// The measurement and its command, the publication and where, or why it is assumed; for
    /// an inferred input, the run that estimated it.
    pub source: String,
    /// An inferred input's training rows: the published figures it was estimated from (only
    /// `kind = "inferred"` has them, and it must).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rows: Vec<String>,
}

/// Where an input comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// Measured, on this host or another machine; the source gives the command.
    Measured,
    /// Published; the source gives the publication, and the built-in profiles' test pins the
    /// value to it.
    Published,
    /// Neither measured nor published; the source says why this value.
    Assumption,
    /// Estimated by `usermm infer` from named published rows (`rows`): an era factor, the one
    /// kind of number the model fits. Only era files hold it (`era.rs`).
    Inferred,
}

impl InputKind {
    pub fn as_str(self) -> &'static str {
        match self {
            InputKind::Measured => "measured",
            InputKind::Published => "published",
            InputKind::Assumption => "assumption",
            InputKind::Inferred => "inferred",
        }
    }
}
