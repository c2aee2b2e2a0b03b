//! `bigfree`: seeds 000/001 ("mm: support parallel free of memory", Aaron Lu, 2017).
//!
//! One private anonymous mapping of SIZE, THP off, every page written (`__mm_populate` with
//! write faults: real page allocation, LRU add, rss), then freed by `munmap` (default) or by
//! the last `mmput` (exit). The free is timed inline (vanilla: `free.policy=inline`,
//! `gather.max_batch_count=19`) and then once per `max_active` value of the free workqueue
//! (`free.policy=parallel`, `gather.max_batch_count=515`, `free.threshold_pages=262144`), each
//! run on a fresh [`Machine`] so that no row inherits another's free lists.
//!
//! ```text
//!  row:  Machine::new(cfg) → mmap(SIZE) → populate (write faults) → [t0, cpu0] munmap | mmput
//!        [t1, cpu1] → figures: wall, the task's CPU, the workers' CPU, zone/lru lock_stat,
//!        vmstat deltas → drop the machine
//! ```
//!
//! # What is measured
//! - `free_ns`: wall time of the `munmap` (or `mmput`) call, which returns only when every job
//!   was joined (the patch's `tlb_finish_mmu`).
//! - `task_cpu_ns`: the calling thread's CPU time over that call (`CLOCK_THREAD_CPUTIME_ID`);
//!   `worker_cpu_ns`: the workers' CPU time ([`usermm::sync::workqueue::WorkqueueStats`]).
//!   Their sum is the work done; the worker share is what Michal Hocko's review objected to
//!   (freeing charged outside the exiting task's cgroup).
//! - lock_stat of every node's `zone.lock` and `lru_lock` over the free only (reset before).
//!
//! # Beyond the seed: pcp auto-tuning (`pcp.auto_tune`)
//! The review's verdict (Dave Hansen) was that the real bottleneck is the allocator's locks,
//! and Linux answered on that side: since 6.7 a run of frees grows the pcp drain from `batch`
//! to up to `batch << 5` pages per `zone.lock` round trip (see `usermm::page_alloc`). Unless
//! [`BigfreeOpts::pcp_tune_rows`] is off, two more rows run with it: inline (what a modern
//! kernel does with this teardown) and parallel at `min(nodes, host threads)` workers (the
//! patch on top of it: one worker per zone lock, no more than the host can run at once).
//!
//! # Wall and virtual time
//! Each row runs through [`Machine::run`] and reads every time from `usermm::sync::clock`. On
//! the wall clock the workers are host threads on however many host cores there are — on a
//! 2-core host the seed's knee (workers ≈ nodes) cannot show; the table is this host's own
//! curve, *measured (this host)*. With `time.mode=virtual` the same code runs as a model of
//! the profile's machine (DESIGN.md §8): every worker on an emulated CPU of its own, times,
//! CPU times and lock_stat *modelled (profile NAME)*, the same to the nanosecond run after run,
//! and each sample also carries every emulated CPU's busy, spin and idle time over the free
//! (who paid: the task or the workers). The host facts of a sample (preemptions, sleeps, load)
//! are 0 there: nothing of the host enters a virtual result.
//!
//! # Differences from the seed's test
//! The seed timed `free()` of a `malloc(320G)` (glibc munmaps it) on 4 nodes / 144 threads;
//! here the mapping is `mmap`ed and `munmap`ed directly on the emulated machine.

use serde::Serialize;
use usermm::config::{BackingMode, BatchSwitch, FreePolicy, MachineConfig, ThpMode, TimeMode};
use usermm::cpu::CpuId;
use usermm::mm::mmap::{MapFile, MAP_ANONYMOUS, MAP_PRIVATE, PROT_READ, PROT_WRITE};
use usermm::stats::{LockStatSnapshot, VmItem};
use usermm::sync::clock;
use usermm::sync::workqueue::thread_cpu_time_ns;
use usermm::vtime;
use usermm::{Machine, PAGE_SIZE};
use usermm_host::facts;

use crate::seeds::{self, ParallelFree};
use crate::stats::{mad_pct, median};

