//! Unit tests of the gap index: the treap against a plain map under random changes, its
//! `validate` catching damage, and the descents against the linear scans of
//! `unmapped_area.rs` (the oracle) on random layouts.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::super::area::STACK_GUARD_GAP;
use super::super::{VmFlags, Vma, VmaKind, VmaTree};
use super::*;
use crate::addr::{PAGE_SHIFT, PAGE_SIZE};

const P: u64 = PAGE_SIZE;
/// The layouts' arena, far below the default `mmap_base`.
const A: u64 = 0x1000_0000;

fn flags(growsdown: bool) -> VmFlags {
    let f = VmFlags::VM_READ | VmFlags::VM_WRITE | VmFlags::VM_MAYREAD | VmFlags::VM_MAYWRITE;
    if growsdown {
        f | VmFlags::VM_GROWSDOWN
    } else {
        f
    }
}

fn vma(start: u64, end: u64, growsdown: bool) -> Vma {
    Vma::new(
        start,
        end,
        flags(growsdown),
        VmaKind::Anon,
        start >> PAGE_SHIFT,
    )
}

fn ranges(g: &GapTree) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    fn walk(g: &GapTree, t: Link, out: &mut Vec<(u64, u64, u64)>) {
        if let Some(x) = t {
            let n = &g.nodes[x];
            walk(g, n.left, out);
            out.push((n.start, n.end, n.start_gap));
            walk(g, n.right, out);
        }
    }
    walk(g, g.root, &mut out);
    out
}

fn model_check(g: &GapTree, m: &BTreeMap<u64, (u64, u64)>) -> Result<(), String> {
    g.validate(m.iter().map(|(&s, &(e, sg))| (s, e, sg)))
}

#[test]
fn set_update_remove_keep_the_summaries() {
    let mut g = GapTree::default();
    let mut m = BTreeMap::new();
    for i in 0..200u64 {
        let s = A + i * 4 * P;
        g.set(s, s + P, s);
        m.insert(s, (s + P, s));
        model_check(&g, &m).unwrap();
    }
    let root = g.root.unwrap();
    assert_eq!(g.nodes[root].sum.max_gap, 3 * P);
    assert_eq!(g.nodes[root].sum.first_start_gap, A);
    assert_eq!(g.nodes[root].sum.last_end, A + 199 * 4 * P + P);
    // Grow one VMA over most of the gap above it, remove another: the largest gap follows.
    let s = A + 10 * 4 * P;
    g.set(s, s + 3 * P, s);
    m.insert(s, (s + 3 * P, s));
    model_check(&g, &m).unwrap();
    assert!(g.remove(A + 50 * 4 * P));
    m.remove(&(A + 50 * 4 * P));
    model_check(&g, &m).unwrap();
    assert_eq!(g.nodes[g.root.unwrap()].sum.max_gap, 7 * P);
    assert!(!g.remove(A + 50 * 4 * P), "already gone");
    // The freed slot is reused.
    let before = g.nodes.len();
    g.set(
        A + 50 * 4 * P,
        A + 50 * 4 * P + P,
        A + 50 * 4 * P - STACK_GUARD_GAP,
    );
    assert_eq!(g.nodes.len(), before);
    g.clear();
    assert_eq!(g.len(), 0);
    assert_eq!(g.topdown(P, 0, A), Some(A - P));
}

#[test]
fn validate_catches_damage() {
    let mut g = GapTree::default();
    let mut m = BTreeMap::new();
    for i in 0..32u64 {
        let s = A + i * 2 * P;
        g.set(s, s + P, s);
        m.insert(s, (s + P, s));
    }
    model_check(&g, &m).unwrap();
    // A VMA the tree does not have, or a range that differs from the tree's.
    let mut m2 = m.clone();
    m2.remove(&A);
    assert!(model_check(&g, &m2).is_err());
    m2.insert(A, (A + 2 * P, A));
    assert!(model_check(&g, &m2)
        .unwrap_err()
        .contains("where the tree has"));
    // A stale summary.
    let root = g.root.unwrap();
    let mut bad = g.clone();
    bad.nodes[root].sum.max_gap += P;
    assert!(model_check(&bad, &m).unwrap_err().contains("summary"));
    // A node out of key order.
    let mut bad = g.clone();
    let leaf = (0..bad.nodes.len())
        .find(|&i| bad.nodes[i].left.is_none() && bad.nodes[i].right.is_none())
        .unwrap();
    bad.nodes[leaf].start ^= 1 << 40;
    assert!(model_check(&bad, &m).is_err());
}

/// One random change of [`changes_keep_the_index_valid`].
#[derive(Debug, Clone)]
enum Change {
    Set { slot: u64, pages: u64, guard: bool },
    Remove { slot: u64 },
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => (0..64u64, 1..4u64, any::<bool>())
            .prop_map(|(slot, pages, guard)| Change::Set { slot, pages, guard }),
        2 => (0..64u64).prop_map(|slot| Change::Remove { slot }),
    ]
}

/// Random sets and removals against a `BTreeMap`, validating after each.
#[test]
fn changes_keep_the_index_valid() {
    usermm_testscale::prop::check(
        "vma::gap::changes",
        file!(),
        256,
        proptest::collection::vec(change(), 1..200),
        |ops| {
            let n = ops.len() as u64;
            let mut g = GapTree::default();
            let mut m = BTreeMap::new();
            for op in ops {
                match op {
                    Change::Set { slot, pages, guard } => {
                        let s = A + slot * 4 * P;
                        let sg = if guard { s - STACK_GUARD_GAP } else { s };
                        g.set(s, s + pages * P, sg);
                        m.insert(s, (s + pages * P, sg));
                    }
                    Change::Remove { slot } => {
                        let s = A + slot * 4 * P;
                        prop_assert_eq!(g.remove(s), m.remove(&s).is_some());
                    }
                }
                model_check(&g, &m).map_err(TestCaseError::fail)?;
            }
            prop_assert_eq!(ranges(&g).len(), m.len());
            Ok(n)
        },
    );
}

