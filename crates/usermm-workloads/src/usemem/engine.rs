//! usemem on the engine: each usemem process is an [`Mm`], each worker (the process itself,
//! or each of its `-t` threads) an engine thread on an emulated CPU, started through
//! [`usermm::sync::thread`] and timed by [`usermm::sync::clock`].
//!
//! Worker `k` (`k = process × threads + thread`) runs on CPU `k·b mod nr_cpus` with `-b b`
//! (usemem's `bind_cpu`), otherwise on CPU `k mod nr_cpus`. The barriers are usemem's
//! (every worker arrives, the parent opens), built on the seam's [`Mutex`] and [`CondVar`].
//! Output goes to an [`Io`] as it happens, so lines appear in the order usemem's do: each
//! worker's throughput line, then — when it frees — its free line.
//!
//! usemem's `fork` of each worker process is [`Mm::fork`] of the parent's address space
//! ([`fork_proc`]): the child has every mapping the parent made, at the same addresses. With
//! `-P` the workers walk the one preallocation copy-on-write, as on the kernel: with `-F` the
//! parent's populated pages are shared until a child writes one (then `do_wp_page` copies
//! it); without `-F` the parent has no pages and each child faults in its own.
//!
//! # What the engine does not model, and what stands in for it
//! Each is said once on stderr as a `usermm: note:` line when a run uses it.
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

use std::cell::Cell;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use usermm::config::BackingMode;
use usermm::cpu::CpuId;
use usermm::mm::mman::MREMAP_MAYMOVE;
use usermm::mm::mmap::MapFile;
use usermm::sync::{CondVar, LockClass, Mutex};
use usermm::{Machine, Mm, Task};

use super::io::Io;
use super::program::{self, Outcome, Platform};
use super::sys::{Access, Errno, Gate, MapFd, ShmCmd, Stop, Sys, WalkOp, EBADF, EINVAL, ENOMEM};
use super::worker::{
    bind_cpu, End, Plan, ProcState, Worker, WorkerRecord, MAP_ANONYMOUS, MAP_HUGETLB, MAP_SHARED,
    PROT_READ, PROT_WRITE,
};

/// usemem's pipe barriers and SIGUSR1 waits, as engine waits: user-space sleeps, the futex
/// class every profile prices (a pipe read that blocks costs a wake-up as a futex wait does).
static USEMEM_WAIT: &LockClass = &usermm::sync::class::FUTEX;

const PAGE: u64 = 4096;
/// Added to the engine clock for usemem's `gettimeofday`: its `-T` check treats a start in
/// second 0 as "not set", and a virtual clock starts at 0.
const EPOCH_US: u64 = 1_000_000_000_000_000;
/// `MAP_HUGE_*` size bits (the engine's huge pages are 2 MiB only).
const MAP_HUGE_MASK: u32 = 0x3f << 26;

/// A barrier: workers arrive and wait; the parent opens it once all have arrived (a worker
/// that ends without arriving counts, where usemem's parent would wait for ever).
#[derive(Debug)]
struct EGate {
    st: Mutex<(u64, bool)>,
    cv: CondVar,
}

impl EGate {
    fn new() -> Self {
        EGate {
            st: Mutex::new(USEMEM_WAIT, (0, false)),
            cv: CondVar::new(),
        }
    }

    fn arrive_wait(&self) {
        let mut g = self.st.lock();
        g.0 += 1;
        self.cv.notify_all();
        while !g.1 {
            self.cv.wait(&mut g);
        }
    }

    fn abandon(&self) {
        let mut g = self.st.lock();
        g.0 += 1;
        self.cv.notify_all();
    }

    /// Wait until at least `n` have arrived (without opening).
    fn wait_count(&self, n: u64) {
        let mut g = self.st.lock();
        while g.0 < n {
            self.cv.wait(&mut g);
        }
    }

    fn open_after(&self, n: u64) {
        let mut g = self.st.lock();
        while g.0 < n {
            self.cv.wait(&mut g);
        }
        g.1 = true;
        self.cv.notify_all();
    }
}

/// SIGUSR1 as the engine's workers see it: every signal wakes every worker waiting then.
///
/// usemem blocks SIGUSR1 before it starts and waits in `sigsuspend`, so a signal that comes
/// before a worker reaches its wait stays pending and ends that wait at once. Each worker keeps
/// the count of signals it has taken (from its start) and waits for one more than that.
#[derive(Debug)]
pub struct Usr1 {
    gen: Mutex<u64>,
    cv: CondVar,
}

impl Default for Usr1 {
    fn default() -> Self {
        Usr1 {
            gen: Mutex::new(USEMEM_WAIT, 0),
            cv: CondVar::new(),
        }
    }
}

