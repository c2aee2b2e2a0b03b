use super::*;
use crate::cpu::{CpuId, Cpus};

#[test]
fn builtins_load_and_price_every_cost_and_engine_lock() {
    for name in Profile::builtin_names() {
        let p = Profile::builtin(name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.name(), name);
        for c in Cost::ALL {
            assert!(p.spec().costs[c.key()].source.len() > 10, "{name} {c:?}");
        }
        for class in ENGINE_LOCK_CLASSES {
            assert!(p.has_lock_class(class), "{name} {class}");
        }
        // The file format round-trips.
        let again = Profile::from_toml_str(&p.to_toml_string(), name).unwrap();
        assert_eq!(again.spec(), p.spec());
        assert_eq!(again.cost_ps, p.cost_ps);
    }
}

#[test]
fn builtin_topologies_are_the_seeds_machines() {
    let ex = Profile::builtin("haswell-ex-4s").unwrap();
    let t = ex.topology();
    assert_eq!(
        (t.sockets, t.nodes, t.cores(), t.hw_threads()),
        (4, 4, 72, 144)
    );
    assert_eq!(t.memory_gib, Some(512));
    let ep = Profile::builtin("haswell-ep-2s").unwrap();
    assert_eq!(
        (
            ep.topology().sockets,
            ep.topology().cores(),
            ep.topology().hw_threads()
        ),
        (2, 36, 72)
    );
    let sb = Profile::builtin("e5-2680-32c").unwrap();
    assert_eq!((sb.topology().sockets, sb.topology().hw_threads()), (2, 32));
    assert_eq!(sb.topology().ghz, 2.7);
}

#[test]
fn published_transfer_figures_are_the_cited_ones() {
    // docs/profiles.md: core-to-core-latency, Broadwell-EP E5-2695 v4 (Haswell-EP's uncore).
    let ep = Profile::builtin("haswell-ep-2s").unwrap();
    assert_eq!(ep.transfer_ns(Distance::SmtSibling), 7.6);
    assert_eq!(ep.transfer_ns(Distance::SameSocket), 44.0);
    assert_eq!(ep.transfer_ns(Distance::OtherSocket), 118.0);
    assert_eq!(ep.transfer_ns(Distance::SameCpu), 0.0);
    assert!(ep
        .spec()
        .transfer
        .same_socket
        .source
        .contains("core-to-core-latency"));
}

fn minimal() -> String {
    Profile::builtin("haswell-ep-2s").unwrap().to_toml_string()
}

fn err(text: &str) -> String {
    Profile::from_toml_str(text, "t.toml")
        .unwrap_err()
        .to_string()
}

#[test]
fn unknown_profile_names_the_builtins() {
    let e = Profile::resolve("skylake-9000").unwrap_err().to_string();
    assert_eq!(
        e,
        "profile: unknown profile `skylake-9000` (built in: haswell-ex-4s, haswell-ep-2s, \
         e5-2680-32c, hpe-64s, broadwell-ep-2s; or the path of a .toml file)"
    );
    assert!(Profile::resolve("haswell-ex-4s").is_ok());
}

#[test]
fn malformed_and_incomplete_files_name_the_field() {
    let good = minimal();
    // Not TOML at all.
    let e = err("sockets = = 4");
    assert!(e.starts_with("profile t.toml: line 1, column "), "{e}");
    // A missing cost.
    let no_zap = good.replace("[costs.zap_pte]", "[costs.zap_pte_gone]");
    assert!(
        err(&no_zap).contains("costs.zap_pte: missing"),
        "{}",
        err(&no_zap)
    );
    // A misspelt top-level key.
    let typo = good.replace("[smt]", "[smtt]");
    let e = err(&typo);
    assert!(e.contains("line ") && e.contains("smtt"), "{e}");
    // An unknown key inside a figure.
    let extra = good.replacen("source =", "nss = 3\nsource =", 1);
    assert!(err(&extra).contains("nss"), "{}", err(&extra));
    // Non-positive topology.
    let zero = good.replace("sockets = 2", "sockets = 0");
    assert_eq!(
        err(&zero),
        "profile t.toml: topology.sockets: must be positive (got 0)"
    );
    // A figure with two values, or none.
    let two = good.replacen("ns = 7.6", "ns = 7.6\ncycles = 3", 1);
    assert!(
        err(&two).contains("transfer.smt_sibling: give exactly one"),
        "{}",
        err(&two)
    );
    // An empty source.
    let p = Profile::from_toml_str(&good, "t").unwrap();
    let mut spec = p.spec().clone();
    spec.costs.get_mut("lru_del").unwrap().source = " ".into();
    let e = Profile::from_spec(spec, "t").unwrap_err().to_string();
    assert!(
        e.starts_with("profile t: costs.lru_del.source: must say where"),
        "{e}"
    );
    // A missing engine lock class.
    let nolock = good.replace("[locks.\"zone.lock\"]", "[locks.\"zone.lockk\"]");
    assert!(
        err(&nolock).contains("locks.\"zone.lock\": missing"),
        "{}",
        err(&nolock)
    );
    // A bandwidth on a per-operation cost.
    let p = Profile::from_toml_str(&good, "t").unwrap();
    let mut spec = p.spec().clone();
    spec.costs.get_mut("zap_pte").unwrap().ns = None;
    spec.costs.get_mut("zap_pte").unwrap().bytes_per_ns = Some(3.0);
    let e = Profile::from_spec(spec, "t").unwrap_err().to_string();
    assert!(
        e.contains("costs.zap_pte.bytes_per_ns: only costs that move bytes"),
        "{e}"
    );
}

