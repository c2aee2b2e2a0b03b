//! One usemem worker (a process, or one of its threads): map, walk, print, free — usemem's
//! `do_units`, `do_unit` and `do_rw_once`, on any [`Sys`].
//!
//! # What a worker does, in usemem's order
//! 1. Seed the random order (`--random-seed`, else `time ^ gettid` of the process's first
//!    thread), wait at the start barrier (unless `-y`), restart the clock for
//!    `--first-access-speed`.
//! 2. Unit by unit (`-u`, SIZE by default): map it (or use the preallocation), wait at the
//!    start barrier with `-y`, walk it `-r` times — a `.` on stdout before every walk but the
//!    first (not with `-q`), `msync` after each with `-S`/`-A` — and stop early once `-T`
//!    seconds have passed. The first [`MAX_POINTERS`] units are remembered for freeing.
//! 3. `"%lu bytes / %lu usecs = %lu KB/s"` unless nothing was counted or a signal mode
//!    (`-W` and the like) holds it back; `-Z`'s `"read again ..."` line.
//! 4. `-d`, `-M`, `--punch-holes` (`"punch holes done"`), `--madv-pageout`, the SIGUSR1
//!    phases, `-s`, the free barrier (`-x`), and `"%lu usecs to free memory"` — only when the
//!    memory is the worker's own (no `-P`) and at most 32 units were mapped: beyond, the
//!    units are left to the process's exit, as usemem leaves them.
//!
//! # The `bytes` figure
//! Per unit mapped by the worker, `unit / 8` (integer division) — with `-P` instead
//! `SIZE / 8` once, counted in `main` (and another `SIZE / 8` for `-E` and for `-L`, `SIZE`
//! for `-D`) — plus 8 for every word access. A walk of `b` bytes with step `s` visits the
//! words `0, s/8, 2·s/8, ...` below `b / 8` (`s` is at least 8, and only its whole words
//! count: a step of 12 visits every word). So `usemem 44739242` prints 50331645
//! (5592405 + 5592405 × 8) and `usemem -j 4100 16M` prints 2129920
//! (2097152 + 4096 × 8). The KB/s figure is `(bytes × 1000000 >> 10) / usecs` in 64-bit
//! unsigned arithmetic, `usecs` counted from `main`'s clock reading before the workers.
//!
//! # Where this differs from usemem
//! - usemem reads `ptrs[i]` past its 32 entries for `-Z` and `-M` when more units were
//!   mapped (undefined behaviour); here only the first 32 are read again or locked. With
//!   `-P`, `-Z` reads pointers usemem never set and its process dies; here it dies of SIGSEGV.
//! - A worker's buffer for the SIGUSR1 phases is its own last unit (usemem keeps one per
//!   process, whichever thread wrote it last).
//! - usemem divides by zero when a line would report 0 µs; here 0 µs reports as 1.

mod unit;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use serde::Serialize;

use super::opts::UsememOpts;
use super::rand48::Rand48;
use crate::usemem::sys::{strerror, Gate, MapFd, Stop, Sys};

/// usemem keeps at most this many allocations to free; beyond, teardown happens at exit.
pub const MAX_POINTERS: usize = 32;

/// The mmap(2) and madvise(2) flags usemem passes, with Linux's values: the engine's one
/// definition, which both [`Sys`] backends take (the host one hands them to the kernel as they
/// are; a test below checks them against libc's).
pub use usermm::mm::mman::{
    MADV_COLD, MADV_DONTNEED, MADV_HUGEPAGE, MADV_PAGEOUT, MAP_ANONYMOUS, MAP_HUGETLB,
    MAP_HUGE_2MB, MAP_POPULATE, MAP_PRIVATE, MAP_SHARED, PROT_READ, PROT_WRITE,
};
const PAGE_SIZE: u64 = 4096;

