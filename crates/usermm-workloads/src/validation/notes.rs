//! What a run's misses point to, said from the run's own figures: each note is written only
//! when its rows missed, and quotes the model's numbers that show the mechanism (docs/profiles.md,
//! "Validation set", gives the probes behind them).

use super::ValidationRow;
use crate::bigfree::{BigfreeResult, BigfreeRow};
use crate::seeds::{NODE_BOUND_FREE, TWO_NODE_FREE};

/// Whether a row whose name starts with `prefix` missed its band.
fn missed(rows: &[ValidationRow], prefix: &str) -> bool {
    rows.iter().any(|r| r.name.starts_with(prefix) && !r.within)
}

fn row(r: &BigfreeResult, ma: Option<u32>) -> Option<&BigfreeRow> {
    r.rows.iter().find(|x| x.max_active == ma)
}

/// A lock class's hold per page of the row's mapping, ns.
fn hold_per_page(x: &BigfreeRow, zone: bool) -> f64 {
    let s = &x.samples[0];
    let l = if zone { &s.zone_lock } else { &s.lru_lock };
    l.hold_ns as f64 / s.pages_mapped.max(1) as f64
}

pub(super) fn node_bound(rows: &[ValidationRow], f: &BigfreeResult) -> Vec<String> {
    let nb = &NODE_BOUND_FREE;
    let mut notes = Vec::new();
    let split = row(f, Some(nb.split_max_active));
    if let (true, Some(x)) = (
        missed(rows, "zone.lock spinning") || missed(rows, "lru_lock spinning"),
        split,
    ) {
        notes.push(format!(
            "The spinning splits the other way round: the model's lru_lock section holds {:.1} ns \
             a page and zone->lock's {:.1} ns — this host's kernel's proportion, which the era's \
             one locked factor scales alike — while the posting's CPUs spun longer on zone->lock \
             ({:.1} % against {:.1} %). Points to what each section touched per page on v4.11 \
             (`__free_one_page`'s buddies and the free-area heads every worker writes, under \
             zone->lock): a factor per lock, or those lines modelled.",
            hold_per_page(x, false),
            hold_per_page(x, true),
            nb.zone_lock_share * 100.0,
            nb.lru_lock_share * 100.0
        ));
    }
    let low: Vec<&ValidationRow> = rows
        .iter()
        .filter(|r| r.name.starts_with("spinlock share, max_active") && !r.within)
        .filter(|r| r.predicted < r.published)
        .collect();
    let worst = rows
        .iter()
        .filter(|r| r.name.starts_with("time per page"))
        .fold(0f64, |a, r| a.max(r.error.abs()));
    if !low.is_empty() {
        notes.push(format!(
            "Too little spinning at {}: at about the same time per page (the time rows within \
             ±{:.0} %), the posting's CPUs spun more — its locked sections were dearer per page, its other \
             work cheaper by as much: the pointer of the split above.",
            low.iter()
                .map(|r| format!(
                    "{} ({:.1} % against {:.1} %)",
                    r.name.trim_start_matches("spinlock share, "),
                    r.predicted,
                    r.published
                ))
                .collect::<Vec<_>>()
                .join(", "),
            worst * 100.0
        ));
    }
    if missed(rows, "fastest setting") || missed(rows, "max_active 16 over") {
        let t: Vec<f64> = [4, 8, 16]
            .iter()
            .filter_map(|&m| row(f, Some(m)).map(|x| x.ns_per_page))
            .collect();
        let (lo, hi) = t
            .iter()
            .fold((f64::MAX, 0f64), |(a, b), &x| (a.min(x), b.max(x)));
        let (t8, t16) = (
            nb.time_of(Some(8)).unwrap_or(0.0),
            nb.time_of(Some(16)).unwrap_or(0.0),
        );
        let cause = if f.size < nb.size {
            format!(
                ", so which of its flat rows comes first is within what the run's size moves \
                 (the pipeline's fill and drain): `--scale seed` runs the posting's {} GiB",
                nb.size >> 30
            )
        } else {
            String::new()
        };
        notes.push(format!(
            "The posting's turn at max_active 8 is a {:.1} % step ({t8} s to {t16} s), within \
             twice its own spreads at 320 GiB (0.77–0.97 %); the model's curve from 4 to 16 \
             spans {:.1} % at {} GiB{cause}.",
            (t16 / t8 - 1.0) * 100.0,
            (hi / lo - 1.0) * 100.0,
            f.size >> 30,
        ));
    }
    notes
}