impl Usr1 {
    /// A SIGUSR1 arrived.
    pub fn raise(&self) {
        *self.gen.lock() += 1;
        self.cv.notify_all();
    }

    /// Signals raised so far.
    fn count(&self) -> u64 {
        *self.gen.lock()
    }

    /// Wait for a signal after the `seen`-th (pending ones coalesce, as a standard signal's
    /// do); returns the count taken.
    fn wait(&self, seen: u64) -> u64 {
        let mut g = self.gen.lock();
        while *g == seen {
            self.cv.wait(&mut g);
        }
        *g
    }
}

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
struct MapRec {
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

struct Shared {
    machine: Arc<Machine>,
    io: Arc<dyn Io>,
    gates: [EGate; 2],
    hooks: Hooks,
    file: std::sync::Mutex<FileKind>,
    shm: std::sync::Mutex<Vec<(u64, bool)>>,
    detach: std::sync::Mutex<DetachState>,
    workers: AtomicU64,
    pid: i32,
    stores_data: bool,
    pid_file: std::sync::Mutex<Option<String>>,
    notes: std::sync::Mutex<BTreeSet<String>>,
}

impl Shared {
    fn note_once(&self, s: &str) {
        if self
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

    fn maybe_release(&self, d: &mut DetachState) {
        if !d.released && d.detached > 0 && d.detached + d.ended >= self.workers.load(Relaxed) {
            d.released = true;
            if let Some(f) = &self.hooks.on_detached {
                f();
            }
        }
    }
}

/// One usemem process on the engine.
struct EProc {
    mm: Arc<Mm>,
    maps: std::sync::Mutex<Vec<MapRec>>,
    /// Some mapping ends before its length (a file's end): accesses must look it up.
    short_maps: std::sync::atomic::AtomicBool,
    state: ProcState,
    /// Threads still running; the last one's end is the process's `exit_mmap`.
    left: AtomicUsize,
}

/// One usemem thread on the engine.
pub struct EngineSys {
    task: Task,
    proc: Arc<EProc>,
    shared: Arc<Shared>,
    k: u64,
    arrived: [Cell<bool>; 2],
    detached: Cell<bool>,
    /// SIGUSR1s this thread has taken, or that came before it started (see [`Usr1`]).
    usr1_seen: Cell<u64>,
}

impl std::fmt::Debug for EngineSys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineSys")
            .field("worker", &self.k)
            .field("cpu", &self.task.cpu())
            .finish_non_exhaustive()
    }
}

fn errno(e: usermm::Errno) -> Errno {
    e.0
}

fn sigsegv(detail: String) -> Stop {
    Stop::Signal {
        name: "SIGSEGV",
        detail,
    }
}

/// The signal a failed access delivers: `SIGSEGV` for `SEGV_MAPERR`/`SEGV_ACCERR`, `SIGBUS`
/// for `VM_FAULT_SIGBUS`, and for `VM_FAULT_OOM` the OOM killer's `SIGKILL` (the engine has no
/// OOM killer to pick a victim; the faulting process, usemem's, is the one that grew).
fn fault_stop(f: usermm::Fault) -> Stop {
    let name = f.code.signal().unwrap_or("SIGKILL");
    Stop::Signal {
        name,
        detail: f.to_string(),
    }
}

impl EngineSys {
    fn new(task: Task, proc: Arc<EProc>, shared: Arc<Shared>, k: u64) -> Self {
        let usr1_seen = Cell::new(shared.hooks.usr1.count());
        EngineSys {
            task,
            proc,
            shared,
            k,
            arrived: [Cell::new(false), Cell::new(false)],
            detached: Cell::new(false),
            usr1_seen,
        }
    }

    fn cpu(&self) -> CpuId {
        self.task.cpu()
    }

    fn mm(&self) -> &Arc<Mm> {
        &self.proc.mm
    }

    fn rec_at(&self, addr: u64) -> Option<MapRec> {
        let maps = self.proc.maps.lock().unwrap_or_else(|e| e.into_inner());
        maps.iter()
            .find(|r| r.addr <= addr && addr < r.addr.saturating_add(r.len))
            .copied()
    }

    fn record(&self, r: MapRec) {
        if r.valid < r.len {
            self.proc.short_maps.store(true, Relaxed);
        }
        self.proc
            .maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(r);
    }

