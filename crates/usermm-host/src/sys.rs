//! Thin wrappers over the raw system calls the host side needs: the crate's one place for
//! calling into the kernel.
//!
//! Everything here is usable in a child forked from a multi-threaded process: no allocation, no
//! locks, no stdio, nothing but the system call (the glibc wrappers used are plain syscall stubs
//! that at most set the thread's `errno`). Errors are returned as errno values.
//!
//! The memory-management calls ([`mmap`], [`munmap`], [`mprotect`], [`madvise`], [`mlock`],
//! [`munlock`]) are one family of `unsafe fn`s with one contract: the range must not hold a Rust
//! object of this process (they may unmap, remap or change the protection of memory). Both
//! kinds of forked child — the differential backend's server and the measurement workloads —
//! go through them; nothing else in the crate names `SYS_mmap`.

#![expect(unsafe_code)]

use std::ffi::CStr;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Duration;

pub(crate) type Fd = libc::c_int;

/// The calling thread's errno (`last_os_error` reads it without allocating).
pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn ret(r: isize) -> Result<usize, i32> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(r as usize)
    }
}

/// `read(fd, buf)`.
pub(crate) fn read(fd: Fd, buf: &mut [u8]) -> Result<usize, i32> {
    // SAFETY: the kernel writes at most buf.len() bytes into memory we own exclusively.
    ret(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) })
}

/// `send(fd, buf, MSG_NOSIGNAL)`: a write to a socket that returns EPIPE instead of raising
/// SIGPIPE when the peer is gone.
pub(crate) fn send(fd: Fd, buf: &[u8]) -> Result<usize, i32> {
    // SAFETY: the kernel reads at most buf.len() bytes from a live slice.
    ret(unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) })
}

/// `write(fd, buf)`.
pub(crate) fn write(fd: Fd, buf: &[u8]) -> Result<usize, i32> {
    // SAFETY: the kernel reads at most buf.len() bytes from a live slice.
    ret(unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) })
}

/// `write(fd, addr, n)`: the kernel loads `n` bytes from the user address `addr` (with
/// `copy_from_user`, so an inaccessible address gives EFAULT instead of a signal).
pub(crate) fn write_from_addr(fd: Fd, addr: u64, n: usize) -> Result<usize, i32> {
    // SAFETY: the kernel only reads the range and checks its accessibility itself; no Rust
    // object is written.
    ret(unsafe { libc::write(fd, addr as usize as *const libc::c_void, n) })
}

/// `read(fd, addr, n)`: the kernel stores up to `n` bytes at the user address `addr` (with
/// `copy_to_user`: EFAULT if the page is not writable).
///
/// # Safety
/// `addr..addr+n` must not overlap memory that Rust code of this process owns or references.
pub(crate) unsafe fn read_to_addr(fd: Fd, addr: u64, n: usize) -> Result<usize, i32> {
    // SAFETY: the caller guarantees the target bytes belong to no Rust object; the kernel checks
    // accessibility and reports EFAULT rather than faulting.
    ret(unsafe { libc::read(fd, addr as usize as *mut libc::c_void, n) })
}

/// `poll` on one fd. Returns the revents (0 on timeout). EINTR counts as a timeout.
pub(crate) fn poll1(
    fd: Fd,
    events: libc::c_short,
    timeout: Duration,
) -> Result<libc::c_short, i32> {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `p` is a valid pollfd array of length 1 for the duration of the call.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    if r < 0 {
        let e = errno();
        return if e == libc::EINTR { Ok(0) } else { Err(e) };
    }
    Ok(if r == 0 { 0 } else { p.revents })
}

/// `close(fd)`, errors ignored.
pub(crate) fn close(fd: Fd) {
    // SAFETY: closing an fd we own; a stale fd only yields EBADF.
    unsafe { libc::close(fd) };
}

/// `close_range(first, last, 0)`, errors ignored (used by a freshly forked child to drop the fds
/// it inherited from unrelated threads of the parent).
pub(crate) fn close_range(first: u32, last: u32) {
    if first > last {
        return;
    }
    // SAFETY: raw close_range(2); only affects this process's fd table.
    unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
}

/// `open(path, flags | O_CLOEXEC)`.
pub(crate) fn open(path: &CStr, flags: libc::c_int) -> Result<Fd, i32> {
    // SAFETY: `path` is a valid NUL-terminated string.
    let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        Err(errno())
    } else {
        Ok(fd)
    }
}

/// `pipe2(O_CLOEXEC)` → (read end, write end).
pub(crate) fn pipe() -> Result<(Fd, Fd), i32> {
    let mut fds = [0 as Fd; 2];
    // SAFETY: `fds` is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(errno());
    }
    Ok((fds[0], fds[1]))
}

