//! `usemem` from vm-scalability, run against the engine.
//!
//! Same options and the same output lines as the C program (`peers.md` B.1):
//! `"%lu bytes / %lu usecs = %lu KB/s"` per worker, then `"%lu usecs to free memory"`.
//! Each `-n` "process" is its own [`Mm`] driven by its own thread; `-t M` gives each process M
//! threads, each with its own allocation (its own VMAs) in the same Mm. Worker `k` runs on
//! emulated CPU `k mod nr_cpus`.
//!
//! Byte accounting follows the C program: per unit, `size/8` plus 8 per word touched — so the
//! default step reports 1.125 × size. Time counts from one instant taken before any worker
//! starts (usemem's `gettimeofday` before `fork`).
//!
//! A negative `--sleep` holds the memory until the process is killed, as usemem's does: each
//! worker hands its throughput line to [`run_with`]'s `on_walked` (usemem prints it before
//! sleeping) and parks for good; the run never returns.
//!
//! Every worker is a thread of the seam (`usermm::sync::thread`), at most [`MAX_WORKERS`] of
//! them: a host thread on the wall clock, a context of the machine's run in virtual time (the
//! whole run is one [`Machine::run`], times read from `usermm::sync::clock`). They are all
//! started before any of them runs: if the host refuses a thread, the ones already started are
//! released and the run fails with [`UsememError::Spawn`] instead of leaving them waiting on a
//! barrier. In virtual time the result also carries the run's report (per-CPU busy, spin and
//! idle time, lock_stat per class, and the huge zero page's refcount line: seed 002's share of
//! CPU time on it, [`UsememResult::huge_zero_line_share`]).
//!
//! # Differences from usemem
//! No files (`-f`), no `malloc` (`-a`), no hugetlb (`-U`), no signals or interactive modes; the
//! walk touches each page through [`Task::walk`] (one translation per page, then the words of
//! that page). With sparse backing, words are not stored, so repeat-time verification is only
//! done with full backing.

use std::sync::Arc;

use serde::Serialize;
use usermm::config::MachineConfig;
use usermm::cpu::CpuId;
use usermm::mm::mmap::{
    MapFile, MADV_HUGEPAGE, MAP_ANONYMOUS, MAP_POPULATE, MAP_PRIVATE, PROT_READ, PROT_WRITE,
};
use usermm::mm::RssItem;
use usermm::stats::{LockStatSnapshot, MemInfo, VmItem, VmStatSnapshot};
use usermm::sync::class::FUTEX;
use usermm::sync::clock::{self, Ktime};
use usermm::sync::{thread, Barrier, Completion};
use usermm::{Machine, Mm, Task};

/// usemem's options (the subset the engine models).
#[derive(Debug, Clone, Serialize)]
pub struct UsememOpts {
    /// Bytes per worker (the positional SIZE).
    pub size: u64,
    /// `-n`: worker "processes".
    pub nproc: u32,
    /// `-t`: threads per process (0 = the process itself works).
    pub threads: u32,
    /// `-o/--readonly`.
    pub readonly: bool,
    /// `-w/--open-rw`: keep PROT_WRITE even with --readonly.
    pub open_rw: bool,
    /// `-j/--step`: bytes between accesses (≥ 8).
    pub step: u64,
    /// `-r/--repeat`.
    pub repeat: u32,
    /// `-u/--unit`: allocation chunk (0 = size).
    pub unit: u64,
    /// `-O/--anonymous`: MAP_ANONYMOUS instead of /dev/zero.
    pub anonymous: bool,
    /// `-P/--prealloc`: one allocation before the workers start, shared by them.
    pub prealloc: bool,
    /// `-F/--prefault`: MAP_POPULATE.
    pub prefault: bool,
    /// `-M/--mlock`: mlock after the walk.
    pub mlock: bool,
    /// `-s/--sleep`: seconds to sleep before freeing; negative: until the process is killed.
    pub sleep_secs: f64,
    /// `-y/--sync-rw`: barrier after allocation.
    pub sync_rw: bool,
    /// `-x/--sync-free`: barrier before freeing.
    pub sync_free: bool,
    /// `--madv-thp`: MADV_HUGEPAGE after mmap.
    pub madv_thp: bool,
    /// `-R/--random`: random word indexes.
    pub random: bool,
}

