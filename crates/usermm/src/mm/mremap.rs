//! `mremap`: shrink in place, grow in place, or move a mapping — moving its page tables, never
//! copying its pages.
//!
//! Mirrors `mm/mremap.c` as of Linux 6.18 (`do_mremap`, `check_mremap_params`,
//! `check_prep_vma`, `mremap_at`, `mremap_to`, `expand_vma`, `shrink_vma`, `move_vma`,
//! `move_page_tables`, `move_ptes`, `move_normal_pmd`); a huge PMD moves whole through
//! `huge_memory.rs` (`move_huge_pmd`, as in `mm/huge_memory.c`). The errnos come in the kernel's order (the differential suite checks
//! them against the host kernel):
//! ```text
//!  flags other than MAYMOVE|FIXED|DONTUNMAP, addr unaligned, new_len 0 or > TASK_SIZE  EINVAL
//!  (a FIXED move without resizing goes VMA by VMA: `remap_move`, 6.17+)
//!  FIXED/DONTUNMAP: new_addr unaligned or past TASK_SIZE, no MAYMOVE, DONTUNMAP with a
//!    size change, old and new ranges overlapping                                       EINVAL
//!  FIXED/DONTUNMAP: map_count + 2 ≥ max_map_count − 3                                  ENOMEM
//!  ── mmap_write_lock ──
//!  no VMA at addr                                                                      EFAULT
//!  hugetlb: addresses not 2 MiB aligned, or growing                                    EINVAL
//!  (growing or moving) old_len 0 on a private mapping; DONTUNMAP of VM_DONTEXPAND/PFNMAP EINVAL
//!  (growing or moving) [addr, addr+old_len) leaves the VMA                             EFAULT
//!  (growing) pgoff overflow EINVAL; VM_DONTEXPAND or VM_PFNMAP                         EFAULT
//!  growing, the VMA cannot grow in place, no MAYMOVE                                   ENOMEM
//! ```
//!
//! # Moving page tables (`move_page_tables`)
//! Per 2 MiB extent of the old range: a huge PMD that the extent covers whole moves as one
//! entry, with its deposited table (`move_huge_pmd`); a PTE table that the extent covers whole,
//! with both addresses 2 MiB aligned and the new PMD slot empty, moves as one PMD entry
//! (`move_normal_pmd`); otherwise the PTEs move one by one (`move_ptes`), a huge PMD first split.
//! Mapcounts, references and rss do not change: the same pages are mapped at new addresses.
//! The old range's TLB entries are flushed before the lock is dropped.
//!
//! # Locks
//! `mmap_lock (write) -> old PMD/PTE lock -> new PMD/PTE lock` (the kernel nests the new PTL
//! inside the old one).
//!
//! # Differences from Linux
//! No `RLIMIT_AS`/`RLIMIT_MEMLOCK` (`may_expand_vm`, `mlock_future_ok` always allow), no
//! mseal, no userfaultfd, no KSM.
//!
//! A table that cannot be allocated mid-move (memory exhausted) fails the call with `ENOMEM`
//! as in Linux: what moved is moved back, the new range unmapped, the source left as it was.

use super::mman::{MAP_SHARED, MREMAP_DONTUNMAP, MREMAP_FIXED, MREMAP_MAYMOVE};
use super::vma::{VmFlags, Vma, VmaKind, VmaTree, VmaWriteGuard};
use super::{huge_memory, Mm};
use crate::addr::{Pfn, PAGE_SIZE, PMD_SIZE, TASK_SIZE};
use crate::cpu::CpuId;
use crate::error::Errno;
use crate::pgtable::{Entry, Slot};
use crate::pgtable::{Level, TablePair};

/// `PAGE_ALIGN`, wrapping to 0 as the kernel's does for lengths near `u64::MAX`.
#[inline]
fn page_align(x: u64) -> u64 {
    x.wrapping_add(PAGE_SIZE - 1) & !(PAGE_SIZE - 1)
}

