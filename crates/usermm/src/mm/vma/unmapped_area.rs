//! Where a new mapping goes: `__get_unmapped_area`, the x86-64 top-down search with its
//! bottom-up fallback (`arch_get_unmapped_area_topdown`, `vm_unmapped_area`), hugetlb's and
//! THP's aligned variants (`hugetlb_get_unmapped_area`, `__thp_get_unmapped_area`).
//!
//! Mirrors `mm/mmap.c`, `arch/x86/kernel/sys_x86_64.c` and `mm/huge_memory.c`. Read-only: the
//! caller holds the mmap lock (for writing, as `do_mmap` does, since it inserts right after).
//!
//! The searches descend the gap index (`gap/`), as the kernel's descend the VMA tree's gap
//! metadata, in O(log n); the linear scans that define their results are kept for the tests.

use super::area::page_aligned;
use super::tree::VmaTree;
use crate::addr::{MMAP_MIN_ADDR, PAGE_MASK, PAGE_SIZE, PMD_SIZE, TASK_SIZE};
use crate::error::Errno;

impl VmaTree {
    /// `__get_unmapped_area` for a mapping without `MAP_FIXED`: where to put `len` bytes.
    ///
    /// `hint` is the raw mmap address: it is rounded down to a page and raised to
    /// `mmap_min_addr` if below (`round_hint_to_min`), then used as is when
    /// `[hint, hint + len)` is free and below `TASK_SIZE` (a `VM_GROWSDOWN` VMA above keeps its
    /// guard gap). Otherwise, or without a hint, a top-down search below `mmap_base` takes the
    /// highest gap that fits, and if none does, a bottom-up search from `TASK_UNMAPPED_BASE`
    /// (the x86 fallback).
    ///
    /// `align_thp`: the mapping is private anonymous and THP is built in. Then, when there is no
    /// hint and `len` is a multiple of 2 MiB, the area is 2 MiB aligned (6.18's anonymous branch;
    /// probed in THP `madvise` mode: 2 and 4 MiB aligned, 3 MiB and 4 MiB + 4 KiB not, and not
    /// with a hint). The search pads `len` by 2 MiB, as `__thp_get_unmapped_area` does, and
    /// falls back to the plain search if the padded one finds nothing. Shared anonymous memory
    /// passes false (`shmem_get_unmapped_area` with `shmem_enabled=never` does not align);
    /// private `/dev/zero` uses [`VmaTree::thp_get_unmapped_area`].
    ///
    /// Errors: `EINVAL` for `len == 0`; `ENOMEM` when `len > TASK_SIZE` or nothing fits.
    #[doc(alias = "__get_unmapped_area")]
    pub fn get_unmapped_area(&self, len: u64, hint: u64, align_thp: bool) -> Result<u64, Errno> {
        let len = Self::check_len(len)?;
        let hint = round_hint_to_min(hint);
        let addr = if align_thp && hint == 0 && len % PMD_SIZE == 0 {
            match self.thp_area(len, 0, 0) {
                Some(a) => a,
                None => self
                    .arch_get_unmapped_area_topdown(len, 0)
                    .ok_or(Errno::ENOMEM)?,
            }
        } else {
            self.arch_get_unmapped_area_topdown(len, hint)
                .ok_or(Errno::ENOMEM)?
        };
        Self::check_result(addr, len)
    }

    /// `hugetlb_get_unmapped_area`: the hint rounded *up* to 2 MiB if that range is free,
    /// else a top-down search for a 2 MiB-aligned range. `len` is already a multiple of 2 MiB.
    /// (A hint used as given would put a hugetlb VMA off its huge-page boundary, and its
    /// faults would map a PMD partly outside the VMA.)
    pub fn hugetlb_get_unmapped_area(&self, len: u64, hint: u64) -> Result<u64, Errno> {
        let len = Self::check_len(len)?;
        vm_bug_on!(len % PMD_SIZE != 0);
        let hint = round_hint_to_min(hint);
        if hint != 0 {
            if let Some(a) = crate::addr::align_up(hint, PMD_SIZE) {
                if self.arch_get_unmapped_area_topdown(len, a) == Some(a) {
                    return Self::check_result(a, len);
                }
            }
        }
        let addr = self.thp_area(len, 0, 0).ok_or(Errno::ENOMEM)?;
        Self::check_result(addr, len)
    }

