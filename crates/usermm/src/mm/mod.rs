//! Address spaces: `mm_struct`, its VMAs, page tables, faults, munmap and exit.
//!
//! Mirrors `include/linux/mm_types.h` (`struct mm_struct`), `kernel/fork.c` (`mm_alloc`,
//! `mmget`, `mmput`, `__mmput`), `mm/mmap.c` (`exit_mmap`) and `fs/proc/task_mmu.c`
//! (`smaps_rollup`).
//!
//! ```text
//!  Mm ── mmap_lock: MmapLock<VmaTree>   the only way to the VMAs
//!     ├─ pgd ─ PUD ─ PMD ─ PTE pages    lockless walks; writes through pgtable's locked slot
//!     │                                 and table cursor (the split PTL in their type)
//!     ├─ page_table_lock                PGD/PUD entries (deposits: per PMD table, its PMD lock)
//!     ├─ rss per CPU                    MM_FILEPAGES, MM_ANONPAGES, MM_SWAPENTS, MM_SHMEMPAGES
//!     ├─ mm_users / flags               MMF_HUGE_ZERO_PAGE
//!     └─ cpumask + TLB gates            which CPUs may cache translations; shootdown
//! ```
//!
//! A [`Task`] is what a workload thread holds: `(Arc<Mm>, CpuId)`. Its reads and writes walk the
//! page tables like the MMU and fault on demand through [`fault`], each inside its CPU's TLB
//! gate; the TLB model (gates, `flush_tlb`, the single-page ceiling) is `tlb.rs`.
//!
//! # Invariants (checked by [`Mm::validate`])
//! 1. VMAs sorted, non-overlapping, page aligned; `map_count ≤ max_map_count`.
//! 2. Every mapped leaf lies inside a VMA; every normal page it maps is allocated, and its
//!    mapcount equals the number of leaves mapping it in every mm of its fork family.
//! 3. `MM_ANONPAGES` = anonymous pages mapped (512 per THP); `MM_SHMEMPAGES` likewise.
//! 4. Every table page lies in the reach of some VMA (nothing left behind by munmap); after
//!    exit, none at all; no table page belongs to two mms.
//!
//! # Locks
//! `mmap_lock -> page_table_lock -> PMD lock -> PTE lock -> (pcp lock -> zone.lock)`; the TLB
//! gates are taken alone (a flush never holds a PTL while waiting on them... except the forced
//! flush under a PTE lock, which is safe because accesses never take a PTL).
//!
//! # Fork families
//! [`Mm::fork`] (`fork.rs`) makes a child that shares the parent's anonymous pages
//! copy-on-write; mapcounts then span mms (`rmap.rs`), so [`Mm::validate`] (`validate.rs`)
//! checks them over the whole family of mms forked from one first mm.
//!
//! # Differences from Linux
//! No swap, no file mappings besides `/dev/zero`, shared anonymous memory is a minimal shmem
//! object, no rmap trees (mapcounts only: nothing walks from a page to its mappers).

pub mod fault;
pub mod fork;
pub mod huge_memory;
mod lock_vma;
#[cfg(loom)]
#[doc(hidden)]
pub mod loom_fault_zap;
pub mod memory;
pub mod mman;
pub mod mmap;
pub mod mmu_gather;
pub mod mremap;
pub(crate) mod rmap;
pub mod shmem;
mod tlb;
mod validate;
mod vm_fault;
pub mod vma;

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use serde::Serialize;

pub use self::fault::{Fault, SegvCode};
pub(crate) use self::vm_fault::{VmFault, VmFaultError, OOM};
use self::vma::VmaTree;
use crate::addr::{Pfn, PAGE_SIZE};
use crate::cpu::{CpuId, PerCpu};
use crate::machine::Machine;
use crate::sync::class::{MMLIST_LOCK, PAGE_TABLE_LOCK};
use crate::sync::mmap_lock::{MmapLock, MmapLockInfo, MmapReadGuard};
use crate::sync::{SpinLock, TlbGate};

/// `NR_MM_COUNTERS`: the rss counter indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum RssItem {
    FilePages = 0,
    AnonPages = 1,
    SwapEnts = 2,
    ShmemPages = 3,
}

pub use crate::huge_zero_page::MMF_HUGE_ZERO_PAGE;

