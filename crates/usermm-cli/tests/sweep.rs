//! `usermm sweep`: a 3 × 4 grid of small virtual-time bigfree runs, run locally, resumed, run
//! as GNU parallel jobs and as a Slurm array (by a shell loop standing in for each), merged
//! back; and the grid file's mistakes as one-line usage errors.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{assert_one_line, stdout, text, usermm};
use serde_json::Value;

/// 3 max_active values × 4 zap_pte scales of a 16M bigfree in virtual time (milliseconds each).
const GRID: &str = r#"
command = ["bigfree", "16M", "--time", "virtual", "--seed-only"]
[axes]
"--max-active" = [1, 2, 4]
"--scale-cost zap_pte" = [0.5, 1, 1.5, 2]
[columns]
"vanilla (s)" = "bigfree.vanilla_s"
"patched (s)" = "bigfree.patched.time_s"
ratio = "bigfree.ratio"
"#;

/// A fresh directory for one test, holding the grid as `g.toml`.
fn setup(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("usermm-sweep-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("g.toml"), GRID).unwrap();
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().expect("temp paths are UTF-8")
}

/// `usermm --json sweep ARGS`, which must succeed; its JSON.
fn sweep_json(args: &[&str]) -> Value {
    let mut all = vec!["--json", "sweep"];
    all.extend_from_slice(args);
    let o = usermm(&all);
    assert!(o.status.success(), "{all:?}: {}", text(&o.stderr));
    serde_json::from_str(&stdout(&o)).expect("sweep --json prints JSON")
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is complete JSON"))
        .collect()
}

fn figure(row: &Value, name: &str) -> f64 {
    row["figures"][name].as_f64().expect("a number")
}

#[test]
fn a_grid_runs_locally_one_row_per_point() {
    let dir = setup("local");
    let grid = dir.join("g.toml");
    let v = sweep_json(&[s(&grid), "-j", "2"]);
    assert_eq!(
        (v["ran"].as_u64(), v["reused"].as_u64()),
        (Some(12), Some(0))
    );
    assert_eq!(v["points"], 12);
    assert_eq!(v["missing"], serde_json::json!([]));
    assert_eq!(
        v["axes"],
        serde_json::json!(["--max-active", "--scale-cost zap_pte"])
    );
    assert_eq!(
        v["columns"],
        serde_json::json!(["vanilla (s)", "patched (s)", "ratio"])
    );
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 12);
    // The first axis outermost, the last the fastest; each point ran its own arguments.
    for (i, r) in rows.iter().enumerate() {
        let (ma, zap) = (["1", "2", "4"][i / 4], ["0.5", "1", "1.5", "2"][i % 4]);
        assert_eq!(r["index"], i);
        assert_eq!(r["point"]["--max-active"], ma);
        assert_eq!(r["point"]["--scale-cost zap_pte"], zap);
        let args: Vec<&str> = r["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        let zap_arg = format!("zap_pte={zap}");
        assert_eq!(
            args,
            [
                "bigfree",
                "16M",
                "--time",
                "virtual",
                "--seed-only",
                &format!("--max-active={ma}"),
                "--scale-cost",
                &zap_arg
            ]
        );
    }
    // The figures are the runs': a dearer zap_pte makes every free slower.
    for ma in 0..3 {
        let t: Vec<f64> = (0..4)
            .map(|z| figure(&rows[ma * 4 + z], "vanilla (s)"))
            .collect();
        assert!(t.windows(2).all(|w| w[0] < w[1]), "{t:?}");
    }
    // One complete line per point in the default output, each with its own id.
    let out = lines(&dir.join("g.jsonl"));
    assert_eq!(out.len(), 12);
    let mut ids: Vec<&str> = out.iter().map(|l| l["id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 12);
    // The text table: a title, a header, a rule and one row per point.
    let o = usermm(&["sweep", s(&grid)]);
    assert!(o.status.success());
    let table = stdout(&o);
    assert!(table.contains("(0 run now, 12 from before)"), "{table}");
    assert!(
        table
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("#   --max-active"),
        "{table}"
    );
    assert_eq!(table.lines().count(), 3 + 12, "{table}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn resume_runs_only_the_points_not_done() {
    let dir = setup("resume");
    let grid = dir.join("g.toml");
    let out = dir.join("g.jsonl");
    sweep_json(&[s(&grid)]);
    let text = std::fs::read_to_string(&out).unwrap();
    let all: Vec<&str> = text.lines().collect();
    // Keep five finished points, one of them doctored so that a rerun of it would show, and
    // half of a sixth line, as a sweep killed while writing it leaves.
    let mut doctored: Value = serde_json::from_str(all[2]).unwrap();
    doctored["record"]["bigfree"]["ratio"] = serde_json::json!(42.0);
    let doctored_id = doctored["id"].as_str().unwrap().to_string();
    let mut seeded = String::new();
    for (i, l) in all[..5].iter().enumerate() {
        seeded += &if i == 2 {
            doctored.to_string()
        } else {
            l.to_string()
        };
        seeded.push('\n');
    }
    seeded += &all[5][..all[5].len() / 2];
    std::fs::write(&out, seeded).unwrap();

    let v = sweep_json(&[s(&grid), "-j", "2"]);
    assert_eq!(
        (v["ran"].as_u64(), v["reused"].as_u64()),
        (Some(7), Some(5))
    );
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 12);
    let row = rows
        .iter()
        .find(|r| r["id"] == doctored_id.as_str())
        .unwrap();
    assert_eq!(figure(row, "ratio"), 42.0, "a finished point was run again");
    // The cut line is gone, not glued to the next: twelve complete lines, each point once.
    let out_lines = lines(&out);
    assert_eq!(out_lines.len(), 12);
    let mut ids: Vec<&str> = out_lines
        .iter()
        .map(|l| l["id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 12);

    let v = sweep_json(&[s(&grid)]);
    assert_eq!(
        (v["ran"].as_u64(), v["reused"].as_u64()),
        (Some(0), Some(12))
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_killed_sweep_resumes_without_running_a_point_twice() {
    let dir = setup("kill");
    let grid = dir.join("g.toml");
    let out = dir.join("g.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_usermm"))
        .args(["sweep", s(&grid), "-j", "1"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once a point is written (or when it has finished: the check below holds both
    // ways).
    loop {
        let written = std::fs::read_to_string(&out).is_ok_and(|t| t.contains('\n'));
        if written || child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::yield_now();
    }
    let _ = child.kill();
    let _ = child.wait();
    let before = std::fs::read_to_string(&out).unwrap().matches('\n').count();
    let v = sweep_json(&[s(&grid)]);
    assert_eq!(v["reused"].as_u64(), Some(before as u64));
    assert_eq!(v["ran"].as_u64(), Some(12 - before as u64));
    assert_eq!(lines(&out).len(), 12);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Run a job list: with GNU parallel when it is installed, else line by line in `sh`.
fn run_job_list(jobs: &Path) {
    let has_parallel = Command::new("parallel")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let status = if has_parallel {
        Command::new("parallel")
            .args([
                "--will-cite",
                "-j",
                "2",
                "--halt",
                "now,fail=1",
                "::::",
                s(jobs),
            ])
            .stdout(std::process::Stdio::null())
            .status()
    } else {
        Command::new("sh")
            .arg("-c")
            .arg(r#"while IFS= read -r job; do sh -c "$job" >/dev/null || exit 1; done < "$1""#)
            .arg("sh")
            .arg(jobs)
            .status()
    };
    assert!(status.unwrap().success(), "a job failed");
}

#[test]
fn emitted_jobs_give_the_local_table() {
    let dir = setup("emit");
    let grid = dir.join("g.toml");
    let local = sweep_json(&[s(&grid)]);

    // GNU parallel: one command line per point, each writing its own file.
    let pdir = dir.join("parallel");
    let o = usermm(&["sweep", s(&grid), "--emit", "parallel", "--out", s(&pdir)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let jobs = stdout(&o);
    assert_eq!(jobs.lines().count(), 12);
    assert!(jobs
        .lines()
        .all(|l| l.contains(" sweep ") && l.contains("--point")));
    let jobs_file = dir.join("jobs.txt");
    std::fs::write(&jobs_file, &jobs).unwrap();
    run_job_list(&jobs_file);
    // Run again: every job finds its point done.
    run_job_list(&jobs_file);
    let pfiles: Vec<PathBuf> = (0..12).map(|i| pdir.join(format!("{i}.jsonl"))).collect();
    for f in &pfiles {
        assert_eq!(lines(f).len(), 1, "{}", f.display());
    }
    let mut merge = vec!["--merge"];
    merge.extend(pfiles.iter().map(|p| s(p)));
    let merged = sweep_json(&merge);
    // A directory of job files is the same as its files.
    assert_eq!(sweep_json(&["--merge", s(&pdir)]), merged);

    // Slurm: one array task per point, the index from SLURM_ARRAY_TASK_ID.
    let sdir = dir.join("slurm");
    let o = usermm(&["sweep", s(&grid), "--emit", "slurm", "--out", s(&sdir)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let script = stdout(&o);
    assert!(script.starts_with("#!/bin/sh\n"), "{script}");
    assert!(script.contains("\n#SBATCH --array=0-11\n"), "{script}");
    let script_file = dir.join("sweep.sbatch");
    std::fs::write(&script_file, &script).unwrap();
    for i in 0..12 {
        let st = Command::new("sh")
            .arg(&script_file)
            .env("SLURM_ARRAY_TASK_ID", i.to_string())
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "task {i}");
    }
    // Without an array index the script refuses to run.
    let st = Command::new("sh")
        .arg(&script_file)
        .env_remove("SLURM_ARRAY_TASK_ID")
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!st.success());
    let sfiles: Vec<String> = (0..12)
        .map(|i| s(&sdir.join(format!("{i}.jsonl"))).to_string())
        .collect();
    let mut merge = vec!["--merge"];
    merge.extend(sfiles.iter().map(String::as_str));
    let slurm = sweep_json(&merge);

    for (name, v) in [("parallel", &merged), ("slurm", &slurm)] {
        for key in ["points", "axes", "columns", "rows", "missing"] {
            assert_eq!(v[key], local[key], "{name}: {key}");
        }
    }
    // The text tables agree below their titles too.
    let body = |o: std::process::Output| stdout(&o).lines().skip(1).collect::<Vec<_>>().join("\n");
    let mut merge_text = vec!["sweep", "--merge"];
    merge_text.extend(sfiles.iter().map(String::as_str));
    assert_eq!(
        body(usermm(&merge_text)),
        body(usermm(&["sweep", s(&grid)]))
    );
    // A merge of part of them says which points are missing.
    let o = usermm(&["--json", "sweep", "--merge", &sfiles[0], &sfiles[5]]);
    assert!(o.status.success());
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 2);
    assert_eq!(v["missing"].as_array().unwrap().len(), 10);
    assert!(text(&o.stderr).contains("10 of 12 points missing"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn grid_mistakes_are_one_line_usage_errors() {
    let dir = setup("errors");
    let bad = dir.join("bad.toml");
    let bad_out = dir.join("bad.jsonl");
    let cases: &[(&str, &str)] = &[
        ("command = [\"bigfree\", \"16M\"\n[axes]", "line 2"),
        (
            "command = [\"bigfree\", \"16M\"]\ncolums = 1",
            "unknown field `colums`",
        ),
        ("command = []\n[axes]\n\"--repeat\" = [1]", "command: empty"),
        ("command = [\"bigfree\", \"16M\"]", "axes: no axis"),
        (
            "command = [\"bigfree\", \"16M\"]\n[axes]\n\"--repeat\" = []",
            "no values",
        ),
        (
            "command = [\"bigfree\", \"16M\"]\n[axes]\n\"--bogus\" = [1]",
            "'--bogus'",
        ),
        (
            "command = [\"bigfree\", \"16M\"]\n[axes]\n\"free.bogus\" = [1]",
            "free.bogus",
        ),
        (
            "command = [\"bigfree\", \"16M\"]\n[axes]\n\"--repeat\" = [1, 1]",
            "twice",
        ),
        (
            "command = [\"bigfree\", \"16M\"]\n[axes]\n\"--repeat\" = [{a = 1}]",
            "values are",
        ),
        (
            "command = [\"bigfree\", \"{size}\"]\n[axes]\n\"{sz}\" = [\"1M\"]",
            "placeholder",
        ),
        (
            "command = [\"sweep\", \"x.toml\"]\n[axes]\n\"-j\" = [1]",
            "cannot run sweeps",
        ),
        (
            "command = [\"bigfree\", \"16M\", \"--time\", \"virtual\"]\n[axes]\n\
             \"--scale-cost\" = [\"no_such_cost=2\"]",
            "point 0 (--scale-cost no_such_cost=2)",
        ),
        (
            "command = [\"bigfree\", \"16M\"]\n[axes]\n\"--repeat\" = [1]\n[columns]\nx = \"a..b\"",
            "dotted path",
        ),
    ];
    for (grid, mentions) in cases {
        std::fs::write(&bad, grid).unwrap();
        let args = ["sweep", s(&bad), "--out", s(&bad_out)];
        assert_one_line(&usermm(&args), &args, mentions);
    }
    let missing = dir.join("missing.toml");
    let args = ["sweep", s(&missing)];
    assert_one_line(&usermm(&args), &args, "cannot read the grid");
    let args = ["sweep", "--merge", s(&missing)];
    assert_one_line(&usermm(&args), &args, "no such file");
    let grid = dir.join("g.toml");
    let args = ["sweep", s(&grid), "--point", "12"];
    assert_one_line(&usermm(&args), &args, "the grid has 12 points");
    let args = ["sweep"];
    assert_one_line(&usermm(&args), &args, "<FILE>");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The grid `text` as GNU parallel jobs (parsed and every point vetted; nothing runs).
fn job_count(dir: &Path, text: &str) -> usize {
    let grid = dir.join("doc.toml");
    std::fs::write(&grid, text).unwrap();
    let o = usermm(&["sweep", s(&grid), "--emit", "parallel"]);
    assert!(o.status.success(), "{text}\n{}", common::text(&o.stderr));
    stdout(&o).lines().count()
}

#[test]
fn the_documented_grids_are_valid() {
    let dir = setup("docs");
    // docs/sweep.md's first TOML block.
    let md = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/sweep.md"))
        .unwrap();
    let block = md
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("docs/sweep.md has a TOML grid");
    assert_eq!(job_count(&dir, block), 12);
    // The example in `usermm sweep --help`.
    let help = stdout(&usermm(&["sweep", "--help"]));
    let example: String = help
        .split("Grid file (TOML")
        .nth(1)
        .expect("the help shows the grid format")
        .lines()
        .skip(2)
        .take_while(|l| !l.is_empty())
        .map(|l| format!("{}\n", l.trim_start()))
        .collect();
    assert!(example.starts_with("command = "), "{example}");
    assert_eq!(job_count(&dir, &example), 2 * 3 * 3 * 2 * 2);
    let _ = std::fs::remove_dir_all(&dir);
}
