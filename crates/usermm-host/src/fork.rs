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
        let shared = std::sync::Arc::new(std::sync::atomic::AtomicI32::new(0));
        let slot = std::sync::Arc::clone(&shared);
        // SAFETY: the middle process forks (raw system calls), stores a pid in an atomic
        // allocated before the fork (its own copy: the parent reads the pid from the exit
        // status instead), and exits; the measurement only sleeps until it is killed.
        let mut middle = unsafe {
            ChildProc::fork(move || {
                let child = ChildProc::fork(|| loop {
                    libc::pause();
                });
                let pid = child.as_ref().map_or(0, ChildProc::pid);
                slot.store(pid, std::sync::atomic::Ordering::Relaxed);
                std::mem::forget(child);
                // Give the measurement time to ask for its death signal (one that finds its
                // parent gone already ends at once, with status 1).
                let pause = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 200_000_000,
                };
                libc::nanosleep(&pause, std::ptr::null_mut());
                // The pid, as the exit status cannot carry it: 0 means the fork failed.
                sys::exit_now(i32::from(pid != 0));
            })
        }
        .unwrap();
        let status = sys::waitpid(middle.pid(), false).expect("the middle process is ours");
        middle.exit = Some("reaped".into());
        assert_eq!(
            libc::WEXITSTATUS(status),
            1,
            "the middle process could not fork"
        );
        // The orphaned measurement is reparented to this process and must end, killed.
        let status = loop {
            let mut st = 0;
            // SAFETY: `st` is a valid int to write the status into.
            let pid = unsafe { libc::waitpid(-1, &mut st, 0) };
            assert!(pid > 0, "no orphan came back to this reaper");
            if pid != middle.pid() {
                break st;
            }
        };
        assert!(
            libc::WIFSIGNALED(status),
            "{}",
            sys::describe_status(status)
        );
        assert_eq!(libc::WTERMSIG(status), libc::SIGKILL);
        drop(shared);
    }
}
