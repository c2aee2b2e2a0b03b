//! The host backend against the real kernel: basics, probing, faults, crash handling and rows
//! of the errno oracle (docs/testing.md, "the errno oracle"). Every test name starts with `host_`.

use usermm_host::ops::*;
use usermm_host::HostBackend;

const P: u64 = PAGE_SIZE;
const RW: u32 = PROT_READ | PROT_WRITE;

fn host() -> HostBackend {
    HostBackend::new().expect("start host backend")
}

/// Arena address `n` pages in (tests keep away from the arena's last pages, used by warm-up).
fn at(n: u64) -> u64 {
    ARENA_BASE + n * P
}

fn maps(h: &mut HostBackend) -> Vec<MapsLine> {
    match h.apply(&Op::Maps) {
        OpResult::Maps(l) => normalize_maps(&l),
        r => panic!("maps: {r}"),
    }
}

fn maps_str(h: &mut HostBackend) -> Vec<String> {
    maps(h).iter().map(|l| l.to_string()).collect()
}

fn line(start: u64, end: u64, perms: &str) -> String {
    MapsLine::anon(start, end, perms).to_string()
}

fn ok(h: &mut HostBackend, op: Op) -> u64 {
    match h.apply(&op) {
        OpResult::Ok(v) => v,
        r => panic!("{op}: {r}"),
    }
}

fn errno(h: &mut HostBackend, op: Op) -> i32 {
    match h.apply(&op) {
        OpResult::Err(e) => e,
        r => panic!("{op}: expected an errno, got {r}"),
    }
}

fn probe(h: &mut HostBackend, addr: u64, len: u64) -> Vec<(bool, bool)> {
    match h.apply(&Op::Probe { addr, len }) {
        OpResult::Probe(p) => p.iter().map(|a| (a.readable, a.writable)).collect(),
        r => panic!("probe: {r}"),
    }
}

fn counters(h: &mut HostBackend) -> Counters {
    match h.apply(&Op::Counters) {
        OpResult::Counters(c) => c,
        r => panic!("counters: {r}"),
    }
}

#[test]
fn host_mmap_munmap_mprotect_basics() {
    let mut h = host();
    assert_eq!(h.name(), "host");
    assert!(maps(&mut h).is_empty());
    let a = at(16);
    assert_eq!(ok(&mut h, Op::mmap_anon_at(a, 4 * P, RW)), a);
    assert_eq!(maps_str(&mut h), vec![line(a, a + 4 * P, "rw-p")]);

    // Data round trip, across a page boundary.
    let data: Vec<u8> = (0..300u32).map(|i| i as u8 ^ 0x5a).collect();
    let w = Op::Write {
        addr: a + P - 100,
        data: data.clone(),
    };
    assert_eq!(h.apply(&w), OpResult::Ok(300));
    assert_eq!(
        h.apply(&Op::Read {
            addr: a + P - 100,
            len: 300
        }),
        OpResult::Data(data)
    );
    // Untouched memory reads as zeroes; a zero-length read is empty.
    assert_eq!(
        h.apply(&Op::Read {
            addr: a + 3 * P,
            len: 16
        }),
        OpResult::Data(vec![0; 16])
    );
    assert_eq!(
        h.apply(&Op::Read { addr: a, len: 0 }),
        OpResult::Data(vec![])
    );

    // mprotect the middle: three VMAs.
    assert_eq!(
        ok(
            &mut h,
            Op::Mprotect {
                addr: a + P,
                len: 2 * P,
                prot: PROT_READ
            }
        ),
        0
    );
    assert_eq!(
        maps_str(&mut h),
        vec![
            line(a, a + P, "rw-p"),
            line(a + P, a + 3 * P, "r--p"),
            line(a + 3 * P, a + 4 * P, "rw-p"),
        ]
    );
    // And back: they merge again.
    ok(
        &mut h,
        Op::Mprotect {
            addr: a + P,
            len: 2 * P,
            prot: RW,
        },
    );
    assert_eq!(maps_str(&mut h), vec![line(a, a + 4 * P, "rw-p")]);

    // Partial munmap splits; full munmap empties the arena.
    ok(
        &mut h,
        Op::Munmap {
            addr: a + P,
            len: P,
        },
    );
    assert_eq!(
        maps_str(&mut h),
        vec![line(a, a + P, "rw-p"), line(a + 2 * P, a + 4 * P, "rw-p")]
    );
    assert_eq!(
        h.apply(&Op::Read {
            addr: a + P,
            len: 1
        }),
        OpResult::Fault { addr: a + P }
    );
    ok(
        &mut h,
        Op::Munmap {
            addr: a,
            len: 4 * P,
        },
    );
    assert!(maps(&mut h).is_empty());
}

