//! Running one op sequence on the host kernel and on the engine, step by step.
//!
//! [`run_sequence`] is [`crate::compare::run_differential`] with what a test suite needs on top:
//! * **Maps after every change** (optional): an [`Op::Maps`] follows every mmap, munmap,
//!   mprotect, madvise, mlock and munlock, so a VMA-level difference is caught on the op that
//!   caused it.
//! * **A closing check**: the maps, the counters, then for every arena VMA of the host a probe
//!   of its pages (capped) plus one page on each side, and a read of its first bytes.
//! * **Known divergences**: a disagreement is looked up in [`crate::divergences`]; a listed one
//!   ends the sequence as [`Outcome::Known`] (the two address spaces may differ from then on).
//! * **Host non-determinism, named**: before an unexplained disagreement is reported, the
//!   executed prefix is replayed on a fresh host. If that host agrees with the engine *and* one
//!   of the named causes of [`divergences::HOST_NONDETERMINISM`] matches — each needs the
//!   kernel's own count of its event (`/proc/vmstat`, e.g. `thp_fault_fallback` for a THP the
//!   host could not allocate, `thp_collapse_alloc` for khugepaged) to have grown while the
//!   sequence ran — the first host was disturbed and the outcome is [`Outcome::HostFlake`],
//!   with the cause. A fresh host agreeing is not enough on its own: until 2026-11-29 it was,
//!   and it hid a race of the harness for weeks (h48: the host backend's loopback pipe shared
//!   across a fork gave a read one byte of the other process). Such a disagreement is
//!   [`Outcome::Diverged`], marked [`Mismatch::replay_agreed`], so the next race of our own
//!   fails instead of hiding.

use std::fmt;

use usermm_host::HostBackend;

use crate::compare::compare;
use crate::divergences::{self, DivContext, HostEvents};
use crate::ops::{
    normalize_maps, AddressSpace, MapsLine, Op, OpResult, ARENA_BASE, ARENA_END, PAGE_SIZE,
    PROT_READ, PROT_WRITE,
};

/// The host kernel backend, warmed up so that its fault counter counts arena faults only.
///
/// The host child's first read that fills its whole 64 KiB I/O buffer takes one extra minor
/// fault (its buffer is not page aligned, and the warm-up in `usermm-host`'s `backend/child.rs` touches one byte
/// per 4 KiB from the buffer's start, missing the buffer's last page, which is still
/// copy-on-write after the fork). `WarmHost` does such a read on a scratch mapping far from
/// the test addresses before the first op, and reports `minor_faults` from that point.
#[derive(Debug)]
pub struct WarmHost {
    inner: HostBackend,
    /// Per process number: the faults to discount (process 0's warm-up; a forked process
    /// starts from zero).
    fault_base: [u64; 2],
    /// The current process's number.
    cur: usize,
}

/// Where [`WarmHost`] warms up: 64 MiB below the arena's end (the host child uses the last two
/// pages itself).
pub const WARM_UP_AT: u64 = ARENA_END - (64 << 20);

impl WarmHost {
    pub fn new() -> Result<WarmHost, String> {
        let mut h = HostBackend::new().map_err(|e| e.to_string())?;
        let len = 32 * PAGE_SIZE;
        let warm = [
            Op::mmap_anon_at(WARM_UP_AT, len, PROT_READ | PROT_WRITE),
            Op::Read {
                addr: WARM_UP_AT,
                len,
            },
            Op::Munmap {
                addr: WARM_UP_AT,
                len,
            },
        ];
        for op in &warm {
            match h.apply(op) {
                OpResult::Ok(_) | OpResult::Data(_) => {}
                r => return Err(format!("host warm-up {op}: {r}")),
            }
        }
        let fault_base = match h.apply(&Op::Counters) {
            OpResult::Counters(c) => c.minor_faults,
            r => return Err(format!("host warm-up counters: {r}")),
        };
        Ok(WarmHost {
            inner: h,
            fault_base: [fault_base, 0],
            cur: 0,
        })
    }
}

