//! The backing store: host memory behind emulated RAM and behind the `struct page` array.
//!
//! One host reservation of the emulated RAM size, made with `MAP_NORESERVE` so that a 512 GiB
//! machine constructs on a 24 GiB host: the host commits a page only when we touch it. Frame
//! `pfn` lives at `base + pfn * 4096`.
//!
//! - **Page-table pages are always real**: a table page is 512 `AtomicU64` entries in its frame's
//!   host memory, zeroed on allocation. Entries are only ever accessed atomically.
//! - **Data frames** depend on [`BackingMode`]. `Full`: allocation zeroes the frame with a real
//!   memset, reads and writes copy real bytes. `Sparse`: data frames are never touched — reads
//!   return zeros, writes are dropped — so 320 GiB of "touched" memory costs the host only its
//!   page tables and metadata. (The host's transparent huge pages are disabled on a sparse
//!   reservation, or every scattered page-table page would commit a 2 MiB host page.)
//!
//! # Full backing behaves like a VM's RAM
//! - **Resident before the clock starts** (`Backing::prefault`, `prefault=on`): the whole
//!   reservation is made `MADV_HUGEPAGE` (2 MiB host pages where the host's THP is not
//!   `never`: 512 times fewer host faults and host TLB misses) and faulted in at construction
//!   with `MADV_POPULATE_WRITE`, 64 MiB per call, on every host CPU.
//! - **Otherwise faulted in large steps** (`Backing::prep_new_frames`): the first data
//!   allocation (`__GFP_ZERO`) in a 2 MiB region of the reservation advises that region
//!   `MADV_HUGEPAGE` and populates it in one call. A 4 KiB host fault per frame, taken inside
//!   whatever is measured, costs ~2 µs on this VM (more where the hypervisor must fault too); a
//!   populated 2 MiB region ~0.4 µs per 4 KiB. Frames touched sparsely — page-table pages,
//!   whose regions may otherwise hold only never-touched deposits — do not trigger it: they
//!   take a 4 KiB host fault, where a 2 MiB one would make the host zero (and, on a VM, the
//!   hypervisor fault in) 512 times what is used. (Advising the whole reservation up front did
//!   that: `usemem --readonly -j 2M 64G` on a cold host went from 17 to 170-330 ms, all in host
//!   THP faults under `zero_table`.)
//! - **Never zeroed twice** (`Backing::prep_new_frames`): a frame the host has just given us
//!   is already zero, so `__GFP_ZERO` skips the memset for a frame no owner has had since the
//!   host supplied it. This is the `PG_zeroed` idea (Liang Li's "mm: Add PG_zero support" RFC,
//!   2020; Michael S. Tsirkin's "mm: add PG_zeroed page flag for known-zero pages" RFC, 2026:
//!   host-zeroed pages skip `clear_page`), kept as one bit per frame beside the reservation:
//!   set when the allocator first hands the frame out (to any owner, zeroing or not) and never
//!   cleared. The invariant — *a freed frame is zero before anyone else can read it* — holds
//!   because every frame that ever had an owner has its bit set, and a `__GFP_ZERO` allocation
//!   clears every frame whose bit was set; only frames nobody has owned skip the memset. The
//!   bit is set before the new owner can write, and the allocator's locks (pcp, `zone.lock`)
//!   order a free before the next allocation of the same frame, so the next owner sees it.
//!
//! This module (host mappings, frame access, [`ZeroedArray`]) holds most of the engine's
//! `unsafe`; the crate doc's "Unsafe" lists the few other fenced modules, among them
//! `page_alloc/meta.rs`, whose `unsafe impl ZeroValid for PageMeta` the arrays here rely on.
//! The rules this module keeps:
//! 1. A frame's memory is accessed as `AtomicU64`/`AtomicU8` while it may be shared (mapped data,
//!    page tables), so racing user threads are defined behaviour, as on real hardware.
//! 2. Plain memset/copy is used only on a frame the caller owns exclusively: one just allocated
//!    (zeroing) — the allocator hands each frame to exactly one owner.
//! 3. Every index is bounds-checked against the reservation before a pointer is formed.
//!
//! # Differences from Linux
//! No direct map, no highmem, no struct page for the backing's own pages. Memory freed to the
//! emulated buddy stays committed on the host (like RAM stays RAM); the known-zero bit lives in
//! a bitmap of its own rather than in the page flags, and frames never become known-zero again
//! (the engine does no background zeroing and hands nothing back to the host).

