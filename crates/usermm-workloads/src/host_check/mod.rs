//! The model checked on this host: four scenarios predicted by the engine in virtual time with
//! the `this-host` profile, then measured on this host's kernel in the same run, each row with
//! its error — or marked *host busy* when the host was not quiet while it was measured.
//!
//! The seeds' tables judge the model on machines nobody here can run; this check judges it on
//! the one machine that is here. It predicts first and measures after, and nothing it measures
//! feeds the profile (that comes from `usermm calibrate`'s single-thread figures alone): these
//! are multi-thread and multi-process outcomes the single-thread inputs do not contain.
//!
//! | row | scenario | the mechanism it exercises |
//! |---|---|---|
//! | (a) | `MADV_DONTNEED` of a touched mapping by two threads on disjoint halves, against one thread | two freers of one mm: one zone and LRU lock, the mm's TLB flushes reaching the other CPU (`dontneed.rs`: one body over [`crate::task::Task`] on both sides) |
//! | (b) | a thread write-faulting in its own VMA while another munmaps a big mapping: p50, p99 | per-VMA locks and munmap's downgraded mmap_lock (6.18 has both) |
//! | (c) | huge-zero-page read faults of two processes at once, against one | the huge zero page's shared line under 6.18's per-mm reference (`readers.rs`: one body over [`crate::task::Task`] on both sides) |
//! | (d) | will-it-scale's page_fault1 at 1 and 2 tasks, processes and threads: faults/s | the whole fault, zero, map and unmap cycle; two mms against one shared mm (its mmap lock, its TLB flushes reaching the other thread's CPU) (`page_fault1.rs`) |
//!
//! The modelled machine is this host as the kernel runs it: the CPUs it has (at least 2), one
//! node, pcp auto-tuning, per-VMA locks, munmap under a downgraded lock, the per-mm huge zero
//! reference, THP `madvise`, and the LRU-add batch calibrate measured (31 folios on 6.18, whose
//! fault is a faulting thread's 99th percentile: `usermm_host::calibrate::LruAddProbe`). Row (a)'s and (c)'s figures are speed-ups (a ratio of wall times
//! on each side), row (b)'s are latencies in ns, row (d)'s faults per second.
//!
//! # A busy host
//! Before and after each measurement the check reads the load average and the steal time, and
//! rows (c) and (d) also each reader's or task's CPU time against its wall time (a load
//! average lags a minute behind a build that starts beside a measurement); a row measured while the host was
//! not quiet (the rule is [`usermm_host::quiet`]'s: load average over the measurement's own
//! threads + 0.5, steal over 2 %, a task under 90 % of its wall time as CPU) is *host busy*:
//! its figures are kept, its error is not given, and it counts neither way.

use serde::Serialize;
use usermm::config::{BackingMode, MachineConfig, ThpMode, TimeConfig, TimeMode};
use usermm::machine::MachineError;
use usermm::Errno;
use usermm_host::munmap_faults as host;
use usermm_host::HostError;

use usermm_host::quiet::{self, HostLoad, Quietness};

use crate::munmap_test::{self, Latency, MunmapTestOpts};
use crate::stats;

pub mod dontneed;
pub mod page_fault1;
pub mod readers;

use page_fault1::Pf1Measured;

/// 2 MiB: a huge page, and the stride of the huge-zero readers.
const HPAGE: u64 = 2 << 20;

/// Sizes of the four scenarios.
#[derive(Debug, Clone, Serialize)]
pub struct HostCheckOpts {
    /// Row (a): the mapping freed by `MADV_DONTNEED`.
    pub dontneed_bytes: u64,
    /// Row (b): the mapping munmapped while the faulter runs.
    pub munmap_bytes: u64,
    /// Row (b): the faulter's own VMA.
    pub faulter_bytes: u64,
    /// Row (c): each reader's region (one huge-zero fault per 2 MiB).
    pub reader_bytes: u64,
    /// Host repeats of rows (a) and (c) (the median is compared; the model is deterministic).
    pub repeat: u32,
    /// Host repeats of row (b) (its quantiles are over every fault of every repeat).
    pub munmap_repeat: u32,
    /// Row (d): page_fault1's mapping instead of its 128 MiB (tests).
    pub wis_size: Option<u64>,
    /// Row (d): a period, ms (on the host's wall clock and in virtual time alike).
    pub wis_period_ms: u64,
    /// Row (d): measured periods after the six of warm-up.
    pub wis_seconds: usize,
}