impl AddressSpace for WarmHost {
    fn apply(&mut self, op: &Op) -> OpResult {
        match (op, self.inner.apply(op)) {
            (_, OpResult::Counters(mut c)) => {
                c.minor_faults = c.minor_faults.saturating_sub(self.fault_base[self.cur]);
                OpResult::Counters(c)
            }
            (Op::Fork, OpResult::Ok(k)) => {
                if let Some(b) = self.fault_base.get_mut(k as usize) {
                    *b = 0;
                }
                OpResult::Ok(k)
            }
            (&Op::Switch { proc }, OpResult::Ok(v)) => {
                self.cur = (proc as usize).min(1);
                OpResult::Ok(v)
            }
            (Op::Exit, OpResult::Ok(k)) => {
                self.cur = (k as usize).min(1);
                OpResult::Ok(k)
            }
            (_, r) => r,
        }
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}

/// A fresh [`WarmHost`], boxed (panics if the host child cannot be started).
pub fn new_warm_host() -> Box<dyn AddressSpace> {
    Box::new(WarmHost::new().expect("start a host child"))
}

/// How [`run_sequence`] runs.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// Insert an [`Op::Maps`] after every op that may change the VMAs.
    pub maps_after_each: bool,
    /// Append the closing check (maps, counters, probes and reads of every VMA).
    pub closing_check: bool,
    /// Pages probed per VMA at most in the closing check.
    pub probe_cap_pages: u64,
    /// Where the host's event counts come from ([`HostEvents::read`]; a test may fake them).
    pub host_events: fn() -> HostEvents,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            maps_after_each: true,
            closing_check: true,
            probe_cap_pages: 64,
            host_events: HostEvents::read,
        }
    }
}

/// One disagreement, with everything needed to reproduce it.
#[derive(Debug, Clone)]
pub struct Mismatch {
    /// Index in the executed ops.
    pub index: usize,
    /// Every op executed up to and including the one that disagreed.
    pub executed: Vec<Op>,
    pub host: OpResult,
    pub engine: OpResult,
    /// The explanation from [`compare`].
    pub diff: String,
    pub host_maps: Vec<MapsLine>,
    pub engine_maps: Vec<MapsLine>,
    /// A fresh host, replaying `executed`, agreed with the engine on the last op (and no named
    /// cause of host non-determinism explained the first host): suspect the harness.
    pub replay_agreed: bool,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "ops executed (the last one disagreed):")?;
        for (i, op) in self.executed.iter().enumerate() {
            writeln!(f, "  #{i:<3} {op}")?;
        }
        writeln!(f, "host:   {}", self.host)?;
        writeln!(f, "engine: {}", self.engine)?;
        writeln!(f, "diff:   {}", self.diff)?;
        if self.replay_agreed {
            writeln!(
                f,
                "note:   a fresh host agreed with the engine, and no named host cause \
                 (divergences::HOST_NONDETERMINISM) matched: a race of the harness, or a host \
                 non-determinism to name there with the kernel's reason"
            )?;
        }
        writeln!(f, "host maps after the op:")?;
        for l in &self.host_maps {
            writeln!(f, "  {l}")?;
        }
        writeln!(f, "engine maps after the op:")?;
        for l in &self.engine_maps {
            writeln!(f, "  {l}")?;
        }
        Ok(())
    }
}

/// How a sequence ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Every op agreed; `ops` were executed (including inserted checks).
    Agreed { ops: usize, results: Vec<OpResult> },
    /// A listed divergence ended the sequence.
    Known {
        id: &'static str,
        mismatch: Box<Mismatch>,
    },
    /// The host disagreed with itself on a replay, and `cause` (an id of
    /// [`divergences::HOST_NONDETERMINISM`]) explains why; nothing is concluded.
    HostFlake {
        cause: &'static str,
        mismatch: Box<Mismatch>,
    },
    /// An unexplained disagreement.
    Diverged(Box<Mismatch>),
}

impl Outcome {
    /// True unless the outcome is [`Outcome::Diverged`].
    pub fn acceptable(&self) -> bool {
        !matches!(self, Outcome::Diverged(_))
    }

