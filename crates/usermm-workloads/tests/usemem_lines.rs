//! usemem on the engine, line by line: a table of command lines, each with the exact lines
//! usemem prints (stdout and stderr apart), its exit status, and the `bytes` figures worked
//! out here from usemem's documented arithmetic:
//!
//! - a unit of `b` bytes mapped by the worker counts `b / 8` (integer division);
//! - each walk visits the words `0, w, 2w, ...` below `b / 8` with `w = max(step, 8) / 8`
//!   (so `ceil((b / 8) / w)` words) and counts 8 per word;
//! - `-P` counts `SIZE / 8` once instead of per unit, `-E` and `-L` another `SIZE / 8`;
//! - no throughput line when nothing was counted; a `.` before each walk after the first;
//! - a free line only for a worker's own memory (no `-P`) in at most 32 units.
//!
//! Timings are replaced by `U` (µs) and `K` (KB/s), pids and addresses by `P` and `A`.

use std::sync::Arc;

use usermm::config::{BackingMode, MachineConfig};
use usermm::Machine;
use usermm_workloads::usemem::{self, Capture, Hooks, Io};

const NAME: &str = "./usemem";

struct Run {
    status: i32,
    out: Vec<String>,
    err: Vec<String>,
    notes: Vec<String>,
}

fn machine() -> Arc<Machine> {
    Machine::new(MachineConfig {
        mem: 512 << 20,
        cpus: 2,
        backing: BackingMode::Full,
        ..MachineConfig::default()
    })
    .unwrap()
}

/// Replace what varies between runs.
fn norm(line: &str) -> String {
    let w: Vec<&str> = line.split(' ').collect();
    let mut out: Vec<String> = w.iter().map(|s| s.to_string()).collect();
    for i in 0..w.len() {
        if i + 1 < w.len() && w[i + 1] == "usecs" {
            out[i] = "U".into();
        }
        if i + 1 < w.len() && w[i + 1] == "KB/s" {
            out[i] = "K".into();
        }
        if i + 1 < w.len() && w[i + 1] == "secs" && w[0] == "the" {
            out[i] = "S".into();
        }
        if i > 0 && w[i - 1] == "Process" {
            out[i] = "P".into();
        }
    }
    if w.len() == 2 && w[1].starts_with("0x") {
        return "P A".into();
    }
    // "U usecs" at the start of a free line keeps no leading dots of its own.
    out.join(" ")
}

fn run_on(m: &Arc<Machine>, args: &[&str]) -> Run {
    run_with_io(m, Capture::default(), args)
}

/// usemem on `m` with `io` standing for its stdout and stderr (a terminal or a file).
fn run_with_io(m: &Arc<Machine>, io: Capture, args: &[&str]) -> Run {
    let cap = Arc::new(io);
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let r = usemem::run_args(
        m,
        NAME,
        &args,
        Arc::clone(&cap) as Arc<dyn Io>,
        Hooks::default(),
        "",
    )
    .unwrap();
    let err_all = cap.stderr();
    let (notes, err): (Vec<&str>, Vec<&str>) = err_all
        .lines()
        .partition(|l| l.starts_with("usermm: note:"));
    Run {
        status: r.status,
        out: cap.stdout().lines().map(norm).collect(),
        err: err.into_iter().map(str::to_string).collect(),
        notes: notes.into_iter().map(str::to_string).collect(),
    }
}

fn run(args: &[&str]) -> Run {
    let m = machine();
    let r = run_on(&m, args);
    m.validate().unwrap();
    r
}

fn bytes_line(bytes: u64) -> String {
    format!("{bytes} bytes / U usecs = K KB/s")
}

const FREE: &str = "U usecs to free memory";

#[track_caller]
fn check(args: &[&str], status: i32, out: &[&str], err: &[&str]) {
    let r = run(args);
    assert_eq!(r.status, status, "{args:?}: {:?} {:?}", r.out, r.err);
    assert_eq!(r.out, out, "{args:?} stdout (stderr {:?})", r.err);
    assert_eq!(r.err, err, "{args:?} stderr");
}

