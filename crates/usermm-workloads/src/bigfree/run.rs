//! Running the rows: one fresh machine per run, through `Machine::run` (see the parent
//! module for what is measured, how the two clocks differ and how virtual rows go side by
//! side on host threads), and the table from the samples.

use usermm::config::{MachineConfig, TimeMode};
use usermm::cpu::CpuId;
use usermm::mm::mmap::{MapFile, MAP_ANONYMOUS, MAP_PRIVATE, PROT_READ, PROT_WRITE};
use usermm::stats::VmItem;
use usermm::sync::clock;
use usermm::sync::workqueue::thread_cpu_time_ns;
use usermm::vtime;
use usermm::{Machine, PAGE_SIZE};
use usermm_host::facts;

use super::*;
use crate::seeds;
use crate::stats::{mad_pct, median};

/// Every CPU's busy, spin and idle time between two snapshots of a run.
fn cpu_windows(a: &vtime::Report, b: &vtime::Report) -> Vec<CpuWindow> {
    let window = b.end_ns.saturating_sub(a.end_ns);
    a.cpus
        .iter()
        .zip(&b.cpus)
        .map(|(x, y)| CpuWindow {
            cpu: y.cpu,
            socket: y.socket,
            node: y.node,
            time: y.time.since(&x.time, window),
        })
        .collect()
}

/// One run on a fresh machine built from `cfg`: map, populate, time the free — all inside
/// [`Machine::run`] (a virtual run when `cfg.time.mode` says so).
pub fn run_once(
    cfg: &MachineConfig,
    run: RunSpec<'_>,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<RunSample, BigfreeError> {
    let machine = Machine::new(cfg.clone())?;
    // The zapping task runs on the last CPU; workers are bound to CPUs 0, 1, 2, ….
    let cpu = CpuId(cfg.cpus - 1);
    let sample = machine.run(cpu, || sample_free(&machine, cpu, run, on_event))??;
    on_event(Event::Done {
        run,
        sample: &sample,
    });
    drop(machine);
    Ok(sample)
}

