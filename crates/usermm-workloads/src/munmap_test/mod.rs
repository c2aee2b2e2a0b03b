//! `munmap-test`: seed 003 (Yang Shi, "mm: zap pages with read mmap_sem in munmap for large
//! mapping", merged in 4.20). One address space, one big populated mapping, and N threads
//! faulting in VMAs of their own while the big mapping is unmapped.
//!
//! ```text
//!  boot a fresh Machine (per policy, per repeat)
//!  mmap SIZE (THP off: 4 KiB pages like the seed), populate it with write faults
//!  start N faulters, each in its own VMA:  loop { write one word per page (each write is a
//!                                                  fault), MADV_DONTNEED the VMA }
//!  baseline window        (no munmap)                       ─┐ faulters' latencies
//!  loaded baseline window (a spinning thread stands in for   │ attributed to the window
//!                          the zapper's CPU, no mm locks)    │ each access overlaps
//!  munmap(SIZE)   (munmap.downgrade = off; on; on with per-VMA locks) ─┘
//! ```
//!
//! Per munmap: the total time, the exclusive (write) hold of the mmap lock, the time zapping and
//! freeing page tables under the read lock (`unmap_region`, what the seed's ftrace shows), the
//! mmap lock's lock_stat and exclusive-hold histogram over the munmap window, and the faulters'
//! latency distribution (p50, p99, p99.9, max) in each window.
//!
//! # Attribution of a faulter's access to a window
//! The driver moves a phase counter forward (warm-up → baseline → loaded → munmap → after). Each
//! access reads it before and after: both in the baseline (or loaded) window → that window; the
//! access overlaps the munmap call in any way → "during munmap". So the fault that blocks for the
//! whole exclusive hold of a vanilla munmap is always counted, even if it started a moment
//! before the munmap did. The idle baseline lasts `baseline_ms`, or longer until as many faults
//! as faulters were attributed to it: a host too loaded to schedule a faulter in the window
//! stretches it rather than leaving it empty (the figures are per window, so nothing is
//! skewed; on an idle host the wait never happens).
//!
//! # Why two baselines
//! The zapper is one busy thread. On a host with few cores it takes a core away from the
//! faulters whether or not it holds any lock, so "during munmap" is compared both with an idle
//! baseline and with a baseline under the same CPU load (a spinning thread that takes no lock).
//! The second isolates what the mmap lock (and the TLB shootdowns the zap sends to the faulters'
//! CPUs) cost the faulters.
//!
//! # Wall and virtual time
//! A run is one [`Machine::run`]: every thread is a task of `usermm::sync::thread` and every
//! latency is read from `usermm::sync::clock`. With `time.mode=virtual` they are contexts on
//! emulated CPUs of the profile's machine and every figure is modelled, the same run after run.
//! There the loaded baseline is not run (each emulated CPU is a core of its own: a spinning
//! thread on the zapper's CPU takes nothing from the faulters), boot time is not measured (0),
//! and a phase change the driver makes is seen by a faulter at its next access after the
//! driver's clock, give or take the charges since the driver's last synchronisation point.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;
use usermm::config::TimeMode;
use usermm::config::{BackingMode, MachineConfig, ThpMode};
use usermm::machine::MachineError;
use usermm::mm::mmap::{
    MapFile, MADV_DONTNEED, MAP_ANONYMOUS, MAP_FIXED_NOREPLACE, MAP_NORESERVE, MAP_PRIVATE,
    PROT_READ, PROT_WRITE,
};
use usermm::mm::UnmapStats;
use usermm::stats::VmItem;
use usermm::sync::class::FUTEX;
use usermm::sync::clock::{self, Ktime};
use usermm::sync::mmap_lock::MmapLockStats;
use usermm::sync::{thread, Barrier};
use usermm::{CpuId, Errno, Machine, Mm, Task, PAGE_SIZE};

use crate::seeds::{self, MunmapDowngrade};
use crate::stats;

