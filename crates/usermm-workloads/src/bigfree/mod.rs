//! `bigfree`: seeds 000/001 ("mm: support parallel free of memory", Aaron Lu, 2017).
//!
//! One private anonymous mapping of SIZE, THP off, every page written (`__mm_populate` with
//! write faults: real page allocation, LRU add, rss), then freed by `munmap` (default) or by
//! the last `mmput` (exit). The free is timed inline (vanilla: `free.policy=inline`,
//! `gather.max_batch_count=19`) and then once per `max_active` value of the free workqueue
//! (`free.policy=parallel`, `gather.max_batch_count=515`, `free.threshold_pages=262144`), each
//! run on a fresh [`Machine`](usermm::Machine) so that no row inherits another's free lists.
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
//! Each row runs through [`Machine::run`](usermm::Machine::run) and reads every time from `usermm::sync::clock`. On
//! the wall clock the workers are host threads on however many host cores there are — on a
//! 2-core host the seed's knee (workers ≈ nodes) cannot show; the table is this host's own
//! curve, *measured (this host)*. With `time.mode=virtual` the same code runs as a model of
//! the profile's machine (docs/two-clocks.md): every worker on an emulated CPU of its own, times,
//! CPU times and lock_stat *modelled (profile NAME)*, the same to the nanosecond run after run,
//! and each sample also carries every emulated CPU's busy, spin and idle time over the free
//! (who paid: the task or the workers). The host facts of a sample (preemptions, sleeps, load)
//! are 0 there: nothing of the host enters a virtual result.
//!
//! # Rows side by side (virtual time)
//! A virtual row is single-threaded on the host and deterministic on its own machine: nothing
//! of the host, and nothing of another row, enters its figures. So with
//! [`BigfreeOpts::threads`] above 1 the runs of a virtual table go on up to that many host
//! threads ([`crate::parallel::map_within`]), started in row order (repeats interleaved as
//! below), within [`BigfreeOpts::host_budget`] by each run's estimate ([`host_bytes`]: its
//! machine with the whole mapping touched; a run over the budget runs alone). The samples, the
//! rows, the record and every table built from them come back in row order, the same to the
//! byte as one run after another. Wall-clock runs always go one at a time: they measure the
//! host, and a row beside them would be part of what they measure. `threads` defaults to 1:
//! the callers that already put several tables side by side (the validation set, `usermm
//! infer`, `usermm sweep`) keep their tables' rows serial; `usermm reproduce` passes its
//! `--jobs`.
//!
//! Progress ([`Event`]) still reaches the caller's callback on the caller's thread (it need not
//! be `Send`): the runs in flight send their events over a channel, and the caller's thread
//! delivers them in the order they arrive. Each run's own events keep their order (start,
//! populated, freeing, done); those of two runs in flight interleave, so a consumer tells them
//! apart by the [`RunSpec`] in `Start`, `Freeing` and `Done` (`Populated` carries only pages:
//! a progress bar adds them up whichever run they came from). After a run fails, no further
//! run starts, the runs in flight finish, and the first failure in row order is returned.
//!
//! # Differences from the seed's test
//! The seed timed `free()` of a `malloc(320G)` (glibc munmaps it) on 4 nodes / 144 threads;
//! here the mapping is `mmap`ed and `munmap`ed directly on the emulated machine.

mod run;
#[cfg(test)]
mod test;

pub use run::{run, run_once, run_table, run_with};

use serde::Serialize;
use usermm::config::{BackingMode, BatchSwitch, FreePolicy, MachineConfig, ThpMode, TimeMode};
use usermm::stats::LockStatSnapshot;
use usermm::PAGE_SIZE;

use crate::seeds::{self, ParallelFree};

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
pub const SEED_PROFILE: &str = seeds::PARALLEL_FREE_MACHINE.profile;

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
    /// Host threads the runs of a virtual table may take at once (1: one after another; see
    /// "Rows side by side" in the module doc). Wall-clock runs always go one at a time. Not a
    /// figure's input, so not recorded.
    #[serde(skip)]
    pub threads: usize,
    /// Host bytes the runs in flight may hold together, by their estimates
    /// ([`host_bytes`]); a run over it runs alone. Not recorded either.
    #[serde(skip)]
    pub host_budget: u64,
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
            threads: 1,
            host_budget: usermm_host::facts::mem_available_bytes().unwrap_or(0),
        }
    }
}

