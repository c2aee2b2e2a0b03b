//! Unit tests of the VMA tree. Every test ends with `validate()`.
//!
//! Expected shapes come from probes of Linux 6.18 on the development host (module doc of
//! `vma/mod.rs`); `maps::host_*` re-run those probes on the machine running the tests.

#![expect(unsafe_code)] // fenced (lib.rs, "Unsafe"): probes of the host kernel (test only)

use std::sync::atomic::AtomicU64;

use super::*;
use crate::addr::{MMAP_MIN_ADDR, PAGE_SHIFT, PAGE_SIZE, PMD_SIZE, TASK_SIZE};
use crate::error::Errno;
use crate::mm::mman::{PROT_EXEC, PROT_NONE, PROT_READ, PROT_WRITE};

const P: u64 = PAGE_SIZE;
const MAX: usize = 65530;
/// A private test arena, far below the default `mmap_base`.
const A: u64 = 0x1000_0000;

const R: u32 = PROT_READ;
const RW: u32 = PROT_READ | PROT_WRITE;
const RWX: u32 = PROT_READ | PROT_WRITE | PROT_EXEC;

mod test_utils {
    use super::*;

    pub(super) fn tree() -> VmaTree {
        VmaTree::new(DEFAULT_MMAP_BASE)
    }

    pub(super) fn may() -> VmFlags {
        VmFlags::VM_MAYREAD | VmFlags::VM_MAYWRITE | VmFlags::VM_MAYEXEC
    }

    pub(super) fn private_flags(prot: u32) -> VmFlags {
        VmFlags::from_prot(prot) | may()
    }

    pub(super) fn shared_flags(prot: u32) -> VmFlags {
        private_flags(prot) | VmFlags::VM_SHARED | VmFlags::VM_MAYSHARE
    }

    /// `MAP_PRIVATE|MAP_ANONYMOUS` at `start`: `pgoff = start >> PAGE_SHIFT`.
    pub(super) fn anon(start: u64, pages: u64, prot: u32) -> Vma {
        Vma::new(
            start,
            start + pages * P,
            private_flags(prot),
            VmaKind::Anon,
            start >> PAGE_SHIFT,
        )
    }

    /// `MAP_PRIVATE` of `/dev/zero` at file offset `off_pages` pages.
    pub(super) fn devzero(start: u64, pages: u64, prot: u32, off_pages: u64) -> Vma {
        Vma::new(
            start,
            start + pages * P,
            private_flags(prot),
            VmaKind::DevZero,
            off_pages,
        )
    }

    /// `MAP_SHARED|MAP_ANONYMOUS` (or `MAP_SHARED` of `/dev/zero` at `off_pages`).
    pub(super) fn shared(start: u64, pages: u64, prot: u32, off_pages: u64) -> Vma {
        Vma::new(
            start,
            start + pages * P,
            shared_flags(prot),
            VmaKind::SharedAnon,
            off_pages,
        )
    }

    pub(super) fn shape(t: &VmaTree) -> Vec<(u64, u64)> {
        t.iter().map(|v| (v.start, v.end)).collect()
    }

    pub(super) type Snap = Vec<(u64, u64, VmFlags, u64, VmaKind, u64, u64, u64)>;

    pub(super) fn snapshot(t: &VmaTree) -> Snap {
        t.iter()
            .map(|v| {
                (
                    v.start,
                    v.end,
                    v.flags,
                    v.pgoff,
                    v.kind,
                    v.file,
                    v.pfn_base,
                    v.anon_vma(),
                )
            })
            .collect()
    }

    #[track_caller]
    pub(super) fn check(t: &VmaTree) {
        if let Err(e) = t.validate(MAX) {
            panic!("validate: {e}\n{}", t.render_maps());
        }
    }

    /// Apply `change` to the flags of every VMA piece in `[start, end)` the way
    /// mprotect/madvise/mlock do: per VMA, `vma_modify_flags`; a hole ends with `ENOMEM`
    /// after the parts before it were changed.
    pub(super) fn modify(
        t: &mut VmaTree,
        start: u64,
        end: u64,
        max: usize,
        change: impl Fn(VmFlags) -> VmFlags,
    ) -> Result<(), Errno> {
        let mut addr = start;
        while addr < end {
            let Some(v) = t.vma_lookup(addr) else {
                return Err(Errno::ENOMEM);
            };
            let tmp = v.end.min(end);
            let nf = change(v.flags);
            t.vma_modify_flags(addr, tmp, nf, max)?;
            addr = tmp;
        }
        Ok(())
    }

    pub(super) fn mprotect(t: &mut VmaTree, start: u64, end: u64, prot: u32) -> Result<(), Errno> {
        mprotect_max(t, start, end, prot, MAX)
    }

    pub(super) fn mprotect_max(
        t: &mut VmaTree,
        start: u64,
        end: u64,
        prot: u32,
        max: usize,
    ) -> Result<(), Errno> {
        modify(t, start, end, max, |f| {
            f.minus(VmFlags::VM_ACCESS_FLAGS) | VmFlags::from_prot(prot)
        })
    }

    /// `MADV_HUGEPAGE` (true) / `MADV_NOHUGEPAGE` (false).
    pub(super) fn madvise_huge(
        t: &mut VmaTree,
        start: u64,
        end: u64,
        huge: bool,
    ) -> Result<(), Errno> {
        modify(t, start, end, MAX, |f| {
            if huge {
                f.minus(VmFlags::VM_NOHUGEPAGE) | VmFlags::VM_HUGEPAGE
            } else {
                f.minus(VmFlags::VM_HUGEPAGE) | VmFlags::VM_NOHUGEPAGE
            }
        })
    }

    /// A write fault at `addr`: `anon_vma_prepare` on its VMA.
    pub(super) fn fault(t: &VmaTree, ids: &AtomicU64, addr: u64) -> u64 {
        let v = t.vma_lookup(addr).expect("fault in a mapped page");
        t.anon_vma_prepare(v, ids)
    }

    pub(super) fn ids() -> AtomicU64 {
        AtomicU64::new(1)
    }
}

use self::test_utils::*;

mod flags {
    use super::*;

    #[test]
    fn prot_round_trip_and_unknown_bits_ignored() {
        for prot in 0..8 {
            assert_eq!(VmFlags::from_prot(prot).prot_bits(), prot);
        }
        assert_eq!(VmFlags::from_prot(0x80 | PROT_READ), VmFlags::VM_READ);
        assert_eq!(VmFlags::from_prot(RWX), VmFlags::VM_ACCESS_FLAGS);
    }

    #[test]
    fn linux_values() {
        assert_eq!(VmFlags::VM_MAYSHARE.bits(), 0x80);
        assert_eq!(VmFlags::VM_LOCKED.bits(), 0x2000);
        assert_eq!(VmFlags::VM_ACCOUNT.bits(), 0x100000);
        assert_eq!(VmFlags::VM_HUGETLB.bits(), 0x400000);
        assert_eq!(VmFlags::VM_HUGEPAGE.bits(), 0x20000000);
        assert_eq!(VmFlags::VM_NOHUGEPAGE.bits(), 0x40000000);
        assert_eq!(
            VmFlags::VM_SPECIAL.bits(),
            0x4000 | 0x40000 | 0x400 | 0x10000000
        );
    }

    #[test]
    fn helpers() {
        let f = VmFlags::VM_READ | VmFlags::VM_WRITE;
        assert!(f.contains(VmFlags::VM_READ));
        assert!(!f.contains(VmFlags::VM_READ | VmFlags::VM_EXEC));
        assert!(f.intersects(VmFlags::VM_READ | VmFlags::VM_EXEC));
        assert!(!f.intersects(VmFlags::VM_EXEC));
        assert_eq!(f.minus(VmFlags::VM_WRITE), VmFlags::VM_READ);
        assert_eq!(f.union(VmFlags::VM_EXEC), VmFlags::VM_ACCESS_FLAGS);
        assert_eq!(f & VmFlags::VM_WRITE, VmFlags::VM_WRITE);
        assert!(VmFlags::default().is_empty());
    }

    #[test]
    fn debug_lists_names() {
        assert_eq!(
            format!("{:?}", VmFlags::VM_READ | VmFlags::VM_MAYSHARE),
            "VM_READ|VM_MAYSHARE"
        );
        assert_eq!(format!("{:?}", VmFlags::VM_NONE), "VM_NONE");
        assert_eq!(
            format!("{:?}", VmFlags(VmFlags::VM_EXEC.0 | (1 << 40))),
            "VM_EXEC|0x10000000000"
        );
    }

    #[test]
    fn is_special_is_the_munmap_downgrade_rule() {
        let mut v = anon(A, 1, RW);
        assert!(!v.is_special());
        for f in [VmFlags::VM_LOCKED, VmFlags::VM_HUGETLB, VmFlags::VM_PFNMAP] {
            v.flags = private_flags(RW) | f;
            assert!(v.is_special(), "{f:?}");
        }
        v.flags = private_flags(RW) | VmFlags::VM_IO;
        assert!(!v.is_special());
    }
}

mod find {
    use super::*;

