use super::*;

#[test]
fn capacity_of_the_eras() {
    assert_eq!(gather_capacity(19, BatchSwitch::V2017), 9698);
    assert_eq!(gather_capacity(515, BatchSwitch::V2017), 262_658);
    // The modern switch at max − 1 leaves 515 batches short of 256K pages.
    assert!(gather_capacity(515, BatchSwitch::Modern) < DEFAULT_THRESHOLD_PAGES);
    assert!(gather_capacity(516, BatchSwitch::Modern) >= DEFAULT_THRESHOLD_PAGES);
}

#[test]
fn default_machine_sizes() {
    assert_eq!(default_mem(320 << 30), 400 << 30);
    assert_eq!(default_mem(1 << 20), 1 << 30);
    let c = default_config(320 << 30, &[1, 2, 4, 8, 16, 32], None, None);
    assert_eq!((c.nodes, c.cpus), (4, 36));
    let c = default_config(1 << 30, &[2], None, Some(2));
    assert_eq!((c.nodes, c.cpus), (2, 8));
    c.validate().unwrap();
}

#[test]
fn small_table_runs_and_parallel_rows_queue_jobs() {
    let mut o = BigfreeOpts::new(64 << 20, &[1, 2]);
    o.threshold_pages = 2048;
    o.max_batch_count = 8;
    let r = run(&o).unwrap();
    // vanilla, max_active 1 and 2, then the two pcp auto-tune rows.
    assert_eq!(r.rows.len(), 5);
    assert_eq!(r.rows[0].samples[0].jobs, 0);
    for row in r.rows.iter().filter(|r| r.max_active.is_some()) {
        assert!(row.samples[0].jobs > 0, "{row:?}");
        // Every job was handed to a worker: none fell back to an inline free.
        assert_eq!(row.samples[0].job_alloc_failures, 0, "{row:?}");
    }
    assert_eq!(
        r.rows.iter().map(|r| r.pcp_auto_tune).collect::<Vec<_>>(),
        [false, false, false, true, true]
    );
    let b = r.beyond.as_ref().expect("tuned rows ran");
    // 16K pages drained 31 at a time vs up to 992: far fewer zone.lock round trips.
    assert!(
        b.inline_zone_acq * 4.0 < b.vanilla_zone_acq,
        "tuned {} vs vanilla {}",
        b.inline_zone_acq,
        b.vanilla_zone_acq
    );
    assert!(!r.patched.as_ref().unwrap().label.contains("pcp"));
    for row in &r.rows {
        // Every data page, every PTE page, and (parallel) the batch pages come back.
        assert!(row.samples[0].pgfree >= r.pages, "{row:?}");
    }
}

#[test]
fn tuned_rows_are_skipped_when_the_base_tunes_or_when_asked() {
    let mut o = BigfreeOpts::new(64 << 20, &[1]);
    assert_eq!(row_specs(&o).len(), 4);
    o.pcp_tune_rows = false;
    assert_eq!(row_specs(&o).len(), 2);
    o.pcp_tune_rows = true;
    o.base.pcp.auto_tune = true;
    let specs = row_specs(&o);
    assert_eq!(specs.len(), 2);
    assert!(specs.iter().all(|s| s.2));
}

#[test]
fn bad_options_are_refused() {
    let mut o = BigfreeOpts::new(64 << 20, &[1]);
    o.max_active = vec![0];
    assert!(matches!(check(&o), Err(BigfreeError::BadMaxActive(0))));
    let mut o = BigfreeOpts::new(64 << 20, &[1]);
    o.threshold_pages = 0;
    assert!(matches!(check(&o), Err(BigfreeError::ZeroThreshold)));
    let mut o = BigfreeOpts::new(64 << 20, &[1]);
    o.size = 2 << 30;
    assert!(matches!(check(&o), Err(BigfreeError::TooBig { .. })));
}

#[test]
fn seed_scaled_jobs_keep_the_seeds_job_count() {
    assert_eq!(seed_scaled_job(320 << 30), (DEFAULT_THRESHOLD_PAGES, 515));
    let (t, b) = seed_scaled_job(16 << 30);
    assert_eq!((16u64 << 30) / 4096 / t, 319, "about 320 jobs");
    assert!(u64::from(b) * 510 >= t && u64::from(b - 1) * 510 < t);
}

/// The nodes whose zone.lock a sample's free took.
fn zones_taken(s: &RunSample) -> Vec<usize> {
    s.zone_lock_per_node
        .iter()
        .enumerate()
        .filter(|(_, z)| z.acquisitions > 0)
        .map(|(n, _)| n)
        .collect()
}

