//! The `this-host` cost profile: [`this_host_profile`] turns a [`HostCalibration`] (what
//! `usermm calibrate` measured) into a profile TOML, with no host call of its own.
//!
//! Every number the profile uses is a named **input** (`[inputs.NAME]`: value, unit, kind
//! `measured` | `published` | `assumption`, source), and every figure carries the **formula**
//! over inputs that gives its value (`+ - * / ( )`, numbers and input names). Values are
//! computed by evaluating the formulas ([`eval`]), so a figure equals its formula by
//! construction, and the engine's loader checks it again when the file is read.
//!
//! # How the teardown and fault figures are split
//! The engine charges a munmap of N touched 4 KiB pages per page `zap_pte + gather_page`
//! (zap side) and `lru_del + free_unref_page + free_pcppages_bulk_page` (+ `free_one_merge`
//! per merge; free side); per PTE table two `pt_walk_level`, one `pt_free`, one `ptl` acquire
//! and the table page's own free (`free_unref_page`, `free_pcppages_bulk_page`); per
//! `lru.lock_batch` pages an `lru_lock` acquire, per `pcp.batch` pages a `zone.lock` acquire,
//! per gather batch a `pcp` acquire, per full gather (19 batches) a forced `tlb_flush_local`;
//! and per call `syscall`, `vma_modify`, the last `tlb_flush_local` and the `mmap_lock`.
//! Those must add up to the measured munmap, nothing on top:
//! - the zap side is the COW child's munmap (`munmap_cow_4k`: zap, gather, reference drop, its
//!   own page tables freed, no data page freed); `gather_page` is its perf share, `zap_pte`
//!   the rest after the per-table, per-gather and per-call charges;
//! - the free side is `munmap_full_4k − munmap_cow_4k` of the same processes, split between
//!   LRU removal, pcp free and buddy free by the perf cpu-clock split of this host's munmap
//!   (`measure/split_munmap.py`, a measurement with its command; the `share_*` inputs of the
//!   built-in profiles, reused as written there), each less its lock acquires;
//!   `free_one_merge` is 0, included in the bulk share.
//!
//! A zero-page read fault is charged `fault_entry + fault_exit + 4 pt_walk_level + set_pte`,
//! three lock acquires under per-VMA locks (the tree walk, the VMA's read lock, the PTL: the
//! model of this 6.18 host, `host_check::this_host_machine`), and per 512 faults a new PTE table (`pt_alloc`, its
//! clear, a `set_pte`, the PMD's lock and the table page's allocation from the pcp lists);
//! `pt_walk_level` and `set_pte` take their perf shares of the measured fault, `fault_exit`
//! the built-in profiles' assumed part of the rest, and `fault_entry` what remains.
//!
//! # How it differs from the built-in profiles
//! The built-in ones scale a 2026-11-23 perf split of this host by a GHz ratio to other
//! machines; this one is this host only, from a fresh calibration, and writes its arithmetic
//! down. It is not fitted to anything: the closure test checks that the engine, run with it,
//! gives back the measurements it was split from.

mod probe_inputs;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use usermm::vtime::{
    Cost, Figure, Input, InputKind, LockFigure, MemorySpec, Profile, ProfileSpec, Quantity, Smt,
    Topology, Transfers, ENGINE_LOCK_CLASSES,
};
use usermm_host::calibrate::{HostCalibration, Measured};

pub use probe_inputs::lru_add_batch;
use probe_inputs::{lru_add_inputs, shootdown_inputs, smt_factor, threads_per_core};

/// The built-in profile whose host-derived shares and assumptions this one reuses (they were
/// measured on, or assumed for, this same host; one text for both, so that they cannot drift).
const SHARES_FROM: &str = "haswell-ex-4s";

