//! `usermm bigfree`: seeds 000/001. Touch one big mapping (THP off), free it, and time the free
//! inline and with the free workqueue at each `max_active`.

use anyhow::anyhow;
use clap::{Args, ValueEnum};
use serde::Serialize;
use usermm::config::BatchSwitch;

use crate::args::{parse_nonzero_size_arg, EngineArgs, GlobalArgs};

/// `--batch-switch`: when `tlb_next_batch` moves to a new batch page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
pub enum BatchSwitchArg {
    /// v4.11: switch when a batch holds `max` entries.
    #[value(name = "2017")]
    #[serde(rename = "2017")]
    V2017,
    /// Switch at `max - 1`.
    #[value(name = "modern")]
    #[serde(rename = "modern")]
    Modern,
}

impl From<BatchSwitchArg> for BatchSwitch {
    fn from(b: BatchSwitchArg) -> Self {
        match b {
            BatchSwitchArg::V2017 => BatchSwitch::V2017,
            BatchSwitchArg::Modern => BatchSwitch::Modern,
        }
    }
}

#[derive(Debug, Clone, Args, Serialize)]
pub struct BigfreeArgs {
    /// Bytes of the mapping to touch and free, e.g. 320G.
    #[arg(value_name = "SIZE", value_parser = parse_nonzero_size_arg)]
    pub size: u64,
    /// max_active values of the free workqueue to measure (comma list).
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "1,2,4,8,16,32",
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_active: Vec<u32>,
    /// Gathered pages that make one free job (the kernel's 256K pages = 1 GiB).
    #[arg(long, value_name = "PAGES", value_parser = clap::value_parser!(u64).range(1..))]
    pub threshold: Option<u64>,
    /// Runs per configuration.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// Free by exiting the mm (exit_mmap) instead of munmap.
    #[arg(long)]
    pub exit: bool,
    /// Run against the host kernel instead of the engine.
    #[arg(long)]
    pub host: bool,
    /// When the gather switches to a new batch page.
    #[arg(long, value_name = "ERA")]
    pub batch_switch: Option<BatchSwitchArg>,
    /// MAX_GATHER_BATCH_COUNT (19 vanilla, 515 patched).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_batch_count: Option<u32>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

pub fn run(args: &BigfreeArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let _ = (args, g);
    Err(anyhow!("bigfree is not built yet"))
}
