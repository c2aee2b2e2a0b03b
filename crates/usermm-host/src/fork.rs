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
    /// Fork; the child runs `f` and then `_exit(0)`s.
    ///
    /// # Safety
    /// `f` runs in a child forked from a possibly multi-threaded process: it must be
    /// async-signal-safe (raw system calls on memory allocated before the fork; no allocation,
    /// no locks, no stdio, no panics).
    pub(crate) unsafe fn fork<F: FnOnce()>(f: F) -> Result<ChildProc, HostError> {
        // SAFETY: forwarded to our caller's contract on `f`.
        match unsafe { sys::fork() } {
            Err(errno) => Err(HostError::Sys {
                what: "fork",
                errno,
            }),
            Ok(0) => {
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
