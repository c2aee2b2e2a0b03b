//! Property: random programs of locks, try-locks, an rwsem with downgrades, shared lines,
//! sleeps and work, on random CPUs (sharing some), give identical results on two runs, never
//! let two holders overlap in virtual time, and account every nanosecond once.
//!
//! The programs cannot deadlock: nested locks are taken in id order, and nothing sleeps while
//! holding a spinlock (the kernel's rule; see `vtime_runtime.rs` for what happens otherwise).

mod vtime_support;

use std::cell::RefCell;
use std::collections::HashMap;

use proptest::prelude::*;
use usermm::vtime::{self, hooks, LockClass, Mode, Report};
use vtime_support::*;

/// Locks 0 and 1 are mutexes, 2 and 3 spinlocks, 4 the rwsem.
fn class_of(lock: u8) -> &'static LockClass {
    if lock < 2 {
        &MUTEX
    } else {
        &SPIN
    }
}
const SEM: u8 = 4;

#[derive(Debug, Clone)]
enum Op {
    Lock { lock: u8, hold: u16 },
    Nested { outer: u8, inner: u8, hold: u16 },
    Try { lock: u8, hold: u16 },
    Read { hold: u16 },
    Write { hold: u16, downgrade: Option<u16> },
    Line { line: u8 },
    Sleep(u16),
    Work(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..4, 0u16..300).prop_map(|(lock, hold)| Op::Lock { lock, hold }),
        (0u8..3, 1u8..4, 0u16..300).prop_map(|(a, b, hold)| {
            let (outer, inner) = if a < b { (a, b) } else { (b - 1, b) };
            Op::Nested { outer, inner, hold }
        }),
        (0u8..4, 0u16..300).prop_map(|(lock, hold)| Op::Try { lock, hold }),
        (0u16..300).prop_map(|hold| Op::Read { hold }),
        (0u16..300, proptest::option::of(0u16..300))
            .prop_map(|(hold, downgrade)| Op::Write { hold, downgrade }),
        (0u8..2).prop_map(|line| Op::Line { line }),
        (0u16..2000).prop_map(Op::Sleep),
        (0u16..500).prop_map(Op::Work),
    ]
}

/// Up to 6 contexts on CPUs 0-9 (so some share a CPU and some are SMT siblings: 0/8, 1/9).
fn program() -> impl Strategy<Value = Vec<(usize, Vec<Op>)>> {
    proptest::collection::vec((0usize..10, proptest::collection::vec(op(), 1..12)), 1..7)
}

/// An acquisition seen from inside: lock, mode, context, virtual [start, end).
type Hold = (u8, Mode, usize, u64, u64);

struct Run {
    holds: Vec<Hold>,
    report: Report,
}

