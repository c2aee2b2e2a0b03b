//! Unit tests of the physical page allocator. Every test ends with `validate()`.

use std::sync::Arc;

use super::meta::*;
use super::*;
use crate::config::{BackingMode, MachineConfig};
use crate::cpu::Cpus;
use crate::error::AllocError;

fn phys_with(mem: u64, cpus: u16, nodes: u16, f: impl FnOnce(&mut MachineConfig)) -> PhysMem {
    let mut cfg = MachineConfig {
        mem,
        cpus,
        nodes,
        ..Default::default()
    };
    f(&mut cfg);
    cfg.validate().unwrap();
    let stat = Arc::new(VmStat::new(cpus as usize));
    PhysMem::new(&cfg, Cpus::new(cpus, nodes), stat).unwrap()
}

fn phys(mem: u64) -> PhysMem {
    phys_with(mem, 2, 1, |_| {})
}

const C0: CpuId = CpuId(0);
const C1: CpuId = CpuId(1);

mod buddy {
    use super::*;

    #[test]
    fn boot_frees_everything_in_max_order_blocks() {
        let p = phys(64 << 20);
        let r = p.validate().unwrap();
        assert_eq!(r.buddy_free, 16384);
        assert_eq!(p.nr_free_pages(), 16384);
        let fa = p.nodes[0].zone.lock.lock();
        assert_eq!(fa.lists[10].len(), 16);
        assert!(fa.lists[..10].iter().all(|l| l.is_empty()));
    }

    #[test]
    fn split_then_merge_back_to_one_block() {
        let p = phys(16 << 20);
        // order 5 isn't a pcp order: straight from the buddy, splitting a 4 MiB block.
        let a = p.alloc_pages(C0, Order(5), Gfp::KERNEL).unwrap();
        {
            let fa = p.nodes[0].zone.lock.lock();
            // 1024 = 32 + 32 + 64 + 128 + 256 + 512: one free block each of orders 5..=9.
            for o in 5..=9 {
                assert_eq!(fa.lists[o].len(), 1, "order {o}");
            }
            assert_eq!(fa.lists[10].len(), 3);
        }
        assert!(p.meta(a).test(PG_HEAD));
        assert!(p.meta(a.add(31)).test(PG_TAIL));
        p.validate().unwrap();
        p.free_pages(C0, a, Order(5)).unwrap();
        let fa = p.nodes[0].zone.lock.lock();
        assert_eq!(
            fa.lists[10].len(),
            4,
            "buddies must coalesce back to order 10"
        );
        drop(fa);
        p.validate().unwrap();
    }

    /// `buddy_merge_likely`: a freed block whose buddy is in use but whose buddy one order up
    /// is free goes to the tail of its free list (taken last, so that it can merge twice when
    /// its buddy comes back); any other goes to the head. Six order-5 blocks are carved from
    /// one 4 MiB block (lowest first, as `expand` leaves the upper halves free): X+192 stays
    /// free at order 6. Freeing X+64 (higher buddy X, in use) puts it at the head; freeing
    /// X+128 (buddy X+160 in use, higher buddy X+192 free) puts it behind, so the next two
    /// order-5 allocations return X+64 and then X+128.
    #[test]
    fn a_block_likely_to_merge_goes_to_the_tail() {
        let p = phys(16 << 20);
        let o5 = || p.alloc_pages(C0, Order(5), Gfp::KERNEL).unwrap();
        let blocks: Vec<Pfn> = (0..6).map(|_| o5()).collect();
        let x = blocks[0].0;
        assert_eq!(
            blocks.iter().map(|b| b.0 - x).collect::<Vec<_>>(),
            [0, 32, 64, 96, 128, 160]
        );
        p.free_pages(C0, blocks[2], Order(5)).unwrap();
        p.free_pages(C0, blocks[4], Order(5)).unwrap();
        assert_eq!(o5(), blocks[2], "the unlikely merge went to the head");
        assert_eq!(o5(), blocks[4], "the likely merge went to the tail");
        p.validate().unwrap();
    }

