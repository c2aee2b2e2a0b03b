use std::{
    cell::RefCell,
    collections::{BTreeMap, BTreeSet},
    sync::{atomic::AtomicUsize, Barrier, Mutex as StdMutex},
    time::Duration,
};

use std::thread;
use std::time::Instant;

use super::*;

fn cpus(ids: &[u16]) -> Vec<CpuId> {
    ids.iter().copied().map(CpuId).collect()
}

/// A barrier for `n` items that panics (failing the item, hence the test) instead of hanging
/// if the pool never runs `n` of them at once. The timeout is a safety net, not an assertion
/// about speed.
struct Rendezvous {
    arrived: StdMutex<usize>,
    cond: std::sync::Condvar,
    n: usize,
}

impl Rendezvous {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(Self {
            arrived: StdMutex::new(0),
            cond: std::sync::Condvar::new(),
            n,
        })
    }

    fn arrive(&self) {
        let mut arrived = self.arrived.lock().unwrap();
        *arrived += 1;
        self.cond.notify_all();
        let (arrived, timeout) = self
            .cond
            .wait_timeout_while(arrived, Duration::from_secs(60), |a| *a < self.n)
            .unwrap();
        assert!(
            !timeout.timed_out(),
            "only {} of {} items ran at once",
            *arrived,
            self.n
        );
    }
}

/// Track how many items run at once, and the most ever seen.
#[derive(Default)]
struct Concurrency {
    running: AtomicUsize,
    max: AtomicUsize,
}

impl Concurrency {
    fn enter(&self) {
        let now = self.running.fetch_add(1, Relaxed) + 1;
        self.max.fetch_max(now, Relaxed);
    }
    fn leave(&self) {
        self.running.fetch_sub(1, Relaxed);
    }
}

#[test]
fn fifo_order_with_one_worker() {
    let wq = Workqueue::new("fifo", 1, cpus(&[0]));
    let order = Arc::new(StdMutex::new(Vec::new()));
    for i in 0..200 {
        let order = Arc::clone(&order);
        wq.queue(move |_| order.lock().unwrap().push(i));
    }
    wq.flush();
    assert_eq!(*order.lock().unwrap(), (0..200).collect::<Vec<_>>());
}

#[test]
fn concurrency_reaches_but_never_exceeds_max_active() {
    for max_active in [1, 2, 4] {
        let wq = Workqueue::new("conc", max_active, cpus(&[0, 1]));
        let conc = Arc::new(Concurrency::default());
        let meet = Rendezvous::new(max_active);
        let names = Arc::new(StdMutex::new(BTreeSet::new()));
        for i in 0..max_active * 8 {
            let (conc, meet, names) = (Arc::clone(&conc), Arc::clone(&meet), Arc::clone(&names));
            wq.queue(move |_| {
                conc.enter();
                names
                    .lock()
                    .unwrap()
                    .insert(thread::current().name().unwrap().to_owned());
                if i < max_active {
                    meet.arrive();
                }
                conc.leave();
            });
        }
        wq.flush();
        assert_eq!(
            wq.stats().panicked,
            0,
            "the first max_active items never met"
        );
        assert_eq!(conc.max.load(Relaxed), max_active);
        let expected: BTreeSet<String> = (0..max_active)
            .map(|i| format!("kworker/u:conc/{i}"))
            .collect();
        assert_eq!(*names.lock().unwrap(), expected);
    }
}

#[test]
fn flush_waits_for_everything_queued_before_it() {
    let wq = Workqueue::new("flush", 3, cpus(&[0]));
    let done = Arc::new(AtomicUsize::new(0));
    // Item 0 blocks until released, so later items finish before it (out of order).
    let (release_tx, release_rx) = std::sync::mpsc::sync_channel::<()>(0);
    {
        let done = Arc::clone(&done);
        wq.queue(move |_| {
            release_rx.recv().unwrap();
            done.fetch_add(1, Relaxed);
        });
    }
    for _ in 0..50 {
        let done = Arc::clone(&done);
        wq.queue(move |_| {
            done.fetch_add(1, Relaxed);
        });
    }
    let seen_by_flusher = thread::scope(|s| {
        let flusher = s.spawn(|| {
            wq.flush();
            done.load(Relaxed)
        });
        thread::yield_now();
        // Item 0 is held back, so the flush cannot have returned.
        assert!(!flusher.is_finished());
        release_tx.send(()).unwrap();
        flusher.join().unwrap()
    });
    assert_eq!(
        seen_by_flusher, 51,
        "flush returned before every earlier item finished"
    );
    assert_eq!(wq.nr_pending(), 0);
    let s = wq.stats();
    assert_eq!((s.items_queued, s.items_done), (51, 51));
}

