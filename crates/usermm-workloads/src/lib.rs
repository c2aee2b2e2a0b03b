//! Workloads that drive the usermm engine and the host kernel, and the differential-testing
//! vocabulary shared by both.

pub mod host;
pub mod ops;
pub mod usemem;
pub mod percpu_test;
pub mod bigfree;
pub mod engine_backend;
pub mod munmap_test;
pub mod divergences;
pub mod diff_runner;
pub mod diff_cases;
