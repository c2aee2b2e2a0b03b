//! A fixed-size bitmap with the `find_*_bit` family of `include/linux/find.h`.
//!
//! The chunk's `alloc_map`, `bound_map` and `populated` maps are these. Searches go a word at a
//! time; every search is bounded by an explicit `end`, as the kernel's are, and returns `end` when
//! nothing is found (the kernel's "returns size" convention), so callers compare against the bound
//! they passed.

/// A bitmap of `len` bits, zero-initialised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bitmap {
    words: Box<[u64]>,
    len: usize,
}

#[inline]
fn word_of(bit: usize) -> usize {
    bit / 64
}

/// Mask of the bits at and above `bit` within its word.
#[inline]
fn mask_from(bit: usize) -> u64 {
    !0u64 << (bit % 64)
}

/// Mask of the bits strictly below `bit` within its word (all ones when `bit` is word aligned,
/// meaning "the whole previous word" to the callers that use it for an exclusive end).
#[inline]
fn mask_below(bit: usize) -> u64 {
    match bit % 64 {
        0 => !0,
        r => (1u64 << r) - 1,
    }
}

impl Bitmap {
    pub(crate) fn new(len: usize) -> Self {
        Self {
            words: vec![0; len.div_ceil(64)].into_boxed_slice(),
            len,
        }
    }

    /// Bytes of metadata this map costs (for the percpu_stats metadata estimate).
    pub(crate) fn bytes(&self) -> usize {
        self.words.len() * 8
    }

    #[inline]
    pub(crate) fn test(&self, bit: usize) -> bool {
        debug_assert!(bit < self.len);
        self.words[word_of(bit)] & (1 << (bit % 64)) != 0
    }

    #[inline]
    pub(crate) fn set(&mut self, bit: usize) {
        debug_assert!(bit < self.len);
        self.words[word_of(bit)] |= 1 << (bit % 64);
    }

    /// `bitmap_set`: set `[start, start + n)`.
    pub(crate) fn set_range(&mut self, start: usize, n: usize) {
        self.update_range(start, n, true);
    }

    /// `bitmap_clear`: clear `[start, start + n)`.
    pub(crate) fn clear_range(&mut self, start: usize, n: usize) {
        self.update_range(start, n, false);
    }

    /// `bitmap_fill` over the whole map.
    pub(crate) fn fill(&mut self) {
        let len = self.len;
        self.set_range(0, len);
    }

    fn update_range(&mut self, start: usize, n: usize, value: bool) {
        if n == 0 {
            return;
        }
        let end = start + n;
        assert!(
            end <= self.len,
            "bitmap range {start}+{n} beyond {}",
            self.len
        );
        let (first, last) = (word_of(start), word_of(end - 1));
        for w in first..=last {
            let mut m = !0u64;
            if w == first {
                m &= mask_from(start);
            }
            if w == last {
                m &= mask_below(end);
            }
            if value {
                self.words[w] |= m;
            } else {
                self.words[w] &= !m;
            }
        }
    }

    /// `find_next_bit(map, end, start)`: the first set bit in `[start, end)`, or `end`.
    pub(crate) fn find_next_bit(&self, end: usize, start: usize) -> usize {
        self.find_next(end, start, false)
    }

    /// `find_next_zero_bit(map, end, start)`: the first clear bit in `[start, end)`, or `end`.
    pub(crate) fn find_next_zero_bit(&self, end: usize, start: usize) -> usize {
        self.find_next(end, start, true)
    }

    fn find_next(&self, end: usize, start: usize, invert: bool) -> usize {
        debug_assert!(end <= self.len);
        if start >= end {
            return end;
        }
        let flip = if invert { !0u64 } else { 0 };
        let mut w = word_of(start);
        let mut word = (self.words[w] ^ flip) & mask_from(start);
        loop {
            if word != 0 {
                let bit = w * 64 + word.trailing_zeros() as usize;
                return bit.min(end);
            }
            w += 1;
            if w * 64 >= end {
                return end;
            }
            word = self.words[w] ^ flip;
        }
    }

