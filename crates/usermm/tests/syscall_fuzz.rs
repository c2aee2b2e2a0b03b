//! Fuzzing the syscall-like entry points with raw arguments: any address, length, protection,
//! flag word, advice and file offset — not just the well-formed ones `syscall_props` draws.
//! Every call must return a value or an errno (never panic), accesses must return a value or
//! a fault, `validate_mm` must hold after every step, and exit must give every frame back.
//!
//! A second test races three threads' raw sequences on one mm (`FUZZ_CASES / 4` cases).
//!
//! `FUZZ_CASES=N cargo test --release --test syscall_fuzz` runs longer (default 256 cases of up
//! to 48 calls in `cargo test`, and 64 racing cases of up to 3 × 120 calls).

mod common;

use common::*;
use proptest::prelude::*;
use usermm::config::BackingMode;
use usermm::mm::mmap::*;
use usermm::{CpuId, Mm, Task, PAGE_SIZE};

/// `TASK_SIZE` of x86-64 with 4-level tables.
const TASK_SIZE: u64 = (1 << 47) - PAGE_SIZE;

/// An address: edge values, the usual placement areas, or anything.
fn addr() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => prop::sample::select(vec![
            0,
            1,
            PAGE_SIZE - 1,
            PAGE_SIZE,
            0x10000,
            TASK_SIZE - PAGE_SIZE,
            TASK_SIZE,
            TASK_SIZE + PAGE_SIZE,
            1 << 47,
            u64::MAX - PAGE_SIZE + 1,
            u64::MAX,
        ]),
        4 => (0u64..4096).prop_map(|p| 0x4000_0000 + p * PAGE_SIZE),
        3 => (0u64..4096).prop_map(|p| MMAP_BASE - (p << 12)),
        2 => any::<u64>(),
    ]
}

/// A length: small, edge values, huge, or anything.
fn len() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => (0u64..64).prop_map(|p| p * PAGE_SIZE),
        2 => 1u64..3 * PAGE_SIZE,
        2 => prop::sample::select(vec![
            0,
            2 << 20,
            (2 << 20) + PAGE_SIZE,
            1 << 30,
            TASK_SIZE,
            TASK_SIZE + 1,
            u64::MAX - PAGE_SIZE + 2,
            u64::MAX,
        ]),
        1 => any::<u64>(),
    ]
}

fn prot() -> impl Strategy<Value = u32> {
    prop_oneof![
        4 => prop::sample::select(vec![
            PROT_NONE,
            PROT_READ,
            PROT_READ | PROT_WRITE,
            PROT_READ | PROT_EXEC,
            PROT_WRITE,
        ]),
        1 => any::<u32>(),
    ]
}

fn flags() -> impl Strategy<Value = u32> {
    let kind = prop::sample::select(vec![MAP_PRIVATE, MAP_SHARED, MAP_SHARED_VALIDATE, 0]);
    let extra = prop::sample::subsequence(
        vec![
            MAP_ANONYMOUS,
            MAP_FIXED,
            MAP_FIXED_NOREPLACE,
            MAP_POPULATE,
            MAP_NORESERVE,
            MAP_LOCKED,
            MAP_GROWSDOWN,
            MAP_HUGETLB,
            MAP_NONBLOCK,
        ],
        0..4,
    );
    prop_oneof![
        6 => (kind, extra).prop_map(|(k, e)| e.into_iter().fold(k, |a, f| a | f)),
        1 => any::<u32>(),
    ]
}

fn advice() -> impl Strategy<Value = i32> {
    prop_oneof![4 => 0i32..30, 1 => 60i32..120, 1 => any::<i32>()]
}

#[derive(Debug, Clone)]
enum Call {
    Mmap {
        addr: u64,
        len: u64,
        prot: u32,
        flags: u32,
        dev_zero: bool,
        pgoff: u64,
    },
    Munmap(u64, u64),
    Mprotect(u64, u64, u32),
    Madvise(u64, u64, i32),
    Mlock(u64, u64),
    Munlock(u64, u64),
    Read(u64, usize),
    Write(u64, usize),
}

