//! The command line as a whole: the subcommands, parsing with one-line errors, and dispatch.
//!
//! This is the top of the crate's module graph: it names every subcommand's argument struct
//! (from [`crate::cmd`]) and calls its `run`. Below it, the commands use the shared flags and
//! value parsers of [`crate::args`], which know no command — so adding a command (a module
//! in `cmd/`, a variant of [`Command`], an arm in [`run`]) touches nothing they depend on.
//!
//! Parsing follows ripgrep's split: clap turns the argument vector into these structs (the
//! flags as given); each command then resolves its own [`crate::args::EngineArgs`] into a
//! `MachineConfig` on top of its defaults.

use std::{ffi::OsString, process::ExitCode};

use clap::{CommandFactory, Parser, Subcommand};

use crate::args::{GlobalArgs, MachineArgs};
use crate::cmd::{
    self, bench::BenchArgs, bigfree::BigfreeArgs, calibrate::CalibrateArgs, infer::InferArgs,
    munmap_test::MunmapTestArgs, percpu_grid::PercpuGridArgs, percpu_test::PercpuTestArgs,
    proc_file::ProcFile, reproduce::ReproduceArgs, sweep::SweepArgs, usemem::UsememArgs,
    will_it_scale::WillItScaleArgs,
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
    /// Seed 004's grid: the script at several CPU counts and event counts (the table behind
    /// percpu-test's one fitted constant).
    PercpuGrid(PercpuGridArgs),
    /// Run the four experiments and write report/ (Markdown, SVG, JSON).
    Reproduce(ReproduceArgs),
    /// The performance dashboard: every hot path, engine (sparse, full) beside the host kernel.
    Bench(BenchArgs),
    /// Measure this host's kernel and write a this-host cost profile (--profile FILE).
    Calibrate(CalibrateArgs),
    /// Estimate the era factors (the model's declared unknowns) from their training rows and
    /// write the era file the seed profiles load.
    Infer(InferArgs),
    /// Run one command over a grid of arguments (locally, or as GNU parallel/Slurm jobs) and
    /// merge the runs into one table.
    #[command(after_help = cmd::sweep::GRID_HELP)]
    Sweep(SweepArgs),
    /// will-it-scale's memory tests (page_fault1, mmap1, brk1, malloc1, ...): its lines, or
    /// runtest.py's CSV, on the engine (wall or virtual time) or the host kernel.
    WillItScale(WillItScaleArgs),
}

/// Run the command the user asked for.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let g = &cli.global;
    match &cli.command {
        Command::Meminfo(a) => cmd::proc_file::run(ProcFile::Meminfo, a, g),
        Command::Vmstat(a) => cmd::proc_file::run(ProcFile::Vmstat, a, g),
        Command::Usemem(a) => cmd::usemem::run(a, g),
        Command::Bigfree(a) => cmd::bigfree::run(a, g),
        Command::MunmapTest(a) => cmd::munmap_test::run(a, g),
        Command::PercpuTest(a) => cmd::percpu_test::run(a, g),
        Command::PercpuGrid(a) => cmd::percpu_grid::run(a, g),
        Command::Reproduce(a) => cmd::reproduce::run(a, g),
        Command::Bench(a) => cmd::bench::run(a, g),
        Command::Calibrate(a) => cmd::calibrate::run(a, g),
        Command::Infer(a) => cmd::infer::run(a, g),
        Command::Sweep(a) => cmd::sweep::run(a, g, &check_point),
        Command::WillItScale(a) => cmd::will_it_scale::run_cmd(a, g),
    }
}

/// Whether `args` (a subcommand and its arguments, without the program name) are a usermm
/// command line a sweep can run; if not, why, on one line. `sweep` runs it on every point.
pub fn check_point(args: &[String]) -> Result<(), String> {
    use clap::error::ErrorKind;
    let argv: Vec<OsString> = std::iter::once(OsString::from("usermm"))
        .chain(args.iter().map(OsString::from))
        .collect();
    match Cli::try_parse_from(keep_usemem_separator(argv.clone())) {
        Ok(Cli {
            command: Command::Sweep(_),
            ..
        }) => Err("a sweep cannot run sweeps".into()),
        Ok(_) => Ok(()),
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            Err("asks for help or the version, not a run".into())
        }
        Err(e) => Err(one_line_error(&e, &argv)),
    }
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
    Cli::try_parse_from(keep_usemem_separator(argv.clone())).map_err(|e| match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(2)
        }
        _ => {
            eprintln!(
                "usermm: error: {}",
                crate::args::visible(&one_line_error(&e, &argv))
            );
            ExitCode::from(2)
        }
    })
}

/// `usermm usemem ARGS`: ARGS reach usemem's own parser as given. clap would take a `--`
/// before the first of them as its own separator and drop it, so `usermm usemem -- -5` would
/// reach usemem as `-5`, an option; a `--` put right after the subcommand is the one clap
/// takes, and the user's stays (getopt then reads every word after it as an operand).
fn keep_usemem_separator(mut argv: Vec<OsString>) -> Vec<OsString> {
    let sub = argv
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, a)| a.to_str().is_none_or(|a| a == "--" || !a.starts_with('-')))
        .map(|(i, _)| i);
    if let Some(i) = sub {
        if argv[i] == "usemem" {
            argv.insert(i + 1, OsString::from("--"));
        }
    }
    argv
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

#[cfg(test)]
mod test {
    use super::*;

    /// Regression: `usermm usemem -- -5` read `-5` as an option (clap dropped the `--`).
    #[test]
    fn usemem_keeps_the_users_separator() {
        let parsed = |words: &[&str]| match parse_from(words.iter().copied()) {
            Ok(Cli {
                command: Command::Usemem(a),
                ..
            }) => a.args,
            other => panic!("{words:?}: {other:?}"),
        };
        assert_eq!(parsed(&["usermm", "usemem", "--", "-5"]), ["--", "-5"]);
        assert_eq!(parsed(&["usermm", "--json", "usemem", "--"]), ["--"]);
        assert_eq!(
            parsed(&["usermm", "usemem", "-n", "2", "1M"]),
            ["-n", "2", "1M"]
        );
        assert!(parsed(&["usermm", "usemem"]).is_empty());
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
}