/// `struct vma_remap_struct` (`vrm`): one move of `mremap`, as its steps pass it down — the
/// source range, its new length, the flags, the destination (once placed), and the CPU the
/// call runs on (the kernel's `current`).
#[doc(alias = "vma_remap_struct")]
#[derive(Debug, Clone, Copy)]
struct VmaRemap {
    cpu: CpuId,
    /// The source range's start.
    addr: u64,
    old_len: u64,
    new_len: u64,
    /// `MREMAP_*`.
    flags: u32,
    /// Where the mapping goes: the caller's `MREMAP_FIXED` address or a hint until
    /// `mremap_to` has placed it, the placed address in `move_vma`.
    new_addr: u64,
}

impl Mm {
    /// `mremap(addr, old_len, new_len, flags, new_addr)`: the new address of the mapping.
    #[doc(alias = "do_mremap")]
    pub fn mremap(
        &self,
        cpu: CpuId,
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: u32,
        new_addr: u64,
    ) -> Result<u64, Errno> {
        // check_mremap_params
        if flags & !(MREMAP_FIXED | MREMAP_MAYMOVE | MREMAP_DONTUNMAP) != 0 {
            return Err(Errno::EINVAL);
        }
        if !addr.is_multiple_of(PAGE_SIZE) {
            return Err(Errno::EINVAL);
        }
        let (old_len, new_len) = (page_align(old_len), page_align(new_len));
        if new_len == 0 || new_len > TASK_SIZE {
            return Err(Errno::EINVAL);
        }
        let implies_new = flags & (MREMAP_FIXED | MREMAP_DONTUNMAP) != 0;
        let max = self.machine().max_map_count();
        if implies_new {
            if new_addr > TASK_SIZE - new_len || !new_addr.is_multiple_of(PAGE_SIZE) {
                return Err(Errno::EINVAL);
            }
            if flags & MREMAP_MAYMOVE == 0 {
                return Err(Errno::EINVAL);
            }
            if flags & MREMAP_DONTUNMAP != 0 && old_len != new_len {
                return Err(Errno::EINVAL);
            }
            let (end_old, end_new) = (addr.wrapping_add(old_len), new_addr + new_len);
            if end_old > new_addr && end_new > addr {
                return Err(Errno::EINVAL);
            }
            if self.map_count() + 2 >= max.saturating_sub(3) {
                return Err(Errno::ENOMEM);
            }
        }
        if self.is_exited() {
            return Err(Errno::EFAULT);
        }
        let mut tree = self.mmap_lock.write();
        if flags & MREMAP_FIXED != 0 && old_len == new_len {
            let r = self.remap_move(&mut tree, cpu, addr, old_len, flags, new_addr);
            drop(tree);
            return r;
        }
        let (mut old_len, mut new_len) = (old_len, new_len);
        // check_prep_vma
        let Some(vma) = tree.vma_lookup(addr) else {
            return Err(Errno::EFAULT);
        };
        if matches!(vma.kind, VmaKind::Hugetlb) {
            old_len = old_len.next_multiple_of(PMD_SIZE);
            new_len = new_len.next_multiple_of(PMD_SIZE);
            if !addr.is_multiple_of(PMD_SIZE)
                || !new_addr.is_multiple_of(PMD_SIZE)
                || new_len > old_len
            {
                return Err(Errno::EINVAL);
            }
        }
        let expand = new_len > old_len;
        if expand || implies_new {
            // A shrinking move unmaps the tail first: only what is kept must lie in the VMA.
            check_resize(vma, addr, old_len.min(new_len), new_len, flags)?;
        }
        let populate = expand && vma.flags.contains(VmFlags::VM_LOCKED);
        let vrm = VmaRemap {
            cpu,
            addr,
            old_len,
            new_len,
            flags,
            new_addr,
        };
        let result = if implies_new {
            self.mremap_to(&mut tree, vrm)
        } else if new_len == old_len {
            Ok(addr)
        } else if !expand {
            // shrink_vma: always in place, whatever the old range spans.
            let end = addr.checked_add(old_len).ok_or(Errno::EINVAL)?;
            self.do_munmap_locked(&mut tree, cpu, addr + new_len, end)
                .map(|()| addr)
        } else {
            self.expand_vma(&mut tree, vrm)
        };
        drop(tree);
        if let Ok(at) = result {
            if populate {
                self.populate(cpu, at + old_len, at + new_len, true);
            }
        }
        result
    }

