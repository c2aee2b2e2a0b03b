//! Chunk backing: `mm/percpu-vm.c` (`pcpu_populate_chunk`, `pcpu_depopulate_chunk`,
//! `pcpu_create_chunk`, `pcpu_destroy_chunk`).
//!
//! Populating page index `i` of a chunk takes one frame per unit from [`PhysMem`] — on the
//! unit's CPU, hence from that CPU's node, as `alloc_pages_node(cpu_to_node(cpu))` does — and
//! marks it `PG_percpu`; the unit's bytes live in the chunk's host region (see [`super::region`]).
//! Depopulating frees the frames and discards the page of every unit from the region.
//!
//! What this file owns is protected by `pcpu_alloc_mutex` (the [`PcpuVm`] inside it): the frames
//! of every chunk. Callers hold the mutex and have dropped `pcpu_lock`, as the kernel sleeps in
//! the page allocator there.

use std::sync::Arc;

use super::chunk::PcpuChunk;
use super::region::PcpuRegion;
use super::Pcpu;
use crate::addr::{Order, Pfn, PAGE_SIZE};
use crate::cpu::CpuId;
use crate::error::AllocError;
use crate::page_alloc::meta::PG_PERCPU;
use crate::page_alloc::Gfp;

/// No frame behind this (page, unit).
const NO_FRAME: u32 = u32::MAX;

/// The frames of one chunk: `frames[page × nr_units + unit]`.
#[derive(Debug)]
pub(crate) struct ChunkBacking {
    pub frames: Vec<u32>,
    pub region: Arc<PcpuRegion>,
}

/// What `pcpu_alloc_mutex` protects: every chunk's frames, by chunk-table index.
#[derive(Debug, Default)]
pub(crate) struct PcpuVm {
    pub chunks: Vec<Option<ChunkBacking>>,
    /// Frames of the boot area (first + reserved chunks), `unit_pages × nr_units`.
    pub boot_frames: Vec<u32>,
    /// Frames held in all (P7: `nr_units ×` populated page indexes).
    pub nr_frames: u64,
}

impl PcpuVm {
    pub(crate) fn set(&mut self, idx: u32, b: ChunkBacking) {
        let i = idx as usize;
        if i >= self.chunks.len() {
            self.chunks.resize_with(i + 1, || None);
        }
        self.chunks[i] = Some(b);
    }

    pub(crate) fn get(&self, idx: u32) -> &ChunkBacking {
        self.chunks[idx as usize].as_ref().expect("backed chunk")
    }

    fn get_mut(&mut self, idx: u32) -> &mut ChunkBacking {
        self.chunks[idx as usize].as_mut().expect("backed chunk")
    }

    /// Every frame held: the boot area's, then each chunk's populated (page, unit)s.
    pub(crate) fn frames(&self) -> impl Iterator<Item = Pfn> + '_ {
        self.boot_frames
            .iter()
            .chain(self.chunks.iter().flatten().flat_map(|b| b.frames.iter()))
            .filter(|&&f| f != NO_FRAME)
            .map(|&f| Pfn(u64::from(f)))
    }
}

impl Pcpu {
    /// The CPU (hence node) whose frames back unit `u`: units map 1:1 to possible CPUs.
    #[inline]
    fn unit_cpu(&self, unit: u32) -> CpuId {
        self.cpus
            .get(unit as usize)
            .expect("one unit per possible CPU")
    }

    /// Boot: the frames of the first-chunk area, all populated (`memblock` in the kernel).
    pub(crate) fn populate_boot_area(&self, vm: &mut PcpuVm) -> Result<(), AllocError> {
        let n = self.unit_pages * self.nr_units;
        let mut frames = Vec::with_capacity(n as usize);
        for slot in 0..n {
            let unit = slot % self.nr_units;
            match self
                .phys
                .alloc_pages_node(self.unit_cpu(unit), Order::ZERO, Gfp::KERNEL)
            {
                Ok(pfn) => {
                    self.phys.meta(pfn).set(PG_PERCPU);
                    frames.push(pfn.0 as u32);
                }
                Err(e) => {
                    for &f in &frames {
                        let _ = self.phys.free_pages(CpuId(0), Pfn(f as u64), Order::ZERO);
                    }
                    return Err(e);
                }
            }
        }
        vm.nr_frames += frames.len() as u64;
        vm.boot_frames = frames;
        Ok(())
    }

