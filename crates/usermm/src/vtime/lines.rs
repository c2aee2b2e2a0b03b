//! # Where the line model keeps a `struct page`'s line: in the frame's `PageMeta`
//!
//! The line model (`memory.rs`) remembers, for every `struct page` line a run touches, its
//! last toucher and two fill stamps ([`LineState`], 12 bytes). This module says where that
//! state lives, how a run finds it cold, and holds the list heads' own small table
//! ([`HeadTable`]).
//!
//! In the engine's `PageMeta` of the frame, 12 bytes after its 28 (`page_alloc/meta.rs`).
//! The touches a batch applies are the `struct page`s the engine has just read and written
//! (a list operation's links, `release_pages`' reference count, the buddy's flags), so their
//! `PageMeta`s are in the host's caches when `Memory::touch_all` runs; a state in a table of
//! its own, by PFN, was a host cache miss per page once the table outgrew those caches (the
//! hottest instruction of the line model in `perf record` of `usermm bigfree 4G --time
//! virtual --max-active 8 --profile haswell-ex-4s`). Beside the metadata, a touch loads a line
//! the engine already brought in (a 40-byte `PageMeta` shares host lines with its
//! neighbours: the state lies in the same host line as the list links in six frames of
//! eight, in the next one in the other two).
//!
//! What it gained (cachegrind `--cache-sim=yes --LL=8388608,16,64` of `usermm bigfree 1G
//! --time virtual --max-active 8 --profile haswell-ex-4s`, the table by PFN → the state in
//! `PageMeta`): the touches' D1 read misses 815 K → 90 K and LL read misses 421 K → 40 K;
//! the whole run's D1 misses −14 %, LL misses −22 %, instructions +0.2 % (the dynamic call
//! per batch below, and the compiler's inlining).
//!
//! What it costs:
//! - A wall-clock machine never writes the state, and its memmap grows from 28 to 40 bytes a
//!   frame: a fault or a free touches the same `PageMeta` fields at a stride of 40 bytes
//!   instead of 28 (more host lines per run of frames; the fault paths' instructions and
//!   misses, measured, are in `page_alloc/meta.rs`).
//! - A virtual run's memory is unchanged: the 12 bytes a frame moved from the table, which
//!   every frame the run touched kept resident (0.94 GiB of a 320 GiB bigfree), into the
//!   memmap, which that run keeps resident anyway.
//! - An interleaved layout (frame `i`'s metadata and state in one host line, without making
//!   `PageMeta` bigger) does not fit: 28 + 12 bytes divide 64 into no whole number of frames,
//!   and a 64-byte slot per frame would spend 24 more bytes a frame than this.
//!
//! **A run starts cold while the memmap outlives it.** A machine's `PageMeta`s live as long as
//! the machine; each [`Machine::run`](crate::machine::Machine::run) of a virtual machine is a
//! run of the model that must find every line untouched. So a state's toucher is a *tag*: the
//! run's generation in its high 16 bits, the CPU + 1 in the low 16 (`MAX_CPUS` is 4096). The
//! machine counts its runs (`Memmap::next_line_run`); a run's generation is that count modulo
//! 65 535, from 1, so an all-zero `PageMeta` is untouched in every run, and a state whose tag
//! is of another generation is a line this run never touched (the table's first row). When
//! the count comes round to generation 1 again, the run first clears every state of the
//! memmap (`Memmap::clear_lines`: a walk over it, once in 65 535 runs), so no state of a run
//! 65 535 runs ago can pass as this run's. Clearing at every run's start instead would walk the whole memmap, and make
//! it resident, each time; a generation costs no byte (the tag had 16 spare bits) and one mask
//! in the general path. Two machines' runs never share a state: each has its own memmap and
//! count. A runtime used without a machine (`Runtime::set_memmap`: tests, benches) gets a
//! table of line states of its own, for one run (written zero when it is made).
//!
//! **Who reads and writes it.** Only the virtual-time runtime, in `Memory::touch_all`, on
//! the host thread that runs every context of the run, while one context is suspended at a
//! synchronisation point or clock read (`pending.rs`). The engine never reads it (no engine
//! invariant involves it, so `validate()` ignores it), and a wall-clock machine never writes
//! it. The words are `AtomicU32`s accessed `Relaxed` (a plain load and store on x86-64), not
//! plain integers: `PageMeta` is shared with the engine's host threads, so the memmap is only
//! ever reached through `&PageMeta`, and the line model stays without `unsafe`.
//!
//! **How the model reaches it.** The engine's modules depend on `vtime` (through the sync
//! seam), so `vtime` names no engine type: a machine's `PhysMem` is a `Memmap` to it (`memory.rs`),
//! reached by one dynamic call per batch of touches, whose implementation calls back the
//! model's `LineModel::touch_all` with its `PageMeta`s as a [`LineStore`] (monomorphised:
//! finding a frame's line is a bounds check and an offset, as in a table of its own).

