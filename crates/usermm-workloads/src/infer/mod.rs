//! `usermm infer`: the era factors estimated from named training rows, through the engine.
//!
//! The model's unknowns are few and declared before any fit (`usermm::vtime` era factors: the
//! zap, the free outside the locks, the locked sections, the fault; which costs each multiplies
//! is code). This module estimates them from the training rows of [`rows`] — seeds 000/001's
//! inline, `max_active` 1 and 8, and seed 002's vanilla share — and from nothing else, by
//! running the virtual-time engine on `reproduce`'s own modelled configuration at each trial
//! point. Every other published figure is a test of the result.
//!
//! # The procedure (deterministic: two runs give the same factors, bit for bit)
//! 1. The unfitted point (every factor 1) is evaluated: the residuals the factors must explain.
//! 2. The teardown factors: a scan of nine splits of the published inline time between the
//!    three paths ([`scan_points`]: the zap's share 20, 35 or 50 %, the locked sections' share
//!    of the rest 35, 50 or 65 %), then least squares on `ln(model / published)` of the three
//!    teardown rows by Levenberg–Marquardt ([`fit::levenberg_marquardt`]) in `ln f` from the
//!    scan's best point, forward differences of 5 %. The scan is there because the parallel
//!    rows change regime with the split (bound by the zapping task, or by the locks), and a
//!    local search does not cross from one regime to the other.
//! 3. The factors are rounded to four significant digits (what the era file holds) and the rows
//!    evaluated again there: the residuals reported are those of the written factors.
//! 4. The fault factor: the secant method on seed 002's share ([`fit::secant`]), with the
//!    teardown factors fixed (the huge-zero run frees no pages: they barely touch it).
//! 5. Each factor's range: the interval, the other factors held, over which every training row
//!    stays within its band (published spread or ±10 %), from the linear model at the fit
//!    ([`fit::linear_range`]); both ends are then run on the engine and the worst row there is
//!    reported, so the range is checked, not only extrapolated.
//! 6. A factor outside [0.25, 4] ([`usermm::vtime::PLAUSIBLE`]) is reported as the sign of a
//!    mechanism the model lacks; the file is still written so the finding can be examined.
//!
//! Each point's rows run on separate host threads ([`crate::parallel::map`]): each virtual run is
//! single-threaded and deterministic on its own, so the threads change the wall time only.

pub mod fit;
pub mod rows;
#[cfg(test)]
mod test;

use std::cell::{Cell, RefCell};
use std::time::Instant;

use serde::Serialize;
use usermm::vtime::{EraFactors, ERA_FACTORS, NR_ERA_FACTORS, PLAUSIBLE};

use self::rows::{EvalSizes, RowKind, TrainingRow};

/// The first line of every era file `usermm infer` writes (so that `--out` replaces only one).
pub const ERA_FILE_HEADER: &str =
    "# Era factors: Linux 4.8-4.18 on bare-metal Intel (2016-2018), the seeds' kernels.";

/// The era `usermm infer` writes: the seeds' kernels on bare-metal Intel.
pub const ERA: &str = "intel-2016-2019";

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct InferOpts {
    pub sizes: EvalSizes,
    /// Host threads for the evaluation runs.
    pub threads: usize,
    /// The command line and commit, for the era file's `source`.
    pub command: String,
}

/// One end of a factor's range, run on the engine.
#[derive(Debug, Clone, Serialize)]
pub struct RangeEnd {
    pub factor: f64,
    /// The training row furthest from its band there, its error and its band.
    pub worst_row: String,
    pub worst_error: f64,
    pub worst_band: f64,
    pub within: bool,
}

/// One factor's estimate.
#[derive(Debug, Clone, Serialize)]
pub struct FactorResult {
    pub input: &'static str,
    pub path: &'static str,
    pub costs: Vec<&'static str>,
    /// The factor written and applied (1 when not applied).
    pub value: f64,
    /// The least-squares estimate in the wide search box ([`fit::WIDE`]).
    pub unconstrained: f64,
    /// Whether the fit within [`PLAUSIBLE`] met every training row of the factor's group:
    /// only then is it applied; otherwise the factor is written as 1 and its rows name a
    /// mechanism the model lacks.
    pub applied: bool,
    /// The training rows it was estimated from.
    pub rows: Vec<&'static str>,
    /// The linear-model range (the other factors held) within which every training row stays
    /// in its band; `None` on a side no row bounds, or when a row is outside its band at the
    /// fit.
    pub range: (Option<f64>, Option<f64>),
    /// The range's ends, run on the engine.
    pub range_checked: Vec<RangeEnd>,
    /// The unconstrained estimate within [`PLAUSIBLE`].
    pub plausible: bool,
}

