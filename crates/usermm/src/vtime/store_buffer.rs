//! Memory-level parallelism of stores: what a CPU's store buffer lets overlap.
//!
//! The line model (`memory.rs`) prices each touch by where its line is. A load the code
//! needs before it can go on (`page_is_buddy`'s read of the buddy, the read of a list entry
//! whose neighbours it is about to unlink) stalls the CPU for that price: the prices of such
//! loads add up. A store does not: on x86 it retires into the store buffer, and the
//! read-for-ownership of its line proceeds while later instructions execute, so the misses
//! of stores to independent lines are in flight at once, beside the loads that follow. A
//! list operation is mostly stores whose addresses are known together: `list_del` reads the
//! entry and then writes both neighbours, `list_add` reads the head and then writes the new
//! entry and the old first one. Under `zone->lock` and `lru_lock` these are the misses on
//! `struct page` lines that another CPU wrote (Aaron Lu, linux-mm 2018-02-05, quoted in
//! `memory.rs`), so what overlaps decides the hold.
//!
//! # The rule
//! Within one batch of touches (a context's touches between two synchronisation points:
//! `pending.rs`), with `t` the batch's elapsed miss time:
//! - a **load** (`Touch::Access`, the read side of a list operation) first waits for a store
//!   to the same line still in flight (the data arrive with that line), then adds its price
//!   to `t`;
//! - a **store** with a price starts its miss at `t` and completes at `t + price`; it adds
//!   nothing to `t` unless all [`FILL_BUFFERS`] are busy, when it first waits for the
//!   earliest to complete;
//! - a **locked read-modify-write** (`Touch::Rmw`: `put_page_testzero`, a lock's
//!   acquisition) waits for every store in flight, then is a load: a `lock`-prefixed
//!   instruction drains the store buffer;
//! - the batch **ends** at a synchronisation point (a lock taken, a lock released, an atomic
//!   RMW of a shared line), which waits for every store in flight: the acquisition is a
//!   locked instruction, and a release's store becomes visible to the next holder only after
//!   the stores before it (x86 keeps stores in order).
//!
//! The batch's price is `t` at its end. Without stores in flight it is the sum of the
//! prices, which is what the line model charged before this rule.
//!
//! # Sources
//! - Ten line fill buffers per core, each tracking one outstanding L1 miss, load or
//!   read-for-ownership, on Intel's cores from Nehalem through Haswell and Broadwell (Intel's
//!   optimization reference manual): every seed machine's core.
//! - That store misses overlap in practice: Travis Downs, "Random writes and microcode oh my"
//!   (2019-03-19) measures random stores missing to DRAM at 15–20 cycles each against a read
//!   latency near 200 cycles, and to L3 at 5–6 cycles against about 35, on Skylake.
//!
//! # Where it differs from the hardware
//! - The engine's charged work between two touches (the constants) is not counted as time
//!   for a store to complete behind: a store's miss overlaps only later misses, so the rule
//!   hides less than the hardware does.
//! - The store buffer's own capacity (42 entries on Haswell) is not modelled: a list
//!   operation writes at most three lines, so the fill buffers bind first.
//! - A release waits for the stores before it on the releasing context's clock, where the
//!   hardware lets the releasing CPU go on and delays only the next holder's view.
//! - A batch that ends because the touch buffer filled (`pending.rs`) also waits for its
//!   stores, where the hardware would not; it ends every 64 touches at most.
//! - Loads of independent lines do not overlap one another: the loads the engine names are
//!   each the one the code depends on next (the buddy's flags, the entry's links).

#![deny(unsafe_code)]

use super::profile::Ps;

/// Outstanding L1 misses a core tracks at once (line fill buffers): ten on every Intel core
/// of the seeds' machines (the module's sources).
pub(super) const FILL_BUFFERS: usize = 10;

/// A line's key in the store buffer: a frame's `struct page` by its PFN, a list head by its
/// address with the top bit set (no PFN reaches it).
#[inline(always)]
pub(super) fn page_key(pfn: u64) -> u64 {
    pfn
}

#[inline(always)]
pub(super) fn head_key(addr: usize) -> u64 {
    addr as u64 | 1 << 63
}

/// The stores in flight of one batch of touches, and the batch's elapsed miss time.
#[derive(Debug, Default)]
pub(super) struct StoreBuffer {
    /// Elapsed miss time of the batch, ps.
    elapsed: Ps,
    /// Sum of every price the batch met, ps (for the statistics: what overlapping hid).
    priced: Ps,
    n: usize,
    key: [u64; FILL_BUFFERS],
    done: [Ps; FILL_BUFFERS],
}

