//! `usermm usemem`, and `usemem` itself: vm-scalability's usemem, every option and the same
//! lines, on the engine — or on the host kernel with `--host`.
//!
//! # Two ways in
//! - `usermm usemem [usemem's arguments] [engine flags]`: the engine flags (`--mem`,
//!   `--cpus`, `--nodes`, `--backing`, `--thp`, `--preset`, `--set`, and whatever else
//!   [`EngineArgs`] has), `--host`, `--ab` and `--json` are taken out of the command line by
//!   their exact names; everything else is usemem's, read as usemem reads it (abbreviations,
//!   permutation, its messages).
//! - A link or copy of the binary named `usemem` ([`busybox`]): the command line is usemem's
//!   alone, exactly, so vm-scalability's `case-*` scripts run `./usemem` unchanged; the
//!   engine flags come from the environment: `USERMM_MEM=4G`, `USERMM_CPUS=8`,
//!   `USERMM_SET='free.parallel=on pcp.high=64'` (words split on blanks), `USERMM_HOST=1`,
//!   … — each engine flag `--foo-bar` is `USERMM_FOO_BAR`. Its stderr carries usemem's
//!   lines only: the `usermm: note:` lines (what the engine does not model) need
//!   `USERMM_NOTES=1`. Its process is named `usemem` even when `argv[0]` alone says so.
//!
//! # This command follows usemem's conventions, not usermm's
//! usermm's commands answer a bad argument with one `usermm: error:` line and exit 2; this
//! one answers as usemem does — glibc's line and usemem's usage on stderr, exit 1, and exit 0
//! with the usage when SIZE is missing — because scripts and LKP depend on it. usermm's own
//! rules still hold for what is usermm's: a bad engine flag, and the engine's stated limits
//! (at most [`MAX_WORKERS`] workers, each a host thread; a machine of at most 16 TiB when
//! the default machine is sized from SIZE) are one `usermm: error:` line and exit 2.
//!
//! # The default machine
//! One emulated CPU per worker (at least 2, at most [`DEFAULT_MAX_CPUS`]: beyond, workers
//! share CPUs round-robin, as usemem's processes share a host's), enough RAM for what the
//! walk writes and its page tables (sparse backing beyond 4 GiB), THP as on this host
//! (`madvise`) — except `--ab`, which replays seed 002 on a THP-`always`, two-node machine as
//! the seed's was. Every engine flag overrides it. With `--time virtual` the profile defaults to
//! `haswell-ep-2s` (seed 002's machine): the lines are modelled, the same run after run, and
//! `--ab` adds the share of the CPUs' virtual busy time on the huge zero page's refcount line,
//! both ways.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use clap::{ArgAction, Args, CommandFactory, Parser};
use serde::Serialize;
use usermm::config::{BackingMode, MachineConfig, ThpMode, TimeConfig, TimeMode, MAX_MEM_BYTES};
use usermm::stats::VmItem;
use usermm_workloads::usemem::{
    self, host::HostPlatform, memparse, Capture, Hooks, Io, Parsed, Platform, StdIo, UsememOpts,
    UsememResult, Usr1,
};

use crate::args::{usage, EngineArgs, GlobalArgs, UsageError};
use crate::report::format::human_bytes;

/// Most workers (`-n` × `-t`) one engine run starts: each is a host thread, whose stack and
/// guard page are two of the host's `vm.max_map_count` (65530) mappings.
pub const MAX_WORKERS: u64 = 24_576;

/// Most emulated CPUs the default machine gets (the per-CPU state of every mm grows with it).
pub const DEFAULT_MAX_CPUS: u64 = 256;

/// `usermm usemem`: everything after the command name, read by [`run`].
#[derive(Debug, Clone, Args, Serialize)]
#[command(disable_help_flag = true)]
pub struct UsememArgs {
    /// usemem's options and SIZE (see `usermm usemem -h`), and the engine flags.
    #[arg(
        value_name = "ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        num_args = 0..
    )]
    pub args: Vec<String>,
}

