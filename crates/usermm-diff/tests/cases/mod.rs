//! The fixed differential cases: op sequences run on the host kernel and on the engine, compared
//! step by step by `usermm_diff::runner`, plus what the oracle says some results must be.
//!
//! Sources (all written here from the documented semantics; no test code was copied):
//! * every row of the errno/edge-case oracle of `docs/testing.md` ("the errno oracle") that needs no file (mmap,
//!   munmap, mprotect, madvise, mlock) and its zero-page/THP facts;
//! * LTP-style cases (`docs/testing.md`): mmap04/06/15/17/19/20, munmap03/04,
//!   mprotect01/05, madvise02/03/10 (their semantics, re-expressed as ops);
//! * VMA merge and split scenarios in the manner of the kernel selftests' `merge.c`;
//! * THP placement of 2 MiB-multiple anonymous mappings;
//! * fork, mremap and brk (`addrspace.rs`).
//!
//! A case is a list of ops and a list of expectations on the *host's* results (the engine must
//! agree with the host anyway). Expectations are written only for facts that hold on any 6.x
//! host the suite may run on (no root-only behaviour, no dependence on a CPU feature).

use libc::{
    MADV_DODUMP, MADV_DOFORK, MADV_DONTDUMP, MADV_DONTFORK, MADV_KEEPONFORK, MADV_MERGEABLE,
    MADV_REMOVE, MADV_UNMERGEABLE, MADV_WIPEONFORK,
};
use usermm_diff::ops::*;

mod addrspace;

/// A page.
pub const P: u64 = PAGE_SIZE;
/// 2 MiB.
pub const H: u64 = HPAGE_SIZE;
/// The highest page-aligned `u64`.
const MAX_PAGE: u64 = 0u64.wrapping_sub(P);

/// `TASK_SIZE` of x86-64 with 4-level paging.
pub const TASK_SIZE: u64 = (1 << 47) - P;

const RW: u32 = PROT_READ | PROT_WRITE;
const R: u32 = PROT_READ;

/// Arena address `n` pages in.
pub const fn a(n: u64) -> u64 {
    ARENA_BASE + n * P
}

/// Arena address `n` huge pages in.
pub const fn h(n: u64) -> u64 {
    ARENA_BASE + n * H
}

/// What the host's result of one op must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    Ok(u64),
    Err(i32),
    /// `Data` with every byte equal to this value.
    Bytes(u8),
    /// Exactly this data.
    Data(Vec<u8>),
    Fault(u64),
    /// The normalised arena maps lines, rendered (`MapsLine` display, dev/inode zero).
    Maps(Vec<String>),
    /// Per page (readable, writable).
    Probe(Vec<(bool, bool)>),
    /// `Misplaced` at an address aligned to this many bytes.
    MisplacedAligned(u64),
    /// Some counters: `None` fields are not checked.
    Counters {
        minor_faults: Option<u64>,
        rss_kb: Option<u64>,
        anon_huge_kb: Option<u64>,
    },
}

impl Expect {
    /// `Ok(())` if `r` satisfies the expectation.
    pub fn check(&self, r: &OpResult) -> Result<(), String> {
        let ok = match (self, r) {
            (Expect::Ok(v), OpResult::Ok(x)) => v == x,
            (Expect::Err(e), OpResult::Err(x)) => e == x,
            (Expect::Bytes(b), OpResult::Data(d)) => d.iter().all(|x| x == b),
            (Expect::Data(v), OpResult::Data(d)) => v == d,
            (Expect::Fault(a), OpResult::Fault { addr }) => a == addr,
            (Expect::Maps(want), OpResult::Maps(l)) => {
                let got: Vec<String> = normalize_maps(l).iter().map(|l| l.to_string()).collect();
                &got == want
            }
            (Expect::Probe(want), OpResult::Probe(p)) => {
                let got: Vec<(bool, bool)> = p.iter().map(|x| (x.readable, x.writable)).collect();
                &got == want
            }
            (Expect::MisplacedAligned(al), OpResult::Misplaced { addr }) => addr % al == 0,
            (
                Expect::Counters {
                    minor_faults,
                    rss_kb,
                    anon_huge_kb,
                },
                OpResult::Counters(c),
            ) => {
                minor_faults.is_none_or(|v| v == c.minor_faults)
                    && rss_kb.is_none_or(|v| v == c.rss_kb)
                    && anon_huge_kb.is_none_or(|v| v == c.anon_huge_kb)
            }
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(format!("expected {self:?}, got {r}"))
        }
    }
}

/// One fixed case.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: &'static str,
    /// Where the case comes from (an oracle row, an LTP test, a selftest scenario).
    pub origin: &'static str,
    pub ops: Vec<Op>,
    /// `(index into ops, expectation on the host's result)`.
    pub expect: Vec<(usize, Expect)>,
}

/// Builds one [`Case`].
#[derive(Debug)]
pub(crate) struct B {
    case: Case,
}

impl B {
    pub(crate) fn op(&mut self, op: Op) -> &mut Self {
        self.case.ops.push(op);
        self
    }

    pub(crate) fn expect(&mut self, e: Expect) -> &mut Self {
        let i = self.case.ops.len() - 1;
        self.case.expect.push((i, e));
        self
    }

    pub(crate) fn ok(&mut self, v: u64) -> &mut Self {
        self.expect(Expect::Ok(v))
    }

    pub(crate) fn err(&mut self, e: i32) -> &mut Self {
        self.expect(Expect::Err(e))
    }

    /// `MAP_FIXED_NOREPLACE` private anonymous mapping of `pages` at `addr`, expected to work.
    pub(crate) fn map(&mut self, addr: u64, pages: u64, prot: u32) -> &mut Self {
        self.op(Op::mmap_anon_at(addr, pages * P, prot)).ok(addr)
    }

    /// `MAP_FIXED_NOREPLACE` private `/dev/zero` mapping at byte offset `off`.
    pub(crate) fn map_zero(&mut self, addr: u64, pages: u64, prot: u32, off: u64) -> &mut Self {
        self.op(Op::Mmap(MmapArgs {
            addr,
            len: pages * P,
            prot,
            flags: MAP_PRIVATE | MAP_FIXED_NOREPLACE,
            source: MapSource::DevZero,
            offset: off,
        }))
        .ok(addr)
    }

    pub(crate) fn munmap(&mut self, addr: u64, len: u64) -> &mut Self {
        self.op(Op::Munmap { addr, len })
    }

    pub(crate) fn mprotect(&mut self, addr: u64, len: u64, prot: u32) -> &mut Self {
        self.op(Op::Mprotect { addr, len, prot })
    }

    pub(crate) fn madvise(&mut self, addr: u64, len: u64, advice: i32) -> &mut Self {
        self.op(Op::Madvise { addr, len, advice })
    }

    pub(crate) fn write(&mut self, addr: u64, len: u64, byte: u8) -> &mut Self {
        self.op(Op::Write {
            addr,
            data: vec![byte; len as usize],
        })
    }

    pub(crate) fn read(&mut self, addr: u64, len: u64) -> &mut Self {
        self.op(Op::Read { addr, len })
    }

    pub(crate) fn probe(&mut self, addr: u64, len: u64) -> &mut Self {
        self.op(Op::Probe { addr, len })
    }

    pub(crate) fn maps(&mut self, lines: &[(u64, u64, &str)]) -> &mut Self {
        self.op(Op::Maps).expect(Expect::Maps(
            lines
                .iter()
                .map(|&(s, e, p)| MapsLine::anon(s, e, p).to_string())
                .collect(),
        ))
    }

    /// Maps lines given fully (for `/dev/zero` lines).
    pub(crate) fn maps_lines(&mut self, lines: Vec<MapsLine>) -> &mut Self {
        self.op(Op::Maps).expect(Expect::Maps(
            lines.iter().map(|l| l.normalized().to_string()).collect(),
        ))
    }

    pub(crate) fn counters(
        &mut self,
        minor_faults: Option<u64>,
        rss_kb: Option<u64>,
        anon_huge_kb: Option<u64>,
    ) -> &mut Self {
        self.op(Op::Counters).expect(Expect::Counters {
            minor_faults,
            rss_kb,
            anon_huge_kb,
        })
    }
}

pub(crate) fn case(name: &'static str, origin: &'static str, f: impl FnOnce(&mut B)) -> Case {
    let mut b = B {
        case: Case {
            name,
            origin,
            ops: Vec::new(),
            expect: Vec::new(),
        },
    };
    f(&mut b);
    b.case
}

