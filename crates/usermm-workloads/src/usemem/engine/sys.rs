//! One usemem thread on the engine ([`EngineSys`]): usemem's system calls (`mmap`, `munmap`,
//! `mremap`, `madvise`, `mlock`, shm, files) and its accesses, as [`Sys`] over an [`Mm`] and a
//! [`Task`], with the signals a failed access delivers.

use std::cell::Cell;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use usermm::config::TimeMode;
use usermm::cpu::CpuId;
use usermm::mm::mman::MREMAP_MAYMOVE;
use usermm::mm::mmap::{MapFile, MapFileAt};
use usermm::vtime::{charge, Cost};
use usermm::{Mm, Task};

use super::{EngineProcess, FileKind, Mapping, RunShared, EPOCH_US, MAP_HUGE_MASK, PAGE};
use crate::usemem::sys::{
    Access, Errno, Gate, MapFd, ShmCmd, Stop, Sys, WalkOp, Words, EBADF, EINVAL, ENOMEM,
};
use crate::usemem::worker::{MAP_ANONYMOUS, MAP_HUGETLB, MAP_SHARED, PROT_READ, PROT_WRITE};

/// Bytes of a cache line: the unit a walk's memory traffic is priced in.
const LINE: u64 = 64;

/// One usemem thread on the engine.
pub struct EngineSys {
    pub(super) task: Task,
    pub(super) proc: Arc<EngineProcess>,
    pub(super) shared: Arc<RunShared>,
    pub(super) k: u64,
    pub(super) arrived: [Cell<bool>; 2],
    pub(super) detached: Cell<bool>,
    /// SIGUSR1s this thread has taken, or that came before it started (see [`Usr1`]).
    pub(super) usr1_seen: Cell<u64>,
}

impl std::fmt::Debug for EngineSys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineSys")
            .field("worker", &self.k)
            .field("cpu", &self.task.cpu())
            .finish_non_exhaustive()
    }
}