/// Where the faulters' VMAs go: far below the top-down mmap area, each in its own 1 GiB slot
/// (own page tables down to the PMD page, never merged with a neighbour).
const FAULTER_BASE: u64 = 0x1000_0000_0000;
const FAULTER_SLOT: u64 = 1 << 30;

/// Lowest and highest latency the histograms track (1 ns ..= 1 h), 3 significant digits.
const HIST_LOW_NS: u64 = 1;
const HIST_HIGH_NS: u64 = 3_600 * 1_000_000_000;
const HIST_SIGFIG: u8 = 3;

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct MunmapTestOpts {
    /// The machine; `munmap.downgrade` is set per policy, nothing else is changed.
    pub machine: MachineConfig,
    /// Bytes of the mapping to populate and unmap.
    pub size: u64,
    /// Threads faulting in their own VMAs.
    pub faulters: u32,
    /// Bytes of each faulter's VMA (one write fault per page, then `MADV_DONTNEED`).
    pub faulter_bytes: u64,
    /// Runs per policy, each on a freshly booted machine.
    pub repeat: u32,
    /// Length of each baseline window.
    pub baseline_ms: u64,
    /// Also measure a baseline with a spinning thread in place of the zapper.
    pub loaded_baseline: bool,
    /// Threads populating the big mapping (it is faulted in before any measurement).
    pub populate_threads: u32,
}

impl MunmapTestOpts {
    /// The defaults for unmapping `size` bytes with `faulters` threads: the machine of
    /// [`default_machine`], 1 MiB per faulter, one run, 1 s baselines.
    pub fn new(size: u64, faulters: u32) -> Self {
        Self {
            machine: default_machine(size, faulters),
            size,
            faulters,
            faulter_bytes: 1 << 20,
            repeat: 1,
            baseline_ms: 1000,
            loaded_baseline: true,
            populate_threads: 2,
        }
    }
}

/// A machine for `size` bytes and `faulters` faulting threads: the seed's 32 CPUs (more if
/// there are more faulters), one node, sparse backing, THP off, RAM = size + 1/64 + 256 MiB
/// (at most [`usermm::config::MAX_MEM_BYTES`]: whether SIZE fits is the caller's check).
pub fn default_machine(size: u64, faulters: u32) -> MachineConfig {
    let mem = size
        .saturating_add(size / 64)
        .saturating_add(256 << 20)
        .min(usermm::config::MAX_MEM_BYTES);
    MachineConfig {
        mem: mem.next_multiple_of(2 << 20),
        cpus: seeds::MUNMAP_DOWNGRADE
            .cpus
            .max(u16::try_from(faulters.saturating_add(1)).unwrap_or(u16::MAX)),
        nodes: 1,
        backing: BackingMode::Sparse,
        thp: ThpMode::Never,
        time: usermm::config::TimeConfig {
            profile: SEED_PROFILE.into(),
            ..Default::default()
        },
        ..MachineConfig::default()
    }
}

/// The cost profile of seed 003's machine (2 sockets, 32 CPUs), for `time.mode=virtual`.
pub const SEED_PROFILE: &str = "e5-2680-32c";

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MunmapTestError {
    #[error("cannot boot the machine: {0}")]
    Machine(#[from] MachineError),
    #[error("{op}: {errno:?}")]
    Syscall { op: &'static str, errno: Errno },
    #[error("invalid options: {0}")]
    Options(String),
    #[error("a faulter thread panicked")]
    Faulter,
}

fn sys<T>(op: &'static str, r: Result<T, Errno>) -> Result<T, MunmapTestError> {
    r.map_err(|errno| MunmapTestError::Syscall { op, errno })
}

/// A latency distribution, in ns.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Latency {
    pub count: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            count: h.len(),
            mean_ns: h.mean(),
            p50_ns: h.value_at_quantile(0.50),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
        }
    }
}

