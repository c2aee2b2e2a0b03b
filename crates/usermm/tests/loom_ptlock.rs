//! Loom models of the split page-table lock's own contract (`usermm::sync::PtLock`,
//! `ptdesc->ptl`).
//!
//! Run with `.ci/loom.sh`. Under `--cfg loom` the PTL is the host's code on loom's primitives
//! (`sync/ptlock.rs`, "Under loom"): its state word a loom `AtomicU8` with the same orderings,
//! its slow paths parking on a loom parking lot with parking_lot_core's contract. A contended
//! lock gives way once, then sets `PARKED` and parks; the unlock that sees `PARKED` wakes one,
//! clearing `PARKED` or leaving it set for the others, or hands the lock over when the parking
//! lot says `be_fair`. Without `--cfg loom` this file compiles to nothing.
//!
//! Models:
//! - [`ptl_excludes_and_hands_over`]: two threads each do a `Relaxed` read-modify-write of a
//!   PTE word under the lock (as `set_pte_at` under the PTL does); none is lost, and each holder
//!   sees the previous holder's write. A failure would mean the state word's orderings do not
//!   make it a lock: every PTE update of the engine could be lost or torn.
//! - [`ptl_fair_hand_off`]: the same when every wake-up is a fair hand-off (the woken thread
//!   returns holding the lock, which was never released).
//! - [`ptl_three_contenders`]: three updaters, so that an unlock can leave others parked;
//!   unfair, then fair. A failure of these would mean a lost wake-up (loom reports a deadlock)
//!   or a hand-off that lets two threads in.
//! - [`ptl_try_lock_fails_while_held`]: `spin_trylock` never succeeds while another thread
//!   holds the lock, and a holder's writes are seen after a successful one.
//! - [`ignoring_failed_try_lock_is_caught`]: the negative control, a thread that goes on as if
//!   `try_lock` had succeeded. Loom must find the lost update: evidence that the first model
//!   can see the bug it rules out.
//!
//! The PTL against a zap that frees the table is `tests/loom_ptl_unmap.rs`.
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, Ordering::Relaxed};
use loom::sync::Arc;
use loom::thread;
use usermm::sync::class::PTL;
use usermm::sync::PtLock;

/// A page-table page reduced to its lock and one entry.
struct Table {
    ptl: PtLock,
    pte: AtomicU64,
}

impl Table {
    fn new() -> Self {
        Self {
            ptl: PtLock::new(),
            pte: AtomicU64::new(0),
        }
    }

    /// A read-modify-write of the entry: atomic only under the PTL.
    fn bump(&self) {
        let v = self.pte.load(Relaxed);
        self.pte.store(v + 1, Relaxed);
    }
}

/// Two updaters, each taking the lock with `take`, then the check.
fn two_updaters(take: fn(&Table)) {
    loom::model(move || {
        let t = Arc::new(Table::new());
        let ths: Vec<_> = (0..2)
            .map(|_| {
                let t = Arc::clone(&t);
                thread::spawn(move || take(&t))
            })
            .collect();
        for th in ths {
            th.join().unwrap();
        }
        assert!(!t.ptl.is_locked(), "the PTL was left held");
        assert_eq!(
            t.pte.load(Relaxed),
            2,
            "a PTE update under the PTL was lost"
        );
        t.ptl.ptlock_free();
    });
}

#[test]
fn ptl_excludes_and_hands_over() {
    two_updaters(|t| {
        let _g = t.ptl.lock(&PTL);
        t.bump();
    });
}

/// The same with every wake-up a fair hand-off: the unlocker passes the lock, still `LOCKED`,
/// to the thread it wakes.
#[test]
fn ptl_fair_hand_off() {
    two_updaters(|t| {
        PtLock::loom_fair_unpark(true);
        let _g = t.ptl.lock(&PTL);
        t.bump();
    });
}

/// Three threads, so that an unlock can find more than one parked (`have_more_threads`: the
/// unlocker leaves `PARKED` set), with and without fair hand-off.
#[test]
fn ptl_three_contenders() {
    for fair in [false, true] {
        loom::model(move || {
            PtLock::loom_fair_unpark(fair);
            let t = Arc::new(Table::new());
            let ths: Vec<_> = (0..3)
                .map(|_| {
                    let t = Arc::clone(&t);
                    thread::spawn(move || {
                        let _g = t.ptl.lock(&PTL);
                        t.bump();
                    })
                })
                .collect();
            for th in ths {
                th.join().unwrap();
            }
            assert!(!t.ptl.is_locked(), "the PTL was left held");
            assert_eq!(
                t.pte.load(Relaxed),
                3,
                "a PTE update under the PTL was lost"
            );
        });
    }
}

#[test]
fn ptl_try_lock_fails_while_held() {
    loom::model(|| {
        let t = Arc::new(Table::new());
        let t1 = Arc::clone(&t);
        let holder = thread::spawn(move || {
            let _g = t1.ptl.lock(&PTL);
            t1.bump();
        });
        let t2 = Arc::clone(&t);
        let trier = thread::spawn(move || match t2.ptl.try_lock(&PTL) {
            Some(_g) => {
                // The holder is either done (its write visible) or has not begun.
                let v = t2.pte.load(Relaxed);
                assert!(v <= 1);
                t2.bump();
                true
            }
            None => false,
        });
        holder.join().unwrap();
        let got = trier.join().unwrap();
        assert_eq!(t.pte.load(Relaxed), 1 + u64::from(got));
    });
}

/// Broken on purpose: a failed `try_lock` is ignored and the entry updated anyway.
#[test]
#[should_panic(expected = "a PTE update under the PTL was lost")]
fn ignoring_failed_try_lock_is_caught() {
    two_updaters(|t| {
        let _g = t.ptl.try_lock(&PTL);
        t.bump();
    });
}