    #[test]
    fn bad_orders_and_double_frees_are_errors() {
        let p = phys(16 << 20);
        assert_eq!(
            p.alloc_pages(C0, Order(11), Gfp::KERNEL),
            Err(AllocError::BadOrder)
        );
        let a = p.alloc_pages(C0, Order(4), Gfp::KERNEL).unwrap();
        assert_eq!(
            p.free_pages(C0, a.add(1), Order(0)),
            Err(PageError::TailPage)
        );
        assert_eq!(p.free_pages(C0, a, Order(3)), Err(PageError::BadOrder));
        p.free_pages(C0, a, Order(4)).unwrap();
        assert_eq!(p.free_pages(C0, a, Order(4)), Err(PageError::NotAllocated));
        assert_eq!(
            p.free_pages(C0, Pfn(1 << 40), Order(0)),
            Err(PageError::OutOfRange)
        );
        p.validate().unwrap();
    }

    #[test]
    fn exhaustion_is_an_error_and_everything_comes_back() {
        let p = phys(16 << 20);
        let mut got = vec![];
        while let Ok(pfn) = p.alloc_pages(C0, Order(0), Gfp::KERNEL) {
            got.push(pfn);
        }
        assert_eq!(got.len(), 4096);
        assert_eq!(p.nr_free_pages(), 0);
        p.validate().unwrap();
        p.release_pages(C1, &got);
        p.drain_all_pages();
        assert_eq!(p.nr_free_pages(), 4096);
        let fa = p.nodes[0].zone.lock.lock();
        assert_eq!(fa.lists[10].len(), 4);
        drop(fa);
        p.validate().unwrap();
    }

    #[test]
    fn zeroing_is_real_with_full_backing() {
        let p = phys(16 << 20);
        let a = p.alloc_pages(C0, Order(0), Gfp::KERNEL).unwrap();
        p.backing().write(a, 0, &[0xaa; 64]);
        p.free_pages(C0, a, Order(0)).unwrap();
        // LIFO pcp: the same frame comes back, and __GFP_ZERO clears it.
        let b = p.alloc_pages(C0, Order(0), Gfp::ZERO).unwrap();
        assert_eq!(a, b);
        let mut buf = [1u8; 64];
        p.backing().read(b, 0, &mut buf);
        assert_eq!(buf, [0; 64]);
        p.free_pages(C0, b, Order(0)).unwrap();
        p.validate().unwrap();
    }
}

mod known_zero {
    use super::*;

    /// Fill memory with allocations, write every byte, free it all, allocate it all again with
    /// `__GFP_ZERO`: every byte reads zero, under every allocator policy, with and without the
    /// prefault, in 4 KiB and THP-sized blocks.
    #[test]
    fn a_frame_written_freed_and_reallocated_reads_zero_in_all_policies() {
        for prefault in [false, true] {
            for (auto_tune, pick_outside) in [(false, false), (true, false), (false, true)] {
                for order in [Order(0), Order(3), HPAGE_PMD_ORDER] {
                    let p = phys_with(16 << 20, 2, 1, |c| {
                        c.prefault = prefault;
                        c.pcp.auto_tune = auto_tune;
                        c.pcp.pick_outside_lock = pick_outside;
                    });
                    let what = format!("prefault {prefault} auto_tune {auto_tune} pick_outside {pick_outside} order {}", order.0);
                    let grab = |gfp: Gfp| {
                        let mut got = Vec::new();
                        let mut cpu = 0;
                        while let Ok(pfn) = p.alloc_pages(CpuId(cpu), order, gfp.union(Gfp::NOWAIT))
                        {
                            got.push((cpu, pfn));
                            cpu ^= 1;
                        }
                        got
                    };
                    let first = grab(Gfp::KERNEL);
                    assert!(
                        first.len() as u64 >= (12 << 20) / (PAGE_SIZE << order.0),
                        "{what}"
                    );
                    let junk = vec![0xa5u8; PAGE_SIZE as usize];
                    for &(_, pfn) in &first {
                        for i in 0..order.nr_pages() {
                            p.backing().write(pfn.add(i), 0, &junk);
                        }
                    }
                    // Free from the other CPU than the one that allocated (remote frees).
                    for &(cpu, pfn) in &first {
                        p.free_pages(CpuId(cpu ^ 1), pfn, order).unwrap();
                    }
                    p.drain_all_pages();
                    let second = grab(Gfp::ZERO);
                    assert_eq!(second.len(), first.len(), "{what}");
                    let mut page = vec![1u8; PAGE_SIZE as usize];
                    for &(_, pfn) in &second {
                        for i in 0..order.nr_pages() {
                            p.backing().read(pfn.add(i), 0, &mut page);
                            assert!(page.iter().all(|&b| b == 0), "{what}: pfn {:#x}", pfn.0 + i);
                        }
                    }
                    for &(cpu, pfn) in &second {
                        p.free_pages(CpuId(cpu), pfn, order).unwrap();
                    }
                    p.validate().unwrap();
                }
            }
        }
    }

