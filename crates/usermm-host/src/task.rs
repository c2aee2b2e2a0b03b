//! The host kernel as one task of an address-space workload sees it (will-it-scale's tests,
//! and whatever else moves onto `usermm_workloads::task`): mappings, the program break,
//! glibc's `malloc`, a temporary file, byte and word accesses — and the few things that start
//! such tasks as processes or threads and count what they did: a counter area shared across
//! `fork` ([`Slots`]), CPU binding ([`bind_to_cpus`]) and the host's cores ([`host_cores`]).
//!
//! # Contracts
//! - **Accesses touch only memory this task made.** A [`Space`] records every mapping its
//!   [`Space::mmap`] returned and every block its [`Space::malloc`] returned; an access outside
//!   them is refused with [`Unmapped`] (the caller dies of SIGSEGV as the C program would).
//!   Inside a recorded range the kernel decides: a write to a read-only page kills the process.
//! - **The break moves only above where it was.** [`Space::brk`] and [`Space::sbrk`] refuse a
//!   break below the one the space found when it was made (its *floor*): memory below belongs
//!   to glibc's heap and the Rust objects in it. Above the floor nothing of Rust lives — as
//!   long as no thread of this process grows glibc's main heap while a brk test runs (the
//!   runner's sampler does not allocate; test threads allocate from their own arenas).
//! - **A sibling sees, never unmaps.** A second thread of the task's process gets
//!   [`Space::sibling`]: it reaches the owner's mappings as they were when it was made, and
//!   while it lives the owner unmaps nothing (`EBUSY`), so that what it reaches stays mapped.
//!   A forked child may use a space made before the fork ([`Space::with_capacity`]).
//! - A space unmaps and frees what is left of its mappings and blocks when dropped, and puts
//!   the break back to its floor if it moved it, so that a thread that stopped mid-iteration
//!   leaves this process as it found it.
//! - Errors are errno values.

#![expect(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::sys;

/// An access outside every mapping and block of this [`Space`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unmapped;

/// A temporary file (`mkstemp` in `/tmp`, `ftruncate` to its size, `unlink`): open, nameless,
/// closed when dropped.
#[derive(Debug)]
pub struct TmpFile {
    fd: OwnedFd,
    pub size: u64,
}

impl TmpFile {
    /// `mkstemp("/tmp/willitscale.XXXXXX")`, `ftruncate(fd, size)`, `unlink`.
    pub fn new(size: u64) -> Result<TmpFile, i32> {
        let mut template = *b"/tmp/willitscale.XXXXXX\0";
        // SAFETY: `template` is a writable NUL-terminated buffer ending in six X's.
        let fd = unsafe { libc::mkstemp(template.as_mut_ptr().cast()) };
        if fd < 0 {
            return Err(sys::errno());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: unlinking the path we just created; the open file stays.
        unsafe { libc::unlink(template.as_ptr().cast()) };
        // SAFETY: ftruncate on our own descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size.min(i64::MAX as u64) as libc::off_t) } != 0
        {
            return Err(sys::errno());
        }
        Ok(TmpFile { fd, size })
    }

    /// `open("/dev/zero", O_RDWR)`: a file whose private mappings are anonymous memory, each
    /// at offset 0 a VMA of its own (no two merge). Its size is 0 (the device has none).
    /// Allocation-free, so a forked child may call it.
    pub fn dev_zero() -> Result<TmpFile, i32> {
        let fd = sys::open(c"/dev/zero", libc::O_RDWR)?;
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(TmpFile { fd, size: 0 })
    }
}

/// One task's mappings, blocks and break (not `Sync`: a task is one thread).
///
/// A space made by [`Space::with_capacity`] allocates nothing while it holds at most that
/// many mappings (a `munmap` that splits one counts as one more), so that a child forked from
/// a multi-threaded process may use a space its parent made (the parent's copy stays empty).
/// The mappings are kept in the order made, and a `munmap` of exactly the oldest or the
/// newest is found at once: a program that unmaps in the order it mapped, or the reverse,
/// pays no search.
#[derive(Debug)]
pub struct Space {
    /// `(start, len)` of every live mapping made here, oldest first.
    maps: RefCell<VecDeque<(u64, u64)>>,
    /// The mappings of the space this one is a sibling of ([`Space::sibling`]): accessed and
    /// advised here, never unmapped.
    borrowed: Vec<(u64, u64)>,
    /// How many siblings see this space's mappings now (its owner's count when it is one):
    /// while any does, the owner unmaps nothing (`EBUSY`).
    lent: Arc<AtomicUsize>,
    /// This space is a sibling ([`Space::sibling`]).
    is_sibling: bool,
    /// `(address, len)` of every live `malloc` block.
    blocks: RefCell<Vec<(u64, u64)>>,
    /// The break when the space was made; `brk` never goes below it.
    floor: u64,
    moved_brk: Cell<bool>,
}

impl Default for Space {
    fn default() -> Self {
        Space::new()
    }
}

impl Space {
    pub fn new() -> Space {
        Space::with_capacity(0)
    }

