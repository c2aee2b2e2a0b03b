//! The fault path allocates nothing: once a CPU's lists and batches have their capacity, a
//! page fault — 4 KiB write (a new anonymous page, into the LRU-add batch), zero-page read,
//! THP write, huge-zero read — makes no host heap allocation on the faulting thread, as the
//! kernel's fault path allocates nothing but the pages and tables it maps.
//!
//! A counting global allocator (per thread, so other tests' threads do not count) sees every
//! `alloc`/`realloc` of the test's own thread.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::*;
use usermm::config::ThpMode;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: the allocator also runs while thread-locals are torn down.
    let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every call is forwarded unchanged to `System`; counting touches no allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract for `alloc` is `System::alloc`'s.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller's contract for `realloc` is `System::realloc`'s.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc` is `System::dealloc`'s.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

/// Heap allocations made by `f` on this thread.
fn allocations_in(f: impl FnOnce()) -> u64 {
    let a = allocs();
    f();
    allocs() - a
}

#[test]
fn four_k_faults_allocate_nothing() {
    let m = machine_with(|c| {
        c.mem = 64 << 20;
        c.thp = ThpMode::Never;
    });
    let free0 = free_pages(&m);
    let mm = usermm::Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let len = 16u64 << 20;
    // Warm up: the first faults fill the CPU's pcp lists, LRU-add batch and page tables.
    let warm = anon(&mm, len);
    t.walk(warm, len, 4096, true, |i| i + 1).unwrap();
    t.walk(warm, len, 4096, false, |_| 0).unwrap();
    let a = anon(&mm, len);
    let n = allocations_in(|| {
        t.walk(a, len, 4096, true, |i| i + 1).unwrap();
    });
    assert_eq!(n, 0, "allocations in 4096 write faults");
    let b = anon(&mm, len);
    let n = allocations_in(|| {
        t.walk(b, len, 4096, false, |_| 0).unwrap();
    });
    assert_eq!(n, 0, "allocations in 4096 zero-page read faults");
    exit_and_check(&m, mm, free0);
}

#[test]
fn thp_and_huge_zero_faults_allocate_nothing() {
    let m = machine_with(|c| {
        c.mem = 128 << 20;
        c.thp = ThpMode::Always;
    });
    let free0 = free_pages(&m);
    let mm = usermm::Mm::new(&m, C0).unwrap();
    let t = task(&mm);
    let len = 16u64 << 20;
    let warm = anon(&mm, len + (2 << 20));
    t.walk(warm, len, 4096, true, |i| i + 1).unwrap();
    let r = anon(&mm, len + (2 << 20));
    t.walk(r, len, 4096, false, |_| 0).unwrap();
    let a = anon(&mm, len + (2 << 20));
    let n = allocations_in(|| {
        t.walk(a, len, 4096, true, |i| i + 1).unwrap();
    });
    assert_eq!(n, 0, "allocations in THP write faults");
    let b = anon(&mm, len + (2 << 20));
    let n = allocations_in(|| {
        t.walk(b, len, 4096, false, |_| 0).unwrap();
    });
    assert_eq!(n, 0, "allocations in huge-zero read faults");
    exit_and_check(&m, mm, free0);
}