#![expect(unsafe_code)] // fenced (lib.rs, "Unsafe"): host memory: mappings, raw frame access, zeroed arrays

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::addr::{Pfn, PAGE_SIZE, PTRS_PER_TABLE};
use crate::config::BackingMode;

/// An anonymous private host mapping (`MAP_NORESERVE`, read-write, zero-filled), unmapped on
/// drop: the host memory behind the frames here, and behind percpu chunks (`pcpu/region.rs`).
#[derive(Debug)]
pub(crate) struct HostMapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; all access through it is either
// atomic or to frames owned exclusively by the caller (rule 2 above), so sharing the handle
// between threads is sound.
unsafe impl Send for HostMapping {}
// SAFETY: see `Send`.
unsafe impl Sync for HostMapping {}

/// What the host is told about a reservation's page size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostPages {
    /// Whatever the host's THP policy gives an unadvised mapping (full backing: regions are
    /// advised `MADV_HUGEPAGE` one by one as they are populated).
    Default,
    /// `MADV_NOHUGEPAGE`: 4 KiB host pages only.
    Small,
}

/// `MADV_POPULATE_WRITE` step of [`Backing::prefault`]: large enough that the calls cost
/// nothing beside the faults, small enough to spread over the host's CPUs.
const PREFAULT_CHUNK: usize = 64 << 20;

impl HostMapping {
    pub(crate) fn new(len: usize, pages: HostPages) -> std::io::Result<Self> {
        assert!(len > 0);
        // SAFETY: an anonymous mapping with a null hint has no preconditions; we check the result.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let advice = match pages {
            HostPages::Default => None,
            HostPages::Small => Some(libc::MADV_NOHUGEPAGE),
        };
        if let Some(advice) = advice {
            // SAFETY: `p..p+len` is the mapping just created; madvise only changes advice.
            // Advice is best effort: a host without THP refuses MADV_HUGEPAGE, which is fine.
            unsafe { libc::madvise(p, len, advice) };
        }
        Ok(Self {
            base: NonNull::new(p.cast()).expect("mmap returned NULL"),
            len,
        })
    }

    /// The first byte of the mapping; `len()` bytes from it are ours until drop.
    pub(crate) fn base(&self) -> NonNull<u8> {
        self.base
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Best-effort advice on `off..off+len` (a host that refuses it keeps its default).
    fn advise(&self, off: usize, len: usize, advice: libc::c_int) {
        assert!(off.checked_add(len).is_some_and(|end| end <= self.len));
        // SAFETY: the range is inside our mapping (checked); advice changes no byte.
        unsafe { libc::madvise(self.base.as_ptr().add(off).cast(), len, advice) };
    }

    /// Fault in `off..off+len` for writing (`MADV_POPULATE_WRITE`, Linux 5.14+), changing no
    /// byte. `Ok(false)` when the host does not know the advice.
    fn populate_write(&self, off: usize, len: usize) -> std::io::Result<bool> {
        assert!(off.checked_add(len).is_some_and(|end| end <= self.len));
        // SAFETY: the range is inside our mapping (checked); populating only makes the host
        // commit the pages, it changes no byte.
        let r = unsafe {
            libc::madvise(
                self.base.as_ptr().add(off).cast(),
                len,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if r == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINVAL) => Ok(false),
            _ => Err(e),
        }
    }

    /// [`Self::populate_write`] for a host without it: one write of zero per 4 KiB page. Only
    /// at construction, while nobody else can see the memory and every page is still zero.
    fn touch_at_construction(&self, off: usize, len: usize) {
        assert!(off.checked_add(len).is_some_and(|end| end <= self.len));
        for o in (off..off + len).step_by(PAGE_SIZE as usize) {
            // SAFETY: `o < off + len`, inside the mapping (checked); the caller guarantees
            // nobody else accesses the reservation yet, and the page is zero already, so
            // writing zero changes nothing but residency.
            unsafe { self.base.as_ptr().add(o).write_volatile(0) };
        }
    }
}

