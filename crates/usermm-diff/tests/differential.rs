//! Differential tests: the engine against the host kernel, op by op (docs/testing.md).
//!
//! * `diff_fixed_cases`: every case of `cases/` (oracle rows, LTP-style cases, merge/split
//!   scenarios, THP placement), compared step by step, plus the oracle's expectations on the
//!   host's results.
//! * `diff_max_map_count`: LTP munmap04 — a split at `max_map_count` fails with ENOMEM.
//! * `diff_generated_*`: random op sequences (proptest), at least 2 000 of 20+ ops in total,
//!   compared step by step; a disagreement is shrunk to a minimal sequence and printed. The
//!   ops include mremap, brk, fork and switching between and exiting the two processes.
//! * `diff_replay_generated` (ignored, a tool): one generated sequence, by its number in a
//!   test's stream, replayed many times with a count of each outcome — how a disagreement that
//!   a replay does not repeat is told apart (a host that raced, an engine path only some runs
//!   take). A failing `diff_generated_*` prints the line that runs it.
//!
//! Disagreements listed in `usermm_diff::divergences` end a sequence as "known"; a
//! disagreement that a fresh host does not repeat is a "host flake" only when a named cause of
//! `divergences::HOST_NONDETERMINISM` matches, with the kernel's count of its event; anything
//! else fails (a replay agreeing alone hid the harness's own race for weeks).
//!
//! The generated tests draw their sequences from `USERMM_TEST_SEED` (a fresh seed each run when
//! unset; a failure prints the one that replays it) and run 500 sequences each times
//! `USERMM_TEST_SCALE`, e.g. `USERMM_TEST_SEED=7 USERMM_TEST_SCALE=4 cargo test -p usermm-diff
//! --test differential -- --nocapture`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use usermm::Machine;
use usermm_diff::engine_backend::{host_like_config, EngineBackend};
use usermm_diff::ops::*;
use usermm_diff::runner::{expand, minimize, new_warm_host, run_sequence, Outcome, RunOptions};

mod cases;

use cases::{all_cases, Case};

fn new_host() -> Box<dyn AddressSpace> {
    new_warm_host()
}

fn machine() -> Arc<Machine> {
    Machine::new(host_like_config()).expect("engine machine")
}

/// Run one fixed case; `Err` explains what went wrong.
fn run_case(m: &Arc<Machine>, case: &Case) -> Result<Outcome, String> {
    let opts = RunOptions::default();
    let mut engine = EngineBackend::on_machine(m).map_err(|e| e.to_string())?;
    let outcome = run_sequence(&mut || new_host(), &mut engine, &case.ops, opts);
    engine
        .validate()
        .map_err(|e| format!("engine invariants after {}: {e}", case.name))?;
    match &outcome {
        Outcome::Diverged(m) => return Err(format!("diverged:\n{m}")),
        Outcome::HostFlake { cause, mismatch } => {
            return Err(format!("host flake ({cause}; rerun):\n{mismatch}"));
        }
        Outcome::Known { .. } => {}
        Outcome::Agreed { results, .. } => {
            let expanded = expand(&case.ops, opts);
            for (pos, (_, orig)) in expanded.iter().enumerate() {
                let Some(orig) = orig else { continue };
                for (_, e) in case.expect.iter().filter(|(i, _)| i == orig) {
                    e.check(&results[pos]).map_err(|msg| {
                        format!(
                            "op #{orig} {}: host result vs oracle: {msg}",
                            case.ops[*orig]
                        )
                    })?;
                }
            }
        }
    }
    Ok(outcome)
}

