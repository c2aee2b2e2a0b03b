//! `usermm meminfo`: `/proc/meminfo` of a freshly booted machine.

use serde::Serialize;
use usermm::{stats::MemInfo, MachineConfig};

use crate::args::{GlobalArgs, MachineArgs};

/// The record: the machine and its meminfo.
#[derive(Debug, Serialize)]
pub struct MeminfoRecord {
    pub config: MachineConfig,
    pub meminfo: MemInfo,
}

pub fn run(args: &MachineArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let config = args.engine.to_config(MachineConfig::default())?;
    let machine = super::boot(config)?;
    let record = MeminfoRecord {
        config: machine.config().clone(),
        meminfo: machine.meminfo(),
    };
    super::emit(g, &record, |r| r.meminfo.render())
}