/// A layout: per VMA, the pages free below it, its length in pages, whether it is a stack.
type Layout = Vec<(u64, u64, bool)>;

fn layout() -> impl Strategy<Value = Layout> {
    let below = prop_oneof![4 => 0..4u64, 2 => 4..40u64, 1 => 40..400u64];
    proptest::collection::vec((below, 1..24u64, proptest::bool::weighted(0.15)), 0..120)
}

fn build(l: &Layout) -> VmaTree {
    let mut t = VmaTree::new(A + (1 << 30));
    let mut at = A;
    for &(below, pages, stack) in l {
        let start = at + below * P;
        let end = start + pages * P;
        t.insert(vma(start, end, stack));
        at = end;
    }
    t
}

/// A search bound: a page of the arena (or a little outside it), maybe off a page boundary.
fn bound() -> impl Strategy<Value = u64> {
    (0..8000u64, prop_oneof![4 => Just(0u64), 1 => 1..P])
        .prop_map(|(page, off)| (A - 64 * P + page * P).saturating_add(off))
}

fn query() -> impl Strategy<Value = (u64, u64, u64)> {
    let len = prop_oneof![
        1 => Just(0u64),
        6 => (1..64u64).prop_map(|p| p * P),
        2 => (64..1200u64).prop_map(|p| p * P),
        1 => 1..4 * P,
    ];
    (len, bound(), bound())
}

/// The descents give exactly what the linear scans give, on random layouts (stacks with
/// their guard gaps among them) and random lengths and bounds, 0 and unaligned ones included.
#[test]
fn descents_match_the_linear_scans() {
    usermm_testscale::prop::check(
        "vma::gap::descents_match_linear",
        file!(),
        512,
        (layout(), proptest::collection::vec(query(), 1..40)),
        |(l, queries)| {
            let t = build(&l);
            t.validate(usize::MAX).map_err(TestCaseError::fail)?;
            for &(len, a, b) in &queries {
                // Bounds in both orders: low above high must fail alike.
                for (low, high) in [(a, b), (b, a)] {
                    prop_assert_eq!(
                        t.unmapped_area_topdown(len, low, high),
                        t.unmapped_area_topdown_linear(len, low, high),
                        "top-down len {:#x} in [{:#x}, {:#x})",
                        len,
                        low,
                        high
                    );
                    prop_assert_eq!(
                        t.unmapped_area(len, low, high),
                        t.unmapped_area_linear(len, low, high),
                        "bottom-up len {:#x} in [{:#x}, {:#x})",
                        len,
                        low,
                        high
                    );
                }
            }
            Ok(queries.len() as u64)
        },
    );
}

/// The linear scans' edge cases, fixed: an empty tree, a stack whose guard reaches over the
/// VMAs below it, a guard from above the search's ceiling, floors inside VMAs.
#[test]
fn descents_match_the_linear_scans_at_the_edges() {
    let layouts: [Layout; 5] = [
        vec![],
        vec![(0, 4, false), (2, 1, false), (3, 1, true)],
        vec![(10, 1, false), (1, 1, false), (1, 1, false), (1, 1, true)],
        vec![(300, 2, true), (300, 2, true), (1, 300, false)],
        vec![(0, 1, false); 40],
    ];
    for l in &layouts {
        let t = build(l);
        t.validate(usize::MAX).unwrap();
        let mut edges = vec![0, 1, P - 1, A - P, A, u64::MAX];
        for v in t.iter() {
            for x in [v.start, v.end, v.start_gap()] {
                edges.extend([x.saturating_sub(P), x, x + 1, x + P]);
            }
        }
        for &low in &edges {
            for &high in &edges {
                for len in [0, 1, P, 2 * P, 3 * P, 300 * P, STACK_GUARD_GAP] {
                    assert_eq!(
                        t.unmapped_area_topdown(len, low, high),
                        t.unmapped_area_topdown_linear(len, low, high),
                        "{l:?} top-down {len:#x} [{low:#x}, {high:#x})"
                    );
                    assert_eq!(
                        t.unmapped_area(len, low, high),
                        t.unmapped_area_linear(len, low, high),
                        "{l:?} bottom-up {len:#x} [{low:#x}, {high:#x})"
                    );
                }
            }
        }
    }
}

/// 65 530 one-page mappings placed top-down, each right below the last, as `do_mmap` places
/// unmergeable ones; a hole punched among them is the next page-sized area, and a larger
/// request goes below them all.
#[test]
fn many_one_page_areas_stack_down_from_mmap_base() {
    let base = A + (1 << 30);
    let mut t = VmaTree::new(base);
    let n = 65_530u64;
    for i in 0..n {
        let a = t.get_unmapped_area(P, 0, false).unwrap();
        assert_eq!(a, base - (i + 1) * P, "mapping {i}");
        t.insert(vma(a, a + P, false));
    }
    t.validate(usize::MAX).unwrap();
    let hole = base - 1000 * P;
    assert!(t.remove(hole).is_some());
    assert_eq!(t.get_unmapped_area(P, 0, false), Ok(hole));
    assert_eq!(
        t.get_unmapped_area(2 * P, 0, false),
        Ok(base - n * P - 2 * P)
    );
    t.validate(usize::MAX).unwrap();
}
