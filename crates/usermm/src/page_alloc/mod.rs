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
//! # Invariants (checked by [`PhysMem::validate`])
//! 1. Every frame is exactly one of: free in the buddy, on a pcp list, or allocated
//!    (see [`meta`]). Free blocks are aligned to their order and lie inside their zone.
//! 2. `free_pages` of a zone = Σ over its free lists of `len << order` = `nr_free_pages`.
//! 3. pcp `count` = Σ of its lists' pages; LRU list lengths = pages flagged `PG_lru`. With
//!    auto-tuning, a pcp's tuned `high` ≤ `high_max` and `free_count` < `batch << 5` + one THP.
//! 4. Compound heads carry `PG_head` and their order; each tail `PG_tail` and the head's PFN.
//!
//! # Locks
//! `pcp lock -> zone.lock`; `lru_add batch -> lru_lock`; `lru_lock` is released before any
//! pcp lock is taken. Allocation and freeing never take an mm lock.
//!
//! # Differences from Linux
//! - One zone per node (ZONE_NORMAL); no migratetypes, watermarks, compaction or reclaim. An
//!   allocation that finds nothing drains every pcp list, runs the registered shrinkers (the
//!   huge zero page's) and retries once before failing with [`AllocError::NoMem`].
//! - Every allocation of order ≥ 1 is a compound page (`__GFP_COMP`).
//! - pcp `high`/`batch` are fixed by default (v4.11: a drain frees `batch` pages at `high`).
//!   With `pcp.auto_tune` the free side of the 6.7+ tuning runs (see below); its `high_min` is
//!   the configured `pcp.high` rather than a share of the low watermark, and nothing decays
//!   `high` back (`decay_pcp_high` runs from the vmstat worker, which is not modelled; pages
//!   above `high_min` stay on the list until the next drain or `drain_all_pages`). The
//!   high-order `free_high` heuristic and `ZONE_BELOW_HIGH` (watermarks) are not modelled.
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

pub mod meta;
#[cfg(test)]
mod test;

use std::sync::atomic::{AtomicU64, Ordering::AcqRel, Ordering::Relaxed};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};
use serde::Serialize;

use self::meta::*;
pub use self::meta::{PageMeta, PfnList};
use crate::addr::{Order, Pfn, HPAGE_PMD_ORDER, MAX_PAGE_ORDER, PAGE_SIZE};
use crate::backing::{Backing, ZeroedArray};
use crate::config::MachineConfig;
use crate::cpu::{CpuId, Cpus, NodeId, PerCpu};
use crate::error::AllocError;
use crate::stats::{LockStatSnapshot, StatMutex, VmItem, VmStat};

/// Allocation flags (`gfp_t`), the few the engine distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gfp(u32);

impl Gfp {
    /// `GFP_KERNEL`/`GFP_HIGHUSER_MOVABLE`: may drain and shrink before failing.
    pub const KERNEL: Gfp = Gfp(0);
    /// `__GFP_ZERO`: zero the frames (a real memset with full backing).
    pub const ZERO: Gfp = Gfp(1);
    /// `GFP_NOWAIT`: fail at once rather than drain or shrink (mmu_gather batch pages).
    pub const NOWAIT: Gfp = Gfp(2);

