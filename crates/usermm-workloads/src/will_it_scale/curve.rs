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
//! of virtual time (each line scaled to a second, `run.rs`), short enough that 88 tasks run in
//! a few host seconds a period.
//!
//! The measured window must hold whole iterations of each task's mmap, touch and munmap of
//! 128 MiB, or it measures a phase of the iteration rather than its rate: the modelled tasks
//! start together and run alike, so their munmaps fall together, and a period in which every
//! task unmaps sees almost no fault. runtest.py's window (`-s 5` of one-second periods) holds
//! eighteen iterations at the posting's slowest row; a page_fault1 iteration is about 50 ms
//! at one task but about 0.3 s at 88 on the modelled machine, longer than two 100 ms
//! periods. So a row whose window holds fewer than [`WINDOW_ITERATIONS`] iterations at its
//! own modelled rate is run again, from the start, with a window that holds them
//! ([`window_periods`]; `measured_periods` in its record). The window is sized by the model's
//! rate, never by the published one.
//!
//! Virtual runs are deterministic: the same options give the same record, byte for byte.

use std::time::Duration;

use serde::Serialize;
use usermm::addr::PAGE_SIZE;
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
    /// `zone->lock` held per fault over the run (allocation and free; every zone), ns.
    pub zone_lock_ns_per_fault: f64,
    /// `lru_lock` held per fault over the run (every node), ns.
    pub lru_lock_ns_per_fault: f64,
    /// The most `zone->lock` may be held per fault for the published rate, had the lock of
    /// the busiest zone been held all the time (1 s over the faults/s of that zone's tasks), ns.
    pub zone_lock_bound_ns: f64,
    /// Periods averaged (will-it-scale's `-s`): [`CurveOpts::seconds`], or more when that
    /// window held fewer than [`WINDOW_ITERATIONS`] of a task's iterations.
    pub measured_periods: usize,
    /// Always `predicted`: no row of the curve trains anything.
    pub kind: &'static str,
}

/// The iterations of one task (mmap, touch every page, munmap) a measured window must hold
/// (the module's essay).
pub const WINDOW_ITERATIONS: f64 = 3.0;

/// The most periods a row is measured over, however slow its tasks (host time).
const MAX_PERIODS: usize = 40;

/// The measured periods a row needs: `opts.seconds`, or enough for [`WINDOW_ITERATIONS`]
/// iterations of `pages` faults each at `faults_per_s` over `tasks` tasks (at most
/// [`MAX_PERIODS`]).
pub fn window_periods(opts: &CurveOpts, pages: u64, tasks: usize, faults_per_s: u64) -> usize {
    if faults_per_s == 0 || tasks == 0 {
        return opts.seconds;
    }
    let iteration_s = pages as f64 * tasks as f64 / faults_per_s as f64;
    let need = (WINDOW_ITERATIONS * iteration_s / opts.period.as_secs_f64()).ceil() as usize;
    need.clamp(opts.seconds, MAX_PERIODS.max(opts.seconds))
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
    /// What the rows out of their band point to (`notes`), one line each.
    pub notes: Vec<String>,
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
    let measure = |seconds: usize| {
        let m = machine(tasks, size)?;
        let params = Params {
            tasks,
            mode,
            affinity: Affinity::Cores,
            seconds,
            period: opts.period,
            size: opts.size,
            verbose: false,
        };
        let rec = run(Test::PageFault1, Backend::Engine(&m), &params, &mut |_| {})?;
        let average = rec.average.ok_or_else(|| {
            WisError::Failed(format!(
                "page_fault1 at {tasks} {}: no average (tasks ended: {})",
                mode.name(),
                rec.stops.join(", ")
            ))
        })?;
        Ok::<_, WisError>((rec, average))
    };
    let (mut rec, mut predicted) = measure(opts.seconds)?;
    let measured_periods = window_periods(opts, size / PAGE_SIZE, tasks, predicted);
    if measured_periods > opts.seconds {
        (rec, predicted) = measure(measured_periods)?;
    }
    let band = TIME_BAND;
    let (p, q) = (published as f64, predicted as f64);
    let faults = rec
        .vmstat
        .as_ref()
        .and_then(|v| v.get("pgfault").copied())
        .unwrap_or(0)
        .max(1) as f64;
    let held = |class: &str| {
        rec.lock_stat
            .iter()
            .flatten()
            .filter(|l| l.class == class)
            .map(|l| l.holdtime_total_ns)
            .sum::<u64>() as f64
            / faults
    };
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
            zone_lock_ns_per_fault: held("zone.lock"),
            lru_lock_ns_per_fault: held("lru_lock"),
            zone_lock_bound_ns: 1e9 / (p * busiest_node_share(tasks)),
            measured_periods,
            kind: "predicted",
        },
        rec.time,
    ))
}

