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

#[test]
fn smoke_parallel_free() {
    let mut c = virtual_config("haswell-ex-4s");
    c.free.policy = FreePolicy::Parallel;
    c.free.threshold_pages = 2048;
    c.free.max_active = 2;
    c.gather.max_batch_count = 8;
    let m = Machine::new(c).unwrap();
    let cpu = CpuId(7);
    let (ns, pages) = m.run(cpu, || {
        let mm = m.new_mm(cpu).unwrap();
        let size = 64 << 20;
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
        let t0 = usermm::sync::clock::now();
        let st = mm.munmap_stats(cpu, a, size).unwrap();
        (t0.elapsed_ns(), st.pages_zapped)
    });
    let r = m.last_run_report().unwrap();
    eprintln!(
        "{ns} ns, {pages} pages; {}",
        serde_json::to_string_pretty(&r).unwrap()
    );
    m.validate().unwrap();
}
