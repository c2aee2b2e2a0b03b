//! The TLB model: which CPUs may hold an mm's translations, how an access is kept apart from a
//! flush, and what a flush counts and costs.
//!
//! Mirrors `arch/x86/mm/tlb.c` (`flush_tlb_mm_range`, `tlb_single_page_flush_ceiling`, the
//! `nr_tlb_local_flush_one`/`_all` and `nr_tlb_remote_flush` events of `/proc/vmstat`) and the
//! `mm_cpumask` of `include/linux/mm_types.h`. The engine has no hardware TLB: a translation
//! is "cached" for exactly one access, and a flush is modelled by what it guarantees.
//!
//! # Invariant
//! No access can reach a frame after `flush -> free` (invariant I1 of the gather): accesses by
//! a task run inside its CPU's *TLB gate*, and a flush of the mm waits out the gate of every
//! CPU in `mm_cpumask` — the acknowledgement of a shootdown IPI. After the flush, an access
//! re-walks the page tables and sees the cleared entry, so racing faults see `SEGV_MAPERR`,
//! never a stale page.
//!
//! # Two clocks
//! How a gate is held and what a flush costs is the seam's decision ([`crate::sync::TlbGate`],
//! [`crate::sync::tlb_flush_cost`]): on the host the gates are read/write locks and a
//! configured `tlb.flush_cost_ns` is spun; in a virtual run (docs/two-clocks.md) no gate is taken
//! (an access is an atomic section, so atomic with respect to every flush) and a flush charges
//! the profile's `tlb_flush_local` plus `tlb_flush_remote_per_cpu` for each other CPU in
//! `mm_cpumask` (the IPIs the sender waits for), and the context occupying each of those CPUs
//! pays `flush_tlb_func`, the interrupt's receiving side (`flush_tlb_func` on the call-function
//! IPI); a handler that outlasts the sender's share keeps the sender waiting for the rest
//! (`vtime::sched::State::ipi`). The counters below are the same on both.
//!
//! # Locks
//! The TLB gates are taken alone (lock order in `lib.rs`): a flush never waits on them while
//! holding a PTL... except the gather's forced flush under a PTE lock, which is safe because
//! accesses never take a PTL.
//!
//! # Differences from Linux
//! No lazy TLB mode, no ASIDs/PCIDs, no batched flushing (`arch_tlbbatch`): every flush waits
//! for every CPU that ever ran the mm (`mm_cpumask` is never trimmed), so a CPU that has since
//! switched to another mm's task is interrupted too, and its occupant pays the handler, where
//! v4.x cleared the CPU's bit at `switch_mm`. The sender does not wait out an interrupts-off
//! section of the receiver (`free_pcppages_bulk` under `zone->lock` with interrupts off): its
//! share is the profile's fixed `tlb_flush_remote_per_cpu`.

use std::sync::atomic::Ordering::Relaxed;

use super::Mm;
use crate::cpu::CpuId;
use crate::stats::VmItem;
use crate::sync::{tlb_flush_cost, tlb_flush_ipi};

/// `tlb_single_page_flush_ceiling`: a flush of at most this many pages invalidates them one
/// by one (`nr_tlb_local_flush_one` counts each page); a larger or full flush invalidates the
/// whole TLB (`nr_tlb_local_flush_all`). x86's default, a debugfs knob there.
#[doc(alias = "tlb_single_page_flush_ceiling")]
pub(super) const TLB_SINGLE_PAGE_FLUSH_CEILING: u64 = 33;

impl Mm {
    /// Note that `cpu` runs this mm (`cpumask_set_cpu(cpu, mm_cpumask(mm))` at switch_mm).
    #[inline]
    fn mark_cpu(&self, cpu: CpuId) {
        let (w, b) = (cpu.index() / 64, 1u64 << (cpu.index() % 64));
        if self.cpumask[w].load(Relaxed) & b == 0 {
            self.cpumask[w].fetch_or(b, Relaxed);
        }
    }

    fn cpus_in_mask(&self) -> impl Iterator<Item = CpuId> + '_ {
        self.cpumask.iter().enumerate().flat_map(|(w, word)| {
            let bits = word.load(Relaxed);
            (0..64)
                .filter(move |b| bits & (1 << b) != 0)
                .map(move |b| CpuId((w * 64 + b) as u16))
        })
    }

    /// Run `f` as one access on `cpu`, inside its TLB gate ([`crate::sync::TlbGate::enter`]:
    /// the gate's read side on the host, an atomic section — checked in debug builds — in a
    /// virtual run, where no flush can come between the walk and the access either).
    #[inline]
    pub(crate) fn with_tlb_gate<R>(&self, cpu: CpuId, f: impl FnOnce() -> R) -> R {
        self.mark_cpu(cpu);
        // One call of `f` either way, so that the walk it holds stays inlined.
        let _gate = self.tlb_gate[cpu].enter();
        f()
    }

    /// `flush_tlb_mm_range`: count the flush and wait for every CPU that may hold a
    /// translation of this mm (the shootdown). `pages` is the size of the range, or `None`
    /// for a full flush.
    ///
    /// The wait is each gate's [`crate::sync::TlbGate::wait_out_accesses`]; the cost beyond it
    /// is [`tlb_flush_cost`] (a spin of `tlb.flush_cost_ns` on the host; the profile's
    /// `tlb_flush_local` and `tlb_flush_remote_per_cpu` in a virtual run).
    #[doc(alias = "flush_tlb_mm_range")]
    pub(crate) fn flush_tlb(&self, cpu: CpuId, pages: Option<u64>) {
        let stat = self.machine.vmstat();
        self.tlb_flushes.fetch_add(1, Relaxed);
        match pages {
            Some(n) if n <= TLB_SINGLE_PAGE_FLUSH_CEILING => {
                stat.add(cpu, VmItem::NrTlbLocalFlushOne, n as i64)
            }
            _ => stat.inc(cpu, VmItem::NrTlbLocalFlushAll),
        }
        let mut remote = 0u64;
        for c in self.cpus_in_mask() {
            if c != cpu {
                remote += 1;
                tlb_flush_ipi(c.index());
            }
            self.tlb_gate[c].wait_out_accesses();
        }
        if remote > 0 {
            stat.inc(cpu, VmItem::NrTlbRemoteFlush);
        }
        tlb_flush_cost(remote, self.machine.tlb_flush_cost_ns());
    }
}
