//! Every file usermm writes, and every earlier output it reads back, goes through here.
//!
//! A usermm command writes reports, profiles, plots, sweep outputs, lock files and usemem's
//! pid file into directories that hold the user's own files, often at a path the user typed
//! in a hurry (`--out ~`, `--out /dev/null`) or one another user of the machine could have
//! prepared (`/tmp/report`). The rule this module keeps: **a usermm command never deletes,
//! truncates or overwrites what it did not write, and never writes through a link.**
//!
//! - **Whole files** ([`write_atomic`]): the target is looked at without following a link
//!   (`lstat`): a symbolic link is refused, and so is anything there that is not a regular
//!   file (a directory, a FIFO, `/dev/null`, `/dev/zero`, a socket). The bytes go to a new
//!   file beside the target (`.NAME.tmp-PID-N`, opened `O_CREAT | O_EXCL | O_NOFOLLOW`),
//!   are synced, and the file is `rename`d over the target: a reader sees the old file or the
//!   new one, never a truncated one, and an interrupted run leaves the old file whole. A file
//!   replaced keeps its permission bits. `rename` replaces the directory entry and never
//!   follows a link, so a link planted between the check and the rename is replaced, not
//!   written through.
//! - **Appended outputs and lock files** ([`open_locked`]): opened `O_NOFOLLOW | O_CREAT`,
//!   never `O_TRUNC`, with `O_NONBLOCK` so that a FIFO planted there cannot block the open;
//!   `fstat` then checks that what was opened is a regular file, and `flock(LOCK_EX |
//!   LOCK_NB)` takes it for this run alone. The lock lives as long as the [`LockedFile`],
//!   which unlocks before it closes (a child forked meanwhile, holding a copy of the
//!   descriptor, would otherwise keep the lock until it exits), and the file is never
//!   unlinked: a lock file removed while another run has it open would let a third run
//!   lock a new file of the same name, and two runs would both hold "the" lock.
//! - **Earlier output read back**: an output being appended to is read through the file
//!   [`open_locked`] opened ([`read_all`]); any other ([`read_regular`]: `--merge`'s inputs, a
//!   grid, a report's marker, `calibrate --from`) is `stat`ed first and refused unless a
//!   regular file, then opened with `O_NONBLOCK` and checked again with `fstat` (what is at
//!   the path may change in between; the second check is on the file actually opened), so
//!   that neither `/dev/zero` (endless) nor a FIFO (no writer) can hold a command up.
//! - **usemem's pid file** ([`append_once`]): appended, as vm-scalability's usemem appends it,
//!   with the same `O_NOFOLLOW` and regular-file checks, and the line (`PID\n`) in one
//!   `write` so that processes appending at once never interleave within a line.
//!
//! Parent directories are never created here except by [`create_parent`], which a command
//! calls only where its help says that it creates them.
//!
//! What a run creates and has not finished (the temporary files above, `reproduce`'s staging
//! directory) is registered with [`cleanup`], which removes it when SIGINT or SIGTERM ends the
//! run.
//!
//! Errors are [`FileError`]s: [`FileError::Refused`] when the path names something usermm
//! must not use as asked (the CLI reports it as a usage error, exit status 2, having touched
//! nothing), [`FileError::Io`] when the system refused an operation. Each is one line that
//! starts with the caller's label (the flag and the path).

pub mod cleanup;

use std::fs::{File, FileType, Metadata, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Why a file could not be used.
#[derive(Debug)]
pub enum FileError {
    /// The path names something usermm must not write (or read) as asked: a link, a device, a
    /// directory where a file belongs, a file another run holds, a file it did not write.
    /// Nothing was changed.
    Refused(String),
    /// The system refused an operation: the label (and what was being done), and the error.
    Io(String, io::Error),
}

impl FileError {
    /// Whether the error is [`FileError::Refused`].
    pub fn is_refusal(&self) -> bool {
        matches!(self, FileError::Refused(_))
    }

    /// Whether the path (or a directory on it) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, FileError::Io(_, e) if e.kind() == io::ErrorKind::NotFound)
    }
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileError::Refused(m) => f.write_str(m),
            FileError::Io(what, e) => write!(f, "{what}: {e}"),
        }
    }
}

/// No source: the message already ends with the system's error, and a chain printed whole
/// (`{:#}`, as `main` prints) would say it twice.
impl std::error::Error for FileError {}

