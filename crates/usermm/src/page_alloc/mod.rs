//! Physical memory: the buddy allocator, per-CPU page lists, the per-node LRU, `release_pages`.
//!
//! Mirrors `mm/page_alloc.c` (`__rmqueue_smallest`, `expand`, `__free_one_page`,
//! `rmqueue_bulk`, `free_pcppages_bulk`, `free_unref_page_list`, `drain_all_pages`),
//! `include/linux/mmzone.h` (`struct zone`, `free_area`, `per_cpu_pages`) and `mm/swap.c`
//! (`lru_cache_add`, `lru_add_drain`, `release_pages`).
//!
//! ```text
//!  Node n ── Zone (ZONE_NORMAL) ── zone.lock ── free_area[0..=10] (buddy lists)
//!         │                    └── pcp[cpu]  ── lock, count, lists[order 0..=3, 9]
//!         └── lruvec ── lru_lock ── inactive_anon / unevictable
//!  per CPU: lru_add batch (PAGEVEC) ── drained into the lruvec of each page's node
//! ```
//!
//! # The free path (what teardown measures)
//! `release_pages(batch)`: for each page drop a reference; at zero, take the page's node
//! `lru_lock` (kept across consecutive pages of the same node, dropped every
//! `lru.lock_batch` pages as `SWAP_CLUSTER_MAX` does) and unlink it from the LRU; then
//! `free_unref_page_list`: each page goes to the freeing CPU's pcp list of its zone; when the
//! list reaches `pcp.high`, `pcp.batch` pages go back to the buddy under `zone.lock`, merging
//! with their buddies. `zone.lock` and `lru_lock` are the two global hot spots of Aaron Lu's
//! 2017 profiles, and the only shared locks on this path.
//!
//! # Who may free
//! Only the crate: `alloc_pages`, `free_pages`, `put_page`, `release_pages`, the LRU calls,
//! `split_compound` and the backing's writes are `pub(crate)`, because the mm keeps a frame's
//! references and mapcounts in step with the page tables that map it. A library user owns
//! frames through [`OwnedPages`] ([`PhysMem::alloc_owned`]), which frees them on drop; the
//! drains (`lru_add_drain[_all]`, `drain_all_pages`), the shrinkers and every read
//! (`meta(pfn)`, `nr_free_pages`, `lock_stats`, `validate`) stay public: none can break an
//! invariant.
//!
//! # Invariants (checked by [`PhysMem::validate`])
//! 1. Every frame is exactly one of: free in the buddy, on a pcp list, or allocated
//!    (see [`meta`]). Free blocks are aligned to their order and lie inside their zone.
//! 2. `free_pages` of a zone = Σ over its free lists of `len << order` = `nr_free_pages`.
//! 3. pcp `count` = Σ of its lists' pages; LRU list lengths = pages flagged `PG_lru`. With
//!    auto-tuning, a pcp's tuned `high` ≤ `high_max` and `free_count` < `batch << 5` + one THP.
//! 4. Compound heads carry `PG_head` and their order; each tail `PG_tail` and the head's PFN.
//!
//! # Locks
//! `pcp lock -> zone.lock`; `lru_add batch -> lru_lock`, and `lru_add batch -> pcp lock` when a
//! batch held a page's last reference (a batch is moved under its lock, as under the kernel's
//! `local_lock`); `lru_lock` is released before any pcp lock is taken. Allocation and freeing
//! never take an mm lock.
//!
//! # Differences from Linux
//! - One zone per node (ZONE_NORMAL); no migratetypes, watermarks, compaction or reclaim. An
//!   allocation that finds nothing drains every pcp list, runs the registered shrinkers (the
//!   huge zero page's) and retries once before failing with [`AllocError::NoMem`](crate::error::AllocError::NoMem).
//! - Every allocation of order ≥ 1 is a compound page (`__GFP_COMP`).
//! - pcp `high`/`batch` are fixed by default (v4.11: a drain frees `batch` pages at `high`).
//!   With `pcp.auto_tune` the free side of the 6.7+ tuning runs (see below); its `high_min` is
//!   the configured `pcp.high` rather than a share of the low watermark, and nothing decays
//!   `high` back (`decay_pcp_high` runs from the vmstat worker, which is not modelled; pages
//!   above `high_min` stay on the list until the next drain or `drain_all_pages`). The
//!   high-order `free_high` heuristic and `ZONE_BELOW_HIGH` (watermarks) are not modelled.
//!
//! # Memory policy (`mm.membind`, `MPOL_BIND` to one node)
//! The one policy modelled is `numactl --membind=N` on a task: [`PhysMem::alloc_pages`] (the
//! kernel's `alloc_pages_current` / `alloc_pages_vma`) then takes pages from node N's zone
//! alone — data pages, page tables, gather batch pages, whichever CPU the task runs on — and
//! fails when that zone has none after the drain and the shrinkers (the fault's
//! `VM_FAULT_OOM`; no other node gives a page). It binds memory, not CPUs. It is the machine's,
//! applying to every task (the engine's tasks are a workload's, all started under one
//! `numactl`); `alloc_pages_node` (the percpu allocator's pages, the zero page, the hugetlb
//! pool at boot) ignores it, as in the kernel. Frees are unaffected: a page goes back to its
//! own zone through the freeing CPU's pcp list of that zone.
//!
//! # Picking outside `zone.lock` (`pcp.pick_outside_lock`, v4.18–v5.17)
//! Aaron Lu's follow-up to the parallel-free series: a drain takes its pages off the pcp
//! lists first and holds `zone.lock` only for the buddy merges; v5.18 went back to one pass
//! under the lock. Off by default (the seeds' v4.11).
//!
//! # pcp auto-tuning (`pcp.auto_tune`, 6.7+: `nr_pcp_high`, `nr_pcp_free`)
//! Each free adds its pages to `pcp->free_count` (capped at `batch << PCP_BATCH_SCALE_MAX`);
//! each allocation halves it. When a list reaches `high` while frees keep coming, `high` is
//! raised to `free_count + batch` (up to `high_max`, an eighth of the zone split over the
//! node's CPUs), and the drain frees `clamp(free_count, batch, high - batch)` pages instead
//! of `batch`. A teardown that frees millions of pages thus takes `zone.lock` about 32 times
//! less often than v4.11 does — the allocator-side answer to the contention seeds 000/001
//! ran into (Dave Hansen's point in the review; Huang Ying's series).
//! - Pages are added to one anon LRU list; there is no active/inactive aging.

