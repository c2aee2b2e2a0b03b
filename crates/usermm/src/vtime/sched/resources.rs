//! Virtual resources: locks (spinlock, mutex, rwsem), shared lines, condition variables.
//!
//! Each is keyed by an id (the host object's address) and lives in the run's [`State`]: a lock
//! or a line in a flat table found by the index its host object carries (`table.rs`), a
//! condition variable's queue in a map by address. Every
//! function here is called by a hook *after* the caller passed its synchronisation point, so it
//! runs at the smallest clock of the run and sees each resource as a real machine would at
//! that instant. The formulas are those of the module essay (`vtime/mod.rs`, "Resources").
//!
//! # The lock word is a line
//! Every lock has a word, modelled as a cache line: each acquisition, release and failed
//! try-lock is a read-modify-write that starts no earlier than the word's previous RMW ended
//! (`word_free_at`) and pays a transfer from the CPU that did it (`word_last`). For an exclusive
//! lock that is the hand-over cost; for an rwsem it also serialises readers on the count, as
//! `down_read`'s atomic add does.

#![deny(unsafe_code)]

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::super::{
    class::{Acquired, LineClass, LockClass, Mode, Slot, WaitKind},
    profile::{LockPrice, Ps},
};
use super::{CtxId, Model, State, Wait};

/// lock_stat columns for one (class, mode), in ps until reported.
#[derive(Debug, Clone, Copy)]
pub(in crate::vtime) struct ModeStat {
    pub acquisitions: u64,
    /// Acquisitions whose lock word came from another CPU.
    pub acq_bounces: u64,
    pub contentions: u64,
    /// Contended acquisitions whose lock word came from another CPU.
    pub con_bounces: u64,
    pub wait_total: Ps,
    pub wait_min: Ps,
    pub wait_max: Ps,
    pub holds: u64,
    pub hold_total: Ps,
    pub hold_min: Ps,
    pub hold_max: Ps,
    pub try_failures: u64,
}

impl Default for ModeStat {
    fn default() -> Self {
        ModeStat {
            acquisitions: 0,
            acq_bounces: 0,
            contentions: 0,
            con_bounces: 0,
            wait_total: 0,
            wait_min: Ps::MAX,
            wait_max: 0,
            holds: 0,
            hold_total: 0,
            hold_min: Ps::MAX,
            hold_max: 0,
            try_failures: 0,
        }
    }
}

#[derive(Debug)]
pub(in crate::vtime) struct LockClassStat {
    pub name: &'static str,
    pub wait: WaitKind,
    pub price: LockPrice,
    /// Indexed by `Mode as usize`.
    pub modes: [ModeStat; 2],
}

#[derive(Debug)]
pub(in crate::vtime) struct LineClassStat {
    pub name: &'static str,
    pub rmws: u64,
    /// RMWs whose line came from another CPU.
    pub bounces: u64,
    /// RMWs done in a copy the CPU still held while a transfer away from it was under way.
    pub kept: u64,
    /// Time RMWs waited for the line's previous RMW to end.
    pub wait: Ps,
    /// Time from each RMW's request to its end (wait, transfer and the atomic itself).
    pub time: Ps,
}

/// A waiter queued on a lock.
#[derive(Debug, Clone, Copy)]
struct Waiter {
    ctx: CtxId,
    mode: Mode,
    spin: bool,
}

/// A lock's virtual state.
#[derive(Debug)]
pub(in crate::vtime) struct VLock {
    pub class: u16,
    /// The class static's address: a hit on it skips the class lookup.
    class_key: usize,
    /// The exclusive holder and when its acquisition completed (`Ps::MAX` while handed over
    /// and not yet taken).
    writer: Option<(CtxId, Ps)>,
    readers: Vec<(CtxId, Ps)>,
    waiters: VecDeque<Waiter>,
    word_free_at: Ps,
    word_last: Option<u16>,
}

