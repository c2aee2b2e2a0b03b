//! Under `--cfg loom` only: a write fault and a zap racing on one PTE table, built from the
//! engine's own pieces, for `tests/loom_fault_zap.rs`. No other build has this module.
//!
//! The pieces are the engine's: a [`PhysMem`] made inside the model, a real page-table page
//! whose entries are loom atomics (`backing/loom.rs`), the locked slot of the fault path
//! ([`Slot::lock_if_same`]), the [`TableCursor`] of the zap, the rmap's mapcount updates
//! (`rmap.rs`; `mapcount` is a loom atomic) and an rss counter of the type an [`Mm`](super::Mm)
//! keeps. What is left out is what needs a whole machine: the mm and its VMA, the TLB (no CPU
//! caches a translation in the model), the gather (the zap hands back what it took) and the
//! page copy.
//!
//! ```text
//!  setup: page `old` mapped read-only at ADDR (mapcount 1, rss 1); page `new` allocated
//!  fault (do_wp_page → wp_page_copy):  orig = load PTE (lockless walk)
//!        lock the PTL, re-check PTE == orig (pte_same), else give up
//!        clear the PTE; map `new` (mapcount +1, rss +1); PTE = new; unmap `old` (mapcount −1, rss −1)
//!  zap (zap_pte_range):  cursor on the table (the PTL); for each entry of [ADDR, ADDR + 2 pages):
//!        take it; unmap its page (mapcount −1, rss −1)
//! ```
//! Whatever the order, both done, the PTE is none and every count is back to zero. The broken
//! fault ([`FaultZap::wp_copy`] with `locked` false) does the same re-check and writes without
//! the PTL, as if the entry could be written with no lock in its type.

use std::sync::Arc;

use super::rmap;
use crate::addr::{Order, Pfn, PAGE_SIZE};
use crate::cpu::CpuId;
use crate::page_alloc::meta::PG_ANON;
use crate::page_alloc::{Gfp, PhysMem};
use crate::pgtable::{self, leaf_bits, Entry, Level, Slot, TableCursor};
use crate::sync::primitive::atomic::{AtomicI64, Ordering::Relaxed};

/// The faulting address; the zap covers it and the page after it.
pub const ADDR: u64 = 0x40_0000;

/// One PTE table with a page mapped in it, a page to replace it with, and the mm's rss.
#[derive(Debug)]
pub struct FaultZap {
    phys: Arc<PhysMem>,
    table: Pfn,
    old: Pfn,
    new: Pfn,
    rss: AtomicI64,
}

impl FaultZap {
    /// The table, with `old` mapped read-only at [`ADDR`] (a page shared copy-on-write, as
    /// after fork: mapcount 1 here), and `new` ready for the copy. `None` when `phys` has no
    /// three frames to give.
    pub fn new(phys: Arc<PhysMem>) -> Option<Self> {
        let cpu = CpuId(0);
        let table = pgtable::alloc_table(&phys, cpu).ok()?;
        let old = phys.alloc_pages(cpu, Order(0), Gfp::ZERO).ok()?;
        let new = phys.alloc_pages(cpu, Order(0), Gfp::ZERO).ok()?;
        phys.meta(old).set(PG_ANON);
        rmap::folio_add_anon_rmap_pte(&phys, old, true);
        Slot::offset(table, Level::Pte, ADDR)
            .lock(&phys, Level::Pte)
            .set(Entry::new(old, leaf_bits(true, false, false)));
        Some(FaultZap {
            phys,
            table,
            old,
            new,
            rss: AtomicI64::new(1),
        })
    }

    /// The write fault at [`ADDR`]: `do_wp_page`'s copy (`wp_page_copy`) from the lockless
    /// walk's entry to the new PTE. With `locked`, the engine's protocol: the re-check and the
    /// writes under the PTL (`Slot::lock_if_same`, `LockedSlot::set`). Without, the same
    /// re-check and writes with no lock. Returns whether the new page was mapped.
    pub fn wp_copy(&self, locked: bool) -> bool {
        let phys = &*self.phys;
        let slot = Slot::offset(self.table, Level::Pte, ADDR);
        let orig = slot.load(phys);
        if !orig.present() || orig.writable() {
            return false;
        }
        if locked {
            let Some(pte) = slot.lock_if_same(phys, Level::Pte, orig) else {
                return false;
            };
            self.replace(|e| pte.set(e));
            return true;
        }
        if slot.load(phys) != orig {
            return false;
        }
        self.replace(|e| slot.store_unlocked(phys, e));
        true
    }

    /// `ptep_clear_flush`, `folio_add_new_anon_rmap`, `set_pte_at`, then the old page's
    /// `folio_remove_rmap_pte` (`fault/wp.rs`), each entry write through `write`.
    fn replace(&self, write: impl Fn(Entry)) {
        let phys = &*self.phys;
        write(Entry::NONE);
        rmap::folio_add_anon_rmap_pte(phys, self.new, true);
        self.rss.fetch_add(1, Relaxed);
        write(Entry::new(self.new, leaf_bits(true, true, false)));
        self.rss.fetch_sub(1, Relaxed);
        rmap::folio_remove_rmap_pte(phys, self.old);
    }

    /// `zap_pte_range` over `[ADDR, ADDR + 2 pages)` under a [`TableCursor`], as `memory.rs`
    /// runs it: each entry that is not none is taken and its page unmapped. Returns the pages
    /// taken (the gather's, in the engine).
    pub fn zap(&self) -> Vec<Pfn> {
        let phys = &*self.phys;
        let pte = TableCursor::lock(phys, self.table, Level::Pte);
        let mut taken = Vec::new();
        let mut addr = ADDR;
        while addr < ADDR + 2 * PAGE_SIZE {
            let at = addr;
            addr += PAGE_SIZE;
            if pte.get(at).is_none() {
                continue;
            }
            let old = pte.take(at);
            rmap::folio_remove_rmap_pte(phys, old.pfn());
            self.rss.fetch_sub(1, Relaxed);
            taken.push(old.pfn());
        }
        taken
    }

    /// After both: nothing mapped, every count back to zero. The error names what is not.
    pub fn check(&self) -> Result<(), String> {
        let phys = &*self.phys;
        let e = Slot::offset(self.table, Level::Pte, ADDR).load(phys);
        let (old, new) = (
            phys.meta(self.old).map_count(),
            phys.meta(self.new).map_count(),
        );
        let rss = self.rss.load(Relaxed);
        if !e.is_none() || old != 0 || new != 0 || rss != 0 {
            return Err(format!(
                "after the fault and the zap: PTE {e:?} (pfn {:?}), mapcount old {old} new \
                 {new}, rss {rss}",
                e.pfn()
            ));
        }
        Ok(())
    }
}