/// `ASYNC_FREE_THRESHOLD` of the patch: 256K pages (1 GiB of 4 KiB pages) per job.
pub const DEFAULT_THRESHOLD_PAGES: u64 = 256 * 1024;
/// `MAX_GATHER_BATCH_COUNT` of the patch: DIV_ROUND_UP(256K, 510).
pub const PATCHED_MAX_BATCH_COUNT: u32 = 515;
/// `MAX_GATHER_BATCH_COUNT` before the patch.
pub const VANILLA_MAX_BATCH_COUNT: u32 = 19;
/// Default emulated NUMA nodes: the seed's box had 4.
pub const DEFAULT_NODES: u16 = 4;
/// Default emulated CPUs (raised so every worker has a CPU of its own; see [`default_config`]).
pub const DEFAULT_CPUS: u16 = 8;
/// Bytes populated per progress step.
const POPULATE_CHUNK: u64 = 1 << 30;
/// The cost profile of the seeds' machine (4 sockets, 144 threads), for `time.mode=virtual`.
pub const SEED_PROFILE: &str = "haswell-ex-4s";

/// How the mapping is freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FreeBy {
    /// `munmap` of the whole mapping (`unmap_region`).
    Munmap,
    /// The last `mmput` (`exit_mmap`, full-mm gather).
    Exit,
}

/// What to run. `base` is the machine every row starts from; each row sets only the free
/// policy, `max_active`, `max_batch_count`, the threshold and the batch switch on a copy.
#[derive(Debug, Clone, Serialize)]
pub struct BigfreeOpts {
    /// Bytes of the mapping (rounded up to whole pages).
    pub size: u64,
    /// One parallel row per value.
    pub max_active: Vec<u32>,
    /// `free.threshold_pages` of the parallel rows.
    pub threshold_pages: u64,
    /// `gather.max_batch_count` of the parallel rows (the vanilla row uses 19).
    pub max_batch_count: u32,
    /// `gather.batch_switch` of every row (2017 replays the seed's v4.11 kernel).
    pub batch_switch: BatchSwitch,
    /// Runs per row; the row reports the median.
    pub repeat: u32,
    pub free_by: FreeBy,
    /// Add the two pcp auto-tune rows (see the module doc); skipped when `base` tunes already.
    pub pcp_tune_rows: bool,
    pub base: MachineConfig,
}

impl BigfreeOpts {
    /// The seed's setup for `size`: vanilla plus `max_active` rows, patch defaults, one run each,
    /// on [`default_config`].
    pub fn new(size: u64, max_active: &[u32]) -> Self {
        Self {
            size,
            max_active: max_active.to_vec(),
            threshold_pages: DEFAULT_THRESHOLD_PAGES,
            max_batch_count: PATCHED_MAX_BATCH_COUNT,
            batch_switch: BatchSwitch::V2017,
            repeat: 1,
            free_by: FreeBy::Munmap,
            pcp_tune_rows: true,
            base: default_config(size, max_active, None, None),
        }
    }
}

/// The machine of a bigfree run unless told otherwise: `mem` = [`default_mem`], sparse
/// backing, THP never, `nodes` (default 4), and `cpus` (default 8, raised to one more than the
/// largest `max_active` so that no worker shares an emulated CPU — and its pcp lists — with
/// another worker or with the zapping task), rounded up to a multiple of `nodes`.
pub fn default_config(
    size: u64,
    max_active: &[u32],
    cpus: Option<u16>,
    nodes: Option<u16>,
) -> MachineConfig {
    let nodes = nodes.unwrap_or(DEFAULT_NODES);
    let cpus = cpus.unwrap_or_else(|| {
        let want = max_active
            .iter()
            .copied()
            .max()
            .unwrap_or(1)
            .saturating_add(1);
        let want =
            (want.max(u32::from(DEFAULT_CPUS))).min(u32::from(usermm::config::MAX_CPUS)) as u16;
        want.div_ceil(nodes)
            .saturating_mul(nodes)
            .min(usermm::config::MAX_CPUS)
    });
    let mut c = MachineConfig {
        mem: default_mem(size),
        cpus,
        nodes,
        backing: BackingMode::Sparse,
        thp: ThpMode::Never,
        ..MachineConfig::default()
    };
    c.time.profile = SEED_PROFILE.into();
    c
}

