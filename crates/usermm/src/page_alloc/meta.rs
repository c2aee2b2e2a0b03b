//! `struct page`: the per-frame metadata, and lists of frames linked through it.
//!
//! Mirrors `include/linux/mm_types.h` (`struct page`), `include/linux/page-flags.h` and the
//! `lru`/`buddy_list`/`pcp_list` unions: a frame is on at most one list at a time (buddy free
//! list, a per-CPU list, or an LRU list), so one pair of links serves all three.
//!
//! # Layout (40 bytes, asserted by a test; the kernel spends 64)
//! | field | meaning |
//! |---|---|
//! | `flags` | `PG_*` bits below |
//! | `refcount` | `_refcount`: 0 when free |
//! | `mapcount` | `_mapcount` + 1: page-table entries mapping the page (0 when unmapped) |
//! | `private` | buddy head: its order; tail page: the head's PFN; table page: entries in use; allocated THP head: `_entire_mapcount` (PMD mappings, `mm/rmap.rs`) |
//! | `next`, `prev` | list links as PFNs ([`NIL`] = none) — 32-bit, so at most 16 TiB; on a PMD table page `next` heads its deposit list, on a deposited table it links the list (`pmd_huge_pte`, `pgtable->lru`) |
//! | `order` | compound order on a head page, or the order of a block on a pcp list |
//! | `ptl` | the split page-table lock (`ptdesc->ptl`) of a page-table page |
//! | `line` | not the kernel's: the virtual-time line model's state of this `struct page`'s cache line (its last toucher with the run's generation, two fill stamps; `vtime/lines.rs`) |
//!
//! The engine's own fields take 28 bytes. `line` takes 12 more, so that a virtual run's touch
//! of a `struct page` finds its state beside the metadata the engine has just used, in the
//! host line it already brought in, instead of in a table of its own by PFN (a host cache
//! miss per page: `vtime/lines.rs`). A wall-clock machine never uses `line` and pays for it
//! in memmap size (40 bytes a frame instead of 28) and in host lines per run of frames. Callgrind (`--cache-sim=yes --LL=8388608,16,64`) of
//! `usermm bench --only P --no-host --repeat 1 --size 64M`, the touch loop inclusive per
//! fault, 28 → 40 bytes: `zero-read-4k` 1002 → 998 instructions, LL misses unchanged (4381
//! → 4393 in the run); `populate-4k` 2638 → 2612 instructions, D1 read misses +2.6 %, LL
//! misses +1.1 % (the frames' zeroing dominates them). The instructions move with the
//! compiler's inlining from build to build (one intermediate build of this change had
//! `zero-read-4k` at 1061: `find_vma`'s B-tree search out of line), not with the layout. The field is
//! last so that the engine's fields keep their offsets.
//!
//! # Invariants
//! 1. Every frame is exactly one of: the head of a free buddy block (`PG_buddy`, order in
//!    `private`), inside a free block (all zero), on a pcp list (`PG_pcp`), or allocated
//!    (`refcount > 0` on the head, `PG_tail` on the tails of a compound page).
//! 2. Links are written only under the lock of the list the frame is on: `zone.lock` (buddy),
//!    the pcp lock, the node's `lru_lock`, or the PMD lock of the PMD table whose deposit list
//!    holds a deposited table.
//! 3. All-zero is "inside a free block": the metadata array is lazily zeroed host memory.
//!    (`line` is outside the engine's invariants: all-zero there is "never touched", and a
//!    frame keeps its line state whatever the engine does with it.)
//! 4. Only the virtual-time runtime reads or writes `line`, on the one host thread of a run,
//!    between two synchronisation points (`vtime/lines.rs`); the engine never does.
//!
//! # Differences from Linux
//! `_mapcount` is 0-based (Linux starts at −1). There are no migratetypes and no page
//! owner/memcg fields. `PG_pcp` does not exist in Linux; it makes `validate()` exact.

#![expect(unsafe_code)] // fenced (lib.rs, "Unsafe"): `PageMeta: ZeroValid`, the promise that all-zero metadata is valid

use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU8, Ordering::Relaxed};

