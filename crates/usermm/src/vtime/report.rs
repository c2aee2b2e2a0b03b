//! What a runtime modelled: per-CPU busy/spin/idle, per-context CPU time, lock_stat per lock
//! class, RMW counts and time per line class. Every figure is virtual (ns, truncated from the
//! model's picoseconds) and labelled `modelled (profile NAME)`.

#![deny(unsafe_code)]

use serde::Serialize;

use super::{
    class::{Mode, WaitKind},
    memory_stat::MemoryStat,
    profile::Ps,
    sched::State,
};

fn ns(ps: Ps) -> u64 {
    ps / 1000
}

/// Time on one emulated CPU from 0 to the end of the last run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuTime {
    pub cpu: usize,
    pub socket: usize,
    pub core: usize,
    pub thread: usize,
    pub node: usize,
    #[serde(flatten)]
    pub time: CpuUse,
}

/// How one emulated CPU spent a stretch of virtual time: from 0 in a [`CpuTime`], between two
/// reports in [`CpuUse::since`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CpuUse {
    /// Work, lock acquisitions and line stalls.
    pub busy_ns: u64,
    /// Spinning for a spinlock.
    pub spin_ns: u64,
    /// Everything else: no occupant.
    pub idle_ns: u64,
    /// Of `busy_ns`, what the SMT factor added while a sibling thread was busy, apart by what
    /// the sibling did: ran (work, stalls) or spun on a lock.
    pub smt_busy_sibling_ns: u64,
    pub smt_spinning_sibling_ns: u64,
}

impl CpuUse {
    /// The use between `earlier` (the same CPU in an earlier report) and this one, over a
    /// window of `window_ns`: what was neither busy nor spinning in it was idle.
    pub fn since(&self, earlier: &CpuUse, window_ns: u64) -> CpuUse {
        let busy_ns = self.busy_ns.saturating_sub(earlier.busy_ns);
        let spin_ns = self.spin_ns.saturating_sub(earlier.spin_ns);
        CpuUse {
            busy_ns,
            spin_ns,
            idle_ns: window_ns.saturating_sub(busy_ns + spin_ns),
            smt_busy_sibling_ns: self
                .smt_busy_sibling_ns
                .saturating_sub(earlier.smt_busy_sibling_ns),
            smt_spinning_sibling_ns: self
                .smt_spinning_sibling_ns
                .saturating_sub(earlier.smt_spinning_sibling_ns),
        }
    }
}

/// One context (virtual thread).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContextTime {
    pub id: u32,
    pub name: String,
    pub cpu: usize,
    pub start_ns: u64,
    /// `None` while it has not finished (a failed run).
    pub end_ns: Option<u64>,
    /// Its "thread CPU time": busy plus spin.
    pub busy_ns: u64,
    pub spin_ns: u64,
}

/// `/proc/lock_stat`'s columns for one lock class and mode, in virtual time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LockStat {
    pub class: String,
    /// `"exclusive"` (spinlocks, mutexes, rwsem writers) or `"shared"` (rwsem readers).
    pub mode: &'static str,
    /// `"spin"` or `"sleep"`.
    pub wait: &'static str,
    pub con_bounces: u64,
    pub contentions: u64,
    pub waittime_min_ns: u64,
    pub waittime_max_ns: u64,
    pub waittime_total_ns: u64,
    pub acq_bounces: u64,
    pub acquisitions: u64,
    pub holdtime_min_ns: u64,
    pub holdtime_max_ns: u64,
    pub holdtime_total_ns: u64,
    /// Failed try-locks (not a lock_stat column).
    pub try_failures: u64,
}

/// RMWs on the shared lines of one class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LineStat {
    pub class: String,
    pub rmws: u64,
    /// RMWs whose line came from another CPU.
    pub bounces: u64,
    /// RMWs done in the copy a CPU still held while a transfer away from it was under way
    /// (back-to-back RMWs of one CPU, `vtime/sched/resources.rs`, `HOLDER_KEEPS_LINE`).
    pub kept: u64,
    /// Time RMWs waited for the line (queued behind other CPUs' RMWs).
    pub wait_ns: u64,
    /// Virtual CPU time spent on the line: from each RMW's request to its end (wait, transfer
    /// and the atomic). Divided by the CPUs' busy time, the share of CPU time on the line.
    pub time_ns: u64,
}

/// The scheduler's own counters (deterministic too).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchedStats {
    /// Coroutine resumes (each one a switch into a context and back).
    pub resumes: u64,
    /// Synchronisation points passed.
    pub sync_points: u64,
    /// Synchronisation points where the context had to wait for its turn.
    pub gate_yields: u64,
    /// Shootdown interrupts taken by another CPU's occupant (`flush_tlb_func`).
    pub ipis: u64,
    /// Of those, the ones whose handler outlasted the sender's round trip
    /// (`tlb_flush_remote_per_cpu`): the sender spun until the handler was done.
    pub ipi_waits: u64,
}

