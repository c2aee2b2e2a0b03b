//! One run of `usermm bench`'s paths but `wis-page-fault1`: its two machines and inputs
//! ([`Run`]), the fresh pass and the warm-up, and one repeat of every path, each sample pushed
//! into the path's [`Samples`] (the parent module says what each path measures and how).

use usermm::config::BackingMode;
use usermm::Machine;
use usermm_host::measure;

use super::engine::{
    engine_free_2_threads, engine_mmap_munmap, engine_populate, engine_read, Engine, Meas,
};
use super::{
    machine_config, scale, vtime_cost, AllSamples, BenchError, BenchOpts, BenchPath, Samples,
    HOST_MAP_SLACK, HPAGE, PAGE,
};
use crate::task::{child, Stamp};

/// One run of every path but `wis-page-fault1`: its machines, sizes and inputs.
pub(super) struct Run<'o> {
    opts: &'o BenchOpts,
    pub(super) size: u64,
    read_size: u64,
    pages: u64,
    pub(super) full: Engine,
    pub(super) sparse: Engine,
    /// One-page mappings per `mmap-munmap-4k` sample.
    pub(super) mmaps: u64,
    /// `random-write-4k`'s page order (empty when not run).
    order: Vec<u32>,
    /// `populate-4k` runs (for itself or for `munmap-4k`).
    populate_4k: bool,
}

/// A machine of `mode` for the bench.
pub(super) fn boot(
    opts: &BenchOpts,
    mode: BackingMode,
    name: &'static str,
) -> Result<Engine, BenchError> {
    let machine = Machine::new(machine_config(opts, mode)?)
        .map_err(|e| BenchError::Machine(name, e.to_string()))?;
    let cpu = machine.cpu(0).expect("cpu 0");
    Ok(Engine { machine, cpu })
}

impl<'o> Run<'o> {
    /// The sizes, both machines, and as many mappings on both sides: the engine's limit, and
    /// the host child's room under its own (it starts with this process's mappings).
    pub(super) fn new(
        opts: &'o BenchOpts,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Self, BenchError> {
        let size = opts.size.next_multiple_of(HPAGE);
        progress("booting the full-backing machine");
        let full = boot(opts, BackingMode::Full, "full-backing")?;
        progress("booting the sparse machine");
        let sparse = boot(opts, BackingMode::Sparse, "sparse")?;
        let mut mmaps = opts.mmaps.min(u64::from(opts.base.max_map_count));
        if opts.host {
            if let Some(room) = measure::map_count_headroom() {
                mmaps = mmaps.min(room.saturating_sub(HOST_MAP_SLACK));
            }
        }
        let order = if opts.wants(BenchPath::RandomWrite4k) {
            scale::random_order(size / PAGE, 0x5eed)
        } else {
            Vec::new()
        };
        Ok(Run {
            opts,
            size,
            read_size: opts.read_size.max(HPAGE).next_multiple_of(HPAGE),
            pages: size / PAGE,
            full,
            sparse,
            mmaps: mmaps.max(1),
            order,
            populate_4k: opts.wants(BenchPath::Populate4k) || opts.wants(BenchPath::Munmap4k),
        })
    }

    fn sides(&self) -> [(&Engine, bool); 2] {
        [(&self.sparse, false), (&self.full, true)]
    }

    /// One sample of a path on each engine machine, and on the host when it runs and the
    /// path has a host side.
    fn sample(
        &self,
        s: &mut Samples,
        engine: impl Fn(&Engine) -> Result<Meas, BenchError>,
        host: Option<&dyn Fn() -> Result<Meas, BenchError>>,
    ) -> Result<(), BenchError> {
        for (e, is_full) in self.sides() {
            s.engine(is_full).push(engine(e)?);
        }
        if let Some(host) = host.filter(|_| self.opts.host) {
            s.host.push(host()?);
        }
        Ok(())
    }

    /// Fresh: each populate path once on a full-backing machine of its own, just booted, whose
    /// frames nobody has owned yet (the host gave them zeroed: nothing is zeroed again).
    /// Warm-up: each path once per engine machine, untimed in the medians; afterwards every
    /// frame of the full machine has had an owner and must be zeroed on allocation, and the
    /// read paths' page-table frames and their metadata (never prefaulted) are resident.
    pub(super) fn warm_up(&self, s: &mut AllSamples) -> Result<(), BenchError> {
        let (opts, size) = (self.opts, self.size);
        for (path, thp, wanted) in [
            (BenchPath::Populate4k, false, self.populate_4k),
            (
                BenchPath::PopulateThp,
                true,
                opts.wants(BenchPath::PopulateThp),
            ),
        ] {
            if !wanted {
                continue;
            }
            let fresh = boot(opts, BackingMode::Full, "fresh full-backing")?;
            s.at(path).full_fresh = Some(engine_populate(&fresh, size, thp)?.0.cpu);
            drop(fresh);
            engine_populate(&self.full, size, thp)?;
            engine_populate(&self.sparse, size, thp)?;
        }
        for (e, _) in self.sides() {
            if opts.wants(BenchPath::HugeZeroRead) {
                engine_read(e, self.read_size, HPAGE, true)?;
            }
            if opts.wants(BenchPath::ZeroRead4k) {
                engine_read(e, size, PAGE, false)?;
            }
            if opts.wants(BenchPath::MmapMunmap4k) {
                engine_mmap_munmap(e, self.mmaps)?;
            }
            if opts.wants(BenchPath::ForkExit) {
                scale::engine_fork_exit(e, scale::FORKS)?;
            }
            if opts.wants(BenchPath::RandomWrite4k) {
                scale::engine_random_writes(e, &self.order)?;
            }
        }
        Ok(())
    }

