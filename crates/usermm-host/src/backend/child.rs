//! The forked child of a [`super::HostBackend`]: a loop over requests on a socket.
//!
//! The parent is multi-threaded, so between `fork` and `_exit` this code may only do what is
//! async-signal-safe: raw system calls on preallocated buffers. It never allocates, takes no
//! locks, never prints and must not panic (all indexing below stays within bounds by
//! construction). It never returns: it `_exit`s when the socket reaches EOF, when the parent
//! process is gone, or when a send fails.
//!
//! Loads and stores of arena memory go through a private pipe (the "loopback"): `write(lw, addr,
//! n)` makes the kernel load from `addr` and `read(lr, addr, n)` makes it store to `addr`, with
//! EFAULT instead of SIGSEGV when the page is not accessible. Every copy stays inside one page, so
//! a copy either succeeds completely or faults completely.
//!
//! Private means one per process: a process made by `REQ_FORK` closes the loopback it inherited
//! and makes its own before its first load. The two run at once for a while after a fork — the
//! forking process answers and serves the next request while the new one rewarms (a load and a
//! store of one byte on each page of its stack) — and a pipe both used would hand each the
//! other's bytes: a read of arena memory came back with one byte of the new process's stack at
//! the start of a page and the rest of what the pipe held one byte late (found as a one-byte
//! mismatch by `diff_generated_b`, seed 0x43f528565c8e08bd, in about 3 % of replays; the test
//! `host_fork_then_read_gets_only_its_own_bytes` holds it). The control pipes (`ctl`) are
//! shared on purpose: a token is one byte, and only the process that holds the turn writes one.

use std::time::Duration;

use super::proto::*;
use crate::ops::{ARENA_BASE, ARENA_END, ARENA_SIZE, PAGE_SIZE};
use crate::sys::{self, Fd};

const PAGE: usize = PAGE_SIZE as usize;

struct Child<'a> {
    sock: Fd,
    parent: libc::pid_t,
    /// Loopback pipe (read end, write end).
    lr: Fd,
    lw: Fd,
    /// `/dev/zero`, opened `O_RDWR`, for `MapSource::DevZero`.
    zero_fd: Fd,
    /// Preallocated I/O buffer (allocated by the parent before the fork).
    buf: &'a mut [u8],
    /// One page for draining the loopback pipe.
    scratch: [u8; PAGE],
    /// `ru_minflt` when the child became ready (or forked), less the faults the server itself
    /// took since (its own pages broken copy-on-write after a fork).
    baseline_minflt: u64,
    /// This process's number (0 for the first; a fork takes the free one).
    slot: usize,
    /// Which process numbers are serving (this one, and the other if it forked and lives).
    alive: [bool; 2],
    /// Per process number, its control pipe (read end, write end): the token that makes it
    /// current. Made before any fork, so every process holds every pipe.
    ctl: [(Fd, Fd); 2],
    /// The break when the backend started: `REQ_BRK` works in offsets from it.
    brk_base: u64,
}

/// The child's entry point. `keep` is the child's end of the socket pair; every other inherited
/// fd is closed first.
pub(super) fn run(keep: Fd, parent: libc::pid_t, buf: &mut [u8]) -> ! {
    // Drop every fd inherited from the (multi-threaded) parent except ours, so this child does
    // not hold other backends' sockets open.
    let keep_u = keep as u32;
    if keep_u > 3 {
        sys::close_range(3, keep_u - 1);
    }
    sys::close_range(keep_u + 1, u32::MAX);
    let Ok((lr, lw)) = sys::pipe() else {
        sys::exit_now(2)
    };
    let zero_fd = sys::open(c"/dev/zero", libc::O_RDWR).unwrap_or(-1);
    let (Ok(c0), Ok(c1)) = (sys::pipe(), sys::pipe()) else {
        sys::exit_now(2)
    };
    let mut c = Child {
        sock: keep,
        parent,
        lr,
        lw,
        zero_fd,
        buf,
        scratch: [0; PAGE],
        baseline_minflt: 0,
        slot: 0,
        alive: [true, false],
        ctl: [c0, c1],
        brk_base: 0,
    };
    c.warm_up();
    // SAFETY: brk(0) only asks for the current break; it changes nothing.
    c.brk_base = unsafe { sys::brk(0) };
    c.baseline_minflt = sys::minflt();
    c.frame(F_READY, 0, sys::getpid() as u64, &[]);
    c.serve()
}