/// Hostile profile shapes: fields that overflowed the machine's size, truncated to a node
/// count, built a larger machine than the engine has, or priced a step past the clock's range.
#[test]
fn topology_and_figures_are_bounded() {
    let good = minimal();
    let e = err(&good.replace("sockets = 2", "sockets = 4294967295"));
    assert_eq!(
        e,
        "profile t.toml: topology.sockets: at most 1024 (got 4294967295)"
    );
    let e = err(&good.replace("nodes = 2", "nodes = 65536"));
    assert_eq!(
        e,
        "profile t.toml: topology.nodes: at most 1024 (got 65536)"
    );
    let e = err(&good.replace("threads_per_core = 2", "threads_per_core = 9"));
    assert!(e.contains("topology.threads_per_core: at most 8"), "{e}");
    let e = err(&good.replace("cores_per_socket = 18", "cores_per_socket = 65535"));
    assert!(e.contains("hardware threads; at most 65535"), "{e}");
    assert_eq!(MAX_MEMORY_GIB << 30, crate::config::MAX_MEM_BYTES);
    let big = good.replace("ghz = 2.3", "ghz = 2.3\nmemory_gib = 1000000");
    assert!(err(&big).contains("topology.memory_gib: between 1 and 16384"));
    // A figure past 1 s, directly or by scaling, is refused rather than wrapping the clock.
    let p = Profile::from_toml_str(&good, "t").unwrap();
    let e = p.scaled("zap_pte", 3e10).unwrap_err().to_string();
    assert!(
        e.contains("costs.zap_pte: ") && e.contains("at most 1000000000 ns"),
        "{e}"
    );
    let e = p.scaled("locks.zone.lock", 1e12).unwrap_err().to_string();
    assert!(e.contains("an acquire costs at most"), "{e}");
}

#[test]
fn missing_file_is_a_read_error() {
    // Under this test's own temporary directory, in a subdirectory never made.
    let own = std::env::temp_dir().join(format!("usermm-profile-test-{}", std::process::id()));
    let missing = own.join("never-made").join("p.toml");
    let e = Profile::load(&missing).unwrap_err();
    assert!(e
        .to_string()
        .starts_with(&format!("profile {}: cannot read:", missing.display())));
}

#[test]
fn cycles_and_bandwidth_convert_at_the_profile_clock() {
    let p = Profile::builtin("e5-2680-32c").unwrap();
    let spec = p.spec();
    let clear = &spec.costs["clear_page"];
    assert_eq!(
        p.cost_ns(Cost::ClearPage),
        (4096.0 / clear.bytes_per_ns.unwrap() * 1000.0).round() / 1000.0
    );
    // A figure in cycles converts at topology.ghz.
    let mut spec = spec.clone();
    spec.atomic_rmw = Figure {
        ns: None,
        cycles: Some(27.0),
        bytes_per_ns: None,
        formula: Some("27".into()),
        source: "test".into(),
    };
    let c = Profile::from_spec(spec, "t").unwrap();
    assert_eq!(c.atomic_rmw_ps, (27.0 / 2.7 * 1000.0_f64).round() as u64);
}

