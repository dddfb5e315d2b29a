//! The entry points: allocate, allocate zeroed, reallocate, free, usable size. Small sizes (and
//! cached large ones) go through the thread cache; the rest to the thread's arena.
//!
//! The fast paths are `malloc` and `free`: a TLS read, a class lookup (malloc) or a pagemap
//! walk, the check that the pointer starts an object and the slab's arena compared with the
//! thread's (free: another arena's block goes to the remote-free buffer), one bounds check on
//! the cache bin, and a pop or push, with one branch to a `*_slow` function.
//! `allocator-bench/scripts/callgrind_fastpath.sh 16 256 1024` counts 76 instructions per C
//! `malloc` + `free` pair preloaded (the same at each size; the C wrappers
//! and the benchmark's loop included; jemalloc 79.5–87.7, mimalloc 54.6–131.4): see
//! docs/benchmarks.md, issue 13.
//!
//! These functions return null on failure and never touch `errno`; `c_api` adds C semantics.

use crate::arena::{self, Owner};
use crate::chunk::{page_chunk_of_entry, PAGE_CLASS_SHIFT, PAGE_KIND, PAGE_LARGE};
use crate::diag;
use crate::pagemap::{Pagemap, PAGEMAP};
use crate::size_class::*;
use crate::slab::slab_of_word;
use crate::tcache::FAST_MAX;
use crate::thread;
use core::ptr::{self, null_mut};

mod debug;
use debug::{alloc_arena_debug, free_debug, free_debug_cached};
pub use debug::{usable_of, JUNK_ALLOC, JUNK_FREE, REDZONE};

/// `malloc`: at least `size` bytes, aligned to 16 when `size >= 16` (8 below).
#[inline(always)]
pub fn malloc(size: usize) -> *mut u8 {
    match cache_pop(size) {
        Some(p) => p,
        None => alloc_slow(size, 1, false),
    }
}

/// The fast path of `malloc` and of small `calloc`: `cache_hit`, with its misses taken here.
/// `None` when the fast path does not apply (no cache, `size` past `FAST_MAX`); a miss
/// inside it goes to `alloc_refill` (or `alloc_sampled`) itself.
#[inline(always)]
fn cache_pop(size: usize) -> Option<*mut u8> {
    match cache_hit(size) {
        Ok(p) => Some(p),
        Err(Miss::Uncounted) => None,
        Err(miss) => Some(alloc_miss(size, miss)),
    }
}

/// Why `cache_hit` found no block, which says where the request goes (`alloc_miss`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Miss {
    /// No cache, or a size past `FAST_MAX`: the generic path, which counts the bytes for heap
    /// profiling (`alloc_slow`).
    Uncounted,
    /// The bin of class `.0` is empty, the bytes counted: `alloc_refill` refills it straight
    /// away (the class is known: no second class lookup or cache test).
    Empty(u32),
    /// The profiling countdown ran out: `alloc_sampled`.
    Sampled,
}

/// The profiling countdown, then a pop from the cache bin of `size`'s class: a block (never
/// null), or why not. C's `malloc` calls it directly so that its hit returns at once, with no
/// null test for `errno` and no stack frame: the misses, whose result may be null, go to a
/// tail call that checks it (`c_api::malloc`; callgrind per preloaded pair, with `free`'s
/// one test of alignment and range: 102 -> 96 instructions).
#[inline(always)]
pub fn cache_hit(size: usize) -> Result<*mut u8, Miss> {
    let tc = thread::tcache();
    if tc.is_null() || size > FAST_MAX {
        return Err(Miss::Uncounted);
    }
    // SAFETY: the thread's own live cache.
    let t = unsafe { &mut *tc };
    // Heap profiling (`prof`): one subtraction in memory and one branch on its borrow.
    // The wrapped value is never used: the sampled path draws a new countdown.
    let (left, ran_out) = t.prof_countdown.overflowing_sub(size as u64);
    t.prof_countdown = left;
    if ran_out {
        return Err(Miss::Sampled);
    }
    let class = class_of(size);
    // class < NSMALL <= NBINS.
    let bin = &mut t.bins[class];
    if bin.count > 0 {
        bin.count -= 1;
        // SAFETY: items[class][count] is a cached pointer (count was above it); class is in
        // bounds (tested above).
        return Ok(unsafe { *t.items.get_unchecked(class).add(bin.count as usize) });
    }
    Err(Miss::Empty(class as u32))
}

/// `malloc(size)` after `cache_hit` said `miss` (the countdown already taken for `Empty`
/// and `Sampled`); null when out of memory.
#[cold]
#[inline(never)]
pub fn alloc_miss(size: usize, miss: Miss) -> *mut u8 {
    match miss {
        Miss::Uncounted => alloc_slow(size, 1, false),
        Miss::Empty(class) => alloc_refill(size, class as usize),
        Miss::Sampled => alloc_sampled(thread::tcache(), size, 1, false),
    }
}

