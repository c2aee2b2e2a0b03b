//! The usermm engine as a differential-testing backend: one [`usermm::Mm`] on a small machine,
//! executing [`Op`]s with the semantics [`crate::ops`] fixes for every backend.
//!
//! The machine mirrors the host where that changes observable results: 1 GiB of fully backed
//! memory (data read back is real), the host's `vm.max_map_count` and the THP mode of
//! `/sys/kernel/mm/transparent_hugepage/enabled` (see [`host_like_config`]).
//!
//! # How each op maps onto the engine
//! * **Mmap**: the x86-64 `sys_mmap` check (`offset` not page aligned → `EINVAL`) is done here,
//!   then [`Mm::mmap`] with `MapFile::None` (`MapSource::Anon`, fd −1) or
//!   `MapFile::DevZero`, the offset in pages and the flags verbatim. A non-fixed mapping that
//!   lands outside the arena is unmapped again and reported as [`OpResult::Misplaced`], exactly
//!   as the host child does.
//! * **Munmap / Mprotect / Madvise / Mlock / Munlock**: the engine's entry points; `Ok(0)` or
//!   the errno.
//! * **Read / Write**: page-sized chunks through [`Task::read`] / [`Task::write`] (the engine's
//!   `copy_from_user` / `copy_to_user`, which fault pages in like the host's pipe copies).
//! * **Probe**: per page a one-byte load, and if it succeeded a store of the same byte — the
//!   host's `write(pipe)` + `read(pipe)` pair, so the same faults are taken.
//! * **Maps**: [`Mm::maps`] (the engine's `/proc/<pid>/maps`), parsed, arena lines only.
//! * **Counters**: `minor_faults` is the machine's `pgfault` delta since the backend started
//!   (the machine runs this one address space, and the engine counts a fault only when it
//!   reaches `handle_mm_fault` — as `ru_minflt` does); Rss and `AnonHugePages` come from
//!   [`Mm::smaps_rollup`] (every engine mapping is in the arena).

use std::sync::Arc;

use usermm::config::ThpMode;
use usermm::mm::mmap::{MapFile, MapFileAt};
use usermm::mm::vma::VmFlags;
use usermm::stats::VmItem;
use usermm::{CpuId, Machine, MachineConfig, Mm, Task};
use usermm_host::facts;

use crate::ops::{
    parse_maps, AddressSpace, Counters, MapSource, MremapArgs, Op, OpResult, PageAccess,
    ARENA_BASE, ARENA_END, ARENA_SIZE, EINVAL, PAGE_SIZE,
};

/// The THP mode the host runs with (`/sys/kernel/mm/transparent_hugepage/enabled`), or
/// `Madvise` when that file cannot be read.
pub fn host_thp_mode() -> ThpMode {
    match facts::thp_enabled().as_deref() {
        Some("always") => ThpMode::Always,
        Some("never") => ThpMode::Never,
        _ => ThpMode::Madvise,
    }
}

/// The host's `vm.max_map_count`, or Linux's default 65530 when it cannot be read.
pub fn host_max_map_count() -> u32 {
    facts::max_map_count().unwrap_or(65530)
}

/// A small machine that behaves like the host for the differential tests: 1 GiB, full backing,
/// two CPUs, the host's THP mode and `max_map_count`.
pub fn host_like_config() -> MachineConfig {
    MachineConfig {
        mem: 1 << 30,
        cpus: 2,
        thp: host_thp_mode(),
        max_map_count: host_max_map_count(),
        ..MachineConfig::default()
    }
}

/// The engine as an [`AddressSpace`] (see the module docs).
#[derive(Debug)]
pub struct EngineBackend {
    name: String,
    machine: Arc<Machine>,
    task: Task,
    /// `pgfault` of the machine when this backend was created.
    fault_base: i64,
    /// Faults that `pgfault` counted but that failed (SIGBUS-like: the VMA allowed the access,
    /// the fault handler refused it). `ru_minflt` does not count those.
    failed_faults: i64,
    dropped: bool,
    /// The current process's number.
    slot: u32,
    /// The other process, if one was forked and has not exited.
    other: Option<Parked>,
    /// The break when the backend started (`Op::Brk` offsets are from it).
    brk_base: u64,
}

/// A process that is not current: its task and its fault count so far.
#[derive(Debug)]
struct Parked {
    task: Task,
    slot: u32,
    faults: i64,
    failed_faults: i64,
}

