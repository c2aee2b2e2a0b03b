//! The line model (`vtime/memory.rs`) and the jitter (`vtime/jitter.rs`) on cases with known
//! answers: every figure asserted is a model output, exact by construction.

mod vtime_support;

use std::sync::Arc;

use usermm::vtime::{
    self, hooks, Figure, ListOp, MemorySpec, Profile, ProfileSpec, Quantity, Runtime, Touch,
};
use vtime_support::*;

const DRAM: u64 = 100;
const DRAM_REMOTE: u64 = 200;
const STREAM: u64 = 3;
const L2_LINES: u64 = 256;
const LLC_LINES: u64 = 4096;
/// Frames of the test memmap: two nodes of 1 Mi frames.
const FRAMES: u64 = 2 << 20;
const PER_NODE: u64 = 1 << 20;

fn ns(v: u64) -> Figure {
    Figure {
        ns: Some(v as f64),
        cycles: None,
        bytes_per_ns: None,
        formula: Some(v.to_string()),
        source: "test".into(),
    }
}

fn count(v: u64) -> Quantity {
    Quantity {
        value: v as f64,
        formula: Some(v.to_string()),
        source: "test".into(),
    }
}

fn with_memory(s: &mut ProfileSpec) {
    s.memory = Some(MemorySpec {
        llc_lines: count(LLC_LINES),
        l2_lines: count(L2_LINES),
        dram_local: ns(DRAM),
        dram_remote: ns(DRAM_REMOTE),
        dram_stream: ns(STREAM),
    });
}

fn mem_rt() -> Runtime {
    let rt = rt_with(with_memory);
    rt.set_memmap(FRAMES, PER_NODE);
    rt
}

/// What one touch of `pfn` costs the running context, in ns.
fn touch(pfn: u64) -> u64 {
    let t = vtime::now();
    hooks::mem_touch_page(pfn, Touch::Access);
    vtime::now() - t
}

/// `f` run on `cpu` after everything before it (a context started and joined).
fn on<T: 'static>(cpu: usize, f: impl FnOnce() -> T + 'static) -> T {
    vtime::spawn(cpu, f).join()
}

#[test]
fn a_line_costs_by_who_touched_it_last() {
    let rt = mem_rt();
    let costs = rt.run(0, || {
        let first = touch(5);
        let again = touch(5);
        // CPU 8 is CPU 0's SMT sibling: the same core's L2.
        let sibling = on(8, || touch(5));
        let other_core = on(1, || touch(5));
        let other_socket = on(16, || touch(5));
        let back_home = touch(5);
        (first, again, sibling, other_core, other_socket, back_home)
    });
    assert_eq!(costs, (0, 0, 0, T_SOCK, T_REMOTE, T_REMOTE));
    let m = rt.report().memory.expect("a [memory] and a memmap");
    assert_eq!(m.accesses, 6);
    assert_eq!(
        (m.first, m.own_cache, m.other_core, m.other_socket),
        (1, 2, 1, 2)
    );
    assert_eq!(m.charged_ns, T_SOCK + 2 * T_REMOTE);
}

#[test]
fn a_measured_touch_moves_the_line_and_charges_nothing() {
    let rt = mem_rt();
    let (measured, after) = rt.run(0, || {
        touch(7);
        let measured = on(1, || {
            let t = vtime::now();
            hooks::mem_touch_page(7, Touch::Measured);
            vtime::now() - t
        });
        // The line is CPU 1's now: CPU 0 pays the transfer back.
        (measured, touch(7))
    });
    assert_eq!((measured, after), (0, T_SOCK));
}

#[test]
fn lines_leave_the_l2_then_the_llc_and_come_back_from_dram() {
    let rt = mem_rt();
    let (llc, dram_local, dram_remote) = rt.run(0, || {
        touch(1);
        touch(PER_NODE + 1);
        // Another core's fills do not age CPU 0's L2; CPU 0's own do. 2 x L2 lines later,
        // page 1 is only in the socket's LLC: an LLC hit costs nothing beyond the constants.
        for p in 0..2 * L2_LINES {
            touch(10_000 + p * 64);
        }
        let llc = on(1, || touch(1));
        // Fill the socket's LLC twice over: both lines are gone to DRAM. Page 1's memory is
        // node 0's (socket 0: local to CPU 2), page PER_NODE + 1's is node 1's (remote).
        for p in 0..2 * LLC_LINES {
            touch(20_000 + p * 64);
        }
        let local = on(2, || touch(1));
        let remote = on(2, || touch(PER_NODE + 1));
        (llc, local, remote)
    });
    assert_eq!((llc, dram_local, dram_remote), (0, DRAM, DRAM_REMOTE));
}

