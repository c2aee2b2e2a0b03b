//! `usermm sweep`: run a grid of usermm command lines over the local cores, or write it out
//! for GNU parallel or Slurm, and print the merged table.
//!
//! The work is [`crate::sweep`]'s; this module is the command line around it: where the output
//! goes by default (`GRID.jsonl` next to the grid file; `GRID.points/` for emitted jobs), how
//! many points run at once (`-j`, default the CPUs this process may use), and what is printed
//! — the table as text or, with `--json`, as one JSON value with what ran and what was reused.
//! Points are vetted by the parser the CLI hands in ([`run`]'s `check`), so a flag the command
//! does not take is one usage error before anything runs.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::args::{usage, GlobalArgs};
use crate::sweep::{self, emit::Jobs, Grid, RunOptions, SweepTable};

/// The grid file's format, shown by `usermm sweep --help`.
pub const GRID_HELP: &str = r#"Grid file (TOML; docs/sweep.md):

  command = ["bigfree", "{size}", "--time", "virtual", "--seed-only"]
  [axes]                                 # points: every combination, first axis outermost
  "{size}" = ["64M", "128M"]             # fills {size} in the command
  "--max-active" = [1, 2, 4]             # any flag of the command: --max-active=1
  "--scale-cost zap_pte" = [0.5, 1, 2]   # --scale-cost zap_pte=0.5 (also "--set KEY")
  "pcp.batch" = [31, 63]                 # an engine key: --set pcp.batch=31
  "--exit" = [false, true]               # a switch: left out, given
  [columns]                              # header = dotted path in the command's --json
  "patched (s)" = "bigfree.patched.time_s"
  ratio = "bigfree.ratio"

Without [columns], the numbers at most two keys deep of each record. Paths in the grid are
relative to its directory. Each point runs as `usermm --json ARGS`; its line (with its id, a
hash of ARGS) is appended to the output, and a run again skips the points already there.
Points on the wall clock measure this host and disturb each other: run those with -j 1."#;

/// `--emit`: the grid as work for other machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EmitArg {
    /// A GNU parallel job list: one command line per point (`parallel < jobs`).
    Parallel,
    /// A Slurm array script (`sbatch script`): the point from SLURM_ARRAY_TASK_ID.
    Slurm,
}

#[derive(Debug, Clone, Args, Serialize)]
pub struct SweepArgs {
    /// The grid file (TOML, below).
    #[arg(value_name = "FILE", required_unless_present = "merge")]
    pub file: Option<PathBuf>,
    /// Points run at once (default: the CPUs this process may use).
    #[arg(short = 'j', long, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
    /// The output: JSON lines, appended (default: FILE with .jsonl; made, with its
    /// directory, if missing). Only a regular file that is a sweep output already is appended
    /// to, never through a link, by one sweep at a time. With --emit, the directory the jobs
    /// write into, one file per point (default: FILE with .points).
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,
    /// Print the grid as jobs for other machines instead of running it.
    #[arg(long, value_name = "KIND", conflicts_with_all = ["point", "jobs"])]
    pub emit: Option<EmitArg>,
    /// Run only point INDEX (from 0; what each emitted job does).
    #[arg(long, value_name = "INDEX")]
    pub point: Option<usize>,
    /// Print the table of the points in these outputs (job files, local outputs, or
    /// directories of job files).
    #[arg(long, value_name = "OUT", num_args = 1..,
          conflicts_with_all = ["file", "jobs", "out", "emit", "point"])]
    pub merge: Vec<PathBuf>,
}

fn print_table(
    g: &GlobalArgs,
    table: &SweepTable,
    title: &str,
    extra: serde_json::Value,
) -> anyhow::Result<()> {
    if g.json {
        let mut v = table.to_json();
        if let (Some(obj), serde_json::Value::Object(more)) = (v.as_object_mut(), extra) {
            obj.extend(more);
        }
        super::print_json(&v)
    } else {
        Ok(super::print(&table.render_text(title))?)
    }
}