impl EngineBackend {
    /// A backend on a fresh [`host_like_config`] machine.
    pub fn new() -> Result<EngineBackend, String> {
        let machine = Machine::new(host_like_config()).map_err(|e| e.to_string())?;
        EngineBackend::on_machine(&machine)
    }

    /// A backend with a new, empty address space on `machine` (which should run nothing else
    /// while the backend lives: the fault counter is the machine's).
    pub fn on_machine(machine: &Arc<Machine>) -> Result<EngineBackend, String> {
        let cpu = CpuId(0);
        let mm = machine.new_mm(cpu).map_err(|e| e.to_string())?;
        let brk_base = mm.current_brk();
        Ok(EngineBackend {
            name: "engine".to_string(),
            machine: Arc::clone(machine),
            task: Task::new(mm, cpu),
            fault_base: machine.vmstat().get(VmItem::Pgfault),
            failed_faults: 0,
            dropped: false,
            slot: 0,
            other: None,
            brk_base,
        })
    }

    /// Same as [`EngineBackend::on_machine`], with another name for messages.
    pub fn with_name(mut self, name: &str) -> EngineBackend {
        self.name = name.to_string();
        self
    }

    pub fn machine(&self) -> &Arc<Machine> {
        &self.machine
    }

    pub fn mm(&self) -> &Arc<Mm> {
        self.task.mm()
    }

    /// The address space's and the machine's invariants.
    pub fn validate(&self) -> Result<(), String> {
        self.mm().validate()?;
        self.machine.validate()
    }

    fn cpu(&self) -> CpuId {
        self.task.cpu()
    }

    /// After an access at `addr` failed: if the VMA there allows the access, the fault handler
    /// itself failed, and the engine's `pgfault` counted that fault (as Linux's `PGFAULT`
    /// does), while `ru_minflt` does not. Note it, to report minor faults as the host does.
    fn note_failed_access(&mut self, addr: u64, write: bool) {
        let allowed = {
            let tree = self.mm().mmap_read_lock();
            tree.vma_lookup(addr).is_some_and(|v| {
                if write {
                    v.flags.contains(VmFlags::VM_WRITE)
                } else {
                    v.flags.intersects(VmFlags(
                        VmFlags::VM_READ.0 | VmFlags::VM_WRITE.0 | VmFlags::VM_EXEC.0,
                    ))
                }
            })
        };
        if allowed {
            self.failed_faults += 1;
        }
    }

    /// Load `buf.len()` bytes (within one page) at `addr`.
    fn load(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        match self.task.read(addr, buf) {
            Ok(()) => true,
            Err(f) => {
                self.note_failed_access(f.addr, false);
                false
            }
        }
    }

    /// Store `data` (within one page) at `addr`.
    fn store(&mut self, addr: u64, data: &[u8]) -> bool {
        match self.task.write(addr, data) {
            Ok(()) => true,
            Err(f) => {
                self.note_failed_access(f.addr, true);
                false
            }
        }
    }

