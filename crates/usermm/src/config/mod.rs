//! `MachineConfig`: every size and every policy of an emulated machine, fixed at construction.
//!
//! One serde struct, printed verbatim in every report, built by the CLI from flags, presets and
//! `--set key=value`. Nothing reads it after [`crate::Machine::new`]: each policy is resolved
//! once into the object that carries it (the free policy into the gather, the reference policy
//! into the huge zero page, ...).
//!
//! The "vanilla" value of each mechanism is the kernel before the seed's patch; "patched" is the
//! patch. [`MachineConfig::preset`] names both, plus the seeds' machines.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::addr::{MAX_PAGE_ORDER, PAGE_SIZE};
use crate::vtime::{Placement, Profile};

/// Emulated RAM we refuse to go beyond: PFN links in [`crate::page_alloc::PageMeta`] are 32-bit.
pub const MAX_MEM_BYTES: u64 = 16 << 40;
/// Smallest machine: one max-order block per node, plus room for page tables.
pub const MIN_MEM_BYTES: u64 = 16 << 20;
pub const MAX_CPUS: u16 = 4096;
/// `MAX_NUMNODES` with `NODES_SHIFT` 10, as a fake-NUMA boot (`numa=fake=N`) may use. Nodes
/// may outnumber CPUs: the nodes past the CPUs are memory-only ([`crate::cpu::Cpus::node_of`]).
pub const MAX_NODES: u16 = crate::cpu::MAX_NUMNODES;
/// Largest `pcp.high` (and so `pcp.batch`), pages: a per-CPU list of 64 GiB, far beyond any
/// kernel's (`zone_highsize()` gives a CPU an eighth of its zone at most), and small enough that
/// the list arithmetic (`batch << 5`, `count + batch`) stays within 32 bits.
pub const MAX_PCP_HIGH: u32 = 1 << 24;
/// Largest `lru.add_batch`: each CPU's batch is allocated up front. The kernel's is 15
/// (`PAGEVEC_SIZE`, 2017) or 31 (folio batches).
pub const MAX_LRU_ADD_BATCH: u32 = 4096;
/// Largest modelled cost of one TLB flush (`tlb.flush_cost_ns`): 1 ms. A remote shootdown (IPIs
/// and their acknowledgements) costs microseconds on the seeds' machines; the flush spins for
/// this long on the initiating CPU, so a value beyond it only turns a run into a hang.
pub const MAX_TLB_FLUSH_COST_NS: u64 = 1_000_000;

/// Does a data frame hold real bytes?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackingMode {
    /// Data frames are real memory: allocation zeroes with a memset, reads and writes copy bytes.
    Full,
    /// Data frames are never touched (reads return zeros, writes are dropped). Page-table pages
    /// are real in both modes. For the 100–320 GiB experiments on a 24 GiB host.
    Sparse,
}

/// `/sys/kernel/mm/transparent_hugepage/enabled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThpMode {
    Always,
    Madvise,
    Never,
}

/// Which rule makes `tlb_next_batch` switch to a new batch page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BatchSwitch {
    /// v4.11: switch when `nr == max` (510 entries per batch page).
    V2017,
    /// Modern: switch at `nr >= max - 1`, so a two-slot "page + nr" pair always fits.
    Modern,
}

/// How the gather frees the pages of a full batch list (seeds 000/001).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FreePolicy {
    /// Vanilla: the zapping task frees every batch itself.
    Inline,
    /// Aaron Lu's "mm: support parallel free of memory": lists of ≥ threshold pages go to a
    /// dedicated workqueue.
    Parallel,
}

