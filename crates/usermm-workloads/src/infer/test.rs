use usermm::vtime::{check_era, parse_era, EraChoice, Profile, ERA_FACTORS};

use super::rows::{self, EvalSizes, RowKind};
use super::*;

#[test]
fn training_rows_are_the_seeds_figures_per_page() {
    let t = rows::teardown_rows();
    let ids: Vec<&str> = t.iter().map(|r| r.id).collect();
    assert_eq!(
        ids,
        [
            "000/001 inline",
            "000/001 max_active 1",
            "000/001 max_active 8"
        ]
    );
    // 10.8 s over 320 GiB of 4 KiB pages; 8.9 s; 4.77 s.
    let pages = (320u64 << 30) as f64 / 4096.0;
    for (r, s) in t.iter().zip([10.8, 8.9, 4.77]) {
        assert!((r.published - s * 1e9 / pages).abs() < 1e-9, "{r:?}");
        assert_eq!(r.band(), 0.10, "every teardown spread is under 10 %");
    }
    let f = rows::fault_rows();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].published, 0.5403);
    assert!(f[0].cites.contains("54.03 %"));
}

#[test]
fn rounding_keeps_four_significant_digits() {
    assert_eq!(round4(0.123456), 0.1235);
    assert_eq!(round4(1.98765), 1.988);
    assert_eq!(round4(12.3456), 12.35);
}

#[test]
fn a_row_runs_the_same_alone_and_beside_another() {
    // Virtual runs on two host threads at once give what each gives alone.
    let sizes = EvalSizes {
        bigfree: 256 << 20,
        usemem: 256 << 20,
    };
    let f = [0.5, 0.75, 1.25, 1.0];
    let jobs = [RowKind::Teardown(None), RowKind::Teardown(Some(1))];
    let alone: Vec<f64> = jobs
        .iter()
        .map(|k| rows::evaluate(*k, &sizes, &f).unwrap())
        .collect();
    let together = crate::parallel::map(&jobs, 2, &|k| rows::evaluate(*k, &sizes, &f).unwrap());
    assert_eq!(alone, together);
    // The factors reach the run: the inline free is dearer at twice the zap.
    let g = [1.0, 0.75, 1.25, 1.0];
    let dearer = rows::evaluate(RowKind::Teardown(None), &sizes, &g).unwrap();
    assert!(dearer > alone[0], "{dearer} vs {}", alone[0]);
}

fn fake_result() -> InferResult {
    let all = rows::training_rows();
    InferResult {
        era: ERA,
        factors: ERA_FACTORS
            .iter()
            .enumerate()
            .map(|(k, e)| FactorResult {
                input: e.input,
                path: e.path,
                costs: e.costs.iter().map(|c| c.key()).collect(),
                value: [0.5, 0.75, 1.25, 1.0][k],
                unconstrained: [0.5, 0.75, 1.25, 5.0][k],
                applied: k < 3,
                rows: if k < 3 {
                    all[..3].iter().map(|r| r.id).collect()
                } else {
                    vec![all[3].id]
                },
                range: (Some(0.4), Some(0.6)),
                range_checked: Vec::new(),
                plausible: k < 3,
            })
            .collect(),
        rows: all
            .iter()
            .map(|r| RowResult {
                id: r.id,
                cites: r.cites.clone(),
                unit: r.unit,
                published: r.published,
                band: r.band(),
                unfitted: r.published * 2.0,
                unfitted_error: 1.0,
                fitted: r.published,
                fitted_error: 0.0,
                within: true,
            })
            .collect(),
        runs: 42,
        teardown_stopped: "x".into(),
        fault_stopped: "y",
        path: Vec::new(),
        sizes: EvalSizes::default(),
        wall_s: 1.0,
    }
}

#[test]
fn the_era_file_loads_names_its_rows_and_flags_an_implausible_factor() {
    let r = fake_result();
    assert!(!r.ok(), "a factor outside [0.25, 4] is not ok");
    let opts = InferOpts {
        sizes: EvalSizes::default(),
        threads: 1,
        command: "usermm infer (test)".into(),
    };
    let text = era_file(&r, &opts);
    let spec = parse_era(&text, "test").unwrap();
    check_era(&spec, "test").unwrap();
    assert_eq!(spec.name, ERA);
    let zap = &spec.inputs["era_zap"];
    assert_eq!(zap.value, 0.5);
    assert_eq!(zap.rows.len(), 3);
    assert!(zap.rows[0].contains("10.8 s"), "{:?}", zap.rows);
    let fault = &spec.inputs["era_fault"];
    assert_eq!(fault.rows.len(), 1);
    assert_eq!(fault.value, 1.0, "not applied: written as 1");
    assert!(fault.source.contains("NOT APPLIED"), "{}", fault.source);
    assert!(!zap.source.contains("OUTSIDE") && !zap.source.contains("NOT APPLIED"));
}

#[test]
fn the_built_in_era_names_every_training_row_and_profiles_apply_it() {
    let want: Vec<String> = rows::training_rows()
        .iter()
        .map(|r| r.cites.clone())
        .collect();
    for name in [
        "haswell-ex-4s",
        "haswell-ep-2s",
        "e5-2680-32c",
        "hpe-64s",
        "broadwell-ep-2s",
    ] {
        let p = Profile::builtin(name).unwrap();
        let era = p.era().expect("every seed profile names the era");
        assert_eq!(era.spec.name, ERA);
        for (k, e) in ERA_FACTORS.iter().enumerate() {
            let input = &era.spec.inputs[e.input];
            let rows_k: Vec<String> = if k < 3 {
                want[..3].to_vec()
            } else {
                want[3..].to_vec()
            };
            assert_eq!(
                input.rows, rows_k,
                "{name}: {} names its training rows",
                e.input
            );
            for c in e.costs {
                let fitted = p.cost_ns(*c);
                let base = p.base_cost_ns(*c);
                assert!(
                    (fitted - base * era.factors[k]).abs() <= 0.001 + 1e-9 * base,
                    "{name}: {} = {} x {}",
                    c.key(),
                    base,
                    era.factors[k]
                );
            }
        }
        let u = p.with_era(EraChoice::Unfitted).unwrap();
        for c in usermm::vtime::Cost::ALL {
            assert_eq!(u.cost_ns(*c), p.base_cost_ns(*c));
        }
    }
}