    /// A repeat of the populate paths and the read walks (`progress` names the repeat).
    pub(super) fn repeat_faults(
        &self,
        s: &mut AllSamples,
        progress: &mut dyn FnMut(&str),
    ) -> Result<(), BenchError> {
        let (opts, size, pages) = (self.opts, self.size, self.pages);
        for (path, munmap, thp, wanted, what) in [
            (
                BenchPath::Populate4k,
                Some(BenchPath::Munmap4k),
                false,
                self.populate_4k,
                "4 KiB populate and munmap",
            ),
            (
                BenchPath::PopulateThp,
                None,
                true,
                opts.wants(BenchPath::PopulateThp),
                "THP populate",
            ),
        ] {
            if !wanted {
                continue;
            }
            progress(what);
            for (e, is_full) in self.sides() {
                let (pop, unmap) = engine_populate(e, size, thp)?;
                s.at(path).engine(is_full).push(pop);
                if let Some(m) = munmap {
                    s.at(m).engine(is_full).push(unmap);
                }
            }
            if opts.host {
                let [cold, warm] = child::populate_twice(size, thp)?;
                s.at(path).push_host(cold.populate, warm.populate, pages);
                if let Some(m) = munmap {
                    s.at(m).host.push(Meas::of(warm.munmap, pages));
                }
            }
        }
        for (path, len, step, thp, what) in [
            (
                BenchPath::HugeZeroRead,
                self.read_size,
                HPAGE,
                true,
                "huge-zero",
            ),
            (BenchPath::ZeroRead4k, size, PAGE, false, "4 KiB zero-page"),
        ] {
            if opts.wants(path) {
                progress(&format!("{what} read faults"));
                let host = || {
                    let (w, _) = child::read_walk(len, step, thp)?;
                    Ok(Meas::of(w.time, w.accesses))
                };
                self.sample(s.at(path), |e| engine_read(e, len, step, thp), Some(&host))?;
            }
        }
        Ok(())
    }

    /// A repeat of the other paths but `bigfree-nodes`.
    pub(super) fn repeat_rest(
        &self,
        s: &mut AllSamples,
        progress: &mut dyn FnMut(&str),
    ) -> Result<(), BenchError> {
        let opts = self.opts;
        for (path, what) in [
            (BenchPath::BigfreeVirtual, "bigfree"),
            (BenchPath::UsememAbVirtual, "usemem --ab"),
        ] {
            if !opts.wants(path) {
                continue;
            }
            progress(&format!("{what}, wall clock and virtual time"));
            let x = s.at(path);
            for virt in [false, true] {
                let ns = match path {
                    BenchPath::BigfreeVirtual => vtime_cost::bigfree_cpu(opts.size, virt)?,
                    _ => vtime_cost::usemem_ab_cpu(opts.read_size, virt)?,
                };
                if virt {
                    x.virtual_run.push(ns);
                } else {
                    x.wall_run.push(ns);
                }
            }
        }
        if opts.wants(BenchPath::Free2Threads) {
            progress("free path, 2 threads");
            let free = |e: &Engine| engine_free_2_threads(e, self.size);
            self.sample(s.at(BenchPath::Free2Threads), free, None)?;
        }
        if opts.wants(BenchPath::MmapMunmap4k) {
            let n = self.mmaps;
            progress(&format!("{n} one-page mmaps, then munmaps"));
            let host = || Ok(Meas::of(child::mmap_munmap_pages(n)?, n));
            let engine = |e: &Engine| engine_mmap_munmap(e, n);
            self.sample(s.at(BenchPath::MmapMunmap4k), engine, Some(&host))?;
        }
        if opts.wants(BenchPath::ForkExit) {
            progress(&format!("{} forks and exits", scale::FORKS));
            let host = || {
                let h = measure::host_fork_exit(scale::FORKS)?;
                let cpu = h.parent_cpu_ns + h.children_cpu_ns;
                let s = Stamp {
                    cpu_ns: cpu,
                    wall_ns: h.wall_ns,
                };
                Ok(Meas::of(s, h.count))
            };
            let engine = |e: &Engine| scale::engine_fork_exit(e, scale::FORKS);
            self.sample(s.at(BenchPath::ForkExit), engine, Some(&host))?;
        }
        if opts.wants(BenchPath::RandomWrite4k) {
            progress("4 KiB write faults in random order");
            let p = s.at(BenchPath::RandomWrite4k);
            let engine = |e: &Engine| scale::engine_random_writes(e, &self.order);
            self.sample(p, engine, None)?;
            if opts.host {
                let [cold, warm] = child::random_writes_twice(&self.order)?;
                p.push_host(cold, warm, self.pages);
            }
        }
        Ok(())
    }

    /// A repeat of `bigfree-nodes`, into `node_runs[clock][nodes]`.
    pub(super) fn repeat_nodes(
        &self,
        s: &mut AllSamples,
        node_runs: &mut [[Vec<scale::NodeRun>; 2]; 2],
        progress: &mut dyn FnMut(&str),
    ) -> Result<(), BenchError> {
        if !self.opts.wants(BenchPath::BigfreeNodes) {
            return Ok(());
        }
        progress("bigfree at 4 and 64 nodes, both clocks");
        for (k, &nodes) in scale::NODES.iter().enumerate() {
            for (v, virt) in [false, true].into_iter().enumerate() {
                let b = scale::bigfree_size(self.size);
                node_runs[v][k].push(scale::bigfree_run(b, nodes, virt)?);
            }
        }
        let last = node_runs[0][1].last().copied().unwrap_or_default();
        s.at(BenchPath::BigfreeNodes).sparse.push(Meas {
            cpu: last.cpu,
            wall: last.wall,
        });
        Ok(())
    }
}
