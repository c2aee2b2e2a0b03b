//! Forking a child from a multi-threaded process, and looking after it: liveness, waiting
//! on its fds with a deadline, killing and reaping.
//!
//! Both kinds of host child are [`ChildProc`]s: the differential backend's request server
//! (`backend/child.rs`) and the measurement workloads (`measure.rs`). The parent of a test run
//! or of `usermm` is multi-threaded, so POSIX allows the child only async-signal-safe calls
//! until it exits; [`ChildProc::fork`] states that contract and everything the children run is
//! written to it (raw system calls through `sys` on memory allocated before the fork).
//!
//! A `ChildProc` is killed and reaped when dropped; once reaped its pid is never signalled
//! again (it may belong to another process by then).

#![expect(unsafe_code)]

use std::time::{Duration, Instant};

use crate::error::HostError;
use crate::sys;

/// How long the parent waits on a child between liveness checks.
const POLL_SLICE: Duration = Duration::from_millis(200);

/// A child process we forked and have not reaped yet (or have).
#[derive(Debug)]
pub(crate) struct ChildProc {
    pid: libc::pid_t,
    /// Set once reaped: the pid may then belong to someone else and must not be signalled.
    exit: Option<String>,
}

impl ChildProc {
    /// Fork; the child runs `f` and then `_exit(0)`s. The child is killed with SIGKILL when
    /// the process that forked it dies (`PR_SET_PDEATHSIG`), and ends at once if that already
    /// happened: a measurement must not run on, orphaned, after a Ctrl-C of `calibrate` or
    /// `reproduce`.
    ///
    /// # Safety
    /// `f` runs in a child forked from a possibly multi-threaded process: it must be
    /// async-signal-safe (raw system calls on memory allocated before the fork; no allocation,
    /// no locks, no stdio, no panics).
    pub(crate) unsafe fn fork<F: FnOnce()>(f: F) -> Result<ChildProc, HostError> {
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: forwarded to our caller's contract on `f`.
        match unsafe { sys::fork() } {
            Err(errno) => Err(HostError::Sys {
                what: "fork",
                errno,
            }),
            Ok(0) => {
                sys::set_parent_death_signal(libc::SIGKILL);
                // SAFETY: getppid has no preconditions.
                if unsafe { libc::getppid() } != parent {
                    sys::exit_now(1);
                }
                f();
                sys::exit_now(0)
            }
            Ok(pid) => Ok(ChildProc { pid, exit: None }),
        }
    }

    pub(crate) fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// `Err(reason)` if the child has exited (it is reaped then).
    pub(crate) fn check_alive(&mut self) -> Result<(), String> {
        if let Some(e) = &self.exit {
            return Err(e.clone());
        }
        if let Some(status) = sys::waitpid(self.pid, true) {
            let why = format!("child {} {}", self.pid, sys::describe_status(status));
            self.exit = Some(why.clone());
            return Err(why);
        }
        Ok(())
    }

    /// Wait until `fd` is ready for `events`, checking every [`POLL_SLICE`] that the child lives
    /// and that `deadline` has not passed (then the child is killed).
    pub(crate) fn wait_fd(
        &mut self,
        fd: sys::Fd,
        events: libc::c_short,
        deadline: Instant,
    ) -> Result<(), String> {
        loop {
            match sys::poll1(fd, events, POLL_SLICE) {
                Ok(0) => {}
                Ok(rev) if rev & (events | libc::POLLHUP | libc::POLLERR) != 0 => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(format!("poll: errno {e}")),
            }
            self.check_alive()?;
            if Instant::now() >= deadline {
                self.kill_and_reap();
                let why = format!("child {} did not answer in time and was killed", self.pid);
                self.exit = Some(why.clone());
                return Err(why);
            }
        }
    }