mod buddy;
mod hugetlb;
mod lru;
pub mod meta;
mod owned;
mod pcp;
mod release;
#[cfg(test)]
mod test;
mod validate;
mod zonemask;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};

use serde::Serialize;

pub use self::meta::PageMeta;
use self::meta::PfnList;
use self::meta::*;
pub use self::owned::OwnedPages;
use crate::addr::{Order, Pfn, HPAGE_PMD_ORDER, MAX_PAGE_ORDER, PAGE_SIZE};
use crate::backing::{Backing, ZeroedArray};
use crate::config::MachineConfig;
use crate::cpu::{CpuId, Cpus, NodeId, PerCpu};
use crate::stats::{LockStatSnapshot, VmItem, VmStat};
use crate::sync::class::{
    HUGETLB_LOCK, LRU_ADD_BATCH, LRU_LOCK, PCP_LOCK, SHRINKER_RWSEM, ZONE_LOCK,
};
use crate::sync::clock::LockstatClock;
use crate::sync::{RwSem, SpinClock, SpinLock, StatMutex};
use crate::vtime::lines::LineRuns;
use crate::vtime::{LineModel, Memmap, Touched};

/// Allocation flags (`gfp_t`), the few the engine distinguishes: one type for the page
/// allocator and the percpu allocator, as in the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Gfp(u32);

impl Gfp {
    /// `GFP_KERNEL`/`GFP_HIGHUSER_MOVABLE`: may drain and shrink before failing.
    pub const KERNEL: Gfp = Gfp(0);
    /// `__GFP_ZERO`: zero the frames (a real memset with full backing, skipped for frames no
    /// owner has had since the host gave them: see [`crate::backing`]).
    pub const ZERO: Gfp = Gfp(1);
    /// `GFP_NOWAIT`/`GFP_ATOMIC`: fail at once rather than drain or shrink (mmu_gather batch
    /// pages); to the percpu allocator, take only populated pages of existing chunks, under
    /// `pcpu_lock` only.
    pub const NOWAIT: Gfp = Gfp(2);
    /// `__GFP_ACCOUNT`: charged to a memory cgroup (the percpu allocator records it in its
    /// stats only).
    pub const ACCOUNT: Gfp = Gfp(4);