/// [`pipe`], its two ends owned (closed when dropped). For the parent, not for a forked child.
pub(crate) fn pipe_owned() -> Result<(OwnedFd, OwnedFd), i32> {
    let (r, w) = pipe()?;
    // SAFETY: both fds were just returned by pipe2 and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(r), OwnedFd::from_raw_fd(w)) })
}

/// `socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC)`, both ends owned.
pub(crate) fn socketpair() -> Result<(OwnedFd, OwnedFd), i32> {
    let mut fds = [0 as Fd; 2];
    // SAFETY: `fds` is a valid array of two ints.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r < 0 {
        return Err(errno());
    }
    // SAFETY: both fds were just returned by socketpair and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A raw system call with up to six arguments; `Err(errno)` on failure.
///
/// # Safety
/// The call must not unmap, remap or write memory that Rust objects of this process live in.
unsafe fn syscall6(nr: libc::c_long, a: [u64; 6]) -> Result<u64, i32> {
    // SAFETY: forwarded to the caller (see above).
    let r = unsafe {
        libc::syscall(
            nr,
            a[0] as libc::c_long,
            a[1] as libc::c_long,
            a[2] as libc::c_long,
            a[3] as libc::c_long,
            a[4] as libc::c_long,
            a[5] as libc::c_long,
        )
    };
    if r == -1 {
        Err(errno())
    } else {
        Ok(r as u64)
    }
}

/// `mmap(addr, len, prot, flags, fd, offset)`; the address the kernel chose, or the errno.
///
/// # Safety
/// With `MAP_FIXED` the range `addr..addr+len` is replaced: it must hold no Rust object of this
/// process. Without it nothing existing is touched.
pub(crate) unsafe fn mmap(
    addr: u64,
    len: u64,
    prot: u64,
    flags: u64,
    fd: u64,
    offset: u64,
) -> Result<u64, i32> {
    // SAFETY: forwarded to the caller (see above).
    unsafe { syscall6(libc::SYS_mmap, [addr, len, prot, flags, fd, offset]) }
}

/// `munmap(addr, len)`.
///
/// # Safety
/// `addr..addr+len` must hold no Rust object of this process.
pub(crate) unsafe fn munmap(addr: u64, len: u64) -> Result<u64, i32> {
    // SAFETY: forwarded to the caller (see above).
    unsafe { syscall6(libc::SYS_munmap, [addr, len, 0, 0, 0, 0]) }
}

/// `mprotect(addr, len, prot)`.
///
/// # Safety
/// `addr..addr+len` must hold no Rust object of this process.
pub(crate) unsafe fn mprotect(addr: u64, len: u64, prot: u64) -> Result<u64, i32> {
    // SAFETY: forwarded to the caller (see above).
    unsafe { syscall6(libc::SYS_mprotect, [addr, len, prot, 0, 0, 0]) }
}

/// `madvise(addr, len, advice)` (the advice is an int, passed sign-extended as the ABI does).
///
/// # Safety
/// `addr..addr+len` must hold no Rust object of this process (`MADV_DONTNEED` and friends
/// discard its contents).
pub(crate) unsafe fn madvise(addr: u64, len: u64, advice: u64) -> Result<u64, i32> {
    // SAFETY: forwarded to the caller (see above).
    unsafe { syscall6(libc::SYS_madvise, [addr, len, advice, 0, 0, 0]) }
}

/// `mlock(addr, len)`.
///
/// # Safety
/// `addr..addr+len` must hold no Rust object of this process (mlock populates the range).
pub(crate) unsafe fn mlock(addr: u64, len: u64) -> Result<u64, i32> {
    // SAFETY: forwarded to the caller (see above).
    unsafe { syscall6(libc::SYS_mlock, [addr, len, 0, 0, 0, 0]) }
}

/// `munlock(addr, len)`.
///
/// # Safety
/// `addr..addr+len` must hold no Rust object of this process.
pub(crate) unsafe fn munlock(addr: u64, len: u64) -> Result<u64, i32> {
    // SAFETY: forwarded to the caller (see above).
    unsafe { syscall6(libc::SYS_munlock, [addr, len, 0, 0, 0, 0]) }
}

/// `mremap(addr, old_len, new_len, flags, new_addr)`.
///
/// # Safety
/// Neither `addr..addr+old_len` nor (with `MREMAP_FIXED`) `new_addr..new_addr+new_len` may
/// hold a Rust object of this process.
pub(crate) unsafe fn mremap(
    addr: u64,
    old_len: u64,
    new_len: u64,
    flags: u64,
    new_addr: u64,
) -> Result<u64, i32> {
    // SAFETY: forwarded to the caller (see above).
    unsafe {
        syscall6(
            libc::SYS_mremap,
            [addr, old_len, new_len, flags, new_addr, 0],
        )
    }
}

