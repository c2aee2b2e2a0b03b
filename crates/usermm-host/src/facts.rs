//! Facts about the host: the one reader of each host file or call that the workloads, the
//! reports and the differential tests need.
//!
//! | fact | source | reader |
//! |---|---|---|
//! | kernel release | `uname(2)` | [`kernel_release`] |
//! | memory | `/proc/meminfo` | [`meminfo_kb`] (and [`mem_total_kb`], [`mem_available_bytes`]) |
//! | THP mode | `/sys/kernel/mm/transparent_hugepage/{enabled,defrag}` | [`thp_enabled`], [`thp_defrag`] |
//! | map limit | `/proc/sys/vm/max_map_count` | [`max_map_count`] |
//! | overcommit | `/proc/sys/vm/overcommit_memory` | [`overcommit`] |
//! | CPUs this process may run on | `sched_getaffinity` (`available_parallelism`) | [`usable_cpus`] |
//! | load | `/proc/loadavg` | [`loadavg_1min`] |
//! | CPU time, idle and busy | `/proc/stat` | [`cpu_idle_busy`] |
//! | steal time | `/proc/stat` | [`cpu_steal_total`] |
//! | context switches | `getrusage(RUSAGE_SELF)` | [`context_switches`] |
//! | process CPU time | `getrusage(RUSAGE_SELF)` | [`process_cpu_ns`] |
//! | resource limits, privilege | `getrlimit`, `geteuid` | [`memlock_limit`], [`stack_limit`], [`is_root`] |
//! | the date | `CLOCK_REALTIME` | [`utc_now`] (through [`civil_from_days`]) |
//!
//! Every reader returns `None` when its file or call is unavailable; callers choose their
//! placeholder. [`facts`] gathers the set a report prints ([`HostFacts`]).

use serde::{Deserialize, Serialize};

use crate::{procfs, sys};

/// What a report needs to know about the machine the host numbers came from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct HostFacts {
    /// `uname -r`.
    pub kernel_release: String,
    /// Online CPUs.
    pub nr_cpus: u32,
    /// `MemTotal` from `/proc/meminfo`.
    pub mem_total_kb: u64,
    /// The selected word of `/sys/kernel/mm/transparent_hugepage/enabled` ("always", "madvise",
    /// "never"), or "unavailable".
    pub thp_enabled: String,
    /// The selected word of `/sys/kernel/mm/transparent_hugepage/defrag`, or "unavailable".
    pub thp_defrag: String,
    /// `vm.overcommit_memory` (0, 1, 2), if readable.
    pub overcommit: Option<u32>,
    /// The base page size.
    pub page_size: u64,
}

/// Collect [`HostFacts`] (never fails: unreadable items get placeholder values).
pub fn facts() -> HostFacts {
    let unavailable = || "unavailable".to_string();
    HostFacts {
        kernel_release: kernel_release().unwrap_or_else(|| "unknown".to_string()),
        nr_cpus: sys::sysconf(libc::_SC_NPROCESSORS_ONLN)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        mem_total_kb: mem_total_kb().unwrap_or(0),
        thp_enabled: thp_enabled().unwrap_or_else(unavailable),
        thp_defrag: thp_defrag().unwrap_or_else(unavailable),
        overcommit: overcommit(),
        page_size: sys::sysconf(libc::_SC_PAGESIZE).unwrap_or(crate::ops::PAGE_SIZE),
    }
}

/// The host CPUs this process may run on (`std::thread::available_parallelism`: the affinity
/// mask, cgroup quota considered), the one count of host threads every workload and report
/// sizes itself by. 1 when the host will not say: one thread always runs.
pub fn usable_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// `uname -r`.
pub fn kernel_release() -> Option<String> {
    let mut buf = [0u8; 65];
    let release = sys::uname_release(&mut buf)?;
    Some(String::from_utf8_lossy(release).into_owned())
}

/// The `key` line of `/proc/meminfo` (`"MemTotal"`, `"MemAvailable"`, ...), in kB.
pub fn meminfo_kb(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    procfs::field_kb(text.as_bytes(), format!("{key}:").as_bytes())
}

/// `MemTotal`, kB.
pub fn mem_total_kb() -> Option<u64> {
    meminfo_kb("MemTotal")
}

/// `MemAvailable`, bytes.
pub fn mem_available_bytes() -> Option<u64> {
    meminfo_kb("MemAvailable").map(|kb| kb.saturating_mul(1024))
}

fn sysfs_choice(path: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    procfs::selected_word(&text).map(str::to_string)
}

/// The selected word of `/sys/kernel/mm/transparent_hugepage/enabled`.
pub fn thp_enabled() -> Option<String> {
    sysfs_choice("/sys/kernel/mm/transparent_hugepage/enabled")
}

