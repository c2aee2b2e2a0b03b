//! VMAs: the address-space half of `mm_struct` — the sorted set of `vm_area_struct`s and the
//! operations the mmap-family syscalls perform on it.
//!
//! Mirrors `include/linux/mm.h` / `mm_types.h` (`vm_area_struct`, the `VM_*` flags),
//! `mm/vma.c` (`__split_vma`, `split_vma`, `vma_merge_new_range`, `vma_merge_existing_range`,
//! `vma_modify`, `vms_gather_munmap_vmas`), `mm/mmap.c` (`find_vma`, `find_vma_prev`,
//! `__get_unmapped_area`, `vm_unmapped_area`), `arch/x86/kernel/sys_x86_64.c`
//! (`arch_get_unmapped_area[_topdown]`), `mm/huge_memory.c` (`__thp_get_unmapped_area`),
//! `mm/rmap.c` (`anon_vma_prepare`, `find_mergeable_anon_vma`) and `fs/proc/task_mmu.c`
//! (`show_map_vma`). No page tables here: the caller zaps them itself. The tree has no lock of
//! its own: the caller holds the mmap lock (write for every `&mut self` method, read for lookups
//! and `anon_vma_prepare`). Its per-VMA-lock index (`index`) does take locks, under that write
//! hold: each changed VMA's `VmaLock` for write, then the index's own `mm_mt` lock to publish
//! (the order of `lib.rs`).
//!
//! ```text
//!  VmaTree (mm->mm_mt; protected by mmap_lock)        BTreeMap<vm_start, Vma>
//!                                                     + GapTree: largest gap per subtree
//!
//!  0   mmap_min_addr        legacy base (TASK_SIZE/3)            mmap_base        TASK_SIZE
//!  |....|..........[vma][vma]......|...........[vma]..[vma][vma]....|.....[stack]...|
//!                                  bottom-up fallback -->   <-- top-down search
//! ```
//!
//! # Invariants (checked by [`VmaTree::validate`], the analogue of `validate_mm`)
//! 1. Keys equal `vm_start`; every VMA has `start < end`, both page aligned, `end <= TASK_SIZE`.
//! 2. VMAs are disjoint (sorted by construction); `map_count() <= max_map_count + 1`: `do_mmap`
//!    refuses only `map_count > max_map_count` before adding one, so Linux reaches the limit plus
//!    one; every split checks `>=`.
//! 3. The kind agrees with the flags and the file: `SharedAnon` has `VM_SHARED|VM_MAYSHARE` and a
//!    file (its shmem inode), private kinds have no `VM_MAYSHARE`, `Anon` has no file, `DevZero`
//!    has one, `Hugetlb` has `VM_HUGETLB`, `PfnMap` has `VM_PFNMAP`. Shared mappings never get an
//!    `anon_vma`.
//! 4. The gap index (`gap/`) holds exactly the VMAs' ranges and guard starts, and every node's
//!    summary of the gaps below it is right (`rb_subtree_gap`'s invariant).
//!
//! # API in lifecycle pairs
//! - `mmap`: [`VmaTree::get_unmapped_area`] (or [`VmaTree::thp_get_unmapped_area`] for
//!   `/dev/zero`) → the caller checks `map_count` → `VmaTree::insert_or_merge` (merge with a
//!   neighbour, else insert) or the raw `VmaTree::merge_new` + `VmaTree::insert`.
//! - `munmap`: `VmaTree::detach_range` (split at both ends, remove, hand back) → the caller
//!   zaps and frees the returned VMAs. `exit_mmap`: `VmaTree::clear`.
//! - `mprotect` / `madvise` / `mlock`: `VmaTree::vma_modify_flags` per VMA in the range (merge
//!   first, else split — the kernel's order), or `VmaTree::split` + change + `VmaTree::merge_after_change`.
//! - Faults (read lock): [`VmaTree::find_vma`] → [`VmaTree::anon_vma_prepare`] (reuses an
//!   adjacent compatible VMA's anon_vma) or the primitive [`Vma::anon_vma_prepare`].
//! - Observability: [`VmaTree::render_maps`] (`/proc/<pid>/maps`, byte-exact).
//!
//! # Merge rules (`is_mergeable_vma`, `is_mergeable_anon_vma`, `can_vma_merge_{before,after}`)
//! Two VMAs merge only when adjacent, of the same kind and the same file, with flags equal
//! except `VM_SOFTDIRTY`, linear `pgoff` (`prev.pgoff + prev.pages == next.pgoff`), anon_vmas
//! compatible (either is none, or they are equal: an anon_vma is a number, and fork gives the
//! child's VMAs new numbers linked to the parent's, see `mm/fork.rs`), and neither carrying a `VM_SPECIAL` flag. A three-way merge additionally needs
//! prev's and next's anon_vmas compatible with each other; otherwise only prev merges. What this
//! means per kind, all probed on Linux 6.18:
//! - `Anon`: `pgoff = addr >> PAGE_SHIFT` (the caller sets it so), so adjacent mappings merge.
//! - `DevZero`: a file mapping for merging purposes. Adjacent `/dev/zero` mappings of the same
//!   open file with *contiguous offsets* merge (probed: offsets 0 and 0x4000 → one VMA); usemem's
//!   mappings, all at offset 0, do not (probed: 4 × 10 pages → 4 VMAs) — that, not a special
//!   rule, is why usemem's `/dev/zero` mappings stay separate VMAs on Linux while anonymous
//!   ones merge. Two `open()`s are two files: never merged (probed).
//!   [`Vma::new`] gives every `DevZero` VMA the same file, [`DEV_ZERO_FILE`]; use
//!   [`Vma::with_file`] to model separate opens.
//! - `SharedAnon`: each mapping is its own shmem file, so two mappings never merge (probed),
//!   but the pieces of one mapping re-merge after an mprotect round trip (probed).
//! - `Hugetlb`, `PfnMap`: never merge (PfnMap: `VM_PFNMAP` is in `VM_SPECIAL`; hugetlb: see
//!   differences).
//! - anon_vma reuse: a first fault on a VMA adjacent to a compatible one (same file, linear
//!   pgoff, flags differing only in `VM_READ|VM_WRITE|VM_EXEC`) takes the neighbour's anon_vma,
//!   so mprotect-split pieces stay mergeable (probed). Different anon_vmas arise when the
//!   neighbours differed in another flag at fault time (probed with `MADV_NOHUGEPAGE`).
//!
//! # `/proc/<pid>/maps` format (`show_vma_header_prefix` + `show_map_vma`), verified on 6.18
//! `"%08lx-%08lx %c%c%c%c %08llx %02x:%02x %lu "`, then, only when there is a name, spaces up to
//! column 73 (`seq_setwidth(25 + 6 * sizeof(void *) - 1)` + `seq_pad(' ')`, at least one) and the
//! name. A nameless line keeps the single space after the inode and no padding. The permission
//! column ends in `s` for `VM_MAYSHARE`, else `p`. The offset is `pgoff << 12` for file-backed
//! kinds and 0 for anonymous memory. Per kind (the `Anon` line ends in `"0 "`):
//! ```text
//! 310000000000-310000002000 rw-p 00000000 00:00 0
//! 310000100000-310000108000 r--p 00000000 00:06 4                          /dev/zero
//! 310000200000-310000204000 rw-s 00000000 00:01 1024                       /dev/zero (deleted)
//! ```
//! `/dev/zero`'s device and inode are those of the devtmpfs node (00:06 and 4 on the probe host;
//! settable with `VmaTree::set_dev_zero_id`); shared anonymous memory shows shm_mnt's 00:01 and
//! the shmem inode (a global counter on Linux, per tree here, from [`FIRST_SHMEM_INO`]).
//!
//! # Differences from Linux
//! - A `BTreeMap` stands in for the maple tree, and a treap augmented with the largest gap
//!   below each node (`gap/`, the pre-6.1 `rb_subtree_gap`) for its gap metadata: lookups,
//!   changes and the unmapped-area searches are O(log n). `Vma`s are values, so a split copies
//!   one.
//! - `anon_vma` is a number (0 = none); fork links the child's new anon_vma to its parent's
//!   (`mm/fork.rs`) instead of building an `anon_vma_chain` of structures.
//! - File identity is a number ([`Vma::file`]); there are no real files besides the shmem object.
//! - Hugetlb VMAs never merge (Linux merges pieces of one hugetlbfs file when the merge removes
//!   no VMA, because `hugetlb_vm_op_close` forbids removal); their maps name
//!   `/anon_hugepage (deleted)` and device are unverified (no huge pages on the probe host).
//! - `PfnMap` VMAs render without a name (a driver's would show its device file).
//! - The low limit of the searches is `max(PAGE_SIZE, mmap_min_addr)`; no ASLR; no
//!   `MAP_32BIT`/`MAP_ABOVE4G`; no 5-level paging window.
//!
//! # Missing features
//! Mempolicies, userfaultfd contexts, anon VMA names, mseal, `VM_GROWSUP`. (Fork, mremap's
//! and brk's in-place expansion and per-VMA locks exist: `mm/fork.rs`, `mm/mremap.rs`,
//! `mm/mmap/`, `sync/vma_lock.rs`.)

mod area;
mod flags;
mod gap;
mod index;
mod map;
mod maps;
mod merge;
mod remap;
mod tree;
mod unmapped_area;
mod write;

#[cfg(test)]
mod test;

pub(crate) use self::area::PfnMapPages;
pub use self::area::{
    DevIno, Vma, VmaKind, ANON_VMA_FORKED, DEFAULT_MMAP_BASE, DEFAULT_START_BRK, DEV_ZERO_FILE,
    FIRST_SHMEM_INO, HUGETLBFS_DEV, SHMEM_DEV, STACK_GUARD_GAP, TASK_UNMAPPED_BASE,
};
pub use self::flags::VmFlags;
pub use self::index::{VmaIndex, VmaNode};
pub use self::tree::VmaTree;
pub(crate) use self::write::VmaWriteGuard;
