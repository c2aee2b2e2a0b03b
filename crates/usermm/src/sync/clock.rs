//! Time as the engine reads it: `ktime_get`, lock_stat's clock and a task's CPU time.
//!
//! Every duration the engine measures — lock_stat wait and hold times, the mmap lock's
//! exclusive holds, munmap's phases, the workqueue's per-item accounting — is read here, so that
//! in a virtual run (see [`vhook`]) they are virtual times, and on the host they are host times.
//!
//! | here | kernel | wall mode | virtual mode |
//! |---|---|---|---|
//! | [`now`] | `ktime_get` | `CLOCK_MONOTONIC` | the current context's clock |
//! | [`LockstatClock`] | `lockstat_clock()` (`local_clock()`) | the TSC, scaled per clock | [`now`] |
//! | [`thread_cpu_ns`] | task cputime | `CLOCK_THREAD_CPUTIME_ID` | the context's busy time |
//!
//! `CLOCK_MONOTONIC` is what `std::time::Instant` reads on Linux, so wall figures are those of
//! the code before the seam.
//!
//! # lock_stat's clock
//! Hold times are taken on the hottest paths: a page fault takes the mmap lock for read, and
//! its lock_stat stamps the acquisition and the release. Two vDSO `clock_gettime` calls were
//! half of a 4 KiB zero-page read fault (~27 ns each on this project's VM; `perf record -e
//! cpu-clock --call-graph dwarf` of `usermm usemem --readonly -j 4K 4G --thp never`). The
//! kernel's lock_stat reads `lockstat_clock()`, i.e. `local_clock()`: the TSC, scaled by
//! `sched_clock`. [`LockstatClock`] does the same: in wall mode it reads the time-stamp
//! counter (`rdtsc`, tens of cycles) and scales ticks to ns with a rate it measures against
//! `CLOCK_MONOTONIC` over its own life — until it has lived [`LOCKSTAT_CALIBRATION_NS`], each
//! conversion measures the rate so far (the slow path reads `CLOCK_MONOTONIC`); then the rate
//! is fixed. Each lock has its own clock, so there is no process-wide calibration (and two
//! machines share nothing). Where the TSC is not invariant (CPUID `0x8000_0007` EDX bit 8,
//! Linux's `nonstop_tsc`) or not x86-64, the clock reads [`now`] instead.
//!
//! In a virtual run, [`LockstatClock`] reads [`now`]: this is the one place where hold times
//! meet the host's TSC, so the virtual clock replaces it here and nowhere else. Which of the
//! two a clock reads is resolved once, when it is built for its machine
//! ([`LockstatClock::for_machine`]: a virtual machine's clocks never read the TSC), so that
//! a stamp takes one test of the clock's own flag, not that and the seam's thread-local as
//! well. A clock built on its own ([`LockstatClock::new`], a test's lock) resolves it by
//! whether it is built inside a virtual run; debug builds check that a TSC clock is never
//! read inside one.

#![expect(unsafe_code)] // fenced (lib.rs, "Unsafe"): `clock_gettime`, `rdtsc`

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

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

/// How long a [`LockstatClock`] measures its tick rate before fixing it: long enough that the
/// skew between reading the TSC and reading `CLOCK_MONOTONIC` (tens of ns) is below 1e-4 of it.
pub const LOCKSTAT_CALIBRATION_NS: u64 = 1_000_000;

/// A moment on a [`LockstatClock`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockstatStamp {
    /// Time-stamp counter ticks (wall mode, invariant TSC).
    Tsc(u64),
    /// [`now`]: `CLOCK_MONOTONIC`, or virtual time in a virtual run.
    Ktime(Ktime),
}