#![deny(unsafe_code)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// A line's state: `[tag of its last toucher, its core's fill stamp, its socket's]`. The tag
/// is the run's generation in the high 16 bits and the toucher's CPU + 1 in the low 16
/// ([`tag_of`]); a tag of another generation (or 0, a frame no run touched) is a line never
/// touched in this run. Stamps count fills in units of 16 (`memory.rs`, `STAMP_SHIFT`) and
/// wrap at 2^32 units (2^36 fills): a line would have to wait 2^36 fills of its cache to
/// alias.
pub(crate) type LineState = [u32; 3];

/// The CPU bits of a tag (`MAX_CPUS` is 4096: CPU + 1 fits).
pub(crate) const TAG_CPU_MASK: u32 = 0xFFFF;

/// Generations a memmap's line states count before they start again at 1 (which first clears
/// every state the memmap holds: `memory.rs`, `start_run`).
pub(crate) const GENERATIONS: u32 = 0xFFFF;

/// The tag of CPU `cpu` in the run whose tags carry `gen_bits` (`generation << 16`).
#[inline(always)]
pub(crate) fn tag_of(gen_bits: u32, cpu: usize) -> u32 {
    gen_bits | (cpu as u32 + 1)
}

/// One frame's `struct page` line state, as its `PageMeta` keeps it (`PageMeta::line`); all
/// zero: never touched.
#[derive(Debug, Default)]
pub(crate) struct PageLine([AtomicU32; 3]);

impl PageLine {
    pub(crate) const fn new() -> PageLine {
        PageLine([AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0)])
    }

    #[inline(always)]
    pub(crate) fn load(&self) -> LineState {
        [
            self.0[0].load(Relaxed),
            self.0[1].load(Relaxed),
            self.0[2].load(Relaxed),
        ]
    }

    #[inline(always)]
    pub(crate) fn store(&self, s: LineState) {
        self.0[0].store(s[0], Relaxed);
        self.0[1].store(s[1], Relaxed);
        self.0[2].store(s[2], Relaxed);
    }

    /// A touch by the line's own toucher: the tag stays, the stamps move.
    #[inline(always)]
    pub(crate) fn store_stamps(&self, core: u32, socket: u32) {
        self.0[1].store(core, Relaxed);
        self.0[2].store(socket, Relaxed);
    }

    /// Back to never touched (a no-op, and no write to the host page, when it is).
    pub(crate) fn clear(&self) {
        if self.0[0].load(Relaxed) != 0 {
            self.store([0; 3]);
        }
    }
}

/// The frames whose `struct page` line states a run finds by PFN: a machine's `PageMeta`s, or
/// a runtime's own table.
pub(crate) trait LineStore {
    /// Frame `pfn`'s line state (`None` beyond the memmap).
    fn line(&self, pfn: u64) -> Option<&PageLine>;
}

impl LineStore for [PageLine] {
    #[inline(always)]
    fn line(&self, pfn: u64) -> Option<&PageLine> {
        self.get(pfn as usize)
    }
}