/// Inputs taken from [`SHARES_FROM`] as they are written there.
const BORROWED: &[&str] = &[
    "share_gather",
    "share_lru",
    "share_free_unref",
    "share_zone_locked",
    "share_handle_mm_fault",
    "share_set_ptes",
    "fault_exit_fraction",
    "copy_fraction",
    "local_lock_cycles",
    "wakeup_ns",
    "lru_add_ns",
    "rmqueue_pcp_ns",
    "rmqueue_bulk_page_ns",
    "pt_alloc_ns",
    "pt_free_ns",
    "tlb_flush_local_ns",
    "tlb_flush_remote_ns",
    "flush_tlb_func_ns",
    "workqueue_wake_ns",
    "vma_modify_ns",
];

/// Rounds to 4 decimals (what the file holds; formulas are evaluated over the rounded inputs).
fn r4(v: f64) -> f64 {
    (v * 1e4).round() / 1e4
}

fn input(value: f64, unit: &str, kind: InputKind, source: String) -> Input {
    Input {
        value,
        unit: unit.to_string(),
        kind,
        source,
        rows: Vec::new(),
    }
}

/// "usermm calibrate on CPU (MHz), Linux K, DATE"
fn on(c: &HostCalibration) -> String {
    let s = &c.system;
    format!(
        "usermm calibrate on {} ({:.0} MHz), Linux {}, {}",
        s.cpu_model, s.cpu_mhz, s.kernel, c.date
    )
}

fn measured_source(c: &HostCalibration, fig: &Measured) -> String {
    format!(
        "{}: {}; median of {} (min {:.4}, max {:.4}, MAD {:.4}{})",
        on(c),
        fig.method,
        fig.samples.len(),
        fig.min,
        fig.max,
        fig.mad,
        if fig.bimodal {
            "; bimodal: the samples split into two clusters"
        } else {
            ""
        }
    )
}

/// The calibration's figures the profile reads, each a measured input of its median.
fn measured_figures(c: &HostCalibration) -> BTreeMap<String, Input> {
    let f = &c.figures;
    [
        ("munmap_cow_4k", &f.munmap_cow_4k),
        ("munmap_full_4k", &f.munmap_full_paired_4k),
        ("zero_fault_4k", &f.zero_read_fault_4k),
        ("write_fault_4k", &f.write_fault_4k),
        ("clear_bytes_per_ns", &f.clear_bandwidth),
        ("dram_latency_ns", &f.dram_latency),
        ("syscall_ns", &f.syscall),
        ("line_transfer_ns", &f.cacheline_transfer),
        ("lock_xadd_ns", &f.atomic_rmw),
    ]
    .into_iter()
    .map(|(name, fig)| {
        let i = input(
            r4(fig.median),
            &fig.unit,
            InputKind::Measured,
            measured_source(c, fig),
        );
        (name.to_string(), i)
    })
    .collect()
}