    pub const fn union(self, o: Gfp) -> Gfp {
        Gfp(self.0 | o.0)
    }

    /// Every flag of `o` is set.
    #[inline]
    pub fn contains(self, o: Gfp) -> bool {
        self.0 & o.0 == o.0
    }
}

/// Misuse of a page reference: what the kernel would `VM_BUG_ON_PAGE`. Never corrupts state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PageError {
    OutOfRange,
    /// The PFN is a tail of a compound page; free the head.
    TailPage,
    /// Free or put of a page whose refcount is already zero (double free).
    NotAllocated,
    /// The order does not match the allocation.
    BadOrder,
    /// The page is reserved (zero page) and is never freed.
    Reserved,
}

impl std::fmt::Display for PageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            PageError::OutOfRange => "pfn beyond the end of memory",
            PageError::TailPage => "freeing a tail page of a compound page",
            PageError::NotAllocated => "page is not allocated (double free?)",
            PageError::BadOrder => "order does not match the allocation",
            PageError::Reserved => "page is reserved",
        };
        f.write_str(s)
    }
}

impl std::error::Error for PageError {}

/// A memory shrinker (`struct shrinker`): asked to give memory back when an allocation fails.
pub trait Shrinker: Send + Sync {
    fn name(&self) -> &'static str;
    /// `count_objects`: how many pages a scan could free now.
    fn count(&self) -> u64;
    /// `scan_objects`: free what can be freed; returns pages freed.
    fn scan(&self, cpu: CpuId) -> u64;
}

const NR_PCP_LISTS: usize = 5;

/// `pcp_allowed_order`: orders 0..=3 (`PAGE_ALLOC_COSTLY_ORDER`) and the THP order.
#[inline]
fn pcp_index(order: Order) -> Option<usize> {
    match order.0 {
        0..=3 => Some(order.0 as usize),
        9 => Some(4),
        _ => None,
    }
}

/// `CONFIG_PCP_BATCH_SCALE_MAX`: a drain frees at most `batch << 5` pages.
pub const PCP_BATCH_SCALE_MAX: u32 = 5;
/// `MIN_PERCPU_PAGELIST_HIGH_FRACTION`: `high_max` is at most this fraction of the zone.
pub const MIN_PERCPU_PAGELIST_HIGH_FRACTION: u64 = 8;

/// `zone_highsize(.., MIN_PERCPU_PAGELIST_HIGH_FRACTION)`: an eighth of a zone's pages split
/// over the CPUs of its node, at least `4 × batch` and at least `pcp.high`.
fn pcp_high_max(cfg: &MachineConfig, frames_per_node: u64) -> u32 {
    let node_cpus = u64::from(cfg.cpus.div_ceil(cfg.nodes)).max(1);
    let h = frames_per_node / MIN_PERCPU_PAGELIST_HIGH_FRACTION / node_cpus;
    let h = h
        .max(u64::from(cfg.pcp.batch) << 2)
        .max(u64::from(cfg.pcp.high));
    h.min(u64::from(u32::MAX >> 1)) as u32
}

/// Host bytes of one zone's per-CPU page lists for one CPU (its cache-padded slot), for
/// [`crate::host_cost`].
pub(crate) fn pcp_slot_bytes() -> usize {
    std::mem::size_of::<crossbeam_utils::CachePadded<SpinLock<PerCpuPages>>>()
}

/// `struct per_cpu_pages`.
#[derive(Debug, Default)]
struct PerCpuPages {
    /// Pages (not blocks) on all lists.
    count: u32,
    /// `pcp->high` as tuned (auto-tune only; clamped into `high_min..=high_max` on use).
    high: u32,
    /// `pcp->free_count`: pages freed since allocations last halved it (auto-tune only).
    free_count: u32,
    /// Scratch list of a drain that picks its pages before taking `zone.lock` (kept to
    /// avoid an allocation per drain; always empty between drains).
    picked: Vec<(Pfn, Order)>,
    lists: [PfnList; NR_PCP_LISTS],
}

