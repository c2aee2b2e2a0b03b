//! `struct pcpu_chunk` and the bitmap allocator inside one chunk: area search, allocation and
//! free, and the block/chunk hint maintenance of `mm/percpu.c`.
//!
//! Everything here touches one chunk only and needs `pcpu_lock`; the caller proves it by
//! holding the `&mut` that only the locked state hands out (see the `state` module). Functions that
//! change how many pages are entirely free return the change (`empty_delta`) instead of touching
//! the global counter, so the state can apply `pcpu_update_empty_pages` with its isolation rule.
//!
//! Offsets are in bits of the allocation map (4 bytes each) unless a name says `bytes`; a block
//! is one page of a unit, [`PCPU_BITMAP_BLOCK_BITS`] bits.

use std::sync::Arc;

use super::bitmap::Bitmap;
use super::block::{PcpuBlockMd, PCPU_BITMAP_BLOCK_BITS};
use super::region::PcpuRegion;
use super::PCPU_MIN_ALLOC_SIZE;
use crate::addr::PAGE_SIZE;

const BLOCK: u32 = PCPU_BITMAP_BLOCK_BITS;

/// Which of the three kinds of chunk this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChunkKind {
    /// `pcpu_first_chunk`: the dynamic part of the boot region; immutable, always populated.
    First,
    /// `pcpu_reserved_chunk`: the reserved part of the boot region (module statics); never on a
    /// slot list.
    Reserved,
    /// A chunk made by `pcpu_create_chunk`: its own host region, populated on demand.
    Dynamic,
}

/// `struct pcpu_chunk`.
///
/// # Invariants
/// Protected by `pcpu_lock` (all fields). `populated` and `nr_populated` change only with
/// `pcpu_alloc_mutex` held too, which is why an allocation may read them after dropping the
/// spinlock. See the module essay of [`super`] for P1–P9.
#[derive(Debug)]
pub(crate) struct PcpuChunk {
    pub kind: ChunkKind,
    /// Bumped each time a table slot is reused, so stale [`super::PcpuPtr`]s are refused.
    pub gen: u32,
    /// Pages per unit covered by the maps (`pcpu_unit_pages` for dynamic chunks).
    pub nr_pages: u32,
    /// 1 bit per 4-byte fragment: set = allocated (hidden head/tail of the first chunk included).
    pub alloc_map: Bitmap,
    /// `map_bits + 1` bits: set at each allocation's start and one past its end.
    pub bound_map: Bitmap,
    /// One block per page.
    pub md_blocks: Box<[PcpuBlockMd]>,
    /// Hints over the whole map.
    pub chunk_md: PcpuBlockMd,
    /// Free bytes per unit.
    pub free_bytes: u32,
    /// 1 bit per page index: backed by a frame in every unit.
    pub populated: Bitmap,
    pub nr_populated: u32,
    /// Pages both populated and entirely free. Transiently below that count between an
    /// allocation into unpopulated pages and their population (P1).
    pub nr_empty_pop_pages: i32,
    /// No populate/depopulate, never destroyed: the boot chunks.
    pub immutable: bool,
    /// On the to_depopulate or sidelined list; not counted in the global empty-page count.
    pub isolated: bool,
    /// Hidden bytes at the head (first and reserved chunks: the page-aligned base lies before the
    /// region they serve).
    pub start_offset: u32,
    /// Hidden bytes at the tail, up to the page boundary.
    pub end_offset: u32,
    /// Byte offset of the chunk's base inside each unit of its region.
    pub base_off: u64,
    /// Host memory of every unit (shared by the first and reserved chunks).
    pub region: Arc<PcpuRegion>,
    /// `CONFIG_PERCPU_STATS`: live allocations and the largest one ever made here.
    pub nr_alloc: u32,
    pub max_alloc_size: u32,
}

