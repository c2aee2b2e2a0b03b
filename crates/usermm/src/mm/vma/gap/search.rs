//! The two descents of the gap index: the highest free range of a length below a limit
//! (`unmapped_area_topdown`, the maple tree's `mas_empty_area_rev`) and the lowest one above
//! a floor (`unmapped_area`, `mas_empty_area`).
//!
//! Each is an in-order walk (descending or ascending) that skips every subtree whose summary
//! shows no gap of the length wanted, so it visits O(log n) nodes (the treap's depth, with high
//! probability): the path to the answer and the roots of the subtrees it skips. A summary's gap is an upper bound of what the exact
//! rules below allow (they can only shrink a gap: a floor, a ceiling, a guard above), so a
//! skipped subtree never held the answer; a subtree whose bound passes but whose VMAs all fail
//! the exact rules is walked into, which happens only next to a stack's guard gap or at the
//! floor. The results are those of the linear scans kept as the tests' oracle
//! (`VmaTree::unmapped_area_topdown_linear`, `VmaTree::unmapped_area_linear`), for every
//! length, 0 included.
//!
//! Top-down rules, VMAs taken from the highest below `high` down: the room above a VMA ends at
//! `top`, the smallest of `high` and the `vm_start_gap` of every VMA above it up to and
//! including the first one at or past `high`; it fits when `[max(end, low), top)` holds `len`
//! (and `end < top`), and the answer is `top - len`. The walk stops when `top` reaches `low`.
//! Below the lowest VMA the room is `[low, top)`.
//!
//! Bottom-up rules, VMAs taken from the first ending above `low` up: the room below a VMA is
//! `[max(low, prev_end), min(vm_start_gap, high))` and the answer is its bottom; the walk stops
//! when `prev_end` reaches `high`. Above the last VMA the room is `[max(low, last_end), high)`.

use super::{gap, GapTree, Link};

/// Where a walk stands after a subtree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// Nothing there: go on with the next VMA.
    Go,
    /// The answer.
    Found(u64),
    /// No VMA further on can be the answer.
    Stop,
}

impl GapTree {
    /// The highest `addr` with `[addr, addr + len)` inside `[low, high)` and free of every VMA
    /// and guard gap, by the top-down rules of the module doc.
    #[doc(alias = "unmapped_area_topdown", alias = "mas_empty_area_rev")]
    pub(in super::super) fn topdown(&self, len: u64, low: u64, high: u64) -> Option<u64> {
        if high < low || high - low < len {
            return None;
        }
        // The room between the highest VMA below `high` and the first one at or past it.
        let mut top = high;
        if let Some(v) = self.first_at_or_above(high) {
            top = top.min(self.nodes[v].start_gap);
        }
        let Some(below) = self.last_below(high) else {
            return (top >= low && top - low >= len).then(|| top - len);
        };
        let end = self.nodes[below].end;
        if end < top {
            let bottom = end.max(low);
            if top >= bottom && top - bottom >= len {
                return Some(top - len);
            }
        }
        let mut walk = TopDown {
            t: self,
            len,
            low,
            top,
        };
        match walk.rev(self.root, None, Some(high)) {
            Walk::Found(a) => Some(a),
            Walk::Go | Walk::Stop => None,
        }
    }

    /// The lowest `addr` with `[addr, addr + len)` inside `[low, high)` and free of every VMA
    /// and guard gap, by the bottom-up rules of the module doc.
    #[doc(alias = "unmapped_area", alias = "mas_empty_area")]
    pub(in super::super) fn bottomup(&self, len: u64, low: u64, high: u64) -> Option<u64> {
        if high < low || high - low < len {
            return None;
        }
        let mut walk = BottomUp {
            t: self,
            len,
            low,
            high,
        };
        match walk.fwd(self.root, None, true) {
            Walk::Found(a) => Some(a),
            Walk::Stop => None,
            Walk::Go => {
                // Above the last VMA (if any ends above `low`).
                let bottom = self
                    .root
                    .map_or(low, |r| self.nodes[r].sum.last_end.max(low));
                (bottom < high || bottom == low)
                    .then_some(bottom)
                    .filter(|&b| high - b >= len)
            }
        }
    }

    /// The lowest VMA starting at or above `key`.
    fn first_at_or_above(&self, key: u64) -> Link {
        let (mut t, mut best) = (self.root, None);
        while let Some(x) = t {
            if self.nodes[x].start >= key {
                best = Some(x);
                t = self.nodes[x].left;
            } else {
                t = self.nodes[x].right;
            }
        }
        best
    }

