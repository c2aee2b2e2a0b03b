//! usemem's options as its command line sets them, and the value parsers it uses.
//!
//! Every field is what usemem's `main` leaves in its globals once `getopt_long` is done,
//! before any of them is acted on: numbers are kept with C's types and wrap-arounds (an `int`
//! from `strtol` keeps its low 32 bits, a negative `-s` is "forever"), sizes are `memparse`d,
//! and later options overwrite earlier ones. What the options *do* is in `worker/` and
//! `program.rs`; this file only holds them.
//!
//! # The value parsers
//! | parser | used for | behaviour (C library semantics) |
//! |---|---|---|
//! | [`memparse`] | SIZE, `-u`, `-j` | `strtoull(s, 0)` (`0x` hex, leading-`0` octal, a `-` negates), then one suffix letter `k/m/g/t` (either case) shifting by 10, 20, 30, 40 bits; any other character ends the number: `64Q` is 64, `1.5G` is 1 |
//! | [`strtol`] | `-n -t -r -s -b -T -B -m`, `--random-seed`, counts | base 10, leading blanks and a sign, digits until the first non-digit (none: 0), clamped to `i64` |
//! | [`strtoul0`] | `--main-write-data`, `--signal-write-data` | `strtoul(s, 0)` |
//! | [`time_parse`] | `-e` | `strtoul(s, 0)` ns, `u` suffix ×1000, `m` suffix ×1000000 |

use serde::Serialize;

/// `msync` flavour of `-S` / `-A` (the last given wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum MsyncMode {
    /// `-S`: `MS_SYNC`.
    Sync,
    /// `-A`: `MS_ASYNC`.
    Async,
}

impl MsyncMode {
    /// The `msync(2)` flag.
    pub fn flag(self) -> i32 {
        match self {
            MsyncMode::Async => 1,
            MsyncMode::Sync => 4,
        }
    }
}

/// Every option of vm-scalability's usemem (the release LKP builds), as parsed.
#[derive(Debug, Clone, Serialize)]
pub struct UsememOpts {
    /// Bytes each worker maps and walks: the positional SIZE (`opt_bytes`).
    pub size: u64,
    /// `-n`: worker processes (`nr_task`; 0 means 1, below 0 none).
    pub nproc: i32,
    /// `-t`: threads per process (`nr_thread`; 0: the process works itself; below 0: none).
    pub threads: i32,
    /// `-b`: bind worker k to CPU `k * bind % nr_cpu` (0: no binding).
    pub bind: i32,
    /// `-a`: `malloc` instead of `mmap`.
    pub malloc: bool,
    /// `-f FILE` (MAP_SHARED), or the file `-D` named; `None`: `/dev/zero`.
    pub file: Option<String>,
    /// `-f` was given: the mapping is `MAP_SHARED`.
    pub map_shared: bool,
    /// `-D` named a file that is not there (`argv[optind]` was past the end).
    pub file_missing: bool,
    /// `-B`: mmap offset.
    pub offset: i64,
    /// `-F`: `MAP_POPULATE`.
    pub prefault: bool,
    /// `-P`: allocate once before the workers start.
    pub prealloc: bool,
    /// `-u`: allocation unit (0: SIZE).
    pub unit: u64,
    /// `-j`: bytes between two accesses, at least 8 once parsing is over.
    pub step: u64,
    /// `-r`: walks per unit.
    pub repeat: i32,
    /// `-o`: read-only.
    pub readonly: bool,
    /// `-w`: open and map read-write even with `-o`.
    pub open_rw: bool,
    /// `-R`: random word order.
    pub random: bool,
    /// `--random-seed` (0: `time ^ gettid` of the first worker of a process).
    pub random_seed: u64,
    /// `-M`: mlock after the walk.
    pub mlock: bool,
    /// `-S` / `-A`: msync after each walk.
    pub msync: Option<MsyncMode>,
    /// `-d`: detach after the walk.
    pub detach: bool,
    /// `-s`: seconds to sleep before freeing (`i32::MAX` for a negative value: forever).
    pub sleep_secs: i32,
    /// `-T` / `--runtime`: stop walking after this many seconds (0: no limit).
    pub runtime_secs: i64,
    /// `-p`: file the detached pid is appended to.
    pub pid_file: Option<String>,
    /// `-g`: the interactive lock/remap menu on stdin.
    pub getchar: bool,
    /// `-q`: no progress dots.
    pub quiet: bool,
    /// `-L`: a SysV shared segment, touched, locked and unlocked.
    pub shm_lock: bool,
    /// `-D`: `posix_fadvise` WILLNEED then DONTNEED on the file.
    pub advise: bool,
    /// `-E`: mremap the preallocation to 10× its size.
    pub remap: bool,
    /// `-N`: mincore of the preallocation, then exit.
    pub mincore: bool,
    /// `-H`: a SysV hugetlb segment, mincore, mprotect, touch, then exit.
    pub mincore_hugepages: bool,
    /// `-W` / `--write-signal-read`: write, wait for SIGUSR1, read.
    pub write_signal_read: bool,
    pub signal_read_count: i32,
    pub signal_read_random: bool,
    pub signal_write_data: u64,
    /// `-y`: barrier after allocation (needs unit == SIZE).
    pub sync_rw: bool,
    /// `-x`: barrier before freeing.
    pub sync_free: bool,
    /// `-e`: busy-wait this many ns at each new page.
    pub delay_ns: u64,
    /// `-O`: `MAP_ANONYMOUS`.
    pub anonymous: bool,
    /// `-U`: `MAP_HUGETLB | MAP_HUGE_2MB`.
    pub hugetlb: bool,
    /// `-Z`: a second, read-only pass, printed as "read again".
    pub read_again: bool,
    pub punch_holes: bool,
    pub punch_holes_signal: bool,
    pub punch_holes_fallocate: bool,
    pub init_time: bool,
    pub touch_alloc: bool,
    pub main_write_data: u64,
    pub write_signal_write: bool,
    pub write_signal_madv_thp: bool,
    pub signal_loop: bool,
    pub signal_write_times: i32,
    pub signal_verify: bool,
    pub show_addr: bool,
    pub signal_fork: bool,
    pub memfd: bool,
    /// `--madv-thp`: MADV_HUGEPAGE after mmap.
    pub madv_thp: bool,
    pub madv_pageout: bool,
    pub first_access_speed: bool,
}

