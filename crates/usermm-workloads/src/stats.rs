//! The one median and spread that every summary of repeated runs uses.
//!
//! Repeated runs on a shared host are summarised by robust statistics: a run disturbed by
//! other load moves a mean but hardly a median. Two medians exist, for two kinds of figure:
//!
//! - [`median`], with its spread [`mad_pct`]: the sample median of measured values (times,
//!   rates, per-page costs) — the middle value, or the mean of the two middle values of an even
//!   count — and the median absolute deviation as a percentage of it (the pair hyperfine and
//!   the seeds' "± %" columns report). `bigfree` summarises its rows with them.
//! - [`upper_median`] and [`upper_median_index_by`]: the upper middle element — the median of
//!   an odd count, the higher of the two middle values of an even count. For a figure that
//!   must be a value some run produced: integer counters (faults, pages zapped, TLB flushes),
//!   latency percentiles, and "the median run" whose other figures a table shows.
//!   `munmap-test` summarises with these.
//!
//! Both sort a copy; NaNs sort last (`f64::total_cmp`). An empty sample gives 0 (or `None`).

use std::cmp::Ordering;

/// The sample median: the middle value, or the mean of the two middle ones; 0 when empty.
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => s[n / 2],
        _ => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// Median absolute deviation as a percentage of the [`median`] (0 when the median is 0).
pub fn mad_pct(v: &[f64]) -> f64 {
    let m = median(v);
    if m == 0.0 {
        return 0.0;
    }
    let dev: Vec<f64> = v.iter().map(|x| (x - m).abs()).collect();
    median(&dev) / m * 100.0
}

/// The index in `v` of its upper middle element in the order `cmp` (a stable sort: of equal
/// elements, the earlier run counts as smaller); `None` when `v` is empty.
pub fn upper_median_index_by<T>(v: &[T], mut cmp: impl FnMut(&T, &T) -> Ordering) -> Option<usize> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| cmp(&v[a], &v[b]));
    idx.get(idx.len() / 2).copied()
}

/// The upper middle element of `v` in the order `cmp`; `None` when `v` is empty.
pub fn upper_median<T: Copy>(v: &[T], cmp: impl FnMut(&T, &T) -> Ordering) -> Option<T> {
    upper_median_index_by(v, cmp).map(|i| v[i])
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn median_and_mad() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        assert_eq!(mad_pct(&[10.0]), 0.0);
        assert!((mad_pct(&[9.0, 10.0, 12.0]) - 10.0).abs() < 1e-9);
    }

    #[test]
    fn upper_medians_are_values_of_the_sample() {
        assert_eq!(upper_median(&[3u64, 1, 2], u64::cmp), Some(2));
        assert_eq!(upper_median(&[4u64, 1, 2, 3], u64::cmp), Some(3));
        assert_eq!(upper_median(&[0.5, 0.25], f64::total_cmp), Some(0.5));
        assert_eq!(upper_median::<u64>(&[], u64::cmp), None);
        // Ties keep the runs' order: of two equal keys the later run is the upper one.
        let runs = [(7, 'a'), (7, 'b'), (1, 'c')];
        assert_eq!(upper_median_index_by(&runs, |x, y| x.0.cmp(&y.0)), Some(0));
        let runs = [(7, 'a'), (7, 'b')];
        assert_eq!(upper_median_index_by(&runs, |x, y| x.0.cmp(&y.0)), Some(1));
    }
}
