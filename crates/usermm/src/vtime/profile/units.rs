//! The units of a profile's formulas: what a formula's inputs measure must give what its
//! figure measures (an `unit = "GHz"` on an input that a figure in ns reads alone is a
//! mistake the arithmetic cannot see).
//!
//! A unit is a product of powers of four dimensions: time (`ns`), cycles, bytes and
//! "lines" (a cache line is 64 bytes, but `llc_bytes / 64` is lines only by that constant).
//! The units a profile writes map to them:
//!
//! | unit | dimension |
//! |---|---|
//! | `ns`, `ns/page`, `ns/fault`, `ns/load` (a cost is per step) | time |
//! | `cycles` | cycles |
//! | `GHz` | cycles / time |
//! | `bytes`, `KiB`, `MiB` | bytes |
//! | `bytes/ns` (a figure's `bytes_per_ns`) | bytes / time |
//! | `lines` | lines |
//! | `factor`, `percent`, `share` and `share of ...`, `count` | none |
//!
//! A number in a formula has no dimension, except that a number beside bytes or lines may
//! convert them (64 bytes a line, 4096 bytes a page: `l2_bytes / 64` is lines, `4096 /
//! clear_bandwidth` is ns a page), so there only time and cycles are compared. Sums need
//! equal dimensions. A unit outside the table is not
//! checked (a formula that reads it gives an unknown unit), so that a kind of input this
//! table does not know yet is not refused for it.

#![deny(unsafe_code)]

use super::formula::{Expr, Op};

/// Powers of (time, cycles, bytes, lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dim([i8; 4]);

const NONE: Dim = Dim([0, 0, 0, 0]);

impl Dim {
    fn mul(self, o: Dim, sign: i8) -> Dim {
        let mut d = self.0;
        for (a, b) in d.iter_mut().zip(o.0) {
            *a = a.saturating_add(sign.saturating_mul(b));
        }
        Dim(d)
    }

    /// Equal; where `loose` (a number scaled bytes or lines: 64 bytes a line, 4096 a page),
    /// in time and cycles only.
    fn agrees(self, o: Dim, loose: bool) -> bool {
        if loose {
            let fold = |d: [i8; 4]| [d[0], d[1]];
            fold(self.0) == fold(o.0)
        } else {
            self == o
        }
    }

    /// The unit as written: `ns`, `cycles/ns`, `bytes`, `1`.
    pub(crate) fn show(self) -> String {
        let names = ["ns", "cycles", "bytes", "lines"];
        let mut up = Vec::new();
        let mut down = Vec::new();
        for (n, p) in names.iter().zip(self.0) {
            let s = if p.abs() == 1 {
                n.to_string()
            } else {
                format!("{n}^{}", p.abs())
            };
            match p {
                0 => {}
                p if p > 0 => up.push(s),
                _ => down.push(s),
            }
        }
        let up = if up.is_empty() {
            "1".to_string()
        } else {
            up.join("·")
        };
        if down.is_empty() {
            up
        } else {
            format!("{up}/{}", down.join("·"))
        }
    }
}

/// The dimension of a unit as a profile writes it; `None` for a unit the table does not know.
pub(crate) fn dim_of(unit: &str) -> Option<Dim> {
    let u = unit.trim();
    if u.starts_with("share") {
        return Some(NONE);
    }
    Some(match u {
        "ns" | "ns/page" | "ns/fault" | "ns/load" => Dim([1, 0, 0, 0]),
        "cycles" => Dim([0, 1, 0, 0]),
        "GHz" => Dim([-1, 1, 0, 0]),
        "bytes" | "KiB" | "MiB" => Dim([0, 0, 1, 0]),
        "bytes/ns" | "bytes_per_ns" => Dim([-1, 0, 1, 0]),
        "lines" => Dim([0, 0, 0, 1]),
        "factor" | "percent" | "count" => NONE,
        _ => return None,
    })
}

/// What [`infer`] knows of a sub-formula.
#[derive(Clone, Copy)]
struct Inferred {
    /// Its dimension (`None`: it reads an input of a unit the table does not know).
    dim: Option<Dim>,
    /// A number scaled bytes or lines on the way (so only time and cycles are compared).
    loose: bool,
    /// It reads no input: a constant takes whatever dimension it is added to or stands for
    /// (`0` as a lock's figure in ns, `x + 0.5` where `x` is in ns).
    constant: bool,
}

