//! Loom models of the per-CPU page lists (`page_alloc/pcp.rs`, `struct per_cpu_pages`): a pcp
//! refilled from the buddy (`rmqueue_pcplist` → `rmqueue_bulk`, under `zone.lock`) on one CPU
//! while another drains it (`drain_all_pages` → `free_pcppages_bulk`).
//!
//! Run with `.ci/loom.sh`. Without `--cfg loom` this file compiles to nothing.
//!
//! # The protocol
//! A pcp's lists and `count` live under its pcp lock, the buddy's free lists under
//! `zone.lock`, and the order is `pcp lock → zone.lock`: a refill holds the pcp lock while it
//! moves `batch` pages out of the buddy under `zone.lock`; a drain holds the pcp lock while it
//! moves `count` pages back under `zone.lock`. Whoever gets the pcp lock second sees the
//! other's work whole. The page metadata (list links, `PG_pcp`/`PG_buddy`) is written under
//! those locks.
//!
//! # Models
//! - [`real_refill_vs_drain`] and [`real_refill_vs_drain_picking_outside_lock`]: the engine's
//!   own `PhysMem` (16 frames, 2 CPUs, `pcp.batch` 2, `pcp.high` 2; v4.11's drain, then with
//!   `pcp.pick_outside_lock`), built inside the model so that its pcp locks and `zone.lock`
//!   are loom locks. CPU 0 allocates a page (refilling its empty pcp from the buddy), frees it
//!   (the list reaches `high`: its own `free_pcppages_bulk`) and allocates again (another
//!   refill, unless the drain came between), while CPU 1 runs `drain_all_pages`, which drains
//!   CPU 0's pcp under the same locks. After every interleaving,
//!   `PhysMem::validate` holds (every frame exactly once in the buddy, on a pcp list or
//!   allocated; each pcp `count` equal to its lists; `free_pages` equal to the free lists) and
//!   the free-page count accounts for the page still allocated. The locks are explored, and
//!   a page's `refcount` and `mapcount` (loom atomics under loom, `sync/primitive.rs`); the
//!   list links and flags are host atomics, which loom does not reorder, so this checks the
//!   lock protocol, not the orderings of the list stores.
//! - [`protocol_refill_vs_drain`]: the same race on a small replica of the protocol built on the
//!   seam's real lock types (`SpinLock` of class `pcp`, `StatMutex` of class `zone.lock`), in
//!   the same lock order, with the checks spelt out: no page lost or duplicated, `count` equal
//!   to the list, `free_pages` equal to the buddy.
//! - [`drain_taking_zone_lock_first_is_caught`]: the negative control, on the replica: a
//!   drain that takes `zone.lock` before the pcp lock, against the refill's `pcp lock →
//!   zone.lock`. Loom must find the interleaving where each holds the lock the other waits for
//!   (reported as a deadlock). The engine itself cannot be broken this way from a test (its
//!   drain is private, and a fault-injection switch in the allocator was not worth its
//!   clutter), hence the replica. Other breakages — a list touched without its lock — do not
//!   compile: the pcp lists and the buddy are reachable only through their locks' guards.
//!
//! A failure of the first three would mean pages lost or handed out twice by the allocator when
//! a pcp drain (memory pressure, CPU offline, `drain_all_pages` from another CPU) meets an
//! allocation.
#![cfg(loom)]

use std::collections::VecDeque;
use std::sync::Arc as StdArc;

use loom::sync::atomic::{AtomicU64, Ordering::Relaxed};
use loom::sync::Arc;
use loom::thread;
use usermm::config::MachineConfig;
use usermm::cpu::Cpus;
use usermm::page_alloc::{Gfp, PhysMem};
use usermm::stats::VmStat;
use usermm::sync::class::{PCP_LOCK, ZONE_LOCK};
use usermm::sync::{SpinLock, StatMutex};
use usermm::{CpuId, Order};

// ----- the engine's PhysMem ---------------------------------------------------------------

/// 16 frames (one order-4 block at boot), 2 CPUs on one node, `batch` 2, `high` 2: a refill
/// brings 2 pages, and a free that brings the list back to 2 drains it.
fn small_phys(pick_outside_lock: bool) -> PhysMem {
    let mut cfg = MachineConfig {
        mem: 16 * 4096,
        cpus: 2,
        nodes: 1,
        ..Default::default()
    };
    cfg.pcp.batch = 2;
    cfg.pcp.high = 2;
    cfg.pcp.pick_outside_lock = pick_outside_lock;
    let stat = StdArc::new(VmStat::new(2));
    PhysMem::new(&cfg, Cpus::new(2, 1), stat).expect("a 16-frame machine")
}

fn real_model(pick_outside_lock: bool) {
    loom::model(move || {
        let pm = Arc::new(small_phys(pick_outside_lock));
        let total = pm.nr_free_pages();

        let p = Arc::clone(&pm);
        let drain = thread::spawn(move || p.drain_all_pages());
        let p = Arc::clone(&pm);
        // CPU 0 holds its page (an `OwnedPages` borrowing its `PhysMem`) through the checks,
        // which it runs once the drain is done, then frees it as the handle drops.
        let alloc = thread::spawn(move || {
            let cpu = CpuId(0);
            let a = p.alloc_owned(cpu, Order(0), Gfp::NOWAIT).expect("memory");
            a.free(cpu);
            let kept = p.alloc_owned(cpu, Order(0), Gfp::NOWAIT).expect("memory");
            drain.join().unwrap();
            if let Err(e) = p.validate() {
                panic!("allocator state inconsistent after refill vs drain: {e}");
            }
            p.drain_all_pages();
            assert_eq!(
                p.nr_free_pages() + 1,
                total,
                "a page was lost or duplicated"
            );
            drop(kept);
        });

        alloc.join().unwrap();
        pm.drain_all_pages();
        assert_eq!(pm.nr_free_pages(), total, "a page was lost or duplicated");
        pm.validate().expect("consistent after the last free");
    });
}