impl Default for UsememOpts {
    /// usemem with no option: one process, every word, one walk, `/dev/zero` private.
    fn default() -> Self {
        Self {
            size: 0,
            nproc: 0,
            threads: 0,
            bind: 0,
            malloc: false,
            file: None,
            map_shared: false,
            file_missing: false,
            offset: 0,
            prefault: false,
            prealloc: false,
            unit: 0,
            step: 8,
            repeat: 1,
            readonly: false,
            open_rw: false,
            random: false,
            random_seed: 0,
            mlock: false,
            msync: None,
            detach: false,
            sleep_secs: 0,
            runtime_secs: 0,
            pid_file: None,
            getchar: false,
            quiet: false,
            shm_lock: false,
            advise: false,
            remap: false,
            mincore: false,
            mincore_hugepages: false,
            write_signal_read: false,
            signal_read_count: 0,
            signal_read_random: false,
            signal_write_data: 0,
            sync_rw: false,
            sync_free: false,
            delay_ns: 0,
            anonymous: false,
            hugetlb: false,
            read_again: false,
            punch_holes: false,
            punch_holes_signal: false,
            punch_holes_fallocate: false,
            init_time: false,
            touch_alloc: false,
            main_write_data: 0,
            write_signal_write: false,
            write_signal_madv_thp: false,
            signal_loop: false,
            signal_write_times: 1,
            signal_verify: false,
            show_addr: false,
            signal_fork: false,
            memfd: false,
            madv_thp: false,
            madv_pageout: false,
            first_access_speed: false,
        }
    }
}

impl UsememOpts {
    /// Processes the run starts (`-n`, 0 meaning 1; none below 0).
    pub fn processes(&self) -> u64 {
        match self.nproc {
            0 => 1,
            n if n < 0 => 0,
            n => n as u64,
        }
    }

    /// Threads each process starts (0: the process is the worker, or none works below 0).
    pub fn threads_per_process(&self) -> u64 {
        self.threads.max(0) as u64
    }

