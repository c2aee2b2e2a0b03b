//! A published will-it-scale curve predicted: page_fault1 on the machine of Daniel Jordan's
//! lru_lock posting ([`crate::seeds::PAGE_FAULT1`]), modelled in virtual time on
//! `broadwell-ep-2s` at each task count the posting gives, each row beside its published
//! figure with its error and band.
//!
//! A validation set: no figure of the curve is an input of the profile or trains an era
//! factor; the rows are *predicted*. Each row is its own run on a fresh machine of the
//! posting's shape (88 CPUs, 2 nodes, sparse-backed, with RAM for every task's 128 MiB), the
//! tasks placed as will-it-scale places them (one per core first, then the cores' second
//! threads: `crate::task`), and its figure is will-it-scale's `average:` — faults per second
//! over the measured periods after main.c's six of warm-up. A period is [`CurveOpts::period`]
//! of virtual time (each line scaled to a second, `run.rs`): long enough that a task finishes
//! several 128 MiB iterations in each (a page_fault1 iteration at one task is about 50 ms on
//! the modelled machine), short enough that 88 tasks run in a few host seconds a period.
//! Virtual runs are deterministic: the same options give the same record, byte for byte.

use std::time::Duration;

use serde::Serialize;
use usermm::config::{BackingMode, MachineConfig, TimeMode, MAX_MEM_BYTES};
use usermm::Machine;

use super::{run, Backend, Params, Test, WisError};
use crate::seeds::{PageFault1Curve, SeedMachine, PAGE_FAULT1, PAGE_FAULT1_MACHINE};
use crate::task::{Affinity, Mode};
use crate::validation::{Band, TIME_BAND};

/// How the curve is run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CurveOpts {
    /// A period of virtual time (in `results.json`: `period_ms`).
    #[serde(rename = "period_ms", serialize_with = "millis")]
    pub period: Duration,
    /// Measured periods after the warm-up (will-it-scale's `-s`).
    pub seconds: usize,
    /// page_fault1's mapping instead of its 128 MiB (tests of this crate: a shorter run whose
    /// figures mean little).
    pub size: Option<u64>,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

impl CurveOpts {
    /// `reproduce`'s run: 100 ms periods, two measured (eight periods in all, 0.8 s of virtual
    /// time a row).
    pub const DEFAULT: CurveOpts = CurveOpts {
        period: Duration::from_millis(100),
        seconds: 2,
        size: None,
    };

    /// A run for tests: a 256 KiB mapping and 200 µs periods.
    pub fn tiny() -> CurveOpts {
        CurveOpts {
            period: Duration::from_micros(200),
            seconds: 1,
            size: Some(256 << 10),
        }
    }
}

/// One task count in one mode: the published figure and the prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurveRow {
    pub tasks: usize,
    pub mode: Mode,
    /// Page faults per second, as published.
    pub published: u64,
    /// Page faults per second, modelled (will-it-scale's `average:`).
    pub predicted: u64,
    /// `predicted / published - 1`.
    pub error: f64,
    pub band: Band,
    pub within: bool,
    /// The modelled machine's idle share during the run, in percent (runtest.py's column).
    pub idle_percent: f64,
    /// Always `predicted`: no row of the curve trains anything.
    pub kind: &'static str,
}

/// The curve's record (`results.json`'s `will_it_scale`).
#[derive(Debug, Clone, Serialize)]
pub struct CurveRecord {
    pub test: &'static str,
    /// `modelled (profile broadwell-ep-2s)`.
    pub time: String,
    pub machine: SeedMachine,
    pub source: &'static str,
    pub kernel: &'static str,
    pub opts: CurveOpts,
    pub rows: Vec<CurveRow>,
    /// Rows within their band, of all rows.
    pub within: usize,
}

/// The modelled machine for `tasks` tasks of page_fault1 at `size` bytes each: the posting's
/// CPUs and nodes, sparse-backed, with RAM for every task's mapping and its page tables.
fn machine(tasks: usize, size: u64) -> Result<std::sync::Arc<Machine>, WisError> {
    let m = PAGE_FAULT1_MACHINE;
    let per_task = size + size / 512 + (2 << 20);
    let mem = (per_task.saturating_mul(tasks as u64) + (512 << 20)).next_multiple_of(1 << 30);
    let mut c = MachineConfig {
        mem: mem.min(MAX_MEM_BYTES),
        cpus: m.cpus,
        nodes: m.nodes,
        backing: BackingMode::Sparse,
        ..MachineConfig::default()
    };
    c.time.mode = TimeMode::Virtual;
    c.time.profile = m.profile.into();
    Machine::new(c).map_err(|e| WisError::Failed(format!("{}: {e}", m.profile)))
}

/// Every published `(tasks, mode, faults/s)` of `curve`, processes first.
pub fn published_rows(curve: &PageFault1Curve) -> Vec<(usize, Mode, u64)> {
    let p = curve
        .processes
        .iter()
        .map(|&(n, f)| (n, Mode::Processes, f));
    let t = curve.threads.iter().map(|&(n, f)| (n, Mode::Threads, f));
    p.chain(t).collect()
}

/// One row: page_fault1 at `tasks` in `mode` on a fresh modelled machine.
fn row(
    opts: &CurveOpts,
    (tasks, mode, published): (usize, Mode, u64),
) -> Result<(CurveRow, String), WisError> {
    let size = opts.size.unwrap_or(Test::PageFault1.default_size());
    let m = machine(tasks, size)?;
    let params = Params {
        tasks,
        mode,
        affinity: Affinity::Cores,
        seconds: opts.seconds,
        period: opts.period,
        size: opts.size,
        verbose: false,
    };
    let rec = run(Test::PageFault1, Backend::Engine(&m), &params, &mut |_| {})?;
    let predicted = rec.average.ok_or_else(|| {
        WisError::Failed(format!(
            "page_fault1 at {tasks} {}: no average (tasks ended: {})",
            mode.name(),
            rec.stops.join(", ")
        ))
    })?;
    let band = TIME_BAND;
    let (p, q) = (published as f64, predicted as f64);
    Ok((
        CurveRow {
            tasks,
            mode,
            published,
            predicted,
            error: band.error(p, q),
            band,
            within: band.within(p, q),
            idle_percent: rec.idle_percent.unwrap_or(0.0),
            kind: "predicted",
        },
        rec.time,
    ))
}

/// Predict the published page_fault1 curve, row by row (`progress` is told each row before
/// it runs).
pub fn predict(opts: &CurveOpts, progress: &dyn Fn(&str)) -> Result<CurveRecord, WisError> {
    let mut rows = Vec::new();
    let mut time = String::new();
    for r in published_rows(&PAGE_FAULT1) {
        progress(&format!("page_fault1, {} {}", r.0, r.1.name()));
        let (row, t) = row(opts, r)?;
        rows.push(row);
        time = t;
    }
    Ok(CurveRecord {
        test: Test::PageFault1.name(),
        time,
        machine: PAGE_FAULT1_MACHINE,
        source: PAGE_FAULT1.posting,
        kernel: PAGE_FAULT1.kernel,
        opts: *opts,
        within: rows.iter().filter(|r| r.within).count(),
        rows,
    })
}
