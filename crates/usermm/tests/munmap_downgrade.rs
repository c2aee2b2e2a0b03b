//! Seed 003: munmap zaps under a downgraded mmap lock.
//!
//! - `policy`: which munmaps downgrade — the policy switch, special mappings (VM_LOCKED after a
//!   munlock, VM_HUGETLB, VM_PFNMAP keep the exclusive path), and the era options (the size
//!   threshold, the stack veto).
//! - `racing_faults`: the correctness property, under stress. While a munmap runs, threads hammer
//!   the range with reads, writes and direct faults. Every access must either see the page's own
//!   data (its PTE is not zapped yet: the access is ordered before the unmap, as on Linux where
//!   the MMU still translates it) or get `SEGV_MAPERR` — never the zero page, never a fresh page,
//!   never a stale page of an earlier mapping, and no fault may succeed once any thread has seen
//!   the range unmapped. Run under both policies, on the wall clock (host threads) and in virtual
//!   time (the same code as contexts of a run on `e5-2680-32c`, seed 003's machine).
//! - `negative_control`: the same checker pointed at the wrong order (zap under the read lock
//!   with the VMA still in the tree, *then* detach — MADV_DONTNEED followed by munmap) must find
//!   violations, so the checker is known to be able to fail.
//! - `bystanders`: faults in other VMAs of the same mm complete while a downgraded munmap zaps.

mod common;

use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicU8,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::*;
use usermm::config::{BackingMode, MachineConfig, ThpMode, TimeMode};
use usermm::mm::fault::handle_mm_fault;
use usermm::mm::mmap::*;
use usermm::page_alloc::Gfp;
use usermm::stats::VmItem;
use usermm::sync::thread as sthread;
use usermm::{CpuId, Machine, Mm, Order, SegvCode, Task};

const RW: u32 = PROT_READ | PROT_WRITE;
const ANON: u32 = MAP_PRIVATE | MAP_ANONYMOUS;

fn machine(downgrade: bool, f: impl FnOnce(&mut MachineConfig)) -> Arc<Machine> {
    machine_with(|c| {
        c.munmap.downgrade = downgrade;
        f(c);
    })
}

/// Map `len` bytes at a fixed address and write a word in every page (each a write fault).
fn populated(mm: &Arc<Mm>, addr: u64, len: u64, flags: u32) -> u64 {
    let a = mm
        .mmap(C0, addr, len, RW, ANON | flags, MapFile::None)
        .expect("mmap");
    let t = task(mm);
    for p in (a..a + len).step_by(4096) {
        t.write_u64(p, p | 1).expect("populate");
    }
    a
}

mod policy {
    use super::*;

    #[test]
    fn the_switch_decides_and_the_lock_records_the_exclusive_hold() {
        for down in [false, true] {
            let m = machine(down, |_| {});
            let free0 = free_pages(&m);
            let mm = Mm::new(&m, C0).unwrap();
            let a = populated(&mm, 0x10_0000_0000, 8 << 20, 0);
            mm.mmap_lock_info().reset_stats();
            let st = mm.munmap_stats(C0, a, 8 << 20).unwrap();
            let lock = mm.mmap_lock_info().stats();
            assert_eq!(st.downgraded, down);
            assert_eq!(st.pages_zapped, 2048);
            assert!(st.tlb_flushes >= 1);
            assert_eq!(lock.write.acquisitions, 1);
            assert_eq!(lock.exclusive_hold.count, 1);
            // The record is the lock's own figure, exactly; the histogram keeps 3 significant
            // digits of it.
            assert_eq!(
                mm.mmap_lock_info().last_exclusive_hold_ns(),
                st.exclusive_ns
            );
            let (h, e) = (lock.exclusive_hold.max_ns as f64, st.exclusive_ns as f64);
            assert!(
                (h - e).abs() <= e * 0.002 + 1.0,
                "histogram {h} vs munmap's {e}"
            );
            assert!(st.exclusive_ns + st.read_ns <= st.total_ns);
            if down {
                assert!(st.read_ns > 0);
                assert_eq!(
                    lock.read.acquisitions, 1,
                    "the downgrade counts as one read acquisition"
                );
            } else {
                assert_eq!(st.read_ns, 0);
            }
            assert_eq!(task(&mm).read_u64(a).unwrap_err().code, SegvCode::MapErr);
            exit_and_check(&m, mm, free0);
        }
    }

