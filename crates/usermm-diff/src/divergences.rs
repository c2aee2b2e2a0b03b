//! The known divergences between the engine and the host kernel: ONE reviewed list.
//!
//! The differential runner ([`crate::runner`]) consults [`explain`] whenever the two
//! backends disagree on an op. A disagreement that an entry here explains is reported as
//! *known* (by its id) instead of failing the test; anything else fails. Every entry names what
//! differs, why the engine does not (or cannot) follow the host, and how it is recognised. Keep
//! the recognisers narrow: they must not hide a different bug that happens to look alike.
//!
//! The second list, [`HOST_NONDETERMINISM`], names the host kernel's own non-deterministic
//! choices (a THP it could not allocate at that moment, khugepaged): a disagreement that a fresh
//! host does not repeat is accepted as a *host flake* only when one of them matches, with the
//! kernel's count of its event in `/proc/vmstat` ([`HostEvents`]); a replay agreeing alone
//! proves nothing (it hid the harness's shared loopback pipe, h48).
//!
//! Divergences that were found by the differential tests and fixed in the engine are not listed
//! here; each has a regression test in `crates/usermm/tests/address_space_diff_regressions.rs`:
//! write-only (`PROT_WRITE`) mappings readable as on x86; the map type checked after the
//! placement; `/dev/zero` offsets (`Mm::mmap`: placement, maps, merging, `EOVERFLOW`);
//! `MAP_SHARED_VALIDATE` → `EOPNOTSUPP` and `MAP_GROWSDOWN` → `EINVAL` on files; shared
//! `/dev/zero` at an offset (pgoff kept, SIGBUS past its shmem object); mprotect's
//! `VM_ACCOUNT` charge/uncharge (it decides merges); mprotect populating a locked mapping made
//! writable; `MADV_COLD`/`PAGEOUT` on locked VMAs, `MADV_WIPEONFORK`/`MADV_REMOVE` on private
//! `/dev/zero`; `MADV_POPULATE_*` errors (`EINVAL`/`ENOMEM`/`EFAULT`); `MADV_MERGEABLE` as a
//! VMA flag; mlock populating only after the whole range was locked (PROT_NONE → `ENOMEM`);
//! a VMA boundary inside a THP splitting its PMD; the huge-zero read fault preparing the
//! anon_vma; `MADV_FREE`/`COLD`/`PAGEOUT` over part of a THP splitting it with zero-filled
//! subpages going to the zero page; stacks (`MAP_GROWSDOWN`) growing on faults below them.
//!
//! Host configurations the suite adapts to instead of listing: the THP mode and
//! `vm.max_map_count` are read from the host ([`crate::engine_backend::host_like_config`]);
//! generated sequences use `MAP_GROWSDOWN` only under the engine's 8 MiB `RLIMIT_STACK` and
//! mlock only where `RLIMIT_MEMLOCK` cannot interfere; `PROT_EXEC`-only protections are not
//! generated (see `x86-pku-exec-only`). The suite is calibrated on Linux 6.18; a much older
//! 6.x kernel lacks some of the behaviour above (e.g. the zero-page remap on THP split, 6.12).

use crate::ops::{MapsLine, Op, OpResult, HPAGE_SIZE, PAGE_SIZE};

/// What the recogniser of a known divergence may look at.
#[derive(Debug, Clone, Copy)]
pub struct DivContext<'a> {
    /// The op on which the backends disagreed.
    pub op: &'a Op,
    pub host: &'a OpResult,
    pub engine: &'a OpResult,
    /// The arena maps lines of each backend *after* the op (normalised: no dev/inode).
    pub host_maps: &'a [MapsLine],
    pub engine_maps: &'a [MapsLine],
    /// Every op executed so far, the disagreeing one last.
    pub history: &'a [Op],
}

