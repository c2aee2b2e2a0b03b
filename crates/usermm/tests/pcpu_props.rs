//! Random alloc/free sequences against the percpu allocator: after every step the invariants
//! P1–P5 and P7–P9 hold, at the end P6 too, and every live allocation still holds the bytes
//! written into each of its units (no overlap, units separate).

use std::sync::Arc;

use proptest::prelude::*;
use usermm::config::MachineConfig;
use usermm::page_alloc::Gfp;
use usermm::pcpu::{PcpuAllocator, PcpuError, PcpuPtr};
use usermm::{CpuId, Machine};

const CPUS: u16 = 3;

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        size: usize,
        align_shift: u8,
        atomic: bool,
    },
    Reserved {
        size: usize,
    },
    Free {
        pick: usize,
    },
    Balance,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (prop_oneof![1usize..64, 64usize..1024, 1024usize..9000], 2u8..13, proptest::bool::weighted(0.15))
            .prop_map(|(size, align_shift, atomic)| Op::Alloc { size, align_shift, atomic }),
        1 => (1usize..600).prop_map(|size| Op::Reserved { size }),
        5 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => Just(Op::Balance),
    ]
}

fn machine(depopulate: bool) -> (Arc<Machine>, PcpuAllocator) {
    let mut cfg = MachineConfig {
        mem: 64 << 20,
        cpus: CPUS,
        ..Default::default()
    };
    cfg.pcpu.unit_size = 64 << 10;
    cfg.pcpu.static_size = 12 << 10;
    cfg.pcpu.reserved_size = 2 << 10;
    cfg.pcpu.depopulate = depopulate;
    let m = Machine::new(cfg.clone()).unwrap();
    let p = PcpuAllocator::new(&cfg.pcpu, m.cpus().clone(), m.phys_arc()).unwrap();
    (m, p)
}

/// The byte written into unit `cpu` of allocation number `tag`.
fn pattern(tag: usize, cpu: u16) -> u8 {
    (tag * 7 + cpu as usize * 31 + 1) as u8
}

fn fill(p: &PcpuAllocator, a: PcpuPtr, tag: usize) {
    for cpu in 0..CPUS {
        p.write(a, CpuId(cpu), 0, &vec![pattern(tag, cpu); a.size()])
            .unwrap();
    }
}

fn check(p: &PcpuAllocator, a: PcpuPtr, tag: usize) -> Result<(), TestCaseError> {
    for cpu in 0..CPUS {
        let mut buf = vec![0; a.size()];
        p.read(a, CpuId(cpu), 0, &mut buf).unwrap();
        prop_assert!(
            buf.iter().all(|&b| b == pattern(tag, cpu)),
            "allocation {tag} cpu {cpu} corrupted"
        );
    }
    Ok(())
}

fn run(ops: Vec<Op>, depopulate: bool) -> Result<u64, TestCaseError> {
    let n = ops.len() as u64;
    let (m, p) = machine(depopulate);
    let c0 = CpuId(0);
    let mut live: Vec<(PcpuPtr, usize)> = Vec::new();
    for (tag, op) in ops.into_iter().enumerate() {
        match op {
            Op::Alloc {
                size,
                align_shift,
                atomic,
            } => {
                let gfp = if atomic { Gfp::NOWAIT } else { Gfp::KERNEL };
                match p.alloc_gfp(c0, size, 1 << align_shift, gfp) {
                    Ok(a) => {
                        prop_assert_eq!(
                            a.chunk_offset() as usize % (1usize << align_shift).max(4),
                            0
                        );
                        // Fresh allocations read as zeros in every unit.
                        for cpu in 0..CPUS {
                            let mut buf = vec![0xaa; a.size()];
                            p.read(a, CpuId(cpu), 0, &mut buf).unwrap();
                            prop_assert!(buf.iter().all(|&b| b == 0));
                        }
                        fill(&p, a, tag);
                        live.push((a, tag));
                    }
                    Err(PcpuError::InvalidSize { .. }) => prop_assert!(size > 32 << 10),
                    Err(PcpuError::NoMem) => {
                        prop_assert!(atomic, "GFP_KERNEL failed with memory left")
                    }
                    Err(e) => prop_assert!(false, "unexpected {e:?}"),
                }
            }
            Op::Reserved { size } => {
                if let Ok(a) = p.alloc_reserved(c0, size, 8) {
                    fill(&p, a, tag);
                    live.push((a, tag));
                }
            }
            Op::Free { pick } => {
                if !live.is_empty() {
                    let (a, t) = live.swap_remove(pick % live.len());
                    check(&p, a, t)?;
                    p.free(c0, a).unwrap();
                    prop_assert_eq!(p.free(c0, a), Err(PcpuError::BadPointer));
                }
            }
            Op::Balance => p.flush(),
        }
        p.validate()
            .map_err(|e| TestCaseError::fail(format!("after op {tag}: {e}")))?;
    }
    p.validate_settled().map_err(TestCaseError::fail)?;
    for &(a, t) in &live {
        check(&p, a, t)?;
    }
    for (a, _) in live {
        p.free(c0, a).unwrap();
    }
    p.validate_settled().map_err(TestCaseError::fail)?;
    drop(p);
    m.validate().map_err(TestCaseError::fail)?;
    Ok(n)
}

// 48 sequences each (times `USERMM_TEST_SCALE`), from `USERMM_TEST_SEED`.

#[test]
fn vanilla_invariants_hold() {
    usermm_testscale::prop::check(
        "pcpu_props::vanilla",
        file!(),
        48,
        proptest::collection::vec(op(), 1..160),
        |ops| run(ops, false),
    );
}

#[test]
fn patched_invariants_hold() {
    usermm_testscale::prop::check(
        "pcpu_props::patched",
        file!(),
        48,
        proptest::collection::vec(op(), 1..160),
        |ops| run(ops, true),
    );
}
