//! `usermm bench`: the engine's hot paths beside the host kernel's, in one run.
//!
//! Each path is measured three ways in every repeat, interleaved so that a noisy neighbour hits
//! all three alike: the engine with sparse backing (data frames never touched: the cost of the
//! mm work alone), the engine with full backing (every frame real memory, zeroed on allocation
//! like `clear_page`), and the host kernel doing the same work in a forked single-threaded
//! child. Every path with a host side is one body over [`crate::task::Task`]
//! ([`crate::task::bodies`]), run by a task alone on each engine machine and by a host task in
//! the child ([`crate::task::child`]), timed by the task's clocks; `fork-exit` alone is not
//! (the trait has no fork). Figures are medians over the repeats ([`crate::stats::median`]),
//! with the spread ([`crate::stats::mad_pct`]) and the minimum and maximum beside them.
//!
//! | path | what one unit is | the body (engine and host kernel) |
//! |---|---|---|
//! | `populate-4k` | a 4 KiB write fault | write one word per page of a fresh 2 MiB-aligned `MADV_NOHUGEPAGE` mapping |
//! | `populate-thp` | 4 KiB of a THP write fault | the same with `MADV_HUGEPAGE` |
//! | `munmap-4k` | one touched 4 KiB page of a munmap | munmap of the `populate-4k` mapping |
//! | `huge-zero-read` | one huge-zero-page read fault | read one word per 2 MiB of a read-only `MADV_HUGEPAGE` mapping |
//! | `zero-read-4k` | one 4 KiB zero-page read fault | read one word per 4 KiB of a read-only `MADV_NOHUGEPAGE` mapping |
//! | `free-2-threads` | one page of two concurrent munmaps (wall) | two mms on two CPUs unmap their halves at once (engine only) |
//! | `mmap-munmap-4k` | one mmap and one munmap of a page | 65 530 one-page `/dev/zero` mappings (no two merge), then a munmap of each |
//! | `fork-exit` | one fork and exit of a small process | engine: `Mm::fork` of a 16-page mm and the child's `mmput`, ×1 000; host: `fork`, `_exit`, `waitpid` ×1 000 |
//! | `random-write-4k` | a 4 KiB write fault | one write per page of a fresh mapping, pages in a random order |
//! | `bigfree-nodes` | a 4 KiB page of bigfree at 64 nodes (sparse) | `bigfree SIZE/4 --max-active 8 --cpus 144` at 4 and 64 nodes, wall and virtual (engine only) |
//! | `bigfree-virtual` | a 4 KiB page of `bigfree --max-active 8 --seed-only` | process CPU time in virtual time over the same run's on the wall clock (engine only) |
//! | `usemem-ab-virtual` | a fault of `usemem -n 8 --readonly -j 2M --ab` | the same (engine only) |
//! | `wis-page-fault1` | a fault of will-it-scale's page_fault1, 1 task (wall) | the test over the task trait, sparse and full, and on the host ([`wis`]; a thread on both sides) |
//!
//! `fork-exit`, `random-write-4k` and `bigfree-nodes` are about scale (module [`scale`]): many
//! processes, random faults, many nodes. `bigfree-nodes` runs on sparse backing only; its row
//! carries both node counts on both clocks and their ratios ([`scale::NodeScaling`]).
//! `bigfree-virtual` and `usemem-ab-virtual` measure virtual time's cost on the host, not the
//! engine's speed ([`vtime_cost`]): their figures are `wall_cpu_ns`, `virtual_cpu_ns` and
//! `virtual_over_wall`, on process CPU time.
//!
//! `mmap-munmap-4k` is the VMA tree's path: at its peak the mm holds 65 530 VMAs (the default
//! `vm.max_map_count`; fewer when the host process has less room under its own limit, and
//! then both sides make the same number, [`BenchResult::mmaps`]), and each mmap searches for a
//! gap among them. Nothing is touched, so the backing mode does not matter there.
//!
//! # Same work, same state
//! - **Warm memory on both sides.** The engine's full-backing machine is built once, with its
//!   reservation made resident before any clock starts (`prefault`, on in [`default_config`]),
//!   and a warm-up pass runs each path once before the repeats: every timed populate then gets
//!   frames that were used before and must really be zeroed, as the kernel zeroes every page
//!   it faults in, and no timed read takes a host fault on a page-table frame or its metadata
//!   for the first time. The host child runs each populate (and the random writes) twice and
//!   the second round is the figure: its frames are the ones the first round just freed,
//!   resident in the guest (on a VM, memory the guest
//!   has not touched for a while may have been handed back to the hypervisor, and its first
//!   touch then pays a fault there too — that first round is reported as `host_cold_ns`). The
//!   engine's first pass on never-used frames, which the host just gave it already zeroed, is
//!   reported as `engine_full_fresh_ns`.
//! - **Zeroing limit.** `memset_gib_s` is the engine's own zeroing (`clear_pages`, one memset
//!   per block) over resident frames of the full machine: 2 MiB `__GFP_ZERO` allocations of
//!   frames that all had an owner before, so each is a real memset of 2 MiB (the allocation
//!   around it is well under 1 % of that). It is the rate no populate path can beat;
//!   `full_memset_share` says how close a populate path comes to it per byte it zeroes.
//!   `zero_alloc_4k_gib_s` is the same with 4 KiB allocations: a 4 KiB fault's allocation and
//!   zeroing, the floor of `populate-4k`.
//! - **Two clocks.** Every sample is taken on the measuring thread's CPU clock
//!   (`CLOCK_THREAD_CPUTIME_ID`: user and system time, so the host kernel's fault handling is
//!   in the host figure) and on the wall clock. The figures compared (`*_ns`, the targets) are
//!   CPU time: on a shared machine the wall clock also counts other processes' turns on the
//!   CPU, which has nothing to do with either side's code. The wall medians are reported
//!   beside them (`*_wall_ns`); on a quiet machine the two agree. `free-2-threads` is about two
//!   threads' overlap, so its figure is wall time.
//!
//! Nothing here asserts a time; the figures are for people (and `--json` for scripts).

