//! # Virtual time: the engine as a deterministic model of a many-core machine
//!
//! The seeds' effects are many-core effects — 144 hardware threads freeing into four zone
//! locks, 72 processes hammering one cache line, 32 cores faulting while one munmaps — and this
//! host has two cores whose noise moves wall-clock figures from run to run (docs/two-clocks.md). In
//! virtual mode the engine's *same code* runs as a model of the configured machine: every
//! emulated CPU has a clock, code charges named costs from a [`Profile`] to its CPU's clock,
//! and every synchronisation point (lock, shared-line RMW, wake-up, sleep, thread start and
//! exit) is ordered by virtual time, as on a machine where each emulated CPU is a real core.
//! Results depend on the program, the configuration and the profile only: the same run gives
//! the same times, counters and lock_stat to the nanosecond on any host, loaded or not.
//!
//! This module is the runtime; the engine reaches it through the sync seam
//! (`sync/vhook.rs` → [`hooks`]), and a [`Machine`](crate::Machine) in `time.mode=virtual` runs
//! its workloads in it ([`Machine::run`](crate::Machine::run)); see "How the seam plugs in"
//! below.
//!
//! ## Contexts, CPUs and the one host thread
//! A [`Runtime`] has `nr_cpus` emulated CPUs placed on the profile's sockets, cores and SMT
//! threads ([`Placement`]). [`Runtime::run`]`(cpu, f)` runs `f` as the first *context* (a
//! virtual thread) on `cpu`; contexts start others with [`spawn`] or [`scope`], each bound to
//! one CPU for life. Every context is a stackful coroutine (`corosensei`) on the host thread
//! that called `run`: only one runs at a time, and switching is a user-space stack switch, not
//! a host thread hand-off (those cost ~22 µs on this host; docs/two-clocks.md).
//!
//! A CPU runs one context at a time. A context holds its CPU from the moment it first runs
//! until it blocks in a sleeping wait (mutex, rwsem, condition variable, join, sleep) or exits;
//! a spinning waiter keeps it. Contexts sharing a CPU take turns at those points (run-to-block,
//! no preemption).
//!
//! ## The scheduler's rule, and why it is right
//! Every context has a clock (picoseconds inside, nanoseconds outside). Between two
//! synchronisation points a context only charges costs to its own clock and touches its own
//! state, so it may run ahead of the others. At a synchronisation point it may go on only while
//! its key `(clock, cpu, context id)` is the smallest among the *ready* contexts — those parked
//! at a synchronisation point and those woken for a known time (a hand-over, the end of a
//! sleep, a wake-up). Otherwise it parks and the scheduler resumes the smallest one.
//!
//! This is conservative discrete-event simulation: a context that is not ready waits for an
//! event some other context will cause, at that context's clock or later; so when the running
//! context has the smallest ready key, nothing can still happen before its clock, and the
//! state it sees (is the lock free, when was the line last written) is the state at that
//! instant. Events are processed in time order, ties broken by CPU then context id — a function
//! of the program alone. The fast path is one compare against the ready heap's top: a context
//! below every other ready clock passes its synchronisation points without a switch.
//!
//! ## Resources and their formulas
//! Notation: `T(a→b)` is the profile's cache-line transfer from CPU `a` to CPU `b`: 0 on the
//! same CPU, `transfer.smt_sibling`, `transfer.same_socket` or `transfer.other_socket` by the
//! CPUs' [`Distance`] (and 0 when nobody touched the line before). `W` is `wakeup`, `A` is
//! `atomic_rmw`; a lock class has an uncontended acquire cost `u` and `L` data lines.
//!
//! - **Lock word.** Every lock's word is a cache line. Each acquisition, release and failed
//!   try-lock is an RMW on it that starts at `max(clock, end of the word's previous RMW)` and
//!   remembers the CPU that did it (`last`).
//! - **Acquire** (spinlock, mutex, rwsem; FIFO, qspinlock/MCS order): if the lock can be granted
//!   (free for the mode and nobody queued) the caller pays `u + T(last→me)·(1 + L)` for an
//!   exclusive acquisition, `u + T(last→me)` for a shared one (readers do not pull the data
//!   the previous writer dirtied — a simplification), from the word's free time.
//!   Otherwise it queues. A **release** at `t` costs `T(last→me)` (0 when the releaser still
//!   owns the word, as an exclusive holder does) and hands the lock to the head of the queue at
//!   `r` = the end of that RMW:
//!   - a **spinning** waiter (class [`WaitKind::Spin`]) has spun, CPU busy, until `r`, then
//!     acquires: it holds the lock from `r + H`, with the hand-over
//!     `H = u + T(releaser→waiter)·(1 + L)`;
//!   - a **sleeping** waiter ([`WaitKind::Sleep`]: mutex, rwsem) was off its CPU (idle) and
//!     runs at `r + W` (later if its CPU is taken), then acquires the same way: `W + H`.
//!
//!   So N CPUs of one socket, each taking one spinlock K times with hold `h` and nothing else,
//!   end at `u + N·K·h + (N·K − 1)·H` with `H = u + T_socket·(1 + L)`: N·K·(h + H) less the
//!   first acquisition's missing transfer. On disjoint locks they end at `K·(u + h)`.
//! - **rwsem** (`mmap_lock`): readers share; a writer needs it free; a queued waiter blocks
//!   every newcomer (so a waiting writer blocks new readers); a release or
//!   [`hooks::lock_downgrade`] grants the head of the queue: one writer, or every reader up to
//!   the first writer (v4.x `__rwsem_mark_wake`). Readers granted together serialise on the
//!   count's line as they acquire.
//! - **try-lock**: succeeds, as an uncontended acquisition, iff the lock could be granted at the
//!   caller's clock; a failure costs an RMW on the word (`u + T(last→me)`).
//! - **Shared line** ([`hooks::line_rmw`], e.g. the huge zero page's refcount): an RMW starts at
//!   `max(clock, end of the line's previous RMW)` and costs `A + T(last→me)`; its requester's
//!   CPU is busy all along (a stalled atomic is CPU time, as `perf` would show). N CPUs
//!   hammering one line with K RMWs each, each RMW long after its CPU's previous one: the
//!   line's last RMW ends at `A + (N·K − 1)·(A + T)`. The CPU that loses the line keeps its copy until half-way
//!   through the transfer away from it (an assumption, `HOLDER_KEEPS_LINE`): an RMW it
//!   issues before then costs `A` alone and queues behind nothing (back-to-back RMWs of one
//!   CPU, as v4.8's `release_pages` dropping huge-zero references).
//! - **Condition variable** ([`hooks::cv_wait`]/[`hooks::cv_notify`]): a waiter queues, releases
//!   the mutex (handing it over if someone waits) and leaves its CPU; a notify wakes the first
//!   waiter (or all) at the notifier's clock `+ W`, FIFO; each then re-acquires the mutex.
//! - **Sleep** ([`sleep`]): off the CPU, ready again exactly `ns` later (no wake-up latency).
//! - **Join**: a joiner that had to wait runs at the child's end `+ W`.
//! - **Spawn**: the new context is ready at its parent's clock, free of charge.
//! - **SMT**: a CPU is *busy* while it has an occupant (a context that has started running on
//!   it and not blocked or exited: running, parked at a synchronisation point, or spinning).
//!   Work charged ([`charge`], [`work`]) while another hardware thread of the same core is busy
//!   costs `smt.sibling_factor` times as much. The sibling's state is read when the charge is
//!   applied (charges are counted and applied at the context's next synchronisation point or
//!   clock read; nothing else runs in between, so the sibling is as it was when the charge was
//!   made), in the scheduler's order — deterministic, and exact wherever the charges are short
//!   next to the stretches between synchronisation points. Lock, line and spin times are
//!   memory-bound and not scaled.
//!
//! ## Lines the engine touches, and jitter
//! `memory.rs` gives every `struct page` and every list head the engine touches on a modelled
//! path (`PfnList`'s adds and deletes, `release_pages`' reference drop, `__free_one_page`'s
//! buddy check; the zap's and the fault's rmap updates as touches whose cost a measured
//! constant holds) a last-touching CPU and two stamps, and prices a touch by where the line
//! is: the toucher's own caches (nothing), another core's L2 (`T(w→me)`), another socket's
//! LLC (`transfer.other_socket`), or DRAM (`memory.dram_local`/`dram_remote` by the line's
//! node, `dram_stream` for the next line of a stream). A touch is not a synchronisation
//! point; its price is busy time, unscaled, applied (with the context's other touches, in
//! order) before the context's next synchronisation point or clock read. `jitter.rs` multiplies the work a
//! context charged between two synchronisation points by `1 + σ·z` (`[jitter]`, seeded per
//! context from `time.seed`), so that workers queue on a lock as they would instead of
//! falling into step. Both are in [`Report::memory`] and the lock_stat columns.
//!
//! ## Accounting
//! Per CPU: busy (work, acquisitions, line stalls), spin (waiting for a spinlock) and idle (the
//! rest, up to the end of the last run). Per context: busy and spin; their sum is its "thread
//! CPU time" ([`hooks::thread_cpu_ns`]). Per lock class and mode: lock_stat's columns
//! (acquisitions, contentions, bounces, wait and hold min/max/total) in virtual time. Per line
//! class: RMWs, bounces and the time spent on the line, from which the share of CPU time on the
//! huge zero page's line is computed ([`Report::line_share`]). Everything is in [`Report`],
//! `Serialize`, labelled `modelled (profile NAME)`.
//!
//! ## Where the model differs from the hardware
//! - Costs are constants, measured with one thread doing the work; what changes when the
//!   work is spread over CPUs is priced by the line model (`memory.rs`, below: `struct
//!   page`s and list heads with a last toucher and an age, against the profile's `[memory]`)
//!   for the lines the engine names, and nowhere else: no memory-bandwidth contention, and
//!   only a next-line streamer for prefetching. Per-batch work varies by the profile's
//!   `[jitter]`, seeded (`jitter.rs`).
//! - Locks are fair FIFO and hand over directly; a kernel mutex or rwsem also lets a spinning
//!   newcomer steal the lock and spins optimistically while the owner runs — here sleepers
//!   always sleep. Spinning waiters generate no coherence traffic of their own.
//! - Only exclusive hand-overs carry the protected data lines; a reader pulls only the count.
//! - No preemption, time slices, interrupts or migration: a context runs on its CPU until it
//!   blocks, and the scheduler's CPU choice is whatever the caller bound.
//! - SMT slowdown is one factor, read at each charge (see above).
//! - A loop that polls without charging any cost makes no virtual progress: engine retry
//!   loops must charge something (they do, through the costs of what they retry).
//! - Shared lines serve RMWs in time order, but for the holder's RMWs in its still-valid
//!   copy (above), which the hand-off under way does not wait for (the invalidation would
//!   wait for a locked instruction in progress, at most `A`). A read-then-`cmpxchg` loop written with
//!   `SharedLine::fetch_update` (the huge zero page's `atomic_inc_not_zero`) is one RMW: on the
//!   hardware a failed `cmpxchg` leaves the line in the failing core's cache and the retry finds
//!   it there. A loop of separate `compare_exchange` calls would instead queue every retry
//!   behind every RMW already waiting, failing many times per success under contention.
//! - User-space accesses cost nothing: only the kernel's work is charged (a fault, not the load
//!   that took it). A workload that only reads mapped memory makes no virtual progress.
//! - Work between two synchronisation points is charged at its start's SMT state and seen by
//!   other contexts as done at once: a plain atomic written by one context (a workload's phase
//!   flag, not a modelled line) may be seen by another a little early in virtual time, by at
//!   most the writer's charges since its last synchronisation point.
//!
//! ## Profile format
//! TOML (the `toml` crate), one file per machine; the built-in ones are `profiles/*.toml`
//! ([`Profile::builtin`]: `haswell-ex-4s`, `haswell-ep-2s`, `e5-2680-32c`; `hpe-64s`, the validation set's HPE machine; `broadwell-ep-2s`, the
//! will-it-scale page_fault1 curve's machine), others load from a
//! path ([`Profile::resolve`] takes either). Every figure is exactly one of `ns`, `cycles` (at
//! `topology.ghz`) or `bytes_per_ns` (costs that move bytes: `clear_page`, `copy_page`), and a
//! `source`: a publication, a measurement with its command, or `assumption: <why>` where neither exists. Unknown
//! keys, a missing [`Cost`] or engine lock class ([`ENGINE_LOCK_CLASSES`]), an empty source,
//! or a non-positive topology are errors that name the field.
//! ```toml
//! name = "haswell-ep-2s"
//! description = "Seed 002's Haswell-EP: 2 sockets x 18 cores x 2 threads (72 CPUs)"
//! [topology]
//! sockets = 2
//! nodes = 2
//! cores_per_socket = 18
//! threads_per_core = 2
//! ghz = 2.3
//! source = "seed 002 ..."
//! [transfer.same_socket]            # also smt_sibling, other_socket
//! ns = 44
//! source = "core-to-core-latency (nviennot) README ..."
//! [smt]
//! sibling_factor = 1.6
//! source = "assumption: ..."
//! [wakeup]
//! ns = 3000
//! source = "assumption: ..."
//! [atomic_rmw]
//! cycles = 20
//! source = "assumption: ..."
//! [locks."zone.lock"]               # one per lock class
//! acquire_cycles = 20
//! data_lines = 4
//! source = "assumption: ..."
//! [costs.clear_page]                # one per Cost
//! bytes_per_ns = 10
//! source = "assumption: ..."
//! ```
//!
//! ## How the seam plugs in
//! The sync seam (`crate::sync`) calls [`hooks`] around every host lock, condition variable,
//! shared atomic, sleep and clock read; outside a run each hook is one thread-local load and a
//! branch (`charge` included). A build with the `no_vtime_seam` feature has no hooks at all
//! (and refuses virtual time): the reference the seam's wall-clock cost is measured against. The runtime finds its run through a thread-local *current runtime*, set only while
//! [`Runtime::run`] executes on that host thread — the analogue of the kernel's `current`
//! (which task, hence which machine, the code runs for), never a policy: two machines on two
//! host threads each have their own. Thread start, join and `scope` in a run are this module's
//! [`spawn_named`]/[`scope`]/[`join_id`], which `sync::thread` calls. The seam's
//! `LockClass`/`LineClass`/`WaitKind`/`Mode`/`Acquired`/`Cost` are these types, re-exported:
//! a class static is one object for both, and [`ENGINE_LOCK_CLASSES`] names every engine class
//! a profile must price (`sync::class::ALL_LOCK_CLASSES`, checked equal by a test).
//!
//! A machine in virtual time makes one [`Runtime`] per [`Machine::run`](crate::Machine::run)
//! (its CPUs and nodes on the profile's placement), runs the workload as the first context, ends
//! its workqueues' worker contexts when the workload returns, and keeps the run's [`Report`].
//! [`snapshot`] reads the report mid-run, so that a workload brackets a phase (bigfree's free).
//! In a run the TLB gates of `mm` are not taken: an access (walk and copy) passes no
//! synchronisation point, so it is atomic against every flush ([`hooks::atomic`] checks it in
//! debug builds), and a flush charges `tlb_flush_local` plus `tlb_flush_remote_per_cpu` per
//! other CPU of the mm's cpumask.
//!
//! ## Where the engine charges
//! Each [`Cost`] is charged where the kernel does that work, summed per batch where the engine
//! loops under a lock and charged before the lock's release (so that it counts as hold time):
//!
//! | cost | charged in | per |
//! |---|---|---|
//! | `zap_pte`, `gather_page` | `zap_pte_range`, `zap_huge_pmd` | PTE (or PMD) cleared, page gathered; per PTL hold |
//! | `free_unref_page` | `free_unref_page_list` | block freed to the pcp lists |
//! | `free_pcppages_bulk_page`, `free_one_merge` | `free_pcppages_bulk` (and the direct buddy free) | block moved, merge step; per `zone.lock` hold |
//! | `rmqueue_pcp`, `rmqueue_bulk_page` | `rmqueue_pcplist`, `rmqueue_bulk` | block taken, block moved under `zone.lock` |
//! | `lru_del`, `lru_add` | `release_pages`, the LRU-add batch | page; per `lru_lock` hold |
//! | `clear_page`, `copy_page` | `__GFP_ZERO` allocations and table pages (also deposits), COW, hugetlb | 4 KiB |
//! | `fault_entry`, `fault_exit` | `handle_mm_fault` (a user fault; not GUP's populate) | fault |
//! | `pt_walk_level` | fault (4 levels), zap (per PUD and PTE table) | level |
//! | `pt_alloc`, `pt_free`, `set_pte` | table allocation, `free_pgtables`/deposits, every entry store | table, entry |
//! | `tlb_flush_local`, `tlb_flush_remote_per_cpu` | `flush_tlb_mm_range` | flush, remote CPU |
//! | `workqueue_wake` | `queue_work` finding an idle worker | wake-up |
//! | `syscall` | `mmap`, `munmap`, `mprotect`, `madvise`, `mlock`/`munlock` | call |
//! | `vma_modify` | the VMA tree's write-guard mutators | VMA stored, split or removed |
//!
//! ## What it costs the host
//! Measured with `benches/vtime.rs`: instructions by callgrind (exact, and the same on any
//! x86-64 host); wall time by `cargo bench -p usermm --bench vtime`, which depends on the host
//! and its load, so the column is an order of magnitude (run the bench to see your host's):
//!
//! | operation | instructions | wall |
//! |---|---|---|
//! | a hook outside a run (flag test; with the bench loop; `charge` too) | ~10 | ~2–4 ns |
//! | a synchronisation point on the fast path (no switch; `sync`) | 93 | ~4–6 ns |
//! | `charge` in a run (a count and a bit of the pending mask; the bench's loop folds to nothing) | ~100 | — |
//! | uncontended lock + unlock (two synchronisation points; `lock`) | 538 | ~38–41 ns |
//! | a switch (park one context, resume another in place; one heap sift; with its `work` and synchronisation point; `switch`) | 355 | ~42–60 ns |
//! | a contended acquisition among 8 contexts (a hand-over: two switches; `contended`) | 1270 | ~116–121 ns |
//! | a line touch of the line model (`memory.rs`, kept and applied at the next synchronisation point; callgrind of `bigfree 256M --max-active 4 --time virtual`: about 520 M instructions for 8.8 M touches) | ~60 (~20 for the common own-L2 hit, tested against stamps held for the batch) | — |
//! | for comparison: a host mutex+condvar hand-off | — | ~10 µs |
//!
//! What whole runs cost (process CPU time, `/usr/bin/time -f %U+%S`, medians of 5 interleaved
//! runs on this loaded host; `--cpus 12 --nodes 4` on both clocks, virtual with `--profile
//! haswell-ex-4s`; `usermm bench` rows `bigfree-virtual` and `usemem-ab-virtual` measure the
//! same): `bigfree 8G --max-active 8 --seed-only` takes 2.9× the wall-clock run's CPU in
//! virtual time (the line model's ~34 touches per page are about half of it), `usemem -n 8
//! --readonly -j 0x200000 128G --ab` 4.1× (about 12 synchronisation points per fault, 8 of
//! them a switch).
//!
//! Whole runs in instructions (callgrind, `valgrind --tool=callgrind usermm ...`; exact, so
//! they compare builds on a loaded host), with the release build of this tree:
//!
//! | run | instructions |
//! |---|---|
//! | A: `bigfree 256M --max-active 4 --time virtual` | 2.07 × 10⁹ (2.24 × 10⁹ at f503bef) |
//! | B: `usemem -n 8 --readonly -j 0x200000 8G --ab -q --time virtual --profile haswell-ex-4s --cpus 8 --nodes 2 --thp always --backing sparse --mem 2G` (the bench row's machine) | 0.77 × 10⁹ (0.80 × 10⁹ at f503bef) |
//! | B on the wall clock (`--time wall`, no profile; the engine's own work) | 0.18 × 10⁹ |
//! | C: `bigfree 1G --max-active 8 --seed-only --cpus 12 --nodes 4 --threshold 32768 --time virtual --profile haswell-ex-4s` (the `bigfree-virtual` bench row, smaller) | 3.97 × 10⁹ (4.33 × 10⁹ at f503bef) |
//! | C on the wall clock (`--time wall`, no profile) | 1.01 × 10⁹: virtual/wall 3.92 (4.27 at f503bef) |
//! | D: `usemem -n 8 --readonly -j 0x200000 32G --ab --time virtual --profile haswell-ex-4s --cpus 8 --nodes 2 --thp always` (the `usemem-ab-virtual` row, smaller) | 3.02 × 10⁹ (3.14 × 10⁹ at f503bef) |
//! | D on the wall clock | 0.71 × 10⁹: virtual/wall 4.25 (4.43 at f503bef) |
//!
//! Rows A–D with the release build of branch h49-pop (2026-11-29), after the list operation's
//! arms of `Memory::touch_all` and the head table without its memo of the last head (`lines.rs`);
//! a populated page of `bigfree 1G --time virtual --max-active 1` went from 5395 to 5062
//! instructions (the populate's inclusive count over its 1 048 576 faults). Earlier rounds, with
//! the release build of 9c740fd (`CARGO_PROFILE_RELEASE_DEBUG=line-tables-only`): A 2.05 × 10⁹
//! (2.11 × 10⁹ at 659c6da, before the flat lock table; the line states' move into `PageMeta`,
//! `lines.rs`, changed no count but cut LL misses 70 %: cachegrind, an 8 MiB LL), B 0.75 × 10⁹
//! (0.77), C 3.94 × 10⁹ (4.07), virtual/wall 3.88 (4.00), D 2.94 × 10⁹ (3.03), virtual/wall
//! 4.30 (4.41); the tree grew between 9c740fd and f503bef.
//! What 9c740fd cut (issue 33), per acquisition and release in C: the lock's state found by
//! the index its object carries instead of a hash probe (`sched/table.rs`; a `PtLock`, which
//! has no room for one, still hashes), the common acquisition and the release inlined into
//! their hooks (each call layer cost its register saves), and a `memcpy` of the store buffer
//! per batch of touches (`store_buffer.rs`): 3 % of C's and D's instructions, the
//! virtual/wall ratio down by 0.1. What is left of a lock hook is spread thin: the run's
//! `RefCell` and `Rc`, bounds checks, lock_stat's columns, the jitter's draw (about 58
//! instructions) and the register saves of two out-of-line calls. Two tries that cost more
//! than they spared (h49, 2026-11-29, `bigfree 1G --time virtual --max-active 1`): the test for
//! nothing pending inlined into every synchronisation point, before the call of
//! `apply_pending` (+0.1 to +0.4 % of the run), and the store buffer kept in the line model
//! between batches instead of written zero on the stack per batch (+1.3 %: its sums then went
//! through a pointer).
//!
//! B makes 65 536 faults (two machines), each about 12 synchronisation points and 7.5 switches
//! in the vanilla machine, 10 and 6.3 in the patched one (`sched_per_fault` in its `--json`):
//! every switch is to a context
//! with a smaller clock, none to the context that yielded (the scheduler's order is the
//! model's, so the count is the model's too). Of B's virtual-time part (its instructions less
//! the wall run's) the line model's touches are about a fifth, applying the pending charges
//! (their jitter, the SMT test) a fifth, the switches a sixth, and the hooks of the locks and
//! lines with their synchronisation points a third (measured before 9c740fd, when a hash
//! lookup found each lock; lock_stat's columns).
//!
//! Where a long virtual bigfree's host time goes (`perf record` of `bigfree 4G --time virtual
//! --max-active 8 --profile haswell-ex-4s`, `perf report --no-children`; the 32 GiB run has
//! the same top entries): the line model's touches (`memory.rs`, `Memory::touch_all`) about a
//! fifth, applying the pending charges (`apply_pending`: most of it the jitter's arithmetic)
//! a sixth, the lock hooks' table (`lock_grant_known`, `lock_release`; since 9c740fd an index,
//! not a hash, and inlined into `hooks::virt::lock_acquire`/`lock_release`) a tenth, and the
//! engine's own allocator and free paths most of the rest. `touch_all` is kept out of line so
//! that it is named: inlined, it was reported as `std::thread::local::LocalKey::with`, the
//! closure it sat in. The charges reach their thread-local through one access each, inlined
//! (`pending.rs`).
//!
//! On the wall clock the seam itself costs the engine's fault paths 7–17 %
//! of thread CPU time against a build without it (`--features usermm/no_vtime_seam`, `usermm
//! bench --only populate-4k` and `zero-read-4k`, interleaved): about 15 flag tests per fault
//! and the inlining they change, not any work of the runtime.
//!
//! ## unsafe
//! Only `coro.rs`: the coroutine constructor that lets bodies borrow (like `std::thread::scope`)
//! and the suspend through a stored yielder pointer; each block has its `// SAFETY:`. Every
//! other file of this module denies `unsafe_code`.

