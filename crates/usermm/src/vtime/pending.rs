//! What a context keeps between two synchronisation points, and applying it.
//!
//! A charge ([`hooks::charge`](super::hooks::charge)) and a line touch
//! ([`hooks::mem_touch_page`](super::hooks::mem_touch_page),
//! [`hooks::mem_touch_list`](super::hooks::mem_touch_list)) do not enter the runtime: they are
//! kept in thread-locals of the host thread (only the running context adds to them), and
//! [`State::apply_pending`] applies them, touches first and in order, at the context's next
//! synchronisation point or clock read. Nothing else runs in between, so the clock, the SMT
//! sibling's state and the line states they meet are those they would have met one by one
//! (the module essay, "SMT", and `memory.rs`, "How a touch reaches the model").

#![deny(unsafe_code)]

use std::cell::Cell;

use super::{
    jitter,
    memory::{Touch, Touched},
    profile::{Cost, Ps},
    sched::{CtxId, State},
};

/// What the running context has charged since its last synchronisation point (see
/// [`hooks::charge`](super::hooks::charge)); on the wall clock, never read. The counts and
/// their mask share one thread-local so that a charge reaches both through one access.
struct Charges {
    /// Units of each [`Cost`].
    counts: [Cell<u64>; Cost::COUNT],
    /// Bit `i` set: count `i` may be non-zero (so that applying the charges visits only the
    /// costs charged since the last synchronisation point, usually two or three of them).
    mask: Cell<u64>,
}

thread_local! {
    static PENDING: Charges = const {
        Charges { counts: [const { Cell::new(0) }; Cost::COUNT], mask: Cell::new(0) }
    };
}

const _: () = assert!(Cost::COUNT <= 64, "the pending mask has a bit per cost");

/// Touches kept before they are applied at once (a list operation makes one; a lock hold of
/// the engine a few dozen).
const TOUCH_BUF: usize = 64;

thread_local! {
    /// The running context's touches since its last synchronisation point or clock read, in
    /// order; the first [`TOUCH_LEN`] are live. A touch is not a synchronisation point and
    /// nothing reads what it changes (the line model, the context's clock) before the
    /// context's next synchronisation point or clock read, where [`State::apply_touches`]
    /// applies them in order before anything else, as one batch: the batch is the span over
    /// which a CPU's stores overlap (`store_buffer.rs`), so it is part of the model, and it
    /// also spares the runtime an entry per touch. A buffer that fills ends its batch early
    /// (`store_buffer.rs`, "Where it differs from the hardware").
    static TOUCHES: [Cell<Touched>; TOUCH_BUF] = const {
        [const { Cell::new(Touched::Page { pfn: 0, how: Touch::Measured }) }; TOUCH_BUF]
    };
    static TOUCH_LEN: Cell<usize> = const { Cell::new(0) };
}

/// Keeps a touch of the running context for its next synchronisation point; when the
/// buffer is full, `flush` first applies the kept ones (`hooks.rs`, which reaches the run;
/// outside a context they are dropped) and the buffer starts again.
#[inline(always)]
pub(super) fn push_touch(t: Touched, flush: impl FnOnce()) {
    // Through `with` (the cell's own methods), which inlines into the engine's call sites
    // where the key's `get`/`set` may not.
    let mut n = TOUCH_LEN.with(Cell::get);
    if n >= TOUCH_BUF {
        flush();
        n = 0;
    }
    TOUCHES.with(|b| {
        if let Some(c) = b.get(n) {
            c.set(t);
        }
    });
    TOUCH_LEN.with(|l| l.set(n + 1));
}

/// Count `n` units of cost `i` for the running context.
#[inline(always)]
pub(super) fn add_pending(i: usize, n: u64) {
    // One access for the count and its bit: a charge is made at nearly every step of the
    // engine's per-page loops, and each `with` the compiler leaves out of line is a call
    // through the key's accessor.
    PENDING.with(|p| {
        if let Some(c) = p.counts.get(i) {
            c.set(c.get().wrapping_add(n));
        }
        p.mask.set(p.mask.get() | 1u64 << (i & 63));
    });
}

/// The pending counts, cleared: their price at `cost_ps`, in ps, and the lines of the pages
/// they cleared or copied (which fill the caches, `vtime/memory.rs`). The costs are summed in
/// index order, as a sum over every count would (the others are zero).
#[inline]
fn take_pending(cost_ps: &[Ps; Cost::COUNT]) -> (Ps, u64) {
    PENDING.with(|p| {
        let mut mask = p.mask.replace(0);
        if mask == 0 {
            return (0, 0);
        }
        let c = &p.counts;
        let pages = c[Cost::ClearPage.index()].get() + c[Cost::CopyPage.index()].get();
        let mut ps: Ps = 0;
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            if let (Some(c), Some(&price)) = (c.get(i), cost_ps.get(i)) {
                ps = ps.saturating_add(c.replace(0).saturating_mul(price));
            }
        }
        (ps, pages.saturating_mul(LINES_PER_PAGE))
    })
}

/// Cache lines in a 4 KiB page.
const LINES_PER_PAGE: u64 = 64;

/// Drops whatever was counted outside a context (wall-mode code before the run).
pub(super) fn clear_pending() {
    PENDING.with(|p| {
        p.counts.iter().for_each(|c| c.set(0));
        p.mask.set(0);
    });
    TOUCH_LEN.set(0);
}

impl State {
    /// Applies the touches made and the charges counted since `me`'s last synchronisation
    /// point to its clock (the touches first: each was priced at once before any charge's
    /// cache fills were applied).
    #[inline]
    pub(super) fn apply_pending(&mut self, me: CtxId) {
        self.apply_touches(me);
        let (ps, fills) = take_pending(&self.model.profile.cost_ps);
        if fills > 0 {
            self.mem_fill(me, fills);
        }
        if ps > 0 {
            let sigma = self.model.profile.jitter_ppm;
            let ps = jitter::apply(ps, sigma, &mut self.ctxs[me as usize].rng);
            self.work(me, ps);
        }
    }
}

impl State {
    /// Applies `me`'s kept touches ([`TOUCHES`]) in order: their prices are busy time,
    /// unscaled (memory time, like a hand-over), added as one sum (the same clock as one
    /// charge each: every sum saturates, and nothing reads the clock in between).
    #[inline(always)]
    pub(super) fn apply_touches(&mut self, me: CtxId) {
        let n = TOUCH_LEN.replace(0);
        if n != 0 {
            self.apply_kept_touches(me, n);
        }
    }

    /// [`State::apply_touches`] for the first `n` (> 0) kept touches.
    #[inline(never)]
    fn apply_kept_touches(&mut self, me: CtxId, n: usize) {
        let Some(mem) = self.mem.as_mut() else { return };
        let cpu = self.ctxs[me as usize].cpu as usize;
        let ps = TOUCHES.with(|b| {
            let kept = b.get(..n).unwrap_or(b);
            mem.touch_all(cpu, kept)
        });
        if ps > 0 {
            self.busy(me, ps);
        }
    }
}
