//! Data integrity under concurrency: threads own windows of address space — three in one mm,
//! three each in an mm of their own that they exit and replace while the others run — and
//! drive random `mmap`/`munmap`/`mprotect`/`madvise`/`mlock`/`mremap`/`fork` on them, with
//! writes of known patterns and reads checked against a per-page model, on a machine too small
//! for all of them (out-of-memory faults happen), with parallel free, munmap downgrade and THP
//! on; once with the mmap lock alone and once with per-VMA locks (`vma.per_vma_lock`).
//!
//! The model of each page says what every access must give:
//! - the data: zero (never written, `MADV_DONTNEED`ed if private, replaced by a new mapping,
//!   punched out of its shared object), one tagged word, or a full page of words derived from
//!   a tag; after a call that may have dropped it without saying so (`MADV_FREE`, a `madvise`
//!   that failed part-way) "that data or zero", settled by the next read. A private page holds
//!   its own; a shared page names its shmem object and index, whose contents every mapping of
//!   the object sees (the model's object is shared by the sides of a fork as the engine's is);
//! - the outcome: `SEGV_MAPERR` where nothing is mapped, `SEGV_ACCERR` where the protection
//!   forbids, `SIGBUS` past a shared object's size (a shared mapping grown by `mremap`),
//!   success or out of memory where it allows — and never out of memory for a page that
//!   already has a frame mapped (written since its last zap or fork), which needs none;
//! - the mapping itself: after every call the window's `/proc/<pid>/maps` lines must match
//!   the model's protection and sharing page for page (a failed call resynchronises the model
//!   from them instead: Linux applies some calls part-way before failing).
//!
//! `mremap` shrinks, grows in place, moves with `MREMAP_MAYMOVE` (out of the window: the test
//! reads the pages where they went, then moves them back with `MREMAP_FIXED`) and moves with
//! `MREMAP_FIXED` within the window (also several VMAs at once, keeping the gaps); the model's
//! pages move with the mapping — data, "maybe zero", the frame — and a grown shared mapping's
//! new pages lie past its object's size. A failed `mremap` must leave the source as it was
//! (Linux moves the page tables back).
//!
//! `fork` gives a thread a second side: a child mm with a copy of the model (private pages
//! copy-on-write, shared pages the same objects). Each operation picks a side; writes on one
//! side are invisible to the other except through a shared object. A side exits while the
//! others run — the child, or (in a thread with mms of its own) the parent first — after its
//! window is read back and its family validated.
//!
//! Every 500 operations a thread runs `validate_mm` on its mm (its fork family, under the
//! others' load); before an exit it reads back every mapped page of its window. At the end
//! `validate_mm` of the shared mm, every mm exited (every fork's both sides), `PhysMem::validate`
//! and the free-frame count equal to the start. A [`Watchdog`] turns a hang into a failure
//! naming the thread and its operation; a failure lists the thread's last 40 calls.
//!
//! Files: `model.rs` (what a page holds and how a read is checked), `window.rs` (a thread's
//! window, its sides, accesses and resynchronisation), `calls.rs` (the calls and how each
//! moves the model), this one (the machine, the threads, the end checks).
//!
//! Budget: 7 500 operations per thread in each of the two tests, times `USERMM_TEST_SCALE`
//! (about the wall time of the 20 000 of one test before mremap and fork joined); choices
//! from `USERMM_TEST_SEED` (a failure prints the replay line; the interleaving itself does
//! not replay).

mod calls;
#[path = "../common/mod.rs"]
mod common;
mod model;
mod window;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use usermm::config::{BackingMode, BatchSwitch, FreePolicy, ThpMode};
use usermm::mm::mmap::*;
use usermm::stats::VmItem;
use usermm::{CpuId, Machine, Mm, Task, PAGE_SIZE};
use usermm_testscale::{Rng, Watchdog};

use model::*;
use window::*;

