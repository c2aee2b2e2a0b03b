//! The host kernel's side of "the model checked on this host": one small scenario, measured
//! on the real kernel, that the engine predicts in virtual time with the `this-host` profile
//! (`usermm_workloads::host_check` holds the predictions and the comparison).
//!
//! - [`faults_during_munmap`]: a thread write-faulting pages of its own VMA, then dropping them
//!   with `MADV_DONTNEED`, over and over, while another thread munmaps a big populated mapping
//!   of the same process — the fault latencies (p50, p99) of the accesses that overlap the
//!   munmap. On 6.18 the faulter takes its VMA's lock, not mmap_lock.
//!
//! Rows (a) and (c), the `MADV_DONTNEED` split and the huge-zero readers, are one body each
//! over `usermm_workloads`'s task trait for the engine and the host alike
//! (`usermm_workloads::host_check::{dontneed, readers}`).
//!
//! Mappings are made, advised and unmapped with [`crate::measure`]'s helpers; the only
//! `unsafe` here is the touch of a region's own pages. Unlike [`crate::measure`], it runs
//! threads of *this* process (the point is two threads of one mm); they map only memory of
//! their own and touch nothing else. Times are wall
//! clock (`CLOCK_MONOTONIC` through `Instant`): a speed-up and a latency are wall-time figures.
//! Nothing here asserts a time.

#![expect(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Barrier;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::HostError;
use crate::measure;
use crate::ops::PAGE_SIZE;

/// A private anonymous 4 KiB-page mapping of this process, unmapped on drop.
struct Region {
    addr: u64,
    len: u64,
}

impl Region {
    fn new(len: u64) -> Result<Region, HostError> {
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let addr = measure::map_anon(len, rw, false).map_err(|errno| HostError::Sys {
            what: "mmap",
            errno,
        })?;
        measure::madvise(addr, len, libc::MADV_NOHUGEPAGE);
        Ok(Region { addr, len })
    }

    /// Writes one byte in every 4 KiB page of `[off, off + len)`.
    fn touch(&self, off: u64, len: u64) {
        let mut a = self.addr + off;
        while a < self.addr + off + len {
            // SAFETY: inside this region, a private read-write mapping of this process that
            // no Rust object lives in.
            unsafe { std::ptr::write_volatile(a as usize as *mut u8, 1) };
            a += PAGE_SIZE;
        }
    }

    fn dontneed(&self, off: u64, len: u64) {
        measure::madvise(self.addr + off, len, libc::MADV_DONTNEED);
    }

    /// Unmaps the region now (the caller times it); the drop then has nothing left to do.
    fn unmap(&mut self) {
        if self.len > 0 {
            measure::munmap(self.addr, self.len);
            self.len = 0;
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        self.unmap();
    }
}

/// Faults that must overlap the munmaps for a quantile to mean something.
pub const MIN_DURING: usize = 100;
/// Extra rounds [`faults_during_munmap`] may add to reach [`MIN_DURING`].
pub const MAX_EXTRA_ROUNDS: u32 = 8;

/// [`faults_during_munmap`]'s figures.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct FaultsDuringMunmap {
    pub munmap_bytes: u64,
    pub faulter_bytes: u64,
    /// Wall time of each munmap, ns.
    pub munmap_ns: Vec<u64>,
    /// Every write access of the faulter that overlapped a munmap (each a 4 KiB write fault),
    /// ns, over all repeats.
    pub during_ns: Vec<u64>,
}

/// A thread write-faults its own `faulter_bytes` VMA page by page, then `MADV_DONTNEED`s it,
/// in a loop, while this thread munmaps a populated `munmap_bytes` mapping; `repeat` times,
/// and more (up to [`MAX_EXTRA_ROUNDS`]) while fewer than [`MIN_DURING`] faults overlapped a
/// munmap (a loaded host may not run the faulter during a short munmap at all).
pub fn faults_during_munmap(
    munmap_bytes: u64,
    faulter_bytes: u64,
    repeat: u32,
) -> Result<FaultsDuringMunmap, HostError> {
    let mut out = FaultsDuringMunmap {
        munmap_bytes,
        faulter_bytes,
        munmap_ns: Vec::new(),
        during_ns: Vec::new(),
    };
    let mut round = 0;
    while round < repeat.max(1)
        || (out.during_ns.len() < MIN_DURING && round < repeat.max(1) + MAX_EXTRA_ROUNDS)
    {
        round += 1;
        let mut big = Region::new(munmap_bytes)?;
        big.touch(0, munmap_bytes);
        let mine = Region::new(faulter_bytes)?;
        // 0: warming up, 1: munmap under way, 2: done.
        let phase = AtomicU32::new(0);
        let stop = AtomicBool::new(false);
        let warm = Barrier::new(2);
        let (during, ns) = std::thread::scope(|s| {
            let faulter = s.spawn(|| {
                let mut during = Vec::new();
                let mut warmed = false;
                while !stop.load(Ordering::Relaxed) {
                    let mut off = 0;
                    while off < faulter_bytes {
                        let before = phase.load(Ordering::Acquire);
                        let t = Instant::now();
                        mine.touch(off, PAGE_SIZE);
                        let ns = t.elapsed().as_nanos() as u64;
                        let after = phase.load(Ordering::Acquire);
                        if before == 1 || after == 1 || (before == 0 && after == 2) {
                            during.push(ns);
                        }
                        off += PAGE_SIZE;
                    }
                    mine.dontneed(0, faulter_bytes);
                    if !warmed {
                        warmed = true;
                        warm.wait();
                    }
                }
                during
            });
            warm.wait();
            phase.store(1, Ordering::Release);
            let t = Instant::now();
            big.unmap();
            let ns = t.elapsed().as_nanos() as u64;
            phase.store(2, Ordering::Release);
            stop.store(true, Ordering::Relaxed);
            (faulter.join().unwrap_or_default(), ns)
        });
        out.munmap_ns.push(ns);
        out.during_ns.extend(during);
    }
    Ok(out)
}
