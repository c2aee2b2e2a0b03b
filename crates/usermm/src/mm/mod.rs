//! Address spaces: `mm_struct`, its VMAs, page tables, faults, munmap and exit.
//!
//! Mirrors `include/linux/mm_types.h` (`struct mm_struct`), `kernel/fork.c` (`mm_alloc`,
//! `mmget`, `mmput`, `__mmput`) and `mm/mmap.c` (`exit_mmap`); its `/proc` files are
//! `proc.rs` (`fs/proc/task_mmu.c`), a workload thread's accesses `task.rs`.
//!
//! ```text
//!  Mm ── mmap_lock: MmapLock<VmaTree>   the only way to the VMAs
//!     ├─ pgd ─ PUD ─ PMD ─ PTE pages    lockless walks; writes through pgtable's locked slot
//!     │                                 and table cursor (the split PTL in their type)
//!     ├─ page_table_lock                PGD/PUD entries (deposits: per PMD table, its PMD lock)
//!     ├─ rss per CPU                    MM_FILEPAGES, MM_ANONPAGES, MM_SWAPENTS, MM_SHMEMPAGES
//!     ├─ mm_users / flags               MMF_HUGE_ZERO_PAGE
//!     └─ cpumask + TLB gates            which CPUs may cache translations; shootdown
//! ```
//!
//! A [`Task`] is what a workload thread holds: `(Arc<Mm>, CpuId)`. Its reads and writes walk the
//! page tables like the MMU and fault on demand through [`fault`], each inside its CPU's TLB
//! gate; the TLB model (gates, `flush_tlb`, the single-page ceiling) is `tlb.rs`.
//!
//! # Invariants (checked by [`Mm::validate`])
//! 1. VMAs sorted, non-overlapping, page aligned; `map_count ≤ max_map_count`.
//! 2. Every mapped leaf lies inside a VMA; every normal page it maps is allocated, and its
//!    mapcount equals the number of leaves mapping it in every mm of its fork family.
//! 3. `MM_ANONPAGES` = anonymous pages mapped (512 per THP); `MM_SHMEMPAGES` likewise.
//! 4. Every table page lies in the reach of some VMA (nothing left behind by munmap); after
//!    exit, none at all; no table page belongs to two mms.
//!
//! # Locks
//! `mmap_lock -> page_table_lock -> PMD lock -> PTE lock -> (pcp lock -> zone.lock)`; the TLB
//! gates are taken alone (a flush never holds a PTL while waiting on them... except the forced
//! flush under a PTE lock, which is safe because accesses never take a PTL).
//!
//! # Fork families
//! [`Mm::fork`] (`fork.rs`) makes a child that shares the parent's anonymous pages
//! copy-on-write; mapcounts then span mms (`rmap.rs`), so [`Mm::validate`] (`validate.rs`)
//! checks them over the whole family of mms forked from one first mm.
//!
//! # Differences from Linux
//! No swap, no file mappings besides `/dev/zero`, shared anonymous memory is a minimal shmem
//! object, no rmap trees (mapcounts only: nothing walks from a page to its mappers).

pub mod fault;
pub mod fork;
pub mod huge_memory;
mod lock_vma;
#[cfg(loom)]
#[doc(hidden)]
pub mod loom_fault_zap;
pub mod memory;
pub mod mman;
pub mod mmap;
pub mod mmu_gather;
pub mod mremap;
mod proc;
pub(crate) mod rmap;
pub mod shmem;
mod task;
mod tlb;
mod validate;
mod vm_fault;
pub mod vma;

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use serde::Serialize;

pub use self::fault::{Fault, SegvCode};
pub use self::proc::SmapsRollup;
pub use self::task::Task;
pub(crate) use self::vm_fault::{VmFault, VmFaultError, OOM};
use self::vma::VmaTree;
use crate::addr::Pfn;
use crate::cpu::{CpuId, PerCpu};
use crate::machine::Machine;
use crate::sync::class::{MMLIST_LOCK, PAGE_TABLE_LOCK};
use crate::sync::mmap_lock::{MmapLock, MmapLockInfo, MmapReadGuard};
use crate::sync::{SpinLock, TlbGate};

