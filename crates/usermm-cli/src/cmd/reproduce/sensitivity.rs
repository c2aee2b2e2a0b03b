//! `reproduce --sensitivity`: how much each modelled headline moves when one input is halved
//! or doubled, and which three inputs move it most.
//!
//! A modelled figure is only as good as the costs it is computed from, and those are known to
//! ±30–50 % at best (`docs/profiles.md`). So for each timing seed this runs its modelled
//! experiment again (at the default scale) with one profile figure scaled (`--scale-cost KEY=0.5` and `=2`, the
//! formula scaled with it), as a grid of the sweep library ([`crate::sweep`]): every point is
//! a child process of this binary, deterministic, its record kept in a JSON-lines file beside
//! the report (`sensitivity/SEED.jsonl`), so an interrupted run resumes. The section gives,
//! per headline, the figure at ×0.5 and ×2 of each input and ranks the inputs by the swing
//! (the larger relative move of the two); the three largest are the headline's most
//! influential inputs. The candidates are the inputs the model's mechanisms turn on, not a
//! search: a seed's table is never consulted.

use std::path::PathBuf;

use serde::Serialize;

use super::staging::Staging;
use crate::report::{Section, Table};
use crate::sweep::{self, Grid, RunOptions};

/// One experiment's grid: the command that runs its modelled side, the inputs it turns on,
/// and its headlines (a name and a dotted path into the command's `--json` record).
struct Study {
    seed: &'static str,
    command: String,
    inputs: &'static [&'static str],
    headlines: &'static [(&'static str, &'static str)],
    /// Points at once (nested `reproduce` runs share an output directory: one at a time).
    jobs: usize,
    /// The report directory a nested `reproduce` writes (beside the grid), if the command
    /// is one.
    report: Option<&'static str>,
}

impl Study {
    /// The grid file's name: `000-001.toml`; the output's is the same with `.jsonl`.
    fn file(&self, ext: &str) -> String {
        format!("{}.{ext}", self.seed.replace('/', "-"))
    }

    /// What the study writes in the sensitivity directory.
    fn files(&self) -> Vec<String> {
        let mut v = vec![self.file("toml"), self.file("jsonl")];
        v.extend(self.report.map(str::to_string));
        v
    }
}

/// The headline at ×0.5 and ×2 of one input.
#[derive(Debug, Clone, Serialize)]
pub struct Swing {
    pub input: String,
    pub half: Option<f64>,
    pub double: Option<f64>,
    /// The larger of |half/base − 1| and |double/base − 1|.
    pub swing: f64,
}

/// A headline and its inputs, the most influential first.
#[derive(Debug, Clone, Serialize)]
pub struct Headline {
    pub seed: String,
    pub name: String,
    pub base: Option<f64>,
    pub inputs: Vec<Swing>,
}

/// The studies of the experiments asked for, at the default scale whatever `reproduce`'s
/// (a grid of 17 seed-size runs would take hours); `quick` as `reproduce --quick`.
fn studies(quick: bool, bigfree: bool, others: &[&str]) -> Vec<Study> {
    let mut v = Vec::new();
    if bigfree {
        let (size, job) = if quick {
            ("16G", "")
        } else {
            ("64G", " --threshold 262144 --max-batch-count 515")
        };
        v.push(Study {
            seed: "000/001",
            command: format!(
                "bigfree {size} --time virtual --profile haswell-ex-4s --cpus 144 --nodes 4 \
                 --max-active 1,8,32 --seed-only{job}"
            ),
            inputs: &[
                "zap_pte",
                "lru_del",
                "free_unref_page",
                "free_pcppages_bulk_page",
                "transfer.same_socket",
                "memory.dram_local",
                "jitter",
                "smt.sibling_factor",
            ],
            headlines: &[
                ("speedup, max_active 1", "bigfree.rows.1.speedup"),
                ("speedup, max_active 8", "bigfree.rows.2.speedup"),
                ("speedup, max_active 32", "bigfree.rows.3.speedup"),
                ("spinning at max_active 8", "bigfree.rows.2.spin_share"),
            ],
            jobs: usermm_host::facts::usable_cpus(),
            report: None,
        });
    }
    if others.contains(&"huge-zero") {
        v.push(Study {
            seed: "002",
            command: "reproduce --time virtual --only huge-zero --out hz".into(),
            report: Some("hz"),
            inputs: &[
                "atomic_rmw",
                "transfer.same_socket",
                "transfer.other_socket",
                "fault_entry",
                "fault_exit",
            ],
            headlines: &[
                (
                    "throughput patched/vanilla",
                    "huge-zero.modelled.throughput_ratio",
                ),
                (
                    "huge zero line, vanilla",
                    "huge-zero.modelled.line_share_vanilla",
                ),
            ],
            jobs: 1,
        });
    }
    if others.contains(&"munmap") {
        v.push(Study {
            seed: "003",
            command: "reproduce --time virtual --only munmap --out mu".into(),
            report: Some("mu"),
            inputs: &["zap_pte", "lru_del", "free_unref_page", "tlb_flush_local"],
            headlines: &[(
                "exclusive hold, vanilla (µs)",
                "munmap.modelled.exclusive_hold_us.vanilla",
            )],
            jobs: 1,
        });
    }
    v
}