    fn two() -> VmaTree {
        let mut t = tree();
        t.insert(anon(A + 10 * P, 10, RW));
        t.insert(anon(A + 30 * P, 10, R));
        check(&t);
        t
    }

    #[test]
    fn find_vma_is_first_ending_above() {
        let t = two();
        let s = |a: u64| t.find_vma(a).map(|v| v.start);
        assert_eq!(s(0), Some(A + 10 * P));
        assert_eq!(s(A + 15 * P), Some(A + 10 * P));
        assert_eq!(s(A + 20 * P - 1), Some(A + 10 * P));
        assert_eq!(s(A + 20 * P), Some(A + 30 * P));
        assert_eq!(s(A + 25 * P), Some(A + 30 * P));
        assert_eq!(s(A + 40 * P), None);
        assert!(t.vma_lookup(A + 25 * P).is_none());
        assert_eq!(t.vma_lookup(A + 30 * P).map(|v| v.start), Some(A + 30 * P));
    }

    #[test]
    fn find_vma_prev_returns_prev_then_vma() {
        let t = two();
        let s = |(p, v): (Option<&Vma>, Option<&Vma>)| (p.map(|p| p.start), v.map(|v| v.start));
        let (a, b) = (Some(A + 10 * P), Some(A + 30 * P));
        assert_eq!(s(t.find_vma_prev(A)), (None, a));
        assert_eq!(s(t.find_vma_prev(A + 15 * P)), (None, a));
        assert_eq!(s(t.find_vma_prev(A + 25 * P)), (a, b));
        assert_eq!(s(t.find_vma_prev(A + 35 * P)), (a, b));
        assert_eq!(s(t.find_vma_prev(A + 45 * P)), (b, None));
    }

    #[test]
    fn intersecting() {
        let t = two();
        let s = |a: u64, b: u64| t.intersecting(a, b).map(|v| v.start).collect::<Vec<_>>();
        assert_eq!(s(A + 15 * P, A + 35 * P), vec![A + 10 * P, A + 30 * P]);
        assert_eq!(s(A + 20 * P, A + 30 * P), Vec::<u64>::new());
        assert_eq!(s(0, u64::MAX), vec![A + 10 * P, A + 30 * P]);
        assert_eq!(s(A + 15 * P, A + 15 * P), Vec::<u64>::new());
        assert_eq!(s(A + 19 * P, A + 31 * P), vec![A + 10 * P, A + 30 * P]);
        assert_eq!(
            t.find_vma_intersection(A + 20 * P, A + 30 * P)
                .map(|v| v.start),
            None
        );
        assert_eq!(
            t.find_vma_intersection(A + 20 * P, A + 31 * P)
                .map(|v| v.start),
            Some(A + 30 * P)
        );
    }

    #[test]
    fn clear_and_remove() {
        let mut t = two();
        assert_eq!(t.remove(A + 10 * P).map(|v| v.end), Some(A + 20 * P));
        assert_eq!(t.map_count(), 1);
        t.clear();
        assert!(t.is_empty());
        check(&t);
    }
}

mod split {
    use super::*;

    #[test]
    fn upper_half_advances_pgoff_and_both_share_anon_vma() {
        let mut t = tree();
        let ids = ids();
        t.insert(anon(A, 10, RW));
        let av = fault(&t, &ids, A);
        t.split(A + 4 * P, MAX).unwrap();
        let lo = t.get(A).unwrap();
        let hi = t.get(A + 4 * P).unwrap();
        assert_eq!((lo.end, lo.pgoff, lo.anon_vma()), (A + 4 * P, A >> 12, av));
        assert_eq!(
            (hi.end, hi.pgoff, hi.anon_vma()),
            (A + 10 * P, (A >> 12) + 4, av)
        );
        check(&t);
    }

    #[test]
    fn file_shmem_and_pfn_follow_the_halves() {
        let mut t = tree();
        t.insert(devzero(A, 8, R, 3).with_file(7));
        t.insert(shared(A + 16 * P, 8, RW, 0));
        let pf = VmFlags::VM_PFNMAP | VmFlags::VM_IO | VmFlags::VM_DONTEXPAND | private_flags(RW);
        t.insert(
            Vma::new(A + 32 * P, A + 40 * P, pf, VmaKind::PfnMap, 0x1234).with_pfn_base(0x1234),
        );
        t.split(A + 2 * P, MAX).unwrap();
        t.split(A + 20 * P, MAX).unwrap();
        t.split(A + 35 * P, MAX).unwrap();
        let s = snapshot(&t);
        assert_eq!(s[1].3, 5, "devzero pgoff advances");
        assert_eq!(s[1].5, 7, "devzero keeps its file");
        assert_eq!(s[2].5, s[3].5, "shared pieces share the inode");
        assert_eq!(s[3].3, 4);
        assert_eq!(s[5].6, 0x1234 + 3, "pfn_base advances");
        assert_eq!(s[4].6, 0x1234);
        check(&t);
    }

    #[test]
    fn boundary_or_hole_is_a_no_op() {
        let mut t = tree();
        t.insert(anon(A, 4, RW));
        let before = snapshot(&t);
        t.split(A, 1).unwrap();
        t.split(A + 4 * P, 1).unwrap();
        t.split(A + 100 * P, 1).unwrap();
        assert!(!t.split_unchecked(A));
        assert_eq!(snapshot(&t), before);
        check(&t);
    }

    #[test]
    fn limit_gives_enomem_without_change() {
        let mut t = tree();
        t.insert(anon(A, 4, RW));
        t.insert(anon(A + 8 * P, 4, RW));
        let before = snapshot(&t);
        assert_eq!(t.split(A + P, 2), Err(Errno::ENOMEM));
        assert_eq!(snapshot(&t), before);
        t.split(A + P, 3).unwrap();
        assert_eq!(t.map_count(), 3);
        assert!(
            t.split_unchecked(A + 9 * P),
            "the raw variant ignores the limit"
        );
        assert_eq!(t.map_count(), 4);
        check(&t);
    }
}

mod merge {
    use super::*;

    #[test]
    fn mprotect_splits_into_three_and_merges_back() {
        for faulted in [false, true] {
            let mut t = tree();
            let ids = ids();
            t.insert_or_merge(anon(A, 10, RW));
            if faulted {
                fault(&t, &ids, A);
            }
            mprotect(&mut t, A + 2 * P, A + 5 * P, R).unwrap();
            assert_eq!(
                shape(&t),
                vec![
                    (A, A + 2 * P),
                    (A + 2 * P, A + 5 * P),
                    (A + 5 * P, A + 10 * P)
                ]
            );
            let s = snapshot(&t);
            assert_eq!((s[1].2, s[1].3), (private_flags(R), (A >> 12) + 2));
            assert_eq!(s[2].3, (A >> 12) + 5);
            check(&t);
            mprotect(&mut t, A + 2 * P, A + 5 * P, RW).unwrap();
            assert_eq!(shape(&t), vec![(A, A + 10 * P)]);
            assert_eq!(t.get(A).unwrap().pgoff, A >> 12);
            check(&t);
        }
    }

    #[test]
    fn mprotect_at_an_edge_moves_the_boundary_without_a_split() {
        // Probed: [r--][rw- ×8], mprotect the first 2 pages of the rw part to r → [r-- ×6][rw- ×6].
        let mut t = tree();
        t.insert_or_merge(anon(A, 4, R));
        t.insert_or_merge(anon(A + 4 * P, 8, RW));
        assert_eq!(t.map_count(), 2);
        // At the map_count limit: merging needs no split, so it still works.
        mprotect_max(&mut t, A + 4 * P, A + 6 * P, R, 2).unwrap();
        assert_eq!(shape(&t), vec![(A, A + 6 * P), (A + 6 * P, A + 12 * P)]);
        assert_eq!(t.get(A + 6 * P).unwrap().pgoff, (A >> 12) + 6);
        // ... and the tail end merges into next.
        mprotect_max(&mut t, A + 4 * P, A + 6 * P, RW, 2).unwrap();
        assert_eq!(shape(&t), vec![(A, A + 4 * P), (A + 4 * P, A + 12 * P)]);
        assert_eq!(t.get(A + 4 * P).unwrap().pgoff, (A >> 12) + 4);
        check(&t);
    }

    #[test]
    fn middle_change_needs_two_splits_and_keeps_the_first_when_the_second_fails() {
        let mut t = tree();
        t.insert_or_merge(anon(A, 10, RW));
        assert_eq!(
            mprotect_max(&mut t, A + 2 * P, A + 5 * P, R, 2),
            Err(Errno::ENOMEM)
        );
        assert_eq!(
            shape(&t),
            vec![(A, A + 2 * P), (A + 2 * P, A + 10 * P)],
            "split_vma is not undone"
        );
        assert_eq!(
            t.get(A + 2 * P).unwrap().flags,
            private_flags(RW),
            "flags not changed"
        );
        check(&t);
        let mut t = tree();
        t.insert_or_merge(anon(A, 10, RW));
        assert_eq!(
            mprotect_max(&mut t, A + 2 * P, A + 5 * P, R, 1),
            Err(Errno::ENOMEM)
        );
        assert_eq!(shape(&t), vec![(A, A + 10 * P)]);
    }

