//! Known-zero frames through the whole engine: memory a process wrote, then gave back (munmap
//! or exit), must read zero when any process faults it in again — under every policy that
//! changes who frees a frame and where it goes (inline or parallel free, pcp auto-tuning, THP
//! or 4 KiB pages, the huge zero page's write policy), with and without a prefaulted backing.
//! Only frames nobody has owned since the host gave them may skip the memset.

mod common;

use std::sync::Arc;

use common::*;
use usermm::config::{FreePolicy, HugeZeroWriteFault, MachineConfig, ThpMode};
use usermm::mm::mmap::{MapFile, MAP_ANONYMOUS, MAP_PRIVATE, PROT_READ, PROT_WRITE};
use usermm::{Machine, Mm, Task};

const LEN: u64 = 24 << 20;

/// A named change to the test machine's configuration.
type Variant = (String, Box<dyn Fn(&mut MachineConfig)>);

/// Every policy variant the test runs under.
fn variants() -> Vec<Variant> {
    let mut v: Vec<Variant> = Vec::new();
    for prefault in [false, true] {
        for thp in [ThpMode::Never, ThpMode::Always] {
            v.push((
                format!("prefault {prefault} thp {thp:?} vanilla"),
                Box::new(move |c| {
                    c.prefault = prefault;
                    c.thp = thp;
                }),
            ));
            v.push((
                format!("prefault {prefault} thp {thp:?} patched, parallel free"),
                Box::new(move |c| {
                    c.prefault = prefault;
                    c.thp = thp;
                    c.set_patched(true);
                    c.free.policy = FreePolicy::Parallel;
                    c.free.threshold_pages = 512;
                    c.free.max_active = 2;
                    c.pcp.auto_tune = true;
                }),
            ));
        }
    }
    v.push((
        "huge zero page split on write".into(),
        Box::new(|c| {
            c.thp = ThpMode::Always;
            c.huge_zero.write_fault = HugeZeroWriteFault::Split;
        }),
    ));
    v
}

fn map(mm: &Mm) -> u64 {
    mm.mmap(
        C0,
        0,
        LEN,
        PROT_READ | PROT_WRITE,
        MAP_PRIVATE | MAP_ANONYMOUS,
        MapFile::None,
    )
    .expect("mmap")
}

/// Write non-zero bytes into the first and last 64 bytes of every page and a word in its
/// middle, through the engine's own access path.
fn dirty(t: &Task, a: u64) {
    let junk = [0x5au8; 64];
    for page in (a..a + LEN).step_by(4096) {
        t.write(page, &junk).unwrap();
        t.write(page + 2048, &junk[..8]).unwrap();
        t.write(page + 4096 - 64, &junk).unwrap();
    }
}

/// Every byte of `[a, a + LEN)` reads zero.
#[track_caller]
fn assert_zero(t: &Task, a: u64, what: &str) {
    let mut buf = vec![1u8; 4096];
    for page in (a..a + LEN).step_by(4096) {
        t.read(page, &mut buf).unwrap();
        assert!(
            buf.iter().all(|&b| b == 0),
            "{what}: non-zero byte in page {page:#x}"
        );
    }
}

#[test]
fn memory_written_and_given_back_reads_zero_when_faulted_in_again() {
    for (what, f) in variants() {
        let machine: Arc<Machine> = machine_with(|c| {
            c.mem = 64 << 20;
            f(c)
        });
        let free0 = free_pages(&machine);
        // Round 1: one process writes, then unmaps; round 2: another writes, then exits.
        let mm1 = Mm::new(&machine, C0).unwrap();
        let t1 = task(&mm1);
        let a = map(&mm1);
        dirty(&t1, a);
        mm1.munmap(C0, a, LEN).unwrap();
        let b = map(&mm1);
        assert_zero(&t1, b, &format!("{what}, after munmap"));
        dirty(&t1, b);
        exit_and_check(&machine, mm1, free0);
        // A read-only walk first (zero pages and huge zero pages), then writes that replace
        // them: every frame handed out must still be zero.
        let mm2 = Mm::new(&machine, C0).unwrap();
        let t2 = task(&mm2);
        let c = map(&mm2);
        assert_zero(&t2, c, &format!("{what}, read-only walk after exit"));
        t2.walk(c, LEN, 4096, true, |_| 0).unwrap();
        assert_zero(&t2, c, &format!("{what}, after exit"));
        exit_and_check(&machine, mm2, free0);
    }
}