#[test]
fn the_next_struct_page_of_a_dram_stream_costs_bandwidth_not_latency() {
    let rt = mem_rt();
    let costs: Vec<u64> = rt.run(0, || {
        for p in 0..130 {
            touch(p);
        }
        for p in 0..2 * LLC_LINES {
            touch(100_000 + p * 64);
        }
        // 62..66 crosses a 4 KiB boundary of the memmap at 64: the streamer starts again.
        (62..66).map(touch).collect()
    });
    assert_eq!(costs, [DRAM, STREAM, DRAM, STREAM]);
}

#[test]
fn cleared_pages_fill_the_cache_and_age_its_lines() {
    let rt = mem_rt();
    let cost = rt.run(0, || {
        touch(3);
        // A cleared 4 KiB page is 64 lines filled into the clearing CPU's caches.
        hooks::charge(vtime::Cost::ClearPage, 2 * LLC_LINES / 64);
        vtime::sync_point();
        on(1, || touch(3))
    });
    assert_eq!(cost, DRAM);
}

#[test]
fn without_a_memory_section_or_a_memmap_touches_are_free() {
    // The test profile has no [memory].
    let rt = rt();
    rt.set_memmap(FRAMES, PER_NODE);
    let c = rt.run(0, || {
        touch(9);
        on(16, || touch(9))
    });
    assert_eq!(c, 0);
    assert!(rt.report().memory.is_none());
    // A [memory] but no memmap told: nothing tracked.
    let rt = rt_with(with_memory);
    let c = rt.run(0, || {
        touch(9);
        on(16, || touch(9))
    });
    assert_eq!(c, 0);
}

#[test]
fn jitter_varies_batches_by_seed_and_keeps_the_run_reproducible() {
    let spec = |sigma: f64| {
        let mut s = test_spec();
        s.jitter = Some(Quantity {
            value: sigma,
            formula: Some(sigma.to_string()),
            source: "test".into(),
        });
        Arc::new(Profile::from_spec(s, "test").unwrap())
    };
    let run = |sigma: f64, seed: u64| {
        let rt = Runtime::new(spec(sigma), 32, 2).unwrap();
        rt.set_seed(seed);
        rt.run(0, || {
            (0..100)
                .map(|_| {
                    let t = vtime::now();
                    hooks::charge(vtime::Cost::ZapPte, 10);
                    vtime::sync_point();
                    vtime::now() - t
                })
                .collect::<Vec<u64>>()
        })
    };
    let exact = run(0.0, 1);
    let price = exact[0];
    assert!(exact.iter().all(|&t| t == price));
    let a = run(5.0, 1);
    assert_eq!(a, run(5.0, 1), "the same seed gives the same run");
    assert_ne!(a, run(5.0, 2), "another seed, other draws");
    assert!(
        a.iter().any(|&t| t != price),
        "5 % jitter moves some batches"
    );
    // Irwin-Hall draws stay within ±2√3 σ of the figure.
    let bound = price as f64 * 0.05 * 2.0 * 3f64.sqrt() + 1.0;
    assert!(a.iter().all(|&t| (t as f64 - price as f64).abs() <= bound));
}

/// A list operation touches its pages and, when given, the list head (a line known by its
/// address, homed on the first page's node): `list_add` on another socket pays the transfer
/// for the new entry's neighbour and for the head; absent entries (`u32::MAX`) are skipped.
#[test]
fn a_list_operation_prices_its_pages_and_its_head() {
    const NONE: u32 = u32::MAX;
    let head = 0x1000usize;
    let rt = mem_rt();
    let costs = rt.run(0, || {
        let t = vtime::now();
        hooks::mem_touch_list(ListOp::Add, head, [40, NONE, NONE]);
        let first = vtime::now() - t;
        on(16, move || {
            let t = vtime::now();
            // A new entry 41 (never touched) before 40, which CPU 0 wrote, and the head: the
            // head is read first (for 40), so 40's transfer follows the head's.
            hooks::mem_touch_list(ListOp::Add, head, [41, 40, NONE]);
            let add = vtime::now() - t;
            let t = vtime::now();
            // No head: only the entry, now this CPU's own.
            hooks::mem_touch_list(ListOp::Add, 0, [41, NONE, NONE]);
            (first, add, vtime::now() - t)
        })
    });
    assert_eq!(costs, (0, 2 * T_REMOTE, 0));
    let m = rt.report().memory.unwrap();
    // 40 and the head first (CPU 0); then 41 first, 40 and the head remote; then 41 own.
    assert_eq!(
        (m.accesses, m.first, m.other_socket, m.own_cache),
        (6, 3, 2, 1)
    );
}

