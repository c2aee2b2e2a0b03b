//! `usermm reproduce`: the four experiments at a scale that fits this machine (or the seeds'
//! own with `--scale seed`), the seeds' tables beside ours, and `report/` written with
//! [`crate::report::write_report`].
//!
//! One module per experiment (`bigfree`, `huge_zero`, `munmap`, `percpu`), each
//! returning an [`Outcome`] (defined below them, in `experiment.rs`): its report section, a
//! one-line verdict, and its typed record for `results.json`. Every published figure they
//! print, plot, judge by or record comes from `usermm_workloads::seeds`; [`Results`] is the
//! whole `results.json` record (and the `--json` output), one optional field per experiment.

mod bigfree;
mod experiment;
mod host_check;
mod huge_zero;
mod munmap;
mod percpu;
mod sensitivity;
mod sides;
mod staging;
#[cfg(test)]
mod test_verdicts;
mod validation;
mod will_it_scale;

pub use experiment::{Given, Outcome, Scale};

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
    /// The model checked on this host: calibrate, predict four scenarios, measure them.
    HostCheck,
    /// The seed thread's other runs, predicted with the era factors and no refit (modelled).
    Validation,
    /// A published will-it-scale page_fault1 curve (88 CPUs, Broadwell-EP), predicted with no
    /// refit (modelled; about a minute of host time, 70 s on a 2-core host).
    WillItScale,
}

impl Experiment {
    pub const ALL: [Experiment; 7] = [
        Experiment::Bigfree,
        Experiment::HugeZero,
        Experiment::Munmap,
        Experiment::Percpu,
        Experiment::HostCheck,
        Experiment::Validation,
        Experiment::WillItScale,
    ];
}

#[derive(Debug, Clone, Args, Serialize)]
pub struct ReproduceArgs {
    /// How big to run.
    #[arg(long, value_name = "SCALE", default_value = "default")]
    pub scale: Scale,
    /// Directory for report.md, results.json and the plots: a new directory (made with its
    /// parents), an empty one, or an earlier report (it carries DIR/.usermm-report, which
    /// lists the files usermm wrote: only those are replaced). Any other directory is
    /// refused. A link to a directory is written through; the report appears when complete.
    #[arg(long, value_name = "DIR", default_value = "report")]
    pub out: PathBuf,
    /// Run only these experiments (repeatable or a comma list; default: all).
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    pub only: Vec<Experiment>,
    /// The host check's this-host profile (a file `usermm calibrate` wrote); without it the
    /// run calibrates this host first (about half a minute) and writes DIR/this-host.toml.
    #[arg(long, value_name = "FILE")]
    pub host_profile: Option<PathBuf>,
    /// Test only: the host check at tiny sizes (its figures mean little).
    #[arg(long, hide = true)]
    pub host_check_test_sizes: bool,
    /// Test only: the validation set at tiny sizes (its figures mean little).
    #[arg(long, hide = true)]
    pub validation_test_sizes: bool,
    /// Test only: the will-it-scale curve at tiny sizes (its figures mean little).
    #[arg(long, hide = true)]
    pub will_it_scale_test_sizes: bool,
    /// Faster, less faithful: the modelled bigfree at 16 GiB with its jobs scaled down to
    /// keep the seed's 320 (every per-job cost then comes 20x as often per page; the report
    /// gives the share that costs at max_active 8). Without it the modelled bigfree frees
    /// 64 GiB in the seed's own 1 GiB jobs.
    #[arg(long)]
    pub quick: bool,
    /// After the seeds, run each modelled timing seed again with one input halved and doubled
    /// at a time, and report which three inputs move each headline most (about 9 minutes for
    /// the three timing seeds on a quiet 2-core host, beyond the seeds' own runs; measured
    /// 2026-11-29). Resumable: the points are kept in
    /// DIR/sensitivity/, and a later run into DIR reuses every point found there (delete
    /// that directory to run them afresh).
    #[arg(long)]
    pub sensitivity: bool,
    /// Host threads for the modelled runs that may go side by side (the bigfree table's
    /// rows, the validation set's runs), at least 1; default: the CPUs this process may use.
    /// Each virtual run is deterministic on its own machine: no figure depends on it.
    #[arg(long, value_name = "N", value_parser = parse_jobs)]
    pub jobs: Option<usize>,
    /// Wall or virtual time; without --profile each experiment models its seed's machine.
    #[command(flatten)]
    pub time: TimeArgs,
}

