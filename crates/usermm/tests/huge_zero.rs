//! The huge zero page and its reference policies (seed 002).

mod common;

use std::sync::Arc;

use common::*;
use usermm::config::{HugeZeroWriteFault, ThpMode};
use usermm::mm::mmap::*;
use usermm::mm::RssItem;
use usermm::stats::VmItem;
use usermm::{CpuId, Machine, Mm, Task};

fn hz_machine(per_mm_ref: bool, wf: HugeZeroWriteFault) -> Arc<Machine> {
    machine_with(|c| {
        c.thp = ThpMode::Always;
        c.huge_zero.per_mm_ref = per_mm_ref;
        c.huge_zero.write_fault = wf;
    })
}

fn ro_walk(mm: &Arc<Mm>, cpu: CpuId, len: u64) -> u64 {
    let a = mm
        .mmap(
            cpu,
            0,
            len,
            PROT_READ | PROT_WRITE,
            MAP_PRIVATE | MAP_ANONYMOUS,
            MapFile::None,
        )
        .unwrap();
    Task::new(Arc::clone(mm), cpu)
        .walk(a, len, 2 << 20, false, |_| 0)
        .unwrap();
    a
}

#[test]
fn refcount_returns_to_the_shrinker_bias_and_the_page_is_reallocated() {
    for per_mm in [false, true] {
        let m = hz_machine(per_mm, HugeZeroWriteFault::AllocThp);
        let free0 = free_pages(&m);
        let hz = m.huge_zero();
        assert_eq!(hz.refcount(), 0);
        let mms: Vec<_> = (0..8).map(|_| Mm::new(&m, C0).unwrap()).collect();
        for mm in &mms {
            ro_walk(mm, C0, 8 << 20);
        }
        let faults = 8 * 4;
        // bias + per fault (vanilla) or per mm (patched)
        let expect = 1 + if per_mm { 8 } else { faults };
        assert_eq!(hz.refcount(), expect, "per_mm_ref={per_mm}");
        assert_eq!(m.vmstat().get(VmItem::ThpZeroPageAlloc), 1);
        // While referenced, the shrinker has nothing to free.
        assert_eq!(m.drop_caches(C0), 0);
        for mm in &mms {
            assert_eq!(mm.rss(RssItem::AnonPages), 0);
            mm.validate().unwrap();
            mm.mmput(C0);
        }
        assert_eq!(hz.refcount(), 1, "only the shrinker's reference is left");
        assert_eq!(m.drop_caches(C0), 512);
        assert_eq!(hz.refcount(), 0);
        assert!(hz.pfn().is_none());
        // A later fault allocates it again.
        let mm = Mm::new(&m, C0).unwrap();
        ro_walk(&mm, C0, 2 << 20);
        assert_eq!(m.vmstat().get(VmItem::ThpZeroPageAlloc), 2);
        drop(mms);
        exit_and_check(&m, mm, free0);
    }
}

#[test]
fn global_counter_operations_per_policy() {
    for per_mm in [false, true] {
        let m = hz_machine(per_mm, HugeZeroWriteFault::AllocThp);
        let mm = Mm::new(&m, C0).unwrap();
        let vm0 = m.vmstat_snapshot();
        let a = ro_walk(&mm, C0, 16 << 20);
        mm.munmap(C0, a, 16 << 20).unwrap();
        mm.mmput(C0);
        let d = m.vmstat_snapshot().since(&vm0);
        let ops = d.get(VmItem::HugeZeroRefGet) + d.get(VmItem::HugeZeroRefPut);
        assert_eq!(d.get(VmItem::Pgfault), 8);
        // vanilla: a get per fault and a put per zapped PMD; patched: one of each per mm.
        assert_eq!(ops, if per_mm { 2 } else { 16 }, "per_mm_ref={per_mm}");
    }
}

/// v4.7's "thp: keep huge zero page pinned until tlb flush": `zap_huge_pmd` gathers the huge
/// zero page (`tlb_remove_page_size`) and `release_pages` drops the PMD's reference when the
/// gather is flushed — a full gather forces a flush in mid-zap, whose references go then —
/// where the engine used to put at zap time and gather nothing. With the per-mm reference the
/// page is gathered all the same and skipped.
#[test]
fn a_zap_gathers_the_huge_zero_page_and_release_pages_puts_it() {
    use usermm::mm::mmu_gather::{MAX_GATHER_BATCH, MMU_GATHER_BUNDLE};
    // The on-stack slots and one batch page, then one entry more: one forced flush.
    let n = (MMU_GATHER_BUNDLE + MAX_GATHER_BATCH + 1) as u64;
    for per_mm in [false, true] {
        let m = machine_with(|c| {
            c.thp = ThpMode::Always;
            c.huge_zero.per_mm_ref = per_mm;
            c.gather.max_batch_count = 1;
        });
        let free0 = free_pages(&m);
        let mm = Mm::new(&m, C0).unwrap();
        let len = n << 21;
        let a = ro_walk(&mm, C0, len);
        let hz = m.huge_zero();
        let held = if per_mm { 1 } else { n as i64 };
        assert_eq!(hz.refcount(), 1 + held, "per_mm_ref={per_mm}");
        let vm0 = m.vmstat_snapshot();
        mm.munmap(C0, a, len).unwrap();
        let d = m.vmstat_snapshot().since(&vm0);
        assert_eq!(d.get(VmItem::GatherBatchAlloc), 1, "per_mm_ref={per_mm}");
        assert_eq!(d.get(VmItem::GatherForcedFlush), 1, "per_mm_ref={per_mm}");
        assert_eq!(
            d.get(VmItem::HugeZeroRefPut),
            if per_mm { 0 } else { n as i64 },
            "per_mm_ref={per_mm}"
        );
        assert_eq!(hz.refcount(), if per_mm { 2 } else { 1 });
        mm.validate().unwrap();
        exit_and_check(&m, mm, free0);
    }
}

