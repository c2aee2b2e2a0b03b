//! The scheduler's state: contexts, CPUs, the ready heap, and the rule that orders them.
//!
//! # The rule (conservative discrete-event order)
//! Every context has a clock `now` (ps). The *ready heap* holds every context that can act
//! without waiting for another one, keyed by `(now, cpu, id)`: contexts parked at a
//! synchronisation point, contexts woken (a lock handed over, a sleep ended, a wake-up sent)
//! at the time they will run. The running context may pass a synchronisation point only while
//! its own key is below the heap's top ([`State::may_pass`], an O(1) compare); otherwise it
//! pushes itself and suspends, and the scheduler resumes the smallest key.
//!
//! Why that is enough: every event a context can cause (a release, a wake-up, a spawn) happens
//! at its own clock or later, and every context that is not in the heap is waiting for such an
//! event. So when the running context is the smallest, no event earlier than its clock can
//! still be produced, and what it sees at the synchronisation point (is the lock free? when was
//! the line last written?) is what a real machine would show at that instant. Events are
//! therefore processed in non-decreasing time order, ties broken by CPU then context id; the
//! order is a function of the program alone, never of the host.
//!
//! Code between two synchronisation points only reads and writes its own context's state (it
//! charges costs to its clock), which is why it may run ahead without checking.
//!
//! # CPUs
//! A CPU runs one context at a time (its *occupant*). A context occupies its CPU from the
//! moment the scheduler first resumes it until it blocks on a sleeping wait (a mutex, an rwsem,
//! a condition variable, a join, a sleep) or exits; a spinning waiter keeps its CPU. A context
//! ready while its CPU is occupied waits in the CPU's FIFO run queue and takes the CPU when the
//! occupant leaves it (run-to-block: no preemption, no time slices). A CPU is *busy* while it
//! has an occupant; that is the definition the SMT factor uses (see [`State::work`]).
//!
//! Accounting: a context's clock advances only by work (busy), spinning (spin), or jumps while
//! it is off its CPU (idle for the CPU, not charged to the context). A CPU's busy and spin
//! times are the sums over its occupants; its idle time is the run's end minus both.

#![deny(unsafe_code)]

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, VecDeque},
    fmt::Write,
    sync::Arc,
};

use rustc_hash::FxHashMap;

use super::{
    class::Mode,
    coro::YielderPtr,
    jitter,
    memory::Memory,
    profile::{Cost, LockPrice, Placement, Profile, Ps},
};

pub(super) mod resources;
mod table;
use resources::{ClassIndex, LineClassStat, LockClassStat, VLine, VLock};
use table::Table;

pub(super) type CtxId = u32;

/// The heap key: time, then CPU, then context id, packed so that one integer compare orders
/// them.
#[inline]
pub(super) fn key(now: Ps, cpu: u16, id: CtxId) -> u128 {
    ((now as u128) << 64) | ((cpu as u128) << 32) | id as u128
}

/// What a context is doing, for the scheduler and for the deadlock report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// Executing, or runnable in the ready heap.
    Runnable,
    /// Ready, in its CPU's run queue behind the occupant.
    Cpu,
    /// Queued on a lock.
    Lock { id: usize, mode: Mode },
    /// Waiting on a condition variable.
    Cv { id: usize },
    /// Joining another context.
    Join { ctx: CtxId },
    /// Finished.
    Done,
}

/// One context (a virtual thread).
#[derive(Debug)]
pub(super) struct Ctx {
    pub cpu: u16,
    pub name: String,
    pub now: Ps,
    /// Busy time: work, acquisitions, line stalls (SMT-scaled where work is).
    pub busy: Ps,
    /// Time spent spinning for a lock.
    pub spin: Ps,
    pub start: Ps,
    pub end: Option<Ps>,
    pub on_cpu: bool,
    pub wait: Wait,
    pub joiners: Vec<CtxId>,
    pub yielder: YielderPtr,
    /// The context's jitter generator (`vtime/jitter.rs`).
    pub rng: u64,
}

#[derive(Debug, Default)]
pub(super) struct CpuState {
    /// The extra time the SMT factor added to this CPU's work while a sibling was busy,
    /// labelled by what every busy sibling was doing: spinning for a lock, or anything else
    /// (the same factor applies; the report shows them apart).
    pub smt_extra_busy: Ps,
    pub smt_extra_spin: Ps,
    pub occupant: Option<CtxId>,
    pub runq: VecDeque<CtxId>,
    pub busy: Ps,
    pub spin: Ps,
}

