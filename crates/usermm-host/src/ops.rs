//! The backend-neutral vocabulary of the differential tests: the Linux address-space ABI as
//! data.
//!
//! One [`Op`] is one thing a program can do to its address space: a memory-management system call
//! (`mmap`, `munmap`, `mprotect`, `madvise`, `mlock`, `munlock`), a load or store, an accessibility
//! probe, or an observation (`/proc/self/maps`, fault and RSS counters). A backend implements
//! [`AddressSpace`] and answers every op with an [`OpResult`]. Two backends exist: the real kernel
//! ([`crate::HostBackend`], a forked child process) and the engine (`usermm-diff`'s
//! `EngineBackend`, written against this module). Comparing two results, and driving two
//! backends through one op sequence, is `usermm-diff`'s job; this module only fixes what every
//! backend must answer.
//!
//! # Addresses and the arena
//! Every address in an op is an **absolute** virtual address (`u64`). Tests work inside the arena
//! `[ARENA_BASE, ARENA_END)`, 4 GiB at 48 TiB, where nothing else of the host process lives. Ops may
//! name addresses outside the arena (the errno oracle needs `addr 0` or `TASK_SIZE`), but an op
//! that *changes* memory outside the arena has undefined results: on the host it may damage the
//! child process, which is then reported as [`OpResult::BackendFailure`].
//!
//! # What each op returns (both backends must follow these rules)
//! | op | success | failure |
//! |---|---|---|
//! | `Mmap` | `Ok(address)` | `Err(errno)`; `Misplaced` (see below) |
//! | `Munmap`, `Mprotect`, `Madvise`, `Mlock`, `Munlock` | `Ok(0)` | `Err(errno)` |
//! | `Read` | `Data(bytes)` (`len` bytes) | `Fault { addr }` |
//! | `Write` | `Ok(data.len())` | `Fault { addr }` |
//! | `Probe` | `Probe(pages)` | — |
//! | `Maps` | `Maps(lines)`: the `/proc/self/maps` lines that intersect the arena, in address order | — |
//! | `Counters` | `Counters(..)` | — |
//! | `Mremap` | `Ok(new address)` | `Err(errno)` |
//! | `Brk` | `Ok(returned break − base)` (never fails: a refusal returns the old break) | — |
//! | `Fork` | `Ok(child's process number)` | `Err(EAGAIN)` when [`MAX_PROCS`] already live |
//! | `Switch` | `Ok(0)` | `Err(ESRCH)`: no such live process |
//! | `Exit` | `Ok(process number now current)` | `Err(ESRCH)`: the last process cannot exit |
//!
//! Any op may also return [`OpResult::BackendFailure`] when the backend itself broke (the host
//! child died, a protocol error); that never compares equal to anything.
//!
//! * **Mmap** passes `flags` and `prot` to the kernel verbatim (nothing is added: an anonymous map
//!   must carry `MAP_ANONYMOUS` itself, see [`Op::mmap_anon`]). [`MapSource::DevZero`] maps an fd
//!   of `/dev/zero` opened `O_RDWR` (the usemem default, an anonymous VMA that `/proc/self/maps`
//!   still names `/dev/zero`); [`MapSource::Anon`] passes fd `-1`. **Placement:** with
//!   `MAP_FIXED` or `MAP_FIXED_NOREPLACE` the address is the op's. Without them `addr` is a hint:
//!   the backend calls mmap with that hint, and if the mapping lands outside the arena it is
//!   unmapped again and the result is [`OpResult::Misplaced`] (the hint was not honoured; where a
//!   non-fixed mapping goes after a refused hint is not part of the comparison).
//! * **Read** and **Write** walk the range page by page in address order. A page is readable
//!   (writable) iff a user-mode load (store) there would not raise SIGSEGV/SIGBUS. `Read` returns
//!   the data only if every page is readable, otherwise `Fault { addr }` with `addr` the first byte
//!   of the range inside the first unreadable page. `Write` stores into each writable page in
//!   order and stops at the first non-writable one: the bytes before it **are written**, and the
//!   result is `Fault { addr }` (first byte of the range inside that page). The accesses are real
//!   accesses: a read of an untouched private page maps the zero page, a write allocates a page,
//!   and both count as faults. A zero-length `Read`/`Write` touches nothing (`Data([])`/`Ok(0)`);
//!   a range that wraps around the address space is `Err(EINVAL)`.
//! * **Probe** reports every page that intersects `[addr, addr+len)` (page-aligned addresses). It
//!   is a real load of one byte per page followed, if the load succeeded, by a store of the same
//!   byte value: the data never changes, but a writable untouched page gets allocated (a read
//!   fault then a write fault, exactly as a program doing `*p = *p` would). x86-64 has no
//!   write-only pages, so an unreadable page is reported as not writable. At most `ARENA_SIZE`
//!   bytes may be probed at once; a larger or wrapping range is `Err(EINVAL)`.
//! * **Counters** are counted from the moment the backend was created; see [`Counters`]. They
//!   are the current process's: a forked child counts from its fork.
//! * **Processes.** A backend starts with process 0. [`Op::Fork`] forks the current process
//!   (the child gets the free number, 0 or 1); ops then act on the current process until an
//!   [`Op::Switch`]. [`Op::Exit`] ends the current process's use of the arena — the engine
//!   tears its `Mm` down; the host child unmaps the whole arena and stops serving (the process
//!   itself lingers until the backend is dropped, which no arena observation can tell from an
//!   exit) — and makes the other process current.
//! * **Brk** results are offsets from the process's break at start, so that the host's
//!   (randomised, malloc-moved) heap and the engine's fixed one compare; ops never ask for a
//!   break below that base, which on the host would free the child's own heap.
//!
//! Nothing here is `unsafe`; the host side keeps all of that in the modules `lib.rs` lists
//! (`backend/` serves these ops).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