/// The buddy lists of a zone, under `zone.lock`.
///
/// In a virtual run its lines are v4.10's `zone->free_area[]`, not the engine's: each order's
/// `struct free_area` is `free_list[MIGRATE_TYPES]` (a 16-byte `list_head` each) then
/// `nr_free`, 104 bytes with the six migratetypes of a kernel with `CONFIG_CMA` and
/// `CONFIG_MEMORY_ISOLATION` (an assumption: the seed's config is not published; without CMA
/// an area is 88 bytes), the array starting on a line of its own (`ZONE_PADDING`). The
/// engine has no migratetypes: its lists are the `MIGRATE_MOVABLE` ones, where user pages
/// go. So a list operation prices its head as the line of `free_list[MIGRATE_MOVABLE]` of
/// its order ([`FreeArea::head_line`]), and every change of a list's length writes that
/// order's `nr_free` ([`FreeArea::nr_free_line`]), as `__free_one_page`, `__rmqueue_smallest`
/// and `expand` do: fifteen lines for the eleven orders, against one line per order before,
/// and the lines every holder of `zone->lock` writes.
#[derive(Debug, Default)]
struct FreeArea {
    lists: [PfnList; MAX_PAGE_ORDER as usize + 1],
}

/// v4.10's `struct free_area` in bytes: `free_list[6]` (16 bytes each) and `nr_free` (8).
const FREE_AREA_BYTES: usize = 6 * 16 + 8;
/// Offset of `free_list[MIGRATE_MOVABLE]` (migratetype 1) in a `struct free_area`.
const FREE_LIST_MOVABLE: usize = 16;
/// Offset of `nr_free` in a `struct free_area`.
const NR_FREE: usize = 6 * 16;
/// Tag of the line model's keys for v4.10's free-area lines (bit 62: no user-space address
/// has it, so no key of an engine list head takes it).
const FREE_AREA_KEY: usize = 1 << 62;
/// Tag of the line model's keys for a memcg's per-node LRU sizes (bit 61).
const LRU_SIZE_KEY: usize = 1 << 61;

impl FreeArea {
    /// The line model's key for line `line` of this zone's `free_area[]`: the area's address
    /// (unique per zone) shifted clear of the line index, tagged.
    #[inline(always)]
    fn line_key(&self, line: usize) -> usize {
        FREE_AREA_KEY | (std::ptr::from_ref(self) as usize) << 5 | line
    }

    /// The line of `free_area[order].free_list[MIGRATE_MOVABLE]`.
    #[inline(always)]
    fn head_line(&self, order: usize) -> usize {
        self.line_key((order * FREE_AREA_BYTES + FREE_LIST_MOVABLE) / 64)
    }

    /// The line of `free_area[order].nr_free`.
    #[inline(always)]
    fn nr_free_line(&self, order: usize) -> usize {
        self.line_key((order * FREE_AREA_BYTES + NR_FREE) / 64)
    }

    /// `area->nr_free++` or `--`: a store into the order's line, homed on `pfn`'s node (the
    /// zone's), whose value nothing after it waits for.
    #[inline(always)]
    fn touch_nr_free(&self, c: impl SpinClock, order: usize, pfn: Pfn) {
        c.mem_touch_line(|| self.nr_free_line(order), pfn, true);
    }

    /// `list_first_entry` + `list_del` + `nr_free--` on the order's list.
    #[inline]
    fn pop_front(&mut self, c: impl SpinClock, meta: &[PageMeta], order: usize) -> Option<Pfn> {
        let head = self.head_line(order);
        let pfn = self.lists[order].pop_front_at(c, meta, head)?;
        self.touch_nr_free(c, order, pfn);
        Some(pfn)
    }

    /// `list_add` + `nr_free++`.
    #[inline]
    fn push_front(&mut self, c: impl SpinClock, meta: &[PageMeta], order: usize, pfn: Pfn) {
        let head = self.head_line(order);
        self.lists[order].push_front_at(c, meta, pfn, head);
        self.touch_nr_free(c, order, pfn);
    }

    /// `list_add_tail` + `nr_free++`.
    #[inline]
    fn push_back(&mut self, c: impl SpinClock, meta: &[PageMeta], order: usize, pfn: Pfn) {
        let head = self.head_line(order);
        self.lists[order].push_back_at(c, meta, pfn, head);
        self.touch_nr_free(c, order, pfn);
    }

    /// `list_del` + `nr_free--` (a buddy taken off to merge).
    #[inline]
    fn remove(&mut self, c: impl SpinClock, meta: &[PageMeta], order: usize, pfn: Pfn) {
        let head = self.head_line(order);
        self.lists[order].remove_at(c, meta, pfn, head);
        self.touch_nr_free(c, order, pfn);
    }
}

