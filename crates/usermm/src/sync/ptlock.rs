//! [`PtLock`]: the split page-table lock that lives in a page-table page's metadata
//! (`ptdesc->ptl`, reached by `pte_lockptr`/`pmd_lockptr`).
//!
//! It must be **valid at all-zero** — `PageMeta` lives in lazily zeroed host memory and a
//! frame becomes a page-table page without any constructor running — and **small**: the
//! engine's fields of `PageMeta` take 28 bytes (`page_alloc/meta.rs`). So it is its own one-byte state word, parking through
//! `parking_lot_core` (the parking lot under `parking_lot`), and not a `parking_lot::Mutex`,
//! whose layout is private to that crate and could change under us.
//!
//! ```text
//!  state: 0 = unlocked (the zeroed state) | LOCKED | PARKED (someone sleeps on this address)
//! ```
//! The protocol is parking_lot's `RawMutex` (spin a little, then park on the lock's address;
//! unlock wakes one; every 0.5 ms on average the lock is handed straight to the woken thread,
//! so a stream of fast re-lockers cannot starve a sleeper), which is what the PTL was before.
//!
//! The class ([`PTL`](super::class::PTL) or [`PMD_LOCK`](super::class::PMD_LOCK)) is given at
//! each acquisition: a PMD table's ptl is the PMD lock. In a virtual run the lock calls the
//! [`vhook`](super::vhook) hooks like every seam lock. The guard carries the clock it was
//! taken on (a [`ClockKind`], [`Current`] unless said): [`PtLock::lock`] tests the seam's flag
//! at the acquisition and at the release; [`PtLock::lock_on`], for an operation that has
//! decided its clock (a fault), tests nothing on [`Wall`](super::vhook::Wall) and calls the
//! hooks without asking on [`Virtual`](super::vhook::Virtual).
//! It has no destructor (the metadata array is never dropped element by element): the
//! page-table free path calls [`PtLock::ptlock_free`], as the kernel's `pagetable_dtor` does.
//!
//! # Under loom
//! With `--cfg loom` this same code runs on loom's primitives through
//! [`primitive`](super::primitive): the state word is a loom `AtomicU8` and `park`/`unpark_one`
//! are a loom parking lot with parking_lot_core's contract (`validate` and the unpark callback
//! run under the parking lot's lock). So loom checks the whole protocol — the `Acquire`/`Release`
//! fast paths, setting `PARKED`, parking, the unlock that wakes one, and the fair hand-off
//! (`tests/loom_ptlock.rs`) — not a stand-in. `SpinWait` gives way once and then parks, and
//! `be_fair` is chosen by the model (`PtLock::loom_fair_unpark`) instead of by a 0.5 ms timer.
//! A loom `AtomicU8` is an index into the model's object store, not a one-byte word that is
//! unlocked at zero, so a loom `PtLock` must be made by [`PtLock::new`] inside a model, never
//! found in zeroed memory: under loom `PageMeta` is built with one (`ZeroValid::zeroed`), so a
//! model's page-table pages have real loom PTLs (`tests/loom_fault_zap.rs`).

#![expect(unsafe_code)] // fenced (lib.rs, "Unsafe"): parking on the lock's address (`parking_lot_core`)

use std::fmt;

use super::class::LockClass;
use super::primitive::atomic::{
    AtomicU8,
    Ordering::{Acquire, Relaxed, Release},
};
use super::primitive::parking::{
    self, ParkResult, SpinWait, UnparkResult, UnparkToken, DEFAULT_PARK_TOKEN, DEFAULT_UNPARK_TOKEN,
};
use super::vhook::{self, ClockKind, Current, Mode};

/// The lock is held.
const LOCKED: u8 = 1;
/// At least one thread is parked on the lock's address (or about to be).
const PARKED: u8 = 2;
/// Unpark token meaning "the lock was handed to you, already held".
const TOKEN_HANDOFF: UnparkToken = UnparkToken(1);

