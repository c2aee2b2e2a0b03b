use super::run::{clipped, window_of, PH_AFTER, PH_BASELINE, PH_LOADED, PH_MUNMAP, PH_WARMUP};
use super::*;

#[test]
fn windows_attribute_overlaps_to_the_munmap() {
    assert_eq!(window_of(PH_BASELINE, PH_BASELINE), Some(0));
    assert_eq!(window_of(PH_LOADED, PH_LOADED), Some(1));
    assert_eq!(window_of(PH_LOADED, PH_MUNMAP), Some(2));
    assert_eq!(
        window_of(PH_LOADED, PH_AFTER),
        Some(2),
        "blocked across the whole munmap"
    );
    assert_eq!(window_of(PH_MUNMAP, PH_AFTER), Some(2));
    assert_eq!(window_of(PH_BASELINE, PH_LOADED), None);
    assert_eq!(window_of(PH_AFTER, PH_AFTER), None);
    assert_eq!(window_of(PH_WARMUP, PH_WARMUP), None);
}

#[test]
fn small_run_both_policies() {
    let mut opts = MunmapTestOpts::new(64 << 20, 1);
    opts.machine.cpus = 4;
    opts.baseline_ms = 20;
    let r = run(&opts).unwrap();
    assert!(r.per_vma.per_vma_lock && !r.vanilla.per_vma_lock);
    assert_eq!(r.vanilla.runs[0].vma_lock, VmaLockEvents::default());
    for (p, down) in [(&r.vanilla, false), (&r.patched, true), (&r.per_vma, true)] {
        let run = &p.runs[0];
        assert_eq!(run.pages, 16384);
        assert_eq!(run.unmap.pages_zapped, 16384);
        assert_eq!(run.unmap.downgraded, down);
        assert_eq!(run.during.errors + run.baseline.errors, 0);
        assert!(run.baseline.faults.count > 0);
        assert_eq!(
            run.lock_munmap.exclusive_hold.count, 1,
            "one write hold: the munmap's"
        );
    }
    assert!(r.vanilla.runs[0].unmap.read_ns == 0);
    assert!(r.patched.runs[0].unmap.read_ns > 0);
}

/// With per-VMA locks, faults in the munmap window take their VMA's lock, never mmap_lock.
/// In virtual time, where the window's length and the faulters' progress through it do not
/// depend on the host's load: on the wall clock a 64 MiB munmap lasts about a millisecond,
/// which a loaded 2-CPU host may give no faulter.
#[test]
fn virtual_per_vma_faults_take_their_vma_lock_during_the_munmap() {
    let mut opts = MunmapTestOpts::new(64 << 20, 1);
    opts.machine.cpus = 4;
    opts.baseline_ms = 1;
    opts.machine.time.mode = usermm::config::TimeMode::Virtual;
    opts.machine.time.profile = "e5-2680-32c".into();
    let r = run(&opts).unwrap();
    let pv = &r.per_vma.runs[0];
    assert!(pv.during.faults.count > 0, "{:?}", pv.during);
    assert!(pv.vma_lock.success > 0, "{:?}", pv.vma_lock);
    assert_eq!(
        pv.lock_munmap.read.acquisitions, 1,
        "only munmap's own read hold"
    );
    assert_eq!(r.vanilla.runs[0].vma_lock, VmaLockEvents::default());
}

/// A stall straddling a window counted whole (faulters "stalled" 100-340 %
/// of the window); only its part inside the window counts.
#[test]
fn stalls_are_clipped_to_their_window() {
    let window = (1_000, 2_000);
    assert_eq!(clipped((500, 5_000), window), 1_000);
    assert_eq!(clipped((1_500, 1_700), window), 200);
    assert_eq!(clipped((100, 900), window), 0);
    assert_eq!(clipped((1_900, 3_000), window), 100);
}
