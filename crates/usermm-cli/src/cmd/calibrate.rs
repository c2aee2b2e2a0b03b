//! `usermm calibrate`: measure this host's kernel and write the `this-host` cost profile.
//!
//! The measurements are `usermm_host::calibrate` (one forked, pinned process per sample, on
//! thread CPU time); the profile is `usermm_workloads::calibrate::this_host_profile`, a pure
//! function of the record, whose every figure is a formula over named inputs. The command
//! prints one row per figure (median, min–max, MAD, unit, bimodal) and where the profile went;
//! with `--json` it prints the record itself (the input a closure test is built from). The file
//! loads with `--profile FILE` on every command that runs in virtual time.

use std::path::{Path, PathBuf};

use clap::Args;
use usermm_host::calibrate::{self, CalibrateOpts, HostCalibration, Sizes, MAX_REPEAT, MIN_REPEAT};
use usermm_host::files;
use usermm_workloads::calibrate::THIS_HOST_HEADER;

use crate::args::{usage, GlobalArgs};
use crate::report::format::by_size;
use crate::report::{Progress, Table};

#[derive(Debug, Clone, Args)]
pub struct CalibrateArgs {
    /// Where to write the this-host profile: a new file, or a profile calibrate wrote before
    /// (replaced whole, by a new file renamed over it); never through a link.
    #[arg(long, value_name = "FILE", default_value = "this-host.toml")]
    pub out: PathBuf,
    /// Samples per figure, each from a fresh process (7 to 100; a round of every probe takes
    /// about 6 s).
    #[arg(long, value_name = "N", default_value_t = MIN_REPEAT)]
    pub repeat: u32,
    /// Measure nothing: write the profile of a calibration saved earlier (`calibrate
    /// --json` output), as this version of usermm derives it.
    #[arg(long, value_name = "RECORD", conflicts_with = "repeat")]
    pub from: Option<PathBuf>,
    /// Test only: tiny probe sizes, and any repeat count ≥ 1 (the figures mean little).
    #[arg(long, hide = true)]
    pub test_sizes: bool,
}

pub fn run(args: &CalibrateArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let min = if args.test_sizes { 1 } else { MIN_REPEAT };
    if args.repeat < min || args.repeat > MAX_REPEAT {
        return usage(format!(
            "calibrate: --repeat {}: must be {min} to {MAX_REPEAT} (each round of samples takes \
             about 6 s)",
            args.repeat
        ));
    }
    check_out(&args.out)?;
    if let Some(from) = &args.from {
        let text = files::read_regular(&files::label("calibrate: --from", from), from)?;
        let record: HostCalibration = match serde_json::from_slice(&text) {
            Ok(r) => r,
            Err(e) => {
                return usage(format!(
                    "calibrate: {} is not a calibration record (`usermm calibrate --json`): {e}",
                    from.display()
                ))
            }
        };
        if let Err(why) = calibrate::validate(&record) {
            return usage(format!(
                "calibrate: --from {}: {why}: not a record `usermm calibrate --json` writes",
                from.display()
            ));
        }
        let profile = usermm_workloads::calibrate::this_host_profile(&record);
        usermm::vtime::Profile::from_toml_str(&profile, &args.out.display().to_string())
            .map_err(|e| anyhow::anyhow!("calibrate: the profile derived does not load: {e}"))?;
        write_profile(&args.out, &profile)?;
        return super::emit(g, &record, |r| render(r, &args.out));
    }
    let _measuring = super::lock_for_measuring("calibrate")?;
    let opts = CalibrateOpts {
        repeat: args.repeat,
        sizes: if args.test_sizes {
            Sizes::small()
        } else {
            Sizes::full()
        },
    };
    let (record, profile) = measure_and_write(&opts, &args.out)?;
    // The file must load as every other profile does (a figure that disagrees with its
    // formula, or a negative remainder of a split, is refused): say so now, not at first use.
    usermm::vtime::Profile::from_toml_str(&profile, &args.out.display().to_string())
        .map_err(|e| anyhow::anyhow!("calibrate: the profile written does not load: {e}"))?;
    super::emit(g, &record, |r| render(r, &args.out))
}