/// The split PTL: one byte, unlocked at zero.
#[repr(transparent)]
#[derive(Default)]
pub struct PtLock {
    state: AtomicU8,
}

/// Holding a [`PtLock`]; dropping it is `spin_unlock(ptl)`. `C` is the clock the hold is on
/// (module doc): on [`Current`] the release tests the seam's flag, on a decided clock it
/// does not.
#[must_use = "if unused the page-table lock is released at once"]
pub struct PtLockGuard<'a, C: ClockKind = Current> {
    lock: &'a PtLock,
    class: &'static LockClass,
    clock: C,
}

impl PtLock {
    const_unless_loom! {
        /// An unlocked PTL (all-zero, like the one in zeroed metadata; under loom not all-zero:
        /// see the module doc).
        pub fn new() -> Self {
            Self {
                state: AtomicU8::new(0),
            }
        }
    }

    #[inline]
    fn id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// `spin_lock(ptl)`, the lock being of class `class` (`PTL` or `PMD_LOCK`).
    #[doc(alias = "pte_lockptr")]
    #[doc(alias = "pmd_lock")]
    #[inline]
    pub fn lock(&self, class: &'static LockClass) -> PtLockGuard<'_> {
        self.lock_on(Current, class)
    }

    /// [`Self::lock`] on the clock `clock` (module doc): on a decided clock no test of the
    /// seam's flag, here or at the release.
    #[inline]
    pub(crate) fn lock_on<C: ClockKind>(
        &self,
        clock: C,
        class: &'static LockClass,
    ) -> PtLockGuard<'_, C> {
        if clock.is_virtual() {
            vhook::lock_acquire(self.id(), class, Mode::Exclusive);
        }
        if self
            .state
            .compare_exchange_weak(0, LOCKED, Acquire, Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
        PtLockGuard {
            lock: self,
            class,
            clock,
        }
    }

    /// `spin_trylock(ptl)`.
    #[inline]
    pub fn try_lock(&self, class: &'static LockClass) -> Option<PtLockGuard<'_>> {
        if vhook::active() {
            vhook::lock_try_acquire(self.id(), class, Mode::Exclusive)?;
        }
        let mut state = self.state.load(Relaxed);
        loop {
            if state & LOCKED != 0 {
                return None;
            }
            match self
                .state
                .compare_exchange_weak(state, state | LOCKED, Acquire, Relaxed)
            {
                Ok(_) => {
                    return Some(PtLockGuard {
                        lock: self,
                        class,
                        clock: Current,
                    })
                }
                Err(s) => state = s,
            }
        }
    }

    /// Whether the lock is held (for assertions).
    pub fn is_locked(&self) -> bool {
        self.state.load(Relaxed) & LOCKED != 0
    }

    /// `ptlock_free`: the table page is being freed; forget the lock's virtual state. The lock
    /// must be unlocked.
    #[doc(alias = "pagetable_dtor")]
    pub fn ptlock_free(&self) {
        debug_assert!(!self.is_locked(), "freeing a held page-table lock");
        if vhook::active() {
            vhook::lock_forget(self.id());
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self) {
        let mut spin = SpinWait::new();
        let mut state = self.state.load(Relaxed);
        loop {
            if state & LOCKED == 0 {
                match self
                    .state
                    .compare_exchange_weak(state, state | LOCKED, Acquire, Relaxed)
                {
                    Ok(_) => return,
                    Err(s) => state = s,
                }
                continue;
            }
            // Nobody parked yet: spin a little before parking.
            if state & PARKED == 0 && spin.spin() {
                state = self.state.load(Relaxed);
                continue;
            }
            if state & PARKED == 0 {
                if let Err(s) =
                    self.state
                        .compare_exchange_weak(state, state | PARKED, Relaxed, Relaxed)
                {
                    state = s;
                    continue;
                }
            }
            let addr = self.id();
            let validate = || self.state.load(Relaxed) == LOCKED | PARKED;
            // SAFETY: `addr` is this lock's own address, used as a parking key by nothing but
            // this lock; `validate` and the no-op callbacks neither panic nor call into
            // parking_lot.
            let r = unsafe {
                parking::park(addr, validate, || {}, |_, _| {}, DEFAULT_PARK_TOKEN, None)
            };
            if r == ParkResult::Unparked(TOKEN_HANDOFF) {
                // The unlocker handed the lock over: it is ours, still marked LOCKED.
                return;
            }
            spin.reset();
            state = self.state.load(Relaxed);
        }
    }

    #[inline]
    fn unlock(&self) {
        if self
            .state
            .compare_exchange(LOCKED, 0, Release, Relaxed)
            .is_err()
        {
            self.unlock_slow();
        }
    }

    #[cold]
    #[inline(never)]
    fn unlock_slow(&self) {
        let addr = self.id();
        let callback = |result: UnparkResult| {
            if result.unparked_threads != 0 && result.be_fair {
                // Hand the lock to the woken thread without unlocking it.
                if !result.have_more_threads {
                    self.state.store(LOCKED, Relaxed);
                }
                return TOKEN_HANDOFF;
            }
            let next = if result.have_more_threads { PARKED } else { 0 };
            self.state.store(next, Release);
            DEFAULT_UNPARK_TOKEN
        };
        // SAFETY: as in `lock_slow`; the callback neither panics nor calls into parking_lot.
        unsafe {
            parking::unpark_one(addr, callback);
        }
    }
}

#[cfg(loom)]
impl PtLock {
    /// Under loom: from now to the end of this model execution, every unlock that wakes a
    /// parked thread is told `be_fair` by the parking lot and hands the lock over (parking_lot
    /// does so about once every 0.5 ms). Applies to every `PtLock` of the model.
    pub fn loom_fair_unpark(fair: bool) {
        parking::set_fair_unpark(fair);
    }
}

impl<C: ClockKind> Drop for PtLockGuard<'_, C> {
    #[inline]
    fn drop(&mut self) {
        self.lock.unlock();
        if self.clock.is_virtual() {
            vhook::lock_release(self.lock.id(), self.class, Mode::Exclusive);
        }
    }
}

impl fmt::Debug for PtLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PtLock")
            .field("locked", &self.is_locked())
            .finish()
    }
}

