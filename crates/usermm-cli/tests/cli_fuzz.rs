//! Fuzzing the command line: random subcommands, flags and values (sensible, edge and
//! garbage) must end with exit 0, 1 (a run that failed) or 2 (a usage error: one
//! `usermm: error:` line) — never a panic or a signal. Values are small so that the
//! runs that are valid stay short.
//!
//! The shapes of bad command-line input are in every list, so the class stays closed: sizes near
//! `u64::MAX` (they used to wrap or panic in `next_multiple_of`), huge counts (thread-spawn
//! aborts, overflowing products), extreme configuration values (sums that wrapped inside
//! `MachineConfig::validate`, an unbounded flush cost that hung, list sizes that panicked or
//! tried to allocate 32 GiB per CPU). Only values that are *refused* are huge: a valid
//! 16T usemem or 4096 workers would run for hours. `-s` never gets a negative value: that
//! sleeps until killed, which `cli.rs` tests with a child it kills.
//!
//! The clock's and the profile's shapes too: `--time`, `--profile` (built in, unknown, an escape sequence, and
//! files whose fields overflow or truncate, a cost past the 1 s bound, a name with an
//! escape), `--scale-cost` extremes, unaligned `pcpu.*` sizes, and usemem's time- and
//! signal-based options, which force `--time virtual` (on the wall clock they wait for a
//! signal or a kill, by design).
//!
//! Hostile profiles and factors too: profiles with formulas 20 000 deep, 100 000 terms long or
//! 100 000 minuses, a figure without a formula, an input in the wrong unit, an input no
//! formula reads; `--scale-cost` sets that together reach the virtual clock's end; usemem's
//! `-e` just under, at and above a second.
//!
//! 48 command lines, times `USERMM_TEST_SCALE`, from `USERMM_TEST_SEED` (see the README's testing
//! notes).
//!
//! The shapes of where usermm writes: every command that writes or reads back a file
//! (`reproduce --out`, `sweep --out`, `--emit --out`, `--merge`, the grid, `calibrate --out`,
//! usemem's `-p`) gets a path among a new one, an empty directory, a directory of the user's,
//! a report directory, a user's file, links to a file, to a directory and to nothing, a FIFO,
//! a path under a user's file, `/dev/null` and `/dev/zero`. Beyond the exit status, a case
//! checks that the user's files keep their bytes, the links and the FIFO stay what they were,
//! nothing appears where the dangling link points, no temporary or staging file is left, and
//! no run blocks. 16 cases, times `USERMM_TEST_SCALE`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use proptest::prelude::*;

const SIZES: &[&str] = &[
    "0",
    "1",
    "4096",
    "4k",
    "1M",
    "64M",
    "256M",
    "-1",
    "abc",
    "0x100000",
    "99999999999999T",
    "",
    "1.5G",
    "0xffffffffffffffff",
    "0xfffffffffffff000",
    "17T",
];
const NUMS: &[&str] = &[
    "0",
    "1",
    "2",
    "-1",
    "x",
    "1e3",
    "99999999999999999999999",
    "",
];
/// Counts beyond a limit: refused (valid large counts would make runs slow).
const HUGE_COUNTS: &[&str] = &["4097", "100000", "4294967295", "4294967296"];

