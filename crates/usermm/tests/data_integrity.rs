//! Data integrity under concurrency: threads own windows of address space — three in one mm,
//! three each in an mm of their own that they exit and replace while the others run — and
//! drive random `mmap`/`munmap`/`mprotect`/`madvise`/`mlock`/`mremap`/`fork` on them, with
//! writes of known patterns and reads checked against a per-page model, on a machine too small
//! for all of them (out-of-memory faults happen), with parallel free, munmap downgrade and THP
//! on; once with the mmap lock alone and once with per-VMA locks (`vma.per_vma_lock`).
//!
//! The model of each page says what every access must give:
//! - the data: zero (never written, `MADV_DONTNEED`ed if private, replaced by a new mapping,
//!   punched out of its shared object), one tagged word, or a full page of words derived from
//!   a tag; after a call that may have dropped it without saying so (`MADV_FREE`, a `madvise`
//!   that failed part-way) "that data or zero", settled by the next read. A private page holds
//!   its own; a shared page names its shmem object and index, whose contents every mapping of
//!   the object sees (the model's object is shared by the sides of a fork as the engine's is);
//! - the outcome: `SEGV_MAPERR` where nothing is mapped, `SEGV_ACCERR` where the protection
//!   forbids, `SIGBUS` past a shared object's size (a shared mapping grown by `mremap`),
//!   success or out of memory where it allows — and never out of memory for a page that
//!   already has a frame mapped (written since its last zap or fork), which needs none;
//! - the mapping itself: after every call the window's `/proc/<pid>/maps` lines must match
//!   the model's protection and sharing page for page (a failed call resynchronises the model
//!   from them instead: Linux applies some calls part-way before failing).
//!
//! `mremap` shrinks, grows in place, moves with `MREMAP_MAYMOVE` (out of the window: the test
//! reads the pages where they went, then moves them back with `MREMAP_FIXED`) and moves with
//! `MREMAP_FIXED` within the window (also several VMAs at once, keeping the gaps); the model's
//! pages move with the mapping — data, "maybe zero", the frame — and a grown shared mapping's
//! new pages lie past its object's size. A failed `mremap` must leave the source as it was
//! (Linux moves the page tables back).
//!
//! `fork` gives a thread a second side: a child mm with a copy of the model (private pages
//! copy-on-write, shared pages the same objects). Each operation picks a side; writes on one
//! side are invisible to the other except through a shared object. A side exits while the
//! others run — the child, or (in a thread with mms of its own) the parent first — after its
//! window is read back and its family validated.
//!
//! Every 500 operations a thread runs `validate_mm` on its mm (its fork family, under the
//! others' load); before an exit it reads back every mapped page of its window. At the end
//! `validate_mm` of the shared mm, every mm exited (every fork's both sides), `PhysMem::validate`
//! and the free-frame count equal to the start. A [`Watchdog`] turns a hang into a failure
//! naming the thread and its operation; a failure lists the thread's last 40 calls.
//!
//! Budget: 7 500 operations per thread in each of the two tests, times `USERMM_TEST_SCALE`
//! (about the wall time of the 20 000 of one test before mremap and fork joined); choices
//! from `USERMM_TEST_SEED` (a failure prints the replay line; the interleaving itself does
//! not replay).

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use usermm::config::{BackingMode, BatchSwitch, FreePolicy, ThpMode};
use usermm::mm::mmap::*;
use usermm::stats::VmItem;
use usermm::{CpuId, Errno, Machine, Mm, SegvCode, Task, PAGE_SIZE};
use usermm_testscale::{Rng, Watchdog};

/// Pages per window (8 MiB: four PMDs, so THPs fit).
const WINDOW_PAGES: u64 = 2048;
/// Windows are this far apart (one per thread).
const WINDOW_STRIDE: u64 = 1 << 30;
const WINDOWS_BASE: u64 = 0x1000_0000_0000;
/// 8-byte words per page.
const WORDS: u64 = PAGE_SIZE / 8;
/// Threads sharing one mm, and threads with an mm each.
const SHARED: usize = 3;
const OWN: usize = 3;
const THREADS: usize = SHARED + OWN;
/// Operations per thread at scale 1, in each of the two tests.
const OPS: u64 = 7_500;
/// An own-mm thread exits its mm (both sides of a fork) and starts a new one this often.
const EXIT_EVERY: u64 = 2_500;
const VALIDATE_EVERY: u64 = 500;

/// The word of a page that a `Word` write of `tag` sets.
fn tag_index(tag: u64) -> u64 {
    (tag >> 32) % WORDS
}

/// Word `i` of a page filled from `tag` (odd, so never zero).
fn full_word(tag: u64, i: u64) -> u64 {
    (tag ^ (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1
}

/// What a page holds.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Data {
    Zero,
    /// Word `tag_index(tag)` is the tag, the rest zero.
    Word(u64),
    /// Every word `i` is `full_word(tag, i)`.
    Full(u64),
}

impl Data {
    fn word(self, i: u64) -> u64 {
        match self {
            Data::Zero => 0,
            Data::Word(t) if i == tag_index(t) => t,
            Data::Word(_) => 0,
            Data::Full(t) => full_word(t, i),
        }
    }
}

/// The contents of a page (a private page's own, or one index of a shared object).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Cell {
    data: Data,
    /// The data may have been dropped (reads may also see zero).
    maybe_zero: bool,
}

const ZERO: Cell = Cell {
    data: Data::Zero,
    maybe_zero: false,
};

/// The model of one shmem object (`MAP_SHARED|MAP_ANONYMOUS`): its pages by index, as many
/// as its size. Shared by every model page that maps it, on both sides of a fork.
type Obj = Rc<RefCell<Vec<Cell>>>;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Map {
    prot: u32,
    shared: bool,
}

impl Map {
    /// x86: any access flag makes a page readable (`VM_ACCESS_FLAGS`).
    fn readable(self) -> bool {
        self.prot & (PROT_READ | PROT_WRITE | PROT_EXEC) != 0
    }

    fn writable(self) -> bool {
        self.prot & PROT_WRITE != 0
    }
}

#[derive(Clone)]
struct Page {
    map: Option<Map>,
    /// A private page's contents (unused when `obj` is set).
    own: Cell,
    /// A shared page: its object and index.
    obj: Option<(Obj, u64)>,
    /// An entry maps a frame of its own (written since its last zap or fork): no access to
    /// it may run out of memory — except a write after another thread forked the shared mm
    /// (the page may be copy-on-write now), which `epoch` tells.
    own_frame: bool,
    /// How many forks of the shared mm had begun when the page was last written, if none was
    /// under way then.
    epoch: Option<u64>,
}

impl std::fmt::Debug for Page {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Page");
        d.field("map", &self.map)
            .field("cell", &self.cell())
            .field("own_frame", &self.own_frame);
        if let Some((o, i)) = &self.obj {
            d.field(
                "obj",
                &format_args!("{:p}[{i}] of {}", Rc::as_ptr(o), o.borrow().len()),
            );
        }
        d.finish()
    }
}

impl Page {
    fn unmapped() -> Page {
        Page {
            map: None,
            own: ZERO,
            obj: None,
            own_frame: false,
            epoch: None,
        }
    }

