//! Tasks on the host kernel: real processes forked from this one, or real threads of this
//! one, making real system calls through `usermm_host::task` — will-it-scale's `main.c` with
//! its tests written over [`Task`].
//!
//! Process mode forks from this process, which must then have a single thread (it is checked:
//! a child of a multi-threaded process may not run ordinary code); each child binds itself to
//! its cpuset, waits at a pipe barrier, runs the body and exits (a signal the body reports is
//! raised for real, so that the child dies of it as the C program would). Thread mode starts
//! the tasks as threads of this process — where the brk tests move this process's own break,
//! above glibc's heap (see `usermm_host::task`'s contracts): the sampler, this thread,
//! allocates nothing while they run. Counters live in one shared mapping
//! ([`usermm_host::task::Slots`]), as `main.c`'s do.

use usermm_host::task::{
    bind_to_cpus, host_cores, monotonic_ns, thread_cpu_ns, Slots, Space, TmpFile, Unmapped,
};
use usermm_host::usemem::{
    child_ended, die_of_signal, exit_process, fork_process, wait_child, PipeGate,
};

use super::{
    bind_set, panicked, sample_on_wall_clock, Beside, Errno, Launch, Mode, OnSample, Stamp, Stop,
    Task,
};
use crate::usemem::sys::strerror;

/// One task on the host kernel.
#[derive(Debug)]
pub struct HostTask<'a> {
    space: Space,
    /// Where it counts; none for a task alone ([`HostTask::alone`]).
    slots: Option<&'a Slots>,
    index: usize,
}

fn segv(addr: u64) -> impl FnOnce(Unmapped) -> Stop {
    move |_| Stop::Signal {
        name: "SIGSEGV",
        detail: format!("access at {addr:#x} outside the task's mappings"),
    }
}

impl Task for HostTask<'_> {
    type File = TmpFile;

    fn index(&self) -> usize {
        self.index
    }

    super::forward_address_space_calls!(space, TmpFile);

    fn tmpfile(&self, size: u64) -> Result<TmpFile, Errno> {
        TmpFile::new(size)
    }

    fn dev_zero(&self) -> Result<TmpFile, Errno> {
        TmpFile::dev_zero()
    }

    fn write_u8(&self, addr: u64, v: u8) -> Result<(), Stop> {
        self.space.write_u8(addr, v).map_err(segv(addr))
    }

    fn read_u8(&self, addr: u64) -> Result<u8, Stop> {
        self.space.read_u8(addr).map_err(segv(addr))
    }

    fn write_u64(&self, addr: u64, v: u64) -> Result<(), Stop> {
        self.space.write_u64(addr, v).map_err(segv(addr))
    }

    fn read_u64(&self, addr: u64) -> Result<u64, Stop> {
        self.space.read_u64(addr).map_err(segv(addr))
    }

    #[inline]
    fn count(&self, n: u64) -> Result<(), Stop> {
        let Some(slots) = self.slots else {
            return Ok(());
        };
        slots.add(self.index, n);
        if slots.stopped() {
            Err(Stop::Done)
        } else {
            Ok(())
        }
    }

    fn now(&self) -> Stamp {
        Stamp {
            cpu_ns: thread_cpu_ns(),
            wall_ns: monotonic_ns(),
        }
    }
}

impl Beside for HostTask<'_> {
    /// The other thread is a thread of this process (the kernel's scheduler places it),
    /// with a sibling of this task's space (`usermm_host::task::Space::sibling`: while it
    /// lives, this task unmaps nothing).
    fn beside<R: Send, S>(
        &self,
        _cpu: usize,
        theirs: impl FnOnce(&Self) -> R + Send,
        mine: impl FnOnce() -> S,
    ) -> (S, Result<R, Stop>) {
        let sib = HostTask {
            space: self.space.sibling(),
            slots: None,
            index: self.index + 1,
        };
        let gate = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            let gate = &gate;
            let other = s.spawn(move || {
                gate.wait();
                theirs(&sib)
            });
            gate.wait();
            let m = mine();
            (m, other.join().map_err(|_| panicked()))
        })
    }
}

impl<'a> HostTask<'a> {
    /// The VMAs of this task's mappings and break, and their rss in kB
    /// (`usermm_host::task::Space::vmas_and_rss_kb`).
    pub fn vmas_and_rss_kb(&self) -> (u64, u64) {
        self.space.vmas_and_rss_kb()
    }