    /// `thp_get_unmapped_area` for a file-like mapping at byte offset `off` — what private
    /// `/dev/zero` mappings get (`get_unmapped_area_zero`). If the file range holds at least one
    /// whole 2 MiB-aligned block, search for `len + 2 MiB` (honouring the hint only if
    /// `[hint, hint + len + 2 MiB)` is free) and return the address in that area congruent to
    /// `off` modulo 2 MiB (its top end when already aligned, as top-down does); otherwise, or when
    /// the padded search fails, the plain search. Probed: a 3 MiB `/dev/zero` mapping at offset
    /// 0 is 2 MiB aligned, at offset 4 KiB it is not; a hint free for `len` but not for
    /// `len + 2 MiB` is dropped for an aligned address elsewhere.
    #[doc(alias = "__thp_get_unmapped_area")]
    pub fn thp_get_unmapped_area(&self, len: u64, hint: u64, off: u64) -> Result<u64, Errno> {
        let len = Self::check_len(len)?;
        let hint = round_hint_to_min(hint);
        let addr = match self.thp_area(len, hint, off) {
            Some(a) => a,
            None => self
                .arch_get_unmapped_area_topdown(len, hint)
                .ok_or(Errno::ENOMEM)?,
        };
        Self::check_result(addr, len)
    }

    pub(super) fn check_len(len: u64) -> Result<u64, Errno> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let len = crate::addr::align_up(len, PAGE_SIZE).ok_or(Errno::ENOMEM)?;
        if len > TASK_SIZE {
            return Err(Errno::ENOMEM);
        }
        Ok(len)
    }

    /// `__get_unmapped_area`'s final checks.
    pub(super) fn check_result(addr: u64, len: u64) -> Result<u64, Errno> {
        if addr > TASK_SIZE - len {
            return Err(Errno::ENOMEM);
        }
        vm_bug_on!(!page_aligned(addr));
        Ok(addr)
    }

    /// `__thp_get_unmapped_area` with `size = PMD_SIZE`: `None` means "not applicable or no
    /// room", and the caller falls back to the plain search.
    pub(super) fn thp_area(&self, len: u64, hint: u64, off: u64) -> Option<u64> {
        let off_end = off.checked_add(len)?;
        let off_align = off.checked_add(PMD_SIZE - 1)? & !(PMD_SIZE - 1);
        if off_end <= off_align || off_end - off_align < PMD_SIZE {
            return None;
        }
        let len_pad = len.checked_add(PMD_SIZE)?;
        off.checked_add(len_pad)?;
        let ret = self.arch_get_unmapped_area_topdown(len_pad, hint)?;
        if ret == hint {
            return Some(hint);
        }
        let off_sub = off.wrapping_sub(ret) & (PMD_SIZE - 1);
        // Top-down put the padded area at the top of its gap: if it is already aligned, the
        // aligned area is its upper end.
        if off_sub == 0 {
            return Some(ret + PMD_SIZE);
        }
        Some(ret + off_sub)
    }

    /// x86's `arch_get_unmapped_area_topdown`: the hint if free, else `vm_unmapped_area`
    /// top-down in `[max(PAGE_SIZE, mmap_min_addr), mmap_base)`, else bottom-up
    /// (`arch_get_unmapped_area`) in `[mmap_legacy_base, TASK_SIZE)`.
    pub(super) fn arch_get_unmapped_area_topdown(&self, len: u64, hint: u64) -> Option<u64> {
        if len > TASK_SIZE {
            return None;
        }
        if hint != 0 {
            let addr = hint & PAGE_MASK;
            // mmap_address_hint_valid: the whole range below TASK_SIZE.
            if TASK_SIZE - len >= addr {
                match self.find_vma(addr) {
                    None => return Some(addr),
                    Some(v) if addr + len <= v.start_gap() => return Some(addr),
                    Some(_) => {}
                }
            }
        }
        let low = PAGE_SIZE.max(MMAP_MIN_ADDR);
        self.unmapped_area_topdown(len, low, self.mmap_base)
            .or_else(|| self.unmapped_area(len, self.mmap_legacy_base.max(low), TASK_SIZE))
    }

    /// `unmapped_area_topdown`: the highest `addr` with `[addr, addr + len)` inside
    /// `[low, high)` and inside a gap (a `VM_GROWSDOWN` VMA's guard gap counts as used, and
    /// limits every gap below it). A descent of the gap index, O(log n) in the VMAs.
    #[doc(alias = "vm_unmapped_area", alias = "mas_empty_area_rev")]
    pub(super) fn unmapped_area_topdown(&self, len: u64, low: u64, high: u64) -> Option<u64> {
        self.vmas.gaps().topdown(len, low, high)
    }

    /// `unmapped_area` (bottom-up): the lowest `addr` with `[addr, addr + len)` inside
    /// `[low, high)` and inside a gap. A descent of the gap index, O(log n) in the VMAs.
    #[doc(alias = "mas_empty_area")]
    pub(super) fn unmapped_area(&self, len: u64, low: u64, high: u64) -> Option<u64> {
        self.vmas.gaps().bottomup(len, low, high)
    }
}

