//! One module per subcommand, each with its argument struct and a `run`
//! ([`crate::cli::run`] dispatches), and what they share: [`emit`] and [`boot`].
//!
//! A command builds one record (a serde value) and renders it either as kernel-style text or,
//! with `--json`, as JSON on stdout ([`emit`]). Progress goes to stderr
//! ([`crate::report::Progress`]); nothing else is printed.
//!
//! Commands use [`crate::args`] (shared flags and parsers) and [`crate::report`] (tables,
//! plots, formatting); this module uses none of its children.

use std::io::Write;

use serde::Serialize;

use crate::args::GlobalArgs;

pub mod bench;
pub mod bigfree;
pub mod calibrate;
pub mod infer;
pub mod munmap_test;
pub mod percpu_grid;
pub mod percpu_test;
pub mod proc_file;
pub mod reproduce;
pub mod sweep;
pub mod usemem;
pub mod will_it_scale;

/// Write `text` to stdout as is.
pub fn print(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// Write `record` to stdout as pretty JSON followed by a newline.
pub fn print_json(record: &impl Serialize) -> anyhow::Result<()> {
    let mut s = serde_json::to_string_pretty(record)?;
    s.push('\n');
    Ok(print(&s)?)
}

/// Print a command's record: JSON with `--json`, otherwise the text `render` makes of it.
pub fn emit<R: Serialize>(
    g: &GlobalArgs,
    record: &R,
    render: impl FnOnce(&R) -> String,
) -> anyhow::Result<()> {
    if g.json {
        print_json(record)
    } else {
        Ok(print(&render(record))?)
    }
}

pub use crate::args::{check_host_memory, check_machine_memory, check_profile_memory};

/// Where the commands that measure this host take their lock: `$XDG_RUNTIME_DIR` (the
/// user's own runtime directory) or else `/tmp`, one file per user.
pub fn measuring_lock_path() -> std::path::PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| std::path::Path::new(d).is_dir()) {
        Some(d) => std::path::PathBuf::from(d).join("usermm-measuring.lock"),
        None => std::path::PathBuf::from(format!(
            "/tmp/usermm-measuring-{}.lock",
            usermm_host::facts::euid()
        )),
    }
}

/// Take the host-wide lock of the commands that measure this host (`calibrate`, `bench`,
/// `reproduce`'s host check) for as long as the returned file lives: two measurements at
/// once would each measure the other's load. A second one refuses in one line (exit 1),
/// naming what it is and the lock, rather than report figures of a busy host.
pub fn lock_for_measuring(what: &str) -> anyhow::Result<usermm_host::files::LockedFile> {
    let path = measuring_lock_path();
    let label = format!("{what}: the measuring lock {}", path.display());
    usermm_host::files::open_locked(&label, &path, false).map_err(|e| match e {
        usermm_host::files::FileError::Refused(m) if m.contains("holds it locked") => {
            anyhow::anyhow!(
                "{what}: another usermm command is measuring this host (calibrate, bench or \
             reproduce's host check holds {}); two at once would measure each other, so this \
             one does not start: run it when that one has ended",
                path.display()
            )
        }
        e => anyhow::Error::new(e),
    })
}

/// Boot a machine, turning a configuration the engine rejects into a usage error.
pub fn boot(config: usermm::MachineConfig) -> anyhow::Result<std::sync::Arc<usermm::Machine>> {
    use usermm::machine::MachineError;
    match usermm::Machine::new(config) {
        Ok(m) => Ok(m),
        Err(e @ MachineError::Config(_)) => crate::args::usage(e.to_string()),
        Err(e) => Err(anyhow::Error::new(e).context("cannot boot the machine")),
    }
}