impl PcpuChunk {
    /// `pcpu_alloc_chunk`: an empty, unpopulated dynamic chunk of `nr_pages` pages per unit.
    pub(crate) fn new_dynamic(nr_pages: u32, region: Arc<PcpuRegion>, gen: u32) -> Self {
        let map_bits = (nr_pages * BLOCK) as usize;
        Self {
            kind: ChunkKind::Dynamic,
            gen,
            nr_pages,
            alloc_map: Bitmap::new(map_bits),
            bound_map: Bitmap::new(map_bits + 1),
            md_blocks: vec![PcpuBlockMd::new(BLOCK); nr_pages as usize].into_boxed_slice(),
            chunk_md: PcpuBlockMd::new(map_bits as u32),
            free_bytes: (nr_pages as u64 * PAGE_SIZE) as u32,
            populated: Bitmap::new(nr_pages as usize),
            nr_populated: 0,
            nr_empty_pop_pages: 0,
            immutable: false,
            isolated: false,
            start_offset: 0,
            end_offset: 0,
            base_off: 0,
            region,
            nr_alloc: 0,
            max_alloc_size: 0,
        }
    }

    /// `pcpu_alloc_first_chunk`: a chunk serving `map_size` bytes at byte `served_at` of the boot
    /// region. Its base is rounded down to a page and its end up to one; the rounding is hidden
    /// behind allocated bits so the bitmap allocator only ever sees whole blocks.
    pub(crate) fn new_boot(
        kind: ChunkKind,
        served_at: u64,
        map_size: u32,
        region: Arc<PcpuRegion>,
        gen: u32,
    ) -> Self {
        let base_off = served_at & !(PAGE_SIZE - 1);
        let start_offset = (served_at - base_off) as u32;
        let region_size = (start_offset as u64 + map_size as u64).next_multiple_of(PAGE_SIZE);
        let nr_pages = (region_size / PAGE_SIZE) as u32;
        let mut c = Self::new_dynamic(nr_pages, region, gen);
        c.kind = kind;
        c.base_off = base_off;
        c.start_offset = start_offset;
        c.end_offset = region_size as u32 - start_offset - map_size;
        c.immutable = true;
        c.populated.fill();
        c.nr_populated = nr_pages;
        c.nr_empty_pop_pages = nr_pages as i32;
        c.free_bytes = map_size;
        let region_bits = c.map_bits();
        if c.start_offset > 0 {
            let hide = c.start_offset / PCPU_MIN_ALLOC_SIZE as u32;
            c.alloc_map.set_range(0, hide as usize);
            c.bound_map.set(0);
            c.bound_map.set(hide as usize);
            c.chunk_md.first_free = hide;
            let d = c.block_update_hint_alloc(0, hide);
            c.nr_empty_pop_pages += d;
        }
        if c.end_offset > 0 {
            let hide = c.end_offset / PCPU_MIN_ALLOC_SIZE as u32;
            c.alloc_map
                .set_range((region_bits - hide) as usize, hide as usize);
            c.bound_map
                .set(((start_offset + map_size) / PCPU_MIN_ALLOC_SIZE as u32) as usize);
            c.bound_map.set(region_bits as usize);
            let d = c.block_update_hint_alloc(region_bits - hide, hide);
            c.nr_empty_pop_pages += d;
        }
        c
    }

    /// `pcpu_chunk_map_bits`.
    #[inline]
    pub(crate) fn map_bits(&self) -> u32 {
        self.nr_pages * BLOCK
    }

    // ----- per-block views of the allocation map ---------------------------------------------

    /// First bit of block `i` at or after `from` (block-relative) that is set (`set`) or clear,
    /// or `BLOCK`.
    #[inline]
    fn blk_next(&self, i: u32, from: u32, set: bool) -> u32 {
        let base = (i * BLOCK) as usize;
        let (size, from) = (base + BLOCK as usize, base + from as usize);
        let b = if set {
            self.alloc_map.find_next_bit(size, from)
        } else {
            self.alloc_map.find_next_zero_bit(size, from)
        };
        (b - base) as u32
    }

    /// Last set bit of block `i` below `end` (block-relative), or `end` when there is none.
    #[inline]
    fn blk_last_set(&self, i: u32, end: u32) -> u32 {
        let base = (i * BLOCK) as usize;
        let b = self.alloc_map.find_last_bit(base + end as usize);
        if b >= base + end as usize || b < base {
            end
        } else {
            (b - base) as u32
        }
    }

    // ----- hint maintenance --------------------------------------------------------------------