fn call() -> impl Strategy<Value = Call> {
    let pgoff = prop_oneof![4 => 0u64..16, 1 => any::<u64>()];
    // Well-formed anonymous maps of a few pages, so later calls find something to act on.
    let sane = (
        prop::sample::select(vec![MAP_PRIVATE, MAP_SHARED]),
        prop::sample::subsequence(vec![MAP_POPULATE, MAP_LOCKED, MAP_FIXED_NOREPLACE], 0..2),
        (1u64..600).prop_map(|p| p * PAGE_SIZE),
        addr(),
        prot(),
    )
        .prop_map(|(kind, extra, len, addr, prot)| Call::Mmap {
            addr,
            len,
            prot,
            flags: extra.into_iter().fold(kind | MAP_ANONYMOUS, |a, f| a | f),
            dev_zero: false,
            pgoff: 0,
        });
    prop_oneof![
        4 => sane,
        3 => (addr(), len(), prot(), flags(), any::<bool>(), pgoff).prop_map(
            |(addr, len, prot, flags, dev_zero, pgoff)| Call::Mmap {
                addr,
                len,
                prot,
                flags,
                dev_zero,
                pgoff
            }
        ),
        2 => (addr(), len()).prop_map(|(a, l)| Call::Munmap(a, l)),
        2 => (addr(), len(), prot()).prop_map(|(a, l, p)| Call::Mprotect(a, l, p)),
        2 => (addr(), len(), advice()).prop_map(|(a, l, v)| Call::Madvise(a, l, v)),
        1 => (addr(), len()).prop_map(|(a, l)| Call::Mlock(a, l)),
        1 => (addr(), len()).prop_map(|(a, l)| Call::Munlock(a, l)),
        2 => (addr(), 1usize..9000).prop_map(|(a, n)| Call::Read(a, n)),
        2 => (addr(), 1usize..9000).prop_map(|(a, n)| Call::Write(a, n)),
    ]
}

/// Addresses the last successful mmaps returned: later calls aim at them half of the time.
fn aim(placed: &[u64], a: u64, pick: usize) -> u64 {
    if placed.is_empty() || pick.is_multiple_of(2) {
        a
    } else {
        placed[pick % placed.len()] + (a % 8) * PAGE_SIZE
    }
}

fn apply(mm: &Mm, t: &Task, c: &Call, placed: &mut Vec<u64>, pick: usize) {
    let cpu = t.cpu();
    match *c {
        Call::Mmap {
            addr,
            len,
            prot,
            flags,
            dev_zero,
            pgoff,
        } => {
            let file = if dev_zero {
                MapFile::DevZero
            } else {
                MapFile::None
            };
            let addr = aim(placed, addr, pick);
            if let Ok(a) = mm.mmap_pgoff(cpu, addr, len, prot, flags, file, pgoff) {
                assert_eq!(a % PAGE_SIZE, 0, "{c:?} returned {a:#x}");
                placed.push(a);
            }
        }
        Call::Munmap(a, l) => {
            let _ = mm.munmap(cpu, aim(placed, a, pick), l);
        }
        Call::Mprotect(a, l, p) => {
            let _ = mm.mprotect(cpu, aim(placed, a, pick), l, p);
        }
        Call::Madvise(a, l, v) => {
            let _ = mm.madvise(cpu, aim(placed, a, pick), l, v);
        }
        Call::Mlock(a, l) => {
            let _ = mm.mlock(cpu, aim(placed, a, pick), l);
        }
        Call::Munlock(a, l) => {
            let _ = mm.munlock(cpu, aim(placed, a, pick), l);
        }
        Call::Read(a, n) => {
            let mut buf = vec![0u8; n];
            let _ = t.read(aim(placed, a, pick), &mut buf);
        }
        Call::Write(a, n) => {
            let _ = t.write(aim(placed, a, pick), &vec![0xa5u8; n]);
        }
    }
}

