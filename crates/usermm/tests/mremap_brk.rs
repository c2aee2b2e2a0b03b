//! mremap (shrink, grow in place, MAYMOVE, FIXED, DONTUNMAP; page tables moved, pages never
//! copied; the errno order) and brk (the heap VMA, the refusals, RLIMIT_DATA). Every test
//! ends with validate() and a leak check.

mod common;

use common::*;
use usermm::mm::mmap::*;
use usermm::mm::vma::DEFAULT_START_BRK;
use usermm::mm::RssItem;
use usermm::{Errno, Mm, PAGE_SIZE};

const P: u64 = PAGE_SIZE;
const H: u64 = 2 << 20;
const A: u64 = 0x3000_0000_0000;
const RW: u32 = PROT_READ | PROT_WRITE;
const FIXED: u32 = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;

fn fill(t: &usermm::Task, at: u64, pages: u64, tag: u64) {
    for i in 0..pages {
        t.write_u64(at + i * P, tag + i).unwrap();
    }
}

fn check(t: &usermm::Task, at: u64, pages: u64, tag: u64) {
    for i in 0..pages {
        assert_eq!(t.read_u64(at + i * P).unwrap(), tag + i, "page {i}");
    }
}

#[test]
fn grow_in_place_and_shrink() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    mm.mmap(C0, A, 4 * P, RW, FIXED, MapFile::None).unwrap();
    fill(&t, A, 4, 10);
    assert_eq!(mm.mremap(C0, A, 4 * P, 8 * P, 0, 0), Ok(A));
    check(&t, A, 4, 10);
    assert_eq!(t.read_u64(A + 7 * P).unwrap(), 0);
    assert_eq!(mm.maps().lines().count(), 1);
    assert_eq!(mm.mremap(C0, A, 8 * P, 2 * P, 0, 0), Ok(A));
    assert!(t.read_u64(A + 2 * P).is_err());
    assert_eq!(mm.rss(RssItem::AnonPages), 2);
    // Same size: nothing to do.
    assert_eq!(mm.mremap(C0, A, 2 * P, 2 * P, 0, 0), Ok(A));
    exit_and_check(&m, mm, free0);
}

#[test]
fn grow_blocked_needs_maymove_and_moves_page_tables() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    mm.mmap(C0, A, 4 * P, RW, FIXED, MapFile::None).unwrap();
    mm.mmap(C0, A + 4 * P, P, PROT_READ, FIXED, MapFile::None)
        .unwrap();
    fill(&t, A, 4, 20);
    assert_eq!(mm.mremap(C0, A, 4 * P, 8 * P, 0, 0), Err(Errno::ENOMEM));
    let used = free_pages(&m);
    let to = mm.mremap(C0, A, 4 * P, 8 * P, MREMAP_MAYMOVE, 0).unwrap();
    assert_ne!(to, A);
    check(&t, to, 4, 20);
    assert!(t.read_u64(A).is_err(), "the old range is gone");
    // Moving allocates at most page tables, never data pages.
    assert!(free_pages(&m) + 8 >= used);
    assert_eq!(mm.rss(RssItem::AnonPages), 4);
    exit_and_check(&m, mm, free0);
}

#[test]
fn fixed_moves_over_an_existing_mapping_and_dontunmap_keeps_the_source() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    mm.mmap(C0, A, 4 * P, RW, FIXED, MapFile::None).unwrap();
    mm.mmap(C0, A + 64 * P, 4 * P, RW, FIXED, MapFile::None)
        .unwrap();
    fill(&t, A, 4, 30);
    fill(&t, A + 64 * P, 4, 90);
    let flags = MREMAP_MAYMOVE | MREMAP_FIXED;
    assert_eq!(
        mm.mremap(C0, A, 4 * P, 4 * P, flags, A + 64 * P),
        Ok(A + 64 * P)
    );
    check(&t, A + 64 * P, 4, 30);
    assert!(t.read_u64(A).is_err());
    let d = MREMAP_MAYMOVE | MREMAP_DONTUNMAP;
    let to = mm.mremap(C0, A + 64 * P, 4 * P, 4 * P, d, 0).unwrap();
    check(&t, to, 4, 30);
    assert_eq!(
        t.read_u64(A + 64 * P).unwrap(),
        0,
        "DONTUNMAP: source empty, mapped"
    );
    exit_and_check(&m, mm, free0);
}

