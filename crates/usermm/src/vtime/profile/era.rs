//! Era factors: the few declared unknowns of the model, and the one place anything is fitted.
//!
//! A seed profile prices each step of the teardown and the fault with this host's measured
//! cost, scaled by clock (`profiles/*.toml`). The seeds' kernels (v4.8–v4.18, 2016–2018,
//! bare-metal Intel) paid different amounts in different places, and nobody published how
//! much: no profile of that era splits a teardown into zap, LRU removal and buddy free. Those
//! few numbers are unknown. The model states them as *era factors* — one multiplier per path
//! that the era's kernels ran differently — and `usermm infer` estimates them from a fixed set
//! of published training rows; every other published figure is a test of the result.
//!
//! # What is declared before any fit
//! [`ERA_FACTORS`] fixes which factors exist and which costs each multiplies; it is code, not
//! data, and `docs/profiles.md` lists it. A factor multiplies the priced figure of every cost it
//! names (after `--scale-cost`), nothing else: not a transfer, not a lock's acquire, not the
//! line model, not an assumption's cost.
//!
//! | input        | multiplies                                             | the path |
//! |--------------|--------------------------------------------------------|----------|
//! | `era_zap`    | `zap_pte`, `gather_page`                               | `zap_pte_range`: clear, rmap, rss, gather |
//! | `era_free`   | `free_unref_page`                                      | the free outside the locks: `release_pages`' reference drop, `free_unref_page`'s pcp work |
//! | `era_locked` | `free_pcppages_bulk_page`, `lru_del`                   | the sections under `zone->lock` and `lru_lock` |
//! | `era_fault`  | `fault_entry`, `fault_exit`, `pt_walk_level`, `set_pte` | the fault: exception entry and exit, the walk, the PTE store |
//!
//! # Where the factors live
//! An era file (`profiles/era/NAME.toml`) holds one `[inputs.NAME]` per factor, each of kind
//! `inferred`, naming the training rows it was estimated from (`rows`) and the run that did it
//! (`source`). A profile opts in with `era = "NAME"`; the era applies to every profile of its
//! era (the three seed machines and any 2016–2019 Intel profile), never per seed. The profile's
//! own figures stay what they were — this host's costs — so the file still states its
//! arithmetic; the era is a layer on top, and [`EraChoice::Unfitted`] takes it off (the
//! *unfitted* view that reports show beside the fitted one).
//!
//! # Bounds
//! A factor outside [`PLAUSIBLE`] is a sign of a mechanism the model lacks, not a value to use
//! silently: `usermm infer` reports it as such. The loader accepts factors within
//! [`MIN_FACTOR`, `MAX_FACTOR`] (the fit's search box) so that such a finding can still be
//! written down and examined.

#![deny(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::spec::{Input, InputKind};
use super::{Cost, ProfileError};

/// One era factor: the input that holds it and the costs it multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EraFactor {
    /// The input's name in an era file (`era_zap`), and the key of `time.era=KEY=F,...`
    /// without its `era_` prefix.
    pub input: &'static str,
    /// The kernel path it stands for, in words.
    pub path: &'static str,
    /// The costs whose priced figures it multiplies.
    pub costs: &'static [Cost],
}

impl EraFactor {
    /// `zap` for `era_zap`: the key a `time.era` list uses.
    pub fn key(&self) -> &'static str {
        self.input.strip_prefix("era_").unwrap_or(self.input)
    }
}

/// Every era factor, in a fixed order (the order of `usermm infer`'s output and of
/// [`EraFactors`]).
pub const ERA_FACTORS: [EraFactor; 4] = [
    EraFactor {
        input: "era_zap",
        path: "the zap (zap_pte_range: clearing a present PTE, the rmap and rss update, \
               gathering the page)",
        costs: &[Cost::ZapPte, Cost::GatherPage],
    },
    EraFactor {
        input: "era_free",
        path: "the free outside the locks (release_pages' reference drop, free_unref_page's \
               per-CPU list work)",
        costs: &[Cost::FreeUnrefPage],
    },
    EraFactor {
        input: "era_locked",
        path: "the sections under zone->lock and lru_lock (free_pcppages_bulk per page, the \
               LRU removal)",
        costs: &[Cost::FreePcppagesBulkPage, Cost::LruDel],
    },
    EraFactor {
        input: "era_fault",
        path: "the fault (exception entry and exit, the page-table walk, the PTE store)",
        costs: &[
            Cost::FaultEntry,
            Cost::FaultExit,
            Cost::PtWalkLevel,
            Cost::SetPte,
        ],
    },
];

/// How many era factors there are.
pub const NR_ERA_FACTORS: usize = ERA_FACTORS.len();

/// The range inside which a factor is a plausible era difference; outside it, `usermm infer`
/// reports a missing mechanism.
pub const PLAUSIBLE: (f64, f64) = (0.25, 4.0);
/// The smallest factor an era file may hold (the fit's search box).
pub const MIN_FACTOR: f64 = 1.0 / 16.0;
/// The largest factor an era file may hold.
pub const MAX_FACTOR: f64 = 16.0;

