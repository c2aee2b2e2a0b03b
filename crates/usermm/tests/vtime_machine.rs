//! Virtual time end to end: a `Machine` in `time.mode=virtual`, its workloads run through
//! `Machine::run`, the engine's real code charging the profile's costs.

use usermm::config::{BackingMode, FreePolicy, MachineConfig, ScaleCost, ThpMode, TimeMode};
use usermm::mm::mmap::{MapFile, MAP_ANONYMOUS, MAP_PRIVATE, PROT_READ, PROT_WRITE};
use usermm::{vtime, CpuId, Machine, Task, PAGE_SIZE};

fn virtual_config(profile: &str) -> MachineConfig {
    let mut c = MachineConfig {
        mem: 256 << 20,
        cpus: 8,
        nodes: 2,
        backing: BackingMode::Sparse,
        thp: ThpMode::Never,
        ..MachineConfig::default()
    };
    c.time.mode = TimeMode::Virtual;
    c.time.profile = profile.into();
    c
}

/// A private anonymous mapping of `size` bytes, every page written; its address.
fn touched(mm: &usermm::mm::Mm, cpu: CpuId, size: u64) -> u64 {
    let a = mm
        .mmap(
            cpu,
            0,
            size,
            PROT_READ | PROT_WRITE,
            MAP_PRIVATE | MAP_ANONYMOUS,
            MapFile::None,
        )
        .unwrap();
    mm.populate(cpu, a, a + size, true);
    a
}

#[test]
fn smoke_parallel_free() {
    let mut c = virtual_config("haswell-ex-4s");
    c.free.policy = FreePolicy::Parallel;
    c.free.threshold_pages = 2048;
    c.free.max_active = 2;
    c.gather.max_batch_count = 8;
    let m = Machine::new(c).unwrap();
    let cpu = CpuId(7);
    let (ns, pages) = m
        .run(cpu, || {
            let mm = m.new_mm(cpu).unwrap();
            let size = 64 << 20;
            let a = touched(&mm, cpu, size);
            let t0 = usermm::sync::clock::now();
            let st = mm.munmap_stats(cpu, a, size).unwrap();
            (t0.elapsed_ns(), st.pages_zapped)
        })
        .expect("the virtual clock stays below its end");
    let r = m.last_run_report().unwrap();
    eprintln!(
        "{ns} ns, {pages} pages; {}",
        serde_json::to_string_pretty(&r).unwrap()
    );
    m.validate().unwrap();
}

/// A fake-NUMA machine with more nodes than CPUs (MAX_NUMNODES 1024): a mapping spills over
/// memory-only nodes in zonelist order and is freed in parallel, on both clocks; the line
/// model homes each struct page on its node.
#[test]
fn more_nodes_than_cpus_populate_and_free() {
    for mode in [TimeMode::Wall, TimeMode::Virtual] {
        let mut c = virtual_config("haswell-ex-4s");
        c.time.mode = mode;
        c.mem = 4 << 30;
        c.nodes = 1024;
        c.free.policy = FreePolicy::Parallel;
        c.free.threshold_pages = 2048;
        c.free.max_active = 2;
        let m = Machine::new(c).unwrap();
        let cpu = CpuId(7);
        let pages = m
            .run(cpu, || {
                let mm = m.new_mm(cpu).unwrap();
                // 32 MiB: more than the 4 MiB a node holds, so it spills over nodes.
                let size = 32 << 20;
                let a = touched(&mm, cpu, size);
                mm.munmap_stats(cpu, a, size).unwrap().pages_zapped
            })
            .expect("the virtual clock stays below its end");
        assert_eq!(pages, 8192, "{mode:?}");
        if mode == TimeMode::Virtual {
            let r = m.last_run_report().unwrap();
            assert_eq!(r.nr_nodes, 1024);
            assert!(r.memory.is_some_and(|x| x.accesses > 0));
        }
        m.validate().unwrap();
    }
}