/// The searches as linear scans over every VMA, the definition the gap index's descents are
/// tested against (`gap/test.rs`).
#[cfg(test)]
impl VmaTree {
    /// [`VmaTree::unmapped_area_topdown`] by a linear scan: the highest `addr` with `[addr, addr + len)` inside
    /// `[low, high)` and inside a gap (a `VM_GROWSDOWN` VMA's guard gap counts as used).
    pub(super) fn unmapped_area_topdown_linear(
        &self,
        len: u64,
        low: u64,
        high: u64,
    ) -> Option<u64> {
        if high < low || high - low < len {
            return None;
        }
        let mut top = high;
        // A VMA starting at or above `high` may still reach below it with its guard gap.
        if let Some((_, v)) = self.vmas.range(high..).next() {
            top = top.min(v.start_gap());
        }
        for v in self.vmas.range(..high).rev().map(|(_, v)| v) {
            if v.end < top {
                let bottom = v.end.max(low);
                if top >= bottom && top - bottom >= len {
                    return Some(top - len);
                }
            }
            top = top.min(v.start_gap());
            if top <= low {
                return None;
            }
        }
        (top >= low && top - low >= len).then(|| top - len)
    }

    /// [`VmaTree::unmapped_area`] by a linear scan: the lowest `addr` with `[addr, addr + len)` inside
    /// `[low, high)` and inside a gap.
    pub(super) fn unmapped_area_linear(&self, len: u64, low: u64, high: u64) -> Option<u64> {
        if high < low || high - low < len {
            return None;
        }
        let mut bottom = low;
        let first = self.find_vma(low).map_or(u64::MAX, |v| v.start);
        for v in self.vmas.range(first..).map(|(_, v)| v) {
            let gap_end = v.start_gap().min(high);
            if gap_end >= bottom && gap_end - bottom >= len {
                return Some(bottom);
            }
            bottom = bottom.max(v.end);
            if bottom >= high {
                return None;
            }
        }
        (high - bottom >= len).then_some(bottom)
    }
}

/// `round_hint_to_min` of `do_mmap`: page-align a hint down; a non-zero hint below
/// `mmap_min_addr` becomes `mmap_min_addr` (probed: a hint of 0x1000 gives 0x10000).
fn round_hint_to_min(hint: u64) -> u64 {
    let hint = hint & PAGE_MASK;
    if hint != 0 && hint < MMAP_MIN_ADDR {
        return (MMAP_MIN_ADDR + PAGE_SIZE - 1) & PAGE_MASK;
    }
    hint
}
