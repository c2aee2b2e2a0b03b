//! The host line at the top of a report ([`HostSummary`]): enough to tell two runs' machines
//! apart — CPUs, memory, kernel release, the usermm version and commit, and when.
//!
//! The host's facts come from `usermm_host::facts` (its one `/proc/meminfo` reader and one
//! `uname`); this module adds what only the command knows (its version, the source tree's
//! commit) and renders the line.

use std::{
    fmt::Write as _,
    time::{SystemTime, UNIX_EPOCH},
};

use serde::Serialize;
use usermm_host::facts;

/// The facts printed at the top of a report: enough to tell two runs' machines apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostSummary {
    /// CPUs this process may run on.
    pub cpus: usize,
    /// `MemTotal` of the host's `/proc/meminfo`, in kB.
    pub mem_total_kb: Option<u64>,
    /// `uname -r`.
    pub kernel: Option<String>,
    pub usermm_version: String,
    /// `git rev-parse --short HEAD` of the source tree, `-dirty` when it has changes.
    pub git_commit: Option<String>,
    /// Seconds since the epoch when the summary was taken.
    pub generated_unix: u64,
}

impl HostSummary {
    pub fn collect() -> Self {
        HostSummary {
            cpus: usermm_host::facts::usable_cpus(),
            mem_total_kb: facts::mem_total_kb(),
            kernel: facts::kernel_release(),
            usermm_version: env!("CARGO_PKG_VERSION").to_string(),
            git_commit: git_commit(),
            generated_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }

    /// One line: `2 CPUs, 23.4 GiB, Linux 6.8.0; usermm 0.1.0 (abc1234); 2026-01-02 03:04 UTC`.
    pub fn render(&self) -> String {
        let mut s = format!("{} CPU{}", self.cpus, if self.cpus == 1 { "" } else { "s" });
        if let Some(kb) = self.mem_total_kb {
            let _ = write!(s, ", {:.1} GiB", kb as f64 / (1 << 20) as f64);
        }
        if let Some(k) = &self.kernel {
            let _ = write!(s, ", Linux {k}");
        }
        let _ = write!(s, "; usermm {}", self.usermm_version);
        if let Some(c) = &self.git_commit {
            let _ = write!(s, " ({c})");
        }
        let _ = write!(s, "; {}", utc_timestamp(self.generated_unix));
        s
    }
}

pub(crate) fn git_commit() -> Option<String> {
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(env!("CARGO_MANIFEST_DIR"))
            .args(args)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "--short", "HEAD"]).filter(|h| !h.is_empty())?;
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}

/// `YYYY-MM-DD HH:MM UTC` for seconds since the epoch (proleptic Gregorian calendar).
fn utc_timestamp(secs: u64) -> String {
    let (hh, mm) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    let (y, m, d) = usermm_host::facts::civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02} UTC")
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn utc_timestamps() {
        assert_eq!(utc_timestamp(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_timestamp(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(utc_timestamp(1_700_000_000), "2023-11-14 22:13 UTC");
    }
}
