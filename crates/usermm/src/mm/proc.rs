//! The mm's `/proc` files: `/proc/<pid>/maps` and `/proc/<pid>/smaps_rollup`.
//!
//! Mirrors `fs/proc/task_mmu.c` (`show_map_vma` through the VMA tree's own renderer,
//! `show_smaps_rollup`). The page-table walks take the mmap lock for reading, as the kernel's
//! `m_start` does. Differences: `smaps_rollup`'s Rss and Anonymous come from the rss counters
//! rather than a page walk (`Mm::validate` checks that the walk agrees), Pss is printed equal
//! to Rss (shared pages are not divided among their mappers), and only the lines the engine
//! models are printed.

use serde::Serialize;

use super::{vma, Mm, RssItem};
use crate::addr::PAGE_SIZE;

impl Mm {
    /// `/proc/<pid>/maps`.
    pub fn maps(&self) -> String {
        self.mmap_lock.read().render_maps()
    }

    /// `/proc/<pid>/smaps_rollup` figures, from the rss counters (the walk agrees: see
    /// [`Mm::validate`]).
    pub fn smaps_rollup(&self) -> SmapsRollup {
        let kb = PAGE_SIZE as i64 / 1024;
        let thp = self.count_thp_mappings();
        SmapsRollup {
            rss_kb: (self.rss_total() * kb) as u64,
            anonymous_kb: (self.rss(RssItem::AnonPages) * kb) as u64,
            anon_huge_pages_kb: thp * 2048,
            shmem_kb: (self.rss(RssItem::ShmemPages) * kb) as u64,
            locked_kb: self.locked_pages() * PAGE_SIZE / 1024,
        }
    }

    fn count_thp_mappings(&self) -> u64 {
        let tree = self.mmap_lock.read();
        let phys = self.machine.phys();
        let hz = self.machine.huge_zero().pfn();
        let mut n = 0;
        crate::pgtable::for_each_leaf(phys, self.pgd, |_, e, huge| {
            if huge
                && Some(e.pfn()) != hz
                && !phys.meta(e.pfn()).test(crate::page_alloc::meta::PG_HUGETLB)
            {
                n += 1;
            }
        });
        drop(tree);
        n
    }

    fn locked_pages(&self) -> u64 {
        let tree = self.mmap_lock.read();
        let phys = self.machine.phys();
        let mut n = 0;
        crate::pgtable::for_each_leaf(phys, self.pgd, |addr, e, huge| {
            if let Some(v) = tree.find_vma(addr) {
                if v.start <= addr && v.flags.contains(vma::VmFlags::VM_LOCKED) && !e.special() {
                    n += if huge { 512 } else { 1 };
                }
            }
        });
        n
    }
}

/// `/proc/<pid>/smaps_rollup`, the lines the engine models (kB).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct SmapsRollup {
    pub rss_kb: u64,
    pub anonymous_kb: u64,
    pub anon_huge_pages_kb: u64,
    pub shmem_kb: u64,
    pub locked_kb: u64,
}

impl SmapsRollup {
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut line =
            |l: &str, v: u64| s.push_str(&format!("{:<16}{:>8} kB\n", format!("{l}:"), v));
        line("Rss", self.rss_kb);
        line("Pss", self.rss_kb);
        line("Pss_Anon", self.anonymous_kb);
        line("Pss_Shmem", self.shmem_kb);
        line("Anonymous", self.anonymous_kb);
        line("AnonHugePages", self.anon_huge_pages_kb);
        line("Locked", self.locked_kb);
        s
    }
}