    fn forget(&self, addr: u64, len: u64) {
        let end = addr.saturating_add(len);
        self.proc
            .maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|r| r.addr.saturating_add(r.len) <= addr || r.addr >= end);
    }

    /// Is `[addr, addr + len)` covered by VMAs?
    fn covered(&self, addr: u64, len: u64) -> bool {
        let end = addr.saturating_add(len);
        let t = self.mm().mmap_read_lock();
        let mut cur = addr;
        for v in t.intersecting(addr, end) {
            if v.start > cur {
                return false;
            }
            cur = v.end;
        }
        cur >= end
    }

    /// The first word index at or past which word accesses from `base` die of SIGBUS.
    fn sigbus_limit(&self, base: u64) -> Option<u64> {
        if !self.proc.short_maps.load(Relaxed) {
            return None;
        }
        let r = self.rec_at(base)?;
        if r.valid >= r.len {
            return None;
        }
        let backed_end = r.addr + r.valid.div_ceil(PAGE) * PAGE;
        Some(backed_end.saturating_sub(base) / 8)
    }

    fn walk_plain(
        &self,
        base: u64,
        from: u64,
        to: u64,
        stride: u64,
        op: WalkOp,
    ) -> Result<u64, Stop> {
        let start = base.wrapping_add(from.wrapping_mul(8));
        let len = (to - from).saturating_mul(8);
        let value = move |rel: u64| op.data.unwrap_or(from + rel);
        self.task
            .walk(start, len, stride * 8, op.write, value)
            .map_err(fault_stop)
    }

    fn walk_verify(
        &self,
        base: u64,
        from: u64,
        to: u64,
        stride: u64,
        op: WalkOp,
    ) -> Result<u64, Stop> {
        let mut n = 0;
        let mut i = from;
        let mut buf = vec![0u8; PAGE as usize + 8];
        while i < to {
            let addr = base + i * 8;
            let page_end = (addr / PAGE + 1) * PAGE;
            let end_word = ((page_end - base) / 8).min(to);
            let last = i + (end_word.max(i + 1) - 1 - i) / stride * stride;
            let bytes = ((last - i) * 8 + 8) as usize;
            self.task
                .read(addr, &mut buf[..bytes])
                .map_err(fault_stop)?;
            let mut j = i;
            while j <= last {
                let off = ((j - i) * 8) as usize;
                let found = u64::from_ne_bytes(buf[off..off + 8].try_into().unwrap_or([0; 8]));
                if found != j {
                    return Err(Stop::Mismatch { idx: j, found });
                }
                j += stride;
            }
            n += self.walk_plain(base, i, last + 1, stride, op)?;
            i = match last.checked_add(stride) {
                Some(x) => x,
                None => break,
            };
        }
        Ok(n)
    }
}

impl Sys for EngineSys {
    fn mmap(&self, len: u64, prot: u32, flags: u32, fd: MapFd, offset: i64) -> Result<u64, Errno> {
        if offset & (PAGE as i64 - 1) != 0 {
            return Err(EINVAL);
        }
        let mut flags = flags & !MAP_HUGE_MASK;
        let mut valid = len;
        let file = if flags & MAP_ANONYMOUS != 0 {
            MapFile::None
        } else {
            let kind = match fd {
                MapFd::Opened => *self.shared.file.lock().unwrap_or_else(|e| e.into_inner()),
                MapFd::Anon | MapFd::Closed => FileKind::None,
            };
            // MAP_HUGETLB on a file that is not on hugetlbfs (ksys_mmap_pgoff).
            if kind != FileKind::None && flags & MAP_HUGETLB != 0 {
                return Err(EINVAL);
            }
            match kind {
                FileKind::None => return Err(EBADF),
                FileKind::DevZero => MapFile::DevZero,
                FileKind::Sized { size, writable } => {
                    if flags & MAP_SHARED != 0 && prot & PROT_WRITE != 0 && !writable {
                        return Err(13); // EACCES
                    }
                    self.shared.note_once(
                        "file mappings are engine shmem (MAP_SHARED) or anonymous memory \
                         (MAP_PRIVATE), one object per mapping; the file is only opened on the host",
                    );
                    valid = size.saturating_sub(offset.max(0) as u64);
                    flags |= MAP_ANONYMOUS;
                    MapFile::None
                }
            }
        };
        let pgoff = (offset as u64) >> 12;
        let a = self
            .mm()
            .mmap_pgoff(self.cpu(), 0, len, prot, flags, file, pgoff)
            .map_err(errno)?;
        self.record(MapRec {
            addr: a,
            len,
            valid,
        });
        Ok(a)
    }

    fn munmap(&self, addr: u64, len: u64) -> Result<(), Errno> {
        self.mm().munmap(self.cpu(), addr, len).map_err(errno)?;
        self.forget(addr, len);
        Ok(())
    }

