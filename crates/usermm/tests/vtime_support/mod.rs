//! Shared by the `vtime_*` tests: a test profile with round figures, and typed helpers over
//! the hooks (the seam's primitives will wrap them the same way).

#![allow(dead_code)]

use std::sync::Arc;

use usermm::vtime::{
    hooks, Acquired, Figure, LineClass, LockClass, LockFigure, Mode, Profile, ProfileSpec, Runtime,
    WaitKind,
};

/// Test figures, in ns: every one a round number so that expected times are exact.
pub const U: u64 = 10; // uncontended acquire of the test lock classes
pub const L: u64 = 2; // data lines of the test lock classes
pub const T_SMT: u64 = 5;
pub const T_SOCK: u64 = 40;
pub const T_REMOTE: u64 = 100;
pub const W: u64 = 2000; // wake-up latency
pub const A: u64 = 10; // atomic RMW on a local line
pub const SMT_FACTOR: f64 = 2.0; // integral, so that every modelled time is whole ns

/// Exclusive hand-over within a socket: `u + T·(1 + L)`.
pub const H_SOCK: u64 = U + T_SOCK * (1 + L);
pub const H_REMOTE: u64 = U + T_REMOTE * (1 + L);

pub static SPIN: LockClass = LockClass::new("test.spin", WaitKind::Spin);
pub static MUTEX: LockClass = LockClass::new("test.mutex", WaitKind::Sleep);
pub static RWSEM: LockClass = LockClass::new("test.rwsem", WaitKind::Sleep);
pub static LINE: LineClass = LineClass::new("test.line");
pub static LINE2: LineClass = LineClass::new("test.line2");

fn ns(v: u64, source: &str) -> Figure {
    Figure {
        ns: Some(v as f64),
        cycles: None,
        bytes_per_ns: None,
        // A figure of its own stands on a formula that is its number.
        formula: Some(v.to_string()),
        source: source.into(),
    }
}

/// The test machine: 2 sockets × 8 cores × 2 threads at 1 GHz, figures above. With 32 CPUs,
/// CPUs 0-7 are socket 0's cores, 8-15 their SMT siblings (CPU n+8 shares CPU n's core),
/// 16-31 socket 1 likewise.
pub fn test_spec() -> ProfileSpec {
    let mut s = Profile::builtin("haswell-ep-2s").unwrap().spec().clone();
    s.name = "test-2s".into();
    s.description = "round figures for exact tests".into();
    s.topology.sockets = 2;
    s.topology.nodes = 2;
    s.topology.cores_per_socket = 8;
    s.topology.threads_per_core = 2;
    s.topology.ghz = 1.0;
    s.topology.memory_gib = None;
    s.transfer.smt_sibling = ns(T_SMT, "test");
    s.transfer.same_socket = ns(T_SOCK, "test");
    s.transfer.other_socket = ns(T_REMOTE, "test");
    s.smt.sibling_factor = SMT_FACTOR;
    // Round figures stand on their own: no inputs, each formula its number, no era factors
    // over them.
    s.era = None;
    s.smt.formula = Some(SMT_FACTOR.to_string());
    s.inputs.clear();
    // Exact formulas below: no line model and no jitter unless a test adds them.
    s.memory = None;
    s.jitter = None;
    for l in s.locks.values_mut() {
        let v = l.acquire_ns.or(l.acquire_cycles).unwrap_or(0.0);
        l.formula = Some(v.to_string());
    }
    s.wakeup = ns(W, "test");
    s.atomic_rmw = ns(A, "test");
    for name in ["test.spin", "test.mutex", "test.rwsem"] {
        s.locks.insert(
            name.into(),
            LockFigure {
                acquire_ns: Some(U as f64),
                acquire_cycles: None,
                data_lines: L as u32,
                data_lines_source: String::new(),
                formula: Some(U.to_string()),
                source: "test".into(),
            },
        );
    }
    for (i, f) in s.costs.values_mut().enumerate() {
        *f = ns(i as u64 + 1, "test");
    }
    s
}

pub fn test_profile() -> Arc<Profile> {
    Arc::new(Profile::from_spec(test_spec(), "test").unwrap())
}

/// A runtime on the test machine with all 32 CPUs and 2 nodes.
pub fn rt() -> Runtime {
    Runtime::new(test_profile(), 32, 2).unwrap()
}

pub fn rt_with(f: impl FnOnce(&mut ProfileSpec)) -> Runtime {
    let mut s = test_spec();
    f(&mut s);
    Runtime::new(Arc::new(Profile::from_spec(s, "test").unwrap()), 32, 2).unwrap()
}

pub fn lock(id: usize, class: &'static LockClass) -> Acquired {
    hooks::lock_acquire(id, class, Mode::Exclusive)
}

pub fn unlock(id: usize, class: &'static LockClass) {
    hooks::lock_release(id, class, Mode::Exclusive)
}

pub fn read_lock(id: usize) -> Acquired {
    hooks::lock_acquire(id, &RWSEM, Mode::Shared)
}

pub fn read_unlock(id: usize) {
    hooks::lock_release(id, &RWSEM, Mode::Shared)
}