/// `Miss::Empty`: a refill of the empty bin of `class`, `size`'s class, in the cache the fast
/// path found (so there is one, and no debug mode hides it), then a pop (null when out of
/// memory); a bin of capacity 0 (a class past `tcache_max`) takes `alloc_counted`. Going
/// through `alloc_counted` instead cost a class lookup and a cache test per refill (with the
/// flush's second walk, `cache_push_full`, 70 instructions a round trip: 9 per block at 1 KiB,
/// whose refills then brought 8; docs/benchmarks.md, Session 12).
#[inline(always)]
fn alloc_refill(size: usize, class: usize) -> *mut u8 {
    let tc = thread::tcache();
    if tc.is_null() {
        // Not after `Empty`, whose fast path found the cache; kept for safety.
        return alloc_counted(size, 1, false);
    }
    // SAFETY: the thread's own live cache (tested above).
    let t = unsafe { &mut *tc };
    match t.bins.get(class) {
        Some(bin) if bin.cap > 0 => t.alloc_slow(class),
        _ => alloc_counted(size, 1, false),
    }
}

/// At least `size` bytes aligned to `align` (a power of two); null when impossible.
#[inline(always)]
pub fn alloc(size: usize, align: usize) -> *mut u8 {
    if align <= 8 || (align <= 16 && size > 8) {
        return malloc(size);
    }
    alloc_slow(size, align, false)
}

/// As `alloc`, with the memory zeroed. Small sizes take `malloc`'s fast path and clear the
/// block there (`calloc`'s common case); the rest the generic path.
#[inline]
pub fn alloc_zeroed(size: usize, align: usize) -> *mut u8 {
    if align <= 8 || (align <= 16 && size > 8) {
        if let Some(p) = cache_pop(size) {
            if !p.is_null() {
                // SAFETY: p is a live block of at least `size` bytes.
                unsafe { ptr::write_bytes(p, 0, size) };
            }
            return p;
        }
    }
    alloc_slow(size, align, true)
}

/// The generic allocation path: counts the bytes for heap profiling, then `alloc_counted`.
#[cold]
#[inline(never)]
pub fn alloc_slow(size: usize, align: usize, zero: bool) -> *mut u8 {
    let mut tc = thread::tcache();
    if tc.is_null() {
        let debug_tc = thread::debug_tcache_ready();
        if !debug_tc.is_null() {
            return alloc_debug_ready(debug_tc, size, align, zero);
        }
        crate::init::ensure_init();
        tc = thread::tcache_slow();
    }
    if !tc.is_null() {
        // SAFETY: the thread's own live cache.
        let t = unsafe { &mut *tc };
        match t.prof_countdown.checked_sub(size as u64) {
            Some(left) => t.prof_countdown = left,
            None => return alloc_sampled(tc, size, align, zero),
        }
    }
    alloc_counted(size, align, zero)
}

/// The debug modes' allocation path once the thread's cache exists (`tc`, from
/// `thread::debug_tcache_ready`): the cache's arena is the thread's, so this reads no
/// `thread_local!` (each read is a `__tls_get_addr` call in a shared library).
fn alloc_debug_ready(
    tc: *mut crate::tcache::Tcache,
    size: usize,
    align: usize,
    zero: bool,
) -> *mut u8 {
    let Some(class) = class_for(size, align) else {
        return null_mut();
    };
    // SAFETY: the thread's own live cache; its arena is the thread's (`set_thread_arena`
    // moves both) and arenas live for the whole process.
    let arena = unsafe { &*(*tc).arena };
    alloc_arena_from(arena, tc, class, size, align, zero)
}

