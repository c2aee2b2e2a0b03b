//! The bench's rows about scale: many processes, random faults, many nodes.
//!
//! vm-scalability runs hundreds of processes at once, faults pages in random order, and runs
//! on machines of many nodes; each of these once cost the engine several times what the
//! kernel pays (a thundering herd at usemem's barriers, a 270 KiB histogram per mm, one
//! locked round trip per random word, a pcp lock per exhausted node on every fallback
//! allocation). These rows keep the three in view:
//!
//! - `fork-exit`: [`Mm::fork`] of a small mm (16 pages written, as the host child's), then
//!   the child's `mmput`, 1 000 times; on the host, `fork()`, `_exit(0)` in the new process
//!   and `waitpid`, 1 000 times, in a child that first sheds the calling process's large
//!   mappings ([`measure::host_fork_exit`]). The host figure is the forking thread's CPU time
//!   plus the children's (their exits): the engine's thread does both.
//! - `random-write-4k`: one write per page of a fresh `MADV_NOHUGEPAGE` mapping, the pages in
//!   one random order (the same permutation on both sides, [`random_order`]), the same body on
//!   both ([`crate::task::bodies::random_writes`]: the engine makes its writes in runs of 64
//!   under one TLB-gate hold, as usemem's random walk does); the host's figure is its second
//!   round, as `populate-4k`'s.
//! - `bigfree-nodes`: `usermm bigfree` of a quarter of the bench's size ([`bigfree_size`]) at
//!   `max_active 8` on 144 CPUs (the seed's machine), once on 4 nodes and once on 64, on the
//!   wall clock and in virtual time. The figures are
//!   ns per page of the whole run at 64 nodes ([`NodeScaling`] has both node counts and the
//!   ratios): machine boot, populate and free, on the process's CPU clock (the free workers
//!   included; nothing else runs meanwhile). Per-operation
//!   work must not grow with the node count, so the ratios are the targets.
//!
//! [`Mm::fork`]: usermm::Mm::fork

use serde::Serialize;
use usermm::config::{BackingMode, TimeMode};
use usermm::mm::mmap::{PROT_READ, PROT_WRITE};
use usermm_host::measure;

use super::engine::{lone, Engine, Meas, Timer};
use super::{engine_err, BenchError, PAGE};
use crate::bigfree::{self, BigfreeOpts, FreeBy};
use crate::task::bodies::{self, Failed};
use crate::task::Task;

/// Forks (and exits) per `fork-exit` sample.
pub const FORKS: u64 = 1000;
/// `bigfree-nodes`: the seed machine's CPUs, the free's workers, and the two node counts.
const BIGFREE_CPUS: u16 = 144;
const BIGFREE_MAX_ACTIVE: u32 = 8;
pub const NODES: [u16; 2] = [4, 64];

/// Bytes each `bigfree-nodes` run populates and frees: a quarter of the bench's `size` (at
/// the default 1 GiB, about half a second for the four runs of a repeat on a 2-core host).
pub fn bigfree_size(size: u64) -> u64 {
    (size / 4).next_multiple_of(PAGE).max(1 << 20)
}

