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
//! * **Host non-determinism**: before an unexplained disagreement is reported, the executed
//!   prefix is replayed on a fresh host; if that host agrees with the engine the first one was
//!   disturbed (e.g. `khugepaged`, a failed THP allocation) and the outcome is
//!   [`Outcome::HostFlake`].

use std::fmt;

use usermm_host::HostBackend;

use crate::compare::compare;
use crate::divergences::{self, DivContext};
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
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            maps_after_each: true,
            closing_check: true,
            probe_cap_pages: 64,
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
    /// The host disagreed with itself on a replay; nothing is concluded.
    HostFlake { mismatch: Box<Mismatch> },
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
            | Outcome::HostFlake { mismatch }
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
            let mismatch = Mismatch {
                index: i,
                executed: executed.clone(),
                host: h.clone(),
                engine: e.clone(),
                diff,
                host_maps,
                engine_maps,
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
            if !h.is_backend_failure() && host_replay_agrees(new_host, &executed, &e) {
                return Outcome::HostFlake {
                    mismatch: Box::new(mismatch),
                };
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
