//! # The memory hierarchy: who last touched a line, and what fetching it costs
//!
//! The per-page costs of a profile were measured with one thread doing the work, so they
//! contain the cache behaviour of that thread's pattern: the zap reads `struct page`s left in
//! DRAM long ago (a sequential walk the prefetcher streams), and the free that follows finds
//! them in its own core's caches. What they cannot contain is what changes when the work is
//! spread over CPUs: a worker freeing pages another core zapped, four workers adding pages to
//! the head of one zone's free list, each list operation writing a `struct page` another core
//! wrote a moment ago (Aaron Lu, "RFC: eliminate zone->lock contention for
//! will-it-scale/page_fault1 on big server", linux-mm 2018-02-05: "the most time consuming
//! part of operations under zone->lock is cache misses on struct page"). This module prices
//! that difference, line by line, from the profile's `[memory]` and `[transfer]` figures.
//!
//! ## Lines and their state
//! A *line* is 64 bytes the engine touches on a modelled path:
//! - every frame's `struct page` (one line: the kernel's `struct page` is 64 bytes; the
//!   engine's `PageMeta` is smaller, the line is the kernel's), its state kept in the frame's
//!   own `PageMeta` (`PageMeta::line`, below);
//! - a list head, by its address in the engine (the `PfnList` it heads), in a small
//!   open-addressed table (`HeadTable`: a few per CPU and per node); and, in the same table
//!   by a key of its structure ([`Touched::Line`]), a line laid out as v4.10 did: the zone's
//!   `free_area[]` (heads and `nr_free`), the memcg's LRU sizes (`page_alloc/mod.rs`).
//!
//! Each line remembers the CPU that touched it last and two stamps: the fill count of that
//! CPU's core (its L2) and of its socket (its last-level cache) at the moment of the touch.
//!
//! ## Where a `struct page`'s state lives
//! In the frame's own `PageMeta`, beside the metadata the engine has just used; a run starts
//! cold there by a generation in the tag. `vtime/lines.rs` says why, what it costs and who
//! touches it.
//!
//! ## The rule
//! Every core and every socket counts the lines filled into its cache (a *fill*: a touch the
//! cache did not hold). A line last touched by CPU `w` is still in `w`'s L2 while fewer than
//! `l2_lines` lines were filled into that core since, and in `w`'s socket's LLC while fewer
//! than `llc_lines` were filled into that socket since: LRU by fill count, with the LLC
//! inclusive (a line that left the LLC left the L2 too). A touch by CPU `c` costs:
//!
//! | where the line is | cost beyond the measured constants |
//! |---|---|
//! | never touched in this run | 0 (the first touch is what the constants measured) |
//! | `c`'s core's L2 (`w` is `c` or its SMT sibling) | 0 |
//! | another core's L2 | `T(w→c)`: the `[transfer]` figure by distance (a snoop of a modified line) |
//! | `c`'s socket's LLC, not in any L2 that counts | 0 (an LLC hit: taken as what the constants include) |
//! | another socket's LLC | `transfer.other_socket` |
//! | nowhere: DRAM | `memory.dram_local` or `memory.dram_remote` by the socket of the line's home node; `memory.dram_stream` instead for a `struct page` that is the next line of this CPU's previous DRAM miss within one 4 KiB of the memmap (the L2 streamer's reach) |
//!
//! and fills `c`'s L2 (unless the line was there) and `c`'s socket's LLC (unless it was
//! there); the line's state becomes `c`'s, stamped after the fills.
//!
//! A touch is either an [`Touch::Access`], priced by the table, or [`Touch::Measured`]: an
//! access whose cost a measured constant already holds (the zap's read of the page it
//! unmaps, the fault's store of the page it maps); it moves the line and fills caches, and is
//! charged nothing. What the priced touches of one batch cost the clock together is
//! `store_buffer.rs`'s rule: a load's price adds up, a store's overlaps what follows it, a
//! [`Touch::Rmw`] waits for the stores before it; a list operation ([`ListOp`]) reads one
//! line and writes the others.
//!
//! A touch is not a synchronisation point: its price is busy time of the running context
//! (unscaled by SMT: a miss is memory time, like a lock's hand-over), and the state it reads
//! is the state at that context's clock wherever the line is touched under a lock (the lock's
//! acquisition was a synchronisation point, and every earlier holder's touches came before it
//! in virtual time) or handed over through one (a gathered page queued to a worker). Every
//! line the engine prices is one of those.
//!
//! ## How a touch reaches the model (what it costs the host)
//! The hooks do not enter the runtime per touch: they keep it ([`Touched`]) in a thread-local
//! buffer, and the runtime applies a context's kept touches in order, through
//! [`Memory::touch_all`], at the context's next synchronisation point or clock read, before
//! its pending charges (`pending.rs`, `TOUCHES`). No other context runs before that point (a
//! context is only suspended there) and nothing reads the lines or the clock in between, so
//! the touches meet the line states and fill counts in the order they were made. The batch
//! they form, the touches between two synchronisation points, is also the span over which
//! the CPU's stores overlap (`store_buffer.rs`): what the batch costs the clock is that rule's
//! price, not the sum of its touches' prices. The rule's most common row, a line this CPU touched last
//! and still holds in its L2, is tested first: no fills, no price, the stamps refreshed. The
//! test reads the toucher's core and socket stamps once per batch and again only after a
//! touch that took the general path (the only kind that fills a cache, hence moves them), and
//! its hits are added to the statistics once per batch: the same test on the same stamps.
//! Where the host's time goes in a long run (`perf record` of `usermm bigfree 4G --time
//! virtual --max-active 8 --profile haswell-ex-4s`): the touches were about a fifth of it, and
//! their hottest instruction the load of the page's line state from a table of its own, a
//! host cache miss per page; hence the state's place in `PageMeta` (above).
//!
//! ## Where it differs from the hardware
//! - Only the lines named above are tracked. A page the engine clears or copies fills its 64
//!   lines into the toucher's L2 and LLC ([`Memory::fill`]: they age the tracked lines, as
//!   `clear_page` streaming through a real cache does), but they are not lines here; other
//!   user data, page-table pages and the kernel's other data neither are lines nor fill the
//!   caches, so the caches keep struct pages and list heads longer than a real one would
//!   beside that traffic.
//! - LRU by fill count ignores associativity, the L1, the LLC's non-uniform slices, the
//!   directory and any prefetcher other than the streamer's next-line rule above.
//! - An LLC hit is charged nothing beyond the constants although the one-thread measurement
//!   mostly hit its L2 (a difference of about ten nanoseconds per line).
//! - A line's state is its last toucher's: a line read by two sockets is in one LLC here.
//! - The DRAM figures are latencies of one dependent load. Misses in flight at once
//!   (memory-level parallelism) are modelled for stores only (`store_buffer.rs`: a list
//!   operation's writes overlap one another and the loads after them, up to the core's fill
//!   buffers), and for the streamer's next line; the loads the engine names are each one the
//!   code needs before it goes on, so their prices add up.