    /// Workers in each process: its `-t` threads, the process itself without `-t`, and none
    /// for a negative `-t` — usemem's loop that starts the threads then runs zero times, so
    /// each process starts nothing, prints nothing and ends.
    pub fn workers_per_process(&self) -> u64 {
        match self.threads {
            0 => 1,
            t if t < 0 => 0,
            t => t as u64,
        }
    }

    /// Workers that walk: processes × [`Self::workers_per_process`].
    pub fn workers(&self) -> u64 {
        self.processes() * self.workers_per_process()
    }

    /// Words between two accesses: `step / 8`, at least 1.
    pub fn stride_words(&self) -> u64 {
        (self.step / 8).max(1)
    }

    /// The allocation unit a worker uses (`-u`, or SIZE).
    pub fn unit_bytes(&self) -> u64 {
        if self.unit == 0 {
            self.size
        } else {
            self.unit
        }
    }

    /// Walks per unit (a non-positive `-r` walks none).
    pub fn repeats(&self) -> u64 {
        self.repeat.max(0) as u64
    }

    /// Does any option wait for SIGUSR1?
    pub fn uses_sigusr1(&self) -> bool {
        self.write_signal_read
            || self.write_signal_write
            || self.write_signal_madv_thp
            || self.punch_holes_signal
            || self.signal_fork
    }

    /// The option that makes a run wait for something from outside — SIGUSR1, or a kill
    /// to end a loop or a sleep — which a virtual run, with no host clock and no sender,
    /// cannot get: `None` when nothing does.
    pub fn waits_outside(&self) -> Option<&'static str> {
        [
            (
                self.write_signal_read,
                "-W (--write-signal-read) waits for SIGUSR1",
            ),
            (
                self.write_signal_write,
                "--write-signal-write waits for SIGUSR1",
            ),
            (
                self.write_signal_madv_thp,
                "--write-signal-madv-thp waits for SIGUSR1",
            ),
            (
                self.punch_holes_signal,
                "--signal-punch-holes waits for SIGUSR1",
            ),
            (self.signal_fork, "--signal-fork waits for SIGUSR1"),
            (
                self.signal_loop,
                "--signal-loop repeats until the process is killed",
            ),
            (
                self.sleep_secs == i32::MAX,
                "a negative -s sleeps until the process is killed",
            ),
            (
                self.getchar,
                "-g reads its menu from stdin, which virtual time cannot wait on",
            ),
        ]
        .into_iter()
        .find_map(|(on, what)| on.then_some(what))
    }

    /// Why this run would never end on any clock, if it would not: usemem's `delay` compares
    /// the nanoseconds within the current second, which never reach a second, so an `-e` of
    /// a second or more spins forever on the first page (the engine, the host and the C
    /// program alike).
    pub fn never_ends(&self) -> Option<String> {
        (self.delay_ns >= 1_000_000_000).then(|| {
            format!(
                "-e {}: a delay of a second or more never ends (usemem's delay compares the \
                 clock's nanoseconds within a second); the most is 999999999 ns",
                self.delay_ns
            )
        })
    }

    /// The write-then-signal modes that suppress the first throughput line.
    pub fn signal_phase(&self) -> bool {
        self.write_signal_read || self.write_signal_write || self.write_signal_madv_thp
    }

    /// Is the mapping read-only (`-o` without `-w`)?
    pub fn prot_readonly(&self) -> bool {
        self.readonly && !self.open_rw
    }
}

/// The kernel's `memparse` as usemem has it: `strtoull(s, 0)` and one binary suffix.
///
/// ```
/// use usermm_workloads::usemem::memparse;
/// assert_eq!(memparse("64Q"), 64);
/// assert_eq!(memparse("1.5G"), 1);
/// assert_eq!(memparse("0x10k"), 16 << 10);
/// assert_eq!(memparse("010"), 8);
/// ```
pub fn memparse(s: &str) -> u64 {
    let (n, rest) = strtoull(s, 0);
    let shift = match rest.bytes().next() {
        Some(b'T' | b't') => 40,
        Some(b'G' | b'g') => 30,
        Some(b'M' | b'm') => 20,
        Some(b'K' | b'k') => 10,
        _ => 0,
    };
    // Each fall-through step is a `<<= 10` on an unsigned long long: high bits fall off.
    n << shift
}