use crate::addr::Pfn;
use crate::backing::ZeroValid;
use crate::sync::primitive::atomic::AtomicI32 as PrimAtomicI32;
use crate::sync::vhook::{Clock, Current, ListOp};
use crate::sync::PtLock;
use crate::vtime::lines::{LineStore, PageLine};

/// No frame: the end of a list.
pub const NIL: u32 = u32::MAX;

/// `PG_buddy`: head of a free block in a buddy free list.
pub const PG_BUDDY: u32 = 1 << 0;
/// On a per-CPU free list (engine-only flag).
pub const PG_PCP: u32 = 1 << 1;
/// `PG_lru`: on a node's LRU list.
pub const PG_LRU: u32 = 1 << 2;
/// `PG_head`: first page of a compound page.
pub const PG_HEAD: u32 = 1 << 3;
/// Tail page of a compound page (`compound_head` bit 0 in Linux).
pub const PG_TAIL: u32 = 1 << 4;
/// `PG_table` (`PageTable`): a page-table page.
pub const PG_PGTABLE: u32 = 1 << 5;
/// `PageAnon`: mapped anonymous memory (Linux tags `page->mapping`).
pub const PG_ANON: u32 = 1 << 6;
/// `PG_reserved`: never freed (the zero page, the huge zero page while held).
pub const PG_RESERVED: u32 = 1 << 7;
/// Held in a per-CPU LRU-add batch, not yet on the LRU.
pub const PG_LRU_BATCH: u32 = 1 << 8;
/// `PG_mlocked` / `PG_unevictable`.
pub const PG_MLOCKED: u32 = 1 << 9;
/// Backs a populated percpu chunk page.
pub const PG_PERCPU: u32 = 1 << 10;
/// A hugetlb page from the `nr_hugepages` pool.
pub const PG_HUGETLB: u32 = 1 << 11;
/// Gather batch page of an `mmu_gather` (kernel memory, not user memory).
pub const PG_KERNEL: u32 = 1 << 12;
/// `PageAnonExclusive`: this anonymous page is known to be mapped by one process only, so a
/// write-protected PTE to it may be made writable without a fault (`can_change_pte_writable`).
/// Set when the page is mapped new or reused by a write fault; cleared when fork shares it;
/// the other side's exit does not set it again (the next write fault does).
pub const PG_ANON_EXCLUSIVE: u32 = 1 << 13;

/// Metadata of one 4 KiB frame.
///
/// The fields are crate-private: only the allocator and the mm change them, under the locks
/// the module doc lists. Outside the crate, [`PageMeta::flags`], [`PageMeta::test`],
/// [`PageMeta::ref_count`], [`PageMeta::map_count`] and [`PageMeta::order`] read them.
#[derive(Debug)]
#[repr(C)]
pub struct PageMeta {
    pub(crate) flags: AtomicU32,
    /// A loom atomic under loom (`sync::primitive`), as is `mapcount`: the fault/zap race.
    pub(crate) refcount: PrimAtomicI32,
    pub(crate) mapcount: PrimAtomicI32,
    pub(crate) private: AtomicU32,
    pub(crate) next: AtomicU32,
    pub(crate) prev: AtomicU32,
    pub(crate) pt_entries: AtomicU16,
    pub(crate) order: AtomicU8,
    /// The split PTE-page lock of a page-table page (`ptlock_ptr`).
    pub(crate) ptl: PtLock,
    /// The virtual-time line model's state of this frame's `struct page` line: its last
    /// toucher (with the run's generation) and two fill stamps (`vtime/lines.rs`). Only a
    /// virtual run's runtime reads or writes it, between two synchronisation points of the
    /// running context; the engine never does.
    pub(crate) line: PageLine,
}

