//! The grid as work for other machines: a GNU parallel job list or a Slurm array script.
//!
//! Every job is the same command, `usermm sweep GRID --point I --out DIR/I.jsonl`: it expands
//! the grid again and runs point I alone, writing that point's line to a file of its own, so
//! jobs on any number of machines never share a file, and a job run twice finds its line done
//! and runs nothing. `usermm sweep --merge DIR` then draws the table. The binary, the
//! grid and the directory are written as absolute paths: the jobs run wherever those paths
//! resolve (one machine, or a cluster's shared filesystem). Words are quoted for a POSIX shell
//! by the `shlex` crate; the grid refuses control characters, which no quoting makes safe.

use std::path::Path;

use crate::args::usage;

/// Absolute, and UTF-8 (a job line is text).
fn absolute(p: &Path) -> anyhow::Result<String> {
    let abs = std::path::absolute(p)
        .map_err(|e| anyhow::anyhow!("{}: cannot make the path absolute: {e}", p.display()))?;
    match abs.to_str() {
        Some(s) if usermm::text::first_control(s).is_none() => Ok(s.to_string()),
        _ => usage(format!(
            "{}: a job line needs a path in UTF-8 without control characters",
            abs.display()
        )),
    }
}

fn quote(words: &[&str]) -> anyhow::Result<String> {
    shlex::try_join(words.iter().copied()).map_err(|e| anyhow::anyhow!("cannot quote a job: {e}"))
}

/// The paths every job names.
#[derive(Debug, Clone)]
pub struct Jobs {
    exe: String,
    grid: String,
    dir: String,
}

impl Jobs {
    /// Jobs of the usermm binary `exe` over the grid file `grid`, writing into `dir`.
    pub fn new(exe: &Path, grid: &Path, dir: &Path) -> anyhow::Result<Jobs> {
        Ok(Jobs {
            exe: absolute(exe)?,
            grid: absolute(grid)?,
            dir: absolute(dir)?,
        })
    }

    /// GNU parallel's input: one shell command line per point.
    pub fn parallel(&self, points: usize) -> anyhow::Result<String> {
        let mut out = String::new();
        for i in 0..points {
            let file = format!("{}/{i}.jsonl", self.dir.trim_end_matches('/'));
            let index = i.to_string();
            let words = [
                self.exe.as_str(),
                "sweep",
                &self.grid,
                "--point",
                &index,
                "--out",
                &file,
            ];
            out += &quote(&words)?;
            out.push('\n');
        }
        Ok(out)
    }

    /// A Slurm array script: `#SBATCH --array=0-(points-1)`, the point from
    /// `SLURM_ARRAY_TASK_ID`.
    pub fn slurm(&self, points: usize) -> anyhow::Result<String> {
        let last = points.saturating_sub(1);
        let exe = quote(&[&self.exe])?;
        let grid = quote(&[&self.grid])?;
        let dir = quote(&[&self.dir])?;
        Ok(format!(
            "#!/bin/sh\n\
             # usermm sweep: one array task per point of {grid}.\n\
             # Submit with `sbatch THIS_FILE`; add your site's --partition/--time/--account.\n\
             # Then: usermm sweep --merge {dir}\n\
             #SBATCH --job-name=usermm-sweep\n\
             #SBATCH --array=0-{last}\n\
             #SBATCH --ntasks=1\n\
             set -eu\n\
             i=\"${{SLURM_ARRAY_TASK_ID:?not set: submit this script with sbatch}}\"\n\
             exec {exe} sweep {grid} --point \"$i\" --out {dir}/\"$i\".jsonl\n"
        ))
    }
}