    pub const fn union(self, o: Gfp) -> Gfp {
        Gfp(self.0 | o.0)
    }
    #[inline]
    fn has(self, o: Gfp) -> bool {
        self.0 & o.0 != 0
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
#[derive(Debug, Default)]
struct FreeArea {
    lists: [PfnList; MAX_PAGE_ORDER as usize + 1],
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
    pcp: PerCpu<Mutex<PerCpuPages>>,
}

/// `struct lruvec` (anon only).
#[derive(Debug, Default)]
struct Lruvec {
    inactive_anon: PfnList,
    unevictable: PfnList,
}

#[derive(Debug)]
struct Node {
    zone: Zone,
    /// `lruvec->lru_lock` (the pgdat `lru_lock` of 2017).
    lru: StatMutex<Lruvec>,
    /// Zonelist: this node first, then the others.
    fallback: Box<[NodeId]>,
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
    lru_add: PerCpu<Mutex<Vec<Pfn>>>,
    hugetlb_pool: Mutex<Vec<Pfn>>,
    hugetlb_total: u64,
    shrinkers: RwLock<Vec<Weak<dyn Shrinker>>>,
    stat: Arc<VmStat>,
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
        let nodes = (0..nr_nodes)
            .map(|n| {
                let start = n * frames_per_node;
                let end = if n + 1 == nr_nodes {
                    nr_frames
                } else {
                    start + frames_per_node
                };
                let fallback = std::iter::once(n)
                    .chain((0..nr_nodes).filter(|&o| o != n))
                    .map(|o| NodeId(o as u16))
                    .collect();
                Node {
                    zone: Zone {
                        node: NodeId(n as u16),
                        start_pfn: start,
                        end_pfn: end,
                        lock: StatMutex::new("&zone->lock", FreeArea::default()),
                        free_pages: AtomicU64::new(0),
                        pcp: PerCpu::new(cpus.nr_possible(), |_| Mutex::default()),
                    },
                    lru: StatMutex::new("&lruvec->lru_lock", Lruvec::default()),
                    fallback,
                }
            })
            .collect();
        let lru_add_batch = cfg.lru.add_batch as usize;
        let pm = PhysMem {
            nr_frames,
            meta,
            backing,
            lru_add: PerCpu::new(cpus.nr_possible(), |_| {
                Mutex::new(Vec::with_capacity(lru_add_batch))
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
            hugetlb_pool: Mutex::new(Vec::new()),
            hugetlb_total: cfg.nr_hugepages as u64,
            shrinkers: RwLock::new(Vec::new()),
            stat,
        };
        for node in pm.nodes.iter() {
            pm.free_range_boot(&node.zone);
        }
        let cpu0 = CpuId(0);
        for _ in 0..cfg.nr_hugepages {
            let pfn = pm
                .alloc_pages(cpu0, HPAGE_PMD_ORDER, Gfp::NOWAIT)
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

    /// Pages sitting on per-CPU lists.
    pub fn nr_pcp_pages(&self) -> u64 {
        self.nodes
            .iter()
            .flat_map(|n| n.zone.pcp.iter())
            .map(|p| p.lock().count as u64)
            .sum()
    }

    pub fn hugetlb_total(&self) -> u64 {
        self.hugetlb_total
    }

    pub fn hugetlb_free(&self) -> u64 {
        self.hugetlb_pool.lock().len() as u64
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

    // ----- buddy ------------------------------------------------------------------------

    /// `__rmqueue_smallest` + `expand`. Caller holds `zone.lock`.
    fn rmqueue_smallest(&self, zone: &Zone, fa: &mut FreeArea, order: Order) -> Option<Pfn> {
        let meta = self.meta_slice();
        for cur in order.0..=MAX_PAGE_ORDER {
            if let Some(pfn) = fa.lists[cur as usize].pop_front(meta) {
                let m = &meta[pfn.index()];
                m.flags.store(0, Relaxed);
                m.private.store(0, Relaxed);
                // expand(): hand the upper halves back, largest first.
                let mut high = cur;
                while high > order.0 {
                    high -= 1;
                    let half = pfn.add(1 << high);
                    let hm = &meta[half.index()];
                    hm.flags.store(PG_BUDDY, Relaxed);
                    hm.private.store(high as u32, Relaxed);
                    fa.lists[high as usize].push_front(meta, half);
                }
                // Written only under zone.lock (held): a plain update, no locked RMW.
                let nr = zone.free_pages.load(Relaxed) - order.nr_pages();
                zone.free_pages.store(nr, Relaxed);
                return Some(pfn);
            }
        }
        None
    }

    /// `__free_one_page`: merge with free buddies and put the block on its free list.
    /// The frames' metadata must already be clean. Caller holds `zone.lock`.
    fn free_one_page_locked(&self, zone: &Zone, fa: &mut FreeArea, pfn: Pfn, order: Order) {
        let meta = self.meta_slice();
        let (mut pfn, mut order) = (pfn.0, order.0);
        // Written only under zone.lock (held): a plain update, no locked RMW per page.
        zone.free_pages
            .store(zone.free_pages.load(Relaxed) + (1 << order), Relaxed);
        while order < MAX_PAGE_ORDER {
            let buddy = pfn ^ (1 << order);
            if buddy < zone.start_pfn || buddy + (1 << order) > zone.end_pfn {
                break;
            }
            let bm = &meta[buddy as usize];
            if bm.flags.load(Relaxed) != PG_BUDDY || bm.private.load(Relaxed) != order as u32 {
                break;
            }
            fa.lists[order as usize].remove(meta, Pfn(buddy));
            bm.flags.store(0, Relaxed);
            bm.private.store(0, Relaxed);
            pfn &= buddy;
            order += 1;
        }
        let m = &meta[pfn as usize];
        m.flags.store(PG_BUDDY, Relaxed);
        m.private.store(order as u32, Relaxed);
        fa.lists[order as usize].push_front(meta, Pfn(pfn));
    }

    // ----- per-CPU lists ----------------------------------------------------------------

    /// `free_pcppages_bulk`: move `count` pages from a pcp to the buddy, oldest first,
    /// round-robin over the lists. Caller holds the pcp lock; takes `zone.lock`. With
    /// `pcp.pick_outside_lock` (v4.18–v5.17, Aaron Lu's follow-up to seeds 000/001) the pages
    /// are taken off the pcp lists first and `zone.lock` covers only the merges.
    fn free_pcppages_bulk(&self, cpu: CpuId, zone: &Zone, pcp: &mut PerCpuPages, count: u32) {
        let meta = self.meta_slice();
        let mut todo = count.min(pcp.count) as i64;
        let mut idx = 0;
        let mut freed = 0u64;
        let mut pick = |pcp: &mut PerCpuPages| {
            let list = (0..NR_PCP_LISTS)
                .map(|i| (idx + i) % NR_PCP_LISTS)
                .find(|&i| !pcp.lists[i].is_empty())
                .expect("pcp count > 0 with empty lists");
            idx = list + 1;
            let pfn = pcp.lists[list].pop_back(meta).expect("non-empty");
            let m = &meta[pfn.index()];
            let order = Order(m.order.load(Relaxed));
            m.flags.store(0, Relaxed);
            m.order.store(0, Relaxed);
            pcp.count -= order.nr_pages() as u32;
            (pfn, order)
        };
        if self.pcp_pick_outside_lock {
            let mut picked = std::mem::take(&mut pcp.picked);
            while todo > 0 && pcp.count > 0 {
                let (pfn, order) = pick(pcp);
                todo -= order.nr_pages() as i64;
                freed += order.nr_pages();
                picked.push((pfn, order));
            }
            // Lock order: pcp lock -> zone.lock
            let mut fa = zone.lock.lock();
            for &(pfn, order) in &picked {
                self.free_one_page_locked(zone, &mut fa, pfn, order);
            }
            drop(fa);
            picked.clear();
            pcp.picked = picked;
        } else {
            // Lock order: pcp lock -> zone.lock
            let mut fa = zone.lock.lock();
            while todo > 0 && pcp.count > 0 {
                let (pfn, order) = pick(pcp);
                todo -= order.nr_pages() as i64;
                freed += order.nr_pages();
                self.free_one_page_locked(zone, &mut fa, pfn, order);
            }
            drop(fa);
        }
        self.stat.add(cpu, VmItem::NrFreePages, freed as i64);
        self.stat.inc(cpu, VmItem::PcpDrain);
    }

    /// `free_unref_page_commit`: put a clean block on this CPU's pcp list; drain when high.
    #[inline]
    fn pcp_commit(&self, cpu: CpuId, zone: &Zone, pcp: &mut PerCpuPages, pfn: Pfn, o: Order) {
        let idx = pcp_index(o).expect("pcp order");
        let m = self.meta(pfn);
        m.flags.store(PG_PCP, Relaxed);
        m.order.store(o.0, Relaxed);
        pcp.lists[idx].push_front(self.meta_slice(), pfn);
        let nr = o.nr_pages() as u32;
        pcp.count += nr;
        if !self.pcp_auto_tune {
            if pcp.count >= self.pcp_high {
                self.free_pcppages_bulk(cpu, zone, pcp, self.pcp_batch);
            }
            return;
        }
        if pcp.free_count < self.pcp_batch << PCP_BATCH_SCALE_MAX {
            pcp.free_count += nr;
        }
        let high = self.nr_pcp_high(pcp);
        if pcp.count >= high {
            let n = self.nr_pcp_free(pcp, high);
            self.free_pcppages_bulk(cpu, zone, pcp, n);
        }
    }

    /// `nr_pcp_high`: the `high` this free is checked against; raise the tuned `high` when
    /// the list is full while frees keep coming, so the next drain can free `free_count`.
    fn nr_pcp_high(&self, pcp: &mut PerCpuPages) -> u32 {
        let (min, max) = (self.pcp_high, self.pcp_high_max);
        let high = pcp.high.clamp(min, max);
        pcp.high = high;
        if min == max {
            return high;
        }
        if pcp.count >= high {
            let need = pcp.free_count + self.pcp_batch;
            if pcp.high < need {
                pcp.high = need.clamp(min, max);
            }
        }
        high
    }

    /// `nr_pcp_free`: pages a drain returns: the run of consecutive frees, at least `batch`,
    /// leaving at least `batch` on the list.
    fn nr_pcp_free(&self, pcp: &PerCpuPages, high: u32) -> u32 {
        let batch = self.pcp_batch;
        if high < batch {
            return 1;
        }
        // clamp_t order: max first, then min (no panic when high - batch < batch).
        pcp.free_count.max(batch).min(high - batch)
    }

    /// `rmqueue_pcplist`: take a block from this CPU's list, refilling it from the buddy with
    /// `batch` pages when empty.
    fn rmqueue_pcplist(&self, cpu: CpuId, zone: &Zone, order: Order, idx: usize) -> Option<Pfn> {
        let meta = self.meta_slice();
        let mut pcp = zone.pcp[cpu].lock();
        // An allocation ends a run of frees: drains shrink back towards `batch`.
        pcp.free_count >>= 1;
        if pcp.lists[idx].is_empty() {
            let blocks = if order.0 == 0 {
                self.pcp_batch
            } else {
                (self.pcp_batch >> order.0).max(2)
            };
            // The lockless check of zone_watermark_fast (with a watermark of 0): an exhausted
            // zone is skipped without taking its lock, or every allocation that falls back to
            // another node would first take the full node's zone.lock.
            if zone.free_pages.load(Relaxed) == 0 {
                return None;
            }
            // Lock order: pcp lock -> zone.lock
            let mut fa = zone.lock.lock();
            let mut got = 0u64;
            for _ in 0..blocks {
                let Some(pfn) = self.rmqueue_smallest(zone, &mut fa, order) else {
                    break;
                };
                let m = &meta[pfn.index()];
                m.flags.store(PG_PCP, Relaxed);
                m.order.store(order.0, Relaxed);
                pcp.lists[idx].push_back(meta, pfn);
                pcp.count += order.nr_pages() as u32;
                got += order.nr_pages();
            }
            drop(fa);
            if got == 0 {
                return None;
            }
            self.stat.add(cpu, VmItem::NrFreePages, -(got as i64));
            self.stat.inc(cpu, VmItem::PcpRefill);
        }
        let pfn = pcp.lists[idx].pop_front(meta)?;
        pcp.count -= order.nr_pages() as u32;
        let m = &meta[pfn.index()];
        m.flags.store(0, Relaxed);
        m.order.store(0, Relaxed);
        Some(pfn)
    }

    /// `drain_all_pages`: return every CPU's pcp pages to the buddy.
    pub fn drain_all_pages(&self) {
        for node in self.nodes.iter() {
            for cpu in self.cpus.all() {
                let mut pcp = node.zone.pcp[cpu].lock();
                let n = pcp.count;
                if n > 0 {
                    self.free_pcppages_bulk(cpu, &node.zone, &mut pcp, n);
                }
            }
        }
    }

    // ----- allocation -------------------------------------------------------------------

    /// `alloc_pages(gfp, order)` on `cpu`: the local node first, then the others; on failure
    /// (unless `NOWAIT`) drain the pcp lists, run the shrinkers and try once more.
    #[doc(alias = "__alloc_pages")]
    pub fn alloc_pages(&self, cpu: CpuId, order: Order, gfp: Gfp) -> Result<Pfn, AllocError> {
        if order.0 > MAX_PAGE_ORDER {
            return Err(AllocError::BadOrder);
        }
        let pfn = match self.get_page_from_freelist(cpu, order) {
            Some(p) => p,
            None if gfp.has(Gfp::NOWAIT) => return Err(AllocError::NoMem),
            None => {
                // __alloc_pages_slowpath, reduced: drain, shrink, retry.
                self.lru_add_drain_all();
                self.drain_all_pages();
                self.shrink_all(cpu);
                self.drain_all_pages();
                self.get_page_from_freelist(cpu, order)
                    .ok_or(AllocError::NoMem)?
            }
        };
        self.prep_new_page(pfn, order);
        if gfp.has(Gfp::ZERO) {
            self.backing.zero_data(pfn, order.nr_pages());
        }
        self.stat
            .add(cpu, VmItem::PgallocNormal, order.nr_pages() as i64);
        Ok(pfn)
    }

    fn get_page_from_freelist(&self, cpu: CpuId, order: Order) -> Option<Pfn> {
        let local = self.cpus.node_of(cpu).index().min(self.nodes.len() - 1);
        for nid in self.nodes[local].fallback.iter() {
            let zone = &self.nodes[nid.index()].zone;
            let got = match pcp_index(order) {
                Some(idx) => self.rmqueue_pcplist(cpu, zone, order, idx),
                None if zone.free_pages.load(Relaxed) < order.nr_pages() => None,
                None => {
                    let mut fa = zone.lock.lock();
                    let p = self.rmqueue_smallest(zone, &mut fa, order);
                    drop(fa);
                    if p.is_some() {
                        self.stat
                            .add(cpu, VmItem::NrFreePages, -(order.nr_pages() as i64));
                    }
                    p
                }
            };
            if got.is_some() {
                return got;
            }
        }
        None
    }

    /// `prep_new_page` + `prep_compound_page`.
    fn prep_new_page(&self, pfn: Pfn, order: Order) {
        let m = self.meta(pfn);
        m.mapcount.store(0, Relaxed);
        m.private.store(0, Relaxed);
        m.pt_entries.store(0, Relaxed);
        if order.0 > 0 {
            m.flags.store(PG_HEAD, Relaxed);
            m.order.store(order.0, Relaxed);
            for i in 1..order.nr_pages() {
                let t = self.meta(pfn.add(i));
                t.flags.store(PG_TAIL, Relaxed);
                t.private.store(pfn.0 as u32, Relaxed);
            }
        } else {
            m.flags.store(0, Relaxed);
            m.order.store(0, Relaxed);
        }
        m.refcount.store(1, Relaxed);
    }

    // ----- references and freeing -------------------------------------------------------

    /// `get_page`.
    #[inline]
    pub fn get_page(&self, pfn: Pfn) {
        let old = self.meta(pfn).refcount.fetch_add(1, Relaxed);
        vm_bug_on!(old <= 0, "get_page on a free page {:#x}", pfn.0);
    }

    /// Check that `pfn` can be released as a head of the given order.
    fn check_free(&self, pfn: Pfn, order: Option<Order>) -> Result<Order, PageError> {
        if pfn.0 >= self.nr_frames {
            return Err(PageError::OutOfRange);
        }
        let m = self.meta(pfn);
        let f = m.flags();
        if f & PG_TAIL != 0 {
            return Err(PageError::TailPage);
        }
        if f & PG_RESERVED != 0 {
            return Err(PageError::Reserved);
        }
        if f & (PG_BUDDY | PG_PCP) != 0 || m.ref_count() <= 0 {
            return Err(PageError::NotAllocated);
        }
        let actual = if f & PG_HEAD != 0 {
            Order(m.order.load(Relaxed))
        } else {
            Order(0)
        };
        match order {
            Some(o) if o != actual => Err(PageError::BadOrder),
            _ => Ok(actual),
        }
    }

    /// Drop a reference; `true` when it was the last. Refuses (and undoes) a drop below zero.
    #[inline]
    fn put_testzero(&self, pfn: Pfn) -> Result<bool, PageError> {
        let old = self.meta(pfn).refcount.fetch_sub(1, AcqRel);
        if old <= 0 {
            self.meta(pfn).refcount.fetch_add(1, Relaxed);
            return Err(PageError::NotAllocated);
        }
        Ok(old == 1)
    }

    /// `__free_pages(page, order)`: drop a reference and free the block when it was the last.
    #[doc(alias = "__free_pages")]
    pub fn free_pages(&self, cpu: CpuId, pfn: Pfn, order: Order) -> Result<(), PageError> {
        let order = self.check_free(pfn, Some(order))?;
        if self.put_testzero(pfn)? {
            self.free_unref_page_list(cpu, &[(pfn, order)]);
        }
        Ok(())
    }

    /// `put_page`/`folio_put`: drop a reference; at zero, take the page off the LRU and free it.
    pub fn put_page(&self, cpu: CpuId, pfn: Pfn) -> Result<(), PageError> {
        self.check_free(pfn, None)?;
        self.release_pages(cpu, &[pfn]);
        Ok(())
    }

    /// `free_pages_prepare`: clean the metadata of a block whose last reference is gone.
    #[inline]
    fn free_pages_prepare(&self, pfn: Pfn, order: Order) {
        let m = self.meta(pfn);
        vm_bug_on!(m.map_count() != 0, "freeing mapped page {:#x}", pfn.0);
        for i in 1..order.nr_pages() {
            let t = self.meta(pfn.add(i));
            t.flags.store(0, Relaxed);
            t.private.store(0, Relaxed);
        }
        m.flags.store(0, Relaxed);
        m.order.store(0, Relaxed);
        m.private.store(0, Relaxed);
        m.pt_entries.store(0, Relaxed);
    }

    /// `release_pages`: drop one reference on each page; those that reach zero leave the LRU
    /// (under their node's `lru_lock`, batched) and go to the freeing CPU's pcp lists
    /// (`free_unref_page_list`). Reserved pages (the zero pages) are skipped. This is the
    /// path every `mmu_gather` batch takes.
    #[doc(alias = "free_pages_and_swap_cache")]
    #[doc(alias = "folios_put_refs")]
    pub fn release_pages(&self, cpu: CpuId, pages: &[Pfn]) {
        let meta = self.meta_slice();
        let mut to_free: Vec<(Pfn, Order)> = Vec::with_capacity(pages.len());
        let mut lru: Option<(usize, crate::stats::lockstat::StatMutexGuard<'_, Lruvec>)> = None;
        let mut lock_batch = 0u32;
        let mut lru_removed = 0i64;
        let mut unevictable_removed = 0i64;
        for &pfn in pages {
            let m = &meta[pfn.index()];
            if m.flags() & PG_RESERVED != 0 {
                continue;
            }
            // Do not hold the lru lock for too long (SWAP_CLUSTER_MAX).
            if lru.is_some() {
                lock_batch += 1;
                if lock_batch == self.lru_lock_batch {
                    lru = None;
                    lock_batch = 0;
                }
            }
            match self.put_testzero(pfn) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(_) => {
                    vm_bug_on!(true, "release_pages: page {:#x} already free", pfn.0);
                    continue;
                }
            }
            let f = m.flags();
            if f & PG_LRU != 0 {
                let nid = self.node_of(pfn);
                if lru.as_ref().map(|(n, _)| *n) != Some(nid) {
                    drop(lru.take());
                    lock_batch = 0;
                    lru = Some((nid, self.nodes[nid].lru.lock()));
                }
                let vec = &mut lru.as_mut().expect("locked").1;
                let nr = if f & PG_HEAD != 0 {
                    1i64 << m.order.load(Relaxed)
                } else {
                    1
                };
                if f & PG_MLOCKED != 0 {
                    vec.unevictable.remove(meta, pfn);
                    unevictable_removed += nr;
                } else {
                    vec.inactive_anon.remove(meta, pfn);
                    lru_removed += nr;
                }
                // __ClearPageLRU: the last reference is gone, nobody else writes the flags.
                m.flags.store(f & !PG_LRU, Relaxed);
            }
            let order = if f & PG_HEAD != 0 {
                Order(m.order.load(Relaxed))
            } else {
                Order(0)
            };
            to_free.push((pfn, order));
        }
        drop(lru);
        if lru_removed != 0 {
            self.stat.add(cpu, VmItem::NrInactiveAnon, -lru_removed);
        }
        if unevictable_removed != 0 {
            self.stat
                .add(cpu, VmItem::NrUnevictable, -unevictable_removed);
        }
        self.free_unref_page_list(cpu, &to_free);
    }

    /// `free_unref_page_list`: blocks with no references left go to this CPU's pcp lists,
    /// keeping one pcp lock across consecutive blocks of the same zone.
    fn free_unref_page_list(&self, cpu: CpuId, blocks: &[(Pfn, Order)]) {
        let mut held: Option<(usize, parking_lot::MutexGuard<'_, PerCpuPages>)> = None;
        let mut freed = 0i64;
        for &(pfn, order) in blocks {
            if self.meta(pfn).test(PG_HUGETLB) {
                self.hugetlb_pool.lock().push(pfn);
                continue;
            }
            self.free_pages_prepare(pfn, order);
            freed += order.nr_pages() as i64;
            let nid = self.node_of(pfn);
            let zone = &self.nodes[nid].zone;
            if pcp_index(order).is_none() {
                held = None;
                let mut fa = zone.lock.lock();
                self.free_one_page_locked(zone, &mut fa, pfn, order);
                drop(fa);
                self.stat
                    .add(cpu, VmItem::NrFreePages, order.nr_pages() as i64);
                continue;
            }
            if held.as_ref().map(|(n, _)| *n) != Some(nid) {
                drop(held.take());
                held = Some((nid, zone.pcp[cpu].lock()));
            }
            let pcp = &mut held.as_mut().expect("locked").1;
            self.pcp_commit(cpu, zone, pcp, pfn, order);
        }
        if freed != 0 {
            self.stat.add(cpu, VmItem::Pgfree, freed);
        }
    }

    // ----- LRU --------------------------------------------------------------------------

    /// `lru_cache_add` / `folio_add_lru`: queue a newly mapped page for the LRU in this CPU's
    /// batch (which holds a reference, as a pagevec does); add the batch when full.
    #[doc(alias = "folio_add_lru")]
    pub fn lru_cache_add(&self, cpu: CpuId, pfn: Pfn) {
        self.get_page(pfn);
        self.meta(pfn).set(PG_LRU_BATCH);
        let full = {
            let mut b = self.lru_add[cpu].lock();
            b.push(pfn);
            (b.len() >= self.lru_add_batch)
                .then(|| std::mem::replace(&mut *b, Vec::with_capacity(self.lru_add_batch)))
        };
        if let Some(batch) = full {
            self.lru_add_batch_commit(cpu, &batch);
        }
    }

    /// `__pagevec_lru_add` then drop the batch's references (`release_pages`).
    fn lru_add_batch_commit(&self, cpu: CpuId, batch: &[Pfn]) {
        let meta = self.meta_slice();
        let mut held: Option<(usize, crate::stats::lockstat::StatMutexGuard<'_, Lruvec>)> = None;
        let (mut anon, mut unevictable) = (0i64, 0i64);
        for &pfn in batch {
            let nid = self.node_of(pfn);
            if held.as_ref().map(|(n, _)| *n) != Some(nid) {
                drop(held.take());
                held = Some((nid, self.nodes[nid].lru.lock()));
            }
            let vec = &mut held.as_mut().expect("locked").1;
            let m = &meta[pfn.index()];
            let nr = if m.test(PG_HEAD) {
                1i64 << m.order.load(Relaxed)
            } else {
                1
            };
            if m.test(PG_MLOCKED) {
                vec.unevictable.push_back(meta, pfn);
                unevictable += nr;
            } else {
                vec.inactive_anon.push_back(meta, pfn);
                anon += nr;
            }
            m.clear(PG_LRU_BATCH);
            m.set(PG_LRU);
        }
        drop(held);
        self.stat.add(cpu, VmItem::NrInactiveAnon, anon);
        self.stat.add(cpu, VmItem::NrUnevictable, unevictable);
        self.release_pages(cpu, batch);
    }

    /// `lru_add_drain`: flush this CPU's LRU-add batch.
    pub fn lru_add_drain(&self, cpu: CpuId) {
        let batch = std::mem::take(&mut *self.lru_add[cpu].lock());
        if !batch.is_empty() {
            self.lru_add_batch_commit(cpu, &batch);
        }
    }

    /// `lru_add_drain_all`.
    pub fn lru_add_drain_all(&self) {
        for cpu in self.cpus.all() {
            self.lru_add_drain(cpu);
        }
    }

    /// Move a page between the evictable and unevictable LRU lists after `PG_mlocked`
    /// changed (`mlock_folio`/`munlock_folio`, reduced). The page must be referenced.
    pub fn lru_set_mlocked(&self, cpu: CpuId, pfn: Pfn, mlocked: bool) {
        let meta = self.meta_slice();
        let m = &meta[pfn.index()];
        // Settle any batch first, so the page's LRU membership is stable under the lock.
        if m.test(PG_LRU_BATCH) {
            self.lru_add_drain_all();
        }
        let mut vec = self.nodes[self.node_of(pfn)].lru.lock();
        let was = m.test(PG_MLOCKED);
        if was == mlocked {
            return;
        }
        if m.test(PG_LRU) {
            if mlocked {
                vec.inactive_anon.remove(meta, pfn);
                vec.unevictable.push_back(meta, pfn);
            } else {
                vec.unevictable.remove(meta, pfn);
                vec.inactive_anon.push_back(meta, pfn);
            }
            let nr = if m.test(PG_HEAD) {
                1i64 << m.order.load(Relaxed)
            } else {
                1
            };
            let d = if mlocked { nr } else { -nr };
            self.stat.add(cpu, VmItem::NrUnevictable, d);
            self.stat.add(cpu, VmItem::NrInactiveAnon, -d);
        }
        if mlocked {
            m.set(PG_MLOCKED);
        } else {
            m.clear(PG_MLOCKED);
        }
    }

    /// `__split_huge_page`, reduced: turn an allocated compound page into `1 << order`
    /// independent order-0 pages. The head keeps its references (and its LRU place); each tail
    /// gets one reference, for the caller to hand on.
    pub fn split_compound(&self, cpu: CpuId, head: Pfn) {
        let m = self.meta(head);
        vm_bug_on!(!m.test(PG_HEAD), "split of a non-compound page");
        let order = m.order.load(Relaxed);
        let keep = m.flags() & (PG_ANON | PG_MLOCKED);
        for i in 1..(1u64 << order) {
            let t = self.meta(head.add(i));
            t.private.store(0, Relaxed);
            t.mapcount.store(0, Relaxed);
            t.flags.store(keep, Relaxed);
            t.refcount.store(1, Relaxed);
        }
        // The LRU counted the whole compound page: re-count the head alone.
        if m.test(PG_LRU) {
            let d = (1i64 << order) - 1;
            let item = if m.test(PG_MLOCKED) {
                VmItem::NrUnevictable
            } else {
                VmItem::NrInactiveAnon
            };
            self.stat.add(cpu, item, -d);
        }
        m.clear(PG_HEAD);
        m.order.store(0, Relaxed);
    }

    // ----- hugetlb pool -----------------------------------------------------------------

    /// Take an order-9 page from the `nr_hugepages` pool (`alloc_hugetlb_folio`).
    pub fn alloc_hugetlb_page(&self) -> Option<Pfn> {
        let pfn = self.hugetlb_pool.lock().pop()?;
        self.meta(pfn).refcount.store(1, Relaxed);
        Some(pfn)
    }

    // ----- validation -------------------------------------------------------------------

    /// Check the invariants of the module doc over all memory. Call only when no other thread
    /// allocates or frees (it takes the locks one at a time, so it is safe but not atomic).
    #[doc(alias = "check_pages")]
    pub fn validate(&self) -> Result<PhysReport, String> {
        let meta = self.meta_slice();
        let mut r = PhysReport {
            total: self.nr_frames,
            ..Default::default()
        };
        let mut lru_listed = 0u64;
        let mut pcp_listed = 0u64;
        let mut buddy_listed = 0u64;
        for node in self.nodes.iter() {
            let z = &node.zone;
            {
                let fa = z.lock.lock();
                let mut zone_free = 0;
                for (o, list) in fa.lists.iter().enumerate() {
                    let mut n = 0;
                    for pfn in list.iter(meta) {
                        n += 1;
                        if n > list.len() {
                            return Err(format!("free_area[{o}] of node {} loops", z.node.0));
                        }
                        let m = &meta[pfn.index()];
                        if m.flags() != PG_BUDDY || m.private.load(Relaxed) != o as u32 {
                            return Err(format!(
                                "pfn {:#x} on free_area[{o}] has flags {:#x} order {}",
                                pfn.0,
                                m.flags(),
                                m.private.load(Relaxed)
                            ));
                        }
                        if pfn.0 % (1 << o) != 0
                            || pfn.0 < z.start_pfn
                            || pfn.0 + (1 << o) > z.end_pfn
                        {
                            return Err(format!("free block {:#x}/{o} misplaced", pfn.0));
                        }
                    }
                    zone_free += list.len() << o;
                    buddy_listed += list.len();
                }
                if zone_free != z.free_pages.load(Relaxed) {
                    return Err(format!(
                        "node {}: free lists hold {zone_free} pages, nr_free says {}",
                        z.node.0,
                        z.free_pages.load(Relaxed)
                    ));
                }
            }
            for cpu in self.cpus.all() {
                let pcp = z.pcp[cpu].lock();
                let mut pages = 0;
                for (i, list) in pcp.lists.iter().enumerate() {
                    for pfn in list.iter(meta) {
                        let m = &meta[pfn.index()];
                        let o = m.order.load(Relaxed);
                        if m.flags() != PG_PCP || pcp_index(Order(o)) != Some(i) {
                            return Err(format!("pfn {:#x} on pcp list {i} is not pcp", pfn.0));
                        }
                        pages += 1u64 << o;
                        pcp_listed += 1;
                    }
                }
                if pages != pcp.count as u64 {
                    return Err(format!(
                        "{cpu} node {}: pcp count {} ≠ {pages}",
                        z.node.0, pcp.count
                    ));
                }
                // Auto-tuning keeps high within its bounds and free_count near its cap.
                let fc_cap = (self.pcp_batch << PCP_BATCH_SCALE_MAX) + (1 << HPAGE_PMD_ORDER.0);
                if pcp.high > self.pcp_high_max || pcp.free_count >= fc_cap {
                    return Err(format!(
                        "{cpu} node {}: pcp high {} (max {}) free_count {}",
                        z.node.0, pcp.high, self.pcp_high_max, pcp.free_count
                    ));
                }
            }
            let lru = node.lru.lock();
            for list in [&lru.inactive_anon, &lru.unevictable] {
                for pfn in list.iter(meta) {
                    let m = &meta[pfn.index()];
                    if !m.test(PG_LRU) || m.ref_count() <= 0 {
                        return Err(format!(
                            "pfn {:#x} on the LRU: flags {:#x}",
                            pfn.0,
                            m.flags()
                        ));
                    }
                    if self.node_of(pfn) != z.node.index() {
                        return Err(format!("pfn {:#x} on the wrong node's LRU", pfn.0));
                    }
                    lru_listed += 1;
                }
            }
        }
        let hugetlb: std::collections::HashSet<u64> =
            self.hugetlb_pool.lock().iter().map(|p| p.0).collect();
        // The sweep: every frame accounted for exactly once.
        let (mut buddy_seen, mut pcp_seen, mut lru_seen) = (0u64, 0u64, 0u64);
        let mut pfn = 0u64;
        while pfn < self.nr_frames {
            let m = &meta[pfn as usize];
            let f = m.flags();
            let span: u64;
            if f == PG_BUDDY {
                let o = m.private.load(Relaxed);
                span = 1 << o;
                buddy_seen += 1;
                r.buddy_free += span;
                for i in 1..span {
                    let t = &meta[(pfn + i) as usize];
                    if t.flags() != 0 || t.ref_count() != 0 {
                        return Err(format!(
                            "pfn {:#x} inside free block {pfn:#x}/{o} has flags {:#x} ref {}",
                            pfn + i,
                            t.flags(),
                            t.ref_count()
                        ));
                    }
                }
            } else if f == PG_PCP {
                span = 1 << m.order.load(Relaxed);
                pcp_seen += 1;
                r.pcp += span;
            } else if f & PG_TAIL != 0 {
                return Err(format!("orphan tail page {pfn:#x} (flags {f:#x})"));
            } else if f & PG_HEAD != 0 {
                let o = m.order.load(Relaxed);
                span = 1 << o;
                let in_pool = f & PG_HUGETLB != 0 && hugetlb.contains(&pfn);
                if m.ref_count() <= 0 && !in_pool {
                    return Err(format!(
                        "compound head {pfn:#x} with refcount {}",
                        m.ref_count()
                    ));
                }
                for i in 1..span {
                    let t = &meta[(pfn + i) as usize];
                    if t.flags() != PG_TAIL || t.private.load(Relaxed) != pfn as u32 {
                        return Err(format!("bad tail {:#x} of head {pfn:#x}", pfn + i));
                    }
                }
                if in_pool {
                    r.hugetlb_pool += span;
                } else {
                    r.allocated += span;
                }
                if f & PG_LRU != 0 {
                    lru_seen += 1;
                }
            } else if m.ref_count() > 0 && f & (PG_BUDDY | PG_PCP) == 0 {
                span = 1;
                r.allocated += 1;
                if f & PG_LRU != 0 {
                    lru_seen += 1;
                }
            } else {
                return Err(format!(
                    "pfn {pfn:#x} is neither free nor allocated (flags {f:#x}, ref {})",
                    m.ref_count()
                ));
            }
            pfn += span;
        }
        if buddy_seen != buddy_listed || pcp_seen != pcp_listed || lru_seen != lru_listed {
            return Err(format!(
                "flags vs lists: buddy {buddy_seen}/{buddy_listed}, pcp {pcp_seen}/{pcp_listed}, lru {lru_seen}/{lru_listed}"
            ));
        }
        r.on_lru = lru_listed;
        let vm_free = self.stat.get(VmItem::NrFreePages);
        if vm_free != r.buddy_free as i64 {
            return Err(format!(
                "vmstat nr_free_pages {vm_free} ≠ buddy {}",
                r.buddy_free
            ));
        }
        if r.buddy_free + r.pcp + r.allocated + r.hugetlb_pool != r.total {
            return Err(format!("frames do not add up: {r:?}"));
        }
        Ok(r)
    }
}