#[derive(Debug)]
struct Zone {
    node: NodeId,
    start_pfn: u64,
    end_pfn: u64,
    /// `zone->lock`.
    lock: StatMutex<FreeArea>,
    /// `NR_FREE_PAGES` of this zone: pages in the buddy (not on pcp lists). Written under
    /// `lock`, read without it.
    free_pages: AtomicU64,
    pcp: PerCpu<SpinLock<PerCpuPages>>,
}

/// `struct lruvec` (anon only).
///
/// In a virtual run every add and delete also writes the line of the LRU sizes beside it:
/// v4.10's `update_lru_size` adds to the node's and the zone's per-CPU vmstat differentials
/// (this CPU's own lines) and, with `CONFIG_MEMCG`, to `mz->lru_zone_size[zid][lru]` of the
/// page's memcg per-node structure (`mem_cgroup_update_lru_size`), which follows the
/// 128-byte `lruvec` in `struct mem_cgroup_per_node`: `lru_zone_size[ZONE_NORMAL]` is its
/// fourth line, one line every CPU that adds or deletes on this node writes (all tasks in one
/// memcg, the root one here; memcg on as a distribution kernel has it, an assumption).
#[derive(Debug, Default)]
struct Lruvec {
    inactive_anon: PfnList,
    unevictable: PfnList,
}

impl Lruvec {
    /// `mem_cgroup_update_lru_size` (`*lru_size += nr_pages`): a store into the line of
    /// `lru_zone_size[ZONE_NORMAL]`, homed on `pfn`'s node, whose value nothing after it
    /// waits for (the kernel reads it back only for a warning).
    #[doc(alias = "mem_cgroup_update_lru_size")]
    #[inline(always)]
    fn touch_lru_size(&self, c: impl SpinClock, pfn: Pfn) {
        c.mem_touch_line(
            || LRU_SIZE_KEY | (std::ptr::from_ref(self) as usize) << 5 | 3,
            pfn,
            true,
        );
    }
}

#[derive(Debug)]
struct Node {
    zone: Zone,
    /// `lruvec->lru_lock` (the pgdat `lru_lock` of 2017).
    lru: StatMutex<Lruvec>,
}

/// Counts returned by [`PhysMem::validate`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PhysReport {
    pub total: u64,
    pub buddy_free: u64,
    pub pcp: u64,
    pub allocated: u64,
    pub on_lru: u64,
    pub hugetlb_pool: u64,
}

/// Lock statistics of the free path's shared locks, per node.
#[derive(Debug, Clone, Serialize)]
pub struct PhysLockStats {
    pub zone_lock: Vec<LockStatSnapshot>,
    pub lru_lock: Vec<LockStatSnapshot>,
}

/// All physical memory of one machine.
pub struct PhysMem {
    nr_frames: u64,
    meta: ZeroedArray<PageMeta>,
    backing: Backing,
    cpus: Cpus,
    nodes: Box<[Node]>,
    frames_per_node: u64,
    /// `pcp->high` (v4.11), or `high_min` with auto-tuning.
    pcp_high: u32,
    /// `high_max` of the auto-tuning (= `pcp_high` without it).
    pcp_high_max: u32,
    pcp_auto_tune: bool,
    pcp_pick_outside_lock: bool,
    pcp_batch: u32,
    lru_add_batch: usize,
    lru_lock_batch: u32,
    lru_add: PerCpu<SpinLock<Vec<Pfn>>>,
    hugetlb_pool: SpinLock<Vec<Pfn>>,
    hugetlb_total: u64,
    shrinkers: RwSem<Vec<Weak<dyn Shrinker>>>,
    stat: Arc<VmStat>,
    /// Which zones can serve an allocation (the zonelist walk's index).
    zone_mask: zonemask::ZoneMask,
    /// `mm.membind`: the one node a task's allocations may come from (`MPOL_BIND`), resolved
    /// once here; `None`: the zonelist of the allocating CPU's node.
    membind: Option<usize>,
    /// Runs of the virtual-time line model on this memmap so far: the next one's generation
    /// comes from it (`vtime/memory.rs`, `PageMeta::line`). Not a figure: only a virtual
    /// machine's runs count it.
    line_runs: LineRuns,
}

impl std::fmt::Debug for PhysMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhysMem")
            .field("nr_frames", &self.nr_frames)
            .field("nodes", &self.nodes.len())
            .finish_non_exhaustive()
    }
}