/// What a `munmap` or exit did, for the experiments.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct UnmapStats {
    pub total_ns: u64,
    /// Time the mmap lock was held for writing.
    pub exclusive_ns: u64,
    /// Time spent zapping and freeing page tables under the read lock after a downgrade.
    pub read_ns: u64,
    pub downgraded: bool,
    pub pages_zapped: u64,
    pub tlb_flushes: u64,
}

/// One address space (`struct mm_struct`).
pub struct Mm {
    machine: Arc<Machine>,
    id: u64,
    pub(crate) mmap_lock: MmapLock<VmaTree>,
    pgd: Pfn,
    /// `mm->page_table_lock`: PGD and PUD entries. (Tables deposited under huge PMDs are on a
    /// list of their PMD table page, under its PMD lock: see `huge_memory::deposit`.)
    pub(crate) page_table_lock: SpinLock<()>,
    /// A loom atomic under loom (`sync::primitive`): the fault/zap race.
    rss: PerCpu<[crate::sync::primitive::atomic::AtomicI64; 4]>,
    /// `mm_pgtables_bytes` in pages: table pages of this mm, deposits and PGD included.
    pub(crate) nr_tables: AtomicI64,
    pub(crate) flags: AtomicU64,
    mm_users: AtomicI32,
    exited: AtomicBool,
    /// `mm_cpumask`: CPUs that have run this mm (and may cache its translations).
    cpumask: Box<[AtomicU64]>,
    /// The per-CPU TLB gates (`tlb.rs`).
    tlb_gate: PerCpu<TlbGate>,
    pub(crate) tlb_flushes: AtomicU64,
    pub(crate) anon_vma_ids: AtomicU64,
    hiwater_rss: AtomicI64,
    /// See [`Mm::set_munmap_zap_hook`].
    zap_hook: OnceLock<ZapHook>,
    /// Every mm forked from the same first mm (`mm_alloc`), this one included: the mms that
    /// may share pages with it. `Mm::validate` counts mappings across them.
    pub(crate) family: Arc<Family>,
    /// `rlimit(RLIMIT_DATA)` in bytes, as `brk` checks it.
    pub(crate) rlimit_data: AtomicU64,
    /// The VMA index faults read without the mmap lock, with per-VMA locks on
    /// (`vma.per_vma_lock`; see `lock_vma.rs`).
    pub(crate) vma_index: Option<Arc<vma::VmaIndex>>,
}

/// The mms of one fork family, as weak references (an exited, dropped mm simply fails to
/// upgrade). Only `validate` reads it; `fork` adds to it.
pub(crate) type Family = SpinLock<Vec<std::sync::Weak<Mm>>>;

/// A test's observer of munmap's zap window: `(mm, downgraded)`.
type ZapHook = Box<dyn Fn(&Mm, bool) + Send + Sync>;

impl std::fmt::Debug for Mm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mm")
            .field("id", &self.id)
            .field("pgd", &self.pgd)
            .finish_non_exhaustive()
    }
}

/// Written here rather than in `machine.rs` so that the machine does not import the mm (the
/// mm is built on the machine, not the other way round).
impl Machine {
    /// A new, empty address space (`mm_alloc`).
    pub fn new_mm(self: &Arc<Self>, cpu: CpuId) -> Result<Arc<Mm>, crate::error::Errno> {
        Mm::new(self, cpu)
    }
}

impl Mm {
    /// `mm_alloc` + `mm_init` + `pgd_alloc`: an empty address space with `mm_users` = 1.
    pub fn new(machine: &Arc<Machine>, cpu: CpuId) -> Result<Arc<Mm>, crate::error::Errno> {
        let family = Arc::new(SpinLock::new(&MMLIST_LOCK, Vec::new()));
        Mm::new_in_family(machine, cpu, family)
    }

