//! The `this-host` cost profile: [`this_host_profile`] turns a [`HostCalibration`] (what
//! `usermm calibrate` measured) into a profile TOML, with no host call of its own.
//!
//! Every number the profile uses is a named **input** (`[inputs.NAME]`: value, unit, kind
//! `measured` | `published` | `assumption`, source), and every figure carries the **formula**
//! over inputs that gives its value (`+ - * / ( )`, numbers and input names). Values are
//! computed by evaluating the formulas ([`eval`]), so a figure equals its formula by
//! construction; the loader of the lead's extended format checks it again.
//!
//! # How the teardown and fault figures are split
//! The engine charges a munmap of N touched 4 KiB pages per page `zap_pte + gather_page`
//! (zap side) and `lru_del + free_unref_page + free_pcppages_bulk_page` (+ `free_one_merge`
//! per merge; free side), per PTE table two `pt_walk_level`, one `pt_free` and one `ptl`
//! acquire, per `lru.lock_batch` pages an `lru_lock` acquire, per `pcp.batch` pages a
//! `zone.lock` acquire, per gather batch a `pcp` acquire, and per call `syscall`,
//! `vma_modify`, `tlb_flush_local` and the `mmap_lock`. Those must add up to the measured
//! munmap, nothing on top:
//! - the zap side is the COW child's munmap (`munmap_cow_4k`: zap, gather, reference drop, no
//!   free); `gather_page` is its perf share, `zap_pte` the rest after the per-table and per-call
//!   charges;
//! - the free side is `munmap_full_4k − munmap_cow_4k` of the same processes, split between
//!   LRU removal, pcp free and buddy free by the perf cpu-clock split of this host's munmap
//!   (`measure/split_munmap.py`, a measurement with its command), each less its lock acquires;
//!   `free_one_merge` is 0, included in the bulk share.
//!
//! A zero-page read fault is charged `fault_entry + fault_exit + 4 pt_walk_level + set_pte`,
//! the per-VMA lock and the PTL, and per 512 faults a new PTE table (`pt_alloc`, its clear, a
//! `set_pte` and the PMD's lock); `fault_exit`, `pt_walk_level` and `set_pte` take their perf
//! shares of the measured fault, `fault_entry` the rest.
//!
//! # How it differs from the built-in profiles
//! The built-in ones scale a 2026-11-23 perf split of this host by a GHz ratio to other
//! machines; this one is this host only, from a fresh calibration, and writes its arithmetic
//! down. It is not fitted to anything: the closure test checks that the engine, run with it,
//! gives back the measurements it was split from.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use usermm::vtime::{Cost, ENGINE_LOCK_CLASSES};
use usermm_host::calibrate::HostCalibration;

/// What an input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Measured on this host (by this calibration, or by a stated earlier command).
    Measured,
    /// A published figure or a constant of the architecture or the kernel.
    Published,
    /// Neither: a value chosen, with the reason in its source.
    Assumption,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Measured => "measured",
            Kind::Published => "published",
            Kind::Assumption => "assumption",
        }
    }
}

/// One `[inputs.NAME]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub value: f64,
    pub unit: &'static str,
    pub kind: Kind,
    pub source: String,
}

/// The perf split of this host's munmap and zero-page fault that the per-step shares come
/// from (2026-11-23; the commands are in the sources).
const SPLIT_MUNMAP: &str = "perf record -e cpu-clock -F 25000 -g on \
    crates/usermm/src/vtime/profiles/measure/munmap_per_page.c (8 x 2 GiB touched \
    MADV_NOHUGEPAGE, munmap), samples under __x64_sys_munmap bucketed by \
    crates/usermm/src/vtime/profiles/measure/split_munmap.py, this host (AMD EPYC, Linux \
    6.18.44 Firecracker guest), 2026-11-23";
const SPLIT_FAULT: &str = "perf record -e cpu-clock -g on \
    crates/usermm/src/vtime/profiles/measure/zero_fault.c (20 x 256 MiB read-only \
    MADV_NOHUGEPAGE, one read per 4 KiB), this host (AMD EPYC, Linux 6.18.44 Firecracker \
    guest), 2026-11-23";

