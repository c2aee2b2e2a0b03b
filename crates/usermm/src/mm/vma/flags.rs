//! `vm_flags_t`: the `VM_*` bits of a VMA (`include/linux/mm.h`), with Linux's values, and
//! their `Debug` rendering in the kernel's names.

use std::fmt;

use crate::mm::mman::{PROT_EXEC, PROT_NONE, PROT_READ, PROT_WRITE};
use std::ops::{BitAnd, BitOr, BitOrAssign};

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
    /// A stack: the search keeps [`STACK_GUARD_GAP`](super::STACK_GUARD_GAP) free below it.
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
    /// as mmap ignores unknown prot bits (probed on 6.18: `PROT` 0x80 is accepted by mmap;
    /// mprotect's caller rejects the same value first, with `EINVAL`).
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
