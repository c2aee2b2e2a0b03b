//! `usermm munmap-test`: seed 003. munmap a big touched mapping while other threads fault on
//! other VMAs; measure the exclusive mmap-lock hold and the faulters' latency.

use anyhow::anyhow;
use clap::Args;
use serde::Serialize;

use crate::args::{parse_nonzero_size_arg, EngineArgs, GlobalArgs};

#[derive(Debug, Clone, Args, Serialize)]
pub struct MunmapTestArgs {
    /// Bytes of the mapping to unmap, e.g. 80G.
    #[arg(value_name = "SIZE", value_parser = parse_nonzero_size_arg)]
    pub size: u64,
    /// Threads faulting on other VMAs during the munmap.
    #[arg(long, value_name = "N")]
    pub faulters: Option<u32>,
    /// Runs per configuration.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    #[command(flatten)]
    pub engine: EngineArgs,
}

pub fn run(args: &MunmapTestArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let _ = (args, g);
    Err(anyhow!("munmap-test is not built yet"))
}
