//! One task of an address-space workload — a thread of a process — as one trait, [`Task`],
//! that the engine and the host kernel both implement; and the way N such tasks are started
//! as N processes (an mm each) or as N threads of one process (one shared mm), each placed on
//! a CPU, counted, and stopped.
//!
//! A workload written over [`Task`] runs unchanged on three backends: the engine on the wall
//! clock, the engine in virtual time on a profile's machine (`engine.rs`: an [`usermm::Mm`]
//! per process, an emulated CPU per task), and the host kernel (`host.rs`: real processes or
//! threads making real system calls, through `usermm_host::task`). will-it-scale's tests are
//! its first users ([`crate::will_it_scale`]), bench's paths and the host check's scenarios
//! its others ([`bodies`]: each written once, run on the engine and, in a forked child, on
//! the host kernel: [`child`]); usemem's `Sys` is written against a narrower trait of its
//! own today and can move here.
//!
//! # What a task does
//! The calls of a C program's address-space work: `mmap`, `munmap`, `mprotect`, `madvise`,
//! glibc's `brk`/`sbrk` (the process's cached break, shared by its threads) and
//! `malloc`/`free` (glibc's allocator on the host; on the engine its model, `malloc.rs`),
//! a temporary file to map, and byte and word loads and stores — a real access on the host,
//! the MMU and a page fault where needed on the engine, one at a time or a run of them
//! ([`Task::touch`], [`Task::write_each`]: a C loop, which the engine does in fewer round
//! trips through its TLB gate). [`Task::count`] adds to the task's operation count
//! (will-it-scale's `(*iterations)++`) and says when the run is over; [`Task::now`] reads the
//! task's two clocks, by which a body times itself.
//!
//! # Clocks
//! [`Task::now`] is a [`Stamp`]: the task's CPU time and the wall time. On the host kernel and
//! on the engine on the wall clock these are the calling thread's `CLOCK_THREAD_CPUTIME_ID`
//! (user and system: the kernel's, or the engine's, fault handling included) and
//! `CLOCK_MONOTONIC`; on the engine in virtual time, the task's context's busy time and its
//! virtual clock (`usermm::sync::clock`), so that a body timed by them is a deterministic
//! model figure.
//!
//! # Processes and threads
//! [`Mode::Processes`]: each task is a process forked from one parent, as will-it-scale's
//! `new_task` forks: on the host, real `fork`s; on the engine, [`usermm::Mm::fork`] of a
//! parent mm that has what will-it-scale's parent has before it forks — a heap made by its
//! first `malloc`, written to (so the children's heap VMAs carry a forked anon_vma, which
//! decides brk1's shape: Matthew Wilcox's note in will-it-scale's history). [`Mode::Threads`]:
//! every task is a thread of the parent itself, sharing its mm (on the engine, the parent's
//! [`usermm::Mm`]: its mmap lock, per-VMA locks and TLB shootdowns to the other tasks' CPUs).
//!
//! # Placement (will-it-scale's `main.c` with hwloc)
//! By default task `i` is bound to the cpuset of core `i mod cores`, cores in hwloc's logical
//! order (by package, then core); with `-m` ([`Affinity::Pus`]) to the single hardware thread
//! `i mod PUs`, PUs in the same order (a core's threads next to each other); with `-n`
//! ([`Affinity::None`]) not at all. On the host these are the bindings themselves
//! ([`bind_set`]). A core's cpuset leaves the choice of its thread to the kernel's
//! scheduler, which puts a second task of a core on its idle sibling; the engine's tasks run
//! on one emulated CPU each, so [`engine_cpu`] makes that choice as the scheduler would:
//! task `i` on thread `(i / cores) mod threads` of its core — every core gets one task before
//! any core gets two. Beyond the hardware threads tasks share CPUs (in virtual time they take
//! turns in slices, `engine.rs`). Without affinity the engine spreads tasks the same way.
//!
//! # Counting and stopping
//! On the wall clock and on the host a sampler reads every task's counter once a period and
//! then raises a stop flag the tasks see at their next [`Task::count`], as will-it-scale's
//! parent reads the shared counters once a second. In virtual time there is no sampler: each
//! task records its own count as its virtual clock passes each period's end (the count of
//! operations finished before that instant), which is exact and deterministic, and stops at
//! the last.

pub mod bodies;
pub mod child;
mod engine;
mod host;
mod malloc;

use std::time::Duration;

use serde::Serialize;

pub(crate) use self::engine::{
    errno as engine_errno, madvise as engine_madvise, mprotect as engine_mprotect,
};
pub use self::engine::{run_engine, with_lone_task, EngineFile, EngineOut, EngineTask, SLICE};
pub use self::host::{run_host, HostOut, HostTask};

