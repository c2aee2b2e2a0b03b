//! Provenance: each figure of a profile recomputed from the inputs it names.
//!
//! A profile's `[inputs]` hold the numbers it is built from — measurements with their command,
//! publications with their citation, assumptions with their reason — and each figure gives the
//! `formula` that turns them into its value. The loader ([`check`]) evaluates every formula and
//! refuses a profile in which a figure disagrees with its own arithmetic or an input is
//! malformed. So editing one number in a profile — a figure, or an input its figure depends
//! on — makes the profile fail to load. The built-in profiles' tests (`test_provenance.rs`)
//! go further: every published input pinned to its value and citation, every measured one
//! naming its program.
//!
//! Besides the inputs, a formula may read `topology_ghz`, the profile's own clock.
//!
//! Every profile, built in or a user's, is held to the same rules when it loads: a formula on
//! every figure, the formula's units giving the figure's (`units.rs`), and no input that
//! nothing reads (a number nobody uses is a number nobody checks).

#![deny(unsafe_code)]

use std::collections::BTreeMap;

use serde::Serialize;

use super::formula::{agrees, Expr};
use super::units;
use super::{Figure, InputKind, ProfileError, ProfileSpec};

/// The name by which a formula reads the profile's own `topology.ghz` (so that a figure
/// scaled from another machine's clock to this one's states both clocks).
pub const TOPOLOGY_GHZ: &str = "topology_ghz";

/// One figure with its value (in the unit the file writes it in), its formula and what the
/// formula gives: the provenance table of a profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FormulaRow {
    /// The figure's field, as an error would name it (`costs.zap_pte`, `locks."zone.lock"`).
    pub field: String,
    /// The value as written.
    pub value: f64,
    /// `ns`, `cycles`, `bytes_per_ns`, `factor`, `lines` or `percent`.
    pub unit: &'static str,
    pub formula: Option<String>,
    /// The formula evaluated over the inputs (None without a formula).
    pub computed: Option<f64>,
    /// The inputs the formula reads, each once, in order of appearance.
    pub inputs: Vec<String>,
}

fn figure_value(f: &Figure) -> (f64, &'static str) {
    match (f.ns, f.cycles, f.bytes_per_ns) {
        (Some(v), _, _) => (v, "ns"),
        (_, Some(v), _) => (v, "cycles"),
        (_, _, Some(v)) => (v, "bytes_per_ns"),
        _ => (f64::NAN, "ns"),
    }
}

/// Every figure of `spec` with its formula, unevaluated: (field, value, unit, formula).
fn figures(spec: &ProfileSpec) -> Vec<(String, f64, &'static str, Option<&str>)> {
    let mut rows = Vec::new();
    for (name, f) in [
        ("transfer.smt_sibling", &spec.transfer.smt_sibling),
        ("transfer.same_socket", &spec.transfer.same_socket),
        ("transfer.other_socket", &spec.transfer.other_socket),
        ("wakeup", &spec.wakeup),
        ("atomic_rmw", &spec.atomic_rmw),
    ] {
        let (v, unit) = figure_value(f);
        rows.push((name.to_string(), v, unit, f.formula.as_deref()));
    }
    rows.push((
        "smt.sibling_factor".into(),
        spec.smt.sibling_factor,
        "factor",
        spec.smt.formula.as_deref(),
    ));
    if let Some(m) = &spec.memory {
        for (name, f) in [
            ("memory.dram_local", &m.dram_local),
            ("memory.dram_remote", &m.dram_remote),
            ("memory.dram_stream", &m.dram_stream),
        ] {
            let (v, unit) = figure_value(f);
            rows.push((name.to_string(), v, unit, f.formula.as_deref()));
        }
        for (name, q) in [
            ("memory.llc_lines", &m.llc_lines),
            ("memory.l2_lines", &m.l2_lines),
        ] {
            rows.push((name.to_string(), q.value, "lines", q.formula.as_deref()));
        }
    }
    if let Some(q) = &spec.jitter {
        rows.push(("jitter".into(), q.value, "percent", q.formula.as_deref()));
    }
    for (name, l) in &spec.locks {
        let (v, unit) = match (l.acquire_ns, l.acquire_cycles) {
            (Some(v), _) => (v, "ns"),
            (_, Some(v)) => (v, "cycles"),
            _ => (f64::NAN, "ns"),
        };
        rows.push((format!("locks.\"{name}\""), v, unit, l.formula.as_deref()));
    }
    for (key, f) in &spec.costs {
        let (v, unit) = figure_value(f);
        rows.push((format!("costs.{key}"), v, unit, f.formula.as_deref()));
    }
    rows
}

fn is_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some('a'..='z' | '_'))
        && c.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The provenance table: every figure, its formula and what the formula gives. Call only on