    /// Task `index` counting into `slots` (its space made now: the break it finds is its floor).
    pub fn new(slots: &'a Slots, index: usize) -> Self {
        HostTask {
            space: Space::new(),
            slots: Some(slots),
            index,
        }
    }

    /// Task 0 alone, not counted, with room for `maps` mappings before its space allocates
    /// (`usermm_host::task::Space::with_capacity`): made before a fork, it serves the
    /// child, which may not allocate ([`super::child`]).
    pub fn alone(maps: usize) -> HostTask<'static> {
        HostTask {
            space: Space::with_capacity(maps),
            slots: None,
            index: 0,
        }
    }
}

/// What a run on the host produced.
#[derive(Debug)]
pub struct HostOut {
    /// How each task ended: `done`, or what killed it.
    pub stops: Vec<String>,
    /// Each task's cpuset.
    pub cpusets: Vec<Vec<usize>>,
    /// Each task's CPU time over the wall time its body ran for (its own thread's clock,
    /// user and system; NaN for a task whose body never returned: killed from outside).
    pub cpu_over_wall: Vec<f64>,
}

/// Each task's clocks around its body, in a second set of shared slots (so that a forked
/// child's survive it): `2 i` its CPU ns, `2 i + 1` its wall ns.
struct Clocks(Slots);

impl Clocks {
    fn new(tasks: usize) -> Result<Clocks, String> {
        Slots::new(2 * tasks)
            .map(Clocks)
            .map_err(|e| format!("mmap: {}", strerror(e)))
    }

    /// Run task `i`'s body, its clocks taken around it.
    fn time<T>(&self, i: usize, body: impl FnOnce() -> T) -> T {
        let (c0, w0) = (thread_cpu_ns(), std::time::Instant::now());
        let r = body();
        let wall = w0.elapsed().as_nanos() as u64;
        self.0.add(2 * i, thread_cpu_ns().saturating_sub(c0));
        self.0.add(2 * i + 1, wall.max(1));
        r
    }

    fn shares(&self, tasks: usize) -> Vec<f64> {
        (0..tasks)
            .map(|i| match self.0.get(2 * i + 1) {
                0 => f64::NAN,
                wall => self.0.get(2 * i) as f64 / wall as f64,
            })
            .collect()
    }
}

/// Run `body` as `launch.tasks` host processes or threads (see the module doc), calling
/// `on_sample` with the cumulative counts at each period's end, as they come. In thread mode
/// the sampler is a thread of its own (see the module doc).
pub fn run_host<F>(
    launch: &Launch,
    body: F,
    on_sample: &mut OnSample<'_>,
) -> Result<HostOut, String>
where
    F: Fn(&HostTask<'_>) -> Result<(), Stop> + Sync,
{
    let cores = host_cores();
    let cpusets: Vec<Vec<usize>> = (0..launch.tasks)
        .map(|i| bind_set(i, &cores, launch.affinity))
        .collect();
    let slots = Slots::new(launch.tasks).map_err(|e| format!("mmap: {}", strerror(e)))?;
    let clocks = Clocks::new(launch.tasks)?;
    let start = Start {
        launch,
        cpusets: &cpusets,
        slots: &slots,
        clocks: &clocks,
        body: &body,
    };
    let stops = match launch.mode {
        Mode::Processes => run_processes(&start, on_sample)?,
        Mode::Threads => run_threads(&start, on_sample),
    };
    Ok(HostOut {
        stops,
        cpusets,
        cpu_over_wall: clocks.shares(launch.tasks),
    })
}

/// What every task of a host run starts from: the run, its cpuset, the shared counters and
/// clocks, the body.
struct Start<'a, F> {
    launch: &'a Launch,
    cpusets: &'a [Vec<usize>],
    slots: &'a Slots,
    clocks: &'a Clocks,
    body: &'a F,
}

