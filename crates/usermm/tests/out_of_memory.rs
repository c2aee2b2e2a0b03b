//! Out of memory is its own fault outcome (`VM_FAULT_OOM`, [`SegvCode::Oom`]), never an
//! unmapped address; `VM_FAULT_SIGBUS` ([`SegvCode::BusAdrErr`]) comes where Linux gives it.
//!
//! - `overcommitted`: a 64 MiB machine, three threads writing 48 MiB each. Every failed write
//!   is out of memory (not `SEGV_MAPERR`), each one counted as `oom` in vmstat; every page
//!   written keeps its data (`backing=full`); freeing memory lets a failed access succeed when
//!   retried; exit gives every frame back. With THP off and on.
//! - `outcomes`: the four outcomes side by side in one mm, each from its own cause.
//! - `populate`: callers that populate turn the outcomes into `vm_fault_to_errno`'s errnos
//!   (`MADV_POPULATE_WRITE`: `ENOMEM`/`EFAULT`; `mlock`: `EAGAIN`, as
//!   `__mlock_posix_error_return` reports `ENOMEM`).

mod common;

use std::sync::Arc;

use common::*;
use usermm::config::{BackingMode, ThpMode};
use usermm::mm::mmap::*;
use usermm::stats::VmItem;
use usermm::{CpuId, Errno, Machine, Mm, SegvCode, Task, PAGE_SIZE};

const RW: u32 = PROT_READ | PROT_WRITE;
const ANON: u32 = MAP_PRIVATE | MAP_ANONYMOUS;

/// The word a page holds: its own, never zero.
fn word(thread: u64, page: u64) -> u64 {
    0x5a5a_0000_0000_0000 | (thread << 40) | page
}

fn tiny_with(mem: u64, thp: ThpMode, per_vma_lock: bool) -> Arc<Machine> {
    machine_with(|c| {
        c.mem = mem;
        c.cpus = 4;
        c.backing = BackingMode::Full;
        c.thp = thp;
        c.vma.per_vma_lock = per_vma_lock;
    })
}

mod overcommitted {
    use super::*;

    /// What one faulting thread saw.
    #[derive(Debug, Default)]
    struct Seen {
        /// Pages whose write succeeded.
        written: Vec<u64>,
        /// The first address whose write ran out of memory.
        first_oom: Option<u64>,
        oom: u64,
        other: Vec<String>,
    }

    fn run(thp: ThpMode) {
        run_with(thp, false);
    }