/// SIZE + 25 %, rounded up to a GiB, at least 1 GiB and at most what a machine can have
/// ([`usermm::config::MAX_MEM_BYTES`]; [`check`] then says whether SIZE fits).
pub fn default_mem(size: u64) -> u64 {
    let want = size.saturating_add(size / 4);
    (want.div_ceil(1 << 30).max(1))
        .saturating_mul(1 << 30)
        .min(usermm::config::MAX_MEM_BYTES)
}

/// Bytes a run needs beyond SIZE: the PTE pages (one per 2 MiB), upper tables, gather batch
/// pages of two jobs' worth, the zero page, and pcp slack.
pub fn overhead_bytes(size: u64, cpus: u16) -> u64 {
    let pte_tables = size.div_ceil(2 << 20) * PAGE_SIZE;
    let upper = size.div_ceil(1 << 30) * PAGE_SIZE * 2 + (64 << 10);
    let batches = 2 * 1031 * PAGE_SIZE;
    let pcp = u64::from(cpus) * 256 * PAGE_SIZE;
    pte_tables + upper + batches + pcp + (16 << 20)
}

/// Sum of a lock class over the nodes, over one free.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct LockTotals {
    pub acquisitions: u64,
    pub contentions: u64,
    pub wait_ns: u64,
    pub hold_ns: u64,
}

impl LockTotals {
    fn of(s: &[LockStatSnapshot]) -> Self {
        s.iter().fold(Self::default(), |a, l| Self {
            acquisitions: a.acquisitions + l.acquisitions,
            contentions: a.contentions + l.contentions,
            wait_ns: a.wait_ns + l.waittime_total_ns,
            hold_ns: a.hold_ns + l.holdtime_total_ns,
        })
    }
}

/// One emulated CPU over the free, in virtual time.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct CpuWindow {
    pub cpu: usize,
    pub socket: usize,
    pub node: usize,
    pub busy_ns: u64,
    pub spin_ns: u64,
    pub idle_ns: u64,
}

/// Every CPU's busy, spin and idle time between two snapshots of a run.
fn cpu_windows(a: &vtime::Report, b: &vtime::Report) -> Vec<CpuWindow> {
    let window = b.end_ns.saturating_sub(a.end_ns);
    a.cpus
        .iter()
        .zip(&b.cpus)
        .map(|(x, y)| {
            let busy = y.busy_ns.saturating_sub(x.busy_ns);
            let spin = y.spin_ns.saturating_sub(x.spin_ns);
            CpuWindow {
                cpu: y.cpu,
                socket: y.socket,
                node: y.node,
                busy_ns: busy,
                spin_ns: spin,
                idle_ns: window.saturating_sub(busy + spin),
            }
        })
        .collect()
}

/// One timed free.
#[derive(Debug, Clone, Serialize)]
pub struct RunSample {
    /// Wall time of the munmap / mmput call.
    pub free_ns: u64,
    /// Wall time of populating the mapping, and the populating thread's CPU time.
    pub populate_ns: u64,
    pub populate_cpu_ns: u64,
    /// Pages the mapping held (rss before the free).
    pub pages_mapped: u64,
    /// `pgfree` during the free: data pages, page tables and gather batch pages.
    pub pgfree: u64,
    /// CPU time of the thread that called munmap / mmput, over the call.
    pub task_cpu_ns: u64,
    /// CPU time of the free workers over the call (0 inline).
    pub worker_cpu_ns: u64,
    /// Wall time the workers spent running jobs, summed over workers.
    pub worker_busy_ns: u64,
    /// Jobs handed to the workqueue, and job allocations that failed (freed inline instead).
    pub jobs: u64,
    pub job_alloc_failures: u64,
    /// Times the gather was full and had to be flushed.
    pub forced_flushes: u64,
    pub tlb_flushes: u64,
    /// lock_stat of the free, summed over nodes.
    pub zone_lock: LockTotals,
    pub lru_lock: LockTotals,
    /// lock_stat of the free, per node.
    pub zone_lock_per_node: Vec<LockStatSnapshot>,
    pub lru_lock_per_node: Vec<LockStatSnapshot>,
    /// Involuntary and voluntary context switches of this process during the free
    /// (`getrusage`): preemptions by other host load, and sleeps on contended locks.
    pub host_preemptions: u64,
    pub host_sleeps: u64,
    /// The host's 1-minute load average when the free started (other jobs on a shared host).
    pub host_loadavg: f64,
    /// Virtual time only: every emulated CPU over the free (empty on the wall clock).
    pub cpus: Vec<CpuWindow>,
    /// Virtual time only: time the CPUs spent spinning on locks during the free, summed.
    pub spin_ns: u64,
}

