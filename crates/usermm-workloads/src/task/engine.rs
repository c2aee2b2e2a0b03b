//! Tasks on the engine: each process an [`Mm`], each task an engine thread on an emulated CPU
//! ([`usermm::sync::thread`]), its accesses through a [`usermm::Task`] (the MMU walk and the
//! page fault), the whole run inside [`Machine::run`] — so that with `time.mode=virtual` it is
//! a deterministic model of the profile's machine.
//!
//! # The parent
//! Before any task starts, a parent mm makes its first `malloc` (will-it-scale's parent
//! allocates its task table), so that it has a heap whose first page is written. In process
//! mode every task's mm is [`Mm::fork`] of it (a heap VMA with a forked anon_vma, and the
//! parent's cached break and main arena); in thread mode every task is a thread of it.
//!
//! # Files
//! The engine has no page cache. A temporary file ([`EngineFile`]) is mapped as a shared
//! anonymous (shmem) object, one per mapping: a VMA with an object of its own, which never
//! merges with its neighbours, as a separate file's mapping does not. It stands in honestly
//! only for a mapping that is never touched (will-it-scale's mmap2); the tests that write a
//! file's pages or read them back are refused (`will_it_scale`). `/dev/zero` is the
//! engine's own ([`usermm::mm::mmap::MapFile::DevZero`]), mapped as the caller asks.
//!
//! # A task alone
//! [`with_lone_task`] makes one task outside any run: a fresh mm of its own on a CPU the
//! caller names, not counted, on whatever clock the calling context runs (a bench's thread
//! on the wall clock, a context of [`Machine::run`] in virtual time).
//!
//! # Time slices
//! The virtual runtime runs a CPU's contexts to their next block, without preemption. When
//! tasks outnumber the CPUs, a task that shares its CPU gives it up every
//! [`SLICE`] of virtual time (a sleep of zero: to the back of the CPU's run queue), as the
//! kernel's scheduler would hand the CPU round every base slice.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use usermm::config::TimeMode;
use usermm::mm::mman::{MAP_ANONYMOUS, MAP_SHARED, MAP_TYPE};
use usermm::mm::mmap::MapFile;
use usermm::stats::VmStatSnapshot;
use usermm::sync::class::FUTEX;
use usermm::sync::{clock, thread, Barrier};
use usermm::{CpuId, Machine, Mm};

use super::malloc::{Arena, Malloc};
use super::{
    engine_cpu, panicked, sample_on_wall_clock, Beside, Errno, Launch, Mode, OnSample, Stamp, Stop,
    Task,
};

const ENOMEM: Errno = 12;

/// The CPU hand-over period of tasks that share a CPU in virtual time: EEVDF's base slice
/// with the default 0.75 ms scaled by `1 + ilog2(min(CPUs, 8))` (Linux 6.6+,
/// `sysctl_sched_base_slice`), for a machine of 8 or more CPUs.
pub const SLICE: Duration = Duration::from_millis(3);

/// A file of the engine: a temporary file of `size` bytes, or `/dev/zero` (see the module
/// doc for how each maps).
#[derive(Debug, Clone, Copy)]
pub struct EngineFile {
    pub size: u64,
    pub dev_zero: bool,
}

/// One process: its mm and glibc's cached break (`__curbrk`), shared by its threads.
#[derive(Debug)]
struct Proc {
    mm: Arc<Mm>,
    curbrk: AtomicU64,
}

impl Proc {
    /// A fresh process: a new mm, no break cached yet.
    fn new(machine: &Arc<Machine>, cpu: CpuId) -> Result<Proc, usermm::Errno> {
        Ok(Proc {
            mm: Mm::new(machine, cpu)?,
            curbrk: AtomicU64::new(0),
        })
    }
}

/// A counter cell alone on its cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Slot(AtomicU64);

/// How a task counts and learns that the run is over.
#[derive(Debug)]
enum Counter<'a> {
    /// Not counted (the parent's own allocation).
    None,
    /// The sampler reads `slot`; `stop` ends the run.
    Wall {
        slot: &'a AtomicU64,
        stop: &'a AtomicBool,
    },
    /// The task samples itself on its virtual clock.
    Virtual(VirtualCount),
}

#[derive(Debug)]
struct VirtualCount {
    count: Cell<u64>,
    /// Virtual ns of the next period's end.
    next: Cell<u64>,
    period: u64,
    periods: usize,
    samples: RefCell<Vec<u64>>,
    /// With a shared CPU: when to give it up next.
    next_slice: Option<Cell<u64>>,
    /// The clock at the last count, and how many counts in a row saw it.
    still: Cell<(u64, u64)>,
}