#[test]
fn diff_fixed_cases() {
    let t = Instant::now();
    let m = machine();
    let cases = all_cases();
    let mut failures = Vec::new();
    let mut known = Vec::new();
    let mut ops = 0;
    for case in &cases {
        match run_case(&m, case) {
            Ok(o) => {
                ops += o.ops_executed();
                if let Outcome::Known { id, mismatch } = &o {
                    known.push(format!(
                        "{} → known divergence {id} at op #{}",
                        case.name, mismatch.index
                    ));
                }
            }
            Err(e) => failures.push(format!("case {} ({}): {e}", case.name, case.origin)),
        }
    }
    eprintln!(
        "fixed cases: {} cases, {ops} ops compared, {} known divergences, {} failures, {:?}",
        cases.len(),
        known.len(),
        failures.len(),
        t.elapsed()
    );
    for k in &known {
        eprintln!("  {k}");
    }
    if !failures.is_empty() {
        panic!(
            "{} of {} cases failed:\n\n{}",
            failures.len(),
            cases.len(),
            failures.join("\n\n")
        );
    }
}

// ---------------------------------------------------------------------------------------------
// LTP munmap04: a split at max_map_count
// ---------------------------------------------------------------------------------------------

/// Fill the address space with single-page mappings that cannot merge (alternating
/// protections) until mmap fails, then try a munmap that would split a 3-page mapping made
/// before: ENOMEM, nothing changed; unmapping a whole mapping still works; then an mprotect
/// split fails too. Both backends reach their limit after a different number of mappings (the
/// host process has its own), so the counts are not compared, only the outcomes.
fn max_map_count_outcome(b: &mut dyn AddressSpace) -> Vec<String> {
    const P: u64 = PAGE_SIZE;
    let rw = PROT_READ | PROT_WRITE;
    let base = ARENA_BASE + (1 << 30);
    let mut out = Vec::new();
    let three = base;
    out.push(format!("{}", b.apply(&Op::mmap_anon_at(three, 3 * P, rw))));
    let mut addr = base + 4 * P;
    let mut n = 0u64;
    loop {
        let prot = if n.is_multiple_of(2) { PROT_READ } else { rw };
        match b.apply(&Op::mmap_anon_at(addr, P, prot)) {
            OpResult::Ok(_) => {}
            OpResult::Err(e) => {
                out.push(format!("fill ended with {}", OpResult::Err(e)));
                break;
            }
            r => {
                out.push(format!("fill: {r}"));
                break;
            }
        }
        addr += P;
        n += 1;
        assert!(n < 200_000, "no mapping limit reached");
    }
    // At the limit (map_count == max_map_count + 1 after do_mmap's `>` check).
    out.push(format!(
        "{}",
        b.apply(&Op::Munmap {
            addr: three + P,
            len: P
        })
    ));
    out.push(format!(
        "{}",
        b.apply(&Op::Mprotect {
            addr: three + P,
            len: P,
            prot: PROT_READ
        })
    ));
    out.push(format!(
        "{}",
        b.apply(&Op::Munmap {
            addr: three,
            len: P
        })
    ));
    out.push(format!(
        "{}",
        b.apply(&Op::Munmap {
            addr: three + P,
            len: P
        })
    ));
    // Free a few: munmap of whole mappings always works.
    out.push(format!(
        "{}",
        b.apply(&Op::Munmap {
            addr: addr - 8 * P,
            len: 8 * P
        })
    ));
    out.push(format!(
        "{}",
        b.apply(&Op::mmap_anon_at(three, P, PROT_NONE))
    ));
    out.push(format!(
        "{}",
        b.apply(&Op::Munmap {
            addr: base,
            len: addr - base
        })
    ));
    out.push(format!("{}", b.apply(&Op::Maps)));
    out
}

#[test]
fn diff_max_map_count() {
    let t = Instant::now();
    let mut host = new_host();
    let m = machine();
    let mut engine = EngineBackend::on_machine(&m).unwrap();
    let h = max_map_count_outcome(host.as_mut());
    let e = max_map_count_outcome(&mut engine);
    engine.validate().unwrap();
    eprintln!(
        "max_map_count: host {h:?}\n               engine {e:?} ({:?})",
        t.elapsed()
    );
    assert_eq!(h, e);
    assert_eq!(h[1], format!("fill ended with {}", OpResult::Err(ENOMEM)));
    assert_eq!(
        h[2],
        OpResult::Err(ENOMEM).to_string(),
        "LTP munmap04: the split fails"
    );
}

// ---------------------------------------------------------------------------------------------
// Generated sequences
// ---------------------------------------------------------------------------------------------

