//! Modelled and measured, side by side. Each experiment of `reproduce` has up to three sides:
//! *modelled* (virtual time on its seed's machine with the inferred era factors: *modelled
//! (profile NAME)*), *unfitted* (the same virtual run without the era factors: this host's
//! costs scaled by clock) and *measured* (this host's wall clock: *measured (this host)*);
//! `--time`, `--profile` and `--era` pick fewer. This module holds an experiment's sides
//! ([`ExperimentSides`], one [`SideRecord`] per side that ran), the headline figures scripts read
//! from `results.json`, the one table and the one plot that put the seed's published figure
//! beside them, and the verdicts — judged on the modelled side for timing effects, because a
//! 2-core host cannot show a many-core effect (docs/two-clocks.md).

use std::path::Path;

use serde::Serialize;
use usermm_workloads::seeds::{HUGE_ZERO, MUNMAP_DOWNGRADE, PARALLEL_FREE};

use super::bigfree::BigfreeRecord;
use super::huge_zero::HugeZeroRecord;
use super::munmap::MunmapRecord;
use crate::args::{TimeArg, TimeArgs};
use crate::report::{line_plot, Section, Series, Table};

/// Which clock a side ran on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SideKind {
    /// Virtual time on the seed's machine with the inferred era factors.
    Modelled,
    /// The same without them (`--era unfitted`): this host's costs scaled by clock.
    Unfitted,
    Measured,
}

impl SideKind {
    pub fn name(self) -> &'static str {
        match self {
            SideKind::Modelled => "modelled",
            SideKind::Unfitted => "unfitted",
            SideKind::Measured => "measured",
        }
    }
}

/// The sides `--time`/`--profile`/`--era` ask for: all three when none is given; the modelled
/// side and its unfitted view with `--time virtual` (or `--profile`); the one named with
/// `--era`; else the measured side.
pub(super) fn sides(time: &TimeArgs) -> Vec<(SideKind, TimeArgs)> {
    let virt = TimeArgs {
        mode: Some(TimeArg::Virtual),
        ..time.clone()
    };
    let unfitted = TimeArgs {
        era: Some("unfitted".into()),
        ..virt.clone()
    };
    let wall = TimeArgs {
        mode: Some(TimeArg::Wall),
        profile: None,
        scale_cost: Vec::new(),
        era: None,
    };
    match (time.mode, &time.profile, &time.era) {
        (None, None, None) if time.scale_cost.is_empty() => vec![
            (SideKind::Modelled, virt),
            (SideKind::Unfitted, unfitted),
            (SideKind::Measured, wall),
        ],
        (_, _, None) if time.is_virtual() => {
            vec![(SideKind::Modelled, virt), (SideKind::Unfitted, unfitted)]
        }
        _ if time.is_virtual() => vec![(SideKind::Modelled, virt)],
        _ => vec![(SideKind::Measured, wall)],
    }
}

/// What one side of an experiment (modelled, unfitted or measured) produced: the headline
/// figures `F` (flattened into the side, for scripts), how they were obtained, and the
/// experiment's full record `R`.
#[derive(Debug, Serialize)]
pub struct SideRecord<F, R> {
    /// The profile's name when modelled; `None` when measured.
    pub profile: Option<String>,
    /// `modelled (profile NAME)` or `measured (this host)`.
    pub time: String,
    #[serde(flatten)]
    pub figures: F,
    pub detail: Box<R>,
}

impl<F, R> SideRecord<F, R> {
    pub fn new(time: &str, figures: F, detail: Box<R>) -> Self {
        // `modelled (profile NAME)` or `modelled (profile NAME, unfitted)`.
        let profile = time
            .strip_prefix("modelled (profile ")
            .and_then(|s| s.strip_suffix(')'))
            .map(|s| s.split(", ").next().unwrap_or(s).to_string());
        SideRecord {
            profile,
            time: time.to_string(),
            figures,
            detail,
        }
    }
}

