//! Comparing two backends' answers: [`compare`] says whether two [`OpResult`]s agree and, if
//! not, why in words a reader can act on; [`run_differential`] applies one op sequence to two
//! backends and stops at the first disagreement ([`Divergence`]).
//!
//! What "agree" means is fixed here for every test: equal variants with equal contents, except
//! that maps are compared after [`normalize_maps`] (arena lines, no device or inode), counters
//! only on the arena fields and `minor_faults`, and two `Misplaced` results agree wherever the
//! kernel put the mapping. A `BackendFailure` agrees with nothing.

use std::fmt;

use crate::ops::{normalize_maps, AddressSpace, Counters, MapsLine, Op, OpResult, PageAccess};

/// Do two results agree? `Err` carries a readable explanation.
///
/// Rules: equal variants with equal contents, except that maps are compared after
/// [`normalize_maps`], counters only on the arena fields and `minor_faults`, and two `Misplaced`
/// agree whatever their addresses. `BackendFailure` never agrees.
pub fn compare(a: &OpResult, b: &OpResult) -> Result<(), String> {
    use OpResult as R;
    match (a, b) {
        (R::BackendFailure(m), _) | (_, R::BackendFailure(m)) => {
            Err(format!("backend failure: {m}"))
        }
        (R::Ok(x), R::Ok(y)) if x == y => Ok(()),
        (R::Err(x), R::Err(y)) if x == y => Ok(()),
        (R::Fault { addr: x }, R::Fault { addr: y }) if x == y => Ok(()),
        (R::Misplaced { .. }, R::Misplaced { .. }) => Ok(()),
        (R::Data(x), R::Data(y)) => diff_data(x, y),
        (R::Probe(x), R::Probe(y)) => diff_probe(x, y),
        (R::Maps(x), R::Maps(y)) => diff_maps(&normalize_maps(x), &normalize_maps(y)),
        (R::Counters(x), R::Counters(y)) => diff_counters(x, y),
        _ => Err(format!("{} vs {}", short(a), short(b))),
    }
}

fn short(r: &OpResult) -> String {
    match r {
        OpResult::Maps(l) => format!("Maps({} lines)", l.len()),
        OpResult::Probe(p) if p.len() > 16 => format!("Probe({} pages)", p.len()),
        _ => r.to_string(),
    }
}

fn diff_data(x: &[u8], y: &[u8]) -> Result<(), String> {
    diff_slices(
        x,
        y,
        |a, b| format!("data length {a} vs {b}; "),
        |differing| match differing.first() {
            Some(&(first, p, q)) => format!(
                "{} differing bytes; first at offset {first:#x}: {p:#04x} vs {q:#04x}",
                differing.len()
            ),
            None => String::new(),
        },
    )
}

fn diff_probe(x: &[PageAccess], y: &[PageAccess]) -> Result<(), String> {
    diff_slices(
        x,
        y,
        |a, b| format!("probe covers {a} vs {b} pages; "),
        |differing| {
            let bad: Vec<String> = differing
                .iter()
                .take(8)
                .map(|&(_, p, q)| {
                    if p.addr != q.addr {
                        format!("page {:#x} vs page {:#x}", p.addr, q.addr)
                    } else {
                        format!("{:#x}: {} vs {}", p.addr, p.perms(), q.perms())
                    }
                })
                .collect();
            bad.join(", ")
        },
    )
}

/// `Ok` when `x` and `y` are equal; else `Err` with `lengths` of the two lengths when they
/// differ, followed by `detail` of the elements that differ at the same index (`(index, x's,
/// y's)`, in order, up to the shorter length).
fn diff_slices<T: PartialEq>(
    x: &[T],
    y: &[T],
    lengths: impl FnOnce(usize, usize) -> String,
    detail: impl FnOnce(&[(usize, &T, &T)]) -> String,
) -> Result<(), String> {
    if x == y {
        return Ok(());
    }
    let mut msg = String::new();
    if x.len() != y.len() {
        msg.push_str(&lengths(x.len(), y.len()));
    }
    let differing: Vec<(usize, &T, &T)> = x
        .iter()
        .zip(y)
        .enumerate()
        .filter(|(_, (p, q))| p != q)
        .map(|(i, (p, q))| (i, p, q))
        .collect();
    msg.push_str(&detail(&differing));
    Err(msg)
}

fn diff_maps(x: &[MapsLine], y: &[MapsLine]) -> Result<(), String> {
    if x == y {
        return Ok(());
    }
    let mut msg = String::from("maps differ (- only in the first, + only in the second):\n");
    for l in x {
        let mark = if y.contains(l) { ' ' } else { '-' };
        msg.push_str(&format!("{mark} {l}\n"));
    }
    for l in y.iter().filter(|l| !x.contains(l)) {
        msg.push_str(&format!("+ {l}\n"));
    }
    Err(msg)
}