    /// A space with room for `maps` mappings before it allocates (see the type's doc).
    pub fn with_capacity(maps: usize) -> Space {
        // SAFETY: sbrk(0) only reads the break.
        let floor = unsafe { libc::sbrk(0) } as u64;
        Space {
            maps: RefCell::new(VecDeque::with_capacity(maps)),
            borrowed: Vec::new(),
            lent: Arc::new(AtomicUsize::new(0)),
            is_sibling: false,
            blocks: RefCell::new(Vec::new()),
            floor,
            moved_brk: Cell::new(false),
        }
    }

    /// A space for another thread of this process: it sees this space's mappings as they
    /// are now — its accesses, `madvise` and `mprotect` may reach them — but owns none of
    /// them: it never unmaps them, and while it lives this space unmaps nothing either
    /// (`EBUSY`), so that what it sees stays mapped. Its own mappings, break and blocks start
    /// empty, as a new thread's.
    pub fn sibling(&self) -> Space {
        let mut borrowed: Vec<(u64, u64)> = self.maps.borrow().iter().copied().collect();
        borrowed.extend(self.borrowed.iter().copied());
        self.lent.fetch_add(1, Relaxed);
        let mut sib = Space::new();
        sib.borrowed = borrowed;
        sib.lent = Arc::clone(&self.lent);
        sib.is_sibling = true;
        sib
    }

    fn covers(&self, start: u64, end: u64) -> bool {
        let inside = |&(s, l): &(u64, u64)| s <= start && end <= s.saturating_add(l);
        self.maps.borrow().iter().any(inside)
            || self.blocks.borrow().iter().any(inside)
            || self.borrowed.iter().any(inside)
    }

    /// `mmap(NULL, len, prot, flags, fd or -1, 0)` (`MAP_FIXED` is refused: nothing existing
    /// may be replaced).
    pub fn mmap(
        &self,
        len: u64,
        prot: u32,
        flags: u32,
        file: Option<&TmpFile>,
    ) -> Result<u64, i32> {
        if flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE) as u32 != 0 {
            return Err(libc::EINVAL);
        }
        let fd = file.map_or(u64::MAX, |f| f.fd.as_raw_fd() as u64);
        // SAFETY: no MAP_FIXED: the kernel picks a free range, nothing existing is touched.
        let a = unsafe { sys::mmap(0, len, u64::from(prot), u64::from(flags), fd, 0) }?;
        self.maps.borrow_mut().push_back((a, len));
        Ok(a)
    }

