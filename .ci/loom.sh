#!/usr/bin/env bash
# Loom model checking of the engine's small lock protocols (the mmap lock's downgrade, the
# per-VMA lock against a VMA writer).
#
# Under `--cfg loom`, the sync seam's `RwSem` (under `usermm::sync::MmapLock`) is built on loom
# primitives and
# `crates/usermm/tests/loom_mmap_lock.rs` explores every interleaving (up to 3 preemptions) of:
# downgrade vs writer, detach-then-downgrade munmap vs a faulting reader, and a deliberately
# wrong zap-before-detach order that must be caught; and
# `crates/usermm/tests/loom_vma_lock.rs`: a fault under the per-VMA lock racing mprotect (and a
# writer that forgets vma_start_write, which must be caught), a detached VMA.
#
# Measured runtime (2-core dev box, 2026-04): the models themselves run in 0.02 s
# (79 + 132 iterations, plus the should-panic model); the whole script takes ~60 s from a cold
# target dir (compiling dependencies) and under 1 s warm. Budget: 2 minutes.
#
# Requires `loom` as a `[target.'cfg(loom)'.dependencies]` entry of crates/usermm: the library
# itself, not only the test, is compiled against loom.
set -euo pipefail
cd "$(dirname "$0")/.."

RUSTFLAGS="--cfg loom" \
    CARGO_TARGET_DIR=target/loom \
    LOOM_MAX_PREEMPTIONS=3 \
    cargo test -p usermm --test loom_mmap_lock --test loom_vma_lock --release
