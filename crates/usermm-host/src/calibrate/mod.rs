//! `usermm calibrate`'s measuring half: this host's kernel, timed, figure by figure.
//!
//! [`calibrate`] runs a fixed list of probes, each sample in a freshly forked single-threaded
//! process pinned to the least-loaded CPU (chosen from `/proc/stat` before every round), timed
//! on the child's thread CPU time, and returns a [`HostCalibration`]: per figure the median,
//! min, max, MAD, every sample, a `bimodal` flag and the exact method. The profile built from it
//! (`usermm-workloads`' `this_host_profile`) names every figure after this record.
//!
//! # How it differs from the tools it mirrors
//! - vm-scalability's case scripts time whole runs of `usemem` on the wall clock and report
//!   throughput; here each kernel step (a munmap, a fault, a `MADV_DONTNEED`) is timed alone on
//!   the CPU clock of one process and divided by the pages or faults it covered, so that a
//!   neighbour's load on a shared host does not enter the figure (only its cache effects).
//! - lmbench's `lat_mem_rd` walks strided chains of increasing size and prints a latency
//!   curve; the DRAM figure here is one point — a random single-cycle permutation of the cache
//!   lines of a THP-backed buffer far larger than the last-level cache — because the profile
//!   needs one price for a line that comes from memory.
//! - core-to-core-latency measures every pair of cores with threads of one process; here the
//!   two sides are two processes sharing one anonymous page (the probe child must not spawn
//!   threads: it was forked from a multi-threaded process), pinned to the two least-loaded
//!   CPUs, and only one pair is measured.
//! - The teardown split is measured, not sampled: the munmap of copy-on-write-shared pages by
//!   a forked child zaps and frees nothing (refcounts stay above zero), the parent's munmap
//!   afterwards does both, in the same process (this host's teardown mode is per process).
//!
//! Nothing here asserts a time; the structure of the record is tested, the values are what
//! the host gave.

#![deny(unsafe_code)]

mod lru_add;
mod probes;
mod shootdown;
mod smt;
mod stats;
mod system;
mod validate;

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::HostError;
use crate::ops::{HPAGE_SIZE, PAGE_SIZE};

pub use lru_add::LruAddProbe;
pub use shootdown::ShootdownProbe;
pub use smt::{SmtProbe, SHARED_BELOW};
pub(crate) use system::parse_cpu_list;
pub use system::{CacheLevel, SystemInfo};
pub use validate::validate;

/// The record's format version (bump when a field changes meaning). 2 added the SMT probe
/// (`smt`); a format-1 record, which has none, is still read (its profile keeps the rule it
/// always had: the topology sysfs reports, no SMT factor measured). 3 added the TLB shootdown
/// probe (`shootdown`); an older record's profile keeps the assumed shootdown costs. 4 added the
/// LRU-add probe (`lru_add`); an older record's profile keeps the engine's default batch and the
/// assumed per-folio cost.
pub const FORMAT: u32 = 4;
/// The oldest format this usermm reads.
pub const OLDEST_FORMAT: u32 = 1;

/// Repeats the command line asks for at least (a test may ask the library for fewer).
pub const MIN_REPEAT: u32 = 7;

/// The most samples a figure may ask for: a round of every probe takes seconds (about 6 s on a
/// 2-core host), so 100 rounds are ten minutes or more (a million were seventy days).
pub const MAX_REPEAT: u32 = 100;

/// One measured figure: its samples (one per process) and their summary.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Measured {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Median absolute deviation from the median (unscaled).
    pub mad: f64,
    /// One per repeat, in the order taken.
    pub samples: Vec<f64>,
    /// The samples split into two clusters far apart relative to their spread (see the rule
    /// in `stats::bimodal`): the median then lies in one mode, and the spread is the modes'.
    pub bimodal: bool,
    pub unit: String,
    /// How the figure was measured, exactly.
    pub method: String,
}

impl Measured {
    /// Summarises `samples`.
    pub fn new(samples: Vec<f64>, unit: &str, method: String) -> Measured {
        let (median, min, max, mad) = stats::summary(&samples);
        Measured {
            median,
            min,
            max,
            mad,
            bimodal: stats::bimodal(&samples),
            samples,
            unit: unit.to_string(),
            method,
        }
    }
}

/// How many figures [`Figures`] holds.
pub const FIGURES: usize = 13;