mod engine;
mod run;
pub mod scale;
#[cfg(test)]
mod test;
pub mod vtime_cost;
pub mod wis;

use serde::Serialize;
use usermm::config::{BackingMode, MachineConfig, ThpMode};
use usermm_host::HostError;

use crate::stats;
use crate::task::Stamp;

use self::engine::{memset_bandwidth, Meas};
use self::run::Run;

const PAGE: u64 = 4096;
const HPAGE: u64 = 2 << 20;
/// One-page mappings per `mmap-munmap-4k` sample: the default `vm.max_map_count`.
pub const MMAPS: u64 = 65_530;
/// Mappings left to the host child beyond those it makes (its own, such as the stack growing).
const HOST_MAP_SLACK: u64 = 64;

/// One measured path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchPath {
    Populate4k,
    PopulateThp,
    Munmap4k,
    HugeZeroRead,
    ZeroRead4k,
    // Virtual time's host cost (vtime_cost.rs).
    BigfreeVirtual,
    UsememAbVirtual,
    Free2Threads,
    MmapMunmap4k,
    ForkExit,
    RandomWrite4k,
    BigfreeNodes,
    WisPageFault1,
}

impl BenchPath {
    pub const ALL: [BenchPath; 13] = [
        BenchPath::Populate4k,
        BenchPath::PopulateThp,
        BenchPath::Munmap4k,
        BenchPath::HugeZeroRead,
        BenchPath::ZeroRead4k,
        // Virtual time's host cost.
        BenchPath::BigfreeVirtual,
        BenchPath::UsememAbVirtual,
        BenchPath::Free2Threads,
        BenchPath::MmapMunmap4k,
        BenchPath::ForkExit,
        BenchPath::RandomWrite4k,
        BenchPath::BigfreeNodes,
        BenchPath::WisPageFault1,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BenchPath::Populate4k => "populate-4k",
            BenchPath::PopulateThp => "populate-thp",
            BenchPath::Munmap4k => "munmap-4k",
            BenchPath::HugeZeroRead => "huge-zero-read",
            BenchPath::ZeroRead4k => "zero-read-4k",
            BenchPath::BigfreeVirtual => "bigfree-virtual",
            BenchPath::UsememAbVirtual => "usemem-ab-virtual",
            BenchPath::Free2Threads => "free-2-threads",
            BenchPath::MmapMunmap4k => "mmap-munmap-4k",
            BenchPath::ForkExit => "fork-exit",
            BenchPath::RandomWrite4k => "random-write-4k",
            BenchPath::BigfreeNodes => "bigfree-nodes",
            BenchPath::WisPageFault1 => "wis-page-fault1",
        }
    }

    /// What one figure of the path counts.
    pub fn unit(self) -> &'static str {
        match self {
            BenchPath::HugeZeroRead => "fault (2 MiB)",
            BenchPath::ZeroRead4k => "fault (4 KiB)",
            BenchPath::UsememAbVirtual => "fault (2 MiB)",
            BenchPath::MmapMunmap4k => "mmap+munmap",
            BenchPath::ForkExit => "fork+exit",
            BenchPath::BigfreeNodes => "4 KiB page (64 nodes)",
            BenchPath::WisPageFault1 => "fault (page_fault1, 1 task)",
            _ => "4 KiB page",
        }
    }

    /// The path named `s`, if any.
    pub fn parse(s: &str) -> Option<BenchPath> {
        BenchPath::ALL.into_iter().find(|p| p.name() == s)
    }
}

