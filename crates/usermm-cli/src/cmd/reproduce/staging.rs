//! Where `reproduce` writes: the report directory `--out DIR`, recognised as one by a marker
//! file, locked while a run writes it, and filled from a staging directory inside it once
//! the report is complete.
//!
//! # Which directories are written
//! `DIR/.usermm-report` (the marker) names the files usermm wrote there. A run writes into
//! `DIR` only when it is new (created, with its missing parents), empty, or carries the
//! marker; any other directory — a home directory, a project, `/` — is refused in one line
//! before anything in it is touched, whatever it holds (`$HOME` and `/` even when empty).
//! `DIR` given as a symbolic link to a directory is used through the link: the report goes
//! where it points and the link stays a link.
//!
//! # What a run replaces
//! Only what the marker lists: the `report` files of the earlier run are replaced by this
//! run's (or removed when this run does not write them again), and a directory they leave
//! empty is removed (`rmdir`, which never removes a directory that holds anything). A file a
//! user added stays, even inside `modelled/`; one that sits where this run's report would go
//! and is not in the marker stops the run before anything moves (exit 1; the new report is
//! left in `DIR/.usermm-staging/` for the user to take). `kept` files (`--sensitivity`'s
//! points, [`Staging::keep`]) are written in place and never removed: a later run resumes
//! from them.
//!
//! # The lock
//! `DIR/.usermm-report.lock`, opened `O_NOFOLLOW | O_CREAT` without `O_TRUNC` and `flock`ed
//! ([`usermm_host::files::open_locked`]): a second run into the same directory (by any path
//! to it: the lock is in the directory itself, not beside a name for it) is refused in one
//! line. The lock file is never unlinked — unlinking a lock file that another run may have
//! just opened lets a third run create and lock a new one, and then two runs hold "the" lock
//! — so it stays in the report directory, where it does no harm and the marker's rules
//! ignore it (a directory holding only it counts as empty). The directory is judged again
//! once the lock is held, so two runs that start at once cannot both take a foreign one.
//!
//! # When a run fails
//! Everything but `kept` files is written into `DIR/.usermm-staging/` first (listed in the
//! marker before it is made, so a later run may remove one a killed run left). An error,
//! Ctrl-C or SIGTERM removes it (`usermm_host::files::cleanup`) and leaves the earlier report
//! whole. Only [`Staging::commit`] touches the report: it lists old and new files together in
//! the marker, renames each new file over its old one (one `rename` each, so a file is never
//! half written), removes the old files this run did not write, and then writes the marker
//! of this run alone. A run killed during those renames (milliseconds) leaves a mix of the
//! two reports, every file of it listed in the marker. That is the price of not swapping the
//! whole directory, which the staging design before this one did by renaming `DIR` aside and
//! removing it whole: that deleted whatever else was in `DIR`, replaced a link to a directory
//! by a directory, and could not keep `--sensitivity`'s points for the next run.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use usermm_host::files::{self, cleanup::Created, FileError};

use crate::args::usage;

/// The marker's name in a report directory.
pub(crate) const MARKER: &str = ".usermm-report";
/// The lock's name in a report directory (never unlinked; see the module's essay).
pub(crate) const LOCK: &str = ".usermm-report.lock";
/// The staging directory's name in a report directory.
const STAGING: &str = ".usermm-staging";
/// The marker's first line.
const MAGIC: &str = "usermm report directory";

/// The marker's list: relative paths (`/`-separated, no `.` or `..`) by kind.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Marker {
    /// This run's report: replaced or removed by the next run.
    report: BTreeSet<String>,
    /// Written in place and kept across runs (`--sensitivity`'s points).
    kept: BTreeSet<String>,
    /// A staging directory that a run is filling (or that a killed run left).
    staging: bool,
}

