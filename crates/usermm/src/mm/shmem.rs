//! Shared anonymous memory: the minimal shmem object behind `MAP_SHARED|MAP_ANONYMOUS`.
//!
//! Mirrors the part of `mm/shmem.c` such a mapping uses (`shmem_zero_setup`, `shmem_fault`):
//! an object that owns its pages by offset, so that data outlives `MADV_DONTNEED` (which only
//! unmaps) and every piece of a split VMA sees the same pages.
//!
//! # Invariants
//! The object holds one reference on each of its pages; each PTE mapping one holds another
//! and one mapcount. Pages are freed when the last VMA piece drops the object.
//!
//! # Differences from Linux
//! No page cache, no swap, no LRU for shmem pages. The object lives exactly as long as its
//! VMAs — in every mm that maps it after a fork. No `i_mmap` tree of its mappings: a punched
//! hole (`MADV_REMOVE`) is zapped in every mapping of the object in the mms of the fork
//! family (`madvise.rs`), the only mms that can map it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::sync::class::SHMEM_PAGES;
use crate::sync::SpinLock;

use crate::addr::{Order, Pfn};
use crate::cpu::CpuId;
use crate::error::AllocError;
use crate::page_alloc::{Gfp, PhysMem};

/// The object behind one shared anonymous mapping.
pub struct Shmem {
    phys: Arc<PhysMem>,
    pages: SpinLock<HashMap<u64, Pfn>>,
}

impl std::fmt::Debug for Shmem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shmem")
            .field("pages", &self.pages.lock().len())
            .finish()
    }
}

impl Shmem {
    pub fn new(phys: Arc<PhysMem>) -> Arc<Shmem> {
        Arc::new(Shmem {
            phys,
            pages: SpinLock::new(&SHMEM_PAGES, HashMap::new()),
        })
    }

    /// The page at `index`, allocated zeroed on first use, with a reference for the caller.
    pub fn get_page(&self, cpu: CpuId, index: u64) -> Result<Pfn, AllocError> {
        let mut pages = self.pages.lock();
        let pfn = match pages.get(&index) {
            Some(&p) => p,
            None => {
                let p = self.phys.alloc_pages(cpu, Order(0), Gfp::ZERO)?;
                pages.insert(index, p);
                p
            }
        };
        self.phys.get_page(pfn);
        Ok(pfn)
    }

    /// `shmem_truncate_range` for `MADV_REMOVE`: drop the object's pages in
    /// `[index, index + nr)` (mapped ones live on until their PTEs are zapped).
    pub fn punch_hole(&self, index: u64, nr: u64) {
        let mut pages = self.pages.lock();
        let gone: Vec<Pfn> = (index..index + nr)
            .filter_map(|i| pages.remove(&i))
            .collect();
        drop(pages);
        self.phys.release_pages(CpuId(0), &gone);
    }

    pub fn nr_pages(&self) -> usize {
        self.pages.lock().len()
    }
}

impl Drop for Shmem {
    fn drop(&mut self) {
        let mut pages: Vec<Pfn> = self.pages.get_mut().drain().map(|(_, p)| p).collect();
        // The map's order is random; the free order is what a virtual run must repeat.
        pages.sort_unstable();
        self.phys.release_pages(CpuId(0), &pages);
    }
}