#[test]
fn workers_pass_their_bound_cpu() {
    let max_active = 5;
    let wq = Workqueue::new("bind", max_active, cpus(&[3, 7]));
    assert_eq!(wq.worker_cpus(), &cpus(&[3, 7, 3, 7, 3])[..]);
    let meet = Rendezvous::new(max_active);
    let seen = Arc::new(StdMutex::new(BTreeMap::new()));
    for _ in 0..max_active {
        let (meet, seen) = (Arc::clone(&meet), Arc::clone(&seen));
        wq.queue(move |cpu| {
            let name = thread::current().name().unwrap().to_owned();
            let worker: usize = name.rsplit('/').next().unwrap().parse().unwrap();
            seen.lock().unwrap().insert(worker, cpu);
            meet.arrive();
        });
    }
    wq.flush();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), max_active, "every worker ran one item");
    for (&worker, &cpu) in seen.iter() {
        assert_eq!(cpu, [CpuId(3), CpuId(7)][worker % 2], "worker {worker}");
    }
    let stats = wq.stats();
    for w in &stats.workers {
        assert_eq!(w.cpu, seen[&w.worker]);
        assert_eq!(w.items_done, 1);
    }
}

#[test]
fn handles_complete_even_when_an_item_panics() {
    let wq = Workqueue::new("panic", 1, cpus(&[0]));
    let bad = wq.queue(|_| panic!("deliberate panic in a work item"));
    let ran = Arc::new(AtomicUsize::new(0));
    let good = {
        let ran = Arc::clone(&ran);
        wq.queue(move |_| {
            ran.fetch_add(1, Relaxed);
        })
    };
    assert_eq!(bad.wait(), WorkOutcome::Panicked);
    assert_eq!(good.wait(), WorkOutcome::Completed);
    assert_eq!(ran.load(Relaxed), 1, "the pool survived the panic");
    wq.flush();
    let s = wq.stats();
    assert_eq!((s.items_done, s.panicked), (2, 1));
}

#[test]
fn wait_returns_after_the_item_ran() {
    let wq = Workqueue::new("wait", 2, cpus(&[0]));
    let flag = Arc::new(AtomicUsize::new(0));
    let h = {
        let flag = Arc::clone(&flag);
        wq.queue(move |_| flag.store(1, Relaxed))
    };
    assert_eq!(h.wait(), WorkOutcome::Completed);
    assert_eq!(flag.load(Relaxed), 1);
    // The item's statistics are in before its handle completes.
    assert_eq!(wq.stats().items_done, 1);
}

#[test]
fn drop_drains_and_joins() {
    thread_local! {
        static EXIT: RefCell<Option<ExitSignal>> = const { RefCell::new(None) };
    }
    struct ExitSignal(Arc<AtomicUsize>);
    impl Drop for ExitSignal {
        fn drop(&mut self) {
            self.0.fetch_add(1, Relaxed);
        }
    }

    let max_active = 3;
    let exited = Arc::new(AtomicUsize::new(0));
    let ran = Arc::new(AtomicUsize::new(0));
    let wq = Workqueue::new("drop", max_active, cpus(&[0, 1]));
    let meet = Rendezvous::new(max_active);
    for _ in 0..max_active {
        let (exited, meet) = (Arc::clone(&exited), Arc::clone(&meet));
        wq.queue(move |_| {
            // Destroyed when the worker thread exits.
            EXIT.with(|e| *e.borrow_mut() = Some(ExitSignal(exited)));
            meet.arrive();
        });
    }
    for _ in 0..100 {
        let ran = Arc::clone(&ran);
        wq.queue(move |_| {
            ran.fetch_add(1, Relaxed);
        });
    }
    drop(wq);
    assert_eq!(
        ran.load(Relaxed),
        100,
        "queued items run before the workers exit"
    );
    assert_eq!(
        exited.load(Relaxed),
        max_active,
        "every worker thread has exited"
    );
}

