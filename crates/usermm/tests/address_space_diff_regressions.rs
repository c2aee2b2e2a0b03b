//! Regression tests for the engine divergences from Linux 6.18 that the differential tests
//! (`crates/usermm-diff/tests/differential.rs`) found and that were fixed in the engine.
//! Each test names what the host kernel does; the engine must keep doing the same.

mod common;

use std::sync::Arc;

use common::*;
use usermm::config::ThpMode;
use usermm::mm::mmap::*;
use usermm::mm::RssItem;
use usermm::{Errno, Machine, Mm};

const P: u64 = 4096;
const H: u64 = 2 << 20;
const RW: u32 = PROT_READ | PROT_WRITE;
/// A fixed spot for the mappings (far from the top-down search area).
const BASE: u64 = 0x3000_0000_0000;

fn at(n: u64) -> u64 {
    BASE + n * P
}

fn map_at(mm: &Mm, addr: u64, pages: u64, prot: u32, extra: u32) -> Result<u64, Errno> {
    mm.mmap(
        C0,
        addr,
        pages * P,
        prot,
        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | extra,
        MapFile::None,
    )
}

/// The maps lines as `(start, end, perms, offset)`.
fn lines(mm: &Mm) -> Vec<(u64, u64, String, u64)> {
    mm.maps()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (s, e) = f[0].split_once('-').unwrap();
            (
                u64::from_str_radix(s, 16).unwrap(),
                u64::from_str_radix(e, 16).unwrap(),
                f[1].to_string(),
                u64::from_str_radix(f[2], 16).unwrap(),
            )
        })
        .collect()
}

fn spans(mm: &Mm) -> Vec<(u64, u64, String)> {
    lines(mm)
        .into_iter()
        .map(|(s, e, p, _)| (s, e, p))
        .collect()
}

fn span(s: u64, e: u64, p: &str) -> (u64, u64, String) {
    (s, e, p.to_string())
}

fn thp_madvise() -> Arc<Machine> {
    machine_with(|c| c.thp = ThpMode::Madvise)
}

/// x86 maps `PROT_WRITE` alone readable (`PAGE_COPY`): a read used to loop on a PROT_NONE-like
/// zero-page entry (VM_BUG_ON "fault loop"), also after mprotect to write-only.
#[test]
fn write_only_mappings_are_readable() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let a = map_at(&mm, at(0), 2, PROT_WRITE, 0).unwrap();
    assert_eq!(t.read_u64(a).unwrap(), 0);
    t.write_u64(a + 8, 5).unwrap();
    assert_eq!(t.read_u64(a + 8).unwrap(), 5);
    let b = map_at(&mm, at(4), 2, RW, 0).unwrap();
    assert_eq!(t.read_u64(b).unwrap(), 0); // the zero page
    mm.mprotect(C0, b, 2 * P, PROT_WRITE).unwrap();
    assert_eq!(t.read_u64(b).unwrap(), 0);
    exit_and_check(&m, mm, free0);
}

/// do_mmap checks the map type after the placement: EEXIST and ENOMEM come first.
#[test]
fn mmap_type_is_checked_after_placement() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    map_at(&mm, at(0), 2, RW, 0).unwrap();
    let no_type = MAP_ANONYMOUS | MAP_FIXED_NOREPLACE;
    assert_eq!(
        mm.mmap(C0, at(0), P, RW, no_type, MapFile::None),
        Err(Errno::EEXIST)
    );
    let top = (1u64 << 47) - P;
    assert_eq!(
        mm.mmap(C0, top, P, RW, MAP_ANONYMOUS | MAP_FIXED, MapFile::None),
        Err(Errno::ENOMEM)
    );
    assert_eq!(
        mm.mmap(C0, at(8), P, RW, no_type, MapFile::None),
        Err(Errno::EINVAL)
    );
    exit_and_check(&m, mm, free0);
}

