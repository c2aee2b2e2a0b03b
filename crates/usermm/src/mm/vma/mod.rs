//! VMAs: the address-space half of `mm_struct` — the sorted set of `vm_area_struct`s and the
//! operations the mmap-family syscalls perform on it.
//!
//! Mirrors `include/linux/mm.h` / `mm_types.h` (`vm_area_struct`, the `VM_*` flags),
//! `mm/vma.c` (`__split_vma`, `split_vma`, `vma_merge_new_range`, `vma_merge_existing_range`,
//! `vma_modify`, `vms_gather_munmap_vmas`), `mm/mmap.c` (`find_vma`, `find_vma_prev`,
//! `__get_unmapped_area`, `vm_unmapped_area`), `arch/x86/kernel/sys_x86_64.c`
//! (`arch_get_unmapped_area[_topdown]`), `mm/huge_memory.c` (`__thp_get_unmapped_area`),
//! `mm/rmap.c` (`anon_vma_prepare`, `find_mergeable_anon_vma`) and `fs/proc/task_mmu.c`
//! (`show_map_vma`). This is a pure data structure: no page tables, no locks. The caller holds
//! the mmap lock (write for every `&mut self` method, read for lookups and `anon_vma_prepare`)
//! and zaps page tables itself.
//!
//! ```text
//!  VmaTree (mm->mm_mt; protected by mmap_lock)        BTreeMap<vm_start, Vma>
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
//!
//! # API in lifecycle pairs
//! - `mmap`: [`VmaTree::get_unmapped_area`] (or [`VmaTree::thp_get_unmapped_area`] for
//!   `/dev/zero`) → the caller checks `map_count` → [`VmaTree::insert_or_merge`] (merge with a
//!   neighbour, else insert) or the raw [`VmaTree::merge_new`] + [`VmaTree::insert`].
//! - `munmap`: [`VmaTree::detach_range`] (split at both ends, remove, hand back) → the caller
//!   zaps and frees the returned VMAs. `exit_mmap`: [`VmaTree::clear`].
//! - `mprotect` / `madvise` / `mlock`: [`VmaTree::vma_modify_flags`] per VMA in the range (merge
//!   first, else split — the kernel's order), or [`VmaTree::split`] + change + [`VmaTree::merge_after_change`].
//! - Faults (read lock): [`VmaTree::find_vma`] → [`VmaTree::anon_vma_prepare`] (reuses an
//!   adjacent compatible VMA's anon_vma) or the primitive [`Vma::anon_vma_prepare`].
//! - Observability: [`VmaTree::render_maps`] (`/proc/<pid>/maps`, byte-exact).
//!
//! # Merge rules (`is_mergeable_vma`, `is_mergeable_anon_vma`, `can_vma_merge_{before,after}`)
//! Two VMAs merge only when adjacent, of the same kind and the same file, with flags equal
//! except `VM_SOFTDIRTY`, linear `pgoff` (`prev.pgoff + prev.pages == next.pgoff`), anon_vmas
//! compatible (either is none, or they are equal — there is no fork, so every anon_vma chain is
//! singular), and neither carrying a `VM_SPECIAL` flag. A three-way merge additionally needs
//! prev's and next's anon_vmas compatible with each other; otherwise only prev merges. What this
//! means per kind, all probed on Linux 6.18:
//! - `Anon`: `pgoff = addr >> PAGE_SHIFT` (the caller sets it so), so adjacent mappings merge.
//! - `DevZero`: a file mapping for merging purposes. Adjacent `/dev/zero` mappings of the same
//!   open file with *contiguous offsets* merge (probed: offsets 0 and 0x4000 → one VMA); usemem's
//!   mappings, all at offset 0, do not (probed: 4 × 10 pages → 4 VMAs) — that, not a special
//!   rule, is peers.md B.8 (3). Two `open()`s are two files: never merged (probed).
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
//! settable with [`VmaTree::set_dev_zero_id`]); shared anonymous memory shows shm_mnt's 00:01 and
//! the shmem inode (a global counter on Linux, per tree here, from [`FIRST_SHMEM_INO`]).
//!
//! # Differences from Linux
//! - A `BTreeMap` stands in for the maple tree; `Vma`s are values, so a split copies one.
//! - No fork: anon_vma chains are always singular, `anon_vma` is a number (0 = none).
//! - File identity is a number ([`Vma::file`]); there are no real files besides the shmem object.
//! - Hugetlb VMAs never merge (Linux merges pieces of one hugetlbfs file when the merge removes
//!   no VMA, because `hugetlb_vm_op_close` forbids removal); their maps name
//!   `/anon_hugepage (deleted)` and device are unverified (no huge pages on the probe host).
//! - `PfnMap` VMAs render without a name (a driver's would show its device file).
//! - The low limit of the searches is `max(PAGE_SIZE, mmap_min_addr)`; no ASLR; no
//!   `MAP_32BIT`/`MAP_ABOVE4G`; no 5-level paging window.
//!
//! # Missing features
//! `mremap`/`brk` expansion (`vma_merge_extend`), mempolicies, userfaultfd contexts, anon VMA
//! names, mseal, per-VMA locks, `VM_GROWSUP`.

