//! The validation set in `reproduce` (`--only validation`): the seed thread's other published
//! runs predicted by the model with the era factors and no refit, and the same runs unfitted
//! (every factor 1), each row beside its published figure with its error and band
//! (`usermm_workloads::validation`). Modelled only: every figure is a virtual-time run on the
//! posting's machine; one table and one verdict line per run.

use usermm_workloads::validation::{self, Sizes, Validation, ValidationOpts, ValidationRow};

use super::experiment::Scale;
use crate::report::{Section, Table};

/// The sizes of `scale` (`test`: tiny sizes with jobs to match, for the CLI's tests).
fn opts(scale: Scale, test: bool) -> ValidationOpts {
    if test {
        return ValidationOpts::tiny();
    }
    match scale {
        Scale::Default => ValidationOpts::new(Sizes::DEFAULT),
        Scale::Seed => ValidationOpts::new(Sizes::seed()),
    }
}

/// A figure in its unit.
fn fmt(unit: &str, x: f64) -> String {
    match unit {
        "%" => format!("{x:.1} %"),
        "ratio" => format!("{x:.3}"),
        "max_active" => format!("{x:.0}"),
        _ => format!("{x:.1}"),
    }
}

fn table(title: String, rows: &[&ValidationRow]) -> Table {
    let mut t = Table::new(
        title,
        [
            "row",
            "role",
            "published",
            "predicted (era factors)",
            "unfitted",
            "error",
            "band",
            "within",
            "unfitted within",
        ],
    );
    for r in rows {
        t.push_row([
            format!("{} ({})", r.name, r.unit),
            r.kind.to_string(),
            fmt(r.unit, r.published),
            fmt(r.unit, r.predicted),
            fmt(r.unit, r.unfitted),
            r.error_label(),
            r.band.label(),
            if r.within { "yes" } else { "NO" }.into(),
            if r.unfitted_within { "yes" } else { "no" }.into(),
        ]);
    }
    t
}

/// Run the validation set at `scale` on up to `jobs` host threads: its section, its verdict
/// line and its record.
pub(super) fn run(
    scale: Scale,
    test: bool,
    jobs: usize,
) -> anyhow::Result<(Section, String, Validation)> {
    eprintln!("usermm reproduce: validation (modelled, era factors and unfitted) ...");
    let te = std::time::Instant::now();
    let o = ValidationOpts {
        threads: jobs,
        ..opts(scale, test)
    };
    let v = validation::run(&o, &|what| {
        eprintln!("usermm reproduce: validation: {what} ...");
    })
    .map_err(|e| anyhow::anyhow!("validation: {e}"))?;
    let mut tables = Vec::new();
    let mut text = String::from(
        "The seed thread's other published runs, predicted by the model with the era factors \
         of `usermm infer` and **no refit** (docs/profiles.md, \"Validation set\"); the \
         unfitted column is the same run with every factor 1. Every row is *predicted*: none \
         trained a factor. Times are compared per page (the model frees a smaller mapping on \
         a machine of the posting's shape at the default scale), shares as shares (the CPUs' \
         spinning over their busy and spinning time), directions exactly.\n\n",
    );
    for run in &v.runs {
        let rows: Vec<&ValidationRow> = v.rows.iter().filter(|r| r.run == run.run).collect();
        let source = rows.first().map_or("", |r| r.source.as_str());
        tables.push(table(
            format!("{} — {} ({}), {}", run.run, run.machine, run.time, source),
            &rows,
        ));
        text += &format!("- **{}**: {}\n", run.run, run.verdict);
        for n in &run.notes {
            text += &format!("  - {n}\n");
        }
    }
    let met = v.runs.iter().filter(|r| r.met == r.rows).count();
    let within = v.rows.iter().filter(|r| r.within).count();
    let verdict = format!(
        "{met} of {} runs met in every row; {within} of {} predicted rows within their bands \
         (unfitted: {}).",
        v.runs.len(),
        v.rows.len(),
        v.rows.iter().filter(|r| r.unfitted_within).count()
    );
    eprintln!(
        "usermm reproduce: validation done in {:.1} s: {verdict}",
        te.elapsed().as_secs_f64()
    );
    for r in &v.runs {
        eprintln!("usermm reproduce: validation, {}: {}", r.run, r.verdict);
        for n in &r.notes {
            eprintln!("  - {n}");
        }
    }
    let section = Section {
        heading: super::Experiment::Validation.heading().into(),
        text,
        tables,
        plots: Vec::new(),
    };
    Ok((section, verdict, v))
}