    #[test]
    fn only_never_owned_frames_are_known_zero() {
        let p = phys(16 << 20);
        let a = p.alloc_pages(C0, Order(0), Gfp::KERNEL).unwrap();
        assert!(!p.backing().known_zero(a));
        // The next frame on the pcp list has not been handed out yet.
        let b = p.alloc_pages(C0, Order(0), Gfp::ZERO).unwrap();
        assert!(!p.backing().known_zero(b));
        let untouched = (0..p.nr_frames())
            .filter(|&f| p.backing().known_zero(Pfn(f)))
            .count() as u64;
        // Everything but the two frames is as the host gave it.
        assert_eq!(untouched, p.nr_frames() - 2);
        p.free_pages(C0, a, Order(0)).unwrap();
        p.free_pages(C0, b, Order(0)).unwrap();
        assert!(!p.backing().known_zero(a) && !p.backing().known_zero(b));
        p.validate().unwrap();
    }
}

mod pcp {
    use super::*;

    #[test]
    fn refill_takes_batch_and_drain_starts_at_high() {
        let p = phys_with(64 << 20, 2, 1, |c| {
            c.pcp.high = 8;
            c.pcp.batch = 4;
        });
        let a = p.alloc_pages(C0, Order(0), Gfp::KERNEL).unwrap();
        // One refill of `batch` pages, one handed out.
        assert_eq!(p.nodes[0].zone.pcp[C0].lock().count, 3);
        assert_eq!(p.nr_free_pages(), 16384 - 4);
        let mut pages = vec![a];
        for _ in 0..9 {
            pages.push(p.alloc_pages(C0, Order(0), Gfp::KERNEL).unwrap());
        }
        p.validate().unwrap();
        // Free all 10 on CPU 1: its list grows to high (8) and drains batch (4) each time.
        for &pg in &pages {
            p.free_pages(C1, pg, Order(0)).unwrap();
            let c = p.nodes[0].zone.pcp[C1].lock().count;
            assert!(c < 8, "pcp count {c} reached high without draining");
        }
        // 1..=7, then 8 → drain 4 → 4, then 5, 6.
        assert_eq!(p.nodes[0].zone.pcp[C1].lock().count, 6);
        assert_eq!(p.stat.get(VmItem::PcpDrain), 1);
        p.validate().unwrap();
        p.drain_all_pages();
        assert_eq!(p.nr_free_pages(), 16384);
        p.validate().unwrap();
    }

    /// Free `n` pages allocated on CPU 0 from CPU 1, one by one; return the largest pcp count
    /// seen on CPU 1 and the number of drains.
    fn free_run(p: &PhysMem, n: usize) -> (u32, i64) {
        let pages: Vec<_> = (0..n)
            .map(|_| p.alloc_pages(C0, Order(0), Gfp::KERNEL).unwrap())
            .collect();
        let drains0 = p.stat.get(VmItem::PcpDrain);
        let mut peak = 0;
        for &pg in &pages {
            p.free_pages(C1, pg, Order(0)).unwrap();
            peak = peak.max(p.nodes[0].zone.pcp[C1].lock().count);
        }
        (peak, p.stat.get(VmItem::PcpDrain) - drains0)
    }