mod gen {
    use proptest::prelude::*;
    use usermm_host::facts;

    use super::*;

    const P: u64 = PAGE_SIZE;
    const H: u64 = HPAGE_SIZE;
    /// The generated ops live in the first 16 MiB of the arena (8 huge pages).
    const WINDOW_PAGES: u64 = 4096;
    /// The busy spot: 48 pages around the first 2 MiB boundary of the window.
    const HOT: u64 = ARENA_BASE + H - 16 * P;

    /// The THP area: 4 MiB from the window's second 2 MiB boundary.
    const THP: u64 = ARENA_BASE + 2 * H;

    /// A page-aligned address in the window: mostly near the busy spot, in the THP area or on a
    /// 2 MiB boundary.
    fn page_addr() -> impl Strategy<Value = u64> {
        prop_oneof![
            8 => (0..48u64).prop_map(|i| HOT + i * P),
            5 => prop_oneof![
                2 => (0..1024u64).prop_map(|i| THP + i * P),
                1 => (0..3u64).prop_map(|k| THP + k * H),
                1 => (0..3u64, 0..24u64).prop_map(|(k, i)| THP + k * H + i * P - 8 * P),
            ],
            3 => (0..8u64, prop_oneof![3 => Just(0u64), 1 => 0..4u64]).prop_map(|(k, d)| ARENA_BASE + k * H + d * P),
            2 => (0..WINDOW_PAGES).prop_map(|i| ARENA_BASE + i * P),
        ]
    }

    /// Usually page aligned; sometimes off by a byte or half a page (errno paths).
    fn any_addr() -> impl Strategy<Value = u64> {
        (
            page_addr(),
            prop_oneof![19 => Just(0u64), 1 => Just(1u64), 1 => Just(0x800u64)],
        )
            .prop_map(|(a, d)| a + d)
    }

    /// A length: mostly a few pages, sometimes 2/4 MiB, sometimes unaligned or zero.
    fn length() -> impl Strategy<Value = u64> {
        prop_oneof![
            10 => (1..=8u64).prop_map(|n| n * P),
            4 => (9..=64u64).prop_map(|n| n * P),
            2 => prop_oneof![Just(H), Just(2 * H), Just(H + 16 * P)],
            2 => 1..3 * P,
            1 => Just(0u64),
        ]
    }

    /// Small lengths for mlock (RLIMIT_MEMLOCK of unprivileged CI users) and data ops.
    fn small_len() -> impl Strategy<Value = u64> {
        prop_oneof![4 => (1..=4u64).prop_map(|n| n * P), 2 => 1..(2 * P), 1 => Just(0u64)]
    }

    /// Protections: never PROT_EXEC alone (x86 protection keys make it host-dependent).
    fn prot() -> impl Strategy<Value = u32> {
        prop_oneof![
            2 => Just(PROT_NONE),
            4 => Just(PROT_READ),
            1 => Just(PROT_WRITE),
            8 => Just(PROT_READ | PROT_WRITE),
            1 => Just(PROT_READ | PROT_EXEC),
            1 => Just(PROT_READ | PROT_WRITE | PROT_EXEC),
        ]
    }

