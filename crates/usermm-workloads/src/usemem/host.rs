//! usemem on the host kernel (`usermm usemem --host`): the same semantics as on the engine,
//! with real system calls through [`usermm_host::usemem`] — so one tool compares the engine
//! with the kernel, line for line.
//!
//! As usemem does, the parent forks one process per `-n` (before any thread exists, so each
//! child is a whole process), each process works itself or starts `-t` threads, the pipe
//! barriers release them together, and the parent waits. Lines are written by the workers as
//! they happen. A worker that calls `exit` ends its process with that status; an access
//! outside the worker's mappings (`-E` without `-P`) kills it with SIGSEGV, and the kernel
//! kills it with SIGSEGV or SIGBUS for a read-only store or a page past a file's end — as it
//! kills usemem.
//!
//! # Differences from usemem
//! - A dead worker does not hang the parent at a barrier (usemem's parent would wait for
//!   ever); `-d` with `-t` does not detach (forking a multi-threaded process is avoided).
//! - `-H` leaves `/proc/sys/vm/nr_hugepages` alone (usemem writes 5 into it).

use std::sync::{Arc, Mutex};

use usermm_host::usemem::{self as hu, HostFile, PipeGate, Space, WalkError};

use super::io::{Io, StdIo};
use super::program::{FileToOpen, Platform};
use super::sys::{Access, Errno, Gate, MapFd, ShmCmd, Stop, Sys, WalkOp, Words, EBADF};
use super::worker::{bind_cpu, End, Plan, ProcState, Worker, WorkerRecord};

/// One usemem thread on the host.
#[derive(Debug)]
pub struct HostSys {
    space: Arc<Space>,
    file: Arc<Mutex<Option<HostFile>>>,
    gates: Arc<[PipeGate; 2]>,
    pid_file: Arc<Mutex<Option<String>>>,
    /// Does the process have threads of its own (then `-d` stays attached)?
    threaded: bool,
    /// Keep the `usermm: note:` lines off stderr ([`HostPlatform::quiet_notes`]).
    quiet_notes: bool,
}

impl HostSys {
    fn with_file<T>(&self, f: impl FnOnce(Option<&HostFile>) -> T) -> T {
        f(self.file.lock().unwrap_or_else(|e| e.into_inner()).as_ref())
    }
}

fn segv() -> Stop {
    Stop::Signal {
        name: "SIGSEGV",
        detail: "an access outside every mapping".into(),
    }
}

impl Sys for HostSys {
    fn mmap(&self, len: u64, prot: u32, flags: u32, fd: MapFd, offset: i64) -> Result<u64, Errno> {
        match fd {
            MapFd::Anon => self.space.mmap(len, prot, flags, None, offset),
            MapFd::Closed => Err(EBADF),
            MapFd::Opened => self.with_file(|f| match f {
                Some(f) => self.space.mmap(len, prot, flags, Some(f), offset),
                None => Err(EBADF),
            }),
        }
    }

    fn munmap(&self, addr: u64, len: u64) -> Result<(), Errno> {
        self.space.munmap(addr, len)
    }

    fn mremap(&self, addr: u64, old: u64, new: u64) -> Result<u64, Errno> {
        self.space.mremap(addr, old, new)
    }

    fn mprotect(&self, addr: u64, len: u64, prot: u32) -> Result<(), Errno> {
        self.space.mprotect(addr, len, prot)
    }

    fn madvise(&self, addr: u64, len: u64, advice: i32) -> Result<(), Errno> {
        self.space.madvise(addr, len, advice)
    }

    fn mlock(&self, addr: u64, len: u64) -> Result<(), Errno> {
        self.space.mlock(addr, len)
    }

    fn munlock(&self, addr: u64, len: u64) -> Result<(), Errno> {
        self.space.munlock(addr, len)
    }

    fn msync(&self, addr: u64, len: u64, flags: i32) -> Result<(), Errno> {
        self.space.msync(addr, len, flags)
    }

    fn mincore(&self, addr: u64, len: u64) -> Result<(), Errno> {
        self.space.mincore(addr, len)
    }

    fn malloc(&self, len: u64) -> Option<u64> {
        self.space.malloc(len)
    }

    fn free(&self, addr: u64, _len: u64) {
        self.space.free(addr);
    }

    fn shmget(&self, len: u64, huge: bool) -> Result<i32, Errno> {
        self.space.shmget(len, huge)
    }

    fn shmat(&self, id: i32) -> Result<u64, Errno> {
        self.space.shmat(id)
    }

    fn shmctl(&self, id: i32, cmd: ShmCmd) -> Result<(), Errno> {
        let c = match cmd {
            ShmCmd::Lock => 0,
            ShmCmd::Unlock => 1,
            ShmCmd::Remove => 2,
        };
        self.space.shmctl(id, c)
    }

