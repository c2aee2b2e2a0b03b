//! `vm_area_struct` ([`Vma`]) and what it is made of: the kind of mapping, the layout
//! constants of an x86-64 address space, and the compatibility rules two VMAs must meet to
//! share an anon_vma or merge (`is_mergeable_vma`, `anon_vma_compatible`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::flags::VmFlags;
use crate::addr::{Order, Pfn};
use crate::addr::{PAGE_MASK, PAGE_SHIFT, PAGE_SIZE, TASK_SIZE};
use crate::cpu::CpuId;
use crate::mm::shmem::Shmem;
use crate::page_alloc::{OwnedPages, PhysMem};

/// `stack_guard_gap`: 256 pages kept free below a `VM_GROWSDOWN` VMA (`vm_start_gap`).
pub const STACK_GUARD_GAP: u64 = 256 << PAGE_SHIFT;

/// `mmap_base` of an x86-64 process without ASLR: `TASK_SIZE` minus the minimum stack gap of
/// 128 MiB (`mmap_base()` clamps `rlimit(STACK) + guard + pad` to at least `SIZE_128M`). Probed:
/// under `setarch -R` the highest library mapping ends at 0x7ffff7fff000.
pub const DEFAULT_MMAP_BASE: u64 = TASK_SIZE - (128 << 20);

/// `TASK_UNMAPPED_BASE` (`mmap_legacy_base` without ASLR): where the bottom-up fallback search
/// starts.
pub const TASK_UNMAPPED_BASE: u64 = (TASK_SIZE / 3 + PAGE_SIZE - 1) & PAGE_MASK;

/// `mm->start_brk` of a new mm: where the heap of a non-PIE x86-64 program without ASLR
/// would begin (just above a small program's bss at 0x400000).
pub const DEFAULT_START_BRK: u64 = 0x0060_0000;

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

/// A driver's frames mapped by [`Mm::map_pfn_range`](crate::Mm::map_pfn_range): the block an
/// [`OwnedPages`] handed over, held by every VMA that maps it and freed (`__free_pages` on the
/// CPU that allocated it) when the last one is dropped, after the zaps that cleared its PTEs.
#[derive(Debug)]
pub(crate) struct PfnMapPages {
    phys: Arc<PhysMem>,
    pfn: Pfn,
    order: Order,
    cpu: CpuId,
}

impl PfnMapPages {
    /// Take over `pages` (which must be of `phys`).
    pub(crate) fn new(phys: Arc<PhysMem>, pages: OwnedPages<'_>) -> Arc<PfnMapPages> {
        let (of, pfn, order, cpu) = pages.into_raw();
        vm_bug_on!(!std::ptr::eq(of, &*phys), "a block of another machine");
        Arc::new(PfnMapPages {
            phys,
            pfn,
            order,
            cpu,
        })
    }
}