    #[test]
    fn nothing_to_unmap_is_no_downgrade() {
        let m = machine(true, |_| {});
        let mm = Mm::new(&m, C0).unwrap();
        let st = mm.munmap_stats(C0, 0x10_0000_0000, 1 << 20).unwrap();
        assert!(!st.downgraded);
        assert_eq!(st.pages_zapped, 0);
        assert!(!mm.mmap_lock_info().is_locked(), "the lock is dropped");
    }

    #[test]
    fn vm_locked_is_munlocked_first_and_keeps_the_exclusive_path() {
        let m = machine(true, |_| {});
        let free0 = free_pages(&m);
        let mm = Mm::new(&m, C0).unwrap();
        // MAP_LOCKED populates the whole mapping and mlocks it.
        let a = mm
            .mmap(
                C0,
                0x10_0000_0000,
                64 * 4096,
                RW,
                ANON | MAP_LOCKED,
                MapFile::None,
            )
            .unwrap();
        m.phys().lru_add_drain_all();
        assert_eq!(m.vmstat().get(VmItem::NrMlock), 64);
        assert_eq!(m.vmstat().get(VmItem::NrUnevictable), 64);
        let munlocked0 = m.vmstat().get(VmItem::UnevictablePgsMunlocked);
        let st = mm.munmap_stats(C0, a, 64 * 4096).unwrap();
        assert!(!st.downgraded, "VM_LOCKED keeps the write lock");
        assert_eq!(st.pages_zapped, 64);
        assert_eq!(m.vmstat().get(VmItem::NrMlock), 0);
        assert_eq!(m.vmstat().get(VmItem::NrUnevictable), 0);
        assert_eq!(
            m.vmstat().get(VmItem::UnevictablePgsMunlocked) - munlocked0,
            64,
            "munlocked before the zap"
        );
        exit_and_check(&m, mm, free0);
    }

    #[test]
    fn a_locked_part_decides_for_the_range_only() {
        let m = machine(true, |_| {});
        let free0 = free_pages(&m);
        let mm = Mm::new(&m, C0).unwrap();
        let a = populated(&mm, 0x10_0000_0000, 32 * 4096, MAP_FIXED_NOREPLACE);
        mm.mlock(C0, a, 8 * 4096).unwrap();
        assert_eq!(mm.map_count(), 2);
        // The unlocked tail alone: downgrade.
        let st = mm.munmap_stats(C0, a + 16 * 4096, 16 * 4096).unwrap();
        assert!(st.downgraded);
        // A range that covers the locked head: exclusive.
        let st = mm.munmap_stats(C0, a, 16 * 4096).unwrap();
        assert!(!st.downgraded);
        assert_eq!(st.pages_zapped, 16);
        assert_eq!(m.vmstat().get(VmItem::NrMlock), 0);
        exit_and_check(&m, mm, free0);
    }

    #[test]
    fn vm_hugetlb_keeps_the_exclusive_path() {
        let m = machine(true, |c| c.nr_hugepages = 4);
        let free0 = free_pages(&m);
        let mm = Mm::new(&m, C0).unwrap();
        let a = mm
            .mmap(C0, 0, 4 << 20, RW, ANON | MAP_HUGETLB, MapFile::None)
            .unwrap();
        let t = task(&mm);
        t.write_u64(a, 1).unwrap();
        t.write_u64(a + (2 << 20), 2).unwrap();
        assert_eq!(m.phys().hugetlb_free(), 2);
        let st = mm.munmap_stats(C0, a, 4 << 20).unwrap();
        assert!(!st.downgraded, "VM_HUGETLB keeps the write lock");
        assert_eq!(
            m.phys().hugetlb_free(),
            4,
            "both huge pages back in the pool"
        );
        assert_eq!(t.read_u64(a).unwrap_err().code, SegvCode::MapErr);
        exit_and_check(&m, mm, free0);
    }