#[test]
fn real_refill_vs_drain() {
    real_model(false);
}

#[test]
fn real_refill_vs_drain_picking_outside_lock() {
    real_model(true);
}

// ----- a replica of the protocol on the seam's locks --------------------------------------

/// Frames of the replica.
const NR_PAGES: u32 = 4;
/// `pcp->batch`.
const BATCH: usize = 2;

/// `struct per_cpu_pages`, one list.
#[derive(Debug, Default)]
struct Pcp {
    list: VecDeque<u32>,
    count: u32,
}

/// `struct zone`: the buddy (one free list of order-0 pages) under `zone.lock`, its lockless
/// free-page count, and CPU 0's pcp.
struct Zone {
    lock: StatMutex<Vec<u32>>,
    free_pages: AtomicU64,
    pcp: SpinLock<Pcp>,
}

impl Zone {
    /// Page 0 already on the pcp, the others in the buddy.
    fn new() -> Self {
        Self {
            lock: StatMutex::new(&ZONE_LOCK, "&zone->lock", (1..NR_PAGES).collect()),
            free_pages: AtomicU64::new(u64::from(NR_PAGES - 1)),
            pcp: SpinLock::new(
                &PCP_LOCK,
                Pcp {
                    list: VecDeque::from([0]),
                    count: 1,
                },
            ),
        }
    }

    /// `rmqueue_pcplist`: refill an empty list with `BATCH` pages under `zone.lock`, then take
    /// the first.
    fn rmqueue_pcplist(&self) -> Option<u32> {
        let mut pcp = self.pcp.lock();
        if pcp.list.is_empty() {
            if self.free_pages.load(Relaxed) == 0 {
                return None;
            }
            // Lock order: pcp lock -> zone.lock
            let mut buddy = self.lock.lock();
            let mut got = 0;
            for _ in 0..BATCH {
                let Some(p) = buddy.pop() else { break };
                pcp.list.push_back(p);
                pcp.count += 1;
                got += 1;
            }
            self.free_pages.fetch_sub(got, Relaxed);
        }
        let p = pcp.list.pop_front()?;
        pcp.count -= 1;
        Some(p)
    }

    /// `free_pcppages_bulk`: up to `count` pages back to the buddy, under `zone.lock` (the
    /// caller's `buddy`, or taken here). The caller holds the pcp lock.
    fn free_pcppages_bulk(&self, pcp: &mut Pcp, count: u32, buddy: Option<&mut Vec<u32>>) {
        let mut taken;
        let buddy = match buddy {
            Some(b) => b,
            None => {
                // Lock order: pcp lock -> zone.lock
                taken = self.lock.lock();
                &mut *taken
            }
        };
        for _ in 0..count.min(pcp.count) {
            let p = pcp
                .list
                .pop_back()
                .expect("pcp count > 0 with an empty list");
            pcp.count -= 1;
            buddy.push(p);
            self.free_pages.fetch_add(1, Relaxed);
        }
    }

    /// `drain_pages_zone`: the whole pcp back to the buddy.
    fn drain(&self) {
        let mut pcp = self.pcp.lock();
        let n = pcp.count;
        if n > 0 {
            self.free_pcppages_bulk(&mut pcp, n, None);
        }
    }

    /// Broken on purpose: `zone.lock` first, then the pcp lock — the order a refill takes
    /// them in, reversed.
    fn drain_zone_lock_first(&self) {
        let mut buddy = self.lock.lock();
        let mut pcp = self.pcp.lock();
        let n = pcp.count;
        self.free_pcppages_bulk(&mut pcp, n, Some(&mut buddy));
    }
}

/// CPU 0 allocates twice (the second finds its pcp empty and refills it) while CPU 1 drains
/// CPU 0's pcp with `drain`.
///
/// The zone is leaked (a few bytes per explored interleaving), not shared through an `Arc`:
/// when loom reports a deadlock it unwinds the blocked threads, and an `Arc` dropped then would
/// call into loom again and abort the process instead of failing the test.
fn protocol_model(drain: fn(&Zone)) {
    loom::model(move || {
        let zone: &'static Zone = Box::leak(Box::new(Zone::new()));
        let alloc = thread::spawn(move || [zone.rmqueue_pcplist(), zone.rmqueue_pcplist()]);
        let drainer = thread::spawn(move || drain(zone));
        let allocated = alloc.join().unwrap();
        drainer.join().unwrap();

        let pcp = zone.pcp.lock();
        assert_eq!(
            pcp.count as usize,
            pcp.list.len(),
            "pcp count disagrees with its list"
        );
        let buddy = zone.lock.lock();
        assert_eq!(
            zone.free_pages.load(Relaxed),
            buddy.len() as u64,
            "free_pages disagrees with the buddy"
        );
        let mut all: Vec<u32> = buddy.iter().chain(pcp.list.iter()).copied().collect();
        all.extend(allocated.iter().flatten());
        all.sort_unstable();
        assert_eq!(
            all,
            (0..NR_PAGES).collect::<Vec<_>>(),
            "a page was lost or duplicated"
        );
    });
}

#[test]
fn protocol_refill_vs_drain() {
    protocol_model(Zone::drain);
}

#[test]
#[should_panic(expected = "deadlock")]
fn drain_taking_zone_lock_first_is_caught() {
    protocol_model(Zone::drain_zone_lock_first);
}