/// The body of [`run_once`], on the machine's clock.
fn sample_free(
    machine: &std::sync::Arc<Machine>,
    cpu: CpuId,
    run: RunSpec<'_>,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<RunSample, BigfreeError> {
    let size = run.size.next_multiple_of(PAGE_SIZE);
    let pages = size / PAGE_SIZE;
    let host = machine.time_mode() == TimeMode::Wall;
    let mm = machine.new_mm(cpu).map_err(BigfreeError::Mmap)?;
    on_event(Event::Start { run, pages });
    let addr = mm
        .mmap(
            cpu,
            0,
            size,
            PROT_READ | PROT_WRITE,
            MAP_PRIVATE | MAP_ANONYMOUS,
            MapFile::None,
        )
        .map_err(BigfreeError::Mmap)?;
    let t = clock::now();
    let pc = thread_cpu_time_ns();
    let mut a = addr;
    while a < addr + size {
        let e = (a + POPULATE_CHUNK).min(addr + size);
        mm.populate(cpu, a, e, true);
        on_event(Event::Populated {
            pages: (e - a) / PAGE_SIZE,
        });
        a = e;
    }
    let populate_ns = t.elapsed_ns();
    let populate_cpu_ns = thread_cpu_time_ns().saturating_sub(pc);
    let mapped = mm.rss_total();
    if mapped != pages as i64 {
        let (got, want) = (mapped.max(0) as u64, pages);
        let faults = machine.vmstat().get(VmItem::Oom);
        return Err(if faults > 0 {
            BigfreeError::PopulateOom { got, want, faults }
        } else {
            BigfreeError::Populate { got, want }
        });
    }
    on_event(Event::Freeing(run));
    let phys = machine.phys();
    let wq_before = machine.gather_policy().workqueue().map(|w| w.stats());
    let vm_before = machine.vmstat_snapshot();
    phys.reset_lock_stats();
    let host_loadavg = if host {
        facts::loadavg_1min().unwrap_or(0.0)
    } else {
        0.0
    };
    let cs0 = host.then(facts::context_switches);
    let v0 = vtime::snapshot();
    let c0 = thread_cpu_time_ns();
    let t0 = clock::now();
    let st = match run.free_by {
        FreeBy::Munmap => Some(
            mm.munmap_stats(cpu, addr, size)
                .map_err(BigfreeError::Munmap)?,
        ),
        FreeBy::Exit => mm.mmput(cpu),
    };
    let free_ns = t0.elapsed_ns();
    let task_cpu_ns = thread_cpu_time_ns().saturating_sub(c0);
    let v1 = vtime::snapshot();
    let cs1 = host.then(facts::context_switches);
    let locks = phys.lock_stats();
    let vm = machine.vmstat_snapshot().since(&vm_before);
    let wq_after = machine.gather_policy().workqueue().map(|w| w.stats());
    let (worker_cpu_ns, worker_busy_ns) = match (&wq_before, &wq_after) {
        (Some(b), Some(a)) => (a.cpu_ns - b.cpu_ns, a.busy_wall_ns - b.busy_wall_ns),
        _ => (0, 0),
    };
    let left = mm.rss_total();
    if left != 0 {
        return Err(BigfreeError::Leftover(left));
    }
    drop(mm);
    let cpus = match (&v0, &v1) {
        (Some(a), Some(b)) => cpu_windows(a, b),
        _ => Vec::new(),
    };
    let (host_preemptions, host_sleeps) = match (cs0, cs1) {
        (Some(a), Some(b)) => (
            b.involuntary.saturating_sub(a.involuntary),
            b.voluntary.saturating_sub(a.voluntary),
        ),
        _ => (0, 0),
    };
    Ok(RunSample {
        free_ns,
        populate_ns,
        populate_cpu_ns,
        pages_mapped: pages,
        pgfree: vm.get(VmItem::Pgfree).max(0) as u64,
        task_cpu_ns,
        worker_cpus: wq_after
            .as_ref()
            .map(|w| w.workers.iter().map(|x| x.cpu.0).collect())
            .unwrap_or_default(),
        worker_cpu_ns,
        worker_busy_ns,
        jobs: vm.get(VmItem::FreeJobsQueued).max(0) as u64,
        job_alloc_failures: vm.get(VmItem::FreeJobAllocFailed).max(0) as u64,
        forced_flushes: vm.get(VmItem::GatherForcedFlush).max(0) as u64,
        tlb_flushes: st.map_or(0, |s| s.tlb_flushes),
        zone_lock: LockTotals::of(&locks.zone_lock),
        lru_lock: LockTotals::of(&locks.lru_lock),
        zone_lock_per_node: locks.zone_lock,
        lru_lock_per_node: locks.lru_lock,
        host_preemptions,
        host_sleeps,
        host_loadavg,
        spin_ns: cpus.iter().map(|c| c.time.spin_ns).sum(),
        memory: match (&v0, &v1) {
            (Some(a), Some(b)) => match (&a.memory, &b.memory) {
                (Some(x), Some(y)) => Some(y.since(x)),
                _ => None,
            },
            _ => None,
        },
        cpus,
    })
}

/// One figure of every CPU's use over a sample's free, summed.
fn all_cpus(s: &RunSample, figure: impl Fn(&vtime::CpuUse) -> u64) -> f64 {
    s.cpus.iter().map(|c| figure(&c.time)).sum::<u64>() as f64
}