    #[test]
    fn vm_pfnmap_keeps_the_exclusive_path() {
        let m = machine(true, |_| {});
        let free0 = free_pages(&m);
        let mm = Mm::new(&m, C0).unwrap();
        let pages = m.phys().alloc_owned(C0, Order(2), Gfp::ZERO).unwrap();
        let pfn = pages.pfn();
        // The mapping takes the driver's block over: nobody can free it while it is mapped.
        let a = mm.map_pfn_range(C0, pages, RW).unwrap();
        let t = task(&mm);
        t.write_u64(a + 4096, 0xfeed).unwrap();
        let st = mm.munmap_stats(C0, a, 2 * 4096).unwrap();
        assert!(!st.downgraded, "VM_PFNMAP keeps the write lock");
        assert_eq!(st.pages_zapped, 2);
        assert_eq!(t.read_u64(a + 4096).unwrap_err().code, SegvCode::MapErr);
        assert_eq!(
            m.phys().meta(pfn).ref_count(),
            1,
            "the driver's frames are not freed by munmap's zap"
        );
        assert_eq!(
            t.read_u64(a + 2 * 4096).unwrap(),
            0,
            "the rest still mapped"
        );
        mm.munmap(C0, a + 2 * 4096, 2 * 4096).unwrap();
        assert_eq!(
            m.phys().meta(pfn).ref_count(),
            0,
            "freed with the last VMA that maps them (the driver's vm_ops->close)"
        );
        m.phys().validate().unwrap();
        exit_and_check(&m, mm, free0);
    }

    #[test]
    fn size_threshold_keeps_small_unmaps_exclusive() {
        let m = machine(true, |c| c.munmap.downgrade_min_bytes = 1 << 20);
        let free0 = free_pages(&m);
        let mm = Mm::new(&m, C0).unwrap();
        let a = populated(&mm, 0x10_0000_0000, 4 << 20, MAP_FIXED_NOREPLACE);
        let st = mm.munmap_stats(C0, a, (1 << 20) - 4096).unwrap();
        assert!(!st.downgraded, "below the threshold");
        let st = mm.munmap_stats(C0, a + (1 << 20), 1 << 20).unwrap();
        assert!(st.downgraded, "at the threshold");
        // The threshold counts the bytes mapped in the range, not the length asked: of these
        // 2 MiB only the one page left at a + 1 MiB − 4 KiB is mapped.
        let st = mm.munmap_stats(C0, a, 2 << 20).unwrap();
        assert!(!st.downgraded, "{st:?}");
        let st = mm.munmap_stats(C0, a + (2 << 20), 2 << 20).unwrap();
        assert!(st.downgraded);
        exit_and_check(&m, mm, free0);
    }

    /// A `VM_GROWSDOWN` VMA after the range vetoes the downgrade (2020, CVE-2020-29369), whether
    /// it starts right at the end of the range or above a gap; one before the range does not.
    #[test]
    fn stack_veto_looks_at_the_next_vma() {
        for veto in [false, true] {
            for gap in [0u64, 64 << 20] {
                let m = machine(true, |c| c.munmap.stack_veto = veto);
                let free0 = free_pages(&m);
                let mm = Mm::new(&m, C0).unwrap();
                let base = 0x10_0000_0000;
                let a = populated(&mm, base, 1 << 20, MAP_FIXED_NOREPLACE);
                let stack = base + (1 << 20) + gap;
                mm.mmap(
                    C0,
                    stack,
                    1 << 20,
                    RW,
                    ANON | MAP_FIXED | MAP_GROWSDOWN,
                    MapFile::None,
                )
                .unwrap();
                let st = mm.munmap_stats(C0, a, 1 << 20).unwrap();
                assert_eq!(st.downgraded, !veto, "veto={veto} gap={gap:#x}");
                // A stack *below* the range cannot grow into it.
                let b = populated(&mm, stack + (256 << 20), 1 << 20, MAP_FIXED_NOREPLACE);
                let st = mm.munmap_stats(C0, b, 1 << 20).unwrap();
                assert!(st.downgraded, "veto={veto}: stack below");
                exit_and_check(&m, mm, free0);
            }
        }
    }

