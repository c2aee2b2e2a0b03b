//! Loom models of the `mmap_lock` protocols: downgrade vs writer, and munmap's
//! detach-then-downgrade vs a faulting reader.
//!
//! Run with `.ci/loom.sh`: under `--cfg loom`, `usermm::sync::MmapLock` is a state machine on
//! loom's mutex and condvar, with the value in a loom `UnsafeCell`, so loom explores every
//! interleaving of the threads below and also checks that no guard ever overlaps a writer's.
//! Without `--cfg loom` this file compiles to nothing.
//!
//! Models:
//! - [`downgrade_vs_writer`]: `mmap_write_downgrade` is atomic: no writer gets in between.
//! - [`detach_then_downgrade_vs_fault`]: seed 003's munmap (detach under write, downgrade, zap
//!   under read) never leaves a page mapped in the detached range, whatever a racing fault does.
//! - [`zap_before_detach_is_caught`]: the same with the steps in the wrong order, which must fail:
//!   evidence that the second model can see the bug it rules out.
#![cfg(loom)]

use loom::{
    sync::{
        atomic::{AtomicU64, Ordering::SeqCst},
        Arc,
    },
    thread,
};
use usermm::sync::MmapLock;

/// W1 writes, downgrades and must read back its own value, while W2 tries to write.
#[test]
fn downgrade_vs_writer() {
    loom::model(|| {
        let lock = Arc::new(MmapLock::new(0u32));

        let l1 = Arc::clone(&lock);
        let w1 = thread::spawn(move || {
            let mut w = l1.write();
            *w = 1;
            let r = w.downgrade();
            assert!(r.is_downgraded());
            assert_eq!(*r, 1, "a writer slipped in during the downgrade");
        });

        let l2 = Arc::clone(&lock);
        let w2 = thread::spawn(move || {
            let mut w = l2.write();
            *w = 2;
        });

        w1.join().unwrap();
        w2.join().unwrap();
        let v = *lock.read();
        assert!(v == 1 || v == 2);
        assert!(!lock.is_locked());
    });
}

/// A toy VMA: `[start, end)`.
#[derive(Debug, Clone, Copy)]
struct Vma {
    start: u64,
    end: u64,
}

impl Vma {
    fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }
}

/// The faulting address, inside the VMA.
const ADDR: u64 = 0x1000;
/// "No page mapped" in the toy page table.
const PTE_NONE: u64 = 0;
/// The page a fault installs.
const PTE_PAGE: u64 = 0x42 << 12 | 1;

/// A fault: find the VMA under the read lock and only if found, install the page (in the kernel,
/// under the PTE lock; here one atomic store). Returns whether it installed.
fn fault(mm: &MmapLock<Option<Vma>>, pte: &AtomicU64) -> bool {
    let tree = mm.read();
    match *tree {
        Some(vma) if vma.contains(ADDR) => {
            pte.store(PTE_PAGE, SeqCst);
            true
        }
        _ => false, // SIGSEGV
    }
}

/// Run `unmap` against a concurrent fault on the same range and check that the end state never
/// has a populated page table without a VMA.
fn unmap_vs_fault(unmap: fn(&MmapLock<Option<Vma>>, &AtomicU64)) {
    loom::model(move || {
        let mm = Arc::new(MmapLock::new(Some(Vma {
            start: 0,
            end: 0x2000,
        })));
        let pte = Arc::new(AtomicU64::new(PTE_NONE));

        let (m, p) = (Arc::clone(&mm), Arc::clone(&pte));
        let unmapper = thread::spawn(move || unmap(&m, &p));

        let (m, p) = (Arc::clone(&mm), Arc::clone(&pte));
        let faulter = thread::spawn(move || fault(&m, &p));

        unmapper.join().unwrap();
        faulter.join().unwrap();

        let tree = mm.read();
        assert!(tree.is_none(), "the unmap detached the VMA");
        assert_eq!(
            pte.load(SeqCst),
            PTE_NONE,
            "page left mapped in an unmapped range"
        );
    });
}

/// Seed 003's munmap: detach under write, downgrade, zap under read, unlock.
#[test]
fn detach_then_downgrade_vs_fault() {
    unmap_vs_fault(|mm, pte| {
        let mut tree = mm.write();
        *tree = None; // detach: from here no fault finds the VMA
        let tree = tree.downgrade();
        pte.store(PTE_NONE, SeqCst); // zap under the read lock
        drop(tree);
    });
}

/// The wrong order, zap under read and only then detach under write: a fault between the two
/// repopulates the range. Loom must find that interleaving.
#[test]
#[should_panic(expected = "page left mapped in an unmapped range")]
fn zap_before_detach_is_caught() {
    unmap_vs_fault(|mm, pte| {
        let tree = mm.read();
        pte.store(PTE_NONE, SeqCst);
        drop(tree);
        *mm.write() = None;
    });
}
