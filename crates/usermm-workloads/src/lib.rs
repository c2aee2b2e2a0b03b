//! Workloads that drive the usermm engine: the seeds' experiments.
//!
//! - [`usemem`]: vm-scalability's `usemem`, every option and the same lines, on the engine or
//!   on the host kernel (seed 002 runs it as `usemem -n 72 --readonly -j 0x200000 100G`).
//! - [`bigfree`]: seeds 000/001, the free of one big touched mapping, inline and parallel.
//! - [`munmap_test`]: seed 003, munmap's exclusive mmap-lock hold while other threads fault.
//! - [`percpu_test`]: seed 004, `Percpu:` over the seed's memory-cgroup script.
//! - [`bench`](mod@bench): `usermm bench`, the engine's hot paths beside the host kernel's.
//! - [`calibrate`]: the `this-host` cost profile from `usermm calibrate`'s measurements.
//! - [`infer`]: `usermm infer`, the era factors estimated from named training rows.
//! - [`will_it_scale`]: will-it-scale's memory tests (page_fault1, mmap1, brk1, malloc1, ...)
//!   and its output, written once over [`task::Task`], on the engine and the host kernel.
//! - [`task`]: one task of an address-space workload as one trait, the engine's and the
//!   host's, and the way N of them start as processes or threads, placed and counted.
//! - [`validation`]: the seed thread's other runs predicted with the era factors, no refit.
//! - [`seeds`]: every figure the seeds published, as data, in one place.
//! - [`stats`]: the one median and spread every summary uses.
//!
//! Each workload takes options and a [`usermm::MachineConfig`], boots its own machines and
//! returns one serde record. Only usemem has lines of its own to print, and it writes them
//! through the [`usemem::Io`] its caller gives it. Every workload runs its machine's code
//! through `Machine::run` and reads time from `usermm::sync::clock`, so that with
//! `time.mode=virtual` its figures are modelled in virtual time ([`TimeLabel`] says which). The host kernel's side of a comparison (its
//! facts, its timed measurements) is `usermm-host`; the differential tests are `usermm-diff`.
//!
//! `unsafe` is denied but in one module, `task::child`: the call that forks a child of this
//! multi-threaded process to run a task body on the host kernel (its contract, that the child
//! allocates nothing, is argued there).

#![warn(clippy::allow_attributes)]
#![warn(unreachable_pub)]
#![deny(unsafe_code)]

pub mod bench;
pub mod bigfree;
pub mod calibrate;
pub mod host_check;
pub mod infer;
pub mod munmap_test;
pub mod parallel;
pub mod percpu_test;
pub mod seeds;
pub mod stats;
pub mod task;
pub mod usemem;
pub mod validation;
pub mod will_it_scale;

use serde::Serialize;
use usermm::MachineConfig;

/// How a record's times were obtained, printed beside them: `measured (this host)` or
/// `modelled (profile NAME)`, and the profile itself (every figure with its source) when
/// modelled.
#[derive(Debug, Clone, Serialize)]
pub struct TimeLabel {
    pub time: String,
    pub profile: Option<usermm::vtime::ProfileSpec>,
}

impl TimeLabel {
    /// The label of a machine built from `cfg` (its profile resolved as the machine does;
    /// an unusable profile labels as the config names it).
    pub fn of(cfg: &MachineConfig) -> Self {
        match cfg.resolve_profile() {
            Ok(Some(p)) => TimeLabel {
                time: format!("modelled (profile {})", p.name()),
                profile: Some(p.spec().clone()),
            },
            _ => TimeLabel {
                time: cfg.time.label(),
                profile: None,
            },
        }
    }

    pub fn is_modelled(&self) -> bool {
        self.profile.is_some()
    }
}