/// Counters of the scheduler itself (deterministic, like everything else).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct SchedCounters {
    pub resumes: u64,
    pub sync_points: u64,
    pub gate_yields: u64,
    /// Interrupts charged to another CPU's occupant ([`State::ipi`]).
    pub ipis: u64,
    /// Of those, the ones whose handler outlasted the sender's round trip, so that the sender
    /// spun for the rest ([`State::ipi`]).
    pub ipi_waits: u64,
}

/// The profile resolved for one run's CPUs.
#[derive(Debug)]
pub(super) struct Model {
    pub profile: Arc<Profile>,
    pub placement: Placement,
    nr_cpus: usize,
    /// `dist[from * nr_cpus + to]`: the [`Distance`](super::profile::Distance) as an index.
    dist: Vec<u8>,
    core: Vec<u32>,
    /// The CPUs of each core (its hardware threads), by core.
    core_cpus: Vec<Vec<u16>>,
}

impl Model {
    pub(super) fn new(profile: Arc<Profile>, placement: Placement) -> Self {
        let n = placement.nr_cpus();
        let mut dist = Vec::with_capacity(n * n);
        for a in 0..n {
            for b in 0..n {
                dist.push(placement.distance(a, b) as u8);
            }
        }
        let core: Vec<u32> = (0..n).map(|c| placement.core_of(c) as u32).collect();
        let mut core_cpus = vec![Vec::new(); core.iter().max().map_or(0, |&m| m as usize + 1)];
        for (cpu, &k) in core.iter().enumerate() {
            core_cpus[k as usize].push(cpu as u16);
        }
        Model {
            profile,
            placement,
            nr_cpus: n,
            dist,
            core,
            core_cpus,
        }
    }

    /// A line transfer from `from` (the CPU that last wrote it; `None`: nobody yet) to `to`.
    #[inline]
    pub(super) fn transfer(&self, from: Option<u16>, to: u16) -> Ps {
        match from {
            None => 0,
            Some(f) => {
                self.profile.transfer_ps
                    [self.dist[f as usize * self.nr_cpus + to as usize] as usize]
            }
        }
    }

    pub(super) fn lock_price(&self, class: &str) -> Option<LockPrice> {
        self.profile.locks.get(class).copied()
    }
}

/// What [`State::next`] found (small enough to come back in registers: the deadlock's
/// report is made by [`State::deadlock_report`] when the scheduler meets one).
#[derive(Debug, Clone, Copy)]
pub(super) enum Next {
    Run(CtxId),
    Done,
    Deadlock,
}

/// Everything a run's contexts share, behind the runtime's one `RefCell`.
#[derive(Debug)]
pub(super) struct State {
    pub model: Model,
    pub ctxs: Vec<Ctx>,
    ready: BinaryHeap<Reverse<u128>>,
    /// A context that could not pass its synchronisation point and suspended: ready, not yet
    /// in `ready`. [`State::next`] swaps it for the heap's top in one sift, where a push and a
    /// pop would take two.
    yielded: Option<CtxId>,
    pub running: Option<CtxId>,
    pub cpus: Vec<CpuState>,
    core_busy: Vec<u8>,
    /// Contexts created and not finished.
    pub live: usize,
    /// The latest clock any finished context reached: the run's end so far.
    pub end: Ps,
    /// A run failed (panic or deadlock): every hook is a no-op from now on.
    pub failed: bool,
    /// Every lock's and shared line's state, by the index its host object carries
    /// (`table.rs`).
    pub locks: Table<VLock>,
    pub lines: Table<VLine>,
    pub cvs: FxHashMap<usize, VecDeque<CtxId>>,
    pub lock_classes: Vec<LockClassStat>,
    /// Where each lock class sits in `lock_classes`.
    pub lock_class_index: ClassIndex,
    pub line_classes: Vec<LineClassStat>,
    /// Where each line class sits in `line_classes`.
    pub line_class_index: ClassIndex,
    pub counters: SchedCounters,
    /// The line model (`vtime/memory.rs`), once the machine has told the runtime its memmap
    /// and the profile has a `[memory]`.
    pub mem: Option<Memory>,
    /// The run's seed (`time.seed`): every context's jitter generator starts from it.
    pub seed: u64,
}

impl State {
    /// Whether a clock of the runs so far reached its end (`Ps::MAX`, where every clock sum
    /// saturates): the times read from it are not times.
    pub(crate) fn clock_ended(&self) -> bool {
        self.end == Ps::MAX
    }