/// `NR_MM_COUNTERS`: the rss counter indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum RssItem {
    FilePages = 0,
    AnonPages = 1,
    SwapEnts = 2,
    ShmemPages = 3,
}

pub use crate::huge_zero_page::MMF_HUGE_ZERO_PAGE;

/// What a `munmap` or exit did, for the experiments.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct UnmapStats {
    pub total_ns: u64,
    /// Time the mmap lock was held for writing.
    pub exclusive_ns: u64,
    /// Time spent zapping and freeing page tables under the read lock after a downgrade.
    pub read_ns: u64,
    pub downgraded: bool,
    pub pages_zapped: u64,
    pub tlb_flushes: u64,
}

/// One address space (`struct mm_struct`).
pub struct Mm {
    machine: Arc<Machine>,
    id: u64,
    pub(crate) mmap_lock: MmapLock<VmaTree>,
    pgd: Pfn,
    /// `mm->page_table_lock`: PGD and PUD entries. (Tables deposited under huge PMDs are on a
    /// list of their PMD table page, under its PMD lock: see `huge_memory::deposit`.)
    pub(crate) page_table_lock: SpinLock<()>,
    /// A loom atomic under loom (`sync::primitive`): the fault/zap race.
    rss: PerCpu<[crate::sync::primitive::atomic::AtomicI64; 4]>,
    /// `mm_pgtables_bytes` in pages: table pages of this mm, deposits and PGD included.
    pub(crate) nr_tables: AtomicI64,
    pub(crate) flags: AtomicU64,
    mm_users: AtomicI32,
    exited: AtomicBool,
    /// `mm_cpumask`: CPUs that have run this mm (and may cache its translations).
    cpumask: Box<[AtomicU64]>,
    /// The per-CPU TLB gates (`tlb.rs`).
    tlb_gate: PerCpu<TlbGate>,
    pub(crate) tlb_flushes: AtomicU64,
    pub(crate) anon_vma_ids: AtomicU64,
    hiwater_rss: AtomicI64,
    /// See [`Mm::set_munmap_zap_hook`].
    zap_hook: OnceLock<ZapHook>,
    /// Every mm forked from the same first mm (`mm_alloc`), this one included: the mms that
    /// may share pages with it. `Mm::validate` counts mappings across them.
    pub(crate) family: Arc<Family>,
    /// `rlimit(RLIMIT_DATA)` in bytes, as `brk` checks it.
    pub(crate) rlimit_data: AtomicU64,
    /// The VMA index faults read without the mmap lock, with per-VMA locks on
    /// (`vma.per_vma_lock`; see `lock_vma.rs`).
    pub(crate) vma_index: Option<Arc<vma::VmaIndex>>,
}

/// The mms of one fork family, as weak references (an exited, dropped mm simply fails to
/// upgrade). Only `validate` reads it; `fork` adds to it.
pub(crate) type Family = SpinLock<Vec<std::sync::Weak<Mm>>>;

/// A test's observer of munmap's zap window: `(mm, downgraded)`.
type ZapHook = Box<dyn Fn(&Mm, bool) + Send + Sync>;

impl std::fmt::Debug for Mm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mm")
            .field("id", &self.id)
            .field("pgd", &self.pgd)
            .finish_non_exhaustive()
    }
}

/// Written here rather than in `machine.rs` so that the machine does not import the mm (the
/// mm is built on the machine, not the other way round).
impl Machine {
    /// A new, empty address space (`mm_alloc`).
    pub fn new_mm(self: &Arc<Self>, cpu: CpuId) -> Result<Arc<Mm>, crate::error::Errno> {
        Mm::new(self, cpu)
    }
}

