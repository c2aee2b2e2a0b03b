//! `usermm calibrate`'s LRU-add probe: what moving a CPU's batch of new folios to the LRU costs
//! the fault that does it, and how many folios a batch holds.
//!
//! A new anonymous folio is not put on its LRU list at once: `folio_add_lru` parks it in this
//! CPU's `cpu_fbatches.lru_add` batch, and the fault that fills the batch moves all of it
//! under the lruvec lock (`folio_batch_move_lru`: per folio `lru_add`, the list link and the
//! LRU size counters). So one fault in every batch pays for the whole batch, and a fault
//! latency distribution has a tail that recurs with the batch's period: on this host's 6.18
//! kernel every 31st fault, `PAGEVEC_SIZE` 31 since Matthew Wilcox's "increase PAGEVEC_SIZE
//! from 15 to 31" (LKML, March 2024; v4.x had 15). The single-thread figures, which time
//! thousands of faults together, spread that cost over every fault; the tail is where a
//! latency's 99th percentile lies.
//!
//! The probe (`probes::lru_add_drain`) write-faults the pages of a 1 MiB VMA one at a time,
//! each timed alone on the monotonic clock, drops them with `MADV_DONTNEED`, and does it again,
//! in a freshly forked process pinned to the least-loaded CPU. **The period** is the commonest
//! gap between two slow faults (slower than halfway from the median to the 99th percentile);
//! **the drain** is the median of the slowest `faults / period` faults less the median fault:
//! what the batch's fault pays beyond an ordinary one. The profile (`usermm-workloads`'
//! `calibrate`) takes the period as `lru_add_batch` and `(drain - lruvec lock acquire) /
//! period` as the per-folio `lru_add` cost. Wall time, not CPU time: a fault is a microsecond,
//! below what a thread-CPU clock read resolves cheaply; a preemption lands in the top of the
//! tail, above the median of the slow faults, which is why that median is taken.

use serde::{Deserialize, Serialize};

use super::{probes, system, Measured, Progress};
use crate::error::HostError;

/// The probe's result, in the calibration record (`lru_add`, format 4).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct LruAddProbe {
    /// The CPU of each sample.
    pub cpus: Vec<usize>,
    /// Faults timed per sample.
    pub faults: u64,
    /// The median fault, ns.
    pub fault: Measured,
    /// The batch's fault beyond the median fault, ns.
    pub drain: Measured,
    /// The period of the slow faults, folios (0 in a sample that found none).
    pub period: Measured,
    /// Whether every child was pinned where asked.
    pub pinned: bool,
}

impl LruAddProbe {
    /// The period every sample agreed on, if they all did (a batch size is an integer).
    pub fn batch(&self) -> Option<u32> {
        let first = *self.period.samples.first()?;
        (first >= 2.0 && self.period.samples.iter().all(|&p| p == first)).then_some(first as u32)
    }

    /// The probe in a line.
    pub fn summary(&self) -> String {
        let period = match self.batch() {
            Some(b) => format!("one fault in {b}"),
            None => format!("no one period (samples {:?})", self.period.samples),
        };
        format!(
            "LRU-add probe: the batch's fault pays {:.0} ns beyond the median fault ({:.0} ns), \
             {period} (medians of {})",
            self.drain.median,
            self.fault.median,
            self.drain.samples.len()
        )
    }
}

/// `repeat` samples of `loops` loops each, counted by `progress` from `steps.0` of `steps.1`.
pub(super) fn run(
    repeat: usize,
    loops: u64,
    (done, total): (usize, usize),
    progress: Progress<'_>,
) -> Result<LruAddProbe, HostError> {
    let allowed = crate::sys::allowed_cpus();
    let (mut fault, mut drain, mut period) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cpus, mut pinned, mut faults) = (Vec::new(), true, 0);
    let what = "LRU-add probe";
    for k in 0..repeat {
        let cpu = system::cpus_by_idle(&allowed)[0];
        let w = probes::lru_add_drain(Some(cpu), loops)?;
        pinned &= w[1] == 1;
        fault.push(w[2] as f64);
        drain.push(w[3] as f64);
        period.push(w[4] as f64);
        faults = w[5];
        cpus.push(cpu);
        progress(what, done + k + 1, total);
    }
    let how = |what: &str| {
        format!(
            "{what}; {loops} rounds of a write fault on each page of a {} KiB VMA of 4 KiB \
             pages (each fault timed alone, CLOCK_MONOTONIC) and its MADV_DONTNEED, in a \
             freshly forked process pinned to the least-loaded CPU, one process per sample, \
             {repeat} samples",
            probes::LRU_ADD_VMA_PAGES * 4
        )
    };
    Ok(LruAddProbe {
        cpus,
        faults,
        fault: Measured::new(fault, "ns", how("the median fault")),
        drain: Measured::new(
            drain,
            "ns",
            how("the median of the slowest faults/period faults less the median fault"),
        ),
        period: Measured::new(
            period,
            "faults",
            how(
                "the commonest gap between two faults slower than halfway from the median to \
                 the 99th percentile",
            ),
        ),
        pinned,
    })
}

#[cfg(test)]
mod test {
    use super::*;

    fn probe(periods: &[f64]) -> LruAddProbe {
        let m = |v: Vec<f64>| Measured::new(v, "x", "a test".into());
        LruAddProbe {
            cpus: vec![0; periods.len()],
            faults: 256,
            fault: m(vec![1000.0; periods.len()]),
            drain: m(vec![3000.0; periods.len()]),
            period: m(periods.to_vec()),
            pinned: true,
        }
    }

    #[test]
    fn the_batch_is_the_period_every_sample_found() {
        assert_eq!(probe(&[31.0, 31.0, 31.0]).batch(), Some(31));
        assert_eq!(probe(&[31.0, 30.0, 31.0]).batch(), None);
        assert_eq!(probe(&[0.0, 0.0]).batch(), None);
        assert_eq!(probe(&[]).batch(), None);
        assert!(probe(&[31.0]).summary().contains("one fault in 31"));
        assert!(probe(&[31.0, 15.0]).summary().contains("no one period"));
    }

    /// One sample on this host's kernel is consistent with itself: every fault timed, the
    /// median positive, and either a period (2 to the longest looked for, found from at least
    /// three slow faults, with a drain) or none (and then no drain). Whether a period is found
    /// is the host kernel's, so it is not asserted.
    #[test]
    fn a_sample_on_this_host_is_consistent() {
        let w = probes::lru_add_drain(None, 8).unwrap();
        assert_eq!(w[0], 0);
        assert_eq!(w[5], 8 * probes::LRU_ADD_VMA_PAGES);
        assert!(w[2] > 0, "a fault takes time: {w:?}");
        assert!(w[6] <= w[5], "{w:?}");
        if w[4] == 0 {
            assert_eq!(w[3], 0, "no period, no drain: {w:?}");
        } else {
            assert!(
                (2..probes::LRU_ADD_MAX_PERIOD as u64).contains(&w[4]),
                "{w:?}"
            );
            assert!(
                w[6] >= 3,
                "a period recurs between three slow faults at least: {w:?}"
            );
        }
    }
}