/// a spec that [`check`] accepted (a malformed formula shows as no computed value).
pub(super) fn rows(spec: &ProfileSpec) -> Vec<FormulaRow> {
    let mut values: BTreeMap<String, f64> = spec
        .inputs
        .iter()
        .map(|(k, i)| (k.clone(), i.value))
        .collect();
    values.insert(TOPOLOGY_GHZ.into(), spec.topology.ghz);
    figures(spec)
        .into_iter()
        .map(|(field, value, unit, formula)| {
            let parsed = formula.and_then(|f| Expr::parse(f).ok());
            let computed = parsed.as_ref().and_then(|e| e.eval(&values).ok());
            let mut inputs: Vec<String> = Vec::new();
            for n in parsed.iter().flat_map(|e| e.inputs()) {
                if !inputs.iter().any(|i| i == n) {
                    inputs.push(n.to_string());
                }
            }
            FormulaRow {
                field,
                value,
                unit,
                formula: formula.map(str::to_string),
                computed,
                inputs,
            }
        })
        .collect()
}

/// Checks the inputs and every formula of `spec`; the error names the field.
pub(super) fn check(
    spec: &ProfileSpec,
    invalid: &impl Fn(&str, String) -> ProfileError,
) -> Result<(), ProfileError> {
    let mut values = BTreeMap::new();
    values.insert(TOPOLOGY_GHZ.to_string(), spec.topology.ghz);
    for (name, i) in &spec.inputs {
        let field = format!("inputs.{name}");
        if name == TOPOLOGY_GHZ {
            return Err(invalid(
                &field,
                format!(
                    "`{TOPOLOGY_GHZ}` is the profile's own topology.ghz; name the input otherwise"
                ),
            ));
        }
        if !is_name(name) {
            return Err(invalid(
                &field,
                "an input's name is lower case letters, digits and `_`, starting with a letter"
                    .into(),
            ));
        }
        if !i.value.is_finite() {
            return Err(invalid(
                &format!("{field}.value"),
                format!("must be a finite number (got {})", i.value),
            ));
        }
        if i.unit.trim().is_empty() {
            return Err(invalid(
                &format!("{field}.unit"),
                "must say what the number counts".into(),
            ));
        }
        if i.source.trim().is_empty() {
            return Err(invalid(
                &format!("{field}.source"),
                "must say where the number comes from".into(),
            ));
        }
        if i.kind == InputKind::Inferred {
            return Err(invalid(
                &format!("{field}.kind"),
                "a profile's own inputs are measured, published or assumed; inferred \
                 factors live in an era file (`era = \"NAME\"`)"
                    .into(),
            ));
        }
        if !i.rows.is_empty() {
            return Err(invalid(
                &format!("{field}.rows"),
                "only an inferred input names training rows".into(),
            ));
        }
        values.insert(name.clone(), i.value);
    }
    let unit_of = |n: &str| {
        if n == TOPOLOGY_GHZ {
            return units::dim_of("GHz");
        }
        spec.inputs.get(n).and_then(|i| units::dim_of(&i.unit))
    };
    let mut read = std::collections::BTreeSet::new();
    for (field, value, unit, formula) in figures(spec) {
        let Some(text) = formula else {
            return Err(invalid(
                &format!("{field}.formula"),
                "missing: every figure gives the arithmetic that makes it from [inputs]".into(),
            ));
        };
        let bad = |m: String| {
            invalid(
                &format!("{field}.formula"),
                format!("`{}` {m}", shown(text)),
            )
        };
        let e = Expr::parse(text).map_err(bad)?;
        units::check(&e, unit, &unit_of).map_err(bad)?;
        read.extend(e.inputs().into_iter().map(str::to_string));
        let computed = e.eval(&values).map_err(bad)?;
        if !agrees(value, computed) {
            return Err(invalid(
                &field,
                format!(
                    "the figure says {value} {unit}, its formula `{}` gives {computed:.4} \
                     (change the inputs, not the result)",
                    shown(text)
                ),
            ));
        }
    }
    if let Some(name) = unread_inputs(spec, &read).first() {
        return Err(invalid(
            &format!("inputs.{name}"),
            "no formula reads it (a number nobody uses is a number nobody checks)".into(),
        ));
    }
    Ok(())
}

/// A formula as an error line quotes it: whole, or its first 60 characters and its length
/// (a hostile file's 100 000-term formula would otherwise be the line).
fn shown(text: &str) -> String {
    const MAX: usize = 80;
    if text.chars().count() <= MAX {
        return text.to_string();
    }
    let head: String = text.chars().take(60).collect();
    format!("{head}... ({} characters)", text.chars().count())
}

/// The inputs of `spec` that nothing reads, given the inputs the formulas read (`read`).
/// The one place that knows what reads an input: an input another part of a profile reads
/// (outside its formulas) is to be counted here.
fn unread_inputs<'a>(
    spec: &'a ProfileSpec,
    read: &std::collections::BTreeSet<String>,
) -> Vec<&'a str> {
    spec.inputs
        .keys()
        .filter(|k| !read.contains(*k))
        .map(String::as_str)
        .collect()
}
