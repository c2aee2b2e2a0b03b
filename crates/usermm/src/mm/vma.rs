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

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::ops::{BitAnd, BitOr, BitOrAssign};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::shmem::Shmem;
use crate::addr::{MMAP_MIN_ADDR, PAGE_MASK, PAGE_SHIFT, PAGE_SIZE, PMD_SIZE, TASK_SIZE};
use crate::error::Errno;

#[cfg(test)]
#[path = "vma_test.rs"]
mod test;

/// `PROT_*` of mmap(2)/mprotect(2).
pub const PROT_NONE: u32 = 0x0;
pub const PROT_READ: u32 = 0x1;
pub const PROT_WRITE: u32 = 0x2;
pub const PROT_EXEC: u32 = 0x4;

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
// VmFlags
// ---------------------------------------------------------------------------------------------

/// `vm_flags_t`: the `VM_*` bits of a VMA, with Linux's values (`include/linux/mm.h`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VmFlags(pub u64);

impl VmFlags {
    pub const VM_NONE: VmFlags = VmFlags(0);
    /// Access bits: what the page tables may allow now (`PROT_*`).
    pub const VM_READ: VmFlags = VmFlags(0x1);
    pub const VM_WRITE: VmFlags = VmFlags(0x2);
    pub const VM_EXEC: VmFlags = VmFlags(0x4);
    pub const VM_SHARED: VmFlags = VmFlags(0x8);
    /// "May" bits: what mprotect may ever grant (limited by the file's open mode).
    pub const VM_MAYREAD: VmFlags = VmFlags(0x10);
    pub const VM_MAYWRITE: VmFlags = VmFlags(0x20);
    pub const VM_MAYEXEC: VmFlags = VmFlags(0x40);
    /// Shared mapping (also read-only shared file mappings); drives the `s`/`p` maps column.
    pub const VM_MAYSHARE: VmFlags = VmFlags(0x80);
    /// A stack: the search keeps [`STACK_GUARD_GAP`] free below it.
    pub const VM_GROWSDOWN: VmFlags = VmFlags(0x100);
    /// Raw PFNs without `struct page` (`remap_pfn_range`).
    pub const VM_PFNMAP: VmFlags = VmFlags(0x400);
    /// mlock()ed: pages are faulted in and stay.
    pub const VM_LOCKED: VmFlags = VmFlags(0x2000);
    /// Memory-mapped I/O.
    pub const VM_IO: VmFlags = VmFlags(0x4000);
    /// `MADV_SEQUENTIAL` / `MADV_RANDOM`.
    pub const VM_SEQ_READ: VmFlags = VmFlags(0x8000);
    pub const VM_RAND_READ: VmFlags = VmFlags(0x10000);
    /// `MADV_DONTFORK`.
    pub const VM_DONTCOPY: VmFlags = VmFlags(0x20000);
    /// Cannot be expanded by mremap.
    pub const VM_DONTEXPAND: VmFlags = VmFlags(0x40000);
    /// `MLOCK_ONFAULT`.
    pub const VM_LOCKONFAULT: VmFlags = VmFlags(0x80000);
    /// Charged against the overcommit limit.
    pub const VM_ACCOUNT: VmFlags = VmFlags(0x100000);
    /// `MAP_NORESERVE`.
    pub const VM_NORESERVE: VmFlags = VmFlags(0x200000);
    pub const VM_HUGETLB: VmFlags = VmFlags(0x400000);
    /// `MADV_WIPEONFORK`.
    pub const VM_WIPEONFORK: VmFlags = VmFlags(0x2000000);
    /// `MADV_DONTDUMP`.
    pub const VM_DONTDUMP: VmFlags = VmFlags(0x4000000);
    /// Soft-dirty tracking; ignored when deciding merges.
    pub const VM_SOFTDIRTY: VmFlags = VmFlags(0x8000000);
    /// Mixed `struct page` and raw PFN mappings.
    pub const VM_MIXEDMAP: VmFlags = VmFlags(0x10000000);
    /// `MADV_HUGEPAGE` / `MADV_NOHUGEPAGE`.
    pub const VM_HUGEPAGE: VmFlags = VmFlags(0x20000000);
    pub const VM_NOHUGEPAGE: VmFlags = VmFlags(0x40000000);
    /// KSM (`MADV_MERGEABLE`).
    pub const VM_MERGEABLE: VmFlags = VmFlags(0x80000000);

    /// `VM_ACCESS_FLAGS`: what mprotect changes.
    pub const VM_ACCESS_FLAGS: VmFlags = VmFlags(0x1 | 0x2 | 0x4);
    /// `VM_SPECIAL`: VMAs that never merge, never grow, never get THPs.
    pub const VM_SPECIAL: VmFlags = VmFlags(0x4000 | 0x40000 | 0x400 | 0x10000000);

