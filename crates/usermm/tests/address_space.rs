//! Scenario tests of the address space: faults, zero pages, THP, munmap, mprotect, madvise,
//! exit, and their accounting. Every test ends with validate_mm() and a leak check.

mod common;

use std::sync::Arc;

use common::*;
use usermm::mm::mmap::*;
use usermm::mm::RssItem;
use usermm::stats::VmItem;
use usermm::{Errno, Mm, SegvCode};

#[test]
fn read_faults_map_the_zero_page_without_rss() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let a = anon(&mm, 64 << 20);
    let t = task(&mm);
    let vm0 = m.vmstat_snapshot();
    let words = t.walk(a, 64 << 20, 4096, false, |_| 0).unwrap();
    assert_eq!(words, 16384);
    let d = m.vmstat_snapshot().since(&vm0);
    assert_eq!(d.get(VmItem::Pgfault), 16384);
    assert_eq!(mm.rss(RssItem::AnonPages), 0);
    assert_eq!(t.read_u64(a + 8).unwrap(), 0);
    exit_and_check(&m, mm, free0);
}

#[test]
fn write_faults_allocate_and_data_round_trips() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let a = anon(&mm, 1 << 20);
    let t = task(&mm);
    t.write(a + 100, b"hello usermm").unwrap();
    let mut buf = [0u8; 12];
    t.read(a + 100, &mut buf).unwrap();
    assert_eq!(&buf, b"hello usermm");
    // A read first maps the zero page; the write then copies on write.
    assert_eq!(t.read_u64(a + 8192).unwrap(), 0);
    t.write_u64(a + 8192, 7).unwrap();
    assert_eq!(t.read_u64(a + 8192).unwrap(), 7);
    assert_eq!(mm.rss(RssItem::AnonPages), 2);
    // A write that crosses a page boundary.
    t.write(a + 4090, &[9u8; 12]).unwrap();
    assert_eq!(mm.rss(RssItem::AnonPages), 3);
    exit_and_check(&m, mm, free0);
}

#[test]
fn bad_accesses_are_segv_with_the_right_code() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let a = mm
        .mmap(
            C0,
            0,
            8192,
            PROT_READ,
            MAP_PRIVATE | MAP_ANONYMOUS,
            MapFile::None,
        )
        .unwrap();
    let e = t.write_u64(a, 1).unwrap_err();
    assert_eq!(e.code, SegvCode::AccErr);
    assert_eq!(t.read_u64(a).unwrap(), 0);
    let e = t.read_u64(a + (1 << 30)).unwrap_err();
    assert_eq!(e.code, SegvCode::MapErr);
    mm.mprotect(C0, a, 4096, PROT_NONE).unwrap();
    assert_eq!(t.read_u64(a).unwrap_err().code, SegvCode::AccErr);
    assert_eq!(t.read_u64(a + 4096).unwrap(), 0);
    exit_and_check(&m, mm, free0);
}

#[test]
fn thp_write_fault_maps_a_pmd_and_partial_munmap_splits_it() {
    let m = thp_always();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let a = anon(&mm, 4 << 20);
    assert_eq!(
        a % (2 << 20),
        0,
        "2 MiB-multiple anonymous lengths are 2 MiB aligned"
    );
    let t = task(&mm);
    let vm0 = m.vmstat_snapshot();
    t.write_u64(a, 1).unwrap();
    t.write_u64(a + 4096 * 3, 3).unwrap();
    let d = m.vmstat_snapshot().since(&vm0);
    assert_eq!(d.get(VmItem::ThpFaultAlloc), 1);
    assert_eq!(d.get(VmItem::Pgfault), 1, "one fault maps the whole 2 MiB");
    assert_eq!(mm.rss(RssItem::AnonPages), 512);
    assert_eq!(mm.smaps_rollup().anon_huge_pages_kb, 2048);
    mm.validate().unwrap();
    // Unmap one 4 KiB page in the middle: the PMD is split, 511 pages stay.
    mm.munmap(C0, a + 4096 * 5, 4096).unwrap();
    let d = m.vmstat_snapshot().since(&vm0);
    assert_eq!(d.get(VmItem::ThpSplitPmd), 1);
    assert_eq!(mm.rss(RssItem::AnonPages), 511);
    assert_eq!(t.read_u64(a + 4096 * 3).unwrap(), 3);
    assert_eq!(t.read_u64(a + 4096 * 5).unwrap_err().code, SegvCode::MapErr);
    assert_eq!(mm.map_count(), 2);
    mm.validate().unwrap();
    exit_and_check(&m, mm, free0);
}

