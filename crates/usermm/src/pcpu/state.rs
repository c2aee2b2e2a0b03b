//! What `pcpu_lock` protects: the chunk table, the slot lists, the global counters, and the
//! operations that keep them consistent (`pcpu_chunk_relocate`, `pcpu_isolate_chunk`,
//! `pcpu_reintegrate_chunk`, `pcpu_update_empty_pages`, `pcpu_chunk_[de]populated`).
//!
//! A `&mut PcpuState` exists only inside the `pcpu_lock` guard, so every method here carries the
//! kernel's "CONTEXT: pcpu_lock" in its receiver: the guard is the proof of the lock.

use serde::Serialize;

use super::chunk::PcpuChunk;
use super::slots::{SlotLayout, SlotLists, PCPU_SLOT_FAIL_THRESHOLD};

/// `pcpu_stats` (`CONFIG_PERCPU_STATS`) plus the engine's own event counters.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct PcpuCounters {
    /// Allocations ever made / freed, live now, most live at once.
    pub nr_alloc: u64,
    pub nr_dealloc: u64,
    pub nr_cur_alloc: u64,
    pub nr_max_alloc: u64,
    /// Chunks now (boot chunks included) and most at once.
    pub nr_chunks: u64,
    pub nr_max_chunks: u64,
    /// Smallest and largest request (bytes, rounded to 4); 0 before the first.
    pub min_alloc_size: u64,
    pub max_alloc_size: u64,
    /// Engine counters: chunk life cycle, page indexes (de)populated, isolation transitions,
    /// balance passes, batched kernel-range TLB flushes, failed requests.
    pub chunks_created: u64,
    pub chunks_destroyed: u64,
    pub pages_populated: u64,
    pub pages_depopulated: u64,
    pub isolations: u64,
    pub reintegrations: u64,
    pub balance_runs: u64,
    pub tlb_flushes: u64,
    pub atomic_alloc_failures: u64,
    pub alloc_failures: u64,
}

/// The state under `pcpu_lock`.
#[derive(Debug)]
pub(crate) struct PcpuState {
    /// The chunk table; a [`super::PcpuPtr`] names a slot by index and generation.
    pub chunks: Vec<Option<PcpuChunk>>,
    free_idx: Vec<u32>,
    next_gen: u32,
    pub lists: SlotLists,
    pub layout: SlotLayout,
    /// `pcpu_first_chunk` / `pcpu_reserved_chunk`.
    pub first: u32,
    pub reserved: u32,
    /// `pcpu_nr_empty_pop_pages`: Σ over non-reserved, non-isolated chunks (P2).
    pub nr_empty_pop_pages: i64,
    /// `pcpu_nr_populated`: populated page indexes, per unit, boot area included (P7).
    pub nr_populated: u64,
    /// `pcpu_atomic_alloc_failed`: makes the next balance pass populate the maximum.
    pub atomic_alloc_failed: bool,
    /// `PCPU_EMPTY_POP_PAGES_HIGH`.
    pub high: u32,
    pub stats: PcpuCounters,
    /// Set if an allocation ever came from a chunk on the to_depopulate list (P4; stays 0).
    pub allocs_from_to_depopulate: u64,
}

impl PcpuState {
    pub(crate) fn new(layout: SlotLayout, high: u32) -> Self {
        Self {
            chunks: Vec::new(),
            free_idx: Vec::new(),
            next_gen: 1,
            lists: SlotLists::new(layout.nr_slots),
            layout,
            first: u32::MAX,
            reserved: u32::MAX,
            nr_empty_pop_pages: 0,
            nr_populated: 0,
            atomic_alloc_failed: false,
            high,
            stats: PcpuCounters::default(),
            allocs_from_to_depopulate: 0,
        }
    }

    #[inline]
    pub(crate) fn chunk(&self, idx: u32) -> &PcpuChunk {
        self.chunks[idx as usize]
            .as_ref()
            .expect("live chunk index")
    }

    #[inline]
    pub(crate) fn chunk_mut(&mut self, idx: u32) -> &mut PcpuChunk {
        self.chunks[idx as usize]
            .as_mut()
            .expect("live chunk index")
    }