fn diff_counters(x: &Counters, y: &Counters) -> Result<(), String> {
    let mut d = Vec::new();
    if x.minor_faults != y.minor_faults {
        d.push(format!(
            "minor_faults {} vs {}",
            x.minor_faults, y.minor_faults
        ));
    }
    if x.rss_kb != y.rss_kb {
        d.push(format!("arena rss {} kB vs {} kB", x.rss_kb, y.rss_kb));
    }
    if x.anon_huge_kb != y.anon_huge_kb {
        d.push(format!(
            "arena AnonHugePages {} kB vs {} kB",
            x.anon_huge_kb, y.anon_huge_kb
        ));
    }
    if d.is_empty() {
        Ok(())
    } else {
        Err(d.join(", "))
    }
}

/// The first op on which two backends disagreed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// Index of the op in the sequence.
    pub index: usize,
    pub op: Op,
    pub a_name: String,
    pub b_name: String,
    pub a: OpResult,
    pub b: OpResult,
    /// The explanation from [`compare`].
    pub diff: String,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "op #{} {}:", self.index, self.op)?;
        writeln!(f, "  {}: {}", self.a_name, short(&self.a))?;
        writeln!(f, "  {}: {}", self.b_name, short(&self.b))?;
        write!(f, "  {}", self.diff)
    }
}

impl std::error::Error for Divergence {}

/// Apply `ops` to both backends in order; stop at the first disagreement. On success returns the
/// results of `a`.
pub fn run_differential(
    a: &mut dyn AddressSpace,
    b: &mut dyn AddressSpace,
    ops: &[Op],
) -> Result<Vec<OpResult>, Box<Divergence>> {
    let mut out = Vec::with_capacity(ops.len());
    for (index, op) in ops.iter().enumerate() {
        let ra = a.apply(op);
        let rb = b.apply(op);
        if let Err(diff) = compare(&ra, &rb) {
            return Err(Box::new(Divergence {
                index,
                op: op.clone(),
                a_name: a.name().to_string(),
                b_name: b.name().to_string(),
                a: ra,
                b: rb,
                diff,
            }));
        }
        out.push(ra);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use usermm_host::HostBackend;

    use crate::ops::{ARENA_BASE, EINVAL, ENOMEM, PAGE_SIZE as P, PROT_READ, PROT_WRITE};

    const RW: u32 = PROT_READ | PROT_WRITE;

    /// Arena address `n` pages in.
    fn at(n: u64) -> u64 {
        ARENA_BASE + n * P
    }

    #[test]
    fn normalisation_and_compare() {
        let dz = MapsLine {
            path: "/dev/zero".into(),
            dev_major: 0,
            dev_minor: 5,
            inode: 4,
            ..MapsLine::anon(ARENA_BASE, ARENA_BASE + 0x1000, "rw-p")
        };
        let outside = MapsLine::anon(0x1000, 0x2000, "r--p");
        let a = OpResult::Maps(vec![outside.clone(), dz.clone()]);
        let b = OpResult::Maps(vec![dz.normalized()]);
        assert_eq!(compare(&a, &b), Ok(()));
        let c = OpResult::Maps(vec![MapsLine::anon(
            ARENA_BASE,
            ARENA_BASE + 0x1000,
            "r--p",
        )]);
        let e = compare(&a, &c).unwrap_err();
        assert!(e.contains("- 300000000000"), "{e}");
        assert!(e.contains("+ 300000000000"), "{e}");

        assert_eq!(
            compare(&OpResult::Err(EINVAL), &OpResult::Err(EINVAL)),
            Ok(())
        );
        let e = compare(&OpResult::Err(EINVAL), &OpResult::Err(ENOMEM)).unwrap_err();
        assert!(e.contains("EINVAL") && e.contains("ENOMEM"), "{e}");
        let e = compare(
            &OpResult::Data(vec![0, 1, 2]),
            &OpResult::Data(vec![0, 1, 3]),
        )
        .unwrap_err();
        assert!(e.contains("offset 0x2"), "{e}");
        assert!(compare(
            &OpResult::Misplaced { addr: 1 },
            &OpResult::Misplaced { addr: 2 }
        )
        .is_ok());
        let f = OpResult::BackendFailure("x".into());
        assert!(compare(&f, &f).is_err());
        let c1 = Counters {
            process_rss_kb: 100,
            ..Counters::default()
        };
        assert!(compare(
            &OpResult::Counters(c1),
            &OpResult::Counters(Counters::default())
        )
        .is_ok());
    }

    #[test]
    fn two_host_backends_agree() {
        let mut a = HostBackend::new().unwrap();
        let mut b = HostBackend::with_name("host2").unwrap();
        let x = at(3);
        let ops = vec![
            Op::mmap_anon_at(x, 8 * P, RW),
            Op::Write {
                addr: x + 5,
                data: b"hello".to_vec(),
            },
            Op::Mprotect {
                addr: x + 2 * P,
                len: 2 * P,
                prot: PROT_READ,
            },
            Op::Read { addr: x, len: 16 },
            Op::Probe {
                addr: x,
                len: 8 * P,
            },
            Op::Munmap {
                addr: x + 6 * P,
                len: 0,
            },
            Op::Maps,
            Op::Counters,
        ];
        let r = run_differential(&mut a, &mut b, &ops).unwrap_or_else(|d| panic!("{d}"));
        assert_eq!(r[5], OpResult::Err(EINVAL));
    }
}
