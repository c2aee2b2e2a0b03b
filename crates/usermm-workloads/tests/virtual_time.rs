//! The four experiments in virtual time: two runs of each give byte-identical JSON (times,
//! counters, lock_stat, the runtime's report), also when a busy sibling thread loads the
//! host during the second; and every figure is labelled modelled.
//!
//! Small sizes, sparse backing: each experiment runs in well under a second.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use usermm::config::{BackingMode, MachineConfig, ThpMode, TimeMode};
use usermm::Machine;
use usermm_workloads::{bigfree, munmap_test, percpu_test, usemem};

fn virtual_time(c: &mut MachineConfig, profile: &str) {
    c.time.mode = TimeMode::Virtual;
    c.time.profile = profile.into();
}

/// `f` twice, the second time beside a host thread that spins the whole time; both JSON.
fn twice_second_loaded<T: serde::Serialize>(f: impl Fn() -> T) -> (String, String) {
    let first = serde_json::to_string(&f()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut x = 0u64;
            while !stop.load(Relaxed) {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        })
    };
    let second = serde_json::to_string(&f()).unwrap();
    stop.store(true, Relaxed);
    busy.join().unwrap();
    (first, second)
}

#[test]
fn bigfree_is_deterministic_and_parallel_free_beats_inline_on_idle_cores() {
    let mut o = bigfree::BigfreeOpts::new(64 << 20, &[1, 2, 4]);
    o.threshold_pages = 2048;
    o.max_batch_count = 8;
    o.pcp_tune_rows = false;
    virtual_time(&mut o.base, bigfree::SEED_PROFILE);
    let (a, b) = twice_second_loaded(|| bigfree::run(&o).unwrap());
    assert_eq!(a, b, "two virtual runs differ");
    let r = bigfree::run(&o).unwrap();
    assert_eq!(r.time, "modelled (profile haswell-ex-4s)");
    assert_eq!(r.profile.as_ref().unwrap().name, "haswell-ex-4s");
    let vanilla = &r.rows[0];
    for row in &r.rows[1..] {
        let s = &row.samples[0];
        assert!(s.jobs > 0, "{}: no job queued", row.label);
        // Model outputs: the workers did most of the freeing, on CPUs of their own.
        assert!(s.worker_cpu_ns > s.task_cpu_ns, "{}", row.label);
        assert_eq!(s.cpus.len(), usize::from(r.config.cpus));
        assert!(s.free_ns < vanilla.samples[0].free_ns, "{}", row.label);
        // No host fact enters a virtual sample.
        assert_eq!(
            (s.host_preemptions, s.host_sleeps, s.host_loadavg),
            (0, 0, 0.0)
        );
    }
    // Every emulated CPU's time over the free adds up to the free's length.
    for row in &r.rows {
        let s = &row.samples[0];
        for c in &s.cpus {
            assert_eq!(
                c.time.busy_ns + c.time.spin_ns + c.time.idle_ns,
                s.free_ns,
                "{} cpu{}",
                row.label,
                c.cpu
            );
        }
    }
}

