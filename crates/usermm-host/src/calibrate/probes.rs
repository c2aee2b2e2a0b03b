//! The measuring children of `usermm calibrate`: one forked, single-threaded process per sample.
//!
//! Each probe forks a child (from a possibly multi-threaded parent, so the child only issues raw
//! system calls on memory it maps itself, as in [`crate::measure`]), pins it to the CPU the
//! parent chose, does its work, times the step of interest on the child's **thread CPU time**
//! (`CLOCK_THREAD_CPUTIME_ID`: user and kernel time of this thread, so a preemption by the other
//! process's work on a shared host does not count), and returns a fixed array of words:
//! `[errno, pinned, …]`. The parent turns them into samples (`super::run_rounds`).

#![expect(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::HostError;
use crate::measure::{madvise, map_anon, munmap, rollup_kb, run_forked_checked};
use crate::ops::{HPAGE_SIZE, PAGE_SIZE};
use crate::sys;

/// Words a probe returns: `[errno, pinned, a, b, c, d, e, f]`.
pub(super) type Words = [u64; 8];

/// Longest a ping-pong side spins for its partner before giving up (the partner died).
const PARTNER_TIMEOUT_NS: u64 = 20_000_000_000;
/// Round trips per timed batch of the ping-pong, and most batches.
pub(super) const PING_BATCH: u64 = 1000;
const MAX_PING_BATCHES: usize = 512;

/// Runs `work` in a fresh child pinned to `cpu` (if it can be: word 1 says whether it was); an
/// errno `work` returns comes back as the error of "calibration child".
fn in_child(
    cpu: Option<usize>,
    work: impl FnOnce() -> Result<Words, i32>,
) -> Result<Words, HostError> {
    let job = move || -> Words {
        let pinned = cpu.is_some_and(|c| sys::pin_to_cpu(c).is_ok());
        let mut w = work().unwrap_or_else(|e| [e.max(1) as u64, 0, 0, 0, 0, 0, 0, 0]);
        w[1] = pinned as u64;
        w
    };
    // SAFETY: every probe below only issues raw system calls (through `sys` and `measure`'s
    // wrappers), reads the clocks, does volatile loads and stores and atomics in mappings the
    // child made itself (and sorts numbers in place there: `sort_unstable` allocates nothing),
    // and forks a grandchild that does the same before `_exit`: no allocation, locks, stdio or
    // panics.
    unsafe { run_forked_checked("calibration child", job) }
}

/// The thread CPU time and the minor faults of `work`: what every fault probe reports.
fn timed_faults(work: impl FnOnce()) -> (u64, u64) {
    let f0 = sys::minflt();
    let c0 = sys::thread_cpu_ns();
    work();
    let c1 = sys::thread_cpu_ns();
    let f1 = sys::minflt();
    (c1 - c0, f1 - f0)
}

/// Writes one byte into every 4 KiB page of `p..p+len`.
fn touch_write(p: u64, len: u64, step: u64) {
    let mut off = 0;
    while off < len {
        // SAFETY: p..p+len is a private read-write mapping owned by this child alone.
        unsafe { std::ptr::write_volatile((p + off) as usize as *mut u8, 1) };
        off += step;
    }
}

/// Reads one byte of every `step` bytes of `p..p+len`.
fn touch_read(p: u64, len: u64, step: u64) -> u64 {
    let mut sum = 0u64;
    let mut off = 0;
    while off < len {
        // SAFETY: p..p+len is a readable private mapping owned by this child alone.
        let v = unsafe { std::ptr::read_volatile((p + off) as usize as *const u8) };
        sum = sum.wrapping_add(v as u64);
        off += step;
    }
    sum
}

fn map_rw(len: u64, thp: bool) -> Result<u64, i32> {
    let p = map_anon(len, libc::PROT_READ | libc::PROT_WRITE, thp)?;
    madvise(p, len, crate::measure::thp_advice(thp));
    Ok(p)
}