/// `/dev/zero` keeps its file offset: shown in maps, merging only with contiguous offsets,
/// and an offset the character device cannot reach is EOVERFLOW.
#[test]
fn dev_zero_offsets() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let fl = MAP_PRIVATE | MAP_FIXED_NOREPLACE;
    mm.mmap(
        C0,
        at(0),
        4 * P,
        RW,
        fl,
        MapFileAt {
            file: MapFile::DevZero,
            pgoff: 0,
        },
    )
    .unwrap();
    mm.mmap(
        C0,
        at(4),
        4 * P,
        RW,
        fl,
        MapFileAt {
            file: MapFile::DevZero,
            pgoff: 4,
        },
    )
    .unwrap();
    mm.mmap(
        C0,
        at(8),
        4 * P,
        RW,
        fl,
        MapFileAt {
            file: MapFile::DevZero,
            pgoff: 16,
        },
    )
    .unwrap();
    let l = lines(&mm);
    assert_eq!(l.len(), 2, "{l:?}");
    assert_eq!((l[0].0, l[0].1, l[0].3), (at(0), at(8), 0));
    assert_eq!((l[1].0, l[1].1, l[1].3), (at(8), at(12), 16 * P));
    let max_pgoff = (u64::MAX >> 12) - 1;
    assert_eq!(
        mm.mmap(
            C0,
            at(16),
            2 * P,
            RW,
            fl,
            MapFileAt {
                file: MapFile::DevZero,
                pgoff: max_pgoff
            }
        ),
        Err(Errno::EOVERFLOW)
    );
    // Anonymous memory ignores the offset.
    let anon = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE;
    assert_eq!(
        mm.mmap(
            C0,
            at(16),
            2 * P,
            RW,
            anon,
            MapFileAt {
                file: MapFile::None,
                pgoff: max_pgoff
            }
        ),
        Ok(at(16))
    );
    exit_and_check(&m, mm, free0);
}

/// MAP_SHARED_VALIDATE on a file refuses flags outside LEGACY_MAP_MASK (MAP_FIXED_NOREPLACE
/// included) with EOPNOTSUPP; MAP_GROWSDOWN is EINVAL on files and shared anonymous memory.
#[test]
fn mmap_file_flag_checks() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let dz = MapFile::DevZero;
    assert_eq!(
        mm.mmap(
            C0,
            at(0),
            P,
            RW,
            MAP_SHARED_VALIDATE | MAP_FIXED | 0x80_0000,
            dz
        ),
        Err(Errno::EOPNOTSUPP)
    );
    assert_eq!(
        mm.mmap(
            C0,
            at(0),
            P,
            RW,
            MAP_SHARED_VALIDATE | MAP_FIXED_NOREPLACE,
            dz
        ),
        Err(Errno::EOPNOTSUPP)
    );
    assert_eq!(
        mm.mmap(C0, at(0), P, RW, MAP_SHARED | MAP_FIXED | 0x80_0000, dz),
        Ok(at(0))
    );
    assert_eq!(
        mm.mmap(
            C0,
            at(4),
            P,
            RW,
            MAP_PRIVATE | MAP_FIXED | MAP_GROWSDOWN,
            dz
        ),
        Err(Errno::EINVAL)
    );
    let shared_anon = MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED | MAP_GROWSDOWN;
    assert_eq!(
        mm.mmap(C0, at(4), P, RW, shared_anon, MapFile::None),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        mm.mmap(
            C0,
            at(4),
            P,
            RW,
            MAP_SHARED_VALIDATE | MAP_ANONYMOUS | MAP_FIXED,
            MapFile::None
        ),
        Err(Errno::EINVAL)
    );
    exit_and_check(&m, mm, free0);
}

/// A shared `/dev/zero` mapping at an offset keeps the offset, and its shmem object is as big
/// as the mapping: pages past the object's end are SIGBUS (populate: EFAULT / mlock: ENOMEM).
#[test]
fn shared_dev_zero_past_its_object_is_sigbus() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    mm.mmap(
        C0,
        at(0),
        4 * P,
        RW,
        MAP_SHARED | MAP_FIXED_NOREPLACE,
        MapFileAt {
            file: MapFile::DevZero,
            pgoff: 2,
        },
    )
    .unwrap();
    assert_eq!(lines(&mm)[0].3, 2 * P);
    t.write_u64(at(1), 1).unwrap();
    assert!(t.read_u64(at(2)).is_err());
    assert!(t.write_u64(at(3), 1).is_err());
    assert_eq!(
        mm.madvise(C0, at(0), 4 * P, MADV_POPULATE_READ),
        Err(Errno::EFAULT)
    );
    assert_eq!(mm.mlock(C0, at(0), 4 * P), Err(Errno::ENOMEM));
    assert_eq!(mm.rss(RssItem::ShmemPages), 2);
    exit_and_check(&m, mm, free0);
}

