//! Row (d) of the host check: will-it-scale's page_fault1 at 1 and 2 tasks, as processes and
//! as threads — predicted by the engine in virtual time on the this-host profile, then
//! measured on this host's kernel, the same test body over [`crate::task::Task`] on both
//! (`crate::will_it_scale`).
//!
//! Each case is will-it-scale's run: six periods of warm-up, then [`HostCheckOpts::wis_seconds`]
//! measured ones, the figure its `average:` (faults per second). Periods are
//! [`HostCheckOpts::wis_period_ms`] long on both sides (each line scaled to a second), shorter
//! than main.c's second so that the four cases take seconds, long enough for several
//! iterations of the loop a period. Tasks are bound as will-it-scale binds them, one per
//! core; with two tasks on a 2-CPU host, both CPUs are busy, so any other load shows.
//!
//! The host's side is judged for quietness ([`usermm_host::quiet`]): the load average and the
//! steal time before and after each case, and each task's CPU time against the wall time its
//! loop ran.
//!
//! # Process mode from a multi-threaded caller
//! Process mode forks the tasks from this process, which must then have one thread
//! (`crate::task`). A caller that has more (`reproduce` keeps a signal thread to clean up
//! after a Ctrl-C) passes a [`HostRunner`] that runs the case elsewhere — `reproduce` runs
//! `usermm will-it-scale page_fault1 --host` as a fresh process; [`in_process`] is the runner
//! that runs it here.

use serde::Serialize;
use usermm::Machine;
use usermm_host::quiet::{self, HostLoad, Quietness};

use super::{this_host_machine, HostCheckError, HostCheckOpts};
use crate::task::{Affinity, Mode};
use crate::will_it_scale::{run, Backend, Params, Test};

/// The cases, in the rows' order.
pub const CASES: [(usize, Mode); 4] = [
    (1, Mode::Processes),
    (2, Mode::Processes),
    (1, Mode::Threads),
    (2, Mode::Threads),
];

/// One case measured on this host.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Pf1Measured {
    pub tasks: usize,
    pub mode: Mode,
    /// will-it-scale's `average:`, faults per second.
    pub faults_per_sec: f64,
    /// The host around the run, and the judgement.
    pub quiet: Quietness,
}

/// The name of case `(tasks, mode)`'s row.
pub fn row_name(tasks: usize, mode: Mode) -> String {
    format!(
        "(d) will-it-scale page_fault1, {tasks} {}: faults/s",
        match (tasks, mode) {
            (1, Mode::Processes) => "process",
            (1, Mode::Threads) => "thread",
            _ => mode.name(),
        }
    )
}

fn params(opts: &HostCheckOpts, tasks: usize, mode: Mode) -> Params {
    Params {
        tasks,
        mode,
        affinity: Affinity::Cores,
        seconds: opts.wis_seconds,
        period: std::time::Duration::from_millis(opts.wis_period_ms),
        size: opts.wis_size,
        verbose: false,
    }
}

fn wis_err(e: impl std::fmt::Display) -> HostCheckError {
    HostCheckError::WillItScale(e.to_string())
}

/// The average of a run, or why there is none.
fn average(rec: &crate::will_it_scale::WisRecord) -> Result<f64, HostCheckError> {
    rec.average.map(|a| a as f64).ok_or_else(|| {
        wis_err(format!(
            "page_fault1 at {} {}: no average (tasks ended: {})",
            rec.params.tasks,
            rec.params.mode.name(),
            rec.stops.join(", ")
        ))
    })
}

/// What a run of one case on the host gives: will-it-scale's `average:` and each task's CPU
/// time over its wall time.
#[derive(Debug, Clone, PartialEq)]
pub struct HostCase {
    pub faults_per_sec: f64,
    pub cpu_over_wall: Vec<f64>,
}

/// Runs one case (its parameters: tasks, mode, period, seconds, size) on this host's kernel.
pub type HostRunner<'a> = dyn Fn(&Params) -> Result<HostCase, HostCheckError> + 'a;

/// The case run in this process (process mode needs it to have one thread).
pub fn in_process(p: &Params) -> Result<HostCase, HostCheckError> {
    let rec = run(Test::PageFault1, Backend::Host, p, &mut |_| {}).map_err(wis_err)?;
    Ok(HostCase {
        faults_per_sec: average(&rec)?,
        cpu_over_wall: rec.task_cpu_over_wall.clone().unwrap_or_default(),
    })
}

/// The engine's faults per second for each of [`CASES`], on `profile` (deterministic).
pub fn predict(profile: &str, opts: &HostCheckOpts) -> Result<Vec<f64>, HostCheckError> {
    let size = opts.wis_size.unwrap_or(Test::PageFault1.default_size());
    CASES
        .iter()
        .map(|&(tasks, mode)| {
            let bytes = (size + size / 256 + (2 << 20)) * tasks as u64;
            let m = Machine::new(this_host_machine(profile, bytes))?;
            let p = params(opts, tasks, mode);
            let rec =
                run(Test::PageFault1, Backend::Engine(&m), &p, &mut |_| {}).map_err(wis_err)?;
            average(&rec)
        })
        .collect()
}

/// This host's kernel on each of [`CASES`], each run by `runner` and judged for quietness.
pub fn measure(
    opts: &HostCheckOpts,
    runner: &HostRunner<'_>,
) -> Result<Vec<Pf1Measured>, HostCheckError> {
    CASES
        .iter()
        .map(|&(tasks, mode)| {
            let before = HostLoad::now();
            let case = runner(&params(opts, tasks, mode))?;
            let after = HostLoad::now();
            Ok(Pf1Measured {
                tasks,
                mode,
                faults_per_sec: case.faults_per_sec,
                quiet: quiet::judge(before, after, tasks, case.cpu_over_wall),
            })
        })
        .collect()
}