#[test]
fn munmap_frees_tables_between_floor_and_ceiling() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let base = 0x4000_0000u64;
    let fixed = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;
    // Three VMAs: [a][b][c] in one 1 GiB span, each touched.
    let rw = PROT_READ | PROT_WRITE;
    mm.mmap(C0, base, 2 << 20, rw, fixed, MapFile::None)
        .unwrap();
    mm.mmap(
        C0,
        base + (8 << 20),
        4 << 20,
        PROT_READ,
        fixed,
        MapFile::None,
    )
    .unwrap();
    mm.mmap(C0, base + (16 << 20), 2 << 20, rw, fixed, MapFile::None)
        .unwrap();
    for off in [0u64, 8 << 20, (10 << 20) + 4096, 16 << 20] {
        t.read_u64(base + off).unwrap();
    }
    t.write_u64(base, 1).unwrap();
    let tables = mm.nr_page_tables();
    mm.munmap(C0, base + (8 << 20), 4 << 20).unwrap();
    // The middle VMA's two PTE tables go; the PMD table stays (shared with a and c).
    assert_eq!(mm.nr_page_tables(), tables - 2);
    mm.validate().unwrap();
    mm.munmap(C0, base, 32 << 20).unwrap();
    // Nothing left: the PUD and PMD tables go too, only the PGD stays.
    assert_eq!(mm.nr_page_tables(), 1);
    assert_eq!(mm.rss(RssItem::AnonPages), 0);
    exit_and_check(&m, mm, free0);
}

#[test]
fn munmap_and_mmap_errnos() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let rw = PROT_READ | PROT_WRITE;
    let pa = MAP_PRIVATE | MAP_ANONYMOUS;
    assert_eq!(mm.munmap(C0, 0x1001, 4096), Err(Errno::EINVAL));
    assert_eq!(mm.munmap(C0, 0x10000, 0), Err(Errno::EINVAL));
    assert_eq!(mm.munmap(C0, 0x10000, 4096), Ok(()));
    assert_eq!(mm.munmap(C0, 0, 4096), Ok(()));
    assert_eq!(mm.munmap(C0, u64::MAX - 4095, 4096), Err(Errno::EINVAL));
    assert_eq!(mm.mmap(C0, 0, 0, rw, pa, MapFile::None), Err(Errno::EINVAL));
    assert_eq!(
        mm.mmap(C0, 0x1001, 4096, rw, pa | MAP_FIXED, MapFile::None),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        mm.mmap(C0, 0, 4096, rw, MAP_ANONYMOUS, MapFile::None),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        mm.mmap(
            C0,
            0,
            4096,
            rw,
            MAP_ANONYMOUS | MAP_SHARED_VALIDATE,
            MapFile::None
        ),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        mm.mmap(C0, 0, 1 << 62, rw, pa, MapFile::None),
        Err(Errno::ENOMEM)
    );
    assert_eq!(
        mm.mmap(C0, 0, u64::MAX - 100, rw, pa, MapFile::None),
        Err(Errno::ENOMEM)
    );
    assert_eq!(
        mm.mmap(C0, 0, 4096, rw, MAP_PRIVATE, MapFile::None),
        Err(Errno::EBADF)
    );
    assert!(
        mm.mmap(C0, 0, 4096, 0x80 | PROT_READ, pa, MapFile::None)
            .is_ok(),
        "unknown prot bits are accepted"
    );
    let a = mm
        .mmap(C0, 0x5000_0000, 3 * 4096, rw, pa | MAP_FIXED, MapFile::None)
        .unwrap();
    assert_eq!(
        mm.mmap(
            C0,
            a + 4096,
            4096,
            rw,
            pa | MAP_FIXED_NOREPLACE,
            MapFile::None
        ),
        Err(Errno::EEXIST)
    );
    // MAP_FIXED over the middle splits the old VMA in three.
    mm.mmap(C0, a + 4096, 4096, PROT_READ, pa | MAP_FIXED, MapFile::None)
        .unwrap();
    assert_eq!(mm.map_count(), 4);
    exit_and_check(&m, mm, free0);
}