#![deny(unsafe_code)]

use std::cell::Cell;
use std::sync::Arc;

use super::memory_stat::MemoryStat;

use super::lines::{tag_of, HeadTable, LineState, LineStore, PageLine, GENERATIONS, TAG_CPU_MASK};

use super::profile::{MemPrice, Placement, Ps};
use super::store_buffer::{head_key, page_key, StoreBuffer};

/// How a touch is priced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touch {
    /// A load, priced by where the line is (the module's table); it stalls the CPU
    /// (`store_buffer.rs`).
    Access,
    /// A measured constant already holds its cost: the line moves, nothing is charged.
    Measured,
    /// A locked read-modify-write (`put_page_testzero`): priced as [`Touch::Access`], after
    /// the CPU's stores in flight complete (`store_buffer.rs`).
    Rmw,
}

/// The kind of a list operation's touches (`hooks::mem_touch_list`): which of its lines
/// are read before the CPU can go on, and which are only written (`store_buffer.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListOp {
    /// `list_del`: the entry is read for its links; both neighbours (and the head, when it is
    /// one) are written.
    Del,
    /// `list_add`, `list_add_tail`: the head is read for the entry it links to; the new entry
    /// and that neighbour are written.
    Add,
}

/// Where a touch found its line (the statistics' buckets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
enum Found {
    First = 0,
    OwnCache = 1,
    OtherCore = 2,
    SocketLlc = 3,
    OtherSocket = 4,
    DramLocal = 5,
    DramRemote = 6,
    DramStream = 7,
}

