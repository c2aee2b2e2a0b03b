//! What usemem's code needs from the machine it runs on, as one trait: [`Sys`].
//!
//! usemem's semantics (`worker/`, `program.rs`) are written once, against this trait; the
//! engine (`engine/`: an [`usermm::Mm`] and an emulated CPU per worker) and the host kernel
//! (`host.rs`: real system calls in forked processes, through `usermm-host`) implement it.
//! The calls are those usemem makes — `mmap`, `munmap`, `mremap`, `madvise`, `mlock`,
//! `msync`, `mincore`, SysV `shm*`, `posix_fadvise`, `fallocate`, `malloc` — with its
//! arguments, and an errno on failure that usemem prints with `strerror`. A walk over words
//! ([`Sys::walk`]) and a single access ([`Sys::access`]) stand for its loads and stores.
//!
//! One `Sys` value is one thread of one usemem process: the address space is the process's
//! (threads of a process share it), the CPU is the thread's.

use serde::Serialize;

/// An errno value (`ENOMEM` = 12, ...).
pub type Errno = i32;

pub const EBADF: Errno = 9;
pub const ENOMEM: Errno = 12;
pub const EFAULT: Errno = 14;
pub const EINVAL: Errno = 22;

/// `strerror(e)` as glibc words it (`Cannot allocate memory`).
pub fn strerror(e: Errno) -> String {
    let s = std::io::Error::from_raw_os_error(e).to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// `strerror` of an `io::Error`'s errno, or its own text when it has none (usermm's own
/// refusals, such as a pid file that holds other lines).
pub fn io_strerror(e: &std::io::Error) -> String {
    e.raw_os_error().map_or_else(|| e.to_string(), strerror)
}

/// What a mapping maps: usemem's `fd` at the time of the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum MapFd {
    /// `MAP_ANONYMOUS` (usemem passes -1).
    Anon,
    /// The file usemem opened in `main` (`/dev/zero`, `-f FILE`, or a memfd).
    Opened,
    /// The descriptor `-D` closed: every mmap of it is `EBADF`.
    Closed,
}

/// One word access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write(u64),
}

/// What a walk does at each word it visits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkOp {
    /// Store (else load).
    pub write: bool,
    /// The value stored: `Some(d)` for the constant of `--main-write-data`/
    /// `--signal-write-data`, `None` for the word's own index.
    pub data: Option<u64>,
    /// Before the access, check that the word holds its index (usemem's "verify last write").
    pub verify: bool,
}

/// The words a walk visits: `from, from + stride, …` below `to` of the word array at `base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Words {
    pub base: u64,
    pub from: u64,
    pub to: u64,
    pub stride: u64,
}

/// Why a walk or an access did not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// Verification found `found` at word `idx`.
    Mismatch { idx: u64, found: u64 },
    /// The access raised a signal (`SIGSEGV`, `SIGBUS`): the process dies of it.
    Signal { name: &'static str, detail: String },
}

/// The two barriers usemem builds from pipes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Before the walk (after allocation with `-y`).
    Start,
    /// Before freeing (`-x`).
    Free,
}

/// SysV `shmctl` commands usemem issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShmCmd {
    Lock,
    Unlock,
    Remove,
}

/// One usemem thread's view of its machine.
pub trait Sys {
    /// `mmap(NULL, len, prot, flags, fd, offset)`.
    fn mmap(&self, len: u64, prot: u32, flags: u32, fd: MapFd, offset: i64) -> Result<u64, Errno>;
    fn munmap(&self, addr: u64, len: u64) -> Result<(), Errno>;
    /// `mremap(addr, old, new, MREMAP_MAYMOVE)`.
    fn mremap(&self, addr: u64, old: u64, new: u64) -> Result<u64, Errno>;
    fn mprotect(&self, addr: u64, len: u64, prot: u32) -> Result<(), Errno>;
    fn madvise(&self, addr: u64, len: u64, advice: i32) -> Result<(), Errno>;
    fn mlock(&self, addr: u64, len: u64) -> Result<(), Errno>;
    fn munlock(&self, addr: u64, len: u64) -> Result<(), Errno>;
    fn msync(&self, addr: u64, len: u64, flags: i32) -> Result<(), Errno>;
    /// `mincore(addr, len, vec)` (the vector itself is not looked at by usemem).
    fn mincore(&self, addr: u64, len: u64) -> Result<(), Errno>;
    /// `malloc(len)`; `None` when it fails.
    fn malloc(&self, len: u64) -> Option<u64>;
    fn free(&self, addr: u64, len: u64);
    /// `shmget(IPC_PRIVATE, len, ...)` (`huge`: `SHM_HUGETLB`); the segment id.
    fn shmget(&self, len: u64, huge: bool) -> Result<i32, Errno>;
    /// `shmat(id)`.
    fn shmat(&self, id: i32) -> Result<u64, Errno>;
    fn shmctl(&self, id: i32, cmd: ShmCmd) -> Result<(), Errno>;
    /// `fallocate(fd, PUNCH_HOLE | KEEP_SIZE, offset, len)` on the opened file.
    fn punch_hole(&self, offset: u64, len: u64) -> Result<(), Errno>;
    /// Visit `words`; the number of words visited.
    fn walk(&self, words: Words, op: WalkOp) -> Result<u64, Stop>;
    /// One access to the word at `addr`; a load returns the word.
    fn access(&self, addr: u64, a: Access) -> Result<u64, Stop>;
    /// Accesses in order, as [`Sys::access`] each with the loads' words discarded: a random
    /// walk's run between two looks at the clock. Stops at the first that fails.
    fn access_many(&self, ops: &[(u64, Access)]) -> Result<(), Stop> {
        ops.iter()
            .try_for_each(|&(addr, a)| self.access(addr, a).map(|_| ()))
    }

    /// `gettimeofday` in µs (only differences and whole seconds matter).
    fn now_us(&self) -> u64;
    /// `clock_gettime` in ns (only differences matter): `-e`'s delay.
    fn now_ns(&self) -> u64;
    /// `sleep(secs)`.
    fn sleep_secs(&self, secs: u64);
    /// The pid usemem prints (`getpid`).
    fn pid(&self) -> i32;
    /// `gettid` (the random seed's default).
    fn tid(&self) -> i32;
    /// `time(0)` in seconds.
    fn time(&self) -> u64;
    /// Write to stdout now (usemem flushes before each line it writes).
    fn out(&self, s: &str);
    /// Is stdout a file or a pipe, which C stdio buffers fully (a terminal is line-buffered)?
    /// Then what usemem's parent `printf`s before it forks stays in its buffer, and every
    /// forked process prints its own copy ([`super::worker::Plan::inherited_out`]).
    fn stdout_full_buffered(&self) -> bool {
        false
    }
    /// Write to stderr.
    fn err(&self, s: &str);
    /// Arrive at a barrier and wait until the parent opens it (usemem's `ready`).
    fn ready(&self, gate: Gate);
    /// Wait until SIGUSR1 arrives (`sigsuspend` with only SIGUSR1 let through).
    fn wait_sigusr1(&self);
    /// `getchar()`; `None` at end of input.
    fn getchar(&self) -> Option<u8>;
    /// usemem's `detach`: the process goes on in the background, its parent exits 0 after
    /// appending the new pid to the pid file. Returns the pid the process now has.
    fn detach(&self) -> i32;
    /// A note on stderr for what this machine does not model (said once per kind by the
    /// caller). Default: a `usermm: note:` line.
    fn note(&self, s: &str) {
        self.err(&format!("usermm: note: {s}\n"));
    }
}