#[test]
fn cpus_must_fit_the_hardware_threads() {
    let p = Profile::builtin("e5-2680-32c").unwrap();
    assert!(p.check_cpus(32).is_ok());
    assert_eq!(
        p.check_cpus(33).unwrap_err().to_string(),
        "cpus: 33 CPUs, but the machine has 32 hardware threads (profile e5-2680-32c)"
    );
    assert!(Placement::new(&p, 8, 0).is_err());
    // More nodes than CPUs is fake NUMA; past MAX_NUMNODES (1024) it is refused.
    assert!(Placement::new(&p, 8, 9).is_ok());
    assert!(Placement::new(&p, 8, 1025).is_err());
}

#[test]
fn placement_fills_cores_before_siblings_and_follows_sockets() {
    let p = Profile::builtin("haswell-ex-4s").unwrap();
    let all = Placement::new(&p, 144, 4).unwrap();
    // Socket 0 is CPUs 0-35: cores 0-17 thread 0, then their siblings.
    assert_eq!(
        (all.socket_of(0), all.core_of(0), all.thread_of(0)),
        (0, 0, 0)
    );
    assert_eq!(
        (all.socket_of(18), all.core_of(18), all.thread_of(18)),
        (0, 0, 1)
    );
    assert_eq!((all.socket_of(36), all.core_of(36)), (1, 18));
    assert_eq!(all.distance(0, 18), Distance::SmtSibling);
    assert_eq!(all.distance(0, 1), Distance::SameSocket);
    assert_eq!(all.distance(0, 36), Distance::OtherSocket);
    assert_eq!(all.distance(5, 5), Distance::SameCpu);
    // Eight CPUs: two per socket, each on its own core.
    let few = Placement::new(&p, 8, 4).unwrap();
    assert_eq!(
        (0..8).map(|c| few.socket_of(c)).collect::<Vec<_>>(),
        [0, 0, 1, 1, 2, 2, 3, 3]
    );
    assert!((0..8).all(|c| few.thread_of(c) == 0));
}

#[test]
fn nodes_agree_with_the_engines_cpu_to_node_and_fake_numa_follows_sockets() {
    let p = Profile::builtin("haswell-ex-4s").unwrap();
    for (cpus, nodes) in [
        (144, 4),
        (144, 8),
        (144, 16),
        (72, 4),
        (8, 2),
        (10, 3),
        (8, 64),
    ] {
        let pl = Placement::new(&p, cpus, nodes).unwrap();
        let engine = Cpus::emulated(cpus as u16, nodes as u16, 4);
        for c in 0..cpus {
            assert_eq!(
                pl.node_of(c),
                engine.node_of(CpuId(c as u16)).index(),
                "{cpus}/{nodes} cpu{c}"
            );
        }
    }
    // numa=fake=8 on 4 sockets: node i is memory of physical node i % 4, and every CPU of a
    // socket sits on that socket's first emulated node (numa_emulation's __apicid_to_node).
    let fake = Placement::new(&p, 144, 8).unwrap();
    assert_eq!(
        (0..8).map(|n| fake.socket_of_node(n)).collect::<Vec<_>>(),
        [0, 1, 2, 3, 0, 1, 2, 3]
    );
    assert_eq!((fake.node_of(0), fake.node_of(35)), (0, 0));
    assert_eq!((fake.node_of(36), fake.node_of(143)), (1, 3));
    assert!(
        (0..144).all(|c| fake.node_of(c) < 4),
        "nodes 4-7 have no CPU"
    );
    assert_eq!(fake.distance(0, 20), Distance::SameSocket);
}

#[test]
fn scaling_one_cost_changes_that_cost_only() {
    let p = Profile::builtin("haswell-ex-4s").unwrap();
    let s = p.scaled("zap_pte", 1.5).unwrap();
    for c in Cost::ALL {
        let (a, b) = (p.cost_ns(*c), s.cost_ns(*c));
        if *c == Cost::ZapPte {
            assert!((b - a * 1.5).abs() < 0.002, "{a} x1.5 = {b}");
        } else {
            assert_eq!(a, b, "{} moved", c.key());
        }
    }
    assert_eq!(p.transfer_ps, s.transfer_ps);
    assert_eq!(
        (p.wakeup_ps, p.atomic_rmw_ps, p.smt_milli),
        (s.wakeup_ps, s.atomic_rmw_ps, s.smt_milli)
    );
    assert_eq!(p.locks, s.locks);
    assert!(s.name().contains("zap_pte x1.5"));
    // A bandwidth is divided, so the time it stands for is multiplied.
    let c = p.scaled("clear_page", 0.5).unwrap();
    let ratio = c.cost_ns(Cost::ClearPage) / p.cost_ns(Cost::ClearPage);
    assert!((ratio - 0.5).abs() < 0.01, "{ratio}");
    // Topology-level figures and lock acquires.
    let t = p.scaled("transfer.other_socket", 2.0).unwrap();
    assert_eq!(t.transfer_ps[3], 2 * p.transfer_ps[3]);
    assert_eq!(t.transfer_ps[..3], p.transfer_ps[..3]);
    let l = p.scaled("locks.zone.lock", 2.0).unwrap();
    assert_eq!(
        l.locks["zone.lock"].acquire,
        2 * p.locks["zone.lock"].acquire
    );
    assert_eq!(l.locks["lru_lock"], p.locks["lru_lock"]);
    let smt = p.scaled("smt.sibling_factor", 0.5).unwrap();
    assert_eq!(smt.smt_milli, 1000 + (p.smt_milli - 1000) / 2);
    assert!(p.scaled("no_such_cost", 2.0).is_err());
    assert!(p.scaled("zap_pte", 0.0).is_err());
}