/// Counts at one virtual instant after which a task is taken to make no progress
/// ([`Stop::NoProgress`]): a million operations that cost nothing.
const STILL_LIMIT: u64 = 1 << 20;

impl VirtualCount {
    fn count(&self, n: u64) -> Result<(), Stop> {
        let now = clock::now().as_ns();
        let (at, times) = self.still.get();
        let times = if at == now { times + 1 } else { 0 };
        if times >= STILL_LIMIT {
            return Err(Stop::NoProgress);
        }
        self.still.set((now, times));
        let before = self.count.get();
        let mut samples = self.samples.borrow_mut();
        while now >= self.next.get() && samples.len() < self.periods {
            samples.push(before);
            self.next.set(self.next.get() + self.period);
        }
        if samples.len() >= self.periods {
            return Err(Stop::Done);
        }
        drop(samples);
        self.count.set(before + n);
        if let Some(ns) = &self.next_slice {
            if now >= ns.get() {
                ns.set(now + SLICE.as_nanos() as u64);
                thread::sleep(Duration::ZERO);
            }
        }
        Ok(())
    }

    /// The per-period counts; a task that stopped early keeps its last count.
    fn into_samples(self) -> Vec<u64> {
        let mut s = self.samples.into_inner();
        let last = self.count.get();
        s.resize(self.periods, last);
        s
    }
}

/// One task on the engine.
#[derive(Debug)]
pub struct EngineTask<'a> {
    task: usermm::Task,
    index: usize,
    proc: &'a Proc,
    counter: Counter<'a>,
    malloc: RefCell<Malloc>,
}

/// An engine error as the errno a C program sees.
pub(crate) fn errno(e: usermm::Errno) -> Errno {
    e.0
}

/// `mprotect` of `mm` from `cpu`, its errno alone: the one wrapper of the engine's tasks
/// (this module's and usemem's).
pub(crate) fn mprotect(mm: &Mm, cpu: CpuId, addr: u64, len: u64, prot: u32) -> Result<(), Errno> {
    mm.mprotect(cpu, addr, len, prot).map_err(errno)
}

/// `madvise` of `mm` from `cpu`, its errno alone (as [`mprotect`]).
pub(crate) fn madvise(mm: &Mm, cpu: CpuId, addr: u64, len: u64, advice: i32) -> Result<(), Errno> {
    mm.madvise(cpu, addr, len, advice).map_err(errno)
}

/// The signal a failed access delivers (`VM_FAULT_OOM` is the OOM killer's SIGKILL).
fn fault_stop(f: usermm::Fault) -> Stop {
    Stop::Signal {
        name: f.code.signal().unwrap_or("SIGKILL"),
        detail: f.to_string(),
    }
}

impl<'a> EngineTask<'a> {
    /// Task 0 of `proc` on `cpu`, not counted, allocating from the main arena.
    fn uncounted(proc: &'a Proc, cpu: CpuId) -> Self {
        EngineTask {
            task: usermm::Task::new(Arc::clone(&proc.mm), cpu),
            index: 0,
            proc,
            counter: Counter::None,
            malloc: RefCell::new(Malloc::new(Arena::Main)),
        }
    }

    /// The emulated CPU the task runs on.
    pub fn cpu(&self) -> CpuId {
        self.task.cpu()
    }

    /// The task's address space (its process's).
    pub fn mm(&self) -> &Arc<Mm> {
        self.task.mm()
    }
}

