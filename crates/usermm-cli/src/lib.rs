//! The `usermm` command, as a library so that its pieces are documented and testable:
//! [`args`] (the command line and the engine flags), [`cmd`] (one module per subcommand) and
//! [`report`] (tables, SVG plots, `report.md` + `results.json`, progress bars).
//!
//! `main.rs` only parses, runs and maps errors to exit codes: 0 success, 1 a failure while
//! running, 2 a mistake in the arguments ([`args::UsageError`] or clap's own).

#![deny(unsafe_code)]

pub mod args;
pub mod cmd;
pub mod report;
