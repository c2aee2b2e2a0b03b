//! `fork`'s half of the mm: a new address space that shares every anonymous page of the old
//! one copy-on-write.
//!
//! Mirrors `kernel/fork.c` (`dup_mm`, `dup_mmap`), `mm/memory.c` (`copy_page_range`,
//! `copy_pud_range`, `copy_pmd_range`, `copy_pte_range`, `copy_present_pte`) and `mm/rmap.c`
//! (`anon_vma_fork`). A huge PMD (THP, huge zero page, hugetlb) is copied by `huge_memory.rs`
//! (`copy_huge_pmd` of `mm/huge_memory.c`, with `copy_hugetlb_page_range`'s one PMD).
//!
//! ```text
//!  parent: mmap_write_lock ─ every VMA write-locked (per-VMA locks) ─┐
//!  child:  mmap_write_lock ───────────────────────────────────────────┤
//!    for each VMA (not VM_DONTCOPY):  copy it (no VM_LOCKED; new anon_vma linked to the parent's)
//!      if it needs its page tables (anon_vma, VM_PFNMAP, hugetlb) and is not VM_WIPEONFORK:
//!        PTE:  child entry = parent entry; the page's mapcount +1, its folio a reference;
//!              a writable entry of a private mapping loses RW on *both* sides
//!        PMD:  THP the same (entire mapcount), with a deposited table for the child;
//!              the huge zero page: copied, with the reference its policy wants
//!  flush the parent's TLB (its entries just lost RW) ─ unlock both
//! ```
//! After that, the first write to a shared page on either side faults: `do_wp_page` reuses the
//! page if the other side let go of it, else copies it (see `fault/wp.rs`). Exit of either side
//! drops its mapcounts and references; a page goes back to the allocator with the last.
//!
//! # Invariants
//! - A page's mapcount is the number of entries mapping it in every mm of the fork family
//!   (checked by `Mm::validate`, which walks the family).
//! - No page table is shared by two mms: the child's tables are all its own.
//! - A page mapped by two mms is never mapped writable by either (private mappings).
//! - With `huge_zero.per_mm_ref` the child takes its own one reference on the huge zero page
//!   when it copies a huge-zero PMD (`MMF_HUGE_ZERO_PAGE` is not inherited); without it, one
//!   reference per copied PMD. Either way exit balances them.
//!
//! # Locks
//! `parent mmap_lock (write) -> child mmap_lock (write) -> child PTE/PMD lock -> parent PTE/PMD
//! lock` (the kernel nests the source PTL inside the destination's, `SINGLE_DEPTH_NESTING`).
//!
//! # Differences from Linux
//! - Shared hugetlb mappings have their tables copied too (the engine has no hugetlbfs page
//!   cache to fault them back from): the child shares the pages, as it would after a fault.
//! - No `anon_vma` reuse (`anon_vma_clone` may hand the child an ancestor's idle anon_vma):
//!   every forked VMA with pages gets a new one. No GUP pins, so no page ever has to be copied
//!   at fork time (`folio_try_dup_anon_rmap` never fails).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::vma::{VmFlags, Vma, VmaKind};
use super::{huge_memory, rmap, Mm, RssItem};
use crate::addr::{Pfn, PAGE_SIZE};
use crate::cpu::CpuId;
use crate::error::Errno;
use crate::page_alloc::meta::PG_ANON;
use crate::pgtable::{self, pmd_tables, table_entries, Level, TablePair, _PAGE_RW};
use crate::stats::VmItem;

impl Mm {
    /// `fork()`'s `dup_mm`: a new address space with a copy of this one's VMAs, sharing its
    /// anonymous pages copy-on-write. The child has `mm_users` = 1 (put it with
    /// [`Mm::mmput`]); it joins this mm's fork family (see [`Mm::validate`]).
    ///
    /// Errors: `ENOMEM` when memory for the child's page tables runs out (the partial child
    /// is torn down, as `dup_mm` does) or this mm has exited.
    #[doc(alias = "dup_mm")]
    #[doc(alias = "dup_mmap")]
    pub fn fork(&self, cpu: CpuId) -> Result<Arc<Mm>, Errno> {
        if self.is_exited() {
            return Err(Errno::ENOMEM);
        }
        let child = Mm::new_in_family(&self.machine, cpu, Arc::clone(&self.family))?;
        child
            .rlimit_data
            .store(self.rlimit_data.load(Relaxed), Relaxed);
        let r = self.dup_mmap(&child, cpu);
        if r.is_err() {
            child.mmput(cpu);
        }
        r.map(|()| child)
    }

