//! The validation runs' host budget and the HPE run's scaled shape.

use super::*;

/// The whole default validation once ran both HPE eras side by side and peaked at
/// 2.86 GB, over `reproduce`'s 2 GiB. At the default sizes every run fits the budget alone
/// (none needs to run over it), the HPE machine scaled as a whole commits well under 1 GiB
/// (1/64 of the posting's 8 TiB emulated), and the two largest runs fit the budget
/// together, so the cores stay busy.
#[test]
fn every_run_fits_the_budget_and_the_largest_pair_up() {
    let opts = ValidationOpts::new(Sizes::DEFAULT);
    let mut est: Vec<(Run, u64)> = Vec::new();
    for &r in &opts.runs {
        for era in ERAS {
            for (run, _, job) in jobs_of(&opts, r, era).unwrap() {
                est.push((run, host_bytes(&job)));
            }
        }
    }
    for &(run, b) in &est {
        assert!(b <= HOST_BUDGET, "{run:?}: {b} bytes");
    }
    let hpe: Vec<u64> = est
        .iter()
        .filter(|e| e.0 == Run::Hpe)
        .map(|e| e.1)
        .collect();
    assert_eq!(hpe.len(), 2);
    assert!(hpe.iter().all(|&b| b < 1 << 30), "{hpe:?}");
    let mut big: Vec<u64> = est.iter().map(|e| e.1).collect();
    big.sort_unstable();
    assert!(
        big[big.len() - 1] + big[big.len() - 2] <= HOST_BUDGET,
        "{big:?}"
    );
}

/// The HPE run scaled as a whole: its mapping spans the posting's eight nodes at every
/// size, its jobs are the patch's in the same proportion (as `bigfree::seed_scaled_job`
/// sizes them: enough batch pages to gather a job), and at the posting's own size it is the
/// posting's machine and the patch's job.
#[test]
fn the_hpe_run_keeps_the_postings_shape_at_every_size() {
    let h = &HPE_FREE;
    let ma = [seeds::DEFAULT_WQ_MAX_ACTIVE];
    let profile = seeds::HPE_FREE_MACHINE.profile;
    for (size, threshold, batches) in [(16u64 << 30, 4096, 9), (32 << 30, 8192, 17)] {
        let (c, job) = whole_run_scaled(profile, size, (h.size, h.ram), &ma).unwrap();
        assert_eq!(c.nodes, 64);
        let per_node = c.mem / u64::from(c.nodes);
        assert_eq!(per_node, h.ram / 64 / (h.size / size), "{size}");
        assert_eq!(size.div_ceil(per_node), 8, "{size}");
        assert_eq!(job, (threshold, batches), "{size}");
        let capacity = bigfree::gather_capacity(batches, usermm::config::BatchSwitch::V2017);
        assert!(capacity >= threshold, "{size}: {capacity} < {threshold}");
    }
    let (c, job) = whole_run_scaled(profile, h.size, (h.size, h.ram), &ma).unwrap();
    assert_eq!(c.mem, h.ram);
    assert_eq!(
        job,
        (
            bigfree::DEFAULT_THRESHOLD_PAGES,
            bigfree::PATCHED_MAX_BATCH_COUNT
        )
    );
}
