//! The host kernel as vm-scalability's `usemem` uses it: files, mappings, word accesses,
//! SysV segments, processes, pipe barriers, SIGUSR1 — for `usermm usemem --host`, which runs
//! usemem's semantics (written once in `usermm-workloads`) on the real kernel, and for the
//! few host facts the engine's run needs (the file it opens, the pid it prints).
//!
//! # Contracts
//! - **Word accesses touch only mappings made here.** [`Space`] records every range its
//!   `mmap`, `mremap`, `shmat` and `malloc` returned; [`Space::walk`] and [`Space::access`]
//!   refuse anything else with [`Unmapped`], and the caller then dies of SIGSEGV
//!   ([`die_of_signal`]) as usemem would have. Inside a recorded range the kernel decides: a
//!   write to a read-only mapping or a page past a file's end kills the process with SIGSEGV
//!   or SIGBUS — again as it kills usemem.
//! - **Forks are from a single-threaded process.** usemem forks its workers from `main` and
//!   its detaching workers from themselves; [`fork_process`] refuses unless the calling
//!   process has exactly one thread, so the child is a whole process that may allocate,
//!   start threads and print. (The measurement children of `fork.rs` live under the stricter
//!   async-signal-safe contract because their parent is multi-threaded.)
//! - Errors are errno values, as usemem prints them with `strerror`.

#![expect(unsafe_code)]

use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

use crate::sys;

/// An open file: usemem's `fd` (the file it maps, `/dev/zero` by default, or a memfd).
#[derive(Debug)]
pub struct HostFile {
    fd: OwnedFd,
    /// Its size when opened (`fstat`), for what lies past its end.
    pub size: u64,
}

fn cstr(s: &str) -> Result<CString, i32> {
    CString::new(s).map_err(|_| libc::EINVAL)
}

fn fstat_size(fd: libc::c_int) -> u64 {
    // SAFETY: stat is plain old data; all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is valid and writable; `fd` is an open descriptor we own.
    if unsafe { libc::fstat(fd, &mut st) } == 0 {
        st.st_size.max(0) as u64
    } else {
        0
    }
}

/// `open(path, (read_only ? O_RDONLY : O_RDWR) | O_CREAT, 0666)`; `None` is usemem's NULL
/// path (`EFAULT`).
pub fn open_create(path: Option<&str>, read_only: bool) -> Result<HostFile, i32> {
    let Some(path) = path else {
        return Err(libc::EFAULT);
    };
    let c = cstr(path)?;
    let flags = if read_only {
        libc::O_RDONLY
    } else {
        libc::O_RDWR
    } | libc::O_CREAT
        | libc::O_CLOEXEC;
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    let fd = unsafe { libc::open(c.as_ptr(), flags, 0o666 as libc::c_uint) };
    if fd < 0 {
        return Err(sys::errno());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let size = fstat_size(fd.as_raw_fd());
    Ok(HostFile { fd, size })
}

/// `memfd_create(name, 0)` then `ftruncate(fd, size)` (usemem ignores the truncate's result).
pub fn memfd(name: &str, size: u64) -> Result<HostFile, i32> {
    let c = cstr(name)?;
    // SAFETY: `c` is NUL-terminated and outlives the call.
    let fd = unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(sys::errno());
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ftruncate on our own descriptor.
    unsafe { libc::ftruncate(fd.as_raw_fd(), size.min(i64::MAX as u64) as libc::off_t) };
    let size = fstat_size(fd.as_raw_fd());
    Ok(HostFile { fd, size })
}

impl HostFile {
    /// `posix_fadvise(fd, 0, 0, WILLNEED or DONTNEED)`.
    pub fn fadvise(&self, willneed: bool) {
        let advice = if willneed {
            libc::POSIX_FADV_WILLNEED
        } else {
            libc::POSIX_FADV_DONTNEED
        };
        // SAFETY: advice on our own descriptor; no memory is passed.
        unsafe { libc::posix_fadvise(self.fd.as_raw_fd(), 0, 0, advice) };
    }

    /// `fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, len)`.
    pub fn punch_hole(&self, offset: u64, len: u64) -> Result<(), i32> {
        // SAFETY: a file operation on our own descriptor; no memory is passed.
        let r = unsafe {
            libc::fallocate(
                self.fd.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(sys::errno())
        }
    }

    fn raw(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }
}

/// An access outside every mapping this [`Space`] made: the process must die of SIGSEGV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unmapped;

/// What [`Space::walk`] does at each word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WordOp {
    /// Store (else load).
    pub write: bool,
    /// The value stored: this constant, or the word's index.
    pub data: Option<u64>,
    /// First check that the word holds its index.
    pub verify: bool,
}

/// Why a walk stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkError {
    /// Verification found `found` at word `idx`.
    Mismatch {
        idx: u64,
        found: u64,
    },
    Unmapped,
}

