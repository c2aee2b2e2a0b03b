//! The calls a thread makes on its window: mmap, munmap, mprotect, madvise, mlock, mremap,
//! fork and exit, each with the model's update.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{Ordering::Relaxed, Ordering::SeqCst};
use std::sync::Arc;

use usermm::mm::mmap::*;
use usermm::{Errno, Task, PAGE_SIZE};

use crate::model::*;
use crate::window::*;
use crate::{Counts, WINDOW_PAGES};

impl Window<'_> {
    pub(crate) fn mmap(&mut self) -> Result<(), String> {
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

    pub(crate) fn munmap(&mut self) -> Result<(), String> {
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

    pub(crate) fn mprotect(&mut self) -> Result<(), String> {
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

    pub(crate) fn madvise(&mut self, op: Op) -> Result<(), String> {
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

    pub(crate) fn mlock(&mut self, on: bool) -> Result<(), String> {
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
    pub(crate) fn take_pages(&mut self, p: u64, n: u64) -> Vec<Page> {
        self.pages[p as usize..(p + n) as usize]
            .iter_mut()
            .map(|pg| std::mem::replace(pg, Page::unmapped()))
            .collect()
    }

    /// The model after `mremap` moved (or resized in place) the `old` pages at `p`, all in one
    /// VMA, to `new` pages at `t`: the first pages are the old ones (data, "maybe zero" and
    /// frame move with them); the rest are new — zero, or the next indices of the shared
    /// object, past its size.
    pub(crate) fn remapped(&mut self, p: u64, old: u64, new: u64) -> Vec<Page> {
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

    pub(crate) fn put_pages(&mut self, t: u64, pages: Vec<Page>) {
        for (i, pg) in pages.into_iter().enumerate() {
            self.pages[t as usize + i] = pg;
        }
    }

    /// Unmap `[a, a + n pages)` after a failed `mremap` (what it may have moved there goes).
    pub(crate) fn munmap_after(&mut self, a: u64, n: u64) -> Result<(), String> {
        let (cpu, mm) = (self.cpu(), Arc::clone(self.mm()));
        mm.munmap(cpu, a, n * PAGE_SIZE)
            .map_err(|e| format!("munmap({a:#x}, {n} pages) after a failed mremap: {e}"))
    }

    /// `mremap` within the window: shrink, grow in place (or move away with
    /// `MREMAP_MAYMOVE`), or move with `MREMAP_FIXED` (resizing, or not: then the range may
    /// span several VMAs and gaps).
    pub(crate) fn mremap(&mut self) -> Result<(), String> {
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
    pub(crate) fn moved_away(&mut self, p: u64, old: u64, new: u64, at: u64) -> Result<(), String> {
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
    pub(crate) fn fork(&mut self) -> Result<(), String> {
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
    pub(crate) fn exit_side(&mut self) -> Result<(), String> {
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
    pub(crate) fn retire_current(&mut self) -> Result<(), String> {
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
    pub(crate) fn verify(&mut self) -> Result<(), String> {
        for p in 0..WINDOW_PAGES {
            let a = self.addr(p);
            check_page(&self.task, a, &mut self.pages[p as usize])
                .map_err(|e| format!("verify page {p} ({a:#x}): {e}"))?;
        }
        Ok(())
    }

    pub(crate) fn step(&mut self, n: u64) -> Result<(), String> {
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
