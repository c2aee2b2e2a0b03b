//! `usermm bench`: the performance dashboard. Every hot path of the engine — sparse and full
//! backing — beside the host kernel doing the same work, in one run, as ratios
//! ([`usermm_workloads::bench`] says what each path does and why the comparison is fair).
//!
//! The text output is one table (medians of thread CPU time, with the range over the
//! repeats), the same samples' wall-clock medians, the engine's zeroing bandwidth, and the
//! the performance targets (the VMA gap index's, the mmap-munmap row's, speed at scale's) checked
//! against this run. `--json` prints
//! the same record: per path `path`, `engine_full_ns`, `engine_sparse_ns`, `host_ns` (ns per
//! `unit`, on `clock`), and `memset_gib_s` and `mmaps` (one-page mappings per mmap-munmap
//! sample) once.
//!
//! The engine flags describe both machines, on top of [`bench::default_config`] (2 CPUs, THP
//! `madvise`, `prefault=on`); the memory size and the backing mode are the bench's own (sized
//! from `--size`; one machine of each backing), so `--mem` and `--backing` are refused.

use clap::Args;
use serde::Serialize;
use usermm_workloads::bench::{self, BenchError, BenchOpts, BenchPath, BenchResult, PathResult};

use crate::args::{parse_size_arg, usage, EngineArgs, GlobalArgs, UsageError};
use crate::report::format::human_bytes;
use crate::report::{Progress, Table};

#[derive(Debug, Clone, Args, Serialize)]
pub struct BenchArgs {
    /// Run only these paths (a comma list): populate-4k, populate-thp, munmap-4k,
    /// huge-zero-read, zero-read-4k, bigfree-virtual, usemem-ab-virtual, free-2-threads,
    /// mmap-munmap-4k, fork-exit, random-write-4k, bigfree-nodes.
    #[arg(long, value_name = "PATH[,PATH...]", value_parser = parse_path, value_delimiter = ',')]
    pub only: Vec<BenchPath>,
    /// Bytes each populate and munmap maps (the huge-zero read walks 8 times as much).
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = parse_size_arg)]
    pub size: u64,
    /// Timed repeats of every path (the figures are medians).
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: u32,
    /// Leave the host kernel out (engine figures only).
    #[arg(long)]
    pub no_host: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

fn parse_path(s: &str) -> Result<BenchPath, String> {
    BenchPath::parse(s).ok_or_else(|| {
        let names: Vec<_> = BenchPath::ALL.iter().map(|p| p.name()).collect();
        format!("unknown path '{s}' (paths: {})", names.join(", "))
    })
}

/// One performance target (the VMA gap index's, speed at scale's), checked against this run.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub what: String,
    /// `None` when the run did not measure what the target needs.
    pub met: Option<bool>,
    pub measured: String,
}

/// The record `--json` prints.
#[derive(Debug, Serialize)]
pub struct BenchRecord {
    #[serde(flatten)]
    pub result: BenchResult,
    pub targets: Vec<Target>,
}

fn path(r: &BenchResult, p: BenchPath) -> Option<&PathResult> {
    r.paths.iter().find(|x| x.path == p)
}