#[test]
fn thp_and_pte_tables_move_whole() {
    let m = thp_always();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let a = anon(&mm, 4 * H);
    t.write_u64(a, 1).unwrap(); // THP
    assert_eq!(t.read_u64(a + H).unwrap(), 0); // huge zero page
    mm.madvise(C0, a + 2 * H, 2 * H, MADV_NOHUGEPAGE).unwrap();
    fill(&t, a + 2 * H, 512, 100); // a full PTE table
                                   // [a, a + 4H) now spans two VMAs: growing it is EFAULT, a FIXED move of the same size
                                   // moves both (6.17's remap_move).
    let mf = MREMAP_MAYMOVE | MREMAP_FIXED;
    assert_eq!(
        mm.mremap(C0, a, 4 * H, 5 * H, mf, 0x3100_0000_0000),
        Err(Errno::EFAULT)
    );
    let to = mm
        .mremap(C0, a, 4 * H, 4 * H, mf, 0x3100_0000_0000)
        .unwrap();
    assert_eq!(mm.maps().lines().count(), 2);
    assert_eq!(t.read_u64(to).unwrap(), 1);
    assert_eq!(t.read_u64(to + H).unwrap(), 0);
    assert_eq!(mm.smaps_rollup().anon_huge_pages_kb, 2048);
    check(&t, to + 2 * H, 512, 100);
    mm.validate().unwrap();
    // Unaligned move: the huge PMD splits, PTEs move one by one.
    let to2 = mm
        .mremap(
            C0,
            to,
            2 * H,
            2 * H,
            MREMAP_MAYMOVE | MREMAP_FIXED,
            0x3200_0000_1000,
        )
        .unwrap();
    assert_eq!(t.read_u64(to2).unwrap(), 1);
    exit_and_check(&m, mm, free0);
}

#[test]
fn errno_order() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    mm.mmap(C0, A, 4 * P, RW, FIXED, MapFile::None).unwrap();
    mm.mmap(C0, A + 4 * P, 4 * P, PROT_READ, FIXED, MapFile::None)
        .unwrap();
    let e = |r: Result<u64, Errno>| r.unwrap_err();
    assert_eq!(e(mm.mremap(C0, A, P, P, 8, 0)), Errno::EINVAL, "bad flag");
    assert_eq!(
        e(mm.mremap(C0, A + 1, P, P, 0, 0)),
        Errno::EINVAL,
        "unaligned"
    );
    assert_eq!(e(mm.mremap(C0, A, P, 0, 0, 0)), Errno::EINVAL, "new_len 0");
    assert_eq!(
        e(mm.mremap(C0, A, P, P, MREMAP_FIXED, A + 64 * P)),
        Errno::EINVAL,
        "FIXED without MAYMOVE"
    );
    let mf = MREMAP_MAYMOVE | MREMAP_FIXED;
    assert_eq!(e(mm.mremap(C0, A, P, P, mf, A + 1)), Errno::EINVAL);
    assert_eq!(
        e(mm.mremap(C0, A, 2 * P, 2 * P, mf, A + P)),
        Errno::EINVAL,
        "overlap"
    );
    assert_eq!(
        e(mm.mremap(C0, A, P, 2 * P, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, 0)),
        Errno::EINVAL
    );
    assert_eq!(
        e(mm.mremap(C0, A + 64 * P, P, P, 0, 0)),
        Errno::EFAULT,
        "unmapped"
    );
    assert_eq!(
        e(mm.mremap(C0, A, 8 * P, 16 * P, MREMAP_MAYMOVE, 0)),
        Errno::EFAULT,
        "spans two VMAs"
    );
    assert_eq!(
        e(mm.mremap(C0, A, 0, P, MREMAP_MAYMOVE, 0)),
        Errno::EINVAL,
        "old 0"
    );
    assert_eq!(e(mm.mremap(C0, A, 4 * P, 8 * P, 0, 0)), Errno::ENOMEM);
    // A shrink across two VMAs is allowed: it unmaps.
    assert_eq!(mm.mremap(C0, A, 8 * P, 2 * P, 0, 0), Ok(A));
    exit_and_check(&m, mm, free0);
}

#[test]
fn brk_grows_shrinks_and_refuses() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let b0 = mm.brk(C0, 0);
    assert_eq!(b0, DEFAULT_START_BRK);
    assert_eq!(mm.brk(C0, b0 - P), b0, "below start_brk");
    assert_eq!(mm.brk(C0, b0 + 1), b0 + 1, "byte granular");
    assert!(mm.maps().contains("[heap]"));
    t.write_u64(b0, 5).unwrap();
    assert_eq!(mm.brk(C0, b0 + 3 * P), b0 + 3 * P);
    assert_eq!(mm.maps().lines().count(), 1, "the heap VMA grew");
    t.write_u64(b0 + 2 * P, 6).unwrap();
    assert_eq!(mm.brk(C0, b0 + P), b0 + P);
    assert!(t.read_u64(b0 + 2 * P).is_err());
    assert_eq!(t.read_u64(b0).unwrap(), 5);
    // A mapping close above the heap blocks growth within a page of it.
    mm.mmap(C0, b0 + 8 * P, P, RW, FIXED, MapFile::None)
        .unwrap();
    assert_eq!(mm.brk(C0, b0 + 7 * P + 1), b0 + P);
    assert_eq!(mm.brk(C0, b0 + 7 * P), b0 + 7 * P);
    // RLIMIT_DATA.
    mm.set_rlimit_data(8 * P);
    assert_eq!(mm.brk(C0, b0 + 9 * P), b0 + 7 * P);
    // LTP brk02: mprotect splits the heap; brk back below removes whole VMAs.
    mm.mprotect(C0, b0 + 2 * P, P, PROT_READ).unwrap();
    assert_eq!(mm.brk(C0, b0 + P), b0 + P);
    assert_eq!(mm.brk(C0, 0), b0 + P);
    let child = mm.fork(C0).unwrap();
    assert_eq!(child.brk(C0, 0), b0 + P, "the child inherits the heap");
    assert_eq!(task(&child).read_u64(b0).unwrap(), 5);
    child.mmput(C0);
    drop(child);
    exit_and_check(&m, mm, free0);
}