/// This process's usemem mappings, and the calls that make and change them.
#[derive(Debug, Default)]
pub struct Space {
    /// `(start, len, from malloc)` of every live mapping made here.
    maps: Mutex<Vec<(u64, u64, bool)>>,
}

fn sysret(r: libc::c_long) -> Result<u64, i32> {
    if r < 0 {
        Err(sys::errno())
    } else {
        Ok(r as u64)
    }
}

impl Space {
    pub fn new() -> Self {
        Self::default()
    }

    fn record(&self, start: u64, len: u64, malloc: bool) {
        self.maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((start, len, malloc));
    }

    /// Forget the records inside `[start, start + len)` (trimming those that straddle it is
    /// not needed: usemem unmaps whole mappings).
    fn forget(&self, start: u64, len: u64) {
        let end = start.saturating_add(len);
        self.maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|&(s, l, _)| s.saturating_add(l) <= start || s >= end);
    }

    /// Is `[start, end)` inside one recorded mapping?
    fn covers(&self, start: u64, end: u64) -> bool {
        self.maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|&(s, l, _)| s <= start && end <= s.saturating_add(l) && start <= end)
    }

    /// `mmap(NULL, len, prot, flags, fd or -1, offset)`.
    pub fn mmap(
        &self,
        len: u64,
        prot: u32,
        flags: u32,
        file: Option<&HostFile>,
        offset: i64,
    ) -> Result<u64, i32> {
        let fd = file.map_or(-1i64 as u64, |f| f.raw() as i64 as u64);
        // SAFETY: no MAP_FIXED (usemem never asks for it): nothing existing is replaced.
        let a = unsafe {
            sys::mmap(
                0,
                len,
                u64::from(prot),
                u64::from(flags & !(libc::MAP_FIXED as u32)),
                fd,
                offset as u64,
            )
        }?;
        self.record(a, len, false);
        Ok(a)
    }

    /// `munmap(addr, len)` of a mapping made here (anything else is left alone: `EINVAL`).
    pub fn munmap(&self, addr: u64, len: u64) -> Result<(), i32> {
        if !self.covers(addr, addr.saturating_add(len)) {
            return Err(libc::EINVAL);
        }
        // SAFETY: the range is one of our usemem mappings: it holds no Rust object.
        unsafe { sys::munmap(addr, len) }?;
        self.forget(addr, len);
        Ok(())
    }

    /// `mremap(addr, old, new, MREMAP_MAYMOVE)`.
    pub fn mremap(&self, addr: u64, old: u64, new: u64) -> Result<u64, i32> {
        if !self.covers(addr, addr.saturating_add(old)) {
            return Err(libc::EFAULT);
        }
        // SAFETY: the old range is one of our mappings; MAYMOVE without FIXED only replaces it.
        let r =
            unsafe { libc::syscall(libc::SYS_mremap, addr, old, new, libc::MREMAP_MAYMOVE, 0u64) };
        let n = sysret(r)?;
        self.forget(addr, old);
        self.record(n, new, false);
        Ok(n)
    }

    /// The range check shared by the calls that take an address: outside our mappings, the
    /// kernel's answer for an unmapped range.
    fn ours(&self, addr: u64, len: u64, unmapped: i32) -> Result<(), i32> {
        if len == 0 || self.covers(addr, addr.saturating_add(len)) {
            Ok(())
        } else {
            Err(unmapped)
        }
    }

    pub fn mprotect(&self, addr: u64, len: u64, prot: u32) -> Result<(), i32> {
        self.ours(addr, len, libc::ENOMEM)?;
        // SAFETY: the range is one of our usemem mappings.
        unsafe { sys::mprotect(addr, len, u64::from(prot)) }.map(drop)
    }

    pub fn madvise(&self, addr: u64, len: u64, advice: i32) -> Result<(), i32> {
        self.ours(addr, len, libc::ENOMEM)?;
        // SAFETY: the range is one of our usemem mappings.
        unsafe { sys::madvise(addr, len, advice as i64 as u64) }.map(drop)
    }

    pub fn mlock(&self, addr: u64, len: u64) -> Result<(), i32> {
        self.ours(addr, len, libc::ENOMEM)?;
        // SAFETY: the range is one of our usemem mappings.
        unsafe { sys::mlock(addr, len) }.map(drop)
    }

    pub fn munlock(&self, addr: u64, len: u64) -> Result<(), i32> {
        self.ours(addr, len, libc::ENOMEM)?;
        // SAFETY: the range is one of our usemem mappings.
        unsafe { sys::munlock(addr, len) }.map(drop)
    }

    pub fn msync(&self, addr: u64, len: u64, flags: i32) -> Result<(), i32> {
        self.ours(addr, len, libc::ENOMEM)?;
        // SAFETY: msync writes back our own mapping; no Rust object is in it.
        sysret(unsafe { libc::syscall(libc::SYS_msync, addr, len, flags) }).map(drop)
    }

    /// `mincore(addr, len, vec)` into a vector of our own (usemem does not look at it).
    pub fn mincore(&self, addr: u64, len: u64) -> Result<(), i32> {
        let pages = len.div_ceil(4096);
        let mut vec = vec![0u8; pages.min(1 << 30) as usize + 1];
        // SAFETY: the kernel writes one byte per page of the range into `vec`, which has room
        // for all of them; the range itself is only looked at.
        let r = unsafe { libc::syscall(libc::SYS_mincore, addr, len, vec.as_mut_ptr()) };
        sysret(r).map(drop)
    }

    /// `malloc(len)`.
    pub fn malloc(&self, len: u64) -> Option<u64> {
        // SAFETY: malloc has no preconditions; the block is ours until `free`.
        let p = unsafe { libc::malloc(len as usize) } as u64;
        if p == 0 {
            return None;
        }
        self.record(p, len, true);
        Some(p)
    }

    /// `free(addr)` of a block from [`Space::malloc`].
    pub fn free(&self, addr: u64) {
        let mut maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = maps.iter().position(|&(s, _, m)| m && s == addr) {
            maps.swap_remove(i);
            // SAFETY: `addr` came from malloc and has not been freed (it was still recorded).
            unsafe { libc::free(addr as *mut libc::c_void) };
        }
    }

    /// `shmget(IPC_PRIVATE, len, flags)`: usemem's `-L` asks `IPC_CREAT | IPC_EXCL` (mode 0),
    /// `-H` asks `SHM_HUGETLB | IPC_CREAT | SHM_R | SHM_W`.
    pub fn shmget(&self, len: u64, huge: bool) -> Result<i32, i32> {
        let flags = if huge {
            libc::SHM_HUGETLB | libc::IPC_CREAT | 0o600
        } else {
            libc::IPC_CREAT | libc::IPC_EXCL
        };
        // SAFETY: creates a segment; no memory is passed.
        let id = unsafe { libc::shmget(libc::IPC_PRIVATE, len as usize, flags) };
        if id < 0 {
            Err(sys::errno())
        } else {
            Ok(id)
        }
    }

    /// `shmat(id, NULL, flags)`; the segment's size is recorded for the accesses.
    pub fn shmat(&self, id: i32) -> Result<u64, i32> {
        // SAFETY: IPC_STAT fills a plain-old-data struct we own.
        let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
        // SAFETY: `ds` is valid and writable.
        let len = if unsafe { libc::shmctl(id, libc::IPC_STAT, &mut ds) } == 0 {
            ds.shm_segsz as u64
        } else {
            0
        };
        // SAFETY: attaches at an address the kernel chooses; nothing existing is replaced.
        let p = unsafe { libc::shmat(id, std::ptr::null(), libc::SHM_RND) } as i64;
        if p == -1 {
            return Err(sys::errno());
        }
        self.record(p as u64, len, false);
        Ok(p as u64)
    }

    /// `shmctl(id, SHM_LOCK | SHM_UNLOCK | IPC_RMID)`: `cmd` is 0, 1, 2 for those.
    pub fn shmctl(&self, id: i32, cmd: u32) -> Result<(), i32> {
        let c = match cmd {
            0 => libc::SHM_LOCK,
            1 => libc::SHM_UNLOCK,
            _ => libc::IPC_RMID,
        };
        // SAFETY: these commands take no buffer.
        let r = unsafe { libc::shmctl(id, c, std::ptr::null_mut()) };
        if r < 0 {
            Err(sys::errno())
        } else {
            Ok(())
        }
    }

    /// Visit the 8-byte words `from, from + stride, ...` below `to` of the array at `base`:
    /// load each, or store `op.data` (or the word's index), checking first with `op.verify`
    /// that it holds its index. Returns the number of words visited.
    pub fn walk(
        &self,
        base: u64,
        from: u64,
        to: u64,
        stride: u64,
        op: WordOp,
    ) -> Result<u64, WalkError> {
        let WordOp {
            write,
            data,
            verify,
        } = op;
        if from >= to {
            return Ok(0);
        }
        let stride = stride.max(1);
        let last = from + (to - 1 - from) / stride * stride;
        let (Some(lo), Some(hi)) = (
            from.checked_mul(8).and_then(|o| base.checked_add(o)),
            last.checked_mul(8).and_then(|o| base.checked_add(o + 8)),
        ) else {
            return Err(WalkError::Unmapped);
        };
        if !self.covers(lo, hi) {
            return Err(WalkError::Unmapped);
        }
        let p = base as *mut u64;
        let mut n = 0;
        let mut i = from;
        while i < to {
            // SAFETY: word `i` lies in [lo, hi), inside a mapping this Space made and has not
            // unmapped; no Rust object lives there (or, for malloc, the block is ours alone).
            let w = unsafe { p.add(i as usize) };
            if verify {
                // SAFETY: as above.
                let found = unsafe { w.read_volatile() };
                if found != i {
                    return Err(WalkError::Mismatch { idx: i, found });
                }
            }
            if write {
                // SAFETY: as above.
                unsafe { w.write_volatile(data.unwrap_or(i)) };
            } else {
                // SAFETY: as above.
                std::hint::black_box(unsafe { w.read_volatile() });
            }
            n += 1;
            i = match i.checked_add(stride) {
                Some(x) => x,
                None => break,
            };
        }
        Ok(n)
    }

    /// One 8-byte load (returned) or store at `addr`.
    pub fn access(&self, addr: u64, store: Option<u64>) -> Result<u64, Unmapped> {
        if !self.covers(addr, addr.saturating_add(8)) {
            return Err(Unmapped);
        }
        let w = addr as *mut u64;
        // SAFETY: the word is inside a mapping this Space made (checked above).
        unsafe {
            match store {
                Some(v) => {
                    w.write_volatile(v);
                    Ok(0)
                }
                None => Ok(w.read_volatile()),
            }
        }
    }
}