const FOUND: usize = 8;

/// A stamp counts fills by sixteen: capacities are rounded down to a multiple of 16 lines.
const STAMP_SHIFT: u32 = 4;

#[inline(always)]
fn stamp_of(fills: u64) -> u32 {
    (fills >> STAMP_SHIFT) as u32
}

/// The line model of one run: where its `struct page` lines' states live, and the rest of
/// the model ([`LineModel`]).
#[derive(Debug)]
pub(super) struct Memory {
    lines: Lines,
    model: LineModel,
}

/// Where a run's `struct page` line states live (`lines.rs`).
enum Lines {
    /// A machine's memmap: each frame's `PageMeta` (`Machine::run`).
    Machine(Arc<dyn Memmap>),
    /// The runtime's own, for a runtime told only the memmap's size (`Runtime::set_memmap`).
    Own(Vec<PageLine>),
}

impl std::fmt::Debug for Lines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lines::Machine(_) => f.write_str("Lines::Machine"),
            Lines::Own(v) => write!(f, "Lines::Own({} frames)", v.len()),
        }
    }
}

/// The line model but the `struct page` lines' states: the list heads' lines beside the
/// caches' fill counts and what the touches cost. The head table and the caches are separate
/// fields, so that a touch updates its line in place while the caches price it.
#[derive(Debug)]
pub(crate) struct LineModel {
    /// Lines known by address (list heads, counters).
    heads: HeadTable,
    caches: Caches,
}

/// A machine's memmap as the line model sees it (`PhysMem`): it outlives the runs, counts
/// them, and hands its frames' line states to the model one batch at a time.
pub(crate) trait Memmap: Send + Sync {
    /// Counts a run of the line model on this memmap; its number, from 1.
    fn next_line_run(&self) -> u64;
    /// Sets every frame's line state back to never touched.
    fn clear_lines(&self);
    /// `model.touch_all` with this memmap's frames as the [`LineStore`].
    fn touch_all(&self, model: &mut LineModel, cpu: usize, touches: &[Cell<Touched>]) -> Ps;
}

/// This run's generation on `memmap`, 1..=[`GENERATIONS`]: the memmap's count of runs,
/// wrapped. When it comes round to 1 again, every state a run left behind is cleared first,
/// so that no state of an earlier run with the same generation can look warm.
pub(crate) fn start_run(memmap: &dyn Memmap) -> u32 {
    let run = memmap.next_line_run();
    let generation = ((run - 1) % u64::from(GENERATIONS)) as u32 + 1;
    if generation == 1 && run > 1 {
        memmap.clear_lines();
    }
    generation
}

/// A touch of the lines of the engine (`hooks::mem_touch_page`, `hooks::mem_touch_list`), as
/// the runtime keeps it until it is applied ([`Memory::touch_all`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Touched {
    /// Frame `pfn`'s `struct page`.
    Page { pfn: u64, how: Touch },
    /// One list operation's lines.
    List {
        head: usize,
        pfns: [u32; 3],
        op: ListOp,
    },
    /// A structure's line by its key `addr` (not 0), homed on frame `home`'s node: a load,
    /// or a store nothing after it waits for (`store_buffer.rs`).
    Line { addr: usize, home: u32, store: bool },
}