/// The countdown ran out (`prof`): takes a sample if profiling says so, else allocates as
/// usual. A sampled block gets a page run of its own, and the pointer lies `offset` bytes
/// (16, or `align` below a page; page-aligned requests are not sampled) past the run's
/// start, so it is never page aligned: every `free` of it
/// reaches `free_slow`, which asks `prof` (see `prof.rs`). A huge one is sampled in place.
#[cold]
#[inline(never)]
fn alloc_sampled(tc: *mut crate::tcache::Tcache, size: usize, align: usize, zero: bool) -> *mut u8 {
    // SAFETY: the thread's own live cache (the caller read it from the thread's slot).
    let t = unsafe { &mut *tc };
    if !crate::prof::countdown_expired(t, size) || align >= crate::os::PAGE {
        return alloc_counted(size, align, zero);
    }
    let Some(class) = class_for(size, align) else {
        return null_mut();
    };
    let offset = align.max(16);
    let run_class = match class_for(size.saturating_add(offset), 1) {
        _ if class >= HUGE_FIRST => class,
        Some(c) if c < HUGE_FIRST => c.max(NSMALL),
        // Too close to the huge classes to add the offset: not sampled.
        _ => return alloc_counted(size, align, zero),
    };
    let mut frames = [0usize; crate::prof::FRAMES_MAX];
    let n = crate::prof::capture(t, &mut frames);
    // SAFETY: the arena outlives every thread bound to it.
    let arena = unsafe { &*t.arena };
    let (base, p) = if run_class >= HUGE_FIRST {
        let p = arena.huge_alloc(run_class, size, align, zero);
        (p, p)
    } else {
        let base = arena.large_alloc(run_class, crate::os::PAGE, zero);
        (base, base.wrapping_add(offset))
    };
    if base.is_null() {
        return null_mut();
    }
    crate::prof::record(p, base, size, &frames[..n]);
    p
}

/// The run start of `p` when it is a sampled block (`prof`); `remove` forgets the sample.
#[inline(always)]
fn sampled(p: *mut u8, remove: bool) -> Option<*mut u8> {
    if !crate::prof::enabled() {
        return None;
    }
    crate::prof::sampled_base(p, remove)
}

/// The allocation path after the profiling countdown.
#[cold]
#[inline(never)]
fn alloc_counted(size: usize, align: usize, zero: bool) -> *mut u8 {
    let Some(class) = class_for(size, align) else {
        return null_mut();
    };
    if diag::debug() != 0 {
        // The debug modes keep the thread's cache out of the fast paths' sight, so every block
        // comes here; the debug path takes from the cache (`thread::debug_tcache`).
        let tc = thread::debug_tcache();
        return alloc_arena_from(thread::current_arena(), tc, class, size, align, zero);
    }
    let mut tc = thread::tcache();
    if tc.is_null() {
        crate::init::ensure_init();
        tc = thread::tcache_slow();
    }
    if !tc.is_null() {
        // SAFETY: the thread's own live cache.
        if let Some(p) = cache_take(unsafe { &mut *tc }, class, align) {
            if zero && !p.is_null() {
                // SAFETY: p is a live block of class_size(class) >= size bytes.
                unsafe { ptr::write_bytes(p, 0, size) };
            }
            return p;
        }
    }
    alloc_arena(thread::current_arena(), class, size, align, zero)
}

/// A block of `class` from the cache `t`, refilling an empty small bin (null when out of
/// memory); `None` when the cache holds no blocks of `class` aligned to `align`.
fn cache_take(t: &mut crate::tcache::Tcache, class: usize, align: usize) -> Option<*mut u8> {
    // Cached blocks are page aligned at most (large) or class aligned (small).
    let bin = t.bins.get_mut(class)?;
    if bin.cap == 0 || align > crate::os::PAGE {
        return None;
    }
    if bin.count > 0 {
        bin.count -= 1;
        // SAFETY: items[class][count] is a cached pointer (count was above it); class is in
        // bounds (`get_mut` above).
        return Some(unsafe { *t.items.get_unchecked(class).add(bin.count as usize) });
    }
    Some(t.alloc_slow(class))
}

/// Allocates from `arena` without the thread cache.
pub fn alloc_arena(
    arena: &arena::Arena,
    class: usize,
    size: usize,
    align: usize,
    zero: bool,
) -> *mut u8 {
    alloc_arena_from(arena, null_mut(), class, size, align, zero)
}

/// Allocates from `arena`, or under the debug modes from the cache `tc` when not null.
fn alloc_arena_from(
    arena: &arena::Arena,
    tc: *mut crate::tcache::Tcache,
    class: usize,
    size: usize,
    align: usize,
    zero: bool,
) -> *mut u8 {
    let debug = diag::debug();
    let p = if debug != 0 {
        alloc_arena_debug(arena, tc, size, align, zero, debug)
    } else {
        alloc_arena_plain(arena, class, size, align, zero)
    };
    // `thp:defer` in a fork child: its first queued collapse starts a background thread, here
    // where no lock is held.
    if class >= HUGE_FIRST && crate::collapse::thread_wanted() {
        crate::init::start_wanted_collapse_thread();
    }
    p
}

fn alloc_arena_plain(
    arena: &arena::Arena,
    class: usize,
    size: usize,
    align: usize,
    zero: bool,
) -> *mut u8 {
    if is_small(class) {
        let mut one = [null_mut()];
        if arena.bin_fill(class, &mut one) == 0 {
            return null_mut();
        }
        if zero {
            // SAFETY: a live block of at least `size` bytes.
            unsafe { ptr::write_bytes(one[0], 0, size) };
        }
        one[0]
    } else if class < HUGE_FIRST {
        arena.large_alloc(class, align, zero)
    } else {
        arena.huge_alloc(class, size, align, zero)
    }
}

