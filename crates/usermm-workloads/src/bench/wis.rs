//! `wis-page-fault1`: will-it-scale's page_fault1 at one task on the engine on the wall clock,
//! sparse- and full-backed, and on this host's kernel, in one run: the same test body over
//! [`crate::task::Task`] on both (`crate::will_it_scale`).
//!
//! The task is a thread (`page_fault1_threads -t 1`) on both sides: the bench's process has
//! threads of its own (the engine machines' workers, a progress bar), and a child forked from
//! a multi-threaded process may not run the test body (`crate::task`'s host side refuses), so
//! process mode is out on the host; the engine does the same for a like comparison. At one
//! task the two modes do the same work but for the mm the loop runs in (the bench process's
//! on the host, whose other threads sleep: its munmaps flush no other CPU).
//!
//! Each repeat runs the three sides one after another (sparse, full, host), each for two
//! periods of [`BenchOpts::wis_period`]: the first warms up (the engine's frames get their
//! first owner, the host's memory its first touch) and is dropped, the second is the sample:
//! the period's wall time over the faults counted in it (ns per fault; a fault is one page of
//! page_fault1's loop — its write fault, and its share of the mmap and munmap around it). The
//! clock is the wall clock, as will-it-scale's: its figure is faults per second. The mapping
//! is page_fault1's 128 MiB, or the bench's `--size` when that is smaller. The engine's
//! machines are the bench's base with room for one mapping; on both sides the task is bound
//! to the first core, as will-it-scale binds its first task.
//!
//! `host_over_full` is the row's verdict: host ns per fault over the full-backed engine's
//! (≥ 1: the engine faults as fast as this host's kernel, zeroing every page as it does).

use std::sync::Arc;
use std::time::Duration;

use usermm::config::BackingMode;
use usermm::Machine;

use super::{
    config_of, engine_err, medians, BenchError, BenchOpts, BenchPath, PathResult, SideSamples,
    HPAGE,
};
use crate::task::{run_engine, run_host, Affinity, Launch, Mode, Schedule};
use crate::will_it_scale::Test;

/// page_fault1's mapping in the bench: its own 128 MiB, or `--size` when smaller.
pub fn size(opts: &BenchOpts) -> u64 {
    opts.size
        .min(Test::PageFault1.default_size())
        .next_multiple_of(4096)
}

/// One task, a thread (see the module doc), bound to the first core, for a warm-up period and
/// a measured one.
fn launch(period: Duration) -> Launch {
    Launch {
        tasks: 1,
        mode: Mode::Threads,
        affinity: Affinity::Cores,
        schedule: Schedule { period, periods: 2 },
    }
}

/// ns per fault of the measured period, from the cumulative counts at each period's end.
fn per_fault(counts: &[u64], period: Duration) -> Result<f64, BenchError> {
    match counts {
        [warm, end] if end > warm => Ok(period.as_nanos() as f64 / (end - warm) as f64),
        _ => Err(BenchError::Engine(format!(
            "page_fault1: no fault counted in the measured period (counts {counts:?})"
        ))),
    }
}

/// A machine of `backing` for one task of page_fault1 at `size`.
fn machine(opts: &BenchOpts, size: u64, backing: BackingMode) -> Result<Arc<Machine>, BenchError> {
    let mem = (size + size / 256 + (64 << 20)).next_multiple_of(HPAGE);
    let c = config_of(opts, mem, backing)?;
    Machine::new(c).map_err(|e| BenchError::Machine("page_fault1", e.to_string()))
}

/// One sample on the engine machine `m`.
fn engine_sample(m: &Arc<Machine>, size: u64, period: Duration) -> Result<f64, BenchError> {
    let mut counts = Vec::new();
    run_engine(
        m,
        &launch(period),
        |t| Test::PageFault1.body(t, size),
        &mut |row| counts.push(row[0]),
    )
    .map_err(engine_err)?;
    per_fault(&counts, period)
}

/// One sample on the host kernel.
fn host_sample(size: u64, period: Duration) -> Result<f64, BenchError> {
    let mut counts = Vec::new();
    run_host(
        &launch(period),
        |t| Test::PageFault1.body(t, size),
        &mut |row| counts.push(row[0]),
    )
    .map_err(|e| BenchError::Engine(format!("page_fault1 on the host kernel: {e}")))?;
    per_fault(&counts, period)
}

/// The row: `opts.repeat` samples of each side, `progress` told before each repeat.
pub(super) fn row(
    opts: &BenchOpts,
    progress: &mut dyn FnMut(&str),
) -> Result<PathResult, BenchError> {
    let size = size(opts);
    let period = opts.wis_period;
    let sparse = machine(opts, size, BackingMode::Sparse)?;
    let full = machine(opts, size, BackingMode::Full)?;
    let (mut s, mut f, mut h) = (Vec::new(), Vec::new(), Vec::new());
    for r in 1..=opts.repeat {
        progress(&format!("repeat {r}: will-it-scale page_fault1, 1 task"));
        s.push(engine_sample(&sparse, size, period)?);
        f.push(engine_sample(&full, size, period)?);
        if opts.host {
            h.push(host_sample(size, period)?);
        }
    }
    sparse.validate().map_err(engine_err)?;
    full.validate().map_err(engine_err)?;
    // One clock, the wall clock: each side's samples are its wall and its "CPU" figures.
    let side = |v: Vec<f64>| SideSamples {
        cpu: v.clone(),
        wall: v,
    };
    Ok(medians(
        BenchPath::WisPageFault1,
        "wall",
        [side(f), side(s), side(h)],
    ))
}
