//! will-it-scale's `main.c`: start the tasks, print `testcase:` and `warmup`, then one
//! `min:… max:… total:…` line per period (the tasks' operations in it: least, most, sum),
//! `measurement` after the sixth, and after `-s` more the `average:` of those — the same
//! lines, the same arithmetic (integer division, the first six periods left out).
//!
//! A period is [`Params::period`]: a second on the wall clock and on the host, as in
//! `main.c`, unless a caller asks for less (`reproduce`'s host check); in virtual time a
//! period of virtual time. A line's counts are scaled to a second (`count × 1 s / period`,
//! rounded down; at a 1 s period, the counts themselves): the lines and the average stay
//! operations per second, over a shorter run — 88 modelled CPUs faulting for eleven virtual
//! seconds would be hours of host time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use usermm::config::TimeMode;
use usermm::Machine;

use super::Test;
use crate::task::{run_engine, run_host, Affinity, Launch, Mode, Schedule, Stop};

/// `main.c`'s `WARMUP_ITERATIONS`: lines printed before `measurement`, plus one.
pub const WARMUP_ITERATIONS: usize = 5;

/// Where the tasks run.
#[derive(Debug, Clone, Copy)]
pub enum Backend<'a> {
    /// The engine, on `machine`'s clock (wall or virtual).
    Engine(&'a Arc<Machine>),
    /// The host kernel.
    Host,
}

/// One run's parameters (will-it-scale's `-t`, `-s`, `-m`/`-n`, `-v`, and the mode of the
/// binary: `_processes` or `_threads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Params {
    pub tasks: usize,
    pub mode: Mode,
    pub affinity: Affinity,
    /// `-s`: measured periods after the warm-up; 0 runs until killed (wall clock only).
    pub seconds: usize,
    /// A period's length: will-it-scale's 1 s on the wall clock (less for a quicker run, each
    /// line then scaled to a second); a virtual run's choice in virtual time.
    pub period: Duration,
    /// The test's size instead of will-it-scale's (tests of this crate).
    pub size: Option<u64>,
    /// `-v`: each task's count per period too.
    pub verbose: bool,
}

/// One period's line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Line {
    pub min: u64,
    pub max: u64,
    pub total: u64,
}

/// Why a run did not happen or failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WisError {
    /// The request cannot be run (a refused test, a bad combination): exit 2.
    Usage(String),
    /// The run failed: exit 1.
    Failed(String),
}

impl std::fmt::Display for WisError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WisError::Usage(s) | WisError::Failed(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for WisError {}

/// A run's record (`--json`).
#[derive(Debug, Clone, Serialize)]
pub struct WisRecord {
    pub test: &'static str,
    pub description: &'static str,
    pub backend: &'static str,
    /// `measured (this host)` or `modelled (profile NAME)`.
    pub time: String,
    pub params: Params,
    /// Each period's line (operations per second).
    pub lines: Vec<Line>,
    /// `average:` (operations per second over the measured periods); `None` for a run
    /// without `-s`.
    pub average: Option<u64>,
    /// Each task's operations per period (raw counts, not scaled), period by period.
    pub per_task: Vec<Vec<u64>>,
    /// Each task's CPU (the engine) or cpuset (the host).
    pub cpus: Vec<Vec<usize>>,
    /// How each task ended.
    pub stops: Vec<String>,
    /// The host: each task's CPU time over the wall time its loop ran (a CPU-bound loop on
    /// a quiet host: about 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_cpu_over_wall: Option<Vec<f64>>,
    /// The engine's `/proc/vmstat` counters over the run (none on the host).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vmstat: Option<BTreeMap<String, i64>>,
    /// The virtual run's lock_stat, every class that was taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_stat: Option<Vec<usermm::vtime::LockStat>>,
    /// The modelled machine's idle share of its CPUs' time, in percent (virtual time only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_percent: Option<f64>,
}

/// The lines `main.c` prints for `lines` (from `warmup` on), `average:` included when the
/// run had `-s`.
pub fn format_lines(lines: &[Line], seconds: usize) -> Vec<String> {
    let mut v = Vec::new();
    let mut total = 0u64;
    for (k, l) in lines.iter().enumerate() {
        v.push(format!("min:{} max:{} total:{}", l.min, l.max, l.total));
        if k == WARMUP_ITERATIONS {
            v.push("measurement".into());
        }
        if k > WARMUP_ITERATIONS {
            total += l.total;
        }
    }
    if seconds > 0 && lines.len() == seconds + WARMUP_ITERATIONS + 1 {
        v.push(format!("average:{}", total / seconds as u64));
    }
    v
}

/// The state of `main.c`'s loop as periods come in.
struct Sampler<'o> {
    prev: Vec<u64>,
    lines: Vec<Line>,
    per_task: Vec<Vec<u64>>,
    total: u64,
    scale: (u64, u64),
    params: Params,
    out: &'o mut (dyn FnMut(&str) + Send),
}

