//! The command line, as close to the flags as given as possible (ripgrep's "low args"), and the
//! one step that turns the engine flags into a [`MachineConfig`] (the "high args").
//!
//! Every engine command flattens [`EngineArgs`], so `--mem`, `--cpus`, `--nodes`, `--backing`,
//! `--thp`, `--preset` and `--set` mean the same thing everywhere. Sizes are parsed like the
//! kernel's `memparse` ([`usermm::config::parse_size`]): `4G`, `512M`, `0x200000`, `4096`.
//!
//! Errors in the arguments are [`UsageError`]s: `main` prints them on one line and exits with
//! status 2, like clap's own usage errors. Anything that goes wrong while running exits with 1.

use std::{ffi::OsString, process::ExitCode};

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use serde::Serialize;
use usermm::config::{
    parse_size, BackingMode, MachineConfig, ThpMode, MAX_CPUS, MAX_MEM_BYTES, MAX_NODES,
    MIN_MEM_BYTES,
};

use crate::cmd::{
    bigfree::BigfreeArgs, munmap_test::MunmapTestArgs, percpu_test::PercpuTestArgs,
    reproduce::ReproduceArgs, usemem::UsememArgs,
};

/// usermm: the core of Linux memory management in user space — reproduce the seed experiments,
/// run vm-scalability's usemem against the engine, look at /proc-style figures.
#[derive(Debug, Parser)]
#[command(name = "usermm", version, arg_required_else_help = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every subcommand accepts, before or after its name.
#[derive(Debug, Clone, Default, Args, Serialize)]
pub struct GlobalArgs {
    /// Print the run's record as JSON on stdout instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print /proc/meminfo of a freshly booted machine.
    Meminfo(MachineArgs),
    /// Print /proc/vmstat of a freshly booted machine.
    Vmstat(MachineArgs),
    /// vm-scalability's usemem against the engine (or the host kernel with --host).
    Usemem(UsememArgs),
    /// Seeds 000/001: free time of one big touched mapping vs the free workqueue's max_active.
    Bigfree(BigfreeArgs),
    /// Seed 003: munmap's exclusive mmap-lock hold while other threads fault.
    MunmapTest(MunmapTestArgs),
    /// Seed 004: percpu memory after creating and removing memory cgroups.
    PercpuTest(PercpuTestArgs),
    /// Run the four experiments and write report/ (Markdown, SVG, JSON).
    Reproduce(ReproduceArgs),
}

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
    /// NUMA nodes: one zone and one LRU each (at most --cpus).
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
}

/// Parse the command line. On a mistake, print it on one line (`usermm: error: ...`) and return
/// exit status 2; for `--help` and `--version`, print them and return 0.
pub fn parse() -> Result<Cli, ExitCode> {
    parse_from(std::env::args_os())
}

/// [`parse`] of the given argument vector (the program name first).
pub fn parse_from(argv: impl IntoIterator<Item = impl Into<OsString>>) -> Result<Cli, ExitCode> {
    use clap::error::ErrorKind;
    let argv: Vec<OsString> = argv.into_iter().map(Into::into).collect();
    Cli::try_parse_from(&argv).map_err(|e| match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(2)
        }
        _ => {
            eprintln!("usermm: error: {}", one_line_error(&e, &argv));
            ExitCode::from(2)
        }
    })
}

/// clap's message without its usage block and tips, on one line, pointing at the `--help` of
/// the subcommand in `argv` (if any).
pub fn one_line_error(e: &clap::Error, argv: &[OsString]) -> String {
    let text = e.render().to_string();
    let words: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.trim_start().starts_with("tip:"))
        .flat_map(str::split_whitespace)
        .collect();
    let msg = words.join(" ");
    let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
    let sub = argv
        .iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find(|a| !a.starts_with('-'));
    match sub {
        Some(sub) if Cli::command().find_subcommand(sub).is_some() => {
            format!("{msg} (see 'usermm {sub} --help')")
        }
        _ => format!("{msg} (see 'usermm --help')"),
    }
}

