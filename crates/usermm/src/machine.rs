//! `Machine`: one emulated box — CPUs, nodes, physical memory, and the machine-wide services
//! built on them. Everything hangs off it; there is no process-global state, so two machines
//! (vanilla and patched) run side by side in one process.
//!
//! Construction validates the [`MachineConfig`] and resolves every policy into the object that
//! carries it; the config is kept only to be printed in reports.
//!
//! # Two clocks (docs/two-clocks.md)
//! A wall machine runs on host threads and host time. A virtual machine (`time.mode=virtual`)
//! resolves its cost profile once, here, and runs workloads through [`Machine::run`]: each
//! call is one run of a [`vtime::Runtime`] for the machine's CPUs and nodes on the profile's
//! topology, on the calling host thread. Its workqueues' workers are contexts of the run,
//! started by the run's first `queue_work` and ended with it; the run's [`vtime::Report`]
//! (per-CPU busy/spin/idle, per-context CPU time, lock_stat per class, shared lines) is kept
//! for [`Machine::last_run_report`].

use std::sync::Arc;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::addr::Order;
use crate::addr::{Pfn, PAGE_SIZE};
use crate::config::{ConfigError, MachineConfig, ThpMode, TimeMode};
use crate::cpu::{CpuId, Cpus};
use crate::huge_zero_page::HugeZeroPage;
use crate::page_alloc::{meta::PG_RESERVED, Gfp, PhysMem};
use crate::pcpu::PcpuAllocator;
use crate::policy::{GatherPolicy, MunmapPolicy};
use crate::stats::{MemInfo, VmItem, VmStat, VmStatSnapshot};
use crate::sync::class::UNMODELLED;
use crate::sync::workqueue::{UnboundPools, Workers};
use crate::sync::Mutex;
use crate::vtime::{self, Profile};

/// Why a machine could not be built.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The host refused the reservation.
    #[error("host memory reservation failed: {0}")]
    Host(std::io::Error),
    /// A virtual run's clock reached the end of virtual time (`u64::MAX` ps, about 213 days,
    /// where the scheduler's clocks stop): what it would report is not a time.
    #[error(
        "the virtual clock reached its end (2^64 ps, about 213 days of modelled time) \
         on profile {profile}: its costs times its counts are too large to be a time, \
         so the run reports nothing"
    )]
    ClockEnd { profile: String },
}

/// One emulated machine.
#[derive(Debug)]
pub struct Machine {
    config: MachineConfig,
    cpus: Cpus,
    stat: Arc<VmStat>,
    phys: Arc<PhysMem>,
    /// The 4 KiB zero page (`ZERO_PAGE(0)`), reserved at boot.
    zero_pfn: Pfn,
    huge_zero: Arc<HugeZeroPage>,
    gather: GatherPolicy,
    munmap: MunmapPolicy,
    /// `vma.per_vma_lock`, resolved at boot.
    per_vma_lock: bool,
    tlb_flush_cost_ns: u64,
    /// `transparent_hugepage/enabled`, read by every anonymous fault.
    thp: ThpMode,
    /// `vm.max_map_count`, read by every VMA split.
    max_map_count: usize,
    next_mm_id: AtomicU64,
    /// The clock every mm's mmap lock times its read holds on (a sibling of it): the host's
    /// TSC (a wall machine with an invariant one) or `now` (a virtual machine), resolved once,
    /// at boot.
    lockstat_clock: crate::sync::clock::LockstatClock,
    /// The percpu allocator (`mm/percpu.c`): first and reserved chunks built at boot.
    pcpu: Arc<PcpuAllocator>,
    /// The cost profile of a virtual machine; `None` on the wall clock.
    profile: Option<Arc<Profile>>,
    /// The report of the last virtual run ([`Machine::run`]).
    last_report: Mutex<Option<vtime::Report>>,
}

