//! usemem's `main`: read the command line, check it, set up what the workers share, start
//! them and wait — on any [`Platform`].
//!
//! The steps, in usemem's order (each message is usemem's, on stderr, `NAME` its `argv[0]`):
//!
//! | step | on failure |
//! |---|---|
//! | options ([`parse`]) | glibc's line + usage, exit 1; `-h`: usage, exit 0 |
//! | `--punch-holes` with `-a` | "NAME: malloc options ignored for punch-holes" (and no malloc) |
//! | `-a` with `-F`/`-O`/`-U`; `-U` without `-O` | "NAME: mmap options ignored for malloc()"; "NAME: MAP_HUGETLB relies on MAP_ANONYMOUS" |
//! | `-b N` with N ≥ the CPU count | "NAME: invalid binding interval N for C CPUs", exit 1 |
//! | `--signal-read-count` without `-W` | "NAME: --signal-read-count should use with --write-signal-read", exit 1 |
//! | not exactly one operand | usage, **exit 0** |
//! | `-y` with a unit that is not SIZE | "NAME: to sync tasks after allocation, unit must equal total size", exit 1 |
//! | open the file (`/dev/zero`, `-f`, `-D`'s, `--memfd`) | "NAME: failed to open \`FILE': ERROR", exit 1 |
//! | `-P`: map SIZE in the parent | "NAME: mmap failed: ERROR", exit 1 |
//! | `-E`: mremap it to 10 × SIZE | (a failure leaves `MAP_FAILED` for the workers to touch) |
//! | `-L`: a SysV segment, touched, SHM_LOCK, unlock, IPC_RMID | usemem's perror lines, exit 1 |
//! | `-D`: fadvise WILLNEED, reopen, DONTNEED, close | "failed to open", exit 1 |
//! | `-N`: mincore of the preallocation, then exit 0 | "mincore failed with error: ERROR" (no newline), exit 1 |
//! | `-H`: a hugetlb segment, mincore, mprotect, touch, then exit 0 | "Error creating shared segment: ERROR " ..., exit 1 |
//! | `--init-time`, `--signal-fork` | their lines on stdout |
//! | the workers ([`Platform::run_tasks`]) | each prints its own lines; the parent exits 0 |
//!
//! The parent's exit status does not depend on the workers': usemem's parent only `wait3`s.
//! [`Platform::run`] is `main` followed by the parent's [`Platform::exit`].

use super::opts::{memparse, UsememOpts};
use super::parse::{parse, usage_text, Parsed};
use super::sys::{strerror, Errno, MapFd, ShmCmd, Sys};
use super::worker::{End, Plan, ProcState, Worker, WorkerRecord, PROT_WRITE};

/// The file workers map, as usemem opens it: `open(path, O_RDONLY or O_RDWR | O_CREAT, 0666)`,
/// or with `memfd` a memfd of `size` bytes.
#[derive(Debug, Clone, Copy)]
pub struct FileToOpen<'a> {
    /// `None` when `-D` found no argument (usemem opens NULL).
    pub path: Option<&'a str>,
    pub read_only: bool,
    pub memfd: bool,
    pub size: u64,
}

/// The machine a usemem run runs on: the parent's [`Sys`], the file, the workers.
pub trait Platform {
    type Sys: Sys;
    /// The parent process (usemem's `main`).
    fn main_sys(&self) -> &Self::Sys;
    /// CPUs online (`sysconf(_SC_NPROCESSORS_ONLN)`), for `-b`.
    fn nr_cpu(&self) -> u64;
    /// Open the file workers map ([`FileToOpen`]).
    fn open(&mut self, file: FileToOpen<'_>) -> Result<(), Errno>;
    /// `posix_fadvise(fd, 0, 0, WILLNEED or DONTNEED)` (usemem ignores its result).
    fn fadvise(&mut self, willneed: bool);
    /// `close(fd)`.
    fn close(&mut self);
    /// Things this platform does not model, said once before the workers start.
    fn notes(&self, plan: &Plan) -> Vec<String>;
    /// usemem's `do_tasks`: start the processes (each with its threads), run the barriers,
    /// wait for all. `prealloc` is the parent's preallocation (`None`: NULL). The parent's
    /// copy of [`Plan::inherited_out`] is printed here, when usemem's parent would exit.
    fn run_tasks(&mut self, plan: &Plan, prealloc: Option<u64>) -> Vec<WorkerRecord>;
    /// usemem's parent exits: what the platform does then (the engine's `mmput` of the
    /// parent's mm; on the host the process itself lives on, and its memory with it).
    fn exit(&mut self) {}

    /// Run usemem with `args` (the words after its name) on this platform: [`main`], then
    /// the parent's [`Platform::exit`].
    fn run(
        &mut self,
        name: &str,
        args: &[String],
        posixly_correct: bool,
        engine_help: &str,
    ) -> Outcome
    where
        Self: Sized,
    {
        let out = main(self, name, args, posixly_correct, engine_help);
        self.exit();
        out
    }
}

/// How a usemem run ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The exit status usemem's parent would have.
    pub status: i32,
    /// The plan the workers ran (`None` if usemem stopped before starting them).
    pub plan: Option<Plan>,
    pub workers: Vec<WorkerRecord>,
}