impl StoreBuffer {
    /// A load (or the read that a list operation starts with) of the line `key`, priced
    /// `price`: it waits for a store to the same line in flight, then stalls for its price.
    #[inline(always)]
    pub(super) fn load(&mut self, key: u64, price: Ps) {
        if self.n == 0 && price == 0 {
            // Nothing in flight to wait for and nothing to add (a line at hand, the common
            // case): the sums below would not move.
            return;
        }
        if self.n != 0 {
            if let Some(i) = self.key[..self.n].iter().position(|&k| k == key) {
                self.elapsed = self.elapsed.max(self.done[i]);
                self.remove(i);
            }
        }
        self.priced = self.priced.saturating_add(price);
        self.elapsed = self.elapsed.saturating_add(price);
    }

    /// A locked read-modify-write of the line `key`: every store in flight completes first.
    #[inline(always)]
    pub(super) fn rmw(&mut self, key: u64, price: Ps) {
        self.drain();
        self.load(key, price);
    }

    /// [`Self::store`] when `store`, else [`Self::load`] (a structure's line, `memory.rs`).
    #[inline(always)]
    pub(super) fn load_or_store(&mut self, key: u64, price: Ps, store: bool) {
        if store {
            self.store(key, price)
        } else {
            self.load(key, price)
        }
    }

    /// A store to the line `key`, whose miss costs `price` (0: the line was at hand).
    #[inline(always)]
    pub(super) fn store(&mut self, key: u64, price: Ps) {
        if price == 0 {
            return;
        }
        self.priced = self.priced.saturating_add(price);
        if self.n == FILL_BUFFERS {
            // Every fill buffer busy: the next one frees when the earliest miss completes.
            let (i, &first) = self
                .done
                .iter()
                .enumerate()
                .min_by_key(|&(_, d)| *d)
                .expect("FILL_BUFFERS > 0");
            self.elapsed = self.elapsed.max(first);
            self.remove(i);
        }
        self.key[self.n] = key;
        self.done[self.n] = self.elapsed.saturating_add(price);
        self.n += 1;
    }

    /// Waits for every store in flight.
    #[inline(always)]
    pub(super) fn drain(&mut self) {
        for &d in &self.done[..self.n] {
            self.elapsed = self.elapsed.max(d);
        }
        self.n = 0;
    }

    /// The batch's price once every store completed, and what overlapping hid (ps). By
    /// reference: taken by value, the 184-byte buffer was moved with a `memcpy` per batch of
    /// touches (nearly all of a virtual run's `memcpy`, about 29 instructions a batch:
    /// callgrind).
    #[inline(always)]
    pub(super) fn finish(&mut self) -> (Ps, Ps) {
        self.drain();
        (self.elapsed, self.priced.saturating_sub(self.elapsed))
    }

    #[inline(always)]
    fn remove(&mut self, i: usize) {
        self.n -= 1;
        self.key[i] = self.key[self.n];
        self.done[i] = self.done[self.n];
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn loads_add_up_and_stores_overlap_them() {
        let mut sb = StoreBuffer::default();
        sb.load(page_key(1), 100);
        sb.store(page_key(2), 118);
        sb.store(page_key(3), 44);
        sb.load(page_key(4), 100);
        // 100, then the two stores from 100 (done at 218 and 144) behind the second load
        // (done at 200): the batch ends when the 118 completes.
        assert_eq!(sb.finish(), (218, 362 - 218));
    }

    #[test]
    fn a_load_of_a_line_in_flight_waits_for_its_store() {
        let mut sb = StoreBuffer::default();
        sb.store(page_key(9), 118);
        // The same line read next: it arrives with the store's miss, priced 0 itself (the
        // line model already holds it as this CPU's).
        sb.load(page_key(9), 0);
        sb.load(page_key(10), 44);
        assert_eq!(sb.finish(), (162, 0));
    }

    #[test]
    fn a_locked_rmw_drains_the_stores_first() {
        let mut sb = StoreBuffer::default();
        sb.store(head_key(0x1000), 118);
        sb.store(page_key(7), 44);
        sb.rmw(page_key(8), 10);
        assert_eq!(sb.finish(), (128, 44));
    }

    #[test]
    fn more_stores_than_fill_buffers_wait_for_the_earliest() {
        let mut sb = StoreBuffer::default();
        for i in 0..FILL_BUFFERS as u64 {
            sb.store(page_key(i), 100 + i);
        }
        // The eleventh waits for the first (done at 100), then completes at 200.
        sb.store(page_key(99), 100);
        let (t, hidden) = sb.finish();
        assert_eq!(t, 200);
        let priced: Ps = (0..FILL_BUFFERS as u64).map(|i| 100 + i).sum::<Ps>() + 100;
        assert_eq!(hidden, priced - 200);
    }

    #[test]
    fn a_head_and_a_page_of_the_same_number_are_different_lines() {
        let mut sb = StoreBuffer::default();
        sb.store(head_key(5), 100);
        sb.load(page_key(5), 0);
        // The page's load does not wait for the head's store.
        assert_eq!(sb.elapsed, 0);
        assert_eq!(sb.finish().0, 100);
    }
}
