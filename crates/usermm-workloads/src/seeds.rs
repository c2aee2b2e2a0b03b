//! The seeds' published figures and the machines they ran on, as data: the one place every
//! figure a seed published, and every fact of a seed's machine the model builds on, is
//! written down ([`SeedMachine`]: the cost profile of virtual time, the CPUs and nodes the
//! experiment's default machine has). The workloads' records carry them ([`crate::bigfree::BigfreeResult::seed`],
//! [`crate::munmap_test::MunmapTestResult::seed`], the percpu rows), and `usermm`'s tables,
//! plots, verdicts and `results.json` read them from here — no seed number is typed twice.
//!
//! Each constant names its posting. A figure the seed states is a field; a figure that
//! follows from stated ones (a ratio, a fault count) is a method, so it cannot drift from
//! them. Fields marked `#[serde(skip)]` are the prose facts (machine, kernel, quotes) that a
//! report prints but `results.json` has never carried; the serialised fields are exactly the
//! JSON records' `seed` objects.

use serde::Serialize;

/// A seed's machine as the experiments build it: the built-in cost profile that models it in
/// virtual time (`crates/usermm/src/vtime/profiles/`), and the CPU and node counts of the
/// experiment's default machine. `bigfree`, `usemem`, `munmap-test`, `percpu-test` and
/// `reproduce` take their defaults from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SeedMachine {
    pub profile: &'static str,
    pub cpus: u16,
    pub nodes: u16,
}

/// Seeds 000/001's Haswell-EX: 4 sockets x 18 cores x 2 threads, one node per socket.
pub const PARALLEL_FREE_MACHINE: SeedMachine = SeedMachine {
    profile: "haswell-ex-4s",
    cpus: 144,
    nodes: 4,
};

/// Seed 002's Haswell-EP: 2 sockets x 18 cores x 2 threads (72 processes, one per thread),
/// one node per socket (in virtual time the node decides where each CPU's memory and the huge
/// zero page's line live).
pub const HUGE_ZERO_MACHINE: SeedMachine = SeedMachine {
    profile: "haswell-ep-2s",
    cpus: 72,
    nodes: 2,
};

/// Seed 003's 32 x E5-2680: munmap-test's default machine has one node (the seed's faulters
/// and zapper share one mm; its figure is the mmap lock's hold, not memory placement).
pub const MUNMAP_DOWNGRADE_MACHINE: SeedMachine = SeedMachine {
    profile: "e5-2680-32c",
    cpus: 32,
    nodes: 1,
};

/// Seed 004 names no machine; its figures are memory (kB), the same on either clock, so
/// virtual time only prices the run: the parallel-free seeds' machine stands in.
pub const PERCPU_DEPOPULATE_MACHINE: SeedMachine = PARALLEL_FREE_MACHINE;

/// Seeds 000/001: "[PATCH v2 0/5] mm: support parallel free of memory" (Aaron Lu, linux-mm,
/// 2017-03-15; v1 2017-02-24). `free()` of a touched `malloc(320G)`, THP off, timed on
/// v4.10 and with the series at each `max_active` of the free workqueue.
#[derive(Debug, Clone, Serialize)]
pub struct ParallelFree {
    /// The mapping freed, bytes.
    pub size: u64,
    pub machine: &'static str,
    /// Vanilla (v4.10) free time, s, and its spread, %.
    pub vanilla_s: f64,
    pub vanilla_spread_pct: f64,
    /// `(max_active, time s, ± %)` with the series.
    pub rows: &'static [(u32, f64, f64)],
    /// The machine's NUMA nodes and hardware threads.
    #[serde(skip)]
    pub nodes: u16,
    #[serde(skip)]
    pub threads: u16,
}

impl ParallelFree {
    /// The seed's time for `max_active`, if published.
    pub fn time_of(&self, max_active: u32) -> Option<f64> {
        self.rows.iter().find(|r| r.0 == max_active).map(|r| r.1)
    }

    /// Vanilla's time over the time at `max_active`, if published.
    pub fn speedup_of(&self, max_active: u32) -> Option<f64> {
        self.time_of(max_active).map(|t| self.vanilla_s / t)
    }