    #[test]
    fn auto_tune_grows_drains_with_a_run_of_frees() {
        let tuned = phys_with(64 << 20, 2, 1, |c| {
            c.pcp.high = 8;
            c.pcp.batch = 4;
            c.pcp.auto_tune = true;
        });
        // high_max: 16384 pages / 8 / 2 CPUs on the node.
        assert_eq!(tuned.pcp_high_max, 1024);
        let (peak, drains) = free_run(&tuned, 4096);
        // Drains of 4, 8, 16, 32, 64, then 128 (= batch << PCP_BATCH_SCALE_MAX) each: high
        // settles at free_count + batch, and a free that reaches it drains at once.
        assert_eq!(peak, 4 * 32 + 4 - 1);
        assert_eq!(tuned.nodes[0].zone.pcp[C1].lock().high, 132);
        let fixed = phys_with(64 << 20, 2, 1, |c| {
            c.pcp.high = 8;
            c.pcp.batch = 4;
        });
        let (fixed_peak, fixed_drains) = free_run(&fixed, 4096);
        assert_eq!(fixed_peak, 8 - 1);
        assert!(
            drains * 16 < fixed_drains,
            "auto-tuned drains {drains} vs fixed {fixed_drains}"
        );
        // An allocation on CPU 1 halves the run.
        let fc = tuned.nodes[0].zone.pcp[C1].lock().free_count;
        let a = tuned.alloc_pages(C1, Order(0), Gfp::KERNEL).unwrap();
        assert_eq!(tuned.nodes[0].zone.pcp[C1].lock().free_count, fc / 2);
        tuned.free_pages(C1, a, Order(0)).unwrap();
        for p in [&tuned, &fixed] {
            p.validate().unwrap();
            p.drain_all_pages();
            assert_eq!(p.nr_free_pages(), 16384);
            p.validate().unwrap();
        }
    }

    #[test]
    fn picking_outside_zone_lock_frees_the_same_pages() {
        let run = |pick: bool| {
            let p = phys_with(64 << 20, 2, 1, |c| {
                c.pcp.high = 8;
                c.pcp.batch = 4;
                c.pcp.pick_outside_lock = pick;
            });
            p.reset_lock_stats();
            let (peak, drains) = free_run(&p, 2048);
            p.validate().unwrap();
            let meta = p.meta_slice();
            let pcp: Vec<Vec<Pfn>> = p.nodes[0].zone.pcp[C1]
                .lock()
                .lists
                .iter()
                .map(|l| l.iter(meta).collect())
                .collect();
            let buddy: Vec<Vec<Pfn>> = p.nodes[0]
                .zone
                .lock
                .lock()
                .lists
                .iter()
                .map(|l| l.iter(meta).collect())
                .collect();
            let acquisitions = p.lock_stats().zone_lock[0].acquisitions;
            p.drain_all_pages();
            assert_eq!(p.nr_free_pages(), 16384);
            p.validate().unwrap();
            (peak, drains, pcp, buddy, acquisitions)
        };
        let (a, b) = (run(false), run(true));
        assert_eq!((a.0, a.1), (b.0, b.1), "same drains either way");
        assert_eq!(
            a.2, b.2,
            "the same pages left on the pcp lists, in the same order"
        );
        assert_eq!(a.3, b.3, "the same buddy free lists");
        assert!(a.4 > 0);
        assert_eq!(a.4, b.4, "one zone.lock round trip per drain either way");
    }

    #[test]
    fn auto_tune_with_high_below_two_batches_never_underflows() {
        // high - batch < batch: the clamp keeps the drain at high - batch (clamp_t's order).
        let p = phys_with(64 << 20, 2, 1, |c| {
            c.pcp.high = 5;
            c.pcp.batch = 4;
            c.pcp.auto_tune = true;
        });
        let (peak, drains) = free_run(&p, 1000);
        assert!(peak <= 4 * 32 + 4, "peak {peak}");
        assert!(drains > 0);
        p.drain_all_pages();
        assert_eq!(p.nr_free_pages(), 16384);
        p.validate().unwrap();
    }

    #[test]
    fn thp_order_uses_the_pcp_too() {
        let p = phys(64 << 20);
        let t = p.alloc_pages(C0, HPAGE_PMD_ORDER, Gfp::KERNEL).unwrap();
        assert_eq!(t.0 % 512, 0);
        assert!(p.meta(t).test(PG_HEAD));
        assert_eq!(p.meta(t.add(511)).private.load(Relaxed), t.0 as u32);
        p.validate().unwrap();
        p.free_pages(C0, t, HPAGE_PMD_ORDER).unwrap();
        p.validate().unwrap();
    }
}

mod lru {
    use super::*;

