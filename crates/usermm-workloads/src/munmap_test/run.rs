//! One run of the test on a fresh machine: the phases, the faulters and the burner, the
//! populate, the munmap, and the attribution of every access to a window (see the parent
//! module for what is measured and why two baselines).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use usermm::config::MachineConfig;
use usermm::config::TimeMode;
use usermm::mm::mmap::{
    MapFile, MADV_DONTNEED, MAP_ANONYMOUS, MAP_FIXED_NOREPLACE, MAP_NORESERVE, MAP_PRIVATE,
    PROT_READ, PROT_WRITE,
};
use usermm::stats::VmItem;
use usermm::sync::class::FUTEX;
use usermm::sync::clock::{self, Ktime};
use usermm::sync::mmap_lock::MmapLockStats;
use usermm::sync::{thread, Barrier};
use usermm::{CpuId, Errno, Machine, Mm, Task, PAGE_SIZE};

use super::{
    check, sys, Latency, MunmapTestError, MunmapTestOpts, RunResult, VmaLockEvents, Window,
    FAULTER_BASE, FAULTER_SLOT, HIST_HIGH_NS, HIST_LOW_NS, HIST_SIGFIG, STALL_NS,
};

/// Phases of a run, in order; the faulters attribute each access by the phases it saw.
pub(super) const PH_WARMUP: u32 = 0;
pub(super) const PH_BASELINE: u32 = 1;
pub(super) const PH_LOADED: u32 = 2;
pub(super) const PH_MUNMAP: u32 = 3;
pub(super) const PH_AFTER: u32 = 4;

/// Which window an access belongs to, from the phase before and after it.
pub(super) fn window_of(before: u32, after: u32) -> Option<usize> {
    match (before, after) {
        (PH_BASELINE, PH_BASELINE) => Some(0),
        (PH_LOADED, PH_LOADED) => Some(1),
        (b, a) if b <= PH_MUNMAP && a >= PH_MUNMAP => Some(2),
        _ => None,
    }
}

/// ns of the interval `[start, end)` inside the window `[ws, we)`.
pub(super) fn clipped((start, end): (u64, u64), (ws, we): (u64, u64)) -> u64 {
    end.min(we).saturating_sub(start.max(ws))
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(HIST_LOW_NS, HIST_HIGH_NS, HIST_SIGFIG)
        .expect("constant bounds are valid")
}

/// Host bytes one faulter keeps while it runs: its six latency histograms (faults and
/// madvise per window, each a counts array over 1 ns .. 1 h at 3 significant figures,
/// 256 KiB) and what its thread touches of its stack. 4095 faulters took 6.7 GB.
pub fn faulter_host_bytes() -> u64 {
    const STACK_TOUCHED: u64 = 64 << 10;
    6 * histogram().distinct_values() as u64 * 8 + STACK_TOUCHED
}

/// A faulter's histograms: faults and madvise per window (baseline, loaded, during).
struct FaulterHists {
    faults: [Histogram<u64>; 3],
    madvise: [Histogram<u64>; 3],
    errors: [u64; 3],
    /// Each access of at least [`STALL_NS`]: its window, start and end (clock ns), clipped to
    /// the window's bounds once the run knows them.
    stalls: Vec<(usize, u64, u64)>,
}

fn ns_since(t: Ktime) -> u64 {
    t.elapsed_ns()
}

/// What the driver and the faulters share: the phase, the stop flag, the start barrier, and
/// the count of faults attributed to the idle baseline.
struct FaulterShared<'a> {
    phase: &'a AtomicU32,
    stop: &'a AtomicBool,
    started: &'a Barrier,
    baseline_faults: &'a AtomicU64,
}

/// The longest the idle baseline waits past its length for its first faults (a faulter that
/// is alive but never scheduled in it; none ever was on an idle host).
const BASELINE_SAMPLE_WAIT: Duration = Duration::from_secs(10);

