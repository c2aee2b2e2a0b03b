//! Tests of usemem on the engine: fork sharing, signals, detaching, files.

use std::sync::Arc;

use usermm::config::BackingMode;
use usermm::config::MachineConfig;
use usermm::cpu::CpuId;
use usermm::mm::RssItem;
use usermm::stats::VmItem;
use usermm::Task;

use super::proc::fork_proc;
use super::*;
use crate::usemem::io::Capture;
use crate::usemem::sys::{Access, MapFd, Sys, EINVAL};
use crate::usemem::worker::{Plan, ProcState, MAP_ANONYMOUS, PROT_READ, PROT_WRITE};
use crate::usemem::worker::{MAP_POPULATE, MAP_PRIVATE};

/// usemem's fork shares the parent's pages until one side writes: the child maps every
/// populated page of the parent without a fault of its own, a write on either side copies
/// that one page, and the two exits give every frame back.
#[test]
fn fork_shares_the_preallocation_copy_on_write() {
    let m = Machine::new(MachineConfig {
        mem: 64 << 20,
        cpus: 2,
        backing: BackingMode::Full,
        ..MachineConfig::default()
    })
    .unwrap();
    let before = m.meminfo();
    let p = EnginePlatform::new(&m, Arc::new(Capture::default()), Hooks::default()).unwrap();
    let parent = &p.main;
    let pages = 256u64;
    let len = pages * PAGE;
    let flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE;
    let a = parent
        .mmap(len, PROT_READ | PROT_WRITE, flags, MapFd::Anon, 0)
        .unwrap();
    parent.access(a + 8, Access::Write(7)).unwrap();
    let anon = || m.vmstat().get(VmItem::NrAnonPages);
    assert_eq!(anon(), pages as i64);

    let cpu1 = CpuId(1);
    let (mm, maps) = fork_proc(parent, cpu1).unwrap();
    assert_eq!(maps.len(), 1);
    assert_eq!(maps[0].addr, a);
    let child = EngineSys::new(
        Task::new(Arc::clone(&mm), cpu1),
        Arc::new(EngineProcess {
            mm: Arc::clone(&mm),
            maps: std::sync::Mutex::new(maps),
            short_maps: Default::default(),
            state: ProcState::new(&p_plan(), Some(a), 0),
            left: AtomicUsize::new(1),
        }),
        Arc::clone(&parent.shared),
        1,
    );
    // Shared: the child maps all of them, no page is new, and it reads the parent's data
    // without faulting.
    assert_eq!(mm.rss(RssItem::AnonPages), pages as i64);
    assert_eq!(anon(), pages as i64);
    let faults = m.vmstat().get(VmItem::Pgfault);
    assert_eq!(child.access(a + 8, Access::Read).unwrap(), 7);
    assert_eq!(m.vmstat().get(VmItem::Pgfault), faults);

    // The child's first write to page 0 copies it; the parent keeps its word.
    child.access(a + 8, Access::Write(9)).unwrap();
    assert_eq!(m.vmstat().get(VmItem::Pgfault), faults + 1);
    assert_eq!(anon(), pages as i64 + 1);
    assert_eq!(child.access(a + 8, Access::Read).unwrap(), 9);
    assert_eq!(parent.access(a + 8, Access::Read).unwrap(), 7);
    // A second write to the same page is the child's own page: no fault.
    child.access(a + 16, Access::Write(1)).unwrap();
    assert_eq!(m.vmstat().get(VmItem::Pgfault), faults + 1);
    // The parent's write to a still-shared page copies too (fork made its entry read-only).
    parent.access(a + PAGE, Access::Write(3)).unwrap();
    assert_eq!(anon(), pages as i64 + 2);
    assert_eq!(child.access(a + PAGE, Access::Read).unwrap(), 0);
    assert_eq!(mm.rss(RssItem::AnonPages), pages as i64);
    assert_eq!(parent.mm().rss(RssItem::AnonPages), pages as i64);
    mm.validate().unwrap();
    parent.mm().validate().unwrap();

    // The child exits first: only its two copies go; the parent's pages stay.
    mm.mmput(cpu1);
    assert_eq!(anon(), pages as i64);
    // The parent's exit (EnginePlatform's Platform::exit, an mmput) gives back the rest.
    parent.mm().mmput(CpuId(0));
    assert_eq!(anon(), 0);
    drop(child);
    drop(p);
    let after = m.meminfo();
    assert_eq!(after.page_tables, before.page_tables);
    assert_eq!(after.mem_available, before.mem_available);
    m.validate().unwrap();
}

/// `-E`'s mremap is the engine's: the pages move with the mapping (their data and the
/// rss with them), and the mapping's record follows it.
#[test]
fn mremap_moves_the_pages() {
    let m = Machine::new(MachineConfig {
        mem: 64 << 20,
        cpus: 1,
        backing: BackingMode::Full,
        ..MachineConfig::default()
    })
    .unwrap();
    let p = EnginePlatform::new(&m, Arc::new(Capture::default()), Hooks::default()).unwrap();
    let s = &p.main;
    let len = 16 * PAGE;
    let flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE;
    let a = s
        .mmap(len, PROT_READ | PROT_WRITE, flags, MapFd::Anon, 0)
        .unwrap();
    s.access(a + 3 * PAGE, Access::Write(42)).unwrap();
    let allocs = m.vmstat().get(VmItem::PgallocNormal);
    let n = s.mremap(a, len, 10 * len).unwrap();
    // Nothing was copied: at most the new range's page tables were allocated.
    assert!(m.vmstat().get(VmItem::PgallocNormal) - allocs <= 3);
    assert_eq!(s.access(n + 3 * PAGE, Access::Read).unwrap(), 42);
    assert_eq!(s.mm().rss(RssItem::AnonPages), 16);
    assert!(s.rec_at(a).is_none() || n == a);
    assert_eq!(s.rec_at(n).map(|r| r.len), Some(10 * len));
    // Anonymous memory has no end before the mapping's: the grown part is writable.
    s.access(n + 100 * PAGE, Access::Write(1)).unwrap();
    assert_eq!(s.mremap(a + 1, len, len), Err(EINVAL));
    s.mm().validate().unwrap();
    s.mm().mmput(CpuId(0));
    drop(p);
    assert_eq!(m.vmstat().get(VmItem::NrAnonPages), 0);
    m.validate().unwrap();
}

fn p_plan() -> Plan {
    Plan {
        name: String::new(),
        opts: Default::default(),
        done_bytes: 0,
        fd: MapFd::Opened,
        start_us: None,
        inherited_out: String::new(),
    }
}

/// A SIGUSR1 that comes before the worker reaches its wait is pending, not lost (the
/// write-signal-read CLI test hung so when `kill` beat the worker to its wait).
#[test]
fn a_sigusr1_before_the_wait_ends_it() {
    let u = Usr1::default();
    let seen = u.count();
    u.raise();
    assert_eq!(u.wait(seen), seen + 1);
    // Two before the next wait coalesce into one, as a standard signal's do.
    u.raise();
    u.raise();
    assert_eq!(u.wait(seen + 1), seen + 3);
}
