//! `usermm usemem`: vm-scalability's `usemem`, same options and same output lines, run against
//! the engine (`--host`: against the real kernel). Seed 002 runs it as
//! `usemem -n 72 --readonly -j 0x200000 100G`.
//!
//! Sizes are `memparse`d like usemem's (`0x`/octal accepted, binary `k/m/g/t` suffixes). Unlike
//! usemem, a missing SIZE is a usage error (exit 2), `-O` also has a long form, and the limits
//! of an emulated machine are stated up front: SIZE at most 16T, `-n` × `-t` at most 4096
//! workers (each a host thread).
//!
//! `-s` with a negative value sleeps until the process is killed, as usemem's does: each
//! worker's throughput line is printed when its walk is done (with `--json`, nothing is, as
//! the record never completes). A virtual run must end, so `--time virtual` refuses it.
//!
//! With `--time virtual` (default profile `haswell-ep-2s`, seed 002's machine) the lines are
//! modelled, the same run after run, and `--ab` adds the share of the CPUs' virtual busy time
//! spent on the huge zero page's refcount line, both ways.

use clap::Args;
use serde::Serialize;
use usermm::config::{BackingMode, MachineConfig, ThpMode, TimeConfig, MAX_CPUS, MAX_MEM_BYTES};
use usermm::stats::VmItem;
use usermm_workloads::usemem::{self, UsememError, UsememOpts, UsememResult, MAX_WORKERS};

use crate::args::{parse_size_arg, usage, EngineArgs, GlobalArgs};
use crate::report::format::human_bytes;

#[derive(Debug, Clone, Args, Serialize)]
pub struct UsememArgs {
    /// Bytes each worker maps and walks (per process, or per thread with -t).
    #[arg(value_name = "SIZE", value_parser = parse_size_arg)]
    pub size: u64,
    /// Worker processes (each its own mm; -n × -t at most 4096).
    #[arg(short = 'n', long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=MAX_WORKERS as i64))]
    pub nproc: u32,
    /// Threads per process, each with its own mapping in the process's mm.
    #[arg(short = 't', long = "thread", value_name = "M",
          value_parser = clap::value_parser!(u32).range(1..=MAX_WORKERS as i64))]
    pub thread: Option<u32>,
    /// Map read-only and only read: on anonymous memory, a pure zero-page fault workload.
    #[arg(short = 'o', long)]
    pub readonly: bool,
    /// Bytes between two accesses (0 or less than 8 means 8: every word).
    #[arg(short = 'j', long, value_name = "SIZE", default_value = "0", value_parser = parse_size_arg)]
    pub step: u64,
    /// Walk the mapping this many times (writes verify the previous walk's data).
    #[arg(short = 'r', long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// Split the work into mappings of this size (more than 32 are left to exit to free).
    #[arg(short = 'u', long, value_name = "SIZE", value_parser = parse_size_arg)]
    pub unit: Option<u64>,
    /// MAP_ANONYMOUS instead of a private mapping of /dev/zero.
    #[arg(short = 'O', long)]
    pub anonymous: bool,
    /// Allocate once before starting the workers; they all walk that one mapping.
    #[arg(short = 'P', long)]
    pub prealloc: bool,
    /// MAP_POPULATE.
    #[arg(short = 'F', long)]
    pub prefault: bool,
    /// mlock the mapping after the walk.
    #[arg(short = 'M', long)]
    pub mlock: bool,
    /// Sleep this many seconds before freeing (negative: until killed).
    #[arg(short = 's', long, value_name = "SEC", allow_negative_numbers = true)]
    pub sleep: Option<i64>,
    /// Start the walk together, after every worker has allocated (needs unit == size).
    #[arg(short = 'y', long)]
    pub sync_rw: bool,
    /// Wait for every worker before freeing.
    #[arg(short = 'x', long)]
    pub sync_free: bool,
    /// madvise(MADV_HUGEPAGE) after mmap.
    #[arg(long)]
    pub madv_thp: bool,
    /// Keep the mapping read-write even with --readonly.
    #[arg(short = 'w', long)]
    pub open_rw: bool,
    /// Random word order instead of a sequential walk.
    #[arg(short = 'R', long)]
    pub random: bool,
    /// Seed of the random walk (default: time ^ tid).
    #[arg(long, value_name = "S")]
    pub random_seed: Option<u64>,
    /// Run vanilla and patched side by side and print the ratio.
    #[arg(long)]
    pub ab: bool,
    /// Run against the host kernel instead of the engine.
    #[arg(long)]
    pub host: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl UsememArgs {
    fn opts(&self) -> UsememOpts {
        UsememOpts {
            size: self.size,
            nproc: self.nproc,
            threads: self.thread.unwrap_or(0),
            readonly: self.readonly,
            open_rw: self.open_rw,
            step: self.step.max(8),
            repeat: self.repeat,
            unit: self.unit.unwrap_or(0),
            anonymous: self.anonymous,
            prealloc: self.prealloc,
            prefault: self.prefault,
            mlock: self.mlock,
            sleep_secs: self.sleep.unwrap_or(0) as f64,
            sync_rw: self.sync_rw,
            sync_free: self.sync_free,
            madv_thp: self.madv_thp,
            random: self.random,
        }
    }

    /// The machine a run needs when the user does not size it: one emulated CPU per worker,
    /// enough RAM for what the walk writes plus page tables (sparse backing beyond 4 GiB), and
    /// THP as on this host (`madvise`) — except for `--ab`, which replays seed 002 on a
    /// THP-`always` machine as the seed's was.
    ///
    /// The RAM is capped at what a machine can have; [`UsememArgs::default_need`] says whether
    /// the run fits.
    fn default_config(&self) -> MachineConfig {
        let mem = (self.default_need().div_ceil(1 << 30) << 30).min(MAX_MEM_BYTES);
        MachineConfig {
            mem,
            cpus: self.default_cpus(),
            backing: if mem > (4 << 30) {
                BackingMode::Sparse
            } else {
                BackingMode::Full
            },
            thp: if self.ab {
                ThpMode::Always
            } else {
                ThpMode::Madvise
            },
            time: TimeConfig {
                profile: usemem::SEED_PROFILE.into(),
                ..TimeConfig::default()
            },
            ..MachineConfig::default()
        }
    }
}