impl VLock {
    fn new(class: u16, class_key: usize) -> Self {
        VLock {
            class,
            class_key,
            writer: None,
            readers: Vec::new(),
            waiters: VecDeque::new(),
            word_free_at: 0,
            word_last: None,
        }
    }

    fn idle(&self) -> bool {
        self.writer.is_none() && self.readers.is_empty() && self.waiters.is_empty()
    }

    /// rwsem rules: a writer needs the lock free; a reader needs no writer; either way nobody
    /// may be queued (FIFO: a queued writer blocks new readers).
    fn grantable(&self, mode: Mode) -> bool {
        self.waiters.is_empty() && self.free_for(mode)
    }

    fn free_for(&self, mode: Mode) -> bool {
        self.writer.is_none() && (mode == Mode::Shared || self.readers.is_empty())
    }

    #[inline(always)]
    fn add_holder(&mut self, ctx: CtxId, mode: Mode) {
        match mode {
            Mode::Exclusive => self.writer = Some((ctx, Ps::MAX)),
            Mode::Shared => self.readers.push((ctx, Ps::MAX)),
        }
    }

    #[inline(always)]
    fn set_taken(&mut self, ctx: CtxId, mode: Mode, t: Ps) {
        let slot = match mode {
            Mode::Exclusive => self.writer.as_mut(),
            Mode::Shared => self.readers.iter_mut().find(|(c, _)| *c == ctx),
        };
        if let Some(s) = slot {
            s.1 = t;
        }
    }

    /// Removes `ctx` as a holder in `mode`; returns when it had taken the lock.
    #[inline(always)]
    fn remove_holder(&mut self, ctx: CtxId, mode: Mode) -> Option<Ps> {
        match mode {
            Mode::Exclusive => match self.writer {
                Some((c, t)) if c == ctx => {
                    self.writer = None;
                    Some(t)
                }
                _ => None,
            },
            Mode::Shared => {
                let i = self.readers.iter().position(|(c, _)| *c == ctx)?;
                Some(self.readers.swap_remove(i).1)
            }
        }
    }

    /// The acquiring RMW of a lock granted to `me` on `cpu` at `now`: from `now` (or when the
    /// word is free, if later), the class's acquire cost plus a transfer from the word's last
    /// CPU, times `1 + data_lines` for an exclusive acquisition. Returns when it ends and the
    /// transfer.
    #[inline]
    fn granted_rmw(
        &mut self,
        model: &Model,
        me: CtxId,
        cpu: u16,
        now: Ps,
        price: LockPrice,
        mode: Mode,
    ) -> (Ps, Ps) {
        let start = now.max(self.word_free_at);
        let xfer = model.transfer(self.word_last, cpu);
        let lines = match mode {
            Mode::Exclusive => 1 + price.data_lines as Ps,
            Mode::Shared => 1,
        };
        let end = start
            .saturating_add(price.acquire)
            .saturating_add(xfer.saturating_mul(lines));
        self.word_free_at = end;
        self.word_last = Some(cpu);
        self.set_taken(me, mode, end);
        (end, xfer)
    }

    pub(crate) fn holders(&self) -> impl Iterator<Item = CtxId> + '_ {
        self.writer
            .iter()
            .map(|(c, _)| *c)
            .chain(self.readers.iter().map(|(c, _)| *c))
    }
}

/// A shared line's virtual state.
#[derive(Debug)]
pub(in crate::vtime) struct VLine {
    class: u16,
    class_key: usize,
    free_at: Ps,
    last: Option<u16>,
    /// Per CPU that lost the line to a transfer, until when its copy stays valid (the
    /// invalidation's arrival, [`HOLDER_KEEPS_LINE`]); indexed by CPU, grown on demand.
    kept_until: Vec<Ps>,
}