/// The part of usemem's globals that `main` settles before the workers start.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `argv[0]` as usemem prints it in its messages.
    pub name: String,
    pub opts: UsememOpts,
    /// Bytes `main` already counted for every worker (`-P`, `-E`, `-L`, `-D`).
    pub done_bytes: u64,
    /// What worker mappings map (`-O`: anonymous; after `-D`: a closed descriptor).
    pub fd: MapFd,
    /// `main`'s clock reading, µs (`None` with `-W` and no `--init-time`: never set).
    pub start_us: Option<u64>,
    /// What `main` printed without flushing before it forked (with stdout a file or a pipe,
    /// `--show-addr`'s line for `-P`'s mapping): every forked process has a copy of the
    /// buffer and prints it before its own first line, or at its exit if it prints none (not
    /// if a signal kills it); the parent prints its own copy when it exits.
    pub inherited_out: String,
}

impl Plan {
    /// usemem's mmap flags for a worker mapping.
    pub fn map_flags(&self) -> u32 {
        let o = &self.opts;
        let mut f = if o.map_shared {
            MAP_SHARED
        } else {
            MAP_PRIVATE
        };
        if o.prefault {
            f |= MAP_POPULATE;
        }
        if o.anonymous {
            f |= MAP_ANONYMOUS;
        }
        if o.hugetlb {
            f |= MAP_HUGETLB | MAP_HUGE_2MB;
        }
        f
    }

    /// usemem's protection for a worker mapping.
    pub fn prot(&self) -> u32 {
        if self.opts.prot_readonly() {
            PROT_READ
        } else {
            PROT_READ | PROT_WRITE
        }
    }

    /// The descriptor a mapping gets: -1 with `-O`, else the opened file.
    pub fn map_fd(&self) -> MapFd {
        if self.opts.anonymous {
            MapFd::Anon
        } else {
            self.fd
        }
    }
}

/// What the threads of one usemem process share: its globals after the fork.
#[derive(Debug)]
pub struct ProcState {
    /// `start_time` (µs; `u64::MAX`: not set).
    start_us: AtomicU64,
    /// `opt_random_seed` (0: not chosen yet).
    seed: AtomicU64,
    /// Some thread called `exit`: the process is gone.
    dead: AtomicBool,
    /// The preallocation in this process (`None`: usemem's `prealloc` is NULL).
    pub prealloc: Option<u64>,
    /// Its index among the processes (`do_task`'s `task_nr`).
    pub index: u64,
    /// This process's copy of [`Plan::inherited_out`], until it is printed or lost.
    inherited: Mutex<String>,
}

impl ProcState {
    pub fn new(plan: &Plan, prealloc: Option<u64>, index: u64) -> Self {
        ProcState {
            start_us: AtomicU64::new(plan.start_us.unwrap_or(u64::MAX)),
            seed: AtomicU64::new(plan.opts.random_seed),
            dead: AtomicBool::new(false),
            prealloc,
            index,
            inherited: Mutex::new(plan.inherited_out.clone()),
        }
    }

