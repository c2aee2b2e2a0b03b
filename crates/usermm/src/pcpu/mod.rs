//! The percpu allocator: `mm/percpu.c`, `mm/percpu-vm.c`, `mm/percpu-internal.h`,
//! `mm/percpu-stats.c` — chunks of units, bitmap allocation with per-page block hints, slots by
//! free size, on-demand population, and the balance work with its two depopulation policies
//! (seed 004, Roman Gushchin's partial chunk depopulation, merged in 5.14).
//!
//! # Chunks and units
//! A *chunk* is one region of `nr_units` *units* of `unit_size` bytes, one unit per possible CPU.
//! An allocation at offset `off` occupies `[off, off + size)` in **every** unit: CPU `c`'s copy is
//! at `unit c + off`. The allocator hands out the offset ([`PcpuPtr`]); [`PcpuAllocator::per_cpu_ptr`]
//! turns it into one CPU's bytes.
//!
//! ```text
//!  boot area (unit_size per unit, always populated, never freed)
//!   c0 | u0: <static | reserved | first chunk (dynamic)> | u1: <…> | … | u(n-1): <…> |
//!  dynamic chunks (created empty, pages populated on demand in all units at once)
//!   c1 | u0 | u1 | … | u(n-1) |       page i of c1 = one frame per unit, or none at all
//!   c2 | u0 | u1 | … | u(n-1) |
//! ```
//! The static area is in use from boot and belongs to no chunk. The reserved chunk serves only
//! `alloc_reserved` (module statics) and is on no slot list. The first chunk and every dynamic
//! chunk serve ordinary allocations, found through the slot lists ([`slots`]): active slots from
//! the request's size up, then *sidelined*, then *free*; *to_depopulate* is never searched.
//!
//! Inside a chunk, `alloc_map` has one bit per 4-byte fragment (1024 per page), `bound_map`
//! marks where allocations start and end, and each page has a [`PcpuBlockMd`] of hints
//! (contig, scan, left, right, first free) so searches skip blocks that cannot fit; the chunk has
//! one more over the whole map. See [`chunk`] for the update rules.
//!
//! # Life of an allocation
//! [`PcpuAllocator::alloc`]: normalise size and alignment → take `pcpu_alloc_mutex` (not for
//! atomic requests) → `pcpu_lock` → search the slots (failed fits in slots 1–2 demote the chunk to
//! slot 0; a sidelined chunk that serves the request is reintegrated) → none fits: create a
//! chunk (lock dropped) and search again → schedule the balance work if fewer than `LOW` empty
//! populated pages remain → drop the lock, populate the pages under the area in every unit →
//! zero the area in every unit. [`PcpuAllocator::free`]: `pcpu_lock` only → free the area, merge
//! hints, relocate → fully free chunk and another one already free: schedule the balance work;
//! else, with partial depopulation, a chunk with ≥ ¼ of its pages empty while the system keeps
//! more than `HIGH` empty pages without it is *isolated* to to_depopulate and the work scheduled.
//!
//! # The balance work and the two policies
//! [`DepopulatePolicy::WholeChunk`] (pre-5.14, `pcpu.depopulate=off`): pages go back only when a
//! whole chunk is free and destroyed; the work frees surplus free chunks and tops up the empty
//! page reserve. [`DepopulatePolicy::Partial`] (5.14, `on`): the work also depopulates isolated
//! chunks page by page from the top, sidelines them, and frees chunks left with no populated
//! page. See the `balance` module.
//! ```text
//!  active ─(free: ≥¼ empty, surplus > HIGH)─▶ to_depopulate ─(reclaim)─▶ sidelined
//!  to_depopulate ─(fully free, or reserve < HIGH)─▶ active / free      (reintegrate)
//!  sidelined ─(an allocation lands in it)─▶ active;  ─(a free adds empty pages)─▶ to_depopulate
//!  free slot ─(balance_free)─▶ destroyed (one free chunk is kept)
//! ```
//!
//! # Invariants (checked by [`PcpuAllocator::validate`])
//! - **P1** A chunk's `nr_empty_pop_pages` = pages both populated and entirely free.
//! - **P2** The global `nr_empty_pop_pages` = Σ over non-reserved, non-isolated chunks.
//! - **P3** Isolated chunks sit only on to_depopulate or sidelined; every other chunk sits on the
//!   slot its hints give (or slot 0 after a failed fit in slots 1–2); only fully free chunks sit
//!   on the free slot.
//! - **P4** Allocation never takes from to_depopulate (counted; stays 0).
//! - **P5** The first and reserved chunks are never isolated, depopulated or destroyed.
//! - **P6** After a balance pass, no fully free chunk other than the free slot's head survives
//!   without populated pages ([`PcpuAllocator::validate_settled`]).
//! - **P7** `Percpu:` = `nr_units × pcpu_nr_populated × PAGE_SIZE`, and exactly that many frames
//!   are held, flagged `PG_percpu`.
//! - **P8** An allocation's offset is the same in every unit; `bound_map` and `alloc_map` agree
//!   and `free_bytes` counts the clear bits.
//! - **P9** Hints never overstate free space (they may understate: the chunk's after frees, a
//!   block's in two corner cases of the kernel's update rules, see [`block`]); a page block's
//!   contig hint says "entirely free" exactly when it is.
//!
//! # Locks
//! ```text
//! pcpu_alloc_mutex (PcpuVm: frames; chunk create/destroy, populate/depopulate, balance work)
//!   └ pcpu_lock (PcpuState: table, lists, bitmaps, hints, counters, the isolated flag)
//!   └ pcp lock -> zone.lock      (page allocator, taken with pcpu_lock dropped)
//! ```
//! The free path and atomic allocations take only `pcpu_lock`. Functions that need a lock take
//! the data it protects (`&mut PcpuState`, `&mut PcpuVm`) as their proof.
//!
//! # Differences from Linux
//! - Units map 1:1 to possible CPUs: no groups, no padding units, no NUMA-aware unit placement
//!   (frames still come from the unit's CPU's node). The boot area is one whole unit per CPU
//!   (`static + reserved + dynamic = unit_size`), all of it counted in `Percpu:`.
//! - A chunk's bytes live in its own host mapping rather than a vmalloc area mapped onto its
//!   frames; frames carry the accounting (and `MemFree`), the mapping carries the data. The
//!   kernel-range TLB flush after depopulation is only counted.
//! - The balance work runs on a one-worker [`Workqueue`], not `system_wq`; `schedule_work`'s
//!   "already pending" is a flag cleared when the work starts.
//! - No memcg `obj_exts`, no alloc tagging, no `GFP_NOIO` context, no kmemleak; `free_percpu` of a
//!   bad pointer is an error value rather than a WARN.
//! - The kernel folds a free inside one block into the chunk hint with a block-relative end (so
//!   for blocks after the first only `first_free` moves); that quirk decides placement and is
//!   reproduced, see `PcpuChunk::block_update_hint_free`.
//! - The memcg chunk types of 5.9–5.13 (accounted allocations in separate chunks) are not
//!   modelled: one set of lists, as since 5.14.