impl Task for EngineTask<'_> {
    type File = EngineFile;

    fn index(&self) -> usize {
        self.index
    }

    fn mmap(
        &self,
        len: u64,
        prot: u32,
        flags: u32,
        file: Option<&EngineFile>,
    ) -> Result<u64, Errno> {
        let (flags, file) = match file {
            None => (flags, MapFile::None),
            Some(f) if f.dev_zero => (flags, MapFile::DevZero),
            Some(_) => (
                (flags & !MAP_TYPE) | MAP_SHARED | MAP_ANONYMOUS,
                MapFile::None,
            ),
        };
        self.mm()
            .mmap(self.cpu(), 0, len, prot, flags, file)
            .map_err(errno)
    }

    fn munmap(&self, addr: u64, len: u64) -> Result<(), Errno> {
        self.mm().munmap(self.cpu(), addr, len).map_err(errno)
    }

    fn mprotect(&self, addr: u64, len: u64, prot: u32) -> Result<(), Errno> {
        mprotect(self.mm(), self.cpu(), addr, len, prot)
    }

    fn madvise(&self, addr: u64, len: u64, advice: i32) -> Result<(), Errno> {
        madvise(self.mm(), self.cpu(), addr, len, advice)
    }

    fn brk(&self, addr: u64) -> Result<(), Errno> {
        let now = self.mm().brk(self.cpu(), addr);
        self.proc.curbrk.store(now, Relaxed);
        if now < addr {
            Err(ENOMEM)
        } else {
            Ok(())
        }
    }

    fn sbrk(&self, incr: i64) -> Result<u64, Errno> {
        let mut cur = self.proc.curbrk.load(Relaxed);
        if cur == 0 {
            cur = self.mm().brk(self.cpu(), 0);
            self.proc.curbrk.store(cur, Relaxed);
        }
        if incr == 0 {
            return Ok(cur);
        }
        let new = cur.checked_add_signed(incr).ok_or(ENOMEM)?;
        self.brk(new)?;
        Ok(cur)
    }

    fn malloc(&self, len: u64) -> Result<u64, Errno> {
        self.malloc.borrow_mut().malloc(self, len)
    }

    fn free(&self, addr: u64) {
        self.malloc.borrow_mut().free(self, addr);
    }

    fn tmpfile(&self, size: u64) -> Result<EngineFile, Errno> {
        Ok(EngineFile {
            size,
            dev_zero: false,
        })
    }

    fn dev_zero(&self) -> Result<EngineFile, Errno> {
        Ok(EngineFile {
            size: 0,
            dev_zero: true,
        })
    }

    fn write_u8(&self, addr: u64, v: u8) -> Result<(), Stop> {
        self.task.write(addr, &[v]).map_err(fault_stop)
    }

    fn read_u8(&self, addr: u64) -> Result<u8, Stop> {
        let mut b = [0u8];
        self.task.read(addr, &mut b).map_err(fault_stop)?;
        Ok(b[0])
    }

    fn write_u64(&self, addr: u64, v: u64) -> Result<(), Stop> {
        self.task.write_u64(addr, v).map_err(fault_stop)
    }

    fn read_u64(&self, addr: u64) -> Result<u64, Stop> {
        self.task.read_u64(addr).map_err(fault_stop)
    }

    #[inline]
    fn count(&self, n: u64) -> Result<(), Stop> {
        match &self.counter {
            Counter::None => Ok(()),
            Counter::Wall { slot, stop } => {
                slot.store(slot.load(Relaxed) + n, Relaxed);
                if stop.load(Relaxed) {
                    Err(Stop::Done)
                } else {
                    Ok(())
                }
            }
            Counter::Virtual(v) => v.count(n),
        }
    }

    fn now(&self) -> Stamp {
        Stamp {
            cpu_ns: clock::thread_cpu_ns(),
            wall_ns: clock::now().as_ns(),
        }
    }

    /// [`usermm::Task::walk`]: page by page, each page's words under one hold of the TLB
    /// gate.
    fn touch(&self, start: u64, len: u64, step: u64, write: bool) -> Result<u64, Stop> {
        self.task
            .walk(start, len, step, write, |w| w)
            .map_err(fault_stop)
    }

    /// [`usermm::Task::access_words`] in runs of [`WORD_RUN`]: a run's words under one hold of
    /// the TLB gate, as usemem's random walk does.
    fn write_each(&self, addrs: &[u64], v: u64) -> Result<(), Stop> {
        let mut run = [(0, None); WORD_RUN];
        for chunk in addrs.chunks(WORD_RUN) {
            for (r, &a) in run.iter_mut().zip(chunk) {
                *r = (a, Some(v));
            }
            self.task
                .access_words(&run[..chunk.len()])
                .map_err(|(_, f)| fault_stop(f))?;
        }
        Ok(())
    }
}