    #[test]
    fn equal_flags_change_nothing() {
        let mut t = tree();
        t.insert(anon(A, 4, RW));
        t.insert(anon(A + 4 * P, 4, RW));
        assert_eq!(
            t.vma_modify_flags(A + P, A + 2 * P, private_flags(RW), MAX),
            Ok(A)
        );
        assert_eq!(
            t.map_count(),
            2,
            "no merge attempt either (mprotect_fixup's early exit)"
        );
        assert_eq!(
            t.vma_modify_flags(A + 40 * P, A + 41 * P, private_flags(R), MAX),
            Err(Errno::ENOMEM)
        );
    }

    #[test]
    fn adjacent_anonymous_mmaps_merge() {
        // Top-down placement: each new mapping lies just below the previous one.
        let mut t = tree();
        for i in (0..4).rev() {
            let s = t.insert_or_merge(anon(A + i * 10 * P, 10, RW));
            assert_eq!(s, A + i * 10 * P);
        }
        assert_eq!(shape(&t), vec![(A, A + 40 * P)]);
        assert_eq!(t.get(A).unwrap().pgoff, A >> 12);
        assert_eq!(
            t.merge_new(
                A + 40 * P,
                A + 41 * P,
                private_flags(RW),
                VmaKind::Anon,
                (A >> 12) + 40
            ),
            Some(A)
        );
        assert_eq!(
            t.merge_new(
                A + 50 * P,
                A + 51 * P,
                private_flags(RW),
                VmaKind::Anon,
                (A >> 12) + 50
            ),
            None
        );
        check(&t);
    }

    #[test]
    fn usemem_style_dev_zero_mappings_do_not_merge() {
        // Probed: 4 × 10-page /dev/zero mmaps at offset 0 → 4 VMAs: the offsets are not linear.
        let mut t = tree();
        for i in (0..4).rev() {
            t.insert_or_merge(devzero(A + i * 10 * P, 10, RW, 0));
        }
        assert_eq!(t.map_count(), 4);
        check(&t);
    }

    #[test]
    fn dev_zero_merges_like_a_file() {
        // Probed: same open file, offsets 0 and 0x4000 → one VMA; two open()s → two.
        let mut t = tree();
        t.insert_or_merge(devzero(A, 4, R, 0));
        t.insert_or_merge(devzero(A + 4 * P, 4, R, 4));
        assert_eq!(shape(&t), vec![(A, A + 8 * P)]);
        t.insert_or_merge(devzero(A + 12 * P, 4, R, 4));
        t.insert_or_merge(devzero(A + 8 * P, 4, R, 0).with_file(2));
        assert_eq!(t.map_count(), 3, "another open() is another file");
        // Never with anonymous memory, even with a matching pgoff.
        let mut t = tree();
        t.insert_or_merge(devzero(A, 4, R, A >> 12));
        t.insert_or_merge(anon(A + 4 * P, 4, R));
        assert_eq!(t.map_count(), 2);
        assert_eq!(
            t.merge_new(
                A + 8 * P,
                A + 9 * P,
                private_flags(R),
                VmaKind::DevZero,
                (A >> 12) + 8
            ),
            None
        );
        assert_eq!(
            t.merge_new(A - P, A, private_flags(R), VmaKind::DevZero, (A >> 12) - 1),
            Some(A - P)
        );
        check(&t);
    }

    #[test]
    fn shared_anonymous_mappings_are_files_of_their_own() {
        // Probed: two adjacent shared mappings stay two; the pieces of one re-merge.
        let mut t = tree();
        t.insert_or_merge(shared(A, 4, RW, 0));
        t.insert_or_merge(shared(A + 4 * P, 4, RW, 0));
        assert_eq!(t.map_count(), 2);
        let s = snapshot(&t);
        assert_eq!((s[0].5, s[1].5), (FIRST_SHMEM_INO, FIRST_SHMEM_INO + 1));
        mprotect(&mut t, A + P, A + 2 * P, R).unwrap();
        assert_eq!(t.map_count(), 4);
        mprotect(&mut t, A + P, A + 2 * P, RW).unwrap();
        assert_eq!(shape(&t), vec![(A, A + 4 * P), (A + 4 * P, A + 8 * P)]);
        assert_eq!(
            t.merge_new(
                A + 8 * P,
                A + 9 * P,
                shared_flags(RW),
                VmaKind::SharedAnon,
                0
            ),
            None
        );
        check(&t);
    }