    /// [`Mm::new`], joining an existing fork family (`fork`).
    pub(crate) fn new_in_family(
        machine: &Arc<Machine>,
        cpu: CpuId,
        family: Arc<Family>,
    ) -> Result<Arc<Mm>, crate::error::Errno> {
        let phys = machine.phys();
        let pgd = crate::pgtable::alloc_table(phys, cpu)?;
        let nr = machine.cpus().nr_possible();
        let id = machine.next_mm_id();
        let mmap_lock = MmapLock::with_clock(
            VmaTree::new(mmap::MMAP_BASE),
            machine.lockstat_clock().sibling(),
        );
        let vma_index = machine.per_vma_lock().then(|| {
            let idx = Arc::new(vma::VmaIndex::new(Arc::clone(mmap_lock.mm_lock_seq())));
            mmap_lock.write().set_index(Arc::clone(&idx));
            idx
        });
        let mm = Arc::new(Mm {
            machine: Arc::clone(machine),
            id,
            mmap_lock,
            pgd,
            page_table_lock: SpinLock::new(&PAGE_TABLE_LOCK, ()),
            rss: PerCpu::new(nr, |_| Default::default()),
            nr_tables: AtomicI64::new(1),
            flags: AtomicU64::new(0),
            mm_users: AtomicI32::new(1),
            exited: AtomicBool::new(false),
            cpumask: (0..nr.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            tlb_gate: PerCpu::new(nr, |_| TlbGate::new()),
            tlb_flushes: AtomicU64::new(0),
            anon_vma_ids: AtomicU64::new(1),
            hiwater_rss: AtomicI64::new(0),
            zap_hook: OnceLock::new(),
            family,
            rlimit_data: AtomicU64::new(u64::MAX),
            vma_index,
        });
        {
            let mut f = mm.family.lock();
            f.retain(|w| w.strong_count() > 0);
            f.push(Arc::downgrade(&mm));
        }
        Ok(mm)
    }

    pub fn machine(&self) -> &Arc<Machine> {
        &self.machine
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    #[inline]
    pub(crate) fn pgd(&self) -> Pfn {
        self.pgd
    }

    /// For tests: run `hook(mm, downgraded)` inside every munmap of this mm that detached a
    /// VMA, after the detach (and the downgrade, when there is one) and before the zap — with the
    /// mmap lock held for read if `downgraded`, for write if not. It lets a test act inside the
    /// zap window, event-driven, where it would otherwise have to guess it with sleeps. Set once:
    /// returns false (and drops `hook`) if a hook is already set. Costs munmap one atomic load.
    #[doc(hidden)]
    pub fn set_munmap_zap_hook(&self, hook: impl Fn(&Mm, bool) + Send + Sync + 'static) -> bool {
        self.zap_hook.set(Box::new(hook)).is_ok()
    }

    /// Run the zap-window hook, if a test set one.
    #[inline]
    pub(crate) fn zap_window(&self, downgraded: bool) {
        if let Some(h) = self.zap_hook.get() {
            h(self, downgraded);
        }
    }

    /// The mmap lock's figures and state, read-only (lock_stat, exclusive holds): for the
    /// experiments.
    pub fn mmap_lock_info(&self) -> MmapLockInfo<'_, VmaTree> {
        self.mmap_lock.info()
    }

    /// `mmap_read_lock`: the VMAs, read-only, for lookups (`find_vma`, maps). Faults and
    /// other readers proceed meanwhile; a writer waits until the guard is dropped.
    pub fn mmap_read_lock(&self) -> MmapReadGuard<'_, VmaTree> {
        self.mmap_lock.read()
    }

    // ----- rss ---------------------------------------------------------------------------

    #[doc(alias = "add_mm_counter")]
    #[inline]
    pub(crate) fn add_rss(&self, cpu: CpuId, item: RssItem, delta: i64) {
        if delta != 0 {
            self.rss[cpu][item as usize].fetch_add(delta, Relaxed);
        }
    }

    /// `get_mm_counter`: pages.
    pub fn rss(&self, item: RssItem) -> i64 {
        self.rss
            .iter()
            .map(|c| c[item as usize].load(Relaxed))
            .sum()
    }

    /// `get_mm_rss`: resident pages of every kind.
    pub fn rss_total(&self) -> i64 {
        self.rss(RssItem::FilePages) + self.rss(RssItem::AnonPages) + self.rss(RssItem::ShmemPages)
    }

    /// `update_hiwater_rss`.
    pub(crate) fn update_hiwater_rss(&self) {
        self.hiwater_rss.fetch_max(self.rss_total(), Relaxed);
    }

    pub fn hiwater_rss(&self) -> i64 {
        self.hiwater_rss.load(Relaxed).max(self.rss_total())
    }

    pub fn nr_page_tables(&self) -> i64 {
        self.nr_tables.load(Relaxed)
    }

    pub fn has_flag(&self, f: u64) -> bool {
        self.flags.load(Relaxed) & f != 0
    }

    pub fn tlb_flushes(&self) -> u64 {
        self.tlb_flushes.load(Relaxed)
    }

