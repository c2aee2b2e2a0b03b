//! `usermm reproduce`: the four experiments at a scale that fits this machine (or the seeds'
//! own with `--scale seed`), the seeds' tables beside ours, and `report/` written with
//! [`crate::report::write_report`].

use std::path::PathBuf;

use anyhow::anyhow;
use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::args::GlobalArgs;

/// `--scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// Sizes that run in a few minutes on 2 cores / 24 GiB.
    Default,
    /// The seeds' own sizes (320 GiB, 100 GiB, 80 GB, 11 000 cgroups).
    Seed,
}

/// One experiment of `reproduce`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Experiment {
    /// Seeds 000/001: parallel free at teardown.
    Bigfree,
    /// Seed 002: per-mm huge zero page reference.
    HugeZero,
    /// Seed 003: munmap under a downgraded lock.
    Munmap,
    /// Seed 004: percpu partial chunk depopulation.
    Percpu,
}

impl Experiment {
    pub const ALL: [Experiment; 4] = [
        Experiment::Bigfree,
        Experiment::HugeZero,
        Experiment::Munmap,
        Experiment::Percpu,
    ];
}

#[derive(Debug, Clone, Args, Serialize)]
pub struct ReproduceArgs {
    /// How big to run.
    #[arg(long, value_name = "SCALE", default_value = "default")]
    pub scale: Scale,
    /// Directory for report.md, results.json and the plots.
    #[arg(long, value_name = "DIR", default_value = "report")]
    pub out: PathBuf,
    /// Run only these experiments (repeatable or a comma list; default: all).
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    pub only: Vec<Experiment>,
}

impl ReproduceArgs {
    /// The experiments to run, in the seeds' order, each once.
    pub fn experiments(&self) -> Vec<Experiment> {
        Experiment::ALL
            .into_iter()
            .filter(|e| self.only.is_empty() || self.only.contains(e))
            .collect()
    }
}

pub fn run(args: &ReproduceArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let _ = (args, g);
    Err(anyhow!("reproduce is not built yet"))
}