#[test]
fn mprotect_over_a_hole_changes_the_head_and_fails() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let rw = PROT_READ | PROT_WRITE;
    let fixed = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;
    let base = 0x6000_0000u64;
    mm.mmap(C0, base, 4096, rw, fixed, MapFile::None).unwrap();
    mm.mmap(C0, base + 8192, 4096, PROT_READ, fixed, MapFile::None)
        .unwrap();
    assert_eq!(
        mm.mprotect(C0, base, 3 * 4096, PROT_NONE),
        Err(Errno::ENOMEM)
    );
    let maps = mm.maps();
    assert!(maps.lines().next().unwrap().contains(" ---p "), "{maps}");
    assert!(maps.lines().nth(1).unwrap().contains(" r--p "), "{maps}");
    // First page unmapped: nothing changes.
    assert_eq!(
        mm.mprotect(C0, base - 4096, 2 * 4096, rw),
        Err(Errno::ENOMEM)
    );
    assert!(mm.maps().lines().next().unwrap().contains(" ---p "));
    assert_eq!(mm.mprotect(C0, base + 1, 4096, rw), Err(Errno::EINVAL));
    assert_eq!(mm.mprotect(C0, base, 4096, 0x80), Err(Errno::EINVAL));
    assert_eq!(mm.mprotect(C0, base, 0, rw), Ok(()));
    // Splitting and restoring merges back.
    let a = anon(&mm, 16 * 4096);
    let n = mm.map_count();
    mm.mprotect(C0, a + 4 * 4096, 4096, PROT_READ).unwrap();
    assert_eq!(mm.map_count(), n + 2);
    mm.mprotect(C0, a + 4 * 4096, 4096, rw).unwrap();
    assert_eq!(mm.map_count(), n);
    exit_and_check(&m, mm, free0);
}

#[test]
fn madvise_dontneed_zaps_both_sides_of_a_hole() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let rw = PROT_READ | PROT_WRITE;
    let fixed = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;
    let base = 0x7000_0000u64;
    mm.mmap(C0, base, 4096, rw, fixed, MapFile::None).unwrap();
    mm.mmap(C0, base + 8192, 4096, rw, fixed, MapFile::None)
        .unwrap();
    t.write_u64(base, 5).unwrap();
    t.write_u64(base + 8192, 6).unwrap();
    assert_eq!(
        mm.madvise(C0, base, 3 * 4096, MADV_DONTNEED),
        Err(Errno::ENOMEM)
    );
    assert_eq!(t.read_u64(base).unwrap(), 0);
    assert_eq!(t.read_u64(base + 8192).unwrap(), 0);
    assert_eq!(mm.rss(RssItem::AnonPages), 0);
    assert_eq!(mm.madvise(C0, base, 4096, 999), Err(Errno::EINVAL));
    assert_eq!(
        mm.madvise(C0, base + 1, 4096, MADV_NORMAL),
        Err(Errno::EINVAL)
    );
    assert_eq!(mm.madvise(C0, base, 0, MADV_DONTNEED), Ok(()));
    assert_eq!(
        mm.madvise(C0, 0x1_0000_0000, 4096, MADV_NORMAL),
        Err(Errno::ENOMEM)
    );
    mm.mlock(C0, base, 4096).unwrap();
    assert_eq!(
        mm.madvise(C0, base, 4096, MADV_DONTNEED),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        m.vmstat().get(VmItem::NrMlock),
        1,
        "mlock populated the page"
    );
    mm.munlock(C0, base, 4096).unwrap();
    assert_eq!(m.vmstat().get(VmItem::NrMlock), 0);
    exit_and_check(&m, mm, free0);
}

#[test]
fn shared_anonymous_memory_survives_dontneed() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let a = mm
        .mmap(
            C0,
            0,
            4 * 4096,
            PROT_READ | PROT_WRITE,
            MAP_SHARED | MAP_ANONYMOUS,
            MapFile::None,
        )
        .unwrap();
    t.write_u64(a + 4096, 42).unwrap();
    assert_eq!(mm.rss(RssItem::ShmemPages), 1);
    mm.madvise(C0, a, 4 * 4096, MADV_DONTNEED).unwrap();
    assert_eq!(mm.rss(RssItem::ShmemPages), 0);
    assert_eq!(
        t.read_u64(a + 4096).unwrap(),
        42,
        "shmem data outlives DONTNEED"
    );
    assert!(mm.maps().contains("/dev/zero (deleted)"), "{}", mm.maps());
    exit_and_check(&m, mm, free0);
}