pub(super) fn two_node(rows: &[ValidationRow], f: [&BigfreeResult; 2]) -> Vec<String> {
    let tn = &TWO_NODE_FREE;
    let mut notes = Vec::new();
    if missed(rows, "time per page, max_active 2") {
        if let (Some(v), Some(x)) = (row(f[0], None), row(f[0], Some(2))) {
            let workers = x.cpu_ns_per_page - x.task_cpu_ns_per_page;
            let spin = x.samples[0].spin_ns as f64 / x.samples[0].pages_mapped.max(1) as f64;
            notes.push(format!(
                "With two workers the model's free side falls behind the zapping task: the \
                 workers spend {workers:.0} ns of CPU a page ({spin:.0} of it spinning), against \
                 {:.0} ns for the whole inline free and zap, while the zapper-bound rows at 4 and \
                 8 are within their bands. The EP is priced as the EX scaled by clock (2.3 GHz, \
                 an assumption), and its vanilla row is already {:+.0} %: the posting's \
                 2-socket machine freed more cheaply per page than that scaling makes it.",
                v.ns_per_page,
                rows.first().map_or(0.0, |r| r.error * 100.0)
            ));
        }
    }
    if missed(rows, "fastest setting") {
        let err = |name: &str| {
            rows.iter()
                .find(|r| r.name == name)
                .map_or(0.0, |r| r.error * 100.0)
        };
        notes.push(format!(
            "The model's curves keep falling to max_active 8 where the posting's turned at 4 \
             (1 GiB jobs) and 2 (2 GiB): its inline free is dear (vanilla {:+.0} %) and its \
             zapper-bound row cheap (max_active 8, 1 GiB jobs: {:+.0} %), so more workers keep \
             paying off. The EX's costs scaled by clock split this machine's teardown between \
             the zap and the free otherwise than the posting's EP did.",
            err("time per page, vanilla"),
            err("time per page, max_active 8, 1 GiB jobs"),
        ));
    }
    let jobs = (f[1].size as f64 / (2u64 << 30) as f64).round();
    if f[1].size < tn.size && (missed(rows, "2 GiB jobs over") || missed(rows, "fastest setting")) {
        notes.push(format!(
            "At {} GiB the 2 GiB rows are {jobs:.0} jobs: the pipeline's fill and drain (the \
             first job zapped before any worker starts, the last freed after the zap ends) \
             weigh about {:.0} % of the run, against {:.0} % of the posting's 100 GiB, more \
             than the steps these rows compare (the posting's 2 GiB jobs 5.5 % faster than \
             1 GiB at 2 workers; its 2 and 4 workers a tie); `--scale seed` runs the posting's \
             size.",
            f[1].size >> 30,
            200.0 / jobs,
            200.0 / (tn.size as f64 / (2u64 << 30) as f64)
        ));
    }
    notes
}

pub(super) fn hpe(rows: &[ValidationRow], f: &BigfreeResult, v1: Option<u32>) -> Vec<String> {
    let mut notes = Vec::new();
    let Some(x) = row(f, v1) else { return notes };
    if missed(rows, "time per page, v1") {
        let published = rows.get(1).map_or(0.0, |r| r.published);
        notes.push(format!(
            "The v1 row is lock-bound in the model: lru_lock is held {:.1} ns a page of the \
             row's {:.1} ns; the posting's {published:.1} ns a page says its bottleneck section \
             cost more on that machine. The model prices the transfers and remote loads of a \
             64-socket fabric with 2-socket figures (no figure for it was published), and \
             v4.10's locked sections were dearer than this host's proportion, as the \
             node-bound split shows.",
            hold_per_page(x, false),
            x.ns_per_page
        ));
    }
    notes
}