/// The caches of one run: their fill counts, the prices, the topology a touch reads, and the
/// statistics. The topology is copied from the run's [`Placement`] into flat tables at
/// [`LineModel::new`], so that a touch reads a CPU's core and socket, and a transfer's price,
/// with one indexed load each.
#[derive(Debug)]
struct Caches {
    /// This run's generation, in a tag's high bits ([`tag_of`]).
    gen_bits: u32,
    price: MemPrice,
    /// `llc_lines` and `l2_lines` in stamp units (`>> STAMP_SHIFT`).
    llc_units: u64,
    l2_units: u64,
    /// Frames per node (the engine's `page_to_nid` divides by it), and nodes.
    frames_per_node: u64,
    nr_nodes: u64,
    /// Socket of each node.
    node_socket: Vec<u16>,
    /// Per CPU: its machine-wide core and its socket (`Placement::core_of`, `socket_of`).
    cpu_core: Vec<u32>,
    cpu_socket: Vec<u32>,
    /// `transfer[from * nr_cpus + to]`: the profile's transfer price by the CPUs' distance
    /// (`Placement::distance`).
    transfer: Vec<Ps>,
    nr_cpus: usize,
    socket_fills: Vec<u64>,
    core_fills: Vec<u64>,
    /// Per CPU: the PFN after its last DRAM miss on a `struct page` (`u64::MAX`: none).
    stream_next: Vec<u64>,
    counts: [u64; FOUND],
    measured: u64,
    field_lines: u64,
    charged: Ps,
    /// Priced store misses hidden behind later ones (`store_buffer.rs`).
    overlapped: Ps,
}

/// The CPU a touch runs on, with its tag, core and socket looked up once for the touches of
/// one batch.
#[derive(Debug, Clone, Copy)]
struct Toucher {
    cpu: usize,
    tag: u32,
    core: usize,
    socket: usize,
}

impl Memory {
    /// A cold memory of a machine's memmap: a run of the line model there, of the memmap's
    /// next generation (`lines.rs`).
    pub(super) fn on_machine(
        price: MemPrice,
        placement: &Placement,
        transfer: &[Ps; 4],
        memmap: Arc<dyn Memmap>,
        frames_per_node: u64,
    ) -> Self {
        let generation = start_run(&*memmap);
        Memory {
            lines: Lines::Machine(memmap),
            model: LineModel::new(price, placement, transfer, generation, frames_per_node),
        }
    }

    /// A cold memory of `nr_frames` frames of the runtime's own.
    pub(super) fn own(
        price: MemPrice,
        placement: &Placement,
        transfer: &[Ps; 4],
        nr_frames: u64,
        frames_per_node: u64,
    ) -> Self {
        Memory {
            lines: Lines::Own((0..nr_frames).map(|_| PageLine::new()).collect()),
            model: LineModel::new(price, placement, transfer, 1, frames_per_node),
        }
    }

    /// CPU `cpu` makes `touches`, in order; their price ([`LineModel::touch_all`]). One
    /// dynamic call per batch reaches a machine's memmap, whose type the model does not name.
    #[inline]
    pub(super) fn touch_all(&mut self, cpu: usize, touches: &[Cell<Touched>]) -> Ps {
        match &self.lines {
            Lines::Machine(m) => m.touch_all(&mut self.model, cpu, touches),
            Lines::Own(v) => self.model.touch_all(v.as_slice(), cpu, touches),
        }
    }

    /// See [`LineModel::fill`].
    #[inline]
    pub(super) fn fill(&mut self, cpu: usize, n: u64) {
        self.model.fill(cpu, n);
    }

    pub(super) fn stat(&self) -> MemoryStat {
        self.model.caches.stat()
    }
}