    /// The fastest row: `(max_active, time s)`.
    pub fn best(&self) -> (u32, f64) {
        self.rows
            .iter()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map_or((0, self.vanilla_s), |r| (r.0, r.1))
    }

    /// Vanilla's time over the fastest row's.
    pub fn best_speedup(&self) -> f64 {
        self.vanilla_s / self.best().1
    }
}

/// `WQ_DFL_ACTIVE`: the `max_active` of a workqueue allocated with 0, as the patch's
/// `batch_free_wq` is (the seed's "patched, default wq" row).
pub const DEFAULT_WQ_MAX_ACTIVE: u32 = 256;

/// Seeds 000/001 (see [`ParallelFree`]): "Haswell EX which has 4nodes/72cores/144threads with
/// 512G memory"; rebased on v4.11-rc2-mmotm for v2.
pub const PARALLEL_FREE: ParallelFree = ParallelFree {
    size: 320 << 30,
    machine: "Haswell-EX, 4 nodes / 72 cores / 144 threads, 512 GiB, THP off, v4.10/v4.11-rc2",
    vanilla_s: 10.8,
    vanilla_spread_pct: 2.8,
    rows: &[
        (1, 8.9, 0.5),
        (2, 5.65, 5.5),
        (4, 4.84, 0.16),
        (8, 4.77, 0.97),
        (16, 4.85, 0.77),
        (32, 6.21, 0.46),
        // "patched, default wq": the patch's `alloc_workqueue("batch_free_wq", WQ_UNBOUND |
        // WQ_SYSFS, 0)`, whose 0 is WQ_DFL_ACTIVE (256), applied per node's pool_workqueue in
        // v4.11: max_active 256.
        (DEFAULT_WQ_MAX_ACTIVE, 5.795, 5.8),
    ],
    nodes: 4,
    threads: 144,
};

/// Seeds 000/001's thread, the node-bound run (Aaron Lu, "Re: [PATCH v2 0/5] mm: support
/// parallel free of memory", 2017-03-24, `<20170324123710.GA10672@aaronlu.sh.intel.com>`): the
/// same Haswell-EX, a 120 GiB mapping whose memory `numactl --membind=1` bound to node 1, freed
/// on v4.11-rc2-mmotm vanilla and with the series at `max_active` 1–16; the spinlock share of
/// the CPU cycles of each row, and at `max_active` 8 the split of that share between its two
/// callers. A validation set: nothing in it trains a factor.
#[derive(Debug, Clone, Serialize)]
pub struct NodeBoundFree {
    /// The mapping freed, bytes, and the node its memory was bound to.
    pub size: u64,
    pub membind: u16,
    /// The machine's RAM (seeds 000/001's "512G memory"), bytes.
    pub ram: u64,
    /// Vanilla free time, s; its spinlock share is published as "< 1 %" (this bound).
    pub vanilla_s: f64,
    pub vanilla_spin_below: f64,
    /// `(max_active, time s, spinlock share of the cycles)` with the series.
    pub rows: &'static [(u32, f64, f64)],
    /// At this `max_active`, the spinlock share split by caller: `free_pcppages_bulk`
    /// (`zone->lock`) and `release_pages` (the pgdat `lru_lock`).
    pub split_max_active: u32,
    pub zone_lock_share: f64,
    pub lru_lock_share: f64,
    #[serde(skip)]
    pub posting: &'static str,
}

impl NodeBoundFree {
    /// The published time for `max_active` (`None`: vanilla).
    pub fn time_of(&self, max_active: Option<u32>) -> Option<f64> {
        match max_active {
            None => Some(self.vanilla_s),
            Some(m) => self.rows.iter().find(|r| r.0 == m).map(|r| r.1),
        }
    }
}

/// The node-bound run (see [`NodeBoundFree`]).
pub const NODE_BOUND_FREE: NodeBoundFree = NodeBoundFree {
    size: 120 << 30,
    membind: 1,
    ram: 512 << 30,
    vanilla_s: 3.81,
    vanilla_spin_below: 0.01,
    rows: &[
        (1, 3.10, 0.148),
        (2, 2.44, 0.370),
        (4, 2.07, 0.597),
        (8, 1.98, 0.626),
        (16, 2.01, 0.796),
    ],
    split_max_active: 8,
    zone_lock_share: 0.372,
    lru_lock_share: 0.253,
    posting: "<20170324123710.GA10672@aaronlu.sh.intel.com>",
};