/// Pages per window (8 MiB: four PMDs, so THPs fit).
pub(crate) const WINDOW_PAGES: u64 = 2048;
/// Windows are this far apart (one per thread).
pub(crate) const WINDOW_STRIDE: u64 = 1 << 30;
pub(crate) const WINDOWS_BASE: u64 = 0x1000_0000_0000;
/// 8-byte words per page.
pub(crate) const WORDS: u64 = PAGE_SIZE / 8;
/// Threads sharing one mm, and threads with an mm each.
pub(crate) const SHARED: usize = 3;
pub(crate) const OWN: usize = 3;
pub(crate) const THREADS: usize = SHARED + OWN;
/// Operations per thread at scale 1, in each of the two tests.
pub(crate) const OPS: u64 = 7_500;
/// An own-mm thread exits its mm (both sides of a fork) and starts a new one this often.
pub(crate) const EXIT_EVERY: u64 = 2_500;
pub(crate) const VALIDATE_EVERY: u64 = 500;

/// Counts over all threads.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) ops: AtomicU64,
    pub(crate) accesses: AtomicU64,
    pub(crate) oom: AtomicU64,
    pub(crate) maperr: AtomicU64,
    pub(crate) accerr: AtomicU64,
    pub(crate) sigbus: AtomicU64,
    pub(crate) munmaps_downgraded: AtomicU64,
    pub(crate) exits: AtomicU64,
    pub(crate) resyncs: AtomicU64,
    pub(crate) mremaps: AtomicU64,
    pub(crate) mremaps_moved_away: AtomicU64,
    pub(crate) mremaps_failed: AtomicU64,
    pub(crate) forks: AtomicU64,
    pub(crate) forks_failed: AtomicU64,
    pub(crate) side_exits: AtomicU64,
    pub(crate) parents_first: AtomicU64,
    /// Forks of the shared mm begun and ended (by any of its threads).
    pub(crate) shared_forks_begun: AtomicU64,
    pub(crate) shared_forks_ended: AtomicU64,
}

/// The first failures, and a flag that stops everyone.
#[derive(Debug, Default)]
pub(crate) struct Failures {
    pub(crate) any: AtomicBool,
    pub(crate) msgs: Mutex<Vec<String>>,
}

impl Failures {
    pub(crate) fn fail(&self, msg: String) {
        self.any.store(true, Relaxed);
        let mut m = self.msgs.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() < 8 {
            m.push(msg);
        }
    }
}

/// Marks the run failed if a thread unwinds (an engine `VM_BUG_ON`), so the others stop.
pub(crate) struct PanicFlag<'a>(&'a Failures, usize);

impl Drop for PanicFlag<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0
                .fail(format!("thread {} panicked (message above)", self.1));
        }
    }
}

/// The machine: 20 MiB for six 8 MiB windows (a few percent of the accesses run out of
/// memory), THP always, parallel free with a small threshold (so that munmaps and exits hand
/// jobs to the workqueue), munmap downgrade on; per-VMA locks as asked.
fn stress_machine(per_vma_lock: bool) -> Arc<Machine> {
    machine_with(|c| {
        c.mem = 20 << 20;
        c.cpus = THREADS as u16 + 1;
        c.nodes = 2;
        c.backing = BackingMode::Full;
        c.thp = ThpMode::Always;
        c.munmap.downgrade = true;
        c.free.policy = FreePolicy::Parallel;
        c.free.threshold_pages = 256;
        c.free.max_active = 2;
        c.gather.max_batch_count = 2;
        c.gather.batch_switch = BatchSwitch::V2017;
        c.vma.per_vma_lock = per_vma_lock;
    })
}

/// What the threads share.
struct Run<'a> {
    name: &'a str,
    machine: &'a Arc<Machine>,
    ops: u64,
    counts: &'a Counts,
    failures: &'a Failures,
    wd: &'a Watchdog,
}