/// An experiment in `results.json`, by side: modelled (virtual time, era factors), unfitted
/// (virtual time, no era factors) and measured (this host's wall clock); any may be absent
/// when `--time`/`--profile`/`--era` picked fewer.
#[derive(Debug, Serialize)]
pub struct ExperimentSides<F, R> {
    pub modelled: Option<SideRecord<F, R>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unfitted: Option<SideRecord<F, R>>,
    pub measured: Option<SideRecord<F, R>>,
}

impl<F, R> Default for ExperimentSides<F, R> {
    fn default() -> Self {
        ExperimentSides {
            modelled: None,
            unfitted: None,
            measured: None,
        }
    }
}

impl<F, R> ExperimentSides<F, R> {
    pub fn set(&mut self, kind: SideKind, side: SideRecord<F, R>) {
        match kind {
            SideKind::Modelled => self.modelled = Some(side),
            SideKind::Unfitted => self.unfitted = Some(side),
            SideKind::Measured => self.measured = Some(side),
        }
    }
}

/// Whether a seed's figure trained an era factor (*fitted*: shown, never judged) or is a
/// prediction of the model (*predicted*: what the verdict is judged on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Fitted,
    Predicted,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Fitted => "fitted",
            Role::Predicted => "predicted",
        }
    }

    /// The role of seeds 000/001's row at `max_active` (`None`: inline): fitted when
    /// `usermm infer` trains on it.
    pub fn of_bigfree_row(max_active: Option<u32>) -> Role {
        use usermm_workloads::infer::rows::{teardown_rows, RowKind};
        if teardown_rows()
            .iter()
            .any(|r| r.kind == RowKind::Teardown(max_active))
        {
            Role::Fitted
        } else {
            Role::Predicted
        }
    }
}

/// One row of the free-time curve.
#[derive(Debug, Clone, Serialize)]
pub struct CurveRow {
    /// `None` for vanilla (inline free).
    pub max_active: Option<u32>,
    /// Fitted (a training row of the era factors) or predicted.
    pub role: Role,
    pub seconds: f64,
    /// Vanilla time / this row's time.
    pub speedup: f64,
    /// The spinning share of the CPUs' busy and spin time over the free (virtual time).
    pub spin_share: f64,
}

/// Seeds 000/001's headline: the free-time curve (the seed's rows only, no pcp-tune rows).
#[derive(Debug, Clone, Serialize)]
pub struct BigfreeFigures {
    pub rows: Vec<CurveRow>,
}

impl BigfreeFigures {
    pub fn of(r: &BigfreeRecord) -> Self {
        BigfreeFigures {
            rows: r
                .rows
                .iter()
                .filter(|x| !x.pcp_auto_tune)
                .map(|x| CurveRow {
                    max_active: x.max_active,
                    role: Role::of_bigfree_row(x.max_active),
                    seconds: x.time_s,
                    speedup: x.speedup,
                    spin_share: x.spin_share,
                })
                .collect(),
        }
    }

    fn speedup(&self, m: Option<u32>) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| r.max_active == m)
            .map(|r| r.speedup)
    }

    fn seconds(&self, m: Option<u32>) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| r.max_active == m)
            .map(|r| r.seconds)
    }
}

/// Seed 002's headline figures.
#[derive(Debug, Clone, Serialize)]
pub struct HugeZeroFigures {
    /// Patched / vanilla throughput (sum of the processes' KB/s).
    pub throughput_ratio: f64,
    /// Share of the CPUs' busy time on the huge zero page's refcount line (virtual time only).
    pub line_share_vanilla: Option<f64>,
    pub line_share_patched: Option<f64>,
}

impl HugeZeroFigures {
    pub fn of(r: &HugeZeroRecord) -> Self {
        HugeZeroFigures {
            throughput_ratio: r.ratio.throughput,
            line_share_vanilla: r.vanilla.huge_zero_line_share,
            line_share_patched: r.patched.huge_zero_line_share,
        }
    }
}

/// Exclusive mmap-lock hold of one munmap, µs.
#[derive(Debug, Clone, Serialize)]
pub struct Hold {
    pub vanilla: f64,
    pub patched: f64,
}