mod flags;
mod maps;
mod merge;
mod tree;
mod unmapped_area;

#[cfg(test)]
mod test;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use self::flags::VmFlags;
pub use self::maps::DevIno;
use self::merge::{anon_vma_compatible, same_shmem};
pub use self::tree::VmaTree;
use super::shmem::Shmem;
use crate::addr::{PAGE_MASK, PAGE_SHIFT, PAGE_SIZE, TASK_SIZE};

/// `stack_guard_gap`: 256 pages kept free below a `VM_GROWSDOWN` VMA (`vm_start_gap`).
pub const STACK_GUARD_GAP: u64 = 256 << PAGE_SHIFT;

/// `mmap_base` of an x86-64 process without ASLR: `TASK_SIZE` minus the minimum stack gap of
/// 128 MiB (`mmap_base()` clamps `rlimit(STACK) + guard + pad` to at least `SIZE_128M`). Probed:
/// under `setarch -R` the highest library mapping ends at 0x7ffff7fff000.
pub const DEFAULT_MMAP_BASE: u64 = TASK_SIZE - (128 << 20);

/// `TASK_UNMAPPED_BASE` (`mmap_legacy_base` without ASLR): where the bottom-up fallback search
/// starts.
pub const TASK_UNMAPPED_BASE: u64 = (TASK_SIZE / 3 + PAGE_SIZE - 1) & PAGE_MASK;

/// The file identity [`Vma::new`] gives every `DevZero` VMA: "all `/dev/zero` mappings of this mm
/// came through one `open()`". Any non-zero value works; see [`Vma::with_file`].
pub const DEV_ZERO_FILE: u64 = 1;

/// The first inode number handed to shared anonymous (and hugetlb) mappings of a tree.
pub const FIRST_SHMEM_INO: u64 = 1024;

/// The device of the kernel-internal shmem mount (`shm_mnt`), as `/proc/self/maps` shows it
/// for `/dev/zero (deleted)` lines (probed: `00:01`).
pub const SHMEM_DEV: (u32, u32) = (0, 1);

/// The device shown for anonymous hugetlb mappings. Not verified (see the module doc).
pub const HUGETLBFS_DEV: (u32, u32) = (0, 0x10);

// ---------------------------------------------------------------------------------------------
// Vma
// ---------------------------------------------------------------------------------------------

/// What backs a VMA: the few mapping types the engine models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VmaKind {
    /// `MAP_PRIVATE|MAP_ANONYMOUS`: no file, `pgoff = addr >> PAGE_SHIFT`.
    Anon,
    /// `MAP_PRIVATE` of `/dev/zero`: anonymous internally (`vma_set_anonymous`: zero page,
    /// anon_vma, THP), but it keeps its file: maps shows `/dev/zero` with the node's dev:inode and
    /// the file offset, and it merges only like a file mapping (same file, contiguous offsets).
    DevZero,
    /// `MAP_SHARED|MAP_ANONYMOUS` (or `MAP_SHARED` of `/dev/zero`): a shmem file of its own
    /// (`shmem_zero_setup`), shown as `/dev/zero (deleted)`.
    SharedAnon,
    /// `MAP_HUGETLB`: an unlinked hugetlbfs file.
    Hugetlb,
    /// `remap_pfn_range`-style mapping of raw frames from [`Vma::pfn_base`].
    PfnMap,
}

