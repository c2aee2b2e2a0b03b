//! Bounded worker pools: the engine's `workqueue`.
//!
//! Mirrors `kernel/workqueue.c` as the parallel-free seeds (000, 001) use it: a dedicated
//! `alloc_workqueue(name, WQ_UNBOUND, max_active)` to which `tlb_finish_mmu` hands batch lists of
//! gathered pages with `queue_work`, then waits for them (`flush_work`), and which is torn down with
//! `destroy_workqueue`.
//!
//! ```text
//!   queue() ──► [ FIFO worklist: w0 w1 w2 … ] ──► kworker/u:<name>/0  (bound to cpus[0])
//!      │                                   ├──► kworker/u:<name>/1  (bound to cpus[1 % n])
//!      │ WorkHandle                        └──► …  max_active workers in all
//!      └── wait() ◄── completion ◄────────────── each item runs f(cpu), is timed, completes
//! ```
//!
//! # Lifecycle
//! | here | kernel |
//! |---|---|
//! | [`Workqueue::new`] | `alloc_workqueue(name, WQ_UNBOUND, max_active)` |
//! | [`Workqueue::queue`] | `queue_work` |
//! | [`WorkHandle::wait`] | `flush_work` |
//! | [`Workqueue::flush`] | `flush_workqueue` |
//! | [`Workqueue::destroy`] / drop | `destroy_workqueue` (drains, then stops the workers) |
//!
//! # Invariants
//! 1. Exactly `max_active` worker threads exist from `new` to drop, so at most `max_active` items
//!    run at once, and with enough queued work exactly `max_active` do.
//! 2. Items are taken from one FIFO queue in the order they were queued (each gets a sequence
//!    number under the pool lock, and is queued under it). With `max_active == 1` they also *run*
//!    and finish in that order.
//! 3. Worker `i` always passes `cpus[i % cpus.len()]` (or, with per-node pools in a virtual
//!    run, the CPU [`UnboundPools::workers_for`] chose for it) to the items it runs: an emulated CPU is a
//!    name a thread carries (see `cpu.rs`), and this is how work picks its per-CPU lists.
//! 4. Every queued item completes: it runs, or it panics and the panic is caught, counted in
//!    [`WorkqueueStats::panicked`] and reported by [`WorkHandle::wait`]. The statistics include an
//!    item before its handle completes.
//! 5. Dropping the workqueue runs everything already queued, then joins every worker.
//!
//! # Accounting ("who did the work")
//! Each worker measures every item's CPU time (`CLOCK_THREAD_CPUTIME_ID`, see
//! [`clock::thread_cpu_ns`]) and wall time ([`clock::now`]), into per-worker cache-padded counters folded when read
//! ([`Workqueue::stats`]). The CPU time is the worker thread's own, so freeing that happened on a
//! worker is charged to the worker, not to the thread that queued it: the sum of the queuing
//! thread's CPU time and `cpu_ns` is the total work done.
//!
//! # Locks
//! The pool state (worklist, close flag, flush window) is one leaf [`Mutex`] of class
//! [`WORKQUEUE`], held while an item is queued with its sequence number, while a worker takes
//! one, and while a worker marks one complete; workers sleep on a [`CondVar`] for work, flushers
//! on another for completions, and each item's [`Completion`] has its own lock. Items run with
//! no workqueue lock held. Every lock, wait and thread start goes through the sync seam, so the
//! same code runs in virtual time.
//!
//! # Differences from Linux
//! - The pool is fixed: `max_active` threads spawned up front, each pinned to one emulated CPU.
//!   The kernel creates unbound workers on demand, lets them run on any CPU of their pod, and uses
//!   `max_active` only to limit how many items are active at once.
//! - One FIFO queue; no per-CPU pools, priorities, ordered or freezable queues, no rescuer. In
//!   virtual time a workqueue may have v4.11's per-node unbound pools ([`UnboundPools`]): the
//!   run's workers then go to the node of the CPU that queued its first item (`numa.rs`).
//! - `flush_workqueue` tracks sequence numbers instead of the kernel's flush colours; it waits for
//!   items queued before the call only, never for later ones.
//! - Each `queue` call makes a new item (the closure is boxed); there is no `work_struct` to
//!   re-queue, so "already pending" never happens.
//! - A panicking item is caught and counted; in the kernel an oops kills the worker.
//! - Waiting for the queue from one of its own items deadlocks (lockdep warns in the kernel).

use std::{
    collections::VecDeque,
    fmt,
    panic::{self, AssertUnwindSafe},
    sync::{
        atomic::{AtomicU64, Ordering::Relaxed},
        Arc,
    },
};