    /// The live chunks' indexes.
    pub(crate) fn chunk_indexes(&self) -> impl Iterator<Item = u32> + '_ {
        self.chunks
            .iter()
            .enumerate()
            .filter(|(_, c)| c.is_some())
            .map(|(i, _)| i as u32)
    }

    /// Put a new chunk in the table (not on a list yet); returns its index.
    pub(crate) fn insert(&mut self, mut chunk: PcpuChunk) -> u32 {
        chunk.gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1).max(1);
        let idx = match self.free_idx.pop() {
            Some(i) => {
                self.chunks[i as usize] = Some(chunk);
                i
            }
            None => {
                self.chunks.push(Some(chunk));
                (self.chunks.len() - 1) as u32
            }
        };
        self.stats.nr_chunks += 1;
        self.stats.nr_max_chunks = self.stats.nr_max_chunks.max(self.stats.nr_chunks);
        idx
    }

    /// Take a chunk out of the table for good (`pcpu_destroy_chunk`, metadata part).
    pub(crate) fn remove(&mut self, idx: u32) -> PcpuChunk {
        self.lists.remove(idx);
        let c = self.chunks[idx as usize].take().expect("live chunk index");
        self.free_idx.push(idx);
        self.stats.nr_chunks -= 1;
        self.stats.chunks_destroyed += 1;
        c
    }

    /// `pcpu_chunk_slot`.
    pub(crate) fn chunk_slot(&self, idx: u32) -> usize {
        let c = self.chunk(idx);
        self.layout.chunk_slot(c.free_bytes, c.chunk_md.contig_hint)
    }

    /// `pcpu_chunk_relocate`: after an alloc or free, move a chunk whose slot changed — to the
    /// head when it got emptier (`oslot < nslot`), to the tail when it got fuller. `oslot = None`
    /// (new or reintegrated chunks) counts as emptier. Isolated chunks stay where they are; the
    /// reserved chunk is on no list.
    #[doc(alias = "pcpu_chunk_relocate")]
    pub(crate) fn relocate(&mut self, idx: u32, oslot: Option<usize>) {
        let nslot = self.chunk_slot(idx);
        if self.chunk(idx).isolated || idx == self.reserved {
            return;
        }
        if oslot != Some(nslot) {
            let front = match oslot {
                None => true,
                Some(o) => o < nslot,
            };
            self.lists.move_to(idx, nslot, front);
        }
    }

    /// `pcpu_chunk_move`: to the head of `slot` (failed-fit demotion to slot 0).
    #[doc(alias = "pcpu_chunk_move")]
    pub(crate) fn chunk_move(&mut self, idx: u32, slot: usize) {
        if idx != self.reserved {
            self.lists.move_to(idx, slot, true);
        }
    }

    /// `pcpu_update_empty_pages`: the chunk's count always; the global one unless the chunk is
    /// reserved or isolated.
    #[doc(alias = "pcpu_update_empty_pages")]
    pub(crate) fn update_empty_pages(&mut self, idx: u32, nr: i32) {
        let reserved = idx == self.reserved;
        let c = self.chunk_mut(idx);
        c.nr_empty_pop_pages += nr;
        if !reserved && !c.isolated {
            self.nr_empty_pop_pages += nr as i64;
        }
    }

    /// [`PcpuChunk::find_block_fit`] and [`PcpuChunk::alloc_area`], with the empty-page
    /// accounting and the relocation of `pcpu_alloc_area`. Returns the byte offset.
    pub(crate) fn alloc_area(
        &mut self,
        idx: u32,
        bits: u32,
        align: u32,
        atomic: bool,
    ) -> Option<u32> {
        let start = self.chunk(idx).find_block_fit(bits, align, atomic)?;
        self.alloc_area_at(idx, bits, align, start)
    }

    /// `pcpu_alloc_area` from a known start.
    pub(crate) fn alloc_area_at(
        &mut self,
        idx: u32,
        bits: u32,
        align: u32,
        start: u32,
    ) -> Option<u32> {
        let oslot = self.chunk_slot(idx);
        let (off, delta) = self.chunk_mut(idx).alloc_area(bits, align, start)?;
        if delta != 0 {
            self.update_empty_pages(idx, delta);
        }
        self.relocate(idx, Some(oslot));
        if self.lists.slot_of(idx) == Some(self.layout.to_depopulate) {
            self.allocs_from_to_depopulate += 1;
        }
        Some(off)
    }

    /// The search of `pcpu_alloc_noprof` over the slot lists: active slots from the request's
    /// slot up, then sidelined, then free; never to_depopulate (P4). A chunk in a low slot that
    /// cannot fit is demoted to slot 0. A sidelined chunk that serves the request is
    /// reintegrated. Returns `(chunk, byte offset)`.
    pub(crate) fn search_slots(
        &mut self,
        size: u64,
        bits: u32,
        align: u32,
        atomic: bool,
    ) -> Option<(u32, u32)> {
        let first_slot = self.layout.size_to_slot(size);
        for slot in first_slot..=self.layout.free {
            let mut cur = self.lists.first(slot);
            while cur != super::slots::NIL {
                let next = self.lists.next(cur);
                match self.chunk(cur).find_block_fit(bits, align, atomic) {
                    None => {
                        if slot < PCPU_SLOT_FAIL_THRESHOLD {
                            self.chunk_move(cur, 0);
                        }
                    }
                    Some(start) => {
                        if let Some(off) = self.alloc_area_at(cur, bits, align, start) {
                            self.reintegrate(cur);
                            return Some((cur, off));
                        }
                    }
                }
                cur = next;
            }
        }
        None
    }

    /// `pcpu_free_area` with accounting and relocation. Returns the bytes freed.
    pub(crate) fn free_area(&mut self, idx: u32, off: u32) -> u32 {
        let oslot = self.chunk_slot(idx);
        let (freed, delta) = self.chunk_mut(idx).free_area(off);
        if delta != 0 {
            self.update_empty_pages(idx, delta);
        }
        self.relocate(idx, Some(oslot));
        let s = &mut self.stats;
        s.nr_dealloc += 1;
        s.nr_cur_alloc -= 1;
        self.chunk_mut(idx).nr_alloc -= 1;
        freed
    }

    /// `pcpu_stats_area_alloc`.
    pub(crate) fn stats_area_alloc(&mut self, idx: u32, size: u64) {
        let s = &mut self.stats;
        s.nr_alloc += 1;
        s.nr_cur_alloc += 1;
        s.nr_max_alloc = s.nr_max_alloc.max(s.nr_cur_alloc);
        s.min_alloc_size = if s.min_alloc_size == 0 {
            size
        } else {
            s.min_alloc_size.min(size)
        };
        s.max_alloc_size = s.max_alloc_size.max(size);
        let c = self.chunk_mut(idx);
        c.nr_alloc += 1;
        c.max_alloc_size = c.max_alloc_size.max(size as u32);
    }

    /// `pcpu_chunk_populated`.
    #[doc(alias = "pcpu_chunk_populated")]
    pub(crate) fn chunk_populated(&mut self, idx: u32, rs: u32, re: u32) {
        let delta = self.chunk_mut(idx).mark_populated(rs, re);
        // mark_populated already counted the chunk's pages; apply the global part.
        if idx != self.reserved && !self.chunk(idx).isolated {
            self.nr_empty_pop_pages += delta as i64;
        }
        self.nr_populated += (re - rs) as u64;
        self.stats.pages_populated += (re - rs) as u64;
    }

    /// `pcpu_chunk_depopulated`.
    #[doc(alias = "pcpu_chunk_depopulated")]
    pub(crate) fn chunk_depopulated(&mut self, idx: u32, rs: u32, re: u32) {
        let delta = self.chunk_mut(idx).mark_depopulated(rs, re);
        if idx != self.reserved && !self.chunk(idx).isolated {
            self.nr_empty_pop_pages += delta as i64;
        }
        self.nr_populated -= (re - rs) as u64;
        self.stats.pages_depopulated += (re - rs) as u64;
    }

    /// `pcpu_isolate_chunk`: take the chunk's empty pages out of the global count and park it at
    /// the head of to_depopulate.
    #[doc(alias = "pcpu_isolate_chunk")]
    pub(crate) fn isolate(&mut self, idx: u32) {
        let c = self.chunk_mut(idx);
        if !c.isolated {
            c.isolated = true;
            let n = c.nr_empty_pop_pages as i64;
            self.nr_empty_pop_pages -= n;
            self.stats.isolations += 1;
        }
        let slot = self.layout.to_depopulate;
        self.lists.move_to(idx, slot, true);
    }

    /// `pcpu_reintegrate_chunk`: undo the isolation and put the chunk back on its slot.
    #[doc(alias = "pcpu_reintegrate_chunk")]
    pub(crate) fn reintegrate(&mut self, idx: u32) {
        let c = self.chunk_mut(idx);
        if c.isolated {
            c.isolated = false;
            let n = c.nr_empty_pop_pages as i64;
            self.nr_empty_pop_pages += n;
            self.stats.reintegrations += 1;
            self.relocate(idx, None);
        }
    }

    /// `pcpu_should_reclaim_chunk`: never the boot chunks; yes for an isolated chunk with empty
    /// populated pages; yes when a quarter of the chunk's pages are empty and the system keeps
    /// more than HIGH empty pages without them.
    #[doc(alias = "pcpu_should_reclaim_chunk")]
    pub(crate) fn should_reclaim(&self, idx: u32) -> bool {
        if idx == self.first || idx == self.reserved {
            return false;
        }
        let c = self.chunk(idx);
        let empty = c.nr_empty_pop_pages as i64;
        (c.isolated && empty > 0)
            || (self.nr_empty_pop_pages > self.high as i64 + empty
                && empty >= (c.nr_pages / 4) as i64)
    }

    /// Is any chunk other than `idx` on the free slot? (free_percpu's "wake the grim reaper".)
    pub(crate) fn other_free_chunk(&self, idx: u32) -> bool {
        self.lists.iter(self.layout.free).any(|c| c != idx)
    }
}