/// The flags of this command that are usermm's, not usemem's.
#[derive(Debug, Clone, Default, Parser, Serialize)]
#[command(
    name = "usermm usemem",
    no_binary_name = true,
    disable_help_flag = true
)]
struct OwnFlags {
    /// Run on the host kernel instead of the engine.
    #[arg(long)]
    host: bool,
    /// Run vanilla and patched machines side by side and print the ratio.
    #[arg(long)]
    ab: bool,
    /// Print the run's record as JSON instead of usemem's lines.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    engine: EngineArgs,
}

/// A flag of [`OwnFlags`]: its long name and whether it takes a value.
fn own_flags() -> Vec<(String, bool, String)> {
    OwnFlags::command()
        .get_arguments()
        .filter_map(|a| {
            let long = a.get_long()?.to_string();
            let takes = matches!(a.get_action(), ArgAction::Set | ArgAction::Append);
            let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            Some((long, takes, help))
        })
        .collect()
}

/// Split `args` into usermm's flags (exact names, `--flag value` or `--flag=value`, before
/// any `--`) and usemem's arguments.
fn split_own(args: &[String]) -> (Vec<String>, Vec<String>) {
    let own = own_flags();
    let (mut mine, mut theirs) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            theirs.extend(args[i..].iter().cloned());
            break;
        }
        let (name, inline) = match a.strip_prefix("--") {
            Some(b) => match b.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (b, None),
            },
            None => ("", None),
        };
        match own.iter().find(|(l, _, _)| !name.is_empty() && l == name) {
            Some((_, takes, _)) => {
                mine.push(a.clone());
                if *takes && inline.is_none() && i + 1 < args.len() {
                    i += 1;
                    mine.push(args[i].clone());
                }
            }
            None => theirs.push(a.clone()),
        }
        i += 1;
    }
    (mine, theirs)
}

/// The engine flags a `usemem` link takes from the environment: `USERMM_FOO_BAR` for
/// `--foo-bar` (`USERMM_SET` is split into one `--set` per word; a switch is on unless its
/// variable is empty or `0`).
fn flags_from_env(get: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let mut v = Vec::new();
    for (long, takes, _) in own_flags() {
        let var = format!("USERMM_{}", long.to_uppercase().replace('-', "_"));
        let Some(val) = get(&var) else { continue };
        if !takes {
            if !val.is_empty() && val != "0" {
                v.push(format!("--{long}"));
            }
        } else if long == "set" {
            for w in val.split_whitespace() {
                v.push("--set".into());
                v.push(w.into());
            }
        } else {
            v.push(format!("--{long}"));
            v.push(val);
        }
    }
    v
}

/// The end of the usage: the engine flags (`usermm usemem`) or their variables (a link).
fn engine_help(link: bool) -> String {
    let mut s = if link {
        String::from("usermm: the engine's flags come from the environment:\n")
    } else {
        String::from("usermm flags (exact names only):\n")
    };
    for (long, takes, help) in own_flags() {
        let name = if link {
            format!("USERMM_{}", long.to_uppercase().replace('-', "_"))
        } else if takes {
            format!("--{long} VALUE")
        } else {
            format!("--{long}")
        };
        s.push_str(&format!("    {name:<22}{help}\n"));
    }
    if link {
        s.push_str(&format!(
            "    {:<22}Show the `usermm: note:` lines (what the engine does not model) on stderr\n",
            NOTES_VAR
        ));
    }
    s.push_str(DIFFERENCES);
    s
}

/// The end of both usages: what usermm does not do as usemem does.
const DIFFERENCES: &str = "\
usermm differs from usemem where it cannot match it:
    -d with -t          the engine detaches each thread on its own; --host stays attached
                        (in usemem a thread's detach forks it alone, and the exit of the
                        process it leaves ends the other threads wherever they are)
    -H                  the host's /proc/sys/vm/nr_hugepages is left alone (usemem sets 5)
    what the engine does not model (page caches, SHM_LOCK, fadvise) runs as its nearest
    model, each said in a `usermm: note:` line
";