/// A flag and the values it may get (`None`: a switch).
type Flag = (&'static str, Option<&'static [&'static str]>);

/// Profile files with fields that overflow or truncate: written by
/// [`write_profiles`] before the first run.
const PROFILE_OVERFLOW: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/fuzz-profile-overflow.toml");
const PROFILE_TRUNCATE: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/fuzz-profile-truncate.toml");
const PROFILE_HUGE_COST: &str =
    concat!(env!("CARGO_TARGET_TMPDIR"), "/fuzz-profile-huge-cost.toml");
const PROFILE_ESCAPE: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/fuzz-profile-escape.toml");
/// Formulas that overflowed the parser's stack (20 000 parentheses deep, 100 000 terms,
/// 100 000 unary minuses), and the rules every profile keeps: a figure with no formula, an
/// input in GHz where ns are read, an input nothing reads.
const PROFILE_DEEP: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/fuzz-profile-deep.toml");
const PROFILE_LONG: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/fuzz-profile-long.toml");
const PROFILE_MINUS: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/fuzz-profile-minus.toml");
const PROFILE_NO_FORMULA: &str =
    concat!(env!("CARGO_TARGET_TMPDIR"), "/fuzz-profile-no-formula.toml");
const PROFILE_GHZ: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/fuzz-profile-ghz.toml");
const PROFILE_UNREAD: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/fuzz-profile-unread.toml");

/// A built-in profile with one line replaced, for each of the files above.
fn write_profiles() {
    let src = include_str!("../../usermm/src/vtime/profiles/haswell-ep-2s.toml");
    for (path, from, to) in [
        (
            PROFILE_OVERFLOW,
            "sockets = 2",
            "sockets = 18446744073709551616",
        ),
        (PROFILE_TRUNCATE, "sockets = 2", "sockets = 4294967298"),
        (PROFILE_HUGE_COST, "ns = 188.0", "ns = 1e300"),
        (
            PROFILE_ESCAPE,
            "name = \"haswell-ep-2s\"",
            "name = \"\\u001b[2Jx\"",
        ),
    ] {
        assert!(src.contains(from), "{from} is no longer in the profile");
        std::fs::write(path, src.replacen(from, to, 1)).expect("write a fuzz profile");
    }
    let wakeup = "formula = \"wakeup_ns\"";
    let unread = "\n[inputs.spare]\nvalue = 1.0\nunit = \"ns\"\nkind = \"assumption\"\n\
                  source = \"assumption: read by nothing\"\n";
    for (path, from, to) in [
        (
            PROFILE_DEEP,
            wakeup.to_string(),
            format!(
                "formula = \"{}wakeup_ns{}\"",
                "(".repeat(20_000),
                ")".repeat(20_000)
            ),
        ),
        (
            PROFILE_LONG,
            wakeup.to_string(),
            format!("formula = \"wakeup_ns{}\"", " + 0".repeat(100_000)),
        ),
        (
            PROFILE_MINUS,
            wakeup.to_string(),
            format!("formula = \"{}wakeup_ns\"", "-".repeat(100_000)),
        ),
        (PROFILE_NO_FORMULA, format!("{wakeup}\n"), String::new()),
        (
            PROFILE_GHZ,
            "unit = \"ns/page\"".into(),
            "unit = \"GHz\"".into(),
        ),
        (
            PROFILE_UNREAD,
            "[topology]".into(),
            format!("{unread}\n[topology]"),
        ),
    ] {
        assert!(src.contains(&from), "{from} is no longer in the profile");
        std::fs::write(path, src.replacen(&from, &to, 1)).expect("write a fuzz profile");
    }
}

const ENGINE: &[Flag] = &[
    // The clock and the profile, with their hostile shapes.
    ("--time", Some(&["virtual", "wall", "x"])),
    (
        "--profile",
        Some(&[
            "haswell-ep-2s",
            "nope",
            "\u{1b}[31m",
            PROFILE_OVERFLOW,
            PROFILE_TRUNCATE,
            PROFILE_HUGE_COST,
            PROFILE_ESCAPE,
            PROFILE_DEEP,
            PROFILE_LONG,
            PROFILE_MINUS,
            PROFILE_NO_FORMULA,
            PROFILE_GHZ,
            PROFILE_UNREAD,
        ]),
    ),
    (
        "--scale-cost",
        Some(&[
            "zap_pte=1.5",
            "zap_pte=1e-300",
            "zap_pte=1e300",
            "zap_pte=1e308",
            "user_line=4",
            "user_miss=0.001",
            "nope=2",
            "x",
            // Three factors that together drove the virtual clock to its end (2^64 ps).
            "zap_pte=1e7",
            "free_unref_page=1.4e7",
            "lru_del=1.5e7",
            "transfer.other_socket=1e6",
            "wakeup=0",
        ]),
    ),
    (
        "--mem",
        Some(&["64M", "256M", "1G", "2G", "0", "1", "x", "1T"]),
    ),
    // Large valid CPU counts make percpu-test slow (a minute at 1025): only invalid ones.
    ("--cpus", Some(&["1", "2", "4", "0", "99999", "x"])),
    ("--nodes", Some(&["1", "2", "4", "0", "9", "x"])),
    ("--backing", Some(&["full", "sparse", "bogus"])),
    ("--thp", Some(&["always", "madvise", "never", "sometimes"])),
    (
        "--preset",
        Some(&[
            "vanilla", "patched", "seed-000", "seed-002", "seed-003", "nope",
        ]),
    ),
    (
        "--set",
        Some(&[
            "free.parallel=on",
            "pcp.auto_tune=on",
            "pcp.high=1",
            "pcp.batch=0",
            "munmap.downgrade=on",
            "huge_zero.per_mm_ref=maybe",
            "nope=1",
            "mem",
            "=",
            "tlb.flush_cost_ns=-3",
            "max_map_count=10",
            "tlb.flush_cost_ns=18446744073709551615",
            "tlb.flush_cost_ns=1000001",
            "pcpu.static_size=0xffffffffffff0000",
            "pcpu.reserved_size=0x20000",
            "pcpu.reserved_size=0xffffffffffffffff",
            "pcpu.unit_size=0xffffffffffffffff",
            "mem=0xffffffffffffffff",
            "mem=0xfffffffffffff000",
            "nr_hugepages=4294967295",
            "cpus=65535",
            "nodes=65535",
            "pcp.high=4294967295",
            "pcp.high=16777216",
            "pcp.batch=4294967295",
            "lru.add_batch=4294967295",
            "lru.lock_batch=4294967295",
            "free.max_active=4294967295",
            "free.threshold_pages=18446744073709551615",
            "gather.max_batch_count=4294967295",
            "munmap.downgrade_min_bytes=0xffffffffffffffff",
            "pcpu.empty_pop_pages_high=4294967295",
            // Unaligned first-chunk sizes indexed past the allocation map at boot;
            // an unbounded empty-page target ran for minutes.
            "pcpu.static_size=1",
            "pcpu.static_size=4097",
            "pcpu.reserved_size=2",
            "pcpu.reserved_size=4095",
            "pcpu.empty_pop_pages_high=100000",
            "max_map_count=4294967295",
        ]),
    ),
];

/// usemem's counts are C `int`s: 4294967295 is -1 (no process), 4294967296 is 0; the others
/// are beyond the engine's worker limit (refused).
const USEMEM_HUGE_COUNTS: &[&str] = &["24577", "100000", "4294967295", "4294967296"];

const USEMEM: &[Flag] = &[
    ("-n", Some(NUMS)),
    ("-t", Some(NUMS)),
    ("-n", Some(USEMEM_HUGE_COUNTS)),
    ("-t", Some(USEMEM_HUGE_COUNTS)),
    ("-s", Some(&["0", "x", ""])),
    ("-o", None),
    ("-j", Some(SIZES)),
    ("-r", Some(NUMS)),
    ("-u", Some(SIZES)),
    ("-O", None),
    ("-P", None),
    ("-F", None),
    ("-M", None),
    ("-y", None),
    ("-x", None),
    ("-w", None),
    ("-R", None),
    ("--madv-thp", None),
    ("--ab", None),
    ("--random-seed", Some(NUMS)),
    ("--show-addr", None),
    // Time- and signal-based options; with any of them the run is forced into
    // virtual time (see `VIRTUAL_ONLY`), where each either runs to its end or is refused.
    // And delays near a second (999 999 001 to 999 999 999 ns never ended): see NEAR_SECOND.
    ("-e", Some(&["1", "1u", "2000m", "0"])),
    ("-e", Some(NEAR_SECOND)),
    ("-T", Some(&["1", "0", "-1"])),
    ("-Z", None),
    ("-W", None),
    ("--write-signal-write", None),
    ("--write-signal-madv-thp", None),
    ("--signal-fork", None),
    ("--signal-loop", None),
];

/// `-e` just under, at and above a second. usemem busy-waits that long at each new page,
/// touching the page again and again, so a modelled second costs the host millions of
/// accesses: a command line with one of these becomes `usemem 8K -e T --time virtual` (two
/// pages), the shape that never ended, whatever else was picked.
const NEAR_SECOND: &[&str] = &["999999001", "999999900", "999999999", "1000000000"];

/// usemem's options that wait on the host (a signal, a kill, a delay that never ends, the
/// wall clock's seconds): a command line with one of them gets `--time virtual`.
const VIRTUAL_ONLY: &[&str] = &[
    "-e",
    "-T",
    "-W",
    "--write-signal-write",
    "--write-signal-madv-thp",
    "--signal-fork",
    "--signal-loop",
];

const BIGFREE: &[Flag] = &[
    ("--max-active", Some(&["1", "1,2", "0", "2,x", "1025", ""])),
    ("--threshold", Some(NUMS)),
    (
        "--threshold",
        Some(&["18446744073709551615", "18446744073709551616"]),
    ),
    ("--repeat", Some(NUMS)),
    ("--exit", None),
    ("--batch-switch", Some(&["2017", "modern", "1999"])),
    ("--max-batch-count", Some(NUMS)),
    ("--max-batch-count", Some(&["4294967295", "4294967296"])),
    ("--seed-only", None),
];

const MUNMAP_TEST: &[Flag] = &[
    ("--faulters", Some(NUMS)),
    ("--faulters", Some(HUGE_COUNTS)),
    ("--repeat", Some(NUMS)),
    ("--faulter-size", Some(SIZES)),
    ("--no-loaded-baseline", None),
];

const PERCPU_TEST: &[Flag] = &[
    (
        "--cgroups",
        Some(&[
            "2x3",
            "20x2",
            "0x0",
            "x",
            "1x",
            "5",
            "3x99999999999",
            "10x1",
            "100000000x100000000",
            "4294967295x4294967295",
            "65535x1",
        ]),
    ),
    ("--recipe", Some(&["2021", "modern", "1999"])),
];

const PERCPU_GRID: &[Flag] = &[
    ("--grid-cpus", Some(&["2", "2,4", "0", "x", "4097", ""])),
    ("--grid-events", Some(&["4", "96", "0", "4097", "x"])),
    ("--recipe", Some(&["2021", "modern", "1999"])),
];

/// `(name, takes a SIZE, its own flags)`.
const COMMANDS: &[(&str, bool, &[Flag])] = &[
    ("meminfo", false, &[]),
    ("vmstat", false, &[]),
    ("usemem", true, USEMEM),
    ("bigfree", true, BIGFREE),
    ("munmap-test", true, MUNMAP_TEST),
    ("percpu-test", false, PERCPU_TEST),
    ("percpu-grid", false, PERCPU_GRID),
];

fn argv() -> impl Strategy<Value = Vec<String>> {
    (
        any::<prop::sample::Index>(),
        any::<bool>(),
        prop::sample::select(SIZES.to_vec()),
        prop::collection::vec(
            (any::<prop::sample::Index>(), any::<prop::sample::Index>()),
            0..6,
        ),
        any::<bool>(),
    )
        .prop_map(|(cmd, json, size, picks, positional)| {
            let (name, takes_size, own) = COMMANDS[cmd.index(COMMANDS.len())];
            let flags: Vec<Flag> = own.iter().chain(ENGINE).copied().collect();
            let mut v = vec![name.to_string()];
            if name == "munmap-test" {
                // The baseline windows default to 1 s each: keep valid runs short.
                v.extend(["--baseline-ms".into(), "1".into()]);
            }
            if name == "percpu-grid" {
                // Every point is a full script: keep it small.
                v.extend(["--cgroups".into(), "5x2".into()]);
            }
            if takes_size && positional {
                v.push(size.to_string());
            }
            for (f, val) in picks {
                let (flag, values) = flags[f.index(flags.len())];
                v.push(flag.to_string());
                if let Some(values) = values {
                    v.push(values[val.index(values.len())].to_string());
                }
            }
            if name == "usemem" && v.iter().any(|a| VIRTUAL_ONLY.contains(&a.as_str())) {
                // Whatever --time the picks had (and its value), virtual time decides.
                let mut i = 0;
                while i < v.len() {
                    if v[i] == "--time" {
                        v.drain(i..(i + 2).min(v.len()));
                    } else {
                        i += 1;
                    }
                }
                v.extend(["--time".into(), "virtual".into()]);
            }
            if let Some(i) = v.iter().position(|a| NEAR_SECOND.contains(&a.as_str())) {
                let delay = v[i].clone();
                v = ["usemem", "8K", "-e", &delay, "--time", "virtual"]
                    .map(String::from)
                    .to_vec();
            }
            if json {
                v.push("--json".into());
            }
            v
        })
}

#[test]
fn any_command_line_ends_in_0_1_or_2_without_a_panic() {
    write_profiles();
    usermm_testscale::prop::check("cli_fuzz::any_command_line", file!(), 48, argv(), |args| {
        let out = Command::new(env!("CARGO_BIN_EXE_usermm"))
            .args(&args)
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::null())
            .output()
            .expect("run usermm");
        let (status, err) = (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        prop_assert!(!err.contains("panicked"), "{:?} panicked: {}", args, err);
        prop_assert!(
            matches!(status.code(), Some(0..=2)),
            "{:?} ended with {:?}: {}",
            args,
            status,
            err
        );
        if status.code() == Some(2) {
            prop_assert!(
                err.starts_with("usermm: error: ") && err.lines().count() == 1,
                "{:?}: a usage error must be one 'usermm: error:' line, got: {}",
                args,
                err
            );
        }
        Ok(1)
    });
}

/// The paths an output flag gets, relative to a case's directory (see [`plant`]).
const OUT_PATHS: &[&str] = &[
    "new",
    "new/deeper/out",
    "empty",
    "full",
    "full/user.tex",
    "user.tex",
    "report",
    "link-file",
    "link-dir",
    "dangling",
    "fifo",
    "user.tex/under",
    "/dev/null",
    "/dev/zero",
    ".",
    "",
];

/// The commands that write or read back a file, `{}` where the path goes.
const OUT_COMMANDS: &[&[&str]] = &[
    &[
        "reproduce",
        "--time",
        "virtual",
        "--only",
        "percpu",
        "--out",
        "{}",
    ],
    &["sweep", "grid.toml", "--out", "{}"],
    &["sweep", "grid.toml", "--emit", "parallel", "--out", "{}"],
    &["sweep", "--merge", "{}"],
    &["sweep", "{}"],
    &["calibrate", "--from", FIXTURE, "--out", "{}"],
    &["usemem", "-d", "-p", "{}", "64K"],
];

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../usermm-workloads/tests/fixtures/host-calibration-2026-11-25.json"
);
const USER: &[u8] = b"the user's own bytes\n";

/// A case's directory: a user's file, a directory of the user's, an empty one, a report
/// directory (its marker, and a user's note in it), links to a file, to a directory and to
/// nothing, a FIFO, and a one-point grid.
fn plant(d: &Path) {
    let _ = std::fs::remove_dir_all(d);
    for sub in ["full", "empty", "report"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    for f in ["user.tex", "full/user.tex", "report/notes.md"] {
        std::fs::write(d.join(f), USER).unwrap();
    }
    std::fs::write(d.join("report/.usermm-report"), "usermm report directory\n").unwrap();
    std::os::unix::fs::symlink("user.tex", d.join("link-file")).unwrap();
    std::os::unix::fs::symlink("empty", d.join("link-dir")).unwrap();
    std::os::unix::fs::symlink("nowhere", d.join("dangling")).unwrap();
    common::mkfifo(&d.join("fifo"));
    std::fs::write(
        d.join("grid.toml"),
        "command = [\"meminfo\", \"--mem\", \"{m}\"]\n[axes]\n\"{m}\" = [\"64M\"]\n",
    )
    .unwrap();
}

/// What must hold after any command ran in a case's directory.
fn check_planted(d: &Path) -> Result<(), String> {
    for f in ["user.tex", "full/user.tex", "report/notes.md"] {
        if std::fs::read(d.join(f)).ok().as_deref() != Some(USER) {
            return Err(format!("{f} changed"));
        }
    }
    for (link, to) in [
        ("link-file", "user.tex"),
        ("link-dir", "empty"),
        ("dangling", "nowhere"),
    ] {
        if std::fs::read_link(d.join(link)).ok() != Some(PathBuf::from(to)) {
            return Err(format!("{link} is no longer a link to {to}"));
        }
    }
    if d.join("nowhere").symlink_metadata().is_ok() {
        return Err("something was written through the dangling link".into());
    }
    use std::os::unix::fs::FileTypeExt;
    if !d
        .join("fifo")
        .metadata()
        .is_ok_and(|m| m.file_type().is_fifo())
    {
        return Err("fifo is no longer a FIFO".into());
    }
    let mut stack = vec![d.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).map_err(|e| e.to_string())? {
            let e = e.map_err(|e| e.to_string())?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.contains(".tmp-") || name == ".usermm-staging" {
                return Err(format!("{} left behind", e.path().display()));
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
        }
    }
    Ok(())
}

#[test]
fn any_output_path_leaves_the_users_files_alone() {
    static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let strategy = (
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
        any::<bool>(),
    )
        .prop_map(|(c, p, json)| {
            let path = OUT_PATHS[p.index(OUT_PATHS.len())];
            let mut v: Vec<String> = OUT_COMMANDS[c.index(OUT_COMMANDS.len())]
                .iter()
                .map(|w| w.replace("{}", path))
                .collect();
            if json {
                v.insert(0, "--json".into());
            }
            v
        });
    usermm_testscale::prop::check("cli_fuzz::any_output_path", file!(), 16, strategy, |args| {
        let n = CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("usermm-fuzz-out-{}-{n}", std::process::id()));
        plant(&d);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = common::usermm_within(&argv, Some(&d), 300);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        prop_assert!(!err.contains("panicked"), "{:?} panicked: {}", args, err);
        prop_assert!(
            matches!(out.status.code(), Some(0..=2)),
            "{:?} ended with {:?}: {}",
            args,
            out.status,
            err
        );
        if out.status.code() == Some(2) {
            prop_assert!(
                err.starts_with("usermm: error: ") && err.lines().count() == 1,
                "{:?}: a usage error must be one 'usermm: error:' line, got: {}",
                args,
                err
            );
        }
        let planted = check_planted(&d);
        prop_assert!(planted.is_ok(), "{:?}: {}", args, planted.unwrap_err());
        let _ = std::fs::remove_dir_all(&d);
        Ok(1)
    });
}