    #[test]
    fn different_anon_vmas_do_not_merge() {
        // Probed: A (MADV_NOHUGEPAGE) and B written separately get two anon_vmas (B cannot reuse
        // A's: the flags differ beyond access bits); after MADV_HUGEPAGE on both, flags agree
        // but the VMAs stay apart.
        let mut t = tree();
        let ids = ids();
        t.insert_or_merge(anon(A, 4, RW));
        madvise_huge(&mut t, A, A + 4 * P, false).unwrap();
        fault(&t, &ids, A);
        t.insert_or_merge(anon(A + 4 * P, 4, RW));
        assert_eq!(t.map_count(), 2);
        fault(&t, &ids, A + 4 * P);
        madvise_huge(&mut t, A, A + 8 * P, true).unwrap();
        let s = snapshot(&t);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].2, s[1].2);
        assert_ne!(s[0].7, s[1].7);
        check(&t);
    }

    #[test]
    fn first_fault_reuses_a_compatible_neighbours_anon_vma() {
        // Probed: A rw written, B rwx written, mprotect B rw → one VMA.
        let mut t = tree();
        let ids = ids();
        t.insert_or_merge(anon(A, 4, RW));
        let a = fault(&t, &ids, A);
        t.insert_or_merge(anon(A + 4 * P, 4, RWX));
        assert_eq!(fault(&t, &ids, A + 4 * P), a);
        mprotect(&mut t, A + 4 * P, A + 8 * P, RW).unwrap();
        assert_eq!(shape(&t), vec![(A, A + 8 * P)]);
        assert_eq!(t.get(A).unwrap().anon_vma(), a);
        // Reuse looks at next first, and never across a hole.
        let mut t = tree();
        t.insert_or_merge(anon(A + 4 * P, 4, RWX));
        let b = fault(&t, &ids, A + 4 * P);
        t.insert_or_merge(anon(A, 4, RW));
        assert_eq!(fault(&t, &ids, A), b);
        t.insert_or_merge(anon(A + 9 * P, 1, RW));
        assert_ne!(fault(&t, &ids, A + 9 * P), b);
        check(&t);
    }

    #[test]
    fn vma_anon_vma_prepare_is_idempotent() {
        let t = {
            let mut t = tree();
            t.insert(anon(A, 4, RW));
            t
        };
        let ids = ids();
        let v = t.get(A).unwrap();
        let a = v.anon_vma_prepare(&ids);
        assert_ne!(a, 0);
        assert_eq!(v.anon_vma_prepare(&ids), a);
        assert_eq!(t.anon_vma_prepare(v, &ids), a);
    }

    #[test]
    fn new_range_between_two_merges_three_ways() {
        let mut t = tree();
        let ids = ids();
        t.insert_or_merge(anon(A, 4, RW));
        t.insert_or_merge(anon(A + 8 * P, 4, RW));
        let x = fault(&t, &ids, A);
        assert_eq!(t.insert_or_merge(anon(A + 4 * P, 4, RW)), A);
        assert_eq!(shape(&t), vec![(A, A + 12 * P)]);
        assert_eq!(
            t.get(A).unwrap().anon_vma(),
            x,
            "the merged VMA keeps prev's anon_vma"
        );
        // next's anon_vma is taken when prev has none.
        let mut t = tree();
        t.insert_or_merge(anon(A, 4, RW));
        t.insert_or_merge(anon(A + 8 * P, 4, RW));
        let y = fault(&t, &ids, A + 8 * P);
        t.insert_or_merge(anon(A + 4 * P, 4, RW));
        assert_eq!(shape(&t), vec![(A, A + 12 * P)]);
        assert_eq!(t.get(A).unwrap().anon_vma(), y);
        check(&t);
    }

    #[test]
    fn three_way_needs_prev_and_next_compatible() {
        let mut t = tree();
        let ids = ids();
        t.insert_or_merge(anon(A, 4, RW));
        t.insert_or_merge(anon(A + 8 * P, 4, RW));
        let x = fault(&t, &ids, A);
        let y = fault(&t, &ids, A + 8 * P);
        assert_ne!(x, y);
        t.insert_or_merge(anon(A + 4 * P, 4, RW));
        assert_eq!(
            shape(&t),
            vec![(A, A + 8 * P), (A + 8 * P, A + 12 * P)],
            "only prev merges"
        );
        assert_eq!(t.get(A).unwrap().anon_vma(), x);
        check(&t);
    }

    #[test]
    fn three_way_existing_range_needs_prev_and_next_compatible() {
        // [rw][r][rw] split while unfaulted; prev and next then fault separately (the middle has
        // no anon_vma to share); restoring the middle merges it with prev only.
        let mut t = tree();
        let ids = ids();
        t.insert_or_merge(anon(A, 12, RW));
        mprotect(&mut t, A + 4 * P, A + 8 * P, R).unwrap();
        let x = fault(&t, &ids, A);
        let y = fault(&t, &ids, A + 8 * P);
        assert_ne!(x, y);
        mprotect(&mut t, A + 4 * P, A + 8 * P, RW).unwrap();
        assert_eq!(shape(&t), vec![(A, A + 8 * P), (A + 8 * P, A + 12 * P)]);
        // And when the middle was faulted first, everything shares one anon_vma.
        let mut t = tree();
        t.insert_or_merge(anon(A, 12, RW));
        mprotect(&mut t, A + 4 * P, A + 8 * P, R).unwrap();
        let m = fault(&t, &ids, A + 4 * P);
        assert_eq!(fault(&t, &ids, A), m);
        assert_eq!(fault(&t, &ids, A + 8 * P), m);
        mprotect(&mut t, A + 4 * P, A + 8 * P, RW).unwrap();
        assert_eq!(shape(&t), vec![(A, A + 12 * P)]);
        check(&t);
    }

    #[test]
    fn partial_merge_hands_the_anon_vma_over() {
        // [prev: no anon_vma][vma: anon X], mprotect vma's head to prev's flags: prev grows over
        // pages that may hold X's anonymous pages, so it takes X (dup_anon_vma).
        let mut t = tree();
        let ids = ids();
        t.insert_or_merge(anon(A, 4, R));
        t.insert_or_merge(anon(A + 4 * P, 8, RW));
        let x = fault(&t, &ids, A + 4 * P);
        assert_eq!(t.get(A).unwrap().anon_vma(), 0);
        mprotect(&mut t, A + 4 * P, A + 6 * P, R).unwrap();
        assert_eq!(shape(&t), vec![(A, A + 6 * P), (A + 6 * P, A + 12 * P)]);
        assert_eq!(t.get(A).unwrap().anon_vma(), x);
        check(&t);
    }

    #[test]
    fn special_mappings_never_merge() {
        let mut t = tree();
        let io = private_flags(RW) | VmFlags::VM_IO;
        t.insert_or_merge(Vma::new(A, A + 4 * P, io, VmaKind::Anon, A >> 12));
        t.insert_or_merge(Vma::new(
            A + 4 * P,
            A + 8 * P,
            io,
            VmaKind::Anon,
            (A >> 12) + 4,
        ));
        assert_eq!(t.map_count(), 2);
        let pf = private_flags(RW) | VmFlags::VM_PFNMAP | VmFlags::VM_IO;
        t.insert_or_merge(Vma::new(A + 8 * P, A + 12 * P, pf, VmaKind::PfnMap, 0));
        t.insert_or_merge(Vma::new(A + 12 * P, A + 16 * P, pf, VmaKind::PfnMap, 4));
        assert_eq!(t.map_count(), 4);
        let ht = private_flags(RW) | VmFlags::VM_HUGETLB;
        t.insert_or_merge(Vma::new(A + 512 * P, A + 1024 * P, ht, VmaKind::Hugetlb, 0));
        assert_eq!(t.map_count(), 5);
        mprotect(&mut t, A + 512 * P, A + 1024 * P, R).unwrap();
        assert_eq!(t.map_count(), 5);
        check(&t);
    }

    #[test]
    fn split_then_change_then_merge_after_change() {
        let mut t = tree();
        t.insert_or_merge(anon(A, 10, RW));
        t.split(A + 2 * P, MAX).unwrap();
        t.split(A + 5 * P, MAX).unwrap();
        *t.flags_mut(A + 2 * P).unwrap() = private_flags(R);
        assert_eq!(t.merge_after_change(A + 3 * P), Some(A + 2 * P));
        assert_eq!(t.map_count(), 3);
        *t.flags_mut(A + 2 * P).unwrap() = private_flags(RW);
        assert_eq!(t.merge_after_change(A + 3 * P), Some(A));
        assert_eq!(shape(&t), vec![(A, A + 10 * P)]);
        assert_eq!(t.merge_after_change(A + 20 * P), None);
        check(&t);
    }

    #[test]
    fn would_merge_and_set_flags() {
        let mut t = tree();
        t.insert_or_merge(anon(A, 4, R));
        t.insert_or_merge(anon(A + 4 * P, 8, RW));
        let before = snapshot(&t);
        assert!(
            t.would_merge(A + 4 * P, A + 6 * P, private_flags(R)),
            "head into prev"
        );
        assert!(
            !t.would_merge(A + 5 * P, A + 6 * P, private_flags(R)),
            "middle: never"
        );
        assert!(
            !t.would_merge(A + 10 * P, A + 12 * P, private_flags(R)),
            "tail: no next"
        );
        assert!(
            !t.would_merge(A + 40 * P, A + 41 * P, private_flags(R)),
            "unmapped"
        );
        assert_eq!(snapshot(&t), before, "would_merge changes nothing");
        assert!(t.set_flags(A + 4 * P, private_flags(R)));
        assert!(!t.set_flags(A + 5 * P, private_flags(R)));
        assert_eq!(t.merge_after_change(A + 4 * P), Some(A));
        assert_eq!(shape(&t), vec![(A, A + 12 * P)]);
        check(&t);
    }

    #[test]
    fn validate_allows_do_mmaps_one_extra_mapping() {
        let mut t = tree();
        for i in 0..3 {
            t.insert(anon(A + 2 * i * P, 1, RW));
        }
        assert!(t.validate(2).is_ok(), "do_mmap checks map_count > max");
        assert!(t.validate(1).is_err());
    }

    #[test]
    fn softdirty_does_not_prevent_merging() {
        let mut t = tree();
        t.insert_or_merge(anon(A, 4, RW));
        let mut v = anon(A + 4 * P, 4, RW);
        v.flags |= VmFlags::VM_SOFTDIRTY;
        t.insert_or_merge(v);
        assert_eq!(t.map_count(), 1);
    }
}

mod munmap {
    use super::*;

    /// [A, A+4P) rw, [A+4P, A+8P) r, [A+8P, A+12P) rw — three VMAs that do not merge.
    fn three() -> VmaTree {
        let mut t = tree();
        t.insert_or_merge(anon(A, 4, RW));
        t.insert_or_merge(anon(A + 4 * P, 4, R));
        t.insert_or_merge(anon(A + 8 * P, 4, RW));
        assert_eq!(t.map_count(), 3);
        t
    }

    fn ranges(v: &[Vma]) -> Vec<(u64, u64)> {
        v.iter().map(|v| (v.start, v.end)).collect()
    }

    #[test]
    fn hole_inside_one_vma() {
        let mut t = tree();
        t.insert_or_merge(anon(A, 10, RW));
        let d = t.detach_range(A + 2 * P, A + 5 * P, MAX).unwrap();
        assert_eq!(ranges(&d), vec![(A + 2 * P, A + 5 * P)]);
        assert_eq!(d[0].pgoff, (A >> 12) + 2);
        assert_eq!(shape(&t), vec![(A, A + 2 * P), (A + 5 * P, A + 10 * P)]);
        assert_eq!(t.get(A + 5 * P).unwrap().pgoff, (A >> 12) + 5);
        check(&t);
    }

    #[test]
    fn partial_overlap_of_two() {
        let mut t = three();
        let d = t.detach_range(A + 2 * P, A + 6 * P, MAX).unwrap();
        assert_eq!(
            ranges(&d),
            vec![(A + 2 * P, A + 4 * P), (A + 4 * P, A + 6 * P)]
        );
        assert_eq!(
            shape(&t),
            vec![
                (A, A + 2 * P),
                (A + 6 * P, A + 8 * P),
                (A + 8 * P, A + 12 * P)
            ]
        );
        check(&t);
    }

    #[test]
    fn partial_overlap_of_three() {
        let mut t = three();
        let d = t.detach_range(A + 2 * P, A + 10 * P, MAX).unwrap();
        assert_eq!(
            ranges(&d),
            vec![
                (A + 2 * P, A + 4 * P),
                (A + 4 * P, A + 8 * P),
                (A + 8 * P, A + 10 * P)
            ]
        );
        assert_eq!(d[2].pgoff, (A >> 12) + 8);
        assert_eq!(shape(&t), vec![(A, A + 2 * P), (A + 10 * P, A + 12 * P)]);
        assert_eq!(t.get(A + 10 * P).unwrap().pgoff, (A >> 12) + 10);
        check(&t);
    }

    #[test]
    fn whole_vmas_holes_and_nothing() {
        let mut t = three();
        assert!(t
            .detach_range(A + 20 * P, A + 30 * P, MAX)
            .unwrap()
            .is_empty());
        assert_eq!(
            ranges(&t.detach_range(A + 4 * P, A + 8 * P, MAX).unwrap()),
            vec![(A + 4 * P, A + 8 * P)]
        );
        let d = t.detach_range(A - 4 * P, A + 40 * P, MAX).unwrap();
        assert_eq!(ranges(&d), vec![(A, A + 4 * P), (A + 8 * P, A + 12 * P)]);
        assert!(t.is_empty());
        check(&t);
    }

