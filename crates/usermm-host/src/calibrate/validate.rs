//! The checks of a calibration record read back (`usermm calibrate --from RECORD`):
//! [`validate`] refuses a record that `usermm calibrate --json` cannot have written, naming
//! the record's own field: a format this usermm does not read, a probe its format must have
//! (SMT from 2, shootdown from 3, LRU-add from 4) or must not, samples missing or not positive,
//! an impossible
//! system.

use super::{HostCalibration, FORMAT, MAX_REPEAT, OLDEST_FORMAT, SHARED_BELOW};

/// Why a calibration record cannot be one `usermm calibrate` wrote: the record's field, and
/// what is wrong with it.
pub fn validate(r: &HostCalibration) -> Result<(), String> {
    let bad = |field: &str, why: String| Err(format!("{field}: {why}"));
    if !(OLDEST_FORMAT..=FORMAT).contains(&r.format) {
        return bad(
            "format",
            format!(
                "{} (this usermm reads formats {OLDEST_FORMAT} to {FORMAT})",
                r.format
            ),
        );
    }
    if !(1..=MAX_REPEAT).contains(&r.repeat) {
        return bad("repeat", format!("{} (1 to {MAX_REPEAT})", r.repeat));
    }
    let s = &r.system;
    let positive = |v: f64| v.is_finite() && v > 0.0;
    match (&r.smt, r.format) {
        (None, 1) => {}
        (Some(p), 2..) => {
            if p.ratio.samples.len() != r.repeat as usize || p.pairs.len() != r.repeat as usize {
                return bad(
                    "smt.ratio.samples",
                    format!("{} samples for {} repeats", p.ratio.samples.len(), r.repeat),
                );
            }
            if let Some(v) = p.ratio.samples.iter().find(|v| !positive(**v)) {
                return bad("smt.ratio.samples", format!("{v} (a positive ratio)"));
            }
            if p.shared_core != (p.ratio.median < SHARED_BELOW) {
                return bad("smt.shared_core", "disagrees with smt.ratio.median".into());
            }
        }
        (None, _) => return bad("smt", "missing (format 2 has the SMT probe)".into()),
        (Some(_), _) => return bad("smt", "present in a format-1 record".into()),
    }
    match (&r.shootdown, r.format) {
        (None, ..3) => {}
        (Some(p), 3..) => {
            for (field, m) in [
                ("shootdown.sender", &p.sender),
                ("shootdown.receiver", &p.receiver),
            ] {
                if m.samples.len() != r.repeat as usize || p.pairs.len() != r.repeat as usize {
                    return bad(
                        &format!("{field}.samples"),
                        format!("{} samples for {} repeats", m.samples.len(), r.repeat),
                    );
                }
                if let Some(v) = m.samples.iter().find(|v| !v.is_finite()) {
                    return bad(&format!("{field}.samples"), format!("{v} (a number of ns)"));
                }
            }
            if let Some(v) = p.receiver.samples.iter().find(|v| **v < 0.0) {
                return bad(
                    "shootdown.receiver.samples",
                    format!("{v} (a loss is not negative)"),
                );
            }
        }
        (None, _) => {
            return bad(
                "shootdown",
                "missing (format 3 has the shootdown probe)".into(),
            )
        }
        (Some(_), _) => return bad("shootdown", "present in a format-1 or -2 record".into()),
    }
    lru_add(r)?;
    if !positive(s.cpu_mhz) {
        return bad(
            "system.cpu_mhz",
            format!("{} (a positive clock)", s.cpu_mhz),
        );
    }
    for (field, n) in [
        ("system.online_cpus", s.online_cpus),
        ("system.threads_per_core", s.threads_per_core),
        ("system.sockets", s.sockets),
        ("system.nodes", s.nodes),
    ] {
        if n == 0 || n > 1 << 16 {
            return bad(field, format!("{n} (1 to 65536)"));
        }
    }
    if s.memory_kb == 0 {
        return bad("system.memory_kb", "0".into());
    }
    if !s
        .caches
        .iter()
        .any(|c| c.size_bytes > 0 && c.kind != "Instruction")
    {
        return bad("system.caches", "no data cache with a size".into());
    }
    if let Some(c) = s.caches.iter().find(|c| c.size_bytes == 0) {
        return bad(
            &format!("system.caches (L{} {})", c.level, c.kind),
            "size_bytes 0".into(),
        );
    }
    if r.cpus_used.len() != r.repeat as usize {
        return bad(
            "cpus_used",
            format!("{} CPUs for {} repeats", r.cpus_used.len(), r.repeat),
        );
    }
    for (key, m) in r.figures.all() {
        let field = format!("figures.{key}");
        if m.samples.len() != r.repeat as usize {
            return bad(
                &format!("{field}.samples"),
                format!("{} samples for {} repeats", m.samples.len(), r.repeat),
            );
        }
        if let Some(v) = m.samples.iter().find(|v| !positive(**v)) {
            return bad(
                &format!("{field}.samples"),
                format!("{v} (a positive figure)"),
            );
        }
        if !positive(m.median) {
            return bad(&format!("{field}.median"), format!("{}", m.median));
        }
    }
    Ok(())
}

/// The LRU-add probe's part of [`validate`]: present from format 4 on, a sample a repeat in
/// each of its figures, none negative, a positive fault and whole periods.
fn lru_add(r: &HostCalibration) -> Result<(), String> {
    let bad = |field: &str, why: String| Err(format!("{field}: {why}"));
    let positive = |v: f64| v.is_finite() && v > 0.0;
    match (&r.lru_add, r.format) {
        (None, ..4) => {}
        (Some(p), 4..) => {
            for (field, m) in [
                ("lru_add.fault", &p.fault),
                ("lru_add.drain", &p.drain),
                ("lru_add.period", &p.period),
            ] {
                if m.samples.len() != r.repeat as usize || p.cpus.len() != r.repeat as usize {
                    return bad(
                        &format!("{field}.samples"),
                        format!("{} samples for {} repeats", m.samples.len(), r.repeat),
                    );
                }
                if let Some(v) = m.samples.iter().find(|v| !(v.is_finite() && **v >= 0.0)) {
                    return bad(&format!("{field}.samples"), format!("{v} (not negative)"));
                }
            }
            if let Some(v) = p.fault.samples.iter().find(|v| !positive(**v)) {
                return bad("lru_add.fault.samples", format!("{v} (a fault takes time)"));
            }
            if let Some(v) = p.period.samples.iter().find(|v| v.fract() != 0.0) {
                return bad("lru_add.period.samples", format!("{v} (a count of faults)"));
            }
        }
        (None, _) => return bad("lru_add", "missing (format 4 has the LRU-add probe)".into()),
        (Some(_), _) => return bad("lru_add", "present in a record older than format 4".into()),
    }
    Ok(())
}