    /// `mmap(MAP_FIXED)` over a mapping unmaps it inside mmap's own write hold: never downgraded.
    #[test]
    fn map_fixed_over_a_mapping_stays_exclusive() {
        let m = machine(true, |_| {});
        let free0 = free_pages(&m);
        let mm = Mm::new(&m, C0).unwrap();
        let a = populated(&mm, 0x10_0000_0000, 4 << 20, MAP_FIXED_NOREPLACE);
        mm.mmap_lock_info().reset_stats();
        mm.mmap(C0, a, 4 << 20, RW, ANON | MAP_FIXED, MapFile::None)
            .unwrap();
        let lock = mm.mmap_lock_info().stats();
        assert_eq!(lock.write.acquisitions, 1);
        assert_eq!(lock.read.acquisitions, 0, "no downgrade inside mmap");
        assert_eq!(task(&mm).read_u64(a).unwrap(), 0, "fresh mapping");
        exit_and_check(&m, mm, free0);
    }
}

// ----- the racing-fault property --------------------------------------------------------------

/// The word each page holds: its own, per round, never zero.
fn pattern(round: u64, page: u64) -> u64 {
    0xa5a5_0000_0000_0000 | (round << 24) | page
}

/// Byte offset of the pattern word in a page (varies, so a page's other words stay zero).
fn pattern_off(page: u64) -> u64 {
    (page % 500) * 8
}

#[derive(Debug, Default)]
struct Counts {
    /// Accesses (reads, writes, direct faults) started after the unmap began.
    racing: AtomicU64,
    /// Of those, the ones that ended in SEGV_MAPERR.
    maperr: AtomicU64,
    /// Of those, the ones started before munmap returned (they raced the zap itself).
    maperr_during: AtomicU64,
    /// Of those, reads that saw the page's own pattern (PTE not zapped yet).
    pattern: AtomicU64,
    /// Accesses started after the unmap returned (all must fault).
    after: AtomicU64,
    /// Everything else. Must stay 0 (except in the negative control).
    violations: AtomicU64,
    /// Zero-page reads and other wrong values among the violations.
    zero_reads: AtomicU64,
}

/// Round state, shared by the driver and the racers.
struct Round {
    /// 0: populating, 1: unmap running, 2: unmap returned, 3: round over.
    state: AtomicU8,
    /// Some racer got SEGV_MAPERR in this round: the VMAs are detached.
    seen_unmapped: AtomicBool,
    /// The round the racers may start (0: none yet).
    round: AtomicU64,
    /// Racers done with rounds, summed over rounds.
    done: AtomicU64,
    quit: AtomicBool,
    /// A racer panicked: the driver stops waiting and fails.
    broken: AtomicBool,
}

/// Sets [`Round::broken`] if a racer unwinds, so that nobody waits for it forever.
struct PanicFlag<'a>(&'a AtomicBool);

impl Drop for PanicFlag<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, SeqCst);
        }
    }
}

/// Wait (politely) until `ready()`; panic if a racer died.
#[track_caller]
fn wait_until(r: &Round, ready: impl Fn() -> bool) {
    while !ready() {
        assert!(
            !r.broken.load(SeqCst),
            "a racer thread panicked (see its message above)"
        );
        sthread::sleep(Duration::from_micros(50));
    }
}