/// Allocates `size` bytes aligned to `align` from arena `index` (bypassing the cache when
/// `tcache` is false). Null when impossible or the arena does not exist.
pub fn alloc_in(
    index: Option<usize>,
    size: usize,
    align: usize,
    zero: bool,
    tcache: bool,
) -> *mut u8 {
    if index.is_none() && tcache {
        return if zero {
            alloc_zeroed(size, align)
        } else {
            alloc(size, align)
        };
    }
    crate::init::ensure_init();
    let Some(class) = class_for(size, align) else {
        return null_mut();
    };
    let arena = match index {
        Some(i) => match crate::registry::arena_get(i) {
            Some(a) => a,
            None => return null_mut(),
        },
        None => thread::current_arena(),
    };
    alloc_arena(arena, class, size, align, zero)
}

/// `free`. Null is ignored; a pointer hugealloc did not hand out aborts with its address.
///
/// # Safety
/// `p` is null or a live block from this allocator, not used afterwards.
#[inline(always)]
pub unsafe fn free(p: *mut u8) {
    let tc = thread::tcache();
    let addr = p as usize;
    // The alignment and the pagemap's range in one test.
    if !tc.is_null() && addr & (7 | Pagemap::ADDR_HIGH) == 0 {
        if let Some(pc) = page_chunk_of_entry(PAGEMAP.get_in_range(addr)) {
            // The address's bits below the chunk: no load of the chunk's base.
            let page = crate::owner::page_index(addr);
            // SAFETY: a TAG_PAGES entry points at its chunk's live page map.
            debug_assert_eq!(page, unsafe { (*pc).page_of(addr) });
            // SAFETY: as above; `page < CHUNK_PAGES`, the page map's length.
            let word = unsafe { *(*pc).page_map.get_unchecked(page) };
            let (start, class) = if let Some(slab) = slab_of_word(word) {
                // A pointer inside an object must not reach the cache (the next malloc would
                // hand out memory overlapping a live block): it goes to `free_slow`, which
                // aborts naming it.
                // SAFETY: a slab page's word names the live slab holding the page.
                let s = unsafe { &*slab };
                let start = s.is_object_start_on_pages(addr);
                debug_assert_eq!(start, s.is_object_start(addr));
                // The class from beside the word, not from the descriptor: the bin's address
                // then waits for one load less (`PageChunk::page_class`).
                // SAFETY: as for the word.
                let class = unsafe { *(*pc).page_class.get_unchecked(page) } as usize;
                debug_assert_eq!(class, s.class as usize);
                // A block of another arena's slab (allocated by another thread) goes home
                // through the remote-free buffer, never to this thread's cache.
                // SAFETY: the thread's own live cache.
                if start && !s.belongs_to(unsafe { (*tc).home_arena }) {
                    // SAFETY: as above; `slab` holds `p`, an object start, of its class.
                    return unsafe { (*tc).free_remote(p, slab, class) };
                }
                (start, class)
            } else {
                let start = word & PAGE_KIND == PAGE_LARGE && addr & (crate::os::PAGE - 1) == 0;
                (start, (word >> PAGE_CLASS_SHIFT) as usize)
            };
            if start {
                // SAFETY: the thread's own live cache; class < HUGE_FIRST == NBINS (a slab's
                // class is small, a large head word's class large).
                if unsafe { cache_push(tc, class, p) } {
                    return;
                }
                // SAFETY: as above; `p` starts a block of `class`, not a sampled one.
                return unsafe { cache_push_full(tc, class, p) };
            }
        }
    }
    // SAFETY: forwarded contract.
    unsafe { free_slow(p) }
}