impl Outcome {
    fn exit(status: i32) -> Self {
        Outcome {
            status,
            plan: None,
            workers: Vec::new(),
        }
    }
}

/// Run usemem: `name` is its `argv[0]`, `args` the rest; `engine_help` closes the usage.
pub fn main<P: Platform>(
    p: &mut P,
    name: &str,
    args: &[String],
    posixly_correct: bool,
    engine_help: &str,
) -> Outcome {
    let usage = |p: &P, status: i32| {
        p.main_sys().err(&usage_text(name, engine_help));
        Outcome::exit(status)
    };
    let (mut opts, operands) = match parse(name, args, posixly_correct) {
        Parsed::Options { opts, operands } => (*opts, operands),
        Parsed::Usage { diagnostic, status } => {
            if let Some(d) = diagnostic {
                p.main_sys().err(&format!("{d}\n"));
            }
            return usage(p, status);
        }
    };
    if let Err(out) = check_options(p, name, &mut opts) {
        return *out;
    }
    if operands.len() != 1 {
        return usage(p, 0);
    }
    let sys = p.main_sys();
    let start_us = (!opts.write_signal_read || opts.init_time).then(|| sys.now_us());
    opts.size = memparse(&operands[0]);
    if opts.sync_rw && opts.unit != 0 && opts.unit != opts.size {
        sys.err(&format!(
            "{name}: to sync tasks after allocation, unit must equal total size\n"
        ));
        return Outcome::exit(1);
    }
    if !opts.malloc {
        let path = if opts.file_missing {
            None
        } else {
            Some(opts.file.clone().unwrap_or_else(|| "/dev/zero".into()))
        };
        if !open_file(p, name, &opts, path.as_deref(), opts.memfd) {
            return Outcome::exit(1);
        }
    }
    let mut plan = Plan {
        name: name.to_string(),
        opts: opts.clone(),
        done_bytes: 0,
        fd: MapFd::Opened,
        start_us,
        inherited_out: String::new(),
    };
    for n in p.notes(&plan) {
        p.main_sys().note(&n);
    }
    // The parent's own allocations go through a worker of the parent process. What it prints
    // (`--show-addr`) stays in stdio's buffer when stdout is a file or a pipe: `pending`.
    let main_proc = ProcState::new(&plan, None, 0);
    // `exit` flushes stdout: the parent's buffer goes out as it ends ([`flushed`]).
    let (prealloc, mut pending) = match parent_allocations(p, &opts, &mut plan, &main_proc) {
        Ok(held) => held,
        Err(out) => return *out,
    };
    if opts.advise {
        p.fadvise(true);
        p.close();
        let path = opts.file.clone();
        if !open_file(p, name, &opts, path.as_deref(), false) {
            return flushed(p.main_sys(), pending, 1);
        }
        p.fadvise(false);
        plan.done_bytes = plan.done_bytes.wrapping_add(opts.size);
        p.close();
        plan.fd = MapFd::Closed;
    }
    let sys = p.main_sys();
    if opts.mincore {
        let at = prealloc.unwrap_or(0);
        if let Err(e) = sys.mincore(at, opts.size) {
            report_errno(sys, "mincore failed with error: ", e, "");
            return flushed(sys, pending, 1);
        }
        return flushed(sys, pending, 0);
    }
    if opts.mincore_hugepages {
        let status = mincore_hugepages(sys, opts.size);
        return flushed(sys, pending, status);
    }
    // The two lines below are flushed, and the parent's buffer with them.
    if opts.init_time {
        let now = sys.now_us();
        let d = now.wrapping_sub(start_us.unwrap_or(0));
        sys.out(&format!(
            "{}the initialization time is {} secs {} usecs\n",
            std::mem::take(&mut pending),
            d / 1_000_000,
            d % 1_000_000
        ));
        if !opts.write_signal_read {
            plan.start_us = Some(sys.now_us());
        }
    }
    if opts.signal_fork {
        sys.out(&format!(
            "{}Main Process {} is waiting signal\n",
            std::mem::take(&mut pending),
            sys.pid()
        ));
        sys.wait_sigusr1();
    }
    plan.inherited_out = pending;
    let workers = p.run_tasks(&plan, prealloc);
    Outcome {
        status: 0,
        plan: Some(plan),
        workers,
    }
}

