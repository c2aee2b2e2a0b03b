//! Data integrity under concurrency: threads own windows of address space — three in one mm,
//! three each in an mm of their own that they exit and replace while the others run — and
//! drive random `mmap`/`munmap`/`mprotect`/`madvise`/`mlock` on them, with writes of known
//! patterns and reads checked against a per-page model, on a machine too small for all of
//! them (out-of-memory faults happen), with parallel free, munmap downgrade and THP on.
//!
//! The model of each page says what every access must give:
//! - the data: zero (never written, `MADV_DONTNEED`ed if private, replaced by a new mapping),
//!   one tagged word, or a full page of words derived from a tag; after a call that may have
//!   dropped it without saying so (`MADV_FREE`, a `madvise` that failed part-way) "that data
//!   or zero", settled by the next read;
//! - the outcome: `SEGV_MAPERR` where nothing is mapped, `SEGV_ACCERR` where the protection
//!   forbids, success or out of memory where it allows — and never out of memory for a page
//!   that already holds a frame of its own (written since its last zap), which needs none;
//! - the mapping itself: after every call the window's `/proc/<pid>/maps` lines must match
//!   the model's protection and sharing page for page (a failed call resynchronises the model
//!   from them instead: Linux applies some calls part-way before failing).
//!
//! Every 500 operations a thread runs `validate_mm` on its mm (under the others' load); before
//! an exit it reads back every mapped page of its window. At the end `validate_mm` of the
//! shared mm, every mm exited, `PhysMem::validate` and the free-frame count equal to the
//! start. A [`Watchdog`] turns a hang into a failure naming the thread and its operation.
//!
//! Budget: 20 000 operations per thread, times `USERMM_TEST_SCALE`; choices from
//! `USERMM_TEST_SEED` (a failure prints the replay line; the interleaving itself does not
//! replay).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
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
/// 8-byte words per page.
const WORDS: u64 = PAGE_SIZE / 8;
/// Threads sharing one mm, and threads with an mm each.
const SHARED: usize = 3;
const OWN: usize = 3;
const THREADS: usize = SHARED + OWN;
/// Operations per thread at scale 1.
const OPS: u64 = 20_000;
/// An own-mm thread exits its mm and starts a new one this often.
const EXIT_EVERY: u64 = 2_500;
const VALIDATE_EVERY: u64 = 500;
const NAME: &str = "data_integrity";

/// The word of page `page` that a `Word` write tags.
fn tag_index(page: u64) -> u64 {
    (page * 7 + 3) % WORDS
}

/// Word `i` of a page filled from `tag` (odd, so never zero).
fn full_word(tag: u64, i: u64) -> u64 {
    (tag ^ (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1
}

/// What a page holds.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Data {
    Zero,
    /// Word `tag_index(page)` is the tag, the rest zero.
    Word(u64),
    /// Every word `i` is `full_word(tag, i)`.
    Full(u64),
}

impl Data {
    fn word(self, page: u64, i: u64) -> u64 {
        match self {
            Data::Zero => 0,
            Data::Word(t) if i == tag_index(page) => t,
            Data::Word(_) => 0,
            Data::Full(t) => full_word(t, i),
        }
    }
}

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

#[derive(Debug, Clone, Copy)]
struct Page {
    map: Option<Map>,
    data: Data,
    /// The data may have been dropped (reads may also see zero).
    maybe_zero: bool,
    /// Written since its last zap: it holds a frame, so no access to it may run out of memory.
    own_frame: bool,
}

const UNMAPPED: Page = Page {
    map: None,
    data: Data::Zero,
    maybe_zero: false,
    own_frame: false,
};

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
    Validate,
    Exit,
    Verify,
}

