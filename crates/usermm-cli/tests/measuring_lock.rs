//! The commands that measure this host (`calibrate`, `bench`, `reproduce`'s host check)
//! take one lock, so that two never measure at once: while another holds it, each refuses
//! in one line before measuring anything, and says why. (The lock is held here by the test
//! itself, in a runtime directory of its own: nothing is measured.)

mod common;

use std::os::fd::AsFd;

#[test]
fn a_second_measuring_command_refuses_while_one_measures() {
    let dir = std::env::temp_dir().join(format!("usermm-measuring-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lock = std::fs::File::create(dir.join("usermm-measuring.lock")).unwrap();
    rustix::fs::flock(
        lock.as_fd(),
        rustix::fs::FlockOperation::NonBlockingLockExclusive,
    )
    .unwrap();
    let out = dir.join("report");
    let out = out.to_str().unwrap();
    let profile = dir.join("x.toml");
    let profile = profile.to_str().unwrap();
    for args in [
        &[
            "calibrate",
            "--test-sizes",
            "--repeat",
            "1",
            "--out",
            profile,
        ][..],
        &["bench", "--size", "4M"],
        &["reproduce", "--only", "host-check", "--out", out],
    ] {
        let o = common::usermm_env(args, &[("XDG_RUNTIME_DIR", dir.to_str().unwrap())]);
        let err = common::stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains("another usermm command is measuring this host"),
            "{args:?}: {err}"
        );
        assert!(
            !std::path::Path::new(out).exists(),
            "{args:?} wrote a report"
        );
    }
    assert!(!dir.join("x.toml").exists());
    drop(lock);
    std::fs::remove_dir_all(&dir).unwrap();
}