impl LineModel {
    /// A cold model for `placement`'s CPUs, a line transfer priced `transfer[distance]`, the
    /// run's `generation` (1..=`GENERATIONS`, `lines.rs`) and `frames_per_node`.
    fn new(
        price: MemPrice,
        placement: &Placement,
        transfer: &[Ps; 4],
        generation: u32,
        frames_per_node: u64,
    ) -> Self {
        let cpus = placement.nr_cpus();
        assert!(
            cpus < TAG_CPU_MASK as usize,
            "vtime: the line model tags CPUs in 16 bits"
        );
        let sockets = (0..cpus).map(|c| placement.socket_of(c)).max().unwrap_or(0) + 1;
        let cores = (0..cpus).map(|c| placement.core_of(c)).max().unwrap_or(0) + 1;
        let nr_nodes = placement.nr_nodes() as u64;
        let mut xfer = Vec::with_capacity(cpus * cpus);
        for from in 0..cpus {
            for to in 0..cpus {
                xfer.push(transfer[placement.distance(from, to) as usize]);
            }
        }
        LineModel {
            heads: HeadTable::default(),
            caches: Caches {
                gen_bits: generation << 16,
                price,
                llc_units: price.llc_lines >> STAMP_SHIFT,
                l2_units: price.l2_lines >> STAMP_SHIFT,
                frames_per_node: frames_per_node.max(1),
                nr_nodes,
                node_socket: (0..nr_nodes as usize)
                    .map(|n| placement.socket_of_node(n) as u16)
                    .collect(),
                cpu_core: (0..cpus).map(|c| placement.core_of(c) as u32).collect(),
                cpu_socket: (0..cpus).map(|c| placement.socket_of(c) as u32).collect(),
                transfer: xfer,
                nr_cpus: cpus,
                socket_fills: vec![0; sockets],
                core_fills: vec![0; cores],
                stream_next: vec![u64::MAX; cpus],
                counts: [0; FOUND],
                measured: 0,
                field_lines: 0,
                charged: 0,
                overlapped: 0,
            },
        }
    }

    /// CPU `cpu` makes `touches`, in order; returns their price, in ps: the loads' prices
    /// added up and the stores' overlapped with them, as the CPU's store buffer and fill
    /// buffers allow (`store_buffer.rs`), ending when the last store completes.
    ///
    /// A [`Touched::Page`] is one `struct page`; a [`Touched::List`] is the lines of one list
    /// operation (`hooks::mem_touch_list`): the `struct page`s of its `pfns` (`u32::MAX`:
    /// none) and, when `head` is not 0 and the first page is one, the list head at address
    /// `head` homed on that page's node; each priced as a [`Touch::Access`], the line read
    /// first ([`ListOp`]: the entry of a `Del`, the head of an `Add`) as a load and the
    /// others as stores.
    ///
    /// The rule's most common row (the toucher's own L2) is tested here against the
    /// toucher's stamps held in registers ([`Own`]), which only a touch that fills a cache
    /// changes: such a touch goes through [`Caches::access`] and the stamps are read again.
    ///
    /// The `struct page` lines' states are `frames`' (a machine's `PageMeta`s or the
    /// runtime's own table), reached through [`LineStore`], inlined.
    ///
    /// Out of line, so that a profile names it: inlined, its loop sat in the closure that
    /// reads the kept touches and was reported as `LocalKey::with` (called once per batch,
    /// the call costs nothing beside the touches).
    #[inline(never)]
    pub(crate) fn touch_all<S: LineStore + ?Sized>(
        &mut self,
        frames: &S,
        cpu: usize,
        touches: &[Cell<Touched>],
    ) -> Ps {
        let LineModel { heads, caches } = self;
        let t = caches.toucher(cpu);
        let mut own = Own::of(caches, t);
        let mut sb = StoreBuffer::default();
        for touched in touches.iter().map(Cell::get) {
            match touched {
                Touched::Page { pfn, how } => {
                    let price = page(caches, frames, t, &mut own, pfn, how);
                    match how {
                        Touch::Rmw => sb.rmw(page_key(pfn), price),
                        Touch::Access | Touch::Measured => sb.load(page_key(pfn), price),
                    }
                }
                Touched::List { head, pfns, op } => {
                    // One arm per kind, so that the order of the lines and which of them is
                    // read is decided once per operation, not per line.
                    let [first, second, third] = pfns;
                    let head = if first == u32::MAX { 0 } else { head };
                    match op {
                        ListOp::Add => {
                            if head != 0 {
                                let price = head_line(caches, heads, t, &mut own, head, first);
                                sb.load(head_key(head), price);
                            }
                            list_store(caches, frames, t, &mut own, &mut sb, first);
                        }
                        ListOp::Del => {
                            if first != u32::MAX {
                                let pfn = u64::from(first);
                                let price = page(caches, frames, t, &mut own, pfn, Touch::Access);
                                sb.load(page_key(pfn), price);
                            }
                        }
                    }
                    list_store(caches, frames, t, &mut own, &mut sb, second);
                    list_store(caches, frames, t, &mut own, &mut sb, third);
                    if op == ListOp::Del && head != 0 {
                        let price = head_line(caches, heads, t, &mut own, head, first);
                        sb.store(head_key(head), price);
                    }
                }
                Touched::Line { addr, home, store } => {
                    caches.field_lines += 1;
                    let price = head_line(caches, heads, t, &mut own, addr, home);
                    sb.load_or_store(head_key(addr), price, store);
                }
            }
        }
        own.settle(caches);
        let (ps, hidden) = sb.finish();
        // `access` counted every price as charged; what the stores' overlap hid was not.
        caches.charged = caches.charged.saturating_sub(hidden);
        caches.overlapped = caches.overlapped.saturating_add(hidden);
        ps
    }