mod balance;
mod bitmap;
pub mod block;
pub mod chunk;
mod region;
pub mod slots;
mod state;
mod stats;
#[cfg(test)]
mod test;
mod validate;
mod vm;

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Weak};

use crate::sync::class::{PCPU_ALLOC_MUTEX, PCPU_LOCK};
use crate::sync::{Mutex, SpinLock, SpinLockGuard};
use serde::Serialize;

pub use self::block::{PcpuBlockMd, PCPU_BITMAP_BLOCK_BITS};
pub use self::chunk::ChunkKind;
use self::chunk::PcpuChunk;
use self::region::PcpuRegion;
pub use self::slots::SlotLayout;
pub use self::state::PcpuCounters;
use self::state::PcpuState;
pub use self::stats::{PcpuChunkStats, PcpuStats};
use self::vm::PcpuVm;
use crate::addr::PAGE_SIZE;
use crate::config::PcpuConfig;
use crate::cpu::{CpuId, Cpus};
use crate::page_alloc::{Gfp, PhysMem};
use crate::sync::workqueue::{Workers, Workqueue};

/// `PCPU_MIN_ALLOC_SHIFT`: the allocation granule is 4 bytes.
pub const PCPU_MIN_ALLOC_SHIFT: u32 = 2;
/// `PCPU_MIN_ALLOC_SIZE`.
pub const PCPU_MIN_ALLOC_SIZE: u64 = 1 << PCPU_MIN_ALLOC_SHIFT;
/// `PCPU_MIN_UNIT_SIZE` (32 KiB): also the largest allocation.
pub const PCPU_MIN_UNIT_SIZE: u64 = 32 << 10;

