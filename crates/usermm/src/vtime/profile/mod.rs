//! Cost profiles: the modelled machine's topology and the price of every modelled step.
//!
//! A profile is a TOML file (see `profiles/*.toml` for the built-in ones and the module essay in
//! `vtime/mod.rs` for the format). Every figure carries a `source`: a published measurement with
//! where it was published, a measurement with the command that took it, or — where neither
//! exists — `assumption` and why. A profile's own figures are never fitted to a seed's result
//! table; the one fitted layer is its era's factors (`era.rs`), inferred by `usermm infer` from
//! named training rows.
//!
//! Loading is strict, because a typo in a cost file silently changes every modelled figure:
//! unknown keys are errors, every [`Cost`] and every engine lock class must be present, every
//! source must be non-empty, and every error names the field it is about.
//!
//! [`Placement`] maps emulated CPUs onto the profile's sockets, cores and SMT threads, and onto
//! the run's memory nodes (which may outnumber the sockets: fake NUMA).

#![deny(unsafe_code)]

use std::{collections::BTreeMap, fmt, path::Path};

use serde::Serialize;

mod era;
mod formula;
mod placement;
mod provenance;
mod resolve;
mod scale;
mod spec;
mod units;

pub use era::{
    builtin_era, builtin_era_names, check_era, parse_era, Era, EraChoice, EraFactor, EraFactors,
    EraSpec, ERA_FACTORS, MAX_FACTOR, MIN_FACTOR, NR_ERA_FACTORS, PLAUSIBLE,
};
pub use formula::evaluate;
pub use placement::{Distance, Placement};
pub use provenance::{FormulaRow, TOPOLOGY_GHZ};
pub use scale::compact_number;
pub use spec::{
    Figure, Input, InputKind, LockFigure, MemorySpec, ProfileSpec, Quantity, Smt, Topology,
    Transfers,
};

/// The built-in profiles, by name: the seeds' machines and the validation set's HPE machine.
const BUILTIN: &[(&str, &str)] = &[
    (
        "haswell-ex-4s",
        include_str!("../profiles/haswell-ex-4s.toml"),
    ),
    (
        "haswell-ep-2s",
        include_str!("../profiles/haswell-ep-2s.toml"),
    ),
    ("e5-2680-32c", include_str!("../profiles/e5-2680-32c.toml")),
    // Not a seed's: the validation set's HPE machine (usermm_workloads::validation).
    ("hpe-64s", include_str!("../profiles/hpe-64s.toml")),
    // Not a seed's: the machine of the will-it-scale page_fault1 validation curve
    // (usermm_workloads::seeds::PAGE_FAULT1).
    (
        "broadwell-ep-2s",
        include_str!("../profiles/broadwell-ep-2s.toml"),
    ),
];

/// Most sockets a profile may have (a bound, so that the machine's size cannot overflow).
const MAX_SOCKETS: u32 = 1024;
/// Most hardware threads per core (x86 has 2; POWER up to 8).
const MAX_SMT: u32 = 8;
/// Largest `memory_gib`: the engine's largest machine (`config::MAX_MEM_BYTES`, 16 TiB; the
/// profile module sits below `config`, so the bound is restated here and a test holds the two
/// equal).
pub(crate) const MAX_MEMORY_GIB: u64 = 16 << 10;
/// Largest price of one step, in ns: 1 s. A bound, so that no figure or scaled figure can
/// bring a virtual clock near its end (u64 ps, 213 days) in any run the host can finish.
pub(super) const MAX_FIGURE_NS: f64 = 1e9;
/// The largest cache a profile may describe, in lines (2^32 lines: 256 GiB).
const MAX_CACHE_LINES: f64 = 4_294_967_296.0;
/// The largest relative spread of per-batch work, in percent (a standard deviation of 100 %).
const MAX_JITTER_PERCENT: f64 = 100.0;
/// The largest profile file read (a built-in one is about 30 KB).
const MAX_FILE_BYTES: u64 = 16 << 20;

