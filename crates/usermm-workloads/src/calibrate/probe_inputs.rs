//! The this-host profile's inputs that come from `usermm calibrate`'s probes beyond the
//! single-thread figures: the SMT probe's sibling factor and topology, the TLB shootdown
//! probe's two sides, the LRU-add probe's batch and per-folio cost (`usermm_host::calibrate`,
//! formats 2, 3 and 4). Each keeps its assumption for an older record, and says why.

use std::collections::BTreeMap;

use usermm::vtime::{Input, InputKind, Profile};
use usermm_host::calibrate::HostCalibration;

use super::{input, measured_source, r4};

/// This host's SMT factor: measured by the SMT probe when it found two CPUs sharing a core (1
/// over its median throughput ratio: each of two busy siblings runs at 1/factor of a lone
/// thread); otherwise 1, never applied (the profile's topology then has one thread a core),
/// with what the probe found, or that a format-1 record has no probe.
pub(super) fn smt_factor(c: &HostCalibration) -> Input {
    let tpc = c.system.threads_per_core;
    match &c.smt {
        Some(p) if p.shared_core => input(
            r4(1.0 / p.ratio.median),
            "factor",
            InputKind::Measured,
            format!(
                "{}; {}: 1 / the median ratio",
                measured_source(c, &p.ratio),
                p.summary()
            ),
        ),
        Some(p) => input(
            1.0,
            "factor",
            InputKind::Assumption,
            format!(
                "assumption: {} ({tpc} thread(s) per core in cpu0's thread_siblings_list), so \
                 no two emulated CPUs of this profile share a core and the factor is never \
                 applied; 1 = no slowdown",
                p.summary()
            ),
        ),
        None => input(
            1.0,
            "factor",
            InputKind::Assumption,
            format!(
                "assumption: this host has {tpc} thread(s) per core (cpu0's \
                 thread_siblings_list; a format-1 calibration record, without the SMT probe), \
                 so no two emulated CPUs of this profile share a core and the factor is never \
                 applied; 1 = no slowdown"
            ),
        ),
    }
}

/// Threads per core of the this-host topology: what sysfs says, or 2 when the SMT probe found
/// two CPUs sharing a core that sysfs shows as one thread each (a guest's view) and the CPUs
/// pair up evenly — taken for every pair, as a hypervisor presents siblings in pairs (an
/// assumption the topology's source states).
pub(super) fn threads_per_core(c: &HostCalibration) -> usize {
    let s = &c.system;
    let probe_siblings = c.smt.as_ref().is_some_and(|p| p.shared_core);
    if probe_siblings && s.threads_per_core <= 1 && s.online_cpus.is_multiple_of(2) {
        2
    } else {
        s.threads_per_core.max(1)
    }
}

/// The LRU-add batch, measured by the LRU-add probe (format 4): its period as `lru_add_batch`
/// (the host check's machine takes it as `lru.add_batch`, [`lru_add_batch`]), and what its
/// fault pays beyond an ordinary one, less the lruvec lock's acquire the engine charges there,
/// per folio, as `lru_add_ns`. An older record, or a probe whose samples did not agree on one
/// period, keeps the engine's default batch and the [`BORROWED`](super::BORROWED) assumption, which says so.
pub(super) fn lru_add_inputs(c: &HostCalibration, m: &mut BTreeMap<String, Input>) {
    let probe = c.lru_add.as_ref();
    let batch = probe
        .and_then(|p| p.batch())
        .filter(|&b| b <= usermm::config::MAX_LRU_ADD_BATCH);
    let lock = m.get("lock_xadd_ns").map_or(0.0, |i| i.value);
    match (probe, batch) {
        (Some(p), Some(b)) if p.drain.median > lock => {
            m.insert(
                "lru_add_batch".into(),
                input(
                    f64::from(b),
                    "pages",
                    InputKind::Measured,
                    format!(
                        "{}; every sample's slow faults recurred every {b} faults: this \
                         kernel's LRU-add batch (6.18: PAGEVEC_SIZE = 31, \
                         include/linux/pagevec.h, since \"increase PAGEVEC_SIZE from 15 to \
                         31\", LKML 2024-03; v4.x: 15)",
                        measured_source(c, &p.period)
                    ),
                ),
            );
            m.insert(
                "lru_add_ns".into(),
                input(
                    r4((p.drain.median - lock) / f64::from(b)),
                    "ns",
                    InputKind::Measured,
                    format!(
                        "(drain - lock_xadd_ns) / lru_add_batch: the batch's fault beyond the \
                         median fault, less the lruvec lock's acquire, per folio moved \
                         (folio_batch_move_lru: lru_add, the list link, the LRU size \
                         counters); drain {:.1} ns: {}",
                        p.drain.median,
                        measured_source(c, &p.drain)
                    ),
                ),
            );
        }
        _ => {
            let why = match probe {
                None => "no LRU-add probe: format 1 to 3".to_string(),
                Some(p) if batch.is_none() => format!(
                    "an LRU-add probe whose samples found no one period ({:?})",
                    p.period.samples
                ),
                Some(p) => format!(
                    "an LRU-add drain of median {:.1} ns, not above the lock's acquire",
                    p.drain.median
                ),
            };
            if let Some(i) = m.get_mut("lru_add_ns") {
                i.source = format!("{} (the calibration record has {why})", i.source);
            }
        }
    }
}

/// The LRU-add batch of the this-host profile at `profile` (a path or a built-in name): its
/// `lru_add_batch` input, measured by the LRU-add probe, or the engine's default when the
/// profile has none (a built-in profile, or one from an older calibration record).
pub fn lru_add_batch(profile: &str) -> u32 {
    Profile::resolve(profile)
        .ok()
        .and_then(|p| p.spec().inputs.get("lru_add_batch").map(|i| i.value))
        .filter(|v| {
            v.fract() == 0.0 && *v >= 1.0 && *v <= f64::from(usermm::config::MAX_LRU_ADD_BATCH)
        })
        .map_or(
            usermm::config::MachineConfig::default().lru.add_batch,
            |v| v as u32,
        )
}

/// The two sides of a TLB shootdown, measured by the shootdown probe (format 3): the sender's
/// extra per flush as `tlb_flush_remote_ns`, the interrupted CPU's loss as `flush_tlb_func_ns`.
/// A side whose median is not positive (the sender's is a difference of two timings), or an
/// older record, keeps the [`BORROWED`](super::BORROWED) assumption, which says so.
pub(super) fn shootdown_inputs(c: &HostCalibration, m: &mut BTreeMap<String, Input>) {
    let probe = c.shootdown.as_ref();
    for (name, fig) in [
        ("tlb_flush_remote_ns", probe.map(|p| &p.sender)),
        ("flush_tlb_func_ns", probe.map(|p| &p.receiver)),
    ] {
        match fig {
            Some(f) if f.median > 0.0 => {
                m.insert(
                    name.into(),
                    input(
                        r4(f.median),
                        "ns",
                        InputKind::Measured,
                        measured_source(c, f),
                    ),
                );
            }
            _ => {
                if let Some(i) = m.get_mut(name) {
                    i.source = format!(
                        "{} (the calibration record has {})",
                        i.source,
                        match fig {
                            Some(f) => format!(
                                "a shootdown figure of median {:.1} ns, not positive",
                                f.median
                            ),
                            None => "no shootdown probe: format 1 or 2".into(),
                        }
                    );
                }
            }
        }
    }
}