/// One training row, unfitted and fitted.
#[derive(Debug, Clone, Serialize)]
pub struct RowResult {
    pub id: &'static str,
    pub cites: String,
    pub unit: &'static str,
    pub published: f64,
    pub band: f64,
    pub unfitted: f64,
    pub unfitted_error: f64,
    pub fitted: f64,
    pub fitted_error: f64,
    pub within: bool,
}

/// An accepted point of the search.
#[derive(Debug, Clone, Serialize)]
pub struct PathPoint {
    pub factors: EraFactors,
    pub errors: Vec<f64>,
}

/// What `usermm infer` found.
#[derive(Debug, Clone, Serialize)]
pub struct InferResult {
    pub era: &'static str,
    pub factors: Vec<FactorResult>,
    pub rows: Vec<RowResult>,
    /// Runs of a training row on the engine, in all.
    pub runs: usize,
    pub teardown_stopped: String,
    pub fault_stopped: &'static str,
    pub path: Vec<PathPoint>,
    pub sizes: EvalSizes,
    /// Wall time of the whole inference, s (this host; not a model output).
    pub wall_s: f64,
}

impl InferResult {
    /// Every factor plausible and applied, and every training row within its band.
    pub fn ok(&self) -> bool {
        self.factors.iter().all(|f| f.plausible && f.applied) && self.rows.iter().all(|r| r.within)
    }
}

/// `v` to four significant digits (what the era file holds).
pub fn round4(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let d = 3 - v.abs().log10().floor() as i32;
    let p = 10f64.powi(d);
    (v * p).round() / p
}