/// `--jobs N`: a whole number of host threads, at least 1.
fn parse_jobs(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("at least 1 host thread".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("expected a number of host threads, got '{s}'")),
    }
}

impl ReproduceArgs {
    /// Host threads for runs that may go side by side: `--jobs`, else the CPUs this process
    /// may use.
    pub fn jobs(&self) -> usize {
        self.jobs.unwrap_or_else(usermm_host::facts::usable_cpus)
    }

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
            text: self.text,
            tables: self.tables,
            plots: self.plots,
            verdict: self.verdict,
            record: wrap(Box::new(self.record)),
        }
    }
}

/// `results` of `results.json`, and what `--json` prints: the run's scale and wall time, the
/// host's facts, and one `sides::ExperimentSides` per experiment that ran (named as `--only` names
/// them): its `modelled` side (virtual time on the seed's machine) and its `measured` side
/// (this host's wall clock), each with its headline figures, its profile and its full record.
#[derive(Debug, Serialize)]
pub struct Results {
    pub scale: Scale,
    /// The run's host time; left out of a virtual-time run, whose every figure is modelled
    /// (two identical runs give the same bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_seconds: Option<f64>,
    pub host_facts: HostFacts,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bigfree: Option<sides::BigfreeSides>,
    #[serde(rename = "huge-zero", skip_serializing_if = "Option::is_none")]
    pub huge_zero: Option<sides::HugeZeroSides>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub munmap: Option<sides::MunmapSides>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percpu: Option<sides::ExperimentSides<sides::NoFigures, percpu::PercpuRecord>>,
    /// `--sensitivity`: each modelled headline against its inputs halved and doubled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sensitivity: Option<Vec<sensitivity::Headline>>,
    /// "The model checked on this host": the this-host profile, the predictions, the
    /// measurements and `rows[]` (`name`, `unit`, `predicted`, `measured`, `error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_check: Option<host_check::HostCheckRecord>,
    /// The validation set: `rows[]` (`name`, `source`, `machine`, `published`, `predicted`,
    /// `unfitted`, `error`, `band`, `unit`, `within`) and each run's verdict, all modelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validation: Option<usermm_workloads::validation::Validation>,
    /// The published page_fault1 curve predicted: `rows[]` (`tasks`, `mode`, `published`,
    /// `predicted`, `error`, `band`, `within`), all modelled on `broadwell-ep-2s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub will_it_scale: Option<usermm_workloads::will_it_scale::curve::CurveRecord>,
    /// The era factors the modelled sides carry (`usermm infer`'s era file: every factor with
    /// its value, its training rows and the run that inferred it), when a modelled side ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub era: Option<usermm::vtime::EraSpec>,
}

impl Results {
    /// The record of a run at `scale` before any experiment: this host's facts alone.
    fn new(scale: Scale) -> Self {
        Results {
            scale,
            wall_seconds: None,
            host_facts: usermm_host::facts::facts(),
            bigfree: None,
            huge_zero: None,
            munmap: None,
            percpu: None,
            host_check: None,
            validation: None,
            will_it_scale: None,
            era: None,
            sensitivity: None,
        }
    }

    fn add(&mut self, kind: sides::SideKind, time: &str, record: Record, scale: Scale) {
        use sides::{SideRecord, *};
        match record {
            Record::Bigfree(r) => self
                .bigfree
                .get_or_insert_with(Default::default)
                .set(kind, SideRecord::new(time, BigfreeFigures::of(&r), r)),
            Record::HugeZero(r) => self
                .huge_zero
                .get_or_insert_with(Default::default)
                .set(kind, SideRecord::new(time, HugeZeroFigures::of(&r), r)),
            Record::Munmap(r) => {
                let size = munmap::size(scale);
                self.munmap
                    .get_or_insert_with(Default::default)
                    .set(kind, SideRecord::new(time, MunmapFigures::of(&r, size), r))
            }
            Record::Percpu(r) => self
                .percpu
                .get_or_insert_with(Default::default)
                .set(kind, SideRecord::new(time, NoFigures {}, r)),
        }
    }