#[test]
fn bytes_figures_follow_the_word_arithmetic() {
    let mib = 1u64 << 20;
    // SIZE / 8 + 8 × (SIZE / 8): 1.125 × SIZE when SIZE is a multiple of 8.
    let one_mib = mib / 8 + mib;
    assert_eq!(one_mib, 1179648);
    // 44739242 is not a multiple of 8: 5592405 words, each counted 1 + 8 times.
    let odd = 44739242u64 / 8 * 9;
    assert_eq!(odd, 50331645);
    // A 12-byte step still visits every word (12 / 8 = 1 word apart).
    // A 4100-byte step visits every 512th word: 2097152 / 512 = 4096 words.
    let sparse_step = (16 * mib) / 8 + (16 * mib / 8).div_ceil(4100 / 8) * 8;
    assert_eq!(sparse_step, 2129920);
    let table: &[(&[&str], &[String])] = &[
        (&["1M"], &[bytes_line(one_mib), FREE.into()]),
        (&["44739242"], &[bytes_line(odd), FREE.into()]),
        (
            &["-j", "12", "1048576"],
            &[bytes_line(one_mib), FREE.into()],
        ),
        (
            &["-j", "4100", "16M"],
            &[bytes_line(sparse_step), FREE.into()],
        ),
        // 64 bytes: 8 words, 8 + 64.
        (&["64Q"], &[bytes_line(72), FREE.into()]),
        // 1 byte and 0 bytes: nothing counted, no throughput line; the unit is still freed.
        (&["1.5G"], &[FREE.into()]),
        (&["0"], &[FREE.into()]),
        // Three walks: two dots, 131072 + 3 × 1048576.
        (
            &["-r", "3", "1M"],
            &[format!("..{}", bytes_line(mib / 8 + 3 * mib)), FREE.into()],
        ),
        (
            &["-q", "-r", "3", "1M"],
            &[bytes_line(mib / 8 + 3 * mib), FREE.into()],
        ),
        (&["-o", "1M"], &[bytes_line(one_mib), FREE.into()]),
        (
            &["-R", "--random-seed", "5", "1M"],
            &[bytes_line(one_mib), FREE.into()],
        ),
        // -P: SIZE / 8 counted in main, the walk in the worker; no free line.
        (&["--prealloc", "1M"], &[bytes_line(one_mib)]),
        (&["-P", "-F", "1M"], &[bytes_line(one_mib)]),
        // -E -P: another SIZE / 8 for the remap.
        (&["-E", "-P", "1M"], &[bytes_line(mib / 8 * 2 + mib)]),
        // -L: SIZE / 8 for the shared segment, then the ordinary unit.
        (&["-L", "1M"], &[bytes_line(mib / 8 + one_mib), FREE.into()]),
        // 50 units of 4096 (4608 each): more than 32, left to exit; 32 units are freed.
        (&["-u", "4096", "200K"], &[bytes_line(50 * 4608)]),
        (
            &["-u", "4096", "128K"],
            &[bytes_line(32 * 4608), FREE.into()],
        ),
        // Four 1M units, one word per page: 131072 + 256 × 8 each.
        (
            &["-j", "4096", "-u", "1M", "4M"],
            &[bytes_line(4 * (mib / 8 + 256 * 8)), FREE.into()],
        ),
        // -Z: the read-again pass counts only its accesses.
        (
            &["-Z", "1M"],
            &[
                bytes_line(one_mib),
                format!("read again {}", bytes_line(mib)),
                FREE.into(),
            ],
        ),
        (
            &["-Z", "-r", "2", "1M"],
            &[
                format!(".{}", bytes_line(mib / 8 + 2 * mib)),
                format!(".read again {}", bytes_line(2 * mib)),
                FREE.into(),
            ],
        ),
        (
            &["--punch-holes", "64K"],
            &[bytes_line(73728), "punch holes done".into(), FREE.into()],
        ),
        (
            &["--init-time", "64K"],
            &[
                "the initialization time is S secs U usecs".into(),
                bytes_line(73728),
                FREE.into(),
            ],
        ),
        (
            &["--show-addr", "64K"],
            &["P A".into(), bytes_line(73728), FREE.into()],
        ),
        (&["--touch-alloc", "64K"], &[bytes_line(73728), FREE.into()]),
        (&["-e", "1u", "64K"], &[bytes_line(73728), FREE.into()]),
        (&["-T", "1", "64K"], &[bytes_line(73728), FREE.into()]),
        (&["-S", "64K"], &[bytes_line(73728), FREE.into()]),
        (&["-A", "64K"], &[bytes_line(73728), FREE.into()]),
        (
            &["--runtime", "1", "64K"],
            &[bytes_line(73728), FREE.into()],
        ),
        // -b below the CPU count (2) is taken; -B maps /dev/zero from an offset.
        (&["-b", "1", "64K"], &[bytes_line(73728), FREE.into()]),
        (&["-B", "4096", "64K"], &[bytes_line(73728), FREE.into()]),
        (&["-a", "64K"], &[bytes_line(73728), FREE.into()]),
        // -d: the worker detaches before its sleep and goes on; the lines are the same.
        (&["-d", "64K"], &[bytes_line(73728), FREE.into()]),
        (&["--detach", "64K"], &[bytes_line(73728), FREE.into()]),
        (
            &["-M", "--madv-thp", "64K"],
            &[bytes_line(73728), FREE.into()],
        ),
        (&["--readon", "64K"], &[bytes_line(73728), FREE.into()]),
        (&["-m", "5", "-", "--", "64K"], &[]),
        // The SIZE of `-`: memparse gives 0.
        (&["-"], &[FREE.into()]),
        // -N with -P: mincore succeeds and usemem stops there.
        (&["-N", "-P", "1M"], &[]),
    ];
    for (args, want) in table {
        let r = run(args);
        let want: Vec<String> = want.to_vec();
        if args[0] == "-m" {
            // Two operands: usage, status 0.
            assert_eq!((r.status, r.out.len()), (0, 0), "{args:?}");
            continue;
        }
        assert_eq!(r.status, 0, "{args:?}: {:?}", r.err);
        assert_eq!(r.out, want, "{args:?}: stderr {:?}", r.err);
        assert!(r.err.is_empty(), "{args:?}: {:?}", r.err);
    }
}