/// `free_sized`'s fast path: `free`'s (one pagemap lookup, the check that `p` starts a block,
/// the push on the cache bin of its class, or the remote-free buffer), where the block is
/// taken only when `size` is a size of its class: for a slab block `Slab::holds_size` (two
/// fields in the descriptor line `free` reads anyway: a subtract and a compare), for a large
/// block a row of `LARGE_SIZES`. The size's class is never computed here, only compared.
/// The caller's alignment is at most 8 (or at most 16 with `size > 8`), where the class of
/// `size` is the class `class_for(size, align)` gives. False when it does not apply (no
/// cache, not a small or large cached block, a pointer inside a block, a size of another
/// class): the caller's slow path then decides, and aborts on a misuse (a full bin is
/// `cache_push_full`'s). `free` keeps its own copy of the same steps in the same order:
/// written as one function with a check that plain `free` leaves open, LLVM laid the plain
/// path out with 2 more instructions per pair (callgrind, 99 -> 101, session 7).
///
/// # Safety
/// `p` is null or a live block from this allocator, not used afterwards if this returns true.
#[inline(always)]
unsafe fn free_cached(p: *mut u8, size: usize) -> bool {
    let tc = thread::tcache();
    let addr = p as usize;
    // No test of `addr`'s low bits (plain `free`'s first filter): a misaligned pointer is no
    // object start (class sizes are multiples of 8) and no page start. The cache is tested
    // after the lookup: tested first, LLVM merged the two tests with `setcc` (2 more
    // instructions).
    let Some(pc) = page_chunk_of_entry(PAGEMAP.get(addr)) else {
        return false;
    };
    if tc.is_null() {
        return false;
    }
    // The address's bits below the chunk: no load of the chunk's base.
    let page = crate::owner::page_index(addr);
    // SAFETY: a TAG_PAGES entry points at its chunk's live page map.
    debug_assert_eq!(page, unsafe { (*pc).page_of(addr) });
    // SAFETY: as above; `page < CHUNK_PAGES`, the page map's length.
    let word = unsafe { *(*pc).page_map.get_unchecked(page) };
    let (start, class) = if let Some(slab) = slab_of_word(word) {
        // A pointer inside an object must not reach the cache (see `free`).
        // SAFETY: a slab page's word names the live slab holding the page.
        let s = unsafe { &*slab };
        let start = s.holds_size(size) && s.is_object_start_on_pages(addr);
        debug_assert!(!start || s.is_object_start(addr));
        // From beside the word, as in `free`.
        // SAFETY: as for the word.
        let class = unsafe { *(*pc).page_class.get_unchecked(page) } as usize;
        debug_assert_eq!(class, s.class as usize);
        // A block of another arena's slab goes home through the remote-free buffer, as in
        // `free`.
        // SAFETY: the thread's own live cache.
        if start && !s.belongs_to(unsafe { (*tc).home_arena }) {
            // SAFETY: as above; `slab` holds `p`, an object start, of its class.
            unsafe { (*tc).free_remote(p, slab, class) };
            return true;
        }
        (start, class)
    } else {
        // Laid out after the slab case, as in `free` (LLVM put the large test first, 2 more
        // instructions per small pair).
        cold_path();
        let class = (word >> PAGE_CLASS_SHIFT) as usize;
        let start = word & PAGE_KIND == PAGE_LARGE && addr & (crate::os::PAGE - 1) == 0 && {
            let (min, range) = LARGE_SIZES[class & 0xff];
            (size as u64).wrapping_sub(min) < range
        };
        (start, class)
    };
    if !start {
        return false;
    }
    // SAFETY: the thread's own live cache; class < HUGE_FIRST == NBINS for slab and large
    // page words.
    if unsafe { !cache_push(tc, class, p) } {
        // SAFETY: as above; `p` starts a block of `class`, not a sampled one.
        unsafe { cache_push_full(tc, class, p) };
    }
    true
}

/// `cache_push`'s false: the bin of `class` is full (its older half goes to the arena, then
/// `p` on it), or has capacity 0 (a class past `tcache_max`: `free_slow`). `p` is a block the
/// fast path may cache: a checked object start of `class` (`free`), or one pushed by its size
/// (`free_layout`, checked at its flush). Going through `free_slow` instead walked the pagemap
/// and checked the block again at every flush (with `alloc_refill`'s saving, 70 instructions
/// a round trip; docs/benchmarks.md, Session 12).
///
/// # Safety
/// `tc` is the calling thread's live cache, `class < NBINS`, and `p` is such a block.
#[cold]
#[inline(never)]
unsafe fn cache_push_full(tc: *mut crate::tcache::Tcache, class: usize, p: *mut u8) {
    // SAFETY: the contract.
    let t = unsafe { &mut *tc };
    match t.bins.get(class) {
        Some(bin) if bin.cap > 0 => t.free_slow(class, p),
        // SAFETY: forwarded contract.
        _ => unsafe { free_slow(p) },
    }
}

/// Marks the branch calling it unlikely: a stable stand-in for `core::hint::cold_path`, which
/// is newer than the workspace's `rust-version`.
#[cold]
#[inline(always)]
fn cold_path() {}

/// Per value of a page-map word's class byte, for the large classes: `(min, range)`, the
/// class's smallest size and its count of sizes, as `Slab::holds_size` reads them; `(0, 0)`
/// (no size) for every other byte. 256 rows: the byte needs no bounds check.
static LARGE_SIZES: [(u64, u64); 256] = {
    let mut t = [(0u64, 0u64); 256];
    let mut c = NSMALL;
    while c < HUGE_FIRST {
        let min = class_min_size(c);
        t[c] = (min as u64, (class_size(c) + 1 - min) as u64);
        c += 1;
    }
    t
};
const _: () = assert!(HUGE_FIRST <= 256, "LARGE_SIZES has a row per class byte");