/// How many mappings this process has (lines of `/proc/self/maps`), if readable.
pub fn map_count() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/maps").ok()?;
    Some(s.lines().count() as u64)
}

/// How many threads this process has (`Threads:` of `/proc/self/status`), if readable.
pub fn thread_count() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
}

/// `fork()` from a single-threaded process: `Ok(None)` in the child, `Ok(Some(pid))` in the
/// parent. Stdout is flushed first so that nothing buffered is printed twice. `EBUSY` if the
/// process has other threads (the child could not safely run ordinary code then).
pub fn fork_process() -> Result<Option<i32>, i32> {
    if thread_count() != Some(1) {
        return Err(libc::EBUSY);
    }
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: the process has one thread (checked above), so the child inherits no lock held
    // by another thread and may run any code.
    match unsafe { sys::fork() }? {
        0 => Ok(None),
        pid => Ok(Some(pid)),
    }
}

/// Wait for child `pid`; its raw status (`None` if it cannot be waited for).
pub fn wait_child(pid: i32) -> Option<i32> {
    sys::waitpid(pid, false)
}

/// Has child `pid` ended (it is reaped then)?
pub fn child_ended(pid: i32) -> bool {
    sys::waitpid(pid, true).is_some()
}

/// Leave now with `code`, stdout flushed, without destructors (a forked worker's end).
pub fn exit_process(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    sys::exit_now(code)
}

