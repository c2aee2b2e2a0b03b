//! usemem's runs that must end and stay small: `-e` just under a second ends on both clocks
//! and a second or more is refused on every clock, and `-r` with many progress dots writes
//! them through instead of keeping them.

mod common;

use common::{assert_one_line, usermm};

/// `-e` below a second ends: the delay is read on a nanosecond clock (a microsecond clock
/// read as nanoseconds never reached 999 999 001 .. 999 999 999).
#[test]
fn a_delay_just_under_a_second_ends() {
    let o = usermm(&[
        "usemem",
        "8K",
        "-e",
        "999999999",
        "--profile",
        "haswell-ex-4s",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    assert!(common::stdout(&o).contains("usecs to free memory"));
}

/// A delay of a second or more never ends in usemem: refused in one line on every clock and
/// with `--host`, without advising another clock.
#[test]
fn a_delay_of_a_second_is_refused_on_every_clock() {
    for clock in [
        &["--profile", "haswell-ex-4s"][..],
        &["--time", "wall"],
        &["--host"],
    ] {
        let mut args = vec!["usemem", "8K", "-e", "1000000000"];
        args.extend_from_slice(clock);
        let o = usermm(&args);
        assert_one_line(
            &o,
            &args,
            "-e 1000000000: a delay of a second or more never ends",
        );
        assert!(!common::stderr(&o).contains("--time"), "{args:?}");
    }
}

/// `-r` prints a dot per walk: the dots are written through as they come (stdout holds
/// them all, in order) and a worker's record keeps only its first lines, counting the rest
/// (a billion dots were kept in memory, 1.22 GB for `-T 7 -r 1000000000`).
#[test]
fn progress_dots_are_written_through_not_kept() {
    let args = [
        "usemem",
        "8K",
        "-T",
        "3",
        "-r",
        "3000",
        "--profile",
        "haswell-ex-4s",
    ];
    let o = usermm(&args);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let out = common::stdout(&o);
    assert!(out.matches('.').count() >= 2999, "{out}");
    let mut json = args.to_vec();
    json.push("--json");
    let o = usermm(&json);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for w in v["workers"].as_array().unwrap() {
        let kept = w["lines"].as_array().unwrap().len();
        let more = w["lines_not_kept"].as_u64().unwrap();
        assert_eq!(kept, 1024, "{w}");
        assert!(more > 0, "{w}");
    }
}
