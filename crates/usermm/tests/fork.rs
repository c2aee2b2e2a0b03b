//! fork and copy-on-write: `Mm::fork` (`dup_mmap`, `copy_page_range`, `copy_huge_pmd`),
//! `do_wp_page` (reuse or copy), THP and the huge zero page across fork under both seed-002
//! policies, `MADV_DONTFORK`/`MADV_WIPEONFORK`, locked and hugetlb VMAs, and exit of either
//! side. Every test validates the family and ends with a leak check.

mod common;

use std::sync::Arc;

use common::*;
use usermm::config::{HugeZeroWriteFault, ThpMode};
use usermm::mm::mmap::*;
use usermm::mm::RssItem;
use usermm::page_alloc::meta::PG_MLOCKED;
use usermm::stats::VmItem;
use usermm::{Machine, Mm, Task, PAGE_SIZE};

const P: u64 = PAGE_SIZE;
const H: u64 = 2 << 20;

fn fork(mm: &Arc<Mm>) -> Arc<Mm> {
    mm.fork(C0).expect("fork")
}

/// Exit both sides (child first or parent first) and check nothing leaked.
#[track_caller]
fn exit_both(m: &Arc<Machine>, first: Arc<Mm>, second: Arc<Mm>, free0: u64) {
    first.validate().expect("validate before exits");
    first.mmput(C0);
    drop(first);
    second.validate().expect("validate after the first exit");
    exit_and_check(m, second, free0);
}

#[test]
fn child_reads_inherited_data_and_writes_copy_on_write() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let a = anon(&mm, 16 * P);
    let t = task(&mm);
    for i in 0..16 {
        t.write_u64(a + i * P, 100 + i).unwrap();
    }
    let child = fork(&mm);
    let c = task(&child);
    assert_eq!(child.rss(RssItem::AnonPages), 16);
    child.validate().unwrap();
    for i in 0..16 {
        assert_eq!(c.read_u64(a + i * P).unwrap(), 100 + i);
    }
    let vm0 = m.vmstat_snapshot();
    // Child writes page 0: a copy. Parent writes page 1: a copy too (still shared).
    c.write_u64(a, 7).unwrap();
    t.write_u64(a + P, 8).unwrap();
    assert_eq!(t.read_u64(a).unwrap(), 100, "the parent keeps its data");
    assert_eq!(c.read_u64(a + P).unwrap(), 101, "the child keeps its data");
    assert_eq!(c.read_u64(a).unwrap(), 7);
    assert_eq!(t.read_u64(a + P).unwrap(), 8);
    // Page 0 is now exclusive to the parent again: its write reuses the page.
    let used = free_pages(&m);
    t.write_u64(a, 9).unwrap();
    assert_eq!(
        free_pages(&m),
        used,
        "an exclusive page is reused, not copied"
    );
    assert_eq!(c.read_u64(a).unwrap(), 7);
    let d = m.vmstat_snapshot().since(&vm0);
    assert_eq!(d.get(VmItem::Pgfault), 3);
    mm.validate().unwrap();
    exit_both(&m, child, mm, free0);
}

#[test]
fn parent_exit_first_leaves_the_child_its_pages() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let a = anon(&mm, 8 * P);
    let t = task(&mm);
    t.write(a, &[5u8; 8 * 4096]).unwrap();
    let child = fork(&mm);
    mm.mmput(C0);
    drop(mm);
    child.validate().unwrap();
    let c = task(&child);
    let mut buf = vec![0u8; 8 * 4096];
    c.read(a, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 5));
    // Every page is exclusive to the child now: writes reuse.
    let used = free_pages(&m);
    c.write(a, &[6u8; 8 * 4096]).unwrap();
    assert_eq!(free_pages(&m), used);
    exit_and_check(&m, child, free0);
}

#[test]
fn zero_page_and_shared_anon_across_fork() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let a = anon(&mm, 4 * P);
    let t = task(&mm);
    t.write_u64(a, 1).unwrap(); // anon_vma, so the tables are copied
    assert_eq!(t.read_u64(a + P).unwrap(), 0); // zero page
    let s = mm
        .mmap(
            C0,
            0,
            2 * P,
            PROT_READ | PROT_WRITE,
            MAP_SHARED | MAP_ANONYMOUS,
            MapFile::None,
        )
        .unwrap();
    t.write_u64(s, 42).unwrap();
    let child = fork(&mm);
    let c = task(&child);
    assert_eq!(c.read_u64(a + P).unwrap(), 0);
    c.write_u64(a + P, 3).unwrap();
    assert_eq!(t.read_u64(a + P).unwrap(), 0);
    // Shared memory stays shared: a write on either side is seen by the other.
    assert_eq!(c.read_u64(s).unwrap(), 42);
    c.write_u64(s + 8, 43).unwrap();
    assert_eq!(t.read_u64(s + 8).unwrap(), 43);
    exit_both(&m, mm, child, free0);
}

