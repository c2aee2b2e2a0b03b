//! Usage errors exit 2, in one line that blames the flag the user gave (not a derived key or
//! a flag they did not pass), say it once, and print numbers compactly.

mod common;

use common::{assert_usage_error, usermm};

const P: &str = "haswell-ex-4s";

#[test]
fn the_flag_given_is_the_one_blamed() {
    assert_usage_error(
        &["percpu-grid", "--grid-cpus", "200", "--profile", P],
        "--grid-cpus 200: 200 CPUs, but the machine has 144 hardware threads",
    );
    assert_usage_error(
        &["usemem", "-n", "100", "4K", "--profile", "haswell-ep-2s"],
        "usemem: -n 100: the default machine gets a CPU per worker",
    );
    assert_usage_error(&["bigfree", "64M", "--nodes", "1024"], "--nodes 1024: ");
    assert_usage_error(
        &["meminfo", "--mem", "16M", "--nodes", "8"],
        "--mem 16M --nodes 8: the machine (mem 16M, cpus 4, nodes 8): each node needs at least 4 MiB",
    );
    // A virtual bigfree's default machine is the profile's: --max-active 1 fits any profile.
    let o = usermm(&[
        "bigfree",
        "64M",
        "--max-active",
        "1",
        "--profile",
        "haswell-ep-2s",
        "--seed-only",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
}

#[test]
fn nothing_is_said_twice_and_numbers_are_compact() {
    let dir = std::env::temp_dir().join(format!("usermm-usage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[meta]\nname = \"t\"\n").unwrap();
    let bad = bad.to_str().unwrap();
    let o = usermm(&["bigfree", "1G", "--profile", bad]);
    common::assert_one_line(&o, &["--profile", bad], &format!("--profile {bad}: line 1"));
    assert_eq!(
        common::stderr(&o).matches(bad).count(),
        1,
        "{}",
        common::stderr(&o)
    );
    let o = usermm(&["meminfo", "--mem", "16M", "--nodes", "8"]);
    assert_eq!(common::stderr(&o).matches("each node needs").count(), 1);
    // 1e-300 in a heading, 1e300 in an error: no three hundred digits.
    let o = usermm(&[
        "bigfree",
        "1G",
        "--scale-cost",
        "zap_pte=1e-300",
        "--profile",
        P,
        "--seed-only",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    assert!(
        common::stdout(&o).contains("(zap_pte x1e-300)"),
        "{}",
        common::stdout(&o)
    );
    let o = usermm(&[
        "bigfree",
        "1G",
        "--scale-cost",
        "zap_pte=1e300",
        "--profile",
        P,
    ]);
    common::assert_one_line(&o, &["--scale-cost"], "--scale-cost zap_pte=1e300: ");
    assert!(common::stderr(&o).len() < 300, "{}", common::stderr(&o));
    // Past f64's range the figure is infinite: said so, not "(got inf)".
    let args = [
        "bigfree",
        "1G",
        "--scale-cost",
        "zap_pte=1e308",
        "--profile",
        P,
    ];
    common::assert_one_line(
        &usermm(&args),
        &args,
        "--scale-cost zap_pte=1e308: profile haswell-ex-4s: costs.zap_pte.ns: is past the \
         largest number (1.7976931348623157e308)",
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A profile key set on the wall clock would be ignored: refused instead.
#[test]
fn a_profile_on_the_wall_clock_is_refused() {
    assert_usage_error(
        &[
            "bigfree",
            "1G",
            "--time",
            "wall",
            "--set",
            "time.profile=abc",
        ],
        "--set time.profile=abc: only with --time virtual",
    );
}

/// `--host-profile` is checked before any experiment runs, naming the flag; another
/// machine's profile is not this host's.
#[test]
fn host_profile_is_checked_first_and_must_be_this_hosts() {
    let out = std::env::temp_dir().join(format!("usermm-hp-{}", std::process::id()));
    let out_s = out.to_str().unwrap();
    assert_usage_error(
        &["reproduce", "--host-profile", P, "--out", out_s],
        "--host-profile haswell-ex-4s: profile haswell-ex-4s (144 hardware threads) is not this host's",
    );
    assert_usage_error(
        &[
            "reproduce",
            "--host-profile",
            "/nonexistent/p.toml",
            "--out",
            out_s,
        ],
        "--host-profile /nonexistent/p.toml: ",
    );
    assert!(!out.exists(), "a report was started");
}

/// `reproduce --jobs`: a whole number of host threads, at least 1, refused in one line before
/// anything runs.
#[test]
fn reproduce_jobs_is_at_least_one_host_thread() {
    for (bad, says) in [
        ("0", "at least 1 host thread"),
        ("-1", "expected a number of host threads, got '-1'"),
        ("two", "expected a number of host threads, got 'two'"),
        ("", "expected a number of host threads"),
    ] {
        let jobs = format!("--jobs={bad}");
        let args = ["reproduce", "--only", "percpu", "--time", "virtual", &jobs];
        assert_usage_error(&args, says);
    }
}
