//! The VMA index that faults read without the mmap lock (per-VMA locks, `vma.per_vma_lock`).
//! The tree's map of VMAs that keeps it (and the gap index of `gap/`) in step with every change
//! is `map.rs`'s [`VmaMap`](super::map::VmaMap).
//!
//! Mirrors the maple tree's RCU side (`mas_walk` under `rcu_read_lock` in
//! `lock_vma_under_rcu`) and the writer's duties of `mm/vma.c` (`vma_start_write` before a
//! VMA changes, `vma_mark_detached` when it leaves the tree, new VMAs linked write-locked).
//!
//! ```text
//!  VmaTree.vmas: VmaMap ── BTreeMap<start, Vma>           the truth, under mmap_lock
//!                  ├─ Option<Arc<VmaIndex>> ── RwSem<BTreeMap<start, Arc<VmaNode>>>
//!                  │                            VmaNode = VmaLock + an immutable copy of the Vma
//!                  └─ GapTree (gap/): each VMA's range and guard start, for the area searches
//! ```
//! Every mutation of the map (always under the mmap write lock) first write-locks the nodes
//! of the VMAs it changes or removes (`vma_start_write`: waits out their faults), then
//! detaches them and publishes fresh nodes — created write-locked under the current hold — for
//! what the tree now holds. When the mmap lock is released (or downgraded) the hold's
//! `mm_lock_seq` bump unlocks all of them at once. A fault that found an old node before the
//! change fails to lock it (write-locked) or finds it detached and walks again.
//!
//! A node's `Vma` never changes after publication except its anon_vma, a cell it shares with
//! the tree's `Vma` (a fault under the mmap lock may set it).
//!
//! # Invariants
//! - Outside a write hold, the index's nodes are exactly the tree's VMAs (same ranges and
//!   attributes), none detached.
//! - A node is detached only after it was write-locked, and removed from the index after that.
//!
//! # Locks
//! `mmap_lock (write) -> vm_lock (write) -> mm_mt (write)`; readers take `mm_mt` (read) alone,
//! clone the node and drop it before they take the node's `vm_lock`.
//!
//! # Differences from Linux
//! The RCU walk of the maple tree is a short read hold of a seam [`RwSem`] (class `mm_mt`):
//! readers share it, a writer holds it only to insert or remove one node. Nodes are
//! reference-counted instead of RCU-freed.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::area::Vma;
use crate::sync::class::MM_MT;
use crate::sync::{MmLockSeq, RwSem, VmaLock};

/// One published VMA: its lock and a copy of it for lock-free readers.
#[derive(Debug)]
pub struct VmaNode {
    pub lock: VmaLock,
    pub vma: Vma,
}

/// The index lock-free readers walk (`mm->mm_mt` under RCU).
#[derive(Debug)]
pub struct VmaIndex {
    seq: Arc<MmLockSeq>,
    nodes: RwSem<BTreeMap<u64, Arc<VmaNode>>>,
}

impl VmaIndex {
    /// An empty index for the mm whose mmap lock counts `seq`.
    pub fn new(seq: Arc<MmLockSeq>) -> Self {
        Self {
            seq,
            nodes: RwSem::new(&MM_MT, BTreeMap::new()),
        }
    }

    /// `mm->mm_lock_seq`.
    pub fn mm_lock_seq(&self) -> &MmLockSeq {
        &self.seq
    }

    /// `mas_walk`: the node whose range contains `addr`, if any.
    #[inline]
    pub fn find(&self, addr: u64) -> Option<Arc<VmaNode>> {
        let nodes = self.nodes.read();
        let (_, n) = nodes.range(..=addr).next_back()?;
        (n.vma.end > addr).then(|| Arc::clone(n))
    }

    /// `vma_start_write` on every node overlapping `[start, end)` (the caller holds the mmap
    /// lock for writing).
    pub(crate) fn start_write_range(&self, start: u64, end: u64) {
        let seq = self.seq.get();
        for n in self.overlapping(start, end) {
            n.lock.start_write(seq);
        }
    }

    fn overlapping(&self, start: u64, end: u64) -> Vec<Arc<VmaNode>> {
        let nodes = self.nodes.read();
        let first = nodes
            .range(..=start)
            .next_back()
            .filter(|(_, n)| n.vma.end > start)
            .map(|(&k, _)| k)
            .unwrap_or(start);
        nodes
            .range(first..end.max(first))
            .map(|(_, n)| Arc::clone(n))
            .collect()
    }

    /// The VMA starting at `start` changes or goes: write-lock its node, detach it, remove it.
    pub(super) fn unpublish(&self, start: u64) {
        let node = self.nodes.read().get(&start).cloned();
        if let Some(n) = node {
            n.lock.start_write(self.seq.get());
            n.lock.mark_detached();
            // Lock order: vm_lock (write, released) -> mm_mt (write).
            self.nodes.write().remove(&start);
        }
    }

    /// Publish `v` as it now is, write-locked until the current write hold ends.
    pub(super) fn publish(&self, v: &Vma) {
        let node = Arc::new(VmaNode {
            lock: VmaLock::new_write_locked(self.seq.get()),
            vma: v.snapshot(),
        });
        let old = self.nodes.write().insert(v.start, node);
        vm_bug_on!(old.is_some(), "two published VMAs at {:#x}", v.start);
    }

    /// Number of published VMAs (for validation).
    pub fn len(&self) -> usize {
        self.nodes.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Check the first invariant of the module doc against the tree's `vmas`.
    pub(super) fn validate(&self, vmas: &BTreeMap<u64, Vma>) -> Result<(), String> {
        let nodes = self.nodes.read();
        if nodes.len() != vmas.len() {
            return Err(format!(
                "VMA index has {} nodes, the tree {} VMAs",
                nodes.len(),
                vmas.len()
            ));
        }
        for ((k, n), (_, v)) in nodes.iter().zip(vmas) {
            let same = *k == v.start
                && n.vma.start == v.start
                && n.vma.end == v.end
                && n.vma.flags == v.flags
                && n.vma.pgoff == v.pgoff
                && n.vma.kind == v.kind
                && n.vma.anon_vma() == v.anon_vma();
            if !same || n.lock.is_detached() {
                return Err(format!("VMA index node at {k:#x} does not match the tree"));
            }
        }
        Ok(())
    }
}
