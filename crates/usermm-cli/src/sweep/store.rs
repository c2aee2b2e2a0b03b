//! The output of a sweep: one JSON line per finished point ([`PointLine`]), appended.
//!
//! A line is written only once its point's run has finished, with one `write_all` of the whole
//! line and its newline, so a line is either complete or the unterminated tail a killed sweep
//! left. [`parse`] reads every complete line that parses and skips the rest; [`Output::open`]
//! cuts such a tail off before appending, so that the next line starts on a line of its own.
//! A point is done when a line with its id is there: that is all resume needs, and it lets any
//! number of outputs (one per machine, one per job) be merged by id.
//!
//! The output is the user's file as much as ours, so [`Output::open`] takes it through
//! `usermm_host::files::open_locked`: never through a link, only a regular file (`/dev/zero`
//! or a FIFO is refused unread), never truncated but for that tail, and `flock`ed, so that a
//! second sweep into the same output is refused instead of running every point again. An
//! existing file is appended to only when it is a sweep output already (empty, or its first
//! line starts as a point's line does): a file of the user's named by mistake is refused
//! untouched.
//!
//! Each line carries the whole `--json` record of its run, so the table can be drawn again
//! with other columns without running anything. [`unique`] keeps each point once and refuses
//! a line whose id is not the hash of its arguments, or two different records of one id: an
//! edited or forged line, which a table must not pick silently.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use usermm_host::files;

use super::grid::stable_hash;
use crate::args::usage;

use serde::{Deserialize, Serialize};

use super::grid::{Column, Point};

/// One finished point, as one line of the output.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PointLine {
    /// The point's identity: the stable hash of `args`.
    pub id: String,
    /// The identity of the grid it was run from.
    pub grid: String,
    /// Its place in that grid, and the grid's number of points.
    pub index: usize,
    pub points: usize,
    /// (axis, value) pairs in axis order.
    pub point: Vec<(String, String)>,
    /// The usermm arguments it ran (without `--json`).
    pub args: Vec<String>,
    /// The columns the grid chose (or the record's defaults), for `--merge`.
    pub columns: Vec<Column>,
    /// The run's `--json` output.
    pub record: serde_json::Value,
}

impl PointLine {
    /// The line of `point` of grid `grid_id` (of `points` points) with its run's record.
    pub fn new(
        grid_id: &str,
        points: usize,
        point: &Point,
        columns: Vec<Column>,
        record: serde_json::Value,
    ) -> Self {
        PointLine {
            id: point.id.clone(),
            grid: grid_id.to_string(),
            index: point.index,
            points,
            point: point.coords.clone(),
            args: point.args.clone(),
            columns,
            record,
        }
    }
}

/// What [`parse`] found in one output.
#[derive(Debug, Default, Clone)]
pub struct Loaded {
    /// Each complete point line with its line number (from 1).
    pub lines: Vec<(usize, PointLine)>,
    /// Lines that are there but not a point's line (not JSON, cut short, from elsewhere).
    pub skipped: usize,
}

/// Every complete point line of an output's bytes.
pub fn parse(bytes: &[u8]) -> Loaded {
    let text = String::from_utf8_lossy(bytes);
    let mut out = Loaded::default();
    // Only newline-terminated lines are complete: the tail after the last newline is not.
    let complete = text.rfind('\n').map_or("", |i| &text[..i]);
    let tail = &text[complete.len()..];
    if !tail.trim().is_empty() {
        out.skipped += 1;
    }
    for (n, l) in complete.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<PointLine>(l) {
            Ok(line) => out.lines.push((n + 1, line)),
            Err(_) => out.skipped += 1,
        }
    }
    out
}

/// How every point line starts (`id` is [`PointLine`]'s first field).
const LINE_START: &[u8] = b"{\"id\":\"";

/// An output this run writes alone: locked, checked to be a sweep output, its unterminated
/// tail cut off.
#[derive(Debug)]
pub struct Output {
    label: String,
    file: files::LockedFile,
    /// What it held when opened.
    pub earlier: Loaded,
}

impl Output {
    /// Open the output at `path` (made, with its directory, if missing); `label` names it in
    /// messages (`--out PATH`).
    pub fn open(label: &str, path: &Path) -> anyhow::Result<Output> {
        files::check_output(label, path)?;
        files::create_parent(label, path)?;
        let mut file = files::open_locked(label, path, true)?;
        let bytes = files::read_all(label, &mut file)?;
        if !bytes.is_empty() && !bytes.starts_with(LINE_START) {
            return usage(format!(
                "{label}: is not a usermm sweep output (its first line is not a point's line); \
                 usermm appends only to its own outputs: name another --out"
            ));
        }
        // The tail after the last newline is a line a killed sweep cut short: ours to cut.
        let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        if keep < bytes.len() {
            file.set_len(keep as u64)
                .map_err(|e| anyhow::anyhow!("{label}: cannot cut its unfinished line: {e}"))?;
        }
        Ok(Output {
            label: label.to_string(),
            earlier: parse(&bytes),
            file,
        })
    }

    /// Append one line (one write, then flushed to the file).
    pub fn append(&mut self, line: &PointLine) -> anyhow::Result<()> {
        let mut s = serde_json::to_string(line)?;
        s.push('\n');
        self.file
            .write_all(s.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|e| anyhow::anyhow!("{}: cannot write: {e}", self.label))
    }

    /// Everything it holds now.
    pub fn load(&mut self) -> anyhow::Result<Loaded> {
        Ok(parse(&files::read_all(&self.label, &mut self.file)?))
    }
}

/// The lines of `sources` (each a file's name and what it held), each point once in the order
/// first seen, and how many repeated lines were dropped. Refused: a line whose id is not the
/// hash of its arguments, and one id with two different runs (arguments or record).
pub fn unique(sources: Vec<(String, Loaded)>) -> anyhow::Result<(Vec<PointLine>, usize)> {
    let mut first: HashMap<String, (String, usize, usize)> = HashMap::new();
    let mut kept: Vec<PointLine> = Vec::new();
    let mut repeated = 0;
    for (file, loaded) in sources {
        for (n, line) in loaded.lines {
            if stable_hash(&line.args) != line.id {
                return usage(format!(
                    "{file} line {n}: point {} does not match its arguments (its id is not \
                     their hash): an edited or forged line",
                    line.id
                ));
            }
            match first.get(&line.id) {
                None => {
                    first.insert(line.id.clone(), (file.clone(), n, kept.len()));
                    kept.push(line);
                }
                Some((f0, n0, at)) => {
                    if kept[*at].record != line.record {
                        return usage(format!(
                            "point {} has two different records ({f0} line {n0}, {file} line \
                             {n}): an edited or forged line, or two runs of one point; keep \
                             one of them",
                            line.id
                        ));
                    }
                    repeated += 1;
                }
            }
        }
    }
    Ok((kept, repeated))
}
