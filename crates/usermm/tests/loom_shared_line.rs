//! Loom models of `usermm::sync::SharedLine`: an atomic that every CPU writes as one cache
//! line — the huge zero page's reference count (`mm/huge_memory.c`: `get_huge_zero_page` is
//! `atomic_inc_not_zero`, `put_huge_zero_page` an `atomic_dec`).
//!
//! Run with `.ci/loom.sh`. Under `--cfg loom` the line wraps a loom `AtomicI64`
//! (`LineAtomic` is implemented for loom's atomics there) and its virtual-time hook is a no-op,
//! so loom explores the RMWs themselves. Without `--cfg loom` this file compiles to nothing.
//!
//! Models:
//! - [`rmw_is_atomic`]: three threads `fetch_add` 1, 2 and 4 concurrently: the end value is
//!   exact and each saw a distinct predecessor (the sum of those that went before it).
//! - [`inc_not_zero_vs_last_put`]: `fetch_update` as `atomic_inc_not_zero` against the put that
//!   drops the count to zero: the get either wins (and the count ends at 1, the page kept) or
//!   sees zero and fails (the count ends at 0); never a get that revives a freed page.
//! - [`load_then_store_is_caught`]: the negative control, an "increment" made of a plain load
//!   and a plain store (not a synchronisation point): loom must find the lost update.
//!
//! A failure would mean that a `SharedLine` RMW is not one indivisible operation: the huge
//! zero page could be freed while still mapped, or leaked.
#![cfg(loom)]

use loom::sync::atomic::{AtomicI64, Ordering::AcqRel, Ordering::Acquire, Ordering::Relaxed};
use loom::sync::Arc;
use loom::thread;
use usermm::sync::class::HUGE_ZERO_REFCOUNT;
use usermm::sync::SharedLine;

type Refcount = SharedLine<AtomicI64>;

fn line(v: i64) -> Arc<Refcount> {
    Arc::new(SharedLine::new(&HUGE_ZERO_REFCOUNT, AtomicI64::new(v)))
}

#[test]
fn rmw_is_atomic() {
    loom::model(|| {
        let l = line(0);
        let adders: Vec<_> = [1, 2]
            .into_iter()
            .map(|n| {
                let l = Arc::clone(&l);
                thread::spawn(move || l.fetch_add(n, AcqRel))
            })
            .collect();
        let mut seen = vec![l.fetch_add(4, AcqRel)];
        seen.extend(adders.into_iter().map(|t| t.join().unwrap()));
        assert_eq!(l.load(Acquire), 7, "an RMW of the shared line was lost");
        // Each RMW read the result of the ones before it: three distinct values, the first 0.
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 3, "two RMWs read the same value");
        assert_eq!(seen[0], 0);
    });
}

#[test]
fn inc_not_zero_vs_last_put() {
    loom::model(|| {
        let l = line(1);
        let lg = Arc::clone(&l);
        let getter = thread::spawn(move || {
            lg.fetch_update(AcqRel, Acquire, |v| (v != 0).then_some(v + 1))
                .is_ok()
        });
        let put_to_zero = l.fetch_sub(1, AcqRel) == 1;
        let got = getter.join().unwrap();
        let end = l.load(Acquire);
        assert_eq!(end, i64::from(got), "count does not match the holders");
        // The put dropped the last reference only if the get had not taken one yet, in which
        // case the get must have failed.
        if put_to_zero {
            assert!(!got, "a get revived a page whose count had reached zero");
        }
    });
}

/// Broken on purpose: load, then store, with a window in between.
#[test]
#[should_panic(expected = "an RMW of the shared line was lost")]
fn load_then_store_is_caught() {
    loom::model(|| {
        let l = line(0);
        let ths: Vec<_> = (0..2)
            .map(|_| {
                let l = Arc::clone(&l);
                thread::spawn(move || {
                    let v = l.load(Relaxed);
                    l.store(v + 1, Relaxed);
                })
            })
            .collect();
        for t in ths {
            t.join().unwrap();
        }
        assert_eq!(l.load(Acquire), 2, "an RMW of the shared line was lost");
    });
}
