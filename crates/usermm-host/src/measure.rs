//! Host-kernel measurement workloads, the real-kernel side of the engine's fault-rate and
//! free-rate numbers, and the harness that runs a workload in a forked child
//! ([`run_forked_checked`]).
//!
//! Each workload runs in a freshly forked, single-threaded child so that the timings do not
//! include TLB shootdowns to the other threads of the (multi-threaded) calling process, and so
//! that its faults are the only ones `getrusage` sees. The child works on memory it maps itself
//! (no arena), only issues raw system calls, and hands back a fixed array of `u64`s through a
//! pipe. Nothing here asserts a time; callers compare ratios.
//!
//! `usermm bench`'s paths are not here: they are written once over `usermm_workloads`'s task
//! trait, for the engine and the host alike, and run in a child by [`run_forked_checked`].
//! What is here is what has no such body: `bigfree --host`'s touch and munmap
//! ([`host_touch_and_munmap`]), the read-only walk of `reproduce`'s huge-zero row
//! ([`host_usemem_readonly`]), and the fork and exit of a small process
//! ([`host_fork_exit`]: the task trait has no fork).

#![expect(unsafe_code)]

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::HostError;
use crate::fork::ChildProc;
use crate::ops::{HPAGE_SIZE, PAGE_SIZE};
use crate::{procfs, sys};

/// Longest a measurement child may run.
const MEASURE_TIMEOUT: Duration = Duration::from_secs(600);
/// Most `u64` results a child can return.
pub(crate) const MAX_WORDS: usize = 32;

/// Result of [`host_touch_and_munmap`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostFreeResult {
    /// Bytes mapped (the request rounded up to whole pages).
    pub size: u64,
    /// THP was allowed (`MADV_HUGEPAGE` on a 2 MiB-aligned range) rather than refused
    /// (`MADV_NOHUGEPAGE`).
    pub thp: bool,
    /// 4 KiB pages touched.
    pub pages: u64,
    /// Minor faults taken while touching.
    pub faults: u64,
    /// Nanoseconds to write one byte per 4 KiB page (faults included).
    pub populate_ns: u64,
    /// Nanoseconds for the `munmap` of the whole range.
    pub munmap_ns: u64,
    /// Growth of the process's `AnonHugePages` while populated, in kB.
    pub anon_huge_kb: u64,
}

impl HostFreeResult {
    /// Populate cost per 4 KiB page.
    pub fn populate_ns_per_page(&self) -> f64 {
        self.populate_ns as f64 / self.pages.max(1) as f64
    }

    /// munmap cost per 4 KiB page.
    pub fn munmap_ns_per_page(&self) -> f64 {
        self.munmap_ns as f64 / self.pages.max(1) as f64
    }
}

/// Result of [`host_usemem_readonly`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostUsememResult {
    /// Bytes mapped (rounded up to whole pages).
    pub size: u64,
    /// Distance between reads (clamped to ≥ 8, as usemem does).
    pub step: u64,
    /// 8-byte reads done.
    pub accesses: u64,
    /// Minor faults taken by the walk.
    pub faults: u64,
    /// Nanoseconds for the walk.
    pub ns: u64,
    /// Change of the process's `Anonymous` memory (`/proc/self/smaps_rollup`, an exact page-table
    /// walk) over the walk, in kB: ≈ 0, since zero pages are not counted (the child's own stack
    /// may add a page or two).
    pub anon_rss_delta_kb: i64,
}

/// [`run_forked`] of a `work` whose first word is an errno (0: it ran): its words, or the
/// error that `what` failed with that errno. The epilogue every measurement child shares,
/// and the harness of the workload bodies `usermm_workloads` runs on the host kernel.
///
/// # Safety
/// As [`run_forked`]: `work` must be async-signal-safe.
pub unsafe fn run_forked_checked<const N: usize, F: FnOnce() -> [u64; N]>(
    what: &'static str,
    work: F,
) -> Result<[u64; N], HostError> {
    // SAFETY: our caller keeps `run_forked`'s contract.
    let w = unsafe { run_forked(work)? };
    if w[0] != 0 {
        return Err(HostError::Sys {
            what,
            errno: w[0] as i32,
        });
    }
    Ok(w)
}

