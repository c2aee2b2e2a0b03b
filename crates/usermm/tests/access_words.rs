//! `Task::access_words`: a run of scattered 8-byte accesses under one TLB gate hold does what
//! the same accesses do one by one — the same words stored and loaded, the same pages faulted
//! in, a word across a page boundary included — and stops at the first access that cannot be
//! made, with its index, having made every access before it and none after.

mod common;

use std::sync::Arc;

use common::*;
use usermm::mm::mmap::{MapFile, MAP_ANONYMOUS, MAP_PRIVATE, PROT_READ};
use usermm::{Mm, PAGE_SIZE};

const PAGES: u64 = 64;

/// A scattered order of word addresses over `PAGES` pages at `base` (a fixed LCG), with a word
/// straddling pages 9 and 10, and every other access a load.
fn ops(base: u64) -> Vec<(u64, Option<u64>)> {
    let words = PAGES * PAGE_SIZE / 8;
    let mut x = 12_345u64;
    let mut v: Vec<(u64, Option<u64>)> = (0..500u64)
        .map(|k| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let addr = base + ((x >> 33) % words) * 8;
            (addr, (k % 2 == 0).then_some(k ^ 0xdead_beef))
        })
        .collect();
    v.insert(
        250,
        (base + 10 * PAGE_SIZE - 4, Some(0x0102_0304_0506_0708)),
    );
    v
}

fn contents(mm: &Arc<Mm>, base: u64) -> Vec<u64> {
    let t = task(mm);
    (0..PAGES * PAGE_SIZE / 8)
        .map(|w| t.read_u64(base + w * 8).unwrap())
        .collect()
}

#[test]
fn a_run_does_what_the_accesses_do_one_by_one() {
    let m = small();
    let (batched, single) = (Mm::new(&m, C0).unwrap(), Mm::new(&m, C0).unwrap());
    let (b, s) = (
        anon(&batched, PAGES * PAGE_SIZE),
        anon(&single, PAGES * PAGE_SIZE),
    );
    task(&batched).access_words(&ops(b)).unwrap();
    let t = task(&single);
    for (addr, v) in ops(s) {
        match v {
            Some(v) => t.write_u64(addr, v).unwrap(),
            None => drop(t.read_u64(addr).unwrap()),
        }
    }
    // Loads fault in the zero page, stores a page of their own: the same rss either way.
    assert_eq!(batched.smaps_rollup(), single.smaps_rollup());
    assert_eq!(contents(&batched, b), contents(&single, s));
    assert!(contents(&batched, b).iter().any(|&w| w != 0));
    batched.validate().unwrap();
    single.validate().unwrap();
}

#[test]
fn a_run_stops_at_the_first_access_it_cannot_make() {
    let m = small();
    let mm = Mm::new(&m, C0).unwrap();
    let base = anon(&mm, 4 * PAGE_SIZE);
    let ro = mm
        .mmap(
            C0,
            0,
            PAGE_SIZE,
            PROT_READ,
            MAP_PRIVATE | MAP_ANONYMOUS,
            MapFile::None,
        )
        .unwrap();
    let run = [
        (base, Some(1)),
        (ro, None),
        (base + PAGE_SIZE, Some(2)),
        (ro, Some(3)),
        (base + 2 * PAGE_SIZE, Some(4)),
    ];
    let (at, fault) = task(&mm).access_words(&run).unwrap_err();
    assert_eq!(at, 3);
    assert_eq!(fault.code.signal(), Some("SIGSEGV"));
    let t = task(&mm);
    assert_eq!(t.read_u64(base).unwrap(), 1);
    assert_eq!(t.read_u64(base + PAGE_SIZE).unwrap(), 2);
    assert_eq!(t.read_u64(base + 2 * PAGE_SIZE).unwrap(), 0);
    assert_eq!(t.read_u64(ro).unwrap(), 0);
    mm.validate().unwrap();
}
