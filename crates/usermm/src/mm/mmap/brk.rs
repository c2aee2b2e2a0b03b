//! `brk`: the heap — one anonymous VMA from `mm->start_brk` up to the break.
//!
//! Mirrors `mm/mmap.c` (`SYSCALL_DEFINE1(brk)`, `check_data_rlimit`) and `mm/vma.c`
//! (`do_brk_flags`), Linux 6.18. The raw system call never fails: it returns the new break, or
//! the old one when the request is refused (glibc's `brk()` turns that into `-1`/`ENOMEM`):
//! ```text
//!  brk < start_brk                                             → old break
//!  (brk − start_brk) + data segment > RLIMIT_DATA              → old break
//!  same page as the old break                                  → brk (value only)
//!  shrink: no VMA in [PAGE_ALIGN(brk), PAGE_ALIGN(old)) → old; else unmap that range
//!  grow: a VMA (with its stack guard gap) within one page past the new end → old break
//!        else expand the heap VMA if it ends at the old break and may merge, or map a new one
//! ```
//! The heap VMA is private anonymous memory with `VM_DATA_DEFAULT_FLAGS | VM_ACCOUNT`
//! (`rw-p`, `pgoff = addr >> PAGE_SHIFT`), shown as `[heap]` in maps.
//!
//! # Differences from Linux
//! No program image: the data segment (`end_data − start_data`) is empty and `start_brk` is
//! fixed ([`DEFAULT_START_BRK`](crate::mm::vma::DEFAULT_START_BRK)), with no randomisation.
//! `RLIMIT_AS` is not checked (`may_expand_vm`); `mm->def_flags` (mlockall) does not exist.

use std::sync::atomic::Ordering::Relaxed;

use crate::addr::{PAGE_SIZE, TASK_SIZE};
use crate::cpu::CpuId;
use crate::mm::vma::{VmFlags, Vma, VmaKind, STACK_GUARD_GAP};
use crate::mm::Mm;

/// `RLIM_INFINITY`.
pub const RLIM_INFINITY: u64 = u64::MAX;

impl Mm {
    /// `brk(brk)`, the raw system call: the new program break, or the old one if refused.
    #[doc(alias = "sys_brk")]
    #[doc(alias = "do_brk_flags")]
    pub fn brk(&self, cpu: CpuId, brk: u64) -> u64 {
        crate::sync::charge(crate::sync::Cost::Syscall, 1);
        let mut tree = self.mmap_lock.write();
        let origbrk = tree.brk();
        let start_brk = tree.start_brk();
        if self.is_exited() || brk < start_brk || brk > TASK_SIZE {
            return origbrk;
        }
        // check_data_rlimit (the data segment is empty).
        let rlim = self.rlimit_data.load(Relaxed);
        if rlim != RLIM_INFINITY && brk - start_brk > rlim {
            return origbrk;
        }
        let align = |x: u64| x.next_multiple_of(PAGE_SIZE);
        let (newbrk, oldbrk) = (align(brk), align(origbrk));
        if newbrk == oldbrk {
            tree.set_brk(brk);
            return brk;
        }
        if brk <= origbrk {
            // Always allow shrinking, if the range is the heap's.
            if tree.find_vma_intersection(newbrk, oldbrk).is_none() {
                return origbrk;
            }
            tree.set_brk(brk);
            if self
                .do_munmap_locked(&mut tree, cpu, newbrk, oldbrk)
                .is_err()
            {
                tree.set_brk(origbrk);
                return origbrk;
            }
            return brk;
        }
        // Check against existing mappings, one page and a stack's guard gap beyond.
        let limit = newbrk
            .saturating_add(PAGE_SIZE)
            .saturating_add(STACK_GUARD_GAP);
        if let Some(next) = tree.find_vma_intersection(oldbrk, limit) {
            if newbrk + PAGE_SIZE > next.start_gap() {
                return origbrk;
            }
        }
        if tree.map_count() > self.machine().max_map_count() {
            return origbrk;
        }
        let flags = VmFlags::VM_READ
            | VmFlags::VM_WRITE
            | VmFlags::VM_MAYREAD
            | VmFlags::VM_MAYWRITE
            | VmFlags::VM_MAYEXEC
            | VmFlags::VM_ACCOUNT;
        // do_brk_flags: expand the heap VMA when it ends at the old break and may merge
        // (vma_merge_new_range with just_expand: prev only), else a new VMA.
        let vma = Vma::new(oldbrk, newbrk, flags, VmaKind::Anon, oldbrk >> 12);
        let prev_heap = tree
            .find_vma_prev(oldbrk)
            .0
            .filter(|p| p.end == oldbrk && p.start >= start_brk)
            .map(|p| p.start);
        tree.brk_insert(vma, prev_heap);
        tree.set_brk(brk);
        brk
    }

    /// `setrlimit(RLIMIT_DATA)`: the largest heap `brk` allows, in bytes ([`RLIM_INFINITY`]
    /// for none, the default). Inherited by forked mms.
    pub fn set_rlimit_data(&self, bytes: u64) {
        self.rlimit_data.store(bytes, Relaxed);
    }

    /// The current `brk` (`brk(0)` on Linux returns it, as every refused request does).
    pub fn current_brk(&self) -> u64 {
        self.mmap_lock.read().brk()
    }
}
