//! usemem's command line, read the way glibc's `getopt_long` reads it.
//!
//! usemem hands its arguments to `getopt_long` with the short options
//! `aAB:f:FPp:gqowRMm:n:t:b:ds:T:Sr:u:j:e:EHDNLWyxOUZh` and its table of long names, so a
//! command line that LKP or a case script wrote means here what it means there:
//!
//! - **Permutation**: options and operands may be mixed (`usemem 1G -n 2`); the operands are
//!   collected in order. `--` ends the options. With `POSIXLY_CORRECT` in the environment the
//!   first operand ends them, as glibc does.
//! - **Clusters and attached values**: `-on2` is `-o -n 2`; `-n2`, `-n 2`, `--nproc=2` and
//!   `--nproc 2` are the same; a value is taken even if it starts with `-` (`-s -1`).
//! - **Abbreviations**: a long name may be shortened to any prefix that is unique (`--readon`).
//!   A prefix of several is ambiguous *unless* every other candidate has the same argument
//!   kind and meaning as the first (glibc's rule: `--signal-w 5` is `--signal-write-data 5`);
//!   the diagnostic lists the first candidate and those that differ from it, in table order.
//! - **The table's own quirks**: the long names are usemem's (`--Lock`, `--advice`,
//!   `--mncr_hgpgs`, `--sync-rw`); `-O`, `-N`, `-W`, `-x` have no long form, and `--lock`,
//!   `--advise`, `--mincore` match nothing. `--numa-cpu` and `--numa-memory` are in the table
//!   but usemem is built without NUMA, so they end in `usage(1)` with no diagnostic.
//! - **Diagnostics and exits**: a bad option prints glibc's line (`NAME: invalid option --
//!   'Q'`, `unrecognized option '--bogus'`, `option requires an argument -- 'n'`, `option
//!   '--readonly' doesn't allow an argument`, `option '--s' is ambiguous; possibilities: ...`)
//!   then the usage, and exits 1; `-h`/`--help` prints the usage and exits 0 — all on stderr,
//!   at the point of the command line where usemem's loop meets them.
//!
//! No crate reproduces this (clap, `getopts` and `lexopt` each abbreviate, permute or word
//! their diagnostics differently), so it is written out here, from glibc's documented
//! behaviour and the outputs of usemem built from its sources; the tests pin each rule.

use super::opts::{memparse, strtoi, strtol, strtoul0, time_parse, MsyncMode, UsememOpts};

/// Short options and whether each takes a value (usemem's optstring).
const SHORT: &str = "aAB:f:FPp:gqowRMm:n:t:b:ds:T:Sr:u:j:e:EHDNLWyxOUZh";

/// One entry of usemem's long-option table: its name, whether it takes a value, and the short
/// option it stands for (`'\0'`: a long-only option).
#[derive(Debug, Clone, Copy)]
struct LongOpt {
    name: &'static str,
    value: bool,
    short: char,
}

const fn lo(name: &'static str, value: bool, short: char) -> LongOpt {
    LongOpt { name, value, short }
}

