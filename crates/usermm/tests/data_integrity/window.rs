//! A thread's window: its two sides, the accesses and their checks, the model kept in step
//! with the maps lines.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{Ordering::Relaxed, Ordering::SeqCst};
use std::sync::Arc;

use usermm::mm::mmap::*;
use usermm::{CpuId, Mm, SegvCode, Task, PAGE_SIZE};
use usermm_testscale::{Rng, Watchdog};

use crate::model::*;
use crate::{Counts, WINDOW_PAGES, WORDS};

/// Operation codes, for the watchdog's note and the counts.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(u8)]
pub(crate) enum Op {
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

pub(crate) const OP_NAMES: [&str; 21] = [
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

/// One side of a fork: a task on an mm, and the model of the window in it.
pub(crate) struct Side {
    pub(crate) task: Task,
    pub(crate) pages: Vec<Page>,
    /// The child of a fork still alive beside its parent (the root side of a thread — the
    /// shared mm, or an own mm, or a child whose parent exited — is not).
    pub(crate) child: bool,
}

/// One thread's window and its model: the side it works on, and the other side of a fork.
pub(crate) struct Window<'a> {
    pub(crate) slot: usize,
    pub(crate) task: Task,
    pub(crate) pages: Vec<Page>,
    pub(crate) child: bool,
    pub(crate) other: Option<Side>,
    /// The thread's mms are its own (it may exit a fork's parent first).
    pub(crate) own_mm: bool,
    pub(crate) base: u64,
    pub(crate) rng: Rng,
    pub(crate) counts: &'a Counts,
    pub(crate) wd: &'a Watchdog,
    /// The thread's last calls (not its reads), for a failure's message.
    pub(crate) trace: std::collections::VecDeque<String>,
}

impl Window<'_> {
    pub(crate) fn mm(&self) -> &Arc<Mm> {
        self.task.mm()
    }

    pub(crate) fn cpu(&self) -> CpuId {
        self.task.cpu()
    }

    pub(crate) fn addr(&self, page: u64) -> u64 {
        self.base + page * PAGE_SIZE
    }

    /// Note a call for the failure message (the last 40 are kept).
    pub(crate) fn trace(&mut self, what: std::fmt::Arguments<'_>) {
        if self.trace.len() == 40 {
            self.trace.pop_front();
        }
        let id = self.mm().id();
        self.trace.push_back(format!("mm {id}: {what}"));
    }

    /// Work on the other side of the fork from now on.
    pub(crate) fn switch_sides(&mut self) {
        if let Some(o) = &mut self.other {
            std::mem::swap(&mut self.task, &mut o.task);
            std::mem::swap(&mut self.pages, &mut o.pages);
            std::mem::swap(&mut self.child, &mut o.child);
        }
    }

    /// A range of pages for a call that drops data: a few pages, rarely an aligned 2 MiB.
    pub(crate) fn small_range(&mut self) -> (u64, u64) {
        if self.rng.chance(1) {
            return (self.rng.below(WINDOW_PAGES / 512) * 512, 512);
        }
        let n = 1 + self.rng.below(8);
        (self.rng.below(WINDOW_PAGES - n), n)
    }

    /// A range of pages: mostly small, sometimes a whole aligned 2 MiB (THP-sized) or one
    /// crossing a PMD boundary.
    pub(crate) fn range(&mut self) -> (u64, u64) {
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
    pub(crate) fn prot(&mut self) -> u32 {
        if self.rng.chance(60) {
            return PROT_READ | PROT_WRITE;
        }
        self.rng
            .pick(&[PROT_READ, PROT_NONE, PROT_WRITE, PROT_READ | PROT_EXEC])
    }

    /// The window's VMAs as `(first page, pages, map)`, clipped to the window.
    pub(crate) fn window_vmas(&self) -> Vec<(u64, u64, Map)> {
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
    pub(crate) fn seen(&self) -> Vec<Option<Map>> {
        let mut seen = vec![None; WINDOW_PAGES as usize];
        for (p, n, map) in self.window_vmas() {
            seen[p as usize..(p + n) as usize].fill(Some(map));
        }
        seen
    }

    /// Compare the model's mappings with the window's maps lines.
    pub(crate) fn check_maps(&self) -> Result<(), String> {
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
    pub(crate) fn resync(&mut self) {
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
    pub(crate) fn expect_access(
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
    pub(crate) fn has_frame(&self, page: &Page, write: bool) -> bool {
        let begun = self.counts.shared_forks_begun.load(SeqCst);
        let forked = !self.own_mm && !self.child && page.epoch != Some(begun);
        page.own_frame && !(write && forked)
    }

    /// Check word `i` of page `p` read as `v`, settling a "maybe zero".
    pub(crate) fn check_word(&mut self, p: u64, i: u64, v: u64) -> Result<(), String> {
        let a = self.addr(p);
        self.pages[p as usize]
            .check_word(i, v)
            .map_err(|e| format!("page {p} ({a:#x}) {e}"))
    }

    pub(crate) fn write(&mut self, full: bool) -> Result<(), String> {
        let p = self.rng.below(WINDOW_PAGES);
        self.write_page(p, full)
    }

    /// A run of pages written one word each (full pages where the model needs it), like a
    /// program walking its heap.
    pub(crate) fn fill(&mut self) -> Result<(), String> {
        let n = 1 + self.rng.below(64);
        let p = self.rng.below(WINDOW_PAGES - n);
        (p..p + n).try_for_each(|q| self.write_page(q, false))
    }

    pub(crate) fn write_page(&mut self, p: u64, full: bool) -> Result<(), String> {
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

    pub(crate) fn read(&mut self, full: bool) -> Result<(), String> {
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
    pub(crate) fn each(&mut self, p: u64, n: u64, f: impl Fn(&mut Page)) {
        for page in &mut self.pages[p as usize..(p + n) as usize] {
            f(page);
        }
    }
}