#[test]
fn workers_print_their_own_lines() {
    for args in [
        &["-n", "2", "1M"][..],
        &["-t", "2", "1M"],
        &["-n", "2", "-t", "2", "64K"],
    ] {
        let r = run(args);
        let workers = if args.len() == 5 { 4 } else { 2 };
        let bytes = if args.len() == 5 { 73728 } else { 1179648 };
        assert_eq!(r.status, 0);
        assert_eq!(
            r.out.iter().filter(|l| **l == bytes_line(bytes)).count(),
            workers,
            "{args:?}"
        );
        assert_eq!(
            r.out.iter().filter(|l| *l == FREE).count(),
            workers,
            "{args:?}"
        );
        // Each line is printed when it happens: no free line before some throughput line.
        let first_free = r.out.iter().position(|l| l == FREE).unwrap();
        assert!(first_free >= 1, "{args:?}: {:?}", r.out);
    }
    // -x: every worker frees after all have walked.
    let r = run(&["-x", "-n", "2", "1M"]);
    assert_eq!(
        r.out,
        [
            bytes_line(1179648),
            bytes_line(1179648),
            FREE.into(),
            FREE.into()
        ]
    );
    // -n below 0: no process at all.
    assert!(run(&["-n", "-1", "1M"]).out.is_empty());
}

