//! `usermm reproduce`: the four experiments at a scale that fits this machine (or the seeds'
//! own with `--scale seed`), the seeds' tables beside ours, and `report/` written with
//! [`crate::report::write_report`].

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::args::GlobalArgs;
use crate::report::{bar_plot, line_plot, write_report, Section, Series, Table};

/// `--scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// Sizes that run in a few minutes on 2 cores / 24 GiB.
    Default,
    /// The seeds' own sizes (320 GiB, 100 GiB, 80 GB, 11 000 cgroups).
    Seed,
}

/// One experiment of `reproduce`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Experiment {
    /// Seeds 000/001: parallel free at teardown.
    Bigfree,
    /// Seed 002: per-mm huge zero page reference.
    HugeZero,
    /// Seed 003: munmap under a downgraded lock.
    Munmap,
    /// Seed 004: percpu partial chunk depopulation.
    Percpu,
}

impl Experiment {
    pub const ALL: [Experiment; 4] = [
        Experiment::Bigfree,
        Experiment::HugeZero,
        Experiment::Munmap,
        Experiment::Percpu,
    ];
}

#[derive(Debug, Clone, Args, Serialize)]
pub struct ReproduceArgs {
    /// How big to run.
    #[arg(long, value_name = "SCALE", default_value = "default")]
    pub scale: Scale,
    /// Directory for report.md, results.json and the plots.
    #[arg(long, value_name = "DIR", default_value = "report")]
    pub out: PathBuf,
    /// Run only these experiments (repeatable or a comma list; default: all).
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    pub only: Vec<Experiment>,
}

impl ReproduceArgs {
    /// The experiments to run, in the seeds' order, each once.
    pub fn experiments(&self) -> Vec<Experiment> {
        Experiment::ALL
            .into_iter()
            .filter(|e| self.only.is_empty() || self.only.contains(e))
            .collect()
    }
}

/// What one experiment gives the report: its section, its JSON (with `vanilla`, `patched`,
/// `ratio` and the seed's figures) and a one-line verdict.
#[derive(Debug)]
pub struct Outcome {
    pub name: &'static str,
    pub section: Section,
    pub json: serde_json::Value,
    pub verdict: String,
}

pub fn run(args: &ReproduceArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let out = &args.out;
    std::fs::create_dir_all(out)?;
    let t0 = std::time::Instant::now();
    let mut outcomes = Vec::new();
    for e in args.experiments() {
        eprintln!("usermm reproduce: {} ...", e.name());
        let te = std::time::Instant::now();
        let o = match e {
            Experiment::Bigfree => bigfree(args.scale, out)?,
            Experiment::HugeZero => huge_zero(args.scale, out)?,
            Experiment::Munmap => munmap(args.scale, out)?,
            Experiment::Percpu => percpu(args.scale, out)?,
        };
        eprintln!(
            "usermm reproduce: {} done in {:.1} s: {}",
            e.name(),
            te.elapsed().as_secs_f64(),
            o.verdict
        );
        if !g.json {
            println!("== {} ==", o.section.heading);
            for t in &o.section.tables {
                println!("{}", t.render_text());
            }
            println!("verdict: {}\n", o.verdict);
        }
        outcomes.push(o);
    }
    let mut sections = vec![Section {
        heading: "Summary".into(),
        text: outcomes
            .iter()
            .map(|o| format!("- **{}**: {}\n", o.name, o.verdict))
            .collect::<String>()
            + &format!("\nTotal run time: {:.0} s.\n", t0.elapsed().as_secs_f64()),
        ..Default::default()
    }];
    sections.extend(outcomes.iter().map(|o| o.section.clone()));
    let mut results = serde_json::Map::new();
    results.insert("scale".into(), serde_json::to_value(args.scale)?);
    results.insert("wall_seconds".into(), t0.elapsed().as_secs_f64().into());
    results.insert(
        "host_facts".into(),
        serde_json::to_value(usermm_host::facts::facts())?,
    );
    for o in &outcomes {
        results.insert(o.name.into(), o.json.clone());
    }
    let results = serde_json::Value::Object(results);
    write_report(
        out,
        "usermm: the seed experiments, vanilla vs patched",
        &sections,
        &results,
    )?;
    if g.json {
        super::print_json(&results)?;
    } else {
        println!("report written to {}/report.md", out.display());
    }
    Ok(())
}

