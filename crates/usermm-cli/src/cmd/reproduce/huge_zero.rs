//! Seed 002 in `reproduce`: `usemem -n 72 --readonly -j 0x200000 100G` both ways, the global
//! huge-zero refcount operations per mm, the throughput ratio, and the host's fault rate on
//! the same shape. Cheap (the huge zero page maps 2 MiB per fault and nothing is written), so
//! every scale runs the seed's own size.

use std::path::Path;

use serde::Serialize;
use usermm::config::{MachineConfig, TimeMode};
use usermm::stats::VmItem;
use usermm_host::measure::HostUsememResult;
use usermm_workloads::seeds::{HugeZero, HUGE_ZERO};
use usermm_workloads::usemem::{self, UsememResult};

use super::experiment::{Given, Outcome};
use crate::report::format::{group, pct};
use crate::report::{bar_plot, Table};

/// `huge-zero` in `results.json`.
#[derive(Debug, Serialize)]
pub struct HugeZeroRecord {
    pub seed: HugeZero,
    pub vanilla: RunFigures,
    pub patched: RunFigures,
    pub ratio: HugeZeroRatio,
    /// The host kernel on the same shape (one process, 4 GiB), if it could be measured.
    pub host: Option<HostUsememResult>,
    pub config: MachineConfig,
    /// `measured (this host)` or `modelled (profile NAME)`: how usermm's times were obtained.
    pub time: String,
}

/// One machine's usemem run, reduced to what seed 002 is about.
#[derive(Debug, Serialize)]
pub struct RunFigures {
    pub throughput_kbps: u64,
    pub global_ops: i64,
    pub ops_per_mm: f64,
    pub faults: i64,
    pub thp_zero_page_alloc: i64,
    pub wall_usecs: u64,
    /// Virtual time: share of the CPUs' busy time on the huge zero page's refcount line.
    pub huge_zero_line_share: Option<f64>,
}

impl RunFigures {
    fn of(r: &UsememResult) -> Self {
        RunFigures {
            throughput_kbps: r.throughput_kbps,
            global_ops: r.huge_zero.global_ops,
            ops_per_mm: r.huge_zero.ops_per_mm,
            faults: r.vmstat_delta.get(VmItem::Pgfault),
            thp_zero_page_alloc: r.huge_zero.thp_zero_page_alloc,
            wall_usecs: r.wall_usecs,
            huge_zero_line_share: r.huge_zero_line_share,
        }
    }
}

/// Patched over vanilla throughput; vanilla over patched global operations.
#[derive(Debug, Serialize)]
pub struct HugeZeroRatio {
    pub throughput: f64,
    pub global_ops: f64,
}

pub(super) fn run(g: &Given<'_>) -> anyhow::Result<Outcome<HugeZeroRecord>> {
    let seed = HUGE_ZERO;
    let (mut base, opts) = usemem::seed_002_run();
    g.time.apply(&mut base);
    g.time.check(&mut base, None)?;
    let label = usermm_workloads::TimeLabel::of(&base).time;
    // Where usermm's throughput comes from: this host's cores, or the profile's modelled CPUs.
    let where_ = match base.time.mode {
        TimeMode::Wall => format!("{} host cores", usermm_host::facts::usable_cpus()),
        TimeMode::Virtual => format!("{} CPUs, {label}", base.cpus),
    };
    let (v, p) = usemem::run_ab(&base, &opts).map_err(|e| anyhow::anyhow!("usemem: {e}"))?;
    let (v, p) = (RunFigures::of(&v), RunFigures::of(&p));
    let ratio = p.throughput_kbps as f64 / v.throughput_kbps.max(1) as f64;
    let host = usermm_host::measure::host_usemem_readonly(4 << 30, 2 << 20).ok();
    let engine_fps = v.faults as f64 / (v.wall_usecs.max(1) as f64 / 1e6);
    let t = table(&v, &p, ratio, &label);
    let mut host_text = String::new();
    if let Some(h) = &host {
        let hfps = h.faults as f64 / (h.ns.max(1) as f64 / 1e9);
        host_text = format!(
            "Host kernel, same shape (one process, 4 GiB, MADV_HUGEPAGE, one read per 2 MiB): {} faults, {:.0} faults/s; engine (vanilla, {} mms): {:.0} faults/s.\n",
            h.faults, hfps, seed.nproc, engine_fps
        );
    }
    let plot = g.out.join("huge_zero_ops.svg");
    let plot2 = g.out.join("huge_zero_throughput.svg");
    plots(&v, &p, ratio, &where_, &plot, &plot2)?;
    // The mechanism, counted; the seed's one verdict is judged on the modelled timing
    // (`sides::huge_zero_verdict`).
    let as_seed = v.global_ops == 2 * v.faults && p.ops_per_mm == seed.ops_per_mm_patched as f64;
    let verdict = format!(
        "global counter {}: {:.0} ops/mm vanilla (2 per fault) → {:.0} patched; throughput {} with {} mms on {where_} (the seed: {} on {} cores; the contention on one cache line grows with cores).",
        if as_seed { "as the seed's" } else { "NOT as the seed's" },
        v.ops_per_mm,
        p.ops_per_mm,
        pct(ratio),
        seed.nproc,
        pct(seed.throughput_ratio),
        seed.nproc,
    );
    let text = format!(
        "Seed 002 (\"thp: reduce usage of huge zero page's atomic counter\"). Every read fault maps the huge \
zero page with a deposited page table; vanilla takes a global reference per fault and drops one per zapped PMD, \
patched takes one per mm (`MMF_HUGE_ZERO_PAGE`) and drops it in `mmput`.\n\n{host_text}"
    );
    let record = HugeZeroRecord {
        seed,
        ratio: HugeZeroRatio {
            throughput: ratio,
            global_ops: v.global_ops as f64 / p.global_ops.max(1) as f64,
        },
        vanilla: v,
        patched: p,
        host,
        config: base,
        time: label.clone(),
    };
    Ok(Outcome::new(
        text,
        vec![t],
        vec![plot, plot2],
        record,
        verdict,
    ))
}