impl PhysMem {
    /// Build the zones and free every frame into the buddy (`memblock_free_all`), then fill
    /// the hugetlb pool.
    pub fn new(cfg: &MachineConfig, cpus: Cpus, stat: Arc<VmStat>) -> std::io::Result<Self> {
        let nr_frames = cfg.mem / PAGE_SIZE;
        let nr_nodes = cfg.nodes as u64;
        let frames_per_node = nr_frames / nr_nodes;
        let meta = ZeroedArray::<PageMeta>::new(nr_frames as usize)?;
        let backing = Backing::new(nr_frames, cfg.backing)?;
        if cfg.prefault {
            backing.prefault()?;
        }
        // Every lock of a virtual machine is used in its runs: lock_stat stamps on `now`.
        let virtual_time = cfg.time.mode == crate::config::TimeMode::Virtual;
        let nodes = (0..nr_nodes)
            .map(|n| {
                let start = n * frames_per_node;
                let end = if n + 1 == nr_nodes {
                    nr_frames
                } else {
                    start + frames_per_node
                };
                Node {
                    zone: Zone {
                        node: NodeId(n as u16),
                        start_pfn: start,
                        end_pfn: end,
                        lock: StatMutex::with_clock(
                            &ZONE_LOCK,
                            "&zone->lock",
                            FreeArea::default(),
                            LockstatClock::for_machine(virtual_time),
                        ),
                        free_pages: AtomicU64::new(0),
                        pcp: PerCpu::new(cpus.nr_possible(), |_| {
                            SpinLock::new(&PCP_LOCK, PerCpuPages::default())
                        }),
                    },
                    lru: StatMutex::with_clock(
                        &LRU_LOCK,
                        "&lruvec->lru_lock",
                        Lruvec::default(),
                        LockstatClock::for_machine(virtual_time),
                    ),
                }
            })
            .collect();
        let lru_add_batch = cfg.lru.add_batch as usize;
        let zone_mask =
            zonemask::ZoneMask::new(nr_nodes as usize, cpus.nr_possible(), cpus.nr_phys());
        let pm = PhysMem {
            nr_frames,
            meta,
            backing,
            lru_add: PerCpu::new(cpus.nr_possible(), |_| {
                SpinLock::new(&LRU_ADD_BATCH, Vec::with_capacity(lru_add_batch))
            }),
            cpus,
            nodes,
            frames_per_node,
            pcp_high: cfg.pcp.high,
            pcp_high_max: if cfg.pcp.auto_tune {
                pcp_high_max(cfg, frames_per_node)
            } else {
                cfg.pcp.high
            },
            pcp_auto_tune: cfg.pcp.auto_tune,
            pcp_pick_outside_lock: cfg.pcp.pick_outside_lock,
            pcp_batch: cfg.pcp.batch,
            lru_add_batch,
            lru_lock_batch: cfg.lru.lock_batch,
            hugetlb_pool: SpinLock::new(&HUGETLB_LOCK, Vec::new()),
            hugetlb_total: cfg.nr_hugepages as u64,
            shrinkers: RwSem::new(&SHRINKER_RWSEM, Vec::new()),
            stat,
            zone_mask,
            membind: cfg.mm.membind.map(usize::from),
            line_runs: LineRuns::default(),
        };
        for node in pm.nodes.iter() {
            pm.free_range_boot(&node.zone);
        }
        let cpu0 = CpuId(0);
        for _ in 0..cfg.nr_hugepages {
            let pfn = pm
                .alloc_pages_node(cpu0, HPAGE_PMD_ORDER, Gfp::NOWAIT)
                .map_err(|_| std::io::Error::other("cannot fill the hugetlb pool"))?;
            let m = pm.meta(pfn);
            m.set(PG_HUGETLB);
            m.refcount.store(0, Relaxed);
            pm.stat.add(cpu0, VmItem::HtlbBuddyAllocSuccess, 1);
            pm.hugetlb_pool.lock().push(pfn);
        }
        Ok(pm)
    }