    fn mremap(&self, addr: u64, old: u64, new: u64) -> Result<u64, Errno> {
        let rec = self.rec_at(addr);
        let n = self
            .mm()
            .mremap(self.cpu(), addr, old, new, MREMAP_MAYMOVE, 0)
            .map_err(errno)?;
        // The record moves with the mapping; a file's end stays where it was (memory that is
        // not a file's has none).
        if let Some(r) = rec {
            let valid = if r.valid < r.len {
                r.valid.min(new)
            } else {
                new
            };
            self.forget(addr, old.max(1));
            self.record(MapRec {
                addr: n,
                len: new,
                valid,
            });
        }
        Ok(n)
    }

    fn mprotect(&self, addr: u64, len: u64, prot: u32) -> Result<(), Errno> {
        self.mm()
            .mprotect(self.cpu(), addr, len, prot)
            .map_err(errno)
    }

    fn madvise(&self, addr: u64, len: u64, advice: i32) -> Result<(), Errno> {
        self.mm()
            .madvise(self.cpu(), addr, len, advice)
            .map_err(errno)
    }

    fn mlock(&self, addr: u64, len: u64) -> Result<(), Errno> {
        self.mm().mlock(self.cpu(), addr, len).map_err(errno)
    }

    fn munlock(&self, addr: u64, len: u64) -> Result<(), Errno> {
        self.mm().munlock(self.cpu(), addr, len).map_err(errno)
    }

    fn msync(&self, addr: u64, len: u64, _flags: i32) -> Result<(), Errno> {
        if !addr.is_multiple_of(PAGE) {
            return Err(EINVAL);
        }
        if len != 0 && !self.covered(addr, len) {
            return Err(ENOMEM);
        }
        Ok(())
    }

    fn mincore(&self, addr: u64, len: u64) -> Result<(), Errno> {
        if !addr.is_multiple_of(PAGE) {
            return Err(EINVAL);
        }
        if len == 0 || self.covered(addr, len) {
            Ok(())
        } else {
            Err(ENOMEM)
        }
    }

    fn malloc(&self, len: u64) -> Option<u64> {
        self.shared
            .note_once("-a: malloc is modelled as an anonymous private mmap");
        let a = self
            .mm()
            .mmap(
                self.cpu(),
                0,
                len,
                PROT_READ | PROT_WRITE,
                0x22,
                MapFile::None,
            )
            .ok()?;
        Some(a)
    }

    fn free(&self, addr: u64, len: u64) {
        let _ = self.mm().munmap(self.cpu(), addr, len);
    }

    fn shmget(&self, len: u64, huge: bool) -> Result<i32, Errno> {
        if len == 0 {
            return Err(EINVAL);
        }
        if huge && self.shared.machine.phys().hugetlb_free() < len.div_ceil(2 << 20) {
            return Err(ENOMEM);
        }
        let mut shm = self.shared.shm.lock().unwrap_or_else(|e| e.into_inner());
        shm.push((len, huge));
        Ok(shm.len() as i32 - 1)
    }

    fn shmat(&self, id: i32) -> Result<u64, Errno> {
        let seg = usize::try_from(id).ok().and_then(|i| {
            self.shared
                .shm
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(i)
                .copied()
        });
        let Some((len, huge)) = seg else {
            return Err(EINVAL);
        };
        self.shared.note_once(
            "SysV shared memory is a shared anonymous mapping; SHM_LOCK is not modelled",
        );
        let flags = MAP_SHARED | MAP_ANONYMOUS | if huge { MAP_HUGETLB } else { 0 };
        self.mmap(len, PROT_READ | PROT_WRITE, flags, MapFd::Anon, 0)
    }

    fn shmctl(&self, _id: i32, _cmd: ShmCmd) -> Result<(), Errno> {
        Ok(())
    }

    fn punch_hole(&self, _offset: u64, _len: u64) -> Result<(), Errno> {
        self.shared
            .note_once("--fallocate-punch-holes: there is no file to punch in the engine");
        Ok(())
    }

    fn walk(&self, base: u64, from: u64, to: u64, stride: u64, op: WalkOp) -> Result<u64, Stop> {
        if from >= to {
            return Ok(0);
        }
        let top = to
            .checked_mul(8)
            .and_then(|b| base.checked_add(b))
            .filter(|&e| e <= usermm::addr::TASK_SIZE);
        if top.is_none() {
            return Err(sigsegv(format!(
                "access at {:#x}",
                base.wrapping_add(from.wrapping_mul(8))
            )));
        }
        let (to, bus) = match self.sigbus_limit(base) {
            Some(lim) if lim < to => (lim.max(from), true),
            _ => (to, false),
        };
        let verify = op.verify && self.shared.stores_data;
        if op.verify && !verify {
            self.shared
                .note_once("sparse backing keeps no data: -r's verification is skipped");
        }
        let mut n = 0;
        if from < to {
            n = if verify {
                self.walk_verify(base, from, to, stride, op)?
            } else {
                self.walk_plain(base, from, to, stride, op)?
            };
        }
        if bus {
            return Err(Stop::Signal {
                name: "SIGBUS",
                detail: "an access past the end of the file".into(),
            });
        }
        Ok(n)
    }

