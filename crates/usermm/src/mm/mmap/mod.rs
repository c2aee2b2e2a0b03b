//! The address-space system calls: `mmap`, `munmap`, `mprotect`, `madvise`, `mlock`,
//! `munlock`, and the driver-style `remap_pfn_range`.
//!
//! Mirrors `mm/mmap.c` (`do_mmap`, `mmap_region`, `__vm_munmap`, `do_vmi_align_munmap`),
//! `mm/vma.c` (`vms_gather_munmap_vmas`, `vms_complete_munmap_vmas`, `unmap_region`),
//! `mm/mprotect.c` (`do_mprotect_pkey`, `mprotect_fixup`), `mm/madvise.c`
//! (`madvise_walk_vmas`, `madvise_dontneed_free`, `madvise_update_vma`) and `mm/mlock.c`
//! (`apply_vma_lock_flags`, `mlock_fixup`). Every entry point checks its arguments in the
//! kernel's order and returns the kernel's errno (probed on Linux 6.18; the cases are the
//! tests of `tests/address_space.rs` and `tests/address_space_diff_regressions.rs`), including the partial
//! effects of mprotect/madvise/mlock over holes.
//!
//! # munmap in phases (seed 003)
//! ```text
//!  write lock → find and split the VMAs at both ends (map_count: ENOMEM, nothing changed)
//!             → detach them from the tree              ← the point of no return
//!             → downgrade to read   (munmap.downgrade=on, no VM_LOCKED/HUGETLB/PFNMAP)
//!             → zap through the mmu_gather → free page tables between floor and ceiling
//!             → free the detached VMAs → unlock
//! ```
//! Because the VMAs are gone from the tree before the lock is downgraded, a fault racing into
//! the range under the read lock finds no VMA and gets `SEGV_MAPERR` — never the zero page
//! (which a merely-zapped range would give), never a fresh or a stale page.
//!
//! # Differences from Linux
//! `mmap_min_addr` is not enforced for `MAP_FIXED` (the process is taken to have
//! `CAP_SYS_RAWIO`, as root on the host does). No file mappings but `/dev/zero`. No
//! `RLIMIT_AS`/`RLIMIT_MEMLOCK`, no overcommit accounting. `MADV_FREE` keeps the pages (no
//! reclaim runs, so the lazily freed data stays readable, as on an unpressured host).

mod brk;
mod madvise;
mod map;
mod mlock;
mod mprotect;
mod munmap;

pub use self::brk::RLIM_INFINITY;
pub use super::mman::{
    LEGACY_MAP_MASK, MADV_COLD, MADV_DODUMP, MADV_DOFORK, MADV_DONTDUMP, MADV_DONTFORK,
    MADV_DONTNEED, MADV_FREE, MADV_HUGEPAGE, MADV_KEEPONFORK, MADV_MERGEABLE, MADV_NOHUGEPAGE,
    MADV_NORMAL, MADV_PAGEOUT, MADV_POPULATE_READ, MADV_POPULATE_WRITE, MADV_RANDOM, MADV_REMOVE,
    MADV_SEQUENTIAL, MADV_UNMERGEABLE, MADV_WILLNEED, MADV_WIPEONFORK, MAP_ANONYMOUS, MAP_FIXED,
    MAP_FIXED_NOREPLACE, MAP_GROWSDOWN, MAP_HUGETLB, MAP_LOCKED, MAP_NONBLOCK, MAP_NORESERVE,
    MAP_POPULATE, MAP_PRIVATE, MAP_SHARED, MAP_SHARED_VALIDATE, MAP_TYPE, MREMAP_DONTUNMAP,
    MREMAP_FIXED, MREMAP_MAYMOVE, PROT_EXEC, PROT_GROWSDOWN, PROT_GROWSUP, PROT_NONE, PROT_READ,
    PROT_SEM, PROT_WRITE,
};
use super::vma::VmaTree;
pub use crate::policy::MunmapPolicy;

/// Top of the mmap area: where top-down placement starts (`mmap_base` with a 128 MiB stack gap
/// below a fixed, un-randomised stack top).
pub const MMAP_BASE: u64 = 0x7f00_0000_0000;

/// What backs a non-anonymous mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapFile {
    /// No file: valid only with `MAP_ANONYMOUS` (otherwise `EBADF`, a bad descriptor).
    None,
    /// `/dev/zero`, opened read-write (usemem's default backing).
    DevZero,
}

/// What a mapping maps (`do_mmap`'s `file` and `pgoff`): a file, or none for anonymous
/// memory, and the offset in it in pages. The offset places and names a `/dev/zero` mapping;
/// anonymous memory ignores it but for the overflow check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapFileAt {
    pub file: MapFile,
    pub pgoff: u64,
}

impl From<MapFile> for MapFileAt {
    /// `file` from its start.
    fn from(file: MapFile) -> Self {
        MapFileAt { file, pgoff: 0 }
    }
}

/// The floor and ceiling for freeing tables of `[start, end)`: the end of the previous VMA
/// and the start of the next (0 = no limit).
fn floor_ceiling(tree: &VmaTree, start: u64, end: u64) -> (u64, u64) {
    let (prev, _) = tree.find_vma_prev(start);
    let floor = prev.filter(|p| p.end <= start).map_or(0, |p| p.end);
    let ceiling = tree.find_vma(end).map_or(0, |n| n.start);
    (floor, ceiling)
}
