//! `/sys/kernel/debug/percpu_stats` (`mm/percpu-stats.c`): one serialisable record, rendered in
//! the kernel's layout by [`PcpuStats::render`].

use std::fmt::Write;

use serde::Serialize;

use super::chunk::ChunkKind;
use super::state::PcpuCounters;
use super::{DepopulatePolicy, PcpuAllocator, PCPU_MIN_ALLOC_SIZE};
use crate::addr::PAGE_SIZE;

/// One chunk's line of the dump.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PcpuChunkStats {
    /// Chunk-table index (what [`super::PcpuPtr::chunk_id`] reports).
    pub id: u32,
    pub kind: ChunkKind,
    /// The slot list it is on (`None`: the reserved chunk).
    pub slot: Option<usize>,
    pub isolated: bool,
    pub nr_pages: u32,
    pub nr_populated: u32,
    pub nr_empty_pop_pages: i32,
    pub nr_alloc: u32,
    pub max_alloc_size: u32,
    /// First free byte (`first_bit`, in bytes).
    pub first_free_bytes: u64,
    pub free_bytes: u32,
    /// The chunk hint, in bytes.
    pub contig_bytes: u64,
}

/// The whole dump.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PcpuStats {
    pub policy: DepopulatePolicy,
    pub nr_units: u32,
    pub unit_size: u64,
    pub unit_pages: u32,
    pub nr_slots: usize,
    pub empty_pop_pages_low: u32,
    pub empty_pop_pages_high: u32,
    pub counters: PcpuCounters,
    /// Global `pcpu_nr_empty_pop_pages`.
    pub nr_empty_pop_pages: i64,
    /// `pcpu_nr_populated` (page indexes per unit, boot area included).
    pub nr_populated_pages: u64,
    /// `Percpu:` of meminfo, kB.
    pub percpu_kb: u64,
    /// Chunk metadata the kernel would spend (structs, bitmaps, block hints; not in `Percpu:`).
    pub metadata_bytes: u64,
    /// Chunks per special slot.
    pub nr_sidelined: usize,
    pub nr_to_depopulate: usize,
    pub nr_free_chunks: usize,
    pub chunks: Vec<PcpuChunkStats>,
}

impl PcpuAllocator {
    /// A snapshot of the allocator, chunk by chunk.
    pub fn stats(&self) -> PcpuStats {
        let p = &*self.inner;
        let st = p.lock.lock();
        let layout = st.layout;
        let mut chunks = Vec::new();
        let mut metadata_bytes = 0;
        for idx in st.chunk_indexes() {
            let c = st.chunk(idx);
            metadata_bytes += c.metadata_bytes(false);
            chunks.push(PcpuChunkStats {
                id: idx,
                kind: c.kind,
                slot: st.lists.slot_of(idx),
                isolated: c.isolated,
                nr_pages: c.nr_pages,
                nr_populated: c.nr_populated,
                nr_empty_pop_pages: c.nr_empty_pop_pages,
                nr_alloc: c.nr_alloc,
                max_alloc_size: c.max_alloc_size,
                first_free_bytes: c.chunk_md.first_free as u64 * PCPU_MIN_ALLOC_SIZE,
                free_bytes: c.free_bytes,
                contig_bytes: c.chunk_md.contig_hint as u64 * PCPU_MIN_ALLOC_SIZE,
            });
        }
        PcpuStats {
            policy: p.policy,
            nr_units: p.nr_units,
            unit_size: p.unit_size,
            unit_pages: p.unit_pages,
            nr_slots: layout.nr_slots,
            empty_pop_pages_low: p.low,
            empty_pop_pages_high: p.high,
            counters: st.stats.clone(),
            nr_empty_pop_pages: st.nr_empty_pop_pages,
            nr_populated_pages: st.nr_populated,
            percpu_kb: st.nr_populated * p.nr_units as u64 * PAGE_SIZE / 1024,
            metadata_bytes,
            nr_sidelined: st.lists.len(layout.sidelined),
            nr_to_depopulate: st.lists.len(layout.to_depopulate),
            nr_free_chunks: st.lists.len(layout.free),
            chunks,
        }
    }
}

impl PcpuStats {
    /// The text of `percpu_stats`: allocation info, global stats, then one block per chunk.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let c = &self.counters;
        let _ = writeln!(s, "Percpu Memory Statistics");
        let _ = writeln!(s, "Allocation Info:");
        let _ = writeln!(s, "----------------------------------------");
        // PL(X)/PU(X) of percpu_stats_show: a line per field, named as the field.
        macro_rules! fields {
            ($src:expr; $($f:ident),+) => {
                $(line(&mut s, stringify!($f), $src.$f as i64);)+
            };
        }
        fields!(self; unit_size, nr_units, unit_pages, nr_slots);
        let _ = writeln!(s, "\nGlobal Stats:");
        let _ = writeln!(s, "----------------------------------------");
        fields!(c; nr_alloc, nr_dealloc, nr_cur_alloc, nr_max_alloc, nr_chunks, nr_max_chunks,
            min_alloc_size, max_alloc_size);
        line(&mut s, "empty_pop_pages", self.nr_empty_pop_pages);
        for ch in &self.chunks {
            let title = match ch.kind {
                ChunkKind::First => "Chunk: <- First Chunk".to_string(),
                ChunkKind::Reserved => "Chunk: <- Reserved Chunk".to_string(),
                ChunkKind::Dynamic => format!("Chunk: {}", ch.id),
            };
            let _ = writeln!(s, "\n{title}");
            for (k, v) in [
                ("nr_alloc", ch.nr_alloc as i64),
                ("max_alloc_size", ch.max_alloc_size as i64),
                ("empty_pop_pages", ch.nr_empty_pop_pages as i64),
                ("nr_populated", ch.nr_populated as i64),
                ("first_bit", ch.first_free_bytes as i64),
                ("free_bytes", ch.free_bytes as i64),
                ("contig_bytes", ch.contig_bytes as i64),
                ("slot", ch.slot.map_or(-1, |x| x as i64)),
                ("isolated", ch.isolated as i64),
            ] {
                line(&mut s, k, v);
            }
        }
        s
    }
}

/// One `  name: value` line of the dump (`P(X, Y)` of `percpu-stats.c`).
fn line(s: &mut String, name: &str, value: i64) {
    let _ = writeln!(s, "  {name:<18}: {value:>12}");
}