    /// `pcpu_block_refresh_hint`: rescan block `i` from its scan hint (promoted to contig hint) or
    /// from `first_free`.
    #[doc(alias = "pcpu_block_refresh_hint")]
    fn block_refresh_hint(&mut self, i: u32) {
        let mut block = self.md_blocks[i as usize];
        let mut start = if block.scan_hint != 0 {
            let s = block.scan_hint_start + block.scan_hint;
            block.contig_hint_start = block.scan_hint_start;
            block.contig_hint = block.scan_hint;
            block.scan_hint = 0;
            s
        } else {
            block.contig_hint = 0;
            block.first_free
        };
        block.right_free = 0;
        loop {
            let rs = self.blk_next(i, start, false);
            if rs >= BLOCK {
                break;
            }
            let re = self.blk_next(i, rs + 1, true);
            block.update(rs, re);
            start = re;
        }
        self.md_blocks[i as usize] = block;
    }

    /// `pcpu_next_md_free_region`: from `*bit_off`, the next free region the block hints know of
    /// — a block's contig hint, or a run crossing block boundaries built from right and left
    /// free runs. Sets `*bit_off = map_bits` when there is none.
    #[doc(alias = "pcpu_next_md_free_region")]
    fn next_md_free_region(&self, bit_off: &mut u32, bits: &mut u32) {
        let mut i = *bit_off / BLOCK;
        let mut block_off = *bit_off % BLOCK;
        *bits = 0;
        while i < self.nr_pages {
            let block = &self.md_blocks[i as usize];
            if *bits != 0 {
                *bits += block.left_free;
                if block.left_free == BLOCK {
                    i += 1;
                    continue;
                }
                return;
            }
            // A contig hint not seen yet and not touching the block end (the right_free path
            // below handles those, as they may continue into the next block).
            *bits = block.contig_hint;
            if *bits != 0
                && block.contig_hint_start >= block_off
                && *bits + block.contig_hint_start < BLOCK
            {
                *bit_off = i * BLOCK + block.contig_hint_start;
                return;
            }
            block_off = 0;
            *bits = block.right_free;
            *bit_off = (i + 1) * BLOCK - block.right_free;
            i += 1;
        }
    }

    /// `pcpu_next_fit_region`: from `*bit_off`, the next region the hints say can hold
    /// `alloc_bits` at alignment `align` (bits). `*bits` is the extent to scan. Sets
    /// `*bit_off = map_bits` when nothing fits.
    #[doc(alias = "pcpu_next_fit_region")]
    fn next_fit_region(&self, alloc_bits: u32, align: u32, bit_off: &mut u32, bits: &mut u32) {
        let mut i = *bit_off / BLOCK;
        let mut block_off = *bit_off % BLOCK;
        *bits = 0;
        while i < self.nr_pages {
            let block = &self.md_blocks[i as usize];
            if *bits != 0 {
                *bits += block.left_free;
                if *bits >= alloc_bits {
                    return;
                }
                if block.left_free == BLOCK {
                    i += 1;
                    continue;
                }
            }
            *bits = block.contig_hint_start.next_multiple_of(align) - block.contig_hint_start;
            if block.contig_hint != 0
                && block.contig_hint_start >= block_off
                && block.contig_hint >= *bits + alloc_bits
            {
                let start = block.next_hint(alloc_bits);
                debug_assert!(start <= block.contig_hint_start);
                *bits += alloc_bits + block.contig_hint_start - start;
                *bit_off = i * BLOCK + start;
                return;
            }
            block_off = 0;
            let off = (BLOCK - block.right_free).next_multiple_of(align);
            *bits = BLOCK - off;
            *bit_off = i * BLOCK + off;
            if *bits >= alloc_bits {
                return;
            }
            i += 1;
        }
        *bit_off = self.map_bits();
    }