    #[test]
    fn punching_a_hole_at_the_limit_is_enomem_and_changes_nothing() {
        let mut t = three();
        let before = snapshot(&t);
        assert_eq!(
            t.detach_range(A + P, A + 2 * P, 3).map(|v| v.len()),
            Err(Errno::ENOMEM)
        );
        assert_eq!(snapshot(&t), before);
        // Above the limit as well.
        assert_eq!(
            t.detach_range(A + P, A + 2 * P, 2).map(|v| v.len()),
            Err(Errno::ENOMEM)
        );
        assert_eq!(snapshot(&t), before);
        check(&t);
    }

    #[test]
    fn unmaps_that_do_not_grow_the_count_pass_at_the_limit() {
        // Tail of one VMA: one split, one removal.
        let mut t = three();
        t.detach_range(A + 2 * P, A + 4 * P, 3).unwrap();
        assert_eq!(t.map_count(), 3);
        // Head of one VMA: no start split at all.
        let mut t = three();
        t.detach_range(A, A + 2 * P, 3).unwrap();
        assert_eq!(t.map_count(), 3);
        // Straddling two VMAs: two splits (the count passes the limit by one in between).
        let mut t = three();
        t.detach_range(A + 2 * P, A + 6 * P, 3).unwrap();
        assert_eq!(t.map_count(), 3);
        check(&t);
    }
}

mod unmapped_area {
    use super::*;

    const MB: u64 = 1 << 20;
    /// The probe host's top of free space below its libraries, under `setarch -R`.
    const TOP: u64 = 0x7ffff7dd2000;

    #[test]
    fn empty_tree_is_top_down_from_mmap_base() {
        let t = tree();
        assert_eq!(t.get_unmapped_area(P, 0, true), Ok(DEFAULT_MMAP_BASE - P));
        assert_eq!(
            t.get_unmapped_area(P + 1, 0, false),
            Ok(DEFAULT_MMAP_BASE - 2 * P),
            "length rounded up"
        );
        assert_eq!(t.get_unmapped_area(0, 0, false), Err(Errno::EINVAL));
        assert_eq!(
            t.get_unmapped_area(TASK_SIZE + P, 0, false),
            Err(Errno::ENOMEM)
        );
        assert_eq!(t.get_unmapped_area(u64::MAX, 0, false), Err(Errno::ENOMEM));
    }

    #[test]
    fn free_hint_is_honoured_and_rounded() {
        let mut t = tree();
        t.insert(anon(A + 8 * P, 4, RW));
        assert_eq!(t.get_unmapped_area(4 * P, A + 4 * P, false), Ok(A + 4 * P));
        assert_eq!(
            t.get_unmapped_area(4 * P, A + 123, false),
            Ok(A),
            "rounded down (probed)"
        );
        assert_eq!(
            t.get_unmapped_area(P, 0x1000, false),
            Ok(MMAP_MIN_ADDR),
            "raised to mmap_min_addr (probed)"
        );
        assert_eq!(
            t.get_unmapped_area(4 * MB, A + 12 * P, true),
            Ok(A + 12 * P),
            "a hint disables THP alignment"
        );
        check(&t);
    }

    #[test]
    fn colliding_hint_gets_a_fresh_search() {
        let mut t = tree();
        t.insert(anon(A + 8 * P, 4, RW));
        let fresh = t.get_unmapped_area(4 * P, 0, false).unwrap();
        assert_eq!(t.get_unmapped_area(4 * P, A + 6 * P, false), Ok(fresh));
        assert_eq!(t.get_unmapped_area(4 * P, A + 9 * P, false), Ok(fresh));
        assert_eq!(
            t.get_unmapped_area(4 * P, TASK_SIZE - 2 * P, false),
            Ok(fresh),
            "past TASK_SIZE"
        );
        // With a hint, 2 MiB multiples are not aligned (probed: 4 MiB at a colliding hint).
        t.insert(anon(DEFAULT_MMAP_BASE - MB, 256, RW));
        let a = t.get_unmapped_area(4 * MB, A + 9 * P, true).unwrap();
        assert_eq!(a, DEFAULT_MMAP_BASE - 5 * MB);
        assert_ne!(a % PMD_SIZE, 0);
    }

    #[test]
    fn anonymous_thp_alignment_only_for_2m_multiples_without_hint() {
        let mut t = tree();
        // Make the top of the free space unaligned.
        t.insert(anon(DEFAULT_MMAP_BASE - 3 * P, 3, RW));
        let top = DEFAULT_MMAP_BASE - 3 * P;
        for (len, aligned) in [
            (2 * MB, true),
            (4 * MB, true),
            (3 * MB, false),
            (4 * MB + P, false),
            (MB, false),
        ] {
            let a = t.get_unmapped_area(len, 0, true).unwrap();
            if aligned {
                assert_eq!(a, (top - len) & !(PMD_SIZE - 1), "len {len:#x}");
            } else {
                assert_eq!(a, top - len, "len {len:#x}");
            }
            assert_eq!(
                t.get_unmapped_area(len, 0, false),
                Ok(top - len),
                "align_thp off"
            );
        }
    }

    #[test]
    fn replay_of_a_probe_sequence() {
        // The exact sequence and results of a probe on Linux 6.18 (setarch -R; the first free
        // byte below the libraries was 0x7ffff7dd2000), including /dev/zero's alignment by file
        // offset and the merges; the maps lines are the probe's.
        let mut t = VmaTree::new(TOP);
        let map = |t: &mut VmaTree, a: u64, v: Vma| {
            let s = t.insert_or_merge(v);
            assert!(s <= a);
        };
        let a1 = t.get_unmapped_area(MB, 0, true).unwrap();
        assert_eq!(a1, 0x7ffff7cd2000);
        map(&mut t, a1, anon(a1, 256, R));
        let a2 = t.thp_get_unmapped_area(3 * MB, 0, 0).unwrap();
        assert_eq!(a2, 0x7ffff7800000);
        map(&mut t, a2, devzero(a2, 768, R, 0));
        let a3 = t.get_unmapped_area(MB, 0, true).unwrap();
        assert_eq!(a3, 0x7ffff7bd2000);
        map(&mut t, a3, anon(a3, 256, R));
        let a4 = t.thp_get_unmapped_area(3 * MB, 0, P).unwrap();
        assert_eq!(
            a4, 0x7ffff7500000,
            "offset 4 KiB: no whole aligned block, no alignment"
        );
        map(&mut t, a4, devzero(a4, 768, R, 1));
        let a5 = t.get_unmapped_area(MB, 0, true).unwrap();
        assert_eq!(a5, 0x7ffff7400000);
        map(&mut t, a5, anon(a5, 256, R));
        let a6 = t.get_unmapped_area(4 * MB, 0, true).unwrap();
        assert_eq!(a6, 0x7ffff7000000);
        map(&mut t, a6, anon(a6, 1024, R));
        assert_eq!(
            t.render_maps(),
            "7ffff7000000-7ffff7500000 r--p 00000000 00:00 0 \n\
             7ffff7500000-7ffff7800000 r--p 00001000 00:06 4                          /dev/zero\n\
             7ffff7800000-7ffff7b00000 r--p 00000000 00:06 4                          /dev/zero\n\
             7ffff7bd2000-7ffff7dd2000 r--p 00000000 00:00 0 \n"
        );
        check(&t);
    }

    #[test]
    fn replay_of_the_tight_hint_probe() {
        // /dev/zero with a hint that is free for len but not for len + 2 MiB: fresh aligned
        // search; then an anonymous hint that is free is honoured (and merges), and a colliding
        // 2 MiB one falls back to the plain search.
        let base = 0x340000000000;
        let mut t = VmaTree::new(TOP);
        t.insert_or_merge(anon(base + 0x400000, 1, R));
        assert_eq!(
            t.thp_get_unmapped_area(3 * MB, base + 0x100000, 0),
            Ok(0x7ffff7a00000)
        );
        t.insert_or_merge(devzero(0x7ffff7a00000, 768, R, 0));
        t.insert_or_merge(anon(base + 0x1400000, 1, R));
        let a = t.get_unmapped_area(3 * MB, base + 0x1100000, true).unwrap();
        assert_eq!(a, base + 0x1100000);
        t.insert_or_merge(anon(a, 768, R));
        assert_eq!(
            t.get_unmapped_area(2 * MB, base + 0x400000, true),
            Ok(0x7ffff7800000)
        );
        assert_eq!(
            t.render_maps(),
            "340000400000-340000401000 r--p 00000000 00:00 0 \n\
             340001100000-340001401000 r--p 00000000 00:00 0 \n\
             7ffff7a00000-7ffff7d00000 r--p 00000000 00:06 4                          /dev/zero\n"
        );
        check(&t);
    }

    #[test]
    fn gaps_too_small_are_skipped() {
        let mut t = VmaTree::new(A + 20 * P);
        t.insert(anon(A + 16 * P, 2, RW));
        t.insert(anon(A + 10 * P, 4, RW));
        // Gaps from the top: [A+18P, A+20P) 2 pages, [A+14P, A+16P) 2 pages, [.., A+10P).
        assert_eq!(t.get_unmapped_area(2 * P, 0, false), Ok(A + 18 * P));
        assert_eq!(t.get_unmapped_area(3 * P, 0, false), Ok(A + 7 * P));
    }

