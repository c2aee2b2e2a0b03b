//! The `drand48` family as usemem's `--random` uses it: `srand48_r` then `lrand48_r`, scaled
//! to a word index the way usemem scales it.
//!
//! The generator is the one POSIX specifies for `drand48`: a 48-bit linear congruential
//! sequence `X(n+1) = (a·X(n) + c) mod 2^48` with `a = 0x5DEECE66D`, `c = 0xB`; `srand48`
//! sets `X` to the seed's low 32 bits followed by `0x330E`; `lrand48` returns the top 31 bits
//! of the next `X`. With the same `--random-seed`, the engine, the host backend and usemem
//! itself touch the same words in the same order.

/// One `struct drand48_data`.
#[derive(Debug, Clone)]
pub struct Rand48 {
    x: u64,
}

const A: u64 = 0x5_DEEC_E66D;
const C: u64 = 0xB;
const MASK: u64 = (1 << 48) - 1;

impl Rand48 {
    /// `srand48_r(seed)`: only the low 32 bits of the seed count.
    pub fn new(seed: u64) -> Self {
        Rand48 {
            x: ((seed & 0xffff_ffff) << 16) | 0x330e,
        }
    }

    /// `lrand48_r`: a value in `0 .. 2^31`.
    pub fn lrand48(&mut self) -> u64 {
        self.x = A.wrapping_mul(self.x).wrapping_add(C) & MASK;
        self.x >> 17
    }

    /// usemem's `os_random_long(max)`: `max · lrand48() / 2^31` in double precision,
    /// truncated — a word index in `0 .. max` (`max` itself is never drawn).
    pub fn below(&mut self, max: u64) -> u64 {
        let v = self.lrand48();
        (max as f64 * v as f64 / 2_147_483_648.0) as u64
    }
}

#[cfg(test)]
mod test {
    use super::*;

    /// The recurrence, and the values glibc 2.36's `srand48_r(0)` + `lrand48_r` give
    /// (366850414, 1610402240, 206956554) and usemem's scaling of seed 42 to `m - 1 = 999`
    /// (743, 342, 110), both printed by a four-line C program on the host.
    #[test]
    fn the_posix_recurrence() {
        let mut r = Rand48::new(0);
        let first = [r.lrand48(), r.lrand48(), r.lrand48()];
        let mut x: u64 = 0x330e;
        let mut want = [0; 3];
        for w in &mut want {
            x = ((0x5DEECE66Du128 * u128::from(x) + 0xB) % (1 << 48)) as u64;
            *w = x >> 17;
        }
        assert_eq!(first, want);
        assert_eq!(first, [366850414, 1610402240, 206956554]);
        let mut r = Rand48::new(42);
        assert_eq!([r.below(999), r.below(999), r.below(999)], [743, 342, 110]);
        // Only the low 32 bits of the seed are used.
        let mut a = Rand48::new(0x1_0000_0005);
        let mut b = Rand48::new(5);
        assert_eq!(a.lrand48(), b.lrand48());
    }

    #[test]
    fn below_never_reaches_max() {
        let mut r = Rand48::new(42);
        for _ in 0..10_000 {
            assert!(r.below(7) < 7);
        }
        assert_eq!(r.below(0), 0);
    }
}
