use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use super::*;

/// A fresh directory of this test's own.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("usermm-files-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn mkfifo(p: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        p,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
}

/// Nothing but the named entries is in `d` (no temporary file is left).
fn only(d: &Path, names: &[&str]) {
    let mut got: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    got.sort();
    let mut want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn write_atomic_replaces_a_file_whole_and_keeps_its_mode() {
    let d = scratch("atomic");
    let f = d.join("out.toml");
    write_atomic("--out", &f, b"first\n").unwrap();
    assert_eq!(std::fs::read(&f).unwrap(), b"first\n");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    let before = std::fs::metadata(&f).unwrap();
    write_atomic("--out", &f, b"second\n").unwrap();
    let after = std::fs::metadata(&f).unwrap();
    assert_eq!(std::fs::read(&f).unwrap(), b"second\n");
    assert_eq!(after.permissions().mode() & 0o7777, 0o600);
    // A new inode: the old file was replaced, not truncated in place.
    use std::os::unix::fs::MetadataExt;
    assert_ne!(before.ino(), after.ino());
    only(&d, &["out.toml"]);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn write_atomic_refuses_links_and_what_is_not_a_regular_file() {
    let d = scratch("refuse");
    let user = d.join("thesis.tex");
    std::fs::write(&user, b"mine\n").unwrap();
    let link = d.join("link");
    std::os::unix::fs::symlink(&user, &link).unwrap();
    let e = write_atomic(&label("--out", &link), &link, b"x").unwrap_err();
    assert!(e.is_refusal(), "{e}");
    assert!(e.to_string().contains("O_NOFOLLOW"), "{e}");
    let named = format!("--out {}: is a symbolic link", link.display());
    assert!(e.to_string().starts_with(&named), "{e}");
    // A dangling link too: nothing is created where it points.
    let dangling = d.join("dangling");
    std::os::unix::fs::symlink(d.join("nowhere"), &dangling).unwrap();
    assert!(write_atomic("--out", &dangling, b"x")
        .unwrap_err()
        .is_refusal());
    assert!(!d.join("nowhere").exists());
    let fifo = d.join("fifo");
    mkfifo(&fifo);
    let e = write_atomic("--out", &fifo, b"x").unwrap_err();
    assert!(e.to_string().contains("a FIFO"), "{e}");
    let e = write_atomic("--out", &d, b"x").unwrap_err();
    assert!(e.to_string().contains("a directory"), "{e}");
    let e = write_atomic("--out", Path::new("/dev/null"), b"x").unwrap_err();
    assert!(e.to_string().contains("a character device"), "{e}");
    let e = write_atomic("--out", Path::new("/dev/null/x"), b"x").unwrap_err();
    assert!(e.is_refusal(), "{e}");
    assert_eq!(std::fs::read(&user).unwrap(), b"mine\n");
    only(&d, &["thesis.tex", "link", "dangling", "fifo"]);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn open_locked_never_truncates_follows_or_shares() {
    let d = scratch("lock");
    let f = d.join("out.jsonl");
    std::fs::write(&f, b"line\n").unwrap();
    let mut held = open_locked("--out", &f, true).unwrap();
    assert_eq!(read_all("--out", &mut held).unwrap(), b"line\n");
    held.write_all(b"more\n").unwrap();
    assert_eq!(std::fs::read(&f).unwrap(), b"line\nmore\n");
    // Another open file description cannot take it while `held` lives, and can after.
    let e = open_locked("--out", &f, true).unwrap_err();
    assert!(
        e.is_refusal() && e.to_string().contains("another usermm run"),
        "{e}"
    );
    drop(held);
    drop(open_locked("--out", &f, true).unwrap());
    let user = d.join("v");
    std::fs::write(&user, b"data\n").unwrap();
    let link = d.join(".r.lock");
    std::os::unix::fs::symlink(&user, &link).unwrap();
    assert!(open_locked("--out", &link, false).unwrap_err().is_refusal());
    let fifo = d.join("fifo");
    mkfifo(&fifo);
    assert!(open_locked("--out", &fifo, true).unwrap_err().is_refusal());
    assert_eq!(std::fs::read(&user).unwrap(), b"data\n");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn read_regular_refuses_devices_and_fifos_without_blocking() {
    let d = scratch("read");
    let fifo = d.join("fifo");
    mkfifo(&fifo);
    assert!(read_regular("--merge", &fifo).unwrap_err().is_refusal());
    assert!(read_regular("--merge", Path::new("/dev/zero"))
        .unwrap_err()
        .is_refusal());
    assert!(read_regular("--merge", &d.join("none"))
        .unwrap_err()
        .is_not_found());
    let f = d.join("f");
    std::fs::write(&f, b"abc").unwrap();
    let link = d.join("link");
    std::os::unix::fs::symlink(&f, &link).unwrap();
    assert_eq!(read_regular("--merge", &link).unwrap(), b"abc");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn append_once_writes_whole_lines_and_refuses_links() {
    let d = scratch("append");
    let pf = d.join("pf");
    let pids = |b: &[u8]| b.iter().all(|c| c.is_ascii_digit() || *c == b'\n');
    let append_once = |p: &Path, line: &[u8]| append_once(p, line, pids, "not a pid file");
    append_once(&pf, b"12\n").unwrap();
    append_once(&pf, b"34\n").unwrap();
    assert_eq!(std::fs::read(&pf).unwrap(), b"12\n34\n");
    let user = d.join("notes");
    std::fs::write(&user, b"mine\n").unwrap();
    let e = append_once(&user, b"1\n").unwrap_err();
    assert_eq!(e.to_string(), "not a pid file");
    assert_eq!(std::fs::read(&user).unwrap(), b"mine\n");
    let user = d.join("v");
    std::fs::write(&user, b"data\n").unwrap();
    let link = d.join("link");
    std::os::unix::fs::symlink(&user, &link).unwrap();
    let e = append_once(&link, b"1\n").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
    let fifo = d.join("fifo");
    mkfifo(&fifo);
    assert_eq!(
        append_once(&fifo, b"1\n").unwrap_err().raw_os_error(),
        Some(libc::EINVAL)
    );
    assert_eq!(
        append_once(&d, b"1\n").unwrap_err().raw_os_error(),
        Some(libc::EISDIR)
    );
    assert_eq!(std::fs::read(&user).unwrap(), b"data\n");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_created_file_or_directory_goes_when_dropped_and_stays_when_kept() {
    let d = scratch("created");
    let (_, tmp) = cleanup::create_file(&d, OsStr::new("x"), |p| File::create_new(p)).unwrap();
    let p = tmp.path().to_path_buf();
    assert!(p.exists());
    drop(tmp);
    assert!(!p.exists());
    let dir = cleanup::create_dir(&d.join("stage")).unwrap();
    std::fs::write(dir.path().join("f"), b"x").unwrap();
    drop(dir);
    assert!(!d.join("stage").exists());
    cleanup::create_dir(&d.join("kept")).unwrap().keep();
    assert!(d.join("kept").is_dir());
    only(&d, &["kept"]);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn kind_names_each_file_type_for_a_message() {
    let d = scratch("kind");
    let (file, fifo, link) = (d.join("f"), d.join("p"), d.join("l"));
    std::fs::write(&file, b"x").unwrap();
    mkfifo(&fifo);
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let of = |p: &Path| kind(std::fs::symlink_metadata(p).unwrap().file_type());
    assert_eq!(of(&d), "a directory");
    assert_eq!(of(&file), "a regular file");
    assert_eq!(of(&fifo), "a FIFO");
    assert_eq!(of(&link), "a symbolic link");
    assert_eq!(of(Path::new("/dev/null")), "a character device");
    let _ = std::fs::remove_dir_all(&d);
}
