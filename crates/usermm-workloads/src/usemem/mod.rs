//! `usemem` from vm-scalability: every option, the same lines, on the engine or on the host
//! kernel.
//!
//! usemem is what vm-scalability's `case-*` scripts run, what LKP parses into
//! `vm-scalability.throughput`, and what mmtests' usemem configuration drives. This module is
//! usemem's behaviour written once — its command line ([`parse`](mod@parse), glibc `getopt_long` rules),
//! its `main` ([`program`]) and its workers ([`worker`]) — against a [`Sys`] trait, with two
//! machines under it:
//!
//! | module | machine | a usemem process is | a worker is |
//! |---|---|---|---|
//! | [`engine`] | the emulated kernel | an [`usermm::Mm`] | an engine thread on an emulated CPU |
//! | [`host`] | the real kernel (`usermm-host`) | a forked process | that process, or one of its threads |
//!
//! so the same command line gives the same lines from both, and from usemem itself. The
//! lines — stdout unless said otherwise:
//!
//! ```text
//! [..]1179648 bytes / 1314 usecs = 876712 KB/s   per worker; a '.' before each walk after
//!                                                the first (-r), none with -q
//! read again 1048576 bytes / 286 usecs = ...     -Z
//! 94 usecs to free memory                        per worker that maps its own memory (no -P)
//!                                                and mapped at most 32 units
//! ```
//!
//! and the `bytes` figure is usemem's 8-byte word arithmetic (see [`worker`]): `usemem 1M`
//! prints 1179648, `usemem 44739242` 50331645, `usemem -j 4100 16M` 2129920, `usemem 64Q`
//! (64 bytes) 72, and `usemem 1.5G` (1 byte) and `usemem 0` only a free line.
//!
//! Where stdout is a file or a pipe, C stdio buffers it fully, and one effect of that shows:
//! the line `--show-addr` prints for `-P`'s mapping is still in the parent's buffer when it
//! forks, so each process prints a copy before its first line (or at its exit) and the parent
//! prints its own at exit — `-n 2` gives three. On a terminal it is printed once, at once.
//!
//! Exit statuses are usemem's: 0 for a run (whatever its workers did — usemem's parent only
//! waits for them), 0 for `-h` and for a missing SIZE (usage on stderr), 1 for a bad option
//! (glibc's line and the usage on stderr) and for the checks `main` makes.
//!
//! The engine's limits (workers are host threads; a machine has at most 16 TiB) are the
//! caller's to state: see `usermm-cli`'s `usemem` command.

pub mod engine;
pub mod host;
pub mod io;
pub mod opts;
pub mod parse;
pub mod program;
pub mod rand48;
pub mod sys;
pub mod worker;

use std::sync::Arc;

use serde::Serialize;
use usermm::config::MachineConfig;
use usermm::stats::{LockStatSnapshot, MemInfo, VmItem, VmStatSnapshot};
use usermm::sync::class::HUGE_ZERO_REFCOUNT;
use usermm::sync::clock;
use usermm::Machine;

pub use self::engine::{EnginePlatform, Hooks, Usr1};
pub use self::io::{Capture, Io, StdIo};
pub use self::opts::{memparse, MsyncMode, UsememOpts};
pub use self::parse::{parse, Parsed};
pub use self::program::{Outcome, Platform};
pub use self::sys::Sys;
pub use self::worker::{kb_per_sec, WorkerRecord, MAX_POINTERS};

/// Per-mm figures of the huge zero page (seed 002).
#[derive(Debug, Clone, Serialize)]
pub struct HugeZeroFigures {
    pub per_mm_ref: bool,
    /// Operations on the global refcount (gets + puts) during the run.
    pub global_ops: i64,
    pub gets: i64,
    pub puts: i64,
    pub ops_per_mm: f64,
    pub thp_zero_page_alloc: i64,
    pub refcount_after: i64,
}

