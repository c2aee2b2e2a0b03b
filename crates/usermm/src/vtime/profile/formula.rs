//! A profile figure's formula: the arithmetic that turns named inputs into the figure.
//!
//! A derived figure is only as trustworthy as the arithmetic between its inputs and its value,
//! and a value copied by hand drifts from the arithmetic it claims (the model audit found four
//! fault figures whose cited shares did not give the cited nanoseconds). So every figure of a
//! sourced profile writes its arithmetic down as a formula over the profile's `[inputs]`, and
//! the loader evaluates it and refuses a figure that disagrees with its own formula.
//!
//! The language is the smallest that the derivations need: decimal numbers (with an optional
//! exponent, `3e10`), input names
//! (`[a-z_][a-z0-9_]*`), `+ - * /`, unary minus and parentheses, with the usual precedence and
//! left associativity. No functions, no variables other than inputs: a formula reads as the
//! sentence in the figure's `source` that explains it.
//!
//! A formula is bounded, so that a hostile file cannot exhaust the stack of the recursive
//! parser, evaluator or destructor: at most [`MAX_TOKENS`] tokens and [`MAX_DEPTH`] levels of
//! nesting (parentheses and unary minuses). The longest derivation in the built-in profiles
//! has 17 tokens and one level of parentheses.

#![deny(unsafe_code)]

use std::collections::BTreeMap;

/// A parsed formula.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    Num(f64),
    Input(String),
    Neg(Box<Expr>),
    Bin(Box<Expr>, Op, Box<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Add,
    Sub,
    Mul,
    Div,
}

/// The most tokens a formula may have (numbers, names, operators, parentheses).
pub(crate) const MAX_TOKENS: usize = 1000;

/// The deepest a formula may nest: parentheses and unary minuses, each one level.
pub(crate) const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Name(String),
    Op(char),
    Open,
    Close,
}

fn tokens(text: &str) -> Result<Vec<Tok>, String> {
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some(&(i, c)) = chars.peek() {
        match c {
            ' ' | '\t' => {
                chars.next();
            }
            '+' | '-' | '*' | '/' => {
                out.push(Tok::Op(c));
                chars.next();
            }
            '(' => {
                out.push(Tok::Open);
                chars.next();
            }
            ')' => {
                out.push(Tok::Close);
                chars.next();
            }
            '0'..='9' | '.' => {
                let mut end = i;
                let mut prev = ' ';
                while let Some(&(j, d)) = chars.peek() {
                    // Digits, a point, and an exponent (`3e10`, `1e-5`: what `{:?}` prints).
                    let exponent_sign = (d == '-' || d == '+') && prev == 'e';
                    if d.is_ascii_digit() || d == '.' || d == 'e' || exponent_sign {
                        end = j + d.len_utf8();
                        prev = d;
                        chars.next();
                    } else {
                        break;
                    }
                }
                let lit = &text[i..end];
                let v: f64 = lit
                    .parse()
                    .map_err(|_| format!("`{lit}` is not a number"))?;
                out.push(Tok::Num(v));
            }
            'a'..='z' | '_' => {
                let mut end = i;
                while let Some(&(j, d)) = chars.peek() {
                    if d.is_ascii_lowercase() || d.is_ascii_digit() || d == '_' {
                        end = j + d.len_utf8();
                        chars.next();
                    } else {
                        break;
                    }
                }
                out.push(Tok::Name(text[i..end].to_string()));
            }
            other => return Err(format!("unexpected `{}`", other.escape_default())),
        }
        if out.len() > MAX_TOKENS {
            return Err(format!("is longer than {MAX_TOKENS} tokens"));
        }
    }
    Ok(out)
}