    /// Populating (MAP_POPULATE/MAP_LOCKED, mlock, MADV_POPULATE_*) stops at the first fault
    /// that fails; the engine's `pgfault` counted that fault, `ru_minflt` does not. In these
    /// tests the only failing faults are SIGBUS faults past the object of a shared `/dev/zero`
    /// mapping made at an offset. Work out from the result (and the VMAs after the op) whether
    /// the op ended on such a fault.
    fn note_failed_populate(&mut self, op: &Op, r: &OpResult) {
        let beyond = |v: &usermm::mm::vma::Vma, s: u64, e: u64| {
            v.shmem_size != 0 && v.pgoff + ((e - v.start) >> 12) > v.shmem_size && s < e
        };
        let rwx = VmFlags(VmFlags::VM_READ.0 | VmFlags::VM_WRITE.0 | VmFlags::VM_EXEC.0);
        let failed = match (op, r) {
            // A populating mmap: the new VMA, looked at before a misplaced one is unmapped.
            (Op::Mmap(a), &OpResult::Ok(addr))
                if (a.flags & crate::ops::MAP_POPULATE != 0 && a.flags & 0x1_0000 == 0)
                    || a.flags & crate::ops::MAP_LOCKED != 0 =>
            {
                let tree = self.mm().mmap_read_lock();
                tree.vma_lookup(addr)
                    .is_some_and(|v| v.flags.intersects(rwx) && beyond(v, v.start, v.end))
            }
            (
                &Op::Madvise {
                    advice: libc::MADV_POPULATE_READ | libc::MADV_POPULATE_WRITE,
                    ..
                },
                &OpResult::Err(libc::EFAULT),
            ) => true,
            (&Op::Mlock { addr, len }, &OpResult::Err(libc::ENOMEM)) => {
                let s = addr & !(PAGE_SIZE - 1);
                let e = addr.saturating_add(len).div_ceil(PAGE_SIZE) * PAGE_SIZE;
                let tree = self.mm().mmap_read_lock();
                // Only a range mapped without holes was locked, and then populated.
                let mut at = s;
                for v in tree.intersecting(s, e) {
                    if v.start > at {
                        break;
                    }
                    at = v.end;
                }
                let skip =
                    VmFlags(VmFlags::VM_IO.0 | VmFlags::VM_PFNMAP.0 | VmFlags::VM_LOCKONFAULT.0);
                at >= e
                    && tree
                        .intersecting(s, e)
                        .filter(|v| !v.flags.intersects(skip))
                        .take_while(|v| v.flags.intersects(rwx))
                        .any(|v| beyond(v, s.max(v.start), e.min(v.end)))
            }
            _ => false,
        };
        if failed {
            self.failed_faults += 1;
        }
    }

    fn errno_result(r: Result<(), usermm::Errno>) -> OpResult {
        match r {
            Ok(()) => OpResult::Ok(0),
            Err(e) => OpResult::Err(e.0),
        }
    }

    /// An [`Op::Mmap`].
    fn do_mmap(&mut self, op: &Op) -> OpResult {
        let Op::Mmap(a) = op else {
            return OpResult::BackendFailure(format!("do_mmap of {op}"));
        };
        let (addr, len, flags) = (a.addr, a.len, a.flags);
        // arch/x86/kernel/sys_x86_64.c: sys_mmap checks the byte offset first.
        if !a.offset.is_multiple_of(PAGE_SIZE) {
            return OpResult::Err(EINVAL);
        }
        let file = match a.source {
            MapSource::Anon => MapFile::None,
            MapSource::DevZero => MapFile::DevZero,
        };
        let cpu = self.cpu();
        let got = match self.mm().mmap(
            cpu,
            addr,
            len,
            a.prot,
            flags,
            MapFileAt {
                file,
                pgoff: a.offset / PAGE_SIZE,
            },
        ) {
            Ok(a) => a,
            Err(e) => return OpResult::Err(e.0),
        };
        let fixed = flags & (crate::ops::MAP_FIXED | crate::ops::MAP_FIXED_NOREPLACE) != 0;
        let rounded = len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let inside = (ARENA_BASE..=ARENA_END).contains(&got) && rounded <= ARENA_END - got;
        self.note_failed_populate(op, &OpResult::Ok(got));
        if !fixed && !inside {
            let _ = self.mm().munmap(cpu, got, len);
            return OpResult::Misplaced { addr: got };
        }
        OpResult::Ok(got)
    }

    /// An [`Op::Mremap`].
    fn do_mremap(&mut self, a: &MremapArgs) -> OpResult {
        let cpu = self.cpu();
        let got = match self
            .mm()
            .mremap(cpu, a.addr, a.old_len, a.new_len, a.flags, a.new_addr)
        {
            Ok(got) => got,
            Err(e) => return OpResult::Err(e.0),
        };
        // Moved out of the arena where the kernel chose: unmapped and misplaced, as the host
        // child reports it.
        let rounded = a.new_len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let inside = (ARENA_BASE..=ARENA_END).contains(&got) && rounded <= ARENA_END - got;
        if !inside && got != a.addr && a.flags & crate::ops::MREMAP_FIXED == 0 {
            let _ = self.mm().munmap(cpu, got, a.new_len);
            return OpResult::Misplaced { addr: got };
        }
        OpResult::Ok(got)
    }

    fn do_read(&mut self, addr: u64, len: u64) -> OpResult {
        if addr.checked_add(len).is_none() {
            return OpResult::Err(EINVAL);
        }
        let mut out = vec![0u8; len as usize];
        let mut off = 0u64;
        while off < len {
            let a = addr + off;
            let n = (PAGE_SIZE - a % PAGE_SIZE).min(len - off);
            let ok = self.load(a, &mut out[off as usize..(off + n) as usize]);
            if !ok {
                return OpResult::Fault { addr: a };
            }
            off += n;
        }
        OpResult::Data(out)
    }