impl UsememArgs {
    /// Workers: `-n` × `-t`.
    fn workers(&self) -> u64 {
        u64::from(self.nproc) * u64::from(self.thread.unwrap_or(1))
    }

    /// RAM the default machine gives a run: what the walk writes plus page tables per worker,
    /// the percpu first chunk of its CPUs (one unit each: with thousands of workers it is
    /// most of the machine), and slack. With SIZE ≤ 16T and at most 4096 workers it stays far
    /// below `u64::MAX`.
    fn default_need(&self) -> u64 {
        let tables = self.size / 512 + (64 << 10);
        let data = if self.readonly { 0 } else { self.size };
        let percpu = self.default_cpus() as u64 * MachineConfig::default().pcpu.unit_size;
        self.workers() * (data + tables) + percpu + (256 << 20)
    }

    /// One emulated CPU per worker, at least 2.
    fn default_cpus(&self) -> u16 {
        self.workers().clamp(2, u64::from(MAX_CPUS)) as u16
    }
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
    /// patched throughput / vanilla throughput.
    pub throughput: f64,
    /// Global huge-zero refcount operations per mm, vanilla and patched.
    pub global_ops_per_mm_vanilla: f64,
    pub global_ops_per_mm_patched: f64,
    pub faults_vanilla: i64,
    pub faults_patched: i64,
    /// Virtual time: share of the CPUs' busy time on the huge zero page's refcount line.
    pub huge_zero_line_share_vanilla: Option<f64>,
    pub huge_zero_line_share_patched: Option<f64>,
    /// `measured (this host)` or `modelled (profile NAME)`.
    pub time: String,
}

fn render(r: &UsememResult) -> String {
    let mut s = String::new();
    for w in &r.workers {
        s.push_str(&w.line);
        s.push('\n');
    }
    for w in &r.workers {
        s.push_str(&w.free_line);
        s.push('\n');
    }
    s
}

fn render_summary(label: &str, r: &UsememResult) -> String {
    let v = &r.vmstat_delta;
    format!(
        "{label:<8} throughput {:>12} KB/s  pgfault {:>9}  thp_zero_page_alloc {}  \
         huge-zero global ops {} ({:.2}/mm)  max rss {} pages\n",
        r.throughput_kbps,
        v.get(VmItem::Pgfault),
        v.get(VmItem::ThpZeroPageAlloc),
        r.huge_zero.global_ops,
        r.huge_zero.ops_per_mm,
        r.workers
            .iter()
            .map(|w| w.rss_pages_before_free)
            .max()
            .unwrap_or(0),
    )
}

