//! Unit tests of the line model on a machine's memmap (`memory.rs`, `lines.rs`): a memmap
//! that outlives its runs, without a machine.

use std::sync::Arc;

use super::super::lines::{tag_of, LineRuns, PageLine, GENERATIONS};
use super::super::profile::Profile;
use super::*;

/// A machine's memmap as the model sees it, without the machine: the line states of
/// 64 Ki frames and their count of runs.
#[derive(Default)]
struct Frames {
    lines: Vec<PageLine>,
    runs: LineRuns,
}

impl Memmap for Frames {
    fn next_line_run(&self) -> u64 {
        self.runs.next()
    }
    fn clear_lines(&self) {
        self.lines.iter().for_each(PageLine::clear);
    }
    fn touch_all(&self, model: &mut LineModel, cpu: usize, t: &[Cell<Touched>]) -> Ps {
        model.touch_all(self.lines.as_slice(), cpu, t)
    }
}

fn frames() -> Arc<Frames> {
    Arc::new(Frames {
        lines: (0..1 << 16).map(|_| PageLine::new()).collect(),
        runs: LineRuns::default(),
    })
}

/// A run of the line model on `memmap`, with haswell-ex-4s's prices, 16 CPUs, 4 nodes.
fn run_on(memmap: &Arc<Frames>) -> Memory {
    let p = Profile::builtin("haswell-ex-4s").unwrap();
    let placement = Placement::new(&p, 16, 4).unwrap();
    let memmap: Arc<dyn Memmap> = Arc::clone(memmap) as _;
    Memory::on_machine(
        p.memory.unwrap(),
        &placement,
        &p.transfer_ps,
        memmap,
        1 << 14,
    )
}

/// `cpu` loads the `struct page`s of `pfns` (each a batch of its own); the statistics
/// since `before`.
fn load_pages(m: &mut Memory, cpu: usize, pfns: std::ops::Range<u64>) -> MemoryStat {
    let before = m.stat();
    for pfn in pfns {
        let how = Touch::Access;
        m.touch_all(cpu, &[Cell::new(Touched::Page { pfn, how })]);
    }
    m.stat().since(&before)
}

#[test]
fn a_run_starts_cold_on_a_memmap_that_ran_before() {
    let f = frames();
    let mut first = run_on(&f);
    let s = load_pages(&mut first, 3, 100..200);
    assert_eq!((s.first, s.own_cache), (100, 0));
    let s = load_pages(&mut first, 3, 100..200);
    assert_eq!((s.first, s.own_cache), (0, 100));
    drop(first);
    // The states stay in the memmap ...
    assert_eq!(f.lines[150].load()[0], tag_of(1 << 16, 3));
    // ... and the next run sees none of them: its generation is the next.
    let mut second = run_on(&f);
    let s = load_pages(&mut second, 3, 100..200);
    assert_eq!((s.first, s.own_cache), (100, 0), "{s:?}");
    assert_eq!(f.lines[150].load()[0], tag_of(2 << 16, 3));
}

#[test]
fn generations_start_again_only_after_clearing_the_memmap() {
    let f = frames();
    let mut first = run_on(&f);
    load_pages(&mut first, 3, 100..200);
    drop(first);
    // The run after the last generation is generation 1 again: the first run's states
    // would carry its tags, so they are cleared.
    f.runs.set(u64::from(GENERATIONS));
    let mut again = run_on(&f);
    assert_eq!(f.lines[150].load(), [0; 3]);
    let s = load_pages(&mut again, 3, 100..200);
    assert_eq!((s.first, s.own_cache), (100, 0), "{s:?}");
    assert_eq!(f.lines[150].load()[0], tag_of(1 << 16, 3));
}

#[test]
fn two_memmaps_side_by_side_keep_their_own_states() {
    let (fa, fb) = (frames(), frames());
    let mut a = run_on(&fa);
    let mut b = run_on(&fb);
    load_pages(&mut a, 3, 100..200);
    // The same frames of the other memmap, touched on another CPU: new lines there.
    let s = load_pages(&mut b, 9, 100..200);
    assert_eq!((s.first, s.other_core), (100, 0), "{s:?}");
    // ... which took nothing from the first memmap's lines.
    let s = load_pages(&mut a, 3, 100..200);
    assert_eq!((s.first, s.own_cache), (0, 100), "{s:?}");
}
