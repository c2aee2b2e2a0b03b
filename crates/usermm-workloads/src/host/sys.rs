//! Thin wrappers over the raw system calls the host side needs.
//!
//! Everything here is usable in a child forked from a multi-threaded process: no allocation, no
//! locks, no stdio, nothing but the system call (the glibc wrappers used are plain syscall stubs
//! that at most set the thread's `errno`). Errors are returned as errno values.

use std::ffi::CStr;
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

/// `socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC)`.
pub(crate) fn socketpair() -> Result<(Fd, Fd), i32> {
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
    Ok((fds[0], fds[1]))
}

/// A raw system call with up to six arguments; `Err(errno)` on failure.
///
/// # Safety
/// The call must not unmap, remap or write memory that Rust objects of this process live in.
pub(crate) unsafe fn syscall6(nr: libc::c_long, a: [u64; 6]) -> Result<u64, i32> {
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

/// `getrusage(RUSAGE_SELF).ru_minflt`.
pub(crate) fn minflt() -> u64 {
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_minflt as u64
}

pub(crate) fn getpid() -> libc::pid_t {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

pub(crate) fn getppid() -> libc::pid_t {
    // SAFETY: getppid has no preconditions.
    unsafe { libc::getppid() }
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
        Ok(pid)
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

/// Parse the decimal number after `key` in a `/proc` "Key:   123 kB" text (0 if absent).
/// Allocation-free, usable in a forked child.
pub(crate) fn field_kb(text: &[u8], key: &[u8]) -> u64 {
    let Some(pos) = text.windows(key.len()).position(|w| w == key) else {
        return 0;
    };
    let mut v = 0u64;
    let mut seen = false;
    for &b in &text[pos + key.len()..] {
        match b {
            b' ' | b'\t' if !seen => {}
            b'0'..=b'9' => {
                seen = true;
                v = v.saturating_mul(10).saturating_add(u64::from(b - b'0'));
            }
            _ => break,
        }
    }
    v
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
