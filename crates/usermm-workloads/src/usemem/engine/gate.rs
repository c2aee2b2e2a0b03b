//! usemem's synchronisation on the engine: the pipe barriers every worker arrives at and the
//! parent opens ([`StartGate`]), and SIGUSR1 as the workers see it ([`Usr1`]). Both wait on the
//! seam's [`Mutex`] and [`CondVar`] in the futex class (`USEMEM_WAIT`).

use usermm::sync::{CondVar, Mutex};

use super::USEMEM_WAIT;

/// A barrier: workers arrive and wait; the parent opens it once all have arrived (a worker
/// that ends without arriving counts, where usemem's parent would wait for ever).
///
/// Two condition variables, as usemem's two pipes: an arrival wakes only whoever counts the
/// arrivals (the parent, [`StartGate::open_after`] and [`StartGate::wait_count`]), and the opening
/// wakes the workers. With one, every arrival woke every worker already waiting, only for it
/// to sleep again: n² wakeups for n workers, most of `usemem -n 1000`'s time.
#[derive(Debug)]
pub(super) struct StartGate {
    pub(super) st: Mutex<(u64, bool)>,
    /// Signalled on each arrival (or abandon): the counters wait here.
    arrived: CondVar,
    /// Signalled when the gate opens: the arrived workers wait here.
    opened: CondVar,
}

impl StartGate {
    pub(super) fn new() -> Self {
        StartGate {
            st: Mutex::new(USEMEM_WAIT, (0, false)),
            arrived: CondVar::new(),
            opened: CondVar::new(),
        }
    }

    pub(super) fn arrive_wait(&self) {
        let mut g = self.st.lock();
        g.0 += 1;
        self.arrived.notify_all();
        while !g.1 {
            self.opened.wait(&mut g);
        }
    }

    pub(super) fn abandon(&self) {
        let mut g = self.st.lock();
        g.0 += 1;
        self.arrived.notify_all();
    }

    /// Wait until at least `n` have arrived (without opening).
    pub(super) fn wait_count(&self, n: u64) {
        let mut g = self.st.lock();
        while g.0 < n {
            self.arrived.wait(&mut g);
        }
    }

    pub(super) fn open_after(&self, n: u64) {
        let mut g = self.st.lock();
        while g.0 < n {
            self.arrived.wait(&mut g);
        }
        g.1 = true;
        self.opened.notify_all();
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

#[cfg(test)]
mod test {
    use std::sync::Arc;

    use super::StartGate;

    /// Regression (issue "Speed at scale"): arrivals signalled the condition variable the
    /// arrived workers sleep on, waking all of them at every arrival. Now the workers wait
    /// where only the opening is signalled, and the gate still lets all of them through.
    #[test]
    fn arrivals_wake_the_parent_only_and_the_opening_every_worker() {
        let gate = Arc::new(StartGate::new());
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let g = Arc::clone(&gate);
                std::thread::spawn(move || g.arrive_wait())
            })
            .collect();
        gate.wait_count(4);
        {
            // Held: every worker is asleep in its wait (it counted itself under this lock
            // and released it only by waiting).
            let _st = gate.st.lock();
            assert_eq!(gate.arrived.notify_all(), 0);
            assert_eq!(gate.opened.notify_all(), 4);
        }
        gate.open_after(4);
        for w in workers {
            w.join().unwrap();
        }
        let st = gate.st.lock();
        assert_eq!(*st, (4, true));
    }
}
