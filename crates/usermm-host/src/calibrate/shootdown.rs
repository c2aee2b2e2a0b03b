//! `usermm calibrate`'s TLB shootdown probe: what one flush of an mm costs the CPU that sends
//! it and the CPU it interrupts.
//!
//! When a thread of an mm zaps a range, `flush_tlb_mm_range` sends a call-function interrupt
//! to every other CPU running that mm and waits until each has run `flush_tlb_func`. Neither
//! side is in the single-thread figures: a lone process has no other CPU in its mask. The
//! probe (`probes::shootdown_pair`) pins a measuring process to one CPU and a partner to a
//! second, and times the same loop — write one private page, `MADV_DONTNEED` it, which zaps,
//! frees and flushes one page — twice:
//! - with the partner spinning **in another process** (its CPU runs another mm, so no
//!   interrupt reaches it), and
//! - with the partner spinning as a **`CLONE_VM` child** of the measuring process (the same
//!   mm, as a thread of it: every flush interrupts it).
//!
//! **The sender's figure** is the loop's thread CPU time per round with the partner in the
//! same mm less with it in another: the interrupt sent and the wait for its acknowledgement
//! (`flush_tlb_multi`). **The receiver's figure** is the partner's: it counts rounds of a
//! register loop, its undisturbed rate is taken over a window in which the measuring side only
//! reads the clock, and the wall time its rounds fall short of during the flushes, over the
//! flushes, is what each interrupt cost it (entry, `flush_tlb_func`, exit, and in a virtual machine
//! the exits to the hypervisor on both sides); a negative shortfall (noise) counts as 0.
//!
//! The CPUs are the two least loaded, as for the SMT probe; one sample a round, after every
//! other probe. The figures are this host's, a guest's IPIs included: a bare-metal kernel's
//! are not these, which is why the seed profiles keep their own assumption.

use serde::{Deserialize, Serialize};

use super::{paired_samples, probes, Measured, Progress};
use crate::error::HostError;

/// The probe's result, in the calibration record (`shootdown`, format 3).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ShootdownProbe {
    /// The measuring CPU and its partner, one pair per sample.
    pub pairs: Vec<(usize, usize)>,
    /// Flushes per sample.
    pub flushes: u64,
    /// The sender's extra per flush with the partner in the same mm, ns (may be negative in
    /// a sample: the difference of two timings).
    pub sender: Measured,
    /// The partner's loss per flush it received, ns.
    pub receiver: Measured,
    /// Whether every partner was pinned where asked.
    pub pinned: bool,
}

impl ShootdownProbe {
    /// The probe in a line.
    pub fn summary(&self) -> String {
        let (a, b) = self.pairs.first().copied().unwrap_or((0, 1));
        format!(
            "TLB shootdown probe: CPUs {a} and {b}: the sender pays {:.0} ns a flush beyond \
             a lone mm's, the interrupted CPU loses {:.0} ns (medians of {})",
            self.sender.median,
            self.receiver.median,
            self.sender.samples.len()
        )
    }
}

/// `repeat` samples of `flushes` flushes each, counted by `progress` from `steps.0` of
/// `steps.1`.
pub(super) fn run(
    repeat: usize,
    flushes: u64,
    steps: (usize, usize),
    progress: Progress<'_>,
) -> Result<ShootdownProbe, HostError> {
    let (mut sender, mut receiver) = (Vec::with_capacity(repeat), Vec::with_capacity(repeat));
    let what = "TLB shootdown probe";
    let (pairs, pinned) = paired_samples(repeat, what, steps, progress, |cpu, other| {
        let w = probes::shootdown_pair(Some(cpu), other, flushes)?;
        let n = w[5].max(1) as f64;
        sender.push((w[3] as f64 - w[2] as f64) / n);
        receiver.push(w[4] as f64 / n);
        Ok(w[1] == 1 && w[6] == 1)
    })?;
    let how = |side: &str| {
        format!(
            "{side}; {flushes} rounds of a 4 KiB write and its MADV_DONTNEED in a freshly \
             forked process pinned to the least-loaded CPU, its partner on the next least \
             loaded first in another process, then as a CLONE_VM child (the same mm), one \
             process per sample, {repeat} samples"
        )
    };
    Ok(ShootdownProbe {
        pairs,
        flushes,
        sender: Measured::new(
            sender,
            "ns",
            how("thread CPU time per round with the partner in the same mm less in another"),
        ),
        receiver: Measured::new(
            receiver,
            "ns",
            how(
                "the partner's wall time lost per flush: the flush window less its loop \
                 rounds at their rate in a window without flushes",
            ),
        ),
        pinned,
    })
}