// ---------------------------------------------------------------------------------------------
// Linux ABI constants (x86-64 values, taken from libc)
// ---------------------------------------------------------------------------------------------

/// The base page size.
pub const PAGE_SIZE: u64 = 4096;
/// The PMD-level (transparent huge page) size.
pub const HPAGE_SIZE: u64 = 2 << 20;

/// First byte of the test arena (48 TiB: far from the heap, libraries, stacks and mmap_base).
pub const ARENA_BASE: u64 = 0x3000_0000_0000;
/// Size of the test arena (4 GiB).
pub const ARENA_SIZE: u64 = 1 << 32;
/// First byte past the test arena.
pub const ARENA_END: u64 = ARENA_BASE + ARENA_SIZE;

pub const PROT_NONE: u32 = libc::PROT_NONE as u32;
pub const PROT_READ: u32 = libc::PROT_READ as u32;
pub const PROT_WRITE: u32 = libc::PROT_WRITE as u32;
pub const PROT_EXEC: u32 = libc::PROT_EXEC as u32;

pub const MAP_SHARED: u32 = libc::MAP_SHARED as u32;
pub const MAP_PRIVATE: u32 = libc::MAP_PRIVATE as u32;
pub const MAP_SHARED_VALIDATE: u32 = libc::MAP_SHARED_VALIDATE as u32;
pub const MAP_FIXED: u32 = libc::MAP_FIXED as u32;
pub const MAP_ANONYMOUS: u32 = libc::MAP_ANONYMOUS as u32;
pub const MAP_GROWSDOWN: u32 = libc::MAP_GROWSDOWN as u32;
pub const MAP_LOCKED: u32 = libc::MAP_LOCKED as u32;
pub const MAP_NORESERVE: u32 = libc::MAP_NORESERVE as u32;
pub const MAP_POPULATE: u32 = libc::MAP_POPULATE as u32;
pub const MAP_HUGETLB: u32 = libc::MAP_HUGETLB as u32;
pub const MAP_FIXED_NOREPLACE: u32 = libc::MAP_FIXED_NOREPLACE as u32;

pub const MADV_NORMAL: i32 = libc::MADV_NORMAL;
pub const MADV_RANDOM: i32 = libc::MADV_RANDOM;
pub const MADV_SEQUENTIAL: i32 = libc::MADV_SEQUENTIAL;
pub const MADV_WILLNEED: i32 = libc::MADV_WILLNEED;
pub const MADV_DONTNEED: i32 = libc::MADV_DONTNEED;
pub const MADV_FREE: i32 = libc::MADV_FREE;
pub const MADV_HUGEPAGE: i32 = libc::MADV_HUGEPAGE;
pub const MADV_NOHUGEPAGE: i32 = libc::MADV_NOHUGEPAGE;
pub const MADV_COLD: i32 = libc::MADV_COLD;
pub const MADV_PAGEOUT: i32 = libc::MADV_PAGEOUT;
pub const MADV_POPULATE_READ: i32 = libc::MADV_POPULATE_READ;
pub const MADV_POPULATE_WRITE: i32 = libc::MADV_POPULATE_WRITE;

