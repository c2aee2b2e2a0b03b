//! Lock and line classes, and the small value types the hooks exchange with the sync seam.
//!
//! A class is a `const`-constructible static, like a lockdep class key: every `zone.lock` of
//! every zone shares the class `"zone.lock"`, whose price the profile gives under
//! `[locks."zone.lock"]`, and whose lock_stat row sums them all.

#![deny(unsafe_code)]

/// How a waiter waits for a lock of this class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitKind {
    /// `spinlock_t`: the waiter's CPU stays busy (accounted as spin) until the hand-over.
    Spin,
    /// `struct mutex`, `rw_semaphore`: the waiter sleeps, its CPU is idle (free for other
    /// contexts bound to it), and it pays the profile's wake-up latency after the hand-over.
    Sleep,
}

/// A class of locks (a lockdep class key): a name the profile prices, and how waiters wait.
///
/// The sync seam's lock statics (`crate::sync::class`) are of this type: one object for the
/// seam and the runtime.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct LockClass {
    pub name: &'static str,
    pub wait: WaitKind,
}

impl LockClass {
    pub const fn new(name: &'static str, wait: WaitKind) -> Self {
        Self { name, wait }
    }
}

/// A class of shared cache lines (e.g. `"huge_zero_refcount"`): a name for the statistics.
/// Its RMWs cost the profile's `atomic_rmw` plus a transfer when the line comes from another
/// CPU; a class has no figures of its own.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct LineClass {
    pub name: &'static str,
}

impl LineClass {
    pub const fn new(name: &'static str) -> Self {
        Self { name }
    }
}

/// How a lock is taken: spinlocks and mutexes are always `Exclusive`; an rwsem either.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// A writer, or the only holder of a spinlock/mutex.
    Exclusive,
    /// A reader of an rwsem.
    Shared,
}

/// What an acquisition cost, for the seam's lock_stat: whether the caller queued, and for how
/// long (virtual ns from the request to the moment the lock was the caller's; 0 uncontended).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Acquired {
    pub contended: bool,
    pub waited_ns: u64,
}

/// Where the running machine's table of lock (or line) states keeps one host lock (or line):
/// an index the host object carries for the runtime (`sched/table.rs`), so that a hook finds
/// the object's virtual state without hashing its address.
///
/// It is a hint, never trusted: the runtime checks that the entry at the index is this
/// object's (its address) before it uses it, and otherwise finds the entry by address and
/// writes the index back. So a slot written by another run (machines outlive runs; two
/// machines may run side by side in one process), by a lock that lived at the same address
/// before, or never written at all (0) costs one lookup by address, never a wrong entry.
/// Relaxed atomics: in a run one host thread reads and writes it; across threads it is only
/// a hint, and an `AtomicU32` keeps the lock `Sync` at the cost of a plain load and store.
#[derive(Debug, Default)]
pub struct Slot(std::sync::atomic::AtomicU32);

impl Slot {
    /// An unwritten slot (index 0, checked like any other).
    pub const fn new() -> Self {
        Slot(std::sync::atomic::AtomicU32::new(0))
    }

    #[inline]
    pub(crate) fn get(&self) -> u32 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn set(&self, i: u32) {
        self.0.store(i, std::sync::atomic::Ordering::Relaxed);
    }
}