// SAFETY: every field is an integer atomic (valid at zero) or a `PtLock`, which is one
// `AtomicU8` whose all-zero state is "unlocked" by its own definition (`sync/ptlock.rs`,
// checked by the test `ptl_zero_is_unlocked`). Under `--cfg loom` the `PtLock` and the two
// counts are loom atomics, indexes into the model's object store: all-zero is still a valid bit
// pattern (integers, no niche), but not usable, so under loom the array is built with
// `zeroed` instead (`ZeroedArray::new`).
unsafe impl ZeroValid for PageMeta {
    #[cfg(loom)]
    fn zeroed() -> Self {
        PageMeta {
            flags: AtomicU32::new(0),
            refcount: PrimAtomicI32::new(0),
            mapcount: PrimAtomicI32::new(0),
            private: AtomicU32::new(0),
            next: AtomicU32::new(0),
            prev: AtomicU32::new(0),
            pt_entries: AtomicU16::new(0),
            order: AtomicU8::new(0),
            ptl: PtLock::new(),
            line: PageLine::new(),
        }
    }
}

impl PageMeta {
    #[inline]
    pub fn flags(&self) -> u32 {
        self.flags.load(Relaxed)
    }
    #[inline]
    pub fn test(&self, f: u32) -> bool {
        self.flags.load(Relaxed) & f != 0
    }
    #[inline]
    pub(crate) fn set(&self, f: u32) {
        self.flags.fetch_or(f, Relaxed);
    }
    #[inline]
    pub(crate) fn clear(&self, f: u32) {
        self.flags.fetch_and(!f, Relaxed);
    }
    #[inline]
    pub fn ref_count(&self) -> i32 {
        self.refcount.load(Relaxed)
    }
    #[inline]
    pub fn map_count(&self) -> i32 {
        self.mapcount.load(Relaxed)
    }
    /// The compound order of a head page (0 for an order-0 page).
    #[inline]
    pub fn order(&self) -> u8 {
        self.order.load(Relaxed)
    }

    /// `ptdesc->pmd_huge_pte` of a PMD table page: the first table deposited under its huge
    /// PMDs. A table page is on no buddy, pcp or LRU list, so its `next` link is free for
    /// this. Under the table's PMD lock.
    #[inline]
    pub(crate) fn pmd_huge_pte(&self) -> Option<Pfn> {
        pfn_of(self.next.load(Relaxed))
    }
    #[inline]
    pub(crate) fn set_pmd_huge_pte(&self, first: Option<Pfn>) {
        self.next.store(link_of(first), Relaxed);
    }

    /// The next table on the deposit list this deposited table is on (`pgtable->lru`), in
    /// the same `next` link. Under the PMD lock of the list's PMD table.
    #[inline]
    pub(crate) fn deposit_next(&self) -> Option<Pfn> {
        pfn_of(self.next.load(Relaxed))
    }
    #[inline]
    pub(crate) fn set_deposit_next(&self, next: Option<Pfn>) {
        self.next.store(link_of(next), Relaxed);
    }
}

/// The line model finds a frame's `struct page` line state in its metadata
/// (`vtime/lines.rs`).
impl LineStore for [PageMeta] {
    #[inline(always)]
    fn line(&self, pfn: u64) -> Option<&PageLine> {
        self.get(pfn as usize).map(|m| &m.line)
    }
}

/// A list link as a frame ([`NIL`]: none).
#[inline]
fn pfn_of(link: u32) -> Option<Pfn> {
    (link != NIL).then_some(Pfn(u64::from(link)))
}

/// A frame as a list link (32-bit: see the layout table).
#[inline]
fn link_of(pfn: Option<Pfn>) -> u32 {
    pfn.map_or(NIL, |p| p.0 as u32)
}

/// A doubly linked list of frames, linked through [`PageMeta::next`]/[`PageMeta::prev`]. The
/// list head lives in the structure that owns the list (a free area, a pcp, an lruvec), under
/// that structure's lock.
#[derive(Debug)]
pub(crate) struct PfnList {
    head: u32,
    tail: u32,
    len: u64,
}

