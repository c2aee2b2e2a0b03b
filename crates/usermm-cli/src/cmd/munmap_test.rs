//! `usermm munmap-test`: seed 003. munmap a big touched mapping while other threads fault on
//! other VMAs; measure the exclusive mmap-lock hold and the faulters' latency.
//!
//! Both policies run, `munmap.downgrade=off` (vanilla) then `on` (patched), each run on a
//! freshly booted machine; the record is [`MunmapTestResult`]. The text output puts the seed's
//! ftrace excerpt and figures beside ours.

use clap::Args;
use serde::Serialize;
use usermm::config::{MAX_CPUS, MAX_MEM_BYTES};
use usermm_workloads::munmap_test::{
    self, default_machine, Latency, MunmapTestOpts, MunmapTestResult, PolicyResult,
};
use usermm_workloads::stats;

use crate::args::{parse_nonzero_size_arg, usage, EngineArgs, GlobalArgs};
use crate::report::format::{group, human_bytes};
use crate::report::{Progress, Table};

#[derive(Debug, Clone, Args, Serialize)]
pub struct MunmapTestArgs {
    /// Bytes of the mapping to unmap, e.g. 80G.
    #[arg(value_name = "SIZE", value_parser = parse_nonzero_size_arg)]
    pub size: u64,
    /// Threads faulting on other VMAs during the munmap (default 1; 0 times the munmap alone;
    /// at most 4095: each needs an emulated CPU besides the munmapping one).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(0..i64::from(MAX_CPUS)))]
    pub faulters: Option<u32>,
    /// Runs per configuration.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// Size of each faulter's VMA (a write fault per page, then MADV_DONTNEED).
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = parse_nonzero_size_arg)]
    pub faulter_size: u64,
    /// Length of each baseline window (faulters without a munmap), ms (default 1000; 20 in
    /// virtual time, where a window has no noise to average out).
    #[arg(long, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub baseline_ms: Option<u64>,
    /// Skip the baseline under CPU load (a spinning thread standing in for the zapper).
    #[arg(long)]
    pub no_loaded_baseline: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// The most faulters a wall-clock run gives each host CPU it may use: each still runs
/// within a scheduler period or so of its turn, well inside a baseline window.
const FAULTERS_PER_HOST_CPU: u64 = 64;