/// The raw `brk(addr)` system call: the new break, or the old one if the kernel refused
/// (it never fails).
///
/// # Safety
/// A break below the current one unmaps the heap above it: it must hold no Rust object of
/// this process.
pub(crate) unsafe fn brk(addr: u64) -> u64 {
    // SAFETY: forwarded to the caller (see above).
    unsafe { syscall6(libc::SYS_brk, [addr, 0, 0, 0, 0, 0]) }.unwrap_or(0)
}

/// `poll` on two fds; the revents of each (zeros on timeout). EINTR counts as a timeout.
pub(crate) fn poll2(
    a: (Fd, libc::c_short),
    b: (Fd, libc::c_short),
    timeout: Duration,
) -> Result<(libc::c_short, libc::c_short), i32> {
    let mut p = [
        libc::pollfd {
            fd: a.0,
            events: a.1,
            revents: 0,
        },
        libc::pollfd {
            fd: b.0,
            events: b.1,
            revents: 0,
        },
    ];
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `p` is a valid pollfd array of length 2 for the duration of the call.
    let r = unsafe { libc::poll(p.as_mut_ptr(), 2, ms) };
    if r < 0 {
        let e = errno();
        return if e == libc::EINTR { Ok((0, 0)) } else { Err(e) };
    }
    Ok((p[0].revents, p[1].revents))
}

/// `getrusage(RUSAGE_SELF)`: this process's resource usage (all zero if the call fails).
pub(crate) fn rusage_self() -> libc::rusage {
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage; on failure it stays zeroed.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru
}

/// `getrusage(RUSAGE_SELF).ru_minflt`: minor faults of this process so far.
pub(crate) fn minflt() -> u64 {
    rusage_self().ru_minflt.max(0) as u64
}

/// `clock_gettime(clock)` in ns, 0 if the call fails. Allocation-free, so usable in a forked
/// child.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call writes nothing else.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec.max(0) as u64)
}

/// `clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`: this process's CPU time (every thread, user and
/// system) in ns, 0 if the call fails.
pub fn process_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// `getrusage(RUSAGE_CHILDREN)`: user + system time of the waited-for children, in ns.
/// Allocation-free, so usable in a forked child.
pub(crate) fn children_cpu_ns() -> u64 {
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage; on failure it stays zeroed.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let ns = |t: libc::timeval| {
        (t.tv_sec.max(0) as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(t.tv_usec.max(0) as u64 * 1000)
    };
    ns(ru.ru_utime) + ns(ru.ru_stime)
}

/// The bare `fork` system call (`clone(SIGCHLD)`), without libc's `atfork` handlers: for a
/// measurement child that forks, whose malloc arenas may be gone. 0 in the new child.
///
/// # Safety
/// As [`fork`]: until it calls `exit_now`, the new child must only run async-signal-safe
/// code.
pub(crate) unsafe fn fork_raw() -> Result<libc::pid_t, i32> {
    // SAFETY: clone with SIGCHLD and no other flag is fork; every pointer argument is null.
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::SIGCHLD as libc::c_long,
            0 as libc::c_long,
            0 as libc::c_long,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    };
    if r < 0 {
        Err(errno())
    } else {
        if r == 0 {
            uncatch_signals_in_child();
        }
        Ok(r as libc::pid_t)
    }
}