    pub fn map_count(&self) -> usize {
        self.mmap_lock.read().map_count()
    }

    // ----- lifetime ----------------------------------------------------------------------

    /// `mmget`: one more user of the address space.
    pub fn mmget(&self) {
        self.mm_users.fetch_add(1, Relaxed);
    }

    /// `mmput`: drop a user; the last one tears the address space down (`__mmput`:
    /// `exit_mmap`, then the huge zero page reference). Returns the teardown's figures when
    /// this call did it.
    pub fn mmput(&self, cpu: CpuId) -> Option<UnmapStats> {
        let old = self.mm_users.fetch_sub(1, Relaxed);
        vm_bug_on!(old <= 0, "mmput below zero");
        (old == 1).then(|| self.exit(cpu))
    }

    pub fn users(&self) -> i32 {
        self.mm_users.load(Relaxed)
    }

    pub fn is_exited(&self) -> bool {
        self.exited.load(Relaxed)
    }

    fn exit(&self, cpu: CpuId) -> UnmapStats {
        if self.exited.swap(true, Relaxed) {
            return UnmapStats::default();
        }
        let st = memory::exit_mmap(self, cpu);
        self.machine.huge_zero().mm_put(&self.flags, cpu);
        // pgd_free
        let phys = self.machine.phys();
        crate::pgtable::free_table(phys, cpu, self.pgd);
        self.nr_tables.fetch_sub(1, Relaxed);
        st
    }

    // ----- reports -----------------------------------------------------------------------

    /// `/proc/<pid>/maps`.
    pub fn maps(&self) -> String {
        self.mmap_lock.read().render_maps()
    }

    /// `/proc/<pid>/smaps_rollup` figures, from the rss counters (the walk agrees: see
    /// [`Mm::validate`]).
    pub fn smaps_rollup(&self) -> SmapsRollup {
        let kb = PAGE_SIZE as i64 / 1024;
        let thp = self.count_thp_mappings();
        SmapsRollup {
            rss_kb: (self.rss_total() * kb) as u64,
            anonymous_kb: (self.rss(RssItem::AnonPages) * kb) as u64,
            anon_huge_pages_kb: thp * 2048,
            shmem_kb: (self.rss(RssItem::ShmemPages) * kb) as u64,
            locked_kb: self.locked_pages() * PAGE_SIZE / 1024,
        }
    }

    fn count_thp_mappings(&self) -> u64 {
        let tree = self.mmap_lock.read();
        let phys = self.machine.phys();
        let hz = self.machine.huge_zero().pfn();
        let mut n = 0;
        crate::pgtable::for_each_leaf(phys, self.pgd, |_, e, huge| {
            if huge
                && Some(e.pfn()) != hz
                && !phys.meta(e.pfn()).test(crate::page_alloc::meta::PG_HUGETLB)
            {
                n += 1;
            }
        });
        drop(tree);
        n
    }

    fn locked_pages(&self) -> u64 {
        let tree = self.mmap_lock.read();
        let phys = self.machine.phys();
        let mut n = 0;
        crate::pgtable::for_each_leaf(phys, self.pgd, |addr, e, huge| {
            if let Some(v) = tree.find_vma(addr) {
                if v.start <= addr && v.flags.contains(vma::VmFlags::VM_LOCKED) && !e.special() {
                    n += if huge { 512 } else { 1 };
                }
            }
        });
        n
    }
}

/// The table allocators' view of an mm (`pgtable::pmd_alloc`, `pgtable::pte_alloc`).
impl crate::pgtable::MmTables for Mm {
    #[inline]
    fn phys(&self) -> &crate::page_alloc::PhysMem {
        self.machine.phys()
    }
    #[inline]
    fn pgd_table(&self) -> Pfn {
        self.pgd
    }
    #[inline]
    fn page_table_lock(&self) -> crate::sync::SpinLockGuard<'_, ()> {
        self.page_table_lock.lock()
    }
    #[inline]
    fn inc_nr_tables(&self) {
        self.nr_tables.fetch_add(1, Relaxed);
    }
}

impl Drop for Mm {
    /// `mmdrop` of the last reference: an mm never put by its users is torn down here.
    fn drop(&mut self) {
        if !self.exited.load(Relaxed) {
            self.exit(CpuId(0));
        }
    }
}