struct Parser {
    toks: Vec<Tok>,
    at: usize,
    /// Parentheses and unary minuses open around the current token.
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.at).cloned();
        self.at += 1;
        t
    }

    /// sum := product (('+' | '-') product)*
    fn sum(&mut self) -> Result<Expr, String> {
        self.left_assoc(&[('+', Op::Add), ('-', Op::Sub)], Self::product)
    }

    /// product := unary (('*' | '/') unary)*
    fn product(&mut self) -> Result<Expr, String> {
        self.left_assoc(&[('*', Op::Mul), ('/', Op::Div)], Self::unary)
    }

    /// One precedence level: `operand (op operand)*` for the operators `ops`, folded to the
    /// left.
    fn left_assoc(
        &mut self,
        ops: &[(char, Op)],
        operand: fn(&mut Self) -> Result<Expr, String>,
    ) -> Result<Expr, String> {
        let mut lhs = operand(self)?;
        while let Some(op) = match self.peek() {
            Some(Tok::Op(c)) => ops.iter().find(|(o, _)| o == c).map(|&(_, op)| op),
            _ => None,
        } {
            self.at += 1;
            let rhs = operand(self)?;
            lhs = Expr::Bin(Box::new(lhs), op, Box::new(rhs));
        }
        Ok(lhs)
    }

    /// One level deeper (a parenthesis or a unary minus), refused past [`MAX_DEPTH`].
    fn enter(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("nests deeper than {MAX_DEPTH} levels"));
        }
        Ok(())
    }

    /// unary := '-' unary | atom
    fn unary(&mut self) -> Result<Expr, String> {
        if let Some(Tok::Op('-')) = self.peek() {
            self.at += 1;
            self.enter()?;
            let e = Expr::Neg(Box::new(self.unary()?));
            self.depth -= 1;
            return Ok(e);
        }
        self.atom()
    }

    /// atom := number | name | '(' sum ')'
    fn atom(&mut self) -> Result<Expr, String> {
        match self.next() {
            Some(Tok::Num(v)) => Ok(Expr::Num(v)),
            Some(Tok::Name(n)) => Ok(Expr::Input(n)),
            Some(Tok::Open) => {
                self.enter()?;
                let e = self.sum()?;
                self.depth -= 1;
                match self.next() {
                    Some(Tok::Close) => Ok(e),
                    _ => Err("missing `)`".into()),
                }
            }
            Some(Tok::Close) => Err("unexpected `)`".into()),
            Some(Tok::Op(c)) => Err(format!("unexpected `{c}`")),
            None => Err("ends too early".into()),
        }
    }
}

impl Expr {
    /// Parses `text`; the error says what is wrong with it.
    pub(crate) fn parse(text: &str) -> Result<Expr, String> {
        let toks = tokens(text)?;
        if toks.is_empty() {
            return Err("is empty".into());
        }
        let mut p = Parser {
            toks,
            at: 0,
            depth: 0,
        };
        let e = p.sum()?;
        if p.at < p.toks.len() {
            return Err(format!("unexpected text after position {}", p.at));
        }
        Ok(e)
    }

    /// Every input name the formula reads, in order of appearance (repeats kept).
    pub(crate) fn inputs(&self) -> Vec<&str> {
        let mut out = Vec::new();
        fn walk<'a>(e: &'a Expr, out: &mut Vec<&'a str>) {
            match e {
                Expr::Num(_) => {}
                Expr::Input(n) => out.push(n),
                Expr::Neg(x) => walk(x, out),
                Expr::Bin(a, _, b) => {
                    walk(a, out);
                    walk(b, out);
                }
            }
        }
        walk(self, &mut out);
        out
    }

    /// The value over `inputs`; an unknown input or a division by zero is an error.
    pub(crate) fn eval(&self, inputs: &BTreeMap<String, f64>) -> Result<f64, String> {
        self.eval_with(&|n| inputs.get(n).copied())
    }

    /// The value, each input looked up by `input`.
    pub(crate) fn eval_with(&self, input: &dyn Fn(&str) -> Option<f64>) -> Result<f64, String> {
        Ok(match self {
            Expr::Num(v) => *v,
            Expr::Input(n) => {
                input(n).ok_or_else(|| format!("reads `{n}`, which is not in [inputs]"))?
            }
            Expr::Neg(x) => -x.eval_with(input)?,
            Expr::Bin(a, op, b) => {
                let (a, b) = (a.eval_with(input)?, b.eval_with(input)?);
                match op {
                    Op::Add => a + b,
                    Op::Sub => a - b,
                    Op::Mul => a * b,
                    Op::Div => {
                        if b == 0.0 {
                            return Err("divides by zero".into());
                        }
                        a / b
                    }
                }
            }
        })
    }
}

/// Evaluates `formula` in the profile's formula language, each input name looked up by
/// `input`: what a program that writes a profile (`usermm calibrate`) computes its figures
/// with, so that they agree with the loader's check by construction.
pub fn evaluate(formula: &str, input: &dyn Fn(&str) -> Option<f64>) -> Result<f64, String> {
    Expr::parse(formula)
        .and_then(|e| e.eval_with(input))
        .map_err(|m| format!("`{formula}` {m}"))
}