/// Seeds 000/001's thread, the 2-node run (Aaron Lu, 2017-03-16,
/// `<20170316135122.GF13054@aaronlu.sh.intel.com>`): a Haswell-EP with 128 GiB of RAM, a
/// 100 GiB mapping freed vanilla and with the series, in the patch's 1 GiB jobs and in 2 GiB
/// jobs (`max_gather_batch_count` 1030 through the series' debugfs knob).
#[derive(Debug, Clone, Serialize)]
pub struct TwoNodeFree {
    pub size: u64,
    /// The machine's RAM, bytes.
    pub ram: u64,
    pub vanilla_s: f64,
    /// `(max_active, time s)` with 1 GiB jobs, and with 2 GiB jobs.
    pub rows_1g: &'static [(u32, f64)],
    pub rows_2g: &'static [(u32, f64)],
    /// `max_gather_batch_count` of the 2 GiB rows.
    pub batch_count_2g: u32,
    #[serde(skip)]
    pub posting: &'static str,
}

/// The 2-node run (see [`TwoNodeFree`]).
pub const TWO_NODE_FREE: TwoNodeFree = TwoNodeFree {
    size: 100 << 30,
    ram: 128 << 30,
    vanilla_s: 2.971,
    rows_1g: &[(2, 1.699), (4, 1.616), (8, 1.642)],
    rows_2g: &[(2, 1.605), (4, 1.639), (8, 1.626)],
    batch_count_2g: 1030,
    posting: "<20170316135122.GF13054@aaronlu.sh.intel.com>",
};

/// Seeds 000/001's thread, Alex Thorlton's run (HPE, a reply in the v1 thread, 2017): 64
/// sockets, 1024 cores, 8 TB, `free()` of a 1 TB `malloc`, vanilla and with v1 at its defaults
/// (1 GiB jobs, `batch_free_wq` allocated with max_active 0: `WQ_DFL_ACTIVE`).
#[derive(Debug, Clone, Serialize)]
pub struct HpeFree {
    pub sockets: u16,
    pub cores: u16,
    /// RAM and the mapping, bytes ("8 TB", "1 TB" read as binary).
    pub ram: u64,
    pub size: u64,
    pub vanilla_s: f64,
    pub patched_s: f64,
    #[serde(skip)]
    pub posting: &'static str,
}

impl HpeFree {
    pub fn ratio(&self) -> f64 {
        self.vanilla_s / self.patched_s
    }
}

/// Alex Thorlton's machine as the validation set models it: a profile of its published size
/// and assumed parts (`hpe-64s`), every hardware thread a CPU, one node per socket.
pub const HPE_FREE_MACHINE: SeedMachine = SeedMachine {
    profile: "hpe-64s",
    cpus: 2048,
    nodes: 64,
};

/// Alex Thorlton's run (see [`HpeFree`]).
pub const HPE_FREE: HpeFree = HpeFree {
    sockets: 64,
    cores: 1024,
    ram: 8 << 40,
    size: 1 << 40,
    vanilla_s: 41.69,
    patched_s: 21.56,
    posting: "Alex Thorlton (HPE), reply to \"[PATCH 0/5] mm: support parallel free of memory\" (v1, 2017-02-24)",
};

/// A published will-it-scale page_fault1 curve: Daniel Jordan, "[RFC PATCH v2 0/8] lru_lock
/// scalability and SMP list functions" (LKML 2018-09-10,
/// `<20180911004240.4758-1-daniel.m.jordan@oracle.com>`), the 4.16 baseline kernel's row of its
/// table on a "44-core Xeon E5-2699 v4 with 503G memory" ("N tasks mmap, touch each 4K page in,
/// and munmap an anonymous 128M memory region"). No seed's: a validation set for the model, of
/// which no figure is an input or trains a factor.
#[derive(Debug, Clone, Serialize)]
pub struct PageFault1Curve {
    /// `(tasks, page faults per second)` in process mode.
    pub processes: &'static [(usize, u64)],
    /// `(tasks, page faults per second)` in thread mode.
    pub threads: &'static [(usize, u64)],
    /// The kernel the curve was taken on.
    #[serde(skip)]
    pub kernel: &'static str,
    #[serde(skip)]
    pub posting: &'static str,
}