/// Every page index below `pages` once, in an order fixed by `seed` (Fisher–Yates on a
/// 64-bit LCG: the same order for the engine and the host child).
pub fn random_order(pages: u64, seed: u64) -> Vec<u32> {
    let mut v: Vec<u32> = (0..pages.min(u64::from(u32::MAX)) as u32).collect();
    let mut x = seed | 1;
    for i in (1..v.len()).rev() {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let j = ((x >> 33) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

/// `count` forks of a small mm, each child put at once: per fork + exit. The fork is the
/// engine's own ([`usermm::Mm::fork`]): [`crate::task::Task`] has none, so the host's side
/// is its own loop ([`measure::host_fork_exit`]); the small mm's pages are written as a body's.
pub(super) fn engine_fork_exit(e: &Engine, count: u64) -> Result<Meas, BenchError> {
    let len = measure::FORK_TOUCHED_PAGES * PAGE;
    let s = lone(e, |t| {
        let a = bodies::map_aligned(t, len, PROT_READ | PROT_WRITE, false)?;
        t.touch(a, len, PAGE, true)?;
        let t0 = t.now();
        for _ in 0..count {
            let child = t.mm().fork(t.cpu()).map_err(|e| Failed::Call {
                what: "fork",
                errno: e.0,
            })?;
            child.mmput(t.cpu());
        }
        Ok(t.now().since(t0))
    })?;
    Ok(Meas::of(s, count))
}

/// One write to every page of a fresh mapping, in `order` ([`bodies::random_writes`]): per
/// page (each a write fault).
pub(super) fn engine_random_writes(e: &Engine, order: &[u32]) -> Result<Meas, BenchError> {
    let s = lone(e, |t| bodies::random_writes(t, order))?;
    Ok(Meas::of(s, order.len() as u64))
}

/// One `bigfree-nodes` run: ns per page of host CPU (the process's: every thread the run
/// used), of wall time, and (virtual runs) of modelled time (populate + free).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct NodeRun {
    pub(super) cpu: f64,
    pub(super) wall: f64,
    pub(super) modelled: f64,
}

/// bigfree of `size` at `max_active 8` on [`BIGFREE_CPUS`] CPUs and `nodes` nodes.
pub(super) fn bigfree_run(size: u64, nodes: u16, virt: bool) -> Result<NodeRun, BenchError> {
    let ma = [BIGFREE_MAX_ACTIVE];
    let mut o = BigfreeOpts::new(size, &ma);
    o.base = bigfree::default_config(size, &ma, Some(BIGFREE_CPUS), Some(nodes));
    o.base.backing = BackingMode::Sparse;
    let mut cfg = bigfree::row_config(&o, Some(BIGFREE_MAX_ACTIVE));
    if virt {
        cfg.time.mode = TimeMode::Virtual;
    }
    let t = Timer::start();
    let c0 = usermm_host::process_cpu_ns();
    let run = bigfree::RunSpec {
        size,
        free_by: FreeBy::Munmap,
        label: "bench",
        rep: 0,
    };
    let s = bigfree::run_once(&cfg, run, &mut |_| {}).map_err(engine_err)?;
    let cpu = usermm_host::process_cpu_ns().saturating_sub(c0) as f64;
    let pages = (size / PAGE).max(1) as f64;
    let wall = t.per(pages).wall;
    Ok(NodeRun {
        cpu: cpu / pages,
        wall,
        modelled: if virt {
            (s.populate_ns + s.free_ns) as f64 / pages
        } else {
            0.0
        },
    })
}

/// `bigfree-nodes` over the repeats: medians at each node count and their ratios (64 / 4).
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeScaling {
    /// Bytes populated and freed per run.
    pub size: u64,
    pub cpus: u16,
    pub max_active: u32,
    pub nodes: [u16; 2],
    /// Wall clock: host CPU ns per page (the task's and the free workers').
    pub cpu_ns: [f64; 2],
    pub cpu_ratio: f64,
    /// Wall clock: wall ns per page.
    pub wall_ns: [f64; 2],
    pub wall_ratio: f64,
    /// Virtual time: modelled ns per page (populate + free).
    pub virtual_ns: [f64; 2],
    pub virtual_ratio: f64,
    /// Virtual time: the host CPU the run took, ns per page.
    pub virtual_host_cpu_ns: [f64; 2],
    pub virtual_host_cpu_ratio: f64,
}

impl NodeScaling {
    /// From `[nodes][repeat]` wall runs and virtual runs.
    pub(super) fn of(size: u64, wall: &[Vec<NodeRun>; 2], virt: &[Vec<NodeRun>; 2]) -> Self {
        let med = |runs: &[NodeRun], f: fn(&NodeRun) -> f64| {
            let v: Vec<f64> = runs.iter().map(f).collect();
            if v.is_empty() {
                0.0
            } else {
                crate::stats::median(&v)
            }
        };
        let pair = |r: &[Vec<NodeRun>; 2], f: fn(&NodeRun) -> f64| [med(&r[0], f), med(&r[1], f)];
        let ratio = |p: [f64; 2]| if p[0] > 0.0 { p[1] / p[0] } else { 0.0 };
        let cpu_ns = pair(wall, |r| r.cpu);
        let wall_ns = pair(wall, |r| r.wall);
        let virtual_ns = pair(virt, |r| r.modelled);
        let virtual_host_cpu_ns = pair(virt, |r| r.cpu);
        NodeScaling {
            size,
            cpus: BIGFREE_CPUS,
            max_active: BIGFREE_MAX_ACTIVE,
            nodes: NODES,
            cpu_ns,
            cpu_ratio: ratio(cpu_ns),
            wall_ns,
            wall_ratio: ratio(wall_ns),
            virtual_ns,
            virtual_ratio: ratio(virtual_ns),
            virtual_host_cpu_ns,
            virtual_host_cpu_ratio: ratio(virtual_host_cpu_ns),
        }
    }
}
