//! The engine flags: one emulated machine, described the same way by every engine command.
//!
//! [`EngineArgs::to_config`] is the only place flags become a [`MachineConfig`]: a command's
//! defaults, then `--preset` (only what the preset changes), then the flags, then each `--set`
//! in order, then [`MachineConfig::validate`]. Each error names the flag that caused it.
//!
//! [`TimeArgs`] (`--time wall|virtual`, `--profile NAME|FILE`) are part of the engine flags,
//! and stand alone in commands that build their machines themselves (`reproduce`).

use clap::{Args, ValueEnum};
use serde::Serialize;
use usermm::config::{
    BackingMode, MachineConfig, ScaleCost, ThpMode, TimeMode, MAX_CPUS, MAX_NODES,
};
use usermm::vtime::Profile;

use super::usage::{usage, UsageError};
use super::value::parse_mem_arg;

/// The arguments of a command that only boots a machine (`meminfo`, `vmstat`).
#[derive(Debug, Clone, Args, Serialize)]
pub struct MachineArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// `--backing`: does a data frame hold real bytes?
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackingArg {
    Full,
    Sparse,
}

/// `--thp`: `/sys/kernel/mm/transparent_hugepage/enabled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ThpArg {
    Always,
    Madvise,
    Never,
}

impl From<BackingArg> for BackingMode {
    fn from(b: BackingArg) -> Self {
        match b {
            BackingArg::Full => BackingMode::Full,
            BackingArg::Sparse => BackingMode::Sparse,
        }
    }
}

impl From<ThpArg> for ThpMode {
    fn from(t: ThpArg) -> Self {
        match t {
            ThpArg::Always => ThpMode::Always,
            ThpArg::Madvise => ThpMode::Madvise,
            ThpArg::Never => ThpMode::Never,
        }
    }
}

/// `--time`: which clock the figures are read on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeArg {
    /// Host threads, host time: figures measured on this host.
    Wall,
    /// The same code as a deterministic model of the profile's machine: figures modelled.
    Virtual,
}

/// The clock of a run (docs/two-clocks.md).
#[derive(Debug, Clone, Default, Args, Serialize)]
#[command(next_help_heading = "Time")]
pub struct TimeArgs {
    /// wall: host threads and host time (measured on this host); virtual: the same code as a
    /// deterministic model of the profile's machine (modelled, identical run after run).
    #[arg(long = "time", value_name = "MODE")]
    pub mode: Option<TimeArg>,
    /// Cost profile of virtual time: haswell-ex-4s, haswell-ep-2s, e5-2680-32c, hpe-64s,
    /// broadwell-ep-2s or a .toml file (alone, it implies --time virtual; default: the experiment's seed machine).
    #[arg(long, value_name = "NAME|FILE")]
    pub profile: Option<String>,
    /// Multiply one named cost of the profile by FACTOR (repeatable), for sensitivity runs:
    /// a cost key (zap_pte, lru_del, ...), transfer.same_socket, transfer.other_socket,
    /// transfer.smt_sibling, wakeup, atomic_rmw, smt.sibling_factor or locks.NAME.
    #[arg(long = "scale-cost", value_name = "KEY=FACTOR", value_parser = parse_scale_cost)]
    pub scale_cost: Vec<(String, f64)>,
    /// The era factors a 2016–2019 profile's costs carry (docs/profiles.md, "Era factors"):
    /// inferred (the era file's, by `usermm infer`), unfitted (none: this host's costs scaled
    /// by clock) or zap=F,free=F,locked=F,fault=F.
    #[arg(long, value_name = "ERA", value_parser = parse_era)]
    pub era: Option<String>,
}

/// `--era`: checked here, applied as `time.era`.
fn parse_era(s: &str) -> Result<String, String> {
    usermm::vtime::EraChoice::parse(s).map(|_| s.to_string())
}