    fn mmap_op() -> impl Strategy<Value = Op> {
        let placement = prop_oneof![
            4 => Just(MAP_FIXED_NOREPLACE),
            3 => Just(MAP_FIXED),
            2 => Just(0u32), // a hint
        ];
        // MAP_GROWSDOWN only where the stack limit is the usual 8 MiB (the engine's
        // STACK_RLIMIT): how far a stack may grow depends on it.
        let grows = if default_stack_rlimit() {
            MAP_GROWSDOWN
        } else {
            0
        };
        let locked = if mlock_ok() { MAP_LOCKED } else { 0 };
        let extra = prop_oneof![
            20 => Just(0u32),
            2 => Just(MAP_POPULATE),
            2 => Just(MAP_NORESERVE),
            1 => Just(locked),
            1 => Just(grows),
        ];
        // Mostly private, sometimes shared, rarely MAP_SHARED_VALIDATE or no type at all.
        let ty = prop_oneof![40 => Just(MAP_PRIVATE), 3 => Just(MAP_SHARED), 1 => Just(MAP_SHARED_VALIDATE), 1 => Just(0u32)];
        let zero = prop_oneof![4 => Just(false), 1 => Just(true)];
        let off =
            prop_oneof![30 => Just(0u64), 20 => (0..64u64).prop_map(|k| k * P), 1 => Just(100u64)];
        let prot = prop_oneof![30 => prot(), 1 => Just(PROT_READ | 0x80)];
        (any_addr(), length(), prot, placement, extra, ty, zero, off).prop_map(
            |(addr, len, prot, placement, extra, ty, zero, off)| {
                // MAP_LOCKED only on small mappings (RLIMIT_MEMLOCK).
                let extra = if extra == MAP_LOCKED && len > 4 * P {
                    0
                } else {
                    extra
                };
                let (source, flags, offset) = if zero {
                    (MapSource::DevZero, ty | placement | extra, off)
                } else {
                    (MapSource::Anon, ty | MAP_ANONYMOUS | placement | extra, 0)
                };
                Op::Mmap(MmapArgs {
                    addr,
                    len,
                    prot,
                    flags,
                    source,
                    offset,
                })
            },
        )
    }

    fn advice() -> impl Strategy<Value = i32> {
        use libc::*;
        prop_oneof![
            6 => Just(MADV_DONTNEED),
            5 => Just(MADV_HUGEPAGE),
            2 => Just(MADV_NOHUGEPAGE),
            1 => Just(MADV_NORMAL),
            1 => Just(MADV_RANDOM),
            1 => Just(MADV_SEQUENTIAL),
            1 => Just(MADV_WILLNEED),
            1 => Just(MADV_FREE),
            1 => Just(MADV_DONTFORK),
            1 => Just(MADV_DOFORK),
            1 => Just(MADV_DONTDUMP),
            1 => Just(MADV_DODUMP),
            1 => Just(MADV_WIPEONFORK),
            1 => Just(MADV_KEEPONFORK),
            1 => Just(MADV_COLD),
            2 => Just(MADV_POPULATE_READ),
            2 => Just(MADV_POPULATE_WRITE),
            1 => Just(MADV_MERGEABLE),
            1 => Just(MADV_UNMERGEABLE),
            1 => Just(MADV_REMOVE),
            1 => Just(1212),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            22 => mmap_op(),
            10 => (any_addr(), length()).prop_map(|(addr, len)| Op::Munmap { addr, len }),
            14 => (any_addr(), length(), prop_oneof![12 => prot(), 1 => Just(0x80u32), 1 => Just(PROT_READ | 8)])
                .prop_map(|(addr, len, prot)| Op::Mprotect { addr, len, prot }),
            12 => (any_addr(), length(), advice()).prop_map(|(addr, len, advice)| Op::Madvise { addr, len, advice }),
            // (without the right to lock, a Counters op takes their place)
            2 => (any_addr(), small_len()).prop_map(|(addr, len)| if mlock_ok() {
                Op::Mlock { addr, len }
            } else {
                Op::Counters
            }),
            2 => (any_addr(), small_len()).prop_map(|(addr, len)| Op::Munlock { addr, len }),
            10 => (page_addr(), 0..P, prop_oneof![5 => small_len(), 1 => Just(H), 1 => Just(2 * H)])
                .prop_map(|(addr, d, len)| Op::Read { addr: addr + d, len }),
            10 => (page_addr(), 0..P, small_len(), any::<u8>())
                .prop_map(|(addr, d, len, b)| Op::Write {
                    addr: addr + d,
                    data: (0..len).map(|i| b.wrapping_add(i as u8 / 7)).collect(),
                }),
            6 => (page_addr(), prop_oneof![4 => (1..=64u64).prop_map(|n| n * P), 1 => Just(H)])
                .prop_map(|(addr, len)| Op::Probe { addr, len }),
            3 => Just(Op::Counters),
            7 => mremap_op(),
            2 => prop_oneof![
                4 => (0..64u64).prop_map(|n| Op::Brk { off: n * P }),
                2 => (0..(8 * P)).prop_map(|off| Op::Brk { off }),
                1 => Just(Op::Brk { off: BRK_QUERY }),
            ],
            2 => Just(Op::Fork),
            3 => (0..2u32).prop_map(|proc| Op::Switch { proc }),
            1 => Just(Op::Exit),
        ]
    }

