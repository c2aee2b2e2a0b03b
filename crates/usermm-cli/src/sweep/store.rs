//! The output of a sweep: one JSON line per finished point ([`PointLine`]), appended.
//!
//! A line is written only once its point's run has finished, with one `write_all` of the whole
//! line and its newline, so a line is either complete or the unterminated tail a killed sweep
//! left. [`load`] reads every complete line that parses and skips the rest; [`open_append`]
//! cuts such a tail off before appending, so that the next line starts on a line of its own.
//! A point is done when a line with its id is there: that is all resume needs, and it lets any
//! number of outputs (one per machine, one per job) be merged by id.
//!
//! Each line carries the whole `--json` record of its run, so the table can be drawn again
//! with other columns without running anything.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

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

/// What [`load`] found in one output.
#[derive(Debug, Default)]
pub struct Loaded {
    pub lines: Vec<PointLine>,
    /// Lines that are there but not a point's line (not JSON, cut short, from elsewhere).
    pub skipped: usize,
}

/// Every complete point line of the output at `path`; a missing file holds none.
pub fn load(path: &Path) -> std::io::Result<Loaded> {
    let mut text = String::new();
    match File::open(path) {
        Ok(mut f) => {
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes)?;
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut out = Loaded::default();
    // Only newline-terminated lines are complete: the tail after the last newline is not.
    let complete = text.rfind('\n').map_or("", |i| &text[..i]);
    let tail = &text[complete.len()..];
    if !tail.trim().is_empty() {
        out.skipped += 1;
    }
    for l in complete.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<PointLine>(l) {
            Ok(line) => out.lines.push(line),
            Err(_) => out.skipped += 1,
        }
    }
    Ok(out)
}

/// The output at `path` opened for appending (created with its directory if need be), with an
/// unterminated last line cut off.
pub fn open_append(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)?;
    let len = f.seek(SeekFrom::End(0))?;
    if len > 0 {
        // Find the last newline, reading backwards a block at a time.
        let mut end = len;
        let mut keep = 0;
        let mut buf = vec![0u8; 64 * 1024];
        'scan: while end > 0 {
            let start = end.saturating_sub(buf.len() as u64);
            let n = usize::try_from(end - start).unwrap_or(buf.len());
            f.seek(SeekFrom::Start(start))?;
            f.read_exact(&mut buf[..n])?;
            if let Some(i) = buf[..n].iter().rposition(|&b| b == b'\n') {
                keep = start + i as u64 + 1;
                break 'scan;
            }
            end = start;
        }
        if keep < len {
            f.set_len(keep)?;
        }
    }
    Ok(f)
}

/// Append one line (one write, then flushed to the file).
pub fn append(f: &mut File, line: &PointLine) -> anyhow::Result<()> {
    let mut s = serde_json::to_string(line)?;
    s.push('\n');
    f.write_all(s.as_bytes())?;
    f.flush()?;
    Ok(())
}