/// How far into a transfer away from it the previous holder still has the line, as a
/// fraction `(numerator, denominator)` of that transfer: **an assumption**, one half. A
/// hand-off is the requester's read-for-ownership travelling (through the line's home) to the
/// holder, and the line travelling back; the holder's copy is invalidated when the request
/// reaches it, somewhere inside the transfer the profile prices as one figure
/// (core-to-core-latency's CAS ping-pong), and no published figure splits it. Until then an
/// RMW the holder issues finds the line in its own cache. Only a CPU that issues RMWs on one
/// line back to back can use that window: v4.8's `release_pages` dropping a gather's
/// huge-zero references one after another (`crate::huge_zero_page`, "Where a zap's put
/// happens"); a fault's `get` comes microseconds after the previous one, long after.
pub(in crate::vtime) const HOLDER_KEEPS_LINE: (u64, u64) = (1, 2);

/// What `lock_acquire` decided.
pub(in crate::vtime) enum AcquireStep {
    /// The lock is the caller's.
    Done(Acquired),
    /// The caller is queued; suspend, then call [`State::lock_take`] with `since`.
    Wait { since: Ps },
}

fn record(min: &mut Ps, max: &mut Ps, total: &mut Ps, v: Ps) {
    *min = (*min).min(v);
    *max = (*max).max(v);
    *total = total.saturating_add(v);
}

/// Where each class of one kind (lock or line) sits in its table: by the class's static's
/// address first (one integer hash), by name for a new static of a class already seen (two
/// statics may name one class).
#[derive(Debug, Default)]
pub(crate) struct ClassIndex {
    by_name: FxHashMap<&'static str, u16>,
    by_addr: FxHashMap<usize, u16>,
}

impl ClassIndex {
    /// The class of the static at `addr`, named `name`, if it is known (a new static of a
    /// known name is remembered by its address from now on).
    #[inline]
    pub(crate) fn get(&mut self, addr: usize, name: &'static str) -> Option<u16> {
        if let Some(&i) = self.by_addr.get(&addr) {
            return Some(i);
        }
        let i = *self.by_name.get(name)?;
        self.by_addr.insert(addr, i);
        Some(i)
    }

    /// Records a new class `i`, named `name`, of the static at `addr`.
    pub(crate) fn insert(&mut self, addr: usize, name: &'static str, i: u16) {
        self.by_name.insert(name, i);
        self.by_addr.insert(addr, i);
    }
}

impl State {
    fn lock_class(&mut self, class: &'static LockClass) -> u16 {
        let key = class as *const LockClass as usize;
        if let Some(i) = self.lock_class_index.get(key, class.name) {
            return i;
        }
        let price = self.model.lock_price(class.name).unwrap_or_else(|| {
            panic!(
                "vtime: lock class `{}` has no price in profile {} (add [locks.\"{}\"])",
                class.name,
                self.model.profile.name(),
                class.name
            )
        });
        let i = self.lock_classes.len() as u16;
        self.lock_classes.push(LockClassStat {
            name: class.name,
            wait: class.wait,
            price,
            modes: [ModeStat::default(); 2],
        });
        self.lock_class_index.insert(key, class.name, i);
        i
    }

    fn line_class(&mut self, class: &'static LineClass) -> u16 {
        let key = class as *const LineClass as usize;
        if let Some(i) = self.line_class_index.get(key, class.name) {
            return i;
        }
        let i = self.line_classes.len() as u16;
        self.line_classes.push(LineClassStat {
            name: class.name,
            rmws: 0,
            bounces: 0,
            kept: 0,
            wait: 0,
            time: 0,
        });
        self.line_class_index.insert(key, class.name, i);
        i
    }

    /// The entry of lock `id` of `class` (found through `slot` when it holds it), created on
    /// first use (or re-created when an idle lock's address was reused by a lock of another
    /// class). One lookup when the lock is known.
    #[inline]
    fn lock_entry(&mut self, id: usize, slot: Option<&Slot>, class: &'static LockClass) -> u32 {
        let key = class as *const LockClass as usize;
        match self.locks.find(id, slot) {
            Some(i) if self.locks.get(i).class_key == key => i,
            found => self.lock_entry_slow(id, slot, class, found),
        }
    }