/// Die of `sig` as its default action would have it (a usemem worker's SIGSEGV or SIGBUS).
pub fn die_of_signal(sig: i32) -> ! {
    let _ = std::io::stdout().flush();
    // SAFETY: restoring the default action and raising the signal at ourselves.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
    sys::exit_now(128 + sig)
}

pub fn getpid() -> i32 {
    sys::getpid()
}

pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// CPUs online (`sysconf(_SC_NPROCESSORS_ONLN)`).
pub fn cpus_online() -> u64 {
    sys::sysconf(libc::_SC_NPROCESSORS_ONLN).unwrap_or(1)
}

/// Bind the calling thread to `cpu` (`sched_setaffinity(0, ...)`; errors ignored, as usemem
/// ignores them).
pub fn bind_to_cpu(cpu: u64) {
    // SAFETY: cpu_set_t is plain old data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the index is reduced below CPU_SETSIZE, the set's size.
    unsafe { libc::CPU_SET(cpu as usize % libc::CPU_SETSIZE as usize, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
}

fn usr1_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain old data, initialised by sigemptyset below.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is valid and writable.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
    }
    set
}

/// Name the calling thread `name` (its `comm`; called from the main thread, the process's):
/// a program started as `usemem` under another file's name (`exec -a usemem usermm`) then
/// shows as `usemem` to `ps -o comm` and in `/proc/PID/comm`, which scripts wait on, and so
/// do the processes it forks. A name with a NUL byte is refused with `EINVAL`.
pub fn set_comm(name: &str) -> Result<(), i32> {
    let name = CString::new(name).map_err(|_| libc::EINVAL)?;
    sys::set_thread_name(&name)
}

