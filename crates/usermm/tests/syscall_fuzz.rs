//! Fuzzing the syscall-like entry points with raw arguments: any address, length, protection,
//! flag word, advice and file offset — not just the well-formed ones `syscall_props` draws —
//! plus mremap, brk, fork and exit of forked children (calls then pick among the family), with
//! and without per-VMA locks.
//! Every call must return a value or an errno (never panic), accesses must return a value or
//! a fault, `validate_mm` must hold after every step, and exit must give every frame back.
//!
//! What is read is checked where a model can say. Every byte written at address `x` is
//! `byte(x, writer)`: a hash of `x` with its top bit set, xor the writer's number (1–3), never
//! zero. Nothing in the engine moves data between addresses (no mremap here), so any byte read
//! at `x` must be 0 or `byte(x, w)` for some writer `w`: garbage, another address's data or a
//! stale frame would show. One thread alone can say more: a write that succeeded reads back
//! exactly, and a failed access names an address with a VMA exactly when its outcome is not
//! `SEGV_MAPERR`.
//!
//! A second test races three threads' raw sequences on one mm (`racing_raw_syscalls_*`).
//!
//! Budgets: 256 single-thread sequences of up to 48 calls, 64 racing cases of up to 3 × 120
//! calls, times `USERMM_TEST_SCALE`; the sequences come from `USERMM_TEST_SEED` (README,
//! testing notes), and a failure prints the line that replays it.

mod common;

use common::*;
use proptest::prelude::*;
use usermm::config::BackingMode;
use usermm::mm::mmap::*;
use usermm::mm::vma::DEFAULT_START_BRK;
use usermm::{CpuId, Mm, SegvCode, Task, PAGE_SIZE};

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
    Mremap(u64, u64, u64, u32, u64),
    Brk(u64),
    /// fork the chosen mm (at most three children); later calls pick among all.
    Fork,
    /// exit (mmput) a child.
    Exit,
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
        3 => (addr(), len(), len(), prop_oneof![6 => 0u32..8, 1 => any::<u32>()], addr())
            .prop_map(|(a, o, n, f, d)| Call::Mremap(a, o, n, f, d)),
        1 => prop_oneof![
            3 => (0u64..(64 << 12)).prop_map(|o| DEFAULT_START_BRK + o),
            1 => any::<u64>(),
        ]
        .prop_map(Call::Brk),
        1 => Just(Call::Fork),
        1 => Just(Call::Exit),
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

/// The byte writer `w` (1–3) stores at address `x`: never 0, and different for each writer.
fn byte(x: u64, w: u8) -> u8 {
    let mut z = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z ^= z >> 29;
    (z as u8 | 0x80) ^ w
}

/// Check a successful read of `buf` at `a`: every byte is 0 or some writer's byte for its
/// address (`writers` = 0: a sparse machine, whose reads are all zeros).
fn check_read(a: u64, buf: &[u8], writers: u8) -> Result<(), String> {
    for (i, &b) in buf.iter().enumerate() {
        let x = a.wrapping_add(i as u64);
        if b != 0 && !(1..=writers).any(|w| byte(x, w) == b) {
            return Err(format!(
                "read at {a:#x}: byte {b:#04x} at {x:#x} is neither 0 nor any writer's ({:#04x}..)",
                byte(x, 1)
            ));
        }
    }
    Ok(())
}

/// Is `addr` inside a VMA?
fn in_vma(mm: &Mm, addr: u64) -> bool {
    mm.mmap_read_lock()
        .find_vma(addr)
        .is_some_and(|v| v.start <= addr)
}

/// What a thread running `apply` knows: its number, how many write (0 on a sparse machine,
/// where data is never kept), and whether it runs alone (then it may check more than the
/// byte rule).
struct Who<'a> {
    writer: u8,
    writers: u8,
    alone: bool,
    /// Set before any `mremap` is tried in the mms these threads share: a moved page keeps
    /// the bytes written for its old address, so reads are checked only while it is clear.
    moved: &'a std::sync::atomic::AtomicBool,
}

/// The mms a sequence acts on: the first and the children it forked.
struct Family {
    mms: Vec<std::sync::Arc<Mm>>,
    placed: Vec<u64>,
}

impl Family {
    fn new(mm: &std::sync::Arc<Mm>) -> Self {
        Family {
            mms: vec![std::sync::Arc::clone(mm)],
            placed: Vec::new(),
        }
    }

    /// Put every child (the first mm is the caller's).
    fn exit_children(&mut self, cpu: CpuId) {
        for c in self.mms.drain(1..) {
            c.mmput(cpu);
        }
    }
}

