//! will-it-scale's memory tests, written once over [`Task`], on three backends: the engine on
//! the wall clock, the engine in virtual time on a profile's machine, and the host kernel.
//!
//! will-it-scale (Anton Blanchard's) runs one tight loop as N processes or N threads and reports
//! operations per second; kernel mm engineers and the LKP robot judge scalability patches by
//! it. Each test here is its C test's loop, step for step, with `(*iterations)++` as
//! [`Task::count`]; the driver (`run.rs`) is its `main.c` — warm-up, one line a period, the
//! average — and `runtest.py`'s CSV.
//!
//! | test | loop (per iteration: what is counted) |
//! |---|---|
//! | page_fault1 | mmap 128 MiB anonymous, write one byte per page (each page counted), munmap |
//! | mmap1 | mmap + munmap of 128 MiB anonymous |
//! | mmap2 | mmap + munmap of a private mapping of a 128 MiB temporary file |
//! | brk1 | brk one page up and back down (counted 2) |
//! | brk2 | the same above one page sbrk'd first (counted 2) |
//! | malloc1 | malloc + free of 128 MiB (glibc: mmap, a header write, munmap) |
//! | malloc2 | malloc + free of 1 KiB (glibc: no system call once warm) |
//! | tlb_flush2 | mmap 1 MiB anonymous; per page: write, MADV_DONTNEED, read back 0 (counted); munmap |
//!
//! # Files: which tests run and why
//! The engine has no page cache. mmap2 runs: it only maps and unmaps its file, never touching
//! a page, and the engine's stand-in — a shared anonymous object per mapping (`task/engine.rs`)
//! — gives it what the file gives it there, a VMA with an object of its own that never merges
//! with its neighbour (the kernel also takes the file's `i_mmap_rwsem` to link it, a lock of
//! the task's own file, uncontended; the engine has none). tlb_flush1 and tlb_flush3 are
//! refused: their file's pages outlive each mapping (each iteration after the first finds
//! them cached), a read fault maps its neighbours too (fault-around), and a private write
//! copies the cached page — none of which an object that lives and dies with its mapping can
//! show. page_fault2/3 and every test of read, write, lseek, open and friends need the page
//! cache or a file system; the tests of futexes, pipes, signals and the scheduler are not
//! memory management. [`Test::parse`] names what is missing.
//!
//! # Virtual time
//! malloc2 is refused in virtual time: its loop makes no system call and no fault, and no
//! profile prices user-space allocator work, so its iterations would take no virtual time.
//!
//! # The published curve
//! `curve.rs` predicts a published page_fault1 curve on its machine's profile (`reproduce
//! --only will-it-scale`): a validation set, nothing fitted to it.
//!
//! # Sizes
//! [`Params::size`] overrides the tests' 128 MiB (1 MiB for tlb_flush2, 1 KiB for malloc2),
//! for tests of this crate that need a short loop; the command line keeps will-it-scale's.

pub mod curve;
mod run;
mod runtest;

use serde::Serialize;
use usermm::mm::mman::{MADV_DONTNEED, MAP_ANONYMOUS, MAP_PRIVATE, PROT_READ, PROT_WRITE};

use crate::task::{Stop, Task};

pub use self::run::{
    format_lines, run, Backend, Line, Params, WisError, WisRecord, WARMUP_ITERATIONS,
};
pub use self::runtest::{runtest, runtest_csv, RuntestRow};

const PAGE: u64 = 4096;

/// A test this module runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Test {
    PageFault1,
    Mmap1,
    Mmap2,
    Brk1,
    Brk2,
    Malloc1,
    Malloc2,
    TlbFlush2,
}