/// Fork a single-threaded child that runs `work` and returns its words.
///
/// # Safety
/// `work` runs in a child forked from a possibly multi-threaded process and must be
/// async-signal-safe: raw system calls, no allocation, no locks, no stdio, no panics.
pub(crate) unsafe fn run_forked<const N: usize, F: FnOnce() -> [u64; N]>(
    work: F,
) -> Result<[u64; N], HostError> {
    const { assert!(N <= MAX_WORDS) };
    let (r, w) = sys::pipe_owned().map_err(|errno| HostError::Sys {
        what: "pipe",
        errno,
    })?;
    let wfd = w.as_raw_fd();
    // SAFETY: the closure only closes fds, runs `work` (async-signal-safe by our caller's
    // contract), encodes into a stack array and writes it to a pipe before `_exit`.
    let mut proc = unsafe {
        ChildProc::fork(move || {
            let keep = wfd as u32;
            if keep > 3 {
                sys::close_range(3, keep - 1);
            }
            sys::close_range(keep + 1, u32::MAX);
            let out = work();
            let mut bytes = [0u8; MAX_WORDS * 8];
            for (i, v) in out.iter().enumerate() {
                bytes[8 * i..8 * i + 8].copy_from_slice(&v.to_ne_bytes());
            }
            let _ = sys::write(wfd, &bytes[..N * 8]);
            sys::exit_now(0)
        })?
    };
    drop(w);
    let deadline = Instant::now() + MEASURE_TIMEOUT;
    let mut bytes = [0u8; MAX_WORDS * 8];
    let mut have = 0;
    while have < N * 8 {
        proc.wait_fd(r.as_raw_fd(), libc::POLLIN, deadline)
            .map_err(HostError::Child)?;
        match sys::read(r.as_raw_fd(), &mut bytes[have..N * 8]) {
            Ok(0) => return Err(HostError::Child(proc.reap_after_eof())),
            Ok(n) => have += n,
            Err(libc::EINTR) => {}
            Err(errno) => {
                return Err(HostError::Sys {
                    what: "read from measurement child",
                    errno,
                })
            }
        }
    }
    let _ = proc.reap_after_eof();
    let mut out = [0u64; N];
    for (i, o) in out.iter_mut().enumerate() {
        let mut w8 = [0u8; 8];
        w8.copy_from_slice(&bytes[8 * i..8 * i + 8]);
        *o = u64::from_ne_bytes(w8);
    }
    Ok(out)
}

/// mmap a private anonymous range of `len` bytes; 2 MiB-aligned if `align`. Child-safe.
pub(crate) fn map_anon(len: u64, prot: i32, align: bool) -> Result<u64, i32> {
    let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE) as u64;
    let total = if align { len + HPAGE_SIZE } else { len };
    // SAFETY: a non-fixed mapping never replaces existing memory.
    let p = unsafe { sys::mmap(0, total, prot as u64, flags, u64::MAX, 0) }?;
    if !align {
        return Ok(p);
    }
    let start = p.next_multiple_of(HPAGE_SIZE);
    if start > p {
        // SAFETY: trims the head of the mapping just created, which nothing uses.
        let _ = unsafe { sys::munmap(p, start - p) };
    }
    let tail = p + total - (start + len);
    if tail > 0 {
        // SAFETY: trims the tail of the mapping just created, which nothing uses.
        let _ = unsafe { sys::munmap(start + len, tail) };
    }
    Ok(start)
}

pub(crate) fn madvise(p: u64, len: u64, advice: i32) {
    // SAFETY: advice on a mapping this child created; no Rust object lives there.
    let _ = unsafe { sys::madvise(p, len, advice as u64) };
}

pub(crate) fn munmap(p: u64, len: u64) {
    // SAFETY: unmaps a mapping this child created; no Rust object lives there.
    let _ = unsafe { sys::munmap(p, len) };
}

/// The prologue of a measurement child that walks a fresh mapping: [`map_anon`] `len` bytes
/// with `prot` (2 MiB-aligned when `thp`), advise it [`thp_advice`]`(thp)`, then `body(p)`'s
/// words; `[errno, 0, …]` if the mapping failed. Child-safe when `body` is.
fn in_fresh_mapping<const N: usize>(
    len: u64,
    prot: i32,
    thp: bool,
    body: impl FnOnce(u64) -> [u64; N],
) -> [u64; N] {
    match map_anon(len, prot, thp) {
        Ok(p) => {
            madvise(p, len, thp_advice(thp));
            body(p)
        }
        Err(e) => {
            let mut w = [0; N];
            w[0] = e as u64;
            w
        }
    }
}