#[test]
fn write_after_huge_zero_read_both_eras() {
    for (wf, thp_allocs, splits, rss) in [
        (HugeZeroWriteFault::AllocThp, 1, 0, 512),
        (HugeZeroWriteFault::Split, 0, 1, 1),
    ] {
        for per_mm in [false, true] {
            let m = hz_machine(per_mm, wf);
            let free0 = free_pages(&m);
            let mm = Mm::new(&m, C0).unwrap();
            let a = ro_walk(&mm, C0, 2 << 20);
            let t = task(&mm);
            let vm0 = m.vmstat_snapshot();
            t.write_u64(a + 4096 * 7, 0xabcd).unwrap();
            let d = m.vmstat_snapshot().since(&vm0);
            assert_eq!(d.get(VmItem::ThpFaultAlloc), thp_allocs, "{wf:?}");
            assert_eq!(d.get(VmItem::ThpSplitPmd), splits, "{wf:?}");
            assert_eq!(mm.rss(RssItem::AnonPages), rss, "{wf:?}");
            assert_eq!(t.read_u64(a + 4096 * 7).unwrap(), 0xabcd);
            assert_eq!(t.read_u64(a + 4096 * 8).unwrap(), 0);
            mm.validate().unwrap();
            exit_and_check(&m, mm, free0);
        }
    }
}

#[test]
fn munmap_of_part_of_a_huge_zero_range() {
    for per_mm in [false, true] {
        let m = hz_machine(per_mm, HugeZeroWriteFault::AllocThp);
        let free0 = free_pages(&m);
        let mm = Mm::new(&m, C0).unwrap();
        let a = ro_walk(&mm, C0, 4 << 20);
        // A hole in the first 2 MiB splits its PMD into zero-page PTEs.
        mm.munmap(C0, a + (1 << 20), 8192).unwrap();
        assert_eq!(m.vmstat().get(VmItem::ThpSplitPmd), 1);
        let t = task(&mm);
        assert_eq!(t.read_u64(a).unwrap(), 0);
        assert_eq!(t.read_u64(a + (3 << 20)).unwrap(), 0);
        assert!(t.read_u64(a + (1 << 20)).is_err());
        assert_eq!(mm.rss(RssItem::AnonPages), 0);
        mm.validate().unwrap();
        // Vanilla: bias + the second PMD's reference (the split put the first's back).
        // Patched: bias + the mm's one reference.
        assert_eq!(m.huge_zero().refcount(), 2);
        exit_and_check(&m, mm, free0);
    }
}

#[test]
fn concurrent_faulting_mms_keep_invariants() {
    for per_mm in [false, true] {
        let m = machine_with(|c| {
            c.thp = ThpMode::Always;
            c.cpus = 8;
            c.huge_zero.per_mm_ref = per_mm;
        });
        let free0 = free_pages(&m);
        let hs: Vec<_> = (0..8u16)
            .map(|i| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    let cpu = CpuId(i);
                    let mm = Mm::new(&m, cpu).unwrap();
                    for _ in 0..4 {
                        let a = ro_walk(&mm, cpu, 32 << 20);
                        mm.validate().unwrap();
                        mm.munmap(cpu, a, 32 << 20).unwrap();
                    }
                    ro_walk(&mm, cpu, 8 << 20);
                    mm.mmput(cpu);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(m.huge_zero().refcount(), 1);
        m.drop_caches(C0);
        assert_eq!(free_pages(&m), free0);
        m.validate().unwrap();
    }
}

#[test]
fn allocation_failure_falls_back_to_4k_zero_pages() {
    // A machine so small that no free order-9 block remains once memory is fragmented.
    let m = machine_with(|c| {
        c.mem = 16 << 20;
        c.thp = ThpMode::Always;
    });
    let mm = Mm::new(&m, C0).unwrap();
    // Pin one page in every 2 MiB block so that no order-9 block is free.
    let mut pinned = vec![];
    while let Ok(p) = m
        .phys()
        .alloc_owned(C0, usermm::Order(0), usermm::page_alloc::Gfp::NOWAIT)
    {
        pinned.push(p);
    }
    // The others are freed as their handles drop.
    let keep: Vec<_> = pinned
        .into_iter()
        .filter(|p| p.pfn().0 % 512 == 0)
        .collect();
    let a = mm
        .mmap(
            C0,
            0,
            2 << 20,
            PROT_READ,
            MAP_PRIVATE | MAP_ANONYMOUS,
            MapFile::None,
        )
        .unwrap();
    let t = task(&mm);
    assert_eq!(t.read_u64(a).unwrap(), 0);
    assert_eq!(m.vmstat().get(VmItem::ThpZeroPageAllocFailed), 1);
    assert_eq!(m.vmstat().get(VmItem::Pgfault), 1);
    assert_eq!(t.read_u64(a + 4096).unwrap(), 0);
    assert_eq!(
        m.vmstat().get(VmItem::Pgfault),
        2,
        "4 KiB zero pages: one fault per page"
    );
    mm.validate().unwrap();
    drop(keep);
}