    /// What the process's stdio buffer still holds from the parent (empty once printed):
    /// its next flushed line, or its exit, prints it.
    pub fn take_inherited(&self) -> String {
        std::mem::take(&mut *self.inherited.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// What [`ProcState::take_inherited`] would take, left in place (a fork's other half).
    pub fn inherited_copy(&self) -> String {
        self.inherited
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A signal killed the process: its stdio buffer is never written.
    pub fn lose_inherited(&self) {
        self.take_inherited();
    }

    pub fn is_dead(&self) -> bool {
        self.dead.load(Relaxed)
    }

    pub fn set_start(&self, us: u64) {
        self.start_us.store(us, Relaxed);
    }

    fn start(&self) -> Option<u64> {
        match self.start_us.load(Relaxed) {
            u64::MAX => None,
            s => Some(s),
        }
    }
}

/// How a worker ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum End {
    /// `do_units` returned.
    Done,
    /// `exit(status)` from this thread (the process is gone).
    Exit(i32),
    /// Killed by a signal (`SIGSEGV`, `SIGBUS`, `SIGFPE`): the process is gone.
    Signal(String),
    /// Another thread of the process ended it.
    Gone,
}

/// One worker's figures and lines (for `--json` and the tests).
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkerRecord {
    pub worker: u64,
    pub cpu: u16,
    /// The first throughput line's figures (0 if it was not printed).
    pub bytes: u64,
    pub usecs: u64,
    pub kb_per_sec: u64,
    /// The free line's figure, if printed.
    pub free_usecs: Option<u64>,
    /// The lines the worker printed on stdout, in order: the first [`MAX_KEPT_LINES`].
    pub lines: Vec<String>,
    /// How many lines it printed past those (`-r` prints a dot per walk: a record keeps
    /// the first lines, not a billion dots).
    pub lines_not_kept: u64,
    pub end: Option<End>,
}

/// The most lines a [`WorkerRecord`] keeps.
pub const MAX_KEPT_LINES: usize = 1024;

/// The size of C stdio's buffer for a file or a pipe (glibc takes `st_blksize`, 4 KiB on
/// pipes and most file systems): a fully buffered stdout is written out each time it fills.
pub const STDIO_BUFSIZ: usize = 4096;

/// `((bytes * 1000000) >> 10) / usecs` as usemem computes it (64-bit, wrapping).
pub fn kb_per_sec(bytes: u64, usecs: u64) -> u64 {
    (bytes.wrapping_mul(1_000_000) >> 10) / usecs.max(1)
}

/// Accesses a walk of `words` words with `stride` makes: `ceil(words / stride)`.
pub fn accesses(words: u64, stride: u64) -> u64 {
    words.div_ceil(stride.max(1))
}

/// A worker: its machine, the plan, its process, and what it has printed.
pub struct Worker<'a, S: Sys> {
    pub sys: &'a S,
    pub plan: &'a Plan,
    pub proc: &'a ProcState,
    pub rec: WorkerRecord,
    rng: Rand48,
    /// What usemem prints through stdio without flushing (the `-g` menu): it reaches stdout
    /// with the next line usemem flushes, and never if the worker waits for ever.
    buffered: String,
    /// Everything printed is held here instead ([`Worker::hold_output`]).
    held: Option<String>,
}

impl<S: Sys> std::fmt::Debug for Worker<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("rec", &self.rec)
            .finish_non_exhaustive()
    }
}

type R<T> = Result<T, End>;

impl<'a, S: Sys> Worker<'a, S> {
    pub fn new(sys: &'a S, plan: &'a Plan, proc: &'a ProcState, worker: u64, cpu: u16) -> Self {
        Worker {
            sys,
            plan,
            proc,
            rec: WorkerRecord {
                worker,
                cpu,
                ..Default::default()
            },
            rng: Rand48::new(0),
            buffered: String::new(),
            held: None,
        }
    }

    /// From now on keep what this worker prints instead of writing it: `main`'s `printf`s into
    /// a fully buffered stdout before it forks ([`Plan::inherited_out`]).
    pub fn hold_output(&mut self) {
        self.held.get_or_insert_with(String::new);
    }