    /// The timing verdict of each seed from its modelled side, when it ran.
    fn modelled_verdicts(&self) -> Vec<(&'static str, String)> {
        let mut v = Vec::new();
        let name = |p: &Option<String>| p.clone().unwrap_or_default();
        if let Some(s) = self.bigfree.as_ref().and_then(|p| p.modelled.as_ref()) {
            v.push((
                "bigfree",
                sides::bigfree_verdict(&s.figures, &name(&s.profile)),
            ));
        }
        if let Some(s) = self.huge_zero.as_ref().and_then(|p| p.modelled.as_ref()) {
            v.push((
                "huge-zero",
                sides::huge_zero_verdict(&s.figures, &name(&s.profile)),
            ));
        }
        if let Some(s) = self.munmap.as_ref().and_then(|p| p.modelled.as_ref()) {
            v.push((
                "munmap",
                sides::munmap_verdict(&s.figures, &name(&s.profile)),
            ));
        }
        v
    }
}

pub fn run(args: &ReproduceArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    // Everything but --sensitivity's points is written into a staging directory in --out and
    // put in place when complete.
    // The host check measures this host: no other measuring command may run meanwhile, and
    // a busy lock is said now, not after the seeds' minutes.
    let _measuring = if args.experiments().contains(&Experiment::HostCheck) {
        if let Some(p) = &args.host_profile {
            host_check::check_host_profile(p)?;
        }
        Some(super::lock_for_measuring("reproduce: host-check")?)
    } else {
        None
    };
    let mut staging = staging::Staging::begin(&args.out)?;
    let out = &staging.dir().to_path_buf();
    let t0 = std::time::Instant::now();
    let mut results = Results::new(args.scale);
    let mut sections = Vec::new();
    let mut verdicts = Vec::new();
    for e in args.experiments() {
        if e.after_the_seeds() {
            continue; // below
        }
        for (kind, time) in sides::sides(&args.time) {
            // Percpu's figures are sizes: no era factor prices them.
            if kind == sides::SideKind::Unfitted && e == Experiment::Percpu {
                continue;
            }
            let te = std::time::Instant::now();
            let o = run_seed(e, kind, &time, args, out)?;
            eprintln!(
                "usermm reproduce: {} ({}) done in {:.1} s: {}",
                e.name(),
                kind.name(),
                te.elapsed().as_secs_f64(),
                o.verdict
            );
            let (section, record, verdict) =
                o.into_parts(format!("{} — {}", e.heading(), kind.name()));
            print_section(g, &section, Some(&verdict));
            verdicts.push((e.name(), kind, verdict));
            let time_label = record_time(&record);
            results.add(kind, &time_label, record, args.scale);
            sections.push(section);
        }
    }
    if verdicts
        .iter()
        .any(|(_, k, _)| *k == sides::SideKind::Modelled)
    {
        results.era = usermm::vtime::Profile::builtin(usermm_workloads::bigfree::SEED_PROFILE)
            .ok()
            .and_then(|p| p.era().map(|e| e.spec.clone()));
    }
    let comparison = sides::comparison(
        out,
        results.bigfree.as_ref(),
        results.huge_zero.as_ref(),
        results.munmap.as_ref(),
    )?;
    // The model checked on this host: after the comparison, before the experiments' sections.
    let (host_section, host_verdict) = run_host_check(args, out, g, &mut results)?.unzip();
    let [validation, wis] = run_predicted_sets(args, g, &mut results)?;
    let (validation_section, validation_verdict) = validation.unzip();
    let (wis_section, wis_verdict) = wis.unzip();
    let sensitivity_section = if args.sensitivity {
        let ran = |e: &str| {
            verdicts
                .iter()
                .any(|(n, k, _)| *n == e && *k == sides::SideKind::Modelled)
        };
        let others: Vec<&str> = ["huge-zero", "munmap"]
            .into_iter()
            .filter(|e| ran(e))
            .collect();
        eprintln!("usermm reproduce: sensitivity (each input halved and doubled) ...");
        let te = std::time::Instant::now();
        let (section, headlines) =
            sensitivity::run(&mut staging, args.quick, ran("bigfree"), &others)?;
        eprintln!(
            "usermm reproduce: sensitivity done in {:.1} s",
            te.elapsed().as_secs_f64()
        );
        print_section(g, &section, None);
        results.sensitivity = Some(headlines);
        Some(section)
    } else {
        None
    };
    let modelled = results.modelled_verdicts();
    let modelled_only = args.time.is_virtual();
    let summary = summary_text(
        &results,
        &modelled,
        &verdicts,
        &[
            ("validation** (predicted, no refit)", &validation_verdict),
            (
                "will-it-scale** (a published curve, predicted)",
                &wis_verdict,
            ),
            (
                "host check** (the this-host profile against this host)",
                &host_verdict,
            ),
        ],
        (!modelled_only).then(|| t0.elapsed().as_secs_f64()),
    );
    if !g.json {
        println!("== {} ==", comparison.heading);
        for t in &comparison.tables {
            println!("{}", t.render_text());
        }
        for (name, v) in &modelled {
            println!("{name}: {v}");
        }
    }
    let mut all = vec![
        Section {
            heading: "Summary".into(),
            text: summary,
            ..Default::default()
        },
        comparison,
    ];
    all.extend(host_section);
    all.extend(validation_section);
    all.extend(wis_section);
    all.extend(sensitivity_section);
    all.extend(sections);
    results.wall_seconds = (!modelled_only).then(|| t0.elapsed().as_secs_f64());
    // Through a Value: its map keeps keys sorted, as results.json has always had them.
    let results = serde_json::to_value(&results)?;
    write_report(
        out,
        "usermm: the seed experiments, vanilla vs patched",
        &all,
        &results,
    )?;
    staging.commit()?;
    if g.json {
        super::print_json(&results)?;
    } else {
        println!("report written to {}/report.md", args.out.display());
    }
    Ok(())
}