/// Every figure `usermm calibrate` measures.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Figures {
    /// munmap of touched 4 KiB pages, ns/page.
    pub munmap_4k: Measured,
    /// munmap by a forked child of copy-on-write-shared touched pages (zap, no free), ns/page.
    pub munmap_cow_4k: Measured,
    /// The same process's full munmap of those pages after the child's, ns/page.
    pub munmap_full_paired_4k: Measured,
    /// MADV_DONTNEED of touched 4 KiB pages, ns/page.
    pub dontneed_4k: Measured,
    /// First-touch write fault on a 4 KiB page, ns/fault.
    pub write_fault_4k: Measured,
    /// Read fault mapping the 4 KiB zero page, ns/fault.
    pub zero_read_fault_4k: Measured,
    /// Read fault mapping the huge zero page, ns/fault.
    pub huge_zero_read_fault: Measured,
    /// Write fault allocating and clearing a 2 MiB THP, ns/fault.
    pub thp_write_fault: Measured,
    /// 4 KiB memsets over a pre-faulted buffer larger than the caches, bytes/ns.
    pub clear_bandwidth: Measured,
    /// One `getppid` system call, ns.
    pub syscall: Measured,
    /// One-way cache-line transfer between two CPUs (CAS ping-pong round trip / 2), ns.
    pub cacheline_transfer: Measured,
    /// Uncontended `lock xadd` on a line this CPU holds, ns.
    pub atomic_rmw: Measured,
    /// Dependent load from DRAM (random pointer chase), ns/load.
    pub dram_latency: Measured,
}

impl Figures {
    /// Every figure with its key, in table order.
    pub fn all(&self) -> [(&'static str, &Measured); FIGURES] {
        [
            ("munmap_4k", &self.munmap_4k),
            ("munmap_cow_4k", &self.munmap_cow_4k),
            ("munmap_full_paired_4k", &self.munmap_full_paired_4k),
            ("dontneed_4k", &self.dontneed_4k),
            ("write_fault_4k", &self.write_fault_4k),
            ("zero_read_fault_4k", &self.zero_read_fault_4k),
            ("huge_zero_read_fault", &self.huge_zero_read_fault),
            ("thp_write_fault", &self.thp_write_fault),
            ("clear_bandwidth", &self.clear_bandwidth),
            ("syscall", &self.syscall),
            ("cacheline_transfer", &self.cacheline_transfer),
            ("atomic_rmw", &self.atomic_rmw),
            ("dram_latency", &self.dram_latency),
        ]
    }
}

/// How big each probe is. [`Sizes::full`] is what `usermm calibrate` runs (the whole run takes
/// a few minutes on a small host); [`Sizes::small`] is a test-only knob.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// Bytes mapped, touched and torn down by the munmap, COW-pair and MADV_DONTNEED probes.
    pub teardown_bytes: u64,
    /// Bytes of 4 KiB write and zero-page read faults.
    pub fault_bytes: u64,
    /// Bytes of huge-zero-page read faults (one per 2 MiB; nothing is allocated).
    pub huge_zero_bytes: u64,
    /// Bytes of THP write faults (one per 2 MiB).
    pub thp_bytes: u64,
    /// The memset buffer, and how many passes over it.
    pub clear_bytes: u64,
    pub clear_passes: u64,
    pub syscall_iters: u64,
    pub rmw_iters: u64,
    pub round_trips: u64,
    /// The pointer-chase buffer, and the timed loads.
    pub dram_bytes: u64,
    pub dram_loads: u64,
    /// Rounds of the SMT probe's loop (format 2; 0 in a format-1 record, which has no probe).
    #[serde(default)]
    pub smt_rounds: u64,
    /// Flushes per sample of the shootdown probe (format 3; 0 in an older record).
    #[serde(default)]
    pub shootdown_flushes: u64,
    /// Loops per sample of the LRU-add probe, each a fault on every page of its 1 MiB VMA
    /// (format 4; 0 in an older record).
    #[serde(default)]
    pub lru_add_loops: u64,
}