    /// `pcpu_populate_chunk`: back pages `[rs, re)` of chunk `idx` in every unit. All or
    /// nothing: on failure every frame taken here is given back.
    #[doc(alias = "pcpu_populate_chunk")]
    #[doc(alias = "pcpu_alloc_pages")]
    pub(crate) fn populate_chunk(
        &self,
        vm: &mut PcpuVm,
        idx: u32,
        rs: u32,
        re: u32,
    ) -> Result<(), AllocError> {
        let nr_units = self.nr_units as usize;
        let mut taken: Vec<(usize, Pfn)> = Vec::with_capacity((re - rs) as usize * nr_units);
        for page in rs..re {
            for unit in 0..self.nr_units {
                let slot = page as usize * nr_units + unit as usize;
                debug_assert_eq!(
                    vm.get(idx).frames[slot],
                    NO_FRAME,
                    "page {page} populated twice"
                );
                match self
                    .phys
                    .alloc_pages_node(self.unit_cpu(unit), Order::ZERO, Gfp::KERNEL)
                {
                    Ok(pfn) => taken.push((slot, pfn)),
                    Err(e) => {
                        for (_, pfn) in taken {
                            let _ = self.phys.free_pages(self.unit_cpu(unit), pfn, Order::ZERO);
                        }
                        return Err(e);
                    }
                }
            }
        }
        let b = vm.get_mut(idx);
        for &(slot, pfn) in &taken {
            self.phys.meta(pfn).set(PG_PERCPU);
            b.frames[slot] = pfn.0 as u32;
        }
        vm.nr_frames += taken.len() as u64;
        Ok(())
    }

    /// `pcpu_depopulate_chunk`: free the frames of pages `[rs, re)` in every unit and discard
    /// those pages of the host region. The TLB flush of the kernel range is the caller's
    /// (batched per chunk in reclaim).
    #[doc(alias = "pcpu_depopulate_chunk")]
    #[doc(alias = "pcpu_free_pages")]
    pub(crate) fn depopulate_chunk(&self, vm: &mut PcpuVm, cpu: CpuId, idx: u32, rs: u32, re: u32) {
        let nr_units = self.nr_units as usize;
        let b = vm.get_mut(idx);
        let mut freed = 0u64;
        for page in rs..re {
            for unit in 0..nr_units {
                let slot = page as usize * nr_units + unit;
                let f = std::mem::replace(&mut b.frames[slot], NO_FRAME);
                if vm_warn_on!(f == NO_FRAME) {
                    continue;
                }
                let r = self.phys.free_pages(cpu, Pfn(f as u64), Order::ZERO);
                vm_warn_on!(r.is_err());
                freed += 1;
            }
        }
        for unit in 0..nr_units {
            let start = unit as u64 * self.unit_size + rs as u64 * PAGE_SIZE;
            b.region
                .discard(start as usize, ((re - rs) as u64 * PAGE_SIZE) as usize);
        }
        vm.nr_frames -= freed;
    }

    /// `pcpu_create_chunk`: a new empty chunk with its own host region (the vm areas) and an
    /// empty frame table. The caller inserts it under `pcpu_lock` and calls
    /// [`Pcpu::attach_backing`].
    #[doc(alias = "pcpu_create_chunk")]
    pub(crate) fn create_chunk(&self) -> std::io::Result<(PcpuChunk, ChunkBacking)> {
        let len = (self.unit_size * self.nr_units as u64) as usize;
        let region = Arc::new(PcpuRegion::new(len)?);
        let chunk = PcpuChunk::new_dynamic(self.unit_pages, Arc::clone(&region), 0);
        let frames = vec![NO_FRAME; (self.unit_pages * self.nr_units) as usize];
        Ok((chunk, ChunkBacking { frames, region }))
    }

    /// Record the frame table of a chunk just inserted at `idx`.
    pub(crate) fn attach_backing(&self, vm: &mut PcpuVm, idx: u32, b: ChunkBacking) {
        vm.set(idx, b);
    }

    /// `pcpu_destroy_chunk`, backing part: drop the (empty) frame table and the region.
    #[doc(alias = "pcpu_destroy_chunk")]
    pub(crate) fn destroy_backing(&self, vm: &mut PcpuVm, idx: u32) {
        let b = vm.chunks[idx as usize].take().expect("backed chunk");
        vm_bug_on!(
            b.frames.iter().any(|&f| f != NO_FRAME),
            "destroying a populated chunk"
        );
    }

    /// Count the frames a dynamic chunk holds (P7).
    pub(crate) fn frames_held(&self, vm: &PcpuVm, idx: u32) -> u64 {
        vm.get(idx)
            .frames
            .iter()
            .filter(|&&f| f != NO_FRAME)
            .count() as u64
    }
}
