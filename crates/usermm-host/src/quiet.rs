//! Was the host quiet while we measured it? The state a host measurement is judged by, taken
//! before and after it: the 1-minute load average (`/proc/loadavg`), the steal time of a guest's
//! CPUs (`/proc/stat`), and, where the measurement can say, each measuring thread's CPU time
//! against the wall time it ran for.
//!
//! A measurement is *host busy* — its figure is not a fair test of a model, so a report shows
//! no error for it and counts it neither way — when any of these holds ([`judge`]):
//!
//! - the load average, before or after, exceeds the measurement's own runnable threads by more
//!   than [`LOAD_ALLOWANCE`] (0.5): someone else wanted the CPUs too. Before the measurement the
//!   process's own thread was running (it predicts first), so its own count is at least 1;
//! - the steal time between the two readings exceeds [`STEAL_LIMIT_PCT`] (2 %) of the machine's
//!   CPU time: the hypervisor ran someone else on our CPUs;
//! - a measuring thread got less than [`CPU_SHARE_MIN`] (90 %) of the wall time it ran for as
//!   CPU time: it waited for a CPU (a CPU-bound loop such as will-it-scale's gets all of it on
//!   a quiet host).
//!
//! The load average is an exponentially damped mean over a minute, so it lags: a burst just
//! before a short measurement shows in it, and one during it may show only after. Reading it
//! on both sides and taking the worse is the rule's answer to that, and the steal and CPU-share
//! criteria see what happens during the measurement itself.

use serde::{Deserialize, Serialize};

use crate::facts;

/// The load average a measurement may find beyond its own runnable threads.
pub const LOAD_ALLOWANCE: f64 = 0.5;
/// The most steal time, in percent of the machine's CPU time during the measurement.
pub const STEAL_LIMIT_PCT: f64 = 2.0;
/// The least CPU time a measuring thread must get of the wall time it ran for.
pub const CPU_SHARE_MIN: f64 = 0.9;

/// The host's state at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HostLoad {
    /// `/proc/loadavg`'s first field (`None`: unreadable).
    pub loadavg_1min: Option<f64>,
    /// `/proc/stat`'s steal and whole CPU time, jiffies (`None`: unreadable).
    pub steal_total: Option<(u64, u64)>,
}

impl HostLoad {
    /// The host's state now.
    pub fn now() -> HostLoad {
        HostLoad {
            loadavg_1min: facts::loadavg_1min(),
            steal_total: facts::cpu_steal_total(),
        }
    }
}

/// A measurement's quietness: both readings, what they give, and the judgement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Quietness {
    pub before: HostLoad,
    pub after: HostLoad,
    /// The measurement's own runnable threads (the load it may add itself).
    pub own_threads: usize,
    /// Steal time between the readings, % of the machine's CPU time then.
    pub steal_pct: Option<f64>,
    /// Each measuring thread's CPU time over its wall time (empty: not recorded).
    pub cpu_over_wall: Vec<f64>,
    /// True when the host was not quiet ([`judge`]).
    pub busy: bool,
    /// Why, one clause per criterion that failed.
    pub why: Vec<String>,
}

/// Judge a measurement by the host's state `before` and `after` it, the measurement's
/// `own_threads` runnable threads, and each measuring thread's CPU share of its wall time
/// (`cpu_over_wall`; empty when the measurement cannot say). See the module doc for the rule.
pub fn judge(
    before: HostLoad,
    after: HostLoad,
    own_threads: usize,
    cpu_over_wall: Vec<f64>,
) -> Quietness {
    let mut why = Vec::new();
    let own = own_threads.max(1) as f64;
    for (when, l) in [("before", before), ("after", after)] {
        if let Some(load) = l.loadavg_1min.filter(|&x| x > own + LOAD_ALLOWANCE) {
            why.push(format!(
                "load average {load:.2} {when}, over {own} own + {LOAD_ALLOWANCE}"
            ));
        }
    }
    let steal_pct = before.steal_total.zip(after.steal_total).map(|(b, a)| {
        let total = a.1.saturating_sub(b.1);
        if total == 0 {
            0.0
        } else {
            100.0 * a.0.saturating_sub(b.0) as f64 / total as f64
        }
    });
    if let Some(s) = steal_pct.filter(|&s| s > STEAL_LIMIT_PCT) {
        why.push(format!(
            "steal {s:.1} % of CPU time, over {STEAL_LIMIT_PCT} %"
        ));
    }
    for (i, &share) in cpu_over_wall.iter().enumerate() {
        if share.is_nan() || share < CPU_SHARE_MIN {
            why.push(format!(
                "task {i} had {:.0} % of its wall time as CPU, under {:.0} %",
                share * 100.0,
                CPU_SHARE_MIN * 100.0
            ));
        }
    }
    Quietness {
        before,
        after,
        own_threads,
        steal_pct,
        cpu_over_wall,
        busy: !why.is_empty(),
        why,
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn load(avg: f64, steal: u64, total: u64) -> HostLoad {
        HostLoad {
            loadavg_1min: Some(avg),
            steal_total: Some((steal, total)),
        }
    }

    #[test]
    fn each_criterion_marks_a_busy_host_and_says_why() {
        let quiet = judge(
            load(0.9, 10, 1000),
            load(2.4, 12, 2000),
            2,
            vec![0.99, 0.95],
        );
        assert!(!quiet.busy, "{quiet:?}");
        assert_eq!(quiet.steal_pct, Some(0.2));
        let loaded = judge(load(1.6, 0, 1000), load(1.0, 0, 2000), 1, vec![]);
        assert!(
            loaded.busy && loaded.why[0].contains("before"),
            "{loaded:?}"
        );
        let stolen = judge(load(0.1, 0, 1000), load(0.1, 30, 2000), 1, vec![1.0]);
        assert!(
            stolen.busy && stolen.why[0].starts_with("steal 3.0 %"),
            "{stolen:?}"
        );
        let starved = judge(load(0.1, 0, 1000), load(0.1, 0, 2000), 2, vec![1.0, 0.5]);
        assert_eq!(
            starved.why,
            ["task 1 had 50 % of its wall time as CPU, under 90 %"]
        );
        // A share that could not be taken (NaN) is not quiet either.
        assert!(judge(load(0.0, 0, 1), load(0.0, 0, 2), 1, vec![f64::NAN]).busy);
        // Unreadable files judge nothing.
        let none = HostLoad {
            loadavg_1min: None,
            steal_total: None,
        };
        let q = judge(none, none, 1, vec![]);
        assert!(!q.busy && q.steal_pct.is_none());
    }

    #[test]
    fn this_hosts_state_reads() {
        let l = HostLoad::now();
        assert!(l.loadavg_1min.is_some_and(|x| x >= 0.0));
        let (steal, total) = l.steal_total.unwrap();
        assert!(total > 0 && steal <= total);
    }
}
