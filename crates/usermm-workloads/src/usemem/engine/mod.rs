//! usemem on the engine: each usemem process is an [`Mm`], each worker (the process itself,
//! or each of its `-t` threads) an engine thread on an emulated CPU, started through
//! [`usermm::sync::thread`] and timed by [`usermm::sync::clock`].
//!
//! Worker `k` (`k = process × threads + thread`) runs on CPU `k·b mod nr_cpus` with `-b b`
//! (usemem's `bind_cpu`), otherwise on CPU `k mod nr_cpus`. The barriers are usemem's
//! (every worker arrives, the parent opens), built on the seam's [`Mutex`](usermm::sync::Mutex) and
//! [`CondVar`](usermm::sync::CondVar).
//! Output goes to an [`Io`] as it happens, so lines appear in the order usemem's do: each
//! worker's throughput line, then — when it frees — its free line.
//!
//! usemem's `fork` of each worker process is [`Mm::fork`] of the parent's address space
//! (`proc.rs`'s `fork_proc`): the child has every mapping the parent made, at the same addresses. With
//! `-P` the workers walk the one preallocation copy-on-write, as on the kernel: with `-F` the
//! parent's populated pages are shared until a child writes one (then `do_wp_page` copies
//! it); without `-F` the parent has no pages and each child faults in its own.
//!
//! # Files
//! `gate.rs` the barriers and SIGUSR1, `sys.rs` one thread's system calls and accesses
//! ([`EngineSys`]), `proc.rs` the processes and the platform ([`EnginePlatform`]); this file
//! the state they share.
//!
//! # What the engine does not model, and what stands in for it
//! Each is said once on stderr as a `usermm: note:` line when a run uses it (unless
//! [`Hooks::quiet_notes`]).
//! - **files** (`-f`, `--memfd`, `-D`'s file): the file is opened on the host (so its errors
//!   are usemem's), its pages are engine shmem (`MAP_SHARED`) or anonymous memory
//!   (`MAP_PRIVATE`), one object per mapping, not one page cache per file; an access past the
//!   file's end (page-rounded) dies of SIGBUS as on the kernel. `posix_fadvise` and
//!   `fallocate` punching are not modelled (they succeed).
//! - **SysV shm** (`-L`, `-H`): a shared anonymous (or hugetlb) mapping; `SHM_LOCK` is not
//!   modelled; the segment stays attached to the parent, as after `IPC_RMID`.
//! - **malloc** (`-a`): an anonymous private mapping (glibc's large-allocation path).
//! - **msync** (`-S`, `-A`): nothing to write back from anonymous memory and shmem; only its
//!   argument checks.
//! - With sparse backing the engine keeps no data, so `-r`'s verification is skipped.

mod gate;
mod proc;
mod sys;
#[cfg(test)]
mod test;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use usermm::sync::LockClass;
use usermm::{Machine, Mm};

use super::io::Io;
use super::worker::ProcState;

use self::gate::StartGate;
pub use self::gate::Usr1;
pub use self::proc::EnginePlatform;
pub use self::sys::EngineSys;

/// usemem's pipe barriers and SIGUSR1 waits, as engine waits: user-space sleeps, the futex
/// class every profile prices (a pipe read that blocks costs a wake-up as a futex wait does).
static USEMEM_WAIT: &LockClass = &usermm::sync::class::FUTEX;

const PAGE: u64 = 4096;
/// Added to the engine clock for usemem's `gettimeofday`: its `-T` check treats a start in
/// second 0 as "not set", and a virtual clock starts at 0.
const EPOCH_US: u64 = 1_000_000_000_000_000;
/// `MAP_HUGE_*` size bits (the engine's huge pages are 2 MiB only).
const MAP_HUGE_MASK: u32 = 0x3f << 26;

/// What the caller connects the run to: SIGUSR1, and the foreground to release on `-d`.
#[derive(Default)]
pub struct Hooks {
    pub usr1: Arc<Usr1>,
    /// Called once every worker has detached or ended, if any detached (`-d`): the
    /// foreground process may exit 0.
    pub on_detached: Option<Box<dyn Fn() + Send + Sync>>,
    /// The pid usemem prints (`None`: this process's).
    pub pid: Option<i32>,
    /// Most worker threads alive at once (`None`: what `vm.max_map_count` allows).
    pub max_threads: Option<u64>,
    /// Keep the `usermm: note:` lines off stderr (usemem itself prints none: a `usemem` link
    /// shows them only when asked).
    pub quiet_notes: bool,
}