impl Mm {
    /// `mm_alloc` + `mm_init` + `pgd_alloc`: an empty address space with `mm_users` = 1.
    pub fn new(machine: &Arc<Machine>, cpu: CpuId) -> Result<Arc<Mm>, crate::error::Errno> {
        let family = Arc::new(SpinLock::new(&MMLIST_LOCK, Vec::new()));
        Mm::new_in_family(machine, cpu, family)
    }

    /// [`Mm::new`], joining an existing fork family (`fork`).
    pub(crate) fn new_in_family(
        machine: &Arc<Machine>,
        cpu: CpuId,
        family: Arc<Family>,
    ) -> Result<Arc<Mm>, crate::error::Errno> {
        let phys = machine.phys();
        let pgd = crate::pgtable::alloc_table(phys, cpu)?;
        let nr = machine.cpus().nr_possible();
        let id = machine.next_mm_id();
        let mmap_lock = MmapLock::with_clock(
            VmaTree::new(mmap::MMAP_BASE),
            machine.lockstat_clock().sibling(),
        );
        let vma_index = machine.per_vma_lock().then(|| {
            let idx = Arc::new(vma::VmaIndex::new(Arc::clone(mmap_lock.mm_lock_seq())));
            mmap_lock.write().set_index(Arc::clone(&idx));
            idx
        });
        let mm = Arc::new(Mm {
            machine: Arc::clone(machine),
            id,
            mmap_lock,
            pgd,
            page_table_lock: SpinLock::new(&PAGE_TABLE_LOCK, ()),
            rss: PerCpu::new(nr, |_| Default::default()),
            nr_tables: AtomicI64::new(1),
            flags: AtomicU64::new(0),
            mm_users: AtomicI32::new(1),
            exited: AtomicBool::new(false),
            cpumask: (0..nr.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            tlb_gate: PerCpu::new(nr, |_| TlbGate::new()),
            tlb_flushes: AtomicU64::new(0),
            anon_vma_ids: AtomicU64::new(1),
            hiwater_rss: AtomicI64::new(0),
            zap_hook: OnceLock::new(),
            family,
            rlimit_data: AtomicU64::new(u64::MAX),
            vma_index,
        });
        {
            let mut f = mm.family.lock();
            f.retain(|w| w.strong_count() > 0);
            f.push(Arc::downgrade(&mm));
        }
        Ok(mm)
    }

    pub fn machine(&self) -> &Arc<Machine> {
        &self.machine
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    #[inline]
    pub(crate) fn pgd(&self) -> Pfn {
        self.pgd
    }

    /// For tests: run `hook(mm, downgraded)` inside every munmap of this mm that detached a
    /// VMA, after the detach (and the downgrade, when there is one) and before the zap — with the
    /// mmap lock held for read if `downgraded`, for write if not. It lets a test act inside the
    /// zap window, event-driven, where it would otherwise have to guess it with sleeps. Set once:
    /// returns false (and drops `hook`) if a hook is already set. Costs munmap one atomic load.
    #[doc(hidden)]
    pub fn set_munmap_zap_hook(&self, hook: impl Fn(&Mm, bool) + Send + Sync + 'static) -> bool {
        self.zap_hook.set(Box::new(hook)).is_ok()
    }

    /// Run the zap-window hook, if a test set one.
    #[inline]
    pub(crate) fn zap_window(&self, downgraded: bool) {
        if let Some(h) = self.zap_hook.get() {
            h(self, downgraded);
        }
    }

    /// The mmap lock's figures and state, read-only (lock_stat, exclusive holds): for the
    /// experiments.
    pub fn mmap_lock_info(&self) -> MmapLockInfo<'_, VmaTree> {
        self.mmap_lock.info()
    }

    /// `mmap_read_lock`: the VMAs, read-only, for lookups (`find_vma`, maps). Faults and
    /// other readers proceed meanwhile; a writer waits until the guard is dropped.
    pub fn mmap_read_lock(&self) -> MmapReadGuard<'_, VmaTree> {
        self.mmap_lock.read()
    }

