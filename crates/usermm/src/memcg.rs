//! Memory cgroups, as far as the percpu allocator sees them: `mkdir` allocates a cgroup's percpu
//! objects in the kernel's order and sizes, `rmdir` frees them after the css/RCU deferral, and a
//! dying cgroup can be pinned.
//!
//! Mirrors the percpu side of `kernel/cgroup/cgroup.c` (`cgroup_create`, `css_create`,
//! `cgroup_destroy_locked`, `css_release`, `css_free_rwork_fn`), `kernel/cgroup/rstat.c`,
//! `kernel/sched/psi.c` and `mm/memcontrol.c` (`mem_cgroup_alloc`, `memcg_online_kmem`,
//! `mem_cgroup_free`). It exists to drive [`crate::pcpu`] the way 11 000 `mkdir`s do (seed 004).
//!
//! # Life cycle
//! ```text
//!  mkdir ──▶ online: cgroup core objects, then each css (memory, then the implicit perf_event),
//!            each css allocated, linked and onlined in turn (memory's online allocates the objcg)
//!  rmdir ──▶ dying (nr_dying_descendants++ on the parent); refs killed
//!  grace period 1 ─▶ offline done: objcg and cgroup-bpf refcounts freed
//!  grace period 2 ─▶ css_free of memory and perf_event: their refcounts, stats, per-node stats
//!  grace period 3 ─▶ the cgroup itself: self refcount, psi, rstat — gone, dying count drops
//! ```
//! [`MemCgroups::grace_period`] makes one RCU grace period (plus the work items it unblocks)
//! elapse for every dying cgroup, in the order they were removed; a pinned cgroup (a charged page,
//! a socket…) stops after the first, keeping its whole memcg footprint — the production pattern
//! of the seed's cover letter. A parent cannot go past the first stage while it has children.
//!
//! # Recipes
//! [`MemcgRecipe`] lists what one cgroup allocates, in order, with sizes and alignments per unit:
//! [`RecipeEra::V2021`] is a 5.10–5.12 kernel (two full `memcg_vmstats_percpu` copies holding every
//! node stat and vm event, `lruvec_stat_local` + `lruvec_stat_cpu` per node), [`RecipeEra::Modern`]
//! a 6.x/7.0 kernel (one cache-line-aligned `memcg_vmstats_percpu` with subset arrays,
//! `lruvec_stats_percpu` per node, rstat per css). The memcg's own statistics are allocated with
//! `GFP_KERNEL_ACCOUNT` and charged to the *parent* (`memory.stat` "percpu"); refcounts and
//! cgroup-core objects are not accounted.
//!
//! # Locks
//! The caller serialises `mkdir`/`rmdir`/`grace_period` (`&mut self`: the kernel's
//! `cgroup_mutex`); each percpu call takes the allocator's own locks.
//! `cgroup_mutex -> pcpu_alloc_mutex -> pcpu_lock`.
//!
//! # Differences from Linux
//! - Only the percpu footprint is modelled: no tasks, no charging of pages, no hierarchy limits,
//!   no cgroup v1. Controllers are fixed: `memory` (from `+memory`) and the implicit `perf_event`.
//! - Grace periods are explicit steps, not time; the free work items of one stage run in a fixed
//!   order (objcg before bpf; memory's css before perf_event's).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;

use crate::cpu::CpuId;
use crate::error::Errno;
use crate::page_alloc::Gfp;
use crate::pcpu::{PcpuAllocator, PcpuPtr};

/// Which kernel's `mem_cgroup` layout to allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RecipeEra {
    /// v5.10–v5.12, the kernels of the seed.
    V2021,
    /// v6.x / v7.0.
    Modern,
}

/// After which deferral stage an object is freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FreeStage {
    /// Grace period 1: offline (`obj_cgroup_release`, `cgroup_bpf_release`).
    Offline,
    /// Grace period 2: `css_free_rwork_fn` of the memory and perf_event css.
    CssFree,
    /// Grace period 3: `css_free_rwork_fn` of the cgroup's self css.
    CgroupFree,
}

const NR_STAGES: u8 = 3;