const POPULATING: u8 = 0;
const UNMAPPING: u8 = 1;
const UNMAPPED: u8 = 2;
const OVER: u8 = 3;

/// One racer: random pages of `[base, base + len)`, until the round is over.
fn racer(task: Task, base: u64, len: u64, seed: u64, r: &Round, c: &Counts) {
    let _flag = PanicFlag(&r.broken);
    let pages = len / 4096;
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut faulted = vec![false; pages as usize];
    let violation = |what: String| {
        if c.violations.fetch_add(1, Relaxed) < 5 {
            eprintln!("violation: {what}");
        }
    };
    let mut round = 0;
    loop {
        wait_until(r, || r.quit.load(Acquire) || r.round.load(Acquire) > round);
        if r.quit.load(Acquire) {
            return;
        }
        round = r.round.load(Acquire);
        faulted.iter_mut().for_each(|f| *f = false);
        loop {
            let state = r.state.load(SeqCst);
            if state == OVER {
                break;
            }
            let unmapped_seen = r.seen_unmapped.load(SeqCst);
            let p = next() % pages;
            let addr = base + p * 4096 + pattern_off(p);
            let racing = state >= UNMAPPING;
            if racing {
                c.racing.fetch_add(1, Relaxed);
            }
            if state == UNMAPPED {
                c.after.fetch_add(1, Relaxed);
            }
            let op = next() % 8;
            let res: Result<Option<u64>, usermm::Fault> = match op {
                // Reads: the pattern, or SEGV_MAPERR.
                0..=4 => task.read_u64(addr).map(Some),
                // A write beside the pattern, then a read-back of the pattern.
                5 => task
                    .write_u64(addr + 8, !0)
                    .and_then(|()| task.read_u64(addr).map(Some)),
                // The fault handler itself, read or write.
                _ => handle_mm_fault(task.mm(), task.cpu(), addr, op == 7).map(|()| None),
            };
            match res {
                Err(f) if f.code == SegvCode::MapErr => {
                    if racing {
                        c.maperr.fetch_add(1, Relaxed);
                    }
                    if state == UNMAPPING {
                        c.maperr_during.fetch_add(1, Relaxed);
                    }
                    faulted[p as usize] = true;
                    r.seen_unmapped.store(true, SeqCst);
                }
                Err(f) => violation(format!("round {round}: {f} (expected SEGV_MAPERR)")),
                Ok(v) => {
                    if state == UNMAPPED {
                        violation(format!(
                            "round {round}: access at {addr:#x} succeeded after munmap returned"
                        ));
                    } else if faulted[p as usize] {
                        violation(format!(
                            "round {round}: page {p} mapped again after SEGV_MAPERR"
                        ));
                    } else if unmapped_seen && v.is_none() {
                        violation(format!("round {round}: a fault at {addr:#x} succeeded after the detach was seen"));
                    }
                    match v {
                        Some(v) if v == pattern(round, p) && racing => {
                            c.pattern.fetch_add(1, Relaxed);
                        }
                        Some(v) if v == pattern(round, p) => {}
                        Some(v) => {
                            c.zero_reads.fetch_add(1, Relaxed);
                            violation(format!(
                                "round {round}: read {v:#x} at page {p}, expected {:#x} or SEGV_MAPERR",
                                pattern(round, p)
                            ))
                        }
                        None => {}
                    }
                }
            }
        }
        r.done.fetch_add(1, SeqCst);
    }
}

/// How the driver takes the range away.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Unmap {
    /// `munmap`: detach, (downgrade), zap.
    Munmap,
    /// The wrong order: zap with the VMA still in the tree (MADV_DONTNEED), let the racers run,
    /// then munmap.
    ZapBeforeDetach,
}

struct Outcome {
    rounds: u64,
    downgraded: u64,
    racing: u64,
    maperr: u64,
    maperr_during: u64,
    pattern: u64,
    after: u64,
    violations: u64,
    zero_reads: u64,
}