/// Block SIGUSR1 in the calling thread (threads started after inherit it), so that it waits
/// for [`wait_sigusr1`] instead of killing the process.
pub fn block_sigusr1() {
    let set = usr1_set();
    // SAFETY: `set` is a valid signal set; the old mask is not wanted.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Wait for one SIGUSR1 (blocked with [`block_sigusr1`]); like usemem's `sigsuspend`, one
/// signal to the process wakes one waiting thread.
pub fn wait_sigusr1() {
    let set = usr1_set();
    let mut sig = 0;
    loop {
        // SAFETY: `set` and `sig` are valid for the call.
        if unsafe { libc::sigwait(&set, &mut sig) } == 0 && sig == libc::SIGUSR1 {
            return;
        }
    }
}

/// A pipe barrier like usemem's (`ready`/`synchronize_tasks`, after hackbench): workers write
/// a byte and wait for the parent's one byte, which wakes them all.
#[derive(Debug)]
pub struct PipeGate {
    ready: (OwnedFd, OwnedFd),
    wake: (OwnedFd, OwnedFd),
}

impl PipeGate {
    pub fn new() -> Result<Self, i32> {
        Ok(PipeGate {
            ready: sys::pipe_owned()?,
            wake: sys::pipe_owned()?,
        })
    }

    /// A worker: "ready", then wait for the "go".
    pub fn arrive(&self) {
        let _ = sys::write(self.ready.1.as_raw_fd(), b"*");
        loop {
            match sys::poll1(
                self.wake.0.as_raw_fd(),
                libc::POLLIN,
                std::time::Duration::from_secs(3600),
            ) {
                Ok(0) => continue,
                Ok(_) => return,
                Err(e) if e == libc::EINTR => continue,
                Err(_) => return,
            }
        }
    }

    /// The parent: wait for `n` "ready"s — or for `gone()` to say how many workers will
    /// never send theirs (usemem would wait for ever for a dead worker) — then "go".
    pub fn open_after(&self, n: u64, mut gone: impl FnMut() -> u64) {
        let mut got = 0u64;
        let mut buf = [0u8; 256];
        while got + gone() < n {
            match sys::poll1(
                self.ready.0.as_raw_fd(),
                libc::POLLIN,
                std::time::Duration::from_millis(100),
            ) {
                Ok(r) if r & libc::POLLIN != 0 => {
                    let want = ((n - got) as usize).min(buf.len());
                    if let Ok(k) = sys::read(self.ready.0.as_raw_fd(), &mut buf[..want]) {
                        got += k as u64;
                    }
                }
                _ => {}
            }
        }
        let _ = sys::write(self.wake.1.as_raw_fd(), b"*");
    }
}

/// Append `pid` and a newline to `path` (usemem's `update_pid_file`): one `write` of the
/// whole line, as usemem's `fprintf` + `fclose` of an `"a"` stream makes, so that workers
/// appending at once never interleave within a line. Unlike usemem's `fopen`, a link at
/// `path` is not followed (`ELOOP`), and only a regular file that holds process ids alone
/// ([`is_pid_file`]) is appended to ([`crate::files::append_once`]).
pub fn append_pid(path: &str, pid: i32) -> std::io::Result<()> {
    crate::files::append_once(
        std::path::Path::new(path),
        format!("{pid}\n").as_bytes(),
        is_pid_file,
        NOT_A_PID_FILE,
    )
}

/// Why [`append_pid`] refuses a file with other lines in it.
pub const NOT_A_PID_FILE: &str = "not a pid file (a line is not a process id)";

/// Whether `bytes` are a pid file so far: nothing, or lines of decimal digits.
pub fn is_pid_file(bytes: &[u8]) -> bool {
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    body.is_empty()
        || body
            .split(|&b| b == b'\n')
            .all(|l| !l.is_empty() && l.iter().all(u8::is_ascii_digit))
}

/// A monotonic clock in ns (`clock_gettime(CLOCK_MONOTONIC)`; only differences matter).
pub fn now_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

/// `gettimeofday` in µs.
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Block SIGUSR1 in the calling thread (and so in every thread it starts later) and call `f`
/// for each SIGUSR1 the process receives, from a thread of its own: the engine's run, where
/// every usemem "process" is a thread of this one, wakes all its waiters on each signal.
pub fn forward_sigusr1(f: impl Fn() + Send + 'static) -> std::io::Result<()> {
    block_sigusr1();
    std::thread::Builder::new()
        .name("usemem-sigusr1".into())
        .spawn(move || loop {
            wait_sigusr1();
            f();
        })
        .map(drop)
}

/// The background half of a process that forked early so that it can detach late
/// ([`fork_detachable`]): [`Detached::release`] lets the foreground half exit 0.
#[derive(Debug)]
pub struct Detached {
    tell: Option<OwnedFd>,
}

impl Detached {
    /// The foreground half exits 0 now (usemem's detaching parent's `exit(0)`).
    pub fn release(&mut self) {
        if let Some(fd) = self.tell.take() {
            let _ = sys::write(fd.as_raw_fd(), b"1");
        }
    }
}

/// Fork now (the process must be single-threaded) so that the work can go to the background
/// later. Returns the background half in the child. The parent never returns: it waits until
/// the child calls [`Detached::release`] and exits 0, or until the child ends without it and
/// exits with the child's status.
pub fn fork_detachable() -> Result<Detached, i32> {
    let (r, w) = sys::pipe_owned()?;
    match fork_process()? {
        None => {
            drop(r);
            Ok(Detached { tell: Some(w) })
        }
        Some(pid) => {
            drop(w);
            let mut b = [0u8; 1];
            let got = loop {
                match sys::read(r.as_raw_fd(), &mut b) {
                    Err(e) if e == libc::EINTR => continue,
                    Ok(n) => break n,
                    Err(_) => break 0,
                }
            };
            if got == 1 {
                exit_process(0);
            }
            let status = wait_child(pid).unwrap_or(0);
            if libc::WIFEXITED(status) {
                exit_process(libc::WEXITSTATUS(status));
            }
            exit_process(128 + libc::WTERMSIG(status));
        }
    }
}