pub fn run(args: &UsememArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    if args.size < 4096 {
        return usage("usemem: SIZE must be at least 4096 bytes");
    }
    if args.sync_rw && args.unit.is_some_and(|u| u != args.size) {
        return usage("usemem: --sync-rw needs --unit equal to SIZE");
    }
    if args.workers() > MAX_WORKERS {
        return usage(format!(
            "usemem: -n {} × -t {} = {} workers; at most {MAX_WORKERS} (one host thread each)",
            args.nproc,
            args.thread.unwrap_or(1),
            args.workers()
        ));
    }
    let forever = args.sleep.is_some_and(|s| s < 0);
    if forever && args.ab {
        return usage("usemem: --ab needs both runs to end; -s below 0 sleeps until killed");
    }
    if forever && args.engine.time.is_virtual() {
        return usage(
            "usemem: --time virtual needs the run to end; -s below 0 sleeps until killed",
        );
    }
    if args.host {
        return run_host(args, g);
    }
    if args.engine.mem.is_none() && args.default_need() > MAX_MEM_BYTES {
        return usage(format!(
            "usemem: SIZE {} × {} worker(s) needs {} of emulated RAM (data and page tables), more than the {} a machine can have; size it with --mem",
            human_bytes(args.size),
            args.workers(),
            human_bytes(args.default_need().div_ceil(1 << 30) << 30),
            human_bytes(MAX_MEM_BYTES)
        ));
    }
    let config = args.engine.to_config(args.default_config())?;
    let opts = args.opts();
    if args.ab {
        let mut v = config.clone();
        v.set_patched(false);
        let mut p = config.clone();
        p.set_patched(true);
        let vanilla = usemem::run(&super::boot(v)?, &opts).map_err(map_err)?;
        let patched = usemem::run(&super::boot(p)?, &opts).map_err(map_err)?;
        let ratio = AbRatio {
            throughput: patched.throughput_kbps as f64 / vanilla.throughput_kbps.max(1) as f64,
            global_ops_per_mm_vanilla: vanilla.huge_zero.ops_per_mm,
            global_ops_per_mm_patched: patched.huge_zero.ops_per_mm,
            faults_vanilla: vanilla.vmstat_delta.get(VmItem::Pgfault),
            faults_patched: patched.vmstat_delta.get(VmItem::Pgfault),
            huge_zero_line_share_vanilla: vanilla.huge_zero_line_share,
            huge_zero_line_share_patched: patched.huge_zero_line_share,
            time: vanilla.time.clone(),
        };
        let rec = UsememAb {
            vanilla,
            patched,
            ratio,
        };
        return super::emit(g, &rec, |r| {
            let mut s = String::from("# vanilla (huge_zero.per_mm_ref=off)\n");
            s += &render(&r.vanilla);
            s += "# patched (huge_zero.per_mm_ref=on)\n";
            s += &render(&r.patched);
            s += &render_summary("vanilla", &r.vanilla);
            s += &render_summary("patched", &r.patched);
            s += &format!(
                "throughput ratio patched/vanilla: {:.3} (vanilla/patched {:.3}), {}\n",
                r.ratio.throughput,
                1.0 / r.ratio.throughput.max(f64::MIN_POSITIVE),
                r.ratio.time
            );
            if let (Some(v), Some(p)) = (
                r.ratio.huge_zero_line_share_vanilla,
                r.ratio.huge_zero_line_share_patched,
            ) {
                s += &format!(
                    "virtual CPU time on the huge zero page's refcount line: vanilla {:.2} %, patched {:.2} % (seed 002: 54 % → 0.11 % of cycles in get/put_huge_zero_page)\n",
                    v * 100.0,
                    p * 100.0
                );
            }
            s
        });
    }
    let machine = super::boot(config)?;
    // Sleeping until killed: the record never completes, so each line is printed as it comes.
    let on_walked: Option<usemem::OnWalked> = (forever && !g.json).then(|| {
        std::sync::Arc::new(|line: &str| {
            let _ = super::print(&format!("{line}\n"));
        }) as usemem::OnWalked
    });
    let r = usemem::run_with(&machine, &opts, on_walked).map_err(map_err)?;
    super::emit(g, &r, render)
}

fn map_err(e: UsememError) -> anyhow::Error {
    match e {
        UsememError::ZeroSize
        | UsememError::NoProcesses
        | UsememError::TooBig { .. }
        | UsememError::TooManyWorkers { .. } => {
            anyhow::Error::new(crate::args::UsageError(format!("usemem: {e}")))
        }
        other => anyhow::anyhow!("usemem: {other}"),
    }
}

/// `--host`: the same shape on the real kernel (one worker; anonymous memory).
fn run_host(args: &UsememArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    use usermm_host::measure;
    if args.readonly {
        let r = measure::host_usemem_readonly(args.size, args.step.max(8))
            .map_err(|e| anyhow::anyhow!("host usemem: {e}"))?;
        super::emit(g, &r, |r| {
            let usecs = (r.ns / 1000).max(1);
            let bytes = r.size / 8 + r.accesses * 8;
            format!(
                "{bytes} bytes / {usecs} usecs = {} KB/s\nhost: {} faults, {:.0} faults/s\n",
                usemem::kb_per_sec(bytes, usecs),
                r.faults,
                r.faults as f64 * 1e9 / r.ns.max(1) as f64
            )
        })
    } else {
        let r = measure::host_touch_and_munmap(args.size, args.madv_thp)
            .map_err(|e| anyhow::anyhow!("host usemem: {e}"))?;
        super::emit(g, &r, |r| {
            format!(
                "host: {} pages: populate {:.1} ns/page, munmap {:.1} ns/page\n{} usecs to free memory\n",
                r.pages,
                r.populate_ns_per_page(),
                r.munmap_ns_per_page(),
                r.munmap_ns / 1000
            )
        })
    }
}
