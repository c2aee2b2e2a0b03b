//! Workload bodies written once over [`Task`], each run on the engine and on the host kernel
//! from the same code: bench's paths ([`crate::bench`]: populate and munmap, the zero-page
//! and huge-zero read walks, one-page mmap and munmap, writes in a random order) and the host
//! check's scenarios ([`crate::host_check`]).
//!
//! On the engine a body gets a task alone ([`super::with_lone_task`]) on the wall clock or in
//! virtual time; on the host kernel a [`super::HostTask`] alone in a child forked for the
//! purpose ([`super::child`]), so that its faults and its clocks are its own. A body
//! therefore allocates nothing: its buffers are its caller's, its mappings are recorded in
//! room its task was given, and its figures are [`Stamp`]s taken by [`Task::now`] (CPU and
//! wall time on the host and the wall clock, virtual time in a virtual run).
//!
//! Each body maps what it uses itself and unmaps it before it returns; the mapping is
//! private anonymous memory (`MAP_NORESERVE`: nothing is charged to overcommit), 2 MiB-aligned,
//! with `MADV_HUGEPAGE` or `MADV_NOHUGEPAGE` ([`map_aligned`]), so that the page size each
//! fault takes is the body's choice, not the THP policy's or the alignment's.

use usermm::mm::mman::{
    MADV_DONTNEED, MADV_HUGEPAGE, MADV_NOHUGEPAGE, MAP_ANONYMOUS, MAP_NORESERVE, MAP_PRIVATE,
    PROT_READ, PROT_WRITE,
};

use super::{Beside, Errno, Stamp, Stop, Task};

/// A base page.
pub const PAGE: u64 = 4096;
/// A PMD-sized huge page: the alignment of every body's mapping.
pub const HPAGE: u64 = 2 << 20;
/// `EFAULT`: the errno a body's failed access is reported as where only a number fits.
const EFAULT: Errno = 14;

/// Why a body stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failed {
    /// A call failed with `errno`.
    Call { what: &'static str, errno: Errno },
    /// An access raised a signal.
    Access(Stop),
}

impl Failed {
    /// The errno of a failed call; `EFAULT` for an access.
    pub fn errno(&self) -> Errno {
        match self {
            Failed::Call { errno, .. } => *errno,
            Failed::Access(_) => EFAULT,
        }
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Call { what, errno } => write!(f, "{what}: errno {errno}"),
            Failed::Access(stop) => write!(f, "an access was {stop}"),
        }
    }
}

impl From<Stop> for Failed {
    fn from(s: Stop) -> Self {
        Failed::Access(s)
    }
}

fn call<T>(what: &'static str, r: Result<T, Errno>) -> Result<T, Failed> {
    r.map_err(|errno| Failed::Call { what, errno })
}

/// `MADV_HUGEPAGE` when `thp`, `MADV_NOHUGEPAGE` otherwise.
pub fn thp_advice(thp: bool) -> i32 {
    if thp {
        MADV_HUGEPAGE
    } else {
        MADV_NOHUGEPAGE
    }
}

/// Map `len` bytes of private anonymous memory with `prot`, 2 MiB-aligned (`len` more than a
/// huge page mapped, the head and tail around the aligned range unmapped), advised with
/// [`thp_advice`]: the start.
pub fn map_aligned<T: Task + ?Sized>(t: &T, len: u64, prot: u32, thp: bool) -> Result<u64, Failed> {
    let flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    let raw = call("mmap", t.mmap(len + HPAGE, prot, flags, None))?;
    let start = raw.next_multiple_of(HPAGE);
    if start > raw {
        call("munmap", t.munmap(raw, start - raw))?;
    }
    let tail = raw + len + HPAGE - (start + len);
    if tail > 0 {
        call("munmap", t.munmap(start + len, tail))?;
    }
    call("madvise", t.madvise(start, len, thp_advice(thp)))?;
    Ok(start)
}

/// [`populate_and_munmap`]'s two steps' times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Populated {
    /// One write per 4 KiB page of the mapping (each page's fault, or a THP fault per 2 MiB).
    pub populate: Stamp,
    /// The munmap of the whole mapping.
    pub munmap: Stamp,
}

/// `populate-4k`, `populate-thp`, `munmap-4k`: a fresh read-write mapping of `len` bytes, one
/// 8-byte write per 4 KiB page, then its munmap, each step timed.
pub fn populate_and_munmap<T: Task + ?Sized>(
    t: &T,
    len: u64,
    thp: bool,
) -> Result<Populated, Failed> {
    let a = map_aligned(t, len, PROT_READ | PROT_WRITE, thp)?;
    let t0 = t.now();
    t.touch(a, len, PAGE, true)?;
    let t1 = t.now();
    call("munmap", t.munmap(a, len))?;
    let t2 = t.now();
    Ok(Populated {
        populate: t1.since(t0),
        munmap: t2.since(t1),
    })
}

/// A timed walk: how many words it read, in what time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walked {
    pub accesses: u64,
    pub time: Stamp,
}