/// A run whose costs add up past the end of virtual time (2^64 ps) fails as a whole with
/// `MachineError::ClockEnd`: the clocks saturate there instead of wrapping, and no figure is
/// returned from a clock that stopped. (A profile's step costs at most 1 s, so a real run
/// needs some ten million steps to get there; `vtime::work` charges the same clock at once.)
#[test]
fn a_run_past_the_end_of_virtual_time_fails() {
    let run = |charges: u32| {
        let m = Machine::new(virtual_config("haswell-ex-4s")).unwrap();
        let cpu = CpuId(7);
        let r = m.run(cpu, || {
            let mm = m.new_mm(cpu).unwrap();
            let size = 4 << 20;
            let a = touched(&mm, cpu, size);
            let t0 = usermm::sync::clock::now();
            for _ in 0..charges {
                // Half of the clock's range, in ns.
                usermm::vtime::work(u64::MAX / 2000 + 1);
            }
            mm.munmap(cpu, a, size).unwrap();
            t0.elapsed_ns()
        });
        m.validate().unwrap();
        r
    };
    assert!(run(1).unwrap() > u64::MAX / 2000);
    let e = run(2).unwrap_err();
    assert!(
        matches!(&e, usermm::machine::MachineError::ClockEnd { profile } if profile == "haswell-ex-4s"),
        "{e}"
    );
    assert!(
        e.to_string().contains("virtual clock reached its end"),
        "{e}"
    );
}

/// `wp_page_copy` allocates a copy of a real page as it comes and overwrites it whole
/// (`folio_prealloc`, then `__wp_page_copy_user`), and only a copy of the zero page zeroed
/// (`vma_alloc_zeroed_movable_folio`). So a write to a page shared with a fork pays copy_page
/// and no clear_page, and a write to a page first read (the zero page) the other way round:
/// doubling one of the two costs moves only the fault that pays it, by one page's price.
/// (The engine once cleared every copy before copying into it.)
#[test]
fn a_cow_copy_pays_copy_page_and_a_copy_of_the_zero_page_clear_page() {
    let faults = |scale: Option<&str>| {
        let mut c = virtual_config("haswell-ep-2s");
        c.time.scale = scale
            .map(|key| ScaleCost {
                key: key.into(),
                factor: 2.0,
            })
            .into_iter()
            .collect();
        let m = Machine::new(c).unwrap();
        let cpu = CpuId(0);
        m.run(cpu, || {
            let mm = m.new_mm(cpu).unwrap();
            let shared = touched(&mm, cpu, PAGE_SIZE);
            let child = mm.fork(cpu).unwrap();
            let zero = mm
                .mmap(
                    cpu,
                    0,
                    PAGE_SIZE,
                    PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS,
                    MapFile::None,
                )
                .unwrap();
            let t = Task::new(mm.clone(), cpu);
            assert_eq!(t.read_u64(zero).unwrap(), 0);
            let busy = |addr: u64| {
                let before = vtime::hooks::thread_cpu_ns().unwrap();
                t.write_u64(addr, 1).unwrap();
                vtime::hooks::thread_cpu_ns().unwrap() - before
            };
            let out = (busy(shared), busy(zero));
            child.validate().unwrap();
            mm.validate().unwrap();
            out
        })
        .unwrap()
    };
    let p = vtime::Profile::resolve("haswell-ep-2s").unwrap();
    let page = |cost| p.cost_ns(cost).round() as i64;
    let (base_cow, base_zero) = faults(None);
    let (clear_cow, clear_zero) = faults(Some("clear_page"));
    let (copy_cow, copy_zero) = faults(Some("copy_page"));
    // A cost not paid moves nothing (to within 1 ns: the clock reads whole ns of a ps clock);
    // a cost paid moves the fault by its price times the profile's jitter for that fault
    // (`vtime/jitter.rs`: 1 + σ·z, σ a few per cent), so within a tenth of it.
    let moved = |a: u64, b: u64, by: i64, what: &str| {
        let d = a as i64 - b as i64;
        assert!(
            (d - by).abs() <= 1.max(by / 10),
            "{what}: moved by {d} ns, not {by}"
        );
    };
    moved(
        clear_cow,
        base_cow,
        0,
        "a copy of a real page is not cleared",
    );
    moved(
        clear_zero,
        base_zero,
        page(vtime::Cost::ClearPage),
        "a copy of the zero page is cleared",
    );
    moved(
        copy_cow,
        base_cow,
        page(vtime::Cost::CopyPage),
        "a copy of a real page is copied",
    );
    moved(copy_zero, base_zero, 0, "the zero page is not copied");
}