/// The most host memory one measurement of the host check populates: `reproduce` at its
/// default scale must run on an 8 GiB laptop, under 2 GiB of RSS (the 8 GiB munmap it had
/// peaked at 8.4 GB). The huge-zero readers commit nothing (every read maps the one huge
/// zero page).
pub const MEASURE_BUDGET: u64 = 1 << 30;

/// The least a measurement populates, however little the host has available.
const MEASURE_MIN: u64 = 64 << 20;

impl HostCheckOpts {
    /// [`HostCheckOpts::sized_for`] a host with memory enough for the budget.
    pub fn standard() -> Self {
        Self::sized_for(None)
    }

    /// The check's sizes for a host that has `available` bytes for it (`None`: not known):
    /// the DONTNEED mapping and the munmapped one each [`MEASURE_BUDGET`], or a quarter of
    /// what is available when that is less (at least 64 MiB), 5 and 2 host repeats; a 1 MiB
    /// faulter; 64 GiB of huge-zero reads per process (32 768 faults, long enough that the
    /// two readers overlap; 5 repeats).
    pub fn sized_for(available: Option<u64>) -> Self {
        let populated = available
            .map_or(MEASURE_BUDGET, |a| (a / 4).min(MEASURE_BUDGET))
            .max(MEASURE_MIN)
            / HPAGE
            * HPAGE;
        Self {
            dontneed_bytes: populated,
            munmap_bytes: populated,
            faulter_bytes: 1 << 20,
            reader_bytes: 64 << 30,
            repeat: 5,
            munmap_repeat: 2,
            wis_size: None,
            wis_period_ms: 250,
            wis_seconds: 4,
        }
    }
}

impl HostCheckOpts {
    /// Tiny sizes for tests of the plumbing (the figures mean little).
    pub fn small() -> Self {
        Self {
            dontneed_bytes: 8 << 20,
            munmap_bytes: 32 << 20,
            faulter_bytes: 64 << 10,
            reader_bytes: 256 << 20,
            repeat: 1,
            munmap_repeat: 1,
            wis_size: Some(256 << 10),
            wis_period_ms: 10,
            wis_seconds: 1,
        }
    }
}

/// One row: what the model predicted, what this host measured, and the error.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HostCheckRow {
    pub name: String,
    pub unit: String,
    pub predicted: f64,
    pub measured: f64,
    /// `(predicted - measured) / measured`; `None` when nothing was measured (a host too busy
    /// to run the scenario: no fault overlapped a munmap) or the host was busy.
    pub error: Option<f64>,
    /// The host was not quiet while this row was measured: no error, counted neither way.
    pub host_busy: bool,
    /// The host around the measurement (load average, steal, the tasks' CPU share).
    pub quiet: Quietness,
}

impl HostCheckRow {
    fn new(name: &str, unit: &str, (predicted, measured): (f64, f64), quiet: &Quietness) -> Self {
        let error = (measured > 0.0 && measured.is_finite() && !quiet.busy)
            .then(|| (predicted - measured) / measured);
        Self {
            name: name.into(),
            unit: unit.into(),
            predicted,
            measured,
            error,
            host_busy: quiet.busy,
            quiet: quiet.clone(),
        }
    }
}

/// The figures of rows (a), (b) and (c), each side's in the rows' units.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Figures {
    pub dontneed_one_ns: f64,
    pub dontneed_two_ns: f64,
    pub fault_p50_ns: f64,
    pub fault_p99_ns: f64,
    pub readers_one_per_sec: f64,
    pub readers_two_per_sec: f64,
}

/// The predictions, in the rows' units.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Predicted {
    #[serde(flatten)]
    pub figures: Figures,
    /// Row (d): faults per second of each of [`page_fault1::CASES`].
    pub page_fault1: Vec<f64>,
}

/// The measurements, as medians of the host's repeats.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Measured {
    /// Medians of the repeats; the faulter's quantiles over all of them.
    #[serde(flatten)]
    pub figures: Figures,
    pub faults_during_munmap: usize,
    /// Row (d), each of [`page_fault1::CASES`].
    pub page_fault1: Vec<Pf1Measured>,
    /// The host around rows (a), (b) and (c)'s measurements.
    pub quiet_dontneed: Quietness,
    pub quiet_munmap: Quietness,
    pub quiet_readers: Quietness,
}

