//! `usermm bigfree`: seeds 000/001. Touch one big mapping (THP off), free it, and time the free
//! inline and with the free workqueue at each `max_active`; print the seed's table beside ours.
//!
//! Every row runs on a fresh machine built from the engine flags on top of
//! [`bigfree::default_config`] (sparse backing, THP never, 4 nodes, SIZE + 25 % of RAM). With
//! `--host`, the host kernel's munmap of touched 4 KiB memory of the same size (capped to what
//! this machine can hold safely) is measured too, for the ns-per-page comparison.

use std::fmt::Write as _;

use clap::{Args, ValueEnum};
use serde::Serialize;
use usermm::config::{BatchSwitch, MAX_MEM_BYTES};
use usermm_host::measure::{host_touch_and_munmap, HostFreeResult};
use usermm_workloads::bigfree::{self, BigfreeError, BigfreeOpts, BigfreeResult, Event, FreeBy};
use usermm_workloads::stats;

use crate::args::{parse_nonzero_size_arg, usage, EngineArgs, GlobalArgs};
use crate::report::format::{by_size, human_bytes};
use crate::report::{Progress, Table};

/// The largest host mapping `--host` touches.
pub const HOST_CAP_BYTES: u64 = 8 << 30;

/// `--batch-switch`: when `tlb_next_batch` moves to a new batch page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
pub enum BatchSwitchArg {
    /// v4.11: switch when a batch holds `max` entries.
    #[value(name = "2017")]
    #[serde(rename = "2017")]
    V2017,
    /// Switch at `max - 1`.
    #[value(name = "modern")]
    #[serde(rename = "modern")]
    Modern,
}

impl From<BatchSwitchArg> for BatchSwitch {
    fn from(b: BatchSwitchArg) -> Self {
        match b {
            BatchSwitchArg::V2017 => BatchSwitch::V2017,
            BatchSwitchArg::Modern => BatchSwitch::Modern,
        }
    }
}

fn parse_max_active(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n @ 1..=1024) => Ok(n),
        Ok(0) => Err("max_active must be at least 1 (a workqueue needs a worker)".into()),
        Ok(n) => Err(format!("max_active must be at most 1024, got {n}")),
        Err(_) => Err(format!("expected a number of workers, got '{s}'")),
    }
}

fn parse_threshold(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err("the threshold must be at least 1 page".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("expected a number of pages, got '{s}'")),
    }
}

fn parse_batch_count(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Err("max_batch_count must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("expected a number of batch pages, got '{s}'")),
    }
}

#[derive(Debug, Clone, Args, Serialize)]
pub struct BigfreeArgs {
    /// Bytes of the mapping to touch and free, e.g. 320G.
    #[arg(value_name = "SIZE", value_parser = parse_nonzero_size_arg)]
    pub size: u64,
    /// max_active values of the free workqueue to measure (comma list).
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "1,2,4,8,16,32",
          value_parser = parse_max_active)]
    pub max_active: Vec<u32>,
    /// Gathered pages that make one free job (the patch's 256K pages = 1 GiB).
    #[arg(long, value_name = "PAGES", value_parser = parse_threshold)]
    pub threshold: Option<u64>,
    /// Runs per row (median and MAD are reported).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// Free by exiting the mm (exit_mmap) instead of munmap.
    #[arg(long)]
    pub exit: bool,
    /// Also time the host kernel's munmap of touched 4 KiB memory (at most 8G).
    #[arg(long)]
    pub host: bool,
    /// When the gather switches to a new batch page (default 2017, the seed's kernel).
    #[arg(long, value_name = "ERA")]
    pub batch_switch: Option<BatchSwitchArg>,
    /// MAX_GATHER_BATCH_COUNT of the parallel rows (the patch: 515; Aaron's suggestion: 1030).
    #[arg(long, value_name = "N", value_parser = parse_batch_count)]
    pub max_batch_count: Option<u32>,
    /// Only the seed's rows: skip the two rows with 6.7+ pcp auto-tuning (`pcp.auto_tune`).
    #[arg(long)]
    pub seed_only: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// The host kernel's figures beside ours.
