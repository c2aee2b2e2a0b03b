//! `usermm percpu-test`: seed 004. Create memory cgroups in the script's order (N parents, each
//! followed by its M children), remove the children, and print `Percpu:` at each step.

use anyhow::anyhow;
use clap::{Args, ValueEnum};
use serde::Serialize;

use usermm::memcg::RecipeEra;
use usermm::MachineConfig;
use usermm_workloads::percpu_test::{self, PercpuAbResult, PercpuTestOpts, MEM_CGROUP_ID_MAX};
use usermm_workloads::seeds;

use crate::args::{usage, EngineArgs, GlobalArgs};
use crate::report::format::human_bytes;
use crate::report::Table;

/// `--cgroups NxM`: N parent cgroups, each with M children (the seed: 1000x10 = 11 000 cgroups,
/// 10 000 of them removed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CgroupShape {
    pub parents: u32,
    pub children: u32,
}

impl CgroupShape {
    /// Cgroups created in all.
    pub fn total(self) -> u64 {
        u64::from(self.parents) * (1 + u64::from(self.children))
    }
}

impl std::str::FromStr for CgroupShape {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("expected NxM (parents x children per parent), e.g. 1000x10, got '{s}'");
        let (n, m) = s.split_once(['x', 'X']).ok_or_else(bad)?;
        let parents: u32 = n.trim().parse().map_err(|_| bad())?;
        let children: u32 = m.trim().parse().map_err(|_| bad())?;
        if parents == 0 || children == 0 {
            return Err(format!("both counts must be at least 1, got '{s}'"));
        }
        let shape = CgroupShape { parents, children };
        if shape.total() > MEM_CGROUP_ID_MAX {
            return Err(format!(
                "{parents} × (1 + {children}) = {} cgroups; at most {MEM_CGROUP_ID_MAX} \
                 (MEM_CGROUP_ID_MAX: memory cgroup IDs are 16 bits)",
                shape.total()
            ));
        }
        Ok(shape)
    }
}

impl std::fmt::Display for CgroupShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.parents, self.children)
    }
}

/// `--recipe`: which kernel's percpu users a memory cgroup allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
pub enum Recipe {
    /// v5.12-era memcg (the seed's kernel).
    #[value(name = "2021")]
    #[serde(rename = "2021")]
    V2021,
    /// Today's memcg.
    #[value(name = "modern")]
    #[serde(rename = "modern")]
    Modern,
}

impl Recipe {
    /// The engine's name for this era.
    pub fn era(self) -> RecipeEra {
        match self {
            Recipe::V2021 => RecipeEra::V2021,
            Recipe::Modern => RecipeEra::Modern,
        }
    }
}