/// When pages go back to the page allocator (`pcpu.depopulate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DepopulatePolicy {
    /// Before 5.14: only when a whole chunk is free and destroyed.
    WholeChunk,
    /// 5.14: isolate chunks with ≥ ¼ empty pages, depopulate them from the top, sideline them.
    Partial,
}

/// Why a percpu request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, thiserror::Error)]
pub enum PcpuError {
    /// Size 0 or above the limit (32 KiB or the unit size, whichever is smaller).
    #[error("illegal percpu allocation size {size}")]
    InvalidSize { size: u64 },
    /// Alignment not a power of two, or above `PAGE_SIZE`.
    #[error("illegal percpu alignment {align}")]
    InvalidAlign { align: u64 },
    /// No space: no chunk could be created or populated (`ENOMEM`), or an atomic request found
    /// no populated room, or the reserved chunk is full.
    #[error("percpu allocation failed: out of memory")]
    NoMem,
    /// The pointer names no live allocation (double free, stale pointer).
    #[error("not a live percpu allocation")]
    BadPointer,
    /// The CPU is not a possible CPU.
    #[error("not a possible CPU")]
    BadCpu,
}

impl From<PcpuError> for crate::error::Errno {
    fn from(e: PcpuError) -> crate::error::Errno {
        match e {
            PcpuError::NoMem => crate::error::Errno::ENOMEM,
            _ => crate::error::Errno::EINVAL,
        }
    }
}

/// A percpu pointer (`void __percpu *`): the same offset in every unit of one chunk.
///
/// It also carries the allocation's size, which the kernel recovers from `bound_map`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct PcpuPtr {
    chunk: u32,
    gen: u32,
    /// Byte offset from the chunk's base.
    off: u32,
    size: u32,
}

impl PcpuPtr {
    /// The requested size, rounded up to 4 bytes.
    pub fn size(&self) -> usize {
        self.size as usize
    }

    /// The chunk-relative byte offset (what `ptr - chunk->base_addr` is in the kernel).
    pub fn chunk_offset(&self) -> u32 {
        self.off
    }

    /// An id of the chunk, stable while the chunk lives (for tests and reports).
    pub fn chunk_id(&self) -> u32 {
        self.chunk
    }
}

/// One CPU's copy of an allocation: `per_cpu_ptr(ptr, cpu)`, as bytes.
///
/// Keeps the chunk's host memory alive; after the allocation is freed the bytes may be reused
/// by another allocation (as a dangling `per_cpu_ptr` would be in the kernel), but access stays
/// memory-safe.
#[derive(Debug, Clone)]
pub struct PcpuSlice {
    region: Arc<PcpuRegion>,
    start: usize,
    len: usize,
}

impl std::ops::Deref for PcpuSlice {
    type Target = [AtomicU8];
    fn deref(&self) -> &[AtomicU8] {
        self.region.bytes(self.start, self.len)
    }
}

impl PcpuSlice {
    /// Copy bytes `[off, off + buf.len())` of this CPU's copy into `buf`.
    pub fn read(&self, off: usize, buf: &mut [u8]) {
        let len = buf.len();
        for (d, s) in buf.iter_mut().zip(&self[off..off + len]) {
            *d = s.load(Ordering::Relaxed);
        }
    }

    /// Copy `data` into this CPU's copy at `off`.
    pub fn write(&self, off: usize, data: &[u8]) {
        for (s, d) in self[off..off + data.len()].iter().zip(data) {
            s.store(*d, Ordering::Relaxed);
        }
    }
}

