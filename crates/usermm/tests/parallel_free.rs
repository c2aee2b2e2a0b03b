//! Seeds 000/001: the parallel free policy of the mmu_gather frees exactly what the inline
//! policy frees, joins every job before munmap/exit returns, stays consistent while other mms
//! fault, and falls back to inline freeing when a job cannot be allocated.
//!
//! Small sparse machines and a small threshold (512 pages) so that jobs really happen.

mod common;

use std::sync::{Arc, Barrier};

use common::{anon, C0};
use usermm::config::{BackingMode, BatchSwitch, FreePolicy, MachineConfig, ThpMode};
use usermm::mm::mmap::{MapFile, MAP_ANONYMOUS, MAP_PRIVATE, PROT_READ, PROT_WRITE};
use usermm::stats::{VmItem, VmStatSnapshot};
use usermm::{CpuId, Machine, Mm, Task, PAGE_SIZE};

const THRESHOLD: u64 = 512;

fn config(policy: FreePolicy, f: impl FnOnce(&mut MachineConfig)) -> MachineConfig {
    let mut c = MachineConfig {
        mem: 256 << 20,
        cpus: 4,
        nodes: 2,
        backing: BackingMode::Sparse,
        thp: ThpMode::Never,
        ..Default::default()
    };
    c.free.policy = policy;
    c.free.threshold_pages = THRESHOLD;
    c.free.max_active = 2;
    // 8 + 4 × 510 pages before a forced flush: above the threshold, so every full gather
    // becomes a job under the parallel policy.
    c.gather.max_batch_count = 4;
    c.gather.batch_switch = BatchSwitch::V2017;
    f(&mut c);
    c
}

fn machine(policy: FreePolicy, f: impl FnOnce(&mut MachineConfig)) -> Arc<Machine> {
    Machine::new(config(policy, f)).expect("machine")
}

/// Free frames (buddy and pcp lists), without draining anything.
fn free_now(m: &Machine) -> u64 {
    m.phys().nr_free_pages() + m.phys().nr_pcp_pages()
}

/// The teardown workload both policies run: a populated mapping with a hole of zero-page
/// reads, partly unmapped, then the rest freed by munmap or by exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Teardown {
    Munmap,
    Exit,
}

struct Outcome {
    delta: VmStatSnapshot,
    free_after: u64,
    jobs: u64,
    failures: u64,
}

#[track_caller]
fn run(m: &Arc<Machine>, how: Teardown) -> Outcome {
    let len = 24 << 20;
    let mm = m.new_mm(C0).expect("mm");
    let a = anon(&mm, len);
    mm.populate(C0, a, a + len, true);
    // Zero-page reads in a second mapping: zapped but never freed.
    let b = anon(&mm, 2 << 20);
    mm.populate(C0, b, b + (2 << 20), false);
    m.phys().lru_add_drain_all();
    mm.validate().expect("validate_mm after populate");
    let before = m.vmstat_snapshot();
    // A partial munmap in the middle, then the rest.
    mm.munmap(C0, a + (4 << 20), 6 << 20)
        .expect("munmap middle");
    match how {
        Teardown::Munmap => {
            mm.munmap(C0, a, len).expect("munmap rest");
            mm.munmap(C0, b, 2 << 20).expect("munmap zero-page mapping");
            mm.validate().expect("validate_mm after munmap");
            assert_eq!(mm.rss_total(), 0);
        }
        Teardown::Exit => {
            mm.mmput(C0).expect("last mmput tears down");
            assert_eq!(mm.nr_page_tables(), 0);
        }
    }
    // Nothing is drained here: the count must already be final when munmap/exit returned.
    let free_after = free_now(m);
    let delta = m.vmstat_snapshot().since(&before);
    m.validate().expect("PhysMem::validate after teardown");
    drop(mm);
    Outcome {
        jobs: delta.get(VmItem::FreeJobsQueued) as u64,
        failures: delta.get(VmItem::FreeJobAllocFailed) as u64,
        delta,
        free_after,
    }
}

/// The same frees on both sides. `pgfree` and `pgalloc_normal` also count the gather's batch
/// pages, and the parallel policy takes fresh batch pages after each hand-off (the worker
/// frees the ones it was given), so both are compared net of `usermm_gather_batch_alloc`;
/// that every batch page allocated was freed is checked by `free_after`.
#[track_caller]
fn assert_same_frees(a: &Outcome, b: &Outcome) {
    let net = |o: &Outcome, item| o.delta.get(item) - o.delta.get(VmItem::GatherBatchAlloc);
    for item in [VmItem::Pgfree, VmItem::PgallocNormal] {
        assert_eq!(
            net(a, item),
            net(b, item),
            "{} (net of batch pages) differs",
            item.name()
        );
    }
    for item in [VmItem::NrAnonPages, VmItem::NrInactiveAnon] {
        assert_eq!(
            a.delta.get(item),
            b.delta.get(item),
            "{} differs",
            item.name()
        );
    }
    // Buddy + pcp: how frames split between the two depends on which CPUs freed them.
    assert_eq!(
        a.free_after, b.free_after,
        "free frames after teardown differ"
    );
}