/// The built-in eras, by name.
const BUILTIN_ERAS: &[(&str, &str)] = &[(
    "intel-2016-2019",
    include_str!("../profiles/era/intel-2016-2019.toml"),
)];

/// An era file, as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EraSpec {
    pub name: String,
    pub description: String,
    /// One input per [`ERA_FACTORS`] entry, each `kind = "inferred"` with its `rows`.
    pub inputs: BTreeMap<String, Input>,
}

/// The factors' values, in [`ERA_FACTORS`] order.
pub type EraFactors = [f64; NR_ERA_FACTORS];

/// Which factors a virtual machine applies (`time.era`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EraChoice {
    /// The era file's inferred factors (the default).
    Inferred,
    /// None: every factor 1, this host's costs scaled by clock only.
    Unfitted,
    /// Given factors (`usermm infer`'s trial points, or a what-if): in memory only.
    Given(EraFactors),
}

impl EraChoice {
    /// Parses `time.era`: empty or `inferred`, `unfitted`, or `zap=F,free=F,locked=F,fault=F`
    /// (every factor named once; each between [`MIN_FACTOR`] and [`MAX_FACTOR`]).
    pub fn parse(text: &str) -> Result<EraChoice, String> {
        match text {
            "" | "inferred" => return Ok(EraChoice::Inferred),
            "unfitted" => return Ok(EraChoice::Unfitted),
            _ => {}
        }
        let keys: Vec<&str> = ERA_FACTORS.iter().map(EraFactor::key).collect();
        let expected = || {
            format!(
                "expected inferred, unfitted or {}",
                keys.iter()
                    .map(|k| format!("{k}=F"))
                    .collect::<Vec<_>>()
                    .join(",")
            )
        };
        let mut given = [None; NR_ERA_FACTORS];
        for part in text.split(',') {
            let Some((k, v)) = part.split_once('=') else {
                return Err(expected());
            };
            let Some(i) = keys.iter().position(|x| *x == k.trim()) else {
                return Err(format!(
                    "unknown era factor `{}` ({})",
                    k.trim(),
                    expected()
                ));
            };
            if given[i].is_some() {
                return Err(format!("era factor `{}` given twice", keys[i]));
            }
            let f: f64 = v
                .trim()
                .parse()
                .map_err(|_| format!("era factor {}: `{}` is not a number", keys[i], v.trim()))?;
            check_factor(f).map_err(|m| format!("era factor {}: {m}", keys[i]))?;
            given[i] = Some(f);
        }
        let mut out = [1.0; NR_ERA_FACTORS];
        for (i, g) in given.iter().enumerate() {
            out[i] =
                g.ok_or_else(|| format!("era factor `{}` missing ({})", keys[i], expected()))?;
        }
        Ok(EraChoice::Given(out))
    }
}

impl fmt::Display for EraChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EraChoice::Inferred => f.write_str("inferred"),
            EraChoice::Unfitted => f.write_str("unfitted"),
            EraChoice::Given(v) => {
                let parts: Vec<String> = ERA_FACTORS
                    .iter()
                    .zip(v)
                    .map(|(e, x)| format!("{}={x}", e.key()))
                    .collect();
                f.write_str(&parts.join(","))
            }
        }
    }
}

fn check_factor(f: f64) -> Result<(), String> {
    if f.is_finite() && (MIN_FACTOR..=MAX_FACTOR).contains(&f) {
        Ok(())
    } else {
        Err(format!(
            "must be between {MIN_FACTOR} and {MAX_FACTOR} (got {f})"
        ))
    }
}

/// An era resolved for a profile: the file, and the factors applied (all 1 when unfitted).
#[derive(Debug, Clone, PartialEq)]
pub struct Era {
    pub spec: EraSpec,
    pub choice: EraChoice,
    pub factors: EraFactors,
}

impl Era {
    /// The factors of `spec` in [`ERA_FACTORS`] order (the file was checked).
    pub fn inferred_factors(spec: &EraSpec) -> EraFactors {
        let mut f = [1.0; NR_ERA_FACTORS];
        for (i, e) in ERA_FACTORS.iter().enumerate() {
            f[i] = spec.inputs.get(e.input).map_or(1.0, |x| x.value);
        }
        f
    }

    /// The era with `choice` applied.
    pub fn with_choice(spec: EraSpec, choice: EraChoice) -> Era {
        let factors = match choice {
            EraChoice::Inferred => Era::inferred_factors(&spec),
            EraChoice::Unfitted => [1.0; NR_ERA_FACTORS],
            EraChoice::Given(v) => v,
        };
        Era {
            spec,
            choice,
            factors,
        }
    }

    /// The factor that multiplies `cost` (1 for a cost no factor names).
    pub fn factor_of(&self, cost: Cost) -> f64 {
        ERA_FACTORS
            .iter()
            .zip(self.factors)
            .find(|(e, _)| e.costs.contains(&cost))
            .map_or(1.0, |(_, f)| f)
    }
}