/// Rounds to 4 decimals (what the file holds; formulas are evaluated over the rounded inputs).
fn r4(v: f64) -> f64 {
    (v * 1e4).round() / 1e4
}

/// The inputs of the this-host profile of `c`.
pub fn inputs(c: &HostCalibration) -> BTreeMap<&'static str, Input> {
    let s = &c.system;
    let on = format!(
        "usermm calibrate on {} ({:.0} MHz), Linux {}, {}",
        s.cpu_model, s.cpu_mhz, s.kernel, c.date
    );
    let mut m = BTreeMap::new();
    let f = &c.figures;
    let mut measured = |name: &'static str, fig: &usermm_host::calibrate::Measured| {
        m.insert(
            name,
            Input {
                value: r4(fig.median),
                unit: unit(&fig.unit),
                kind: Kind::Measured,
                source: format!(
                    "{on}: {}; median of {} (min {:.4}, max {:.4}, MAD {:.4}{})",
                    fig.method,
                    fig.samples.len(),
                    fig.min,
                    fig.max,
                    fig.mad,
                    if fig.bimodal {
                        ", bimodal: two modes per process"
                    } else {
                        ""
                    }
                ),
            },
        );
    };
    measured("munmap_4k", &f.munmap_4k);
    measured("munmap_cow_4k", &f.munmap_cow_4k);
    measured("munmap_full_4k", &f.munmap_full_paired_4k);
    measured("dontneed_4k", &f.dontneed_4k);
    measured("write_fault_4k", &f.write_fault_4k);
    measured("zero_fault_4k", &f.zero_read_fault_4k);
    measured("huge_zero_fault", &f.huge_zero_read_fault);
    measured("thp_write_fault", &f.thp_write_fault);
    measured("clear_bytes_per_ns", &f.clear_bandwidth);
    measured("syscall_ns", &f.syscall);
    measured("line_transfer_ns", &f.cacheline_transfer);
    measured("lock_xadd_ns", &f.atomic_rmw);
    measured("dram_ns", &f.dram_latency);
    let mut put = |name: &'static str, value: f64, unit: &'static str, kind, source: String| {
        m.insert(
            name,
            Input {
                value,
                unit,
                kind,
                source,
            },
        );
    };
    put(
        "munmap_pages",
        (c.sizes.teardown_bytes / 4096) as f64,
        "pages",
        Kind::Measured,
        format!("{on}: pages per munmap of the teardown probes (their per-call costs are spread over these)"),
    );
    put(
        "perf_munmap_gather_share",
        0.014,
        "fraction",
        Kind::Measured,
        format!("{SPLIT_MUNMAP}: __tlb_remove_folio_pages = 1.4 % of munmap"),
    );
    put(
        "perf_munmap_lru_share",
        0.273,
        "fraction",
        Kind::Measured,
        format!(
            "{SPLIT_MUNMAP}: the irq-off lru_lock section of folios_put_refs (samples land on \
             _raw_spin_unlock_irqrestore) = 27.3 % of munmap"
        ),
    );
    put(
        "perf_munmap_free_unref_share",
        0.306,
        "fraction",
        Kind::Measured,
        format!(
            "{SPLIT_MUNMAP}: free_unref_folios, free_frozen_page_commit, \
             mem_cgroup_uncharge_folios and the rest of free_pages_and_swap_cache = 30.6 % of \
             munmap (the buddy free is inside: see perf_munmap_bulk_share)"
        ),
    );
    put(
        "perf_munmap_bulk_share",
        0.022,
        "fraction",
        Kind::Measured,
        format!(
            "{SPLIT_MUNMAP}, rerun for /work/shared/reference/model-audit.md §1.1: the \
             zone->lock section (free_pcppages_bulk, a tail call, shows as \
             _raw_spin_unlock_irqrestore under free_frozen_page_commit on this PMU-less guest) \
             = 2.2 % of munmap, part of the 30.6 % free_unref bucket"
        ),
    );
    put(
        "perf_fault_exit_share",
        0.105,
        "fraction",
        Kind::Measured,
        format!(
            "{SPLIT_FAULT}: the samples at the user IP (21 %) are the exception's delivery and \
             return; half of them, the return"
        ),
    );
    put(
        "perf_fault_handle_mm_share",
        0.305,
        "fraction",
        Kind::Measured,
        format!("{SPLIT_FAULT}: handle_mm_fault (the walk, do_anonymous_page, set_ptes) = 30.5 % of the fault"),
    );
    put(
        "perf_fault_set_pte_share",
        0.0075,
        "fraction",
        Kind::Measured,
        format!("{SPLIT_FAULT}: set_ptes = 0.75 % of the fault"),
    );
    put(
        "ptes_per_table",
        512.0,
        "entries",
        Kind::Published,
        "x86-64 4-level paging: a 4 KiB page table holds 512 8-byte entries (Intel SDM \
         Vol. 3A §4.5); one PTE table per 512 pages zapped or faulted"
            .into(),
    );
    put(
        "page_bytes",
        4096.0,
        "bytes",
        Kind::Published,
        "x86-64 base page size (Intel SDM Vol. 3A §4.5); clear_page of a new table clears one"
            .into(),
    );
    put(
        "lru_lock_batch",
        32.0,
        "pages",
        Kind::Published,
        "SWAP_CLUSTER_MAX (include/linux/swap.h): folios_put_refs drops the lruvec lock every \
         32 pages; the engine's lru.lock_batch default"
            .into(),
    );
    put(
        "gather_batch",
        510.0,
        "pages",
        Kind::Published,
        "MAX_GATHER_BATCH = (PAGE_SIZE - 16) / 8 (include/asm-generic/tlb.h): one \
         free_pages_and_swap_cache call, hence one pcp lock hold, per gather batch"
            .into(),
    );
    put(
        "pcp_batch",
        31.0,
        "pages",
        Kind::Assumption,
        "assumption: the engine's pcp.batch default (a drain moves 31 pages under one \
         zone.lock hold), the kernel's zone_batchsize for a zone of a few GiB; this host's own \
         pcp->batch is not read by calibrate"
            .into(),
    );
    let assume = |v: f64, unit: &'static str, why: &str| {
        (
            v,
            unit,
            format!("assumption, not measured by usermm calibrate: {why}"),
        )
    };
    for (name, (v, unit, why)) in [
        ("pt_alloc_ns", assume(150.0, "ns", "allocating and accounting one table page (pte_alloc_one, pgtable_pte_page_ctor), as in the built-in profiles; its clear is charged as clear_page")),
        ("pt_free_ns", assume(80.0, "ns", "freeing one table page in free_pgtables, as in the built-in profiles; inside the measured munmap, so it is deducted from zap_pte, not added")),
        ("vma_modify_ns", assume(300.0, "ns", "a maple-tree store or erase and the VMA's bookkeeping, a few hundred ns, as in the built-in profiles; once per munmap, spread over munmap_pages")),
        ("tlb_flush_local_ns", assume(150.0, "ns", "a local TLB flush and its refill misses, as in the built-in profiles; once per munmap, spread over munmap_pages")),
        ("tlb_flush_remote_ns", assume(1500.0, "ns", "the sender's share of one IPI shootdown target; this host's second vCPU is a KVM vCPU whose IPI exits to the hypervisor, not measured")),
        ("workqueue_wake_ns", assume(1500.0, "ns", "queue_work's try_to_wake_up of an idle worker, as in the built-in profiles")),
        ("wakeup_ns", assume(3000.0, "ns", "a wake-up to the sleeper running, as in the built-in profiles; on this VM an idle vCPU halts to the hypervisor and a condvar hand-off costs ~22 us (DESIGN.md §8), which is not what a kernel wake-up costs on bare metal")),
        ("rmqueue_pcp_ns", assume(20.0, "ns", "rmqueue_pcplist taking a page, as in the built-in profiles; calibrate measures the whole write fault (write_fault_4k) but does not split it")),
        ("rmqueue_bulk_page_ns", assume(25.0, "ns", "__rmqueue_smallest per page under zone.lock, as in the built-in profiles; not split out of write_fault_4k")),
        ("lru_add_ns", assume(15.0, "ns", "lruvec_add_folio per page, as in the built-in profiles; not split out of write_fault_4k")),
        ("copy_over_clear", assume(0.5, "ratio", "copy_page moves each byte twice (read and write): half the memset bandwidth; copy not measured")),
        ("local_lock_ns", assume(0.0, "ns", "the lru_add pagevec is under a local lock (preempt/irq disable on a non-RT kernel), no locked RMW; its cost is inside lru_add")),
        ("smt_sibling_factor", assume(1.0, "factor", "this host has one thread per core (thread_siblings_list), so no sibling ever shares a core in this profile's topology; 1 = no slowdown")),
    ] {
        put(name, v, unit, Kind::Assumption, why);
    }
    m
}