/// Regression: `MADV_REMOVE` zapped only the range it was given, but a growing `mremap` that
/// moves part of a shared mapping maps the indices after it twice; the other mapping kept the
/// punched page (Linux's `unmap_mapping_range` zaps every mapping of the hole).
#[test]
fn madvise_remove_punches_the_hole_for_every_alias() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let rw = PROT_READ | PROT_WRITE;
    let s = mm
        .mmap(C0, 0, 4 * P, rw, MAP_SHARED | MAP_ANONYMOUS, MapFile::None)
        .unwrap();
    let t = usermm::Task::new(std::sync::Arc::clone(&mm), C0);
    t.write_u64(s + 2 * P, 42).unwrap();
    // Pages 0..2 move and grow to 3: the new third page is the object's index 2, still
    // mapped at s + 2P as well.
    let moved = mm.mremap(C0, s, 2 * P, 3 * P, MREMAP_MAYMOVE, 0).unwrap();
    assert_ne!(moved, s);
    assert_eq!(t.read_u64(moved + 2 * P).unwrap(), 42, "both map index 2");
    mm.madvise(C0, moved + 2 * P, P, MADV_REMOVE).unwrap();
    assert_eq!(
        t.read_u64(s + 2 * P).unwrap(),
        0,
        "the alias kept the punched page"
    );
    t.write_u64(s + 2 * P, 7).unwrap();
    assert_eq!(t.read_u64(moved + 2 * P).unwrap(), 7);
    mm.validate().unwrap();
    exit_and_check(&m, mm, free0);
}

/// Regression: a move that could not allocate a page table half-way returned `ENOMEM` with
/// the first part of the mapping already moved to the new range, which stayed mapped. Linux
/// moves the entries back and unmaps the new range: the source is as it was.
#[test]
fn failed_move_puts_the_pages_back() {
    let m = machine_with(|c| {
        c.mem = 16 << 20;
        c.backing = usermm::config::BackingMode::Full;
        c.thp = usermm::config::ThpMode::Never;
    });
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = usermm::Task::new(std::sync::Arc::clone(&mm), C0);
    // One whole PTE table (moves as one PMD entry, no allocation) and 8 pages after it (need a
    // new PTE table at the target).
    let len = H + 8 * P;
    mm.mmap(C0, A, len, RW, FIXED, MapFile::None).unwrap();
    fill(&t, A, len / P, 0x100);
    // Exhaust memory.
    let big = mm
        .mmap(
            C0,
            0,
            16 << 20,
            RW,
            MAP_PRIVATE | MAP_ANONYMOUS,
            MapFile::None,
        )
        .unwrap();
    let mut p = big;
    while t.write_u64(p, 1).is_ok() {
        p += P;
    }
    let to = A + 64 * H;
    let flags = MREMAP_MAYMOVE | MREMAP_FIXED;
    assert_eq!(mm.mremap(C0, A, len, len, flags, to), Err(Errno::ENOMEM));
    assert!(!mm.maps().contains(&format!("{to:x}-")), "{}", mm.maps());
    check(&t, A, len / P, 0x100);
    mm.validate().unwrap();
    // With memory back the move succeeds.
    mm.munmap(C0, big, 16 << 20).unwrap();
    assert_eq!(mm.mremap(C0, A, len, len, flags, to), Ok(to));
    check(&t, to, len / P, 0x100);
    exit_and_check(&m, mm, free0);
}

/// Regression (the differential suite, seed 0xa9ec7ad23c93d148): `mremap` with `old_len` 0
/// duplicates a shared mapping; the engine placed the copy, then failed the call with the
/// `EINVAL` of unmapping an empty source. Linux returns the new address (and ignores a failed
/// unmap of the source altogether).
#[test]
fn old_len_zero_duplicates_a_shared_mapping() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = usermm::Task::new(std::sync::Arc::clone(&mm), C0);
    let shared = MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED;
    mm.mmap(C0, A, 4 * H, RW, shared, MapFile::None).unwrap();
    let (from, to) = (A + H + 3 * P, A + 2 * H);
    t.write_u64(from, 42).unwrap();
    let flags = MREMAP_MAYMOVE | MREMAP_FIXED;
    assert_eq!(mm.mremap(C0, from, 0, H, flags, to), Ok(to));
    assert_eq!(t.read_u64(to).unwrap(), 42, "the copy maps the same object");
    t.write_u64(to + 8, 43).unwrap();
    assert_eq!(t.read_u64(from + 8).unwrap(), 43);
    mm.validate().unwrap();
    exit_and_check(&m, mm, free0);
}