/// `/proc/<pid>/smaps_rollup`, the lines the engine models (kB).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct SmapsRollup {
    pub rss_kb: u64,
    pub anonymous_kb: u64,
    pub anon_huge_pages_kb: u64,
    pub shmem_kb: u64,
    pub locked_kb: u64,
}

impl SmapsRollup {
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut line =
            |l: &str, v: u64| s.push_str(&format!("{:<16}{:>8} kB\n", format!("{l}:"), v));
        line("Rss", self.rss_kb);
        line("Pss", self.rss_kb);
        line("Pss_Anon", self.anonymous_kb);
        line("Pss_Shmem", self.shmem_kb);
        line("Anonymous", self.anonymous_kb);
        line("AnonHugePages", self.anon_huge_pages_kb);
        line("Locked", self.locked_kb);
        s
    }
}

/// A workload thread's handle: an address space and the CPU it runs on.
#[derive(Debug, Clone)]
pub struct Task {
    mm: Arc<Mm>,
    cpu: CpuId,
}

impl Task {
    pub fn new(mm: Arc<Mm>, cpu: CpuId) -> Task {
        Task { mm, cpu }
    }

    pub fn mm(&self) -> &Arc<Mm> {
        &self.mm
    }

    pub fn cpu(&self) -> CpuId {
        self.cpu
    }

    /// Translate `addr` for an access, faulting until it can be made (the MMU + page fault
    /// loop), then run `f(pfn, huge_offset)` inside the TLB gate.
    #[inline]
    fn access<R>(&self, addr: u64, write: bool, mut f: impl FnMut(Pfn) -> R) -> Result<R, Fault> {
        let phys = self.mm.machine.phys();
        let mut tries = 0;
        loop {
            let got = self.mm.with_tlb_gate(self.cpu, || {
                fault::translate(phys, self.mm.pgd, addr, write).map(&mut f)
            });
            if let Some(r) = got {
                return Ok(r);
            }
            tries += 1;
            vm_bug_on!(tries > 64, "fault loop at {addr:#x}");
            fault::handle_mm_fault(&self.mm, self.cpu, addr, write)?;
        }
    }

    /// Copy `buf.len()` bytes from user address `addr` (a `copy_from_user`).
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Fault> {
        let backing = self.mm.machine.phys().backing();
        let mut done = 0usize;
        while done < buf.len() {
            let a = addr + done as u64;
            let off = (a % PAGE_SIZE) as usize;
            let n = (PAGE_SIZE as usize - off).min(buf.len() - done);
            let chunk = &mut buf[done..done + n];
            self.access(a, false, |pfn| backing.read(pfn, off, chunk))?;
            done += n;
        }
        Ok(())
    }