    /// `pcpu_chunk_refresh_hint`: recompute the chunk's contig hint from the block hints,
    /// starting after a promoted scan hint unless `full_scan`.
    #[doc(alias = "pcpu_chunk_refresh_hint")]
    fn chunk_refresh_hint(&mut self, full_scan: bool) {
        let mut bit_off = if !full_scan && self.chunk_md.scan_hint != 0 {
            let md = &mut self.chunk_md;
            let s = md.scan_hint_start + md.scan_hint;
            md.contig_hint_start = md.scan_hint_start;
            md.contig_hint = md.scan_hint;
            md.scan_hint = 0;
            s
        } else {
            self.chunk_md.contig_hint = 0;
            self.chunk_md.first_free
        };
        let mut bits = 0;
        let map_bits = self.map_bits();
        self.next_md_free_region(&mut bit_off, &mut bits);
        while bit_off < map_bits {
            self.chunk_md.update(bit_off, bit_off + bits);
            bit_off += bits + 1;
            self.next_md_free_region(&mut bit_off, &mut bits);
        }
    }

    /// `pcpu_block_update_scan`: a free run `[bit_off, +bits)` that an alignment-constrained
    /// scan skipped may beat the block's scan hint. Only runs inside one block are folded in,
    /// after extending them backwards over bits the alignment skipped.
    #[doc(alias = "pcpu_block_update_scan")]
    fn block_update_scan(&mut self, bit_off: u32, bits: u32) {
        let s_off = bit_off % BLOCK;
        let e_off = s_off + bits;
        if e_off > BLOCK {
            return;
        }
        let i = bit_off / BLOCK;
        let l = self.blk_last_set(i, s_off);
        let s_off = if l == s_off { 0 } else { l + 1 };
        self.md_blocks[i as usize].update(s_off, e_off);
    }

    /// `pcpu_block_update_hint_alloc`: `[bit_off, +bits)` was just allocated. Returns the change
    /// of entirely free pages (≤ 0).
    #[doc(alias = "pcpu_block_update_hint_alloc")]
    pub(crate) fn block_update_hint_alloc(&mut self, bit_off: u32, bits: u32) -> i32 {
        let mut nr_empty = 0i32;
        let (s_index, s_off, e_index, e_off) = block_span(bit_off, bits);

        // The first block: its first_free moves if the allocation took it; a broken contig hint
        // needs a block rescan, otherwise the edge runs shrink in place.
        {
            let s = self.md_blocks[s_index as usize];
            if s.contig_hint == BLOCK {
                nr_empty += 1;
            }
            let mut s = s;
            if s_off == s.first_free {
                s.first_free = self.blk_next(s_index, s_off + bits, false);
            }
            if s.scan_hint_overlaps(s_off, bits) {
                s.scan_hint = 0;
            }
            let broken = s.contig_hint_overlaps(s_off, bits);
            if broken {
                if s_off == 0 {
                    s.left_free = 0;
                }
                self.md_blocks[s_index as usize] = s;
                self.block_refresh_hint(s_index);
            } else {
                s.left_free = s.left_free.min(s_off);
                s.right_free = if s_index == e_index {
                    s.right_free.min(BLOCK - e_off)
                } else {
                    0
                };
                self.md_blocks[s_index as usize] = s;
            }
        }

        // The last block, and every block in between (which were entirely free).
        if s_index != e_index {
            let mut e = self.md_blocks[e_index as usize];
            if e.contig_hint == BLOCK {
                nr_empty += 1;
            }
            e.first_free = self.blk_next(e_index, e_off, false);
            let mut between_end = e_index;
            if e_off == BLOCK {
                // Fully covered: reset like the blocks in between.
                self.md_blocks[e_index as usize] = e;
                between_end = e_index + 1;
            } else {
                if e_off > e.scan_hint_start {
                    e.scan_hint = 0;
                }
                e.left_free = 0;
                if e_off > e.contig_hint_start {
                    self.md_blocks[e_index as usize] = e;
                    self.block_refresh_hint(e_index);
                } else {
                    e.right_free = e.right_free.min(BLOCK - e_off);
                    self.md_blocks[e_index as usize] = e;
                }
            }
            nr_empty += (e_index - s_index - 1) as i32;
            // As in the kernel, first_free and contig_hint_start of these blocks are left
            // stale; both only ever understate.
            for b in &mut self.md_blocks[(s_index + 1) as usize..between_end as usize] {
                b.scan_hint = 0;
                b.contig_hint = 0;
                b.left_free = 0;
                b.right_free = 0;
            }
        }

        let md = &mut self.chunk_md;
        if md.scan_hint_overlaps(bit_off, bits) {
            md.scan_hint = 0;
        }
        // Only breaking the chunk's contig hint needs a (partial) chunk scan: a smaller run was
        // used otherwise, and the hint still holds.
        if md.contig_hint_overlaps(bit_off, bits) {
            self.chunk_refresh_hint(false);
        }
        -nr_empty
    }