impl Default for UsememOpts {
    fn default() -> Self {
        Self {
            size: 0,
            nproc: 1,
            threads: 0,
            readonly: false,
            open_rw: false,
            step: 8,
            repeat: 1,
            unit: 0,
            anonymous: false,
            prealloc: false,
            prefault: false,
            mlock: false,
            sleep_secs: 0.0,
            sync_rw: false,
            sync_free: false,
            madv_thp: false,
            random: false,
        }
    }
}

/// The cost profile of seed 002's machine (2 sockets, 72 threads), for `time.mode=virtual`.
pub const SEED_PROFILE: &str = "haswell-ep-2s";

/// usemem keeps at most this many allocations to free; beyond, teardown happens at exit.
pub const MAX_POINTERS: usize = 32;

/// Most workers (`-n` × `-t`) one run starts. Each is a host thread, and a machine has at most
/// [`usermm::config::MAX_CPUS`] CPUs for them: beyond, workers would only share CPUs while the
/// host's thread limit comes closer.
pub const MAX_WORKERS: u64 = usermm::config::MAX_CPUS as u64;

/// Called with a worker's throughput line when it finishes its walk (see [`run_with`]).
pub type OnWalked = Arc<dyn Fn(&str) + Send + Sync>;

/// One worker's figures and its two output lines.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerResult {
    pub worker: u32,
    pub cpu: u16,
    pub bytes: u64,
    pub usecs: u64,
    pub kb_per_sec: u64,
    pub free_usecs: u64,
    /// Time of this worker's `mmput` teardown (exit_mmap), µs.
    pub exit_usecs: u64,
    pub faults: u64,
    pub rss_pages_before_free: i64,
    pub line: String,
    pub free_line: String,
}

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

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct UsememResult {
    pub config: MachineConfig,
    pub opts: UsememOpts,
    pub workers: Vec<WorkerResult>,
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
    /// line (seed 002's cycles in `get_huge_zero_page`/`put_huge_zero_page`).
    pub huge_zero_line_share: Option<f64>,
    /// Virtual time: the run's report (every CPU's busy, spin and idle time, every context's
    /// CPU time, lock_stat per class, the shared lines).
    pub vtime: Option<usermm::vtime::Report>,
}

/// Bad options (what usemem would reject).
#[derive(Debug, thiserror::Error)]
pub enum UsememError {
    #[error("size must be at least one page")]
    ZeroSize,
    #[error("-n must be at least 1")]
    NoProcesses,
    #[error("-n {nproc} × -t {threads} = {} workers; at most {MAX_WORKERS} (one host thread each)", u64::from(*nproc) * u64::from(*threads))]
    TooManyWorkers { nproc: u32, threads: u32 },
    #[error("cannot start worker thread {worker}: {error}")]
    Spawn { worker: u32, error: std::io::Error },
    #[error("worker {0} was not started: another worker's thread could not be")]
    NotStarted(u32),
    #[error("size {size} × {workers} workers is larger than the machine's memory ({mem} bytes) and the walk writes")]
    TooBig { size: u64, workers: u64, mem: u64 },
    #[error("mmap failed: {0}")]
    Mmap(usermm::Errno),
    #[error("access failed: {0}")]
    Access(usermm::Fault),
    #[error("a negative --sleep never ends, and a virtual run must")]
    ForeverInVirtualTime,
}

/// usemem's `lrand48`-driven index stream, reduced to a 64-bit LCG (same period properties
/// are not needed; only "random word in 0..m-1").
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, m: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (((self.0 >> 33) as u128 * (m.saturating_sub(1)) as u128) >> 31) as u64
    }
}

