//! Virtual time end to end: a `Machine` in `time.mode=virtual`, its workloads run through
//! `Machine::run`, the engine's real code charging the profile's costs.

use usermm::config::{BackingMode, FreePolicy, MachineConfig, ThpMode, TimeMode};
use usermm::mm::mmap::{MapFile, MAP_ANONYMOUS, MAP_PRIVATE, PROT_READ, PROT_WRITE};
use usermm::{CpuId, Machine};

fn virtual_config(profile: &str) -> MachineConfig {
    let mut c = MachineConfig {
        mem: 256 << 20,
        cpus: 8,
        nodes: 2,
        backing: BackingMode::Sparse,
        thp: ThpMode::Never,
        ..MachineConfig::default()
    };
    c.time.mode = TimeMode::Virtual;
    c.time.profile = profile.into();
    c
}

/// A private anonymous mapping of `size` bytes, every page written; its address.
fn touched(mm: &usermm::mm::Mm, cpu: CpuId, size: u64) -> u64 {
    let a = mm
        .mmap(
            cpu,
            0,
            size,
            PROT_READ | PROT_WRITE,
            MAP_PRIVATE | MAP_ANONYMOUS,
            MapFile::None,
        )
        .unwrap();
    mm.populate(cpu, a, a + size, true);
    a
}

#[test]
fn smoke_parallel_free() {
    let mut c = virtual_config("haswell-ex-4s");
    c.free.policy = FreePolicy::Parallel;
    c.free.threshold_pages = 2048;
    c.free.max_active = 2;
    c.gather.max_batch_count = 8;
    let m = Machine::new(c).unwrap();
    let cpu = CpuId(7);
    let (ns, pages) = m
        .run(cpu, || {
            let mm = m.new_mm(cpu).unwrap();
            let size = 64 << 20;
            let a = touched(&mm, cpu, size);
            let t0 = usermm::sync::clock::now();
            let st = mm.munmap_stats(cpu, a, size).unwrap();
            (t0.elapsed_ns(), st.pages_zapped)
        })
        .expect("the virtual clock stays below its end");
    let r = m.last_run_report().unwrap();
    eprintln!(
        "{ns} ns, {pages} pages; {}",
        serde_json::to_string_pretty(&r).unwrap()
    );
    m.validate().unwrap();
}

/// A fake-NUMA machine with more nodes than CPUs (MAX_NUMNODES 1024): a mapping spills over
/// memory-only nodes in zonelist order and is freed in parallel, on both clocks; the line
/// model homes each struct page on its node.
#[test]
fn more_nodes_than_cpus_populate_and_free() {
    for mode in [TimeMode::Wall, TimeMode::Virtual] {
        let mut c = virtual_config("haswell-ex-4s");
        c.time.mode = mode;
        c.mem = 4 << 30;
        c.nodes = 1024;
        c.free.policy = FreePolicy::Parallel;
        c.free.threshold_pages = 2048;
        c.free.max_active = 2;
        let m = Machine::new(c).unwrap();
        let cpu = CpuId(7);
        let pages = m
            .run(cpu, || {
                let mm = m.new_mm(cpu).unwrap();
                // 32 MiB: more than the 4 MiB a node holds, so it spills over nodes.
                let size = 32 << 20;
                let a = touched(&mm, cpu, size);
                mm.munmap_stats(cpu, a, size).unwrap().pages_zapped
            })
            .expect("the virtual clock stays below its end");
        assert_eq!(pages, 8192, "{mode:?}");
        if mode == TimeMode::Virtual {
            let r = m.last_run_report().unwrap();
            assert_eq!(r.nr_nodes, 1024);
            assert!(r.memory.is_some_and(|x| x.accesses > 0));
        }
        m.validate().unwrap();
    }
}

/// A run whose costs add up past the end of virtual time (2^64 ps) fails as a whole with
/// `MachineError::ClockEnd`: the clocks saturate there instead of wrapping, and no figure is
/// returned from a clock that stopped. (A profile's step costs at most 1 s, so a real run
/// needs some ten million steps to get there; `vtime::work` charges the same clock at once.)
#[test]
fn a_run_past_the_end_of_virtual_time_fails() {
    let run = |charges: u32| {
        let m = Machine::new(virtual_config("haswell-ex-4s")).unwrap();
        let cpu = CpuId(7);
        let r = m.run(cpu, || {
            let mm = m.new_mm(cpu).unwrap();
            let size = 4 << 20;
            let a = touched(&mm, cpu, size);
            let t0 = usermm::sync::clock::now();
            for _ in 0..charges {
                // Half of the clock's range, in ns.
                usermm::vtime::work(u64::MAX / 2000 + 1);
            }
            mm.munmap(cpu, a, size).unwrap();
            t0.elapsed_ns()
        });
        m.validate().unwrap();
        r
    };
    assert!(run(1).unwrap() > u64::MAX / 2000);
    let e = run(2).unwrap_err();
    assert!(
        matches!(&e, usermm::machine::MachineError::ClockEnd { profile } if profile == "haswell-ex-4s"),
        "{e}"
    );
    assert!(
        e.to_string().contains("virtual clock reached its end"),
        "{e}"
    );
}