/// `lockstat_clock()`: the clock of lock_stat hold times, for the locks whose every
/// acquisition is stamped (`StatMutex`, the mmap lock's read side). See the module
/// documentation.
#[doc(alias = "lockstat_clock")]
#[doc(alias = "local_clock")]
#[derive(Debug)]
pub struct LockstatClock {
    /// Stamps are TSC ticks: the host has an invariant TSC and the clock belongs to a wall
    /// machine. Resolved once, at construction.
    tsc: bool,
    /// `CLOCK_MONOTONIC` ns and TSC ticks read together at construction.
    born_ns: u64,
    born_ticks: u64,
    /// ns per tick in 32.32 fixed point, once fixed; 0 while calibrating.
    rate: AtomicU64,
}

impl Default for LockstatClock {
    fn default() -> Self {
        Self::new()
    }
}

impl LockstatClock {
    /// A clock on the TSC where the host has an invariant one and this is not built inside
    /// a virtual run, on [`now`] otherwise.
    pub fn new() -> Self {
        Self::for_machine(vhook::active())
    }

    /// The clock of a machine's locks: on [`now`] for a virtual machine (`virtual_time`),
    /// whose every lock is used in its runs only; else as [`Self::new`] on the host.
    pub fn for_machine(virtual_time: bool) -> Self {
        Self::with_tsc(!virtual_time && invariant_tsc())
    }

    /// A clock on the same counter, origin and rate (once fixed) as this one: what a new
    /// lock takes from its machine's clock, so that making one costs no `cpuid` (a VM exit
    /// on a guest, microseconds: most of a fork once) and no calibration of its own.
    pub fn sibling(&self) -> Self {
        LockstatClock {
            tsc: self.tsc,
            born_ns: self.born_ns,
            born_ticks: self.born_ticks,
            rate: AtomicU64::new(self.rate.load(Relaxed)),
        }
    }

    /// A clock on the TSC (`tsc`, if the host has one at all) or on [`now`].
    fn with_tsc(tsc: bool) -> Self {
        let tsc = tsc && cfg!(target_arch = "x86_64");
        LockstatClock {
            tsc,
            born_ns: host_clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0),
            born_ticks: if tsc { rdtsc() } else { 0 },
            rate: AtomicU64::new(0),
        }
    }

    /// `lockstat_clock()`: now. One test: a clock that may be read in a virtual run does not
    /// read the TSC (see the module documentation).
    #[inline]
    pub fn now(&self) -> LockstatStamp {
        debug_assert!(
            !(self.tsc && vhook::active()),
            "a wall machine's lock_stat clock read in a virtual run"
        );
        if self.tsc {
            LockstatStamp::Tsc(rdtsc())
        } else {
            LockstatStamp::Ktime(now())
        }
    }

    /// ns from `since` to now (0 if the counter went backwards, e.g. across CPUs whose
    /// counters disagree).
    #[inline]
    pub fn elapsed_ns(&self, since: LockstatStamp) -> u64 {
        match since {
            LockstatStamp::Ktime(k) => k.elapsed_ns(),
            LockstatStamp::Tsc(t) => {
                let now = rdtsc();
                let d = now.saturating_sub(t);
                match self.rate.load(Relaxed) {
                    0 => self.elapsed_ns_calibrating(now, d),
                    rate => scale(d, rate),
                }
            }
        }
    }

    /// [`Self::elapsed_ns`] while the rate is not fixed: measure it over the life so far, and
    /// fix it once the life is long enough.
    #[cold]
    #[inline(never)]
    fn elapsed_ns_calibrating(&self, now_ticks: u64, d: u64) -> u64 {
        let life_ns = host_clock_ns(libc::CLOCK_MONOTONIC)
            .unwrap_or(0)
            .saturating_sub(self.born_ns);
        let life_ticks = now_ticks.saturating_sub(self.born_ticks);
        if life_ticks == 0 {
            return 0;
        }
        let rate = u64::try_from((u128::from(life_ns) << 32) / u128::from(life_ticks))
            .unwrap_or(u64::MAX)
            .max(1);
        if life_ns >= LOCKSTAT_CALIBRATION_NS {
            self.rate.store(rate, Relaxed);
        }
        scale(d, rate)
    }
}