/// usemem's long options, in its table's order (the order ambiguity diagnostics list them).
const LONG: &[LongOpt] = &[
    lo("malloc", false, 'a'),
    lo("unit", true, 'u'),
    lo("step", true, 'j'),
    lo("mlock", false, 'M'),
    lo("readonly", false, 'o'),
    lo("open-rw", false, 'w'),
    lo("quiet", false, 'q'),
    lo("random", false, 'R'),
    lo("msync", false, 'S'),
    lo("msync-async", false, 'A'),
    lo("nproc", true, 'n'),
    lo("thread", true, 't'),
    lo("bind", true, 'b'),
    lo("prealloc", false, 'P'),
    lo("prefault", false, 'F'),
    lo("repeat", true, 'r'),
    lo("file", true, 'f'),
    lo("offset", true, 'B'),
    lo("pid-file", true, 'p'),
    lo("detach", false, 'd'),
    lo("sleep", true, 's'),
    lo("runtime", true, 'T'),
    lo("getchar", false, 'g'),
    lo("Lock", false, 'L'),
    lo("advice", false, 'D'),
    lo("remap", false, 'E'),
    lo("mncr_hgpgs", false, 'H'),
    lo("sync-rw", false, 'y'),
    lo("delay", true, 'e'),
    lo("hugetlb", false, 'U'),
    lo("read-again", false, 'Z'),
    lo("punch-holes", false, '\0'),
    lo("signal-punch-holes", false, '\0'),
    lo("fallocate-punch-holes", false, '\0'),
    lo("init-time", false, '\0'),
    lo("touch-alloc", false, '\0'),
    lo("signal-read-count", true, '\0'),
    lo("signal-read-random", false, '\0'),
    lo("signal-write-data", true, '\0'),
    lo("random-seed", true, '\0'),
    lo("main-write-data", true, '\0'),
    lo("write-signal-write", false, '\0'),
    lo("write-signal-madv-thp", false, '\0'),
    lo("signal-loop", false, '\0'),
    lo("signal-write-times", true, '\0'),
    lo("signal-verify", false, '\0'),
    lo("show-addr", false, '\0'),
    lo("signal-fork", false, '\0'),
    lo("memfd", false, '\0'),
    lo("madv-thp", false, '\0'),
    lo("numa-cpu", true, '\0'),
    lo("numa-memory", true, '\0'),
    lo("madv-pageout", false, '\0'),
    lo("first-access-speed", false, '\0'),
    lo("help", false, 'h'),
];

/// What reading the command line came to.
#[derive(Debug, Clone)]
pub enum Parsed {
    /// The options, and the operands in order (usemem needs exactly one: SIZE).
    Options {
        opts: Box<UsememOpts>,
        operands: Vec<String>,
    },
    /// usemem stops inside its option loop: print `diagnostic` (if any) and the usage on
    /// stderr, exit with `status` (0 for `-h`, 1 for a bad option).
    Usage {
        diagnostic: Option<String>,
        status: i32,
    },
}

/// Does short option `c` exist, and does it take a value?
fn short_kind(c: char) -> Option<bool> {
    if c == ':' {
        return None;
    }
    let i = SHORT.find(c)?;
    Some(SHORT[i + c.len_utf8()..].starts_with(':'))
}

/// Read `args` (without the program name) as usemem does; `name` is its `argv[0]` for the
/// diagnostics. `posixly_correct` is whether `POSIXLY_CORRECT` is set.
pub fn parse(name: &str, args: &[String], posixly_correct: bool) -> Parsed {
    let mut opts = UsememOpts::default();
    let mut operands = Vec::new();
    let bad = |msg: String| Parsed::Usage {
        diagnostic: Some(format!("{name}: {msg}")),
        status: 1,
    };
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            operands.extend(args[i + 1..].iter().cloned());
            break;
        }
        if !a.starts_with('-') || a == "-" {
            if posixly_correct {
                operands.extend(args[i..].iter().cloned());
                break;
            }
            operands.push(a.clone());
            i += 1;
            continue;
        }
        if let Some(body) = a.strip_prefix("--") {
            let (key, inline) = match body.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (body, None),
            };
            let opt = match find_long(key) {
                Ok(o) => o,
                Err(LongErr::Unknown) => return bad(format!("unrecognized option '--{body}'")),
                Err(LongErr::Ambiguous(list)) => {
                    let names: String = list.iter().map(|n| format!(" '--{n}'")).collect();
                    return bad(format!(
                        "option '--{key}' is ambiguous; possibilities:{names}"
                    ));
                }
            };
            let value = if opt.value {
                match inline {
                    Some(v) => Some(v.to_string()),
                    None if i + 1 < args.len() => {
                        i += 1;
                        Some(args[i].clone())
                    }
                    None => return bad(format!("option '--{}' requires an argument", opt.name)),
                }
            } else {
                if inline.is_some() {
                    return bad(format!("option '--{}' doesn't allow an argument", opt.name));
                }
                None
            };
            i += 1;
            let next = args.get(i).cloned();
            let r = if opt.short == '\0' {
                apply_long(&mut opts, opt.name, value.as_deref())
            } else {
                apply_short(&mut opts, opt.short, value.as_deref(), next)
            };
            if let Some(p) = r {
                return p;
            }
            continue;
        }
        // A cluster of short options.
        let chars: Vec<(usize, char)> = a.char_indices().skip(1).collect();
        let mut k = 0;
        let mut consumed_next = false;
        while k < chars.len() {
            let (at, c) = chars[k];
            let last = k + 1 == chars.len();
            let Some(takes) = short_kind(c) else {
                return bad(format!("invalid option -- '{c}'"));
            };
            if takes {
                let rest = &a[at + c.len_utf8()..];
                let value = if !rest.is_empty() {
                    rest.to_string()
                } else if i + 1 < args.len() {
                    consumed_next = true;
                    args[i + 1].clone()
                } else {
                    return bad(format!("option requires an argument -- '{c}'"));
                };
                if let Some(p) = apply_short(&mut opts, c, Some(&value), None) {
                    return p;
                }
                break;
            }
            // `-D` names the file at `argv[optind]`: the next argument once this cluster is
            // done, the cluster itself while it is not.
            let at_optind = if last {
                args.get(i + 1).cloned()
            } else {
                Some(a.clone())
            };
            if let Some(p) = apply_short(&mut opts, c, None, at_optind) {
                return p;
            }
            k += 1;
        }
        i += if consumed_next { 2 } else { 1 };
    }
    if opts.step < 8 {
        opts.step = 8;
    }
    Parsed::Options {
        opts: Box::new(opts),
        operands,
    }
}

