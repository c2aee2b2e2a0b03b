//! `usermm percpu-grid`: the table behind `percpu-test`'s one fitted constant.
//!
//! `percpu-test` runs the seed's script on a machine whose CPU count
//! ([`percpu_test::SEED_CPUS`]) was chosen so that the row "after creating" matches the seed's;
//! this command shows how that choice was made and what it moves. It runs the script both ways
//! at every CPU count of `--grid-cpus` and, for the 2021 recipe, every `NR_VM_EVENT_ITEMS` of
//! `--grid-events`, and prints one row per point: the recipe's bytes per unit, the three
//! `Percpu:` rows both ways, the ideal, vanilla/patched and patched/ideal. Everything else
//! (`--nodes`, `--set pcpu.unit_size=...`) comes from the engine flags.
//!
//! Each point is a full run of the script (about a second each in a release build at the
//! seed's 1000 × 10).

use clap::Args;
use serde::Serialize;
use usermm::memcg::RecipeEra;
use usermm::MachineConfig;
use usermm_workloads::percpu_test::{self, GridPoint, PercpuTestOpts};
use usermm_workloads::seeds::PERCPU_DEPOPULATE;

use super::percpu_test::PercpuTestArgs;
use crate::args::{usage, GlobalArgs};
use crate::report::Table;

/// Largest `NR_VM_EVENT_ITEMS` tried: the kernel's has about a hundred entries (96 in 5.12).
pub const MAX_EVENTS: u32 = 4096;

#[derive(Debug, Clone, Args, Serialize)]
pub struct PercpuGridArgs {
    /// CPU counts (units per chunk) to try, a comma list.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "15",
          value_parser = clap::value_parser!(u16).range(1..=i64::from(usermm::config::MAX_CPUS)))]
    pub grid_cpus: Vec<u16>,
    /// NR_VM_EVENT_ITEMS of the 2021 recipe to try, a comma list (ignored by --recipe modern).
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "96",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_EVENTS)))]
    pub grid_events: Vec<u32>,
    /// The script's shape and recipe, and the engine flags: `percpu-test`'s own.
    #[command(flatten)]
    #[serde(flatten)]
    pub run: PercpuTestArgs,
}

/// What `usermm percpu-grid` prints (with `--json`, as is).
#[derive(Debug, Serialize)]
pub struct GridRecord {
    pub args: PercpuGridArgs,
    pub points: Vec<GridPoint>,
}

pub fn run(args: &PercpuGridArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    if args.run.engine.cpus.is_some() {
        return usage("percpu-grid: the CPU counts are --grid-cpus, not --cpus");
    }
    let cfg = args.run.engine.to_config(MachineConfig::default())?;
    if cfg.time.mode == usermm::config::TimeMode::Virtual {
        // Each grid point is a machine of that many CPUs: the profile must have them.
        if let Ok(p) = usermm::vtime::Profile::resolve(&cfg.time.profile) {
            for &n in &args.grid_cpus {
                if let Err(e) = p.check_cpus(usize::from(n)) {
                    let msg = e.to_string();
                    let msg = msg.strip_prefix("cpus: ").unwrap_or(&msg).to_string();
                    return usage(format!("percpu-grid: --grid-cpus {n}: {msg}"));
                }
            }
        }
    }
    let base = PercpuTestOpts {
        parents: args.run.cgroups.parents as usize,
        children: args.run.cgroups.children as usize,
        recipe: args.run.recipe.era(),
        ..PercpuTestOpts::default()
    };
    let points = percpu_test::percpu_grid(&base, &args.grid_cpus, &args.grid_events, &cfg)
        .map_err(|e| anyhow::anyhow!("percpu-grid: {e}"))?;
    let record = GridRecord {
        args: args.clone(),
        points,
    };
    super::emit(g, &record, |r| table(r).render_text())
}

/// One row per point.
pub fn table(r: &GridRecord) -> Table {
    let seed = PERCPU_DEPOPULATE;
    let shape = r.args.run.cgroups;
    let recipe = match r.args.run.recipe.era() {
        RecipeEra::V2021 => "2021",
        RecipeEra::Modern => "modern",
    };
    let mut t = Table::new(
        format!(
            "Percpu (kB), {} cg_i each followed by {} cg_i_j, {recipe} recipe (seed: {} after creating, {:.2} vanilla / patched after deleting)",
            shape.parents,
            shape.children,
            seed.vanilla_kb[1],
            seed.ratio_after_delete()
        ),
        [
            "cpus",
            "events",
            "B/unit",
            "vanilla start",
            "created",
            "deleted",
            "patched start",
            "created",
            "deleted",
            "ideal",
            "vanilla / patched",
            "patched / ideal",
        ],
    );
    for p in &r.points {
        let (v, q) = (&p.vanilla, &p.patched);
        t.push_row([
            p.cpus.to_string(),
            p.nr_vm_event_items.map_or("-".into(), |e| e.to_string()),
            p.recipe_bytes_per_unit.to_string(),
            v.start_kb.to_string(),
            v.after_create_kb.to_string(),
            v.after_delete_kb.to_string(),
            q.start_kb.to_string(),
            q.after_create_kb.to_string(),
            q.after_delete_kb.to_string(),
            p.ideal_after_delete_kb.to_string(),
            format!("{:.2}", p.ratio_after_delete),
            format!("{:.2}", p.patched_over_ideal),
        ]);
    }
    t
}