/// One percpu object of a cgroup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PcpuObject {
    /// The kernel field it is (`memcg->vmstats_percpu`, …).
    pub name: &'static str,
    /// Bytes per unit.
    pub size: u32,
    pub align: u32,
    /// One per NUMA node (`for_each_node`).
    pub per_node: bool,
    /// `GFP_KERNEL_ACCOUNT`: charged to the parent memcg.
    pub accounted: bool,
    /// When it is freed after `rmdir`, and its rank within that stage.
    pub freed: FreeStage,
    pub free_rank: u8,
}

impl PcpuObject {
    /// `name`, `size` bytes per unit: aligned to 8 (a `long`), one per cgroup, not accounted,
    /// freed with the css and first in its stage until the methods below say otherwise.
    const fn new(name: &'static str, size: u32) -> Self {
        PcpuObject {
            name,
            size,
            align: 8,
            per_node: false,
            accounted: false,
            freed: FreeStage::CssFree,
            free_rank: 0,
        }
    }

    /// Aligned to `align` bytes (`__alloc_percpu`'s `align`).
    const fn align(self, align: u32) -> Self {
        Self { align, ..self }
    }

    /// One per NUMA node (allocated in a `for_each_node` loop).
    const fn per_node(self) -> Self {
        Self {
            per_node: true,
            ..self
        }
    }

    /// Allocated with `GFP_KERNEL_ACCOUNT`: charged to the parent memcg.
    const fn accounted(self) -> Self {
        Self {
            accounted: true,
            ..self
        }
    }

    /// Freed at `stage`, `rank`-th within it.
    const fn freed(self, stage: FreeStage, rank: u8) -> Self {
        Self {
            freed: stage,
            free_rank: rank,
            ..self
        }
    }
}

/// What one memory cgroup allocates from percpu, in allocation order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemcgRecipe {
    pub era: RecipeEra,
    pub objects: Vec<PcpuObject>,
}

/// `NR_VM_NODE_STAT_ITEMS` of a 5.12 x86-64 kernel (LRU lists, slab, isolated, workingset,
/// mapped/file/dirty/writeback/shmem/THP counters, vmscan, foll_pin, kernel stack, page tables,
/// swapcache).
pub const NR_VM_NODE_STAT_ITEMS_2021: u32 = 39;
/// `MEMCG_NR_STAT` in 5.12: the node items plus swap, sock and percpu.
pub const MEMCG_NR_STAT_2021: u32 = NR_VM_NODE_STAT_ITEMS_2021 + 3;
/// `NR_VM_EVENT_ITEMS` of a typical 5.12 distro config (NUMA, THP, compaction, balloon, swap
/// readahead). The config-dependent quantity of the 2021 recipe, and its calibration knob.
pub const NR_VM_EVENT_ITEMS_2021: u32 = 96;

impl MemcgRecipe {
    pub fn for_era(era: RecipeEra) -> Self {
        match era {
            RecipeEra::V2021 => Self::v2021(),
            RecipeEra::Modern => Self::modern(),
        }
    }

    /// The 5.12 recipe with the default event count.
    pub fn v2021() -> Self {
        Self::v2021_with(NR_VM_EVENT_ITEMS_2021)
    }

