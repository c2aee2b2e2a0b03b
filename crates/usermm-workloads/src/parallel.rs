//! Independent virtual runs side by side on the host's cores, within a host-memory budget.
//!
//! Each virtual run is single-threaded and deterministic on its own machine, so runs may go
//! in any order and on any number of host threads without changing a figure: only the wall
//! time and the host memory they hold at once depend on it. The wall time wants every core
//! busy; the memory wants the big machines alone. A run's host memory is estimated before it
//! starts ([`usermm::host_cost::host_bytes`], which follows what the engine allocates), and a
//! run starts only when the estimates of the runs in flight and its own fit in the budget —
//! or when nothing else is in flight, so a run bigger than the budget still runs, alone.
//!
//! Runs start in input order (a big run waits for the budget; the smaller ones after it wait
//! too), so the schedule is as predictable as the input. Results come back in input order.
//!
//! # Locks
//! One mutex over the schedule (next run, bytes and runs in flight), held only to take or
//! return a run, and its condition variable, on which a thread waits for the budget.

#![deny(unsafe_code)]

use std::sync::{Condvar, Mutex};

/// `f` of every job, on up to `threads` host threads, in input order.
pub fn map<T: Sync, R: Send>(jobs: &[T], threads: usize, f: &(dyn Fn(&T) -> R + Sync)) -> Vec<R> {
    map_within(jobs, threads, u64::MAX, &|_| 0, f)
}

#[derive(Debug, Default)]
struct Schedule {
    next: usize,
    bytes: u64,
    running: usize,
}

/// `f` of every job, on up to `threads` host threads, in input order, with at most `budget`
/// bytes of `cost`'s estimates in flight at once (a job over the budget runs alone).
pub fn map_within<T: Sync, R: Send>(
    jobs: &[T],
    threads: usize,
    budget: u64,
    cost: &(dyn Fn(&T) -> u64 + Sync),
    f: &(dyn Fn(&T) -> R + Sync),
) -> Vec<R> {
    let schedule = Mutex::new(Schedule::default());
    let freed = Condvar::new();
    let lock = || schedule.lock().unwrap_or_else(|e| e.into_inner());
    let out: Vec<Mutex<Option<R>>> = jobs.iter().map(|_| Mutex::new(None)).collect();
    // The next job and its estimate, once the budget has room for it; `None` when all are taken.
    let take = || -> Option<(usize, u64)> {
        let mut s = lock();
        loop {
            let i = s.next;
            let c = cost(jobs.get(i)?);
            if s.running == 0 || s.bytes.saturating_add(c) <= budget {
                s.next += 1;
                s.running += 1;
                s.bytes = s.bytes.saturating_add(c);
                return Some((i, c));
            }
            s = freed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    };
    std::thread::scope(|sc| {
        for _ in 0..threads.clamp(1, jobs.len().max(1)) {
            sc.spawn(|| {
                while let Some((i, c)) = take() {
                    let r = f(&jobs[i]);
                    *out[i].lock().expect("no job panics while holding its slot") = Some(r);
                    let mut s = lock();
                    s.running -= 1;
                    s.bytes -= c;
                    drop(s);
                    freed.notify_all();
                }
            });
        }
    });
    out.into_iter()
        .map(|m| {
            m.into_inner()
                .expect("no job panicked")
                .expect("every job ran")
        })
        .collect()
}

#[cfg(test)]
mod test {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn results_in_input_order_on_any_number_of_threads() {
        let jobs: Vec<u64> = (0..37).collect();
        for threads in [1, 2, 5, 64] {
            assert_eq!(
                map(&jobs, threads, &|x| x * x),
                jobs.iter().map(|x| x * x).collect::<Vec<_>>()
            );
        }
        assert!(map(&[] as &[u8], 4, &|x| *x).is_empty());
    }

    /// The estimates in flight never pass the budget, except a job bigger than the budget,
    /// which runs alone; every job runs once.
    #[test]
    fn the_budget_holds_and_a_big_job_runs_alone() {
        let jobs: Vec<u64> = vec![3, 3, 3, 9, 1, 1, 2, 12, 3, 3];
        let budget = 6;
        let in_flight = AtomicU64::new(0);
        let running = AtomicU64::new(0);
        let worst = Mutex::new(Vec::new());
        let out = map_within(&jobs, 4, budget, &|c| *c, &|c| {
            let b = in_flight.fetch_add(*c, Ordering::SeqCst) + c;
            let n = running.fetch_add(1, Ordering::SeqCst) + 1;
            worst.lock().unwrap().push((b, n, *c));
            std::thread::sleep(std::time::Duration::from_millis(5));
            in_flight.fetch_sub(*c, Ordering::SeqCst);
            running.fetch_sub(1, Ordering::SeqCst);
            *c
        });
        assert_eq!(out, jobs);
        for (bytes, n, c) in worst.into_inner().unwrap() {
            assert!(
                bytes <= budget || (n == 1 && c > budget),
                "{bytes} bytes, {n} runs"
            );
        }
    }
}