/// The shared core: geometry, the two locks and what they protect.
#[derive(Debug)]
pub(crate) struct Pcpu {
    policy: DepopulatePolicy,
    /// `pcpu_unit_size`, `pcpu_unit_pages`, `pcpu_nr_units`.
    unit_size: u64,
    unit_pages: u32,
    nr_units: u32,
    static_size: u64,
    reserved_size: u64,
    /// `PCPU_EMPTY_POP_PAGES_LOW` / `_HIGH`.
    low: u32,
    high: u32,
    /// Largest request: `min(PCPU_MIN_UNIT_SIZE, unit_size)`.
    max_alloc: u64,
    layout: SlotLayout,
    cpus: Cpus,
    phys: Arc<PhysMem>,
    /// `pcpu_alloc_mutex`.
    alloc_mutex: Mutex<PcpuVm>,
    /// `pcpu_lock`.
    lock: SpinLock<PcpuState>,
    /// The work item is queued and has not started (`WORK_STRUCT_PENDING`).
    balance_pending: AtomicBool,
}

/// The percpu allocator of one machine.
///
/// See the [module documentation](self) for the model, the invariants and the locks.
#[derive(Debug)]
pub struct PcpuAllocator {
    /// Declared first so that dropping the allocator drains and joins the worker while the core
    /// is still alive.
    wq: Workqueue,
    inner: Arc<Pcpu>,
}

impl PcpuAllocator {
    /// `setup_per_cpu_areas` + `pcpu_setup_first_chunk`: one unit per possible CPU, the boot
    /// area populated from `phys`, the reserved and first chunks carved out of it. The balance
    /// worker is bound to CPU 0.
    ///
    /// Fails with [`PcpuError::NoMem`] when `phys` cannot back the boot area or the host refuses
    /// the mapping, and with [`PcpuError::InvalidSize`] on an impossible geometry.
    pub fn new(cfg: &PcpuConfig, cpus: Cpus, phys: Arc<PhysMem>) -> Result<Self, PcpuError> {
        Self::with_workers(cfg, cpus, phys, Workers::Host)
    }

    /// [`PcpuAllocator::new`] whose balance worker is of the given kind (a machine in virtual
    /// time: [`Workers::Virtual`]).
    pub fn with_workers(
        cfg: &PcpuConfig,
        cpus: Cpus,
        phys: Arc<PhysMem>,
        workers: Workers,
    ) -> Result<Self, PcpuError> {
        let unit_size = cfg.unit_size;
        if unit_size == 0
            || !unit_size.is_multiple_of(PAGE_SIZE)
            || cfg.static_size + cfg.reserved_size >= unit_size
            || unit_size > u32::MAX as u64 / 2
        {
            return Err(PcpuError::InvalidSize { size: unit_size });
        }
        let policy = if cfg.depopulate {
            DepopulatePolicy::Partial
        } else {
            DepopulatePolicy::WholeChunk
        };
        let layout = SlotLayout::new(unit_size);
        let nr_units = cpus.nr_possible() as u32;
        let inner = Arc::new(Pcpu {
            policy,
            unit_size,
            unit_pages: (unit_size / PAGE_SIZE) as u32,
            nr_units,
            static_size: cfg.static_size,
            reserved_size: cfg.reserved_size,
            low: cfg.empty_pop_pages_low,
            high: cfg.empty_pop_pages_high,
            max_alloc: PCPU_MIN_UNIT_SIZE.min(unit_size),
            layout,
            cpus,
            phys,
            alloc_mutex: Mutex::new(&PCPU_ALLOC_MUTEX, PcpuVm::default()),
            lock: SpinLock::new(&PCPU_LOCK, PcpuState::new(layout, cfg.empty_pop_pages_high)),
            balance_pending: AtomicBool::new(false),
        });
        inner.setup_first_chunk()?;
        let wq = Workqueue::with_workers("pcpu_balance", 1, vec![CpuId(0)], workers);
        Ok(Self { wq, inner })
    }

    pub fn policy(&self) -> DepopulatePolicy {
        self.inner.policy
    }

    /// `pcpu_nr_units`.
    pub fn nr_units(&self) -> usize {
        self.inner.nr_units as usize
    }

    /// `pcpu_unit_size`.
    pub fn unit_size(&self) -> u64 {
        self.inner.unit_size
    }

    pub fn slot_layout(&self) -> SlotLayout {
        self.inner.layout
    }

    /// `__alloc_percpu(size, align)` on `cpu`: `GFP_KERNEL`, zero-filled in every unit.
    #[doc(alias = "__alloc_percpu")]
    #[doc(alias = "pcpu_alloc")]
    pub fn alloc(&self, cpu: CpuId, size: usize, align: usize) -> Result<PcpuPtr, PcpuError> {
        self.alloc_gfp(cpu, size, align, Gfp::KERNEL)
    }

