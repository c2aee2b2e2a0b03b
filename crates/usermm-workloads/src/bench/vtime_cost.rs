//! What virtual time costs the host: the same workload on the wall clock and in virtual time,
//! compared on this process's CPU time.
//!
//! A virtual run executes the engine's same code, plus the runtime's part: at every
//! synchronisation point the context waits for its turn (often a switch to another context's
//! coroutine), every charge is priced, every line the model tracks is looked up
//! (`usermm::vtime`, "What it costs the host"). The performance targets ask that this
//! stays within a small factor of the wall-clock run, so that a sweep of modelled machines
//! costs about what a sweep of host runs does. Two rows measure it:
//!
//! | row | workload | target |
//! |---|---|---|
//! | `bigfree-virtual` | `usermm bigfree SIZE --max-active 8 --seed-only` (12 CPUs, 4 nodes; vanilla and max_active 8) | virtual ≤ 1.5× wall |
//! | `usemem-ab-virtual` | `usermm usemem -n 8 --readonly -j 0x200000 SIZE --ab` (8 CPUs, 2 nodes, THP always) | virtual ≤ 2× wall |
//!
//! Virtual time uses the profile `haswell-ex-4s` for both, with the same CPUs, nodes and
//! memory as the wall run. These machines are the rows' own: the bench's engine flags
//! (`--cpus`, `--set`, ...) describe the engine rows' two machines only. The figure is process CPU time (`getrusage`: every thread's user
//! and system time, so the wall run's worker threads count), per 4 KiB page of the bigfree
//! mapping or per usemem fault; the ratio `virtual_over_wall` is what the targets read.
//!
//! Sizes: bigfree maps the bench's `--size` (default 1 GiB, where the target was first measured on 8 GiB:
//! the bench stays quick), freed in 8 jobs as 8 GiB is with the seed's 1 GiB threshold; each
//! usemem process maps 8 times `--size` (one huge-zero fault per 2 MiB: 4096 faults per
//! process at the default). Machine set-up is in the figure on both sides alike.

use usermm::config::{BackingMode, MachineConfig, ThpMode, TimeMode};
use usermm_host::facts::process_cpu_ns;

use super::BenchError;
use crate::{bigfree, usemem};

/// The profile both rows model in virtual time (seeds 000/001's Haswell-EX).
pub const PROFILE: &str = "haswell-ex-4s";

const PAGE: u64 = 4096;
const HPAGE: u64 = 2 << 20;
/// usemem's worker processes.
const USEMEM_PROCS: u16 = 8;

/// One run's CPU time per unit, in ns.
fn per_unit(t0: u64, units: u64) -> f64 {
    process_cpu_ns().saturating_sub(t0) as f64 / units.max(1) as f64
}

fn clock(c: &mut MachineConfig, virt: bool) {
    c.time.mode = if virt {
        TimeMode::Virtual
    } else {
        TimeMode::Wall
    };
    c.time.profile = PROFILE.into();
}

/// `bigfree SIZE --max-active 8 --seed-only` on one clock: process CPU ns per page.
pub(super) fn bigfree_cpu(size: u64, virt: bool) -> Result<f64, BenchError> {
    let size = size.next_multiple_of(HPAGE);
    let mut opts = bigfree::BigfreeOpts::new(size, &[8]);
    opts.pcp_tune_rows = false;
    // Eight jobs, as 8 GiB makes with the seed's threshold.
    let threshold = (size / PAGE).div_ceil(8).max(510);
    opts.threshold_pages = threshold;
    opts.max_batch_count = threshold.div_ceil(510) as u32;
    clock(&mut opts.base, virt);
    let t0 = process_cpu_ns();
    bigfree::run_with(&opts, &mut |_| {}).map_err(|e| BenchError::Engine(e.to_string()))?;
    Ok(per_unit(t0, size / PAGE))
}

/// `usemem -n 8 --readonly -j 0x200000 SIZE --ab` on one clock: process CPU ns per fault.
pub(super) fn usemem_ab_cpu(size: u64, virt: bool) -> Result<f64, BenchError> {
    let size = size.next_multiple_of(HPAGE);
    let opts = usemem::UsememOpts {
        size,
        nproc: i32::from(USEMEM_PROCS),
        readonly: true,
        step: HPAGE,
        quiet: true,
        ..usemem::UsememOpts::default()
    };
    // Page tables only (every fault maps the huge zero page and deposits one table).
    let tables = u64::from(USEMEM_PROCS) * (size / 256);
    let mut base = MachineConfig {
        mem: (tables + (1 << 30)).next_multiple_of(1 << 30),
        cpus: USEMEM_PROCS,
        nodes: 2,
        thp: ThpMode::Always,
        backing: BackingMode::Sparse,
        ..MachineConfig::default()
    };
    clock(&mut base, virt);
    let t0 = process_cpu_ns();
    usemem::run_ab(&base, &opts).map_err(|e| BenchError::Engine(e.to_string()))?;
    // Both machines (vanilla and patched) fault every 2 MiB of every process's mapping.
    Ok(per_unit(t0, 2 * u64::from(USEMEM_PROCS) * (size / HPAGE)))
}
