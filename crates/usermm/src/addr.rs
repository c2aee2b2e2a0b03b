//! Units: page frame numbers and allocation orders, and the address-space geometry.
//!
//! A PFN and an order are newtypes, so neither can be passed where an address is expected.
//! User virtual addresses stay `u64`, as the system calls take them (`unsigned long addr`); a
//! `Vaddr` newtype was tried and never adopted, so it is gone. The
//! geometry is x86-64 with 4 KiB pages and 4-level paging: PMD = 2 MiB, PUD = 1 GiB,
//! PGD entry = 512 GiB, 47-bit user space (`TASK_SIZE` = 2^47 − 4096).

use serde::Serialize;

pub const PAGE_SHIFT: u32 = 12;
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;
pub const PAGE_MASK: u64 = !(PAGE_SIZE - 1);
pub const PMD_SHIFT: u32 = 21;
pub const PMD_SIZE: u64 = 1 << PMD_SHIFT;
pub const PMD_MASK: u64 = !(PMD_SIZE - 1);
pub const PUD_SHIFT: u32 = 30;
pub const PUD_SIZE: u64 = 1 << PUD_SHIFT;
pub const PGDIR_SHIFT: u32 = 39;
pub const PGDIR_SIZE: u64 = 1 << PGDIR_SHIFT;
/// Entries per table page at every level.
pub const PTRS_PER_TABLE: usize = 512;
/// `HPAGE_PMD_ORDER`: a PMD-mapped THP is an order-9 compound page.
pub const HPAGE_PMD_ORDER: Order = Order(9);
pub const HPAGE_PMD_NR: u64 = 1 << 9;
/// `TASK_SIZE` on x86-64 with 4-level paging: the top of user space, minus the guard page.
pub const TASK_SIZE: u64 = (1 << 47) - PAGE_SIZE;
/// `mmap_min_addr`'s usual default.
pub const MMAP_MIN_ADDR: u64 = 65536;

/// `MAX_ORDER` in the sense of v4.x–6.3 (`NR_PAGE_ORDERS` = 11): the buddy allocator has free
/// lists for orders `0..=MAX_PAGE_ORDER` (4 KiB to 4 MiB).
pub const MAX_PAGE_ORDER: u8 = 10;

/// A page frame number: the index of a 4 KiB frame of emulated RAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Pfn(pub u64);

impl Pfn {
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
    #[inline]
    #[expect(
        clippy::should_implement_trait,
        reason = "PFN plus a page count, not Pfn + Pfn"
    )]
    pub fn add(self, n: u64) -> Pfn {
        Pfn(self.0 + n)
    }
    /// The physical address of the frame's first byte.
    #[inline]
    pub fn phys(self) -> u64 {
        self.0 << PAGE_SHIFT
    }
}

/// A buddy allocation order: `1 << order` contiguous frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Order(pub u8);

impl Order {
    pub const ZERO: Order = Order(0);
    #[inline]
    pub fn nr_pages(self) -> u64 {
        1 << self.0
    }
}

/// Round `x` up to a multiple of the power of two `align`; `None` on overflow.
#[inline]
pub fn align_up(x: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    x.checked_add(align - 1).map(|v| v & !(align - 1))
}

#[inline]
pub fn align_down(x: u64, align: u64) -> u64 {
    debug_assert!(align.is_power_of_two());
    x & !(align - 1)
}
