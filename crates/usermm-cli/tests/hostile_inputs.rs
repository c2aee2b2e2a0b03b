//! Hostile inputs to the CLI: each input here once crashed, hung, or said something untrue,
//! and now runs or is refused with one `usermm: error:` line and exit 2. Small machines,
//! sparse backing, no wall-clock timings.

mod common;

use std::process::Command;

use common::{assert_one_line, assert_usage_error, text, usermm, usermm_env};

/// An unaligned first-chunk size indexed past the allocation map at boot.
#[test]
fn unaligned_percpu_sizes_are_refused() {
    for key in ["pcpu.static_size", "pcpu.reserved_size"] {
        for v in ["1", "2", "4095", "4097"] {
            let set = format!("{key}={v}");
            assert_usage_error(
                &["meminfo", "--mem", "64M", "--set", &set],
                "PCPU_MIN_ALLOC_SIZE",
            );
        }
    }
    // The busybox link takes them from USERMM_SET.
    let dir = std::env::temp_dir().join(format!("usermm-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("usemem");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_usermm"), &link).unwrap();
    let o = Command::new(&link)
        .args(["1M"])
        .env("USERMM_SET", "pcpu.static_size=4095")
        .env("USERMM_BACKING", "sparse")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_one_line(&o, &["usemem (link)"], "PCPU_MIN_ALLOC_SIZE");
}

/// `pcpu.empty_pop_pages_high` had no upper bound (a run took 330 s).
#[test]
fn empty_pop_pages_high_is_bounded() {
    assert_usage_error(
        &["meminfo", "--set", "pcpu.empty_pop_pages_high=100000"],
        "pcpu.empty_pop_pages_high must be at most",
    );
}

/// `--mem` given is kept, not silently raised to what the script needs.
#[test]
fn percpu_test_keeps_the_mem_it_was_given() {
    assert_usage_error(
        &["percpu-test", "--mem", "64M", "--cpus", "64"],
        "--mem 64M",
    );
}

/// Options that wait for SIGUSR1 (or a kill) deadlocked a virtual run.
#[test]
fn usemem_signal_waits_are_refused_in_virtual_time() {
    for opt in [
        "-W",
        "--write-signal-write",
        "--write-signal-madv-thp",
        "--signal-fork",
        "--signal-loop",
    ] {
        assert_usage_error(
            &[
                "usemem",
                opt,
                "16M",
                "--time",
                "virtual",
                "--backing",
                "sparse",
            ],
            "virtual",
        );
    }
}

/// 0/0 was printed as a ratio of 0.000.
#[test]
fn usemem_ab_of_nothing_has_no_ratio() {
    let o = usermm(&["usemem", "0", "--ab", "--backing", "sparse"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.contains("throughput ratio patched/vanilla: none"),
        "{out}"
    );
}

/// The usemem lines of a virtual run, without the progress dots.
fn virtual_usemem(args: &[&str]) -> String {
    let mut a = vec!["usemem", "-q"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["--time", "virtual", "--backing", "sparse"]);
    let o = usermm(&a);
    assert!(o.status.success(), "{a:?}: {}", text(&o.stderr));
    text(&o.stdout)
}

/// The µs of the first line that starts with `intro` and has `bytes / N usecs`.
fn usecs(out: &str, intro: &str) -> u64 {
    out.lines()
        .filter(|l| l.starts_with(intro) && l.contains(" usecs = "))
        .find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let i = w.iter().position(|x| *x == "usecs")?;
            w[i - 1].parse().ok()
        })
        .unwrap_or_else(|| panic!("no '{intro}… usecs' line in {out}"))
}

/// Items 3, 4, 5: user accesses cost their line traffic in virtual time, so repeats take
/// longer, a read-again takes time, a delay ends and a run time is reached.
#[test]
fn usemem_user_work_takes_virtual_time() {
    let one = usecs(&virtual_usemem(&["1M"]), "");
    let half = usecs(&virtual_usemem(&["1M", "-r", "51"]), "");
    let many = usecs(&virtual_usemem(&["1M", "-r", "100"]), "");
    // The first walk also faults its pages in (dearer since the era's fault factor, 1.515,
    // applies: 10 times as long was 9.6 then); the 99 more cost their lines each.
    assert!(many > 5 * one.max(1), "-r 100: {many} µs vs {one} µs once");
    // Every walk after the first costs the same virtual time (its lines, none faulted): the
    // 99 more cost 99/50 of the 50 more, within 5 % (47 µs a walk, 2026-11-29).
    let (d50, d99) = (half.saturating_sub(one), many.saturating_sub(one));
    assert!(d50 > 0, "-r 51: {half} µs vs {one} µs once");
    let (a, b) = (d99 * 50, d50 * 99);
    assert!(
        a.abs_diff(b) * 20 <= b,
        "99 more walks {d99} µs vs 50 more {d50} µs"
    );
    let again = virtual_usemem(&["16M", "-Z"]);
    assert!(usecs(&again, "read again") > 0, "{again}");
    // -e: the delay ends (it polls a clock the accesses move).
    virtual_usemem(&["8K", "-e", "1"]);
    // -T: the run time is reached long before a million walks.
    let timed = virtual_usemem(&["64K", "-T", "1", "-r", "1000000"]);
    assert!(usecs(&timed, "") >= 1_000_000, "{timed}");
    // A delay of a second or more never ends (usemem compares nanoseconds): refused.
    assert_usage_error(&["usemem", "8K", "-e", "2000m", "--time", "virtual"], "-e");
}