    /// `pcpu_block_update_hint_free`: `[bit_off, +bits)` was just freed. Returns the change of
    /// entirely free pages (≥ 0).
    ///
    /// The free run is widened to the whole free area inside its first and last blocks, using
    /// the contig hints when they line up and a bitmap scan otherwise. The chunk hint is
    /// rescanned when the free spans blocks or frees a whole page; otherwise the run is folded
    /// into it directly — with the kernel's block-relative `end`, so that for blocks after the
    /// first only `first_free` moves and the chunk hint catches up at the next rescan.
    #[doc(alias = "pcpu_block_update_hint_free")]
    pub(crate) fn block_update_hint_free(&mut self, bit_off: u32, bits: u32) -> i32 {
        let mut nr_empty = 0i32;
        let (s_index, s_off, e_index, e_off) = block_span(bit_off, bits);

        let s = self.md_blocks[s_index as usize];
        let start = if s_off == s.contig_hint + s.contig_hint_start {
            s.contig_hint_start
        } else {
            let l = self.blk_last_set(s_index, s_off);
            if l == s_off {
                0
            } else {
                l + 1
            }
        };
        let e = self.md_blocks[e_index as usize];
        let end = if e_off == e.contig_hint_start {
            e.contig_hint_start + e.contig_hint
        } else {
            self.blk_next(e_index, e_off, true)
        };

        let s_end = if s_index == e_index { end } else { BLOCK };
        if start == 0 && s_end == BLOCK {
            nr_empty += 1;
        }
        self.md_blocks[s_index as usize].update(start, s_end);

        if s_index != e_index {
            if end == BLOCK {
                nr_empty += 1;
            }
            self.md_blocks[e_index as usize].update(0, end);
            nr_empty += (e_index - s_index - 1) as i32;
            for b in &mut self.md_blocks[(s_index + 1) as usize..e_index as usize] {
                *b = PcpuBlockMd::new(BLOCK);
            }
        }

        if s_index != e_index || end - start >= BLOCK {
            self.chunk_refresh_hint(true);
        } else if s_index == 0 {
            self.chunk_md.update(start, end);
        } else {
            // pcpu_block_update(&chunk_md, block_off_to_off(s_index, start), end) with a
            // block-relative end: the run has negative length, so of all the hints only
            // first_free is lowered.
            let md = &mut self.chunk_md;
            md.first_free = md.first_free.min(s_index * BLOCK + start);
        }
        nr_empty
    }

    // ----- search, allocation, free ------------------------------------------------------------

    /// `pcpu_is_populated`: are all pages under `[bit_off, +bits)` populated? If not, `Err` with
    /// the bit offset just past the first unpopulated run, where the search may resume.
    #[doc(alias = "pcpu_is_populated")]
    fn is_populated(&self, bit_off: u32, bits: u32) -> Result<(), u32> {
        let bytes = PCPU_MIN_ALLOC_SIZE as u32;
        let page_start = (bit_off * bytes) as u64 / PAGE_SIZE;
        let page_end = ((bit_off + bits) as u64 * bytes as u64).div_ceil(PAGE_SIZE);
        let (ps, pe) = (page_start as usize, page_end as usize);
        let rs = self.populated.find_next_zero_bit(pe, ps);
        if rs >= pe {
            return Ok(());
        }
        let re = self.populated.find_next_bit(pe, rs + 1);
        Err(re as u32 * BLOCK)
    }