impl VmaKind {
    /// `vma_is_anonymous` in the kernel's sense: no `vm_ops` (`/dev/zero` private included).
    pub const fn is_anonymous(self) -> bool {
        matches!(self, VmaKind::Anon | VmaKind::DevZero)
    }

    /// Backed by a file (as far as merging and maps are concerned).
    pub const fn has_file(self) -> bool {
        !matches!(self, VmaKind::Anon | VmaKind::PfnMap)
    }

    /// Whether VMAs of this kind may ever merge with a neighbour.
    const fn can_merge(self) -> bool {
        matches!(self, VmaKind::Anon | VmaKind::DevZero | VmaKind::SharedAnon)
    }

    /// Each mapping of this kind is a new file (a shmem or hugetlbfs inode).
    const fn file_per_mapping(self) -> bool {
        matches!(self, VmaKind::SharedAnon | VmaKind::Hugetlb)
    }
}

/// `vm_area_struct`: one contiguous range of an address space with uniform attributes.
///
/// # Invariants
/// - `start < end`, both page aligned; `pgoff` is in pages and advances with `start` on a split.
/// - `anon_vma` is 0 until the first fault that needs one; it then changes only under the mmap
///   write lock (merges), and two VMAs with the same non-zero value share anonymous pages.
/// - Every field but `anon_vma` changes only under the mmap write lock.
#[derive(Debug)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    pub flags: VmFlags,
    /// `vm_pgoff`: the offset of `start` in the backing object, in pages. `Anon`:
    /// `start >> PAGE_SHIFT` at mmap time; file kinds: the mmap offset.
    pub pgoff: u64,
    pub kind: VmaKind,
    /// `vm_file`'s identity: 0 for none (`Anon`, `PfnMap`); for `DevZero` the open file
    /// ([`DEV_ZERO_FILE`] unless set); for `SharedAnon`/`Hugetlb` the inode number, assigned on
    /// insertion when 0. Merging requires equal files.
    pub file: u64,
    /// The shmem object behind a `SharedAnon` mapping; shared by the pieces of a split.
    pub shmem: Option<Arc<Shmem>>,
    /// `PfnMap`: the frame mapped at `start` (advances with `start` on a split).
    pub pfn_base: u64,
    /// `SharedAnon`: the size of the shmem object in pages (its `i_size`: the size of the
    /// mapping that created it, `shmem_zero_setup`); a fault at a larger object index is a
    /// SIGBUS. 0 = no limit.
    pub shmem_size: u64,
    /// `anon_vma` as an id (0 = none). Set by the first fault under the *read* lock with a
    /// compare-exchange (the kernel serialises that with `page_table_lock`); changed by merges
    /// under the write lock.
    anon_vma: AtomicU64,
}

impl Clone for Vma {
    fn clone(&self) -> Vma {
        Vma {
            start: self.start,
            end: self.end,
            flags: self.flags,
            pgoff: self.pgoff,
            kind: self.kind,
            file: self.file,
            shmem: self.shmem.clone(),
            pfn_base: self.pfn_base,
            shmem_size: self.shmem_size,
            anon_vma: AtomicU64::new(self.anon_vma()),
        }
    }
}

impl Vma {
    /// A VMA over `[start, end)` with no anon_vma, no shmem object and no PFN. `DevZero` gets
    /// [`DEV_ZERO_FILE`]; `SharedAnon`/`Hugetlb` get their inode when inserted.
    pub fn new(start: u64, end: u64, flags: VmFlags, kind: VmaKind, pgoff: u64) -> Vma {
        Vma {
            start,
            end,
            flags,
            pgoff,
            kind,
            file: if kind == VmaKind::DevZero {
                DEV_ZERO_FILE
            } else {
                0
            },
            shmem: None,
            pfn_base: 0,
            shmem_size: 0,
            anon_vma: AtomicU64::new(0),
        }
    }

