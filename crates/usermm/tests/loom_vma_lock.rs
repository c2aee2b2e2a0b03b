//! Loom models of the per-VMA lock (`usermm::sync::VmaLock`): a fault under the VMA's read lock
//! racing a VMA writer (mprotect) that holds the mmap lock for writing.
//!
//! Run with `.ci/loom.sh`. Under `--cfg loom` the seam's `RwSem` (inside both `MmapLock` and
//! `VmaLock`) and the lock sequence numbers are loom primitives, so loom explores every
//! interleaving of the threads below. Without `--cfg loom` this file compiles to nothing.
//!
//! Models:
//! - [`fault_vs_mprotect`]: the writer marks the VMA (`vma_start_write`), makes it read-only
//!   and write-protects the PTE; the fault takes the VMA lock (or falls back to the mmap lock)
//!   and makes the PTE writable only if the VMA allows writing. Whatever the interleaving, a
//!   read-only VMA never ends with a writable PTE.
//! - [`unmarked_writer_is_caught`]: the same writer without `vma_start_write` — loom must find
//!   the interleaving where the fault, having read the old protection, writes after the
//!   writer: evidence that the first model can see the bug it rules out.
//! - [`detached_vma_is_never_read_locked`]: after a writer detached the VMA and released the
//!   mmap lock, a fault that still holds the VMA's node cannot lock it.
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;
use usermm::sync::{MmapLock, VmaLock};

const WRITABLE: u64 = 1;
const READ_ONLY: u64 = 0;

/// One VMA: its lock, its protection, and the one PTE of it that matters.
struct Mm {
    mmap_lock: MmapLock<()>,
    vma: VmaLock,
    prot: AtomicU64,
    pte: AtomicU64,
}

fn mm() -> Arc<Mm> {
    Arc::new(Mm {
        mmap_lock: MmapLock::new(()),
        vma: VmaLock::new(),
        prot: AtomicU64::new(WRITABLE),
        pte: AtomicU64::new(0),
    })
}

/// A write fault: `lock_vma_under_rcu`, else `mmap_read_lock`; the PTE becomes writable only
/// if the VMA (as the fault saw it) allows writing.
fn write_fault(mm: &Mm) {
    let seq = mm.mmap_lock.mm_lock_seq();
    if let Some(g) = mm.vma.start_read(seq) {
        if mm.prot.load(SeqCst) == WRITABLE {
            mm.pte.store(WRITABLE, SeqCst);
        }
        drop(g);
        return;
    }
    let r = mm.mmap_lock.read();
    if mm.prot.load(SeqCst) == WRITABLE {
        mm.pte.store(WRITABLE, SeqCst);
    }
    drop(r);
}

/// mprotect(PROT_READ): under the mmap write lock, optionally mark the VMA, change its
/// protection, write-protect its PTE.
fn mprotect_read_only(mm: &Mm, mark: bool) {
    let w = mm.mmap_lock.write();
    if mark {
        mm.vma.start_write(mm.mmap_lock.mm_lock_seq().get());
    }
    mm.prot.store(READ_ONLY, SeqCst);
    mm.pte.store(READ_ONLY, SeqCst);
    drop(w);
}

fn race(mark: bool) {
    loom::model(move || {
        let mm = mm();
        let m = Arc::clone(&mm);
        let writer = thread::spawn(move || mprotect_read_only(&m, mark));
        let m = Arc::clone(&mm);
        let fault = thread::spawn(move || write_fault(&m));
        writer.join().unwrap();
        fault.join().unwrap();
        assert_eq!(mm.prot.load(SeqCst), READ_ONLY);
        assert_eq!(
            mm.pte.load(SeqCst),
            READ_ONLY,
            "a writable PTE in a read-only VMA"
        );
    });
}

#[test]
fn fault_vs_mprotect() {
    race(true);
}

#[test]
#[should_panic(expected = "a writable PTE in a read-only VMA")]
fn unmarked_writer_is_caught() {
    race(false);
}

#[test]
fn detached_vma_is_never_read_locked() {
    loom::model(|| {
        let mm = mm();
        let m = Arc::clone(&mm);
        let writer = thread::spawn(move || {
            let w = m.mmap_lock.write();
            m.vma.start_write(m.mmap_lock.mm_lock_seq().get());
            m.vma.mark_detached();
            drop(w);
        });
        let m = Arc::clone(&mm);
        let reader = thread::spawn(move || {
            // lock_vma_under_rcu: a VMA found before it left the tree.
            // Locked before the writer marked it: then the writer waits for us.
            if let Some(g) = m.vma.start_read(m.mmap_lock.mm_lock_seq()) {
                drop(g);
            }
        });
        writer.join().unwrap();
        reader.join().unwrap();
        // After the unlock the mark is gone, but the VMA is detached: a reader must see it.
        let g = mm.vma.start_read(mm.mmap_lock.mm_lock_seq());
        assert!(g.is_some() && mm.vma.is_detached());
    });
}