pub const MREMAP_MAYMOVE: u32 = libc::MREMAP_MAYMOVE as u32;
pub const MREMAP_FIXED: u32 = libc::MREMAP_FIXED as u32;
pub const MREMAP_DONTUNMAP: u32 = 4;

/// [`Op::Brk`]'s `off` that asks `brk(0)`: a query (0 is below every `start_brk`, so the
/// kernel answers with the current break).
pub const BRK_QUERY: u64 = u64::MAX;

/// Processes a backend can hold at once (the first and one forked from it; see [`Op::Fork`]).
pub const MAX_PROCS: u32 = 2;

pub const EPERM: i32 = libc::EPERM;
pub const ESRCH: i32 = libc::ESRCH;
pub const EBADF: i32 = libc::EBADF;
pub const EAGAIN: i32 = libc::EAGAIN;
pub const ENOMEM: i32 = libc::ENOMEM;
pub const EACCES: i32 = libc::EACCES;
pub const EFAULT: i32 = libc::EFAULT;
pub const EEXIST: i32 = libc::EEXIST;
pub const EINVAL: i32 = libc::EINVAL;
pub const EOPNOTSUPP: i32 = libc::EOPNOTSUPP;

/// The symbolic name of an errno value this harness is likely to meet.
pub fn errno_name(errno: i32) -> Option<&'static str> {
    Some(match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENFILE => "ENFILE",
        libc::EMFILE => "EMFILE",
        libc::ENOSPC => "ENOSPC",
        libc::ENOSYS => "ENOSYS",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        _ => return None,
    })
}

// ---------------------------------------------------------------------------------------------
// Ops
// ---------------------------------------------------------------------------------------------

/// What backs an [`Op::Mmap`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapSource {
    /// fd `-1`; the op's flags should contain `MAP_ANONYMOUS`.
    Anon,
    /// An fd of `/dev/zero` opened `O_RDWR` (with `MAP_PRIVATE`: anonymous memory that
    /// `/proc/self/maps` names `/dev/zero`, and that does not merge with its neighbours).
    DevZero,
}

/// The arguments of an [`Op::Mmap`]: `mmap(addr, len, prot, flags, fd(source), offset)`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmapArgs {
    pub addr: u64,
    pub len: u64,
    /// `PROT_*`, passed verbatim.
    pub prot: u32,
    /// `MAP_*`, passed verbatim.
    pub flags: u32,
    pub source: MapSource,
    /// The byte offset into the file.
    pub offset: u64,
}

impl fmt::Display for MmapArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "mmap({:#x}, {:#x}, prot={:#x}, flags={:#x}, {:?}, off={:#x})",
            self.addr, self.len, self.prot, self.flags, self.source, self.offset
        )
    }
}

/// The arguments of an [`Op::Mremap`]: `mremap(addr, old_len, new_len, flags, new_addr)`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct MremapArgs {
    pub addr: u64,
    pub old_len: u64,
    pub new_len: u64,
    /// `MREMAP_*`, passed verbatim.
    pub flags: u32,
    pub new_addr: u64,
}

impl fmt::Display for MremapArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "mremap({:#x}, {:#x}, {:#x}, flags={:#x}, {:#x})",
            self.addr, self.old_len, self.new_len, self.flags, self.new_addr
        )
    }
}