use crossbeam_utils::CachePadded;
use serde::Serialize;

use super::class::WORKQUEUE;
use super::clock;
use super::condvar::{Completion, CondVar};
use super::lock::Mutex;
use super::thread::{self, JoinHandle};
use super::{charge, vhook, Cost};
use crate::cpu::CpuId;

mod numa;
pub use numa::UnboundPools;

/// See [`clock::thread_cpu_ns`] (kept under its old name for the workloads).
pub use super::clock::thread_cpu_ns as thread_cpu_time_ns;

/// A work item: what `queue_work` carries in a `work_struct`.
type WorkFn = Box<dyn FnOnce(CpuId) + Send + 'static>;

struct Work {
    f: WorkFn,
    /// Position in queue order; see [`FlushState`].
    seq: u64,
    done: Arc<Completion<WorkOutcome>>,
}

/// How a work item ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum WorkOutcome {
    /// The item returned.
    Completed,
    /// The item panicked; the panic was caught and counted in [`WorkqueueStats::panicked`].
    Panicked,
}

/// Which items have completed, for [`Workqueue::flush`].
///
/// Items complete out of order when `max_active > 1`, so "everything before `n` is done" is kept
/// as a low-water mark plus a window of flags for the items at and after it.
#[derive(Debug, Default)]
struct FlushState {
    /// Sequence number of the next item queued.
    next_seq: u64,
    /// Every item with `seq < done_below` has completed.
    done_below: u64,
    /// `window[i]`: item `done_below + i` has completed. `len() == next_seq - done_below`, and
    /// the front is `false` whenever the window is not empty.
    window: VecDeque<bool>,
}

/// One worker's counters. Written only by that worker; read (relaxed) by `stats`.
#[derive(Debug, Default)]
struct WorkerCounters {
    items_done: AtomicU64,
    panicked: AtomicU64,
    cpu_ns: AtomicU64,
    busy_wall_ns: AtomicU64,
}

/// The pool's state, under one lock (`pool->lock`).
#[derive(Debug, Default)]
struct PoolState {
    /// Items queued and not yet taken by a worker, oldest first (the worklist).
    worklist: VecDeque<Work>,
    /// Set once, by drop: workers drain the worklist, then exit.
    closed: bool,
    flush: FlushState,
    /// Workers waiting for work (`pool->nr_idle`): a queue that finds one pays the wake-up.
    idle: usize,
    /// Virtual workers: contexts alive in the current run (0 before the first `queue_work`
    /// of a run, and after the run ended them).
    vworkers: usize,
    /// The run is ending: virtual workers drain the worklist, then exit.
    vstop: bool,
    /// The CPUs of the current (or last) run's virtual workers, when the workqueue has
    /// per-node pools ([`UnboundPools`]); empty otherwise.
    run_cpus: Vec<CpuId>,
}

impl fmt::Debug for Work {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Work").field("seq", &self.seq).finish()
    }
}

/// What the workqueue and its workers share.
#[derive(Debug)]
struct WorkqueueShared {
    pool: Mutex<PoolState>,
    /// Signalled when an item is queued or the queue closes (workers wait on it).
    more_work: CondVar,
    /// Signalled when [`FlushState::done_below`] advances.
    flushed: CondVar,
    /// Indexed by worker number; padded because each is written by a different thread.
    workers: Box<[CachePadded<WorkerCounters>]>,
}

impl WorkqueueShared {
    /// Mark item `seq` complete and advance the low-water mark over the completed prefix.
    fn complete(&self, seq: u64) {
        let mut pool = self.pool.lock();
        let fs = &mut pool.flush;
        let idx = usize::try_from(seq - fs.done_below).expect("window fits in memory");
        fs.window[idx] = true;
        let mut advanced = false;
        while fs.window.front() == Some(&true) {
            fs.window.pop_front();
            fs.done_below += 1;
            advanced = true;
        }
        if advanced {
            self.flushed.notify_all();
        }
    }
}

/// Figures of one worker thread, for the "who did the work" question.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct WorkerStats {
    /// Worker number `i` (thread `kworker/u:<name>/<i>`).
    pub worker: usize,
    /// The emulated CPU the worker is bound to.
    pub cpu: CpuId,
    pub items_done: u64,
    pub panicked: u64,
    pub cpu_ns: u64,
    pub busy_wall_ns: u64,
}