    /// `munmap(addr, len)` of (part of) a mapping made here; anything else is `EINVAL`.
    /// Allocation-free within the space's capacity (see the type's doc).
    pub fn munmap(&self, addr: u64, len: u64) -> Result<(), i32> {
        let end = addr.saturating_add(len);
        let mine = |&(s, l): &(u64, u64)| s <= addr && end <= s + l;
        if !self.maps.borrow().iter().any(mine) {
            return Err(libc::EINVAL);
        }
        if !self.is_sibling && self.lent.load(Acquire) > 0 {
            return Err(libc::EBUSY);
        }
        // SAFETY: the range lies in one of this space's mappings: it holds no Rust object.
        unsafe { sys::munmap(addr, len) }?;
        let mut maps = self.maps.borrow_mut();
        if maps.front() == Some(&(addr, len)) {
            maps.pop_front();
            return Ok(());
        }
        if maps.back() == Some(&(addr, len)) {
            maps.pop_back();
            return Ok(());
        }
        let mut i = 0;
        while i < maps.len() {
            let (s, l) = maps[i];
            let e = s + l;
            if e <= addr || s >= end {
                i += 1;
                continue;
            }
            match (s < addr, e > end) {
                (true, true) => {
                    maps[i] = (s, addr - s);
                    // Outside the hole: the loop passes over it.
                    maps.push_back((end, e - end));
                }
                (true, false) => maps[i] = (s, addr - s),
                (false, true) => maps[i] = (end, e - end),
                (false, false) => {
                    let _ = maps.remove(i);
                    continue;
                }
            }
            i += 1;
        }
        Ok(())
    }

    /// The range check of the calls that take an address: outside this space, `ENOMEM` (the
    /// kernel's answer for an unmapped range).
    fn ours(&self, addr: u64, len: u64) -> Result<(), i32> {
        let end = addr.saturating_add(len);
        let inside = |&(s, l): &(u64, u64)| s <= addr && end <= s + l;
        let maps = self.maps.borrow();
        // The newest and the oldest first (see the type's doc).
        if maps.back().is_some_and(inside)
            || maps.iter().any(inside)
            || self.borrowed.iter().any(inside)
        {
            Ok(())
        } else {
            Err(libc::ENOMEM)
        }
    }

    pub fn mprotect(&self, addr: u64, len: u64, prot: u32) -> Result<(), i32> {
        self.ours(addr, len)?;
        // SAFETY: the range is one of this space's mappings.
        unsafe { sys::mprotect(addr, len, u64::from(prot)) }.map(drop)
    }

    pub fn madvise(&self, addr: u64, len: u64, advice: i32) -> Result<(), i32> {
        self.ours(addr, len)?;
        // SAFETY: the range is one of this space's mappings.
        unsafe { sys::madvise(addr, len, advice as i64 as u64) }.map(drop)
    }

    /// glibc's `brk(addr)`: 0, or `ENOMEM` when the kernel kept the old break. Below the
    /// space's floor: `EINVAL` (see the module's contracts).
    pub fn brk(&self, addr: u64) -> Result<(), i32> {
        if addr < self.floor {
            return Err(libc::EINVAL);
        }
        self.moved_brk.set(true);
        // SAFETY: the break moves within [floor, ...), where no Rust object lives.
        if unsafe { libc::brk(addr as *mut libc::c_void) } == 0 {
            Ok(())
        } else {
            Err(sys::errno())
        }
    }

    /// glibc's `sbrk(incr)`: the old break (`ENOMEM` when refused, `EINVAL` below the floor).
    pub fn sbrk(&self, incr: i64) -> Result<u64, i32> {
        // SAFETY: sbrk(0) only reads the break.
        let cur = unsafe { libc::sbrk(0) } as u64;
        if cur.checked_add_signed(incr).is_none_or(|b| b < self.floor) {
            return Err(libc::EINVAL);
        }
        if incr != 0 {
            self.moved_brk.set(true);
        }
        // SAFETY: as in `brk`: the new break is at or above the floor.
        let old = unsafe { libc::sbrk(incr as libc::intptr_t) } as i64;
        if old == -1 {
            Err(sys::errno())
        } else {
            Ok(old as u64)
        }
    }

    /// glibc's `malloc(len)`; `ENOMEM` when it returns NULL.
    pub fn malloc(&self, len: u64) -> Result<u64, i32> {
        // SAFETY: malloc has no preconditions; the block is ours until `free`.
        let p = unsafe { libc::malloc(len as usize) } as u64;
        if p == 0 {
            return Err(libc::ENOMEM);
        }
        self.blocks.borrow_mut().push((p, len));
        Ok(p)
    }