    /// A page of a new mapping: private and zero, or index `i` of the shared object `obj`.
    fn new(map: Map, obj: Option<(Obj, u64)>) -> Page {
        Page {
            map: Some(map),
            obj,
            ..Page::unmapped()
        }
    }

    /// Past its shared object's size: every access the protection allows is a SIGBUS.
    fn beyond(&self) -> bool {
        self.obj
            .as_ref()
            .is_some_and(|(o, i)| *i >= o.borrow().len() as u64)
    }

    fn cell(&self) -> Cell {
        match &self.obj {
            Some((o, i)) => o.borrow().get(*i as usize).copied().unwrap_or(ZERO),
            None => self.own,
        }
    }

    fn set_cell(&mut self, c: Cell) {
        match &self.obj {
            Some((o, i)) => {
                if let Some(x) = o.borrow_mut().get_mut(*i as usize) {
                    *x = c;
                }
            }
            None => self.own = c,
        }
    }

    /// Check word `i` read as `v`, settling a "maybe zero".
    fn check_word(&mut self, i: u64, v: u64) -> Result<(), String> {
        let mut c = self.cell();
        let want = c.data.word(i);
        if v == want {
            if want != 0 && c.maybe_zero {
                c.maybe_zero = false;
                self.set_cell(c);
            }
            return Ok(());
        }
        if c.maybe_zero && v == 0 {
            self.set_cell(ZERO);
            return Ok(());
        }
        Err(format!(
            "word {i}: read {v:#x}, wants {want:#x}, model {self:?}"
        ))
    }
}

/// Operation codes, for the watchdog's note and the counts.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(u8)]
enum Op {
    WriteWord,
    WriteFull,
    Fill,
    ReadWord,
    ReadFull,
    Mmap,
    Munmap,
    Mprotect,
    Dontneed,
    Free,
    Remove,
    Populate,
    Hint,
    Mlock,
    Munlock,
    Mremap,
    Fork,
    ExitSide,
    Validate,
    Exit,
    Verify,
}

const OP_NAMES: [&str; 21] = [
    "write word",
    "write page",
    "fill",
    "read word",
    "read page",
    "mmap",
    "munmap",
    "mprotect",
    "MADV_DONTNEED",
    "MADV_FREE",
    "MADV_REMOVE",
    "MADV_POPULATE",
    "madvise hint",
    "mlock",
    "munlock",
    "mremap",
    "fork",
    "exit one side of a fork",
    "validate_mm",
    "exit",
    "verify window",
];

/// Counts over all threads.
#[derive(Debug, Default)]
struct Counts {
    ops: AtomicU64,
    accesses: AtomicU64,
    oom: AtomicU64,
    maperr: AtomicU64,
    accerr: AtomicU64,
    sigbus: AtomicU64,
    munmaps_downgraded: AtomicU64,
    exits: AtomicU64,
    resyncs: AtomicU64,
    mremaps: AtomicU64,
    mremaps_moved_away: AtomicU64,
    mremaps_failed: AtomicU64,
    forks: AtomicU64,
    forks_failed: AtomicU64,
    side_exits: AtomicU64,
    parents_first: AtomicU64,
    /// Forks of the shared mm begun and ended (by any of its threads).
    shared_forks_begun: AtomicU64,
    shared_forks_ended: AtomicU64,
}

/// The first failures, and a flag that stops everyone.
#[derive(Debug, Default)]
struct Failures {
    any: AtomicBool,
    msgs: Mutex<Vec<String>>,
}

impl Failures {
    fn fail(&self, msg: String) {
        self.any.store(true, Relaxed);
        let mut m = self.msgs.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() < 8 {
            m.push(msg);
        }
    }
}

/// Marks the run failed if a thread unwinds (an engine `VM_BUG_ON`), so the others stop.
struct PanicFlag<'a>(&'a Failures, usize);

impl Drop for PanicFlag<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0
                .fail(format!("thread {} panicked (message above)", self.1));
        }
    }
}

/// One side of a fork: a task on an mm, and the model of the window in it.
struct Side {
    task: Task,
    pages: Vec<Page>,
    /// The child of a fork still alive beside its parent (the root side of a thread — the
    /// shared mm, or an own mm, or a child whose parent exited — is not).
    child: bool,
}

/// One thread's window and its model: the side it works on, and the other side of a fork.
struct Window<'a> {
    slot: usize,
    task: Task,
    pages: Vec<Page>,
    child: bool,
    other: Option<Side>,
    /// The thread's mms are its own (it may exit a fork's parent first).
    own_mm: bool,
    base: u64,
    rng: Rng,
    counts: &'a Counts,
    wd: &'a Watchdog,
    /// The thread's last calls (not its reads), for a failure's message.
    trace: std::collections::VecDeque<String>,
}

/// The perms of `/proc/<pid>/maps` as a protection and a sharing.
fn parse_perms(p: &str) -> Option<Map> {
    let b = p.as_bytes();
    if b.len() < 4 {
        return None;
    }
    let mut prot = 0;
    if b[0] == b'r' {
        prot |= PROT_READ;
    }
    if b[1] == b'w' {
        prot |= PROT_WRITE;
    }
    if b[2] == b'x' {
        prot |= PROT_EXEC;
    }
    Some(Map {
        prot,
        shared: b[3] == b's',
    })
}

/// The VMAs of `mm` that intersect `[lo, hi)`: `(start, end, map)`.
fn vmas_in(mm: &Mm, lo: u64, hi: u64) -> Vec<(u64, u64, Map)> {
    mm.maps()
        .lines()
        .filter_map(|l| {
            let (range, rest) = l.split_once(' ')?;
            let (s, e) = range.split_once('-')?;
            let s = u64::from_str_radix(s, 16).ok()?;
            let e = u64::from_str_radix(e, 16).ok()?;
            Some((s, e, parse_perms(rest.get(..4)?)?))
        })
        .filter(|&(s, e, _)| s < hi && e > lo)
        .collect()
}

/// Is `[a, a + len)` clear of every thread's window?
fn outside_windows(a: u64, len: u64) -> bool {
    (0..THREADS as u64).all(|t| {
        let lo = WINDOWS_BASE + t * WINDOW_STRIDE;
        a + len <= lo || a >= lo + WINDOW_PAGES * PAGE_SIZE
    })
}

/// Read back a page the model knows, at `a`: its tag word, or every word of a full page.
/// Pages with nothing to check (zero without a frame, past their object) are skipped.
fn check_page(task: &Task, a: u64, page: &mut Page) -> Result<(), String> {
    if page.map.is_none_or(|m| !m.readable()) || page.beyond() {
        return Ok(());
    }
    let c = page.cell();
    if c.data == Data::Zero && !page.own_frame {
        return Ok(()); // reading it would only map the zero page (or run out of memory)
    }
    // A full page in one read; else the word that tells.
    let (at, n) = match c.data {
        Data::Full(_) => (0, WORDS),
        Data::Word(t) => (tag_index(t), 1),
        Data::Zero => (0, 1),
    };
    let mut buf = vec![0u8; (n * 8) as usize];
    match task.read(a + at * 8, &mut buf) {
        Ok(()) => buf
            .chunks_exact(8)
            .zip(at..)
            .try_for_each(|(w, i)| page.check_word(i, u64::from_ne_bytes(w.try_into().unwrap()))),
        Err(f) if f.code == SegvCode::Oom && !page.own_frame => Ok(()),
        Err(f) => Err(format!("{f}, model {page:?}")),
    }
}

