//! The run's tables of locks and shared lines: each resource's virtual state in a flat vector,
//! found by an index its host object carries ([`Slot`]), by address when it carries none.
//!
//! # Why not a hash map alone
//! A hook names its resource by the host object's address (the kernel's lockdep keys a lock
//! by its map's address too). Until this table the state lived in an `FxHashMap<usize, _>`
//! keyed by that address: one hash and a probe per acquisition, release and line RMW, the
//! largest part of the lock hooks' host time after the scheduler's own (issue 33). A
//! `SpinLock`, `Mutex` or `RwSem` (through its `LockMap`) and a `SharedLine` now carry a
//! [`Slot`]: the index of their entry in this run's vector, written by the runtime the first
//! time it meets them (and again whenever the hint is wrong).
//!
//! # Invariants
//! - `entries[i].0` is the address of the resource that owns entry `i`, or [`VACANT`] when
//!   the entry is vacant (no host object lives at the last address; an id is any other
//!   `usize`, 0 included: the tests name locks by small numbers).
//! - `index` maps every owner's address to its entry, and nothing else: an address has at
//!   most one entry, so "the entry at the slot's index has my address" proves it is mine.
//!   That check is what makes a slot a hint that cannot mislead: a slot written in an earlier
//!   run of the machine, in another machine's run, by a lock that lived at this address and
//!   was forgotten, or copied along with a moved object, points at an entry with another
//!   address (or past the end) and the lookup goes by address, as it did before the table.
//! - Vacant entries are reused last-freed first. Which entry a resource gets changes no
//!   figure: nothing iterates the table, every figure is read from the entry the resource's
//!   address selects, exactly as from the map before.
//!
//! A page-table lock (`PtLock`, one byte in `PageMeta`) has no room for a slot: its hooks
//! pass none and pay the lookup by address each time.

#![deny(unsafe_code)]

use rustc_hash::FxHashMap;

use super::super::class::Slot;

/// The id of a vacant entry.
const VACANT: usize = usize::MAX;

/// Resource states by index, with their addresses.
#[derive(Debug)]
pub(in crate::vtime) struct Table<T> {
    entries: Vec<(usize, T)>,
    index: FxHashMap<usize, u32>,
    free: Vec<u32>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            entries: Vec::new(),
            index: FxHashMap::default(),
            free: Vec::new(),
        }
    }
}

impl<T> Table<T> {
    /// The entry of the resource at address `id`, if it has one: through `slot` when its
    /// index holds `id`'s entry, else by address (and then `slot` is set to the entry).
    #[inline(always)]
    pub(in crate::vtime) fn find(&self, id: usize, slot: Option<&Slot>) -> Option<u32> {
        match slot {
            Some(s) => {
                let i = s.get();
                if matches!(self.entries.get(i as usize), Some((a, _)) if *a == id) {
                    Some(i)
                } else {
                    self.find_miss(id, s)
                }
            }
            None => self.index.get(&id).copied(),
        }
    }

    /// [`Table::find`] when the slot's hint is not `id`'s entry (its first use in this run, or
    /// a slot written by another run): by address, and the slot corrected.
    #[cold]
    #[inline(never)]
    fn find_miss(&self, id: usize, slot: &Slot) -> Option<u32> {
        let i = *self.index.get(&id)?;
        slot.set(i);
        Some(i)
    }

    /// Gives the resource at `id`, which has no entry, the entry `v`; `slot` is set to it.
    pub(in crate::vtime) fn insert(&mut self, id: usize, v: T, slot: Option<&Slot>) -> u32 {
        debug_assert!(id != VACANT && !self.index.contains_key(&id));
        let i = match self.free.pop() {
            Some(i) => {
                self.entries[i as usize] = (id, v);
                i
            }
            None => {
                let i = u32::try_from(self.entries.len()).expect("vtime: 2^32 resources");
                self.entries.push((id, v));
                i
            }
        };
        self.index.insert(id, i);
        if let Some(s) = slot {
            s.set(i);
        }
        i
    }

    /// The resource at `id` is gone: its entry becomes vacant (its state stays until the
    /// entry is reused, unreachable).
    pub(in crate::vtime) fn remove(&mut self, id: usize) {
        if let Some(i) = self.index.remove(&id) {
            self.entries[i as usize].0 = VACANT;
            self.free.push(i);
        }
    }

    /// The state of entry `i` (an index [`Table::find`] or [`Table::insert`] gave).
    #[inline]
    pub(in crate::vtime) fn get(&self, i: u32) -> &T {
        &self.entries[i as usize].1
    }

    #[inline]
    pub(in crate::vtime) fn get_mut(&mut self, i: u32) -> &mut T {
        &mut self.entries[i as usize].1
    }

    /// The state of the resource at `id`, by address.
    pub(in crate::vtime) fn by_id(&self, id: usize) -> Option<&T> {
        self.index.get(&id).map(|&i| self.get(i))
    }

    /// How many resources have an entry.
    #[cfg(test)]
    pub(in crate::vtime) fn len(&self) -> usize {
        self.index.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_a_hint_checked_by_address() {
        let mut t: Table<&str> = Table::default();
        let (a, b) = (Slot::new(), Slot::new());
        assert_eq!(t.find(0x100, Some(&a)), None);
        let ia = t.insert(0x100, "a", Some(&a));
        let ib = t.insert(0x200, "b", Some(&b));
        assert_eq!(a.get(), ia);
        assert_eq!(t.find(0x100, Some(&a)), Some(ia));
        // A slot pointing at another resource's entry (copied, or from another run) is not
        // believed, and is corrected.
        let stale = Slot::new();
        stale.set(ib);
        assert_eq!(t.find(0x100, Some(&stale)), Some(ia));
        assert_eq!(stale.get(), ia);
        // Past the end: by address.
        let far = Slot::new();
        far.set(77);
        assert_eq!(t.find(0x200, Some(&far)), Some(ib));
        // No slot: by address.
        assert_eq!(t.find(0x200, None), Some(ib));
        assert_eq!(*t.get(ib), "b");
    }

    #[test]
    fn a_forgotten_entry_is_reused_and_old_slots_miss() {
        let mut t: Table<&str> = Table::default();
        let a = Slot::new();
        let ia = t.insert(0x100, "a", Some(&a));
        t.remove(0x100);
        assert_eq!(t.find(0x100, Some(&a)), None, "a vacant entry is nobody's");
        let c = Slot::new();
        let ic = t.insert(0x300, "c", Some(&c));
        assert_eq!(ic, ia, "the vacant entry is reused");
        // The forgotten lock's slot now points at another lock's entry: not believed.
        assert_eq!(t.find(0x100, Some(&a)), None);
        assert_eq!(t.find(0x300, Some(&a)), Some(ic));
        assert_eq!(*t.by_id(0x300).unwrap(), "c");
        assert_eq!(t.len(), 1);
    }

    /// Regression: 0 is an id like any other (the runtime's tests name locks 0, 1, ...);
    /// only a vacant entry matches nobody.
    #[test]
    fn id_zero_is_a_resource_and_vacant_entries_match_nobody() {
        let mut t: Table<&str> = Table::default();
        let z = Slot::new();
        let i0 = t.insert(0, "zero", Some(&z));
        assert_eq!(t.find(0, Some(&z)), Some(i0));
        assert_eq!(t.find(0, None), Some(i0));
        t.remove(0);
        assert_eq!(t.find(0, Some(&z)), None);
        assert_eq!(t.find(0, None), None);
        let i = t.insert(0, "zero again", None);
        assert_eq!(t.find(0, Some(&z)), Some(i));
    }
}
