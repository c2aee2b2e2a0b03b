//! # usermm-host — the real kernel beside the engine
//!
//! Everything that asks the host kernel something lives here, once:
//!
//! - [`facts`]: what a report says about the host — `uname -r`, `/proc/meminfo`, the THP
//!   mode, `vm.max_map_count`, the load average, this process's context switches. There is one
//!   `/proc` "`Key:  N kB`" parser ([`procfs::field_kb`]), one `uname`, one `getrusage`.
//! - [`quiet`]: whether the host was quiet around a measurement (load average, steal time,
//!   the measuring threads' CPU share), by one stated rule.
//! - [`calibrate`]: `usermm calibrate`'s measurements of this host's kernel (munmap, the
//!   COW-child/full teardown pair, `MADV_DONTNEED`, faults, memset, a system call, a line
//!   transfer, a locked RMW, DRAM latency) and what the system reports, as a
//!   [`calibrate::HostCalibration`].
//! - [`measure`]: timed workloads on the host (touch-and-munmap, a read-only walk, fork and
//!   exit), each in a freshly forked single-threaded child, and the harness that runs
//!   `usermm_workloads`'s task bodies in such a child, for the engine-vs-host comparisons.
//! - [`usemem`]: the host kernel as vm-scalability's usemem uses it (files, mappings, word
//!   accesses, SysV segments, forked processes, pipe barriers, SIGUSR1), for
//!   `usermm usemem --host`.
//! - [`files`]: every file usermm writes (whole files by temp file and `rename`, appended
//!   outputs and lock files opened `O_NOFOLLOW` and `flock`ed, usemem's pid file) and every
//!   earlier output it reads back, never through a link and never into anything but a
//!   regular file; and [`files::cleanup`], which removes what a run created when SIGINT or
//!   SIGTERM ends it.
//! - [`HostBackend`] and the op vocabulary [`ops`]: the host kernel as an address space that
//!   executes [`ops::Op`]s in a forked child, one side of the differential tests (the
//!   engine's side and the comparison live in `usermm-diff`).
//! - [`task`]: the host kernel as one task of an address-space workload (will-it-scale's
//!   tests) sees it — mappings, the break, glibc's malloc, byte and word accesses — and
//!   the counters, CPU binding and core list that start such tasks as processes or threads.
//!
//! # Where the `unsafe` is
//! Talking to the kernel without libstd's wrappers needs `unsafe`; it is fenced into eight
//! modules and denied everywhere else in the crate:
//! - `sys` — every raw system call, each wrapper with its `// SAFETY:` argument, among them
//!   the one family of memory-management wrappers (`mmap`, `munmap`, `mprotect`,
//!   `madvise`, `mlock`, `munlock`) that both kinds of forked child use;
//! - `fork` — forking a child from a multi-threaded process (the contract: the child runs
//!   only async-signal-safe code until it exits);
//! - [`measure`] — forking the measurement children, and their volatile loads and stores into
//!   their own fresh mappings;
//! - `calibrate::probes` — the calibration children: their volatile loads and stores and
//!   atomics in mappings they made, and the grandchildren of the COW pair and the ping-pong;
//! - [`backend`] — forking the request server, and its stores into the test arena;
//! - [`check`] — the host check's stores into its own mappings, in this process's
//!   threads;
//! - [`task`] — a task's system calls, its loads and stores into the mappings it made, and
//!   the counters shared across `fork`;
//! - [`usemem`] — usemem's system calls, its loads and stores into the mappings it made, and
//!   forks from a single-threaded process.
//!
//! # Invariants
//! - A child forked from a multi-threaded process (`fork`, `measure`, `backend`) never
//!   allocates, locks, prints or panics: it issues raw system calls on memory allocated before
//!   the fork, then `_exit`s. [`usemem`] forks only from a single-threaded process (checked),
//!   so its children are whole processes, as usemem's are.
//! - The parent never panics on a child's behaviour: a child that dies, hangs or talks nonsense
//!   is reported (as [`HostError`] or `OpResult::BackendFailure`) and is killed and reaped.
//! - Nothing here depends on the engine: the host is the reference the engine is held to.

#![warn(clippy::allow_attributes)]
#![warn(unreachable_pub)]
#![deny(unsafe_code)]

pub mod backend;
pub mod calibrate;
mod error;
pub mod facts;
pub mod files;
mod fork;
pub mod measure;
pub mod munmap_faults;
pub mod ops;
pub mod procfs;
pub mod quiet;
mod sys;
pub mod task;
pub mod usemem;

pub use backend::HostBackend;
pub use error::HostError;
pub use sys::{die_with_parent, process_cpu_ns, try_lock_exclusive};