    /// `n` lines this CPU filled into its caches that the model does not track (a cleared or
    /// copied page's data): they age every tracked line of the core and the socket.
    #[inline]
    fn fill(&mut self, cpu: usize, n: u64) {
        self.caches.fill(cpu, n);
    }
}

/// The list head at `head`, homed on frame `home`'s node, touched by `t` (an
/// [`Touch::Access`]); its price.
#[inline(always)]
fn head_line(
    caches: &mut Caches,
    heads: &mut HeadTable,
    t: Toucher,
    own: &mut Own,
    head: usize,
    home: u32,
) -> Ps {
    let line = heads.get_or_insert(head);
    if own.hit(line, Touch::Access) {
        *line = own.fresh();
        return 0;
    }
    let (price, new) = caches.access(t, *line, u64::from(home), false, Touch::Access);
    *line = new;
    own.refresh(caches, t);
    price
}

/// A line a list operation writes: frame `p`'s `struct page` (none for `u32::MAX`), a store.
#[inline(always)]
fn list_store<S: LineStore + ?Sized>(
    caches: &mut Caches,
    frames: &S,
    t: Toucher,
    own: &mut Own,
    sb: &mut StoreBuffer,
    p: u32,
) {
    if p != u32::MAX {
        let pfn = u64::from(p);
        let price = page(caches, frames, t, own, pfn, Touch::Access);
        sb.store(page_key(pfn), price);
    }
}

/// Frame `pfn`'s `struct page` line, in `frames`, touched by `t`; its price (0 for a frame
/// beyond the memmap: not a line).
#[inline(always)]
fn page<S: LineStore + ?Sized>(
    caches: &mut Caches,
    frames: &S,
    t: Toucher,
    own: &mut Own,
    pfn: u64,
    how: Touch,
) -> Ps {
    let Some(line) = frames.line(pfn) else {
        return 0;
    };
    let state = line.load();
    if own.hit(&state, how) {
        // The tag is this CPU's already: only the stamps move.
        line.store_stamps(own.core_stamp, own.socket_stamp);
        return 0;
    }
    let (price, new) = caches.access(t, state, pfn, true, how);
    line.store(new);
    own.refresh(caches, t);
    price
}

/// The toucher's side of the own-L2 row of the rule, for the touches of one
/// [`Memory::touch_all`]: its CPU's tag, its core's and socket's stamps as of the last fill,
/// the capacities, and the row's hits counted here and added to the statistics at the end.
#[derive(Debug, Clone, Copy)]
struct Own {
    tag: u32,
    core_stamp: u32,
    socket_stamp: u32,
    l2_units: u64,
    llc_units: u64,
    accesses: u64,
    measured: u64,
}