/// The share of `tasks` tasks on the busiest node of the posting's machine, as will-it-scale
/// places them (one per core in hwloc's order, socket 0's cores first, then the second
/// threads): all of them up to a socket's cores, half beyond.
fn busiest_node_share(tasks: usize) -> f64 {
    let m = PAGE_FAULT1_MACHINE;
    let cores_per_node = usize::from(m.cpus) / usize::from(m.nodes) / 2;
    if tasks <= cores_per_node {
        1.0
    } else {
        1.0 / f64::from(m.nodes)
    }
}

/// What a row below its band points to, when its `zone->lock` work per fault is more than the
/// published rate leaves room for (`None` otherwise).
fn note(row: &CurveRow) -> Option<String> {
    if row.within || row.error > 0.0 || row.zone_lock_ns_per_fault <= row.zone_lock_bound_ns {
        return None;
    }
    Some(format!(
        "{} {}: {:+.1} %. The model holds zone->lock {:.0} ns a fault (rmqueue_bulk and \
         free_pcppages_bulk, 31 pages a hold); the posting's {} faults/s leave at most {:.0} ns \
         even with the busiest zone's lock never free. Under the lock the model overlaps \
         the stores' misses (the store buffer) but prices each load of a struct-page line \
         another CPU wrote as one dependent transfer; loads overlapped (the next page's \
         buddy reached by the out-of-order window, or fetched ahead: Aaron Lu's prefetch of \
         the buddy outside the lock gained 8.9 % on a 2-socket Broadwell, linux-mm \
         2018-01-23) is what the model lacks.",
        row.tasks,
        row.mode.name(),
        row.error * 100.0,
        row.zone_lock_ns_per_fault,
        row.published,
        row.zone_lock_bound_ns
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
        notes: rows.iter().filter_map(note).collect(),
        rows,
    })
}

#[cfg(test)]
mod test {
    use super::*;

    fn row(published: u64, predicted: u64, zone_ns: f64, tasks: usize) -> CurveRow {
        let (p, q) = (published as f64, predicted as f64);
        CurveRow {
            tasks,
            mode: Mode::Processes,
            published,
            predicted,
            error: TIME_BAND.error(p, q),
            band: TIME_BAND,
            within: TIME_BAND.within(p, q),
            idle_percent: 0.0,
            zone_lock_ns_per_fault: zone_ns,
            lru_lock_ns_per_fault: 0.0,
            zone_lock_bound_ns: 1e9 / (p * busiest_node_share(tasks)),
            measured_periods: 2,
            kind: "predicted",
        }
    }

    /// The window holds three iterations at the row's rate: two 100 ms periods hold them at
    /// one task (32 768 faults an iteration at 626 944 faults/s: 52 ms), three are needed at
    /// 22 tasks (95 ms an iteration), nine at 88 (0.28 s).
    #[test]
    fn a_window_holds_three_iterations_of_a_task() {
        let o = CurveOpts::DEFAULT;
        let pages = (128 << 20) / PAGE_SIZE;
        assert_eq!(window_periods(&o, pages, 1, 626_944), 2);
        assert_eq!(window_periods(&o, pages, 88, 10_321_790), 9);
        assert_eq!(window_periods(&o, pages, 22, 7_569_187), 3);
        // No rate (no average): the window asked for; a rate of nearly nothing: the cap.
        assert_eq!(window_periods(&o, pages, 88, 0), 2);
        assert_eq!(window_periods(&o, pages, 88, 1), MAX_PERIODS);
    }

    /// A row below its band whose zone->lock work per fault exceeds what the published rate
    /// allows is noted, with its figures; a row within its band, above it, or below it with
    /// room under the bound is not (that miss points elsewhere).
    #[test]
    fn only_a_slow_row_past_the_zone_lock_bound_is_noted() {
        // 22 tasks, one zone: 7 569 187 faults/s leave 132 ns a fault.
        let slow = row(7_569_187, 4_985_245, 157.0, 22);
        assert!((slow.zone_lock_bound_ns - 132.1).abs() < 0.1);
        let n = note(&slow).expect("a note");
        assert!(n.starts_with("22 processes: -34.1 %."), "{n}");
        assert!(
            n.contains("157 ns a fault") && n.contains("at most 132 ns"),
            "{n}"
        );
        // 44 tasks: two zones share the faults, so the bound doubles.
        assert!((row(13_446_153, 9_472_905, 157.0, 44).zone_lock_bound_ns - 148.7).abs() < 0.1);
        assert!(note(&row(13_446_153, 9_472_905, 140.0, 44)).is_none());
        assert!(
            note(&row(7_569_187, 7_000_000, 157.0, 22)).is_none(),
            "within its band"
        );
        assert!(
            note(&row(10_321_790, 14_000_000, 500.0, 88)).is_none(),
            "above its band"
        );
    }
}