/// An errno value (`ENOMEM` = 12, ...).
pub type Errno = i32;

/// Why a task's body returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Stop {
    /// The run is over ([`Task::count`] said so).
    Done,
    /// An access raised a signal (`SIGSEGV`, `SIGBUS`): the process dies of it.
    Signal { name: &'static str, detail: String },
    /// An `assert` of the C program failed: it would abort (`SIGABRT`).
    Assert(String),
    /// In virtual time, the loop counted on and on without its clock moving: nothing it does
    /// is priced, and it would never reach the run's end.
    NoProgress,
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Done => write!(f, "done"),
            Stop::Signal { name, detail } => write!(f, "killed by {name} ({detail})"),
            Stop::Assert(what) => write!(f, "Assertion `{what}' failed (SIGABRT)"),
            Stop::NoProgress => write!(f, "stopped: its loop takes no virtual time"),
        }
    }
}

/// A moment on a task's two clocks (see the module doc), ns from their arbitrary origins;
/// only differences mean something.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stamp {
    /// The task's CPU time: its thread's on the host and the wall clock, its context's busy
    /// time in virtual time.
    pub cpu_ns: u64,
    /// The wall clock (`CLOCK_MONOTONIC`), or the task's virtual clock in virtual time.
    pub wall_ns: u64,
}

impl Stamp {
    /// The time from `earlier` to `self` on both clocks (0 where `earlier` is later).
    pub fn since(self, earlier: Stamp) -> Stamp {
        Stamp {
            cpu_ns: self.cpu_ns.saturating_sub(earlier.cpu_ns),
            wall_ns: self.wall_ns.saturating_sub(earlier.wall_ns),
        }
    }
}

/// One thread of one process, as an address-space workload sees its machine.
pub trait Task {
    /// A temporary file this task opened ([`Task::tmpfile`]).
    type File;

    /// This task's number, from 0 (will-it-scale's `nr`).
    fn index(&self) -> usize;
    /// `mmap(NULL, len, prot, flags, file or -1, 0)`.
    fn mmap(
        &self,
        len: u64,
        prot: u32,
        flags: u32,
        file: Option<&Self::File>,
    ) -> Result<u64, Errno>;
    fn munmap(&self, addr: u64, len: u64) -> Result<(), Errno>;
    fn mprotect(&self, addr: u64, len: u64, prot: u32) -> Result<(), Errno>;
    fn madvise(&self, addr: u64, len: u64, advice: i32) -> Result<(), Errno>;
    /// glibc's `brk(addr)`: `ENOMEM` when the kernel keeps the old break.
    fn brk(&self, addr: u64) -> Result<(), Errno>;
    /// glibc's `sbrk(incr)`: the old break.
    fn sbrk(&self, incr: i64) -> Result<u64, Errno>;
    /// glibc's `malloc(len)` (`ENOMEM` for its NULL).
    fn malloc(&self, len: u64) -> Result<u64, Errno>;
    fn free(&self, addr: u64);
    /// `mkstemp` in `/tmp`, `ftruncate(size)`, `unlink`: an open file nobody else sees.
    fn tmpfile(&self, size: u64) -> Result<Self::File, Errno>;
    /// `open("/dev/zero", O_RDWR)`: its private mappings are anonymous memory, and two of them
    /// at offset 0 never merge.
    fn dev_zero(&self) -> Result<Self::File, Errno>;
    /// A one-byte store (`c[i] = v`).
    fn write_u8(&self, addr: u64, v: u8) -> Result<(), Stop>;
    fn read_u8(&self, addr: u64) -> Result<u8, Stop>;
    fn write_u64(&self, addr: u64, v: u64) -> Result<(), Stop>;
    fn read_u64(&self, addr: u64) -> Result<u64, Stop>;
    /// `n` more operations done; `Err(Stop::Done)` once the run is over.
    fn count(&self, n: u64) -> Result<(), Stop>;
    /// The task's clocks now (see the module doc).
    fn now(&self) -> Stamp;

    /// One 8-byte access every `step` bytes (at least 8) of `[start, start + len)`, in
    /// address order: a store when `write` (of the word's offset from `start`, in words),
    /// else a load (usemem's walk). The number of words accessed.
    fn touch(&self, start: u64, len: u64, step: u64, write: bool) -> Result<u64, Stop> {
        let step = step.max(8);
        let (mut a, mut n) = (start, 0);
        while a < start.saturating_add(len) {
            if write {
                self.write_u64(a, (a - start) / 8)?;
            } else {
                self.read_u64(a)?;
            }
            n += 1;
            a = a.saturating_add(step);
        }
        Ok(n)
    }