impl Own {
    #[inline(always)]
    fn of(c: &Caches, t: Toucher) -> Own {
        Own {
            tag: t.tag,
            core_stamp: stamp_of(c.core_fills[t.core]),
            socket_stamp: stamp_of(c.socket_fills[t.socket]),
            l2_units: c.l2_units,
            llc_units: c.llc_units,
            accesses: 0,
            measured: 0,
        }
    }

    /// Reads the stamps again after a touch that may have filled the caches.
    #[inline(always)]
    fn refresh(&mut self, c: &Caches, t: Toucher) {
        self.core_stamp = stamp_of(c.core_fills[t.core]);
        self.socket_stamp = stamp_of(c.socket_fills[t.socket]);
    }

    /// Whether the line is this CPU's, of this run, and still in its L2 ([`Caches::access`]'s
    /// first test, on the same stamps): then nothing is filled or charged, and the caller
    /// gives the line [`Own::fresh`] stamps.
    #[inline(always)]
    fn hit(&mut self, line: &LineState, how: Touch) -> bool {
        let hit = line[0] == self.tag
            && u64::from(self.socket_stamp.wrapping_sub(line[2])) < self.llc_units
            && u64::from(self.core_stamp.wrapping_sub(line[1])) < self.l2_units;
        if hit {
            match how {
                Touch::Measured => self.measured += 1,
                Touch::Access | Touch::Rmw => self.accesses += 1,
            }
        }
        hit
    }

    /// The state of a line this CPU touches now, hitting its own L2.
    #[inline(always)]
    fn fresh(&self) -> LineState {
        [self.tag, self.core_stamp, self.socket_stamp]
    }

    /// Adds the hits counted since the last [`Own::of`] to the statistics.
    #[inline(always)]
    fn settle(self, c: &mut Caches) {
        c.counts[Found::OwnCache as usize] += self.accesses;
        c.measured += self.measured;
    }
}

impl Caches {
    #[inline(always)]
    fn toucher(&self, cpu: usize) -> Toucher {
        Toucher {
            cpu,
            tag: tag_of(self.gen_bits, cpu),
            core: self.cpu_core[cpu] as usize,
            socket: self.cpu_socket[cpu] as usize,
        }
    }

    /// The home node of frame `pfn` (the engine's `page_to_nid`).
    fn node_of_pfn(&self, pfn: u64) -> usize {
        (pfn / self.frames_per_node).min(self.nr_nodes - 1) as usize
    }

