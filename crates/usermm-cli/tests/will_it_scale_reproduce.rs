//! `reproduce --only will-it-scale` from the outside, at tiny sizes (its figures mean little):
//! `results.json` carries `will_it_scale.rows[]` — one per published row of the page_fault1
//! curve, each with its tasks, mode, published and predicted figures, error and band, every
//! error its own arithmetic — `report.md` has the section, and a second run writes the same
//! record (virtual time repeats itself).

mod common;

use common::*;

fn run(out: &std::path::Path) -> serde_json::Value {
    reproduce_json("will-it-scale", "--will-it-scale-test-sizes", out)
}

#[test]
fn reproduce_will_it_scale_rows_in_results_json() {
    let dir = std::env::temp_dir().join(format!("usermm-cli-test-wis-{}", std::process::id()));
    let v = run(&dir.join("a"));
    let w = &v["will_it_scale"];
    assert_eq!(w["time"], "modelled (profile broadwell-ep-2s)", "{w}");
    let rows = w["rows"].as_array().unwrap();
    let keys: Vec<(u64, &str, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["tasks"].as_u64().unwrap(),
                r["mode"].as_str().unwrap(),
                r["published"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [
            (1, "processes", 626_944),
            (2, "processes", 1_206_238),
            (22, "processes", 7_569_187),
            (44, "processes", 13_446_153),
            (88, "processes", 10_321_790),
            (1, "threads", 625_509),
        ]
    );
    for r in rows {
        let (p, f) = (
            r["published"].as_f64().unwrap(),
            r["predicted"].as_f64().unwrap(),
        );
        let e = r["error"].as_f64().unwrap();
        assert!(f > 0.0 && (e - (f / p - 1.0)).abs() < 1e-9, "{r}");
        assert_eq!(r["band"]["kind"], "relative", "{r}");
        assert_eq!(r["band"]["value"], 0.25, "{r}");
        assert_eq!(r["within"].as_bool().unwrap(), e.abs() <= 0.25, "{r}");
        assert_eq!(r["kind"], "predicted");
    }
    let report = std::fs::read_to_string(dir.join("a/report.md")).unwrap();
    assert!(report.contains("will-it-scale page_fault1: a published curve, predicted"));
    let again = run(&dir.join("b"));
    assert_eq!(again["will_it_scale"], v["will_it_scale"]);
    let _ = std::fs::remove_dir_all(&dir);
}
