//! "The model checked on this host" in `reproduce`: calibrate this host (or take a `this-host`
//! profile given with `--host-profile`), predict four scenarios with it in virtual time, then
//! measure them on this host's kernel, and print each row with its error, or *host busy* when
//! the host was not quiet while it was measured
//! (`usermm_workloads::host_check` holds the scenarios; `usermm_host::calibrate` the
//! calibration).
//!
//! The order is the point: the profile is written and the predictions made before anything of
//! the check is measured, and nothing the check measures goes into the profile.
//!
//! Row (d)'s process-mode cases fork their tasks, which this process cannot do once it has a
//! second thread (the report's Ctrl-C clean-up keeps one): they run as a fresh
//! `usermm will-it-scale page_fault1 --host --processes` ([`spawned`]), whose record carries
//! the average and each task's CPU share; the thread-mode cases run here.

use std::path::{Path, PathBuf};

use serde::Serialize;
use usermm_host::calibrate::{self, CalibrateOpts, Sizes};
use usermm_workloads::host_check::page_fault1::{self, HostCase};
use usermm_workloads::host_check::{self, HostCheck, HostCheckError, HostCheckOpts, HostCheckRow};
use usermm_workloads::task::Mode;
use usermm_workloads::will_it_scale::Params;

use crate::report::{Section, Table};

/// A row is within the band when its error is at most this (±30 %).
pub(super) const BAND: f64 = 0.30;

/// `host_check` in `results.json`.
#[derive(Debug, Serialize)]
pub struct HostCheckRecord {
    /// Where the this-host profile came from: the file written by this run's calibration, or
    /// the one given with `--host-profile`.
    pub profile_file: PathBuf,
    /// True when this run calibrated (false: `--host-profile`).
    pub calibrated: bool,
    /// `calibrate`'s wall time in this run, s (0 when not calibrated).
    pub calibrate_seconds: f64,
    pub band: f64,
    #[serde(flatten)]
    pub check: HostCheck,
}

/// `--host-profile FILE`, checked before any experiment runs: it must load, and be this
/// host's (`usermm calibrate` names it `this-host`, with this host's CPUs as its hardware
/// threads); another machine's profile would check the model against the wrong machine.
pub(super) fn check_host_profile(path: &Path) -> anyhow::Result<()> {
    let flag = format!("--host-profile {}", path.display());
    let p = match usermm::vtime::Profile::resolve(&path.display().to_string()) {
        Ok(p) => p,
        Err(e) => {
            let msg = e.to_string();
            let msg = msg.strip_prefix("profile: ").unwrap_or(&msg).to_string();
            return crate::args::usage(format!("{flag}: {msg}"));
        }
    };
    let cpus = usermm_host::facts::usable_cpus();
    let threads = p.topology().hw_threads();
    if p.name() != "this-host" || threads != cpus {
        return crate::args::usage(format!(
            "{flag}: profile {} ({threads} hardware threads) is not this host's: the host check \
             needs the this-host profile `usermm calibrate` writes here (this host has {cpus} \
             CPUs)",
            p.name()
        ));
    }
    Ok(())
}

