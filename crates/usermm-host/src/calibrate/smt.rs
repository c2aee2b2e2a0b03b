//! `usermm calibrate`'s SMT probe: do two of this host's CPUs share a physical core?
//!
//! A guest cannot tell from sysfs: a hypervisor may present two hardware threads of one core
//! as two vCPUs with one thread each (`thread_siblings_list` then names one CPU). The probe
//! asks the hardware instead: the same CPU-bound loop runs alone on one CPU, then on it again
//! while a partner process runs it without pause on a second CPU, both pinned
//! (`probes::smt_pair`); the figure is the loop's per-thread throughput with the partner over
//! alone, on the measuring thread's CPU time (a preemption does not count). Two hardware
//! threads of one core share its execution units and each gets well under its lone speed;
//! two cores do not slow each other (the loop touches no memory). The CPUs are the two the
//! round's other probes use (the least loaded, as for the cache-line ping-pong), one sample a
//! round, after the other probes' rounds.
//!
//! The two share a core when the median ratio is under [`SHARED_BELOW`] (0.85): a rule, not a
//! measurement — siblings on this loop are expected near 0.5–0.7, separate cores within a few
//! percent of 1. The ratio is a figure of this loop (integer multiply and add, no memory);
//! kernel code, which waits on memory more, may lose less to its sibling.

use serde::{Deserialize, Serialize};

use super::{paired_samples, probes, Measured, Progress};
use crate::error::HostError;

/// A median per-thread throughput ratio (with a partner over alone) under this means the two
/// CPUs share a core.
pub const SHARED_BELOW: f64 = 0.85;

/// The probe's result, in the calibration record (`smt`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SmtProbe {
    /// The measuring CPU and its partner, one pair per sample.
    pub pairs: Vec<(usize, usize)>,
    /// The loop's per-thread throughput with the partner running over alone (alone CPU time
    /// over paired CPU time), one per sample.
    pub ratio: Measured,
    /// `ratio.median < SHARED_BELOW`.
    pub shared_core: bool,
    /// Whether every partner was pinned where asked.
    pub pinned: bool,
}

impl SmtProbe {
    /// The probe in a line: which CPUs, the ratio, and what it says.
    pub fn summary(&self) -> String {
        let (a, b) = self.pairs.first().copied().unwrap_or((0, 1));
        format!(
            "SMT probe: CPUs {a} and {b}: per-thread throughput with the other busy {:.2}x \
             alone (median of {}): {}",
            self.ratio.median,
            self.ratio.samples.len(),
            if self.shared_core {
                "they share a physical core (SMT siblings)"
            } else {
                "they do not share a physical core"
            }
        )
    }
}

/// `repeat` samples of the probe, `rounds` rounds of the loop each, counted by `progress`
/// from `steps.0` of `steps.1`.
pub(super) fn run(
    repeat: usize,
    rounds: u64,
    steps: (usize, usize),
    progress: Progress<'_>,
) -> Result<SmtProbe, HostError> {
    let mut ratios = Vec::with_capacity(repeat);
    let (pairs, pinned) = paired_samples(repeat, "SMT probe", steps, progress, |cpu, other| {
        let w = probes::smt_pair(Some(cpu), other, rounds)?;
        ratios.push(w[2].max(1) as f64 / w[3].max(1) as f64);
        Ok(w[1] == 1 && w[4] == 1)
    })?;
    let ratio = Measured::new(
        ratios,
        "ratio",
        format!(
            "per-thread throughput of a CPU-bound loop ({rounds} rounds of eight independent \
             64-bit multiply-add chains, no memory) while a partner process pinned to a second \
             CPU runs the same loop, over the same loop alone: alone thread CPU time / paired \
             thread CPU time, in a freshly forked process pinned to the least-loaded CPU, the \
             partner on the next least loaded, one process per sample, {repeat} samples"
        ),
    );
    Ok(SmtProbe {
        pairs,
        shared_core: ratio.median < SHARED_BELOW,
        ratio,
        pinned,
    })
}