impl PageFault1Curve {
    /// The published figure at `tasks` in process (`threads` false) or thread mode.
    pub fn at(&self, tasks: usize, threads: bool) -> Option<u64> {
        let rows = if threads {
            self.threads
        } else {
            self.processes
        };
        rows.iter().find(|r| r.0 == tasks).map(|r| r.1)
    }
}

/// The machine of [`PAGE_FAULT1`] as the model builds it: `broadwell-ep-2s` (2 sockets x 22
/// cores x 2 threads), every hardware thread a CPU, one node per socket.
pub const PAGE_FAULT1_MACHINE: SeedMachine = SeedMachine {
    profile: "broadwell-ep-2s",
    cpus: 88,
    nodes: 2,
};

/// Daniel Jordan's page_fault1 curve (see [`PageFault1Curve`]).
pub const PAGE_FAULT1: PageFault1Curve = PageFault1Curve {
    processes: &[
        (1, 626_944),
        (2, 1_206_238),
        (22, 7_569_187),
        (44, 13_446_153),
        (88, 10_321_790),
    ],
    threads: &[(1, 625_509)],
    kernel: "Linux 4.16",
    posting: "Daniel Jordan, \"[RFC PATCH v2 0/8] lru_lock scalability and SMP list functions\", LKML 2018-09-10",
};

/// Seed 002: "thp: reduce usage of huge zero page's atomic counter" (Aaron Lu, linux-mm,
/// 2016-08-29, as quoted in Andrew Morton's reply), tested on Haswell EP with `usemem -n 72 --readonly -j
/// 0x200000 100G`: perf's share of cycles in `get_huge_zero_page` before, in
/// `mm_get_huge_zero_page` after.
#[derive(Debug, Clone, Serialize)]
pub struct HugeZero {
    /// `get_huge_zero_page`'s share of the cycles, vanilla (54.03 %).
    pub cycles_share_vanilla: f64,
    /// `mm_get_huge_zero_page`'s share, patched (0.11 %).
    pub cycles_share_patched: f64,
    /// Patched over vanilla throughput (sum of the workers' KB/s), as `usermm` has reported it
    /// since its first report ("+164 %"); not in the posting's perf excerpt.
    pub throughput_ratio: f64,
    /// usemem's `-n`, SIZE and `-j`.
    #[serde(skip)]
    pub nproc: u32,
    #[serde(skip)]
    pub size: u64,
    #[serde(skip)]
    pub step: u64,
    /// The kernel the vanilla figures are from, and the machine.
    #[serde(skip)]
    pub kernel: &'static str,
    #[serde(skip)]
    pub machine: &'static str,
    /// `thp_zero_page_alloc` over the run: the huge zero page is allocated once.
    #[serde(skip)]
    pub thp_zero_page_alloc: u64,
    /// Global refcount operations per mm with the patch: one get, one put.
    #[serde(skip)]
    pub ops_per_mm_patched: u64,
}

impl HugeZero {
    /// Read faults per mm: one per 2 MiB step, each mapping the huge zero page.
    pub fn faults_per_mm(&self) -> u64 {
        self.size / self.step
    }

    /// Read faults of the whole run.
    pub fn faults(&self) -> u64 {
        u64::from(self.nproc) * self.faults_per_mm()
    }

    /// Global refcount operations per mm without the patch: a get per fault and a put per
    /// zapped PMD.
    pub fn ops_per_mm_vanilla(&self) -> u64 {
        2 * self.faults_per_mm()
    }
}

/// Seed 002 (see [`HugeZero`]).
pub const HUGE_ZERO: HugeZero = HugeZero {
    cycles_share_vanilla: 0.5403,
    cycles_share_patched: 0.0011,
    throughput_ratio: 2.64,
    nproc: 72,
    size: 100 << 30,
    step: 2 << 20,
    kernel: "4.8",
    machine: "Haswell-EP",
    thp_zero_page_alloc: 1,
    ops_per_mm_patched: 2,
};

