//! `Mm::validate` (`validate_mm`, and the page-table checks `CONFIG_DEBUG_VM` would make),
//! across a fork family: pages shared copy-on-write are counted in every mm that maps them.
//!
//! Checks, per mm: the VMA tree's invariants; every leaf inside a VMA and mapping an allocated
//! frame; `MM_ANONPAGES`/`MM_SHMEMPAGES` equal to what the tables map; every table within reach
//! of a VMA and counted in `nr_page_table_pages`. Across the family: every frame's mapcount
//! (a PTE-mapped page's own, a PMD-mapped THP's entire mapcount, a hugetlb page's) equals the
//! number of entries mapping it that way in all the mms together, and no table page (PGD,
//! upper tables, PTE tables, deposits) belongs to two mms.
//!
//! # Locks
//! Every live mm of the family is locked for writing, in id order (so two validations of one
//! family cannot deadlock), and all its VMAs write-locked (per-VMA locks), for the whole check.
//! A member that has exited and been torn down (`exit_mmap` ran, under its write lock) is
//! skipped: it maps nothing, and its PGD may already be free.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::vma::{VmaKind, VmaTree};
use super::{huge_memory, rmap, Mm, RssItem};
use crate::addr::Pfn;
use crate::page_alloc::meta::{PG_ANON, PG_HEAD, PG_HUGETLB, PG_PGTABLE};

impl Mm {
    /// `validate_mm` plus the page-table checks of the module doc, over this mm's fork family
    /// (see the module doc). Returns the first violation found.
    pub fn validate(&self) -> Result<(), String> {
        let mut members = self.family_members();
        // A fork that began before the locks may have added its child since the list was
        // taken (and copied into it before we locked the parent): take the list again under
        // the locks, until it is the one locked. No member joins after that: a fork needs
        // its parent's write lock.
        let mut guards = loop {
            if !members.iter().any(|m| m.id == self.id) {
                return Err(format!("mm {} is not in its own fork family", self.id));
            }
            let guards: Vec<_> = members.iter().map(|m| m.mmap_lock.write()).collect();
            let now = self.family_members();
            if now.iter().map(|m| m.id).eq(members.iter().map(|m| m.id)) {
                break guards;
            }
            drop(guards);
            members = now;
        };
        // Faults and MADV_DONTNEED under per-VMA locks do not take the mmap lock: write-lock
        // every VMA too, so that no page table changes under the walk.
        for g in &mut guards {
            g.vma_start_write_all();
        }
        let mut mapped = HashMap::new();
        let mut tables = HashSet::new();
        for (m, tree) in members.iter().zip(&guards) {
            // An exited member still referenced: once its exit_mmap has run (it empties the
            // tree under this lock) its tables are gone, the PGD maybe too. One whose exit
            // waits for our lock still has them all, and their mapcounts.
            if m.is_exited() && tree.map_count() == 0 {
                continue;
            }
            m.validate_one(tree, &mut mapped, &mut tables)
                .map_err(|e| format!("mm {}: {e}", m.id))?;
        }
        let phys = self.machine.phys();
        for (&(pfn, huge), &count) in &mapped {
            let m = phys.meta(Pfn(pfn));
            let mc = if !huge || m.test(PG_HUGETLB) {
                m.map_count()
            } else {
                rmap::entire_mapcount(m)
            };
            if mc != count {
                let how = if huge { "PMD" } else { "PTE" };
                return Err(format!(
                    "pfn {pfn:#x}: mapcount {mc}, mapped by {count} {how}s in the family"
                ));
            }
        }
        drop(guards);
        Ok(())
    }

    /// The live mms of this one's fork family, in id order (the order they are locked in).
    fn family_members(&self) -> Vec<Arc<Mm>> {
        let mut members: Vec<Arc<Mm>> = self
            .family
            .lock()
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .collect();
        members.sort_by_key(|m| m.id);
        members.dedup_by_key(|m| m.id);
        members
    }