struct Unit {
    addr: u64,
    len: u64,
}

/// Map one unit and walk it; returns bytes accounted (usemem's formula) and words touched.
fn do_unit(
    task: &Task,
    opts: &UsememOpts,
    len: u64,
    shared: Option<u64>,
) -> Result<(Unit, u64), UsememError> {
    let mm = task.mm();
    let cpu = task.cpu();
    let addr = match shared {
        Some(a) => a,
        None => {
            let prot = if opts.readonly && !opts.open_rw {
                PROT_READ
            } else {
                PROT_READ | PROT_WRITE
            };
            let mut flags = MAP_PRIVATE;
            let file = if opts.anonymous {
                flags |= MAP_ANONYMOUS;
                MapFile::None
            } else {
                MapFile::DevZero
            };
            if opts.prefault {
                flags |= MAP_POPULATE;
            }
            let a = mm
                .mmap(cpu, 0, len, prot, flags, file)
                .map_err(UsememError::Mmap)?;
            if opts.madv_thp {
                mm.madvise(cpu, a, len, MADV_HUGEPAGE)
                    .map_err(UsememError::Mmap)?;
            }
            a
        }
    };
    let step = opts.step.max(8);
    let mut bytes = len / 8;
    for rep in 0..opts.repeat.max(1) {
        let words = if opts.random {
            let nwords = len / 8;
            let mut rng = Lcg(0x5eed ^ addr ^ rep as u64);
            let n = len.div_ceil(step);
            for _ in 0..n {
                let w = rng.next(nwords);
                if opts.readonly {
                    task.read_u64(addr + w * 8).map_err(UsememError::Access)?;
                } else {
                    task.write_u64(addr + w * 8, w)
                        .map_err(UsememError::Access)?;
                }
            }
            n
        } else {
            task.walk(addr, len, step, !opts.readonly, |w| w)
                .map_err(UsememError::Access)?
        };
        bytes += words * 8;
    }
    if opts.mlock {
        mm.mlock(cpu, addr, len).map_err(UsememError::Mmap)?;
    }
    Ok((Unit { addr, len }, bytes))
}

/// `"%lu bytes / %lu usecs = %lu KB/s"`.
pub fn kb_per_sec(bytes: u64, usecs: u64) -> u64 {
    (((bytes as u128 * 1_000_000) >> 10) / usecs.max(1) as u128) as u64
}

/// Run usemem on `machine`.
pub fn run(machine: &Arc<Machine>, opts: &UsememOpts) -> Result<UsememResult, UsememError> {
    run_with(machine, opts, None)
}

/// [`run`], handing each worker's throughput line to `on_walked` as soon as its walk is done
/// — what a negative `sleep_secs` prints, since the run then never returns.
pub fn run_with(
    machine: &Arc<Machine>,
    opts: &UsememOpts,
    on_walked: Option<OnWalked>,
) -> Result<UsememResult, UsememError> {
    if opts.size < 4096 {
        return Err(UsememError::ZeroSize);
    }
    if opts.nproc == 0 {
        return Err(UsememError::NoProcesses);
    }
    let threads = opts.threads.max(1);
    let workers = opts.nproc as u64 * threads as u64;
    if workers > MAX_WORKERS {
        return Err(UsememError::TooManyWorkers {
            nproc: opts.nproc,
            threads,
        });
    }
    let mem = machine.config().mem;
    if !opts.readonly && opts.size.saturating_mul(workers) > mem {
        return Err(UsememError::TooBig {
            size: opts.size,
            workers,
            mem,
        });
    }
    if opts.sleep_secs < 0.0 && machine.profile().is_some() {
        return Err(UsememError::ForeverInVirtualTime);
    }
    let mut r = machine.run(CpuId(0), || run_workers(machine, opts, on_walked, workers))?;
    if let Some(rep) = machine.last_run_report() {
        r.huge_zero_line_share = Some(rep.line_share("huge_zero_refcount"));
        r.vtime = Some(rep);
    }
    Ok(r)
}