/// The whole check: profile, sizes, both sides and the rows.
#[derive(Debug, Clone, Serialize)]
pub struct HostCheck {
    /// `modelled (profile NAME)` beside `measured (this host)`.
    pub profile: String,
    pub opts: HostCheckOpts,
    pub predicted: Predicted,
    pub measured: Measured,
    pub rows: Vec<HostCheckRow>,
}

#[derive(Debug, thiserror::Error)]
pub enum HostCheckError {
    /// The modelled machine could not boot, or its run failed (says which).
    #[error(transparent)]
    Machine(#[from] MachineError),
    #[error("{op}: {errno:?}")]
    Syscall { op: &'static str, errno: Errno },
    #[error("munmap scenario: {0}")]
    Munmap(#[from] munmap_test::MunmapTestError),
    #[error("the host: {0}")]
    Host(#[from] HostError),
    #[error("{0}")]
    WillItScale(String),
}

/// This host as its kernel runs it, modelled in virtual time on `profile` (a file or a name),
/// with RAM for `bytes` of mappings.
pub fn this_host_machine(profile: &str, bytes: u64) -> MachineConfig {
    let cpus = usermm_host::facts::usable_cpus().clamp(2, 64) as u16;
    let mut c = MachineConfig {
        mem: (bytes + bytes / 32 + (512 << 20)).next_multiple_of(HPAGE),
        cpus,
        nodes: 1,
        backing: BackingMode::Sparse,
        thp: ThpMode::Madvise,
        time: TimeConfig {
            mode: TimeMode::Virtual,
            profile: profile.into(),
            scale: Vec::new(),
            era: String::new(),
            seed: 0,
        },
        ..MachineConfig::default()
    };
    c.pcp.auto_tune = true;
    // This kernel's LRU-add batch, as calibrate measured it (6.18: 31 folios); the engine's
    // default (v4.x's 15) for a profile without the measurement.
    c.lru.add_batch = crate::calibrate::lru_add_batch(profile);
    c.vma.per_vma_lock = true;
    c.munmap.downgrade = true;
    c.huge_zero.per_mm_ref = true;
    c
}

/// Row (b) on the engine: the faulter's (p50, p99) ns during the munmap, from seed 003's own
/// scenario (`munmap_test`) on the modelled host.
fn predict_faults(profile: &str, opts: &HostCheckOpts) -> Result<(f64, f64), HostCheckError> {
    let mut o = MunmapTestOpts::new(opts.munmap_bytes, 1);
    o.machine = this_host_machine(profile, opts.munmap_bytes);
    o.machine.thp = ThpMode::Never;
    o.faulter_bytes = opts.faulter_bytes;
    o.loaded_baseline = false;
    o.baseline_ms = 1;
    o.populate_threads = 1;
    let r = munmap_test::run_once(&o.machine, &o)?;
    Ok((r.during.faults.p50_ns as f64, r.during.faults.p99_ns as f64))
}

/// The engine's predictions for `opts` on `profile` (deterministic: the same every run).
pub fn predict(profile: &str, opts: &HostCheckOpts) -> Result<Predicted, HostCheckError> {
    let (d1, d2) = dontneed::predict(profile, opts.dontneed_bytes)?;
    let (p50, p99) = predict_faults(profile, opts)?;
    let r1 = readers::predict(profile, 1, opts.reader_bytes)?;
    let r2 = readers::predict(profile, 2, opts.reader_bytes)?;
    let page_fault1 = page_fault1::predict(profile, opts)?;
    Ok(Predicted {
        figures: Figures {
            dontneed_one_ns: d1,
            dontneed_two_ns: d2,
            fault_p50_ns: p50,
            fault_p99_ns: p99,
            readers_one_per_sec: r1,
            readers_two_per_sec: r2,
        },
        page_fault1,
    })
}

fn median(v: &[f64]) -> f64 {
    stats::upper_median(v, f64::total_cmp).unwrap_or(0.0)
}

/// `measure()`'s result with the host's quietness around it (two threads or processes of its
/// own at most; the CPU share of the scenarios' threads is not recorded).
fn judged<T>(measure: impl FnOnce() -> Result<T, HostError>) -> Result<(T, Quietness), HostError> {
    let before = HostLoad::now();
    let r = measure()?;
    Ok((r, quiet::judge(before, HostLoad::now(), 2, Vec::new())))
}

/// This host's kernel on the same scenarios, row (d)'s cases run by `runner`
/// ([`page_fault1::in_process`] unless the caller has threads of its own).
pub fn measure(
    opts: &HostCheckOpts,
    runner: &page_fault1::HostRunner<'_>,
) -> Result<Measured, HostCheckError> {
    let (d, quiet_dontneed) = judged(|| dontneed::measure(opts.dontneed_bytes, opts.repeat))?;
    let as_f = |v: &[u64]| v.iter().map(|x| *x as f64).collect::<Vec<_>>();
    let (f, quiet_munmap) = judged(|| {
        host::faults_during_munmap(opts.munmap_bytes, opts.faulter_bytes, opts.munmap_repeat)
    })?;
    let n = f.during_ns.len();
    let during = Latency::of_samples(&f.during_ns);
    // The readers' own CPU shares judge them too: a load average lags a minute behind a
    // build that starts beside them.
    let before = HostLoad::now();
    let r1 = readers::measure(1, opts.reader_bytes, opts.repeat)?;
    let r2 = readers::measure(2, opts.reader_bytes, opts.repeat)?;
    let shares = r1
        .cpu_over_wall
        .iter()
        .chain(&r2.cpu_over_wall)
        .copied()
        .collect();
    let quiet_readers = quiet::judge(before, HostLoad::now(), 2, shares);
    let page_fault1 = page_fault1::measure(opts, runner)?;
    Ok(Measured {
        figures: Figures {
            dontneed_one_ns: median(&as_f(&d.one_thread_ns)),
            dontneed_two_ns: median(&as_f(&d.two_threads_ns)),
            fault_p50_ns: during.p50_ns as f64,
            fault_p99_ns: during.p99_ns as f64,
            readers_one_per_sec: median(&r1.faults_per_sec()),
            readers_two_per_sec: median(&r2.faults_per_sec()),
        },
        faults_during_munmap: n,
        page_fault1,
        quiet_dontneed,
        quiet_munmap,
        quiet_readers,
    })
}

/// The rows of the check from both sides.
pub fn rows(p: &Predicted, m: &Measured) -> Vec<HostCheckRow> {
    // A figure of both sides, and the ratio of two figures on both sides.
    let both = |f: fn(&Figures) -> f64| (f(&p.figures), f(&m.figures));
    let ratio = |a: fn(&Figures) -> f64, b: fn(&Figures) -> f64| {
        let r = |x: &Figures| if b(x) > 0.0 { a(x) / b(x) } else { 0.0 };
        (r(&p.figures), r(&m.figures))
    };
    let mut rows = vec![
        HostCheckRow::new(
            "(a) MADV_DONTNEED, two threads on halves vs one thread: speed-up",
            "x",
            ratio(|f| f.dontneed_one_ns, |f| f.dontneed_two_ns),
            &m.quiet_dontneed,
        ),
        HostCheckRow::new(
            "(b) write fault in its own VMA during an munmap: p50",
            "ns",
            both(|f| f.fault_p50_ns),
            &m.quiet_munmap,
        ),
        HostCheckRow::new(
            "(b) write fault in its own VMA during an munmap: p99",
            "ns",
            both(|f| f.fault_p99_ns),
            &m.quiet_munmap,
        ),
        HostCheckRow::new(
            "(c) huge-zero read faults, two processes vs one: throughput ratio",
            "x",
            ratio(|f| f.readers_two_per_sec, |f| f.readers_one_per_sec),
            &m.quiet_readers,
        ),
    ];
    for (predicted, measured) in p.page_fault1.iter().zip(&m.page_fault1) {
        rows.push(HostCheckRow::new(
            &page_fault1::row_name(measured.tasks, measured.mode),
            "faults/s",
            (*predicted, measured.faults_per_sec),
            &measured.quiet,
        ));
    }
    rows
}

/// Predict, then measure (row (d)'s cases by `runner`), then compare.
pub fn run(
    profile: &str,
    opts: &HostCheckOpts,
    runner: &page_fault1::HostRunner<'_>,
) -> Result<HostCheck, HostCheckError> {
    let predicted = predict(profile, opts)?;
    let measured = measure(opts, runner)?;
    let rows = rows(&predicted, &measured);
    Ok(HostCheck {
        profile: format!("modelled (profile {profile}) vs measured (this host)"),
        opts: opts.clone(),
        predicted,
        measured,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quiet(busy: bool) -> Quietness {
        let load = HostLoad {
            loadavg_1min: Some(if busy { 9.0 } else { 0.0 }),
            steal_total: Some((0, 100)),
        };
        quiet::judge(load, load, 1, Vec::new())
    }

    /// The predictions are a deterministic model output: the same twice, and the shapes the
    /// mechanisms give (two freers are faster than one, two readers of their own mm double the
    /// throughput on a machine with a core each, a faulter's p99 is at least its p50, two
    /// page_fault1 processes fault about twice as fast as one on a core each). A row measured
    /// on a busy host has no error.
    #[test]
    fn predictions_are_deterministic_and_shaped_by_the_mechanisms() {
        let opts = HostCheckOpts {
            dontneed_bytes: 16 << 20,
            munmap_bytes: 64 << 20,
            faulter_bytes: 64 << 10,
            reader_bytes: 64 << 20,
            repeat: 1,
            munmap_repeat: 1,
            wis_size: Some(256 << 10),
            wis_period_ms: 2,
            wis_seconds: 1,
        };
        let a = predict("haswell-ep-2s", &opts).unwrap();
        let b = predict("haswell-ep-2s", &opts).unwrap();
        assert_eq!(a, b);
        let f = &a.figures;
        assert!(f.dontneed_two_ns < f.dontneed_one_ns, "{a:?}");
        let readers = f.readers_two_per_sec / f.readers_one_per_sec;
        assert!(readers > 1.5 && readers <= 2.0 + 1e-9, "{a:?}");
        assert!(
            f.fault_p99_ns >= f.fault_p50_ns && f.fault_p50_ns > 0.0,
            "{a:?}"
        );
        let pf = &a.page_fault1;
        assert_eq!(pf.len(), page_fault1::CASES.len());
        let two_procs = pf[1] / pf[0];
        assert!(two_procs > 1.5 && two_procs <= 2.0 + 1e-9, "{a:?}");
        let measured = |k: usize| Pf1Measured {
            tasks: page_fault1::CASES[k].0,
            mode: page_fault1::CASES[k].1,
            faults_per_sec: pf[k] * 2.0,
            quiet: quiet(k == 3),
        };
        let rows = rows(
            &a,
            &Measured {
                figures: Figures {
                    dontneed_one_ns: 2.0,
                    dontneed_two_ns: 1.0,
                    fault_p50_ns: f.fault_p50_ns,
                    fault_p99_ns: f.fault_p99_ns * 2.0,
                    readers_one_per_sec: 1.0,
                    readers_two_per_sec: 2.0,
                },
                faults_during_munmap: 1,
                page_fault1: (0..4).map(measured).collect(),
                quiet_dontneed: quiet(false),
                quiet_munmap: quiet(false),
                quiet_readers: quiet(true),
            },
        );
        assert_eq!(rows.len(), 8);
        assert_eq!(rows[1].error, Some(0.0));
        assert!((rows[2].error.unwrap() + 0.5).abs() < 1e-12);
        // (c) and the last page_fault1 row were measured on a busy host.
        assert!(rows[3].host_busy && rows[3].error.is_none() && rows[3].measured == 2.0);
        assert_eq!(
            rows[4].name,
            "(d) will-it-scale page_fault1, 1 process: faults/s"
        );
        assert_eq!(
            rows[6].name,
            "(d) will-it-scale page_fault1, 1 thread: faults/s"
        );
        assert_eq!(rows[5].error, Some(-0.5));
        assert!(rows[7].host_busy && rows[7].error.is_none());
        let none = HostCheckRow::new("x", "ns", (1.0, 0.0), &quiet(false));
        assert_eq!(none.error, None);
    }

    /// The populated mappings are at most 1 GiB each, a quarter of what is available when
    /// that is less, never below 64 MiB, in whole huge pages: `reproduce`'s host check stays
    /// under 2 GiB of RSS on a host of any size (it peaked at 8.4 GB with an 8 GiB munmap).
    #[test]
    fn the_measurements_are_sized_to_the_host() {
        let sized = |a: Option<u64>| {
            let o = HostCheckOpts::sized_for(a);
            assert_eq!(o.dontneed_bytes, o.munmap_bytes);
            o.munmap_bytes
        };
        assert_eq!(sized(None), 1 << 30);
        assert_eq!(sized(Some(24 << 30)), 1 << 30);
        assert_eq!(sized(Some(4 << 30)), 1 << 30);
        assert_eq!(sized(Some(2 << 30)), 512 << 20);
        assert_eq!(sized(Some((1 << 30) + 12345)), 256 << 20);
        assert_eq!(sized(Some(100 << 20)), 64 << 20);
        assert_eq!(sized(Some(0)), 64 << 20);
    }
}