    /// The child closed its end: collect its exit status (killing it if it lingers).
    pub(crate) fn reap_after_eof(&mut self) -> String {
        if let Some(e) = &self.exit {
            return e.clone();
        }
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until {
            if self.check_alive().is_err() {
                return self.exit.clone().unwrap_or_default();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.kill_and_reap();
        let why = format!("child {} closed its socket and was killed", self.pid);
        self.exit = Some(why.clone());
        why
    }

    /// SIGKILL and reap (no-op once reaped).
    pub(crate) fn kill_and_reap(&mut self) {
        if self.exit.is_some() {
            return;
        }
        sys::kill(self.pid, libc::SIGKILL);
        let status = sys::waitpid(self.pid, false);
        self.exit = Some(match status {
            Some(s) => format!("child {} {}", self.pid, sys::describe_status(s)),
            None => format!("child {} could not be reaped", self.pid),
        });
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        self.kill_and_reap();
    }
}

#[cfg(test)]
mod test {
    use super::*;

    /// A forked child dies with the process that forked it: a measurement does not run on,
    /// orphaned, after its parent is gone (a Ctrl-C of `calibrate` left one at 500 MB). A
    /// middle process forks the measurement and dies; this test process, made the orphans'
    /// reaper, sees the measurement killed.
    #[test]
    fn a_child_dies_with_the_process_that_forked_it() {
        // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer flag and nothing else.
        let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        assert_eq!(r, 0);
        // The middle process writes the measurement's pid into a pipe: this process must
        // wait for that pid alone, as `waitpid(-1)` would reap children other tests forked.
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        let [rd, wr] = fds;
        // SAFETY: the middle process forks (raw system calls), writes a pid from its stack into
        // the pipe, and exits; the measurement only sleeps until it is killed.
        let mut middle = unsafe {
            ChildProc::fork(move || {
                let child = ChildProc::fork(|| loop {
                    libc::pause();
                });
                let pid = child.as_ref().map_or(0, ChildProc::pid);
                std::mem::forget(child);
                let bytes = pid.to_ne_bytes();
                libc::write(wr, bytes.as_ptr().cast(), bytes.len());
                // Give the measurement time to ask for its death signal (one that finds its
                // parent gone already ends at once, with status 1).
                let pause = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 200_000_000,
                };
                libc::nanosleep(&pause, std::ptr::null_mut());
                sys::exit_now(0);
            })
        }
        .unwrap();
        let status = sys::waitpid(middle.pid(), false).expect("the middle process is ours");
        middle.exit = Some("reaped".into());
        assert_eq!(libc::WEXITSTATUS(status), 0);
        let mut bytes = [0u8; 4];
        // SAFETY: `bytes` has room for the 4 bytes read; `rd` is this test's pipe.
        let n = unsafe { libc::read(rd, bytes.as_mut_ptr().cast(), bytes.len()) };
        // SAFETY: both ends are this test's own, closed once.
        unsafe {
            libc::close(rd);
            libc::close(wr);
        }
        assert_eq!(n, 4);
        let pid = libc::pid_t::from_ne_bytes(bytes);
        assert!(pid > 0, "the middle process could not fork");
        // The orphaned measurement is reparented to this process and must end, killed.
        let status = sys::waitpid(pid, false).expect("the orphan came back to this reaper");
        assert!(
            libc::WIFSIGNALED(status),
            "{}",
            sys::describe_status(status)
        );
        assert_eq!(libc::WTERMSIG(status), libc::SIGKILL);
    }

    /// The lock of a file [`crate::files::open_locked`] took ends when the `LockedFile` is
    /// dropped, even while a child forked meanwhile holds a copy of its descriptor. (CI once
    /// saw a second `open_locked` refused after the first was dropped: a concurrent test's
    /// forked child still had the copy, and closing alone does not end a `flock` lock.)
    #[test]
    fn a_locked_file_unlocks_when_dropped_though_a_forked_child_holds_its_descriptor() {
        let dir = std::env::temp_dir().join(format!("usermm-fork-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.lock");
        let held = crate::files::open_locked("--out", &path, false).unwrap();
        // SAFETY: the child only sleeps until it is killed.
        let mut child = unsafe {
            ChildProc::fork(|| loop {
                libc::pause();
            })
        }
        .unwrap();
        drop(held);
        let again = crate::files::open_locked("--out", &path, false);
        assert!(
            child.check_alive().is_ok(),
            "the child kept its copy throughout"
        );
        drop(again.expect("the lock ended with the LockedFile"));
        drop(child);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
