//! The flags and values every command shares, below the commands: [`GlobalArgs`], the engine
//! flags ([`EngineArgs`] and the one step that turns them into a `MachineConfig`), the value
//! parsers (sizes, `--mem`), and [`UsageError`], the one kind of argument error.
//!
//! Sizes are parsed like the kernel's `memparse` ([`usermm::config::parse_size`]): `4G`,
//! `512M`, `0x200000`, `4096`. Every engine command flattens [`EngineArgs`], so `--mem`,
//! `--cpus`, `--nodes`, `--backing`, `--thp`, `--preset` and `--set` mean the same thing
//! everywhere.
//!
//! Errors in the arguments are [`UsageError`]s: `main` prints them on one line and exits with
//! status 2, like clap's own usage errors. Anything that goes wrong while running exits with 1.
//!
//! This module uses no command module; the command line that names the commands is
//! [`crate::cli`], above both.

mod engine;
mod usage;
mod value;

use clap::Args;
use serde::Serialize;

pub use engine::{BackingArg, EngineArgs, MachineArgs, ThpArg, TimeArg, TimeArgs};
pub use usage::{
    check_host_memory, check_machine_memory, check_profile_memory, host_memory_budget,
    is_usage_error, usage, visible, UsageError, MEM_AVAILABLE_VAR,
};
pub use value::{parse_mem_arg, parse_nonzero_size_arg, parse_size_arg};

/// Flags every subcommand accepts, before or after its name.
#[derive(Debug, Clone, Default, Args, Serialize)]
pub struct GlobalArgs {
    /// Print the run's record as JSON on stdout instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
}