/// `ns/page` → a static unit string.
fn unit(u: &str) -> &'static str {
    match u {
        "ns/page" => "ns/page",
        "ns/fault" => "ns/fault",
        "bytes/ns" => "bytes/ns",
        "ns/load" => "ns/load",
        _ => "ns",
    }
}

/// A figure of the profile: its formula and where its reasoning comes from.
struct Formula {
    formula: &'static str,
    source: &'static str,
}

const fn fx(formula: &'static str, source: &'static str) -> Formula {
    Formula { formula, source }
}

/// Every cost's formula (the engine's [`Cost`] keys).
fn cost_formula(key: &str) -> Formula {
    match key {
        "zap_pte" => fx(
            "munmap_cow_4k - munmap_full_4k * perf_munmap_gather_share - (2 * zero_fault_4k * (perf_fault_handle_mm_share - perf_fault_set_pte_share) / 4 + pt_free_ns + lock_xadd_ns) / ptes_per_table - (syscall_ns + vma_modify_ns + tlb_flush_local_ns + lock_xadd_ns) / munmap_pages",
            "the zap side: the COW child's munmap per page, less gather_page, less what the engine charges per PTE table (two pt_walk_level, pt_free, the PTL acquire) / 512 and per call (syscall, vma_modify, one local TLB flush, the mmap_lock acquire) / munmap_pages",
        ),
        "gather_page" => fx(
            "munmap_full_4k * perf_munmap_gather_share",
            "the perf share of __tlb_remove_folio_pages in this host's munmap, of the paired full munmap",
        ),
        "lru_del" => fx(
            "(munmap_full_4k - munmap_cow_4k) * perf_munmap_lru_share / (perf_munmap_lru_share + perf_munmap_free_unref_share) - lock_xadd_ns / lru_lock_batch",
            "the free side (paired full munmap - COW-child munmap, per page) times the lru_lock section's perf share of the free side, less the lru_lock acquire the engine charges per lru_lock_batch pages",
        ),
        "free_unref_page" => fx(
            "(munmap_full_4k - munmap_cow_4k) * (perf_munmap_free_unref_share - perf_munmap_bulk_share) / (perf_munmap_lru_share + perf_munmap_free_unref_share) - lock_xadd_ns / gather_batch",
            "the free side times the free_unref bucket's perf share of the free side without the zone->lock section, less the pcp lock acquire the engine charges per gather batch",
        ),
        "free_pcppages_bulk_page" => fx(
            "(munmap_full_4k - munmap_cow_4k) * perf_munmap_bulk_share / (perf_munmap_lru_share + perf_munmap_free_unref_share) - lock_xadd_ns / pcp_batch",
            "the free side times the zone->lock section's perf share of the free side (__free_one_page and its merges included), less the zone.lock acquire per pcp_batch pages",
        ),
        "free_one_merge" => fx("0", "included in free_pcppages_bulk_page: the zone->lock section's share covers __free_one_page with its merge steps"),
        "lru_add" => fx("lru_add_ns", "assumption (see the input)"),
        "rmqueue_pcp" => fx("rmqueue_pcp_ns", "assumption (see the input)"),
        "rmqueue_bulk_page" => fx("rmqueue_bulk_page_ns", "assumption (see the input)"),
        "clear_page" => fx("clear_bytes_per_ns", "the memset bandwidth measured here, 4 KiB at a time (bytes_per_ns)"),
        "copy_page" => fx("clear_bytes_per_ns * copy_over_clear", "half the memset bandwidth (bytes_per_ns; assumption, see copy_over_clear)"),
        "fault_entry" => fx(
            "zero_fault_4k * (1 - perf_fault_exit_share - perf_fault_handle_mm_share) - 2 * lock_xadd_ns - (pt_alloc_ns + page_bytes / clear_bytes_per_ns + zero_fault_4k * perf_fault_set_pte_share + lock_xadd_ns) / ptes_per_table",
            "the rest of the measured zero-page read fault: the fault less fault_exit, the four pt_walk_level and set_pte (handle_mm_fault's share), the per-VMA lock and PTL acquires, and the new PTE table per 512 faults (pt_alloc, its clear, the PMD entry's set_pte, the PMD lock)",
        ),
        "fault_exit" => fx(
            "zero_fault_4k * perf_fault_exit_share",
            "the return half of the samples at the user IP, of the measured zero-page read fault",
        ),
        "pt_walk_level" => fx(
            "zero_fault_4k * (perf_fault_handle_mm_share - perf_fault_set_pte_share) / 4",
            "handle_mm_fault's share of the measured zero-page read fault less set_ptes, over the 4 levels the engine charges",
        ),
        "set_pte" => fx(
            "zero_fault_4k * perf_fault_set_pte_share",
            "set_ptes' share of the measured zero-page read fault",
        ),
        "pt_alloc" => fx("pt_alloc_ns", "assumption (see the input)"),
        "pt_free" => fx("pt_free_ns", "assumption (see the input); deducted from zap_pte"),
        "tlb_flush_local" => fx("tlb_flush_local_ns", "assumption (see the input); deducted from zap_pte"),
        "tlb_flush_remote_per_cpu" => fx("tlb_flush_remote_ns", "assumption (see the input)"),
        "workqueue_wake" => fx("workqueue_wake_ns", "assumption (see the input)"),
        "syscall" => fx("syscall_ns", "getppid measured here"),
        "vma_modify" => fx("vma_modify_ns", "assumption (see the input); deducted from zap_pte"),
        _ => fx("0", "unknown to this version of calibrate"),
    }
}