pub type Result<T> = std::result::Result<T, FileError>;

/// `"FLAG PATH"`, the label of a path a flag named (the start of every message).
pub fn label(flag: &str, path: &Path) -> String {
    if flag.is_empty() {
        path.display().to_string()
    } else {
        format!("{flag} {}", path.display())
    }
}

/// "a FIFO", "a directory", ...: what a non-regular file is, for a message.
pub fn kind(t: FileType) -> &'static str {
    type Is = fn(&FileType) -> bool;
    const KINDS: [(Is, &str); 7] = [
        (FileType::is_symlink, "a symbolic link"),
        (FileType::is_dir, "a directory"),
        (FileType::is_fifo, "a FIFO"),
        (FileType::is_char_device, "a character device"),
        (FileType::is_block_device, "a block device"),
        (FileType::is_socket, "a socket"),
        (FileType::is_file, "a regular file"),
    ];
    KINDS
        .iter()
        .find(|(is, _)| is(&t))
        .map_or("not a regular file", |&(_, name)| name)
}

fn refused_link(label: &str) -> FileError {
    FileError::Refused(format!(
        "{label}: is a symbolic link; usermm writes no file through a link (it opens with \
         O_NOFOLLOW): name the file itself"
    ))
}

fn refused_kind(label: &str, t: FileType) -> FileError {
    FileError::Refused(format!(
        "{label}: is {}, not a regular file: name a file",
        kind(t)
    ))
}

/// An `io::Error` of an operation on `label`'s path as a [`FileError`]: a path through
/// something that is not a directory (`/dev/null/x`) is refused, the rest are `Io`.
fn io_err(label: &str, e: io::Error) -> FileError {
    if e.raw_os_error() == Some(libc::ENOTDIR) {
        FileError::Refused(format!(
            "{label}: a directory on the path is not a directory"
        ))
    } else if e.raw_os_error() == Some(libc::ELOOP) {
        refused_link(label)
    } else {
        FileError::Io(label.to_string(), e)
    }
}

/// What is at `path`, without following a final link: `None` when nothing is, the metadata
/// when it is a regular file; refused when it is a link or anything but a regular file.
pub fn check_output(label: &str, path: &Path) -> Result<Option<Metadata>> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(label, e)),
        Ok(m) if m.file_type().is_symlink() => Err(refused_link(label)),
        Ok(m) if m.is_file() => Ok(Some(m)),
        Ok(m) => Err(refused_kind(label, m.file_type())),
    }
}

/// The directory `path` is in (`.` for a bare name).
pub fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Create the directories up to `path`'s parent (`mkdir -p`), for the commands whose help
/// says that they do.
pub fn create_parent(label: &str, path: &Path) -> Result<()> {
    create_dir_all(label, parent(path))
}

/// Create the directory `dir` and its parents (`mkdir -p`): a path through something that
/// is not a directory is refused, as everywhere here.
pub fn create_dir_all(label: &str, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| io_err(label, e))
}

/// What is at `path`, following links: `None` when nothing is; a path through something
/// that is not a directory is refused.
pub fn metadata(label: &str, path: &Path) -> Result<Option<Metadata>> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(label, e)),
        Ok(m) => Ok(Some(m)),
    }
}

