//! Where `reproduce` writes: a directory beside `--out`, renamed into place once the report
//! is complete, under a lock, so that `--out` is always one whole run's report.
//!
//! - A run that ends early (an error, Ctrl-C before the rename) leaves `--out` as it was: the
//!   staging directory is removed on the way out (a killed process leaves it, named
//!   `.NAME.tmp-PID` beside `--out`).
//! - A second run into the same `--out` while one is writing is refused (an advisory lock on
//!   `.NAME.lock` beside `--out`, removed at the end).
//! - Files of an earlier run that this run does not write do not survive beside the new
//!   report: the whole directory is replaced.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::args::usage;

/// The staging directory of one run, and its lock.
#[derive(Debug)]
pub(super) struct Staging {
    out: PathBuf,
    tmp: PathBuf,
    lock_path: PathBuf,
    _lock: File,
    done: bool,
}

impl Staging {
    /// Take the lock on `out` and make an empty staging directory beside it.
    pub(super) fn begin(out: &Path) -> anyhow::Result<Staging> {
        if out.exists() && !out.is_dir() {
            return usage(format!(
                "--out {}: exists and is not a directory",
                out.display()
            ));
        }
        let name = out
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| n != "." && n != "..");
        let Some(name) = name else {
            return usage(format!(
                "--out {}: name a directory (not . or ..)",
                out.display()
            ));
        };
        let parent = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent).map_err(|e| {
            anyhow::anyhow!(
                "--out {}: cannot create {}: {e}",
                out.display(),
                parent.display()
            )
        })?;
        let lock_path = parent.join(format!(".{name}.lock"));
        let lock = File::create(&lock_path).map_err(|e| {
            anyhow::anyhow!(
                "--out {}: cannot create {}: {e}",
                out.display(),
                lock_path.display()
            )
        })?;
        let held = usermm_host::try_lock_exclusive(&lock).map_err(|e| {
            anyhow::anyhow!(
                "--out {}: cannot lock {}: {e}",
                out.display(),
                lock_path.display()
            )
        })?;
        if !held {
            return usage(format!(
                "--out {}: another usermm reproduce is writing it (it holds {})",
                out.display(),
                lock_path.display()
            ));
        }
        let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir(&tmp).map_err(|e| {
            anyhow::anyhow!(
                "--out {}: cannot create {}: {e}",
                out.display(),
                tmp.display()
            )
        })?;
        Ok(Staging {
            out: out.to_path_buf(),
            tmp,
            lock_path,
            _lock: lock,
            done: false,
        })
    }

    /// Where the run writes.
    pub(super) fn dir(&self) -> &Path {
        &self.tmp
    }

    /// Put the finished report in place of `out` (an earlier report goes as a whole).
    pub(super) fn commit(mut self) -> anyhow::Result<()> {
        let old = self
            .tmp
            .with_file_name(format!(".{}.old-{}", self.name(), std::process::id()));
        let had = self.out.exists();
        if had {
            std::fs::rename(&self.out, &old).map_err(|e| {
                anyhow::anyhow!(
                    "--out {}: cannot move the earlier report aside: {e}",
                    self.out.display()
                )
            })?;
        }
        std::fs::rename(&self.tmp, &self.out).map_err(|e| {
            anyhow::anyhow!(
                "--out {}: cannot put the report in place: {e}",
                self.out.display()
            )
        })?;
        self.done = true;
        if had {
            let _ = std::fs::remove_dir_all(&old);
        }
        Ok(())
    }

    fn name(&self) -> String {
        self.out
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
        let _ = std::fs::remove_file(&self.lock_path);
    }
}
