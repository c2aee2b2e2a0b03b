//! `pcpu_chunk_lists[]`: chunks sorted into slots by the largest free run they can serve.
//!
//! ```text
//!  slot 0          chunks with no usable free run, and failed fits demoted from slots 1–2
//!  slot 1..=S      __pcpu_size_to_slot(contig_hint × 4): 1–15 B → 1, 16–31 → 2, 32–63 → 3, …
//!  sidelined S+1   isolated, already depopulated (searched after every active slot)
//!  free      S+2   entirely free chunks (searched last; balance work keeps one)
//!  to_depop  S+3   isolated, waiting for the balance work to depopulate (never searched)
//! ```
//! `S = __pcpu_size_to_slot(unit_size)`: 16 for a 256 KiB unit, giving 20 slots.
//!
//! The lists are intrusive doubly linked lists threaded through chunk-table indices (the
//! kernel's `chunk->list`), so moving a chunk to the head or tail of a slot is O(1) and an
//! iteration can read `next` before the current chunk moves (`list_for_each_entry_safe`).
//!
//! Protected by `pcpu_lock`, like everything the lists link.

/// No chunk / not on a list.
pub(crate) const NIL: u32 = u32::MAX;

/// `PCPU_SLOT_BASE_SHIFT`: 1–15 bytes share slot 1.
pub const PCPU_SLOT_BASE_SHIFT: u32 = 5;

/// `PCPU_SLOT_FAIL_THRESHOLD`: a chunk in a slot below this that cannot fit a request is moved to
/// slot 0, so that small requests stop rescanning it.
pub const PCPU_SLOT_FAIL_THRESHOLD: usize = 3;

/// `__pcpu_size_to_slot`: `max(fls(size) − 5 + 2, 1)`.
#[doc(alias = "__pcpu_size_to_slot")]
pub fn size_to_slot_raw(size: u64) -> usize {
    let fls = 64 - size.leading_zeros();
    (fls as i64 - PCPU_SLOT_BASE_SHIFT as i64 + 2).max(1) as usize
}

/// The slot layout for one unit size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SlotLayout {
    pub unit_size: u64,
    /// `pcpu_sidelined_slot`.
    pub sidelined: usize,
    /// `pcpu_free_slot`.
    pub free: usize,
    /// `pcpu_to_depopulate_slot`.
    pub to_depopulate: usize,
    /// `pcpu_nr_slots`.
    pub nr_slots: usize,
}

impl SlotLayout {
    pub fn new(unit_size: u64) -> Self {
        let sidelined = size_to_slot_raw(unit_size) + 1;
        Self {
            unit_size,
            sidelined,
            free: sidelined + 1,
            to_depopulate: sidelined + 2,
            nr_slots: sidelined + 3,
        }
    }

    /// `pcpu_size_to_slot`: a whole unit maps to the free slot.
    #[doc(alias = "pcpu_size_to_slot")]
    pub fn size_to_slot(&self, size: u64) -> usize {
        if size == self.unit_size {
            self.free
        } else {
            size_to_slot_raw(size)
        }
    }

