//! Helpers shared by the scenario tests.
#![allow(dead_code)]

use std::sync::Arc;

use usermm::config::{BackingMode, MachineConfig, ThpMode};
use usermm::mm::mmap::{MapFile, MAP_ANONYMOUS, MAP_PRIVATE, PROT_READ, PROT_WRITE};
use usermm::{CpuId, Machine, Mm, Task};

pub const C0: CpuId = CpuId(0);

pub fn machine_with(f: impl FnOnce(&mut MachineConfig)) -> Arc<Machine> {
    let mut c = MachineConfig {
        mem: 256 << 20,
        cpus: 4,
        nodes: 1,
        ..Default::default()
    };
    f(&mut c);
    Machine::new(c).expect("machine")
}

pub fn small() -> Arc<Machine> {
    machine_with(|_| {})
}

pub fn sparse(mem: u64) -> Arc<Machine> {
    machine_with(|c| {
        c.mem = mem;
        c.backing = BackingMode::Sparse;
    })
}

pub fn thp_always() -> Arc<Machine> {
    machine_with(|c| c.thp = ThpMode::Always)
}

pub fn anon(mm: &Mm, len: u64) -> u64 {
    mm.mmap(
        C0,
        0,
        len,
        PROT_READ | PROT_WRITE,
        MAP_PRIVATE | MAP_ANONYMOUS,
        MapFile::None,
    )
    .expect("mmap")
}

pub fn task(mm: &Arc<Mm>) -> Task {
    Task::new(Arc::clone(mm), C0)
}

/// Tear the mm down and check that every frame came back.
#[track_caller]
pub fn exit_and_check(machine: &Arc<Machine>, mm: Arc<Mm>, free_before: u64) {
    mm.validate().expect("validate_mm before exit");
    mm.mmput(C0);
    assert_eq!(mm.nr_page_tables(), 0, "page tables left after exit");
    drop(mm);
    // The huge zero page lives on with the shrinker's reference until a shrink.
    machine.drop_caches(C0);
    assert_eq!(
        machine.huge_zero().refcount(),
        0,
        "huge zero page still referenced"
    );
    machine.phys().lru_add_drain_all();
    machine.phys().drain_all_pages();
    machine.validate().expect("PhysMem::validate after exit");
    assert_eq!(machine.phys().nr_free_pages(), free_before, "frames leaked");
}

/// Free pages of a quiescent machine, pcp lists drained.
pub fn free_pages(machine: &Machine) -> u64 {
    machine.phys().lru_add_drain_all();
    machine.phys().drain_all_pages();
    machine.phys().nr_free_pages()
}