/// The inputs of the this-host profile of `c`, by name.
pub fn inputs(c: &HostCalibration) -> BTreeMap<String, Input> {
    let mut m = measured_figures(c);
    let cache = |level: u32| {
        c.system
            .caches
            .iter()
            .filter(|k| k.level == level && k.kind != "Instruction")
            .map(|k| k.size_bytes)
            .max()
            .unwrap_or(0)
    };
    let llc_level = c.system.caches.iter().map(|k| k.level).max().unwrap_or(0);
    for (name, level) in [("llc_bytes", llc_level), ("l2_bytes", 2)] {
        m.insert(
            name.into(),
            input(
                cache(level).max(64) as f64,
                "bytes",
                InputKind::Measured,
                format!(
                    "{}: the size of cpu0's L{level} cache as /sys/devices/system/cpu/cpu0/cache                      reports it (usermm calibrate)",
                    on(c)
                ),
            ),
        );
    }
    let munmap = &c.figures.munmap_4k;
    m.insert(
        "munmap_rel_mad_pct".into(),
        input(
            r4(if munmap.median > 0.0 {
                100.0 * munmap.mad / munmap.median
            } else {
                0.0
            }),
            "percent",
            InputKind::Measured,
            format!(
                "{}: the median absolute deviation of munmap_4k over its samples, in percent of                  its median (usermm calibrate)",
                on(c)
            ),
        ),
    );
    m.insert(
        "munmap_pages".into(),
        input(
            (c.sizes.teardown_bytes / 4096) as f64,
            "pages",
            InputKind::Measured,
            format!(
                "{}: pages per munmap of the teardown probes (the per-call charges are spread \
                 over these)",
                on(c)
            ),
        ),
    );
    for (name, value, unit, source) in [
        (
            "ptes_per_table",
            512.0,
            "entries",
            "x86-64 4-level paging: a 4 KiB page table holds 512 8-byte entries (Intel SDM Vol. \
             3A §4.5): one PTE table per 512 pages zapped or faulted",
        ),
        (
            "page_bytes",
            4096.0,
            "bytes",
            "x86-64 base page size (Intel SDM Vol. 3A §4.5): a new page table is one page to \
             clear",
        ),
        (
            "lru_lock_batch",
            32.0,
            "pages",
            "SWAP_CLUSTER_MAX = 32 (include/linux/swap.h): folios_put_refs drops the lruvec lock \
             every 32 pages, as the engine's lru.lock_batch default does",
        ),
        (
            "max_gather_batch_count",
            19.0,
            "batches",
            "MAX_GATHER_BATCH_COUNT = 10000 / MAX_GATHER_BATCH = 19 (include/asm-generic/tlb.h), \
             the engine's gather.max_batch_count default: a full gather forces a TLB flush \
             every 19 * 510 pages",
        ),
        (
            "lru_add_batch",
            15.0,
            "pages",
            "the engine's lru.add_batch default, which the host check's machine keeps when the \
             calibration record has no LRU-add probe (format 1 to 3): new pages go to the LRU \
             15 at a time, one lru_lock acquire each, as v4.x's PAGEVEC_SIZE = 15 \
             (include/linux/pagevec.h) did",
        ),
        (
            "gather_batch",
            510.0,
            "pages",
            "MAX_GATHER_BATCH = (PAGE_SIZE - 16) / 8 = 510 (include/asm-generic/tlb.h): one \
             free_pages_and_swap_cache call, hence one pcp lock hold, per gather batch",
        ),
    ] {
        m.insert(
            name.into(),
            input(value, unit, InputKind::Published, source.into()),
        );
    }
    m.insert(
        "fault_lock_acquires".into(),
        input(
            3.0,
            "acquires",
            InputKind::Published,
            "a 4 KiB read fault under per-VMA locks (Linux 6.4+, this host's 6.18): \
             lock_vma_under_rcu walks the VMA tree under RCU and takes the VMA's read lock, \
             then the PTE lock (mm/memory.c); the engine's model of this host \
             (host_check::this_host_machine) accounts them as three acquires: the tree walk \
             (mm_mt, shared), the VMA read lock (shared) and the PTL"
                .into(),
        ),
    );
    m.insert(
        "pcp_batch".into(),
        input(
            31.0,
            "pages",
            InputKind::Assumption,
            "assumption: the engine's pcp.batch default (a pcp drain moves 31 pages under one \
             zone.lock hold); this host's own pcp->batch (/proc/zoneinfo) is not read by \
             calibrate"
                .into(),
        ),
    );
    m.insert("smt_sibling_factor".into(), smt_factor(c));
    borrow_inputs(&mut m);
    shootdown_inputs(c, &mut m);
    lru_add_inputs(c, &mut m);
    m
}

/// The [`BORROWED`] inputs, as [`SHARES_FROM`] writes them.
fn borrow_inputs(m: &mut BTreeMap<String, Input>) {
    if let Ok(seed) = Profile::builtin(SHARES_FROM) {
        for name in BORROWED {
            if let Some(i) = seed.spec().inputs.get(*name) {
                let mut i = i.clone();
                i.source = format!("as in the built-in profile {SHARES_FROM}: {}", i.source);
                m.insert(name.to_string(), i);
            }
        }
    }
}