    pub fn ops_executed(&self) -> usize {
        match self {
            Outcome::Agreed { ops, .. } => *ops,
            Outcome::Known { mismatch, .. }
            | Outcome::HostFlake { mismatch, .. }
            | Outcome::Diverged(mismatch) => mismatch.executed.len(),
        }
    }
}

fn changes_vmas(op: &Op) -> bool {
    matches!(
        op,
        Op::Mmap(_)
            | Op::Munmap { .. }
            | Op::Mprotect { .. }
            | Op::Madvise { .. }
            | Op::Mlock { .. }
            | Op::Munlock { .. }
            | Op::Mremap(_)
            | Op::Fork
            | Op::Switch { .. }
            | Op::Exit
    )
}

fn maps_of(b: &mut dyn AddressSpace) -> Vec<MapsLine> {
    match b.apply(&Op::Maps) {
        OpResult::Maps(l) => normalize_maps(&l),
        _ => Vec::new(),
    }
}

/// The ops of the closing check, derived from the host's final maps.
fn closing_ops(host_maps: &[MapsLine], cap_pages: u64) -> Vec<Op> {
    let mut ops = vec![Op::Counters];
    for l in host_maps {
        let len = l.len().min(cap_pages * PAGE_SIZE);
        if l.start > ARENA_BASE {
            ops.push(Op::Probe {
                addr: l.start - PAGE_SIZE,
                len: PAGE_SIZE,
            });
        }
        ops.push(Op::Probe { addr: l.start, len });
        if l.end < ARENA_END {
            ops.push(Op::Probe {
                addr: l.end,
                len: PAGE_SIZE,
            });
        }
        ops.push(Op::Read {
            addr: l.start,
            len: l.len().min(2 * PAGE_SIZE),
        });
    }
    ops
}

/// The ops [`run_sequence`] executes before the closing check's probes, each with the index of
/// the op of `ops` it is (`None` for an inserted [`Op::Maps`]).
pub fn expand(ops: &[Op], opts: RunOptions) -> Vec<(Op, Option<usize>)> {
    let mut queue = Vec::with_capacity(ops.len() * 2 + 1);
    for (i, op) in ops.iter().enumerate() {
        queue.push((op.clone(), Some(i)));
        if opts.maps_after_each && changes_vmas(op) {
            queue.push((Op::Maps, None));
        }
    }
    if opts.closing_check {
        queue.push((Op::Maps, None));
    }
    queue
}

/// Run `ops` on a fresh host (from `new_host`) and on `engine`; see the module docs.
pub fn run_sequence(
    new_host: &mut dyn FnMut() -> Box<dyn AddressSpace>,
    engine: &mut dyn AddressSpace,
    ops: &[Op],
    opts: RunOptions,
) -> Outcome {
    let events_before = (opts.host_events)();
    let mut host = new_host();
    let mut executed: Vec<Op> = Vec::new();
    let mut results: Vec<OpResult> = Vec::new();
    let mut queue: Vec<Op> = expand(ops, opts).into_iter().map(|(op, _)| op).collect();
    let mut closing_added = !opts.closing_check;
    let mut i = 0;
    loop {
        if i == queue.len() {
            if closing_added {
                break;
            }
            closing_added = true;
            let hm = match results.last() {
                Some(OpResult::Maps(l)) => normalize_maps(l),
                _ => maps_of(host.as_mut()),
            };
            queue.extend(closing_ops(&hm, opts.probe_cap_pages));
            continue;
        }
        let op = queue[i].clone();
        let h = host.apply(&op);
        let e = engine.apply(&op);
        executed.push(op.clone());
        if let Err(diff) = compare(&h, &e) {
            let host_maps = maps_of(host.as_mut());
            let engine_maps = maps_of(engine);
            let events = (opts.host_events)().since(&events_before);
            let mut mismatch = Mismatch {
                index: i,
                executed: executed.clone(),
                host: h.clone(),
                engine: e.clone(),
                diff,
                host_maps,
                engine_maps,
                replay_agreed: false,
            };
            let ctx = DivContext {
                op: &op,
                host: &h,
                engine: &e,
                host_maps: &mismatch.host_maps,
                engine_maps: &mismatch.engine_maps,
                history: &executed,
            };
            if let Some(k) = divergences::explain(&ctx) {
                return Outcome::Known {
                    id: k.id,
                    mismatch: Box::new(mismatch),
                };
            }
            let cause = divergences::host_cause(&ctx, &events);
            if !h.is_backend_failure() && host_replay_agrees(new_host, &executed, &e) {
                if let Some(cause) = cause {
                    return Outcome::HostFlake {
                        cause: cause.id,
                        mismatch: Box::new(mismatch),
                    };
                }
                mismatch.replay_agreed = true;
            }
            return Outcome::Diverged(Box::new(mismatch));
        }
        results.push(h);
        i += 1;
    }
    Outcome::Agreed {
        ops: executed.len(),
        results,
    }
}