/// usemem's checks of option combinations: a warning for an option it ignores, exit 1 for a
/// combination it refuses.
fn check_options<P: Platform>(
    p: &P,
    name: &str,
    opts: &mut UsememOpts,
) -> Result<(), Box<Outcome>> {
    let sys = p.main_sys();
    if opts.punch_holes && opts.malloc {
        sys.err(&format!("{name}: malloc options ignored for punch-holes\n"));
        opts.malloc = false;
    }
    if opts.malloc {
        if opts.prefault || opts.anonymous || opts.hugetlb {
            sys.err(&format!("{name}: mmap options ignored for malloc()\n"));
        }
    } else if opts.hugetlb && !opts.anonymous {
        sys.err(&format!("{name}: MAP_HUGETLB relies on MAP_ANONYMOUS\n"));
    }
    if opts.bind >= 0 {
        let nr_cpu = p.nr_cpu();
        if opts.bind as u64 >= nr_cpu {
            p.main_sys().err(&format!(
                "{name}: invalid binding interval {} for {nr_cpu} CPUs\n",
                opts.bind
            ));
            return Err(Box::new(Outcome::exit(1)));
        }
    }
    let sys = p.main_sys();
    if opts.signal_read_count != 0 && !opts.write_signal_read {
        sys.err(&format!(
            "{name}: --signal-read-count should use with --write-signal-read\n"
        ));
        return Err(Box::new(Outcome::exit(1)));
    }
    Ok(())
}

/// What the parent maps before the workers start (`-P` preallocation, `--remap`, `--shm-lock`),
/// through a worker of the parent process: the preallocated address and the output its stdio
/// buffer holds, or the outcome of a failure (its buffer flushed as `exit` flushes it).
fn parent_allocations<P: Platform>(
    p: &P,
    opts: &UsememOpts,
    plan: &mut Plan,
    main_proc: &ProcState,
) -> Result<(Option<u64>, String), Box<Outcome>> {
    let mut prealloc: Option<u64> = None;
    let mut pending = String::new();

    let sys = p.main_sys();
    let mut w = Worker::new(sys, plan, main_proc, 0, 0);
    if sys.stdout_full_buffered() {
        w.hold_output();
    }
    if opts.prealloc {
        match w.allocate(opts.size) {
            Ok(0) => {}
            Ok(a) => prealloc = Some(a),
            // `exit(1)` after `--show-addr`'s line (a failed `--madv-thp`) flushes it; a
            // signal (`--touch-alloc`) loses it.
            Err(End::Signal(_)) => return Err(Box::new(Outcome::exit(1))),
            Err(_) => return Err(Box::new(flushed(sys, w.take_held(), 1))),
        }
        pending = w.take_held();
        plan.done_bytes = opts.size / 8;
    }
    if opts.remap {
        prealloc = match prealloc {
            Some(a) => match sys.mremap(a, opts.size, opts.size.wrapping_mul(10)) {
                Ok(n) => Some(n),
                Err(_) => Some(u64::MAX),
            },
            // mremap(NULL, ...) fails: the workers get MAP_FAILED.
            None => Some(u64::MAX),
        };
        plan.done_bytes = plan.done_bytes.wrapping_add(opts.size / 8);
    }
    if opts.shm_lock {
        if let Err(status) = shm_allocate_and_lock(sys, opts.size) {
            return Err(Box::new(flushed(sys, pending, status)));
        }
        plan.done_bytes = plan.done_bytes.wrapping_add(opts.size / 8);
    }
    Ok((prealloc, pending))
}