impl Sizes {
    /// The sizes of `usermm calibrate`.
    pub fn full() -> Sizes {
        Sizes {
            teardown_bytes: 512 << 20,
            fault_bytes: 256 << 20,
            huge_zero_bytes: 32 << 30,
            thp_bytes: 1 << 30,
            clear_bytes: 256 << 20,
            clear_passes: 4,
            syscall_iters: 200_000,
            rmw_iters: 10_000_000,
            round_trips: 200_000,
            dram_bytes: 512 << 20,
            dram_loads: 4_000_000,
            smt_rounds: 5_000_000,
            shootdown_flushes: 4000,
            lru_add_loops: 64,
        }
    }

    /// Tiny sizes for tests of the structure (the values mean little).
    pub fn small() -> Sizes {
        Sizes {
            teardown_bytes: 8 << 20,
            fault_bytes: 8 << 20,
            huge_zero_bytes: 64 << 20,
            thp_bytes: 16 << 20,
            clear_bytes: 4 << 20,
            clear_passes: 1,
            syscall_iters: 2_000,
            rmw_iters: 100_000,
            round_trips: 2_000,
            dram_bytes: 16 << 20,
            dram_loads: 100_000,
            smt_rounds: 50_000,
            shootdown_flushes: 200,
            lru_add_loops: 4,
        }
    }

    fn check(&self) -> Result<(), HostError> {
        let ok = self.teardown_bytes >= PAGE_SIZE
            && self.fault_bytes >= PAGE_SIZE
            && self.huge_zero_bytes >= HPAGE_SIZE
            && self.thp_bytes >= HPAGE_SIZE
            && self.clear_bytes >= PAGE_SIZE
            && self.dram_bytes >= HPAGE_SIZE
            && [
                self.clear_passes,
                self.syscall_iters,
                self.rmw_iters,
                self.round_trips,
                self.dram_loads,
                self.smt_rounds,
                self.shootdown_flushes,
                self.lru_add_loops,
            ]
            .iter()
            .all(|&n| n > 0);
        if ok {
            Ok(())
        } else {
            Err(HostError::Sys {
                what: "calibration sizes",
                errno: libc::EINVAL,
            })
        }
    }
}

/// What `usermm calibrate` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CalibrateOpts {
    /// Samples per figure, each from a fresh process (≥ 1 here; the CLI asks for ≥ 7).
    pub repeat: u32,
    pub sizes: Sizes,
}

impl Default for CalibrateOpts {
    fn default() -> Self {
        CalibrateOpts {
            repeat: MIN_REPEAT,
            sizes: Sizes::full(),
        }
    }
}

/// The calibration of one host: what the system reports and every measured figure.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct HostCalibration {
    pub format: u32,
    /// When the run started, UTC (`YYYY-MM-DDTHH:MM:SSZ`).
    pub date: String,
    pub repeat: u32,
    pub sizes: Sizes,
    pub system: SystemInfo,
    /// The CPUs the samples ran on, one per repeat (the least-loaded allowed CPU then), and
    /// whether pinning worked in every child.
    pub cpus_used: Vec<usize>,
    pub pinned: bool,
    /// The THP probes got what they asked for: the huge zero page was mapped (a second read in
    /// the region took no fault) and the THP write faults grew `AnonHugePages`, in every sample.
    pub huge_zero_page_seen: bool,
    pub thp_seen: bool,
    /// Wall time of the whole run, s (not a figure: the budget).
    pub wall_seconds: f64,
    pub figures: Figures,
    /// The SMT probe (format 2): do two of this host's CPUs share a physical core?
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smt: Option<SmtProbe>,
    /// The TLB shootdown probe (format 3): what a flush costs its sender and its receiver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shootdown: Option<ShootdownProbe>,
    /// The LRU-add probe (format 4): the period of the LRU-add batch's slow fault and its cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lru_add: Option<LruAddProbe>,
}

/// One step of the run, for a progress line: `(what, done, total)`.
pub type Progress<'a> = &'a mut dyn FnMut(&str, usize, usize);

/// Probes per round (a progress bar counts `repeat * PROBES` steps).
pub const PROBES: usize = 15;

