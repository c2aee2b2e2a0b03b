//! will-it-scale on the engine: every test runs in both modes on both clocks; virtual runs are
//! deterministic (identical JSON twice) and their lines are main.c's; placement follows the
//! profile's cores. Small sizes, sparse backing, short periods: each run is a fraction of a
//! second. (The host kernel's side, which forks, is `tests/will_it_scale_diff.rs`.)

use std::sync::Arc;
use std::time::Duration;

use usermm::config::{BackingMode, MachineConfig, TimeMode};
use usermm::Machine;
use usermm_workloads::task::{Affinity, Mode};
use usermm_workloads::will_it_scale::{
    format_lines, run, runtest, runtest_csv, Backend, Params, Test, WisError,
};

fn machine(cpus: u16, profile: Option<&str>) -> Arc<Machine> {
    let mut c = MachineConfig {
        mem: 2 << 30,
        cpus,
        backing: BackingMode::Sparse,
        ..MachineConfig::default()
    };
    if let Some(p) = profile {
        c.time.mode = TimeMode::Virtual;
        c.time.profile = p.into();
    }
    Machine::new(c).unwrap()
}

fn params(tasks: usize, mode: Mode, period: Duration, size: Option<u64>) -> Params {
    Params {
        tasks,
        mode,
        affinity: Affinity::Cores,
        seconds: 2,
        period,
        size,
        verbose: false,
    }
}

/// A test's size for these runs: a few pages (malloc1's stays above the 32 MiB beyond which
/// glibc never raises its mmap threshold: a smaller block would come from the heap after the
/// first free).
fn small(t: Test) -> Option<u64> {
    match t {
        Test::Brk1 | Test::Brk2 | Test::Malloc2 => None,
        Test::Malloc1 => Some(64 << 20),
        _ => Some(64 << 10),
    }
}

#[test]
fn virtual_runs_are_deterministic_and_print_main_cs_lines() {
    let p = params(
        4,
        Mode::Threads,
        Duration::from_micros(200),
        small(Test::PageFault1),
    );
    let go = || {
        let m = machine(72, Some("haswell-ep-2s"));
        let mut text = String::new();
        let rec = run(Test::PageFault1, Backend::Engine(&m), &p, &mut |s| {
            text.push_str(s)
        })
        .unwrap();
        m.validate().unwrap();
        (serde_json::to_string(&rec).unwrap(), text, rec)
    };
    let (a, text, rec) = go();
    let (b, text2, _) = go();
    assert_eq!(a, b, "two virtual runs differ");
    assert_eq!(text, text2);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "testcase:Anonymous memory page fault");
    assert_eq!(lines[1], "warmup");
    // Six warm-up periods, `measurement` after the sixth, two measured, the average.
    assert_eq!(lines.len(), 2 + 6 + 1 + 2 + 1, "{text}");
    assert_eq!(lines[8], "measurement");
    assert!(lines[11].starts_with("average:"));
    assert_eq!(format_lines(&rec.lines, 2), lines[2..]);
    let avg = rec.average.unwrap();
    assert_eq!(avg, (rec.lines[6].total + rec.lines[7].total) / 2);
    assert!(avg > 0);
    assert_eq!(rec.time, "modelled (profile haswell-ep-2s)");
    // Tasks on the first four cores of socket 0, one thread each.
    assert_eq!(rec.cpus, [[0], [1], [2], [3]]);
    let vm = rec.vmstat.as_ref().unwrap();
    assert!(vm["pgfault"] > 0);
    let locks = rec.lock_stat.as_ref().unwrap();
    assert!(locks
        .iter()
        .any(|l| l.class == "mmap_lock" && l.acquisitions > 0));
}

#[test]
fn every_test_runs_in_both_modes_on_both_clocks() {
    let virt = machine(8, Some("haswell-ep-2s"));
    let wall = machine(2, None);
    for t in Test::ALL {
        for mode in [Mode::Processes, Mode::Threads] {
            if t.virtual_refusal().is_none() {
                let p = params(3, mode, Duration::from_micros(100), small(t));
                let r = run(t, Backend::Engine(&virt), &p, &mut |_| {}).unwrap();
                assert!(
                    r.average.unwrap() > 0,
                    "{} {mode:?}: {:?}",
                    t.name(),
                    r.lines
                );
                assert!(r.stops.iter().all(|s| s == "done"), "{:?}", r.stops);
            }
            let mut p = params(2, mode, Duration::from_millis(5), small(t));
            p.seconds = 1;
            let r = run(t, Backend::Engine(&wall), &p, &mut |_| {}).unwrap();
            assert_eq!(r.lines.len(), 7);
            assert!(r.stops.iter().all(|s| s == "done"), "{:?}", r.stops);
        }
    }
    virt.validate().unwrap();
    wall.validate().unwrap();
}