    /// `remap_move` (6.17+): a `MREMAP_FIXED` move without resizing may cover several VMAs.
    /// Each VMA's part of `[addr, addr + len)` moves on its own, in address order, keeping the
    /// gaps between them; the range may not start in a gap, and a VMA whose file places its
    /// mappings itself (`/dev/zero`) moves only alone. The result is where the first part
    /// went.
    fn remap_move(
        &self,
        tree: &mut VmaWriteGuard<'_>,
        cpu: CpuId,
        addr: u64,
        len: u64,
        flags: u32,
        new_addr: u64,
    ) -> Result<u64, Errno> {
        let Some(end) = addr.checked_add(len) else {
            return Err(Errno::EFAULT);
        };
        let (mut res, mut seen) = (Err(Errno::EFAULT), false);
        let (mut last_end, mut target, mut cursor) = (0, new_addr, addr);
        while cursor < end {
            let Some(v) = tree.find_vma_intersection(cursor, end) else {
                break;
            };
            if !seen && addr < v.start {
                return Err(Errno::EFAULT);
            }
            let (vstart, vend) = (v.start, v.end);
            let a = vstart.max(addr);
            let l = end.min(vend) - a;
            let offset = if seen { vstart - last_end } else { 0 };
            last_end = vend;
            // vma_multi_allowed: not a file with its own get_unmapped_area.
            let multi = v.kind != VmaKind::DevZero || v.flags.contains(VmFlags::VM_MAYSHARE);
            if !multi && (seen || vend < end) {
                return Err(Errno::EFAULT);
            }
            let to = target + offset;
            if matches!(v.kind, VmaKind::Hugetlb) && (a % PMD_SIZE != 0 || to % PMD_SIZE != 0) {
                return Err(Errno::EINVAL);
            }
            check_resize(v, a, l, l, flags)?;
            let vrm = VmaRemap {
                cpu,
                addr: a,
                old_len: l,
                new_len: l,
                flags,
                new_addr: to,
            };
            let got = self.mremap_to(tree, vrm)?;
            if !seen {
                res = Ok(got);
            }
            seen = true;
            target = got + l;
            cursor = vend;
        }
        res
    }

    /// `expand_vma`: in place when `[addr, addr + old_len)` ends the VMA and the space after it
    /// is free (`vma_merge_extend`), else move if allowed.
    fn expand_vma(&self, tree: &mut VmaWriteGuard<'_>, vrm: VmaRemap) -> Result<u64, Errno> {
        let vma = tree.vma_lookup(vrm.addr).expect("checked");
        let delta = vrm.new_len - vrm.old_len;
        if vrm.addr + vrm.old_len == vma.end && tree.vma_expandable(vma.start, delta) {
            let key = vma.start;
            tree.merge_extend(key, delta);
            return Ok(vrm.addr);
        }
        if vrm.flags & MREMAP_MAYMOVE == 0 {
            return Err(Errno::ENOMEM);
        }
        let new_addr = new_area(tree, vrm.addr, vrm.new_len, 0, false)?;
        self.move_vma(tree, VmaRemap { new_addr, ..vrm })
    }

    /// `mremap_to`: `MREMAP_FIXED` (the target range is unmapped first) or `MREMAP_DONTUNMAP`.
    fn mremap_to(&self, tree: &mut VmaWriteGuard<'_>, mut vrm: VmaRemap) -> Result<u64, Errno> {
        let (cpu, addr, new_len) = (vrm.cpu, vrm.addr, vrm.new_len);
        let fixed = vrm.flags & MREMAP_FIXED != 0;
        if fixed {
            self.do_munmap_locked(tree, cpu, vrm.new_addr, vrm.new_addr + new_len)?;
            if tree.vma_lookup(addr).is_none() {
                return Err(Errno::EFAULT);
            }
        }
        if new_len < vrm.old_len {
            let end = addr.checked_add(vrm.old_len).ok_or(Errno::EINVAL)?;
            self.do_munmap_locked(tree, cpu, addr + new_len, end)?;
            vrm.old_len = new_len;
        }
        vrm.new_addr = new_area(tree, addr, new_len, vrm.new_addr, fixed)?;
        self.move_vma(tree, vrm)
    }