/// mprotect charges a private mapping made writable (VM_ACCOUNT) and uncharges an unfaulted
/// anonymous one made read-only; VM_ACCOUNT takes part in merging.
#[test]
fn mprotect_commit_accounting_decides_merges() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    map_at(&mm, at(0), 2, PROT_READ, 0).unwrap();
    map_at(&mm, at(2), 2, RW, 0).unwrap();
    mm.mprotect(C0, at(0), 2 * P, RW).unwrap();
    assert_eq!(spans(&mm), vec![span(at(0), at(4), "rw-p")]);
    mm.munmap(C0, at(0), 4 * P).unwrap();

    map_at(&mm, at(0), 2, PROT_READ, 0).unwrap();
    map_at(&mm, at(2), 2, RW, 0).unwrap();
    mm.mprotect(C0, at(2), 2 * P, PROT_READ).unwrap();
    assert_eq!(spans(&mm), vec![span(at(0), at(4), "r--p")]);
    mm.munmap(C0, at(0), 4 * P).unwrap();

    map_at(&mm, at(0), 2, PROT_READ, 0).unwrap();
    map_at(&mm, at(2), 2, RW, 0).unwrap();
    t.write_u64(at(2), 1).unwrap();
    mm.mprotect(C0, at(2), 2 * P, PROT_READ).unwrap();
    assert_eq!(
        spans(&mm),
        vec![span(at(0), at(2), "r--p"), span(at(2), at(4), "r--p")]
    );
    exit_and_check(&m, mm, free0);
}

/// mprotect_fixup populates a locked private mapping that becomes writable.
#[test]
fn mprotect_populates_locked_mappings_made_writable() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    map_at(&mm, at(0), 2, PROT_NONE, MAP_LOCKED).unwrap();
    assert_eq!(mm.rss(RssItem::AnonPages), 0);
    mm.mprotect(C0, at(0), 2 * P, RW).unwrap();
    assert_eq!(mm.rss(RssItem::AnonPages), 2);
    exit_and_check(&m, mm, free0);
}

/// madvise: COLD/PAGEOUT refuse locked VMAs; WIPEONFORK needs memory without a file;
/// MADV_REMOVE on a private /dev/zero mapping is EACCES.
#[test]
fn madvise_vma_checks() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    map_at(&mm, at(0), 2, RW, MAP_LOCKED).unwrap();
    assert_eq!(mm.madvise(C0, at(0), 2 * P, MADV_COLD), Err(Errno::EINVAL));
    assert_eq!(
        mm.madvise(C0, at(0), 2 * P, MADV_PAGEOUT),
        Err(Errno::EINVAL)
    );
    mm.mmap(
        C0,
        at(4),
        2 * P,
        RW,
        MAP_PRIVATE | MAP_FIXED_NOREPLACE,
        MapFile::DevZero,
    )
    .unwrap();
    assert_eq!(
        mm.madvise(C0, at(4), 2 * P, MADV_WIPEONFORK),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        mm.madvise(C0, at(4), 2 * P, MADV_REMOVE),
        Err(Errno::EACCES)
    );
    assert_eq!(mm.madvise(C0, at(4), 2 * P, MADV_FREE), Ok(()));
    exit_and_check(&m, mm, free0);
}

/// MADV_POPULATE_*: VMA by VMA; EINVAL for a VMA without the access, ENOMEM at a hole, what
/// came before stays populated.
#[test]
fn madvise_populate_errors() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    map_at(&mm, at(0), 2, RW, 0).unwrap();
    map_at(&mm, at(2), 2, PROT_READ, 0).unwrap();
    map_at(&mm, at(4), 2, PROT_WRITE, 0).unwrap();
    assert_eq!(
        mm.madvise(C0, at(0), 4 * P, MADV_POPULATE_WRITE),
        Err(Errno::EINVAL)
    );
    assert_eq!(mm.rss(RssItem::AnonPages), 2);
    assert_eq!(
        mm.madvise(C0, at(4), 2 * P, MADV_POPULATE_READ),
        Err(Errno::EINVAL)
    );
    assert_eq!(mm.madvise(C0, at(4), 2 * P, MADV_POPULATE_WRITE), Ok(()));
    map_at(&mm, at(8), 2, RW, 0).unwrap();
    assert_eq!(
        mm.madvise(C0, at(4), 8 * P, MADV_POPULATE_WRITE),
        Err(Errno::ENOMEM)
    );
    assert_eq!(mm.rss(RssItem::AnonPages), 4);
    exit_and_check(&m, mm, free0);
}

