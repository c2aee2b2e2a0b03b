//! What every experiment of `reproduce` is given and gives back, below the experiments and
//! the module that runs them: the [`Scale`] to run at, and an [`Outcome`] — the body of the
//! report section, the one-line verdict, and the experiment's own typed record for
//! `results.json`. The section's heading and the experiment's name are not the experiment's to
//! write: they are [`super::Experiment`]'s, set where its outcome is filed.

use std::path::PathBuf;

use clap::ValueEnum;
use serde::Serialize;

use crate::report::Table;

/// `--scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// Sizes that run in a few minutes on 2 cores / 24 GiB.
    Default,
    /// The seeds' own sizes (320 GiB, 100 GiB, 80 GB, 11 000 cgroups).
    Seed,
}

/// What one experiment gives the report: its section's prose, tables and plots, its record `R`
/// (with `vanilla`, `patched`, `ratio` and the seed's figures) and a one-line verdict.
#[derive(Debug)]
pub struct Outcome<R> {
    pub text: String,
    pub tables: Vec<Table>,
    pub plots: Vec<PathBuf>,
    pub record: R,
    pub verdict: String,
}

impl<R> Outcome<R> {
    pub fn new(
        text: String,
        tables: Vec<Table>,
        plots: Vec<PathBuf>,
        record: R,
        verdict: String,
    ) -> Self {
        Self {
            text,
            tables,
            plots,
            record,
            verdict,
        }
    }
}