    /// One mm's part of [`Mm::validate`]: its VMAs, rss and tables, and its leaves counted
    /// into `mapped` (by frame, and whether a PMD maps it) and its tables into `tables`.
    fn validate_one(
        &self,
        tree: &VmaTree,
        mapped: &mut HashMap<(u64, bool), i32>,
        tables_seen: &mut HashSet<u64>,
    ) -> Result<(), String> {
        let machine = &self.machine;
        let phys = machine.phys();
        tree.validate(machine.max_map_count())?;
        let zero = machine.zero_pfn();
        let huge_zero = machine.huge_zero().pfn();
        let (mut anon, mut shmem) = (0i64, 0i64);
        let mut err = None;
        crate::pgtable::for_each_leaf(phys, self.pgd, |addr, e, huge| {
            if err.is_some() {
                return;
            }
            let Some(v) = tree.find_vma(addr).filter(|v| v.start <= addr) else {
                err = Some(format!("leaf {e:?} at {addr:#x} outside every VMA"));
                return;
            };
            let pfn = e.pfn();
            if e.special() {
                let ok = pfn == zero || Some(pfn) == huge_zero || matches!(v.kind, VmaKind::PfnMap);
                if !ok {
                    err = Some(format!("special leaf at {addr:#x} maps {pfn:?}"));
                }
                if e.writable() && (pfn == zero || Some(pfn) == huge_zero) {
                    err = Some(format!("writable zero page at {addr:#x}"));
                }
                return;
            }
            let m = phys.meta(rmap::compound_head(phys, pfn));
            if m.ref_count() <= 0 {
                err = Some(format!("leaf at {addr:#x} maps free frame {pfn:?}"));
                return;
            }
            if huge && !m.test(PG_HEAD) {
                err = Some(format!("huge leaf at {addr:#x} maps non-compound {pfn:?}"));
                return;
            }
            *mapped.entry((pfn.0, huge)).or_default() += 1;
            let n = if huge { 512 } else { 1 };
            if m.test(crate::page_alloc::meta::PG_HUGETLB) {
                return;
            }
            if m.test(PG_ANON) {
                anon += n;
            } else {
                shmem += n;
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        if anon != self.rss(RssItem::AnonPages) {
            return Err(format!(
                "MM_ANONPAGES {} ≠ {anon} mapped",
                self.rss(RssItem::AnonPages)
            ));
        }
        if shmem != self.rss(RssItem::ShmemPages) {
            return Err(format!(
                "MM_SHMEMPAGES {} ≠ {shmem}",
                self.rss(RssItem::ShmemPages)
            ));
        }
        // Tables: within reach of a VMA, flagged, and counted.
        let mut tables = 1i64;
        let mut err = None;
        // (An exited member reaches here only while its exit waits for our lock: its PGD and
        // every table are still its own.)
        if !tables_seen.insert(self.pgd.0) {
            return Err(format!("PGD {:?} shared with another mm", self.pgd));
        }
        crate::pgtable::for_each_table(phys, self.pgd, |base, span, pfn| {
            tables += 1;
            if !tables_seen.insert(pfn.0) {
                err = Some(format!(
                    "table {pfn:?} for {base:#x} shared with another mm"
                ));
            }
            if !phys.meta(pfn).test(PG_PGTABLE) {
                err = Some(format!("table {pfn:?} for {base:#x} is not PG_table"));
            }
            let reach_end = base.saturating_add(span);
            if tree.intersecting(base, reach_end).next().is_none() {
                err = Some(format!(
                    "table {pfn:?} covering {base:#x}+{span:#x} outlives its VMAs"
                ));
            }
            if span == crate::addr::PUD_SIZE {
                // A PMD table: one deposited table per huge PMD that is not hugetlb.
                let huge = crate::pgtable::scan_table(phys, pfn)
                    .filter(|e| e.huge() && !phys.meta(e.pfn()).test(PG_HUGETLB))
                    .count();
                let mut deposits = 0;
                for d in huge_memory::deposited(phys, pfn) {
                    deposits += 1;
                    if deposits > huge || !phys.meta(d).test(PG_PGTABLE) {
                        err = Some(format!("PMD table {pfn:?}: bad deposit {d:?}"));
                        break;
                    }
                    if !tables_seen.insert(d.0) {
                        err = Some(format!("deposited table {d:?} shared with another mm"));
                    }
                }
                if deposits != huge {
                    err = Some(format!(
                        "PMD table {pfn:?} for {base:#x}: {huge} huge PMDs, {deposits} deposits"
                    ));
                }
                tables += deposits as i64;
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        if tables != self.nr_tables.load(Relaxed) {
            return Err(format!(
                "{tables} tables reachable, mm counts {}",
                self.nr_tables.load(Relaxed)
            ));
        }
        Ok(())
    }
}