#[test]
fn usemems_errors_and_statuses() {
    let usage = format!("Usage: {NAME} [options] size[k|m|g|t]");
    // Missing SIZE, two SIZEs, -h: the usage on stderr, status 0.
    for args in [&[][..], &["1M", "2M"], &["-h"], &["--help", "--bogus"]] {
        let r = run(args);
        assert_eq!(r.status, 0, "{args:?}");
        assert!(r.out.is_empty(), "{args:?}");
        assert_eq!(r.err.first(), Some(&usage), "{args:?}");
    }
    // A bad option: glibc's line, the usage, status 1.
    for (args, diag) in [
        (
            &["--bogus", "1M"][..],
            "./usemem: unrecognized option '--bogus'",
        ),
        (&["-Q", "1M"], "./usemem: invalid option -- 'Q'"),
        (&["-n"], "./usemem: option requires an argument -- 'n'"),
        (
            &["--readonly=1", "1M"],
            "./usemem: option '--readonly' doesn't allow an argument",
        ),
    ] {
        let r = run(args);
        assert_eq!(r.status, 1, "{args:?}");
        assert_eq!(r.err[..2], [diag.to_string(), usage.clone()], "{args:?}");
    }
    // main's own checks.
    check(
        &["-y", "-u", "4096", "1M"],
        1,
        &[],
        &["./usemem: to sync tasks after allocation, unit must equal total size"],
    );
    check(
        &["-b", "2", "1M"],
        1,
        &[],
        &["./usemem: invalid binding interval 2 for 2 CPUs"],
    );
    check(
        &["--signal-read-count", "3", "64K"],
        1,
        &[],
        &["./usemem: --signal-read-count should use with --write-signal-read"],
    );
    check(
        &["-N", "1M"],
        1,
        &[],
        &["mincore failed with error: Cannot allocate memory"],
    );
    check(&["-L", "0"], 1, &[], &["invalid size", ": Success"]);
    check(&["-H", "0"], 1, &[], &["invalid size", ": Success"]);
    check(
        &["-H", "4M"],
        1,
        &[],
        &["Error creating shared segment: Cannot allocate memory "],
    );
    // The workers' failures are theirs: the parent exits 0.
    check(
        &["-U", "4M"],
        0,
        &[],
        &[
            "./usemem: MAP_HUGETLB relies on MAP_ANONYMOUS",
            "./usemem: mmap failed: Invalid argument",
        ],
    );
    check(
        &["-U", "-O", "4M"],
        0,
        &[],
        &["./usemem: mmap failed: Cannot allocate memory"],
    );
    check(
        &["--", "-5"],
        0,
        &[],
        &["./usemem: mmap failed: Cannot allocate memory"],
    );
    check(
        &["-a", "-O", "1M"],
        0,
        &[&bytes_line(1179648), FREE],
        &["./usemem: mmap options ignored for malloc()"],
    );
    // -E without -P: the workers touch MAP_FAILED and die of SIGSEGV, silently.
    let r = run(&["-E", "1M"]);
    assert_eq!((r.status, r.out.len(), r.err.len()), (0, 0, 0));
    assert!(
        r.notes.iter().any(|n| n.contains("SIGSEGV")),
        "{:?}",
        r.notes
    );
    // Verification on the second walk finds --main-write-data's value.
    check(
        &["--main-write-data", "5", "-r", "2", "64K"],
        0,
        &["."],
        &["Data wrong at offset 0x0. Expected 0x00000000, got 0x00000005"],
    );
    // -D names the next argument, which is also the SIZE (0).
    let dir = std::env::temp_dir().join(format!("usemem-lines-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let empty = dir.join("empty");
    let full = dir.join("full");
    std::fs::write(&empty, b"").unwrap();
    std::fs::write(&full, vec![0u8; 1 << 20]).unwrap();
    let (empty, full) = (empty.to_str().unwrap(), full.to_str().unwrap());
    check(&["-D", full, "--open-rw"], 0, &[FREE], &[]);
    // -f: an empty file dies of SIGBUS at its first page; a 1 MiB file is walked.
    let r = run(&["-f", empty, "1M"]);
    assert_eq!((r.status, r.out.len()), (0, 0));
    assert!(
        r.notes.iter().any(|n| n.contains("SIGBUS")),
        "{:?}",
        r.notes
    );
    check(&["-f", full, "1M"], 0, &[&bytes_line(1179648), FREE], &[]);
    // A path that cannot exist: under this test's own directory, in a subdirectory never made
    // (a "/nonexistent" path may exist on some machine).
    let missing = dir.join("never-made").join("file");
    let missing = missing.to_str().unwrap();
    check(
        &["-f", missing, "1M"],
        1,
        &[],
        &[&format!(
            "./usemem: failed to open `{missing}': No such file or directory"
        )],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--prealloc` forks the workers over the parent's mapping: with `--prefault` the parent's
/// pages are shared copy-on-write, and each child's walk breaks COW once per page (a write
/// fault and a copy each: the parent still maps the page). Every frame comes back when the
/// last mm exits. (The sharing itself is `engine/test.rs`'s unit test.)
#[test]
fn prealloc_workers_break_cow_once_per_page() {
    use usermm::stats::VmItem;
    let pages = (1i64 << 20) / 4096;
    let m = machine();
    let go = |args: &[&str]| {
        let cap = Arc::new(Capture::default());
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let r = usemem::run_args(
            &m,
            NAME,
            &args,
            Arc::clone(&cap) as Arc<dyn Io>,
            Hooks::default(),
            "",
        )
        .unwrap();
        assert_eq!(r.status, 0, "{args:?}: {}", cap.stderr());
        // No note: fork is the engine's own now.
        assert_eq!(cap.stderr(), "", "{args:?}");
        let out: Vec<String> = cap.stdout().lines().map(norm).collect();
        // Nothing leaked: every data page and page table is back.
        let (b, a) = (&r.meminfo_before, &r.meminfo_after);
        assert_eq!(a.anon_pages, 0, "{args:?}");
        assert_eq!(a.page_tables, b.page_tables, "{args:?}");
        assert_eq!(a.mem_available, b.mem_available, "{args:?}");
        (
            r.vmstat_delta.get(VmItem::Pgfault),
            r.vmstat_delta.get(VmItem::NrAnonPages),
            out,
        )
    };
    // The parent alone (-n below 0 forks nothing): it populates its pages.
    let (fault0, _, out) = go(&["-n", "-1", "-P", "-F", "1M"]);
    assert!(out.is_empty());
    assert_eq!(fault0, pages);
    for n in [1i64, 3] {
        let nproc = n.to_string();
        let (faults, anon, out) = go(&["-n", &nproc, "-P", "-F", "1M"]);
        assert_eq!(out, vec![bytes_line(1179648); n as usize]);
        assert_eq!(faults - fault0, n * pages, "-n {n}");
        assert_eq!(anon, 0);
    }
    m.validate().unwrap();
}

/// More workers than the host threads a run may hold run in waves; the barriers hold the
/// first wave, so `-x` and `-y` still end.
#[test]
fn workers_beyond_the_thread_budget_run_in_waves() {
    let m = machine();
    for args in [
        &["-n", "8", "0"][..],
        &["-x", "-n", "7", "64K"],
        &["-y", "-t", "5", "64K"],
    ] {
        let cap = Arc::new(Capture::default());
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let r = usemem::run_args(
            &m,
            NAME,
            &args,
            Arc::clone(&cap) as Arc<dyn Io>,
            Hooks {
                max_threads: Some(3),
                ..Hooks::default()
            },
            "",
        )
        .unwrap();
        assert_eq!(r.status, 0);
        let n: usize = args[args.len() - 2].parse().unwrap();
        let out = cap.stdout();
        assert_eq!(
            out.lines()
                .filter(|l| l.ends_with("usecs to free memory"))
                .count(),
            n,
            "{args:?}: {out}"
        );
        assert!(cap.stderr().contains("waves of 3"), "{}", cap.stderr());
    }
    m.validate().unwrap();
}

/// `-g`: the menu's answers, through stdio's buffer, reach stdout with the throughput line.
#[test]
fn getchar_menu_reads_stdin() {
    let m = machine();
    let cap = Arc::new(Capture::with_input("l\nu\nq\n"));
    let r = usemem::run_args(
        &m,
        NAME,
        &["-g".to_string(), "64K".to_string()],
        Arc::clone(&cap) as Arc<dyn Io>,
        Hooks::default(),
        "",
    )
    .unwrap();
    assert_eq!(r.status, 0);
    let out = cap.stdout();
    let order: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("done!") || l.contains("Quitting") || l.contains("KB/s"))
        .collect();
    assert_eq!(order.len(), 4, "{out}");
    // Each answer follows the menu's prompt, which ends without a newline, as usemem's does.
    assert!(order[0].ends_with("locking memory ..... done!"), "{out}");
    assert!(order[1].ends_with("unlocking memory ..... done!"), "{out}");
    assert!(order[2].ends_with("Quitting now"), "{out}");
    assert!(order[3].contains("73728 bytes / "), "{out}");
    // The menu is usemem's box: 13 lines, two blank ones, then the prompt; three times.
    let menu = format!(
        "{rule}\n{blank}\n*\t\t    Enter an option\t\t\t *\n{rule}\n{blank}\n\
         *\t\t    a ----> automate\t\t\t *\n*\t\t    l ----> locking\t\t\t *\n\
         *\t\t    r ----> remapping\t\t\t *\n*\t\t    u ----> unlocking\t\t\t *\n\
         *\t\t    q ----> quit\t\t\t *\n{blank}\n{blank}\n{rule}\n\n\nyour option: ",
        rule = "*".repeat(58),
        blank = "*\t\t\t\t\t\t\t *",
    );
    assert!(out.starts_with(&menu), "{out}");
    assert_eq!(out.matches(&menu).count(), 3, "{out}");
    m.validate().unwrap();
}

/// `--show-addr -P` with stdout a file: the parent's line stays in its stdio buffer, which
/// each forked process prints with its first line (or at its exit), and the parent at its
/// own exit; a lone process, a lone `--init-time` flush and a terminal print it once.
#[test]
fn parents_unflushed_line_is_printed_by_every_fork_to_a_file() {
    let lines = |io: Capture, args: &[&str]| -> Vec<String> {
        let m = machine();
        let r = run_with_io(&m, io, args);
        assert_eq!(r.status, 0);
        m.validate().unwrap();
        r.out
    };
    let addr = |out: &[String]| out.iter().filter(|l| *l == "P A").count();
    let args = ["--show-addr", "-P", "-n", "2", "64K"];
    let file = lines(Capture::as_file(), &args);
    assert_eq!(addr(&file), 3, "{file:?}");
    // Each process's copy comes before its throughput line; the parent's is last.
    assert_eq!(file.last().map(String::as_str), Some("P A"), "{file:?}");
    assert_eq!(file[0], "P A", "{file:?}");
    let tty = lines(Capture::default(), &args);
    assert_eq!(tty, ["P A", &bytes_line(73728), &bytes_line(73728)]);
    // Processes that start no thread (-t -1) still flush theirs at exit.
    let none = lines(
        Capture::as_file(),
        &["--show-addr", "-P", "-t", "-1", "-n", "2", "64K"],
    );
    assert_eq!(none, ["P A", "P A", "P A"]);
    // --init-time flushes before forking: one copy.
    let init = lines(
        Capture::as_file(),
        &["--show-addr", "-P", "--init-time", "64K"],
    );
    assert_eq!(addr(&init), 1, "{init:?}");
    // Without -P nothing is pending at the fork: each worker prints its own mapping once.
    let own = lines(Capture::as_file(), &["--show-addr", "-n", "2", "64K"]);
    assert_eq!(addr(&own), 2, "{own:?}");
}