/// A mistake in the arguments: printed on one line, exit status 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// `Err(UsageError)` as an `anyhow::Error`.
pub fn usage<T>(msg: impl Into<String>) -> anyhow::Result<T> {
    Err(UsageError(msg.into()).into())
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
        for s in &self.set {
            if let Err(e) = c.set(s) {
                return usage(format!("--set {s}: {e}"));
            }
        }
        if let Err(e) = c.validate() {
            return usage(format!("invalid machine configuration: {e}"));
        }
        Ok(c)
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

/// A size flag: `memparse` syntax, any value (usemem accepts 0).
pub fn parse_size_arg(s: &str) -> Result<u64, String> {
    parse_size(s)
        .map_err(|_| format!("expected a size such as 4G, 512M, 0x200000 or 4096, got '{s}'"))
}

/// A size flag that must be non-zero.
pub fn parse_nonzero_size_arg(s: &str) -> Result<u64, String> {
    match parse_size_arg(s)? {
        0 => Err("the size must be greater than 0".into()),
        n => Ok(n),
    }
}

/// `--mem`: a size the engine can emulate.
pub fn parse_mem_arg(s: &str) -> Result<u64, String> {
    let n = parse_size_arg(s)?;
    if n < MIN_MEM_BYTES {
        Err(format!("must be at least {}", human_bytes(MIN_MEM_BYTES)))
    } else if n > MAX_MEM_BYTES {
        Err(format!("must be at most {}", human_bytes(MAX_MEM_BYTES)))
    } else if n % usermm::PAGE_SIZE != 0 {
        Err(format!(
            "must be a multiple of {} bytes (the page size)",
            usermm::PAGE_SIZE
        ))
    } else {
        Ok(n)
    }
}

/// Bytes in the largest binary unit that divides them: `16M`, `1536K`, `16T`, `100`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [(u32, &str); 5] = [(50, "P"), (40, "T"), (30, "G"), (20, "M"), (10, "K")];
    UNITS
        .iter()
        .find(|&&(shift, _)| n != 0 && n % (1u64 << shift) == 0)
        .map_or_else(|| n.to_string(), |&(shift, u)| format!("{}{u}", n >> shift))
}

#[cfg(test)]
mod test {
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
        let e = engine(&["--cpus", "2", "--nodes", "4"])
            .to_config(MachineConfig::default())
            .unwrap_err();
        assert!(e.to_string().contains("nodes"), "{e}");
    }

    #[test]
    fn clap_errors_fit_on_one_line() {
        let argv: Vec<OsString> = ["usermm", "bigfree"].map(OsString::from).to_vec();
        let e = Cli::try_parse_from(&argv).unwrap_err();
        assert_eq!(
            one_line_error(&e, &argv),
            "the following required arguments were not provided: <SIZE> \
             (see 'usermm bigfree --help')"
        );
        let argv: Vec<OsString> = ["usermm", "--bogus"].map(OsString::from).to_vec();
        let e = Cli::try_parse_from(&argv).unwrap_err();
        assert_eq!(
            one_line_error(&e, &argv),
            "unexpected argument '--bogus' found (see 'usermm --help')"
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_mem_arg("4G"), Ok(4 << 30));
        assert!(parse_mem_arg("0").is_err());
        assert!(parse_mem_arg("99999T").is_err());
        assert!(parse_mem_arg("abc").is_err());
        assert!(parse_mem_arg("16777217").is_err());
        assert_eq!(parse_size_arg("0"), Ok(0));
        assert!(parse_nonzero_size_arg("0").is_err());
        assert_eq!(human_bytes(16 << 20), "16M");
        assert_eq!(human_bytes(1536 << 10), "1536K");
        assert_eq!(human_bytes(100), "100");
    }
}