/// After the idle baseline's length: wait until `baseline_faults` holds `n` faults (one per
/// faulter on average), so that a host too loaded to schedule a faulter in the window
/// lengthens the window instead of leaving it empty. A no-op on an idle host.
fn wait_for_baseline_faults(baseline_faults: &AtomicU64, n: u64) {
    let t = clock::now();
    let wait = u64::try_from(BASELINE_SAMPLE_WAIT.as_nanos()).unwrap_or(u64::MAX);
    while baseline_faults.load(Ordering::Relaxed) < n && t.elapsed_ns() < wait {
        thread::sleep(Duration::from_millis(1));
    }
}

fn faulter(task: Task, base: u64, len: u64, shared: FaulterShared<'_>) -> FaulterHists {
    let FaulterShared {
        phase,
        stop,
        started,
        baseline_faults,
    } = shared;
    let mut h = FaulterHists {
        faults: [histogram(), histogram(), histogram()],
        madvise: [histogram(), histogram(), histogram()],
        errors: [0; 3],
        stalls: Vec::new(),
    };
    let mm = Arc::clone(task.mm());
    started.wait();
    let mut value = 1u64;
    while !stop.load(Ordering::Relaxed) {
        let mut addr = base;
        while addr < base + len {
            let before = phase.load(Ordering::Acquire);
            let t = clock::now();
            let r = task.write_u64(addr, value);
            let ns = ns_since(t);
            let after = phase.load(Ordering::Acquire);
            if let Some(w) = window_of(before, after) {
                if w == 0 {
                    baseline_faults.fetch_add(1, Ordering::Relaxed);
                }
                h.faults[w].saturating_record(ns.max(1));
                h.errors[w] += u64::from(r.is_err());
                if ns >= STALL_NS {
                    h.stalls.push((w, t.as_ns(), t.as_ns().saturating_add(ns)));
                }
            }
            value = value.wrapping_add(1);
            addr += PAGE_SIZE;
        }
        let before = phase.load(Ordering::Acquire);
        let t = clock::now();
        let r = mm.madvise(task.cpu(), base, len, MADV_DONTNEED);
        let ns = ns_since(t);
        let after = phase.load(Ordering::Acquire);
        if let Some(w) = window_of(before, after) {
            h.madvise[w].saturating_record(ns.max(1));
            h.errors[w] += u64::from(r.is_err());
            if ns >= STALL_NS {
                h.stalls.push((w, t.as_ns(), t.as_ns().saturating_add(ns)));
            }
        }
    }
    h
}

/// Spin until `stop`, touching no mm: the zapper's CPU load without its locks.
fn burner(stop: &AtomicBool) {
    let mut x = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..1024 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    std::hint::black_box(x);
}

/// Fault in `[start, start + len)` for writing with `threads` threads (split at 2 MiB).
fn populate(mm: &Arc<Mm>, start: u64, len: u64, threads: u32, nr_cpus: u16) {
    let threads = u64::from(threads.clamp(1, u32::from(nr_cpus)));
    let chunk = (len / threads).next_multiple_of(2 << 20);
    thread::scope(|s| {
        for i in 0..threads {
            let s0 = start + i * chunk;
            if s0 >= start + len {
                break;
            }
            let e0 = (s0 + chunk).min(start + len);
            let mm = Arc::clone(mm);
            let cpu = CpuId(i as u16);
            s.spawn_on(cpu, move || mm.populate(cpu, s0, e0, true));
        }
    });
}

/// One run on a fresh machine: populate, baselines, munmap under `config`'s policy — all
/// inside [`Machine::run`] (a virtual run when `config.time.mode` says so).
pub fn run_once(
    config: &MachineConfig,
    opts: &MunmapTestOpts,
) -> Result<RunResult, MunmapTestError> {
    check(opts)?;
    let t = Instant::now();
    let machine = Machine::new(config.clone())?;
    let boot_ms = match config.time.mode {
        TimeMode::Wall => t.elapsed().as_secs_f64() * 1e3,
        // Booting is not modelled: nothing of the host enters a virtual result.
        TimeMode::Virtual => 0.0,
    };
    let cpu0 = CpuId(0);
    let r = machine.run(cpu0, || run_on(&machine, config, opts));
    drop(machine);
    let mut r = r??;
    r.boot_ms = boot_ms;
    Ok(r)
}

