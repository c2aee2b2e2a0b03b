//! `usermm infer`: estimate the era factors from their training rows and write the era file.
//!
//! The procedure is `usermm_workloads::infer` (its module essay states it step by step); this
//! command runs it with progress on stderr, prints the factors (value, range, plausible) and
//! every training row (published, unfitted, fitted, error, band), and writes the era file that
//! the seed profiles load (`--out`; the built-in one is
//! `crates/usermm/src/vtime/profiles/era/intel-2016-2019.toml`, written by this command).

use std::path::PathBuf;

use clap::Args;
use usermm_workloads::infer::{self, rows::EvalSizes, InferOpts, InferResult};

use crate::args::{usage, GlobalArgs};
use crate::report::Table;

#[derive(Debug, Clone, Args)]
pub struct InferArgs {
    /// Where to write the era file (default: print it on stdout after the tables).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Host threads for the evaluation runs (default: this host's CPUs).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Test only: smaller evaluation runs (bigfree and usemem sizes in MiB); the factors then
    /// mean little.
    #[arg(long, hide = true, value_name = "MIB,MIB")]
    pub test_sizes: Option<String>,
}

pub fn run(args: &InferArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let threads = match args.threads {
        Some(0) => return usage("--threads: at least 1 (got 0)"),
        Some(n) if n > 64 => return usage(format!("--threads: at most 64 (got {n})")),
        Some(n) => n,
        None => usermm_host::facts::usable_cpus(),
    };
    let sizes = match &args.test_sizes {
        None => EvalSizes::default(),
        Some(s) => {
            let parse = |x: &str| {
                x.trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|v| (64..=65536).contains(v))
            };
            match s
                .split_once(',')
                .and_then(|(a, b)| Some((parse(a)?, parse(b)?)))
            {
                Some((a, b)) => EvalSizes {
                    bigfree: a << 20,
                    usemem: b << 20,
                },
                None => return usage(format!("--test-sizes {s}: expected MIB,MIB (64..65536)")),
            }
        }
    };
    if let Some(out) = &args.out {
        check_out(out)?;
    }
    let commit = crate::report::host::git_commit().unwrap_or_else(|| "unknown".into());
    let command = format!(
        "usermm infer{} (commit {commit}, {} GiB bigfree rows, {} GiB usemem)",
        if args.test_sizes.is_some() {
            " --test-sizes"
        } else {
            ""
        },
        sizes.bigfree >> 30,
        sizes.usemem >> 30
    );
    let opts = InferOpts {
        sizes,
        threads,
        command,
    };
    let started = std::time::Instant::now();
    let r = infer::run(&opts, &mut |line| {
        eprintln!(
            "usermm infer [{:>5.0} s]: {line}",
            started.elapsed().as_secs_f64()
        )
    })
    .map_err(|e| anyhow::anyhow!("infer: {e}"))?;
    let era = infer::era_file(&r, &opts);
    if let Some(out) = &args.out {
        write_out(out, &era)?;
    }
    if g.json {
        return crate::cmd::print_json(&r);
    }
    let mut text = render(&r);
    match &args.out {
        Some(out) => text.push_str(&format!("\nera file written to {}\n", out.display())),
        None => {
            text.push('\n');
            text.push_str(&era);
        }
    }
    Ok(crate::cmd::print(&text)?)
}

fn render(r: &InferResult) -> String {
    let mut t = Table::new(
        format!("Era factors ({}), fitted", r.era),
        [
            "factor",
            "multiplies",
            "written",
            "least squares",
            "range (rows in band)",
            "in [0.25, 4]",
        ],
    );
    for f in &r.factors {
        let range = match f.range {
            (Some(a), Some(b)) => format!("{a:.3} - {b:.3}"),
            (None, Some(b)) => format!("≤ {b:.3}"),
            (Some(a), None) => format!("≥ {a:.3}"),
            (None, None) => "none: a row misses".into(),
        };
        t.push_row([
            f.input.to_string(),
            f.costs.join(", "),
            if f.applied {
                format!("{:.4}", f.value)
            } else {
                "1 (not applied)".to_string()
            },
            format!("{:.4}", f.unconstrained),
            range,
            if f.plausible {
                "yes".into()
            } else {
                "NO: a missing mechanism".to_string()
            },
        ]);
    }
    let mut rows = Table::new(
        "Training rows (fitted, not reproduced)".to_string(),
        [
            "row",
            "published",
            "unfitted",
            "fitted",
            "error",
            "band",
            "within",
        ],
    );
    for x in &r.rows {
        let v = |v: f64| match x.unit {
            "share" => format!("{:.2} %", v * 100.0),
            _ => format!("{v:.1} {}", x.unit),
        };
        rows.push_row([
            x.id.to_string(),
            v(x.published),
            format!("{} ({:+.1} %)", v(x.unfitted), x.unfitted_error * 100.0),
            v(x.fitted),
            format!("{:+.1} %", x.fitted_error * 100.0),
            format!("±{:.1} %", x.band * 100.0),
            if x.within { "yes" } else { "NO" }.to_string(),
        ]);
    }
    let mut s = t.render_text();
    s.push('\n');
    s.push_str(&rows.render_text());
    s.push_str(&format!(
        "\n{} runs of a training row on the engine, {:.0} s; teardown search: {}; fault search: {}.\n",
        r.runs, r.wall_s, r.teardown_stopped, r.fault_stopped
    ));
    for f in &r.factors {
        for e in &f.range_checked {
            s.push_str(&format!(
                "{} at {:.4}: worst row {} {:+.1} % (band ±{:.0} %){}\n",
                f.input,
                e.factor,
                e.worst_row,
                e.worst_error * 100.0,
                e.worst_band * 100.0,
                if e.within { "" } else { ", outside" }
            ));
        }
    }
    if !r.ok() {
        s.push_str(
            "\nNot every factor is plausible and applied, or not every training row is within \
             its band: the misses name a mechanism the model lacks (docs/profiles.md, \"Era \
             factors\").\n",
        );
    }
    s
}

/// `--out` names a regular file (or nothing yet) in a directory that exists; checked before the
/// minutes of fitting (links, FIFOs and devices are refused: `usermm_host::files`). An
/// existing file is replaced only if it is an era file (`usermm infer` writes nothing else).
fn check_out(out: &std::path::Path) -> anyhow::Result<()> {
    use usermm_host::files;
    let label = files::label("infer: --out", out);
    if files::check_output(&label, out)?.is_some() {
        let text = files::read_regular(&label, out)?;
        if !String::from_utf8_lossy(&text).starts_with(usermm_workloads::infer::ERA_FILE_HEADER) {
            return usage(format!(
                "{label}: exists and is not an era file usermm infer wrote; name another file"
            ));
        }
    }
    if !files::parent(out).is_dir() {
        return usage(format!("{label}: its directory does not exist"));
    }
    Ok(())
}

/// Writes the era file by temp file and rename (never in place, never through a link).
fn write_out(out: &std::path::Path, text: &str) -> anyhow::Result<()> {
    use usermm_host::files;
    check_out(out)?;
    let label = files::label("infer: --out", out);
    Ok(files::write_atomic(&label, out, text.as_bytes())?)
}
