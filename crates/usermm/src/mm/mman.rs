//! The constants of mmap(2), mprotect(2) and madvise(2), with Linux's values: `PROT_*`,
//! `MAP_*` and `MADV_*`, defined once for the whole engine.
//!
//! Mirrors `include/uapi/asm-generic/mman-common.h` and `arch/x86/include/uapi/asm/mman.h`.

pub const PROT_NONE: u32 = 0;
pub const PROT_READ: u32 = 1;
pub const PROT_WRITE: u32 = 2;
pub const PROT_EXEC: u32 = 4;
pub const PROT_SEM: u32 = 8;
pub const PROT_GROWSDOWN: u32 = 0x0100_0000;
pub const PROT_GROWSUP: u32 = 0x0200_0000;

pub const MAP_SHARED: u32 = 0x01;
pub const MAP_PRIVATE: u32 = 0x02;
pub const MAP_SHARED_VALIDATE: u32 = 0x03;
pub const MAP_TYPE: u32 = 0x0f;
pub const MAP_FIXED: u32 = 0x10;
pub const MAP_ANONYMOUS: u32 = 0x20;
pub const MAP_GROWSDOWN: u32 = 0x0100;
pub const MAP_LOCKED: u32 = 0x2000;
pub const MAP_NORESERVE: u32 = 0x4000;
pub const MAP_POPULATE: u32 = 0x8000;
pub const MAP_NONBLOCK: u32 = 0x1_0000;
pub const MAP_HUGETLB: u32 = 0x4_0000;
pub const MAP_FIXED_NOREPLACE: u32 = 0x10_0000;
/// Where a `MAP_HUGETLB` mapping's page size (its log2) sits in the flags
/// (`HUGETLB_FLAG_ENCODE_SHIFT` of `uapi/asm-generic/hugetlb_encode.h`).
pub const MAP_HUGE_SHIFT: u32 = 26;
/// `MAP_HUGETLB` of 2 MiB pages: log2(2 MiB) = 21 in the size bits.
pub const MAP_HUGE_2MB: u32 = 21 << MAP_HUGE_SHIFT;
/// `LEGACY_MAP_MASK`: the flags `MAP_SHARED_VALIDATE` accepts on a file without `MAP_SYNC`
/// (`MAP_SHARED`, `MAP_PRIVATE`, `MAP_FIXED`, `MAP_ANONYMOUS`, `MAP_DENYWRITE`,
/// `MAP_EXECUTABLE`, `MAP_UNINITIALIZED`, `MAP_GROWSDOWN`, `MAP_LOCKED`, `MAP_NORESERVE`,
/// `MAP_POPULATE`, `MAP_NONBLOCK`, `MAP_STACK`, `MAP_HUGETLB`). Not `MAP_FIXED_NOREPLACE`.
pub const LEGACY_MAP_MASK: u32 = 0x01
    | 0x02
    | 0x10
    | 0x20
    | 0x800
    | 0x1000
    | 0x400_0000
    | 0x100
    | 0x2000
    | 0x4000
    | 0x8000
    | 0x1_0000
    | 0x2_0000
    | 0x4_0000;

pub const MADV_NORMAL: i32 = 0;
pub const MADV_RANDOM: i32 = 1;
pub const MADV_SEQUENTIAL: i32 = 2;
pub const MADV_WILLNEED: i32 = 3;
pub const MADV_DONTNEED: i32 = 4;
pub const MADV_FREE: i32 = 8;
pub const MADV_REMOVE: i32 = 9;
pub const MADV_DONTFORK: i32 = 10;
pub const MADV_DOFORK: i32 = 11;
pub const MADV_MERGEABLE: i32 = 12;
pub const MADV_UNMERGEABLE: i32 = 13;
pub const MADV_HUGEPAGE: i32 = 14;
pub const MADV_NOHUGEPAGE: i32 = 15;
pub const MADV_DONTDUMP: i32 = 16;
pub const MADV_DODUMP: i32 = 17;
pub const MADV_WIPEONFORK: i32 = 18;
pub const MADV_KEEPONFORK: i32 = 19;
pub const MADV_COLD: i32 = 20;
pub const MADV_PAGEOUT: i32 = 21;
pub const MADV_POPULATE_READ: i32 = 22;
pub const MADV_POPULATE_WRITE: i32 = 23;

/// `mremap` flags (`uapi/linux/mman.h`).
pub const MREMAP_MAYMOVE: u32 = 1;
pub const MREMAP_FIXED: u32 = 2;
pub const MREMAP_DONTUNMAP: u32 = 4;