/// The list heads' lines, by address: a small open-addressed table (heads are few, a few
/// per CPU and per node, and never leave it during a run), probed linearly from the
/// address's Fibonacci hash, at most half full.
///
/// It kept the slot of the last head looked up, tested first, for runs of operations on one
/// list; a fault's touches alternate between lines (a list head, then `nr_free` or the LRU
/// sizes), so that test missed on nearly every lookup of a populate, and the hash it would
/// have spared is two instructions (callgrind: the whole of `usermm bigfree 1G --time
/// virtual --max-active 1`, frees included, 0.95 % fewer instructions without it).
#[derive(Debug)]
pub(crate) struct HeadTable {
    /// `(address, state)`; address 0 marks a free slot (no list head lives at 0).
    slots: Vec<(usize, LineState)>,
    len: usize,
    /// `64 - log2(slots.len())`: the hash's top bits index the table.
    shift: u32,
}

impl Default for HeadTable {
    fn default() -> Self {
        const INITIAL: usize = 64;
        HeadTable {
            slots: vec![(0, [0; 3]); INITIAL],
            len: 0,
            shift: 64 - INITIAL.trailing_zeros(),
        }
    }
}

impl HeadTable {
    /// The state of the line at `id` (not 0), cold the first time.
    #[inline(always)]
    pub(crate) fn get_or_insert(&mut self, id: usize) -> &mut LineState {
        debug_assert_ne!(id, 0, "a list head at address 0");
        let mask = self.slots.len() - 1;
        let mut i = Self::hash(id, self.shift);
        loop {
            let k = self.slots[i].0;
            if k == id {
                return &mut self.slots[i].1;
            }
            if k == 0 {
                break;
            }
            i = (i + 1) & mask;
        }
        self.insert_new(id)
    }

    #[inline(always)]
    fn hash(id: usize, shift: u32) -> usize {
        ((id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize
    }

    /// A new cold line at `id`, growing the table first when it would be more than half full.
    #[cold]
    fn insert_new(&mut self, id: usize) -> &mut LineState {
        if (self.len + 1) * 2 > self.slots.len() {
            let old = std::mem::take(&mut self.slots);
            self.slots = vec![(0, [0; 3]); old.len() * 2];
            self.shift -= 1;
            for (k, s) in old.into_iter().filter(|(k, _)| *k != 0) {
                *self.slot_for_new(k) = (k, s);
            }
        }
        self.len += 1;
        let slot = self.slot_for_new(id);
        *slot = (id, [0; 3]);
        &mut slot.1
    }

    /// The free slot where `id`, not in the table, goes.
    fn slot_for_new(&mut self, id: usize) -> &mut (usize, LineState) {
        let mask = self.slots.len() - 1;
        let mut i = Self::hash(id, self.shift);
        while self.slots[i].0 != 0 {
            i = (i + 1) & mask;
        }
        &mut self.slots[i]
    }
}

/// A count of runs, for a memmap's `Memmap::next_line_run` (`memory.rs`).
#[derive(Debug, Default)]
pub(crate) struct LineRuns(AtomicU64);

impl LineRuns {
    /// Counts a run; its number, from 1.
    pub(crate) fn next(&self) -> u64 {
        self.0.fetch_add(1, Relaxed) + 1
    }

    #[cfg(test)]
    pub(crate) fn set(&self, runs: u64) {
        self.0.store(runs, Relaxed);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn head_table_keeps_every_line_through_growth() {
        let mut t = HeadTable::default();
        // Addresses 64 bytes apart, as list heads in one array are.
        let ids: Vec<usize> = (1..=1000).map(|i| 0x7f00_0000_0000 + i * 64).collect();
        for (n, &id) in ids.iter().enumerate() {
            assert_eq!(*t.get_or_insert(id), [0; 3], "a new line is cold");
            *t.get_or_insert(id) = [n as u32 + 1, 2, 3];
        }
        for (n, &id) in ids.iter().enumerate() {
            assert_eq!(*t.get_or_insert(id), [n as u32 + 1, 2, 3]);
        }
        assert_eq!(t.len, ids.len());
        assert!(t.len * 2 <= t.slots.len());
    }
}