/// The free side of a page, measured: paired full munmap − the COW child's munmap.
const FREE_SIDE: &str = "(munmap_full_4k - munmap_cow_4k)";
/// `pt_walk_level`'s formula (the zap charges two per PTE table).
const PT_WALK: &str = "zero_fault_4k * (share_handle_mm_fault - share_set_ptes) / 4";

/// `free_unref_page`'s formula.
fn free_unref() -> String {
    format!(
        "{FREE_SIDE} * (share_free_unref - share_zone_locked) / (share_lru + share_free_unref) - lock_xadd_ns / gather_batch"
    )
}

/// `free_pcppages_bulk_page`'s formula.
fn free_bulk() -> String {
    format!("{FREE_SIDE} * share_zone_locked / (share_lru + share_free_unref) - lock_xadd_ns / pcp_batch")
}

/// Every cost's formula and the sentence that explains it: an exhaustive `match`, so a cost
/// added to [`Cost`] does not compile until this host's profile prices it.
fn cost_formula(cost: Cost) -> (String, &'static str) {
    let (f, why): (String, &'static str) = match cost {
        Cost::ZapPte => (
            format!(
                "munmap_cow_4k - munmap_full_4k * share_gather - (2 * ({PT_WALK}) + pt_free_ns + lock_xadd_ns + ({}) + ({})) / ptes_per_table - tlb_flush_local_ns / (gather_batch * max_gather_batch_count) - (syscall_ns + vma_modify_ns + tlb_flush_local_ns + lock_xadd_ns) / munmap_pages",
                free_unref(),
                free_bulk()
            ),
            "the zap side, measured: the COW child's munmap per page (zap, gather, reference drop, its own page tables freed; no data page freed), less gather_page, less what the engine charges per PTE table (two pt_walk_level, pt_free, the PTL acquire, and the table page's own free_unref_page and free_pcppages_bulk_page) / ptes_per_table, per full gather (a forced local TLB flush every gather_batch * max_gather_batch_count pages) and per call (syscall, vma_modify, the final local TLB flush, the mmap_lock acquire) / munmap_pages: nothing is charged on top of the measured zap",
        ),
        Cost::GatherPage => (
            "munmap_full_4k * share_gather".into(),
            "the perf share of __tlb_remove_folio_pages (inputs.share_gather) of the paired full munmap",
        ),
        Cost::LruDel => (
            format!("{FREE_SIDE} * share_lru / (share_lru + share_free_unref) - lock_xadd_ns / lru_lock_batch"),
            "the free side, measured (paired full munmap - COW child's munmap, per page), times the lru_lock section's share of the perf-split free side, less the lru_lock acquire the engine charges per lru_lock_batch pages",
        ),
        Cost::FreeUnrefPage => (
            free_unref(),
            "the free side times the free_unref bucket's share of the perf-split free side without its zone->lock section, less the pcp lock acquire the engine charges per gather batch",
        ),
        Cost::FreePcppagesBulkPage => (
            free_bulk(),
            "the free side times the zone->lock section's share of the perf-split free side (__free_one_page and its merges included), less the zone.lock acquire the engine charges per pcp_batch pages",
        ),
        Cost::FreeOneMerge => (
            "0".into(),
            "included in free_pcppages_bulk_page: the zone->lock section's share covers __free_one_page with its merge steps",
        ),
        Cost::LruAdd => (
            "lru_add_ns".into(),
            "per folio of an LRU-add batch, moved by the fault that fills it: measured by the LRU-add probe, or an assumption for an older record (see inputs.lru_add_ns)",
        ),
        Cost::RmqueuePcp => ("rmqueue_pcp_ns".into(), "assumption (see inputs.rmqueue_pcp_ns)"),
        Cost::RmqueueBulkPage => (
            "rmqueue_bulk_page_ns".into(),
            "assumption (see inputs.rmqueue_bulk_page_ns)",
        ),
        Cost::ClearPage => (
            "clear_bytes_per_ns".into(),
            "the memset bandwidth measured here, 4 KiB at a time over a buffer larger than the caches",
        ),
        Cost::CopyPage => (
            "clear_bytes_per_ns * copy_fraction".into(),
            "assumption: half of the memset bandwidth measured here (inputs.copy_fraction)",
        ),
        Cost::NewAnonFolio => (
            "write_fault_4k - zero_fault_4k - page_bytes / clear_bytes_per_ns - rmqueue_pcp_ns - lock_xadd_ns - rmqueue_bulk_page_ns - lock_xadd_ns / pcp_batch - lru_add_ns - local_lock_cycles / topology_ghz - lock_xadd_ns / lru_add_batch".into(),
            "the measured 4 KiB write fault less the measured zero-page read fault, less what the engine charges a write fault besides: the page's clear, its allocation (rmqueue_pcp and the pcp lock, its share of a pcp refill: rmqueue_bulk_page and a zone.lock acquire per pcp_batch pages) and its LRU add (lru_add, the per-CPU batch's local lock, an lru_lock acquire per lru_add_batch pages): what is left is the memcg charge, the new folio's set-up, its rmap and rss accounting, and the engine's whole write fault is the measured one",
        ),
        Cost::FaultEntry => (
            "zero_fault_4k * (1 - share_handle_mm_fault) * (1 - fault_exit_fraction) - fault_lock_acquires * lock_xadd_ns - (pt_alloc_ns + page_bytes / clear_bytes_per_ns + zero_fault_4k * share_set_ptes + lock_xadd_ns + rmqueue_pcp_ns + rmqueue_bulk_page_ns + lock_xadd_ns + lock_xadd_ns / pcp_batch) / ptes_per_table".into(),
            "the measured zero-page read fault outside handle_mm_fault, less the return (fault_exit), the fault's lock acquires (fault_lock_acquires), and the new PTE table the engine charges per ptes_per_table faults (pt_alloc, its clear, the PMD entry's set_pte, the PMD lock, and the table page's allocation: rmqueue_pcp, its share of a pcp refill (rmqueue_bulk_page, a zone.lock acquire per pcp_batch) and the pcp lock): the engine's whole zero-page fault is the measured one",
        ),
        Cost::FaultExit => (
            "zero_fault_4k * (1 - share_handle_mm_fault) * fault_exit_fraction".into(),
            "the return's part (assumption, inputs.fault_exit_fraction) of the measured zero-page read fault outside handle_mm_fault",
        ),
        Cost::PtWalkLevel => (
            PT_WALK.into(),
            "handle_mm_fault's perf share of the measured zero-page read fault less set_ptes, over the 4 levels the engine charges",
        ),
        Cost::SetPte => (
            "zero_fault_4k * share_set_ptes".into(),
            "set_ptes' perf share of the measured zero-page read fault",
        ),
        Cost::PtAlloc => ("pt_alloc_ns".into(), "assumption (see inputs.pt_alloc_ns); deducted from fault_entry per new table"),
        Cost::PtFree => ("pt_free_ns".into(), "assumption (see inputs.pt_free_ns); deducted from zap_pte, not added to the measured munmap"),
        Cost::TlbFlushLocal => (
            "tlb_flush_local_ns".into(),
            "assumption (see inputs.tlb_flush_local_ns); deducted from zap_pte",
        ),
        Cost::TlbFlushRemotePerCpu => (
            "tlb_flush_remote_ns".into(),
            "see inputs.tlb_flush_remote_ns: the shootdown probe's sender side, or an assumption; not in any single-thread figure",
        ),
        Cost::FlushTlbFunc => (
            "flush_tlb_func_ns".into(),
            "see inputs.flush_tlb_func_ns: the shootdown probe's receiving side, or an assumption; not in any single-thread figure",
        ),
        Cost::WorkqueueWake => ("workqueue_wake_ns".into(), "assumption (see inputs.workqueue_wake_ns)"),
        Cost::Syscall => ("syscall_ns".into(), "getppid measured here"),
        Cost::VmaModify => ("vma_modify_ns".into(), "assumption (see inputs.vma_modify_ns); deducted from zap_pte"),
        Cost::UserLine => (
            "clear_bytes_per_ns".into(),
            "a user-space walk streams its lines at the memset bandwidth measured here",
        ),
        Cost::UserMiss => (
            "dram_latency_ns".into(),
            "a random user access misses every cache: the DRAM latency measured here",
        ),
    };
    (f, why)
}

