//! Row (c) of the host check: huge-zero-page read faults of one process, and of two at once —
//! each reading one word every 2 MiB of a fresh `MADV_HUGEPAGE` region of its own, one
//! huge-zero fault per read. The same body on both sides ([`bodies::read_walk`]): predicted
//! by the engine in virtual time (one mm per process, on CPUs 0 and 1, started together once
//! mapped), measured on this host's kernel (one forked child per process, their forks started
//! together, [`child::read_walk`]). The figure of a run is its faults over its longest walk.

use serde::{Deserialize, Serialize};
use usermm::sync::class::FUTEX;
use usermm::sync::{thread, Barrier};
use usermm::{CpuId, Errno, Machine};
use usermm_host::HostError;

use super::dontneed::failed;
use super::{this_host_machine, HostCheckError};
use crate::task::bodies::{self, Walked, HPAGE};
use crate::task::{child, with_lone_task};

/// The engine's faults per second of `procs` processes (one mm each, on CPUs 0..) each
/// walking its own `bytes`, started together.
pub(super) fn predict(profile: &str, procs: u16, bytes: u64) -> Result<f64, HostCheckError> {
    let machine = Machine::new(this_host_machine(profile, 0))?;
    let r = machine.run(CpuId(0), || -> Result<f64, HostCheckError> {
        let start = Barrier::new(&FUTEX, usize::from(procs));
        let walks: Vec<Result<Walked, HostCheckError>> = thread::scope(|s| {
            let hs: Vec<_> = (0..procs)
                .map(|i| {
                    let (machine, start) = (&machine, &start);
                    s.spawn_on(CpuId(i), move || {
                        let ready = || {
                            start.wait();
                        };
                        with_lone_task(machine, CpuId(i), |t| {
                            bodies::read_walk(t, bytes, HPAGE, true, ready)
                        })
                        .map_err(|errno| HostCheckError::Syscall {
                            op: "mm_alloc",
                            errno,
                        })?
                        .map_err(failed)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join().unwrap_or(Err(HostCheckError::Syscall {
                        op: "reader",
                        errno: Errno::EFAULT,
                    }))
                })
                .collect()
        });
        let (mut faults, mut longest) = (0, 0);
        for w in walks {
            let w = w?;
            faults += w.accesses;
            longest = longest.max(w.time.wall_ns);
        }
        Ok(faults as f64 / (longest.max(1) as f64 / 1e9))
    });
    drop(machine);
    r?
}

/// [`measure`]'s figures: per repeat, the longest reader's walk and the faults all readers
/// took; per reader, the least share of its walk's wall time it had as CPU time over the
/// repeats (what tells a reader that waited for a CPU: `usermm_host::quiet::judge`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct HugeZeroReaders {
    pub processes: u32,
    pub bytes_per_process: u64,
    pub ns: Vec<u64>,
    pub faults: Vec<u64>,
    #[serde(default)]
    pub cpu_over_wall: Vec<f64>,
}

impl HugeZeroReaders {
    /// Faults per second of each repeat.
    pub fn faults_per_sec(&self) -> Vec<f64> {
        self.ns
            .iter()
            .zip(&self.faults)
            .map(|(ns, f)| *f as f64 / (*ns as f64 / 1e9))
            .collect()
    }
}

/// `processes` forked readers at once, each walking its own fresh `bytes`, `repeat` times;
/// each walk's time is its child's wall clock, its faults the child's minor faults.
pub fn measure(processes: u32, bytes: u64, repeat: u32) -> Result<HugeZeroReaders, HostError> {
    let mut out = HugeZeroReaders {
        processes,
        bytes_per_process: bytes,
        ns: Vec::new(),
        faults: Vec::new(),
        cpu_over_wall: vec![f64::INFINITY; processes as usize],
    };
    for _ in 0..repeat.max(1) {
        let go = std::sync::Barrier::new(processes as usize);
        let t = std::time::Instant::now();
        let walks: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..processes)
                .map(|_| {
                    let go = &go;
                    s.spawn(move || {
                        go.wait();
                        child::read_walk(bytes, HPAGE, true)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(HostError::Child("a reader thread panicked".into()))
                    })
                })
                .collect()
        });
        let ns = t.elapsed().as_nanos() as u64;
        let (mut faults, mut longest) = (0, 0);
        for (i, w) in walks.into_iter().enumerate() {
            let (walk, f) = w?;
            faults += f;
            longest = longest.max(walk.time.wall_ns);
            let share = walk.time.cpu_ns as f64 / walk.time.wall_ns.max(1) as f64;
            out.cpu_over_wall[i] = out.cpu_over_wall[i].min(share);
        }
        // The readers' own walk times, not the forks around them: the longest walk.
        out.ns.push(longest.min(ns).max(1));
        out.faults.push(faults);
    }
    Ok(out)
}

#[cfg(test)]
mod test {
    use super::*;

    /// Each reader's least CPU share over the repeats is kept, one per reader: the figure the
    /// host check's quietness rule reads for row (c). A reader's walk is CPU-bound (each read
    /// a fault in the kernel, counted as its own CPU time), so its share is positive and not
    /// far above 1 (the two clocks are read a few instructions apart).
    #[test]
    fn readers_report_their_cpu_share_of_the_walk() {
        let r = measure(2, 16 << 20, 2).unwrap();
        assert_eq!((r.ns.len(), r.faults.len()), (2, 2));
        assert_eq!(r.cpu_over_wall.len(), 2, "{r:?}");
        assert!(
            r.cpu_over_wall.iter().all(|&s| s > 0.0 && s < 1.5),
            "{:?}",
            r.cpu_over_wall
        );
    }
}
