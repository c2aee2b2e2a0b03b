//! Unit tests of `usermm bench`: path names, option checks, the step count.

use super::*;

#[test]
fn path_names_round_trip() {
    for p in BenchPath::ALL {
        assert_eq!(BenchPath::parse(p.name()), Some(p));
        assert_eq!(
            serde_json::to_value(p).unwrap(),
            serde_json::Value::String(p.name().into())
        );
    }
    assert_eq!(BenchPath::parse("populate"), None);
}

#[test]
fn spread_is_median_mad_and_range() {
    let s = Spread::of(vec![3.0, 1.0, 2.0]).unwrap();
    assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
    assert_eq!(s.mad_pct, 50.0);
    let s = Spread::of(vec![4.0, 1.0, 2.0, 3.0]).unwrap();
    assert_eq!(s.median, 2.5);
    assert!(Spread::of(vec![]).is_none());
}

#[test]
fn bad_options_are_refused() {
    let mut o = BenchOpts::new(1 << 20);
    assert!(matches!(run(&o, &mut |_| {}), Err(BenchError::TooSmall(_))));
    o.size = u64::MAX;
    assert!(matches!(check(&o), Err(BenchError::TooBig(_))));
    o.size = MAX_SIZE;
    o.read_size = u64::MAX;
    assert!(matches!(check(&o), Err(BenchError::TooBig(_))));
    let mut o = BenchOpts::new(8 << 20);
    o.repeat = 0;
    assert!(matches!(run(&o, &mut |_| {}), Err(BenchError::NoRepeat)));
    o.repeat = 1;
    o.base.cpus = 1;
    assert!(matches!(check(&o), Err(BenchError::TooFewCpus(1))));
    assert_eq!(MAX_SIZE, 1 << 40, "the TooBig message says 1 TiB");
}

#[test]
fn engine_only_run_fills_every_path() {
    let mut o = BenchOpts::new(8 << 20);
    o.read_size = 16 << 20;
    o.repeat = 1;
    o.host = false;
    o.mmaps = 2000;
    // The page_fault1 row's period: long enough that a busy host (the other tests of this
    // binary, on two cores) cannot starve a whole period of faults, which the row reports as
    // an error (10 and 20 ms did, now and then).
    o.wis_period = std::time::Duration::from_millis(100);
    let mut steps = 0;
    let r = run(&o, &mut |_| steps += 1).unwrap();
    assert!(steps > 3);
    assert_eq!(r.paths.len(), BenchPath::ALL.len());
    for p in &r.paths {
        let vcost = matches!(
            p.path,
            BenchPath::BigfreeVirtual | BenchPath::UsememAbVirtual
        );
        // bigfree-nodes runs on sparse backing only; virtual time's cost rows have both
        // clocks' process CPU time and their ratio instead of the engine's figures.
        let full = p.path != BenchPath::BigfreeNodes;
        assert_eq!(p.engine_full_ns.is_some(), full && !vcost, "{p:?}");
        assert_eq!(p.engine_sparse_ns.is_some(), !vcost, "{p:?}");
        assert_eq!(
            p.wall_cpu_ns.is_some() && p.virtual_over_wall.is_some_and(|x| x > 0.0),
            vcost,
            "{p:?}"
        );
        assert!(p.host_ns.is_none());
        assert_eq!(p.nodes.is_some(), !full, "{p:?}");
    }
    let wis = r.paths.last().unwrap();
    assert_eq!(wis.path, BenchPath::WisPageFault1);
    assert!(wis.engine_full_ns.is_some_and(|x| x > 0.0) && wis.clock == "wall");
    let n = r.paths[11].nodes.as_ref().unwrap();
    assert_eq!(
        (n.nodes, n.size),
        (scale::NODES, scale::bigfree_size(8 << 20))
    );
    assert!(n.cpu_ratio > 0.0 && n.virtual_ratio > 0.0 && n.virtual_host_cpu_ratio > 0.0);
    assert!(r.zeroing.memset_gib_s > 0.0 && r.zeroing.zero_alloc_4k_gib_s > 0.0);
    assert_eq!(r.mmaps, Some(2000));
    assert!(r.config_full.prefault && r.config_full.backing == BackingMode::Full);
    assert_eq!(r.config_sparse.backing, BackingMode::Sparse);
    o.only = vec![BenchPath::ZeroRead4k];
    let r = run(&o, &mut |_| {}).unwrap();
    assert_eq!(r.paths.len(), 1);
    assert_eq!(r.paths[0].path, BenchPath::ZeroRead4k);
    assert_eq!(r.mmaps, None);
}

#[test]
fn random_order_is_a_permutation_fixed_by_its_seed() {
    let a = scale::random_order(1000, 7);
    let mut sorted = a.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..1000).collect::<Vec<u32>>());
    assert_eq!(a, scale::random_order(1000, 7));
    assert_ne!(a, scale::random_order(1000, 8));
    assert_ne!(a, sorted);
}

/// `wis-page-fault1` alone at a tiny size, the host's side included: one sample of each side
/// per repeat and the ratio of the host's figure over the full-backed engine's.
#[test]
fn the_page_fault1_row_measures_engine_and_host_in_one_run() {
    let mut o = BenchOpts::new(4 << 20);
    o.read_size = 4 << 20;
    o.repeat = 2;
    o.only = vec![BenchPath::WisPageFault1];
    o.wis_period = std::time::Duration::from_millis(100);
    assert_eq!(wis::size(&o), 4 << 20);
    let r = run(&o, &mut |_| {}).unwrap();
    assert_eq!(r.paths.len(), 1);
    let p = &r.paths[0];
    assert_eq!((p.path, p.clock), (BenchPath::WisPageFault1, "wall"));
    for side in [&p.engine_full, &p.engine_sparse, &p.host] {
        assert_eq!(side.as_ref().unwrap().samples.len(), 2, "{p:?}");
    }
    let (h, f) = (p.host_ns.unwrap(), p.engine_full_ns.unwrap());
    assert_eq!(p.host_over_full, Some(h / f));
    assert_eq!(wis::size(&BenchOpts::new(1 << 30)), 128 << 20);
}
