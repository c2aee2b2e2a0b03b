//! # Jitter: seeded variability of the work between synchronisation points
//!
//! With every cost a constant, two workers that take the same lock for the same time each
//! round fall into step and alternate without ever queueing: at 64 % utilisation the lock of
//! the model saw 4 contentions in 66 032 acquisitions (a virtual bigfree before jitter existed), where random
//! arrivals would wait on most of them (for M/D/1 the mean wait is ρ/(2(1−ρ)) holds). The
//! hardware is never that regular: a batch of 31 pages takes a little more or less each time.
//!
//! So, when a profile has a `[jitter]` (a relative standard deviation `σ`), the work a context
//! charged between two synchronisation points — one batch: the pages freed under one lock
//! hold, one fault — is multiplied by `1 + σ·z` when it is applied, `z` drawn for that context
//! from its own generator. Lock hand-overs, line transfers and memory touches are not jittered
//! (they are the model's mechanisms, not its constants).
//!
//! `z` is the Irwin–Hall sum of four uniforms, centred and scaled to variance 1: integer and
//! floating-point arithmetic only (no `ln` or `cos`, whose last bit may differ between C
//! libraries), bounded to ±2√3 (so `1 + σ·z` stays positive for σ below 0.28; it is clamped at
//! 0 above that) and symmetric (the mean of the work is its figure). The generator is
//! SplitMix64 seeded from the run's seed (`time.seed`) and the context's id: the same seed
//! gives the same run to the nanosecond, on any host.
//!
//! The size of `σ` comes from a measurement (the built-in profiles: the spread of this host's
//! single-thread munmap per page, from `usermm calibrate`; see `docs/profiles.md`). It is a
//! proxy: the spread between processes of a whole teardown, not the spread of one batch on
//! the seed's machine, which nobody published.

#![deny(unsafe_code)]

use super::profile::Ps;

/// One step of SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number
/// generators", OOPSLA 2014): the state advances by the golden-ratio increment and the
/// output is its mix.
#[inline]
pub(super) fn next_u64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The initial generator state of context `ctx` in a run seeded with `seed`.
pub(super) fn seed_for(seed: u64, ctx: u32) -> u64 {
    let mut s = seed ^ (u64::from(ctx) << 32 | u64::from(ctx));
    next_u64(&mut s)
}

/// A draw of `z`: mean 0, variance 1, within ±2√3.
#[inline]
fn standard(state: &mut u64) -> f64 {
    // Four 16-bit uniforms from one 64-bit draw.
    let x = next_u64(state);
    let sum: u64 = (0..4).map(|i| (x >> (16 * i)) & 0xFFFF).sum();
    // Each uniform is (k + 0.5) / 65536 on [0, 1): mean 1/2, variance 1/12; the sum's mean
    // is 2 and its variance 1/3.
    // Through i64: the same value (below 2^19), without the unsigned conversion's extra steps.
    let u = (sum as i64 as f64 + 2.0) / 65536.0;
    (u - 2.0) * 3f64.sqrt()
}

/// `ps` of work with jitter `sigma_ppm` (millionths) applied, drawing from `state`.
#[inline]
pub(super) fn apply(ps: Ps, sigma_ppm: u32, state: &mut u64) -> Ps {
    if sigma_ppm == 0 || ps == 0 {
        return ps;
    }
    let f = 1.0 + f64::from(sigma_ppm) * 1e-6 * standard(state);
    round_non_negative(to_f64(ps) * f.max(0.0))
}

/// `ps as f64`, through the signed conversion (one instruction on baseline x86-64) where the
/// value fits it: the same correctly rounded result.
#[inline]
fn to_f64(ps: Ps) -> f64 {
    match i64::try_from(ps) {
        Ok(v) => v as f64,
        Err(_) => ps as f64,
    }
}

/// `x.round() as Ps` for a non-negative `x`, without the C library's `round` (a call on the
/// baseline x86-64, which has no rounding instruction): the integer part by truncation, plus
/// one when the fraction is at least a half (ties away from zero, as `round`). Exact: below
/// 2^53 the fraction `x - trunc(x)` is representable, above it `x` is an integer.
#[inline]
fn round_non_negative(x: f64) -> Ps {
    if !(0.0..9.0e18).contains(&x) {
        return x.round() as Ps;
    }
    // Through i64 (one instruction on baseline x86-64, where the unsigned conversion takes a
    // dozen): `x` is below 9e18 < 2^63, so the truncation is the same.
    let t = x as i64 as Ps;
    if x - to_f64(t) >= 0.5 {
        t + 1
    } else {
        t
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn draws_have_mean_zero_and_variance_one() {
        let mut s = seed_for(7, 3);
        let n = 200_000;
        let draws: Vec<f64> = (0..n).map(|_| standard(&mut s)).collect();
        let mean = draws.iter().sum::<f64>() / n as f64;
        let var = draws.iter().map(|z| (z - mean) * (z - mean)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "variance {var}");
        let bound = 2.0 * 3f64.sqrt();
        assert!(draws.iter().all(|z| z.abs() <= bound));
    }

    #[test]
    fn rounding_matches_round() {
        let mut s = seed_for(3, 1);
        let edge = [
            0.0,
            0.5,
            1.5,
            2.5,
            0.499_999_999_999_999_94,
            4503599627370495.5,
            9.1e18,
        ];
        let draws = (0..100_000).map(|_| (next_u64(&mut s) >> 11) as f64 / 64.0);
        for x in edge.into_iter().chain(draws) {
            assert_eq!(round_non_negative(x), x.round() as Ps, "{x}");
        }
    }

    #[test]
    fn same_seed_same_draws_other_seed_other_draws() {
        let run = |seed, ctx| {
            let mut s = seed_for(seed, ctx);
            (0..8)
                .map(|_| apply(1_000_000, 30_000, &mut s))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(1, 2), run(1, 2));
        assert_ne!(run(1, 2), run(2, 2));
        assert_ne!(run(1, 2), run(1, 3));
    }

    #[test]
    fn no_sigma_no_change_and_mean_preserved() {
        let mut s = seed_for(0, 0);
        assert_eq!(apply(12_345, 0, &mut s), 12_345);
        let n = 100_000u64;
        let total: u64 = (0..n).map(|_| apply(1_000_000, 30_000, &mut s)).sum();
        let mean = total as f64 / n as f64;
        assert!((mean / 1e6 - 1.0).abs() < 0.001, "mean {mean}");
        // Clamped at zero, never negative (a σ of 100 %).
        assert!((0..1000).all(|_| apply(1000, 1_000_000, &mut s) <= 4464));
    }
}
