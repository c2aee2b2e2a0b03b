//! usemem's processes on the engine: the platform that starts them ([`EnginePlatform`]), each
//! process an [`Mm`] (a worker process is [`Mm::fork`] of the parent's, [`fork_proc`]) and each
//! of its threads an engine thread on an emulated CPU.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use usermm::config::{BackingMode, TimeMode};
use usermm::cpu::CpuId;
use usermm::{Machine, Mm, Task};

use super::gate::StartGate;
use super::sys::errno;
use super::sys::EngineSys;
use super::{host_thread_budget, EngineProcess, FileKind, Hooks, Mapping, RunShared};
use crate::usemem::io::Io;
use crate::usemem::program::{FileToOpen, Platform};
use crate::usemem::sys::{Errno, Gate, MapFd, Sys};
use crate::usemem::worker::{bind_cpu, End, Plan, ProcState, Worker, WorkerRecord};

/// usemem's `fork` of the parent: [`Mm::fork`] of the parent's address space, so the child
/// has every mapping the parent made (the preallocation, `-L`'s segment), at the same
/// addresses, its anonymous pages shared copy-on-write; and a copy of the parent's mapping
/// records (the ends of files).
#[doc(alias = "fork")]
pub(super) fn fork_proc(parent: &EngineSys, cpu: CpuId) -> Result<(Arc<Mm>, Vec<Mapping>), Errno> {
    let mm = parent.mm().fork(cpu).map_err(errno)?;
    let maps = parent
        .proc
        .maps
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    Ok((mm, maps))
}

/// The engine as a usemem [`Platform`].
#[derive(Debug)]
pub struct EnginePlatform {
    pub(super) main: EngineSys,
    pub(super) nr_cpus: u64,
    /// Most worker threads alive at once.
    pub(super) max_threads: u64,
}

/// The pid of usemem's first process in virtual time (its threads and children count up from
/// it): an emulated pid, as on a freshly booted machine's first user session.
pub(super) const VIRTUAL_PID: i32 = 1000;

impl EnginePlatform {
    /// A platform on `machine`, printing through `io`.
    pub fn new(
        machine: &Arc<Machine>,
        io: Arc<dyn Io>,
        hooks: Hooks,
    ) -> Result<Self, usermm::Errno> {
        let cpu0 = CpuId(0);
        let max_threads = hooks.max_threads.unwrap_or_else(host_thread_budget);
        let mm = Mm::new(machine, cpu0)?;
        let shared = Arc::new(RunShared {
            machine: Arc::clone(machine),
            io,
            gates: [StartGate::new(), StartGate::new()],
            // Virtual time emulates the pid too (it seeds -R and is printed): the same run
            // after run. Wall time prints this process's, as usemem does.
            pid: hooks.pid.unwrap_or_else(|| {
                if machine.config().time.mode == TimeMode::Virtual {
                    VIRTUAL_PID
                } else {
                    std::process::id() as i32
                }
            }),
            hooks,
            file: std::sync::Mutex::new(FileKind::None),
            shm: Default::default(),
            detach: Default::default(),
            workers: AtomicU64::new(0),
            stores_data: machine.phys().backing().mode() == BackingMode::Full,
            pid_file: Default::default(),
            notes: Default::default(),
            parent_out: Default::default(),
        });
        let plan0 = Plan {
            name: String::new(),
            opts: Default::default(),
            done_bytes: 0,
            fd: MapFd::Opened,
            start_us: None,
            inherited_out: String::new(),
        };
        let proc = Arc::new(EngineProcess {
            mm: Arc::clone(&mm),
            maps: Default::default(),
            short_maps: Default::default(),
            state: ProcState::new(&plan0, None, 0),
            left: AtomicUsize::new(1),
        });
        Ok(EnginePlatform {
            main: EngineSys::new(Task::new(mm, cpu0), proc, shared, 0),
            nr_cpus: machine.cpus().nr_possible() as u64,
            max_threads,
        })
    }
}

impl Platform for EnginePlatform {
    /// The parent's mm goes with it (its workers' went as each ended).
    fn exit(&mut self) {
        self.main.proc.mm.mmput(self.main.cpu());
    }

    type Sys = EngineSys;

    fn main_sys(&self) -> &EngineSys {
        &self.main
    }

    fn nr_cpu(&self) -> u64 {
        self.nr_cpus
    }

    fn open(&mut self, file: FileToOpen<'_>) -> Result<(), Errno> {
        let FileToOpen {
            path,
            read_only,
            memfd,
            size,
        } = file;
        let kind = if memfd {
            FileKind::Sized {
                size,
                writable: true,
            }
        } else if path == Some("/dev/zero") {
            FileKind::DevZero
        } else {
            let f = usermm_host::usemem::open_create(path, read_only)?;
            FileKind::Sized {
                size: f.size,
                writable: !read_only,
            }
        };
        *self
            .main
            .shared
            .file
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = kind;
        Ok(())
    }

    fn fadvise(&mut self, _willneed: bool) {
        self.main
            .shared
            .note_once("-D: posix_fadvise is not modelled (the engine has no page cache)");
    }

    fn close(&mut self) {
        *self
            .main
            .shared
            .file
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = FileKind::None;
    }