/// Every will-it-scale test this module does not run, with what it needs that the engine
/// does not have.
const REFUSED: &[(&[&str], &str)] = &[
    (
        &["page_fault2", "page_fault3", "tlb_flush1", "tlb_flush3"],
        "a file page cache (pages that outlive each mapping, fault-around, copy-on-write from \
         a cached page): the engine's file stand-in lives and dies with its mapping",
    ),
    (
        &[
            "read1",
            "read2",
            "read3",
            "read4",
            "pread1",
            "pread2",
            "pread3",
            "write1",
            "pwrite1",
            "pwrite2",
            "pwrite3",
            "lseek1",
            "lseek2",
            "readseek1",
            "readseek2",
            "readseek3",
            "writeseek1",
            "writeseek2",
            "writeseek3",
            "fallocate1",
            "fallocate2",
        ],
        "a file system and its page cache: the engine has neither",
    ),
    (
        &[
            "open1", "open2", "open3", "unlink1", "unlink2", "dup1", "lock1", "lock2",
        ],
        "a file system (open files, directories, file locks): the engine has none",
    ),
    (
        &[
            "context_switch1",
            "eventfd1",
            "futex1",
            "futex2",
            "futex3",
            "futex4",
            "getppid1",
            "pipe1",
            "poll1",
            "poll2",
            "posix_semaphore1",
            "pthread_mutex1",
            "pthread_mutex2",
            "pthread_mutex3",
            "pthread_mutex4",
            "pthread_mutex5",
            "sched_yield",
            "signal1",
            "unix1",
        ],
        "the scheduler, IPC or signals: not memory management, the engine does not model them",
    ),
];

impl Test {
    pub const ALL: [Test; 8] = [
        Test::PageFault1,
        Test::Mmap1,
        Test::Mmap2,
        Test::Brk1,
        Test::Brk2,
        Test::Malloc1,
        Test::Malloc2,
        Test::TlbFlush2,
    ];

    /// The test's name (its C file's).
    pub fn name(self) -> &'static str {
        match self {
            Test::PageFault1 => "page_fault1",
            Test::Mmap1 => "mmap1",
            Test::Mmap2 => "mmap2",
            Test::Brk1 => "brk1",
            Test::Brk2 => "brk2",
            Test::Malloc1 => "malloc1",
            Test::Malloc2 => "malloc2",
            Test::TlbFlush2 => "tlb_flush2",
        }
    }

    /// `testcase_description`, as the C test has it (printed after `testcase:`).
    pub fn description(self) -> &'static str {
        match self {
            Test::PageFault1 => "Anonymous memory page fault",
            Test::Mmap1 => "Anonymous memory mmap/munmap of 128MB",
            Test::Mmap2 => "Separate file mmap/munmap of 128MB",
            Test::Brk1 => "brk increase/decrease of one page",
            Test::Brk2 => "brk unshared increase/decrease of one page",
            Test::Malloc1 => "malloc/free of 128MB",
            Test::Malloc2 => "malloc/free of 1kB",
            Test::TlbFlush2 => "TLB flush of anonymous memory private mapping",
        }
    }

    /// The size the C test uses (`MEMSIZE`, `SIZE`, `MEMORYSIZE`; a page for brk).
    pub fn default_size(self) -> u64 {
        match self {
            Test::Brk1 | Test::Brk2 => PAGE,
            Test::Malloc2 => 1024,
            Test::TlbFlush2 => 1 << 20,
            _ => 128 << 20,
        }
    }

    /// The test named `name`; for a will-it-scale test this module does not run, one line
    /// naming what it needs; otherwise, that the name is unknown.
    pub fn parse(name: &str) -> Result<Test, String> {
        if let Some(t) = Test::ALL.iter().find(|t| t.name() == name) {
            return Ok(*t);
        }
        match REFUSED.iter().find(|(names, _)| names.contains(&name)) {
            Some((_, why)) => Err(format!("{name}: needs {why}")),
            None => Err(format!(
                "{name}: not a will-it-scale test (runs: {})",
                Test::ALL.map(Test::name).join(", ")
            )),
        }
    }

    /// Why this test cannot run in virtual time, if it cannot.
    pub fn virtual_refusal(self) -> Option<&'static str> {
        (self == Test::Malloc2).then_some(
            "malloc2 in virtual time: its loop makes no system call and no fault, and no \
             profile prices user-space allocator work: its iterations would take no virtual time",
        )
    }

    /// The test's loop, on task `t`, until [`Task::count`] says the run is over.
    pub fn body<T: Task>(self, t: &T, size: u64) -> Result<(), Stop> {
        match self {
            Test::PageFault1 => page_fault1(t, size),
            Test::Mmap1 => mmap1(t, size),
            Test::Mmap2 => mmap2(t, size),
            Test::Brk1 => brk_loop(t, size, false),
            Test::Brk2 => brk_loop(t, size, true),
            Test::Malloc1 | Test::Malloc2 => malloc_loop(t, size),
            Test::TlbFlush2 => tlb_flush2(t, size),
        }
    }
}