/// Everything a runtime modelled so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// `modelled (profile NAME)`: every time below is virtual.
    pub time: String,
    pub profile: String,
    pub nr_cpus: usize,
    pub nr_nodes: usize,
    /// Virtual time at which the last run ended.
    pub end_ns: u64,
    pub cpus: Vec<CpuTime>,
    pub contexts: Vec<ContextTime>,
    pub lock_stat: Vec<LockStat>,
    pub lines: Vec<LineStat>,
    /// The line model's touches by where they found their line (`vtime/memory.rs`); `None`
    /// without a `[memory]` in the profile or a memmap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStat>,
    pub sched: SchedStats,
}

impl Report {
    pub(super) fn from_state(st: &State) -> Report {
        Report::from_state_at(st, st.end)
    }

    /// The report as of virtual time `end` (ps): idle time is counted up to `end`.
    pub(super) fn from_state_at(st: &State, end: Ps) -> Report {
        let p = &st.model.placement;
        let cpus = st
            .cpus
            .iter()
            .enumerate()
            .map(|(cpu, c)| CpuTime {
                cpu,
                socket: p.socket_of(cpu),
                core: p.core_of(cpu),
                thread: p.thread_of(cpu),
                node: p.node_of(cpu),
                time: CpuUse {
                    busy_ns: ns(c.busy),
                    spin_ns: ns(c.spin),
                    idle_ns: ns(end.saturating_sub(c.busy + c.spin)),
                    smt_busy_sibling_ns: ns(c.smt_extra_busy),
                    smt_spinning_sibling_ns: ns(c.smt_extra_spin),
                },
            })
            .collect();
        let contexts = st
            .ctxs
            .iter()
            .enumerate()
            .map(|(id, c)| ContextTime {
                id: id as u32,
                name: c.name.clone(),
                cpu: c.cpu as usize,
                start_ns: ns(c.start),
                end_ns: c.end.map(ns),
                busy_ns: ns(c.busy),
                spin_ns: ns(c.spin),
            })
            .collect();
        let mut lock_stat = Vec::new();
        for c in &st.lock_classes {
            for mode in [Mode::Exclusive, Mode::Shared] {
                let m = &c.modes[mode as usize];
                if m.acquisitions == 0 && m.contentions == 0 && m.try_failures == 0 {
                    continue;
                }
                let min = |v: Ps| if v == Ps::MAX { 0 } else { ns(v) };
                lock_stat.push(LockStat {
                    class: c.name.to_string(),
                    mode: match mode {
                        Mode::Exclusive => "exclusive",
                        Mode::Shared => "shared",
                    },
                    wait: match c.wait {
                        WaitKind::Spin => "spin",
                        WaitKind::Sleep => "sleep",
                    },
                    con_bounces: m.con_bounces,
                    contentions: m.contentions,
                    waittime_min_ns: min(m.wait_min),
                    waittime_max_ns: ns(m.wait_max),
                    waittime_total_ns: ns(m.wait_total),
                    acq_bounces: m.acq_bounces,
                    acquisitions: m.acquisitions,
                    holdtime_min_ns: min(m.hold_min),
                    holdtime_max_ns: ns(m.hold_max),
                    holdtime_total_ns: ns(m.hold_total),
                    try_failures: m.try_failures,
                });
            }
        }
        lock_stat.sort_by(|a, b| (&a.class, a.mode).cmp(&(&b.class, b.mode)));
        let mut lines: Vec<LineStat> = st
            .line_classes
            .iter()
            .map(|l| LineStat {
                class: l.name.to_string(),
                rmws: l.rmws,
                bounces: l.bounces,
                kept: l.kept,
                wait_ns: ns(l.wait),
                time_ns: ns(l.time),
            })
            .collect();
        lines.sort_by(|a, b| a.class.cmp(&b.class));
        let name = st.model.profile.name().to_string();
        Report {
            time: format!("modelled (profile {name})"),
            profile: name,
            nr_cpus: st.nr_cpus(),
            nr_nodes: p.nr_nodes(),
            end_ns: ns(end),
            cpus,
            contexts,
            lock_stat,
            lines,
            memory: st.mem.as_ref().map(|m| m.stat()),
            sched: SchedStats {
                resumes: st.counters.resumes,
                sync_points: st.counters.sync_points,
                gate_yields: st.counters.gate_yields,
                ipis: st.counters.ipis,
                ipi_waits: st.counters.ipi_waits,
            },
        }
    }

    /// The lock_stat row of `class` in `mode`.
    pub fn lock(&self, class: &str, mode: Mode) -> Option<&LockStat> {
        let mode = match mode {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        };
        self.lock_stat
            .iter()
            .find(|l| l.class == class && l.mode == mode)
    }

    /// The row of line class `class`.
    pub fn line(&self, class: &str) -> Option<&LineStat> {
        self.lines.iter().find(|l| l.class == class)
    }

    /// Busy time summed over every CPU.
    pub fn busy_ns(&self) -> u64 {
        self.cpus.iter().map(|c| c.time.busy_ns).sum()
    }

    /// The share of the CPUs' busy time spent on lines of `class` (seed 002's "cycles in
    /// get_huge_zero_page", in virtual time).
    pub fn line_share(&self, class: &str) -> f64 {
        let busy = self.busy_ns();
        match self.line(class) {
            Some(l) if busy > 0 => l.time_ns as f64 / busy as f64,
            _ => 0.0,
        }
    }
}