    /// The 5.12 recipe with `nr_vm_event_items` vm events in each `memcg_vmstats_percpu`.
    ///
    /// `memcg_vmstats_percpu` is `{ long stat[MEMCG_NR_STAT]; unsigned long
    /// events[NR_VM_EVENT_ITEMS]; unsigned long nr_page_events; unsigned long targets[2]; }`,
    /// allocated twice (`vmstats_local`, `vmstats_percpu`).
    pub fn v2021_with(nr_vm_event_items: u32) -> Self {
        use FreeStage::*;
        let vmstats = 8 * (MEMCG_NR_STAT_2021 + nr_vm_event_items + 1 + 2);
        let node_items = NR_VM_NODE_STAT_ITEMS_2021;
        Self {
            era: RecipeEra::V2021,
            objects: vec![
                // cgroup_create
                PcpuObject::new("cgrp->self.refcnt", 8).freed(CgroupFree, 0),
                PcpuObject::new("cgrp->rstat_cpu", 64).freed(CgroupFree, 2),
                PcpuObject::new("cgrp->psi.pcpu", 128)
                    .align(64)
                    .freed(CgroupFree, 1),
                PcpuObject::new("cgrp->bpf.refcnt", 8).freed(Offline, 1),
                // css_create(memory): mem_cgroup_alloc, css refcnt, online (objcg)
                PcpuObject::new("memcg->vmstats_local", vmstats)
                    .accounted()
                    .freed(CssFree, 6),
                PcpuObject::new("memcg->vmstats_percpu", vmstats)
                    .accounted()
                    .freed(CssFree, 5),
                PcpuObject::new("pn->lruvec_stat_local", 8 * node_items)
                    .per_node()
                    .accounted()
                    .freed(CssFree, 4),
                PcpuObject::new("pn->lruvec_stat_cpu", 4 * node_items)
                    .align(4)
                    .per_node()
                    .accounted()
                    .freed(CssFree, 3),
                PcpuObject::new("memcg->cgwb_domain.completions", 4)
                    .align(4)
                    .freed(CssFree, 1),
                PcpuObject::new("memcg->css.refcnt", 8).freed(CssFree, 0),
                PcpuObject::new("objcg->refcnt", 8).freed(Offline, 0),
                // css_create(perf_event)
                PcpuObject::new("perf_cgroup->info", 16).freed(CssFree, 8),
                PcpuObject::new("perf_cgroup->css.refcnt", 8).freed(CssFree, 7),
            ],
        }
    }

    /// The v7.0 recipe: the percpu objects one memory cgroup allocates on a v7.0 kernel
    /// (`mem_cgroup_alloc`, `css_create` of each controller), as listed below.
    pub fn modern() -> Self {
        use FreeStage::*;
        Self {
            era: RecipeEra::Modern,
            objects: vec![
                // cgroup_create
                PcpuObject::new("cgrp->self.refcnt", 8).freed(CgroupFree, 0),
                PcpuObject::new("cgrp->rstat_base_cpu", 160).freed(CgroupFree, 3),
                PcpuObject::new("cgrp->self.rstat_cpu", 32).freed(CgroupFree, 2),
                PcpuObject::new("cgrp->psi->pcpu", 128)
                    .align(64)
                    .freed(CgroupFree, 1),
                PcpuObject::new("cgrp->bpf.refcnt", 8).freed(Offline, 1),
                // css_create(memory)
                PcpuObject::new("memcg->vmstats_percpu", 1216)
                    .align(64)
                    .accounted()
                    .freed(CssFree, 5),
                PcpuObject::new("pn->lruvec_stats_percpu", 528)
                    .per_node()
                    .accounted()
                    .freed(CssFree, 4),
                PcpuObject::new("memcg->cgwb_domain.completions", 4)
                    .align(4)
                    .freed(CssFree, 3),
                PcpuObject::new("memcg->css.refcnt", 8).freed(CssFree, 0),
                PcpuObject::new("memcg->css.rstat_cpu", 32).freed(CssFree, 1),
                PcpuObject::new("objcg->refcnt", 8).freed(Offline, 0),
                // css_create(perf_event)
                PcpuObject::new("perf_cgroup->info", 32).freed(CssFree, 7),
                PcpuObject::new("perf_cgroup->css.refcnt", 8).freed(CssFree, 6),
            ],
        }
    }

    /// Bytes per unit one cgroup requests (sizes rounded to 4, no alignment padding).
    pub fn bytes_per_unit(&self, nr_nodes: usize) -> u64 {
        self.objects
            .iter()
            .map(|o| {
                o.size.next_multiple_of(4) as u64 * if o.per_node { nr_nodes as u64 } else { 1 }
            })
            .sum()
    }

    /// The charge of one accounted object (`pcpu_obj_full_size`): its size in every unit, plus
    /// (modern) one `obj_cgroup` pointer per 4-byte fragment.
    fn charge(&self, size: u32, nr_cpus: usize) -> i64 {
        let extra = match self.era {
            RecipeEra::V2021 => 0,
            RecipeEra::Modern => size as i64 / 4 * 8,
        };
        size as i64 * nr_cpus as i64 + extra
    }
}

/// A cgroup handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct CgId(u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CgState {
    Online,
    /// Removed; `stages_done` deferral stages have run.
    Dying {
        stages_done: u8,
    },
}