/// The host memory one run of `opts` holds at its peak: its machine after the whole mapping
/// and its page tables were touched (`usermm::host_cost`). Every row of a table has the base's
/// shape (rows differ in the free's policy, not in the machine), so one estimate serves all.
pub fn host_bytes(opts: &BigfreeOpts) -> u64 {
    let size = opts.size.next_multiple_of(PAGE_SIZE);
    let touched = size.saturating_add(overhead_bytes(size, opts.base.cpus));
    usermm::host_cost::host_bytes(&opts.base, touched)
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

/// The seed's machine in virtual time, for the flags not given (`None` = not given): every
/// hardware thread of `c`'s profile as a CPU, one memory node per profile node, and emulated RAM
/// shaped as the seed's was for its free.
///
/// The seed's 320 GiB was first-touched from the zapping task's node and spilled into the next
/// nodes in zonelist order (each node 128 GiB, its own `zone.lock` and `lru_lock`), and its jobs
/// were freed in address order: with at most 32 jobs (32 GiB) in flight, the workers of every
/// row shared one node's locks, but for a moment at the two node boundaries. A smaller SIZE
/// keeps that property when each node holds at least the whole mapping — up to the seed's own
/// node size, beyond which the mapping spills as the seed's did. So a node is
/// `max(SIZE × the seed's RAM / 320 GiB / nodes, min(SIZE + overhead, the seed's node))`: at the
/// seed's size exactly the seed's machine (512 GiB); at 32 GiB four nodes of 32 GiB and a
/// little, the mapping on the zapping task's node. (Emulated RAM in the seed's proportion alone
/// — 12.8 GiB nodes for 32 GiB — let 16 workers in flight spread over two nodes' locks, which
/// the seed's never did.) More `nodes` than the profile's are emulated on the same RAM: each
/// physical node's share is cut into `nodes / physical nodes` equal nodes (`numa=fake=N`). A
/// no-op on the wall clock or when the profile does not resolve (the
/// caller reports that).
pub fn fit_seed_machine(
    c: &mut MachineConfig,
    size: u64,
    cpus: Option<u16>,
    nodes: Option<u16>,
    mem: Option<u64>,
) {
    if c.time.mode != TimeMode::Virtual {
        return;
    }
    let Ok(p) = usermm::vtime::Profile::resolve(&c.time.profile) else {
        return;
    };
    let t = p.topology();
    if cpus.is_none() {
        c.cpus = (t.hw_threads().min(usize::from(usermm::config::MAX_CPUS))) as u16;
    }
    if nodes.is_none() {
        c.nodes = (t.nodes as u16).min(c.cpus).max(1);
    }
    if mem.is_none() {
        if let Some(gib) = t.memory_gib {
            let seed = seeds::PARALLEL_FREE.size as u128;
            let proportional = (size as u128 * (u128::from(gib) << 30)).div_ceil(seed) as u64;
            // More nodes than the profile's are emulated (`numa=fake=`): the RAM is the
            // physical nodes', cut into equal emulated nodes.
            let nodes = u64::from(c.nodes);
            let phys = nodes.min(u64::from(t.nodes.max(1)));
            let seed_node = (gib << 30) / u64::from(t.nodes.max(1));
            let whole = size.saturating_add(overhead_bytes(size, c.cpus));
            // Never less than SIZE and its overhead in all; whole MiB per node.
            let per_phys = (proportional / phys)
                .max(whole.min(seed_node))
                .max(whole.div_ceil(phys));
            let per_node = (per_phys * phys).div_ceil(nodes).next_multiple_of(1 << 20);
            c.mem = (per_node * nodes).min(usermm::config::MAX_MEM_BYTES);
        }
    }
}

/// The modelled run of seeds 000/001 that `reproduce` makes at `size` (32 GiB at its default
/// scale, 320 GiB at `--scale seed`) and that `usermm infer` evaluates its training rows on:
/// the seed's machine in virtual time ([`default_config`], then [`fit_seed_machine`]), the
/// patch's 1 GiB jobs, one run a row, no pcp auto-tune rows. Rows are `max_active`.
pub fn seed_model_opts(size: u64, max_active: &[u32]) -> BigfreeOpts {
    let mut base = default_config(size, max_active, None, None);
    base.time.mode = TimeMode::Virtual;
    fit_seed_machine(&mut base, size, None, None, None);
    BigfreeOpts {
        pcp_tune_rows: false,
        base,
        ..BigfreeOpts::new(size, max_active)
    }
}

/// The job size of a scale model of the seed: `(threshold_pages, max_batch_count)` such that
/// SIZE makes as many jobs as the seed's 320 GiB made with the patch's 256K-page threshold
/// (320), each gathered in `DIV_ROUND_UP(threshold, 510)` batch pages as the patch sizes
/// `MAX_GATHER_BATCH_COUNT`. At the seed's size it is the patch's own (262144, 515).
pub fn seed_scaled_job(size: u64) -> (u64, u32) {
    let seed = seeds::PARALLEL_FREE.size;
    let t = (DEFAULT_THRESHOLD_PAGES as u128 * size as u128).div_ceil(seed as u128) as u64;
    let t = t.clamp(510, DEFAULT_THRESHOLD_PAGES);
    (t, t.div_ceil(510) as u32)
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
    /// Its time over the free.
    #[serde(flatten)]
    pub time: usermm::vtime::CpuUse,
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
    /// The emulated CPU of each free worker (in virtual time: on the zapping task's node,
    /// idle cores first; see `usermm::sync::workqueue::UnboundPools`). Empty inline.
    pub worker_cpus: Vec<u16>,
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
    /// Virtual time: the line model's touches during the free, by where each found its line
    /// (`usermm::vtime::MemoryStat`); `None` on the wall clock or without `[memory]`.
    pub memory: Option<usermm::vtime::MemoryStat>,
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
    /// Median over runs of the spinning share of the CPUs' busy and spin time during the
    /// free (the seed thread's "spinlock share of CPU time"; virtual time).
    pub spin_share: f64,
    /// Median over runs of what the SMT factor added to the CPUs' work during the free, ms:
    /// beside a running sibling, and beside a spinning one (virtual time).
    pub smt_busy_sibling_ms: f64,
    pub smt_spinning_sibling_ms: f64,
    /// Median utilisation of `zone.lock` and `lru_lock` during the free: hold time summed
    /// over the nodes' locks, over the free time (how busy the locks were, beside how often
    /// a waiter queued).
    pub zone_utilisation: f64,
    pub lru_utilisation: f64,
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
    pub profile: Option<usermm::vtime::ProfileSpec>,
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
    /// Host threads available (`usermm_host::facts::usable_cpus`) while measuring.
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
    /// The machine could not boot, or its run failed (says which).
    #[error(transparent)]
    Machine(#[from] usermm::machine::MachineError),
    #[error("mmap failed: {0}")]
    Mmap(usermm::Errno),
    #[error("munmap failed: {0}")]
    Munmap(usermm::Errno),
    #[error("populate mapped {got} of {want} pages")]
    Populate { got: u64, want: u64 },
    /// The populate's faults found no free frame (`VM_FAULT_OOM`, counted as `oom`).
    #[error("out of memory while populating: {got} of {want} pages mapped, {faults} faults found no free frame — raise --mem")]
    PopulateOom { got: u64, want: u64, faults: i64 },
    #[error("the free left {0} pages mapped")]
    Leftover(i64),
}

/// One run of a row: the mapping's size, how it is freed, and the row's label and the repeat
/// index that name the run in its [`Event`]s.
#[derive(Debug, Clone, Copy)]
pub struct RunSpec<'a> {
    pub size: u64,
    pub free_by: FreeBy,
    pub label: &'a str,
    pub rep: u32,
}

/// Progress of a run, for a progress bar.
#[derive(Debug, Clone)]
pub enum Event<'a> {
    /// A run starts: pages to populate.
    Start { run: RunSpec<'a>, pages: u64 },
    /// `pages` more were populated.
    Populated { pages: u64 },
    /// The free is being timed.
    Freeing(RunSpec<'a>),
    /// The run ended.
    Done {
        run: RunSpec<'a>,
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
        TimeMode::Wall => usermm_host::facts::usable_cpus() as u32,
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
