//! The buddy allocator proper: `__rmqueue_smallest` + `expand`, `__free_one_page`, the
//! allocation entry (`__alloc_pages`, `get_page_from_freelist`, `prep_new_page`) and page
//! references (`get_page`, `__free_pages`, `put_page`, `free_pages_prepare`).
//!
//! Mirrors `mm/page_alloc.c`. The free lists are under `zone.lock`; see the parent module for
//! the invariants.

use std::sync::atomic::Ordering::{AcqRel, Relaxed};

use super::meta::*;
use super::{pcp_index, FreeArea, Gfp, PageError, PhysMem, Zone};
use crate::addr::{Order, Pfn, MAX_PAGE_ORDER};
use crate::cpu::CpuId;
use crate::error::AllocError;
use crate::stats::VmItem;
use crate::sync::vhook::{on_clock, Touch};
use crate::sync::Cost;
use crate::sync::SpinClock;

impl PhysMem {
    /// `__rmqueue_smallest` + `expand`, on the caller's clock `c`. Caller holds `zone.lock`.
    pub(super) fn rmqueue_smallest(
        &self,
        c: impl SpinClock,
        zone: &Zone,
        fa: &mut FreeArea,
        order: Order,
    ) -> Option<Pfn> {
        let meta = self.meta_slice();
        for cur in order.0..=MAX_PAGE_ORDER {
            if let Some(pfn) = fa.pop_front(c, meta, cur as usize) {
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
                    fa.push_front(c, meta, high as usize, half);
                }
                // Written only under zone.lock (held): a plain update, no locked RMW.
                let nr = zone.free_pages.load(Relaxed) - order.nr_pages();
                zone.free_pages.store(nr, Relaxed);
                if nr == 0 {
                    self.zone_mask.set_buddy(zone.node.index(), false);
                }
                return Some(pfn);
            }
        }
        None
    }

    /// `__free_one_page`: merge with free buddies and put the block on its free list.
    /// The frames' metadata must already be clean. Caller holds `zone.lock`; `c` is its clock.
    ///
    /// Returns the merge steps it took (for the caller to charge `__free_one_page`'s cost
    /// under the lock).
    pub(super) fn free_one_page_locked(
        &self,
        c: impl SpinClock,
        zone: &Zone,
        fa: &mut FreeArea,
        pfn: Pfn,
        order: Order,
    ) -> u64 {
        let meta = self.meta_slice();
        let (mut pfn, mut order) = (pfn.0, order.0);
        let start_order = order;
        // Written only under zone.lock (held): a plain update, no locked RMW per page.
        let was = zone.free_pages.load(Relaxed);
        zone.free_pages.store(was + (1 << order), Relaxed);
        if was == 0 {
            self.zone_mask.set_buddy(zone.node.index(), true);
        }
        while order < MAX_PAGE_ORDER {
            let buddy = pfn ^ (1 << order);
            if buddy < zone.start_pfn || buddy + (1 << order) > zone.end_pfn {
                break;
            }
            let bm = &meta[buddy as usize];
            // `page_is_buddy` reads the buddy's struct page: a line another CPU may have
            // written (the hot miss under zone->lock).
            c.mem_touch_page(buddy, Touch::Access);
            if bm.flags.load(Relaxed) != PG_BUDDY || bm.private.load(Relaxed) != order as u32 {
                break;
            }
            fa.remove(c, meta, order as usize, Pfn(buddy));
            bm.flags.store(0, Relaxed);
            bm.private.store(0, Relaxed);
            pfn &= buddy;
            order += 1;
        }
        let m = &meta[pfn as usize];
        m.flags.store(PG_BUDDY, Relaxed);
        m.private.store(order as u32, Relaxed);
        if self.buddy_merge_likely(c, zone, pfn, order) {
            fa.push_back(c, meta, order as usize, Pfn(pfn));
        } else {
            fa.push_front(c, meta, order as usize, Pfn(pfn));
        }
        u64::from(order - start_order)
    }

    /// `buddy_merge_likely`: the block at `pfn` of `order` stopped merging because its buddy
    /// is not free, but the buddy of the block one order up is: once this buddy is freed the
    /// two merge twice, so the block goes to the tail of its free list, where it is taken
    /// last. Reads that higher buddy's `struct page` (one line under `zone->lock`). Not for
    /// the two highest orders, as in the kernel. Caller holds `zone.lock`.
    fn buddy_merge_likely(&self, c: impl SpinClock, zone: &Zone, pfn: u64, order: u8) -> bool {
        if order + 1 >= MAX_PAGE_ORDER {
            return false;
        }
        let higher = pfn & !(1u64 << order);
        let higher_buddy = higher ^ (1u64 << (order + 1));
        if higher_buddy < zone.start_pfn || higher_buddy + (2u64 << order) > zone.end_pfn {
            return false;
        }
        c.mem_touch_page(higher_buddy, Touch::Access);
        let hm = &self.meta_slice()[higher_buddy as usize];
        hm.flags.load(Relaxed) == PG_BUDDY && hm.private.load(Relaxed) == u32::from(order) + 1
    }
}