    /// Set the file identity (see [`Vma::file`]).
    pub fn with_file(mut self, file: u64) -> Vma {
        self.file = file;
        self
    }

    pub fn with_shmem(mut self, shmem: Arc<Shmem>) -> Vma {
        self.shmem = Some(shmem);
        self
    }

    pub fn with_pfn_base(mut self, pfn: u64) -> Vma {
        self.pfn_base = pfn;
        self
    }

    #[inline]
    pub fn size(&self) -> u64 {
        self.end - self.start
    }

    /// `vma_pages`.
    #[inline]
    pub fn pages(&self) -> u64 {
        (self.end - self.start) >> PAGE_SHIFT
    }

    #[inline]
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }

    /// `linear_page_index`: the offset of `addr` in the backing object, in pages.
    #[inline]
    pub fn linear_page_index(&self, addr: u64) -> u64 {
        self.pgoff + ((addr - self.start) >> PAGE_SHIFT)
    }

    /// `vma_is_anonymous`.
    pub fn is_anonymous(&self) -> bool {
        self.kind.is_anonymous()
    }

    /// The mappings munmap keeps under the exclusive lock instead of downgrading (the 2018
    /// "zap pages with read mmap_sem in munmap" rule): `VM_LOCKED`, `VM_HUGETLB`, `VM_PFNMAP`.
    /// Not the kernel's `VM_SPECIAL` ([`VmFlags::VM_SPECIAL`]).
    pub fn is_special(&self) -> bool {
        self.flags
            .intersects(VmFlags::VM_LOCKED | VmFlags::VM_HUGETLB | VmFlags::VM_PFNMAP)
    }

    /// The anon_vma id, 0 if none yet.
    #[inline]
    pub fn anon_vma(&self) -> u64 {
        self.anon_vma.load(Ordering::Acquire)
    }

    /// `anon_vma_prepare` without neighbour reuse: return the anon_vma, allocating a fresh id from
    /// `ids` if there is none. Safe under the mmap *read* lock: racing faults agree on one id
    /// through a compare-exchange (a loser's id is simply never used, as the kernel frees its
    /// unused `anon_vma`). Prefer [`VmaTree::anon_vma_prepare`], which also reuses a neighbour's.
    #[doc(alias = "__anon_vma_prepare")]
    pub fn anon_vma_prepare(&self, ids: &AtomicU64) -> u64 {
        let cur = self.anon_vma();
        if cur != 0 {
            return cur;
        }
        let id = ids.fetch_add(1, Ordering::Relaxed);
        vm_bug_on!(id == 0, "anon_vma ids start at 1");
        self.install_anon_vma(id)
    }

    /// Install `id` unless a racing fault installed one first; return the winner.
    fn install_anon_vma(&self, id: u64) -> u64 {
        match self
            .anon_vma
            .compare_exchange(0, id, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => id,
            Err(winner) => winner,
        }
    }

    fn set_anon_vma(&mut self, id: u64) {
        *self.anon_vma.get_mut() = id;
    }

    /// `vm_start_gap`: the start including the stack guard gap of a `VM_GROWSDOWN` VMA.
    pub fn start_gap(&self) -> u64 {
        if self.flags.contains(VmFlags::VM_GROWSDOWN) {
            self.start.saturating_sub(STACK_GUARD_GAP)
        } else {
            self.start
        }
    }

    /// `is_mergeable_vma`: same kind, same file (and shmem object), flags equal but for
    /// `VM_SOFTDIRTY`.
    fn is_mergeable(
        &self,
        flags: VmFlags,
        kind: VmaKind,
        file: u64,
        shmem: Option<&Arc<Shmem>>,
    ) -> bool {
        self.kind == kind
            && self.file == file
            && same_shmem(self.shmem.as_ref(), shmem)
            && (self.flags.0 ^ flags.0) & !VmFlags::VM_SOFTDIRTY.0 == 0
    }
}

#[inline]
fn page_aligned(x: u64) -> bool {
    x & !PAGE_MASK == 0
}