/// `clone(CLONE_VM | SIGCHLD)` through libc's wrapper: a child process that shares the
/// caller's memory (its mm, as a thread does, so the caller's TLB flushes interrupt it) and
/// runs `f(arg)` on the stack whose top is `stack_top`, then exits with `f`'s value. The
/// caller reaps it with [`waitpid`].
///
/// # Safety
/// `stack_top` must be the 16-byte-aligned top of a writable mapping that stays mapped until
/// the child is reaped; `f` must only issue raw system calls and use atomics in memory that
/// stays mapped as long (it shares the caller's thread-local storage and must not allocate,
/// lock or unwind), and `arg` must stay valid for it.
pub(crate) unsafe fn clone_vm(
    f: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    stack_top: u64,
    arg: *mut libc::c_void,
) -> Result<libc::pid_t, i32> {
    // SAFETY: forwarded to the caller (see above); CLONE_VM without CLONE_THREAD or
    // CLONE_SETTLS makes a process, reaped with waitpid thanks to SIGCHLD.
    let r = unsafe {
        libc::clone(
            f,
            stack_top as usize as *mut libc::c_void,
            libc::CLONE_VM | libc::SIGCHLD,
            arg,
        )
    };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

/// `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`: the calling thread's CPU time (user and system)
/// in ns, 0 if the call fails. Allocation-free, so usable in a forked child.
pub(crate) fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// `uname(2)`'s `release` field (`uname -r`), NUL-terminated in `out`; `None` if the call
/// fails. Allocation-free.
pub(crate) fn uname_release(out: &mut [u8; 65]) -> Option<&[u8]> {
    // SAFETY: utsname is plain old data (arrays of c_char); all-zero is a valid value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname, which uname fills with NUL-terminated strings.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let mut n = 0;
    for (o, &c) in out
        .iter_mut()
        .zip(u.release.iter().take_while(|&&c| c != 0))
    {
        *o = c as u8;
        n += 1;
    }
    Some(&out[..n])
}

/// The soft limit of `getrlimit(resource)` (`RLIM_INFINITY` is `u64::MAX`), or `None` if the
/// call fails.
pub(crate) fn rlimit_soft(resource: libc::__rlimit_resource_t) -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `r`, which is valid and writable.
    let ok = unsafe { libc::getrlimit(resource, &mut r) } == 0;
    ok.then_some(r.rlim_cur)
}

/// `geteuid()`.
pub(crate) fn geteuid() -> libc::uid_t {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// `sysconf(name)`, or `None` when the value is indeterminate or the call fails.
pub(crate) fn sysconf(name: libc::c_int) -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(name) };
    u64::try_from(v).ok()
}

pub(crate) fn getpid() -> libc::pid_t {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

pub(crate) fn getppid() -> libc::pid_t {
    // SAFETY: getppid has no preconditions.
    unsafe { libc::getppid() }
}

/// `syscall(SYS_getppid)`: a system call that does no work, for timing the entry and exit
/// (the raw call, so that no library can answer it from a cache).
pub(crate) fn getppid_raw() -> i64 {
    // SAFETY: getppid takes no arguments and has no preconditions.
    unsafe { libc::syscall(libc::SYS_getppid) as i64 }
}

/// `sched_setaffinity(0, {cpu})`: pins the calling thread to one CPU. Allocation-free.
pub(crate) fn pin_to_cpu(cpu: usize) -> Result<(), i32> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(libc::EINVAL);
    }
    // SAFETY: cpu_set_t is plain old data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu < CPU_SETSIZE (checked above), so the bit is inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is the calling thread.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r != 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// `sched_getaffinity(0)`: the CPUs the calling thread may run on (empty if the call fails).
/// Allocates: parent side only.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain old data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: c < CPU_SETSIZE, so the bit is inside `set`.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// `prctl(PR_SET_PDEATHSIG, sig)`: the kernel sends `sig` to the caller when its parent dies
/// (a grandchild must not outlive a killed measurement child).
pub(crate) fn set_parent_death_signal(sig: libc::c_int) {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number and nothing else.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) };
}

/// `prctl(PR_SET_NAME, name)`: the calling thread's name (its `comm`, what `ps -o comm` and
/// `/proc/PID/comm` show for the main thread), cut by the kernel to 15 bytes.
pub(crate) fn set_thread_name(name: &CStr) -> Result<(), i32> {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes from the pointer;
    // `name` is a valid C string that outlives the call (the kernel copies at most 16 bytes
    // and stops at the NUL).
    let r = unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong, 0, 0, 0) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// `clock_gettime(CLOCK_MONOTONIC)` in ns (0 if the call fails). Allocation-free.
pub(crate) fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `_exit(code)`: leaves without running destructors or atexit handlers.
pub(crate) fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions and never returns.
    unsafe { libc::_exit(code) }
}

/// `kill(pid, sig)`, errors ignored.
pub(crate) fn kill(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: signals only our own child, which has not been reaped yet (callers guarantee it),
    // so the pid cannot have been reused.
    unsafe { libc::kill(pid, sig) };
}

/// `waitpid(pid)`: `Some(status)` once the child has been reaped, `None` if it is still running
/// (`nohang`) or the wait failed.
pub(crate) fn waitpid(pid: libc::pid_t, nohang: bool) -> Option<libc::c_int> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid int to write the status into.
        let r = unsafe { libc::waitpid(pid, &mut status, if nohang { libc::WNOHANG } else { 0 }) };
        if r == pid {
            return Some(status);
        }
        if r < 0 && errno() == libc::EINTR {
            continue;
        }
        return None;
    }
}