/// MADV_MERGEABLE sets VM_MERGEABLE (a VMA split) where KSM could work; UNMERGEABLE clears it.
#[test]
fn madvise_mergeable_is_a_vma_flag() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    map_at(&mm, at(0), 4, RW, 0).unwrap();
    mm.madvise(C0, at(1), P, MADV_MERGEABLE).unwrap();
    assert_eq!(spans(&mm).len(), 3);
    mm.madvise(C0, at(1), P, MADV_UNMERGEABLE).unwrap();
    assert_eq!(spans(&mm), vec![span(at(0), at(4), "rw-p")]);
    exit_and_check(&m, mm, free0);
}

/// mlock populates only after locking the whole range worked; a PROT_NONE VMA in the range
/// makes the populate fail, which mlock reports as ENOMEM (the VMAs stay locked).
#[test]
fn mlock_populate_rules() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    map_at(&mm, at(1), 2, RW, 0).unwrap();
    assert_eq!(mm.mlock(C0, at(1), 3 * P), Err(Errno::ENOMEM));
    assert_eq!(mm.rss(RssItem::AnonPages), 0);
    map_at(&mm, at(8), 2, PROT_NONE, 0).unwrap();
    map_at(&mm, at(10), 2, PROT_READ, 0).unwrap();
    assert_eq!(mm.mlock(C0, at(8), 4 * P), Err(Errno::ENOMEM));
    assert_eq!(
        spans(&mm),
        vec![
            span(at(1), at(3), "rw-p"),
            span(at(8), at(10), "---p"),
            span(at(10), at(12), "r--p"),
        ]
    );
    // The PROT_NONE VMA stayed VM_LOCKED: made writable, it is populated at once.
    assert_eq!(mm.rss(RssItem::AnonPages), 0);
    mm.mprotect(C0, at(8), 2 * P, RW).unwrap();
    assert_eq!(mm.rss(RssItem::AnonPages), 2);
    exit_and_check(&m, mm, free0);
}

/// A VMA boundary inside a 2 MiB block splits the huge PMD there (vma_adjust_trans_huge).
#[test]
fn vma_split_inside_a_thp_splits_the_pmd() {
    let m = thp_madvise();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let a = mm
        .mmap(
            C0,
            BASE + H,
            2 * H,
            RW,
            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
            MapFile::None,
        )
        .unwrap();
    mm.madvise(C0, a, 2 * H, MADV_HUGEPAGE).unwrap();
    t.write_u64(a, 1).unwrap();
    assert_eq!(mm.smaps_rollup().anon_huge_pages_kb, 2048);
    mm.madvise(C0, a + 16 * P, P, MADV_RANDOM).unwrap();
    assert_eq!(mm.smaps_rollup().anon_huge_pages_kb, 0);
    assert_eq!(mm.rss(RssItem::AnonPages), 512);
    exit_and_check(&m, mm, free0);
}

/// A read fault that maps the huge zero page gives the VMA its anon_vma
/// (vmf_anon_prepare in do_huge_pmd_anonymous_page), so the VMA keeps VM_ACCOUNT when made
/// read-only and its pieces merge again.
#[test]
fn huge_zero_read_prepares_the_anon_vma() {
    let m = thp_madvise();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let a = mm
        .mmap(
            C0,
            BASE + H,
            2 * H,
            RW,
            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
            MapFile::None,
        )
        .unwrap();
    mm.madvise(C0, a, 2 * H, MADV_HUGEPAGE).unwrap();
    assert_eq!(t.read_u64(a).unwrap(), 0);
    mm.mprotect(C0, a, 9 * P, PROT_NONE).unwrap();
    mm.mprotect(C0, a + 6 * P, H, PROT_READ).unwrap();
    assert_eq!(
        spans(&mm),
        vec![
            span(a, a + 6 * P, "---p"),
            span(a + 6 * P, a + H + 6 * P, "r--p"),
            span(a + H + 6 * P, a + 2 * H, "rw-p")
        ]
    );
    exit_and_check(&m, mm, free0);
}