    /// Free a zone's whole range into the buddy in the largest aligned blocks that fit.
    fn free_range_boot(&self, zone: &Zone) {
        let mut fa = zone.lock.lock();
        let mut pfn = zone.start_pfn;
        let mut freed = 0;
        while pfn < zone.end_pfn {
            let mut order = (pfn.trailing_zeros() as u8).min(MAX_PAGE_ORDER);
            while pfn + (1 << order) > zone.end_pfn {
                order -= 1;
            }
            let m = self.meta(Pfn(pfn));
            m.flags.store(PG_BUDDY, Relaxed);
            m.private.store(order as u32, Relaxed);
            fa.lists[order as usize].push_back(self.meta_slice(), Pfn(pfn));
            freed += 1u64 << order;
            pfn += 1 << order;
        }
        zone.free_pages.fetch_add(freed, Relaxed);
        self.zone_mask
            .set_buddy(zone.node.index(), zone.free_pages.load(Relaxed) > 0);
        self.stat.add(CpuId(0), VmItem::NrFreePages, freed as i64);
    }

    // ----- accessors -------------------------------------------------------------------

    #[inline]
    pub fn nr_frames(&self) -> u64 {
        self.nr_frames
    }

    #[inline]
    fn meta_slice(&self) -> &[PageMeta] {
        self.meta.as_slice()
    }

    /// The metadata of a frame (`pfn_to_page`). Panics on a PFN beyond memory: callers inside
    /// the engine only hold PFNs the allocator gave them.
    #[inline]
    pub fn meta(&self, pfn: Pfn) -> &PageMeta {
        &self.meta_slice()[pfn.index()]
    }

    pub fn backing(&self) -> &Backing {
        &self.backing
    }

    pub fn cpus(&self) -> &Cpus {
        &self.cpus
    }

    pub fn stat(&self) -> &VmStat {
        &self.stat
    }

    /// Frames per node: the node of a frame is its PFN divided by it (the last node takes the
    /// remainder).
    pub fn frames_per_node(&self) -> u64 {
        self.frames_per_node
    }

    #[doc(alias = "page_to_nid")]
    #[inline]
    pub fn node_of(&self, pfn: Pfn) -> usize {
        ((pfn.0 / self.frames_per_node) as usize).min(self.nodes.len() - 1)
    }

    /// `NR_FREE_PAGES`: pages free in the buddy of every zone (pcp lists excluded).
    pub fn nr_free_pages(&self) -> u64 {
        self.nodes
            .iter()
            .map(|n| n.zone.free_pages.load(Relaxed))
            .sum()
    }

    /// `NR_FREE_PAGES` of node `node`'s zone (`None`: no such node).
    pub fn node_free_pages(&self, node: usize) -> Option<u64> {
        self.nodes
            .get(node)
            .map(|n| n.zone.free_pages.load(Relaxed))
    }

    /// Pages sitting on per-CPU lists.
    pub fn nr_pcp_pages(&self) -> u64 {
        self.nodes
            .iter()
            .flat_map(|n| n.zone.pcp.iter())
            .map(|p| p.lock().count as u64)
            .sum()
    }

    pub fn lock_stats(&self) -> PhysLockStats {
        PhysLockStats {
            zone_lock: self
                .nodes
                .iter()
                .map(|n| n.zone.lock.stat().snapshot())
                .collect(),
            lru_lock: self.nodes.iter().map(|n| n.lru.stat().snapshot()).collect(),
        }
    }

    pub fn reset_lock_stats(&self) {
        for n in self.nodes.iter() {
            n.zone.lock.stat().reset();
            n.lru.stat().reset();
        }
    }

    /// `register_shrinker`. The allocator keeps a weak reference.
    pub fn register_shrinker(&self, s: Weak<dyn Shrinker>) {
        self.shrinkers.write().push(s);
    }

    /// Run every shrinker once (`drop_caches`-like / allocation pressure); pages freed.
    #[doc(alias = "shrink_slab")]
    pub fn shrink_all(&self, cpu: CpuId) -> u64 {
        let list: Vec<_> = self
            .shrinkers
            .read()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        list.iter()
            .filter(|s| s.count() > 0)
            .map(|s| s.scan(cpu))
            .sum()
    }
}

/// A virtual machine's memmap, to the line model: its `PageMeta`s keep the `struct page`
/// lines' states, and it counts the model's runs (`vtime/lines.rs`).
impl Memmap for PhysMem {
    fn next_line_run(&self) -> u64 {
        self.line_runs.next()
    }

    fn clear_lines(&self) {
        for m in self.meta_slice() {
            m.line.clear();
        }
    }

    #[inline]
    fn touch_all(
        &self,
        model: &mut LineModel,
        cpu: usize,
        touches: &[std::cell::Cell<Touched>],
    ) -> u64 {
        model.touch_all(self.meta_slice(), cpu, touches)
    }
}