/// On the full backing: the words written are read back by `-r`'s verification.
#[test]
fn usemem_repeats_verify_with_word_stores() {
    let o = usermm(&["usemem", "1M", "-r", "3", "-j", "24", "--mem", "64M"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = usermm(&[
        "usemem", "1M", "-r", "3", "--mem", "64M", "--time", "virtual",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// `--scale-cost` wrote `$TMPDIR/usermm-profile-<pid>-…` (through a planted symlink,
/// never removed, its path in `--json`); a tiny or huge factor failed on the file name. Now
/// the machine scales the profile in memory: nothing written, the same bytes run after run.
#[test]
fn scale_cost_writes_nothing_and_repeats_exactly() {
    let tmp = std::env::temp_dir().join(format!("usermm-hostile-scale-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let tmpdir = tmp.to_str().unwrap();
    let args = [
        "bigfree",
        "64M",
        "--time",
        "virtual",
        "--scale-cost",
        "zap_pte=1.5",
        "--scale-cost",
        "user_line=2",
        "--json",
    ];
    let a = usermm_env(&args, &[("TMPDIR", tmpdir)]);
    let b = usermm_env(&args, &[("TMPDIR", tmpdir)]);
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(a.status.success(), "{}", text(&a.stderr));
    assert_eq!(a.stdout, b.stdout, "two identical runs differ");
    assert!(left.is_empty(), "files left in TMPDIR: {left:?}");
    assert!(!text(&a.stdout).contains("usermm-profile-"));
    // Extremes: a tiny factor runs; a huge one is refused by the figure's bound.
    let o = usermm(&[
        "bigfree",
        "64M",
        "--time",
        "virtual",
        "--scale-cost",
        "zap_pte=1e-300",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_usage_error(
        &[
            "bigfree",
            "64M",
            "--time",
            "virtual",
            "--scale-cost",
            "zap_pte=1e300",
        ],
        "at most",
    );
}

/// Virtual time emulates the pid (it seeded -R and was printed), so two runs with
/// `-R` and `--show-addr` are the same bytes; the bench has no virtual figures to give.
#[test]
fn virtual_usemem_is_the_same_run_after_run() {
    let args = [
        "usemem",
        "-R",
        "--show-addr",
        "-q",
        "256K",
        "--time",
        "virtual",
        "--backing",
        "sparse",
    ];
    let (a, b) = (usermm(&args), usermm(&args));
    assert!(a.status.success(), "{}", text(&a.stderr));
    assert_eq!(a.stdout, b.stdout);
    assert!(!text(&a.stdout).contains(&std::process::id().to_string()));
    assert_usage_error(&["bench", "--time", "virtual"], "wall time only");
}

/// A profile with --time wall or --host was ignored; escape sequences in an
/// argument or a profile's name reached the terminal.
#[test]
fn profiles_that_would_be_ignored_and_control_characters_are_refused() {
    assert_usage_error(
        &["meminfo", "--time", "wall", "--profile", "haswell-ep-2s"],
        "only with --time virtual",
    );
    assert_usage_error(
        &["usemem", "1M", "--host", "--profile", "haswell-ep-2s"],
        "--host",
    );
    let o = usermm(&["meminfo", "--profile", "\u{1b}[31mred"]);
    assert_one_line(&o, &["meminfo --profile ESC"], "\\u{1b}[31mred");
    assert!(!o.stderr.contains(&0x1b));
    // A profile file whose name holds an escape: refused by the loader, shown escaped.
    let dir = std::env::temp_dir().join(format!("usermm-hostile-esc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let builtin = dir.join("p.toml");
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../usermm/src/vtime/profiles/haswell-ep-2s.toml"
    ))
    .unwrap();
    let evil = src.replacen("name = \"haswell-ep-2s\"", "name = \"\\u001b[2Jx\"", 1);
    assert_ne!(evil, src, "the profile's name line moved");
    std::fs::write(&builtin, evil).unwrap();
    let o = usermm(&["meminfo", "--profile", builtin.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_one_line(&o, &["meminfo --profile evil.toml"], "control characters");
    assert!(!o.stderr.contains(&0x1b));
}

/// Errors about a default blamed a flag nobody gave, or did not name the fix.
#[test]
fn errors_about_defaults_name_what_set_them() {
    // The default machine is sized from the profile: what it could not fit now runs.
    let o = usermm(&["bigfree", "64M", "--profile", "e5-2680-32c", "--seed-only"]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    assert_usage_error(
        &["meminfo", "--cpus", "4096"],
        "at least twice that (2048 MiB)",
    );
    assert_usage_error(
        &["munmap-test", "64M", "--set", "mem=32M"],
        "mem 32M (set by --set or --preset)",
    );
    // MAX_NUMNODES (NODES_SHIFT 10); more nodes than CPUs is a fake-NUMA machine.
    assert_usage_error(&["usemem", "1M", "--nodes", "1025"], "1..=1024");
    assert_usage_error(
        &[
            "munmap-test",
            "64M",
            "--faulters",
            "4095",
            "--time",
            "virtual",
        ],
        "--faulters 4095: the default machine gets 4096 CPUs",
    );
}

/// `reproduce` wrote into --out in place (old plots stayed beside a new report, an
/// interrupted run mixed the two, two runs interleaved) and a file as --out was an errno
/// without its path. Now it stages the report in --out and puts it in place when complete,
/// under a lock; an earlier report's files that this run does not write go (the files a user
/// added stay: `tests/output_files.rs`).
#[test]
fn reproduce_replaces_out_whole_under_a_lock() {
    let dir = std::env::temp_dir().join(format!("usermm-hostile-rep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("afile");
    std::fs::write(&file, "").unwrap();
    let f = file.to_str().unwrap();
    assert_usage_error(
        &["reproduce", "--only", "percpu", "--out", f],
        "afile: exists and is a regular file, not a directory",
    );
    let out = dir.join("rep");
    std::fs::create_dir_all(&out).unwrap();
    let o_ = out.to_str().unwrap();
    // Another run holds the lock: refused, nothing touched.
    let lock = std::fs::File::create(out.join(".usermm-report.lock")).unwrap();
    assert!(usermm_host::try_lock_exclusive(&lock).unwrap());
    assert_usage_error(
        &["reproduce", "--only", "percpu", "--out", o_],
        "another usermm run holds it locked",
    );
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
    drop(lock);
    let virt = |extra: &[&str]| {
        let mut a = vec!["reproduce", "--time", "virtual", "--out", o_];
        a.extend_from_slice(extra);
        let o = usermm(&a);
        assert!(o.status.success(), "{}", text(&o.stderr));
        o
    };
    virt(&["--only", "munmap"]);
    assert!(out.join("modelled/munmap_hold.svg").exists());
    // A virtual run's record is the same bytes run after run (no host run time in it; the
    // report file itself carries the date it was generated).
    let args = ["--only", "percpu", "--json"];
    let (a, b) = (virt(&args), virt(&args));
    assert_eq!(a.stdout, b.stdout);
    assert!(
        !out.join("modelled/munmap_hold.svg").exists(),
        "an earlier run's file survived"
    );
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(left, ["afile", "rep"], "files left beside --out");
}

/// A full-backing size larger than the host's available memory was OOM-killed
/// (bench --size 1T at 24 GB); it is refused before anything is touched.
#[test]
fn full_backing_beyond_the_hosts_memory_is_refused() {
    let avail_kb: u64 = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0);
    if avail_kb == 0 || avail_kb >= 1 << 30 {
        return; // no MemAvailable, or a host with a TiB free: nothing to refuse here
    }
    assert_usage_error(
        &["bench", "--size", "1T", "--no-host"],
        "of this host's memory",
    );
    assert_usage_error(
        &["usemem", "1T", "--backing", "full", "--mem", "2T"],
        "pass --backing sparse",
    );
}

/// percpu-test --cpus 4096 ran for minutes with no line; the work (cgroups × CPUs)
/// is bounded up front, naming both flags.
#[test]
fn percpu_test_work_is_bounded() {
    assert_usage_error(
        &["percpu-test", "--cpus", "4096"],
        "lower --cpus or --cgroups",
    );
}