    #[cold]
    fn lock_entry_slow(
        &mut self,
        id: usize,
        slot: Option<&Slot>,
        class: &'static LockClass,
        found: Option<u32>,
    ) -> u32 {
        let key = class as *const LockClass as usize;
        let ci = self.lock_class(class);
        let i = match found {
            Some(i) => i,
            None => self.locks.insert(id, VLock::new(ci, key), slot),
        };
        let lk = self.locks.get_mut(i);
        if lk.class != ci && lk.idle() {
            *lk = VLock::new(ci, key);
        }
        lk.class_key = key;
        i
    }

    /// `me` asks for lock `id` (its table entry hinted by `slot`) in `mode`: granted at once,
    /// or queued (a sleeping waiter leaves its CPU). The common case, a known lock granted at
    /// once, is inlined into the hook: every call layer costs its register saves, a tenth of
    /// the hook (callgrind).
    #[inline(always)]
    pub(crate) fn lock_acquire(
        &mut self,
        me: CtxId,
        id: usize,
        slot: Option<&Slot>,
        class: &'static LockClass,
        mode: Mode,
    ) -> AcquireStep {
        if let Some(a) = self.lock_grant_known(me, id, slot, class, mode) {
            return AcquireStep::Done(a);
        }
        self.lock_acquire_slow(me, id, slot, class, mode)
    }

    /// [`State::lock_acquire`] past its common case: a new lock, or one not grantable now.
    #[inline(never)]
    fn lock_acquire_slow(
        &mut self,
        me: CtxId,
        id: usize,
        slot: Option<&Slot>,
        class: &'static LockClass,
        mode: Mode,
    ) -> AcquireStep {
        let i = self.lock_entry(id, slot, class);
        let lk = self.locks.get_mut(i);
        let ci = lk.class;
        if lk.grantable(mode) {
            lk.add_holder(me, mode);
            let price = self.lock_classes[ci as usize].price;
            return AcquireStep::Done(self.take_granted(me, ci, price, i, mode, None));
        }
        let spin = class.wait == WaitKind::Spin;
        lk.waiters.push_back(Waiter {
            ctx: me,
            mode,
            spin,
        });
        self.lock_classes[ci as usize].modes[mode as usize].contentions += 1;
        let c = &mut self.ctxs[me as usize];
        c.wait = Wait::Lock { id, mode };
        let since = c.now;
        if !spin {
            self.vacate(me);
        }
        AcquireStep::Wait { since }
    }

    /// `try_lock`: the lock if it is grantable at the caller's clock, else a failed RMW on
    /// the word and `None`.
    pub(crate) fn lock_try(
        &mut self,
        me: CtxId,
        id: usize,
        slot: Option<&Slot>,
        class: &'static LockClass,
        mode: Mode,
    ) -> Option<Acquired> {
        if let Some(a) = self.lock_grant_known(me, id, slot, class, mode) {
            return Some(a);
        }
        let i = self.lock_entry(id, slot, class);
        let lk = self.locks.get_mut(i);
        let ci = lk.class;
        let price = self.lock_classes[ci as usize].price;
        if lk.grantable(mode) {
            lk.add_holder(me, mode);
            return Some(self.take_granted(me, ci, price, i, mode, None));
        }
        let (cpu, now) = (self.ctxs[me as usize].cpu, self.ctxs[me as usize].now);
        let start = now.max(lk.word_free_at);
        let end = start
            .saturating_add(price.acquire)
            .saturating_add(self.model.transfer(lk.word_last, cpu));
        lk.word_free_at = end;
        lk.word_last = Some(cpu);
        self.busy(me, end - now);
        self.lock_classes[ci as usize].modes[mode as usize].try_failures += 1;
        None
    }