/// One seed experiment on one side, its plots in that side's own directory (report.md links
/// them).
fn run_seed(
    e: Experiment,
    kind: sides::SideKind,
    time: &TimeArgs,
    args: &ReproduceArgs,
    out: &std::path::Path,
) -> anyhow::Result<Outcome<Record>> {
    let dir = out.join(kind.name());
    // `out` is the staging directory, which a Ctrl-C removes whole: made under its lock.
    usermm_host::files::cleanup::create_dir_all_within(&dir)?;
    eprintln!("usermm reproduce: {} ({}) ...", e.name(), kind.name());
    let given = Given {
        scale: args.scale,
        quick: args.quick,
        out: &dir,
        time,
        jobs: args.jobs(),
    };
    Ok(match e {
        Experiment::Bigfree => bigfree::run(&given)?.into_record(Record::Bigfree),
        Experiment::HugeZero => huge_zero::run(&given)?.into_record(Record::HugeZero),
        Experiment::Munmap => munmap::run(&given)?.into_record(Record::Munmap),
        Experiment::Percpu => percpu::run(&given)?.into_record(Record::Percpu),
        Experiment::HostCheck | Experiment::Validation | Experiment::WillItScale => {
            unreachable!("run after the seeds' experiments")
        }
    })
}

/// The validation set and the will-it-scale curve, each when asked for: its section and
/// verdict (its record in `results`).
fn run_predicted_sets(
    args: &ReproduceArgs,
    g: &GlobalArgs,
    results: &mut Results,
) -> anyhow::Result<[Option<(Section, String)>; 2]> {
    let mut out = [None, None];
    if args.experiments().contains(&Experiment::Validation) {
        let (section, verdict, record) =
            validation::run(args.scale, args.validation_test_sizes, args.jobs())?;
        print_section(g, &section, Some(&verdict));
        results.validation = Some(record);
        out[0] = Some((section, verdict));
    }
    if args.experiments().contains(&Experiment::WillItScale) {
        let (section, verdict, record) = will_it_scale::run(args.will_it_scale_test_sizes)?;
        print_section(g, &section, Some(&verdict));
        results.will_it_scale = Some(record);
        out[1] = Some((section, verdict));
    }
    Ok(out)
}