/// Names of the built-in eras.
pub fn builtin_era_names() -> Vec<&'static str> {
    BUILTIN_ERAS.iter().map(|(n, _)| *n).collect()
}

/// The built-in era `name`, checked; `origin` names the profile that asked for it in errors.
pub fn builtin_era(name: &str, origin: &str) -> Result<EraSpec, ProfileError> {
    let invalid = |field: &str, message: String| ProfileError::Invalid {
        origin: origin.to_string(),
        field: field.to_string(),
        message,
    };
    let Some((_, text)) = BUILTIN_ERAS.iter().find(|(n, _)| *n == name) else {
        return Err(invalid(
            "era",
            format!(
                "unknown era `{name}` (built in: {})",
                builtin_era_names().join(", ")
            ),
        ));
    };
    let spec = parse_era(text, &format!("era {name}"))?;
    if spec.name != name {
        return Err(invalid(
            "era",
            format!("the era file of `{name}` names itself `{}`", spec.name),
        ));
    }
    Ok(spec)
}

/// Parses and checks an era file: exactly the [`ERA_FACTORS`] inputs, each `inferred`, a
/// factor within bounds, naming its training rows and its source.
pub fn parse_era(text: &str, origin: &str) -> Result<EraSpec, ProfileError> {
    let spec: EraSpec = toml::from_str(text).map_err(|e| ProfileError::Invalid {
        origin: origin.to_string(),
        field: "era".into(),
        message: e.message().trim().replace('\n', " "),
    })?;
    check_era(&spec, origin)?;
    Ok(spec)
}

/// The rules of an era file (see [`parse_era`]).
pub fn check_era(spec: &EraSpec, origin: &str) -> Result<(), ProfileError> {
    let invalid = |field: &str, message: String| ProfileError::Invalid {
        origin: origin.to_string(),
        field: field.to_string(),
        message,
    };
    for e in &ERA_FACTORS {
        if !spec.inputs.contains_key(e.input) {
            return Err(invalid(
                &format!("inputs.{}", e.input),
                format!("missing (the era factor of {})", e.path),
            ));
        }
    }
    for (name, i) in &spec.inputs {
        let field = format!("inputs.{name}");
        if !ERA_FACTORS.iter().any(|e| e.input == name) {
            return Err(invalid(
                &field,
                format!(
                    "not an era factor (the factors are fixed in code: {})",
                    ERA_FACTORS
                        .iter()
                        .map(|e| e.input)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        if i.kind != InputKind::Inferred {
            return Err(invalid(
                &format!("{field}.kind"),
                format!("an era factor is `inferred` (got `{}`)", i.kind.as_str()),
            ));
        }
        if i.unit != "factor" {
            return Err(invalid(
                &format!("{field}.unit"),
                format!("an era factor's unit is `factor` (got `{}`)", i.unit),
            ));
        }
        check_factor(i.value).map_err(|m| invalid(&format!("{field}.value"), m))?;
        if i.rows.is_empty() || i.rows.iter().any(|r| r.trim().is_empty()) {
            return Err(invalid(
                &format!("{field}.rows"),
                "an inferred input names the published rows it was estimated from".into(),
            ));
        }
        if i.source.trim().is_empty() {
            return Err(invalid(
                &format!("{field}.source"),
                "must say which run inferred it (the command)".into(),
            ));
        }
    }
    Ok(())
}

/// A profile's era layer: its factors applied over the figures' prices.
impl super::Profile {
    /// `cost_ps` from `base_cost_ps` and the era's factors.
    pub(super) fn price_era(&mut self) {
        self.cost_ps = self.base_cost_ps;
        if let Some(era) = &self.era {
            for c in super::Cost::ALL {
                let f = era.factor_of(*c);
                if f != 1.0 {
                    self.cost_ps[c.index()] =
                        (self.base_cost_ps[c.index()] as f64 * f).round() as super::Ps;
                }
            }
        }
    }

    /// This profile with its era's factors chosen by `choice` (`time.era`): the inferred ones,
    /// none (`unfitted`), or given ones. A profile without an era is returned as it is, except
    /// that given factors are refused (they would silently change nothing).
    pub fn with_era(&self, choice: EraChoice) -> Result<super::Profile, super::ProfileError> {
        let mut p = self.clone();
        match (&mut p.era, choice) {
            (None, EraChoice::Given(_)) => {
                return Err(super::ProfileError::Invalid {
                    origin: self.origin.clone(),
                    field: "era".into(),
                    message: "this profile names no era, so era factors cannot apply".into(),
                })
            }
            (None, _) => return Ok(p),
            (Some(era), choice) => *era = Era::with_choice(era.spec.clone(), choice),
        }
        p.price_era();
        Ok(p)
    }

    /// The era whose factors this profile's costs carry, if it names one.
    pub fn era(&self) -> Option<&Era> {
        self.era.as_ref()
    }
}