    /// `__alloc_percpu_gfp`: with [`Gfp::NOWAIT`] only already populated pages are used.
    #[doc(alias = "__alloc_percpu_gfp")]
    pub fn alloc_gfp(
        &self,
        cpu: CpuId,
        size: usize,
        align: usize,
        gfp: Gfp,
    ) -> Result<PcpuPtr, PcpuError> {
        self.pcpu_alloc(cpu, size as u64, align as u64, false, gfp)
    }

    /// `__alloc_reserved_percpu`: from the reserved chunk only.
    #[doc(alias = "__alloc_reserved_percpu")]
    pub fn alloc_reserved(
        &self,
        cpu: CpuId,
        size: usize,
        align: usize,
    ) -> Result<PcpuPtr, PcpuError> {
        self.pcpu_alloc(cpu, size as u64, align as u64, true, Gfp::KERNEL)
    }

    /// `pcpu_alloc_noprof`.
    fn pcpu_alloc(
        &self,
        cpu: CpuId,
        size: u64,
        align: u64,
        reserved: bool,
        gfp: Gfp,
    ) -> Result<PcpuPtr, PcpuError> {
        let p = &*self.inner;
        if cpu.index() >= p.nr_units as usize {
            return Err(PcpuError::BadCpu);
        }
        let align = align.max(PCPU_MIN_ALLOC_SIZE);
        let size = size.next_multiple_of(PCPU_MIN_ALLOC_SIZE);
        if size == 0 || size > p.max_alloc {
            return Err(PcpuError::InvalidSize { size });
        }
        if align > PAGE_SIZE || !align.is_power_of_two() {
            return Err(PcpuError::InvalidAlign { align });
        }
        let bits = (size >> PCPU_MIN_ALLOC_SHIFT) as u32;
        let bit_align = (align >> PCPU_MIN_ALLOC_SHIFT) as u32;
        let atomic = gfp.contains(Gfp::NOWAIT);

        // Lock order: pcpu_alloc_mutex -> pcpu_lock.
        let mut vm = (!atomic).then(|| p.alloc_mutex.lock());
        let mut st = p.lock.lock();

        let found = if reserved {
            let r = st.reserved;
            st.alloc_area(r, bits, bit_align, atomic)
                .map(|off| (r, off))
        } else {
            loop {
                if let Some(hit) = st.search_slots(size, bits, bit_align, atomic) {
                    break Some(hit);
                }
                let Some(vm) = vm.as_mut() else {
                    break None;
                };
                // No space left: make a chunk unless a free one appeared meanwhile, and retry.
                if st.lists.is_empty(st.layout.free) {
                    match SpinLockGuard::unlocked(&mut st, || p.create_chunk()) {
                        Ok((chunk, backing)) => {
                            let c = st.insert(chunk);
                            st.stats.chunks_created += 1;
                            p.attach_backing(vm, c, backing);
                            st.relocate(c, None);
                        }
                        Err(_) => break None,
                    }
                }
            }
        };
        let Some((c, off)) = found else {
            if atomic {
                st.stats.atomic_alloc_failures += 1;
                st.atomic_alloc_failed = true;
                drop(st);
                self.schedule_balance();
            } else {
                st.stats.alloc_failures += 1;
            }
            return Err(PcpuError::NoMem);
        };

        st.stats_area_alloc(c, size);
        let need_balance = st.nr_empty_pop_pages < p.low as i64;
        let chunk = st.chunk(c);
        let (gen, region, base_off) = (chunk.gen, Arc::clone(&chunk.region), chunk.base_off);

        // Populate what is not there yet, with the spinlock dropped.
        let page_start = off as u64 / PAGE_SIZE;
        let page_end = (off as u64 + size).div_ceil(PAGE_SIZE);
        let mut fresh = Vec::new();
        if let Some(vm) = vm.as_mut() {
            let ranges = st
                .chunk(c)
                .populated
                .clear_ranges(page_start as usize, page_end as usize);
            for (rs, re) in ranges {
                let (rs, re) = (rs as u32, re as u32);
                vm_warn_on!(st.chunk(c).immutable);
                match SpinLockGuard::unlocked(&mut st, || p.populate_chunk(vm, c, rs, re)) {
                    Ok(()) => {
                        st.chunk_populated(c, rs, re);
                        fresh.push((rs, re));
                    }
                    Err(_) => {
                        st.free_area(c, off);
                        st.stats.alloc_failures += 1;
                        return Err(PcpuError::NoMem);
                    }
                }
            }
        }
        drop(st);
        drop(vm);
        if need_balance {
            self.schedule_balance();
        }

        // Clear the area in every unit. Pages populated just now are zero already (and left
        // untouched, so the host does not commit them).
        for unit in 0..p.nr_units as u64 {
            let unit_base = (unit * p.unit_size + base_off) as usize;
            for page in page_start..page_end {
                let is_fresh = fresh
                    .iter()
                    .any(|&(rs, re)| page >= rs as u64 && page < re as u64);
                if is_fresh {
                    continue;
                }
                let lo = (off as u64).max(page * PAGE_SIZE);
                let hi = (off as u64 + size).min((page + 1) * PAGE_SIZE);
                region.zero(unit_base + lo as usize, (hi - lo) as usize);
            }
        }
        Ok(PcpuPtr {
            chunk: c,
            gen,
            off,
            size: size as u32,
        })
    }