impl Serialize for BenchPath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct BenchOpts {
    /// Bytes each populate/munmap path maps (and the 4 KiB zero-page read walks).
    pub size: u64,
    /// Bytes the huge-zero read walks (one fault per 2 MiB).
    pub read_size: u64,
    /// Timed repeats of every path.
    pub repeat: u32,
    /// Run only these paths; every path when empty (the memset figure is always taken).
    pub only: Vec<BenchPath>,
    /// Run the host kernel's side.
    pub host: bool,
    /// One-page mappings per `mmap-munmap-4k` sample (at most the machines'
    /// `max_map_count` and the host's room are used).
    pub mmaps: u64,
    /// A period of `wis-page-fault1` (a warm-up period and a measured one per side and
    /// repeat, on the wall clock).
    pub wis_period: std::time::Duration,
    /// Both engine machines' configuration, but for the memory size and the backing mode,
    /// which are the bench's ([`machine_config`]). Start from [`default_config`].
    pub base: MachineConfig,
}

impl BenchOpts {
    /// The dashboard's defaults: `size` per populate, 8 times that of huge-zero reads, 5
    /// repeats, the host beside the engine, machines from [`default_config`].
    pub fn new(size: u64) -> Self {
        BenchOpts {
            size,
            read_size: size.saturating_mul(8),
            repeat: 5,
            only: Vec::new(),
            host: true,
            mmaps: MMAPS,
            wis_period: std::time::Duration::from_millis(200),
            base: default_config(),
        }
    }

    fn wants(&self, p: BenchPath) -> bool {
        self.only.is_empty() || self.only.contains(&p)
    }
}

/// Median, spread and range of one figure over the repeats.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Spread {
    /// [`stats::median`].
    pub median: f64,
    /// [`stats::mad_pct`]: the median absolute deviation, % of the median.
    pub mad_pct: f64,
    pub min: f64,
    pub max: f64,
    pub samples: Vec<f64>,
}

impl Spread {
    fn of(samples: Vec<f64>) -> Option<Spread> {
        if samples.is_empty() {
            return None;
        }
        let (min, max) = samples
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
                (lo.min(x), hi.max(x))
            });
        Some(Spread {
            median: stats::median(&samples),
            mad_pct: stats::mad_pct(&samples),
            min,
            max,
            samples,
        })
    }
}

/// One path's figures, in ns per [`BenchPath::unit`], on the clock named by `clock`.
#[derive(Debug, Clone, Serialize)]
pub struct PathResult {
    pub path: BenchPath,
    pub unit: &'static str,
    /// `"thread-cpu"` or `"wall"`: the clock of the `*_ns` figures and spreads.
    pub clock: &'static str,
    pub engine_full_ns: Option<f64>,
    pub engine_sparse_ns: Option<f64>,
    pub host_ns: Option<f64>,
    /// `bigfree-virtual`, `usemem-ab-virtual`: process CPU time of the wall-clock run and of
    /// the virtual-time run (medians), and their ratio (the targets: ≤ 1.5×, ≤ 2×).
    pub wall_cpu_ns: Option<f64>,
    pub virtual_cpu_ns: Option<f64>,
    pub virtual_over_wall: Option<f64>,
    /// host / engine full: how many times faster the engine is (> 1: faster).
    pub host_over_full: Option<f64>,
    /// engine full / engine sparse: what real data costs on top of the mm work.
    pub full_over_sparse: Option<f64>,
    /// Populate paths: bytes zeroed per second by the full-backing engine, as a share of
    /// `memset_gib_s`.
    pub full_memset_share: Option<f64>,
    /// Populate paths: the engine's first pass on a just-booted machine, whose frames nobody
    /// has owned (the host gave them zeroed, so nothing is zeroed again).
    pub engine_full_fresh_ns: Option<f64>,
    /// Populate paths: the host's first round (memory possibly handed back to the hypervisor).
    pub host_cold_ns: Option<f64>,
    /// Wall-clock medians of the same samples.
    pub engine_full_wall_ns: Option<f64>,
    pub engine_sparse_wall_ns: Option<f64>,
    pub host_wall_ns: Option<f64>,
    pub engine_full: Option<Spread>,
    pub engine_sparse: Option<Spread>,
    pub host: Option<Spread>,
    /// `bigfree-nodes`: both node counts, both clocks, the ratios.
    pub nodes: Option<scale::NodeScaling>,
}