impl Machine {
    /// Build a machine. Fails on a configuration that cannot work (with a message naming the
    /// key), or when the host cannot reserve the address space.
    pub fn new(config: MachineConfig) -> Result<Arc<Machine>, MachineError> {
        config.validate()?;
        let profile = config.resolve_profile()?;
        if cfg!(feature = "no_vtime_seam") && config.time.mode == TimeMode::Virtual {
            return Err(MachineError::Config(ConfigError(
                "time.mode=virtual: this build has no virtual-time seam (feature no_vtime_seam)"
                    .into(),
            )));
        }
        let workers = match config.time.mode {
            TimeMode::Wall => Workers::Host,
            TimeMode::Virtual => Workers::Virtual,
        };
        // On a profile's machine, nodes beyond its own are emulated as `numa=fake=` does
        // (`cpu.rs`, "NUMA emulation"); without a profile every node is a node.
        let cpus = match &profile {
            Some(p) => Cpus::emulated(config.cpus, config.nodes, p.topology().nodes as u16),
            None => Cpus::new(config.cpus, config.nodes),
        };
        let stat = Arc::new(VmStat::new(cpus.nr_possible()));
        let phys = Arc::new(
            PhysMem::new(&config, cpus.clone(), Arc::clone(&stat)).map_err(MachineError::Host)?,
        );
        let zero_pfn = phys
            .alloc_pages_node(CpuId(0), Order(0), Gfp::ZERO)
            .map_err(|_| MachineError::Config(ConfigError("no memory for the zero page".into())))?;
        phys.meta(zero_pfn).set(PG_RESERVED);
        let huge_zero = Arc::new(HugeZeroPage::new(
            Arc::clone(&phys),
            config.huge_zero.per_mm_ref,
            config.huge_zero.write_fault,
        ));
        let weak: std::sync::Weak<dyn crate::page_alloc::Shrinker> =
            Arc::downgrade(&(Arc::clone(&huge_zero) as Arc<dyn crate::page_alloc::Shrinker>));
        phys.register_shrinker(weak);
        let worker_cpus = cpus.all().collect();
        // In virtual time the free workqueue's workers run on the queuer's node, on the
        // profile's cores and SMT threads (v4.11's per-node unbound pools; sync::workqueue).
        let pools = match &profile {
            Some(p) => {
                let pl = vtime::Placement::new(p, cpus.nr_possible(), cpus.nr_nodes())
                    .map_err(|e| MachineError::Config(ConfigError(e.to_string())))?;
                let n = pl.nr_cpus();
                Some(UnboundPools::new(
                    (0..n).map(|c| pl.node_of(c) as u16).collect(),
                    (0..n).map(|c| pl.core_of(c) as u32).collect(),
                    (0..n).map(|c| pl.thread_of(c) as u8).collect(),
                ))
            }
            None => None,
        };
        let gather = GatherPolicy::new(&config.gather, &config.free, worker_cpus, workers, pools);
        let munmap = MunmapPolicy {
            downgrade: config.munmap.downgrade,
            min_bytes: config.munmap.downgrade_min_bytes,
            stack_veto: config.munmap.stack_veto,
        };
        let tlb_flush_cost_ns = config.tlb.flush_cost_ns;
        let per_vma_lock = config.vma.per_vma_lock;
        let (thp, max_map_count) = (config.thp, config.max_map_count as usize);
        let pcpu = Arc::new(
            PcpuAllocator::with_workers(&config.pcpu, cpus.clone(), Arc::clone(&phys), workers)
                .map_err(|e| {
                    MachineError::Config(ConfigError(format!("percpu first chunk: {e}")))
                })?,
        );
        let lockstat_clock =
            crate::sync::clock::LockstatClock::for_machine(config.time.mode == TimeMode::Virtual);
        Ok(Arc::new(Machine {
            config,
            cpus,
            stat,
            phys,
            zero_pfn,
            huge_zero,
            gather,
            munmap,
            per_vma_lock,
            tlb_flush_cost_ns,
            thp,
            max_map_count,
            next_mm_id: AtomicU64::new(1),
            lockstat_clock,
            pcpu,
            profile,
            last_report: Mutex::new(&UNMODELLED, None),
        }))
    }

    /// Run `f` as the machine's code on `cpu`. Wall: call `f`. Virtual: run `f` as the first
    /// context of a new run of the machine's runtime on this host thread, and return when
    /// every context of the run has finished (the threads `f` started through
    /// [`crate::sync::thread`], the workqueues' workers); the run's report is then
    /// [`Machine::last_run_report`]. Inside a run already, `f` is just called.
    ///
    /// A virtual run whose clock reached the end of virtual time fails with
    /// [`MachineError::ClockEnd`] (its result is dropped), so that no caller can read a
    /// figure from a clock that stopped.
    ///
    /// # Panics
    /// With the payload of a context's panic, or when the run deadlocks (the message names the
    /// blocked contexts).
    pub fn run<T>(&self, cpu: CpuId, f: impl FnOnce() -> T) -> Result<T, MachineError> {
        let Some(profile) = &self.profile else {
            return Ok(f());
        };
        if vtime::in_run() {
            return Ok(f());
        }
        let rt = vtime::Runtime::new(
            Arc::clone(profile),
            self.cpus.nr_possible(),
            self.cpus.nr_nodes(),
        )
        .expect("the profile was checked against the CPUs and nodes at construction");
        rt.set_machine_memmap(Arc::clone(&self.phys) as _, self.phys.frames_per_node());
        rt.set_seed(self.config.time.seed);
        let r = rt.run(cpu.index(), || {
            let r = f();
            // Workers exit once they have drained their queues; the run waits for them.
            if let Some(wq) = self.gather.workqueue() {
                wq.end_run();
            }
            self.pcpu.end_run();
            r
        });
        *self.last_report.lock() = Some(rt.report());
        if rt.clock_ended() {
            return Err(MachineError::ClockEnd {
                profile: profile.name().to_string(),
            });
        }
        Ok(r)
    }

    /// The clock this machine runs on.
    pub fn time_mode(&self) -> TimeMode {
        self.config.time.mode
    }

    /// The cost profile of a virtual machine (`None` on the wall clock).
    pub fn profile(&self) -> Option<&Arc<Profile>> {
        self.profile.as_ref()
    }

