//! What a run has created and not finished yet, removed when SIGINT or SIGTERM ends the run.
//!
//! A run that writes a file makes a temporary file first ([`super::write_atomic`]);
//! `reproduce` makes a staging directory for its report. Each is a [`Created`]: removed when
//! dropped (the run failed), forgotten once renamed into place or kept on purpose. Ctrl-C or
//! `kill` would end the process before any destructor runs, so the first [`Created`] also
//! starts a thread that waits for SIGINT and SIGTERM (the `signal-hook` crate); on one it
//! removes everything still registered and then dies of that same signal, as if it had not
//! been caught (a shell sees status 130 for SIGINT, and a script's loop stops). A signal
//! ignored when the process started (`nohup`, a non-interactive shell's background job) stays
//! ignored: no handler is installed for it.
//!
//! # The registry
//! Signals go to the process, so the list the handler walks belongs to the process: one
//! `static` here, touched by no other module. Its lock is held while a file or directory is
//! created and registered, while one is renamed and forgotten, while a subdirectory is made
//! inside a registered directory ([`create_dir_all_within`]), and by the handler from its
//! sweep until the process dies: so the handler sees each path either registered (and
//! removes it) or not yet created or already in place, never between the two. No one holds
//! it for longer than one of those system calls (or a removal).
//!
//! # Children
//! The handler's thread exists only in this process. A child forked without `exec` has the
//! caught action but not the thread, so `usermm_host`'s fork wrappers put the two signals
//! back to their default action in the child; `exec` resets them by itself.
//!
//! # After the signal
//! The handler's thread needs a CPU to run, and on a busy machine the main thread may get
//! there first: finish its work, rename its report into place and exit with status 0 while
//! the thread waits (a CI failure of 2026-11-29). So the signal also sets a flag at once, in
//! the handler itself ([`interrupted`]); from then on nothing is committed — [`Created::rename_to`]
//! and [`Created::keep`] wait for the thread instead — and a command ends through
//! [`end_if_interrupted`], which waits too. The run dies of its signal whichever thread ran
//! first, and leaves nothing behind.
//!
//! Nothing is registered by commands that write no files (usemem, bigfree, ...): the thread
//! is never started there, and usemem's processes stay single-threaded, as its forks need.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    /// Removed with everything under it: only a directory this run made.
    Dir,
}

#[derive(Debug)]
struct Registry {
    next: u64,
    live: Vec<(u64, PathBuf, Kind)>,
    /// Whether the signal thread was started (or tried).
    watching: bool,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    next: 0,
    live: Vec::new(),
    watching: false,
});

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Set by the signal handler itself (not its thread), and only once the thread that ends the
/// run is there to act on it.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether SIGINT or SIGTERM has come: the cleanup thread is sweeping, or about to, and then
/// ends the process. A loop of work may stop taking more.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// If a signal has come, wait for the cleanup thread to end the process by it; else return.
/// A command calls this before it exits, so a run never ends with its own status after a
/// Ctrl-C.
pub fn end_if_interrupted() {
    if interrupted() {
        wait_for_the_end();
    }
}

/// Park until the cleanup thread's sweep ends the process (it needs the registry: the caller
/// must not hold it).
fn wait_for_the_end() -> ! {
    loop {
        std::thread::park();
    }
}

/// A file or directory this run created and has not finished: removed when dropped, or by
/// the signal handler, unless [`Created::rename_to`] or [`Created::keep`] came first.
#[derive(Debug)]
#[must_use = "dropping it removes what it names"]
pub struct Created {
    id: u64,
    path: PathBuf,
    kind: Kind,
    done: bool,
}

/// Create a temporary file `.NAME.tmp-PID-N` in `dir` with `open` (which must create it
/// exclusively), registered until it is renamed into place.
pub fn create_file(
    dir: &Path,
    name: &OsStr,
    open: impl FnOnce(&Path) -> io::Result<File>,
) -> io::Result<(File, Created)> {
    let mut r = registry();
    watch(&mut r);
    let id = r.next;
    r.next += 1;
    let mut tmp = OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".tmp-{}-{id}", std::process::id()));
    let path = dir.join(tmp);
    let file = open(&path)?;
    r.live.push((id, path.clone(), Kind::File));
    Ok((file, Created::new(id, path, Kind::File)))
}

/// Create the directory `path` (its parent must exist; it must not), registered until kept.
pub fn create_dir(path: &Path) -> io::Result<Created> {
    let mut r = registry();
    watch(&mut r);
    let id = r.next;
    r.next += 1;
    std::fs::create_dir(path)?;
    r.live.push((id, path.to_path_buf(), Kind::Dir));
    Ok(Created::new(id, path.to_path_buf(), Kind::Dir))
}

/// `mkdir -p` for `path` inside a directory this run registered (the staging directory),
/// under the registry's lock. The handler removes a registered directory with everything in
/// it, and that removal fails (`ENOTEMPTY`) when another thread makes a subdirectory after it
/// has read the directory: holding the lock, a subdirectory is made before the sweep (and
/// removed with its parent) or never.
pub fn create_dir_all_within(path: &Path) -> io::Result<()> {
    let _r = registry();
    std::fs::create_dir_all(path)
}