/// The grid file of `s`: one `--scale-cost` axis, the unscaled run first.
fn grid_text(s: &Study) -> String {
    let mut values = vec!["\"zap_pte=1\"".to_string()];
    for i in s.inputs {
        values.push(format!("\"{i}=0.5\""));
        values.push(format!("\"{i}=2\""));
    }
    let mut t = format!(
        "command = \"{}\"\n[axes]\n\"--scale-cost\" = [{}]\n[columns]\n",
        s.command,
        values.join(", ")
    );
    for (name, path) in s.headlines {
        t += &format!("\"{name}\" = \"{path}\"\n");
    }
    t
}

/// Runs every study of the experiments that ran modelled, in the report's `sensitivity/`
/// (kept there across runs, so that a run cut short resumes); returns the section and the
/// headlines for `results.json`.
pub(super) fn run(
    staging: &mut Staging,
    quick: bool,
    bigfree: bool,
    others: &[&str],
) -> anyhow::Result<(Section, Vec<Headline>)> {
    let studies = studies(quick, bigfree, others);
    let names: Vec<String> = studies.iter().flat_map(Study::files).collect();
    let dir = if names.is_empty() {
        PathBuf::new()
    } else {
        staging.keep("sensitivity", &names)?
    };
    let mut tables = Vec::new();
    let mut headlines = Vec::new();
    for s in studies {
        let file = dir.join(s.file("toml"));
        let label = file.display().to_string();
        usermm_host::files::write_atomic(&label, &file, grid_text(&s).as_bytes())?;
        let grid = Grid::load(&file)?;
        let points = grid.points(&|_| Ok(()))?;
        let out: PathBuf = dir.join(s.file("jsonl"));
        let opts = RunOptions::for_grid(&grid, out, s.jobs)?;
        let swept = sweep::run_grid(&grid, &points, &opts)?;
        let figure = |index: usize, col: &str| -> Option<f64> {
            swept
                .table
                .rows
                .iter()
                .find(|r| r.point.index == index)?
                .figures
                .iter()
                .find(|(c, _)| c == col)
                .and_then(|(_, v)| v.as_f64())
        };
        let mut t = Table::new(
            format!(
                "Seed {}: each headline with one input halved and doubled (`{}`), the three \
                 that move it most marked",
                s.seed, s.command
            ),
            ["headline", "input", "×0.5", "×1", "×2", "swing"],
        );
        for (name, _) in s.headlines {
            let base = figure(0, name);
            let mut swings: Vec<Swing> = s
                .inputs
                .iter()
                .enumerate()
                .map(|(i, input)| {
                    let (half, double) = (figure(1 + 2 * i, name), figure(2 + 2 * i, name));
                    let rel = |x: Option<f64>| match (x, base) {
                        (Some(x), Some(b)) if b != 0.0 => (x / b - 1.0).abs(),
                        _ => 0.0,
                    };
                    Swing {
                        input: (*input).to_string(),
                        half,
                        double,
                        swing: rel(half).max(rel(double)),
                    }
                })
                .collect();
            swings.sort_by(|a, b| b.swing.total_cmp(&a.swing));
            for (rank, w) in swings.iter().enumerate() {
                let f = |x: Option<f64>| x.map_or_else(|| "-".into(), |v| format!("{v:.4}"));
                t.push_row([
                    if rank == 0 {
                        (*name).to_string()
                    } else {
                        String::new()
                    },
                    format!("{}{}", w.input, if rank < 3 { " *" } else { "" }),
                    f(w.half),
                    f(base),
                    f(w.double),
                    format!("{:.1} %", w.swing * 100.0),
                ]);
            }
            headlines.push(Headline {
                seed: s.seed.into(),
                name: (*name).into(),
                base,
                inputs: swings,
            });
        }
        tables.push(t);
    }
    let section = Section {
        heading: "Sensitivity: the modelled headlines against their inputs".into(),
        text: "Each timing seed's modelled experiment run again with one profile figure \
               halved and doubled (`--scale-cost`, its formula scaled with it); `*` marks \
               the three inputs that move a headline most. The ×1 column is the run with \
               `zap_pte` scaled by 1, which is the profile unchanged. The inputs are known to ±30–50 % \
               (docs/profiles.md): a headline that swings more than its band when one of them \
               moves is not decided by the model's mechanisms alone.\n"
            .into(),
        tables,
        plots: Vec::new(),
    };
    Ok((section, headlines))
}

#[cfg(test)]
mod test {
    use std::path::Path;

    use serde_json::Value;

    use super::*;

    /// A number at `path` of a record.
    fn lookup(v: &Value, path: &str) -> Option<f64> {
        crate::sweep::table::lookup(v, path).and_then(Value::as_f64)
    }

    #[test]
    fn every_study_scales_each_input_both_ways_after_the_unscaled_run() {
        let all = studies(false, true, &["huge-zero", "munmap"]);
        assert_eq!(all.len(), 3);
        for s in &all {
            let g = Grid::parse(&grid_text(s), Path::new("t.toml")).unwrap();
            assert_eq!(g.len(), 1 + 2 * s.inputs.len(), "{}", s.seed);
            let first = g.point(0).unwrap();
            assert_eq!(first.args.last().unwrap(), "--scale-cost=zap_pte=1");
            let last = g.point(g.len() - 1).unwrap();
            let want = format!("--scale-cost={}=2", s.inputs.last().unwrap());
            assert_eq!(*last.args.last().unwrap(), want);
            assert_eq!(g.columns.len(), s.headlines.len());
        }
        // The headline paths read the records the commands write.
        let rec: Value = serde_json::json!({"bigfree": {"rows": [{}, {"speedup": 1.5}]}});
        assert_eq!(lookup(&rec, "bigfree.rows.1.speedup"), Some(1.5));
    }
}