    /// `measured (this host)` or `modelled (profile NAME)`: the label of every time this
    /// machine reports.
    pub fn time_label(&self) -> String {
        match &self.profile {
            None => "measured (this host)".into(),
            Some(p) => format!("modelled (profile {})", p.name()),
        }
    }

    /// The report of the last [`Machine::run`] of a virtual machine.
    pub fn last_run_report(&self) -> Option<vtime::Report> {
        self.last_report.lock().clone()
    }

    pub fn config(&self) -> &MachineConfig {
        &self.config
    }

    pub fn cpus(&self) -> &Cpus {
        &self.cpus
    }

    /// The CPU numbered `n`, or `None` beyond `nr_possible_cpus`.
    pub fn cpu(&self, n: usize) -> Option<CpuId> {
        self.cpus.get(n)
    }

    pub fn phys(&self) -> &PhysMem {
        &self.phys
    }

    /// A shared handle on physical memory, for services that outlive a borrow (async work).
    pub fn phys_arc(&self) -> Arc<PhysMem> {
        Arc::clone(&self.phys)
    }

    pub fn vmstat(&self) -> &VmStat {
        &self.stat
    }

    pub fn vmstat_snapshot(&self) -> VmStatSnapshot {
        self.stat.snapshot()
    }

    #[doc(alias = "ZERO_PAGE")]
    pub fn zero_pfn(&self) -> Pfn {
        self.zero_pfn
    }

    /// The percpu allocator.
    pub fn pcpu(&self) -> &Arc<PcpuAllocator> {
        &self.pcpu
    }

    pub fn huge_zero(&self) -> &HugeZeroPage {
        &self.huge_zero
    }

    /// The huge zero page, shared (a parallel free's worker job holds it beside `phys_arc`).
    pub(crate) fn huge_zero_arc(&self) -> Arc<HugeZeroPage> {
        Arc::clone(&self.huge_zero)
    }

    pub fn gather_policy(&self) -> &GatherPolicy {
        &self.gather
    }

    /// Do faults try per-VMA locks (`vma.per_vma_lock`)?
    pub fn per_vma_lock(&self) -> bool {
        self.per_vma_lock
    }

    pub fn munmap_policy(&self) -> MunmapPolicy {
        self.munmap
    }

    pub(crate) fn tlb_flush_cost_ns(&self) -> u64 {
        self.tlb_flush_cost_ns
    }

    /// The THP mode, resolved at construction.
    pub(crate) fn thp(&self) -> ThpMode {
        self.thp
    }

    /// `vm.max_map_count`, resolved at construction.
    pub(crate) fn max_map_count(&self) -> usize {
        self.max_map_count
    }

    pub(crate) fn next_mm_id(&self) -> u64 {
        self.next_mm_id.fetch_add(1, Relaxed)
    }

    /// The clock a new mm's mmap lock is a [`LockstatClock::sibling`] of.
    ///
    /// [`LockstatClock::sibling`]: crate::sync::clock::LockstatClock::sibling
    pub(crate) fn lockstat_clock(&self) -> &crate::sync::clock::LockstatClock {
        &self.lockstat_clock
    }

    /// `echo 3 > /proc/sys/vm/drop_caches`: run the shrinkers (the huge zero page's) and
    /// drain the per-CPU lists. Returns the pages the shrinkers freed.
    pub fn drop_caches(&self, cpu: CpuId) -> u64 {
        self.stat.inc(cpu, VmItem::DropPagecache);
        let n = self.phys.shrink_all(cpu);
        self.phys.lru_add_drain_all();
        self.phys.drain_all_pages();
        n
    }

    /// `/proc/meminfo` figures.
    pub fn meminfo(&self) -> MemInfo {
        let kb = |pages: i64| (pages.max(0) as u64) * (PAGE_SIZE / 1024);
        let free = self.phys.nr_free_pages() as i64;
        let huge_kb = 2048;
        MemInfo {
            mem_total: kb((self.phys.nr_frames()) as i64),
            mem_free: kb(free),
            mem_available: kb(free + self.phys.nr_pcp_pages() as i64),
            active_anon: 0,
            inactive_anon: kb(self.stat.get(VmItem::NrInactiveAnon)),
            unevictable: kb(self.stat.get(VmItem::NrUnevictable)),
            mlocked: kb(self.stat.get(VmItem::NrMlock)),
            anon_pages: kb(self.stat.get(VmItem::NrAnonPages)),
            page_tables: kb(self.stat.get(VmItem::NrPageTablePages)),
            percpu: self.pcpu.percpu_kb(),
            anon_huge_pages: kb(self.stat.get(VmItem::NrAnonTransparentHugepages) * 512),
            huge_pages_total: self.phys.hugetlb_total(),
            huge_pages_free: self.phys.hugetlb_free(),
            hugepagesize: huge_kb,
            hugetlb: self.phys.hugetlb_total() * huge_kb,
        }
    }

    /// Every machine-wide invariant (physical memory for now).
    pub fn validate(&self) -> Result<(), String> {
        self.pcpu.validate()?;
        self.phys.validate().map(|_| ())
    }
}