    /// mremap: mostly moves inside the window (`MREMAP_FIXED`), grows and shrinks in place,
    /// sometimes `MREMAP_DONTUNMAP` or an invalid combination.
    fn mremap_op() -> impl Strategy<Value = Op> {
        let flags = prop_oneof![
            3 => Just(0u32),
            3 => Just(MREMAP_MAYMOVE),
            5 => Just(MREMAP_MAYMOVE | MREMAP_FIXED),
            2 => Just(MREMAP_MAYMOVE | MREMAP_DONTUNMAP),
            1 => Just(MREMAP_MAYMOVE | MREMAP_DONTUNMAP | MREMAP_FIXED),
            1 => Just(MREMAP_FIXED),
            1 => Just(8u32),
        ];
        let same = prop_oneof![1 => Just(true), 1 => Just(false)];
        (any_addr(), length(), length(), flags, page_addr(), same).prop_map(
            |(addr, old_len, new_len, flags, new_addr, same)| {
                let new_len = if same || flags & MREMAP_DONTUNMAP != 0 {
                    old_len
                } else {
                    new_len
                };
                Op::Mremap(MremapArgs {
                    addr,
                    old_len,
                    new_len,
                    flags,
                    new_addr,
                })
            },
        )
    }

    /// Mappings to start from, so that the random ops meet memory: a few in the busy spot and
    /// often a 4 MiB THP-eligible (MADV_HUGEPAGE) area.
    fn preamble() -> impl Strategy<Value = Vec<Op>> {
        let small = (
            0..40u64,
            1..=12u64,
            prop_oneof![4 => Just(PROT_READ | PROT_WRITE), 1 => prot()],
            prop_oneof![4 => Just(false), 1 => Just(true)],
        )
            .prop_map(|(i, n, prot, zero)| {
                if zero {
                    Op::mmap_dev_zero(HOT + i * P, n * P, prot, MAP_FIXED_NOREPLACE)
                } else {
                    Op::mmap_anon_at(HOT + i * P, n * P, prot)
                }
            });
        let thp = prop_oneof![
            1 => Just(Vec::new()),
            2 => (prop_oneof![3 => Just(false), 1 => Just(true)], 0..4u64, prop_oneof![2 => Just(0u64), 1 => 1..64u64])
                .prop_map(|(zero, part, d)| {
                    let map = if zero {
                        Op::mmap_dev_zero(THP, 2 * H, PROT_READ | PROT_WRITE, MAP_FIXED_NOREPLACE)
                    } else {
                        Op::mmap_anon_at(THP, 2 * H, PROT_READ | PROT_WRITE)
                    };
                    // Advise all of it, one half, or a range with ragged ends.
                    let (addr, len) = match part {
                        0 | 1 => (THP, 2 * H),
                        2 => (THP + H, H),
                        _ => (THP + d * P, 2 * H - 2 * d * P),
                    };
                    vec![map, Op::Madvise { addr, len, advice: MADV_HUGEPAGE }]
                }),
        ];
        (proptest::collection::vec(small, 1..=3), thp).prop_map(|(mut a, b)| {
            a.extend(b);
            a
        })
    }

    /// A preamble, then 20–40 random ops.
    /// May a sequence lock memory without meeting `RLIMIT_MEMLOCK` (which the engine does
    /// not model)? Root may lock anything; others need a limit far above what the generated
    /// mlocks (at most 4 pages per op) can add up to.
    fn mlock_ok() -> bool {
        facts::is_root() || facts::memlock_limit().is_some_and(|l| l >= 1 << 20)
    }

    /// Is `RLIMIT_STACK` (inherited by the host child) the engine's 8 MiB?
    fn default_stack_rlimit() -> bool {
        facts::stack_limit() == Some(usermm::mm::fault::STACK_RLIMIT)
    }