/// Runs every probe `opts.repeat` times and summarises: the figures' rounds (one sample of
/// each figure a round, so that a change of the host's load spreads over all of them), then
/// the SMT probe's samples ([`SmtProbe`]), the shootdown probe's ([`ShootdownProbe`]), then the
/// LRU-add probe's ([`LruAddProbe`]).
pub fn calibrate(
    opts: &CalibrateOpts,
    progress: Progress<'_>,
) -> Result<HostCalibration, HostError> {
    let mut c = measure_rounds(opts, progress)?;
    let t = Instant::now();
    let n = opts.repeat as usize;
    let probe = smt::run(
        n,
        opts.sizes.smt_rounds,
        (n * (PROBES - 3), n * PROBES),
        progress,
    )?;
    c.pinned &= probe.pinned;
    c.smt = Some(probe);
    let probe = shootdown::run(
        n,
        opts.sizes.shootdown_flushes,
        (n * (PROBES - 2), n * PROBES),
        progress,
    )?;
    c.pinned &= probe.pinned;
    c.shootdown = Some(probe);
    let probe = lru_add::run(
        n,
        opts.sizes.lru_add_loops,
        (n * (PROBES - 1), n * PROBES),
        progress,
    )?;
    c.pinned &= probe.pinned;
    c.lru_add = Some(probe);
    c.wall_seconds += t.elapsed().as_secs_f64();
    Ok(c)
}

/// The samples of a probe that pairs two CPUs (the SMT and shootdown probes): `repeat` times,
/// on the two least-loaded CPUs this process may run on (measuring on the first), `sample`
/// takes one and says whether both sides were pinned; each is a `what` step of `progress`,
/// counted from `done` of `total`. Returns the pairs and whether every side was pinned.
fn paired_samples(
    repeat: usize,
    what: &str,
    (done, total): (usize, usize),
    progress: Progress<'_>,
    mut sample: impl FnMut(usize, usize) -> Result<bool, HostError>,
) -> Result<(Vec<(usize, usize)>, bool), HostError> {
    let allowed = crate::sys::allowed_cpus();
    let (mut pairs, mut pinned) = (Vec::with_capacity(repeat), true);
    for k in 0..repeat {
        let order = system::cpus_by_idle(&allowed);
        let (cpu, other) = (order[0], order[1]);
        pinned &= sample(cpu, other)?;
        pairs.push((cpu, other));
        progress(what, done + k + 1, total);
    }
    Ok((pairs, pinned))
}

/// The figures' rounds (every probe but the three that follow them: the SMT and shootdown
/// probes, which pair CPUs, and the LRU-add probe).
fn measure_rounds(
    opts: &CalibrateOpts,
    progress: Progress<'_>,
) -> Result<HostCalibration, HostError> {
    if opts.repeat == 0 {
        return Err(HostError::Sys {
            what: "calibration repeat count",
            errno: libc::EINVAL,
        });
    }
    opts.sizes.check()?;
    let started = Instant::now();
    let date = crate::facts::utc_now();
    let system = SystemInfo::read();
    let allowed = crate::sys::allowed_cpus();
    if allowed.len() < 2 {
        return Err(HostError::Sys {
            what: "cache-line ping-pong (needs two CPUs this process may run on)",
            errno: libc::EINVAL,
        });
    }
    let s = opts.sizes;
    let rounds = run_rounds(&s, opts.repeat as usize, &allowed, progress)?;
    let figures = figures(rounds.samples, &s, &system, opts.repeat as usize);
    Ok(HostCalibration {
        format: FORMAT,
        date,
        repeat: opts.repeat,
        sizes: s,
        system,
        cpus_used: rounds.cpus_used,
        pinned: rounds.pinned,
        huge_zero_page_seen: rounds.huge_zero_seen,
        thp_seen: rounds.thp_seen,
        wall_seconds: started.elapsed().as_secs_f64(),
        figures,
        smt: None,
        shootdown: None,
        lru_add: None,
    })
}

/// What the rounds of [`run_rounds`] gathered: every figure's samples, in [`Figures`]' order,
/// and what the children said of their pinning and of the pages they got.
struct Rounds {
    samples: [Vec<f64>; FIGURES],
    cpus_used: Vec<usize>,
    pinned: bool,
    huge_zero_seen: bool,
    thp_seen: bool,
}

impl Rounds {
    /// One probe's sample of figure `figure` (its index in [`Figures::all`]), from its words.
    fn take(&mut self, figure: usize, w: &probes::Words, sample: f64) {
        self.pinned &= w[1] == 1;
        self.samples[figure].push(sample);
    }
}