/// An engine run: usemem's outcome and what the engine saw.
#[derive(Debug, Clone, Serialize)]
pub struct UsememResult {
    pub config: MachineConfig,
    /// The options as usemem read them (`None` if it stopped before starting workers).
    pub opts: Option<UsememOpts>,
    /// usemem's exit status.
    pub status: i32,
    pub workers: Vec<WorkerRecord>,
    /// Sum of the workers' KB/s (LKP's `vm-scalability.throughput`).
    pub throughput_kbps: u64,
    pub wall_usecs: u64,
    pub vmstat_delta: VmStatSnapshot,
    pub meminfo_before: MemInfo,
    pub meminfo_after: MemInfo,
    pub huge_zero: HugeZeroFigures,
    pub zone_lock: Vec<LockStatSnapshot>,
    pub lru_lock: Vec<LockStatSnapshot>,
    /// `measured (this host)` or `modelled (profile NAME)`: how every time above was obtained.
    pub time: String,
    /// Virtual time: the share of the CPUs' busy time spent on the huge zero page's refcount
    /// line by `get_huge_zero_page` (seed 002's published share; the puts' time is the report's
    /// `huge_zero_refcount.put` line).
    pub huge_zero_line_share: Option<f64>,
    /// Virtual time: what the model's scheduler did per page fault of the run.
    pub sched_per_fault: Option<SchedPerFault>,
    /// Virtual time: the run's report (every CPU's busy, spin and idle time, every context's
    /// CPU time, lock_stat per class, the shared lines).
    pub vtime: Option<usermm::vtime::Report>,
}

/// A virtual run's scheduler work per page fault: its synchronisation points and its context
/// resumes (each a switch into a context and back), from the run's report (`vtime.sched`),
/// over the faults vmstat counted (`pgfault`). The host's bookkeeping of the model per fault,
/// not a modelled figure: what the cost of virtual time is made of.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SchedPerFault {
    /// `pgfault` of the run.
    pub faults: u64,
    pub sync_points: f64,
    pub resumes: f64,
}

impl SchedPerFault {
    /// `None` without a report or without a fault.
    fn of(report: Option<&usermm::vtime::Report>, faults: i64) -> Option<SchedPerFault> {
        let faults = u64::try_from(faults).ok().filter(|&f| f > 0)?;
        let sched = &report?.sched;
        Some(SchedPerFault {
            faults,
            sync_points: sched.sync_points as f64 / faults as f64,
            resumes: sched.resumes as f64 / faults as f64,
        })
    }
}

/// The cost profile of seed 002's machine (2 sockets, 72 threads), for `time.mode=virtual`.
pub const SEED_PROFILE: &str = crate::seeds::HUGE_ZERO_MACHINE.profile;