    fn punch_hole(&self, offset: u64, len: u64) -> Result<(), Errno> {
        self.with_file(|f| match f {
            Some(f) => f.punch_hole(offset, len),
            None => Err(EBADF),
        })
    }

    fn walk(&self, words: Words, op: WalkOp) -> Result<u64, Stop> {
        self.space
            .walk(
                words.base,
                words.from,
                words.to,
                words.stride,
                hu::WordOp {
                    write: op.write,
                    data: op.data,
                    verify: op.verify,
                },
            )
            .map_err(|e| match e {
                WalkError::Mismatch { idx, found } => Stop::Mismatch { idx, found },
                WalkError::Unmapped => segv(),
            })
    }

    fn access(&self, addr: u64, a: Access) -> Result<u64, Stop> {
        let store = match a {
            Access::Read => None,
            Access::Write(v) => Some(v),
        };
        self.space.access(addr, store).map_err(|_| segv())
    }

    fn now_us(&self) -> u64 {
        hu::now_us()
    }

    fn now_ns(&self) -> u64 {
        hu::now_ns()
    }

    fn sleep_secs(&self, secs: u64) {
        std::thread::sleep(std::time::Duration::from_secs(secs));
    }

    fn pid(&self) -> i32 {
        hu::getpid()
    }

    fn tid(&self) -> i32 {
        hu::gettid()
    }

    fn time(&self) -> u64 {
        hu::now_us() / 1_000_000
    }

    fn out(&self, s: &str) {
        StdIo.out(s);
    }

    fn err(&self, s: &str) {
        StdIo.err(s);
    }

    fn stdout_full_buffered(&self) -> bool {
        StdIo.full_buffered()
    }

    fn ready(&self, gate: Gate) {
        self.gates[gate as usize].arrive();
    }

    fn wait_sigusr1(&self) {
        hu::wait_sigusr1();
    }

    fn getchar(&self) -> Option<u8> {
        StdIo.getchar()
    }

    fn note(&self, s: &str) {
        if !self.quiet_notes {
            self.err(&format!("usermm: note: {s}\n"));
        }
    }

    fn detach(&self) -> i32 {
        if self.threaded {
            self.note(
                "-d with -t: the process stays attached (it would fork with threads running)",
            );
            return hu::getpid();
        }
        match hu::fork_process() {
            Ok(None) => hu::getpid(),
            Ok(Some(child)) => {
                if let Some(path) = self
                    .pid_file
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_deref()
                {
                    if let Err(e) = hu::append_pid(path, child) {
                        // usemem's perror: the path and strerror, no Rust "(os error N)".
                        let e = super::sys::io_strerror(&e);
                        self.err(&format!("{path}: {e}\n"));
                        hu::exit_process(1);
                    }
                }
                hu::exit_process(0)
            }
            Err(e) => {
                self.err(&format!("fork: {}\n", super::sys::strerror(e)));
                hu::exit_process(1)
            }
        }
    }
}

/// The host kernel as a usemem [`Platform`].
#[derive(Debug)]
pub struct HostPlatform {
    main: HostSys,
}

impl HostPlatform {
    pub fn new() -> Result<Self, Errno> {
        Ok(HostPlatform {
            main: HostSys {
                space: Arc::new(Space::new()),
                file: Arc::new(Mutex::new(None)),
                gates: Arc::new([PipeGate::new()?, PipeGate::new()?]),
                pid_file: Arc::new(Mutex::new(None)),
                threaded: false,
                quiet_notes: false,
            },
        })
    }

    /// Print no `usermm: note:` line (usemem itself prints none: a `usemem` link shows them
    /// only when asked).
    pub fn quiet_notes(mut self, quiet: bool) -> Self {
        self.main.quiet_notes = quiet;
        self
    }
}

/// End this process the way `end` ends a usemem worker process: `exit` flushes what its
/// stdio buffer still holds from the parent, a signal loses it.
fn finish(proc: &ProcState, end: &End) -> ! {
    if !matches!(end, End::Signal(_)) {
        let s = proc.take_inherited();
        if !s.is_empty() {
            StdIo.out(&s);
        }
    }
    match end {
        End::Exit(s) => hu::exit_process(*s),
        End::Signal(name) => hu::die_of_signal(match name.as_str() {
            "SIGBUS" => libc_sig::SIGBUS,
            "SIGFPE" => libc_sig::SIGFPE,
            _ => libc_sig::SIGSEGV,
        }),
        End::Done | End::Gone => hu::exit_process(0),
    }
}

/// Signal numbers (x86-64 Linux).
mod libc_sig {
    pub(super) const SIGBUS: i32 = 7;
    pub(super) const SIGFPE: i32 = 8;
    pub(super) const SIGSEGV: i32 = 11;
}

