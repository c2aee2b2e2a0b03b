//! `--scale-cost`: a profile with one figure multiplied, its formula scaled with it (so the
//! scaled profile still states its arithmetic and still loads). Used by sensitivity runs;
//! the scaled profile lives in memory only.

#![deny(unsafe_code)]

use std::collections::BTreeMap;

use super::formula::agrees;
use super::{evaluate, Figure, Profile, ProfileError, TOPOLOGY_GHZ};

impl Profile {
    /// This profile with one named cost multiplied by `factor`, everything else unchanged: the
    /// sensitivity of a prediction to one constant. `key` is a cost's key (`zap_pte`), or
    /// `transfer.smt_sibling` / `transfer.same_socket` / `transfer.other_socket`, `wakeup`,
    /// `atomic_rmw`, `smt.sibling_factor` (the slowdown above 1 is scaled: 1.6 x 1.5 → 1.9),
    /// `locks.NAME` (the uncontended acquire), `memory.dram_local` / `memory.dram_remote` /
    /// `memory.dram_stream` / `memory.llc_lines` / `memory.l2_lines`, or `jitter` (the last
    /// three multiply a count or a spread, not a time). A cost given as a bandwidth has its
    /// bandwidth divided by `factor`, so that the time it stands for is multiplied. The name
    /// gains ` (KEY xFACTOR)` so that every report says which profile it modelled.
    pub fn scaled(&self, key: &str, factor: f64) -> Result<Profile, ProfileError> {
        let invalid = |message: String| ProfileError::Invalid {
            origin: self.origin.clone(),
            field: key.to_string(),
            message,
        };
        if !(factor.is_finite() && factor > 0.0) {
            return Err(invalid(format!(
                "scale factor must be positive (got {factor})"
            )));
        }
        let mut spec = self.spec.clone();
        // A formula follows its figure: `(formula) * factor`, so the scaled profile still
        // states its arithmetic (and still loads). The figure is the file's times the factor
        // while that still agrees with the scaled formula; where it does not (a figure written
        // to 0.03 of its formula, times 4, misses it by 0.12) it is the scaled formula's value.
        // So a factor of 1 changes nothing.
        let inputs: BTreeMap<String, f64> = spec
            .inputs
            .iter()
            .map(|(k, i)| (k.clone(), i.value))
            .chain([(TOPOLOGY_GHZ.to_string(), spec.topology.ghz)])
            .collect();
        let settle = |value: &mut f64, formula: &Option<String>| {
            if let Some(v) = formula
                .as_deref()
                .and_then(|f| evaluate(f, &|n| inputs.get(n).copied()).ok())
                .filter(|v| !agrees(*value, *v))
            {
                *value = v;
            }
        };
        let times = |formula: &mut Option<String>, op: &str| {
            if let Some(f) = formula.as_mut() {
                *f = format!("({f}) {op} {factor:?}");
            }
        };
        let scale_fig = |f: &mut Figure| {
            times(
                &mut f.formula,
                if f.bytes_per_ns.is_some() { "/" } else { "*" },
            );
            if let Some(v) = f.ns.as_mut() {
                *v *= factor;
                settle(v, &f.formula);
            }
            if let Some(v) = f.cycles.as_mut() {
                *v *= factor;
                settle(v, &f.formula);
            }
            if let Some(v) = f.bytes_per_ns.as_mut() {
                *v /= factor;
                settle(v, &f.formula);
            }
        };
        match key {
            "transfer.smt_sibling" => scale_fig(&mut spec.transfer.smt_sibling),
            "transfer.same_socket" => scale_fig(&mut spec.transfer.same_socket),
            "transfer.other_socket" => scale_fig(&mut spec.transfer.other_socket),
            "wakeup" => scale_fig(&mut spec.wakeup),
            "atomic_rmw" => scale_fig(&mut spec.atomic_rmw),
            "memory.dram_local" | "memory.dram_remote" | "memory.dram_stream" => {
                let Some(m) = spec.memory.as_mut() else {
                    return Err(invalid("this profile has no [memory]".into()));
                };
                scale_fig(match key {
                    "memory.dram_local" => &mut m.dram_local,
                    "memory.dram_remote" => &mut m.dram_remote,
                    _ => &mut m.dram_stream,
                });
            }
            "memory.llc_lines" | "memory.l2_lines" | "jitter" => {
                let q = match key {
                    "jitter" => spec.jitter.as_mut(),
                    "memory.llc_lines" => spec.memory.as_mut().map(|m| &mut m.llc_lines),
                    _ => spec.memory.as_mut().map(|m| &mut m.l2_lines),
                };
                let Some(q) = q else {
                    return Err(invalid(format!("this profile has no `{key}`")));
                };
                q.value *= factor;
                times(&mut q.formula, "*");
                settle(&mut q.value, &q.formula);
            }
            "smt.sibling_factor" => {
                spec.smt.sibling_factor = 1.0 + (spec.smt.sibling_factor - 1.0) * factor;
                if let Some(f) = spec.smt.formula.as_mut() {
                    *f = format!("1 + (({f}) - 1) * {factor:?}");
                }
                settle(&mut spec.smt.sibling_factor, &spec.smt.formula);
            }
            _ => {
                let cost = key.strip_prefix("costs.").unwrap_or(key);
                if let Some(f) = spec.costs.get_mut(cost) {
                    scale_fig(f);
                } else if let Some(l) = key
                    .strip_prefix("locks.")
                    .map(|n| n.trim_matches('"'))
                    .and_then(|n| spec.locks.get_mut(n))
                {
                    times(&mut l.formula, "*");
                    if let Some(v) = l.acquire_ns.as_mut() {
                        *v *= factor;
                        settle(v, &l.formula);
                    }
                    if let Some(v) = l.acquire_cycles.as_mut() {
                        *v *= factor;
                        settle(v, &l.formula);
                    }
                } else {
                    return Err(invalid(
                        "no such cost (a cost key, transfer.*, wakeup, atomic_rmw, \
                         smt.sibling_factor or locks.NAME)"
                            .into(),
                    ));
                }
            }
        }
        spec.name = format!("{} ({key} x{})", spec.name, compact_number(factor));
        // The era's factors stay as this profile chose them.
        let p = Profile::from_spec(spec, &self.origin)?;
        match &self.era {
            Some(e) => p.with_era(e.choice),
            None => Ok(p),
        }
    }
}

/// `f` in few characters: plain for the everyday factors (`1.5`, `10000000`), with an
/// exponent outside them (`1e-300`, not three hundred zeros).
pub fn compact_number(f: f64) -> String {
    if f == 0.0 || (1e-4..1e7).contains(&f.abs()) {
        format!("{f}")
    } else {
        format!("{f:e}")
    }
}