/// One live object: recipe index, node, pointer, memcg charged.
#[derive(Debug, Clone, Copy)]
struct LiveObject {
    obj: u16,
    ptr: PcpuPtr,
    charged_to: Option<CgId>,
}

#[derive(Debug)]
struct MemCgroup {
    name: String,
    parent: Option<CgId>,
    /// Children not yet freed (online or dying).
    nr_children: u32,
    nr_online_children: u32,
    nr_dying_descendants: u32,
    state: CgState,
    pins: u32,
    objects: Vec<LiveObject>,
    /// `memory.stat` "percpu": bytes charged to this memcg by its children's accounted objects.
    percpu_charged: i64,
}

/// Counts for reports (`cgroup.stat` of the root plus totals).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct MemcgCounts {
    pub nr_online: u64,
    pub nr_dying: u64,
    pub nr_pinned: u64,
    pub nr_created: u64,
    pub nr_freed: u64,
    /// Live percpu objects of all cgroups.
    pub nr_objects: u64,
    /// Bytes per unit those objects request.
    pub bytes_per_unit: u64,
    pub grace_periods: u64,
}

/// The cgroup tree (cgroup v2 with `+memory` in every `subtree_control`).
#[derive(Debug)]
pub struct MemCgroups {
    pcpu: Arc<PcpuAllocator>,
    recipe: MemcgRecipe,
    nr_nodes: usize,
    nr_cpus: usize,
    cgroups: Vec<Option<MemCgroup>>,
    by_path: HashMap<String, CgId>,
    /// Removed cgroups not yet freed, in removal order.
    dying: VecDeque<CgId>,
    root: CgId,
    counts: MemcgCounts,
}

impl MemCgroups {
    /// The root cgroup (its percpu objects exist from boot and are not modelled).
    pub fn new(pcpu: Arc<PcpuAllocator>, recipe: MemcgRecipe, nr_nodes: usize) -> Self {
        let nr_cpus = pcpu.nr_units();
        let root = MemCgroup {
            name: String::new(),
            parent: None,
            nr_children: 0,
            nr_online_children: 0,
            nr_dying_descendants: 0,
            state: CgState::Online,
            pins: 0,
            objects: Vec::new(),
            percpu_charged: 0,
        };
        let mut by_path = HashMap::new();
        by_path.insert(String::new(), CgId(0));
        Self {
            pcpu,
            recipe,
            nr_nodes: nr_nodes.max(1),
            nr_cpus,
            cgroups: vec![Some(root)],
            by_path,
            dying: VecDeque::new(),
            root: CgId(0),
            counts: MemcgCounts::default(),
        }
    }

    pub fn root(&self) -> CgId {
        self.root
    }

    pub fn recipe(&self) -> &MemcgRecipe {
        &self.recipe
    }

    pub fn allocator(&self) -> &Arc<PcpuAllocator> {
        &self.pcpu
    }

    fn cg(&self, id: CgId) -> Option<&MemCgroup> {
        self.cgroups.get(id.0 as usize).and_then(|c| c.as_ref())
    }

    fn cg_mut(&mut self, id: CgId) -> &mut MemCgroup {
        self.cgroups[id.0 as usize].as_mut().expect("live cgroup")
    }

    fn path_of(&self, parent: CgId, name: &str) -> String {
        let p = self.cg(parent).map(|c| c.name.as_str()).unwrap_or("");
        if p.is_empty() {
            name.to_string()
        } else {
            format!("{p}/{name}")
        }
    }

    /// The online cgroup at `path` ("a/b"), if any.
    pub fn lookup(&self, path: &str) -> Option<CgId> {
        self.by_path.get(path).copied()
    }

