//! `calibrate --from RECORD` refuses a record that cannot be one `usermm calibrate --json`
//! wrote, naming the record's own field (not a field of the profile it would derive): a
//! format of another version, a format-2 record without its SMT probe, a format-3 record without
//! its shootdown probe, a format-4 record without its LRU-add probe, samples missing, no CPUs, a negative clock, an empty or
//! zero-sized cache (the last made the model 11.7x slower).

mod common;

use serde_json::{json, Value};

/// An edit of the record, and what the refusal must say.
type Case = (&'static str, Box<dyn Fn(&mut Value)>);

fn fixture() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../usermm-workloads/tests/fixtures/host-calibration-2026-11-25.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn impossible_records_are_refused_naming_their_field() {
    let dir = std::env::temp_dir().join(format!("usermm-from-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases: Vec<Case> = vec![
        ("format: 5", Box::new(|r| r["format"] = json!(5))),
        // Format 2 carries the SMT probe; the fixture, a format-1 record, has none.
        ("smt: missing", Box::new(|r| r["format"] = json!(2))),
        // Format 3 carries the shootdown probe too.
        (
            "shootdown: missing",
            Box::new(|r| {
                r["format"] = json!(3);
                r["smt"] = json!({"pairs": vec![[0, 1]; 7], "ratio": r["figures"]["syscall"].clone(),
                                  "shared_core": false, "pinned": true});
            }),
        ),
        // Format 4 carries the LRU-add probe too.
        (
            "lru_add: missing",
            Box::new(|r| {
                r["format"] = json!(4);
                r["smt"] = json!({"pairs": vec![[0, 1]; 7], "ratio": r["figures"]["syscall"].clone(),
                                  "shared_core": false, "pinned": true});
                r["shootdown"] = json!({"pairs": vec![[0, 1]; 7], "flushes": 4000,
                                        "sender": r["figures"]["syscall"].clone(),
                                        "receiver": r["figures"]["syscall"].clone(),
                                        "pinned": true});
            }),
        ),
        (
            "figures.munmap_4k.samples: 0 samples",
            Box::new(|r| r["figures"]["munmap_4k"]["samples"] = json!([])),
        ),
        (
            "system.online_cpus: 0",
            Box::new(|r| r["system"]["online_cpus"] = json!(0)),
        ),
        (
            "system.cpu_mhz: -1",
            Box::new(|r| r["system"]["cpu_mhz"] = json!(-1.0)),
        ),
        (
            "system.caches: no data cache",
            Box::new(|r| r["system"]["caches"] = json!([])),
        ),
        (
            "size_bytes 0",
            Box::new(|r| {
                for c in r["system"]["caches"].as_array_mut().unwrap() {
                    c["size_bytes"] = json!(0);
                }
                r["system"]["caches"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"level": 1, "kind": "Data", "size_bytes": 32768, "shared_cpu_list": "0"}));
            }),
        ),
    ];
    for (i, (mentions, edit)) in cases.iter().enumerate() {
        let mut r = fixture();
        edit(&mut r);
        let rec = dir.join(format!("r{i}.json"));
        std::fs::write(&rec, serde_json::to_vec(&r).unwrap()).unwrap();
        let out = dir.join(format!("p{i}.toml"));
        let args = [
            "calibrate",
            "--from",
            rec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        common::assert_usage_error(&args, mentions);
        assert!(!out.exists(), "{mentions}: a profile was written");
    }
    // The record as written loads.
    let rec = dir.join("good.json");
    std::fs::write(&rec, serde_json::to_vec(&fixture()).unwrap()).unwrap();
    let out = dir.join("good.toml");
    let o = common::usermm(&[
        "calibrate",
        "--from",
        rec.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}