    /// The acquiring RMW of a granted lock: from the caller's clock (or when the word is free,
    /// if later), the class's acquire cost plus a transfer from the word's last CPU, times
    /// `1 + data_lines` for an exclusive acquisition. `since`: when a contended caller queued.
    pub(crate) fn lock_take(
        &mut self,
        me: CtxId,
        id: usize,
        slot: Option<&Slot>,
        mode: Mode,
        since: Option<Ps>,
    ) -> Acquired {
        let i = self.locks.find(id, slot).expect("a granted lock exists");
        let ci = self.locks.get(i).class;
        let price = self.lock_classes[ci as usize].price;
        self.take_granted(me, ci, price, i, mode, since)
    }

    /// The common case of [`State::lock_acquire`] and [`State::lock_try`], with one lookup
    /// of the lock: a lock already known with this class and grantable in `mode` is taken
    /// (the same steps as the general path, which looks the lock up again by class first).
    /// `None`: anything else, for the general path.
    #[inline(always)]
    fn lock_grant_known(
        &mut self,
        me: CtxId,
        id: usize,
        slot: Option<&Slot>,
        class: &'static LockClass,
        mode: Mode,
    ) -> Option<Acquired> {
        let key = class as *const LockClass as usize;
        let (cpu, now) = (self.ctxs[me as usize].cpu, self.ctxs[me as usize].now);
        let i = self.locks.find(id, slot)?;
        let lk = self.locks.get_mut(i);
        if lk.class_key != key || !lk.grantable(mode) {
            return None;
        }
        let ci = lk.class;
        let price = self.lock_classes[ci as usize].price;
        lk.add_holder(me, mode);
        let (end, xfer) = lk.granted_rmw(&self.model, me, cpu, now, price, mode);
        Some(self.account_take(me, ci, mode, now, end, xfer, None))
    }

    /// [`State::lock_take`] with the lock's entry, class and price known (no lookup).
    #[inline]
    fn take_granted(
        &mut self,
        me: CtxId,
        ci: u16,
        price: LockPrice,
        i: u32,
        mode: Mode,
        since: Option<Ps>,
    ) -> Acquired {
        let (cpu, now) = (self.ctxs[me as usize].cpu, self.ctxs[me as usize].now);
        let lk = self.locks.get_mut(i);
        let (end, xfer) = lk.granted_rmw(&self.model, me, cpu, now, price, mode);
        self.account_take(me, ci, mode, now, end, xfer, since)
    }

    /// The acquiring RMW's time (`now` to `end`, `xfer` the word's transfer) charged to `me`
    /// and counted in lock_stat.
    #[expect(clippy::too_many_arguments, reason = "one private step of two callers")]
    #[inline(always)]
    fn account_take(
        &mut self,
        me: CtxId,
        ci: u16,
        mode: Mode,
        now: Ps,
        end: Ps,
        xfer: Ps,
        since: Option<Ps>,
    ) -> Acquired {
        self.busy(me, end - now);
        let st = &mut self.lock_classes[ci as usize].modes[mode as usize];
        st.acquisitions += 1;
        if xfer > 0 {
            st.acq_bounces += 1;
        }
        match since {
            None => Acquired::default(),
            Some(since) => {
                if xfer > 0 {
                    st.con_bounces += 1;
                }
                let waited = end - since;
                record(
                    &mut st.wait_min,
                    &mut st.wait_max,
                    &mut st.wait_total,
                    waited,
                );
                Acquired {
                    contended: true,
                    waited_ns: waited / 1000,
                }
            }
        }
    }