    fn access(&self, addr: u64, a: Access) -> Result<u64, Stop> {
        if addr
            .checked_add(8)
            .is_none_or(|e| e > usermm::addr::TASK_SIZE)
        {
            return Err(sigsegv(format!("access at {addr:#x}")));
        }
        if let Some(r) = self
            .proc
            .short_maps
            .load(Relaxed)
            .then(|| self.rec_at(addr))
            .flatten()
        {
            if addr - r.addr >= r.valid.div_ceil(PAGE) * PAGE {
                return Err(Stop::Signal {
                    name: "SIGBUS",
                    detail: "an access past the end of the file".into(),
                });
            }
        }
        match a {
            Access::Read => self.task.read_u64(addr),
            Access::Write(v) => self.task.write_u64(addr, v).map(|()| 0),
        }
        .map_err(fault_stop)
    }

    fn now_us(&self) -> u64 {
        usermm::sync::clock::now().as_ns() / 1000 + EPOCH_US
    }

    fn sleep_secs(&self, secs: u64) {
        usermm::sync::thread::sleep(std::time::Duration::from_secs(secs));
    }

    fn pid(&self) -> i32 {
        self.shared.pid
    }

    fn tid(&self) -> i32 {
        self.shared.pid.wrapping_add(self.k as i32 + 1)
    }

    fn time(&self) -> u64 {
        self.now_us() / 1_000_000
    }

    fn out(&self, s: &str) {
        self.shared.io.out(s);
    }

    fn err(&self, s: &str) {
        self.shared.io.err(s);
    }

    fn ready(&self, gate: Gate) {
        let g = gate as usize;
        self.arrived[g].set(true);
        self.shared.gates[g].arrive_wait();
    }

    fn wait_sigusr1(&self) {
        let seen = self.shared.hooks.usr1.wait(self.usr1_seen.get());
        self.usr1_seen.set(seen);
    }

    fn getchar(&self) -> Option<u8> {
        self.shared.io.getchar()
    }

    fn detach(&self) -> i32 {
        let pid = self.shared.pid;
        if let Some(path) = self
            .shared
            .pid_file
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_deref()
        {
            if let Err(e) = usermm_host::usemem::append_pid(path, pid) {
                self.err(&format!(
                    "{path}: {}\n",
                    super::sys::strerror(e.raw_os_error().unwrap_or(0))
                ));
            }
        }
        self.detached.set(true);
        let mut d = self.shared.detach.lock().unwrap_or_else(|e| e.into_inner());
        d.detached += 1;
        self.shared.maybe_release(&mut d);
        pid
    }

    fn note(&self, s: &str) {
        self.shared.note_once(s);
    }
}

/// usemem's `fork` of the parent: [`Mm::fork`] of the parent's address space, so the child
/// has every mapping the parent made (the preallocation, `-L`'s segment), at the same
/// addresses, its anonymous pages shared copy-on-write; and a copy of the parent's mapping
/// records (the ends of files).
#[doc(alias = "fork")]
fn fork_proc(parent: &EngineSys, cpu: CpuId) -> Result<(Arc<Mm>, Vec<MapRec>), Errno> {
    let mm = parent.mm().fork(cpu).map_err(errno)?;
    let maps = parent
        .proc
        .maps
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    Ok((mm, maps))
}

/// The engine as a usemem [`Platform`].
#[derive(Debug)]
pub struct EnginePlatform {
    main: EngineSys,
    nr_cpus: u64,
    /// Most worker threads alive at once.
    max_threads: u64,
}