#[derive(Debug, Clone, Serialize)]
pub struct HostRow {
    /// Bytes touched and unmapped on the host.
    pub size: u64,
    /// The size asked for (the host run is capped).
    pub requested: u64,
    pub capped: bool,
    pub runs: Vec<HostFreeResult>,
    /// Median munmap time, s, and per page, ns.
    pub munmap_s: f64,
    pub munmap_ns_per_page: f64,
    pub populate_ns_per_page: f64,
    /// The munmap time scaled to the engine's SIZE (linear in pages), s.
    pub munmap_s_scaled: f64,
}

/// What `usermm bigfree` prints (with `--json`, as is).
#[derive(Debug, Clone, Serialize)]
pub struct BigfreeRecord {
    pub args: BigfreeArgs,
    pub bigfree: BigfreeResult,
    pub host: Option<HostRow>,
    pub host_error: Option<String>,
}

/// The options of the run the flags describe.
pub fn opts(args: &BigfreeArgs) -> anyhow::Result<BigfreeOpts> {
    let mut defaults = bigfree::default_config(
        args.size,
        &args.max_active,
        args.engine.cpus,
        args.engine.nodes,
    );
    // A virtual run's default machine is the profile's, from the start: its CPUs are the
    // profile's hardware threads, not --max-active's.
    args.engine.time.apply(&mut defaults);
    bigfree::fit_seed_machine(
        &mut defaults,
        args.size,
        args.engine.cpus,
        args.engine.nodes,
        args.engine.mem,
    );
    let default_cpus = defaults.cpus;
    let mut base = match args.engine.to_config(defaults) {
        Ok(c) => c,
        // The default machine's CPU count comes from --max-active: say so, not "cpus".
        Err(e) if args.engine.cpus.is_none() => {
            let msg = e.to_string();
            match msg.strip_prefix("cpus: ") {
                Some(rest) => {
                    let list: Vec<String> = args.max_active.iter().map(u32::to_string).collect();
                    return usage(format!(
                        "--max-active {}: the default machine gets {default_cpus} CPUs for it \
                         ({rest}); pass a shorter --max-active, or --cpus",
                        list.join(",")
                    ));
                }
                None => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    // In virtual time, the seed's machine: all the profile's CPUs and nodes, RAM shaped as the
    // seed's for its free (`fit_seed_machine`; unless the flags say otherwise).
    bigfree::fit_seed_machine(
        &mut base,
        args.size,
        args.engine.cpus,
        args.engine.nodes,
        args.engine.mem,
    );
    let o = BigfreeOpts {
        size: args.size,
        max_active: args.max_active.clone(),
        threshold_pages: args.threshold.unwrap_or(bigfree::DEFAULT_THRESHOLD_PAGES),
        max_batch_count: args
            .max_batch_count
            .unwrap_or(bigfree::PATCHED_MAX_BATCH_COUNT),
        batch_switch: args.batch_switch.map_or(BatchSwitch::V2017, Into::into),
        repeat: args.repeat,
        free_by: if args.exit {
            FreeBy::Exit
        } else {
            FreeBy::Munmap
        },
        pcp_tune_rows: !args.seed_only,
        base,
        // One run at a time: `usermm sweep` (and `reproduce --sensitivity` through it) runs
        // several of these processes side by side already, each budgeted on its own.
        threads: 1,
        host_budget: 0,
    };
    if let Err(e) = bigfree::check(&o) {
        return match e {
            BigfreeError::TooBig { size, need, .. } if need > MAX_MEM_BYTES => usage(format!(
                "SIZE {} needs {} of emulated RAM with page tables, more than the {} a machine can have",
                human_bytes(size),
                human_bytes(need.div_ceil(1 << 30) << 30),
                human_bytes(MAX_MEM_BYTES)
            )),
            BigfreeError::TooBig { size, mem, need } => usage(format!(
                "SIZE {} does not fit in the emulated RAM of {} ({} needed with page tables); pass a larger --mem",
                human_bytes(size),
                human_bytes(mem),
                human_bytes(round_up_mib(need))
            )),
            e => usage(e.to_string()),
        };
    }
    let size = human_bytes(args.size);
    super::check_profile_memory(&o.base, args.size, || format!("SIZE {size}"))?;
    // One machine at a time: the mapping's frames and its page tables.
    let touched = args.size.saturating_add(args.size / 512);
    super::check_machine_memory(&o.base, touched, 0, || {
        let backing = match o.base.backing {
            usermm::config::BackingMode::Full => "its data, ",
            usermm::config::BackingMode::Sparse => "",
        };
        format!("SIZE {size}: the machine holds {backing}its page metadata and page tables")
    })?;
    Ok(o)
}

/// `n` rounded up to a MiB (saturating: `n` may be a sum near `u64::MAX`).
fn round_up_mib(n: u64) -> u64 {
    n.saturating_add((1 << 20) - 1) & !((1 << 20) - 1)
}

/// The host size for `size`: at most [`HOST_CAP_BYTES`] and half of what the host has free.
pub fn host_size(size: u64) -> u64 {
    let avail = usermm_host::facts::mem_available_bytes().unwrap_or(HOST_CAP_BYTES * 2) / 2;
    size.min(HOST_CAP_BYTES)
        .min(avail.max(64 << 20))
        .next_multiple_of(2 << 20)
}

/// Time the host kernel's munmap of `size` (capped) touched 4 KiB pages, `repeat` times.
pub fn run_host(size: u64, repeat: u32) -> anyhow::Result<HostRow> {
    let hs = host_size(size);
    let mut runs = Vec::new();
    for _ in 0..repeat.max(1) {
        runs.push(host_touch_and_munmap(hs, false)?);
    }
    let ns: Vec<f64> = runs.iter().map(|r| r.munmap_ns as f64).collect();
    let per: Vec<f64> = runs
        .iter()
        .map(HostFreeResult::munmap_ns_per_page)
        .collect();
    let pop: Vec<f64> = runs
        .iter()
        .map(HostFreeResult::populate_ns_per_page)
        .collect();
    let munmap_ns_per_page = stats::median(&per);
    Ok(HostRow {
        size: hs,
        requested: size,
        capped: hs < size,
        munmap_s: stats::median(&ns) / 1e9,
        munmap_ns_per_page,
        populate_ns_per_page: stats::median(&pop),
        munmap_s_scaled: munmap_ns_per_page * (size / usermm::PAGE_SIZE) as f64 / 1e9,
        runs,
    })
}

pub fn run(args: &BigfreeArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let o = opts(args)?;
    let record = measure(args, &o)?;
    super::emit(g, &record, render)
}

/// Run the engine table (with a progress bar) and, with `--host`, the host measurement.
pub fn measure(args: &BigfreeArgs, o: &BigfreeOpts) -> anyhow::Result<BigfreeRecord> {
    let pages = o.size.div_ceil(usermm::PAGE_SIZE);
    let runs = bigfree::row_specs(o).len() as u64 * u64::from(o.repeat);
    let bar = Progress::bar(runs * pages, "bigfree");
    let mut on_event = |e: Event<'_>| match e {
        Event::Start { run, .. } => {
            bar.set_message(format!("{} #{} populate", run.label, run.rep + 1))
        }
        Event::Populated { pages } => bar.inc(pages),
        Event::Freeing(run) => bar.set_message(format!("{} #{} free", run.label, run.rep + 1)),
        Event::Done { .. } => {}
    };
    let result = bigfree::run_with(o, &mut on_event);
    bar.finish();
    let result = result?;
    let (host, host_error) = if args.host {
        let hb = Progress::bar(1, "host munmap");
        let h = run_host(o.size, o.repeat);
        hb.finish();
        match h {
            Ok(h) => (Some(h), None),
            Err(e) => (None, Some(format!("{e:#}"))),
        }
    } else {
        (None, None)
    };
    Ok(BigfreeRecord {
        args: args.clone(),
        bigfree: result,
        host,
        host_error,
    })
}

/// Seconds to about three figures.
fn secs(s: f64) -> String {
    by_size(s, &[(10.0, 1), (0.1, 2)], 3)
}

/// The seed's free times beside ours, one row per configuration.
pub fn free_table(b: &BigfreeResult) -> Table {
    let seed = &b.seed;
    let mut t = Table::new(
        format!(
            "free time vs max_active, {} (seed: {} on {}, measured)",
            b.time,
            human_bytes(seed.size),
            seed.machine
        ),
        [
            "row",
            "seed (s)",
            "seed ±%",
            "seed speedup",
            "time (s)",
            "±%",
            "speedup",
            "ns/page",
            "CPU ns/page",
            "workers' CPU",
            "CPUs busy",
            "task ns/page",
            "workers busy",
            "jobs",
        ],
    );
    for row in &b.rows {
        let (st, sp) = match row.max_active {
            _ if !b.is_seed_row(row) => (None, None),
            None => (Some(seed.vanilla_s), Some(seed.vanilla_spread_pct)),
            Some(m) => seed
                .rows
                .iter()
                .find(|s| s.0 == m)
                .map_or((None, None), |s| (Some(s.1), Some(s.2))),
        };
        let jobs = stats::median(
            &row.samples
                .iter()
                .map(|s| s.jobs as f64)
                .collect::<Vec<_>>(),
        );
        t.push_row([
            row.label.clone(),
            st.map_or("-".into(), |v| format!("{v:.2}")),
            sp.map_or("-".into(), |v| format!("{v:.1}")),
            st.map_or("-".into(), |v| format!("{:.2}x", seed.vanilla_s / v)),
            secs(row.time_s),
            format!("{:.1}", row.spread_pct),
            format!("{:.2}x", row.speedup),
            format!("{:.1}", row.ns_per_page),
            format!("{:.1}", row.cpu_ns_per_page),
            format!("{:.0}%", row.worker_cpu_share * 100.0),
            format!("{:.2}", row.cpus_busy),
            format!("{:.1}", row.task_cpu_ns_per_page),
            match row.max_active {
                Some(_) => format!("{:.0}%", row.workers_busy * 100.0),
                None => "-".into(),
            },
            format!("{jobs:.0}"),
        ]);
    }
    t
}

/// Where the time goes: lock_stat of the free and who spent the CPU time, per row. The lock
/// columns are the same on both clocks; the last ones differ: the host's facts on the wall
/// clock (median of runs), the emulated CPUs' spin time in virtual time (a virtual run has no
/// host facts, and its runs are identical, so finer figures are shown).
pub fn lock_table(b: &BigfreeResult) -> Table {
    let virt = b.profile.is_some();
    let mut columns = vec![
        "row",
        "zone.lock acq",
        "contended",
        "wait (ms)",
        "hold (ms)",
        "lru_lock acq",
        "contended",
        "wait (ms)",
        "hold (ms)",
        "task CPU (s)",
        "workers CPU (s)",
    ];
    columns.extend(if virt {
        &["spin (ms)", "worker CPUs"][..]
    } else {
        &["preempted", "slept", "host load"][..]
    });
    let over = if virt { "" } else { " (median of runs)" };
    let mut l = Table::new(
        format!(
            "where the time goes: lock_stat of the free, summed over nodes{over}, {}",
            b.time
        ),
        columns,
    );
    let ms = |v: f64| {
        if virt {
            format!("{v:.2}")
        } else {
            format!("{v:.1}")
        }
    };
    for row in &b.rows {
        let m = |f: &dyn Fn(&bigfree::RunSample) -> f64| {
            stats::median(&row.samples.iter().map(f).collect::<Vec<_>>())
        };
        let mut cells = vec![
            row.label.clone(),
            format!("{:.0}", m(&|s| s.zone_lock.acquisitions as f64)),
            format!("{}", row.zone_contentions),
            ms(row.zone_wait_ms),
            ms(m(&|s| s.zone_lock.hold_ns as f64) / 1e6),
            format!("{:.0}", m(&|s| s.lru_lock.acquisitions as f64)),
            format!("{}", row.lru_contentions),
            ms(row.lru_wait_ms),
            ms(m(&|s| s.lru_lock.hold_ns as f64) / 1e6),
            secs(m(&|s| s.task_cpu_ns as f64) / 1e9),
            secs(m(&|s| s.worker_cpu_ns as f64) / 1e9),
        ];
        if virt {
            cells.push(ms(row.spin_ms));
            cells.push(row.max_active.map_or("-".to_string(), |_| {
                row.samples.first().map_or(String::new(), worker_cpus_text)
            }));
        } else {
            cells.push(format!("{:.0}", m(&|s| s.host_preemptions as f64)));
            cells.push(format!("{:.0}", m(&|s| s.host_sleeps as f64)));
            cells.push(format!("{:.2}", m(&|s| s.host_loadavg)));
        }
        l.push_row(cells);
    }
    l
}

/// Every emulated CPU over the free of `row`'s first run (virtual time only): who paid.
pub fn cpu_table(b: &BigfreeResult, row: &bigfree::BigfreeRow) -> Option<Table> {
    let s = row.samples.first().filter(|s| !s.cpus.is_empty())?;
    let mut t = Table::new(
        format!(
            "emulated CPUs over the free, {} ({}): busy, spinning, idle",
            row.label, b.time
        ),
        [
            "CPU",
            "socket",
            "node",
            "busy (ms)",
            "spin (ms)",
            "idle (ms)",
            "role",
        ],
    );
    let task = s.cpus.len() - 1;
    for c in &s.cpus {
        let role = if c.cpu == task {
            "zapping task".to_string()
        } else if row.max_active.is_some_and(|n| c.cpu < n as usize) {
            format!("worker {}", c.cpu)
        } else {
            "-".to_string()
        };
        t.push_row([
            c.cpu.to_string(),
            c.socket.to_string(),
            c.node.to_string(),
            format!("{:.3}", c.time.busy_ns as f64 / 1e6),
            format!("{:.3}", c.time.spin_ns as f64 / 1e6),
            format!("{:.3}", c.time.idle_ns as f64 / 1e6),
            role,
        ]);
    }
    Some(t)
}

/// The seed's table beside ours, the lock_stat table, the host line and the warnings.
pub fn render(r: &BigfreeRecord) -> String {
    let b = &r.bigfree;
    let c = &b.config;
    let mut out = String::new();
    let how = match b.free_by {
        FreeBy::Munmap => "munmap",
        FreeBy::Exit => "exit (mmput)",
    };
    let _ = writeln!(
        out,
        "bigfree {}: one anonymous mapping, THP off, every page written, freed by {how}",
        human_bytes(b.size)
    );
    let _ = writeln!(out, "time: {}", b.time);
    if let Some(p) = &b.profile {
        let _ = writeln!(
            out,
            "profile {}: {} (--json prints every figure with its source)",
            p.name, p.description
        );
    }
    let _ = writeln!(
        out,
        "engine: {} nodes, {} CPUs, {} {:?} RAM, pcp high/batch {}/{}, {:?} batch switch, threshold {} pages, max_batch_count 19 vanilla / {} parallel; {} run(s) per row, median ±MAD; host: {} hardware threads",
        c.nodes,
        c.cpus,
        human_bytes(c.mem),
        c.backing,
        c.pcp.high,
        c.pcp.batch,
        b.batch_switch,
        b.rows.get(1).map_or(c.free.threshold_pages, |r| r.threshold_pages),
        b.rows.get(1).map_or(0, |r| r.max_batch_count),
        b.repeat,
        b.host_cpus,
    );
    out.push('\n');
    out += &free_table(b).render_text();
    out.push('\n');
    out += &lock_table(b).render_text();
    out.push('\n');
    if b.profile.is_some() {
        let best = b
            .patched
            .as_ref()
            .and_then(|p| b.rows.iter().find(|r| r.label == p.label));
        for row in b.rows.first().into_iter().chain(best) {
            if let Some(t) = cpu_table(b, row) {
                out += &t.render_text();
                out.push('\n');
            }
        }
    }
    if let Some(p) = &b.patched {
        let (seed_ma, seed_s) = b.seed.best();
        let _ = writeln!(
            out,
            "vanilla {} s → best parallel ({}) {} s: {:.2}x (seed: {} s → {} s at max_active {}, {:.2}x)",
            secs(b.vanilla_s),
            p.label,
            secs(p.time_s),
            b.ratio,
            b.seed.vanilla_s,
            seed_s,
            seed_ma,
            b.seed.best_speedup()
        );
    }
    if let Some(x) = &b.beyond {
        let _ = writeln!(
            out,
            "beyond the seed, pcp auto-tuning (6.7+): inline {} s ({:.2}x vanilla; zone.lock taken {:.0} times instead of {:.0}); with max_active {}: {} s ({:.2}x vanilla{})",
            secs(x.inline_s),
            x.inline_speedup,
            x.inline_zone_acq,
            x.vanilla_zone_acq,
            x.max_active,
            secs(x.parallel_s),
            x.parallel_speedup,
            x.over_patch
                .map_or(String::new(), |o| format!(", {o:.2}x the patch alone at that max_active")),
        );
    }
    let pop = b.rows.first().map_or(0.0, |r| r.populate_ns_per_page);
    let _ = writeln!(
        out,
        "engine populate: {pop:.0} ns/page (write faults, vanilla row)"
    );
    if let Some(h) = &r.host {
        let engine = b.rows.first().map_or(0.0, |r| r.ns_per_page);
        let _ = writeln!(
            out,
            "host kernel munmap of {} touched 4K pages{}: {} s, {:.1} ns/page (populate {:.0} ns/page); engine vanilla {engine:.1} ns/page ({:.2}x the host's){}",
            human_bytes(h.size),
            if h.capped { format!(" (capped from {}; at most 8G and half of MemAvailable)", human_bytes(h.requested)) } else { String::new() },
            secs(h.munmap_s),
            h.munmap_ns_per_page,
            h.populate_ns_per_page,
            engine / h.munmap_ns_per_page.max(1e-9),
            if h.capped { format!("; scaled to {}: {} s", human_bytes(h.requested), secs(h.munmap_s_scaled)) } else { String::new() },
        );
    }
    if let Some(e) = &r.host_error {
        let _ = writeln!(out, "host measurement failed: {e}");
    }
    for w in &b.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    out
}

/// The free workers' CPUs of a sample as ranges, and their sockets when known (virtual time).
fn worker_cpus_text(s: &bigfree::RunSample) -> String {
    let mut cpus = s.worker_cpus.clone();
    cpus.sort_unstable();
    cpus.dedup();
    let mut ranges: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        ranges.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    let sockets: std::collections::BTreeSet<usize> = cpus
        .iter()
        .filter_map(|&c| s.cpus.get(usize::from(c)).map(|w| w.socket))
        .collect();
    if sockets.is_empty() {
        ranges.join(",")
    } else {
        format!("{} (sockets {:?})", ranges.join(","), sockets)
    }
}
