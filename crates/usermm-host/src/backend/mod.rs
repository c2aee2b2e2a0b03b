//! The real kernel as a differential-testing backend: [`HostBackend`], an [`AddressSpace`]
//! whose ops run in a forked child.
//!
//! [`HostBackend`] forks a child from the calling (possibly multi-threaded) process. The child
//! closes every inherited fd but its socket, warms itself up (see `child.rs`) and then serves one
//! fixed-size binary request at a time over a `socketpair` (protocol in `proto.rs`), using only
//! raw system calls on buffers allocated before the fork. All ops act on the child's address
//! space; the arena `[ARENA_BASE, ARENA_END)` is empty in a fresh child (checked by
//! [`HostBackend::new`]).
//!
//! * **Placement:** non-fixed mmaps are executed with the op's hint and nothing reserved; a
//!   mapping that lands outside the arena is unmapped again and reported as
//!   [`OpResult::Misplaced`] (see [`crate::ops`]).
//! * **Probing without signals:** a load is `write(pipe, addr, n)` (the kernel's
//!   `copy_from_user` returns EFAULT on an inaccessible page), a store is `read(pipe, addr, n)`
//!   after putting the bytes into the pipe (`copy_to_user` returns EFAULT on a non-writable
//!   page). A writability probe loads one byte and stores the same value back.
//! * **Maps and counters:** the child streams `/proc/self/maps`, `/proc/self/smaps` and
//!   `/proc/self/smaps_rollup` back as raw bytes; the parent parses them and keeps the arena.
//!   Minor faults are `ru_minflt` of the child counted from the end of its warm-up.
//! * **Failure:** if the child dies or stops answering, the op (and every later op) returns
//!   [`OpResult::BackendFailure`] with the reason; the parent never panics. Dropping the backend
//!   kills and reaps the child.
//!
//! `unsafe` here: the fork of the server child (its body is async-signal-safe, see
//! `child.rs`) and the child's stores into the arena.

#![expect(unsafe_code)]

mod child;
mod proto;

use std::os::fd::{AsRawFd, OwnedFd};
use std::str::FromStr;
use std::time::{Duration, Instant};

use proto::*;

use crate::error::HostError;
use crate::fork::ChildProc;
use crate::ops::{
    parse_maps, AddressSpace, Counters, MapSource, MapsLine, Op, OpResult, PageAccess, ARENA_BASE,
    ARENA_END, PAGE_SIZE,
};
use crate::procfs::field_kb;
use crate::sys;

/// Size of the child's preallocated I/O buffer.
const CHILD_BUF: usize = 64 * 1024;
/// Default limit for one op (a hung child is killed after this).
const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------------
// The backend
// ---------------------------------------------------------------------------------------------

/// The host kernel as an [`AddressSpace`]: ops run in a forked child (see the module docs).
#[derive(Debug)]
pub struct HostBackend {
    name: String,
    proc: ChildProc,
    sock: OwnedFd,
    failed: Option<String>,
    op_timeout: Duration,
}

/// Everything the child sent for one request.
struct Reply {
    kind: u32,
    errno: i32,
    value: u64,
    streams: [Vec<u8>; NR_STREAMS],
}