    fn do_write(&mut self, addr: u64, data: &[u8]) -> OpResult {
        let len = data.len() as u64;
        if addr.checked_add(len).is_none() {
            return OpResult::Err(EINVAL);
        }
        let mut off = 0u64;
        while off < len {
            let a = addr + off;
            let n = (PAGE_SIZE - a % PAGE_SIZE).min(len - off);
            if !self.store(a, &data[off as usize..(off + n) as usize]) {
                return OpResult::Fault { addr: a };
            }
            off += n;
        }
        OpResult::Ok(len)
    }

    fn do_probe(&mut self, addr: u64, len: u64) -> OpResult {
        if len == 0 {
            return OpResult::Probe(Vec::new());
        }
        let end = match addr.checked_add(len) {
            Some(e) if len <= ARENA_SIZE => match e.checked_add(PAGE_SIZE - 1) {
                Some(x) => x & !(PAGE_SIZE - 1),
                None => return OpResult::Err(EINVAL),
            },
            _ => return OpResult::Err(EINVAL),
        };
        let mut page = addr & !(PAGE_SIZE - 1);
        let mut pages = Vec::with_capacity(((end - page) / PAGE_SIZE) as usize);
        while page < end {
            let mut b = [0u8; 1];
            let readable = self.load(page, &mut b);
            let writable = readable && self.store(page, &b);
            pages.push(PageAccess {
                addr: page,
                readable,
                writable,
            });
            page += PAGE_SIZE;
        }
        OpResult::Probe(pages)
    }

    fn do_maps(&self) -> OpResult {
        match parse_maps(&self.mm().maps()) {
            Ok(lines) => OpResult::Maps(lines.into_iter().filter(|l| l.in_arena()).collect()),
            Err(e) => OpResult::BackendFailure(format!("engine maps: {e}")),
        }
    }

    /// Make `p` current (the current task is replaced; the caller parks or puts it).
    fn resume(&mut self, p: Parked) -> Task {
        let now = self.machine.vmstat().get(VmItem::Pgfault);
        self.fault_base = now - p.faults;
        self.failed_faults = p.failed_faults;
        self.slot = p.slot;
        std::mem::replace(&mut self.task, p.task)
    }

    /// `Op::Fork`: the engine forks the current `Mm`; the child is parked with no faults yet.
    fn do_fork(&mut self) -> OpResult {
        if self.other.is_some() {
            return OpResult::Err(libc::EAGAIN);
        }
        match self.mm().fork(self.cpu()) {
            Ok(child) => {
                let slot = 1 - self.slot;
                self.other = Some(Parked {
                    task: Task::new(child, self.cpu()),
                    slot,
                    faults: 0,
                    failed_faults: 0,
                });
                OpResult::Ok(u64::from(slot))
            }
            Err(e) => OpResult::Err(e.0),
        }
    }

    fn do_switch(&mut self, to: u32) -> OpResult {
        if to == self.slot {
            return OpResult::Ok(0);
        }
        match self.other.take() {
            Some(p) if p.slot == to => {
                let now = self.machine.vmstat().get(VmItem::Pgfault);
                let (faults, failed_faults, slot) =
                    (now - self.fault_base, self.failed_faults, self.slot);
                let task = self.resume(p);
                self.other = Some(Parked {
                    task,
                    slot,
                    faults,
                    failed_faults,
                });
                OpResult::Ok(0)
            }
            o => {
                self.other = o;
                OpResult::Err(crate::ops::ESRCH)
            }
        }
    }

    /// `Op::Exit`: the current `Mm` is put (torn down); the other process becomes current.
    fn do_exit(&mut self) -> OpResult {
        let Some(p) = self.other.take() else {
            return OpResult::Err(crate::ops::ESRCH);
        };
        let slot = p.slot;
        let old = self.resume(p);
        old.mm().mmput(old.cpu());
        OpResult::Ok(u64::from(slot))
    }

    fn do_brk(&mut self, off: u64) -> OpResult {
        let want = if off == crate::ops::BRK_QUERY {
            0
        } else {
            self.brk_base.wrapping_add(off)
        };
        let got = self.mm().brk(self.cpu(), want);
        OpResult::Ok(got.wrapping_sub(self.brk_base))
    }

