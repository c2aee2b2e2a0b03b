//! [`OwnedPages`]: the one way a user of the library allocates and frees frames.
//!
//! Inside the crate the allocator hands out raw PFNs (`alloc_pages`, `free_pages`,
//! `put_page`, `release_pages`, the LRU and the backing's writes are all `pub(crate)`): the mm
//! keeps a frame's references and mapcounts in step with the page tables that map it, and only
//! a debug `vm_bug_on!` would catch a frame freed under a live PTE. Outside the crate a frame is
//! an [`OwnedPages`]: allocated by [`PhysMem::alloc_owned`], read and written only within its
//! own block, and freed exactly once, when the handle is dropped (or by [`OwnedPages::free`]
//! on a CPU of the caller's choosing). A handle is never mapped by a page table while the
//! caller still holds it: the one API that maps a caller's frames,
//! [`Mm::map_pfn_range`](crate::Mm::map_pfn_range), takes the handle by value and frees the
//! block only when the last VMA mapping it is gone (a driver's `vm_ops->close`).
//!
//! The compile-fail examples on [`OwnedPages`] are the proof that outside the crate there is no
//! other way.

use super::{Gfp, PhysMem};
use crate::addr::{Order, Pfn, PAGE_SIZE};
use crate::cpu::CpuId;
use crate::error::AllocError;

/// A block of `1 << order` frames the holder owns: one reference, never mapped, freed on drop
/// (`__free_pages` on the CPU that allocated it). Reads and writes reach its own frames only.
///
/// The examples below do not compile outside the crate, each for the error its fence names
/// (rustdoc checks the code only on nightly; each was checked by hand with rustc: a private
/// method, a private field, a use after move).
///
/// ```compile_fail,E0624
/// // The raw free is not reachable outside the crate: a page cannot be freed while mapped.
/// fn free_under_a_pte(m: &usermm::Machine, pfn: usermm::Pfn) {
///     m.phys().free_pages(usermm::CpuId(0), pfn, usermm::Order(0));
/// }
/// ```
/// ```compile_fail,E0624
/// fn put_under_a_pte(m: &usermm::Machine, pfn: usermm::Pfn) {
///     m.phys().put_page(usermm::CpuId(0), pfn);
/// }
/// ```
/// ```compile_fail,E0624
/// fn release_under_a_pte(m: &usermm::Machine, pfn: usermm::Pfn) {
///     m.phys().release_pages(usermm::CpuId(0), &[pfn]);
/// }
/// ```
/// ```compile_fail,E0624
/// // Nor is the raw allocation, whose PFN could later be freed by hand.
/// fn raw_alloc(m: &usermm::Machine) {
///     let _ = m.phys().alloc_pages(usermm::CpuId(0), usermm::Order(0), usermm::page_alloc::Gfp::KERNEL);
/// }
/// ```
/// ```compile_fail,E0624
/// // No public item writes a frame the caller does not own: not the backing store...
/// fn write_a_table(m: &usermm::Machine, table: usermm::Pfn) {
///     m.phys().backing().write(table, 0, &[0xff; 8]);
/// }
/// ```
/// ```compile_fail,E0624
/// fn copy_over_a_table(m: &usermm::Machine, src: usermm::Pfn, table: usermm::Pfn) {
///     m.phys().backing().copy_frame(src, table);
/// }
/// ```
/// ```compile_fail,E0624
/// // ...not a user walk's word stores (any frame: `Pfn`'s field is public)...
/// fn store_words(m: &usermm::Machine, table: usermm::Pfn) {
///     m.phys().backing().write_words(table, 0..512, 1, |_| u64::MAX);
/// }
/// ```
/// ```compile_fail,E0624
/// // ...nor its loads, which would read a page table or another mm's data...
/// fn load_words(m: &usermm::Machine, table: usermm::Pfn) -> u64 {
///     m.phys().backing().read_words(table, 0..512, 1)
/// }
/// ```
/// ```compile_fail,E0624
/// // ...nor a prefault, which may write zeros over every frame...
/// fn prefault_again(m: &usermm::Machine) {
///     let _ = m.phys().backing().prefault();
/// }
/// ```
/// ```compile_fail,E0624
/// // ...nor the LRU or a compound page's split...
/// fn lru(m: &usermm::Machine, pfn: usermm::Pfn) {
///     m.phys().lru_cache_add(usermm::CpuId(0), pfn);
/// }
/// ```
/// ```compile_fail,E0624
/// fn split(m: &usermm::Machine, pfn: usermm::Pfn) {
///     m.phys().split_compound(usermm::CpuId(0), pfn);
/// }
/// ```
/// ```compile_fail,E0624
/// // ...nor a gather, which frees whatever it is handed...
/// fn gather(mm: &usermm::Mm, pfn: usermm::Pfn) {
///     let mut tlb = usermm::mm::mmu_gather::MmuGather::new(
///         mm,
///         usermm::CpuId(0),
///         usermm::mm::mmu_gather::FullMm::No,
///     );
/// }
/// ```
/// ```compile_fail,E0624
/// // ...nor the huge zero page's reference count, which its PMDs rely on...
/// fn put_huge_zero(m: &usermm::Machine) {
///     m.huge_zero().put_huge_zero_page(usermm::CpuId(0));
/// }
/// ```
/// ```compile_fail,E0616
/// // ...nor a page's counts.
/// fn map_count(m: &usermm::Machine, pfn: usermm::Pfn) {
///     m.phys().meta(pfn).mapcount.store(0, std::sync::atomic::Ordering::Relaxed);
/// }
/// ```
/// ```compile_fail,E0382
/// // A handle's block outlives no use of it: freed on drop, it cannot be used after.
/// fn use_after_free(m: &usermm::Machine) {
///     let mut p = m.phys().alloc_owned(usermm::CpuId(0), usermm::Order(0), usermm::page_alloc::Gfp::KERNEL).unwrap();
///     p.free(usermm::CpuId(0));
///     p.write(0, 0, b"x");
/// }
/// ```
/// ```
/// // What a caller can do: own a block, use its own frames, give it back.
/// use usermm::page_alloc::Gfp;
/// let m = usermm::Machine::new(usermm::MachineConfig { mem: 64 << 20, ..Default::default() }).unwrap();
/// let mut p = m.phys().alloc_owned(usermm::CpuId(0), usermm::Order(1), Gfp::ZERO).unwrap();
/// p.write(1, 8, b"frame 1");
/// let mut buf = [0u8; 7];
/// p.read(1, 8, &mut buf);
/// drop(p);
/// m.phys().validate().unwrap();
/// ```
#[derive(Debug)]
#[must_use = "dropping the handle frees its frames"]
pub struct OwnedPages<'a> {
    phys: &'a PhysMem,
    pfn: Pfn,
    order: Order,
    cpu: CpuId,
}