impl MunmapTestArgs {
    /// The workload's options: the munmap-test machine (sparse, THP off, 32 CPUs, RAM for SIZE)
    /// with the engine flags on top.
    pub fn opts(&self) -> anyhow::Result<MunmapTestOpts> {
        let faulters = self.faulters.unwrap_or(1);
        if !self.size.is_multiple_of(usermm::PAGE_SIZE) {
            return usage(format!("SIZE {} is not a multiple of 4 KiB", self.size));
        }
        if !self.faulter_size.is_multiple_of(usermm::PAGE_SIZE) || self.faulter_size > 512 << 20 {
            return usage("--faulter-size must be a multiple of 4 KiB, at most 512M");
        }
        // SIZE ≤ 16T and at most 4095 faulters of ≤ 512M: no overflow below.
        let need = self.size + u64::from(faulters) * self.faulter_size + (64 << 20);
        if need > MAX_MEM_BYTES {
            return usage(format!(
                "SIZE {} and the faulters' VMAs need {} of emulated RAM, more than the {} a machine can have",
                human_bytes(self.size),
                human_bytes(need.next_multiple_of(1 << 30)),
                human_bytes(MAX_MEM_BYTES)
            ));
        }
        let defaults = default_machine(self.size, faulters);
        let default_cpus = defaults.cpus;
        let machine = match self.engine.to_config(defaults) {
            Ok(m) => m,
            // The default machine's CPU count comes from --faulters: say so, not "cpus".
            Err(e) if self.engine.cpus.is_none() && e.to_string().starts_with("cpus: ") => {
                let msg = e.to_string();
                return usage(format!(
                    "--faulters {faulters}: the default machine gets {default_cpus} CPUs for them \
                     ({}); pass fewer --faulters",
                    msg.trim_start_matches("cpus: ")
                ));
            }
            Err(e) => return Err(e),
        };
        if machine.mem < need {
            let mem = match self.engine.mem {
                Some(m) => format!("--mem {}", human_bytes(m)),
                None => format!(
                    "mem {} (set by --set or --preset)",
                    human_bytes(machine.mem)
                ),
            };
            return usage(format!(
                "{mem} is too small for SIZE {} and the faulters' VMAs (need ≥ {})",
                human_bytes(self.size),
                human_bytes(need.next_multiple_of(1 << 20))
            ));
        }
        if machine.cpus < 2 {
            return usage("munmap-test needs --cpus ≥ 2 (the munmapping CPU and the faulters')");
        }
        let modelled = machine.time.mode == usermm::config::TimeMode::Virtual;
        // On the wall clock each faulter is a host thread whose latency is measured: past
        // FAULTERS_PER_HOST_CPU of them on each host CPU a faulter waits whole seconds for
        // its turn (and thousands of them make a 64M test take tens of seconds and gigabytes
        // of histograms), so the windows would measure the host's run queue, not the mmap lock.
        let host_cpus = usermm_host::facts::usable_cpus() as u64;
        if !modelled && u64::from(faulters) > FAULTERS_PER_HOST_CPU * host_cpus {
            return usage(format!(
                "--faulters {faulters}: on the wall clock each faulter is a thread of this \
                 host, which has {host_cpus} CPUs for them (at most {FAULTERS_PER_HOST_CPU} \
                 faulters a CPU, {} here); pass fewer --faulters, or --time virtual",
                FAULTERS_PER_HOST_CPU * host_cpus
            ));
        }
        let size = human_bytes(self.size);
        super::check_profile_memory(&machine, need, || {
            format!("SIZE {size} and the faulters' VMAs ({})", human_bytes(need))
        })?;
        // The mapping and every faulter's VMA, their page tables, and what each faulter keeps
        // (its histograms and stack).
        let extra = u64::from(faulters).saturating_mul(munmap_test::faulter_host_bytes());
        super::check_machine_memory(&machine, need.saturating_add(need / 512), extra, || {
            format!(
                "SIZE {size} with --faulters {faulters}: the machine's memory for the VMAs \
                 (page metadata and tables, data with full backing), and {} of latency \
                 histograms per faulter",
                human_bytes(munmap_test::faulter_host_bytes())
            )
        })?;
        Ok(MunmapTestOpts {
            machine,
            size: self.size,
            faulters,
            faulter_bytes: self.faulter_size,
            repeat: self.repeat,
            baseline_ms: self.baseline_ms.unwrap_or(if modelled { 20 } else { 1000 }),
            // A virtual CPU is a core of its own: a busy one takes nothing from the faulters.
            loaded_baseline: !self.no_loaded_baseline && !modelled,
            // The host's parallelism must not enter a virtual run: 2 populating tasks there.
            populate_threads: if modelled {
                2
            } else {
                usermm_host::facts::usable_cpus().min(4) as u32
            },
        })
    }
}

pub fn run(args: &MunmapTestArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let opts = args.opts()?;
    let bar = Progress::bar(3 * u64::from(opts.repeat), "munmap-test");
    let quiet = !bar.is_hidden() || g.json;
    let mut first = true;
    let r = munmap_test::run_with_progress(&opts, |name, i| {
        bar.set_message(format!("{name} run {}/{}", i + 1, opts.repeat));
        if !first {
            bar.inc(1);
        }
        first = false;
        if !quiet {
            let how = match name {
                "vanilla" => "munmap.downgrade=off",
                "patched" => "munmap.downgrade=on",
                _ => "munmap.downgrade=on, vma.per_vma_lock=on",
            };
            eprintln!(
                "munmap-test: {name} ({how}) run {}/{} ...",
                i + 1,
                opts.repeat
            );
        }
    })
    .map_err(|e| anyhow::anyhow!("munmap-test: {e}"))?;
    bar.finish();
    super::emit(g, &r, render)
}

/// Microseconds the way the seed's ftrace prints them: whole µs with digit groups above 10 ms,
/// one decimal below.
pub fn us(ns: u64) -> String {
    if ns >= 10_000_000 {
        group(ns / 1000) + " µs"
    } else {
        format!("{:.1} µs", ns as f64 / 1e3)
    }
}

fn times(x: f64) -> String {
    if x >= 100.0 {
        format!("{}×", group(x.round() as u64))
    } else {
        format!("{x:.2}×")
    }
}