    fn notes(&self, plan: &Plan) -> Vec<String> {
        let mut v = Vec::new();
        if plan.opts.detach && plan.opts.threads > 0 {
            v.push("-d with -t: each thread detaches on its own (usemem's fork keeps one)".into());
        }
        v
    }

    fn run_tasks(&mut self, plan: &Plan, prealloc: Option<u64>) -> Vec<WorkerRecord> {
        let shared = Arc::clone(&self.main.shared);
        *shared.pid_file.lock().unwrap_or_else(|e| e.into_inner()) = plan.opts.pid_file.clone();
        let o = &plan.opts;
        let threads = o.threads_per_process();
        let per_proc = o.workers_per_process();
        let total = o.workers();
        shared.workers.store(total, Relaxed);
        plan.inherited_out
            .clone_into(&mut shared.parent_out.lock().unwrap_or_else(|e| e.into_inner()));
        let plan = Arc::new(plan.clone());
        let nr_cpus = self.nr_cpus;
        let mut handles = Vec::new();
        // Beyond `cap` host threads at once, workers run in waves; the barriers then hold the
        // first wave only (a later worker finds them open).
        let cap = self.max_threads.max(1);
        let wave = total.min(cap);
        if total > cap {
            shared.note_once(&format!(
                "{total} workers are more host threads than this host's vm.max_map_count allows \
                 at once: they run in waves of {cap}, and the barriers hold the first wave only"
            ));
        }
        let done = Arc::new(StartGate::new());
        let mut started = 0u64;
        let mut opened = false;
        let open = |shared: &RunShared| {
            shared.gates[Gate::Start as usize].open_after(wave);
            if o.sync_free {
                shared.gates[Gate::Free as usize].open_after(wave);
            }
        };
        for i in 0..o.processes() {
            let first = i * per_proc;
            let cpu = CpuId((first % nr_cpus) as u16);
            let (mm, maps) = match fork_proc(&self.main, cpu) {
                Ok(x) => x,
                Err(e) => {
                    shared.io.err(&format!(
                        "failed to fork: {}\n",
                        crate::usemem::sys::strerror(e)
                    ));
                    for _ in 0..per_proc {
                        for gate in &shared.gates {
                            gate.abandon();
                        }
                        shared.worker_ended(false);
                    }
                    continue;
                }
            };
            let short = maps.iter().any(|r| r.valid < r.len);
            let proc = Arc::new(EngineProcess {
                mm,
                maps: std::sync::Mutex::new(maps),
                short_maps: std::sync::atomic::AtomicBool::new(short),
                state: ProcState::new(&plan, prealloc, i),
                left: AtomicUsize::new(per_proc as usize),
            });
            if per_proc == 0 {
                // A negative -t: the process starts no thread and ends at once.
                proc.end(&shared, cpu);
            }
            for t in 0..per_proc {
                let k = first + t;
                if started == wave && !opened {
                    open(&shared);
                    opened = true;
                }
                if started >= cap {
                    // Wait for a slot: `done` counts the workers that have finished.
                    done.wait_count(started + 1 - cap);
                }
                started += 1;
                let finished = Arc::clone(&done);
                let bound = if o.bind != 0 {
                    bind_cpu(k, o.bind, if o.bind > 0 { nr_cpus } else { 0 })
                } else {
                    Some(k % nr_cpus)
                };
                let (proc, sh, plan) = (Arc::clone(&proc), Arc::clone(&shared), Arc::clone(&plan));
                let cpu = CpuId(bound.unwrap_or(0) as u16);
                let spawned = usermm::sync::thread::spawn_named_on(
                    cpu,
                    format!("usemem-{k}"),
                    move |cpu| {
                        let shared = sh;
                        let sys = EngineSys::new(
                            Task::new(Arc::clone(&proc.mm), cpu),
                            Arc::clone(&proc),
                            Arc::clone(&shared),
                            k,
                        );
                        let mut w = Worker::new(&sys, &plan, &proc.state, k, cpu.0);
                        let end = if bound.is_none() {
                            // usemem's bind_cpu divides by a CPU count it never read.
                            sys.note("-b below 0: usemem's worker dies of SIGFPE (a division by zero) here");
                            proc.state.lose_inherited();
                            End::Signal("SIGFPE".into())
                        } else {
                            w.run()
                        };
                        let mut rec = w.rec;
                        rec.end = Some(end);
                        for (g, gate) in shared.gates.iter().enumerate() {
                            if !sys.arrived[g].get() {
                                gate.abandon();
                            }
                        }
                        shared.worker_ended(sys.detached.get());
                        if proc.left.fetch_sub(1, Relaxed) == 1 {
                            proc.end(&shared, cpu);
                        }
                        finished.abandon();
                        rec
                    },
                );
                match spawned {
                    Ok(h) => handles.push(h),
                    Err(e) => {
                        let what = if threads > 0 {
                            "pthread_create"
                        } else {
                            "failed to fork"
                        };
                        shared.io.err(&format!("{what}: {e}\n"));
                        for gate in &shared.gates {
                            gate.abandon();
                        }
                        shared.worker_ended(false);
                        done.abandon();
                    }
                }
            }
        }
        if !opened {
            open(&shared);
        }
        let mut recs: Vec<WorkerRecord> =
            handles.into_iter().filter_map(|h| h.join().ok()).collect();
        shared.parent_exits();
        recs.sort_by_key(|r| r.worker);
        recs
    }
}