#[test]
fn host_non_fixed_placement() {
    let mut h = host();
    // A free hint inside the arena is honoured.
    let hint = at(64);
    assert_eq!(ok(&mut h, Op::mmap_anon(hint, 3 * P, RW, 0)), hint);
    // No hint: the kernel picks a place outside the arena; the backend removes it.
    match h.apply(&Op::mmap_anon(0, 3 * P, RW, 0)) {
        OpResult::Misplaced { addr } => assert!(!(ARENA_BASE..ARENA_END).contains(&addr)),
        r => panic!("expected Misplaced, got {r}"),
    }
    assert_eq!(maps_str(&mut h), vec![line(hint, hint + 3 * P, "rw-p")]);
}

#[test]
fn host_probe_read_only_and_none() {
    let mut h = host();
    let a = at(8);
    ok(&mut h, Op::mmap_anon_at(a, 3 * P, RW));
    ok(
        &mut h,
        Op::Mprotect {
            addr: a + P,
            len: P,
            prot: PROT_READ,
        },
    );
    ok(
        &mut h,
        Op::Mprotect {
            addr: a + 2 * P,
            len: P,
            prot: PROT_NONE,
        },
    );
    // The last page is past the mapping: unmapped.
    assert_eq!(
        probe(&mut h, a + 10, 4 * P - 20),
        vec![(true, true), (true, false), (false, false), (false, false)]
    );
    match h.apply(&Op::Probe { addr: a, len: P }) {
        OpResult::Probe(p) => assert_eq!(
            p,
            vec![PageAccess {
                addr: a,
                readable: true,
                writable: true
            }]
        ),
        r => panic!("{r}"),
    }
    assert_eq!(
        h.apply(&Op::Probe { addr: a, len: 0 }),
        OpResult::Probe(vec![])
    );
}

#[test]
fn host_probe_keeps_data() {
    let mut h = host();
    let a = at(0);
    ok(&mut h, Op::mmap_anon_at(a, 2 * P, RW));
    let data = vec![0xa7u8; 2 * P as usize];
    ok(
        &mut h,
        Op::Write {
            addr: a,
            data: data.clone(),
        },
    );
    ok(
        &mut h,
        Op::Mprotect {
            addr: a + P,
            len: P,
            prot: PROT_READ,
        },
    );
    assert_eq!(probe(&mut h, a, 2 * P), vec![(true, true), (true, false)]);
    assert_eq!(
        h.apply(&Op::Read {
            addr: a,
            len: 2 * P
        }),
        OpResult::Data(data)
    );
}

