//! `struct pcpu_block_md`: the free-space hints of one bitmap block (one page of a unit), and of a
//! whole chunk (`chunk_md`), with the rule that folds a known free run into them.
//!
//! All values are in bits of the allocation map (4 bytes each). For a page block `nr_bits` is
//! [`PCPU_BITMAP_BLOCK_BITS`] (1024); for `chunk_md` it is the whole map.
//!
//! ```text
//!   block:  |xxxx......xx..........xxxxxx....xx.......|
//!            ^first_free          ^contig_hint_start
//!           left_free = 0          contig_hint = 10   right_free = 7
//!                      ^scan_hint_start (a run of 6 known to lie before the contig hint)
//! ```
//!
//! # Invariants (checked by `validate`, P9)
//! 1. `[contig_hint_start, +contig_hint)` and `[scan_hint_start, +scan_hint)` are free.
//! 2. No hint overstates: `contig_hint`, `left_free`, `right_free` are at most the largest run
//!    and the runs touching the two ends; `first_free` is at or before the first free bit. They
//!    may understate, as the kernel's do (a promoted scan hint that touched the block end loses
//!    `right_free`; a scan hint left at the start of a new contig hint shortens it later).
//! 3. A page block's contig hint is the whole block exactly when the page is free.
//! 4. `scan_hint <= contig_hint`; a scan hint after the contig hint equals it.

/// `PCPU_BITMAP_BLOCK_BITS`: allocation-map bits per page block (4096 / 4).
pub const PCPU_BITMAP_BLOCK_BITS: u32 =
    (crate::addr::PAGE_SIZE / super::PCPU_MIN_ALLOC_SIZE) as u32;

/// `struct pcpu_block_md` (8 ints, 32 bytes in the kernel).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PcpuBlockMd {
    /// A large free run known to lie before `contig_hint` (0 = none).
    pub scan_hint: u32,
    pub scan_hint_start: u32,
    /// The largest known free run.
    pub contig_hint: u32,
    pub contig_hint_start: u32,
    /// Free run touching the block start.
    pub left_free: u32,
    /// Free run touching the block end.
    pub right_free: u32,
    /// First free bit (a lower bound).
    pub first_free: u32,
    /// Size of the block in bits.
    pub nr_bits: u32,
}

/// `__ffs`: index of the lowest set bit (alignment of a non-zero offset).
#[inline]
fn ffs(x: u32) -> u32 {
    x.trailing_zeros()
}

/// `pcpu_region_overlap`: does `[a, b)` overlap `[x, y)`?
#[inline]
pub(crate) fn region_overlap(a: u32, b: u32, x: u32, y: u32) -> bool {
    a < y && x < b
}

impl PcpuBlockMd {
    /// Does the allocation `[off, off + bits)` take bits of the scan hint's run?
    #[inline]
    pub(crate) fn scan_hint_overlaps(&self, off: u32, bits: u32) -> bool {
        region_overlap(
            self.scan_hint_start,
            self.scan_hint_start + self.scan_hint,
            off,
            off + bits,
        )
    }

    /// Does the allocation `[off, off + bits)` take bits of the contig hint's run (and so
    /// break the hint)?
    #[inline]
    pub(crate) fn contig_hint_overlaps(&self, off: u32, bits: u32) -> bool {
        region_overlap(
            self.contig_hint_start,
            self.contig_hint_start + self.contig_hint,
            off,
            off + bits,
        )
    }

    /// `pcpu_init_md_block`: an entirely free block of `nr_bits`.
    pub(crate) fn new(nr_bits: u32) -> Self {
        Self {
            scan_hint: 0,
            scan_hint_start: 0,
            contig_hint: nr_bits,
            contig_hint_start: 0,
            left_free: nr_bits,
            right_free: nr_bits,
            first_free: 0,
            nr_bits,
        }
    }

