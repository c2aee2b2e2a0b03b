//! What every experiment of `reproduce` is given and gives back, below the experiments and
//! the module that runs them: the [`Scale`] to run at (a seed's experiment is [`Given`] it
//! with the rest of its inputs), and an [`Outcome`] — the body of the
//! report section, the one-line verdict, and the experiment's own typed record for
//! `results.json`. The section's heading and the experiment's name are not the experiment's to
//! write: they are [`super::Experiment`]'s, set where its outcome is filed.

use std::path::{Path, PathBuf};

use clap::ValueEnum;
use serde::Serialize;

use crate::args::TimeArgs;
use crate::report::{Section, Table};

/// `--scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// Sizes that run in a few minutes on 2 cores / 24 GiB.
    Default,
    /// The seeds' own sizes (320 GiB, 100 GiB, 80 GB, 11 000 cgroups).
    Seed,
}

/// What a seed's experiment is given: the scale, `--quick`, the directory of its side (for its
/// plots) and the clock it runs on. Each uses what it needs (huge-zero and percpu run the
/// seed's own size at every scale).
#[derive(Debug, Clone, Copy)]
pub struct Given<'a> {
    pub scale: Scale,
    pub quick: bool,
    pub out: &'a Path,
    pub time: &'a TimeArgs,
    /// Host threads for virtual runs that may go side by side (`--jobs`).
    pub jobs: usize,
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

    /// Its section of the report under `heading`, its record and its verdict.
    pub fn into_parts(self, heading: String) -> (Section, R, String) {
        let section = Section {
            heading,
            text: self.text,
            tables: self.tables,
            plots: self.plots,
        };
        (section, self.record, self.verdict)
    }
}