    pub(super) fn new(model: Model) -> Self {
        let n = model.placement.nr_cpus();
        let cores = (0..n)
            .map(|c| model.placement.core_of(c))
            .max()
            .unwrap_or(0)
            + 1;
        State {
            ctxs: Vec::new(),
            ready: BinaryHeap::new(),
            yielded: None,
            running: None,
            cpus: (0..n).map(|_| CpuState::default()).collect(),
            core_busy: vec![0; cores],
            live: 0,
            end: 0,
            failed: false,
            locks: Table::default(),
            lines: Table::default(),
            cvs: FxHashMap::default(),
            lock_classes: Vec::new(),
            lock_class_index: ClassIndex::default(),
            line_classes: Vec::new(),
            line_class_index: ClassIndex::default(),
            counters: SchedCounters::default(),
            mem: None,
            seed: 0,
            model,
        }
    }

    pub(super) fn nr_cpus(&self) -> usize {
        self.cpus.len()
    }

    /// Creates a context on `cpu` that becomes ready at `now` (it takes its CPU when resumed).
    pub(super) fn new_ctx(&mut self, cpu: u16, name: String, now: Ps) -> CtxId {
        let id = CtxId::try_from(self.ctxs.len()).expect("vtime: more than 2^32 contexts");
        let name = if name.is_empty() {
            format!("ctx{id}")
        } else {
            name
        };
        self.ctxs.push(Ctx {
            cpu,
            name,
            now,
            busy: 0,
            spin: 0,
            start: now,
            end: None,
            on_cpu: false,
            wait: Wait::Runnable,
            joiners: Vec::new(),
            yielder: YielderPtr::NONE,
            rng: jitter::seed_for(self.seed, id),
        });
        self.live += 1;
        self.push_ready(id);
        id
    }

    #[inline]
    fn key_of(&self, id: CtxId) -> u128 {
        let c = &self.ctxs[id as usize];
        key(c.now, c.cpu, id)
    }

    /// May `me` pass a synchronisation point now? Only while it is below every ready context.
    #[inline]
    pub(super) fn may_pass(&self, me: CtxId) -> bool {
        match self.ready.peek() {
            None => true,
            Some(Reverse(top)) => self.key_of(me) < *top,
        }
    }

    /// Makes `id` ready at its clock.
    pub(super) fn push_ready(&mut self, id: CtxId) {
        self.ctxs[id as usize].wait = Wait::Runnable;
        let k = self.key_of(id);
        self.ready.push(Reverse(k));
    }

    /// The running context `id` could not pass its synchronisation point (its key is above
    /// the heap's top) and suspends, ready at its clock: [`State::next`] puts it in the heap.
    #[inline]
    pub(super) fn yield_ready(&mut self, id: CtxId) {
        debug_assert!(self.yielded.is_none());
        self.ctxs[id as usize].wait = Wait::Runnable;
        self.yielded = Some(id);
    }

    /// The smallest ready key, removed from the heap (with a yielded context put in): the same
    /// key a push of the yielded context and a pop would give, since the heap's order is its
    /// keys' alone.
    #[inline]
    fn pop_ready(&mut self) -> Option<u128> {
        let Some(y) = self.yielded.take() else {
            return self.ready.pop().map(|Reverse(k)| k);
        };
        let k = self.key_of(y);
        match self.ready.peek_mut() {
            Some(mut top) if top.0 < k => Some(std::mem::replace(&mut *top, Reverse(k)).0),
            _ => Some(k),
        }
    }

    /// The context the scheduler resumes next: the smallest ready key, after it has its CPU.
    ///
    /// A key older than its context's clock (an interrupt charged the context while it waited
    /// in the heap, [`State::ipi`]) is put back at the clock it has now: it never runs early.
    ///
    /// The context that ran last is not running any more (it suspended or finished): the
    /// scheduler calls this right after it came back.
    #[inline]
    pub(super) fn next(&mut self) -> Next {
        self.running = None;
        while let Some(k) = self.pop_ready() {
            let id = k as u32;
            let c = &self.ctxs[id as usize];
            if self.key_of(id) != k {
                debug_assert!(self.key_of(id) > k, "vtime: a ready clock went back");
                self.push_ready(id);
                continue;
            }
            if !c.on_cpu {
                let cpu = c.cpu as usize;
                if self.cpus[cpu].occupant.is_some() {
                    self.ctxs[id as usize].wait = Wait::Cpu;
                    self.cpus[cpu].runq.push_back(id);
                    continue;
                }
                self.occupy(cpu, id);
            }
            self.running = Some(id);
            self.counters.resumes += 1;
            return Next::Run(id);
        }
        if self.live == 0 {
            Next::Done
        } else {
            Next::Deadlock
        }
    }

