//! The seed's scenario at a reduced scale, through the memory cgroups: cgroups created in the
//! script's order, all but every 11th removed. Vanilla keeps every page; partial depopulation
//! gives most of them back, but never below the ideal; pinned dying cgroups keep theirs.

use std::sync::Arc;

use usermm::config::MachineConfig;
use usermm::memcg::{MemCgroups, MemcgRecipe, RecipeEra};
use usermm::pcpu::PcpuAllocator;
use usermm::{CpuId, Machine};

const C0: CpuId = CpuId(0);

struct Rows {
    start: u64,
    created: u64,
    deleted: u64,
    cleanup: u64,
}

fn script(depopulate: bool, era: RecipeEra, pin_every: usize) -> Rows {
    let mut cfg = MachineConfig {
        mem: 256 << 20,
        cpus: 4,
        ..Default::default()
    };
    cfg.pcpu.depopulate = depopulate;
    let m = Machine::new(cfg.clone()).unwrap();
    let p = Arc::new(PcpuAllocator::new(&cfg.pcpu, m.cpus().clone(), m.phys_arc()).unwrap());
    let mut cg = MemCgroups::new(Arc::clone(&p), MemcgRecipe::for_era(era), 1);
    let top = cg.mkdir(C0, cg.root(), "percpu_test").unwrap();
    p.flush();
    let start = p.percpu_kb();
    let (mut parents, mut children) = (Vec::new(), Vec::new());
    for i in 0..150 {
        parents.push(cg.mkdir(C0, top, &format!("cg_{i}")).unwrap());
        p.flush();
        for j in 0..10 {
            children.push(cg.mkdir(C0, top, &format!("cg_{i}_{j}")).unwrap());
            p.flush();
        }
    }
    let created = p.percpu_kb();
    p.validate_settled().unwrap();
    for (k, &c) in children.iter().enumerate() {
        if pin_every > 0 && k % pin_every == 0 {
            cg.pin(c).unwrap();
        }
        cg.rmdir(c).unwrap();
        cg.grace_period(C0);
        p.flush();
    }
    cg.synchronize(C0);
    p.flush();
    let deleted = p.percpu_kb();
    p.validate_settled().unwrap();
    for (k, &c) in children.iter().enumerate() {
        if pin_every > 0 && k % pin_every == 0 {
            cg.unpin(c).unwrap();
        }
    }
    for c in parents {
        cg.rmdir(c).unwrap();
    }
    cg.rmdir(top).unwrap();
    cg.synchronize(C0);
    p.flush();
    p.validate_settled().unwrap();
    assert_eq!(cg.counts().nr_objects, 0);
    Rows {
        start,
        created,
        deleted,
        cleanup: p.percpu_kb(),
    }
}

#[test]
fn vanilla_plateau_and_partial_recovery() {
    for era in [RecipeEra::V2021, RecipeEra::Modern] {
        let v = script(false, era, 0);
        let p = script(true, era, 0);
        assert_eq!(
            (v.start, v.created),
            (p.start, p.created),
            "{era:?}: same until deletion"
        );
        assert_eq!(v.deleted, v.created, "{era:?}: vanilla gives nothing back");
        let ideal = p.start + (p.created - p.start) / 11;
        assert!(p.deleted >= ideal, "{era:?}: below the ideal");
        assert!(
            p.deleted * 2 < v.deleted,
            "{era:?}: patched {} vs vanilla {}",
            p.deleted,
            v.deleted
        );
        assert!(p.cleanup <= p.start + 2 * 256 * 4);
        assert!(v.cleanup <= v.start + 2 * 256 * 4);
    }
}

#[test]
fn pinned_dying_cgroups_pin_their_chunks() {
    let pinned = script(true, RecipeEra::V2021, 1);
    assert_eq!(
        pinned.deleted, pinned.created,
        "every removed cgroup still dying: nothing to give back"
    );
}