impl Marker {
    fn parse(text: &str) -> Result<Marker, String> {
        let mut lines = text.lines();
        if lines.next() != Some(MAGIC) {
            return Err(format!("its first line is not \"{MAGIC}\""));
        }
        let mut m = Marker::default();
        for (n, line) in lines.enumerate() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = || format!("line {} is not KIND PATH", n + 2);
            let (kind, path) = line.split_once(' ').ok_or_else(bad)?;
            if !is_relative_name(path) {
                return Err(bad());
            }
            match kind {
                "report" => m.report.insert(path.to_string()),
                "kept" => m.kept.insert(path.to_string()),
                "staging" if path == STAGING => {
                    m.staging = true;
                    true
                }
                _ => return Err(bad()),
            };
        }
        Ok(m)
    }

    fn render(&self) -> String {
        let mut t = format!(
            "{MAGIC}\n# `usermm reproduce` wrote the files listed here. A later run into this \
             directory replaces the\n# report files (removing those it does not write again), \
             keeps the kept ones, and touches\n# nothing else. usermm writes a report only into \
             a new or empty directory or one with this file.\n"
        );
        for p in &self.report {
            t += &format!("report {p}\n");
        }
        for p in &self.kept {
            t += &format!("kept {p}\n");
        }
        if self.staging {
            t += &format!("staging {STAGING}\n");
        }
        t
    }

    fn lists(&self, rel: &str) -> bool {
        self.report.contains(rel) || self.kept.contains(rel)
    }
}

/// A relative path of plain names, `/`-separated: all the marker may name.
fn is_relative_name(p: &str) -> bool {
    !p.is_empty()
        && !p.contains('\0')
        && Path::new(p)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
        && !p.ends_with('/')
        && !p.contains("//")
}

/// What `--out` is, judged by what it holds.
enum State {
    /// Nothing in it but (perhaps) the lock.
    Empty,
    Report(Marker),
}

/// The report directory of one run, locked, and its staging directory.
#[derive(Debug)]
pub(super) struct Staging {
    out: PathBuf,
    label: String,
    marker: Marker,
    _lock: files::LockedFile,
    stage: Option<Created>,
}

impl Staging {
    /// Take `out` for this run: make it if need be, check that it may be written, lock it,
    /// mark it, and make an empty staging directory in it.
    pub(super) fn begin(out: &Path) -> anyhow::Result<Staging> {
        let label = files::label("--out", out);
        if out.as_os_str().is_empty() || (out.file_name().is_none() && out.parent().is_some()) {
            return usage(format!("{label}: name a directory (not . or ..)"));
        }
        open_dir(&label, out)?;
        let home = std::env::var_os("HOME").and_then(|h| std::fs::canonicalize(h).ok());
        let here = std::fs::canonicalize(out).ok();
        let special = here
            .as_deref()
            .is_some_and(|h| h == Path::new("/") || Some(h) == home.as_deref());
        let judge = || -> anyhow::Result<State> {
            let state = judge(&label, out);
            if special && !matches!(state, Ok(State::Report(_))) {
                return usage(format!(
                    "{label}: is your home directory or /, not a report directory; name a \
                     directory for the report (for example {})",
                    out.join("report").display()
                ));
            }
            state
        };
        judge()?;
        let lock_path = out.join(LOCK);
        let lock_label = format!("{label}: {}", lock_path.display());
        let lock = files::open_locked(&lock_label, &lock_path, false)?;
        // Judged again under the lock: another run may have written it meanwhile.
        let mut marker = match judge()? {
            State::Empty => Marker::default(),
            State::Report(m) => m,
        };
        let stage_path = out.join(STAGING);
        if marker.staging {
            remove_stale_staging(&label, &stage_path)?;
        }
        marker.staging = true;
        write_marker(&label, out, &marker)?;
        let stage = files::cleanup::create_dir(&stage_path)
            .map_err(|e| anyhow::anyhow!("{label}: cannot create {}: {e}", stage_path.display()))?;
        Ok(Staging {
            out: out.to_path_buf(),
            label,
            marker,
            _lock: lock,
            stage: Some(stage),
        })
    }

    /// Where the run writes its report.
    pub(super) fn dir(&self) -> &Path {
        self.stage.as_ref().map_or(&self.out, Created::path)
    }

    /// Claim `names` under `DIR/SUB/` as kept files (written in place, never removed), and
    /// return `DIR/SUB`, made if missing. Refused when one of them exists and the marker does
    /// not list it (a file usermm did not write), or when `SUB` is not a plain directory.
    pub(super) fn keep(&mut self, sub: &str, names: &[String]) -> anyhow::Result<PathBuf> {
        let rels: Vec<String> = names.iter().map(|n| format!("{sub}/{n}")).collect();
        for rel in &rels {
            check_parents(&self.label, &self.out, rel)?;
            let path = self.out.join(rel);
            if path.symlink_metadata().is_ok() && !self.marker.lists(rel) {
                return usage(format!(
                    "{}: {} was not written by usermm (it is not listed in {}); move it away \
                     or name another --out",
                    self.label,
                    path.display(),
                    self.out.join(MARKER).display()
                ));
            }
        }
        self.marker.kept.extend(rels);
        write_marker(&self.label, &self.out, &self.marker)?;
        let dir = self.out.join(sub);
        create_dir(&self.label, &dir)?;
        Ok(dir)
    }