    fn occupy(&mut self, cpu: usize, id: CtxId) {
        debug_assert!(self.cpus[cpu].occupant.is_none());
        self.cpus[cpu].occupant = Some(id);
        self.ctxs[id as usize].on_cpu = true;
        self.core_busy[self.model.core[cpu] as usize] += 1;
    }

    /// `id` leaves its CPU at its clock (it blocks or exits); the run queue's head takes it.
    pub(super) fn vacate(&mut self, id: CtxId) {
        let (cpu, t) = {
            let c = &mut self.ctxs[id as usize];
            debug_assert!(c.on_cpu);
            c.on_cpu = false;
            (c.cpu as usize, c.now)
        };
        self.cpus[cpu].occupant = None;
        self.core_busy[self.model.core[cpu] as usize] -= 1;
        if let Some(h) = self.cpus[cpu].runq.pop_front() {
            self.occupy(cpu, h);
            let hc = &mut self.ctxs[h as usize];
            hc.now = hc.now.max(t);
            self.push_ready(h);
        }
    }

    /// Charges `ps` of work to `id`: busy time, times the SMT factor while another hardware
    /// thread of its core is busy (has an occupant) at the moment of the charge; the extra is
    /// labelled by whether every busy sibling was spinning on a lock.
    ///
    /// The scaling is out of line: most charges run with the sibling idle, and the fast path
    /// is then a test and [`State::busy`].
    #[inline]
    pub(super) fn work(&mut self, id: CtxId, ps: Ps) {
        let cpu = self.ctxs[id as usize].cpu as usize;
        let core = self.model.core[cpu] as usize;
        if self.core_busy[core] >= 2 {
            self.work_smt(id, cpu, core, ps);
        } else {
            self.busy(id, ps);
        }
    }

    /// [`State::work`] while another hardware thread of `core` is busy.
    #[inline(never)]
    fn work_smt(&mut self, id: CtxId, cpu: usize, core: usize, ps: Ps) {
        let ps = {
            let scaled = (ps as u128 * self.model.profile.smt_milli as u128 / 1000) as Ps;
            let extra = scaled - ps;
            // A sibling that occupies its CPU while queued on a lock is spinning (a sleeping
            // waiter leaves its CPU).
            let spinning = self.model.core_cpus[core]
                .iter()
                .filter(|&&s| s as usize != cpu)
                .filter_map(|&s| self.cpus[s as usize].occupant)
                .all(|o| matches!(self.ctxs[o as usize].wait, Wait::Lock { .. }));
            let c = &mut self.cpus[cpu];
            if spinning {
                c.smt_extra_spin = c.smt_extra_spin.saturating_add(extra);
            } else {
                c.smt_extra_busy = c.smt_extra_busy.saturating_add(extra);
            }
            scaled
        };
        self.busy(id, ps);
    }

    /// Charges `ps` of busy time to `id` and its CPU, unscaled (lock and line stalls).
    #[inline]
    pub(super) fn busy(&mut self, id: CtxId, ps: Ps) {
        // Saturating: a clock stops at its end, `Ps::MAX` (213 days), instead of wrapping to a
        // small time (every figure is bounded to 1 s, but a run may charge many of them); a
        // run whose clock reached the end fails ([`State::clock_ended`]), so no figure is read
        // from a stopped clock. Every sum of clock times in the scheduler saturates likewise.
        let c = &mut self.ctxs[id as usize];
        c.now = c.now.saturating_add(ps);
        c.busy = c.busy.saturating_add(ps);
        let cpu = &mut self.cpus[c.cpu as usize];
        cpu.busy = cpu.busy.saturating_add(ps);
    }

    /// The running context `me` interrupts CPU `cpu` (a TLB shootdown's call-function IPI):
    /// the context that occupies it, if any and not `me`, pays `ps` (jittered by its own
    /// generator) as work at its clock — spinning, runnable or about to run, an occupant takes
    /// the interrupt. An idle CPU costs nobody anything. A runnable occupant's heap key is then
    /// older than its clock; [`State::next`] puts it back where it belongs.
    ///
    /// The sender waits for the handler (`csd_lock_wait`: `flush_tlb_multi` asks every target
    /// to run `flush_tlb_func` and returns when each has). What it pays per target is the
    /// profile's `tlb_flush_remote_per_cpu` (charged by the flush itself), a round trip that
    /// contains a handler; a handler longer than that round trip keeps the sender spinning
    /// for the difference, charged here. Without it a receiver could be interrupted for longer
    /// than its senders spend sending — more than all of its time, with a profile whose
    /// receiving side is much dearer than its sending side — and make no progress at all.
    #[doc(alias = "flush_tlb_func", alias = "csd_lock_wait")]
    pub(super) fn ipi(&mut self, me: CtxId, cpu: usize, ps: Ps) {
        let Some(r) = self.cpus.get(cpu).and_then(|c| c.occupant) else {
            return;
        };
        if r == me || ps == 0 {
            return;
        }
        let sigma = self.model.profile.jitter_ppm;
        let ps = jitter::apply(ps, sigma, &mut self.ctxs[r as usize].rng);
        self.work(r, ps);
        self.counters.ipis += 1;
        let round_trip = self.model.profile.cost_ps[Cost::TlbFlushRemotePerCpu.index()];
        let beyond = ps.saturating_sub(round_trip);
        if beyond > 0 {
            let until = self.ctxs[me as usize].now.saturating_add(beyond);
            self.spin_until(me, until);
            self.counters.ipi_waits += 1;
        }
    }