/// MADV_FREE (or COLD/PAGEOUT) over part of a PMD-mapped THP splits it, and its zero-filled
/// subpages go to the shared zero page (out of Rss); the data stays.
#[test]
fn partial_madv_free_splits_a_thp_to_the_zero_page() {
    let m = thp_madvise();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let a = mm
        .mmap(
            C0,
            BASE + H,
            H,
            RW,
            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
            MapFile::None,
        )
        .unwrap();
    mm.madvise(C0, a, H, MADV_HUGEPAGE).unwrap();
    t.write_u64(a, 7).unwrap();
    t.write_u64(a + 9 * P, 9).unwrap();
    assert_eq!(mm.rss(RssItem::AnonPages), 512);
    mm.madvise(C0, a + P, P, MADV_FREE).unwrap();
    assert_eq!(mm.rss(RssItem::AnonPages), 2);
    assert_eq!(mm.smaps_rollup().anon_huge_pages_kb, 0);
    assert_eq!(t.read_u64(a).unwrap(), 7);
    assert_eq!(t.read_u64(a + 9 * P).unwrap(), 9);
    assert_eq!(t.read_u64(a + 5 * P).unwrap(), 0);
    t.write_u64(a + 5 * P, 1).unwrap();
    assert_eq!(mm.rss(RssItem::AnonPages), 3);
    // A whole THP is left alone.
    let b = mm
        .mmap(
            C0,
            BASE + 4 * H,
            H,
            RW,
            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
            MapFile::None,
        )
        .unwrap();
    mm.madvise(C0, b, H, MADV_HUGEPAGE).unwrap();
    t.write_u64(b, 1).unwrap();
    mm.madvise(C0, b, H, MADV_COLD).unwrap();
    assert_eq!(mm.smaps_rollup().anon_huge_pages_kb, 2048);
    exit_and_check(&m, mm, free0);
}

/// An access below a MAP_GROWSDOWN VMA grows it (expand_stack), but not closer than
/// stack_guard_gap to an accessible VMA below, nor past RLIMIT_STACK.
#[test]
fn stacks_grow_down_on_faults() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let s = map_at(&mm, at(1000), 4, RW, MAP_GROWSDOWN).unwrap();
    t.write_u64(s - 3 * P, 1).unwrap();
    assert_eq!(spans(&mm), vec![span(s - 3 * P, s + 4 * P, "rw-p")]);
    // A mapping 300 pages below: growing to within 256 pages of it is refused.
    map_at(&mm, at(697), 1, PROT_READ, 0).unwrap();
    assert!(t.read_u64(at(697) + 100 * P).is_err());
    t.read_u64(at(697) + 300 * P).unwrap();
    // 8 MiB is the limit.
    let big = BASE + (1 << 30);
    map_at(&mm, big, 4, RW, MAP_GROWSDOWN).unwrap();
    assert!(t.read_u64(big + 4 * P - (8 << 20) - P).is_err());
    t.read_u64(big + 4 * P - (8 << 20)).unwrap();
    exit_and_check(&m, mm, free0);
}

/// `can_change_pte_writable` asks `PageAnonExclusive`, not the mapcount: fork clears it on the
/// shared page, and the other side's exit does not set it again, so an mprotect that adds
/// write keeps the PTE read-only and the next write takes a (reuse) fault — one more minor
/// fault than the counts alone give. Found by the generated differential tests (seed
/// 0x3b14cb22e738d277: mmap, touch, fork, parent exit, mprotect RWX, write: 5 faults vs 4).
#[test]
fn mprotect_after_the_fork_partner_exits_keeps_the_page_read_only() {
    let m = small();
    let free0 = free_pages(&m);
    let parent = Mm::new(&m, C0).unwrap();
    let a = map_at(&parent, at(0), 2, RW, 0).unwrap();
    task(&parent).write_u64(a, 7).unwrap();
    let child = parent.fork(C0).unwrap();
    parent.mmput(C0);
    drop(parent);
    child.mprotect(C0, a, 2 * P, RW | PROT_EXEC).unwrap();
    let faults = m.vmstat().get(usermm::stats::VmItem::Pgfault);
    let t = task(&child);
    t.write_u64(a, 8).unwrap();
    assert_eq!(
        m.vmstat().get(usermm::stats::VmItem::Pgfault),
        faults + 1,
        "the write after mprotect must fault (the page is not PageAnonExclusive)"
    );
    assert_eq!(t.read_u64(a).unwrap(), 8);
    // Reused by that fault, the page is exclusive again: another mprotect round trip keeps
    // it writable without a fault, as on Linux.
    child.mprotect(C0, a, 2 * P, PROT_READ).unwrap();
    child.mprotect(C0, a, 2 * P, RW).unwrap();
    let faults = m.vmstat().get(usermm::stats::VmItem::Pgfault);
    t.write_u64(a, 9).unwrap();
    assert_eq!(m.vmstat().get(usermm::stats::VmItem::Pgfault), faults);
    exit_and_check(&m, child, free0);
}