/// The modelled seed machine: every hardware thread of the profile, RAM shaped as the seed's
/// (the seed's own at its size; smaller, nodes that hold the whole mapping, as the seed's node
/// held every job in flight), and the free workers on the zapping task's node (v4.11's
/// per-node unbound pool), idle cores before SMT siblings.
#[test]
fn modelled_workers_run_on_the_zapping_tasks_node_and_the_mapping_shares_its_locks() {
    // At the seed's size the machine is the seed's: 512 GiB in four 128 GiB nodes, so 320 GiB
    // fills the task's node and spills into the next ones.
    let mut seed = BigfreeOpts::new(320 << 30, &[32]);
    seed.base.time.mode = TimeMode::Virtual;
    fit_seed_machine(&mut seed.base, 320 << 30, None, None, None);
    assert_eq!(seed.base.mem, 512 << 30);
    // Smaller, each node holds the whole mapping, as the seed's node held every job in flight.
    let size = 1u64 << 30;
    let mut o = BigfreeOpts::new(size, &[32]);
    o.base.time.mode = TimeMode::Virtual;
    fit_seed_machine(&mut o.base, size, None, None, None);
    assert_eq!((o.base.cpus, o.base.nodes), (144, 4));
    assert!(
        o.base.mem / 4 >= size + overhead_bytes(size, 144),
        "{}",
        o.base.mem
    );
    (o.threshold_pages, o.max_batch_count) = seed_scaled_job(size);
    o.pcp_tune_rows = false;
    let r = run(&o).unwrap();
    let s = &r.rows[1].samples[0];
    assert_eq!(s.worker_cpus.len(), 32);
    let node_of = |c: u16| s.cpus[usize::from(c)].node;
    let task_node = s.cpus.last().unwrap().node;
    assert!(
        s.worker_cpus.iter().all(|&c| node_of(c) == task_node),
        "{:?}",
        s.worker_cpus
    );
    // Every worker freed into the task's node's zone: one zone.lock took part.
    let zones = zones_taken(s);
    assert_eq!(zones, [task_node], "{:?}", s.zone_lock_per_node);
    // Each CPU's window covers the same stretch of the free, and keeps its flat record keys.
    let window = |c: &CpuWindow| c.time.busy_ns + c.time.spin_ns + c.time.idle_ns;
    assert!(s.cpus.iter().all(|c| window(c) == window(&s.cpus[0])));
    let json = serde_json::to_value(s.cpus[0]).unwrap();
    let mut keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "busy_ns",
            "cpu",
            "idle_ns",
            "node",
            "smt_busy_sibling_ns",
            "smt_spinning_sibling_ns",
            "socket",
            "spin_ns"
        ]
    );
    // The same run modelled twice is the same to the nanosecond.
    let again = run(&o).unwrap();
    assert_eq!(again.rows[1].samples[0].free_ns, s.free_ns);
}

/// `--nodes 16` on the 4-node seed machine is `numa=fake=16`: the same RAM cut into sixteen
/// nodes, node n on physical node n % 4; the workers stay on the task's socket (its first
/// emulated node's pool) and the mapping, too big for one emulated node, fills the emulated
/// nodes of the task's physical node, each with its own zone.lock and lru_lock.
#[test]
fn emulated_nodes_split_the_same_ram_and_the_mapping_spreads_over_the_tasks_socket() {
    let size = 1u64 << 30;
    let fitted = |nodes: Option<u16>| {
        let mut o = BigfreeOpts::new(size, &[8]);
        o.base.time.mode = TimeMode::Virtual;
        if let Some(n) = nodes {
            o.base.nodes = n;
        }
        fit_seed_machine(&mut o.base, size, None, nodes, None);
        o
    };
    let four = fitted(None);
    let mut o = fitted(Some(16));
    assert_eq!(o.base.nodes, 16);
    // The same RAM (to the MiB per node of rounding), four times as many nodes.
    assert!(o.base.mem >= four.base.mem && o.base.mem - four.base.mem < 16 << 20);
    assert!(
        o.base.mem / 16 < size,
        "an emulated node holds a quarter of the mapping"
    );
    (o.threshold_pages, o.max_batch_count) = seed_scaled_job(size);
    o.pcp_tune_rows = false;
    let r = run(&o).unwrap();
    let s = &r.rows[1].samples[0];
    let task_node = s.cpus.last().unwrap().node;
    let task_socket = s.cpus.last().unwrap().socket;
    assert!(task_node < 4, "every CPU sits on a first emulated node");
    assert!(s
        .worker_cpus
        .iter()
        .all(|&c| s.cpus[usize::from(c)].socket == task_socket));
    let zones = zones_taken(s);
    let t = task_node;
    assert_eq!(zones, [t, t + 4, t + 8, t + 12], "{zones:?}");
}

