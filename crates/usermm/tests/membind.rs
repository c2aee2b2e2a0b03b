//! `mm.membind` (`numactl --membind=N`, `MPOL_BIND` to one node): every page a task
//! allocates — its data pages, its page tables, its gather's batch pages — comes from node N,
//! whichever CPU the task runs on; when node N is full the fault fails with `VM_FAULT_OOM`
//! (the kernel's OOM killer then picks among the tasks bound to N) and no other node gives a
//! page (`MADV_POPULATE_WRITE` says `ENOMEM`); freeing on node N lets the fault succeed again.
//! Without the policy the same task takes its local node's pages. The config refuses a node that does not exist.

mod common;

use std::sync::Arc;

use common::*;
use usermm::config::{BackingMode, MachineConfig};
use usermm::mm::mmap::{MapFile, MADV_POPULATE_WRITE, MAP_ANONYMOUS, MAP_PRIVATE};
use usermm::mm::mmap::{PROT_READ, PROT_WRITE};
use usermm::stats::VmItem;
use usermm::{CpuId, Errno, Machine, SegvCode, Task, PAGE_SIZE};

const NODES: u16 = 4;
/// 16 MiB a node.
const MEM: u64 = 64 << 20;

fn machine(membind: Option<u16>) -> Arc<Machine> {
    machine_with(|c| {
        c.mem = MEM;
        c.cpus = 4;
        c.nodes = NODES;
        c.backing = BackingMode::Full;
        c.mm.membind = membind;
    })
}

/// Every node's free pages, pcp lists drained.
fn per_node(m: &Machine) -> Vec<u64> {
    free_pages(m);
    (0..NODES as usize)
        .map(|n| m.phys().node_free_pages(n).unwrap())
        .collect()
}

/// Write one word to each page of `len` bytes from a task on CPU 0 (node 0): pages written
/// and writes that ran out of memory.
fn write_all(m: &Arc<Machine>, len: u64) -> (Arc<usermm::Mm>, u64, u64, u64) {
    let mm = m.new_mm(C0).expect("mm");
    let base = anon(&mm, len);
    let t = Task::new(Arc::clone(&mm), CpuId(0));
    let (mut ok, mut oom) = (0, 0);
    for p in 0..len / PAGE_SIZE {
        match t.write_u64(base + p * PAGE_SIZE, p | 1) {
            Ok(()) => ok += 1,
            Err(f) if f.code == SegvCode::Oom => oom += 1,
            Err(f) => panic!("page {p}: {f}"),
        }
    }
    (mm, base, ok, oom)
}

#[test]
fn a_bound_task_allocates_only_on_its_node() {
    let m = machine(Some(1));
    let before = per_node(&m);
    let (mm, _, ok, oom) = write_all(&m, 8 << 20);
    assert_eq!((ok, oom), (2048, 0));
    let after = per_node(&m);
    for n in [0, 2, 3] {
        assert_eq!(
            after[n], before[n],
            "node {n} gave pages: {before:?} → {after:?}"
        );
    }
    // The data pages and the page tables (with the batch pages of a free) came from node 1.
    assert!(before[1] - after[1] > 2048, "{before:?} → {after:?}");
    mm.validate().unwrap();
    exit_and_check(&m, mm, before.iter().sum());
    assert_eq!(per_node(&m), before);
}

#[test]
fn an_unbound_task_allocates_on_its_cpus_node() {
    let m = machine(None);
    let before = per_node(&m);
    let (mm, _, ok, _) = write_all(&m, 8 << 20);
    assert_eq!(ok, 2048);
    let after = per_node(&m);
    assert!(before[0] - after[0] >= 2048, "{before:?} → {after:?}");
    assert_eq!(&after[1..], &before[1..]);
    exit_and_check(&m, mm, before.iter().sum());
}

#[test]
fn a_full_bound_node_is_out_of_memory_not_a_fallback() {
    let m = machine(Some(1));
    let before = per_node(&m);
    let oom0 = m.vmstat().get(VmItem::Oom);
    // 24 MiB of writes against a 16 MiB node: the rest of the machine has 40 MiB free.
    let (mm, base, ok, oom) = write_all(&m, 24 << 20);
    assert!(oom > 0 && ok < 4096, "{ok} written, {oom} out of memory");
    assert_eq!((m.vmstat().get(VmItem::Oom) - oom0) as u64, oom);
    let after = per_node(&m);
    for n in [0, 2, 3] {
        assert_eq!(
            after[n], before[n],
            "node {n} gave pages: {before:?} → {after:?}"
        );
    }
    assert!(after[1] < 64, "node 1 is used up: {after:?}");
    // Freeing on node 1 lets a failed write succeed.
    assert_eq!(mm.munmap(C0, base, 4 << 20), Ok(()));
    let t = Task::new(Arc::clone(&mm), CpuId(0));
    assert_eq!(t.write_u64(base + (23 << 20), 7), Ok(()));
    mm.validate().unwrap();
    exit_and_check(&m, mm, before.iter().sum());
}

/// A caller that populates gets the fault's errno: `MADV_POPULATE_WRITE` of more than node 1
/// holds is `ENOMEM` (`vm_fault_to_errno` of `VM_FAULT_OOM`), with the other nodes untouched.
#[test]
fn populating_past_the_bound_node_is_enomem() {
    let m = machine(Some(1));
    let before = per_node(&m);
    let mm = m.new_mm(C0).expect("mm");
    let len = 24 << 20;
    let a = mm
        .mmap(
            C0,
            0,
            len,
            PROT_READ | PROT_WRITE,
            MAP_PRIVATE | MAP_ANONYMOUS,
            MapFile::None,
        )
        .unwrap();
    assert_eq!(
        mm.madvise(C0, a, len, MADV_POPULATE_WRITE),
        Err(Errno::ENOMEM)
    );
    let after = per_node(&m);
    for n in [0, 2, 3] {
        assert_eq!(
            after[n], before[n],
            "node {n} gave pages: {before:?} → {after:?}"
        );
    }
    exit_and_check(&m, mm, before.iter().sum());
}

#[test]
fn the_config_names_an_existing_node() {
    let mut c = MachineConfig {
        mem: MEM,
        cpus: 4,
        nodes: NODES,
        ..Default::default()
    };
    c.set("mm.membind=3").unwrap();
    assert_eq!(c.mm.membind, Some(3));
    c.validate().unwrap();
    c.set("mm.membind=4").unwrap();
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("mm.membind") && e.contains("4 nodes"), "{e}");
    c.set("mm.membind=none").unwrap();
    assert_eq!(c.mm.membind, None);
    assert!(c.set("mm.membind=one").is_err());
    assert!(usermm::config::CONFIG_KEYS.contains(&"mm.membind"));
}