/// `KEY=FACTOR` of `--scale-cost`.
fn parse_scale_cost(s: &str) -> Result<(String, f64), String> {
    let (k, f) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected KEY=FACTOR, e.g. zap_pte=1.5"))?;
    let f: f64 = f
        .trim()
        .parse()
        .map_err(|_| format!("`{s}`: FACTOR must be a number"))?;
    if !(f.is_finite() && f > 0.0) {
        return Err(format!("`{s}`: FACTOR must be positive"));
    }
    Ok((k.trim().to_string(), f))
}

impl TimeArgs {
    /// Whether these flags ask for virtual time.
    pub fn is_virtual(&self) -> bool {
        match self.mode {
            Some(TimeArg::Virtual) => true,
            Some(TimeArg::Wall) => false,
            None => self.profile.is_some() || self.era.is_some(),
        }
    }

    /// Set `time.*` of `c`: the mode, and the profile when given (else `c`'s default).
    pub fn apply(&self, c: &mut MachineConfig) {
        if self.is_virtual() {
            c.time.mode = TimeMode::Virtual;
        } else if self.mode.is_some() {
            c.time.mode = TimeMode::Wall;
        }
        if let Some(p) = &self.profile {
            c.time.profile = p.clone();
        }
        if let Some(e) = &self.era {
            c.time.era = e.clone();
        }
    }

    /// Check the profile of a virtual `c` before anything runs: an unknown name, a malformed
    /// or incomplete file, or more CPUs than the profile has hardware threads is a
    /// [`UsageError`] naming the flag (or the key) that caused it.
    ///
    /// With `--scale-cost`, each scaling is checked here and kept in `c.time.scale`, which the
    /// machine applies to the profile when it boots (no file is written).
    pub fn check(&self, c: &mut MachineConfig, cpus_flag: Option<u16>) -> anyhow::Result<()> {
        if c.time.mode != TimeMode::Virtual {
            if let Some(p) = &self.profile {
                return usage(format!(
                    "--profile {p}: only with --time virtual (wall time measures this host)"
                ));
            }
            if let Some((k, _)) = self.scale_cost.first() {
                return usage(format!("--scale-cost {k}=...: only with --time virtual"));
            }
            if let Some(e) = &self.era {
                return usage(format!("--era {e}: only with --time virtual"));
            }
            return Ok(());
        }
        if c.time.profile.is_empty() {
            return usage(format!(
                "--time virtual needs --profile NAME|FILE (built in: {})",
                Profile::builtin_names().join(", ")
            ));
        }
        let p = match Profile::resolve(&c.time.profile) {
            Ok(p) => p,
            Err(e) => {
                let flag = match &self.profile {
                    Some(name) => format!("--profile {name}"),
                    None => format!("time.profile={}", c.time.profile),
                };
                // The profile's own message names its field ("profile t.toml: costs.x: ..."):
                // the flag already names the profile.
                let msg = e.to_string();
                let msg = msg.strip_prefix("profile: ").unwrap_or(&msg);
                let own = format!("profile {}: ", c.time.profile);
                let msg = msg.strip_prefix(own.as_str()).unwrap_or(msg);
                return usage(format!("{flag}: {msg}"));
            }
        };
        if let Some(e) = &self.era {
            let choice = usermm::vtime::EraChoice::parse(e).map_err(anyhow::Error::msg)?;
            if let Err(err) = p.with_era(choice) {
                let msg = err.to_string();
                return usage(format!("--era {e}: {msg}"));
            }
        }
        if !self.scale_cost.is_empty() {
            let mut scaled = p.clone();
            for (k, f) in &self.scale_cost {
                scaled = match scaled.scaled(k, *f) {
                    Ok(s) => s,
                    Err(e) => {
                        let f = usermm::vtime::compact_number(*f);
                        return usage(format!("--scale-cost {k}={f}: {e}"));
                    }
                };
            }
            // The machine applies the same scaling when it resolves the profile at boot:
            // nothing is written anywhere.
            c.time.scale = self
                .scale_cost
                .iter()
                .map(|(key, factor)| ScaleCost {
                    key: key.clone(),
                    factor: *factor,
                })
                .collect();
        }
        if let Err(e) = p.check_cpus(usize::from(c.cpus)) {
            let flag = cpus_flag.map_or("cpus".to_string(), |n| format!("--cpus {n}"));
            let msg = e.to_string();
            let msg = msg.strip_prefix("cpus: ").unwrap_or(&msg);
            return usage(format!("{flag}: {msg}"));
        }
        Ok(())
    }
}

