//! The files usermm writes: a command never deletes, truncates or overwrites what it did not
//! write, and never writes through a link (`usermm_host::files`, `reproduce`'s report
//! directory). Each test works in a directory of its own with links, FIFOs and a user's file
//! planted where usermm writes, and checks that the user's file survives byte for byte.
//! Every run is virtual time, or measures nothing (`calibrate --from`).

mod common;

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{assert_one_line, mkfifo, text, usermm, usermm_env, usermm_within};

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("usermm-files-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().expect("temp paths are UTF-8")
}

const THESIS: &[u8] = b"\\documentclass{article}\n% months of work\n";

/// A user's file at `p`, to be checked with [`intact`].
fn plant(p: &Path) {
    std::fs::write(p, THESIS).unwrap();
}

#[track_caller]
fn intact(p: &Path) {
    assert_eq!(std::fs::read(p).unwrap(), THESIS, "{} changed", p.display());
}

/// Every path under `d` (relative, sorted), links not followed.
fn tree(d: &Path) -> Vec<String> {
    fn walk(d: &Path, base: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            out.push(p.strip_prefix(base).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                walk(&p, base, out);
            }
        }
    }
    let mut v = Vec::new();
    walk(d, d, &mut v);
    v.sort();
    v
}

/// No temporary or staging file anywhere under `d`.
#[track_caller]
fn no_leftovers(d: &Path) {
    for p in tree(d) {
        assert!(
            !p.contains(".tmp-") && !p.contains(".usermm-staging"),
            "{p} left in {}",
            d.display()
        );
    }
}

/// `usermm reproduce --time virtual --only ONLY --out OUT EXTRA...`.
fn reproduce(only: &str, out: &Path, extra: &[&str]) -> Output {
    let mut a = vec![
        "reproduce",
        "--time",
        "virtual",
        "--only",
        only,
        "--out",
        s(out),
    ];
    a.extend_from_slice(extra);
    usermm_within(&a, None, 600)
}

