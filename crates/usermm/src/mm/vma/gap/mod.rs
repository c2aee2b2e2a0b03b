//! The gap index: the VMAs' address ranges in a balanced search tree whose every node knows the
//! largest free gap between the VMAs below it, so that the unmapped-area searches skip whole
//! subtrees that cannot hold the request and finish in O(log n) instead of walking every VMA.
//!
//! Mirrors the augmentation of the VMA rbtree before Linux 6.1 (`mm/mmap.c`: `rb_subtree_gap`,
//! `vma_compute_gap`, `vma_gap_update`, `vma_gap_callbacks`, and the descents of
//! `unmapped_area` / `unmapped_area_topdown` that follow it), which the maple tree replaced
//! with per-node gap metadata (`ma_gaps`, `mas_empty_area_rev`) serving the same purpose. The
//! gap below a VMA is `vm_start_gap(vma) - vm_end_gap(prev)` (zero when the stack guard of a
//! `VM_GROWSDOWN` VMA reaches below `prev`'s end): the guard counts as used, as it does there.
//! `VM_GROWSUP` is not modelled, so `vm_end_gap` is `vm_end`.
//!
//! ```text
//!  node x: [start, end) start_gap        summary of x's subtree (Summary):
//!          /          \                    first_start_gap  start_gap of its lowest VMA
//!     left subtree   right subtree         last_end         end of its highest VMA
//!                                          max_gap          largest gap between two of its VMAs
//!                                          min_start_gap    smallest start_gap in it
//! ```
//!
//! # Invariants (checked by [`GapTree::validate`], run from `VmaTree::validate`)
//! 1. The nodes, in order, are exactly the VMA tree's VMAs: same `start`, `end` and
//!    `vm_start_gap`, keyed and ordered by `start`.
//! 2. Search-tree order by `start`; heap order by priority (a treap), each node's priority
//!    a mix of its `start` with the tree's random seed: the shape depends only on the set of
//!    VMAs and the seed, and no choice of addresses can make the tree deep (its depth, and
//!    so the recursion of every operation, is O(log n) with high probability).
//! 3. Every node's summary is what its children's summaries and its own range make it
//!    (the gap below a subtree's first VMA is left out: its neighbour lies outside; a search
//!    computes it from the neighbour it came from).
//!
//! # Locks
//! None of its own: it lives inside the VMA tree (`VmaMap`), changed only under the mmap lock
//! held for writing, searched under it held for reading or writing.
//!
//! # Differences from Linux
//! - A treap in a vector arena stands in for the rbtree's augmented nodes (no pointers, no
//!   `unsafe`); the `BTreeMap` of `VmaMap` still serves lookups, so a VMA is in two trees.
//! - The gap is a property of the pair (prev, vma), kept at the node where the two meet in the
//!   tree rather than in the upper VMA's node: no neighbour's node changes when a VMA is
//!   inserted or removed (the rbtree's `vma_gap_update(next)`).
//! - The top-down search keeps the engine's rule that the guard gap of any VMA above limits
//!   every gap below it, not only its own (`min_start_gap` lets a skipped subtree apply that);
//!   Linux checks the guard of the VMA just above the gap it found, and searches again below
//!   that guard when it intrudes.

mod search;
#[cfg(test)]
mod test;

/// A node's index in the arena.
type Link = Option<usize>;

/// What a subtree knows about the VMAs in it (invariant 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Summary {
    /// `vm_start_gap` of its lowest VMA.
    first_start_gap: u64,
    /// `vm_end` of its highest VMA.
    last_end: u64,
    /// The largest `vm_start_gap(next) - vm_end(prev)` over consecutive VMAs in it (0 for one
    /// VMA).
    max_gap: u64,
    /// The smallest `vm_start_gap` in it.
    min_start_gap: u64,
}

/// `vma_compute_gap`: the free room between a VMA ending at `prev_end` and the next one,
/// whose guard starts at `start_gap` (0 if the guard overlaps `prev`).
#[doc(alias = "vma_compute_gap")]
fn gap(prev_end: u64, start_gap: u64) -> u64 {
    start_gap.saturating_sub(prev_end)
}

/// One VMA's range in the index.
#[derive(Debug, Clone)]
struct Node {
    start: u64,
    end: u64,
    /// `vm_start_gap`.
    start_gap: u64,
    prio: u64,
    left: Link,
    right: Link,
    /// The subtree's summary (`rb_subtree_gap` and company).
    sum: Summary,
}