pub(super) use crate::task::engine_errno as errno;

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
    pub(super) fn new(
        task: Task,
        proc: Arc<EngineProcess>,
        shared: Arc<RunShared>,
        k: u64,
    ) -> Self {
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

    pub(super) fn cpu(&self) -> CpuId {
        self.task.cpu()
    }

    pub(super) fn mm(&self) -> &Arc<Mm> {
        &self.proc.mm
    }

    pub(super) fn rec_at(&self, addr: u64) -> Option<Mapping> {
        let maps = self.proc.maps.lock().unwrap_or_else(|e| e.into_inner());
        maps.iter()
            .find(|r| r.addr <= addr && addr < r.addr.saturating_add(r.len))
            .copied()
    }

    pub(super) fn record(&self, r: Mapping) {
        if r.valid < r.len {
            self.proc.short_maps.store(true, Relaxed);
        }
        self.proc
            .maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(r);
    }

    pub(super) fn forget(&self, addr: u64, len: u64) {
        let end = addr.saturating_add(len);
        self.proc
            .maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|r| r.addr.saturating_add(r.len) <= addr || r.addr >= end);
    }

    /// Is `[addr, addr + len)` covered by VMAs?
    pub(super) fn covered(&self, addr: u64, len: u64) -> bool {
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
    pub(super) fn sigbus_limit(&self, base: u64) -> Option<u64> {
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

    pub(super) fn walk_plain(&self, w: Words, op: WalkOp) -> Result<u64, Stop> {
        let start = w.base.wrapping_add(w.from.wrapping_mul(8));
        let len = (w.to - w.from).saturating_mul(8);
        let value = move |rel: u64| op.data.unwrap_or(w.from + rel);
        self.task
            .walk(start, len, w.stride * 8, op.write, value)
            .map_err(fault_stop)
    }

    pub(super) fn walk_verify(&self, words: Words, op: WalkOp) -> Result<u64, Stop> {
        let (base, to, stride) = (words.base, words.to, words.stride);
        let mut n = 0;
        let mut i = words.from;
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
            let run = Words {
                from: i,
                to: last + 1,
                ..words
            };
            n += self.walk_plain(run, op)?;
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
            .mmap(self.cpu(), 0, len, prot, flags, MapFileAt { file, pgoff })
            .map_err(errno)?;
        self.record(Mapping {
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
            self.record(Mapping {
                addr: n,
                len: new,
                valid,
            });
        }
        Ok(n)
    }

    fn mprotect(&self, addr: u64, len: u64, prot: u32) -> Result<(), Errno> {
        crate::task::engine_mprotect(self.mm(), self.cpu(), addr, len, prot)
    }

    fn madvise(&self, addr: u64, len: u64, advice: i32) -> Result<(), Errno> {
        crate::task::engine_madvise(self.mm(), self.cpu(), addr, len, advice)
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

    fn walk(&self, words: Words, op: WalkOp) -> Result<u64, Stop> {
        let (base, from, to, stride) = (words.base, words.from, words.to, words.stride);
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
        // Virtual time prices the user work itself: the lines the walk streams through (one
        // per word visited once the stride reaches a line). Never read on the wall clock.
        let span = to.saturating_sub(from).saturating_mul(8);
        let lines = if stride.saturating_mul(8) >= LINE {
            to.saturating_sub(from).div_ceil(stride)
        } else {
            span.div_ceil(LINE)
        };
        charge(Cost::UserLine, lines);
        let verify = op.verify && self.shared.stores_data;
        if op.verify && !verify {
            self.shared
                .note_once("sparse backing keeps no data: -r's verification is skipped");
        }
        let mut n = 0;
        if from < to {
            let words = Words { to, ..words };
            n = if verify {
                self.walk_verify(words, op)?
            } else {
                self.walk_plain(words, op)?
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
        // One word out of a walk (random order, the delay's polling, a counted read): priced
        // as a miss in every cache, which the delay's repeated word is not (pessimistic there).
        charge(Cost::UserMiss, 1);
        match a {
            Access::Read => self.task.read_u64(addr),
            Access::Write(v) => self.task.write_u64(addr, v).map(|()| 0),
        }
        .map_err(fault_stop)
    }

    /// In wall mode, one [`Task::access_words`] (one TLB gate hold) for the run of accesses
    /// that pass the checks of [`Sys::access`]; in virtual time, or with a short file mapped
    /// (whose SIGBUS is decided per word), [`Sys::access`] each.
    fn access_many(&self, ops: &[(u64, Access)]) -> Result<(), Stop> {
        let virt = self.task.mm().machine().time_mode() == TimeMode::Virtual;
        if virt || self.proc.short_maps.load(Relaxed) {
            return ops
                .iter()
                .try_for_each(|&(addr, a)| self.access(addr, a).map(|_| ()));
        }
        let ok = ops
            .iter()
            .take_while(|(addr, _)| {
                addr.checked_add(8)
                    .is_some_and(|e| e <= usermm::addr::TASK_SIZE)
            })
            .count();
        let words: Vec<(u64, Option<u64>)> = ops[..ok]
            .iter()
            .map(|&(addr, a)| match a {
                Access::Read => (addr, None),
                Access::Write(v) => (addr, Some(v)),
            })
            .collect();
        self.task
            .access_words(&words)
            .map_err(|(_, f)| fault_stop(f))?;
        match ops.get(ok) {
            Some(&(addr, a)) => self.access(addr, a).map(|_| ()),
            None => Ok(()),
        }
    }

    fn now_us(&self) -> u64 {
        usermm::sync::clock::now().as_ns() / 1000 + EPOCH_US
    }

    fn now_ns(&self) -> u64 {
        usermm::sync::clock::now().as_ns()
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

    fn stdout_full_buffered(&self) -> bool {
        self.shared.io.full_buffered()
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
                    crate::usemem::sys::io_strerror(&e)
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
