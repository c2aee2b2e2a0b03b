//! The engine side of a bench path: a machine, a task alone on it per sample running the
//! path's body ([`crate::task::bodies`], the same the host's child runs), the two-thread
//! free, and the engine's own zeroing rate (see the parent module for what each path
//! measures and how it is compared with the host).

use std::sync::{Arc, Barrier};
use std::time::Instant;

use usermm::cpu::CpuId;
use usermm::mm::mmap::{PROT_READ, PROT_WRITE};
use usermm::page_alloc::Gfp;
use usermm::sync::clock::thread_cpu_ns;
use usermm::{Machine, Order};

use crate::task::bodies::{self, Failed};
use crate::task::{with_lone_task, EngineTask, Stamp, Task};

use super::{engine_err, BenchError, Zeroing, HPAGE, PAGE};

/// One engine machine and the CPU the single-threaded paths run on.
pub(super) struct Engine {
    pub(super) machine: Arc<Machine>,
    pub(super) cpu: CpuId,
}

/// One measurement per unit on both clocks, in ns.
#[derive(Debug, Clone, Copy)]
pub(super) struct Meas {
    pub(super) cpu: f64,
    pub(super) wall: f64,
}

impl Meas {
    /// A body's time on both clocks over `units` (at least one).
    pub(super) fn of(s: Stamp, units: u64) -> Meas {
        let u = units.max(1) as f64;
        Meas {
            cpu: s.cpu_ns as f64 / u,
            wall: s.wall_ns as f64 / u,
        }
    }
}

/// The measuring thread's two clocks from one instant.
pub(super) struct Timer {
    pub(super) wall: Instant,
    pub(super) cpu: u64,
}

impl Timer {
    pub(super) fn start() -> Timer {
        Timer {
            cpu: thread_cpu_ns(),
            wall: Instant::now(),
        }
    }

    /// Time since the start, divided over `units`.
    pub(super) fn per(&self, units: f64) -> Meas {
        let wall = self.wall.elapsed().as_nanos() as f64;
        let cpu = (thread_cpu_ns() - self.cpu) as f64;
        Meas {
            cpu: cpu / units,
            wall: wall / units,
        }
    }
}

/// Run `body` on a task alone on `e`'s CPU ([`with_lone_task`]: a fresh mm, put outside
/// the body).
pub(super) fn lone<R>(
    e: &Engine,
    body: impl FnOnce(&EngineTask<'_>) -> Result<R, Failed>,
) -> Result<R, BenchError> {
    with_lone_task(&e.machine, e.cpu, body)
        .map_err(engine_err)?
        .map_err(engine_err)
}

/// Populate `len` bytes with one write per 4 KiB page, then munmap them
/// ([`bodies::populate_and_munmap`]): (populate, munmap) per page.
pub(super) fn engine_populate(e: &Engine, len: u64, thp: bool) -> Result<(Meas, Meas), BenchError> {
    let p = lone(e, |t| bodies::populate_and_munmap(t, len, thp))?;
    let pages = len / PAGE;
    Ok((Meas::of(p.populate, pages), Meas::of(p.munmap, pages)))
}

/// Read one word every `step` bytes of a fresh read-only mapping ([`bodies::read_walk`]):
/// per access (each a fault).
pub(super) fn engine_read(e: &Engine, len: u64, step: u64, thp: bool) -> Result<Meas, BenchError> {
    let w = lone(e, |t| bodies::read_walk(t, len, step, thp, || ()))?;
    Ok(Meas::of(w.time, w.accesses))
}

/// `count` one-page mappings of `/dev/zero` in a fresh mm, then a munmap of each
/// ([`bodies::mmap_munmap_pages`]): per mmap + munmap pair.
pub(super) fn engine_mmap_munmap(e: &Engine, count: u64) -> Result<Meas, BenchError> {
    let mut addrs = vec![0; usize::try_from(count).map_err(engine_err)?];
    let s = lone(e, |t| bodies::mmap_munmap_pages(t, &mut addrs))?;
    Ok(Meas::of(s, count))
}

/// Two mms on two CPUs, each with half of `len` populated, unmap at the same moment: wall ns
/// per page freed (both clocks of the result are the wall clock).
pub(super) fn engine_free_2_threads(e: &Engine, len: u64) -> Result<Meas, BenchError> {
    let half = (len / 2).next_multiple_of(PAGE);
    let barrier = Barrier::new(2);
    // From the first thread's start to the last one's end, each read by the thread itself (a
    // clock read here, after the barrier, could come after both had finished).
    let spans: Vec<Result<(Instant, Instant), BenchError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|c| {
                let barrier = &barrier;
                s.spawn(move || {
                    let cpu = e.machine.cpu(c).expect("two CPUs");
                    let sub = Engine {
                        machine: Arc::clone(&e.machine),
                        cpu,
                    };
                    lone(&sub, |t| {
                        let a = bodies::map_aligned(t, half, PROT_READ | PROT_WRITE, false)?;
                        t.touch(a, half, PAGE, true)?;
                        barrier.wait();
                        let began = Instant::now();
                        let r = t.munmap(a, half);
                        let done = Instant::now();
                        r.map(|()| (began, done)).map_err(|errno| Failed::Call {
                            what: "munmap",
                            errno,
                        })
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchError::Engine("free thread panicked".into())))
            })
            .collect()
    });
    let mut span: Option<(Instant, Instant)> = None;
    for r in spans {
        let (began, done) = r?;
        span = Some(span.map_or((began, done), |(b, d)| (b.min(began), d.max(done))));
    }
    let (began, done) = span.expect("two threads");
    let wall = done.duration_since(began).as_nanos() as f64 / (2 * half / PAGE) as f64;
    Ok(Meas { cpu: wall, wall })
}