fn summarize(
    label: String,
    cfg: &MachineConfig,
    max_active: Option<u32>,
    samples: Vec<RunSample>,
) -> BigfreeRow {
    let pcp_auto_tune = cfg.pcp.auto_tune;
    let f = |g: &dyn Fn(&RunSample) -> f64| median(&samples.iter().map(g).collect::<Vec<_>>());
    let times: Vec<f64> = samples.iter().map(|s| s.free_ns as f64 / 1e9).collect();
    let pages = samples.first().map_or(1, |s| s.pages_mapped.max(1)) as f64;
    BigfreeRow {
        label,
        policy: cfg.free.policy,
        max_active,
        pcp_auto_tune,
        max_batch_count: cfg.gather.max_batch_count,
        threshold_pages: cfg.free.threshold_pages,
        time_s: median(&times),
        spread_pct: mad_pct(&times),
        speedup: 1.0,
        ns_per_page: f(&|s| s.free_ns as f64) / pages,
        worker_cpu_share: f(&|s| {
            let total = (s.task_cpu_ns + s.worker_cpu_ns).max(1) as f64;
            s.worker_cpu_ns as f64 / total
        }),
        cpus_busy: f(&|s| (s.task_cpu_ns + s.worker_cpu_ns) as f64 / s.free_ns.max(1) as f64),
        cpu_ns_per_page: f(&|s| (s.task_cpu_ns + s.worker_cpu_ns) as f64) / pages,
        task_cpu_ns_per_page: f(&|s| s.task_cpu_ns as f64) / pages,
        workers_busy: f(&|s| {
            let n = f64::from(max_active.unwrap_or(0));
            if n == 0.0 {
                0.0
            } else {
                s.worker_busy_ns as f64 / (n * s.free_ns.max(1) as f64)
            }
        }),
        zone_contentions: f(&|s| s.zone_lock.contentions as f64) as u64,
        lru_contentions: f(&|s| s.lru_lock.contentions as f64) as u64,
        zone_wait_ms: f(&|s| s.zone_lock.wait_ns as f64) / 1e6,
        lru_wait_ms: f(&|s| s.lru_lock.wait_ns as f64) / 1e6,
        populate_ns_per_page: f(&|s| s.populate_ns as f64) / pages,
        spin_ms: f(&|s| s.spin_ns as f64) / 1e6,
        spin_share: f(&|s| {
            let busy = all_cpus(s, |t| t.busy_ns + t.spin_ns);
            s.spin_ns as f64 / busy.max(1.0)
        }),
        smt_busy_sibling_ms: f(&|s| all_cpus(s, |t| t.smt_busy_sibling_ns)) / 1e6,
        smt_spinning_sibling_ms: f(&|s| all_cpus(s, |t| t.smt_spinning_sibling_ns)) / 1e6,
        zone_utilisation: f(&|s| s.zone_lock.hold_ns as f64 / s.free_ns.max(1) as f64),
        lru_utilisation: f(&|s| s.lru_lock.hold_ns as f64 / s.free_ns.max(1) as f64),
        samples,
    }
}