/// Data lines per lock class (what a hand-over carries), with why.
fn data_lines(class: &str) -> (u32, &'static str) {
    match class {
        // The line model prices these lines one by one where they are touched
        // (crates/usermm/src/vtime/memory.rs): none counted on the hand-over.
        "zone.lock" | "lru_lock" | "pcp" => (
            0,
            "none counted: its list heads and struct pages are modelled lines",
        ),
        "mmap_lock" => (2, "rwsem count and owner, and the VMA tree root"),
        "pcpu_lock" => (2, "the chunk slot list heads and the chunk's hints"),
        "workqueue" => (2, "the pool's worklist head and nr_active"),
        "hugetlb_lock" => (2, "the hugepage free list head and the pool counters"),
        "shmem_i_pages" => (2, "the xarray node and the mapping's counters"),
        "lru_add" | "tlb_gate" | "mmap_lock_hist" | "unmodelled" => {
            (0, "nothing: never handed to another CPU")
        }
        _ => (1, "the lock's own line"),
    }
}

/// A figure in ns with its formula, evaluated over `values`.
fn ns_fig(values: &BTreeMap<&str, f64>, formula: &str, source: &str) -> Figure {
    Figure {
        ns: Some(r4(eval(formula, values).unwrap_or(f64::NAN))),
        cycles: None,
        bytes_per_ns: None,
        formula: Some(formula.into()),
        source: source.into(),
    }
}