/// A field of `/proc/self/smaps_rollup`, read into a stack buffer (child-safe).
pub(crate) fn rollup_kb(key: &[u8]) -> u64 {
    let mut buf = [0u8; 4096];
    match sys::read_small_file(c"/proc/self/smaps_rollup", &mut buf) {
        Ok(n) => procfs::field_kb(&buf[..n], key).unwrap_or(0),
        Err(_) => 0,
    }
}

fn check_size(size: u64) -> Result<u64, HostError> {
    match size.checked_next_multiple_of(PAGE_SIZE) {
        Some(len) if len > 0 && len <= 1 << 46 => Ok(len),
        _ => Err(HostError::Sys {
            what: "size check",
            errno: libc::EINVAL,
        }),
    }
}

/// mmap `size` bytes of private anonymous memory (`MADV_NOHUGEPAGE` unless `thp`, in which case
/// the range is 2 MiB-aligned and `MADV_HUGEPAGE`), write one byte per 4 KiB page, then time the
/// munmap.
pub fn host_touch_and_munmap(size: u64, thp: bool) -> Result<HostFreeResult, HostError> {
    let len = check_size(size)?;
    let work = move || {
        in_fresh_mapping(len, libc::PROT_READ | libc::PROT_WRITE, thp, |p| {
            let thp0 = rollup_kb(b"AnonHugePages:");
            let f0 = sys::minflt();
            let t0 = Instant::now();
            let mut off = 0;
            while off < len {
                // SAFETY: p..p+len is a private read-write mapping owned by this child alone.
                unsafe { std::ptr::write_volatile((p + off) as usize as *mut u8, 1) };
                off += PAGE_SIZE;
            }
            let populate = t0.elapsed().as_nanos() as u64;
            let faults = sys::minflt() - f0;
            let thp1 = rollup_kb(b"AnonHugePages:");
            let t1 = Instant::now();
            munmap(p, len);
            let unmap = t1.elapsed().as_nanos() as u64;
            [0, faults, populate, unmap, thp1.saturating_sub(thp0), 0]
        })
    };
    // SAFETY: `work` only issues raw system calls, volatile stores into its own fresh mapping,
    // reads the clock (vDSO) and reads a /proc file into a stack buffer.
    let w = unsafe { run_forked_checked("mmap in measurement child", work)? };
    Ok(HostFreeResult {
        size: len,
        thp,
        pages: len / PAGE_SIZE,
        faults: w[1],
        populate_ns: w[2],
        munmap_ns: w[3],
        anon_huge_kb: w[4],
    })
}

/// usemem `--readonly` on the host: mmap `size` bytes of private anonymous memory read-only
/// (2 MiB-aligned, `MADV_HUGEPAGE`), read one 8-byte word every `step` bytes, and report the
/// minor faults and the time of the walk. On untouched anonymous memory this is a pure zero-page
/// (or huge-zero-page) fault workload. (`usermm bench`'s read walks are the task body
/// `usermm_workloads::task::bodies::read_walk`; this one adds the rss check of `reproduce`'s
/// huge-zero row.)
pub fn host_usemem_readonly(size: u64, step: u64) -> Result<HostUsememResult, HostError> {
    let len = check_size(size)?;
    let step = step.max(8);
    let work = move || {
        in_fresh_mapping(len, libc::PROT_READ, true, |p| {
            let rss0 = rollup_kb(b"Anonymous:");
            let f0 = sys::minflt();
            let t0 = Instant::now();
            let mut sum = 0u64;
            let mut n = 0u64;
            let mut off = 0;
            while off + 8 <= len {
                // SAFETY: p..p+len is a readable private mapping owned by this child alone;
                // off + 8 <= len and off is 8-aligned when step is (usemem's words).
                let v = unsafe { std::ptr::read_volatile((p + off) as usize as *const u64) };
                sum = sum.wrapping_add(v);
                n += 1;
                off += step;
            }
            let ns = t0.elapsed().as_nanos() as u64;
            let faults = sys::minflt() - f0;
            let rss1 = rollup_kb(b"Anonymous:");
            std::hint::black_box(sum);
            munmap(p, len);
            [0, n, faults, ns, rss0, rss1]
        })
    };
    // SAFETY: `work` only issues raw system calls, volatile loads from its own fresh mapping,
    // reads the clock (vDSO) and reads a /proc file into a stack buffer.
    let w = unsafe { run_forked_checked("mmap in measurement child", work)? };
    Ok(HostUsememResult {
        size: len,
        step,
        accesses: w[1],
        faults: w[2],
        ns: w[3],
        anon_rss_delta_kb: w[5] as i64 - w[4] as i64,
    })
}