/// The targets of the VMA gap index's work (engine paths against the host kernel), the
/// mmap-munmap row's (engine within 2× of the host kernel), and those of "Speed at scale"
/// (fork+exit and random write faults no slower than the host kernel; bigfree at 64 nodes
/// within 1.2× of 4 nodes on both clocks), and will-it-scale's page_fault1 at one task no
/// slower than the host kernel (on the wall clock, as will-it-scale counts), evaluated on one
/// run (on the CPU-time figures but for that one).
pub fn targets(r: &BenchResult) -> Vec<Target> {
    let mut t = Vec::new();
    let mut add = |what: &str, v: Option<(bool, String)>| {
        t.push(Target {
            what: what.into(),
            met: v.as_ref().map(|x| x.0),
            measured: v.map_or_else(|| "not measured".into(), |x| x.1),
        })
    };
    let p4 = path(r, BenchPath::Populate4k);
    let pt = path(r, BenchPath::PopulateThp);
    add(
        "4 KiB populate, full backing: ≥ 1.5× the host kernel's rate",
        p4.and_then(|p| p.host_over_full)
            .map(|x| (x >= 1.5, format!("{x:.2}×"))),
    );
    add(
        "THP populate, full backing: ≥ the host kernel's rate",
        pt.and_then(|p| p.host_over_full)
            .map(|x| (x >= 1.0, format!("{x:.2}×"))),
    );
    for (name, p) in [("4 KiB", p4), ("THP", pt)] {
        add(
            &format!("{name} populate: ≥ 50 % of the engine's memset bandwidth"),
            p.and_then(|p| p.full_memset_share)
                .map(|x| (x >= 0.5, format!("{:.0} %", x * 100.0))),
        );
    }
    let mu = path(r, BenchPath::Munmap4k);
    add(
        "munmap, full backing: within 1.2× of sparse",
        mu.and_then(|p| p.full_over_sparse)
            .map(|x| (x <= 1.2, format!("{x:.2}×"))),
    );
    add(
        "munmap, full backing: ≤ 0.5× the host kernel's ns/page",
        mu.and_then(|p| p.engine_full_ns.zip(p.host_ns))
            .map(|(f, h)| (f <= 0.5 * h, format!("{:.2}×", f / h))),
    );
    add(
        "huge-zero read fault ≤ 0.3 µs (engine, sparse)",
        path(r, BenchPath::HugeZeroRead)
            .and_then(|p| p.engine_sparse_ns)
            .map(|x| (x <= 300.0, format!("{x:.0} ns"))),
    );
    add(
        "4 KiB zero-page read fault ≤ 100 ns (engine, sparse)",
        path(r, BenchPath::ZeroRead4k)
            .and_then(|p| p.engine_sparse_ns)
            .map(|x| (x <= 100.0, format!("{x:.0} ns"))),
    );
    add(
        "65 530 one-page mmaps then munmaps: ≤ 2× the host kernel's time",
        path(r, BenchPath::MmapMunmap4k)
            .and_then(|p| p.engine_full_ns.zip(p.host_ns))
            .map(|(f, h)| (f <= 2.0 * h, format!("{:.2}×", f / h))),
    );
    for (p, what) in [
        (BenchPath::ForkExit, "fork+exit of 1 000 processes"),
        (BenchPath::RandomWrite4k, "random 4 KiB write faults"),
    ] {
        add(
            &format!("{what}, full backing: ≤ the host kernel's time"),
            path(r, p)
                .and_then(|p| p.engine_full_ns.zip(p.host_ns))
                .map(|(f, h)| (f <= h, format!("{:.3}×", f / h))),
        );
    }
    add(
        "will-it-scale page_fault1, 1 task, full backing: ≥ the host kernel's faults/s",
        path(r, BenchPath::WisPageFault1)
            .and_then(|p| p.host_over_full)
            .map(|x| (x >= 1.0, format!("{x:.2}×"))),
    );
    let nodes = path(r, BenchPath::BigfreeNodes).and_then(|p| p.nodes.as_ref());
    for (what, ratio) in [
        (
            "wall clock, CPU time",
            nodes.map(|n| n.cpu_ratio) as Option<f64>,
        ),
        ("virtual time, modelled", nodes.map(|n| n.virtual_ratio)),
        (
            "virtual time, host CPU of the run",
            nodes.map(|n| n.virtual_host_cpu_ratio),
        ),
    ] {
        add(
            &format!("bigfree at 64 nodes within 1.2× of 4 nodes ({what})"),
            ratio.map(|x| (x <= 1.2, format!("{x:.2}×"))),
        );
    }
    // Virtual time's host cost (the "Speed at scale" targets), on process CPU time.
    for (p, what, limit) in [
        (BenchPath::BigfreeVirtual, "bigfree", 1.5),
        (BenchPath::UsememAbVirtual, "usemem --ab", 2.0),
    ] {
        add(
            &format!("{what} in virtual time: ≤ {limit}× the host CPU of the wall-clock run"),
            path(r, p)
                .and_then(|p| p.virtual_over_wall)
                .map(|x| (x <= limit, format!("{x:.2}×"))),
        );
    }
    t
}