/// A TLB shootdown interrupts the other CPUs of the mm (`flush_tlb_func`): the context that
/// occupies each of them pays the profile's `flush_tlb_func` once per flush, an idle CPU costs
/// nobody, and the sender waits for the handler (`csd_lock_wait`). A thread of the mm spins on
/// CPU 1 for a fixed number of lock round trips while the task on CPU 0 writes and
/// `MADV_DONTNEED`s one page `FLUSHES` times. Scaling the profile's `flush_tlb_func` (1 µs,
/// under the sender's 1.5 µs round trip) moves the spinner's CPU time by `FLUSHES` times the
/// price (the jitter aside); the sender's moves only once the handler outlasts its round trip,
/// and then by the difference.
#[test]
fn a_shootdown_charges_the_occupant_of_each_other_cpu_flush_tlb_func() {
    use usermm::mm::mman::MADV_DONTNEED;
    use usermm::sync::{class::FUTEX, thread, Barrier, SpinLock};
    const FLUSHES: u64 = 20;
    let run = |factor: f64| {
        let mut c = virtual_config("haswell-ep-2s");
        c.time.scale = vec![ScaleCost {
            key: "flush_tlb_func".into(),
            factor,
        }];
        let m = Machine::new(c).unwrap();
        let (cpu0, cpu1) = (CpuId(0), CpuId(1));
        let (sender, receiver) = m
            .run(cpu0, || {
                let mm = m.new_mm(cpu0).unwrap();
                let a = touched(&mm, cpu0, PAGE_SIZE);
                let met = Barrier::new(&FUTEX, 2);
                let spin = SpinLock::new(&FUTEX, ());
                let out = thread::scope(|s| {
                    let other = s.spawn_on(cpu1, || {
                        // Reading through the mm puts CPU 1 in its cpumask.
                        Task::new(mm.clone(), cpu1).read_u64(a).unwrap();
                        met.wait();
                        let before = vtime::hooks::thread_cpu_ns().unwrap();
                        for _ in 0..20_000 {
                            drop(spin.lock());
                        }
                        vtime::hooks::thread_cpu_ns().unwrap() - before
                    });
                    met.wait();
                    let t = Task::new(mm.clone(), cpu0);
                    let before = vtime::hooks::thread_cpu_ns().unwrap();
                    for _ in 0..FLUSHES {
                        t.write_u64(a, 1).unwrap();
                        mm.madvise(cpu0, a, PAGE_SIZE, MADV_DONTNEED).unwrap();
                    }
                    let sent = vtime::hooks::thread_cpu_ns().unwrap() - before;
                    (sent, other.join().unwrap())
                });
                // CPU 1 is idle now, though still in the mask: a flush interrupts nobody.
                mm.madvise(cpu0, a, PAGE_SIZE, MADV_DONTNEED).unwrap();
                mm.validate().unwrap();
                out
            })
            .unwrap();
        let sched = m.last_run_report().unwrap().sched;
        m.validate().unwrap();
        assert_eq!(
            sched.ipis, FLUSHES,
            "one interrupt per flush while CPU 1 is occupied"
        );
        (sender as i64, receiver as i64, sched.ipi_waits)
    };
    let p = vtime::Profile::resolve("haswell-ep-2s").unwrap();
    let price = p.cost_ns(vtime::Cost::FlushTlbFunc);
    let round_trip = p.cost_ns(vtime::Cost::TlbFlushRemotePerCpu);
    assert!(
        1.2 * price < round_trip,
        "the test's premise: a handler within the round trip"
    );
    let (s1, r1, w1) = run(1.0);
    let (s12, _, w12) = run(1.2);
    let (s2, r2, w2) = run(2.0);
    let (s4, _, w4) = run(4.0);
    let moved = r2 - r1;
    let want = (FLUSHES as f64 * price) as i64;
    assert!(
        (moved - want).abs() <= want / 10,
        "the spinner moved by {moved} ns, not {want}"
    );
    assert_eq!((w1, w12), (0, 0));
    assert_eq!(
        s1, s12,
        "a handler within the round trip costs the sender nothing"
    );
    assert_eq!((w2, w4), (FLUSHES, FLUSHES));
    for (factor, s) in [(2.0, s2), (4.0, s4)] {
        let want = (FLUSHES as f64 * (factor * price - round_trip)) as i64;
        let waited = s - s1;
        assert!(
            (waited - want).abs() <= want / 5,
            "flush_tlb_func x{factor}: the sender waited {waited} ns more, not {want}"
        );
    }
}

