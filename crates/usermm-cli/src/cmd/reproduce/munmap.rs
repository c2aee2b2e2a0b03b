//! Seed 003 in `reproduce`: munmap of a populated mapping with a faulter in another VMA, both
//! policies, beside the seed's ftrace figures. Default scale 8 GiB (2 runs a policy); the
//! seed's 80 GB with `--scale seed`.

use serde::Serialize;
use usermm_workloads::munmap_test::{self, MunmapTestOpts, PolicyResult, Ratio};
use usermm_workloads::seeds::{MunmapDowngrade, MUNMAP_DOWNGRADE};

use super::experiment::{Given, Outcome, Scale};
use crate::report::format::group;
use crate::report::{bar_plot, Table};

/// `munmap` in `results.json`.
#[derive(Debug, Serialize)]
pub struct MunmapRecord {
    pub seed: MunmapDowngrade,
    pub vanilla: PolicyResult,
    pub patched: PolicyResult,
    pub ratio: Ratio,
    /// `measured (this host)` or `modelled (profile NAME)`: how usermm's times were obtained.
    pub time: String,
}

/// The munmap's size at `scale`: 8 GiB, or the seed's 80 GB rounded down to 2 MiB.
pub(super) fn size(scale: Scale) -> u64 {
    match scale {
        Scale::Default => 8u64 << 30,
        Scale::Seed => MUNMAP_DOWNGRADE.size_decimal & !((2 << 20) - 1),
    }
}

pub(super) fn run(g: &Given<'_>) -> anyhow::Result<Outcome<MunmapRecord>> {
    let seed = MUNMAP_DOWNGRADE;
    let size = size(g.scale);
    let mut opts = MunmapTestOpts::new(size, 1);
    opts.repeat = 2;
    g.time.apply(&mut opts.machine);
    g.time.check(&mut opts.machine, None)?;
    let label = usermm_workloads::TimeLabel::of(&opts.machine);
    if label.is_modelled() {
        // A virtual run is the same every time, has no host load to stand in for, and needs
        // no long window to average out noise.
        (opts.repeat, opts.loaded_baseline, opts.baseline_ms) = (1, false, 20);
        opts.populate_threads = 2;
    }
    let label = label.time;
    let r = munmap_test::run_ab(&opts).map_err(|e| anyhow::anyhow!("munmap-test: {e}"))?;
    let (v, p) = (&r.vanilla.median, &r.patched.median);
    let us = |ns: u64| format!("{:.1}", ns as f64 / 1000.0);
    let mut t = Table::new(
        format!(
            "munmap of {} GiB of 4K pages, 1 faulter in its own VMA, usermm {} (seed: {}, {} cores, measured)",
            size >> 30,
            label,
            seed.size_label,
            seed.cpus
        ),
        [
            "",
            "seed vanilla",
            "seed patched",
            "usermm vanilla",
            "usermm patched",
        ],
    );
    t.push_row([
        "exclusive mmap_lock hold (µs)".to_string(),
        group(seed.exclusive_vanilla_us),
        format!(
            "< {} (\"{}\")",
            seed.exclusive_patched_bound_us, seed.exclusive_patched_claim
        ),
        us(v.exclusive_ns),
        us(p.exclusive_ns),
    ]);
    t.push_row([
        "zap under the read lock (µs)".to_string(),
        // Without the patch nothing is zapped under the read lock.
        "0".into(),
        group(seed.unmap_region_us),
        us(v.read_ns),
        us(p.read_ns),
    ]);
    t.push_row([
        "total munmap (µs)".to_string(),
        "".into(),
        group(seed.total_us),
        us(v.total_ns),
        us(p.total_ns),
    ]);
    // The faulters' latencies: the seed published none.
    for (label, ns) in [
        (
            "faulter p99 during munmap (µs)",
            [v.during.p99_ns, p.during.p99_ns],
        ),
        (
            "faulter p99 without munmap (µs)",
            [v.baseline.p99_ns, p.baseline.p99_ns],
        ),
        (
            "faulter max during munmap (µs)",
            [v.during.max_ns, p.during.max_ns],
        ),
    ] {
        t.push_row([label.into(), "".into(), "".into(), us(ns[0]), us(ns[1])]);
    }
    let plot = g.out.join("munmap_hold.svg");
    let ms = |us: u64| us as f64 / 1000.0;
    bar_plot(
        &plot,
        "munmap: exclusive mmap_lock hold (ms)",
        "ms",
        &[
            (
                format!("seed ({})", seed.size_label),
                vec![
                    ("vanilla".into(), ms(seed.exclusive_vanilla_us)),
                    ("patched".into(), ms(seed.exclusive_patched_bound_us)),
                ],
            ),
            (
                format!("usermm ({} GiB)", size >> 30),
                vec![
                    ("vanilla".into(), v.exclusive_ns as f64 / 1e6),
                    ("patched".into(), p.exclusive_ns as f64 / 1e6),
                ],
            ),
        ],
    )?;
    // A description; the seed's one verdict is judged on the modelled side
    // (`sides::munmap_verdict`).
    let verdict = format!(
        "exclusive hold {:.1} ms → {:.1} µs ({:.0}× shorter); faulter p99 during munmap {:.1} µs vs {:.1} µs without downgrade.",
        v.exclusive_ns as f64 / 1e6,
        p.exclusive_ns as f64 / 1e3,
        r.ratio.exclusive_hold,
        p.during.p99_ns as f64 / 1e3,
        v.during.p99_ns as f64 / 1e3,
    );
    let text = "Seed 003 (\"mm: zap pages with read mmap_sem in munmap for large mapping\"). munmap finds, splits \
and detaches the VMAs under the write lock, downgrades, then zaps and frees page tables under the read lock; a \
racing fault finds no VMA (SEGV_MAPERR).\n".to_string();
    let record = MunmapRecord {
        seed,
        vanilla: r.vanilla,
        patched: r.patched,
        ratio: r.ratio,
        time: label,
    };
    Ok(Outcome::new(text, vec![t], vec![plot], record, verdict))
}