    #[test]
    fn bottom_up_fallback_then_enomem() {
        let mut t = tree();
        t.insert(anon(
            MMAP_MIN_ADDR,
            (DEFAULT_MMAP_BASE - MMAP_MIN_ADDR) / P,
            RW,
        ));
        // Nothing below mmap_base: the bottom-up search from TASK_UNMAPPED_BASE finds the space
        // above mmap_base.
        assert_eq!(t.get_unmapped_area(P, 0, false), Ok(DEFAULT_MMAP_BASE));
        // The padded THP search works bottom-up too: the area is rounded up to 2 MiB.
        let aligned = crate::addr::align_up(DEFAULT_MMAP_BASE, PMD_SIZE).unwrap();
        assert_eq!(t.get_unmapped_area(2 * PMD_SIZE, 0, true), Ok(aligned));
        t.insert(anon(
            DEFAULT_MMAP_BASE,
            (TASK_SIZE - DEFAULT_MMAP_BASE) / P,
            RW,
        ));
        assert_eq!(t.get_unmapped_area(P, 0, false), Err(Errno::ENOMEM));
        assert_eq!(t.get_unmapped_area(P, A, false), Err(Errno::ENOMEM));
        assert_eq!(
            t.thp_get_unmapped_area(4 * PMD_SIZE, 0, 0),
            Err(Errno::ENOMEM)
        );
        check(&t);
    }

    #[test]
    fn stack_guard_gap_is_kept() {
        let stack = A + 4096 * P;
        let mut t = VmaTree::new(stack + 32 * P);
        let mut v = anon(stack, 32, RW);
        v.flags |= VmFlags::VM_GROWSDOWN;
        t.insert(v);
        assert_eq!(
            t.get_unmapped_area(P, 0, false),
            Ok(stack - STACK_GUARD_GAP - P)
        );
        let fresh = stack - STACK_GUARD_GAP - P;
        assert_eq!(
            t.get_unmapped_area(P, stack - 2 * P, false),
            Ok(fresh),
            "hint inside the guard gap"
        );
        assert_eq!(t.get_unmapped_area(P, fresh - P, false), Ok(fresh - P));
    }
}

mod maps {
    use super::*;