/// Forks after which the current process at once reads a patterned 2 MiB back: every byte must
/// be its own. Regression (h48, `diff_generated_b` seed 0x43f528565c8e08bd): the two processes
/// shared the loopback pipe, and the new one's rewarm (a load and a store of one byte per page
/// of its stack, through that pipe) ran while the old one served the next request, so either
/// could take the other's bytes: a read came back with one foreign byte (often 0x7f, one of
/// the new process's stack) at the start of a page and the rest of the pipe's contents one
/// byte late.
/// Each round forks, reads, and lets the new process exit again, 20 rounds on each of 5
/// backends: before the fix 16, 18 and 19 of the 100 reads were mixed in three runs on a 2-core
/// host (0.3 s a run), so a return of the race cannot pass unseen.
#[test]
fn host_fork_then_read_gets_only_its_own_bytes() {
    const LEN: u64 = 2 << 20;
    const BACKENDS: u32 = 5;
    const ROUNDS: u32 = 20;
    let pattern: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8 | 1).collect();
    let a = at(512);
    let mut mixed = Vec::new();
    for b in 0..BACKENDS {
        let mut h = host();
        ok(&mut h, Op::mmap_anon_at(a, LEN, RW));
        ok(
            &mut h,
            Op::Write {
                addr: a,
                data: pattern.clone(),
            },
        );
        for round in 0..ROUNDS {
            assert_eq!(ok(&mut h, Op::Fork), 1, "backend {b} round {round}");
            match h.apply(&Op::Read { addr: a, len: LEN }) {
                OpResult::Data(d) if d == pattern => {}
                OpResult::Data(d) => {
                    let first = d.iter().zip(&pattern).position(|(x, y)| x != y).unwrap();
                    mixed.push(format!(
                        "backend {b} round {round}: offset {first:#x}: {:#04x}, expected {:#04x}",
                        d[first], pattern[first]
                    ));
                }
                r => panic!("backend {b} round {round}: read after fork: {r}"),
            }
            // The new process exits; process 0 is current again.
            ok(&mut h, Op::Switch { proc: 1 });
            assert_eq!(ok(&mut h, Op::Exit), 0, "backend {b} round {round}");
        }
    }
    assert!(
        mixed.is_empty(),
        "{} of {} reads mixed: {mixed:#?}",
        mixed.len(),
        BACKENDS * ROUNDS
    );
}

#[test]
fn host_write_to_prot_none_faults_and_child_survives() {
    let mut h = host();
    let a = at(32);
    ok(&mut h, Op::mmap_anon_at(a, 2 * P, RW));
    ok(
        &mut h,
        Op::Mprotect {
            addr: a + P,
            len: P,
            prot: PROT_NONE,
        },
    );
    assert_eq!(
        h.apply(&Op::Write {
            addr: a + P + 8,
            data: vec![1, 2, 3]
        }),
        OpResult::Fault { addr: a + P + 8 }
    );
    // A write across the boundary stores the first page's part, then faults.
    assert_eq!(
        h.apply(&Op::Write {
            addr: a + P - 2,
            data: vec![9; 4]
        }),
        OpResult::Fault { addr: a + P }
    );
    assert_eq!(
        h.apply(&Op::Read {
            addr: a + P - 4,
            len: 4
        }),
        OpResult::Data(vec![0, 0, 9, 9])
    );
    assert_eq!(
        h.apply(&Op::Read {
            addr: a + P - 4,
            len: 8
        }),
        OpResult::Fault { addr: a + P }
    );
    // Writing to a read-only page faults too.
    ok(
        &mut h,
        Op::Mprotect {
            addr: a,
            len: P,
            prot: PROT_READ,
        },
    );
    assert_eq!(
        h.apply(&Op::Write {
            addr: a,
            data: vec![1]
        }),
        OpResult::Fault { addr: a }
    );
    // The child is alive and well.
    assert_eq!(h.failure(), None);
    assert_eq!(
        maps_str(&mut h),
        vec![line(a, a + P, "r--p"), line(a + P, a + 2 * P, "---p")]
    );
}

#[test]
fn host_child_crash_is_a_backend_failure() {
    let mut h = host();
    let pid = h.pid();
    // Unmapping the whole user address space takes the child's code and stack away.
    let r = h.apply(&Op::Munmap {
        addr: 0,
        len: 0x7fff_ffff_f000,
    });
    match &r {
        OpResult::BackendFailure(m) => assert!(m.contains(&pid.to_string()), "{m}"),
        r => panic!("expected a backend failure, got {r}"),
    }
    assert!(h.failure().is_some());
    // Every later op fails the same way, without panicking.
    assert!(h.apply(&Op::Maps).is_backend_failure());
}