impl Drop for PfnMapPages {
    #[doc(alias = "vm_ops->close")]
    fn drop(&mut self) {
        let r = self.phys.free_pages(self.cpu, self.pfn, self.order);
        vm_bug_on!(r.is_err(), "driver block {:#x}: {:?}", self.pfn.0, r);
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
    pub(super) const fn can_merge(self) -> bool {
        matches!(self, VmaKind::Anon | VmaKind::DevZero | VmaKind::SharedAnon)
    }

    /// Each mapping of this kind is a new file (a shmem or hugetlbfs inode).
    pub(super) const fn file_per_mapping(self) -> bool {
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
    /// `PfnMap`: the driver's block behind the mapping (what its `vm_private_data` would
    /// hold); shared by the pieces of a split and the copies fork and mremap make, freed with
    /// the last of them (`vm_ops->close`), never by a zap.
    pub(crate) pfnmap: Option<Arc<PfnMapPages>>,
    /// `SharedAnon`: the size of the shmem object in pages (its `i_size`: the size of the
    /// mapping that created it, `shmem_zero_setup`); a fault at a larger object index is a
    /// SIGBUS. 0 = no limit.
    pub shmem_size: u64,
    /// `anon_vma` as an id (0 = none). Set by the first fault under the *read* lock with a
    /// compare-exchange (the kernel serialises that with `page_table_lock`); changed by merges
    /// under the write lock. A cell of its own per VMA, shared with the VMA's published copy
    /// in the per-VMA-lock index ([`Vma::snapshot`]), so a fault under the mmap lock that sets
    /// it is seen by faults under the VMA lock.
    anon_vma: Arc<AtomicU64>,
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
            pfnmap: self.pfnmap.clone(),
            shmem_size: self.shmem_size,
            anon_vma: Arc::new(AtomicU64::new(self.anon_vma())),
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
            pfnmap: None,
            shmem_size: 0,
            anon_vma: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A copy of this VMA that shares its anon_vma cell: what the per-VMA-lock index
    /// publishes (a [`Clone`] is a new VMA, as a split makes, with a cell of its own).
    pub(crate) fn snapshot(&self) -> Vma {
        Vma {
            anon_vma: Arc::clone(&self.anon_vma),
            ..self.clone()
        }
    }

    /// Set the file identity (see [`Vma::file`]).
    pub fn with_file(mut self, file: u64) -> Vma {
        self.file = file;
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
    /// unused `anon_vma`). Prefer [`VmaTree::anon_vma_prepare`](super::VmaTree::anon_vma_prepare), which also reuses a neighbour's.
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
    pub(super) fn install_anon_vma(&self, id: u64) -> u64 {
        match self
            .anon_vma
            .compare_exchange(0, id, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => id,
            Err(winner) => winner,
        }
    }

    pub(super) fn set_anon_vma(&mut self, id: u64) {
        self.anon_vma.store(id, Ordering::Release);
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
    pub(super) fn is_mergeable(
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
pub(super) fn page_aligned(x: u64) -> bool {
    x & !PAGE_MASK == 0
}

pub(super) fn same_shmem(a: Option<&Arc<Shmem>>, b: Option<&Arc<Shmem>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    }
}

/// The bit of an anon_vma id that says "this VMA's `anon_vma_chain` is not singular": the VMA
/// was forked from a parent whose pages it may still share (`anon_vma_fork` links the child's
/// new anon_vma *and* the parent's). Carried by the id so that splits and merges keep it.
pub const ANON_VMA_FORKED: u64 = 1 << 63;

/// `vma_had_uncowed_parents`: an anon_vma whose chain links a parent's.
#[inline]
pub(super) fn had_uncowed_parents(anon: u64) -> bool {
    anon & ANON_VMA_FORKED != 0
}

/// `is_mergeable_anon_vma`: both none; or one none and the other's chain singular (a
/// forked VMA never absorbs, nor is absorbed by, one without an anon_vma); or the same.
#[inline]
pub(super) fn anon_compatible(a: u64, b: u64) -> bool {
    match (a, b) {
        (0, 0) => true,
        (0, x) | (x, 0) => !had_uncowed_parents(x),
        _ => a == b,
    }
}

/// The anon_vma a merged VMA keeps: the first one set (all set ones are equal by then).
#[inline]
pub(super) fn first_anon(ids: &[u64]) -> u64 {
    ids.iter().copied().find(|&a| a != 0).unwrap_or(0)
}

/// `anon_vma_compatible(a, b)` of mm/rmap.c: could `b` share `a`'s anon_vma (a below b)?
pub(super) fn anon_vma_compatible(a: &Vma, b: &Vma) -> bool {
    a.end == b.start
        && a.kind == b.kind
        && a.file == b.file
        && (a.flags.0 ^ b.flags.0) & !(VmFlags::VM_ACCESS_FLAGS.0 | VmFlags::VM_SOFTDIRTY.0) == 0
        && b.pgoff == a.pgoff + ((b.start - a.start) >> PAGE_SHIFT)
}

// ---------------------------------------------------------------------------------------------
// VmaTree
// ---------------------------------------------------------------------------------------------

/// Device and inode shown for a file in `/proc/<pid>/maps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevIno {
    pub major: u32,
    pub minor: u32,
    pub ino: u64,
}

/// What a VMA's flags mean for the entries that map it.
impl Vma {
    /// `is_cow_mapping`: private and possibly writable — its anonymous pages are shared
    /// copy-on-write after a fork.
    #[inline]
    pub(crate) fn is_cow_mapping(&self) -> bool {
        !self.flags.contains(VmFlags::VM_SHARED) && self.flags.contains(VmFlags::VM_MAYWRITE)
    }

    /// Permission bits of a leaf mapping this VMA (`vm_get_page_prot`, then `maybe_mkwrite`
    /// when `writable`), before copy-on-write is considered. x86 has no write-only pages:
    /// `VM_WRITE` alone maps readable (`protection_map[VM_WRITE]` is `PAGE_COPY`), also while
    /// copy-on-write keeps the entry read-only.
    #[doc(alias = "vm_get_page_prot")]
    #[inline]
    pub(crate) fn leaf_bits(&self, writable: bool) -> u64 {
        let f = self.flags;
        crate::pgtable::leaf_bits(
            f.intersects(VmFlags::VM_READ | VmFlags::VM_WRITE),
            writable && f.contains(VmFlags::VM_WRITE),
            f.contains(VmFlags::VM_EXEC),
        )
    }
}