/// The faulters' VMAs, at fixed addresses far from the big one (mapped before it).
fn map_faulter_vmas(mm: &Arc<Mm>, opts: &MunmapTestOpts) -> Result<Vec<u64>, MunmapTestError> {
    let cpu0 = CpuId(0);
    let (rw, anon) = (PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
    let mut vmas = Vec::new();
    for i in 0..u64::from(opts.faulters) {
        let hint = FAULTER_BASE + i * FAULTER_SLOT;
        let a = sys(
            "mmap (faulter)",
            mm.mmap(
                cpu0,
                hint,
                opts.faulter_bytes,
                rw,
                anon | MAP_FIXED_NOREPLACE,
                MapFile::None,
            ),
        )?;
        vmas.push(a);
    }
    Ok(vmas)
}

/// The three windows (baseline, loaded baseline, during the munmap) from every faulter's
/// histograms: latencies merged, and each stall counted only for its part inside its window
/// (`bounds`, on the clock).
fn merge_windows(
    hists: Vec<std::thread::Result<FaulterHists>>,
    windows_ns: [u64; 3],
    bounds: [(u64, u64); 3],
) -> Result<[Window; 3], MunmapTestError> {
    let mut faults = [histogram(), histogram(), histogram()];
    let mut madvise = [histogram(), histogram(), histogram()];
    let mut errors = [0u64; 3];
    let mut stalled = [0u64; 3];
    for h in hists {
        let h = h.map_err(|_| MunmapTestError::Faulter)?;
        for w in 0..3 {
            faults[w].add(&h.faults[w]).expect("same bounds");
            madvise[w].add(&h.madvise[w]).expect("same bounds");
            errors[w] += h.errors[w];
        }
        // Only the part of a stall inside its window counts (one straddling the window's
        // start or end was counted whole, past 100 % of the window).
        for &(w, start, end) in &h.stalls {
            stalled[w] += clipped((start, end), bounds[w]);
        }
    }
    Ok(std::array::from_fn(|w| Window {
        ns: windows_ns[w],
        faults: Latency::of(&faults[w]),
        madvise: Latency::of(&madvise[w]),
        errors: errors[w],
        stalled_ns: stalled[w],
    }))
}

/// The body of [`run_once`], on the machine's clock.
fn run_on(
    machine: &Arc<Machine>,
    config: &MachineConfig,
    opts: &MunmapTestOpts,
) -> Result<RunResult, MunmapTestError> {
    let cpu0 = CpuId(0);
    let mm = Mm::new(machine, cpu0).map_err(|errno| MunmapTestError::Syscall {
        op: "mm_alloc",
        errno,
    })?;
    let rw = PROT_READ | PROT_WRITE;
    let anon = MAP_PRIVATE | MAP_ANONYMOUS;
    let vmas = map_faulter_vmas(&mm, opts)?;
    let big = sys(
        "mmap",
        mm.mmap(cpu0, 0, opts.size, rw, anon | MAP_NORESERVE, MapFile::None),
    )?;
    let t = clock::now();
    populate(&mm, big, opts.size, opts.populate_threads, config.cpus);
    let populate_ms = t.elapsed_ns() as f64 / 1e6;
    let pages = mm.rss_total() as u64;

    // A loaded baseline needs host cores to contend for; a virtual CPU is a core of its own.
    let loaded_baseline = opts.loaded_baseline && config.time.mode == TimeMode::Wall;
    let phase = AtomicU32::new(PH_WARMUP);
    let stop = AtomicBool::new(false);
    let started = Barrier::new(&FUTEX, opts.faulters as usize + 1);
    let baseline_faults = AtomicU64::new(0);
    let nr_cpus = usize::from(config.cpus);
    let baseline_len = Duration::from_millis(opts.baseline_ms);
    let mut lock_baseline = MmapLockStats::default();
    let mut unmap = Err(Errno::EINVAL);
    let mut lock_munmap = MmapLockStats::default();
    let mut vma_lock = VmaLockEvents::default();
    let mut windows_ns = [0u64; 3];
    // Each window's start and end on the clock, to clip the stalls that straddle one.
    let mut bounds = [(0u64, 0u64); 3];
    let hists: Vec<std::thread::Result<FaulterHists>> = thread::scope(|s| {
        let handles: Vec<_> = vmas
            .iter()
            .enumerate()
            .map(|(i, &base)| {
                // Faulter i runs on CPU 1 + i (wrapping past CPU 0, the munmapping one).
                let cpu = CpuId((1 + i % (nr_cpus - 1)) as u16);
                let task = Task::new(Arc::clone(&mm), cpu);
                let shared = FaulterShared {
                    phase: &phase,
                    stop: &stop,
                    started: &started,
                    baseline_faults: &baseline_faults,
                };
                s.spawn_named_on(cpu, format!("faulter-{i}"), move || {
                    faulter(task, base, opts.faulter_bytes, shared)
                })
            })
            .collect();
        started.wait();
        // Warm-up: every faulter page-faults through its VMA once or more (in virtual time
        // no longer than a baseline: faulters there are never kept off their CPUs).
        let warm_up = Duration::from_millis(50);
        thread::sleep(match config.time.mode {
            TimeMode::Wall => warm_up,
            TimeMode::Virtual => warm_up.min(baseline_len),
        });
        let lock = mm.mmap_lock_info();
        lock.reset_stats();
        let t = clock::now();
        phase.store(PH_BASELINE, Ordering::Release);
        thread::sleep(baseline_len);
        wait_for_baseline_faults(&baseline_faults, u64::from(opts.faulters));
        phase.store(PH_LOADED, Ordering::Release);
        windows_ns[0] = ns_since(t);
        bounds[0] = (t.as_ns(), t.as_ns() + windows_ns[0]);
        lock_baseline = lock.stats();
        if loaded_baseline {
            let burn_stop = AtomicBool::new(false);
            let t = clock::now();
            thread::scope(|s2| {
                s2.spawn_on(cpu0, || burner(&burn_stop));
                thread::sleep(baseline_len);
                burn_stop.store(true, Ordering::Relaxed);
            });
            windows_ns[1] = ns_since(t);
            bounds[1] = (t.as_ns(), t.as_ns() + windows_ns[1]);
        }
        lock.reset_stats();
        let vm0 = machine.vmstat_snapshot();
        let t = clock::now();
        phase.store(PH_MUNMAP, Ordering::Release);
        unmap = mm.munmap_stats(cpu0, big, opts.size);
        phase.store(PH_AFTER, Ordering::Release);
        windows_ns[2] = ns_since(t);
        bounds[2] = (t.as_ns(), t.as_ns() + windows_ns[2]);
        lock_munmap = lock.stats();
        let d = machine.vmstat_snapshot().since(&vm0);
        vma_lock = VmaLockEvents {
            success: d.get(VmItem::VmaLockSuccess),
            abort: d.get(VmItem::VmaLockAbort),
            miss: d.get(VmItem::VmaLockMiss),
            retry: d.get(VmItem::VmaLockRetry),
        };
        stop.store(true, Ordering::Relaxed);
        handles.into_iter().map(|h| h.join()).collect()
    });
    let unmap = sys("munmap", unmap)?;
    let [baseline, baseline_loaded, during] = merge_windows(hists, windows_ns, bounds)?;
    drop(mm);
    let other_ns = unmap
        .total_ns
        .saturating_sub(unmap.exclusive_ns + unmap.read_ns);
    Ok(RunResult {
        boot_ms: 0.0,
        populate_ms,
        pages,
        unmap,
        other_ns,
        lock_munmap,
        lock_baseline,
        vma_lock,
        baseline,
        baseline_loaded: loaded_baseline.then_some(baseline_loaded),
        during,
    })
}