    // ----- rss ---------------------------------------------------------------------------

    #[doc(alias = "add_mm_counter")]
    #[inline]
    pub(crate) fn add_rss(&self, cpu: CpuId, item: RssItem, delta: i64) {
        if delta != 0 {
            self.rss[cpu][item as usize].fetch_add(delta, Relaxed);
        }
    }

    /// `get_mm_counter`: pages.
    pub fn rss(&self, item: RssItem) -> i64 {
        self.rss
            .iter()
            .map(|c| c[item as usize].load(Relaxed))
            .sum()
    }

    /// `get_mm_rss`: resident pages of every kind.
    pub fn rss_total(&self) -> i64 {
        self.rss(RssItem::FilePages) + self.rss(RssItem::AnonPages) + self.rss(RssItem::ShmemPages)
    }

    /// `update_hiwater_rss`.
    pub(crate) fn update_hiwater_rss(&self) {
        self.hiwater_rss.fetch_max(self.rss_total(), Relaxed);
    }

    pub fn hiwater_rss(&self) -> i64 {
        self.hiwater_rss.load(Relaxed).max(self.rss_total())
    }

    pub fn nr_page_tables(&self) -> i64 {
        self.nr_tables.load(Relaxed)
    }

    pub fn has_flag(&self, f: u64) -> bool {
        self.flags.load(Relaxed) & f != 0
    }

    pub fn tlb_flushes(&self) -> u64 {
        self.tlb_flushes.load(Relaxed)
    }

    pub fn map_count(&self) -> usize {
        self.mmap_lock.read().map_count()
    }

    // ----- lifetime ----------------------------------------------------------------------

    /// `mmget`: one more user of the address space.
    pub fn mmget(&self) {
        self.mm_users.fetch_add(1, Relaxed);
    }

    /// `mmput`: drop a user; the last one tears the address space down (`__mmput`:
    /// `exit_mmap`, then the huge zero page reference). Returns the teardown's figures when
    /// this call did it.
    pub fn mmput(&self, cpu: CpuId) -> Option<UnmapStats> {
        let old = self.mm_users.fetch_sub(1, Relaxed);
        vm_bug_on!(old <= 0, "mmput below zero");
        (old == 1).then(|| self.exit(cpu))
    }

    pub fn users(&self) -> i32 {
        self.mm_users.load(Relaxed)
    }

    pub fn is_exited(&self) -> bool {
        self.exited.load(Relaxed)
    }

    fn exit(&self, cpu: CpuId) -> UnmapStats {
        if self.exited.swap(true, Relaxed) {
            return UnmapStats::default();
        }
        let st = memory::exit_mmap(self, cpu);
        self.machine.huge_zero().mm_put(&self.flags, cpu);
        // pgd_free
        let phys = self.machine.phys();
        crate::pgtable::free_table(phys, cpu, self.pgd);
        self.nr_tables.fetch_sub(1, Relaxed);
        st
    }
}

/// The table allocators' view of an mm (`pgtable::pmd_alloc`, `pgtable::pte_alloc`).
impl crate::pgtable::MmTables for Mm {
    #[inline]
    fn phys(&self) -> &crate::page_alloc::PhysMem {
        self.machine.phys()
    }
    #[inline]
    fn pgd_table(&self) -> Pfn {
        self.pgd
    }
    #[inline]
    fn page_table_lock(&self) -> crate::sync::SpinLockGuard<'_, ()> {
        self.page_table_lock.lock()
    }
    #[inline]
    fn inc_nr_tables(&self) {
        self.nr_tables.fetch_add(1, Relaxed);
    }
}

impl Drop for Mm {
    /// `mmdrop` of the last reference: an mm never put by its users is torn down here.
    fn drop(&mut self) {
        if !self.exited.load(Relaxed) {
            self.exit(CpuId(0));
        }
    }
}