/// The emulated machine, shared by every engine command. Each flag left out keeps the
/// command's default.
#[derive(Debug, Clone, Default, Args, Serialize)]
#[command(next_help_heading = "Machine")]
pub struct EngineArgs {
    /// Emulated RAM (MemTotal), e.g. 4G, 512M, 0x40000000.
    #[arg(long, value_name = "SIZE", value_parser = parse_mem_arg)]
    pub mem: Option<u64>,
    /// Possible CPUs (nr_possible_cpus).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=i64::from(MAX_CPUS)))]
    pub cpus: Option<u16>,
    /// NUMA nodes: one zone and one LRU each, up to 1024 (MAX_NUMNODES); in virtual time, more
    /// than the profile's are emulated as numa=fake=N does (each CPU on its socket's first
    /// node); on the wall clock, more than --cpus makes memory-only nodes.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=i64::from(MAX_NODES)))]
    pub nodes: Option<u16>,
    /// full: data pages hold bytes; sparse: data pages are never touched (for huge runs).
    #[arg(long, value_name = "MODE")]
    pub backing: Option<BackingArg>,
    /// Transparent huge pages.
    #[arg(long, value_name = "MODE")]
    pub thp: Option<ThpArg>,
    /// Start from a named configuration: vanilla, patched, seed-000 .. seed-003.
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
    /// Set one configuration key, e.g. --set free.parallel=on (repeatable; applied last).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    #[command(flatten)]
    pub time: TimeArgs,
}

impl EngineArgs {
    /// The machine these flags describe, on top of a command's `defaults`.
    ///
    /// Applied in order: `--preset` (only the keys the preset changes from
    /// [`MachineConfig::default`], so a command's own defaults survive `--preset patched`),
    /// then the flags, then each `--set` in the order given, then
    /// [`MachineConfig::validate`]. Every error is a [`UsageError`] naming the flag.
    pub fn to_config(&self, defaults: MachineConfig) -> anyhow::Result<MachineConfig> {
        let mut c = defaults;
        if let Some(name) = &self.preset {
            let preset = match MachineConfig::preset(name) {
                Ok(p) => p,
                Err(e) => return usage(format!("--preset {name}: {e}")),
            };
            c = overlay_preset(&c, &preset)
                .map_err(|e| UsageError(format!("--preset {name}: {e}")))?;
        }
        if let Some(mem) = self.mem {
            c.mem = mem;
        }
        if let Some(cpus) = self.cpus {
            c.cpus = cpus;
        }
        if let Some(nodes) = self.nodes {
            c.nodes = nodes;
        }
        if let Some(b) = self.backing {
            c.backing = b.into();
        }
        if let Some(t) = self.thp {
            c.thp = t.into();
        }
        self.time.apply(&mut c);
        for s in &self.set {
            if let Err(e) = c.set(s) {
                return usage(format!("--set {s}: {e}"));
            }
        }
        if c.time.mode != TimeMode::Virtual {
            // A profile set on the wall clock would be ignored: say so instead.
            if let Some(s) = self
                .set
                .iter()
                .find(|s| s.trim_start().starts_with("time."))
            {
                if !s.trim_start().starts_with("time.mode") {
                    return usage(format!(
                        "--set {s}: only with --time virtual (wall time measures this host)"
                    ));
                }
            }
        }
        self.time.check(&mut c, self.cpus)?;
        if let Err(e) = c.validate() {
            return usage(format!("{}: {e}", self.shape(&c)));
        }
        // What booting the machine commits: its page metadata (about 1/1024 of its RAM) and
        // per-CPU lists (one per node and CPU).
        super::usage::check_machine_memory(&c, 0, 0, || {
            format!(
                "{}: booting it commits its page metadata and per-CPU lists",
                self.shape(&c)
            )
        })?;
        Ok(c)
    }
}

