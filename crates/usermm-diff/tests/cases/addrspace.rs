//! Fixed cases for fork, mremap and brk, from the suites `docs/testing.md` names:
//! * LTP `mremap01`–`05` (grow, EINVAL/EFAULT/ENOMEM, `MREMAP_FIXED`), `brk01`/`brk02`,
//!   `madvise10` (`MADV_WIPEONFORK`/`MADV_KEEPONFORK` across fork);
//! * gVisor `mremap.cc` (in place / may move / fixed × shrink / grow / across VMAs),
//!   `brk.cc` (the old break on failure), `fork.cc` (private memory copy-on-write, shared
//!   memory shared), `madvise.cc` (`MADV_DONTFORK`);
//! * the selftests' `mremap_dontunmap.c` and `merge.c` (`forked_source_vma`,
//!   `forked_target_vma`);
//! * the errno oracle of `docs/testing.md` ("the errno oracle") (mremap and brk rows).
//!
//! Their semantics are re-expressed as ops; no test code was copied.

use libc::{MADV_DONTFORK, MADV_KEEPONFORK, MADV_WIPEONFORK};
use usermm_diff::ops::*;

use super::{a, case, Case, Expect, P};

const RW: u32 = PROT_READ | PROT_WRITE;
const R: u32 = PROT_READ;
const MAYMOVE: u32 = MREMAP_MAYMOVE;
const FIXED: u32 = MREMAP_MAYMOVE | MREMAP_FIXED;
const DONTUNMAP: u32 = MREMAP_MAYMOVE | MREMAP_DONTUNMAP;

fn mremap(addr: u64, old_len: u64, new_len: u64, flags: u32, new_addr: u64) -> Op {
    Op::Mremap(MremapArgs {
        addr,
        old_len,
        new_len,
        flags,
        new_addr,
    })
}