/// `MADV_HUGEPAGE` when THP is wanted, `MADV_NOHUGEPAGE` otherwise.
pub(crate) fn thp_advice(thp: bool) -> i32 {
    if thp {
        libc::MADV_HUGEPAGE
    } else {
        libc::MADV_NOHUGEPAGE
    }
}

/// How many more mappings this process may make under `vm.max_map_count`, counting its own
/// from `/proc/self/maps` (a child forked now starts with at most as many); `None` if either
/// cannot be read.
pub fn map_count_headroom() -> Option<u64> {
    let max = u64::from(crate::facts::max_map_count()?);
    let now = std::fs::read_to_string("/proc/self/maps")
        .ok()?
        .lines()
        .count() as u64;
    Some(max.saturating_sub(now))
}

/// Anonymous mappings at least this large are dropped by a child that times forks.
const SHED_MIN_BYTES: u64 = 1 << 20;
/// Bytes a fork-timing child reads `/proc/self/maps` into.
const MAPS_BUF: u64 = 512 << 10;
/// Pages of its own a fork-timing child has written before it forks: a small program's data.
pub const FORK_TOUCHED_PAGES: u64 = 16;

/// A hexadecimal number of `/proc/self/maps`.
fn parse_hex(s: &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for &c in s {
        let d = (c as char).to_digit(16)?;
        v = v.checked_mul(16)?.checked_add(u64::from(d))?;
    }
    (!s.is_empty()).then_some(v)
}

/// In a child that times forks: unmap every anonymous mapping of at least [`SHED_MIN_BYTES`]
/// (the brk heap included) but the one holding this stack — the calling process's emulated
/// RAM, struct pages and heap, inherited at the child's own fork — so that the forks it times
/// copy the page tables of a small process, as a small program's fork does. Child-safe: it
/// allocates nothing (its buffer is a mapping of its own, freed before it returns), and the
/// child, which never allocates, needs none of what it drops.
fn shed_big_mappings() {
    let Ok(buf) = map_anon(MAPS_BUF, libc::PROT_READ | libc::PROT_WRITE, false) else {
        return;
    };
    // SAFETY: buf..buf+MAPS_BUF is a fresh private read-write mapping of this child's, never
    // unmapped below (it is smaller than SHED_MIN_BYTES).
    let maps =
        unsafe { std::slice::from_raw_parts_mut(buf as usize as *mut u8, MAPS_BUF as usize) };
    let n = sys::read_small_file(c"/proc/self/maps", maps).unwrap_or(0);
    let here = std::ptr::from_ref(&n) as u64;
    for line in maps[..n].split(|&b| b == b'\n') {
        // start-end perms offset dev inode [path]
        let mut f = line.split(|&b| b == b' ').filter(|x| !x.is_empty());
        let range = f.next().unwrap_or_default();
        // Anonymous: no path, the brk heap, or a named anonymous mapping.
        let anon = f
            .nth(4)
            .is_none_or(|p| p == b"[heap]" || p.starts_with(b"[anon:"));
        let mut ends = range.splitn(2, |&b| b == b'-');
        let (Some(lo), Some(hi)) = (
            ends.next().and_then(parse_hex),
            ends.next().and_then(parse_hex),
        ) else {
            continue;
        };
        if anon && hi - lo >= SHED_MIN_BYTES && !(lo..hi).contains(&here) {
            munmap(lo, hi - lo);
        }
    }
    munmap(buf, MAPS_BUF);
}

/// Result of [`host_fork_exit`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostForkExit {
    pub count: u64,
    /// The forking child's CPU time over the loop (`CLOCK_THREAD_CPUTIME_ID`: the forks' and
    /// waits' kernel time), in ns.
    pub parent_cpu_ns: u64,
    /// The forked processes' CPU time (`RUSAGE_CHILDREN`: their `_exit`s and teardowns), ns.
    pub children_cpu_ns: u64,
    pub wall_ns: u64,
}