impl Experiment {
    pub fn name(self) -> &'static str {
        match self {
            Experiment::Bigfree => "bigfree",
            Experiment::HugeZero => "huge-zero",
            Experiment::Munmap => "munmap",
            Experiment::Percpu => "percpu",
        }
    }
}

fn pct(x: f64) -> String {
    format!("{:+.0} %", (x - 1.0) * 100.0)
}

/// Seed 002: `usemem -n 72 --readonly -j 0x200000 100G` both ways. It is cheap (the huge zero
/// page maps 2 MiB per fault and nothing is written), so the default scale is the seed's own.
fn huge_zero(_scale: Scale, out: &std::path::Path) -> anyhow::Result<Outcome> {
    use usermm::config::{BackingMode, MachineConfig, ThpMode};
    use usermm_workloads::usemem::{self, UsememOpts};
    let opts = UsememOpts {
        size: 100 << 30,
        nproc: 72,
        readonly: true,
        step: 2 << 20,
        ..UsememOpts::default()
    };
    let base = MachineConfig {
        mem: 16 << 30,
        cpus: 72,
        nodes: 2,
        backing: BackingMode::Sparse,
        thp: ThpMode::Always,
        ..MachineConfig::default()
    };
    let (v, p) = usemem::run_ab(&base, &opts).map_err(|e| anyhow::anyhow!("usemem: {e}"))?;
    let ratio = p.throughput_kbps as f64 / v.throughput_kbps.max(1) as f64;
    let faults_v = v.vmstat_delta.get(usermm::stats::VmItem::Pgfault);
    let host = usermm_host::measure::host_usemem_readonly(4 << 30, 2 << 20).ok();
    let engine_fps = faults_v as f64 / (v.wall_usecs.max(1) as f64 / 1e6);
    let mut t = Table::new(
        "usemem -n 72 --readonly -j 0x200000 100G (72 mms on this machine's cores)",
        [
            "",
            "seed vanilla (4.8)",
            "seed patched",
            "usermm vanilla",
            "usermm patched",
        ],
    );
    t.push_row([
        "get/put_huge_zero_page share of cycles".to_string(),
        "54.03 %".into(),
        "0.11 %".into(),
        "perf only (README)".into(),
        "perf only (README)".into(),
    ]);
    t.push_row([
        "global refcount operations per mm".to_string(),
        "≈ 2 × 51 200".into(),
        "2".into(),
        format!("{:.0}", v.huge_zero.ops_per_mm),
        format!("{:.0}", p.huge_zero.ops_per_mm),
    ]);
    t.push_row([
        "page faults (total)".to_string(),
        "3 686 400".into(),
        "3 686 400".into(),
        faults_v.to_string(),
        p.vmstat_delta
            .get(usermm::stats::VmItem::Pgfault)
            .to_string(),
    ]);
    t.push_row([
        "thp_zero_page_alloc".to_string(),
        "1".into(),
        "1".into(),
        v.huge_zero.thp_zero_page_alloc.to_string(),
        p.huge_zero.thp_zero_page_alloc.to_string(),
    ]);
    t.push_row([
        "throughput (sum of KB/s)".to_string(),
        "1.00".into(),
        "+164 %".into(),
        v.throughput_kbps.to_string(),
        format!("{} ({})", p.throughput_kbps, pct(ratio)),
    ]);
    let mut host_text = String::new();
    if let Some(h) = &host {
        let hfps = h.faults as f64 / (h.ns.max(1) as f64 / 1e9);
        host_text = format!(
            "Host kernel, same shape (one process, 4 GiB, MADV_HUGEPAGE, one read per 2 MiB): {} faults, {:.0} faults/s; engine (vanilla, 72 mms): {:.0} faults/s.\n",
            h.faults, hfps, engine_fps
        );
    }
    let plot = out.join("huge_zero_ops.svg");
    bar_plot(
        &plot,
        "Huge zero page: global refcount operations per mm (log-free view: vanilla vs patched)",
        "operations per mm",
        &[
            (
                "seed (expected)".into(),
                vec![("vanilla".into(), 102_400.0), ("patched".into(), 2.0)],
            ),
            (
                "usermm".into(),
                vec![
                    ("vanilla".into(), v.huge_zero.ops_per_mm),
                    ("patched".into(), p.huge_zero.ops_per_mm),
                ],
            ),
        ],
    )?;
    let plot2 = out.join("huge_zero_throughput.svg");
    bar_plot(
        &plot2,
        "usemem --readonly throughput, patched relative to vanilla",
        "relative throughput",
        &[
            (
                "seed (72 procs, Haswell-EP)".into(),
                vec![("vanilla".into(), 1.0), ("patched".into(), 2.64)],
            ),
            (
                "usermm (72 mms, this machine)".into(),
                vec![("vanilla".into(), 1.0), ("patched".into(), ratio)],
            ),
        ],
    )?;
    let reproduced = v.huge_zero.global_ops == 2 * faults_v && p.huge_zero.ops_per_mm == 2.0;
    let verdict = format!(
        "{} global counter: {:.0} ops/mm vanilla (2 per fault) → {:.0} patched; throughput {} with 72 mms on {} host cores (the seed: +164 % on 72 cores; the contention on one cache line grows with cores).",
        if reproduced { "reproduced —" } else { "NOT reproduced —" },
        v.huge_zero.ops_per_mm,
        p.huge_zero.ops_per_mm,
        pct(ratio),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let text = format!(
        "Seed 002 (\"thp: reduce usage of huge zero page's atomic counter\"). Every read fault maps the huge \
zero page with a deposited page table; vanilla takes a global reference per fault and drops one per zapped PMD, \
patched takes one per mm (`MMF_HUGE_ZERO_PAGE`) and drops it in `mmput`.\n\n{host_text}"
    );
    Ok(Outcome {
        name: "huge-zero",
        section: Section {
            heading: "Seed 002: huge zero page reference per mm".into(),
            text,
            tables: vec![t],
            plots: vec![plot, plot2],
        },
        json: serde_json::json!({
            "seed": {"cycles_share_vanilla": 0.5403, "cycles_share_patched": 0.0011, "throughput_ratio": 2.64},
            "vanilla": {"throughput_kbps": v.throughput_kbps, "global_ops": v.huge_zero.global_ops, "ops_per_mm": v.huge_zero.ops_per_mm, "faults": faults_v, "thp_zero_page_alloc": v.huge_zero.thp_zero_page_alloc, "wall_usecs": v.wall_usecs},
            "patched": {"throughput_kbps": p.throughput_kbps, "global_ops": p.huge_zero.global_ops, "ops_per_mm": p.huge_zero.ops_per_mm, "faults": p.vmstat_delta.get(usermm::stats::VmItem::Pgfault), "thp_zero_page_alloc": p.huge_zero.thp_zero_page_alloc, "wall_usecs": p.wall_usecs},
            "ratio": {"throughput": ratio, "global_ops": v.huge_zero.global_ops as f64 / p.huge_zero.global_ops.max(1) as f64},
            "host": host,
            "config": base,
        }),
        verdict,
    })
}

/// Seeds 000/001: one touched 4K mapping freed by munmap, vanilla then one row per max_active.
/// Default scale 16 GiB (3 runs a row); the seed's 320 GiB with `--scale seed`.
fn bigfree(scale: Scale, out: &std::path::Path) -> anyhow::Result<Outcome> {
    use usermm_workloads::bigfree;
    let (size, repeat) = match scale {
        Scale::Default => (16u64 << 30, 3),
        Scale::Seed => (320u64 << 30, 1),
    };
    let ma = [1u32, 2, 4, 8, 16, 32];
    let base = bigfree::default_config(size, &ma, None, None);
    let r = bigfree::run_table(size, &ma, repeat, &base, &mut |_| {})
        .map_err(|e| anyhow::anyhow!("bigfree: {e}"))?;
    let seed = &r.seed;
    let mut t = Table::new(
        format!(
            "free() of one touched {} GiB mapping, THP off (seed: 320 GiB, 4 nodes / 144 threads)",
            size >> 30
        ),
        [
            "",
            "seed time (s)",
            "usermm time (s)",
            "± spread",
            "speedup",
            "ns/page",
            "worker CPU share",
            "zone.lock contentions",
        ],
    );
    for row in &r.rows {
        let st = match row.max_active {
            _ if !r.is_seed_row(row) => "-".into(),
            None => format!("{:.2}", seed.vanilla_s),
            Some(m) => seed.time_of(m).map_or(String::new(), |x| format!("{x:.2}")),
        };
        t.push_row([
            row.label.clone(),
            st,
            format!("{:.3}", row.time_s),
            format!("{:.1} %", row.spread_pct),
            format!("{:.2}", row.speedup),
            format!("{:.1}", row.ns_per_page),
            format!("{:.0} %", row.worker_cpu_share * 100.0),
            row.zone_contentions.to_string(),
        ]);
    }
    let plot = out.join("bigfree.svg");
    let mut ours = Series {
        name: "usermm (this machine)".into(),
        ..Default::default()
    };
    let mut theirs = Series {
        name: "seed (144 threads), scaled to vanilla = 1".into(),
        dashed: true,
        ..Default::default()
    };
    for row in r.rows.iter().filter(|row| r.is_seed_row(row)) {
        if let Some(m) = row.max_active {
            ours.points
                .push((m as f64, row.time_s / r.vanilla_s.max(1e-9)));
            if let Some(x) = seed.time_of(m) {
                theirs.points.push((m as f64, x / seed.vanilla_s));
            }
        }
    }
    line_plot(
        &plot,
        "Free time vs max_active, relative to vanilla",
        "max_active",
        "time / vanilla time",
        &[ours, theirs],
        true,
    )?;
    let best = r.patched.as_ref();
    // The seed's shape that 2 cores can show: one worker beside the zapping task already
    // helps, and two make the free at least 1.5x faster (seed: 1.21x and 1.91x).
    let ma2 = r
        .rows
        .iter()
        .find(|x| r.is_seed_row(x) && x.max_active == Some(2))
        .map(|x| x.speedup);
    let verdict = match (best, ma2) {
        (Some(b), Some(s2)) => format!(
            "{} — max_active 2 frees {s2:.2}× faster than inline (seed 1.91×); best {} {:.3} s vs {:.3} s inline: {:.2}× (seed best: 10.8 → 4.77 s, 2.26× at max_active 8); past 2 workers the curve is flat on this host's {} cores, so the seed's knee at workers ≈ nodes cannot show.",
            if s2 >= 1.5 { "reproduced" } else { "not reproduced" },
            b.label,
            b.time_s,
            r.vanilla_s,
            r.ratio,
            r.host_cpus
        ),
        (Some(b), None) => format!(
            "best {} frees in {:.3} s vs {:.3} s inline: {:.2}× (seed best: 10.8 → 4.77 s, 2.26× at max_active 8).",
            b.label, b.time_s, r.vanilla_s, r.ratio
        ),
        (None, _) => "no parallel row".into(),
    };
    let verdict = match &r.beyond {
        Some(x) => format!(
            "{verdict} Beyond the seed, with 6.7+ pcp auto-tuning: inline {:.2}×, max_active {} {:.2}× ({:.2}× the patch alone).",
            x.inline_speedup,
            x.max_active,
            x.parallel_speedup,
            x.over_patch.unwrap_or(0.0)
        ),
        None => verdict,
    };
    let text = "Seeds 000/001 (\"mm: support parallel free of memory\", not merged). The gather hands batch lists \
of 256K pages to `batch_free_wq`; the zapping task keeps zapping and `tlb_finish_mmu` waits for every job. \
Contention is real: `zone.lock` and `lru_lock` per node on the free path. The worker CPU share answers the \
review's question of who pays for the work. The `+ pcp tune` rows go past the seed: Linux 6.7+ grows \
the pcp drain with a run of frees (up to 992 pages per `zone.lock` round trip instead of 31), the \
allocator-side fix the review asked for, alone and under the patch.\n".to_string();
    Ok(Outcome {
        name: "bigfree",
        section: Section {
            heading: "Seeds 000/001: parallel free at teardown".into(),
            text,
            tables: vec![t],
            plots: vec![plot],
        },
        json: serde_json::json!({
            "seed": seed,
            "vanilla": {"time_s": r.vanilla_s, "row": r.rows.first()},
            "patched": best,
            "ratio": r.ratio,
            "beyond": r.beyond,
            "rows": r.rows,
            "config": r.config,
            "warnings": r.warnings,
        }),
        verdict,
    })
}

/// Seed 003: munmap of a populated mapping with a faulter in another VMA, both policies.
/// Default scale 8 GiB (2 runs a policy); the seed's 80 GB with `--scale seed`.
fn munmap(scale: Scale, out: &std::path::Path) -> anyhow::Result<Outcome> {
    use usermm_workloads::munmap_test::{self, MunmapTestOpts};
    let size = match scale {
        Scale::Default => 8u64 << 30,
        Scale::Seed => 80_000_000_000u64 & !((2 << 20) - 1),
    };
    let mut opts = MunmapTestOpts::new(size, 1);
    opts.repeat = 2;
    let r = munmap_test::run_ab(&opts).map_err(|e| anyhow::anyhow!("munmap-test: {e}"))?;
    let (v, p) = (&r.vanilla.median, &r.patched.median);
    let us = |ns: u64| format!("{:.1}", ns as f64 / 1000.0);
    let mut t = Table::new(
        format!(
            "munmap of {} GiB of 4K pages, 1 faulter in its own VMA (seed: 80 GB, 32 cores)",
            size >> 30
        ),
        [
            "",
            "seed vanilla",
            "seed patched",
            "usermm vanilla",
            "usermm patched",
        ],
    );
    t.push_row([
        "exclusive mmap_lock hold (µs)".to_string(),
        "2 485 692".into(),
        "< 10 (\"µs level\")".into(),
        us(v.exclusive_ns),
        us(p.exclusive_ns),
    ]);
    t.push_row([
        "zap under the read lock (µs)".to_string(),
        "0".into(),
        "2 485 684".into(),
        us(v.read_ns),
        us(p.read_ns),
    ]);
    t.push_row([
        "total munmap (µs)".to_string(),
        "".into(),
        "2 485 692".into(),
        us(v.total_ns),
        us(p.total_ns),
    ]);
    t.push_row([
        "faulter p99 during munmap (µs)".to_string(),
        "".into(),
        "".into(),
        us(v.during.p99_ns),
        us(p.during.p99_ns),
    ]);
    t.push_row([
        "faulter p99 without munmap (µs)".to_string(),
        "".into(),
        "".into(),
        us(v.baseline.p99_ns),
        us(p.baseline.p99_ns),
    ]);
    t.push_row([
        "faulter max during munmap (µs)".to_string(),
        "".into(),
        "".into(),
        us(v.during.max_ns),
        us(p.during.max_ns),
    ]);
    let plot = out.join("munmap_hold.svg");
    bar_plot(
        &plot,
        "munmap: exclusive mmap_lock hold (ms)",
        "ms",
        &[
            (
                "seed (80 GB)".into(),
                vec![("vanilla".into(), 2485.692), ("patched".into(), 0.01)],
            ),
            (
                format!("usermm ({} GiB)", size >> 30),
                vec![
                    ("vanilla".into(), v.exclusive_ns as f64 / 1e6),
                    ("patched".into(), p.exclusive_ns as f64 / 1e6),
                ],
            ),
        ],
    )?;
    let ok = r.ratio.exclusive_hold >= 1000.0 && p.exclusive_ns < 1_000_000;
    let verdict = format!(
        "{} exclusive hold {:.1} ms → {:.1} µs ({:.0}× shorter); faulter p99 during munmap {:.1} µs vs {:.1} µs without downgrade.",
        if ok { "reproduced —" } else { "NOT reproduced —" },
        v.exclusive_ns as f64 / 1e6,
        p.exclusive_ns as f64 / 1e3,
        r.ratio.exclusive_hold,
        p.during.p99_ns as f64 / 1e3,
        v.during.p99_ns as f64 / 1e3,
    );
    let text = "Seed 003 (\"mm: zap pages with read mmap_sem in munmap for large mapping\"). munmap finds, splits \
and detaches the VMAs under the write lock, downgrades, then zaps and frees page tables under the read lock; a \
racing fault finds no VMA (SEGV_MAPERR).\n".to_string();
    Ok(Outcome {
        name: "munmap",
        section: Section {
            heading: "Seed 003: munmap under a downgraded mmap lock".into(),
            text,
            tables: vec![t],
            plots: vec![plot],
        },
        json: serde_json::json!({
            "seed": munmap_test::SEED,
            "vanilla": r.vanilla,
            "patched": r.patched,
            "ratio": r.ratio,
        }),
        verdict,
    })
}

/// Seed 004: the cgroup script both ways. Cheap (well under a second): the seed's own scale.
fn percpu(_scale: Scale, out: &std::path::Path) -> anyhow::Result<Outcome> {
    use usermm_workloads::percpu_test::{self, PercpuTestOpts};
    let opts = PercpuTestOpts::default();
    let r = percpu_test::run_ab(&opts, &usermm::MachineConfig::default())
        .map_err(|e| anyhow::anyhow!("percpu-test: {e}"))?;
    let t = super::percpu_test::table(&r);
    let plot = out.join("percpu.svg");
    let (v, p) = (&r.vanilla.rows, &r.patched.rows);
    let phase = |name: &str, sv: u64, sp: u64, uv: u64, up: u64| {
        (
            name.to_string(),
            vec![
                ("seed vanilla".to_string(), sv as f64 / 1024.0),
                ("seed patched".to_string(), sp as f64 / 1024.0),
                ("usermm vanilla".to_string(), uv as f64 / 1024.0),
                ("usermm patched".to_string(), up as f64 / 1024.0),
            ],
        )
    };
    let (sv, sp) = (r.seed_vanilla_kb, r.seed_patched_kb);
    bar_plot(
        &plot,
        "Percpu memory over the script's three phases",
        "Percpu (MiB)",
        &[
            phase("start", sv[0], sp[0], v.start_kb, p.start_kb),
            phase(
                "after creating",
                sv[1],
                sp[1],
                v.after_create_kb,
                p.after_create_kb,
            ),
            phase(
                "after deleting",
                sv[2],
                sp[2],
                v.after_delete_kb,
                p.after_delete_kb,
            ),
        ],
    )?;
    let ok = (r.vanilla_plateau - 1.0).abs() <= 0.01 && r.ratio_after_delete >= 3.0;
    let verdict = format!(
        "{} vanilla keeps {:.1} % of its peak after deletion, patched depopulates to {} kB: {:.2}× smaller (seed 3.55×); ideal {} kB. Start row differs (no boot-time percpu users modelled).",
        if ok { "reproduced —" } else { "NOT reproduced —" },
        r.vanilla_plateau * 100.0,
        p.after_delete_kb,
        r.ratio_after_delete,
        r.vanilla.ideal_after_delete_kb,
    );
    let text = "Seed 004 (\"percpu: partial chunk depopulation\"). Each memory cgroup allocates its \
percpu objects (2021 recipe) on a machine whose CPU count was calibrated to the seed's row \"after creating\" \
(15 CPUs); the row after deletion comes out of the allocator untuned. Vanilla returns pages only when a whole \
chunk is free; patched isolates chunks with ≥ ¼ empty populated pages and depopulates them in the balance work.\n"
        .to_string();
    Ok(Outcome {
        name: "percpu",
        section: Section {
            heading: "Seed 004: percpu partial chunk depopulation".into(),
            text,
            tables: vec![t],
            plots: vec![plot],
        },
        json: serde_json::json!({
            "seed": {"vanilla_kb": sv, "patched_kb": sp, "ratio_after_delete": sv[2] as f64 / sp[2] as f64},
            "vanilla": r.vanilla,
            "patched": r.patched,
            "ratio": {"after_delete": r.ratio_after_delete, "vanilla_plateau": r.vanilla_plateau},
            "ideal_after_delete_kb": r.vanilla.ideal_after_delete_kb,
        }),
        verdict,
    })
}
