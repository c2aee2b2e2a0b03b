//! The page-table entries under `--cfg loom`: loom atomics beside the frames, so that a model
//! of the engine's own tables sees every load and store of an entry (`sync::primitive`).
//!
//! A loom atomic is a handle into the running model, not an integer in memory: it cannot live
//! in a frame's host memory, which is zero until written. So each table page's 512 entries are
//! kept here, each made (zero) on its first use — a model pays only for the entries it
//! touches — and the pages are made on first use too. Data frames stay in host memory.

use std::sync::OnceLock;

use super::TableEntry;
use crate::addr::{Pfn, PTRS_PER_TABLE};

/// One page-table page under loom: 512 loom atomics beside the frame, each made (zero) on its
/// first use, so a model pays only for the entries it touches. Read and written as the host's
/// array is: by index, and `iter` (which makes them all).
#[derive(Debug)]
pub struct TablePage {
    entries: Box<[OnceLock<TableEntry>]>,
}

impl TablePage {
    fn new() -> Self {
        Self {
            entries: (0..PTRS_PER_TABLE).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Every entry, in index order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &TableEntry> {
        (0..PTRS_PER_TABLE).map(|i| &self[i])
    }

    /// The entries made so far: the others are zero by definition.
    pub(super) fn made(&self) -> impl Iterator<Item = &TableEntry> {
        self.entries.iter().filter_map(OnceLock::get)
    }
}

impl std::ops::Index<usize> for TablePage {
    type Output = TableEntry;

    fn index(&self, i: usize) -> &TableEntry {
        self.entries[i].get_or_init(|| TableEntry::new(0))
    }
}

/// Every frame's [`TablePage`], made on first use.
#[derive(Debug)]
pub(super) struct Tables(Box<[OnceLock<TablePage>]>);

impl Tables {
    pub(super) fn new(nr_frames: u64) -> Self {
        Tables((0..nr_frames).map(|_| OnceLock::new()).collect())
    }

    /// The entries of frame `pfn` (the caller checked it is inside the backing).
    pub(super) fn get(&self, pfn: Pfn) -> &TablePage {
        self.0[pfn.index()].get_or_init(TablePage::new)
    }
}
