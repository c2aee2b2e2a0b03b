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