/// The seed's table beside the engine's two runs.
fn table(v: &RunFigures, p: &RunFigures, ratio: f64, label: &str) -> Table {
    let seed = HUGE_ZERO;
    let mut t = Table::new(
        format!(
            "usemem -n {} --readonly -j {:#x} {}G ({} mms; seed measured, usermm {})",
            seed.nproc,
            seed.step,
            seed.size >> 30,
            seed.nproc,
            label
        ),
        [
            String::new(),
            format!("seed vanilla ({})", seed.kernel),
            "seed patched".into(),
            "usermm vanilla".into(),
            "usermm patched".into(),
        ],
    );
    let share = |f: &RunFigures| {
        f.huge_zero_line_share.map_or_else(
            || "perf only (README)".to_string(),
            |s| format!("{:.2} % (refcount line, modelled)", s * 100.0),
        )
    };
    t.push_row([
        "get_huge_zero_page share of cycles".to_string(),
        format!("{:.2} %", seed.cycles_share_vanilla * 100.0),
        format!("{:.2} %", seed.cycles_share_patched * 100.0),
        share(v),
        share(p),
    ]);
    t.push_row([
        "global refcount operations per mm".to_string(),
        format!("≈ 2 × {}", group(seed.faults_per_mm())),
        seed.ops_per_mm_patched.to_string(),
        format!("{:.0}", v.ops_per_mm),
        format!("{:.0}", p.ops_per_mm),
    ]);
    t.push_row([
        "page faults (total)".to_string(),
        group(seed.faults()),
        group(seed.faults()),
        v.faults.to_string(),
        p.faults.to_string(),
    ]);
    t.push_row([
        "thp_zero_page_alloc".to_string(),
        seed.thp_zero_page_alloc.to_string(),
        seed.thp_zero_page_alloc.to_string(),
        v.thp_zero_page_alloc.to_string(),
        p.thp_zero_page_alloc.to_string(),
    ]);
    t.push_row([
        "throughput (sum of KB/s)".to_string(),
        format!("{:.2}", 1.0),
        pct(seed.throughput_ratio),
        v.throughput_kbps.to_string(),
        format!("{} ({})", p.throughput_kbps, pct(ratio)),
    ]);
    t
}

/// The operations per mm and the relative throughput, the seed's beside the engine's.
fn plots(
    v: &RunFigures,
    p: &RunFigures,
    ratio: f64,
    where_: &str,
    plot: &Path,
    plot2: &Path,
) -> anyhow::Result<()> {
    let seed = HUGE_ZERO;
    bar_plot(
        plot,
        "Huge zero page: global refcount operations per mm (log-free view: vanilla vs patched)",
        "operations per mm",
        &[
            (
                "seed (expected)".into(),
                vec![
                    ("vanilla".into(), seed.ops_per_mm_vanilla() as f64),
                    ("patched".into(), seed.ops_per_mm_patched as f64),
                ],
            ),
            (
                "usermm".into(),
                vec![
                    ("vanilla".into(), v.ops_per_mm),
                    ("patched".into(), p.ops_per_mm),
                ],
            ),
        ],
    )?;
    bar_plot(
        plot2,
        "usemem --readonly throughput, patched relative to vanilla",
        "relative throughput",
        &[
            (
                format!("seed ({} procs, {})", seed.nproc, seed.machine),
                vec![
                    ("vanilla".into(), 1.0),
                    ("patched".into(), seed.throughput_ratio),
                ],
            ),
            (
                format!("usermm ({} mms, {where_})", seed.nproc),
                vec![("vanilla".into(), 1.0), ("patched".into(), ratio)],
            ),
        ],
    )
}