impl PhysMem {
    /// `alloc_pages(gfp, order)` on `cpu` for a task (v4.10's `alloc_pages_current`, or
    /// `alloc_pages_vma` for a user page: a VMA carries no policy of its own here): under the
    /// machine's `mm.membind`, node N's zone alone (`MPOL_BIND` filters the zonelist to its
    /// nodemask); else the local node first, then the others. On failure (unless `NOWAIT`)
    /// drain the pcp lists, run the shrinkers and try once more; a bound allocation that still
    /// finds nothing on node N fails (`NoMem`: the fault's `VM_FAULT_OOM`, where the kernel's
    /// OOM killer picks a victim among the tasks bound to N) and never takes another node's page.
    #[doc(alias = "__alloc_pages")]
    #[doc(alias = "alloc_pages_current")]
    pub(crate) fn alloc_pages(
        &self,
        cpu: CpuId,
        order: Order,
        gfp: Gfp,
    ) -> Result<Pfn, AllocError> {
        self.alloc_pages_in(cpu, order, gfp, self.membind)
    }

    /// `alloc_pages_node(cpu_to_node(cpu), gfp, order)`: the zonelist of `cpu`'s node, with no
    /// task policy — the allocations the kernel makes for a CPU or at boot (the percpu
    /// allocator's pages, the zero page, the hugetlb pool), which `numactl --membind` does not
    /// bind.
    #[doc(alias = "__alloc_pages_node")]
    pub(crate) fn alloc_pages_node(
        &self,
        cpu: CpuId,
        order: Order,
        gfp: Gfp,
    ) -> Result<Pfn, AllocError> {
        self.alloc_pages_in(cpu, order, gfp, None)
    }

    /// The allocation on the clock it finds: the one test of the flag an allocation takes.
    fn alloc_pages_in(
        &self,
        cpu: CpuId,
        order: Order,
        gfp: Gfp,
        bind: Option<usize>,
    ) -> Result<Pfn, AllocError> {
        let local = self.local_node(cpu);
        on_clock!(c => self.alloc_pages_decided(c, cpu, local, order, gfp, bind))
    }

    /// The zonelist's first node, found outside the clocks' instances (each would otherwise
    /// keep its own out-of-line copy of `cpu_to_node`).
    #[inline]
    fn local_node(&self, cpu: CpuId) -> usize {
        self.cpus.node_of(cpu).index().min(self.nodes.len() - 1)
    }

    /// [`Self::alloc_pages`] on a clock the caller decided already (a fault's, at its entry):
    /// no test of the flag.
    #[inline]
    pub(crate) fn alloc_pages_on_clock(
        &self,
        c: impl SpinClock,
        cpu: CpuId,
        order: Order,
        gfp: Gfp,
    ) -> Result<Pfn, AllocError> {
        let local = self.local_node(cpu);
        self.alloc_pages_decided(c, cpu, local, order, gfp, self.membind)
    }

    /// The allocation on the clock `c`: one out-of-line instance per clock, which both the
    /// callers that decide here ([`Self::alloc_pages_in`]) and those that decided before
    /// ([`Self::alloc_pages_on_clock`]) call.
    #[inline(never)]
    fn alloc_pages_decided<C: SpinClock>(
        &self,
        c: C,
        cpu: CpuId,
        local: usize,
        order: Order,
        gfp: Gfp,
        bind: Option<usize>,
    ) -> Result<Pfn, AllocError> {
        self.alloc_pages_on(c, cpu, local, order, gfp, bind)
    }