/// The function_graph lines of one munmap, in the seed's layout.
fn ftrace(
    comm: &str,
    cpu: u32,
    t0_s: f64,
    func: &str,
    total_ns: u64,
    region_ns: Option<u64>,
    region_at_ns: u64,
) -> String {
    let dur = |ns: u64| format!("{:>9} us", (ns / 1000).max(if ns > 0 { 1 } else { 0 }));
    let bang = |ns: u64| {
        if ns >= 1_000_000_000 {
            "!"
        } else if ns >= 100_000 {
            "+"
        } else {
            " "
        }
    };
    let mut s = format!(
        "  {comm} [{cpu:03}] {:.6}: funcgraph_entry: {:>14} |  {func}() {{\n",
        t0_s, ""
    );
    if let Some(r) = region_ns {
        s += &format!(
            "  {comm} [{cpu:03}] {:.6}: funcgraph_entry: {} {} |    unmap_region();\n",
            t0_s + region_at_ns as f64 / 1e9,
            bang(r),
            dur(r)
        );
    }
    s += &format!(
        "  {comm} [{cpu:03}] {:.6}: funcgraph_exit:  {} {} |  }}\n",
        t0_s + total_ns as f64 / 1e9,
        bang(total_ns),
        dur(total_ns)
    );
    s
}

fn lat_cells(l: &Latency) -> [String; 5] {
    [
        l.count.to_string(),
        us(l.p50_ns),
        us(l.p99_ns),
        us(l.p999_ns),
        us(l.max_ns),
    ]
}

/// The text rendering of a run: what ran, the seed's trace beside ours, the hold times, the
/// faulters' latencies, the lock over the window, and the headline.
pub fn render(r: &MunmapTestResult) -> String {
    let mut s = render_header(r);
    s += &render_traces(r);
    s += &render_holds(r);
    s += &render_latency(r);
    s += &render_lock(r);
    s += &render_summary(r);
    s
}

/// What ran: the mapping, the faulters, the machine and the clock.
fn render_header(r: &MunmapTestResult) -> String {
    let o = &r.opts;
    let m = &o.machine;
    format!(
        "usermm munmap-test {}: one mapping of {} pages (4 KiB, thp={:?}, backing={:?}) unmapped while {} thread(s) \
write-fault in VMAs of their own (each {}; MADV_DONTNEED after each pass). Machine: {} CPUs, {} node(s), mem {}; \
host: {} CPU(s). {} run(s) per policy, each on a fresh machine; figures are medians.\nusermm's times: {}.\n\n",
        human_bytes(o.size),
        o.size / usermm::PAGE_SIZE,
        m.thp,
        m.backing,
        o.faulters,
        human_bytes(o.faulter_bytes),
        m.cpus,
        m.nodes,
        human_bytes(m.mem),
        r.host_cpus,
        o.repeat,
        r.time,
    )
}

/// The seed's function-graph trace of its patched munmap, and ours of both policies.
fn render_traces(r: &MunmapTestResult) -> String {
    let (v, p) = (&r.vanilla.median, &r.patched.median);
    let mut s = String::new();
    let seed = &r.seed;
    s += &format!(
        "The seed ({}, {}, {}), patched kernel:\n",
        seed.source, seed.size_label, seed.machine
    );
    for line in seed.ftrace {
        s += line;
        s.push('\n');
    }
    s.push('\n');
    s += "usermm, munmap.downgrade=on (zap under the read lock):\n";
    s += &ftrace(
        "usermm-munmap",
        0,
        0.0,
        "__vm_munmap",
        p.total_ns,
        Some(p.read_ns),
        p.exclusive_ns,
    );
    s += "usermm, munmap.downgrade=off (the whole munmap under the write lock):\n";
    s += &ftrace("usermm-munmap", 0, 0.0, "__vm_munmap", v.total_ns, None, 0);
    s += "\n";

    s
}

