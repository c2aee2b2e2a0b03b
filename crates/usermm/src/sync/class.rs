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

pub use crate::vtime::{LineClass, LockClass, WaitKind};

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
/// The TLB shootdown gate of one CPU (see `sync/tlb_gate.rs` and `mm/tlb.rs`): the IPI acknowledgement
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
/// A user-space synchronisation object on a futex: a workload's `pthread_barrier`, mutex or
/// condition variable ([`Barrier`](super::Barrier)).
pub static FUTEX: LockClass = LockClass::new("futex", WaitKind::Sleep);
/// `mmlist_lock`: the list of mms of one fork family (the kernel's list of every mm; here
/// only `fork` and `validate` take it).
pub static MMLIST_LOCK: LockClass = LockClass::new("mmlist_lock", WaitKind::Spin);
/// The VMA index readers walk without the mmap lock (`mm->mm_mt` under RCU in the kernel;
/// see `mm/vma/index.rs`).
pub static MM_MT: LockClass = LockClass::new("mm_mt", WaitKind::Spin);
/// The per-VMA lock (`vma->vm_lock`, 6.4+): readers are faults, writers VMA changes.
pub static VMA_LOCK: LockClass = LockClass::new("vm_lock", WaitKind::Sleep);
/// Locks of unit tests and other code outside the modelled kernel.
pub static UNMODELLED: LockClass = LockClass::new("unmodelled", WaitKind::Sleep);

/// Every lock class above: a virtual run's profile must price each of them
/// (`vtime::ENGINE_LOCK_CLASSES` lists their names; a test checks the two agree).
pub static ALL_LOCK_CLASSES: &[&LockClass] = &[
    &ZONE_LOCK,
    &PCP_LOCK,
    &LRU_LOCK,
    &LRU_ADD_BATCH,
    &HUGETLB_LOCK,
    &SHRINKER_RWSEM,
    &PTL,
    &PMD_LOCK,
    &PAGE_TABLE_LOCK,
    &MMAP_LOCK,
    &TLB_GATE,
    &PCPU_LOCK,
    &PCPU_ALLOC_MUTEX,
    &SHMEM_PAGES,
    &WORKQUEUE,
    &MMAP_LOCK_HIST,
    &FUTEX,
    &MMLIST_LOCK,
    &MM_MT,
    &VMA_LOCK,
    &UNMODELLED,
];

/// The huge zero page's global reference count (`huge_zero_refcount`, seed 002): the line,
/// and the time of its `get_huge_zero_page` RMWs.
pub static HUGE_ZERO_REFCOUNT: LineClass = LineClass::new("huge_zero_refcount");

/// The same line's `put_huge_zero_page` RMWs, accounted apart ([`SharedLine::fetch_sub_as`]):
/// in the seed's kernel (v4.8) `put_huge_zero_page` is a function of its own (called from
/// `release_pages` and the zap), so a profile lists its cycles on a line of their own, not
/// under `get_huge_zero_page`, whose share seed 002 published.
///
/// [`SharedLine::fetch_sub_as`]: super::shared_line::SharedLine::fetch_sub_as
pub static HUGE_ZERO_REFCOUNT_PUT: LineClass = LineClass::new("huge_zero_refcount.put");

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn every_engine_class_is_one_the_profiles_must_price() {
        let names: Vec<&str> = ALL_LOCK_CLASSES.iter().map(|c| c.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "two classes share a name");
        let mut priced = crate::vtime::ENGINE_LOCK_CLASSES.to_vec();
        priced.sort_unstable();
        assert_eq!(sorted, priced);
    }
}
