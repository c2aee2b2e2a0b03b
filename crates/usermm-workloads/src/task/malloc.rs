//! glibc's `malloc` as the engine's tasks see it: which system calls it makes and which
//! pages it writes, over the task's own calls — not its data structures.
//!
//! What it keeps of glibc (2.3x, x86-64; `malloc/malloc.c`, `malloc/arena.c`):
//! - chunk sizes: `request2size` (the request plus an 8-byte size field, rounded up to 16,
//!   at least 32); a chunk's header is the word before the returned pointer.
//! - **the mmap threshold**: a chunk of at least `mmap_threshold` (128 KiB at start) is its
//!   own `mmap` of the chunk plus its size field, rounded up to pages, and its header is
//!   written (one page touched); `free` unmaps it, and raises the threshold to that chunk's
//!   size if it was larger and at most 32 MiB (`DEFAULT_MMAP_THRESHOLD_MAX`). will-it-scale's
//!   malloc1 (128 MiB) is therefore `mmap` + one write fault + `munmap` per iteration.
//! - **the main arena** (a process's, and every process forked from it): the heap grows by
//!   `sbrk` of the request, the 128 KiB top pad and a minimum chunk, rounded up to pages; a
//!   chunk is cut from the top and its header and the new top's are written.
//! - **a thread's arena** (every thread but the process's first mallocs from its own): a
//!   heap reserved as glibc's `new_heap` reserves it — `mmap` of twice `HEAP_MAX_SIZE`
//!   (64 MiB) `PROT_NONE`, trimmed to one aligned 64 MiB by `munmap`, its first part made
//!   `PROT_READ|PROT_WRITE` by `mprotect` — with the arena's header written at its start, and
//!   grown by `mprotect`.
//! - **reuse**: a freed chunk is reused for the next request of its size, last in first out
//!   (the tcache and the fast bins); its free writes its first two words (the tcache's `next`
//!   and `key`), its reuse clears the key. malloc2 (1 KiB) is therefore no system call and no
//!   fault per iteration once the first is done.
//!
//! # Differences from glibc
//! No coalescing, no trimming of the heap's top (`systrim`), no bins beyond exact sizes, no
//! second heap for a thread arena that outgrows 64 MiB (it is refused, `ENOMEM`). The header
//! sizes of a thread arena (`heap_info`, `malloc_state`) and the tcache's are fixed at their
//! glibc 2.3x x86-64 sizes. None of it is reached by a test that frees what it allocates
//! before allocating again.

use std::collections::HashMap;

use usermm::mm::mman::{
    MAP_ANONYMOUS, MAP_NORESERVE, MAP_PRIVATE, PROT_NONE, PROT_READ, PROT_WRITE,
};

use super::{Errno, Task};

const PAGE: u64 = 4096;
/// What a failed allocation returns; a header write the engine cannot fault in (its OOM)
/// fails the allocation too.
const ENOMEM: Errno = 12;
const SIZE_SZ: u64 = 8;
const MALLOC_ALIGNMENT: u64 = 16;
const MINSIZE: u64 = 32;
/// `DEFAULT_MMAP_THRESHOLD_MIN`: the mmap threshold at start.
const MMAP_THRESHOLD: u64 = 128 << 10;
/// `DEFAULT_MMAP_THRESHOLD_MAX` on 64-bit.
const MMAP_THRESHOLD_MAX: u64 = 32 << 20;
/// `M_TOP_PAD`'s default: a fresh program's first heap is 132 KiB.
const TOP_PAD: u64 = 128 << 10;
/// `HEAP_MAX_SIZE` (twice the mmap threshold's maximum).
const HEAP_MAX: u64 = 2 * MMAP_THRESHOLD_MAX;
/// `HEAP_MIN_SIZE`.
const HEAP_MIN: u64 = 32 << 10;
/// `sizeof(heap_info) + sizeof(malloc_state) + MALLOC_ALIGNMENT`, at the start of a thread's
/// heap (glibc 2.3x, x86-64).
const ARENA_HEADER: u64 = 32 + 2200 + MALLOC_ALIGNMENT;
/// `sizeof(tcache_perthread_struct)`: 64 two-byte counts and 64 pointers, each thread's
/// first allocation.
const TCACHE_STRUCT: u64 = 64 * 2 + 64 * 8;
/// `IS_MMAPPED` and `PREV_INUSE`, the size field's flag bits.
const IS_MMAPPED: u64 = 2;
const PREV_INUSE: u64 = 1;

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// `request2size`.
fn request2size(len: u64) -> u64 {
    align_up(len + SIZE_SZ, MALLOC_ALIGNMENT).max(MINSIZE)
}

/// Which arena a task allocates from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arena {
    /// The process's main arena, on the break.
    Main,
    /// A thread's own arena, made at its first allocation.
    Thread,
}

/// One arena's state (and the process-wide mmap threshold, which a task's frees move).
#[derive(Debug, Clone)]
pub(super) struct Malloc {
    arena: Arena,
    /// The top chunk: `[top, top_end)`; `top_end == 0` before the arena has memory.
    top: u64,
    top_end: u64,
    /// A thread arena's heap: its start and the end of its reservation.
    heap: (u64, u64),
    /// Freed chunks by size, last freed first.
    free: HashMap<u64, Vec<u64>>,
    /// Chunks in use: user pointer → chunk size.
    in_use: HashMap<u64, u64>,
    /// mmapped chunks: user pointer → mapping length.
    mmapped: HashMap<u64, u64>,
    threshold: u64,
    tcache_made: bool,
}

impl Malloc {
    pub(super) fn new(arena: Arena) -> Malloc {
        Malloc {
            arena,
            top: 0,
            top_end: 0,
            heap: (0, 0),
            free: HashMap::new(),
            in_use: HashMap::new(),
            mmapped: HashMap::new(),
            threshold: MMAP_THRESHOLD,
            tcache_made: false,
        }
    }