impl Window<'_> {
    fn mm(&self) -> &Arc<Mm> {
        self.task.mm()
    }

    fn cpu(&self) -> CpuId {
        self.task.cpu()
    }

    fn addr(&self, page: u64) -> u64 {
        self.base + page * PAGE_SIZE
    }

    /// Note a call for the failure message (the last 40 are kept).
    fn trace(&mut self, what: std::fmt::Arguments<'_>) {
        if self.trace.len() == 40 {
            self.trace.pop_front();
        }
        let id = self.mm().id();
        self.trace.push_back(format!("mm {id}: {what}"));
    }

    /// Work on the other side of the fork from now on.
    fn switch_sides(&mut self) {
        if let Some(o) = &mut self.other {
            std::mem::swap(&mut self.task, &mut o.task);
            std::mem::swap(&mut self.pages, &mut o.pages);
            std::mem::swap(&mut self.child, &mut o.child);
        }
    }

    /// A range of pages for a call that drops data: a few pages, rarely an aligned 2 MiB.
    fn small_range(&mut self) -> (u64, u64) {
        if self.rng.chance(1) {
            return (self.rng.below(WINDOW_PAGES / 512) * 512, 512);
        }
        let n = 1 + self.rng.below(8);
        (self.rng.below(WINDOW_PAGES - n), n)
    }

    /// A range of pages: mostly small, sometimes a whole aligned 2 MiB (THP-sized) or one
    /// crossing a PMD boundary.
    fn range(&mut self) -> (u64, u64) {
        match self.rng.below(20) {
            0..=1 => {
                let p = self.rng.below(WINDOW_PAGES / 512) * 512;
                (p, 512)
            }
            2..=3 => {
                let p = self.rng.below(WINDOW_PAGES / 512 - 1) * 512 + 512 - self.rng.below(64);
                (p, 1 + self.rng.below(128))
            }
            _ => {
                let n = 1 + self.rng.below(16);
                (self.rng.below(WINDOW_PAGES - n), n)
            }
        }
    }

    /// A protection: mostly read-write (the pages must fill memory), every other kind too.
    fn prot(&mut self) -> u32 {
        if self.rng.chance(60) {
            return PROT_READ | PROT_WRITE;
        }
        self.rng
            .pick(&[PROT_READ, PROT_NONE, PROT_WRITE, PROT_READ | PROT_EXEC])
    }

    /// The window's VMAs as `(first page, pages, map)`, clipped to the window.
    fn window_vmas(&self) -> Vec<(u64, u64, Map)> {
        let (lo, hi) = (self.base, self.addr(WINDOW_PAGES));
        vmas_in(self.mm(), lo, hi)
            .into_iter()
            .map(|(s, e, m)| {
                let (s, e) = (s.max(lo), e.min(hi));
                ((s - lo) / PAGE_SIZE, (e - s) / PAGE_SIZE, m)
            })
            .collect()
    }

    /// The window's mappings page by page, from the maps lines.
    fn seen(&self) -> Vec<Option<Map>> {
        let mut seen = vec![None; WINDOW_PAGES as usize];
        for (p, n, map) in self.window_vmas() {
            seen[p as usize..(p + n) as usize].fill(Some(map));
        }
        seen
    }

    /// Compare the model's mappings with the window's maps lines.
    fn check_maps(&self) -> Result<(), String> {
        for (p, (page, vma)) in self.pages.iter().zip(self.seen()).enumerate() {
            if page.map != vma {
                return Err(format!(
                    "page {p} ({:#x}): model says {:?}, maps says {vma:?}\n{}",
                    self.addr(p as u64),
                    page.map,
                    self.mm().maps()
                ));
            }
        }
        Ok(())
    }

    /// After a failed call: take the mappings from the maps lines (data kept where the page
    /// stays mapped with the same sharing).
    fn resync(&mut self) {
        self.counts.resyncs.fetch_add(1, Relaxed);
        let seen = self.seen();
        for (page, vma) in self.pages.iter_mut().zip(seen) {
            match (page.map, vma) {
                (Some(old), Some(new)) if old.shared == new.shared => page.map = Some(new),
                (None, None) => {}
                (_, None) => *page = Page::unmapped(),
                (_, Some(new)) => {
                    // A mapping the model did not expect: its data is unknown, so start over
                    // (a shared one as an object of its own).
                    let obj = new.shared.then(|| {
                        let cell = Cell {
                            maybe_zero: true,
                            ..ZERO
                        };
                        (Rc::new(RefCell::new(vec![cell])), 0)
                    });
                    *page = Page::new(new, obj);
                    page.own.maybe_zero = true;
                }
            }
        }
    }

    /// The outcome of an access to page `p`; `Ok(true)` if it succeeded.
    fn expect_access(
        &self,
        p: u64,
        write: bool,
        got: Result<(), usermm::Fault>,
    ) -> Result<bool, String> {
        let page = &self.pages[p as usize];
        let what = if write { "write" } else { "read" };
        let allowed = page
            .map
            .is_some_and(|m| if write { m.writable() } else { m.readable() });
        let beyond = page.beyond();
        match got {
            Ok(()) if allowed && !beyond => return Ok(true),
            Err(f) if f.code == SegvCode::MapErr && page.map.is_none() => {
                self.counts.maperr.fetch_add(1, Relaxed);
                return Ok(false);
            }
            Err(f) if f.code == SegvCode::AccErr && page.map.is_some() && !allowed => {
                self.counts.accerr.fetch_add(1, Relaxed);
                return Ok(false);
            }
            Err(f) if f.code == SegvCode::BusAdrErr && allowed && beyond => {
                self.counts.sigbus.fetch_add(1, Relaxed);
                return Ok(false);
            }
            Err(f) if f.code == SegvCode::Oom && allowed && !self.has_frame(page, write) => {
                self.counts.oom.fetch_add(1, Relaxed);
                return Ok(false);
            }
            _ => {}
        }
        Err(format!(
            "{what} of page {p} ({:#x}): got {got:?}, model {page:?}",
            self.addr(p)
        ))
    }

    /// Does an access to `page` need no frame? A page written since its last zap has one;
    /// in the shared mm a write needs one again if another thread forked since (the page is
    /// copy-on-write at least until that child exits and its frees are done).
    fn has_frame(&self, page: &Page, write: bool) -> bool {
        let begun = self.counts.shared_forks_begun.load(SeqCst);
        let forked = !self.own_mm && !self.child && page.epoch != Some(begun);
        page.own_frame && !(write && forked)
    }

    /// Check word `i` of page `p` read as `v`, settling a "maybe zero".
    fn check_word(&mut self, p: u64, i: u64, v: u64) -> Result<(), String> {
        let a = self.addr(p);
        self.pages[p as usize]
            .check_word(i, v)
            .map_err(|e| format!("page {p} ({a:#x}) {e}"))
    }

    fn write(&mut self, full: bool) -> Result<(), String> {
        let p = self.rng.below(WINDOW_PAGES);
        self.write_page(p, full)
    }

    /// A run of pages written one word each (full pages where the model needs it), like a
    /// program walking its heap.
    fn fill(&mut self) -> Result<(), String> {
        let n = 1 + self.rng.below(64);
        let p = self.rng.below(WINDOW_PAGES - n);
        (p..p + n).try_for_each(|q| self.write_page(q, false))
    }

    fn write_page(&mut self, p: u64, full: bool) -> Result<(), String> {
        let tag = self.rng.next_u64() | 1;
        let a = self.addr(p);
        self.counts.accesses.fetch_add(1, Relaxed);
        // Ended first: a fork counted as ended was counted as begun, so the two differ only
        // while one is under way.
        let ended = self.counts.shared_forks_ended.load(SeqCst);
        let begun = self.counts.shared_forks_begun.load(SeqCst);
        let epoch = (begun == ended).then_some(begun);
        let (got, data) = if full {
            let buf: Vec<u8> = (0..WORDS)
                .flat_map(|i| full_word(tag, i).to_ne_bytes())
                .collect();
            (self.task.write(a, &buf), Data::Full(tag))
        } else {
            // A one-word write keeps the rest of the page: only on a page whose other words
            // the model knows are zero.
            let c = self.pages[p as usize].cell();
            if c.data != Data::Zero || c.maybe_zero {
                return self.write_page(p, true);
            }
            (
                self.task.write_u64(a + tag_index(tag) * 8, tag),
                Data::Word(tag),
            )
        };
        self.trace(format_args!("write {p} {data:?}: {got:?}"));
        if self.expect_access(p, true, got)? {
            let page = &mut self.pages[p as usize];
            page.set_cell(Cell {
                data,
                maybe_zero: false,
            });
            page.own_frame = true;
            page.epoch = epoch;
        }
        Ok(())
    }

    fn read(&mut self, full: bool) -> Result<(), String> {
        let p = self.rng.below(WINDOW_PAGES);
        let a = self.addr(p);
        self.counts.accesses.fetch_add(1, Relaxed);
        if full {
            let mut buf = vec![0u8; PAGE_SIZE as usize];
            let got = self.task.read(a, &mut buf);
            if self.expect_access(p, false, got)? {
                for i in 0..WORDS {
                    let w = &buf[(i * 8) as usize..(i * 8 + 8) as usize];
                    self.check_word(p, i, u64::from_ne_bytes(w.try_into().unwrap()))?;
                }
            }
            return Ok(());
        }
        let i = match self.pages[p as usize].cell().data {
            Data::Word(t) if self.rng.chance(70) => tag_index(t),
            _ => self.rng.below(WORDS),
        };
        let got = self.task.read_u64(a + i * 8);
        if self.expect_access(p, false, got.map(|_| ()))? {
            self.check_word(p, i, got.unwrap_or(0))?;
        }
        Ok(())
    }

    /// Apply `f` to the model's pages `[p, p + n)`.
    fn each(&mut self, p: u64, n: u64, f: impl Fn(&mut Page)) {
        for page in &mut self.pages[p as usize..(p + n) as usize] {
            f(page);
        }
    }

    fn mmap(&mut self) -> Result<(), String> {
        let (p, n) = self.range();
        let prot = self.prot();
        let shared = self.rng.chance(25);
        let mut flags = MAP_FIXED | MAP_ANONYMOUS | if shared { MAP_SHARED } else { MAP_PRIVATE };
        if self.rng.chance(10) {
            flags |= MAP_POPULATE;
        }
        if self.rng.chance(5) {
            flags |= MAP_LOCKED;
        }
        let a = self.addr(p);
        let (cpu, mm) = (self.cpu(), Arc::clone(self.mm()));
        let r = mm.mmap(cpu, a, n * PAGE_SIZE, prot, flags, MapFile::None);
        self.trace(format_args!(
            "mmap {p}+{n} prot {prot} flags {flags:#x}: {r:?}"
        ));
        match r {
            Ok(got) if got == a => {
                // A shared mapping gets an object of its own, as big as the mapping.
                let obj = shared.then(|| Rc::new(RefCell::new(vec![ZERO; n as usize])));
                for i in 0..n {
                    let o = obj.as_ref().map(|o| (Rc::clone(o), i));
                    self.pages[(p + i) as usize] = Page::new(Map { prot, shared }, o);
                }
                if !shared && self.rng.chance(30) {
                    let advice = self.rng.pick(&[MADV_HUGEPAGE, MADV_NOHUGEPAGE]);
                    if mm.madvise(cpu, a, n * PAGE_SIZE, advice).is_err() {
                        self.resync();
                    }
                }
                Ok(())
            }
            Ok(got) => Err(format!("MAP_FIXED at {a:#x} placed at {got:#x}")),
            Err(_) => {
                self.resync();
                Ok(())
            }
        }
    }

    fn munmap(&mut self) -> Result<(), String> {
        let (p, n) = self.small_range();
        let (cpu, mm) = (self.cpu(), Arc::clone(self.mm()));
        let r = mm.munmap_stats(cpu, self.addr(p), n * PAGE_SIZE);
        self.trace(format_args!("munmap {p}+{n}: {}", r.is_ok()));
        match r {
            Ok(st) => {
                if st.downgraded {
                    self.counts.munmaps_downgraded.fetch_add(1, Relaxed);
                }
                self.each(p, n, |page| *page = Page::unmapped());
            }
            Err(_) => self.resync(),
        }
        Ok(())
    }

    fn mprotect(&mut self) -> Result<(), String> {
        let (p, n) = self.range();
        let prot = self.prot();
        let (cpu, mm) = (self.cpu(), Arc::clone(self.mm()));
        let r = mm.mprotect(cpu, self.addr(p), n * PAGE_SIZE, prot);
        self.trace(format_args!("mprotect {p}+{n} {prot}: {r:?}"));
        match r {
            Ok(()) => self.each(p, n, |page| {
                if let Some(m) = &mut page.map {
                    m.prot = prot;
                }
            }),
            Err(_) => self.resync(),
        }
        Ok(())
    }

    fn madvise(&mut self, op: Op) -> Result<(), String> {
        let (p, n) = match op {
            Op::Dontneed | Op::Free | Op::Remove => self.small_range(),
            _ => self.range(),
        };
        let advice = match op {
            Op::Dontneed => MADV_DONTNEED,
            Op::Free => MADV_FREE,
            Op::Remove => MADV_REMOVE,
            Op::Populate => self.rng.pick(&[MADV_POPULATE_READ, MADV_POPULATE_WRITE]),
            _ => self
                .rng
                .pick(&[MADV_HUGEPAGE, MADV_NOHUGEPAGE, MADV_COLD, MADV_PAGEOUT]),
        };
        let (cpu, mm) = (self.cpu(), Arc::clone(self.mm()));
        let r = mm.madvise(cpu, self.addr(p), n * PAGE_SIZE, advice);
        self.trace(format_args!("madvise {p}+{n} {advice}: {r:?}"));
        // What the call does to a page it reached: DONTNEED zaps (a private page's data goes,
        // a shared page's stays in its object), FREE lets the kernel drop private data,
        // REMOVE punches the shared object's hole (for every mapping of it, the other side
        // of a fork too).
        // PAGEOUT would swap the page out: its data stays, its frame goes.
        let zap = |page: &mut Page, sure: bool| {
            let Some(m) = page.map else { return };
            let drops = match advice {
                MADV_DONTNEED => !m.shared,
                MADV_FREE => !m.shared,
                MADV_REMOVE => m.shared,
                MADV_PAGEOUT => false,
                _ => return,
            };
            page.own_frame = false;
            if drops {
                if sure && advice != MADV_FREE {
                    page.set_cell(ZERO);
                } else {
                    let c = page.cell();
                    page.set_cell(Cell {
                        maybe_zero: true,
                        ..c
                    });
                }
            }
        };
        if advice == MADV_REMOVE {
            // The hole is punched for every mapping of the object: the entries for those
            // indices elsewhere in the window (a growing mremap may map them twice) and on
            // the other side of a fork are zapped too.
            let punched: Vec<(*const RefCell<Vec<Cell>>, u64)> = self.pages
                [p as usize..(p + n) as usize]
                .iter()
                .filter_map(|pg| pg.obj.as_ref().map(|(o, i)| (Rc::as_ptr(o), *i)))
                .collect();
            let other = self.other.as_mut().map(|o| &mut o.pages);
            for pg in self.pages.iter_mut().chain(other.into_iter().flatten()) {
                if let Some((obj, i)) = &pg.obj {
                    if punched.contains(&(Rc::as_ptr(obj), *i)) {
                        pg.own_frame = false;
                    }
                }
            }
        }
        match r {
            Ok(()) => self.each(p, n, |page| zap(page, true)),
            Err(e) => {
                // Linux applies madvise VMA by VMA and may fail after zapping some of them.
                self.each(p, n, |page| zap(page, false));
                if !matches!(
                    e,
                    Errno::ENOMEM | Errno::EINVAL | Errno::EFAULT | Errno::EAGAIN
                ) {
                    return Err(format!("madvise({advice}) failed with {e}"));
                }
                self.resync();
            }
        }
        Ok(())
    }

    fn mlock(&mut self, on: bool) -> Result<(), String> {
        let (p, n) = self.small_range();
        let (cpu, mm) = (self.cpu(), Arc::clone(self.mm()));
        let (a, len) = (self.addr(p), n * PAGE_SIZE);
        let r = if on {
            mm.mlock(cpu, a, len)
        } else {
            mm.munlock(cpu, a, len)
        };
        if r.is_err() {
            self.resync();
        }
        Ok(())
    }

    /// Take the model's pages `[p, p + n)` out of the window (leaving it unmapped there).
    fn take_pages(&mut self, p: u64, n: u64) -> Vec<Page> {
        self.pages[p as usize..(p + n) as usize]
            .iter_mut()
            .map(|pg| std::mem::replace(pg, Page::unmapped()))
            .collect()
    }

    /// The model after `mremap` moved (or resized in place) the `old` pages at `p`, all in one
    /// VMA, to `new` pages at `t`: the first pages are the old ones (data, "maybe zero" and
    /// frame move with them); the rest are new — zero, or the next indices of the shared
    /// object, past its size.
    fn remapped(&mut self, p: u64, old: u64, new: u64) -> Vec<Page> {
        let first = self.pages[p as usize].clone();
        let map = first.map.expect("mremap of a mapped page");
        let mut pages = self.take_pages(p, old);
        pages.truncate(new as usize);
        for i in old..new {
            let obj = first.obj.as_ref().map(|(o, idx)| (Rc::clone(o), idx + i));
            pages.push(Page::new(map, obj));
        }
        pages
    }

    fn put_pages(&mut self, t: u64, pages: Vec<Page>) {
        for (i, pg) in pages.into_iter().enumerate() {
            self.pages[t as usize + i] = pg;
        }
    }

    /// Unmap `[a, a + n pages)` after a failed `mremap` (what it may have moved there goes).
    fn munmap_after(&mut self, a: u64, n: u64) -> Result<(), String> {
        let (cpu, mm) = (self.cpu(), Arc::clone(self.mm()));
        mm.munmap(cpu, a, n * PAGE_SIZE)
            .map_err(|e| format!("munmap({a:#x}, {n} pages) after a failed mremap: {e}"))
    }

    /// `mremap` within the window: shrink, grow in place (or move away with
    /// `MREMAP_MAYMOVE`), or move with `MREMAP_FIXED` (resizing, or not: then the range may
    /// span several VMAs and gaps).
    fn mremap(&mut self) -> Result<(), String> {
        let vmas = self.window_vmas();
        if vmas.is_empty() {
            return Ok(());
        }
        let (vp, vn, _) = vmas[self.rng.below(vmas.len() as u64) as usize];
        let vend = vp + vn;
        let (cpu, mm) = (self.cpu(), Arc::clone(self.mm()));
        let ok = |c: &Counts| c.mremaps.fetch_add(1, Relaxed);
        match self.rng.below(4) {
            0 => {
                // Shrink in place (MAYMOVE changes nothing).
                if vn < 2 {
                    return Ok(());
                }
                let p = vp + self.rng.below(vn - 1);
                let old = if self.rng.chance(50) {
                    vend - p
                } else {
                    2 + self.rng.below(vend - p - 1)
                };
                let new = 1 + self.rng.below(old - 1);
                let flags = self.rng.pick(&[0, MREMAP_MAYMOVE]);
                let a = self.addr(p);
                let r = mm.mremap(cpu, a, old * PAGE_SIZE, new * PAGE_SIZE, flags, 0);
                self.trace(format_args!(
                    "mremap {p}+{old} -> {new} flags {flags:#x} to {:#x}: {r:?}",
                    0
                ));
                match r {
                    Ok(at) if at == a => {
                        ok(self.counts);
                        self.each(p + new, old - new, |pg| *pg = Page::unmapped());
                    }
                    Err(Errno::ENOMEM) => {
                        self.counts.mremaps_failed.fetch_add(1, Relaxed);
                        self.resync();
                    }
                    r => return Err(format!("shrink {old} → {new} pages at page {p}: {r:?}")),
                }
            }
            1 => {
                // Grow: in place where the range ends its VMA and free pages follow (within
                // the window); else ENOMEM, or a move away with MAYMOVE.
                let p = vp + self.rng.below(vn);
                let old = if self.rng.chance(80) {
                    vend - p
                } else {
                    1 + self.rng.below(vend - p)
                };
                let room = WINDOW_PAGES - (p + old);
                if room == 0 {
                    return Ok(());
                }
                let new = old + 1 + self.rng.below(room.min(32));
                let maymove = self.rng.chance(50);
                let in_place = p + old == vend
                    && self.pages[(p + old) as usize..(p + new) as usize]
                        .iter()
                        .all(|pg| pg.map.is_none());
                let flags = if maymove { MREMAP_MAYMOVE } else { 0 };
                let a = self.addr(p);
                let r = mm.mremap(cpu, a, old * PAGE_SIZE, new * PAGE_SIZE, flags, 0);
                self.trace(format_args!(
                    "mremap {p}+{old} -> {new} flags {flags:#x} to {:#x}: {r:?}",
                    0
                ));
                match r {
                    Ok(at) if at == a && in_place => {
                        ok(self.counts);
                        let pages = self.remapped(p, old, new);
                        self.put_pages(p, pages);
                    }
                    Ok(at) if at != a && maymove && !in_place => {
                        ok(self.counts);
                        self.moved_away(p, old, new, at)?;
                    }
                    // No room (or, moving, no page table): nothing changed (Linux moves the
                    // page tables back when a move fails half-way).
                    Err(Errno::ENOMEM) if !in_place => {
                        self.counts.mremaps_failed.fetch_add(1, Relaxed);
                    }
                    r => {
                        return Err(format!(
                            "grow {old} → {new} pages at page {p} (flags {flags:#x}, in place \
                             {in_place}): {r:?}"
                        ))
                    }
                }
            }
            _ => {
                // MREMAP_FIXED to a range of the window that does not overlap the source.
                let p = vp + self.rng.below(vn);
                let same = self.rng.chance(50);
                let (old, new) = if same {
                    let len = 1 + self.rng.below(64.min(WINDOW_PAGES - p));
                    (len, len)
                } else {
                    let old = 1 + self.rng.below(vend - p);
                    (old, 1 + self.rng.below(old + 16))
                };
                let Some(t) = (0..8)
                    .map(|_| self.rng.below(WINDOW_PAGES - new + 1))
                    .find(|&t| t + new <= p || t >= p + old)
                else {
                    return Ok(());
                };
                let (a, to) = (self.addr(p), self.addr(t));
                let flags = MREMAP_MAYMOVE | MREMAP_FIXED;
                let r = mm.mremap(cpu, a, old * PAGE_SIZE, new * PAGE_SIZE, flags, to);
                self.trace(format_args!(
                    "mremap {p}+{old} -> {new} flags {flags:#x} to {:#x}: {r:?}",
                    to
                ));
                match r {
                    Ok(at) if at == to => {
                        ok(self.counts);
                        if same {
                            // remap_move: each VMA's part moves on its own, the gaps between
                            // them kept (what the target had there stays).
                            let src = self.take_pages(p, old);
                            for (i, pg) in src.into_iter().enumerate() {
                                if pg.map.is_some() {
                                    self.pages[t as usize + i] = pg;
                                }
                            }
                        } else {
                            let pages = self.remapped(p, old, new);
                            self.put_pages(t, pages);
                        }
                    }
                    Err(Errno::ENOMEM) => {
                        // Parts of a multi-VMA move may have moved before it failed: clear
                        // the target, then take the source from the maps lines.
                        self.counts.mremaps_failed.fetch_add(1, Relaxed);
                        self.munmap_after(to, new)?;
                        self.each(t, new, |pg| *pg = Page::unmapped());
                        self.resync();
                    }
                    r => {
                        return Err(format!(
                            "MREMAP_FIXED {old} → {new} pages from page {p} to page {t}: {r:?}"
                        ))
                    }
                }
            }
        }
        Ok(())
    }

    /// After a `MREMAP_MAYMOVE` moved the `old` pages at `p` out of the window to `at`
    /// (grown to `new`): read them there, then move them back with `MREMAP_FIXED` to a random
    /// place in the window, or unmap them.
    fn moved_away(&mut self, p: u64, old: u64, new: u64, at: u64) -> Result<(), String> {
        self.counts.mremaps_moved_away.fetch_add(1, Relaxed);
        if !outside_windows(at, new * PAGE_SIZE) {
            return Err(format!(
                "MREMAP_MAYMOVE placed {new} pages in a window, at {at:#x}"
            ));
        }
        let mut pages = self.remapped(p, old, new);
        for (i, pg) in pages.iter_mut().enumerate() {
            let a = at + i as u64 * PAGE_SIZE;
            check_page(&self.task, a, pg)
                .map_err(|e| format!("page {p}+{i} moved to {a:#x}: {e}"))?;
        }
        let (cpu, mm) = (self.cpu(), Arc::clone(self.mm()));
        if self.rng.chance(25) {
            return self.munmap_after(at, new);
        }
        let t = self.rng.below(WINDOW_PAGES - new + 1);
        let to = self.addr(t);
        let (len, flags) = (new * PAGE_SIZE, MREMAP_MAYMOVE | MREMAP_FIXED);
        let r = mm.mremap(cpu, at, len, len, flags, to);
        self.trace(format_args!("mremap back {at:#x}+{new} to {t}: {r:?}"));
        match r {
            Ok(got) if got == to => {
                self.counts.mremaps.fetch_add(1, Relaxed);
                self.put_pages(t, pages);
                Ok(())
            }
            Err(Errno::ENOMEM) => {
                // The target may have been unmapped before the move failed.
                self.counts.mremaps_failed.fetch_add(1, Relaxed);
                self.resync();
                self.munmap_after(at, new)
            }
            r => Err(format!(
                "moving {new} pages back from {at:#x} to page {t}: {r:?}"
            )),
        }
    }

    /// `fork`: the child gets a copy of the window's model; private pages are copy-on-write
    /// on both sides from now on (a write may need a frame), shared ones stay the same objects.
    fn fork(&mut self) -> Result<(), String> {
        let (cpu, mm) = (self.cpu(), Arc::clone(self.mm()));
        let shared_mm = !self.own_mm && !self.child;
        if shared_mm {
            self.counts.shared_forks_begun.fetch_add(1, SeqCst);
        }
        // Even a failed fork shares the pages with a child being torn down (its frees may
        // wait on the workqueue): a write may copy.
        for pg in &mut self.pages {
            if pg.obj.is_none() {
                pg.own_frame = false;
            }
        }
        let r = mm.fork(cpu);
        self.trace(format_args!("fork: {:?}", r.as_ref().map(|c| c.id())));
        if shared_mm {
            self.counts.shared_forks_ended.fetch_add(1, SeqCst);
        }
        match r {
            Ok(child) => {
                self.counts.forks.fetch_add(1, Relaxed);
                // The child's shared mappings have no entries yet (fork copies only what has
                // an anon_vma).
                let pages = self
                    .pages
                    .iter()
                    .map(|pg| Page {
                        own_frame: false,
                        ..pg.clone()
                    })
                    .collect();
                self.other = Some(Side {
                    task: Task::new(child, cpu),
                    pages,
                    child: true,
                });
                self.switch_sides();
                let r = self.check_maps();
                self.switch_sides();
                r.map_err(|e| format!("the child's window: {e}"))
            }
            Err(Errno::ENOMEM) => {
                self.counts.forks_failed.fetch_add(1, Relaxed);
                Ok(())
            }
            Err(e) => Err(format!("fork failed with {e}")),
        }
    }

    /// One side of the fork exits while the others run: the child, or in a thread with mms
    /// of its own sometimes the parent first.
    fn exit_side(&mut self) -> Result<(), String> {
        let parent_first = self.own_mm && self.rng.chance(40);
        // Make the side that exits the current one.
        if self.child == parent_first {
            self.switch_sides();
        }
        self.retire_current()?;
        self.counts.side_exits.fetch_add(1, Relaxed);
        if parent_first {
            self.counts.parents_first.fetch_add(1, Relaxed);
        }
        Ok(())
    }

    /// Read back the current side's window, validate its fork family, exit its mm and go on
    /// with the other side.
    fn retire_current(&mut self) -> Result<(), String> {
        self.trace(format_args!("exit"));
        self.verify()?;
        let mm = Arc::clone(self.mm());
        mm.validate()
            .map_err(|e| format!("validate_mm before a side's exit: {e}"))?;
        let o = self.other.take().expect("another side");
        drop(std::mem::replace(&mut self.task, o.task));
        self.pages = o.pages;
        self.child = false;
        mm.mmput(self.cpu());
        if mm.nr_page_tables() != 0 {
            return Err(format!(
                "{} page tables left after a side's exit",
                mm.nr_page_tables()
            ));
        }
        Ok(())
    }

    /// Read back the tag word (or every word, for a full page) of every mapped page.
    fn verify(&mut self) -> Result<(), String> {
        for p in 0..WINDOW_PAGES {
            let a = self.addr(p);
            check_page(&self.task, a, &mut self.pages[p as usize])
                .map_err(|e| format!("verify page {p} ({a:#x}): {e}"))?;
        }
        Ok(())
    }

    fn step(&mut self, n: u64) -> Result<(), String> {
        if self.other.is_some() && self.rng.chance(50) {
            self.switch_sides();
        }
        // Writes outweigh what drops data, so that the windows fill the machine.
        let op = match self.rng.below(1000) {
            0..=279 => Op::WriteWord,
            280..=329 => Op::WriteFull,
            330..=389 => Op::Fill,
            390..=649 => Op::ReadWord,
            650..=679 => Op::ReadFull,
            680..=719 => Op::Mmap,
            720..=739 => Op::Munmap,
            740..=799 => Op::Mprotect,
            800..=849 => Op::Dontneed,
            850..=859 => Op::Free,
            860..=869 => Op::Remove,
            870..=899 => Op::Populate,
            900..=929 => Op::Hint,
            930..=944 => Op::Mlock,
            945..=959 => Op::Munlock,
            960..=989 => Op::Mremap,
            // A fork lives about a hundred operations.
            _ if self.other.is_some() => Op::ExitSide,
            _ => Op::Fork,
        };
        self.wd.beat_doing(self.slot, op as u64 | n << 8);
        self.counts.ops.fetch_add(1, Relaxed);
        match op {
            Op::WriteWord => self.write(false),
            Op::WriteFull => self.write(true),
            Op::Fill => self.fill(),
            Op::ReadWord => self.read(false),
            Op::ReadFull => self.read(true),
            Op::Mmap => self.mmap().and_then(|()| self.check_maps()),
            Op::Munmap => self.munmap().and_then(|()| self.check_maps()),
            Op::Mprotect => self.mprotect().and_then(|()| self.check_maps()),
            Op::Mlock => self.mlock(true).and_then(|()| self.check_maps()),
            Op::Munlock => self.mlock(false).and_then(|()| self.check_maps()),
            Op::Mremap => self.mremap().and_then(|()| self.check_maps()),
            Op::Fork => self.fork().and_then(|()| self.check_maps()),
            Op::ExitSide => self.exit_side().and_then(|()| self.check_maps()),
            _ => self.madvise(op).and_then(|()| self.check_maps()),
        }
        .map_err(|e| {
            let trace: Vec<&str> = self.trace.iter().map(String::as_str).collect();
            format!(
                "{} (op {n}): {e}\nlast calls:\n  {}",
                OP_NAMES[op as usize],
                trace.join("\n  ")
            )
        })
    }
}

