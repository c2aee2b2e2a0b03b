#!/usr/bin/env bash
# Loom model checking of every primitive of the sync seam and of the small lock protocols the
# engine builds on them.
#
# Under `--cfg loom` the seam (crates/usermm/src/sync/) is built on loom: `SpinLock`/`Mutex`,
# `CondVar` (so `Completion` and `Barrier`) and `PtLock` (state word and parking) through
# `sync/primitive.rs`, `RwSem` (under `MmapLock` and `VmaLock`) through `sync/rwsem/loom.rs`,
# and `SharedLine` over loom atomics; the virtual-time hooks are no-ops. Each test file below explores every
# interleaving (up to 3 preemptions) of two or three threads, and each has a negative control,
# a deliberately broken variant that loom must catch (a `#[should_panic]` test):
# - loom_lock.rs: SpinLock/Mutex exclusion, release/acquire hand-over, `MutexGuard::unlocked`;
#   broken: a read-modify-write split by `SpinLockGuard::unlocked`.
# - loom_ptlock.rs: PtLock exclusion and hand-over through its parking protocol (PARKED,
#   unpark_one, fair hand-off; two and three contenders), try_lock; broken: a failed try_lock
#   ignored.
# - loom_condvar.rs: CondVar wait/notify with no lost wake-up, Completion, a two-round Barrier;
#   broken: the condition tested outside the mutex (a lost wake-up, reported as a deadlock),
#   a barrier sized for one.
# - loom_shared_line.rs: SharedLine RMW atomicity, inc_not_zero against the last put; broken:
#   load-then-store.
# - loom_pcp.rs: a pcp refill racing drain_all_pages on the engine's own PhysMem (v4.11 and
#   pick_outside_lock), and on a replica of the protocol; broken (replica): a drain taking
#   zone.lock before the pcp lock (deadlock).
# - loom_ptl_unmap.rs: a fault installing a PTE under the PTL against a zap that clears the PMD
#   and frees the table; broken: the fault without the pmd_same re-check under the PTL.
# - loom_fault_zap.rs: a write fault (re-check and writes under the PTL, through the locked slot)
#   racing a zap (the table cursor) on one PTE table of the engine's own PhysMem, whose entries,
#   mapcounts and rss are loom atomics (123 iterations); broken: the fault's re-check and
#   writes without the PTL.
# - loom_mmap_lock.rs: downgrade vs writer, detach-then-downgrade munmap vs a faulting reader;
#   broken: zap before detach.
# - loom_vma_lock.rs: a fault under the per-VMA lock racing mprotect, a detached VMA; broken: a
#   writer that forgets vma_start_write.
#
# Measured runtime (2-core dev box shared with another build, 2026-11): ~4 s warm, nearly all
# of it ptl_three_contenders (32 479 + 24 126 iterations, unfair then fair hand-off); every
# other model takes 7 to 382 iterations and a few ms (the largest: completion_wakes_every_waiter
# 382, fault_vs_mprotect 358, barrier_orders_both_sides 346). From a cold target dir add ~4 min of compiling (the
# dependencies and the library against loom). Budget: 3 minutes warm.
#
# Requires `loom` as a `[target.'cfg(loom)'.dependencies]` entry of crates/usermm: the library
# itself, not only the test, is compiled against loom.
set -euo pipefail
cd "$(dirname "$0")/.."

# The models need speed, not line tables: no debuginfo in this build (it compiles the whole
# dependency tree again under --cfg loom, so this is most of the script's cold time). Its own
# directory under the caller's target directory (CARGO_TARGET_DIR, else ./target): a build with
# other RUSTFLAGS would otherwise rebuild the caller's artefacts each time.
RUSTFLAGS="--cfg loom" \
    CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom" \
    CARGO_PROFILE_RELEASE_DEBUG=0 \
    LOOM_MAX_PREEMPTIONS=3 \
    cargo test -p usermm --release \
    --test loom_lock \
    --test loom_ptlock \
    --test loom_condvar \
    --test loom_shared_line \
    --test loom_pcp \
    --test loom_ptl_unmap \
    --test loom_fault_zap \
    --test loom_mmap_lock \
    --test loom_vma_lock