/// `n` rounds of every figure's probe, each round on the least-loaded CPU of
/// `allowed` (its ping-pong partner on the next).
fn run_rounds(
    s: &Sizes,
    n: usize,
    allowed: &[usize],
    progress: Progress<'_>,
) -> Result<Rounds, HostError> {
    let total = n * PROBES;
    let mut step = 0;
    let mut tick = |what: &str, progress: &mut dyn FnMut(&str, usize, usize)| {
        step += 1;
        progress(what, step, total);
    };
    let pages = |bytes: u64| (bytes / PAGE_SIZE) as f64;
    let per = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    let mut r = Rounds {
        samples: Default::default(),
        cpus_used: Vec::new(),
        pinned: true,
        huge_zero_seen: true,
        thp_seen: true,
    };
    for _ in 0..n {
        let order = system::cpus_by_idle(allowed);
        let (cpu, other) = (order[0], order[1]);
        r.cpus_used.push(cpu);
        let c = Some(cpu);

        let w = probes::munmap_4k(c, s.teardown_bytes)?;
        r.take(0, &w, w[2] as f64 / pages(s.teardown_bytes));
        tick("munmap", progress);

        let w = probes::cow_pair(c, s.teardown_bytes)?;
        r.take(1, &w, w[2] as f64 / pages(s.teardown_bytes));
        r.take(2, &w, w[3] as f64 / pages(s.teardown_bytes));
        tick("COW-child munmap + full munmap", progress);

        let w = probes::dontneed_4k(c, s.teardown_bytes)?;
        r.take(3, &w, w[2] as f64 / pages(s.teardown_bytes));
        tick("MADV_DONTNEED", progress);

        let w = probes::write_fault(c, s.fault_bytes, false)?;
        r.take(4, &w, per(w[2], w[3]));
        tick("4 KiB write fault", progress);

        let w = probes::read_fault(c, s.fault_bytes, false)?;
        r.take(5, &w, per(w[2], w[3]));
        tick("zero-page read fault", progress);

        let w = probes::read_fault(c, s.huge_zero_bytes, true)?;
        r.huge_zero_seen &= w[4] == 1;
        r.take(6, &w, per(w[2], w[3]));
        tick("huge-zero read fault", progress);

        let w = probes::write_fault(c, s.thp_bytes, true)?;
        r.thp_seen &= w[4] * 1024 >= s.thp_bytes / 2;
        r.take(7, &w, per(w[2], w[3]));
        tick("THP write fault", progress);

        let w = probes::clear_bandwidth(c, s.clear_bytes, s.clear_passes)?;
        r.take(8, &w, per(w[3], w[2]));
        tick("memset bandwidth", progress);

        let w = probes::syscall(c, s.syscall_iters)?;
        r.take(9, &w, w[2] as f64 / s.syscall_iters as f64);
        tick("getppid", progress);

        let w = probes::ping_pong(c, other, s.round_trips)?;
        r.pinned &= w[4] == 1;
        r.take(10, &w, per(w[2], w[3]) / 2.0);
        tick("cache-line ping-pong", progress);

        let w = probes::atomic_rmw(c, s.rmw_iters)?;
        r.take(11, &w, w[2] as f64 / s.rmw_iters as f64);
        tick("lock xadd", progress);

        let w = probes::dram_chase(c, s.dram_bytes, s.dram_loads)?;
        r.take(12, &w, w[2] as f64 / s.dram_loads as f64);
        tick("DRAM pointer chase", progress);
    }
    Ok(r)
}

