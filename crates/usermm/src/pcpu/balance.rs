//! `pcpu_balance_workfn`: the asynchronous "grim reaper" that destroys surplus free chunks,
//! depopulates isolated chunks (5.14) and keeps `HIGH` empty populated pages for atomic
//! allocations.
//!
//! ```text
//!  pre-5.14 (depopulate off)        5.14 (depopulate on)
//!  1. balance_free(all)              1. balance_free(empty_only = false)
//!  2. balance_populated              2. reclaim_populated      (to_depopulate → sidelined)
//!                                    3. balance_populated
//!                                    4. balance_free(empty_only = true)
//! ```
//!
//! It runs on the allocator's workqueue (the kernel's `system_wq`) with `pcpu_alloc_mutex`, then
//! `pcpu_lock`; the spinlock is dropped around everything that would sleep in the kernel (the
//! page allocator, unmapping, chunk creation and destruction) — here with
//! `SpinLockGuard::unlocked`, the mutex staying held so no chunk can disappear meanwhile.

use crate::sync::SpinLockGuard;

use super::block::PCPU_BITMAP_BLOCK_BITS;
use super::state::PcpuState;
use super::vm::PcpuVm;
use super::{DepopulatePolicy, Pcpu};
use crate::addr::PAGE_SIZE;
use crate::cpu::CpuId;

impl Pcpu {
    /// `pcpu_balance_workfn`.
    #[doc(alias = "pcpu_balance_workfn")]
    pub(crate) fn balance_workfn(&self, cpu: CpuId) {
        // Lock order: pcpu_alloc_mutex -> pcpu_lock.
        let mut vm = self.alloc_mutex.lock();
        let mut st = self.lock.lock();
        st.stats.balance_runs += 1;
        match self.policy {
            DepopulatePolicy::WholeChunk => {
                self.balance_free(&mut vm, &mut st, cpu, false);
                self.balance_populated(&mut vm, &mut st);
            }
            DepopulatePolicy::Partial => {
                // Free first: trimming the pool may make other chunks grow, and gives reclaim
                // the chance to send fully free chunks back for the second pass.
                self.balance_free(&mut vm, &mut st, cpu, false);
                self.reclaim_populated(&mut vm, &mut st, cpu);
                self.balance_populated(&mut vm, &mut st);
                self.balance_free(&mut vm, &mut st, cpu, true);
            }
        }
    }

    /// `pcpu_balance_free`: destroy every fully free chunk but the head of the free slot (with
    /// `empty_only`, only those that have no populated page left).
    #[doc(alias = "pcpu_balance_free")]
    fn balance_free(
        &self,
        vm: &mut PcpuVm,
        st: &mut SpinLockGuard<'_, PcpuState>,
        cpu: CpuId,
        empty_only: bool,
    ) {
        let free_slot = st.layout.free;
        let head = st.lists.first(free_slot);
        let victims: Vec<u32> = st
            .lists
            .iter(free_slot)
            .filter(|&c| c != head && (!empty_only || st.chunk(c).nr_empty_pop_pages == 0))
            .collect();
        if victims.is_empty() {
            return;
        }
        for &c in &victims {
            vm_warn_on!(st.chunk(c).immutable);
            // Off every list: neither allocation nor balance can see it any more.
            st.lists.remove(c);
        }
        for c in victims {
            for (rs, re) in st
                .chunk(c)
                .populated
                .set_ranges(0, st.chunk(c).nr_pages as usize)
            {
                let (rs, re) = (rs as u32, re as u32);
                SpinLockGuard::unlocked(st, || self.depopulate_chunk(vm, cpu, c, rs, re));
                st.chunk_depopulated(c, rs, re);
            }
            st.remove(c);
            self.destroy_backing(vm, c);
        }
    }

