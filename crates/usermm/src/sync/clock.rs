//! Time as the engine reads it: `ktime_get` and a task's CPU time.
//!
//! Every duration the engine measures — lock_stat wait and hold times, the mmap lock's
//! exclusive holds, munmap's phases, the workqueue's per-item accounting — is read here, so that
//! in a virtual run (see [`vhook`]) they are virtual times, and on the host they are host times.
//!
//! | here | kernel | wall mode | virtual mode |
//! |---|---|---|---|
//! | [`now`] | `ktime_get` | `CLOCK_MONOTONIC` | the current context's clock |
//! | [`thread_cpu_ns`] | task cputime | `CLOCK_THREAD_CPUTIME_ID` | the context's busy time |
//!
//! `CLOCK_MONOTONIC` is what `std::time::Instant` reads on Linux, so wall figures are those of
//! the code before the seam.

#![allow(unsafe_code)] // fenced (lib.rs, "Unsafe"): `clock_gettime`

use super::vhook;

/// A point in time in ns (`ktime_t`): host monotonic time in wall mode, virtual time in a
/// virtual run. Only differences are meaningful.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ktime(u64);

impl Ktime {
    /// The time in ns since the clock's (arbitrary) origin.
    pub const fn as_ns(self) -> u64 {
        self.0
    }

    /// ns from `earlier` to `self`, 0 if `earlier` is later.
    pub const fn since(self, earlier: Ktime) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// ns from `self` to now.
    #[inline]
    pub fn elapsed_ns(self) -> u64 {
        now().since(self)
    }
}

/// Read one of the host's clocks, in ns.
#[inline]
fn host_clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one `timespec` through the pointer, which points to a live,
    // writable, properly aligned local; it keeps no reference to it after returning.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nsecs = u64::try_from(ts.tv_nsec).ok()?;
    Some(secs.saturating_mul(1_000_000_000).saturating_add(nsecs))
}

/// `ktime_get`: now.
#[doc(alias = "ktime_get")]
#[inline]
pub fn now() -> Ktime {
    if vhook::active() {
        if let Some(ns) = vhook::now_ns() {
            return Ktime(ns);
        }
    }
    Ktime(host_clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0))
}

/// CPU time consumed so far by the calling thread, in ns (`CLOCK_THREAD_CPUTIME_ID`; in a
/// virtual run, the current context's busy time).
///
/// Differences of two calls on one thread give the CPU time spent between them, excluding time
/// the thread was blocked or preempted. Returns 0 if the clock is unavailable.
#[doc(alias = "CLOCK_THREAD_CPUTIME_ID")]
#[doc(alias = "task_cputime")]
pub fn thread_cpu_ns() -> u64 {
    if vhook::active() {
        if let Some(ns) = vhook::thread_cpu_ns() {
            return ns;
        }
    }
    host_clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn now_is_monotonic_and_follows_the_host() {
        let a = now();
        let i = std::time::Instant::now();
        while i.elapsed() < std::time::Duration::from_millis(2) {}
        let b = now();
        assert!(b.since(a) >= 2_000_000, "{} ns", b.since(a));
        assert_eq!(a.since(b), 0);
    }

    #[test]
    fn thread_cpu_time_is_monotonic_and_per_thread() {
        let a = thread_cpu_ns();
        let b = thread_cpu_ns();
        assert!(a > 0 && b >= a);
        // A fresh thread starts near zero, far below a thread that has burnt CPU first.
        let mut x = 0u64;
        let t0 = thread_cpu_ns();
        while thread_cpu_ns() < t0 + 5_000_000 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let mine = thread_cpu_ns();
        let fresh = std::thread::spawn(thread_cpu_ns).join().unwrap();
        assert!(fresh < mine);
    }
}