/// Lock classes the engine declares; every profile must price each of them.
///
/// The names are the `name` of the engine's `LockClass` statics (`"zone.lock"` is
/// `zone->lock`, `"ptl"` the split PTE-page lock, ...). Extend this list when the engine gains a
/// class; the built-in profiles' test fails until they price it.
pub const ENGINE_LOCK_CLASSES: &[&str] = &[
    "zone.lock",
    "pcp",
    "lru_lock",
    "lru_add",
    "hugetlb_lock",
    "shrinker_rwsem",
    "ptl",
    "pmd_lock",
    "page_table_lock",
    "mmap_lock",
    "tlb_gate",
    "pcpu_lock",
    "pcpu_alloc_mutex",
    "shmem_i_pages",
    "workqueue",
    "mmap_lock_hist",
    "futex",
    "mmlist_lock",
    "mm_mt",
    "vm_lock",
    "unmodelled",
];

macro_rules! costs {
    ($( $(#[$doc:meta])* $variant:ident = $key:literal, $alias:literal, $bytes:expr; )*) => {
        /// A named piece of kernel work whose price the profile gives, charged to the current
        /// CPU's clock with [`charge`](super::charge) at the point of the engine's code that
        /// does that work.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(rename_all = "snake_case")]
        pub enum Cost {
            $( $(#[$doc])* #[doc(alias = $alias)] $variant, )*
        }

        impl Cost {
            /// Every cost, in declaration order (the order of the profile's table).
            pub const ALL: &'static [Cost] = &[$(Cost::$variant),*];
            /// How many costs there are.
            pub const COUNT: usize = Cost::ALL.len();

            /// The key of this cost in a profile's `[costs]` table.
            pub fn key(self) -> &'static str {
                match self { $(Cost::$variant => $key,)* }
            }

            /// The kernel function or step this cost stands for.
            pub fn kernel_name(self) -> &'static str {
                match self { $(Cost::$variant => $alias,)* }
            }

            /// `Some(bytes)` when one unit of this cost is a transfer of that many bytes (so the
            /// profile may give it as `bytes_per_ns`); `None` for a per-operation cost.
            pub fn bytes(self) -> Option<u64> {
                match self { $(Cost::$variant => $bytes,)* }
            }

            /// The cost whose profile key is `key`.
            pub fn from_key(key: &str) -> Option<Cost> {
                Cost::ALL.iter().copied().find(|c| c.key() == key)
            }

            #[inline]
            pub(crate) fn index(self) -> usize {
                self as usize
            }
        }
    };
}

costs! {
    /// Clearing one present PTE while zapping (`zap_pte_range`, per present entry).
    ZapPte = "zap_pte", "zap_pte_range", None;
    /// Adding one page to the `mmu_gather` batch (`__tlb_remove_page`).
    GatherPage = "gather_page", "__tlb_remove_page", None;
    /// Freeing one order-0 page onto the per-CPU list (`free_unref_page`, per page).
    FreeUnrefPage = "free_unref_page", "free_unref_page", None;
    /// Moving one page from a pcp list back to the buddy under `zone.lock`, merges excluded
    /// (`free_pcppages_bulk`, per page).
    FreePcppagesBulkPage = "free_pcppages_bulk_page", "free_pcppages_bulk", None;
    /// One buddy merge step in `__free_one_page`.
    FreeOneMerge = "free_one_merge", "__free_one_page", None;
    /// Taking one page off its LRU list (`lruvec_del_folio`).
    LruDel = "lru_del", "lruvec_del_folio", None;
    /// Putting one page on its LRU list (`lruvec_add_folio`).
    LruAdd = "lru_add", "lruvec_add_folio", None;
    /// Taking one page from a pcp list (`rmqueue_pcplist`).
    RmqueuePcp = "rmqueue_pcp", "rmqueue_pcplist", None;
    /// Moving one page from the buddy to a pcp list under `zone.lock` (`rmqueue_bulk`, per page).
    RmqueueBulkPage = "rmqueue_bulk_page", "rmqueue_bulk", None;
    /// Zeroing 4 KiB (`clear_page`).
    ClearPage = "clear_page", "clear_page", Some(4096);
    /// Copying 4 KiB (`copy_page`).
    CopyPage = "copy_page", "copy_page", Some(4096);
    /// What a new private anonymous page costs a fault beyond its allocation, its clearing
    /// and its LRU add: the memcg charge (`mem_cgroup_charge` in `alloc_anon_folio`), the
    /// folio's first use (`__folio_mark_uptodate`), its rmap and rss accounting
    /// (`folio_add_new_anon_rmap`), per page of `do_anonymous_page` and `wp_page_copy`.
    NewAnonFolio = "new_anon_folio", "folio_add_new_anon_rmap", None;
    /// Exception entry of a page fault, up to `handle_mm_fault` (`asm_exc_page_fault`).
    FaultEntry = "fault_entry", "asm_exc_page_fault", None;
    /// Return from a page-fault exception to user space.
    FaultExit = "fault_exit", "irqentry_exit_to_user_mode", None;
    /// Walking one page-table level (`pgd_offset`/`p4d_offset`/`pud_offset`/`pmd_offset`).
    PtWalkLevel = "pt_walk_level", "pmd_offset", None;
    /// Allocating one page-table page, zeroing excluded (`__pte_alloc`, `__pmd_alloc`).
    PtAlloc = "pt_alloc", "__pte_alloc", None;
    /// Freeing one page-table page (`free_pgtables`, per table).
    PtFree = "pt_free", "free_pgtables", None;
    /// Installing one PTE or PMD (`set_pte_at`, `set_pmd_at`).
    SetPte = "set_pte", "set_pte_at", None;
    /// A local TLB flush (`flush_tlb_mm_range` on this CPU).
    TlbFlushLocal = "tlb_flush_local", "flush_tlb_mm_range", None;
    /// The sender's cost per remote CPU of a TLB shootdown (`flush_tlb_multi`).
    TlbFlushRemotePerCpu = "tlb_flush_remote_per_cpu", "flush_tlb_multi", None;
    /// The receiving side of one shootdown, charged to the context that occupies each other
    /// CPU in `mm_cpumask`: the interrupt's entry, the local flush and the return
    /// (`flush_tlb_func`, run from the call-function IPI).
    FlushTlbFunc = "flush_tlb_func", "flush_tlb_func", None;
    /// The queuer's side of `queue_work` waking an idle worker (`try_to_wake_up`).
    WorkqueueWake = "workqueue_wake", "queue_work", None;
    /// Entry and exit of one system call (`entry_SYSCALL_64`).
    Syscall = "syscall", "entry_SYSCALL_64", None;
    /// One VMA stored in, split in or removed from an mm's tree (`vma_iter_store`,
    /// `__split_vma`, `vma_iter_clear`): the tree update and the VMA's bookkeeping.
    VmaModify = "vma_modify", "vma_iter_store", None;
    /// One 64-byte line of user memory that a user-space walk streams through (usemem's
    /// sequential reads and writes): user work, at the memory system's streaming bandwidth.
    UserLine = "user_line", "user space: a sequential access", Some(64);
    /// One user-space access to a line in no cache (usemem's random order, `-R`): a DRAM
    /// round trip.
    UserMiss = "user_miss", "user space: a random access", None;
}

/// Picoseconds: the model's clock unit (costs below 1 ns, such as an SMT-sibling transfer of
/// 7.6 ns or a 1.6× factor, stay exact enough). Reports convert to ns.
pub(crate) type Ps = u64;

/// A lock class's resolved prices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LockPrice {
    pub acquire: Ps,
    pub data_lines: u32,
}

/// A validated profile: the file as written, and its figures resolved to picoseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    spec: ProfileSpec,
    origin: String,
    /// The costs as the file (and `--scale-cost`) price them, before the era's factors.
    base_cost_ps: [Ps; Cost::COUNT],
    /// The costs the model charges: [`Profile::base_cost_ps`] times the era's factors.
    pub(crate) cost_ps: [Ps; Cost::COUNT],
    /// The era the profile names (`era = "NAME"`), with the factors applied.
    era: Option<Era>,
    /// Indexed by [`Distance`]: same CPU (always 0), SMT sibling, same socket, other socket.
    pub(crate) transfer_ps: [Ps; 4],
    pub(crate) wakeup_ps: Ps,
    pub(crate) atomic_rmw_ps: Ps,
    /// The SMT factor in thousandths (1.6 → 1600), so that scaling is integer arithmetic.
    pub(crate) smt_milli: u64,
    pub(crate) locks: BTreeMap<String, LockPrice>,
    /// The line model's prices (`[memory]`); `None`: lines are free.
    pub(crate) memory: Option<MemPrice>,
    /// The relative standard deviation of per-batch work, in millionths (`[jitter]`; 0: none).
    pub(crate) jitter_ppm: u32,
}