/// The selected word of `/sys/kernel/mm/transparent_hugepage/defrag`.
pub fn thp_defrag() -> Option<String> {
    sysfs_choice("/sys/kernel/mm/transparent_hugepage/defrag")
}

fn sysctl<T: std::str::FromStr>(path: &str) -> Option<T> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `vm.max_map_count`.
pub fn max_map_count() -> Option<u32> {
    sysctl("/proc/sys/vm/max_map_count")
}

/// `vm.overcommit_memory`.
pub fn overcommit() -> Option<u32> {
    sysctl("/proc/sys/vm/overcommit_memory")
}

/// The 1-minute load average, the first field of `/proc/loadavg`.
pub fn loadavg_1min() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The machine's CPU time so far as `/proc/stat`'s `cpu` line counts it, in jiffies:
/// `(idle, busy)` with idle = idle + iowait and busy = user + nice + system + irq + softirq +
/// steal + guest + guest_nice (will-it-scale's `runtest.py` splits it so).
pub fn cpu_idle_busy() -> Option<(u64, u64)> {
    let f = cpu_line()?;
    Some((
        f(3) + f(4),
        f(0) + f(1) + f(2) + f(5) + f(6) + f(7) + f(8) + f(9),
    ))
}

/// `/proc/stat`'s `cpu` line as a reader of its fields by index (0: user ... 7: steal).
fn cpu_line() -> Option<impl Fn(usize) -> u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some("cpu"))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    Some(move |i: usize| v.get(i).copied().unwrap_or(0))
}

/// The machine's steal time so far and its whole CPU time (user + nice + system + idle +
/// iowait + irq + softirq + steal; guest time is inside user), in jiffies: the share of the
/// time a hypervisor gave this guest's CPUs to someone else, between two readings.
pub fn cpu_steal_total() -> Option<(u64, u64)> {
    let f = cpu_line()?;
    Some((f(7), (0..8).map(f).sum()))
}

/// `RLIMIT_MEMLOCK`'s soft limit, bytes (`u64::MAX`: unlimited).
pub fn memlock_limit() -> Option<u64> {
    sys::rlimit_soft(libc::RLIMIT_MEMLOCK)
}

/// `RLIMIT_STACK`'s soft limit, bytes (`u64::MAX`: unlimited).
pub fn stack_limit() -> Option<u64> {
    sys::rlimit_soft(libc::RLIMIT_STACK)
}

/// The effective user id (`geteuid`).
pub fn euid() -> u32 {
    sys::geteuid()
}

/// Is this process privileged (effective UID 0: no mlock limit, `mmap_min_addr` waived)?
pub fn is_root() -> bool {
    sys::geteuid() == 0
}

/// Context switches of this process so far (`getrusage(RUSAGE_SELF)`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContextSwitches {
    /// `ru_nivcsw`: the scheduler took the CPU away (other load on the host).
    pub involuntary: u64,
    /// `ru_nvcsw`: a thread gave the CPU up (blocked, e.g. sleeping on a contended lock).
    pub voluntary: u64,
}

/// [`ContextSwitches`] of this process (zeros if `getrusage` fails).
pub fn context_switches() -> ContextSwitches {
    let ru = sys::rusage_self();
    ContextSwitches {
        involuntary: ru.ru_nivcsw.max(0) as u64,
        voluntary: ru.ru_nvcsw.max(0) as u64,
    }
}

/// CPU time of this process so far, every thread's user and system time (`ru_utime` +
/// `ru_stime`), in ns; 0 if `getrusage` fails. What `/usr/bin/time -f %U+%S` shows of a whole
/// run: the host cost of a workload whatever threads it ran on.
pub fn process_cpu_ns() -> u64 {
    let ru = sys::rusage_self();
    let ns =
        |t: libc::timeval| t.tv_sec.max(0) as u64 * 1_000_000_000 + t.tv_usec.max(0) as u64 * 1000;
    ns(ru.ru_utime) + ns(ru.ru_stime)
}

/// Now by the host's clock, UTC, as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_782), (2026, 11, 25));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn host_facts_are_sane() {
        let f = facts();
        assert!(f.nr_cpus >= 1);
        assert!(f.mem_total_kb > 0);
        assert_eq!(f.page_size, 4096);
        assert!(!f.kernel_release.is_empty());
        assert_eq!(mem_total_kb(), Some(f.mem_total_kb));
        assert!(mem_available_bytes().is_some_and(|a| a <= f.mem_total_kb * 1024));
        let t0 = process_cpu_ns();
        let spin: u64 = (0..2_000_000u64).map(std::hint::black_box).sum();
        assert!(spin > 0 && process_cpu_ns() >= t0 && t0 > 0);
        assert!(loadavg_1min().is_some_and(|l| l >= 0.0));
        serde_json::to_string(&f).unwrap();
    }
}