    /// `free(addr)` of a block from [`Space::malloc`] (anything else is left alone).
    pub fn free(&self, addr: u64) {
        let mut blocks = self.blocks.borrow_mut();
        if let Some(i) = blocks.iter().position(|&(s, _)| s == addr) {
            blocks.swap_remove(i);
            // SAFETY: `addr` came from malloc and has not been freed (it was still recorded).
            unsafe { libc::free(addr as *mut libc::c_void) };
        }
    }

    /// This space's VMAs and their `Rss:` in kB, from `/proc/self/smaps`: those inside its
    /// mappings, and the break's above its floor. Its own figures, which no other thread of
    /// the process moves (the zero page is not in `Rss:`, as in the kernel's rss counters).
    pub fn vmas_and_rss_kb(&self) -> (u64, u64) {
        /// How far above the floor a VMA counts as this space's break's.
        const BRK_REACH: u64 = 1 << 30;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
        let maps = self.maps.borrow();
        let (mut ours, mut vmas, mut kb) = (false, 0, 0);
        for line in smaps.lines() {
            let head = line.split_whitespace().next().unwrap_or("");
            if let Some((a, _)) = head.split_once('-').filter(|_| !head.ends_with(':')) {
                let a = u64::from_str_radix(a, 16).unwrap_or(0);
                ours = maps.iter().any(|&(s, l)| s <= a && a < s + l)
                    || (self.floor <= a && a < self.floor + BRK_REACH);
                vmas += u64::from(ours);
            } else if ours && head == "Rss:" {
                kb += line[4..]
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .unwrap_or(0);
            }
        }
        (vmas, kb)
    }

    /// One byte stored at `addr` (`c[i] = v`).
    pub fn write_u8(&self, addr: u64, v: u8) -> Result<(), Unmapped> {
        if !self.covers(addr, addr.saturating_add(1)) {
            return Err(Unmapped);
        }
        // SAFETY: the byte is inside a mapping or block of this space (checked above).
        unsafe { (addr as *mut u8).write_volatile(v) };
        Ok(())
    }

    /// One byte loaded from `addr`.
    pub fn read_u8(&self, addr: u64) -> Result<u8, Unmapped> {
        if !self.covers(addr, addr.saturating_add(1)) {
            return Err(Unmapped);
        }
        // SAFETY: as in `write_u8`.
        Ok(unsafe { (addr as *const u8).read_volatile() })
    }

    /// One 8-byte word stored at `addr`.
    pub fn write_u64(&self, addr: u64, v: u64) -> Result<(), Unmapped> {
        if !addr.is_multiple_of(8) || !self.covers(addr, addr.saturating_add(8)) {
            return Err(Unmapped);
        }
        // SAFETY: the aligned word is inside a mapping or block of this space.
        unsafe { (addr as *mut u64).write_volatile(v) };
        Ok(())
    }

    /// One 8-byte word loaded from `addr`.
    pub fn read_u64(&self, addr: u64) -> Result<u64, Unmapped> {
        if !addr.is_multiple_of(8) || !self.covers(addr, addr.saturating_add(8)) {
            return Err(Unmapped);
        }
        // SAFETY: as in `write_u64`.
        Ok(unsafe { (addr as *const u64).read_volatile() })
    }
}

impl Drop for Space {
    fn drop(&mut self) {
        if self.is_sibling {
            self.lent.fetch_sub(1, Release);
        }
        for (s, l) in self.maps.take() {
            // SAFETY: a mapping this space made: no Rust object lives in it.
            let _ = unsafe { sys::munmap(s, l) };
        }
        for (p, _) in self.blocks.take() {
            // SAFETY: a block from malloc, not freed yet.
            unsafe { libc::free(p as *mut libc::c_void) };
        }
        if self.moved_brk.get() {
            // SAFETY: back to the break this space found: what lies above was its own.
            unsafe { libc::brk(self.floor as *mut libc::c_void) };
        }
    }
}

/// will-it-scale's `MAX_CACHELINE_SIZE`: each task's counter sits alone in this many bytes.
pub const SLOT_BYTES: u64 = 256;

