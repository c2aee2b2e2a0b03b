//! `usermm usemem`: vm-scalability's `usemem`, same options and same output lines, run against
//! the engine (`--host`: against the real kernel). Seed 002 runs it as
//! `usemem -n 72 --readonly -j 0x200000 100G`.
//!
//! Sizes are `memparse`d like usemem's (`0x`/octal accepted, binary `k/m/g/t` suffixes). Unlike
//! usemem, a missing SIZE is a usage error (exit 2), and `-O` also has a long form.

use anyhow::anyhow;
use clap::Args;
use serde::Serialize;

use crate::args::{parse_size_arg, EngineArgs, GlobalArgs};

#[derive(Debug, Clone, Args, Serialize)]
pub struct UsememArgs {
    /// Bytes each worker maps and walks (per process, or per thread with -t).
    #[arg(value_name = "SIZE", value_parser = parse_size_arg)]
    pub size: u64,
    /// Worker processes (each its own mm).
    #[arg(short = 'n', long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub nproc: u32,
    /// Threads per process, each with its own mapping in the process's mm.
    #[arg(short = 't', long = "thread", value_name = "M",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub thread: Option<u32>,
    /// Map read-only and only read: on anonymous memory, a pure zero-page fault workload.
    #[arg(short = 'o', long)]
    pub readonly: bool,
    /// Bytes between two accesses (0 or less than 8 means 8: every word).
    #[arg(short = 'j', long, value_name = "SIZE", default_value = "0", value_parser = parse_size_arg)]
    pub step: u64,
    /// Walk the mapping this many times (writes verify the previous walk's data).
    #[arg(short = 'r', long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// Split the work into mappings of this size (more than 32 are left to exit to free).
    #[arg(short = 'u', long, value_name = "SIZE", value_parser = parse_size_arg)]
    pub unit: Option<u64>,
    /// MAP_ANONYMOUS instead of a private mapping of /dev/zero.
    #[arg(short = 'O', long)]
    pub anonymous: bool,
    /// Allocate once before starting the workers; they all walk that one mapping.
    #[arg(short = 'P', long)]
    pub prealloc: bool,
    /// MAP_POPULATE.
    #[arg(short = 'F', long)]
    pub prefault: bool,
    /// mlock the mapping after the walk.
    #[arg(short = 'M', long)]
    pub mlock: bool,
    /// Sleep this many seconds before freeing (negative: forever).
    #[arg(short = 's', long, value_name = "SEC", allow_negative_numbers = true)]
    pub sleep: Option<i64>,
    /// Start the walk together, after every worker has allocated (needs unit == size).
    #[arg(short = 'y', long)]
    pub sync_rw: bool,
    /// Wait for every worker before freeing.
    #[arg(short = 'x', long)]
    pub sync_free: bool,
    /// madvise(MADV_HUGEPAGE) after mmap.
    #[arg(long)]
    pub madv_thp: bool,
    /// Keep the mapping read-write even with --readonly.
    #[arg(short = 'w', long)]
    pub open_rw: bool,
    /// Random word order instead of a sequential walk.
    #[arg(short = 'R', long)]
    pub random: bool,
    /// Seed of the random walk (default: time ^ tid).
    #[arg(long, value_name = "S")]
    pub random_seed: Option<u64>,
    /// Run vanilla and patched side by side and print the ratio.
    #[arg(long)]
    pub ab: bool,
    /// Run against the host kernel instead of the engine.
    #[arg(long)]
    pub host: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

pub fn run(args: &UsememArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let _ = (args, g);
    Err(anyhow!("usemem is not built yet"))
}