#[derive(Debug, Clone, Args, Serialize)]
pub struct PercpuTestArgs {
    /// Cgroups to create: N parents each followed by M children.
    #[arg(long, value_name = "NxM", default_value = "1000x10")]
    pub cgroups: CgroupShape,
    /// Per-cgroup percpu allocations of this kernel era.
    #[arg(long, value_name = "ERA", default_value = "2021")]
    pub recipe: Recipe,
    /// Also print each side's /sys/kernel/debug/percpu_stats after the deletion phase (the
    /// kernel's text: allocation info, global stats, a block per chunk).
    #[arg(long)]
    pub percpu_stats: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl PercpuTestArgs {
    /// The workload's options: the seed's script with this shape, recipe and CPU count.
    pub fn opts(&self) -> PercpuTestOpts {
        PercpuTestOpts {
            parents: self.cgroups.parents as usize,
            children: self.cgroups.children as usize,
            cpus: self.engine.cpus,
            recipe: self.recipe.era(),
            ..PercpuTestOpts::default()
        }
    }
}

/// The title of [`table`]: the script the run followed, and the seed's when the run's differs
/// (the seed columns are always the seed's own script).
fn title(r: &PercpuAbResult) -> String {
    let seed = seeds::PERCPU_DEPOPULATE;
    let v = &r.vanilla;
    let parents = v.created - v.removed;
    let children = v.removed / parents.max(1);
    let mut t = format!(
        "Percpu (kB) — {parents} cg_i each followed by {children} cg_i_j; every cg_i_j removed; settle"
    );
    let seed_shape = (u64::from(seed.parents), u64::from(seed.children));
    if (parents, children) != seed_shape || v.recipe != RecipeEra::V2021 {
        let recipe = match v.recipe {
            RecipeEra::V2021 => "",
            RecipeEra::Modern => ", modern recipe",
        };
        t += &format!(
            "{recipe} (seed columns: {} × {}, 2021 recipe)",
            seed.parents, seed.children
        );
    }
    t
}

/// The seed's three rows both ways, beside ours, with the ideal and the ratio.
pub fn table(r: &PercpuAbResult) -> Table {
    let mut t = Table::new(
        title(r),
        [
            "",
            "seed vanilla",
            "seed patched",
            "usermm vanilla",
            "usermm patched",
            "ideal",
        ],
    );
    let sv = r.seed_vanilla_kb;
    let sp = r.seed_patched_kb;
    let (v, p) = (&r.vanilla.rows, &r.patched.rows);
    let rows = [
        (
            "at start",
            sv[0],
            sp[0],
            v.start_kb,
            p.start_kb,
            String::new(),
        ),
        (
            "after creating",
            sv[1],
            sp[1],
            v.after_create_kb,
            p.after_create_kb,
            String::new(),
        ),
        (
            "after deleting",
            sv[2],
            sp[2],
            v.after_delete_kb,
            p.after_delete_kb,
            r.vanilla.ideal_after_delete_kb.to_string(),
        ),
    ];
    for (label, a, b, c, d, ideal) in rows {
        t.push_row([
            label.to_string(),
            a.to_string(),
            b.to_string(),
            c.to_string(),
            d.to_string(),
            ideal,
        ]);
    }
    t.push_row([
        "vanilla / patched after deleting".to_string(),
        format!("{:.2}", sv[2] as f64 / sp[2] as f64),
        String::new(),
        format!("{:.2}", r.ratio_after_delete),
        String::new(),
        String::new(),
    ]);
    t
}

/// Most cgroups × CPUs one run allocates percpu memory for (each cgroup populates its
/// units on every CPU, twice: vanilla and patched): the seed's 11 000 cgroups on 512 CPUs,
/// 16 s in a release build and under a minute in a debug one (1024 CPUs took 78 s there;
/// 4096 ran for minutes without a line).
pub const MAX_CGROUP_CPUS: u64 = 11_000 * 512;

pub fn run(args: &PercpuTestArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let cpus = u64::from(args.opts().cpus());
    let work = args.cgroups.total().saturating_mul(cpus);
    if work > MAX_CGROUP_CPUS {
        return usage(format!(
            "--cpus {cpus} with --cgroups {}: {} cgroups on {cpus} CPUs is {work} cgroup-CPUs of \
             percpu work, at most {MAX_CGROUP_CPUS} (the seed's script on 512 CPUs); lower \
             --cpus or --cgroups",
            args.cgroups,
            args.cgroups.total()
        ));
    }
    let mut defaults = MachineConfig::default();
    defaults.time.profile = percpu_test::DEFAULT_PROFILE.into();
    // The default machine is sized from the script (its CPUs and cgroups), before the flags.
    defaults = args.opts().machine_config(&defaults);
    let cfg = args.engine.to_config(defaults)?;
    // The machine is sized from the script when --mem is left out; a --mem given is kept.
    if let Some(mem) = args.engine.mem {
        let need = args.opts().machine_config(&cfg).mem;
        if need > mem {
            return usage(format!(
                "--mem {}: {} cgroups on {} CPUs need at least {} of percpu and slack; \
                 raise --mem or leave it out (or lower --cpus or --cgroups)",
                human_bytes(mem),
                args.cgroups.total(),
                args.opts().cpus(),
                human_bytes(need)
            ));
        }
    }
    let r = percpu_test::run_ab(&args.opts(), &cfg).map_err(|e| anyhow!("percpu-test: {e}"))?;
    super::emit(g, &r, |r| {
        let mut text = format!(
            "{}\nvanilla after deleting / after creating: {:.3} (seed {:.3})\nrun time: vanilla {:.3} s, patched {:.3} s, {}\n",
            table(r).render_text(),
            r.vanilla_plateau,
            seeds::PERCPU_DEPOPULATE.vanilla_plateau(),
            r.vanilla.wall_seconds,
            r.patched.wall_seconds,
            r.vanilla.time,
        );
        if args.percpu_stats {
            for (side, run) in [("vanilla", &r.vanilla), ("patched", &r.patched)] {
                text.push_str(&format!(
                    "\n# {side}: /sys/kernel/debug/percpu_stats after deleting\n{}",
                    run.percpu_stats_after_delete
                ));
            }
        }
        text
    })
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn cgroup_shape() {
        let s: CgroupShape = "1000x10".parse().unwrap();
        assert_eq!(
            s,
            CgroupShape {
                parents: 1000,
                children: 10
            }
        );
        assert_eq!(s.total(), 11_000);
        assert_eq!(s.to_string(), "1000x10");
        assert!("1000".parse::<CgroupShape>().is_err());
        assert!("0x10".parse::<CgroupShape>().is_err());
        assert!("ax10".parse::<CgroupShape>().is_err());
        // A hostile shape: the product overflowed; now the shape is refused by its total.
        let e = "100000000x100000000".parse::<CgroupShape>().unwrap_err();
        assert!(e.contains("at most 65535"), "{e}");
        assert!("5957x10".parse::<CgroupShape>().is_ok());
        assert!("5958x10".parse::<CgroupShape>().is_err());
    }
}