/// Counters that survive `fork`: one per task, each in its own [`SLOT_BYTES`], and a stop word
/// after them, in one `MAP_SHARED | MAP_ANONYMOUS` mapping (main.c shares a file mapping of
/// `/tmp`; anonymous shared memory is the same to the tasks and leaves no file behind).
#[derive(Debug)]
pub struct Slots {
    base: u64,
    n: usize,
}

// SAFETY: the mapping is only reached through atomics, and it lives as long as the value.
unsafe impl Send for Slots {}
// SAFETY: as above.
unsafe impl Sync for Slots {}

impl Slots {
    pub fn new(n: usize) -> Result<Slots, i32> {
        let len = (n as u64 + 1) * SLOT_BYTES;
        let flags = (libc::MAP_SHARED | libc::MAP_ANONYMOUS) as u64;
        let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        // SAFETY: no MAP_FIXED: a fresh range that nothing else uses.
        let base = unsafe { sys::mmap(0, len, prot, flags, u64::MAX, 0) }?;
        Ok(Slots { base, n })
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        let i = i.min(self.n);
        // SAFETY: slot `i` (or the stop word at `n`) lies inside the live, zero-filled,
        // 8-aligned mapping; AtomicU64 has the layout of u64 and every bit pattern is valid.
        unsafe { &*((self.base + i as u64 * SLOT_BYTES) as *const AtomicU64) }
    }

    /// Add `k` to task `i`'s counter.
    #[inline]
    pub fn add(&self, i: usize, k: u64) {
        let w = self.word(i);
        w.store(w.load(Relaxed).wrapping_add(k), Relaxed);
    }

    /// Task `i`'s counter.
    pub fn get(&self, i: usize) -> u64 {
        self.word(i).load(Relaxed)
    }

    /// Tell every task to stop.
    pub fn stop(&self) {
        self.word(self.n).store(1, Relaxed);
    }

    #[inline]
    pub fn stopped(&self) -> bool {
        self.word(self.n).load(Relaxed) != 0
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        // SAFETY: our own mapping; the atomics borrowed from it do not outlive `self`.
        let _ = unsafe { sys::munmap(self.base, (self.n as u64 + 1) * SLOT_BYTES) };
    }
}

/// Bind the calling thread to `cpus` (`sched_setaffinity(0, ...)`, as hwloc's
/// `hwloc_set_cpubind` does for a cpuset).
pub fn bind_to_cpus(cpus: &[usize]) -> Result<(), i32> {
    // SAFETY: cpu_set_t is plain old data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
        // SAFETY: the index is below CPU_SETSIZE, the set's size.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(sys::errno())
    }
}

/// The online CPUs grouped by core, in hwloc's logical order: cores by package, then by their
/// first CPU; a core's CPUs ascending (`topology/physical_package_id`,
/// `topology/thread_siblings_list`). A CPU whose topology is unreadable is a core of its own.
pub fn host_cores() -> Vec<Vec<usize>> {
    let read = |p: String| std::fs::read_to_string(p).ok();
    let online = read("/sys/devices/system/cpu/online".into())
        .map(|s| crate::calibrate::parse_cpu_list(&s))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| (0..crate::usemem::cpus_online() as usize).collect());
    let mut cores: Vec<(u64, Vec<usize>)> = Vec::new();
    for &c in &online {
        let topo = format!("/sys/devices/system/cpu/cpu{c}/topology");
        let pkg = read(format!("{topo}/physical_package_id"))
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        let mut sib: Vec<usize> = read(format!("{topo}/thread_siblings_list"))
            .map(|s| crate::calibrate::parse_cpu_list(&s))
            .unwrap_or_default()
            .into_iter()
            .filter(|s| online.contains(s))
            .collect();
        if !sib.contains(&c) {
            sib = vec![c];
        }
        sib.sort_unstable();
        if !cores.iter().any(|(_, v)| *v == sib) {
            cores.push((pkg, sib));
        }
    }
    cores.sort_by_key(|(pkg, v)| (*pkg, v[0]));
    cores.into_iter().map(|(_, v)| v).collect()
}

/// The calling thread's CPU time (user and system), ns: what a task spent of the wall time it
/// ran for (allocation-free, so a forked child may call it).
pub fn thread_cpu_ns() -> u64 {
    sys::thread_cpu_ns()
}