    const NAMES: [(u64, &'static str); 27] = [
        (0x1, "VM_READ"),
        (0x2, "VM_WRITE"),
        (0x4, "VM_EXEC"),
        (0x8, "VM_SHARED"),
        (0x10, "VM_MAYREAD"),
        (0x20, "VM_MAYWRITE"),
        (0x40, "VM_MAYEXEC"),
        (0x80, "VM_MAYSHARE"),
        (0x100, "VM_GROWSDOWN"),
        (0x400, "VM_PFNMAP"),
        (0x2000, "VM_LOCKED"),
        (0x4000, "VM_IO"),
        (0x8000, "VM_SEQ_READ"),
        (0x10000, "VM_RAND_READ"),
        (0x20000, "VM_DONTCOPY"),
        (0x40000, "VM_DONTEXPAND"),
        (0x80000, "VM_LOCKONFAULT"),
        (0x100000, "VM_ACCOUNT"),
        (0x200000, "VM_NORESERVE"),
        (0x400000, "VM_HUGETLB"),
        (0x2000000, "VM_WIPEONFORK"),
        (0x4000000, "VM_DONTDUMP"),
        (0x8000000, "VM_SOFTDIRTY"),
        (0x10000000, "VM_MIXEDMAP"),
        (0x20000000, "VM_HUGEPAGE"),
        (0x40000000, "VM_NOHUGEPAGE"),
        (0x80000000, "VM_MERGEABLE"),
    ];

    #[inline]
    pub const fn bits(self) -> u64 {
        self.0
    }
    #[inline]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// Every bit of `other` is set.
    #[inline]
    pub const fn contains(self, other: VmFlags) -> bool {
        self.0 & other.0 == other.0
    }
    /// Some bit of `other` is set.
    #[inline]
    pub const fn intersects(self, other: VmFlags) -> bool {
        self.0 & other.0 != 0
    }
    #[inline]
    pub const fn union(self, other: VmFlags) -> VmFlags {
        VmFlags(self.0 | other.0)
    }
    /// `self & ~other`.
    #[inline]
    pub const fn minus(self, other: VmFlags) -> VmFlags {
        VmFlags(self.0 & !other.0)
    }
    #[inline]
    pub const fn intersection(self, other: VmFlags) -> VmFlags {
        VmFlags(self.0 & other.0)
    }

    /// `calc_vm_prot_bits`: `PROT_READ/WRITE/EXEC` → `VM_READ/WRITE/EXEC`. Other bits are ignored,
    /// as mmap ignores unknown prot bits (peers.md B.9; mprotect's caller rejects them first).
    #[doc(alias = "calc_vm_prot_bits")]
    pub const fn from_prot(prot: u32) -> VmFlags {
        let mut f = 0;
        if prot & PROT_READ != 0 {
            f |= Self::VM_READ.0;
        }
        if prot & PROT_WRITE != 0 {
            f |= Self::VM_WRITE.0;
        }
        if prot & PROT_EXEC != 0 {
            f |= Self::VM_EXEC.0;
        }
        VmFlags(f)
    }

    /// The inverse of [`VmFlags::from_prot`]: the `PROT_*` bits these flags grant.
    pub const fn prot_bits(self) -> u32 {
        let mut p = PROT_NONE;
        if self.0 & Self::VM_READ.0 != 0 {
            p |= PROT_READ;
        }
        if self.0 & Self::VM_WRITE.0 != 0 {
            p |= PROT_WRITE;
        }
        if self.0 & Self::VM_EXEC.0 != 0 {
            p |= PROT_EXEC;
        }
        p
    }
}

impl BitOr for VmFlags {
    type Output = VmFlags;
    fn bitor(self, rhs: VmFlags) -> VmFlags {
        self.union(rhs)
    }
}

impl BitOrAssign for VmFlags {
    fn bitor_assign(&mut self, rhs: VmFlags) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for VmFlags {
    type Output = VmFlags;
    fn bitand(self, rhs: VmFlags) -> VmFlags {
        self.intersection(rhs)
    }
}

/// `VM_READ|VM_MAYREAD|0x100000000`: names joined by `|`, unknown bits in hex, `VM_NONE` for 0.
impl fmt::Debug for VmFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("VM_NONE");
        }
        let mut rest = self.0;
        let mut first = true;
        for (bit, name) in Self::NAMES {
            if rest & bit != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
                rest &= !bit;
            }
        }
        if rest != 0 {
            if !first {
                f.write_str("|")?;
            }
            write!(f, "{rest:#x}")?;
        }
        Ok(())
    }
}

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

fn same_shmem(a: Option<&Arc<Shmem>>, b: Option<&Arc<Shmem>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    }
}

/// `is_mergeable_anon_vma` with singular chains (no fork): none on either side, or the same.
#[inline]
fn anon_compatible(a: u64, b: u64) -> bool {
    a == 0 || b == 0 || a == b
}

/// The anon_vma a merged VMA keeps: the first one set (all set ones are equal by then).
#[inline]
fn first_anon(ids: &[u64]) -> u64 {
    ids.iter().copied().find(|&a| a != 0).unwrap_or(0)
}

/// `anon_vma_compatible(a, b)` of mm/rmap.c: could `b` share `a`'s anon_vma (a below b)?
fn anon_vma_compatible(a: &Vma, b: &Vma) -> bool {
    a.end == b.start
        && a.kind == b.kind
        && a.file == b.file
        && (a.flags.0 ^ b.flags.0) & !(VmFlags::VM_ACCESS_FLAGS.0 | VmFlags::VM_SOFTDIRTY.0) == 0
        && b.pgoff == a.pgoff + ((b.start - a.start) >> PAGE_SHIFT)
}

#[inline]
fn page_aligned(x: u64) -> bool {
    x & !PAGE_MASK == 0
}

/// Device and inode shown for a file in `/proc/<pid>/maps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevIno {
    pub major: u32,
    pub minor: u32,
    pub ino: u64,
}

// ---------------------------------------------------------------------------------------------
// VmaTree
// ---------------------------------------------------------------------------------------------

/// What `vma_merge_existing_range` decided: the merging neighbours as `(start, anon_vma)` of
/// prev and `(end, anon_vma)` of next, and the facts about the modified range it needs.
struct ExistingMerge {
    anon: u64,
    pgoff: u64,
    left_side: bool,
    right_side: bool,
    prev: Option<(u64, u64)>,
    next: Option<(u64, u64)>,
}

/// The VMAs of one `mm_struct` (`mm->mm_mt`, `mm->map_count`, `mm->mmap_base`).
///
/// Protected by the mmap lock: `&mut self` needs it for writing, `&self` for reading.
#[derive(Debug)]
pub struct VmaTree {
    vmas: BTreeMap<u64, Vma>,
    /// `mm->mmap_base`: the top of the top-down search.
    mmap_base: u64,
    /// `mm->mmap_legacy_base`: the bottom of the bottom-up fallback search.
    mmap_legacy_base: u64,
    /// Inode numbers for new shared anonymous and hugetlb mappings.
    next_shmem_ino: u64,
    /// What `/proc/<pid>/maps` shows for `/dev/zero`.
    dev_zero: DevIno,
}

impl VmaTree {
    /// An empty address space whose top-down searches start below `mmap_base`.
    pub fn new(mmap_base: u64) -> VmaTree {
        vm_bug_on!(!page_aligned(mmap_base) || mmap_base > TASK_SIZE);
        VmaTree {
            vmas: BTreeMap::new(),
            mmap_base,
            mmap_legacy_base: TASK_UNMAPPED_BASE,
            next_shmem_ino: FIRST_SHMEM_INO,
            // devtmpfs's /dev/zero on the probe host: `stat -c '%d %i' /dev/zero` → 6 4.
            dev_zero: DevIno {
                major: 0,
                minor: 6,
                ino: 4,
            },
        }
    }