#[test]
fn parallel_frees_exactly_what_inline_frees() {
    for how in [Teardown::Munmap, Teardown::Exit] {
        let inline = run(&machine(FreePolicy::Inline, |_| {}), how);
        let parallel = run(&machine(FreePolicy::Parallel, |_| {}), how);
        assert_eq!(inline.jobs, 0);
        assert!(
            parallel.jobs > 0,
            "{how:?}: the parallel policy queued no job"
        );
        assert_eq!(parallel.failures, 0);
        assert_same_frees(&inline, &parallel);
        // Every data page of the first mapping came back (batch pages too: pgfree counts them
        // on both sides, as many as were allocated).
        assert!(parallel.delta.get(VmItem::Pgfree) >= (24 << 20) / PAGE_SIZE as i64);
    }
}

#[test]
fn pcp_variants_free_exactly_what_v4_11_pcp_frees_under_both_policies() {
    // Auto-tuning changes how many pages each drain returns to the buddy, never which pages
    // are freed: the frames free after teardown (buddy + pcp) and every counter match.
    for how in [Teardown::Munmap, Teardown::Exit] {
        let fixed = run(&machine(FreePolicy::Inline, |_| {}), how);
        for policy in [FreePolicy::Inline, FreePolicy::Parallel] {
            // Picking outside zone.lock (v4.18–v5.17) changes when the lock is held, not what
            // is freed.
            let picked = run(&machine(policy, |c| c.pcp.pick_outside_lock = true), how);
            assert_same_frees(&fixed, &picked);
            let tuned = run(&machine(policy, |c| c.pcp.auto_tune = true), how);
            assert_same_frees(&fixed, &tuned);
            assert_eq!(
                tuned.jobs > 0,
                policy == FreePolicy::Parallel,
                "{how:?} {policy:?}"
            );
            // Larger drains: fewer of them than with the fixed v4.11 batch.
            assert!(
                tuned.delta.get(VmItem::PcpDrain) < fixed.delta.get(VmItem::PcpDrain),
                "{how:?} {policy:?}: {} drains tuned vs {} fixed",
                tuned.delta.get(VmItem::PcpDrain),
                fixed.delta.get(VmItem::PcpDrain)
            );
        }
    }
}

#[test]
fn munmap_returns_only_after_every_job_finished() {
    // One worker, many jobs: if munmap returned early, the count below would be short.
    let m = machine(FreePolicy::Parallel, |c| c.free.max_active = 1);
    let free0 = free_now(&m);
    // 4 rounds, times USERMM_TEST_SCALE.
    let rounds = usermm_testscale::scaled(4) as usize;
    for round in 0..rounds {
        let mm = m.new_mm(C0).expect("mm");
        let len = 32 << 20;
        let a = anon(&mm, len);
        mm.populate(C0, a, a + len, true);
        let st = mm.munmap_stats(C0, a, len).expect("munmap");
        let wq = m
            .gather_policy()
            .workqueue()
            .expect("parallel policy has a workqueue")
            .stats();
        assert_eq!(
            wq.items_done, wq.items_queued,
            "round {round}: a job still running after munmap"
        );
        assert!(
            wq.items_queued as usize >= (round + 1) * 3,
            "round {round}: too few jobs: {wq:?}"
        );
        assert_eq!(st.pages_zapped, len / PAGE_SIZE);
        // Everything but the mm's PGD (and the lru_add batch's pages, drained at munmap's end
        // only by the zap itself) is free.
        mm.mmput(C0);
        assert_eq!(
            free_now(&m),
            free0,
            "round {round}: frames missing right after teardown"
        );
    }
    m.validate().expect("PhysMem::validate");
    usermm_testscale::report("parallel_free::munmap_returns_after_jobs", rounds as u64);
}

#[test]
fn exit_returns_only_after_every_job_finished() {
    let m = machine(FreePolicy::Parallel, |c| c.free.max_active = 1);
    let free0 = free_now(&m);
    let mm = m.new_mm(C0).expect("mm");
    let len = 48 << 20;
    let a = anon(&mm, len);
    mm.populate(C0, a, a + len, true);
    let st = mm.mmput(C0).expect("teardown");
    let wq = m.gather_policy().workqueue().expect("workqueue").stats();
    assert_eq!(wq.items_done, wq.items_queued);
    assert!(wq.items_queued >= (len / PAGE_SIZE) / (8 + 4 * 510));
    assert_eq!(st.pages_zapped, len / PAGE_SIZE);
    assert_eq!(free_now(&m), free0, "frames missing right after exit");
    m.validate().expect("PhysMem::validate");
}

