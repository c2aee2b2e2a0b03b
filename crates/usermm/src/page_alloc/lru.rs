//! The per-node LRU: `lru_cache_add` into per-CPU batches, `lru_add_drain[_all]`, mlock's
//! moves between the evictable and unevictable lists, and `__split_huge_page` (reduced).
//!
//! Mirrors `mm/swap.c` and `mm/mlock.c`. Lock order: `lru_add batch -> lru_lock`, and
//! `lru_add batch -> pcp lock -> zone.lock` when a batch held a page's last reference: a full
//! batch is moved with its lock held, as the kernel moves a `folio_batch` under its
//! `local_lock`.

use std::sync::atomic::Ordering::Relaxed;

use super::meta::*;
use super::{Lruvec, PhysMem};
use crate::addr::Pfn;
use crate::cpu::CpuId;
use crate::stats::VmItem;
use crate::sync::vhook::{on_clock, Current};
use crate::sync::Cost;
use crate::sync::SpinClock;

impl PhysMem {
    /// `lru_cache_add` / `folio_add_lru`: queue a newly mapped page for the LRU in this CPU's
    /// batch (which holds a reference, as a pagevec does); add the batch when full.
    ///
    /// A full batch is moved to the LRU with the CPU's batch lock held, as the kernel moves a
    /// `folio_batch` under its `local_lock`, and the batch keeps its capacity: the fault path
    /// allocates nothing.
    #[doc(alias = "folio_add_lru")]
    pub(crate) fn lru_cache_add(&self, cpu: CpuId, pfn: Pfn) {
        on_clock!(c => self.lru_cache_add_on(c, cpu, pfn));
    }

    /// [`Self::lru_cache_add`] on the clock `c` it found (or a fault's, decided at its entry):
    /// the batch lock and the commit test no flag.
    #[inline(always)]
    pub(crate) fn lru_cache_add_on(&self, c: impl SpinClock, cpu: CpuId, pfn: Pfn) {
        self.get_page(pfn);
        self.meta(pfn).set(PG_LRU_BATCH);
        let mut b = c.spin_lock(&self.lru_add[cpu]);
        b.push(pfn);
        if b.len() >= self.lru_add_batch {
            // Lock order: lru_add batch -> lru_lock; lru_add batch -> pcp lock -> zone.lock
            self.lru_add_batch_commit_on(c, cpu, &b);
            b.clear();
        }
    }

    /// `__pagevec_lru_add` then drop the batch's references (`release_pages`).
    pub(super) fn lru_add_batch_commit(&self, cpu: CpuId, batch: &[Pfn]) {
        on_clock!(c => self.lru_add_batch_commit_on(c, cpu, batch));
    }

    /// [`Self::lru_add_batch_commit`] on the clock `c` it found.
    fn lru_add_batch_commit_on(&self, c: impl SpinClock, cpu: CpuId, batch: &[Pfn]) {
        let meta = self.meta_slice();
        let mut held: Option<(usize, crate::sync::StatMutexGuard<'_, Lruvec>)> = None;
        let (mut anon, mut unevictable) = (0i64, 0i64);
        // `lruvec_add_folio`s under the lock held now, charged before it is released.
        let mut adds = 0u64;
        for &pfn in batch {
            let nid = self.node_of(pfn);
            if held.as_ref().map(|(n, _)| *n) != Some(nid) {
                c.charge(Cost::LruAdd, std::mem::take(&mut adds));
                drop(held.take());
                held = Some((nid, self.nodes[nid].lru.lock()));
            }
            adds += 1;
            let vec = &mut held.as_mut().expect("locked").1;
            let m = &meta[pfn.index()];
            let nr = if m.test(PG_HEAD) {
                1i64 << m.order.load(Relaxed)
            } else {
                1
            };
            if m.test(PG_MLOCKED) {
                vec.unevictable.push_back_on(c, meta, pfn);
                unevictable += nr;
            } else {
                vec.inactive_anon.push_back_on(c, meta, pfn);
                anon += nr;
            }
            // `add_page_to_lru_list` -> `update_lru_size`: the memcg's LRU size.
            vec.touch_lru_size(c, pfn);
            m.clear(PG_LRU_BATCH);
            m.set(PG_LRU);
        }
        c.charge(Cost::LruAdd, adds);
        drop(held);
        self.stat.add(cpu, VmItem::NrInactiveAnon, anon);
        self.stat.add(cpu, VmItem::NrUnevictable, unevictable);
        self.release_pages(cpu, batch);
    }

    /// `lru_add_drain`: flush this CPU's LRU-add batch.
    pub fn lru_add_drain(&self, cpu: CpuId) {
        let mut b = self.lru_add[cpu].lock();
        if !b.is_empty() {
            // Lock order: lru_add batch -> lru_lock; lru_add batch -> pcp lock -> zone.lock
            self.lru_add_batch_commit(cpu, &b);
            b.clear();
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
    pub(crate) fn lru_set_mlocked(&self, cpu: CpuId, pfn: Pfn, mlocked: bool) {
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
            // The delete's and the add's `update_lru_size`.
            vec.touch_lru_size(Current, pfn);
            vec.touch_lru_size(Current, pfn);
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
    pub(crate) fn split_compound(&self, cpu: CpuId, head: Pfn) {
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
}