/// `CLOCK_MONOTONIC` in ns (the clock `std::time::Instant` reads), allocation-free.
pub fn monotonic_ns() -> u64 {
    sys::monotonic_ns()
}

/// The calling thread's minor faults so far (`getrusage(RUSAGE_THREAD).ru_minflt`).
pub fn thread_minor_faults() -> u64 {
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage; on failure it stays zeroed.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    ru.ru_minflt.max(0) as u64
}

/// `/proc/vmstat`'s counters named `keys`, in order (0 for one it does not have).
pub fn vmstat(keys: &[&str]) -> Vec<u64> {
    let s = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
    keys.iter()
        .map(|k| {
            s.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix(' ')?.trim().parse().ok())
                .unwrap_or(0)
        })
        .collect()
}

/// The program break now (`sbrk(0)`).
pub fn current_brk() -> u64 {
    // SAFETY: sbrk(0) only reads the break.
    unsafe { libc::sbrk(0) as u64 }
}

#[cfg(test)]
mod test {
    use super::*;

    const PAGE: u64 = 4096;
    const RW: u32 = (libc::PROT_READ | libc::PROT_WRITE) as u32;
    const ANON: u32 = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u32;

    /// A munmap of part of a mapping keeps the rest; a hole splits it in two; the records of a
    /// space made with room never grow (what a forked child relies on), and what was unmapped
    /// can no longer be touched or unmapped again.
    #[test]
    fn munmap_splits_and_trims_within_the_room_given() {
        let s = Space::with_capacity(4);
        let room = s.maps.borrow().capacity();
        let a = s.mmap(8 * PAGE, RW, ANON, None).unwrap();
        let b = s.mmap(PAGE, RW, ANON, None).unwrap();
        s.munmap(a + 2 * PAGE, 2 * PAGE).unwrap();
        assert_eq!(s.write_u8(a + 2 * PAGE, 1), Err(Unmapped));
        s.write_u8(a + PAGE, 1).unwrap();
        s.write_u8(a + 4 * PAGE, 1).unwrap();
        s.munmap(a, PAGE).unwrap();
        s.munmap(a + 7 * PAGE, PAGE).unwrap();
        let mut left: Vec<_> = s.maps.borrow().iter().copied().collect();
        left.sort_unstable();
        let mut want = vec![(a + PAGE, PAGE), (a + 4 * PAGE, 3 * PAGE), (b, PAGE)];
        want.sort_unstable();
        assert_eq!(left, want);
        assert_eq!(s.maps.borrow().capacity(), room);
        // The newest and the oldest at once, and a range no longer ours.
        s.munmap(b, PAGE).unwrap();
        assert_eq!(s.munmap(a, PAGE), Err(libc::EINVAL));
        assert_eq!(s.madvise(a + 2 * PAGE, PAGE, 0), Err(libc::ENOMEM));
        s.munmap(a + PAGE, PAGE).unwrap();
        s.munmap(a + 4 * PAGE, 3 * PAGE).unwrap();
        assert!(s.maps.borrow().is_empty());
    }

    /// A sibling reaches its owner's mappings but cannot unmap them, and while it lives its
    /// owner cannot either; its own mappings are its own.
    #[test]
    fn a_sibling_sees_its_owners_mappings_and_keeps_them_mapped() {
        let s = Space::new();
        let a = s.mmap(2 * PAGE, RW, ANON, None).unwrap();
        let sib = s.sibling();
        sib.write_u64(a + PAGE, 7).unwrap();
        assert_eq!(s.read_u64(a + PAGE), Ok(7));
        sib.madvise(a, 2 * PAGE, libc::MADV_DONTNEED).unwrap();
        assert_eq!(s.read_u64(a + PAGE), Ok(0));
        assert_eq!(sib.munmap(a, PAGE), Err(libc::EINVAL));
        assert_eq!(s.munmap(a, PAGE), Err(libc::EBUSY));
        let b = sib.mmap(PAGE, RW, ANON, None).unwrap();
        sib.munmap(b, PAGE).unwrap();
        drop(sib);
        s.munmap(a, 2 * PAGE).unwrap();
    }
}
