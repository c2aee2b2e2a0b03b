//! Per-VMA locks (`vma.per_vma_lock = on`): faults under the VMA's read lock, falling back to
//! the mmap lock; munmap's write hold never blocks a fault in another VMA, and a fault in the
//! range being unmapped still gets SIGSEGV; racing faults against munmap, mprotect, mremap and
//! fork keep every invariant.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use common::*;
use usermm::mm::mmap::*;
use usermm::stats::VmItem;
use usermm::{CpuId, Mm, SegvCode, Task, PAGE_SIZE};

const P: u64 = PAGE_SIZE;
const RW: u32 = PROT_READ | PROT_WRITE;

fn per_vma(downgrade: bool) -> Arc<usermm::Machine> {
    machine_with(|c| {
        c.vma.per_vma_lock = true;
        c.munmap.downgrade = downgrade;
    })
}

#[test]
fn faults_in_a_faulted_anonymous_vma_take_the_vma_lock() {
    let m = per_vma(false);
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let a = anon(&mm, 64 * P);
    let t = task(&mm);
    let s0 = m.vmstat_snapshot();
    let r0 = mm.mmap_lock_info().stats().read.acquisitions;
    t.write_u64(a, 1).unwrap(); // first fault: no anon_vma yet, mmap lock
    for i in 1..64 {
        t.write_u64(a + i * P, i).unwrap();
    }
    let d = m.vmstat_snapshot().since(&s0);
    assert_eq!(d.get(VmItem::VmaLockSuccess), 63);
    assert_eq!(d.get(VmItem::VmaLockAbort), 1);
    assert_eq!(d.get(VmItem::Pgfault), 64);
    let reads = mm.mmap_lock_info().stats().read.acquisitions - r0;
    assert_eq!(reads, 1, "only the first fault took mmap_lock");
    // An access error is decided under the VMA lock too.
    mm.mprotect(C0, a, P, PROT_READ).unwrap();
    let s1 = m.vmstat_snapshot();
    let e = t.write_u64(a, 2).unwrap_err();
    assert_eq!(e.code, SegvCode::AccErr);
    assert_eq!(
        m.vmstat_snapshot().since(&s1).get(VmItem::VmaLockSuccess),
        1
    );
    // MADV_DONTNEED inside one VMA takes only its lock.
    let r1 = mm.mmap_lock_info().stats().read.acquisitions;
    mm.madvise(C0, a + P, 8 * P, MADV_DONTNEED).unwrap();
    assert_eq!(mm.mmap_lock_info().stats().read.acquisitions, r1);
    assert_eq!(t.read_u64(a + P).unwrap(), 0);
    exit_and_check(&m, mm, free0);
}

/// Inside munmap's write hold (the zap window of a munmap that does not downgrade), a fault in
/// another VMA completes — it never waits for the write lock — and a fault in the range being
/// unmapped gets SIGSEGV once the hold ends, never the zero page.
#[test]
fn munmap_write_hold_blocks_no_fault_elsewhere() {
    let m = per_vma(false);
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let big = anon(&mm, 256 * P);
    // Far from `big`, so that the two never merge into one VMA.
    let other = mm
        .mmap(
            C0,
            0x3000_0000_0000,
            16 * P,
            RW,
            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
            MapFile::None,
        )
        .unwrap();
    let t = task(&mm);
    t.write_u64(other, 1).unwrap(); // the other VMA gets its anon_vma
    mm.populate(C0, big, big + 256 * P, true);
    // One page the racing reader must fault on (the rest are still mapped until the zap).
    mm.madvise(C0, big + 8 * P, P, MADV_DONTNEED).unwrap();
    let done_elsewhere = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let hook_done = Arc::clone(&done_elsewhere);
    let tx = std::sync::Mutex::new(tx);
    mm.set_munmap_zap_hook(move |mm, downgraded| {
        assert!(!downgraded);
        assert!(mm.mmap_lock_info().is_write_locked());
        // Fault in another VMA from another thread, inside the write hold: it must finish.
        let task = Task::new(Arc::clone(&mm_arc(mm)), CpuId(1));
        let r = thread::scope(|s| {
            s.spawn(|| {
                for i in 1..16 {
                    task.write_u64(other + i * P, i).unwrap();
                }
            })
            .join()
        });
        hook_done.store(r.is_ok(), Ordering::SeqCst);
        // A fault in the range being unmapped, started now, must wait and then fail.
        let task = Task::new(mm_arc(mm), CpuId(2));
        let tx = tx.lock().unwrap().clone();
        thread::spawn(move || tx.send(task.read_u64(big + 8 * P)).unwrap());
        thread::sleep(Duration::from_millis(20));
    });
    MM.with(|c| *c.borrow_mut() = Some(Arc::clone(&mm)));
    mm.munmap(C0, big, 256 * P).unwrap();
    assert!(
        done_elsewhere.load(Ordering::SeqCst),
        "a fault elsewhere waited"
    );
    let r = rx.recv().unwrap();
    assert_eq!(r.unwrap_err().code, SegvCode::MapErr);
    MM.with(|c| *c.borrow_mut() = None);
    exit_and_check(&m, mm, free0);
}

thread_local! {
    static MM: std::cell::RefCell<Option<Arc<Mm>>> = const { std::cell::RefCell::new(None) };
}