    /// `free_percpu`: callable from any context (takes `pcpu_lock` only).
    #[doc(alias = "free_percpu")]
    pub fn free(&self, _cpu: CpuId, ptr: PcpuPtr) -> Result<(), PcpuError> {
        let p = &*self.inner;
        let mut st = p.lock.lock();
        let c = p.lookup(&st, &ptr)?;
        st.free_area(c, ptr.off);

        // Several fully free chunks: wake the reaper. Otherwise maybe isolate for reclaim (an
        // isolated chunk being reclaimed is left to the reclaim).
        let chunk = st.chunk(c);
        let need_balance = if !chunk.isolated && chunk.free_bytes as u64 == p.unit_size {
            st.other_free_chunk(c)
        } else if p.policy == DepopulatePolicy::Partial && st.should_reclaim(c) {
            st.isolate(c);
            true
        } else {
            false
        };
        drop(st);
        if need_balance {
            self.schedule_balance();
        }
        Ok(())
    }

    /// `per_cpu_ptr(ptr, cpu)`: `cpu`'s copy of the allocation.
    pub fn per_cpu_ptr(&self, ptr: PcpuPtr, cpu: CpuId) -> Result<PcpuSlice, PcpuError> {
        let p = &*self.inner;
        if cpu.index() >= p.nr_units as usize {
            return Err(PcpuError::BadCpu);
        }
        let st = p.lock.lock();
        let c = p.lookup(&st, &ptr)?;
        let chunk = st.chunk(c);
        let start = cpu.index() as u64 * p.unit_size + chunk.base_off + ptr.off as u64;
        Ok(PcpuSlice {
            region: Arc::clone(&chunk.region),
            start: start as usize,
            len: ptr.size as usize,
        })
    }

    /// `cpu`'s copy of `ptr`, once `[off, off + len)` is checked to lie inside it.
    fn per_cpu_range(
        &self,
        ptr: PcpuPtr,
        cpu: CpuId,
        off: usize,
        len: usize,
    ) -> Result<PcpuSlice, PcpuError> {
        if off + len > ptr.size() {
            return Err(PcpuError::InvalidSize {
                size: (off + len) as u64,
            });
        }
        self.per_cpu_ptr(ptr, cpu)
    }

    /// Write `data` at `off` into `cpu`'s copy of `ptr`.
    pub fn write(
        &self,
        ptr: PcpuPtr,
        cpu: CpuId,
        off: usize,
        data: &[u8],
    ) -> Result<(), PcpuError> {
        self.per_cpu_range(ptr, cpu, off, data.len())?
            .write(off, data);
        Ok(())
    }

    /// Read `buf.len()` bytes at `off` from `cpu`'s copy of `ptr`.
    pub fn read(
        &self,
        ptr: PcpuPtr,
        cpu: CpuId,
        off: usize,
        buf: &mut [u8],
    ) -> Result<(), PcpuError> {
        self.per_cpu_range(ptr, cpu, off, buf.len())?.read(off, buf);
        Ok(())
    }

