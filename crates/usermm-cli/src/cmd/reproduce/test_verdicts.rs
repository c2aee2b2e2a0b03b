//! The seeds' verdicts on figures with known answers: one verdict each, every band checked.

use usermm_workloads::seeds::{HUGE_ZERO, PARALLEL_FREE};

use super::sides::{
    bigfree_verdict, huge_zero_verdict, munmap_verdict, BigfreeFigures, CurveRow, Hold,
    HugeZeroFigures, MunmapFigures, Role,
};

/// The seed's own curve, scaled by `f` per row, spinning `spin8` at max_active 8.
fn curve(f: impl Fn(u32) -> f64, spin8: f64, inline_s: f64) -> BigfreeFigures {
    let mut rows = vec![CurveRow {
        max_active: None,
        role: Role::of_bigfree_row(None),
        seconds: inline_s,
        speedup: 1.0,
        spin_share: 0.0,
    }];
    for &(ma, s, _) in PARALLEL_FREE.rows {
        let speedup = PARALLEL_FREE.vanilla_s / s * f(ma);
        rows.push(CurveRow {
            max_active: Some(ma),
            role: Role::of_bigfree_row(Some(ma)),
            seconds: inline_s / speedup,
            speedup,
            spin_share: if ma == 8 { spin8 } else { 0.1 },
        });
    }
    BigfreeFigures { rows }
}

#[test]
fn bigfree_is_judged_on_its_predicted_rows_and_each_band_can_miss() {
    let v = bigfree_verdict(&curve(|_| 1.0, 0.6, 10.8), "p");
    assert!(
        v.starts_with("reproduced (predicted figures, modelled, profile p)"),
        "{v}"
    );
    assert!(
        v.contains("max_active 2, 4, 16, 32, 256)"),
        "the predicted rows are named: {v}"
    );
    assert!(
        v.contains("fitted (training rows of the era factors, not judged): inline 10.800 s; max_active 1 1.21× (seed 1.21×); max_active 8"),
        "{v}"
    );
    // A fitted row is shown, never judged: max_active 1 30 % fast changes nothing.
    let v = bigfree_verdict(&curve(|m| if m == 1 { 1.3 } else { 1.0 }, 0.6, 10.8), "p");
    assert!(v.starts_with("reproduced"), "{v}");
    // A predicted row 30 % fast: outside ±25 %, named with its error.
    let v = bigfree_verdict(&curve(|m| if m == 2 { 1.3 } else { 1.0 }, 0.6, 10.8), "p");
    assert!(v.starts_with("not reproduced"), "{v}");
    assert!(v.contains("2: 2.48× vs 1.91× (+30 %)"), "{v}");
    // The default workqueue's row is predicted too.
    let v = bigfree_verdict(&curve(|m| if m == 256 { 0.7 } else { 1.0 }, 0.6, 10.8), "p");
    assert!(v.contains("256: 1.30× vs 1.86× (-30 %)"), "{v}");
    // A tail 11 % slower than 8 (its speedup still within ±25 %): the knee check alone misses.
    let soft = curve(
        |m| if m == 32 { (6.21 / 4.77) / 1.11 } else { 1.0 },
        0.6,
        10.8,
    );
    let v = bigfree_verdict(&soft, "p");
    assert!(
        v.starts_with("not")
            && v.contains("missed: max_active 32 at least 15 % slower than 8")
            && v.contains("met: every predicted speedup"),
        "{v}"
    );
    // A flat tail: 32 as fast as 8, outside ±25 % too.
    let tail = curve(|m| if m == 32 { 2.26 / 1.74 } else { 1.0 }, 0.6, 10.8);
    let v = bigfree_verdict(&tail, "p");
    assert!(
        v.contains("missed: predicted speedups within ±25 % (outside: 32: 2.26× vs 1.74× (+30 %))")
            && v.contains("; max_active 32 at least 15 % slower than 8 (4.781 s vs 4.770 s, +0 %)"),
        "{v}"
    );
}

#[test]
fn huge_zero_bands() {
    let fig = |ratio, v, p| HugeZeroFigures {
        throughput_ratio: ratio,
        line_share_vanilla: Some(v),
        line_share_patched: Some(p),
    };
    let seed = HUGE_ZERO.throughput_ratio;
    assert!(huge_zero_verdict(&fig(seed, 0.54, 0.001), "p").starts_with("reproduced"));
    let v = huge_zero_verdict(&fig(seed * 1.3, 0.54, 0.001), "p");
    assert!(
        v.starts_with("not") && v.contains("missed: patched/vanilla"),
        "{v}"
    );
    // The vanilla share trained the fault factor: shown, not judged.
    let v = huge_zero_verdict(&fig(seed, 0.80, 0.001), "p");
    assert!(v.starts_with("reproduced"), "{v}");
    assert!(v.contains("fitted (training rows of the era factors, not judged): get_huge_zero_page's share vanilla 80.00 % (seed 54.03 %)"), "{v}");
    let v = huge_zero_verdict(&fig(seed, 0.50, 0.02), "p");
    assert!(v.contains("missed: under 1 % patched"), "{v}");
}

#[test]
fn munmap_bands() {
    let pages = (80u64 << 30) / 4096;
    let fig = |per_page_ns: f64, patched_us: f64| {
        let vanilla = per_page_ns * pages as f64 / 1000.0;
        MunmapFigures {
            exclusive_hold_us: Hold {
                vanilla,
                patched: patched_us,
            },
            ratio: vanilla / patched_us,
            size: 80 << 30,
        }
    };
    assert!(munmap_verdict(&fig(118.5, 1.0), "p").starts_with("reproduced"));
    let v = munmap_verdict(&fig(243.0, 1.0), "p");
    assert!(
        v.contains("missed: vanilla hold per page within ±35 % of 118.5 ns (243.0 ns)"),
        "{v}"
    );
    let v = munmap_verdict(&fig(118.5, 1e4), "p");
    assert!(v.contains("missed: exclusive hold ≥ 1000× shorter"), "{v}");
}