    /// `pcpu_find_block_fit`: the bit offset where [`Self::alloc_area`] should start scanning for
    /// `alloc_bits` at alignment `align` (bits), or `None`. Not quite first fit: blocks whose
    /// hints cannot take the request are skipped. `pop_only` (atomic requests) skips areas
    /// over unpopulated pages.
    #[doc(alias = "pcpu_find_block_fit")]
    pub(crate) fn find_block_fit(
        &self,
        alloc_bits: u32,
        align: u32,
        pop_only: bool,
    ) -> Option<u32> {
        // Cannot fit the chunk's contig hint: assume pressure and let a new chunk be made.
        if !self.chunk_md.fits(alloc_bits, align) {
            return None;
        }
        let map_bits = self.map_bits();
        let mut bit_off = self.chunk_md.next_hint(alloc_bits);
        let mut bits = 0;
        self.next_fit_region(alloc_bits, align, &mut bit_off, &mut bits);
        while bit_off < map_bits {
            if !pop_only {
                break;
            }
            match self.is_populated(bit_off, bits) {
                Ok(()) => break,
                Err(next_off) => {
                    bit_off = next_off;
                    self.next_fit_region(alloc_bits, align, &mut bit_off, &mut bits);
                }
            }
        }
        (bit_off < map_bits).then_some(bit_off)
    }

    /// `pcpu_find_zero_area`: the first `nr`-bit clear run aligned to `align_mask + 1` in
    /// `[start, end)`, remembering the largest run skipped on the way (best aligned on ties).
    fn find_zero_area(
        &self,
        end: u32,
        start: u32,
        nr: u32,
        align_mask: u32,
    ) -> (Option<u32>, u32, u32) {
        let (mut largest_off, mut largest_bits) = (0u32, 0u32);
        let mut start = start;
        loop {
            let index = self
                .alloc_map
                .find_next_zero_bit(end as usize, start as usize) as u32;
            let index = (index + align_mask) & !align_mask;
            let area_off = index;
            let area_end = index + nr;
            if area_end > end {
                return (None, largest_off, largest_bits);
            }
            let i = self
                .alloc_map
                .find_next_bit(area_end as usize, index as usize) as u32;
            if i < area_end {
                let area_bits = i - area_off;
                if area_bits > largest_bits
                    || (area_bits == largest_bits
                        && largest_off != 0
                        && (area_off == 0 || ffs(area_off) > ffs(largest_off)))
                {
                    largest_off = area_off;
                    largest_bits = area_bits;
                }
                start = i + 1;
                continue;
            }
            return (Some(index), largest_off, largest_bits);
        }
    }

    /// `pcpu_alloc_area`: allocate `alloc_bits` at alignment `align` (bits), scanning from
    /// `start` at most one block past the request. Returns the byte offset and the change of
    /// entirely free pages. The caller relocates the chunk.
    #[doc(alias = "pcpu_alloc_area")]
    pub(crate) fn alloc_area(
        &mut self,
        alloc_bits: u32,
        align: u32,
        start: u32,
    ) -> Option<(u32, i32)> {
        let map_bits = self.map_bits();
        let end = (start + alloc_bits + BLOCK).min(map_bits);
        let (found, area_off, area_bits) = self.find_zero_area(end, start, alloc_bits, align - 1);
        let bit_off = found?;
        if area_bits != 0 {
            self.block_update_scan(area_off, area_bits);
        }
        let (b, n) = (bit_off as usize, alloc_bits as usize);
        self.alloc_map.set_range(b, n);
        self.bound_map.set(b);
        self.bound_map.clear_range(b + 1, n - 1);
        self.bound_map.set(b + n);
        self.free_bytes -= alloc_bits * PCPU_MIN_ALLOC_SIZE as u32;
        if bit_off == self.chunk_md.first_free {
            self.chunk_md.first_free =
                self.alloc_map.find_next_zero_bit(map_bits as usize, b + n) as u32;
        }
        let delta = self.block_update_hint_alloc(bit_off, alloc_bits);
        Some((bit_off * PCPU_MIN_ALLOC_SIZE as u32, delta))
    }

