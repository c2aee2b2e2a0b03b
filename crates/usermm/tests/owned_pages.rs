//! `OwnedPages`, the only way a library user allocates frames: a handle frees its
//! block exactly once, on drop or by `free`, and reads and writes reach its own frames only.
//! What cannot be done outside the crate (free a raw PFN, write a frame not owned) is shown by
//! the `compile_fail` examples on `OwnedPages` itself.

mod common;

use common::*;
use usermm::config::BackingMode;
use usermm::page_alloc::Gfp;
use usermm::{CpuId, Order};

#[test]
fn a_handle_frees_its_frames_on_drop() {
    let m = small();
    let free0 = free_pages(&m);
    let held: Vec<_> = [0, 1, 3, 4, 9]
        .into_iter()
        .map(|o| m.phys().alloc_owned(C0, Order(o), Gfp::ZERO).unwrap())
        .collect();
    let nr: u64 = held.iter().map(|p| p.nr_pages()).sum();
    assert_eq!(nr, 1 + 2 + 8 + 16 + 512);
    for p in &held {
        assert_eq!(m.phys().meta(p.pfn()).ref_count(), 1);
        assert_eq!(m.phys().meta(p.pfn()).map_count(), 0);
    }
    assert_eq!(free_pages(&m), free0 - nr);
    let report = m.phys().validate().unwrap();
    assert!(report.allocated >= nr);
    drop(held);
    assert_eq!(free_pages(&m), free0, "every block back in the buddy");
    m.phys().validate().unwrap();
}

#[test]
fn free_on_another_cpu_and_validate() {
    let m = small();
    let free0 = free_pages(&m);
    let p = m.phys().alloc_owned(C0, Order(2), Gfp::KERNEL).unwrap();
    let pfn = p.pfn();
    p.free(CpuId(3));
    assert_eq!(m.phys().meta(pfn).ref_count(), 0);
    assert_eq!(free_pages(&m), free0);
    m.phys().validate().unwrap();
}

#[test]
fn reads_and_writes_its_own_frames() {
    let m = small();
    let mut p = m.phys().alloc_owned(C0, Order(1), Gfp::ZERO).unwrap();
    p.write(1, 4090, b"usermm");
    let mut buf = [0u8; 6];
    p.read(1, 4090, &mut buf);
    assert_eq!(&buf, b"usermm");
    p.read(0, 4090, &mut buf);
    assert_eq!(buf, [0; 6], "zeroed, and frame 0 untouched");
}

#[test]
fn sparse_backing_drops_writes() {
    let m = machine_with(|c| c.backing = BackingMode::Sparse);
    let mut p = m.phys().alloc_owned(C0, Order(0), Gfp::ZERO).unwrap();
    p.write(0, 0, b"x");
    let mut buf = [1u8; 1];
    p.read(0, 0, &mut buf);
    assert_eq!(buf, [0]);
}

#[test]
#[should_panic(expected = "outside the owned block")]
fn a_write_beyond_the_block_panics() {
    let m = small();
    let mut p = m.phys().alloc_owned(C0, Order(1), Gfp::ZERO).unwrap();
    p.write(2, 0, b"x");
}

#[test]
#[should_panic(expected = "outside the owned block")]
fn a_write_across_the_frame_end_panics() {
    let m = small();
    let mut p = m.phys().alloc_owned(C0, Order(0), Gfp::ZERO).unwrap();
    p.write(0, 4095, b"xy");
}

#[test]
fn map_pfn_range_refuses_another_machines_block() {
    let (a, b) = (small(), small());
    let free_b = free_pages(&b);
    let mm = usermm::Mm::new(&a, C0).unwrap();
    let p = b.phys().alloc_owned(C0, Order(0), Gfp::ZERO).unwrap();
    let prot = usermm::mm::mmap::PROT_READ;
    assert_eq!(
        mm.map_pfn_range(C0, p, prot).unwrap_err(),
        usermm::Errno::EINVAL
    );
    assert_eq!(free_pages(&b), free_b, "the refused block is freed");
    b.phys().validate().unwrap();
}
