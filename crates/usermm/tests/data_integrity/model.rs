//! The per-page model: what a page holds, how it is mapped, and how a read is checked.

use std::cell::RefCell;
use std::rc::Rc;

use usermm::mm::mmap::*;
use usermm::{Mm, SegvCode, Task, PAGE_SIZE};

use crate::{THREADS, WINDOWS_BASE, WINDOW_PAGES, WINDOW_STRIDE, WORDS};

/// The word of a page that a `Word` write of `tag` sets.
pub(crate) fn tag_index(tag: u64) -> u64 {
    (tag >> 32) % WORDS
}

/// Word `i` of a page filled from `tag` (odd, so never zero).
pub(crate) fn full_word(tag: u64, i: u64) -> u64 {
    (tag ^ (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1
}

/// What a page holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Data {
    Zero,
    /// Word `tag_index(tag)` is the tag, the rest zero.
    Word(u64),
    /// Every word `i` is `full_word(tag, i)`.
    Full(u64),
}

impl Data {
    pub(crate) fn word(self, i: u64) -> u64 {
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
pub(crate) struct Cell {
    pub(crate) data: Data,
    /// The data may have been dropped (reads may also see zero).
    pub(crate) maybe_zero: bool,
}

pub(crate) const ZERO: Cell = Cell {
    data: Data::Zero,
    maybe_zero: false,
};

/// The model of one shmem object (`MAP_SHARED|MAP_ANONYMOUS`): its pages by index, as many
/// as its size. Shared by every model page that maps it, on both sides of a fork.
pub(crate) type Obj = Rc<RefCell<Vec<Cell>>>;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Map {
    pub(crate) prot: u32,
    pub(crate) shared: bool,
}

impl Map {
    /// x86: any access flag makes a page readable (`VM_ACCESS_FLAGS`).
    pub(crate) fn readable(self) -> bool {
        self.prot & (PROT_READ | PROT_WRITE | PROT_EXEC) != 0
    }

    pub(crate) fn writable(self) -> bool {
        self.prot & PROT_WRITE != 0
    }
}

#[derive(Clone)]
pub(crate) struct Page {
    pub(crate) map: Option<Map>,
    /// A private page's contents (unused when `obj` is set).
    pub(crate) own: Cell,
    /// A shared page: its object and index.
    pub(crate) obj: Option<(Obj, u64)>,
    /// An entry maps a frame of its own (written since its last zap or fork): no access to
    /// it may run out of memory — except a write after another thread forked the shared mm
    /// (the page may be copy-on-write now), which `epoch` tells.
    pub(crate) own_frame: bool,
    /// How many forks of the shared mm had begun when the page was last written, if none was
    /// under way then.
    pub(crate) epoch: Option<u64>,
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
    pub(crate) fn unmapped() -> Page {
        Page {
            map: None,
            own: ZERO,
            obj: None,
            own_frame: false,
            epoch: None,
        }
    }

    /// A page of a new mapping: private and zero, or index `i` of the shared object `obj`.
    pub(crate) fn new(map: Map, obj: Option<(Obj, u64)>) -> Page {
        Page {
            map: Some(map),
            obj,
            ..Page::unmapped()
        }
    }

    /// Past its shared object's size: every access the protection allows is a SIGBUS.
    pub(crate) fn beyond(&self) -> bool {
        self.obj
            .as_ref()
            .is_some_and(|(o, i)| *i >= o.borrow().len() as u64)
    }

    pub(crate) fn cell(&self) -> Cell {
        match &self.obj {
            Some((o, i)) => o.borrow().get(*i as usize).copied().unwrap_or(ZERO),
            None => self.own,
        }
    }

    pub(crate) fn set_cell(&mut self, c: Cell) {
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
    pub(crate) fn check_word(&mut self, i: u64, v: u64) -> Result<(), String> {
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

/// The perms of `/proc/<pid>/maps` as a protection and a sharing.
pub(crate) fn parse_perms(p: &str) -> Option<Map> {
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
pub(crate) fn vmas_in(mm: &Mm, lo: u64, hi: u64) -> Vec<(u64, u64, Map)> {
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
pub(crate) fn outside_windows(a: u64, len: u64) -> bool {
    (0..THREADS as u64).all(|t| {
        let lo = WINDOWS_BASE + t * WINDOW_STRIDE;
        a + len <= lo || a >= lo + WINDOW_PAGES * PAGE_SIZE
    })
}

/// Read back a page the model knows, at `a`: its tag word, or every word of a full page.
/// Pages with nothing to check (zero without a frame, past their object) are skipped.
pub(crate) fn check_page(task: &Task, a: u64, page: &mut Page) -> Result<(), String> {
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