/// The dimension of `e`, each input's by `input`; the error names the sum that adds two
/// dimensions.
fn infer(e: &Expr, input: &dyn Fn(&str) -> Option<Dim>) -> Result<Inferred, String> {
    Ok(match e {
        Expr::Num(_) => Inferred {
            dim: Some(NONE),
            loose: false,
            constant: true,
        },
        Expr::Input(n) => Inferred {
            dim: input(n),
            loose: false,
            constant: false,
        },
        Expr::Neg(x) => infer(x, input)?,
        Expr::Bin(a, op, b) => {
            let (a_, b_) = (infer(a, input)?, infer(b, input)?);
            let loose = a_.loose || b_.loose;
            let constant = a_.constant && b_.constant;
            let dim = match op {
                Op::Add | Op::Sub if a_.constant => b_.dim,
                Op::Add | Op::Sub if b_.constant => a_.dim,
                Op::Add | Op::Sub => match (a_.dim, b_.dim) {
                    (Some(x), Some(y)) if !x.agrees(y, loose) => {
                        return Err(format!("adds {} to {}", x.show(), y.show()))
                    }
                    (Some(x), Some(_)) => Some(x),
                    _ => None,
                },
                Op::Mul | Op::Div => {
                    let sign = if *op == Op::Mul { 1 } else { -1 };
                    match (a_.dim, b_.dim) {
                        (Some(x), Some(y)) => Some(x.mul(y, sign)),
                        _ => None,
                    }
                }
            };
            // A number beside bytes or lines may convert them (64 bytes a line, 4096 a page).
            let bytes = |d: Option<Dim>| d.is_some_and(|d| d.0[2] != 0 || d.0[3] != 0);
            let converts = matches!(op, Op::Mul | Op::Div)
                && (a_.constant || b_.constant)
                && (bytes(a_.dim) || bytes(b_.dim));
            Inferred {
                dim,
                loose: loose || converts,
                constant,
            }
        }
    })
}

/// Whether `e`, its inputs' units by `input`, gives `unit` (the figure's); the error says
/// what it gives instead. Unknown units are not checked, nor is a formula of numbers alone.
pub(crate) fn check(
    e: &Expr,
    unit: &str,
    input: &dyn Fn(&str) -> Option<Dim>,
) -> Result<(), String> {
    let got = infer(e, input)?;
    match (got.dim, dim_of(unit)) {
        (Some(g), Some(want)) if !got.constant && !g.agrees(want, got.loose) => Err(format!(
            "its inputs' units give {}, but the figure is in {unit}",
            g.show()
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn units(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<Dim> {
        move |n| {
            pairs
                .iter()
                .find(|(k, _)| *k == n)
                .and_then(|(_, u)| dim_of(u))
        }
    }

    #[test]
    fn a_formula_gives_its_figure_s_unit() {
        let u = units(&[
            ("munmap", "ns/page"),
            ("share", "share of munmap"),
            ("host_ghz", "GHz"),
            ("cyc", "cycles"),
            ("kib", "KiB"),
            ("bw", "bytes/ns"),
            ("odd", "furlongs"),
        ]);
        let ok = |f: &str, unit: &str| check(&Expr::parse(f).unwrap(), unit, &u);
        assert_eq!(ok("munmap * share * host_ghz / topology_ghz", "ns"), Ok(()));
        assert_eq!(ok("cyc / host_ghz", "ns"), Ok(()));
        assert_eq!(ok("kib * 1024 / 64", "lines"), Ok(()));
        assert_eq!(ok("4096 / bw", "ns"), Ok(()));
        assert_eq!(
            ok("4096 / bw", "cycles"),
            Err("its inputs' units give ns/bytes, but the figure is in cycles".into())
        );
        assert_eq!(ok("odd * 2", "ns"), Ok(()));
        assert_eq!(
            ok("host_ghz", "ns"),
            Err("its inputs' units give cycles/ns, but the figure is in ns".into())
        );
        assert_eq!(ok("munmap + cyc", "ns"), Err("adds ns to cycles".into()));
        assert_eq!(ok("0", "ns"), Ok(()));
        assert_eq!(ok("munmap + 0.5", "ns"), Ok(()));
        assert_eq!(ok("(1 + 2) * munmap", "ns"), Ok(()));
        assert_eq!(
            ok("munmap + 0.5", "cycles"),
            Err("its inputs' units give ns, but the figure is in cycles".into())
        );
    }
}