/// Rounds of populate → unmap while `racers` threads hammer the range, for about `budget` (on
/// the wall clock; a virtual run does `min_rounds`, the same ones every time).
fn race(
    downgrade: bool,
    thp: ThpMode,
    how: Unmap,
    racers: usize,
    len: u64,
    budget: Duration,
    time: TimeMode,
) -> Outcome {
    let m = machine(downgrade, |c| {
        c.mem = 512 << 20;
        c.cpus = racers as u16 + 1;
        c.backing = BackingMode::Full;
        c.thp = thp;
        c.time.mode = time;
        c.time.profile = "e5-2680-32c".into();
    });
    m.run(C0, || race_on(&m, how, racers, len, budget))
        .expect("the virtual clock stays below its end")
}

fn race_on(m: &Arc<Machine>, how: Unmap, racers: usize, len: u64, budget: Duration) -> Outcome {
    let m = Arc::clone(m);
    let wall = m.time_mode() == TimeMode::Wall;
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let base = 0x10_0000_0000u64;
    let r = Round {
        state: AtomicU8::new(POPULATING),
        seen_unmapped: AtomicBool::new(false),
        round: AtomicU64::new(0),
        done: AtomicU64::new(0),
        quit: AtomicBool::new(false),
        broken: AtomicBool::new(false),
    };
    let c = Counts::default();
    let mut rounds = 0u64;
    let mut downgraded = 0u64;
    let t0 = Instant::now();
    sthread::scope(|s| {
        for i in 0..racers {
            let cpu = CpuId(1 + i as u16);
            let t = Task::new(Arc::clone(&mm), cpu);
            let (r, c) = (&r, &c);
            s.spawn_on(cpu, move || {
                racer(
                    t,
                    base,
                    len,
                    usermm_testscale::seed_for("munmap_downgrade::racer")
                        ^ 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1),
                    r,
                    c,
                )
            });
        }
        let t = task(&mm);
        while rounds < 4 || (wall && t0.elapsed() < budget) {
            rounds += 1;
            let round = rounds;
            // The same address every round: a stale page of an earlier round would show.
            let a = mm
                .mmap(C0, base, len, RW, ANON | MAP_FIXED_NOREPLACE, MapFile::None)
                .unwrap();
            assert_eq!(a, base);
            for p in 0..len / 4096 {
                t.write_u64(base + p * 4096 + pattern_off(p), pattern(round, p))
                    .unwrap();
            }
            r.seen_unmapped.store(false, SeqCst);
            r.state.store(POPULATING, SeqCst);
            r.round.store(round, Release);
            // Let the racers get going on the populated range.
            sthread::sleep(Duration::from_micros(200));
            r.state.store(UNMAPPING, SeqCst);
            match how {
                Unmap::Munmap => {
                    let st = mm.munmap_stats(C0, base, len).unwrap();
                    downgraded += u64::from(st.downgraded);
                }
                Unmap::ZapBeforeDetach => {
                    mm.madvise(C0, base, len, MADV_DONTNEED).unwrap();
                    sthread::sleep(Duration::from_millis(2));
                    mm.munmap(C0, base, len).unwrap();
                }
            }
            r.state.store(UNMAPPED, SeqCst);
            sthread::sleep(Duration::from_micros(200));
            r.state.store(OVER, SeqCst);
            wait_until(&r, || r.done.load(SeqCst) == round * racers as u64);
            assert_eq!(mm.rss_total(), 0, "round {round}: pages left mapped");
            mm.validate().unwrap();
        }
        r.quit.store(true, Release);
    });
    exit_and_check(&m, mm, free0);
    Outcome {
        rounds,
        downgraded,
        racing: c.racing.load(Relaxed),
        maperr: c.maperr.load(Relaxed),
        maperr_during: c.maperr_during.load(Relaxed),
        pattern: c.pattern.load(Relaxed),
        after: c.after.load(Relaxed),
        violations: c.violations.load(Relaxed),
        zero_reads: c.zero_reads.load(Relaxed),
    }
}