    /// Put the finished report in place of the earlier one (see the module's essay).
    pub(super) fn commit(mut self) -> anyhow::Result<()> {
        let stage = self.dir().to_path_buf();
        let mut staged = Vec::new();
        walk(&stage, "", &mut staged)
            .map_err(|e| anyhow::anyhow!("{}: cannot read {}: {e}", self.label, stage.display()))?;
        if let Err(e) = self.preflight(&staged) {
            // The new report stays for the user to take; the marker lists its directory.
            if let Some(s) = self.stage.take() {
                s.keep();
            }
            return Err(e);
        }
        let old = std::mem::take(&mut self.marker.report);
        self.marker.report = old
            .union(&staged.iter().cloned().collect())
            .cloned()
            .collect();
        write_marker(&self.label, &self.out, &self.marker)?;
        for rel in &staged {
            let to = self.out.join(rel);
            if let Some(p) = Path::new(rel)
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
            {
                create_dir(&self.label, &self.out.join(p))?;
            }
            std::fs::rename(stage.join(rel), &to).map_err(|e| {
                anyhow::anyhow!("{}: cannot put {} in place: {e}", self.label, to.display())
            })?;
        }
        let new: BTreeSet<String> = staged.into_iter().collect();
        for rel in old.difference(&new) {
            remove_report_file(&self.out, rel);
        }
        self.marker.report = new;
        self.marker.staging = false;
        write_marker(&self.label, &self.out, &self.marker)?;
        // What is left of the staging directory is empty directories.
        drop(self.stage.take());
        Ok(())
    }

    /// Refuse the commit, before anything moves, when a file of the new report would replace
    /// one usermm did not write, or would go through a link or a non-directory.
    fn preflight(&self, staged: &[String]) -> anyhow::Result<()> {
        for rel in staged {
            check_parents(&self.label, &self.out, rel)?;
            let to = self.out.join(rel);
            let ours = match to.symlink_metadata() {
                Err(_) => true,
                Ok(m) => m.is_file() && self.marker.report.contains(rel),
            };
            if !ours {
                anyhow::bail!(
                    "{}: {} is in the way and was not written by usermm (it is not listed in \
                     {}); nothing was replaced, and the new report is in {}",
                    self.label,
                    to.display(),
                    self.out.join(MARKER).display(),
                    self.dir().display()
                );
            }
        }
        Ok(())
    }
}

/// Make `out` if it does not exist (with its parents); refuse anything there that is not a
/// directory or a link to one.
fn open_dir(label: &str, out: &Path) -> anyhow::Result<()> {
    match out.symlink_metadata() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let what = format!("{label}: cannot create the directory");
            Ok(files::create_dir_all(&what, out)?)
        }
        Err(_) => Ok(files::metadata(label, out).map(drop)?),
        Ok(m) if m.is_dir() => Ok(()),
        Ok(m) if m.file_type().is_symlink() => match out.metadata() {
            Ok(t) if t.is_dir() => Ok(()),
            Ok(t) => usage(format!(
                "{label}: is a symbolic link to {}, not to a directory",
                files::kind(t.file_type())
            )),
            Err(_) => usage(format!(
                "{label}: is a symbolic link to nothing; name a directory"
            )),
        },
        Ok(m) => usage(format!(
            "{label}: exists and is {}, not a directory",
            files::kind(m.file_type())
        )),
    }
}

