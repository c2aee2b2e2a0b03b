//! The `usermm` command, as a library so that its pieces are documented and testable.
//!
//! The modules form layers; each uses only those below it:
//!
//! ```text
//!   cli       the command line: subcommands, parsing, dispatch
//!   cmd/*     one module per subcommand: its flags, its run, its text rendering
//!   sweep     grids of command lines: expansion, child runs, JSON-lines output, merge, jobs
//!   args      shared flags and value parsers (the engine flags, sizes, UsageError)
//!   report    tables, SVG plots, report.md + results.json, number formats, progress bars
//! ```
//!
//! `main.rs` only parses, runs and maps errors to exit codes: 0 success, 1 a failure while
//! running, 2 a mistake in the arguments ([`args::UsageError`] or clap's own).

#![warn(clippy::allow_attributes)]
#![warn(unreachable_pub)]
#![deny(unsafe_code)]

pub mod args;
pub mod cli;
pub mod cmd;
pub mod report;
pub mod sweep;
