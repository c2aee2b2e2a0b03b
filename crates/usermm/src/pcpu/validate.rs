//! Executable invariants P1–P9 (see the module essay of [`super`]), like `CONFIG_DEBUG_VM`'s
//! walkers: everything is recomputed from the bitmaps and compared with the counters and hints.

use super::block::{PcpuBlockMd, PCPU_BITMAP_BLOCK_BITS};
use super::chunk::{ChunkKind, PcpuChunk};
use super::slots::PCPU_SLOT_FAIL_THRESHOLD;
use super::state::PcpuState;
use super::vm::PcpuVm;
use super::{Pcpu, PcpuAllocator, PCPU_MIN_ALLOC_SIZE};
use crate::page_alloc::meta::PG_PERCPU;

const BLOCK: u32 = PCPU_BITMAP_BLOCK_BITS;

macro_rules! check {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

/// Free-run facts of `[start, start + len)` of a chunk's allocation map.
struct Runs {
    first_free: u32,
    largest: u32,
    left: u32,
    right: u32,
}

fn runs(c: &PcpuChunk, start: u32, len: u32) -> Runs {
    let (s, e) = (start as usize, (start + len) as usize);
    let map = &c.alloc_map;
    let first_free = (map.find_next_zero_bit(e, s) - s) as u32;
    let left = (map.find_next_bit(e, s) - s) as u32;
    let last = map.find_last_bit(e);
    let right = if last >= e || last < s {
        len
    } else {
        (e - 1 - last) as u32
    };
    let mut largest = 0;
    for (rs, re) in map.clear_ranges(s, e) {
        largest = largest.max((re - rs) as u32);
    }
    Runs {
        first_free,
        largest,
        left,
        right,
    }
}

fn is_free(c: &PcpuChunk, start: u32, len: u32) -> bool {
    len == 0
        || c.alloc_map
            .find_next_bit((start + len) as usize, start as usize)
            == (start + len) as usize
}

/// P9 for one set of hints over `[base, base + md.nr_bits)`: they never overstate.
///
/// They may understate, in the blocks too, exactly as the kernel's do: `pcpu_block_refresh_hint`
/// drops `right_free` when the promoted scan hint was the run touching the block end, and
/// `pcpu_block_update` can leave a scan hint starting where a new, larger contig hint starts,
/// whose later promotion shortens the run. (Both found by the property tests; the update rules
/// here follow the kernel's, so the checks follow its guarantee.) A block's contig hint is
/// nonetheless exact about the whole page being free (checked by the caller, P1 needs it).
fn check_md(c: &PcpuChunk, md: &PcpuBlockMd, base: u32, what: &str) -> Result<(), String> {
    let r = runs(c, base, md.nr_bits);
    check!(
        md.contig_hint <= r.largest,
        "P9 {what}: contig_hint {} > largest free run {}",
        md.contig_hint,
        r.largest
    );
    check!(
        md.left_free <= r.left,
        "P9 {what}: left_free {} > {}",
        md.left_free,
        r.left
    );
    check!(
        md.right_free <= r.right,
        "P9 {what}: right_free {} > {}",
        md.right_free,
        r.right
    );
    check!(
        md.contig_hint == 0 || is_free(c, base + md.contig_hint_start, md.contig_hint),
        "P9 {what}: contig hint [{}, +{}) is not free",
        md.contig_hint_start,
        md.contig_hint
    );
    check!(
        md.scan_hint == 0 || is_free(c, base + md.scan_hint_start, md.scan_hint),
        "P9 {what}: scan hint [{}, +{}) is not free",
        md.scan_hint_start,
        md.scan_hint
    );
    check!(
        md.scan_hint <= md.contig_hint,
        "P9 {what}: scan_hint {} > contig_hint {}",
        md.scan_hint,
        md.contig_hint
    );
    check!(
        md.scan_hint == 0
            || md.scan_hint_start <= md.contig_hint_start
            || md.scan_hint == md.contig_hint,
        "P9 {what}: scan hint at {} after the contig hint at {} but smaller",
        md.scan_hint_start,
        md.contig_hint_start
    );
    check!(
        md.first_free <= r.first_free,
        "P9 {what}: first_free {} > actual {}",
        md.first_free,
        r.first_free
    );
    Ok(())
}

/// P1, P8, P9 and the per-chunk half of P7 for one chunk.
fn check_chunk(c: &PcpuChunk, idx: u32) -> Result<(), String> {
    let map_bits = c.map_bits();
    // P8: allocations are start/end pairs in bound_map covering exactly the set alloc bits.
    let mut nr_allocs = 0u32;
    let mut b = c.alloc_map.find_next_bit(map_bits as usize, 0);
    while b < map_bits as usize {
        check!(
            c.bound_map.test(b),
            "P8 chunk {idx}: allocated bit {b} starts no allocation"
        );
        let e = c.bound_map.find_next_bit(map_bits as usize + 1, b + 1);
        check!(
            e <= map_bits as usize,
            "P8 chunk {idx}: allocation at {b} has no end"
        );
        check!(
            c.alloc_map.find_next_zero_bit(e, b) == e,
            "P8 chunk {idx}: allocation [{b}, {e}) has clear bits"
        );
        nr_allocs += 1;
        b = c.alloc_map.find_next_bit(map_bits as usize, e);
    }
    let hidden = (c.start_offset > 0) as u32 + (c.end_offset > 0) as u32;
    check!(
        nr_allocs == c.nr_alloc + hidden,
        "P8 chunk {idx}: {nr_allocs} allocations in the map, {} counted (+{hidden} hidden)",
        c.nr_alloc
    );
    let clear = map_bits as usize - c.alloc_map.count_range(0, map_bits as usize);
    check!(
        c.free_bytes as u64 == clear as u64 * PCPU_MIN_ALLOC_SIZE,
        "P8 chunk {idx}: free_bytes {} but {clear} clear bits",
        c.free_bytes
    );

    // P1 and the populated count.
    let mut empty = 0;
    for i in 0..c.nr_pages {
        let free = is_free(c, i * BLOCK, BLOCK);
        check!(
            free == c.md_blocks[i as usize].is_empty(),
            "P9 chunk {idx} block {i}: contig hint says empty={} but the map says {free}",
            c.md_blocks[i as usize].is_empty()
        );
        if free && c.populated.test(i as usize) {
            empty += 1;
        }
        if !c.populated.test(i as usize) {
            check!(free, "chunk {idx}: unpopulated page {i} holds allocations");
        }
    }
    check!(
        c.nr_empty_pop_pages == empty,
        "P1 chunk {idx}: nr_empty_pop_pages {} but {empty} pages are populated and free",
        c.nr_empty_pop_pages
    );
    check!(
        c.nr_populated as usize == c.populated.count_range(0, c.nr_pages as usize),
        "P7 chunk {idx}: nr_populated {} disagrees with the bitmap",
        c.nr_populated
    );

    // P9.
    for (i, md) in c.md_blocks.iter().enumerate() {
        check_md(c, md, i as u32 * BLOCK, &format!("chunk {idx} block {i}"))?;
    }
    // The chunk's own left_free/right_free are never read by the kernel and go stale; only its
    // contig, scan and first_free hints are checked.
    let mut md = c.chunk_md;
    md.left_free = 0;
    md.right_free = 0;
    check_md(c, &md, 0, &format!("chunk {idx} chunk_md"))?;
    Ok(())
}

impl Pcpu {
    /// Every invariant that holds whenever both locks are held.
    pub(crate) fn validate_locked(&self, vm: &PcpuVm, st: &PcpuState) -> Result<(), String> {
        let layout = st.layout;
        let mut global_empty = 0i64;
        let mut populated = self.unit_pages as u64;
        let mut cur_alloc = 0u64;
        let mut nr_chunks = 0u64;
        for idx in st.chunk_indexes() {
            let c = st.chunk(idx);
            nr_chunks += 1;
            cur_alloc += c.nr_alloc as u64;
            check_chunk(c, idx)?;
            let slot = st.lists.slot_of(idx);
            match c.kind {
                ChunkKind::First | ChunkKind::Reserved => {
                    // P5.
                    check!(
                        c.immutable && !c.isolated,
                        "P5 boot chunk {idx} isolated or mutable"
                    );
                    check!(
                        c.nr_populated == c.nr_pages,
                        "P5 boot chunk {idx} depopulated"
                    );
                    if c.kind == ChunkKind::Reserved {
                        check!(slot.is_none(), "reserved chunk on slot {slot:?}");
                    }
                }
                ChunkKind::Dynamic => {
                    populated += c.nr_populated as u64;
                    let held = self.frames_held(vm, idx);
                    check!(
                        held == c.nr_populated as u64 * self.nr_units as u64,
                        "P7 chunk {idx}: {held} frames for {} populated pages",
                        c.nr_populated
                    );
                }
            }
            if c.kind != ChunkKind::Reserved {
                // P3.
                let Some(slot) = slot else {
                    return Err(format!("P3 chunk {idx} is on no slot list"));
                };
                let want = st.chunk_slot(idx);
                if c.isolated {
                    check!(
                        slot == layout.to_depopulate || slot == layout.sidelined,
                        "P3 isolated chunk {idx} on slot {slot}"
                    );
                } else {
                    check!(
                        slot == want || (slot == 0 && want < PCPU_SLOT_FAIL_THRESHOLD),
                        "P3 chunk {idx} on slot {slot}, its hints say {want}"
                    );
                    global_empty += c.nr_empty_pop_pages as i64;
                }
            }
        }
        // P2.
        check!(
            st.nr_empty_pop_pages == global_empty,
            "P2 global nr_empty_pop_pages {} but the chunks say {global_empty}",
            st.nr_empty_pop_pages
        );
        // P4.
        check!(
            st.allocs_from_to_depopulate == 0,
            "P4 an allocation came from to_depopulate"
        );
        // P7.
        check!(
            st.nr_populated == populated,
            "P7 pcpu_nr_populated {} but chunks say {populated}",
            st.nr_populated
        );
        check!(
            vm.nr_frames == populated * self.nr_units as u64,
            "P7 {} frames held for {populated} populated pages × {} units",
            vm.nr_frames,
            self.nr_units
        );
        for pfn in vm.frames() {
            let m = self.phys.meta(pfn);
            check!(
                m.test(PG_PERCPU) && m.ref_count() == 1,
                "P7 frame {:#x} not a live PG_percpu page",
                pfn.0
            );
        }
        check!(
            st.stats.nr_cur_alloc == cur_alloc,
            "nr_cur_alloc {} but chunks hold {cur_alloc}",
            st.stats.nr_cur_alloc
        );
        check!(
            st.stats.nr_chunks == nr_chunks,
            "nr_chunks {} but {nr_chunks} in the table",
            st.stats.nr_chunks
        );
        Ok(())
    }
}

impl PcpuAllocator {
    /// Check P1–P5 and P7–P9 now (P6 needs a settled allocator: see [`Self::validate_settled`]).
    pub fn validate(&self) -> Result<(), String> {
        let p = &*self.inner;
        // Lock order: pcpu_alloc_mutex -> pcpu_lock. With both held no allocation is between its
        // area and its population, and no balance pass is running.
        let vm = p.alloc_mutex.lock();
        let st = p.lock.lock();
        p.validate_locked(&vm, &st)?;
        check!(self.balance_panics() == 0, "a balance work item panicked");
        Ok(())
    }

    /// Wait for the balance work, then check everything, P6 included: of the chunks on the free
    /// slot, at most one has no populated empty page (the kept one; the rest were populated by
    /// the pass itself).
    pub fn validate_settled(&self) -> Result<(), String> {
        self.flush();
        self.validate()?;
        let st = self.inner.lock.lock();
        let free = st.layout.free;
        let unpopulated = st
            .lists
            .iter(free)
            .filter(|&c| st.chunk(c).nr_empty_pop_pages == 0)
            .count();
        check!(
            unpopulated <= 1,
            "P6 {unpopulated} fully free chunks without populated pages survive"
        );
        Ok(())
    }
}