/// The `Arc` of the mm the hook runs for (the hook gets `&Mm`; the test keeps the `Arc`).
fn mm_arc(mm: &Mm) -> Arc<Mm> {
    MM.with(|c| {
        let a = c.borrow().clone().expect("test mm");
        assert!(std::ptr::eq(&*a, mm));
        a
    })
}

/// Faulters hammer their VMAs while the main thread munmaps, mprotects, mremaps and forks
/// around them; every fault in a VMA still mapped succeeds, and the invariants hold.
#[test]
fn racing_faults_against_vma_writers() {
    for downgrade in [false, true] {
        let m = per_vma(downgrade);
        let free0 = free_pages(&m);
        let mm = Mm::new(&m, C0).unwrap();
        let base = 0x3000_0000_0000u64;
        let fixed = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;
        for i in 0..3u64 {
            mm.mmap(C0, base + i * (1 << 24), 64 * P, RW, fixed, MapFile::None)
                .unwrap();
        }
        let stop = AtomicBool::new(false);
        let faults = AtomicU64::new(0);
        thread::scope(|s| {
            // Stop the faulters also when an assertion below panics.
            let _stop = StopOnDrop(&stop);
            for i in 0..3u64 {
                let t = Task::new(Arc::clone(&mm), CpuId(1 + i as u16));
                let (stop, faults) = (&stop, &faults);
                s.spawn(move || {
                    let a = base + i * (1 << 24);
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for p in 0..64 {
                            // VMA 0 is unmapped and remapped under us: errors are fine there.
                            let r = t.write_u64(a + p * P, n);
                            assert!(r.is_ok() || i == 0, "fault in a live VMA failed: {r:?}");
                            n += 1;
                        }
                        let _ = t.mm().madvise(t.cpu(), a, 64 * P, MADV_DONTNEED);
                        faults.fetch_add(64, Ordering::Relaxed);
                    }
                });
            }
            // Start changing the VMAs once every faulter is at work.
            while faults.load(Ordering::Relaxed) < 3 * 64 {
                thread::yield_now();
            }
            for round in 0..40u64 {
                let v0 = base;
                let _ = mm.munmap(C0, v0, 64 * P);
                mm.mmap(C0, v0, 64 * P, RW, fixed, MapFile::None).unwrap();
                let v1 = base + (1 << 24);
                mm.mprotect(C0, v1 + 8 * P, 8 * P, PROT_READ | PROT_WRITE | PROT_EXEC)
                    .unwrap();
                mm.mprotect(C0, v1 + 8 * P, 8 * P, RW).unwrap();
                let v2 = base + 2 * (1 << 24);
                // Grow in place and shrink back: the VMA changes under its faulters.
                mm.mremap(C0, v2, 64 * P, 96 * P, 0, 0).unwrap();
                mm.mremap(C0, v2, 96 * P, 64 * P, 0, 0).unwrap();
                if round % 8 == 0 {
                    let child = mm.fork(C0).unwrap();
                    child.validate().unwrap();
                    child.mmput(C0);
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert!(faults.load(Ordering::Relaxed) > 0);
        assert!(m.vmstat().get(VmItem::VmaLockSuccess) > 0);
        exit_and_check(&m, mm, free0);
    }
}

/// fork while other threads fault: the child gets a consistent copy (every page it maps is
/// one of the values its writer stored), and both sides validate.
#[test]
fn fork_while_faulting() {
    for per_vma_lock in [false, true] {
        let m = machine_with(|c| c.vma.per_vma_lock = per_vma_lock);
        let free0 = free_pages(&m);
        let mm = Mm::new(&m, C0).unwrap();
        let a = anon(&mm, 128 * P);
        let stop = AtomicBool::new(false);
        thread::scope(|s| {
            let t = Task::new(Arc::clone(&mm), CpuId(1));
            let stop = &stop;
            s.spawn(move || {
                let mut n = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    for p in 0..128 {
                        t.write_u64(a + p * P, n).unwrap();
                    }
                    n += 1;
                }
            });
            for _ in 0..30 {
                let child = mm.fork(C0).unwrap();
                let c = task(&child);
                let mut last = u64::MAX;
                for p in 0..128 {
                    let v = c.read_u64(a + p * P).unwrap();
                    // The writer goes up page by page: values never increase along the pages.
                    assert!(v <= last, "page {p}: {v} after {last}");
                    last = v;
                }
                child.validate().unwrap();
                child.mmput(C0);
            }
            stop.store(true, Ordering::Relaxed);
        });
        exit_and_check(&m, mm, free0);
    }
}

#[test]
fn dontneed_under_the_vma_lock_frees_what_it_zaps() {
    let m = per_vma(true);
    let free0 = free_pages(&m);
    let mm = Mm::new(&m, C0).unwrap();
    let a = anon(&mm, 64 * P);
    let t = task(&mm);
    for round in 0..200u64 {
        for p in 0..64 {
            t.write_u64(a + p * P, round).unwrap();
        }
        mm.madvise(C0, a, 64 * P, MADV_DONTNEED).unwrap();
    }
    mm.validate().unwrap();
    exit_and_check(&m, mm, free0);
}

/// Sets its flag when dropped (also while unwinding from a panic).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