fn run(prog: &[(usize, Vec<Op>)]) -> Run {
    let rt = rt();
    let holds = RefCell::new(Vec::<Hold>::new());
    // Host-side holder counts: the virtual locks must never admit a second holder.
    let held = RefCell::new(HashMap::<u8, (u32, u32)>::new());
    let take = |lock: u8, mode: Mode| {
        let mut h = held.borrow_mut();
        let (ex, sh) = h.entry(lock).or_default();
        match mode {
            Mode::Exclusive => {
                assert_eq!((*ex, *sh), (0, 0), "lock {lock}: a second holder");
                *ex = 1;
            }
            Mode::Shared => {
                assert_eq!(*ex, 0, "lock {lock}: a reader beside a writer");
                *sh += 1;
            }
        }
        vtime::now()
    };
    let give = |lock: u8, mode: Mode, ctx: usize, start: u64| {
        let mut h = held.borrow_mut();
        let (ex, sh) = h.get_mut(&lock).unwrap();
        match mode {
            Mode::Exclusive => *ex = 0,
            Mode::Shared => *sh -= 1,
        }
        holds
            .borrow_mut()
            .push((lock, mode, ctx, start, vtime::now()));
    };
    rt.run(31, || {
        vtime::scope(|s| {
            for (ctx, (cpu, ops)) in prog.iter().enumerate() {
                let (take, give) = (&take, &give);
                s.spawn(*cpu, move || {
                    for op in ops {
                        match *op {
                            Op::Lock { lock, hold } => {
                                lock_(lock);
                                let t = take(lock, Mode::Exclusive);
                                vtime::work(hold as u64);
                                give(lock, Mode::Exclusive, ctx, t);
                                unlock_(lock);
                            }
                            Op::Nested { outer, inner, hold } => {
                                lock_(outer);
                                let t0 = take(outer, Mode::Exclusive);
                                vtime::work(10);
                                lock_(inner);
                                let t1 = take(inner, Mode::Exclusive);
                                vtime::work(hold as u64);
                                give(inner, Mode::Exclusive, ctx, t1);
                                unlock_(inner);
                                give(outer, Mode::Exclusive, ctx, t0);
                                unlock_(outer);
                            }
                            Op::Try { lock, hold } => {
                                if hooks::lock_try_acquire(
                                    lock as usize,
                                    class_of(lock),
                                    Mode::Exclusive,
                                )
                                .is_some()
                                {
                                    let t = take(lock, Mode::Exclusive);
                                    vtime::work(hold as u64);
                                    give(lock, Mode::Exclusive, ctx, t);
                                    unlock_(lock);
                                }
                            }
                            Op::Read { hold } => {
                                read_lock(SEM as usize);
                                let t = take(SEM, Mode::Shared);
                                vtime::work(hold as u64);
                                give(SEM, Mode::Shared, ctx, t);
                                read_unlock(SEM as usize);
                            }
                            Op::Write { hold, downgrade } => {
                                hooks::lock_acquire(SEM as usize, &RWSEM, Mode::Exclusive);
                                let t = take(SEM, Mode::Exclusive);
                                vtime::work(hold as u64);
                                give(SEM, Mode::Exclusive, ctx, t);
                                match downgrade {
                                    None => {
                                        hooks::lock_release(SEM as usize, &RWSEM, Mode::Exclusive)
                                    }
                                    Some(more) => {
                                        let t = take(SEM, Mode::Shared);
                                        hooks::lock_downgrade(SEM as usize, &RWSEM);
                                        vtime::work(more as u64);
                                        give(SEM, Mode::Shared, ctx, t);
                                        read_unlock(SEM as usize);
                                    }
                                }
                            }
                            Op::Line { line } => {
                                let class = if line == 0 { &LINE } else { &LINE2 };
                                hooks::line_rmw(0x100 + line as usize, class, class)
                            }
                            Op::Sleep(ns) => vtime::sleep(ns as u64),
                            Op::Work(ns) => vtime::work(ns as u64),
                        }
                    }
                });
            }
        })
    });
    Run {
        holds: holds.into_inner(),
        report: rt.report(),
    }
}

fn lock_(lock: u8) {
    hooks::lock_acquire(lock as usize, class_of(lock), Mode::Exclusive);
}

fn unlock_(lock: u8) {
    hooks::lock_release(lock as usize, class_of(lock), Mode::Exclusive);
}

proptest! {
    // 256 cases times USERMM_TEST_SCALE, seeded by USERMM_TEST_SEED.
    #![proptest_config(usermm_testscale::prop::config("vtime_props::random_programs", file!(), 256))]

    #[test]
    fn random_programs_are_deterministic_exclusive_and_fully_accounted(prog in program()) {
        static ANNOUNCE: std::sync::Once = std::sync::Once::new();
        ANNOUNCE.call_once(|| usermm_testscale::announce("vtime_props::random_programs"));
        let a = run(&prog);
        let b = run(&prog);
        prop_assert_eq!(&a.holds, &b.holds);
        prop_assert_eq!(&a.report, &b.report);

        // No two holders overlap in virtual time unless both read.
        let mut by_lock: HashMap<u8, Vec<&Hold>> = HashMap::new();
        for h in &a.holds {
            prop_assert!(h.3 <= h.4);
            by_lock.entry(h.0).or_default().push(h);
        }
        for hs in by_lock.values() {
            for (i, x) in hs.iter().enumerate() {
                for y in &hs[i + 1..] {
                    let both_read = x.1 == Mode::Shared && y.1 == Mode::Shared;
                    let apart = x.4 <= y.3 || y.4 <= x.3;
                    prop_assert!(both_read || apart, "overlap: {:?} {:?}", x, y);
                }
            }
        }

        // Every CPU's busy and spin fit in the run; contexts and CPUs agree on the sums.
        let r = &a.report;
        for c in &r.cpus {
            prop_assert_eq!(c.time.busy_ns + c.time.spin_ns + c.time.idle_ns, r.end_ns, "cpu{}", c.cpu);
        }
        let ctx_busy: u64 = r.contexts.iter().map(|c| c.busy_ns).sum();
        let ctx_spin: u64 = r.contexts.iter().map(|c| c.spin_ns).sum();
        prop_assert_eq!(ctx_busy, r.busy_ns());
        prop_assert_eq!(ctx_spin, r.cpus.iter().map(|c| c.time.spin_ns).sum::<u64>());
        let lines: u64 = prog.iter().flat_map(|(_, ops)| ops).filter(|o| matches!(o, Op::Line { .. })).count() as u64;
        prop_assert_eq!(r.lines.iter().map(|l| l.rmws).sum::<u64>(), lines);
        prop_assert!(r.contexts.iter().all(|c| c.end_ns.is_some()));
    }
}
