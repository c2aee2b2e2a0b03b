//! Per-CPU page lists (`struct per_cpu_pages`): `rmqueue_pcplist`, `free_unref_page_commit`,
//! `free_pcppages_bulk`, `drain_all_pages`, the 6.7+ auto-tuning (`nr_pcp_high`,
//! `nr_pcp_free`), and `free_unref_page_list`.
//!
//! Mirrors `mm/page_alloc.c`. Lock order: `pcp lock -> zone.lock`.

use std::sync::atomic::Ordering::Relaxed;

use super::meta::*;
use super::{pcp_index, PerCpuPages, PhysMem, Zone, NR_PCP_LISTS, PCP_BATCH_SCALE_MAX};
use crate::addr::{Order, Pfn};
use crate::cpu::CpuId;
use crate::stats::VmItem;
use crate::sync::vhook::on_clock;
use crate::sync::Cost;
use crate::sync::SpinClock;

impl PhysMem {
    /// `free_pcppages_bulk`: move `count` pages from a pcp to the buddy, oldest first,
    /// round-robin over the lists. Caller holds the pcp lock; takes `zone.lock`. With
    /// `pcp.pick_outside_lock` (v4.18–v5.17, Aaron Lu's follow-up to seeds 000/001) the pages
    /// are taken off the pcp lists first and `zone.lock` covers only the merges. `c`: the
    /// clock of the free (or drain) it is part of.
    pub(super) fn free_pcppages_bulk(
        &self,
        c: impl SpinClock,
        cpu: CpuId,
        zone: &Zone,
        pcp: &mut PerCpuPages,
        count: u32,
    ) {
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
            let pfn = pcp.lists[list].pop_back_on(c, meta).expect("non-empty");
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
            let mut merges = 0;
            for &(pfn, order) in &picked {
                merges += self.free_one_page_locked(c, zone, &mut fa, pfn, order);
            }
            c.charge(Cost::FreePcppagesBulkPage, picked.len() as u64);
            c.charge(Cost::FreeOneMerge, merges);
            drop(fa);
            picked.clear();
            pcp.picked = picked;
        } else {
            // Lock order: pcp lock -> zone.lock
            let mut fa = zone.lock.lock();
            let (mut blocks, mut merges) = (0, 0);
            while todo > 0 && pcp.count > 0 {
                let (pfn, order) = pick(pcp);
                todo -= order.nr_pages() as i64;
                freed += order.nr_pages();
                blocks += 1;
                merges += self.free_one_page_locked(c, zone, &mut fa, pfn, order);
            }
            c.charge(Cost::FreePcppagesBulkPage, blocks);
            c.charge(Cost::FreeOneMerge, merges);
            drop(fa);
        }
        self.zone_mask
            .set_pcp(cpu, zone.node.index(), pcp.count > 0);
        self.stat.add(cpu, VmItem::NrFreePages, freed as i64);
        self.stat.inc(cpu, VmItem::PcpDrain);
    }

    /// `free_unref_page_commit`: put a clean block on this CPU's pcp list; drain when high.
    #[inline]
    pub(super) fn pcp_commit(
        &self,
        c: impl SpinClock,
        cpu: CpuId,
        zone: &Zone,
        pcp: &mut PerCpuPages,
        pfn: Pfn,
        o: Order,
    ) {
        let idx = pcp_index(o).expect("pcp order");
        let m = self.meta(pfn);
        m.flags.store(PG_PCP, Relaxed);
        m.order.store(o.0, Relaxed);
        pcp.lists[idx].push_front_on(c, self.meta_slice(), pfn);
        let nr = o.nr_pages() as u32;
        pcp.count += nr;
        self.zone_mask
            .set_pcp(cpu, zone.node.index(), pcp.count > 0);
        if !self.pcp_auto_tune {
            if pcp.count >= self.pcp_high {
                self.free_pcppages_bulk(c, cpu, zone, pcp, self.pcp_batch);
            }
            return;
        }
        if pcp.free_count < self.pcp_batch << PCP_BATCH_SCALE_MAX {
            pcp.free_count += nr;
        }
        let high = self.nr_pcp_high(pcp);
        if pcp.count >= high {
            let n = self.nr_pcp_free(pcp, high);
            self.free_pcppages_bulk(c, cpu, zone, pcp, n);
        }
    }

    /// `nr_pcp_high`: the `high` this free is checked against; raise the tuned `high` when
    /// the list is full while frees keep coming, so the next drain can free `free_count`.
    pub(super) fn nr_pcp_high(&self, pcp: &mut PerCpuPages) -> u32 {
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
    pub(super) fn nr_pcp_free(&self, pcp: &PerCpuPages, high: u32) -> u32 {
        let batch = self.pcp_batch;
        if high < batch {
            return 1;
        }
        // clamp_t order: max first, then min (no panic when high - batch < batch).
        pcp.free_count.max(batch).min(high - batch)
    }

    /// `rmqueue_pcplist`: take a block from this CPU's list, refilling it from the buddy with
    /// `batch` pages when empty; on the allocation's clock `c`.
    pub(super) fn rmqueue_pcplist(
        &self,
        c: impl SpinClock,
        cpu: CpuId,
        zone: &Zone,
        order: Order,
        idx: usize,
    ) -> Option<Pfn> {
        let meta = self.meta_slice();
        let mut pcp = c.spin_lock(&zone.pcp[cpu]);
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
                let Some(pfn) = self.rmqueue_smallest(c, zone, &mut fa, order) else {
                    break;
                };
                let m = &meta[pfn.index()];
                m.flags.store(PG_PCP, Relaxed);
                m.order.store(order.0, Relaxed);
                pcp.lists[idx].push_back_on(c, meta, pfn);
                pcp.count += order.nr_pages() as u32;
                got += order.nr_pages();
            }
            c.charge(Cost::RmqueueBulkPage, got >> order.0);
            drop(fa);
            if got == 0 {
                return None;
            }
            self.stat.add(cpu, VmItem::NrFreePages, -(got as i64));
            self.stat.inc(cpu, VmItem::PcpRefill);
        }
        let pfn = pcp.lists[idx].pop_front_on(c, meta)?;
        c.charge(Cost::RmqueuePcp, 1);
        pcp.count -= order.nr_pages() as u32;
        self.zone_mask
            .set_pcp(cpu, zone.node.index(), pcp.count > 0);
        let m = &meta[pfn.index()];
        m.flags.store(0, Relaxed);
        m.order.store(0, Relaxed);
        Some(pfn)
    }

    /// `drain_all_pages`: return every CPU's pcp pages to the buddy.
    pub fn drain_all_pages(&self) {
        on_clock!(c => self.drain_all_pages_on(c));
    }

    fn drain_all_pages_on(&self, c: impl SpinClock) {
        for node in self.nodes.iter() {
            for cpu in self.cpus.all() {
                let mut pcp = node.zone.pcp[cpu].lock();
                let n = pcp.count;
                if n > 0 {
                    self.free_pcppages_bulk(c, cpu, &node.zone, &mut pcp, n);
                }
            }
        }
    }
}