/// The engine's zeroing over resident frames that all had an owner, best of three passes of
/// `__GFP_ZERO` allocations (only the allocations timed, not the frees).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Zeroing {
    /// In 2 MiB `__GFP_ZERO` allocations (GiB/s of CPU time).
    pub memset_gib_s: f64,
    /// The same in 4 KiB `__GFP_ZERO` allocations (GiB/s of CPU time): a 4 KiB fault's
    /// allocation and zeroing together.
    pub zero_alloc_4k_gib_s: f64,
    /// `memset_gib_s` on the wall clock.
    pub memset_wall_gib_s: f64,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub opts: BenchOpts,
    pub config_full: MachineConfig,
    pub config_sparse: MachineConfig,
    /// Does the host back the full machine's reservation with 2 MiB pages?
    pub host_huge_pages: bool,
    #[serde(flatten)]
    pub zeroing: Zeroing,
    /// One-page mappings each `mmap-munmap-4k` sample made, on both sides (`None`: not run).
    pub mmaps: Option<u64>,
    pub paths: Vec<PathResult>,
}

/// Why a bench could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("size must be at least 4 MiB (got {0})")]
    TooSmall(u64),
    #[error("size must be at most 1 TiB (got {0})")]
    TooBig(u64),
    #[error("repeat must be at least 1")]
    NoRepeat,
    #[error("the two-thread free path needs at least 2 CPUs (got {0})")]
    TooFewCpus(u16),
    #[error("{0}")]
    Config(String),
    #[error("cannot build the {0} machine: {1}")]
    Machine(&'static str, String),
    #[error("engine: {0}")]
    Engine(String),
    #[error("host kernel: {0}")]
    Host(#[from] HostError),
}

fn engine_err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Engine(e.to_string())
}

/// The largest `size` the bench takes (1 TiB): its machines hold one populate mapping each (and the
/// host child maps as much), so this is far beyond any machine it runs on.
pub const MAX_SIZE: u64 = 1 << 40;

/// The bench's machine before the memory size and the backing mode: two CPUs (the free path's
/// two threads), one node, THP `madvise` (each mapping picks its page size with
/// `MADV_(NO)HUGEPAGE`, as the host child does), and `prefault` on, so that the full-backing
/// machine's reservation is resident before any clock starts, as a VM's RAM is (the sparse
/// machine ignores it).
pub fn default_config() -> MachineConfig {
    MachineConfig {
        cpus: 2,
        nodes: 1,
        thp: ThpMode::Madvise,
        prefault: true,
        ..MachineConfig::default()
    }
}

/// Refuse options the bench cannot run, before anything runs.
pub fn check(opts: &BenchOpts) -> Result<(), BenchError> {
    if opts.size < (4 << 20) {
        return Err(BenchError::TooSmall(opts.size));
    }
    if opts.size > MAX_SIZE || opts.read_size > MAX_SIZE.saturating_mul(8) {
        return Err(BenchError::TooBig(opts.size.max(opts.read_size / 8)));
    }
    if opts.repeat == 0 {
        return Err(BenchError::NoRepeat);
    }
    if opts.base.cpus < 2 {
        return Err(BenchError::TooFewCpus(opts.base.cpus));
    }
    machine_config(opts, BackingMode::Full).map(|_| ())
}

/// The machine of one backing mode: `opts.base` with room for one populate mapping (plus THP
/// alignment), its page tables, the huge-zero read's deposited tables, and slack.
pub fn machine_config(opts: &BenchOpts, backing: BackingMode) -> Result<MachineConfig, BenchError> {
    let tables = opts.size / 256 + opts.read_size / 256;
    let mem = (opts.size + HPAGE + tables + (64 << 20)).next_multiple_of(HPAGE);
    config_of(opts, mem, backing)
}