    /// `pcpu_schedule_balance_work`: queue the balance work unless it is already pending.
    #[doc(alias = "pcpu_schedule_balance_work")]
    pub fn schedule_balance(&self) {
        if self.inner.balance_pending.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak: Weak<Pcpu> = Arc::downgrade(&self.inner);
        let _ = self.wq.queue(move |cpu| {
            if let Some(p) = weak.upgrade() {
                p.balance_pending.store(false, Ordering::Release);
                p.balance_workfn(cpu);
            }
        });
    }

    /// Wait until the balance work queued so far has run (the seed's `sleep 10`).
    #[doc(alias = "flush_work")]
    pub fn flush(&self) {
        self.wq.flush();
    }

    /// A virtual run is ending: its balance worker exits once idle (see
    /// [`Workqueue::end_run`]).
    pub fn end_run(&self) {
        self.wq.end_run();
    }

    /// `pcpu_nr_pages() × PAGE_SIZE`: what `/proc/meminfo` prints as `Percpu:` (in bytes).
    /// Populated page indexes × units × page size; chunk metadata is not included (as
    /// `pcpu_nr_pages` counts only populated pages, `mm/percpu.c`).
    #[doc(alias = "pcpu_nr_pages")]
    pub fn nr_populated_bytes(&self) -> u64 {
        let st = self.inner.lock.lock();
        st.nr_populated * self.inner.nr_units as u64 * PAGE_SIZE
    }

    /// `Percpu:` in kB.
    pub fn percpu_kb(&self) -> u64 {
        self.nr_populated_bytes() / 1024
    }

    /// The global `pcpu_nr_empty_pop_pages`.
    pub fn nr_empty_pop_pages(&self) -> i64 {
        self.inner.lock.lock().nr_empty_pop_pages
    }

    /// Panics caught in balance work items (should stay 0).
    pub fn balance_panics(&self) -> u64 {
        self.wq.stats().panicked
    }
}

impl Pcpu {
    /// `pcpu_setup_first_chunk`: frames for the boot area, then the reserved chunk (serving
    /// `[static, static + reserved)`) and the first chunk (serving the rest of the unit).
    fn setup_first_chunk(&self) -> Result<(), PcpuError> {
        let region = Arc::new(
            PcpuRegion::new((self.unit_size * self.nr_units as u64) as usize)
                .map_err(|_| PcpuError::NoMem)?,
        );
        let mut vm = self.alloc_mutex.lock();
        self.populate_boot_area(&mut vm)
            .map_err(|_| PcpuError::NoMem)?;
        let mut st = self.lock.lock();
        let dyn_at = self.static_size + self.reserved_size;
        let first = PcpuChunk::new_boot(
            ChunkKind::First,
            dyn_at,
            (self.unit_size - dyn_at) as u32,
            Arc::clone(&region),
            0,
        );
        st.first = st.insert(first);
        if self.reserved_size > 0 {
            let reserved = PcpuChunk::new_boot(
                ChunkKind::Reserved,
                self.static_size,
                self.reserved_size as u32,
                region,
                0,
            );
            st.reserved = st.insert(reserved);
        }
        let first = st.first;
        st.nr_empty_pop_pages = st.chunk(first).nr_empty_pop_pages as i64;
        st.nr_populated = self.unit_pages as u64;
        st.relocate(first, None);
        Ok(())
    }

    /// `pcpu_chunk_addr_search` + a liveness check: the chunk of a live allocation.
    fn lookup(&self, st: &PcpuState, ptr: &PcpuPtr) -> Result<u32, PcpuError> {
        let Some(Some(chunk)) = st.chunks.get(ptr.chunk as usize) else {
            return Err(PcpuError::BadPointer);
        };
        if chunk.gen != ptr.gen
            || chunk.allocation_at(ptr.off) != Some(ptr.size / PCPU_MIN_ALLOC_SIZE as u32)
        {
            return Err(PcpuError::BadPointer);
        }
        Ok(ptr.chunk)
    }
}

impl Drop for Pcpu {
    /// Give every frame back to the page allocator (the machine may outlive the allocator).
    fn drop(&mut self) {
        for pfn in self.alloc_mutex.get_mut().frames() {
            let _ = self
                .phys
                .free_pages(CpuId(0), pfn, crate::addr::Order::ZERO);
        }
    }
}