#[test]
fn host_dev_zero_mappings_do_not_merge() {
    let mut h = host();
    let a = at(100);
    for i in 0..4 {
        let op = Op::mmap_dev_zero(a + i * 10 * P, 10 * P, RW, MAP_FIXED_NOREPLACE);
        assert_eq!(ok(&mut h, op), a + i * 10 * P);
    }
    let m = maps(&mut h);
    assert_eq!(m.len(), 4, "{m:?}");
    assert!(m.iter().all(|l| l.path == "/dev/zero" && l.perms == "rw-p"));
    // Anonymous ones do.
    let b = at(200);
    for i in 0..4 {
        ok(&mut h, Op::mmap_anon_at(b + i * 10 * P, 10 * P, RW));
    }
    assert_eq!(maps(&mut h).len(), 5);
}

#[test]
fn host_counters_count_arena_faults() {
    let mut h = host();
    let c0 = counters(&mut h);
    assert_eq!((c0.rss_kb, c0.anon_huge_kb), (0, 0));
    assert!(c0.process_rss_kb > 0);
    let a = at(512);
    ok(&mut h, Op::mmap_anon_at(a, 16 * P, RW));
    ok(
        &mut h,
        Op::Madvise {
            addr: a,
            len: 16 * P,
            advice: MADV_NOHUGEPAGE,
        },
    );
    // Reads map the zero page: faults, no Rss.
    assert_eq!(
        h.apply(&Op::Read {
            addr: a,
            len: 4 * P
        }),
        OpResult::Data(vec![0; 4 * P as usize])
    );
    let c1 = counters(&mut h);
    assert_eq!(c1.rss_kb, 0, "{c1:?}");
    // Writes allocate: 8 pages = 32 kB.
    ok(
        &mut h,
        Op::Write {
            addr: a + 8 * P,
            data: vec![1; 8 * P as usize],
        },
    );
    let c2 = counters(&mut h);
    assert_eq!(c2.rss_kb, 32, "{c2:?}");
    let read_faults = c1.minor_faults - c0.minor_faults;
    let write_faults = c2.minor_faults - c1.minor_faults;
    eprintln!("host counters: {c0:?} {c1:?} {c2:?}");
    assert_eq!(read_faults, 4, "{c0:?} {c1:?}");
    assert_eq!(write_faults, 8, "{c1:?} {c2:?}");
    ok(
        &mut h,
        Op::Madvise {
            addr: a,
            len: 16 * P,
            advice: MADV_DONTNEED,
        },
    );
    assert_eq!(counters(&mut h).rss_kb, 0);
}

// ---------------------------------------------------------------------------------------------
// Errno oracle rows (docs/testing.md, "the errno oracle")
// ---------------------------------------------------------------------------------------------

#[test]
fn host_oracle_munmap() {
    let mut h = host();
    let a = at(4);
    // len == 0 → EINVAL; unaligned addr → EINVAL.
    assert_eq!(errno(&mut h, Op::Munmap { addr: a, len: 0 }), EINVAL);
    assert_eq!(
        errno(
            &mut h,
            Op::Munmap {
                addr: a + 1,
                len: P
            }
        ),
        EINVAL
    );
    // Nothing mapped / addr 0 → OK.
    assert_eq!(ok(&mut h, Op::Munmap { addr: a, len: P }), 0);
    assert_eq!(ok(&mut h, Op::Munmap { addr: 0, len: P }), 0);
    // Crossing TASK_SIZE / overflowing → EINVAL. (2^56 - 4 KiB is TASK_SIZE with 5-level page
    // tables and above it with 4-level ones: the row holds on both.)
    assert_eq!(
        errno(
            &mut h,
            Op::Munmap {
                addr: (1 << 56) - P,
                len: 1 << 20
            }
        ),
        EINVAL
    );
    assert_eq!(
        errno(
            &mut h,
            Op::Munmap {
                addr: a,
                len: u64::MAX - P
            }
        ),
        EINVAL
    );
    // Unaligned len is rounded up.
    ok(&mut h, Op::mmap_anon_at(a, 3 * P, RW));
    ok(
        &mut h,
        Op::Munmap {
            addr: a,
            len: P + 1,
        },
    );
    assert_eq!(maps_str(&mut h), vec![line(a + 2 * P, a + 3 * P, "rw-p")]);
}