/// The variable that brings back, in a `usemem` link, the `usermm: note:` lines usemem
/// itself never prints (`usermm usemem` always shows them).
const NOTES_VAR: &str = "USERMM_NOTES";

/// Is a switch variable on (set, not empty, not `0`, as [`flags_from_env`] reads switches)?
fn env_on(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| !v.is_empty() && v != "0")
}

/// usemem's options as far as sizing the machine needs them (a command line usemem would
/// not run leaves the defaults).
fn preview(args: &[String]) -> UsememOpts {
    match usemem::parse("usemem", args, false) {
        Parsed::Options { opts, operands } => {
            let mut o = *opts;
            if let [size] = operands.as_slice() {
                o.size = memparse(size);
            }
            o
        }
        Parsed::Usage { .. } => UsememOpts::default(),
    }
}

/// RAM the default machine gives a run: what the walks write and their page tables per
/// worker, the percpu first chunk of its CPUs, and slack (saturating: a sum past 16 TiB is
/// refused anyway).
fn default_need(o: &UsememOpts) -> u64 {
    // A mapping larger than the address space fails with ENOMEM on any machine, as usemem's
    // does: the machine need not hold it.
    if o.unit_bytes() > usermm::addr::TASK_SIZE {
        return default_need(&UsememOpts {
            size: 0,
            unit: 0,
            ..o.clone()
        });
    }
    let tables = o.size / 512 + (64 << 10);
    let data = if o.readonly && !o.shm_lock { 0 } else { o.size };
    let percpu = default_cpus(o) * MachineConfig::default().pcpu.unit_size;
    // --prealloc: the parent's mapping is populated before the workers fork over it, and each
    // worker's writes copy it (case-anon-cow-seq): one more copy than workers.
    o.workers()
        .max(1)
        .saturating_add(u64::from(o.prealloc))
        .saturating_mul(data.saturating_add(tables))
        .saturating_add(percpu)
        .saturating_add(256 << 20)
}

fn default_cpus(o: &UsememOpts) -> u64 {
    o.workers().clamp(2, DEFAULT_MAX_CPUS)
}

fn default_config(o: &UsememOpts, ab: bool) -> MachineConfig {
    let mem = (default_need(o).div_ceil(1 << 30) << 30).min(MAX_MEM_BYTES);
    MachineConfig {
        mem,
        cpus: default_cpus(o) as u16,
        backing: if mem > (4 << 30) {
            BackingMode::Sparse
        } else {
            BackingMode::Full
        },
        thp: if ab {
            ThpMode::Always
        } else {
            ThpMode::Madvise
        },
        // Seed 002's machine has two nodes (one per socket); in virtual time the node count
        // decides which socket each CPU's memory and the huge zero page's line live on.
        nodes: if ab {
            usermm_workloads::seeds::HUGE_ZERO_MACHINE.nodes
        } else {
            MachineConfig::default().nodes
        },
        // `--time virtual` without `--profile`: seed 002's machine, whose run this replays.
        time: TimeConfig {
            profile: usemem::SEED_PROFILE.into(),
            ..TimeConfig::default()
        },
        ..MachineConfig::default()
    }
}

/// `usermm usemem`.
pub fn run(a: &UsememArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    let (mine, theirs) = split_own(&a.args);
    let status = run_usemem("usermm usemem", &theirs, &mine, g.json, false)?;
    exit_with(status)
}