/// The this-host topology: what the system reports, with the SMT probe's threads a core.
fn topology(c: &HostCalibration) -> Topology {
    let s = &c.system;
    let sockets = s.sockets.max(1);
    let tpc = threads_per_core(c);
    let cores_per_socket = (s.online_cpus / tpc / sockets).max(1);
    let smt_note = match &c.smt {
        Some(p) if tpc != s.threads_per_core.max(1) => format!(
            "; {}, which sysfs does not show: {tpc} threads a core, every CPU taken to pair \
             as the probed two do (an assumption)",
            p.summary()
        ),
        Some(p) => format!("; {}", p.summary()),
        None => String::new(),
    };
    Topology {
        sockets: sockets as u32,
        nodes: s.nodes.max(1) as u32,
        cores_per_socket: cores_per_socket as u32,
        threads_per_core: tpc as u32,
        ghz: r4(s.cpu_mhz / 1000.0).max(0.001),
        memory_gib: Some((s.memory_kb >> 20).max(1)),
        source: format!(
            "what the system reports ({}): /proc/cpuinfo `{}` at {} MHz, {} online CPUs, cpu0's \
             thread_siblings_list ({} per core), physical_package_id ({} socket(s)), \
             /sys/devices/system/node ({} node(s)), MemTotal {} kB; caches of cpu0: {}{}",
            c.date,
            s.cpu_model,
            s.cpu_mhz,
            s.online_cpus,
            s.threads_per_core,
            s.sockets,
            s.nodes,
            s.memory_kb,
            s.caches
                .iter()
                .map(|k| format!(
                    "L{} {} {} KiB shared by CPUs {}",
                    k.level,
                    k.kind,
                    k.size_bytes >> 10,
                    k.shared_cpu_list
                ))
                .collect::<Vec<_>>()
                .join(", "),
            smt_note
        ),
    }
}