    /// The releasing RMW (a transfer if the word moved away since the caller took it), then
    /// the hand-over to the head of the queue (out of line: rare).
    #[inline(always)]
    pub(crate) fn lock_release(&mut self, me: CtxId, id: usize, slot: Option<&Slot>, mode: Mode) {
        let (cpu, now) = (self.ctxs[me as usize].cpu, self.ctxs[me as usize].now);
        // A lock taken before the run began has no virtual state: nothing to release.
        let Some(i) = self.locks.find(id, slot) else {
            return;
        };
        let lk = self.locks.get_mut(i);
        let taken = lk.remove_holder(me, mode);
        let start = now.max(lk.word_free_at);
        let end = start.saturating_add(self.model.transfer(lk.word_last, cpu));
        lk.word_free_at = end;
        lk.word_last = Some(cpu);
        let ci = lk.class as usize;
        let waiters = !lk.waiters.is_empty();
        self.busy(me, end - now);
        if let Some(t) = taken.filter(|t| *t != Ps::MAX) {
            let st = &mut self.lock_classes[ci].modes[mode as usize];
            st.holds += 1;
            record(
                &mut st.hold_min,
                &mut st.hold_max,
                &mut st.hold_total,
                now - t,
            );
        }
        if waiters {
            self.grant_waiters(i, end);
        }
    }

    /// `downgrade_write`: the writer `me` becomes a reader, and queued readers at the head of
    /// the queue (up to the first writer) get the lock with it.
    pub(crate) fn lock_downgrade(&mut self, me: CtxId, id: usize, slot: Option<&Slot>) {
        let (cpu, now) = (self.ctxs[me as usize].cpu, self.ctxs[me as usize].now);
        let Some(i) = self.locks.find(id, slot) else {
            return;
        };
        let lk = self.locks.get_mut(i);
        let Some(taken) = lk.remove_holder(me, Mode::Exclusive) else {
            return;
        };
        lk.readers.push((me, now));
        let start = now.max(lk.word_free_at);
        let end = start.saturating_add(self.model.transfer(lk.word_last, cpu));
        lk.word_free_at = end;
        lk.word_last = Some(cpu);
        let ci = lk.class as usize;
        self.busy(me, end - now);
        let modes = &mut self.lock_classes[ci].modes;
        let w = &mut modes[Mode::Exclusive as usize];
        w.holds += 1;
        record(
            &mut w.hold_min,
            &mut w.hold_max,
            &mut w.hold_total,
            now - taken,
        );
        modes[Mode::Shared as usize].acquisitions += 1;
        self.grant_waiters(i, end);
    }

    /// Hands the lock of entry `i`, released or downgraded at `t`, to the head of its queue:
    /// one writer, or every reader up to the first writer (the v4.x `__rwsem_mark_wake`). A
    /// spinner has spun until `t`; a sleeper runs at `t` + the wake-up latency. Each then
    /// takes the lock with [`State::lock_take`] when it runs.
    #[inline(never)]
    fn grant_waiters(&mut self, i: u32, t: Ps) {
        loop {
            let lk = self.locks.get_mut(i);
            let Some(&w) = lk.waiters.front() else { break };
            if !lk.free_for(w.mode) {
                break;
            }
            lk.waiters.pop_front();
            lk.add_holder(w.ctx, w.mode);
            if w.spin {
                self.spin_until(w.ctx, t);
                self.push_ready(w.ctx);
            } else {
                self.wake(w.ctx, t);
            }
            if w.mode == Mode::Exclusive {
                break;
            }
        }
    }

    /// The lock at `id` is gone (its host object is dropped).
    pub(crate) fn lock_forget(&mut self, id: usize) {
        self.locks.remove(id);
    }