/// Run `usermm sweep`; `check` vets one point's arguments (the CLI's parser) and says why not.
pub fn run(
    a: &SweepArgs,
    g: &GlobalArgs,
    check: &dyn Fn(&[String]) -> Result<(), String>,
) -> anyhow::Result<()> {
    if !a.merge.is_empty() {
        return merge(a, g);
    }
    let Some(file) = &a.file else {
        return usage("give a grid FILE, or --merge OUT...");
    };
    let grid = Grid::load(file)?;
    let points = grid.points(check)?;
    if let Some(kind) = a.emit {
        let dir = a
            .out
            .clone()
            .unwrap_or_else(|| file.with_extension("points"));
        let label = usermm_host::files::label("--out", &dir);
        if let Some(m) = usermm_host::files::metadata(&label, &dir)?.filter(|m| !m.is_dir()) {
            return usage(format!(
                "--out {}: is {}, not a directory: with --emit it names the directory the jobs \
                 write their outputs into",
                dir.display(),
                usermm_host::files::kind(m.file_type())
            ));
        }
        let exe = std::env::current_exe()
            .map_err(|e| anyhow::anyhow!("cannot find the usermm binary: {e}"))?;
        let jobs = Jobs::new(&exe, file, &dir)?;
        let text = match kind {
            EmitArg::Parallel => jobs.parallel(points.len())?,
            EmitArg::Slurm => jobs.slurm(points.len())?,
        };
        return Ok(super::print(&text)?);
    }
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| file.with_extension("jsonl"));
    if std::path::absolute(&out).ok() == std::path::absolute(file).ok() {
        return usage(format!(
            "--out {}: that is the grid file; name another output",
            out.display()
        ));
    }
    let chosen = match a.point {
        Some(i) => match points.get(i) {
            Some(p) => vec![p.clone()],
            None => {
                return usage(format!(
                    "--point {i}: the grid has {} points (0 to {})",
                    points.len(),
                    points.len() - 1
                ))
            }
        },
        None => points,
    };
    let jobs = match a.jobs {
        Some(n) => usize::from(n),
        None => usermm_host::facts::usable_cpus(),
    };
    let opts = RunOptions::for_grid(&grid, out.clone(), jobs)?;
    let done = sweep::run_grid(&grid, &chosen, &opts)?;
    let s = &done.summary;
    let title = format!(
        "sweep {}: {} of {} points in {} ({} run now, {} from before)",
        crate::args::visible(&grid.command.join(" ")),
        done.table.rows.len(),
        grid.len(),
        out.display(),
        s.ran,
        s.reused
    );
    let extra = serde_json::json!({ "ran": s.ran, "reused": s.reused, "out": out });
    if a.point.is_some() {
        // One job of many: its row alone, nothing missing to report.
        let mut t = done.table.clone();
        t.missing.clear();
        print_table(g, &t, &title, extra)?;
    } else {
        print_table(g, &done.table, &title, extra)?;
    }
    if s.skipped > 0 {
        eprintln!(
            "usermm: note: {} line(s) of {} skipped (incomplete or not a point's line)",
            s.skipped,
            out.display()
        );
    }
    if let Some(first) = s.failed.first() {
        anyhow::bail!(
            "{} of {} points failed (run again to retry them); point {} ({}): {}",
            s.failed.len(),
            chosen.len(),
            first.index,
            sweep::describe(&first.coords),
            first.message
        );
    }
    Ok(())
}

fn merge(a: &SweepArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let m = sweep::merge(&a.merge)?;
    let t = &m.table;
    let title = format!(
        "sweep merged from {} file(s): {} of {} points",
        m.files,
        t.rows.len(),
        t.points
    );
    print_table(g, t, &title, serde_json::json!({}))?;
    if m.skipped > 0 {
        eprintln!(
            "usermm: note: {} line(s) skipped (incomplete or not a point's line)",
            m.skipped
        );
    }
    if !t.missing.is_empty() {
        let shown: Vec<String> = t.missing.iter().take(20).map(usize::to_string).collect();
        let more = if t.missing.len() > 20 { ", ..." } else { "" };
        eprintln!(
            "usermm: note: {} of {} points missing: {}{more}",
            t.missing.len(),
            t.points,
            shown.join(", ")
        );
    }
    Ok(())
}