    /// `move_vma`: place the new VMA (`copy_vma`), move the page tables, then unmap the old
    /// range — or, for `MREMAP_DONTUNMAP`, keep it (emptied, no longer locked, its anon_vma
    /// unlinked if the whole VMA moved).
    fn move_vma(&self, tree: &mut VmaWriteGuard<'_>, vrm: VmaRemap) -> Result<u64, Errno> {
        let (cpu, old_addr, old_len) = (vrm.cpu, vrm.addr, vrm.old_len);
        let (new_addr, new_len) = (vrm.new_addr, vrm.new_len);
        if tree.map_count() >= self.machine().max_map_count().saturating_sub(3) {
            return Err(Errno::ENOMEM);
        }
        let vma = tree.vma_lookup(old_addr).expect("checked").clone();
        if matches!(vma.kind, VmaKind::Hugetlb) {
            tree.may_split_range(old_addr, old_addr + old_len)?;
        }
        let pgoff = vma.pgoff + ((old_addr - vma.start) >> 12);
        // Its page tables are about to move: no fault may be running in it (vma_start_write).
        tree.vma_start_write(old_addr, old_addr + old_len);
        tree.copy_vma(&vma, new_addr, new_addr + new_len, pgoff);
        let moved = move_page_tables(self, cpu, old_addr, new_addr, old_len);
        if moved < old_len {
            // A table could not be had: move back what moved (the old tables are all still
            // there, so this allocates nothing), then drop the new range.
            let back = move_page_tables(self, cpu, new_addr, old_addr, moved);
            vm_bug_on!(back < moved, "moving page tables back failed");
            self.do_munmap_locked(tree, cpu, new_addr, new_addr + new_len)?;
            return Err(Errno::ENOMEM);
        }
        if vrm.flags & MREMAP_DONTUNMAP != 0 {
            // The source VMA stays, empty: VM_LOCKED cleared; its anon_vma unlinked when the
            // whole VMA moved.
            if let Some(old) = tree.vma_lookup(old_addr) {
                let (key, whole) = (
                    old.start,
                    old.start == old_addr && old.end == old_addr + old_len,
                );
                let f = old
                    .flags
                    .minus(VmFlags::VM_LOCKED.union(VmFlags::VM_LOCKONFAULT));
                let anon = if whole { 0 } else { old.anon_vma() };
                tree.set_flags_and_anon(key, f, anon);
            }
            return Ok(new_addr);
        }
        // unmap_source_vma: a failure here (a split past max_map_count) is not the caller's;
        // Linux only fixes its accounting. With old_len 0 (a shared mapping duplicated)
        // nothing goes.
        if old_len != 0 {
            let _ = self.do_munmap_locked(tree, cpu, old_addr, old_addr + old_len);
        }
        Ok(new_addr)
    }
}

/// The checks of `check_prep_vma` for a mremap that grows or moves.
fn check_resize(vma: &Vma, addr: u64, old_len: u64, new_len: u64, flags: u32) -> Result<(), Errno> {
    if old_len == 0
        && !vma
            .flags
            .intersects(VmFlags::VM_SHARED | VmFlags::VM_MAYSHARE)
    {
        return Err(Errno::EINVAL);
    }
    let no_expand = VmFlags::VM_DONTEXPAND | VmFlags::VM_PFNMAP;
    if flags & MREMAP_DONTUNMAP != 0 && vma.flags.intersects(no_expand) {
        return Err(Errno::EINVAL);
    }
    if old_len > vma.end - addr {
        return Err(Errno::EFAULT);
    }
    if new_len == old_len {
        return Ok(());
    }
    let pgoff = vma.pgoff + ((addr - vma.start) >> 12);
    if pgoff.checked_add(new_len >> 12).is_none() {
        return Err(Errno::EINVAL);
    }
    if vma.flags.intersects(no_expand) {
        return Err(Errno::EFAULT);
    }
    Ok(())
}