    #[test]
    fn add_is_batched_and_release_takes_pages_off() {
        let p = phys_with(64 << 20, 2, 1, |c| c.lru.add_batch = 4);
        let pages: Vec<_> = (0..6)
            .map(|_| p.alloc_pages(C0, Order(0), Gfp::KERNEL).unwrap())
            .collect();
        for &pg in &pages {
            p.lru_cache_add(C0, pg);
        }
        // 4 went to the LRU when the batch filled; 2 wait in the batch holding a reference.
        assert_eq!(p.stat.get(VmItem::NrInactiveAnon), 4);
        assert!(p.meta(pages[5]).test(PG_LRU_BATCH));
        assert_eq!(p.meta(pages[5]).ref_count(), 2);
        assert_eq!(p.validate().unwrap().on_lru, 4);
        // The owner drops its references: LRU pages are freed now, batched ones on drain.
        p.release_pages(C0, &pages);
        assert_eq!(p.stat.get(VmItem::NrInactiveAnon), 0);
        assert_eq!(p.meta(pages[5]).ref_count(), 1);
        p.lru_add_drain(C0);
        assert_eq!(p.meta(pages[5]).ref_count(), 0);
        let r = p.validate().unwrap();
        assert_eq!(r.allocated, 0);
        assert_eq!(r.on_lru, 0);
    }

    #[test]
    fn pages_go_to_their_own_nodes_lru() {
        let p = phys_with(64 << 20, 4, 2, |c| c.lru.add_batch = 1);
        let a = p.alloc_pages(CpuId(0), Order(0), Gfp::KERNEL).unwrap();
        let b = p.alloc_pages(CpuId(3), Order(0), Gfp::KERNEL).unwrap();
        assert_eq!(p.node_of(a), 0);
        assert_eq!(p.node_of(b), 1);
        p.lru_cache_add(CpuId(0), a);
        p.lru_cache_add(CpuId(0), b);
        assert_eq!(p.nodes[0].lru.lock().inactive_anon.len(), 1);
        assert_eq!(p.nodes[1].lru.lock().inactive_anon.len(), 1);
        p.validate().unwrap();
        p.put_page(CpuId(1), a).unwrap();
        p.put_page(CpuId(1), b).unwrap();
        assert_eq!(p.validate().unwrap().allocated, 0);
    }
}

mod zonelist {
    use super::*;

    /// What the zonelist walk reads of zone 0: neither its buddy nor `cpu`'s lists hold a page.
    fn exhausted(p: &PhysMem, cpu: CpuId) -> bool {
        !p.zone_mask.buddy(0) && !p.zone_mask.pcp(cpu, 0)
    }

    /// Regression (issue "Speed at scale"): the zonelist walk took every exhausted zone's pcp
    /// lock on every fallback allocation, so a 64-node machine paid 64 lock round trips per
    /// page. It now passes a zone on the zone mask alone — but only when this CPU's pcp lists
    /// are empty too: pages freed to them are still found before the next node's.
    #[test]
    fn an_exhausted_zone_is_passed_but_its_pcp_pages_are_still_used() {
        let p = phys_with(16 << 20, 2, 2, |_| {});
        let mut got = vec![];
        loop {
            let pfn = p.alloc_pages(C0, Order(0), Gfp::KERNEL).unwrap();
            if p.node_of(pfn) == 1 {
                p.put_page(C0, pfn).unwrap();
                break;
            }
            got.push(pfn);
        }
        assert_eq!(p.nodes[0].zone.free_pages.load(Relaxed), 0);
        // Node 0's pcp list of CPU 0 was emptied by the last local allocations.
        assert!(exhausted(&p, C0));
        p.validate().unwrap();
        // One node-0 page freed on CPU 0 sits on CPU 0's pcp list of node 0, not the buddy:
        // the walk must take it rather than fall back to node 1.
        let back = got.pop().unwrap();
        p.put_page(C0, back).unwrap();
        assert!(!exhausted(&p, C0));
        assert!(exhausted(&p, C1));
        p.validate().unwrap();
        assert_eq!(p.alloc_pages(C0, Order(0), Gfp::KERNEL).unwrap(), back);
        assert!(exhausted(&p, C0));
        got.push(back);
        p.validate().unwrap();
        p.release_pages(C1, &got);
        p.drain_all_pages();
        assert_eq!(p.nr_free_pages(), 4096);
        assert!(!exhausted(&p, C0));
        p.validate().unwrap();
    }
}

mod zonelist_order {
    use super::*;

