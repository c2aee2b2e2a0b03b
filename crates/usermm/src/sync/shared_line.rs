//! [`SharedLine`]: an atomic the modelled kernel shares across CPUs as one hot cache line (the
//! huge zero page's global reference count, seed 002).
//!
//! Every read-modify-write is a synchronisation point: in a virtual run it calls
//! `vhook::line_rmw` first, which serialises RMWs on the line and charges the cache-line
//! transfer when the line comes from another CPU: where seed 002's 54 % of cycles on one
//! counter come from. A CPU's RMWs issued back to back right after it lost the line may still
//! find it in its cache (`vtime/sched/resources.rs`, `HOLDER_KEEPS_LINE`). Plain loads and stores are not (a load of a line nobody writes stays in every
//! cache). On the host it is the bare atomic.
//!
//! Only atomics that are one line shared by every CPU belong here. Per-CPU counters
//! (`PerCpu<..>`), the per-page atomics of `PageMeta` and per-mm counters are not.
//!
//! Under `--cfg loom`, [`LineAtomic`] is also implemented for loom's `AtomicI64`/`AtomicU64`,
//! so a `SharedLine` over them is explored by loom (`tests/loom_shared_line.rs`: every RMW,
//! `fetch_update` included, is atomic); `line_rmw` is then a no-op. The engine's own lines
//! keep the std atomic they are built with.

use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use super::class::LineClass;
use super::vhook;

/// An integer atomic that [`SharedLine`] can wrap.
pub trait LineAtomic: Send + Sync {
    type Value: Copy + fmt::Debug;
    fn load(&self, o: Ordering) -> Self::Value;
    fn store(&self, v: Self::Value, o: Ordering);
    fn swap(&self, v: Self::Value, o: Ordering) -> Self::Value;
    fn fetch_add(&self, v: Self::Value, o: Ordering) -> Self::Value;
    fn fetch_sub(&self, v: Self::Value, o: Ordering) -> Self::Value;
    fn compare_exchange(
        &self,
        cur: Self::Value,
        new: Self::Value,
        ok: Ordering,
        err: Ordering,
    ) -> Result<Self::Value, Self::Value>;
}

macro_rules! line_atomic {
    ($a:ty, $v:ty) => {
        impl LineAtomic for $a {
            type Value = $v;
            #[inline]
            fn load(&self, o: Ordering) -> $v {
                <$a>::load(self, o)
            }
            #[inline]
            fn store(&self, v: $v, o: Ordering) {
                <$a>::store(self, v, o)
            }
            #[inline]
            fn swap(&self, v: $v, o: Ordering) -> $v {
                <$a>::swap(self, v, o)
            }
            #[inline]
            fn fetch_add(&self, v: $v, o: Ordering) -> $v {
                <$a>::fetch_add(self, v, o)
            }
            #[inline]
            fn fetch_sub(&self, v: $v, o: Ordering) -> $v {
                <$a>::fetch_sub(self, v, o)
            }
            #[inline]
            fn compare_exchange(&self, c: $v, n: $v, s: Ordering, f: Ordering) -> Result<$v, $v> {
                <$a>::compare_exchange(self, c, n, s, f)
            }
        }
    };
}

line_atomic!(AtomicI64, i64);
line_atomic!(AtomicU64, u64);
#[cfg(loom)]
line_atomic!(loom::sync::atomic::AtomicI64, i64);
#[cfg(loom)]
line_atomic!(loom::sync::atomic::AtomicU64, u64);

/// [`SharedLine`]'s read-modify-writes: each is one synchronisation point of the line
/// (`SharedLine::rmw`), then the same operation of the atomic it wraps.
macro_rules! rmw_ops {
    ($($op:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)+) => {$(
        #[inline]
        pub fn $op(&self, $($arg: $ty),*) -> $ret {
            self.rmw();
            self.value.$op($($arg),*)
        }
    )+};
}

/// An atomic shared by every CPU as one cache line, of class `class`.
pub struct SharedLine<A> {
    value: A,
    class: &'static LineClass,
    /// Where the running machine's table keeps the line's virtual state (a checked hint:
    /// `vtime/sched/table.rs`).
    slot: vhook::Slot,
}

impl<A: LineAtomic> SharedLine<A> {
    pub const fn new(class: &'static LineClass, value: A) -> Self {
        Self {
            value,
            class,
            slot: vhook::Slot::new(),
        }
    }

    #[inline]
    fn rmw(&self) {
        self.rmw_as(self.class);
    }

    /// An RMW of this line whose time is accounted to `site` (a class naming the caller, as a
    /// profiler would attribute it); the line itself, its queue and its owner, are the same.
    #[inline]
    fn rmw_as(&self, site: &'static LineClass) {
        if vhook::active() {
            vhook::line_rmw_slot(
                std::ptr::from_ref(self) as usize,
                &self.slot,
                self.class,
                site,
            );
        }
    }

    /// A plain load (not a synchronisation point).
    #[inline]
    pub fn load(&self, o: Ordering) -> A::Value {
        self.value.load(o)
    }

    /// A plain store (not a synchronisation point).
    #[inline]
    pub fn store(&self, v: A::Value, o: Ordering) {
        self.value.store(v, o)
    }

    rmw_ops! {
        swap(v: A::Value, o: Ordering) -> A::Value;
        fetch_add(v: A::Value, o: Ordering) -> A::Value;
        fetch_sub(v: A::Value, o: Ordering) -> A::Value;
        compare_exchange(cur: A::Value, new: A::Value, ok: Ordering, err: Ordering)
            -> Result<A::Value, A::Value>;
    }

    /// [`fetch_sub`](Self::fetch_sub) with its time accounted to `site` (see `rmw_as`).
    #[inline]
    pub fn fetch_sub_as(&self, site: &'static LineClass, v: A::Value, o: Ordering) -> A::Value {
        self.rmw_as(site);
        self.value.fetch_sub(v, o)
    }

    /// A read-then-`cmpxchg` loop (`atomic_inc_not_zero`, `atomic_add_unless`): `f` maps the
    /// current value to the new one, or `None` to give up; returns the value seen last, `Ok`
    /// when it was replaced.
    ///
    /// One synchronisation point for the whole loop, hence one RMW of the line in virtual time:
    /// a `cmpxchg` that fails leaves the line exclusive in the failing core's cache, and the
    /// retry a few cycles later finds it there, so the hardware pays one transfer per
    /// successful update, not one per attempt (the read before the first `cmpxchg` is folded
    /// into that transfer). On the host it is the plain loop, on a strong `cmpxchg` as the
    /// kernel's `atomic_try_cmpxchg` is (the same instruction on x86).
    #[doc(alias = "atomic_inc_not_zero")]
    pub fn fetch_update(
        &self,
        ok: Ordering,
        err: Ordering,
        mut f: impl FnMut(A::Value) -> Option<A::Value>,
    ) -> Result<A::Value, A::Value> {
        self.rmw();
        let mut cur = self.value.load(err);
        while let Some(new) = f(cur) {
            match self.value.compare_exchange(cur, new, ok, err) {
                Ok(v) => return Ok(v),
                Err(v) => cur = v,
            }
        }
        Err(cur)
    }

    pub fn class(&self) -> &'static LineClass {
        self.class
    }
}

impl<A> Drop for SharedLine<A> {
    fn drop(&mut self) {
        if vhook::active() {
            vhook::line_forget(std::ptr::from_ref(self) as usize);
        }
    }
}

impl<A: LineAtomic> fmt::Debug for SharedLine<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedLine")
            .field("class", &self.class.name)
            .field("value", &self.value.load(Ordering::Relaxed))
            .finish()
    }
}