/// One operation on an address space. Addresses are absolute (see the module docs).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `mmap(addr, len, prot, flags, fd(source), offset)`; prot and flags are passed verbatim.
    Mmap(MmapArgs),
    /// `munmap(addr, len)`.
    Munmap { addr: u64, len: u64 },
    /// `mprotect(addr, len, prot)`.
    Mprotect { addr: u64, len: u64, prot: u32 },
    /// `madvise(addr, len, advice)`.
    Madvise { addr: u64, len: u64, advice: i32 },
    /// `mlock(addr, len)`.
    Mlock { addr: u64, len: u64 },
    /// `munlock(addr, len)`.
    Munlock { addr: u64, len: u64 },
    /// Load `len` bytes from `addr`.
    Read { addr: u64, len: u64 },
    /// Store `data` at `addr`.
    Write { addr: u64, data: Vec<u8> },
    /// Per page of `[addr, addr+len)`: readable? writable?
    Probe { addr: u64, len: u64 },
    /// The `/proc/self/maps` lines inside the arena.
    Maps,
    /// Fault and RSS counters.
    Counters,
    /// `mremap(addr, old_len, new_len, flags, new_addr)`.
    Mremap(MremapArgs),
    /// `brk(base + off)` where `base` is the process's break when the backend started (or
    /// `brk(0)` for [`BRK_QUERY`]); the result is the returned break minus `base`.
    Brk { off: u64 },
    /// `fork()` of the current process: the child shares the arena copy-on-write. The current
    /// process goes on executing ops; the result is the child's process number.
    Fork,
    /// Make process `proc` the one later ops act on.
    Switch { proc: u32 },
    /// The current process exits; the other one becomes current (its number is the result).
    Exit,
}

impl Op {
    /// A private anonymous mapping: `flags = MAP_PRIVATE | MAP_ANONYMOUS | extra_flags`.
    pub fn mmap_anon(addr: u64, len: u64, prot: u32, extra_flags: u32) -> Op {
        Op::Mmap(MmapArgs {
            addr,
            len,
            prot,
            flags: MAP_PRIVATE | MAP_ANONYMOUS | extra_flags,
            source: MapSource::Anon,
            offset: 0,
        })
    }

    /// A private anonymous mapping placed exactly at `addr` with `MAP_FIXED_NOREPLACE`.
    pub fn mmap_anon_at(addr: u64, len: u64, prot: u32) -> Op {
        Op::mmap_anon(addr, len, prot, MAP_FIXED_NOREPLACE)
    }

    /// A private mapping of `/dev/zero` (usemem's default): `flags = MAP_PRIVATE | extra_flags`.
    pub fn mmap_dev_zero(addr: u64, len: u64, prot: u32, extra_flags: u32) -> Op {
        Op::Mmap(MmapArgs {
            addr,
            len,
            prot,
            flags: MAP_PRIVATE | extra_flags,
            source: MapSource::DevZero,
            offset: 0,
        })
    }

    /// The op's name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Mmap(_) => "mmap",
            Op::Munmap { .. } => "munmap",
            Op::Mprotect { .. } => "mprotect",
            Op::Madvise { .. } => "madvise",
            Op::Mlock { .. } => "mlock",
            Op::Munlock { .. } => "munlock",
            Op::Read { .. } => "read",
            Op::Write { .. } => "write",
            Op::Probe { .. } => "probe",
            Op::Maps => "maps",
            Op::Counters => "counters",
            Op::Mremap(_) => "mremap",
            Op::Brk { .. } => "brk",
            Op::Fork => "fork",
            Op::Switch { .. } => "switch",
            Op::Exit => "exit",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Mmap(args) => args.fmt(f),
            Op::Munmap { addr, len } => write!(f, "munmap({addr:#x}, {len:#x})"),
            Op::Mprotect { addr, len, prot } => {
                write!(f, "mprotect({addr:#x}, {len:#x}, prot={prot:#x})")
            }
            Op::Madvise { addr, len, advice } => {
                write!(f, "madvise({addr:#x}, {len:#x}, advice={advice})")
            }
            Op::Mlock { addr, len } => write!(f, "mlock({addr:#x}, {len:#x})"),
            Op::Munlock { addr, len } => write!(f, "munlock({addr:#x}, {len:#x})"),
            Op::Read { addr, len } => write!(f, "read({addr:#x}, {len:#x})"),
            Op::Write { addr, data } => write!(f, "write({addr:#x}, {} bytes)", data.len()),
            Op::Probe { addr, len } => write!(f, "probe({addr:#x}, {len:#x})"),
            Op::Maps => f.write_str("maps"),
            Op::Counters => f.write_str("counters"),
            Op::Mremap(args) => args.fmt(f),
            Op::Brk { off } if *off == BRK_QUERY => f.write_str("brk(0)"),
            Op::Brk { off } => write!(f, "brk(base + {off:#x})"),
            Op::Fork => f.write_str("fork"),
            Op::Switch { proc } => write!(f, "switch to process {proc}"),
            Op::Exit => f.write_str("exit"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------------

/// Accessibility of one page (see [`Op::Probe`]).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageAccess {
    /// Page-aligned address.
    pub addr: u64,
    pub readable: bool,
    pub writable: bool,
}

/// Fault and memory counters of an address space, counted from the backend's creation.
///
/// The differential comparison looks at `minor_faults`, `rss_kb` and `anon_huge_kb`; the
/// `process_*` fields are informational (the host child also maps the whole test process it was
/// forked from).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Minor page faults since the backend started (host: `getrusage(RUSAGE_SELF).ru_minflt` of
    /// the child, minus its value when the child became ready).
    pub minor_faults: u64,
    /// Resident memory of the mappings inside the arena, in kB (host: the sum of `Rss:` over the
    /// arena entries of `/proc/self/smaps`).
    pub rss_kb: u64,
    /// `AnonHugePages:` of the mappings inside the arena, in kB.
    pub anon_huge_kb: u64,
    /// `Rss:` of the whole process (host: `/proc/self/smaps_rollup`). Not compared.
    pub process_rss_kb: u64,
    /// `AnonHugePages:` of the whole process. Not compared.
    pub process_anon_huge_kb: u64,
}

