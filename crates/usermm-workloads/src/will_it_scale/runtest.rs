//! will-it-scale's `runtest.py`: for each task count, the test as processes and as threads,
//! and one CSV row — `tasks,processes,processes_idle,threads,threads_idle,linear` — after the
//! header and its `0,0,100,0,100,0` row, exactly as `runtest.py` prints it (LKP's
//! will-it-scale parser reads it unchanged).
//!
//! As in `runtest.py` (LKP's version of it): a run that printed no `average:` counts 0;
//! `linear` is the larger of the two averages at one task, times the row's tasks (0 until a
//! one-task row); idle is the share of the machine's CPU time that was idle during the run,
//! in percent: `/proc/stat` before and after it on the wall clock and the host, the modelled
//! machine's idle time in virtual time.

use serde::Serialize;

use super::{run, Backend, Params, Test, WisError, WisRecord};
use crate::task::Mode;

/// One CSV row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuntestRow {
    pub tasks: usize,
    pub processes: u64,
    pub processes_idle: f64,
    pub threads: u64,
    pub threads_idle: f64,
    pub linear: u64,
}

/// The CSV `runtest.py` prints for `rows`, header included.
pub fn runtest_csv(rows: &[RuntestRow]) -> String {
    let mut s = String::from("tasks,processes,processes_idle,threads,threads_idle,linear\n");
    s.push_str("0,0,100,0,100,0\n");
    for r in rows {
        s.push_str(&format!(
            "{},{},{:.2},{},{:.2},{}\n",
            r.tasks, r.processes, r.processes_idle, r.threads, r.threads_idle, r.linear
        ));
    }
    s
}

/// One run, its idle share measured around it.
fn measured(
    test: Test,
    backend: Backend<'_>,
    params: &Params,
) -> Result<(WisRecord, f64), WisError> {
    let before = usermm_host::facts::cpu_idle_busy();
    let rec = run(test, backend, params, &mut |_| {})?;
    let after = usermm_host::facts::cpu_idle_busy();
    let idle = match (rec.idle_percent, before, after) {
        (Some(p), _, _) => p,
        (None, Some((i0, b0)), Some((i1, b1))) => {
            let (i, b) = (i1.saturating_sub(i0), b1.saturating_sub(b0));
            if i + b == 0 {
                0.0
            } else {
                100.0 * i as f64 / (i + b) as f64
            }
        }
        _ => 0.0,
    };
    Ok((rec, idle))
}

/// `runtest.py TEST` over `tasks` (each count in order), with `base`'s other parameters;
/// `row` is called with each row as it is done. Returns the rows and every run's record.
pub fn runtest(
    test: Test,
    backend: Backend<'_>,
    tasks: &[usize],
    base: &Params,
    row: &mut dyn FnMut(&RuntestRow),
) -> Result<(Vec<RuntestRow>, Vec<WisRecord>), WisError> {
    let mut rows = Vec::new();
    let mut recs = Vec::new();
    let mut linear = 0;
    for &n in tasks {
        let p = |mode| Params {
            tasks: n,
            mode,
            ..*base
        };
        let (pr, pi) = measured(test, backend, &p(Mode::Processes))?;
        let (tr, ti) = measured(test, backend, &p(Mode::Threads))?;
        let (pa, ta) = (pr.average.unwrap_or(0), tr.average.unwrap_or(0));
        if n == 1 {
            linear = pa.max(ta);
        }
        let r = RuntestRow {
            tasks: n,
            processes: pa,
            processes_idle: pi,
            threads: ta,
            threads_idle: ti,
            linear: linear * n as u64,
        };
        row(&r);
        rows.push(r);
        recs.push(pr);
        recs.push(tr);
    }
    Ok((rows, recs))
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn csv_is_runtest_pys() {
        let rows = [RuntestRow {
            tasks: 1,
            processes: 510000,
            processes_idle: 49.5,
            threads: 500001,
            threads_idle: 50.0,
            linear: 510000,
        }];
        assert_eq!(
            runtest_csv(&rows),
            "tasks,processes,processes_idle,threads,threads_idle,linear\n\
             0,0,100,0,100,0\n\
             1,510000,49.50,500001,50.00,510000\n"
        );
    }
}
