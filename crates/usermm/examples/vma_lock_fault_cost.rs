//! The cost of the fault path with per-VMA locks on and off, measured in one run (wall time,
//! this host): one thread write-faults every page of a 16 MiB VMA, then `MADV_DONTNEED`s it,
//! alternating between a machine with `vma.per_vma_lock=off` and one with `on`, 15 rounds each.
//! Prints the median ns per fault of each and their ratio.
//!
//! `cargo run --release -p usermm --example vma_lock_fault_cost`

use std::sync::Arc;
use std::time::Instant;

use usermm::config::{BackingMode, ThpMode};
use usermm::mm::mmap::{MapFile, MADV_DONTNEED, MAP_ANONYMOUS, MAP_PRIVATE, PROT_READ, PROT_WRITE};
use usermm::{CpuId, Machine, MachineConfig, Mm, Task, PAGE_SIZE};

const PAGES: u64 = 4096;
const ROUNDS: usize = 15;

fn setup(per_vma_lock: bool) -> (Arc<Machine>, Task, u64) {
    let mut c = MachineConfig {
        mem: 256 << 20,
        cpus: 2,
        backing: BackingMode::Sparse,
        thp: ThpMode::Never,
        ..MachineConfig::default()
    };
    c.vma.per_vma_lock = per_vma_lock;
    let m = Machine::new(c).expect("machine");
    let mm = Mm::new(&m, CpuId(0)).expect("mm");
    let a = mm
        .mmap(
            CpuId(0),
            0,
            PAGES * PAGE_SIZE,
            PROT_READ | PROT_WRITE,
            MAP_PRIVATE | MAP_ANONYMOUS,
            MapFile::None,
        )
        .expect("mmap");
    let t = Task::new(mm, CpuId(1));
    t.write_u64(a, 1).expect("first fault (anon_vma)");
    (m, t, a)
}

fn round(t: &Task, a: u64) -> f64 {
    let start = Instant::now();
    for p in 0..PAGES {
        t.write_u64(a + p * PAGE_SIZE, p).expect("fault");
    }
    let ns = start.elapsed().as_nanos() as f64 / PAGES as f64;
    t.mm()
        .madvise(t.cpu(), a, PAGES * PAGE_SIZE, MADV_DONTNEED)
        .expect("dontneed");
    ns
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let (_m0, off, a0) = setup(false);
    let (_m1, on, a1) = setup(true);
    // Warm both up once.
    round(&off, a0);
    round(&on, a1);
    let (mut v_off, mut v_on) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        v_off.push(round(&off, a0));
        v_on.push(round(&on, a1));
    }
    let (m_off, m_on) = (median(v_off), median(v_on));
    println!("write fault + PTE install, 4 KiB, sparse backing, {PAGES} pages x {ROUNDS} rounds (median):");
    println!("  vma.per_vma_lock=off  {m_off:8.1} ns/fault  (mmap_lock read)");
    println!("  vma.per_vma_lock=on   {m_on:8.1} ns/fault  (lock_vma_under_rcu)");
    println!("  on / off              {:8.3}", m_on / m_off);
}