impl Child<'_> {
    // ----------------------------------------------------------------------------------------
    // Socket I/O
    // ----------------------------------------------------------------------------------------

    /// Fill `dst` from the socket; `_exit(0)` on EOF or when the parent process is gone.
    fn recv_exact(sock: Fd, parent: libc::pid_t, dst: &mut [u8]) {
        let mut have = 0;
        while have < dst.len() {
            match sys::poll1(sock, libc::POLLIN, Duration::from_secs(1)) {
                Ok(0) => {
                    // A forked process (parent 0) relies on the socket's EOF alone.
                    if parent != 0 && sys::getppid() != parent {
                        sys::exit_now(0);
                    }
                    continue;
                }
                Ok(_) => {}
                Err(_) => sys::exit_now(3),
            }
            match sys::read(sock, &mut dst[have..]) {
                Ok(0) => sys::exit_now(0),
                Ok(n) => have += n,
                Err(libc::EINTR) | Err(libc::EAGAIN) => {}
                Err(_) => sys::exit_now(3),
            }
        }
    }

    fn send_all(sock: Fd, mut b: &[u8]) {
        while !b.is_empty() {
            match sys::send(sock, b) {
                Ok(n) => b = &b[n..],
                Err(libc::EINTR) => {}
                Err(_) => sys::exit_now(4),
            }
        }
    }

    fn frame_to(sock: Fd, kind: u32, errno: i32, value: u64, payload: &[u8]) {
        let f = Frame {
            kind,
            errno,
            value,
            len: payload.len() as u64,
        };
        Self::send_all(sock, &f.encode());
        Self::send_all(sock, payload);
    }

    fn frame(&self, kind: u32, errno: i32, value: u64, payload: &[u8]) {
        Self::frame_to(self.sock, kind, errno, value, payload);
    }

    fn reply(&self, r: Result<u64, i32>) {
        match r {
            Ok(v) => self.frame(F_OK, 0, v, &[]),
            Err(e) => self.frame(F_ERR, e, 0, &[]),
        }
    }

    // ----------------------------------------------------------------------------------------
    // Loads and stores through the loopback pipe
    // ----------------------------------------------------------------------------------------

    /// Throw away `n` bytes sitting in the loopback pipe.
    fn drain(&mut self, mut n: usize) {
        while n > 0 {
            let k = n.min(PAGE);
            match sys::read(self.lr, &mut self.scratch[..k]) {
                Ok(0) => return,
                Ok(got) => n -= got,
                Err(libc::EINTR) => {}
                Err(_) => return,
            }
        }
    }

    /// Load `dst.len()` (≤ one page, not crossing a page) bytes from `addr` into `dst`.
    /// `Err(addr_of_fault)` if the page is not readable.
    fn load(&mut self, addr: u64, dst: &mut [u8]) -> Result<(), u64> {
        let n = dst.len();
        let put = loop {
            match sys::write_from_addr(self.lw, addr, n) {
                Err(libc::EINTR) => continue,
                r => break r,
            }
        };
        let put = match put {
            Ok(k) => k,
            Err(_) => return Err(addr),
        };
        let mut got = 0;
        while got < put {
            match sys::read(self.lr, &mut dst[got..put]) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(libc::EINTR) => {}
                Err(_) => break,
            }
        }
        if put < n {
            return Err(addr + put as u64);
        }
        Ok(())
    }

    /// Store `src` (≤ one page, not crossing a page) at `addr`, or `Err(addr_of_fault)` (nothing
    /// stored) if the page is not writable.
    fn store(&mut self, addr: u64, src: &[u8]) -> Result<(), u64> {
        let n = src.len();
        let mut put = 0;
        while put < n {
            match sys::write(self.lw, &src[put..]) {
                Ok(k) => put += k,
                Err(libc::EINTR) => {}
                Err(_) => break,
            }
        }
        let mut done = 0;
        while done < put {
            // SAFETY: `addr` comes from a test op and names arena memory (or, if the test says
            // so, anything else); no Rust object of this child lives in the arena. An op aimed
            // at the child's own memory is documented as undefined and can only break this
            // disposable process, which the parent then reports.
            match unsafe { sys::read_to_addr(self.lr, addr + done as u64, put - done) } {
                Ok(0) => break,
                Ok(k) => done += k,
                Err(libc::EINTR) => {}
                Err(_) => break,
            }
        }
        if done < put {
            self.drain(put - done);
        }
        if done < n {
            return Err(addr + done as u64);
        }
        Ok(())
    }

    /// (readable, writable) of the page at `page`: load one byte, then store it back unchanged.
    fn probe_page(&mut self, page: u64) -> (bool, bool) {
        let mut b = [0u8; 1];
        if self.load(page, &mut b).is_err() {
            return (false, false);
        }
        (true, self.store(page, &b).is_ok())
    }

    // ----------------------------------------------------------------------------------------
    // Requests
    // ----------------------------------------------------------------------------------------

    fn serve(&mut self) -> ! {
        loop {
            let mut hdr = [0u8; REQ_BYTES];
            Self::recv_exact(self.sock, self.parent, &mut hdr);
            let req = Req::decode(&hdr);
            let a = req.args;
            match req.code {
                REQ_MMAP => self.do_mmap(a),
                REQ_MUNMAP => self.reply(arena_call(MmCall::Munmap, a)),
                REQ_MPROTECT => self.reply(arena_call(MmCall::Mprotect, a)),
                REQ_MADVISE => self.reply(arena_call(MmCall::Madvise, a)),
                REQ_MLOCK => self.reply(arena_call(MmCall::Mlock, a)),
                REQ_MUNLOCK => self.reply(arena_call(MmCall::Munlock, a)),
                REQ_READ => self.do_read(a[0], a[1]),
                REQ_WRITE => self.do_write(a[0], a[1]),
                REQ_PROBE => self.do_probe(a[0], a[1]),
                REQ_MAPS => {
                    let r = self.stream_file(c"/proc/self/maps", STREAM_MAIN, true);
                    self.reply(r.map(|_| 0));
                }
                REQ_COUNTERS => self.do_counters(),
                REQ_MREMAP => self.do_mremap(a),
                REQ_BRK => {
                    let want = if a[0] == u64::MAX {
                        0
                    } else {
                        self.brk_base.wrapping_add(a[0])
                    };
                    // SAFETY: requests never go below `brk_base` (the parent's ops cannot
                    // express it), so only heap this backend added is ever given back.
                    let got = unsafe { sys::brk(want) };
                    self.reply(Ok(got.wrapping_sub(self.brk_base)));
                }
                REQ_FORK => self.do_fork(),
                REQ_SWITCH => self.do_switch(a[0]),
                REQ_EXIT => self.do_exit(),
                _ => self.frame(F_ERR, libc::ENOSYS, 0, &[]),
            }
        }
    }

    /// `mremap`; a mapping moved out of the arena (no `MREMAP_FIXED`: the kernel chose where)
    /// is unmapped again and reported misplaced, as for mmap.
    fn do_mremap(&mut self, a: [u64; 6]) {
        let (addr, new_len, flags) = (a[0], a[2], a[3]);
        // SAFETY: as `arena_call`: the op names arena addresses.
        let got = match unsafe { sys::mremap(addr, a[1], new_len, flags, a[4]) } {
            Ok(v) => v,
            Err(e) => return self.frame(F_ERR, e, 0, &[]),
        };
        let rounded = new_len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let inside = (ARENA_BASE..=ARENA_END).contains(&got) && rounded <= ARENA_END - got;
        if !inside && got != addr && flags & libc::MREMAP_FIXED as u64 == 0 {
            // SAFETY: `got..got+new_len` is the mapping the kernel just moved there.
            let _ = unsafe { sys::munmap(got, new_len) };
            return self.frame(F_MISPLACED, 0, got, &[]);
        }
        self.frame(F_OK, 0, got, &[])
    }

    fn do_mmap(&mut self, a: [u64; 6]) {
        let (addr, len, prot, flags, source, offset) = (a[0], a[1], a[2], a[3], a[4], a[5]);
        let fd = if source == SRC_DEV_ZERO {
            self.zero_fd as i64 as u64
        } else {
            u64::MAX // fd -1
        };
        // SAFETY: see `arena_call`; the op's address is an arena address or a hint.
        let r = unsafe { sys::mmap(addr, len, prot, flags, fd, offset) };
        let got = match r {
            Ok(v) => v,
            Err(e) => return self.frame(F_ERR, e, 0, &[]),
        };
        let fixed = (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE) as u64;
        let rounded = len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let inside = (ARENA_BASE..=ARENA_END).contains(&got) && rounded <= ARENA_END - got;
        if flags & fixed == 0 && !inside {
            // The hint was not honoured and the kernel put the mapping somewhere in the child's
            // own address space: take it away again.
            // SAFETY: `got..got+len` is the mapping the kernel just created for this op.
            let _ = unsafe { sys::munmap(got, len) };
            return self.frame(F_MISPLACED, 0, got, &[]);
        }
        self.frame(F_OK, 0, got, &[])
    }

    /// Page-bounded chunk length at `a` with `left` bytes to go, at most `cap`.
    fn chunk(a: u64, left: u64, cap: usize) -> usize {
        let to_page_end = PAGE_SIZE - (a & (PAGE_SIZE - 1));
        to_page_end.min(left).min(cap as u64) as usize
    }

    fn do_read(&mut self, addr: u64, len: u64) {
        if addr.checked_add(len).is_none() {
            return self.frame(F_ERR, libc::EINVAL, 0, &[]);
        }
        let cap = self.buf.len();
        let mut off = 0u64;
        let mut fill = 0usize;
        while off < len {
            let a = addr + off;
            let n = Self::chunk(a, len - off, cap - fill);
            // Move the buffer out of `self` for the duration of the load (no allocation).
            let buf = std::mem::take(&mut self.buf);
            let r = self.load(a, &mut buf[fill..fill + n]);
            self.buf = buf;
            if let Err(at) = r {
                return self.frame(F_FAULT, 0, at, &[]);
            }
            fill += n;
            off += n as u64;
            if fill == cap {
                Self::frame_to(self.sock, F_CHUNK, 0, STREAM_MAIN, &self.buf[..fill]);
                fill = 0;
            }
        }
        if fill > 0 {
            Self::frame_to(self.sock, F_CHUNK, 0, STREAM_MAIN, &self.buf[..fill]);
        }
        self.frame(F_OK, 0, len, &[])
    }

    fn do_write(&mut self, addr: u64, len: u64) {
        // The payload must be consumed whatever happens, to keep the stream in step.
        let bad = addr.checked_add(len).is_none();
        let cap = self.buf.len();
        let mut fault = None;
        let mut off = 0u64;
        while off < len {
            let a = addr.wrapping_add(off);
            let n = Self::chunk(a, len - off, cap);
            Self::recv_exact(self.sock, self.parent, &mut self.buf[..n]);
            if !bad && fault.is_none() {
                let buf = std::mem::take(&mut self.buf);
                let r = self.store(a, &buf[..n]);
                self.buf = buf;
                if let Err(at) = r {
                    fault = Some(at);
                }
            }
            off += n as u64;
        }
        match (bad, fault) {
            (true, _) => self.frame(F_ERR, libc::EINVAL, 0, &[]),
            (false, Some(at)) => self.frame(F_FAULT, 0, at, &[]),
            (false, None) => self.frame(F_OK, 0, len, &[]),
        }
    }

    fn do_probe(&mut self, addr: u64, len: u64) {
        if len == 0 {
            return self.frame(F_OK, 0, 0, &[]);
        }
        let (first, end) = match addr.checked_add(len) {
            Some(e) if len <= ARENA_SIZE => match e.checked_add(PAGE_SIZE - 1) {
                Some(x) => (addr & !(PAGE_SIZE - 1), x & !(PAGE_SIZE - 1)),
                None => return self.frame(F_ERR, libc::EINVAL, 0, &[]),
            },
            _ => return self.frame(F_ERR, libc::EINVAL, 0, &[]),
        };
        let cap = self.buf.len();
        let mut fill = 0;
        let mut page = first;
        while page < end {
            let (r, w) = self.probe_page(page);
            self.buf[fill] = if r { PROBE_R } else { 0 } | if w { PROBE_W } else { 0 };
            fill += 1;
            if fill == cap {
                Self::frame_to(self.sock, F_CHUNK, 0, STREAM_MAIN, &self.buf[..fill]);
                fill = 0;
            }
            page += PAGE_SIZE;
        }
        if fill > 0 {
            Self::frame_to(self.sock, F_CHUNK, 0, STREAM_MAIN, &self.buf[..fill]);
        }
        self.frame(F_OK, 0, (end - first) / PAGE_SIZE, &[])
    }

    // ----------------------------------------------------------------------------------------
    // Processes: fork, switch, exit (one process serves at a time, passing a token)
    // ----------------------------------------------------------------------------------------

    /// `fork()`: the new process takes the free number and waits for its token; this one
    /// answers with that number. Both first break their own pages copy-on-write (stack,
    /// buffers) and discount those faults, so that the counters count the arena only.
    fn do_fork(&mut self) {
        let other = 1 - self.slot;
        if self.alive[other] {
            return self.frame(F_ERR, libc::EAGAIN, 0, &[]);
        }
        // Faults from here to the end of the rewarm are the server's own, not the arena's.
        let before = sys::minflt();
        // SAFETY: both processes go on running only this async-signal-safe server.
        match unsafe { sys::fork() } {
            Err(e) => self.frame(F_ERR, e, 0, &[]),
            Ok(0) => {
                self.slot = other;
                self.alive = [true, true];
                self.parent = 0;
                // A loopback of its own before anything goes through one: the inherited pipe
                // is the forking process's, which serves the next request while this one
                // rewarms (see the module docs).
                self.new_loopback();
                // fork copies no page tables of file mappings: fault the code in again.
                self.populate_file_mappings();
                self.rewarm();
                self.baseline_minflt = sys::minflt();
                self.wait_token();
            }
            Ok(_) => {
                self.alive = [true, true];
                self.rewarm();
                self.baseline_minflt += sys::minflt() - before;
                self.reply(Ok(other as u64));
            }
        }
    }

    /// Replace the loopback pipe inherited from the forking process by a new one, or exit (the
    /// parent then sees this process gone) when none can be made.
    fn new_loopback(&mut self) {
        let Ok((lr, lw)) = sys::pipe() else {
            sys::exit_now(2)
        };
        sys::close(self.lr);
        sys::close(self.lw);
        self.lr = lr;
        self.lw = lw;
    }

    /// Make process `to` current: answer, hand it the token, wait for ours.
    fn do_switch(&mut self, to: u64) {
        if to == self.slot as u64 {
            return self.reply(Ok(0));
        }
        if to > 1 || !self.alive[to as usize] {
            return self.frame(F_ERR, libc::ESRCH, 0, &[]);
        }
        self.reply(Ok(0));
        self.send_token(to as usize, TOKEN_SWITCH);
        self.wait_token();
    }

    /// Exit as far as the arena can tell: unmap all of it, make the other process current,
    /// and never serve again (linger until the backend closes the socket).
    fn do_exit(&mut self) {
        let other = 1 - self.slot;
        if !self.alive[other] {
            return self.frame(F_ERR, libc::ESRCH, 0, &[]);
        }
        // SAFETY: the arena holds no Rust object of this process.
        let _ = unsafe { sys::munmap(ARENA_BASE, ARENA_SIZE) };
        self.reply(Ok(other as u64));
        self.send_token(other, TOKEN_OTHER_EXITED);
        loop {
            match sys::poll1(self.sock, libc::POLLRDHUP, Duration::from_secs(1)) {
                Ok(0) => {}
                _ => sys::exit_now(0),
            }
        }
    }

    fn send_token(&self, to: usize, token: u8) {
        loop {
            match sys::write(self.ctl[to].1, &[token]) {
                Err(libc::EINTR) => {}
                Ok(1) => return,
                _ => sys::exit_now(5),
            }
        }
    }

    /// Block until this process is made current (its token arrives), or exit when the
    /// backend has closed the socket.
    fn wait_token(&mut self) {
        let mut t = [0u8; 1];
        loop {
            let ev = sys::poll2(
                (self.ctl[self.slot].0, libc::POLLIN),
                (self.sock, libc::POLLRDHUP),
                Duration::from_secs(1),
            );
            match ev {
                Ok((_, s)) if s & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 => {
                    sys::exit_now(0)
                }
                Ok((c, _)) if c & libc::POLLIN != 0 => {
                    match sys::read(self.ctl[self.slot].0, &mut t) {
                        Ok(1) => {
                            if t[0] == TOKEN_OTHER_EXITED {
                                self.alive[1 - self.slot] = false;
                            }
                            return;
                        }
                        Err(libc::EINTR) => {}
                        _ => sys::exit_now(5),
                    }
                }
                Ok(_) => {}
                Err(_) => sys::exit_now(3),
            }
        }
    }

    /// After a fork: break this process's own writable pages copy-on-write now (the I/O
    /// buffer, the scratch page, the stack, errno), before the baseline is taken.
    fn rewarm(&mut self) {
        for i in (0..self.buf.len()).step_by(PAGE) {
            self.buf[i] = 0x5a;
        }
        if let Some(b) = self.buf.last_mut() {
            *b = 0x5a;
        }
        for i in (0..PAGE).step_by(64) {
            self.scratch[i] = 0;
        }
        std::hint::black_box(&mut *self.buf);
        touch_stack();
        // The frames above this one (the server loop, `run`, the thread's TLS at the top of
        // its stack mapping): store every page back to itself through the loopback pipe,
        // which breaks copy-on-write without risking a signal, up to the first page that
        // cannot be read or written.
        let mut b = [0u8; 1];
        let here = std::hint::black_box(&b as *const _ as u64) & !(PAGE_SIZE - 1);
        for i in 0..1024 {
            let page = here + i * PAGE_SIZE;
            if self.load(page, &mut b).is_err() || self.store(page, &b).is_err() {
                break;
            }
        }
        sys::close(-1);
        let _ = sys::minflt();
        let _ = sys::poll1(self.sock, 0, Duration::ZERO);
    }

    fn do_counters(&mut self) {
        let minflt = sys::minflt().saturating_sub(self.baseline_minflt);
        if let Err(e) = self.stream_file(c"/proc/self/smaps_rollup", STREAM_ROLLUP, true) {
            return self.frame(F_ERR, e, 0, &[]);
        }
        if let Err(e) = self.stream_file(c"/proc/self/smaps", STREAM_SMAPS, true) {
            return self.frame(F_ERR, e, 0, &[]);
        }
        self.frame(F_OK, 0, minflt, &[])
    }

    /// Copy a file to the parent as `CHUNK` frames of `stream` (or just read it, if `!send`).
    fn stream_file(&mut self, path: &std::ffi::CStr, stream: u64, send: bool) -> Result<(), i32> {
        let fd = sys::open(path, libc::O_RDONLY)?;
        let r = loop {
            match sys::read(fd, self.buf) {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    if send {
                        Self::frame_to(self.sock, F_CHUNK, 0, stream, &self.buf[..n]);
                    }
                }
                Err(libc::EINTR) => {}
                Err(e) => break Err(e),
            }
        };
        sys::close(fd);
        r
    }

    // ----------------------------------------------------------------------------------------
    // Warm-up: make the fault counter count the arena only
    // ----------------------------------------------------------------------------------------

    /// Take, before the baseline is read, every fault that serving requests would otherwise take
    /// outside the arena: COW-break the buffer and the stack, map the code, run each path once.
    fn warm_up(&mut self) {
        for i in (0..self.buf.len()).step_by(PAGE) {
            self.buf[i] = 0x5a;
        }
        // The buffer need not be page-aligned: its last byte may sit on one more page.
        if let Some(b) = self.buf.last_mut() {
            *b = 0x5a;
        }
        std::hint::black_box(&mut *self.buf);
        touch_stack();
        self.populate_file_mappings();

        // Run each request path once, on the last two pages of the arena.
        let p = ARENA_END - 2 * PAGE_SIZE;
        let len = 2 * PAGE_SIZE;
        let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let noreplace = libc::MAP_FIXED_NOREPLACE as u64;
        for (flags, fd) in [
            ((libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64, u64::MAX),
            (libc::MAP_PRIVATE as u64, self.zero_fd as i64 as u64),
        ] {
            // SAFETY: the arena holds no Rust object; NOREPLACE refuses to clobber anything.
            let r = unsafe { sys::mmap(p, len, rw, flags | noreplace, fd, 0) };
            if r != Ok(p) {
                // Occupied (the parent will notice a non-empty arena) or unusable: stop here.
                return;
            }
            let mut b = [0u8; 16];
            let _ = self.store(p, &b);
            let _ = self.load(p, &mut b);
            let _ = self.probe_page(p);
            let _ = arena_call(MmCall::Mprotect, [p + PAGE_SIZE, PAGE_SIZE, 0, 0, 0, 0]);
            let _ = self.probe_page(p + PAGE_SIZE);
            let _ = self.store(p + PAGE_SIZE, &b);
            let _ = self.load(p + PAGE_SIZE, &mut b);
            let dontneed = libc::MADV_DONTNEED as u64;
            let _ = arena_call(MmCall::Madvise, [p, len, dontneed, 0, 0, 0]);
            let _ = arena_call(MmCall::Mlock, [p, PAGE_SIZE, 0, 0, 0, 0]);
            let _ = arena_call(MmCall::Munlock, [p, PAGE_SIZE, 0, 0, 0, 0]);
            let _ = arena_call(MmCall::Munmap, [p, len, 0, 0, 0, 0]);
        }
        let _ = self.stream_file(c"/proc/self/maps", STREAM_MAIN, false);
        let _ = self.stream_file(c"/proc/self/smaps_rollup", STREAM_ROLLUP, false);
        let _ = self.stream_file(c"/proc/self/smaps", STREAM_SMAPS, false);
        let _ = sys::minflt();
    }

    /// `MADV_POPULATE_READ` every read-only file mapping (program text, rodata, libraries): fork
    /// does not copy their page tables, so the child would otherwise fault on code it runs for
    /// the first time.
    fn populate_file_mappings(&mut self) {
        let Ok(fd) = sys::open(c"/proc/self/maps", libc::O_RDONLY) else {
            return;
        };
        let mut have = 0;
        loop {
            let n = match sys::read(fd, &mut self.buf[have..]) {
                Ok(n) => n,
                Err(libc::EINTR) => continue,
                Err(_) => 0,
            };
            let eof = n == 0;
            have += n;
            let mut start = 0;
            while let Some(pos) = self.buf[start..have].iter().position(|&b| b == b'\n') {
                populate_line(&self.buf[start..start + pos]);
                start += pos + 1;
            }
            if eof {
                if start < have {
                    populate_line(&self.buf[start..have]);
                }
                break;
            }
            self.buf.copy_within(start..have, 0);
            have -= start;
            if have == self.buf.len() {
                have = 0; // an absurdly long line: skip it
            }
        }
        sys::close(fd);
    }
}