impl<C: ClockKind> fmt::Debug for PtLockGuard<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PtLockGuard")
            .field("class", &self.class.name)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod test {
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    use super::*;
    use crate::sync::class::PTL;

    #[test]
    fn fits_in_a_byte_and_zero_is_unlocked() {
        assert_eq!(std::mem::size_of::<PtLock>(), 1);
        let l = PtLock::default();
        let g = l.try_lock(&PTL).expect("zero is unlocked");
        assert!(l.is_locked());
        assert!(l.try_lock(&PTL).is_none());
        drop(g);
        assert!(!l.is_locked());
    }

    #[test]
    fn excludes_under_contention() {
        // A non-atomic read-modify-write under the lock loses no update only if the lock
        // excludes: 4 threads × 20 000 increments (times USERMM_TEST_SCALE), with parking
        // when they collide.
        let n = usermm_testscale::scaled(20_000);
        let lock = Arc::new(PtLock::new());
        let count = Arc::new(AtomicU64::new(0));
        std::thread::scope(|s| {
            for _ in 0..4 {
                let (lock, count) = (Arc::clone(&lock), Arc::clone(&count));
                s.spawn(move || {
                    for _ in 0..n {
                        let _g = lock.lock(&PTL);
                        let v = count.load(Relaxed);
                        std::hint::black_box(v);
                        count.store(v + 1, Relaxed);
                    }
                });
            }
        });
        assert_eq!(count.load(Relaxed), 4 * n);
        assert!(!lock.is_locked());
        usermm_testscale::report("ptlock::excludes_under_contention", 4 * n);
    }
}