const OP_NAMES: [&str; 18] = [
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
    munmaps_downgraded: AtomicU64,
    exits: AtomicU64,
    resyncs: AtomicU64,
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

/// One thread's window and its model.
struct Window<'a> {
    slot: usize,
    task: Task,
    base: u64,
    pages: Vec<Page>,
    rng: Rng,
    counts: &'a Counts,
    wd: &'a Watchdog,
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

    /// Compare the model's mappings with the window's maps lines.
    fn check_maps(&self) -> Result<(), String> {
        let (lo, hi) = (self.base, self.addr(WINDOW_PAGES));
        let mut seen = vec![None; WINDOW_PAGES as usize];
        for (s, e, map) in vmas_in(self.mm(), lo, hi) {
            for a in (s.max(lo)..e.min(hi)).step_by(PAGE_SIZE as usize) {
                seen[((a - lo) / PAGE_SIZE) as usize] = Some(map);
            }
        }
        for (p, (page, vma)) in self.pages.iter().zip(&seen).enumerate() {
            if page.map != *vma {
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

        let (lo, hi) = (self.base, self.addr(WINDOW_PAGES));
        let mut seen = vec![None; WINDOW_PAGES as usize];
        for (s, e, map) in vmas_in(self.mm(), lo, hi) {
            for a in (s.max(lo)..e.min(hi)).step_by(PAGE_SIZE as usize) {
                seen[((a - lo) / PAGE_SIZE) as usize] = Some(map);
            }
        }
        for (page, vma) in self.pages.iter_mut().zip(seen) {
            match (page.map, vma) {
                (Some(old), Some(new)) if old.shared == new.shared => page.map = Some(new),
                (None, None) => {}
                (_, None) => *page = UNMAPPED,
                (_, Some(new)) => {
                    // A mapping the model did not expect: its data is unknown, so start over.
                    *page = Page {
                        map: Some(new),
                        data: Data::Zero,
                        maybe_zero: true,
                        own_frame: false,
                    };
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
        let page = self.pages[p as usize];
        let what = if write { "write" } else { "read" };
        let allowed = page
            .map
            .is_some_and(|m| if write { m.writable() } else { m.readable() });
        match got {
            Ok(()) if allowed => return Ok(true),
            Err(f) if f.code == SegvCode::MapErr && page.map.is_none() => {
                self.counts.maperr.fetch_add(1, Relaxed);
                return Ok(false);
            }
            Err(f) if f.code == SegvCode::AccErr && page.map.is_some() && !allowed => {
                self.counts.accerr.fetch_add(1, Relaxed);
                return Ok(false);
            }
            Err(f) if f.code == SegvCode::Oom && allowed && !page.own_frame => {
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

    /// Check word `i` of page `p` read as `v`, settling a "maybe zero".
    fn check_word(&mut self, p: u64, i: u64, v: u64) -> Result<(), String> {
        let page = &mut self.pages[p as usize];
        let want = page.data.word(p, i);
        if v == want {
            if want != 0 {
                page.maybe_zero = false;
            }
            return Ok(());
        }
        if page.maybe_zero && v == 0 {
            page.data = Data::Zero;
            page.maybe_zero = false;
            return Ok(());
        }
        Err(format!(
            "page {p} ({:#x}) word {i}: read {v:#x}, model {page:?} wants {want:#x}",
            self.base + p * PAGE_SIZE
        ))
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
        let (got, data) = if full {
            let buf: Vec<u8> = (0..WORDS)
                .flat_map(|i| full_word(tag, i).to_ne_bytes())
                .collect();
            (self.task.write(a, &buf), Data::Full(tag))
        } else {
            // A one-word write keeps the rest of the page: only on a page whose other words
            // the model knows are zero.
            let page = self.pages[p as usize];
            if matches!(page.data, Data::Full(_)) || page.maybe_zero {
                return self.write_page(p, true);
            }
            (
                self.task.write_u64(a + tag_index(p) * 8, tag),
                Data::Word(tag),
            )
        };
        if self.expect_access(p, true, got)? {
            let page = &mut self.pages[p as usize];
            page.data = data;
            page.maybe_zero = false;
            page.own_frame = true;
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
        let i = if self.rng.chance(70) {
            tag_index(p)
        } else {
            self.rng.below(WORDS)
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
        match mm.mmap(cpu, a, n * PAGE_SIZE, prot, flags, MapFile::None) {
            Ok(got) if got == a => {
                self.each(p, n, |page| {
                    *page = Page {
                        map: Some(Map { prot, shared }),
                        ..UNMAPPED
                    }
                });
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
        match mm.munmap_stats(cpu, self.addr(p), n * PAGE_SIZE) {
            Ok(st) => {
                if st.downgraded {
                    self.counts.munmaps_downgraded.fetch_add(1, Relaxed);
                }
                self.each(p, n, |page| *page = UNMAPPED);
            }
            Err(_) => self.resync(),
        }
        Ok(())
    }

    fn mprotect(&mut self) -> Result<(), String> {
        let (p, n) = self.range();
        let prot = self.prot();
        let (cpu, mm) = (self.cpu(), Arc::clone(self.mm()));
        match mm.mprotect(cpu, self.addr(p), n * PAGE_SIZE, prot) {
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
        // What the call does to a page it reached: DONTNEED zaps (a private page's data goes,
        // a shared page's stays in its object), FREE lets the kernel drop private data,
        // REMOVE punches the shared object's hole.
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
                    page.data = Data::Zero;
                    page.maybe_zero = false;
                } else {
                    page.maybe_zero = true;
                }
            }
        };
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

    /// Read back the tag word (or every word, for a full page) of every mapped page.
    fn verify(&mut self) -> Result<(), String> {
        for p in 0..WINDOW_PAGES {
            let page = self.pages[p as usize];
            if page.map.is_none_or(|m| !m.readable()) {
                continue;
            }
            if page.data == Data::Zero && !page.own_frame {
                continue; // reading it would only map the zero page (or run out of memory)
            }
            let a = self.addr(p);
            let words: Vec<u64> = match page.data {
                Data::Full(_) => (0..WORDS).collect(),
                _ => vec![tag_index(p)],
            };
            for i in words {
                match self.task.read_u64(a + i * 8) {
                    Ok(v) => self.check_word(p, i, v)?,
                    Err(f) if f.code == SegvCode::Oom && !page.own_frame => {}
                    Err(f) => return Err(format!("verify page {p}: {f}, model {page:?}")),
                }
            }
        }
        Ok(())
    }

    fn step(&mut self, n: u64) -> Result<(), String> {
        // Writes outweigh what drops data, so that the windows fill the machine.
        let op = match self.rng.below(100) {
            0..=27 => Op::WriteWord,
            28..=32 => Op::WriteFull,
            33..=38 => Op::Fill,
            39..=67 => Op::ReadWord,
            68..=70 => Op::ReadFull,
            71..=74 => Op::Mmap,
            75..=76 => Op::Munmap,
            77..=82 => Op::Mprotect,
            83..=87 => Op::Dontneed,
            88 => Op::Free,
            89 => Op::Remove,
            90..=92 => Op::Populate,
            93..=95 => Op::Hint,
            96..=97 => Op::Mlock,
            _ => Op::Munlock,
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
            _ => self.madvise(op).and_then(|()| self.check_maps()),
        }
        .map_err(|e| format!("{} (op {n}): {e}", OP_NAMES[op as usize]))
    }
}

/// The machine: 20 MiB for six 8 MiB windows (a few percent of the accesses run out of
/// memory), THP always, parallel free with a small threshold (so that munmaps and exits hand
/// jobs to the workqueue), munmap downgrade on.
fn stress_machine() -> Arc<Machine> {
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
    })
}

/// One thread: `ops` operations on its window of `mm` (or of mms of its own, exited every
/// [`EXIT_EVERY`] operations, when `own`).
fn worker(
    m: &Arc<Machine>,
    shared_mm: Option<&Arc<Mm>>,
    slot: usize,
    ops: u64,
    counts: &Counts,
    failures: &Failures,
    wd: &Watchdog,
) {
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
        base: 0x1000_0000_0000 + slot as u64 * (1 << 30),
        pages: vec![UNMAPPED; WINDOW_PAGES as usize],
        rng: Rng::new(usermm_testscale::seed_for(NAME) ^ (slot as u64 + 1)),
        counts,
        wd,
    };
    let fail = |e: String| failures.fail(format!("thread {slot}: {e}"));
    // The whole window mapped private and writable to begin with, as a program's heap is.
    let map_all = |w: &mut Window<'_>| {
        let (cpu, mm) = (w.cpu(), Arc::clone(w.mm()));
        let flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;
        let len = WINDOW_PAGES * PAGE_SIZE;
        let a = mm.mmap(
            cpu,
            w.base,
            len,
            PROT_READ | PROT_WRITE,
            flags,
            MapFile::None,
        );
        assert_eq!(a, Ok(w.base), "mapping the window");
        let map = Some(Map {
            prot: PROT_READ | PROT_WRITE,
            shared: false,
        });
        w.pages.fill(Page { map, ..UNMAPPED });
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
            wd.beat_doing(slot, Op::Verify as u64 | n << 8);
            if let Err(e) = w.verify() {
                fail(format!("before exit at op {n}: {e}"));
                break;
            }
            wd.beat_doing(slot, Op::Exit as u64 | n << 8);
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
        if let Err(e) = w.verify() {
            fail(format!("final verify: {e}"));
        }
    }
    if shared_mm.is_none() {
        let mm = Arc::clone(w.task.mm());
        drop(w);
        if failures.any.load(Relaxed) {
            // Tearing down a broken mm may trip a VM_BUG_ON and hide the first failure.
            std::mem::forget(mm);
        } else {
            mm.mmput(cpu);
        }
    }
    wd.retire(slot);
}

#[test]
fn windows_keep_their_data_under_pressure_parallel_free_downgrade_and_thp() {
    usermm_testscale::announce(NAME);
    let ops = usermm_testscale::scaled(OPS);
    let m = stress_machine();
    let free0 = free_pages(&m);
    let vm0 = m.vmstat_snapshot();
    let shared_mm = m.new_mm(C0).expect("mm");
    let counts = Counts::default();
    let failures = Failures::default();
    let wd = Watchdog::start(NAME, THREADS, Duration::from_secs(120), |slot, note| {
        let op = (note & 0xff) as usize;
        format!(
            "thread {slot}: {} (op {})",
            OP_NAMES.get(op).unwrap_or(&"?"),
            note >> 8
        )
    });
    std::thread::scope(|s| {
        for slot in 0..THREADS {
            let (m, counts, failures, wd) = (&m, &counts, &failures, &wd);
            let mm = (slot < SHARED).then_some(&shared_mm);
            s.spawn(move || worker(m, mm, slot, ops, counts, failures, wd));
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
    let summary = format!(
        "{} ops ({} accesses: {} out of memory, {} SEGV_MAPERR, {} SEGV_ACCERR as modelled), \
         {} downgraded munmaps, {} exits, {} resyncs; thp_fault_alloc {}, \
         thp_fault_fallback {}, free jobs {}, oom {}",
        c.ops.load(Relaxed),
        c.accesses.load(Relaxed),
        c.oom.load(Relaxed),
        c.maperr.load(Relaxed),
        c.accerr.load(Relaxed),
        c.munmaps_downgraded.load(Relaxed),
        c.exits.load(Relaxed),
        c.resyncs.load(Relaxed),
        delta.get(VmItem::ThpFaultAlloc),
        delta.get(VmItem::ThpFaultFallback),
        delta.get(VmItem::FreeJobsQueued),
        delta.get(VmItem::Oom),
    );
    if !msgs.is_empty() {
        // Tearing down a broken mm may trip a VM_BUG_ON and hide the first failure.
        std::mem::forget(shared_mm);
        panic!(
            "{NAME}: {}\n{summary}\nreplay: {}",
            msgs.join("\n"),
            usermm_testscale::replay()
        );
    }
    eprintln!("{NAME}: {summary}");
    // Every out-of-memory fault the threads saw was counted as one, and each was allowed.
    assert!(
        delta.get(VmItem::Oom) as u64 >= c.oom.load(Relaxed),
        "{summary}"
    );
    // What the test claims to run under: memory pressure, THP, downgraded munmaps.
    assert!(delta.get(VmItem::Oom) > 0, "never out of memory: {summary}");
    assert!(delta.get(VmItem::ThpFaultAlloc) > 0, "no THP: {summary}");
    assert!(c.munmaps_downgraded.load(Relaxed) > 0, "{summary}");
    assert_eq!(
        c.exits.load(Relaxed),
        OWN as u64 * (ops / EXIT_EVERY),
        "{summary}"
    );
    exit_and_check(&m, shared_mm, free0);
    assert!(
        delta.get(VmItem::FreeJobsQueued) > 0,
        "no teardown went through the workqueue: {summary}"
    );
    usermm_testscale::report(NAME, c.ops.load(Relaxed));
}