/// The memory-management requests other than mmap.
#[derive(Clone, Copy)]
enum MmCall {
    Munmap,
    Mprotect,
    Madvise,
    Mlock,
    Munlock,
}

/// Run one of them on a request's arguments (`addr, len[, prot | advice]`).
fn arena_call(call: MmCall, a: [u64; 6]) -> Result<u64, i32> {
    // SAFETY: the addresses come from a test op and name the arena, where no Rust object of this
    // child lives. Ops aimed elsewhere are documented as undefined: they can only damage this
    // disposable process, whose death the parent reports as a backend failure.
    unsafe {
        match call {
            MmCall::Munmap => sys::munmap(a[0], a[1]),
            MmCall::Mprotect => sys::mprotect(a[0], a[1], a[2]),
            MmCall::Madvise => sys::madvise(a[0], a[1], a[2]),
            MmCall::Mlock => sys::mlock(a[0], a[1]),
            MmCall::Munlock => sys::munlock(a[0], a[1]),
        }
    }
}

/// COW-break the next 64 KiB of stack below the current frame.
#[inline(never)]
fn touch_stack() {
    let mut a = [0u8; 64 * 1024];
    for i in (0..a.len()).step_by(PAGE) {
        a[i] = 1;
    }
    std::hint::black_box(&mut a);
}