#[test]
fn dontfork_wipeonfork_and_mlock_are_not_inherited() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let a = anon(&mm, 12 * P);
    t.write(a, &[1u8; 12 * 4096]).unwrap();
    mm.madvise(C0, a, 4 * P, MADV_DONTFORK).unwrap();
    mm.madvise(C0, a + 4 * P, 4 * P, MADV_WIPEONFORK).unwrap();
    mm.mlock(C0, a + 8 * P, 4 * P).unwrap();
    let child = fork(&mm);
    let c = task(&child);
    assert!(c.read_u64(a).is_err(), "VM_DONTCOPY: not in the child");
    assert_eq!(c.read_u64(a + 4 * P).unwrap(), 0, "VM_WIPEONFORK: zeroes");
    assert_eq!(t.read_u64(a + 4 * P).unwrap(), 0x0101010101010101);
    assert_eq!(c.read_u64(a + 8 * P).unwrap(), 0x0101010101010101);
    let maps = child.maps();
    assert!(!maps.is_empty());
    assert_eq!(
        child.smaps_rollup().locked_kb,
        0,
        "VM_LOCKED is not inherited"
    );
    assert_eq!(mm.smaps_rollup().locked_kb, 16);
    // The locked pages stay mlocked while the parent maps them, even after the child's copy
    // goes away.
    child.munmap(C0, a + 8 * P, 4 * P).unwrap();
    let pfn_locked = m.vmstat_snapshot().get(VmItem::NrMlock);
    assert_eq!(pfn_locked, 4);
    let _ = PG_MLOCKED;
    exit_both(&m, child, mm, free0);
}

#[test]
fn dofork_keeponfork_undo() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let a = anon(&mm, 4 * P);
    t.write_u64(a, 9).unwrap();
    mm.madvise(C0, a, 4 * P, MADV_DONTFORK).unwrap();
    mm.madvise(C0, a, 4 * P, MADV_DOFORK).unwrap();
    mm.madvise(C0, a, 4 * P, MADV_WIPEONFORK).unwrap();
    mm.madvise(C0, a, 4 * P, MADV_KEEPONFORK).unwrap();
    let child = fork(&mm);
    assert_eq!(task(&child).read_u64(a).unwrap(), 9);
    exit_both(&m, mm, child, free0);
}

fn thp_fork_case(per_mm_ref: bool, write_fault: HugeZeroWriteFault) {
    let m = machine_with(|c| {
        c.thp = ThpMode::Always;
        c.huge_zero.per_mm_ref = per_mm_ref;
        c.huge_zero.write_fault = write_fault;
    });
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let a = anon(&mm, 4 * H);
    assert_eq!(a % H, 0);
    t.write_u64(a, 11).unwrap(); // a THP
    assert_eq!(t.read_u64(a + H).unwrap(), 0); // the huge zero page
    assert_eq!(mm.smaps_rollup().anon_huge_pages_kb, 2048);
    let hz_before = m.huge_zero().refcount();
    let child = fork(&mm);
    let c = task(&child);
    let hz_after = m.huge_zero().refcount();
    assert_eq!(
        hz_after - hz_before,
        1,
        "the child took one reference (one PMD, or its mm's first)"
    );
    assert_eq!(child.smaps_rollup().anon_huge_pages_kb, 2048);
    child.validate().unwrap();
    assert_eq!(c.read_u64(a).unwrap(), 11);
    // A write to the shared THP in the child: the PMD splits, one 4 KiB page is copied.
    c.write_u64(a + 8 * P, 12).unwrap();
    assert_eq!(child.smaps_rollup().anon_huge_pages_kb, 0);
    assert_eq!(mm.smaps_rollup().anon_huge_pages_kb, 2048);
    assert_eq!(t.read_u64(a + 8 * P).unwrap(), 0);
    assert_eq!(c.read_u64(a).unwrap(), 11);
    mm.validate().unwrap();
    // The parent's write: the folio is PTE-mapped in the child, so the parent splits too.
    t.write_u64(a + 16 * P, 13).unwrap();
    assert_eq!(c.read_u64(a + 16 * P).unwrap(), 0);
    mm.validate().unwrap();
    // Huge zero page in the child: a write replaces it per the policy; the parent keeps it.
    c.write_u64(a + H, 14).unwrap();
    assert_eq!(t.read_u64(a + H).unwrap(), 0);
    assert_eq!(c.read_u64(a + H).unwrap(), 14);
    // Partial munmap of the parent's huge zero PMD and of a PTE-mapped shared folio.
    mm.munmap(C0, a + H + 4 * P, 4 * P).unwrap();
    child.munmap(C0, a + 20 * P, P).unwrap();
    mm.validate().unwrap();
    exit_both(&m, child, mm, free0);
}