impl EnginePlatform {
    /// A platform on `machine`, printing through `io`.
    pub fn new(
        machine: &Arc<Machine>,
        io: Arc<dyn Io>,
        hooks: Hooks,
    ) -> Result<Self, usermm::Errno> {
        let cpu0 = CpuId(0);
        let max_threads = hooks.max_threads.unwrap_or_else(host_thread_budget);
        let mm = Mm::new(machine, cpu0)?;
        let shared = Arc::new(Shared {
            machine: Arc::clone(machine),
            io,
            gates: [EGate::new(), EGate::new()],
            pid: hooks.pid.unwrap_or(std::process::id() as i32),
            hooks,
            file: std::sync::Mutex::new(FileKind::None),
            shm: Default::default(),
            detach: Default::default(),
            workers: AtomicU64::new(0),
            stores_data: machine.phys().backing().mode() == BackingMode::Full,
            pid_file: Default::default(),
            notes: Default::default(),
        });
        let plan0 = Plan {
            name: String::new(),
            opts: Default::default(),
            done_bytes: 0,
            fd: MapFd::Opened,
            start_us: None,
        };
        let proc = Arc::new(EProc {
            mm: Arc::clone(&mm),
            maps: Default::default(),
            short_maps: Default::default(),
            state: ProcState::new(&plan0, None, 0),
            left: AtomicUsize::new(1),
        });
        Ok(EnginePlatform {
            main: EngineSys::new(Task::new(mm, cpu0), proc, shared, 0),
            nr_cpus: machine.cpus().nr_possible() as u64,
            max_threads,
        })
    }

    /// Run usemem with `args` (the words after its name).
    pub fn run(
        &mut self,
        name: &str,
        args: &[String],
        posixly_correct: bool,
        engine_help: &str,
    ) -> Outcome {
        let out = program::main(self, name, args, posixly_correct, engine_help);
        self.main.proc.mm.mmput(self.main.cpu());
        out
    }
}

impl Platform for EnginePlatform {
    type Sys = EngineSys;

    fn main_sys(&self) -> &EngineSys {
        &self.main
    }

    fn nr_cpu(&self) -> u64 {
        self.nr_cpus
    }

    fn open(
        &mut self,
        path: Option<&str>,
        read_only: bool,
        memfd: bool,
        size: u64,
    ) -> Result<(), Errno> {
        let kind = if memfd {
            FileKind::Sized {
                size,
                writable: true,
            }
        } else if path == Some("/dev/zero") {
            FileKind::DevZero
        } else {
            let f = usermm_host::usemem::open_create(path, read_only)?;
            FileKind::Sized {
                size: f.size,
                writable: !read_only,
            }
        };
        *self
            .main
            .shared
            .file
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = kind;
        Ok(())
    }

    fn fadvise(&mut self, _willneed: bool) {
        self.main
            .shared
            .note_once("-D: posix_fadvise is not modelled (the engine has no page cache)");
    }

    fn close(&mut self) {
        *self
            .main
            .shared
            .file
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = FileKind::None;
    }

    fn notes(&self, plan: &Plan) -> Vec<String> {
        let mut v = Vec::new();
        if plan.opts.detach && plan.opts.threads > 0 {
            v.push("-d with -t: each thread detaches on its own (usemem's fork keeps one)".into());
        }
        v
    }

