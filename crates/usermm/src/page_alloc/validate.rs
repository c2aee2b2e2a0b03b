//! `PhysMem::validate`: the invariants of the parent module over all memory (the analogue of
//! `CONFIG_DEBUG_VM`'s page checks), for tests and `debug_vm` builds.

use std::sync::atomic::Ordering::Relaxed;

use super::meta::*;
use super::{pcp_index, PhysMem, PhysReport, PCP_BATCH_SCALE_MAX};
use crate::addr::{Order, HPAGE_PMD_ORDER};
use crate::stats::VmItem;

impl PhysMem {
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
                if self.zone_mask.buddy(z.node.index()) != (zone_free > 0) {
                    return Err(format!(
                        "node {}: {zone_free} pages free but the zone mask says otherwise",
                        z.node.0
                    ));
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
                if self.zone_mask.pcp(cpu, z.node.index()) != (pcp.count > 0) {
                    return Err(format!(
                        "{cpu} node {}: pcp count {} but the zone mask says otherwise",
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
