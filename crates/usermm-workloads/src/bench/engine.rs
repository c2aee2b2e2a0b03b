//! The engine side of a bench path: a machine, one mapping per sample, timed populate, read,
//! munmap and two-thread free, and the engine's own zeroing rate (see the parent module for
//! what each path measures and how it is compared with the host).

use std::sync::{Arc, Barrier};
use std::time::Instant;

use usermm::cpu::CpuId;
use usermm::mm::mmap::{
    MapFile, MADV_HUGEPAGE, MADV_NOHUGEPAGE, MAP_ANONYMOUS, MAP_PRIVATE, PROT_READ, PROT_WRITE,
};
use usermm::page_alloc::Gfp;
use usermm::sync::clock::thread_cpu_ns;
use usermm::{Machine, Mm, Order, Task};

use super::{engine_err, BenchError, HPAGE, PAGE};

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

/// Map `len` bytes of anonymous memory in a fresh mm, 2 MiB-aligned, with `advice`.
pub(super) fn engine_map(
    e: &Engine,
    len: u64,
    prot: u32,
    advice: i32,
) -> Result<(Task, u64), BenchError> {
    let mm = Mm::new(&e.machine, e.cpu).map_err(engine_err)?;
    let raw = mm
        .mmap(
            e.cpu,
            0,
            len + HPAGE,
            prot,
            MAP_PRIVATE | MAP_ANONYMOUS,
            MapFile::None,
        )
        .map_err(engine_err)?;
    let start = raw.next_multiple_of(HPAGE);
    if start > raw {
        mm.munmap(e.cpu, raw, start - raw).map_err(engine_err)?;
    }
    let tail = raw + len + HPAGE - (start + len);
    if tail > 0 {
        mm.munmap(e.cpu, start + len, tail).map_err(engine_err)?;
    }
    mm.madvise(e.cpu, start, len, advice).map_err(engine_err)?;
    Ok((Task::new(mm, e.cpu), start))
}

/// Tear an mm down (its `mmput`) outside any clock.
pub(super) fn engine_exit(t: Task) {
    t.mm().mmput(t.cpu());
}

/// Populate `len` bytes with one write per 4 KiB page, then munmap them: (populate, munmap)
/// per page.
pub(super) fn engine_populate(e: &Engine, len: u64, thp: bool) -> Result<(Meas, Meas), BenchError> {
    let advice = if thp { MADV_HUGEPAGE } else { MADV_NOHUGEPAGE };
    let (task, start) = engine_map(e, len, PROT_READ | PROT_WRITE, advice)?;
    let pages = (len / PAGE) as f64;
    let t = Timer::start();
    task.walk(start, len, PAGE, true, |w| w)
        .map_err(engine_err)?;
    let populate = t.per(pages);
    let t = Timer::start();
    task.mm().munmap(e.cpu, start, len).map_err(engine_err)?;
    let munmap = t.per(pages);
    engine_exit(task);
    Ok((populate, munmap))
}

/// Read one word every `step` bytes of a fresh read-only mapping: per access (each a fault).
pub(super) fn engine_read(e: &Engine, len: u64, step: u64, thp: bool) -> Result<Meas, BenchError> {
    let advice = if thp { MADV_HUGEPAGE } else { MADV_NOHUGEPAGE };
    let (task, start) = engine_map(e, len, PROT_READ, advice)?;
    let t = Timer::start();
    let n = task
        .walk(start, len, step, false, |w| w)
        .map_err(engine_err)?;
    let m = t.per(n.max(1) as f64);
    engine_exit(task);
    Ok(m)
}

/// `count` one-page private mappings of `/dev/zero` in a fresh mm, one mmap each, then a
/// munmap of each in the order they were made: per mmap + munmap pair. No two merge (each
/// maps file offset 0), so the mm holds `count` VMAs at the peak and every mmap searches for
/// room among them, as on the host side ([`usermm_host::measure::host_mmap_munmap_pages`]).
pub(super) fn engine_mmap_munmap(e: &Engine, count: u64) -> Result<Meas, BenchError> {
    let mm = Mm::new(&e.machine, e.cpu).map_err(engine_err)?;
    let mut addrs = Vec::with_capacity(usize::try_from(count).map_err(engine_err)?);
    let t = Timer::start();
    for _ in 0..count {
        let a = mm
            .mmap(
                e.cpu,
                0,
                PAGE,
                PROT_READ | PROT_WRITE,
                MAP_PRIVATE,
                MapFile::DevZero,
            )
            .map_err(engine_err)?;
        addrs.push(a);
    }
    for &a in &addrs {
        mm.munmap(e.cpu, a, PAGE).map_err(engine_err)?;
    }
    let m = t.per(count.max(1) as f64);
    engine_exit(Task::new(mm, e.cpu));
    Ok(m)
}

/// Two mms on two CPUs, each with half of `len` populated, unmap at the same moment: wall ns
/// per page freed (both clocks of the result are the wall clock).
pub(super) fn engine_free_2_threads(e: &Engine, len: u64) -> Result<Meas, BenchError> {
    let half = (len / 2).next_multiple_of(PAGE);
    let mut tasks = Vec::new();
    for c in 0..2 {
        let cpu = e.machine.cpu(c).expect("two CPUs");
        let sub = Engine {
            machine: Arc::clone(&e.machine),
            cpu,
        };
        let (task, start) = engine_map(&sub, half, PROT_READ | PROT_WRITE, MADV_NOHUGEPAGE)?;
        task.walk(start, half, PAGE, true, |w| w)
            .map_err(engine_err)?;
        tasks.push((task, start));
    }
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = tasks
        .into_iter()
        .map(|(task, start)| {
            let b = Arc::clone(&barrier);
            std::thread::spawn(move || {
                b.wait();
                let began = Instant::now();
                let r = task.mm().munmap(task.cpu(), start, half);
                let done = Instant::now();
                engine_exit(task);
                r.map(|()| (began, done))
            })
        })
        .collect();
    // From the first thread's start to the last one's end, each read by the thread itself (a
    // clock read here, after the barrier, could come after both had finished).
    let mut span: Option<(Instant, Instant)> = None;
    for h in handles {
        let (began, done) = h
            .join()
            .map_err(|_| BenchError::Engine("free thread panicked".into()))?
            .map_err(engine_err)?;
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
/// passes: GiB/s of CPU time in 2 MiB `__GFP_ZERO` allocations, the same in 4 KiB ones, and
/// GiB/s of wall time in 2 MiB ones. Only the allocations are timed, not the frees.
pub(super) fn memset_bandwidth(e: &Engine, bytes: u64) -> Result<(f64, f64, f64), BenchError> {
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
    Ok((best_2m, best_4k, best_wall))
}