/// A small virtual table (sparse backing, 8 CPUs): its rows' runs with the given host threads
/// and budget, and every event as the caller saw it, in order (row label, what).
fn virtual_table(threads: usize, host_budget: u64) -> (BigfreeResult, Vec<(String, &'static str)>) {
    let mut o = BigfreeOpts::new(64 << 20, &[1, 2]);
    o.threshold_pages = 2048;
    o.max_batch_count = 8;
    o.repeat = 2;
    o.base.time.mode = TimeMode::Virtual;
    assert_eq!(o.base.backing, BackingMode::Sparse);
    o.threads = threads;
    o.host_budget = host_budget;
    // An `Rc`: the callback is not `Send`, so it can only be called on this thread.
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let log = seen.clone();
    let r = run_with(&o, &mut |e| {
        let (label, what) = match e {
            Event::Start { run, .. } => (format!("{} #{}", run.label, run.rep), "start"),
            Event::Populated { .. } => (String::new(), "populated"),
            Event::Freeing(run) => (format!("{} #{}", run.label, run.rep), "freeing"),
            Event::Done { run, .. } => (format!("{} #{}", run.label, run.rep), "done"),
        };
        log.borrow_mut().push((label, what));
    })
    .unwrap();
    let events = seen.borrow().clone();
    (r, events)
}

/// The runs of a virtual table on two host threads give the table of one thread to the
/// byte: every figure, the rows and each row's samples in order; every run reports its start,
/// its free and its end, in that order, on the caller's thread.
#[test]
fn a_virtual_table_is_the_same_on_one_host_thread_and_on_two() {
    let (one, one_events) = virtual_table(1, u64::MAX);
    let (two, two_events) = virtual_table(2, u64::MAX);
    assert_eq!(
        serde_json::to_string(&one).unwrap(),
        serde_json::to_string(&two).unwrap()
    );
    let labels: Vec<String> = two.rows.iter().map(|r| r.label.clone()).collect();
    assert_eq!(
        labels,
        [
            "vanilla",
            "max_active 1",
            "max_active 2",
            "vanilla + pcp tune",
            "max_active 4 + pcp tune"
        ]
    );
    assert!(two.rows.iter().all(|r| r.samples.len() == 2));
    // One thread: the runs one after another, as before.
    let mut serial = Vec::new();
    for rep in 0..2 {
        for l in &labels {
            serial.push(format!("{l} #{rep}"));
        }
    }
    let starts = |ev: &[(String, &str)]| -> Vec<String> {
        ev.iter()
            .filter(|e| e.1 == "start")
            .map(|e| e.0.clone())
            .collect()
    };
    assert_eq!(starts(&one_events), serial);
    // Two threads: every run once (two taken together may report their starts either way
    // round); each run's notes come start, freeing, done, whatever the other run in flight
    // says meanwhile.
    let mut two_starts = starts(&two_events);
    two_starts.sort();
    let mut sorted = serial.clone();
    sorted.sort();
    assert_eq!(two_starts, sorted);
    for run in &serial {
        let mine: Vec<&str> = two_events
            .iter()
            .filter(|e| &e.0 == run)
            .map(|e| e.1)
            .collect();
        assert_eq!(mine, ["start", "freeing", "done"], "{run}");
    }
    let populated = |ev: &[(String, &str)]| ev.iter().filter(|e| e.1 == "populated").count();
    assert_eq!(populated(&one_events), populated(&two_events));
}

/// Two runs whose machines would not fit in the host budget together are never in flight
/// together: each run's end is seen before the next one starts, on two threads too.
#[test]
fn a_budget_for_one_run_keeps_the_runs_apart() {
    let mut o = BigfreeOpts::new(64 << 20, &[1, 2]);
    o.base.time.mode = TimeMode::Virtual;
    let one = host_bytes(&o);
    let (apart, events) = virtual_table(2, one + one / 2);
    let mut in_flight = 0;
    for (run, what) in &events {
        match *what {
            "start" => {
                in_flight += 1;
                assert_eq!(in_flight, 1, "{run} started beside another run");
            }
            "done" => in_flight -= 1,
            _ => {}
        }
    }
    let (together, _) = virtual_table(2, u64::MAX);
    assert_eq!(
        serde_json::to_string(&apart).unwrap(),
        serde_json::to_string(&together).unwrap()
    );
}

/// The estimate that keeps the seed's 320 GiB rows apart: one row held 4.66 GB of the host at
/// its peak (`/usr/bin/time -v`, `reproduce --time virtual --scale seed`, one row at a time),
/// and the estimate is within a tenth of it, so a budget below two rows' estimate keeps two
/// from starting together.
#[test]
fn the_seed_rows_host_estimate_is_near_their_peak() {
    let o = seed_model_opts(320 << 30, &[1, 8]);
    let est = host_bytes(&o) as f64;
    let peak = 4.66e9;
    assert!((est / peak - 1.0).abs() < 0.1, "{est} bytes");
}