fn mremap_cases() -> Vec<Case> {
    vec![
        case("mremap_einval", "LTP mremap02/05; B.9 mremap", |c| {
            c.map(a(0), 4, RW);
            c.op(mremap(a(0) + 1, P, 2 * P, MAYMOVE, 0)).err(EINVAL);
            c.op(mremap(a(0), P, 0, MAYMOVE, 0)).err(EINVAL);
            c.op(mremap(a(0), P, P, 0x80, 0)).err(EINVAL);
            c.op(mremap(a(0), P, P, MREMAP_FIXED, a(64))).err(EINVAL);
            c.op(mremap(a(0), P, P, FIXED, a(64) + 1)).err(EINVAL);
            c.op(mremap(a(0), 2 * P, 2 * P, FIXED, a(1))).err(EINVAL);
            c.op(mremap(a(0), P, 2 * P, DONTUNMAP, 0)).err(EINVAL);
            c.op(mremap(a(0), P, P, MREMAP_DONTUNMAP, 0)).err(EINVAL);
            // old_len 0 duplicates only shared mappings.
            c.op(mremap(a(0), 0, P, MAYMOVE, 0)).err(EINVAL);
            c.maps(&[(a(0), a(4), "rw-p")]);
        }),
        case("mremap_efault", "LTP mremap03; B.9 mremap", |c| {
            c.map(a(0), 2, RW);
            c.map(a(2), 2, R);
            c.op(mremap(a(8), P, 2 * P, MAYMOVE, 0)).err(EFAULT);
            // Growing a range that spans two VMAs.
            c.op(mremap(a(0), 4 * P, 8 * P, MAYMOVE, 0)).err(EFAULT);
            c.op(mremap(a(0), 4 * P, 6 * P, FIXED, a(64))).err(EFAULT);
            c.op(mremap(
                a(1),
                2 * P,
                2 * P,
                MAYMOVE | MREMAP_DONTUNMAP,
                a(64),
            ))
            .err(EFAULT);
            // A range starting in a gap.
            c.op(mremap(a(4) - 2 * P + 8 * P, 4 * P, 4 * P, FIXED, a(64)))
                .err(EFAULT);
            c.maps(&[(a(0), a(2), "rw-p"), (a(2), a(4), "r--p")]);
        }),
        case("mremap_fixed_moves_several_vmas", "6.17 remap_move", |c| {
            c.map(a(0), 2, RW);
            c.map(a(2), 2, R);
            c.map(a(6), 2, RW);
            c.write(a(0), 2 * P, 0x37).ok(2 * P);
            // Every VMA in the range moves, the gap between them kept; a gap at the end too.
            c.op(mremap(a(0), 10 * P, 10 * P, FIXED, a(64))).ok(a(64));
            c.maps(&[
                (a(64), a(66), "rw-p"),
                (a(66), a(68), "r--p"),
                (a(70), a(72), "rw-p"),
            ]);
            c.read(a(64), 2 * P).expect(Expect::Bytes(0x37));
            // /dev/zero places its own mappings: it moves only alone.
            c.map_zero(a(80), 2, RW, 0);
            c.map(a(82), 2, RW);
            c.op(mremap(a(80), 4 * P, 4 * P, FIXED, a(96))).err(EFAULT);
            c.op(mremap(a(80), 2 * P, 2 * P, FIXED, a(96))).ok(a(96));
        }),
        case("mremap_enomem_in_place", "LTP mremap04; B.9 mremap", |c| {
            c.map(a(0), 2, RW);
            c.map(a(2), 1, R);
            c.op(mremap(a(0), 2 * P, 4 * P, 0, 0)).err(ENOMEM);
            c.maps(&[(a(0), a(2), "rw-p"), (a(2), a(3), "r--p")]);
        }),
        case(
            "mremap_grow_in_place",
            "LTP mremap01; gVisor InPlace_Expand",
            |c| {
                c.map(a(0), 2, RW);
                c.write(a(0), 2 * P, 0x31).ok(2 * P);
                c.op(mremap(a(0), 2 * P, 6 * P, 0, 0)).ok(a(0));
                c.maps(&[(a(0), a(6), "rw-p")]);
                c.read(a(0), 2 * P).expect(Expect::Bytes(0x31));
                c.read(a(2), 4 * P).expect(Expect::Bytes(0));
                // Growing into a compatible neighbour merges with it.
                c.map(a(8), 2, RW);
                c.op(mremap(a(0), 6 * P, 8 * P, 0, 0)).ok(a(0));
                c.maps(&[(a(0), a(10), "rw-p")]);
            },
        ),
        case("mremap_shrink", "gVisor InPlace_Shrink; B.9 mremap", |c| {
            c.map(a(0), 6, RW);
            c.write(a(0), 6 * P, 0x32).ok(6 * P);
            c.op(mremap(a(0), 6 * P, 2 * P, 0, 0)).ok(a(0));
            c.maps(&[(a(0), a(2), "rw-p")]);
            c.read(a(2), 1).expect(Expect::Fault(a(2)));
            // A shrink unmaps the tail even when it spans VMAs and holes.
            c.map(a(4), 2, R);
            c.op(mremap(a(0), 8 * P, P, 0, 0)).ok(a(0));
            c.maps(&[(a(0), a(1), "rw-p")]);
            c.counters(None, Some(4), Some(0));
        }),
        case(
            "mremap_fixed_moves_and_unmaps_target",
            "LTP mremap05; gVisor Fixed",
            |c| {
                c.map(a(0), 4, RW);
                c.map(a(32), 4, R);
                c.write(a(0), 4 * P, 0x33).ok(4 * P);
                c.op(mremap(a(0), 4 * P, 4 * P, FIXED, a(32))).ok(a(32));
                c.maps(&[(a(32), a(36), "rw-p")]);
                c.read(a(32), 4 * P).expect(Expect::Bytes(0x33));
                c.read(a(0), 1).expect(Expect::Fault(a(0)));
                // Fixed with a shrink and with a grow.
                c.op(mremap(a(32), 4 * P, 2 * P, FIXED, a(64))).ok(a(64));
                c.op(mremap(a(64), 2 * P, 6 * P, FIXED, a(96))).ok(a(96));
                c.maps(&[(a(96), a(102), "rw-p")]);
                c.read(a(96), 2 * P).expect(Expect::Bytes(0x33));
                c.read(a(98), 4 * P).expect(Expect::Bytes(0));
                c.counters(None, Some(8), Some(0));
            },
        ),
        case(
            "mremap_move_part_of_a_vma",
            "gVisor MayMove_Partial; selftests mremap_test",
            |c| {
                c.map(a(0), 8, RW);
                c.write(a(0), 8 * P, 0x34).ok(8 * P);
                c.op(mremap(a(2), 2 * P, 2 * P, FIXED, a(40))).ok(a(40));
                c.maps(&[
                    (a(0), a(2), "rw-p"),
                    (a(4), a(8), "rw-p"),
                    (a(40), a(42), "rw-p"),
                ]);
                // Moving it back: the pgoff is the old one, so it merges again.
                c.op(mremap(a(40), 2 * P, 2 * P, FIXED, a(2))).ok(a(2));
                c.maps(&[(a(0), a(8), "rw-p")]);
                c.read(a(0), 8 * P).expect(Expect::Bytes(0x34));
            },
        ),
        case(
            "mremap_unfaulted_moves_merge",
            "copy_vma: anonymous without anon_vma",
            |c| {
                c.map(a(0), 4, RW);
                c.map(a(16), 4, RW);
                c.op(mremap(a(16), 4 * P, 4 * P, FIXED, a(4))).ok(a(4));
                c.maps(&[(a(0), a(8), "rw-p")]);
            },
        ),
        case("mremap_dontunmap", "selftests mremap_dontunmap", |c| {
            c.map(a(0), 4, RW);
            c.write(a(0), 4 * P, 0x35).ok(4 * P);
            c.op(mremap(a(0), 4 * P, 4 * P, DONTUNMAP | MREMAP_FIXED, a(32)))
                .ok(a(32));
            c.maps(&[(a(0), a(4), "rw-p"), (a(32), a(36), "rw-p")]);
            c.read(a(0), 4 * P).expect(Expect::Bytes(0));
            c.read(a(32), 4 * P).expect(Expect::Bytes(0x35));
            // With a hint inside the arena and no FIXED.
            c.op(mremap(a(32), 2 * P, 2 * P, DONTUNMAP, a(64)))
                .ok(a(64));
            c.read(a(64), 2 * P).expect(Expect::Bytes(0x35));
            c.read(a(32), 2 * P).expect(Expect::Bytes(0));
        }),
        case("mremap_may_move_elsewhere", "gVisor MayMove_Expand", |c| {
            c.map(a(0), 2, RW);
            c.map(a(2), 1, R);
            // The kernel chooses the place (outside the arena): misplaced on both sides.
            c.op(mremap(a(0), 2 * P, 4 * P, MAYMOVE, 0));
            c.maps(&[(a(2), a(3), "r--p")]);
        }),
        case("mremap_thp_moves_whole", "move_huge_pmd", |c| {
            c.op(Op::mmap_anon_at(a(0) + (4 << 20), 4 << 20, RW))
                .ok(a(0) + (4 << 20));
            c.madvise(a(0) + (4 << 20), 4 << 20, libc::MADV_HUGEPAGE)
                .ok(0);
            c.write(a(0) + (4 << 20), 64, 0x36).ok(64);
            c.op(mremap(
                a(0) + (4 << 20),
                2 << 20,
                2 << 20,
                FIXED,
                a(0) + (16 << 20),
            ))
            .ok(a(0) + (16 << 20));
            c.read(a(0) + (16 << 20), 64).expect(Expect::Bytes(0x36));
            c.counters(Some(1), None, None);
        }),
    ]
}