    fn dup_mmap(&self, child: &Mm, cpu: CpuId) -> Result<(), Errno> {
        let mut parent = self.mmap_lock.write();
        // Lock order: parent mmap_lock (write) -> child mmap_lock (write).
        let mut tree = child.mmap_lock.write();
        parent.vma_start_write_all();
        let copied = tree.dup_for_fork(&parent, &child.anon_vma_ids);
        let mut result = Ok(());
        for v in &copied {
            let needs_copy = v.anon_vma() != 0
                || v.flags.contains(VmFlags::VM_PFNMAP)
                || matches!(v.kind, VmaKind::Hugetlb);
            if !needs_copy || v.flags.contains(VmFlags::VM_WIPEONFORK) {
                continue;
            }
            if let Err(e) = copy_page_range(child, self, v, cpu) {
                result = Err(e);
                break;
            }
        }
        // The parent's writable entries just became read-only: flush them (flush_tlb_mm).
        if !copied.is_empty() {
            self.flush_tlb(cpu, None);
        }
        drop(tree);
        drop(parent);
        result
    }
}

/// `copy_page_range` for one VMA `v` (the child's copy; same range in both mms).
fn copy_page_range(dst: &Mm, src: &Mm, v: &Vma, cpu: CpuId) -> Result<(), Errno> {
    let phys = src.machine().phys();
    let copy = CopyContext {
        dst,
        src,
        cpu,
        cow: v.is_cow_mapping(),
    };
    for (pmd_table, start, end) in pmd_tables(phys, src.pgd(), v.start, v.end) {
        for (src_pmd, e, addr, next) in table_entries(phys, pmd_table, Level::Pmd, start, end) {
            let dst_pmd = pgtable::pmd_alloc(dst, cpu, addr).map_err(|_| Errno::ENOMEM)?;
            if e.huge() {
                huge_memory::copy_huge_pmd(dst, src, cpu, dst_pmd, src_pmd, copy.cow)?;
            } else {
                let dst_table = pgtable::pte_alloc(dst, cpu, dst_pmd).map_err(|_| Errno::ENOMEM)?;
                copy.copy_pte_range(dst_table, e.pfn(), addr, next);
            }
        }
    }
    Ok(())
}

/// What every level of one VMA's copy shares: the two mms, the CPU, and whether the mapping
/// is copy-on-write (the kernel's `copy_page_range` passes `dst_vma` and `src_vma` down, and
/// each level reads the rest from them).
struct CopyContext<'a> {
    dst: &'a Mm,
    src: &'a Mm,
    cpu: CpuId,
    /// `is_cow_mapping(src_vma->vm_flags)`: a writable entry loses RW on both sides.
    cow: bool,
}

impl CopyContext<'_> {
    /// `copy_pte_range` + `copy_present_pte` over `[addr, end)` of one PTE table, under both
    /// tables' locks.
    #[doc(alias = "copy_present_pte")]
    fn copy_pte_range(&self, dst_table: Pfn, src_table: Pfn, addr: u64, end: u64) {
        let machine = self.src.machine();
        let phys = machine.phys();
        let (mut anon, mut shmem, mut first) = (0i64, 0i64, 0i64);
        // Lock order: child PTE lock -> parent PTE lock.
        let ptes = TablePair::lock(phys, Level::Pte, dst_table, src_table);
        let (d, s) = (ptes.first(), ptes.second());
        let mut a = addr;
        while a < end {
            let at = a;
            a += PAGE_SIZE;
            let mut e = s.get(at);
            if !e.maps_frame() {
                continue;
            }
            if !e.special() {
                let head = rmap::compound_head(phys, e.pfn());
                if rmap::folio_try_dup_anon_rmap_pte(phys, e.pfn()) {
                    first += 1;
                }
                if phys.meta(head).test(PG_ANON) {
                    anon += 1;
                } else {
                    shmem += 1;
                }
                if self.cow && e.writable() {
                    // ptep_set_wrprotect on the parent; the child gets the same read-only entry.
                    e = e.with_bits(0, _PAGE_RW);
                    s.write(at, e);
                }
            }
            d.write(at, e);
        }
        self.dst.add_rss(self.cpu, RssItem::AnonPages, anon);
        self.dst.add_rss(self.cpu, RssItem::ShmemPages, shmem);
        if first != 0 {
            machine.vmstat().add(self.cpu, VmItem::NrAnonPages, first);
        }
    }
}