fn ns(v: Option<f64>) -> String {
    v.map_or_else(|| "—".into(), |x| format!("{x:.0}"))
}

fn spread(s: &Option<bench::Spread>) -> String {
    s.as_ref().map_or_else(
        || "—".into(),
        |s| format!("±{:.0} % ({:.0}–{:.0})", s.mad_pct, s.min, s.max),
    )
}

fn ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "—".into(), |x| format!("{x:.2}×"))
}

fn render(rec: &BenchRecord) -> String {
    let r = &rec.result;
    let mut table = Table::new(
        format!(
            "usermm bench: {} per populate, {} repeat(s); ns per unit of thread CPU time \
             (median, MAD and range), free-2-threads wall",
            human_bytes(r.opts.size),
            r.opts.repeat
        ),
        [
            "path",
            "unit",
            "engine sparse",
            "spread",
            "engine full",
            "spread",
            "host kernel",
            "spread",
            "host/full",
            "full/sparse",
        ],
    );
    let mut wall = Table::new(
        "the same samples on the wall clock (medians, ns)",
        ["path", "engine sparse", "engine full", "host kernel"],
    );
    for p in &r.paths {
        table.push_row([
            p.path.name().to_string(),
            p.unit.to_string(),
            ns(p.engine_sparse_ns),
            spread(&p.engine_sparse),
            ns(p.engine_full_ns),
            spread(&p.engine_full),
            ns(p.host_ns),
            spread(&p.host),
            ratio(p.host_over_full),
            ratio(p.full_over_sparse),
        ]);
        wall.push_row([
            p.path.name().to_string(),
            ns(p.engine_sparse_wall_ns),
            ns(p.engine_full_wall_ns),
            ns(p.host_wall_ns),
        ]);
    }
    let mut s = table.render_text();
    s.push('\n');
    s += &wall.render_text();
    s.push('\n');
    for p in &r.paths {
        if let Some(f) = p.engine_full_fresh_ns {
            s += &format!(
                "{}: engine full on never-used frames {f:.0} ns; host first round {} ns\n",
                p.path.name(),
                ns(p.host_cold_ns)
            );
        }
    }
    for p in &r.paths {
        if let Some(x) = p.virtual_over_wall {
            s += &format!(
                "{}: process CPU per {}: {} ns on the wall clock, {} ns in virtual time ({}): \
                 {x:.2}×\n",
                p.path.name(),
                p.unit,
                ns(p.wall_cpu_ns),
                ns(p.virtual_cpu_ns),
                bench::vtime_cost::PROFILE
            );
        }
    }
    if let Some(n) = r.mmaps {
        let fewer = if n < r.opts.mmaps {
            format!(
                " ({} asked: the map limit leaves no room for more)",
                r.opts.mmaps
            )
        } else {
            String::new()
        };
        s += &format!(
            "{}: {n} one-page mappings of /dev/zero per sample{fewer}, then a munmap of each\n",
            BenchPath::MmapMunmap4k.name()
        );
    }
    if let Some(n) = path(r, BenchPath::BigfreeNodes).and_then(|p| p.nodes.as_ref()) {
        s += &format!(
            "{}: bigfree {} --max-active {} --cpus {}, ns/page at {} → {} nodes: \
             CPU {:.0} → {:.0} ({:.2}×), wall {:.0} → {:.0} ({:.2}×); virtual time modelled \
             {:.0} → {:.0} ({:.2}×), its host CPU {:.0} → {:.0} ({:.2}×)\n",
            BenchPath::BigfreeNodes.name(),
            human_bytes(n.size),
            n.max_active,
            n.cpus,
            n.nodes[0],
            n.nodes[1],
            n.cpu_ns[0],
            n.cpu_ns[1],
            n.cpu_ratio,
            n.wall_ns[0],
            n.wall_ns[1],
            n.wall_ratio,
            n.virtual_ns[0],
            n.virtual_ns[1],
            n.virtual_ratio,
            n.virtual_host_cpu_ns[0],
            n.virtual_host_cpu_ns[1],
            n.virtual_host_cpu_ratio,
        );
    }
    s += &format!(
        "engine zeroing: {:.1} GiB/s in 2 MiB __GFP_ZERO allocations ({:.1} GiB/s wall), \
         {:.1} GiB/s in 4 KiB ones; host huge pages under the full backing: {}\n\n",
        r.zeroing.memset_gib_s,
        r.zeroing.memset_wall_gib_s,
        r.zeroing.zero_alloc_4k_gib_s,
        if r.host_huge_pages { "yes" } else { "no" }
    );
    s += "targets (the VMA gap index and speed at scale on thread CPU time; virtual \
          time's cost on process CPU time)\n";
    for t in &rec.targets {
        let mark = match t.met {
            Some(true) => "met    ",
            Some(false) => "NOT MET",
            None => "—      ",
        };
        s += &format!("  {mark}  {:<60} {}\n", t.what, t.measured);
    }
    s
}