/// Does `value` (as written in the file) agree with `computed` (its formula)? To 0.05 of the
/// figure's unit or 0.1 %, whichever is larger: a file writes figures to one or two decimals.
pub(crate) fn agrees(value: f64, computed: f64) -> bool {
    (value - computed).abs() <= 0.05f64.max(computed.abs() * 1e-3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ins(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn precedence_associativity_and_unary_minus() {
        let i = ins(&[("a", 10.0), ("b", 4.0), ("c", 2.0)]);
        let ev = |s: &str| Expr::parse(s).unwrap().eval(&i).unwrap();
        assert_eq!(ev("a - b - c"), 4.0);
        assert_eq!(ev("a / b / c"), 1.25);
        assert_eq!(ev("a - b * c"), 2.0);
        assert_eq!(ev("(a - b) * c"), 12.0);
        assert_eq!(ev("-a + b"), -6.0);
        assert_eq!(ev("a * -c"), -20.0);
        assert_eq!(ev("229 * 0.406 * 2.6 / 2.5"), 229.0 * 0.406 * 2.6 / 2.5);
        assert_eq!(
            Expr::parse("a * (b + a) / c").unwrap().inputs(),
            ["a", "b", "a", "c"]
        );
    }

    #[test]
    fn malformed_formulas_say_what_is_wrong() {
        let bad = |s: &str| Expr::parse(s).unwrap_err();
        assert_eq!(bad(""), "is empty");
        assert_eq!(bad("a +"), "ends too early");
        assert_eq!(bad("(a + b"), "missing `)`");
        assert_eq!(bad("a b"), "unexpected text after position 1");
        assert_eq!(bad("1.2.3"), "`1.2.3` is not a number");
        assert_eq!(
            Expr::parse("1e-5 * 3e10").unwrap().eval(&ins(&[])).unwrap(),
            3e5
        );
        assert_eq!(bad("a % b"), "unexpected `%`");
        assert_eq!(bad("A"), "unexpected `A`");
        let i = ins(&[("a", 1.0), ("z", 0.0)]);
        assert_eq!(
            Expr::parse("a + q").unwrap().eval(&i).unwrap_err(),
            "reads `q`, which is not in [inputs]"
        );
        assert_eq!(
            Expr::parse("a / z").unwrap().eval(&i).unwrap_err(),
            "divides by zero"
        );
    }

    #[test]
    fn length_and_depth_are_bounded_without_exhausting_the_stack() {
        let bad = |s: &str| Expr::parse(s).unwrap_err();
        let deep = format!("{}1{}", "(".repeat(20_000), ")".repeat(20_000));
        assert_eq!(bad(&deep), format!("is longer than {MAX_TOKENS} tokens"));
        let deep = format!(
            "{}1{}",
            "(".repeat(MAX_DEPTH + 1),
            ")".repeat(MAX_DEPTH + 1)
        );
        assert_eq!(bad(&deep), format!("nests deeper than {MAX_DEPTH} levels"));
        assert_eq!(
            bad(&"-".repeat(MAX_DEPTH + 1)),
            format!("nests deeper than {MAX_DEPTH} levels")
        );
        assert_eq!(
            bad(&format!("1{}", " + 0".repeat(100_000))),
            format!("is longer than {MAX_TOKENS} tokens")
        );
        assert_eq!(
            bad(&"-".repeat(100_000)),
            format!("is longer than {MAX_TOKENS} tokens")
        );
        // At the bounds, a formula parses and evaluates.
        let ok = format!("{}1{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
        assert_eq!(Expr::parse(&ok).unwrap().eval(&ins(&[])).unwrap(), 1.0);
        let terms = (MAX_TOKENS - 1) / 2;
        let long = format!("1{}", " + 1".repeat(terms));
        assert_eq!(
            Expr::parse(&long).unwrap().eval(&ins(&[])).unwrap(),
            (terms + 1) as f64
        );
    }

    #[test]
    fn agreement_is_to_the_written_precision() {
        assert!(agrees(96.7, 96.74));
        assert!(!agrees(96.7, 96.8));
        assert!(agrees(1500.0, 1501.4));
        assert!(!agrees(50.0, 96.7));
    }
}
