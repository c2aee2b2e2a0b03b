//! From a parsed [`ProfileSpec`] to a [`Profile`]: every field checked (bounds, a source for
//! every figure, no control characters in what reports print), every figure resolved to
//! picoseconds (`ns`, `cycles` at the topology's clock, or `bytes_per_ns` for the costs that
//! move bytes), and the era's factors applied ([`Profile::price_era`]).
//!
//! An error names the profile (`origin`) and the field, as [`ProfileError::Invalid`].

use std::collections::BTreeMap;

use super::era::{self, Era, EraChoice};
use super::{
    provenance, Cost, Figure, LockPrice, MemPrice, Profile, ProfileError, ProfileSpec, Ps,
    Quantity, ENGINE_LOCK_CLASSES, MAX_CACHE_LINES, MAX_FIGURE_NS, MAX_JITTER_PERCENT,
    MAX_MEMORY_GIB, MAX_SMT, MAX_SOCKETS,
};

impl Profile {
    /// Validates a spec and resolves its figures.
    pub fn from_spec(spec: ProfileSpec, origin: &str) -> Result<Profile, ProfileError> {
        let r = Resolve {
            origin,
            ghz: spec.topology.ghz,
        };
        r.check_topology(&spec)?;
        r.check_names(&spec)?;
        let cost_ps = r.cost_prices(&spec)?;
        let transfer_ps = [
            0,
            r.figure("transfer.smt_sibling", &spec.transfer.smt_sibling, None)?,
            r.figure("transfer.same_socket", &spec.transfer.same_socket, None)?,
            r.figure("transfer.other_socket", &spec.transfer.other_socket, None)?,
        ];
        let wakeup_ps = r.figure("wakeup", &spec.wakeup, None)?;
        let atomic_rmw_ps = r.figure("atomic_rmw", &spec.atomic_rmw, None)?;
        check_source("smt.source", &spec.smt.source, &r.invalid())?;
        let f = spec.smt.sibling_factor;
        if !(f.is_finite() && (1.0..=16.0).contains(&f)) {
            return Err(r.error(
                "smt.sibling_factor",
                format!("must be between 1 and 16 (got {f})"),
            ));
        }
        let smt_milli = (f * 1000.0).round() as u64;
        let locks = r.lock_prices(&spec)?;
        let memory = r.memory_price(&spec)?;
        let jitter_ppm = match &spec.jitter {
            None => 0,
            Some(q) => (r.quantity("jitter", q, MAX_JITTER_PERCENT)? * 1e4).round() as u32,
        };
        provenance::check(&spec, &r.invalid())?;
        let era = match &spec.era {
            None => None,
            Some(name) => Some(Era::with_choice(
                era::builtin_era(name, origin)?,
                EraChoice::Inferred,
            )),
        };
        let mut p = Profile {
            memory,
            jitter_ppm,
            origin: origin.to_string(),
            spec,
            base_cost_ps: cost_ps,
            cost_ps,
            era,
            transfer_ps,
            wakeup_ps,
            atomic_rmw_ps,
            smt_milli,
            locks,
        };
        p.price_era();
        Ok(p)
    }
}

/// What resolving one spec needs: the profile's name for errors and its clock for cycles.
struct Resolve<'a> {
    origin: &'a str,
    ghz: f64,
}

