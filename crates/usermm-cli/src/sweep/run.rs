//! Running points: each one a child process of the usermm binary with `--json`, up to `jobs`
//! at a time, its line appended to the output as it finishes.
//!
//! A child is the whole isolation a point needs: its own address space, its own engine, its
//! own clock, so one point cannot disturb another and a virtual-time point gives the same
//! record whichever worker ran it, beside whichever others. Workers (threads, one per job)
//! take the next point from a shared counter and send what their child printed to the calling
//! thread, which alone writes the output, so lines never interleave.
//!
//! A child that fails with status 2 found a mistake in its arguments (an unknown cost key, a
//! profile that does not load): every point would share it, so the sweep stops taking points
//! and reports it as a usage error. Any other failure is that point's alone: it is reported,
//! writes no line (so the next run tries it again) and the others go on.
//!
//! A child is told to end with the sweep (`usermm_host::die_with_parent`: SIGTERM when the
//! worker thread that started it ends, as it does when the sweep dies): after a Ctrl-C or a
//! `kill` of the sweep no point runs on, orphaned, writing reports nobody reads. Nor does a
//! worker start another point once the signal has come
//! (`usermm_host::files::cleanup::interrupted`).

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use super::grid::{describe, Column, Point};
use super::store::{Output, PointLine};
use super::table::default_columns;
use crate::args::UsageError;
use crate::report::Progress;

/// How to run a set of points.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The usermm binary (usually `std::env::current_exe()`).
    pub exe: PathBuf,
    /// The children's working directory (the grid file's: relative paths in it resolve there).
    pub cwd: PathBuf,
    /// Points run at once.
    pub jobs: usize,
    /// The output (JSON lines), appended to, and how messages name it (`--out PATH`).
    pub out: PathBuf,
    pub out_label: String,
    /// The grid's identity and number of points, written in each line.
    pub grid_id: String,
    pub grid_len: usize,
    /// The grid's columns (empty: each record's [`default_columns`]).
    pub columns: Vec<Column>,
}

impl RunOptions {
    /// The options that run `grid`'s points with this binary, `jobs` at a time, into `out`.
    pub fn for_grid(grid: &super::Grid, out: PathBuf, jobs: usize) -> anyhow::Result<Self> {
        let exe = std::env::current_exe()
            .map_err(|e| anyhow::anyhow!("cannot find the usermm binary: {e}"))?;
        Ok(RunOptions {
            exe,
            cwd: grid.dir(),
            jobs,
            out_label: usermm_host::files::label("--out", &out),
            out,
            grid_id: grid.id(),
            grid_len: grid.len(),
            columns: grid.columns.clone(),
        })
    }
}

/// A point that failed.
#[derive(Debug, Clone)]
pub struct Failure {
    pub index: usize,
    pub coords: Vec<(String, String)>,
    /// The child's error line (or how it ended).
    pub message: String,
}

/// What [`run_points`] did.
#[derive(Debug, Default)]
pub struct RunSummary {
    /// Points whose line the output held already.
    pub reused: usize,
    /// Points run now (and written).
    pub ran: usize,
    pub failed: Vec<Failure>,
    /// Lines of the output that were skipped as incomplete or unreadable.
    pub skipped: usize,
}

/// What a child ended with.
enum Outcome {
    Done(Box<PointLine>),
    Failed {
        status: Option<i32>,
        message: String,
    },
}

/// The last `usermm: error:` line of a child's stderr (or its last line), without the prefix.
fn child_error(stderr: &[u8], status: std::process::ExitStatus) -> String {
    let text = String::from_utf8_lossy(stderr);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with("usermm: error: "))
        .or_else(|| text.lines().rev().find(|l| !l.trim().is_empty()));
    match line {
        Some(l) => l.strip_prefix("usermm: error: ").unwrap_or(l).to_string(),
        None => format!("ended with {status}"),
    }
}

fn run_one(opts: &RunOptions, p: &Point) -> Outcome {
    let mut cmd = Command::new(&opts.exe);
    cmd.arg("--json")
        .args(&p.args)
        .current_dir(&opts.cwd)
        .stdin(Stdio::null());
    // A point ends with the sweep (only the sweep writes its line: an orphan's work is lost).
    usermm_host::die_with_parent(&mut cmd);
    let out = cmd.output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            return Outcome::Failed {
                status: None,
                message: format!("cannot run {}: {e}", opts.exe.display()),
            }
        }
    };
    if !out.status.success() {
        return Outcome::Failed {
            status: out.status.code(),
            message: child_error(&out.stderr, out.status),
        };
    }
    match serde_json::from_slice::<serde_json::Value>(&out.stdout) {
        Ok(record) => {
            let columns = if opts.columns.is_empty() {
                default_columns(&record)
            } else {
                opts.columns.clone()
            };
            Outcome::Done(Box::new(PointLine::new(
                &opts.grid_id,
                opts.grid_len,
                p,
                columns,
                record,
            )))
        }
        Err(e) => Outcome::Failed {
            status: None,
            message: format!("its output is not one JSON record: {e}"),
        },
    }
}

/// Run every point of `points` whose line `output` did not hold when opened; a progress bar
/// counts them on stderr (on a terminal). Errors: the output cannot be written, or a child
/// found a mistake in the arguments ([`UsageError`]).
pub fn run_points(
    points: &[Point],
    opts: &RunOptions,
    output: &mut Output,
) -> anyhow::Result<RunSummary> {
    let done: HashSet<&str> = output
        .earlier
        .lines
        .iter()
        .map(|(_, l)| l.id.as_str())
        .collect();
    let todo: Vec<&Point> = points
        .iter()
        .filter(|p| !done.contains(p.id.as_str()))
        .collect();
    let mut summary = RunSummary {
        reused: points.len() - todo.len(),
        skipped: output.earlier.skipped,
        ..RunSummary::default()
    };
    if todo.is_empty() {
        return Ok(summary);
    }
    let bar = Progress::bar(todo.len() as u64, "sweep");
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let mut usage_error = None;
    let mut write_error = None;
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel::<(usize, Outcome)>();
        for _ in 0..opts.jobs.clamp(1, todo.len()) {
            let tx = tx.clone();
            let (todo, next, stop) = (&todo, &next, &stop);
            s.spawn(move || loop {
                // After a Ctrl-C no point starts: the run is about to die of it.
                if stop.load(Ordering::Relaxed) || usermm_host::files::cleanup::interrupted() {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(p) = todo.get(i) else { break };
                if tx.send((i, run_one(opts, p))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (i, outcome) in rx {
            let p = todo[i];
            match outcome {
                Outcome::Done(line) => {
                    if write_error.is_some() {
                        continue;
                    }
                    match output.append(&line) {
                        Ok(()) => summary.ran += 1,
                        Err(e) => {
                            write_error = Some(e);
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                }
                Outcome::Failed { status, message } => {
                    let failure = Failure {
                        index: p.index,
                        coords: p.coords.clone(),
                        message,
                    };
                    if status == Some(2) && usage_error.is_none() {
                        stop.store(true, Ordering::Relaxed);
                        usage_error = Some(failure);
                    } else {
                        summary.failed.push(failure);
                    }
                }
            }
            bar.inc(1);
        }
    });
    bar.finish();
    if let Some(e) = write_error {
        return Err(e);
    }
    if let Some(f) = usage_error {
        return Err(UsageError(format!(
            "point {} ({}): {}",
            f.index,
            describe(&f.coords),
            f.message
        ))
        .into());
    }
    summary.failed.sort_by_key(|f| f.index);
    Ok(summary)
}