/// `count` times `fork()`, `_exit(0)` in the new process and `waitpid` for it, in a forked
/// child that first sheds the calling process's large mappings (`shed_big_mappings`) and
/// writes [`FORK_TOUCHED_PAGES`] pages of its own: the fork and exit of a small process.
pub fn host_fork_exit(count: u64) -> Result<HostForkExit, HostError> {
    let work = move || -> [u64; 4] {
        shed_big_mappings();
        let len = FORK_TOUCHED_PAGES * PAGE_SIZE;
        let p = match map_anon(len, libc::PROT_READ | libc::PROT_WRITE, false) {
            Ok(p) => p,
            Err(e) => return [e as u64, 0, 0, 0],
        };
        for off in (0..len).step_by(PAGE_SIZE as usize) {
            // SAFETY: p..p+len is a private read-write mapping owned by this child alone.
            unsafe { std::ptr::write_volatile((p + off) as usize as *mut u8, 1) };
        }
        let (c0, k0, t0) = (sys::thread_cpu_ns(), sys::children_cpu_ns(), Instant::now());
        for _ in 0..count {
            // SAFETY: the new process only calls `_exit`.
            match unsafe { sys::fork_raw() } {
                Ok(0) => sys::exit_now(0),
                Ok(pid) => drop(sys::waitpid(pid, false)),
                Err(e) => return [e as u64, 0, 0, 0],
            }
        }
        let wall = t0.elapsed().as_nanos() as u64;
        let (c1, k1) = (sys::thread_cpu_ns(), sys::children_cpu_ns());
        [0, c1 - c0, k1.saturating_sub(k0), wall]
    };
    // SAFETY: `work` only issues raw system calls (mmap, munmap, read of a /proc file into its
    // own mapping, fork, _exit, waitpid), stores into its own mapping and reads the clocks.
    let w = unsafe { run_forked_checked("fork in measurement child", work)? };
    Ok(HostForkExit {
        count,
        parent_cpu_ns: w[1],
        children_cpu_ns: w[2],
        wall_ns: w[3],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZE: u64 = 64 << 20;

    #[test]
    fn host_touch_and_munmap_small() {
        let r = host_touch_and_munmap(SIZE, false).unwrap();
        assert_eq!(r.pages, SIZE / PAGE_SIZE);
        // One fault per page without THP (a handful of extra faults from the child itself).
        assert!(r.faults >= r.pages && r.faults < r.pages + 64, "{r:?}");
        assert_eq!(r.anon_huge_kb, 0, "{r:?}");
        assert!(r.populate_ns > 0 && r.munmap_ns > 0);
        serde_json::to_string(&r).unwrap();

        let t = host_touch_and_munmap(SIZE, true).unwrap();
        assert!(
            t.faults >= SIZE / HPAGE_SIZE && t.faults <= t.pages + 64,
            "{t:?}"
        );
        if crate::facts::facts().thp_enabled != "never" && t.anon_huge_kb > 0 {
            // THP worked: far fewer faults than pages.
            assert!(t.faults < t.pages / 4, "{t:?}");
        }
    }

    #[test]
    fn host_usemem_readonly_small() {
        let r = host_usemem_readonly(SIZE, 4096).unwrap();
        assert_eq!(r.accesses, SIZE / 4096);
        assert!(
            r.faults >= SIZE / HPAGE_SIZE && r.faults <= r.accesses + 64,
            "{r:?}"
        );
        // Zero pages are not counted in Rss (a few kB of the child's own stack may be).
        assert!(r.anon_rss_delta_kb < 64, "{r:?}");
        let r8 = host_usemem_readonly(1 << 20, 0).unwrap();
        assert_eq!(r8.step, 8);
        assert_eq!(r8.accesses, (1 << 20) / 8);
    }

    #[test]
    fn host_measure_rejects_zero_size() {
        assert!(host_touch_and_munmap(0, false).is_err());
    }

    #[test]
    fn host_fork_exit_counts_its_forks() {
        let r = host_fork_exit(20).unwrap();
        assert_eq!(r.count, 20);
        assert!(r.parent_cpu_ns > 0 && r.wall_ns > 0, "{r:?}");
    }
}