#[test]
fn usemem_ab_is_deterministic_and_reports_the_huge_zero_line_share() {
    let opts = usemem::UsememOpts {
        size: 256 << 20,
        nproc: 4,
        readonly: true,
        step: 2 << 20,
        ..usemem::UsememOpts::default()
    };
    let mut base = MachineConfig {
        mem: 1 << 30,
        cpus: 4,
        nodes: 2,
        backing: BackingMode::Sparse,
        thp: ThpMode::Always,
        ..MachineConfig::default()
    };
    virtual_time(&mut base, usemem::SEED_PROFILE);
    let (a, b) = twice_second_loaded(|| usemem::run_ab(&base, &opts).unwrap());
    assert_eq!(a, b, "two virtual runs differ");
    let (v, p) = usemem::run_ab(&base, &opts).unwrap();
    assert!(v.time.starts_with("modelled"));
    let (sv, sp) = (
        v.huge_zero_line_share.unwrap(),
        p.huge_zero_line_share.unwrap(),
    );
    // One refcount RMW per fault and zap vanilla, one per mm patched: the line's share of the
    // CPUs' busy time falls, and the throughput rises.
    assert!(sv > sp && sp > 0.0, "{sv} {sp}");
    assert!(p.throughput_kbps > v.throughput_kbps);
    let rep = v.vtime.as_ref().unwrap();
    assert_eq!(rep.cpus.len(), 4);
    // Every get and put is an RMW on the line; so is every cmpxchg of atomic_inc_not_zero that
    // lost to another CPU's (it retries, as on the hardware). The gets are accounted to the
    // line's class, the puts apart (a profile charges them to the zap, not to
    // get_huge_zero_page): one of each per fault, vanilla.
    let gets = rep.line("huge_zero_refcount").unwrap();
    let puts = rep.line("huge_zero_refcount.put").unwrap();
    use usermm::stats::VmItem::{HugeZeroRefGet, HugeZeroRefPut};
    assert_eq!(gets.rmws as i64, v.vmstat_delta.get(HugeZeroRefGet));
    assert_eq!(puts.rmws as i64, v.vmstat_delta.get(HugeZeroRefPut));
    assert!(puts.rmws > 0 && puts.time_ns > 0);
    // The share seed 002 compares is the gets' alone.
    assert_eq!(sv, gets.time_ns as f64 / rep.busy_ns() as f64);
    // The scheduler's work per fault: the report's counts over vmstat's faults.
    let per = v.sched_per_fault.as_ref().unwrap();
    let faults = v.vmstat_delta.get(usermm::stats::VmItem::Pgfault);
    assert_eq!(per.faults as i64, faults);
    assert!(
        faults >= 4 * 128,
        "{faults}: at least one fault per 2 MiB of each process"
    );
    assert_eq!(
        per.sync_points,
        rep.sched.sync_points as f64 / faults as f64
    );
    assert_eq!(per.resumes, rep.sched.resumes as f64 / faults as f64);
    assert!(
        per.sync_points >= 1.0,
        "{per:?}: a fault takes at least one lock"
    );
}

#[test]
fn munmap_test_is_deterministic() {
    let mut opts = munmap_test::MunmapTestOpts::new(64 << 20, 2);
    opts.machine.cpus = 4;
    opts.faulter_bytes = 64 << 10;
    opts.baseline_ms = 1;
    opts.loaded_baseline = false;
    virtual_time(&mut opts.machine, munmap_test::SEED_PROFILE);
    let (a, b) = twice_second_loaded(|| munmap_test::run(&opts).unwrap());
    assert_eq!(a, b, "two virtual runs differ");
    let r = munmap_test::run(&opts).unwrap();
    assert_eq!(r.time, "modelled (profile e5-2680-32c)");
    let (v, p) = (&r.vanilla.runs[0], &r.patched.runs[0]);
    assert!(!v.unmap.downgraded && p.unmap.downgraded);
    // The patch moves the zap out of the exclusive hold.
    assert!(p.unmap.exclusive_ns * 10 < v.unmap.exclusive_ns);
    assert!(p.unmap.read_ns > 0);
    assert_eq!(v.during.errors + p.during.errors, 0);
    assert_eq!(v.boot_ms, 0.0);
}

#[test]
fn percpu_test_is_deterministic() {
    let opts = percpu_test::PercpuTestOpts {
        parents: 20,
        children: 5,
        ..Default::default()
    };
    let mut cfg = MachineConfig::default();
    virtual_time(&mut cfg, percpu_test::DEFAULT_PROFILE);
    let (a, b) = twice_second_loaded(|| percpu_test::run_ab(&opts, &cfg).unwrap());
    assert_eq!(a, b, "two virtual runs differ");
    let r = percpu_test::run_ab(&opts, &cfg).unwrap();
    assert!(r.vanilla.time.starts_with("modelled"));
    assert!(r.vanilla.wall_seconds > 0.0);
}

#[test]
fn a_virtual_machine_refuses_more_cpus_than_its_profile_has_threads() {
    let mut c = MachineConfig {
        cpus: 33,
        ..MachineConfig::default()
    };
    virtual_time(&mut c, "e5-2680-32c");
    let e = Machine::new(c).unwrap_err().to_string();
    assert_eq!(
        e,
        "cpus: 33 CPUs, but the machine has 32 hardware threads (profile e5-2680-32c)"
    );
    let mut c = MachineConfig::default();
    virtual_time(&mut c, "nope");
    let e = Machine::new(c).unwrap_err().to_string();
    assert!(e.starts_with("time.profile: unknown profile `nope`"), "{e}");
}
