//! `PhysMem::validate`: the invariants of the parent module over all memory (the analogue of
//! `CONFIG_DEBUG_VM`'s page checks), for tests and `debug_vm` builds.

use std::sync::atomic::Ordering::Relaxed;

use super::meta::*;
use super::{pcp_index, PhysMem, PhysReport, PCP_BATCH_SCALE_MAX};
use crate::addr::{Order, HPAGE_PMD_ORDER};
use crate::stats::VmItem;

/// How many entries the lists hold, and how many frames the sweep found in each state: the
/// two must agree (every listed frame is flagged so, and every flagged frame is listed).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tally {
    buddy: u64,
    pcp: u64,
    lru: u64,
}

impl PhysMem {
    /// Check the invariants of the module doc over all memory. Call only when no other thread
    /// allocates or frees (it takes the locks one at a time, so it is safe but not atomic).
    #[doc(alias = "check_pages")]
    pub fn validate(&self) -> Result<PhysReport, String> {
        let mut listed = Tally::default();
        for node in self.nodes.iter() {
            listed.buddy += self.validate_free_area(&node.zone)?;
            listed.pcp += self.validate_pcp(&node.zone)?;
            listed.lru += self.validate_lru(node)?;
        }
        let mut r = PhysReport {
            total: self.nr_frames,
            ..Default::default()
        };
        let seen = self.validate_frames(&mut r)?;
        if seen != listed {
            return Err(format!(
                "flags vs lists: buddy {}/{}, pcp {}/{}, lru {}/{}",
                seen.buddy, listed.buddy, seen.pcp, listed.pcp, seen.lru, listed.lru
            ));
        }
        r.on_lru = listed.lru;
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

    /// `zone`'s free lists (under `zone->lock`): each block a buddy of its list's order,
    /// aligned and inside the zone; `nr_free` and the zone mask agree with them. Returns the
    /// blocks listed.
    fn validate_free_area(&self, z: &super::Zone) -> Result<u64, String> {
        let meta = self.meta_slice();
        let fa = z.lock.lock();
        let (mut zone_free, mut blocks) = (0, 0);
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
                if pfn.0 % (1 << o) != 0 || pfn.0 < z.start_pfn || pfn.0 + (1 << o) > z.end_pfn {
                    return Err(format!("free block {:#x}/{o} misplaced", pfn.0));
                }
            }
            zone_free += list.len() << o;
            blocks += list.len();
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
        Ok(blocks)
    }

    /// Every CPU's pcp lists of `zone` (each under its lock): entries flagged pcp on the list
    /// of their order, `count` and the zone mask agreeing, auto-tuning within its bounds.
    /// Returns the entries listed.
    fn validate_pcp(&self, z: &super::Zone) -> Result<u64, String> {
        let meta = self.meta_slice();
        let mut listed = 0;
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
                    listed += 1;
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
        Ok(listed)
    }

    /// `node`'s LRU lists (under `lru_lock`): every page on them flagged LRU, referenced and
    /// of this node. Returns the pages listed.
    fn validate_lru(&self, node: &super::Node) -> Result<u64, String> {
        let meta = self.meta_slice();
        let lru = node.lru.lock();
        let mut listed = 0;
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
                if self.node_of(pfn) != node.zone.node.index() {
                    return Err(format!("pfn {:#x} on the wrong node's LRU", pfn.0));
                }
                listed += 1;
            }
        }
        Ok(listed)
    }

    /// The sweep over every frame: each one free in the buddy (a block's head and its clear
    /// tail), on a pcp list, a compound page (head and tails) or a referenced page, counted
    /// once into `r`. Returns the buddy, pcp and LRU entries it found.
    fn validate_frames(&self, r: &mut PhysReport) -> Result<Tally, String> {
        let meta = self.meta_slice();
        let hugetlb: std::collections::HashSet<u64> =
            self.hugetlb_pool.lock().iter().map(|p| p.0).collect();
        let mut seen = Tally::default();
        let mut pfn = 0u64;
        while pfn < self.nr_frames {
            let m = &meta[pfn as usize];
            let f = m.flags();
            let span: u64;
            if f == PG_BUDDY {
                let o = m.private.load(Relaxed);
                span = 1 << o;
                seen.buddy += 1;
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
                seen.pcp += 1;
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
                    seen.lru += 1;
                }
            } else if m.ref_count() > 0 && f & (PG_BUDDY | PG_PCP) == 0 {
                span = 1;
                r.allocated += 1;
                if f & PG_LRU != 0 {
                    seen.lru += 1;
                }
            } else {
                return Err(format!(
                    "pfn {pfn:#x} is neither free nor allocated (flags {f:#x}, ref {})",
                    m.ref_count()
                ));
            }
            pfn += span;
        }
        Ok(seen)
    }
}