impl PhysMem {
    /// `alloc_pages(gfp, order)` on `cpu`, as a handle that frees the block when dropped.
    #[doc(alias = "alloc_pages")]
    pub fn alloc_owned(
        &self,
        cpu: CpuId,
        order: Order,
        gfp: Gfp,
    ) -> Result<OwnedPages<'_>, AllocError> {
        let pfn = self.alloc_pages(cpu, order, gfp)?;
        Ok(OwnedPages {
            phys: self,
            pfn,
            order,
            cpu,
        })
    }
}

impl<'a> OwnedPages<'a> {
    /// The first frame of the block.
    pub fn pfn(&self) -> Pfn {
        self.pfn
    }

    pub fn order(&self) -> Order {
        self.order
    }

    pub fn nr_pages(&self) -> u64 {
        self.order.nr_pages()
    }

    /// Copy bytes `off..off + buf.len()` of frame `index` of the block into `buf` (zeros with
    /// sparse backing). Panics outside the block.
    pub fn read(&self, index: u64, off: usize, buf: &mut [u8]) {
        self.check(index, off, buf.len());
        self.phys.backing.read(self.pfn.add(index), off, buf);
    }

    /// Copy `data` into frame `index` of the block at `off` (dropped with sparse backing).
    /// Panics outside the block.
    pub fn write(&mut self, index: u64, off: usize, data: &[u8]) {
        self.check(index, off, data.len());
        self.phys.backing.write(self.pfn.add(index), off, data);
    }

    /// Free the block now, on `cpu` (`__free_pages`).
    #[doc(alias = "__free_pages")]
    pub fn free(mut self, cpu: CpuId) {
        self.cpu = cpu;
    }

    fn check(&self, index: u64, off: usize, len: usize) {
        assert!(
            index < self.nr_pages() && off.checked_add(len).is_some_and(|e| e as u64 <= PAGE_SIZE),
            "outside the owned block"
        );
    }

    /// Whether the block is `phys`'s.
    pub(crate) fn is_of(&self, phys: &PhysMem) -> bool {
        std::ptr::eq(self.phys, phys)
    }

    /// Give up the handle without freeing: the caller (the crate) now owns the block's one
    /// reference, as `(pfn, order, allocating cpu)`.
    pub(crate) fn into_raw(self) -> (&'a PhysMem, Pfn, Order, CpuId) {
        let me = std::mem::ManuallyDrop::new(self);
        (me.phys, me.pfn, me.order, me.cpu)
    }
}

impl Drop for OwnedPages<'_> {
    fn drop(&mut self) {
        // The handle holds the block's only reference and nothing maps it: this cannot fail.
        let r = self.phys.free_pages(self.cpu, self.pfn, self.order);
        vm_bug_on!(r.is_err(), "owned block {:#x}: {:?}", self.pfn.0, r);
    }
}
