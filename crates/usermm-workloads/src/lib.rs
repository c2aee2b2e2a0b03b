//! Workloads that drive the usermm engine and the host kernel, and the differential-testing
//! vocabulary shared by both.

pub mod bigfree;
pub mod diff_cases;
pub mod diff_runner;
pub mod divergences;
pub mod engine_backend;
pub mod host;
pub mod munmap_test;
pub mod ops;
pub mod percpu_test;
pub mod usemem;
