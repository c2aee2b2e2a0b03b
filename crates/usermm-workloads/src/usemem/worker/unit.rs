//! One unit of a worker: usemem's `allocate` (map it, with `--show-addr`, `--madv-thp`,
//! `--touch-alloc`), `do_rw_once` (one walk over it, by segments, with `--delay`) and
//! `do_unit` (map unless preallocated, walk `-r` times). The worker's loop over units and
//! what comes after them are the parent module's.

use super::{lcm, Worker, MADV_HUGEPAGE, PAGE_SIZE, R};

/// Most accesses of a random walk handed to the platform at once ([`Sys::access_many`]): on
/// the engine, one TLB gate hold each.
const RANDOM_RUN: usize = 64;
use crate::usemem::sys::{strerror, Access, Gate, Stop, Sys, WalkOp, Words};

impl<S: Sys> Worker<'_, S> {
    /// usemem's `allocate`: map (or malloc) `bytes`, with `--show-addr`, `--madv-thp` and
    /// `--touch-alloc`. `Ok(0)` for 0 bytes (NULL).
    pub fn allocate(&mut self, bytes: u64) -> R<u64> {
        if bytes == 0 {
            return Ok(0);
        }
        let plan = self.plan;
        let p = if plan.opts.malloc {
            match self.sys.malloc(bytes) {
                Some(p) => p,
                None => {
                    return Err(self.fail(format!(
                        "malloc: {}\n",
                        strerror(crate::usemem::sys::ENOMEM)
                    )))
                }
            }
        } else {
            match self.sys.mmap(
                bytes,
                plan.prot(),
                plan.map_flags(),
                plan.map_fd(),
                plan.opts.offset,
            ) {
                Ok(p) => p,
                Err(e) => {
                    return Err(self.fail(format!("{}: mmap failed: {}\n", plan.name, strerror(e))))
                }
            }
        };
        if plan.opts.show_addr {
            let pid = self.sys.pid();
            self.out(&format!("{pid} 0x{p:x}-0x{:x}\n", p.wrapping_add(bytes)));
        }
        if plan.opts.madv_thp {
            if let Err(e) = self.sys.madvise(p, bytes, MADV_HUGEPAGE) {
                return Err(self.fail(format!("madvise MADV_HUGEPAGE failed: {}\n", strerror(e))));
            }
        }
        if plan.opts.touch_alloc {
            let op = WalkOp {
                write: true,
                data: None,
                verify: false,
            };
            self.sys
                .walk(
                    Words {
                        base: p,
                        from: 0,
                        to: bytes / 8,
                        stride: 1,
                    },
                    op,
                )
                .map_err(|s| self.killed(s))?;
        }
        Ok(p)
    }

    /// usemem's `do_rw_once`: one walk of `bytes` at `p`. `rep` is the repeat in progress
    /// (set to `repeats` when the run time is up); `signal` marks the SIGUSR1 phases.
    pub(super) fn rw_once(
        &mut self,
        p: u64,
        bytes: u64,
        read: bool,
        mut rep: Option<&mut u64>,
        repeats: u64,
        signal: bool,
    ) -> R<u64> {
        let o = self.opts().clone();
        let m = bytes / 8;
        let stride = o.stride_words();
        let random = o.random || (signal && o.signal_read_random);
        let verify = (signal && o.signal_verify)
            || (rep.as_deref().is_some_and(|r| *r > 0) && !read && !random);
        let data = if !signal && o.main_write_data != 0 {
            Some(o.main_write_data)
        } else if signal && o.signal_write_data != 0 {
            Some(o.signal_write_data)
        } else {
            None
        };
        let mut limit = if signal {
            o.signal_read_count as i64 as u64
        } else {
            0
        };
        let op = WalkOp {
            write: !read,
            data,
            verify,
        };
        if !random && o.delay_ns == 0 && limit == 0 {
            return self.walk_segments(p, m, stride, op, rep, repeats);
        }
        if !verify && o.delay_ns == 0 && limit == 0 {
            return self.random_runs(p, m, stride, read, data, rep, repeats);
        }
        // One access at a time: random order, the per-page delay, or a counted read.
        let mut count = 0u64;
        let mut prev_page = 0u64;
        let mut i = 0u64;
        while i < m {
            let idx = if random { self.rng.below(m - 1) } else { i };
            let addr = p.wrapping_add(idx.wrapping_mul(8));
            if verify {
                let found = self
                    .sys
                    .access(addr, Access::Read)
                    .map_err(|s| self.killed(s))?;
                if found != idx {
                    return Err(self.killed(Stop::Mismatch { idx, found }));
                }
            }
            let a = if read {
                Access::Read
            } else {
                Access::Write(data.unwrap_or(idx))
            };
            self.sys.access(addr, a).map_err(|s| self.killed(s))?;
            count += 1;
            if o.delay_ns != 0 && addr / PAGE_SIZE != prev_page / PAGE_SIZE {
                self.delay(o.delay_ns, addr, a)?;
                prev_page = addr;
            }
            if i & 0xffff == 0 && self.runtime_exceeded() {
                if let Some(r) = rep.as_deref_mut() {
                    *r = repeats;
                }
                break;
            }
            if limit != 0 {
                limit -= 1;
                if limit == 0 {
                    break;
                }
            }
            match i.checked_add(stride) {
                Some(n) => i = n,
                None => break,
            }
        }
        Ok(count * 8)
    }

    /// The random walk without verification, delay or count: the loop below, its accesses
    /// handed to [`Sys::access_many`] in runs of at most [`RANDOM_RUN`] that end after each
    /// index where usemem looks at the clock — the same words, values and order.
    #[expect(
        clippy::too_many_arguments,
        reason = "do_rw_once's state, passed through"
    )]
    fn random_runs(
        &mut self,
        p: u64,
        m: u64,
        stride: u64,
        read: bool,
        data: Option<u64>,
        mut rep: Option<&mut u64>,
        repeats: u64,
    ) -> R<u64> {
        let mut ops = Vec::with_capacity(RANDOM_RUN);
        let mut count = 0u64;
        let mut i = 0u64;
        let mut done = false;
        while !done && i < m {
            ops.clear();
            let mut look = false;
            while ops.len() < RANDOM_RUN && i < m {
                let idx = self.rng.below(m - 1);
                let addr = p.wrapping_add(idx.wrapping_mul(8));
                let a = if read {
                    Access::Read
                } else {
                    Access::Write(data.unwrap_or(idx))
                };
                ops.push((addr, a));
                look = i & 0xffff == 0;
                match i.checked_add(stride) {
                    Some(n) => i = n,
                    None => done = true,
                }
                if look || done {
                    break;
                }
            }
            self.sys.access_many(&ops).map_err(|s| self.killed(s))?;
            count += ops.len() as u64;
            if look && self.runtime_exceeded() {
                if let Some(r) = rep.as_deref_mut() {
                    *r = repeats;
                }
                break;
            }
        }
        Ok(count * 8)
    }

    /// The sequential walk, in pieces that end where usemem looks at the clock: after each
    /// word whose index is a multiple of 0x10000.
    pub(super) fn walk_segments(
        &mut self,
        p: u64,
        m: u64,
        stride: u64,
        op: WalkOp,
        rep: Option<&mut u64>,
        repeats: u64,
    ) -> R<u64> {
        if m == 0 {
            return Ok(0);
        }
        let timed = self.opts().runtime_secs != 0;
        // Indexes visited are multiples of `stride`; the clock is read at those that are also
        // multiples of 0x10000, i.e. at multiples of lcm(stride, 0x10000).
        let check = lcm(stride, 0x10000);
        let mut words = 0;
        let mut from = 0u64;
        loop {
            self.alive()?;
            // Up to and including the next checkpoint (index 0 is one).
            let to = if !timed {
                m
            } else if from == 0 {
                1
            } else {
                match check {
                    Some(c) => (from / c + 1).saturating_mul(c).saturating_add(1).min(m),
                    None => m,
                }
            };
            words += self
                .sys
                .walk(
                    Words {
                        base: p,
                        from,
                        to,
                        stride,
                    },
                    op,
                )
                .map_err(|s| self.killed(s))?;
            if to >= m {
                // The last word may still be a checkpoint.
                if timed
                    && (to - 1) % stride == 0
                    && ((to - 1) & 0xffff) == 0
                    && self.runtime_exceeded()
                {
                    if let Some(r) = rep {
                        *r = repeats;
                    }
                }
                return Ok(words * 8);
            }
            if self.runtime_exceeded() {
                if let Some(r) = rep {
                    *r = repeats;
                }
                return Ok(words * 8);
            }
            // The next index after `to - 1` on the stride.
            from = match (to - 1).checked_add(stride) {
                Some(n) if n < m => n,
                _ => return Ok(words * 8),
            };
        }
    }

    /// usemem's `delay`: access the word again and again until `ns` have passed, read on a
    /// nanosecond clock. usemem compares the nanoseconds within the second, so a delay of a
    /// second or more never ends there ([`UsememOpts::never_ends`] refuses it before the
    /// run); below a second this loop reads the whole elapsed time, where the C loop goes
    /// round a second more on the rare look at the clock that skips the window between `ns`
    /// and the next second. (A microsecond clock read as nanoseconds made every `-e` above
    /// 999 999 000 unreachable.)
    ///
    /// [`UsememOpts::never_ends`]: crate::usemem::UsememOpts::never_ends
    pub(super) fn delay(&mut self, ns: u64, addr: u64, a: Access) -> R<()> {
        let start = self.sys.now_ns();
        loop {
            self.sys.access(addr, a).map_err(|s| self.killed(s))?;
            if self.sys.now_ns().saturating_sub(start) >= ns {
                return Ok(());
            }
        }
    }

    /// usemem's `do_unit`: map (unless preallocated), walk `-r` times; bytes counted.
    pub(super) fn do_unit(
        &mut self,
        bytes: u64,
        slot: Option<&mut (u64, u64)>,
        buffer: &mut u64,
    ) -> R<u64> {
        let (p, mut rw) = match self.proc.prealloc {
            Some(p) => (p, 0),
            None => {
                let p = self.allocate(bytes)?;
                if let Some(s) = slot {
                    *s = (p, bytes);
                }
                (p, bytes / 8)
            }
        };
        let o = self.opts().clone();
        if o.sync_rw {
            self.sys.ready(Gate::Start);
            self.alive()?;
        }
        if o.signal_phase() || o.madv_pageout {
            *buffer = p;
        }
        let repeats = o.repeats();
        let mut rep = 0u64;
        while rep < repeats {
            if rep > 0 && !o.quiet {
                self.out(".");
            }
            rw += self.rw_once(p, bytes, o.readonly, Some(&mut rep), repeats, false)?;
            self.msync_walked(p, bytes)?;
            rep += 1;
        }
        if o.getchar {
            return self.menu(p, bytes, rw);
        }
        Ok(rw)
    }
}