    #[test]
    fn format_matches_the_kernel() {
        // Lines copied from /proc/self/maps on Linux 6.18 for the same shapes.
        let mut t = tree();
        t.insert(anon(0x10000, 4, R));
        t.insert(anon(0x310000000000, 2, RW));
        t.insert(devzero(0x310000100000, 8, R, 0));
        t.insert(shared(0x310000200000, 4, RW, 0));
        t.insert(shared(0x310000300000, 4, RWX, 3));
        t.insert(anon(0x310000400000, 4, PROT_NONE));
        t.insert(devzero(0x310000600000, 1, RW, 2));
        t.insert(shared(0x310000700000, 1, R, 0).with_file(123456789));
        assert_eq!(
            t.render_maps(),
            "00010000-00014000 r--p 00000000 00:00 0 \n\
             310000000000-310000002000 rw-p 00000000 00:00 0 \n\
             310000100000-310000108000 r--p 00000000 00:06 4                          /dev/zero\n\
             310000200000-310000204000 rw-s 00000000 00:01 1024                       /dev/zero (deleted)\n\
             310000300000-310000304000 rwxs 00003000 00:01 1025                       /dev/zero (deleted)\n\
             310000400000-310000404000 ---p 00000000 00:00 0 \n\
             310000600000-310000601000 rw-p 00002000 00:06 4                          /dev/zero\n\
             310000700000-310000701000 r--s 00000000 00:01 123456789                  /dev/zero (deleted)\n"
        );
        // The name column is 73 whatever the address width; at least one space when the
        // prefix is longer.
        let mut t = tree();
        t.set_dev_zero_id(DevIno {
            major: 0xfff,
            minor: 0xfffff,
            ino: 12345678901234567890,
        });
        t.insert(devzero(0x10000, 1, R, 0));
        t.insert(devzero(0x7fff00000000, 1, R, 0x12345678));
        t.insert(devzero(0x7fff10000000, 1, R, 0x123456));
        t.insert(devzero(0x7fff20000000, 1, R, 0x12345));
        let out = t.render_maps();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0].find('/'), Some(73));
        assert_eq!(
            lines[0],
            "00010000-00011000 r--p 00000000 fff:fffff 12345678901234567890           /dev/zero"
        );
        // A 74-character prefix: no padding, only seq_pad's own space.
        assert_eq!(
            lines[1],
            "7fff00000000-7fff00001000 r--p 12345678000 fff:fffff 12345678901234567890  /dev/zero"
        );
        // 72 characters exactly: the same; 71: one space of padding.
        assert_eq!(
            lines[2],
            "7fff10000000-7fff10001000 r--p 123456000 fff:fffff 12345678901234567890  /dev/zero"
        );
        assert_eq!(
            lines[3],
            "7fff20000000-7fff20001000 r--p 12345000 fff:fffff 12345678901234567890   /dev/zero"
        );
    }

    /// Host checks: real mappings in a private arena, compared line by line with the tree.
    mod host {
        use std::os::unix::fs::MetadataExt;

        use super::*;

        const ARENA: u64 = 0x3100_0000_0000;
        const ARENA_LEN: u64 = 0x100_0000;

        /// mmap(2) with `MAP_FIXED_NOREPLACE` at `addr`; panics on failure.
        fn host_mmap(addr: u64, pages: u64, prot: u32, flags: i32, fd: i32, off: u64) -> *mut u8 {
            // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; the arena is private
            // to this test, so no other code's memory can be affected.
            let p = unsafe {
                libc::mmap(
                    addr as *mut libc::c_void,
                    (pages * P) as usize,
                    prot as i32,
                    flags | libc::MAP_FIXED_NOREPLACE,
                    fd,
                    off as libc::off_t,
                )
            };
            assert_eq!(
                p as u64,
                addr,
                "mmap at {addr:#x}: {}",
                std::io::Error::last_os_error()
            );
            p as *mut u8
        }

        fn host_mprotect(addr: u64, pages: u64, prot: u32) {
            // SAFETY: changes protection only inside the test's arena, which nothing else uses.
            let r = unsafe {
                libc::mprotect(addr as *mut libc::c_void, (pages * P) as usize, prot as i32)
            };
            assert_eq!(r, 0, "mprotect {addr:#x}");
        }

        fn host_madvise(addr: u64, pages: u64, advice: i32) {
            // SAFETY: advice on the test's arena only; HUGEPAGE/NOHUGEPAGE do not touch data.
            let r =
                unsafe { libc::madvise(addr as *mut libc::c_void, (pages * P) as usize, advice) };
            assert_eq!(r, 0, "madvise {addr:#x}");
        }

        /// A write fault at `addr`, which must be mapped writable.
        fn host_touch(addr: u64) {
            // SAFETY: the callers pass a page of a writable mapping they created in the arena.
            unsafe { std::ptr::write_volatile(addr as *mut u8, 1) };
        }

        fn host_lines() -> Vec<String> {
            std::fs::read_to_string("/proc/self/maps")
                .unwrap()
                .lines()
                .filter(|l| {
                    let start = u64::from_str_radix(l.split('-').next().unwrap(), 16).unwrap();
                    (ARENA..ARENA + ARENA_LEN).contains(&start)
                })
                .map(|l| format!("{l}\n"))
                .collect()
        }

        /// The inode column of the host's line starting at `addr`.
        fn host_ino(lines: &[String], addr: u64) -> u64 {
            let prefix = format!("{addr:x}-");
            let l = lines.iter().find(|l| l.starts_with(&prefix)).expect("line");
            l.split_whitespace().nth(4).unwrap().parse().unwrap()
        }

        /// `stat /dev/zero` → the dev:inode maps shows (glibc's major/minor encoding).
        fn dev_zero_id() -> DevIno {
            let md = std::fs::metadata("/dev/zero").unwrap();
            let dev = md.dev();
            let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
            let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
            DevIno {
                major: major as u32,
                minor: minor as u32,
                ino: md.ino(),
            }
        }

        /// Every shape of the module doc, done on the host and on a tree with the same calls.
        #[test]
        fn maps_lines_and_merges_match_the_host_kernel() {
            let zero = std::fs::File::options()
                .read(true)
                .write(true)
                .open("/dev/zero")
                .unwrap();
            let zfd = std::os::fd::AsRawFd::as_raw_fd(&zero);
            let priv_anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
            let shared_anon = libc::MAP_SHARED | libc::MAP_ANONYMOUS;
            let a = ARENA;

            // 1. anon rw ×10, middle mprotected r: three VMAs.
            host_mmap(a, 10, RW, priv_anon, -1, 0);
            host_mprotect(a + 2 * P, 3, R);
            // 2. /dev/zero, same file, offsets 0 and 4 pages: one VMA.
            host_mmap(a + 0x100000, 4, R, libc::MAP_PRIVATE, zfd, 0);
            host_mmap(a + 0x104000, 4, R, libc::MAP_PRIVATE, zfd, 4 * P);
            // 3. usemem style: three /dev/zero mappings at offset 0, placed top-down.
            for i in (0..3).rev() {
                host_mmap(a + 0x110000 + i * 4 * P, 4, RW, libc::MAP_PRIVATE, zfd, 0);
            }
            // 4. shared anon, middle page mprotected: three pieces of one file.
            host_mmap(a + 0x200000, 4, RW, shared_anon, -1, 0);
            host_mprotect(a + 0x200000 + P, 1, R);
            // 5. shared anon, round trip: merged again; a second one right after: apart.
            host_mmap(a + 0x300000, 4, RW, shared_anon, -1, 0);
            host_mprotect(a + 0x300000 + P, 1, R);
            host_mprotect(a + 0x300000 + P, 1, RW);
            host_mmap(a + 0x304000, 4, RW, shared_anon, -1, 0);
            // 6. MAP_SHARED of /dev/zero at offset 3 pages.
            host_mmap(a + 0x400000, 4, RWX, libc::MAP_SHARED, zfd, 3 * P);
            // 7. anon_vma reuse: A rw written, B rwx written, B → rw: one VMA.
            host_mmap(a + 0x500000, 4, RW, priv_anon, -1, 0);
            host_touch(a + 0x500000);
            host_mmap(a + 0x504000, 4, RWX, priv_anon, -1, 0);
            host_touch(a + 0x504000);
            host_mprotect(a + 0x504000, 4, RW);
            // 8. different anon_vmas: NOHUGEPAGE A written, B written, both HUGEPAGE: two VMAs.
            host_mmap(a + 0x600000, 4, RW, priv_anon, -1, 0);
            host_madvise(a + 0x600000, 4, libc::MADV_NOHUGEPAGE);
            host_touch(a + 0x600000);
            host_mmap(a + 0x604000, 4, RW, priv_anon, -1, 0);
            host_touch(a + 0x604000);
            host_madvise(a + 0x600000, 8, libc::MADV_HUGEPAGE);
            // 9. three-way: all written, middle r and back: one VMA.
            host_mmap(a + 0x700000, 12, RW, priv_anon, -1, 0);
            for i in 0..12 {
                host_touch(a + 0x700000 + i * P);
            }
            host_mprotect(a + 0x700000 + 4 * P, 4, R);
            host_mprotect(a + 0x700000 + 4 * P, 4, RW);
            // 10. /dev/zero at offset 2 pages, written, middle page r: three pieces.
            host_mmap(a + 0x800000, 4, RW, libc::MAP_PRIVATE, zfd, 2 * P);
            host_touch(a + 0x800000);
            host_mprotect(a + 0x801000, 1, R);
            // 11. PROT_NONE.
            host_mmap(a + 0x900000, 4, PROT_NONE, priv_anon, -1, 0);
            // 12. split unfaulted, outer pieces written separately, middle restored: merges
            //     with prev only.
            host_mmap(a + 0xa00000, 12, RW, priv_anon, -1, 0);
            host_mprotect(a + 0xa00000 + 4 * P, 4, R);
            host_touch(a + 0xa00000);
            host_touch(a + 0xa00000 + 8 * P);
            host_mprotect(a + 0xa00000 + 4 * P, 4, RW);
            // 13. edge mprotect: [r ×4][rw ×8], first two rw pages → r: [r ×6][rw ×6].
            host_mmap(a + 0xb00000, 4, R, priv_anon, -1, 0);
            host_mmap(a + 0xb04000, 8, RW, priv_anon, -1, 0);
            host_mprotect(a + 0xb04000, 2, R);
            // 14. adjacent anonymous mmaps placed top-down: one VMA.
            for i in (0..4).rev() {
                host_mmap(a + 0xc00000 + i * 4 * P, 4, RW, priv_anon, -1, 0);
            }

            let host = host_lines();
            // SAFETY: unmaps exactly the test's arena.
            unsafe { libc::munmap(a as *mut libc::c_void, ARENA_LEN as usize) };

            let mut t = tree();
            t.set_dev_zero_id(dev_zero_id());
            let ids = ids();
            // 1.
            t.insert_or_merge(anon(a, 10, RW));
            mprotect(&mut t, a + 2 * P, a + 5 * P, R).unwrap();
            // 2.
            t.insert_or_merge(devzero(a + 0x100000, 4, R, 0));
            t.insert_or_merge(devzero(a + 0x104000, 4, R, 4));
            // 3.
            for i in (0..3).rev() {
                t.insert_or_merge(devzero(a + 0x110000 + i * 4 * P, 4, RW, 0));
            }
            // 4. (shared inodes are global on the host: take them from its lines)
            t.insert_or_merge(
                shared(a + 0x200000, 4, RW, 0).with_file(host_ino(&host, a + 0x200000)),
            );
            mprotect(&mut t, a + 0x200000 + P, a + 0x200000 + 2 * P, R).unwrap();
            // 5.
            t.insert_or_merge(
                shared(a + 0x300000, 4, RW, 0).with_file(host_ino(&host, a + 0x300000)),
            );
            mprotect(&mut t, a + 0x300000 + P, a + 0x300000 + 2 * P, R).unwrap();
            mprotect(&mut t, a + 0x300000 + P, a + 0x300000 + 2 * P, RW).unwrap();
            t.insert_or_merge(
                shared(a + 0x304000, 4, RW, 0).with_file(host_ino(&host, a + 0x304000)),
            );
            // 6.
            t.insert_or_merge(
                shared(a + 0x400000, 4, RWX, 3).with_file(host_ino(&host, a + 0x400000)),
            );
            // 7.
            t.insert_or_merge(anon(a + 0x500000, 4, RW));
            fault(&t, &ids, a + 0x500000);
            t.insert_or_merge(anon(a + 0x504000, 4, RWX));
            fault(&t, &ids, a + 0x504000);
            mprotect(&mut t, a + 0x504000, a + 0x508000, RW).unwrap();
            // 8.
            t.insert_or_merge(anon(a + 0x600000, 4, RW));
            madvise_huge(&mut t, a + 0x600000, a + 0x604000, false).unwrap();
            fault(&t, &ids, a + 0x600000);
            t.insert_or_merge(anon(a + 0x604000, 4, RW));
            fault(&t, &ids, a + 0x604000);
            madvise_huge(&mut t, a + 0x600000, a + 0x608000, true).unwrap();
            // 9.
            t.insert_or_merge(anon(a + 0x700000, 12, RW));
            for i in 0..12 {
                fault(&t, &ids, a + 0x700000 + i * P);
            }
            mprotect(&mut t, a + 0x704000, a + 0x708000, R).unwrap();
            mprotect(&mut t, a + 0x704000, a + 0x708000, RW).unwrap();
            // 10.
            t.insert_or_merge(devzero(a + 0x800000, 4, RW, 2));
            fault(&t, &ids, a + 0x800000);
            mprotect(&mut t, a + 0x801000, a + 0x802000, R).unwrap();
            // 11.
            t.insert_or_merge(anon(a + 0x900000, 4, PROT_NONE));
            // 12.
            t.insert_or_merge(anon(a + 0xa00000, 12, RW));
            mprotect(&mut t, a + 0xa04000, a + 0xa08000, R).unwrap();
            fault(&t, &ids, a + 0xa00000);
            fault(&t, &ids, a + 0xa08000);
            mprotect(&mut t, a + 0xa04000, a + 0xa08000, RW).unwrap();
            // 13.
            t.insert_or_merge(anon(a + 0xb00000, 4, R));
            t.insert_or_merge(anon(a + 0xb04000, 8, RW));
            mprotect(&mut t, a + 0xb04000, a + 0xb06000, R).unwrap();
            // 14.
            for i in (0..4).rev() {
                t.insert_or_merge(anon(a + 0xc00000 + i * 4 * P, 4, RW));
            }
            check(&t);

            let ours: Vec<String> = t.render_maps().lines().map(|l| format!("{l}\n")).collect();
            assert_eq!(
                ours,
                host,
                "\nours:\n{}\nhost:\n{}",
                ours.concat(),
                host.concat()
            );
            assert_eq!(host.len(), 26, "the probed shapes:\n{}", host.concat());
        }
    }
}

mod props {
    //! Random sequences of the operations the syscalls perform, on a 64-page arena with a tiny
    //! `max_map_count`, checked page by page against a shadow of what each page should be.

    use proptest::prelude::*;

    use super::*;

    const PAGES: u64 = 64;
    const LIMIT: usize = 10;