/// The this-host profile of `c`, as the engine's profile type.
pub fn this_host_spec(c: &HostCalibration) -> ProfileSpec {
    let inputs = inputs(c);
    let mut values: BTreeMap<&str, f64> =
        inputs.iter().map(|(k, v)| (k.as_str(), v.value)).collect();
    let tpc = threads_per_core(c);
    let topology = topology(c);
    // The profile's own clock, as the loader gives it to every formula.
    values.insert("topology_ghz", topology.ghz);
    let transfer = Transfers {
        smt_sibling: ns_fig(
            &values,
            "line_transfer_ns",
            if tpc > 1 {
                "the one-way cache-line transfer measured here (CAS ping-pong between two CPUs), between SMT siblings as the SMT probe found this host's CPUs"
            } else {
                "no SMT siblings on this host: never applied in this profile's topology; the transfer measured between this host's two CPUs stands in"
            },
        ),
        same_socket: ns_fig(
            &values,
            "line_transfer_ns",
            "the one-way cache-line transfer measured here (CAS ping-pong between two CPUs)",
        ),
        other_socket: ns_fig(
            &values,
            "line_transfer_ns",
            "one socket on this host: never applied in this profile's topology; the transfer measured between this host's two CPUs stands in",
        ),
    };
    let smt = Smt {
        sibling_factor: eval("smt_sibling_factor", &values).unwrap_or(1.0),
        formula: Some("smt_sibling_factor".into()),
        source: if c.smt.as_ref().is_some_and(|p| p.shared_core) {
            "measured by usermm calibrate's SMT probe (see inputs.smt_sibling_factor)".into()
        } else {
            "assumption (see inputs.smt_sibling_factor)".into()
        },
    };
    let mut locks = BTreeMap::new();
    for class in ENGINE_LOCK_CLASSES {
        let (lines, carries) = data_lines(class);
        let data_lines_source = if lines == 0 {
            carries.to_string()
        } else {
            format!("assumption: a hand-over carries {carries}")
        };
        let fig = match *class {
            "tlb_gate" | "mmap_lock_hist" | "unmodelled" => LockFigure {
                acquire_ns: Some(0.0),
                acquire_cycles: None,
                data_lines: lines,
                data_lines_source,
                formula: Some("0".into()),
                source: "not kernel work: usermm's own stand-in, instrumentation or test lock, \
                         free in the model; priced because every engine class must be"
                    .into(),
            },
            "lru_add" => LockFigure {
                acquire_ns: None,
                acquire_cycles: Some(r4(eval("local_lock_cycles", &values).unwrap_or(f64::NAN))),
                data_lines: lines,
                data_lines_source,
                formula: Some("local_lock_cycles".into()),
                source: "assumption (see inputs.local_lock_cycles)".into(),
            },
            _ => LockFigure {
                acquire_ns: Some(r4(eval("lock_xadd_ns", &values).unwrap_or(f64::NAN))),
                acquire_cycles: None,
                data_lines: lines,
                data_lines_source,
                formula: Some("lock_xadd_ns".into()),
                source: "an uncontended acquire is one locked RMW on a local line: the lock \
                         xadd measured here"
                    .into(),
            },
        };
        locks.insert(class.to_string(), fig);
    }
    let mut costs = BTreeMap::new();
    for cost in Cost::ALL {
        let (formula, source) = cost_formula(*cost);
        let mut fig = ns_fig(&values, &formula, source);
        if cost.bytes().is_some() {
            fig.bytes_per_ns = fig.ns.take();
        }
        costs.insert(cost.key().to_string(), fig);
    }
    ProfileSpec {
        // This host, now: no era's factors apply.
        era: None,
        name: "this-host".into(),
        description: format!(
            "This host as calibrated {}: {}, {} socket(s) x {} core(s) x {} thread(s), {} \
             node(s), Linux {}",
            c.date,
            c.system.cpu_model,
            topology.sockets,
            topology.cores_per_socket,
            topology.threads_per_core,
            topology.nodes,
            c.system.kernel
        ),
        topology,
        transfer,
        smt,
        wakeup: ns_fig(&values, "wakeup_ns", "assumption (see inputs.wakeup_ns)"),
        atomic_rmw: ns_fig(
            &values,
            "lock_xadd_ns",
            "an uncontended lock xadd on a line this CPU holds, measured here",
        ),
        locks,
        costs,
        memory: Some(MemorySpec {
            llc_lines: quantity(&values, "llc_bytes / 64", "the last-level cache in 64-byte lines, as sysfs reports its size"),
            l2_lines: quantity(&values, "l2_bytes / 64", "one core's L2 in 64-byte lines, as sysfs reports its size"),
            dram_local: ns_fig(&values, "dram_latency_ns", "the dependent-load DRAM latency measured here"),
            dram_remote: ns_fig(
                &values,
                "dram_latency_ns",
                "the DRAM latency measured here: no remote node is measured (one node on this host; with more, never applied as remote)",
            ),
            dram_stream: ns_fig(
                &values,
                "64 / clear_bytes_per_ns",
                "one 64-byte line at the streaming bandwidth measured here (the clear bandwidth)",
            ),
        }),
        jitter: Some(quantity(
            &values,
            "1.4826 * munmap_rel_mad_pct",
            "the relative standard deviation of a batch of work: 1.4826 x the relative median absolute deviation of munmap_4k measured here (the normal distribution's ratio)",
        )),
        inputs,
    }
}

