//! Host memory behind a chunk: the emulated `vmalloc` area of `pcpu_get_vm_areas`.
//!
//! Each dynamic chunk owns one anonymous private host mapping of `unit_size × nr_units` bytes,
//! made with `MAP_NORESERVE`: unit `u` is the byte range `[u × unit_size, (u + 1) × unit_size)`,
//! so the copies of one allocation in different units are different host pages, as different
//! CPUs' copies are different physical pages in the kernel. The first and reserved chunks share
//! one such region (the boot area). Populating a page index allocates emulated frames (that is
//! the accounting); the host supplies the bytes on first touch. Depopulating discards the page
//! of every unit with `MADV_DONTNEED`, so the host memory really goes back and the next touch
//! reads zeros.
//!
//! This is the only file of `pcpu` with `unsafe`. The rules it keeps:
//! 1. Every access to the bytes is through `AtomicU8` (`&[AtomicU8]` views), so a holder of a
//!    stale [`super::PcpuSlice`] racing with the allocator's zeroing or with another CPU's
//!    writes is defined behaviour, as on hardware.
//! 2. Every view is bounds-checked against the mapping before a pointer is formed, and borrows
//!    the region, which is kept alive by `Arc` as long as any view or chunk refers to it.
//! 3. `MADV_DONTNEED` keeps the range mapped; it only replaces its contents with zeros, which
//!    to the atomics above is indistinguishable from another thread storing zeros.

#![expect(unsafe_code)] // fenced (lib.rs, "Unsafe"): the host mapping behind percpu chunks

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

use crate::addr::PAGE_SIZE;
use crate::backing::{HostMapping, HostPages};

/// One anonymous host mapping of `MADV_NOHUGEPAGE` pages, unmapped on drop (the backing's
/// [`HostMapping`]: the `mmap` is written once, there). It is `Send` and `Sync` because the
/// mapping is plain memory and every access to it here is atomic (rule 1).
#[derive(Debug)]
pub(crate) struct PcpuRegion {
    map: HostMapping,
}

impl PcpuRegion {
    /// Reserve `len` bytes (a multiple of the page size) of zero-filled host memory. No host
    /// huge pages, so discarding one 4 KiB page really returns its memory.
    pub(crate) fn new(len: usize) -> std::io::Result<Self> {
        assert!(
            len > 0 && len.is_multiple_of(PAGE_SIZE as usize),
            "region of {len} bytes"
        );
        Ok(Self {
            map: HostMapping::new(len, HostPages::Small)?,
        })
    }

    /// The bytes `[start, start + len)` as atomics.
    ///
    /// # Panics
    /// If the range is not inside the region.
    pub(crate) fn bytes(&self, start: usize, len: usize) -> &[AtomicU8] {
        let end = start.checked_add(len).expect("range overflows");
        assert!(
            end <= self.map.len(),
            "bytes {start}..{end} beyond a region of {}",
            self.map.len()
        );
        // SAFETY: the range is inside the mapping (checked), which lives as long as `&self`;
        // `AtomicU8` has alignment 1 and is valid for any initialised byte (anonymous memory is
        // zero-filled); all access is atomic (rule 1), so shared views may alias.
        unsafe {
            std::slice::from_raw_parts(self.map.base().as_ptr().add(start).cast::<AtomicU8>(), len)
        }
    }

    /// Give the page-aligned range `[start, start + len)` back to the host (`MADV_DONTNEED`).
    pub(crate) fn discard(&self, start: usize, len: usize) {
        let end = start.checked_add(len).expect("range overflows");
        assert!(
            end <= self.map.len(),
            "discard {start}..{end} beyond a region of {}",
            self.map.len()
        );
        assert!(start.is_multiple_of(PAGE_SIZE as usize) && len.is_multiple_of(PAGE_SIZE as usize));
        if len == 0 {
            return;
        }
        // SAFETY: the page-aligned range is inside our mapping (checked). DONTNEED keeps it
        // mapped and makes it read as zeros (rule 3); no non-atomic reference into it exists.
        let rc = unsafe {
            libc::madvise(
                self.map.base().as_ptr().add(start).cast(),
                len,
                libc::MADV_DONTNEED,
            )
        };
        debug_assert_eq!(
            rc,
            0,
            "madvise(DONTNEED) failed: {}",
            std::io::Error::last_os_error()
        );
    }

    /// Zero `[start, start + len)`, storing only into bytes that are not zero already, so that
    /// never-written host pages stay uncommitted (the result is the kernel's `memset`).
    pub(crate) fn zero(&self, start: usize, len: usize) {
        for b in self.bytes(start, len) {
            if b.load(Relaxed) != 0 {
                b.store(0, Relaxed);
            }
        }
    }
}
