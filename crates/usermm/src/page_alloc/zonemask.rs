//! Which zones can serve an allocation, known without visiting them.
//!
//! An allocation walks its node's zonelist — the local node, then every other — and takes
//! the first zone that has a page. On a big machine whose local memory is used up, most
//! zones it would visit are exhausted too, and a walk that looks at each of them costs in
//! proportion to the node count: 64 nodes, 64 looks, every page. Linux pays that walk (with
//! `zone_watermark_fast` on per-zone counters, cheap per zone but still one per node); the
//! engine must not, so that what an operation costs does not grow with the nodes.
//!
//! Two bitmaps answer "may this zone serve `cpu`?" a word at a time: one bit per zone that
//! has pages in its buddy (`NR_FREE_PAGES > 0`), kept under each `zone.lock` as the count
//! crosses zero, and one bitmap per CPU with a bit per zone whose pcp lists of that CPU are
//! not empty, kept under the pcp lock as they fill and empty. The walk visits, in zonelist
//! order, only the zones whose bit is set in either; a bit is changed with an atomic only
//! when it flips, so the common allocation and free write nothing here.
//!
//! The zonelist order is the local node, then the nodes at `LOCAL_DISTANCE` from it (under NUMA
//! emulation, the other emulated nodes of its physical node: `cpu.rs`), then every other node,
//! each group from node 0 up. Linux's `build_zonelists` orders by distance too; among nodes at
//! one distance it takes the higher-numbered first and then rotates by `node_load`, which the
//! engine does not model (the seeds' machines have one remote distance).
//!
//! # Invariant
//! At every release of a zone's lock, its buddy bit says whether its free count is above
//! zero; at every release of a pcp lock, that CPU's bit for the zone says whether its lists
//! hold a page (`validate` checks both). The walk reads them without locks, as a hint: a
//! zone filled by a racing free may be passed, as a racing free may come just after a walk.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::addr::Pfn;
use crate::cpu::{CpuId, PerCpu};

/// The two bitmaps (see the module doc).
#[derive(Debug)]
pub(super) struct ZoneMask {
    nodes: usize,
    /// Under NUMA emulation, per physical node: the bits of its emulated nodes (node `n` is on
    /// physical node `n % phys`). Empty without emulation.
    same_phys: Box<[Box<[u64]>]>,
    /// Bit `n`: zone `n`'s buddy has a page.
    buddy: Box<[AtomicU64]>,
    /// Per CPU, bit `n`: zone `n`'s pcp lists of that CPU hold a page.
    pcp: PerCpu<Box<[AtomicU64]>>,
}

fn words(nodes: usize) -> Box<[AtomicU64]> {
    (0..nodes.div_ceil(64)).map(|_| AtomicU64::new(0)).collect()
}

/// Set or clear bit `n` of `map`, with a locked instruction only if it flips.
#[inline]
fn put(map: &[AtomicU64], n: usize, on: bool) {
    let (w, b) = (&map[n / 64], 1u64 << (n % 64));
    if (w.load(Relaxed) & b != 0) != on {
        if on {
            w.fetch_or(b, Relaxed);
        } else {
            w.fetch_and(!b, Relaxed);
        }
    }
}

#[inline]
fn get(map: &[AtomicU64], n: usize) -> bool {
    map[n / 64].load(Relaxed) & (1u64 << (n % 64)) != 0
}

impl ZoneMask {
    /// The bitmaps of `nodes` zones, for `nr_cpus` CPUs, the nodes emulated on `phys` physical
    /// nodes (`phys >= nodes`: no emulation).
    pub(super) fn new(nodes: usize, nr_cpus: usize, phys: usize) -> Self {
        let same_phys = if phys < nodes {
            (0..phys)
                .map(|p| {
                    let mut m = vec![0u64; nodes.div_ceil(64)];
                    for n in (p..nodes).step_by(phys) {
                        m[n / 64] |= 1 << (n % 64);
                    }
                    m.into_boxed_slice()
                })
                .collect()
        } else {
            Box::default()
        };
        ZoneMask {
            nodes,
            same_phys,
            buddy: words(nodes),
            pcp: PerCpu::new(nr_cpus, |_| words(nodes)),
        }
    }

    /// Zone `node`'s buddy count is now above zero (`true`) or zero. Caller holds its lock.
    #[inline]
    pub(super) fn set_buddy(&self, node: usize, has_pages: bool) {
        put(&self.buddy, node, has_pages);
    }

    /// `cpu`'s pcp lists of zone `node` now hold a page (`true`) or none. Caller holds that
    /// pcp lock.
    #[inline]
    pub(super) fn set_pcp(&self, cpu: CpuId, node: usize, has_pages: bool) {
        put(&self.pcp[cpu], node, has_pages);
    }

    pub(super) fn buddy(&self, node: usize) -> bool {
        get(&self.buddy, node)
    }

    pub(super) fn pcp(&self, cpu: CpuId, node: usize) -> bool {
        get(&self.pcp[cpu], node)
    }

    /// The zonelist walk of `local` on `cpu`: `try_zone(n)` for each zone that may serve, in
    /// zonelist order (`local`, then the emulated nodes of its physical node, then every other
    /// node, each from 0 up), until one returns a page.
    /// `with_pcp`: the allocation can be served from pcp lists (a pcp order), so this CPU's
    /// pcp bits count too. Visits only zones whose bit is set: O(nodes / 64) beyond them.
    #[inline]
    pub(super) fn walk(
        &self,
        cpu: CpuId,
        local: usize,
        with_pcp: bool,
        mut try_zone: impl FnMut(usize) -> Option<Pfn>,
    ) -> Option<Pfn> {
        let pcp = &self.pcp[cpu];
        let word = |w: usize| {
            let b = self.buddy[w].load(Relaxed);
            if with_pcp {
                b | pcp[w].load(Relaxed)
            } else {
                b
            }
        };
        let (lw, lb) = (local / 64, 1u64 << (local % 64));
        if word(lw) & lb != 0 {
            if let Some(p) = try_zone(local) {
                return Some(p);
            }
        }
        // With emulation: first the nodes of `local`'s physical node (`near`), then the rest.
        let near = self.same_phys.get(local % self.same_phys.len().max(1));
        let passes: &[bool] = if near.is_some() {
            &[true, false]
        } else {
            &[false]
        };
        for &in_near in passes {
            for w in 0..self.buddy.len() {
                let mut m = word(w);
                if w == lw {
                    m &= !lb;
                }
                if let Some(near) = near {
                    m &= if in_near { near[w] } else { !near[w] };
                }
                while m != 0 {
                    let n = w * 64 + m.trailing_zeros() as usize;
                    m &= m - 1;
                    if n >= self.nodes {
                        break;
                    }
                    if let Some(p) = try_zone(n) {
                        return Some(p);
                    }
                }
            }
        }
        None
    }
}