/// Seed 003's headline figures.
#[derive(Debug, Clone, Serialize)]
pub struct MunmapFigures {
    pub exclusive_hold_us: Hold,
    /// Vanilla hold / patched hold.
    pub ratio: f64,
    /// The munmap's size, bytes (the seed's is 80 GB).
    pub size: u64,
}

impl MunmapFigures {
    pub fn of(r: &MunmapRecord, size: u64) -> Self {
        MunmapFigures {
            exclusive_hold_us: Hold {
                vanilla: r.vanilla.median.exclusive_ns as f64 / 1000.0,
                patched: r.patched.median.exclusive_ns as f64 / 1000.0,
            },
            ratio: r.ratio.exclusive_hold,
            size,
        }
    }
}

/// Percpu's figures are sizes, not times: the same on either clock; its detail has them.
#[derive(Debug, Clone, Serialize)]
pub struct NoFigures {}

pub(super) type BigfreeSides = ExperimentSides<BigfreeFigures, BigfreeRecord>;
pub(super) type HugeZeroSides = ExperimentSides<HugeZeroFigures, HugeZeroRecord>;
pub(super) type MunmapSides = ExperimentSides<MunmapFigures, MunmapRecord>;

/// `ours` within `band` (a fraction) of `seed`: `None` when it is, else the miss, signed.
fn miss(ours: f64, seed: f64, band: f64) -> Option<f64> {
    let err = ours / seed - 1.0;
    (err.abs() > band).then_some(err)
}

/// A timing seed's checks, each met or missed, and the figures shown but not judged.
#[derive(Default)]
struct Checks {
    passed: Vec<String>,
    failed: Vec<String>,
    fitted: Vec<String>,
}

impl Checks {
    fn check(&mut self, ok: bool, what: String) {
        if ok {
            self.passed.push(what);
        } else {
            self.failed.push(what);
        }
    }

    /// A training row of the era factors: shown, never judged.
    fn fitted(&mut self, what: String) {
        self.fitted.push(what);
    }

    /// The one verdict, judged on the predicted figures: `reproduced` when every check
    /// passed, else `not reproduced` and every check that failed; then the fitted figures.
    fn verdict(self, profile: &str) -> String {
        let (passed, failed) = (self.passed, self.failed);
        format!(
            "{} (predicted figures, modelled, profile {profile}) — {}{}{}",
            if failed.is_empty() {
                "reproduced"
            } else {
                "not reproduced"
            },
            if failed.is_empty() {
                String::new()
            } else {
                format!("missed: {}; ", failed.join("; "))
            },
            if passed.is_empty() {
                String::new()
            } else {
                format!("met: {}", passed.join("; "))
            },
            if self.fitted.is_empty() {
                String::new()
            } else {
                format!(
                    "; fitted (training rows of the era factors, not judged): {}",
                    self.fitted.join("; ")
                )
            }
        )
    }
}