mod racing_faults {
    use super::*;

    fn check(name: &str, downgrade: bool, thp: ThpMode) {
        check_in(name, downgrade, thp, TimeMode::Wall);
    }

    /// 1.5 s of rounds (at least 4), times `USERMM_TEST_SCALE`.
    fn check_in(name: &str, downgrade: bool, thp: ThpMode, time: TimeMode) {
        let o = race(
            downgrade,
            thp,
            Unmap::Munmap,
            3,
            16 << 20,
            Duration::from_millis(1500) * usermm_testscale::scale() as u32,
            time,
        );
        let msg = format!(
            "munmap.downgrade={downgrade} thp={thp:?} time={time:?}: {} rounds ({} downgraded), {} racing accesses checked: \
{} racing faults got SEGV_MAPERR ({} of them started before munmap returned), {} reads saw their page's own \
data before its zap, {} accesses after munmap returned; violations: {}",
            o.rounds, o.downgraded, o.racing, o.maperr, o.maperr_during, o.pattern, o.after, o.violations
        );
        eprintln!("{msg}");
        assert_eq!(o.violations, 0, "{msg}");
        assert_eq!(o.downgraded, if downgrade { o.rounds } else { 0 }, "{msg}");
        assert!(o.maperr_during > 0, "no fault raced the munmap: {msg}");
        usermm_testscale::report(name, o.racing + o.rounds);
    }

    #[test]
    fn downgraded_munmap_4k() {
        check("munmap_downgrade::downgraded_4k", true, ThpMode::Never);
    }

    #[test]
    fn exclusive_munmap_4k() {
        check("munmap_downgrade::exclusive_4k", false, ThpMode::Never);
    }

    #[test]
    fn downgraded_munmap_thp() {
        check("munmap_downgrade::downgraded_thp", true, ThpMode::Always);
    }

    /// The same property in virtual time: the racers are contexts on their own emulated
    /// CPUs, an access is atomic between two synchronisation points (no TLB gate), and the
    /// munmap's detach, downgrade and zap are ordered against their faults in virtual time.
    #[test]
    fn virtual_downgraded_munmap_4k() {
        check_in(
            "munmap_downgrade::virtual_downgraded_4k",
            true,
            ThpMode::Never,
            TimeMode::Virtual,
        );
    }

    #[test]
    fn virtual_exclusive_munmap_4k() {
        check_in(
            "munmap_downgrade::virtual_exclusive_4k",
            false,
            ThpMode::Never,
            TimeMode::Virtual,
        );
    }

    #[test]
    fn virtual_downgraded_munmap_thp() {
        check_in(
            "munmap_downgrade::virtual_downgraded_thp",
            true,
            ThpMode::Always,
            TimeMode::Virtual,
        );
    }
}

mod negative_control {
    use super::*;

    /// Zap first, detach later: racing reads get the zero page, and the checker says so.
    #[test]
    fn zap_before_detach_is_caught() {
        caught_in(TimeMode::Wall);
    }

    /// The checker fails in virtual time too.
    #[test]
    fn virtual_zap_before_detach_is_caught() {
        caught_in(TimeMode::Virtual);
    }

    fn caught_in(time: TimeMode) {
        let o = race(
            true,
            ThpMode::Never,
            Unmap::ZapBeforeDetach,
            2,
            4 << 20,
            Duration::from_millis(300),
            time,
        );
        let msg = format!(
            "zap-before-detach ({time:?}): {} rounds, {} racing accesses, {} violations ({} wrong reads)",
            o.rounds, o.racing, o.violations, o.zero_reads
        );
        eprintln!("{msg}");
        assert!(
            o.violations > 0 && o.zero_reads > 0,
            "the checker missed the wrong order: {msg}"
        );
    }
}

mod bystanders {
    use super::*;

