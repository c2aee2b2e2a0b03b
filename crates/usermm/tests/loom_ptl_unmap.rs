//! Loom model of the split PTL against a zap that frees the page table: a fault installing a
//! PTE under the PTE page's lock (`do_anonymous_page` after `pte_offset_map_lock`) racing a
//! thread that clears the table and frees it (`retract_page_tables`/`free_pte_range`: under the
//! PMD lock and the PTL, zap the entries, `pmd_clear`, then `pte_free_defer`).
//!
//! Run with `.ci/loom.sh`. The locks are the seam's real `PtLock`s (the PMD table's, of class
//! `PMD_LOCK`, and the PTE table's, of class `PTL`), loom-explored under `--cfg loom`; the PMD
//! entry and the PTE are loom atomics. Without `--cfg loom` this file compiles to nothing.
//!
//! # The protocol
//! The fault finds the PTE table locklessly (`pmdp_get_lockless`), so by the time it holds the
//! table's PTL the zapper may have detached and freed that table. The table's memory stays
//! valid until the walkers are gone (the kernel frees page tables through RCU, here: after the
//! threads are joined, where the model calls `ptlock_free`), so taking a stale table's PTL is
//! safe; writing a PTE into it is not — the page would be mapped by a table no PMD points to,
//! never unmapped, never freed. Hence `__pte_offset_map_lock`'s re-check: with the PTL held,
//! the PMD must still point at the table (`pmd_same`), else unlock and retry (here: bail, as a
//! retry would find the PMD empty and allocate a new table, outside the model). The zapper
//! clears the PMD *under the PTL*, so the re-check under the PTL sees it.
//!
//! Models:
//! - [`fault_rechecks_pmd_under_ptl`]: the fault with the re-check; in no interleaving does the
//!   freed table end with an entry (a fault that won the PTL first installs, and the zap then
//!   clears what it installed).
//! - [`fault_without_recheck_is_caught`]: the negative control, the same fault without the
//!   re-check. Loom must find the interleaving where the fault read the PMD before the zap,
//!   took the PTL after it, and wrote into the freed table.
//!
//! A failure of the first model would mean the engine's fault path can leak a mapped page into
//! a freed page table (a use-after-free of the table in the kernel).
#![cfg(loom)]

use loom::sync::atomic::{
    AtomicBool, AtomicU64,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};
use loom::sync::Arc;
use loom::thread;
use usermm::sync::class::{PMD_LOCK, PTL};
use usermm::sync::PtLock;

/// "No entry" in the PMD or the PTE.
const NONE: u64 = 0;
/// The PMD entry pointing at the one PTE table of the model.
const PMD_TABLE: u64 = 0x7 << 12 | 1;
/// The page the fault installs.
const PTE_PAGE: u64 = 0x42 << 12 | 1;

/// The PMD table (reduced to its lock and one entry) and the PTE table it points to.
struct Tables {
    pmd_ptl: PtLock,
    pmd: AtomicU64,
    pte_ptl: PtLock,
    pte: AtomicU64,
    /// `pte_free_defer` was called: the PTE table is no longer in the page-table tree.
    pte_table_freed: AtomicBool,
}

impl Tables {
    fn new() -> Self {
        Self {
            pmd_ptl: PtLock::new(),
            pmd: AtomicU64::new(PMD_TABLE),
            pte_ptl: PtLock::new(),
            pte: AtomicU64::new(NONE),
            pte_table_freed: AtomicBool::new(false),
        }
    }
}

/// The zap: PMD lock, then the PTE table's PTL (the kernel's order), clear the entry and the
/// PMD, unlock, free the table.
fn zap_and_free(t: &Tables) {
    let pmd_guard = t.pmd_ptl.lock(&PMD_LOCK);
    let pte_guard = t.pte_ptl.lock(&PTL);
    t.pte.store(NONE, Relaxed); // ptep_get_and_clear; the page goes to the gather
    t.pmd.store(NONE, Release); // pmdp_collapse_flush / pmd_clear
    drop(pte_guard);
    drop(pmd_guard);
    t.pte_table_freed.store(true, SeqCst); // pte_free_defer
}

/// The fault on the one address: find the table, lock its PTL, (re-check,) install if empty.
/// Returns whether it installed.
fn fault(t: &Tables, recheck: bool) -> bool {
    let pmdval = t.pmd.load(Acquire); // pmdp_get_lockless
    if pmdval == NONE {
        return false; // would allocate a new table: outside the model
    }
    let _ptl = t.pte_ptl.lock(&PTL); // pte_offset_map_lock: the table named by pmdval
    if recheck && t.pmd.load(Relaxed) != pmdval {
        return false; // !pmd_same: unlock and retry
    }
    if t.pte.load(Relaxed) != NONE {
        return false; // another fault got there first
    }
    t.pte.store(PTE_PAGE, Relaxed); // set_pte_at
    true
}

fn fault_vs_zap(recheck: bool) {
    loom::model(move || {
        let t = Arc::new(Tables::new());
        let tz = Arc::clone(&t);
        let zapper = thread::spawn(move || zap_and_free(&tz));
        let tf = Arc::clone(&t);
        let faulter = thread::spawn(move || fault(&tf, recheck));
        zapper.join().unwrap();
        let installed = faulter.join().unwrap();

        // Both walkers are gone: the RCU grace period of `pte_free_defer` has passed.
        assert!(t.pte_table_freed.load(SeqCst));
        assert_eq!(t.pmd.load(Relaxed), NONE);
        assert_eq!(
            t.pte.load(Relaxed),
            NONE,
            "a PTE was installed into a freed page table (installed: {installed})"
        );
        assert!(!t.pte_ptl.is_locked() && !t.pmd_ptl.is_locked());
        t.pte_ptl.ptlock_free();
    });
}

#[test]
fn fault_rechecks_pmd_under_ptl() {
    fault_vs_zap(true);
}

/// Broken on purpose: the fault trusts the PMD it read before taking the PTL.
#[test]
#[should_panic(expected = "a PTE was installed into a freed page table")]
fn fault_without_recheck_is_caught() {
    fault_vs_zap(false);
}
