//! `release_pages` (`folios_put_refs`): the free path of every `mmu_gather` batch — drop a
//! reference per page, take the last ones off the LRU under their node's `lru_lock` (batched
//! as `SWAP_CLUSTER_MAX` does) and hand them to `free_unref_page_list`.
//!
//! A gathered batch may hold the huge zero page (a zapped huge-zero PMD); as in v4.7 and v4.8,
//! its reference goes to `put_huge_zero_page` from this loop (`release_gathered`), with
//! the per-mm policy it is skipped.
//!
//! Mirrors `mm/swap.c`. The `lru_lock` is dropped before any pcp lock is taken.

use std::sync::atomic::Ordering::Relaxed;

use super::meta::*;
use super::{Lruvec, PhysMem};
use crate::addr::{Order, Pfn};
use crate::cpu::CpuId;
use crate::stats::VmItem;
use crate::sync::vhook::{on_clock, Touch};
use crate::sync::Cost;
use crate::sync::SpinClock;

impl PhysMem {
    /// `release_pages`: drop one reference on each page; those that reach zero leave the LRU
    /// (under their node's `lru_lock`, batched) and go to the freeing CPU's pcp lists
    /// (`free_unref_page_list`). Reserved pages (the zero pages) are skipped. This is the
    /// path every `mmu_gather` batch takes.
    #[doc(alias = "free_pages_and_swap_cache")]
    #[doc(alias = "folios_put_refs")]
    pub(crate) fn release_pages(&self, cpu: CpuId, pages: &[Pfn]) {
        on_clock!(c => self.release_pages_on(c, cpu, pages, None));
    }

    /// [`Self::release_pages`] of a flushed `mmu_gather` batch, which may hold the huge zero
    /// page `huge_zero` (a zapped huge-zero PMD): as v4.8's loop, each such entry calls `put`
    /// (`is_huge_zero_page` → `put_huge_zero_page`: the gather passes
    /// `HugeZeroPage::release_put`) and is skipped, in its place among the batch's pages.
    pub(crate) fn release_gathered(
        &self,
        cpu: CpuId,
        pages: &[Pfn],
        huge_zero: Option<Pfn>,
        put: &mut dyn FnMut(),
    ) {
        on_clock!(c => self.release_pages_on(c, cpu, pages, huge_zero.map(|p| (p, put))));
    }

    /// [`Self::release_pages`] on the clock `c` it found: its loop's hooks test no flag.
    fn release_pages_on(
        &self,
        c: impl SpinClock,
        cpu: CpuId,
        pages: &[Pfn],
        mut huge_zero: Option<(Pfn, &mut dyn FnMut())>,
    ) {
        let meta = self.meta_slice();
        // Sized at the first page that is really freed: releasing the references of an LRU-add
        // batch (pages still mapped) allocates nothing.
        let mut to_free: Vec<(Pfn, Order)> = Vec::new();
        let mut lru: Option<(usize, crate::sync::StatMutexGuard<'_, Lruvec>)> = None;
        let mut lock_batch = 0u32;
        let mut lru_removed = 0i64;
        let mut unevictable_removed = 0i64;
        // Pages taken off the LRU under the lock held now: `lruvec_del_folio` is charged before
        // each release of the lock (so that it is hold time in virtual time).
        let mut dels = 0u64;
        for &pfn in pages {
            let m = &meta[pfn.index()];
            let reserved = m.flags() & PG_RESERVED != 0;
            let is_huge_zero = reserved && matches!(huge_zero, Some((hz, _)) if hz == pfn);
            if reserved && !is_huge_zero {
                continue;
            }
            // Do not hold the lru lock for too long (SWAP_CLUSTER_MAX).
            if lru.is_some() {
                lock_batch += 1;
                if lock_batch == self.lru_lock_batch {
                    c.charge(Cost::LruDel, std::mem::take(&mut dels));
                    lru = None;
                    lock_batch = 0;
                }
            }
            // `is_huge_zero_page` comes before the page's refcount is touched.
            if is_huge_zero {
                if let Some((_, put)) = huge_zero.as_mut() {
                    put();
                }
                continue;
            }
            // `folio_put_testzero`: the first write of the page's line on the freeing CPU
            // (a worker's line was last written by the zapping CPU), a locked RMW.
            c.mem_touch_page(pfn.0, Touch::Rmw);
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
                    c.charge(Cost::LruDel, std::mem::take(&mut dels));
                    drop(lru.take());
                    lock_batch = 0;
                    lru = Some((nid, self.nodes[nid].lru.lock()));
                }
                dels += 1;
                let vec = &mut lru.as_mut().expect("locked").1;
                let nr = if f & PG_HEAD != 0 {
                    1i64 << m.order.load(Relaxed)
                } else {
                    1
                };
                if f & PG_MLOCKED != 0 {
                    vec.unevictable.remove_on(c, meta, pfn);
                    unevictable_removed += nr;
                } else {
                    vec.inactive_anon.remove_on(c, meta, pfn);
                    lru_removed += nr;
                }
                // `del_page_from_lru_list` -> `update_lru_size`: the memcg's LRU size.
                vec.touch_lru_size(c, pfn);
                // __ClearPageLRU: the last reference is gone, nobody else writes the flags.
                m.flags.store(f & !PG_LRU, Relaxed);
            }
            let order = if f & PG_HEAD != 0 {
                Order(m.order.load(Relaxed))
            } else {
                Order(0)
            };
            if to_free.capacity() == 0 {
                to_free.reserve_exact(pages.len());
            }
            to_free.push((pfn, order));
        }
        c.charge(Cost::LruDel, dels);
        drop(lru);
        if lru_removed != 0 {
            self.stat.add(cpu, VmItem::NrInactiveAnon, -lru_removed);
        }
        if unevictable_removed != 0 {
            self.stat
                .add(cpu, VmItem::NrUnevictable, -unevictable_removed);
        }
        self.free_unref_page_list(c, cpu, &to_free);
    }
}
