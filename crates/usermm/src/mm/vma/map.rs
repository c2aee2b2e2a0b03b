//! [`VmaMap`]: the tree's VMAs by start address, the one place they change, so that the
//! per-VMA-lock index (`index.rs`) and the gap index (`gap/`) never disagree with them.
//!
//! Mirrors the writer's side of `mm/vma.c` over the maple tree: `vma_iter_store` and
//! `vma_iter_clear` (here `insert` and `remove`), with `vma_start_write` and
//! `vma_mark_detached` done on the index as the module doc of `index.rs` says.
//!
//! # Invariants
//! - The gap index holds exactly the map's ranges and guard starts.
//! - With an index attached, outside a write hold its nodes are exactly the map's VMAs.
//!
//! # Locks
//! The caller holds the mmap lock for writing for every `&mut self` method; the index's own
//! locks are taken inside (`mmap_lock (write) -> vm_lock (write) -> mm_mt (write)`).

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut, RangeBounds};
use std::sync::Arc;

use super::area::Vma;
use super::gap::GapTree;
use super::index::VmaIndex;

/// The tree's VMAs by start address, with the index (when per-VMA locks are on) and the gap
/// index (`gap/`, always) kept in step with every change (see the module doc). The methods
/// are `BTreeMap`'s, except that [`VmaMap::get_mut`] hands out a guard that republishes the
/// VMA, and records its new range in the gap index, when dropped.
#[derive(Debug, Default)]
pub struct VmaMap {
    map: BTreeMap<u64, Vma>,
    index: Option<Arc<VmaIndex>>,
    gaps: GapTree,
}

impl VmaMap {
    pub fn new() -> Self {
        Self::default()
    }

    /// Attach `index` and publish every VMA in it.
    pub(super) fn set_index(&mut self, index: Arc<VmaIndex>) {
        for v in self.map.values() {
            index.publish(v);
        }
        self.index = Some(index);
    }

    pub fn index(&self) -> Option<&Arc<VmaIndex>> {
        self.index.as_ref()
    }

    #[inline]
    pub fn get(&self, k: &u64) -> Option<&Vma> {
        self.map.get(k)
    }

    #[inline]
    pub fn contains_key(&self, k: &u64) -> bool {
        self.map.contains_key(k)
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    #[inline]
    pub fn range<R: RangeBounds<u64>>(
        &self,
        r: R,
    ) -> std::collections::btree_map::Range<'_, u64, Vma> {
        self.map.range(r)
    }

    #[inline]
    pub fn values(&self) -> std::collections::btree_map::Values<'_, u64, Vma> {
        self.map.values()
    }

    #[inline]
    pub fn iter(&self) -> std::collections::btree_map::Iter<'_, u64, Vma> {
        self.map.iter()
    }

    pub(super) fn raw(&self) -> &BTreeMap<u64, Vma> {
        &self.map
    }

    /// The gap index of the VMAs (for the unmapped-area searches).
    pub(super) fn gaps(&self) -> &GapTree {
        &self.gaps
    }

    /// Insert (or replace) the VMA at `k`, publishing it write-locked.
    pub fn insert(&mut self, k: u64, v: Vma) -> Option<Vma> {
        if let Some(idx) = &self.index {
            if self.map.contains_key(&k) {
                idx.unpublish(k);
            }
            idx.publish(&v);
        }
        self.gaps.set(k, v.end, v.start_gap());
        self.map.insert(k, v)
    }

    /// Remove the VMA at `k`: its node is write-locked and detached first.
    pub fn remove(&mut self, k: &u64) -> Option<Vma> {
        if let Some(idx) = &self.index {
            if self.map.contains_key(k) {
                idx.unpublish(*k);
            }
        }
        self.gaps.remove(*k);
        self.map.remove(k)
    }

    /// Change the VMA at `k` in place: its node is write-locked now, and replaced by one of
    /// the changed VMA when the guard drops.
    pub fn get_mut(&mut self, k: &u64) -> Option<VmaMut<'_>> {
        if !self.map.contains_key(k) {
            return None;
        }
        if let Some(idx) = &self.index {
            idx.start_write_range(*k, *k + 1);
        }
        Some(VmaMut { map: self, key: *k })
    }

    /// Remove every VMA.
    pub fn clear(&mut self) {
        if let Some(idx) = &self.index {
            let keys: Vec<u64> = self.map.keys().copied().collect();
            for k in keys {
                idx.unpublish(k);
            }
        }
        self.gaps.clear();
        self.map.clear();
    }
}

impl std::ops::Index<&u64> for VmaMap {
    type Output = Vma;
    fn index(&self, k: &u64) -> &Vma {
        &self.map[k]
    }
}

impl<'a> IntoIterator for &'a VmaMap {
    type Item = (&'a u64, &'a Vma);
    type IntoIter = std::collections::btree_map::Iter<'a, u64, Vma>;
    fn into_iter(self) -> Self::IntoIter {
        self.map.iter()
    }
}

/// A VMA being changed in place (see [`VmaMap::get_mut`]). Its start may not change (remove
/// and insert it instead).
#[derive(Debug)]
pub struct VmaMut<'a> {
    map: &'a mut VmaMap,
    key: u64,
}

impl Deref for VmaMut<'_> {
    type Target = Vma;
    fn deref(&self) -> &Vma {
        &self.map.map[&self.key]
    }
}

impl DerefMut for VmaMut<'_> {
    fn deref_mut(&mut self) -> &mut Vma {
        self.map.map.get_mut(&self.key).expect("the guard's VMA")
    }
}

impl Drop for VmaMut<'_> {
    fn drop(&mut self) {
        let v = &self.map.map[&self.key];
        vm_bug_on!(v.start != self.key, "a VMA's start changed in place");
        self.map.gaps.set(self.key, v.end, v.start_gap());
        if let Some(idx) = &self.map.index {
            idx.unpublish(self.key);
            idx.publish(v);
        }
    }
}

/// The flags of a VMA being changed in place (the tree's unit tests change them directly; not
/// compiled into the library).
#[cfg(test)]
#[derive(Debug)]
pub(super) struct FlagsMut<'a>(pub VmaMut<'a>);

#[cfg(test)]
impl Deref for FlagsMut<'_> {
    type Target = super::flags::VmFlags;
    fn deref(&self) -> &Self::Target {
        &self.0.flags
    }
}

#[cfg(test)]
impl DerefMut for FlagsMut<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0.flags
    }
}