/// The figures of `n` rounds' samples (in [`Figures`]' order), each with its exact method.
fn figures(samples: [Vec<f64>; FIGURES], s: &Sizes, system: &SystemInfo, n: usize) -> Figures {
    let mib = |b: u64| b >> 20;
    let common = format!(
        "thread CPU time (CLOCK_THREAD_CPUTIME_ID) of a freshly forked single-threaded process \
         pinned to the least-loaded CPU, one process per sample, {n} samples"
    );
    let [munmap, cow, full, dontneed, wf, zf, hzf, thpf, clear, sys, xfer, rmw, dram] = samples;
    Figures {
        munmap_4k: Measured::new(
            munmap,
            "ns/page",
            format!(
                "munmap of a {} MiB private anonymous MADV_NOHUGEPAGE mapping whose 4 KiB pages \
                 were all written, / pages; {common}",
                mib(s.teardown_bytes)
            ),
        ),
        munmap_cow_4k: Measured::new(
            cow,
            "ns/page",
            format!(
                "a {} MiB MADV_NOHUGEPAGE mapping, every 4 KiB page written, then fork: the \
                 child's munmap of the copy-on-write-shared range (PTEs zapped, refcounts do not \
                 reach zero: nothing freed), / pages; {common}",
                mib(s.teardown_bytes)
            ),
        ),
        munmap_full_paired_4k: Measured::new(
            full,
            "ns/page",
            format!(
                "the parent's munmap of the same {} MiB range after the COW child's munmap and \
                 exit (zap and free), / pages, paired with munmap_cow_4k in the same process; \
                 {common}",
                mib(s.teardown_bytes)
            ),
        ),
        dontneed_4k: Measured::new(
            dontneed,
            "ns/page",
            format!(
                "MADV_DONTNEED of a {} MiB MADV_NOHUGEPAGE mapping whose 4 KiB pages were all \
                 written, / pages; {common}",
                mib(s.teardown_bytes)
            ),
        ),
        write_fault_4k: Measured::new(
            wf,
            "ns/fault",
            format!(
                "one byte written to each 4 KiB page of a fresh {} MiB MADV_NOHUGEPAGE mapping \
                 (after a warm-up round of the same size whose munmap leaves the frames resident \
                 on the kernel's free lists), / minor faults (getrusage); {common}",
                mib(s.fault_bytes)
            ),
        ),
        zero_read_fault_4k: Measured::new(
            zf,
            "ns/fault",
            format!(
                "one byte read from each 4 KiB page of a fresh read-only {} MiB MADV_NOHUGEPAGE \
                 mapping (each fault maps the zero page), / minor faults; {common}",
                mib(s.fault_bytes)
            ),
        ),
        huge_zero_read_fault: Measured::new(
            hzf,
            "ns/fault",
            format!(
                "one byte read from each 2 MiB of a fresh read-only 2 MiB-aligned MADV_HUGEPAGE \
                 {} MiB mapping (THP mode `{}`, use_zero_page {}: each fault maps the huge zero \
                 page), / minor faults; {common}",
                mib(s.huge_zero_bytes),
                system.thp_enabled,
                system.thp_use_zero_page
            ),
        ),
        thp_write_fault: Measured::new(
            thpf,
            "ns/fault",
            format!(
                "one byte written to each 2 MiB of a fresh 2 MiB-aligned MADV_HUGEPAGE {} MiB \
                 mapping (THP mode `{}`, defrag `{}`; after a warm-up round of the same size), \
                 / minor faults; {common}",
                mib(s.thp_bytes),
                system.thp_enabled,
                system.thp_defrag
            ),
        ),
        clear_bandwidth: Measured::new(
            clear,
            "bytes/ns",
            format!(
                "memset of 4 KiB at a time over a pre-faulted {} MiB MADV_NOHUGEPAGE buffer, {} \
                 passes, bytes / ns; {common}",
                mib(s.clear_bytes),
                s.clear_passes
            ),
        ),
        syscall: Measured::new(
            sys,
            "ns",
            format!(
                "syscall(SYS_getppid) {} times in a loop, / calls; {common}",
                s.syscall_iters
            ),
        ),
        cacheline_transfer: Measured::new(
            xfer,
            "ns",
            format!(
                "compare-and-swap ping-pong on one cache line of a MAP_SHARED page between the \
                 probe process and a forked partner pinned to the next least-loaded CPU, {} \
                 round trips in batches of {}; one-way transfer = the median batch's round \
                 trip / 2 (a batch in which the partner was preempted is an outlier), on the \
                 pinging side's thread CPU time; {common}",
                s.round_trips,
                probes::PING_BATCH.min(s.round_trips)
            ),
        ),
        atomic_rmw: Measured::new(
            rmw,
            "ns",
            format!(
                "uncontended lock xadd (AtomicU64::fetch_add) on a line this CPU holds, {} times \
                 in a loop, / operations; {common}",
                s.rmw_iters
            ),
        ),
        dram_latency: Measured::new(
            dram,
            "ns/load",
            format!(
                "dependent pointer chase over a random single-cycle permutation (Sattolo) of \
                 the 64-byte lines of a {} MiB 2 MiB-aligned MADV_HUGEPAGE buffer ({}x the \
                 largest cache), {} timed loads after {} untimed, / loads; {common}",
                mib(s.dram_bytes),
                s.dram_bytes / system.largest_cache_bytes().max(1),
                s.dram_loads,
                s.dram_loads / 8
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_calibration_has_every_figure_positive() {
        let opts = CalibrateOpts {
            repeat: 2,
            sizes: Sizes::small(),
        };
        let mut steps = 0;
        let c = calibrate(&opts, &mut |_, done, total| {
            steps = done;
            assert!(done <= total);
        })
        .unwrap();
        assert_eq!(steps, 2 * PROBES);
        assert_eq!(c.cpus_used.len(), 2);
        for (key, m) in c.figures.all() {
            assert_eq!(m.samples.len(), 2, "{key}");
            assert!(
                m.median > 0.0 && m.min > 0.0 && m.min <= m.max,
                "{key}: {m:?}"
            );
            assert!(!m.method.is_empty() && !m.unit.is_empty(), "{key}");
        }
        assert!(!c.system.kernel.is_empty());
        // The SMT probe: a sample a round, on two distinct CPUs; the record validates, and
        // without its probe it is a format-1 record (which still validates) or refused.
        let smt = c.smt.as_ref().unwrap();
        assert_eq!((smt.ratio.samples.len(), smt.pairs.len()), (2, 2));
        assert!(smt.pairs.iter().all(|(a, b)| a != b) && smt.ratio.median > 0.0);
        assert_eq!(smt.shared_core, smt.ratio.median < SHARED_BELOW);
        assert!(smt.summary().starts_with("SMT probe: CPUs "));
        // The shootdown probe likewise; the receiver's loss is never negative.
        let sd = c.shootdown.as_ref().unwrap();
        assert_eq!((sd.sender.samples.len(), sd.receiver.samples.len()), (2, 2));
        assert!(sd.pairs.iter().all(|(a, b)| a != b) && sd.flushes == opts.sizes.shootdown_flushes);
        assert!(sd.receiver.samples.iter().all(|v| *v >= 0.0));
        assert!(sd.summary().starts_with("TLB shootdown probe: CPUs "));
        // The LRU-add probe: a sample a round, every fault of every loop timed.
        let la = c.lru_add.as_ref().unwrap();
        assert_eq!((la.drain.samples.len(), la.cpus.len()), (2, 2));
        assert_eq!(
            la.faults,
            opts.sizes.lru_add_loops * probes::LRU_ADD_VMA_PAGES
        );
        assert!(la.fault.median > 0.0 && la.drain.samples.iter().all(|v| *v >= 0.0));
        assert!(la.summary().starts_with("LRU-add probe: "));
        assert_eq!(validate(&c), Ok(()));
        let mut old = c.clone();
        old.lru_add = None;
        assert!(validate(&old).unwrap_err().starts_with("lru_add: missing"));
        old.format = 3;
        assert_eq!(validate(&old), Ok(()));
        old.shootdown = None;
        assert!(validate(&old)
            .unwrap_err()
            .starts_with("shootdown: missing"));
        old.format = 2;
        assert_eq!(validate(&old), Ok(()));
        old.smt = None;
        assert!(validate(&old).unwrap_err().starts_with("smt: missing"));
        old.format = 1;
        assert_eq!(validate(&old), Ok(()));
        old.format = 5;
        assert!(validate(&old).unwrap_err().contains("reads formats 1 to 4"));
        let json = serde_json::to_string(&c).unwrap();
        let back: HostCalibration = serde_json::from_str(&json).unwrap();
        // serde_json's default float parsing may differ in the last bit.
        assert_eq!(
            (back.repeat, &back.system, &back.date),
            (c.repeat, &c.system, &c.date)
        );
        for ((k, a), (_, b)) in back.figures.all().iter().zip(c.figures.all()) {
            assert!((a.median - b.median).abs() <= 1e-9 * b.median, "{k}");
        }
    }

    #[test]
    fn zero_repeats_and_empty_sizes_are_errors() {
        let mut opts = CalibrateOpts {
            repeat: 0,
            sizes: Sizes::small(),
        };
        assert!(calibrate(&opts, &mut |_, _, _| ()).is_err());
        opts.repeat = 1;
        opts.sizes.rmw_iters = 0;
        assert!(calibrate(&opts, &mut |_, _, _| ()).is_err());
    }
}