#[test]
fn map_count_limit_gives_enomem_without_change() {
    let m = machine_with(|c| c.max_map_count = 3);
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let a = anon(&mm, 16 * 4096);
    mm.mprotect(C0, a + 4096, 4096, PROT_READ).unwrap();
    assert_eq!(mm.map_count(), 3);
    let before = mm.maps();
    assert_eq!(mm.munmap(C0, a + 8 * 4096, 4096), Err(Errno::ENOMEM));
    assert_eq!(mm.maps(), before);
    exit_and_check(&m, mm, free0);
}

#[test]
fn populate_and_exit_return_every_frame() {
    let m = small();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let a = mm
        .mmap(
            C0,
            0,
            8 << 20,
            PROT_READ | PROT_WRITE,
            MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
            MapFile::None,
        )
        .unwrap();
    assert_eq!(mm.rss(RssItem::AnonPages), 2048);
    assert_eq!(m.vmstat().get(VmItem::NrAnonPages), 2048);
    let _ = a;
    let dz = mm
        .mmap(C0, 0, 1 << 20, PROT_READ, MAP_PRIVATE, MapFile::DevZero)
        .unwrap();
    task(&mm).walk(dz, 1 << 20, 4096, false, |_| 0).unwrap();
    assert!(mm.maps().contains("/dev/zero"));
    exit_and_check(&m, mm, free0);
    assert_eq!(m.vmstat().get(VmItem::NrAnonPages), 0);
}

#[test]
fn racing_faulters_against_munmap_and_mprotect_keep_invariants() {
    let m = machine_with(|c| {
        c.cpus = 4;
        c.thp = usermm::config::ThpMode::Always;
    });
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let region = 64u64 << 20;
    let base = anon(&mm, region);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut hs = vec![];
    for i in 1..4u16 {
        let t = usermm::Task::new(Arc::clone(&mm), usermm::CpuId(i));
        let stop = Arc::clone(&stop);
        let started = Arc::clone(&started);
        hs.push(std::thread::spawn(move || {
            let mut x = i as u64 * 7919;
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                let off = ((x >> 20) % region) & !7;
                if x & 1 == 0 {
                    let _ = t.write_u64(base + off, off);
                } else if let Ok(v) = t.read_u64(base + off) {
                    // Every store to `base + off` stores `off`; a remap gives zeros. Anything
                    // else is a stale or foreign frame.
                    assert!(v == 0 || v == off, "read {v:#x} at offset {off:#x}");
                    n += 1;
                }
                started.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            n
        }));
    }
    while started.load(std::sync::atomic::Ordering::Relaxed) < 300 {
        std::thread::yield_now();
    }
    let mut y = 12345u64;
    for i in 0..400 {
        if i % 20 == 0 {
            std::thread::yield_now();
        }
        y = y.wrapping_mul(6364136223846793005).wrapping_add(1);
        let off = ((y >> 16) % (region / 4096)) * 4096;
        let len = ((y >> 40) % 64 + 1) * 4096;
        match y % 3 {
            0 => {
                let _ = mm.munmap(C0, base + off, len);
            }
            1 => {
                let _ = mm.mprotect(C0, base + off, len, PROT_READ);
            }
            _ => {
                let _ = mm.mmap(
                    C0,
                    base + off,
                    len,
                    PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                    MapFile::None,
                );
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let checked_reads: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(checked_reads > 0, "no read succeeded to check its data");
    mm.validate().unwrap();
    exit_and_check(&m, mm, free0);
}

/// The window `dontneed_racing_a_thp_split_zaps_everything` hits by chance, held open: a split
/// (MADV_COLD on one subpage) is stopped inside its `pmdp_invalidate` TLB flush, PMD lock held,
/// by a task on another CPU that is in the middle of an access (its TLB gate held); a
/// DONTNEED over the THP then reads the PMD without the lock. The invalidated PMD must still
/// look huge, so the zap waits for the PMD lock and then zaps the split's PTE table; a none
/// PMD let it skip the 2 MiB and leave the split's pages mapped.
#[test]
fn dontneed_during_a_split_tlb_flush_waits_for_the_pmd_lock() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::time::{Duration, Instant};
    let m = thp_always();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let huge = 2u64 << 20;
    let base = anon(&mm, 3 * huge);
    let base = (base + huge - 1) & !(huge - 1);
    // A THP to split, and one for the stalling CPU's access, away from the first.
    let t1 = usermm::Task::new(Arc::clone(&mm), usermm::CpuId(1));
    t1.write_u64(base, 7).unwrap();
    let t3 = usermm::Task::new(Arc::clone(&mm), usermm::CpuId(3));
    t3.write_u64(base + huge, 1).unwrap();
    assert_eq!(mm.rss_total(), 1024, "two THPs");
    let (entered, release) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    // CPU 3 stops in the middle of an access: every TLB flush of the mm waits for it.
    let staller = {
        let (entered, release) = (Arc::clone(&entered), Arc::clone(&release));
        std::thread::spawn(move || {
            t3.walk(base + huge, 8, 8, true, |_| {
                entered.store(true, SeqCst);
                while !release.load(SeqCst) {
                    std::hint::spin_loop();
                }
                2
            })
            .unwrap();
        })
    };
    // Spin until `cond`; a protocol step that never comes fails the test instead of hanging it.
    let wait_until = |what: &str, cond: &dyn Fn() -> bool| {
        let t0 = Instant::now();
        while !cond() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{what} never happened"
            );
            std::hint::spin_loop();
        }
    };
    wait_until("CPU 3's access", &|| entered.load(SeqCst));
    let flushes = mm.tlb_flushes();
    let splitter = {
        let mm = Arc::clone(&mm);
        std::thread::spawn(move || {
            mm.madvise(usermm::CpuId(2), base + 4096, 4096, MADV_COLD)
                .unwrap();
        })
    };
    // The split's first flush is its pmdp_invalidate: from here it waits for CPU 3.
    wait_until("the split's flush", &|| mm.tlb_flushes() != flushes);
    let zapper = {
        let mm = Arc::clone(&mm);
        std::thread::spawn(move || {
            mm.madvise(usermm::CpuId(1), base, huge, MADV_DONTNEED)
                .unwrap();
        })
    };
    // Give the zap time to read the PMD: it then waits, for the PMD lock (a huge PMD) or for
    // CPU 3 in its own flush (a none PMD skipped). Only the ordering depends on this wait:
    // if the zap has not got there yet it runs after the split, and passes either way.
    let t0 = Instant::now();
    while mm.tlb_flushes() == flushes + 1 && t0.elapsed() < Duration::from_millis(200) {
        std::thread::yield_now();
    }
    release.store(true, SeqCst);
    staller.join().unwrap();
    splitter.join().unwrap();
    zapper.join().unwrap();
    assert_eq!(
        mm.rss_total(),
        512,
        "only the other THP stays mapped after DONTNEED"
    );
    assert_eq!(t1.read_u64(base).unwrap(), 0);
    exit_and_check(&m, mm, free0);
}