    /// The touch by `t` of a line in `state`, whose memory is on the node of frame
    /// `home_pfn` (the node is looked up, a division, only when the line comes from DRAM);
    /// `page`: the line is frame `home_pfn`'s own `struct page` (which the streamer can fetch
    /// ahead).
    #[inline(always)]
    fn access(
        &mut self,
        t: Toucher,
        state: LineState,
        home_pfn: u64,
        page: bool,
        how: Touch,
    ) -> (Ps, LineState) {
        let Toucher {
            cpu,
            tag,
            core,
            socket,
        } = t;
        let (core_stamp, socket_stamp) = (
            stamp_of(self.core_fills[core]),
            stamp_of(self.socket_fills[socket]),
        );
        // The common case first: this CPU touched the line last and it is still in its L2
        // (the second row of the module's table, exactly as the general path below finds
        // it: the same CPU is the same core and socket). No cache fills, no price.
        if state[0] == tag
            && u64::from(socket_stamp.wrapping_sub(state[2])) < self.llc_units
            && u64::from(core_stamp.wrapping_sub(state[1])) < self.l2_units
        {
            match how {
                Touch::Measured => self.measured += 1,
                Touch::Access | Touch::Rmw => self.counts[Found::OwnCache as usize] += 1,
            }
            return (0, [state[0], core_stamp, socket_stamp]);
        }
        let (found, in_l2_here, in_llc_here) = if state[0] & !TAG_CPU_MASK != self.gen_bits {
            (Found::First, false, false)
        } else {
            let w = (state[0] & TAG_CPU_MASK) as usize - 1;
            let (wsock, wcore) = (self.cpu_socket[w] as usize, self.cpu_core[w] as usize);
            let age = |fills: u64, stamp: u32| stamp_of(fills).wrapping_sub(stamp) as u64;
            let in_llc = age(self.socket_fills[wsock], state[2]) < self.llc_units;
            let in_l2 = in_llc && age(self.core_fills[wcore], state[1]) < self.l2_units;
            if in_l2 && wcore == core {
                (Found::OwnCache, true, true)
            } else if in_l2 && wsock == socket {
                (Found::OtherCore, false, true)
            } else if in_l2 || in_llc && wsock != socket {
                (Found::OtherSocket, false, false)
            } else if in_llc {
                (Found::SocketLlc, false, true)
            } else {
                let home = self.node_of_pfn(home_pfn);
                let remote = self.node_socket.get(home).copied().unwrap_or(0) as usize != socket;
                let streamed = page
                    && self.stream_next[cpu] == home_pfn
                    && !home_pfn.is_multiple_of(LINES_PER_4K);
                if streamed {
                    (Found::DramStream, false, false)
                } else if remote {
                    (Found::DramRemote, false, false)
                } else {
                    (Found::DramLocal, false, false)
                }
            }
        };
        if page
            && matches!(
                found,
                Found::DramLocal | Found::DramRemote | Found::DramStream
            )
        {
            self.stream_next[cpu] = home_pfn + 1;
        }
        if !in_l2_here {
            self.core_fills[core] += 1;
        }
        if !in_llc_here {
            self.socket_fills[socket] += 1;
        }
        let new = [
            tag,
            stamp_of(self.core_fills[core]),
            stamp_of(self.socket_fills[socket]),
        ];
        if how == Touch::Measured {
            self.measured += 1;
            return (0, new);
        }
        let price = match found {
            Found::First | Found::OwnCache | Found::SocketLlc => 0,
            Found::OtherCore | Found::OtherSocket => {
                let w = (state[0] & TAG_CPU_MASK) as usize - 1;
                self.transfer[w * self.nr_cpus + cpu]
            }
            Found::DramLocal => self.price.dram_local,
            Found::DramRemote => self.price.dram_remote,
            Found::DramStream => self.price.dram_stream,
        };
        self.counts[found as usize] += 1;
        self.charged = self.charged.saturating_add(price);
        (price, new)
    }

    /// See [`Memory::fill`].
    #[inline]
    fn fill(&mut self, cpu: usize, n: u64) {
        let (s, c) = (self.cpu_socket[cpu] as usize, self.cpu_core[cpu] as usize);
        self.core_fills[c] = self.core_fills[c].saturating_add(n);
        self.socket_fills[s] = self.socket_fills[s].saturating_add(n);
    }

    fn stat(&self) -> MemoryStat {
        let c = &self.counts;
        MemoryStat {
            // Every priced touch lands in exactly one bucket.
            accesses: c.iter().sum(),
            measured: self.measured,
            first: c[Found::First as usize],
            own_cache: c[Found::OwnCache as usize],
            other_core: c[Found::OtherCore as usize],
            socket_llc: c[Found::SocketLlc as usize],
            other_socket: c[Found::OtherSocket as usize],
            dram_local: c[Found::DramLocal as usize],
            dram_remote: c[Found::DramRemote as usize],
            dram_stream: c[Found::DramStream as usize],
            field_lines: self.field_lines,
            charged_ns: self.charged / 1000,
            overlapped_ns: self.overlapped / 1000,
        }
    }
}

/// `struct page`s per 4 KiB of the memmap: the L2 streamer does not cross a 4 KiB page.
const LINES_PER_4K: u64 = 64;

#[cfg(test)]
#[path = "memory_test.rs"]
mod test;
