//! `/proc/vmstat`: event counters and page-state gauges, per CPU, folded when read.
//!
//! Mirrors `include/linux/vm_event_item.h`, `include/linux/mmzone.h` (`zone_stat_item`,
//! `node_stat_item`) and `mm/vmstat.c`. The kernel keeps per-CPU differentials and folds them
//! into zone/node totals every second; we keep one signed 64-bit slot per item per CPU and sum
//! them on read, which gives the same totals without the fold threshold.
//!
//! Names are the kernel's, so output compares line for line with a real `/proc/vmstat`. A few
//! items are the engine's own (prefixed `usermm_`): they count operations on shared cache lines
//! that the kernel only exposes through `perf` (e.g. the huge zero page's global refcount).
//! One is a memcg event: `oom` (`memory.events`), the machine being one memory domain.

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

use serde::Serialize;

use crate::cpu::{CpuId, PerCpu};

macro_rules! vm_items {
    ($($variant:ident => $name:literal,)*) => {
        /// One `/proc/vmstat` line.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(usize)]
        pub enum VmItem { $($variant,)* }

        impl VmItem {
            pub const ALL: &'static [VmItem] = &[$(VmItem::$variant,)*];
            /// The kernel's name of the item.
            pub fn name(self) -> &'static str {
                match self { $(VmItem::$variant => $name,)* }
            }
        }
    };
}

vm_items! {
    // zone_stat_item / node_stat_item gauges (pages)
    NrFreePages => "nr_free_pages",
    NrAnonPages => "nr_anon_pages",
    NrAnonTransparentHugepages => "nr_anon_transparent_hugepages",
    NrPageTablePages => "nr_page_table_pages",
    NrMlock => "nr_mlock",
    NrInactiveAnon => "nr_inactive_anon",
    NrUnevictable => "nr_unevictable",
    // vm_event_item counters
    PgallocNormal => "pgalloc_normal",
    Pgfree => "pgfree",
    Pgfault => "pgfault",
    Pgmajfault => "pgmajfault",
    ThpFaultAlloc => "thp_fault_alloc",
    ThpFaultFallback => "thp_fault_fallback",
    ThpSplitPmd => "thp_split_pmd",
    ThpZeroPageAlloc => "thp_zero_page_alloc",
    ThpZeroPageAllocFailed => "thp_zero_page_alloc_failed",
    NrTlbLocalFlushAll => "nr_tlb_local_flush_all",
    NrTlbLocalFlushOne => "nr_tlb_local_flush_one",
    NrTlbRemoteFlush => "nr_tlb_remote_flush",
    UnevictablePgsMlocked => "unevictable_pgs_mlocked",
    UnevictablePgsMunlocked => "unevictable_pgs_munlocked",
    HtlbBuddyAllocSuccess => "htlb_buddy_alloc_success",
    DropPagecache => "drop_pagecache",
    // memcg's `memory.events` event, not a /proc/vmstat line in Linux: a fault whose
    // allocation failed with the OOM killer as the next step (MEMCG_OOM, counted in
    // mem_cgroup_oom). The engine's machine is one memory domain without an OOM killer, so it
    // counts here; see `mm::fault` ("Out of memory"). `oom_kill` would count kills: none.
    Oom => "oom",
    // CONFIG_PER_VMA_LOCK_STATS
    VmaLockSuccess => "vma_lock_success",
    VmaLockAbort => "vma_lock_abort",
    VmaLockRetry => "vma_lock_retry",
    VmaLockMiss => "vma_lock_miss",
    // the engine's own
    PcpRefill => "usermm_pcp_refill",
    PcpDrain => "usermm_pcp_drain",
    HugeZeroRefGet => "usermm_huge_zero_ref_get",
    HugeZeroRefPut => "usermm_huge_zero_ref_put",
    GatherBatchAlloc => "usermm_gather_batch_alloc",
    GatherForcedFlush => "usermm_gather_forced_flush",
    FreeJobsQueued => "usermm_free_jobs_queued",
    FreeJobAllocFailed => "usermm_free_job_alloc_failed",
}

pub const NR_VM_ITEMS: usize = VmItem::ALL.len();

/// The machine's vmstat: one slot per item per CPU.
#[derive(Debug)]
pub struct VmStat {
    percpu: PerCpu<[AtomicI64; NR_VM_ITEMS]>,
}

impl VmStat {
    pub fn new(nr_cpus: usize) -> Self {
        Self {
            percpu: PerCpu::new(nr_cpus, |_| std::array::from_fn(|_| AtomicI64::new(0))),
        }
    }

    #[doc(alias = "count_vm_event")]
    #[inline]
    pub fn inc(&self, cpu: CpuId, item: VmItem) {
        self.percpu[cpu][item as usize].fetch_add(1, Relaxed);
    }

    #[doc(alias = "mod_zone_page_state")]
    #[doc(alias = "count_vm_events")]
    #[inline]
    pub fn add(&self, cpu: CpuId, item: VmItem, delta: i64) {
        self.percpu[cpu][item as usize].fetch_add(delta, Relaxed);
    }

    /// The folded value of one item.
    #[doc(alias = "global_zone_page_state")]
    pub fn get(&self, item: VmItem) -> i64 {
        self.percpu
            .iter()
            .map(|c| c[item as usize].load(Relaxed))
            .sum()
    }

    pub fn snapshot(&self) -> VmStatSnapshot {
        VmStatSnapshot {
            values: VmItem::ALL.iter().map(|&i| self.get(i)).collect(),
        }
    }
}

/// Folded vmstat at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmStatSnapshot {
    values: Vec<i64>,
}

impl VmStatSnapshot {
    pub fn get(&self, item: VmItem) -> i64 {
        self.values[item as usize]
    }

    /// `self − earlier`, item by item.
    pub fn since(&self, earlier: &VmStatSnapshot) -> VmStatSnapshot {
        VmStatSnapshot {
            values: self
                .values
                .iter()
                .zip(&earlier.values)
                .map(|(a, b)| a - b)
                .collect(),
        }
    }

    /// `(name, value)` pairs in `/proc/vmstat` order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, i64)> + '_ {
        VmItem::ALL.iter().map(move |&i| (i.name(), self.get(i)))
    }

    /// The `/proc/vmstat` text: `name value` per line.
    pub fn render(&self) -> String {
        self.iter().map(|(n, v)| format!("{n} {v}\n")).collect()
    }
}

impl Serialize for VmStatSnapshot {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(NR_VM_ITEMS))?;
        for (n, v) in self.iter() {
            m.serialize_entry(n, &v)?;
        }
        m.end()
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn per_cpu_counts_fold_on_read() {
        let s = VmStat::new(4);
        s.inc(CpuId(0), VmItem::Pgfault);
        s.inc(CpuId(3), VmItem::Pgfault);
        s.add(CpuId(1), VmItem::NrFreePages, -5);
        let snap = s.snapshot();
        assert_eq!(snap.get(VmItem::Pgfault), 2);
        assert_eq!(snap.get(VmItem::NrFreePages), -5);
        s.inc(CpuId(2), VmItem::Pgfault);
        assert_eq!(s.snapshot().since(&snap).get(VmItem::Pgfault), 1);
        assert!(snap.render().contains("pgfault 2\n"));
        let names: std::collections::HashSet<_> = VmItem::ALL.iter().map(|i| i.name()).collect();
        assert_eq!(names.len(), NR_VM_ITEMS, "duplicate vmstat names");
    }
}