    /// `mkdir parent/name`: create the cgroup and allocate its percpu objects in the kernel's
    /// order. `EEXIST`, `ENOENT` (parent not online), `ENOMEM` (everything allocated so far is
    /// freed again, as the kernel's error unwinding does).
    #[doc(alias = "cgroup_mkdir")]
    pub fn mkdir(&mut self, cpu: CpuId, parent: CgId, name: &str) -> Result<CgId, Errno> {
        match self.cg(parent) {
            Some(p) if p.state == CgState::Online => {}
            _ => return Err(Errno::ENOENT),
        }
        let path = self.path_of(parent, name);
        if self.by_path.contains_key(&path) {
            return Err(Errno::EEXIST);
        }
        let mut objects = Vec::with_capacity(self.recipe.objects.len() + self.nr_nodes);
        for (i, o) in self.recipe.objects.iter().enumerate() {
            let copies = if o.per_node { self.nr_nodes } else { 1 };
            for _node in 0..copies {
                let gfp = if o.accounted {
                    Gfp::ACCOUNT
                } else {
                    Gfp::KERNEL
                };
                match self
                    .pcpu
                    .alloc_gfp(cpu, o.size as usize, o.align as usize, gfp)
                {
                    Ok(ptr) => objects.push(LiveObject {
                        obj: i as u16,
                        ptr,
                        charged_to: o.accounted.then_some(parent),
                    }),
                    Err(e) => {
                        for lo in objects.iter().rev() {
                            let _ = self.pcpu.free(cpu, lo.ptr);
                        }
                        return Err(e.into());
                    }
                }
            }
        }
        let mut charge = 0;
        for lo in &objects {
            if lo.charged_to.is_some() {
                charge += self
                    .recipe
                    .charge(self.recipe.objects[lo.obj as usize].size, self.nr_cpus);
            }
        }
        let id = match self.cgroups.iter().position(|c| c.is_none()) {
            Some(i) => CgId(i as u32),
            None => {
                self.cgroups.push(None);
                CgId((self.cgroups.len() - 1) as u32)
            }
        };
        self.counts.nr_objects += objects.len() as u64;
        self.counts.bytes_per_unit += objects.iter().map(|o| o.ptr.size() as u64).sum::<u64>();
        self.cgroups[id.0 as usize] = Some(MemCgroup {
            name: path.clone(),
            parent: Some(parent),
            nr_children: 0,
            nr_online_children: 0,
            nr_dying_descendants: 0,
            state: CgState::Online,
            pins: 0,
            objects,
            percpu_charged: 0,
        });
        let p = self.cg_mut(parent);
        p.nr_children += 1;
        p.nr_online_children += 1;
        p.percpu_charged += charge;
        self.by_path.insert(path, id);
        self.counts.nr_online += 1;
        self.counts.nr_created += 1;
        Ok(id)
    }

    /// `rmdir`: the cgroup becomes dying; its objects are freed by later grace periods.
    /// `EBUSY` with online children, `ENOENT` if not online (or the root).
    #[doc(alias = "cgroup_rmdir")]
    #[doc(alias = "cgroup_destroy_locked")]
    pub fn rmdir(&mut self, id: CgId) -> Result<(), Errno> {
        let Some(c) = self.cg(id) else {
            return Err(Errno::ENOENT);
        };
        if c.state != CgState::Online || id == self.root {
            return Err(Errno::ENOENT);
        }
        if c.nr_online_children > 0 {
            return Err(Errno::EBUSY);
        }
        let (name, parent) = (c.name.clone(), c.parent);
        self.by_path.remove(&name);
        self.cg_mut(id).state = CgState::Dying { stages_done: 0 };
        if let Some(p) = parent {
            self.cg_mut(p).nr_online_children -= 1;
        }
        let mut a = parent;
        while let Some(p) = a {
            let pc = self.cg_mut(p);
            pc.nr_dying_descendants += 1;
            a = pc.parent;
        }
        self.dying.push_back(id);
        self.counts.nr_online -= 1;
        self.counts.nr_dying += 1;
        Ok(())
    }

    /// Take a reference on a cgroup's css (a charged page, a socket): once dying, it cannot get
    /// past offline until [`Self::unpin`].
    pub fn pin(&mut self, id: CgId) -> Result<(), Errno> {
        if self.cg(id).is_none() {
            return Err(Errno::ENOENT);
        }
        let c = self.cg_mut(id);
        c.pins += 1;
        if c.pins == 1 {
            self.counts.nr_pinned += 1;
        }
        Ok(())
    }