    /// `id` filled `lines` untracked lines into its caches (cleared or copied pages).
    #[inline]
    pub(super) fn mem_fill(&mut self, id: CtxId, lines: u64) {
        if let Some(mem) = self.mem.as_mut() {
            let cpu = self.ctxs[id as usize].cpu as usize;
            mem.fill(cpu, lines);
        }
    }

    /// `id` spun from its clock until `t`.
    pub(super) fn spin_until(&mut self, id: CtxId, t: Ps) {
        let c = &mut self.ctxs[id as usize];
        let d = t.saturating_sub(c.now);
        c.now += d;
        c.spin = c.spin.saturating_add(d);
        let cpu = &mut self.cpus[c.cpu as usize];
        cpu.spin = cpu.spin.saturating_add(d);
    }

    /// `id` is woken by an event at `t`: it will run at `t` plus the wake-up latency.
    pub(super) fn wake(&mut self, id: CtxId, t: Ps) {
        let wake = self.model.profile.wakeup_ps;
        let c = &mut self.ctxs[id as usize];
        c.now = c.now.max(t.saturating_add(wake));
        self.push_ready(id);
    }

    /// The running context `id` finishes: joiners wake, its CPU passes on.
    pub(super) fn exit(&mut self, id: CtxId) {
        let now = self.ctxs[id as usize].now;
        let c = &mut self.ctxs[id as usize];
        c.end = Some(now);
        c.wait = Wait::Done;
        let joiners = std::mem::take(&mut c.joiners);
        self.live -= 1;
        self.end = self.end.max(now);
        for j in joiners {
            self.wake(j, now);
        }
        self.vacate(id);
    }

    fn ctx_label(&self, id: CtxId) -> String {
        let c = &self.ctxs[id as usize];
        format!("ctx {id} `{}` (cpu{})", c.name, c.cpu)
    }

    #[cold]
    pub(super) fn deadlock_report(&self) -> String {
        let mut s = String::new();
        let blocked: Vec<CtxId> = (0..self.ctxs.len() as CtxId)
            .filter(|&i| self.ctxs[i as usize].wait != Wait::Done)
            .collect();
        let latest = blocked
            .iter()
            .map(|&i| self.ctxs[i as usize].now)
            .max()
            .unwrap_or(0);
        let _ = write!(
            s,
            "vtime: deadlock at {} ns (profile {}): no context can run, {} blocked:",
            latest / 1000,
            self.model.profile.name(),
            blocked.len()
        );
        for id in blocked {
            let c = &self.ctxs[id as usize];
            let _ = write!(s, "\n  {} at {} ns ", self.ctx_label(id), c.now / 1000);
            let _ = match c.wait {
                Wait::Lock { id: lock, mode } => {
                    let l = self.locks.by_id(lock).expect("a waited-for lock exists");
                    let holders: Vec<String> = l.holders().map(|h| self.ctx_label(h)).collect();
                    write!(
                        s,
                        "waits for {} {:#x} ({:?}), held by {}",
                        self.lock_classes[l.class as usize].name,
                        lock,
                        mode,
                        if holders.is_empty() {
                            "nobody".into()
                        } else {
                            holders.join(", ")
                        }
                    )
                }
                Wait::Cv { id: cv } => write!(s, "waits on condition variable {cv:#x}"),
                Wait::Join { ctx } => write!(s, "joins {}", self.ctx_label(ctx)),
                Wait::Cpu => {
                    let occ = self.cpus[c.cpu as usize].occupant;
                    write!(
                        s,
                        "waits for its CPU, occupied by {}",
                        occ.map_or("nobody".into(), |o| self.ctx_label(o))
                    )
                }
                Wait::Runnable | Wait::Done => write!(s, "is runnable (scheduler bug)"),
            };
        }
        s
    }
}