/// The exclusive hold, the zap under the read lock and the totals, seed beside usermm.
fn render_holds(r: &MunmapTestResult) -> String {
    let o = &r.opts;
    let (v, p) = (&r.vanilla.median, &r.patched.median);
    let mut t = Table::new(
        format!(
            "munmap of {} (medians; seed measured, usermm {})",
            human_bytes(o.size),
            r.time
        ),
        [
            "",
            "seed vanilla",
            "seed patched",
            "usermm vanilla",
            "usermm patched",
            "vanilla / patched",
        ],
    );
    t.push_row([
        "exclusive hold (mmap_lock write)".to_string(),
        format!("≈ {}", us(r.seed.exclusive_vanilla_us * 1000)),
        format!("≈ {}", us(r.seed.exclusive_patched_us * 1000)),
        us(v.exclusive_ns),
        us(p.exclusive_ns),
        times(r.ratio.exclusive_hold),
    ]);
    t.push_row([
        "zap under the read lock (unmap_region)".to_string(),
        "—".into(),
        us(r.seed.unmap_region_us * 1000),
        "—".into(),
        us(p.read_ns),
        "".into(),
    ]);
    t.push_row([
        "total".to_string(),
        format!("≈ {}", us(r.seed.total_us * 1000)),
        us(r.seed.total_us * 1000),
        us(v.total_ns),
        us(p.total_ns),
        times(div(v.total_ns as f64, p.total_ns as f64)),
    ]);
    t.push_row([
        "pages zapped".to_string(),
        "".into(),
        "".into(),
        group(v.pages_zapped),
        group(p.pages_zapped),
        "".into(),
    ]);
    t.push_row([
        "TLB flushes".to_string(),
        "".into(),
        "".into(),
        group(v.tlb_flushes),
        group(p.tlb_flushes),
        "".into(),
    ]);
    t.push_row([
        "runs that downgraded".to_string(),
        "".into(),
        "".into(),
        format!("{}/{}", v.downgraded_runs, o.repeat),
        format!("{}/{}", p.downgraded_runs, o.repeat),
        "".into(),
    ]);
    t.render_text() + "\n"
}

/// The faulters' write-fault latency by policy and window.
fn render_latency(r: &MunmapTestResult) -> String {
    let o = &r.opts;
    let mut t = Table::new(
        "faulters' write faults in their own VMAs: latency (medians over runs)",
        ["", "faults", "p50", "p99", "p99.9", "max"],
    );
    for (name, pol) in [
        ("vanilla", &r.vanilla),
        ("patched", &r.patched),
        ("per-VMA lock", &r.per_vma),
    ] {
        let med = &pol.median;
        let mut row = |label: &str, l: &Latency| {
            let mut cells = vec![format!("{name}: {label}")];
            cells.extend(lat_cells(l));
            t.push_row(cells);
        };
        row("baseline, no munmap", &med.baseline);
        if o.loaded_baseline {
            row("baseline, a CPU busy (no lock)", &med.baseline_loaded);
        }
        row("during the munmap", &med.during);
    }
    t.render_text() + "\n"
}

/// `mmap_lock`'s lock_stat over the munmap window, and what the faulters saw of it.
fn render_lock(r: &MunmapTestResult) -> String {
    let o = &r.opts;
    let mut t = Table::new(
        "mmap_lock over the munmap window (lock_stat; median run of each policy)",
        ["", "vanilla", "patched", "per-VMA lock"],
    );
    let (lv, lp, lq) = (
        median_run(&r.vanilla),
        median_run(&r.patched),
        median_run(&r.per_vma),
    );
    let both = |f: &dyn Fn(&munmap_test::RunResult) -> String| [f(lv), f(lp), f(lq)];
    let mut row = |label: &str, cells: [String; 3]| {
        let mut v = vec![label.to_string()];
        v.extend(cells);
        t.push_row(v);
    };
    row(
        "write: acquisitions",
        both(&|x| x.lock_munmap.write.acquisitions.to_string()),
    );
    row(
        "write: holdtime-max",
        both(&|x| us(x.lock_munmap.write.holdtime_max_ns)),
    );
    row(
        "exclusive-hold histogram: count / max",
        both(&|x| {
            format!(
                "{} / {}",
                x.lock_munmap.exclusive_hold.count,
                us(x.lock_munmap.exclusive_hold.max_ns)
            )
        }),
    );
    // The readers' side of lock_stat: one row a column.
    type Cell = fn(&munmap_test::RunResult) -> String;
    let reads: [(&str, Cell); 5] = [
        ("acquisitions", |x| group(x.lock_munmap.read.acquisitions)),
        ("contentions", |x| group(x.lock_munmap.read.contentions)),
        ("waittime-max", |x| us(x.lock_munmap.read.waittime_max_ns)),
        ("waittime-total", |x| {
            us(x.lock_munmap.read.waittime_total_ns)
        }),
        ("holdtime-max", |x| us(x.lock_munmap.read.holdtime_max_ns)),
    ];
    for (column, f) in reads {
        row(&format!("read: {column}"), both(&f));
    }
    row(
        "munmap: waiting for the lock + overhead",
        both(&|x| us(x.other_ns)),
    );
    row(
        "vma_lock_success / abort / miss",
        both(&|x| {
            format!(
                "{} / {} / {}",
                group(x.vma_lock.success.max(0) as u64),
                group(x.vma_lock.abort.max(0) as u64),
                group(x.vma_lock.miss.max(0) as u64)
            )
        }),
    );
    row(
        "faults/s during the munmap (all faulters)",
        both(&|x| format!("{:.0}", x.during.faults_per_sec())),
    );
    row(
        "faults/s in the idle baseline",
        both(&|x| format!("{:.0}", x.baseline.faults_per_sec())),
    );
    let nf = o.faulters;
    row(
        "faulters' time stalled ≥ 1 ms: during the munmap",
        both(&|x| format!("{:.1} %", 100.0 * x.during.stalled_share(nf))),
    );
    row(
        "faulters' time stalled ≥ 1 ms: idle baseline",
        both(&|x| format!("{:.1} %", 100.0 * x.baseline.stalled_share(nf))),
    );
    if o.loaded_baseline {
        row(
            "faulters' time stalled ≥ 1 ms: loaded baseline",
            both(&|x| {
                let w = x.baseline_loaded.unwrap_or_default();
                format!("{:.1} %", 100.0 * w.stalled_share(nf))
            }),
        );
    }
    t.render_text() + "\n"
}

