//! Row (a) of the host check: `MADV_DONTNEED` of a touched mapping by one thread, against two
//! threads of the same process on disjoint halves at once — the two-freer speed-up (both free
//! into one zone and LRU; their TLB flushes reach each other's CPU). The same body on both
//! sides ([`bodies::dontneed_split`]): predicted by the engine in virtual time (the threads on
//! CPUs 0 and 1), measured on this host's kernel (threads of this process: the point is two
//! threads of one mm).

use serde::{Deserialize, Serialize};
use usermm::{CpuId, Errno, Machine};
use usermm_host::HostError;

use super::{this_host_machine, HostCheckError};
use crate::task::bodies::{self, Failed};
use crate::task::{with_lone_task, HostTask};

/// A body's failure as the check's error.
pub(super) fn failed(f: Failed) -> HostCheckError {
    match f {
        Failed::Call { what, errno } => HostCheckError::Syscall {
            op: what,
            errno: Errno(errno),
        },
        Failed::Access(_) => HostCheckError::Syscall {
            op: "access",
            errno: Errno::EFAULT,
        },
    }
}

/// The engine's (one thread, two threads) ns to `MADV_DONTNEED` `bytes`.
pub(super) fn predict(profile: &str, bytes: u64) -> Result<(f64, f64), HostCheckError> {
    let machine = Machine::new(this_host_machine(profile, bytes))?;
    let cpu0 = CpuId(0);
    let r = machine.run(cpu0, || -> Result<(f64, f64), HostCheckError> {
        let d = with_lone_task(&machine, cpu0, |t| bodies::dontneed_split(t, bytes, 1))
            .map_err(|errno| HostCheckError::Syscall {
                op: "mm_alloc",
                errno,
            })?
            .map_err(failed)?;
        Ok((d.one.wall_ns as f64, d.two.wall_ns as f64))
    });
    drop(machine);
    r?
}

/// [`measure`]'s figures, one sample per repeat, each in ns of wall time.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct DontneedSplit {
    pub bytes: u64,
    /// One thread's `MADV_DONTNEED` of the whole touched mapping.
    pub one_thread_ns: Vec<u64>,
    /// Two threads, each `MADV_DONTNEED` of one half, started together: start to last end.
    pub two_threads_ns: Vec<u64>,
}

/// This host's kernel: the body `repeat` times (a fresh mapping each), in this process.
pub fn measure(bytes: u64, repeat: u32) -> Result<DontneedSplit, HostError> {
    let mut out = DontneedSplit {
        bytes,
        one_thread_ns: Vec::new(),
        two_threads_ns: Vec::new(),
    };
    for _ in 0..repeat.max(1) {
        let t = HostTask::alone(4);
        let d = bodies::dontneed_split(&t, bytes, 1).map_err(|f| HostError::Sys {
            what: "MADV_DONTNEED split",
            errno: f.errno(),
        })?;
        out.one_thread_ns.push(d.one.wall_ns);
        out.two_threads_ns.push(d.two.wall_ns);
    }
    Ok(out)
}

#[cfg(test)]
mod test {
    use super::*;

    /// The body runs on the host kernel at a small size: one sample of each per repeat, and
    /// the mapping the two threads freed is gone (the task unmapped it once its sibling had
    /// ended).
    #[test]
    fn the_host_side_runs_the_body_with_a_sibling_thread() {
        let d = measure(4 << 20, 2).unwrap();
        assert_eq!((d.one_thread_ns.len(), d.two_threads_ns.len()), (2, 2));
        assert!(d
            .one_thread_ns
            .iter()
            .chain(&d.two_threads_ns)
            .all(|&ns| ns > 0));
        let t = HostTask::alone(4);
        bodies::dontneed_split(&t, 1 << 20, 1).unwrap();
        assert_eq!(t.vmas_and_rss_kb().0, 0);
    }
}