fn apply_family(
    f: &mut Family,
    cpu: CpuId,
    c: &Call,
    pick: usize,
    who: &Who<'_>,
) -> Result<(), String> {
    let mm = std::sync::Arc::clone(&f.mms[(pick / 3) % f.mms.len()]);
    match *c {
        Call::Fork => {
            if f.mms.len() < 4 {
                if let Ok(child) = mm.fork(cpu) {
                    f.mms.push(child);
                }
            }
        }
        Call::Exit => {
            if f.mms.len() > 1 {
                let i = 1 + pick % (f.mms.len() - 1);
                f.mms.remove(i).mmput(cpu);
            }
        }
        Call::Mremap(a, o, n, fl, d) => {
            who.moved.store(true, std::sync::atomic::Ordering::SeqCst);
            if let Ok(got) = mm.mremap(cpu, aim(&f.placed, a, pick), o, n, fl, d) {
                assert_eq!(got % PAGE_SIZE, 0, "{c:?} returned {got:#x}");
                f.placed.push(got);
            }
        }
        Call::Brk(b) => {
            // The new break, or the break as it was — which a racing thread may have moved
            // just before the call (then it is the break read after it, barring a third move).
            let now = mm.current_brk();
            let got = mm.brk(cpu, b);
            let after = mm.current_brk();
            assert!(
                got == b || got == now || got == after,
                "{c:?}: {got:#x} from {now:#x} (then {after:#x})"
            );
        }
        _ => apply(
            &mm,
            &Task::new(std::sync::Arc::clone(&mm), cpu),
            c,
            &mut f.placed,
            pick,
            who,
        )?,
    }
    Ok(())
}

/// Run one call. `Err` says what a checked access got wrong.
fn apply(
    mm: &Mm,
    t: &Task,
    c: &Call,
    placed: &mut Vec<u64>,
    pick: usize,
    who: &Who<'_>,
) -> Result<(), String> {
    let cpu = t.cpu();
    match *c {
        Call::Mremap(..) | Call::Brk(_) | Call::Fork | Call::Exit => {}
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
            if let Ok(a) = mm.mmap(cpu, addr, len, prot, flags, MapFileAt { file, pgoff }) {
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
            let a = aim(placed, a, pick);
            let mut buf = vec![0u8; n];
            match t.read(a, &mut buf) {
                // Checked after the read: a clear flag then means no mremap had begun.
                Ok(()) if !who.moved.load(std::sync::atomic::Ordering::SeqCst) => {
                    check_read(a, &buf, who.writers)?
                }
                Ok(()) => {}
                Err(f) if who.alone => check_fault(mm, &f)?,
                Err(_) => {}
            }
        }
        Call::Write(a, n) => {
            let a = aim(placed, a, pick);
            let data: Vec<u8> = (0..n as u64)
                .map(|i| byte(a.wrapping_add(i), who.writer))
                .collect();
            match t.write(a, &data) {
                Ok(()) if who.alone => {
                    // Nobody else runs: the bytes read back exactly (zeros when sparse).
                    let mut back = vec![0u8; n];
                    t.read(a, &mut back)
                        .map_err(|f| format!("read-back of a {n}-byte write at {a:#x}: {f}"))?;
                    let data = if who.writers == 0 { vec![0; n] } else { data };
                    if back != data {
                        let i = back
                            .iter()
                            .zip(&data)
                            .position(|(x, y)| x != y)
                            .unwrap_or(0);
                        return Err(format!(
                            "read-back of a {n}-byte write at {a:#x}: byte {i} is {:#04x}, wrote {:#04x}",
                            back[i], data[i]
                        ));
                    }
                }
                Ok(()) => {}
                Err(f) if who.alone => check_fault(mm, &f)?,
                Err(_) => {}
            }
        }
    }
    Ok(())
}

/// A failed access of a thread running alone: `SEGV_MAPERR` exactly when no VMA holds the
/// address.
fn check_fault(mm: &Mm, f: &usermm::Fault) -> Result<(), String> {
    let mapped = in_vma(mm, f.addr);
    if mapped == (f.code == SegvCode::MapErr) {
        return Err(format!(
            "{f}, but the address is {}in a VMA",
            if mapped { "" } else { "not " }
        ));
    }
    Ok(())
}

/// Small, so that a huge `MAP_POPULATE` or mlock runs out of frames quickly; two hugetlb
/// pages; THP always or madvise; data kept (`full`) or not (sparse: reads return zeros).
fn fuzz_machine(thp_always: bool, full: bool) -> std::sync::Arc<usermm::Machine> {
    machine_with(|c| {
        c.mem = 32 << 20;
        c.backing = if full {
            BackingMode::Full
        } else {
            BackingMode::Sparse
        };
        c.nr_hugepages = 2;
        c.thp = if thp_always {
            usermm::config::ThpMode::Always
        } else {
            usermm::config::ThpMode::Madvise
        };
    })
}

/// [`fuzz_machine`] with per-VMA locks.
fn pvl_machine(thp_always: bool, full: bool) -> std::sync::Arc<usermm::Machine> {
    machine_with(|c| {
        c.mem = 32 << 20;
        c.backing = if full {
            BackingMode::Full
        } else {
            BackingMode::Sparse
        };
        c.nr_hugepages = 2;
        c.vma.per_vma_lock = true;
        c.thp = if thp_always {
            usermm::config::ThpMode::Always
        } else {
            usermm::config::ThpMode::Madvise
        };
    })
}