/// The runtime keeps a context's touches and applies them at its next clock read or
/// synchronisation point (`vtime/runtime.rs`, `TOUCHES`): more touches than it keeps at once
/// (64) between two clock reads are each priced, in order, and all reach the clock.
#[test]
fn touches_kept_past_the_buffer_are_each_priced_in_order() {
    const N: u64 = 200;
    let rt = mem_rt();
    let (took, again) = rt.run(0, || {
        on(1, || {
            (0..N).for_each(|p| hooks::mem_touch_page(300 + p, Touch::Access))
        });
        let t = vtime::now();
        // Each line is CPU 1's: a transfer each; the second touch of each finds it here.
        for p in 0..N {
            hooks::mem_touch_page(300 + p, Touch::Access);
            hooks::mem_touch_page(300 + p, Touch::Access);
        }
        let took = vtime::now() - t;
        (took, touch(300))
    });
    assert_eq!((took, again), (N * T_SOCK, 0));
    let m = rt.report().memory.expect("a [memory] and a memmap");
    assert_eq!((m.first, m.other_core, m.own_cache), (N, N, N + 1));
    assert_eq!(m.charged_ns, N * T_SOCK);
}

/// `list_del` reads the entry, then writes both neighbours: the two writes' misses are in
/// flight together (`vtime/store_buffer.rs`), so the operation costs the entry's transfer and
/// one more, not two; a locked RMW after it (`put_page_testzero`) waits for both first, a
/// plain load does not.
#[test]
fn a_list_del_overlaps_the_stores_to_its_neighbours() {
    let rt = mem_rt();
    // CPU 0 writes four lines; CPU 16, on the other socket, unlinks the second from between
    // the first and the third, then touches the fourth as `then` says.
    let del_then = |base: u64, then: Option<Touch>| {
        on(0, move || {
            (0..4).for_each(|p| hooks::mem_touch_page(base + p, Touch::Access))
        });
        on(16, move || {
            let t = vtime::now();
            let b = base as u32;
            hooks::mem_touch_list(ListOp::Del, 0, [b + 1, b, b + 2]);
            if let Some(how) = then {
                hooks::mem_touch_page(base + 3, how);
            }
            vtime::now() - t
        })
    };
    let costs = rt.run(0, move || {
        (
            del_then(500, None),
            del_then(600, Some(Touch::Access)),
            del_then(700, Some(Touch::Rmw)),
        )
    });
    // The entry, then both neighbours at once; a plain load of the fourth line runs beside
    // the stores, a locked RMW waits for them.
    assert_eq!(costs, (2 * T_REMOTE, 2 * T_REMOTE, 3 * T_REMOTE));
    let m = rt.report().memory.unwrap();
    // Hidden: one neighbour's transfer, then one neighbour's and the load's, then one's.
    assert_eq!(m.overlapped_ns, 4 * T_REMOTE);
    assert_eq!(m.charged_ns, 7 * T_REMOTE);
}

/// A structure's field line (`hooks::mem_touch_line`: a free area's `nr_free`, a memcg's LRU
/// sizes) is a line by its key, homed on a frame's node: another socket's store to it pays
/// the transfer but overlaps what follows, a load of it stalls; each is counted in
/// `field_lines`.
#[test]
fn a_field_line_is_a_line_by_its_key_and_its_store_overlaps() {
    let key = (1usize << 62) | 0x40;
    let rt = mem_rt();
    let costs = rt.run(0, move || {
        on(0, move || hooks::mem_touch_line(key, 5, true));
        on(16, move || {
            // A store to the line CPU 0 wrote, then a load of page 9 that CPU 0 holds too:
            // the store's transfer runs beside the load's.
            on(0, || {
                touch(9);
            });
            let t = vtime::now();
            hooks::mem_touch_line(key, 5, true);
            hooks::mem_touch_page(9, Touch::Access);
            let store_then_load = vtime::now() - t;
            // Back on CPU 0: a load of the line stalls for the transfer.
            let load = on(0, move || {
                let t = vtime::now();
                hooks::mem_touch_line(key, 5, false);
                vtime::now() - t
            });
            (store_then_load, load)
        })
    });
    assert_eq!(costs, (T_REMOTE, T_REMOTE));
    let m = rt.report().memory.unwrap();
    assert_eq!(m.field_lines, 3);
    // The key's line: first, remote, remote; page 9: first, remote.
    assert_eq!((m.first, m.other_socket), (2, 3), "{m:?}");
    assert_eq!(m.overlapped_ns, T_REMOTE);
}