/// Figures of a [`Workqueue`]; the totals are the sums over [`Self::workers`].
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct WorkqueueStats {
    pub name: String,
    pub max_active: usize,
    /// Items queued so far.
    pub items_queued: u64,
    /// Items finished so far, including the ones that panicked.
    pub items_done: u64,
    /// Items that panicked (counted in `items_done` too).
    pub panicked: u64,
    /// CPU time the workers spent running items (`CLOCK_THREAD_CPUTIME_ID`).
    pub cpu_ns: u64,
    /// Wall time the workers spent running items, summed over workers.
    pub busy_wall_ns: u64,
    pub workers: Vec<WorkerStats>,
}

/// Where a workqueue's workers run, resolved once when it is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// Host threads, started with the workqueue (wall mode).
    Host,
    /// Contexts of a virtual run, started by the first `queue_work` of each run and ended
    /// with it ([`Workqueue::end_run`]); outside a run, items run inline on the queuer.
    Virtual,
}

/// A bounded pool of `max_active` worker threads taking work items from one FIFO queue.
///
/// See the [module documentation](self) for the invariants and the accounting.
#[doc(alias = "workqueue_struct")]
#[doc(alias = "alloc_workqueue")]
pub struct Workqueue {
    name: String,
    /// Emulated CPU of each worker, by worker number.
    worker_cpus: Box<[CpuId]>,
    workers: Workers,
    /// Virtual workers run on the queuer's node (v4.11's per-node unbound pools).
    pools: Option<UnboundPools>,
    threads: Vec<JoinHandle<()>>,
    shared: Arc<WorkqueueShared>,
}

/// A queued item, to wait for.
///
/// Dropping it does not cancel the item.
#[derive(Debug)]
pub struct WorkHandle {
    done: Arc<Completion<WorkOutcome>>,
}

impl Workqueue {
    /// Start a pool of exactly `max_active` workers named `kworker/u:<name>/<i>`, worker `i`
    /// bound to the emulated CPU `cpus[i % cpus.len()]`.
    ///
    /// # Panics
    /// If `max_active` is 0, `cpus` is empty, or the host refuses to create a thread.
    #[doc(alias = "alloc_workqueue")]
    pub fn new(name: &str, max_active: usize, cpus: Vec<CpuId>) -> Self {
        Self::with_workers(name, max_active, cpus, Workers::Host)
    }

    /// [`Workqueue::new`] with its workers of the given kind: a machine in virtual time makes
    /// its workqueues with [`Workers::Virtual`].
    pub fn with_workers(name: &str, max_active: usize, cpus: Vec<CpuId>, workers: Workers) -> Self {
        assert!(
            max_active >= 1,
            "workqueue {name}: max_active must be at least 1"
        );
        assert!(
            !cpus.is_empty(),
            "workqueue {name}: no CPU to bind workers to"
        );
        let worker_cpus: Box<[CpuId]> = (0..max_active).map(|i| cpus[i % cpus.len()]).collect();
        let shared = Arc::new(WorkqueueShared {
            pool: Mutex::new(&WORKQUEUE, PoolState::default()),
            more_work: CondVar::new(),
            flushed: CondVar::new(),
            workers: (0..max_active)
                .map(|_| CachePadded::new(WorkerCounters::default()))
                .collect(),
        });
        let threads = match workers {
            Workers::Host => spawn_workers(name, &worker_cpus, &shared),
            Workers::Virtual => Vec::new(),
        };
        Self {
            name: name.to_owned(),
            worker_cpus,
            workers,
            pools: None,
            threads,
            shared,
        }
    }

    /// Give a [`Workers::Virtual`] workqueue per-node pools: each run's workers go to the node
    /// of the CPU that queues its first item, idle cores first ([`UnboundPools`]), instead of
    /// the fixed CPUs. Host workers ignore it.
    #[doc(alias = "wq_update_unbound_numa")]
    pub fn with_unbound_pools(mut self, pools: UnboundPools) -> Self {
        self.pools = Some(pools);
        self
    }