/// The body of [`run_with`], on the machine's clock.
fn run_workers(
    machine: &Arc<Machine>,
    opts: &UsememOpts,
    on_walked: Option<OnWalked>,
    workers: u64,
) -> Result<UsememResult, UsememError> {
    let threads = opts.threads.max(1);
    let vm0 = machine.vmstat_snapshot();
    let meminfo_before = machine.meminfo();
    machine.phys().reset_lock_stats();
    let t0 = clock::now();
    let barrier = Arc::new(Barrier::new(&FUTEX, workers as usize));
    let free_barrier = Arc::new(Barrier::new(&FUTEX, workers as usize));
    let mut handles = Vec::new();
    // One start signal for every worker: `false` if a later thread cannot be started.
    let start = Arc::new(Completion::<bool>::new(&FUTEX));
    let mut spawn_error = None;
    'spawn: for p in 0..opts.nproc {
        let mm_cpu = machine.cpus().nth_wrapping((p * threads) as usize);
        let mm = Mm::new(machine, mm_cpu).map_err(UsememError::Mmap)?;
        // -P: one allocation in "main", before the workers, shared by this process's threads.
        let prealloc = if opts.prealloc {
            let t = Task::new(Arc::clone(&mm), mm_cpu);
            let prot = PROT_READ | PROT_WRITE;
            let flags = MAP_PRIVATE | if opts.anonymous { MAP_ANONYMOUS } else { 0 };
            let file = if opts.anonymous {
                MapFile::None
            } else {
                MapFile::DevZero
            };
            Some(
                t.mm()
                    .mmap(mm_cpu, 0, opts.size, prot, flags, file)
                    .map_err(UsememError::Mmap)?,
            )
        } else {
            None
        };
        for t in 0..threads {
            let k = p * threads + t;
            let cpu = machine.cpus().nth_wrapping(k as usize);
            let task = Task::new(Arc::clone(&mm), cpu);
            if t > 0 {
                mm.mmget();
            }
            let opts = opts.clone();
            let (barrier, free_barrier) = (Arc::clone(&barrier), Arc::clone(&free_barrier));
            let on_walked = on_walked.clone();
            let started = Arc::clone(&start);
            let spawned = thread::spawn_named_on(cpu, format!("usemem-{k}"), move |_| {
                if !started.wait() {
                    task.mm().mmput(task.cpu());
                    return Err(UsememError::NotStarted(k));
                }
                let gates = Gates {
                    barrier: &barrier,
                    free_barrier: &free_barrier,
                    on_walked: on_walked.as_deref(),
                };
                worker(k, task, &opts, t0, prealloc, gates)
            });
            match spawned {
                Ok(h) => handles.push(h),
                Err(error) => {
                    spawn_error = Some(UsememError::Spawn { worker: k, error });
                    break 'spawn;
                }
            }
        }
    }
    // A worker that was not started returns its own error.
    start.complete(spawn_error.is_none());
    let mut results = Vec::new();
    let mut first_err = spawn_error;
    for h in handles {
        match h.join().expect("usemem worker panicked") {
            Ok(r) => results.push(r),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    results.sort_by_key(|r| r.worker);
    let wall_usecs = t0.elapsed_ns() / 1000;
    let vm = machine.vmstat_snapshot().since(&vm0);
    let hz = machine.huge_zero();
    let gets = vm.get(VmItem::HugeZeroRefGet);
    let puts = vm.get(VmItem::HugeZeroRefPut);
    let locks = machine.phys().lock_stats();
    Ok(UsememResult {
        config: machine.config().clone(),
        opts: opts.clone(),
        throughput_kbps: results.iter().map(|r| r.kb_per_sec).sum(),
        workers: results,
        wall_usecs,
        huge_zero: HugeZeroFigures {
            per_mm_ref: hz.per_mm_ref(),
            global_ops: gets + puts,
            gets,
            puts,
            ops_per_mm: (gets + puts) as f64 / opts.nproc as f64,
            thp_zero_page_alloc: vm.get(VmItem::ThpZeroPageAlloc),
            refcount_after: hz.refcount(),
        },
        vmstat_delta: vm,
        meminfo_before,
        meminfo_after: machine.meminfo(),
        zone_lock: locks.zone_lock,
        lru_lock: locks.lru_lock,
        time: machine.time_label(),
        huge_zero_line_share: None,
        vtime: None,
    })
}

/// What a worker shares with the others: the start-of-walk and before-free barriers, and
/// where its throughput line goes when it will never return.
struct Gates<'a> {
    barrier: &'a Barrier,
    free_barrier: &'a Barrier,
    on_walked: Option<&'a (dyn Fn(&str) + Send + Sync)>,
}