    /// While a downgraded munmap zaps (after the detach, before its read unlock), a thread
    /// faulting in its own VMA of the same mm completes faults; under the write lock it cannot.
    ///
    /// Event-driven, no clock: the munmap's zap-window hook (which runs with the lock held as
    /// the zap holds it) asks the bystander for a whole pass of faults and waits for it. With
    /// the downgrade the pass completes inside the window; without it the hook sees the lock
    /// held for write, which every fault needs for read, so none can complete there.
    #[test]
    fn faults_elsewhere_proceed_during_the_zap() {
        const PAGES: u64 = 64;
        for down in [false, true] {
            let m = machine(down, |c| {
                c.mem = 512 << 20;
                c.backing = BackingMode::Sparse;
                c.thp = ThpMode::Never;
            });
            let mm = Mm::new(&m, C0).unwrap();
            let mine = mm
                .mmap(
                    C0,
                    0x20_0000_0000,
                    PAGES * 4096,
                    RW,
                    ANON | MAP_FIXED_NOREPLACE,
                    MapFile::None,
                )
                .unwrap();
            let len = 64u64 << 20;
            let big = populated(&mm, 0x10_0000_0000, len, MAP_FIXED_NOREPLACE);
            // The hook asks for a pass (`go`: true) and waits for its fault count (`done`); the
            // test ends the bystander with `go`: false.
            let (go_tx, go_rx) = mpsc::channel::<bool>();
            let stop = go_tx.clone();
            let (done_tx, done_rx) = mpsc::channel::<u64>();
            let done_rx = std::sync::Mutex::new(done_rx);
            let go_tx = std::sync::Mutex::new(go_tx);
            let in_window = Arc::new(std::sync::Mutex::new(Vec::<(bool, u64)>::new()));
            let record = Arc::clone(&in_window);
            assert!(mm.set_munmap_zap_hook(move |mm, downgraded| {
                let faults = if downgraded {
                    go_tx.lock().unwrap().send(true).unwrap();
                    // A safety net against a hang, not a measurement: the pass takes
                    // microseconds once the bystander may run.
                    done_rx
                        .lock()
                        .unwrap()
                        .recv_timeout(Duration::from_secs(120))
                        .expect("no bystander fault completed during the downgraded zap")
                } else {
                    assert!(
                        mm.mmap_lock_info().is_write_locked(),
                        "the vanilla zap runs under the write lock, so no fault can get in"
                    );
                    0
                };
                record.lock().unwrap().push((downgraded, faults));
            }));
            std::thread::scope(|s| {
                let mm2 = Arc::clone(&mm);
                s.spawn(move || {
                    let t = Task::new(Arc::clone(&mm2), CpuId(1));
                    let vmstat = mm2.machine().vmstat();
                    while go_rx.recv() == Ok(true) {
                        // Empty the VMA, then write every page: each write is a fault.
                        mm2.madvise(CpuId(1), mine, PAGES * 4096, MADV_DONTNEED)
                            .unwrap();
                        let before = vmstat.get(VmItem::Pgfault);
                        for p in (mine..mine + PAGES * 4096).step_by(4096) {
                            t.write_u64(p, 1).unwrap();
                        }
                        let faults = (vmstat.get(VmItem::Pgfault) - before) as u64;
                        if done_tx.send(faults).is_err() {
                            break;
                        }
                    }
                });
                let st = mm.munmap_stats(C0, big, len).unwrap();
                assert_eq!(st.downgraded, down);
                assert_eq!(st.pages_zapped, len / 4096);
                stop.send(false).unwrap();
            });
            let seen = in_window.lock().unwrap().clone();
            assert_eq!(seen.len(), 1, "the hook ran once, inside the one munmap");
            let (downgraded, faults) = seen[0];
            assert_eq!(downgraded, down);
            if down {
                // Every one of the pass's writes faulted, while the zap held the lock for read.
                assert!(faults >= PAGES, "{faults} faults in the window");
            }
            assert!(!mm.maps().contains("1000000000-"), "the big VMA is gone");
            mm.validate().unwrap();
        }
    }
}