    /// A store of `v` to each 8-byte word of `addrs`, in order (a loop of [`Task::write_u64`]).
    fn write_each(&self, addrs: &[u64], v: u64) -> Result<(), Stop> {
        addrs.iter().try_for_each(|&a| self.write_u64(a, v))
    }
}

/// A task that can start a second thread of its process beside it: two threads of one mm,
/// each on its CPU, whose TLB flushes reach each other (the host check's two freers).
pub trait Beside: Task + Sized {
    /// Run `theirs` on a new thread of this task's process, with a task of its own (not
    /// counted) that reaches this task's mappings, while `mine` runs here; both start
    /// together, behind a barrier, and both are done when this returns. The new thread runs on
    /// CPU `cpu` where the backend places threads itself (the engine); on the host kernel the
    /// scheduler places it. `theirs`'s result is `Err(Stop::Assert)` if its thread panicked.
    fn beside<R: Send, S>(
        &self,
        cpu: usize,
        theirs: impl FnOnce(&Self) -> R + Send,
        mine: impl FnOnce() -> S,
    ) -> (S, Result<R, Stop>);
}

/// What a thread that panicked leaves instead of its result.
fn panicked() -> Stop {
    Stop::Assert("the task panicked".into())
}

/// The calls of [`Task`] that change an address space (`mmap`, `munmap`, `mprotect`,
/// `madvise`, `brk`, `sbrk`, `malloc`, `free`), each forwarded to the method of the same name
/// and signature of `self.$to` (whose file type is `$file`): for a task that wraps another
/// ([`Limited`]) or a host address space (`host.rs`).
macro_rules! forward_address_space_calls {
    ($to:ident, $file:ty) => {
        fn mmap(
            &self,
            len: u64,
            prot: u32,
            flags: u32,
            file: Option<&$file>,
        ) -> Result<u64, $crate::task::Errno> {
            self.$to.mmap(len, prot, flags, file)
        }
        fn munmap(&self, addr: u64, len: u64) -> Result<(), $crate::task::Errno> {
            self.$to.munmap(addr, len)
        }
        fn mprotect(&self, addr: u64, len: u64, prot: u32) -> Result<(), $crate::task::Errno> {
            self.$to.mprotect(addr, len, prot)
        }
        fn madvise(&self, addr: u64, len: u64, advice: i32) -> Result<(), $crate::task::Errno> {
            self.$to.madvise(addr, len, advice)
        }
        fn brk(&self, addr: u64) -> Result<(), $crate::task::Errno> {
            self.$to.brk(addr)
        }
        fn sbrk(&self, incr: i64) -> Result<u64, $crate::task::Errno> {
            self.$to.sbrk(incr)
        }
        fn malloc(&self, len: u64) -> Result<u64, $crate::task::Errno> {
            self.$to.malloc(len)
        }
        fn free(&self, addr: u64) {
            self.$to.free(addr)
        }
    };
}
use forward_address_space_calls;

/// A task whose run ends after `limit` operations: `inner` with its own count, for a fixed
/// number of iterations (a differential test, a benchmark's row) on any backend.
#[derive(Debug)]
pub struct Limited<'t, T: Task> {
    pub inner: &'t T,
    pub limit: u64,
    done: std::cell::Cell<u64>,
}

impl<'t, T: Task> Limited<'t, T> {
    pub fn new(inner: &'t T, limit: u64) -> Self {
        Limited {
            inner,
            limit,
            done: std::cell::Cell::new(0),
        }
    }
}

impl<T: Task> Task for Limited<'_, T> {
    type File = T::File;
    fn index(&self) -> usize {
        self.inner.index()
    }
    forward_address_space_calls!(inner, T::File);
    fn tmpfile(&self, size: u64) -> Result<T::File, Errno> {
        self.inner.tmpfile(size)
    }
    fn dev_zero(&self) -> Result<T::File, Errno> {
        self.inner.dev_zero()
    }
    fn write_u8(&self, addr: u64, v: u8) -> Result<(), Stop> {
        self.inner.write_u8(addr, v)
    }
    fn read_u8(&self, addr: u64) -> Result<u8, Stop> {
        self.inner.read_u8(addr)
    }
    fn write_u64(&self, addr: u64, v: u64) -> Result<(), Stop> {
        self.inner.write_u64(addr, v)
    }
    fn read_u64(&self, addr: u64) -> Result<u64, Stop> {
        self.inner.read_u64(addr)
    }
    fn now(&self) -> Stamp {
        self.inner.now()
    }
    fn touch(&self, start: u64, len: u64, step: u64, write: bool) -> Result<u64, Stop> {
        self.inner.touch(start, len, step, write)
    }
    fn write_each(&self, addrs: &[u64], v: u64) -> Result<(), Stop> {
        self.inner.write_each(addrs, v)
    }
    /// Counts toward the limit (the inner task does not count them).
    fn count(&self, n: u64) -> Result<(), Stop> {
        self.done.set(self.done.get() + n);
        if self.done.get() >= self.limit {
            Err(Stop::Done)
        } else {
            Ok(())
        }
    }
}