    /// `malloc(len)`: the user pointer.
    pub(super) fn malloc<T: Task + ?Sized>(&mut self, t: &T, len: u64) -> Result<u64, Errno> {
        if !self.tcache_made {
            // tcache_init: the thread's first allocation is its tcache.
            self.tcache_made = true;
            self.cut_from_top(t, request2size(TCACHE_STRUCT))?;
        }
        let nb = request2size(len);
        if nb >= self.threshold {
            let size = align_up(nb + SIZE_SZ, PAGE);
            let p = t.mmap(
                size,
                PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS,
                None,
            )?;
            t.write_u64(p + SIZE_SZ, size | IS_MMAPPED)
                .map_err(|_| ENOMEM)?;
            self.mmapped.insert(p + 2 * SIZE_SZ, size);
            return Ok(p + 2 * SIZE_SZ);
        }
        if let Some(c) = self.free.get_mut(&nb).and_then(Vec::pop) {
            // tcache_get: the entry's key is cleared.
            t.write_u64(c + 3 * SIZE_SZ, 0).map_err(|_| ENOMEM)?;
            self.in_use.insert(c + 2 * SIZE_SZ, nb);
            return Ok(c + 2 * SIZE_SZ);
        }
        let c = self.cut_from_top(t, nb)?;
        self.in_use.insert(c + 2 * SIZE_SZ, nb);
        Ok(c + 2 * SIZE_SZ)
    }

    /// `free(p)`.
    pub(super) fn free<T: Task + ?Sized>(&mut self, t: &T, p: u64) {
        if let Some(size) = self.mmapped.remove(&p) {
            if size > self.threshold && size <= MMAP_THRESHOLD_MAX {
                self.threshold = size;
            }
            let _ = t.munmap(p - 2 * SIZE_SZ, size);
        } else if let Some(nb) = self.in_use.remove(&p) {
            // tcache_put: `next` and `key` written into the chunk.
            let _ = t.write_u64(p, 0);
            let _ = t.write_u64(p + SIZE_SZ, 1);
            self.free.entry(nb).or_default().push(p - 2 * SIZE_SZ);
        }
    }

    /// Cut a chunk of `nb` bytes from the top, growing the arena first if needed; the chunk.
    fn cut_from_top<T: Task + ?Sized>(&mut self, t: &T, nb: u64) -> Result<u64, Errno> {
        if self.top_end.saturating_sub(self.top) < nb + MINSIZE {
            match self.arena {
                Arena::Main => self.grow_main(t, nb)?,
                Arena::Thread => self.grow_thread(t, nb)?,
            }
        }
        let c = self.top;
        self.top += nb;
        t.write_u64(c + SIZE_SZ, nb | PREV_INUSE)
            .map_err(|_| ENOMEM)?;
        t.write_u64(self.top + SIZE_SZ, (self.top_end - self.top) | PREV_INUSE)
            .map_err(|_| ENOMEM)?;
        Ok(c)
    }

    /// sysmalloc on the main arena: `sbrk` the request, the top pad and a minimum chunk.
    fn grow_main<T: Task + ?Sized>(&mut self, t: &T, nb: u64) -> Result<(), Errno> {
        let size = align_up(nb + TOP_PAD + MINSIZE, PAGE);
        let old = t.sbrk(size as i64)?;
        if self.top_end != old {
            // The first heap (or a foreign sbrk between): the top starts afresh, aligned.
            self.top = align_up(old, MALLOC_ALIGNMENT);
        }
        self.top_end = old + size;
        Ok(())
    }

    /// A thread arena: `new_heap` at first, then `grow_heap` (an `mprotect` of more of it).
    fn grow_thread<T: Task + ?Sized>(&mut self, t: &T, nb: u64) -> Result<(), Errno> {
        if self.top_end == 0 {
            let want = nb + ARENA_HEADER;
            let size = if want + TOP_PAD < HEAP_MIN {
                HEAP_MIN
            } else {
                (want + TOP_PAD).min(HEAP_MAX)
            };
            let size = align_up(size, PAGE);
            let rw = PROT_READ | PROT_WRITE;
            let p1 = t.mmap(
                2 * HEAP_MAX,
                PROT_NONE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                None,
            )?;
            let p2 = align_up(p1, HEAP_MAX);
            if p2 > p1 {
                t.munmap(p1, p2 - p1)?;
            }
            t.munmap(p2 + HEAP_MAX, HEAP_MAX - (p2 - p1))?;
            t.mprotect(p2, size, rw)?;
            // The heap_info and the arena's malloc_state are written at the heap's start.
            t.write_u64(p2, 0).map_err(|_| ENOMEM)?;
            self.heap = (p2, p2 + HEAP_MAX);
            self.top = align_up(p2 + ARENA_HEADER, MALLOC_ALIGNMENT);
            self.top_end = p2 + size;
            return Ok(());
        }
        let need = align_up(nb + MINSIZE + TOP_PAD, PAGE);
        if self.top_end + need > self.heap.1 {
            return Err(ENOMEM);
        }
        t.mprotect(self.top_end, need, PROT_READ | PROT_WRITE)?;
        self.top_end += need;
        Ok(())
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn chunk_sizes_are_glibcs() {
        assert_eq!(request2size(1), 32);
        assert_eq!(request2size(24), 32);
        assert_eq!(request2size(25), 48);
        assert_eq!(request2size(1024), 1040);
        // malloc1's 128 MiB: one page more than asked, for the size field.
        let nb = request2size(128 << 20);
        assert_eq!(align_up(nb + SIZE_SZ, PAGE), (128 << 20) + PAGE);
    }
}