    pub fn sequence() -> impl Strategy<Value = Vec<Op>> {
        (preamble(), proptest::collection::vec(op(), 20..=40)).prop_map(|(mut a, b)| {
            a.extend(b);
            a
        })
    }
}

/// Totals over the generated tests of this process.
static SEQS: AtomicU64 = AtomicU64::new(0);
static OPS: AtomicU64 = AtomicU64::new(0);
static KNOWN_SEQS: AtomicU64 = AtomicU64::new(0);
static FLAKES: AtomicU64 = AtomicU64::new(0);

/// The proptest runner that draws test `name`'s `cases` sequences from its seed: the same
/// sequences, in the same order, for [`generated`] and [`diff_replay_generated`].
fn runner_for(name: &str, cases: u32) -> proptest::test_runner::TestRunner {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let seed = usermm_testscale::seed_for(name);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 400,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, rng)
}

/// Run `cases` (times `USERMM_TEST_SCALE`) generated sequences from test `name`'s seed; panic
/// with a minimised sequence, the replay line and the line that replays the failing sequence
/// alone (its number in the stream, for [`diff_replay_generated`]) on an unexplained
/// disagreement.
fn generated(name: &str, cases: u32) {
    use proptest::test_runner::TestCaseError;
    let t = Instant::now();
    usermm_testscale::announce(name);
    let cases = usermm_testscale::scaled_u32(cases);
    let mut runner = runner_for(name, cases);
    let m = machine();
    let opts = RunOptions::default();
    #[derive(Default)]
    struct Stats {
        seqs: u64,
        ops: u64,
        known: u64,
        flakes: u64,
        /// Host flakes per named cause (`divergences::HOST_NONDETERMINISM`).
        flake_causes: std::collections::BTreeMap<&'static str, u64>,
        known_ids: Vec<&'static str>,
        /// What the agreeing results exercised (for the report).
        coverage: std::collections::BTreeMap<String, u64>,
    }
    let stats = std::cell::RefCell::new(Stats::default());
    // Sequences drawn before the first failure (then proptest shrinks: no new draws).
    let drawn = std::cell::Cell::new(0usize);
    let first_failure = std::cell::Cell::new(None::<usize>);
    let short = name.rsplit('_').next().unwrap_or(name);
    let check = |seq: &[Op], count: bool| -> Result<Outcome, String> {
        let mut engine = EngineBackend::on_machine(&m).map_err(|e| e.to_string())?;
        let out = run_sequence(&mut || new_host(), &mut engine, seq, opts);
        engine
            .validate()
            .map_err(|e| format!("engine invariants: {e}"))?;
        drop(engine);
        if count {
            let mut st = stats.borrow_mut();
            st.seqs += 1;
            st.ops += out.ops_executed() as u64;
            match &out {
                Outcome::Known { id, .. } => {
                    st.known += 1;
                    if !st.known_ids.contains(id) {
                        st.known_ids.push(id);
                    }
                }
                Outcome::HostFlake { cause, mismatch } => {
                    st.flakes += 1;
                    *st.flake_causes.entry(cause).or_default() += 1;
                    eprintln!(
                        "host flake ({cause}; a fresh host agreed with the engine) in sequence \
                         {}; alone: {} {REPLAY_VAR}={short}:{}:100\n{mismatch}",
                        drawn.get().saturating_sub(1),
                        usermm_testscale::replay(),
                        drawn.get().saturating_sub(1),
                    );
                }
                Outcome::Agreed { results, .. } => {
                    for r in results {
                        let key = match r {
                            OpResult::Err(e) => format!("err {}", errno_name(*e).unwrap_or("?")),
                            OpResult::Fault { .. } => "fault".to_string(),
                            OpResult::Misplaced { .. } => "misplaced".to_string(),
                            OpResult::Counters(c) if c.anon_huge_kb > 0 => {
                                "counters with THP".to_string()
                            }
                            OpResult::Counters(c) if c.rss_kb > 0 => {
                                "counters with rss".to_string()
                            }
                            OpResult::Maps(l) if l.len() >= 4 => "maps >= 4 lines".to_string(),
                            OpResult::Maps(l) if l.iter().any(|l| l.path == "/dev/zero") => {
                                "maps with /dev/zero".to_string()
                            }
                            OpResult::Data(d) if d.iter().any(|&b| b != 0) => {
                                "data non-zero".to_string()
                            }
                            OpResult::Probe(p) if p.iter().any(|a| a.readable && !a.writable) => {
                                "probe read-only page".to_string()
                            }
                            _ => continue,
                        };
                        *st.coverage.entry(key).or_default() += 1;
                    }
                }
                _ => {}
            }
        }
        Ok(out)
    };
    let result = runner.run(&gen::sequence(), |seq| {
        if first_failure.get().is_none() {
            drawn.set(drawn.get() + 1);
        }
        let r = match check(&seq, true) {
            Ok(o) if o.acceptable() => Ok(()),
            Ok(Outcome::Diverged(m)) if m.replay_agreed => Err(TestCaseError::fail(format!(
                "{} (a fresh host agreed with the engine, and no named host cause matched: \
                 suspect a race of the harness)",
                m.diff
            ))),
            Ok(Outcome::Diverged(m)) => Err(TestCaseError::fail(m.diff.clone())),
            Ok(_) => unreachable!(),
            Err(e) => Err(TestCaseError::fail(e)),
        };
        if r.is_err() && first_failure.get().is_none() {
            first_failure.set(Some(drawn.get() - 1));
        }
        r
    });
    if let Err(e) = result {
        let (why, failing) = match &e {
            proptest::test_runner::TestError::Fail(why, v) => (why.to_string(), v.clone()),
            proptest::test_runner::TestError::Abort(r) => panic!("proptest aborted: {r}"),
        };
        // Shrink further by dropping ops while the disagreement persists.
        let minimal = minimize(&failing, &mut |cand| {
            matches!(check(cand, false), Ok(Outcome::Diverged(_)) | Err(_))
        });
        let detail = match check(&minimal, false) {
            Ok(Outcome::Diverged(m)) => m.to_string(),
            Ok(o) => format!("(no longer diverges: {o:?})"),
            Err(e) => e,
        };
        let alone = first_failure.get().map_or(String::new(), |i| {
            format!(
                "\nthe sequence that first failed, alone: {} {REPLAY_VAR}={short}:{i}:100 cargo test \
                 -p usermm-diff --test differential diff_replay_generated -- --ignored --nocapture",
                usermm_testscale::replay()
            )
        });
        panic!(
            "{name}: generated sequence diverged: {why}\n\nminimal sequence ({} ops):\n{}\n{detail}\nreplay: {}{alone}",
            minimal.len(),
            minimal.iter().map(|o| format!("  {o}")).collect::<Vec<_>>().join("\n"),
            usermm_testscale::replay(),
        );
    }
    let Stats {
        seqs,
        ops,
        known,
        flakes,
        flake_causes,
        known_ids,
        coverage,
    } = stats.into_inner();
    SEQS.fetch_add(seqs, Relaxed);
    OPS.fetch_add(ops, Relaxed);
    KNOWN_SEQS.fetch_add(known, Relaxed);
    FLAKES.fetch_add(flakes, Relaxed);
    eprintln!(
        "{name}: {seqs} sequences, {ops} ops compared, {known} ended on known \
         divergences {known_ids:?}, {flakes} host flakes {flake_causes:?}, {:?}",
        t.elapsed()
    );
    usermm_testscale::report(name, ops);
    eprintln!("  results seen: {coverage:?}");
    assert!(seqs >= u64::from(cases), "ran {seqs} of {cases} sequences");
    // Only named host causes count as flakes (runner.rs); even those may not dominate.
    assert!(
        flakes * 50 <= seqs,
        "too many host flakes: {flakes} in {seqs} {flake_causes:?}"
    );
}