    fn run_with(thp: ThpMode, per_vma_lock: bool) {
        const THREADS: u64 = 3;
        const LEN: u64 = 48 << 20;
        let m = tiny_with(64 << 20, thp, per_vma_lock);
        let free0 = free_pages(&m);
        let oom0 = m.vmstat().get(VmItem::Oom);
        let mm = m.new_mm(C0).expect("mm");
        let bases: Vec<u64> = (0..THREADS)
            .map(|_| {
                mm.mmap(C0, 0, LEN, RW, ANON, MapFile::None)
                    .expect("mmap is not limited by memory")
            })
            .collect();
        // Three threads on their own CPUs, each writing one word per page of its 48 MiB.
        let seen: Vec<Seen> = std::thread::scope(|s| {
            let hs: Vec<_> = bases
                .iter()
                .enumerate()
                .map(|(i, &base)| {
                    let t = Task::new(Arc::clone(&mm), CpuId(1 + i as u16));
                    s.spawn(move || {
                        let mut seen = Seen::default();
                        for p in 0..LEN / PAGE_SIZE {
                            let a = base + p * PAGE_SIZE;
                            match t.write_u64(a, word(i as u64, p)) {
                                Ok(()) => seen.written.push(p),
                                Err(f) if f.code == SegvCode::Oom => {
                                    assert_eq!(f.addr, a, "the fault names the address");
                                    assert!(f.is_oom());
                                    seen.oom += 1;
                                    seen.first_oom.get_or_insert(a);
                                }
                                Err(f) => seen.other.push(f.to_string()),
                            }
                        }
                        seen
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("writer")).collect()
        });
        let oom: u64 = seen.iter().map(|s| s.oom).sum();
        let written: usize = seen.iter().map(|s| s.written.len()).sum();
        let msg = format!(
            "thp {thp:?}: {written} pages written, {oom} writes out of memory, {} other faults",
            seen.iter().map(|s| s.other.len()).sum::<usize>()
        );
        eprintln!("{msg}");
        for s in &seen {
            assert!(
                s.other.is_empty(),
                "{msg}: {:?}",
                &s.other[..3.min(s.other.len())]
            );
        }
        assert!(oom > 0, "144 MiB of writes fit a 64 MiB machine? {msg}");
        assert!(
            written > 8 << 10,
            "most of the memory was handed out: {msg}"
        );
        // One `oom` event per fault that ran out of memory, and only those.
        assert_eq!((m.vmstat().get(VmItem::Oom) - oom0) as u64, oom, "{msg}");
        // Rendered under the kernel's name (memcg's `oom` event), not as kills.
        let vmstat = m.vmstat_snapshot().render();
        assert!(
            vmstat.contains(&format!("\noom {}\n", oom + oom0 as u64)),
            "{vmstat}"
        );
        assert!(!vmstat.contains("oom_kill"), "{vmstat}");
        // Every page written holds its word; the rest of each page is still zero.
        let t = Task::new(Arc::clone(&mm), C0);
        for (i, s) in seen.iter().enumerate() {
            for &p in &s.written {
                let a = bases[i] + p * PAGE_SIZE;
                assert_eq!(
                    t.read_u64(a),
                    Ok(word(i as u64, p)),
                    "{msg}: page {p} of {i}"
                );
                assert_eq!(t.read_u64(a + 8), Ok(0), "{msg}: page {p} of {i}");
            }
        }
        mm.validate().expect("validate_mm after the overcommit");
        // Memory freed, the access that ran out of memory succeeds when retried. The memory
        // comes from the thread that wrote the most pages (a thread that started late may have
        // written none: freeing its mapping frees nothing).
        let other = (0..THREADS as usize)
            .max_by_key(|&i| seen[i].written.len())
            .expect("threads");
        let retry = seen
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != other)
            .find_map(|(_, s)| s.first_oom)
            .expect("some other thread ran out of memory");
        assert!(seen[other].written.len() >= 1024, "{msg}");
        mm.munmap(C0, bases[other], LEN).expect("munmap");
        t.write_u64(retry, 7)
            .expect("the retried access has memory now");
        assert_eq!(t.read_u64(retry), Ok(7));
        drop(t);
        exit_and_check(&m, mm, free0);
    }

    #[test]
    fn reports_out_of_memory_keeps_data_and_frees_everything_4k() {
        run(ThpMode::Never);
    }

    #[test]
    fn reports_out_of_memory_keeps_data_and_frees_everything_thp() {
        run(ThpMode::Always);
    }

    /// Regression: a fault under the VMA's own lock (`lock_vma_under_rcu`) that finds no frame
    /// was reported as `SEGV_MAPERR`.
    #[test]
    fn reports_out_of_memory_under_per_vma_locks() {
        run_with(ThpMode::Never, true);
    }
}

mod outcomes {
    use super::*;

    /// Fill the machine: write pages of a big mapping until a write runs out of memory.
    /// Returns the mapping and the address that ran out.
    fn exhaust(mm: &Arc<Mm>, t: &Task) -> (u64, u64) {
        let len = mm.machine().config().mem;
        let a = mm.mmap(C0, 0, len, RW, ANON, MapFile::None).unwrap();
        for p in (a..a + len).step_by(PAGE_SIZE as usize) {
            match t.write_u64(p, p) {
                Ok(()) => {}
                Err(f) => {
                    assert_eq!(f.code, SegvCode::Oom, "{f}");
                    return (a, p);
                }
            }
        }
        panic!("a mapping as large as the machine fit in it");
    }

    #[test]
    fn four_causes_four_outcomes() {
        let m = machine_with(|c| {
            c.mem = 16 << 20;
            c.nr_hugepages = 1;
            c.thp = ThpMode::Never;
        });
        let free0 = free_pages(&m);
        let mm = m.new_mm(C0).unwrap();
        let t = task(&mm);
        // SEGV_MAPERR: nothing mapped there.
        let f = t.read_u64(0x7000_0000).unwrap_err();
        assert_eq!(
            (f.code, f.code.signal()),
            (SegvCode::MapErr, Some("SIGSEGV"))
        );
        // SEGV_ACCERR: a read-only mapping written.
        let ro = mm
            .mmap(C0, 0, PAGE_SIZE, PROT_READ, ANON, MapFile::None)
            .unwrap();
        let f = t.write_u64(ro, 1).unwrap_err();
        assert_eq!(
            (f.code, f.code.signal()),
            (SegvCode::AccErr, Some("SIGSEGV"))
        );
        // BUS_ADRERR: hugetlb pages beyond the pool (mmap reserves nothing here, like
        // MAP_NORESERVE), and a shared /dev/zero mapping beyond its object's size.
        let h = MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB;
        let h1 = mm.mmap(C0, 0, 2 << 20, RW, h, MapFile::None).unwrap();
        let h2 = mm.mmap(C0, 0, 2 << 20, RW, h, MapFile::None).unwrap();
        t.write_u64(h1, 1).expect("the pool's one page");
        let f = t.write_u64(h2, 1).unwrap_err();
        assert_eq!(
            f,
            usermm::Fault {
                addr: h2,
                code: SegvCode::BusAdrErr
            }
        );
        assert_eq!(f.code.signal(), Some("SIGBUS"));
        assert_eq!(f.to_string(), format!("SIGBUS (BUS_ADRERR) at {h2:#x}"));
        let z = mm
            .mmap(
                C0,
                0,
                2 * PAGE_SIZE,
                RW,
                MAP_SHARED,
                MapFileAt {
                    file: MapFile::DevZero,
                    pgoff: 1,
                },
            )
            .unwrap();
        t.write_u64(z, 1).expect("offset 1 < i_size 2");
        let f = t.read_u64(z + PAGE_SIZE).unwrap_err();
        assert_eq!(f.code, SegvCode::BusAdrErr, "offset 2 ≥ i_size 2");
        let oom0 = m.vmstat().get(VmItem::Oom);
        assert_eq!(oom0, 0, "SIGBUS and SIGSEGV are not out of memory");
        // VM_FAULT_OOM: no frame left.
        let (big, at) = exhaust(&mm, &t);
        let f = t.write_u64(at, 1).unwrap_err();
        assert_eq!((f.code, f.code.signal()), (SegvCode::Oom, None));
        assert_eq!(
            f.to_string(),
            format!("out of memory at {at:#x} (VM_FAULT_OOM)")
        );
        assert_eq!(m.vmstat().get(VmItem::Oom), 2, "one per fault that ran out");
        // The other outcomes do not change with memory exhausted.
        assert_eq!(t.read_u64(0x7000_0000).unwrap_err().code, SegvCode::MapErr);
        assert_eq!(t.write_u64(ro, 1).unwrap_err().code, SegvCode::AccErr);
        mm.validate().unwrap();
        mm.madvise(C0, big, m.config().mem, MADV_DONTNEED).unwrap();
        t.write_u64(at, 1).expect("memory again");
        drop(t);
        exit_and_check(&m, mm, free0);
    }
}

mod populate {
    use super::*;

    #[test]
    fn errnos_follow_vm_fault_to_errno() {
        let m = machine_with(|c| {
            c.mem = 16 << 20;
            c.nr_hugepages = 1;
            c.thp = ThpMode::Never;
        });
        let free0 = free_pages(&m);
        let mm = m.new_mm(C0).unwrap();
        let len = m.config().mem;
        let a = mm.mmap(C0, 0, len, RW, ANON, MapFile::None).unwrap();
        assert_eq!(
            mm.madvise(C0, a, len, MADV_POPULATE_WRITE),
            Err(Errno::ENOMEM),
            "VM_FAULT_OOM"
        );
        let oom = m.vmstat().get(VmItem::Oom);
        assert_eq!(
            oom, 1,
            "the populate stopped at its first out-of-memory fault"
        );
        // mlock populates after locking; out of memory there is EAGAIN.
        let b = mm
            .mmap(C0, 0, 64 * PAGE_SIZE, RW, ANON, MapFile::None)
            .unwrap();
        assert_eq!(mm.mlock(C0, b, 64 * PAGE_SIZE), Err(Errno::EAGAIN));
        assert!(mm.maps().lines().any(|l| l.starts_with(&format!("{b:x}-"))));
        // MAP_POPULATE ignores the failure: the mmap succeeds.
        mm.mmap(
            C0,
            0,
            64 * PAGE_SIZE,
            RW,
            ANON | MAP_POPULATE,
            MapFile::None,
        )
        .expect("MAP_POPULATE does not fail the mmap");
        mm.munmap(C0, a, len).unwrap();
        // VM_FAULT_SIGBUS: EFAULT.
        let h = MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB;
        let h1 = mm.mmap(C0, 0, 2 << 20, RW, h, MapFile::None).unwrap();
        let h2 = mm.mmap(C0, 0, 2 << 20, RW, h, MapFile::None).unwrap();
        mm.madvise(C0, h1, 2 << 20, MADV_POPULATE_WRITE).unwrap();
        assert_eq!(
            mm.madvise(C0, h2, 2 << 20, MADV_POPULATE_WRITE),
            Err(Errno::EFAULT)
        );
        exit_and_check(&m, mm, free0);
    }
}