/// The faulters' figures of one window.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Window {
    /// Wall time of the window, ns.
    pub ns: u64,
    /// One sample per write access (each one a page fault).
    pub faults: Latency,
    /// One sample per `MADV_DONTNEED` of a faulter's VMA.
    pub madvise: Latency,
    /// Accesses that failed (never expected: the faulters' VMAs are never unmapped).
    pub errors: u64,
    /// Time the faulters spent in accesses of [`STALL_NS`] or longer, summed over faulters.
    pub stalled_ns: u64,
}

impl Window {
    /// Faults per second over the window, all faulters together.
    pub fn faults_per_sec(&self) -> f64 {
        self.faults.count as f64 / (self.ns.max(1) as f64 / 1e9)
    }

    /// Share of the window the average faulter spent stalled in accesses ≥ [`STALL_NS`]: a
    /// time-weighted figure, where the p99 of a vanilla munmap counts one long stall once.
    pub fn stalled_share(&self, faulters: u32) -> f64 {
        self.stalled_ns as f64 / (self.ns.max(1) as f64 * f64::from(faulters.max(1)))
    }
}

/// An access at least this long counts as a stall (1 ms).
pub const STALL_NS: u64 = 1_000_000;

/// One munmap and what the faulters saw around it.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub boot_ms: f64,
    pub populate_ms: f64,
    /// Pages resident in the big mapping before the munmap.
    pub pages: u64,
    /// What munmap reports: total, exclusive hold, read-side (unmap_region) time, whether it
    /// downgraded, pages zapped, TLB flushes.
    pub unmap: UnmapStats,
    /// total − exclusive − read: waiting for the write lock, and the calls' own overhead.
    pub other_ns: u64,
    /// The mmap lock over the munmap window (reset just before the call, read just after).
    pub lock_munmap: MmapLockStats,
    /// The mmap lock over the idle baseline window.
    pub lock_baseline: MmapLockStats,
    /// Per-VMA lock events over the munmap window (`vma_lock_*` of `/proc/vmstat`; all zero
    /// without per-VMA locks).
    pub vma_lock: VmaLockEvents,
    pub baseline: Window,
    pub baseline_loaded: Option<Window>,
    pub during: Window,
}

/// `CONFIG_PER_VMA_LOCK_STATS`' counters over a window.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct VmaLockEvents {
    /// Faults (and `MADV_DONTNEED`s) done under a VMA's lock, without `mmap_lock`.
    pub success: i64,
    /// Attempts that fell back to `mmap_lock` (no VMA, not eligible, or being changed).
    pub abort: i64,
    /// Attempts that found a detached VMA and walked again.
    pub miss: i64,
    pub retry: i64,
}

/// One policy's runs and their medians.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyResult {
    /// `munmap.downgrade`.
    pub downgrade: bool,
    /// `vma.per_vma_lock`.
    pub per_vma_lock: bool,
    pub runs: Vec<RunResult>,
    pub median: Summary,
}

/// Medians over a policy's runs.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Summary {
    pub total_ns: u64,
    pub exclusive_ns: u64,
    pub read_ns: u64,
    pub pages_zapped: u64,
    pub tlb_flushes: u64,
    pub downgraded_runs: u32,
    pub baseline: Latency,
    pub baseline_loaded: Latency,
    pub during: Latency,
    pub during_faults_per_sec: f64,
    pub baseline_faults_per_sec: f64,
}

/// Vanilla against patched.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Ratio {
    /// vanilla exclusive hold / patched exclusive hold.
    pub exclusive_hold: f64,
    /// patched total / vanilla total (the zap is the same work either way).
    pub total: f64,
    /// vanilla p99 / patched p99 of the faulters during the munmap.
    pub during_p99: f64,
    /// Patched: p99 during the munmap / p99 of the idle baseline.
    pub patched_p99_vs_baseline: f64,
    /// Patched: p99 during the munmap / p99 of the loaded baseline (0 if not measured).
    pub patched_p99_vs_loaded: f64,
    /// Vanilla: p99 during the munmap / p99 of the idle baseline.
    pub vanilla_p99_vs_baseline: f64,
}