/// [`Platform::open`] of the file at `path` (a memfd when `memfd`), with usemem's message on
/// stderr if it failed; whether it opened.
fn open_file<P: Platform>(
    p: &mut P,
    name: &str,
    opts: &UsememOpts,
    path: Option<&str>,
    memfd: bool,
) -> bool {
    let file = FileToOpen {
        path,
        read_only: opts.prot_readonly(),
        memfd,
        size: opts.size,
    };
    let Err(e) = p.open(file) else {
        return true;
    };
    let label = match &opts.file {
        Some(f) => f.as_str(),
        None if opts.file_missing => "(null)",
        None => "/dev/zero",
    };
    let msg = format!("{name}: failed to open `{label}': {}\n", strerror(e));
    p.main_sys().err(&msg);
    false
}

/// `exit(status)` with `pending` still in stdout's buffer: flushed first.
fn flushed<S: Sys>(sys: &S, pending: String, status: i32) -> Outcome {
    if !pending.is_empty() {
        sys.out(&pending);
    }
    Outcome::exit(status)
}

/// usemem's `perror(msg)` with the errno it had: `msg: strerror`.
fn perror(sys: &impl Sys, msg: &str, e: Errno) {
    report_errno(sys, &format!("{msg}: "), e, "\n");
}

/// usemem's `fprintf(stderr, "HEAD%sTAIL", strerror(errno))`.
fn report_errno(sys: &impl Sys, head: &str, e: Errno, tail: &str) {
    sys.err(&format!("{head}{}{tail}", strerror(e)));
}

/// `-L`: a SysV segment of `bytes`, one byte written in every page, `SHM_LOCK`, then unlocked
/// and marked for removal (it stays attached to the parent). `Err(status)` on failure.
fn shm_allocate_and_lock(sys: &impl Sys, bytes: u64) -> Result<(), i32> {
    if bytes == 0 {
        // perror with the errno of nothing having failed.
        perror(sys, "invalid size\n", 0);
        return Err(1);
    }
    let id = sys.shmget(bytes, false).unwrap_or(-1);
    let p = match sys.shmat(id) {
        Ok(p) => p,
        Err(e) => {
            report_errno(sys, "SHM attachment failed with error :", e, "\n");
            if id < 0 {
                perror(sys, "Invalid seg_id\n", e);
            } else {
                let _ = sys.shmctl(id, ShmCmd::Remove);
            }
            return Err(1);
        }
    };
    let mut off = 0;
    while off < bytes {
        // usemem stores 1 into the second byte of each page: the word holding it gets 0x100.
        if sys
            .access(p + off, super::sys::Access::Write(0x100))
            .is_err()
        {
            return Err(1);
        }
        off += 4096;
    }
    if let Err(e) = sys.shmctl(id, ShmCmd::Lock) {
        perror(sys, "Error in SYS V SHM locking\n", e);
        return Err(1);
    }
    let _ = sys.shmctl(id, ShmCmd::Unlock);
    let _ = sys.shmctl(id, ShmCmd::Remove);
    Ok(())
}

/// `-H`: a SysV hugetlb segment, mincore, mprotect(PROT_WRITE), one byte per 2 MiB page.
/// usemem then runs `echo 5 > /proc/sys/vm/nr_hugepages`; that host setting is left alone.
fn mincore_hugepages(sys: &impl Sys, bytes: u64) -> i32 {
    if bytes == 0 {
        perror(sys, "invalid size\n", 0);
        return 1;
    }
    let id = match sys.shmget(bytes, true) {
        Ok(id) => id,
        Err(e) => {
            report_errno(sys, "Error creating shared segment: ", e, " \n");
            return 1;
        }
    };
    let p = match sys.shmat(id) {
        Ok(p) => p,
        Err(e) => {
            report_errno(sys, "Error attaching shared memory: ", e, " \n");
            let _ = sys.shmctl(id, ShmCmd::Remove);
            return 1;
        }
    };
    if let Err(e) = sys.mincore(p, bytes) {
        report_errno(sys, "mincore failed with error: ", e, "");
        return 1;
    }
    if let Err(e) = sys.mprotect(p, bytes, PROT_WRITE) {
        report_errno(sys, "mprotect error: ", e, "");
        return 1;
    }
    let huge = 2u64 << 20;
    for i in 0..bytes / huge {
        if sys
            .access(p + i * huge, super::sys::Access::Write(1))
            .is_err()
        {
            return 1;
        }
    }
    sys.note("-H: usemem then writes 5 to /proc/sys/vm/nr_hugepages; not done here");
    let _ = sys.shmctl(id, ShmCmd::Remove);
    0
}