/// `opts.base` with `mem` bytes of `backing`, validated.
fn config_of(
    opts: &BenchOpts,
    mem: u64,
    backing: BackingMode,
) -> Result<MachineConfig, BenchError> {
    let mut c = opts.base.clone();
    c.mem = mem;
    c.backing = backing;
    c.validate()
        .map_err(|e| BenchError::Config(format!("invalid machine configuration: {e}")))?;
    Ok(c)
}

/// How many times [`run`] calls its `progress` (for a progress bar's length).
pub fn steps(opts: &BenchOpts) -> u64 {
    let per_repeat = [
        opts.wants(BenchPath::Populate4k) || opts.wants(BenchPath::Munmap4k),
        opts.wants(BenchPath::PopulateThp),
        opts.wants(BenchPath::HugeZeroRead),
        opts.wants(BenchPath::ZeroRead4k),
        opts.wants(BenchPath::BigfreeVirtual),
        opts.wants(BenchPath::UsememAbVirtual),
        opts.wants(BenchPath::Free2Threads),
        opts.wants(BenchPath::MmapMunmap4k),
        opts.wants(BenchPath::ForkExit),
        opts.wants(BenchPath::RandomWrite4k),
        opts.wants(BenchPath::BigfreeNodes),
        opts.wants(BenchPath::WisPageFault1),
    ]
    .into_iter()
    .filter(|&w| w)
    .count() as u64;
    4 + per_repeat * u64::from(opts.repeat)
}

/// One side's samples on both clocks.
#[derive(Default)]
struct SideSamples {
    cpu: Vec<f64>,
    wall: Vec<f64>,
}

impl SideSamples {
    fn push(&mut self, m: Meas) {
        self.cpu.push(m.cpu);
        self.wall.push(m.wall);
    }
}

/// Samples of one path.
#[derive(Default)]
struct Samples {
    full: SideSamples,
    sparse: SideSamples,
    host: SideSamples,
    full_fresh: Option<f64>,
    host_cold: Vec<f64>,
    /// Virtual time's host cost: process CPU per unit on the wall clock, in virtual time.
    wall_run: Vec<f64>,
    virtual_run: Vec<f64>,
}

impl Samples {
    /// The host's cold and warm runs of the path, each over `units`: the warm run as a sample,
    /// the cold run's CPU time apart.
    fn push_host(&mut self, cold: Stamp, warm: Stamp, units: u64) {
        self.host.push(Meas::of(warm, units));
        self.host_cold.push(Meas::of(cold, units).cpu);
    }

    fn engine(&mut self, full: bool) -> &mut SideSamples {
        if full {
            &mut self.full
        } else {
            &mut self.sparse
        }
    }
}

/// Every path's samples, in [`BenchPath::ALL`]'s order.
struct AllSamples(Vec<Samples>);

impl AllSamples {
    fn new() -> Self {
        AllSamples(BenchPath::ALL.iter().map(|_| Samples::default()).collect())
    }

    fn at(&mut self, p: BenchPath) -> &mut Samples {
        let i = BenchPath::ALL.iter().position(|&q| q == p).expect("path");
        &mut self.0[i]
    }
}

/// Run the bench. `progress` gets a short message before each step (for a progress bar: see
/// [`steps`]).
pub fn run(opts: &BenchOpts, progress: &mut dyn FnMut(&str)) -> Result<BenchResult, BenchError> {
    let mut r = run_paths(opts, progress)?;
    if opts.wants(BenchPath::WisPageFault1) {
        r.paths.push(wis::row(opts, progress)?);
    }
    Ok(r)
}