fn hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut v = 0u64;
    for &b in s {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        v = (v << 4) | u64::from(d);
    }
    Some(v)
}

/// Populate one maps line's VMA if it is a non-writable file mapping.
fn populate_line(line: &[u8]) {
    let Some(dash) = line.iter().position(|&b| b == b'-') else {
        return;
    };
    let Some(sp) = line.iter().position(|&b| b == b' ') else {
        return;
    };
    if dash >= sp || line.len() < sp + 5 {
        return;
    }
    let perms = &line[sp + 1..sp + 5];
    let file_backed = line.contains(&b'/');
    if !file_backed || perms[0] != b'r' || perms[1] == b'w' {
        return;
    }
    let (Some(start), Some(end)) = (hex(&line[..dash]), hex(&line[dash + 1..sp])) else {
        return;
    };
    // Bound the work: code and rodata are small; anything huge is somebody's data file.
    if end > start && end - start <= 256 << 20 && (end <= ARENA_BASE || start >= ARENA_END) {
        let populate = libc::MADV_POPULATE_READ as u64;
        // SAFETY: MADV_POPULATE_READ only faults pages in; it never changes or discards the
        // contents of the mapping (this child's own read-only code and data).
        let _ = unsafe { sys::madvise(start, end - start, populate) };
    }
}