    pub fn unpin(&mut self, id: CgId) -> Result<(), Errno> {
        match self.cg(id) {
            Some(c) if c.pins > 0 => {}
            _ => return Err(Errno::EINVAL),
        }
        let c = self.cg_mut(id);
        c.pins -= 1;
        if c.pins == 0 {
            self.counts.nr_pinned -= 1;
        }
        Ok(())
    }

    /// One RCU grace period, and the release/free work it unblocks: each dying cgroup that can
    /// advances one stage, in removal order, freeing that stage's objects in the kernel's order.
    /// Returns the number of objects freed.
    #[doc(alias = "synchronize_rcu")]
    #[doc(alias = "css_free_rwork_fn")]
    pub fn grace_period(&mut self, cpu: CpuId) -> usize {
        self.counts.grace_periods += 1;
        let mut freed = 0;
        let queue: Vec<CgId> = self.dying.iter().copied().collect();
        for id in queue {
            let c = self.cg(id).expect("dying cgroup is live");
            let CgState::Dying { stages_done } = c.state else {
                continue;
            };
            // Past offline only when nothing holds the css: no pin, no child left.
            if stages_done >= 1 && (c.pins > 0 || c.nr_children > 0) {
                continue;
            }
            let stage = match stages_done {
                0 => FreeStage::Offline,
                1 => FreeStage::CssFree,
                _ => FreeStage::CgroupFree,
            };
            freed += self.free_stage(cpu, id, stage);
            let done = stages_done + 1;
            if done == NR_STAGES {
                self.release(id);
            } else {
                self.cg_mut(id).state = CgState::Dying { stages_done: done };
            }
        }
        freed
    }

    /// Grace periods until every dying cgroup is freed or stuck on a pin. Returns objects freed.
    pub fn synchronize(&mut self, cpu: CpuId) -> usize {
        let mut total = 0;
        loop {
            let before = (self.dying.len(), total);
            total += self.grace_period(cpu);
            if (self.dying.len(), total) == before {
                return total;
            }
        }
    }

    fn free_stage(&mut self, cpu: CpuId, id: CgId, stage: FreeStage) -> usize {
        let recipe = &self.recipe;
        let c = self.cgroups[id.0 as usize].as_mut().expect("live cgroup");
        let mut mine: Vec<(u8, usize, LiveObject)> = Vec::new();
        c.objects.retain(|lo| {
            let o = &recipe.objects[lo.obj as usize];
            if o.freed == stage {
                mine.push((o.free_rank, mine.len(), *lo));
                false
            } else {
                true
            }
        });
        // By rank; per-node copies keep node order.
        mine.sort_by_key(|&(rank, seq, _)| (rank, seq));
        let n = mine.len();
        for (_, _, lo) in mine {
            let r = self.pcpu.free(cpu, lo.ptr);
            vm_warn_on!(r.is_err());
            if let Some(to) = lo.charged_to {
                let size = self.recipe.objects[lo.obj as usize].size;
                let ch = self.recipe.charge(size, self.nr_cpus);
                if let Some(Some(m)) = self.cgroups.get_mut(to.0 as usize) {
                    m.percpu_charged -= ch;
                }
            }
            self.counts.nr_objects -= 1;
            self.counts.bytes_per_unit -= lo.ptr.size() as u64;
        }
        n
    }

    /// The last stage ran: the cgroup is gone.
    fn release(&mut self, id: CgId) {
        let c = self.cgroups[id.0 as usize].take().expect("live cgroup");
        debug_assert!(c.objects.is_empty());
        if c.pins > 0 {
            self.counts.nr_pinned -= 1;
        }
        self.dying.retain(|&d| d != id);
        if let Some(p) = c.parent {
            self.cg_mut(p).nr_children -= 1;
        }
        let mut a = c.parent;
        while let Some(p) = a {
            let pc = self.cg_mut(p);
            pc.nr_dying_descendants -= 1;
            a = pc.parent;
        }
        self.counts.nr_dying -= 1;
        self.counts.nr_freed += 1;
    }

    /// `cgroup.stat` `nr_dying_descendants`.
    pub fn nr_dying_descendants(&self, id: CgId) -> Option<u32> {
        self.cg(id).map(|c| c.nr_dying_descendants)
    }

