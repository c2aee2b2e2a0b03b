//! `usermm will-it-scale TEST`, and will-it-scale's own binaries: a link named
//! `TEST_processes` or `TEST_threads` is that binary ([`busybox`]).
//!
//! # Three backends
//! The engine on the wall clock (default: as many emulated CPUs as this host has), the engine
//! in virtual time (`--time virtual`, `--profile NAME`, default `haswell-ep-2s`: the profile
//! machine's CPUs and nodes; a period is `--period` of virtual time, each line scaled to a
//! second), and the host kernel (`--host`). Every engine machine is sparse-backed, with RAM
//! for every task's mappings. On the wall clock and the host a period is main.c's second
//! unless `--period` asks for a shorter one (each line then scaled to a second).
//!
//! # Runs and runtest
//! One run prints `main.c`'s lines (`testcase:`, `warmup`, one `min: max: total:` line per
//! period, `measurement`, `average:`). With `--runtest`, or a list after `-t`
//! (`-t 1,2,22,44,88`), it walks the task counts in both modes and prints `runtest.py`'s CSV
//! (without a list: 1 … the machine's CPUs). `--json` prints the record(s) instead.
//!
//! # The links
//! A link's command line is `main.c`'s: `-t TASKS -s SECONDS -m -n -v -h`, read as its
//! `getopt("mt:s:hvn")` reads it, `atoi` values, its usage on stdout and exit 1 on a bad
//! option, `-s` 0 (the default) for a run until killed. The engine's flags come from the
//! environment as for a `usemem` link: `USERMM_HOST=1`, `USERMM_TIME=virtual`,
//! `USERMM_PROFILE=NAME`, `USERMM_PERIOD=10ms`, `USERMM_CPUS`, `USERMM_MEM`, `USERMM_SET`
//! (blank-separated `key=value` words), `USERMM_JSON=1`.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde::Serialize;
use usermm::config::{BackingMode, MachineConfig, TimeMode, MAX_MEM_BYTES};
use usermm::vtime::Profile;
use usermm::Machine;
use usermm_workloads::task::{Affinity, Mode};
use usermm_workloads::will_it_scale::{
    run, runtest, runtest_csv, Backend, Params, RuntestRow, Test, WisError, WisRecord,
};

use crate::args::{usage, EngineArgs, GlobalArgs, UsageError};

/// The profile of `--time virtual` without `--profile`: the only two-socket one built in.
pub const DEFAULT_PROFILE: &str = "haswell-ep-2s";
/// A period of virtual time unless `--period` says otherwise.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(10);
/// `main.c`'s `MAX_TASKS`.
pub const MAX_TASKS: usize = 2048;