#[test]
fn host_oracle_mmap() {
    let mut h = host();
    let a = at(4);
    let anon = MAP_PRIVATE | MAP_ANONYMOUS;
    let mm = |addr, len, prot, flags, offset| {
        Op::Mmap(MmapArgs {
            addr,
            len,
            prot,
            flags,
            source: MapSource::Anon,
            offset,
        })
    };
    // len 0; MAP_FIXED unaligned; unaligned offset → EINVAL.
    assert_eq!(errno(&mut h, mm(a, 0, RW, anon, 0)), EINVAL);
    assert_eq!(errno(&mut h, mm(a + 1, P, RW, anon | MAP_FIXED, 0)), EINVAL);
    assert_eq!(errno(&mut h, mm(a, P, RW, anon | MAP_FIXED, 1)), EINVAL);
    // Neither private nor shared; anonymous SHARED_VALIDATE → EINVAL.
    assert_eq!(errno(&mut h, mm(a, P, RW, MAP_ANONYMOUS, 0)), EINVAL);
    assert_eq!(
        errno(&mut h, mm(a, P, RW, MAP_SHARED_VALIDATE | MAP_ANONYMOUS, 0)),
        EINVAL
    );
    // Huge lengths → ENOMEM.
    assert_eq!(errno(&mut h, mm(a, 1 << 62, RW, anon, 0)), ENOMEM);
    assert_eq!(
        errno(&mut h, mm(a, 0u64.wrapping_sub(P), RW, anon, 0)),
        ENOMEM
    );
    // MAP_FIXED above TASK_SIZE (for 4- and 5-level page tables alike) → ENOMEM.
    assert_eq!(
        errno(&mut h, mm(1 << 56, P, RW, anon | MAP_FIXED, 0)),
        ENOMEM
    );
    // A file mapping with a bad fd (anon source without MAP_ANONYMOUS) → EBADF.
    assert_eq!(errno(&mut h, mm(a, P, RW, MAP_PRIVATE, 0)), EBADF);
    // MAP_FIXED below mmap_min_addr → EPERM unprivileged (OK for root).
    match h.apply(&mm(P, P, RW, anon | MAP_FIXED, 0)) {
        OpResult::Err(e) => assert_eq!(e, EPERM),
        OpResult::Ok(v) => {
            assert_eq!(v, P);
            ok(&mut h, Op::Munmap { addr: P, len: P });
        }
        r => panic!("{r}"),
    }
    // Unknown prot bits are accepted by mmap (and refused by mprotect).
    assert_eq!(
        ok(&mut h, mm(a, P, RW | 0x80, anon | MAP_FIXED_NOREPLACE, 0)),
        a
    );
    assert_eq!(
        errno(
            &mut h,
            Op::Mprotect {
                addr: a,
                len: P,
                prot: RW | 0x80
            }
        ),
        EINVAL
    );
    ok(&mut h, Op::Munmap { addr: a, len: P });

    // MAP_FIXED_NOREPLACE over a mapping, full or partial overlap → EEXIST.
    let b = at(40);
    ok(&mut h, Op::mmap_anon_at(b, 4 * P, RW));
    assert_eq!(errno(&mut h, Op::mmap_anon_at(b, 4 * P, RW)), EEXIST);
    assert_eq!(
        errno(&mut h, Op::mmap_anon_at(b + 3 * P, 2 * P, RW)),
        EEXIST
    );
    assert_eq!(errno(&mut h, Op::mmap_anon_at(b - P, 2 * P, RW)), EEXIST);
    assert_eq!(errno(&mut h, Op::mmap_anon_at(b + P, P, PROT_READ)), EEXIST);

    // MAP_FIXED over a mapping: OK, old contents gone, VMA split [rw][r][rw].
    ok(
        &mut h,
        Op::Write {
            addr: b + P,
            data: vec![7; 8],
        },
    );
    assert_eq!(
        ok(&mut h, mm(b + P, P, PROT_READ, anon | MAP_FIXED, 0)),
        b + P
    );
    assert_eq!(
        h.apply(&Op::Read {
            addr: b + P,
            len: 8
        }),
        OpResult::Data(vec![0; 8])
    );
    assert_eq!(
        maps_str(&mut h),
        vec![
            line(b, b + P, "rw-p"),
            line(b + P, b + 2 * P, "r--p"),
            line(b + 2 * P, b + 4 * P, "rw-p"),
        ]
    );
}