/// Sequences each generated test draws (times `USERMM_TEST_SCALE`): 4 × 500 = 2 000 of 20–40
/// ops. [`diff_replay_generated`] draws the same stream.
const GENERATED_CASES: u32 = 500;

#[test]
fn diff_generated_a() {
    generated("differential::generated_a", GENERATED_CASES);
}

#[test]
fn diff_generated_b() {
    generated("differential::generated_b", GENERATED_CASES);
}

#[test]
fn diff_generated_c() {
    generated("differential::generated_c", GENERATED_CASES);
}

#[test]
fn diff_generated_d() {
    generated("differential::generated_d", GENERATED_CASES);
}

/// What [`diff_replay_generated`] replays: `TEST:CASE:TIMES`, e.g. `b:48:100`.
const REPLAY_VAR: &str = "USERMM_DIFF_REPLAY";

/// Not part of the suite (ignored): replay one generated sequence many times, to tell a host
/// flake or a race from an engine bug. `USERMM_DIFF_REPLAY=TEST:CASE:TIMES` names the test
/// (`a`..`d`), the sequence's number in its stream (from 0; a failure of `diff_generated_*`
/// prints it) and how often to run it; `USERMM_TEST_SEED` and `USERMM_TEST_SCALE` must be the
/// failing run's. Prints the sequence, every disagreement, and the count of each outcome; it
/// fails only if the engine's invariants break. Without `TIMES` it only prints the sequence;
/// with `CASE` empty (`b::`) it prints every sequence of the stream.
#[test]
#[ignore = "a tool: run with USERMM_DIFF_REPLAY=TEST:CASE:TIMES"]
fn diff_replay_generated() {
    let Ok(spec) = std::env::var(REPLAY_VAR) else {
        eprintln!("{REPLAY_VAR} unset: nothing to replay");
        return;
    };
    let mut it = spec.split(':');
    let (test, case, times) = (it.next(), it.next(), it.next());
    let name = format!("differential::generated_{}", test.unwrap_or("a"));
    let mut runner = runner_for(&name, usermm_testscale::scaled_u32(GENERATED_CASES));
    let seqs = std::cell::RefCell::new(Vec::new());
    // Draw the stream exactly as `generated` does (a passing run draws every case once).
    let _ = runner.run(&gen::sequence(), |seq| {
        seqs.borrow_mut().push(seq);
        Ok(())
    });
    let seqs = seqs.into_inner();
    let Some(i) = case.and_then(|c| c.parse::<usize>().ok()) else {
        for (i, seq) in seqs.iter().enumerate() {
            println!("{name} sequence {i} ({} ops):", seq.len());
            for (j, op) in seq.iter().enumerate() {
                println!("  #{j:<3} {op}");
            }
        }
        return;
    };
    let Some(seq) = seqs.get(i) else {
        panic!(
            "{name} draws {} sequences at this scale; there is no {i}",
            seqs.len()
        );
    };
    println!("{name} sequence {i} ({} ops):", seq.len());
    for (j, op) in seq.iter().enumerate() {
        println!("  #{j:<3} {op}");
    }
    let times: u32 = times.and_then(|t| t.parse().ok()).unwrap_or(0);
    let m = machine();
    let opts = RunOptions::default();
    let mut counts = std::collections::BTreeMap::<&str, u32>::new();
    for k in 0..times {
        let mut engine = EngineBackend::on_machine(&m).expect("engine backend");
        let out = run_sequence(&mut || new_host(), &mut engine, seq, opts);
        engine
            .validate()
            .unwrap_or_else(|e| panic!("replay {k}: engine invariants: {e}"));
        let kind = match &out {
            Outcome::Agreed { .. } => "agreed",
            Outcome::Known { id, .. } => id,
            Outcome::HostFlake { cause, mismatch } => {
                println!(
                    "replay {k}: host flake ({cause}; a fresh host agreed with the engine):\n{mismatch}"
                );
                cause
            }
            Outcome::Diverged(mismatch) => {
                println!("replay {k}: diverged:\n{mismatch}");
                "diverged"
            }
        };
        *counts.entry(kind).or_default() += 1;
    }
    println!("{name} sequence {i}: {times} replays: {counts:?}");
}