fn brk_cases() -> Vec<Case> {
    vec![
        case("brk_grow_shrink", "LTP brk01; B.9 brk", |c| {
            c.op(Op::Brk { off: BRK_QUERY }).ok(0);
            c.op(Op::Brk { off: 1 }).ok(1);
            c.op(Op::Brk { off: 4 * P }).ok(4 * P);
            c.op(Op::Brk { off: 2 * P + 5 }).ok(2 * P + 5);
            c.op(Op::Brk { off: BRK_QUERY }).ok(2 * P + 5);
            c.op(Op::Brk { off: 0 }).ok(0);
        }),
        case("brk_new_vma_and_back", "LTP brk02; gVisor brk.cc", |c| {
            c.op(Op::Brk { off: 2 * P }).ok(2 * P);
            c.op(Op::Brk { off: 64 * P }).ok(64 * P);
            c.op(Op::Brk { off: P }).ok(P);
            // brk(0) is below start_brk: the current break comes back.
            c.op(Op::Brk { off: BRK_QUERY }).ok(P);
            c.op(Op::Brk { off: 0 }).ok(0);
        }),
    ]
}

fn fork_cases() -> Vec<Case> {
    vec![
        case("fork_private_cow", "gVisor fork.cc PrivateMemory", |c| {
            c.map(a(0), 4, RW);
            c.write(a(0), 4 * P, 0x41).ok(4 * P);
            c.op(Op::Fork).ok(1);
            c.op(Op::Switch { proc: 1 }).ok(0);
            c.maps(&[(a(0), a(4), "rw-p")]);
            c.read(a(0), 4 * P).expect(Expect::Bytes(0x41));
            c.write(a(1), P, 0x42).ok(P);
            c.counters(Some(1), Some(16), Some(0));
            c.op(Op::Switch { proc: 0 }).ok(0);
            c.read(a(1), P).expect(Expect::Bytes(0x41));
            c.write(a(2), P, 0x43).ok(P);
            c.op(Op::Switch { proc: 1 }).ok(0);
            c.read(a(2), P).expect(Expect::Bytes(0x41));
            c.read(a(1), P).expect(Expect::Bytes(0x42));
        }),
        case("fork_shared_memory", "gVisor fork.cc SharedMemory", |c| {
            c.op(Op::Mmap(MmapArgs {
                addr: a(0),
                len: 2 * P,
                prot: RW,
                flags: MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                source: MapSource::Anon,
                offset: 0,
            }))
            .ok(a(0));
            c.write(a(0), P, 0x44).ok(P);
            c.op(Op::Fork).ok(1);
            c.op(Op::Switch { proc: 1 }).ok(0);
            c.read(a(0), P).expect(Expect::Bytes(0x44));
            c.write(a(1), P, 0x45).ok(P);
            c.op(Op::Switch { proc: 0 }).ok(0);
            c.read(a(1), P).expect(Expect::Bytes(0x45));
        }),
        case(
            "fork_dontfork",
            "gVisor madvise.cc DontforkShared; LTP madvise",
            |c| {
                c.map(a(0), 4, RW);
                c.write(a(0), 4 * P, 0x46).ok(4 * P);
                c.madvise(a(2), 2 * P, MADV_DONTFORK).ok(0);
                c.op(Op::Fork).ok(1);
                c.op(Op::Switch { proc: 1 }).ok(0);
                c.maps(&[(a(0), a(2), "rw-p")]);
                c.read(a(2), 1).expect(Expect::Fault(a(2)));
            },
        ),
        case("fork_wipeonfork", "LTP madvise10", |c| {
            c.map(a(0), 4, RW);
            c.write(a(0), 4 * P, 0x47).ok(4 * P);
            c.madvise(a(0), 2 * P, MADV_WIPEONFORK).ok(0);
            c.op(Op::Fork).ok(1);
            c.op(Op::Switch { proc: 1 }).ok(0);
            c.read(a(0), 2 * P).expect(Expect::Bytes(0));
            c.read(a(2), 2 * P).expect(Expect::Bytes(0x47));
            c.op(Op::Exit).ok(0);
            c.madvise(a(0), 2 * P, MADV_KEEPONFORK).ok(0);
            c.op(Op::Fork).ok(1);
            c.op(Op::Switch { proc: 1 }).ok(0);
            c.read(a(0), 2 * P).expect(Expect::Bytes(0x47));
        }),
        case("fork_exit_parent_first", "exit of either side", |c| {
            c.map(a(0), 4, RW);
            c.write(a(0), 4 * P, 0x48).ok(4 * P);
            c.op(Op::Fork).ok(1);
            c.op(Op::Exit).ok(1);
            c.read(a(0), 4 * P).expect(Expect::Bytes(0x48));
            // Every page is the child's alone now: writes still fault (read-only PTEs).
            c.write(a(0), 4 * P, 0x49).ok(4 * P);
            c.counters(Some(4), Some(16), Some(0));
            c.op(Op::Exit).err(ESRCH);
            c.op(Op::Switch { proc: 0 }).err(ESRCH);
            c.op(Op::Fork).ok(0);
            c.op(Op::Fork).err(EAGAIN);
        }),
        case(
            "fork_forked_vma_merges",
            "selftests merge.c forked_source/target_vma",
            |c| {
                c.map(a(0), 4, RW);
                c.write(a(0), P, 0x4a).ok(P);
                c.op(Op::Fork).ok(1);
                c.op(Op::Switch { proc: 1 }).ok(0);
                // A new neighbour does not merge with the forked, faulted VMA...
                c.map(a(4), 2, RW);
                c.maps(&[(a(0), a(4), "rw-p"), (a(4), a(6), "rw-p")]);
                // ...but its own pieces re-merge (one anon_vma).
                c.mprotect(a(1), P, R).ok(0);
                c.mprotect(a(1), P, RW).ok(0);
                c.maps(&[(a(0), a(4), "rw-p"), (a(4), a(6), "rw-p")]);
                c.op(Op::Switch { proc: 0 }).ok(0);
                c.map(a(4), 2, RW);
                c.maps(&[(a(0), a(6), "rw-p")]);
            },
        ),
        case("fork_mremap_in_child", "fork + mremap", |c| {
            c.map(a(0), 4, RW);
            c.write(a(0), 4 * P, 0x4b).ok(4 * P);
            c.op(Op::Fork).ok(1);
            c.op(Op::Switch { proc: 1 }).ok(0);
            c.op(mremap(a(0), 4 * P, 8 * P, FIXED, a(64))).ok(a(64));
            c.write(a(64), P, 0x4c).ok(P);
            c.op(Op::Switch { proc: 0 }).ok(0);
            c.read(a(0), 4 * P).expect(Expect::Bytes(0x4b));
            c.op(Op::Switch { proc: 1 }).ok(0);
            c.read(a(65), 3 * P).expect(Expect::Bytes(0x4b));
        }),
        case("fork_thp_cow", "selftests cow.c (THP, fork)", |c| {
            let b = a(0) + (8 << 20);
            c.op(Op::mmap_anon_at(b, 4 << 20, RW)).ok(b);
            c.madvise(b, 4 << 20, libc::MADV_HUGEPAGE).ok(0);
            c.write(b, 64, 0x4d).ok(64);
            c.read(b + (2 << 20), 64);
            c.op(Op::Fork).ok(1);
            c.op(Op::Switch { proc: 1 }).ok(0);
            c.write(b + 8 * P, 64, 0x4e).ok(64);
            c.read(b, 64).expect(Expect::Bytes(0x4d));
            c.write(b + (2 << 20), 64, 0x4f).ok(64);
            c.op(Op::Switch { proc: 0 }).ok(0);
            c.read(b + 8 * P, 64).expect(Expect::Bytes(0));
            c.read(b + (2 << 20), 64).expect(Expect::Bytes(0));
            c.write(b + 16 * P, 64, 0x50).ok(64);
        }),
        // A THP that fork shared and the child let go of is not PageAnonExclusive again until
        // a write fault reuses it: a split by mprotect gives its subpages read-only PTEs that
        // mprotect(PROT_WRITE) may not make writable, so the two pages written after it fault
        // (the engine once took the counts for exclusivity and wrote without a fault; found by
        // diff_generated_c, seed 0xd545ad92f88a5ebc).
        case(
            "fork_exit_thp_split_mprotect",
            "generated_c, minimised",
            |c| {
                let b = a(0) + (16 << 20);
                c.op(Op::mmap_anon_at(b, 4 << 20, RW)).ok(b);
                c.madvise(b, 4 << 20, libc::MADV_HUGEPAGE).ok(0);
                c.write(b, 4096, 0x51).ok(4096);
                c.op(Op::Fork).ok(1);
                c.op(Op::Exit).ok(1);
                c.mprotect(b + 14 * P, 4 << 20, libc::PROT_WRITE as u32);
                c.counters(None, None, None);
                c.write(b + 0xa6_02e, 5674, 0x52).ok(5674);
                c.counters(Some(2), None, None);
            },
        ),
        // What diff_generated_b, seed 0x43f528565c8e08bd (its sequence 48), does to a THP area:
        // one write, a fork and the parent's exit, then a fork right before a 2 MiB read. Every
        // byte no op wrote is 0, on any THP setting. The host once returned a 0x7f at the start
        // of a page there (about 3 reads in 100): the new process's rewarm went through the
        // loopback pipe the forking process was reading through (usermm-host, backend/child.rs;
        // the host test host_fork_then_read_gets_only_its_own_bytes holds the fix).
        case(
            "fork_exit_fork_read_thp_area",
            "generated_b, seed 0x43f528565c8e08bd",
            |c| {
                let b = a(0) + (32 << 20);
                c.op(Op::mmap_anon_at(b, 4 << 20, RW)).ok(b);
                c.madvise(b, 4 << 20, libc::MADV_HUGEPAGE).ok(0);
                c.write(b + 0x8_23b8, 4 * P, 0x53).ok(4 * P);
                c.op(Op::Fork).ok(1);
                c.op(Op::Exit).ok(1);
                c.read(b + 0x364b, P).expect(Expect::Bytes(0));
                c.op(Op::Fork).ok(0);
                let mut want = vec![0u8; 2 << 20];
                want[0x8_1bd3..0x8_1bd3 + 4 * P as usize].fill(0x53);
                c.read(b + 0x7e5, 2 << 20).expect(Expect::Data(want));
            },
        ),
        // A growing MREMAP_MAYMOVE of a locked MADV_HUGEPAGE mapping lands outside the arena
        // where each side's search puts it; whether that range holds a whole 2 MiB block, hence
        // whether its populate maps a THP, depends on the rest of the address space (found by
        // diff_generated_b, seed 0x51e5031c92276e27; known divergence
        // `mremap-maymove-placement` when the two differ).
        case(
            "mremap_maymove_locked_thp_placement",
            "generated_b, minimised",
            |c| {
                let b = a(0) + (24 << 20);
                c.op(Op::mmap_anon_at(b, 4 << 20, RW)).ok(b);
                c.madvise(b, 4 << 20, libc::MADV_HUGEPAGE).ok(0);
                c.op(Op::Mlock {
                    addr: b,
                    len: 2 * P,
                })
                .ok(0);
                c.op(mremap(b, 1, 0x21_0000, MAYMOVE, 0));
                c.counters(None, Some(4), Some(0));
            },
        ),
    ]
}

/// The cases of this file.
pub fn cases() -> Vec<Case> {
    let mut v = mremap_cases();
    v.extend(brk_cases());
    v.extend(fork_cases());
    v
}