/// Runs the inference. `progress` gets one line per stage.
pub fn run(opts: &InferOpts, progress: &mut dyn FnMut(&str)) -> Result<InferResult, String> {
    let started = Instant::now();
    let inf = Inference::new(opts, progress);

    // 1. The unfitted point.
    inf.say("the unfitted point (every factor 1): 4 runs");
    let one = [1.0; NR_ERA_FACTORS];
    let unfitted = inf.eval(inf.all_rows.iter().map(|r| (r.kind, one)).collect());
    let (unfitted_teardown, unfitted_fault) = unfitted.split_at(inf.teardown.len());
    inf.say(&format!(
        "  unfitted: {} (teardown rows), {} (fault row)",
        pct(&errors(unfitted_teardown, &inf.teardown)),
        pct(&errors(unfitted_fault, &inf.fault))
    ));

    // 2, 3. The teardown factors; 4. the fault factor, the teardown factors held as they will
    // be written.
    let mut path = Vec::new();
    let td = inf.fit_teardown(unfitted_teardown[0], &mut path)?;
    let held = if td.applied { td.factors } else { one };
    let ft = inf.fit_fault(held);

    // 5. The applied factors, and every row evaluated there (the teardown rows again: the
    //    fault factor prices the populate before the timed free, and the machine's state
    //    at the free depends a little on it).
    let mut factors = held;
    factors[3] = if ft.applied { ft.value } else { 1.0 };
    inf.say("every training row at the factors written: 4 runs");
    let fitted = inf.eval(inf.all_rows.iter().map(|r| (r.kind, factors)).collect());
    let (fitted_td, fitted_fault) = fitted.split_at(inf.teardown.len());
    let err_td = errors(fitted_td, &inf.teardown);
    let err_fault = errors(fitted_fault, &inf.fault);
    path.push(PathPoint {
        factors,
        errors: err_td.iter().chain(&err_fault).copied().collect(),
    });

    // 6. Ranges: linear at the fit, then both ends on the engine (applied groups only).
    let ranges = inf.ranges(&td, &ft, &factors, &err_td, &err_fault);
    let checked = inf.check_range_ends(&factors, &ranges);
    if let Some(e) = inf.failure.borrow_mut().take() {
        return Err(e);
    }

    let rows: Vec<RowResult> = inf
        .all_rows
        .iter()
        .zip(unfitted.iter().zip(&fitted))
        .map(|(r, (u, f))| row_result(r, *u, *f))
        .collect();
    let factor_results = ERA_FACTORS
        .iter()
        .enumerate()
        .map(|(k, e)| {
            let (unconstrained, applied, rows) = if k < 3 {
                (td.unconstrained[k], td.applied, &inf.teardown)
            } else {
                (ft.unconstrained, ft.applied, &inf.fault)
            };
            FactorResult {
                input: e.input,
                path: e.path,
                costs: e.costs.iter().map(|c| c.key()).collect(),
                value: factors[k],
                unconstrained,
                applied,
                rows: rows.iter().map(|r| r.id).collect(),
                range: ranges[k],
                range_checked: checked[k].clone(),
                plausible: plausible(unconstrained),
            }
        })
        .collect();
    Ok(InferResult {
        era: ERA,
        factors: factor_results,
        rows,
        runs: inf.runs.get(),
        teardown_stopped: td.stopped,
        fault_stopped: ft.sec.stopped,
        path,
        sizes: opts.sizes,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

/// One inference under way: the training rows, the runs counted, the first failed run kept
/// for the end (a failed run's value is NaN, which no search step accepts).
struct Inference<'a> {
    opts: &'a InferOpts,
    progress: RefCell<&'a mut dyn FnMut(&str)>,
    teardown: Vec<TrainingRow>,
    fault: Vec<TrainingRow>,
    all_rows: Vec<TrainingRow>,
    runs: Cell<usize>,
    failure: RefCell<Option<String>>,
}

/// The teardown group's fit (stages 2 and 3).
struct TeardownFit {
    /// The last least-squares fit (its Jacobian gives the ranges).
    lm: fit::LmFit,
    /// The wide box's estimate, rounded.
    unconstrained: Vec<f64>,
    stopped: String,
    /// The fit rounded to four digits; the fault factor 1.
    factors: EraFactors,
    /// `ln` of the rounded factors.
    theta: Vec<f64>,
    /// Whether every teardown row is within its band at `factors`.
    applied: bool,
}

/// The fault factor's fit (stage 4).
struct FaultFit {
    sec: fit::SecantFit,
    unconstrained: f64,
    value: f64,
    applied: bool,
}

/// `ln(value / published)` of each row; a failed run is far from every band.
fn errors(values: &[f64], rows: &[TrainingRow]) -> Vec<f64> {
    values
        .iter()
        .zip(rows)
        .map(|(v, r)| {
            let e = (v / r.published).ln();
            if e.is_finite() {
                e
            } else {
                10.0
            }
        })
        .collect()
}

/// Log errors as signed percentages, for progress lines.
fn pct(e: &[f64]) -> String {
    e.iter()
        .map(|x| format!("{:+.1} %", (x.exp() - 1.0) * 100.0))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every row within its band.
fn within(e: &[f64], rows: &[TrainingRow]) -> bool {
    e.iter()
        .zip(rows)
        .all(|(x, r)| (x.exp() - 1.0).abs() <= r.band() + 1e-12)
}

fn plausible(f: f64) -> bool {
    (PLAUSIBLE.0..=PLAUSIBLE.1).contains(&f)
}

fn row_result(r: &TrainingRow, u: f64, f: f64) -> RowResult {
    let fe = f / r.published - 1.0;
    RowResult {
        id: r.id,
        cites: r.cites.clone(),
        unit: r.unit,
        published: r.published,
        band: r.band(),
        unfitted: u,
        unfitted_error: u / r.published - 1.0,
        fitted: f,
        fitted_error: fe,
        within: fe.abs() <= r.band() + 1e-12,
    }
}

impl<'a> Inference<'a> {
    fn new(opts: &'a InferOpts, progress: &'a mut dyn FnMut(&str)) -> Self {
        let teardown = rows::teardown_rows();
        let fault = rows::fault_rows();
        let all_rows = teardown.iter().chain(&fault).cloned().collect();
        Inference {
            opts,
            progress: RefCell::new(progress),
            teardown,
            fault,
            all_rows,
            runs: Cell::new(0),
            failure: RefCell::new(None),
        }
    }

    fn say(&self, line: &str) {
        (*self.progress.borrow_mut())(line);
    }

    /// Evaluate every (row, factors) pair given, in parallel; a failure is kept for the end.
    fn eval(&self, jobs: Vec<(RowKind, EraFactors)>) -> Vec<f64> {
        self.runs.set(self.runs.get() + jobs.len());
        let sizes = self.opts.sizes;
        crate::parallel::map(&jobs, self.opts.threads, &|(k, f)| {
            rows::evaluate(*k, &sizes, f)
        })
        .into_iter()
        .map(|r| match r {
            Ok(v) => v,
            Err(e) => {
                self.failure.borrow_mut().get_or_insert(e);
                f64::NAN
            }
        })
        .collect()
    }

    /// The teardown rows' log errors at each point (`ln` of the three teardown factors).
    fn teardown_residuals(&self, points: &[Vec<f64>]) -> Vec<Vec<f64>> {
        let jobs: Vec<(RowKind, EraFactors)> = points
            .iter()
            .flat_map(|p| {
                let f = rows::factors_of(p, 1.0);
                self.teardown.iter().map(move |r| (r.kind, f))
            })
            .collect();
        let values = self.eval(jobs);
        let out: Vec<Vec<f64>> = values
            .chunks(self.teardown.len())
            .map(|v| errors(v, &self.teardown))
            .collect();
        for (p, e) in points.iter().zip(&out) {
            self.say(&format!(
                "  zap {:.4} free {:.4} locked {:.4}: {}",
                p[0].exp(),
                p[1].exp(),
                p[2].exp(),
                pct(e)
            ));
        }
        out
    }

    /// Stages 2 and 3: the scan, least squares from its best point in the wide box, again
    /// within [0.25, 4] if the wide estimate left it; the fit rounded and run again. Every
    /// accepted point goes on `path`.
    fn fit_teardown(
        &self,
        unfitted_inline: f64,
        path: &mut Vec<PathPoint>,
    ) -> Result<TeardownFit, String> {
        let starts = scan_points(
            unfitted_inline,
            self.teardown[0].published,
            teardown_group_ns()?,
        );
        self.say(&format!(
            "the teardown factors: a scan of {} splits of the inline time, then \
             Levenberg-Marquardt on ln(ns/page) of 3 rows",
            starts.len()
        ));
        let mut residuals = |points: &[Vec<f64>]| self.teardown_residuals(points);
        let scanned = residuals(&starts);
        let sum_sq = |e: &[f64]| e.iter().map(|x| x * x).sum::<f64>();
        let best = (0..starts.len())
            .min_by(|&a, &b| sum_sq(&scanned[a]).total_cmp(&sum_sq(&scanned[b])))
            .expect("the scan has points");
        let wide = fit::levenberg_marquardt_from(
            fit::Step {
                theta: starts[best].clone(),
                residuals: scanned[best].clone(),
            },
            &mut residuals,
            fit::WIDE,
        );
        path.extend(starts.iter().zip(&scanned).map(|(t, e)| PathPoint {
            factors: rows::factors_of(t, 1.0),
            errors: e.clone(),
        }));
        let record = |lm: &fit::LmFit, path: &mut Vec<PathPoint>| {
            path.extend(lm.path.iter().skip(1).map(|s| PathPoint {
                factors: rows::factors_of(&s.theta, 1.0),
                errors: s.residuals.clone(),
            }));
        };
        record(&wide, path);
        let unconstrained: Vec<f64> = wide.last().theta.iter().map(|t| round4(t.exp())).collect();
        let (lm, stopped) = if unconstrained.iter().all(|f| plausible(*f)) {
            let stopped = wide.stopped.to_string();
            (wide, stopped)
        } else {
            self.say("  outside [0.25, 4]: least squares again within it");
            let theta: Vec<f64> = wide
                .last()
                .theta
                .iter()
                .map(|t| t.clamp(PLAUSIBLE.0.ln(), PLAUSIBLE.1.ln()))
                .collect();
            let r = residuals(std::slice::from_ref(&theta)).remove(0);
            let lm = fit::levenberg_marquardt_from(
                fit::Step {
                    theta,
                    residuals: r,
                },
                &mut residuals,
                PLAUSIBLE,
            );
            record(&lm, path);
            let stopped = format!("{} (within [0.25, 4])", lm.stopped);
            (lm, stopped)
        };
        let mut factors = rows::factors_of(&lm.last().theta, 1.0);
        for f in factors.iter_mut().take(3) {
            *f = round4(*f);
        }
        let theta: Vec<f64> = factors[..3].iter().map(|f| f.ln()).collect();
        self.say("the teardown factors rounded to four digits: 3 runs");
        let fitted = self.eval(self.teardown.iter().map(|r| (r.kind, factors)).collect());
        // A group is applied only if its fit meets every one of its rows within the
        // plausible range.
        let applied = within(&errors(&fitted, &self.teardown), &self.teardown);
        Ok(TeardownFit {
            lm,
            unconstrained,
            stopped,
            factors,
            theta,
            applied,
        })
    }

    /// Stage 4: the fault factor by the secant method on seed 002's share, the teardown
    /// factors `held`; again within [0.25, 4] if the wide estimate left it.
    fn fit_fault(&self, held: EraFactors) -> FaultFit {
        self.say("the fault factor: secant on seed 002's share");
        let mut fault_eval = |t: f64| -> f64 {
            let mut f = held;
            f[3] = t
                .exp()
                .clamp(usermm::vtime::MIN_FACTOR, usermm::vtime::MAX_FACTOR);
            let v = self.eval(vec![(self.fault[0].kind, f)]);
            let e = errors(&v, &self.fault)[0];
            self.say(&format!("  fault {:.4}: {}", f[3], pct(&[e])));
            e
        };
        let last = |s: &fit::SecantFit| *s.path.last().expect("a secant point");
        let sec_wide = fit::secant(0.0, &mut fault_eval, fit::WIDE);
        let unconstrained = round4(last(&sec_wide).0.exp());
        let sec = if plausible(unconstrained) {
            sec_wide
        } else {
            self.say("  outside [0.25, 4]: the secant again within it");
            let t0 = unconstrained.clamp(PLAUSIBLE.0, PLAUSIBLE.1).ln();
            fit::secant(t0, &mut fault_eval, PLAUSIBLE)
        };
        let (theta, err) = last(&sec);
        FaultFit {
            value: round4(theta.exp()),
            applied: within(&[err], &self.fault),
            sec,
            unconstrained,
        }
    }

    /// Each applied factor's range (the others held) over which every row of its group stays
    /// within its band, from the linear model at the fit; `None` ends for a group not applied.
    fn ranges(
        &self,
        td: &TeardownFit,
        ft: &FaultFit,
        factors: &EraFactors,
        err_td: &[f64],
        err_fault: &[f64],
    ) -> Vec<(Option<f64>, Option<f64>)> {
        let bands_td: Vec<f64> = self.teardown.iter().map(TrainingRow::band).collect();
        let mut ranges: Vec<(Option<f64>, Option<f64>)> = (0..3)
            .map(|k| {
                if !td.applied {
                    return (None, None);
                }
                let (lo, hi) = fit::linear_range(err_td, &td.lm.jacobian, &bands_td, k);
                (
                    lo.map(|d| (td.theta[k] + d).exp()),
                    hi.map(|d| (td.theta[k] + d).exp()),
                )
            })
            .collect();
        ranges.push(if ft.applied {
            // The slope from the secant's last two distinct points.
            let p = &ft.sec.path;
            let n = p.len();
            let (a, b) = (p[n.saturating_sub(3).min(n - 2)], p[n - 2]);
            let slope = if (b.0 - a.0).abs() > 1e-12 {
                (b.1 - a.1) / (b.0 - a.0)
            } else {
                0.0
            };
            let (lo, hi) = fit::linear_range(err_fault, &[vec![slope]], &[self.fault[0].band()], 0);
            let t = factors[3].ln();
            (lo.map(|d| (t + d).exp()), hi.map(|d| (t + d).exp()))
        } else {
            (None, None)
        });
        ranges
    }

    /// Both ends of every range run on the engine: per end, the row furthest outside (or
    /// least inside) its band.
    fn check_range_ends(
        &self,
        factors: &EraFactors,
        ranges: &[(Option<f64>, Option<f64>)],
    ) -> Vec<Vec<RangeEnd>> {
        let mut end_jobs: Vec<(usize, f64, RowKind, EraFactors)> = Vec::new();
        for (k, (lo, hi)) in ranges.iter().enumerate() {
            for end in [lo, hi].into_iter().flatten() {
                let mut f = *factors;
                f[k] = round4(end.clamp(usermm::vtime::MIN_FACTOR, usermm::vtime::MAX_FACTOR));
                let rows_k = if k < 3 { &self.teardown } else { &self.fault };
                for r in rows_k {
                    end_jobs.push((k, f[k], r.kind, f));
                }
            }
        }
        self.say(&format!(
            "the ranges' ends on the engine: {} runs",
            end_jobs.len()
        ));
        let end_values = self.eval(end_jobs.iter().map(|j| (j.2, j.3)).collect());
        let mut checked: Vec<Vec<RangeEnd>> = vec![Vec::new(); NR_ERA_FACTORS];
        let mut i = 0;
        while i < end_jobs.len() {
            let (k, fk) = (end_jobs[i].0, end_jobs[i].1);
            let mut worst: Option<RangeEnd> = None;
            while i < end_jobs.len() && end_jobs[i].0 == k && end_jobs[i].1 == fk {
                let row = self
                    .all_rows
                    .iter()
                    .find(|r| r.kind == end_jobs[i].2)
                    .expect("a training row");
                let e = end_values[i] / row.published - 1.0;
                let over = e.abs() - row.band();
                if worst
                    .as_ref()
                    .is_none_or(|w| over > w.worst_error.abs() - w.worst_band)
                {
                    worst = Some(RangeEnd {
                        factor: fk,
                        worst_row: row.id.to_string(),
                        worst_error: e,
                        worst_band: row.band(),
                        within: over <= 1e-12,
                    });
                }
                i += 1;
            }
            checked[k].extend(worst);
        }
        checked
    }
}

/// The scan's splits: the zap's share of the published inline time per page …
pub const SCAN_ZAP_SHARES: [f64; 3] = [0.2, 0.35, 0.5];
/// … and the locked sections' share of the rest (the free outside the locks has the remainder).
pub const SCAN_LOCKED_SHARES: [f64; 3] = [0.35, 0.5, 0.65];

/// The unfitted price per page of each teardown factor's costs on the seed profile (each of
/// its costs is charged once per freed page: `zap_pte` and `gather_page`; `free_unref_page`;
/// `free_pcppages_bulk_page` and `lru_del`), in ns.
fn teardown_group_ns() -> Result<[f64; 3], String> {
    let p =
        usermm::vtime::Profile::builtin(crate::bigfree::SEED_PROFILE).map_err(|e| e.to_string())?;
    let mut g = [0.0; 3];
    for (k, e) in ERA_FACTORS.iter().take(3).enumerate() {
        g[k] = e.costs.iter().map(|c| p.base_cost_ns(*c)).sum();
    }
    Ok(g)
}

/// The scan's starting points (in `ln f`): each split of the published inline time per page
/// between the three paths ([`SCAN_ZAP_SHARES`] × [`SCAN_LOCKED_SHARES`]), turned into the
/// factors that price each path at its share. What the unfitted inline row spends outside the
/// three paths (line transfers, table frees, flushes) is taken off first. Every point meets
/// the inline row by construction; they differ in where the time goes, which decides whether
/// the parallel rows are bound by the zapping task or by the locks — regimes a local search
/// does not cross.
pub fn scan_points(
    unfitted_inline: f64,
    published_inline: f64,
    group_ns: [f64; 3],
) -> Vec<Vec<f64>> {
    let other = (unfitted_inline - group_ns.iter().sum::<f64>()).max(0.0);
    let budget = (published_inline - other).max(published_inline * 0.1);
    let ln = |v: f64| {
        v.clamp(usermm::vtime::MIN_FACTOR, usermm::vtime::MAX_FACTOR)
            .ln()
    };
    let mut out = Vec::new();
    for sz in SCAN_ZAP_SHARES {
        for sl in SCAN_LOCKED_SHARES {
            let rest = (1.0 - sz) * budget;
            out.push(vec![
                ln(sz * budget / group_ns[0]),
                ln((1.0 - sl) * rest / group_ns[1]),
                ln(sl * rest / group_ns[2]),
            ]);
        }
    }
    out
}

fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The era file of `r`: one `inferred` input per factor, naming its training rows, with the
/// run, the residuals and the range in its `source`.
pub fn era_file(r: &InferResult, opts: &InferOpts) -> String {
    let all_rows = rows::training_rows();
    let mut s = String::new();
    s.push_str(ERA_FILE_HEADER);
    s.push_str(
        "\n# Written by `usermm infer` (crates/usermm-workloads/src/infer/); the factors and the\n\
         # costs each multiplies are fixed in crates/usermm/src/vtime/profile/era.rs and\n\
         # docs/profiles.md. Do not edit a value by hand: run `usermm infer` again.\n",
    );
    s.push_str(&format!("name = {}\n", toml_str(r.era)));
    s.push_str(&format!(
        "description = {}\n",
        toml_str(
            "what the seeds' kernels (v4.8-v4.18 on bare-metal Haswell, Broadwell and Sandy \
             Bridge) paid per step relative to this host's measured costs scaled by clock, \
             inferred from seeds 000/001's inline, max_active 1 and 8 rows and seed 002's \
             vanilla share; every other published figure tests them"
        )
    ));
    let pct = |x: f64| format!("{:+.1} %", x * 100.0);
    for f in &r.factors {
        let cites: Vec<String> = f
            .rows
            .iter()
            .map(|id| {
                all_rows
                    .iter()
                    .find(|t| t.id == *id)
                    .map_or_else(|| id.to_string(), |t| t.cites.clone())
            })
            .collect();
        let residuals: Vec<String> = r
            .rows
            .iter()
            .filter(|x| f.rows.contains(&x.id))
            .map(|x| {
                format!(
                    "{} {} (band ±{:.0} %)",
                    x.id,
                    pct(x.fitted_error),
                    x.band * 100.0
                )
            })
            .collect();
        let range = match f.range {
            (Some(lo), Some(hi)) => format!("{lo:.3}-{hi:.3}"),
            (None, Some(hi)) => format!("up to {hi:.3}"),
            (Some(lo), None) => format!("from {lo:.3}"),
            (None, None) => "none (a training row is outside its band at the fit)".into(),
        };
        let ends: Vec<String> = f
            .range_checked
            .iter()
            .map(|e| {
                format!(
                    "at {:.4} the worst row is {} {}",
                    e.factor,
                    e.worst_row,
                    pct(e.worst_error)
                )
            })
            .collect();
        let method = if f.input == "era_fault" {
            "the secant method on ln(share) of the row (the share of the CPUs' busy time that \
             get_huge_zero_page spends on the refcount line), the teardown factors held"
        } else {
            "a scan of nine splits of the inline time between the three paths, then least \
             squares on ln(ns/page) over the three teardown rows (Levenberg-Marquardt, forward \
             differences of 5 %, from the scan's best point)"
        };
        let source = format!(
            "{}: {method}; residuals at the written factors: {}; range with the other factors \
             held, every training row within its band (linear at the fit): {range}{}{}; \
             {} runs, {:.0} s",
            opts.command,
            residuals.join(", "),
            if ends.is_empty() { "" } else { "; checked: " },
            ends.join(", "),
            r.runs,
            r.wall_s
        );
        let source = match (f.plausible, f.applied) {
            (true, true) => source,
            (false, true) => format!(
                "{source}; the least-squares estimate in the wide box is {}, OUTSIDE [{}, {}] \
                 (the sign of a mechanism the model lacks, not an era difference); the value \
                 written is the fit within [{}, {}], which meets every training row",
                f.unconstrained, PLAUSIBLE.0, PLAUSIBLE.1, PLAUSIBLE.0, PLAUSIBLE.1
            ),
            (_, false) => format!(
                "{source}; NOT APPLIED (written as 1): no factor within [{}, {}] meets its \
                 training rows (the least-squares estimate in the wide box is {}), so the rows \
                 name a mechanism the model lacks, not an era difference",
                PLAUSIBLE.0, PLAUSIBLE.1, f.unconstrained
            ),
        };
        s.push_str(&format!("\n# {}\n", f.path));
        s.push_str(&format!("[inputs.{}]\n", f.input));
        s.push_str(&format!("value = {:?}\n", f.value));
        s.push_str("unit = \"factor\"\nkind = \"inferred\"\n");
        s.push_str("rows = [\n");
        for c in &cites {
            s.push_str(&format!("    {},\n", toml_str(c)));
        }
        s.push_str("]\n");
        s.push_str(&format!("source = {}\n", toml_str(&source)));
    }
    s
}