    /// `memory.stat` "percpu" of a memcg, in bytes.
    pub fn memory_stat_percpu(&self, id: CgId) -> Option<i64> {
        self.cg(id).map(|c| c.percpu_charged)
    }

    pub fn counts(&self) -> MemcgCounts {
        self.counts
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::config::MachineConfig;
    use crate::machine::Machine;

    fn setup(era: RecipeEra) -> (Arc<Machine>, MemCgroups) {
        let cfg = MachineConfig {
            mem: 64 << 20,
            cpus: 4,
            ..Default::default()
        };
        let m = Machine::new(cfg.clone()).unwrap();
        let pcpu = Arc::new(PcpuAllocator::new(&cfg.pcpu, m.cpus().clone(), m.phys_arc()).unwrap());
        (m, MemCgroups::new(pcpu, MemcgRecipe::for_era(era), 1))
    }

    const C0: CpuId = CpuId(0);

    #[test]
    fn recipes_have_the_reference_footprints() {
        // 2021: ≈ 2.9 KiB per unit on one node; modern ≈ 2.2 KiB (the sums of the two recipes).
        let old = MemcgRecipe::v2021().bytes_per_unit(1);
        let new = MemcgRecipe::modern().bytes_per_unit(1);
        assert!((2800..3600).contains(&old), "2021 recipe {old} B");
        assert!((2100..2300).contains(&new), "modern recipe {new} B");
        assert_eq!(MemcgRecipe::modern().bytes_per_unit(2) - new, 528);
    }

    #[test]
    fn mkdir_rmdir_and_the_three_grace_periods() {
        for era in [RecipeEra::V2021, RecipeEra::Modern] {
            let (_m, mut cg) = setup(era);
            let pcpu = Arc::clone(cg.allocator());
            let start = pcpu.stats().counters.nr_cur_alloc;
            let top = cg.mkdir(C0, cg.root(), "percpu_test").unwrap();
            let a = cg.mkdir(C0, top, "cg_1").unwrap();
            assert_eq!(cg.mkdir(C0, top, "cg_1"), Err(Errno::EEXIST));
            let n = cg.recipe().objects.len() as u64;
            assert_eq!(pcpu.stats().counters.nr_cur_alloc - start, 2 * n);
            assert!(
                cg.memory_stat_percpu(top).unwrap() > 0,
                "accounted objects charge the parent"
            );
            assert_eq!(cg.rmdir(top), Err(Errno::EBUSY));
            cg.rmdir(a).unwrap();
            assert_eq!(cg.nr_dying_descendants(top), Some(1));
            assert_eq!(
                cg.grace_period(C0),
                2,
                "offline frees the objcg and bpf refs"
            );
            assert!(cg.grace_period(C0) > 0);
            assert!(cg.grace_period(C0) > 0);
            assert_eq!(cg.nr_dying_descendants(top), Some(0));
            assert_eq!(cg.memory_stat_percpu(top), Some(0));
            assert_eq!(pcpu.stats().counters.nr_cur_alloc - start, n);
            assert!(cg.lookup("percpu_test/cg_1").is_none());
            cg.mkdir(C0, top, "cg_1").unwrap();
            pcpu.validate().unwrap();
        }
    }

    #[test]
    fn a_pinned_dying_cgroup_keeps_its_memcg_footprint() {
        let (_m, mut cg) = setup(RecipeEra::V2021);
        let top = cg.mkdir(C0, cg.root(), "t").unwrap();
        let a = cg.mkdir(C0, top, "a").unwrap();
        cg.pin(a).unwrap();
        cg.rmdir(a).unwrap();
        cg.synchronize(C0);
        assert_eq!(cg.counts().nr_dying, 1);
        assert_eq!(
            cg.counts().nr_objects,
            2 * cg.recipe().objects.len() as u64 - 2
        );
        cg.rmdir(top).unwrap();
        cg.synchronize(C0);
        assert_eq!(
            cg.counts().nr_dying,
            2,
            "the parent waits for its pinned child"
        );
        cg.unpin(a).unwrap();
        cg.synchronize(C0);
        assert_eq!(cg.counts().nr_dying, 0);
        assert_eq!(cg.counts().nr_objects, 0);
        cg.allocator().validate_settled().unwrap();
    }
}