#[test]
fn thp_cow_and_huge_zero_across_fork_vanilla_alloc() {
    thp_fork_case(false, HugeZeroWriteFault::AllocThp);
}

#[test]
fn thp_cow_and_huge_zero_across_fork_per_mm_alloc() {
    thp_fork_case(true, HugeZeroWriteFault::AllocThp);
}

#[test]
fn thp_cow_and_huge_zero_across_fork_vanilla_split() {
    thp_fork_case(false, HugeZeroWriteFault::Split);
}

#[test]
fn thp_cow_and_huge_zero_across_fork_per_mm_split() {
    thp_fork_case(true, HugeZeroWriteFault::Split);
}

#[test]
fn exclusive_thp_after_the_other_side_exits_is_reused() {
    let m = thp_always();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let a = anon(&mm, 2 * H);
    t.write_u64(a, 1).unwrap();
    let child = fork(&mm);
    child.mmput(C0);
    drop(child);
    let used = free_pages(&m);
    t.write_u64(a + P, 2).unwrap();
    assert_eq!(free_pages(&m), used, "the THP is reused");
    assert_eq!(mm.smaps_rollup().anon_huge_pages_kb, 2048);
    exit_and_check(&m, mm, free0);
}

#[test]
fn mprotect_never_makes_a_shared_page_writable() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let a = anon(&mm, 2 * P);
    t.write_u64(a, 1).unwrap();
    let child = fork(&mm);
    let c = task(&child);
    child.mprotect(C0, a, 2 * P, PROT_READ).unwrap();
    child
        .mprotect(C0, a, 2 * P, PROT_READ | PROT_WRITE)
        .unwrap();
    c.write_u64(a, 2).unwrap();
    assert_eq!(
        t.read_u64(a).unwrap(),
        1,
        "the child's write went to a copy"
    );
    exit_both(&m, mm, child, free0);
}

#[test]
fn hugetlb_private_cow_and_shared_across_fork() {
    let m = machine_with(|c| c.nr_hugepages = 6);
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let rw = PROT_READ | PROT_WRITE;
    let p = mm
        .mmap(
            C0,
            0,
            H,
            rw,
            MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB,
            MapFile::None,
        )
        .unwrap();
    let s = mm
        .mmap(
            C0,
            0,
            H,
            rw,
            MAP_SHARED | MAP_ANONYMOUS | MAP_HUGETLB,
            MapFile::None,
        )
        .unwrap();
    t.write_u64(p, 1).unwrap();
    t.write_u64(s, 2).unwrap();
    let child = fork(&mm);
    let c = task(&child);
    c.write_u64(p, 3).unwrap();
    c.write_u64(s, 4).unwrap();
    assert_eq!(t.read_u64(p).unwrap(), 1, "private: copied");
    assert_eq!(t.read_u64(s).unwrap(), 4, "shared: shared");
    mm.validate().unwrap();
    exit_both(&m, child, mm, free0);
}

#[test]
fn forked_vmas_do_not_merge_with_new_neighbours() {
    // vma_had_uncowed_parents: the child's faulted VMA does not absorb an adjacent new one;
    // the parent's does.
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let rw = PROT_READ | PROT_WRITE;
    let fixed = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;
    let a = 0x3000_0000_0000u64;
    mm.mmap(C0, a, 4 * P, rw, fixed, MapFile::None).unwrap();
    t.write_u64(a, 1).unwrap();
    let child = fork(&mm);
    child
        .mmap(C0, a + 4 * P, 4 * P, rw, fixed, MapFile::None)
        .unwrap();
    mm.mmap(C0, a + 4 * P, 4 * P, rw, fixed, MapFile::None)
        .unwrap();
    assert_eq!(child.maps().lines().count(), 2, "{}", child.maps());
    assert_eq!(mm.maps().lines().count(), 1, "{}", mm.maps());
    exit_both(&m, mm, child, free0);
}