/// `huge-zero-read`, `zero-read-4k`, the host check's huge-zero readers: a fresh read-only
/// mapping of `len` bytes, one 8-byte read every `step` bytes (each a read fault of the huge
/// zero page when `thp` and `step` is 2 MiB, of the 4 KiB zero page when not), timed; then
/// its munmap, untimed. `ready` runs between the mapping and the walk's clock (where readers
/// that start together wait for each other).
pub fn read_walk<T: Task + ?Sized>(
    t: &T,
    len: u64,
    step: u64,
    thp: bool,
    ready: impl FnOnce(),
) -> Result<Walked, Failed> {
    let a = map_aligned(t, len, PROT_READ, thp)?;
    ready();
    let t0 = t.now();
    let accesses = t.touch(a, len, step, false)?;
    let time = t.now().since(t0);
    call("munmap", t.munmap(a, len))?;
    Ok(Walked { accesses, time })
}

/// `mmap-munmap-4k`: `addrs.len()` one-page private read-write mappings of `/dev/zero` (each
/// at offset 0, so no two merge and the mm holds them all as VMAs at the peak), one `mmap`
/// each, their starts kept in `addrs`; then a `munmap` of each in the order made. Nothing is
/// touched. The time of the whole.
pub fn mmap_munmap_pages<T: Task + ?Sized>(t: &T, addrs: &mut [u64]) -> Result<Stamp, Failed> {
    let zero = call("open /dev/zero", t.dev_zero())?;
    let prot = PROT_READ | PROT_WRITE;
    let t0 = t.now();
    for a in addrs.iter_mut() {
        *a = call("mmap", t.mmap(PAGE, prot, MAP_PRIVATE, Some(&zero)))?;
    }
    for &a in addrs.iter() {
        call("munmap", t.munmap(a, PAGE))?;
    }
    Ok(t.now().since(t0))
}

/// Writes [`random_writes`] hands the task at a time ([`Task::write_each`]).
const WRITE_RUN: usize = 64;

/// `random-write-4k`: a fresh `MADV_NOHUGEPAGE` read-write mapping of `order.len()` pages, one
/// 8-byte write to page `order[i]` for each `i` in turn (every page once when `order` is a
/// permutation: one 4 KiB write fault each), timed; then its munmap, untimed. An entry of
/// `order` past the mapping is refused (`EINVAL`) before anything is mapped.
pub fn random_writes<T: Task + ?Sized>(t: &T, order: &[u32]) -> Result<Stamp, Failed> {
    let pages = order.len() as u64;
    if pages == 0 || order.iter().any(|&i| u64::from(i) >= pages) {
        return Err(Failed::Call {
            what: "random write order",
            errno: 22,
        });
    }
    let len = pages * PAGE;
    let a = map_aligned(t, len, PROT_READ | PROT_WRITE, false)?;
    let mut run = [0u64; WRITE_RUN];
    let t0 = t.now();
    for chunk in order.chunks(WRITE_RUN) {
        for (r, &i) in run.iter_mut().zip(chunk) {
            *r = a + u64::from(i) * PAGE;
        }
        t.write_each(&run[..chunk.len()], 1)?;
    }
    let time = t.now().since(t0);
    call("munmap", t.munmap(a, len))?;
    Ok(time)
}

/// [`dontneed_split`]'s two times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DontneedSplit {
    /// One thread's `MADV_DONTNEED` of the whole mapping.
    pub one: Stamp,
    /// Two threads' `MADV_DONTNEED` of a half each, at once: from the start to the last end.
    pub two: Stamp,
}

/// The host check's row (a): a fresh `MADV_NOHUGEPAGE` read-write mapping of `bytes` (where
/// mmap places it), one write per 4 KiB page, freed by `MADV_DONTNEED` of the whole by this
/// thread, timed; written again, then freed by two threads of this process at once, each
/// `MADV_DONTNEED` of one half — the first half here, the second on a thread beside this one
/// on CPU `other` ([`Beside::beside`]) — timed from the start to the last one's end; then
/// unmapped.
pub fn dontneed_split<T: Beside>(t: &T, bytes: u64, other: usize) -> Result<DontneedSplit, Failed> {
    let bytes = bytes.next_multiple_of(2 * PAGE);
    let flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    let a = call("mmap", t.mmap(bytes, PROT_READ | PROT_WRITE, flags, None))?;
    call("madvise", t.madvise(a, bytes, MADV_NOHUGEPAGE))?;
    t.touch(a, bytes, PAGE, true)?;
    let t0 = t.now();
    call("madvise", t.madvise(a, bytes, MADV_DONTNEED))?;
    let one = t.now().since(t0);
    t.touch(a, bytes, PAGE, true)?;
    let half = bytes / 2;
    let theirs = |s: &T| s.madvise(a + half, half, MADV_DONTNEED);
    let mine = || (t.now(), t.madvise(a, half, MADV_DONTNEED));
    let ((t0, mine), theirs) = t.beside(other, theirs, mine);
    let two = t.now().since(t0);
    call("madvise", mine)?;
    call("madvise (the other thread)", theirs?)?;
    call("munmap", t.munmap(a, bytes))?;
    Ok(DontneedSplit { one, two })
}