/// `vrm_set_new_addr`: where the moved mapping goes — `hint` itself with `fixed`, else a
/// search as `get_unmapped_area` for the VMA's kind would make (a hint only for
/// `MREMAP_DONTUNMAP`).
fn new_area(tree: &VmaTree, addr: u64, len: u64, hint: u64, fixed: bool) -> Result<u64, Errno> {
    if fixed {
        return Ok(hint);
    }
    let vma = tree.vma_lookup(addr).expect("checked");
    let pgoff = vma.pgoff + ((addr - vma.start) >> 12);
    let shared = vma.flags.contains(VmFlags::VM_MAYSHARE);
    let _ = MAP_SHARED;
    match vma.kind {
        VmaKind::Hugetlb => tree.hugetlb_get_unmapped_area(len, hint),
        VmaKind::DevZero if !shared => tree.thp_get_unmapped_area(len, hint, pgoff << 12),
        VmaKind::Anon => tree.get_unmapped_area(len, hint, len.is_multiple_of(PMD_SIZE)),
        _ => tree.get_unmapped_area(len, hint, false),
    }
}

#[inline]
fn pmd_slot(mm: &Mm, addr: u64) -> Option<Slot> {
    crate::pgtable::find_pmd(mm.machine().phys(), mm.pgd(), addr)
}

/// `move_page_tables`: move the entries of `[old_addr, old_addr + len)` to `new_addr`.
/// Returns the length moved (short only when a table cannot be allocated).
pub(crate) fn move_page_tables(mm: &Mm, cpu: CpuId, old_addr: u64, new_addr: u64, len: u64) -> u64 {
    let phys = mm.machine().phys();
    let mut done = 0;
    let mut flushed_any = false;
    while done < len {
        let (old, new) = (old_addr + done, new_addr + done);
        let extent = (PMD_SIZE - old % PMD_SIZE)
            .min(PMD_SIZE - new % PMD_SIZE)
            .min(len - done);
        let Some(old_pmd) = pmd_slot(mm, old) else {
            done += extent;
            continue;
        };
        let e = old_pmd.load(phys);
        if e.is_none() {
            done += extent;
            continue;
        }
        let Ok(new_pmd) = crate::pgtable::pmd_alloc(mm, cpu, new) else {
            break;
        };
        flushed_any = true;
        if e.huge() {
            if extent == PMD_SIZE {
                huge_memory::move_huge_pmd(mm, old_pmd.table, new_pmd.table, old, new);
                done += extent;
                continue;
            }
            huge_memory::split_huge_pmd(mm, cpu, old_pmd, old & !(PMD_SIZE - 1));
        } else if extent == PMD_SIZE && move_normal_pmd(mm, old_pmd.table, new_pmd.table, old, new)
        {
            done += extent;
            continue;
        }
        let old_table = old_pmd.load(phys);
        if old_table.is_none() || old_table.huge() {
            done += extent;
            continue;
        }
        let Ok(new_table) = crate::pgtable::pte_alloc(mm, cpu, new_pmd) else {
            break;
        };
        move_ptes(mm, old_table.pfn(), new_table, old, new, extent);
        done += extent;
    }
    if flushed_any {
        mm.flush_tlb(cpu, Some(len / PAGE_SIZE));
    }
    done
}

/// `move_normal_pmd`: with both addresses 2 MiB aligned and the new PMD entry empty, the
/// whole PTE table moves by moving the one PMD entry, from the one mapping `old_addr` in the PMD
/// table `old` to the one mapping `new_addr` in `new`. Returns false (nothing moved) otherwise.
fn move_normal_pmd(mm: &Mm, old: Pfn, new: Pfn, old_addr: u64, new_addr: u64) -> bool {
    let phys = mm.machine().phys();
    // Lock order: old PMD lock -> new PMD lock.
    let pmds = TablePair::lock(phys, Level::Pmd, old, new);
    let e = pmds.first().get(old_addr);
    if e.is_none() || e.huge() || !pmds.second().get(new_addr).is_none() {
        return false;
    }
    pmds.first().set(old_addr, Entry::NONE);
    pmds.second().set(new_addr, e);
    true
}

/// `move_ptes`: move `len` bytes of PTEs from `old` (in `old_table`) to `new` (in `new_table`).
fn move_ptes(mm: &Mm, old_table: Pfn, new_table: Pfn, old: u64, new: u64, len: u64) {
    let phys = mm.machine().phys();
    // Lock order: old PTE lock -> new PTE lock (one lock when both ranges share the table).
    let ptes = TablePair::lock(phys, Level::Pte, old_table, new_table);
    let mut off = 0;
    while off < len {
        let e = ptes.first().take(old + off);
        if !e.is_none() {
            ptes.second().write(new + off, e);
        }
        off += PAGE_SIZE;
    }
}