/// `fork()`. Returns 0 in the child and the child's pid in the parent.
///
/// # Safety
/// The parent may be multi-threaded: until it calls `exit_now`, the child must only run
/// async-signal-safe code (system calls, no allocation, no locks, no stdio, no panics).
pub(crate) unsafe fn fork() -> Result<libc::pid_t, i32> {
    // SAFETY: forwarded to the caller (see above).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        Err(errno())
    } else {
        if pid == 0 {
            uncatch_signals_in_child();
        }
        Ok(pid)
    }
}

/// The termination signals a run may catch to remove what it created
/// (`crate::files::cleanup`).
const CLEANUP_SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// `sig`'s current action, read with `sigaction(sig, NULL, &old)`.
fn signal_action(sig: libc::c_int) -> Option<libc::sighandler_t> {
    // SAFETY: sigaction is plain old data; all-zero is a valid value for the kernel to overwrite.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only reads the current one into `old`, which we own.
    let r = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
    (r == 0).then_some(old.sa_sigaction)
}

/// Whether `sig` is ignored (`SIG_IGN`), as `nohup` or a non-interactive shell's background
/// job starts a process: a run started so must not start dying of it.
pub(crate) fn signal_ignored(sig: libc::c_int) -> bool {
    signal_action(sig) == Some(libc::SIG_IGN)
}

/// In a child just forked (no `exec` follows): SIGINT and SIGTERM back to their default action
/// when the parent caught them, as `exec` would reset them; an ignored signal stays ignored.
/// The parent's handler only tells a thread of the parent's, which the child does not have, so
/// without this a Ctrl-C would not end the child. Async-signal-safe (two system calls per signal).
fn uncatch_signals_in_child() {
    for sig in CLEANUP_SIGNALS {
        match signal_action(sig) {
            Some(h) if h != libc::SIG_IGN && h != libc::SIG_DFL => {
                // SAFETY: restoring the default action has no memory-safety precondition.
                unsafe { libc::signal(sig, libc::SIG_DFL) };
            }
            _ => {}
        }
    }
}

/// Human-readable wait status.
pub(crate) fn describe_status(status: libc::c_int) -> String {
    if libc::WIFEXITED(status) {
        format!("exited with status {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        let name = match sig {
            libc::SIGSEGV => " (SIGSEGV)",
            libc::SIGBUS => " (SIGBUS)",
            libc::SIGKILL => " (SIGKILL)",
            libc::SIGABRT => " (SIGABRT)",
            libc::SIGPIPE => " (SIGPIPE)",
            _ => "",
        };
        format!("killed by signal {sig}{name}")
    } else {
        format!("wait status {status:#x}")
    }
}

/// Read a small file into `buf` (allocation-free); returns the byte count.
pub(crate) fn read_small_file(path: &CStr, buf: &mut [u8]) -> Result<usize, i32> {
    let fd = open(path, libc::O_RDONLY)?;
    let mut have = 0;
    while have < buf.len() {
        match read(fd, &mut buf[have..]) {
            Ok(0) => break,
            Ok(n) => have += n,
            Err(libc::EINTR) => {}
            Err(e) => {
                close(fd);
                return Err(e);
            }
        }
    }
    close(fd);
    Ok(have)
}

/// Make the child that `cmd` spawns (and `exec`s) get SIGTERM when this process dies, and
/// end at once if it died before the child could ask (`prctl(PR_SET_PDEATHSIG)`): a sweep's
/// points must not run on, orphaned, after a Ctrl-C, a `kill` or a crash of the sweep. The
/// signal comes when the *thread* that spawned the child ends, so spawn from a thread that
/// waits for it.
pub fn die_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the hook runs in the child between fork and exec, where only async-signal-safe
    // calls are allowed: prctl, getppid and _exit are, and it touches only its copied pid.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        })
    };
}

/// `flock(fd, LOCK_UN)` on `file`: the lock of its open file description ends now, even if a
/// forked child still holds a copy of the descriptor (closing this copy alone would not end
/// it: a `flock` lock lasts until the last descriptor of the description is closed).
pub(crate) fn unlock(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock only reads its two integer arguments; the fd is open for as long as
    // `file` is borrowed.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `flock(fd, LOCK_EX | LOCK_NB)` on `file`: `Ok(true)` when this open file now holds the
/// exclusive advisory lock (released by `unlock`, or when the last copy of the descriptor
/// is closed), `Ok(false)` when another holds it.
/// (`File::try_lock` needs Rust 1.89; the workspace's MSRV is older.)
pub fn try_lock_exclusive(file: &std::fs::File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock only reads its two integer arguments; the fd is open for as long as
    // `file` is borrowed.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}