    /// What was held since [`Worker::hold_output`]; printing goes on being held.
    pub fn take_held(&mut self) -> String {
        self.held.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn opts(&self) -> &UsememOpts {
        &self.plan.opts
    }

    fn out(&mut self, s: &str) {
        let s = std::mem::take(&mut self.buffered) + s;
        if let Some(held) = &mut self.held {
            held.push_str(&s);
            // A full stdio buffer is written out, as stdio does: only what is left in it
            // is copied into the processes forked later.
            if held.len() >= STDIO_BUFSIZ {
                let mut full = held.len() / STDIO_BUFSIZ * STDIO_BUFSIZ;
                while !held.is_char_boundary(full) {
                    full -= 1;
                }
                let rest = held.split_off(full);
                let out = std::mem::replace(held, rest);
                self.sys.out(&out);
            }
            return;
        }
        // The parent's unflushed lines go out with this process's first flush.
        let inherited = self.proc.take_inherited();
        self.sys.out(&(inherited + &s));
        if self.rec.lines.len() < MAX_KEPT_LINES {
            self.rec.lines.push(s);
        } else {
            self.rec.lines_not_kept += 1;
        }
    }

    /// A `printf` that stays in stdio's buffer until the next flushed line.
    fn out_buffered(&mut self, s: &str) {
        self.buffered.push_str(s);
    }

    /// `exit(status)` from this thread: the whole process ends.
    fn exit(&self, status: i32) -> End {
        self.proc.dead.store(true, Relaxed);
        End::Exit(status)
    }

    /// `-S`: `msync` the `len` bytes at `p` a walk just covered (usemem skips an empty range).
    fn msync_walked(&self, p: u64, len: u64) -> R<()> {
        if let (Some(mode), true) = (self.opts().msync, len > 0) {
            if let Err(e) = self.sys.msync(p, len, mode.flag()) {
                return Err(self.fail(format!("msync failed with error {} \n", strerror(e))));
            }
        }
        Ok(())
    }

    /// An error line on stderr, then `exit(1)`.
    fn fail(&self, msg: String) -> End {
        self.sys.err(&msg);
        self.exit(1)
    }

    /// A signal kills the process.
    fn killed(&self, stop: Stop) -> End {
        match stop {
            Stop::Mismatch { idx, found } => self.fail(format!(
                "Data wrong at offset 0x{:x}. Expected 0x{:08x}, got 0x{:08x}\n",
                idx.wrapping_mul(8),
                idx,
                found
            )),
            Stop::Signal { name, detail } => {
                self.proc.dead.store(true, Relaxed);
                self.proc.lose_inherited();
                self.sys.note(&format!(
                    "usemem worker {} killed by {name} ({detail}), as usemem's process would be",
                    self.rec.worker
                ));
                End::Signal(name.to_string())
            }
        }
    }

    /// Has a sibling thread ended the process?
    fn alive(&self) -> R<()> {
        if self.proc.is_dead() {
            Err(End::Gone)
        } else {
            Ok(())
        }
    }

    /// usemem's `runtime_exceeded`: more than `-T` whole seconds since `start_time`.
    fn runtime_exceeded(&self) -> bool {
        let t = self.opts().runtime_secs;
        if t == 0 {
            return false;
        }
        let Some(start) = self.proc.start() else {
            return false;
        };
        if start / 1_000_000 == 0 {
            return false;
        }
        let now = self.sys.now_us() / 1_000_000;
        (now as i64).wrapping_sub((start / 1_000_000) as i64) > t
    }

    /// usemem's `output_statistics`: a throughput line timed from `start_time`.
    fn statistics(&mut self, bytes: u64, intro: &str) -> (u64, u64) {
        let start = self.proc.start().unwrap_or(0);
        let usecs = self.sys.now_us().wrapping_sub(start);
        let kbps = kb_per_sec(bytes, usecs);
        self.out(&format!(
            "{intro}{bytes} bytes / {usecs} usecs = {kbps} KB/s\n"
        ));
        (usecs, kbps)
    }

    /// `-g`: the lock/unlock/remap menu on stdin.
    fn menu(&mut self, mut p: u64, mut bytes: u64, rw: u64) -> R<u64> {
        self.print_menu();
        loop {
            let Some(c) = self.sys.getchar() else {
                // usemem spins on EOF for ever; wait for ever instead.
                loop {
                    self.sys.sleep_secs(3600);
                }
            };
            match c {
                b'\n' => {}
                b'a' => {
                    let _ = self.sys.mlock(p, bytes);
                    self.out_buffered("locking memory ..... done!\n\n");
                    p = self.remap_or_fail(p, bytes, "\n\n")?;
                    bytes *= 10;
                    self.out_buffered("remapping locked memory.....done!\n\n");
                    let _ = self.sys.munlock(p, bytes);
                    self.out_buffered("unlocking memory ..... done!\n\n");
                    return Ok(rw);
                }
                b'u' => {
                    let _ = self.sys.munlock(p, bytes);
                    self.out_buffered("unlocking memory ..... done!\n");
                    self.print_menu();
                }
                b'l' => {
                    let _ = self.sys.mlock(p, bytes);
                    self.out_buffered("locking memory ..... done!\n");
                    self.print_menu();
                }
                b'r' => {
                    p = self.remap_or_fail(p, bytes, "\n")?;
                    bytes *= 10;
                    self.out_buffered("remapping locked memory.....done!\n");
                    self.print_menu();
                }
                b'q' => {
                    self.out_buffered("Quitting now\n");
                    return Ok(rw);
                }
                _ => {}
            }
        }
    }

    fn remap_or_fail(&mut self, p: u64, bytes: u64, tail: &str) -> R<u64> {
        match self.sys.mremap(p, bytes, bytes.wrapping_mul(10)) {
            Ok(n) => Ok(n),
            Err(e) => Err(self.fail(format!("remap failed: {}{tail}", strerror(e)))),
        }
    }

    /// usemem's `-g` menu, byte for byte as it prints it: a box of asterisks (tabs inside),
    /// a title, the five keys, two blank lines and the prompt.
    fn print_menu(&mut self) {
        let rule = "*".repeat(58);
        let blank = format!("*{} *", "\t".repeat(7));
        let row = |text: &str| format!("*\t\t    {text}\t\t\t *");
        let mut m = vec![
            rule.clone(),
            blank.clone(),
            row("Enter an option"),
            rule.clone(),
        ];
        m.push(blank.clone());
        for (key, what) in [
            ('a', "automate"),
            ('l', "locking"),
            ('r', "remapping"),
            ('u', "unlocking"),
            ('q', "quit"),
        ] {
            m.push(row(&format!("{key} ----> {what}")));
        }
        m.extend([blank.clone(), blank, rule, String::new(), String::new()]);
        self.out_buffered(&format!("{}\nyour option: ", m.join("\n")));
    }

    /// usemem's `do_units`: the whole life of one worker.
    pub fn run(&mut self) -> End {
        let end = match self.units() {
            Ok(()) => End::Done,
            Err(e) => e,
        };
        // exit() flushes stdio.
        if !self.buffered.is_empty() {
            self.out("");
        }
        end
    }

    fn units(&mut self) -> R<()> {
        let o = self.opts().clone();
        if o.random || o.signal_read_random {
            self.seed_rng();
        }
        let unit = o.unit_bytes();
        if !o.sync_rw {
            self.sys.ready(Gate::Start);
            self.alive()?;
        }
        if o.first_access_speed {
            self.proc.set_start(self.sys.now_us());
        }
        let mut unit_bytes = self.plan.done_bytes;
        let mut bytes = o.size;
        let mut ptrs: Vec<(u64, u64)> = Vec::new();
        let mut nptr = 0usize;
        let mut buffer = 0u64;
        loop {
            self.alive()?;
            let size = bytes.min(unit);
            let mut slot = (0, 0);
            let keep = nptr < MAX_POINTERS;
            unit_bytes = unit_bytes.wrapping_add(self.do_unit(
                size,
                keep.then_some(&mut slot),
                &mut buffer,
            )?);
            if keep {
                ptrs.push(slot);
            }
            nptr += 1;
            bytes -= size;
            if self.runtime_exceeded() || bytes == 0 {
                break;
            }
        }
        if o.first_access_speed || (!o.signal_phase() && unit_bytes != 0) {
            let (usecs, kbps) = self.statistics(unit_bytes, "");
            (self.rec.bytes, self.rec.usecs, self.rec.kb_per_sec) = (unit_bytes, usecs, kbps);
        }
        if o.read_again && unit_bytes != 0 {
            self.read_again(&ptrs)?;
        }
        if o.detach {
            // usemem's detach forks: the half that exits flushes what its buffer still holds
            // from the parent (nothing printed yet: a signal mode), the background keeps a copy.
            let held = self.proc.inherited_copy();
            if !held.is_empty() {
                self.sys.out(&held);
            }
            self.sys.detach();
        }
        self.mlock_and_punch(&ptrs)?;
        self.signal_phases(buffer)?;
        if o.sleep_secs > 0 {
            self.sys.sleep_secs(o.sleep_secs as u64);
        }
        if o.sync_free {
            self.sys.ready(Gate::Free);
        }
        self.alive()?;
        if self.proc.prealloc.is_none() && nptr <= MAX_POINTERS {
            self.free_units(&ptrs);
        }
        Ok(())
    }

    /// `-r`/`-R`: the random generator, seeded once per process (its first thread to get
    /// here chooses; the others use its seed).
    fn seed_rng(&mut self) {
        let mut seed = self.proc.seed.load(Relaxed);
        if seed == 0 {
            seed = self.sys.time() ^ (self.sys.tid() as i64 as u64);
            // The process's first thread to get here chooses; the others use its seed.
            seed = match self.proc.seed.compare_exchange(0, seed, Relaxed, Relaxed) {
                Ok(_) => seed,
                Err(other) => other,
            };
        }
        self.rng = Rand48::new(seed);
    }

    /// `-Z`: read every unit again (`-R N` times), after the first pass's statistics.
    fn read_again(&mut self, ptrs: &[(u64, u64)]) -> R<()> {
        let o = self.opts().clone();
        if self.proc.prealloc.is_some() {
            // usemem never fills its pointer array with -P: it reads one it did not set.
            return Err(self.killed(Stop::Signal {
                name: "SIGSEGV",
                detail: "-Z with -P reads a pointer usemem never set".into(),
            }));
        }
        self.proc.set_start(self.sys.now_us());
        let mut rw = 0u64;
        let repeats = o.repeats();
        for &(p, len) in ptrs {
            let mut rep = 0;
            while rep < repeats {
                if rep > 0 && !o.quiet {
                    self.out(".");
                }
                rw += self.rw_once(p, len, true, Some(&mut rep), repeats, false)?;
                self.msync_walked(p, len)?;
                rep += 1;
            }
        }
        self.statistics(rw, "read again ");
        Ok(())
    }

    /// `-L` (mlock) and `--punch-holes` over the units, or over the `-P` buffer.
    fn mlock_and_punch(&mut self, ptrs: &[(u64, u64)]) -> R<()> {
        let o = self.opts().clone();
        if o.mlock {
            let ranges: Vec<(u64, u64)> = match self.proc.prealloc {
                Some(p) => vec![(p, o.size)],
                None => ptrs.to_vec(),
            };
            for (p, len) in ranges {
                if len == 0 {
                    continue;
                }
                if let Err(e) = self.sys.mlock(p, len) {
                    return Err(self.fail(format!("mlock: {}\n", strerror(e))));
                }
            }
        }
        if o.punch_holes {
            if o.punch_holes_signal {
                let pid = self.sys.pid();
                self.out(&format!("Punch holes Process {pid} is waiting signal\n"));
                self.sys.wait_sigusr1();
            }
            let ranges: Vec<(u64, u64)> = match self.proc.prealloc {
                Some(p) => vec![(p, o.size)],
                None => ptrs.to_vec(),
            };
            for (p, len) in ranges {
                self.punch_holes(p, len)?;
            }
            self.out("punch holes done\n");
        }
        Ok(())
    }

    /// The signal-driven phases (`--madv-pageout`, `-W`-style read/write/THP waits), looped
    /// with `--signal-loop`.
    fn signal_phases(&mut self, buffer: u64) -> R<()> {
        let o = self.opts().clone();
        loop {
            self.alive()?;
            if o.madv_pageout {
                for (advice, name) in [(MADV_COLD, "MADV_COLD"), (MADV_PAGEOUT, "MADV_PAGEOUT")] {
                    if o.size == 0 {
                        continue;
                    }
                    if let Err(e) = self.sys.madvise(buffer, o.size, advice) {
                        return Err(self.fail(format!("madvise {name} failed: {}\n", strerror(e))));
                    }
                }
            }
            if o.write_signal_read {
                let pid = self.sys.pid();
                self.out(&format!("Read Process {pid} is waiting signal\n"));
                self.sys.wait_sigusr1();
                self.proc.set_start(self.sys.now_us());
                let b = self.rw_once(buffer, o.size, true, None, 0, true)?;
                self.statistics(b, "");
            }
            if o.write_signal_write {
                let pid = self.sys.pid();
                self.out(&format!("Write Process {pid} is waiting signal\n"));
                self.sys.wait_sigusr1();
                self.proc.set_start(self.sys.now_us());
                let mut b = 0;
                let times = o.signal_write_times.max(0) as u64;
                let mut rep = 0u64;
                while rep < times {
                    if rep > 0 && !o.quiet {
                        self.out(".");
                    }
                    b += self.rw_once(buffer, o.size, false, Some(&mut rep), o.repeats(), true)?;
                    rep += 1;
                }
                self.statistics(b, "");
            }
            if o.write_signal_madv_thp {
                let pid = self.sys.pid();
                self.out(&format!(
                    "madvise MADV_HUGEPAGE Process {pid} is waiting signal\n"
                ));
                self.sys.wait_sigusr1();
                self.proc.set_start(self.sys.now_us());
                if o.size != 0 {
                    if let Err(e) = self.sys.madvise(buffer, o.size, MADV_HUGEPAGE) {
                        return Err(
                            self.fail(format!("madvise MADV_HUGEPAGE failed: {}\n", strerror(e)))
                        );
                    }
                }
                self.statistics(o.size, "");
            }
            if !o.signal_loop {
                break;
            }
        }
        Ok(())
    }

    /// Free every unit (`free` with `--malloc`, otherwise `munmap`) and say how long it took.
    fn free_units(&mut self, ptrs: &[(u64, u64)]) {
        let o = self.opts().clone();
        let t0 = self.sys.now_us();
        for &(p, len) in ptrs {
            if len == 0 {
                continue;
            }
            if o.malloc {
                self.sys.free(p, len);
            } else {
                let _ = self.sys.munmap(p, len);
            }
        }
        let us = self.sys.now_us().wrapping_sub(t0);
        self.rec.free_usecs = Some(us);
        self.out(&format!("{us} usecs to free memory\n"));
    }

    /// usemem's `do_punch_holes`: every other page, from the first, while two whole pages fit.
    fn punch_holes(&mut self, addr: u64, len: u64) -> R<()> {
        let mut off = 0u64;
        while off + 2 * PAGE_SIZE <= len {
            if self.opts().punch_holes_fallocate {
                if let Err(e) = self.sys.punch_hole(off, PAGE_SIZE) {
                    return Err(self.fail(format!(
                        "fallocate FALLOC_FL_PUNCH_HOLE failed: {}\n",
                        strerror(e)
                    )));
                }
            } else if let Err(e) = self.sys.madvise(addr + off, PAGE_SIZE, MADV_DONTNEED) {
                return Err(self.fail(format!("madvise MADV_DONTNEED failed: {}\n", strerror(e))));
            }
            off += 2 * PAGE_SIZE;
        }
        Ok(())
    }
}

/// Least common multiple, `None` past `u64`.
fn lcm(a: u64, b: u64) -> Option<u64> {
    fn gcd(mut a: u64, mut b: u64) -> u64 {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    }
    (a / gcd(a, b)).checked_mul(b)
}

/// usemem's `bind_cpu`: the CPU worker `k` is bound to with `-b interval`.
pub fn bind_cpu(k: u64, interval: i32, nr_cpu: u64) -> Option<u64> {
    if nr_cpu == 0 {
        return None; // usemem divides by zero
    }
    Some(
        (k as i64)
            .wrapping_mul(i64::from(interval))
            .rem_euclid(nr_cpu as i64) as u64,
    )
}

#[cfg(test)]
mod test;