/// `[memory]` resolved: capacities in lines, times in ps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemPrice {
    pub llc_lines: u64,
    pub l2_lines: u64,
    pub dram_local: Ps,
    pub dram_remote: Ps,
    pub dram_stream: Ps,
}

/// Why a profile, or a CPU/node count against it, was rejected. Each message is one line and
/// names the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileError {
    /// Not a built-in name and not a readable file.
    Unknown { name: String },
    /// The file could not be read.
    Read { path: String, message: String },
    /// The file is not valid TOML or does not have the profile's shape.
    Parse {
        origin: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// A field has a value the model cannot use, or is missing.
    Invalid {
        origin: String,
        field: String,
        message: String,
    },
    /// A run's CPU or node count does not fit the profile.
    Topology {
        profile: String,
        field: &'static str,
        message: String,
    },
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileError::Unknown { name } => write!(
                f,
                "profile: unknown profile `{name}` (built in: {}; or the path of a .toml file)",
                Profile::builtin_names().join(", ")
            ),
            ProfileError::Read { path, message } => {
                write!(f, "profile {path}: cannot read: {message}")
            }
            ProfileError::Parse {
                origin,
                line,
                column,
                message,
            } => write!(
                f,
                "profile {origin}: line {line}, column {column}: {message}"
            ),
            ProfileError::Invalid {
                origin,
                field,
                message,
            } => write!(f, "profile {origin}: {field}: {message}"),
            ProfileError::Topology {
                profile,
                field,
                message,
            } => write!(f, "{field}: {message} (profile {profile})"),
        }
    }
}