    /// The walk keeps the zonelist's order: the local node, then the others from 0 up,
    /// skipping exhausted ones (64 nodes: the configuration's most).
    #[test]
    fn fallback_goes_local_then_up_skipping_exhausted_nodes() {
        let p = phys_with(64 * (4 << 20), 64, 64, |_| {});
        let cpu = CpuId(60);
        let mut seen = vec![];
        let mut held = vec![];
        while let Ok(pfn) = p.alloc_pages(cpu, Order(0), Gfp::KERNEL.union(Gfp::NOWAIT)) {
            let n = p.node_of(pfn);
            if seen.last() != Some(&n) {
                seen.push(n);
            }
            held.push(pfn);
            if seen.len() == 4 {
                break;
            }
        }
        assert_eq!(seen, [60, 0, 1, 2]);
        // Node 0 gets a page back on CPU 60's lists: it comes before node 2's.
        let zero = *held.iter().find(|&&f| p.node_of(f) == 0).unwrap();
        p.put_page(cpu, zero).unwrap();
        assert_eq!(p.alloc_pages(cpu, Order(0), Gfp::KERNEL).unwrap(), zero);
        p.validate().unwrap();
        p.release_pages(C1, &held);
        p.drain_all_pages();
        p.validate().unwrap();
    }
}

mod numa_emulation {
    use super::*;

    /// The nodes a CPU allocates from, in order, until `want` nodes have served it.
    fn fallback_order(p: &PhysMem, cpu: CpuId, want: usize) -> (Vec<usize>, Vec<Pfn>) {
        let (mut seen, mut held) = (vec![], vec![]);
        while let Ok(pfn) = p.alloc_pages(cpu, Order(0), Gfp::KERNEL.union(Gfp::NOWAIT)) {
            let n = p.node_of(pfn);
            if seen.last() != Some(&n) {
                seen.push(n);
            }
            held.push(pfn);
            if seen.len() == want {
                break;
            }
        }
        (seen, held)
    }

    /// `numa=fake=8` on 4 physical nodes (8 CPUs, two a physical node): every CPU sits on
    /// the first emulated node of its physical node, and its zonelist tries the other
    /// emulated node of that physical node (`LOCAL_DISTANCE`) before any remote one, where
    /// the walk without emulation goes on from node 0.
    #[test]
    fn an_emulated_node_falls_back_to_its_physical_siblings_first() {
        let cfg = MachineConfig {
            mem: 8 * (4 << 20),
            cpus: 8,
            nodes: 8,
            ..Default::default()
        };
        cfg.validate().unwrap();
        let cpus = Cpus::emulated(8, 8, 4);
        let nodes: Vec<u16> = cpus.all().map(|c| cpus.node_of(c).0).collect();
        assert_eq!(nodes, [0, 0, 1, 1, 2, 2, 3, 3]);
        assert_eq!(cpus.phys_of(NodeId(6)), 2);
        let p = PhysMem::new(&cfg, cpus, Arc::new(VmStat::new(8))).unwrap();
        let (seen, held) = fallback_order(&p, CpuId(5), 3);
        assert_eq!(seen, [2, 6, 0]);
        p.release_pages(C1, &held);
        p.drain_all_pages();
        p.validate().unwrap();
        // Negative control: the same machine unemulated spreads the CPUs over all 8 nodes
        // and falls back from node 0 up.
        let p = phys_with(8 * (4 << 20), 8, 8, |_| {});
        let (seen, held) = fallback_order(&p, CpuId(5), 3);
        assert_eq!(seen, [5, 0, 1]);
        p.release_pages(C1, &held);
        p.drain_all_pages();
        p.validate().unwrap();
    }
}

mod concurrent {
    use super::*;