/// `ticks` at `rate` (ns per tick, 32.32 fixed point), in ns.
#[inline]
fn scale(ticks: u64, rate: u64) -> u64 {
    u64::try_from((u128::from(ticks) * u128::from(rate)) >> 32).unwrap_or(u64::MAX)
}

/// The time-stamp counter.
#[cfg(target_arch = "x86_64")]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` has no preconditions: it only reads the time-stamp counter.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Never called: a [`LockstatClock`] uses the TSC only on x86-64.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn rdtsc() -> u64 {
    0
}

/// Does the CPU have an invariant TSC (constant rate in every P-, C- and T-state: CPUID
/// `0x8000_0007` EDX bit 8, Linux's `constant_tsc` + `nonstop_tsc`)?
#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    use core::arch::x86_64::__cpuid;
    // SAFETY: `cpuid` has no preconditions on x86-64 (the block is `unsafe` for toolchains
    // before `__cpuid` became a safe function).
    #[expect(unused_unsafe)]
    let (max_ext, edx) = unsafe {
        let max_ext = __cpuid(0x8000_0000).eax;
        let edx = if max_ext >= 0x8000_0007 {
            __cpuid(0x8000_0007).edx
        } else {
            0
        };
        (max_ext, edx)
    };
    max_ext >= 0x8000_0007 && edx & (1 << 8) != 0
}

#[cfg(not(target_arch = "x86_64"))]
fn invariant_tsc() -> bool {
    false
}

#[cfg(test)]
mod test {
    use super::*;

    /// A stamp taken between `t0` and `t1` and read back between `e0` and `e1` measures an
    /// interval within `[e0 - t1, e1 - t0]`, whatever the scheduler does: check `c` keeps to
    /// it, before and after its rate is fixed.
    fn agrees_with_the_monotonic_clock(c: &LockstatClock) {
        for wait_ms in [0u64, 2, 3] {
            let t0 = now();
            let s = c.now();
            let t1 = now();
            while t1.elapsed_ns() < wait_ms * 1_000_000 {
                std::hint::spin_loop();
            }
            let e0 = now();
            let held = c.elapsed_ns(s);
            let e1 = now();
            let (lo, hi) = (e0.since(t1), e1.since(t0));
            // 2 % for the rate measured so far, and 1 µs for the two clocks' reads.
            let slack = hi / 50 + 1_000;
            assert!(
                held + slack >= lo && held <= hi + slack,
                "{held} ns outside [{lo}, {hi}]"
            );
        }
    }

    #[test]
    fn lockstat_clock_agrees_with_ktime_before_and_after_calibration() {
        let c = LockstatClock::new();
        agrees_with_the_monotonic_clock(&c);
        if c.tsc {
            // Past the calibration time the rate is fixed.
            assert_ne!(c.rate.load(Relaxed), 0);
            assert_eq!(
                c.elapsed_ns(LockstatStamp::Tsc(u64::MAX)),
                0,
                "a stamp in the future is 0, not huge"
            );
        }
    }

    #[test]
    fn lockstat_clock_without_a_tsc_reads_ktime() {
        let c = LockstatClock::with_tsc(false);
        assert!(matches!(c.now(), LockstatStamp::Ktime(_)));
        agrees_with_the_monotonic_clock(&c);
    }

    #[test]
    fn each_lockstat_clock_calibrates_on_its_own() {
        let a = LockstatClock::with_tsc(true);
        if !a.tsc {
            return; // not x86-64: nothing to calibrate
        }
        let s = a.now();
        while a.rate.load(Relaxed) == 0 {
            a.elapsed_ns(s);
        }
        // A clock born after `a` fixed its rate starts calibrating from nothing.
        let b = LockstatClock::with_tsc(true);
        assert_eq!(b.rate.load(Relaxed), 0);
        assert!(b.born_ns > a.born_ns);
    }

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