/// `usermm will-it-scale`.
#[derive(Debug, Clone, Args, Serialize)]
pub struct WillItScaleArgs {
    /// The test: page_fault1, mmap1, mmap2, brk1, brk2, malloc1, malloc2, tlb_flush2.
    #[arg(value_name = "TEST")]
    pub test: String,
    /// Tasks (will-it-scale's -t); a comma-separated list walks them as runtest.py does.
    #[arg(
        short = 't',
        long = "tasks",
        value_name = "N[,N...]",
        default_value = "1"
    )]
    pub tasks: String,
    /// Measured periods after the six of warm-up (will-it-scale's -s).
    #[arg(short = 's', long = "seconds", value_name = "N", default_value_t = 5)]
    pub seconds: usize,
    /// Tasks are threads of one process (one mm).
    #[arg(long, conflicts_with = "processes")]
    pub threads: bool,
    /// Tasks are processes, an mm each (the default).
    #[arg(long)]
    pub processes: bool,
    /// Bind each task to one hardware thread instead of a core (will-it-scale's -m).
    #[arg(short = 'm', long = "smt", conflicts_with = "no_affinity")]
    pub smt: bool,
    /// Bind no task (will-it-scale's -n).
    #[arg(short = 'n', long = "no-affinity")]
    pub no_affinity: bool,
    /// Print each task's count per period too (will-it-scale's -v).
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Walk the task counts in both modes and print runtest.py's CSV.
    #[arg(long)]
    pub runtest: bool,
    /// Run on the host kernel instead of the engine.
    #[arg(long)]
    pub host: bool,
    /// A period, e.g. 10ms, 1s: of virtual time (default 10ms), or on the wall clock and the
    /// host (default will-it-scale's 1s; each line is scaled to a second).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub period: Option<Duration>,
    /// The test's size in bytes instead of will-it-scale's (tests: a shorter loop).
    #[arg(long, value_name = "BYTES", hide = true)]
    pub size: Option<u64>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, "s"), |i| s.split_at(i));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}`: expected e.g. 10ms, 1s"))?;
    let d = match unit {
        "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "us" => Duration::from_micros(n),
        _ => return Err(format!("`{s}`: the unit is s, ms or us")),
    };
    if d.is_zero() {
        return Err(format!("`{s}`: must be more than zero"));
    }
    Ok(d)
}

fn parse_tasks(s: &str) -> anyhow::Result<Vec<usize>> {
    let v: Option<Vec<usize>> = s.split(',').map(|w| w.trim().parse().ok()).collect();
    match v {
        Some(v) if !v.is_empty() && v.iter().all(|&n| (1..=MAX_TASKS).contains(&n)) => Ok(v),
        _ => usage(format!(
            "-t {s}: task counts from 1 to {MAX_TASKS}, separated by commas"
        )),
    }
}

/// The engine machine for `tasks` tasks of `test` at most: the flags on top of a sparse
/// machine with RAM for every task's mappings, this host's CPUs on the wall clock, the
/// profile's CPUs and nodes in virtual time.
fn engine_config(a: &WillItScaleArgs, test: Test, tasks: usize) -> anyhow::Result<MachineConfig> {
    let per_task = test.default_size() + (test.default_size() / 512) + (2 << 20);
    let mem = (per_task.saturating_mul(tasks as u64) + (512 << 20)).next_multiple_of(1 << 30);
    let mut c = MachineConfig {
        mem: mem.min(MAX_MEM_BYTES),
        backing: BackingMode::Sparse,
        cpus: usermm_host::facts::usable_cpus() as u16,
        ..MachineConfig::default()
    };
    c.time.profile = DEFAULT_PROFILE.into();
    if a.engine.time.is_virtual() {
        let name = a.engine.time.profile.as_deref().unwrap_or(DEFAULT_PROFILE);
        if let Ok(p) = Profile::resolve(name) {
            let t = p.topology();
            c.cpus = (t.sockets * t.cores_per_socket * t.threads_per_core) as u16;
            c.nodes = t.sockets as u16;
        }
    }
    a.engine.to_config(c)
}

/// The run's parameters for `tasks` tasks in `mode`.
fn params(a: &WillItScaleArgs, tasks: usize, mode: Mode, virt: bool) -> Params {
    Params {
        tasks,
        mode,
        affinity: if a.smt {
            Affinity::Pus
        } else if a.no_affinity {
            Affinity::None
        } else {
            Affinity::Cores
        },
        seconds: a.seconds,
        period: a.period.unwrap_or(if virt {
            DEFAULT_PERIOD
        } else {
            Duration::from_secs(1)
        }),
        size: a.size,
        verbose: a.verbose,
    }
}

fn wis_error(e: WisError) -> anyhow::Error {
    match e {
        WisError::Usage(s) => UsageError(s).into(),
        WisError::Failed(s) => anyhow::anyhow!(s),
    }
}

/// The record of a runtest walk.
#[derive(Debug, Serialize)]
struct RuntestRecord {
    test: &'static str,
    rows: Vec<RuntestRow>,
    runs: Vec<WisRecord>,
}

/// `usermm will-it-scale`.
pub fn run_cmd(a: &WillItScaleArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let test = Test::parse(&a.test).map_err(UsageError)?;
    let tasks = parse_tasks(&a.tasks)?;
    if let Some(s) = a.size.filter(|&s| s == 0 || s > test.default_size()) {
        return usage(format!(
            "--size {s}: from 1 to {}, the test's own size",
            test.default_size()
        ));
    }
    let walk = a.runtest || tasks.len() > 1;
    if a.host {
        let t = &a.engine.time;
        if t.is_virtual() {
            return usage("--host: --time virtual and --profile do not apply: the host kernel runs on the wall clock");
        }
    }
    let machine: Option<Arc<Machine>> = if a.host {
        None
    } else {
        let most = tasks.iter().copied().max().unwrap_or(1);
        Some(super::boot(engine_config(a, test, most)?)?)
    };
    let virt = machine
        .as_ref()
        .is_some_and(|m| m.time_mode() == TimeMode::Virtual);
    let backend = machine.as_ref().map_or(Backend::Host, Backend::Engine);
    if walk {
        let list = if tasks.len() > 1 {
            tasks
        } else {
            let cpus = machine.as_ref().map_or_else(
                || usermm_host::usemem::cpus_online() as usize,
                |m| m.cpus().nr_possible(),
            );
            (1..=cpus).collect()
        };
        if !g.json {
            super::print(&runtest_csv(&[]))?;
        }
        let base = params(a, 1, Mode::Processes, virt);
        let mut print_row = |r: &RuntestRow| {
            if !g.json {
                let csv = runtest_csv(std::slice::from_ref(r));
                let _ = super::print(csv.lines().nth(2).map_or("", |l| l));
                let _ = super::print("\n");
            }
        };
        let (rows, runs) =
            runtest(test, backend, &list, &base, &mut print_row).map_err(wis_error)?;
        if g.json {
            super::print_json(&RuntestRecord {
                test: test.name(),
                rows,
                runs,
            })?;
        }
        return Ok(());
    }
    let mode = if a.threads {
        Mode::Threads
    } else {
        Mode::Processes
    };
    let p = params(a, tasks[0], mode, virt);
    let json = g.json;
    let mut out = |s: &str| {
        if !json {
            let mut o = std::io::stdout().lock();
            let _ = o.write_all(s.as_bytes());
            let _ = o.flush();
        }
    };
    let rec = run(test, backend, &p, &mut out).map_err(wis_error)?;
    if json {
        super::print_json(&rec)?;
    }
    Ok(())
}

/// `main.c`'s usage, on stdout, exit 1.
fn link_usage(name: &str) -> ExitCode {
    print!(
        "Usage: {name} [options]\n\n\
         \t-s iterations\tNumber of iterations to run\n\
         \t-t tasks\tNumber of threads or processes to run\n\
         \t-m\t\tAffinitize tasks on SMT threads (default cores)\n\
         \t-n\t\tNo affinity\n"
    );
    let _ = std::io::stdout().flush();
    ExitCode::from(1)
}

/// `atoi`: leading blanks, a sign, digits; anything else ends it (0 if none).
fn atoi(s: &str) -> i64 {
    let t = s.trim_start();
    let (neg, d) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let n = d.bytes().take_while(u8::is_ascii_digit).fold(0i64, |n, b| {
        n.saturating_mul(10).saturating_add(i64::from(b - b'0'))
    });
    if neg {
        -n
    } else {
        n
    }
}

/// `main.c`'s options: `(tasks, seconds, smt, no_affinity, verbose)`, or `None` for its usage.
fn parse_main_c(args: &[String]) -> Option<(i64, i64, bool, bool, bool)> {
    let (mut t, mut s, mut m, mut n, mut v) = (1, 0, false, false, false);
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            i += 1;
            break;
        }
        let Some(flags) = a.strip_prefix('-').filter(|f| !f.is_empty()) else {
            break;
        };
        for (k, c) in flags.char_indices() {
            match c {
                'm' => m = true,
                'n' => n = true,
                'v' => v = true,
                't' | 's' => {
                    let rest = &flags[k + 1..];
                    let val = if rest.is_empty() {
                        i += 1;
                        args.get(i)?.as_str()
                    } else {
                        rest
                    };
                    *(if c == 't' { &mut t } else { &mut s }) = atoi(val);
                    break;
                }
                _ => return None,
            }
        }
        i += 1;
    }
    // Operands are refused, and so are -m with -n.
    if i < args.len() || (m && n) {
        return None;
    }
    Some((t, s, m, n, v))
}

/// The environment's engine flags for a link (see the module doc).
fn flags_from_env(get: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let mut v = Vec::new();
    let on = |x: &str| !x.is_empty() && x != "0";
    for (var, flag) in [("USERMM_HOST", "--host"), ("USERMM_JSON", "--json")] {
        if get(var).is_some_and(|x| on(&x)) {
            v.push(flag.to_string());
        }
    }
    for (var, flag) in [
        ("USERMM_TIME", "--time"),
        ("USERMM_PROFILE", "--profile"),
        ("USERMM_PERIOD", "--period"),
        ("USERMM_CPUS", "--cpus"),
        ("USERMM_MEM", "--mem"),
        ("USERMM_NODES", "--nodes"),
        ("USERMM_THP", "--thp"),
        ("USERMM_BACKING", "--backing"),
        ("USERMM_PRESET", "--preset"),
    ] {
        if let Some(x) = get(var) {
            v.push(flag.to_string());
            v.push(x);
        }
    }
    for w in get("USERMM_SET").unwrap_or_default().split_whitespace() {
        v.push("--set".into());
        v.push(w.into());
    }
    v
}

/// The command line a link `TEST_MODE` with `main.c`'s `args` stands for (`None`: its usage).
pub fn link_command(
    name: &str,
    args: &[String],
    env: impl Fn(&str) -> Option<String>,
) -> Option<Vec<String>> {
    let (test, mode) = name
        .strip_suffix("_processes")
        .map(|t| (t, "--processes"))
        .or_else(|| name.strip_suffix("_threads").map(|t| (t, "--threads")))?;
    let (t, s, m, n, v) = parse_main_c(args)?;
    let mut cmd = vec![
        "usermm".to_string(),
        "will-it-scale".into(),
        test.into(),
        mode.into(),
        "-t".into(),
        t.to_string(),
        "-s".into(),
        s.max(0).to_string(),
    ];
    for (on, f) in [(m, "-m"), (n, "-n"), (v, "-v")] {
        if on {
            cmd.push(f.into());
        }
    }
    cmd.extend(flags_from_env(env));
    Some(cmd)
}

/// Invoked as `TEST_processes` or `TEST_threads` (a link or a copy so named) for a
/// will-it-scale test name: that binary's command line as a `usermm will-it-scale` command
/// line (`Ok`), which `main` runs as it runs every other, or the exit status when the link
/// stops before running (its usage, too many tasks: `Err`). `None` when the program has
/// another name.
pub fn busybox() -> Option<Result<Vec<String>, ExitCode>> {
    let mut argv = std::env::args_os();
    let argv0: OsString = argv.next()?;
    let base = std::path::Path::new(&argv0)
        .file_name()?
        .to_str()?
        .to_string();
    let test = base
        .strip_suffix("_processes")
        .or_else(|| base.strip_suffix("_threads"))?;
    // Only names will-it-scale has (a test this module runs or refuses).
    if Test::parse(test).is_err_and(|e| e.contains("not a will-it-scale test")) {
        return None;
    }
    let args: Vec<String> = argv.map(|a| a.to_string_lossy().into_owned()).collect();
    let cmd = match link_command(&base, &args, |k| std::env::var(k).ok()) {
        Some(c) => c,
        None => return Some(Err(link_usage(&argv0.to_string_lossy()))),
    };
    if let Some(t) = cmd.get(5).and_then(|t| t.parse::<i64>().ok()) {
        if t > MAX_TASKS as i64 {
            println!("tasks cannot exceed {MAX_TASKS}");
            return Some(Err(ExitCode::from(1)));
        }
    }
    Some(Ok(cmd))
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn links_read_main_cs_options() {
        let none = |_: &str| None;
        let cmd = link_command("page_fault1_processes", &["-t".into(), "2".into()], none).unwrap();
        assert_eq!(
            cmd[2..],
            ["page_fault1", "--processes", "-t", "2", "-s", "0"]
        );
        let args: Vec<String> = ["-mvt4", "-s", "3"].map(String::from).to_vec();
        let cmd = link_command("brk1_threads", &args, none).unwrap();
        assert_eq!(
            cmd[2..],
            ["brk1", "--threads", "-t", "4", "-s", "3", "-m", "-v"]
        );
        let bad = |a: &[&str]| {
            let a: Vec<String> = a.iter().map(|s| s.to_string()).collect();
            link_command("mmap1_threads", &a, none).is_none()
        };
        assert!(bad(&["-x"]) && bad(&["-m", "-n"]) && bad(&["extra"]) && bad(&["-t"]));
        assert!(!bad(&["-t", "abc"]), "atoi reads 0");
        let env = |k: &str| (k == "USERMM_TIME").then(|| "virtual".to_string());
        let cmd = link_command("mmap1_threads", &[], env).unwrap();
        assert_eq!(cmd[8..], ["--time", "virtual"]);
    }

    #[test]
    fn durations_and_task_lists() {
        assert_eq!(parse_duration("10ms"), Ok(Duration::from_millis(10)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert!(parse_duration("0ms").is_err() && parse_duration("5m").is_err());
        assert_eq!(parse_tasks("1,2,22").unwrap(), [1, 2, 22]);
        assert!(parse_tasks("0").is_err() && parse_tasks("1,,2").is_err());
    }
}