/// 256 sequences of up to 48 raw calls (times `USERMM_TEST_SCALE`), one thread, on an mm and
/// the children it forks, with and without per-VMA locks.
#[test]
fn raw_syscall_arguments_never_panic_and_keep_invariants() {
    usermm_testscale::prop::check(
        "syscall_fuzz::raw",
        file!(),
        256,
        (
            prop::collection::vec((call(), any::<usize>()), 1..48),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        ),
        |(calls, thp, full, per_vma)| {
            let m = if per_vma {
                pvl_machine(thp, full)
            } else {
                fuzz_machine(thp, full)
            };
            let free_before = free_pages(&m);
            let mm = m.new_mm(C0).expect("mm");
            let mut fam = Family::new(&mm);
            let moved = std::sync::atomic::AtomicBool::new(false);
            let who = Who {
                writer: 1,
                writers: u8::from(full),
                alone: true,
                moved: &moved,
            };
            for (c, pick) in &calls {
                let checked = apply_family(&mut fam, C0, c, *pick, &who);
                if let Err(e) = checked.clone().and_then(|()| mm.validate()) {
                    // Tearing down a broken mm would trip a VM_BUG_ON in a destructor and
                    // abort the run before proptest can shrink it: leak it instead.
                    std::mem::forget(fam);
                    std::mem::forget(mm);
                    let what = if checked.is_err() {
                        "check"
                    } else {
                        "validate_mm"
                    };
                    prop_assert!(false, "{} after {:?}: {}", what, c, e);
                    unreachable!();
                }
            }
            fam.exit_children(C0);
            drop(fam);
            exit_and_check(&m, mm, free_before);
            Ok(calls.len() as u64)
        },
    );
}

/// Three threads, each on its own CPU with its own raw call sequence, on one mm: whatever the
/// interleaving, no call panics, every byte read is 0 or some writer's byte for its address,
/// and afterwards `validate_mm` holds and exit frees every frame. 64 cases (times
/// `USERMM_TEST_SCALE`); the sequences come from `USERMM_TEST_SEED`, the interleavings do
/// not repeat, so a failure prints the replay line, its case number and its sequences.
#[test]
fn racing_raw_syscalls_keep_invariants_and_data() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    const NAME: &str = "syscall_fuzz::racing";
    usermm_testscale::announce(NAME);
    let seq = prop::collection::vec((call(), any::<usize>()), 1..120);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&usermm_testscale::seed_for(NAME).to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let cases = usermm_testscale::scaled(64);
    let mut ops = 0u64;
    for case in 0..cases {
        let seqs: Vec<Vec<(Call, usize)>> = (0..3)
            .map(|_| seq.new_tree(&mut runner).expect("strategy").current())
            .collect();
        ops += seqs.iter().map(|s| s.len() as u64).sum::<u64>();
        let (thp, full) = (case % 2 == 0, case % 4 < 2);
        let m = if case % 8 < 4 {
            fuzz_machine(thp, full)
        } else {
            pvl_machine(thp, full)
        };
        let moved = std::sync::atomic::AtomicBool::new(false);
        let free_before = free_pages(&m);
        let mm = m.new_mm(C0).expect("mm");
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            std::thread::scope(|s| {
                let hs: Vec<_> = seqs
                    .iter()
                    .enumerate()
                    .map(|(i, seq)| {
                        let (mm, moved) = (&mm, &moved);
                        s.spawn(move || {
                            let cpu = CpuId(i as u16 + 1);
                            let who = Who {
                                writer: i as u8 + 1,
                                writers: if full { 3 } else { 0 },
                                alone: false,
                                moved,
                            };
                            let mut fam = Family::new(mm);
                            let r = seq.iter().try_for_each(|(c, pick)| {
                                apply_family(&mut fam, cpu, c, *pick, &who)
                                    .map_err(|e| format!("thread {i}, {c:?}: {e}"))
                            });
                            fam.exit_children(cpu);
                            r
                        })
                    })
                    .collect();
                // The scope joins whoever is left after a first error.
                hs.into_iter()
                    .try_for_each(|h| h.join().expect("racing thread"))
            })
        }));
        let checked = match ran {
            Ok(Ok(())) => mm.validate(),
            Ok(Err(e)) => Err(e),
            Err(_) => Err("a call panicked".into()),
        };
        if let Err(e) = checked {
            std::mem::forget(mm);
            panic!(
                "{NAME}: case {case} (thp {thp}, full {full}): {e}\nreplay: {}\nsequences: {seqs:#?}",
                usermm_testscale::replay()
            );
        }
        exit_and_check(&m, mm, free_before);
    }
    usermm_testscale::report(NAME, ops);
}

// ----- Regressions the fuzzer found ------------------------------------------------------------

fn hugetlb_machine() -> std::sync::Arc<usermm::Machine> {
    fuzz_machine(false, false)
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