/// One configuration: the vanilla row or one `max_active`.
#[derive(Debug, Clone, Serialize)]
pub struct BigfreeRow {
    /// `vanilla` or `max_active N`, with ` + pcp tune` on the auto-tuned rows.
    pub label: String,
    pub policy: FreePolicy,
    pub max_active: Option<u32>,
    /// Whether the row ran with `pcp.auto_tune` (the rows beyond the seed, unless `base` had it).
    pub pcp_auto_tune: bool,
    pub max_batch_count: u32,
    pub threshold_pages: u64,
    pub samples: Vec<RunSample>,
    /// Median free time, s.
    pub time_s: f64,
    /// Median absolute deviation of the free times, as % of the median (0 with one run).
    pub spread_pct: f64,
    /// Vanilla's median over this row's median.
    pub speedup: f64,
    /// Median free time per page mapped, ns.
    pub ns_per_page: f64,
    /// Workers' share of the CPU time of the free (median): workers / (workers + task).
    pub worker_cpu_share: f64,
    /// (task + workers) CPU time over wall time (median): CPUs kept busy by the free.
    pub cpus_busy: f64,
    /// CPU time of the free (task + workers) per page, ns (median).
    pub cpu_ns_per_page: f64,
    /// The zapping task's CPU time per page, ns (median): zap, hand-offs and what it frees
    /// itself (everything, inline).
    pub task_cpu_ns_per_page: f64,
    /// Share of the free's wall time the workers spent running jobs, over `max_active`
    /// workers (median; 0 inline). Well below 100 %: workers waited for the zapping task
    /// (or for the host's CPUs).
    pub workers_busy: f64,
    /// Median over runs of the summed zone.lock / lru_lock figures.
    pub zone_contentions: u64,
    pub lru_contentions: u64,
    pub zone_wait_ms: f64,
    pub lru_wait_ms: f64,
    /// Median populate time per page, ns.
    pub populate_ns_per_page: f64,
    /// Median over runs of the CPUs' summed spin time during the free, ms (virtual time).
    pub spin_ms: f64,
}

/// The best parallel row.
#[derive(Debug, Clone, Serialize)]
pub struct PatchedBest {
    pub label: String,
    pub max_active: u32,
    pub time_s: f64,
}

/// The pcp auto-tune rows against the seed's rows.
#[derive(Debug, Clone, Serialize)]
pub struct Beyond {
    /// Inline free with auto-tuning: vanilla's time over it.
    pub inline_s: f64,
    pub inline_speedup: f64,
    /// Parallel free at `max_active` with auto-tuning.
    pub max_active: u32,
    pub parallel_s: f64,
    pub parallel_speedup: f64,
    /// The same `max_active` without auto-tuning, if measured: its time over the tuned one.
    pub over_patch: Option<f64>,
    /// zone.lock acquisitions (median) of vanilla and of the tuned inline row.
    pub vanilla_zone_acq: f64,
    pub inline_zone_acq: f64,
}

/// The whole table.
#[derive(Debug, Clone, Serialize)]
pub struct BigfreeResult {
    /// How every time below was obtained: `measured (this host)` or
    /// `modelled (profile NAME)`.
    pub time: String,
    /// The cost profile of a virtual run, with every figure's source (beside the config).
    pub profile: Option<vtime::ProfileSpec>,
    pub size: u64,
    pub pages: u64,
    pub free_by: FreeBy,
    pub repeat: u32,
    pub batch_switch: BatchSwitch,
    /// The machine of the vanilla row (the parallel rows differ only in `free` and `gather`).
    pub config: MachineConfig,
    pub rows: Vec<BigfreeRow>,
    /// Vanilla median, s.
    pub vanilla_s: f64,
    /// The fastest parallel row.
    pub patched: Option<PatchedBest>,
    /// vanilla / patched.
    pub ratio: f64,
    /// The pcp auto-tune rows, if run.
    pub beyond: Option<Beyond>,
    /// Host threads available (`available_parallelism`) while measuring.
    pub host_cpus: usize,
    /// The seed's published table, for printing beside ours.
    pub seed: ParallelFree,
    pub warnings: Vec<String>,
}