impl Default for PfnList {
    fn default() -> Self {
        Self {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
}

impl PfnList {
    #[inline]
    pub(crate) fn len(&self) -> u64 {
        self.len
    }
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The list head's own line (its address): what a virtual run prices as the head.
    #[inline]
    fn head_line(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// `list_add`: `pfn` becomes the first entry; its hook on clock `c` (`vhook::Clock`: the
    /// hooks of an operation that decided its clock once).
    #[inline]
    pub(crate) fn push_front_on(&mut self, c: impl Clock, meta: &[PageMeta], pfn: Pfn) {
        let head = self.head_line();
        self.push_front_at(c, meta, pfn, head);
    }

    /// [`Self::push_front_on`] with the head priced as the line `head` (a key of the line
    /// model: a list whose head shares a line with other fields, `FreeArea`).
    #[inline]
    pub(crate) fn push_front_at(
        &mut self,
        c: impl Clock,
        meta: &[PageMeta],
        pfn: Pfn,
        head: usize,
    ) {
        // The new entry, the old first entry's `prev`, the head.
        c.mem_touch_list(ListOp::Add, || head, [pfn.0 as u32, self.head, NIL]);
        self.link_between(meta, pfn, NIL, self.head);
    }

    /// `list_add_tail`: `pfn` becomes the last entry.
    #[inline]
    pub(crate) fn push_back(&mut self, meta: &[PageMeta], pfn: Pfn) {
        self.push_back_on(Current, meta, pfn);
    }

    /// [`Self::push_back`] on clock `c`.
    #[inline]
    pub(crate) fn push_back_on(&mut self, c: impl Clock, meta: &[PageMeta], pfn: Pfn) {
        let head = self.head_line();
        self.push_back_at(c, meta, pfn, head);
    }

    /// [`Self::push_back_on`] with the head priced as the line `head`.
    #[inline]
    pub(crate) fn push_back_at(&mut self, c: impl Clock, meta: &[PageMeta], pfn: Pfn, head: usize) {
        // The new entry, the old last entry's `next`, the head.
        c.mem_touch_list(ListOp::Add, || head, [pfn.0 as u32, self.tail, NIL]);
        self.link_between(meta, pfn, self.tail, NIL);
    }

    /// `__list_add`: link `pfn` between the adjacent entries `prev` and `next`, `NIL` standing
    /// for the head on either side.
    #[inline]
    fn link_between(&mut self, meta: &[PageMeta], pfn: Pfn, prev: u32, next: u32) {
        let p = pfn.0 as u32;
        let m = &meta[pfn.index()];
        m.prev.store(prev, Relaxed);
        m.next.store(next, Relaxed);
        if next == NIL {
            self.tail = p;
        } else {
            meta[next as usize].prev.store(p, Relaxed);
        }
        if prev == NIL {
            self.head = p;
        } else {
            meta[prev as usize].next.store(p, Relaxed);
        }
        self.len += 1;
    }

    /// Unlink `pfn`, which must be on this list.
    #[inline]
    pub(crate) fn remove(&mut self, meta: &[PageMeta], pfn: Pfn) {
        self.remove_on(Current, meta, pfn);
    }

    /// [`Self::remove`] on clock `c`.
    #[inline]
    pub(crate) fn remove_on(&mut self, c: impl Clock, meta: &[PageMeta], pfn: Pfn) {
        let head = self.head_line();
        self.remove_at(c, meta, pfn, head);
    }

    /// [`Self::remove_on`] with the head priced as the line `head_line`.
    #[inline]
    pub(crate) fn remove_at(
        &mut self,
        c: impl Clock,
        meta: &[PageMeta],
        pfn: Pfn,
        head_line: usize,
    ) {
        let m = &meta[pfn.index()];
        let (n, p) = (m.next.load(Relaxed), m.prev.load(Relaxed));
        // `list_del`: the entry and both neighbours; the head only when the entry was first
        // or last (an empty list's head is rewritten too).
        c.mem_touch_list(
            ListOp::Del,
            || if p == NIL || n == NIL { head_line } else { 0 },
            [pfn.0 as u32, p, n],
        );
        if p == NIL {
            debug_assert_eq!(self.head, pfn.0 as u32);
            self.head = n;
        } else {
            meta[p as usize].next.store(n, Relaxed);
        }
        if n == NIL {
            debug_assert_eq!(self.tail, pfn.0 as u32);
            self.tail = p;
        } else {
            meta[n as usize].prev.store(p, Relaxed);
        }
        m.next.store(NIL, Relaxed);
        m.prev.store(NIL, Relaxed);
        self.len -= 1;
    }

    /// `list_first_entry` + `list_del`, on clock `c`.
    #[inline]
    pub(crate) fn pop_front_on(&mut self, c: impl Clock, meta: &[PageMeta]) -> Option<Pfn> {
        let head = self.head_line();
        self.pop_at(c, meta, self.head, head)
    }

    /// [`Self::pop_front_on`] with the head priced as the line `head`.
    #[inline]
    pub(crate) fn pop_front_at(
        &mut self,
        c: impl Clock,
        meta: &[PageMeta],
        head: usize,
    ) -> Option<Pfn> {
        self.pop_at(c, meta, self.head, head)
    }

    /// `list_last_entry` + `list_del`, on clock `c`.
    #[inline]
    pub(crate) fn pop_back_on(&mut self, c: impl Clock, meta: &[PageMeta]) -> Option<Pfn> {
        let head = self.head_line();
        self.pop_at(c, meta, self.tail, head)
    }

    /// Unlink and return `end`, the first or the last entry (`None`: `NIL`, the list is
    /// empty), the head priced as the line `head`.
    #[inline]
    fn pop_at(&mut self, c: impl Clock, meta: &[PageMeta], end: u32, head: usize) -> Option<Pfn> {
        (end != NIL).then(|| {
            let pfn = Pfn(end as u64);
            self.remove_at(c, meta, pfn, head);
            pfn
        })
    }

    /// Walk the list head to tail (for `validate()`; the caller holds the list's lock).
    pub(crate) fn iter<'a>(&self, meta: &'a [PageMeta]) -> impl Iterator<Item = Pfn> + 'a {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            (cur != NIL).then(|| {
                let p = cur;
                cur = meta[p as usize].next.load(Relaxed);
                Pfn(p as u64)
            })
        })
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::backing::ZeroedArray;
    use crate::sync::vhook::Wall;

    #[test]
    fn page_meta_is_28_bytes_of_engine_and_12_of_line_state() {
        assert_eq!(std::mem::size_of::<PageMeta>(), 40);
        assert_eq!(std::mem::offset_of!(PageMeta, line), 28);
        // 4-byte aligned: a frame's metadata is packed at a 40-byte stride.
        assert_eq!(std::mem::align_of::<PageMeta>(), 4);
    }

    #[test]
    fn ptl_zero_is_unlocked() {
        let arr = ZeroedArray::<PageMeta>::new(4).unwrap();
        let m = &arr.as_slice()[2];
        assert_eq!(m.flags(), 0);
        let g = m
            .ptl
            .try_lock(&crate::sync::class::PTL)
            .expect("an all-zero ptl must be unlocked");
        assert!(m.ptl.try_lock(&crate::sync::class::PTL).is_none());
        drop(g);
        assert!(m.ptl.try_lock(&crate::sync::class::PTL).is_some());
    }

    #[test]
    fn list_push_pop_remove() {
        let arr = ZeroedArray::<PageMeta>::new(8).unwrap();
        let meta = arr.as_slice();
        let mut l = PfnList::default();
        for i in 0..5 {
            l.push_back(meta, Pfn(i));
        }
        l.push_front_on(Current, meta, Pfn(7));
        assert_eq!(
            l.iter(meta).map(|p| p.0).collect::<Vec<_>>(),
            [7, 0, 1, 2, 3, 4]
        );
        l.remove(meta, Pfn(2));
        l.remove(meta, Pfn(7));
        l.remove(meta, Pfn(4));
        assert_eq!(l.iter(meta).map(|p| p.0).collect::<Vec<_>>(), [0, 1, 3]);
        assert_eq!(l.pop_back_on(Current, meta), Some(Pfn(3)));
        assert_eq!(l.pop_front_on(Wall, meta), Some(Pfn(0)));
        assert_eq!(l.pop_front_on(Current, meta), Some(Pfn(1)));
        assert_eq!(l.pop_front_on(Current, meta), None);
        assert!(l.is_empty());
    }
}