#[test]
fn grandchildren_share_with_everyone_until_they_write() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let a = anon(&mm, 4 * P);
    task(&mm).write_u64(a, 1).unwrap();
    let c1 = fork(&mm);
    let c2 = fork(&c1);
    let t2 = Task::new(Arc::clone(&c2), C0);
    t2.write_u64(a, 2).unwrap();
    assert_eq!(task(&mm).read_u64(a).unwrap(), 1);
    assert_eq!(task(&c1).read_u64(a).unwrap(), 1);
    mm.validate().unwrap();
    c1.mmput(C0);
    drop(c1);
    exit_both(&m, c2, mm, free0);
}

/// Regression: `validate` walked a family member that had exited but was still referenced —
/// its PGD freed and reused, here as a data page full of entry-like words.
#[test]
fn validate_skips_an_exited_member_still_referenced() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let a = anon(&mm, 64 * P);
    task(&mm).write_u64(a, 1).unwrap();
    let child = fork(&mm);
    child.mmput(C0);
    // The child's freed tables are the next frames C0 allocates: fill them with words that
    // look like present entries naming frames far beyond the machine.
    let junk: Vec<u8> = (0..P / 8)
        .flat_map(|_| 0x0000_7fff_dead_b067u64.to_ne_bytes())
        .collect();
    for p in 1..64 {
        task(&mm).write(a + p * P, &junk).unwrap();
    }
    mm.validate().expect("validate with an exited child alive");
    child
        .validate()
        .expect("validate of the exited child itself");
    drop(child);
    exit_and_check(&m, mm, free0);
}

/// Regression: `validate` took the family's list before locking it, so a fork that copied
/// entries into a child created after the list was taken left mapcounts it could not account
/// for ("mapcount 2, mapped by 1 PTEs"); and it left out the PGD of a child whose exit was
/// waiting for its lock ("3 tables reachable, mm counts 4").
#[test]
fn validate_while_forking() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let a = anon(&mm, 64 * P);
    for p in 0..64 {
        task(&mm).write_u64(a + p * P, p + 1).unwrap();
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // Three children alive at a time, so that one forked behind validate's back is
            // still there when it walks.
            let mut alive = std::collections::VecDeque::new();
            for _ in 0..1000 {
                alive.push_back(mm.fork(usermm::CpuId(1)).expect("fork"));
                if alive.len() > 3 {
                    alive.pop_front().unwrap().mmput(usermm::CpuId(1));
                }
            }
            for c in alive {
                c.mmput(usermm::CpuId(1));
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let mut n = 0;
        while !done.load(std::sync::atomic::Ordering::Relaxed) || n == 0 {
            mm.validate().expect("validate while forking");
            n += 1;
        }
    });
    exit_and_check(&m, mm, free0);
}

/// Regression: `MADV_REMOVE` on one side of a fork punched the shared object's hole but left
/// the other side mapping the dropped page, so that side went on reading the old data and its
/// writes never reached the object. Linux zaps every mapping of the hole
/// (`unmap_mapping_range`): both sides see zero, then each other's writes again.
#[test]
fn madvise_remove_punches_the_hole_for_both_sides() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let rw = PROT_READ | PROT_WRITE;
    let s = mm
        .mmap(C0, 0, 2 * P, rw, MAP_SHARED | MAP_ANONYMOUS, MapFile::None)
        .unwrap();
    let t = task(&mm);
    t.write_u64(s, 42).unwrap();
    let child = fork(&mm);
    let c = task(&child);
    assert_eq!(
        c.read_u64(s).unwrap(),
        42,
        "the child maps the object's page"
    );
    mm.madvise(C0, s, P, MADV_REMOVE).unwrap();
    assert_eq!(t.read_u64(s).unwrap(), 0);
    assert_eq!(
        c.read_u64(s).unwrap(),
        0,
        "the child still maps the punched page"
    );
    c.write_u64(s, 7).unwrap();
    assert_eq!(
        t.read_u64(s).unwrap(),
        7,
        "the child's write missed the object"
    );
    // The same from the child's side.
    child.madvise(C0, s, P, MADV_REMOVE).unwrap();
    assert_eq!(t.read_u64(s).unwrap(), 0);
    exit_both(&m, child, mm, free0);
}
