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
//! A run is one [`Machine::run`](usermm::Machine::run): every thread is a task of `usermm::sync::thread` and every
//! latency is read from `usermm::sync::clock`. With `time.mode=virtual` they are contexts on
//! emulated CPUs of the profile's machine and every figure is modelled, the same run after run.
//! There the loaded baseline is not run (each emulated CPU is a core of its own: a spinning
//! thread on the zapper's CPU takes nothing from the faulters), boot time is not measured (0),
//! and a phase change the driver makes is seen by a faulter at its next access after the
//! driver's clock, give or take the charges since the driver's last synchronisation point.

mod run;
#[cfg(test)]
mod test;

use hdrhistogram::Histogram;
use serde::Serialize;
use usermm::config::{BackingMode, MachineConfig, ThpMode};
use usermm::machine::MachineError;
use usermm::mm::UnmapStats;
use usermm::sync::mmap_lock::MmapLockStats;
use usermm::{Errno, PAGE_SIZE};

use crate::seeds::{self, MunmapDowngrade};
use crate::stats;

pub use self::run::{faulter_host_bytes, run_once};

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
        nodes: seeds::MUNMAP_DOWNGRADE_MACHINE.nodes,
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
pub const SEED_PROFILE: &str = crate::seeds::MUNMAP_DOWNGRADE_MACHINE.profile;

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MunmapTestError {
    /// The machine could not boot, or its run failed (says which).
    #[error(transparent)]
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
    /// The distribution of `samples_ns`, summarised exactly as the faulters' histograms are
    /// (same bounds, 3 significant digits): what the host check's measured side uses, so that
    /// its quantiles and the modelled ones come from one method.
    pub fn of_samples(samples_ns: &[u64]) -> Self {
        let mut h = Histogram::new_with_bounds(HIST_LOW_NS, HIST_HIGH_NS, HIST_SIGFIG)
            .expect("the histogram bounds are valid constants");
        for &ns in samples_ns {
            h.saturating_record(ns.max(1));
        }
        Self::of(&h)
    }

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
        host_cpus: usermm_host::facts::usable_cpus(),
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