/// Calibrates into `out/this-host.toml` unless `profile` names one, then predicts and measures;
/// the report names a profile calibrated here as `report_dir/this-host.toml`, where it will be
/// once the report is in place (`out` is its staging directory).
pub(super) fn run(
    out: &Path,
    report_dir: &Path,
    profile: Option<&Path>,
    opts: &HostCheckOpts,
) -> anyhow::Result<(Section, String, HostCheckRecord)> {
    let t = std::time::Instant::now();
    let (file, calibrated) = match profile {
        Some(p) => (p.to_path_buf(), false),
        None => {
            let copts = CalibrateOpts {
                repeat: calibrate::MIN_REPEAT,
                sizes: Sizes::full(),
            };
            let file = out.join("this-host.toml");
            super::super::calibrate::measure_and_write(&copts, &file)
                .map_err(|e| anyhow::anyhow!("host check: {e}"))?;
            (file, true)
        }
    };
    let calibrate_seconds = if calibrated {
        t.elapsed().as_secs_f64()
    } else {
        0.0
    };
    // Loads the profile once here so that a bad file is one clear error, not a failed run.
    usermm::vtime::Profile::resolve(&file.display().to_string())
        .map_err(|e| anyhow::anyhow!("host check: {e}"))?;
    let mut check = host_check::run(&file.display().to_string(), opts, &runner)
        .map_err(|e| anyhow::anyhow!("host check: {e}"))?;
    // The record and the report name the profile where it will stay, not where it was staged.
    let file = if calibrated {
        let shown = report_dir.join("this-host.toml");
        check.profile = check
            .profile
            .replace(&file.display().to_string(), &shown.display().to_string());
        shown
    } else {
        file
    };
    let section = section(&check, &file, calibrated);
    let verdict = verdict(&check);
    Ok((
        section,
        verdict,
        HostCheckRecord {
            profile_file: file,
            calibrated,
            calibrate_seconds,
            band: BAND,
            check,
        },
    ))
}

/// Row (d)'s runner: thread mode here, process mode in a fresh process.
fn runner(p: &Params) -> Result<HostCase, HostCheckError> {
    match p.mode {
        Mode::Threads => page_fault1::in_process(p),
        Mode::Processes => spawned(p).map_err(HostCheckError::WillItScale),
    }
}

/// `usermm will-it-scale page_fault1 --host --processes` with `p`'s tasks, periods and size,
/// run as a fresh process (single-threaded, so it may fork its tasks); its `--json` record's
/// `average` and `task_cpu_over_wall`.
fn spawned(p: &Params) -> Result<HostCase, String> {
    let exe = std::env::current_exe().map_err(|e| format!("page_fault1: this program: {e}"))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args([
        "will-it-scale",
        "page_fault1",
        "--host",
        "--processes",
        "--json",
    ])
    .args(["-t", &p.tasks.to_string(), "-s", &p.seconds.to_string()])
    .args(["--period", &format!("{}us", p.period.as_micros())])
    .stdin(std::process::Stdio::null());
    if let Some(size) = p.size {
        cmd.args(["--size", &size.to_string()]);
    }
    let out = cmd
        .output()
        .map_err(|e| format!("page_fault1: cannot start usermm will-it-scale: {e}"))?;
    let what = format!("usermm will-it-scale page_fault1 --host -t {}", p.tasks);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{what}: {}", err.trim()));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("{what}: its record does not parse: {e}"))?;
    let faults_per_sec = v["average"]
        .as_f64()
        .ok_or_else(|| format!("{what}: no average (tasks ended: {})", v["stops"]))?;
    let cpu_over_wall = v["task_cpu_over_wall"]
        .as_array()
        .map(|a| a.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect())
        .unwrap_or_default();
    Ok(HostCase {
        faults_per_sec,
        cpu_over_wall,
    })
}

fn within(error: Option<f64>) -> bool {
    error.is_some_and(|e| e.abs() <= BAND)
}

/// A row's error as the report gives it: a percentage, `host busy`, or `not measured`.
fn error_cell(r: &HostCheckRow) -> String {
    match r.error {
        _ if r.host_busy => "host busy".into(),
        None => "not measured".into(),
        Some(e) => format!("{:+.0} %", e * 100.0),
    }
}

