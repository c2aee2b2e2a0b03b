//! Property test: random syscall and access sequences never panic, return only errnos or
//! faults, keep validate_mm() clean after every step, and leak no frame after exit.

mod common;

use common::*;
use proptest::prelude::*;
use usermm::config::ThpMode;
use usermm::mm::mmap::*;
use usermm::Mm;

const BASE: u64 = 0x4000_0000;
const SPAN: u64 = 8 << 20;

#[derive(Debug, Clone)]
enum Step {
    Mmap {
        off: u64,
        pages: u64,
        prot: u32,
        fixed: bool,
        dev_zero: bool,
    },
    Munmap {
        off: u64,
        pages: u64,
    },
    Mprotect {
        off: u64,
        pages: u64,
        prot: u32,
    },
    Madvise {
        off: u64,
        pages: u64,
        advice: i32,
    },
    Mlock {
        off: u64,
        pages: u64,
        on: bool,
    },
    Access {
        off: u64,
        write: bool,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let off = (0..SPAN / 4096).prop_map(|p| p * 4096);
    let pages = prop_oneof![1u64..8, 1u64..1100];
    let prot = prop_oneof![
        Just(PROT_NONE),
        Just(PROT_READ),
        Just(PROT_READ | PROT_WRITE)
    ];
    let advice = prop_oneof![
        Just(MADV_DONTNEED),
        Just(MADV_HUGEPAGE),
        Just(MADV_NOHUGEPAGE),
        Just(MADV_NORMAL),
        Just(MADV_FREE),
        Just(77)
    ];
    prop_oneof![
        (
            off.clone(),
            pages.clone(),
            prot.clone(),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(off, pages, prot, fixed, dev_zero)| Step::Mmap {
                off,
                pages,
                prot,
                fixed,
                dev_zero
            }),
        (off.clone(), pages.clone()).prop_map(|(off, pages)| Step::Munmap { off, pages }),
        (off.clone(), pages.clone(), prot).prop_map(|(off, pages, prot)| Step::Mprotect {
            off,
            pages,
            prot
        }),
        (off.clone(), pages.clone(), advice).prop_map(|(off, pages, advice)| Step::Madvise {
            off,
            pages,
            advice
        }),
        (off.clone(), 1u64..4, any::<bool>()).prop_map(|(off, pages, on)| Step::Mlock {
            off,
            pages,
            on
        }),
        (off, any::<bool>()).prop_map(|(off, write)| Step::Access { off, write }),
    ]
}

/// 256 sequences (times `USERMM_TEST_SCALE`) of up to 40 steps, from `USERMM_TEST_SEED`.
#[test]
fn random_syscalls_keep_invariants_and_leak_nothing() {
    usermm_testscale::prop::check(
        "syscall_props::random_syscalls",
        file!(),
        256,
        prop::collection::vec(step(), 1..40),
        |steps| {
            let m = machine_with(|c| c.thp = ThpMode::Always);
            let free0 = free_pages(&m);
            let mm = Mm::new(&m, C0).unwrap();
            let t = task(&mm);
            for s in &steps {
                match *s {
                    Step::Mmap {
                        off,
                        pages,
                        prot,
                        fixed,
                        dev_zero,
                    } => {
                        let mut flags = MAP_PRIVATE | if fixed { MAP_FIXED } else { 0 };
                        let file = if dev_zero {
                            MapFile::DevZero
                        } else {
                            flags |= MAP_ANONYMOUS;
                            MapFile::None
                        };
                        let _ = mm.mmap(C0, BASE + off, pages * 4096, prot, flags, file);
                    }
                    Step::Munmap { off, pages } => {
                        let _ = mm.munmap(C0, BASE + off, pages * 4096);
                    }
                    Step::Mprotect { off, pages, prot } => {
                        let _ = mm.mprotect(C0, BASE + off, pages * 4096, prot);
                    }
                    Step::Madvise { off, pages, advice } => {
                        let _ = mm.madvise(C0, BASE + off, pages * 4096, advice);
                    }
                    Step::Mlock { off, pages, on } => {
                        let _ = if on {
                            mm.mlock(C0, BASE + off, pages * 4096)
                        } else {
                            mm.munlock(C0, BASE + off, pages * 4096)
                        };
                    }
                    Step::Access { off, write } => {
                        let _ = if write {
                            t.write_u64(BASE + off, off)
                        } else {
                            t.read_u64(BASE + off).map(|_| ())
                        };
                    }
                }
                prop_assert!(mm.validate().is_ok(), "after {:?}: {:?}", s, mm.validate());
            }
            drop(t);
            exit_and_check(&m, mm, free0);
            Ok(steps.len() as u64)
        },
    );
}