/// Run the vanilla row, then one row per `max_active`, each `repeat` times on fresh machines.
///
/// Runs are interleaved (vanilla, ma₁, ma₂, …, then again) so that slow drifts of a shared
/// host (other jobs, thermal) spread over every row instead of biasing one. In virtual time
/// with `opts.threads` above 1 they go side by side on host threads, started in that order
/// (the module doc, "Rows side by side"); the result is the same.
pub fn run_with(
    opts: &BigfreeOpts,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<BigfreeResult, BigfreeError> {
    check(opts)?;
    let size = opts.size.next_multiple_of(PAGE_SIZE);
    let configs: Vec<(String, Option<u32>, MachineConfig)> = row_specs(opts)
        .into_iter()
        .map(|(label, ma, tune)| {
            let mut c = row_config(opts, ma);
            c.pcp.auto_tune = tune;
            (label, ma, c)
        })
        .collect();
    // Every run as (row, repeat), interleaved.
    let runs: Vec<(usize, u32)> = (0..opts.repeat)
        .flat_map(|rep| (0..configs.len()).map(move |i| (i, rep)))
        .collect();
    let spec = |&(i, rep): &(usize, u32)| RunSpec {
        size,
        free_by: opts.free_by,
        label: &configs[i].0,
        rep,
    };
    let side_by_side = opts.base.time.mode == TimeMode::Virtual && opts.threads > 1;
    let outs: Vec<RunSample> = if side_by_side {
        run_side_by_side(opts, &configs, &runs, &spec, on_event)?
    } else {
        let mut v = Vec::with_capacity(runs.len());
        for r in &runs {
            v.push(run_once(&configs[r.0].2, spec(r), on_event)?);
        }
        v
    };
    let mut samples: Vec<Vec<RunSample>> = configs.iter().map(|_| Vec::new()).collect();
    for (&(i, _), s) in runs.iter().zip(outs) {
        samples[i].push(s);
    }
    let mut rows: Vec<BigfreeRow> = configs
        .iter()
        .zip(samples)
        .map(|((label, ma, cfg), s)| summarize(label.clone(), cfg, *ma, s))
        .collect();
    let vanilla_s = rows[0].time_s;
    for r in &mut rows {
        r.speedup = if r.time_s > 0.0 {
            vanilla_s / r.time_s
        } else {
            0.0
        };
    }
    let base_tuned = opts.base.pcp.auto_tune;
    let patched = rows[1..]
        .iter()
        .filter(|r| r.max_active.is_some() && r.pcp_auto_tune == base_tuned)
        .min_by(|a, b| a.time_s.total_cmp(&b.time_s))
        .map(|r| PatchedBest {
            label: r.label.clone(),
            max_active: r.max_active.unwrap_or(0),
            time_s: r.time_s,
        });
    let ratio = patched.as_ref().map_or(0.0, |p| {
        if p.time_s > 0.0 {
            vanilla_s / p.time_s
        } else {
            0.0
        }
    });
    let beyond = beyond_of(&rows);
    let mut warnings = Vec::new();
    let cap = gather_capacity(opts.max_batch_count, opts.batch_switch);
    if cap < opts.threshold_pages {
        warnings.push(format!(
            "the gather holds {cap} pages before it must flush (max_batch_count {}, {:?} batch switch), below the threshold of {} pages: the parallel rows never hand a job to the workers — raise --max-batch-count",
            opts.max_batch_count, opts.batch_switch, opts.threshold_pages
        ));
    }
    if rows
        .iter()
        .filter(|r| r.max_active.is_some())
        .any(|r| r.samples.iter().all(|s| s.jobs == 0))
        && cap >= opts.threshold_pages
    {
        warnings.push(format!(
            "some parallel rows queued no job: the mapping ({} pages) is smaller than the threshold ({} pages)",
            size / PAGE_SIZE,
            opts.threshold_pages
        ));
    }
    let host_cpus = facts::usable_cpus();
    let wall = opts.base.time.mode == TimeMode::Wall;
    if let Some(&m) = opts.max_active.iter().max().filter(|_| wall) {
        if m as usize >= host_cpus {
            warnings.push(format!(
                "this host has {host_cpus} hardware threads: rows with max_active ≥ {host_cpus} oversubscribe it (the zapping task needs one too); the seed's knee at workers ≈ nodes needs ≥ {} threads",
                usize::from(opts.base.nodes) + 1
            ));
        }
    }
    if opts.repeat < 3 && wall {
        warnings.push(format!(
            "{} run(s) per row: pass --repeat 3 or more for a median and a spread",
            opts.repeat
        ));
    }
    let crate::TimeLabel { time, profile } = crate::TimeLabel::of(&opts.base);
    Ok(BigfreeResult {
        time,
        profile,
        size,
        pages: size / PAGE_SIZE,
        free_by: opts.free_by,
        repeat: opts.repeat,
        batch_switch: opts.batch_switch,
        config: configs[0].2.clone(),
        rows,
        vanilla_s,
        patched,
        ratio,
        beyond,
        host_cpus,
        seed: seeds::PARALLEL_FREE,
        warnings,
    })
}

/// A run's progress, sent from the host thread that runs it to the caller's.
enum Note {
    Start(u64),
    Populated(u64),
    Freeing,
    Done(Box<RunSample>),
}

/// `runs` of a virtual table on up to `opts.threads` host threads within `opts.host_budget`
/// ([`crate::parallel::map_within`]), their samples in `runs`' order. `on_event` is called
/// on the caller's thread only, as the runs' notes arrive (see the module doc); after a run
/// fails, the runs not yet under way are skipped and the first failure in `runs`' order is
/// returned.
fn run_side_by_side<'a>(
    opts: &BigfreeOpts,
    configs: &'a [(String, Option<u32>, MachineConfig)],
    runs: &[(usize, u32)],
    spec: &(dyn Fn(&(usize, u32)) -> RunSpec<'a> + Sync),
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<Vec<RunSample>, BigfreeError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let cost = host_bytes(opts);
    let failed = AtomicBool::new(false);
    let jobs: Vec<usize> = (0..runs.len()).collect();
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Note)>();
    let outs = std::thread::scope(|sc| {
        let failed = &failed;
        let worker = sc.spawn(move || {
            crate::parallel::map_within(&jobs, opts.threads, opts.host_budget, &|_| cost, &|&j| {
                if failed.load(Ordering::Relaxed) {
                    return None;
                }
                let tx = tx.clone();
                let r = &runs[j];
                let out = run_once(&configs[r.0].2, spec(r), &mut |e| {
                    let note = match e {
                        Event::Start { pages, .. } => Note::Start(pages),
                        Event::Populated { pages } => Note::Populated(pages),
                        Event::Freeing(_) => Note::Freeing,
                        Event::Done { sample, .. } => Note::Done(Box::new(sample.clone())),
                    };
                    // The receiver lives until every sender is gone.
                    let _ = tx.send((j, note));
                });
                if out.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
                Some(out)
            })
        });
        for (j, note) in rx {
            let run = spec(&runs[j]);
            match note {
                Note::Start(pages) => on_event(Event::Start { run, pages }),
                Note::Populated(pages) => on_event(Event::Populated { pages }),
                Note::Freeing => on_event(Event::Freeing(run)),
                Note::Done(sample) => on_event(Event::Done {
                    run,
                    sample: &sample,
                }),
            }
        }
        worker
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    });
    // A run is skipped (`None`) only after another failed, and that failure is among the
    // outcomes: skipping the `None`s returns it. (A run may be skipped before a failed run that
    // started after it: a thread can take its run and find the flag set by a later run that
    // failed first.)
    let mut v = Vec::with_capacity(outs.len());
    for out in outs.into_iter().flatten() {
        v.push(out?);
    }
    Ok(v)
}