impl Created {
    fn new(id: u64, path: PathBuf, kind: Kind) -> Self {
        Created {
            id,
            path,
            kind,
            done: false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `rename` it to `to` and forget it (an error leaves it registered, and dropping it then
    /// removes it).
    /// After a signal it does neither: it waits for the cleanup thread, which removes it.
    pub fn rename_to(mut self, to: &Path) -> io::Result<()> {
        let mut r = registry();
        if interrupted() {
            drop(r);
            wait_for_the_end();
        }
        std::fs::rename(&self.path, to)?;
        forget(&mut r, self.id);
        self.done = true;
        Ok(())
    }

    /// Leave it where it is and forget it (after a signal: wait, as [`Created::rename_to`]).
    pub fn keep(mut self) {
        let mut r = registry();
        if interrupted() {
            drop(r);
            wait_for_the_end();
        }
        forget(&mut r, self.id);
        self.done = true;
    }
}

impl Drop for Created {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut r = registry();
        remove(&self.path, self.kind);
        forget(&mut r, self.id);
    }
}

fn forget(r: &mut Registry, id: u64) {
    r.live.retain(|(i, _, _)| *i != id);
}

fn remove(path: &Path, kind: Kind) {
    let _ = match kind {
        Kind::File => std::fs::remove_file(path),
        Kind::Dir => std::fs::remove_dir_all(path),
    };
}

/// Start the signal thread, once (under the registry's lock).
fn watch(r: &mut Registry) {
    if r.watching {
        return;
    }
    r.watching = true;
    let signals: Vec<libc::c_int> = [libc::SIGINT, libc::SIGTERM]
        .into_iter()
        .filter(|&s| !crate::sys::signal_ignored(s))
        .collect();
    if signals.is_empty() {
        return;
    }
    // Without the thread a signal ends the run as it always did, leaving what it created.
    let Ok(mut caught) = signal_hook::iterator::Signals::new(&signals) else {
        return;
    };
    let started = std::thread::Builder::new()
        .name("usermm-cleanup".into())
        .spawn(move || {
            let Some(sig) = caught.forever().next() else {
                return;
            };
            // Held until the process dies: nothing is created or renamed after this sweep.
            let r = registry();
            for (_, path, kind) in &r.live {
                remove(path, *kind);
            }
            let _ = signal_hook::low_level::emulate_default_handler(sig);
            std::process::exit(128 + sig);
        });
    // The flag only with the thread: without it no one would end a run that waits on it.
    if started.is_ok() {
        for &s in &signals {
            let _ = signal_hook::flag::register(s, &INTERRUPTED);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// The CI failure of 2026-11-29: a Ctrl-C'd `reproduce --sensitivity` exited with status
    /// 0, its main thread having finished while the cleanup thread waited for a CPU. Here the
    /// race is won by the main thread every time: the signal is raised in it (its handler runs
    /// before `raise` returns) and it goes straight on to rename its file into place and exit.
    /// The run must still die of the signal and leave nothing behind. (The test runs itself as
    /// a child process, which the signal ends.)
    #[test]
    fn after_a_signal_nothing_is_committed_and_the_run_dies_of_it() {
        const CHILD: &str = "USERMM_CLEANUP_TEST_CHILD";
        if let Some(dir) = std::env::var_os(CHILD) {
            let dir = PathBuf::from(dir);
            let (_f, tmp) = create_file(&dir, OsStr::new("out"), |p| File::create_new(p)).unwrap();
            signal_hook::low_level::raise(libc::SIGTERM).unwrap();
            assert!(interrupted());
            // Either of these may block until the thread ends the process.
            let _ = tmp.rename_to(&dir.join("out"));
            end_if_interrupted();
            std::process::exit(0);
        }
        let base = std::env::temp_dir().join(format!("usermm-signal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "files::cleanup::tests::after_a_signal_nothing_is_committed_and_the_run_dies_of_it",
                "--nocapture",
            ])
            .env(CHILD, &base)
            .status()
            .unwrap();
        let left: Vec<_> = std::fs::read_dir(&base)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        std::fs::remove_dir_all(&base).unwrap();
        assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
        assert!(left.is_empty(), "left behind: {left:?}");
    }

    /// The CI failure of 2026-11-28: a Ctrl-C'd `reproduce` left `.usermm-staging` behind
    /// because its main thread made a subdirectory in it while the handler was removing it.
    /// A subdirectory is made only while no one else holds the registry.
    #[test]
    fn a_subdirectory_waits_for_the_handlers_sweep() {
        let base = std::env::temp_dir().join(format!("usermm-cleanup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        let sub = base.join("a/b");
        let held = registry();
        let maker = {
            let sub = sub.clone();
            std::thread::spawn(move || create_dir_all_within(&sub))
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!base.join("a").exists(), "made while the registry was held");
        drop(held);
        maker.join().unwrap().unwrap();
        assert!(sub.is_dir());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