    fn do_counters(&self) -> OpResult {
        let faults =
            self.machine.vmstat().get(VmItem::Pgfault) - self.fault_base - self.failed_faults;
        let r = self.mm().smaps_rollup();
        OpResult::Counters(Counters {
            minor_faults: faults.max(0) as u64,
            rss_kb: r.rss_kb,
            anon_huge_kb: r.anon_huge_pages_kb,
            process_rss_kb: r.rss_kb,
            process_anon_huge_kb: r.anon_huge_pages_kb,
        })
    }
}

impl AddressSpace for EngineBackend {
    fn apply(&mut self, op: &Op) -> OpResult {
        let r = self.apply_inner(op);
        if !matches!(op, Op::Mmap(_)) {
            // (mmap notes its own, before a misplaced mapping is removed again)
            self.note_failed_populate(op, &r);
        }
        r
    }

    fn name(&self) -> &str {
        &self.name
    }
}

impl EngineBackend {
    fn apply_inner(&mut self, op: &Op) -> OpResult {
        let cpu = self.cpu();
        match op {
            Op::Mmap(_) => self.do_mmap(op),
            &Op::Munmap { addr, len } => Self::errno_result(self.mm().munmap(cpu, addr, len)),
            &Op::Mprotect { addr, len, prot } => {
                Self::errno_result(self.mm().mprotect(cpu, addr, len, prot))
            }
            &Op::Madvise { addr, len, advice } => {
                Self::errno_result(self.mm().madvise(cpu, addr, len, advice))
            }
            &Op::Mlock { addr, len } => Self::errno_result(self.mm().mlock(cpu, addr, len)),
            &Op::Munlock { addr, len } => Self::errno_result(self.mm().munlock(cpu, addr, len)),
            &Op::Read { addr, len } => self.do_read(addr, len),
            Op::Write { addr, data } => self.do_write(*addr, data),
            &Op::Probe { addr, len } => self.do_probe(addr, len),
            Op::Maps => self.do_maps(),
            Op::Counters => self.do_counters(),
            Op::Mremap(a) => self.do_mremap(a),
            &Op::Brk { off } => self.do_brk(off),
            Op::Fork => self.do_fork(),
            &Op::Switch { proc } => self.do_switch(proc),
            Op::Exit => self.do_exit(),
        }
    }
}

impl Drop for EngineBackend {
    fn drop(&mut self) {
        if !self.dropped {
            self.dropped = true;
            self.task.mm().mmput(self.task.cpu());
            if let Some(p) = self.other.take() {
                p.task.mm().mmput(p.task.cpu());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{MapsLine, PROT_READ, PROT_WRITE};

    #[test]
    fn engine_backend_basics() {
        let mut e = EngineBackend::new().unwrap();
        let a = ARENA_BASE + 0x10000;
        assert_eq!(
            e.apply(&Op::mmap_anon_at(a, 0x3000, PROT_READ | PROT_WRITE)),
            OpResult::Ok(a)
        );
        assert_eq!(
            e.apply(&Op::Maps),
            OpResult::Maps(vec![MapsLine::anon(a, a + 0x3000, "rw-p")])
        );
        assert_eq!(
            e.apply(&Op::Write {
                addr: a + 0xff0,
                data: vec![7; 32]
            }),
            OpResult::Ok(32)
        );
        match e.apply(&Op::Read {
            addr: a + 0xff0,
            len: 32,
        }) {
            OpResult::Data(d) => assert_eq!(d, vec![7; 32]),
            r => panic!("{r}"),
        }
        match e.apply(&Op::Counters) {
            OpResult::Counters(c) => {
                assert_eq!(c.minor_faults, 2);
                assert_eq!(c.rss_kb, 8);
            }
            r => panic!("{r}"),
        }
        assert_eq!(
            e.apply(&Op::Read {
                addr: a + 0x3000,
                len: 1
            }),
            OpResult::Fault { addr: a + 0x3000 }
        );
        // A non-fixed mapping without a hint goes below mmap_base, outside the arena.
        assert!(matches!(
            e.apply(&Op::mmap_anon(0, 0x1000, PROT_READ, 0)),
            OpResult::Misplaced { .. }
        ));
        e.validate().unwrap();
    }
}