/// munmap of `len` bytes of touched 4 KiB pages: `[_, _, cpu_ns]`.
pub(super) fn munmap_4k(cpu: Option<usize>, len: u64) -> Result<Words, HostError> {
    in_child(cpu, move || {
        let p = map_rw(len, false)?;
        touch_write(p, len, PAGE_SIZE);
        let c0 = sys::thread_cpu_ns();
        munmap(p, len);
        let c1 = sys::thread_cpu_ns();
        Ok([0, 0, c1 - c0, 0, 0, 0, 0, 0])
    })
}

/// The pair: touch, fork a child that munmaps the copy-on-write-shared range (a zap that frees
/// nothing), then munmap it in the parent (the full teardown): `[_, _, cow_ns, full_ns]`.
pub(super) fn cow_pair(cpu: Option<usize>, len: u64) -> Result<Words, HostError> {
    in_child(cpu, move || {
        let p = map_rw(len, false)?;
        touch_write(p, len, PAGE_SIZE);
        let (r, w) = sys::pipe()?;
        // SAFETY: this child is single-threaded (forked), and the grandchild only issues raw
        // system calls and reads the clock before `_exit`.
        let pid = unsafe { sys::fork() }?;
        if pid == 0 {
            sys::set_parent_death_signal(libc::SIGKILL);
            let c0 = sys::thread_cpu_ns();
            munmap(p, len);
            let c1 = sys::thread_cpu_ns();
            let _ = sys::write(w, &(c1 - c0).to_ne_bytes());
            sys::exit_now(0);
        }
        sys::close(w);
        let mut b = [0u8; 8];
        let mut have = 0;
        while have < 8 {
            match sys::read(r, &mut b[have..]) {
                Ok(0) => break,
                Ok(n) => have += n,
                Err(libc::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
        sys::close(r);
        let _ = sys::waitpid(pid, false);
        if have < 8 {
            return Err(libc::ECHILD);
        }
        let cow = u64::from_ne_bytes(b);
        let c0 = sys::thread_cpu_ns();
        munmap(p, len);
        let c1 = sys::thread_cpu_ns();
        Ok([0, 0, cow, c1 - c0, 0, 0, 0, 0])
    })
}

/// MADV_DONTNEED of `len` bytes of touched 4 KiB pages: `[_, _, cpu_ns]`.
pub(super) fn dontneed_4k(cpu: Option<usize>, len: u64) -> Result<Words, HostError> {
    in_child(cpu, move || {
        let p = map_rw(len, false)?;
        touch_write(p, len, PAGE_SIZE);
        let c0 = sys::thread_cpu_ns();
        madvise(p, len, libc::MADV_DONTNEED);
        let c1 = sys::thread_cpu_ns();
        munmap(p, len);
        Ok([0, 0, c1 - c0, 0, 0, 0, 0, 0])
    })
}

/// First-touch write faults, one write per page: 4 KiB pages (`MADV_NOHUGEPAGE`), or with
/// `thp` one write per 2 MiB of a 2 MiB-aligned `MADV_HUGEPAGE` range. A warm-up round of the
/// same size comes first (its munmap leaves the frames on the free lists, resident):
/// `[_, _, cpu_ns, faults, anon_huge_kb]` (the last only with `thp`: the `AnonHugePages` the
/// faults added).
pub(super) fn write_fault(cpu: Option<usize>, len: u64, thp: bool) -> Result<Words, HostError> {
    let step = if thp { HPAGE_SIZE } else { PAGE_SIZE };
    in_child(cpu, move || {
        let p = map_rw(len, thp)?;
        touch_write(p, len, step);
        munmap(p, len);
        let p = map_rw(len, thp)?;
        let huge_kb = || if thp { rollup_kb(b"AnonHugePages:") } else { 0 };
        let h0 = huge_kb();
        let (cpu_ns, faults) = timed_faults(|| {
            touch_write(p, len, step);
        });
        let h1 = huge_kb();
        munmap(p, len);
        Ok([0, 0, cpu_ns, faults, h1.saturating_sub(h0), 0, 0, 0])
    })
}

/// Read faults on an untouched read-only mapping, one read per page: each maps the shared zero
/// page (4 KiB pages, `MADV_NOHUGEPAGE`), or with `thp` the huge zero page (one read per 2 MiB
/// of a 2 MiB-aligned `MADV_HUGEPAGE` range). `[_, _, cpu_ns, faults, huge_zero_seen]`: the
/// last, with `thp` only, is 1 when a second read in the first region took no fault (a 2 MiB
/// mapping, not a 4 KiB zero page).
pub(super) fn read_fault(cpu: Option<usize>, len: u64, thp: bool) -> Result<Words, HostError> {
    let step = if thp { HPAGE_SIZE } else { PAGE_SIZE };
    in_child(cpu, move || {
        let p = map_anon(len, libc::PROT_READ, thp)?;
        madvise(p, len, crate::measure::thp_advice(thp));
        let (cpu_ns, faults) = timed_faults(|| {
            std::hint::black_box(touch_read(p, len, step));
        });
        let mut huge_zero_seen = false;
        if thp {
            let f1 = sys::minflt();
            std::hint::black_box(touch_read(p + PAGE_SIZE, PAGE_SIZE, PAGE_SIZE));
            huge_zero_seen = sys::minflt() == f1;
        }
        munmap(p, len);
        Ok([0, 0, cpu_ns, faults, huge_zero_seen as u64, 0, 0, 0])
    })
}

/// 4 KiB memsets over a pre-faulted `len`-byte buffer, `passes` times: `[_, _, cpu_ns, bytes]`.
pub(super) fn clear_bandwidth(
    cpu: Option<usize>,
    len: u64,
    passes: u64,
) -> Result<Words, HostError> {
    in_child(cpu, move || {
        let p = map_rw(len, false)?;
        touch_write(p, len, PAGE_SIZE);
        let c0 = sys::thread_cpu_ns();
        for pass in 0..passes {
            let mut off = 0;
            while off < len {
                let dst = std::hint::black_box((p + off) as usize as *mut u8);
                // SAFETY: dst..dst+4096 lies inside this child's own read-write mapping.
                unsafe { std::ptr::write_bytes(dst, pass as u8, PAGE_SIZE as usize) };
                off += PAGE_SIZE;
            }
        }
        let c1 = sys::thread_cpu_ns();
        munmap(p, len);
        Ok([0, 0, c1 - c0, len * passes, 0, 0, 0, 0])
    })
}

/// `getppid` `iters` times: `[_, _, cpu_ns]`.
pub(super) fn syscall(cpu: Option<usize>, iters: u64) -> Result<Words, HostError> {
    in_child(cpu, move || {
        let c0 = sys::thread_cpu_ns();
        let mut acc = 0i64;
        for _ in 0..iters {
            acc = acc.wrapping_add(sys::getppid_raw());
        }
        let c1 = sys::thread_cpu_ns();
        std::hint::black_box(acc);
        Ok([0, 0, c1 - c0, 0, 0, 0, 0, 0])
    })
}

/// `lock xadd` on a line this CPU holds, `iters` times: `[_, _, cpu_ns]`.
pub(super) fn atomic_rmw(cpu: Option<usize>, iters: u64) -> Result<Words, HostError> {
    in_child(cpu, move || {
        let line = AtomicU64::new(0);
        let line = std::hint::black_box(&line);
        let c0 = sys::thread_cpu_ns();
        for _ in 0..iters {
            // `fetch_add` whose result is used is `lock xadd` on x86-64.
            std::hint::black_box(line.fetch_add(1, Ordering::SeqCst));
        }
        let c1 = sys::thread_cpu_ns();
        Ok([0, 0, c1 - c0, line.load(Ordering::Relaxed), 0, 0, 0, 0])
    })
}

/// A partner process of a probe child: a grandchild pinned to another CPU, sharing one
/// anonymous page with it — a word for the probe's own use ([`Partner::line`], at the page's
/// start) and the grandchild's `ready` word a line further — that has said it runs.
struct Partner {
    page: u64,
    pid: i32,
    /// The grandchild was pinned where asked.
    pinned: bool,
    /// When waiting for the partner gives up (it died).
    deadline: u64,
}

impl Partner {
    /// Forks the partner, pinned to `other`, to run `body` on the shared line and `_exit`; returns
    /// once it has said it runs (or the errno that stops the probe).
    fn start(other: usize, body: impl FnOnce(&AtomicU64)) -> Result<Partner, i32> {
        let flags = (libc::MAP_SHARED | libc::MAP_ANONYMOUS) as u64;
        let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        // SAFETY: a non-fixed mapping never replaces existing memory.
        let page = unsafe { sys::mmap(0, PAGE_SIZE, prot, flags, u64::MAX, 0) }?;
        let ready = shared_word(page, 64);
        // SAFETY: the calling child is single-threaded (forked); the grandchild only issues raw
        // system calls, reads the clock, computes in registers and uses the shared atomics
        // (`body` is a probe's loop of that kind) before `_exit`.
        let pid = unsafe { sys::fork() }?;
        if pid == 0 {
            sys::set_parent_death_signal(libc::SIGKILL);
            let pinned = sys::pin_to_cpu(other).is_ok();
            ready.store(1 + pinned as u64, Ordering::SeqCst);
            body(shared_word(page, 0));
            sys::exit_now(0);
        }
        let deadline = sys::monotonic_ns() + PARTNER_TIMEOUT_NS;
        while ready.load(Ordering::SeqCst) == 0 {
            if sys::monotonic_ns() > deadline {
                sys::kill(pid, libc::SIGKILL);
                let _ = sys::waitpid(pid, false);
                return Err(libc::ETIMEDOUT);
            }
            std::hint::spin_loop();
        }
        Ok(Partner {
            page,
            pid,
            pinned: ready.load(Ordering::SeqCst) == 2,
            deadline,
        })
    }

    /// The word the probe and its partner share.
    fn line(&self) -> &AtomicU64 {
        shared_word(self.page, 0)
    }

    /// Waits for the partner to end and unmaps the page.
    fn finish(self) {
        let _ = sys::waitpid(self.pid, false);
        // SAFETY: unmaps the page mapped in `start`; the grandchild has exited.
        let _ = unsafe { sys::munmap(self.page, PAGE_SIZE) };
    }
}

/// The atomic word at `off` (0 or 64) of a probe's shared page.
fn shared_word<'a>(page: u64, off: u64) -> &'a AtomicU64 {
    // SAFETY: `page` is a live, page-aligned, read-write shared mapping of the probe's own
    // (Partner::start's), unmapped only by `finish`, after which no word is used; the words at
    // 0 and 64 are used only as atomics by both processes.
    unsafe { &*((page + off) as usize as *const AtomicU64) }
}

/// Cache-line ping-pong by compare-and-swap between this child (pinned to `cpu`) and a
/// grandchild pinned to `other`, through a shared anonymous page, `round_trips` times in
/// batches: `[_, _, median_batch_cpu_ns, round_trips_per_batch, other_pinned]` of the pinging
/// side.
pub(super) fn ping_pong(
    cpu: Option<usize>,
    other: usize,
    round_trips: u64,
) -> Result<Words, HostError> {
    in_child(cpu, move || {
        let partner = Partner::start(other, move |line| {
            let deadline = sys::monotonic_ns() + PARTNER_TIMEOUT_NS;
            for k in 0..round_trips {
                let mut spins = 0u32;
                while line
                    .compare_exchange(2 * k + 1, 2 * k + 2, Ordering::SeqCst, Ordering::Relaxed)
                    .is_err()
                {
                    spins = spins.wrapping_add(1);
                    if spins == 0 && sys::monotonic_ns() > deadline {
                        sys::exit_now(1);
                    }
                    std::hint::spin_loop();
                }
            }
        })?;
        let (line, pid, deadline) = (partner.line(), partner.pid, partner.deadline);
        // Batches of round trips, each timed on its own: a batch during which the partner was
        // preempted (its CPU may be shared with other work) is an outlier, and the median
        // batch is what one transfer costs while both sides run.
        let batches = (round_trips / PING_BATCH).clamp(1, MAX_PING_BATCHES as u64) as usize;
        let per = round_trips / batches as u64;
        let mut times = [0u64; MAX_PING_BATCHES];
        let mut k = 0u64;
        for slot in times.iter_mut().take(batches) {
            let c0 = sys::thread_cpu_ns();
            for _ in 0..per {
                // The line is the partner's after its CAS: this CAS pulls it back.
                let _ =
                    line.compare_exchange(2 * k, 2 * k + 1, Ordering::SeqCst, Ordering::Relaxed);
                let mut spins = 0u32;
                while line.load(Ordering::SeqCst) != 2 * k + 2 {
                    spins = spins.wrapping_add(1);
                    if spins == 0 && sys::monotonic_ns() > deadline {
                        sys::kill(pid, libc::SIGKILL);
                        let _ = sys::waitpid(pid, false);
                        return Err(libc::ETIMEDOUT);
                    }
                    std::hint::spin_loop();
                }
                k += 1;
            }
            *slot = sys::thread_cpu_ns() - c0;
        }
        // The partner expects `round_trips`; finish the remainder untimed.
        while k < round_trips {
            let _ = line.compare_exchange(2 * k, 2 * k + 1, Ordering::SeqCst, Ordering::Relaxed);
            while line.load(Ordering::SeqCst) != 2 * k + 2 {
                if sys::monotonic_ns() > deadline {
                    sys::kill(pid, libc::SIGKILL);
                    let _ = sys::waitpid(pid, false);
                    return Err(libc::ETIMEDOUT);
                }
                std::hint::spin_loop();
            }
            k += 1;
        }
        let times = &mut times[..batches];
        times.sort_unstable();
        let median = times[batches / 2];
        let other_pinned = partner.pinned;
        partner.finish();
        Ok([0, 0, median, per, other_pinned as u64, 0, 0, 0])
    })
}

/// A dependent pointer chase over a random cyclic permutation of the cache lines of a
/// `len`-byte THP-backed buffer, `loads` loads: `[_, _, cpu_ns, anon_huge_kb]`.
pub(super) fn dram_chase(cpu: Option<usize>, len: u64, loads: u64) -> Result<Words, HostError> {
    in_child(cpu, move || {
        let p = map_rw(len, true)?;
        let lines = len / 64;
        let at = |i: u64| (p + i * 64) as usize as *mut u64;
        for i in 0..lines {
            // SAFETY: line i lies inside this child's own read-write mapping.
            unsafe { std::ptr::write_volatile(at(i), i) };
        }
        // Sattolo's shuffle: a uniformly random permutation with a single cycle, so that the
        // chase visits every line before it repeats (no short cycle stays in the cache).
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ sys::monotonic_ns();
        for i in (1..lines).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let j = x % i;
            // SAFETY: i and j < lines: both lines lie inside this child's own mapping.
            unsafe {
                let a = std::ptr::read_volatile(at(i));
                let b = std::ptr::read_volatile(at(j));
                std::ptr::write_volatile(at(i), b);
                std::ptr::write_volatile(at(j), a);
            }
        }
        let huge = rollup_kb(b"AnonHugePages:");
        let mut idx = 0u64;
        for _ in 0..loads / 8 {
            // SAFETY: every stored index is < lines.
            idx = unsafe { std::ptr::read_volatile(at(idx)) };
        }
        let c0 = sys::thread_cpu_ns();
        for _ in 0..loads {
            // SAFETY: every stored index is < lines.
            idx = unsafe { std::ptr::read_volatile(at(idx)) };
        }
        let c1 = sys::thread_cpu_ns();
        std::hint::black_box(idx);
        munmap(p, len);
        Ok([0, 0, c1 - c0, huge, 0, 0, 0, 0])
    })
}

/// Rounds of the SMT probe's loop the partner runs between two looks at its stop word.
const SMT_CHECK_EVERY: u64 = 4096;

/// The SMT probe's CPU-bound loop: eight independent 64-bit linear congruential chains
/// (Knuth's MMIX constants), `rounds` rounds of one multiply and one add each — integer
/// multiply and ALU throughput, no memory beyond registers. Returns the chains' xor, so that
/// nothing is optimised away.
fn smt_loop(rounds: u64, seed: u64) -> u64 {
    const MUL: u64 = 6_364_136_223_846_793_005;
    const INC: u64 = 1_442_695_040_888_963_407;
    let mut x = [0u64; 8];
    for (k, v) in x.iter_mut().enumerate() {
        *v = seed.wrapping_add(k as u64);
    }
    for _ in 0..rounds {
        for (k, v) in x.iter_mut().enumerate() {
            *v = v.wrapping_mul(MUL).wrapping_add(INC ^ k as u64);
        }
        x = std::hint::black_box(x);
    }
    x.iter().fold(0, |a, v| a ^ v)
}

/// The SMT probe: [`smt_loop`] of `rounds` alone on `cpu`, then again while a grandchild
/// pinned to `other` runs the same loop without pause (it started first and stops after):
/// `[_, _, alone_cpu_ns, paired_cpu_ns, other_pinned]`. On two hardware threads of one core
/// the paired run gets the core's execution units half the time and takes longer in CPU time;
/// on two cores it takes as long as alone.
pub(super) fn smt_pair(cpu: Option<usize>, other: usize, rounds: u64) -> Result<Words, HostError> {
    in_child(cpu, move || {
        let c0 = sys::thread_cpu_ns();
        std::hint::black_box(smt_loop(rounds, 1));
        let alone = sys::thread_cpu_ns() - c0;
        // The partner's loop, until the shared word says stop (or the deadline passes).
        let partner = Partner::start(other, |stop| {
            let deadline = sys::monotonic_ns() + PARTNER_TIMEOUT_NS;
            while stop.load(Ordering::Relaxed) == 0 && sys::monotonic_ns() < deadline {
                std::hint::black_box(smt_loop(SMT_CHECK_EVERY, 2));
            }
        })?;
        let c0 = sys::thread_cpu_ns();
        std::hint::black_box(smt_loop(rounds, 3));
        let paired = sys::thread_cpu_ns() - c0;
        partner.line().store(1, Ordering::SeqCst);
        let other_pinned = partner.pinned;
        partner.finish();
        Ok([0, 0, alone, paired, other_pinned as u64, 0, 0, 0])
    })
}

/// Loop rounds the shootdown probe's spinner runs between two publications of its count.
const SPIN_PUBLISH_EVERY: u64 = 64;
/// The shootdown spinner's stack (it calls nothing deeper than `pin_to_cpu`).
const SPINNER_STACK: u64 = 64 << 10;

/// The shootdown probe's spinner: a `CLONE_VM` child of the probe child, so the same mm.
/// `arg` is the control page: word 0 the CPU to pin to, 64 `stop`, 128 `ready` (1 + pinned),
/// 192 the loop count, published every [`SPIN_PUBLISH_EVERY`] rounds.
extern "C" fn shootdown_spinner(arg: *mut libc::c_void) -> libc::c_int {
    let page = arg as usize as u64;
    sys::set_parent_death_signal(libc::SIGKILL);
    let pinned = sys::pin_to_cpu(shared_word(page, 0).load(Ordering::SeqCst) as usize).is_ok();
    shared_word(page, 128).store(1 + pinned as u64, Ordering::SeqCst);
    let (stop, count) = (shared_word(page, 64), shared_word(page, 192));
    let deadline = sys::monotonic_ns() + PARTNER_TIMEOUT_NS;
    let mut n = 0u64;
    while stop.load(Ordering::Relaxed) == 0 {
        for _ in 0..SPIN_PUBLISH_EVERY {
            n = std::hint::black_box(n + 1);
        }
        count.store(n, Ordering::Relaxed);
        if n.is_multiple_of(SPIN_PUBLISH_EVERY << 16) && sys::monotonic_ns() > deadline {
            break;
        }
    }
    0
}

/// `flushes` rounds of: write one private 4 KiB page, `MADV_DONTNEED` it (one zap, one free,
/// one ranged TLB flush of the mm). Returns the thread CPU ns they took.
fn dontneed_rounds(page: u64, flushes: u64) -> u64 {
    let c0 = sys::thread_cpu_ns();
    for k in 0..flushes {
        // SAFETY: `page` is a private page of the probe's own; nothing else lives there.
        unsafe { std::ptr::write_volatile(page as usize as *mut u64, k) };
        madvise(page, PAGE_SIZE, libc::MADV_DONTNEED);
    }
    sys::thread_cpu_ns() - c0
}

/// The TLB shootdown probe, on `cpu` with a partner on `other`: [`dontneed_rounds`] while the
/// partner spins in another process (its CPU runs another mm: no IPI reaches it), then while
/// it spins as a `CLONE_VM` child of this one (the same mm: every flush interrupts it). The
/// spinner counts loop rounds; its rate over a window in which this side only reads the clock
/// is its undisturbed rate, and the wall time it lost during the flushes is the receiving
/// side's cost. `[_, _, other_mm_cpu_ns, same_mm_cpu_ns, spinner_lost_ns, flushes,
/// other_pinned]`.
pub(super) fn shootdown_pair(
    cpu: Option<usize>,
    other: usize,
    flushes: u64,
) -> Result<Words, HostError> {
    in_child(cpu, move || {
        let page = map_anon(PAGE_SIZE, libc::PROT_READ | libc::PROT_WRITE, false)?;
        // Another mm on the partner's CPU.
        let partner = Partner::start(other, |stop| {
            let deadline = sys::monotonic_ns() + PARTNER_TIMEOUT_NS;
            while stop.load(Ordering::Relaxed) == 0 && sys::monotonic_ns() < deadline {
                std::hint::spin_loop();
            }
        })?;
        let w0 = sys::monotonic_ns();
        let other_mm = dontneed_rounds(page, flushes);
        let window = (sys::monotonic_ns() - w0).max(1_000_000);
        partner.line().store(1, Ordering::SeqCst);
        let mut pinned = partner.pinned;
        partner.finish();
        // This mm on the partner's CPU: a CLONE_VM spinner.
        let ctl = map_anon(PAGE_SIZE, libc::PROT_READ | libc::PROT_WRITE, false)?;
        let stack = map_anon(SPINNER_STACK, libc::PROT_READ | libc::PROT_WRITE, false)?;
        shared_word(ctl, 0).store(other as u64, Ordering::SeqCst);
        // SAFETY: the stack and the control page are this child's own mappings, unmapped
        // only after the spinner is reaped below; the spinner only issues raw system calls
        // and uses the control page's atomics.
        let pid = unsafe {
            sys::clone_vm(
                shootdown_spinner,
                stack + SPINNER_STACK,
                ctl as usize as *mut libc::c_void,
            )
        }?;
        let reap = |pid| {
            shared_word(ctl, 64).store(1, Ordering::SeqCst);
            let _ = sys::waitpid(pid, false);
            munmap(stack, SPINNER_STACK);
            munmap(ctl, PAGE_SIZE);
        };
        let deadline = sys::monotonic_ns() + PARTNER_TIMEOUT_NS;
        while shared_word(ctl, 128).load(Ordering::SeqCst) == 0 {
            if sys::monotonic_ns() > deadline {
                sys::kill(pid, libc::SIGKILL);
                reap(pid);
                return Err(libc::ETIMEDOUT);
            }
            std::hint::spin_loop();
        }
        pinned &= shared_word(ctl, 128).load(Ordering::SeqCst) == 2;
        let count = shared_word(ctl, 192);
        // The spinner's undisturbed rate: this side reads the clock only.
        let (n0, t0) = (count.load(Ordering::Relaxed), sys::monotonic_ns());
        while sys::monotonic_ns() < t0 + window {
            std::hint::spin_loop();
        }
        let (n1, t1) = (count.load(Ordering::Relaxed), sys::monotonic_ns());
        let same_mm = dontneed_rounds(page, flushes);
        let (n2, t2) = (count.load(Ordering::Relaxed), sys::monotonic_ns());
        reap(pid);
        munmap(page, PAGE_SIZE);
        // Rounds per ns undisturbed, and the wall time the rounds of the flush window stand for.
        let rate = (n1 - n0) as f64 / (t1 - t0).max(1) as f64;
        let ran_ns = if rate > 0.0 {
            (n2 - n1) as f64 / rate
        } else {
            0.0
        };
        let lost = ((t2 - t1) as f64 - ran_ns).max(0.0) as u64;
        Ok([0, 0, other_mm, same_mm, lost, flushes, pinned as u64, 0])
    })
}

/// Pages of the LRU-add probe's VMA: faulted one by one, then dropped with `MADV_DONTNEED`.
pub(super) const LRU_ADD_VMA_PAGES: u64 = 256;
/// The longest period the LRU-add probe looks for between two slow faults (a folio batch).
pub(super) const LRU_ADD_MAX_PERIOD: usize = 128;

/// The LRU-add probe: `loops` times, write-fault each page of a private 4 KiB-page VMA of
/// [`LRU_ADD_VMA_PAGES`] pages in turn, timing every fault alone on the monotonic clock, then
/// `MADV_DONTNEED` the VMA. A new anonymous folio goes to this CPU's LRU-add batch, and every
/// batch-th fault moves the whole batch to the LRU under the lruvec lock (`folio_batch_move_lru`):
/// that fault is slow, and the slow ones recur with the batch's period.
/// `[_, _, median_ns, drain_extra_ns, period, faults, slow]`: the median fault; the median of
/// the slowest `faults / period` faults less it (the drain); the commonest gap between two
/// faults slower than halfway from the median to the 99th percentile (the period: 0 if no gap
/// below [`LRU_ADD_MAX_PERIOD`] recurs); and how many faults were that slow.
pub(super) fn lru_add_drain(cpu: Option<usize>, loops: u64) -> Result<Words, HostError> {
    in_child(cpu, move || {
        let len = LRU_ADD_VMA_PAGES * PAGE_SIZE;
        let n = (LRU_ADD_VMA_PAGES * loops) as usize;
        let lat_bytes = (n as u64 * 4).next_multiple_of(PAGE_SIZE);
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let p = map_rw(len, false)?;
        let seq = map_anon(lat_bytes, rw, false)?;
        let sorted = map_anon(lat_bytes, rw, false)?;
        // SAFETY: `seq` and `sorted` are private read-write mappings of `lat_bytes` ≥ 4·n bytes,
        // made above by this child alone, page-aligned (so u32-aligned) and zero-filled; nothing
        // else refers to them until they are unmapped below.
        let (seq_s, sorted_s) = unsafe {
            (
                std::slice::from_raw_parts_mut(seq as usize as *mut u32, n),
                std::slice::from_raw_parts_mut(sorted as usize as *mut u32, n),
            )
        };
        // A warm-up loop: the page tables and the first free pages are in place.
        touch_write(p, len, PAGE_SIZE);
        madvise(p, len, libc::MADV_DONTNEED);
        let mut i = 0;
        for _ in 0..loops {
            for page in 0..LRU_ADD_VMA_PAGES {
                let t0 = sys::monotonic_ns();
                // SAFETY: `p..p+len` is a private read-write mapping of this child alone.
                unsafe { std::ptr::write_volatile((p + page * PAGE_SIZE) as usize as *mut u8, 1) };
                let t1 = sys::monotonic_ns();
                seq_s[i] = (t1 - t0).min(u64::from(u32::MAX)) as u32;
                i += 1;
            }
            madvise(p, len, libc::MADV_DONTNEED);
        }
        sorted_s.copy_from_slice(seq_s);
        sorted_s.sort_unstable();
        let median = u64::from(sorted_s[n / 2]);
        let p99 = u64::from(sorted_s[n - 1 - n / 100]);
        let slow = median + (p99.saturating_sub(median)) / 2;
        let mut gaps = [0u32; LRU_ADD_MAX_PERIOD];
        let (mut last, mut slow_n) = (None, 0u64);
        for (k, &v) in seq_s.iter().enumerate() {
            if u64::from(v) > slow && slow > median {
                slow_n += 1;
                if let Some(g) = last
                    .map(|l: usize| k - l)
                    .filter(|&g| g < LRU_ADD_MAX_PERIOD)
                {
                    gaps[g] += 1;
                }
                last = Some(k);
            }
        }
        let period = (2..LRU_ADD_MAX_PERIOD)
            .max_by_key(|&g| (gaps[g], std::cmp::Reverse(g)))
            .filter(|&g| gaps[g] >= 2)
            .unwrap_or(0);
        let drain = n.checked_div(period).map_or(0, |k| {
            u64::from(sorted_s[n - 1 - k.max(1) / 2]).saturating_sub(median)
        });
        munmap(sorted, lat_bytes);
        munmap(seq, lat_bytes);
        munmap(p, len);
        Ok([0, 0, median, drain, period as u64, n as u64, slow_n, 0])
    })
}