impl Sampler<'_> {
    fn sample(&mut self, row: &[u64]) {
        let k = self.lines.len();
        let (num, den) = self.scale;
        let diffs: Vec<u64> = row
            .iter()
            .zip(&self.prev)
            .map(|(&v, &p)| v.wrapping_sub(p))
            .collect();
        let scaled = |d: u64| (u128::from(d) * u128::from(num) / u128::from(den)) as u64;
        if self.params.verbose {
            for (i, &d) in diffs.iter().enumerate() {
                (self.out)(&format!("{i:4} -> {}\n", scaled(d)));
            }
        }
        let line = Line {
            min: diffs.iter().copied().min().map_or(u64::MAX, scaled),
            max: diffs.iter().copied().max().map_or(0, scaled),
            total: scaled(diffs.iter().sum()),
        };
        (self.out)(&format!(
            "min:{} max:{} total:{}\n",
            line.min, line.max, line.total
        ));
        if k == WARMUP_ITERATIONS {
            (self.out)("measurement\n");
        }
        if k > WARMUP_ITERATIONS {
            self.total += line.total;
        }
        self.lines.push(line);
        self.per_task.push(diffs);
        self.prev.copy_from_slice(row);
        let s = self.params.seconds;
        if s > 0 && k + 1 == s + WARMUP_ITERATIONS + 1 {
            (self.out)(&format!("average:{}\n", self.total / s as u64));
        }
    }
}

/// Run `test` on `backend` with `params`, writing `main.c`'s lines to `out` as they come
/// (in virtual time, after the run), and return the record.
pub fn run(
    test: Test,
    backend: Backend<'_>,
    params: &Params,
    out: &mut (dyn FnMut(&str) + Send),
) -> Result<WisRecord, WisError> {
    let virt = matches!(backend, Backend::Engine(m) if m.time_mode() == TimeMode::Virtual);
    if virt {
        if let Some(why) = test.virtual_refusal() {
            return Err(WisError::Usage(why.into()));
        }
        if params.seconds == 0 {
            return Err(WisError::Usage(
                "-s 0 (run until killed) in virtual time: a virtual run needs an end".into(),
            ));
        }
    }
    if params.tasks == 0 {
        return Err(WisError::Usage("-t 0: at least one task".into()));
    }
    let periods = match params.seconds {
        0 => usize::MAX,
        s => s + WARMUP_ITERATIONS + 1,
    };
    let launch = Launch {
        tasks: params.tasks,
        mode: params.mode,
        affinity: params.affinity,
        schedule: Schedule {
            period: params.period,
            periods,
        },
    };
    let period_ns = params.period.as_nanos().max(1) as u64;
    out(&format!("testcase:{}\n", test.description()));
    out("warmup\n");
    let mut s = Sampler {
        prev: vec![0; params.tasks],
        lines: Vec::with_capacity(periods.min(1024)),
        per_task: Vec::with_capacity(periods.min(1024)),
        total: 0,
        scale: (1_000_000_000, period_ns),
        params: *params,
        out,
    };
    let size = params.size.unwrap_or(test.default_size());
    let body_size = size;
    let mut rec = WisRecord {
        test: test.name(),
        description: test.description(),
        backend: "host",
        time: "measured (this host)".into(),
        params: *params,
        lines: Vec::new(),
        average: None,
        per_task: Vec::new(),
        cpus: Vec::new(),
        stops: Vec::new(),
        task_cpu_over_wall: None,
        vmstat: None,
        lock_stat: None,
        idle_percent: None,
    };
    match backend {
        Backend::Engine(m) => {
            let o = run_engine(m, &launch, |t| test.body(t, body_size), &mut |row| {
                s.sample(row)
            })
            .map_err(WisError::Failed)?;
            rec.backend = "engine";
            rec.time = m.time_label();
            rec.cpus = o.cpus.iter().map(|&c| vec![c]).collect();
            rec.stops = o.stops.iter().map(Stop::to_string).collect();
            rec.vmstat = Some(
                o.vmstat
                    .iter()
                    .filter(|(_, v)| *v != 0)
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            );
            if let Some(r) = o.report {
                let (idle, all) = r.cpus.iter().fold((0u64, 0u64), |(i, a), c| {
                    (
                        i + c.time.idle_ns,
                        a + c.time.idle_ns + c.time.busy_ns + c.time.spin_ns,
                    )
                });
                rec.idle_percent = Some(100.0 * idle as f64 / all.max(1) as f64);
                rec.lock_stat = Some(r.lock_stat);
            }
        }
        Backend::Host => {
            let o = run_host(&launch, |t| test.body(t, body_size), &mut |row| {
                s.sample(row)
            })
            .map_err(WisError::Failed)?;
            rec.cpus = o.cpusets;
            rec.stops = o.stops;
            rec.task_cpu_over_wall = Some(o.cpu_over_wall);
        }
    }
    rec.average =
        (params.seconds > 0 && s.lines.len() == periods).then(|| s.total / params.seconds as u64);
    rec.lines = s.lines;
    rec.per_task = s.per_task;
    Ok(rec)
}