    /// The size in bits of the live allocation starting at byte `off`, if there is one.
    pub(crate) fn allocation_at(&self, off: u32) -> Option<u32> {
        if !off.is_multiple_of(PCPU_MIN_ALLOC_SIZE as u32) {
            return None;
        }
        let bit = off / PCPU_MIN_ALLOC_SIZE as u32;
        if bit >= self.map_bits()
            || !self.alloc_map.test(bit as usize)
            || !self.bound_map.test(bit as usize)
        {
            return None;
        }
        // The hidden head and tail of a boot chunk look like allocations: they are not.
        if self.start_offset > 0 && bit == 0 {
            return None;
        }
        if self.end_offset > 0
            && bit == self.map_bits() - self.end_offset / PCPU_MIN_ALLOC_SIZE as u32
        {
            return None;
        }
        let end = self
            .bound_map
            .find_next_bit(self.map_bits() as usize, bit as usize + 1) as u32;
        Some(end - bit)
    }

    /// `pcpu_free_area`: free the allocation at byte `off` (its length comes from `bound_map`).
    /// Returns the bytes freed and the change of entirely free pages. The caller relocates.
    #[doc(alias = "pcpu_free_area")]
    pub(crate) fn free_area(&mut self, off: u32) -> (u32, i32) {
        let bit_off = off / PCPU_MIN_ALLOC_SIZE as u32;
        let end = self
            .bound_map
            .find_next_bit(self.map_bits() as usize, bit_off as usize + 1) as u32;
        let bits = end - bit_off;
        self.alloc_map.clear_range(bit_off as usize, bits as usize);
        self.free_bytes += bits * PCPU_MIN_ALLOC_SIZE as u32;
        self.chunk_md.first_free = self.chunk_md.first_free.min(bit_off);
        let delta = self.block_update_hint_free(bit_off, bits);
        (bits * PCPU_MIN_ALLOC_SIZE as u32, delta)
    }

    /// `pcpu_chunk_populated` (chunk part): pages `[rs, re)` are now backed. Returns the change of
    /// entirely free pages (the pages are counted empty; an allocation into them already took
    /// them off).
    #[doc(alias = "pcpu_chunk_populated")]
    pub(crate) fn mark_populated(&mut self, rs: u32, re: u32) -> i32 {
        let nr = re - rs;
        debug_assert_eq!(self.populated.count_range(rs as usize, re as usize), 0);
        self.populated.set_range(rs as usize, nr as usize);
        self.nr_populated += nr;
        self.nr_empty_pop_pages += nr as i32;
        nr as i32
    }

    /// `pcpu_chunk_depopulated` (chunk part): pages `[rs, re)` lost their backing.
    #[doc(alias = "pcpu_chunk_depopulated")]
    pub(crate) fn mark_depopulated(&mut self, rs: u32, re: u32) -> i32 {
        let nr = re - rs;
        debug_assert_eq!(
            self.populated.count_range(rs as usize, re as usize),
            nr as usize
        );
        self.populated.clear_range(rs as usize, nr as usize);
        self.nr_populated -= nr;
        self.nr_empty_pop_pages -= nr as i32;
        -(nr as i32)
    }

    /// Bytes of kernel metadata this chunk would cost (struct, maps, blocks; `obj_exts` with
    /// memcg accounting): what `Percpu:` does *not* count.
    pub(crate) fn metadata_bytes(&self, obj_exts: bool) -> u64 {
        const STRUCT_BYTES: u64 = 160;
        let mut b = STRUCT_BYTES
            + self.alloc_map.bytes() as u64
            + self.bound_map.bytes() as u64
            + self.populated.bytes() as u64
            + self.md_blocks.len() as u64 * 32;
        if obj_exts && self.kind == ChunkKind::Dynamic {
            b += self.map_bits() as u64 * 8;
        }
        b
    }
}

/// `__ffs`.
#[inline]
fn ffs(x: u32) -> u32 {
    x.trailing_zeros()
}

/// The blocks `[bit_off, +bits)` spans: the first block and the run's offset in it, the last
/// block and the run's end in it (block-relative, exclusive: `1..=BLOCK`), as the kernel's
/// `pcpu_block_update_hint_alloc`/`_free` compute them.
fn block_span(bit_off: u32, bits: u32) -> (u32, u32, u32, u32) {
    let last = bit_off + bits - 1;
    (
        bit_off / BLOCK,
        bit_off % BLOCK,
        last / BLOCK,
        last % BLOCK + 1,
    )
}