/// The headline: the hold, the faulters' p99, and the per-VMA lock's.
fn render_summary(r: &MunmapTestResult) -> String {
    let o = &r.opts;
    let (v, p) = (&r.vanilla.median, &r.patched.median);
    let mut s = String::new();
    let q = &r.ratio;
    s += &format!(
        "exclusive hold: {} vanilla → {} patched ({} shorter); the zap ({}) moved under the read lock.\n",
        us(v.exclusive_ns),
        us(p.exclusive_ns),
        times(q.exclusive_hold),
        us(p.read_ns)
    );
    s += &format!(
        "faulters' p99 during the munmap: vanilla {} ({} the idle baseline), patched {} ({} the idle baseline{}).\n",
        us(v.during.p99_ns),
        times(q.vanilla_p99_vs_baseline),
        us(p.during.p99_ns),
        times(q.patched_p99_vs_baseline),
        if o.loaded_baseline { format!(", {} the loaded baseline", times(q.patched_p99_vs_loaded)) } else { String::new() },
    );
    let pv = &r.per_vma.median;
    s += &format!(
        "with per-VMA locks (6.4+): faulters' p99 during the munmap {} ({} the idle baseline); exclusive hold {}.\n",
        us(pv.during.p99_ns),
        times(div(pv.during.p99_ns as f64, pv.baseline.p99_ns as f64)),
        us(pv.exclusive_ns),
    );
    s
}

fn div(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        0.0
    } else {
        a / b
    }
}

/// The run whose total time is the (upper) median of the policy's runs.
fn median_run(p: &PolicyResult) -> &munmap_test::RunResult {
    let i = stats::upper_median_index_by(&p.runs, |a, b| a.unmap.total_ns.cmp(&b.unmap.total_ns));
    &p.runs[i.unwrap_or(0)]
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn microseconds() {
        assert_eq!(us(2_485_692_000), "2 485 692 µs");
        assert_eq!(us(8_000), "8.0 µs");
        assert_eq!(us(12_345_678), "12 345 µs");
    }

    #[test]
    fn small_run_renders() {
        let args = MunmapTestArgs {
            size: 16 << 20,
            faulters: Some(1),
            repeat: 1,
            faulter_size: 64 << 10,
            baseline_ms: Some(10),
            no_loaded_baseline: false,
            engine: EngineArgs {
                cpus: Some(4),
                ..Default::default()
            },
        };
        let opts = args.opts().unwrap();
        let r = munmap_test::run(&opts).unwrap();
        let text = render(&r);
        assert!(text.contains("unmap_region();"), "{text}");
        assert!(text.contains("exclusive hold"), "{text}");
        let json = serde_json::to_value(&r).unwrap();
        assert!(json["patched"]["median"]["exclusive_ns"].as_u64().is_some());
        assert_eq!(json["vanilla"]["downgrade"], false);
    }

    #[test]
    fn mem_too_small_is_a_usage_error() {
        let args = MunmapTestArgs {
            size: 1 << 30,
            faulters: None,
            repeat: 1,
            faulter_size: 1 << 20,
            baseline_ms: Some(10),
            no_loaded_baseline: false,
            engine: EngineArgs {
                mem: Some(512 << 20),
                ..Default::default()
            },
        };
        let e = args.opts().unwrap_err();
        assert!(e.downcast_ref::<crate::args::UsageError>().is_some(), "{e}");
    }
}