/// Small and sparse, so that a huge `MAP_POPULATE` or mlock runs out of frames quickly; two
/// hugetlb pages; THP always or madvise.
fn fuzz_machine(thp_always: bool) -> std::sync::Arc<usermm::Machine> {
    machine_with(|c| {
        c.mem = 32 << 20;
        c.backing = BackingMode::Sparse;
        c.nr_hugepages = 2;
        c.thp = if thp_always {
            usermm::config::ThpMode::Always
        } else {
            usermm::config::ThpMode::Madvise
        };
    })
}

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn raw_syscall_arguments_never_panic_and_keep_invariants(
        calls in prop::collection::vec((call(), any::<usize>()), 1..48),
        thp in any::<bool>(),
    ) {
        let m = fuzz_machine(thp);
        let free_before = free_pages(&m);
        let mm = m.new_mm(C0).expect("mm");
        let t = task(&mm);
        let mut placed = Vec::new();
        for (c, pick) in &calls {
            apply(&mm, &t, c, &mut placed, *pick);
            if let Err(e) = mm.validate() {
                // Tearing down a broken mm would trip a VM_BUG_ON in a destructor and abort
                // the run before proptest can shrink it: leak it instead.
                std::mem::forget(t);
                std::mem::forget(mm);
                prop_assert!(false, "validate_mm after {:?}: {}", c, e);
                unreachable!();
            }
        }
        drop(t);
        exit_and_check(&m, mm, free_before);
    }
}

/// Three threads, each on its own CPU with its own raw call sequence, on one mm: whatever the
/// interleaving, no call panics, and afterwards `validate_mm` holds and exit frees every frame.
/// The sequences come from a deterministic runner (the same cases every run); the
/// interleavings do not repeat, so a failure prints its case number and sequences.
#[test]
fn racing_raw_syscalls_keep_invariants() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let seq = prop::collection::vec((call(), any::<usize>()), 1..120);
    let mut runner = TestRunner::deterministic();
    let cases = (cases() / 4).max(1);
    for case in 0..cases {
        let seqs: Vec<Vec<(Call, usize)>> = (0..3)
            .map(|_| seq.new_tree(&mut runner).expect("strategy").current())
            .collect();
        let thp = case % 2 == 0;
        let m = fuzz_machine(thp);
        let free_before = free_pages(&m);
        let mm = m.new_mm(C0).expect("mm");
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            std::thread::scope(|s| {
                for (i, seq) in seqs.iter().enumerate() {
                    let mm = &mm;
                    s.spawn(move || {
                        let t = Task::new(std::sync::Arc::clone(mm), CpuId(i as u16 + 1));
                        let mut placed = Vec::new();
                        for (c, pick) in seq {
                            apply(mm, &t, c, &mut placed, *pick);
                        }
                    });
                }
            })
        }));
        let checked = if ran.is_ok() {
            mm.validate()
        } else {
            Err("a call panicked".into())
        };
        if let Err(e) = checked {
            std::mem::forget(mm);
            panic!("case {case} (thp {thp}): {e}\nsequences: {seqs:#?}");
        }
        exit_and_check(&m, mm, free_before);
    }
}

// ----- Regressions the fuzzer found ------------------------------------------------------------

fn hugetlb_machine() -> std::sync::Arc<usermm::Machine> {
    fuzz_machine(false)
}

const HUGETLB: u32 = MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB;
const HPAGE: u64 = 2 << 20;

/// Fuzzer find 1: a hugetlb mmap with a hint off a 2 MiB boundary was placed at the hint, and
/// its fault mapped a huge PMD starting below the VMA. Linux rounds the hint up
/// (`hugetlb_get_unmapped_area`).
#[test]
fn hugetlb_hint_is_rounded_up_to_a_huge_page() {
    let m = hugetlb_machine();
    let free_before = free_pages(&m);
    let mm = m.new_mm(C0).expect("mm");
    let hint = 0x4000_1000;
    let a = mm
        .mmap(
            C0,
            hint,
            PAGE_SIZE,
            PROT_READ,
            HUGETLB | MAP_LOCKED,
            MapFile::None,
        )
        .expect("hugetlb mmap");
    assert_eq!(a, 0x4020_0000, "hint rounded up to 2 MiB");
    let maps = mm.maps();
    assert!(maps.starts_with("40200000-40400000 r--p"), "{maps}");
    mm.validate().expect("validate_mm");
    // A hint that is taken: the next aligned free range below mmap_base instead.
    let b = mm
        .mmap(C0, hint, HPAGE, PROT_READ, HUGETLB, MapFile::None)
        .expect("second hugetlb mmap");
    assert_eq!(b % HPAGE, 0);
    assert_ne!(b, a);
    let t = task(&mm);
    let mut buf = [1u8; 8];
    t.read(b + 5 * PAGE_SIZE, &mut buf).expect("read");
    assert_eq!(buf, [0; 8]);
    mm.validate().expect("validate_mm");
    drop(t);
    exit_and_check(&m, mm, free_before);
}

