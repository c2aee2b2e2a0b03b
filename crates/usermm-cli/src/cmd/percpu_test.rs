//! `usermm percpu-test`: seed 004. Create memory cgroups in the script's order (N parents, each
//! followed by its M children), remove the children, and print `Percpu:` at each step.

use anyhow::anyhow;
use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::args::{EngineArgs, GlobalArgs};

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
        Ok(CgroupShape { parents, children })
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

#[derive(Debug, Clone, Args, Serialize)]
pub struct PercpuTestArgs {
    /// Cgroups to create: N parents each followed by M children.
    #[arg(long, value_name = "NxM", default_value = "1000x10")]
    pub cgroups: CgroupShape,
    /// Per-cgroup percpu allocations of this kernel era.
    #[arg(long, value_name = "ERA", default_value = "2021")]
    pub recipe: Recipe,
    #[command(flatten)]
    pub engine: EngineArgs,
}

pub fn run(args: &PercpuTestArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let _ = (args, g);
    Err(anyhow!("percpu-test is not built yet"))
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
    }
}