/// Hand every free frame of the machine to an owner once and take it back: afterwards no frame
/// is known-zero, so every `__GFP_ZERO` allocation really clears (and, with the prefault, every
/// frame is resident). No frame is zeroed here.
fn own_every_frame(e: &Engine) -> Result<(), BenchError> {
    let phys = e.machine.phys();
    let mut held = Vec::new();
    for order in [Order(9), Order(0)] {
        while let Ok(p) = phys.alloc_owned(e.cpu, order, Gfp::KERNEL.union(Gfp::NOWAIT)) {
            held.push(p);
        }
    }
    // Each handle frees its block (`__free_pages`) as it drops.
    drop(held);
    Ok(())
}

/// The engine's zeroing over `bytes` of resident frames that all had an owner, best of three
/// passes. Only the allocations are timed, not the frees.
pub(super) fn memset_bandwidth(e: &Engine, bytes: u64) -> Result<Zeroing, BenchError> {
    own_every_frame(e)?;
    let phys = e.machine.phys();
    let n = (bytes / HPAGE).max(1);
    let gib = (n * HPAGE) as f64 / (1u64 << 30) as f64;
    let gib_s = |m: Meas| gib / (m.cpu * 1e-9);
    let mut held = Vec::with_capacity((n * 512) as usize);
    let mut pass = |order: Order| -> Result<Meas, BenchError> {
        let t = Timer::start();
        for _ in 0..n * 512 / order.nr_pages() {
            held.push(
                phys.alloc_owned(e.cpu, order, Gfp::ZERO)
                    .map_err(engine_err)?,
            );
        }
        let m = t.per(1.0);
        // The frees (each handle's drop) are not timed.
        held.clear();
        Ok(m)
    };
    let (mut best_2m, mut best_4k, mut best_wall) = (0f64, 0f64, 0f64);
    for _ in 0..3 {
        let m = pass(Order(9))?;
        best_2m = best_2m.max(gib_s(m));
        best_wall = best_wall.max(gib / (m.wall * 1e-9));
        best_4k = best_4k.max(gib_s(pass(Order(0))?));
    }
    Ok(Zeroing {
        memset_gib_s: best_2m,
        zero_alloc_4k_gib_s: best_4k,
        memset_wall_gib_s: best_wall,
    })
}
