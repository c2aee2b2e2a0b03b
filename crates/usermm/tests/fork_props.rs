//! Property: random sequences over two forked address spaces — writes, `MADV_DONTNEED`,
//! munmap, mremap moves and exits, on 4 KiB pages and THPs — keep `validate()` clean (mapcounts
//! across both mms, no shared table), each side reads exactly what it wrote or inherited, and
//! exit of both leaks no frame. Full backing at a small size, so data is real.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use proptest::prelude::*;
use usermm::config::{HugeZeroWriteFault, ThpMode};
use usermm::mm::mmap::*;
use usermm::{Mm, Task, PAGE_SIZE};

const P: u64 = PAGE_SIZE;
/// The page universe: 64 small pages at A, a 4 MiB THP-eligible area at B, 64 free pages at C.
const A: u64 = 0x3000_0000_0000;
const B: u64 = 0x3000_0040_0000;
const C: u64 = 0x3000_1000_0000;
const NA: u64 = 64;
const NB: u64 = 1024;
const NC: u64 = 64;

fn page(i: u64) -> u64 {
    let i = i % (NA + NB + NC);
    if i < NA {
        A + i * P
    } else if i < NA + NB {
        B + (i - NA) * P
    } else {
        C + (i - NA - NB) * P
    }
}

#[derive(Debug, Clone)]
enum Kind {
    Write { page: u64, val: u64 },
    DontNeed { page: u64, n: u64 },
    Munmap { page: u64, n: u64 },
    Mremap { page: u64, n: u64, to: u64 },
    Exit,
}

fn kind() -> impl Strategy<Value = Kind> {
    let idx = prop_oneof![3 => 0..NA, 3 => NA..NA + NB, 1 => NA + NB..NA + NB + NC];
    prop_oneof![
        10 => (idx.clone(), 1..u64::MAX).prop_map(|(page, val)| Kind::Write { page, val }),
        3 => (idx.clone(), 1..16u64).prop_map(|(page, n)| Kind::DontNeed { page, n }),
        2 => (idx.clone(), 1..8u64).prop_map(|(page, n)| Kind::Munmap { page, n }),
        3 => (idx.clone(), 1..16u64, idx).prop_map(|(page, n, to)| Kind::Mremap { page, n, to }),
        1 => Just(Kind::Exit),
    ]
}

/// What one process must see: the value at offset 0 of every mapped page (0 if untouched).
type Shadow = BTreeMap<u64, u64>;

struct Proc {
    task: Task,
    shadow: Shadow,
}

fn run(ops: &[(usize, Kind)], per_mm_ref: bool, split: bool) -> Result<(), TestCaseError> {
    let m = machine_with(|c| {
        c.mem = 64 << 20;
        c.thp = ThpMode::Always;
        c.huge_zero.per_mm_ref = per_mm_ref;
        c.huge_zero.write_fault = if split {
            HugeZeroWriteFault::Split
        } else {
            HugeZeroWriteFault::AllocThp
        };
    });
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let rw = PROT_READ | PROT_WRITE;
    let fixed = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;
    mm.mmap(C0, A, NA * P, rw, fixed, MapFile::None).unwrap();
    mm.mmap(C0, B, NB * P, rw, fixed, MapFile::None).unwrap();
    let mut shadow = Shadow::new();
    let t = task(&mm);
    for i in 0..NA + NB {
        shadow.insert(page(i), 0);
    }
    // Some data to inherit: a few small pages, a THP, a huge zero page.
    for i in [0, 5, 63, NA, NA + 7, NA + 600] {
        let v = 0x1000 + i;
        t.write_u64(page(i), v).unwrap();
        shadow.insert(page(i), v);
    }
    assert_eq!(t.read_u64(B + (2 << 20)).unwrap(), 0);
    let child = mm.fork(C0).unwrap();
    let mut procs: Vec<Option<Proc>> = vec![
        Some(Proc {
            task: t,
            shadow: shadow.clone(),
        }),
        Some(Proc {
            task: task(&child),
            shadow,
        }),
    ];
    drop((mm, child));
    let mut checked: Vec<u64> = (0..NA).map(page).collect();
    for (who, k) in ops {
        let Some(p) = procs[*who % 2].as_mut() else {
            continue;
        };
        let (mm, cpu) = (Arc::clone(p.task.mm()), p.task.cpu());
        match *k {
            Kind::Write { page: i, val } => {
                let a = page(i);
                let r = p.task.write_u64(a, val);
                prop_assert_eq!(r.is_ok(), p.shadow.contains_key(&a), "write at {:#x}", a);
                if r.is_ok() {
                    p.shadow.insert(a, val);
                    checked.push(a);
                }
            }
            Kind::DontNeed { page: i, n } => {
                let a = page(i);
                let _ = mm.madvise(cpu, a, n * P, MADV_DONTNEED);
                for x in (0..n).map(|j| a + j * P) {
                    if let Some(v) = p.shadow.get_mut(&x) {
                        *v = 0;
                    }
                }
            }
            Kind::Munmap { page: i, n } => {
                let a = page(i);
                mm.munmap(cpu, a, n * P).unwrap();
                for j in 0..n {
                    p.shadow.remove(&(a + j * P));
                }
            }
            Kind::Mremap { page: i, n, to } => {
                let (a, d) = (page(i), page(to));
                let src: Vec<u64> = (0..n).map(|j| a + j * P).collect();
                let overlap = a < d + n * P && d < a + n * P;
                let whole = src.iter().all(|x| p.shadow.contains_key(x));
                // Moves of fully mapped ranges only (holes make it EFAULT), never overlapping.
                if overlap || !whole {
                    continue;
                }
                let flags = MREMAP_MAYMOVE | MREMAP_FIXED;
                let r = mm.mremap(cpu, a, n * P, n * P, flags, d);
                prop_assert_eq!(r, Ok(d), "mremap {:#x} -> {:#x}", a, d);
                let vals: Vec<u64> = src.iter().map(|x| p.shadow.remove(x).unwrap()).collect();
                for (j, v) in vals.into_iter().enumerate() {
                    p.shadow.insert(d + j as u64 * P, v);
                    checked.push(d + j as u64 * P);
                }
            }
            Kind::Exit => {
                let p = procs[*who % 2].take().expect("live");
                p.task.mm().mmput(cpu);
                continue;
            }
        }
        mm.validate().map_err(TestCaseError::fail)?;
        // Both sides read exactly what they wrote or inherited.
        for p in procs.iter().flatten() {
            for &a in &checked {
                let got = p.task.read_u64(a).ok();
                prop_assert_eq!(got, p.shadow.get(&a).copied(), "read at {:#x}", a);
            }
        }
    }
    for p in procs.into_iter().flatten() {
        p.task.mm().validate().map_err(TestCaseError::fail)?;
        let cpu = p.task.cpu();
        p.task.mm().mmput(cpu);
    }
    m.drop_caches(C0);
    prop_assert_eq!(
        m.huge_zero().refcount(),
        0,
        "huge zero page still referenced"
    );
    prop_assert_eq!(free_pages(&m), free0, "frames leaked");
    m.validate().map_err(TestCaseError::fail)?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn forked_pair_keeps_its_data_and_invariants(
        ops in proptest::collection::vec((0..2usize, kind()), 10..40),
        per_mm_ref in any::<bool>(),
        split in any::<bool>(),
    ) {
        run(&ops, per_mm_ref, split)?;
    }
}