    /// `pcpu_reclaim_populated`: for each chunk on to_depopulate, free its empty populated pages
    /// from the highest index down (keeping live pages packed at the front), one batched TLB
    /// flush per chunk; then sideline it, or reintegrate it when it became fully free or when the
    /// global reserve fell below HIGH (to protect atomic allocations).
    #[doc(alias = "pcpu_reclaim_populated")]
    fn reclaim_populated(
        &self,
        vm: &mut PcpuVm,
        st: &mut SpinLockGuard<'_, PcpuState>,
        cpu: CpuId,
    ) {
        let to_depop = st.layout.to_depopulate;
        let sidelined = st.layout.sidelined;
        loop {
            let c = st.lists.first(to_depop);
            if c == super::slots::NIL {
                break;
            }
            vm_warn_on!(st.chunk(c).immutable);
            let nr_pages = st.chunk(c).nr_pages as i64;
            let (mut freed_start, mut freed_end) = (nr_pages, 0i64);
            let mut reintegrate = false;
            let mut end: i64 = -1;
            let mut i: i64 = nr_pages - 1;
            while i >= 0 {
                if st.chunk(c).nr_empty_pop_pages == 0 {
                    break;
                }
                if st.nr_empty_pop_pages < st.high as i64 {
                    reintegrate = true;
                    break;
                }
                let chunk = st.chunk(c);
                let candidate = chunk.md_blocks[i as usize].contig_hint == PCPU_BITMAP_BLOCK_BITS
                    && chunk.populated.test(i as usize);
                if candidate {
                    if end == -1 {
                        end = i;
                    }
                    if i > 0 {
                        i -= 1;
                        continue;
                    }
                    // Page 0 is a candidate: close the run so it covers it.
                    i -= 1;
                }
                if end == -1 {
                    i -= 1;
                    continue;
                }
                let (rs, re) = ((i + 1) as u32, (end + 1) as u32);
                SpinLockGuard::unlocked(st, || self.depopulate_chunk(vm, cpu, c, rs, re));
                st.chunk_depopulated(c, rs, re);
                freed_start = freed_start.min(i + 1);
                freed_end = freed_end.max(end + 1);
                end = -1;
                i -= 1;
            }
            if freed_start < freed_end {
                // pcpu_post_unmap_tlb_flush: one kernel-range flush for the chunk.
                st.stats.tlb_flushes += 1;
            }
            let fully_free = st.chunk(c).free_bytes as u64 == self.unit_size;
            if reintegrate || fully_free {
                st.reintegrate(c);
            } else {
                st.lists.move_to(c, sidelined, false);
            }
        }
    }

    /// `pcpu_balance_populated`: populate up to `HIGH − global empty` pages (`HIGH` after an
    /// atomic failure), filling the most packed chunks first (slots from one page up, sidelined
    /// and free included), creating a chunk when none has unpopulated pages.
    #[doc(alias = "pcpu_balance_populated")]
    fn balance_populated(&self, vm: &mut PcpuVm, st: &mut SpinLockGuard<'_, PcpuState>) {
        let high = st.high as i64;
        'retry: loop {
            let mut nr_to_pop = if st.atomic_alloc_failed {
                st.atomic_alloc_failed = false;
                high
            } else {
                (high - st.nr_empty_pop_pages).clamp(0, high)
            };
            let first_slot = st.layout.size_to_slot(PAGE_SIZE);
            for slot in first_slot..=st.layout.free {
                if nr_to_pop == 0 {
                    break;
                }
                let Some(c) = st.lists.iter(slot).find(|&c| {
                    let ch = st.chunk(c);
                    ch.nr_pages > ch.nr_populated
                }) else {
                    continue;
                };
                let nr_pages = st.chunk(c).nr_pages as usize;
                for (rs, re) in st.chunk(c).populated.clear_ranges(0, nr_pages) {
                    let nr = ((re - rs) as i64).min(nr_to_pop) as u32;
                    let rs = rs as u32;
                    let r = SpinLockGuard::unlocked(st, || self.populate_chunk(vm, c, rs, rs + nr));
                    match r {
                        Ok(()) => {
                            nr_to_pop -= nr as i64;
                            st.chunk_populated(c, rs, rs + nr);
                        }
                        Err(_) => nr_to_pop = 0,
                    }
                    if nr_to_pop == 0 {
                        break;
                    }
                }
            }
            if nr_to_pop > 0 {
                // Ran out of chunks to populate: make one and go again.
                if let Ok((chunk, backing)) = SpinLockGuard::unlocked(st, || self.create_chunk()) {
                    let c = st.insert(chunk);
                    st.stats.chunks_created += 1;
                    self.attach_backing(vm, c, backing);
                    st.relocate(c, None);
                    continue 'retry;
                }
            }
            break;
        }
    }
}