/// Seed 003: "mm: zap pages with read mmap_sem in munmap for large mapping" (Yang Shi, v7
/// cover letter, 2018; merged for 4.20): "exclusive mmap_sem hold time when munmap a 80GB address
/// space on a machine with 32 cores of E5-2680 @ 2.70GHz dropped to us level from second",
/// with an ftrace `function_graph` excerpt of the patched kernel.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct MunmapDowngrade {
    /// "80GB", recorded as 80 GiB (as `results.json` has always carried it).
    pub size: u64,
    pub cpus: u16,
    /// ftrace of the patched kernel: `vm_munmap_zap_rlock()` in all, µs.
    pub total_us: u64,
    /// ftrace of the patched kernel: `unmap_region()` under the read lock, µs.
    pub unmap_region_us: u64,
    /// Without the patch the whole munmap holds the lock for write, µs.
    pub exclusive_vanilla_us: u64,
    /// With it, what is left for the write lock: total − unmap_region, µs.
    pub exclusive_patched_us: u64,
    /// The cover letter's wording of the patched hold ("us level"), and the bound a report
    /// prints for it, µs.
    #[serde(skip)]
    pub exclusive_patched_claim: &'static str,
    #[serde(skip)]
    pub exclusive_patched_bound_us: u64,
    /// "80GB" read as decimal bytes: what `reproduce --scale seed` maps (rounded down to
    /// 2 MiB).
    #[serde(skip)]
    pub size_decimal: u64,
    /// How the posting names its size and machine.
    #[serde(skip)]
    pub size_label: &'static str,
    #[serde(skip)]
    pub machine: &'static str,
    #[serde(skip)]
    pub source: &'static str,
    /// The ftrace excerpt, verbatim in the seed's layout.
    #[serde(skip)]
    pub ftrace: [&'static str; 3],
}

const MUNMAP_TOTAL_US: u64 = 2_485_692;
const MUNMAP_UNMAP_REGION_US: u64 = 2_485_684;

/// Seed 003 (see [`MunmapDowngrade`]).
pub const MUNMAP_DOWNGRADE: MunmapDowngrade = MunmapDowngrade {
    size: 80 << 30,
    cpus: MUNMAP_DOWNGRADE_MACHINE.cpus,
    total_us: MUNMAP_TOTAL_US,
    unmap_region_us: MUNMAP_UNMAP_REGION_US,
    exclusive_vanilla_us: MUNMAP_TOTAL_US,
    exclusive_patched_us: MUNMAP_TOTAL_US - MUNMAP_UNMAP_REGION_US,
    exclusive_patched_claim: "µs level",
    exclusive_patched_bound_us: 10,
    size_decimal: 80_000_000_000,
    size_label: "80 GB",
    machine: "32 × E5-2680 @ 2.70 GHz",
    source: "v7 cover letter",
    ftrace: [
        "  munmap_test-15002 [008] 594.380138: funcgraph_entry:                |  vm_munmap_zap_rlock() {",
        "  munmap_test-15002 [008] 594.380146: funcgraph_entry: ! 2485684 us   |    unmap_region();",
        "  munmap_test-15002 [008] 596.865836: funcgraph_exit:  ! 2485692 us   |  }",
    ],
};

/// Seed 004: "percpu: partial chunk depopulation" (Roman Gushchin, v3 cover letter, 2021): the
/// `Percpu:` line of `/proc/meminfo` at the three points of the cover letter's script
/// (`mkdir` 1000 `cg_i`, each followed by 10 `cg_i_j`; `rmdir` every `cg_i_j`; `sleep 10`).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PercpuDepopulate {
    /// kB at start, after creating, after deleting; vanilla and patched.
    pub vanilla_kb: [u64; 3],
    pub patched_kb: [u64; 3],
    /// The script's shape: parents, and children per parent.
    #[serde(skip)]
    pub parents: u32,
    #[serde(skip)]
    pub children: u32,
}

impl PercpuDepopulate {
    /// Vanilla over patched after deleting.
    pub fn ratio_after_delete(&self) -> f64 {
        self.vanilla_kb[2] as f64 / self.patched_kb[2] as f64
    }

    /// Vanilla after deleting over vanilla after creating (1: nothing given back).
    pub fn vanilla_plateau(&self) -> f64 {
        self.vanilla_kb[2] as f64 / self.vanilla_kb[1] as f64
    }
}