/// Both policies and the ratio: what `usermm reproduce` uses.
#[derive(Debug, Clone, Serialize)]
pub struct MunmapAb {
    pub vanilla: PolicyResult,
    pub patched: PolicyResult,
    pub ratio: Ratio,
}

/// The record of `usermm munmap-test`.
#[derive(Debug, Clone, Serialize)]
pub struct MunmapTestResult {
    /// `measured (this host)` or `modelled (profile NAME)`: how every time below was obtained.
    pub time: String,
    /// The cost profile of a virtual run, with every figure's source.
    pub profile: Option<usermm::vtime::ProfileSpec>,
    pub opts: MunmapTestOpts,
    /// The seed's figures, for printing beside ours.
    pub seed: MunmapDowngrade,
    pub host_cpus: usize,
    pub vanilla: PolicyResult,
    pub patched: PolicyResult,
    /// The kernel's later answer (6.4+): `munmap.downgrade=on` and `vma.per_vma_lock=on`, so
    /// faults in other VMAs take only their VMA's lock.
    pub per_vma: PolicyResult,
    pub ratio: Ratio,
}

/// The policies, in the order they run: their names for progress and reports.
pub const POLICIES: [&str; 3] = ["vanilla", "patched", "per-VMA lock"];

/// Run the three policies (`munmap.downgrade=off`; `on`; `on` with `vma.per_vma_lock=on`),
/// `opts.repeat` times each, every run on a freshly booted machine. `progress(policy, run)` is
/// called before each run with the policy's name from [`POLICIES`].
pub fn run_with_progress(
    opts: &MunmapTestOpts,
    mut progress: impl FnMut(&'static str, u32),
) -> Result<MunmapTestResult, MunmapTestError> {
    let ab = run_ab_inner(opts, &mut progress)?;
    let crate::TimeLabel { time, profile } = crate::TimeLabel::of(&opts.machine);
    let per_vma = run_policy_with(opts, true, true, &mut progress)?;
    Ok(MunmapTestResult {
        time,
        profile,
        opts: opts.clone(),
        seed: seeds::MUNMAP_DOWNGRADE,
        host_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        vanilla: ab.vanilla,
        patched: ab.patched,
        per_vma,
        ratio: ab.ratio,
    })
}

/// [`run_with_progress`] without progress.
pub fn run(opts: &MunmapTestOpts) -> Result<MunmapTestResult, MunmapTestError> {
    run_with_progress(opts, |_, _| {})
}

/// Vanilla, patched and their ratio (for `usermm reproduce`).
pub fn run_ab(opts: &MunmapTestOpts) -> Result<MunmapAb, MunmapTestError> {
    run_ab_inner(opts, &mut |_, _| {})
}

fn run_ab_inner(
    opts: &MunmapTestOpts,
    progress: &mut dyn FnMut(&'static str, u32),
) -> Result<MunmapAb, MunmapTestError> {
    let vanilla = run_policy_with(opts, false, false, progress)?;
    let patched = run_policy_with(opts, true, false, progress)?;
    let ratio = ratio(&vanilla.median, &patched.median);
    Ok(MunmapAb {
        vanilla,
        patched,
        ratio,
    })
}

fn div(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        0.0
    } else {
        a / b
    }
}

fn ratio(v: &Summary, p: &Summary) -> Ratio {
    Ratio {
        exclusive_hold: div(v.exclusive_ns as f64, p.exclusive_ns as f64),
        total: div(p.total_ns as f64, v.total_ns as f64),
        during_p99: div(v.during.p99_ns as f64, p.during.p99_ns as f64),
        patched_p99_vs_baseline: div(p.during.p99_ns as f64, p.baseline.p99_ns as f64),
        patched_p99_vs_loaded: div(p.during.p99_ns as f64, p.baseline_loaded.p99_ns as f64),
        vanilla_p99_vs_baseline: div(v.during.p99_ns as f64, v.baseline.p99_ns as f64),
    }
}

/// One policy, `opts.repeat` runs (`vma.per_vma_lock` as the machine has it).
pub fn run_policy(
    opts: &MunmapTestOpts,
    downgrade: bool,
    progress: &mut dyn FnMut(&'static str, u32),
) -> Result<PolicyResult, MunmapTestError> {
    let per_vma = opts.machine.vma.per_vma_lock;
    run_policy_with(opts, downgrade, per_vma, progress)
}

fn run_policy_with(
    opts: &MunmapTestOpts,
    downgrade: bool,
    per_vma_lock: bool,
    progress: &mut dyn FnMut(&'static str, u32),
) -> Result<PolicyResult, MunmapTestError> {
    check(opts)?;
    let mut config = opts.machine.clone();
    config.munmap.downgrade = downgrade;
    config.vma.per_vma_lock = per_vma_lock;
    let name = POLICIES[usize::from(downgrade) + usize::from(per_vma_lock)];
    let mut runs = Vec::new();
    for i in 0..opts.repeat.max(1) {
        progress(name, i);
        runs.push(run_once(&config, opts)?);
    }
    let median = summarize(&runs);
    Ok(PolicyResult {
        downgrade,
        per_vma_lock,
        runs,
        median,
    })
}

fn check(opts: &MunmapTestOpts) -> Result<(), MunmapTestError> {
    let bad = |m: String| Err(MunmapTestError::Options(m));
    if opts.size == 0 || !opts.size.is_multiple_of(PAGE_SIZE) {
        return bad(format!(
            "size {} must be a non-zero multiple of 4 KiB",
            opts.size
        ));
    }
    if opts.faulter_bytes == 0
        || !opts.faulter_bytes.is_multiple_of(PAGE_SIZE)
        || opts.faulter_bytes > FAULTER_SLOT / 2
    {
        return bad("faulter_bytes must be a non-zero multiple of 4 KiB, at most 512 MiB".into());
    }
    if u64::from(opts.faulters) * FAULTER_SLOT > 0x0f00_0000_0000 {
        return bad("too many faulters".into());
    }
    if usize::from(opts.machine.cpus) < 2 {
        return bad(
            "the machine needs at least 2 CPUs (the munmapping one and the faulters')".into(),
        );
    }
    Ok(())
}

fn median_u64(v: Vec<u64>) -> u64 {
    stats::upper_median(&v, u64::cmp).unwrap_or(0)
}

fn median_f64(v: Vec<f64>) -> f64 {
    stats::upper_median(&v, f64::total_cmp).unwrap_or(0.0)
}

fn median_latency(v: &[Latency]) -> Latency {
    Latency {
        count: median_u64(v.iter().map(|l| l.count).collect()),
        mean_ns: median_f64(v.iter().map(|l| l.mean_ns).collect()),
        p50_ns: median_u64(v.iter().map(|l| l.p50_ns).collect()),
        p99_ns: median_u64(v.iter().map(|l| l.p99_ns).collect()),
        p999_ns: median_u64(v.iter().map(|l| l.p999_ns).collect()),
        max_ns: median_u64(v.iter().map(|l| l.max_ns).collect()),
    }
}

/// Medians of every figure over the runs (each figure on its own; the upper median, so that
/// every figure is one some run produced: [`stats::upper_median`]).
pub fn summarize(runs: &[RunResult]) -> Summary {
    let m = |f: &dyn Fn(&RunResult) -> u64| median_u64(runs.iter().map(f).collect());
    let loaded: Vec<Latency> = runs
        .iter()
        .filter_map(|r| r.baseline_loaded.map(|w| w.faults))
        .collect();
    Summary {
        total_ns: m(&|r| r.unmap.total_ns),
        exclusive_ns: m(&|r| r.unmap.exclusive_ns),
        read_ns: m(&|r| r.unmap.read_ns),
        pages_zapped: m(&|r| r.unmap.pages_zapped),
        tlb_flushes: m(&|r| r.unmap.tlb_flushes),
        downgraded_runs: runs.iter().filter(|r| r.unmap.downgraded).count() as u32,
        baseline: median_latency(&runs.iter().map(|r| r.baseline.faults).collect::<Vec<_>>()),
        baseline_loaded: median_latency(&loaded),
        during: median_latency(&runs.iter().map(|r| r.during.faults).collect::<Vec<_>>()),
        during_faults_per_sec: median_f64(runs.iter().map(|r| r.during.faults_per_sec()).collect()),
        baseline_faults_per_sec: median_f64(
            runs.iter().map(|r| r.baseline.faults_per_sec()).collect(),
        ),
    }
}

// ----- one run -------------------------------------------------------------------------------

/// Phases of a run, in order; the faulters attribute each access by the phases it saw.
const PH_WARMUP: u32 = 0;
const PH_BASELINE: u32 = 1;
const PH_LOADED: u32 = 2;
const PH_MUNMAP: u32 = 3;
const PH_AFTER: u32 = 4;

/// Which window an access belongs to, from the phase before and after it.
fn window_of(before: u32, after: u32) -> Option<usize> {
    match (before, after) {
        (PH_BASELINE, PH_BASELINE) => Some(0),
        (PH_LOADED, PH_LOADED) => Some(1),
        (b, a) if b <= PH_MUNMAP && a >= PH_MUNMAP => Some(2),
        _ => None,
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(HIST_LOW_NS, HIST_HIGH_NS, HIST_SIGFIG)
        .expect("constant bounds are valid")
}

/// A faulter's histograms: faults and madvise per window (baseline, loaded, during).
struct FaulterHists {
    faults: [Histogram<u64>; 3],
    madvise: [Histogram<u64>; 3],
    errors: [u64; 3],
    stalled: [u64; 3],
}

fn ns_since(t: Ktime) -> u64 {
    t.elapsed_ns()
}

/// What the driver and the faulters share: the phase, the stop flag, the start barrier, and
/// the count of faults attributed to the idle baseline.
struct Shared<'a> {
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

fn faulter(task: Task, base: u64, len: u64, shared: Shared<'_>) -> FaulterHists {
    let Shared {
        phase,
        stop,
        started,
        baseline_faults,
    } = shared;
    let mut h = FaulterHists {
        faults: [histogram(), histogram(), histogram()],
        madvise: [histogram(), histogram(), histogram()],
        errors: [0; 3],
        stalled: [0; 3],
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
                h.stalled[w] += if ns >= STALL_NS { ns } else { 0 };
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
            h.stalled[w] += if ns >= STALL_NS { ns } else { 0 };
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
    let mut r = r?;
    r.boot_ms = boot_ms;
    Ok(r)
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
    // The faulters' VMAs first, at fixed addresses far from the big one.
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
    let hists: Vec<std::thread::Result<FaulterHists>> = thread::scope(|s| {
        let handles: Vec<_> = vmas
            .iter()
            .enumerate()
            .map(|(i, &base)| {
                // Faulter i runs on CPU 1 + i (wrapping past CPU 0, the munmapping one).
                let cpu = CpuId((1 + i % (nr_cpus - 1)) as u16);
                let task = Task::new(Arc::clone(&mm), cpu);
                let shared = Shared {
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
        }
        lock.reset_stats();
        let vm0 = machine.vmstat_snapshot();
        let t = clock::now();
        phase.store(PH_MUNMAP, Ordering::Release);
        unmap = mm.munmap_stats(cpu0, big, opts.size);
        phase.store(PH_AFTER, Ordering::Release);
        windows_ns[2] = ns_since(t);
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
            stalled[w] += h.stalled[w];
        }
    }
    let window = |w: usize| Window {
        ns: windows_ns[w],
        faults: Latency::of(&faults[w]),
        madvise: Latency::of(&madvise[w]),
        errors: errors[w],
        stalled_ns: stalled[w],
    };
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
        baseline: window(0),
        baseline_loaded: loaded_baseline.then(|| window(1)),
        during: window(2),
    })
}

#[cfg(test)]
mod test;