impl Drop for HostMapping {
    fn drop(&mut self) {
        // SAFETY: `base..base+len` is our own mapping; no reference into it outlives `self`
        // because every borrow handed out is tied to `&self` of the owner.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Types whose all-zero bit pattern is a valid value (atomics and integers).
///
/// # Safety
/// Implementors must be valid when every byte is zero, and contain no references.
pub unsafe trait ZeroValid: Sync {
    /// Under loom: the value all-zero memory stands for, built (a loom atomic is a handle into
    /// the model, not an integer, so zeroed memory holds none).
    #[cfg(loom)]
    fn zeroed() -> Self;
}
// SAFETY: atomics of integers are plain integers in memory; zero is valid.
unsafe impl ZeroValid for AtomicU64 {
    #[cfg(loom)]
    fn zeroed() -> Self {
        AtomicU64::new(0)
    }
}

/// A large array of `T` in a lazily-zeroed host mapping: the emulated `mem_map`.
///
/// Construction costs nothing per element: the host supplies zero pages on first touch, and the
/// all-zero element is the meaning of "untouched" (for [`crate::page_alloc::PageMeta`]: a frame
/// that is neither free nor allocated yet, inside a max-order block whose head is free).
#[derive(Debug)]
pub struct ZeroedArray<T: ZeroValid> {
    map: HostMapping,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: ZeroValid> ZeroedArray<T> {
    pub fn new(len: usize) -> std::io::Result<Self> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .expect("array size overflows");
        let map = HostMapping::new(bytes.max(1), HostPages::Default)?;
        #[cfg(loom)]
        for i in 0..len {
            // SAFETY: element `i < len` lies inside the mapping, which is aligned for T (page
            // aligned) and not yet shared; the zero bytes there are overwritten, not dropped.
            unsafe { map.base.as_ptr().cast::<T>().add(i).write(T::zeroed()) };
        }
        Ok(Self {
            map,
            len,
            _t: std::marker::PhantomData,
        })
    }

    #[inline]
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: the mapping is `len * size_of::<T>()` bytes, page aligned (so aligned for T),
        // zero-initialised by the host, and T is valid at all-zero (ZeroValid). We only hand out
        // shared references; T is Sync and mutated only through its own interior mutability.
        unsafe { std::slice::from_raw_parts(self.map.base.as_ptr().cast::<T>(), self.len) }
    }
}

/// One page-table page: 512 entries, in the frame's own memory.
#[cfg(not(loom))]
pub type TablePage = [TableEntry; PTRS_PER_TABLE];

/// A page-table entry's word: a host atomic, a loom one under loom (`sync::primitive`).
pub type TableEntry = crate::sync::primitive::atomic::AtomicU64;

#[cfg(loom)]
mod loom;
#[cfg(loom)]
pub use self::loom::TablePage;

/// The entries of `page` that may be nonzero: all of them on the host; under loom the ones made
/// so far (the others are zero by definition).
fn entries_in_use(page: &TablePage) -> impl Iterator<Item = &TableEntry> {
    #[cfg(not(loom))]
    return page.iter();
    #[cfg(loom)]
    return page.made();
}

/// Does the host give this process transparent huge pages on `MADV_HUGEPAGE` mappings?
/// (`/sys/kernel/mm/transparent_hugepage/enabled` is not `[never]`.)
pub fn host_thp_available() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|s| !s.contains("[never]"))
}

/// Host memory for every frame of emulated RAM.
#[derive(Debug)]
pub struct Backing {
    map: HostMapping,
    nr_frames: u64,
    mode: BackingMode,
    /// Full backing: one bit per frame, set once the allocator has handed the frame to an
    /// owner. A clear bit is the kernel's `PG_zeroed`: the frame is as the host gave it, zero.
    /// `None` with sparse backing (data frames are never touched).
    used: Option<ZeroedArray<AtomicU64>>,
    /// Full backing: one bit per 2 MiB region, set once the region has been populated
    /// (every bit, after [`Backing::prefault`]). `None` with sparse backing.
    populated: Option<ZeroedArray<AtomicU64>>,
    /// Full backing on a host whose THP is not `never`: populated regions are 2 MiB host pages.
    host_huge_pages: bool,
    /// Under loom: the page-table entries of each frame, made on first use (see [`TablePage`]).
    #[cfg(loom)]
    tables: loom::Tables,
}