/// Seeds 000/001, judged on the modelled curve's predicted rows: each
/// predicted speedup within ±25 % of the seed's (max_active 2, 4, 16, 32 and the default
/// workqueue's), the fastest row at max_active 4, 8 or 16, and the 32 row at least 15 %
/// slower than the 8 row. The inline, max_active 1 and 8 rows trained the era factors
/// (`usermm infer`): shown as fitted.
pub(super) fn bigfree_verdict(m: &BigfreeFigures, profile: &str) -> String {
    let par: Vec<&CurveRow> = m.rows.iter().filter(|r| r.max_active.is_some()).collect();
    let Some(best) = par.iter().min_by(|a, b| a.seconds.total_cmp(&b.seconds)) else {
        return "no parallel row".into();
    };
    let mut c = Checks::default();
    let mut misses = Vec::new();
    let mut judged = Vec::new();
    let mut fitted = Vec::new();
    if let Some(v) = m.seconds(None) {
        fitted.push(format!("inline {v:.3} s"));
    }
    for &(ma, s, _) in PARALLEL_FREE.rows {
        let seed = PARALLEL_FREE.vanilla_s / s;
        let Some(ours) = m.speedup(Some(ma)) else {
            continue;
        };
        if Role::of_bigfree_row(Some(ma)) == Role::Fitted {
            fitted.push(format!("max_active {ma} {ours:.2}× (seed {seed:.2}×)"));
            continue;
        }
        judged.push(ma.to_string());
        if let Some(err) = miss(ours, seed, 0.25) {
            misses.push(format!(
                "{ma}: {ours:.2}× vs {seed:.2}× ({:+.0} %)",
                err * 100.0
            ));
        }
    }
    c.check(
        misses.is_empty(),
        if misses.is_empty() {
            format!(
                "every predicted speedup within ±25 % of the seed's (max_active {})",
                judged.join(", ")
            )
        } else {
            format!(
                "predicted speedups within ±25 % (outside: {})",
                misses.join(", ")
            )
        },
    );
    let best_ma = best.max_active.unwrap_or(0);
    c.check(
        matches!(best_ma, 4 | 8 | 16),
        format!(
            "fastest row at 4, 8 or 16 (max_active {best_ma}, {:.2}×)",
            best.speedup
        ),
    );
    if let (Some(a), Some(b)) = (m.seconds(Some(32)), m.seconds(Some(8))) {
        c.check(
            a >= b * 1.15,
            format!(
                "max_active 32 at least 15 % slower than 8 ({a:.3} s vs {b:.3} s, {:+.0} %)",
                (a / b - 1.0) * 100.0
            ),
        );
    }
    for f in fitted {
        c.fitted(f);
    }
    c.verdict(profile)
}

/// Seed 002: the throughput ratio within ±25 % of 2.64 and the huge zero
/// page's line under 1 % patched, predicted; the vanilla share trained the fault factor.
pub(super) fn huge_zero_verdict(m: &HugeZeroFigures, profile: &str) -> String {
    let (v, p) = (
        m.line_share_vanilla.unwrap_or(0.0),
        m.line_share_patched.unwrap_or(1.0),
    );
    let mut c = Checks::default();
    c.check(
        miss(m.throughput_ratio, HUGE_ZERO.throughput_ratio, 0.25).is_none(),
        format!(
            "patched/vanilla throughput within ±25 % of {:.2}× ({:.2}×)",
            HUGE_ZERO.throughput_ratio, m.throughput_ratio
        ),
    );
    c.check(p < 0.01, format!("under 1 % patched ({:.2} %)", p * 100.0));
    c.fitted(format!(
        "get_huge_zero_page's share vanilla {:.2} % (seed {:.2} %)",
        v * 100.0,
        HUGE_ZERO.cycles_share_vanilla * 100.0
    ));
    c.verdict(profile)
}

/// Seed 003: the exclusive hold at least 1000× shorter patched, and the
/// vanilla hold per page within ±35 % of the seed's own (2 485 684 µs for 80 GiB: 118.5 ns).
/// Both predicted: nothing of seed 003 trains a factor.
pub(super) fn munmap_verdict(m: &MunmapFigures, profile: &str) -> String {
    let seed_per_page = MUNMAP_DOWNGRADE.exclusive_vanilla_us as f64 * 1000.0
        / (MUNMAP_DOWNGRADE.size / 4096) as f64;
    let ours = m.exclusive_hold_us.vanilla * 1000.0 / (m.size / 4096).max(1) as f64;
    let mut c = Checks::default();
    c.check(
        m.ratio >= 1000.0,
        format!(
            "exclusive hold ≥ 1000× shorter ({:.1} µs → {:.1} µs, {:.0}×, at {} GiB)",
            m.exclusive_hold_us.vanilla,
            m.exclusive_hold_us.patched,
            m.ratio,
            m.size >> 30
        ),
    );
    c.check(
        miss(ours, seed_per_page, 0.35).is_none(),
        format!("vanilla hold per page within ±35 % of {seed_per_page:.1} ns ({ours:.1} ns)"),
    );
    c.verdict(profile)
}