/// Pushes `p` on its cache bin if there is room (comparing it with the top first: an immediate
/// double free aborts); false when the bin is full.
///
/// # Safety
/// `tc` is the calling thread's live cache and `class < NBINS` is `p`'s class.
#[inline(always)]
unsafe fn cache_push(tc: *mut crate::tcache::Tcache, class: usize, p: *mut u8) -> bool {
    // SAFETY: per the contract (`class < NBINS`, so unchecked: no panic path in `free`).
    let bin = unsafe { (*tc).bins.get_unchecked_mut(class) };
    let n = bin.count as usize;
    if n >= bin.cap as usize {
        return false;
    }
    // SAFETY: class < NBINS (the contract); n < cap, inside the bin's stack; `items[-1]`
    // (n = 0) is the stack's null slot (`Tcache::items`), which no block equals.
    unsafe {
        let items = *(*tc).items.get_unchecked(class);
        if *items.add(n).sub(1) == p {
            diag::fatal_ptr("double free of", p);
        }
        *items.add(n) = p;
    }
    bin.count += 1;
    true
}

/// `free` of a block whose size and alignment the caller knows (Rust's `dealloc`): for small
/// sizes the class comes from the size, so the pagemap walk is skipped and the push is the
/// whole cost when the block lies in the page chunk the thread last found to be its own
/// arena's (`Tcache::home_chunk`: a shift and a compare). Any other block takes
/// `free_layout_miss`, one pagemap walk, which sends a block of another arena through `free`
/// (its remote-free buffer: the cache-scratch false sharing). The block's real class is
/// checked when it leaves the cache (flush), as jemalloc's sized free does.
///
/// # Safety
/// As `free`, and `p` was allocated with exactly this `size` and `align` (GlobalAlloc's
/// contract), so its class is `class_of(size)`.
#[inline(always)]
pub unsafe fn free_layout(p: *mut u8, size: usize, align: usize) {
    let tc = thread::tcache();
    if !tc.is_null() && (align <= 8 || (align <= 16 && size > 8)) {
        // SAFETY: the thread's own live cache (non-null checked first).
        let max = unsafe { (*tc).sized_max };
        // `sized_max` is FAST_MAX, or 0 under profiling: then (the only case where a size
        // past `sized_max` is at most FAST_MAX) a block is pushed by its size only when no
        // sampled block lies on its page (`prof::may_be_sampled`, one load); otherwise `free`
        // finds a sampled one through the pagemap. Inlined: where the size is a constant (a
        // `Box<T>`), the size tests fold away.
        if size <= max || (size <= FAST_MAX && !crate::prof::may_be_sampled(p as usize)) {
            // SAFETY: the thread's own live cache (non-null checked first).
            if (p as usize) >> LG_CHUNK != unsafe { (*tc).home_chunk } {
                // SAFETY: forwarded contract; `tc` as above.
                return unsafe { free_layout_miss(tc, p, size) };
            }
            let class = class_of(size);
            // SAFETY: the thread's own live cache; class_of(size) < NSMALL <= NBINS.
            if unsafe { cache_push(tc, class, p) } {
                return;
            }
            // SAFETY: as above; a block pushed by its size (checked at its flush).
            return unsafe { cache_push_full(tc, class, p) };
        }
    }
    // SAFETY: forwarded contract.
    unsafe { free(p) }
}

/// `free_layout` of a small block outside `home_chunk`: when the pagemap says its page chunk
/// is the thread's arena's, that chunk becomes `home_chunk` and the block is cached; else
/// (another arena's block, or a chunk changed hands) `free` decides.
///
/// # Safety
/// As `free_layout`, whose checks passed (a small size that is not a sampled block's, small
/// alignment); `tc` is the calling thread's live cache.
#[inline(never)]
unsafe fn free_layout_miss(tc: *mut crate::tcache::Tcache, p: *mut u8, size: usize) {
    let addr = p as usize;
    if let Some(pc) = page_chunk_of_entry(PAGEMAP.get(addr)) {
        // SAFETY: a TAG_PAGES entry points at its chunk's live `PageChunk`; `tc` per the
        // contract.
        if unsafe { (*pc).arena == (*tc).home_arena } {
            // SAFETY: as above.
            unsafe { (*tc).home_chunk = addr >> LG_CHUNK };
            let class = class_of(size);
            // SAFETY: as above; class_of(size) < NSMALL <= NBINS.
            if unsafe { cache_push(tc, class, p) } {
                return;
            }
            // SAFETY: as above; a block pushed by its size (checked at its flush).
            return unsafe { cache_push_full(tc, class, p) };
        }
    }
    // SAFETY: forwarded contract.
    unsafe { free(p) }
}