    fn run_tasks(&mut self, plan: &Plan, prealloc: Option<u64>) -> Vec<WorkerRecord> {
        let shared = Arc::clone(&self.main.shared);
        *shared.pid_file.lock().unwrap_or_else(|e| e.into_inner()) = plan.opts.pid_file.clone();
        let o = &plan.opts;
        let threads = o.threads_per_process();
        let per_proc = threads.max(1);
        let total = o.workers();
        shared.workers.store(total, Relaxed);
        let plan = Arc::new(plan.clone());
        let nr_cpus = self.nr_cpus;
        let mut handles = Vec::new();
        // Beyond `cap` host threads at once, workers run in waves; the barriers then hold the
        // first wave only (a later worker finds them open).
        let cap = self.max_threads.max(1);
        let wave = total.min(cap);
        if total > cap {
            shared.note_once(&format!(
                "{total} workers are more host threads than this host's vm.max_map_count allows \
                 at once: they run in waves of {cap}, and the barriers hold the first wave only"
            ));
        }
        let done = Arc::new(EGate::new());
        let mut started = 0u64;
        let mut opened = false;
        let open = |shared: &Shared| {
            shared.gates[Gate::Start as usize].open_after(wave);
            if o.sync_free {
                shared.gates[Gate::Free as usize].open_after(wave);
            }
        };
        for i in 0..o.processes() {
            let first = i * per_proc;
            let cpu = CpuId((first % nr_cpus) as u16);
            let (mm, maps) = match fork_proc(&self.main, cpu) {
                Ok(x) => x,
                Err(e) => {
                    shared
                        .io
                        .err(&format!("failed to fork: {}\n", super::sys::strerror(e)));
                    for _ in 0..per_proc {
                        for gate in &shared.gates {
                            gate.abandon();
                        }
                        shared.worker_ended(false);
                    }
                    continue;
                }
            };
            let short = maps.iter().any(|r| r.valid < r.len);
            let proc = Arc::new(EProc {
                mm,
                maps: std::sync::Mutex::new(maps),
                short_maps: std::sync::atomic::AtomicBool::new(short),
                state: ProcState::new(&plan, prealloc, i),
                left: AtomicUsize::new(per_proc as usize),
            });
            for t in 0..per_proc {
                let k = first + t;
                if started == wave && !opened {
                    open(&shared);
                    opened = true;
                }
                if started >= cap {
                    // Wait for a slot: `done` counts the workers that have finished.
                    done.wait_count(started + 1 - cap);
                }
                started += 1;
                let finished = Arc::clone(&done);
                let bound = if o.bind != 0 {
                    bind_cpu(k, o.bind, if o.bind > 0 { nr_cpus } else { 0 })
                } else {
                    Some(k % nr_cpus)
                };
                let (proc, sh, plan) = (Arc::clone(&proc), Arc::clone(&shared), Arc::clone(&plan));
                let cpu = CpuId(bound.unwrap_or(0) as u16);
                let spawned = usermm::sync::thread::spawn_named_on(
                    cpu,
                    format!("usemem-{k}"),
                    move |cpu| {
                        let shared = sh;
                        let sys = EngineSys::new(
                            Task::new(Arc::clone(&proc.mm), cpu),
                            Arc::clone(&proc),
                            Arc::clone(&shared),
                            k,
                        );
                        let mut w = Worker::new(&sys, &plan, &proc.state, k, cpu.0);
                        let end = if bound.is_none() {
                            // usemem's bind_cpu divides by a CPU count it never read.
                            sys.note("-b below 0: usemem's worker dies of SIGFPE (a division by zero) here");
                            End::Signal("SIGFPE".into())
                        } else {
                            w.run()
                        };
                        let mut rec = w.rec;
                        rec.end = Some(end);
                        for (g, gate) in shared.gates.iter().enumerate() {
                            if !sys.arrived[g].get() {
                                gate.abandon();
                            }
                        }
                        shared.worker_ended(sys.detached.get());
                        if proc.left.fetch_sub(1, Relaxed) == 1 {
                            proc.mm.mmput(cpu);
                        }
                        finished.abandon();
                        rec
                    },
                );
                match spawned {
                    Ok(h) => handles.push(h),
                    Err(e) => {
                        let what = if threads > 0 {
                            "pthread_create"
                        } else {
                            "failed to fork"
                        };
                        shared.io.err(&format!("{what}: {e}\n"));
                        for gate in &shared.gates {
                            gate.abandon();
                        }
                        shared.worker_ended(false);
                        done.abandon();
                    }
                }
            }
        }
        if !opened {
            open(&shared);
        }
        let mut recs: Vec<WorkerRecord> =
            handles.into_iter().filter_map(|h| h.join().ok()).collect();
        recs.sort_by_key(|r| r.worker);
        recs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usemem::io::Capture;
    use crate::usemem::worker::{MAP_POPULATE, MAP_PRIVATE};
    use usermm::config::MachineConfig;
    use usermm::mm::RssItem;
    use usermm::stats::VmItem;

    /// usemem's fork shares the parent's pages until one side writes: the child maps every
    /// populated page of the parent without a fault of its own, a write on either side copies
    /// that one page, and the two exits give every frame back.
    #[test]
    fn fork_shares_the_preallocation_copy_on_write() {
        let m = Machine::new(MachineConfig {
            mem: 64 << 20,
            cpus: 2,
            backing: BackingMode::Full,
            ..MachineConfig::default()
        })
        .unwrap();
        let before = m.meminfo();
        let p = EnginePlatform::new(&m, Arc::new(Capture::default()), Hooks::default()).unwrap();
        let parent = &p.main;
        let pages = 256u64;
        let len = pages * PAGE;
        let flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE;
        let a = parent
            .mmap(len, PROT_READ | PROT_WRITE, flags, MapFd::Anon, 0)
            .unwrap();
        parent.access(a + 8, Access::Write(7)).unwrap();
        let anon = || m.vmstat().get(VmItem::NrAnonPages);
        assert_eq!(anon(), pages as i64);

        let cpu1 = CpuId(1);
        let (mm, maps) = fork_proc(parent, cpu1).unwrap();
        assert_eq!(maps.len(), 1);
        assert_eq!(maps[0].addr, a);
        let child = EngineSys::new(
            Task::new(Arc::clone(&mm), cpu1),
            Arc::new(EProc {
                mm: Arc::clone(&mm),
                maps: std::sync::Mutex::new(maps),
                short_maps: Default::default(),
                state: ProcState::new(&p_plan(), Some(a), 0),
                left: AtomicUsize::new(1),
            }),
            Arc::clone(&parent.shared),
            1,
        );
        // Shared: the child maps all of them, no page is new, and it reads the parent's data
        // without faulting.
        assert_eq!(mm.rss(RssItem::AnonPages), pages as i64);
        assert_eq!(anon(), pages as i64);
        let faults = m.vmstat().get(VmItem::Pgfault);
        assert_eq!(child.access(a + 8, Access::Read).unwrap(), 7);
        assert_eq!(m.vmstat().get(VmItem::Pgfault), faults);

        // The child's first write to page 0 copies it; the parent keeps its word.
        child.access(a + 8, Access::Write(9)).unwrap();
        assert_eq!(m.vmstat().get(VmItem::Pgfault), faults + 1);
        assert_eq!(anon(), pages as i64 + 1);
        assert_eq!(child.access(a + 8, Access::Read).unwrap(), 9);
        assert_eq!(parent.access(a + 8, Access::Read).unwrap(), 7);
        // A second write to the same page is the child's own page: no fault.
        child.access(a + 16, Access::Write(1)).unwrap();
        assert_eq!(m.vmstat().get(VmItem::Pgfault), faults + 1);
        // The parent's write to a still-shared page copies too (fork made its entry read-only).
        parent.access(a + PAGE, Access::Write(3)).unwrap();
        assert_eq!(anon(), pages as i64 + 2);
        assert_eq!(child.access(a + PAGE, Access::Read).unwrap(), 0);
        assert_eq!(mm.rss(RssItem::AnonPages), pages as i64);
        assert_eq!(parent.mm().rss(RssItem::AnonPages), pages as i64);
        mm.validate().unwrap();
        parent.mm().validate().unwrap();

        // The child exits first: only its two copies go; the parent's pages stay.
        mm.mmput(cpu1);
        assert_eq!(anon(), pages as i64);
        // The parent's exit (EnginePlatform::run's mmput) gives back the rest.
        parent.mm().mmput(CpuId(0));
        assert_eq!(anon(), 0);
        drop(child);
        drop(p);
        let after = m.meminfo();
        assert_eq!(after.page_tables, before.page_tables);
        assert_eq!(after.mem_available, before.mem_available);
        m.validate().unwrap();
    }

    /// `-E`'s mremap is the engine's: the pages move with the mapping (their data and the
    /// rss with them), and the mapping's record follows it.
    #[test]
    fn mremap_moves_the_pages() {
        let m = Machine::new(MachineConfig {
            mem: 64 << 20,
            cpus: 1,
            backing: BackingMode::Full,
            ..MachineConfig::default()
        })
        .unwrap();
        let p = EnginePlatform::new(&m, Arc::new(Capture::default()), Hooks::default()).unwrap();
        let s = &p.main;
        let len = 16 * PAGE;
        let flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE;
        let a = s
            .mmap(len, PROT_READ | PROT_WRITE, flags, MapFd::Anon, 0)
            .unwrap();
        s.access(a + 3 * PAGE, Access::Write(42)).unwrap();
        let allocs = m.vmstat().get(VmItem::PgallocNormal);
        let n = s.mremap(a, len, 10 * len).unwrap();
        // Nothing was copied: at most the new range's page tables were allocated.
        assert!(m.vmstat().get(VmItem::PgallocNormal) - allocs <= 3);
        assert_eq!(s.access(n + 3 * PAGE, Access::Read).unwrap(), 42);
        assert_eq!(s.mm().rss(RssItem::AnonPages), 16);
        assert!(s.rec_at(a).is_none() || n == a);
        assert_eq!(s.rec_at(n).map(|r| r.len), Some(10 * len));
        // Anonymous memory has no end before the mapping's: the grown part is writable.
        s.access(n + 100 * PAGE, Access::Write(1)).unwrap();
        assert_eq!(s.mremap(a + 1, len, len), Err(EINVAL));
        s.mm().validate().unwrap();
        s.mm().mmput(CpuId(0));
        drop(p);
        assert_eq!(m.vmstat().get(VmItem::NrAnonPages), 0);
        m.validate().unwrap();
    }

    fn p_plan() -> Plan {
        Plan {
            name: String::new(),
            opts: Default::default(),
            done_bytes: 0,
            fd: MapFd::Opened,
            start_us: None,
        }
    }

    /// A SIGUSR1 that comes before the worker reaches its wait is pending, not lost (the
    /// write-signal-read CLI test hung so when `kill` beat the worker to its wait).
    #[test]
    fn a_sigusr1_before_the_wait_ends_it() {
        let u = Usr1::default();
        let seen = u.count();
        u.raise();
        assert_eq!(u.wait(seen), seen + 1);
        // Two before the next wait coalesce into one, as a standard signal's do.
        u.raise();
        u.raise();
        assert_eq!(u.wait(seen + 1), seen + 3);
    }
}
