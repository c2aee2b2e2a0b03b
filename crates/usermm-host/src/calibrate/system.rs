//! What the system reports about itself: CPU model and clock, kernel, caches, SMT layout,
//! sockets, nodes, THP mode — read from `/proc` and `/sys`, never measured — and which CPU is
//! least loaded right now (`/proc/stat` idle time over a short window).

#![deny(unsafe_code)]

use std::collections::BTreeSet;
use std::fs;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One cache of CPU 0 (`/sys/devices/system/cpu/cpu0/cache/index*`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CacheLevel {
    pub level: u32,
    /// `Data`, `Instruction` or `Unified`.
    pub kind: String,
    pub size_bytes: u64,
    /// The CPUs sharing it, as the kernel lists them.
    pub shared_cpu_list: String,
}

/// The host as its kernel describes it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SystemInfo {
    /// `/proc/cpuinfo` "model name" of the first CPU.
    pub cpu_model: String,
    /// `/proc/cpuinfo` "cpu MHz" of the first CPU.
    pub cpu_mhz: f64,
    /// `uname -r`.
    pub kernel: String,
    /// Online CPUs (`/sys/devices/system/cpu/online`).
    pub online_cpus: usize,
    /// Hardware threads per core (CPU 0's `topology/thread_siblings_list`).
    pub threads_per_core: usize,
    /// Distinct `topology/physical_package_id`s of the online CPUs.
    pub sockets: usize,
    /// `/sys/devices/system/node/node*`.
    pub nodes: usize,
    pub memory_kb: u64,
    pub caches: Vec<CacheLevel>,
    pub thp_enabled: String,
    pub thp_defrag: String,
    /// `/sys/kernel/mm/transparent_hugepage/use_zero_page`.
    pub thp_use_zero_page: String,
}

fn read(path: &str) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// Parses a kernel CPU list (`0-3,8,10-11`).
pub(crate) fn parse_cpu_list(s: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<usize>().ok()),
        }
    }
    out
}

/// `4K`, `512K`, `32768K`, `16M` → bytes.
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'K' => (&s[..s.len() - 1], 1 << 10),
        'M' => (&s[..s.len() - 1], 1 << 20),
        'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

impl SystemInfo {
    /// Reads everything; a field the system does not report is empty or 0.
    pub fn read() -> SystemInfo {
        let cpuinfo = read("/proc/cpuinfo").unwrap_or_default();
        let field = |key: &str| {
            cpuinfo
                .lines()
                .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        let online = read("/sys/devices/system/cpu/online")
            .map(|s| parse_cpu_list(&s))
            .unwrap_or_default();
        let threads_per_core = read("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list")
            .map(|s| parse_cpu_list(&s).len())
            .unwrap_or(1)
            .max(1);
        let sockets: BTreeSet<String> = online
            .iter()
            .filter_map(|c| {
                read(&format!(
                    "/sys/devices/system/cpu/cpu{c}/topology/physical_package_id"
                ))
            })
            .collect();
        let nodes = fs::read_dir("/sys/devices/system/node")
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| {
                        let n = e.file_name();
                        let n = n.to_string_lossy();
                        n.starts_with("node") && n[4..].parse::<u32>().is_ok()
                    })
                    .count()
            })
            .unwrap_or(0);
        let mut caches = Vec::new();
        for i in 0.. {
            let base = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
            let Some(level) = read(&format!("{base}/level")) else {
                break;
            };
            caches.push(CacheLevel {
                level: level.parse().unwrap_or(0),
                kind: read(&format!("{base}/type")).unwrap_or_default(),
                size_bytes: read(&format!("{base}/size"))
                    .and_then(|s| parse_size(&s))
                    .unwrap_or(0),
                shared_cpu_list: read(&format!("{base}/shared_cpu_list")).unwrap_or_default(),
            });
        }
        SystemInfo {
            cpu_model: field("model name").unwrap_or_default(),
            cpu_mhz: field("cpu MHz").and_then(|v| v.parse().ok()).unwrap_or(0.0),
            kernel: crate::facts::kernel_release().unwrap_or_default(),
            online_cpus: online.len(),
            threads_per_core,
            sockets: sockets.len().max(1),
            nodes: nodes.max(1),
            memory_kb: crate::facts::mem_total_kb().unwrap_or(0),
            caches,
            thp_enabled: crate::facts::thp_enabled().unwrap_or_default(),
            thp_defrag: crate::facts::thp_defrag().unwrap_or_default(),
            thp_use_zero_page: read("/sys/kernel/mm/transparent_hugepage/use_zero_page")
                .unwrap_or_default(),
        }
    }

    /// The largest cache's size in bytes (0 if none is reported).
    pub fn largest_cache_bytes(&self) -> u64 {
        self.caches.iter().map(|c| c.size_bytes).max().unwrap_or(0)
    }

    /// Cores (online CPUs / threads per core).
    pub fn cores(&self) -> usize {
        (self.online_cpus / self.threads_per_core.max(1)).max(1)
    }
}

/// Idle (idle + iowait) jiffies per CPU from `/proc/stat`.
fn idle_jiffies() -> Vec<(usize, u64)> {
    let stat = read("/proc/stat").unwrap_or_default();
    stat.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let cpu = it.next()?.strip_prefix("cpu")?.parse::<usize>().ok()?;
            let v: Vec<u64> = it.filter_map(|x| x.parse().ok()).collect();
            Some((cpu, v.get(3).copied()? + v.get(4).copied().unwrap_or(0)))
        })
        .collect()
}

/// `allowed`, most idle first over a 100 ms window (ties: lower number first).
pub(crate) fn cpus_by_idle(allowed: &[usize]) -> Vec<usize> {
    let a = idle_jiffies();
    std::thread::sleep(Duration::from_millis(100));
    let b = idle_jiffies();
    let idle = |cpu: usize| {
        let of = |s: &[(usize, u64)]| s.iter().find(|(c, _)| *c == cpu).map_or(0, |x| x.1);
        of(&b).saturating_sub(of(&a))
    };
    let mut order = allowed.to_vec();
    order.sort_by_key(|&c| (std::cmp::Reverse(idle(c)), c));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_and_sizes_parse() {
        assert_eq!(parse_cpu_list("0-3,8,10-11\n"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list("1"), vec![1]);
        assert_eq!(parse_size("32768K"), Some(32 << 20));
        assert_eq!(parse_size("16M"), Some(16 << 20));
        assert_eq!(parse_size("x"), None);
    }

    #[test]
    fn this_system_reports_itself() {
        let s = SystemInfo::read();
        assert!(s.online_cpus >= 1 && s.sockets >= 1 && s.nodes >= 1);
        assert!(!s.kernel.is_empty());
        let order = cpus_by_idle(&[0]);
        assert_eq!(order, vec![0]);
    }
}
