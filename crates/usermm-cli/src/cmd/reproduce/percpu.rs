//! Seed 004 in `reproduce`: the cgroup script both ways, beside the seed's three `Percpu:`
//! rows. Cheap (well under a second): every scale runs the seed's own.

use serde::Serialize;
use usermm_workloads::percpu_test::{self, PercpuTestOpts, PercpuTestResult};
use usermm_workloads::seeds::PERCPU_DEPOPULATE;

use super::experiment::{Given, Outcome};
use crate::report::bar_plot;

/// `percpu` in `results.json`.
#[derive(Debug, Serialize)]
pub struct PercpuRecord {
    pub seed: PercpuSeedFigures,
    pub vanilla: PercpuTestResult,
    pub patched: PercpuTestResult,
    pub ratio: PercpuRatio,
    pub ideal_after_delete_kb: u64,
    /// `measured (this host)` or `modelled (profile NAME)`: the clock it ran on (its figures
    /// are sizes, the same on both).
    pub time: String,
}

/// The seed's rows and their ratio after deleting.
#[derive(Debug, Serialize)]
pub struct PercpuSeedFigures {
    pub vanilla_kb: [u64; 3],
    pub patched_kb: [u64; 3],
    pub ratio_after_delete: f64,
}

/// Vanilla over patched after deleting; vanilla after deleting over after creating.
#[derive(Debug, Serialize)]
pub struct PercpuRatio {
    pub after_delete: f64,
    pub vanilla_plateau: f64,
}

pub(super) fn run(g: &Given<'_>) -> anyhow::Result<Outcome<PercpuRecord>> {
    let seed = PERCPU_DEPOPULATE;
    let opts = PercpuTestOpts::default();
    let mut base = usermm::MachineConfig::default();
    base.time.profile = percpu_test::DEFAULT_PROFILE.into();
    g.time.apply(&mut base);
    g.time.check(&mut base, None)?;
    let time_label = usermm_workloads::TimeLabel::of(&base).time;
    let r = percpu_test::run_ab(&opts, &base).map_err(|e| anyhow::anyhow!("percpu-test: {e}"))?;
    let t = crate::cmd::percpu_test::table(&r);
    let plot = g.out.join("percpu.svg");
    let (v, p) = (&r.vanilla.rows, &r.patched.rows);
    let phase = |name: &str, sv: u64, sp: u64, uv: u64, up: u64| {
        (
            name.to_string(),
            vec![
                ("seed vanilla".to_string(), sv as f64 / 1024.0),
                ("seed patched".to_string(), sp as f64 / 1024.0),
                ("usermm vanilla".to_string(), uv as f64 / 1024.0),
                ("usermm patched".to_string(), up as f64 / 1024.0),
            ],
        )
    };
    let (sv, sp) = (seed.vanilla_kb, seed.patched_kb);
    bar_plot(
        &plot,
        "Percpu memory over the script's three phases",
        "Percpu (MiB)",
        &[
            phase("start", sv[0], sp[0], v.start_kb, p.start_kb),
            phase(
                "after creating",
                sv[1],
                sp[1],
                v.after_create_kb,
                p.after_create_kb,
            ),
            phase(
                "after deleting",
                sv[2],
                sp[2],
                v.after_delete_kb,
                p.after_delete_kb,
            ),
        ],
    )?;
    let ok = (r.vanilla_plateau - 1.0).abs() <= 0.01 && r.ratio_after_delete >= 3.0;
    let verdict = format!(
        "{} vanilla keeps {:.1} % of its peak after deletion, patched depopulates to {} kB: {:.2}× smaller (seed {:.2}×); ideal {} kB. Start row differs (no boot-time percpu users modelled).",
        if ok { "reproduced —" } else { "NOT reproduced —" },
        r.vanilla_plateau * 100.0,
        p.after_delete_kb,
        r.ratio_after_delete,
        seed.ratio_after_delete(),
        r.vanilla.ideal_after_delete_kb,
    );
    let text = format!(
        "Seed 004 (\"percpu: partial chunk depopulation\"). Each memory cgroup allocates its \
percpu objects (2021 recipe) on a machine whose CPU count was calibrated to the seed's row \"after creating\" \
({} CPUs); the row after deletion comes out of the allocator untuned. Vanilla returns pages only when a whole \
chunk is free; patched isolates chunks with ≥ ¼ empty populated pages and depopulates them in the balance work.\n",
        percpu_test::SEED_CPUS
    );
    let record = PercpuRecord {
        seed: PercpuSeedFigures {
            vanilla_kb: sv,
            patched_kb: sp,
            ratio_after_delete: seed.ratio_after_delete(),
        },
        ratio: PercpuRatio {
            after_delete: r.ratio_after_delete,
            vanilla_plateau: r.vanilla_plateau,
        },
        ideal_after_delete_kb: r.vanilla.ideal_after_delete_kb,
        vanilla: r.vanilla,
        patched: r.patched,
        time: time_label,
    };
    Ok(Outcome::new(text, vec![t], vec![plot], record, verdict))
}