/// A `/dev/zero` maps line (dev/inode zero, as normalised).
fn zero_line(start: u64, end: u64, perms: &str, off: u64) -> MapsLine {
    MapsLine {
        path: "/dev/zero".into(),
        offset: off,
        ..MapsLine::anon(start, end, perms)
    }
}

fn probe_vec(spec: &str) -> Vec<(bool, bool)> {
    spec.split_whitespace()
        .map(|t| match t {
            "rw" => (true, true),
            "r-" => (true, false),
            "--" => (false, false),
            _ => panic!("bad probe spec {t}"),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// B.9: munmap
// ---------------------------------------------------------------------------------------------

fn munmap_cases() -> Vec<Case> {
    vec![
        case("munmap_unaligned_addr", "B.9 munmap; LTP munmap03", |c| {
            c.map(a(0), 4, RW);
            c.munmap(a(0) + 1, P).err(EINVAL);
            c.munmap(a(1) + 0x800, P).err(EINVAL);
            c.maps(&[(a(0), a(4), "rw-p")]);
        }),
        case("munmap_len_zero", "B.9 munmap; LTP munmap03", |c| {
            c.map(a(0), 4, RW);
            c.munmap(a(0), 0).err(EINVAL);
            c.munmap(a(8), 0).err(EINVAL);
            c.maps(&[(a(0), a(4), "rw-p")]);
        }),
        case("munmap_len_rounded_up", "B.9 munmap", |c| {
            c.map(a(0), 4, RW);
            c.munmap(a(0), P + 1).ok(0);
            c.maps(&[(a(2), a(4), "rw-p")]);
            c.munmap(a(3), 1).ok(0);
            c.maps(&[(a(2), a(3), "rw-p")]);
        }),
        case("munmap_nothing_mapped", "B.9 munmap", |c| {
            c.munmap(a(100), 4 * P).ok(0);
            c.munmap(0, P).ok(0);
            c.map(a(0), 2, RW);
            c.munmap(a(2), 10 * P).ok(0);
            c.maps(&[(a(0), a(2), "rw-p")]);
        }),
        case(
            "munmap_crosses_task_size",
            "B.9 munmap; LTP munmap03",
            |c| {
                c.munmap(TASK_SIZE - P, 2 * P).err(EINVAL);
                c.munmap(TASK_SIZE + P, P).err(EINVAL);
                c.munmap(a(0), MAX_PAGE).err(EINVAL);
                c.munmap(a(0), u64::MAX).err(EINVAL);
                c.munmap(a(0), TASK_SIZE).err(EINVAL);
            },
        ),
        case("munmap_partial_then_access", "LTP munmap01", |c| {
            c.map(a(0), 6, RW);
            c.write(a(0), 6 * P, 0x11).ok(6 * P);
            c.munmap(a(2), 2 * P).ok(0);
            c.maps(&[(a(0), a(2), "rw-p"), (a(4), a(6), "rw-p")]);
            c.read(a(1), 2 * P).expect(Expect::Fault(a(2)));
            c.read(a(4), 2 * P).expect(Expect::Bytes(0x11));
            c.write(a(1) + 10, P, 0x22).expect(Expect::Fault(a(2)));
            c.read(a(1) + 10, P - 10).expect(Expect::Bytes(0x22));
            c.probe(a(0), 6 * P)
                .expect(Expect::Probe(probe_vec("rw rw -- -- rw rw")));
        }),
        case("munmap_spanning_vmas", "B.9 munmap", |c| {
            c.map(a(0), 2, RW);
            c.map(a(2), 2, R);
            c.map(a(5), 2, RW);
            c.munmap(a(1), 5 * P).ok(0);
            c.maps(&[(a(0), a(1), "rw-p"), (a(6), a(7), "rw-p")]);
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// B.9: mmap
// ---------------------------------------------------------------------------------------------

fn mmap_cases() -> Vec<Case> {
    vec![
        case("mmap_len_zero", "B.9 mmap; LTP mmap06", |c| {
            c.op(Op::mmap_anon_at(a(0), 0, RW)).err(EINVAL);
            c.op(Op::mmap_anon(a(0), 0, RW, 0)).err(EINVAL);
            c.op(Op::mmap_dev_zero(a(0), 0, RW, MAP_FIXED)).err(EINVAL);
        }),
        case("mmap_fixed_unaligned", "B.9 mmap", |c| {
            c.op(Op::mmap_anon(a(0) + 1, P, RW, MAP_FIXED)).err(EINVAL);
            c.op(Op::mmap_anon(a(0) + 0x800, P, RW, MAP_FIXED_NOREPLACE))
                .err(EINVAL);
            c.maps(&[]);
        }),
        case("mmap_offset_unaligned", "B.9 mmap", |c| {
            c.op(Op::Mmap(MmapArgs {
                addr: a(0),
                len: P,
                prot: RW,
                flags: MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                source: MapSource::Anon,
                offset: 100,
            }))
            .err(EINVAL);
            c.op(Op::Mmap(MmapArgs {
                addr: a(0),
                len: P,
                prot: RW,
                flags: MAP_PRIVATE | MAP_FIXED_NOREPLACE,
                source: MapSource::DevZero,
                offset: P + 1,
            }))
            .err(EINVAL);
            // An aligned offset on anonymous memory is accepted (and ignored).
            c.op(Op::Mmap(MmapArgs {
                addr: a(0),
                len: P,
                prot: RW,
                flags: MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                source: MapSource::Anon,
                offset: 16 * P,
            }))
            .ok(a(0));
            c.maps(&[(a(0), a(1), "rw-p")]);
        }),
        case(
            "mmap_offset_overflow",
            "do_mmap pgoff overflow, file_mmap_ok",
            |c| {
                // Anonymous memory ignores the offset.
                c.op(Op::Mmap(MmapArgs {
                    addr: a(0),
                    len: 2 * P,
                    prot: RW,
                    flags: MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                    source: MapSource::Anon,
                    offset: MAX_PAGE,
                }))
                .ok(a(0));
                // A character device's mapping may not reach past ULONG_MAX.
                c.op(Op::Mmap(MmapArgs {
                    addr: a(4),
                    len: 2 * P,
                    prot: RW,
                    flags: MAP_PRIVATE | MAP_FIXED_NOREPLACE,
                    source: MapSource::DevZero,
                    offset: MAX_PAGE,
                }))
                .err(libc::EOVERFLOW);
                c.op(Op::Mmap(MmapArgs {
                    addr: a(4),
                    len: 2 * P,
                    prot: RW,
                    flags: MAP_PRIVATE | MAP_FIXED_NOREPLACE,
                    source: MapSource::DevZero,
                    offset: (MAX_PAGE) - 2 * P,
                }))
                .ok(a(4));
                c.maps_lines(vec![
                    MapsLine::anon(a(0), a(2), "rw-p"),
                    zero_line(a(4), a(6), "rw-p", (MAX_PAGE) - 2 * P),
                ]);
            },
        ),
        case("mmap_no_type", "B.9 mmap; LTP mmap06", |c| {
            c.op(Op::Mmap(MmapArgs {
                addr: a(0),
                len: P,
                prot: RW,
                flags: MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                source: MapSource::Anon,
                offset: 0,
            }))
            .err(EINVAL);
            c.op(Op::Mmap(MmapArgs {
                addr: a(0),
                len: P,
                prot: RW,
                flags: MAP_SHARED_VALIDATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                source: MapSource::Anon,
                offset: 0,
            }))
            .err(EINVAL);
            c.op(Op::Mmap(MmapArgs {
                addr: a(0),
                len: P,
                prot: RW,
                flags: MAP_FIXED_NOREPLACE,
                source: MapSource::DevZero,
                offset: 0,
            }))
            .err(EINVAL);
            c.maps(&[]);
        }),
        case(
            "mmap_no_type_checked_after_placement",
            "do_mmap order",
            |c| {
                // The map type is checked after the placement: NOREPLACE over a mapping wins.
                c.map(a(0), 2, RW);
                c.op(Op::Mmap(MmapArgs {
                    addr: a(0),
                    len: P,
                    prot: RW,
                    flags: MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                    source: MapSource::Anon,
                    offset: 0,
                }))
                .err(EEXIST);
                c.op(Op::Mmap(MmapArgs {
                    addr: TASK_SIZE,
                    len: P,
                    prot: RW,
                    flags: MAP_ANONYMOUS | MAP_FIXED,
                    source: MapSource::Anon,
                    offset: 0,
                }))
                .err(ENOMEM);
            },
        ),
        case(
            "mmap_anon_without_flag_is_ebadf",
            "B.9 mmap (bad fd)",
            |c| {
                c.op(Op::Mmap(MmapArgs {
                    addr: a(0),
                    len: P,
                    prot: RW,
                    flags: MAP_PRIVATE | MAP_FIXED_NOREPLACE,
                    source: MapSource::Anon,
                    offset: 0,
                }))
                .err(EBADF);
                c.op(Op::Mmap(MmapArgs {
                    addr: a(0),
                    len: 0,
                    prot: RW,
                    flags: MAP_PRIVATE,
                    source: MapSource::Anon,
                    offset: 0,
                }))
                .err(EBADF);
            },
        ),
        case("mmap_unaligned_hint", "B.9 mmap", |c| {
            c.op(Op::mmap_anon(a(4) + 123, 2 * P, RW, 0)).ok(a(4));
            c.op(Op::mmap_anon(a(8) + P - 1, P, R, 0)).ok(a(8));
            c.maps(&[(a(4), a(6), "rw-p"), (a(8), a(9), "r--p")]);
        }),
        case("mmap_colliding_hint", "B.8 (4)", |c| {
            c.map(a(0), 4, RW);
            c.op(Op::mmap_anon(a(2), 2 * P, RW, 0));
            c.op(Op::mmap_anon(a(4), 2 * P, RW, 0)).ok(a(4));
            c.maps(&[(a(0), a(6), "rw-p")]);
        }),
        case("mmap_len_too_big", "B.9 mmap; LTP mmap15", |c| {
            c.op(Op::mmap_anon(0, 0u64.wrapping_sub(P), RW, 0))
                .err(ENOMEM);
            c.op(Op::mmap_anon(0, u64::MAX, RW, 0)).err(ENOMEM);
            c.op(Op::mmap_anon(0, 1 << 62, RW, 0)).err(ENOMEM);
            c.op(Op::mmap_anon(a(0), 1 << 62, RW, 0)).err(ENOMEM);
            c.op(Op::mmap_anon(a(0), TASK_SIZE + P, RW, MAP_FIXED))
                .err(ENOMEM);
        }),
        case("mmap_fixed_above_task_size", "B.9 mmap; LTP mmap15", |c| {
            c.op(Op::mmap_anon(TASK_SIZE, P, RW, MAP_FIXED)).err(ENOMEM);
            c.op(Op::mmap_anon(TASK_SIZE - P, 2 * P, RW, MAP_FIXED_NOREPLACE))
                .err(ENOMEM);
            c.op(Op::mmap_anon(1 << 48, P, RW, MAP_FIXED)).err(ENOMEM);
        }),
        case("mmap_unknown_prot_bits", "B.9 mmap", |c| {
            c.op(Op::mmap_anon_at(a(0), P, RW | 0x80)).ok(a(0));
            c.maps(&[(a(0), a(1), "rw-p")]);
            c.mprotect(a(0), P, R | 0x80).err(EINVAL);
        }),
        case("mmap_fixed_over_existing", "B.9 mmap", |c| {
            c.map(a(0), 3, RW);
            c.write(a(0), 3 * P, 0x5a).ok(3 * P);
            c.op(Op::mmap_anon(a(1), P, R, MAP_FIXED)).ok(a(1));
            c.maps(&[
                (a(0), a(1), "rw-p"),
                (a(1), a(2), "r--p"),
                (a(2), a(3), "rw-p"),
            ]);
            c.read(a(0), P).expect(Expect::Bytes(0x5a));
            c.read(a(1), P).expect(Expect::Bytes(0));
            c.read(a(2), P).expect(Expect::Bytes(0x5a));
            // Replace the middle again with RW: everything merges back.
            c.op(Op::mmap_anon(a(1), P, RW, MAP_FIXED)).ok(a(1));
            c.maps(&[(a(0), a(3), "rw-p")]);
            c.read(a(1), P).expect(Expect::Bytes(0));
        }),
        case(
            "mmap_fixed_noreplace_overlap",
            "B.9 mmap; LTP mmap17",
            |c| {
                c.map(a(4), 4, RW);
                c.op(Op::mmap_anon_at(a(4), 4 * P, RW)).err(EEXIST);
                c.op(Op::mmap_anon_at(a(2), 4 * P, RW)).err(EEXIST);
                c.op(Op::mmap_anon_at(a(7), 4 * P, RW)).err(EEXIST);
                c.op(Op::mmap_anon_at(a(5), P, RW)).err(EEXIST);
                c.op(Op::mmap_anon_at(a(0), 16 * P, RW)).err(EEXIST);
                c.op(Op::mmap_anon_at(a(8), P, RW)).ok(a(8));
                c.maps(&[(a(4), a(9), "rw-p")]);
            },
        ),
        case(
            "mmap_shared_validate_unknown_flag",
            "B.9 mmap; LTP mmap20",
            |c| {
                // A file (/dev/zero) with MAP_SHARED_VALIDATE and a flag outside the legacy mask.
                c.op(Op::Mmap(MmapArgs {
                    addr: a(0),
                    len: P,
                    prot: RW,
                    flags: MAP_SHARED_VALIDATE | MAP_FIXED | 0x0080_0000,
                    source: MapSource::DevZero,
                    offset: 0,
                }))
                .err(EOPNOTSUPP);
                c.op(Op::Mmap(MmapArgs {
                    addr: a(0),
                    len: P,
                    prot: RW,
                    flags: MAP_SHARED_VALIDATE | MAP_FIXED_NOREPLACE,
                    source: MapSource::DevZero,
                    offset: 0,
                }))
                .err(EOPNOTSUPP);
                c.op(Op::Mmap(MmapArgs {
                    addr: a(0),
                    len: P,
                    prot: RW,
                    flags: MAP_SHARED_VALIDATE | MAP_FIXED,
                    source: MapSource::DevZero,
                    offset: 0,
                }))
                .ok(a(0));
                c.op(Op::Maps);
            },
        ),
        case("mmap_perms_in_maps", "LTP mmap04", |c| {
            let prots: [(u32, u32, &str); 8] = [
                (PROT_NONE, MAP_PRIVATE, "---p"),
                (R, MAP_PRIVATE, "r--p"),
                (PROT_WRITE, MAP_PRIVATE, "-w-p"),
                (RW, MAP_PRIVATE, "rw-p"),
                (R | PROT_EXEC, MAP_PRIVATE, "r-xp"),
                (RW | PROT_EXEC, MAP_PRIVATE, "rwxp"),
                (R, MAP_SHARED, "r--s"),
                (RW, MAP_SHARED, "rw-s"),
            ];
            let mut lines = Vec::new();
            for (i, &(prot, ty, perms)) in prots.iter().enumerate() {
                let at = a(2 * i as u64);
                c.op(Op::Mmap(MmapArgs {
                    addr: at,
                    len: P,
                    prot,
                    flags: ty | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                    source: MapSource::Anon,
                    offset: 0,
                }))
                .ok(at);
                let mut l = MapsLine::anon(at, at + P, perms);
                if ty == MAP_SHARED {
                    l.path = "/dev/zero (deleted)".into();
                }
                lines.push(l);
            }
            c.maps_lines(lines);
            c.probe(a(0), 16 * P).expect(Expect::Probe(probe_vec(
                "-- -- r- -- rw -- rw -- r- -- rw -- r- -- rw --",
            )));
        }),
        case("mmap_exec_only_perms", "LTP mmap04", |c| {
            c.op(Op::mmap_anon_at(a(0), P, PROT_EXEC)).ok(a(0));
            c.maps(&[(a(0), a(1), "--xp")]);
        }),
        case("mmap_dev_zero_perms_in_maps", "LTP mmap04; B.8 (3)", |c| {
            c.map_zero(a(0), 2, RW, 0);
            c.map_zero(a(4), 2, R, 0);
            c.op(Op::Mmap(MmapArgs {
                addr: a(8),
                len: 2 * P,
                prot: RW,
                flags: MAP_SHARED | MAP_FIXED_NOREPLACE,
                source: MapSource::DevZero,
                offset: 0,
            }))
            .ok(a(8));
            c.maps_lines(vec![
                zero_line(a(0), a(2), "rw-p", 0),
                zero_line(a(4), a(6), "r--p", 0),
                MapsLine {
                    path: "/dev/zero (deleted)".into(),
                    ..MapsLine::anon(a(8), a(10), "rw-s")
                },
            ]);
            c.write(a(0), 2 * P, 3).ok(2 * P);
            c.write(a(8), 2 * P, 4).ok(2 * P);
            c.read(a(0), 2 * P).expect(Expect::Bytes(3));
            c.read(a(4), 2 * P).expect(Expect::Bytes(0));
            c.read(a(8), 2 * P).expect(Expect::Bytes(4));
        }),
        case(
            "mmap_remap_no_stale_data",
            "LTP mmap19 (anonymous analogue)",
            |c| {
                c.map(a(0), 2, RW);
                c.map(a(4), 2, RW);
                c.write(a(0), 2 * P, 0xaa).ok(2 * P);
                c.write(a(4), 2 * P, 0xbb).ok(2 * P);
                // Move each range's role: unmap and map again at the other place, fixed.
                c.munmap(a(0), 2 * P).ok(0);
                c.op(Op::mmap_anon(a(0), 2 * P, RW, MAP_FIXED)).ok(a(0));
                c.op(Op::mmap_anon(a(4), 2 * P, RW, MAP_FIXED)).ok(a(4));
                c.read(a(0), 2 * P).expect(Expect::Bytes(0));
                c.read(a(4), 2 * P).expect(Expect::Bytes(0));
                c.write(a(4), 1, 0xcc).ok(1);
                c.read(a(4), 2).expect(Expect::Data(vec![0xcc, 0]));
            },
        ),
        case("mmap_populate", "LTP mmap12", |c| {
            c.op(Op::mmap_anon(
                a(0),
                8 * P,
                RW,
                MAP_FIXED_NOREPLACE | MAP_POPULATE,
            ))
            .ok(a(0));
            c.counters(Some(8), Some(32), Some(0));
            c.read(a(0), 8 * P).expect(Expect::Bytes(0));
            c.counters(Some(8), Some(32), Some(0));
            // Read-only: populated with the zero page, no rss.
            c.op(Op::mmap_anon(
                a(16),
                4 * P,
                R,
                MAP_FIXED_NOREPLACE | MAP_POPULATE,
            ))
            .ok(a(16));
            c.counters(Some(12), Some(32), Some(0));
            c.read(a(16), 4 * P).expect(Expect::Bytes(0));
            c.counters(Some(12), Some(32), Some(0));
        }),
        case("mmap_locked_small", "LTP mmap14", |c| {
            c.op(Op::mmap_anon(
                a(0),
                2 * P,
                RW,
                MAP_FIXED_NOREPLACE | MAP_LOCKED,
            ))
            .ok(a(0));
            c.counters(Some(2), Some(8), None);
            c.madvise(a(0), 2 * P, MADV_DONTNEED).err(EINVAL);
            c.op(Op::Munlock {
                addr: a(0),
                len: 2 * P,
            })
            .ok(0);
            c.madvise(a(0), 2 * P, MADV_DONTNEED).ok(0);
            c.counters(Some(2), Some(0), None);
        }),
        case("mmap_min_addr_noreplace", "B.9 mmap (mmap_min_addr)", |c| {
            // Root may map below mmap_min_addr, others get EPERM: only the page-zero case,
            // which is refused for everybody by the hint path, is compared here.
            c.op(Op::mmap_anon(0, P, RW, 0));
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// B.9: mprotect
// ---------------------------------------------------------------------------------------------

fn mprotect_cases() -> Vec<Case> {
    vec![
        case("mprotect_einval", "B.9 mprotect; LTP mprotect01", |c| {
            c.map(a(0), 4, RW);
            c.mprotect(a(0) + 1, P, R).err(EINVAL);
            c.mprotect(a(0), P, 0x80).err(EINVAL);
            c.mprotect(a(0), P, R | 0x1000).err(EINVAL);
            c.maps(&[(a(0), a(4), "rw-p")]);
        }),
        case("mprotect_len_zero", "B.9 mprotect", |c| {
            c.mprotect(a(0), 0, R).ok(0);
            c.mprotect(0, 0, R).ok(0);
        }),
        case("mprotect_enomem", "B.9 mprotect; LTP mprotect01", |c| {
            c.mprotect(a(0), P, R).err(ENOMEM);
            c.mprotect(0, P, R).err(ENOMEM);
            c.map(a(0), 4, RW);
            c.mprotect(a(0), MAX_PAGE, R).err(ENOMEM);
            c.mprotect(a(0), TASK_SIZE, R).err(ENOMEM);
        }),
        case("mprotect_hole_in_middle", "B.9 mprotect", |c| {
            c.map(a(0), 2, RW);
            c.map(a(3), 2, R);
            c.mprotect(a(0), 5 * P, PROT_NONE).err(ENOMEM);
            c.maps(&[(a(0), a(2), "---p"), (a(3), a(5), "r--p")]);
        }),
        case("mprotect_first_page_unmapped", "B.9 mprotect", |c| {
            c.map(a(1), 2, RW);
            c.mprotect(a(0), 3 * P, R).err(ENOMEM);
            c.maps(&[(a(1), a(3), "rw-p")]);
        }),
        case("mprotect_tail_past_last", "B.9 mprotect", |c| {
            c.map(a(0), 2, RW);
            c.mprotect(a(1), 4 * P, R).err(ENOMEM);
            c.maps(&[(a(0), a(1), "rw-p"), (a(1), a(2), "r--p")]);
        }),
        case("mprotect_spanning_adjacent_merges", "B.9 mprotect", |c| {
            c.map(a(0), 2, RW);
            c.map(a(2), 2, R);
            c.maps(&[(a(0), a(2), "rw-p"), (a(2), a(4), "r--p")]);
            c.mprotect(a(0), 4 * P, R).ok(0);
            c.maps(&[(a(0), a(4), "r--p")]);
        }),
        case(
            "mprotect_access_before_after",
            "LTP mprotect02/03/04",
            |c| {
                c.map(a(0), 2, R);
                c.write(a(0), 1, 1).expect(Expect::Fault(a(0)));
                c.mprotect(a(0), 2 * P, RW).ok(0);
                c.write(a(0), 1, 1).ok(1);
                c.mprotect(a(0), 2 * P, PROT_NONE).ok(0);
                c.read(a(0), 1).expect(Expect::Fault(a(0)));
                c.probe(a(0), 2 * P)
                    .expect(Expect::Probe(probe_vec("-- --")));
                c.mprotect(a(0), 2 * P, R).ok(0);
                c.read(a(0), 2).expect(Expect::Data(vec![1, 0]));
                c.probe(a(0), 2 * P)
                    .expect(Expect::Probe(probe_vec("r- r-")));
            },
        ),
        case("mprotect_split_merge_217061", "LTP mprotect05", |c| {
            c.map(a(0), 4, RW);
            c.mprotect(a(1), 2 * P, R).ok(0);
            c.maps(&[
                (a(0), a(1), "rw-p"),
                (a(1), a(3), "r--p"),
                (a(3), a(4), "rw-p"),
            ]);
            c.mprotect(a(0), 4 * P, R).ok(0);
            c.maps(&[(a(0), a(4), "r--p")]);
            c.mprotect(a(3), P, RW).ok(0);
            c.mprotect(a(0), P, RW).ok(0);
            c.maps(&[
                (a(0), a(1), "rw-p"),
                (a(1), a(3), "r--p"),
                (a(3), a(4), "rw-p"),
            ]);
            c.mprotect(a(1), 2 * P, RW).ok(0);
            c.maps(&[(a(0), a(4), "rw-p")]);
        }),
        case(
            "mprotect_write_makes_accountable",
            "mprotect VM_ACCOUNT merge rule",
            |c| {
                // A read-only private mapping is not accounted; making it writable accounts it, and
                // then it merges with a writable neighbour.
                c.map(a(0), 2, R);
                c.map(a(2), 2, RW);
                c.mprotect(a(0), 2 * P, RW).ok(0);
                c.maps(&[(a(0), a(4), "rw-p")]);
            },
        ),
        case(
            "mprotect_readonly_account",
            "mprotect VM_ACCOUNT merge rule",
            |c| {
                // A mapping created writable is uncharged when made read-only before its first
                // fault, and then merges with a neighbour created read-only ...
                c.map(a(0), 2, R);
                c.map(a(2), 2, RW);
                c.mprotect(a(2), 2 * P, R).ok(0);
                c.maps(&[(a(0), a(4), "r--p")]);
                c.munmap(a(0), 4 * P).ok(0);
                // ... but stays charged once faulted, and then does not merge.
                c.map(a(0), 2, R);
                c.map(a(2), 2, RW);
                c.write(a(2), 1, 1).ok(1);
                c.mprotect(a(2), 2 * P, R).ok(0);
                c.maps(&[(a(0), a(2), "r--p"), (a(2), a(4), "r--p")]);
                c.op(Op::mmap_anon(
                    a(4),
                    2 * P,
                    R,
                    MAP_FIXED_NOREPLACE | MAP_NORESERVE,
                ))
                .ok(a(4));
                c.mprotect(a(4), 2 * P, RW).ok(0);
                c.maps(&[
                    (a(0), a(2), "r--p"),
                    (a(2), a(4), "r--p"),
                    (a(4), a(6), "rw-p"),
                ]);
            },
        ),
        case("mprotect_exec_only", "mprotect PROT_EXEC", |c| {
            c.map(a(0), 2, RW);
            c.mprotect(a(0), P, PROT_EXEC).ok(0);
            c.maps(&[(a(0), a(1), "--xp"), (a(1), a(2), "rw-p")]);
        }),
        case(
            "mprotect_sem_and_growsdown",
            "mprotect extra prot bits",
            |c| {
                c.map(a(0), 2, RW);
                c.mprotect(a(0), P, R | 0x8).ok(0);
                c.maps(&[(a(0), a(1), "r--p"), (a(1), a(2), "rw-p")]);
                c.mprotect(a(0), P, R | 0x0100_0000).err(EINVAL);
            },
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// B.9: madvise
// ---------------------------------------------------------------------------------------------

fn madvise_cases() -> Vec<Case> {
    vec![
        case("madvise_einval", "B.9 madvise; LTP madvise02", |c| {
            c.map(a(0), 4, RW);
            c.madvise(a(0) + 1, P, MADV_NORMAL).err(EINVAL);
            c.madvise(a(0), P, 1212).err(EINVAL);
            c.madvise(a(0), u64::MAX, MADV_NORMAL).err(EINVAL);
            c.madvise(a(0), u64::MAX, MADV_DONTNEED).err(EINVAL);
            c.madvise(a(0), 0u64.wrapping_sub(P), MADV_NORMAL)
                .err(EINVAL);
            c.madvise(a(0), P, -1).err(EINVAL);
        }),
        case("madvise_len_zero", "B.9 madvise; LTP madvise10", |c| {
            c.madvise(a(0), 0, MADV_DONTNEED).ok(0);
            c.madvise(a(0), 0, MADV_WIPEONFORK).ok(0);
            c.madvise(a(0), 0, MADV_KEEPONFORK).ok(0);
        }),
        case(
            "madvise_fully_unmapped",
            "B.9 madvise; LTP madvise02",
            |c| {
                for adv in [
                    MADV_NORMAL,
                    MADV_WILLNEED,
                    MADV_DONTNEED,
                    MADV_FREE,
                    MADV_HUGEPAGE,
                    MADV_COLD,
                    MADV_POPULATE_READ,
                ] {
                    c.madvise(a(0), 4 * P, adv).err(ENOMEM);
                }
            },
        ),
        case("madvise_holes_dontneed", "B.9 madvise", |c| {
            c.map(a(1), 2, RW);
            c.map(a(4), 2, RW);
            c.write(a(1), 2 * P, 9).ok(2 * P);
            c.write(a(4), 2 * P, 9).ok(2 * P);
            // Hole at the start, in the middle and at the end: ENOMEM, both sides zapped.
            c.madvise(a(0), 7 * P, MADV_DONTNEED).err(ENOMEM);
            c.read(a(1), 2 * P).expect(Expect::Bytes(0));
            c.read(a(4), 2 * P).expect(Expect::Bytes(0));
            c.counters(None, Some(0), Some(0));
        }),
        case("madvise_holes_flags", "B.9 madvise", |c| {
            c.map(a(1), 2, RW);
            c.map(a(4), 2, RW);
            c.madvise(a(0), 7 * P, MADV_RANDOM).err(ENOMEM);
            c.madvise(a(1), 5 * P, MADV_NORMAL).err(ENOMEM);
            c.madvise(a(2), 3 * P, MADV_DONTDUMP).err(ENOMEM);
            c.maps(&[
                (a(1), a(2), "rw-p"),
                (a(2), a(3), "rw-p"),
                (a(4), a(5), "rw-p"),
                (a(5), a(6), "rw-p"),
            ]);
        }),
        case(
            "madvise_dontneed_locked",
            "B.9 madvise; LTP madvise02",
            |c| {
                c.map(a(0), 2, RW);
                c.op(Op::Mlock {
                    addr: a(0),
                    len: 2 * P,
                })
                .ok(0);
                c.madvise(a(0), 2 * P, MADV_DONTNEED).err(EINVAL);
                c.madvise(a(0), 2 * P, MADV_FREE).err(EINVAL);
                c.madvise(a(0), 2 * P, MADV_REMOVE).err(EINVAL);
                c.madvise(a(0), 2 * P, MADV_COLD).err(EINVAL);
                c.madvise(a(0), 2 * P, MADV_PAGEOUT).err(EINVAL);
            },
        ),
        case(
            "madvise_free_and_wipeonfork_on_shared",
            "B.9 madvise; LTP madvise02",
            |c| {
                c.op(Op::mmap_anon(a(0), 2 * P, RW, MAP_FIXED_NOREPLACE))
                    .ok(a(0));
                c.op(Op::Mmap(MmapArgs {
                    addr: a(4),
                    len: 2 * P,
                    prot: RW,
                    flags: MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                    source: MapSource::Anon,
                    offset: 0,
                }))
                .ok(a(4));
                c.madvise(a(4), 2 * P, MADV_FREE).err(EINVAL);
                c.madvise(a(4), 2 * P, MADV_WIPEONFORK).err(EINVAL);
                c.madvise(a(0), 2 * P, MADV_FREE).ok(0);
                c.madvise(a(0), 2 * P, MADV_WIPEONFORK).ok(0);
                // Private /dev/zero is anonymous inside: FREE works on it.
                c.map_zero(a(8), 2, RW, 0);
                c.madvise(a(8), 2 * P, MADV_FREE).ok(0);
                // ... but it has a file: no WIPEONFORK.
                c.madvise(a(8), 2 * P, MADV_WIPEONFORK).err(EINVAL);
                c.madvise(a(8), 2 * P, MADV_REMOVE).err(EACCES);
            },
        ),
        case("madvise_remove", "LTP madvise02", |c| {
            c.map(a(0), 2, RW);
            c.madvise(a(0), 2 * P, MADV_REMOVE).err(EINVAL);
            c.op(Op::Mmap(MmapArgs {
                addr: a(4),
                len: 2 * P,
                prot: RW,
                flags: MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                source: MapSource::Anon,
                offset: 0,
            }))
            .ok(a(4));
            c.write(a(4), 2 * P, 7).ok(2 * P);
            c.madvise(a(4), P, MADV_REMOVE).ok(0);
            c.read(a(4), 2 * P);
        }),
        case(
            "madvise_willneed_anon",
            "LTP madvise02 (EBADF without swap)",
            |c| {
                c.map(a(0), 2, RW);
                c.madvise(a(0), 2 * P, MADV_WILLNEED);
                c.map_zero(a(4), 2, RW, 0);
                c.madvise(a(4), 2 * P, MADV_WILLNEED);
            },
        ),
        case("madvise_all_advices", "LTP madvise01", |c| {
            c.map(a(0), 8, RW);
            c.write(a(0), 8 * P, 1).ok(8 * P);
            for adv in [
                MADV_NORMAL,
                MADV_RANDOM,
                MADV_SEQUENTIAL,
                MADV_WILLNEED,
                MADV_DONTNEED,
                MADV_FREE,
                MADV_DONTFORK,
                MADV_DOFORK,
                MADV_HUGEPAGE,
                MADV_NOHUGEPAGE,
                MADV_DONTDUMP,
                MADV_DODUMP,
                MADV_WIPEONFORK,
                MADV_KEEPONFORK,
                MADV_COLD,
                MADV_POPULATE_READ,
                MADV_POPULATE_WRITE,
            ] {
                c.madvise(a(0), 8 * P, adv).ok(0);
            }
            c.maps(&[(a(0), a(8), "rw-p")]);
        }),
        case("madvise_dontneed_zero_fill", "LTP madvise03", |c| {
            c.map(a(0), 4, RW);
            c.write(a(0), 4 * P, 0x77).ok(4 * P);
            c.madvise(a(1), 2 * P, MADV_DONTNEED).ok(0);
            c.read(a(0), P).expect(Expect::Bytes(0x77));
            c.read(a(1), 2 * P).expect(Expect::Bytes(0));
            c.read(a(3), P).expect(Expect::Bytes(0x77));
            c.counters(Some(6), Some(8), Some(0));
        }),
        case("madvise_wipeonfork_split", "LTP madvise10", |c| {
            c.map(a(0), 4, RW);
            c.madvise(a(1), P, MADV_WIPEONFORK).ok(0);
            c.maps(&[
                (a(0), a(1), "rw-p"),
                (a(1), a(2), "rw-p"),
                (a(2), a(4), "rw-p"),
            ]);
            c.madvise(a(1), P, MADV_KEEPONFORK).ok(0);
            c.maps(&[(a(0), a(4), "rw-p")]);
            c.madvise(a(0), 4 * P, MADV_DONTFORK).ok(0);
            c.madvise(a(2), 2 * P, MADV_DOFORK).ok(0);
            c.maps(&[(a(0), a(2), "rw-p"), (a(2), a(4), "rw-p")]);
        }),
        case("madvise_populate", "MADV_POPULATE_(READ|WRITE)", |c| {
            c.map(a(0), 4, RW);
            c.madvise(a(0), 4 * P, MADV_POPULATE_READ).ok(0);
            c.counters(Some(4), Some(0), Some(0));
            c.madvise(a(0), 4 * P, MADV_POPULATE_WRITE).ok(0);
            c.counters(Some(8), Some(16), Some(0));
            c.map(a(8), 2, R);
            c.madvise(a(8), 2 * P, MADV_POPULATE_WRITE);
            c.map(a(12), 2, PROT_NONE);
            c.madvise(a(12), 2 * P, MADV_POPULATE_READ);
            c.madvise(a(12), 2 * P, MADV_POPULATE_WRITE);
            c.madvise(a(0), 16 * P, MADV_POPULATE_READ);
        }),
        case("madvise_mergeable", "LTP madvise02 (KSM)", |c| {
            c.map(a(0), 4, RW);
            c.madvise(a(1), P, MADV_MERGEABLE);
            c.op(Op::Maps);
            c.madvise(a(1), P, MADV_UNMERGEABLE);
            c.op(Op::Maps);
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// B.9: mlock / munlock
// ---------------------------------------------------------------------------------------------

fn mlock_cases() -> Vec<Case> {
    vec![
        case("mlock_unmapped", "B.9 mlock", |c| {
            c.op(Op::Mlock { addr: a(0), len: P }).err(ENOMEM);
            c.map(a(1), 2, RW);
            c.op(Op::Mlock {
                addr: a(0),
                len: 3 * P,
            })
            .err(ENOMEM);
            c.op(Op::Mlock {
                addr: a(1),
                len: 3 * P,
            })
            .err(ENOMEM);
            c.op(Op::Munlock {
                addr: a(2),
                len: 3 * P,
            })
            .err(ENOMEM);
            c.op(Op::Maps);
            c.counters(None, None, None);
        }),
        case("mlock_split_merge", "mlock", |c| {
            c.map(a(0), 4, RW);
            c.op(Op::Mlock {
                addr: a(1) + 5,
                len: P,
            })
            .ok(0);
            c.maps(&[
                (a(0), a(1), "rw-p"),
                (a(1), a(3), "rw-p"),
                (a(3), a(4), "rw-p"),
            ]);
            c.counters(Some(2), Some(8), Some(0));
            c.op(Op::Munlock {
                addr: a(0),
                len: 4 * P,
            })
            .ok(0);
            c.maps(&[(a(0), a(4), "rw-p")]);
            c.op(Op::Mlock { addr: a(0), len: 0 }).ok(0);
        }),
        case("mlock_prot_none_and_readonly", "mlock", |c| {
            c.map(a(0), 2, PROT_NONE);
            c.map(a(2), 2, R);
            // The VMAs are locked, but populating stops at the PROT_NONE one with EFAULT,
            // which mlock reports as ENOMEM.
            c.op(Op::Mlock {
                addr: a(0),
                len: 4 * P,
            })
            .err(ENOMEM);
            c.counters(Some(0), Some(0), Some(0));
            c.op(Op::Mlock {
                addr: a(2),
                len: 2 * P,
            })
            .ok(0);
            c.counters(Some(2), Some(0), Some(0));
            c.probe(a(0), 4 * P)
                .expect(Expect::Probe(probe_vec("-- -- r- r-")));
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Zero page and THP facts
// ---------------------------------------------------------------------------------------------

fn zero_page_cases() -> Vec<Case> {
    vec![
        case("zero_page_reads_4k", "B.9 zero page facts", |c| {
            c.map(a(0), 256, RW);
            c.read(a(0), 256 * P).expect(Expect::Bytes(0));
            c.counters(Some(256), Some(0), Some(0));
            c.write(a(0), 1, 1).ok(1);
            c.counters(Some(257), Some(4), Some(0));
        }),
        case("zero_page_dev_zero_reads", "B.9 zero page facts", |c| {
            c.map_zero(a(0), 64, RW, 0);
            c.read(a(0), 64 * P).expect(Expect::Bytes(0));
            c.counters(Some(64), Some(0), Some(0));
        }),
        case("huge_zero_page_reads", "B.9 zero page / THP facts", |c| {
            c.op(Op::mmap_anon_at(h(2), 4 * H, RW)).ok(h(2));
            c.madvise(h(2), 4 * H, MADV_HUGEPAGE).ok(0);
            c.read(h(2), 4 * H).expect(Expect::Bytes(0));
            c.counters(Some(4), Some(0), Some(0));
            c.write(h(2) + 5, 1, 1).ok(1);
            c.counters(Some(5), Some(2048), Some(2048));
            c.write(h(3), P, 2).ok(P);
            c.counters(Some(6), Some(4096), Some(4096));
        }),
        case("thp_write_fault", "B.9 THP facts", |c| {
            c.op(Op::mmap_anon_at(h(2), 2 * H, RW)).ok(h(2));
            c.madvise(h(2), 2 * H, MADV_HUGEPAGE).ok(0);
            c.write(h(3) + P + 17, 3, 1).ok(3);
            c.counters(Some(1), Some(2048), Some(2048));
            // DONTNEED of part of a THP splits the PMD.
            c.madvise(h(3), P, MADV_DONTNEED).ok(0);
            c.counters(Some(1), Some(2044), Some(0));
            c.read(h(3), P).expect(Expect::Bytes(0));
            c.read(h(3) + P + 16, 5)
                .expect(Expect::Data(vec![0, 1, 1, 1, 0]));
            c.counters(Some(2), Some(2044), Some(0));
        }),
        case("thp_not_in_unaligned_part", "B.9 THP facts", |c| {
            // Only the 2 MiB-aligned block inside the VMA can be huge.
            c.op(Op::mmap_anon_at(h(2) - 4 * P, H + 8 * P, RW))
                .ok(h(2) - 4 * P);
            c.madvise(h(2) - 4 * P, H + 8 * P, MADV_HUGEPAGE).ok(0);
            c.write(h(2) - 4 * P, 1, 1).ok(1);
            c.write(h(2), 1, 1).ok(1);
            c.write(h(3), 1, 1).ok(1);
            c.counters(Some(3), Some(2048 + 8), Some(2048));
        }),
        case("thp_mprotect_splits_pmd", "THP + mprotect", |c| {
            c.op(Op::mmap_anon_at(h(2), H, RW)).ok(h(2));
            c.madvise(h(2), H, MADV_HUGEPAGE).ok(0);
            c.write(h(2), 1, 1).ok(1);
            c.mprotect(h(2), 4 * P, R).ok(0);
            c.counters(Some(1), Some(2048), Some(0));
            c.write(h(2), 1, 2).expect(Expect::Fault(h(2)));
            c.write(h(2) + 4 * P, 1, 2).ok(1);
            c.counters(Some(1), Some(2048), Some(0));
            c.mprotect(h(2), H, RW).ok(0);
            c.maps(&[(h(2), h(3), "rw-p")]);
        }),
        case("thp_nohugepage", "THP + MADV_NOHUGEPAGE", |c| {
            c.op(Op::mmap_anon_at(h(2), 2 * H, RW)).ok(h(2));
            c.madvise(h(2), 2 * H, MADV_HUGEPAGE).ok(0);
            c.madvise(h(3), H, MADV_NOHUGEPAGE).ok(0);
            c.write(h(2), 1, 1).ok(1);
            c.write(h(3), 1, 1).ok(1);
            c.counters(Some(2), Some(2052), Some(2048));
            c.maps(&[(h(2), h(3), "rw-p"), (h(3), h(4), "rw-p")]);
        }),
        case("thp_free_partial", "THP + MADV_FREE", |c| {
            c.op(Op::mmap_anon_at(h(2), H, RW)).ok(h(2));
            c.madvise(h(2), H, MADV_HUGEPAGE).ok(0);
            c.write(h(2), 1, 1).ok(1);
            c.madvise(h(2) + P, P, MADV_FREE).ok(0);
            c.counters(Some(1), None, None);
            c.read(h(2), 1).expect(Expect::Data(vec![1]));
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Merge / split scenarios (selftests merge.c style)
// ---------------------------------------------------------------------------------------------

fn merge_cases() -> Vec<Case> {
    vec![
        case("merge_adjacent_anon", "merge.c", |c| {
            c.map(a(4), 2, RW);
            c.map(a(6), 2, RW); // after prev
            c.map(a(2), 2, RW); // before next
            c.maps(&[(a(2), a(8), "rw-p")]);
        }),
        case("merge_three_way_unfaulted", "merge.c", |c| {
            c.map(a(0), 2, RW);
            c.map(a(4), 2, RW);
            c.map(a(2), 2, RW);
            c.maps(&[(a(0), a(6), "rw-p")]);
        }),
        case("merge_three_way_one_faulted", "merge.c", |c| {
            c.map(a(0), 2, RW);
            c.map(a(4), 2, RW);
            c.write(a(0), 1, 1).ok(1);
            c.map(a(2), 2, RW);
            c.maps(&[(a(0), a(6), "rw-p")]);
        }),
        case(
            "merge_three_way_both_faulted",
            "merge.c (incompatible anon_vmas)",
            |c| {
                c.map(a(0), 2, RW);
                c.map(a(4), 2, RW);
                c.write(a(0), 1, 1).ok(1);
                c.write(a(4), 1, 1).ok(1);
                c.map(a(2), 2, RW);
                c.maps(&[(a(0), a(4), "rw-p"), (a(4), a(6), "rw-p")]);
            },
        ),
        case(
            "merge_mprotect_unfaulted_left",
            "merge.c mprotect_unfaulted_left",
            |c| {
                c.map(a(0), 10, RW);
                c.mprotect(a(0), 5 * P, R).ok(0);
                c.write(a(5), 1, 1).ok(1);
                c.mprotect(a(0), 5 * P, RW).ok(0);
                c.maps(&[(a(0), a(10), "rw-p")]);
            },
        ),
        case("merge_mprotect_faulted_pieces", "merge.c", |c| {
            c.map(a(0), 6, RW);
            c.mprotect(a(2), 2 * P, R).ok(0);
            c.write(a(0), 1, 1).ok(1);
            c.read(a(2), 1).expect(Expect::Data(vec![0]));
            c.write(a(4), 1, 1).ok(1);
            c.mprotect(a(2), 2 * P, RW).ok(0);
            // The outer pieces got different anon_vmas (the read-only middle one was uncharged,
            // so no neighbour was compatible at fault time): only prev merges.
            c.maps(&[(a(0), a(4), "rw-p"), (a(4), a(6), "rw-p")]);
        }),
        case("merge_separately_faulted_neighbours", "merge.c", |c| {
            c.map(a(0), 2, RW);
            c.write(a(0), 1, 1).ok(1);
            c.map(a(4), 2, R);
            c.map(a(2), 2, RW);
            c.maps(&[(a(0), a(4), "rw-p"), (a(4), a(6), "r--p")]);
            c.write(a(2), 1, 1).ok(1);
            c.mprotect(a(4), 2 * P, RW).ok(0);
            c.maps(&[(a(0), a(6), "rw-p")]);
        }),
        case(
            "merge_nohugepage_blocks_anon_vma_reuse",
            "mm/vma/merge.rs anon_vma reuse (probed)",
            |c| {
                c.map(a(0), 4, RW);
                c.madvise(a(2), 2 * P, MADV_NOHUGEPAGE).ok(0);
                c.write(a(0), 1, 1).ok(1);
                c.write(a(2), 1, 1).ok(1);
                c.madvise(a(2), 2 * P, MADV_HUGEPAGE).ok(0);
                c.madvise(a(0), 4 * P, MADV_NORMAL).ok(0);
                c.op(Op::Maps);
                c.madvise(a(0), 4 * P, MADV_HUGEPAGE).ok(0);
                c.op(Op::Maps);
            },
        ),
        case("dev_zero_no_merge_same_offset", "B.8 (3)", |c| {
            for i in 0..4 {
                c.map_zero(a(10 * i), 10, RW, 0);
            }
            c.op(Op::Maps);
            c.map_zero(a(40), 10, RW, 0);
            c.op(Op::Maps);
        }),
        case(
            "dev_zero_merge_contiguous_offsets",
            "mm/vma/merge.rs (probed)",
            |c| {
                c.map_zero(a(0), 4, RW, 0);
                c.map_zero(a(4), 4, RW, 4 * P);
                c.maps_lines(vec![zero_line(a(0), a(8), "rw-p", 0)]);
                c.map_zero(a(8), 4, RW, 16 * P);
                c.maps_lines(vec![
                    zero_line(a(0), a(8), "rw-p", 0),
                    zero_line(a(8), a(12), "rw-p", 16 * P),
                ]);
                c.mprotect(a(2), 2 * P, R).ok(0);
                c.maps_lines(vec![
                    zero_line(a(0), a(2), "rw-p", 0),
                    zero_line(a(2), a(4), "r--p", 2 * P),
                    zero_line(a(4), a(8), "rw-p", 4 * P),
                    zero_line(a(8), a(12), "rw-p", 16 * P),
                ]);
                c.mprotect(a(2), 2 * P, RW).ok(0);
                c.maps_lines(vec![
                    zero_line(a(0), a(8), "rw-p", 0),
                    zero_line(a(8), a(12), "rw-p", 16 * P),
                ]);
            },
        ),
        case("dev_zero_next_to_anon", "B.8 (3)", |c| {
            c.map(a(0), 2, RW);
            c.map_zero(a(2), 2, RW, 0);
            c.map(a(4), 2, RW);
            c.maps_lines(vec![
                MapsLine::anon(a(0), a(2), "rw-p"),
                zero_line(a(2), a(4), "rw-p", 0),
                MapsLine::anon(a(4), a(6), "rw-p"),
            ]);
            c.munmap(a(3), P).ok(0);
            c.write(a(2), P, 5).ok(P);
            c.read(a(2), P).expect(Expect::Bytes(5));
        }),
        case(
            "merge_fixed_replace_middle_different",
            "B.9 mmap MAP_FIXED",
            |c| {
                c.map(a(0), 6, RW);
                c.op(Op::mmap_dev_zero(a(2), 2 * P, RW, MAP_FIXED)).ok(a(2));
                c.maps_lines(vec![
                    MapsLine::anon(a(0), a(2), "rw-p"),
                    zero_line(a(2), a(4), "rw-p", 0),
                    MapsLine::anon(a(4), a(6), "rw-p"),
                ]);
                c.op(Op::mmap_anon(a(2), 2 * P, RW, MAP_FIXED)).ok(a(2));
                c.maps(&[(a(0), a(6), "rw-p")]);
            },
        ),
        case("merge_shared_anon_never", "mm/vma/merge.rs (probed)", |c| {
            for i in 0..2 {
                c.op(Op::Mmap(MmapArgs {
                    addr: a(2 * i),
                    len: 2 * P,
                    prot: RW,
                    flags: MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                    source: MapSource::Anon,
                    offset: 0,
                }));
            }
            c.op(Op::Maps);
            c.mprotect(a(0), P, R).ok(0);
            c.mprotect(a(0), P, RW).ok(0);
            c.op(Op::Maps);
            c.write(a(0), 4 * P, 1).ok(4 * P);
            c.counters(None, Some(16), None);
        }),
        case("split_munmap_middle_pgoff", "merge.c", |c| {
            c.map(a(0), 6, RW);
            c.write(a(0), 6 * P, 1).ok(6 * P);
            c.munmap(a(2), 2 * P).ok(0);
            c.map(a(2), 2, RW);
            c.maps(&[(a(0), a(6), "rw-p")]);
            c.read(a(0), 6 * P);
        }),
        case("merge_locked_flags", "mlock merge", |c| {
            c.map(a(0), 2, RW);
            c.op(Op::mmap_anon(
                a(2),
                2 * P,
                RW,
                MAP_FIXED_NOREPLACE | MAP_LOCKED,
            ))
            .ok(a(2));
            c.maps(&[(a(0), a(2), "rw-p"), (a(2), a(4), "rw-p")]);
            c.op(Op::Mlock {
                addr: a(0),
                len: 2 * P,
            })
            .ok(0);
            c.maps(&[(a(0), a(4), "rw-p")]);
        }),
        case("merge_noreserve_flags", "VM_NORESERVE merge", |c| {
            c.map(a(0), 2, RW);
            c.op(Op::mmap_anon(
                a(2),
                2 * P,
                RW,
                MAP_FIXED_NOREPLACE | MAP_NORESERVE,
            ))
            .ok(a(2));
            c.op(Op::Maps);
            c.op(Op::mmap_anon(
                a(4),
                2 * P,
                R,
                MAP_FIXED_NOREPLACE | MAP_NORESERVE,
            ))
            .ok(a(4));
            c.mprotect(a(4), 2 * P, RW).ok(0);
            c.op(Op::Maps);
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// THP placement
// ---------------------------------------------------------------------------------------------

fn thp_alignment_cases() -> Vec<Case> {
    vec![
        case("thp_align_no_hint", "B.8 (2)", |c| {
            c.op(Op::mmap_anon(0, H, RW, 0))
                .expect(Expect::MisplacedAligned(H));
            c.op(Op::mmap_anon(0, 2 * H, RW, 0))
                .expect(Expect::MisplacedAligned(H));
            c.op(Op::mmap_anon(0, 8 * H, R, 0))
                .expect(Expect::MisplacedAligned(H));
            c.op(Op::mmap_dev_zero(0, 2 * H, RW, 0))
                .expect(Expect::MisplacedAligned(H));
            c.op(Op::mmap_dev_zero(0, 3 * H / 2 + H, RW, 0))
                .expect(Expect::MisplacedAligned(H));
        }),
        case("thp_align_hint_honoured", "B.8 (2)", |c| {
            // With a free hint there is no alignment.
            c.op(Op::mmap_anon(a(3), H, RW, 0)).ok(a(3));
            c.op(Op::mmap_anon(a(3) + 2 * H, 2 * H, RW, 0))
                .ok(a(3) + 2 * H);
            c.maps(&[
                (a(3), a(3) + H, "rw-p"),
                (a(3) + 2 * H, a(3) + 4 * H, "rw-p"),
            ]);
        }),
        case(
            "thp_align_dev_zero_hint_padding",
            "__thp_get_unmapped_area",
            |c| {
                // /dev/zero asks for len + 2 MiB at the hint: free → the hint is used as is.
                c.op(Op::mmap_dev_zero(a(1), H, RW, 0)).ok(a(1));
                // Room for len but not for len + 2 MiB below a mapping: placed elsewhere.
                c.map(h(4), 1, RW);
                c.op(Op::mmap_dev_zero(h(4) - H - P, H, RW, 0));
                c.op(Op::Maps);
            },
        ),
        case("thp_align_small_not_padded", "B.8 (2)", |c| {
            c.map(h(1) + 4 * P, 1, RW);
            c.op(Op::mmap_anon(h(1) + 5 * P, 3 * H / 2, RW, 0))
                .ok(h(1) + 5 * P);
            c.op(Op::mmap_dev_zero(h(4) + P, 8 * P, RW, 0)).ok(h(4) + P);
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Less common flags
// ---------------------------------------------------------------------------------------------

fn flag_cases() -> Vec<Case> {
    vec![
        case("mmap_growsdown_checks", "do_mmap MAP_GROWSDOWN", |c| {
            // Neither a file nor shared anonymous memory may grow down.
            c.op(Op::mmap_dev_zero(
                a(0),
                2 * P,
                RW,
                MAP_FIXED_NOREPLACE | MAP_GROWSDOWN,
            ))
            .err(EINVAL);
            c.op(Op::Mmap(MmapArgs {
                addr: a(0),
                len: 2 * P,
                prot: RW,
                flags: MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | MAP_GROWSDOWN,
                source: MapSource::Anon,
                offset: 0,
            }))
            .err(EINVAL);
            c.op(Op::mmap_anon(
                a(300),
                4 * P,
                RW,
                MAP_FIXED_NOREPLACE | MAP_GROWSDOWN,
            ))
            .ok(a(300));
            c.op(Op::Maps);
            c.write(a(300), 4 * P, 3).ok(4 * P);
            c.read(a(300), 4 * P).expect(Expect::Bytes(3));
        }),
        case("mmap_growsdown_guard_gap_hint", "stack_guard_gap", |c| {
            c.op(Op::mmap_anon(
                a(600),
                4 * P,
                RW,
                MAP_FIXED_NOREPLACE | MAP_GROWSDOWN,
            ))
            .ok(a(600));
            // A hint just below the stack is inside its guard gap: not honoured.
            c.op(Op::mmap_anon(a(596), 4 * P, RW, 0));
            // Far enough below: honoured.
            c.op(Op::mmap_anon(a(300), 4 * P, RW, 0)).ok(a(300));
            c.op(Op::Maps);
        }),
        case("mmap_hugetlb_without_pool", "MAP_HUGETLB", |c| {
            c.op(Op::mmap_anon(
                h(4),
                H,
                RW,
                MAP_FIXED_NOREPLACE | MAP_HUGETLB,
            ));
            c.op(Op::Maps);
        }),
        case(
            "mmap_populate_locked_readonly",
            "MAP_POPULATE|MAP_LOCKED",
            |c| {
                c.op(Op::mmap_anon(
                    a(0),
                    2 * P,
                    R,
                    MAP_FIXED_NOREPLACE | MAP_LOCKED,
                ))
                .ok(a(0));
                c.counters(Some(2), Some(0), Some(0));
                c.op(Op::mmap_anon(
                    a(4),
                    2 * P,
                    PROT_NONE,
                    MAP_FIXED_NOREPLACE | MAP_LOCKED | MAP_POPULATE,
                ))
                .ok(a(4));
                c.counters(Some(2), Some(0), Some(0));
                c.mprotect(a(4), 2 * P, RW).ok(0);
                c.counters(Some(4), Some(8), Some(0));
                c.op(Op::mmap_anon(
                    a(8),
                    2 * P,
                    RW,
                    MAP_FIXED_NOREPLACE | MAP_POPULATE | 0x1_0000,
                ))
                .ok(a(8));
                c.counters(Some(4), Some(8), Some(0));
            },
        ),
        case(
            "shared_dev_zero_offset_sigbus",
            "shmem_zero_setup i_size",
            |c| {
                c.op(Op::Mmap(MmapArgs {
                    addr: a(0),
                    len: 4 * P,
                    prot: RW,
                    flags: MAP_SHARED | MAP_FIXED_NOREPLACE,
                    source: MapSource::DevZero,
                    offset: 2 * P,
                }))
                .ok(a(0));
                c.probe(a(0), 4 * P)
                    .expect(Expect::Probe(probe_vec("rw rw -- --")));
                c.madvise(a(0), 4 * P, MADV_POPULATE_READ).err(EFAULT);
                c.op(Op::Mlock {
                    addr: a(0),
                    len: 4 * P,
                })
                .err(ENOMEM);
                c.counters(Some(2), Some(8), Some(0));
            },
        ),
        case("thp_vma_split_splits_pmd", "vma_adjust_trans_huge", |c| {
            c.op(Op::mmap_anon_at(h(2), 2 * H, RW)).ok(h(2));
            c.madvise(h(2), 2 * H, MADV_HUGEPAGE).ok(0);
            c.write(h(2), 1, 1).ok(1);
            c.read(h(3), 1).expect(Expect::Data(vec![0]));
            c.counters(Some(2), Some(2048), Some(2048));
            c.madvise(h(2) + 16 * P, P, MADV_RANDOM).ok(0);
            c.madvise(h(3) + 16 * P, P, MADV_RANDOM).ok(0);
            c.counters(Some(2), Some(2048), Some(0));
            c.write(h(3) + P, 1, 1).ok(1);
            c.counters(Some(3), Some(2052), Some(0));
        }),
        case(
            "thp_zero_read_gives_anon_vma",
            "do_huge_pmd_anonymous_page",
            |c| {
                c.op(Op::mmap_anon_at(h(2), 2 * H, RW)).ok(h(2));
                c.madvise(h(2), 2 * H, MADV_HUGEPAGE).ok(0);
                c.read(h(2), 1);
                c.mprotect(h(2), 9 * P, PROT_NONE).ok(0);
                c.mprotect(h(2) + 6 * P, H, R).ok(0);
                c.maps(&[
                    (h(2), h(2) + 6 * P, "---p"),
                    (h(2) + 6 * P, h(3) + 6 * P, "r--p"),
                    (h(3) + 6 * P, h(4), "rw-p"),
                ]);
            },
        ),
    ]
}

/// Every fixed case.
pub fn all_cases() -> Vec<Case> {
    let mut v = Vec::new();
    v.extend(munmap_cases());
    v.extend(mmap_cases());
    v.extend(mprotect_cases());
    v.extend(madvise_cases());
    v.extend(mlock_cases());
    v.extend(zero_page_cases());
    v.extend(merge_cases());
    v.extend(thp_alignment_cases());
    v.extend(flag_cases());
    v.extend(addrspace::cases());
    v
}
