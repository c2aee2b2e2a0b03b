//! Summaries of a figure's samples: median, min, max, MAD, and whether they split into two
//! clusters (`bimodal`).
//!
//! This host's single-thread munmap is bimodal per process (~126 vs ~184 ns/page: which mode a
//! process lands in is decided when it starts, not by the run), so a mean would describe no
//! process; the median and the whole sample list are reported instead, and the split is flagged.

#![deny(unsafe_code)]

/// The middle of `sorted` (mean of the two middle values for an even count); 0 when empty.
pub(crate) fn median_sorted(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// `(median, min, max, mad)` of `samples`; MAD is the median absolute deviation from the median
/// (unscaled).
pub(crate) fn summary(samples: &[f64]) -> (f64, f64, f64, f64) {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let med = median_sorted(&s);
    let mut dev: Vec<f64> = s.iter().map(|v| (v - med).abs()).collect();
    dev.sort_by(f64::total_cmp);
    let min = s.first().copied().unwrap_or(0.0);
    let max = s.last().copied().unwrap_or(0.0);
    (med, min, max, median_sorted(&dev))
}

/// Do the samples split into two clusters far apart relative to their spread?
///
/// The rule: sort the samples and cut at the widest gap between neighbours; the split is
/// bimodal when each side holds at least two samples, the gap is at least three times the wider
/// side's range, and at least 5 % of the median (so that two tight clusters 1 % apart are not
/// called two modes). One outlier is not a mode; fewer than four samples are never bimodal.
pub(crate) fn bimodal(samples: &[f64]) -> bool {
    if samples.len() < 4 {
        return false;
    }
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let (cut, gap) = s
        .windows(2)
        .enumerate()
        .map(|(i, w)| (i + 1, w[1] - w[0]))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((0, 0.0));
    let (lo, hi) = s.split_at(cut);
    if lo.len() < 2 || hi.len() < 2 {
        return false;
    }
    let range = |c: &[f64]| c[c.len() - 1] - c[0];
    let spread = range(lo).max(range(hi));
    gap >= 3.0 * spread && gap >= 0.05 * median_sorted(&s).abs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_odd_and_even_counts() {
        assert_eq!(summary(&[3.0, 1.0, 2.0]), (2.0, 1.0, 3.0, 1.0));
        let (m, lo, hi, mad) = summary(&[1.0, 2.0, 3.0, 10.0]);
        assert_eq!((m, lo, hi), (2.5, 1.0, 10.0));
        // deviations 0.5, 0.5, 1.5, 7.5
        assert_eq!(mad, 1.0);
        assert_eq!(summary(&[]), (0.0, 0.0, 0.0, 0.0));
    }

    #[test]
    fn two_far_clusters_are_bimodal_one_outlier_is_not() {
        // This host's teardown: ~126 vs ~184 ns/page per process.
        assert!(bimodal(&[125.0, 127.0, 184.0, 126.0, 183.0, 185.0, 126.5]));
        assert!(!bimodal(&[125.0, 127.0, 126.0, 126.5, 125.5, 127.5, 184.0]));
        assert!(!bimodal(&[100.0, 101.0, 102.0, 103.0, 104.0, 105.0, 106.0]));
        assert!(!bimodal(&[1.0, 9.0, 1.0]));
        // Two clusters, but the gap is small next to their spread.
        assert!(!bimodal(&[100.0, 110.0, 120.0, 130.0, 140.0, 150.0]));
    }
}