/// Calibrates with a progress bar and writes the this-host profile to `out`: the record and
/// the profile's text (`reproduce`'s host check calibrates the same way).
pub(crate) fn measure_and_write(
    opts: &CalibrateOpts,
    out: &Path,
) -> anyhow::Result<(HostCalibration, String)> {
    let bar = Progress::bar(
        u64::from(opts.repeat) * calibrate::PROBES as u64,
        "calibrate",
    );
    let record = calibrate::calibrate(opts, &mut |what, _, _| {
        bar.set_message(what.to_string());
        bar.inc(1);
    });
    bar.finish();
    let record = record.map_err(|e| anyhow::anyhow!("calibrate: {e}"))?;
    let profile = usermm_workloads::calibrate::this_host_profile(&record);
    write_profile(out, &profile)?;
    Ok((record, profile))
}

/// The profile written whole to `out` (a new file renamed over it: never truncated in
/// place, never through a link).
fn write_profile(out: &Path, profile: &str) -> anyhow::Result<()> {
    let label = files::label("calibrate: --out", out);
    Ok(files::write_atomic(&label, out, profile.as_bytes())?)
}

/// `--out` must name nothing yet or a profile `calibrate` wrote (a regular file, not through
/// a link), in a directory that exists (checked before the minutes of measuring).
fn check_out(out: &Path) -> anyhow::Result<()> {
    if out.as_os_str().is_empty() || out.is_dir() {
        return usage(format!(
            "calibrate: --out {}: not a file name",
            out.display()
        ));
    }
    let label = files::label("calibrate: --out", out);
    if files::check_output(&label, out)?.is_some() {
        let text = files::read_regular(&label, out)?;
        if !text.starts_with(THIS_HOST_HEADER.as_bytes()) {
            return usage(format!(
                "{label}: exists and is not a profile usermm calibrate wrote; name a new file \
                 (or that profile)"
            ));
        }
    }
    let dir = files::parent(out);
    if !dir.is_dir() {
        return usage(format!(
            "calibrate: --out {}: directory {} does not exist",
            out.display(),
            dir.display()
        ));
    }
    Ok(())
}

/// The table, the host line and where the profile went.
pub fn render(r: &HostCalibration, out: &Path) -> String {
    let s = &r.system;
    let mut t = Table::new(
        format!(
            "this host: {} ({:.0} MHz), {} CPUs, Linux {}, {}; {} samples per figure, {:.0} s",
            s.cpu_model, s.cpu_mhz, s.online_cpus, s.kernel, r.date, r.repeat, r.wall_seconds
        ),
        ["figure", "median", "min – max", "MAD", "unit", "bimodal"],
    );
    for (key, m) in r.figures.all() {
        t.push_row([
            key.to_string(),
            fmt(m.median),
            format!("{} – {}", fmt(m.min), fmt(m.max)),
            fmt(m.mad),
            m.unit.clone(),
            if m.bimodal { "yes" } else { "" }.to_string(),
        ]);
    }
    let mut text = t.render_text();
    match &r.smt {
        Some(p) => text.push_str(&format!(
            "{}; the profile's SMT factor: {}\n",
            p.summary(),
            if p.shared_core {
                format!("{:.2}, measured", 1.0 / p.ratio.median)
            } else {
                "1, never applied (one thread a core)".to_string()
            }
        )),
        None => text.push_str("SMT probe: not in this record (format 1)\n"),
    }
    match &r.shootdown {
        Some(p) => text.push_str(&format!("{}\n", p.summary())),
        None => text.push_str("TLB shootdown probe: not in this record (format 1 or 2)\n"),
    }
    match &r.lru_add {
        Some(p) => text.push_str(&format!("{}\n", p.summary())),
        None => text.push_str("LRU-add probe: not in this record (format 1 to 3)\n"),
    }
    if !r.pinned {
        text.push_str(
            "note: pinning failed in some child; samples ran where the scheduler put them\n",
        );
    }
    if !r.huge_zero_page_seen {
        text.push_str("note: the huge zero page was not mapped in every sample\n");
    }
    if !r.thp_seen {
        text.push_str("note: the THP write faults did not all get huge pages\n");
    }
    text.push_str(&format!("profile: {}\n", out.display()));
    text
}

/// A measured cost to about three figures.
fn fmt(v: f64) -> String {
    by_size(v, &[(1000.0, 0), (10.0, 1)], 2)
}