    #[inline(always)]
    fn alloc_pages_on(
        &self,
        c: impl SpinClock,
        cpu: CpuId,
        local: usize,
        order: Order,
        gfp: Gfp,
        bind: Option<usize>,
    ) -> Result<Pfn, AllocError> {
        if order.0 > MAX_PAGE_ORDER {
            return Err(AllocError::BadOrder);
        }
        let pfn = match self.get_page_from_freelist(c, cpu, local, order, bind) {
            Some(p) => p,
            None if gfp.contains(Gfp::NOWAIT) => return Err(AllocError::NoMem),
            None => {
                // __alloc_pages_slowpath, reduced: drain, shrink, retry.
                self.lru_add_drain_all();
                self.drain_all_pages();
                self.shrink_all(cpu);
                self.drain_all_pages();
                self.get_page_from_freelist(c, cpu, local, order, bind)
                    .ok_or(AllocError::NoMem)?
            }
        };
        self.prep_new_page(pfn, order);
        // __GFP_ZERO clears only frames an owner had before: known-zero ones are skipped.
        self.backing
            .prep_new_frames(pfn, order.nr_pages(), gfp.contains(Gfp::ZERO));
        if gfp.contains(Gfp::ZERO) {
            // clear_page per 4 KiB: the modelled kernel zeroes, whatever the backing skips.
            c.charge(Cost::ClearPage, order.nr_pages());
        }
        self.stat
            .add(cpu, VmItem::PgallocNormal, order.nr_pages() as i64);
        Ok(pfn)
    }

    /// `get_page_from_freelist`: the zonelist of `local` (`cpu`'s node), or node `bind`'s
    /// zone alone; on the allocation's clock `c`.
    pub(super) fn get_page_from_freelist(
        &self,
        c: impl SpinClock,
        cpu: CpuId,
        local: usize,
        order: Order,
        bind: Option<usize>,
    ) -> Option<Pfn> {
        let pcp = pcp_index(order);
        let try_zone = |nid: usize| {
            let zone = &self.nodes[nid].zone;
            match pcp {
                Some(idx) => self.rmqueue_pcplist(c, cpu, zone, order, idx),
                None if zone.free_pages.load(Relaxed) < order.nr_pages() => None,
                None => {
                    let mut fa = zone.lock.lock();
                    let p = self.rmqueue_smallest(c, zone, &mut fa, order);
                    c.charge(Cost::RmqueueBulkPage, 1);
                    drop(fa);
                    if p.is_some() {
                        self.stat
                            .add(cpu, VmItem::NrFreePages, -(order.nr_pages() as i64));
                    }
                    p
                }
            }
        };
        match bind {
            // MPOL_BIND to one node: its zone is the whole filtered zonelist.
            Some(n) => try_zone(n),
            // The zonelist (the local node, then the others from 0 up), visiting only the
            // zones whose buddy or (for a pcp order) this CPU's pcp lists hold a page: see
            // `zonemask`.
            None => self.zone_mask.walk(cpu, local, pcp.is_some(), try_zone),
        }
    }

    /// `prep_new_page` + `prep_compound_page`.
    pub(super) fn prep_new_page(&self, pfn: Pfn, order: Order) {
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
    pub(crate) fn get_page(&self, pfn: Pfn) {
        let old = self.meta(pfn).refcount.fetch_add(1, Relaxed);
        vm_bug_on!(old <= 0, "get_page on a free page {:#x}", pfn.0);
    }

    /// Check that `pfn` can be released as a head of the given order.
    pub(super) fn check_free(&self, pfn: Pfn, order: Option<Order>) -> Result<Order, PageError> {
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
    pub(super) fn put_testzero(&self, pfn: Pfn) -> Result<bool, PageError> {
        let old = self.meta(pfn).refcount.fetch_sub(1, AcqRel);
        if old <= 0 {
            self.meta(pfn).refcount.fetch_add(1, Relaxed);
            return Err(PageError::NotAllocated);
        }
        Ok(old == 1)
    }

    /// `__free_pages(page, order)`: drop a reference and free the block when it was the last.
    #[doc(alias = "__free_pages")]
    pub(crate) fn free_pages(&self, cpu: CpuId, pfn: Pfn, order: Order) -> Result<(), PageError> {
        let order = self.check_free(pfn, Some(order))?;
        if self.put_testzero(pfn)? {
            on_clock!(c => self.free_unref_page_list(c, cpu, &[(pfn, order)]));
        }
        Ok(())
    }

    /// `put_page`/`folio_put`: drop a reference; at zero, take the page off the LRU and free it.
    pub(crate) fn put_page(&self, cpu: CpuId, pfn: Pfn) -> Result<(), PageError> {
        self.check_free(pfn, None)?;
        self.release_pages(cpu, &[pfn]);
        Ok(())
    }

    /// `free_pages_prepare`: clean the metadata of a block whose last reference is gone.
    #[inline]
    pub(super) fn free_pages_prepare(&self, pfn: Pfn, order: Order) {
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
}