/// The generic free path.
///
/// # Safety
/// As `free`.
#[cold]
#[inline(never)]
pub unsafe fn free_slow(p: *mut u8) {
    if p.is_null() {
        return;
    }
    if let Some(base) = sampled(p, true) {
        free_arena(arena::owner_of(base), base);
        return;
    }
    let owner = arena::owner_of(p);
    if let Owner::Small { slab, .. } = owner {
        // SAFETY: owner_of returned the live slab holding p.
        if unsafe { (*slab).index_of(p as usize) }.is_none() {
            crate::diag::fatal_ptr("free of a pointer inside a block (not its start):", p);
        }
    }
    let debug = diag::debug();
    if debug != 0 {
        free_debug_cached(owner, p, debug);
        return;
    }
    let tc = thread::tcache();
    match owner {
        Owner::Small { class, .. } | Owner::Large { class, .. } if !tc.is_null() => {
            // SAFETY: the thread's own live cache.
            let t = unsafe { &mut *tc };
            if let Owner::Small { slab, .. } = owner {
                // SAFETY: owner_of returned the live slab holding p, an object start.
                if unsafe { !(*slab).belongs_to(t.home_arena) } {
                    // SAFETY: as above; `owner_of` gave the slab's class.
                    return unsafe { t.free_remote(p, slab, class) };
                }
            }
            if t.bins.get(class).is_some_and(|b| b.cap > 0) {
                t.free_slow(class, p);
                return;
            }
            free_arena(owner, p);
        }
        _ => free_arena(owner, p),
    }
}

fn free_arena(owner: Owner, p: *mut u8) {
    let debug = diag::debug();
    if debug != 0 {
        free_debug(&owner, p, debug);
    }
    free_arena_plain(owner, p)
}

/// Returns `p` to its arena (no debug checks or fills).
fn free_arena_plain(owner: Owner, p: *mut u8) {
    let a = crate::registry::arena(arena::arena_index_of(&owner) as usize);
    match owner {
        Owner::Small { class, .. } => a.bin_flush(class, &[p]),
        Owner::Large { chunk, page, .. } => a.large_free(chunk, page),
        Owner::Huge { extent } => a.huge_free(extent),
    }
}

/// Frees `p`, which the caller says was allocated with `size` and `align`; aborts when that
/// size belongs to another class than the block's. One pagemap lookup, as `free`: the
/// block's class is compared with the size's on `free`'s fast path.
///
/// # Safety
/// As `free`.
#[inline(always)]
pub unsafe fn free_sized(p: *mut u8, size: usize, align: usize) {
    // Under `check:full` the block was served from the class of `size + REDZONE` (and the
    // cache is out of the fast path's sight, so only the slow path sees it). Where the
    // alignment can change the class (`class_for`: past 16, or 16 for 8 bytes) the slow path
    // computes it; `free_sized` and `sdallocx` without an alignment flag pass 1.
    // SAFETY: forwarded contract.
    if (align <= 8 || (align <= 16 && size > 8)) && unsafe { free_cached(p, size) } {
        return;
    }
    // SAFETY: forwarded contract.
    unsafe { free_sized_slow(p, size, align) }
}

/// `free_sized` off the fast path: null, a sampled, huge or uncached block, a full bin, the
/// debug modes, or a misuse (the size of another class, a pointer inside a block).
///
/// # Safety
/// As `free`.
#[cold]
#[inline(never)]
unsafe fn free_sized_slow(p: *mut u8, size: usize, align: usize) {
    if p.is_null() {
        return;
    }
    if sampled(p, false).is_some() {
        // SAFETY: forwarded contract.
        return unsafe { free_slow(p) };
    }
    let class = arena::class_of_ptr(p);
    let asked = if diag::debug() & diag::DEBUG_FULL != 0 {
        size.saturating_add(REDZONE)
    } else {
        size
    };
    if class_for(asked, align) != Some(class) {
        crate::diag::fatal_ptr("free with a size of another class:", p);
    }
    // SAFETY: forwarded contract.
    unsafe { free_slow(p) }
}

/// Frees `p` bypassing the thread cache.
///
/// # Safety
/// As `free`.
pub unsafe fn free_no_cache(p: *mut u8) {
    if p.is_null() {
        return;
    }
    if let Some(base) = sampled(p, true) {
        free_arena(arena::owner_of(base), base);
        return;
    }
    free_arena(arena::owner_of(p), p)
}