#[test]
fn host_oracle_mprotect() {
    let mut h = host();
    let a = at(4);
    // Unaligned → EINVAL; len 0 → OK; nothing mapped / addr 0 → ENOMEM.
    ok(&mut h, Op::mmap_anon_at(a, P, RW));
    let mp = |addr, len, prot| Op::Mprotect { addr, len, prot };
    assert_eq!(errno(&mut h, mp(a + 1, P, PROT_READ)), EINVAL);
    assert_eq!(ok(&mut h, mp(a, 0, PROT_READ)), 0);
    assert_eq!(errno(&mut h, mp(at(1000), P, PROT_READ)), ENOMEM);
    assert_eq!(errno(&mut h, mp(0, P, PROT_READ)), ENOMEM);
    ok(&mut h, Op::Munmap { addr: a, len: P });

    // Hole in the middle: [rw][hole][r] → ENOMEM, the head IS changed, the tail is not.
    let b = at(20);
    ok(&mut h, Op::mmap_anon_at(b, P, RW));
    ok(&mut h, Op::mmap_anon_at(b + 2 * P, P, PROT_READ));
    assert_eq!(errno(&mut h, mp(b, 3 * P, PROT_NONE)), ENOMEM);
    assert_eq!(
        maps_str(&mut h),
        vec![line(b, b + P, "---p"), line(b + 2 * P, b + 3 * P, "r--p")]
    );

    // First page unmapped → ENOMEM, nothing changed.
    let c = at(40);
    ok(&mut h, Op::mmap_anon_at(c + P, P, RW));
    assert_eq!(errno(&mut h, mp(c, 2 * P, PROT_READ)), ENOMEM);
    assert!(maps_str(&mut h).contains(&line(c + P, c + 2 * P, "rw-p")));

    // Tail past the last VMA → ENOMEM, the mapped head IS changed.
    let d = at(60);
    ok(&mut h, Op::mmap_anon_at(d, P, RW));
    assert_eq!(errno(&mut h, mp(d, 2 * P, PROT_READ)), ENOMEM);
    assert!(maps_str(&mut h).contains(&line(d, d + P, "r--p")));

    // Spanning two adjacent VMAs: OK, and they merge.
    let e = at(80);
    ok(&mut h, Op::mmap_anon_at(e, P, RW));
    ok(&mut h, Op::mmap_anon_at(e + P, P, PROT_READ));
    assert_eq!(ok(&mut h, mp(e, 2 * P, PROT_READ)), 0);
    assert!(maps_str(&mut h).contains(&line(e, e + 2 * P, "r--p")));
}

