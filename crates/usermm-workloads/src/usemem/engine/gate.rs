//! usemem's synchronisation on the engine: the pipe barriers every worker arrives at and the
//! parent opens ([`EGate`]), and SIGUSR1 as the workers see it ([`Usr1`]). Both wait on the
//! seam's [`Mutex`] and [`CondVar`] in the futex class (`USEMEM_WAIT`).

use usermm::sync::{CondVar, Mutex};

use super::USEMEM_WAIT;

/// A barrier: workers arrive and wait; the parent opens it once all have arrived (a worker
/// that ends without arriving counts, where usemem's parent would wait for ever).
#[derive(Debug)]
pub(super) struct EGate {
    pub(super) st: Mutex<(u64, bool)>,
    pub(super) cv: CondVar,
}

impl EGate {
    pub(super) fn new() -> Self {
        EGate {
            st: Mutex::new(USEMEM_WAIT, (0, false)),
            cv: CondVar::new(),
        }
    }

    pub(super) fn arrive_wait(&self) {
        let mut g = self.st.lock();
        g.0 += 1;
        self.cv.notify_all();
        while !g.1 {
            self.cv.wait(&mut g);
        }
    }

    pub(super) fn abandon(&self) {
        let mut g = self.st.lock();
        g.0 += 1;
        self.cv.notify_all();
    }

    /// Wait until at least `n` have arrived (without opening).
    pub(super) fn wait_count(&self, n: u64) {
        let mut g = self.st.lock();
        while g.0 < n {
            self.cv.wait(&mut g);
        }
    }

    pub(super) fn open_after(&self, n: u64) {
        let mut g = self.st.lock();
        while g.0 < n {
            self.cv.wait(&mut g);
        }
        g.1 = true;
        self.cv.notify_all();
    }
}

/// SIGUSR1 as the engine's workers see it: every signal wakes every worker waiting then.
///
/// usemem blocks SIGUSR1 before it starts and waits in `sigsuspend`, so a signal that comes
/// before a worker reaches its wait stays pending and ends that wait at once. Each worker keeps
/// the count of signals it has taken (from its start) and waits for one more than that.
#[derive(Debug)]
pub struct Usr1 {
    pub(super) gen: Mutex<u64>,
    pub(super) cv: CondVar,
}

impl Default for Usr1 {
    fn default() -> Self {
        Usr1 {
            gen: Mutex::new(USEMEM_WAIT, 0),
            cv: CondVar::new(),
        }
    }
}

impl Usr1 {
    /// A SIGUSR1 arrived.
    pub fn raise(&self) {
        *self.gen.lock() += 1;
        self.cv.notify_all();
    }

    /// Signals raised so far.
    pub(super) fn count(&self) -> u64 {
        *self.gen.lock()
    }

    /// Wait for a signal after the `seen`-th (pending ones coalesce, as a standard signal's
    /// do); returns the count taken.
    pub(super) fn wait(&self, seen: u64) -> u64 {
        let mut g = self.gen.lock();
        while *g == seen {
            self.cv.wait(&mut g);
        }
        *g
    }
}