impl BigfreeResult {
    /// Whether `row` is one of the seed's rows (vanilla or a `max_active` row, on the base's
    /// pcp), not one of the pcp auto-tune rows added beyond the seed.
    pub fn is_seed_row(&self, row: &BigfreeRow) -> bool {
        row.pcp_auto_tune == self.config.pcp.auto_tune
    }
}

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum BigfreeError {
    #[error("size must be at least one page")]
    ZeroSize,
    #[error("no max_active value to measure")]
    NoMaxActive,
    #[error("max_active must be 1..=1024, got {0}")]
    BadMaxActive(u32),
    #[error("threshold must be at least 1 page")]
    ZeroThreshold,
    #[error("max_batch_count must be at least 1")]
    ZeroBatchCount,
    #[error("repeat must be at least 1")]
    ZeroRepeat,
    #[error("size {size} does not fit in the emulated RAM ({mem} bytes; {need} needed with page tables) — raise --mem")]
    TooBig { size: u64, mem: u64, need: u64 },
    #[error("invalid machine: {0}")]
    Machine(#[from] usermm::machine::MachineError),
    #[error("mmap failed: {0}")]
    Mmap(usermm::Errno),
    #[error("munmap failed: {0}")]
    Munmap(usermm::Errno),
    #[error("populate mapped {got} of {want} pages (out of memory?)")]
    Populate { got: u64, want: u64 },
    #[error("the free left {0} pages mapped")]
    Leftover(i64),
}

/// Progress of a run, for a progress bar.
#[derive(Debug, Clone)]
pub enum Event<'a> {
    /// A run starts: row label, repeat index, pages to populate.
    Start {
        label: &'a str,
        rep: u32,
        pages: u64,
    },
    /// `pages` more were populated.
    Populated { pages: u64 },
    /// The free is being timed.
    Freeing { label: &'a str, rep: u32 },
    /// The run ended.
    Done {
        label: &'a str,
        rep: u32,
        sample: &'a RunSample,
    },
}

/// Check `opts` before anything is built.
pub fn check(opts: &BigfreeOpts) -> Result<(), BigfreeError> {
    if opts.size < PAGE_SIZE {
        return Err(BigfreeError::ZeroSize);
    }
    if opts.max_active.is_empty() {
        return Err(BigfreeError::NoMaxActive);
    }
    if let Some(&bad) = opts.max_active.iter().find(|&&m| m == 0 || m > 1024) {
        return Err(BigfreeError::BadMaxActive(bad));
    }
    if opts.threshold_pages == 0 {
        return Err(BigfreeError::ZeroThreshold);
    }
    if opts.max_batch_count == 0 {
        return Err(BigfreeError::ZeroBatchCount);
    }
    if opts.repeat == 0 {
        return Err(BigfreeError::ZeroRepeat);
    }
    // A size near u64::MAX does not round up to a page: it cannot fit in any machine either.
    let size = opts
        .size
        .checked_next_multiple_of(PAGE_SIZE)
        .unwrap_or(u64::MAX);
    let need = size.saturating_add(overhead_bytes(size, opts.base.cpus));
    if need > opts.base.mem {
        return Err(BigfreeError::TooBig {
            size,
            mem: opts.base.mem,
            need,
        });
    }
    Ok(())
}

/// Pages a gather holds before it must flush: the local bundle plus `count` batch pages.
pub fn gather_capacity(count: u32, switch: BatchSwitch) -> u64 {
    const BUNDLE: u64 = usermm::mm::mmu_gather::MMU_GATHER_BUNDLE as u64;
    const BATCH: u64 = usermm::mm::mmu_gather::MAX_GATHER_BATCH as u64;
    match switch {
        BatchSwitch::V2017 => BUNDLE + u64::from(count) * BATCH,
        BatchSwitch::Modern => BUNDLE - 1 + u64::from(count) * (BATCH - 1),
    }
}

/// `max_active` of the tuned parallel row: one worker per node's zone lock, at most the
/// host's hardware threads on the wall clock (a virtual run gives every worker a CPU).
pub fn tuned_max_active(base: &MachineConfig) -> u32 {
    let host = match base.time.mode {
        TimeMode::Wall => std::thread::available_parallelism().map_or(1, |n| n.get()) as u32,
        TimeMode::Virtual => u32::MAX,
    };
    u32::from(base.nodes).min(host).max(1)
}

/// The rows of a run: `(label, max_active, pcp auto-tune)`, vanilla first.
pub fn row_specs(opts: &BigfreeOpts) -> Vec<(String, Option<u32>, bool)> {
    let base_tuned = opts.base.pcp.auto_tune;
    let mut v: Vec<(String, Option<u32>, bool)> = std::iter::once(None)
        .chain(opts.max_active.iter().map(|&m| Some(m)))
        .map(|ma| {
            let label = ma.map_or_else(|| "vanilla".to_string(), |m| format!("max_active {m}"));
            (label, ma, base_tuned)
        })
        .collect();
    if opts.pcp_tune_rows && !base_tuned {
        let m = tuned_max_active(&opts.base);
        v.push(("vanilla + pcp tune".into(), None, true));
        v.push((format!("max_active {m} + pcp tune"), Some(m), true));
    }
    v
}

/// The configuration of the vanilla row (`max_active: None`) or of one parallel row.
pub fn row_config(opts: &BigfreeOpts, max_active: Option<u32>) -> MachineConfig {
    let mut c = opts.base.clone();
    c.gather.batch_switch = opts.batch_switch;
    match max_active {
        None => {
            c.free.policy = FreePolicy::Inline;
            c.gather.max_batch_count = VANILLA_MAX_BATCH_COUNT;
        }
        Some(n) => {
            c.free.policy = FreePolicy::Parallel;
            c.free.max_active = n;
            c.free.threshold_pages = opts.threshold_pages;
            c.gather.max_batch_count = opts.max_batch_count;
        }
    }
    c
}

/// One run on a fresh machine built from `cfg`: map, populate, time the free — all inside
/// [`Machine::run`] (a virtual run when `cfg.time.mode` says so).
pub fn run_once(
    cfg: &MachineConfig,
    size: u64,
    free_by: FreeBy,
    label: &str,
    rep: u32,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<RunSample, BigfreeError> {
    let machine = Machine::new(cfg.clone())?;
    // The zapping task runs on the last CPU; workers are bound to CPUs 0, 1, 2, ….
    let cpu = CpuId(cfg.cpus - 1);
    let sample = machine.run(cpu, || {
        sample_free(&machine, cpu, size, free_by, label, rep, on_event)
    })?;
    on_event(Event::Done {
        label,
        rep,
        sample: &sample,
    });
    drop(machine);
    Ok(sample)
}

/// The body of [`run_once`], on the machine's clock.
fn sample_free(
    machine: &std::sync::Arc<Machine>,
    cpu: CpuId,
    size: u64,
    free_by: FreeBy,
    label: &str,
    rep: u32,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<RunSample, BigfreeError> {
    let size = size.next_multiple_of(PAGE_SIZE);
    let pages = size / PAGE_SIZE;
    let host = machine.time_mode() == TimeMode::Wall;
    let mm = machine.new_mm(cpu).map_err(BigfreeError::Mmap)?;
    on_event(Event::Start { label, rep, pages });
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
        return Err(BigfreeError::Populate {
            got: mapped.max(0) as u64,
            want: pages,
        });
    }
    on_event(Event::Freeing { label, rep });
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
    let st = match free_by {
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
        spin_ns: cpus.iter().map(|c| c.spin_ns).sum(),
        cpus,
    })
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
        samples,
    }
}