/// A test run of 2026-11-29 at a load average of 10–13: a this-host profile calibrated on the
/// busy host had a receiving side of 122 µs against a sending side of 10 µs, and the host
/// check's modelled munmap never finished (the CLI test ran 53 minutes before it was
/// stopped): its faulter's shootdowns interrupted the munmapper for longer than the faulter
/// took to send them, so the munmapper's clock ran ahead of the faulter's without end. A sender waits for each handler, so a receiver is never interrupted for more than its
/// senders spend: here a fixed piece of work on CPU 1 finishes while CPU 0 flushes as fast as
/// it can, with `flush_tlb_func` a hundred times its round trip.
#[test]
fn shootdowns_cannot_starve_the_cpu_they_interrupt() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use usermm::mm::mman::MADV_DONTNEED;
    use usermm::sync::{class::FUTEX, thread, Barrier, SpinLock};
    const BOUND: u64 = 10_000;
    let mut c = virtual_config("haswell-ep-2s");
    c.time.scale = vec![ScaleCost {
        key: "flush_tlb_func".into(),
        factor: 150.0,
    }];
    let m = Machine::new(c).unwrap();
    let (cpu0, cpu1) = (CpuId(0), CpuId(1));
    let flushes = m
        .run(cpu0, || {
            let mm = m.new_mm(cpu0).unwrap();
            let a = touched(&mm, cpu0, PAGE_SIZE);
            let met = Barrier::new(&FUTEX, 2);
            let spin = SpinLock::new(&FUTEX, ());
            let done = AtomicBool::new(false);
            thread::scope(|s| {
                s.spawn_on(cpu1, || {
                    Task::new(mm.clone(), cpu1).read_u64(a).unwrap();
                    met.wait();
                    for _ in 0..2_000 {
                        drop(spin.lock());
                    }
                    done.store(true, Ordering::SeqCst);
                });
                met.wait();
                let t = Task::new(mm.clone(), cpu0);
                let mut n = 0;
                while !done.load(Ordering::SeqCst) && n < BOUND {
                    t.write_u64(a, 1).unwrap();
                    mm.madvise(cpu0, a, PAGE_SIZE, MADV_DONTNEED).unwrap();
                    n += 1;
                }
                n
            })
        })
        .unwrap();
    m.validate().unwrap();
    assert!(
        flushes < BOUND,
        "the interrupted CPU never finished its work"
    );
    let sched = m.last_run_report().unwrap().sched;
    assert!(sched.ipi_waits > 0 && sched.ipi_waits <= sched.ipis);
}

