//! Lock and line classes: what the seam's primitives are *of*, named like lockdep's class keys.
//!
//! Every [`SpinLock`](super::SpinLock), [`Mutex`](super::Mutex), [`RwSem`](super::RwSem) and
//! [`PtLock`](super::PtLock) acquisition names a [`LockClass`]; every
//! [`SharedLine`](super::SharedLine) names a [`LineClass`]. A class says how waiters wait
//! (spin: the CPU stays busy; sleep: it goes idle) and gives the name the virtual-time cost
//! profile of a virtual run refers to (see [`vhook`](super::vhook)). Wall mode ignores both;
//! they cost nothing there.
//!
//! The statics below are the engine's classes, one per kind of lock the modelled kernel has,
//! with the kernel's name in the doc. Instances share their class (every zone's `zone.lock` is
//! [`ZONE_LOCK`]), as lockdep's classes do.

/// How a waiter for a lock of a class waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitKind {
    /// Busy-waits (`spinlock_t`, `rwlock_t`): the waiting CPU does no other work.
    Spin,
    /// Sleeps (`struct mutex`, `rw_semaphore`): the waiting CPU is idle.
    Sleep,
}

/// A lock class (lockdep's `lock_class_key`): a name and how its waiters wait.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct LockClass {
    pub name: &'static str,
    pub wait: WaitKind,
}

impl LockClass {
    pub const fn new(name: &'static str, wait: WaitKind) -> Self {
        Self { name, wait }
    }
}

/// A shared-line class: an atomic the modelled kernel shares across CPUs as one hot cache line.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct LineClass {
    pub name: &'static str,
}

impl LineClass {
    pub const fn new(name: &'static str) -> Self {
        Self { name }
    }
}

/// `zone->lock`: the buddy free lists of a zone.
pub static ZONE_LOCK: LockClass = LockClass::new("zone.lock", WaitKind::Spin);
/// `per_cpu_pages.lock` (`pcp->lock`): one CPU's page lists of one zone.
pub static PCP_LOCK: LockClass = LockClass::new("pcp", WaitKind::Spin);
/// `lruvec->lru_lock`: a node's LRU lists.
pub static LRU_LOCK: LockClass = LockClass::new("lru_lock", WaitKind::Spin);
/// The per-CPU LRU-add batch (`cpu_fbatches.lock`, a local lock in the kernel).
pub static LRU_ADD_BATCH: LockClass = LockClass::new("lru_add", WaitKind::Spin);
/// `hugetlb_lock`: the `nr_hugepages` pool.
pub static HUGETLB_LOCK: LockClass = LockClass::new("hugetlb_lock", WaitKind::Spin);
/// `shrinker_rwsem`: the list of registered shrinkers.
pub static SHRINKER_RWSEM: LockClass = LockClass::new("shrinker_rwsem", WaitKind::Sleep);
/// The split PTE-page lock (`ptdesc->ptl`, `pte_lockptr`).
pub static PTL: LockClass = LockClass::new("ptl", WaitKind::Spin);
/// The split PMD lock (`pmd_lockptr`: the ptl of the PMD table page).
pub static PMD_LOCK: LockClass = LockClass::new("pmd_lock", WaitKind::Spin);
/// `mm->page_table_lock`: PGD/PUD entries of one mm.
pub static PAGE_TABLE_LOCK: LockClass = LockClass::new("page_table_lock", WaitKind::Spin);
/// `mm->mmap_lock`.
pub static MMAP_LOCK: LockClass = LockClass::new("mmap_lock", WaitKind::Sleep);
/// The TLB shootdown gate of one CPU (see `mm/mod.rs`, "TLB model"): the IPI acknowledgement
/// a flush waits for, spinning as `smp_call_function_many` does.
pub static TLB_GATE: LockClass = LockClass::new("tlb_gate", WaitKind::Spin);
/// `pcpu_lock`: the percpu allocator's chunk state.
pub static PCPU_LOCK: LockClass = LockClass::new("pcpu_lock", WaitKind::Spin);
/// `pcpu_alloc_mutex`: percpu chunk creation, population and balancing.
pub static PCPU_ALLOC_MUTEX: LockClass = LockClass::new("pcpu_alloc_mutex", WaitKind::Sleep);
/// The page cache of a shmem object (`mapping->i_pages`' xa_lock).
pub static SHMEM_PAGES: LockClass = LockClass::new("shmem_i_pages", WaitKind::Spin);
/// A workqueue's pool state (`pool->lock`, `wq->mutex`): queue, flush sequence, completions.
pub static WORKQUEUE: LockClass = LockClass::new("workqueue", WaitKind::Spin);
/// The exclusive-hold histogram of an mmap lock (instrumentation, a leaf).
pub static MMAP_LOCK_HIST: LockClass = LockClass::new("mmap_lock_hist", WaitKind::Spin);
/// Locks of unit tests and other code outside the modelled kernel.
pub static UNMODELLED: LockClass = LockClass::new("unmodelled", WaitKind::Sleep);

/// The huge zero page's global reference count (`huge_zero_refcount`, seed 002).
pub static HUGE_ZERO_REFCOUNT: LineClass = LineClass::new("huge_zero_refcount");