/// The answer of a backend to one [`Op`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum OpResult {
    /// The syscall's return value (the address for mmap, 0 otherwise; `data.len()` for Write).
    Ok(u64),
    /// The syscall failed with this errno.
    Err(i32),
    /// The bytes a Read returned.
    Data(Vec<u8>),
    /// The access would have raised SIGSEGV/SIGBUS at `addr` (see the module docs).
    Fault { addr: u64 },
    /// One entry per page probed.
    Probe(Vec<PageAccess>),
    /// The maps lines intersecting the arena, unnormalised (see [`normalize_maps`]).
    Maps(Vec<MapsLine>),
    /// Counter values.
    Counters(Counters),
    /// A non-fixed mmap landed at `addr`, outside the arena; the mapping was removed again.
    Misplaced { addr: u64 },
    /// The backend itself failed (e.g. the host child died); never equal to anything.
    BackendFailure(String),
}

impl OpResult {
    /// `Some(v)` for `Ok(v)`.
    pub fn ok(&self) -> Option<u64> {
        match self {
            OpResult::Ok(v) => Some(*v),
            _ => None,
        }
    }

    /// `Some(errno)` for `Err(errno)`.
    pub fn errno(&self) -> Option<i32> {
        match self {
            OpResult::Err(e) => Some(*e),
            _ => None,
        }
    }

    /// True for [`OpResult::BackendFailure`].
    pub fn is_backend_failure(&self) -> bool {
        matches!(self, OpResult::BackendFailure(_))
    }
}

fn fmt_errno(e: i32) -> String {
    match errno_name(e) {
        Some(n) => n.to_string(),
        None => format!("errno {e}"),
    }
}

impl fmt::Display for OpResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpResult::Ok(v) => write!(f, "Ok({v:#x})"),
            OpResult::Err(e) => write!(f, "Err({})", fmt_errno(*e)),
            OpResult::Data(d) => write!(f, "Data({} bytes)", d.len()),
            OpResult::Fault { addr } => write!(f, "Fault({addr:#x})"),
            OpResult::Probe(p) => {
                f.write_str("Probe[")?;
                for (i, pa) in p.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" ")?;
                    }
                    f.write_str(pa.perms())?;
                }
                f.write_str("]")
            }
            OpResult::Maps(lines) => {
                writeln!(f, "Maps({} lines)", lines.len())?;
                for l in lines {
                    writeln!(f, "  {l}")?;
                }
                Ok(())
            }
            OpResult::Counters(c) => write!(
                f,
                "Counters(minflt {}, arena rss {} kB, arena AnonHugePages {} kB)",
                c.minor_faults, c.rss_kb, c.anon_huge_kb
            ),
            OpResult::Misplaced { addr } => write!(f, "Misplaced({addr:#x})"),
            OpResult::BackendFailure(m) => write!(f, "BackendFailure({m})"),
        }
    }
}