#[track_caller]
fn ok(o: &Output) {
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// Item 1: `reproduce --out DIR` renamed DIR aside and removed it whole, with everything the
/// user had in it. Now a directory is written only when new, empty, or marked as a report,
/// and only the files its marker lists are replaced.
#[test]
fn reproduce_writes_only_into_a_new_empty_or_report_directory() {
    let d = scratch("item1");
    // The issue's command: a directory with the user's work in it.
    let work = d.join("work");
    std::fs::create_dir_all(work.join("sub")).unwrap();
    plant(&work.join("thesis.tex"));
    let o = reproduce("percpu", &work, &[]);
    let args = ["reproduce", s(&work)];
    assert_one_line(&o, &args, "is not empty and is not a usermm report");
    intact(&work.join("thesis.tex"));
    assert_eq!(tree(&work), ["sub", "thesis.tex"]);
    // $HOME itself, even empty, and `/`.
    let home = d.join("home");
    std::fs::create_dir_all(&home).unwrap();
    for (out, env) in [(s(&home), s(&home)), ("/", s(&home))] {
        let args = [
            "reproduce",
            "--time",
            "virtual",
            "--only",
            "percpu",
            "--out",
            out,
        ];
        let o = usermm_env(&args, &[("HOME", env)]);
        assert_one_line(&o, &args, "is your home directory or /");
    }
    assert!(tree(&home).is_empty());

    // An empty directory becomes a report; the user's files added later survive a new run,
    // even inside the report's own subdirectory; the earlier run's files go.
    let rep = d.join("rep");
    std::fs::create_dir_all(&rep).unwrap();
    ok(&reproduce("munmap", &rep, &[]));
    let marker = std::fs::read_to_string(rep.join(".usermm-report")).unwrap();
    assert!(
        marker.contains("report modelled/munmap_hold.svg\n"),
        "{marker}"
    );
    plant(&rep.join("notes.md"));
    plant(&rep.join("modelled/mine.svg"));
    ok(&reproduce("percpu", &rep, &[]));
    intact(&rep.join("notes.md"));
    intact(&rep.join("modelled/mine.svg"));
    assert!(!rep.join("modelled/munmap_hold.svg").exists());
    assert!(rep.join("modelled/percpu.svg").exists());
    no_leftovers(&rep);

    // A user's file where the new report goes, not in the marker: the run fails before
    // anything moves, and says where the new report is.
    std::fs::remove_file(rep.join("modelled/mine.svg")).unwrap();
    std::fs::remove_file(rep.join("report.md")).unwrap();
    plant(&rep.join("report.md"));
    let m = std::fs::read_to_string(rep.join(".usermm-report")).unwrap();
    std::fs::write(
        rep.join(".usermm-report"),
        m.replace("report report.md\n", ""),
    )
    .unwrap();
    let o = reproduce("percpu", &rep, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("report.md is in the way"),
        "{}",
        text(&o.stderr)
    );
    intact(&rep.join("report.md"));
    assert!(rep.join(".usermm-staging/report.md").exists());

    // A marker that names a path out of the directory is not a marker.
    let outside = d.join("outside.tex");
    plant(&outside);
    std::fs::write(
        rep.join(".usermm-report"),
        "usermm report directory\nreport ../outside.tex\n",
    )
    .unwrap();
    let o = reproduce("percpu", &rep, &[]);
    assert_one_line(&o, &args, "is not a usermm marker");
    intact(&outside);
    let _ = std::fs::remove_dir_all(&d);
}

/// Item 2: the lock beside `--out` was `File::create`d through a planted link (truncating its
/// target) and unlinked at the end while another run could hold it. The lock is now in the
/// report directory, opened `O_NOFOLLOW` without truncation, and never unlinked.
#[test]
fn the_report_lock_follows_no_link_and_excludes_a_second_run() {
    let d = scratch("item2");
    let victim = d.join("v");
    plant(&victim);
    // The issue's plant, beside --out: untouched now.
    std::os::unix::fs::symlink(&victim, d.join(".r.lock")).unwrap();
    let r = d.join("r");
    ok(&reproduce("percpu", &r, &[]));
    intact(&victim);
    assert!(d
        .join(".r.lock")
        .symlink_metadata()
        .unwrap()
        .file_type()
        .is_symlink());
    // Planted at the lock's own name: refused, naming the flag and O_NOFOLLOW.
    let r2 = d.join("r2");
    std::fs::create_dir_all(&r2).unwrap();
    std::os::unix::fs::symlink(&victim, r2.join(".usermm-report.lock")).unwrap();
    let o = reproduce("percpu", &r2, &[]);
    assert_one_line(&o, &["reproduce", s(&r2)], "O_NOFOLLOW");
    assert!(text(&o.stderr).contains(&format!("--out {}", r2.display())));
    intact(&victim);
    // A FIFO there cannot block the run.
    let r3 = d.join("r3");
    std::fs::create_dir_all(&r3).unwrap();
    mkfifo(&r3.join(".usermm-report.lock"));
    let o = reproduce("percpu", &r3, &[]);
    assert_one_line(&o, &["reproduce", s(&r3)], "a FIFO");
    // Another run holds the lock (here: this test): refused, nothing written; the lock file
    // the first run left is the one every later run locks.
    let lock = std::fs::File::open(r.join(".usermm-report.lock")).unwrap();
    let before = std::fs::read(r.join("results.json")).unwrap();
    assert!(usermm_host::try_lock_exclusive(&lock).unwrap());
    let o = reproduce("percpu", &r, &[]);
    assert_one_line(
        &o,
        &["reproduce", s(&r)],
        "another usermm run holds it locked",
    );
    assert_eq!(std::fs::read(r.join("results.json")).unwrap(), before);
    drop(lock);
    ok(&reproduce("percpu", &r, &[]));
    assert!(r.join(".usermm-report.lock").exists());
    let _ = std::fs::remove_dir_all(&d);
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../usermm-workloads/tests/fixtures/host-calibration-2026-11-25.json")
}

/// Item 3: `calibrate --out` wrote through a link and rewrote a file in place. It now
/// refuses a link, a device, a FIFO and a file it did not write, and replaces a profile it
/// wrote by a new file (an old hard link keeps the old bytes: nothing was truncated).
#[test]
fn calibrate_out_is_replaced_whole_and_never_through_a_link() {
    let d = scratch("item3");
    let fx = fixture();
    let victim = d.join("v");
    plant(&victim);
    let link = d.join("prof.toml");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let fifo = d.join("fifo.toml");
    mkfifo(&fifo);
    for out in [link.as_path(), Path::new("/dev/null"), fifo.as_path()] {
        let args = ["calibrate", "--from", s(&fx), "--out", s(out)];
        let o = usermm_within(&args, None, 60);
        assert_one_line(&o, &args, &format!("--out {}", out.display()));
    }
    intact(&victim);
    assert!(fifo.metadata().unwrap().file_type().is_fifo());
    // A user's file is not replaced.
    let real = d.join("this-host.toml");
    plant(&real);
    let args = ["calibrate", "--from", s(&fx), "--out", s(&real)];
    assert_one_line(
        &usermm(&args),
        &args,
        "not a profile usermm calibrate wrote",
    );
    intact(&real);
    // A profile it wrote is replaced by a new file: the old inode keeps its bytes (a hard
    // link to it shows them), nothing was truncated in place.
    std::fs::remove_file(&real).unwrap();
    ok(&usermm(&args));
    let mut old = std::fs::read(&real).unwrap();
    old.extend_from_slice(b"# edited\n");
    std::fs::write(&real, &old).unwrap();
    std::fs::hard_link(&real, d.join("backup")).unwrap();
    ok(&usermm(&args));
    assert_eq!(std::fs::read(d.join("backup")).unwrap(), old);
    let now = std::fs::read_to_string(&real).unwrap();
    assert!(now.starts_with("# Cost profile: this host") && !now.contains("# edited"));
    assert_ne!(
        real.metadata().unwrap().ino(),
        d.join("backup").metadata().unwrap().ino()
    );
    no_leftovers(&d);
    let _ = std::fs::remove_dir_all(&d);
}

/// Item 4: `--out` a link to a directory was replaced by a directory, the report not where
/// the link pointed. Now the report goes through the link and the link stays; a link to a
/// file or to nothing is refused.
#[test]
fn reproduce_out_through_a_link_to_a_directory() {
    let d = scratch("item4");
    let real = d.join("real");
    std::fs::create_dir_all(&real).unwrap();
    let link = d.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    ok(&reproduce("percpu", &link, &[]));
    assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
    assert!(real.join("report.md").exists());
    assert!(real.join("modelled/percpu.svg").exists());
    let victim = d.join("v");
    plant(&victim);
    let to_file = d.join("to-file");
    std::os::unix::fs::symlink(&victim, &to_file).unwrap();
    let o = reproduce("percpu", &to_file, &[]);
    assert_one_line(&o, &["reproduce", s(&to_file)], "not to a directory");
    intact(&victim);
    let dangling = d.join("dangling");
    std::os::unix::fs::symlink(d.join("nowhere"), &dangling).unwrap();
    let o = reproduce("percpu", &dangling, &[]);
    assert_one_line(
        &o,
        &["reproduce", s(&dangling)],
        "a symbolic link to nothing",
    );
    assert!(!d.join("nowhere").exists());
    let _ = std::fs::remove_dir_all(&d);
}

/// An output under a regular file (`thesis.tex/out`) is a usage error (exit 2, one line) for
/// every command that writes, reproduce's report and the directory of emitted jobs included
/// (these exited 1, or emitted jobs that could only fail); an error of the system is said
/// once, not once more as its cause.
#[test]
fn outputs_under_a_regular_file_are_usage_errors() {
    let (d, grid, victim) = grid_and_thesis("under-file");
    let under = victim.join("out");
    let under_toml = victim.join("p.toml");
    let fixture = fixture();
    let cases: [Vec<&str>; 4] = [
        vec![
            "reproduce",
            "--time",
            "virtual",
            "--only",
            "percpu",
            "--out",
            s(&under),
        ],
        vec!["sweep", s(&grid), "--emit", "parallel", "--out", s(&under)],
        vec!["sweep", s(&grid), "--out", s(&under)],
        vec!["calibrate", "--from", s(&fixture), "--out", s(&under_toml)],
    ];
    for args in cases {
        let o = usermm_within(&args, None, 60);
        assert_one_line(&o, &args, "a directory on the path is not a directory");
    }
    intact(&victim);
    // A directory the system will not make: exit 1, its error said once.
    let args = [
        "reproduce",
        "--time",
        "virtual",
        "--only",
        "percpu",
        "--out",
        "/proc/usermm/x",
    ];
    let o = usermm_within(&args, None, 60);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("(os error").count(), 1, "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

/// A test's directory with [`TINY_GRID`] as `g.toml` and a user's `thesis.tex` planted.
fn grid_and_thesis(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let d = scratch(name);
    let grid = d.join("g.toml");
    std::fs::write(&grid, TINY_GRID).unwrap();
    let victim = d.join("thesis.tex");
    plant(&victim);
    (d, grid, victim)
}

/// A one-point grid whose point runs in milliseconds.
const TINY_GRID: &str =
    "command = [\"meminfo\", \"--mem\", \"{m}\"]\n[axes]\n\"{m}\" = [\"64M\"]\n";

/// Item 9: `sweep GRID --out /dev/zero` read "earlier output" for ever and a FIFO blocked;
/// the grid file and `--merge` likewise. Each is refused unread, in one line.
#[test]
fn sweep_refuses_devices_fifos_and_links_unread() {
    let (d, grid, victim) = grid_and_thesis("item9");
    let fifo = d.join("fifo");
    mkfifo(&fifo);
    let link = d.join("link.jsonl");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let cases: [(Vec<&str>, &str); 8] = [
        (
            vec!["sweep", s(&grid), "--out", "/dev/zero"],
            "a character device",
        ),
        (
            vec!["sweep", s(&grid), "--out", "/dev/null"],
            "a character device",
        ),
        (vec!["sweep", s(&grid), "--out", s(&fifo)], "a FIFO"),
        (vec!["sweep", s(&grid), "--out", s(&link)], "O_NOFOLLOW"),
        (
            vec!["sweep", s(&grid), "--out", s(&victim)],
            "not a usermm sweep output",
        ),
        (vec!["sweep", s(&fifo)], "a FIFO"),
        (vec!["sweep", "--merge", s(&fifo)], "a FIFO"),
        (vec!["sweep", "--merge", "/dev/zero"], "a character device"),
    ];
    for (args, mentions) in cases {
        let o = usermm_within(&args, None, 60);
        assert_one_line(&o, &args, mentions);
    }
    intact(&victim);
    assert!(fifo.metadata().unwrap().file_type().is_fifo());
    let args = [
        "sweep",
        s(&grid),
        "--emit",
        "parallel",
        "--out",
        "/dev/null",
    ];
    assert_one_line(&usermm(&args), &args, "not a directory");
    let _ = std::fs::remove_dir_all(&d);
}

/// Item 17: `--sensitivity`'s points went into the PID-named staging directory, so no run
/// could resume them, and a Ctrl-C'd run left that directory and the lock behind. The points
/// now live in DIR/sensitivity/, and SIGINT removes what the run created before it dies of
/// the signal.
#[test]
fn sensitivity_resumes_and_ctrl_c_leaves_nothing_behind() {
    // A shell starts a background job with SIGINT ignored, and an ignored signal stays ignored
    // across exec: usermm then keeps it so (as a background job should) and the Ctrl-C below
    // would do nothing. Catching SIGINT here instead (a handler is reset to the default by
    // exec) gives the child the disposition a terminal's foreground job has.
    signal_hook::flag::register(
        signal_hook::consts::SIGINT,
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
    )
    .unwrap();
    let d = scratch("item17");
    let out = d.join("r");
    let mut child = Command::new(env!("CARGO_BIN_EXE_usermm"))
        .args([
            "reproduce",
            "--time",
            "virtual",
            "--only",
            "munmap",
            "--sensitivity",
        ])
        .args(["--out", s(&out)])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    // Ctrl-C (the whole process group, as a terminal sends it) once the grid is written.
    let grid = out.join("sensitivity/003.toml");
    let t0 = std::time::Instant::now();
    while !grid.exists() && child.try_wait().unwrap().is_none() {
        assert!(t0.elapsed().as_secs() < 600, "no grid written");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process_group(pid, rustix::process::Signal::INT).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(2),
        "{status:?}: not ended by its SIGINT"
    );
    // Its points (a point started after the Ctrl-C too) end with it, cleaning up after
    // themselves: wait until none is left.
    let t0 = std::time::Instant::now();
    while rustix::process::test_kill_process_group(pid).is_ok() {
        assert!(t0.elapsed().as_secs() < 60, "a point outlived the sweep");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    no_leftovers(&d);
    assert!(!out.join("report.md").exists());

    // Every point done already (records made up here, each under its point's id): a run
    // again reuses them all and runs none (its output keeps its bytes).
    let g = usermm_cli::sweep::Grid::load(&grid).unwrap();
    let points = g.points(&|_| Ok(())).unwrap();
    let mut lines = String::new();
    for p in &points {
        let record = serde_json::json!({
            "munmap": {"modelled": {"exclusive_hold_us": {"vanilla": 1000.0 + p.index as f64}}}
        });
        let line = usermm_cli::sweep::PointLine::new(&g.id(), g.len(), p, Vec::new(), record);
        lines += &serde_json::to_string(&line).unwrap();
        lines.push('\n');
    }
    let jsonl = out.join("sensitivity/003.jsonl");
    std::fs::write(&jsonl, &lines).unwrap();
    let o = reproduce("munmap", &out, &["--sensitivity", "--json"]);
    ok(&o);
    assert_eq!(std::fs::read_to_string(&jsonl).unwrap(), lines);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let headline = &v["sensitivity"][0];
    assert_eq!(headline["base"], 1000.0, "{headline}");
    let marker = std::fs::read_to_string(out.join(".usermm-report")).unwrap();
    assert!(marker.contains("kept sensitivity/003.jsonl\n"), "{marker}");
    no_leftovers(&d);
    let _ = std::fs::remove_dir_all(&d);
}

/// Item 18: two sweeps into one output both ran every point, and `--merge` took a forged
/// line for an id without noticing two records. The output is locked; `--merge` refuses a
/// line whose id is not its arguments' hash, and two different records of one id.
#[test]
fn one_sweep_per_output_and_merge_refuses_forged_lines() {
    let d = scratch("item18");
    let grid = d.join("g.toml");
    std::fs::write(&grid, TINY_GRID).unwrap();
    let out = d.join("g.jsonl");
    ok(&usermm(&["sweep", s(&grid)]));
    let before = std::fs::read(&out).unwrap();
    let held = std::fs::OpenOptions::new().read(true).open(&out).unwrap();
    assert!(usermm_host::try_lock_exclusive(&held).unwrap());
    let args = ["sweep", s(&grid)];
    assert_one_line(&usermm(&args), &args, "another usermm run holds it locked");
    drop(held);
    assert_eq!(std::fs::read(&out).unwrap(), before);

    let line: serde_json::Value =
        serde_json::from_slice(before.split(|&b| b == b'\n').next().unwrap()).unwrap();
    let id = line["id"].as_str().unwrap().to_string();
    let write = |name: &str, v: &serde_json::Value| {
        let p = d.join(name);
        std::fs::write(&p, format!("{v}\n")).unwrap();
        p
    };
    let mut other = line.clone();
    other["record"]["meminfo"] = serde_json::json!("forged");
    let forged = write("forged.jsonl", &other);
    let args = ["sweep", "--merge", s(&out), s(&forged)];
    let o = usermm(&args);
    assert_one_line(&o, &args, &id);
    assert!(
        text(&o.stderr).contains("forged.jsonl"),
        "{}",
        text(&o.stderr)
    );
    let mut moved = line.clone();
    moved["args"] = serde_json::json!(["meminfo", "--mem", "128M"]);
    let moved = write("moved.jsonl", &moved);
    let args = ["sweep", "--merge", s(&moved)];
    assert_one_line(&usermm(&args), &args, "does not match its arguments");
    // The same line twice is one point.
    let args = ["sweep", "--merge", s(&out), s(&out)];
    ok(&usermm(&args));
    let _ = std::fs::remove_dir_all(&d);
}

/// Item 21: `usemem --host -n 2 -d -p FILE` wrote the pid and its newline in two `write`s,
/// so two workers interleaved (`2420124202\n\n`, 8 runs in 40). vm-scalability's usemem
/// writes each worker's line once, through stdio (`fprintf` then `fclose`): one `write`.
#[test]
fn usemem_pid_file_lines_are_whole() {
    let d = scratch("item21");
    let pf = d.join("pf");
    for run in 0..40 {
        let _ = std::fs::remove_file(&pf);
        let o = usermm(&["usemem", "--host", "-n", "2", "-d", "-p", s(&pf), "1M"]);
        ok(&o);
        let t = std::fs::read_to_string(&pf).unwrap();
        let pids: Vec<&str> = t.lines().collect();
        assert_eq!(pids.len(), 2, "run {run}: {t:?}");
        assert!(t.ends_with('\n'), "run {run}: {t:?}");
        for p in &pids {
            assert!(p.parse::<u32>().is_ok(), "run {run}: {t:?}");
        }
        assert_ne!(pids[0], pids[1], "run {run}: {t:?}");
    }
    // Never through a link, never into a FIFO: refused before anything runs.
    let victim = d.join("v");
    plant(&victim);
    let link = d.join("link");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let fifo = d.join("fifo");
    mkfifo(&fifo);
    for (p, mentions) in [(&link, "O_NOFOLLOW"), (&fifo, "a FIFO")] {
        let args = ["usemem", "--host", "-d", "-p", s(p), "64K"];
        assert_one_line(&usermm_within(&args, None, 60), &args, mentions);
    }
    intact(&victim);
    let _ = std::fs::remove_dir_all(&d);
}
