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
//! A machine runs on one of two clocks (`time.mode`, docs/two-clocks.md): the wall clock (host
//! threads, host time: figures measured on this host) or virtual time, where the same code runs
//! through [`Machine::run`] as a deterministic model of a cost profile's machine ([`vtime`]):
//! threads become contexts on emulated CPUs, the engine charges named costs
//! ([`sync::charge`]) where the kernel does that work, and every lock, shared line and wake-up
//! is ordered in virtual time by the [`sync`] seam's hooks.
//!
//! The library never prints. Workloads live in `usermm-workloads`, the command in `usermm-cli`.
//!
//! # Map (module ↔ kernel file)
//! | module | mirrors |
//! |---|---|
//! | [`config`] | the Kconfig, sysctls and boot parameters the experiments toggle |
//! | [`cpu`] | `percpu-defs.h`, `topology.h` |
//! | [`page_alloc`] | `mm/page_alloc.c` (`buddy`, `pcp`, `validate`), `include/linux/mmzone.h`, `mm/swap.c` (`lru`, `release`), `mm/hugetlb.c` (`hugetlb`) |
//! | [`stats`] | `/proc/vmstat`, `/proc/meminfo`, `/proc/lock_stat` |
//! | [`text`] | `string_escape_mem`: control characters in text a user gave, found and shown one way |
//! | [`sync`] | the seam: `spinlock_t`, `struct mutex`, `rw_semaphore`, the split PTL, wait queues, completions, kthreads, `ktime_get`; `include/linux/mmap_lock.h`, `kernel/workqueue.c` |
//! | [`vtime`] | no kernel file: virtual time, the machine model of docs/two-clocks.md (runtime, cost profiles, report) |
//! | [`pgtable`] | `arch/x86/include/asm/pgtable*.h`, the table allocators of `mm/memory.c` (`__pte_alloc`, `__pmd_alloc`), `pte_offset_map_lock`/`pmd_lock` (`LockedSlot`, and `TableCursor` for a run of entries: zap, `change_protection`, fork's copy, mremap's move, the THP split), the deposit list, the `p?d_addr_end` range walks |
//! | [`mm`] | `mm_types.h`, `mm/memory.c`, `mm/mmu_gather.c`; `mm::huge_memory` = the THP PMD operations of `mm/huge_memory.c`; `mm::fault` = `arch/x86/mm/fault.c` + the fault half of `mm/memory.c` (`anon`, `wp`) + `mm/hugetlb.c`'s faults (`hugetlb`); `mm::vm_fault` = `struct vm_fault` and `vm_fault_t`; `mm::tlb` = `arch/x86/mm/tlb.c` (`flush_tlb_mm_range`, the TLB gates); `mm::fork` = `kernel/fork.c` (`dup_mmap`) + `copy_page_range`; `mm::mremap` = `mm/mremap.c`; `mm::rmap` = the mapcounts of `mm/rmap.c`; `mm::proc` = `fs/proc/task_mmu.c` (`smaps_rollup`); `mm::task` = a workload thread's loads and stores; `mm::lock_vma` = `lock_vma_under_rcu`; `mm::vma` = `mm/vma.c` (`tree`, `merge`, `remap`), `mm/mmap.c` (`unmapped_area`), `fs/proc/task_mmu.c` (`maps`), the per-VMA-lock index (`index`); `mm::mmap` = `mm/mmap.c` (`map`, `munmap`, `brk`), `mm/mprotect.c`, `mm/madvise.c`, `mm/mlock.c`; `mm::mman` = `uapi/asm-generic/mman-common.h` |
//! | [`huge_zero_page`] | the huge zero page of `mm/huge_memory.c` (its PMD operations: `mm::huge_memory`) |
//! | [`pcpu`], [`memcg`] | `mm/percpu.c`; the percpu side of `mm/memcontrol.c` |
//! | [`policy`] | the gather's and munmap's resolved policies (below both `machine` and `mm`) |
//! | [`machine`], [`backing`] | the box: CPUs, nodes, physical memory and its host backing; [`Machine::run`], the clock |
//!
//! `vtime` uses two other engine modules, both leaves: `cpu` (its CPU-to-node rule and
//! `MAX_NUMNODES`, so the model places CPUs on nodes as the engine does) and `text`. Above it:
//! `sync` → `vtime` (the seam re-exports the
//! runtime's classes, modes and costs and forwards its hooks), `config` → `vtime` (a profile is
//! resolved with the config), `machine` → `vtime` (runs). `tests/source_rules.rs` keeps the
//! module graph acyclic.
//!
//! # What a library user cannot break
//! Without `unsafe`, no caller outside the crate can break rss, mapcount, PTL or tree
//! invariants: raw state is crate-private, and the guard a caller holds is the proof of the
//! lock it needs. Frames are owned through [`page_alloc::OwnedPages`] (freed on drop; reads and
//! writes within its own block), and [`Mm::map_pfn_range`] takes one by value, freeing it
//! with the last VMA that maps it. The raw allocator (`alloc_pages`, `free_pages`, `put_page`,
//! `release_pages`, the LRU, `split_compound`), the backing's writes, the `mmu_gather` and the
//! huge zero page's `get`/`put` are `pub(crate)`; `PageMeta`'s fields are crate-private, and
//! inside the crate only `mm::rmap` and the allocator write a mapcount (`tests/source_rules.rs`).
//! The `compile_fail` examples on `OwnedPages` show what does not compile.
//!
//! # Lock ordering
//! Written once here; every place where two of these nest repeats the edge in a one-line
//! `// Lock order:` comment. Every lock is a [`sync`] primitive of the class named in brackets.
//! ```text
//! mmap_lock [mmap_lock] (RwSem; write may downgrade to read)
//!   parent mmap_lock (write) -> child mmap_lock (write)   -- fork (dup_mmap)
//!   vma tree                              -- protected by mmap_lock
//!   per-VMA lock [vm_lock] (write: a VMA writer holding mmap_lock for write; read: a fault or
//!     MADV_DONTNEED holding no mmap_lock) -> VMA index [mm_mt] (write, to publish)
//!   VMA index [mm_mt] (read) is taken alone: released before a per-VMA lock is tried
//!     page_table_lock [page_table_lock] (upper levels) -> PMD lock [pmd_lock] -> PTE-page lock [ptl]
//!       child PTE/PMD lock -> parent PTE/PMD lock   -- copy_page_range; old -> new in move_page_tables
//!       PMD lock: also guards its PMD table's deposit list (`pmd_huge_pte`); no lock of its own
//!       pcp lock [pcp] (per CPU, per zone) -> zone.lock [zone.lock]
//!       pcp lock -> hugetlb pool [hugetlb_lock]   -- freeing a hugetlb page; a leaf
//!       lru_add batch [lru_add] (per CPU) -> lru_lock [lru_lock] (per node)
//!       lru_add batch -> pcp lock -> zone.lock   -- a batch that held a page's last reference
//!       lru_lock is never held together with a pcp lock or zone.lock
//!     shmem pages [shmem_i_pages] (per object) -> pcp lock -> zone.lock   -- first touch allocates
//!   mmap_lock (read) -> exclusive-hold histogram [mmap_lock_hist]   -- at a downgrade; a leaf
//! huge zero page: a shared line [huge_zero_refcount] and atomics, taken under the PMD lock at most
//! TLB gates [tlb_gate] (per CPU): taken alone, never with another lock held... except a flush
//!   forced under a PTE lock, which is safe because accesses never take a PTL
//! shrinker list [shrinker_rwsem]: read, copied, released before any shrinker runs
//! fork family [mmlist_lock]: a leaf (mm_alloc, fork, validate copy the list and drop it)
//! pcpu_alloc_mutex [pcpu_alloc_mutex] -> pcpu_lock [pcpu_lock]   -- independent of the tree above
//!   pcp lock -> zone.lock                 -- chunk population allocates pages
//! workqueue pool [workqueue], completions: leaves; items run with none held
//! mmu_gather workers take no mm lock: they only free pages (lru_lock, pcp lock, zone.lock)
//! workload barriers and start signals [futex]: leaves, taken with no engine lock held
//! a machine's last-run report [unmodelled]: a leaf, taken outside runs only
//! ```
//! In a virtual run every lock above is also a virtual lock of the same class, taken before and
//! released after the host lock (so the host lock is always free when taken, and a guard may be
//! held across a context switch); the TLB gates are not taken there (see `mm::tlb`, `sync::TlbGate`).
//!
//! # Unsafe
//! The crate denies `unsafe_code`; these modules allow it, and every block in them carries a
//! `// SAFETY:` comment (`clippy::undocumented_unsafe_blocks` is forbidden):
//! - `backing` — the host mappings behind frames and metadata, `ZeroedArray`;
//! - `page_alloc::meta` — `unsafe impl ZeroValid for PageMeta`;
//! - `pcpu::region` — the host mapping behind percpu chunks;
//! - `sync::clock`, `sync::ptlock`, `sync::rwsem` (its loom twin) — `clock_gettime` and
//!   `rdtsc` (lock_stat's TSC clock), parking on an address, loom's cell pointers;
//! - `sync::primitive`, under `--cfg loom` only — the loom parking lot's `unsafe fn`s, which
//!   keep `parking_lot_core`'s signatures (no unsafe block);
//! - `vtime::coro` — coroutines whose bodies borrow, and suspending from inside a hook;
//! - the VMA tree's unit tests, which probe the host kernel with raw `mmap`.

#![warn(clippy::allow_attributes)]
#![warn(unreachable_pub)]
#![deny(unsafe_code)]
#![forbid(clippy::undocumented_unsafe_blocks)]

pub mod addr;
pub mod backing;
pub mod config;
pub mod cpu;
#[macro_use]
pub mod debug;
pub mod error;
pub mod host_cost;
pub mod huge_zero_page;
pub mod machine;
pub mod memcg;
pub mod mm;
pub mod page_alloc;
pub mod pcpu;
pub mod pgtable;
pub mod policy;
pub mod stats;
pub mod sync;
pub mod text;
pub mod vtime;

pub use addr::{Order, Pfn, PAGE_SHIFT, PAGE_SIZE};
pub use config::MachineConfig;
pub use cpu::{CpuId, NodeId};
pub use error::{AllocError, Errno};
pub use machine::Machine;
pub use mm::{Fault, Mm, SegvCode, Task};