#[test]
fn cpu_time_is_charged_to_the_worker() {
    let wq = Workqueue::new("acct", 2, cpus(&[0]));
    let inner_cpu = Arc::new(AtomicU64::new(0));
    let inner_wall = Arc::new(AtomicU64::new(0));
    for _ in 0..4 {
        let (inner_cpu, inner_wall) = (Arc::clone(&inner_cpu), Arc::clone(&inner_wall));
        wq.queue(move |_| {
            let wall0 = Instant::now();
            let t0 = thread_cpu_time_ns();
            let mut x = 0u64;
            while thread_cpu_time_ns() == t0 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            inner_cpu.fetch_add(thread_cpu_time_ns() - t0, Relaxed);
            inner_wall.fetch_add(wall0.elapsed().as_nanos() as u64, Relaxed);
        });
    }
    wq.flush();
    let s = wq.stats();
    let (inner_cpu, inner_wall) = (inner_cpu.load(Relaxed), inner_wall.load(Relaxed));
    assert!(inner_cpu > 0);
    // The worker's brackets enclose the item's own: its figures can only be larger.
    assert!(s.cpu_ns >= inner_cpu, "{} < {}", s.cpu_ns, inner_cpu);
    assert!(
        s.busy_wall_ns >= inner_wall,
        "{} < {}",
        s.busy_wall_ns,
        inner_wall
    );
    assert_eq!(s.cpu_ns, s.workers.iter().map(|w| w.cpu_ns).sum::<u64>());
    assert_eq!(
        s.items_done,
        s.workers.iter().map(|w| w.items_done).sum::<u64>()
    );
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["items_done"], 4);
}

#[test]
fn thread_cpu_time_is_monotonic_and_per_thread() {
    let a = thread_cpu_time_ns();
    let b = thread_cpu_time_ns();
    assert!(a > 0 && b >= a);
    // A fresh thread starts near zero, far below a thread that has burnt CPU first.
    let mut x = 0u64;
    let t0 = thread_cpu_time_ns();
    while thread_cpu_time_ns() < t0 + 5_000_000 {
        x = std::hint::black_box(x.wrapping_add(1));
    }
    let mine = thread_cpu_time_ns();
    let fresh = thread::spawn(thread_cpu_time_ns).join().unwrap();
    assert!(fresh < mine);
}

#[test]
fn concurrent_flushes_all_return() {
    let wq = Workqueue::new("multi", 2, cpus(&[0]));
    for _ in 0..20 {
        wq.queue(|_| {});
    }
    let barrier = Barrier::new(4);
    thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                barrier.wait();
                wq.flush();
            });
        }
    });
    assert_eq!(wq.stats().items_done, 20);
}

/// Two sockets of 2 cores x 2 threads, one node each: CPUs 0-3 node 0 (cores 0,1; threads
/// 0,0,1,1), 4-7 node 1 (cores 2,3).
fn small_pools() -> UnboundPools {
    UnboundPools::new(
        vec![0, 0, 0, 0, 1, 1, 1, 1],
        vec![0, 1, 0, 1, 2, 3, 2, 3],
        vec![0, 0, 1, 1, 0, 0, 1, 1],
    )
}

#[test]
fn unbound_pool_workers_stay_on_the_queuers_node_idle_cores_first() {
    let p = small_pools();
    // Queued from CPU 7 (node 1, core 3): the idle core 2 first (CPU 4), then the idle CPUs
    // in wrap order from 7 — the queuer's own sibling (CPU 5), then CPU 6 — as
    // select_idle_core then select_idle_cpu scan; past the node's CPUs they wrap.
    assert_eq!(p.workers_for(CpuId(7), 1), cpus(&[4]));
    assert_eq!(p.workers_for(CpuId(7), 3), cpus(&[4, 5, 6]));
    assert_eq!(p.workers_for(CpuId(7), 5), cpus(&[4, 5, 6, 4, 5]));
    // From node 0, never a node-1 CPU; the wrap starts after the queuer.
    assert!(p.workers_for(CpuId(0), 6).iter().all(|c| c.index() < 4));
    assert_eq!(p.workers_for(CpuId(0), 2), cpus(&[1, 2]));
    assert_eq!(p.workers_for(CpuId(2), 3), cpus(&[3, 0, 1]));
}
