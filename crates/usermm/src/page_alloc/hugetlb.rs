//! The `nr_hugepages` pool of order-9 pages (`mm/hugetlb.c`, reduced): filled at boot,
//! taken by hugetlb faults, refilled when a hugetlb page is freed.

use std::sync::atomic::Ordering::Relaxed;

use super::PhysMem;
use crate::addr::Pfn;

impl PhysMem {
    pub fn hugetlb_total(&self) -> u64 {
        self.hugetlb_total
    }

    pub fn hugetlb_free(&self) -> u64 {
        self.hugetlb_pool.lock().len() as u64
    }
}

impl PhysMem {
    /// Take an order-9 page from the `nr_hugepages` pool (`alloc_hugetlb_folio`).
    pub(crate) fn alloc_hugetlb_page(&self) -> Option<Pfn> {
        let pfn = self.hugetlb_pool.lock().pop()?;
        self.meta(pfn).refcount.store(1, Relaxed);
        Some(pfn)
    }
}