    /// The highest VMA starting below `key`.
    fn last_below(&self, key: u64) -> Link {
        let (mut t, mut best) = (self.root, None);
        while let Some(x) = t {
            if self.nodes[x].start < key {
                best = Some(x);
                t = self.nodes[x].right;
            } else {
                t = self.nodes[x].left;
            }
        }
        best
    }
}

/// The state of a top-down walk: `top` is the ceiling of the room above the next VMA.
struct TopDown<'a> {
    t: &'a GapTree,
    len: u64,
    low: u64,
    top: u64,
}

impl TopDown<'_> {
    /// Walk the subtree `link` from its highest VMA down. `prev_end` is the end of the VMA just
    /// below the subtree (`None`: it holds the lowest VMA); `below`, when set, limits the walk
    /// to VMAs starting below it (the subtree may hold others).
    fn rev(&mut self, link: Link, prev_end: Option<u64>, below: Option<u64>) -> Walk {
        let Some(x) = link else {
            return Walk::Go;
        };
        let t = self.t;
        let n = &t.nodes[x];
        match below {
            Some(b) if n.start >= b => return self.rev(n.left, prev_end, below),
            Some(_) => {}
            None => {
                // The whole subtree is in range: skip it if no gap in it is long enough,
                // carrying its guards down as the VMAs themselves would have.
                let edge = gap(prev_end.unwrap_or(0), n.sum.first_start_gap);
                if self.len > 0 && n.sum.max_gap.max(edge) < self.len {
                    self.top = self.top.min(n.sum.min_start_gap);
                    return if self.top <= self.low {
                        Walk::Stop
                    } else {
                        Walk::Go
                    };
                }
            }
        }
        let w = self.rev(n.right, Some(n.end), below);
        if w != Walk::Go {
            return w;
        }
        // This VMA: its guard lowers the ceiling, then the room below it is tried.
        self.top = self.top.min(n.start_gap);
        if self.top <= self.low {
            return Walk::Stop;
        }
        let (len, low, top) = (self.len, self.low, self.top);
        let prev = match n.left {
            Some(l) => Some(t.nodes[l].sum.last_end),
            None => prev_end,
        };
        match prev {
            Some(pe) => {
                if pe < top {
                    let bottom = pe.max(low);
                    if top >= bottom && top - bottom >= len {
                        return Walk::Found(top - len);
                    }
                }
                // Every lower VMA's room has the same floor, `low`, and no higher ceiling.
                if pe <= low {
                    return Walk::Stop;
                }
            }
            None => {
                return if top >= low && top - low >= len {
                    Walk::Found(top - len)
                } else {
                    Walk::Stop
                };
            }
        }
        self.rev(n.left, prev_end, None)
    }
}

/// The state of a bottom-up walk.
struct BottomUp<'a> {
    t: &'a GapTree,
    len: u64,
    low: u64,
    high: u64,
}

impl BottomUp<'_> {
    /// A VMA (not the first one walked) whose predecessor ends at `pe` ends the walk.
    fn stops(&self, pe: u64) -> bool {
        pe > self.low && pe >= self.high
    }

    /// Walk the subtree `link` from its lowest VMA up. `prev_end` is the end of the VMA just
    /// below the subtree; `above_low` limits the walk to VMAs ending above `low` (the subtree
    /// may hold others).
    fn fwd(&mut self, link: Link, prev_end: Option<u64>, above_low: bool) -> Walk {
        let Some(x) = link else {
            return Walk::Go;
        };
        let t = self.t;
        let n = &t.nodes[x];
        if above_low {
            if n.end <= self.low {
                return self.fwd(n.right, Some(n.end), true);
            }
        } else {
            if prev_end.is_some_and(|pe| self.stops(pe)) {
                return Walk::Stop;
            }
            let edge = gap(prev_end.unwrap_or(0), n.sum.first_start_gap);
            if self.len > 0 && n.sum.max_gap.max(edge) < self.len {
                return Walk::Go;
            }
        }
        let w = self.fwd(n.left, prev_end, above_low);
        if w != Walk::Go {
            return w;
        }
        let pe = match n.left {
            Some(l) => Some(t.nodes[l].sum.last_end),
            None => prev_end,
        };
        if pe.is_some_and(|pe| self.stops(pe)) {
            return Walk::Stop;
        }
        let gap_end = n.start_gap.min(self.high);
        let bottom = pe.unwrap_or(0).max(self.low);
        if gap_end >= bottom && gap_end - bottom >= self.len {
            return Walk::Found(bottom);
        }
        self.fwd(n.right, Some(n.end), false)
    }
}