    /// `pcpu_chunk_slot` from a chunk's free bytes and contig hint (in bits).
    #[doc(alias = "pcpu_chunk_slot")]
    pub fn chunk_slot(&self, free_bytes: u32, contig_hint_bits: u32) -> usize {
        if free_bytes < super::PCPU_MIN_ALLOC_SIZE as u32 || contig_hint_bits == 0 {
            0
        } else {
            self.size_to_slot(contig_hint_bits as u64 * super::PCPU_MIN_ALLOC_SIZE)
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Link {
    prev: u32,
    next: u32,
    /// The slot the chunk is on, or `NIL`.
    slot: u32,
}

#[derive(Debug, Clone, Copy)]
struct Head {
    first: u32,
    last: u32,
    len: u32,
}

/// The slot lists.
#[derive(Debug)]
pub(crate) struct SlotLists {
    heads: Vec<Head>,
    links: Vec<Link>,
}

impl SlotLists {
    pub(crate) fn new(nr_slots: usize) -> Self {
        Self {
            heads: vec![
                Head {
                    first: NIL,
                    last: NIL,
                    len: 0
                };
                nr_slots
            ],
            links: Vec::new(),
        }
    }

    fn link(&mut self, idx: u32) -> &mut Link {
        let i = idx as usize;
        if i >= self.links.len() {
            self.links.resize(
                i + 1,
                Link {
                    prev: NIL,
                    next: NIL,
                    slot: NIL,
                },
            );
        }
        &mut self.links[i]
    }

    /// The slot `idx` is on, if any.
    pub(crate) fn slot_of(&self, idx: u32) -> Option<usize> {
        self.links
            .get(idx as usize)
            .and_then(|l| (l.slot != NIL).then_some(l.slot as usize))
    }

    pub(crate) fn first(&self, slot: usize) -> u32 {
        self.heads[slot].first
    }

    pub(crate) fn next(&self, idx: u32) -> u32 {
        self.links[idx as usize].next
    }

    pub(crate) fn len(&self, slot: usize) -> usize {
        self.heads[slot].len as usize
    }

    pub(crate) fn is_empty(&self, slot: usize) -> bool {
        self.heads[slot].first == NIL
    }

    /// The chunks of `slot` in list order.
    pub(crate) fn iter(&self, slot: usize) -> impl Iterator<Item = u32> + '_ {
        let mut cur = self.heads[slot].first;
        std::iter::from_fn(move || {
            (cur != NIL).then(|| {
                let c = cur;
                cur = self.links[c as usize].next;
                c
            })
        })
    }

    /// `list_del`: take `idx` off its list (no-op when on none).
    pub(crate) fn remove(&mut self, idx: u32) {
        let l = *self.link(idx);
        if l.slot == NIL {
            return;
        }
        let slot = l.slot as usize;
        if l.prev == NIL {
            self.heads[slot].first = l.next;
        } else {
            self.links[l.prev as usize].next = l.next;
        }
        if l.next == NIL {
            self.heads[slot].last = l.prev;
        } else {
            self.links[l.next as usize].prev = l.prev;
        }
        self.heads[slot].len -= 1;
        *self.link(idx) = Link {
            prev: NIL,
            next: NIL,
            slot: NIL,
        };
    }

    /// `list_move` (`front`) / `list_move_tail`: put `idx` at the head or tail of `slot`.
    pub(crate) fn move_to(&mut self, idx: u32, slot: usize, front: bool) {
        self.remove(idx);
        let h = self.heads[slot];
        // `__list_add` between `prev` and `next` (NIL: the head).
        let (prev, next) = if front { (NIL, h.first) } else { (h.last, NIL) };
        *self.link(idx) = Link {
            prev,
            next,
            slot: slot as u32,
        };
        if next == NIL {
            self.heads[slot].last = idx;
        } else {
            self.links[next as usize].prev = idx;
        }
        if prev == NIL {
            self.heads[slot].first = idx;
        } else {
            self.links[prev as usize].next = idx;
        }
        self.heads[slot].len += 1;
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn size_to_slot_matches_the_reference_table() {
        assert_eq!(size_to_slot_raw(1), 1);
        assert_eq!(size_to_slot_raw(15), 1);
        assert_eq!(size_to_slot_raw(16), 2);
        assert_eq!(size_to_slot_raw(31), 2);
        assert_eq!(size_to_slot_raw(32), 3);
        assert_eq!(size_to_slot_raw(4096), 10);
        let l = SlotLayout::new(256 << 10);
        assert_eq!(
            (l.sidelined, l.free, l.to_depopulate, l.nr_slots),
            (17, 18, 19, 20)
        );
        assert_eq!(l.size_to_slot(256 << 10), 18);
        assert_eq!(l.chunk_slot(0, 0), 0);
        assert_eq!(l.chunk_slot(4096, 1024), 10);
    }

    #[test]
    fn move_to_head_and_tail() {
        let mut s = SlotLists::new(4);
        s.move_to(0, 1, true);
        s.move_to(1, 1, true);
        s.move_to(2, 1, false);
        assert_eq!(s.iter(1).collect::<Vec<_>>(), [1, 0, 2]);
        s.move_to(1, 2, false);
        assert_eq!(s.iter(1).collect::<Vec<_>>(), [0, 2]);
        assert_eq!(s.slot_of(1), Some(2));
        s.remove(2);
        s.remove(2);
        assert_eq!(s.iter(1).collect::<Vec<_>>(), [0]);
        assert_eq!((s.len(1), s.len(2)), (1, 1));
        assert_eq!(s.slot_of(2), None);
        assert!(s.is_empty(3));
    }
}
