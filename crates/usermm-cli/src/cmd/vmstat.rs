//! `usermm vmstat`: `/proc/vmstat` of a freshly booted machine.

use serde::Serialize;
use usermm::{stats::VmStatSnapshot, MachineConfig};

use crate::args::{GlobalArgs, MachineArgs};

/// The record: the machine and its vmstat.
#[derive(Debug, Serialize)]
pub struct VmstatRecord {
    pub config: MachineConfig,
    pub vmstat: VmStatSnapshot,
}

pub fn run(args: &MachineArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let config = args.engine.to_config(MachineConfig::default())?;
    let machine = super::boot(config)?;
    let record = VmstatRecord {
        config: machine.config().clone(),
        vmstat: machine.vmstat_snapshot(),
    };
    super::emit(g, &record, |r| r.vmstat.render())
}
