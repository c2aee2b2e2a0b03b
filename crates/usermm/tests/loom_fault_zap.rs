//! Loom model of a write fault and a zap racing on one PTE table, on the engine's own tables:
//! the fault re-checks and writes its entry under the PTL through a locked slot
//! (`Slot::lock_if_same`, the fault path's `LockedSlot`), the zap clears the table's entries
//! under the same lock through the table cursor (`TableCursor`, as `zap_pte_range` does).
//!
//! Run with `.ci/loom.sh`. Under `--cfg loom` the page-table entries, the pages' mapcounts and
//! the rss counter are loom atomics (`sync/primitive.rs`) and the PTL is the table page's own
//! `PtLock`, so loom sees every load and store of the race, not only the lock. The scene is
//! `usermm::mm::loom_fault_zap` (built only under loom): a `PhysMem` of 16 frames made inside
//! the model, a PTE table with page `old` mapped read-only at one address, and page `new` for
//! the copy. Without `--cfg loom` this file compiles to nothing.
//!
//! # The protocol
//! The fault read the PTE without a lock (`orig_pte`); by the time it writes, the zap may have
//! cleared it and unmapped `old`. So the fault takes the PTL and re-checks (`pte_same`): if the
//! entry is no longer `orig_pte` it gives up. The zap clears entries only under the PTL. Either
//! the fault's whole replacement happens before the zap takes the lock (the zap then unmaps
//! `new`) or after it released it (the fault then finds the entry none and gives up).
//!
//! Models:
//! - [`fault_and_zap_under_the_ptl`]: after every interleaving the PTE is none, both pages'
//!   mapcounts are 0 and rss is 0.
//! - [`fault_without_the_ptl_is_caught`]: the negative control, the fault's re-check and writes
//!   without the PTL. Loom must find the interleaving where the zap unmaps `old` between the
//!   fault's re-check and its writes: `old` unmapped twice (mapcount −1) and `new` left mapped
//!   by a PTE the zap has passed.
//!
//! A failure of the first model would mean a fault and a zap (munmap under the read lock,
//! `MADV_DONTNEED`) can unmap a page twice or leave one mapped behind the zap.
#![cfg(loom)]

use std::sync::Arc as StdArc;

use loom::sync::Arc;
use loom::thread;
use usermm::config::MachineConfig;
use usermm::cpu::Cpus;
use usermm::mm::loom_fault_zap::FaultZap;
use usermm::page_alloc::PhysMem;
use usermm::stats::VmStat;

/// 16 frames, 2 CPUs on one node: a table and two pages.
fn small_phys() -> PhysMem {
    let cfg = MachineConfig {
        mem: 16 * 4096,
        cpus: 2,
        nodes: 1,
        ..Default::default()
    };
    let stat = StdArc::new(VmStat::new(2));
    PhysMem::new(&cfg, Cpus::new(2, 1), stat).expect("a 16-frame machine")
}

fn fault_vs_zap(locked: bool) {
    loom::model(move || {
        let scene = Arc::new(FaultZap::new(StdArc::new(small_phys())).expect("three frames"));
        let s = Arc::clone(&scene);
        let faulter = thread::spawn(move || s.wp_copy(locked));
        let s = Arc::clone(&scene);
        let zapper = thread::spawn(move || s.zap());
        let installed = faulter.join().unwrap();
        let taken = zapper.join().unwrap();
        if let Err(e) = scene.check() {
            panic!("{e} (fault installed: {installed}, zap took {taken:?})");
        }
    });
}

#[test]
fn fault_and_zap_under_the_ptl() {
    fault_vs_zap(true);
}

/// Broken on purpose: the fault re-checks and writes its PTE without the PTL.
#[test]
#[should_panic(expected = "after the fault and the zap")]
fn fault_without_the_ptl_is_caught() {
    fault_vs_zap(false);
}