/// A forked usemem process: `do_task(index)`.
fn do_task(main: &HostSys, plan: &Plan, prealloc: Option<u64>, index: u64) -> ! {
    let o = &plan.opts;
    let threads = o.threads_per_process();
    let nr_cpu = hu::cpus_online();
    let bind = |k: u64| -> Result<(), End> {
        if o.bind == 0 {
            return Ok(());
        }
        match bind_cpu(k, o.bind, if o.bind > 0 { nr_cpu } else { 0 }) {
            Some(c) => {
                hu::bind_to_cpu(c);
                Ok(())
            }
            None => Err(End::Signal("SIGFPE".into())),
        }
    };
    let sys = |threaded| HostSys {
        space: Arc::clone(&main.space),
        file: Arc::clone(&main.file),
        gates: Arc::clone(&main.gates),
        pid_file: Arc::clone(&main.pid_file),
        threaded,
        quiet_notes: main.quiet_notes,
    };
    let proc = Arc::new(ProcState::new(plan, prealloc, index));
    if o.workers_per_process() == 0 {
        // A negative -t: usemem's loop starting threads runs zero times.
        finish(&proc, &End::Done);
    }
    if threads == 0 {
        if let Err(e) = bind(index) {
            finish(&proc, &e);
        }
        let s = sys(false);
        let mut w = Worker::new(&s, plan, &proc, index, 0);
        let end = w.run();
        finish(&proc, &end);
    }
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let k = index * threads + t;
            let (s, plan, proc) = (sys(true), plan.clone(), Arc::clone(&proc));
            let bind_res = bind(k);
            std::thread::Builder::new().spawn(move || {
                if let Err(e) = bind_res {
                    finish(&proc, &e);
                }
                let mut w = Worker::new(&s, &plan, &proc, k, 0);
                let end = w.run();
                if matches!(end, End::Exit(_) | End::Signal(_)) {
                    finish(&proc, &end);
                }
            })
        })
        .collect();
    for h in handles {
        match h {
            Ok(h) => {
                let _ = h.join();
            }
            Err(e) => {
                main.err(&format!("pthread_create: {e}\n"));
                finish(&proc, &End::Exit(1));
            }
        }
    }
    finish(&proc, &End::Done)
}

impl Platform for HostPlatform {
    type Sys = HostSys;

    fn main_sys(&self) -> &HostSys {
        &self.main
    }

    fn nr_cpu(&self) -> u64 {
        hu::cpus_online()
    }

    fn open(&mut self, file: FileToOpen<'_>) -> Result<(), Errno> {
        let f = if file.memfd {
            hu::memfd(file.path.unwrap_or("/dev/zero"), file.size)?
        } else {
            hu::open_create(file.path, file.read_only)?
        };
        *self.main.file.lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
        Ok(())
    }

    fn fadvise(&mut self, willneed: bool) {
        self.main.with_file(|f| {
            if let Some(f) = f {
                f.fadvise(willneed);
            }
        });
    }

    fn close(&mut self) {
        *self.main.file.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn notes(&self, _plan: &Plan) -> Vec<String> {
        Vec::new()
    }

    fn run_tasks(&mut self, plan: &Plan, prealloc: Option<u64>) -> Vec<WorkerRecord> {
        *self.main.pid_file.lock().unwrap_or_else(|e| e.into_inner()) = plan.opts.pid_file.clone();
        let o = &plan.opts;
        let per_proc = o.workers_per_process();
        let total = o.workers();
        let mut children = Vec::new();
        for i in 0..o.processes() {
            match hu::fork_process() {
                Ok(None) => do_task(&self.main, plan, prealloc, i),
                Ok(Some(pid)) => children.push((pid, false)),
                Err(e) => self
                    .main
                    .err(&format!("failed to fork: {}\n", super::sys::strerror(e))),
            }
        }
        let forked = children.len() as u64 * per_proc;
        let gone = |children: &mut Vec<(i32, bool)>| {
            let mut n = total - forked;
            for (pid, reaped) in children.iter_mut() {
                if !*reaped && hu::child_ended(*pid) {
                    *reaped = true;
                }
                if *reaped {
                    n += per_proc;
                }
            }
            n
        };
        self.main.gates[Gate::Start as usize].open_after(total, || gone(&mut children));
        if o.sync_free {
            self.main.gates[Gate::Free as usize].open_after(total, || gone(&mut children));
        }
        for (pid, reaped) in &children {
            if !reaped {
                hu::wait_child(*pid);
            }
        }
        // usemem's parent returns from main: its stdio buffer's copy goes out.
        if !plan.inherited_out.is_empty() {
            self.main.out(&plan.inherited_out);
        }
        Vec::new()
    }
}