    /// Queue `f` to run on a worker, which passes it its emulated CPU. Returns at once.
    ///
    /// With [`Workers::Virtual`], the first item of a run starts the workers as contexts of
    /// the run; outside a run the item runs at once on the caller (there is no virtual time to
    /// run it in), with worker 0's CPU.
    #[doc(alias = "queue_work")]
    pub fn queue(&self, f: impl FnOnce(CpuId) + Send + 'static) -> WorkHandle {
        let done = Arc::new(Completion::new(&WORKQUEUE));
        let f: WorkFn = Box::new(f);
        let virtual_run = self.workers == Workers::Virtual && vhook::active();
        if self.workers == Workers::Virtual && !virtual_run {
            return self.run_inline(f, done);
        }
        let mut pool = self.shared.pool.lock();
        vm_bug_on!(pool.closed, "queue_work on a destroyed workqueue");
        let seq = pool.flush.next_seq;
        pool.flush.next_seq += 1;
        pool.flush.window.push_back(false);
        // Queued under the same lock that assigns the sequence number: queue order is
        // sequence order.
        pool.worklist.push_back(Work {
            f,
            seq,
            done: Arc::clone(&done),
        });
        if pool.idle > 0 {
            // try_to_wake_up of an idle worker, paid by the queuer (a no-op on the host).
            charge(Cost::WorkqueueWake, 1);
        }
        self.shared.more_work.notify_one();
        let start = virtual_run && pool.vworkers == 0;
        let mut cpus = None;
        if start {
            pool.vworkers = self.worker_cpus.len();
            if let Some(p) = &self.pools {
                let queuer = CpuId(crate::vtime::current_cpu() as u16);
                pool.run_cpus = p.workers_for(queuer, self.worker_cpus.len());
                cpus = Some(pool.run_cpus.clone());
            }
        }
        drop(pool);
        if start {
            let cpus = cpus.as_deref().unwrap_or(&self.worker_cpus);
            // Dropped handles: the run waits for every context anyway (see `end_run`).
            drop(spawn_workers(&self.name, cpus, &self.shared));
        }
        WorkHandle { done }
    }

    /// A virtual workqueue's item queued outside a run: run it here, account it to worker 0.
    fn run_inline(&self, f: WorkFn, done: Arc<Completion<WorkOutcome>>) -> WorkHandle {
        let seq = {
            let mut pool = self.shared.pool.lock();
            vm_bug_on!(pool.closed, "queue_work on a destroyed workqueue");
            let seq = pool.flush.next_seq;
            pool.flush.next_seq += 1;
            pool.flush.window.push_back(false);
            seq
        };
        run_one(
            self.worker_cpus[0],
            &self.shared,
            0,
            Work {
                f,
                seq,
                done: Arc::clone(&done),
            },
        );
        WorkHandle { done }
    }

    /// The virtual run is ending: the workers of this run finish what is queued, then exit,
    /// so that the run can end (a run waits for all its contexts). The next run's first
    /// `queue_work` starts new ones. A no-op outside a run and for host workers.
    pub fn end_run(&self) {
        if self.workers != Workers::Virtual || !vhook::active() {
            return;
        }
        let mut pool = self.shared.pool.lock();
        if pool.vworkers > 0 {
            pool.vstop = true;
            self.shared.more_work.notify_all();
        }
    }

    /// Where the workers run.
    pub fn workers(&self) -> Workers {
        self.workers
    }

    /// Wait until every item queued before this call has finished. Items queued meanwhile (by
    /// other threads, or by the items themselves) are not waited for.
    #[doc(alias = "flush_workqueue")]
    #[doc(alias = "drain_workqueue")]
    pub fn flush(&self) {
        let mut pool = self.shared.pool.lock();
        let target = pool.flush.next_seq;
        while pool.flush.done_below < target {
            self.shared.flushed.wait(&mut pool);
        }
    }

    /// Run everything queued, stop and join the workers. Same as dropping the workqueue.
    #[doc(alias = "destroy_workqueue")]
    pub fn destroy(self) {}

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Number of workers, which is the most items that run at once.
    pub fn max_active(&self) -> usize {
        self.worker_cpus.len()
    }

    /// The emulated CPU of each worker, by worker number: the last virtual run's when the
    /// workqueue has per-node pools and has run, else the fixed ones.
    pub fn worker_cpus(&self) -> Vec<CpuId> {
        let run = &self.shared.pool.lock().run_cpus;
        if run.is_empty() {
            self.worker_cpus.to_vec()
        } else {
            run.clone()
        }
    }

    /// Items queued and not yet finished.
    pub fn nr_pending(&self) -> u64 {
        let pool = self.shared.pool.lock();
        let fs = &pool.flush;
        fs.next_seq - fs.done_below - fs.window.iter().filter(|&&done| done).count() as u64
    }