#[test]
fn failed_job_allocations_fall_back_to_inline() {
    for how in [Teardown::Munmap, Teardown::Exit] {
        let inline = run(&machine(FreePolicy::Inline, |_| {}), how);
        let m = machine(FreePolicy::Parallel, |c| c.free.fail_job_alloc_every = 2);
        let injected = run(&m, how);
        assert!(injected.jobs > 0, "{how:?}: no job at all");
        assert!(injected.failures > 0, "{how:?}: no failure injected");
        // Every second attempt fails: the two counts differ by at most one.
        assert!(
            injected.jobs.abs_diff(injected.failures) <= 1,
            "{} jobs, {} failures",
            injected.jobs,
            injected.failures
        );
        assert_same_frees(&inline, &injected);
        // Every allocation fails: no job ever, the same frees.
        let never = run(
            &machine(FreePolicy::Parallel, |c| c.free.fail_job_alloc_every = 1),
            how,
        );
        assert_eq!(never.jobs, 0);
        assert!(never.failures > 0);
        assert_same_frees(&inline, &never);
    }
}

/// Extra rounds [`teardown_racing_other_mms_faults_keeps_invariants`] may run until a fault
/// overlaps a teardown: on a loaded host the faulters' threads may not be scheduled at all
/// during a round's short teardowns.
const MAX_EXTRA_RACE_ROUNDS: u64 = 16;

/// Rounds (1 times `USERMM_TEST_SCALE`) of two teardowns through the workqueue racing two
/// faulters in their own mms; each round on a fresh machine, every round's invariants checked.
/// More rounds (up to [`MAX_EXTRA_RACE_ROUNDS`]) run until at least one fault overlapped a
/// teardown, so that the test never passes without a race.
#[test]
fn teardown_racing_other_mms_faults_keeps_invariants() {
    let rounds = usermm_testscale::scaled(1);
    let (mut ops, mut raced, mut round) = (0, 0, 0);
    while round < rounds || (raced == 0 && round < rounds + MAX_EXTRA_RACE_ROUNDS) {
        let (r, o) = teardown_race_round();
        raced += r;
        ops += o;
        round += 1;
    }
    assert!(
        raced > 0,
        "no fault ran while a teardown was in progress, in {round} rounds"
    );
    usermm_testscale::report("parallel_free::teardown_racing_faults", ops);
}

/// One round; returns the faults made during a teardown, and the round's operations (those
/// faults and the pages the two teardowns freed).
fn teardown_race_round() -> (u64, u64) {
    let m = machine(FreePolicy::Parallel, |c| {
        c.mem = 512 << 20;
        c.cpus = 6;
    });
    let free0 = free_now(&m);
    let faulters = 2;
    let go = Arc::new(Barrier::new(faulters + 2));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Teardowns in progress: faulters count the faults they make while one runs.
    let tearing = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut handles = Vec::new();
    // Faulters: their own mms, writing and unmapping small ranges in a loop.
    for i in 0..faulters {
        let (m, go, stop) = (Arc::clone(&m), Arc::clone(&go), Arc::clone(&stop));
        let tearing = Arc::clone(&tearing);
        handles.push(std::thread::spawn(move || {
            let cpu = CpuId(2 + i as u16);
            let mm = m.new_mm(cpu).expect("mm");
            let t = Task::new(Arc::clone(&mm), cpu);
            go.wait();
            let mut during_teardown = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let len = 4 << 20;
                let a = mm
                    .mmap(
                        cpu,
                        0,
                        len,
                        PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS,
                        MapFile::None,
                    )
                    .expect("mmap");
                let mut x = a;
                while x < a + len {
                    t.write_u64(x, x).expect("write fault");
                    if tearing.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                        during_teardown += 1;
                    }
                    x += PAGE_SIZE;
                }
                mm.munmap(cpu, a, len).expect("munmap");
            }
            mm.validate().expect("faulter validate_mm");
            mm.mmput(cpu);
            during_teardown
        }));
    }
    // Two teardowns through the workqueue: one munmap, one exit.
    let big = |cpu: CpuId, exit: bool, m: Arc<Machine>, go: Arc<Barrier>| {
        let tearing = Arc::clone(&tearing);
        std::thread::spawn(move || {
            let mm: Arc<Mm> = m.new_mm(cpu).expect("mm");
            let len = 64 << 20;
            let a = mm
                .mmap(
                    cpu,
                    0,
                    len,
                    PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS,
                    MapFile::None,
                )
                .expect("mmap");
            go.wait();
            mm.populate(cpu, a, a + len, true);
            tearing.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if exit {
                mm.mmput(cpu).expect("teardown");
            } else {
                mm.munmap(cpu, a, len).expect("munmap");
            }
            tearing.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            if !exit {
                mm.validate().expect("validate_mm after munmap");
                mm.mmput(cpu);
            }
            0
        })
    };
    handles.push(big(CpuId(0), false, Arc::clone(&m), Arc::clone(&go)));
    handles.push(big(CpuId(1), true, Arc::clone(&m), Arc::clone(&go)));
    let teardowns: Vec<_> = handles.drain(faulters..).collect();
    for h in teardowns {
        h.join().expect("teardown thread");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let raced: u64 = handles
        .into_iter()
        .map(|h| h.join().expect("faulter"))
        .sum();
    let jobs = m.vmstat().get(VmItem::FreeJobsQueued);
    assert!(jobs > 0, "no job was queued");
    m.validate().expect("PhysMem::validate after the race");
    assert_eq!(free_now(&m), free0, "frames leaked");
    (raced, raced + 2 * (64 << 20) / PAGE_SIZE)
}
