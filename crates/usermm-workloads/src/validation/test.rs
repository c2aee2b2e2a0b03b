//! The verdict arithmetic of the bands, the rows' structure, and tiny virtual runs of each
//! validation run (deterministic: two runs give the same rows, bit for bit).

use super::*;

fn at() -> RunAt {
    RunAt {
        run: "test",
        source: "a posting",
        machine: "a machine".into(),
    }
}

#[test]
fn relative_band_is_a_fraction_of_the_published() {
    let b = TIME_BAND;
    assert!(b.within(100.0, 125.0));
    assert!(b.within(100.0, 75.0));
    assert!(!b.within(100.0, 125.1));
    assert!(!b.within(100.0, 74.9));
    assert!((b.error(100.0, 110.0) - 0.1).abs() < 1e-12);
    assert!(!b.within(100.0, f64::NAN));
    assert!(HOLD_BAND.within(118.5, 118.5 * 1.35));
    assert!(!HOLD_BAND.within(118.5, 118.5 * 1.36));
}

#[test]
fn points_band_is_in_percentage_points() {
    let b = SHARE_BAND;
    assert!(b.within(62.6, 77.6));
    assert!(!b.within(62.6, 77.7));
    assert!(b.within(1.0, 0.0));
    assert!((b.error(62.6, 50.0) + 12.6).abs() < 1e-9);
}

#[test]
fn a_direction_is_judged_beyond_the_postings_noise_and_a_tie_within_it() {
    let tie = direction_tie();
    // Twice √2 × the median of seeds 000/001's spreads (2.8, 0.5, 5.5, 0.16, 0.97, 0.77,
    // 0.46 and 5.8 %: 0.87 %).
    assert!((tie - 2.0 * 2f64.sqrt() * 0.0087).abs() < 1e-12, "{tie}");
    let s = Band::Side { at: 1.0, tie };
    // A step beyond the tie (node-bound 8 over 4, 0.957) is a direction: its side, however
    // close to 1 the prediction comes.
    assert!(s.within(0.957, 0.5));
    assert!(s.within(0.957, 0.999));
    assert!(!s.within(0.957, 1.001));
    assert!(!s.within(0.957, 1.0));
    // A step within it (node-bound 16 over 8, 1.015) is a tie: the predicted step must lie
    // within the tie of the published one, on either side of 1.
    assert!(s.within(1.015, 0.994));
    assert!(s.within(1.015, 1.039));
    assert!(!s.within(1.015, 1.041));
    assert!(!s.within(1.015, 0.99));
    // Two-node, 2 GiB jobs, 4 over 2: a tie in the posting (1.021), a clear step in a model
    // that makes 4 workers 14.5 % faster.
    assert!(!s.within(1.021, 0.855));
    assert!(!s.within(1.015, f64::NAN));
    assert_eq!(s.error(1.015, 0.994), 0.994 - 1.015);
    assert_eq!(
        serde_json::to_value(s).unwrap(),
        serde_json::json!({"kind": "side", "value": {"at": 1.0, "tie": tie}})
    );
}

#[test]
fn the_fastest_setting_is_judged_among_those_the_posting_cannot_order() {
    let tie = direction_tie();
    // The two-node posting's 2 GiB rows: 2 is fastest, 8 (+1.3 %) and 4 (+2.1 %) are tied
    // with it; a row 5.9 % slower is not.
    let curve = [(2, 1.605), (4, 1.639), (8, 1.626), (16, 1.70)];
    let among = tied_with_fastest(&curve, tie);
    assert_eq!(among.list(), [2, 4, 8]);
    let b = Band::Among(among);
    assert!(b.within(2.0, 8.0));
    assert!(b.within(2.0, 2.0));
    assert!(!b.within(2.0, 16.0));
    assert!(!b.within(2.0, 3.0));
    assert!(!b.within(2.0, 0.0));
    assert!(!b.within(2.0, f64::NAN));
    assert_eq!(b.error(2.0, 8.0), 6.0);
    assert_eq!(b.label(), "one of 2, 4, 8");
    assert_eq!(
        serde_json::to_value(b).unwrap(),
        serde_json::json!({"kind": "among", "value": [2, 4, 8]})
    );
    // A curve with one clear fastest: that one alone.
    assert_eq!(
        tied_with_fastest(&[(4, 2.07), (8, 1.98), (16, 2.05)], tie).list(),
        [8]
    );
}