fn section(c: &HostCheck, file: &Path, calibrated: bool) -> Section {
    let mut t = Table::new(
        format!(
            "predicted (modelled, this-host profile {}) then measured (this host, wall clock)",
            file.display()
        ),
        [
            "row",
            "unit",
            "predicted",
            "measured",
            "error",
            "within ±30 %",
        ],
    );
    for r in &c.rows {
        let fmt = |v: f64| {
            if r.unit == "x" {
                format!("{v:.2}")
            } else {
                format!("{v:.0}")
            }
        };
        t.push_row([
            r.name.clone(),
            r.unit.clone(),
            fmt(r.predicted),
            fmt(r.measured),
            error_cell(r),
            match (r.host_busy, within(r.error)) {
                (true, _) => "—",
                (false, true) => "yes",
                (false, false) => "no",
            }
            .into(),
        ]);
    }
    let o = &c.opts;
    let text = format!(
        "The engine, in virtual time on the `this-host` profile ({}), predicts four scenarios \
         of this host's kernel (6.18's policies: per-VMA locks, pcp auto-tuning, munmap under a \
         downgraded lock, the per-mm huge zero reference) before this run measures them. \
         Nothing measured here is used by the profile.\n\n\
         - (a) {} MiB touched, freed by `MADV_DONTNEED` by one thread, then by two threads on \
         halves ({} host repeats, medians);\n\
         - (b) a thread write-faulting its own {} KiB VMA while another munmaps {} MiB ({} host \
         repeats; {} faults overlapped the munmaps);\n\
         - (c) {} GiB of huge-zero-page reads (one fault per 2 MiB) by one process, then by two \
         at once ({} host repeats, medians);\n\
         - (d) will-it-scale's page_fault1 (mmap {} KiB, write a byte a page, munmap; faults \
         per second, its `average:` over {} periods of {} ms after six of warm-up) at 1 and 2 \
         tasks, as processes and as threads, the same test body on the engine and on this \
         host's kernel.\n\n\
         Before and after each measurement the load average and the steal time are read, and \
         for (c) and (d) each reader's or task's CPU time against its wall time: a row measured \
         while the host was not quiet (load average over the measurement's own threads + {}, \
         steal over {} %, a reader or task under {:.0} % of its wall time as CPU) is *host \
         busy*: no error is given for it and it counts neither way.\n\n\
         The populated mappings are sized to the host: each at most 1 GiB and a quarter of \
         the memory available, so that the check's RSS stays under 2 GiB.\n\n\
         A row outside ±30 % is a miss of the model and is reported as one.\n",
        if calibrated {
            "calibrated in this run"
        } else {
            "given with --host-profile"
        },
        o.dontneed_bytes >> 20,
        o.repeat,
        o.faulter_bytes >> 10,
        o.munmap_bytes >> 20,
        o.munmap_repeat,
        c.measured.faults_during_munmap,
        o.reader_bytes >> 30,
        o.repeat,
        o.wis_size
            .unwrap_or(usermm_workloads::will_it_scale::Test::PageFault1.default_size())
            >> 10,
        o.wis_seconds,
        o.wis_period_ms,
        usermm_host::quiet::LOAD_ALLOWANCE,
        usermm_host::quiet::STEAL_LIMIT_PCT,
        usermm_host::quiet::CPU_SHARE_MIN * 100.0,
    );
    let mut text = text;
    for r in c.rows.iter().filter(|r| r.host_busy) {
        text += &format!("- *host busy*, {}: {}\n", r.name, r.quiet.why.join("; "));
    }
    Section {
        heading: super::Experiment::HostCheck.heading().into(),
        text,
        tables: vec![t],
        plots: Vec::new(),
    }
}

fn verdict(c: &HostCheck) -> String {
    let n = c.rows.iter().filter(|r| within(r.error)).count();
    let busy = c.rows.iter().filter(|r| r.host_busy).count();
    let rows: Vec<String> = c
        .rows
        .iter()
        .map(|r| {
            let tag = r.name.split(' ').next().unwrap_or("");
            let what = if r.name.contains("p50") {
                " p50".to_string()
            } else if r.name.contains("p99") {
                " p99".to_string()
            } else if let Some(at) = r.name.find("page_fault1, ") {
                // "(d) ... page_fault1, 2 threads: faults/s" -> "(d) 2 threads"
                let rest = &r.name[at + "page_fault1, ".len()..];
                format!(" {}", rest.split(':').next().unwrap_or(""))
            } else {
                String::new()
            };
            format!("{tag}{what} {}", error_cell(r))
        })
        .collect();
    format!(
        "{n} of {} rows within ±30 % of this host's measurement, {busy} host busy (not \
         counted) ({})",
        c.rows.len() - busy,
        rows.join(", ")
    )
}