#![deny(unsafe_code)]

mod class;
mod coro;
pub mod hooks;
mod jitter;
pub(crate) mod lines;
mod memory;
mod memory_stat;
mod pending;
mod profile;
mod report;
mod runtime;
mod sched;
mod store_buffer;

pub use class::{Acquired, LineClass, LockClass, Mode, Slot, WaitKind};
pub use hooks::charge;
pub(crate) use memory::{LineModel, Memmap, Touched};
pub use memory::{ListOp, Touch};
pub use memory_stat::MemoryStat;
pub use profile::{
    builtin_era, builtin_era_names, check_era, compact_number, evaluate, parse_era, Cost, Distance,
    Era, EraChoice, EraFactor, EraFactors, EraSpec, Figure, FormulaRow, Input, InputKind,
    LockFigure, MemorySpec, Placement, Profile, ProfileError, ProfileSpec, Quantity, Smt, Topology,
    Transfers, ENGINE_LOCK_CLASSES, ERA_FACTORS, MAX_FACTOR, MIN_FACTOR, NR_ERA_FACTORS, PLAUSIBLE,
    TOPOLOGY_GHZ,
};
pub use report::{ContextTime, CpuTime, CpuUse, LineStat, LockStat, Report, SchedStats};
pub use runtime::{
    join_id, scope, spawn, spawn_named, JoinHandle, Runtime, Scope, ScopedJoinHandle,
};