/// One reviewed, explained divergence.
#[derive(Debug)]
pub struct KnownDivergence {
    /// A stable short name, used in reports.
    pub id: &'static str,
    /// What differs and why it is accepted.
    pub reason: &'static str,
    /// Does this entry explain the disagreement?
    pub matches: fn(&DivContext<'_>) -> bool,
}

/// The list. Each entry is reviewed; add one only with a reason a reviewer can check.
pub static KNOWN: &[KnownDivergence] = &[
    KnownDivergence {
        id: "x86-pku-exec-only",
        reason: "On a CPU with protection keys (PKU/OSPKE), Linux gives a PROT_EXEC-only mapping \
                 the execute-only pkey (arch_override_mprotect_pkey / execute_only_pkey), so \
                 data loads from it fault even in copy_from_user. The engine models an x86 CPU \
                 without PKU, where executable pages are readable. Recognised: a probe or read \
                 that the host refuses and the engine serves, on a page the engine maps --x.",
        matches: pku_exec_only,
    },
    KnownDivergence {
        id: "pte-mapped-thp-split-remaps-zero-subpages",
        reason: "After a THP's PMD is split (partial munmap/mprotect/MADV_DONTNEED, a VMA \
                 boundary inside it), Linux keeps the 2 MiB folio whole, PTE-mapped, until \
                 something splits the folio: MADV_FREE, MADV_COLD or MADV_PAGEOUT covering part \
                 of it does, and since 6.12 that split maps every zero-filled subpage to the \
                 shared zero page (RMP_USE_SHARED_ZEROPAGE), out of Rss, so later writes there \
                 fault again. The engine splits the folio into order-0 pages at the PMD split \
                 (huge_memory.rs, split_huge_pmd) and no longer knows the folio, so it keeps those \
                 pages. (A THP still PMD-mapped when the advice comes is split like Linux does: \
                 huge_memory.rs, split_thp_remap_zero.) Recognised: a Counters mismatch with host Rss \
                 and AnonHugePages not above the engine's and host faults not below, after one \
                 of those advices (its range may be whole 2 MiB blocks: a VMA boundary inside \
                 the block still makes the per-VMA range partial).",
        matches: thp_split_zero_subpages,
    },
    KnownDivergence {
        id: "shmem-fault-around",
        reason: "A read fault in a shared anonymous (shmem) mapping runs fault-around on Linux \
                 (do_fault_around / filemap_map_pages, fault_around_bytes = 64 KiB): pages of \
                 the object already in its cache near the fault are mapped too, so Rss is higher \
                 and later accesses to them take no fault. The engine has no fault-around \
                 (mm/fault/), and its shmem object (shmem.rs, outside what this suite may change) \
                 has no lookup-without-allocating to build one on. Data and accessibility are \
                 unaffected. Recognised: a Counters mismatch with host Rss >= engine Rss and host \
                 faults <= engine faults while a shared mapping is in the arena.",
        matches: shmem_fault_around,
    },
    KnownDivergence {
        id: "pt-reclaim-after-dontneed",
        reason: "Linux 6.14+ (CONFIG_PT_RECLAIM) frees a PTE table that MADV_DONTNEED left \
                 empty when the zap covered its whole 2 MiB (zap_pte_range → try_to_free_pte), \
                 so the PMD is none again and the next fault in a THP-eligible VMA maps a THP \
                 or the huge zero page. The engine keeps the empty table and maps 4 KiB pages \
                 there. Not modelled on purpose: Linux does it under the mmap read lock relying \
                 on RCU-freed page tables and pmd_same re-checks in the fault path, which the \
                 engine's fault path (mm/fault/) does not have, and the munmap-test experiment \
                 runs MADV_DONTNEED concurrently with faults. Recognised: a Counters mismatch \
                 with more AnonHugePages or fewer faults on the host, after a MADV_DONTNEED \
                 whose range holds a whole 2 MiB-aligned block.",
        matches: pt_reclaim,
    },
    KnownDivergence {
        id: "mremap-maymove-placement",
        reason: "mremap with MREMAP_MAYMOVE and without MREMAP_FIXED puts the moved mapping where \
                 get_unmapped_area's top-down search finds room, outside the arena (both \
                 backends then unmap it and report it Misplaced), and the host process's address \
                 space there (its libraries, heap and stacks) is not the engine's: each places it \
                 as the kernel would, at a different address. Whether a 2 MiB-aligned block lies \
                 inside the new range then differs, and with it whether populating the grown part \
                 of a locked VM_HUGEPAGE mapping maps a THP (one fault) or 4 KiB pages (one \
                 each). Found by diff_generated_b, seed 0x51e5031c92276e27: the engine's range \
                 began 0x1f0000 into its 2 MiB block (a whole block inside, 16 faults), the \
                 host's 0xd2000 into it (none, 527). Recognised: a Counters mismatch after such a \
                 growing mremap of a range mlock had locked, with the arena's Rss and \
                 AnonHugePages equal and the host's faults above the engine's by at most 511 a \
                 move.",
        matches: mremap_maymove_placement,
    },
];

fn mremap_maymove_placement(c: &DivContext<'_>) -> bool {
    let (OpResult::Counters(h), OpResult::Counters(e)) = (c.host, c.engine) else {
        return false;
    };
    let moves = c
        .history
        .iter()
        .filter(|op| {
            matches!(op, Op::Mremap(m)
                if m.flags & crate::ops::MREMAP_MAYMOVE != 0
                    && m.flags & crate::ops::MREMAP_FIXED == 0
                    && m.new_len > m.old_len)
        })
        .count() as u64;
    let locked = c.history.iter().any(|op| matches!(op, Op::Mlock { .. }));
    moves > 0
        && locked
        && h.rss_kb == e.rss_kb
        && h.anon_huge_kb == e.anon_huge_kb
        && h.minor_faults > e.minor_faults
        && h.minor_faults - e.minor_faults <= 511 * moves
}

fn pt_reclaim(c: &DivContext<'_>) -> bool {
    let (OpResult::Counters(h), OpResult::Counters(e)) = (c.host, c.engine) else {
        return false;
    };
    let whole_block_zapped = c.history.iter().any(|op| match *op {
        Op::Madvise {
            addr,
            len,
            advice: libc::MADV_DONTNEED,
        } => {
            let first = addr.div_ceil(HPAGE_SIZE) * HPAGE_SIZE;
            addr.checked_add(len)
                .is_some_and(|end| first.checked_add(HPAGE_SIZE).is_some_and(|b| b <= end))
        }
        _ => false,
    });
    whole_block_zapped
        && (h.anon_huge_kb > e.anon_huge_kb || h.minor_faults < e.minor_faults)
        && h.minor_faults <= e.minor_faults
}

fn shmem_fault_around(c: &DivContext<'_>) -> bool {
    let (OpResult::Counters(h), OpResult::Counters(e)) = (c.host, c.engine) else {
        return false;
    };
    let shared = |l: &[MapsLine]| l.iter().any(|l| l.perms.ends_with('s'));
    (shared(c.host_maps)
        || c.history
            .iter()
            .any(|op| matches!(op, Op::Mmap(a) if a.flags & 3 == 1)))
        && h.rss_kb >= e.rss_kb
        && h.minor_faults <= e.minor_faults
        && h.anon_huge_kb == e.anon_huge_kb
}

/// The engine's maps line containing `addr`.
fn line_at(lines: &[MapsLine], addr: u64) -> Option<&MapsLine> {
    lines.iter().find(|l| l.start <= addr && addr < l.end)
}

fn pku_exec_only(c: &DivContext<'_>) -> bool {
    let exec_only = |addr: u64| {
        line_at(c.engine_maps, addr & !(PAGE_SIZE - 1)).is_some_and(|l| l.perms.starts_with("--x"))
    };
    match (c.op, c.host, c.engine) {
        (Op::Probe { .. }, OpResult::Probe(h), OpResult::Probe(e)) => {
            h.len() == e.len()
                && h.iter().zip(e).all(|(h, e)| {
                    h == e || (h.addr == e.addr && !h.readable && e.readable && exec_only(h.addr))
                })
        }
        (Op::Read { .. }, OpResult::Fault { addr }, OpResult::Data(_)) => exec_only(*addr),
        (Op::Read { .. }, OpResult::Fault { addr: h }, OpResult::Fault { addr: e }) => {
            h < e && exec_only(*h)
        }
        _ => false,
    }
}

fn thp_split_zero_subpages(c: &DivContext<'_>) -> bool {
    let (OpResult::Counters(h), OpResult::Counters(e)) = (c.host, c.engine) else {
        return false;
    };
    let partial_lru_advice = c.history.iter().any(|op| {
        matches!(op, Op::Madvise { advice, .. }
            if matches!(*advice, libc::MADV_FREE | libc::MADV_COLD | libc::MADV_PAGEOUT))
    });
    partial_lru_advice
        && h.minor_faults >= e.minor_faults
        && h.rss_kb <= e.rss_kb
        && h.anon_huge_kb <= e.anon_huge_kb
}

/// The known divergence that explains `ctx`, if any.
pub fn explain(ctx: &DivContext<'_>) -> Option<&'static KnownDivergence> {
    KNOWN.iter().find(|k| (k.matches)(ctx))
}

// ---------------------------------------------------------------------------------------------
// Host non-determinism: the named causes of a host flake
// ---------------------------------------------------------------------------------------------

/// The `/proc/vmstat` events that witness the host kernel's non-deterministic choices, counted
/// system-wide (the kernel keeps no per-process count of them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostEvents {
    /// `thp_fault_fallback` + `thp_fault_fallback_charge`: a fault (or populate) in a
    /// THP-eligible range that could not get a 2 MiB folio (or the huge zero page) and fell back
    /// to 4 KiB pages.
    pub thp_fault_fallback: u64,
    /// `thp_collapse_alloc`: khugepaged (or `MADV_COLLAPSE`, which the suite never issues)
    /// collapsed a 2 MiB range into a THP.
    pub thp_collapse_alloc: u64,
}

impl HostEvents {
    /// This host's counts now (zeros where `/proc/vmstat` lacks a counter).
    pub fn read() -> HostEvents {
        let v = usermm_host::task::vmstat(&[
            "thp_fault_fallback",
            "thp_fault_fallback_charge",
            "thp_collapse_alloc",
        ]);
        HostEvents {
            thp_fault_fallback: v[0] + v[1],
            thp_collapse_alloc: v[2],
        }
    }

