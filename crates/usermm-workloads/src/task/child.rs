//! The bodies of [`super::bodies`] run once on the host kernel, each in a fresh child forked
//! from this process (`usermm_host::measure::run_forked_checked`): single-threaded, so that
//! its munmaps send no TLB shootdown to this process's other threads and its clocks and
//! faults are its own.
//!
//! This process has other threads (an engine machine's workers, a progress bar), so the child
//! may run only async-signal-safe code until it exits: no allocation, no lock, no stdio. The
//! body meets that by construction (see [`super::bodies`]); what it runs on is made before
//! the fork: a [`HostTask::alone`] with room for every mapping the body makes (so its
//! records never grow) and the body's own buffers. The child hands its figures back as words
//! (`[errno, ...]`, errno 0 when the body ran).
//!
//! `unsafe` is fenced here (the crate denies it elsewhere): the one call that forks.

#![expect(unsafe_code)]

use usermm_host::measure::run_forked_checked;
use usermm_host::task::thread_minor_faults;
use usermm_host::HostError;

use super::bodies::{self, Failed, Populated, Walked};
use super::{HostTask, Stamp};

/// A body's outcome as a child's words: `Ok` words start with a 0; a failure is its errno
/// alone.
fn words<const N: usize>(r: Result<[u64; N], Failed>) -> [u64; N] {
    r.unwrap_or_else(|e| {
        let mut w = [0; N];
        w[0] = e.errno() as u64;
        w
    })
}

fn stamp(w: &[u64]) -> Stamp {
    Stamp {
        cpu_ns: w[0],
        wall_ns: w[1],
    }
}

/// [`bodies::populate_and_munmap`] twice in a row in one child: `[cold, warm]`.
///
/// The first round takes whatever memory the kernel has free, which on a VM may have been
/// handed back to the hypervisor (free page reporting) so that its first touch faults there
/// too; the second round, started right after the first one's munmap, gets the frames just
/// freed, resident — the kernel's cost with its RAM resident, which is what an engine machine
/// with a prefaulted backing is compared against.
pub fn populate_twice(len: u64, thp: bool) -> Result<[Populated; 2], HostError> {
    let task = HostTask::alone(4);
    let work = || {
        words((|| {
            let a = bodies::populate_and_munmap(&task, len, thp)?;
            let b = bodies::populate_and_munmap(&task, len, thp)?;
            let s = [a.populate, a.munmap, b.populate, b.munmap];
            Ok([
                0,
                s[0].cpu_ns,
                s[0].wall_ns,
                s[1].cpu_ns,
                s[1].wall_ns,
                s[2].cpu_ns,
                s[2].wall_ns,
                s[3].cpu_ns,
                s[3].wall_ns,
            ])
        })())
    };
    // SAFETY: `work` runs a body of `bodies` (allocation-free: its module doc) on `task`, made
    // before the fork with room for its one mapping and the two trims.
    let w = unsafe { run_forked_checked("mmap in measurement child", work)? };
    let round = |k: usize| Populated {
        populate: stamp(&w[1 + 4 * k..]),
        munmap: stamp(&w[3 + 4 * k..]),
    };
    Ok([round(0), round(1)])
}

/// [`bodies::read_walk`] in a child, and the child's minor faults over the whole body
/// (`getrusage`: the walk's, and the few of the child's own, such as its stack's).
pub fn read_walk(len: u64, step: u64, thp: bool) -> Result<(Walked, u64), HostError> {
    let task = HostTask::alone(4);
    let work = || {
        let f0 = thread_minor_faults();
        let r = bodies::read_walk(&task, len, step, thp, || ());
        let faults = thread_minor_faults().saturating_sub(f0);
        words(r.map(|w| [0, w.accesses, w.time.cpu_ns, w.time.wall_ns, faults]))
    };
    // SAFETY: as in `populate_twice`; `getrusage` is a system call into a stack value.
    let w = unsafe { run_forked_checked("mmap in measurement child", work)? };
    let walk = Walked {
        accesses: w[1],
        time: stamp(&w[2..]),
    };
    Ok((walk, w[4]))
}

/// [`bodies::mmap_munmap_pages`] of `count` mappings in a child. The caller keeps `count`
/// within the child's room under `vm.max_map_count`
/// (`usermm_host::measure::map_count_headroom`); a failed mmap is an error.
pub fn mmap_munmap_pages(count: u64) -> Result<Stamp, HostError> {
    let n = usize::try_from(count).map_err(|_| HostError::Sys {
        what: "mmap count",
        errno: 22,
    })?;
    let task = HostTask::alone(n);
    let mut addrs = vec![0u64; n];
    let slots = &mut addrs[..];
    let work = || words(bodies::mmap_munmap_pages(&task, slots).map(|s| [0, s.cpu_ns, s.wall_ns]));
    // SAFETY: as in `populate_twice`; `task` has room for all `count` mappings and `addrs`
    // was allocated before the fork (the body only stores into it). Opening /dev/zero is one
    // system call, and dropping the file one close.
    let w = unsafe { run_forked_checked("one-page mmap of /dev/zero in measurement child", work)? };
    Ok(stamp(&w[1..]))
}

/// [`bodies::random_writes`] twice in a row in one child: `[cold, warm]`, as
/// [`populate_twice`].
pub fn random_writes_twice(order: &[u32]) -> Result<[Stamp; 2], HostError> {
    let task = HostTask::alone(4);
    let work = || {
        words((|| {
            let a = bodies::random_writes(&task, order)?;
            let b = bodies::random_writes(&task, order)?;
            Ok([0, a.cpu_ns, a.wall_ns, b.cpu_ns, b.wall_ns])
        })())
    };
    // SAFETY: as in `populate_twice`; `order` was allocated before the fork and is only read.
    let w = unsafe { run_forked_checked("mmap in measurement child", work)? };
    Ok([stamp(&w[1..]), stamp(&w[3..])])
}

#[cfg(test)]
mod test {
    use super::*;

    const SIZE: u64 = 8 << 20;

    /// The host's side of bench's paths at small sizes: each body ran in its child and gave
    /// its figures back (the times only as present, never as values).
    #[test]
    fn the_bodies_run_in_a_child() {
        for thp in [false, true] {
            for r in populate_twice(SIZE, thp).unwrap() {
                assert!(r.populate.wall_ns > 0 && r.munmap.wall_ns > 0, "{r:?}");
            }
        }
        let (w, faults) = read_walk(SIZE, 4096, false).unwrap();
        assert_eq!(w.accesses, SIZE / 4096);
        // One zero-page fault per 4 KiB page (a handful more from the child itself).
        assert!(faults >= w.accesses && faults < w.accesses + 64, "{faults}");
        assert_eq!(read_walk(SIZE, 2 << 20, true).unwrap().0.accesses, 4);
        assert!(mmap_munmap_pages(1000).unwrap().wall_ns > 0);
        let order: Vec<u32> = (0..512u32).rev().collect();
        for s in random_writes_twice(&order).unwrap() {
            assert!(s.wall_ns > 0);
        }
    }

    /// A body's failure comes back as its errno.
    #[test]
    fn a_failed_body_reports_its_errno() {
        let e = random_writes_twice(&[0, 5]).unwrap_err();
        assert!(matches!(e, HostError::Sys { errno: 22, .. }), "{e}");
        assert!(random_writes_twice(&[]).is_err());
        let e = read_walk(1 << 60, 4096, false).unwrap_err();
        assert!(matches!(e, HostError::Sys { .. }), "{e}");
    }
}