impl Beside for EngineTask<'_> {
    /// The other thread is an engine thread on CPU `cpu` (`thread::scope`), allocating from a
    /// thread arena of its own; the barrier is the engine's (a futex).
    fn beside<R: Send, S>(
        &self,
        cpu: usize,
        theirs: impl FnOnce(&Self) -> R + Send,
        mine: impl FnOnce() -> S,
    ) -> (S, Result<R, Stop>) {
        let gate = Barrier::new(&FUTEX, 2);
        let (proc, index, cpu) = (self.proc, self.index + 1, CpuId(cpu as u16));
        thread::scope(|s| {
            let gate = &gate;
            let other = s.spawn_on(cpu, move || {
                let mut t = EngineTask::uncounted(proc, cpu);
                t.index = index;
                t.malloc = RefCell::new(Malloc::new(Arena::Thread));
                gate.wait();
                theirs(&t)
            });
            gate.wait();
            let m = mine();
            (m, other.join().map_err(|_| panicked()))
        })
    }
}

/// Accesses per TLB-gate hold of [`EngineTask`]'s `write_each` (tens, so that a flush waits
/// for little: [`usermm::Task::access_words`]).
const WORD_RUN: usize = 64;

/// Run `f` with one task alone on `machine`'s `cpu` (see the module doc): a fresh mm, put
/// after `f` returns (its teardown is not `f`'s), glibc's main arena, not counted.
pub fn with_lone_task<R>(
    machine: &Arc<Machine>,
    cpu: CpuId,
    f: impl FnOnce(&EngineTask<'_>) -> R,
) -> Result<R, usermm::Errno> {
    let proc = Proc::new(machine, cpu)?;
    let t = EngineTask::uncounted(&proc, cpu);
    let r = f(&t);
    drop(t);
    proc.mm.mmput(cpu);
    Ok(r)
}

/// What a run on the engine produced.
#[derive(Debug)]
pub struct EngineOut {
    /// How each task's body ended.
    pub stops: Vec<Stop>,
    /// The emulated CPU of each task.
    pub cpus: Vec<usize>,
    /// The machine's `/proc/vmstat` counters over the run (the parent, the forks, the loop,
    /// the exits).
    pub vmstat: VmStatSnapshot,
    /// The virtual run's report (lock_stat, per-CPU time); `None` on the wall clock.
    pub report: Option<usermm::vtime::Report>,
}

/// The machine's cores, each a list of its CPUs in thread order: the profile's topology in
/// virtual time (`vtime::Placement`), one CPU per core on the wall clock (the emulated CPUs
/// of a wall machine are names; the host schedules their threads).
pub(crate) fn engine_cores(machine: &Machine) -> Vec<Vec<usize>> {
    let n = machine.cpus().nr_possible();
    let placement = machine
        .profile()
        .and_then(|p| usermm::vtime::Placement::new(p, n, machine.cpus().nr_nodes()).ok());
    let Some(pl) = placement else {
        return (0..n).map(|c| vec![c]).collect();
    };
    let mut cores: Vec<(usize, Vec<usize>)> = Vec::new();
    for c in 0..n {
        match cores.iter_mut().find(|(k, _)| *k == pl.core_of(c)) {
            Some((_, v)) => v.push(c),
            None => cores.push((pl.core_of(c), vec![c])),
        }
    }
    cores.sort_by_key(|(k, _)| *k);
    for (_, v) in &mut cores {
        v.sort_by_key(|&c| pl.thread_of(c));
    }
    cores.into_iter().map(|(_, v)| v).collect()
}

/// Run `body` as `launch.tasks` tasks on `machine` (see the module doc), calling `on_sample`
/// with the cumulative counts at each period's end: as they come on the wall clock, after the
/// run in virtual time.
pub fn run_engine<F>(
    machine: &Arc<Machine>,
    launch: &Launch,
    body: F,
    on_sample: &mut OnSample<'_>,
) -> Result<EngineOut, String>
where
    F: Fn(&EngineTask<'_>) -> Result<(), Stop> + Sync,
{
    let cores = engine_cores(machine);
    let cpus: Vec<usize> = (0..launch.tasks)
        .map(|i| engine_cpu(i, &cores, launch.affinity))
        .collect();
    let before = machine.vmstat_snapshot();
    let virt = machine.time_mode() == TimeMode::Virtual;
    let (rows, stops) = machine
        .run(CpuId(0), || {
            run_inside(machine, launch, &cpus, &body, &mut *on_sample, virt)
        })
        .map_err(|e| e.to_string())??;
    for row in &rows {
        on_sample(row);
    }
    Ok(EngineOut {
        stops,
        cpus,
        vmstat: machine.vmstat_snapshot().since(&before),
        report: machine.last_run_report().filter(|_| virt),
    })
}

/// The parent's mm, its cached break and main arena after its first `malloc`.
fn make_parent(machine: &Arc<Machine>, tasks: usize) -> Result<(Proc, Malloc), String> {
    let proc = Proc::new(machine, CpuId(0)).map_err(|e| format!("mm_alloc: {e}"))?;
    let t = EngineTask::uncounted(&proc, CpuId(0));
    // main.c's `malloc(opt_tasks * sizeof(struct args))` (48 bytes each).
    t.malloc(tasks as u64 * 48)
        .map_err(|e| format!("the parent's malloc: {}", crate::usemem::sys::strerror(e)))?;
    let arena = t.malloc.into_inner();
    Ok((proc, arena))
}

fn run_inside<F>(
    machine: &Arc<Machine>,
    launch: &Launch,
    cpus: &[usize],
    body: &F,
    on_sample: &mut OnSample<'_>,
    virt: bool,
) -> Result<(Vec<Vec<u64>>, Vec<Stop>), String>
where
    F: Fn(&EngineTask<'_>) -> Result<(), Stop> + Sync,
{
    let n = launch.tasks;
    let (parent, arena) = make_parent(machine, n)?;
    let procs: Vec<Proc> = match launch.mode {
        Mode::Threads => Vec::new(),
        Mode::Processes => (0..n)
            .map(|i| {
                let mm = parent.mm.fork(CpuId(cpus[i] as u16));
                mm.map(|mm| Proc {
                    mm,
                    curbrk: AtomicU64::new(parent.curbrk.load(Relaxed)),
                })
                .map_err(|e| format!("fork: {e}"))
            })
            .collect::<Result<_, _>>()?,
    };
    let slots: Vec<Slot> = (0..n).map(|_| Slot::default()).collect();
    let stop = AtomicBool::new(false);
    let gate = Barrier::new(&FUTEX, n + 1);
    let sharing = |c: usize| cpus.iter().filter(|&&x| x == c).count() > 1;
    let sched = launch.schedule;
    let results = thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (proc, cpu) = (procs.get(i).unwrap_or(&parent), CpuId(cpus[i] as u16));
                let (slot, stop, gate) = (&slots[i].0, &stop, &gate);
                let arena = match launch.mode {
                    Mode::Processes => arena.clone(),
                    Mode::Threads => Malloc::new(Arena::Thread),
                };
                let shared = sharing(cpus[i]);
                s.spawn_named_on(cpu, format!("wis-{i}"), move || {
                    gate.wait();
                    let counter = if virt {
                        let t0 = clock::now().as_ns();
                        Counter::Virtual(VirtualCount {
                            count: Cell::new(0),
                            next: Cell::new(t0 + sched.period.as_nanos() as u64),
                            period: sched.period.as_nanos() as u64,
                            periods: sched.periods,
                            samples: RefCell::new(Vec::with_capacity(sched.periods)),
                            next_slice: shared.then(|| Cell::new(t0)),
                            still: Cell::new((t0, 0)),
                        })
                    } else {
                        Counter::Wall { slot, stop }
                    };
                    let t = EngineTask {
                        task: usermm::Task::new(Arc::clone(&proc.mm), cpu),
                        index: i,
                        proc,
                        counter,
                        malloc: RefCell::new(arena),
                    };
                    let end = body(&t).err().unwrap_or(Stop::Done);
                    let own = match t.counter {
                        Counter::Virtual(v) => v.into_samples(),
                        _ => Vec::new(),
                    };
                    (end, own)
                })
            })
            .collect();
        gate.wait();
        if !virt {
            sample_on_wall_clock(launch, |i| slots[i].0.load(Relaxed), on_sample);
            stop.store(true, Relaxed);
        }
        let joined: Vec<(Stop, Vec<u64>)> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or((panicked(), Vec::new())))
            .collect();
        joined
    });
    let joined = results;
    for (i, p) in procs.iter().enumerate() {
        p.mm.mmput(CpuId(cpus[i] as u16));
    }
    parent.mm.mmput(CpuId(0));
    // Virtual time: the tasks' own samples, period by period (none on the wall clock, whose
    // sampler has handed them over already).
    let periods = if virt { sched.periods } else { 0 };
    let rows = (0..periods)
        .map(|k| {
            joined
                .iter()
                .map(|(_, v)| v.get(k).copied().unwrap_or(0))
                .collect()
        })
        .collect();
    Ok((rows, joined.into_iter().map(|(s, _)| s).collect()))
}