/// The treap's priority for a VMA starting at `start` in a tree seeded `seed`: a bijective mix
/// (splitmix64's finaliser), so that the keys' order and the priorities' order are unrelated.
fn prio(seed: u64, start: u64) -> u64 {
    let mut z = (start ^ seed).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The augmented index of an mm's VMA ranges (see the module doc).
#[doc(alias = "rb_subtree_gap")]
#[derive(Debug, Clone)]
pub(super) struct GapTree {
    nodes: Vec<Node>,
    /// Arena slots of removed nodes, reused first.
    free: Vec<usize>,
    root: Link,
    /// Mixed into every priority (invariant 2).
    seed: u64,
}

impl Default for GapTree {
    fn default() -> Self {
        use std::hash::BuildHasher;
        Self {
            nodes: Vec::new(),
            free: Vec::new(),
            root: None,
            seed: std::collections::hash_map::RandomState::new().hash_one(0u64),
        }
    }
}

impl GapTree {
    /// Number of VMAs indexed.
    pub(super) fn len(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// Forget every VMA.
    pub(super) fn clear(&mut self) {
        self.nodes.clear();
        self.free.clear();
        self.root = None;
    }

    /// Record the VMA `[start, end)` whose guard starts at `start_gap`, replacing the one
    /// keyed `start` if there is one (`vma_gap_update` after a change, `vma_link` else).
    #[doc(alias = "vma_gap_update")]
    pub(super) fn set(&mut self, start: u64, end: u64, start_gap: u64) {
        if self.update_at(self.root, start, end, start_gap) {
            return;
        }
        let node = Node {
            start,
            end,
            start_gap,
            prio: prio(self.seed, start),
            left: None,
            right: None,
            sum: Summary {
                first_start_gap: start_gap,
                last_end: end,
                max_gap: 0,
                min_start_gap: start_gap,
            },
        };
        let n = match self.free.pop() {
            Some(i) => {
                self.nodes[i] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        self.root = Some(self.insert_at(self.root, n));
    }

    /// Drop the VMA keyed `start`; false if there is none.
    pub(super) fn remove(&mut self, start: u64) -> bool {
        let (root, gone) = self.remove_at(self.root, start);
        self.root = root;
        match gone {
            Some(i) => {
                self.free.push(i);
                true
            }
            None => false,
        }
    }

    /// Recompute `x`'s summary from its children's (`RB_DECLARE_CALLBACKS`' propagate step).
    fn pull(&mut self, x: usize) {
        let n = &self.nodes[x];
        let left = n.left.map(|l| &self.nodes[l].sum);
        let right = n.right.map(|r| &self.nodes[r].sum);
        let sum = summarize(left, n.start_gap, n.end, right);
        self.nodes[x].sum = sum;
    }

    /// Split the subtree `t` into the VMAs keyed below `key` and the rest.
    fn split(&mut self, t: Link, key: u64) -> (Link, Link) {
        let Some(x) = t else {
            return (None, None);
        };
        if self.nodes[x].start < key {
            let (a, b) = self.split(self.nodes[x].right, key);
            self.nodes[x].right = a;
            self.pull(x);
            (Some(x), b)
        } else {
            let (a, b) = self.split(self.nodes[x].left, key);
            self.nodes[x].left = b;
            self.pull(x);
            (a, Some(x))
        }
    }

    /// Join two subtrees, every VMA of `a` below every VMA of `b`.
    fn merge(&mut self, a: Link, b: Link) -> Link {
        match (a, b) {
            (None, t) | (t, None) => t,
            (Some(x), Some(y)) => {
                if self.nodes[x].prio > self.nodes[y].prio {
                    let r = self.merge(self.nodes[x].right, b);
                    self.nodes[x].right = r;
                    self.pull(x);
                    Some(x)
                } else {
                    let l = self.merge(a, self.nodes[y].left);
                    self.nodes[y].left = l;
                    self.pull(y);
                    Some(y)
                }
            }
        }
    }

    /// Put the new node `n` (not yet linked, no children) into the subtree `t`; its new root.
    fn insert_at(&mut self, t: Link, n: usize) -> usize {
        let Some(x) = t else {
            return n;
        };
        if self.nodes[n].prio > self.nodes[x].prio {
            let (a, b) = self.split(t, self.nodes[n].start);
            self.nodes[n].left = a;
            self.nodes[n].right = b;
            self.pull(n);
            return n;
        }
        if self.nodes[n].start < self.nodes[x].start {
            let l = self.insert_at(self.nodes[x].left, n);
            self.nodes[x].left = Some(l);
        } else {
            let r = self.insert_at(self.nodes[x].right, n);
            self.nodes[x].right = Some(r);
        }
        self.pull(x);
        x
    }

    /// Unlink the node keyed `key` from the subtree `t`: the subtree's new root and the
    /// unlinked node, if found.
    fn remove_at(&mut self, t: Link, key: u64) -> (Link, Link) {
        let Some(x) = t else {
            return (None, None);
        };
        let s = self.nodes[x].start;
        if key == s {
            let joined = self.merge(self.nodes[x].left, self.nodes[x].right);
            return (joined, Some(x));
        }
        let gone = if key < s {
            let (l, g) = self.remove_at(self.nodes[x].left, key);
            self.nodes[x].left = l;
            g
        } else {
            let (r, g) = self.remove_at(self.nodes[x].right, key);
            self.nodes[x].right = r;
            g
        };
        if gone.is_some() {
            self.pull(x);
        }
        (Some(x), gone)
    }

    /// Change the range of the node keyed `key` in the subtree `t` and fix the summaries on
    /// the way back up; false if there is no such node.
    fn update_at(&mut self, t: Link, key: u64, end: u64, start_gap: u64) -> bool {
        let Some(x) = t else {
            return false;
        };
        let s = self.nodes[x].start;
        let found = if key == s {
            self.nodes[x].end = end;
            self.nodes[x].start_gap = start_gap;
            true
        } else if key < s {
            self.update_at(self.nodes[x].left, key, end, start_gap)
        } else {
            self.update_at(self.nodes[x].right, key, end, start_gap)
        };
        if found {
            self.pull(x);
        }
        found
    }

    /// Check the invariants of the module doc against `vmas`: `(start, end, vm_start_gap)` of
    /// every VMA of the tree, in address order. Returns the first violation.
    #[doc(alias = "validate_mm_rb")]
    pub(super) fn validate(
        &self,
        vmas: impl ExactSizeIterator<Item = (u64, u64, u64)>,
    ) -> Result<(), String> {
        if self.len() != vmas.len() {
            return Err(format!(
                "gap index holds {} VMAs, the tree {}",
                self.len(),
                vmas.len()
            ));
        }
        let mut order = Vec::with_capacity(self.len());
        self.check(self.root, u64::MAX, &mut order)?;
        for ((s, e, g), (vs, ve, vg)) in order.into_iter().zip(vmas) {
            if (s, e, g) != (vs, ve, vg) {
                return Err(format!(
                    "gap index has {s:#x}-{e:#x} (start gap {g:#x}) where the tree has \
                     {vs:#x}-{ve:#x} (start gap {vg:#x})"
                ));
            }
        }
        Ok(())
    }

    /// Invariants 2 and 3 below `t`, whose parent has priority `parent_prio`; appends the
    /// subtree's ranges to `order` in key order and returns its recomputed summary.
    fn check(
        &self,
        t: Link,
        parent_prio: u64,
        order: &mut Vec<(u64, u64, u64)>,
    ) -> Result<Option<Summary>, String> {
        let Some(x) = t else {
            return Ok(None);
        };
        let n = self.nodes.get(x).ok_or("gap index link out of the arena")?;
        if n.prio > parent_prio || n.prio != prio(self.seed, n.start) {
            return Err(format!("gap index node {:#x}: priority order", n.start));
        }
        let left = self.check(n.left, n.prio, order)?;
        if order.last().is_some_and(|&(s, _, _)| s >= n.start) {
            return Err(format!("gap index node {:#x}: key order", n.start));
        }
        order.push((n.start, n.end, n.start_gap));
        let right = self.check(n.right, n.prio, order)?;
        let sum = summarize(left.as_ref(), n.start_gap, n.end, right.as_ref());
        if sum != n.sum {
            return Err(format!(
                "gap index node {:#x}: summary {:?}, its subtree makes {sum:?}",
                n.start, n.sum
            ));
        }
        Ok(Some(sum))
    }
}

/// The summary of a subtree made of `left`, a VMA (`start_gap`, `end`) and `right`.
fn summarize(left: Option<&Summary>, start_gap: u64, end: u64, right: Option<&Summary>) -> Summary {
    let mut s = Summary {
        first_start_gap: start_gap,
        last_end: end,
        max_gap: 0,
        min_start_gap: start_gap,
    };
    if let Some(l) = left {
        s.first_start_gap = l.first_start_gap;
        s.max_gap = l.max_gap.max(gap(l.last_end, start_gap));
        s.min_start_gap = s.min_start_gap.min(l.min_start_gap);
    }
    if let Some(r) = right {
        s.last_end = r.last_end;
        s.max_gap = s.max_gap.max(r.max_gap).max(gap(end, r.first_start_gap));
        s.min_start_gap = s.min_start_gap.min(r.min_start_gap);
    }
    s
}