enum LongErr {
    Unknown,
    Ambiguous(Vec<&'static str>),
}

/// glibc's long-option lookup: an exact name, else a unique prefix, else a prefix whose other
/// candidates all mean what the first does.
fn find_long(key: &str) -> Result<LongOpt, LongErr> {
    if let Some(o) = LONG.iter().find(|o| o.name == key) {
        return Ok(*o);
    }
    let mut cands = LONG.iter().filter(|o| o.name.starts_with(key));
    let Some(first) = cands.next() else {
        return Err(LongErr::Unknown);
    };
    let differ: Vec<&'static str> = cands
        .filter(|o| o.value != first.value || o.short != first.short)
        .map(|o| o.name)
        .collect();
    if differ.is_empty() {
        return Ok(*first);
    }
    let mut list = vec![first.name];
    list.extend(differ);
    // Table order (the first candidate is the earliest anyway).
    Err(LongErr::Ambiguous(list))
}

/// Apply short option `c` (or the long option standing for it). `at_optind` is the argument
/// `getopt` would leave at `argv[optind]` (only `-D` looks at it).
fn apply_short(
    o: &mut UsememOpts,
    c: char,
    v: Option<&str>,
    at_optind: Option<String>,
) -> Option<Parsed> {
    let v = v.unwrap_or("");
    match c {
        'a' => o.malloc = true,
        'u' => o.unit = memparse(v),
        'j' => o.step = memparse(v),
        'A' => o.msync = Some(MsyncMode::Async),
        'f' => {
            o.file = Some(v.to_string());
            o.file_missing = false;
            o.map_shared = true;
        }
        'B' => o.offset = strtol(v),
        'p' => o.pid_file = Some(v.to_string()),
        'g' => o.getchar = true,
        // "Kept for compatibility": sets a size that the operand always replaces.
        'm' => {}
        'n' => o.nproc = strtoi(v),
        't' => o.threads = strtoi(v),
        'b' => o.bind = strtoi(v),
        'P' => o.prealloc = true,
        'F' => o.prefault = true,
        'M' => o.mlock = true,
        'q' => o.quiet = true,
        's' => {
            o.sleep_secs = strtoi(v);
            if o.sleep_secs < 0 {
                o.sleep_secs = i32::MAX;
            }
        }
        'T' => o.runtime_secs = strtol(v),
        'd' => o.detach = true,
        'r' => o.repeat = strtoi(v),
        'R' => o.random = true,
        'S' => o.msync = Some(MsyncMode::Sync),
        'o' => o.readonly = true,
        'w' => o.open_rw = true,
        'h' => return Some(usage(0)),
        'L' => o.shm_lock = true,
        'D' => {
            o.file_missing = at_optind.is_none();
            o.file = at_optind;
            o.advise = true;
        }
        'E' => o.remap = true,
        'N' => o.mincore = true,
        'H' => o.mincore_hugepages = true,
        'W' => o.write_signal_read = true,
        'y' => o.sync_rw = true,
        'x' => o.sync_free = true,
        'e' => o.delay_ns = time_parse(v),
        'O' => o.anonymous = true,
        'U' => o.hugetlb = true,
        'Z' => o.read_again = true,
        _ => return Some(usage(1)),
    }
    None
}

/// usemem's `usage(status)`: the help text, exit `status` (0 for `-h`, 1 for an unknown
/// option).
fn usage(status: i32) -> Parsed {
    Parsed::Usage {
        diagnostic: None,
        status,
    }
}

/// Apply a long-only option.
fn apply_long(o: &mut UsememOpts, name: &str, v: Option<&str>) -> Option<Parsed> {
    let v = v.unwrap_or("");
    match name {
        "punch-holes" => o.punch_holes = true,
        "signal-punch-holes" => o.punch_holes_signal = true,
        "fallocate-punch-holes" => o.punch_holes_fallocate = true,
        "init-time" => o.init_time = true,
        "touch-alloc" => o.touch_alloc = true,
        "signal-read-count" => o.signal_read_count = strtoi(v),
        "signal-read-random" => o.signal_read_random = true,
        "random-seed" => o.random_seed = strtol(v) as u64,
        "main-write-data" => o.main_write_data = strtoul0(v),
        "write-signal-write" => o.write_signal_write = true,
        "write-signal-madv-thp" => o.write_signal_madv_thp = true,
        "signal-loop" => o.signal_loop = true,
        "signal-write-times" => o.signal_write_times = strtoi(v),
        "signal-verify" => o.signal_verify = true,
        "signal-write-data" => o.signal_write_data = strtoul0(v),
        "show-addr" => o.show_addr = true,
        "signal-fork" => o.signal_fork = true,
        "memfd" => o.memfd = true,
        "madv-thp" => o.madv_thp = true,
        "madv-pageout" => o.madv_pageout = true,
        "first-access-speed" => o.first_access_speed = true,
        // numa-cpu, numa-memory: usemem is built without USE_NUMA.
        _ => return Some(usage(1)),
    }
    None
}

/// usemem's usage, in our words: the same first line (`Usage: NAME [options]
/// size[k|m|g|t]`), every option, and then the engine's flags (`usermm usemem`) or the
/// environment variables that set them (a `usemem` link).
pub fn usage_text(name: &str, engine_help: &str) -> String {
    let mut s = format!("Usage: {name} [options] size[k|m|g|t]\n");
    s.push_str(OPTIONS_HELP);
    s.push_str(engine_help);
    s
}

const OPTIONS_HELP: &str = "    -n|--nproc N        N worker processes (each its own address space)
    -t|--thread M       M threads in each process, each with its own mapping
    -b|--bind N         put worker k on CPU k*N mod the number of CPUs
    -a|--malloc         get the memory with malloc() (engine: an anonymous mmap)
    -f|--file FILE      map FILE shared instead of /dev/zero (engine: as shmem)
    -B|--offset BYTES   mmap offset
    -F|--prefault       MAP_POPULATE
    -P|--prealloc       map once before starting the workers, who share it
    -u|--unit SIZE      map and walk in SIZE pieces (over 32 pieces: freed at exit)
    -j|--step SIZE      bytes between two accesses (below 8: every word)
    -r|--repeat N       walk N times; writes check the previous walk's words
    -o|--readonly       map read-only and only read
    -w|--open-rw        keep open() and mmap() read-write with --readonly
    -R|--random         random word order
    --random-seed SEED  seed of the random order (default: time ^ thread id)
    -M|--mlock          mlock() the memory after the walk
    -S|--msync          msync(MS_SYNC) after each walk
    -A|--msync-async    msync(MS_ASYNC) after each walk
    -d|--detach         go to the background after the walk
    -s|--sleep SEC      sleep SEC seconds before freeing (below 0: forever)
    -T|--runtime SEC    stop walking after SEC seconds
    -p|--pid-file FILE  append the detached pid to FILE
    -g|--getchar        an interactive lock/unlock/remap menu on stdin
    -q|--quiet          no progress dots
    -L|--Lock           a SysV shared segment, touched, SHM_LOCKed and unlocked
    -D|--advice         posix_fadvise() the file named next (WILLNEED, DONTNEED)
    -E|--remap          mremap the preallocation to 10 times its size
    -N                  mincore() the preallocation, then stop
    -H|--mncr_hgpgs     a SysV hugetlb segment: mincore, mprotect, touch, then stop
    -W                  write, wait for SIGUSR1, then read
    --write-signal-write, --write-signal-madv-thp, --signal-loop, --signal-fork,
    --signal-read-count N, --signal-read-random, --signal-write-data D,
    --signal-write-times N, --signal-verify, --signal-punch-holes
                        more SIGUSR1-driven phases
    -y|--sync-rw        start the walk together once all have mapped (unit == SIZE)
    -x                  free together once all are done
    -e|--delay T        busy-wait T ns (Nu: us, Nm: ms) at each new page
    -O                  MAP_ANONYMOUS instead of /dev/zero
    -U|--hugetlb        MAP_HUGETLB | MAP_HUGE_2MB
    -Z|--read-again     read everything again and print it as \"read again\"
    --punch-holes [--fallocate-punch-holes]
                        MADV_DONTNEED (or punch) every other page after the walk
    --init-time         print the set-up time on its own line
    --touch-alloc       write every word right after mapping
    --main-write-data D write D instead of each word's index
    --show-addr         print each mapping's range
    --memfd             map a memfd instead of /dev/zero
    --madv-thp          MADV_HUGEPAGE after mmap
    --madv-pageout      MADV_COLD and MADV_PAGEOUT after the walk
    --first-access-speed  time from the first access, not from the start
    -h|--help           this message
";

#[cfg(test)]
mod test {
    use super::*;