/// Frames per 2 MiB region of the reservation (the host's huge page).
const REGION_FRAMES: u64 = 512;

impl Backing {
    pub fn new(nr_frames: u64, mode: BackingMode) -> std::io::Result<Self> {
        let len = usize::try_from(nr_frames * PAGE_SIZE).expect("64-bit host");
        let (pages, used, populated) = match mode {
            BackingMode::Full => (
                HostPages::Default,
                Some(ZeroedArray::new(nr_frames.div_ceil(64) as usize)?),
                Some(ZeroedArray::new(
                    nr_frames.div_ceil(REGION_FRAMES).div_ceil(64) as usize,
                )?),
            ),
            BackingMode::Sparse => (HostPages::Small, None, None),
        };
        let map = HostMapping::new(len, pages)?;
        Ok(Self {
            map,
            nr_frames,
            mode,
            used,
            populated,
            host_huge_pages: mode == BackingMode::Full && host_thp_available(),
            #[cfg(loom)]
            tables: loom::Tables::new(nr_frames),
        })
    }

    pub fn mode(&self) -> BackingMode {
        self.mode
    }

    /// Whether the host backs the populated parts of this reservation with 2 MiB pages.
    pub fn host_huge_pages(&self) -> bool {
        self.host_huge_pages
    }