    /// The events counted between `before` and `self`.
    pub fn since(&self, before: &HostEvents) -> HostEvents {
        HostEvents {
            thp_fault_fallback: self
                .thp_fault_fallback
                .saturating_sub(before.thp_fault_fallback),
            thp_collapse_alloc: self
                .thp_collapse_alloc
                .saturating_sub(before.thp_collapse_alloc),
        }
    }
}

/// One named cause of host non-determinism: a choice the kernel makes from its state at the
/// moment (not from the op sequence), which a fresh host need not repeat.
#[derive(Debug)]
pub struct HostCause {
    /// A stable short name, used in reports.
    pub id: &'static str,
    /// The kernel's reason, and how the cause is recognised.
    pub reason: &'static str,
    /// Does this cause explain the disagreement, given the events counted while the sequence
    /// ran on the first host?
    pub matches: fn(&DivContext<'_>, &HostEvents) -> bool,
}

/// The named causes. The runner ([`crate::runner`]) accepts a disagreement as a host flake only
/// when a fresh host agrees with the engine *and* one of these matches, each of which requires
/// the kernel's own count of the event; a disagreement that a fresh host does not repeat but no
/// cause explains fails like any other (it was a race of the harness, h48's shared loopback
/// pipe, until proven otherwise). The counts are system-wide, so another process's fallback or
/// collapse in the same window counts too; the direction each cause demands of the counters
/// keeps that from explaining anything else.
///
/// What was seen (h50, 2026-11-29; seeds 0x5001..0x5006 at `USERMM_TEST_SCALE=2`, the four
/// generated tests, 24 000 sequences): on the host backend before the loopback fix, 5 host
/// flakes — 4 the shared pipe's race (one byte at a page start in a read after a fork) and 1
/// khugepaged collapse (`generated_a` sequence 368: between two back-to-back Counters ops the
/// host's 2 MiB block, PTE-mapped since a 4-page MADV_DONTNEED, became PMD-mapped again with
/// those 4 pages, +16 kB Rss, no fault; `thp_collapse_alloc` grew from 65 to 73 over that run);
/// on the fixed backend, none (and no collapse counted). 1 500 replays of that sequence on the
/// fixed backend gave 1 collapse again. No THP fault fallback was counted on this host since
/// boot; that cause is listed because it is the kernel's documented behaviour on a fragmented
/// host, which a CI runner may be.
pub static HOST_NONDETERMINISM: &[HostCause] = &[
    HostCause {
        id: "thp-fault-fallback",
        reason: "A fault in a THP-eligible range allocates a 2 MiB folio \
                 (do_huge_pmd_anonymous_page → vma_alloc_anon_folio_pmd); when the host has no \
                 free or compactable order-9 block at that moment, or the memcg charge fails, \
                 the kernel counts THP_FAULT_FALLBACK(_CHARGE) and maps 4 KiB pages instead \
                 (VM_FAULT_FALLBACK). The engine's machine always has the block. Recognised: a \
                 Counters mismatch with host AnonHugePages below the engine's, host Rss not \
                 above and host faults not below, while thp_fault_fallback grew.",
        matches: thp_fault_fallback,
    },
    HostCause {
        id: "khugepaged-collapse",
        reason: "khugepaged scans the mms that have a VM_HUGEPAGE VMA (khugepaged_enter_vma) \
                 every scan_sleep_millisecs, on its own thread, and collapses a 2 MiB range with \
                 at most max_ptes_none empty PTEs into a THP (collapse_huge_page, counted as \
                 THP_COLLAPSE_ALLOC): the process sees more Rss and AnonHugePages and takes no \
                 faults there, whenever the scan happens to reach it. The engine has no \
                 khugepaged. Recognised: a Counters mismatch with host AnonHugePages above the \
                 engine's, host Rss not below and host faults not above, while \
                 thp_collapse_alloc grew.",
        matches: khugepaged_collapse,
    },
];

fn thp_fault_fallback(c: &DivContext<'_>, ev: &HostEvents) -> bool {
    let (OpResult::Counters(h), OpResult::Counters(e)) = (c.host, c.engine) else {
        return false;
    };
    ev.thp_fault_fallback > 0
        && h.anon_huge_kb < e.anon_huge_kb
        && h.rss_kb <= e.rss_kb
        && h.minor_faults >= e.minor_faults
}

fn khugepaged_collapse(c: &DivContext<'_>, ev: &HostEvents) -> bool {
    let (OpResult::Counters(h), OpResult::Counters(e)) = (c.host, c.engine) else {
        return false;
    };
    ev.thp_collapse_alloc > 0
        && h.anon_huge_kb > e.anon_huge_kb
        && h.rss_kb >= e.rss_kb
        && h.minor_faults <= e.minor_faults
}

/// The named host cause that explains `ctx`, given the events counted while it ran, if any.
pub fn host_cause(ctx: &DivContext<'_>, events: &HostEvents) -> Option<&'static HostCause> {
    HOST_NONDETERMINISM
        .iter()
        .find(|k| (k.matches)(ctx, events))
}