    /// The counters so far, per worker and summed.
    pub fn stats(&self) -> WorkqueueStats {
        let items_queued = self.shared.pool.lock().flush.next_seq;
        let cpus = self.worker_cpus();
        let workers: Vec<WorkerStats> = self
            .shared
            .workers
            .iter()
            .zip(cpus.iter())
            .enumerate()
            .map(|(worker, (c, &cpu))| WorkerStats {
                worker,
                cpu,
                items_done: c.items_done.load(Relaxed),
                panicked: c.panicked.load(Relaxed),
                cpu_ns: c.cpu_ns.load(Relaxed),
                busy_wall_ns: c.busy_wall_ns.load(Relaxed),
            })
            .collect();
        WorkqueueStats {
            name: self.name.clone(),
            max_active: self.max_active(),
            items_queued,
            items_done: workers.iter().map(|w| w.items_done).sum(),
            panicked: workers.iter().map(|w| w.panicked).sum(),
            cpu_ns: workers.iter().map(|w| w.cpu_ns).sum(),
            busy_wall_ns: workers.iter().map(|w| w.busy_wall_ns).sum(),
            workers,
        }
    }
}

impl Drop for Workqueue {
    fn drop(&mut self) {
        // Closing lets each worker drain what is queued, then exit. Virtual workers have no
        // handle here: their run waits for them.
        self.shared.pool.lock().closed = true;
        self.shared.more_work.notify_all();
        for t in self.threads.drain(..) {
            // Workers catch item panics, so a join error would be a bug in this file; there is
            // nothing useful to do with it while dropping.
            let _ = t.join();
        }
    }
}

impl fmt::Debug for Workqueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workqueue")
            .field("name", &self.name)
            .field("worker_cpus", &self.worker_cpus)
            .field("pending", &self.nr_pending())
            .finish_non_exhaustive()
    }
}

impl WorkHandle {
    /// Block until the item has finished, and say how.
    #[doc(alias = "flush_work")]
    pub fn wait(self) -> WorkOutcome {
        self.done.wait()
    }
}

/// Start one worker per CPU of `cpus` (worker `i` on `cpus[i]`): host threads, or contexts of
/// the current virtual run.
fn spawn_workers(name: &str, cpus: &[CpuId], shared: &Arc<WorkqueueShared>) -> Vec<JoinHandle<()>> {
    cpus.iter()
        .enumerate()
        .map(|(i, &cpu)| {
            let shared = Arc::clone(shared);
            thread::spawn_named_on(cpu, format!("kworker/u:{name}/{i}"), move |cpu| {
                worker_loop(cpu, &shared, i)
            })
            .unwrap_or_else(|e| panic!("workqueue {name}: cannot spawn worker {i}: {e}"))
        })
        .collect()
}

/// Body of worker `idx`: run items until the queue is closed (or, virtual, the run ends) and
/// empty.
#[doc(alias = "worker_thread")]
fn worker_loop(cpu: CpuId, shared: &WorkqueueShared, idx: usize) {
    while let Some(w) = next_work(shared) {
        run_one(cpu, shared, idx, w);
    }
}

/// Run one item on worker `idx`, time it, complete it.
#[doc(alias = "process_one_work")]
fn run_one(cpu: CpuId, shared: &WorkqueueShared, idx: usize, work: Work) {
    let counters = &shared.workers[idx];
    let Work { f, seq, done } = work;
    {
        let wall0 = clock::now();
        let cpu0 = clock::thread_cpu_ns();
        let result = panic::catch_unwind(AssertUnwindSafe(move || f(cpu)));
        let cpu_ns = clock::thread_cpu_ns().saturating_sub(cpu0);
        let wall_ns = wall0.elapsed_ns();
        let outcome = match result {
            Ok(()) => WorkOutcome::Completed,
            Err(payload) => {
                // A payload whose own drop panics must not take the worker down either.
                let _ = panic::catch_unwind(AssertUnwindSafe(move || drop(payload)));
                counters.panicked.fetch_add(1, Relaxed);
                WorkOutcome::Panicked
            }
        };
        counters.cpu_ns.fetch_add(cpu_ns, Relaxed);
        counters.busy_wall_ns.fetch_add(wall_ns, Relaxed);
        counters.items_done.fetch_add(1, Relaxed);
        done.complete(outcome);
        shared.complete(seq);
    }
}

/// Take the oldest queued item, sleeping while there is none; `None` once the queue is closed
/// (or its virtual run ends) and drained.
fn next_work(shared: &WorkqueueShared) -> Option<Work> {
    let mut pool = shared.pool.lock();
    loop {
        if let Some(w) = pool.worklist.pop_front() {
            return Some(w);
        }
        if pool.closed || pool.vstop {
            if pool.vworkers > 0 {
                // A virtual worker leaves; the last one re-arms the pool for the next run.
                pool.vworkers -= 1;
                if pool.vworkers == 0 {
                    pool.vstop = false;
                }
            }
            return None;
        }
        pool.idle += 1;
        shared.more_work.wait(&mut pool);
        pool.idle -= 1;
    }
}

#[cfg(test)]
mod test;
