//! The `usermm` binary from the outside: output formats, exit statuses, error lines.

mod common;

use std::process::Command;

use common::{assert_usage_error, stderr, stdout, usermm};

#[test]
fn meminfo_kernel_format() {
    let o = usermm(&["meminfo", "--mem", "4G", "--cpus", "8"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.lines().any(|l| l == "MemTotal:        4194304 kB"),
        "{out}"
    );
    assert!(out.lines().any(|l| l.starts_with("MemFree:")), "{out}");
    assert!(o.stderr.is_empty());
}

#[test]
fn meminfo_json_parses() {
    for args in [
        &["meminfo", "--mem", "64M", "--json"][..],
        &[
            "--json",
            "meminfo",
            "--mem",
            "64M",
            "--nodes",
            "2",
            "--backing",
            "sparse",
        ],
    ] {
        let o = usermm(args);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is JSON");
        assert_eq!(v["meminfo"]["MemTotal"], 65536);
        assert_eq!(v["config"]["mem"], 64u64 << 20);
    }
    let v: serde_json::Value =
        serde_json::from_slice(&usermm(&["--json", "meminfo", "--backing", "sparse"]).stdout)
            .unwrap();
    assert_eq!(v["config"]["backing"], "sparse");
}

#[test]
fn vmstat_prints_kernel_names() {
    let o = usermm(&["vmstat", "--mem", "64M"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).lines().any(|l| l.starts_with("nr_free_pages ")));
    let o = usermm(&["vmstat", "--mem", "64M", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["vmstat"]["pgfault"].is_i64());
}

#[test]
fn bad_sizes_exit_2() {
    assert_usage_error(&["meminfo", "--mem", "0"], "--mem");
    assert_usage_error(&["meminfo", "--mem", "1"], "--mem");
    assert_usage_error(&["meminfo", "--mem", "99999T"], "--mem");
    assert_usage_error(&["meminfo", "--mem", "abc"], "abc");
    assert_usage_error(&["meminfo", "--mem", ""], "--mem");
    assert_usage_error(&["bigfree", "0"], "SIZE");
}

#[test]
fn bad_cpus_exit_2() {
    assert_usage_error(&["meminfo", "--cpus", "0"], "--cpus");
    assert_usage_error(&["meminfo", "--cpus", "4097"], "--cpus");
    assert_usage_error(&["meminfo", "--cpus", "99999999"], "--cpus");
    assert_usage_error(&["meminfo", "--cpus", "two"], "--cpus");
    // More nodes than CPUs is fake NUMA; a node needs 4 MiB, and there are at most 1024.
    assert_usage_error(&["meminfo", "--mem", "16M", "--nodes", "8"], "node");
    assert_usage_error(&["meminfo", "--cpus", "2", "--nodes", "1025"], "--nodes");
}

#[test]
fn bad_config_exit_2() {
    assert_usage_error(&["meminfo", "--set", "nonsense=1"], "--set nonsense=1");
    assert_usage_error(
        &["meminfo", "--set", "free.parallel=maybe"],
        "free.parallel",
    );
    assert_usage_error(&["meminfo", "--set", "noequals"], "--set noequals");
    assert_usage_error(&["meminfo", "--preset", "nope"], "--preset nope");
    assert_usage_error(&["meminfo", "--backing", "dense"], "--backing");
    assert_usage_error(&["meminfo", "--bogus"], "--bogus");
}

#[test]
fn subcommand_flags_are_checked() {
    assert_usage_error(&["bigfree", "1G", "--max-active", "1,0,4"], "--max-active");
    assert_usage_error(&["bigfree", "1G", "--threshold", "0"], "--threshold");
    assert_usage_error(
        &["bigfree", "1G", "--batch-switch", "2018"],
        "--batch-switch",
    );
    assert_usage_error(&["percpu-test", "--cgroups", "1000"], "--cgroups");
    assert_usage_error(&["percpu-test", "--recipe", "2020"], "--recipe");
    assert_usage_error(&["reproduce", "--only", "bigfree,nope"], "--only");
    assert_usage_error(&["reproduce", "--scale", "huge"], "--scale");
}

#[test]
fn experiment_commands_run_small_and_reject_bad_input() {
    // Small real runs: each prints its table and exits 0.
    for args in [
        &["percpu-test", "--cgroups", "20x3"][..],
        &["usemem", "-n", "2", "-O", "-j", "4096", "8M"],
        &["munmap-test", "64M", "--faulters", "1"],
        &[
            "bigfree",
            "64M",
            "--max-active",
            "1,2",
            "--threshold",
            "4096",
        ],
    ] {
        let o = usermm(args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!o.stdout.is_empty(), "{args:?} printed nothing");
    }
    for args in [
        &["bigfree", "1G", "--max-active", "0"][..],
        &["bigfree", "1G", "--threshold", "0"],
        &["bigfree", "20T"],
    ] {
        let o = usermm(args);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn help_and_version_exit_0() {
    for args in [&["--help"][..], &["--version"], &["bigfree", "-h"]] {
        let o = usermm(args);
        assert_eq!(o.status.code(), Some(0), "{args:?}");
        assert!(!o.stdout.is_empty());
    }
    assert_eq!(usermm(&[]).status.code(), Some(2));
}

#[test]
fn bigfree_json_has_the_pcp_tune_rows_unless_seed_only() {
    let base = ["bigfree", "64M", "--max-active", "2", "--threshold", "4096"];
    let rows = |extra: &[&str]| {
        let o = usermm(&[&base[..], extra, &["--json"]].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
        let b = &v["bigfree"];
        let rows: Vec<(String, bool)> = b["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| {
                (
                    r["label"].as_str().unwrap().to_string(),
                    r["pcp_auto_tune"].as_bool().unwrap(),
                )
            })
            .collect();
        (rows, b["beyond"].is_null())
    };
    let (all, no_beyond) = rows(&[]);
    assert_eq!(all.len(), 4, "{all:?}");
    assert!(!no_beyond);
    assert!(all[2].1 && all[3].1 && !all[0].1 && !all[1].1, "{all:?}");
    assert!(all[3].0.ends_with("+ pcp tune"), "{all:?}");
    let (seed, no_beyond) = rows(&["--seed-only"]);
    assert_eq!(seed.len(), 2, "{seed:?}");
    assert!(seed.iter().all(|r| !r.1), "{seed:?}");
    assert!(no_beyond);
}

/// Bad command-line input: each is refused with one line that names the argument and its limit,
/// exit 2 (before: panics in debug builds, wrapped sizes and misleading errors in release,
/// a configuration that wrapped and ran, thread-spawn aborts, a hang).
#[test]
fn issue_13_bad_input_is_one_line_naming_the_limit() {
    for (args, mentions) in [
        (
            &["bigfree", "0xffffffffffffffff", "--mem", "1G"][..],
            "at most 16T",
        ),
        (
            &["bigfree", "0xfffffffffffff000", "--mem", "1G"],
            "at most 16T",
        ),
        (&["munmap-test", "0xffffffffffffffff"], "at most 16T"),
        (
            &["percpu-test", "--cgroups", "100000000x100000000"],
            "at most 65535",
        ),
        (
            &[
                "usemem",
                "1M",
                "--set",
                "pcpu.static_size=0xffffffffffff0000",
                "--set",
                "pcpu.reserved_size=0x20000",
            ],
            "pcpu.static_size + pcpu.reserved_size must be below pcpu.unit_size",
        ),
        (&["usemem", "1M", "-t", "100000"], "at most 24576"),
        (&["usemem", "1M", "-n", "100000"], "at most 24576"),
        (
            &[
                "usemem",
                "1M",
                "--set",
                "tlb.flush_cost_ns=18446744073709551615",
            ],
            "tlb.flush_cost_ns must be at most 1000000",
        ),
    ] {
        assert_usage_error(args, mentions);
    }
    // -n and -t are each within the limit, their product is not.
    assert_usage_error(&["usemem", "1M", "-n", "200", "-t", "200"], "at most 24576");
    // Sizes that parse but cannot fit any machine: the same limit, named.
    assert_usage_error(&["bigfree", "16T"], "more than the 16T");
    assert_usage_error(&["munmap-test", "16T"], "more than the 16T");
    assert_usage_error(&["usemem", "16T"], "more than the 16T");
    assert_usage_error(&["usemem", "-o", "17T"], "more than the 16T");
    assert_usage_error(&["munmap-test", "1M", "--faulters", "4096"], "--faulters");
    // Extreme list sizes the fuzz found (a clamp panic, a 32 GiB allocation per CPU).
    assert_usage_error(&["meminfo", "--set", "pcp.high=4294967295"], "pcp.high");
    assert_usage_error(
        &["meminfo", "--set", "lru.add_batch=4294967295"],
        "lru.add_batch",
    );
}

/// Regression (cli_fuzz, seed 0xa9ec7ad23c93d148): an allocation unit past the address space
/// (`-u -1`) sent the machine sizing into endless recursion, a stack overflow.
#[test]
fn usemem_unit_past_the_address_space_ends_normally() {
    let o = usermm(&["usemem", "-u", "-1"]);
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert!(matches!(o.status.code(), Some(0..=2)), "{o:?}");
}

/// Regression (cli_fuzz, seed 0x38d7f6a6329a8239): a step past the address space (`-j -1`)
/// overflowed the walk's address (a panic in debug builds): one word is touched, as usemem's
/// walk touches one.
#[test]
fn usemem_step_past_the_address_space_walks_one_word() {
    let o = usermm(&["usemem", "4096", "-j", "-1"]);
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{o:?}");
}

/// `usemem -s -1` sleeps until killed, as usemem's does (it returned at once): the
/// throughput line is printed when the walk is done, and the process is still there after.
#[test]
fn usemem_negative_sleep_holds_until_killed() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    /// Kills the child however the test ends: it would otherwise sleep forever.
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_usermm"))
            .args(["usemem", "1M", "-s", "-1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run usermm"),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.ends_with(" KB/s\n"), "{line:?}");
    assert!(line.starts_with("1179648 bytes / "), "{line:?}");
    // The line came after the walk; the worker now holds its memory and never returns.
    let since = Instant::now();
    while since.elapsed() < Duration::from_millis(300) {
        assert!(child.0.try_wait().unwrap().is_none(), "usemem -s -1 exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.0.kill().unwrap();
    assert!(!child.0.wait().unwrap().success());
    assert_usage_error(&["usemem", "1M", "-s", "-1", "--ab"], "--ab");
}

/// `--percpu-stats` prints each side's `/sys/kernel/debug/percpu_stats` after the deletion
/// phase, in the kernel's layout; without it the text has none.
#[test]
fn percpu_test_prints_percpu_stats_when_asked() {
    let o = usermm(&[
        "percpu-test",
        "--cgroups",
        "10x3",
        "--cpus",
        "4",
        "--percpu-stats",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(out.matches("Percpu Memory Statistics").count(), 2, "{out}");
    let patched = out
        .split("# patched: /sys/kernel/debug/percpu_stats after deleting")
        .nth(1)
        .expect("a patched block");
    for field in [
        "unit_size",
        "nr_units",
        "nr_cur_alloc",
        "empty_pop_pages",
        "Chunk: <- First Chunk",
    ] {
        assert!(patched.contains(field), "{field}: {patched}");
    }
    // One unit per possible CPU, as the kernel lays a chunk out.
    assert!(
        patched.contains("  nr_units          :            4"),
        "{patched}"
    );
    let o = usermm(&["percpu-test", "--cgroups", "10x3", "--cpus", "4"]);
    assert!(!stdout(&o).contains("Percpu Memory Statistics"));
}

/// The percpu table's title is the run's own script (it printed the seed's 1000 × 10 for any
/// shape), and says what the seed columns are when they differ.
#[test]
fn percpu_test_title_names_the_run() {
    let o = usermm(&["percpu-test", "--cgroups", "10x1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let first = stdout(&o).lines().next().unwrap_or_default().to_string();
    assert_eq!(
        first,
        "Percpu (kB) — 10 cg_i each followed by 1 cg_i_j; every cg_i_j removed; settle \
         (seed columns: 1000 × 10, 2021 recipe)"
    );
    let o = usermm(&["percpu-test", "--cgroups", "4x2", "--recipe", "modern"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with(
            "Percpu (kB) — 4 cg_i each followed by 2 cg_i_j; every cg_i_j removed; settle, \
             modern recipe (seed columns"
        ),
        "{}",
        stdout(&o)
    );
}

/// `percpu-grid`: one row per point, the event knob only for the 2021 recipe, `--cpus`
/// refused for `--grid-cpus`.
#[test]
fn percpu_grid_prints_one_row_per_point() {
    let args = [
        "percpu-grid",
        "--cgroups",
        "20x3",
        "--grid-cpus",
        "2,4",
        "--grid-events",
        "4,96",
    ];
    let o = usermm(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("Percpu (kB), 20 cg_i each followed by 3 cg_i_j, 2021 recipe"));
    assert_eq!(lines.len(), 3 + 4, "{out}");
    assert!(
        lines[3].starts_with("2  ") && lines[6].starts_with("4  "),
        "{out}"
    );
    let o = usermm(&[&args[..], &["--recipe", "modern", "--json"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 2, "{v}");
    assert!(points.iter().all(|p| p["nr_vm_event_items"].is_null()));
    assert_usage_error(&["percpu-grid", "--cpus", "4"], "--grid-cpus");
    assert_usage_error(&["percpu-grid", "--grid-events", "0"], "--grid-events");
}

/// Virtual time's bad input: an unknown profile, a malformed or incomplete profile file, and
/// more CPUs than the profile has hardware threads are each one line naming the field, exit 2.
#[test]
fn virtual_time_bad_input_names_the_field() {
    assert_usage_error(
        &["meminfo", "--time", "virtual", "--profile", "skylake-9000"],
        "--profile skylake-9000: unknown profile `skylake-9000` (built in: haswell-ex-4s",
    );
    assert_usage_error(
        &["bigfree", "64M", "--profile", "nope", "--max-active", "1"],
        "--profile nope: unknown profile",
    );
    let dir = std::env::temp_dir().join(format!("usermm-cli-profiles-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "name = = 3\n").unwrap();
    let bad = bad.to_str().unwrap();
    assert_usage_error(
        &["vmstat", "--time", "virtual", "--profile", bad],
        "line 1, column",
    );
    // A profile missing one cost: every cost needs a figure and a source.
    let full = usermm::vtime::Profile::builtin("haswell-ep-2s")
        .unwrap()
        .to_toml_string();
    let incomplete = dir.join("incomplete.toml");
    std::fs::write(
        &incomplete,
        full.replace("[costs.clear_page]", "[costs.clear_pages]"),
    )
    .unwrap();
    let incomplete = incomplete.to_str().unwrap();
    assert_usage_error(
        &["meminfo", "--profile", incomplete],
        "costs.clear_page: missing",
    );
    assert_usage_error(
        &[
            "meminfo",
            "--time",
            "virtual",
            "--profile",
            "e5-2680-32c",
            "--cpus",
            "33",
        ],
        "--cpus 33: 33 CPUs, but the machine has 32 hardware threads (profile e5-2680-32c)",
    );
    // usemem's default machine gives each of 73 workers a CPU: more than haswell-ep-2s has.
    assert_usage_error(
        &[
            "usemem",
            "-n",
            "73",
            "--readonly",
            "64M",
            "--time",
            "virtual",
        ],
        "usemem: -n 73: the default machine gets a CPU per worker (73 CPUs, but the machine \
         has 72 hardware threads (profile haswell-ep-2s)); pass fewer workers, or --cpus",
    );
    assert_usage_error(
        &["meminfo", "--time", "virtual"],
        "--time virtual needs --profile NAME|FILE",
    );
    assert_usage_error(&["meminfo", "--time", "sometimes"], "sometimes");
    // Fake NUMA: more nodes than the profile's sockets is fine.
    let o = usermm(&[
        "meminfo",
        "--profile",
        "e5-2680-32c",
        "--cpus",
        "16",
        "--nodes",
        "8",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).ok();
}

/// A virtual run's JSON is the same twice, and says how its times were obtained.
#[test]
fn virtual_bigfree_is_the_same_twice_and_labelled_modelled() {
    let args = [
        "--json",
        "bigfree",
        "64M",
        "--max-active",
        "1,2",
        "--threshold",
        "2048",
        "--max-batch-count",
        "8",
        "--seed-only",
        "--time",
        "virtual",
    ];
    let a = usermm(&args);
    assert!(a.status.success(), "{}", stderr(&a));
    let b = usermm(&args);
    assert_eq!(a.stdout, b.stdout, "two virtual runs differ");
    let v: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    assert_eq!(v["bigfree"]["time"], "modelled (profile haswell-ex-4s)");
    assert_eq!(v["bigfree"]["profile"]["name"], "haswell-ex-4s");
    let text = stdout(&usermm(&args[1..]));
    assert!(text.contains("modelled (profile haswell-ex-4s)"), "{text}");
    assert!(text.contains("zapping task"), "{text}");
}

#[test]
fn scale_cost_bad_input_is_one_line() {
    assert_usage_error(
        &[
            "bigfree",
            "64M",
            "--time",
            "virtual",
            "--scale-cost",
            "nope=2",
        ],
        "--scale-cost nope=2",
    );
    assert_usage_error(
        &[
            "bigfree",
            "64M",
            "--time",
            "virtual",
            "--scale-cost",
            "zap_pte",
        ],
        "--scale-cost",
    );
    assert_usage_error(
        &[
            "bigfree",
            "64M",
            "--time",
            "virtual",
            "--scale-cost",
            "zap_pte=-1",
        ],
        "--scale-cost",
    );
    assert_usage_error(
        &["bigfree", "64M", "--scale-cost", "zap_pte=2"],
        "--time virtual",
    );
}

/// `results.json` of a modelled reproduce: each side carries its profile and its headline
/// figures where scripts look for them.
#[test]
fn reproduce_modelled_munmap_json_keys() {
    let out = std::env::temp_dir().join(format!("usermm-cli-test-repro-{}", std::process::id()));
    let o = usermm(&[
        "reproduce",
        "--only",
        "munmap",
        "--time",
        "virtual",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let m = &v["munmap"]["modelled"];
    assert_eq!(m["profile"], "e5-2680-32c");
    let hold = &m["exclusive_hold_us"];
    let (van, pat) = (
        hold["vanilla"].as_f64().unwrap(),
        hold["patched"].as_f64().unwrap(),
    );
    // The downgrade takes the zap out of the exclusive section.
    assert!(van > 1000.0 * pat && pat > 0.0, "{hold}");
    assert!(
        v["munmap"]["measured"].is_null(),
        "--time virtual runs the modelled side only"
    );
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(
        file["results"]["munmap"]["modelled"]["exclusive_hold_us"],
        *hold
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// A walk that runs the machine out of frames says so ("out of memory at …", the fault's
/// `VM_FAULT_OOM`) on one line: usemem's worker process dies of the OOM killer's SIGKILL —
/// never a SIGSEGV — and usemem's parent, whose `do_tasks` ignores how its children ended,
/// exits 0.
#[test]
fn usemem_out_of_memory_is_reported_as_such() {
    // 16 MiB of data fits the check against --mem; the page tables it needs do not.
    let o = usermm(&["usemem", "--mem", "16M", "16M"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("killed by SIGKILL (out of memory at 0x"),
        "{err}"
    );
    assert!(!err.contains("SIGSEGV") && !err.contains("SEGV_"), "{err}");
}

/// `usermm bench` with a measuring lock of its own (a runtime directory per test): the bench
/// tests run side by side, and bench refuses while another command measures the host.
fn bench(test: &str, args: &[&str]) -> std::process::Output {
    let dir = std::env::temp_dir().join(format!("usermm-cli-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    common::usermm_env(&all, &[("XDG_RUNTIME_DIR", dir.to_str().unwrap())])
}

#[test]
fn bench_json_has_every_path_and_the_memset_figure() {
    let o = bench("bench-json", &["--size", "4M", "--repeat", "1", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    assert!(v["memset_gib_s"].as_f64().is_some_and(|x| x > 0.0), "{v}");
    let paths = v["paths"].as_array().expect("paths");
    let names: Vec<&str> = paths.iter().map(|p| p["path"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "populate-4k",
            "populate-thp",
            "munmap-4k",
            "huge-zero-read",
            "zero-read-4k",
            "bigfree-virtual",
            "usemem-ab-virtual",
            "free-2-threads",
            "mmap-munmap-4k",
            "fork-exit",
            "random-write-4k",
            "bigfree-nodes",
            "wis-page-fault1"
        ]
    );
    for p in paths {
        // Virtual time's host cost: the same run on both clocks, on process CPU time;
        // bigfree at two node counts runs on sparse backing only.
        let vcost = p["path"] == "bigfree-virtual" || p["path"] == "usemem-ab-virtual";
        let keys: &[&str] = if vcost {
            &["wall_cpu_ns", "virtual_cpu_ns", "virtual_over_wall"]
        } else if p["path"] == "bigfree-nodes" {
            &["engine_sparse_ns"]
        } else {
            &["engine_full_ns", "engine_sparse_ns"]
        };
        for key in keys {
            assert!(p[key].as_f64().is_some_and(|x| x > 0.0), "{key}: {p}");
        }
        assert_eq!(p["virtual_over_wall"].is_number(), vcost, "{p}");
        // The host kernel runs every path but the engine-only ones: the two-thread free,
        // bigfree at two node counts, and virtual time's cost.
        let engine_only = p["path"] == "free-2-threads" || p["path"] == "bigfree-nodes" || vcost;
        assert_eq!(p["host_ns"].is_number(), !engine_only, "{p}");
    }
    // bigfree at 4 and 64 nodes: CPU time on the wall clock, modelled time in virtual time,
    // and the ratios.
    let nodes = &paths[11]["nodes"];
    assert_eq!(nodes["nodes"], serde_json::json!([4, 64]), "{nodes}");
    for key in [
        "cpu_ratio",
        "wall_ratio",
        "virtual_ratio",
        "virtual_host_cpu_ratio",
    ] {
        assert!(
            nodes[key].as_f64().is_some_and(|x| x > 0.0),
            "{key}: {nodes}"
        );
    }
    assert_eq!(v["targets"].as_array().map(Vec::len), Some(17), "{v}");
    // will-it-scale's page_fault1 at one task: engine and host kernel in one run, their ratio.
    let wis = &paths[12];
    assert_eq!(wis["clock"], "wall", "{wis}");
    let ratio = wis["host_ns"].as_f64().unwrap() / wis["engine_full_ns"].as_f64().unwrap();
    assert!((wis["host_over_full"].as_f64().unwrap() - ratio).abs() < 1e-9 * ratio);
    assert!(v["mmaps"].as_u64().is_some_and(|n| n > 0), "{v}");
    // Both machines as configured: the engine flags on top of the bench's defaults.
    assert_eq!(v["config_full"]["prefault"], true, "{v}");
    assert_eq!(v["config_sparse"]["backing"], "sparse", "{v}");

    let o = bench(
        "bench-only",
        &[
            "--size",
            "4M",
            "--repeat",
            "1",
            "--only",
            "zero-read-4k",
            "--no-host",
            "--set",
            "prefault=off",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let paths = v["paths"].as_array().expect("paths");
    assert_eq!(paths.len(), 1, "{v}");
    assert_eq!(paths[0]["path"], "zero-read-4k");
    assert!(paths[0]["host_ns"].is_null());
    assert_eq!(v["config_full"]["prefault"], false, "{v}");
}

/// `--only` takes a comma list, as `--max-active` does: exactly those paths run, in the
/// dashboard's order.
#[test]
fn bench_only_takes_a_comma_list() {
    let o = bench(
        "bench-list",
        &[
            "--size",
            "4M",
            "--repeat",
            "1",
            "--only",
            "zero-read-4k,populate-4k",
            "--no-host",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let mut paths: Vec<String> = v["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .map(|p| p["path"].as_str().unwrap_or("").to_string())
        .collect();
    paths.sort();
    assert_eq!(paths, ["populate-4k", "zero-read-4k"], "{v}");
}

#[test]
fn bench_rejects_bad_arguments_on_one_line() {
    assert_usage_error(&["bench", "--only", "nope"], "nope");
    assert_usage_error(&["bench", "--only", "zero-read-4k,nope"], "nope");
    assert_usage_error(&["bench", "--repeat", "0"], "--repeat");
    assert_usage_error(&["bench", "--size", "1M"], "--size");
    assert_usage_error(&["bench", "--size", "x"], "x");
    assert_usage_error(&["bench", "--set", "nope=1"], "nope");
    assert_usage_error(&["bench", "--set", "prefault=maybe"], "prefault");
    assert_usage_error(&["bench", "--cpus", "1"], "2 CPUs");
    assert_usage_error(&["bench", "--mem", "1G"], "--mem");
    assert_usage_error(&["bench", "--backing", "sparse"], "--backing");
}

/// `usermm calibrate`'s mistakes are one line each, exit 2, before any measuring.
#[test]
fn calibrate_rejects_bad_arguments_on_one_line() {
    assert_usage_error(
        &["calibrate", "--repeat", "0"],
        "--repeat 0: must be 7 to 100",
    );
    assert_usage_error(
        &["calibrate", "--repeat", "6"],
        "--repeat 6: must be 7 to 100",
    );
    // Bounded above too: a million rounds were seventy days.
    assert_usage_error(
        &["calibrate", "--repeat", "1000000"],
        "--repeat 1000000: must be 7 to 100",
    );
    assert_usage_error(&["calibrate", "--repeat", "x"], "--repeat");
    assert_usage_error(
        &["calibrate", "--test-sizes", "--repeat", "0"],
        "--repeat 0: must be 1 to 100",
    );
    // A directory that cannot exist: under this test's own temporary directory, never made.
    let own = std::env::temp_dir().join(format!("usermm-cli-calib-{}", std::process::id()));
    std::fs::create_dir_all(&own).unwrap();
    let missing = own.join("never-made").join("this-host.toml");
    assert_usage_error(
        &["calibrate", "--out", missing.to_str().unwrap()],
        "does not exist",
    );
    let _ = std::fs::remove_dir_all(&own);
    let dir = std::env::temp_dir();
    assert_usage_error(
        &["calibrate", "--out", dir.to_str().unwrap()],
        "not a file name",
    );
}

/// `calibrate --from RECORD`: no measuring, the profile this version derives from a saved
/// record (the fixture of a real run): it loads, and its caches and jitter come from the
/// record (cpu0's L3 of 32 MiB is 524 288 lines; munmap_4k's spread 5.618 of 279.77 ns).
#[test]
fn calibrate_from_a_saved_record_writes_its_profile() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../usermm-workloads/tests/fixtures/host-calibration-2026-11-25.json");
    let dir = std::env::temp_dir().join(format!("usermm-cli-calfrom-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("this-host.toml");
    let o = usermm(&[
        "calibrate",
        "--from",
        fixture.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&out).unwrap();
    let doc: toml::Table = toml::from_str(&text).unwrap();
    assert_eq!(
        doc["memory"]["llc_lines"]["value"].as_float(),
        Some(524_288.0)
    );
    let jitter = doc["jitter"]["value"].as_float().unwrap();
    assert!(
        (jitter - 1.4826 * 100.0 * 5.618_476_867_675_781 / 279.769_393_920_898_44).abs() < 1e-3
    );
    // Not a record: one line, exit 2.
    assert_usage_error(
        &[
            "calibrate",
            "--from",
            out.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        "is not a calibration record",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A small calibration (test sizes, 2 samples): the record has every figure, positive; the
/// table names them all and the profile; the profile it writes loads in virtual time. No
/// assertion on the values: they are this host's, whatever its load.
#[test]
fn calibrate_small_writes_a_profile_that_runs_bigfree() {
    let dir = std::env::temp_dir().join(format!("usermm-cli-calibrate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("this-host.toml");
    let out_s = out.to_str().unwrap();
    // Its own measuring lock (a runtime directory of its own): a test's tiny calibration is
    // not refused because a real measurement, or another checkout's tests, hold the host's.
    let o = common::usermm_env(
        &[
            "calibrate",
            "--test-sizes",
            "--repeat",
            "2",
            "--out",
            out_s,
            "--json",
        ],
        &[("XDG_RUNTIME_DIR", dir.to_str().unwrap())],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("--json is JSON");
    let figures = v["figures"].as_object().unwrap();
    assert_eq!(figures.len(), 13, "{figures:?}");
    for (k, f) in figures {
        assert!(f["median"].as_f64().unwrap() > 0.0, "{k}: {f}");
        assert!(f["min"].as_f64().unwrap() > 0.0, "{k}: {f}");
        assert_eq!(f["samples"].as_array().unwrap().len(), 2, "{k}");
        assert!(f["bimodal"].is_boolean() && f["mad"].is_number(), "{k}");
        assert!(!f["method"].as_str().unwrap().is_empty(), "{k}");
        assert!(!f["unit"].as_str().unwrap().is_empty(), "{k}");
    }
    assert!(v["system"]["kernel"].is_string());
    assert!(std::fs::read_to_string(&out)
        .unwrap()
        .contains("name = \"this-host\""));

    // The table: one row per figure and where the profile went.
    let o = common::usermm_env(
        &["calibrate", "--test-sizes", "--repeat", "1", "--out", out_s],
        &[("XDG_RUNTIME_DIR", dir.to_str().unwrap())],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for k in figures.keys() {
        assert!(
            text.lines().any(|l| l.starts_with(k.as_str())),
            "{k}: {text}"
        );
    }
    assert!(text.contains(&format!("profile: {out_s}")), "{text}");

    // This host has its own (small) topology: the run's CPUs and nodes must fit it.
    let cpus = v["system"]["online_cpus"].as_u64().unwrap().to_string();
    let o = usermm(&[
        "bigfree",
        "64M",
        "--time",
        "virtual",
        "--profile",
        out_s,
        "--cpus",
        &cpus,
        "--nodes",
        "1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("modelled (profile this-host)"),
        "{}",
        stdout(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `reproduce --only host-check` with a this-host profile given: the check's section runs
/// (predict, then measure) and `results.json` carries `host_check.rows[]` with the keys the
/// issue names, each row's error its own arithmetic. Tiny sizes: the figures mean little.
#[test]
fn reproduce_host_check_rows_in_results_json() {
    let dir = std::env::temp_dir().join(format!("usermm-cli-test-hc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let profile = dir.join("this-host.toml");
    // A measuring lock of its own, as calibrate_small_writes_a_profile_that_runs_bigfree's.
    let env = [("XDG_RUNTIME_DIR", dir.to_str().unwrap())];
    let o = common::usermm_env(
        &[
            "calibrate",
            "--test-sizes",
            "--repeat",
            "1",
            "--out",
            profile.to_str().unwrap(),
        ],
        &env,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = dir.join("report");
    let o = common::usermm_env(
        &[
            "reproduce",
            "--only",
            "host-check",
            "--host-profile",
            profile.to_str().unwrap(),
            "--host-check-test-sizes",
            "--json",
            "--out",
            out.to_str().unwrap(),
        ],
        &env,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let hc = &v["host_check"];
    assert_eq!(hc["calibrated"], false);
    let rows = hc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 8, "{hc}");
    for r in rows {
        let (p, m) = (
            r["predicted"].as_f64().unwrap(),
            r["measured"].as_f64().unwrap(),
        );
        assert!(p > 0.0 && m >= 0.0, "{r}");
        // The error is the row's own arithmetic, or null when the host measured nothing or
        // was busy meanwhile (which the row says, with why).
        let busy = r["host_busy"].as_bool().unwrap();
        assert_eq!(
            busy,
            !r["quiet"]["why"].as_array().unwrap().is_empty(),
            "{r}"
        );
        match r["error"].as_f64() {
            Some(e) => assert!(!busy && (e - (p - m) / m).abs() < 1e-9, "{r}"),
            None => assert!(r["error"].is_null() && (m == 0.0 || busy), "{r}"),
        }
        assert!(r["name"].as_str().unwrap().starts_with('('), "{r}");
    }
    // page_fault1's rows: the tasks' CPU share of their wall time was recorded on the host.
    for r in &rows[4..] {
        assert!(r["name"].as_str().unwrap().contains("page_fault1"), "{r}");
        let shares = r["quiet"]["cpu_over_wall"].as_array().unwrap();
        assert!(!shares.is_empty() && shares.len() <= 2, "{r}");
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("The model checked on this host"));
    let _ = std::fs::remove_dir_all(&dir);
}