/// Whether `out` is empty (but for the lock) or a report directory; refused otherwise.
fn judge(label: &str, out: &Path) -> anyhow::Result<State> {
    let marker = out.join(MARKER);
    let marker_label = format!("{label}: {}", marker.display());
    if files::check_output(&marker_label, &marker)?.is_some() {
        let text = files::read_regular(&marker_label, &marker)?;
        return match Marker::parse(&String::from_utf8_lossy(&text)) {
            Ok(m) => Ok(State::Report(m)),
            Err(why) => usage(format!(
                "{label}: {} is not a usermm marker ({why}); usermm will not write into {}",
                marker.display(),
                out.display()
            )),
        };
    }
    let entries = std::fs::read_dir(out).map_err(|e| anyhow::anyhow!("{label}: {e}"))?;
    for e in entries {
        let e = e.map_err(|e| anyhow::anyhow!("{label}: {e}"))?;
        if e.file_name() != LOCK {
            return usage(format!(
                "{label}: is not empty and is not a usermm report (it has no {MARKER}); \
                 usermm writes a report only into a new or empty directory or over an earlier \
                 report: name another --out (a report from a usermm older than the marker has \
                 none either: move it away)"
            ));
        }
    }
    Ok(State::Empty)
}

fn write_marker(label: &str, out: &Path, m: &Marker) -> anyhow::Result<()> {
    let path = out.join(MARKER);
    files::write_atomic(label, &path, m.render().as_bytes()).map_err(|e| match e {
        FileError::Io(_, io) => anyhow::anyhow!("{label}: cannot write {}: {io}", path.display()),
        e => e.into(),
    })
}

/// Remove the staging directory a killed run left (the marker lists it): only a directory,
/// never through a link.
fn remove_stale_staging(label: &str, path: &Path) -> anyhow::Result<()> {
    match path.symlink_metadata() {
        Err(_) => Ok(()),
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path)
            .map_err(|e| anyhow::anyhow!("{label}: cannot remove {}: {e}", path.display())),
        Ok(m) => usage(format!(
            "{label}: {} is {}, not the staging directory usermm made",
            path.display(),
            files::kind(m.file_type())
        )),
    }
}

/// Every directory on `rel`'s way under `out` is a directory (or nothing yet), not a link.
fn check_parents(label: &str, out: &Path, rel: &str) -> anyhow::Result<()> {
    let mut at = out.to_path_buf();
    let parts: Vec<&str> = rel.split('/').collect();
    for part in &parts[..parts.len() - 1] {
        at.push(part);
        match at.symlink_metadata() {
            Err(_) => return Ok(()),
            Ok(m) if m.is_dir() => {}
            Ok(m) => {
                return usage(format!(
                    "{label}: {} is {}, not a directory usermm made; usermm writes nothing \
                     through it",
                    at.display(),
                    files::kind(m.file_type())
                ))
            }
        }
    }
    Ok(())
}

/// `mkdir`, an existing directory being fine.
fn create_dir(label: &str, dir: &Path) -> anyhow::Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(anyhow::anyhow!(
            "{label}: cannot create {}: {e}",
            dir.display()
        )),
    }
}

/// The files under `dir`, as `/`-separated paths relative to it (prefixed by `prefix`).
fn walk(dir: &Path, prefix: &str, out: &mut Vec<String>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let rel = format!("{prefix}{name}");
        if e.file_type()?.is_dir() {
            walk(&e.path(), &format!("{rel}/"), out)?;
        } else {
            out.push(rel);
        }
    }
    Ok(())
}

/// Remove an earlier report's file `rel` when it is still a regular file, then each
/// directory on its way that this leaves empty.
fn remove_report_file(out: &Path, rel: &str) {
    let path = out.join(rel);
    if path.symlink_metadata().is_ok_and(|m| m.is_file()) {
        let _ = std::fs::remove_file(&path);
    }
    let mut dir = Path::new(rel).parent();
    while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
        if std::fs::remove_dir(out.join(d)).is_err() {
            break;
        }
        dir = d.parent();
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn the_marker_reads_back_what_it_wrote_and_refuses_paths_out_of_the_directory() {
        let mut m = Marker::default();
        m.report.insert("report.md".into());
        m.report.insert("modelled/percpu.svg".into());
        m.kept.insert("sensitivity/003.jsonl".into());
        m.staging = true;
        assert_eq!(Marker::parse(&m.render()), Ok(m));
        for bad in [
            "report ../x",
            "report /etc/passwd",
            "report a/../../b",
            "report ./a",
            "report ",
            "report a//b",
            "remove a",
            "staging elsewhere",
        ] {
            let text = format!("{MAGIC}\n{bad}\n");
            assert!(Marker::parse(&text).is_err(), "{bad}");
        }
        assert!(Marker::parse("report report.md\n").is_err());
    }
}