fn assert_ok<V, E>(r: Result<V, E>, what: &str) -> Result<V, Stop> {
    r.map_err(|_| Stop::Assert(what.to_string()))
}

const RW: u32 = PROT_READ | PROT_WRITE;
const ANON: u32 = MAP_PRIVATE | MAP_ANONYMOUS;

fn page_fault1<T: Task>(t: &T, size: u64) -> Result<(), Stop> {
    loop {
        let c = assert_ok(t.mmap(size, RW, ANON, None), "c != MAP_FAILED")?;
        let mut i = 0;
        while i < size {
            t.write_u8(c + i, 0)?;
            t.count(1)?;
            i += PAGE;
        }
        let _ = t.munmap(c, size);
    }
}

fn mmap1<T: Task>(t: &T, size: u64) -> Result<(), Stop> {
    loop {
        let c = assert_ok(t.mmap(size, RW, ANON, None), "c != MAP_FAILED")?;
        let _ = t.munmap(c, size);
        t.count(1)?;
    }
}

fn mmap2<T: Task>(t: &T, size: u64) -> Result<(), Stop> {
    let f = assert_ok(t.tmpfile(size), "ftruncate(fd, MEMSIZE) == 0")?;
    loop {
        let c = assert_ok(t.mmap(size, RW, MAP_PRIVATE, Some(&f)), "c != MAP_FAILED")?;
        let _ = t.munmap(c, size);
        t.count(1)?;
    }
}

/// brk1 (`sbrk(0)`, then up and down a page) and brk2 (one page `sbrk`'d first).
fn brk_loop<T: Task>(t: &T, page: u64, unshared: bool) -> Result<(), Stop> {
    let mut addr = if unshared {
        assert_ok(t.sbrk(page as i64), "sbrk(page_size) != (void *)-1")? + page
    } else {
        assert_ok(t.sbrk(0), "sbrk(0) != (void *)-1")?
    };
    loop {
        addr += page;
        assert_ok(t.brk(addr), "brk(addr) == 0")?;
        addr -= page;
        assert_ok(t.brk(addr), "brk(addr) == 0")?;
        t.count(2)?;
    }
}

fn malloc_loop<T: Task>(t: &T, size: u64) -> Result<(), Stop> {
    loop {
        let a = assert_ok(t.malloc(size), "addr != NULL")?;
        t.free(a);
        t.count(1)?;
    }
}

fn tlb_flush2<T: Task>(t: &T, size: u64) -> Result<(), Stop> {
    loop {
        // The C test does not check this mmap: a failure is a SIGSEGV at the first store.
        let addr = t.mmap(size, RW, ANON, None).unwrap_or(u64::MAX - PAGE * 2);
        let mut i = 0;
        while i < size {
            t.write_u8(addr + i, 1)?;
            let _ = t.madvise(addr + i, PAGE, MADV_DONTNEED);
            if t.read_u8(addr + i)? != 0 {
                return Err(Stop::Assert("*(addr + i) == 0".into()));
            }
            t.count(1)?;
            i += PAGE;
        }
        let _ = t.munmap(addr, size);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn names_parse_and_refusals_say_what_is_missing() {
        for t in Test::ALL {
            assert_eq!(Test::parse(t.name()), Ok(t));
        }
        let e = Test::parse("page_fault2").unwrap_err();
        assert!(e.starts_with("page_fault2: needs a file page cache"), "{e}");
        assert!(Test::parse("futex1")
            .unwrap_err()
            .contains("not memory management"));
        assert!(Test::parse("nope")
            .unwrap_err()
            .contains("not a will-it-scale test"));
    }
}
