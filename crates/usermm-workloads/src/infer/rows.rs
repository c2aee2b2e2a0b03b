//! The training rows of `usermm infer`, and their evaluation on the engine.
//!
//! The rows are fixed here, before any fit, and nothing else trains a factor:
//! - seeds 000/001 (`seeds::PARALLEL_FREE`): the inline free (v4.10), `max_active` 1 and
//!   `max_active` 8 — the teardown factors (`era_zap`, `era_free`, `era_locked`);
//! - seed 002 (`seeds::HUGE_ZERO`): `get_huge_zero_page`'s share of the cycles, vanilla — the
//!   fault factor (`era_fault`).
//!
//! Each teardown row is compared as time per page (the seed freed 320 GiB; the rows here free
//! 32 GiB on the seed's machine, its memory shaped as the seed's for the free, in 1 GiB jobs:
//! [`bigfree::seed_model_opts`], [`EvalSizes`]); the share as a share. A row's band is
//! its published spread or ±10 %, whichever is wider.

use usermm::config::TimeMode;
use usermm::vtime::{EraChoice, EraFactors, ERA_FACTORS, MAX_FACTOR, MIN_FACTOR};
use usermm::{Machine, MachineConfig, PAGE_SIZE};

use crate::bigfree::{self, FreeBy};
use crate::seeds::{HUGE_ZERO, PARALLEL_FREE};
use crate::usemem;

/// The smallest band a row is held to: ±10 %.
pub const MIN_BAND: f64 = 0.10;

/// What a training row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RowKind {
    /// A bigfree row's free time per page: inline (`None`) or at `max_active`.
    Teardown(Option<u32>),
    /// Seed 002's vanilla share of busy time on the huge zero page's refcount line.
    HugeZeroShare,
}

/// One published figure a factor is estimated from.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TrainingRow {
    /// A short id (`000/001 max_active 8`), used in tables and in the era file's `rows`.
    pub id: &'static str,
    pub kind: RowKind,
    /// The published figure in the unit compared (`ns/page`, `share`).
    pub published: f64,
    pub unit: &'static str,
    /// The published spread, as a fraction (0 where none was published).
    pub spread: f64,
    /// The posting and the figure as published, for the era file's `rows`.
    pub cites: String,
}

impl TrainingRow {
    /// `max(spread, 10 %)`.
    pub fn band(&self) -> f64 {
        self.spread.max(MIN_BAND)
    }
}

/// Pages of the seed's 320 GiB mapping.
fn seed_pages() -> f64 {
    (PARALLEL_FREE.size / PAGE_SIZE) as f64
}

/// The teardown factors' training rows: inline, `max_active` 1 and 8.
pub fn teardown_rows() -> Vec<TrainingRow> {
    let s = &PARALLEL_FREE;
    let post = "Aaron Lu, \"[PATCH v2 0/5] mm: support parallel free of memory\", linux-mm \
                2017-03-15: free() of 320 GiB on a 4-socket Haswell-EX";
    // The seed's parallel row at `max_active` `ma`.
    let parallel = |id: &'static str, ma: u32| {
        let (_, secs, spread_pct) = s
            .rows
            .iter()
            .find(|r| r.0 == ma)
            .copied()
            .expect("the seed publishes max_active 1 and 8");
        TrainingRow {
            id,
            kind: RowKind::Teardown(Some(ma)),
            published: secs * 1e9 / seed_pages(),
            unit: "ns/page",
            spread: spread_pct / 100.0,
            cites: format!("seed 000/001 max_active {ma}: {secs} s ±{spread_pct} % ({post})"),
        }
    };
    vec![
        TrainingRow {
            id: "000/001 inline",
            kind: RowKind::Teardown(None),
            published: s.vanilla_s * 1e9 / seed_pages(),
            unit: "ns/page",
            spread: s.vanilla_spread_pct / 100.0,
            cites: format!(
                "seed 000/001 inline (v4.10): {} s ±{} % ({post})",
                s.vanilla_s, s.vanilla_spread_pct
            ),
        },
        parallel("000/001 max_active 1", 1),
        parallel("000/001 max_active 8", 8),
    ]
}