/// Regression: a figure written rounded (5.2 for a formula giving 5.2315) scaled by 4 missed
/// its scaled formula by 0.13 and the scaled profile failed to load; every scalable key of
/// every built-in profile now scales by 4 and by 0.25.
#[test]
fn every_key_scales_by_large_factors_and_still_loads() {
    for name in Profile::builtin_names() {
        let p = Profile::builtin(name).unwrap();
        let mut keys: Vec<String> = p.spec().costs.keys().cloned().collect();
        keys.extend(p.spec().locks.keys().map(|l| format!("locks.{l}")));
        keys.extend(
            [
                "transfer.smt_sibling",
                "transfer.same_socket",
                "transfer.other_socket",
                "wakeup",
                "atomic_rmw",
                "smt.sibling_factor",
                "memory.dram_local",
                "memory.dram_remote",
                "memory.dram_stream",
                "memory.llc_lines",
                "memory.l2_lines",
                "jitter",
            ]
            .map(String::from),
        );
        for k in &keys {
            for f in [4.0, 0.25] {
                if let Err(e) = p.scaled(k, f) {
                    panic!("{name}: {k} x{f}: {e}");
                }
            }
        }
    }
    let p = Profile::builtin("haswell-ex-4s").unwrap();
    let s = p.scaled("free_pcppages_bulk_page", 4.0).unwrap();
    let ratio = s.cost_ns(Cost::FreePcppagesBulkPage) / p.cost_ns(Cost::FreePcppagesBulkPage);
    assert!((ratio - 4.0).abs() < 0.03, "{ratio}");
    // A factor of 1 changes no figure (the sensitivity tables' unscaled run).
    for name in Profile::builtin_names() {
        let p = Profile::builtin(name).unwrap();
        for k in [
            "zap_pte",
            "free_pcppages_bulk_page",
            "memory.dram_stream",
            "jitter",
        ] {
            let s = p.scaled(k, 1.0).unwrap();
            assert_eq!(s.cost_ps, p.cost_ps, "{name} {k}");
            assert_eq!(s.memory, p.memory, "{name} {k}");
            assert_eq!(s.jitter_ppm, p.jitter_ppm, "{name} {k}");
        }
    }
}

/// A name that is a path, or a path that exists, is read as a file: a missing file, a
/// directory and a device each say so in one line (a device is never read: /dev/zero
/// would be endless), and an oversized file is refused unread past its bound.
#[test]
fn paths_that_are_not_profile_files_say_what_they_are() {
    let own = std::env::temp_dir().join(format!("usermm-profile-paths-{}", std::process::id()));
    std::fs::create_dir_all(&own).unwrap();
    let missing = own.join("nope.toml");
    let e = Profile::resolve(missing.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("profile ") && e.contains(": cannot read: "),
        "{e}"
    );
    assert!(!e.contains("unknown profile"), "{e}");
    let e = Profile::resolve(own.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.ends_with("cannot read: not a regular file"), "{e}");
    for dev in ["/dev/zero", "/dev/null"] {
        let e = Profile::resolve(dev).unwrap_err().to_string();
        assert_eq!(e, format!("profile {dev}: cannot read: not a regular file"));
    }
    let big = own.join("big.toml");
    std::fs::write(&big, vec![b'#'; (MAX_FILE_BYTES + 1) as usize]).unwrap();
    let e = Profile::resolve(big.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.ends_with("cannot read: larger than 16 MiB"), "{e}");
    assert!(Profile::resolve("no-such-builtin")
        .unwrap_err()
        .to_string()
        .contains("unknown profile `no-such-builtin`"));
    std::fs::remove_dir_all(&own).unwrap();
}