    /// `find_last_bit(map, end)`: the last set bit in `[0, end)`, or `end` when there is none.
    pub(crate) fn find_last_bit(&self, end: usize) -> usize {
        debug_assert!(end <= self.len);
        if end == 0 {
            return end;
        }
        let mut w = word_of(end - 1);
        let mut word = self.words[w] & mask_below(end);
        loop {
            if word != 0 {
                return w * 64 + 63 - word.leading_zeros() as usize;
            }
            if w == 0 {
                return end;
            }
            w -= 1;
            word = self.words[w];
        }
    }

    /// Set bits in `[start, end)`.
    pub(crate) fn count_range(&self, start: usize, end: usize) -> usize {
        let mut n = 0;
        let mut b = self.find_next_bit(end, start);
        while b < end {
            let z = self.find_next_zero_bit(end, b);
            n += z - b;
            b = self.find_next_bit(end, z);
        }
        n
    }

    /// The clear runs `[rs, re)` inside `[start, end)`, in order (`for_each_clear_bitrange_from`).
    pub(crate) fn clear_ranges(&self, start: usize, end: usize) -> Vec<(usize, usize)> {
        self.ranges(start, end, Self::find_next_zero_bit, Self::find_next_bit)
    }

    /// The set runs `[rs, re)` inside `[start, end)`, in order (`for_each_set_bitrange`).
    pub(crate) fn set_ranges(&self, start: usize, end: usize) -> Vec<(usize, usize)> {
        self.ranges(start, end, Self::find_next_bit, Self::find_next_zero_bit)
    }

    /// The runs inside `[start, end)` that begin where `first` finds a bit and end where `past`
    /// finds one of the other kind.
    fn ranges(
        &self,
        start: usize,
        end: usize,
        first: fn(&Self, usize, usize) -> usize,
        past: fn(&Self, usize, usize) -> usize,
    ) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut rs = first(self, end, start);
        while rs < end {
            let re = past(self, end, rs + 1);
            out.push((rs, re));
            rs = first(self, end, re);
        }
        out
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn ranges_and_searches_across_words() {
        let mut b = Bitmap::new(200);
        b.set_range(3, 70);
        assert_eq!(b.find_next_bit(200, 0), 3);
        assert_eq!(b.find_next_zero_bit(200, 3), 73);
        assert_eq!(b.find_next_bit(200, 73), 200);
        assert_eq!(b.find_next_bit(50, 73), 50);
        assert_eq!(b.find_last_bit(200), 72);
        assert_eq!(b.find_last_bit(3), 3, "nothing below 3: returns the bound");
        assert_eq!(b.find_last_bit(4), 3);
        assert_eq!(b.count_range(0, 200), 70);
        assert_eq!(b.count_range(10, 20), 10);
        b.clear_range(10, 54);
        assert_eq!(b.find_next_zero_bit(200, 3), 10);
        assert_eq!(b.find_next_bit(200, 10), 64);
        assert_eq!(b.clear_ranges(0, 200), vec![(0, 3), (10, 64), (73, 200)]);
        assert_eq!(b.set_ranges(0, 200), vec![(3, 10), (64, 73)]);
        assert_eq!(b.set_ranges(5, 66), vec![(5, 10), (64, 66)]);
        b.fill();
        assert_eq!(b.find_next_zero_bit(200, 0), 200);
        assert_eq!(b.count_range(0, 200), 200);
        b.clear_range(199, 1);
        assert!(!b.test(199) && b.test(198));
        assert_eq!(b.find_last_bit(200), 198);
    }

    #[test]
    fn word_boundaries() {
        let mut b = Bitmap::new(128);
        b.set(63);
        b.set(64);
        assert_eq!(b.find_next_bit(128, 0), 63);
        assert_eq!(b.find_next_zero_bit(128, 63), 65);
        assert_eq!(b.find_last_bit(64), 63);
        assert_eq!(b.find_last_bit(65), 64);
        assert_eq!(
            b.find_next_bit(63, 0),
            63,
            "bounded search returns the bound"
        );
        b.set_range(0, 128);
        assert_eq!(b.find_next_zero_bit(128, 0), 128);
        b.clear_range(64, 64);
        assert_eq!(b.find_next_zero_bit(128, 0), 64);
    }
}