#[test]
fn host_oracle_madvise() {
    let mut h = host();
    let a = at(4);
    let md = |addr, len, advice| Op::Madvise { addr, len, advice };
    ok(&mut h, Op::mmap_anon_at(a, 3 * P, RW));
    // Unaligned start, unknown advice, len overflow → EINVAL; len 0 → OK.
    assert_eq!(errno(&mut h, md(a + 1, P, MADV_NORMAL)), EINVAL);
    assert_eq!(errno(&mut h, md(a, P, 1212)), EINVAL);
    assert_eq!(errno(&mut h, md(a, u64::MAX, MADV_NORMAL)), EINVAL);
    assert_eq!(ok(&mut h, md(a, 0, MADV_DONTNEED)), 0);
    // Fully unmapped → ENOMEM for every advice.
    for adv in [
        MADV_NORMAL,
        MADV_WILLNEED,
        MADV_DONTNEED,
        MADV_FREE,
        MADV_HUGEPAGE,
    ] {
        assert_eq!(errno(&mut h, md(at(500), P, adv)), ENOMEM, "advice {adv}");
    }

    // DONTNEED with a hole in the middle → ENOMEM, and both sides are zapped.
    ok(
        &mut h,
        Op::Write {
            addr: a,
            data: vec![0xee; 3 * P as usize],
        },
    );
    ok(
        &mut h,
        Op::Munmap {
            addr: a + P,
            len: P,
        },
    );
    assert_eq!(errno(&mut h, md(a, 3 * P, MADV_DONTNEED)), ENOMEM);
    for page in [a, a + 2 * P] {
        assert_eq!(
            h.apply(&Op::Read { addr: page, len: P }),
            OpResult::Data(vec![0; P as usize]),
            "page {page:#x} not zapped"
        );
    }
    // Holes at the start and at the end: same.
    ok(
        &mut h,
        Op::Write {
            addr: a,
            data: vec![0xee; P as usize],
        },
    );
    assert_eq!(errno(&mut h, md(a - P, 2 * P, MADV_DONTNEED)), ENOMEM);
    assert_eq!(
        h.apply(&Op::Read { addr: a, len: 4 }),
        OpResult::Data(vec![0; 4])
    );
    ok(
        &mut h,
        Op::Write {
            addr: a + 2 * P,
            data: vec![0xee; P as usize],
        },
    );
    assert_eq!(errno(&mut h, md(a + 2 * P, 2 * P, MADV_DONTNEED)), ENOMEM);
    assert_eq!(
        h.apply(&Op::Read {
            addr: a + 2 * P,
            len: 4
        }),
        OpResult::Data(vec![0; 4])
    );
}

/// RLIMIT_MEMLOCK (soft) in bytes, from /proc/self/limits; `None` for unlimited.
#[test]
fn host_oracle_mlock() {
    if usermm_host::facts::memlock_limit().is_some_and(|l| l < P) {
        eprintln!("RLIMIT_MEMLOCK below one page: mlock fails with EPERM first; skipped");
        return;
    }
    let mut h = host();
    let a = at(4);
    ok(&mut h, Op::mmap_anon_at(a, P, RW));
    // Any unmapped page in the range → ENOMEM.
    assert_eq!(
        errno(
            &mut h,
            Op::Mlock {
                addr: a,
                len: 2 * P
            }
        ),
        ENOMEM
    );
    assert_eq!(
        errno(
            &mut h,
            Op::Munlock {
                addr: a,
                len: 2 * P
            }
        ),
        ENOMEM
    );
    assert_eq!(ok(&mut h, Op::Mlock { addr: a, len: P }), 0);
    assert_eq!(ok(&mut h, Op::Munlock { addr: a, len: P }), 0);
}

#[test]
fn host_maps_lines_round_trip_display() {
    // Every line of this process's own maps parses and renders back byte for byte.
    let text = std::fs::read_to_string("/proc/self/maps").unwrap();
    let lines = parse_maps(&text).unwrap();
    assert!(lines.len() > 5);
    for (l, parsed) in text.lines().zip(&lines) {
        assert_eq!(parsed.to_string(), l);
    }
    // And the arena lines the host backend returns render like the kernel's.
    let mut h = host();
    let a = at(7);
    ok(&mut h, Op::mmap_dev_zero(a, 2 * P, PROT_READ, MAP_FIXED));
    match h.apply(&Op::Maps) {
        OpResult::Maps(l) => {
            assert_eq!(l.len(), 1);
            assert_eq!(l[0].path, "/dev/zero");
            assert_eq!(l[0].to_string().parse::<MapsLine>().unwrap(), l[0]);
        }
        r => panic!("{r}"),
    }
}