    /// An RMW on a shared line (its table entry hinted by `slot`): starts when the line's
    /// previous RMW ended (or at the caller's clock, if later) and costs `atomic_rmw` plus a
    /// transfer from the line's last CPU.
    pub(crate) fn line_rmw(
        &mut self,
        me: CtxId,
        id: usize,
        slot: Option<&Slot>,
        class: &'static LineClass,
        site: &'static LineClass,
    ) {
        let key = class as *const LineClass as usize;
        let i = match self.lines.find(id, slot) {
            Some(i) if self.lines.get(i).class_key == key => i,
            found => {
                // A new line, or the address now holds a line of another class.
                let ci = self.line_class(class);
                let fresh = VLine {
                    class: ci,
                    class_key: key,
                    free_at: 0,
                    last: None,
                    kept_until: Vec::new(),
                };
                match found {
                    Some(i) => {
                        *self.lines.get_mut(i) = fresh;
                        i
                    }
                    None => self.lines.insert(id, fresh, slot),
                }
            }
        };
        let (cpu, now) = (self.ctxs[me as usize].cpu, self.ctxs[me as usize].now);
        let site_ci = (!std::ptr::eq(site, class)).then(|| self.line_class(site));
        let rmw = self.model.profile.atomic_rmw_ps;
        let ln = self.lines.get_mut(i);
        let ci = site_ci.unwrap_or(ln.class);
        // A CPU whose copy has not been invalidated yet (the request that takes the line from
        // it is still on its way) does its RMW in its own cache, at no transfer and behind no
        // queue: the RMWs already queued are not moved, as the hand-off under way is not.
        if ln.last != Some(cpu)
            && ln
                .kept_until
                .get(usize::from(cpu))
                .is_some_and(|&until| now.saturating_add(rmw) <= until)
        {
            self.busy(me, rmw);
            let st = &mut self.line_classes[ci as usize];
            st.rmws += 1;
            st.kept += 1;
            st.time = st.time.saturating_add(rmw);
            return;
        }
        let start = now.max(ln.free_at);
        let xfer = self.model.transfer(ln.last, cpu);
        let end = start.saturating_add(rmw).saturating_add(xfer);
        if let (Some(prev), true) = (ln.last, xfer > 0) {
            let (num, den) = HOLDER_KEEPS_LINE;
            let prev = usize::from(prev);
            if ln.kept_until.len() <= prev {
                ln.kept_until.resize(prev + 1, 0);
            }
            ln.kept_until[prev] = start.saturating_add(xfer * num / den);
        }
        ln.free_at = end;
        ln.last = Some(cpu);
        self.busy(me, end - now);
        let st = &mut self.line_classes[ci as usize];
        st.rmws += 1;
        if xfer > 0 {
            st.bounces += 1;
        }
        st.wait = st.wait.saturating_add(start - now);
        st.time = st.time.saturating_add(end - now);
    }

    /// The line at `id` is gone.
    pub(crate) fn line_forget(&mut self, id: usize) {
        self.lines.remove(id);
    }

    /// `me` waits on `cv`: queued, the mutex released (handed over if someone waits), off its
    /// CPU until notified.
    pub(crate) fn cv_wait_begin(&mut self, me: CtxId, cv: usize, mutex: usize) {
        self.cvs.entry(cv).or_default().push_back(me);
        self.lock_release(me, mutex, None, Mode::Exclusive);
        self.ctxs[me as usize].wait = Wait::Cv { id: cv };
        self.vacate(me);
    }

    /// Wakes the first waiter of `cv` (or all of them) at the caller's clock plus the wake-up
    /// latency, in FIFO order.
    pub(crate) fn cv_notify(&mut self, me: CtxId, cv: usize, all: bool) {
        let t = self.ctxs[me as usize].now;
        while let Some(w) = self.cvs.get_mut(&cv).and_then(|q| q.pop_front()) {
            self.wake(w, t);
            if !all {
                break;
            }
        }
    }

    /// `me` sleeps `ps`: off its CPU, ready again at its clock + `ps`.
    pub(crate) fn sleep_begin(&mut self, me: CtxId, ps: Ps) {
        self.vacate(me);
        let c = &mut self.ctxs[me as usize];
        c.now = c.now.saturating_add(ps);
        self.push_ready(me);
    }

    /// `me` joins `child`: `true` if it has finished; otherwise `me` leaves its CPU until it
    /// does (and then pays the wake-up latency).
    pub(crate) fn join_begin(&mut self, me: CtxId, child: CtxId) -> bool {
        if let Some(end) = self.ctxs[child as usize].end {
            let c = &mut self.ctxs[me as usize];
            c.now = c.now.max(end);
            return true;
        }
        self.ctxs[child as usize].joiners.push(me);
        self.ctxs[me as usize].wait = Wait::Join { ctx: child };
        self.vacate(me);
        false
    }
}