/// Data lines per lock class (the hand-over's protected data), with why.
fn data_lines(class: &str) -> (u32, &'static str) {
    match class {
        "zone.lock" => (
            4,
            "free_area list heads of the orders touched, nr_free and the zone's vmstat counters",
        ),
        "lru_lock" => (2, "the LRU list head and the lruvec's size counters"),
        "pcp" => (2, "the per-CPU list head and pcp->count"),
        "mmap_lock" => (2, "rwsem count and owner, and the VMA tree root"),
        "pcpu_lock" => (2, "the chunk slot list heads and the chunk's hints"),
        "workqueue" => (2, "the pool's worklist head and nr_active"),
        "hugetlb_lock" => (2, "the hugepage free list head and the pool counters"),
        "shmem_i_pages" => (2, "the xarray node and the mapping's counters"),
        "lru_add" | "tlb_gate" | "mmap_lock_hist" | "unmodelled" => (0, "never handed over"),
        _ => (1, "the lock's own line"),
    }
}

/// The profile of `c` as TOML text (the format of `usermm::vtime::Profile`, with
/// `[inputs.*]` and a `formula` per figure).
pub fn this_host_profile(c: &HostCalibration) -> String {
    let inputs = inputs(c);
    let values: BTreeMap<&str, f64> = inputs.iter().map(|(k, v)| (*k, v.value)).collect();
    let ev =
        |f: &str| -> f64 { r4(eval(f, &values).unwrap_or_else(|e| panic!("formula `{f}`: {e}"))) };
    let s = &c.system;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# Cost profile: this host, written by `usermm calibrate` ({}).\n\
         # Every number is an [inputs.*] entry; every figure's value is its `formula` over them.\n",
        c.date
    );
    let _ = writeln!(t, "name = \"this-host\"");
    let _ = writeln!(
        t,
        "description = {}",
        q(&format!(
            "This host as calibrated {}: {}, {} sockets x {} cores x {} threads, {} nodes, Linux {}",
            c.date,
            s.cpu_model,
            s.sockets,
            s.cores() / s.sockets.max(1),
            s.threads_per_core,
            s.nodes,
            s.kernel
        ))
    );
    let _ = writeln!(t);
    for (name, i) in &inputs {
        let _ = writeln!(t, "[inputs.{name}]");
        let _ = writeln!(t, "value = {}", num(i.value));
        let _ = writeln!(t, "unit = {}", q(i.unit));
        let _ = writeln!(t, "kind = \"{}\"", i.kind.as_str());
        let _ = writeln!(t, "source = {}\n", q(&i.source));
    }
    let _ = writeln!(t, "[topology]");
    let _ = writeln!(t, "sockets = {}", s.sockets.max(1));
    let _ = writeln!(t, "nodes = {}", s.nodes.max(1));
    let _ = writeln!(
        t,
        "cores_per_socket = {}",
        (s.cores() / s.sockets.max(1)).max(1)
    );
    let _ = writeln!(t, "threads_per_core = {}", s.threads_per_core.max(1));
    let _ = writeln!(t, "ghz = {}", num(r4(s.cpu_mhz / 1000.0).max(0.001)));
    let _ = writeln!(t, "memory_gib = {}", (s.memory_kb >> 20).max(1));
    let _ = writeln!(
        t,
        "source = {}\n",
        q(&format!(
            "what the system reports ({}): /proc/cpuinfo `{}` at {} MHz, {} online CPUs, \
             thread_siblings_list of cpu0 ({} per core), physical_package_id ({} socket(s)), \
             /sys/devices/system/node ({} node(s)), MemTotal {} kB; caches: {}",
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
                    "L{} {} {} KiB shared by {}",
                    k.level,
                    k.kind,
                    k.size_bytes >> 10,
                    k.shared_cpu_list
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    );
    let transfers = [
        ("smt_sibling", "line_transfer_ns", "no SMT sibling on this host (1 thread per core): never applied here; the measured transfer between two CPUs stands in"),
        ("same_socket", "line_transfer_ns", "the CAS ping-pong between this host's two CPUs, one-way"),
        ("other_socket", "line_transfer_ns", "one socket on this host: never applied here; the measured transfer stands in"),
    ];
    for (k, f, why) in transfers {
        let _ = writeln!(t, "[transfer.{k}]");
        let _ = writeln!(t, "ns = {}", num(ev(f)));
        let _ = writeln!(t, "formula = {}", q(f));
        let _ = writeln!(t, "source = {}\n", q(why));
    }
    let _ = writeln!(t, "[smt]");
    let _ = writeln!(
        t,
        "sibling_factor = {}",
        num(ev("smt_sibling_factor").max(1.0))
    );
    let _ = writeln!(t, "formula = \"smt_sibling_factor\"");
    let _ = writeln!(
        t,
        "source = \"assumption (see the input smt_sibling_factor)\"\n"
    );
    let _ = writeln!(t, "[wakeup]");
    let _ = writeln!(t, "ns = {}", num(ev("wakeup_ns")));
    let _ = writeln!(t, "formula = \"wakeup_ns\"");
    let _ = writeln!(t, "source = \"assumption (see the input wakeup_ns)\"\n");
    let _ = writeln!(t, "[atomic_rmw]");
    let _ = writeln!(t, "ns = {}", num(ev("lock_xadd_ns")));
    let _ = writeln!(t, "formula = \"lock_xadd_ns\"");
    let _ = writeln!(
        t,
        "source = \"an uncontended lock xadd on a local line, measured here\"\n"
    );
    for class in ENGINE_LOCK_CLASSES {
        let (f, why) = match *class {
            "tlb_gate" | "mmap_lock_hist" | "unmodelled" => (
                "0",
                "not kernel work: usermm's own instrumentation or test locks, free in the model",
            ),
            "lru_add" => (
                "local_lock_ns",
                "a local lock, no locked RMW (see the input local_lock_ns)",
            ),
            _ => (
                "lock_xadd_ns",
                "an uncontended acquire is one locked RMW on a local line: lock xadd measured here",
            ),
        };
        let (lines, lines_why) = data_lines(class);
        let _ = writeln!(t, "[locks.\"{class}\"]");
        let _ = writeln!(t, "acquire_ns = {}", num(ev(f)));
        let _ = writeln!(t, "formula = {}", q(f));
        let _ = writeln!(t, "data_lines = {lines}");
        let _ = writeln!(
            t,
            "source = {}\n",
            q(&format!(
                "{why}; data_lines (assumption): a hand-over carries {lines_why}"
            ))
        );
    }
    for cost in Cost::ALL {
        let key = cost.key();
        let fo = cost_formula(key);
        let v = ev(fo.formula).max(0.0);
        let _ = writeln!(t, "[costs.{key}]");
        if cost.bytes().is_some() {
            let _ = writeln!(t, "bytes_per_ns = {}", num(v));
        } else {
            let _ = writeln!(t, "ns = {}", num(v));
        }
        let _ = writeln!(t, "formula = {}", q(fo.formula));
        let _ = writeln!(t, "source = {}\n", q(fo.source));
    }
    t
}

/// A TOML basic string.
fn q(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A TOML float (always with a decimal point).
fn num(v: f64) -> String {
    let s = format!("{v}");
    if s.contains('.') || s.contains('e') || s.contains("inf") || s.contains("NaN") {
        s
    } else {
        format!("{s}.0")
    }
}

/// Evaluates a formula: `+ - * / ( )`, unary minus, numbers and input names.
pub fn eval(formula: &str, inputs: &BTreeMap<&str, f64>) -> Result<f64, String> {
    let toks = lex(formula)?;
    let mut p = Parser {
        toks: &toks,
        at: 0,
        inputs,
    };
    let v = p.expr()?;
    if p.at != toks.len() {
        return Err(format!("unexpected `{:?}`", toks[p.at]));
    }
    Ok(v)
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Name(String),
    Op(char),
}

fn lex(s: &str) -> Result<Vec<Tok>, String> {
    let mut out = Vec::new();
    let b: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_whitespace() {
            i += 1;
        } else if "+-*/()".contains(c) {
            out.push(Tok::Op(c));
            i += 1;
        } else if c.is_ascii_digit() || c == '.' {
            let j = (i..b.len())
                .find(|&j| !(b[j].is_ascii_digit() || b[j] == '.'))
                .unwrap_or(b.len());
            let t: String = b[i..j].iter().collect();
            out.push(Tok::Num(
                t.parse().map_err(|_| format!("bad number `{t}`"))?,
            ));
            i = j;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let j = (i..b.len())
                .find(|&j| !(b[j].is_ascii_alphanumeric() || b[j] == '_'))
                .unwrap_or(b.len());
            out.push(Tok::Name(b[i..j].iter().collect()));
            i = j;
        } else {
            return Err(format!("unexpected character `{c}`"));
        }
    }
    Ok(out)
}

struct Parser<'a> {
    toks: &'a [Tok],
    at: usize,
    inputs: &'a BTreeMap<&'a str, f64>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }

    fn expr(&mut self) -> Result<f64, String> {
        let mut v = self.term()?;
        while let Some(Tok::Op(c @ ('+' | '-'))) = self.peek().cloned() {
            self.at += 1;
            let r = self.term()?;
            v = if c == '+' { v + r } else { v - r };
        }
        Ok(v)
    }

    fn term(&mut self) -> Result<f64, String> {
        let mut v = self.unary()?;
        while let Some(Tok::Op(c @ ('*' | '/'))) = self.peek().cloned() {
            self.at += 1;
            let r = self.unary()?;
            v = if c == '*' { v * r } else { v / r };
        }
        Ok(v)
    }

    fn unary(&mut self) -> Result<f64, String> {
        if self.peek() == Some(&Tok::Op('-')) {
            self.at += 1;
            return Ok(-self.unary()?);
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<f64, String> {
        let t = self.peek().cloned().ok_or("unexpected end")?;
        self.at += 1;
        match t {
            Tok::Num(v) => Ok(v),
            Tok::Name(n) => self
                .inputs
                .get(n.as_str())
                .copied()
                .ok_or_else(|| format!("unknown input `{n}`")),
            Tok::Op('(') => {
                let v = self.expr()?;
                if self.peek() != Some(&Tok::Op(')')) {
                    return Err("missing `)`".into());
                }
                self.at += 1;
                Ok(v)
            }
            Tok::Op(c) => Err(format!("unexpected `{c}`")),
        }
    }
}