impl EngineArgs {
    /// The machine's shape as the flags gave it, for an error about the shape: `--mem 16M
    /// --nodes 8`, the command's default values named as such.
    fn shape(&self, c: &MachineConfig) -> String {
        let mem = crate::report::format::human_bytes(c.mem);
        let given: Vec<String> = [
            self.mem.map(|_| format!("--mem {mem}")),
            self.cpus.map(|n| format!("--cpus {n}")),
            self.nodes.map(|n| format!("--nodes {n}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        let default = format!(
            "the machine (mem {mem}, cpus {}, nodes {})",
            c.cpus, c.nodes
        );
        if given.is_empty() {
            default
        } else {
            format!("{}: {default}", given.join(" "))
        }
    }
}

/// `base` with every key that `preset` changes from the default machine taken from `preset`.
fn overlay_preset(
    base: &MachineConfig,
    preset: &MachineConfig,
) -> serde_json::Result<MachineConfig> {
    fn walk(out: &mut serde_json::Value, default: &serde_json::Value, preset: &serde_json::Value) {
        use serde_json::Value::Object;
        match (out, default, preset) {
            (Object(o), Object(d), Object(p)) => {
                for (k, pv) in p {
                    if let (Some(ov), Some(dv)) = (o.get_mut(k), d.get(k)) {
                        walk(ov, dv, pv);
                    }
                }
            }
            (o, d, p) => {
                if d != p {
                    *o = p.clone();
                }
            }
        }
    }
    let mut out = serde_json::to_value(base)?;
    let default = serde_json::to_value(MachineConfig::default())?;
    walk(&mut out, &default, &serde_json::to_value(preset)?);
    serde_json::from_value(out)
}

#[cfg(test)]
mod test {
    use clap::Parser;
    use usermm::config::FreePolicy;

    use super::*;

    fn engine(argv: &[&str]) -> EngineArgs {
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            e: EngineArgs,
        }
        let argv = std::iter::once("t").chain(argv.iter().copied());
        T::try_parse_from(argv).unwrap().e
    }

    #[test]
    fn flags_then_set_then_validate() {
        let c = engine(&[
            "--mem",
            "4G",
            "--cpus",
            "8",
            "--set",
            "free.parallel=on",
            "--set",
            "mem=2G",
        ])
        .to_config(MachineConfig::default())
        .unwrap();
        assert_eq!((c.mem, c.cpus), (2 << 30, 8));
        assert_eq!(c.free.policy, FreePolicy::Parallel);
    }

    #[test]
    fn preset_keeps_command_defaults_it_does_not_name() {
        let defaults = MachineConfig {
            backing: BackingMode::Sparse,
            thp: ThpMode::Never,
            ..Default::default()
        };
        let c = engine(&["--preset", "patched"])
            .to_config(defaults.clone())
            .unwrap();
        assert_eq!((c.backing, c.thp), (BackingMode::Sparse, ThpMode::Never));
        assert_eq!(c.free.policy, FreePolicy::Parallel);
        let c = engine(&["--preset", "seed-000", "--mem", "8G"])
            .to_config(defaults)
            .unwrap();
        assert_eq!((c.mem, c.cpus, c.nodes), (8 << 30, 144, 4));
    }

    #[test]
    fn errors_name_the_flag() {
        let e = engine(&["--set", "nonsense=1"])
            .to_config(MachineConfig::default())
            .unwrap_err();
        assert!(e.downcast_ref::<UsageError>().is_some());
        assert!(e.to_string().starts_with("--set nonsense=1: "), "{e}");
        let e = engine(&["--preset", "nope"])
            .to_config(MachineConfig::default())
            .unwrap_err();
        assert!(e.to_string().starts_with("--preset nope: "), "{e}");
        // More nodes than CPUs is fine (fake NUMA); less than 4 MiB a node is not.
        let e = engine(&["--mem", "16M", "--nodes", "8"])
            .to_config(MachineConfig::default())
            .unwrap_err();
        assert!(e.to_string().contains("node"), "{e}");
    }
}
