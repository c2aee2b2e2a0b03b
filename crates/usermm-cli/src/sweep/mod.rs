//! Sweeps: one usermm command over a grid of arguments, each point its own run.
//!
//! A sensitivity study is many runs of one command that differ in a few arguments — a cost
//! scaled up and down, a workqueue width, a profile. A [`Grid`] names the command and those
//! axes ([`grid`] holds the file format); its points are every combination. Each point runs
//! as a child process of the usermm binary with `--json` ([`run`]), so points are isolated
//! from each other and, in virtual time, deterministic; its record is appended as one JSON
//! line to an output ([`store`]) under the point's identity, a stable hash of its arguments.
//! That identity is what makes a sweep resumable — a point whose line is there is not run
//! again, a point cut off midway left no line and is — and what lets the outputs of many
//! machines be merged: [`emit`] writes the grid as a GNU parallel job list or a Slurm array
//! script, each job one point writing its own file, and [`merge`] reads them back. Either way
//! [`table`] draws the same table, one row per point, the chosen figures as columns.
//!
//! This is a library so that other commands (`reproduce`'s sensitivity tables) can run grids:
//! [`Grid::parse`] or a [`Grid`] built in code, [`Grid::points`], then [`run_grid`]. It uses
//! [`crate::args`] and [`crate::report`] and no command; `usermm sweep` is
//! [`crate::cmd::sweep`].

pub mod emit;
pub mod grid;
pub mod run;
pub mod store;
pub mod table;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use grid::{describe, stable_hash, Axis, AxisKind, AxisValue, Column, Grid, Point};
pub use run::{run_points, Failure, RunOptions, RunSummary};
pub use store::PointLine;
pub use table::{default_columns, SweepTable};

use crate::args::{usage, UsageError};

/// A finished sweep: what ran and the table of the points asked for.
#[derive(Debug)]
pub struct Sweep {
    pub summary: RunSummary,
    pub table: SweepTable,
}

/// Run the points of `grid` given (all of [`Grid::points`], or some) that `opts.out` does not
/// hold yet, then draw their table from the output. The output is this run's alone while it
/// runs ([`store::Output`]).
pub fn run_grid(grid: &Grid, points: &[Point], opts: &RunOptions) -> anyhow::Result<Sweep> {
    let mut output = store::Output::open(&opts.out_label, &opts.out)?;
    // An edited or forged line is refused before any point runs, not after.
    store::unique(vec![(opts.out_label.clone(), output.earlier.clone())])?;
    let summary = run_points(points, opts, &mut output)?;
    let loaded = output.load()?;
    let table = table_of(grid, points, &opts.out_label, loaded)?;
    Ok(Sweep { summary, table })
}

/// The table of `points` from the lines `loaded` from an output holds for them (matched by
/// id; their place and coordinates are the grid's, their figures the grid's columns).
fn table_of(
    grid: &Grid,
    points: &[Point],
    label: &str,
    loaded: store::Loaded,
) -> anyhow::Result<SweepTable> {
    let by_id: HashMap<&str, &Point> = points.iter().map(|p| (p.id.as_str(), p)).collect();
    let (lines, _) = store::unique(vec![(label.to_string(), loaded)])?;
    let lines = lines
        .into_iter()
        .filter_map(|mut l| {
            let p = by_id.get(l.id.as_str())?;
            l.index = p.index;
            l.point = p.coords.clone();
            Some(l)
        })
        .collect();
    Ok(SweepTable::new(
        table::rows_from_lines(lines, &grid.columns),
        grid.len(),
    ))
}

/// What [`merge`] read.
#[derive(Debug)]
pub struct Merged {
    pub table: SweepTable,
    /// The files read.
    pub files: usize,
    /// Lines skipped as incomplete or unreadable, and lines of a point seen already.
    pub skipped: usize,
    pub duplicates: usize,
}

/// The table of the points in the outputs `paths` (local outputs, job files, or directories
/// of job files, of one grid), each point once, with the columns its line names.
pub fn merge(paths: &[PathBuf]) -> anyhow::Result<Merged> {
    let mut skipped = 0;
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            files.extend(jsonl_in(p)?);
        } else {
            // Anything else is read as a file: a FIFO or a device is refused unread.
            files.push(p.clone());
        }
    }
    let mut sources = Vec::new();
    for p in &files {
        let label = usermm_host::files::label("--merge", p);
        let bytes = usermm_host::files::read_regular(&label, p).map_err(|e| {
            if e.is_not_found() {
                UsageError(format!("{label}: no such file")).into()
            } else {
                anyhow::Error::from(e)
            }
        })?;
        let loaded = store::parse(&bytes);
        skipped += loaded.skipped;
        sources.push((p.display().to_string(), loaded));
    }
    let (lines, duplicates) = store::unique(sources)?;
    let mut grids: Vec<&str> = lines.iter().map(|l| l.grid.as_str()).collect();
    grids.sort_unstable();
    grids.dedup();
    if grids.len() > 1 {
        return usage(format!(
            "--merge: the outputs come from {} different grids ({}); merge one grid's at a time \
             (or draw a local output's table with `usermm sweep GRID`)",
            grids.len(),
            grids.join(", ")
        ));
    }
    let points = lines.iter().map(|l| l.points).max().unwrap_or(0);
    Ok(Merged {
        table: SweepTable::new(table::rows_from_lines(lines, &[]), points),
        files: files.len(),
        skipped,
        duplicates,
    })
}

/// The `*.jsonl` files in `dir`, sorted by name.
fn jsonl_in(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", dir.display()))?;
    let mut files = Vec::new();
    for e in entries {
        let p = e
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", dir.display()))?
            .path();
        if p.is_file() && p.extension().is_some_and(|x| x == "jsonl") {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}