fn worker(
    k: u32,
    task: Task,
    opts: &UsememOpts,
    t0: Ktime,
    prealloc: Option<u64>,
    gates: Gates<'_>,
) -> Result<WorkerResult, UsememError> {
    let Gates {
        barrier,
        free_barrier,
        on_walked,
    } = gates;
    let machine = Arc::clone(task.mm().machine());
    let cpu: CpuId = task.cpu();
    let faults0 = machine.vmstat().get(VmItem::Pgfault);
    if !opts.sync_rw {
        barrier.wait();
    }
    let unit = if opts.unit == 0 { opts.size } else { opts.unit };
    let mut units = Vec::new();
    let mut bytes = 0;
    let mut remaining = opts.size;
    let mut result = Ok(());
    while remaining > 0 {
        let len = unit.min(remaining);
        match do_unit(&task, opts, len, prealloc) {
            Ok((u, b)) => {
                units.push(u);
                bytes += b;
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        }
        remaining -= len;
        if prealloc.is_some() {
            break;
        }
    }
    if opts.sync_rw {
        barrier.wait();
    }
    let usecs = t0.elapsed_ns() / 1000;
    let rss = task.mm().rss(RssItem::AnonPages) + task.mm().rss(RssItem::ShmemPages);
    let kbps = kb_per_sec(bytes, usecs);
    let line = format!("{bytes} bytes / {usecs} usecs = {kbps} KB/s");
    if opts.sleep_secs < 0.0 && result.is_ok() {
        // usemem's negative --sleep: print, then hold the memory until killed.
        if let Some(f) = on_walked {
            f(&line);
        }
        loop {
            std::thread::park();
        }
    }
    if opts.sleep_secs > 0.0 {
        thread::sleep(std::time::Duration::from_secs_f64(opts.sleep_secs));
    }
    if opts.sync_free {
        free_barrier.wait();
    }
    let tf = clock::now();
    if units.len() <= MAX_POINTERS && prealloc.is_none() {
        for u in &units {
            let _ = task.mm().munmap(cpu, u.addr, u.len);
        }
    }
    let free_usecs = tf.elapsed_ns() / 1000;
    let te = clock::now();
    task.mm().mmput(cpu);
    let exit_usecs = te.elapsed_ns() / 1000;
    result?;
    Ok(WorkerResult {
        worker: k,
        cpu: cpu.0,
        bytes,
        usecs,
        kb_per_sec: kbps,
        free_usecs,
        exit_usecs,
        faults: (machine.vmstat().get(VmItem::Pgfault) - faults0) as u64,
        rss_pages_before_free: rss,
        line,
        free_line: format!("{free_usecs} usecs to free memory"),
    })
}

/// Run the same usemem on a vanilla and a patched machine built from `base`.
pub fn run_ab(
    base: &MachineConfig,
    opts: &UsememOpts,
) -> Result<(UsememResult, UsememResult), Box<dyn std::error::Error>> {
    let mut v = base.clone();
    v.set_patched(false);
    let mut p = base.clone();
    p.set_patched(true);
    let a = run(&Machine::new(v)?, opts)?;
    let b = run(&Machine::new(p)?, opts)?;
    Ok((a, b))
}