impl<F> Start<'_, F>
where
    F: Fn(&HostTask<'_>) -> Result<(), Stop> + Sync,
{
    /// Task `i`'s body on `t`, timed by its clocks: how it stopped.
    fn run_task(&self, i: usize, t: &HostTask<'_>) -> Stop {
        self.clocks
            .time(i, || (self.body)(t))
            .err()
            .unwrap_or(Stop::Done)
    }
}

/// A child's end: its body's stop made real.
fn child_exit(stop: Stop) -> ! {
    match stop {
        Stop::Done => exit_process(0),
        Stop::Signal { name, .. } => die_of_signal(match name {
            "SIGBUS" => libc_sig::SIGBUS,
            "SIGKILL" => libc_sig::SIGKILL,
            _ => libc_sig::SIGSEGV,
        }),
        Stop::Assert(what) => {
            eprintln!("Assertion `{what}' failed.");
            die_of_signal(libc_sig::SIGABRT)
        }
        Stop::NoProgress => exit_process(1),
    }
}

/// The signal numbers a child dies of (x86-64 Linux).
mod libc_sig {
    pub(super) const SIGKILL: i32 = 9;
    pub(super) const SIGBUS: i32 = 7;
    pub(super) const SIGSEGV: i32 = 11;
    pub(super) const SIGABRT: i32 = 6;
}

/// A child's raw wait status as [`HostOut::stops`] says it.
fn describe_status(status: Option<i32>) -> String {
    match status {
        None => "lost".into(),
        Some(s) if s & 0x7f == 0 => match (s >> 8) & 0xff {
            0 => "done".into(),
            c => format!("exit {c}"),
        },
        Some(s) => format!("killed by signal {}", s & 0x7f),
    }
}

fn run_processes<F>(st: &Start<'_, F>, on_sample: &mut OnSample<'_>) -> Result<Vec<String>, String>
where
    F: Fn(&HostTask<'_>) -> Result<(), Stop> + Sync,
{
    let gate = PipeGate::new().map_err(|e| format!("pipe: {}", strerror(e)))?;
    let mut pids = Vec::with_capacity(st.launch.tasks);
    for (i, set) in st.cpusets.iter().enumerate() {
        match fork_process() {
            Ok(None) => {
                if !set.is_empty() {
                    let _ = bind_to_cpus(set);
                }
                gate.arrive();
                let t = HostTask::new(st.slots, i);
                let end = st.run_task(i, &t);
                drop(t);
                child_exit(end);
            }
            Ok(Some(pid)) => pids.push(pid),
            Err(e) => {
                st.slots.stop();
                gate.open_after(0, || 0);
                for pid in pids {
                    wait_child(pid);
                }
                let why = if e == 16 {
                    "this process has other threads".to_string()
                } else {
                    strerror(e)
                };
                return Err(format!("fork: {why}"));
            }
        }
    }
    let mut ended = vec![None; pids.len()];
    gate.open_after(pids.len() as u64, || {
        for (k, &pid) in pids.iter().enumerate() {
            if ended[k].is_none() && child_ended(pid) {
                ended[k] = Some("ended before the start".to_string());
            }
        }
        ended.iter().filter(|e| e.is_some()).count() as u64
    });
    sample_on_wall_clock(st.launch, |i| st.slots.get(i), on_sample);
    st.slots.stop();
    let stops = pids
        .iter()
        .zip(ended)
        .map(|(&pid, e)| e.unwrap_or_else(|| describe_status(wait_child(pid))))
        .collect();
    Ok(stops)
}

fn run_threads<F>(st: &Start<'_, F>, on_sample: &mut OnSample<'_>) -> Vec<String>
where
    F: Fn(&HostTask<'_>) -> Result<(), Stop> + Sync,
{
    let gate = std::sync::Barrier::new(st.launch.tasks + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = st
            .cpusets
            .iter()
            .enumerate()
            .map(|(i, set)| {
                let gate = &gate;
                s.spawn(move || {
                    if !set.is_empty() {
                        let _ = bind_to_cpus(set);
                    }
                    let t = HostTask::new(st.slots, i);
                    gate.wait();
                    st.run_task(i, &t)
                })
            })
            .collect();
        // The sampler, on a thread of its own: its allocations come from its own glibc arena,
        // never from the main heap a brk test's threads are moving the break above.
        let gate = &gate;
        let sampler = s.spawn(move || {
            gate.wait();
            sample_on_wall_clock(st.launch, |i| st.slots.get(i), on_sample);
            st.slots.stop();
        });
        let _ = sampler.join();
        handles
            .into_iter()
            .map(|h| match h.join() {
                Ok(Stop::Done) => "done".to_string(),
                Ok(s) => s.to_string(),
                Err(_) => "panicked".to_string(),
            })
            .collect()
    })
}