/// `reproduce`'s host check, when asked for: its section and verdict (its record in `results`).
fn run_host_check(
    args: &ReproduceArgs,
    out: &std::path::Path,
    g: &GlobalArgs,
    results: &mut Results,
) -> anyhow::Result<Option<(Section, String)>> {
    if !args.experiments().contains(&Experiment::HostCheck) {
        return Ok(None);
    }
    eprintln!("usermm reproduce: host-check (calibrate, predict, measure) ...");
    let te = std::time::Instant::now();
    let opts = if args.host_check_test_sizes {
        usermm_workloads::host_check::HostCheckOpts::small()
    } else {
        usermm_workloads::host_check::HostCheckOpts::sized_for(crate::args::host_memory_budget())
    };
    let (section, verdict, record) =
        host_check::run(out, &args.out, args.host_profile.as_deref(), &opts)?;
    eprintln!(
        "usermm reproduce: host-check done in {:.1} s: {verdict}",
        te.elapsed().as_secs_f64()
    );
    print_section(g, &section, Some(&verdict));
    results.host_check = Some(record);
    Ok(Some((section, verdict)))
}

/// The report's summary: each timing seed's verdict, the era factors the modelled columns
/// carry, every side's verdict, then `extra` (`(bold name and gloss, verdict)`, when run) and
/// the total run time of a run that measured.
fn summary_text(
    results: &Results,
    modelled: &[(&'static str, String)],
    verdicts: &[(&'static str, sides::SideKind, String)],
    extra: &[(&str, &Option<String>)],
    total_s: Option<f64>,
) -> String {
    let mut summary = String::new();
    for (name, v) in modelled {
        summary += &format!(
            "- **{name}** (timing, judged on the modelled column's predicted figures): {v}\n"
        );
    }
    if let Some(era) = &results.era {
        summary += &format!(
            "\nThe modelled columns carry the era factors of `{}` (docs/profiles.md, \"Era \
             factors\"; `usermm infer`): {}. The unfitted columns are the same model with every \
             factor 1.\n",
            era.name,
            usermm::vtime::ERA_FACTORS
                .iter()
                .filter_map(|f| era
                    .inputs
                    .get(f.input)
                    .map(|i| format!("{} {}", f.input, i.value)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for (name, kind, v) in verdicts {
        summary += &format!("- {name}, {}: {v}\n", kind.name());
    }
    for (name, v) in extra {
        if let Some(v) = v {
            summary += &format!("- **{name}: {v}\n");
        }
    }
    if let Some(t) = total_s {
        summary += &format!("\nTotal run time: {t:.0} s.\n");
    }
    summary
}

/// Print a section's tables and its verdict on stdout (not with `--json`).
fn print_section(g: &GlobalArgs, section: &Section, verdict: Option<&str>) {
    if g.json {
        return;
    }
    println!("== {} ==", section.heading);
    for t in &section.tables {
        println!("{}", t.render_text());
    }
    if let Some(v) = verdict {
        println!("verdict: {v}\n");
    }
}

/// The time label a record carries (`modelled (profile NAME)` or `measured (this host)`).
fn record_time(r: &Record) -> String {
    match r {
        Record::Bigfree(r) => r.time.clone(),
        Record::HugeZero(r) => r.time.clone(),
        Record::Munmap(r) => r.time.clone(),
        Record::Percpu(r) => r.time.clone(),
    }
}

impl Experiment {
    /// Run after the seeds' experiments, each by a function of its own, not by `run_seed`.
    fn after_the_seeds(self) -> bool {
        matches!(
            self,
            Experiment::HostCheck | Experiment::Validation | Experiment::WillItScale
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Experiment::Bigfree => "bigfree",
            Experiment::HugeZero => "huge-zero",
            Experiment::Munmap => "munmap",
            Experiment::Percpu => "percpu",
            Experiment::HostCheck => "host-check",
            Experiment::Validation => "validation",
            Experiment::WillItScale => "will-it-scale",
        }
    }

    /// The heading of the experiment's section of `report.md` (a seed's gets its side's name
    /// after it).
    pub fn heading(self) -> &'static str {
        match self {
            Experiment::Bigfree => "Seeds 000/001: parallel free at teardown",
            Experiment::HugeZero => "Seed 002: huge zero page reference per mm",
            Experiment::Munmap => "Seed 003: munmap under a downgraded mmap lock",
            Experiment::Percpu => "Seed 004: percpu partial chunk depopulation",
            Experiment::HostCheck => "The model checked on this host",
            Experiment::Validation => {
                "Validation: the seed thread's other runs, predicted (no refit)"
            }
            Experiment::WillItScale => {
                "will-it-scale page_fault1: a published curve, predicted (no refit)"
            }
        }
    }
}
