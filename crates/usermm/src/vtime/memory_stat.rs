//! What the line model (`memory.rs`) counts of a run: its touches by where they found their
//! line, and what they were charged. A module of its own so that the line model, which fills
//! it, and the report (`report.rs`), which carries it, share it without importing each other
//! (the report reads the scheduler, which holds the line model).

#![deny(unsafe_code)]

use serde::Serialize;

/// What the lines cost a run, by where they were found (`Report::memory`; the line model,
/// `memory.rs`, counts them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MemoryStat {
    /// Touches priced by the table (`Touch::Access`).
    pub accesses: u64,
    /// Touches whose cost a measured constant holds (`Touch::Measured`).
    pub measured: u64,
    /// Touches of a line nobody had touched in the run.
    pub first: u64,
    /// Found in the toucher's own core's L2.
    pub own_cache: u64,
    /// Found modified in another core's L2 (a transfer).
    pub other_core: u64,
    /// Found in the toucher's socket's LLC.
    pub socket_llc: u64,
    /// Found in another socket's LLC.
    pub other_socket: u64,
    /// Fetched from local DRAM at latency.
    pub dram_local: u64,
    /// Fetched from another socket's DRAM at latency.
    pub dram_remote: u64,
    /// Fetched from DRAM at streaming cost (the next line of a stream).
    pub dram_stream: u64,
    /// Of `accesses`, the touches of a structure's line (`Touched::Line`, `memory.rs`).
    pub field_lines: u64,
    /// Total charged for priced touches, in ns.
    pub charged_ns: u64,
    /// What priced store misses cost beyond `charged_ns` but overlapped with later misses
    /// (`store_buffer.rs`), in ns.
    pub overlapped_ns: u64,
}

impl MemoryStat {
    /// What happened between `before` and `self` (two snapshots of one run).
    pub fn since(&self, before: &MemoryStat) -> MemoryStat {
        MemoryStat {
            accesses: self.accesses - before.accesses,
            measured: self.measured - before.measured,
            first: self.first - before.first,
            own_cache: self.own_cache - before.own_cache,
            other_core: self.other_core - before.other_core,
            socket_llc: self.socket_llc - before.socket_llc,
            other_socket: self.other_socket - before.other_socket,
            dram_local: self.dram_local - before.dram_local,
            dram_remote: self.dram_remote - before.dram_remote,
            dram_stream: self.dram_stream - before.dram_stream,
            field_lines: self.field_lines - before.field_lines,
            charged_ns: self.charged_ns - before.charged_ns,
            overlapped_ns: self.overlapped_ns - before.overlapped_ns,
        }
    }
}