/// A DONTNEED racing a THP split (MADV_COLD on one subpage, under the same read lock) must
/// still zap everything: when the split wins the PMD lock, `zap_huge_pmd` finds a PTE table and
/// the zap falls through to it (it used to skip the table and leave 512 pages mapped); and the
/// split's `pmdp_invalidate` leaves the PMD huge, not none, for the instant of its TLB flush
/// (a none PMD, read without the lock, made the zap skip the 2 MiB altogether).
#[test]
fn dontneed_racing_a_thp_split_zaps_everything() {
    let m = thp_always();
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let len = 4u64 << 20;
    let base = mm
        .mmap(
            C0,
            0,
            len + (2 << 20),
            PROT_READ | PROT_WRITE,
            MAP_PRIVATE | MAP_ANONYMOUS,
            MapFile::None,
        )
        .unwrap();
    let base = (base + (2 << 20) - 1) & !((2 << 20) - 1);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let splitter = {
        let (mm, stop) = (Arc::clone(&mm), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let off = (n % 2) * (2 << 20) + 4096;
                mm.madvise(usermm::CpuId(2), base + off, 4096, MADV_COLD)
                    .unwrap();
                n += 1;
            }
        })
    };
    let t = usermm::Task::new(Arc::clone(&mm), usermm::CpuId(1));
    for round in 0..300 {
        for h in 0..2 {
            t.write_u64(base + h * (2 << 20), round).unwrap();
        }
        mm.madvise(usermm::CpuId(1), base, len, MADV_DONTNEED)
            .unwrap();
        assert_eq!(
            mm.rss_total(),
            0,
            "round {round}: pages left after DONTNEED"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    splitter.join().unwrap();
    mm.validate().unwrap();
    exit_and_check(&m, mm, free0);
}
