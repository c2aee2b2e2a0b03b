//! Workloads that drive the usermm engine: the seeds' experiments.
//!
//! - [`usemem`]: vm-scalability's `usemem`, every option and the same lines, on the engine or
//!   on the host kernel (seed 002 runs it as `usemem -n 72 --readonly -j 0x200000 100G`).
//! - [`bigfree`]: seeds 000/001, the free of one big touched mapping, inline and parallel.
//! - [`munmap_test`]: seed 003, munmap's exclusive mmap-lock hold while other threads fault.
//! - [`percpu_test`]: seed 004, `Percpu:` over the seed's memory-cgroup script.
//! - [`bench`](mod@bench): `usermm bench`, the engine's hot paths beside the host kernel's (issue 16).
//! - [`seeds`]: every figure the seeds published, as data, in one place.
//! - [`stats`]: the one median and spread every summary uses.
//!
//! Each workload takes options and a [`usermm::MachineConfig`], boots its own machines and
//! returns one serde record. Only usemem has lines of its own to print, and it writes them
//! through the [`usemem::Io`] its caller gives it. The host kernel's side of a comparison (its
//! facts, its timed measurements) is `usermm-host`; the differential tests are `usermm-diff`.

#![deny(unsafe_code)]

pub mod bench;
pub mod bigfree;
pub mod munmap_test;
pub mod percpu_test;
pub mod seeds;
pub mod stats;
pub mod usemem;
