//! `usermm reproduce`: the four experiments at a scale that fits this machine (or the seeds'
//! own with `--scale seed`), the seeds' tables beside ours, and `report/` written with
//! [`crate::report::write_report`].
//!
//! One module per experiment ([`bigfree`], [`huge_zero`], [`munmap`], [`percpu`]), each
//! returning an [`Outcome`] (defined below them, in `experiment.rs`): its report section, a
//! one-line verdict, and its typed record for `results.json`. Every published figure they
//! print, plot, judge by or record comes from `usermm_workloads::seeds`; [`Results`] is the
//! whole `results.json` record (and the `--json` output), one optional field per experiment.

mod bigfree;
mod experiment;
mod huge_zero;
mod munmap;
mod percpu;

pub use experiment::{Outcome, Scale};

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;
use usermm_host::facts::HostFacts;

use crate::args::{GlobalArgs, TimeArgs};
use crate::report::{write_report, Section};

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
    /// Wall or virtual time; without --profile each experiment models its seed's machine.
    #[command(flatten)]
    pub time: TimeArgs,
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

/// One experiment's part of `results.json`.
#[derive(Debug)]
pub enum Record {
    Bigfree(Box<bigfree::BigfreeRecord>),
    HugeZero(Box<huge_zero::HugeZeroRecord>),
    Munmap(Box<munmap::MunmapRecord>),
    Percpu(Box<percpu::PercpuRecord>),
}

impl<R> Outcome<R> {
    /// The same outcome with its record wrapped as one of [`Record`]'s kinds.
    fn into_record(self, wrap: impl FnOnce(Box<R>) -> Record) -> Outcome<Record> {
        Outcome {
            name: self.name,
            section: self.section,
            verdict: self.verdict,
            record: wrap(Box::new(self.record)),
        }
    }
}

/// `results` of `results.json`, and what `--json` prints: the run's scale and wall time, the
/// host's facts, and one record per experiment that ran (named as `--only` names them).
#[derive(Debug, Serialize)]
pub struct Results {
    pub scale: Scale,
    pub wall_seconds: f64,
    pub host_facts: HostFacts,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bigfree: Option<Box<bigfree::BigfreeRecord>>,
    #[serde(rename = "huge-zero", skip_serializing_if = "Option::is_none")]
    pub huge_zero: Option<Box<huge_zero::HugeZeroRecord>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub munmap: Option<Box<munmap::MunmapRecord>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percpu: Option<Box<percpu::PercpuRecord>>,
}

impl Results {
    fn add(&mut self, record: Record) {
        match record {
            Record::Bigfree(r) => self.bigfree = Some(r),
            Record::HugeZero(r) => self.huge_zero = Some(r),
            Record::Munmap(r) => self.munmap = Some(r),
            Record::Percpu(r) => self.percpu = Some(r),
        }
    }
}

pub fn run(args: &ReproduceArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let out = &args.out;
    std::fs::create_dir_all(out)?;
    let t0 = std::time::Instant::now();
    let mut outcomes = Vec::new();
    for e in args.experiments() {
        eprintln!("usermm reproduce: {} ...", e.name());
        let te = std::time::Instant::now();
        let o = match e {
            Experiment::Bigfree => {
                bigfree::run(args.scale, out, &args.time)?.into_record(Record::Bigfree)
            }
            Experiment::HugeZero => {
                huge_zero::run(args.scale, out, &args.time)?.into_record(Record::HugeZero)
            }
            Experiment::Munmap => {
                munmap::run(args.scale, out, &args.time)?.into_record(Record::Munmap)
            }
            Experiment::Percpu => {
                percpu::run(args.scale, out, &args.time)?.into_record(Record::Percpu)
            }
        };
        eprintln!(
            "usermm reproduce: {} done in {:.1} s: {}",
            e.name(),
            te.elapsed().as_secs_f64(),
            o.verdict
        );
        if !g.json {
            println!("== {} ==", o.section.heading);
            for t in &o.section.tables {
                println!("{}", t.render_text());
            }
            println!("verdict: {}\n", o.verdict);
        }
        outcomes.push(o);
    }
    let mut sections = vec![Section {
        heading: "Summary".into(),
        text: outcomes
            .iter()
            .map(|o| format!("- **{}**: {}\n", o.name, o.verdict))
            .collect::<String>()
            + &format!("\nTotal run time: {:.0} s.\n", t0.elapsed().as_secs_f64()),
        ..Default::default()
    }];
    sections.extend(outcomes.iter().map(|o| o.section.clone()));
    let mut results = Results {
        scale: args.scale,
        wall_seconds: t0.elapsed().as_secs_f64(),
        host_facts: usermm_host::facts::facts(),
        bigfree: None,
        huge_zero: None,
        munmap: None,
        percpu: None,
    };
    for o in outcomes {
        results.add(o.record);
    }
    // Through a Value: its map keeps keys sorted, as results.json has always had them.
    let results = serde_json::to_value(&results)?;
    write_report(
        out,
        "usermm: the seed experiments, vanilla vs patched",
        &sections,
        &results,
    )?;
    if g.json {
        super::print_json(&results)?;
    } else {
        println!("report written to {}/report.md", out.display());
    }
    Ok(())
}

impl Experiment {
    pub fn name(self) -> &'static str {
        match self {
            Experiment::Bigfree => "bigfree",
            Experiment::HugeZero => "huge-zero",
            Experiment::Munmap => "munmap",
            Experiment::Percpu => "percpu",
        }
    }
}
