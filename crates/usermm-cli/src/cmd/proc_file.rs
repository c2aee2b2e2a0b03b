//! `usermm meminfo` and `usermm vmstat`: `/proc/meminfo` or `/proc/vmstat` of a freshly booted
//! machine. One command body for both: boot the machine the flags describe, read the one file,
//! print it (kernel text, or with `--json` the record: the machine and the file's figures).

use serde::Serialize;
use usermm::{
    stats::{MemInfo, VmStatSnapshot},
    MachineConfig,
};

use crate::args::{GlobalArgs, MachineArgs};

/// Which `/proc` file to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcFile {
    Meminfo,
    Vmstat,
}

/// The record: the machine and the one file it was asked for (the other is left out).
#[derive(Debug, Serialize)]
pub struct ProcFileRecord {
    pub config: MachineConfig,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meminfo: Option<MemInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vmstat: Option<VmStatSnapshot>,
}

impl ProcFileRecord {
    /// The file as the kernel prints it.
    fn render(&self) -> String {
        match (&self.meminfo, &self.vmstat) {
            (Some(m), _) => m.render(),
            (None, Some(v)) => v.render(),
            (None, None) => String::new(),
        }
    }
}

pub fn run(file: ProcFile, args: &MachineArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let config = args.engine.to_config(MachineConfig::default())?;
    let machine = super::boot(config)?;
    let record = ProcFileRecord {
        config: machine.config().clone(),
        meminfo: (file == ProcFile::Meminfo).then(|| machine.meminfo()),
        vmstat: (file == ProcFile::Vmstat).then(|| machine.vmstat_snapshot()),
    };
    super::emit(g, &record, ProcFileRecord::render)
}