/// The options the flags describe; bad flags are usage errors.
pub fn opts(args: &BenchArgs) -> anyhow::Result<BenchOpts> {
    if args.engine.mem.is_some() {
        return usage("bench: --mem is the bench's own (each machine is sized from --size)");
    }
    if args.engine.backing.is_some() {
        return usage("bench: --backing is the bench's own (it runs one machine of each)");
    }
    // The bench times the engine's own code on this host: a modelled clock would only
    // print host times under a model's label.
    let t = &args.engine.time;
    if t.is_virtual() || t.profile.is_some() || !t.scale_cost.is_empty() {
        return usage(
            "bench: --time virtual, --profile and --scale-cost do not apply: the bench \
             measures the engine's speed on this host (wall time only)",
        );
    }
    let mut opts = BenchOpts::new(args.size);
    opts.repeat = args.repeat;
    opts.only = args.only.clone();
    opts.host = !args.no_host;
    opts.base = args.engine.to_config(bench::default_config())?;
    if let Err(e) = bench::check(&opts) {
        return Err(usage_error(e));
    }
    // The full-backing machine and the host kernel each populate --size of this host's
    // memory, one after the other: the machine is the larger. Its memory is the one the
    // bench boots (sized from --size), not the base configuration's, or the estimate of what
    // it touches would be capped at the base's.
    let full =
        bench::machine_config(&opts, usermm::config::BackingMode::Full).map_err(usage_error)?;
    let touched = args.size.saturating_add(args.size / 512);
    super::check_machine_memory(&full, touched, 0, || {
        format!(
            "bench: --size {}: the full-backing machine and the host kernel each populate it",
            human_bytes(args.size)
        )
    })?;
    Ok(opts)
}

/// A [`BenchError`] as the one-line error of the flag that caused it, or a failure while
/// running.
fn usage_error(e: BenchError) -> anyhow::Error {
    let msg = match &e {
        BenchError::TooSmall(n) => format!("--size {}: must be at least 4M", human_bytes(*n)),
        BenchError::TooBig(n) => format!("--size {}: must be at most 1T", human_bytes(*n)),
        BenchError::NoRepeat => "--repeat must be at least 1".into(),
        BenchError::TooFewCpus(n) => {
            format!("--cpus {n}: the two-thread free path needs at least 2 CPUs")
        }
        BenchError::Config(m) => m.clone(),
        _ => return anyhow::anyhow!("bench: {e}"),
    };
    anyhow::Error::new(UsageError(format!("bench: {msg}")))
}

pub fn run(args: &BenchArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let opts = opts(args)?;
    let _measuring = super::lock_for_measuring("bench")?;
    let bar = Progress::bar(bench::steps(&opts), "bench");
    let mut first = true;
    let result = bench::run(&opts, &mut |msg: &str| {
        if !first {
            bar.inc(1);
        }
        first = false;
        bar.set_message(msg.to_string());
    });
    bar.finish();
    let result = result.map_err(usage_error)?;
    let rec = BenchRecord {
        targets: targets(&result),
        result,
    };
    super::emit(g, &rec, render)
}