#[test]
fn malloc2_is_refused_in_virtual_time() {
    let m = machine(4, Some("haswell-ep-2s"));
    let p = params(1, Mode::Processes, Duration::from_micros(100), None);
    let e = run(Test::Malloc2, Backend::Engine(&m), &p, &mut |_| {}).unwrap_err();
    assert!(
        matches!(e, WisError::Usage(ref s) if s.contains("no system call")),
        "{e}"
    );
}

#[test]
fn a_loop_that_takes_no_virtual_time_stops_with_the_reason() {
    // malloc1 below the mmap threshold: heap reuse, no system call, no fault.
    let m = machine(2, Some("haswell-ep-2s"));
    let p = params(1, Mode::Processes, Duration::from_micros(100), Some(1024));
    let r = run(Test::Malloc1, Backend::Engine(&m), &p, &mut |_| {}).unwrap();
    assert!(
        r.stops[0].contains("takes no virtual time"),
        "{:?}",
        r.stops
    );
    assert_eq!(r.average, Some(0));
}

#[test]
fn tasks_beyond_the_cpus_take_turns() {
    // Three tasks on two CPUs: the third shares CPU 0 with the first, and both progress.
    let m = machine(2, Some("haswell-ep-2s"));
    let p = params(3, Mode::Processes, Duration::from_millis(8), Some(64 << 10));
    let r = run(Test::Mmap1, Backend::Engine(&m), &p, &mut |_| {}).unwrap();
    assert_eq!(r.cpus, [[0], [1], [0]]);
    let last = &r.per_task[7];
    assert!(last.iter().all(|&n| n > 0), "{last:?}");
    assert!(last[0] < last[1] && last[2] < last[1], "{last:?}");
}

#[test]
fn runtest_walks_tasks_in_both_modes() {
    let m = machine(8, Some("haswell-ep-2s"));
    let base = params(
        1,
        Mode::Processes,
        Duration::from_micros(100),
        Some(64 << 10),
    );
    let (rows, recs) = runtest(
        Test::Mmap1,
        Backend::Engine(&m),
        &[1, 2],
        &base,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(recs.len(), 4);
    assert_eq!(rows[0].linear, rows[0].processes.max(rows[0].threads));
    assert_eq!(rows[1].linear, 2 * rows[0].linear);
    let csv = runtest_csv(&rows);
    assert!(csv.starts_with(
        "tasks,processes,processes_idle,threads,threads_idle,linear\n0,0,100,0,100,0\n1,"
    ));
}

/// The published page_fault1 curve's rows, at a tiny size: every published row is run, each
/// in its mode and at its task count on the posting's machine, and the record is the same
/// twice (a virtual run is deterministic).
#[test]
fn the_published_curve_is_predicted_row_by_row_and_deterministically() {
    use usermm_workloads::will_it_scale::curve::{predict, published_rows, CurveOpts};
    let opts = CurveOpts {
        size: Some(64 << 10),
        ..CurveOpts::tiny()
    };
    let a = predict(&opts, &|_| {}).unwrap();
    let b = predict(&opts, &|_| {}).unwrap();
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    let want = published_rows(&usermm_workloads::seeds::PAGE_FAULT1);
    assert_eq!(want.len(), 6);
    let got: Vec<_> = a
        .rows
        .iter()
        .map(|r| (r.tasks, r.mode, r.published))
        .collect();
    assert_eq!(got, want);
    assert_eq!(a.time, "modelled (profile broadwell-ep-2s)");
    for r in &a.rows {
        assert!(r.predicted > 0, "{r:?}");
        let e = r.predicted as f64 / r.published as f64 - 1.0;
        assert!((r.error - e).abs() < 1e-12 && r.within == (e.abs() <= 0.25));
        // Every fault's page goes on and off the LRU under lru_lock; zone->lock only when
        // the pcp lists run dry or over (a 64 KiB mapping's pages may never leave them).
        assert!(
            r.lru_lock_ns_per_fault > 0.0 && r.zone_lock_ns_per_fault >= 0.0,
            "{r:?}"
        );
        // The bound is one second over the published faults of the busiest zone's tasks.
        let share = if r.tasks <= 22 { 1.0 } else { 0.5 };
        assert!((r.zone_lock_bound_ns - 1e9 / (r.published as f64 * share)).abs() < 1e-6);
        // The window asked for, or longer where it held too few of a task's iterations.
        assert!(r.measured_periods >= opts.seconds, "{r:?}");
    }
    assert_eq!(a.within, a.rows.iter().filter(|r| r.within).count());
    // A note for each row below its band whose zone->lock work is past its bound, and only
    // those.
    let noted = a
        .rows
        .iter()
        .filter(|r| !r.within && r.error < 0.0 && r.zone_lock_ns_per_fault > r.zone_lock_bound_ns)
        .count();
    assert_eq!(a.notes.len(), noted, "{:?}", a.notes);
}