/// Every path but `wis-page-fault1`, whose machines and runs are its own ([`wis`]).
fn run_paths(opts: &BenchOpts, progress: &mut dyn FnMut(&str)) -> Result<BenchResult, BenchError> {
    check(opts)?;
    let run = Run::new(opts, progress)?;
    let mut s = AllSamples::new();
    progress("fresh machines and warm-up");
    run.warm_up(&mut s)?;
    let mut node_runs: [[Vec<scale::NodeRun>; 2]; 2] = Default::default();
    for r in 1..=opts.repeat {
        let mut say = |what: &str| progress(&format!("repeat {r}: {what}"));
        run.repeat_faults(&mut s, &mut say)?;
        run.repeat_rest(&mut s, &mut say)?;
        run.repeat_nodes(&mut s, &mut node_runs, &mut say)?;
    }
    let [wall_runs, virt_runs] = node_runs;
    let nodes = opts
        .wants(BenchPath::BigfreeNodes)
        .then(|| scale::NodeScaling::of(scale::bigfree_size(run.size), &wall_runs, &virt_runs));

    progress("memset bandwidth");
    let zeroing = memset_bandwidth(&run.full, run.size.min(256 << 20))?;
    let paths = BenchPath::ALL
        .iter()
        .zip(s.0)
        .filter(|(p, x)| {
            opts.wants(**p)
                && !(x.full.cpu.is_empty() && x.sparse.cpu.is_empty() && x.wall_run.is_empty())
        })
        .map(|(&path, x)| summary(path, x, nodes.as_ref(), zeroing.memset_gib_s))
        .collect();
    Ok(BenchResult {
        opts: opts.clone(),
        config_full: run.full.machine.config().clone(),
        config_sparse: run.sparse.machine.config().clone(),
        host_huge_pages: run.full.machine.phys().backing().host_huge_pages(),
        zeroing,
        mmaps: opts.wants(BenchPath::MmapMunmap4k).then_some(run.mmaps),
        paths,
    })
}

/// The medians of the engine's and the host's samples of `path` (on the path's clock), and
/// the ratios between them: the row's figures with nothing path-specific filled in.
fn medians(
    path: BenchPath,
    clock: &'static str,
    [full, sparse, host]: [SideSamples; 3],
) -> PathResult {
    let (full_s, sparse_s, host_s) = (
        Spread::of(full.cpu),
        Spread::of(sparse.cpu),
        Spread::of(host.cpu),
    );
    let med = |s: &Option<Spread>| s.as_ref().map(|s| s.median);
    let wall = |v: Vec<f64>| Spread::of(v).map(|s| s.median);
    let (f, sp, h) = (med(&full_s), med(&sparse_s), med(&host_s));
    PathResult {
        path,
        unit: path.unit(),
        clock,
        engine_full_ns: f,
        engine_sparse_ns: sp,
        host_ns: h,
        wall_cpu_ns: None,
        virtual_cpu_ns: None,
        virtual_over_wall: None,
        host_over_full: h.zip(f).map(|(h, f)| h / f),
        full_over_sparse: f.zip(sp).map(|(f, s)| f / s),
        full_memset_share: None,
        engine_full_fresh_ns: None,
        host_cold_ns: None,
        engine_full_wall_ns: wall(full.wall),
        engine_sparse_wall_ns: wall(sparse.wall),
        host_wall_ns: wall(host.wall),
        engine_full: full_s,
        engine_sparse: sparse_s,
        host: host_s,
        nodes: None,
    }
}

/// One path's row from its samples.
fn summary(
    path: BenchPath,
    x: Samples,
    nodes: Option<&scale::NodeScaling>,
    memset_gib_s: f64,
) -> PathResult {
    let clock = match path {
        BenchPath::Free2Threads => "wall",
        BenchPath::BigfreeVirtual | BenchPath::UsememAbVirtual => "process-cpu",
        _ => "thread-cpu",
    };
    let wall_cpu = Spread::of(x.wall_run).map(|s| s.median);
    let virtual_cpu = Spread::of(x.virtual_run).map(|s| s.median);
    let zeroes = matches!(path, BenchPath::Populate4k | BenchPath::PopulateThp);
    let mut row = medians(path, clock, [x.full, x.sparse, x.host]);
    row.wall_cpu_ns = wall_cpu;
    row.virtual_cpu_ns = virtual_cpu;
    row.virtual_over_wall = virtual_cpu.zip(wall_cpu).map(|(v, w)| v / w);
    row.full_memset_share = row.engine_full_ns.filter(|_| zeroes).map(|f| {
        let gib_s = PAGE as f64 / f / 1.073_741_824;
        gib_s / memset_gib_s
    });
    row.engine_full_fresh_ns = x.full_fresh;
    row.host_cold_ns = Spread::of(x.host_cold).map(|s| s.median);
    row.nodes = nodes.filter(|_| path == BenchPath::BigfreeNodes).cloned();
    row
}