/// A count or share with its formula, evaluated over `values`.
fn quantity(values: &BTreeMap<&str, f64>, formula: &str, source: &str) -> Quantity {
    Quantity {
        value: r4(eval(formula, values).unwrap_or(f64::NAN)),
        formula: Some(formula.into()),
        source: source.into(),
    }
}

/// How every this-host profile starts: `usermm calibrate --out` replaces an existing file
/// only when it starts so (one it wrote).
pub const THIS_HOST_HEADER: &str = "# Cost profile: this host, written by `usermm calibrate`";

/// The this-host profile of `c` as TOML text: a header naming the calibration and the figures
/// it measured that no cost uses (for the record), then the profile.
pub fn this_host_profile(c: &HostCalibration) -> String {
    let spec = this_host_spec(c);
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{THIS_HOST_HEADER} from its run of {}.\n\
         # Every figure is a `formula` over the [inputs] below; the loader holds each figure to it.\n\
         # Measured by the same run, used by no figure of the model yet (medians):",
        c.date
    );
    let f = &c.figures;
    for (key, m) in [
        ("munmap_4k", &f.munmap_4k),
        ("dontneed_4k", &f.dontneed_4k),
        ("write_fault_4k", &f.write_fault_4k),
        ("huge_zero_read_fault", &f.huge_zero_read_fault),
        ("thp_write_fault", &f.thp_write_fault),
    ] {
        let _ = writeln!(
            t,
            "#   {key} = {:.1} {} ({:.1}-{:.1}{})",
            m.median,
            m.unit,
            m.min,
            m.max,
            if m.bimodal { ", bimodal" } else { "" }
        );
    }
    t.push('\n');
    t.push_str(&toml::to_string_pretty(&spec).unwrap_or_default());
    t
}

/// Evaluates a formula over `inputs` with the profile loader's own evaluator
/// ([`usermm::vtime::evaluate`]), so that a written figure agrees with the loader's check.
pub fn eval(formula: &str, inputs: &BTreeMap<&str, f64>) -> Result<f64, String> {
    usermm::vtime::evaluate(formula, &|n| inputs.get(n).copied())
}
