//! Unit tests of the machine configuration: `memparse`, `--set`, validation, presets.

use super::*;

#[test]
fn memparse_suffixes_and_bases() {
    assert_eq!(parse_size("4G").unwrap(), 4 << 30);
    assert_eq!(parse_size("64M").unwrap(), 64 << 20);
    assert_eq!(parse_size("0x200000").unwrap(), 2 << 20);
    assert_eq!(parse_size("4096").unwrap(), 4096);
    assert_eq!(parse_size("320GiB").unwrap(), 320 << 30);
    assert_eq!(parse_size("1t").unwrap(), 1 << 40);
    assert!(parse_size("abc").is_err());
    assert!(parse_size("").is_err());
    assert!(parse_size("99999999999T").is_err());
}

#[test]
fn set_and_validate() {
    let mut c = MachineConfig::default();
    c.set("free.parallel=on").unwrap();
    assert_eq!(c.free.policy, FreePolicy::Parallel);
    c.set("mem=8G").unwrap();
    assert_eq!(c.mem, 8 << 30);
    assert!(c.set("nonsense=1").is_err());
    assert!(c.set("free.parallel=maybe").is_err());
    assert!(!c.pcp.auto_tune);
    c.set("pcp.auto_tune=on").unwrap();
    assert!(c.pcp.auto_tune);
    assert!(c.set("pcp.auto_tune=2").is_err());
    assert!(!c.prefault);
    c.set("prefault=on").unwrap();
    assert!(c.prefault);
    let e = c.set("nonsense=1").unwrap_err().to_string();
    assert!(CONFIG_KEYS.iter().all(|k| e.contains(k)), "{e}");
    // Every listed key is one set() knows: a bad value is refused for its value, not
    // as an unknown key.
    for k in CONFIG_KEYS {
        let e = c
            .clone()
            .set(&format!("{k}=\u{1}"))
            .unwrap_err()
            .to_string();
        assert!(!e.contains("unknown config key"), "{k}: {e}");
    }
    assert!(c.set("noequals").is_err());
    c.validate().unwrap();
    c.free.max_active = 0;
    assert!(c.validate().is_err());
    let mut c = MachineConfig {
        mem: 0,
        ..Default::default()
    };
    assert!(c.validate().is_err());
    c.mem = 1 << 30;
    c.nodes = 8;
    c.cpus = 4;
    // More nodes than CPUs is fake NUMA (memory-only nodes); past MAX_NODES it is refused.
    assert!(c.validate().is_ok());
    c.nodes = MAX_NODES + 1;
    assert!(c.validate().is_err());
}

/// Sizes near `u64::MAX` must be refused, not wrapped into a sum that passes (a hostile input:
/// `--set pcpu.static_size=0xffffffffffff0000 --set pcpu.reserved_size=0x20000` ran).
#[test]
fn validation_arithmetic_does_not_wrap() {
    let mut c = MachineConfig::default();
    c.set("pcpu.static_size=0xffffffffffff0000").unwrap();
    c.set("pcpu.reserved_size=0x20000").unwrap();
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("pcpu.static_size + pcpu.reserved_size"), "{e}");
    let mut c = MachineConfig::default();
    c.pcpu.static_size = u64::MAX;
    c.pcpu.reserved_size = u64::MAX;
    assert!(c.validate().is_err());
    let c = MachineConfig {
        nr_hugepages: u32::MAX,
        ..Default::default()
    };
    assert!(c.validate().is_err());
    let mut c = MachineConfig::default();
    c.set("mem=0xfffffffffffff000").unwrap();
    assert!(c.validate().is_err());
}

/// Extreme list sizes found by the CLI fuzz: `pcp.high=4294967295` panicked in the
/// auto-tuned pcp's clamp, `lru.add_batch=4294967295` aborted allocating 32 GiB per CPU.
#[test]
fn list_sizes_are_bounded() {
    let mut c = MachineConfig::default();
    c.pcp.high = MAX_PCP_HIGH;
    c.lru.add_batch = MAX_LRU_ADD_BATCH;
    c.validate().unwrap();
    c.set("pcp.high=4294967295").unwrap();
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("pcp.high") && e.contains("16777216"), "{e}");
    let mut c = MachineConfig::default();
    c.set("lru.add_batch=4294967295").unwrap();
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("lru.add_batch") && e.contains("4096"), "{e}");
}

/// The modelled flush cost spins per flush: an unbounded one hung `usemem`.
#[test]
fn tlb_flush_cost_is_bounded() {
    let mut c = MachineConfig::default();
    c.tlb.flush_cost_ns = MAX_TLB_FLUSH_COST_NS;
    c.validate().unwrap();
    c.set("tlb.flush_cost_ns=18446744073709551615").unwrap();
    let e = c.validate().unwrap_err().to_string();
    assert!(
        e.contains("tlb.flush_cost_ns") && e.contains("1000000"),
        "{e}"
    );
}

#[test]
fn presets_differ_only_in_what_they_name() {
    let v = MachineConfig::preset("vanilla").unwrap();
    let p = MachineConfig::preset("patched").unwrap();
    assert_ne!(v, p);
    let mut back = p.clone();
    back.set_patched(false);
    assert_eq!(back, v);
    assert!(MachineConfig::preset("nope").is_err());
    MachineConfig::preset("seed-000")
        .unwrap()
        .validate()
        .unwrap();
}

/// `MAX_NUMNODES` with `NODES_SHIFT` 10: up to 1024 nodes, more than the CPUs if need be (fake
/// NUMA's memory-only nodes), each with at least one max-order block.
#[test]
fn up_to_1024_nodes_more_than_cpus() {
    let mut c = MachineConfig {
        cpus: 4,
        nodes: 1024,
        mem: 8 << 30,
        ..MachineConfig::default()
    };
    c.validate().unwrap();
    c.nodes = 1025;
    assert!(c.validate().unwrap_err().to_string().contains("1..=1024"));
    c.nodes = 1024;
    c.mem = 2 << 30;
    assert!(c.validate().unwrap_err().to_string().contains("4 MiB"));
    // CPU c sits on node c * nodes / cpus; the nodes between have no CPU.
    let cpus = crate::cpu::Cpus::new(4, 1024);
    let nodes: Vec<u16> = cpus.all().map(|c| cpus.node_of(c).0).collect();
    assert_eq!(nodes, [0, 256, 512, 768]);
    let cpus = crate::cpu::Cpus::new(8, 2);
    let nodes: Vec<u16> = cpus.all().map(|c| cpus.node_of(c).0).collect();
    assert_eq!(nodes, [0, 0, 0, 0, 1, 1, 1, 1]);
}