/// A machine could not start the run.
#[derive(Debug, thiserror::Error)]
pub enum UsememError {
    #[error("cannot create the parent's address space: {0}")]
    Mm(usermm::Errno),
    #[error("cannot boot the machine: {0}")]
    Boot(String),
    /// The run failed as a whole (its virtual clock reached its end).
    #[error(transparent)]
    Run(#[from] usermm::machine::MachineError),
}

/// Run usemem with `args` (what follows its name) on `machine`, its lines to `io`.
pub fn run_args(
    machine: &Arc<Machine>,
    name: &str,
    args: &[String],
    io: Arc<dyn Io>,
    hooks: Hooks,
    engine_help: &str,
) -> Result<UsememResult, UsememError> {
    let posixly = std::env::var_os("POSIXLY_CORRECT").is_some();
    let vm0 = machine.vmstat_snapshot();
    let meminfo_before = machine.meminfo();
    machine.phys().reset_lock_stats();
    // The whole program is one run of the machine: in virtual time every worker is a context
    // on its emulated CPU and every time usemem prints is read from the run's clock.
    let (out, wall_usecs) = machine
        .run(usermm::CpuId(0), || {
            let t0 = clock::now();
            let mut p = EnginePlatform::new(machine, io, hooks)?;
            let out = p.run(name, args, posixly, engine_help);
            drop(p);
            Ok::<_, usermm::Errno>((out, t0.elapsed_ns() / 1000))
        })?
        .map_err(UsememError::Mm)?;
    let report = machine.last_run_report();
    let vm = machine.vmstat_snapshot().since(&vm0);
    let hz = machine.huge_zero();
    let gets = vm.get(VmItem::HugeZeroRefGet);
    let puts = vm.get(VmItem::HugeZeroRefPut);
    let locks = machine.phys().lock_stats();
    let procs = out.plan.as_ref().map_or(1, |p| p.opts.processes().max(1));
    let sched_per_fault = SchedPerFault::of(report.as_ref(), vm.get(VmItem::Pgfault));
    Ok(UsememResult {
        config: machine.config().clone(),
        opts: out.plan.as_ref().map(|p| p.opts.clone()),
        status: out.status,
        throughput_kbps: out.workers.iter().map(|w| w.kb_per_sec).sum(),
        workers: out.workers,
        wall_usecs,
        huge_zero: HugeZeroFigures {
            per_mm_ref: hz.per_mm_ref(),
            global_ops: gets + puts,
            gets,
            puts,
            ops_per_mm: (gets + puts) as f64 / procs as f64,
            thp_zero_page_alloc: vm.get(VmItem::ThpZeroPageAlloc),
            refcount_after: hz.refcount(),
        },
        vmstat_delta: vm,
        meminfo_before,
        meminfo_after: machine.meminfo(),
        zone_lock: locks.zone_lock,
        lru_lock: locks.lru_lock,
        time: machine.time_label(),
        huge_zero_line_share: report
            .as_ref()
            .map(|r| r.line_share(HUGE_ZERO_REFCOUNT.name)),
        sched_per_fault,
        vtime: report,
    })
}

/// The command line that asks usemem for `opts` (the options [`run`] takes as a struct).
pub fn args_of(opts: &UsememOpts) -> Vec<String> {
    let mut a = Vec::new();
    let mut push = |k: &str, v: Option<String>| {
        a.push(k.to_string());
        if let Some(v) = v {
            a.push(v);
        }
    };
    if opts.nproc != 0 {
        push("-n", Some(opts.nproc.to_string()));
    }
    if opts.threads != 0 {
        push("-t", Some(opts.threads.to_string()));
    }
    if opts.readonly {
        push("-o", None);
    }
    if opts.step != 8 {
        push("-j", Some(opts.step.to_string()));
    }
    if opts.repeat != 1 {
        push("-r", Some(opts.repeat.to_string()));
    }
    if opts.unit != 0 {
        push("-u", Some(opts.unit.to_string()));
    }
    for (on, flag) in [
        (opts.anonymous, "-O"),
        (opts.prealloc, "-P"),
        (opts.prefault, "-F"),
        (opts.mlock, "-M"),
        (opts.random, "-R"),
        (opts.open_rw, "-w"),
        (opts.sync_rw, "-y"),
        (opts.sync_free, "-x"),
        (opts.madv_thp, "--madv-thp"),
        (opts.quiet, "-q"),
    ] {
        if on {
            push(flag, None);
        }
    }
    if opts.random_seed != 0 {
        push("--random-seed", Some(opts.random_seed.to_string()));
    }
    a.push(opts.size.to_string());
    a
}

/// Run usemem with `opts` on `machine`, its lines kept (for the experiments).
pub fn run(machine: &Arc<Machine>, opts: &UsememOpts) -> Result<UsememResult, UsememError> {
    run_args(
        machine,
        "usemem",
        &args_of(opts),
        Arc::new(Capture::default()),
        Hooks::default(),
        "",
    )
}

/// Seed 002's run as `reproduce` makes it (and `usermm infer` evaluates its training row):
/// `usemem -n 72 --readonly -j 0x200000 100G` on the seed's Haswell-EP (72 CPUs, 2 nodes,
/// THP always, sparse backing, the seed's profile), at the seed's own size. The caller sets
/// the clock (`time.mode`) and the policy ([`MachineConfig::set_patched`]).
pub fn seed_002_run() -> (MachineConfig, UsememOpts) {
    let seed = crate::seeds::HUGE_ZERO;
    let opts = UsememOpts {
        size: seed.size,
        nproc: seed.nproc as i32,
        readonly: true,
        step: seed.step,
        ..UsememOpts::default()
    };
    let mut base = MachineConfig {
        mem: 16 << 30,
        cpus: crate::seeds::HUGE_ZERO_MACHINE.cpus,
        nodes: crate::seeds::HUGE_ZERO_MACHINE.nodes,
        backing: usermm::config::BackingMode::Sparse,
        thp: usermm::config::ThpMode::Always,
        ..MachineConfig::default()
    };
    base.time.profile = SEED_PROFILE.into();
    (base, opts)
}

/// Run the same usemem on a vanilla and a patched machine built from `base`.
pub fn run_ab(
    base: &MachineConfig,
    opts: &UsememOpts,
) -> Result<(UsememResult, UsememResult), UsememError> {
    let mut v = base.clone();
    v.set_patched(false);
    let mut p = base.clone();
    p.set_patched(true);
    let boot = |c| Machine::new(c).map_err(|e| UsememError::Boot(e.to_string()));
    let a = run(&boot(v)?, opts)?;
    let b = run(&boot(p)?, opts)?;
    Ok((a, b))
}