/// The fault factor's training row: seed 002's vanilla share.
pub fn fault_rows() -> Vec<TrainingRow> {
    vec![TrainingRow {
        id: "002 huge zero share",
        kind: RowKind::HugeZeroShare,
        published: HUGE_ZERO.cycles_share_vanilla,
        unit: "share",
        spread: 0.0,
        cites: format!(
            "seed 002: get_huge_zero_page {:.2} % of cycles, vanilla (v{}), usemem -n {} \
             --readonly -j 0x200000 {}G on Haswell-EP (Aaron Lu, \"thp: reduce usage of huge \
             zero page's atomic counter\", linux-mm 2016-08-29)",
            HUGE_ZERO.cycles_share_vanilla * 100.0,
            HUGE_ZERO.kernel,
            HUGE_ZERO.nproc,
            HUGE_ZERO.size >> 30
        ),
    }]
}

/// Every training row, teardown first.
pub fn training_rows() -> Vec<TrainingRow> {
    let mut v = teardown_rows();
    v.extend(fault_rows());
    v
}

/// The `time.era` text of `factors`.
pub fn era_text(factors: &EraFactors) -> String {
    EraChoice::Given(*factors).to_string()
}

/// Sizes of the evaluation runs (the defaults are `reproduce`'s; tests shrink them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct EvalSizes {
    /// The bigfree mapping: 32 GiB, four 1 GiB jobs a worker at the training rows' widest
    /// (`max_active` 8). `reproduce` runs the seed's table at 64 GiB, two jobs a worker at its
    /// widest (32): `cmd/reproduce/bigfree.rs` in the CLI says why.
    pub bigfree: u64,
    /// usemem's SIZE for seed 002 (100 GiB: the seed's own).
    pub usemem: u64,
}

impl Default for EvalSizes {
    fn default() -> Self {
        EvalSizes {
            bigfree: 32 << 30,
            usemem: HUGE_ZERO.size,
        }
    }
}

/// The machine a row runs on at `factors`.
pub fn row_config(kind: RowKind, sizes: &EvalSizes, factors: &EraFactors) -> MachineConfig {
    let mut c = match kind {
        RowKind::Teardown(ma) => {
            let opts = bigfree::seed_model_opts(sizes.bigfree, &[1, 8]);
            bigfree::row_config(&opts, ma)
        }
        RowKind::HugeZeroShare => {
            let (mut c, _) = usemem::seed_002_run();
            c.set_patched(false);
            c
        }
    };
    c.time.mode = TimeMode::Virtual;
    c.time.era = era_text(factors);
    c
}

/// One row's modelled value at `factors` (ns/page or a share).
pub fn evaluate(kind: RowKind, sizes: &EvalSizes, factors: &EraFactors) -> Result<f64, String> {
    let cfg = row_config(kind, sizes, factors);
    match kind {
        RowKind::Teardown(ma) => {
            let label = match ma {
                None => "vanilla".to_string(),
                Some(n) => format!("max_active {n}"),
            };
            let run = bigfree::RunSpec {
                size: sizes.bigfree,
                free_by: FreeBy::Munmap,
                label: &label,
                rep: 0,
            };
            let s = bigfree::run_once(&cfg, run, &mut |_| {})
                .map_err(|e| format!("bigfree {label}: {e}"))?;
            Ok(s.free_ns as f64 / (sizes.bigfree / PAGE_SIZE) as f64)
        }
        RowKind::HugeZeroShare => {
            let (_, mut opts) = usemem::seed_002_run();
            opts.size = sizes.usemem;
            let m = Machine::new(cfg).map_err(|e| format!("usemem: {e}"))?;
            let r = usemem::run(&m, &opts).map_err(|e| format!("usemem: {e}"))?;
            r.huge_zero_line_share
                .ok_or_else(|| "usemem: no line share (not a virtual run)".to_string())
        }
    }
}

/// The factors in [`ERA_FACTORS`] order from the teardown `theta` (ln of zap, free, locked)
/// and the fault factor.
pub fn factors_of(theta: &[f64], fault: f64) -> EraFactors {
    debug_assert_eq!(ERA_FACTORS.len(), 4);
    let f = |t: f64| t.exp().clamp(MIN_FACTOR, MAX_FACTOR);
    [f(theta[0]), f(theta[1]), f(theta[2]), fault]
}