/// The usable size of a live block.
///
/// # Safety
/// `p` is a live block from this allocator.
pub unsafe fn usable_size(p: *const u8) -> usize {
    let p = p as *mut u8;
    if let Some(base) = sampled(p, false) {
        return usable_of(base, &arena::owner_of(base)) - (p as usize - base as usize);
    }
    usable_of(p, &arena::owner_of(p))
}

/// The usable size `alloc(size, align)` would give, without allocating.
pub fn good_size(size: usize, align: usize) -> Option<usize> {
    class_for(size, align).map(class_size)
}

/// Resizes in place if the block's class or run allows; returns the new usable size (the old
/// one if nothing changed).
///
/// # Safety
/// `p` is a live block from this allocator.
pub unsafe fn resize_in_place(p: *mut u8, size: usize, align: usize) -> usize {
    if sampled(p, false).is_some() {
        // A sampled block keeps its run: it is never resized in place.
        // SAFETY: forwarded contract.
        return unsafe { usable_size(p) };
    }
    let Some(new_class) = class_for(size, align) else {
        return usable_of(p, &arena::owner_of(p));
    };
    let owner = arena::owner_of(p);
    let a = crate::registry::arena(arena::arena_index_of(&owner) as usize);
    match owner {
        Owner::Small { .. } => usable_of(p, &owner),
        Owner::Large { chunk, page, class } => {
            if new_class == class
                || ((NSMALL..HUGE_FIRST).contains(&new_class)
                    && (p as usize).is_multiple_of(align.max(1))
                    && a.large_resize(chunk, page, new_class))
            {
                class_size(new_class)
            } else {
                class_size(class)
            }
        }
        Owner::Huge { extent } => {
            // SAFETY: owner_of checked the extent is live.
            let class = unsafe { (*extent).class as usize };
            if new_class >= HUGE_FIRST
                && (p as usize).is_multiple_of(align.max(1))
                && a.huge_resize(extent, new_class, size)
            {
                class_size(new_class)
            } else {
                class_size(class)
            }
        }
    }
}

/// `realloc`: resizes `p` to `size` bytes aligned to `align`, in place when the class or run
/// allows, else by moving. Returns null (with `p` untouched) when memory is short.
///
/// # Safety
/// `p` is null or a live block from this allocator; on success it must not be used again
/// unless the same pointer is returned.
pub unsafe fn realloc(p: *mut u8, size: usize, align: usize) -> *mut u8 {
    if p.is_null() {
        return alloc(size, align);
    }
    let Some(new_class) = class_for(size, align) else {
        return null_mut();
    };
    if sampled(p, false).is_some() {
        // A sampled block moves (keeping its run would keep its sample's size wrong).
        // SAFETY: p is live (the contract).
        let old_usable = unsafe { usable_size(p) };
        let q = alloc(size, align);
        if !q.is_null() {
            // SAFETY: both blocks are live and distinct; copy what both hold.
            unsafe {
                ptr::copy_nonoverlapping(p, q, old_usable.min(size));
                free(p);
            }
        }
        return q;
    }
    let owner = arena::owner_of(p);
    let old_usable = usable_of(p, &owner);
    let old_class = match owner {
        Owner::Small { class, .. } | Owner::Large { class, .. } => class,
        // SAFETY: owner_of checked the extent is live.
        Owner::Huge { extent } => unsafe { (*extent).class as usize },
    };
    if diag::debug() & diag::DEBUG_FULL != 0 && is_small(old_class) {
        // Keep every block's redzone right: move, never resize in place.
        let q = alloc(size, align);
        if !q.is_null() {
            // SAFETY: both blocks are live and distinct; copy what both hold.
            unsafe {
                ptr::copy_nonoverlapping(p, q, old_usable.min(size));
                free(p);
            }
        }
        return q;
    }
    if new_class == old_class && (p as usize).is_multiple_of(align) {
        if let Owner::Huge { extent } = owner {
            // SAFETY: live extent; record the new requested size for advice and stats.
            unsafe { (*extent).size = size };
        }
        return p;
    }
    let aligned = (p as usize).is_multiple_of(align);
    if aligned
        && !is_small(old_class)
        && !is_small(new_class)
        && (new_class < HUGE_FIRST) == (old_class < HUGE_FIRST)
    {
        // SAFETY: p is live.
        if unsafe { resize_in_place(p, size, align) } == class_size(new_class) {
            return p;
        }
    }
    let q = alloc(size, align);
    if q.is_null() {
        return q;
    }
    // SAFETY: both blocks are live and distinct; we copy what both can hold.
    unsafe {
        ptr::copy_nonoverlapping(p, q, old_usable.min(size));
        free(p);
    }
    q
}

#[cfg(test)]
mod tests;
