//! A workload thread's view of its address space: user-space loads and stores that fault like
//! a CPU's.
//!
//! Mirrors what a user access does on x86: the hardware walk (`pgtable::walk`), a page fault
//! on a missing or write-protected entry (`arch/x86/mm/fault.c`, `mm::fault`), and the retry
//! after it. Differences: an access is a call, not an instruction; data moves through the
//! backing (`Backing`); there is no TLB to look up: each translation runs inside its CPU's TLB
//! gate (`tlb.rs`), which a shootdown waits on, so no access sees an entry after its flush.

use std::sync::Arc;

use super::fault::{self, Fault};
use super::Mm;
use crate::addr::{Pfn, PAGE_SIZE};
use crate::cpu::CpuId;

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
        for_each_page_span(addr, buf.len(), |a, off, r| {
            let chunk = &mut buf[r];
            self.access(a, false, |pfn| backing.read(pfn, off, chunk))
        })
    }

    /// Copy `data` to user address `addr` (a `copy_to_user`).
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), Fault> {
        let backing = self.mm.machine.phys().backing();
        for_each_page_span(addr, data.len(), |a, off, r| {
            let chunk = &data[r];
            self.access(a, true, |pfn| backing.write(pfn, off, chunk))
        })
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

/// Walk `len` bytes from user address `addr` one page at a time: `f(address, offset in its
/// page, range of the caller's buffer)`, stopping at the first fault.
fn for_each_page_span(
    addr: u64,
    len: usize,
    mut f: impl FnMut(u64, usize, std::ops::Range<usize>) -> Result<(), Fault>,
) -> Result<(), Fault> {
    let mut done = 0usize;
    while done < len {
        let a = addr + done as u64;
        let off = (a % PAGE_SIZE) as usize;
        let n = (PAGE_SIZE as usize - off).min(len - done);
        f(a, off, done..done + n)?;
        done += n;
    }
    Ok(())
}