/// `strtoull(s, &end, base)` with base 0 or 10: the value and what follows the number.
/// Out of range gives `u64::MAX`; a leading `-` negates (modulo 2^64), as C's does.
pub fn strtoull(s: &str, base: u32) -> (u64, &str) {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let b = t.as_bytes();
    let (radix, start) = if base == 0 || base == 16 {
        if b.len() >= 2
            && b[0] == b'0'
            && (b[1] | 0x20) == b'x'
            && b.get(2).is_some_and(u8::is_ascii_hexdigit)
        {
            (16, 2)
        } else if base == 0 && b.first() == Some(&b'0') {
            (8, 0)
        } else if base == 0 {
            (10, 0)
        } else {
            (16, 0)
        }
    } else {
        (base, 0)
    };
    let digits = b[start..]
        .iter()
        .take_while(|c| (**c as char).is_digit(radix))
        .count();
    if digits == 0 {
        // No number at all: C returns 0 and leaves `end` at the start of the string.
        return (0, s);
    }
    let mut v: u64 = 0;
    let mut overflow = false;
    for c in &b[start..start + digits] {
        let d = u64::from((*c as char).to_digit(radix).unwrap_or(0));
        match v
            .checked_mul(u64::from(radix))
            .and_then(|x| x.checked_add(d))
        {
            Some(x) => v = x,
            None => overflow = true,
        }
    }
    let v = if overflow {
        u64::MAX
    } else if neg {
        v.wrapping_neg()
    } else {
        v
    };
    (v, &t[start + digits..])
}

/// `strtol(s, NULL, 10)`: clamped to `i64` on overflow, 0 without digits.
pub fn strtol(s: &str) -> i64 {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let mut v: i128 = 0;
    for c in t.bytes().take_while(u8::is_ascii_digit) {
        v = (v * 10 + i128::from(c - b'0')).min(i128::from(i64::MAX) + 1);
    }
    let v = if neg { -v } else { v };
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// `(int) strtol(s, NULL, 10)`: the low 32 bits, as C's conversion to `int` keeps them.
pub fn strtoi(s: &str) -> i32 {
    strtol(s) as i32
}

/// `strtoul(s, NULL, 0)`.
pub fn strtoul0(s: &str) -> u64 {
    strtoull(s, 0).0
}

/// usemem's `time_parse` for `-e`: ns, or µs with `u`, or ms with `m`.
pub fn time_parse(s: &str) -> u64 {
    let (n, rest) = strtoull(s, 0);
    match rest.bytes().next() {
        Some(b'm') => n.wrapping_mul(1_000_000),
        Some(b'u') => n.wrapping_mul(1000),
        _ => n,
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn memparse_is_strtoull_and_one_suffix() {
        for (s, v) in [
            ("0", 0),
            ("64Q", 64),
            ("1.5G", 1),
            ("1G", 1 << 30),
            ("1g", 1 << 30),
            ("4k", 4096),
            ("2T", 2 << 40),
            ("0x200000", 0x200000),
            ("0X10m", 16 << 20),
            ("010", 8),
            ("08", 0), // octal stops at 8
            ("  12", 12),
            ("+3k", 3072),
            ("-1", u64::MAX),
            ("-", 0),
            ("", 0),
            ("abc", 0),
            ("k", 0),
            ("44739242", 44739242),
            ("99999999999999999999", u64::MAX),
            ("0x", 0),
            ("16777216T", 0), // 2^24 << 40 = 2^64: the shift drops every bit
        ] {
            assert_eq!(memparse(s), v, "{s:?}");
        }
    }

    #[test]
    fn strtol_like_c() {
        for (s, v) in [
            ("2", 2),
            ("-1", -1),
            ("x", 0),
            ("1e3", 1),
            ("", 0),
            (" 7z", 7),
            ("99999999999999999999999", i64::MAX),
            ("-99999999999999999999999", i64::MIN),
        ] {
            assert_eq!(strtol(s), v, "{s:?}");
        }
        assert_eq!(strtoi("4294967295"), -1);
        assert_eq!(strtoi("4294967296"), 0);
        assert_eq!(strtoi("99999999999999999999999"), -1);
    }

    #[test]
    fn time_parse_suffixes() {
        assert_eq!(time_parse("100"), 100);
        assert_eq!(time_parse("1u"), 1000);
        assert_eq!(time_parse("2m"), 2_000_000);
        assert_eq!(time_parse("0x10"), 16);
    }
}
