//! Running the `usermm` binary from a test, and the one shape of a usage error: shared by the
//! CLI's test files (each includes it with `mod common;`; a file uses what it needs).

#![allow(dead_code)]

use std::process::{Command, Output, Stdio};

pub fn usermm(args: &[&str]) -> Output {
    usermm_env(args, &[])
}

/// `usermm` with extra environment variables; stdin is empty and no backtrace is asked for.
pub fn usermm_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_usermm"));
    c.args(args)
        .stdin(Stdio::null())
        .env_remove("RUST_BACKTRACE");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("cannot run usermm")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("stdout is UTF-8")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("stderr is UTF-8")
}

/// Bytes as text, invalid UTF-8 replaced (for output that may carry escaped control bytes).
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Exit status 2, nothing on stdout, and exactly one `usermm: error:` line on stderr that
/// mentions `mentions`.
#[track_caller]
pub fn assert_usage_error(args: &[&str], mentions: &str) {
    let o = usermm(args);
    assert_one_line(&o, args, mentions);
}

/// [`assert_usage_error`] on an output already taken (`args` names it in messages).
#[track_caller]
pub fn assert_one_line(o: &Output, args: &[&str], mentions: &str) {
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(o.stdout.is_empty(), "{args:?} printed on stdout");
    assert_eq!(err.lines().count(), 1, "{args:?}: not one line: {err}");
    assert!(err.starts_with("usermm: error: "), "{args:?}: {err}");
    assert!(
        err.contains(mentions),
        "{args:?}: '{mentions}' not in {err}"
    );
}

/// `usermm ARGS` in `cwd` (or here), stopped with SIGKILL and failed if it runs longer than
/// `secs`: for inputs that used to block (a FIFO, `/dev/zero`).
#[track_caller]
pub fn usermm_within(args: &[&str], cwd: Option<&std::path::Path>, secs: u64) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_usermm"));
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("RUST_BACKTRACE");
    if let Some(d) = cwd {
        c.current_dir(d);
    }
    let child = c.spawn().expect("cannot run usermm");
    let pid = rustix::process::Pid::from_child(&child);
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let killer = std::thread::spawn(move || {
        let late = rx
            .recv_timeout(std::time::Duration::from_secs(secs))
            .is_err();
        if late {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        late
    });
    let out = child.wait_with_output().expect("cannot wait for usermm");
    let _ = tx.send(());
    assert!(
        !killer.join().unwrap(),
        "{args:?} ran for more than {secs} s (blocked?)"
    );
    out
}

/// Make a FIFO at `path`.
pub fn mkfifo(path: &std::path::Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .expect("mkfifo");
}

/// `usermm reproduce --only ONLY TEST_SIZES --json --out OUT`, which must succeed: its JSON
/// record (the sections that run at tiny sizes for tests).
pub fn reproduce_json(only: &str, test_sizes: &str, out: &std::path::Path) -> serde_json::Value {
    let o = usermm(&[
        "reproduce",
        "--only",
        only,
        test_sizes,
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}
