//! `reproduce --only validation` from the outside, at tiny sizes (its figures mean little):
//! `results.json` carries `validation.rows[]` with every key a script reads, each row's error
//! and verdict its band's own arithmetic, every row *predicted*; `report.md` has the section,
//! one table per run; and a second run writes the same record (virtual time repeats itself).

mod common;

use common::*;

fn run(out: &std::path::Path) -> serde_json::Value {
    reproduce_json("validation", "--validation-test-sizes", out)
}

#[test]
fn reproduce_validation_rows_in_results_json() {
    let dir = std::env::temp_dir().join(format!("usermm-cli-test-val-{}", std::process::id()));
    let v = run(&dir.join("a"));
    let rows = v["validation"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 33, "{}", v["validation"]);
    for r in rows {
        for k in usermm_workloads::validation::ROW_KEYS {
            assert!(!r[k].is_null(), "{k} missing in {r}");
        }
        assert_eq!(r["kind"], "predicted", "{r}");
        let (p, f) = (
            r["published"].as_f64().unwrap(),
            r["predicted"].as_f64().unwrap(),
        );
        let e = r["error"].as_f64().unwrap();
        let b = &r["band"];
        let within = match b["kind"].as_str().unwrap() {
            "relative" => {
                assert!((e - (f / p - 1.0)).abs() < 1e-9, "{r}");
                e.abs() <= b["value"].as_f64().unwrap() + 1e-12
            }
            "points" => {
                assert!((e - (f - p)).abs() < 1e-9, "{r}");
                e.abs() <= b["value"].as_f64().unwrap() + 1e-12
            }
            "side" => {
                // A published step beyond the tie is a direction (the side must match); a
                // smaller one a tie (the predicted step within the tie of the published).
                let at = b["value"]["at"].as_f64().unwrap();
                let tie = b["value"]["tie"].as_f64().unwrap();
                let (ps, fs) = (p / at - 1.0, f / at - 1.0);
                if ps.abs() > tie {
                    fs.signum() == ps.signum() && fs != 0.0
                } else {
                    (fs - ps).abs() <= tie + 1e-12
                }
            }
            "among" => b["value"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s.as_f64() == Some(f)),
            k => panic!("a band of unknown kind {k}: {r}"),
        };
        assert_eq!(r["within"].as_bool().unwrap(), within, "{r}");
    }
    let runs = v["validation"]["runs"].as_array().unwrap();
    let names: Vec<&str> = runs.iter().map(|r| r["run"].as_str().unwrap()).collect();
    assert_eq!(names, ["munmap-hold", "node-bound", "two-node", "hpe"]);
    let report = std::fs::read_to_string(dir.join("a/report.md")).unwrap();
    assert!(report.contains("Validation: the seed thread's other runs"));
    assert!(
        !report.contains("reproduced"),
        "the validation section never says reproduced"
    );
    // Deterministic: the same rows again.
    let again = run(&dir.join("b"));
    assert_eq!(again["validation"], v["validation"]);
    let _ = std::fs::remove_dir_all(&dir);
}
