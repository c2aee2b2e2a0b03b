//! A published will-it-scale curve in `reproduce` (`--only will-it-scale`): page_fault1 in
//! process mode at each task count Daniel Jordan's lru_lock posting gives (and its one
//! thread-mode row), modelled on `broadwell-ep-2s`, each row beside its published figure with
//! its error and band (`usermm_workloads::will_it_scale::curve`). A validation set: modelled
//! only, nothing fitted to it; about a minute of host time at the default options.

use usermm_workloads::will_it_scale::curve::{predict, CurveOpts, CurveRecord};

use crate::report::{Section, Table};

fn table(r: &CurveRecord) -> Table {
    let mut t = Table::new(
        format!(
            "page_fault1 on {} ({}), faults/s — {}, {}",
            r.machine.profile, r.time, r.source, r.kernel
        ),
        [
            "tasks",
            "mode",
            "published",
            "predicted",
            "error",
            "band",
            "within",
            "idle (modelled)",
            "zone.lock ns/fault",
            "lru_lock ns/fault",
            "zone.lock bound",
            "periods",
        ],
    );
    for row in &r.rows {
        t.push_row([
            row.tasks.to_string(),
            row.mode.name().to_string(),
            row.published.to_string(),
            row.predicted.to_string(),
            format!("{:+.1} %", row.error * 100.0),
            row.band.label(),
            if row.within { "yes" } else { "NO" }.into(),
            format!("{:.1} %", row.idle_percent),
            format!("{:.0}", row.zone_lock_ns_per_fault),
            format!("{:.0}", row.lru_lock_ns_per_fault),
            format!("{:.0}", row.zone_lock_bound_ns),
            row.measured_periods.to_string(),
        ]);
    }
    t
}

/// Run the curve (`test`: tiny sizes, for the CLI's tests): its section, its verdict line and
/// its record.
pub(super) fn run(test: bool) -> anyhow::Result<(Section, String, CurveRecord)> {
    eprintln!("usermm reproduce: will-it-scale page_fault1 (modelled, a validation set) ...");
    let te = std::time::Instant::now();
    let opts = if test {
        CurveOpts::tiny()
    } else {
        CurveOpts::DEFAULT
    };
    let r = predict(&opts, &|what| {
        eprintln!("usermm reproduce: will-it-scale: {what} ...");
    })
    .map_err(|e| anyhow::anyhow!("will-it-scale: {e}"))?;
    let verdict = format!(
        "{} of {} page_fault1 rows within ±25 % of the published curve (predicted, no refit).",
        r.within,
        r.rows.len()
    );
    eprintln!(
        "usermm reproduce: will-it-scale done in {:.1} s: {verdict}",
        te.elapsed().as_secs_f64()
    );
    let mut text = format!(
        "will-it-scale's page_fault1 (each task: mmap 128 MiB anonymous, write one byte per \
         page, munmap; a fault counted per page) modelled in virtual time on `{}`, the \
         posting's machine (docs/profiles.md), beside the curve published for it. Every row is \
         *predicted*: no figure of the curve is an input of the profile or trains a factor. \
         Each row is its own run, will-it-scale's `average:` over {} measured periods of {} ms \
         of virtual time after its six of warm-up, or more (the `periods` column) where that \
         window held fewer than {} iterations of one task at the row's modelled rate; tasks are \
         placed one per core, then on the cores' second threads.\n",
        r.machine.profile,
        r.opts.seconds,
        r.opts.period.as_millis(),
        usermm_workloads::will_it_scale::curve::WINDOW_ITERATIONS
    );
    text.push_str(
        "The lock columns are modelled: each lock's hold time over the run per fault (every \
         zone, every node), and the most zone->lock could be held per fault at the published \
         rate had the busiest zone's lock never been free.\n",
    );
    for n in &r.notes {
        text.push_str(&format!("\n- {n}"));
    }
    if !r.notes.is_empty() {
        text.push('\n');
    }
    let section = Section {
        heading: super::Experiment::WillItScale.heading().into(),
        text,
        tables: vec![table(&r)],
        plots: Vec::new(),
    };
    Ok((section, verdict, r))
}
