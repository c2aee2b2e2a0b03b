//! Faults and `MADV_DONTNEED` under a per-VMA lock, without the mmap lock
//! (`vma.per_vma_lock`, Linux 6.4+).
//!
//! Mirrors `mm/memory.c` (`lock_vma_under_rcu`), `arch/x86/mm/fault.c` (the
//! `FAULT_FLAG_VMA_LOCK` attempt at the top of `do_user_addr_fault`) and `mm/madvise.c`
//! (`try_vma_read_lock`, 6.16). The fault side's caller is `handle_mm_fault` (`fault/mod.rs`). The lock itself is [`VmaLock`](crate::sync::VmaLock); the
//! index it is found in is `mm/vma/index.rs`.
//!
//! ```text
//!  lock_vma_under_rcu(addr):
//!    node = index.find(addr)        none                        → VMA_LOCK_ABORT, fall back
//!    not anonymous, or no anon_vma                              → VMA_LOCK_ABORT, fall back
//!    vma_start_read fails (a writer marked it this hold)        → VMA_LOCK_ABORT, fall back
//!    detached (it left the tree after we found it)              → VMA_LOCK_MISS, walk again
//!    → the fault runs with the VMA read-locked                  → VMA_LOCK_SUCCESS
//! ```
//! Falling back means the mmap read lock: a fault in a range munmap is removing waits for
//! munmap's write hold to end and then finds no VMA (`SEGV_MAPERR`), as before; a fault
//! elsewhere never waits for it.
//!
//! # Which VMAs qualify
//! 6.4's rule: anonymous VMAs that already have an anon_vma (the first fault of a VMA, which
//! may take a neighbour's anon_vma, needs the mmap lock). 6.7+ admits more VMAs and makes the
//! fault itself retry under the mmap lock (`VM_FAULT_RETRY`, `VMA_LOCK_RETRY`) when it needs
//! an anon_vma; the engine decides up front instead, so `VMA_LOCK_RETRY` stays 0.
//!
//! # Locks
//! `vm_lock (read) -> PMD lock -> PTE lock`; no mmap lock. The index's lock (`mm_mt`) is
//! dropped before the VMA lock is tried.

use super::vma::{VmFlags, Vma};
use super::Mm;
use crate::cpu::CpuId;
use crate::stats::VmItem;

impl Mm {
    /// `lock_vma_under_rcu` + the work: run `f` on the VMA containing `addr` with only its
    /// read lock held. `None` when the caller must fall back to the mmap lock (per-VMA locks
    /// off, no such VMA, it does not qualify, or a writer has it).
    #[doc(alias = "lock_vma_under_rcu")]
    pub(crate) fn with_vma_read_locked<R>(
        &self,
        cpu: CpuId,
        addr: u64,
        f: impl FnOnce(&Vma) -> R,
    ) -> Option<R> {
        let idx = self.vma_index.as_ref()?;
        let stat = self.machine().vmstat();
        loop {
            let node = idx.find(addr);
            let Some(node) = node.filter(|n| n.vma.is_anonymous() && n.vma.anon_vma() != 0) else {
                stat.inc(cpu, VmItem::VmaLockAbort);
                return None;
            };
            let Some(guard) = node.lock.start_read(idx.mm_lock_seq()) else {
                stat.inc(cpu, VmItem::VmaLockAbort);
                return None;
            };
            if node.lock.is_detached() {
                // The VMA was replaced after we found it: walk again.
                drop(guard);
                stat.inc(cpu, VmItem::VmaLockMiss);
                continue;
            }
            vm_bug_on!(
                !node.vma.contains(addr),
                "index node does not contain the address"
            );
            let r = f(&node.vma);
            drop(guard);
            stat.inc(cpu, VmItem::VmaLockSuccess);
            return Some(r);
        }
    }
}

impl Mm {
    /// `MADV_DONTNEED` of `[start, end)` under the VMA's read lock (6.16's
    /// `try_vma_read_lock`): `Some(())` when the range lies in one qualifying VMA that may be
    /// zapped and was, `None` to fall back to the mmap read lock.
    pub(crate) fn dontneed_vma_locked(&self, cpu: CpuId, start: u64, end: u64) -> Option<()> {
        self.vma_index.as_ref()?;
        let forbidden = VmFlags::VM_LOCKED | VmFlags::VM_PFNMAP | VmFlags::VM_HUGETLB;
        self.with_vma_read_locked(cpu, start, |vma| {
            (end <= vma.end && !vma.flags.intersects(forbidden))
                .then(|| self.zap_page_range(cpu, start, end))
        })
        .flatten()
    }
}