/// Write `bytes` as the whole of `path`: into a new file beside it, then `rename`d over it.
/// The directory must exist; `path` must be nothing yet or a regular file (not a link).
pub fn write_atomic(label: &str, path: &Path, bytes: &[u8]) -> Result<()> {
    let old = check_output(label, path)?;
    let Some(name) = path.file_name() else {
        return Err(FileError::Refused(format!("{label}: names no file")));
    };
    let dir = parent(path);
    let mode = old.as_ref().map(|m| m.permissions().mode() & 0o7777);
    let (mut file, tmp) = cleanup::create_file(dir, name, |p| {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(0o666)
            .open(p)
    })
    .map_err(|e| io_err(label, e))?;
    let write = |file: &mut File| -> io::Result<()> {
        file.write_all(bytes)?;
        if let Some(mode) = mode {
            file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
        file.sync_all()
    };
    write(&mut file).map_err(|e| io_err(label, e))?;
    drop(file);
    tmp.rename_to(path).map_err(|e| io_err(label, e))
}

/// A file [`open_locked`] took: it derefs to the `File`, and dropping it unlocks the file
/// (`LOCK_UN`) before closing it.
///
/// Closing alone would not do: a `flock` lock belongs to the open file description, and a
/// child forked meanwhile (a host measurement, a usemem process, a fork probe) holds a copy
/// of the descriptor until it exits, so the lock would outlive the `File` by as long as the
/// child lives. `LOCK_UN` through any copy ends it for all of them.
#[derive(Debug)]
pub struct LockedFile(File);

impl std::ops::Deref for LockedFile {
    type Target = File;
    fn deref(&self) -> &File {
        &self.0
    }
}

impl std::ops::DerefMut for LockedFile {
    fn deref_mut(&mut self) -> &mut File {
        &mut self.0
    }
}

impl Drop for LockedFile {
    fn drop(&mut self) {
        // An error here would leave the lock to the last close, as without the unlock.
        let _ = crate::sys::unlock(&self.0);
    }
}

/// Open `path` for this run alone: created if missing (mode 0666 less the umask), never
/// truncated, never through a link, refused unless a regular file, then `flock`ed
/// exclusively without waiting (refused when another process holds it). With `append`,
/// writes go to the end. The lock lasts as long as the [`LockedFile`], whatever children
/// were forked meanwhile.
pub fn open_locked(label: &str, path: &Path, append: bool) -> Result<LockedFile> {
    check_output(label, path)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .append(append)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .mode(0o666)
        .open(path)
        .map_err(|e| io_err(label, e))?;
    let t = file.metadata().map_err(|e| io_err(label, e))?.file_type();
    if !t.is_file() {
        return Err(refused_kind(label, t));
    }
    match crate::try_lock_exclusive(&file) {
        Ok(true) => Ok(LockedFile(file)),
        Ok(false) => Err(FileError::Refused(format!(
            "{label}: another usermm run holds it locked (it is writing there); wait for it to \
             end, or name another"
        ))),
        Err(e) => Err(io_err(label, e)),
    }
}

/// The whole of a file opened with [`open_locked`] (its position moves; appends still go to
/// the end).
pub fn read_all(label: &str, file: &mut File) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_end(&mut bytes))
        .map_err(|e| io_err(label, e))?;
    Ok(bytes)
}

/// The bytes of the regular file at `path` (a link to one is followed: this is for files the
/// user names as input): anything else is refused before it is read, and a FIFO put there
/// after the check cannot block the open.
pub fn read_regular(label: &str, path: &Path) -> Result<Vec<u8>> {
    let t = std::fs::metadata(path)
        .map_err(|e| io_err(label, e))?
        .file_type();
    if !t.is_file() {
        return Err(refused_kind(label, t));
    }
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| io_err(label, e))?;
    let t = file.metadata().map_err(|e| io_err(label, e))?.file_type();
    if !t.is_file() {
        return Err(refused_kind(label, t));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|e| io_err(label, e))?;
    Ok(bytes)
}

/// Append `line` to `path` in one `write` (usemem's pid file): created if missing (mode 0666
/// less the umask), never through a link (`ELOOP`), refused unless a regular file (`EISDIR`
/// for a directory, `EINVAL` for the rest) whose bytes so far `accept` takes (else an error
/// saying `refused`), `EIO` for a short write. Errors carry an errno where there is one, for
/// usemem's `perror`-style message.
pub fn append_once(
    path: &Path,
    line: &[u8],
    accept: impl Fn(&[u8]) -> bool,
    refused: &str,
) -> io::Result<()> {
    let not_regular = |t: FileType| {
        io::Error::from_raw_os_error(if t.is_dir() {
            libc::EISDIR
        } else {
            libc::EINVAL
        })
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(io::Error::from_raw_os_error(libc::ELOOP))
        }
        Ok(m) if !m.is_file() => return Err(not_regular(m.file_type())),
        _ => {}
    }
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .mode(0o666)
        .open(path)?;
    let t = file.metadata()?.file_type();
    if !t.is_file() {
        return Err(not_regular(t));
    }
    let mut before = Vec::new();
    file.read_to_end(&mut before)?;
    if !accept(&before) {
        return Err(io::Error::other(refused.to_string()));
    }
    match file.write(line)? {
        n if n == line.len() => Ok(()),
        _ => Err(io::Error::from_raw_os_error(libc::EIO)),
    }
}

#[cfg(test)]
mod test;