    #[test]
    fn racing_alloc_free_keeps_accounting() {
        usermm_testscale::announce("page_alloc::racing_alloc_free");
        let p = Arc::new(phys_with(64 << 20, 4, 2, |c| c.lru.add_batch = 7));
        let threads: Vec<_> = (0..4u16)
            .map(|t| {
                let p = Arc::clone(&p);
                std::thread::spawn(move || {
                    let cpu = CpuId(t);
                    let mut held: Vec<Pfn> = vec![];
                    let seed = usermm_testscale::seed_for("page_alloc::racing_alloc_free");
                    let mut rng = (seed ^ 0x9e3779b97f4a7c15u64.wrapping_mul(t as u64 + 1)) | 1;
                    // 20 000 steps per thread, times USERMM_TEST_SCALE.
                    for i in 0..usermm_testscale::scaled(20_000) {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        if !rng.is_multiple_of(3) || held.is_empty() {
                            let order = Order(if rng.is_multiple_of(17) {
                                (rng >> 8) as u8 % 10
                            } else {
                                0
                            });
                            if let Ok(pfn) = p.alloc_pages(cpu, order, Gfp::KERNEL) {
                                if order.0 == 0 && i % 2 == 0 {
                                    p.lru_cache_add(cpu, pfn);
                                }
                                held.push(pfn);
                            }
                        } else {
                            let k = (rng as usize >> 3) % held.len();
                            let pfn = held.swap_remove(k);
                            p.put_page(cpu, pfn).unwrap();
                        }
                    }
                    p.release_pages(cpu, &held);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        p.lru_add_drain_all();
        let r = p.validate().unwrap();
        assert_eq!(r.allocated, 0, "{r:?}");
        p.drain_all_pages();
        assert_eq!(p.nr_free_pages(), 16384);
        usermm_testscale::report(
            "page_alloc::racing_alloc_free",
            4 * usermm_testscale::scaled(20_000),
        );
    }
}

mod scale {
    use super::*;

    #[test]
    fn sparse_512g_machine_constructs_and_allocates() {
        let p = phys_with(512 << 30, 144, 4, |c| c.backing = BackingMode::Sparse);
        assert_eq!(p.nr_free_pages(), (512u64 << 30) / PAGE_SIZE);
        let mut v = vec![];
        for cpu in [0u16, 50, 100, 143] {
            for _ in 0..1000 {
                v.push(p.alloc_pages(CpuId(cpu), Order(0), Gfp::ZERO).unwrap());
            }
        }
        // CPU 143 sits on node 3, whose frames are the last quarter.
        assert_eq!(p.node_of(*v.last().unwrap()), 3);
        p.release_pages(CpuId(7), &v);
        p.drain_all_pages();
        assert_eq!(p.nr_free_pages(), (512u64 << 30) / PAGE_SIZE);
    }

    #[test]
    fn hugetlb_pool_is_filled_and_recycled() {
        let p = phys_with(64 << 20, 2, 1, |c| c.nr_hugepages = 4);
        assert_eq!(p.hugetlb_free(), 4);
        let r = p.validate().unwrap();
        assert_eq!(r.hugetlb_pool, 2048);
        let h = p.alloc_hugetlb_page().unwrap();
        assert_eq!(p.hugetlb_free(), 3);
        p.validate().unwrap();
        p.put_page(C0, h).unwrap();
        assert_eq!(p.hugetlb_free(), 4);
        p.validate().unwrap();
    }
}

/// In a virtual run the free area's lines are v4.10's `zone->free_area[]` (`FreeArea`): an
/// order's `free_list[MIGRATE_MOVABLE]` and its `nr_free` on the lines of 104-byte areas laid
/// end to end from a line boundary; fifteen lines for the eleven orders, some shared between
/// one order's `nr_free` and the next order's head; the memcg's LRU sizes on a line of their
/// own, apart from every free-area line.
#[test]
fn free_area_lines_are_v4_10_struct_free_area() {
    let p = phys(64 << 20);
    let fa = p.nodes[0].zone.lock.lock();
    let line = |key: usize| key & 31;
    let heads: Vec<usize> = (0..=MAX_PAGE_ORDER as usize)
        .map(|o| line(fa.head_line(o)))
        .collect();
    let nr_free: Vec<usize> = (0..=MAX_PAGE_ORDER as usize)
        .map(|o| line(fa.nr_free_line(o)))
        .collect();
    assert_eq!(heads, [0, 1, 3, 5, 6, 8, 10, 11, 13, 14, 16]);
    assert_eq!(nr_free, [1, 3, 4, 6, 8, 9, 11, 12, 14, 16, 17]);
    let mut all: Vec<usize> = (0..=MAX_PAGE_ORDER as usize)
        .flat_map(|o| [fa.head_line(o), fa.nr_free_line(o)])
        .collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 15);
    // Another zone's lines are other lines.
    drop(fa);
    let q = phys_with(64 << 20, 2, 2, |_| {});
    let (a, b) = (q.nodes[0].zone.lock.lock(), q.nodes[1].zone.lock.lock());
    assert_ne!(a.head_line(0), b.head_line(0));
    drop((a, b));
    // The LRU sizes' key carries a tag of its own.
    assert_eq!(FREE_AREA_KEY & LRU_SIZE_KEY, 0);
}