/// Replay `executed` on a fresh host: does its last result agree with `engine_last`?
fn host_replay_agrees(
    new_host: &mut dyn FnMut() -> Box<dyn AddressSpace>,
    executed: &[Op],
    engine_last: &OpResult,
) -> bool {
    let mut h = new_host();
    let mut last = None;
    for op in executed {
        last = Some(h.apply(op));
    }
    last.is_some_and(|r| compare(&r, engine_last).is_ok())
}

/// Greedy minimisation: drop ops one at a time (from the end) while `still_fails` holds.
/// `still_fails` runs a candidate sequence and says whether it still diverges.
pub fn minimize(ops: &[Op], still_fails: &mut dyn FnMut(&[Op]) -> bool) -> Vec<Op> {
    let mut cur = ops.to_vec();
    let mut changed = true;
    while changed {
        changed = false;
        let mut i = cur.len();
        while i > 0 {
            i -= 1;
            let mut cand = cur.clone();
            cand.remove(i);
            if still_fails(&cand) {
                cur = cand;
                changed = true;
            }
        }
    }
    cur
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::ops::Counters;

    /// A backend that answers every op the same way, except for what it is told to get wrong.
    struct Fake {
        counters: Counters,
        /// Reads return this first byte instead of 0.
        first_byte: u8,
    }

    impl AddressSpace for Fake {
        fn apply(&mut self, op: &Op) -> OpResult {
            match *op {
                Op::Read { len, .. } => {
                    let mut d = vec![0u8; len as usize];
                    d[0] = self.first_byte;
                    OpResult::Data(d)
                }
                Op::Counters => OpResult::Counters(self.counters),
                Op::Maps => OpResult::Maps(Vec::new()),
                _ => OpResult::Ok(0),
            }
        }

        fn name(&self) -> &str {
            "fake"
        }
    }

    fn counters(rss_kb: u64, anon_huge_kb: u64, minor_faults: u64) -> Counters {
        Counters {
            minor_faults,
            rss_kb,
            anon_huge_kb,
            ..Counters::default()
        }
    }

    thread_local! {
        /// Calls of [`ticking_events`] on this thread.
        static TICKS: Cell<u64> = const { Cell::new(0) };
    }

    /// Host events that grow by one of each between any two reads.
    fn ticking_events() -> HostEvents {
        let t = TICKS.with(|c| {
            c.set(c.get() + 1);
            c.get()
        });
        HostEvents {
            thp_fault_fallback: t,
            thp_collapse_alloc: t,
        }
    }

    fn quiet_events() -> HostEvents {
        HostEvents::default()
    }

    fn opts(host_events: fn() -> HostEvents) -> RunOptions {
        RunOptions {
            maps_after_each: false,
            closing_check: false,
            probe_cap_pages: 1,
            host_events,
        }
    }

    /// Run `ops` with a first host that answers like `first` and every later (fresh) host like
    /// `later`, against an engine that answers like `engine`.
    fn run(first: Fake, later: fn() -> Fake, engine: Fake, ops: &[Op], o: RunOptions) -> Outcome {
        let mut first = Some(first);
        let mut new_host = || -> Box<dyn AddressSpace> {
            match first.take() {
                Some(f) => Box::new(f),
                None => Box::new(later()),
            }
        };
        let mut engine = engine;
        run_sequence(&mut new_host, &mut engine, ops, o)
    }

    fn plain() -> Fake {
        Fake {
            counters: counters(2048, 2048, 1),
            first_byte: 0,
        }
    }

    /// Regression (h48, h50): a host that gave one read a foreign byte once — the loopback pipe
    /// shared across a fork — was accepted as a host flake because a fresh host agreed; the
    /// allowance hid that race of the harness for weeks. A fresh host agreeing is not enough:
    /// with no named cause the sequence diverges, marked as such, even while the kernel counts
    /// THP events.
    #[test]
    fn a_replay_agreeing_alone_is_not_a_host_flake() {
        let read = [Op::Read {
            addr: ARENA_BASE,
            len: PAGE_SIZE,
        }];
        let raced = Fake {
            first_byte: 0x7f,
            ..plain()
        };
        match run(raced, plain, plain(), &read, opts(ticking_events)) {
            Outcome::Diverged(m) => {
                assert!(m.replay_agreed, "{m}");
                assert!(m.to_string().contains("a fresh host agreed"), "{m}");
            }
            o => panic!("expected a divergence, got {o:?}"),
        }
    }

    /// A THP the first host could not allocate (4 KiB instead, more faults, less Rss) is a host
    /// flake only while the kernel counted a THP fault fallback; without that count it is a
    /// divergence, and one a fresh host repeats is one whatever the kernel counted.
    #[test]
    fn thp_fallback_is_a_host_flake_only_with_the_kernels_count() {
        let ops = [Op::Counters];
        let fell_back = || Fake {
            counters: counters(4, 0, 1),
            ..plain()
        };
        match run(fell_back(), plain, plain(), &ops, opts(ticking_events)) {
            Outcome::HostFlake { cause, .. } => assert_eq!(cause, "thp-fault-fallback"),
            o => panic!("expected a host flake, got {o:?}"),
        }
        match run(fell_back(), plain, plain(), &ops, opts(quiet_events)) {
            Outcome::Diverged(m) => assert!(m.replay_agreed, "{m}"),
            o => panic!("expected a divergence, got {o:?}"),
        }
        let always = || Fake {
            counters: counters(4, 0, 1),
            ..plain()
        };
        match run(fell_back(), always, plain(), &ops, opts(ticking_events)) {
            Outcome::Diverged(m) => assert!(!m.replay_agreed, "{m}"),
            o => panic!("expected a divergence, got {o:?}"),
        }
    }

    /// A range khugepaged collapsed on the first host (more AnonHugePages, no more faults) is
    /// a host flake with the kernel's collapse count; the wrong direction is not. The numbers
    /// are those of the collapse seen in `diff_generated_a` (seed 0x5001, scale 2, sequence
    /// 368): a 2 MiB block PTE-mapped after a 4-page MADV_DONTNEED, whole and PMD-mapped again.
    #[test]
    fn khugepaged_collapse_needs_its_direction_and_count() {
        let ops = [Op::Counters];
        let small = || Fake {
            counters: counters(2056, 0, 14),
            ..plain()
        };
        let collapsed = Fake {
            counters: counters(2072, 2048, 14),
            ..plain()
        };
        match run(collapsed, small, small(), &ops, opts(ticking_events)) {
            Outcome::HostFlake { cause, .. } => assert_eq!(cause, "khugepaged-collapse"),
            o => panic!("expected a host flake, got {o:?}"),
        }
        // More faults with more AnonHugePages is no collapse.
        let odd = Fake {
            counters: counters(2072, 2048, 15),
            ..plain()
        };
        match run(odd, small, small(), &ops, opts(ticking_events)) {
            Outcome::Diverged(m) => assert!(m.replay_agreed, "{m}"),
            o => panic!("expected a divergence, got {o:?}"),
        }
    }
}