/// The machine: 20 MiB for six 8 MiB windows (a few percent of the accesses run out of
/// memory), THP always, parallel free with a small threshold (so that munmaps and exits hand
/// jobs to the workqueue), munmap downgrade on; per-VMA locks as asked.
fn stress_machine(per_vma_lock: bool) -> Arc<Machine> {
    machine_with(|c| {
        c.mem = 20 << 20;
        c.cpus = THREADS as u16 + 1;
        c.nodes = 2;
        c.backing = BackingMode::Full;
        c.thp = ThpMode::Always;
        c.munmap.downgrade = true;
        c.free.policy = FreePolicy::Parallel;
        c.free.threshold_pages = 256;
        c.free.max_active = 2;
        c.gather.max_batch_count = 2;
        c.gather.batch_switch = BatchSwitch::V2017;
        c.vma.per_vma_lock = per_vma_lock;
    })
}

/// What the threads share.
struct Run<'a> {
    name: &'a str,
    machine: &'a Arc<Machine>,
    ops: u64,
    counts: &'a Counts,
    failures: &'a Failures,
    wd: &'a Watchdog,
}

/// One thread: `ops` operations on its window of `mm` (or of mms of its own, exited every
/// [`EXIT_EVERY`] operations, when `own`).
fn worker(run: &Run<'_>, shared_mm: Option<&Arc<Mm>>, slot: usize) {
    let Run {
        machine: m,
        ops,
        counts,
        failures,
        wd,
        ..
    } = *run;
    let _flag = PanicFlag(failures, slot);
    let cpu = CpuId(1 + slot as u16);
    // `mm_alloc` needs a frame (the PGD): under pressure it may wait for the others to free
    // some, as a fork would wait for the OOM killer.
    let new_mm = || match shared_mm {
        Some(mm) => Ok(Arc::clone(mm)),
        None => {
            let t = std::time::Instant::now();
            loop {
                match m.new_mm(cpu) {
                    Ok(mm) => return Ok(mm),
                    Err(e) if t.elapsed() > Duration::from_secs(30) => {
                        return Err(format!("mm_alloc failed for 30 s: {e}"))
                    }
                    Err(_) => {
                        wd.beat(slot);
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            }
        }
    };
    let mut w = Window {
        slot,
        task: Task::new(new_mm().expect("the first mm_alloc"), cpu),
        pages: vec![Page::unmapped(); WINDOW_PAGES as usize],
        child: false,
        other: None,
        own_mm: shared_mm.is_none(),
        base: WINDOWS_BASE + slot as u64 * WINDOW_STRIDE,
        rng: Rng::new(usermm_testscale::seed_for(run.name) ^ (slot as u64 + 1)),
        counts,
        wd,
        trace: Default::default(),
    };
    let fail = |e: String| failures.fail(format!("thread {slot}: {e}"));
    // The whole window mapped private and writable to begin with, as a program's heap is.
    let map_all = |w: &mut Window<'_>| {
        let (cpu, mm) = (w.cpu(), Arc::clone(w.mm()));
        let flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;
        let len = WINDOW_PAGES * PAGE_SIZE;
        let prot = PROT_READ | PROT_WRITE;
        let a = mm.mmap(cpu, w.base, len, prot, flags, MapFile::None);
        assert_eq!(a, Ok(w.base), "mapping the window");
        let map = Map {
            prot,
            shared: false,
        };
        w.pages.fill(Page::new(map, None));
    };
    map_all(&mut w);
    for n in 0..ops {
        if failures.any.load(Relaxed) {
            break;
        }
        if let Err(e) = w.step(n) {
            fail(e);
            break;
        }
        if n % VALIDATE_EVERY == VALIDATE_EVERY - 1 {
            wd.beat_doing(slot, Op::Validate as u64 | n << 8);
            if let Err(e) = w.mm().validate() {
                fail(format!("validate_mm after op {n}: {e}"));
                break;
            }
        }
        if shared_mm.is_none() && n % EXIT_EVERY == EXIT_EVERY - 1 {
            wd.beat_doing(slot, Op::Exit as u64 | n << 8);
            // Both sides of a fork go.
            if w.other.is_some() {
                if let Err(e) = w.retire_current() {
                    fail(format!("before exit at op {n}: {e}"));
                    break;
                }
            }
            if let Err(e) = w.verify() {
                fail(format!("before exit at op {n}: {e}"));
                break;
            }
            let mm = Arc::clone(w.task.mm());
            if let Err(e) = mm.validate() {
                fail(format!("validate_mm before exit at op {n}: {e}"));
                break;
            }
            mm.mmput(cpu);
            if mm.nr_page_tables() != 0 {
                fail(format!(
                    "{} page tables left after exit",
                    mm.nr_page_tables()
                ));
                break;
            }
            match new_mm() {
                Ok(next) => w.task = Task::new(next, cpu),
                Err(e) => {
                    fail(e);
                    break;
                }
            }
            drop(mm);
            map_all(&mut w);
            counts.exits.fetch_add(1, Relaxed);
        }
    }
    if !failures.any.load(Relaxed) {
        wd.beat_doing(slot, Op::Verify as u64 | ops << 8);
        // The child of a fork exits first (a shared-mm thread never exits the shared mm).
        if w.other.is_some() && !w.child {
            w.switch_sides();
        }
        let r = match w.other {
            Some(_) => w.retire_current(),
            None => Ok(()),
        };
        if let Err(e) = r.and_then(|()| w.verify()) {
            fail(format!("final verify: {e}"));
        }
    }
    let mut mms = vec![Arc::clone(w.task.mm())];
    mms.extend(w.other.take().map(|o| Arc::clone(o.task.mm())));
    drop(w);
    for mm in mms {
        if failures.any.load(Relaxed) {
            // Tearing down a broken mm may trip a VM_BUG_ON and hide the first failure.
            std::mem::forget(mm);
        } else if shared_mm.is_none_or(|s| !Arc::ptr_eq(s, &mm)) {
            mm.mmput(cpu);
        }
    }
    wd.retire(slot);
}

/// The stress run: six threads, `OPS` each (scaled), on a machine with per-VMA locks on or
/// off; its failures, then its counts, checked.
fn stress(name: &str, per_vma_lock: bool) {
    usermm_testscale::announce(name);
    let ops = usermm_testscale::scaled(OPS);
    let m = stress_machine(per_vma_lock);
    let free0 = free_pages(&m);
    let vm0 = m.vmstat_snapshot();
    let shared_mm = m.new_mm(C0).expect("mm");
    let counts = Counts::default();
    let failures = Failures::default();
    let wd = Watchdog::start(name, THREADS, Duration::from_secs(120), |slot, note| {
        let op = (note & 0xff) as usize;
        format!(
            "thread {slot}: {} (op {})",
            OP_NAMES.get(op).unwrap_or(&"?"),
            note >> 8
        )
    });
    let run = Run {
        name,
        machine: &m,
        ops,
        counts: &counts,
        failures: &failures,
        wd: &wd,
    };
    std::thread::scope(|s| {
        for slot in 0..THREADS {
            let (run, mm) = (&run, (slot < SHARED).then_some(&shared_mm));
            s.spawn(move || worker(run, mm, slot));
        }
    });
    drop(wd);
    let msgs = failures
        .msgs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let c = &counts;
    let delta = m.vmstat_snapshot().since(&vm0);
    let get = |a: &AtomicU64| a.load(Relaxed);
    let summary = format!(
        "per-VMA locks {per_vma_lock}: {} ops ({} accesses: {} out of memory, {} SEGV_MAPERR, \
         {} SEGV_ACCERR, {} SIGBUS as modelled), {} downgraded munmaps, {} exits, {} resyncs; \
         {} mremaps ({} moved out and back or unmapped, {} ENOMEM); {} forks ({} ENOMEM), \
         {} sides exited ({} parents first); thp_fault_alloc {}, thp_fault_fallback {}, \
         free jobs {}, oom {}",
        get(&c.ops),
        get(&c.accesses),
        get(&c.oom),
        get(&c.maperr),
        get(&c.accerr),
        get(&c.sigbus),
        get(&c.munmaps_downgraded),
        get(&c.exits),
        get(&c.resyncs),
        get(&c.mremaps),
        get(&c.mremaps_moved_away),
        get(&c.mremaps_failed),
        get(&c.forks),
        get(&c.forks_failed),
        get(&c.side_exits),
        get(&c.parents_first),
        delta.get(VmItem::ThpFaultAlloc),
        delta.get(VmItem::ThpFaultFallback),
        delta.get(VmItem::FreeJobsQueued),
        delta.get(VmItem::Oom),
    );
    if !msgs.is_empty() {
        // Tearing down a broken mm may trip a VM_BUG_ON and hide the first failure.
        std::mem::forget(shared_mm);
        panic!(
            "{name}: {}\n{summary}\nreplay: {}",
            msgs.join("\n"),
            usermm_testscale::replay()
        );
    }
    eprintln!("{name}: {summary}");
    // Every out-of-memory fault the threads saw was counted as one, and each was allowed.
    assert!(delta.get(VmItem::Oom) as u64 >= get(&c.oom), "{summary}");
    // What the test claims to run under: memory pressure, THP, downgraded munmaps, mremap
    // and fork with both orders of exit.
    assert!(delta.get(VmItem::Oom) > 0, "never out of memory: {summary}");
    assert!(delta.get(VmItem::ThpFaultAlloc) > 0, "no THP: {summary}");
    assert!(get(&c.munmaps_downgraded) > 0, "{summary}");
    assert!(
        get(&c.mremaps) > 0 && get(&c.mremaps_moved_away) > 0,
        "{summary}"
    );
    assert!(get(&c.forks) > 0 && get(&c.parents_first) > 0, "{summary}");
    assert_eq!(get(&c.exits), OWN as u64 * (ops / EXIT_EVERY), "{summary}");
    // Every mm exited — the shared one last, after its threads' forks — and every frame back.
    exit_and_check(&m, shared_mm, free0);
    assert!(
        delta.get(VmItem::FreeJobsQueued) > 0,
        "no teardown went through the workqueue: {summary}"
    );
    usermm_testscale::report(name, get(&c.ops));
}

#[test]
fn windows_keep_their_data_under_pressure_parallel_free_downgrade_and_thp() {
    stress("data_integrity", false);
}

#[test]
fn windows_keep_their_data_with_per_vma_locks() {
    stress("data_integrity_per_vma_lock", true);
}
