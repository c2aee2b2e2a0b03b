//! What a machine costs the host: an estimate of the host memory a machine of a given shape
//! commits, made before it boots, so that a command can refuse in one line a run that would
//! not fit in the host's available memory instead of pushing the host into reclaim or the
//! OOM killer.
//!
//! The estimate follows what the engine allocates, not a measured ratio:
//!
//! - **Boot.** Every array sized by the machine is a lazily committed host mapping
//!   (`backing.rs`'s `ZeroedArray`), so the boot commits only what it writes: the `PageMeta`
//!   of each buddy block's head frame as `memblock_free_all` links it (one 4 KiB host page of
//!   metadata per `MAX_ORDER` block of 4 MiB, i.e. 1/1024 of the RAM), the per-CPU page lists
//!   of every zone (one cache-padded `per_cpu_pages` per node and CPU), and a few per-CPU
//!   structures. With `prefault=on` full backing also commits all of the RAM at boot.
//! - **Each frame a run allocates** (a data page or a page-table page): its `PageMeta`
//!   (which holds a virtual run's line state too: `vtime/memory.rs`, so the two clocks cost
//!   the same); the page-table entry that maps it (page tables are always real memory: 8
//!   bytes a 4 KiB page); and with full backing its 4 KiB of data.
//!
//! What the host's own page tables cost for these mappings is below 1/500 of them and is
//! included as such. Host threads and what a workload keeps for itself (histograms, records)
//! are the workload's to add.

#![deny(unsafe_code)]

use crate::addr::{MAX_PAGE_ORDER, PAGE_SIZE};
use crate::config::{BackingMode, MachineConfig};

/// Host bytes per emulated CPU outside the zones' per-CPU lists: the LRU add batch, the
/// zone mask words, the vmstat diffs, the workqueue and percpu allocator slots (a rounded
/// upper bound of their cache-padded slots).
const PER_CPU_BYTES: u64 = 4096;

/// Host bytes of the page-table entry that maps one 4 KiB page.
const PTE_BYTES: u64 = 8;

/// The program itself: code, libraries, stacks, allocator arenas (16 MiB; a 5 GiB
/// `usermm meminfo` peaks at 13 MiB).
const PROCESS_BYTES: u64 = 16 << 20;

/// The host memory a machine of `cfg`'s shape commits: booted, and after a run that
/// allocated `touched` bytes of its RAM (data and page tables alike; at most the RAM).
pub fn host_bytes(cfg: &MachineConfig, touched: u64) -> u64 {
    let frames = cfg.mem / PAGE_SIZE;
    let nodes = u64::from(cfg.nodes.max(1));
    let cpus = u64::from(cfg.cpus.max(1));
    // One host page of PageMeta per buddy block head (and the smaller blocks at each
    // node's end).
    let blocks = frames.div_ceil(1 << MAX_PAGE_ORDER) + nodes * u64::from(MAX_PAGE_ORDER);
    let boot_meta = blocks.saturating_mul(PAGE_SIZE);
    let pcp = nodes
        .saturating_mul(cpus)
        .saturating_mul(crate::page_alloc::pcp_slot_bytes() as u64);
    let per_cpu = cpus * PER_CPU_BYTES;
    let prefault = if cfg.prefault && cfg.backing == BackingMode::Full {
        cfg.mem
    } else {
        0
    };
    let touched_frames = touched.min(cfg.mem) / PAGE_SIZE;
    let mut per_frame = std::mem::size_of::<crate::page_alloc::PageMeta>() as u64 + PTE_BYTES;
    if cfg.backing == BackingMode::Full && !cfg.prefault {
        per_frame += PAGE_SIZE;
    }
    let run = touched_frames.saturating_mul(per_frame);
    let total = PROCESS_BYTES
        .saturating_add(boot_meta)
        .saturating_add(pcp)
        .saturating_add(per_cpu)
        .saturating_add(prefault)
        .saturating_add(run);
    // The host's page tables for all of it.
    total.saturating_add(total / 512)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn boot_is_a_thousandth_of_ram_and_a_run_adds_per_frame_state() {
        let c = MachineConfig {
            mem: 1 << 40,
            cpus: 4,
            nodes: 1,
            backing: BackingMode::Sparse,
            ..MachineConfig::default()
        };
        let boot = host_bytes(&c, 0);
        assert!(
            ((1 << 40) / 1024..(1 << 40) / 1000).contains(&boot),
            "{boot}"
        );
        // A sparse run over all of it adds its metadata and page tables, not its data.
        let run = host_bytes(&c, 1 << 40) - boot;
        let meta = std::mem::size_of::<crate::page_alloc::PageMeta>() as u64;
        assert!(run >= (1 << 28) * (meta + 8), "{run}");
        assert!(run < (1 << 28) * (meta + 8 + 1), "{run}");
        // Full backing adds the data; a virtual run nothing (its line states are in the
        // PageMetas).
        let full = MachineConfig {
            backing: BackingMode::Full,
            ..c.clone()
        };
        assert!(host_bytes(&full, 1 << 30) - host_bytes(&full, 0) > 1 << 30);
        let mut v = c.clone();
        v.time.mode = crate::config::TimeMode::Virtual;
        assert_eq!(host_bytes(&v, 1 << 30), host_bytes(&c, 1 << 30));
        // Nothing overflows at the largest shapes.
        let big = MachineConfig {
            mem: crate::config::MAX_MEM_BYTES,
            cpus: crate::config::MAX_CPUS,
            nodes: crate::config::MAX_NODES,
            ..c
        };
        assert!(host_bytes(&big, u64::MAX) > host_bytes(&big, 0));
    }
}