impl std::error::Error for ProfileError {}

impl Profile {
    /// Names of the built-in profiles.
    pub fn builtin_names() -> Vec<&'static str> {
        BUILTIN.iter().map(|(n, _)| *n).collect()
    }

    /// A built-in profile by name.
    pub fn builtin(name: &str) -> Result<Profile, ProfileError> {
        let (_, text) =
            BUILTIN
                .iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| ProfileError::Unknown {
                    name: name.to_string(),
                })?;
        Profile::from_toml_str(text, name)
    }

    /// A profile from a TOML file.
    pub fn load(path: &Path) -> Result<Profile, ProfileError> {
        use std::io::Read;
        let origin = path.display().to_string();
        let read = |message: String| ProfileError::Read {
            path: origin.clone(),
            message,
        };
        // A device or a FIFO would be read forever or block: only a regular file is a
        // profile, and only its first MAX_FILE_BYTES (a built-in one is 30 KB).
        let file = std::fs::File::open(path).map_err(|e| read(e.to_string()))?;
        let meta = file.metadata().map_err(|e| read(e.to_string()))?;
        if !meta.is_file() {
            return Err(read("not a regular file".into()));
        }
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| read(e.to_string()))?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(read(format!("larger than {} MiB", MAX_FILE_BYTES >> 20)));
        }
        let text = String::from_utf8(bytes).map_err(|_| read("not UTF-8 text".into()))?;
        Profile::from_toml_str(&text, &origin)
    }

    /// `time.profile = NAME | FILE`: a built-in name, else a path to a file.
    pub fn resolve(name_or_path: &str) -> Result<Profile, ProfileError> {
        if BUILTIN.iter().any(|(n, _)| *n == name_or_path) {
            return Profile::builtin(name_or_path);
        }
        let path = Path::new(name_or_path);
        // What exists, or is written as a path, is read as one (so that a missing file or a
        // directory says so rather than "unknown profile").
        if path.exists() || name_or_path.contains('/') || name_or_path.ends_with(".toml") {
            return Profile::load(path);
        }
        Err(ProfileError::Unknown {
            name: name_or_path.to_string(),
        })
    }

    /// Parses and validates a profile; `origin` names it in errors (a file name or built-in).
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Profile, ProfileError> {
        let spec: ProfileSpec = toml::from_str(text).map_err(|e| {
            let (line, column) = e.span().map(|s| line_col(text, s.start)).unwrap_or((0, 0));
            ProfileError::Parse {
                origin: origin.to_string(),
                line,
                column,
                message: e.message().trim().replace('\n', " "),
            }
        })?;
        Profile::from_spec(spec, origin)
    }

    /// The price of one unit of `cost` before the era's factors, in ns (the figure as the
    /// file, and `--scale-cost`, give it).
    pub fn base_cost_ns(&self, cost: Cost) -> f64 {
        self.base_cost_ps[cost.index()] as f64 / 1000.0
    }

    /// The profile's name (its `name` field).
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Where it was loaded from: a built-in name or a file path.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The file as written, with every source (serialise it into reports).
    pub fn spec(&self) -> &ProfileSpec {
        &self.spec
    }

    pub fn topology(&self) -> &Topology {
        &self.spec.topology
    }

    /// The price of one unit of `cost`, in ns.
    pub fn cost_ns(&self, cost: Cost) -> f64 {
        self.cost_ps[cost.index()] as f64 / 1000.0
    }

    /// A line transfer over `d`, in ns.
    pub fn transfer_ns(&self, d: Distance) -> f64 {
        self.transfer_ps[d as usize] as f64 / 1000.0
    }

    /// Does `class` have a price in this profile?
    pub fn has_lock_class(&self, class: &str) -> bool {
        self.locks.contains_key(class)
    }

    /// Every figure with its formula and what the formula gives over the inputs: the table a
    /// reader (or a test) checks the profile's arithmetic with.
    pub fn provenance(&self) -> Vec<FormulaRow> {
        provenance::rows(&self.spec)
    }

    /// The profile in its file format.
    pub fn to_toml_string(&self) -> String {
        toml::to_string_pretty(&self.spec).expect("a profile spec always serialises")
    }

    /// `--cpus N` must not exceed the profile's hardware threads.
    pub fn check_cpus(&self, nr_cpus: usize) -> Result<(), ProfileError> {
        let hw = self.topology().hw_threads();
        if nr_cpus == 0 {
            return Err(self.topology_error("cpus", "must be positive (got 0)".into()));
        }
        if nr_cpus > hw {
            return Err(self.topology_error(
                "cpus",
                format!("{nr_cpus} CPUs, but the machine has {hw} hardware threads"),
            ));
        }
        Ok(())
    }

    fn topology_error(&self, field: &'static str, message: String) -> ProfileError {
        ProfileError::Topology {
            profile: self.name().to_string(),
            field,
            message,
        }
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}

#[cfg(test)]
mod test;
#[cfg(test)]
mod test_era;
#[cfg(test)]
mod test_provenance;