impl PhysMem {
    /// `free_unref_page_list`: blocks with no references left go to this CPU's pcp lists,
    /// keeping one pcp lock across consecutive blocks of the same zone; on the clock `c` of
    /// the free it is part of.
    pub(super) fn free_unref_page_list<C: SpinClock>(
        &self,
        c: C,
        cpu: CpuId,
        blocks: &[(Pfn, Order)],
    ) {
        let mut held: Option<(usize, C::SpinGuard<'_, PerCpuPages>)> = None;
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
            // free_unref_page: prepare and put on the pcp list (or the buddy, below).
            c.charge(Cost::FreeUnrefPage, 1);
            if pcp_index(order).is_none() {
                held = None;
                let mut fa = zone.lock.lock();
                let merges = self.free_one_page_locked(c, zone, &mut fa, pfn, order);
                c.charge(Cost::FreeOneMerge, merges);
                drop(fa);
                self.stat
                    .add(cpu, VmItem::NrFreePages, order.nr_pages() as i64);
                continue;
            }
            if held.as_ref().map(|(n, _)| *n) != Some(nid) {
                drop(held.take());
                held = Some((nid, c.spin_lock(&zone.pcp[cpu])));
            }
            let pcp = &mut held.as_mut().expect("locked").1;
            self.pcp_commit(c, cpu, zone, pcp, pfn, order);
        }
        if freed != 0 {
            self.stat.add(cpu, VmItem::Pgfree, freed);
        }
    }
}