/// Is a virtual run executing on this host thread?
#[inline]
pub fn in_run() -> bool {
    runtime::in_run()
}

/// The running context's virtual clock, in ns.
///
/// # Panics
/// Outside a virtual run.
pub fn now() -> u64 {
    hooks::now_ns().unwrap_or_else(|| panic!("vtime::now called outside a virtual run"))
}

/// The emulated CPU the running context is bound to.
///
/// # Panics
/// Outside a virtual run.
pub fn current_cpu() -> usize {
    runtime::current_or_panic("current_cpu")
        .with_running(|st, me| st.ctxs[me as usize].cpu as usize)
        .expect("vtime::current_cpu called outside a context")
}

/// What the current run modelled so far, as of the running context's clock (idle time
/// counted up to it); `None` outside a run. Two snapshots bracket a phase of a workload:
/// their differences are the phase's per-CPU busy, spin and idle time.
pub fn snapshot() -> Option<Report> {
    runtime::with_current(|rt| {
        rt.with_running(|st, me| {
            let now = st.ctxs[me as usize].now;
            Report::from_state_at(st, now)
        })
    })
}

/// Sleeps `ns` of virtual time, off the CPU.
///
/// # Panics
/// Outside a virtual run.
pub fn sleep(ns: u64) {
    assert!(
        hooks::sleep_ns(ns),
        "vtime::sleep called outside a virtual run"
    );
}

/// Charges `ns` of plain work to the running context's CPU (SMT-scaled like every [`Cost`]).
/// A no-op outside a run.
pub fn work(ns: u64) {
    runtime::with_current(|rt| rt.with_running(|st, me| st.work(me, ns.saturating_mul(1000))));
}

/// A bare synchronisation point: waits for the running context's turn in virtual-time order
/// (the analogue of `cond_resched`; the engine needs none, tests and benchmarks do).
pub fn sync_point() {
    if let Some(rt) = runtime::current() {
        rt.sync(|_, _| ());
    }
}
