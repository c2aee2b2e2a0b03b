//! The TLB gate: how an access and a TLB shootdown are kept apart, decided once for both
//! clocks.
//!
//! No kernel file: on hardware an access and its translation are one instruction, and a
//! shootdown is an IPI the sender waits on. Here an access is a page-table walk followed by a
//! data copy, and the mm's TLB model (`mm/tlb.rs`) needs the flush to wait out every access
//! that may have used the old translation.
//!
//! - **Wall mode**: a per-CPU [`RwSem`] (class `tlb_gate`). An access holds it for reading
//!   ([`TlbGate::enter`]), or a short run of accesses does (`Task::access_words`: entering and
//!   leaving are locked instructions that wait for the store before them, so one hold per
//!   random word would serialise its cache misses); a flush takes and releases it for writing
//!   on every CPU of the mm's cpumask ([`TlbGate::wait_out_accesses`]) — the acknowledgement
//!   of the IPI. A configured `tlb.flush_cost_ns` is then spun on the host
//!   ([`tlb_flush_cost`]).
//! - **Virtual time**: no gate is taken. One context runs at a time and an access passes no
//!   synchronisation point between its walk and its copy (an atomic section, checked in debug
//!   builds), so it is atomic with respect to every flush. A flush charges the profile's
//!   `tlb_flush_local` once and `tlb_flush_remote_per_cpu` per other CPU (the IPIs the sender
//!   waits for) instead of the host spin, and each other CPU's occupant pays
//!   `flush_tlb_func`, the interrupt it takes ([`tlb_flush_ipi`]).
//!
//! # Invariant
//! An access that began before [`TlbGate::wait_out_accesses`] returned has ended (wall mode),
//! or cannot exist (virtual time: the flushing context is the only one running).
//!
//! # Locks
//! A gate is taken alone (lock order in `lib.rs`), except by a flush forced under a PTE lock,
//! which is safe because accesses never take a PTL.

use super::class::TLB_GATE;
use super::rwsem::RwSemWallReadGuard;
use super::vhook;
use super::{charge, Cost, RwSem};

/// One CPU's TLB gate (see the module doc).
#[derive(Debug)]
pub struct TlbGate {
    lock: RwSem<()>,
}

/// An access in progress on one CPU: the gate held for reading (wall mode) or an atomic
/// section (virtual time).
#[must_use = "the access is over when the guard is dropped"]
pub struct TlbGateGuard<'a> {
    _read: Option<RwSemWallReadGuard<'a, ()>>,
    _section: Option<crate::vtime::hooks::AtomicSection>,
}

impl std::fmt::Debug for TlbGateGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlbGateGuard")
            .field("host", &self._read.is_some())
            .finish()
    }
}

impl TlbGate {
    pub fn new() -> Self {
        Self {
            lock: RwSem::new(&TLB_GATE, ()),
        }
    }

    /// Start an access on this gate's CPU. One test of the clock: the wall path takes the
    /// host lock with no hook of its own (`RwSem::read_wall`).
    #[inline]
    pub fn enter(&self) -> TlbGateGuard<'_> {
        if vhook::active() {
            return TlbGateGuard {
                _read: None,
                _section: Some(vhook::atomic_section()),
            };
        }
        TlbGateGuard {
            _read: Some(self.lock.read_wall(vhook::Wall)),
            _section: None,
        }
    }

    /// Wait until no access that started before this call is still running on this gate's
    /// CPU (wall mode: take the write side and release it). Nothing to wait for in virtual
    /// time, where an access is atomic with respect to a flush.
    #[inline]
    pub fn wait_out_accesses(&self) {
        if !vhook::active() {
            drop(self.lock.write());
        }
    }
}

impl Default for TlbGate {
    fn default() -> Self {
        Self::new()
    }
}

/// What a flush costs the flushing CPU beyond its waits: in virtual time the profile's
/// `tlb_flush_local` plus `tlb_flush_remote_per_cpu` for each of `remote_cpus`; on the host a
/// spin of `host_spin_ns` (`tlb.flush_cost_ns`, 0 for none).
#[inline]
pub fn tlb_flush_cost(remote_cpus: u64, host_spin_ns: u64) {
    if vhook::active() {
        charge(Cost::TlbFlushLocal, 1);
        charge(Cost::TlbFlushRemotePerCpu, remote_cpus);
    } else if host_spin_ns > 0 {
        tlb_flush_busy_wait(host_spin_ns);
    }
}

/// The receiving side of a shootdown on CPU `cpu`: in virtual time the context occupying it
/// pays the profile's `flush_tlb_func` (a synchronisation point: the interrupt lands at the
/// sender's clock, when every other context's clock is at or past it); on the host nothing
/// beyond [`TlbGate::wait_out_accesses`], the acknowledgement a wall-clock flush waits for.
#[inline]
#[doc(alias = "flush_tlb_func")]
pub fn tlb_flush_ipi(cpu: usize) {
    if vhook::active() {
        vhook::ipi(cpu, Cost::FlushTlbFunc);
    }
}

/// On the host: spin for `ns` (what the flush's IPIs would keep this CPU busy for).
#[cold]
fn tlb_flush_busy_wait(ns: u64) {
    let t = super::clock::now();
    while t.elapsed_ns() < ns {
        std::hint::spin_loop();
    }
}