#[test]
fn a_row_carries_its_error_both_verdicts_and_kind() {
    let r = ValidationRow::new(&at(), "t", TIME_BAND, "ns/page", 100.0, (130.0, 110.0));
    assert!((r.error - 0.3).abs() < 1e-12);
    assert!(!r.within);
    assert!(r.unfitted_within);
    assert_eq!(r.kind, "predicted");
    assert_eq!(r.error_label(), "+30.0 %");
    assert_eq!(
        (r.run, r.source.as_str(), r.machine.as_str()),
        ("test", "a posting", "a machine")
    );
    let j = serde_json::to_value(&r).unwrap();
    for k in ROW_KEYS {
        assert!(j.get(k).is_some(), "{k} missing: {j}");
    }
    assert_eq!(
        j["band"],
        serde_json::json!({"kind": "relative", "value": 0.25})
    );
}

#[test]
fn verdict_says_met_or_names_every_miss_and_never_reproduced() {
    let ok = ValidationRow::new(&at(), "a", TIME_BAND, "ns/page", 100.0, (110.0, 200.0));
    let bad = ValidationRow::new(&at(), "b", SHARE_BAND, "%", 60.0, (30.0, 3.0));
    let v = verdict(&[ok.clone(), ok.clone()]);
    assert!(v.starts_with("met: all 2"), "{v}");
    let v = verdict(&[ok, bad]);
    assert!(v.starts_with("missed: 1 of 2"), "{v}");
    assert!(v.contains("b -30.0 pp"), "{v}");
    assert!(!v.contains("reproduced"), "{v}");
}

/// Tiny sizes with jobs to match (64 MiB jobs), every run: the rows each run promises, all
/// *predicted*, finite, and the same twice over.
#[test]
fn tiny_virtual_runs_are_deterministic_and_complete() {
    let opts = ValidationOpts {
        threads: 2,
        ..ValidationOpts::tiny()
    };
    let a = run(&opts, &|_| {}).unwrap();
    let b = run(&opts, &|_| {}).unwrap();
    assert_eq!(a.rows, b.rows);
    let count = |run: &str| a.rows.iter().filter(|r| r.run == run).count();
    // 6 times, 6 spinlock shares, 2 lock splits, fastest + 2 turns.
    assert_eq!(count("node-bound"), 17);
    // vanilla + 3 + 3 times, fastest + turn per job size, 2 GiB vs 1 GiB.
    assert_eq!(count("two-node"), 12);
    assert_eq!(count("munmap-hold"), 1);
    // vanilla and v1 per page, the speedup.
    assert_eq!(count("hpe"), 3);
    for r in &a.rows {
        assert!(r.predicted.is_finite() && r.unfitted.is_finite(), "{r:?}");
        assert_eq!(r.kind, "predicted");
        assert_eq!(r.within, r.band.within(r.published, r.predicted));
    }
    assert_eq!(a.runs.len(), 4);
    for o in &a.runs {
        assert_eq!(o.rows, a.rows.iter().filter(|r| r.run == o.run).count());
        assert!(o.verdict.starts_with("met") || o.verdict.starts_with("missed"));
        // A note says what a miss points to: none where every row was met.
        assert!(o.met < o.rows || o.notes.is_empty(), "{o:?}");
    }
    // The bound run's machine is bound to node 1; the era changes the predictions.
    assert!(a.runs[1].machine.contains("membind 1"), "{:?}", a.runs[1]);
    assert!(a.rows.iter().any(|r| r.predicted != r.unfitted));
}