    fn p(args: &[&str]) -> Parsed {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        parse("./usemem", &args, false)
    }

    fn ok(args: &[&str]) -> (UsememOpts, Vec<String>) {
        match p(args) {
            Parsed::Options { opts, operands } => (*opts, operands),
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn diag(args: &[&str]) -> (Option<String>, i32) {
        match p(args) {
            Parsed::Usage { diagnostic, status } => (diagnostic, status),
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn permutation_clusters_and_values() {
        let (o, ops) = ok(&["1G", "-on2", "--step=4096", "-s", "-1", "x"]);
        assert!(o.readonly);
        assert_eq!(o.nproc, 2);
        assert_eq!(o.step, 4096);
        assert_eq!(o.sleep_secs, i32::MAX);
        assert_eq!(ops, ["1G", "x"]);
        let (o, ops) = ok(&["-n", "3", "--", "-5", "-n"]);
        assert_eq!(o.nproc, 3);
        assert_eq!(ops, ["-5", "-n"]);
        let (_, ops) = ok(&["-"]);
        assert_eq!(ops, ["-"]);
        let posix = parse("u", &["1M".into(), "-n".into(), "2".into()], true);
        let Parsed::Options { opts, operands } = posix else {
            panic!()
        };
        assert_eq!((opts.nproc, operands.len()), (0, 3));
    }

    #[test]
    fn abbreviations_follow_glibc() {
        assert!(ok(&["--readon", "1M"]).0.readonly);
        assert_eq!(ok(&["--ru", "5", "1M"]).0.runtime_secs, 5);
        // Candidates that all mean the same as the first are no ambiguity.
        assert_eq!(ok(&["--signal-w", "5", "1M"]).0.signal_write_data, 5);
        let (d, s) = diag(&["--si", "1M"]);
        assert_eq!(s, 1);
        assert_eq!(
            d.unwrap(),
            "./usemem: option '--si' is ambiguous; possibilities: '--signal-punch-holes' \
             '--signal-read-count' '--signal-write-data' '--signal-write-times'"
        );
        let (d, _) = diag(&["--r", "1M"]);
        assert_eq!(
            d.unwrap(),
            "./usemem: option '--r' is ambiguous; possibilities: '--readonly' '--random' \
             '--repeat' '--runtime' '--remap' '--read-again' '--random-seed'"
        );
        // `--mem` is a prefix of `--memfd` only.
        assert!(ok(&["--mem", "1M"]).0.memfd);
    }

    #[test]
    fn diagnostics_are_glibcs() {
        for (args, want) in [
            (
                &["--bogus", "1M"][..],
                "./usemem: unrecognized option '--bogus'",
            ),
            (
                &["--bogus=3", "1M"],
                "./usemem: unrecognized option '--bogus=3'",
            ),
            (&["-Q", "1M"], "./usemem: invalid option -- 'Q'"),
            (&["-n"], "./usemem: option requires an argument -- 'n'"),
            (
                &["--nproc"],
                "./usemem: option '--nproc' requires an argument",
            ),
            (
                &["--readonly=3", "1M"],
                "./usemem: option '--readonly' doesn't allow an argument",
            ),
            (
                &["--reado=3", "1M"],
                "./usemem: option '--readonly' doesn't allow an argument",
            ),
            (&["--lock", "1M"], "./usemem: unrecognized option '--lock'"),
        ] {
            let (d, s) = diag(args);
            assert_eq!((d.as_deref(), s), (Some(want), 1), "{args:?}");
        }
        // -h stops the loop at once, with status 0; a bad option before it wins.
        assert_eq!(diag(&["-h", "--bogus"]), (None, 0));
        assert_eq!(diag(&["--bogus", "-h"]).1, 1);
        assert_eq!(diag(&["--he"]), (None, 0));
        assert_eq!(diag(&["--numa-cpu", "0", "1M"]), (None, 1));
    }

    #[test]
    fn option_values() {
        let (o, _) = ok(&[
            "-j",
            "12",
            "-u",
            "0x1000",
            "-r",
            "99999999999999999999",
            "-e",
            "3u",
            "-B",
            "4096",
            "-f",
            "/tmp/x",
            "-S",
            "-A",
            "--random-seed",
            "7",
            "-t",
            "4294967296",
            "1M",
        ]);
        assert_eq!(o.step, 12);
        assert_eq!(o.unit, 4096);
        assert_eq!(o.repeat, -1);
        assert_eq!(o.delay_ns, 3000);
        assert_eq!(o.offset, 4096);
        assert!(o.map_shared);
        assert_eq!(o.msync, Some(MsyncMode::Async));
        assert_eq!(o.random_seed, 7);
        assert_eq!(o.threads, 0);
        assert_eq!(ok(&["-j", "0", "1"]).0.step, 8);
        assert_eq!(ok(&["-j", "5", "1"]).0.step, 8);
    }

    #[test]
    fn advise_names_the_next_argument() {
        // `-D FILE --open-rw`: FILE is also the operand (its size parses as 0).
        let (o, ops) = ok(&["-D", "/tmp/f", "--open-rw"]);
        assert_eq!(o.file.as_deref(), Some("/tmp/f"));
        assert!(!o.map_shared && o.advise && o.open_rw);
        assert_eq!(ops, ["/tmp/f"]);
        let (o, _) = ok(&["-D"]);
        assert!(o.file_missing && o.file.is_none());
        let (o, _) = ok(&["-Do", "1M"]);
        assert_eq!(o.file.as_deref(), Some("-Do"));
    }
}