impl HostBackend {
    /// Fork a child with an empty arena and wait until it is ready.
    pub fn new() -> Result<HostBackend, HostError> {
        let (mine, theirs) = sys::socketpair().map_err(|errno| HostError::Sys {
            what: "socketpair",
            errno,
        })?;
        let mut buf = vec![0u8; CHILD_BUF];
        let parent = sys::getpid();
        let keep = theirs.as_raw_fd();
        // SAFETY: `child::run` only issues raw system calls on `buf` (allocated above, before the
        // fork) and on stack memory; it never allocates, locks, prints or returns.
        let proc = unsafe { ChildProc::fork(|| child::run(keep, parent, &mut buf[..]))? };
        drop(theirs);
        drop(buf);
        let mut hb = HostBackend {
            name: "host".to_string(),
            proc,
            sock: mine,
            failed: None,
            op_timeout: DEFAULT_OP_TIMEOUT,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut hdr = [0u8; FRAME_BYTES];
        hb.recv_exact(&mut hdr, deadline)
            .map_err(HostError::Child)?;
        let f = Frame::decode(&hdr);
        if f.kind != F_READY || f.value != hb.proc.pid() as u64 {
            return Err(HostError::Child(format!("bad ready frame {f:?}")));
        }
        match hb.apply(&Op::Maps) {
            OpResult::Maps(lines) if lines.is_empty() => Ok(hb),
            OpResult::Maps(lines) => Err(HostError::ArenaBusy(lines)),
            other => Err(HostError::Child(format!("maps: {other}"))),
        }
    }

    /// Same as [`HostBackend::new`], with another name for messages.
    pub fn with_name(name: &str) -> Result<HostBackend, HostError> {
        let mut hb = HostBackend::new()?;
        hb.name = name.to_string();
        Ok(hb)
    }

    /// The child's pid.
    pub fn pid(&self) -> i32 {
        self.proc.pid()
    }

    /// Why the backend stopped working, if it did.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    // ---- transport -------------------------------------------------------------------------

    fn recv_exact(&mut self, dst: &mut [u8], deadline: Instant) -> Result<(), String> {
        let fd = self.sock.as_raw_fd();
        let mut have = 0;
        while have < dst.len() {
            self.proc.wait_fd(fd, libc::POLLIN, deadline)?;
            match sys::read(fd, &mut dst[have..]) {
                Ok(0) => return Err(self.proc.reap_after_eof()),
                Ok(n) => have += n,
                Err(libc::EINTR) | Err(libc::EAGAIN) => {}
                Err(libc::ECONNRESET) => return Err(self.proc.reap_after_eof()),
                Err(e) => return Err(format!("read from child: errno {e}")),
            }
        }
        Ok(())
    }

    fn send_all(&mut self, mut b: &[u8], deadline: Instant) -> Result<(), String> {
        let fd = self.sock.as_raw_fd();
        while !b.is_empty() {
            self.proc.wait_fd(fd, libc::POLLOUT, deadline)?;
            match sys::send(fd, b) {
                Ok(n) => b = &b[n..],
                Err(libc::EINTR) | Err(libc::EAGAIN) => {}
                Err(libc::EPIPE) | Err(libc::ECONNRESET) => return Err(self.proc.reap_after_eof()),
                Err(e) => return Err(format!("send to child: errno {e}")),
            }
        }
        Ok(())
    }

    /// Send one request (and payload), collect the frames up to the final one.
    fn transact(&mut self, req: Req, payload: &[u8]) -> Result<Reply, String> {
        let deadline = Instant::now() + self.op_timeout;
        self.send_all(&req.encode(), deadline)?;
        self.send_all(payload, deadline)?;
        let mut streams: [Vec<u8>; NR_STREAMS] = Default::default();
        loop {
            let mut hdr = [0u8; FRAME_BYTES];
            self.recv_exact(&mut hdr, deadline)?;
            let f = Frame::decode(&hdr);
            if f.kind != F_CHUNK {
                if f.len != 0 {
                    return Err(format!("final frame with a payload: {f:?}"));
                }
                return Ok(Reply {
                    kind: f.kind,
                    errno: f.errno,
                    value: f.value,
                    streams,
                });
            }
            let s = streams
                .get_mut(f.value as usize)
                .ok_or_else(|| format!("chunk for unknown stream {}", f.value))?;
            let old = s.len();
            let len = usize::try_from(f.len).map_err(|_| format!("huge chunk {f:?}"))?;
            s.resize(old + len, 0);
            // Split borrow: move the vector out while reading into it.
            let mut v = std::mem::take(s);
            let r = self.recv_exact(&mut v[old..], deadline);
            streams[f.value as usize] = v;
            r?;
        }
    }

    /// Run one request; a transport failure kills the child and poisons the backend.
    fn request(&mut self, req: Req, payload: &[u8]) -> Result<Reply, OpResult> {
        if let Some(m) = &self.failed {
            return Err(OpResult::BackendFailure(m.clone()));
        }
        match self.transact(req, payload) {
            Ok(r) => Ok(r),
            Err(m) => {
                self.proc.kill_and_reap();
                let m = format!("{}: {m}", self.name);
                self.failed = Some(m.clone());
                Err(OpResult::BackendFailure(m))
            }
        }
    }

    fn simple(&mut self, code: u64, args: &[u64]) -> OpResult {
        match self.request(Req::new(code, args), &[]) {
            Ok(r) => final_result(&r),
            Err(e) => e,
        }
    }
}

fn final_result(r: &Reply) -> OpResult {
    match r.kind {
        F_OK => OpResult::Ok(r.value),
        F_ERR => OpResult::Err(r.errno),
        F_FAULT => OpResult::Fault { addr: r.value },
        F_MISPLACED => OpResult::Misplaced { addr: r.value },
        k => OpResult::BackendFailure(format!("unexpected reply kind {k}")),
    }
}

impl AddressSpace for HostBackend {
    fn apply(&mut self, op: &Op) -> OpResult {
        match op {
            Op::Mmap(a) => {
                let src = match a.source {
                    MapSource::Anon => SRC_ANON,
                    MapSource::DevZero => SRC_DEV_ZERO,
                };
                let args = [a.addr, a.len, a.prot.into(), a.flags.into(), src, a.offset];
                self.simple(REQ_MMAP, &args)
            }
            &Op::Munmap { addr, len } => self.simple(REQ_MUNMAP, &[addr, len]),
            &Op::Mprotect { addr, len, prot } => {
                self.simple(REQ_MPROTECT, &[addr, len, prot.into()])
            }
            // The advice is an int: sign-extend it as the syscall ABI would.
            &Op::Madvise { addr, len, advice } => {
                self.simple(REQ_MADVISE, &[addr, len, i64::from(advice) as u64])
            }
            &Op::Mlock { addr, len } => self.simple(REQ_MLOCK, &[addr, len]),
            &Op::Munlock { addr, len } => self.simple(REQ_MUNLOCK, &[addr, len]),
            &Op::Read { addr, len } => match self.request(Req::new(REQ_READ, &[addr, len]), &[]) {
                Ok(r) if r.kind == F_OK => {
                    let [data, _, _] = r.streams;
                    if data.len() as u64 == len {
                        OpResult::Data(data)
                    } else {
                        OpResult::BackendFailure(format!(
                            "read returned {} of {len} bytes",
                            data.len()
                        ))
                    }
                }
                Ok(r) => final_result(&r),
                Err(e) => e,
            },
            Op::Write { addr, data } => {
                let req = Req::new(REQ_WRITE, &[*addr, data.len() as u64]);
                match self.request(req, data) {
                    Ok(r) => final_result(&r),
                    Err(e) => e,
                }
            }
            &Op::Probe { addr, len } => {
                match self.request(Req::new(REQ_PROBE, &[addr, len]), &[]) {
                    Ok(r) if r.kind == F_OK => {
                        let base = addr & !(PAGE_SIZE - 1);
                        OpResult::Probe(
                            r.streams[STREAM_MAIN as usize]
                                .iter()
                                .enumerate()
                                .map(|(i, &b)| PageAccess {
                                    addr: base + i as u64 * PAGE_SIZE,
                                    readable: b & PROBE_R != 0,
                                    writable: b & PROBE_W != 0,
                                })
                                .collect(),
                        )
                    }
                    Ok(r) => final_result(&r),
                    Err(e) => e,
                }
            }
            Op::Maps => match self.request(Req::new(REQ_MAPS, &[]), &[]) {
                Ok(r) if r.kind == F_OK => {
                    let text = String::from_utf8_lossy(&r.streams[STREAM_MAIN as usize]);
                    match parse_maps(&text) {
                        Ok(lines) => {
                            OpResult::Maps(lines.into_iter().filter(|l| l.in_arena()).collect())
                        }
                        Err(e) => OpResult::BackendFailure(format!("/proc/self/maps: {e}")),
                    }
                }
                Ok(r) => OpResult::BackendFailure(format!(
                    "cannot read /proc/self/maps: {}",
                    final_result(&r)
                )),
                Err(e) => e,
            },
            Op::Mremap(a) => {
                let args = [a.addr, a.old_len, a.new_len, a.flags.into(), a.new_addr];
                self.simple(REQ_MREMAP, &args)
            }
            &Op::Brk { off } => self.simple(REQ_BRK, &[off]),
            Op::Fork => self.simple(REQ_FORK, &[]),
            &Op::Switch { proc } => self.simple(REQ_SWITCH, &[proc.into()]),
            Op::Exit => self.simple(REQ_EXIT, &[]),
            Op::Counters => match self.request(Req::new(REQ_COUNTERS, &[]), &[]) {
                Ok(r) if r.kind == F_OK => {
                    let rollup = &r.streams[STREAM_ROLLUP as usize];
                    let smaps = String::from_utf8_lossy(&r.streams[STREAM_SMAPS as usize]);
                    let (rss_kb, anon_huge_kb) = arena_smaps(&smaps);
                    OpResult::Counters(Counters {
                        minor_faults: r.value,
                        rss_kb,
                        anon_huge_kb,
                        process_rss_kb: field_kb(rollup, b"Rss:").unwrap_or(0),
                        process_anon_huge_kb: field_kb(rollup, b"AnonHugePages:").unwrap_or(0),
                    })
                }
                Ok(r) => OpResult::BackendFailure(format!(
                    "cannot read /proc/self/smaps: {}",
                    final_result(&r)
                )),
                Err(e) => e,
            },
        }
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// Sum `Rss:` and `AnonHugePages:` over the `/proc/self/smaps` entries inside the arena.
fn arena_smaps(text: &str) -> (u64, u64) {
    let (mut rss, mut thp) = (0, 0);
    let mut inside = false;
    for l in text.lines() {
        let first = l.split(' ').next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            if let Ok(m) = MapsLine::from_str(l) {
                inside = m.start < ARENA_END && m.end > ARENA_BASE;
                continue;
            }
        }
        if !inside {
            continue;
        }
        let line = l.as_bytes();
        rss += field_kb(line, b"Rss:").unwrap_or(0);
        thp += field_kb(line, b"AnonHugePages:").unwrap_or(0);
    }
    (rss, thp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_smaps_parsing() {
        let smaps = "\
300000000000-300000004000 rw-p 00000000 00:00 0 
Size:                 16 kB
Rss:                   8 kB
AnonHugePages:         0 kB
VmFlags: rd wr mr mw me ac
7f0000000000-7f0000200000 rw-p 00000000 00:00 0 
Rss:                2048 kB
AnonHugePages:      2048 kB
300000200000-300000400000 rw-p 00000000 00:00 0 
Rss:                2048 kB
AnonHugePages:      2048 kB
";
        assert_eq!(arena_smaps(smaps), (2056, 2048));
    }
}