impl PageAccess {
    /// `rw`, `r-`, `-w` or `--`.
    pub fn perms(&self) -> &'static str {
        match (self.readable, self.writable) {
            (true, true) => "rw",
            (true, false) => "r-",
            (false, true) => "-w",
            (false, false) => "--",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// /proc/self/maps lines
// ---------------------------------------------------------------------------------------------

/// One line of `/proc/<pid>/maps`: `start-end perms offset major:minor inode [path]`.
///
/// `Display` renders exactly what the kernel prints (`show_vma_header_prefix` + `seq_pad` in
/// `fs/proc/task_mmu.c`): hex fields zero-padded to 8 digits (2 for the device numbers), a
/// trailing space after the inode, and when there is a path the line is padded with spaces to
/// column 72, then one more space, then the path. No newline.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct MapsLine {
    pub start: u64,
    pub end: u64,
    /// Four characters, e.g. `"rw-p"`.
    pub perms: String,
    /// File offset (`vm_pgoff << PAGE_SHIFT`; for anonymous VMAs the kernel shows 0).
    pub offset: u64,
    pub dev_major: u32,
    pub dev_minor: u32,
    pub inode: u64,
    /// `""` for an unnamed anonymous VMA, else e.g. `"/dev/zero"`, `"[heap]"`.
    pub path: String,
}

impl MapsLine {
    /// An anonymous line (no device, no inode, no path).
    pub fn anon(start: u64, end: u64, perms: &str) -> MapsLine {
        MapsLine {
            start,
            end,
            perms: perms.to_string(),
            offset: 0,
            dev_major: 0,
            dev_minor: 0,
            inode: 0,
            path: String::new(),
        }
    }

    /// Does this VMA intersect the arena?
    pub fn in_arena(&self) -> bool {
        self.start < ARENA_END && self.end > ARENA_BASE
    }

    /// The same line with device and inode cleared (they name host objects the engine cannot
    /// know, e.g. the `/dev/zero` inode).
    pub fn normalized(&self) -> MapsLine {
        MapsLine {
            dev_major: 0,
            dev_minor: 0,
            inode: 0,
            ..self.clone()
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// True for an empty range (never printed by the kernel).
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

/// Width the kernel pads the header to before the path (`25 + sizeof(void *) * 6 - 1`).
pub const MAPS_PAD: usize = 25 + 8 * 6 - 1;

impl fmt::Display for MapsLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = format!(
            "{:08x}-{:08x} {} {:08x} {:02x}:{:02x} {} ",
            self.start,
            self.end,
            self.perms,
            self.offset,
            self.dev_major,
            self.dev_minor,
            self.inode
        );
        f.write_str(&head)?;
        if !self.path.is_empty() {
            for _ in head.len()..MAPS_PAD {
                f.write_str(" ")?;
            }
            f.write_str(" ")?;
            f.write_str(&self.path)?;
        }
        Ok(())
    }
}

fn parse_hex(s: &str, what: &str, line: &str) -> Result<u64, String> {
    u64::from_str_radix(s, 16).map_err(|_| format!("bad {what} {s:?} in maps line {line:?}"))
}

impl FromStr for MapsLine {
    type Err = String;