/// Leave with usemem's status (0 returns normally).
fn exit_with(status: i32) -> anyhow::Result<()> {
    if status == 0 {
        return Ok(());
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::exit(status)
}

/// Invoked as `usemem` (a link or a copy named so): usemem's command line, the engine flags
/// from `USERMM_*`. `None` when the program has another name.
pub fn busybox() -> Option<ExitCode> {
    let mut argv = std::env::args_os();
    let argv0: OsString = argv.next()?;
    let base = std::path::Path::new(&argv0).file_name()?.to_str()?;
    if base != "usemem" {
        return None;
    }
    // The kernel names the process after the file it ran, which is `usermm` when argv[0] was
    // set apart from it (`exec -a usemem`): usemem's name, as scripts see it (case-migrate
    // waits while `/proc/PID/comm` says `usemem`), and every process forked from this one
    // (workers, the `-d` background) keeps it. A failure leaves the kernel's name.
    let _ = usermm_host::usemem::set_comm("usemem");
    let name = argv0.to_string_lossy().into_owned();
    let args: Vec<String> = argv.map(|a| a.to_string_lossy().into_owned()).collect();
    let mine = flags_from_env(|k| std::env::var(k).ok());
    let code = match run_usemem(&name, &args, &mine, false, true) {
        Ok(s) => u8::try_from(s).unwrap_or(1),
        Err(e) => {
            eprintln!(
                "usermm: error: {}",
                crate::args::visible(
                    &format!("{e:#}")
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ")
                )
            );
            if crate::args::is_usage_error(&e) {
                2
            } else {
                1
            }
        }
    };
    Some(ExitCode::from(code))
}

/// usermm's own flags (`mine`), or one usage line naming the one at fault (`link`: they came
/// from `USERMM_*` variables).
fn parse_own_flags(mine: &[String], link: bool) -> anyhow::Result<OwnFlags> {
    match OwnFlags::try_parse_from(mine) {
        Ok(o) => Ok(o),
        Err(e) => {
            let words: Vec<String> = e
                .render()
                .to_string()
                .lines()
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more"))
                .flat_map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
                .collect();
            let msg = words.join(" ");
            let msg = msg.strip_prefix("error: ").unwrap_or(&msg).to_string();
            let from = if link {
                " (from USERMM_* variables)"
            } else {
                ""
            };
            usage(format!("usemem: {msg}{from}"))
        }
    }
}

/// `-p FILE` with `-d`: usemem appends to it only at the detach, after the work, so a link,
/// a device or a file that is not a pid file is refused now, in one line (`append_pid`
/// refuses it again when it writes).
fn check_pid_file(opts: &UsememOpts) -> anyhow::Result<()> {
    if let Some(pf) = opts.pid_file.as_ref().filter(|_| opts.detach) {
        let path = std::path::Path::new(pf);
        let label = format!("usemem: -p {pf}");
        if usermm_host::files::check_output(&label, path)?.is_some() {
            let bytes = usermm_host::files::read_regular(&label, path)?;
            if !usermm_host::usemem::is_pid_file(&bytes) {
                let why = usermm_host::usemem::NOT_A_PID_FILE;
                return usage(format!("{label}: {why}; usemem appends only to a pid file"));
            }
        }
    }
    Ok(())
}

/// The engine's bounds on workers and sizes, before a machine is shaped for them.
fn check_sizes(opts: &UsememOpts, own: &OwnFlags) -> anyhow::Result<()> {
    if opts.workers() > MAX_WORKERS {
        return usage(format!(
            "usemem: {} workers (-n {} × -t {}); the engine runs at most {MAX_WORKERS}, one host thread each",
            opts.workers(),
            opts.processes(),
            opts.threads_per_process()
        ));
    }
    if opts.size > MAX_MEM_BYTES && opts.unit_bytes() <= usermm::addr::TASK_SIZE {
        // Larger mappings fail as on the kernel; these would be walked, for days.
        return usage(format!(
            "usemem: SIZE {} is more than the {} an emulated machine can have",
            human_bytes(opts.size),
            human_bytes(MAX_MEM_BYTES)
        ));
    }
    if own.engine.mem.is_none() && default_need(opts) > MAX_MEM_BYTES {
        return usage(format!(
            "usemem: SIZE {} × {} worker(s) needs more than the {} of emulated RAM a machine can have; size it with --mem",
            human_bytes(opts.size),
            opts.workers().max(1),
            human_bytes(MAX_MEM_BYTES)
        ));
    }
    Ok(())
}

/// The machine: usermm's flags over usemem's default (a CPU per worker), its usage errors
/// said in usemem's terms.
fn engine_config(own: &OwnFlags, opts: &UsememOpts, link: bool) -> anyhow::Result<MachineConfig> {
    own.engine
        .to_config(default_config(opts, own.ab))
        .map_err(|e| match (link, e.downcast_ref::<UsageError>()) {
            (true, Some(u)) => UsageError(format!("{u} (from USERMM_* variables)")).into(),
            // The default machine's CPUs come from the workers: name them, and the fix.
            (false, Some(u)) if own.engine.cpus.is_none() && u.0.starts_with("cpus: ") => {
                let threads = match opts.threads_per_process() {
                    0 | 1 => String::new(),
                    t => format!(" × -t {t}"),
                };
                UsageError(format!(
                    "usemem: -n {}{threads}: the default machine gets a CPU per worker ({}); \
                     pass fewer workers, or --cpus",
                    opts.processes(),
                    u.0.trim_start_matches("cpus: ")
                ))
                .into()
            }
            _ => e,
        })
}

/// What the walks allocate of the machine's RAM fits the machine (and the host): one copy
/// per worker, and the parent's with --prealloc (read-only walks map the zero page).
fn check_walk_memory(opts: &UsememOpts, config: &MachineConfig) -> anyhow::Result<()> {
    let copies = opts
        .workers()
        .max(1)
        .saturating_add(u64::from(opts.prealloc));
    let data = if opts.readonly && !opts.shm_lock {
        0
    } else {
        opts.size.min(config.mem)
    };
    let touched = copies.saturating_mul(data).min(config.mem);
    let touched = touched.saturating_add(touched / 512);
    super::check_machine_memory(config, touched, 0, || {
        let hint = match config.backing {
            BackingMode::Full => " (pass --backing sparse)",
            BackingMode::Sparse => "",
        };
        format!(
            "usemem: SIZE {} × {copies} cop(ies): the machine's memory for them{hint}",
            human_bytes(opts.size)
        )
    })?;
    Ok(())
}

/// Run usemem as `name` with usemem's `args` and usermm's flags `mine`; usemem's exit status.
fn run_usemem(
    name: &str,
    args: &[String],
    mine: &[String],
    json: bool,
    link: bool,
) -> anyhow::Result<i32> {
    let own = parse_own_flags(mine, link)?;
    let json = json || own.json;
    let help = engine_help(link);
    // A `usemem` link's stderr carries usemem's lines only, unless the notes are asked for.
    let quiet_notes = link && !env_on(NOTES_VAR);
    let posixly = std::env::var_os("POSIXLY_CORRECT").is_some();
    let opts = preview(args);
    if let Some(why) = opts.never_ends() {
        // On every clock and on the host: a run that cannot end is refused, not started.
        return usage(format!("usemem: {why}"));
    }
    check_pid_file(&opts)?;
    if own.host {
        let t = &own.engine.time;
        if t.is_virtual() || t.profile.is_some() || !t.scale_cost.is_empty() {
            return usage(
                "usemem --host: --time virtual, --profile and --scale-cost do not apply: \
                 the host kernel runs on the wall clock",
            );
        }
        if opts.uses_sigusr1() {
            usermm_host::usemem::block_sigusr1();
        }
        let mut p = HostPlatform::new()
            .map_err(|e| anyhow::anyhow!("usemem --host: errno {e}"))?
            .quiet_notes(quiet_notes);
        return Ok(p.run(name, args, posixly, &help).status);
    }
    check_sizes(&opts, &own)?;
    let config = engine_config(&own, &opts, link)?;
    check_walk_memory(&opts, &config)?;
    if config.time.mode == TimeMode::Virtual {
        if let Some(what) = opts.waits_outside() {
            return usage(format!(
                "usemem: {what}; a virtual run has no sender and no host clock: use --time wall"
            ));
        }
    }
    if own.ab {
        return run_ab(name, args, config, json, &help, quiet_notes);
    }
    // -d: fork now, while this process has one thread; the foreground half exits 0 once
    // every worker has detached.
    let detached = if opts.detach && !json {
        Some(Arc::new(Mutex::new(
            usermm_host::usemem::fork_detachable()
                .map_err(|e| anyhow::anyhow!("usemem -d: cannot fork: errno {e}"))?,
        )))
    } else {
        None
    };
    let usr1 = Arc::new(Usr1::default());
    if opts.uses_sigusr1() {
        let u = Arc::clone(&usr1);
        usermm_host::usemem::forward_sigusr1(move || u.raise())?;
    }
    let hooks = Hooks {
        usr1,
        on_detached: detached.map(|d| {
            Box::new(move || d.lock().unwrap_or_else(|e| e.into_inner()).release())
                as Box<dyn Fn() + Send + Sync>
        }),
        pid: None,
        max_threads: None,
        quiet_notes,
    };
    let machine = super::boot(config)?;
    let io: Arc<dyn Io> = if json {
        Arc::new(Capture::tee_stderr())
    } else {
        Arc::new(StdIo)
    };
    let r = usemem::run_args(&machine, name, args, io, hooks, &help)
        .map_err(|e| anyhow::anyhow!("usemem: {e}"))?;
    if json {
        super::print_json(&r)?;
    }
    Ok(r.status)
}

/// Vanilla vs patched, and the ratios seed 002 is about.
#[derive(Debug, Serialize)]
pub struct UsememAb {
    pub vanilla: UsememResult,
    pub patched: UsememResult,
    pub ratio: AbRatio,
}

#[derive(Debug, Serialize)]
pub struct AbRatio {
    /// patched throughput / vanilla throughput; `None` when vanilla's is 0 (nothing walked:
    /// `usemem 0`, or a run that failed), where a ratio means nothing. Each side's own figures
    /// (global refcount operations per mm, faults, the refcount line's share of the busy time)
    /// are its record's: `huge_zero.ops_per_mm`, `vmstat_delta`, `huge_zero_line_share`.
    pub throughput: Option<f64>,
    /// `measured (this host)` or `modelled (profile NAME)`.
    pub time: String,
}

fn render_summary(label: &str, r: &UsememResult) -> String {
    let v = &r.vmstat_delta;
    format!(
        "{label:<8} throughput {:>12} KB/s  pgfault {:>9}  thp_zero_page_alloc {}  \
         huge-zero global ops {} ({:.2}/mm)\n",
        r.throughput_kbps,
        v.get(VmItem::Pgfault),
        v.get(VmItem::ThpZeroPageAlloc),
        r.huge_zero.global_ops,
        r.huge_zero.ops_per_mm,
    )
}

fn run_ab(
    name: &str,
    args: &[String],
    config: MachineConfig,
    json: bool,
    help: &str,
    quiet_notes: bool,
) -> anyhow::Result<i32> {
    let one = |patched: bool| -> anyhow::Result<(UsememResult, String)> {
        let mut c = config.clone();
        c.set_patched(patched);
        let cap = Arc::new(Capture::tee_stderr());
        let r = usemem::run_args(
            &super::boot(c)?,
            name,
            args,
            Arc::clone(&cap) as Arc<dyn Io>,
            Hooks {
                quiet_notes,
                ..Hooks::default()
            },
            help,
        )
        .map_err(|e| anyhow::anyhow!("usemem: {e}"))?;
        Ok((r, cap.stdout()))
    };
    let opts = preview(args);
    if opts.sleep_secs == i32::MAX {
        return usage("usemem: --ab needs both runs to end; -s below 0 sleeps until killed");
    }
    let (vanilla, vout) = one(false)?;
    let (patched, pout) = one(true)?;
    let ratio = AbRatio {
        throughput: (vanilla.throughput_kbps != 0)
            .then(|| patched.throughput_kbps as f64 / vanilla.throughput_kbps as f64),
        time: vanilla.time.clone(),
    };
    let status = vanilla.status.max(patched.status);
    let rec = UsememAb {
        vanilla,
        patched,
        ratio,
    };
    if json {
        super::print_json(&rec)?;
    } else {
        let mut s = String::from("# vanilla (huge_zero.per_mm_ref=off)\n");
        s += &vout;
        s += "# patched (huge_zero.per_mm_ref=on)\n";
        s += &pout;
        s += &render_summary("vanilla", &rec.vanilla);
        s += &render_summary("patched", &rec.patched);
        s += &match rec.ratio.throughput {
            Some(r) => format!(
                "throughput ratio patched/vanilla: {r:.3}, {}\n",
                rec.ratio.time
            ),
            None => format!(
                "throughput ratio patched/vanilla: none (vanilla walked nothing), {}\n",
                rec.ratio.time
            ),
        };
        if let (Some(v), Some(p)) = (
            rec.vanilla.huge_zero_line_share,
            rec.patched.huge_zero_line_share,
        ) {
            s += &format!(
                "huge zero page's refcount line: {:.2} % of the CPUs' busy time vanilla, {:.2} % patched\n",
                v * 100.0,
                p * 100.0
            );
        }
        super::print(&s)?;
    }
    Ok(status)
}

#[cfg(test)]
mod test {
    use super::*;

    /// Regression: case-anon-cow-seq (`-n N --prealloc --prefault SIZE`) ran the default
    /// machine out of memory: the parent's populated mapping is one more copy than workers.
    #[test]
    fn prealloc_sizes_the_default_machine_for_the_parents_copy() {
        let cow = preview(&v(&["-n", "2", "--prealloc", "--prefault", "1G"]));
        let plain = preview(&v(&["-n", "2", "--prefault", "1G"]));
        assert!(default_need(&cow) >= default_need(&plain) + (1 << 30));
    }

    /// `--ab` replays seed 002 on its machine's shape: THP always, two nodes.
    #[test]
    fn ab_default_machine_is_seed_002s_shape() {
        let o = preview(&v(&["-n", "72", "--readonly", "-j", "0x200000", "100G"]));
        let ab = default_config(&o, true);
        assert_eq!((ab.nodes, ab.thp, ab.cpus), (2, ThpMode::Always, 72));
        let plain = default_config(&o, false);
        assert_eq!(plain.nodes, MachineConfig::default().nodes);
    }

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn own_flags_are_taken_by_exact_name_only() {
        let (mine, theirs) = split_own(&v(&[
            "-n", "2", "--mem=4G", "--cpus", "8", "--memfd", "--set", "a=b", "1M", "--host", "--",
            "--json",
        ]));
        assert_eq!(
            mine,
            v(&["--mem=4G", "--cpus", "8", "--set", "a=b", "--host"])
        );
        assert_eq!(theirs, v(&["-n", "2", "--memfd", "1M", "--", "--json"]));
    }

    #[test]
    fn environment_names_each_flag() {
        let env = |k: &str| match k {
            "USERMM_MEM" => Some("2G".to_string()),
            "USERMM_SET" => Some("free.parallel=on  pcp.high=64".to_string()),
            "USERMM_HOST" => Some("0".to_string()),
            "USERMM_JSON" => Some("1".to_string()),
            _ => None,
        };
        let f = flags_from_env(env);
        assert!(f.windows(2).any(|w| w == ["--mem", "2G"]), "{f:?}");
        assert!(
            f.windows(2).any(|w| w == ["--set", "free.parallel=on"]),
            "{f:?}"
        );
        assert!(f.windows(2).any(|w| w == ["--set", "pcp.high=64"]), "{f:?}");
        assert!(f.contains(&"--json".to_string()) && !f.contains(&"--host".to_string()));
        let own = OwnFlags::try_parse_from(&f).unwrap();
        assert_eq!(own.engine.mem, Some(2 << 30));
    }

    #[test]
    fn default_machine_fits_the_run() {
        let o = preview(&v(&["-n", "4", "1G"]));
        let c = default_config(&o, false);
        assert_eq!(c.cpus, 4);
        assert!(c.mem >= 4 << 30);
        let o = preview(&v(&["-n", "20000", "0"]));
        assert_eq!(default_config(&o, false).cpus as u64, DEFAULT_MAX_CPUS);
        let o = preview(&v(&["--readonly", "1G"]));
        assert!(default_config(&o, false).mem <= 1 << 30);
    }
}