/// The pcp auto-tune rows' summary, when they ran (vanilla untuned, two tuned rows after).
fn beyond_of(rows: &[BigfreeRow]) -> Option<Beyond> {
    let vanilla = rows.first().filter(|r| !r.pcp_auto_tune)?;
    let inline = rows
        .iter()
        .find(|r| r.pcp_auto_tune && r.max_active.is_none())?;
    let par = rows
        .iter()
        .find(|r| r.pcp_auto_tune && r.max_active.is_some())?;
    let m = par.max_active.unwrap_or(0);
    let untuned = rows
        .iter()
        .find(|r| !r.pcp_auto_tune && r.max_active == Some(m));
    let acq = |r: &BigfreeRow| {
        median(
            &r.samples
                .iter()
                .map(|s| s.zone_lock.acquisitions as f64)
                .collect::<Vec<_>>(),
        )
    };
    let over = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    Some(Beyond {
        inline_s: inline.time_s,
        inline_speedup: over(vanilla.time_s, inline.time_s),
        max_active: m,
        parallel_s: par.time_s,
        parallel_speedup: over(vanilla.time_s, par.time_s),
        over_patch: untuned.map(|u| over(u.time_s, par.time_s)),
        vanilla_zone_acq: acq(vanilla),
        inline_zone_acq: acq(inline),
    })
}

/// [`run_with`] without progress.
pub fn run(opts: &BigfreeOpts) -> Result<BigfreeResult, BigfreeError> {
    run_with(opts, &mut |_| {})
}

/// The table `usermm reproduce` prints: vanilla and one row per `max_active` of a `size`
/// mapping freed by munmap, `repeat` runs each, on machines built from `base` (whose free and
/// gather keys are overridden per row; the seed's v4.11 batch switch is used).
pub fn run_table(
    size: u64,
    max_active: &[u32],
    repeat: u32,
    base: &MachineConfig,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<BigfreeResult, BigfreeError> {
    let opts = BigfreeOpts {
        repeat,
        base: base.clone(),
        ..BigfreeOpts::new(size, max_active)
    };
    run_with(&opts, on_event)
}
