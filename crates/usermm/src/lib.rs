//! # usermm — the core of Linux memory management, in user space
//!
//! A physical page allocator (buddy, per-CPU page lists, per-node LRU), 4-level page tables, VMAs
//! under an mmap lock, page faults with the zero page and the huge zero page, munmap and exit
//! teardown through an `mmu_gather`, and the percpu chunk allocator — on real threads and real
//! memory, with each scalability mechanism of the seeds switchable at run time.
//!
//! Everything hangs off a [`Machine`] built from one [`MachineConfig`]; there is no
//! process-global state, so a vanilla and a patched machine can run side by side in one process.
//! Policies are resolved once, in constructors; nothing reads the config on a hot path.
//!
//! The library never prints. Workloads live in `usermm-workloads`, the command in `usermm-cli`.
//!
//! # Map (module ↔ kernel file)
//! | module | mirrors |
//! |---|---|
//! | [`config`] | the Kconfig, sysctls and boot parameters the experiments toggle |
//! | [`cpu`] | `percpu-defs.h`, `topology.h` |
//! | [`page_alloc`] | `mm/page_alloc.c`, `include/linux/mmzone.h`, `mm/swap.c` (LRU, `release_pages`) |
//! | [`stats`] | `/proc/vmstat`, `/proc/meminfo`, `/proc/lock_stat` |
//! | [`sync`] | `include/linux/mmap_lock.h`, `kernel/workqueue.c` |
//! | [`pgtable`] | `arch/x86/include/asm/pgtable*.h`, the table allocators of `mm/memory.c` |
//! | [`mm`] | `mm_types.h`, `mm/mmap.c`, `mm/vma.c`, `mm/memory.c`, `mm/mmu_gather.c`, `mm/mprotect.c`, `mm/madvise.c`, `mm/mlock.c` |
//! | [`huge_memory`] | the huge zero page of `mm/huge_memory.c` |
//! | [`policy`] | the gather's and munmap's resolved policies (below both `machine` and `mm`) |
//!
//! # Lock ordering
//! Written once here; every place where two of these nest repeats the edge in a one-line
//! `// Lock order:` comment.
//! ```text
//! mmap_lock (MmapLock; write may downgrade to read)
//!   vma tree                              -- protected by mmap_lock
//!     page_table_lock (upper levels) -> PMD lock -> PTE-page lock (split PTL)
//!       pcp lock (per CPU, per zone) -> zone.lock
//!       lru_add batch (per CPU) -> lru_lock (per node)
//!       lru_lock is never held together with a pcp lock or zone.lock
//! huge zero page: atomics only, taken under the PMD lock at most
//! pcpu_alloc_mutex -> pcpu_lock           -- independent of the tree above
//!   pcp lock -> zone.lock                 -- chunk population allocates pages
//! mmu_gather workers take no mm lock: they only free pages (lru_lock, pcp lock, zone.lock)
//! ```
//!
//! # Unsafe
//! The crate denies `unsafe_code`; these modules allow it, and every block in them carries a
//! `// SAFETY:` comment (`clippy::undocumented_unsafe_blocks` is forbidden):
//! - `backing` — the host mappings behind frames and metadata, `ZeroedArray`;
//! - `page_alloc::meta` — `unsafe impl ZeroValid for PageMeta`;
//! - `pcpu::region` — the host mapping behind percpu chunks;
//! - `sync::clock`, `sync::ptlock`, `sync::rwsem` — `clock_gettime`, parking on an address,
//!   moving a lock's value out, loom's cell pointers;
//! - the VMA tree's unit tests, which probe the host kernel with raw `mmap`.

#![deny(unsafe_code)]
#![forbid(clippy::undocumented_unsafe_blocks)]

pub mod addr;
pub mod backing;
pub mod config;
pub mod cpu;
#[macro_use]
pub mod debug;
pub mod error;
pub mod huge_memory;
pub mod machine;
pub mod memcg;
pub mod mm;
pub mod page_alloc;
pub mod pcpu;
pub mod pgtable;
pub mod policy;
pub mod stats;
pub mod sync;

pub use addr::{Order, Pfn, Vaddr, PAGE_SHIFT, PAGE_SIZE};
pub use config::MachineConfig;
pub use cpu::{CpuId, NodeId};
pub use error::{AllocError, Errno};
pub use machine::Machine;
pub use mm::{Fault, Mm, SegvCode, Task};