fn opt(x: Option<f64>, f: impl Fn(f64) -> String) -> String {
    x.map_or_else(|| "-".to_string(), f)
}

fn side_label<F, R>(s: &Option<SideRecord<F, R>>) -> String {
    s.as_ref().map_or_else(|| "-".into(), |s| s.time.clone())
}

/// The one table (the seed's published figure, modelled, measured) and the one plot (the
/// free-time curve three ways) of the report's comparison section.
pub(super) fn comparison(
    out: &Path,
    bigfree: Option<&BigfreeSides>,
    huge_zero: Option<&HugeZeroSides>,
    munmap: Option<&MunmapSides>,
) -> anyhow::Result<Section> {
    let mut t = Table::new(
        "Each seed's published figure, the model on the seed's machine (with the era factors, \
         and unfitted), and this host"
            .to_string(),
        [
            "seed",
            "figure",
            "role",
            "published",
            "modelled",
            "unfitted",
            "measured (this host)",
        ],
    );
    let mut notes = String::new();
    if let Some(b) = bigfree {
        bigfree_rows(&mut t, &mut notes, b);
    }
    if let Some(h) = huge_zero {
        huge_zero_rows(&mut t, &mut notes, h);
    }
    if let Some(p) = munmap {
        munmap_rows(&mut t, &mut notes, p);
    }
    let mut plots = Vec::new();
    if let Some(b) = bigfree {
        let plot = out.join("seeds_modelled_measured.svg");
        speedup_plot(&plot, b)?;
        plots.push(plot);
    }
    Ok(Section {
        heading: "The seeds: published, modelled, measured".into(),
        text: format!(
            "Timing verdicts are judged on the modelled column's *predicted* figures (virtual \
time on the seed's machine: a 2-core host cannot show a many-core effect). The *fitted* \
figures trained the era factors (`usermm infer`, docs/profiles.md \"Era factors\"): shown, \
never judged. The unfitted column is the same model without the era factors (this host's \
costs scaled by clock); the measured column is this host's wall clock. Each modelled figure \
names its profile; every cost of a profile names its source (`--json` prints them).\n\n{notes}"
        ),
        tables: vec![t],
        plots,
    })
}

/// One figure's row of the comparison table, beside the seed's published value.
struct Row<'a> {
    seed: &'a str,
    figure: String,
    role: Role,
    published: String,
}

impl<F, R> ExperimentSides<F, R> {
    /// The comparison section's note on what each side of experiment `name` ran on.
    fn note(&self, name: &str) -> String {
        format!(
            "- {name}: modelled {}; unfitted {}; measured {}\n",
            side_label(&self.modelled),
            side_label(&self.unfitted),
            side_label(&self.measured)
        )
    }

    /// Pushes `row` to `t`, with each side's figure that `get` picks, as `fmt` writes it (`-`
    /// where the side did not run or has no such figure).
    fn push(
        &self,
        t: &mut Table,
        row: Row<'_>,
        get: impl Fn(&F) -> Option<f64>,
        fmt: impl Fn(f64) -> String,
    ) {
        let side =
            |s: &Option<SideRecord<F, R>>| opt(s.as_ref().and_then(|s| get(&s.figures)), &fmt);
        t.push_row([
            row.seed.into(),
            row.figure,
            row.role.name().into(),
            row.published,
            side(&self.modelled),
            side(&self.unfitted),
            side(&self.measured),
        ]);
    }
}

/// Seeds 000/001's rows of the comparison table.
fn bigfree_rows(t: &mut Table, notes: &mut String, b: &BigfreeSides) {
    let x2 = |v: f64| format!("{v:.2}×");
    *notes += &b.note("bigfree");
    let row = |figure: String, max_active: Option<u32>, published: String| Row {
        seed: "000/001",
        figure,
        role: Role::of_bigfree_row(max_active),
        published,
    };
    b.push(
        t,
        row(
            "vanilla free time (s)".into(),
            None,
            format!("{:.2} (320 GiB)", PARALLEL_FREE.vanilla_s),
        ),
        |f| f.seconds(None),
        |v| format!("{v:.3}"),
    );
    for &(ma, s, _) in PARALLEL_FREE.rows {
        let label = if ma == usermm_workloads::seeds::DEFAULT_WQ_MAX_ACTIVE {
            format!("speedup, default workqueue (max_active {ma})")
        } else {
            format!("speedup, max_active {ma}")
        };
        b.push(
            t,
            row(label, Some(ma), x2(PARALLEL_FREE.vanilla_s / s)),
            |f| f.speedup(Some(ma)),
            x2,
        );
    }
}