    pub fn mmap_base(&self) -> u64 {
        self.mmap_base
    }

    /// The device and inode `/proc/<pid>/maps` shows for `/dev/zero` mappings.
    pub fn set_dev_zero_id(&mut self, id: DevIno) {
        self.dev_zero = id;
    }

    pub fn dev_zero_id(&self) -> DevIno {
        self.dev_zero
    }

    /// `mm->map_count`.
    pub fn map_count(&self) -> usize {
        self.vmas.len()
    }

    pub fn is_empty(&self) -> bool {
        self.vmas.is_empty()
    }

    /// Every VMA in address order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Vma> + '_ {
        self.vmas.values()
    }

    /// The VMA starting exactly at `start`.
    pub fn get(&self, start: u64) -> Option<&Vma> {
        self.vmas.get(&start)
    }

    /// `find_vma`: the first VMA with `end > addr` (it may start above `addr`).
    pub fn find_vma(&self, addr: u64) -> Option<&Vma> {
        if let Some((_, v)) = self.vmas.range(..=addr).next_back() {
            if v.end > addr {
                return Some(v);
            }
        }
        self.vmas
            .range(addr.saturating_add(1)..)
            .next()
            .map(|(_, v)| v)
            .filter(|v| v.start > addr)
    }

    /// `vma_lookup`: the VMA containing `addr`.
    pub fn vma_lookup(&self, addr: u64) -> Option<&Vma> {
        self.find_vma(addr).filter(|v| v.start <= addr)
    }

    /// `find_vma_prev`, returned as `(prev, vma)`: `vma` is [`VmaTree::find_vma`]`(addr)` and
    /// `prev` the VMA before it (the last VMA when `vma` is `None`), so `prev` always ends at or
    /// below `addr`.
    pub fn find_vma_prev(&self, addr: u64) -> (Option<&Vma>, Option<&Vma>) {
        let vma = self.find_vma(addr);
        let prev = match vma {
            Some(v) => self.vmas.range(..v.start).next_back().map(|(_, p)| p),
            None => self.vmas.values().next_back(),
        };
        (prev, vma)
    }

    /// `find_vma_intersection`: the first VMA overlapping `[start, end)`.
    pub fn find_vma_intersection(&self, start: u64, end: u64) -> Option<&Vma> {
        self.find_vma(start)
            .filter(|v| v.start < end && start < end)
    }

    /// Every VMA overlapping `[start, end)`, in address order (`for_each_vma_range`).
    pub fn intersecting(&self, start: u64, end: u64) -> impl Iterator<Item = &Vma> + '_ {
        let first = if start < end {
            self.find_vma(start).map(|v| v.start)
        } else {
            None
        };
        let range = match first {
            Some(k) => self.vmas.range(k..),
            None => self.vmas.range(0..0),
        };
        range.map(|(_, v)| v).take_while(move |v| v.start < end)
    }

    /// Insert a VMA that overlaps none (`vma_link`). A `SharedAnon`/`Hugetlb` VMA with `file == 0`
    /// gets a fresh inode. The caller has checked `max_map_count`.
    #[doc(alias = "vma_link")]
    pub fn insert(&mut self, mut vma: Vma) {
        vm_bug_on!(vma.start >= vma.end || !page_aligned(vma.start) || !page_aligned(vma.end));
        vm_bug_on!(
            self.find_vma_intersection(vma.start, vma.end).is_some(),
            "insert {:#x}-{:#x} overlaps",
            vma.start,
            vma.end
        );
        if vma.kind.file_per_mapping() && vma.file == 0 {
            vma.file = self.new_shmem_ino();
        }
        self.vmas.insert(vma.start, vma);
    }

    fn new_shmem_ino(&mut self) -> u64 {
        let ino = self.next_shmem_ino;
        self.next_shmem_ino += 1;
        ino
    }

    /// Remove and return the VMA starting exactly at `start`.
    pub fn remove(&mut self, start: u64) -> Option<Vma> {
        self.vmas.remove(&start)
    }

    /// Drop every VMA (`exit_mmap`'s `remove_vma` loop / `__mt_destroy`).
    pub fn clear(&mut self) {
        self.vmas.clear();
    }

    /// The start of the VMA containing `addr` strictly after its first byte, if any.
    fn key_strictly_inside(&self, addr: u64) -> Option<u64> {
        self.vmas
            .range(..addr)
            .next_back()
            .filter(|(_, v)| v.end > addr)
            .map(|(&k, _)| k)
    }

    /// `__split_vma`: split the VMA containing `addr` into `[start, addr)` and `[addr, end)`,
    /// without the `max_map_count` check. The upper half's `pgoff` (and `pfn_base`) advance;
    /// both halves keep the anon_vma, file and shmem object. Returns whether a split happened
    /// (false when `addr` is a VMA boundary or unmapped).
    #[doc(alias = "__split_vma")]
    pub fn split_unchecked(&mut self, addr: u64) -> bool {
        vm_bug_on!(!page_aligned(addr));
        let Some(key) = self.key_strictly_inside(addr) else {
            return false;
        };
        let lower = self.vmas.get_mut(&key).expect("key just found");
        let mut upper = lower.clone();
        lower.end = addr;
        let delta = (addr - upper.start) >> PAGE_SHIFT;
        upper.start = addr;
        upper.pgoff += delta;
        if upper.kind == VmaKind::PfnMap {
            upper.pfn_base += delta;
        }
        self.vmas.insert(addr, upper);
        true
    }

    /// `split_vma`: [`VmaTree::split_unchecked`] at `addr`, but `ENOMEM` (and no change) when
    /// `map_count() >= max_map_count`, and `EINVAL` when `addr` is not on a huge-page boundary
    /// of a hugetlb VMA (`vm_ops->may_split`, `hugetlb_vm_op_split`). A no-op `Ok` when `addr`
    /// needs no split.
    #[doc(alias = "split_vma")]
    pub fn split(&mut self, addr: u64, max_map_count: usize) -> Result<(), Errno> {
        let Some(key) = self.key_strictly_inside(addr) else {
            return Ok(());
        };
        if self.map_count() >= max_map_count {
            return Err(Errno::ENOMEM);
        }
        if matches!(self.vmas[&key].kind, VmaKind::Hugetlb) && addr % PMD_SIZE != 0 {
            return Err(Errno::EINVAL);
        }
        self.split_unchecked(addr);
        Ok(())
    }

    /// `vm_ops->may_split` for the two cuts an unmap of `[start, end)` makes: a hugetlb VMA
    /// cut off a 2 MiB boundary is `EINVAL` (`hugetlb_vm_op_split`). Changes nothing.
    pub fn may_split_range(&self, start: u64, end: u64) -> Result<(), Errno> {
        for cut in [start, end] {
            if let Some(key) = self.key_strictly_inside(cut) {
                if matches!(self.vmas[&key].kind, VmaKind::Hugetlb) && cut % PMD_SIZE != 0 {
                    return Err(Errno::EINVAL);
                }
            }
        }
        Ok(())
    }

    /// munmap's first phase (`vms_gather_munmap_vmas` + `vma_iter_clear_gfp`): split at `start`
    /// and `end` where they fall inside VMAs, remove every VMA in `[start, end)` and return them
    /// in address order. The caller zaps their pages, frees page tables and drops them.
    ///
    /// The kernel's only `max_map_count` check: when `start` splits a VMA that also extends past
    /// `end` (a hole punched in one VMA: net +1) and `map_count() >= max_map_count`, `ENOMEM`.
    /// Otherwise the count may exceed the limit by one between the two splits (munmap is
    /// allowed to free even at the limit) and ends at most where it started. On error nothing
    /// has changed. `start` and `end` must be page aligned with `start < end`.
    #[doc(alias = "vms_gather_munmap_vmas", alias = "do_vmi_align_munmap")]
    pub fn detach_range(
        &mut self,
        start: u64,
        end: u64,
        max_map_count: usize,
    ) -> Result<Vec<Vma>, Errno> {
        vm_bug_on!(!page_aligned(start) || !page_aligned(end) || start >= end);
        let Some(first) = self.find_vma_intersection(start, end) else {
            return Ok(Vec::new());
        };
        if start > first.start && end < first.end && self.map_count() >= max_map_count {
            return Err(Errno::ENOMEM);
        }
        self.may_split_range(start, end)?;
        self.split_unchecked(start);
        self.split_unchecked(end);
        let keys: Vec<u64> = self.vmas.range(start..end).map(|(&k, _)| k).collect();
        let detached: Vec<Vma> = keys
            .iter()
            .map(|k| self.vmas.remove(k).expect("key just listed"))
            .collect();
        vm_bug_on!(detached.iter().any(|v| v.start < start || v.end > end));
        Ok(detached)
    }

    /// `vma_merge_new_range`: try to place the new range `[start, end)` (free, page aligned) by
    /// expanding an adjacent VMA — prev, next, or prev swallowing next (three-way). Uses the
    /// kind's default file ([`DEV_ZERO_FILE`] for `DevZero`; `SharedAnon`/`Hugetlb` are new
    /// files and never merge). Returns the start of the VMA now covering the range, or `None`
    /// when no merge is possible (then the caller inserts a new VMA).
    #[doc(alias = "vma_merge_new_range")]
    pub fn merge_new(
        &mut self,
        start: u64,
        end: u64,
        flags: VmFlags,
        kind: VmaKind,
        pgoff: u64,
    ) -> Option<u64> {
        if kind.file_per_mapping() {
            return None;
        }
        let file = if kind == VmaKind::DevZero {
            DEV_ZERO_FILE
        } else {
            0
        };
        self.merge_new_range(start, end, flags, kind, file, None, pgoff)
    }

    /// The VMA-tree part of `__mmap_region`: merge `vma`'s range into a neighbour if the rules
    /// allow (using `vma`'s file and shmem object), else insert `vma` (a `SharedAnon`/`Hugetlb`
    /// one gets a new inode first, so it never merges). Returns the start of the VMA covering
    /// the new range. The range must be free and `map_count` checked by the caller (`do_mmap`).
    #[doc(alias = "__mmap_region", alias = "mmap_region")]
    pub fn insert_or_merge(&mut self, mut vma: Vma) -> u64 {
        vm_bug_on!(vma.anon_vma() != 0, "a new VMA has no anon_vma");
        if vma.kind.file_per_mapping() && vma.file == 0 {
            vma.file = self.new_shmem_ino();
        }
        let merged = self.merge_new_range(
            vma.start,
            vma.end,
            vma.flags,
            vma.kind,
            vma.file,
            vma.shmem.as_ref(),
            vma.pgoff,
        );
        match merged {
            Some(s) => s,
            None => {
                let s = vma.start;
                self.insert(vma);
                s
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn merge_new_range(
        &mut self,
        start: u64,
        end: u64,
        flags: VmFlags,
        kind: VmaKind,
        file: u64,
        shmem: Option<&Arc<Shmem>>,
        pgoff: u64,
    ) -> Option<u64> {
        vm_bug_on!(start >= end || !page_aligned(start) || !page_aligned(end));
        vm_bug_on!(
            self.find_vma_intersection(start, end).is_some(),
            "new range {start:#x}-{end:#x} is mapped"
        );
        if flags.intersects(VmFlags::VM_SPECIAL) || !kind.can_merge() {
            return None;
        }
        let pglen = (end - start) >> PAGE_SHIFT;
        // can_vma_merge_left / can_vma_merge_after (the new range has no anon_vma yet).
        let prev = self
            .vmas
            .range(..start)
            .next_back()
            .map(|(_, p)| p)
            .filter(|p| {
                p.end == start
                    && p.is_mergeable(flags, kind, file, shmem)
                    && p.pgoff + p.pages() == pgoff
            })
            .map(|p| (p.start, p.anon_vma()));
        // can_vma_merge_right / can_vma_merge_before, and prev/next compatible with each other.
        let next = self
            .vmas
            .get(&end)
            .filter(|n| {
                n.is_mergeable(flags, kind, file, shmem)
                    && n.pgoff == pgoff + pglen
                    && prev.map_or(true, |(_, pa)| anon_compatible(pa, n.anon_vma()))
            })
            .map(|n| (n.end, n.anon_vma()));
        match (prev, next) {
            (None, None) => None,
            (Some((ps, pa)), Some((ne, na))) => {
                self.vmas.remove(&end);
                let p = self.vmas.get_mut(&ps).expect("prev");
                p.end = ne;
                p.set_anon_vma(first_anon(&[pa, na]));
                Some(ps)
            }
            (Some((ps, _)), None) => {
                self.vmas.get_mut(&ps).expect("prev").end = end;
                Some(ps)
            }
            (None, Some(_)) => {
                let mut n = self.vmas.remove(&end).expect("next");
                n.start = start;
                n.pgoff = pgoff;
                self.vmas.insert(start, n);
                Some(start)
            }
        }
    }

    /// The decision half of `vma_merge_existing_range`: which neighbours `[start, end)` (inside
    /// the VMA keyed `key`, about to carry `flags`) would merge with. `None`: no merge.
    fn plan_existing_merge(
        &self,
        key: u64,
        start: u64,
        end: u64,
        flags: VmFlags,
    ) -> Option<ExistingMerge> {
        let vma = self.vmas.get(&key)?;
        vm_bug_on!(start < vma.start || end > vma.end || start >= end);
        let (vstart, vend, vpgoff, kind, file, anon) = (
            vma.start,
            vma.end,
            vma.pgoff,
            vma.kind,
            vma.file,
            vma.anon_vma(),
        );
        let left_side = start == vstart;
        let right_side = end == vend;
        if flags.intersects(VmFlags::VM_SPECIAL) || !kind.can_merge() || (!left_side && !right_side)
        {
            return None;
        }
        let shmem = vma.shmem.as_ref();
        let pgoff = vpgoff + ((start - vstart) >> PAGE_SHIFT);
        let pglen = (end - start) >> PAGE_SHIFT;
        let prev = if left_side {
            self.vmas
                .range(..key)
                .next_back()
                .map(|(_, p)| p)
                .filter(|p| {
                    p.end == start
                        && p.is_mergeable(flags, kind, file, shmem)
                        && anon_compatible(anon, p.anon_vma())
                        && p.pgoff + p.pages() == pgoff
                })
                .map(|p| (p.start, p.anon_vma()))
        } else {
            None
        };
        let next = if right_side {
            self.vmas
                .get(&end)
                .filter(|n| {
                    n.is_mergeable(flags, kind, file, shmem)
                        && anon_compatible(anon, n.anon_vma())
                        && n.pgoff == pgoff + pglen
                        && prev.map_or(true, |(_, pa)| anon_compatible(pa, n.anon_vma()))
                })
                .map(|n| (n.end, n.anon_vma()))
        } else {
            None
        };
        if prev.is_none() && next.is_none() {
            return None;
        }
        Some(ExistingMerge {
            anon,
            pgoff,
            left_side,
            right_side,
            prev,
            next,
        })
    }

    /// `vma_merge_existing_range`: `[start, end)` lies inside the VMA keyed `key` and is about to
    /// carry `flags`. Merge it into prev and/or next if it touches that side and the rules allow.
    /// On success the range carries `flags` and the start of the merged VMA is returned.
    fn merge_existing_range(
        &mut self,
        key: u64,
        start: u64,
        end: u64,
        flags: VmFlags,
    ) -> Option<u64> {
        let ExistingMerge {
            anon,
            pgoff,
            left_side,
            right_side,
            prev,
            next,
        } = self.plan_existing_merge(key, start, end, flags)?;
        match (prev, next) {
            (None, None) => None,
            (Some((ps, pa)), Some((ne, na))) => {
                // |prev|**vma**|next| → prev extends over both; vma and next are deleted.
                self.vmas.remove(&key);
                self.vmas.remove(&end);
                let p = self.vmas.get_mut(&ps).expect("prev");
                p.end = ne;
                p.flags = flags;
                p.set_anon_vma(first_anon(&[pa, anon, na]));
                Some(ps)
            }
            (Some((ps, pa)), None) => {
                // |prev|**vma…| → prev extends to `end`; vma shrinks from the left or goes.
                let mut v = self.vmas.remove(&key).expect("vma");
                if !right_side {
                    v.pgoff += (end - v.start) >> PAGE_SHIFT;
                    v.start = end;
                    self.vmas.insert(end, v);
                }
                let p = self.vmas.get_mut(&ps).expect("prev");
                p.end = end;
                p.flags = flags;
                p.set_anon_vma(first_anon(&[pa, anon]));
                Some(ps)
            }
            (None, Some((_, na))) => {
                // |…**vma**|next| → next extends down to `start`; vma shrinks or goes.
                let mut n = self.vmas.remove(&end).expect("next");
                if left_side {
                    self.vmas.remove(&key);
                } else {
                    self.vmas.get_mut(&key).expect("vma").end = start;
                }
                n.start = start;
                n.pgoff = pgoff;
                n.flags = flags;
                n.set_anon_vma(first_anon(&[na, anon]));
                self.vmas.insert(start, n);
                Some(start)
            }
        }
    }

    /// `vma_modify_flags` + the flag update of `mprotect_fixup`/`madvise_update_vma`/
    /// `mlock_fixup`: give `[start, end)` — inside the one VMA containing `start` — the flags
    /// `new_flags`. In the kernel's order: first try to merge the range into a neighbour; failing
    /// that, split off the parts outside the range (`split_vma`, each `ENOMEM` at
    /// `map_count() >= max_map_count`) and set the flags on the middle. Returns the start of the
    /// VMA now covering the range. Equal flags change nothing (the callers' early exit).
    ///
    /// Errors: `ENOMEM` when `start` is unmapped (no change) or a split hits the limit — like
    /// Linux, a first split that succeeded is not undone when the second fails.
    #[doc(alias = "vma_modify")]
    pub fn vma_modify_flags(
        &mut self,
        start: u64,
        end: u64,
        new_flags: VmFlags,
        max_map_count: usize,
    ) -> Result<u64, Errno> {
        vm_bug_on!(!page_aligned(start) || !page_aligned(end) || start >= end);
        let Some(vma) = self.vma_lookup(start) else {
            return Err(Errno::ENOMEM);
        };
        vm_bug_on!(end > vma.end, "range {start:#x}-{end:#x} leaves its VMA");
        let end = end.min(vma.end);
        let key = vma.start;
        if vma.flags == new_flags {
            return Ok(key);
        }
        if let Some(merged) = self.merge_existing_range(key, start, end, new_flags) {
            return Ok(merged);
        }
        if key < start {
            self.split(start, max_map_count)?;
        }
        if self.vmas[&start].end > end {
            self.split(end, max_map_count)?;
        }
        self.vmas.get_mut(&start).expect("middle").flags = new_flags;
        Ok(start)
    }

    /// The tree half of `expand_downwards`: the VMA starting at `start` now starts at
    /// `new_start` (page aligned, below, and free down to there), its `pgoff` moved back by as
    /// many pages. The caller checked the stack rules. Returns false if no VMA starts at
    /// `start` or `new_start` is not below it.
    pub fn move_start_down(&mut self, start: u64, new_start: u64) -> bool {
        if new_start >= start || !page_aligned(new_start) || !self.vmas.contains_key(&start) {
            return false;
        }
        vm_bug_on!(
            self.find_vma_intersection(new_start, start).is_some(),
            "stack expansion over a mapping"
        );
        let mut v = self.vmas.remove(&start).expect("key just checked");
        v.pgoff -= (start - new_start) >> PAGE_SHIFT;
        v.start = new_start;
        self.vmas.insert(new_start, v);
        true
    }

    /// After the flags of the VMA containing `addr` changed in place (e.g. after a
    /// [`VmaTree::split`] and a direct flag update): merge it with prev and/or next if the rules
    /// allow. Returns the start of the resulting VMA (`addr`'s VMA's start if nothing merged),
    /// or `None` when `addr` is unmapped.
    pub fn merge_after_change(&mut self, addr: u64) -> Option<u64> {
        let v = self.vma_lookup(addr)?;
        let (s, e, f) = (v.start, v.end, v.flags);
        Some(self.merge_existing_range(s, s, e, f).unwrap_or(s))
    }

    /// Whether giving `[start, end)` (inside the VMA containing `start`) the flags `flags` would
    /// merge it with a neighbour (`vma_merge_existing_range`'s decision, without the change).
    pub fn would_merge(&self, start: u64, end: u64, flags: VmFlags) -> bool {
        let Some(v) = self.vma_lookup(start) else {
            return false;
        };
        let (key, end) = (v.start, end.min(v.end));
        start < end && self.plan_existing_merge(key, start, end, flags).is_some()
    }

    /// Set the flags of the VMA starting exactly at `start` (after the caller split it; follow
    /// with [`VmaTree::merge_after_change`]). Returns false if no VMA starts there.
    pub fn set_flags(&mut self, start: u64, flags: VmFlags) -> bool {
        match self.vmas.get_mut(&start) {
            Some(v) => {
                v.flags = flags;
                true
            }
            None => false,
        }
    }

    /// Mutable access to the flags of the VMA starting at `start`, for callers that split first
    /// and then change flags in place (follow with [`VmaTree::merge_after_change`]).
    pub fn flags_mut(&mut self, start: u64) -> Option<&mut VmFlags> {
        self.vmas.get_mut(&start).map(|v| &mut v.flags)
    }

    /// `anon_vma_prepare` under the mmap read lock: `vma`'s anon_vma, or else the anon_vma of an
    /// adjacent compatible VMA (next first, then prev: `find_mergeable_anon_vma`), or else a
    /// fresh id from `ids`. Reuse keeps mprotect-split pieces mergeable once faulted.
    #[doc(alias = "find_mergeable_anon_vma")]
    pub fn anon_vma_prepare(&self, vma: &Vma, ids: &AtomicU64) -> u64 {
        let cur = vma.anon_vma();
        if cur != 0 {
            return cur;
        }
        let reuse = self
            .vmas
            .get(&vma.end)
            .filter(|n| anon_vma_compatible(vma, n))
            .map(|n| n.anon_vma())
            .filter(|&a| a != 0)
            .or_else(|| {
                self.vmas
                    .range(..vma.start)
                    .next_back()
                    .map(|(_, p)| p)
                    .filter(|p| anon_vma_compatible(p, vma))
                    .map(|p| p.anon_vma())
                    .filter(|&a| a != 0)
            });
        match reuse {
            Some(id) => vma.install_anon_vma(id),
            None => vma.anon_vma_prepare(ids),
        }
    }

    // -----------------------------------------------------------------------------------------
    // get_unmapped_area
    // -----------------------------------------------------------------------------------------

    /// `__get_unmapped_area` for a mapping without `MAP_FIXED`: where to put `len` bytes.
    ///
    /// `hint` is the raw mmap address: it is rounded down to a page and raised to
    /// `mmap_min_addr` if below (`round_hint_to_min`), then used as is when
    /// `[hint, hint + len)` is free and below `TASK_SIZE` (a `VM_GROWSDOWN` VMA above keeps its
    /// guard gap). Otherwise, or without a hint, a top-down search below `mmap_base` takes the
    /// highest gap that fits, and if none does, a bottom-up search from `TASK_UNMAPPED_BASE`
    /// (the x86 fallback).
    ///
    /// `align_thp`: the mapping is private anonymous and THP is built in. Then, when there is no
    /// hint and `len` is a multiple of 2 MiB, the area is 2 MiB aligned (6.18's anonymous branch;
    /// probed in THP `madvise` mode: 2 and 4 MiB aligned, 3 MiB and 4 MiB + 4 KiB not, and not
    /// with a hint). The search pads `len` by 2 MiB, as `__thp_get_unmapped_area` does, and
    /// falls back to the plain search if the padded one finds nothing. Shared anonymous memory
    /// passes false (`shmem_get_unmapped_area` with `shmem_enabled=never` does not align);
    /// private `/dev/zero` uses [`VmaTree::thp_get_unmapped_area`].
    ///
    /// Errors: `EINVAL` for `len == 0`; `ENOMEM` when `len > TASK_SIZE` or nothing fits.
    #[doc(alias = "__get_unmapped_area")]
    pub fn get_unmapped_area(&self, len: u64, hint: u64, align_thp: bool) -> Result<u64, Errno> {
        let len = Self::check_len(len)?;
        let hint = round_hint_to_min(hint);
        let addr = if align_thp && hint == 0 && len % PMD_SIZE == 0 {
            match self.thp_area(len, 0, 0) {
                Some(a) => a,
                None => self
                    .arch_get_unmapped_area_topdown(len, 0)
                    .ok_or(Errno::ENOMEM)?,
            }
        } else {
            self.arch_get_unmapped_area_topdown(len, hint)
                .ok_or(Errno::ENOMEM)?
        };
        Self::check_result(addr, len)
    }

    /// `hugetlb_get_unmapped_area`: the hint rounded *up* to 2 MiB if that range is free,
    /// else a top-down search for a 2 MiB-aligned range. `len` is already a multiple of 2 MiB.
    /// (A hint used as given would put a hugetlb VMA off its huge-page boundary, and its
    /// faults would map a PMD partly outside the VMA.)
    pub fn hugetlb_get_unmapped_area(&self, len: u64, hint: u64) -> Result<u64, Errno> {
        let len = Self::check_len(len)?;
        vm_bug_on!(len % PMD_SIZE != 0);
        let hint = round_hint_to_min(hint);
        if hint != 0 {
            if let Some(a) = crate::addr::align_up(hint, PMD_SIZE) {
                if self.arch_get_unmapped_area_topdown(len, a) == Some(a) {
                    return Self::check_result(a, len);
                }
            }
        }
        let addr = self.thp_area(len, 0, 0).ok_or(Errno::ENOMEM)?;
        Self::check_result(addr, len)
    }

    /// `thp_get_unmapped_area` for a file-like mapping at byte offset `off` — what private
    /// `/dev/zero` mappings get (`get_unmapped_area_zero`). If the file range holds at least one
    /// whole 2 MiB-aligned block, search for `len + 2 MiB` (honouring the hint only if
    /// `[hint, hint + len + 2 MiB)` is free) and return the address in that area congruent to
    /// `off` modulo 2 MiB (its top end when already aligned, as top-down does); otherwise, or when
    /// the padded search fails, the plain search. Probed: a 3 MiB `/dev/zero` mapping at offset
    /// 0 is 2 MiB aligned, at offset 4 KiB it is not; a hint free for `len` but not for
    /// `len + 2 MiB` is dropped for an aligned address elsewhere.
    #[doc(alias = "__thp_get_unmapped_area")]
    pub fn thp_get_unmapped_area(&self, len: u64, hint: u64, off: u64) -> Result<u64, Errno> {
        let len = Self::check_len(len)?;
        let hint = round_hint_to_min(hint);
        let addr = match self.thp_area(len, hint, off) {
            Some(a) => a,
            None => self
                .arch_get_unmapped_area_topdown(len, hint)
                .ok_or(Errno::ENOMEM)?,
        };
        Self::check_result(addr, len)
    }

    fn check_len(len: u64) -> Result<u64, Errno> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let len = crate::addr::align_up(len, PAGE_SIZE).ok_or(Errno::ENOMEM)?;
        if len > TASK_SIZE {
            return Err(Errno::ENOMEM);
        }
        Ok(len)
    }

    /// `__get_unmapped_area`'s final checks.
    fn check_result(addr: u64, len: u64) -> Result<u64, Errno> {
        if addr > TASK_SIZE - len {
            return Err(Errno::ENOMEM);
        }
        vm_bug_on!(!page_aligned(addr));
        Ok(addr)
    }

    /// `__thp_get_unmapped_area` with `size = PMD_SIZE`: `None` means "not applicable or no
    /// room", and the caller falls back to the plain search.
    fn thp_area(&self, len: u64, hint: u64, off: u64) -> Option<u64> {
        let off_end = off.checked_add(len)?;
        let off_align = off.checked_add(PMD_SIZE - 1)? & !(PMD_SIZE - 1);
        if off_end <= off_align || off_end - off_align < PMD_SIZE {
            return None;
        }
        let len_pad = len.checked_add(PMD_SIZE)?;
        off.checked_add(len_pad)?;
        let ret = self.arch_get_unmapped_area_topdown(len_pad, hint)?;
        if ret == hint {
            return Some(hint);
        }
        let off_sub = off.wrapping_sub(ret) & (PMD_SIZE - 1);
        // Top-down put the padded area at the top of its gap: if it is already aligned, the
        // aligned area is its upper end.
        if off_sub == 0 {
            return Some(ret + PMD_SIZE);
        }
        Some(ret + off_sub)
    }

    /// x86's `arch_get_unmapped_area_topdown`: the hint if free, else `vm_unmapped_area`
    /// top-down in `[max(PAGE_SIZE, mmap_min_addr), mmap_base)`, else bottom-up
    /// (`arch_get_unmapped_area`) in `[mmap_legacy_base, TASK_SIZE)`.
    fn arch_get_unmapped_area_topdown(&self, len: u64, hint: u64) -> Option<u64> {
        if len > TASK_SIZE {
            return None;
        }
        if hint != 0 {
            let addr = hint & PAGE_MASK;
            // mmap_address_hint_valid: the whole range below TASK_SIZE.
            if TASK_SIZE - len >= addr {
                match self.find_vma(addr) {
                    None => return Some(addr),
                    Some(v) if addr + len <= v.start_gap() => return Some(addr),
                    Some(_) => {}
                }
            }
        }
        let low = PAGE_SIZE.max(MMAP_MIN_ADDR);
        self.unmapped_area_topdown(len, low, self.mmap_base)
            .or_else(|| self.unmapped_area(len, self.mmap_legacy_base.max(low), TASK_SIZE))
    }

    /// `unmapped_area_topdown`: the highest `addr` with `[addr, addr + len)` inside
    /// `[low, high)` and inside a gap (a `VM_GROWSDOWN` VMA's guard gap counts as used).
    #[doc(alias = "vm_unmapped_area")]
    fn unmapped_area_topdown(&self, len: u64, low: u64, high: u64) -> Option<u64> {
        if high < low || high - low < len {
            return None;
        }
        let mut top = high;
        // A VMA starting at or above `high` may still reach below it with its guard gap.
        if let Some((_, v)) = self.vmas.range(high..).next() {
            top = top.min(v.start_gap());
        }
        for v in self.vmas.range(..high).rev().map(|(_, v)| v) {
            if v.end < top {
                let bottom = v.end.max(low);
                if top >= bottom && top - bottom >= len {
                    return Some(top - len);
                }
            }
            top = top.min(v.start_gap());
            if top <= low {
                return None;
            }
        }
        (top >= low && top - low >= len).then(|| top - len)
    }

    /// `unmapped_area` (bottom-up): the lowest `addr` with `[addr, addr + len)` inside
    /// `[low, high)` and inside a gap.
    fn unmapped_area(&self, len: u64, low: u64, high: u64) -> Option<u64> {
        if high < low || high - low < len {
            return None;
        }
        let mut bottom = low;
        let first = self.find_vma(low).map_or(u64::MAX, |v| v.start);
        for v in self.vmas.range(first..).map(|(_, v)| v) {
            let gap_end = v.start_gap().min(high);
            if gap_end >= bottom && gap_end - bottom >= len {
                return Some(bottom);
            }
            bottom = bottom.max(v.end);
            if bottom >= high {
                return None;
            }
        }
        (high - bottom >= len).then_some(bottom)
    }

    // -----------------------------------------------------------------------------------------
    // validate, maps
    // -----------------------------------------------------------------------------------------

    /// `validate_mm`: the invariants of the module doc. Returns the first violation.
    #[doc(alias = "validate_mm")]
    pub fn validate(&self, max_map_count: usize) -> Result<(), String> {
        let mut prev_end = 0u64;
        for (&k, v) in &self.vmas {
            let at = || format!("VMA {:#x}-{:#x} {:?} {:?}", v.start, v.end, v.kind, v.flags);
            if k != v.start {
                return Err(format!("{}: keyed at {k:#x}", at()));
            }
            if v.start >= v.end {
                return Err(format!("{}: empty or inverted", at()));
            }
            if !page_aligned(v.start) || !page_aligned(v.end) {
                return Err(format!("{}: not page aligned", at()));
            }
            if v.end > TASK_SIZE {
                return Err(format!("{}: beyond TASK_SIZE", at()));
            }
            if v.start < prev_end {
                return Err(format!(
                    "{}: overlaps the VMA ending at {prev_end:#x}",
                    at()
                ));
            }
            prev_end = v.end;
            let mayshare = v.flags.contains(VmFlags::VM_MAYSHARE);
            let shared = v.flags.contains(VmFlags::VM_SHARED);
            let ok = match v.kind {
                VmaKind::Anon => !mayshare && v.file == 0,
                VmaKind::DevZero => !mayshare && v.file != 0,
                VmaKind::SharedAnon => mayshare && shared && v.file != 0 && v.anon_vma() == 0,
                VmaKind::Hugetlb => v.flags.contains(VmFlags::VM_HUGETLB) && v.file != 0,
                VmaKind::PfnMap => v.flags.contains(VmFlags::VM_PFNMAP),
            };
            if !ok || (shared && !mayshare) {
                return Err(format!(
                    "{}: kind, flags, file {} and anon_vma {} disagree",
                    at(),
                    v.file,
                    v.anon_vma()
                ));
            }
        }
        // do_mmap refuses only `map_count > max_map_count`, so a process can hold one more.
        if self.map_count() > max_map_count.saturating_add(1) {
            return Err(format!(
                "map_count {} > max_map_count {max_map_count} + 1",
                self.map_count()
            ));
        }
        Ok(())
    }

    /// `/proc/<pid>/maps`, byte-exact with Linux 6.18 (see the module doc).
    pub fn render_maps(&self) -> String {
        let mut m = String::with_capacity(self.vmas.len() * 64);
        for v in self.vmas.values() {
            self.show_map_vma(v, &mut m);
        }
        m
    }

    /// One maps line, with its newline.
    #[doc(alias = "show_vma_header_prefix")]
    pub fn show_map_vma(&self, vma: &Vma, m: &mut String) {
        let file_off = vma.pgoff << PAGE_SHIFT;
        let (pgoff, dev, ino, name) = match vma.kind {
            VmaKind::Anon | VmaKind::PfnMap => (0, (0, 0), 0, None),
            VmaKind::DevZero => (
                file_off,
                (self.dev_zero.major, self.dev_zero.minor),
                self.dev_zero.ino,
                Some("/dev/zero"),
            ),
            VmaKind::SharedAnon => (file_off, SHMEM_DEV, vma.file, Some("/dev/zero (deleted)")),
            VmaKind::Hugetlb => (
                file_off,
                HUGETLBFS_DEV,
                vma.file,
                Some("/anon_hugepage (deleted)"),
            ),
        };
        let f = vma.flags;
        let line_start = m.len();
        let _ = write!(
            m,
            "{:08x}-{:08x} {}{}{}{} {:08x} {:02x}:{:02x} {} ",
            vma.start,
            vma.end,
            if f.contains(VmFlags::VM_READ) {
                'r'
            } else {
                '-'
            },
            if f.contains(VmFlags::VM_WRITE) {
                'w'
            } else {
                '-'
            },
            if f.contains(VmFlags::VM_EXEC) {
                'x'
            } else {
                '-'
            },
            if f.contains(VmFlags::VM_MAYSHARE) {
                's'
            } else {
                'p'
            },
            pgoff,
            dev.0,
            dev.1,
            ino,
        );
        if let Some(name) = name {
            // seq_setwidth(m, 25 + sizeof(void *) * 6 - 1) then seq_pad(m, ' ').
            const PAD_UNTIL: usize = 25 + 8 * 6 - 1;
            let written = m.len() - line_start;
            for _ in written..PAD_UNTIL {
                m.push(' ');
            }
            m.push(' ');
            m.push_str(name);
        }
        m.push('\n');
    }
}

/// `round_hint_to_min` of `do_mmap`: page-align a hint down; a non-zero hint below
/// `mmap_min_addr` becomes `mmap_min_addr` (probed: a hint of 0x1000 gives 0x10000).
fn round_hint_to_min(hint: u64) -> u64 {
    let hint = hint & PAGE_MASK;
    if hint != 0 && hint < MMAP_MIN_ADDR {
        return (MMAP_MIN_ADDR + PAGE_SIZE - 1) & PAGE_MASK;
    }
    hint
}