    #[derive(Debug, Clone)]
    enum Op {
        /// MAP_FIXED: unmap, then map (merging).
        Map {
            page: u64,
            pages: u64,
            kind: u8,
            prot: u32,
            linear: bool,
        },
        Unmap {
            page: u64,
            pages: u64,
        },
        Protect {
            page: u64,
            pages: u64,
            prot: u32,
        },
        Madvise {
            page: u64,
            pages: u64,
            huge: bool,
        },
        Split {
            page: u64,
        },
        Fault {
            page: u64,
        },
        MergeAfter {
            page: u64,
        },
        Area {
            pages: u64,
            hint: Option<u64>,
            thp: bool,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        let page = 0..PAGES;
        let pages = 1..12u64;
        prop_oneof![
            4 => (page.clone(), pages.clone(), 0..4u8, 0..8u32, any::<bool>())
                .prop_map(|(page, pages, kind, prot, linear)| Op::Map { page, pages, kind, prot, linear }),
            2 => (page.clone(), pages.clone()).prop_map(|(page, pages)| Op::Unmap { page, pages }),
            3 => (page.clone(), pages.clone(), 0..8u32).prop_map(|(page, pages, prot)| Op::Protect { page, pages, prot }),
            1 => (page.clone(), pages.clone(), any::<bool>()).prop_map(|(page, pages, huge)| Op::Madvise { page, pages, huge }),
            1 => page.clone().prop_map(|page| Op::Split { page }),
            2 => page.clone().prop_map(|page| Op::Fault { page }),
            1 => page.clone().prop_map(|page| Op::MergeAfter { page }),
            1 => (prop_oneof![1..8u64, Just(512u64), Just(1024u64)], proptest::option::of(0..PAGES), any::<bool>())
                .prop_map(|(pages, hint, thp)| Op::Area { pages, hint, thp }),
        ]
    }

    /// What one page should be: flags, kind, file, its own pgoff, anon_vma (0 = unknown yet).
    #[derive(Debug, Clone, Copy, PartialEq)]
    struct PageState {
        flags: VmFlags,
        kind: VmaKind,
        file: u64,
        pgoff: u64,
        anon: u64,
    }

    fn addr(page: u64) -> u64 {
        A + page * P
    }

    fn clip(page: u64, pages: u64) -> (u64, u64) {
        (addr(page), addr((page + pages).min(PAGES)))
    }

    fn view(t: &VmaTree, page: u64) -> Option<PageState> {
        let a = addr(page);
        t.vma_lookup(a).map(|v| PageState {
            flags: v.flags,
            kind: v.kind,
            file: v.file,
            pgoff: v.linear_page_index(a),
            anon: v.anon_vma(),
        })
    }

    fn compare(t: &VmaTree, shadow: &mut [Option<PageState>]) -> Result<(), TestCaseError> {
        t.validate(LIMIT).map_err(TestCaseError::fail)?;
        for page in 0..PAGES {
            let got = view(t, page);
            let want = &mut shadow[page as usize];
            match (got, want.as_mut()) {
                (None, None) => {}
                (Some(g), Some(w)) => {
                    prop_assert_eq!(
                        (g.flags, g.kind, g.file, g.pgoff),
                        (w.flags, w.kind, w.file, w.pgoff),
                        "page {}",
                        page
                    );
                    if w.anon != 0 {
                        prop_assert_eq!(g.anon, w.anon, "page {} lost its anon_vma", page);
                    }
                    w.anon = g.anon;
                }
                (g, w) => prop_assert!(false, "page {page}: tree {g:?}, shadow {w:?}"),
            }
        }
        Ok(())
    }

    fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
        let mut t = VmaTree::new(addr(PAGES));
        let ids = ids();
        let mut shadow: Vec<Option<PageState>> = vec![None; PAGES as usize];
        for op in ops {
            let before = snapshot(&t);
            match op {
                Op::Map {
                    page,
                    pages,
                    kind,
                    prot,
                    linear,
                } => {
                    let (s, e) = clip(page, pages);
                    if t.detach_range(s, e, LIMIT).is_err() {
                        prop_assert_eq!(&snapshot(&t), &before);
                    } else if t.map_count() < LIMIT {
                        let n = (e - s) / P;
                        let v = match kind {
                            0 => anon(s, n, prot),
                            1 | 2 => {
                                let v = devzero(s, n, prot, if linear { page } else { 0 });
                                if kind == 2 {
                                    v.with_file(2)
                                } else {
                                    v
                                }
                            }
                            _ => shared(s, n, prot, 0),
                        };
                        let template = v.clone();
                        let at = t.insert_or_merge(v);
                        prop_assert!(at <= s);
                        let file = t.vma_lookup(s).unwrap().file;
                        for (i, p) in (page..page + n).enumerate() {
                            shadow[p as usize] = Some(PageState {
                                flags: template.flags,
                                kind: template.kind,
                                file,
                                pgoff: template.pgoff + i as u64,
                                anon: 0,
                            });
                        }
                    } else {
                        // do_mmap's map_count check failed after the MAP_FIXED unmap.
                        for p in page..(page + pages).min(PAGES) {
                            shadow[p as usize] = None;
                        }
                    }
                }
                Op::Unmap { page, pages } => {
                    let (s, e) = clip(page, pages);
                    match t.detach_range(s, e, LIMIT) {
                        Ok(d) => {
                            for v in &d {
                                prop_assert!(v.start >= s && v.end <= e);
                            }
                            for p in page..(page + pages).min(PAGES) {
                                shadow[p as usize] = None;
                            }
                        }
                        Err(err) => {
                            prop_assert_eq!(err, Errno::ENOMEM);
                            prop_assert_eq!(&snapshot(&t), &before);
                        }
                    }
                }
                Op::Protect { page, pages, prot } => {
                    let (s, e) = clip(page, pages);
                    let r = mprotect_max(&mut t, s, e, prot, LIMIT);
                    // Whatever happened, only access bits may have changed; on success every
                    // mapped page of the range has the new ones.
                    for p in page..(page + pages).min(PAGES) {
                        if let (Some(w), Some(g)) = (shadow[p as usize].as_mut(), view(&t, p)) {
                            prop_assert_eq!(
                                g.flags.minus(VmFlags::VM_ACCESS_FLAGS),
                                w.flags.minus(VmFlags::VM_ACCESS_FLAGS)
                            );
                            if r.is_ok() {
                                prop_assert_eq!(g.flags.prot_bits(), prot);
                            }
                            w.flags = g.flags;
                        }
                    }
                    if r.is_ok() {
                        prop_assert!(
                            (page..(page + pages).min(PAGES)).all(|p| shadow[p as usize].is_some())
                        );
                    }
                }
                Op::Madvise { page, pages, huge } => {
                    let (s, e) = clip(page, pages);
                    let r = modify(&mut t, s, e, LIMIT, |f| {
                        if huge {
                            f.minus(VmFlags::VM_NOHUGEPAGE) | VmFlags::VM_HUGEPAGE
                        } else {
                            f.minus(VmFlags::VM_HUGEPAGE) | VmFlags::VM_NOHUGEPAGE
                        }
                    });
                    let _ = r;
                    for p in page..(page + pages).min(PAGES) {
                        if let (Some(w), Some(g)) = (shadow[p as usize].as_mut(), view(&t, p)) {
                            let hp = VmFlags::VM_HUGEPAGE | VmFlags::VM_NOHUGEPAGE;
                            prop_assert_eq!(g.flags.minus(hp), w.flags.minus(hp));
                            w.flags = g.flags;
                        }
                    }
                }
                Op::Split { page } => {
                    if t.split(addr(page), LIMIT).is_err() {
                        prop_assert_eq!(&snapshot(&t), &before);
                    }
                }
                Op::Fault { page } => {
                    if let Some(v) = t.vma_lookup(addr(page)) {
                        if v.is_anonymous() {
                            let a = t.anon_vma_prepare(v, &ids);
                            prop_assert_ne!(a, 0);
                            let w = shadow[page as usize].as_mut().unwrap();
                            prop_assert!(w.anon == 0 || w.anon == a);
                        }
                    }
                }
                Op::MergeAfter { page } => {
                    let n = t.map_count();
                    let r = t.merge_after_change(addr(page));
                    prop_assert_eq!(r.is_some(), shadow[page as usize].is_some());
                    prop_assert!(t.map_count() <= n);
                }
                Op::Area { pages, hint, thp } => {
                    let len = pages * P;
                    let h = hint.map_or(0, addr);
                    let a = t
                        .get_unmapped_area(len, h, thp)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert!(a >= MMAP_MIN_ADDR && a + len <= TASK_SIZE);
                    prop_assert!(
                        t.find_vma_intersection(a, a + len).is_none(),
                        "{a:#x}+{len:#x} is mapped"
                    );
                    if thp && h == 0 && len.is_multiple_of(PMD_SIZE) {
                        prop_assert_eq!(a % PMD_SIZE, 0);
                    }
                    if h != 0
                        && t.find_vma_intersection(h, h + len).is_none()
                        && h + len <= TASK_SIZE
                    {
                        prop_assert_eq!(a, h, "a free hint is used");
                    }
                    let b = t
                        .thp_get_unmapped_area(len, h, 0)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert!(t.find_vma_intersection(b, b + len).is_none());
                }
            }
            compare(&t, &mut shadow)?;
            prop_assert!(t.map_count() <= LIMIT);
        }
        Ok(())
    }

    /// 512 sequences (times `USERMM_TEST_SCALE`), from `USERMM_TEST_SEED`.
    #[test]
    fn random_sequences_keep_the_tree_valid() {
        usermm_testscale::prop::check(
            "vma::random_sequences",
            file!(),
            512,
            proptest::collection::vec(op(), 1..60),
            |ops| {
                let n = ops.len() as u64;
                run(ops).map(|()| n)
            },
        );
    }
}