impl Resolve<'_> {
    fn error(&self, field: &str, message: String) -> ProfileError {
        ProfileError::Invalid {
            origin: self.origin.to_string(),
            field: field.to_string(),
            message,
        }
    }

    /// [`Resolve::error`] as the closure the shared checks take.
    fn invalid(&self) -> impl Fn(&str, String) -> ProfileError + '_ {
        |field, message| self.error(field, message)
    }

    /// The topology's counts within the engine's bounds, its memory and clock.
    fn check_topology(&self, spec: &ProfileSpec) -> Result<(), ProfileError> {
        let t = &spec.topology;
        for (field, v, max) in [
            ("topology.sockets", t.sockets, MAX_SOCKETS),
            (
                "topology.nodes",
                t.nodes,
                u32::from(crate::cpu::MAX_NUMNODES),
            ),
            (
                "topology.cores_per_socket",
                t.cores_per_socket,
                u32::from(u16::MAX),
            ),
            ("topology.threads_per_core", t.threads_per_core, MAX_SMT),
        ] {
            if v == 0 {
                return Err(self.error(field, "must be positive (got 0)".into()));
            }
            if v > max {
                return Err(self.error(field, format!("at most {max} (got {v})")));
            }
        }
        if let Some(gib) = t.memory_gib {
            let max = MAX_MEMORY_GIB;
            if gib == 0 || gib > max {
                return Err(self.error(
                    "topology.memory_gib",
                    format!("between 1 and {max} (the engine's largest machine; got {gib})"),
                ));
            }
        }
        if !(t.ghz.is_finite() && t.ghz > 0.0) {
            return Err(self.error("topology.ghz", format!("must be positive (got {})", t.ghz)));
        }
        if t.hw_threads() > u16::MAX as usize {
            return Err(self.error(
                "topology",
                format!("{} hardware threads; at most {}", t.hw_threads(), u16::MAX),
            ));
        }
        check_source("topology.source", &t.source, &self.invalid())
    }

    /// The name and description reports print: a name, and no terminal control sequences.
    fn check_names(&self, spec: &ProfileSpec) -> Result<(), ProfileError> {
        if spec.name.trim().is_empty() {
            return Err(self.error("name", "must not be empty".into()));
        }
        if crate::text::first_control(&spec.name).is_some() {
            return Err(self.error("name", "must not hold control characters".into()));
        }
        if crate::text::has_control_but_newline(&spec.description) {
            return Err(self.error("description", "must not hold control characters".into()));
        }
        Ok(())
    }

    /// One figure in ps: exactly one of `ns`, `cycles` (at the topology's clock) or
    /// `bytes_per_ns` (only for a cost that moves `bytes`), with a source, at most 1 s.
    fn figure(&self, field: &str, f: &Figure, bytes: Option<u64>) -> Result<Ps, ProfileError> {
        let invalid = self.invalid();
        check_source(&format!("{field}.source"), &f.source, &invalid)?;
        let given = [f.ns.is_some(), f.cycles.is_some(), f.bytes_per_ns.is_some()];
        if given.iter().filter(|g| **g).count() != 1 {
            return Err(self.error(
                field,
                "give exactly one of `ns`, `cycles`, `bytes_per_ns`".into(),
            ));
        }
        let ns = match (f.ns, f.cycles, f.bytes_per_ns) {
            (Some(ns), _, _) => nonneg(&format!("{field}.ns"), ns, &invalid)?,
            (_, Some(c), _) => nonneg(&format!("{field}.cycles"), c, &invalid)? / self.ghz,
            (_, _, Some(bpn)) => {
                let Some(bytes) = bytes else {
                    return Err(self.error(
                        &format!("{field}.bytes_per_ns"),
                        "only costs that move bytes take a bandwidth; give `ns`".into(),
                    ));
                };
                if !(bpn.is_finite() && bpn > 0.0) {
                    return Err(self.error(
                        &format!("{field}.bytes_per_ns"),
                        format!("must be positive (got {bpn})"),
                    ));
                }
                bytes as f64 / bpn
            }
            _ => unreachable!("exactly one figure was checked above"),
        };
        if ns > MAX_FIGURE_NS {
            return Err(self.error(
                field,
                format!("{ns:e} ns; a step costs at most {MAX_FIGURE_NS} ns (1 s) in the model"),
            ));
        }
        Ok(ns_to_ps(ns))
    }

    /// A count (cache lines, a jitter percentage) between 0 and `max`, with a source.
    fn quantity(&self, field: &str, q: &Quantity, max: f64) -> Result<f64, ProfileError> {
        check_source(&format!("{field}.source"), &q.source, &self.invalid())?;
        let v = q.value;
        if !(v.is_finite() && v >= 0.0 && v <= max) {
            return Err(self.error(
                &format!("{field}.value"),
                format!("must be between 0 and {max} (got {v})"),
            ));
        }
        Ok(v)
    }

    /// Every [`Cost`] priced (each one required), and no cost the engine does not know.
    fn cost_prices(&self, spec: &ProfileSpec) -> Result<[Ps; Cost::COUNT], ProfileError> {
        let mut cost_ps = [0; Cost::COUNT];
        for c in Cost::ALL {
            let field = format!("costs.{}", c.key());
            let f = spec.costs.get(c.key()).ok_or_else(|| {
                self.error(
                    &field,
                    format!(
                        "missing (every cost needs a figure and a source; {})",
                        c.kernel_name()
                    ),
                )
            })?;
            cost_ps[c.index()] = self.figure(&field, f, c.bytes())?;
        }
        if let Some(k) = spec.costs.keys().find(|k| Cost::from_key(k).is_none()) {
            let known: Vec<_> = Cost::ALL.iter().map(|c| c.key()).collect();
            return Err(self.error(
                &format!("costs.{k}"),
                format!("unknown cost (known: {})", known.join(", ")),
            ));
        }
        Ok(cost_ps)
    }

    /// Every engine lock class priced (an acquire in ns or cycles, its data lines).
    fn lock_prices(&self, spec: &ProfileSpec) -> Result<BTreeMap<String, LockPrice>, ProfileError> {
        for name in ENGINE_LOCK_CLASSES {
            if !spec.locks.contains_key(*name) {
                return Err(self.error(
                    &format!("locks.\"{name}\""),
                    "missing (every engine lock class needs acquire_ns and data_lines)".into(),
                ));
            }
        }
        let invalid = self.invalid();
        let mut locks = BTreeMap::new();
        for (name, l) in &spec.locks {
            let field = format!("locks.\"{name}\"");
            check_source(&format!("{field}.source"), &l.source, &invalid)?;
            let ns = match (l.acquire_ns, l.acquire_cycles) {
                (Some(ns), None) => nonneg(&format!("{field}.acquire_ns"), ns, &invalid)?,
                (None, Some(c)) => {
                    nonneg(&format!("{field}.acquire_cycles"), c, &invalid)? / self.ghz
                }
                _ => {
                    return Err(self.error(
                        &field,
                        "give exactly one of `acquire_ns`, `acquire_cycles`".into(),
                    ))
                }
            };
            if ns > MAX_FIGURE_NS {
                return Err(self.error(
                    &field,
                    format!("{ns} ns; an acquire costs at most {MAX_FIGURE_NS} ns (1 s)"),
                ));
            }
            locks.insert(
                name.clone(),
                LockPrice {
                    acquire: ns_to_ps(ns),
                    data_lines: l.data_lines,
                },
            );
        }
        Ok(locks)
    }

    /// The line model's caches and DRAM (`[memory]`), when the profile has one.
    fn memory_price(&self, spec: &ProfileSpec) -> Result<Option<MemPrice>, ProfileError> {
        let Some(m) = &spec.memory else {
            return Ok(None);
        };
        let llc = self.quantity("memory.llc_lines", &m.llc_lines, MAX_CACHE_LINES)?;
        let l2 = self.quantity("memory.l2_lines", &m.l2_lines, MAX_CACHE_LINES)?;
        if llc < 1.0 || l2 < 1.0 {
            return Err(self.error(
                "memory",
                "a cache holds at least one line (llc_lines, l2_lines)".into(),
            ));
        }
        Ok(Some(MemPrice {
            llc_lines: llc.round() as u64,
            l2_lines: l2.round() as u64,
            dram_local: self.figure("memory.dram_local", &m.dram_local, None)?,
            dram_remote: self.figure("memory.dram_remote", &m.dram_remote, None)?,
            dram_stream: self.figure("memory.dram_stream", &m.dram_stream, None)?,
        }))
    }
}

fn check_source(
    field: &str,
    source: &str,
    invalid: &impl Fn(&str, String) -> ProfileError,
) -> Result<(), ProfileError> {
    if source.trim().is_empty() {
        return Err(invalid(
            field,
            "must say where the figure comes from (a publication, a measurement with its \
             command, or `assumption: ...`)"
                .into(),
        ));
    }
    Ok(())
}

fn nonneg(
    field: &str,
    v: f64,
    invalid: &impl Fn(&str, String) -> ProfileError,
) -> Result<f64, ProfileError> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else if v == f64::INFINITY {
        // A scaled figure past f64's range (`--scale-cost KEY=1e308`).
        Err(invalid(
            field,
            format!("is past the largest number ({:e})", f64::MAX),
        ))
    } else {
        Err(invalid(
            field,
            format!("must be a non-negative number (got {v})"),
        ))
    }
}

fn ns_to_ps(ns: f64) -> Ps {
    (ns * 1000.0).round() as Ps
}