/// What a write fault on a huge-zero PMD does (kernel eras, seed 002 background).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HugeZeroWriteFault {
    /// ≤ 5.7 and 6.13+: allocate a THP for the whole PMD, fall back to splitting.
    AllocThp,
    /// 5.8–6.12: split the PMD into 4 KiB zero-page PTEs and COW the one page.
    Split,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcpConfig {
    /// `pcp->high`: free to the buddy once a CPU's list holds this many pages (v4.11: 6 × batch).
    pub high: u32,
    /// `pcp->batch`: pages moved per refill or drain (v4.11 `zone_batchsize()` on a big zone: 31).
    pub batch: u32,
    /// 6.7+ free-side auto-tuning: `high` grows from `high` (as `high_min`) while frees run,
    /// and a drain frees the run's length (up to `batch << 5`) instead of `batch`.
    #[serde(default)]
    pub auto_tune: bool,
    /// v4.18–v5.17 `free_pcppages_bulk`: take the pages off the pcp lists before `zone.lock`,
    /// so that the lock covers only the buddy merges (Aaron Lu, after seeds 000/001).
    #[serde(default)]
    pub pick_outside_lock: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LruConfig {
    /// Pages a CPU batches before taking the LRU lock to add them (`PAGEVEC_SIZE`: 15 in 2017).
    pub add_batch: u32,
    /// `SWAP_CLUSTER_MAX`: `release_pages` drops and retakes the LRU lock after this many pages.
    pub lock_batch: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreeConfig {
    pub policy: FreePolicy,
    /// `ASYNC_FREE_THRESHOLD`: gathered pages that make a job (256K pages = 1 GiB).
    pub threshold_pages: u64,
    /// `max_active` of `batch_free_wq`.
    pub max_active: u32,
    /// Fault injection: fail every Nth job allocation (0 = never) to exercise the fallback.
    pub fail_job_alloc_every: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatherConfig {
    /// `MAX_GATHER_BATCH_COUNT`: 19 vanilla, 515 with the patch, 1030 as Aaron suggested.
    pub max_batch_count: u32,
    pub batch_switch: BatchSwitch,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HugeZeroConfig {
    /// `MMF_HUGE_ZERO_PAGE`: one reference per mm instead of one per fault (seed 002).
    pub per_mm_ref: bool,
    pub write_fault: HugeZeroWriteFault,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MunmapConfig {
    /// Zap under a downgraded (read) mmap lock (seed 003).
    pub downgrade: bool,
    /// v4.20 era option: mappings smaller than this keep the exclusive path (0 = all sizes).
    pub downgrade_min_bytes: u64,
    /// v4.20 era: no downgrade when the next VMA is a stack growing down into the hole.
    pub stack_veto: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcpuConfig {
    /// 5.14 partial chunk depopulation (seed 004).
    pub depopulate: bool,
    /// Bytes per unit (per CPU) in a chunk; a multiple of the page size.
    pub unit_size: u64,
    /// Size of the static (first chunk) area in use at boot.
    pub static_size: u64,
    /// Size of the reserved chunk.
    pub reserved_size: u64,
    /// `PCPU_EMPTY_POP_PAGES_LOW` / `_HIGH`.
    pub empty_pop_pages_low: u32,
    pub empty_pop_pages_high: u32,
}

/// Which clock a machine runs on (docs/two-clocks.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeMode {
    /// Host threads, host time: figures measured on this host.
    #[default]
    Wall,
    /// The same code as a deterministic model of the profile's machine: figures modelled in
    /// virtual time (`Machine::run`).
    Virtual,
}

impl TimeMode {
    pub fn name(self) -> &'static str {
        match self {
            TimeMode::Wall => "wall",
            TimeMode::Virtual => "virtual",
        }
    }
}

/// `time.*`: the clock, and the cost profile of virtual time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeConfig {
    pub mode: TimeMode,
    /// A built-in profile's name (`haswell-ep-2s`, ...: `Profile::builtin_names`) or the
    /// path of a profile file; used in virtual mode only (a wall machine ignores it).
    #[serde(default)]
    pub profile: String,
    /// `--scale-cost`: named costs of the profile multiplied, in order, when the machine
    /// resolves it ([`Profile::scaled`]): the scaled profile lives in memory only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scale: Vec<ScaleCost>,
    /// `time.era`: which era factors the profile's costs carry (`vtime::EraChoice`): empty
    /// or `inferred` (the era file's), `unfitted` (none), or `zap=F,free=F,locked=F,fault=F`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub era: String,
    /// `time.seed`: the seed of the profile's jitter (`[jitter]`, `vtime/jitter.rs`); runs with
    /// the same seed are identical to the nanosecond.
    #[serde(default)]
    pub seed: u64,
}

/// One named cost of the profile multiplied by a factor (`--scale-cost KEY=FACTOR`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScaleCost {
    pub key: String,
    pub factor: f64,
}

impl PartialEq for ScaleCost {
    fn eq(&self, o: &Self) -> bool {
        self.key == o.key && self.factor.to_bits() == o.factor.to_bits()
    }
}

impl Eq for ScaleCost {}

impl TimeConfig {
    /// How a report labels this machine's times: `measured (this host)` or
    /// `modelled (profile NAME)`.
    pub fn label(&self) -> String {
        match self.mode {
            TimeMode::Wall => "measured (this host)".into(),
            TimeMode::Virtual => match self.era.as_str() {
                "" | "inferred" => format!("modelled (profile {})", self.profile),
                "unfitted" => format!("modelled (profile {}, unfitted)", self.profile),
                era => format!("modelled (profile {}, era {era})", self.profile),
            },
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmaConfig {
    /// Per-VMA locks (Linux 6.4+): faults take the VMA's read lock instead of `mmap_lock`
    /// when they can (`lock_vma_under_rcu`); every VMA writer marks the VMA.
    pub per_vma_lock: bool,
}

/// The memory policy of the machine's tasks (`set_mempolicy`, as `numactl` sets it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MmConfig {
    /// `MPOL_BIND` to this one node (`numactl --membind=N`): every allocation a task makes
    /// comes from node N or fails; `None`: the local node first, then the others.
    pub membind: Option<u16>,
}

impl MmConfig {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlbConfig {
    /// Modelled cost of one flush on the initiating CPU, in ns (0 = only counted).
    pub flush_cost_ns: u64,
}

/// Every size and policy of one emulated machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineConfig {
    /// Bytes of emulated RAM (`MemTotal`).
    pub mem: u64,
    /// `nr_possible_cpus`.
    pub cpus: u16,
    /// NUMA nodes; each has one zone and one LRU (the contention domains).
    pub nodes: u16,
    pub backing: BackingMode,
    /// Full backing: make the whole host reservation resident at construction, on huge host
    /// pages (in large `MADV_POPULATE_WRITE` steps), as a VM's RAM is resident before its
    /// guest runs, so that no host page fault lands inside a measurement. Costs the host the
    /// machine's whole RAM up front. Without it, each 2 MiB region is populated at its first
    /// data allocation. Ignored with sparse backing (its data frames are never touched).
    #[serde(default)]
    pub prefault: bool,
    pub thp: ThpMode,
    /// `vm.max_map_count`.
    pub max_map_count: u32,
    /// Order-9 pages reserved for `MAP_HUGETLB` (`nr_hugepages`).
    pub nr_hugepages: u32,
    pub pcp: PcpConfig,
    pub lru: LruConfig,
    pub free: FreeConfig,
    pub gather: GatherConfig,
    pub huge_zero: HugeZeroConfig,
    pub munmap: MunmapConfig,
    pub pcpu: PcpuConfig,
    pub tlb: TlbConfig,
    /// Wall or virtual time, and the profile of the latter.
    #[serde(default)]
    pub time: TimeConfig,
    #[serde(default)]
    pub vma: VmaConfig,
    /// Left out of a record when default, as records before it were written.
    #[serde(default, skip_serializing_if = "MmConfig::is_default")]
    pub mm: MmConfig,
}

impl Default for MachineConfig {
    /// A small vanilla machine: 1 GiB, 4 CPUs, 1 node, full backing, THP madvise.
    fn default() -> Self {
        Self {
            mem: 1 << 30,
            cpus: 4,
            nodes: 1,
            backing: BackingMode::Full,
            prefault: false,
            thp: ThpMode::Madvise,
            max_map_count: 65530,
            nr_hugepages: 0,
            pcp: PcpConfig {
                high: 186,
                batch: 31,
                auto_tune: false,
                pick_outside_lock: false,
            },
            lru: LruConfig {
                add_batch: 15,
                lock_batch: 32,
            },
            free: FreeConfig {
                policy: FreePolicy::Inline,
                threshold_pages: 256 * 1024,
                max_active: 4,
                fail_job_alloc_every: 0,
            },
            gather: GatherConfig {
                max_batch_count: 19,
                batch_switch: BatchSwitch::Modern,
            },
            huge_zero: HugeZeroConfig {
                per_mm_ref: false,
                write_fault: HugeZeroWriteFault::AllocThp,
            },
            munmap: MunmapConfig {
                downgrade: false,
                downgrade_min_bytes: 0,
                stack_veto: false,
            },
            pcpu: PcpuConfig {
                depopulate: false,
                unit_size: 256 << 10,
                static_size: 96 << 10,
                reserved_size: 8 << 10,
                empty_pop_pages_low: 2,
                empty_pop_pages_high: 4,
            },
            tlb: TlbConfig { flush_cost_ns: 0 },
            time: TimeConfig::default(),
            vma: VmaConfig::default(),
            mm: MmConfig::default(),
        }
    }
}

/// A configuration that cannot make a machine, or a `--set` that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// `PCPU_MIN_ALLOC_SIZE`, restated here (config is below pcpu; `pcpu`'s tests hold the two
/// equal): the first chunk's sizes are counted in these units.
pub const PCPU_MIN_ALLOC_SIZE: u64 = 4;

/// Most empty populated pages `pcpu.empty_pop_pages_high` may ask the balance work to keep.
pub const MAX_EMPTY_POP_PAGES: u64 = 1024;

fn err<T>(msg: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(msg.into()))
}

/// Parse a size the way the kernel's `memparse` does: decimal, `0x` hex or `0` octal, with an
/// optional binary suffix `k K m M g G t T p P` (and an optional trailing `b`/`B` or `iB`).
pub fn parse_size(s: &str) -> Result<u64, ConfigError> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix("B"))
        .unwrap_or(t);
    let t = t.strip_suffix('b').unwrap_or(t);
    let (num, shift) = match t.chars().last() {
        Some(c @ ('k' | 'K' | 'm' | 'M' | 'g' | 'G' | 't' | 'T' | 'p' | 'P'))
            if !t.starts_with("0x") || !c.is_ascii_hexdigit() =>
        {
            let shift = match c.to_ascii_lowercase() {
                'k' => 10,
                'm' => 20,
                'g' => 30,
                't' => 40,
                _ => 50,
            };
            (&t[..t.len() - 1], shift)
        }
        _ => (t, 0),
    };
    let v = if let Some(h) = num.strip_prefix("0x").or_else(|| num.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else if num.len() > 1 && num.starts_with('0') {
        u64::from_str_radix(&num[1..], 8)
    } else {
        num.parse::<u64>()
    };
    let v = v.map_err(|_| ConfigError(format!("invalid size '{s}'")))?;
    v.checked_mul(1u64 << shift)
        .ok_or_else(|| ConfigError(format!("size '{s}' overflows")))
}

/// Every key [`MachineConfig::set`] accepts, in the order of the struct.
pub const CONFIG_KEYS: &[&str] = &[
    "mem",
    "cpus",
    "nodes",
    "backing",
    "prefault",
    "thp",
    "max_map_count",
    "nr_hugepages",
    "pcp.high",
    "pcp.batch",
    "pcp.auto_tune",
    "pcp.pick_outside_lock",
    "lru.add_batch",
    "lru.lock_batch",
    "free.parallel",
    "free.threshold_pages",
    "free.max_active",
    "free.fail_job_alloc_every",
    "gather.max_batch_count",
    "gather.batch_switch",
    "huge_zero.per_mm_ref",
    "huge_zero.write_fault",
    "munmap.downgrade",
    "munmap.downgrade_min_bytes",
    "munmap.stack_veto",
    "pcpu.depopulate",
    "pcpu.unit_size",
    "pcpu.static_size",
    "pcpu.reserved_size",
    "pcpu.empty_pop_pages_low",
    "pcpu.empty_pop_pages_high",
    "tlb.flush_cost_ns",
    "time.mode",
    "time.era",
    "time.profile",
    "time.seed",
    "vma.per_vma_lock",
    "mm.membind",
];

fn parse_bool(key: &str, v: &str) -> Result<bool, ConfigError> {
    match v {
        "on" | "true" | "1" | "yes" => Ok(true),
        "off" | "false" | "0" | "no" => Ok(false),
        _ => err(format!("{key}: expected on|off, got '{v}'")),
    }
}

fn parse_num<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, ConfigError> {
    v.parse()
        .map_err(|_| ConfigError(format!("{key}: expected a number, got '{v}'")))
}

impl MachineConfig {
    /// The named presets: `vanilla` (every mechanism off), `patched` (every seed patch on),
    /// `seed-000` (the parallel-free box: 4 nodes, 144 CPUs, 512 GiB sparse).
    pub fn preset(name: &str) -> Result<MachineConfig, ConfigError> {
        let mut c = MachineConfig::default();
        match name {
            "vanilla" => {}
            "patched" => c.set_patched(true),
            "seed-000" | "seed-001" => {
                c.mem = 512 << 30;
                c.cpus = 144;
                c.nodes = 4;
                c.backing = BackingMode::Sparse;
                c.thp = ThpMode::Never;
            }
            "seed-002" => {
                c.cpus = 72;
                c.nodes = 2;
                c.backing = BackingMode::Sparse;
                c.thp = ThpMode::Always;
            }
            "seed-003" => {
                c.cpus = 32;
                c.nodes = 2;
                c.backing = BackingMode::Sparse;
            }
            _ => {
                return err(format!(
                    "unknown preset '{name}' (vanilla, patched, seed-000..003)"
                ))
            }
        }
        Ok(c)
    }

    /// Turn every seed mechanism on (`true`) or off: the A/B switch of the experiments.
    pub fn set_patched(&mut self, on: bool) {
        self.free.policy = if on {
            FreePolicy::Parallel
        } else {
            FreePolicy::Inline
        };
        self.gather.max_batch_count = if on { 515 } else { 19 };
        self.huge_zero.per_mm_ref = on;
        self.munmap.downgrade = on;
        self.pcpu.depopulate = on;
    }

    /// Apply one `key=value` (the CLI's `--set`).
    pub fn set(&mut self, assignment: &str) -> Result<(), ConfigError> {
        let Some((key, v)) = assignment.split_once('=') else {
            return err(format!("--set expects key=value, got '{assignment}'"));
        };
        let (key, v) = (key.trim(), v.trim());
        match key {
            "mem" => self.mem = parse_size(v)?,
            "cpus" => self.cpus = parse_num(key, v)?,
            "nodes" => self.nodes = parse_num(key, v)?,
            "backing" => {
                self.backing = match v {
                    "full" => BackingMode::Full,
                    "sparse" => BackingMode::Sparse,
                    _ => return err(format!("backing: expected full|sparse, got '{v}'")),
                }
            }
            "prefault" => self.prefault = parse_bool(key, v)?,
            "thp" => {
                self.thp = match v {
                    "always" => ThpMode::Always,
                    "madvise" => ThpMode::Madvise,
                    "never" => ThpMode::Never,
                    _ => return err(format!("thp: expected always|madvise|never, got '{v}'")),
                }
            }
            "max_map_count" => self.max_map_count = parse_num(key, v)?,
            "nr_hugepages" => self.nr_hugepages = parse_num(key, v)?,
            "pcp.high" => self.pcp.high = parse_num(key, v)?,
            "pcp.batch" => self.pcp.batch = parse_num(key, v)?,
            "pcp.auto_tune" => self.pcp.auto_tune = parse_bool(key, v)?,
            "pcp.pick_outside_lock" => self.pcp.pick_outside_lock = parse_bool(key, v)?,
            "lru.add_batch" => self.lru.add_batch = parse_num(key, v)?,
            "lru.lock_batch" => self.lru.lock_batch = parse_num(key, v)?,
            "free.parallel" => {
                self.free.policy = if parse_bool(key, v)? {
                    FreePolicy::Parallel
                } else {
                    FreePolicy::Inline
                }
            }
            "free.threshold_pages" => self.free.threshold_pages = parse_num(key, v)?,
            "free.max_active" => self.free.max_active = parse_num(key, v)?,
            "free.fail_job_alloc_every" => self.free.fail_job_alloc_every = parse_num(key, v)?,
            "gather.max_batch_count" => self.gather.max_batch_count = parse_num(key, v)?,
            "gather.batch_switch" => {
                self.gather.batch_switch = match v {
                    "2017" | "v2017" => BatchSwitch::V2017,
                    "modern" => BatchSwitch::Modern,
                    _ => {
                        return err(format!(
                            "gather.batch_switch: expected 2017|modern, got '{v}'"
                        ))
                    }
                }
            }
            "huge_zero.per_mm_ref" => self.huge_zero.per_mm_ref = parse_bool(key, v)?,
            "huge_zero.write_fault" => {
                self.huge_zero.write_fault = match v {
                    "alloc_thp" => HugeZeroWriteFault::AllocThp,
                    "split" => HugeZeroWriteFault::Split,
                    _ => {
                        return err(format!(
                            "huge_zero.write_fault: expected alloc_thp|split, got '{v}'"
                        ))
                    }
                }
            }
            "munmap.downgrade" => self.munmap.downgrade = parse_bool(key, v)?,
            "munmap.downgrade_min_bytes" => self.munmap.downgrade_min_bytes = parse_size(v)?,
            "munmap.stack_veto" => self.munmap.stack_veto = parse_bool(key, v)?,
            "pcpu.depopulate" => self.pcpu.depopulate = parse_bool(key, v)?,
            "pcpu.unit_size" => self.pcpu.unit_size = parse_size(v)?,
            "pcpu.static_size" => self.pcpu.static_size = parse_size(v)?,
            "pcpu.reserved_size" => self.pcpu.reserved_size = parse_size(v)?,
            "pcpu.empty_pop_pages_low" => self.pcpu.empty_pop_pages_low = parse_num(key, v)?,
            "pcpu.empty_pop_pages_high" => self.pcpu.empty_pop_pages_high = parse_num(key, v)?,
            "tlb.flush_cost_ns" => self.tlb.flush_cost_ns = parse_num(key, v)?,
            "time.mode" => {
                self.time.mode = match v {
                    "wall" => TimeMode::Wall,
                    "virtual" => TimeMode::Virtual,
                    _ => return err(format!("time.mode: expected wall|virtual, got '{v}'")),
                }
            }
            "time.profile" => {
                if v.is_empty() || crate::text::first_control(v).is_some() {
                    return err(format!(
                        "time.profile: expected a profile name or file, got '{}'",
                        crate::text::visible(v)
                    ));
                }
                self.time.profile = v.to_string();
            }
            "time.era" => {
                crate::vtime::EraChoice::parse(v)
                    .map_err(|m| ConfigError(format!("time.era: {m}")))?;
                self.time.era = v.to_string();
            }
            "time.seed" => self.time.seed = parse_num(key, v)?,
            "vma.per_vma_lock" => self.vma.per_vma_lock = parse_bool(key, v)?,
            "mm.membind" => {
                self.mm.membind = match v {
                    "none" | "off" => None,
                    _ => Some(parse_num(key, v)?),
                }
            }
            _ => {
                return err(format!(
                    "unknown config key '{key}' (keys: {})",
                    CONFIG_KEYS.join(", ")
                ))
            }
        }
        Ok(())
    }

    /// Check that a machine can be built from this configuration.
    ///
    /// Every sum and product here is checked: a `--set` near `u64::MAX` is refused, never
    /// wrapped into a small value that passes.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.mem < MIN_MEM_BYTES {
            return err(format!("mem {} is below the minimum of 16 MiB", self.mem));
        }
        if self.mem > MAX_MEM_BYTES {
            return err(format!("mem {} is above the maximum of 16 TiB", self.mem));
        }
        if !self.mem.is_multiple_of(PAGE_SIZE) {
            return err("mem must be a multiple of 4 KiB");
        }
        if self.cpus == 0 || self.cpus > MAX_CPUS {
            return err(format!("cpus must be 1..={MAX_CPUS}, got {}", self.cpus));
        }
        if self.nodes == 0 || self.nodes > MAX_NODES {
            return err(format!("nodes must be 1..={MAX_NODES}, got {}", self.nodes));
        }
        let per_node = self.mem / self.nodes as u64;
        if per_node < (PAGE_SIZE << MAX_PAGE_ORDER) {
            return err("each node needs at least 4 MiB of memory");
        }
        if self.pcp.batch == 0 || self.pcp.high < self.pcp.batch {
            return err("pcp.batch must be ≥ 1 and pcp.high ≥ pcp.batch");
        }
        if self.pcp.high > MAX_PCP_HIGH {
            return err(format!(
                "pcp.high must be at most {MAX_PCP_HIGH} pages, got {}",
                self.pcp.high
            ));
        }
        if self.lru.add_batch == 0 || self.lru.lock_batch == 0 {
            return err("lru.add_batch and lru.lock_batch must be ≥ 1");
        }
        if self.lru.add_batch > MAX_LRU_ADD_BATCH {
            return err(format!(
                "lru.add_batch must be at most {MAX_LRU_ADD_BATCH}, got {}",
                self.lru.add_batch
            ));
        }
        if self.free.threshold_pages == 0 {
            return err("free.threshold_pages must be ≥ 1");
        }
        if self.free.max_active == 0 || self.free.max_active > 1024 {
            return err("free.max_active must be 1..=1024");
        }
        if self.gather.max_batch_count == 0 {
            return err("gather.max_batch_count must be ≥ 1");
        }
        if self.max_map_count == 0 {
            return err("max_map_count must be ≥ 1");
        }
        let hugetlb_bytes = u64::from(self.nr_hugepages).checked_mul(2 << 20);
        if hugetlb_bytes.is_none_or(|b| b > self.mem / 2) {
            return err("nr_hugepages may reserve at most half of mem");
        }
        let p = &self.pcpu;
        if p.unit_size == 0 || !p.unit_size.is_multiple_of(PAGE_SIZE) || p.unit_size > (64 << 20) {
            return err("pcpu.unit_size must be a non-zero multiple of 4 KiB, at most 64 MiB");
        }
        // pcpu_setup_first_chunk: the first chunk's regions are counted in
        // PCPU_MIN_ALLOC_SIZE units of its allocation map.
        let unit = PCPU_MIN_ALLOC_SIZE;
        for (key, v) in [
            ("pcpu.static_size", p.static_size),
            ("pcpu.reserved_size", p.reserved_size),
        ] {
            if !v.is_multiple_of(unit) {
                return err(format!(
                    "{key} must be a multiple of {unit} bytes (PCPU_MIN_ALLOC_SIZE), got {v}"
                ));
            }
        }
        // The first chunk holds one unit per CPU; with the machine's other boot-time
        // allocations it must leave at least half of mem.
        let units = u64::from(self.cpus).saturating_mul(p.unit_size);
        if units > self.mem / 2 {
            let need = units.saturating_mul(2).div_ceil(1 << 20);
            return err(format!(
                "mem {} MiB is too small for {} CPUs: their percpu first chunk is cpus × \
                 pcpu.unit_size = {} MiB, and mem must be at least twice that ({need} MiB)",
                self.mem >> 20,
                self.cpus,
                units >> 20
            ));
        }
        let first_chunk = p.static_size.checked_add(p.reserved_size);
        if first_chunk.is_none_or(|b| b >= p.unit_size) {
            return err(format!(
                "pcpu.static_size + pcpu.reserved_size must be below pcpu.unit_size ({}), got {} + {}",
                p.unit_size, p.static_size, p.reserved_size
            ));
        }
        if p.empty_pop_pages_low > p.empty_pop_pages_high {
            return err("pcpu.empty_pop_pages_low must be ≤ pcpu.empty_pop_pages_high");
        }
        // The balance work keeps up to `high` empty pages populated in every CPU's unit: at
        // most MAX_EMPTY_POP_PAGES (the kernel keeps 4), and no more than half of mem.
        let high = u64::from(p.empty_pop_pages_high);
        let pop_bytes = high
            .saturating_mul(u64::from(self.cpus))
            .saturating_mul(PAGE_SIZE);
        if high > MAX_EMPTY_POP_PAGES || pop_bytes > self.mem / 2 {
            return err(format!(
                "pcpu.empty_pop_pages_high must be at most {MAX_EMPTY_POP_PAGES} pages, and \
                 that many pages on each of the {} CPUs at most half of mem, got {}",
                self.cpus, p.empty_pop_pages_high
            ));
        }
        if self.tlb.flush_cost_ns > MAX_TLB_FLUSH_COST_NS {
            return err(format!(
                "tlb.flush_cost_ns must be at most {MAX_TLB_FLUSH_COST_NS} (1 ms), got {}",
                self.tlb.flush_cost_ns
            ));
        }
        if let Some(n) = self.mm.membind.filter(|&n| n >= self.nodes) {
            return err(format!(
                "mm.membind: node {n} does not exist ({} nodes)",
                self.nodes
            ));
        }
        self.resolve_profile()?;
        Ok(())
    }

    /// The cost profile of a virtual machine (`None` in wall mode), loaded and checked against
    /// the CPUs and nodes: an unknown name, a malformed or incomplete file, or more CPUs than
    /// the profile's hardware threads are errors naming the field. `nodes` may exceed the
    /// profile's nodes: they are then emulated (`numa=fake=`, `cpu.rs`; costs follow the
    /// sockets).
    pub fn resolve_profile(&self) -> Result<Option<Arc<Profile>>, ConfigError> {
        if self.time.mode == TimeMode::Wall {
            return Ok(None);
        }
        if self.time.profile.is_empty() {
            return err(format!(
                "time.profile: virtual time needs a cost profile (built in: {}; or the path of a .toml file)",
                Profile::builtin_names().join(", ")
            ));
        }
        // ProfileError names its field as `profile ...`; here that field is `time.profile`.
        let mut p =
            Profile::resolve(&self.time.profile).map_err(|e| ConfigError(format!("time.{e}")))?;
        for s in &self.time.scale {
            p = p
                .scaled(&s.key, s.factor)
                .map_err(|e| ConfigError(format!("time.scale {}={:?}: {e}", s.key, s.factor)))?;
        }
        let era = crate::vtime::EraChoice::parse(&self.time.era)
            .map_err(|m| ConfigError(format!("time.era: {m}")))?;
        p = p
            .with_era(era)
            .map_err(|e| ConfigError(format!("time.era={}: {e}", self.time.era)))?;
        Placement::new(&p, usize::from(self.cpus), usize::from(self.nodes))
            .map_err(|e| ConfigError(e.to_string()))?;
        Ok(Some(Arc::new(p)))
    }
}

#[cfg(test)]
mod test;