/// Seed 002's rows of the comparison table.
fn huge_zero_rows(t: &mut Table, notes: &mut String, h: &HugeZeroSides) {
    let x2 = |v: f64| format!("{v:.2}×");
    let pct = |v: f64| format!("{:.2} %", v * 100.0);
    *notes += &h.note("huge-zero");
    let row = |figure: &str, role: Role, published: String| Row {
        seed: "002",
        figure: figure.into(),
        role,
        published,
    };
    h.push(
        t,
        row(
            "throughput patched/vanilla",
            Role::Predicted,
            x2(HUGE_ZERO.throughput_ratio),
        ),
        |f| Some(f.throughput_ratio),
        x2,
    );
    h.push(
        t,
        row(
            "get_huge_zero_page's line share, vanilla",
            Role::Fitted,
            pct(HUGE_ZERO.cycles_share_vanilla),
        ),
        |f| f.line_share_vanilla,
        pct,
    );
    h.push(
        t,
        row(
            "the line's share, patched",
            Role::Predicted,
            pct(HUGE_ZERO.cycles_share_patched),
        ),
        |f| f.line_share_patched,
        pct,
    );
}

/// Seed 003's rows of the comparison table.
fn munmap_rows(t: &mut Table, notes: &mut String, p: &MunmapSides) {
    *notes += &p.note("munmap");
    let us = |v: f64| format!("{v:.1}");
    let row = |figure: &str, published: String| Row {
        seed: "003",
        figure: figure.into(),
        role: Role::Predicted,
        published,
    };
    p.push(
        t,
        row(
            "exclusive hold, vanilla (µs)",
            format!("{} (80 GB)", MUNMAP_DOWNGRADE.exclusive_vanilla_us),
        ),
        |f| Some(f.exclusive_hold_us.vanilla),
        us,
    );
    p.push(
        t,
        row("exclusive hold, patched (µs)", "µs level".into()),
        |f| Some(f.exclusive_hold_us.patched),
        us,
    );
    p.push(
        t,
        row("hold vanilla/patched", "≥ 10⁵×".into()),
        |f| Some(f.ratio),
        |v| format!("{v:.0}×"),
    );
}

/// The free-time curve three ways (published, modelled and unfitted, measured).
fn speedup_plot(plot: &Path, b: &BigfreeSides) -> anyhow::Result<()> {
    let curve = |name: String, f: &BigfreeFigures, dashed: bool| Series {
        name,
        dashed,
        points: f
            .rows
            .iter()
            .filter_map(|r| r.max_active.map(|m| (m as f64, r.speedup)))
            .collect(),
    };
    let mut series = vec![Series {
        name: "seed (published, 320 GiB)".into(),
        dashed: true,
        points: PARALLEL_FREE
            .rows
            .iter()
            .map(|&(m, s, _)| (m as f64, PARALLEL_FREE.vanilla_s / s))
            .collect(),
    }];
    if let Some(s) = &b.modelled {
        series.push(curve(s.time.clone(), &s.figures, false));
    }
    if let Some(s) = &b.unfitted {
        series.push(curve(s.time.clone(), &s.figures, true));
    }
    if let Some(s) = &b.measured {
        series.push(curve(s.time.clone(), &s.figures, false));
    }
    line_plot(
        plot,
        "Seeds 000/001: free speedup over vanilla vs max_active",
        "max_active",
        "speedup (vanilla time / time)",
        &series,
        true,
    )
}