    /// Parse one kernel line (a trailing newline is allowed).
    fn from_str(line: &str) -> Result<MapsLine, String> {
        let l = line.strip_suffix('\n').unwrap_or(line);
        let mut rest = l;
        let mut field = || -> Option<&str> {
            let t = rest.trim_start_matches(' ');
            let end = t.find(' ').unwrap_or(t.len());
            if end == 0 {
                return None;
            }
            let (tok, r) = t.split_at(end);
            rest = r;
            Some(tok)
        };
        let missing = || format!("truncated maps line {l:?}");
        let range = field().ok_or_else(missing)?;
        let perms = field().ok_or_else(missing)?;
        let offset = field().ok_or_else(missing)?;
        let dev = field().ok_or_else(missing)?;
        let inode = field().ok_or_else(missing)?;
        let (s, e) = range
            .split_once('-')
            .ok_or_else(|| format!("bad range in maps line {l:?}"))?;
        let (maj, min) = dev
            .split_once(':')
            .ok_or_else(|| format!("bad device in maps line {l:?}"))?;
        if perms.len() != 4 {
            return Err(format!("bad perms {perms:?} in maps line {l:?}"));
        }
        let path = rest.trim_start_matches(' ').to_string();
        Ok(MapsLine {
            start: parse_hex(s, "start", l)?,
            end: parse_hex(e, "end", l)?,
            perms: perms.to_string(),
            offset: parse_hex(offset, "offset", l)?,
            dev_major: parse_hex(maj, "major", l)? as u32,
            dev_minor: parse_hex(min, "minor", l)? as u32,
            inode: inode
                .parse()
                .map_err(|_| format!("bad inode in maps line {l:?}"))?,
            path,
        })
    }
}

/// Parse a whole maps file (empty lines are skipped).
pub fn parse_maps(text: &str) -> Result<Vec<MapsLine>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(MapsLine::from_str)
        .collect()
}

/// What maps comparisons look at: the arena lines, with device and inode cleared.
pub fn normalize_maps(lines: &[MapsLine]) -> Vec<MapsLine> {
    lines
        .iter()
        .filter(|l| l.in_arena())
        .map(MapsLine::normalized)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Backends
// ---------------------------------------------------------------------------------------------

/// An address space that executes [`Op`]s: the host kernel or the engine.
pub trait AddressSpace {
    /// Execute one op.
    fn apply(&mut self, op: &Op) -> OpResult;
    /// A short name for messages ("host", "engine").
    fn name(&self) -> &str;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_line_renders_kernel_format() {
        let anon = MapsLine::anon(0x3000_0000_0000, 0x3000_0000_3000, "rw-p");
        assert_eq!(
            anon.to_string(),
            "300000000000-300000003000 rw-p 00000000 00:00 0 "
        );
        let heap = MapsLine {
            path: "[heap]".into(),
            ..MapsLine::anon(0x5564_95bd_4000, 0x5564_95c1_6000, "rw-p")
        };
        assert_eq!(
            heap.to_string(),
            "556495bd4000-556495c16000 rw-p 00000000 00:00 0                          [heap]"
        );
        let small = MapsLine {
            path: "/bin/x".into(),
            dev_major: 0xfe,
            dev_minor: 1,
            inode: 42,
            offset: 0x2000,
            ..MapsLine::anon(0x400000, 0x401000, "r-xp")
        };
        let s = small.to_string();
        assert_eq!(s.find("/bin/x"), Some(MAPS_PAD + 1));
        assert_eq!(s.parse::<MapsLine>().unwrap(), small);
    }

    #[test]
    fn maps_line_parse_round_trips() {
        for l in [
            "7f3b65f32000-7f3b65f34000 r-xp 00000000 00:00 0                          [vdso]",
            "5647bf4c0000-5647bf4c5000 r-xp 00002000 fe:00 247030                     /usr/bin/cat",
            "300000000000-300000001000 rw-p 00000000 00:05 4                          /dev/zero",
            "300000001000-300000002000 rw-s 00000000 00:01 1029                       /dev/zero (deleted)",
            "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]",
            "556474fa9000-556474fb9000 rw-p 00000000 00:00 0 ",
        ] {
            let p: MapsLine = l.parse().unwrap();
            assert_eq!(p.to_string(), l);
        }
        assert!("garbage".parse::<MapsLine>().is_err());
        assert!("1-2 rw-p".parse::<MapsLine>().is_err());
    }

    #[test]
    fn ops_serialize() {
        let ops = vec![
            Op::mmap_anon_at(ARENA_BASE, 0x2000, PROT_READ | PROT_WRITE),
            Op::Write {
                addr: ARENA_BASE,
                data: vec![1, 2, 3],
            },
            Op::Maps,
        ];
        let s = serde_json::to_string(&ops).unwrap();
        let back: Vec<Op> = serde_json::from_str(&s).unwrap();
        assert_eq!(back, ops);
        let r = OpResult::Maps(vec![MapsLine::anon(ARENA_BASE, ARENA_END, "---p")]);
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<OpResult>(&s).unwrap(), r);
    }
}