/// Worker threads this process can add: each costs about five mappings (its stack and guard,
/// its signal stack and guard, and a spare), under the host's `vm.max_map_count`, keeping
/// 4096 for the engine.
fn host_thread_budget() -> u64 {
    let limit = u64::from(usermm_host::facts::max_map_count().unwrap_or(65530));
    let used = usermm_host::usemem::map_count().unwrap_or(1024);
    (limit.saturating_sub(used + 4096) / 5).max(64)
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("pid", &self.pid)
            .field("max_threads", &self.max_threads)
            .field("quiet_notes", &self.quiet_notes)
            .finish_non_exhaustive()
    }
}

/// The file usemem opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileKind {
    None,
    DevZero,
    /// A host file or a memfd: its size, and whether it was opened for writing.
    Sized {
        size: u64,
        writable: bool,
    },
}

/// One mapping a usemem process made, for the end of a file.
#[derive(Debug, Clone, Copy)]
struct Mapping {
    addr: u64,
    len: u64,
    /// Bytes from `addr` that are backed (a file's end); `len` otherwise.
    valid: u64,
}

#[derive(Debug, Default)]
struct DetachState {
    detached: u64,
    ended: u64,
    released: bool,
}

struct RunShared {
    machine: Arc<Machine>,
    io: Arc<dyn Io>,
    gates: [StartGate; 2],
    hooks: Hooks,
    file: std::sync::Mutex<FileKind>,
    shm: std::sync::Mutex<Vec<(u64, bool)>>,
    detach: std::sync::Mutex<DetachState>,
    workers: AtomicU64,
    pid: i32,
    stores_data: bool,
    pid_file: std::sync::Mutex<Option<String>>,
    notes: std::sync::Mutex<BTreeSet<String>>,
    /// The parent's copy of [`super::worker::Plan::inherited_out`], until it exits.
    parent_out: std::sync::Mutex<String>,
}

impl RunShared {
    fn note_once(&self, s: &str) {
        if !self.hooks.quiet_notes
            && self
                .notes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(s.to_string())
        {
            self.io.err(&format!("usermm: note: {s}\n"));
        }
    }

    /// A worker ended; if it never detached, it counts towards releasing the foreground.
    fn worker_ended(&self, detached: bool) {
        let mut d = self.detach.lock().unwrap_or_else(|e| e.into_inner());
        if !detached {
            d.ended += 1;
        }
        self.maybe_release(&mut d);
    }

    /// usemem's parent exits (its `wait3`s are done): its stdio buffer goes out.
    fn parent_exits(&self) {
        let s = std::mem::take(&mut *self.parent_out.lock().unwrap_or_else(|e| e.into_inner()));
        if !s.is_empty() {
            self.io.out(&s);
        }
    }

    fn maybe_release(&self, d: &mut DetachState) {
        if !d.released && d.detached > 0 && d.detached + d.ended >= self.workers.load(Relaxed) {
            d.released = true;
            // Every worker process has detached (its foreground half exited) or ended: this
            // is when usemem's parent exits.
            self.parent_exits();
            if let Some(f) = &self.hooks.on_detached {
                f();
            }
        }
    }
}

/// One usemem process on the engine.
struct EngineProcess {
    mm: Arc<Mm>,
    maps: std::sync::Mutex<Vec<Mapping>>,
    /// Some mapping ends before its length (a file's end): accesses must look it up.
    short_maps: std::sync::atomic::AtomicBool,
    state: ProcState,
    /// Threads still running; the last one's end is the process's `exit_mmap`.
    left: AtomicUsize,
}

impl EngineProcess {
    /// The process ends (its last thread is done, on `cpu`): `exit` flushes its stdio buffer
    /// — what it still holds from the parent — unless a signal killed it, and its mm goes.
    fn end(&self, shared: &RunShared, cpu: usermm::cpu::CpuId) {
        let s = self.state.take_inherited();
        if !s.is_empty() {
            shared.io.out(&s);
        }
        self.mm.mmput(cpu);
    }
}