/// How the tasks share address spaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Each task a process of its own (will-it-scale's `TEST_processes`).
    Processes,
    /// Every task a thread of one process (`TEST_threads`).
    Threads,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Processes => "processes",
            Mode::Threads => "threads",
        }
    }
}

/// Where tasks are bound (will-it-scale's default, `-m`, `-n`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Affinity {
    /// Task `i` on core `i mod cores` (its whole cpuset).
    #[default]
    Cores,
    /// Task `i` on hardware thread `i mod PUs` (`-m`).
    Pus,
    /// No binding (`-n`).
    None,
}

/// The periods a run lasts and how long each is (on the run's clock); `usize::MAX` periods:
/// until the process is killed (will-it-scale without `-s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Schedule {
    pub period: Duration,
    pub periods: usize,
}

/// What to start: how many tasks, how, where, for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Launch {
    pub tasks: usize,
    pub mode: Mode,
    pub affinity: Affinity,
    pub schedule: Schedule,
}

/// The cpuset task `i` is bound to, from the machine's cores (each a list of its hardware
/// threads, in hwloc's logical order); empty without affinity.
pub fn bind_set(i: usize, cores: &[Vec<usize>], affinity: Affinity) -> Vec<usize> {
    match affinity {
        Affinity::None => Vec::new(),
        _ if cores.is_empty() => Vec::new(),
        Affinity::Cores => cores[i % cores.len()].clone(),
        Affinity::Pus => {
            let pus: Vec<usize> = cores.iter().flatten().copied().collect();
            vec![pus[i % pus.len()]]
        }
    }
}

/// The one CPU task `i` runs on where a task must name one (the engine): a thread of its
/// [`bind_set`], the `(i / cores)`-th, as the scheduler fills a core's idle siblings (see the
/// module doc). Without affinity, as with cores.
pub fn engine_cpu(i: usize, cores: &[Vec<usize>], affinity: Affinity) -> usize {
    if cores.is_empty() {
        return 0;
    }
    let core = &cores[i % cores.len()];
    match affinity {
        Affinity::Pus => bind_set(i, cores, affinity)[0],
        Affinity::Cores | Affinity::None => core[(i / cores.len()) % core.len()],
    }
}

/// Where a run hands its samples: each task's cumulative count at the end of each period, in
/// period order. `Send`: the host's thread mode samples from a thread of its own.
pub type OnSample<'a> = dyn FnMut(&[u64]) + Send + 'a;

/// Run the wall-clock sampler: every `period`, read each task's count with `read` and hand
/// the counts to `on_sample`; after `periods` of them, return (the caller stops the tasks).
pub(crate) fn sample_on_wall_clock(
    launch: &Launch,
    read: impl Fn(usize) -> u64,
    on_sample: &mut OnSample<'_>,
) {
    let mut row = vec![0; launch.tasks];
    for _ in 0..launch.schedule.periods {
        std::thread::sleep(launch.schedule.period);
        for (i, r) in row.iter_mut().enumerate() {
            *r = read(i);
        }
        on_sample(&row);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn placement_fills_every_core_before_a_sibling() {
        // Two cores of two threads each, as hwloc lists them.
        let cores = vec![vec![0, 2], vec![1, 3]];
        let cpus: Vec<usize> = (0..5)
            .map(|i| engine_cpu(i, &cores, Affinity::Cores))
            .collect();
        assert_eq!(cpus, [0, 1, 2, 3, 0]);
        assert_eq!(bind_set(3, &cores, Affinity::Cores), [1, 3]);
        // -m: hardware threads in hwloc's order, a core's siblings together.
        let pus: Vec<usize> = (0..4)
            .map(|i| engine_cpu(i, &cores, Affinity::Pus))
            .collect();
        assert_eq!(pus, [0, 2, 1, 3]);
        assert!(bind_set(0, &cores, Affinity::None).is_empty());
    }
}