/// Run the vanilla row, then one row per `max_active`, each `repeat` times on fresh machines.
///
/// Runs are interleaved (vanilla, ma₁, ma₂, …, then again) so that slow drifts of a shared
/// host (other jobs, thermal) spread over every row instead of biasing one.
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
    let mut samples: Vec<Vec<RunSample>> = configs.iter().map(|_| Vec::new()).collect();
    for rep in 0..opts.repeat {
        for (i, (label, _, cfg)) in configs.iter().enumerate() {
            samples[i].push(run_once(cfg, size, opts.free_by, label, rep, on_event)?);
        }
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
    let host_cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
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
        size,
        max_active: max_active.to_vec(),
        threshold_pages: DEFAULT_THRESHOLD_PAGES,
        max_batch_count: PATCHED_MAX_BATCH_COUNT,
        batch_switch: BatchSwitch::V2017,
        repeat,
        free_by: FreeBy::Munmap,
        pcp_tune_rows: true,
        base: base.clone(),
    };
    run_with(&opts, on_event)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn capacity_of_the_eras() {
        assert_eq!(gather_capacity(19, BatchSwitch::V2017), 9698);
        assert_eq!(gather_capacity(515, BatchSwitch::V2017), 262_658);
        // The modern switch at max − 1 leaves 515 batches short of 256K pages.
        assert!(gather_capacity(515, BatchSwitch::Modern) < DEFAULT_THRESHOLD_PAGES);
        assert!(gather_capacity(516, BatchSwitch::Modern) >= DEFAULT_THRESHOLD_PAGES);
    }

    #[test]
    fn default_machine_sizes() {
        assert_eq!(default_mem(320 << 30), 400 << 30);
        assert_eq!(default_mem(1 << 20), 1 << 30);
        let c = default_config(320 << 30, &[1, 2, 4, 8, 16, 32], None, None);
        assert_eq!((c.nodes, c.cpus), (4, 36));
        let c = default_config(1 << 30, &[2], None, Some(2));
        assert_eq!((c.nodes, c.cpus), (2, 8));
        c.validate().unwrap();
    }

    #[test]
    fn small_table_runs_and_parallel_rows_queue_jobs() {
        let mut o = BigfreeOpts::new(64 << 20, &[1, 2]);
        o.threshold_pages = 2048;
        o.max_batch_count = 8;
        let r = run(&o).unwrap();
        // vanilla, max_active 1 and 2, then the two pcp auto-tune rows.
        assert_eq!(r.rows.len(), 5);
        assert_eq!(r.rows[0].samples[0].jobs, 0);
        for row in r.rows.iter().filter(|r| r.max_active.is_some()) {
            assert!(row.samples[0].jobs > 0, "{row:?}");
            // Every job was handed to a worker: none fell back to an inline free.
            assert_eq!(row.samples[0].job_alloc_failures, 0, "{row:?}");
        }
        assert_eq!(
            r.rows.iter().map(|r| r.pcp_auto_tune).collect::<Vec<_>>(),
            [false, false, false, true, true]
        );
        let b = r.beyond.as_ref().expect("tuned rows ran");
        // 16K pages drained 31 at a time vs up to 992: far fewer zone.lock round trips.
        assert!(
            b.inline_zone_acq * 4.0 < b.vanilla_zone_acq,
            "tuned {} vs vanilla {}",
            b.inline_zone_acq,
            b.vanilla_zone_acq
        );
        assert!(!r.patched.as_ref().unwrap().label.contains("pcp"));
        for row in &r.rows {
            // Every data page, every PTE page, and (parallel) the batch pages come back.
            assert!(row.samples[0].pgfree >= r.pages, "{row:?}");
        }
    }

    #[test]
    fn tuned_rows_are_skipped_when_the_base_tunes_or_when_asked() {
        let mut o = BigfreeOpts::new(64 << 20, &[1]);
        assert_eq!(row_specs(&o).len(), 4);
        o.pcp_tune_rows = false;
        assert_eq!(row_specs(&o).len(), 2);
        o.pcp_tune_rows = true;
        o.base.pcp.auto_tune = true;
        let specs = row_specs(&o);
        assert_eq!(specs.len(), 2);
        assert!(specs.iter().all(|s| s.2));
    }

    #[test]
    fn bad_options_are_refused() {
        let mut o = BigfreeOpts::new(64 << 20, &[1]);
        o.max_active = vec![0];
        assert!(matches!(check(&o), Err(BigfreeError::BadMaxActive(0))));
        let mut o = BigfreeOpts::new(64 << 20, &[1]);
        o.threshold_pages = 0;
        assert!(matches!(check(&o), Err(BigfreeError::ZeroThreshold)));
        let mut o = BigfreeOpts::new(64 << 20, &[1]);
        o.size = 2 << 30;
        assert!(matches!(check(&o), Err(BigfreeError::TooBig { .. })));
    }
}