    /// Make the whole reservation resident on huge host pages (full backing; a no-op when
    /// sparse), in `PREFAULT_CHUNK` (64 MiB) steps shared out to one thread per host CPU. Call at
    /// construction, before any frame is handed out: on a host without `MADV_POPULATE_WRITE`
    /// it writes a zero into every page.
    pub(crate) fn prefault(&self) -> std::io::Result<()> {
        let Some(populated) = &self.populated else {
            return Ok(());
        };
        let len = self.map.len;
        self.map.advise(0, len, libc::MADV_HUGEPAGE);
        let nr_chunks = len.div_ceil(PREFAULT_CHUNK);
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(nr_chunks);
        let next = AtomicUsize::new(0);
        let work = || -> std::io::Result<()> {
            loop {
                let c = next.fetch_add(1, Ordering::Relaxed);
                if c >= nr_chunks {
                    return Ok(());
                }
                let off = c * PREFAULT_CHUNK;
                let n = PREFAULT_CHUNK.min(len - off);
                if !self.map.populate_write(off, n)? {
                    self.map.touch_at_construction(off, n);
                }
            }
        };
        // Host threads of the backing's own, not engine threads (so not through
        // `sync::thread`): they run before the machine exists, run no engine code and take no
        // engine lock; what they cost is the host's, outside any measured or modelled time.
        std::thread::scope(|s| {
            let helpers: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
            let mut r = work();
            for h in helpers {
                let hr = h
                    .join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("panic")));
                r = r.and(hr);
            }
            r
        })?;
        for w in populated.as_slice() {
            w.store(u64::MAX, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Populate the 2 MiB region `region` on a huge host page if nothing has yet: the first
    /// data allocation there faults the whole region in with one call instead of 512 host
    /// faults. Best effort: a refused advice leaves 4 KiB host pages, a refused population
    /// leaves the frames to fault on first touch. Frames already there keep their bytes.
    #[cold]
    #[inline(never)]
    fn populate_region(&self, populated: &[AtomicU64], region: u64) {
        let bit = 1u64 << (region % 64);
        if populated[(region / 64) as usize].fetch_or(bit, Ordering::Relaxed) & bit != 0 {
            return;
        }
        let off = (region * REGION_FRAMES * PAGE_SIZE) as usize;
        let len = ((REGION_FRAMES * PAGE_SIZE) as usize).min(self.map.len - off);
        self.map.advise(off, len, libc::MADV_HUGEPAGE);
        let _ = self.map.populate_write(off, len);
    }

    #[inline]
    fn frame_ptr(&self, pfn: Pfn) -> *mut u8 {
        assert!(
            pfn.0 < self.nr_frames,
            "pfn {:#x} beyond the backing",
            pfn.0
        );
        // SAFETY: `pfn < nr_frames`, so the offset stays inside the mapping.
        unsafe { self.map.base.as_ptr().add(pfn.index() * PAGE_SIZE as usize) }
    }

    /// A frame's memory as 512 words (data frames; on the host, page tables too).
    #[inline]
    fn words(&self, pfn: Pfn) -> &[AtomicU64; PTRS_PER_TABLE] {
        let p = self.frame_ptr(pfn);
        // SAFETY: the frame is 4 KiB of mapped memory, page aligned, and lives as long as
        // `self`. Words are only accessed through atomics (rule 1), so aliasing shared
        // references is sound; AtomicU64 is valid at any bit pattern of initialised memory.
        unsafe { &*p.cast::<[AtomicU64; PTRS_PER_TABLE]>() }
    }

    /// The 512 entries of a page-table page.
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn table(&self, pfn: Pfn) -> &TablePage {
        self.words(pfn)
    }

    /// The 512 entries of a page-table page: under loom, loom atomics beside the frame.
    #[cfg(loom)]
    pub(crate) fn table(&self, pfn: Pfn) -> &TablePage {
        assert!(
            pfn.0 < self.nr_frames,
            "pfn {:#x} beyond the backing",
            pfn.0
        );
        self.tables.get(pfn)
    }

    /// Zero a frame that the caller owns exclusively (rule 2): a new page-table page.
    pub(crate) fn zero_table(&self, pfn: Pfn) {
        for e in entries_in_use(self.table(pfn)) {
            e.store(0, Ordering::Relaxed);
        }
    }

    /// Are all the entries of the page-table page `pfn` none (a table about to be freed)?
    pub(crate) fn table_is_clear(&self, pfn: Pfn) -> bool {
        entries_in_use(self.table(pfn)).all(|e| e.load(Ordering::Relaxed) == 0)
    }

    /// Zero `nr` data frames from `pfn`, owned exclusively by the caller, whatever they hold
    /// (`clear_pages`: one memset over the whole extent). A no-op with sparse backing.
    pub(crate) fn zero_data(&self, pfn: Pfn, nr: u64) {
        if self.mode == BackingMode::Sparse {
            return;
        }
        assert!(pfn.0 + nr <= self.nr_frames);
        let p = self.frame_ptr(pfn);
        // SAFETY: the range is inside the mapping (checked), and the caller owns these frames
        // exclusively (just allocated), so no other access can race with the memset.
        unsafe { std::ptr::write_bytes(p, 0, (nr * PAGE_SIZE) as usize) };
    }

    /// The allocator hands `nr` frames from `pfn` to one owner (`post_alloc_hook`): they stop
    /// being known-zero, and with `zero` (`__GFP_ZERO`) each one that an owner had before is
    /// cleared — the others are still as the host gave them, zero. Every allocation comes here,
    /// zeroing or not. A no-op with sparse backing.
    ///
    /// A zeroing (data) allocation is also where a region of the reservation that nothing has
    /// populated yet is faulted in, on a huge host page (see the module documentation).
    #[inline]
    pub(crate) fn prep_new_frames(&self, pfn: Pfn, nr: u64, zero: bool) {
        let (Some(used), Some(populated)) = (&self.used, &self.populated) else {
            return;
        };
        assert!(pfn.0 + nr <= self.nr_frames);
        if zero && nr > 0 {
            let regions = populated.as_slice();
            for region in pfn.0 / REGION_FRAMES..=(pfn.0 + nr - 1) / REGION_FRAMES {
                let bit = 1u64 << (region % 64);
                if regions[(region / 64) as usize].load(Ordering::Relaxed) & bit == 0 {
                    self.populate_region(regions, region);
                }
            }
        }
        let words = used.as_slice();
        let (mut i, end) = (pfn.0, pfn.0 + nr);
        while i < end {
            let lo = i % 64;
            let n = (end - i).min(64 - lo);
            let mask = (u64::MAX >> (64 - n)) << lo;
            let w = &words[(i / 64) as usize];
            // A plain load first: once every frame has had an owner, allocation adds no
            // read-modify-write on a line that neighbouring frames' owners share.
            let cur = w.load(Ordering::Relaxed);
            let had_owner = if cur & mask == mask {
                mask
            } else {
                w.fetch_or(mask, Ordering::Relaxed) & mask
            };
            if zero && had_owner != 0 {
                self.zero_runs(i - lo, had_owner);
            }
            i += n;
        }
    }

    /// Zero the frames `base + b` for each set bit `b` of `bits`, one memset per run.
    fn zero_runs(&self, base: u64, mut bits: u64) {
        while bits != 0 {
            let start = bits.trailing_zeros();
            let run = (bits >> start).trailing_ones();
            self.zero_data(Pfn(base + u64::from(start)), u64::from(run));
            bits &= !((u64::MAX >> (64 - run)) << start);
        }
    }

    /// Is `pfn` still as the host gave it (no owner since)? Always `false` with sparse backing.
    #[cfg(test)]
    pub(crate) fn known_zero(&self, pfn: Pfn) -> bool {
        self.used.as_ref().is_some_and(|u| {
            u.as_slice()[pfn.index() / 64].load(Ordering::Relaxed) & (1 << (pfn.0 % 64)) == 0
        })
    }

    #[inline]
    fn bytes(&self, pfn: Pfn) -> &[AtomicU8] {
        let p = self.frame_ptr(pfn);
        // SAFETY: a frame is 4 KiB of mapped memory living as long as `self`; AtomicU8 has
        // alignment 1 and is valid for any initialised byte; all access is atomic (rule 1).
        unsafe { std::slice::from_raw_parts(p.cast::<AtomicU8>(), PAGE_SIZE as usize) }
    }

    /// Copy bytes `off..off+buf.len()` of a data frame into `buf` (zeros when sparse).
    pub(crate) fn read(&self, pfn: Pfn, off: usize, buf: &mut [u8]) {
        if self.mode == BackingMode::Sparse {
            buf.fill(0);
            return;
        }
        let src = &self.bytes(pfn)[off..off + buf.len()];
        if off.is_multiple_of(8) {
            // Whole words first, one 8-byte load each (the bytes a byte-wise copy reads).
            let t = &self.words(pfn)[off / 8..];
            let mut chunks = buf.chunks_exact_mut(8);
            for (d, w) in (&mut chunks).zip(t) {
                d.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
            }
            let tail = chunks.into_remainder();
            let done = src.len() - tail.len();
            for (d, s) in tail.iter_mut().zip(&src[done..]) {
                *d = s.load(Ordering::Relaxed);
            }
            return;
        }
        for (d, s) in buf.iter_mut().zip(src) {
            *d = s.load(Ordering::Relaxed);
        }
    }

    /// Copy `data` into a data frame at `off` (dropped when sparse).
    pub(crate) fn write(&self, pfn: Pfn, off: usize, data: &[u8]) {
        if self.mode == BackingMode::Sparse {
            return;
        }
        let dst = &self.bytes(pfn)[off..off + data.len()];
        if off.is_multiple_of(8) {
            // Whole words first, one 8-byte store each (the bytes a byte-wise copy stores).
            let t = &self.words(pfn)[off / 8..];
            let chunks = data.chunks_exact(8);
            let tail = chunks.remainder();
            for (s, w) in chunks.zip(t) {
                let mut b = [0u8; 8];
                b.copy_from_slice(s);
                w.store(u64::from_ne_bytes(b), Ordering::Relaxed);
            }
            let done = data.len() - tail.len();
            for (d, s) in dst[done..].iter().zip(tail) {
                d.store(*s, Ordering::Relaxed);
            }
            return;
        }
        for (d, s) in dst.iter().zip(data) {
            d.store(*s, Ordering::Relaxed);
        }
    }

    /// Store `value(w)` into each 8-byte word `w` of `words` (word indexes in the frame,
    /// every `step`-th from the start) of a data frame: a user walk's stores, one 8-byte
    /// atomic store each (dropped when sparse). The same bytes as `Backing::write` of each
    /// word's native-endian bytes.
    pub(crate) fn write_words(
        &self,
        pfn: Pfn,
        words: std::ops::Range<usize>,
        step: usize,
        value: impl Fn(usize) -> u64,
    ) {
        if self.mode == BackingMode::Sparse {
            return;
        }
        let t = self.words(pfn);
        for w in words.step_by(step.max(1)) {
            t[w].store(value(w), Ordering::Relaxed);
        }
    }

    /// Load each 8-byte word `w` of `words` (every `step`-th) of a data frame: a user walk's
    /// loads; their xor, so that they are not optimised away (0 when sparse).
    pub(crate) fn read_words(&self, pfn: Pfn, words: std::ops::Range<usize>, step: usize) -> u64 {
        if self.mode == BackingMode::Sparse {
            return 0;
        }
        let t = self.words(pfn);
        words
            .step_by(step.max(1))
            .fold(0, |acc, w| acc ^ t[w].load(Ordering::Relaxed))
    }

    /// Copy a whole data frame (copy-on-write). `dst` is owned exclusively by the caller.
    pub(crate) fn copy_frame(&self, src: Pfn, dst: Pfn) {
        if self.mode == BackingMode::Sparse {
            return;
        }
        let (s, d) = (self.words(src), self.words(dst));
        for (d, s) in d.iter().zip(s) {
            d.store(s.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn full_backing_keeps_bytes_and_zeroes() {
        let b = Backing::new(16, BackingMode::Full).unwrap();
        b.write(Pfn(3), 100, b"hello");
        let mut buf = [0u8; 5];
        b.read(Pfn(3), 100, &mut buf);
        assert_eq!(&buf, b"hello");
        b.copy_frame(Pfn(3), Pfn(4));
        b.read(Pfn(4), 100, &mut buf);
        assert_eq!(&buf, b"hello");
        b.zero_data(Pfn(3), 1);
        b.read(Pfn(3), 100, &mut buf);
        assert_eq!(buf, [0; 5]);
    }

    #[test]
    fn sparse_backing_reads_zeros_but_tables_are_real() {
        let b = Backing::new(16, BackingMode::Sparse).unwrap();
        b.write(Pfn(3), 0, b"x");
        let mut buf = [1u8; 1];
        b.read(Pfn(3), 0, &mut buf);
        assert_eq!(buf, [0]);
        b.table(Pfn(5))[7].store(42, Ordering::Relaxed);
        assert_eq!(b.table(Pfn(5))[7].load(Ordering::Relaxed), 42);
        b.zero_table(Pfn(5));
        assert_eq!(b.table(Pfn(5))[7].load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_frame_an_owner_had_is_cleared_and_a_host_fresh_one_is_not_touched() {
        let b = Backing::new(128, BackingMode::Full).unwrap();
        assert!(b.known_zero(Pfn(3)));
        // First owner (not zeroing: a page-table or gather page) writes.
        b.prep_new_frames(Pfn(3), 1, false);
        assert!(!b.known_zero(Pfn(3)));
        b.write(Pfn(3), 100, b"dirty");
        // Freed and allocated again with __GFP_ZERO: cleared.
        b.prep_new_frames(Pfn(3), 1, true);
        let mut buf = [9u8; 5];
        b.read(Pfn(3), 100, &mut buf);
        assert_eq!(buf, [0; 5]);
        // A frame nobody owned is not memset: bytes put there behind the allocator's back
        // (which the engine never does) survive a zeroing allocation — the memset was skipped.
        b.write(Pfn(70), 0, b"x");
        b.prep_new_frames(Pfn(70), 1, true);
        b.read(Pfn(70), 0, &mut buf[..1]);
        assert_eq!(buf[0], b'x');
        assert!(!b.known_zero(Pfn(70)));
    }

    #[test]
    fn zeroing_allocation_clears_exactly_the_frames_owned_before() {
        let b = Backing::new(256, BackingMode::Full).unwrap();
        // Every third frame of 60..200 (across word boundaries) had an owner who wrote it.
        for pfn in (60..200).step_by(3) {
            b.prep_new_frames(Pfn(pfn), 1, false);
            b.write(Pfn(pfn), 4000, &[0xee; 96]);
        }
        // One block allocation over all of them: every frame reads zero afterwards.
        b.prep_new_frames(Pfn(60), 140, true);
        let mut page = vec![1u8; PAGE_SIZE as usize];
        for pfn in 60..200 {
            b.read(Pfn(pfn), 0, &mut page);
            assert!(page.iter().all(|&x| x == 0), "pfn {pfn}");
            assert!(!b.known_zero(Pfn(pfn)));
        }
        assert!(b.known_zero(Pfn(59)) && b.known_zero(Pfn(200)));
    }

    #[test]
    fn sparse_backing_has_no_known_zero_frames() {
        let b = Backing::new(64, BackingMode::Sparse).unwrap();
        b.prep_new_frames(Pfn(1), 8, true);
        assert!(!b.known_zero(Pfn(1)) && !b.known_zero(Pfn(30)));
        assert!(!b.host_huge_pages());
        b.prefault().unwrap();
    }

    #[test]
    fn prefault_makes_the_reservation_resident_and_changes_no_byte() {
        let frames = (8u64 << 20) / PAGE_SIZE;
        let b = Backing::new(frames, BackingMode::Full).unwrap();
        b.prefault().unwrap();
        assert!(
            resident(&b, 0, frames).iter().all(|&r| r),
            "not every page is resident"
        );
        let mut page = vec![1u8; PAGE_SIZE as usize];
        for pfn in [0, frames / 2, frames - 1] {
            b.read(Pfn(pfn), 0, &mut page);
            assert!(page.iter().all(|&x| x == 0));
            assert!(b.known_zero(Pfn(pfn)));
        }
    }

    /// Pages of `b` resident on the host, from `first` for `n` frames (`mincore`).
    fn resident(b: &Backing, first: u64, n: u64) -> Vec<bool> {
        let mut vec = vec![0u8; n as usize];
        let off = (first * PAGE_SIZE) as usize;
        // SAFETY: the range is inside the backing's own mapping (first + n ≤ nr_frames in
        // every caller); mincore only writes one byte per page into `vec`.
        let r = unsafe {
            libc::mincore(
                b.map.base.as_ptr().add(off).cast(),
                (n * PAGE_SIZE) as usize,
                vec.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0);
        vec.into_iter().map(|v| v & 1 == 1).collect()
    }

    #[test]
    fn a_data_allocation_populates_its_region_and_a_table_does_not() {
        let b = Backing::new(4 * REGION_FRAMES, BackingMode::Full).unwrap();
        // A page-table-like allocation (no __GFP_ZERO) populates nothing; its owner's first
        // write takes one host fault for its own page.
        b.prep_new_frames(Pfn(700), 1, false);
        assert!(resident(&b, 512, 512).iter().all(|&r| !r));
        b.table(Pfn(700))[3].store(0xabc, Ordering::Relaxed);
        let thp_always = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .is_ok_and(|s| s.contains("[always]"));
        if !thp_always {
            // (With THP "always" the host gives even an unadvised fault a 2 MiB page.)
            assert_eq!(resident(&b, 512, 512).iter().filter(|&&r| r).count(), 1);
        }
        // The first data allocation in region 1 faults the whole region in, and the table's
        // entry survives it; regions 0 and 2 stay untouched.
        b.prep_new_frames(Pfn(800), 1, true);
        assert!(resident(&b, 512, 512).iter().all(|&r| r));
        assert_eq!(b.table(Pfn(700))[3].load(Ordering::Relaxed), 0xabc);
        assert!(resident(&b, 0, 512).iter().all(|&r| !r));
        assert!(resident(&b, 1024, 512).iter().all(|&r| !r));
        // A THP-sized allocation over region 2 populates exactly that region.
        b.prep_new_frames(Pfn(1024), 512, true);
        assert!(resident(&b, 1024, 512).iter().all(|&r| r));
        assert!(resident(&b, 1536, 512).iter().all(|&r| !r));
    }

    #[test]
    #[should_panic(expected = "beyond the backing")]
    fn out_of_range_frame_is_refused() {
        let b = Backing::new(4, BackingMode::Full).unwrap();
        b.table(Pfn(4));
    }

    #[test]
    fn huge_sparse_reservation_constructs() {
        // 512 GiB of emulated RAM on a much smaller host.
        let b = Backing::new((512u64 << 30) / PAGE_SIZE, BackingMode::Sparse).unwrap();
        b.table(Pfn(100_000_000))[0].store(1, Ordering::Relaxed);
    }
}