/// Seed 004 (see [`PercpuDepopulate`]).
pub const PERCPU_DEPOPULATE: PercpuDepopulate = PercpuDepopulate {
    vanilla_kb: [7488, 481_152, 481_152],
    patched_kb: [7488, 481_408, 135_552],
    parents: 1000,
    children: 10,
};

#[cfg(test)]
mod test {
    use super::*;

    /// Each seed's machine is the machine its profile describes: the profile is built in, and
    /// the experiment's CPUs and nodes fit its topology; seed 002's 72 processes are one per
    /// hardware thread, and seed 003's CPUs are the posting's 32.
    #[test]
    fn seed_machines_fit_their_profiles() {
        for m in [
            PARALLEL_FREE_MACHINE,
            HUGE_ZERO_MACHINE,
            MUNMAP_DOWNGRADE_MACHINE,
            PERCPU_DEPOPULATE_MACHINE,
            HPE_FREE_MACHINE,
            PAGE_FAULT1_MACHINE,
        ] {
            let p = usermm::vtime::Profile::builtin(m.profile).unwrap();
            let t = p.topology();
            assert!(usize::from(m.cpus) <= t.hw_threads(), "{m:?}");
            assert!(u32::from(m.nodes) <= t.nodes && m.nodes >= 1, "{m:?}");
        }
        assert_eq!(
            usize::from(HUGE_ZERO_MACHINE.cpus),
            HUGE_ZERO.nproc as usize
        );
        assert_eq!(MUNMAP_DOWNGRADE.cpus, 32);
        let hpe = usermm::vtime::Profile::builtin(HPE_FREE_MACHINE.profile).unwrap();
        let t = hpe.topology();
        assert_eq!(
            (t.sockets, t.sockets * t.cores_per_socket, t.memory_gib),
            (
                u32::from(HPE_FREE.sockets),
                u32::from(HPE_FREE.cores),
                Some(HPE_FREE.ram >> 30)
            )
        );
        let bdw = usermm::vtime::Profile::builtin(PAGE_FAULT1_MACHINE.profile).unwrap();
        let t = bdw.topology();
        assert_eq!(
            (t.hw_threads(), t.sockets * t.cores_per_socket, t.memory_gib),
            (usize::from(PAGE_FAULT1_MACHINE.cpus), 44, Some(503)),
            "\"44-core Xeon E5-2699 v4 with 503G memory\""
        );
        assert_eq!(PAGE_FAULT1.at(44, false), Some(13_446_153));
        assert_eq!(PAGE_FAULT1.at(1, true), Some(625_509));
        assert_eq!(PAGE_FAULT1.at(2, true), None);
        let ex = usermm::vtime::Profile::builtin(PARALLEL_FREE_MACHINE.profile).unwrap();
        assert_eq!(
            (ex.topology().hw_threads(), ex.topology().nodes),
            (usize::from(PARALLEL_FREE_MACHINE.cpus), 4)
        );
    }

    #[test]
    fn derived_figures_match_what_the_seeds_state() {
        let pf = PARALLEL_FREE;
        assert_eq!(pf.best(), (8, 4.77));
        assert_eq!(format!("{:.2}", pf.best_speedup()), "2.26");
        assert_eq!(format!("{:.2}", pf.speedup_of(2).unwrap()), "1.91");
        assert_eq!(pf.time_of(3), None);
        let hz = HUGE_ZERO;
        assert_eq!(hz.faults_per_mm(), 51_200);
        assert_eq!(hz.faults(), 3_686_400);
        assert_eq!(hz.ops_per_mm_vanilla(), 102_400);
        let m = MUNMAP_DOWNGRADE;
        assert_eq!(m.exclusive_patched_us, 8);
        assert!(m.exclusive_patched_us < m.exclusive_patched_bound_us);
        assert!(m.ftrace[1].contains(&m.unmap_region_us.to_string()));
        assert!(m.ftrace[2].contains(&m.total_us.to_string()));
        let p = PERCPU_DEPOPULATE;
        assert_eq!(format!("{:.2}", p.ratio_after_delete()), "3.55");
        assert_eq!(p.vanilla_plateau(), 1.0);
    }
}