    /// Whether the whole block is free (`contig_hint == nr_bits`).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.contig_hint == self.nr_bits
    }

    /// `pcpu_check_block_hint`: can `bits` at alignment `align` (bits) fit in the contig hint?
    #[doc(alias = "pcpu_check_block_hint")]
    #[doc(alias = "pcpu_check_chunk_hint")]
    #[inline]
    pub(crate) fn fits(&self, bits: u32, align: u32) -> bool {
        let pad = self.contig_hint_start.next_multiple_of(align) - self.contig_hint_start;
        pad + bits <= self.contig_hint
    }

    /// `pcpu_next_hint`: where a scan for `alloc_bits` should start. Past the scan hint when the
    /// request is bigger than it and the contig hint lies after it, else at `first_free`.
    #[doc(alias = "pcpu_next_hint")]
    #[inline]
    pub(crate) fn next_hint(&self, alloc_bits: u32) -> u32 {
        if self.scan_hint != 0
            && self.contig_hint_start > self.scan_hint_start
            && alloc_bits > self.scan_hint
        {
            self.scan_hint_start + self.scan_hint
        } else {
            self.first_free
        }
    }

    /// `pcpu_block_update`: fold the free run `[start, end)` — the whole of a free area inside
    /// this block — into the hints.
    ///
    /// On a tie with the contig hint the better-aligned start wins (a start of 0 is the best),
    /// and the loser may become the scan hint; a smaller run before the contig hint may become
    /// the scan hint when it is at least as large as the current one and further on.
    #[doc(alias = "pcpu_block_update")]
    pub(crate) fn update(&mut self, start: u32, end: u32) {
        let contig = end - start;
        self.first_free = self.first_free.min(start);
        if start == 0 {
            self.left_free = contig;
        }
        if end == self.nr_bits {
            self.right_free = contig;
        }
        if contig > self.contig_hint {
            // The old contig hint is demoted to the scan hint when it lies before the new one
            // and beats the current scan hint; a scan hint that would end up after the new
            // contig hint is dropped.
            if start > self.contig_hint_start {
                if self.contig_hint > self.scan_hint {
                    self.scan_hint_start = self.contig_hint_start;
                    self.scan_hint = self.contig_hint;
                } else if start < self.scan_hint_start {
                    self.scan_hint = 0;
                }
            } else {
                self.scan_hint = 0;
            }
            self.contig_hint_start = start;
            self.contig_hint = contig;
        } else if contig == self.contig_hint {
            let better_aligned = self.contig_hint_start != 0
                && (start == 0 || ffs(start) > ffs(self.contig_hint_start));
            if better_aligned {
                self.contig_hint_start = start;
                if start < self.scan_hint_start && self.contig_hint > self.scan_hint {
                    self.scan_hint = 0;
                }
            } else if start > self.scan_hint_start || self.contig_hint > self.scan_hint {
                // An equal run further on (or beating a smaller scan hint) is remembered.
                self.scan_hint_start = start;
                self.scan_hint = contig;
            }
        } else if start < self.contig_hint_start
            && (contig > self.scan_hint
                || (contig == self.scan_hint && start > self.scan_hint_start))
        {
            self.scan_hint_start = start;
            self.scan_hint = contig;
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn a_new_block_is_one_free_run() {
        let b = PcpuBlockMd::new(1024);
        assert!(b.is_empty());
        assert!(b.fits(1024, 1));
        assert!(!b.fits(1025, 1));
        assert_eq!(b.next_hint(8), 0);
    }

    #[test]
    fn larger_run_demotes_the_old_contig_hint_to_scan_hint() {
        let mut b = PcpuBlockMd {
            nr_bits: 1024,
            first_free: 1024,
            ..Default::default()
        };
        b.update(10, 20);
        assert_eq!(
            (b.contig_hint_start, b.contig_hint, b.first_free),
            (10, 10, 10)
        );
        b.update(100, 150);
        assert_eq!((b.contig_hint_start, b.contig_hint), (100, 50));
        assert_eq!((b.scan_hint_start, b.scan_hint), (10, 10));
        // A request bigger than the scan hint starts scanning past it.
        assert_eq!(b.next_hint(11), 20);
        assert_eq!(b.next_hint(10), 10);
        b.update(1000, 1024);
        assert_eq!(b.right_free, 24);
        assert_eq!(
            b.contig_hint, 50,
            "smaller runs after the contig hint are not remembered"
        );
    }

    #[test]
    fn equal_run_prefers_the_better_alignment() {
        let mut b = PcpuBlockMd {
            nr_bits: 1024,
            first_free: 1024,
            ..Default::default()
        };
        b.update(12, 20);
        b.update(64, 72);
        assert_eq!(b.contig_hint_start, 64, "64 is better aligned than 12");
        b.update(0, 8);
        assert_eq!((b.contig_hint_start, b.left_free), (0, 8));
    }
}