/// Fuzzer find 2: mprotect of the first 4 KiB of a locked hugetlb mapping split the VMA off
/// its huge-page boundary (and then populated it), so exit had to split a hugetlb PMD, which
/// has no deposited table: VM_BUG_ON. Linux refuses the split (`hugetlb_vm_op_split`).
#[test]
fn hugetlb_vmas_do_not_split_off_a_huge_page_boundary() {
    let m = hugetlb_machine();
    let free_before = free_pages(&m);
    let mm = m.new_mm(C0).expect("mm");
    let a = mm
        .mmap(
            C0,
            0,
            2 * HPAGE,
            PROT_NONE,
            HUGETLB | MAP_LOCKED,
            MapFile::None,
        )
        .expect("hugetlb mmap");
    let rw = PROT_READ | PROT_WRITE;
    assert_eq!(
        mm.mprotect(C0, a, PAGE_SIZE, rw),
        Err(usermm::Errno::EINVAL)
    );
    assert_eq!(
        mm.mprotect(C0, a + PAGE_SIZE, HPAGE, rw),
        Err(usermm::Errno::EINVAL)
    );
    assert_eq!(
        mm.madvise(C0, a, PAGE_SIZE, MADV_DONTFORK),
        Err(usermm::Errno::EINVAL)
    );
    assert_eq!(mm.maps().lines().count(), 1, "{}", mm.maps());
    // On the boundary it splits, and the locked half made writable is populated.
    mm.mprotect(C0, a, HPAGE, rw).expect("aligned mprotect");
    assert_eq!(mm.maps().lines().count(), 2, "{}", mm.maps());
    mm.validate().expect("validate_mm");
    exit_and_check(&m, mm, free_before);
}

/// Fuzzer find 3 (the racing fuzzer, but single-threaded too): a `MAP_FIXED` mmap over part
/// of a hugetlb VMA cut it off a huge-page boundary and zapped half a hugetlb PMD (VM_BUG_ON:
/// no deposited table). Linux fails the mmap with `EINVAL` from the split and changes nothing.
#[test]
fn map_fixed_cannot_cut_a_hugetlb_vma_off_a_huge_page_boundary() {
    let m = hugetlb_machine();
    let free_before = free_pages(&m);
    let mm = m.new_mm(C0).expect("mm");
    let a = mm
        .mmap(
            C0,
            0,
            2 * HPAGE,
            PROT_READ | PROT_WRITE,
            HUGETLB | MAP_POPULATE,
            MapFile::None,
        )
        .expect("hugetlb mmap");
    let maps = mm.maps();
    let fixed = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;
    assert_eq!(
        mm.mmap(
            C0,
            a + PAGE_SIZE,
            PAGE_SIZE,
            PROT_READ,
            fixed,
            MapFile::None
        ),
        Err(usermm::Errno::EINVAL)
    );
    assert_eq!(
        mm.munmap(C0, a + HPAGE + PAGE_SIZE, HPAGE),
        Err(usermm::Errno::EINVAL)
    );
    assert_eq!(mm.maps(), maps, "nothing changed");
    // Cut on both boundaries, it works: the second huge page is replaced.
    let b = mm
        .mmap(C0, a + HPAGE, HPAGE, PROT_READ, fixed, MapFile::None)
        .expect("MAP_FIXED on the boundaries");
    assert_eq!(b, a + HPAGE);
    assert_eq!(mm.maps().lines().count(), 2, "{}", mm.maps());
    mm.validate().expect("validate_mm");
    exit_and_check(&m, mm, free_before);
}
