//! Workloads that drive the usermm engine and the host kernel, and the differential-testing
//! vocabulary shared by both.
pub mod host;
pub mod ops;
pub mod usemem;