    /// Copy `data` to user address `addr` (a `copy_to_user`).
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), Fault> {
        let backing = self.mm.machine.phys().backing();
        let mut done = 0usize;
        while done < data.len() {
            let a = addr + done as u64;
            let off = (a % PAGE_SIZE) as usize;
            let n = (PAGE_SIZE as usize - off).min(data.len() - done);
            let chunk = &data[done..done + n];
            self.access(a, true, |pfn| backing.write(pfn, off, chunk))?;
            done += n;
        }
        Ok(())
    }

    /// 8-byte accesses at scattered addresses, in order (`Some(v)`: store `v`; `None`: a load,
    /// its value discarded), as many as possible in one hold of the TLB gate: what a random
    /// walk does between two looks at the clock. Stops at the first access that faults without
    /// a fix, returning its index and the fault.
    ///
    /// The same accesses as [`Task::write_u64`] and [`Task::read_u64`] one by one, and the
    /// same faults in the same order (the gate is left for each fault and taken again). What
    /// changes is the host's work: entering and leaving the gate are locked instructions, and
    /// each one waits for the store before it (a cache miss, when addresses are random) to
    /// complete, so that one gate per access serialised every miss. Under one hold the stores
    /// overlap, as the host CPU's do. A flush waits for at most one batch (callers keep them
    /// short: tens of accesses), as a shootdown waits for the target CPU to take its IPI.
    /// A word that crosses a page boundary takes the general path ([`Task::write`]).
    pub fn access_words(&self, ops: &[(u64, Option<u64>)]) -> Result<(), (usize, Fault)> {
        let phys = self.mm.machine.phys();
        let backing = phys.backing();
        let mut i = 0;
        // The fault loop's bound, per access (as in `access`).
        let (mut tries, mut faulting) = (0, usize::MAX);
        while i < ops.len() {
            // `Some(true)`: access `i` needs a fault; `Some(false)`: its word crosses a page.
            let stuck = self.mm.with_tlb_gate(self.cpu, || {
                while let Some(&(addr, v)) = ops.get(i) {
                    let off = (addr % PAGE_SIZE) as usize;
                    if off + 8 > PAGE_SIZE as usize {
                        return Some(false);
                    }
                    let Some(pfn) = fault::translate(phys, self.mm.pgd, addr, v.is_some()) else {
                        return Some(true);
                    };
                    match v {
                        Some(v) => backing.write(pfn, off, &v.to_ne_bytes()),
                        None => {
                            let mut w = [0u8; 8];
                            backing.read(pfn, off, &mut w);
                            std::hint::black_box(w);
                        }
                    }
                    i += 1;
                }
                None
            });
            let Some(needs_fault) = stuck else { break };
            let (addr, v) = ops[i];
            if !needs_fault {
                match v {
                    Some(v) => self.write_u64(addr, v),
                    None => self.read_u64(addr).map(|_| ()),
                }
                .map_err(|e| (i, e))?;
                i += 1;
                continue;
            }
            if faulting != i {
                (tries, faulting) = (0, i);
            }
            tries += 1;
            vm_bug_on!(tries > 64, "fault loop at {addr:#x}");
            fault::handle_mm_fault(&self.mm, self.cpu, addr, v.is_some()).map_err(|e| (i, e))?;
        }
        Ok(())
    }

    /// Touch one byte-range's pages: the access pattern of `usemem`'s walk, done page by page.
    /// `step` bytes apart, reading or writing 8-byte words (`value(word_index)` when writing).
    /// Returns the number of words accessed.
    pub fn walk(
        &self,
        start: u64,
        len: u64,
        step: u64,
        write: bool,
        value: impl Fn(u64) -> u64,
    ) -> Result<u64, Fault> {
        let backing = self.mm.machine.phys().backing();
        let step = step.max(8);
        let mut words = 0u64;
        let mut a = start;
        let end = start + len;
        while a < end {
            let page_end = ((a / PAGE_SIZE) + 1) * PAGE_SIZE;
            let stop = page_end.min(end);
            let first = a;
            let n = (stop - first).div_ceil(step);
            let base = first - start;
            self.access(first, write, |pfn| {
                if backing.mode() == crate::config::BackingMode::Sparse {
                    return;
                }
                if first.is_multiple_of(8) && step.is_multiple_of(8) {
                    // Whole words: one 8-byte store or load each.
                    let w0 = (first % PAGE_SIZE) as usize / 8;
                    let w1 = w0 + (n as usize - 1) * (step / 8) as usize + 1;
                    // The walk's index of the page's word 0 (wrapping: before `start`).
                    let page_word = ((first - start) / 8).wrapping_sub(w0 as u64);
                    if write {
                        backing.write_words(pfn, w0..w1, (step / 8) as usize, |w| {
                            value(page_word.wrapping_add(w as u64))
                        });
                    } else {
                        std::hint::black_box(backing.read_words(pfn, w0..w1, (step / 8) as usize));
                    }
                    return;
                }
                let mut x = first;
                while x < stop {
                    let off = (x % PAGE_SIZE) as usize;
                    if off + 8 <= PAGE_SIZE as usize {
                        if write {
                            backing.write(pfn, off, &value((x - start) / 8).to_ne_bytes());
                        } else {
                            let mut w = [0u8; 8];
                            backing.read(pfn, off, &mut w);
                            std::hint::black_box(w);
                        }
                    }
                    // Saturating: a step past the address space (usemem -j -1) ends the walk.
                    x = x.saturating_add(step);
                }
            })?;
            let _ = base;
            words += n;
            a = first.saturating_add(n.saturating_mul(step));
        }
        Ok(words)
    }

    pub fn read_u64(&self, addr: u64) -> Result<u64, Fault> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    pub fn write_u64(&self, addr: u64, v: u64) -> Result<(), Fault> {
        self.write(addr, &v.to_ne_bytes())
    }

    /// Can the page at `addr` be read / written without a SIGSEGV? (Faults it in if so.)
    pub fn probe(&self, addr: u64) -> (bool, bool) {
        let r = self.access(addr, false, |_| ()).is_ok();
        let w = self.access(addr, true, |_| ()).is_ok();
        (r, w)
    }
}