/// Negative control for the fault's clock decided once (`handle_mm_fault`'s `on_clock!`, the
/// guards that carry it: `MmapReadGuard`, `PtLockGuard`, `VmFault`): in a virtual run the
/// fault path still takes its locks, charges and line touches in virtual time. Two tasks of
/// one mm, on two CPUs, each write-fault and read-fault (zero page) their own pages; the
/// run's lock_stat and times are the model's, the same figures as before the clock was
/// carried down, and not zero — a fault that took its locks on
/// the wall clock would leave `mmap_lock` and `ptl` unacquired in virtual time and the run
/// shorter.
#[test]
fn a_virtual_runs_faults_reach_the_virtual_hooks() {
    use usermm::sync::{clock, thread};
    const PAGES: u64 = 32;
    let m = Machine::new(virtual_config("haswell-ep-2s")).unwrap();
    let (ends, mmap_stats) = m
        .run(CpuId(0), || {
            let mm = m.new_mm(CpuId(0)).unwrap();
            let map = |prot| {
                mm.mmap(
                    CpuId(0),
                    0,
                    2 * PAGES * PAGE_SIZE,
                    prot,
                    MAP_PRIVATE | MAP_ANONYMOUS,
                    MapFile::None,
                )
                .unwrap()
            };
            let (rw, ro) = (map(PROT_READ | PROT_WRITE), map(PROT_READ));
            let ends: Vec<u64> = thread::scope(|s| {
                let hs: Vec<_> = (0..2u16)
                    .map(|cpu| {
                        let mm = mm.clone();
                        s.spawn_on(CpuId(cpu), move || {
                            let t = Task::new(mm, CpuId(cpu));
                            for i in 0..PAGES {
                                let off = (u64::from(cpu) * PAGES + i) * PAGE_SIZE;
                                t.write_u64(rw + off, 1).unwrap();
                                assert_eq!(t.read_u64(ro + off).unwrap(), 0);
                            }
                            clock::now().as_ns()
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            mm.validate().unwrap();
            (ends, mm.mmap_lock_info().stats())
        })
        .unwrap();
    let r = m.last_run_report().unwrap();
    let lock = |class: &str, mode| {
        let l = r.lock(class, mode).unwrap();
        (
            l.acquisitions,
            l.contentions,
            l.holdtime_total_ns,
            l.waittime_total_ns,
        )
    };
    let mmap = lock("mmap_lock", vtime::Mode::Shared);
    let ptl = lock("ptl", vtime::Mode::Exclusive);
    let mem = r.memory.as_ref().map(|s| (s.accesses, s.measured));
    let figures = (
        ends.clone(),
        r.end_ns,
        mmap,
        ptl,
        mem,
        mmap_stats.read.acquisitions,
        mmap_stats.read.holdtime_total_ns,
    );
    // Every fault took the mmap lock for read and a PTE lock in virtual time, held them for
    // a virtual while, and the new pages' struct pages were touched in the line model.
    assert!(mmap.0 >= 4 * PAGES && mmap.2 > 0, "{mmap:?}");
    assert!(ptl.0 >= 4 * PAGES && ptl.2 > 0, "{ptl:?}");
    assert!(
        mem.is_none_or(|(_, measured)| measured >= 2 * PAGES),
        "{mem:?}"
    );
    assert!(mmap_stats.read.acquisitions >= 4 * PAGES && mmap_stats.read.holdtime_total_ns > 0);
    // Each CPU's end, the run's end, `mmap_lock` read and `ptl` lock_stat (acquisitions,
    // contentions, hold and wait totals in ns), the line model's (priced, measured) touches,
    // and the mm's own read-side figures, to the ns: with v4.10's free-area and LRU-size lines
    // (249 more priced touches than 9c215d4's 1355) and the era factors inferred with them,
    // the fault factor applied (1.515 since h47-hz: every fault's entry, exit, walk and PTE
    // store dearer, so the two CPUs no longer meet on a PTE lock); each write fault's new folio
    // without this host's memcg charge since cb0ab96 (haswell-ep-2s's new_anon_folio 535.0 ->
    // 436.1 ns: 32 write faults a CPU, each CPU's end about 3.2 us sooner).
    let expected = (
        vec![107138, 106700],
        124167,
        (128, 0, 101925, 0),
        (130, 0, 4744, 0),
        Some((1604, 128)),
        128,
        101931,
    );
    assert_eq!(figures, expected);
}

/// Each run of a virtual machine starts with every line cold, although the machine's
/// `PageMeta`s, which keep the `struct page` lines' states (`vtime/memory.rs`), outlive it:
/// the same frames touched again in later runs are first touches there, as in the first.
#[test]
fn each_run_of_a_machine_starts_its_lines_cold() {
    let m = Machine::new(virtual_config("haswell-ex-4s")).unwrap();
    let cpu = CpuId(7);
    let mm = m.run(cpu, || m.new_mm(cpu).unwrap()).unwrap();
    let size = 4 << 20;
    let one_run = || {
        m.run(cpu, || {
            let a = touched(&mm, cpu, size);
            mm.munmap(cpu, a, size).unwrap();
        })
        .unwrap();
        m.last_run_report().unwrap().memory.unwrap()
    };
    let first = one_run();
    let second = one_run();
    let third = one_run();
    // The second run reuses the first one's frames (freed to the same lists): if their
    // states carried over, it would find them in DRAM (their stamps long aged) instead.
    for run in [&second, &third] {
        assert_eq!(run.first, first.first, "{first:?} {run:?}");
        assert_eq!(
            run.dram_local + run.dram_remote + run.dram_stream,
            0,
            "{run:?}"
        );
    }
    m.validate().unwrap();
}

/// v4.10's shared lines beside the lists (`page_alloc`'s `FreeArea` and `Lruvec`): every LRU
/// add and delete writes the memcg's LRU sizes, and every change of a free list's length its
/// order's `nr_free`, each a touch of a field line in the line model. Populating and
/// unmapping `PAGES` pages adds and deletes each on the LRU once (two touches a page) and
/// takes the pages from the buddy and gives most back (at least one `nr_free` a page freed
/// to the buddy, which all but the pcp lists' last `high` pages are).
#[test]
fn the_free_path_touches_the_free_areas_and_the_lru_sizes() {
    const PAGES: u64 = 4096;
    let m = Machine::new(virtual_config("haswell-ex-4s")).unwrap();
    let cpu = CpuId(3);
    m.run(cpu, || {
        let mm = m.new_mm(cpu).unwrap();
        let a = touched(&mm, cpu, PAGES * PAGE_SIZE);
        mm.munmap(cpu, a, PAGES * PAGE_SIZE).unwrap();
    })
    .unwrap();
    let mem = m.last_run_report().unwrap().memory.unwrap();
    assert!(mem.field_lines >= 3 * PAGES - 1024, "{mem:?}");
    assert!(mem.field_lines <= mem.accesses, "{mem:?}");
    m.validate().unwrap();
}