/// One thread: `ops` operations on its window of `mm` (or of mms of its own, exited every
/// [`EXIT_EVERY`] operations, when `own`).
fn worker(run: &Run<'_>, shared_mm: Option<&Arc<Mm>>, slot: usize) {
    let Run {
        machine: m,
        ops,
        counts,
        failures,
        wd,
        ..
    } = *run;
    let _flag = PanicFlag(failures, slot);
    let cpu = CpuId(1 + slot as u16);
    // `mm_alloc` needs a frame (the PGD): under pressure it may wait for the others to free
    // some, as a fork would wait for the OOM killer.
    let new_mm = || match shared_mm {
        Some(mm) => Ok(Arc::clone(mm)),
        None => {
            let t = std::time::Instant::now();
            loop {
                match m.new_mm(cpu) {
                    Ok(mm) => return Ok(mm),
                    Err(e) if t.elapsed() > Duration::from_secs(30) => {
                        return Err(format!("mm_alloc failed for 30 s: {e}"))
                    }
                    Err(_) => {
                        wd.beat(slot);
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            }
        }
    };
    let mut w = Window {
        slot,
        task: Task::new(new_mm().expect("the first mm_alloc"), cpu),
        pages: vec![Page::unmapped(); WINDOW_PAGES as usize],
        child: false,
        other: None,
        own_mm: shared_mm.is_none(),
        base: WINDOWS_BASE + slot as u64 * WINDOW_STRIDE,
        rng: Rng::new(usermm_testscale::seed_for(run.name) ^ (slot as u64 + 1)),
        counts,
        wd,
        trace: Default::default(),
    };
    let fail = |e: String| failures.fail(format!("thread {slot}: {e}"));
    // The whole window mapped private and writable to begin with, as a program's heap is.
    let map_all = |w: &mut Window<'_>| {
        let (cpu, mm) = (w.cpu(), Arc::clone(w.mm()));
        let flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;
        let len = WINDOW_PAGES * PAGE_SIZE;
        let prot = PROT_READ | PROT_WRITE;
        let a = mm.mmap(cpu, w.base, len, prot, flags, MapFile::None);
        assert_eq!(a, Ok(w.base), "mapping the window");
        let map = Map {
            prot,
            shared: false,
        };
        w.pages.fill(Page::new(map, None));
    };
    map_all(&mut w);
    for n in 0..ops {
        if failures.any.load(Relaxed) {
            break;
        }
        if let Err(e) = w.step(n) {
            fail(e);
            break;
        }
        if n % VALIDATE_EVERY == VALIDATE_EVERY - 1 {
            wd.beat_doing(slot, Op::Validate as u64 | n << 8);
            if let Err(e) = w.mm().validate() {
                fail(format!("validate_mm after op {n}: {e}"));
                break;
            }
        }
        if shared_mm.is_none() && n % EXIT_EVERY == EXIT_EVERY - 1 {
            wd.beat_doing(slot, Op::Exit as u64 | n << 8);
            // Both sides of a fork go.
            if w.other.is_some() {
                if let Err(e) = w.retire_current() {
                    fail(format!("before exit at op {n}: {e}"));
                    break;
                }
            }
            if let Err(e) = w.verify() {
                fail(format!("before exit at op {n}: {e}"));
                break;
            }
            let mm = Arc::clone(w.task.mm());
            if let Err(e) = mm.validate() {
                fail(format!("validate_mm before exit at op {n}: {e}"));
                break;
            }
            mm.mmput(cpu);
            if mm.nr_page_tables() != 0 {
                fail(format!(
                    "{} page tables left after exit",
                    mm.nr_page_tables()
                ));
                break;
            }
            match new_mm() {
                Ok(next) => w.task = Task::new(next, cpu),
                Err(e) => {
                    fail(e);
                    break;
                }
            }
            drop(mm);
            map_all(&mut w);
            counts.exits.fetch_add(1, Relaxed);
        }
    }
    if !failures.any.load(Relaxed) {
        wd.beat_doing(slot, Op::Verify as u64 | ops << 8);
        // The child of a fork exits first (a shared-mm thread never exits the shared mm).
        if w.other.is_some() && !w.child {
            w.switch_sides();
        }
        let r = match w.other {
            Some(_) => w.retire_current(),
            None => Ok(()),
        };
        if let Err(e) = r.and_then(|()| w.verify()) {
            fail(format!("final verify: {e}"));
        }
    }
    let mut mms = vec![Arc::clone(w.task.mm())];
    mms.extend(w.other.take().map(|o| Arc::clone(o.task.mm())));
    drop(w);
    for mm in mms {
        if failures.any.load(Relaxed) {
            // Tearing down a broken mm may trip a VM_BUG_ON and hide the first failure.
            std::mem::forget(mm);
        } else if shared_mm.is_none_or(|s| !Arc::ptr_eq(s, &mm)) {
            mm.mmput(cpu);
        }
    }
    wd.retire(slot);
}

/// The stress run: six threads, `OPS` each (scaled), on a machine with per-VMA locks on or
/// off; its failures, then its counts, checked.
fn stress(name: &str, per_vma_lock: bool) {
    usermm_testscale::announce(name);
    let ops = usermm_testscale::scaled(OPS);
    let m = stress_machine(per_vma_lock);
    let free0 = free_pages(&m);
    let vm0 = m.vmstat_snapshot();
    let shared_mm = m.new_mm(C0).expect("mm");
    let counts = Counts::default();
    let failures = Failures::default();
    let wd = Watchdog::start(name, THREADS, Duration::from_secs(120), |slot, note| {
        let op = (note & 0xff) as usize;
        format!(
            "thread {slot}: {} (op {})",
            OP_NAMES.get(op).unwrap_or(&"?"),
            note >> 8
        )
    });
    let run = Run {
        name,
        machine: &m,
        ops,
        counts: &counts,
        failures: &failures,
        wd: &wd,
    };
    std::thread::scope(|s| {
        for slot in 0..THREADS {
            let (run, mm) = (&run, (slot < SHARED).then_some(&shared_mm));
            s.spawn(move || worker(run, mm, slot));
        }
    });
    drop(wd);
    let msgs = failures
        .msgs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let c = &counts;
    let delta = m.vmstat_snapshot().since(&vm0);
    let get = |a: &AtomicU64| a.load(Relaxed);
    let summary = format!(
        "per-VMA locks {per_vma_lock}: {} ops ({} accesses: {} out of memory, {} SEGV_MAPERR, \
         {} SEGV_ACCERR, {} SIGBUS as modelled), {} downgraded munmaps, {} exits, {} resyncs; \
         {} mremaps ({} moved out and back or unmapped, {} ENOMEM); {} forks ({} ENOMEM), \
         {} sides exited ({} parents first); thp_fault_alloc {}, thp_fault_fallback {}, \
         free jobs {}, oom {}",
        get(&c.ops),
        get(&c.accesses),
        get(&c.oom),
        get(&c.maperr),
        get(&c.accerr),
        get(&c.sigbus),
        get(&c.munmaps_downgraded),
        get(&c.exits),
        get(&c.resyncs),
        get(&c.mremaps),
        get(&c.mremaps_moved_away),
        get(&c.mremaps_failed),
        get(&c.forks),
        get(&c.forks_failed),
        get(&c.side_exits),
        get(&c.parents_first),
        delta.get(VmItem::ThpFaultAlloc),
        delta.get(VmItem::ThpFaultFallback),
        delta.get(VmItem::FreeJobsQueued),
        delta.get(VmItem::Oom),
    );
    if !msgs.is_empty() {
        // Tearing down a broken mm may trip a VM_BUG_ON and hide the first failure.
        std::mem::forget(shared_mm);
        panic!(
            "{name}: {}\n{summary}\nreplay: {}",
            msgs.join("\n"),
            usermm_testscale::replay()
        );
    }
    eprintln!("{name}: {summary}");
    // Every out-of-memory fault the threads saw was counted as one, and each was allowed.
    assert!(delta.get(VmItem::Oom) as u64 >= get(&c.oom), "{summary}");
    // What the test claims to run under: memory pressure, THP, downgraded munmaps, mremap
    // and fork with both orders of exit.
    assert!(delta.get(VmItem::Oom) > 0, "never out of memory: {summary}");
    assert!(delta.get(VmItem::ThpFaultAlloc) > 0, "no THP: {summary}");
    assert!(get(&c.munmaps_downgraded) > 0, "{summary}");
    assert!(
        get(&c.mremaps) > 0 && get(&c.mremaps_moved_away) > 0,
        "{summary}"
    );
    assert!(get(&c.forks) > 0 && get(&c.parents_first) > 0, "{summary}");
    assert_eq!(get(&c.exits), OWN as u64 * (ops / EXIT_EVERY), "{summary}");
    // Every mm exited — the shared one last, after its threads' forks — and every frame back.
    exit_and_check(&m, shared_mm, free0);
    assert!(
        delta.get(VmItem::FreeJobsQueued) > 0,
        "no teardown went through the workqueue: {summary}"
    );
    usermm_testscale::report(name, get(&c.ops));
}

#[test]
fn windows_keep_their_data_under_pressure_parallel_free_downgrade_and_thp() {
    stress("data_integrity", false);
}

#[test]
fn windows_keep_their_data_with_per_vma_locks() {
    stress("data_integrity_per_vma_lock", true);
}
