//! # usermm-diff — the engine held to the host kernel, op by op
//!
//! Differential testing (`docs/testing.md`): one sequence of address-space operations runs on the
//! host kernel (`usermm_host::HostBackend`, a forked child) and on the engine
//! ([`engine_backend::EngineBackend`], one `Mm` on a small machine), and every answer is
//! compared — return values and errnos, the data read back, page accessibility, the
//! `/proc/self/maps` lines of the test arena, and fault and RSS counters.
//!
//! - [`ops`]: the vocabulary both backends speak (re-exported from `usermm_host`, where the
//!   host's side of it lives).
//! - [`compare`]: what "agree" means, and driving two backends through one sequence.
//! - [`runner`]: what a test suite needs on top — maps after every change, a closing check,
//!   replays that tell a disturbed host from an engine bug, minimisation.
//! - [`divergences`]: the one reviewed list of disagreements that are known and explained.
//!
//! The tests are in `tests/differential.rs`; their fixed cases (oracle rows, LTP-style cases,
//! merge and split scenarios) are data in `tests/cases/`. The command line never runs this
//! crate: it is the engine's conscience, run by `cargo test --workspace`.
//!
//! Nothing here is `unsafe`: everything that touches the host kernel is in `usermm-host`.

#![warn(clippy::allow_attributes)]
#![warn(unreachable_pub)]
#![deny(unsafe_code)]

pub mod compare;
pub mod divergences;
pub mod engine_backend;
pub mod runner;

pub use usermm_host::ops;
