//! Thread caches. Per thread, per small class (and large classes up to `tcache_max`) a bounded
//! stack of cached pointers: allocation pops, free pushes, with no lock and no atomic
//! read-modify-write. An empty bin refills half its base capacity from the arena bin in one
//! locked batch; a full bin flushes its older half back, grouped so each arena bin lock is
//! taken once per group. Slow-path events drive an incremental GC that flushes half of any bin
//! the program has not needed the arena for since the last pass.
//!
//! A small bin's capacity adapts to the program (as tcmalloc's free lists do): a bin that
//! refills soon after it overflowed (`GROW_WITHIN`) swings over more blocks than its
//! capacity, so its capacity doubles (up to `grow_max`, within the thread's
//! `GROW_THREAD_BYTES`), moving its stack to storage of its own; every second GC visit in a
//! row that finds it idle (no refill, its count unchanged) halves it back towards the base. A
//! program that allocates and frees a working set of a few hundred or thousand blocks of a
//! class over and over then runs from the cache alone, with no refill or flush (each a bin
//! lock and a pass over bitmaps).
//!
//! A small block of a slab of another arena (freed by this thread, allocated by a thread of
//! another arena) is not cached: it goes to the thread's remote-free stack of its class
//! (`remote`, `bin::RemoteFrees`, as many blocks as a flush of that class's bin), which hands
//! its blocks back to their own arenas' bins in one batch when full, at a GC step when idle,
//! on `flush_all` and at thread exit, so this thread's `malloc` never returns a block whose
//! neighbours another core is writing. The remote stacks' storage (`bin::REMOTE_STORAGE_BYTES`)
//! is taken from the base at the thread's first remote free and returned at its exit.
//!
//! The stacks live in one metadata block after the `Tcache` header (`items`), a grown bin's in
//! base storage of its own; never in user memory.

use crate::arena::{self, Arena, Owner};
use crate::base::BASE;
use crate::bin::{self, RemoteFrees};
use crate::chunk::PageChunk;
use crate::size_class::*;
use crate::slab::Slab;
use core::mem::MaybeUninit;
use core::ptr::null_mut;

const _: () = assert!(bin::BATCH_CAP_MAX == crate::arena::BATCH_MAX);

/// Classes a thread cache may hold: every small and large class.
pub const NBINS: usize = HUGE_FIRST;
/// The largest per-bin capacity.
pub const CAP_MAX: usize = crate::arena::BATCH_MAX;
/// Slow-path events between two GC steps (each step visits one bin).
const GC_EVERY: u32 = 64;
/// A small bin grows to at most this many bytes of blocks (`grow_max`), and to at most
/// `tcache_nslots_small_max` blocks.
pub const GROW_CLASS_BYTES: usize = 512 << 10;
/// A bin grows when it refills within this many slow-path events (refills and overflows of
/// any of the thread's bins) of an overflow: it then went from full to empty while the
/// thread's other bins hardly moved, the swing of a working set allocated and freed whole
/// (criterion's `batch`: 1 event), not the slow drift of a random walk, which would grow every
/// bin of a thread that allocates and frees at random (larson: 40.0 -> 57.4 MiB peak RSS
/// without this test, its 80 threads each holding grown bins while they wait in `join`).
pub const GROW_WITHIN: u32 = 8;
/// A thread's bins together grow by at most this many bytes of blocks past their base
/// capacities (`Tcache::grown_bytes`).
pub const GROW_THREAD_BYTES: usize = 1 << 20;

/// A bin's count and capacity: the fast paths' part of a bin, 8 bytes, in an array of their
/// own (`Tcache::bins`), with the stacks' addresses in another (`Tcache::items`) and the rest in
/// a third (`Tcache::info`): each access is one instruction whose address the class indexes
/// directly (a 40-byte bin with all three cost a multiply by five and the bin's address
/// computed into a register, 3 instructions per `malloc` and per `free`; callgrind per
/// preloaded pair, docs/benchmarks.md, Session 13).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct TBin {
    pub count: u32,
    /// The capacity now: `info.base` or, grown, up to `grow_max(class, base)`.
    pub cap: u32,
}

/// The rest of a bin's state: its capacity's history and its GC marks.
#[derive(Clone, Copy, Default)]
pub struct BinInfo {
    /// The capacity the bin starts with (`bin_cap`); a refill takes half of it.
    pub base: u16,
    /// Slots of the bin's own stack storage (0: its stack is in the cache's block, of `base`
    /// slots), taken from the base at its first growth and kept until the thread exits.
    pub own_slots: u16,
    /// Set when the bin went to the arena since the last GC visit.
    pub busy: bool,
    /// The cache's `events` at the bin's last overflow (flush because full) since its last
    /// refill, 0 for none: a refill within `GROW_WITHIN` events of it grows the bin.
    pub overflow_at: u32,
    /// Set when the bin refilled since the last GC visit.
    pub refilled: bool,
    /// GC visits in a row that found the grown bin idle (no refill, and `count` where the last
    /// visit left it): it shrinks at the second and counts again (a bin a program uses in turn
    /// with others is often idle at one visit).
    pub idle_visits: u8,
    /// `count` at the last GC visit: a grown bin whose working set fits never refills, but its
    /// count moves while the program uses it.
    pub last_count: u32,
}

const _: () = assert!(
    core::mem::size_of::<TBin>() == 8,
    "the fast paths scale the class by 8"
);

/// Sizes up to this go through the class lookup table on the fast paths (`alloc`).
pub const FAST_MAX: usize = 4096;

/// Set by `prof::init` when heap profiling is on (`opt.prof`), before any cache exists: new
/// caches then start their sampling countdown at 0 (the first allocation seeds it) and set
/// `sized_max` to 0, so a sized free first asks `prof::may_be_sampled` whether a sampled block
/// lies on the block's page (one load) before it pushes by size.
pub static PROFILING: crate::sync::plain::AtomicBool = crate::sync::plain::AtomicBool::new(false);

/// The fast paths' first reads share the header's first cache line: `malloc` reads
/// `prof_countdown` before its bin, and Rust's `dealloc` reads `sized_max`; with both after the
/// bins (1.4 KiB further) each pair touched one more line. The bins follow at offset 16, which
/// the x86 addressing modes fold into each access (no extra instruction). `free` compares
/// `home_arena` with the block's slab's arena and Rust's `dealloc` the block's chunk with
/// `home_chunk`, so both sit in the first line too (the bins then start at offset 32). Each
/// bin is three arrays indexed by class: `bins` (count and capacity), `items` (the stack) and
/// `info` (the rest, which the fast paths never read).
#[repr(C, align(64))]
pub struct Tcache {
    /// Bytes to allocate before the next heap-profiling sample (`prof`); `u64::MAX` (never
    /// runs out in practice) when profiling is off, so the fast path pays one subtraction and
    /// one branch.
    pub prof_countdown: u64,
    /// Sized frees (`free_layout`) of at most this many bytes go straight to the cache:
    /// `FAST_MAX`, or 0 under profiling, where a small one first asks `prof::may_be_sampled`.
    pub sized_max: usize,
    /// The index of `arena`: a small block whose slab belongs to another arena goes to
    /// `remote`, not to a bin.
    pub home_arena: u32,
    /// The chunk number (`addr >> LG_CHUNK`) of the last page chunk a sized free found to be
    /// `home_arena`'s (0: none; no chunk starts at address 0): `free_layout` caches a block of
    /// that chunk without a pagemap walk, and walks it for any other block.
    pub home_chunk: usize,
    pub bins: [TBin; NBINS],
    /// Per bin, its stack: `items[c][0..count]` are cached pointers, the top is
    /// `items[c][count - 1]`. `items[c][-1]` is a null slot no push writes, so `free`'s compare
    /// of a pointer with the top needs no test of an empty bin (`alloc::cache_push`).
    pub items: [*mut *mut u8; NBINS],
    pub info: [BinInfo; NBINS],
    // ---- the rest of heap profiling's fields.
    /// The sampling generator's state (0: not seeded yet).
    pub prof_rng: u64,
    /// `thread.prof.active` is false: this thread's allocations are not sampled.
    pub prof_thread_off: bool,
    /// A sample is being taken: a nested allocation (the unwinder's) is not sampled.
    pub prof_busy: bool,
    // ---- end of heap profiling fields.
    /// The arena this thread allocates from (`set_arena` changes it with `home_arena`).
    pub arena: *const Arena,
    /// Small blocks of other arenas freed by this thread, on their way home (one stack per
    /// small class; storage attached at the first remote free).
    remote: RemoteFrees,
    /// Bytes of the whole metadata block (header and stacks).
    block_bytes: usize,
    /// Bytes of blocks the bins' capacities grew by past their bases, together (at most
    /// `GROW_THREAD_BYTES`).
    grown_bytes: usize,
    /// `tcache_nslots_small_max`: the most slots a small bin grows to (`grow_max`).
    grow_slots: usize,
    gc_ticks: u32,
    /// Slow-path events so far (refills and overflows; wraps, never 0): the clock of
    /// `BinInfo::overflow_at`.
    events: u32,
    gc_next: u32,
}

/// Capacity of class `class`'s bin when `tcache_max` is the largest cached size.
pub const fn bin_cap(class: usize, tcache_max: usize) -> usize {
    if class_size(class) > tcache_max || class >= NBINS {
        return 0;
    }
    if is_small(class) {
        bin::small_batch_cap(class)
    } else if class_size(class) <= 64 << 10 {
        16
    } else {
        4
    }
}

/// The most slots small class `class`'s bin (of base capacity `base`) may grow to: `slots`
/// (`tcache_nslots_small_max`) or `GROW_CLASS_BYTES` of blocks, whichever is fewer, rounded
/// down to one less than a power of two (with the null slot before it, a grown stack's storage
/// is a power of two of slots: few distinct sizes for the base's exact-size free lists), and
/// never below `base`; `base` itself for a large class (cached large blocks never refill).
/// Every small bin may grow: bins of 384 B to 16 KiB blocks too, whose base capacity (16 to 42
/// blocks) a burst of a hundred blocks overflows (docs/benchmarks.md, Session 15: sh6bench
/// -20%, mstress -10%; larson's peak RSS 40 -> 64 MiB, its threads waiting in `join` with grown
/// bins).
pub const fn grow_max(class: usize, base: usize, slots: usize) -> usize {
    if !is_small(class) {
        return base;
    }
    let by_bytes = GROW_CLASS_BYTES / class_size(class);
    let most = if by_bytes < slots { by_bytes } else { slots };
    // The largest power of two at most `most + 1`, less one.
    let most = (1usize << (usize::BITS - 1 - (most + 1).leading_zeros())) - 1;
    if most > base {
        most
    } else {
        base
    }
}
// `BinInfo::base` and `BinInfo::own_slots` are 16 bits.
const _: () = assert!(CAP_MAX <= u16::MAX as usize);
const _: () = assert!(crate::config::TCACHE_SLOTS_LIMIT <= u16::MAX as usize);

/// The bin of `class` in `bins`; aborts on a class no bin holds (corrupt metadata: callers
/// pass classes of cached blocks, all below `NBINS`).
#[inline]
fn bin_mut(bins: &mut [TBin; NBINS], class: usize) -> &mut TBin {
    match bins.get_mut(class) {
        Some(bin) => bin,
        None => bad_class(class),
    }
}

/// `bin_mut` for the bin's `BinInfo`.
#[inline]
fn info_mut(info: &mut [BinInfo; NBINS], class: usize) -> &mut BinInfo {
    match info.get_mut(class) {
        Some(i) => i,
        None => bad_class(class),
    }
}

#[cold]
fn bad_class(class: usize) -> ! {
    crate::diag::fatal_index(
        "a thread cache bin of a class past the cached ones",
        class,
        NBINS,
    )
}

impl Tcache {
    /// Creates a thread cache in metadata memory; null when out of memory. `tcache_max` is the
    /// largest size it caches, `grow_slots` the most blocks a small bin grows to (`grow_max`).
    pub fn create(arena: *const Arena, tcache_max: usize, grow_slots: usize) -> *mut Tcache {
        let header = core::mem::size_of::<Tcache>();
        let mut slots = 0;
        for c in 0..NBINS {
            // A bin's stack and the null slot before it (`Tcache::items`).
            slots += bin_cap(c, tcache_max) + 1;
        }
        let bytes = header + slots * core::mem::size_of::<*mut u8>();
        let tc = BASE.alloc(bytes) as *mut Tcache;
        if tc.is_null() {
            return tc;
        }
        // SAFETY: tc is fresh zeroed metadata of `bytes` bytes; the stacks follow the header.
        unsafe {
            let t = &mut *tc;
            t.arena = arena;
            t.home_arena = (*arena).index;
            // Zeroed memory is an empty buffer; written whole for clarity.
            core::ptr::write(&mut t.remote, RemoteFrees::new());
            // Relaxed: set once by the global init, which happened-before any cache exists.
            let profiling = PROFILING.load(crate::sync::Ordering::Relaxed);
            t.prof_countdown = if profiling { 0 } else { u64::MAX };
            t.sized_max = if profiling { 0 } else { FAST_MAX };
            t.block_bytes = bytes;
            t.grow_slots = grow_slots.min(crate::config::TCACHE_SLOTS_LIMIT);
            let mut items = (tc as *mut u8).add(header) as *mut *mut u8;
            for c in 0..NBINS {
                let cap = bin_cap(c, tcache_max);
                // The null slot before the stack: zeroed memory already, written for clarity.
                items.write(null_mut());
                items = items.add(1);
                t.bins[c] = TBin {
                    count: 0,
                    cap: cap as u32,
                };
                t.items[c] = items;
                t.info[c] = BinInfo {
                    base: cap as u16,
                    ..BinInfo::default()
                };
                items = items.add(cap);
            }
        }
        tc
    }

    /// Flushes everything and returns the block to the base.
    ///
    /// # Safety
    /// `tc` came from `create` and is not used afterwards.
    pub unsafe fn destroy(tc: *mut Tcache) {
        // SAFETY: per the contract tc is a live tcache owned by the caller.
        unsafe {
            let t = &mut *tc;
            t.flush_all();
            for (info, &items) in t.info.iter().zip(&t.items) {
                if info.own_slots > 0 {
                    // The stack and the null slot before it (`grow`).
                    BASE.free(items.sub(1) as *mut u8, own_bytes(info.own_slots as usize));
                }
            }
            let storage = t.remote.detach();
            if !storage.is_null() {
                BASE.free(storage, bin::REMOTE_STORAGE_BYTES);
            }
            BASE.free(tc as *mut u8, t.block_bytes);
        }
    }

    /// Refills the empty bin of `class` and pops one; null when out of memory.
    #[cold]
    #[inline(never)]
    pub fn alloc_slow(&mut self, class: usize) -> *mut u8 {
        self.check();
        self.gc_tick();
        let info = info_mut(&mut self.info, class);
        let at = info.overflow_at;
        // The cheap test first: a refill with no overflow since the last pays one compare.
        if at != 0 && self.events.wrapping_sub(at) <= GROW_WITHIN {
            self.grow(class);
        }
        let info = info_mut(&mut self.info, class);
        info.busy = true;
        info.overflow_at = 0;
        info.refilled = true;
        let base = info.base as usize;
        let items = self.items[class];
        let bin = bin_mut(&mut self.bins, class);
        // SAFETY: the arena outlives every thread bound to it (arenas are never destroyed).
        let arena = unsafe { &*self.arena };
        if is_small(class) {
            // Half the base capacity, whatever the bin grew to: a refill brings what the
            // next few allocations need, not what the bin could hold.
            let want = (base / 2).max(1);
            // SAFETY: items has room for cap >= want pointers and the bin is empty.
            let out = unsafe { core::slice::from_raw_parts_mut(items, want) };
            let n = arena.bin_fill(class, out);
            if n == 0 {
                return null_mut();
            }
            bin.count = n as u32 - 1;
            // SAFETY: index n - 1 was just filled.
            return unsafe { *items.add(n - 1) };
        }
        // Large classes are cached only on free; allocation goes to the arena.
        arena.large_alloc(class, 1, false)
    }

    /// Caches `p` (class `class`, a bin of capacity above 0), flushing the older half of a
    /// full bin first: the push of the debug modes' path (the fast path has its own, in
    /// `alloc`).
    pub fn push(&mut self, class: usize, p: *mut u8) {
        let bin = bin_mut(&mut self.bins, class);
        let items = self.items[class];
        if bin.count >= bin.cap {
            return self.free_slow(class, p);
        }
        // SAFETY: count < cap: inside the bin's stack.
        unsafe { *items.add(bin.count as usize) = p };
        bin.count += 1;
    }

    /// Caches `p` (class `class`) in its full bin after flushing the older half.
    #[cold]
    #[inline(never)]
    pub fn free_slow(&mut self, class: usize, p: *mut u8) {
        self.check();
        self.gc_tick();
        let events = self.events;
        let info = info_mut(&mut self.info, class);
        info.busy = true;
        info.overflow_at = events;
        let half = (bin_mut(&mut self.bins, class).cap as usize).div_ceil(2);
        self.flush_bin(class, half);
        let items = self.items[class];
        let bin = bin_mut(&mut self.bins, class);
        if bin.count >= bin.cap {
            // Only a bin of capacity 0 stays full; callers never cache into one.
            crate::diag::fatal_index(
                "a full thread cache bin",
                bin.count as usize,
                bin.cap as usize,
            );
        }
        // SAFETY: count < cap: inside the bin's stack.
        unsafe { *items.add(bin.count as usize) = p };
        bin.count += 1;
    }

    /// Doubles the capacity of small bin `class` (it refilled soon after it overflowed, so
    /// the program's use of the class swings over more than its capacity), up to `grow_max`
    /// and within the thread's `GROW_THREAD_BYTES`; the first growth moves its stack to
    /// storage of its own, of `grow_max` slots. Nothing changes when the bin is at its most,
    /// the thread's budget is spent, or the base has no memory for the storage (warned once).
    fn grow(&mut self, class: usize) {
        let size = class_size(class);
        let grown = self.grown_bytes;
        let info = info_mut(&mut self.info, class);
        let bin = bin_mut(&mut self.bins, class);
        let base = info.base as usize;
        let (cap, most) = (bin.cap as usize, grow_max(class, base, self.grow_slots));
        let new = (cap * 2).min(most);
        if new <= cap || grown + (new - cap) * size > GROW_THREAD_BYTES {
            return;
        }
        if info.own_slots == 0 {
            let storage = BASE.alloc(own_bytes(most)) as *mut *mut u8;
            if storage.is_null() {
                crate::diag::warn_once(
                    &GROW_NO_STORAGE_WARNED,
                    "no metadata memory to grow a thread cache bin; it keeps its capacity \
                     (warned once)",
                );
                return;
            }
            // SAFETY: fresh zeroed base memory of `most + 1` slots: slot 0 is the null slot
            // before the stack (`Tcache::items`), the stack follows; the old stack's `count`
            // pointers are initialised and `count <= cap < new <= most`.
            unsafe {
                let items = storage.add(1);
                core::ptr::copy_nonoverlapping(self.items[class], items, bin.count as usize);
                self.items[class] = items;
            }
            info.own_slots = most as u16;
        }
        bin.cap = new as u32;
        self.grown_bytes = grown + (new - cap) * size;
    }

    /// Halves the capacity of bin `class` towards its base (two GC visits in a row found it
    /// idle), flushing the oldest blocks past the new capacity.
    fn shrink(&mut self, class: usize) {
        let base = info_mut(&mut self.info, class).base as usize;
        let bin = bin_mut(&mut self.bins, class);
        let cap = bin.cap as usize;
        if cap <= base {
            return;
        }
        let new = (cap / 2).max(base);
        bin.cap = new as u32;
        let over = (bin.count as usize).saturating_sub(new);
        self.grown_bytes -= (cap - new) * class_size(class);
        self.flush_bin(class, over);
    }

    /// Returns the oldest `n` pointers of bin `class` to their arenas.
    pub fn flush_bin(&mut self, class: usize, n: usize) {
        let bin = bin_mut(&mut self.bins, class);
        let items = self.items[class];
        let count = bin.count as usize;
        let n = n.min(count);
        if n == 0 {
            return;
        }
        // SAFETY: items[0..count] are initialised cached pointers and n <= count.
        let old = unsafe { core::slice::from_raw_parts_mut(items, n) };
        // SAFETY: the arena outlives every thread bound to it (arenas are never destroyed).
        flush_items(unsafe { &*self.arena }, class, old);
        // SAFETY: n <= count: moves items[n..count] down to 0 (the ranges may overlap).
        unsafe { core::ptr::copy(items.add(n), items, count - n) };
        bin.count -= n as u32;
    }

    /// Flushes every bin's contents and the remote-free buffer (`thread.tcache.flush`, thread
    /// exit, a change of arena).
    pub fn flush_all(&mut self) {
        for c in 0..NBINS {
            self.flush_bin(c, usize::MAX);
        }
        self.remote_flush();
    }

    /// Binds the cache to `arena` (its bins flushed first by the caller: nothing cached may
    /// belong to the old binding, which would become remote).
    ///
    /// # Safety
    /// `arena` is a live arena (arenas are never destroyed).
    pub unsafe fn set_arena(&mut self, arena: *const Arena) {
        self.arena = arena;
        // SAFETY: the contract.
        self.home_arena = unsafe { (*arena).index };
        self.home_chunk = 0;
    }

    /// Buffers `p`, a small block of `slab` (of small class `class`), an arena's other than
    /// this thread's, on its class's remote stack to go home in a batch (draining the stack
    /// first when it is full; taking the stacks' storage from the base at the first remote
    /// free): `free`'s path for a block another thread allocated.
    ///
    /// # Safety
    /// `slab` is the live slab holding `p`, `p` is an object start of it, not free, and
    /// `class` is the slab's class.
    #[cold]
    #[inline(never)]
    pub unsafe fn free_remote(&mut self, p: *mut u8, slab: *mut Slab, class: usize) {
        // SAFETY: the contract.
        if unsafe { self.remote.push(p, slab, class) } {
            return;
        }
        // SAFETY: the contract.
        unsafe { self.free_remote_slow(p, slab, class) }
    }

    /// `free_remote` when the push failed: a full stack or no storage yet. (Out of line, the
    /// push alone saves and restores fewer registers: xmalloc's consumer frees every block
    /// remotely.)
    ///
    /// # Safety
    /// As `free_remote`.
    #[cold]
    #[inline(never)]
    unsafe fn free_remote_slow(&mut self, p: *mut u8, slab: *mut Slab, class: usize) {
        if self.remote.has_storage() {
            self.remote_drain_class(class);
        } else {
            let storage = BASE.alloc(bin::REMOTE_STORAGE_BYTES);
            if storage.is_null() {
                // No metadata memory: the block goes home alone (one bin lock per block), and
                // the attach is tried again at the next remote free.
                crate::diag::warn_once(
                    &REMOTE_NO_STORAGE_WARNED,
                    "no metadata memory for a thread's remote-free stacks; its frees of other \
                     arenas' blocks go home one at a time (warned once)",
                );
                // SAFETY: `slab` is live (the contract), so its arena is a registered one.
                let home = unsafe { (*slab).arena } as usize;
                return crate::registry::arena(home).bin_flush_slabs(class, &[(p, slab)]);
            }
            // SAFETY: fresh base memory of `REMOTE_STORAGE_BYTES`, 64-byte aligned, this
            // thread's until `destroy` detaches it; no storage was attached.
            unsafe { self.remote.attach(storage) };
        }
        // Room after the drain or the attach: this push cannot fail.
        // SAFETY: the contract.
        let _ = unsafe { self.remote.push(p, slab, class) };
    }

    /// Hands every buffered remote free back to its own arena's bin, one bin lock per class
    /// and arena present.
    pub fn remote_flush(&mut self) {
        self.remote.check(self.home_arena);
        // SAFETY: every buffered slab holds a block freed to it and not yet returned, so it
        // is live (`free_remote`'s contract) and, grouped by its arena and class, one that
        // arena's bin of that class owns (`bin_flush_slabs`'s contract).
        unsafe { self.remote.drain(remote_home) };
    }

    /// Hands remote stack `class` (full) home: one bin lock per arena present.
    fn remote_drain_class(&mut self, class: usize) {
        self.remote.check(self.home_arena);
        // SAFETY: as in `remote_flush`.
        unsafe { self.remote.drain_class(class, remote_home) };
    }

    /// Counts a slow-path event (`events`) and takes a GC step every `GC_EVERY` of them.
    /// Inlined to the counting: as a call, with the step's registers saved, it was 44
    /// instructions per refill (callgrind, a batch of 1 KiB blocks).
    #[inline]
    fn gc_tick(&mut self) {
        self.events = self.events.wrapping_add(1).max(1);
        self.gc_ticks += 1;
        if self.gc_ticks >= GC_EVERY {
            self.gc_ticks = 0;
            self.gc_step();
        }
    }

    /// One GC step: visit the next bin that holds something (or is grown); shrink a grown
    /// bin idle at two visits in a row; if the bin did not go to the arena since the last
    /// visit, give back half of it.
    #[cold]
    #[inline(never)]
    fn gc_step(&mut self) {
        // Remote frees wait at most two GC periods (a thread that freed a few and went on
        // allocating from its cache would otherwise keep them until it exits); a stack that
        // filled and went home since the last step is in use and left to fill again.
        if !self.remote.is_empty() {
            self.remote.check(self.home_arena);
            // SAFETY: as in `remote_flush`.
            unsafe { self.remote.drain_idle(remote_home) };
        }
        for _ in 0..NBINS {
            let c = self.gc_next as usize;
            self.gc_next = (self.gc_next + 1) % NBINS as u32;
            let bin = *bin_mut(&mut self.bins, c);
            let info = info_mut(&mut self.info, c);
            let refilled = core::mem::replace(&mut info.refilled, false);
            let moved = bin.count != info.last_count;
            if bin.cap > info.base as u32 {
                if refilled || moved {
                    info.idle_visits = 0;
                } else {
                    info.idle_visits = info.idle_visits.saturating_add(1);
                    if info.idle_visits >= 2 {
                        info.idle_visits = 0;
                        self.shrink(c);
                    }
                }
            }
            let count = bin_mut(&mut self.bins, c).count;
            let held = count > 0;
            if held && !info_mut(&mut self.info, c).busy {
                let half = (count as usize).div_ceil(2);
                self.flush_bin(c, half);
            }
            let count = bin_mut(&mut self.bins, c).count;
            let info = info_mut(&mut self.info, c);
            info.busy = false;
            // The count this visit leaves, its own flushes done: the next visit compares.
            info.last_count = count;
            if held {
                break;
            }
        }
    }

    /// Invariant scan (debug and test builds, `check:full`); inlined to the flag test.
    #[inline]
    pub fn check(&self) {
        if crate::diag::full_checks() {
            self.scan();
        }
    }

    /// The scan of `check`.
    #[cold]
    #[inline(never)]
    fn scan(&self) {
        let mut grown = 0;
        for (c, (b, i)) in self.bins.iter().zip(&self.info).enumerate() {
            crate::diag::invariant(
                b.count <= b.cap,
                "a thread cache bin holds more than its capacity",
            );
            crate::diag::invariant(
                b.cap as usize <= grow_max(c, i.base as usize, self.grow_slots)
                    && (b.cap == i.base as u32 || b.cap <= i.own_slots as u32),
                "a thread cache bin's capacity exceeds its storage",
            );
            grown += (b.cap as usize - i.base as usize) * class_size(c);
        }
        crate::diag::invariant(
            grown == self.grown_bytes && grown <= GROW_THREAD_BYTES,
            "a thread cache's grown bytes disagree with its bins",
        );
        self.remote.check(self.home_arena);
    }
}

/// Bytes of a bin's own stack storage of `slots` slots: the slots and the null slot before.
const fn own_bytes(slots: usize) -> usize {
    (slots + 1) * core::mem::size_of::<*mut u8>()
}

/// Set by the first thread that found no metadata memory to grow a bin (the one warning).
static GROW_NO_STORAGE_WARNED: crate::sync::plain::AtomicBool =
    crate::sync::plain::AtomicBool::new(false);

/// Set by the first thread that found no metadata memory for its remote-free stacks (the
/// fallback's one warning).
static REMOTE_NO_STORAGE_WARNED: crate::sync::plain::AtomicBool =
    crate::sync::plain::AtomicBool::new(false);

/// Where a drained group of remote frees goes: its arena's bin of its class.
fn remote_home(home: u32, class: usize, group: &mut [(*mut u8, *mut Slab)]) {
    crate::registry::arena(home as usize).bin_flush_slabs(class, group)
}

/// Returns `items` (all of class `class`, possibly from several arenas) to their arenas,
/// taking each arena's bin lock once per group. Small blocks go to `home` first (the cache's
/// arena, whose blocks a cache holds but for a chunk that changed hands), one slab looked up
/// per run of blocks of one slab (`Arena::bin_flush_ptrs`); any left, from the first block of
/// another arena's slab on, have each pointer's slab looked up once. Every pointer is checked
/// to be of `class` (a sized free with a wrong size aborts here).
pub fn flush_items(home: &Arena, class: usize, items: &mut [*mut u8]) {
    // Batches of at most CAP_MAX (by `get`, not `chunks_mut`, whose split holds a panic site).
    let mut start = 0;
    while start < items.len() {
        let end = items.len().min(start + CAP_MAX);
        let Some(batch) = items.get_mut(start..end) else {
            break;
        };
        start = end;
        if is_small(class) {
            let done = home.bin_flush_ptrs(class, batch);
            let batch = match batch.get_mut(done..) {
                Some(rest) if !rest.is_empty() => rest,
                _ => continue,
            };
            // Not zeroed first: 2 KiB of stores per flush cost more than the pointers' own
            // lookups when a flush is a few dozen objects.
            let mut buf = [MaybeUninit::<(*mut u8, *mut Slab)>::uninit(); CAP_MAX];
            let (n, home) = slabs_of(class, batch, &mut buf);
            // SAFETY: `slabs_of` wrote the first `n <= CAP_MAX` slots.
            let pairs = unsafe { bin::init_prefix(&mut buf, n) };
            match home {
                // One arena (the common case): no grouping pass.
                Some(home) => crate::registry::arena(home as usize).bin_flush_slabs(class, pairs),
                None => bin::for_each_group(
                    pairs,
                    // SAFETY: slab_of returned live slabs.
                    |&(_, s)| unsafe { (*s).arena },
                    |home, group| {
                        crate::registry::arena(home as usize).bin_flush_slabs(class, group)
                    },
                ),
            }
        } else {
            // (chunk, page) of each large block, looked up and checked once.
            let mut buf = [MaybeUninit::<(*mut PageChunk, usize)>::uninit(); CAP_MAX];
            let mut n = 0;
            for (slot, &p) in buf.iter_mut().zip(batch.iter()) {
                slot.write(match arena::owner_of(p) {
                    Owner::Large {
                        chunk,
                        page,
                        class: c,
                    } if c == class => (chunk, page),
                    _ => crate::diag::fatal_ptr("free with a size of another class:", p),
                });
                n += 1;
            }
            // SAFETY: the first `n <= CAP_MAX` slots were written just above.
            let runs = unsafe { bin::init_prefix(&mut buf, n) };
            bin::for_each_group(
                runs,
                // SAFETY: owner_of returned live page chunks.
                |&(chunk, _)| unsafe { (*chunk).arena },
                |home, group| crate::registry::arena(home as usize).large_free_all(group),
            );
        }
    }
}

/// Writes `(p, slab holding p)` for each of `items` (cached blocks of small class `class`) to
/// the front of `buf`; returns how many and, when every slab is one arena's, that arena.
///
/// A flush hands back blocks a refill took from one slab in address order, so a block usually
/// lies in the slab of the block before it: then a subtract and a compare against that slab's
/// object area find it, with no pagemap walk (`arena::slab_of`: the pagemap's entry, the page's
/// word, the class check) and no load of its arena. That is exact: a slab's pages belong to it
/// alone while it is live, and it stays live through the flush (it holds the cached blocks,
/// which are not free); its `addr` and `span` are written once, before the pagemap names it.
/// Whether a pointer is an object start (and not free already) is checked at the bin
/// (`Slab::give_all`), as for every other block.
#[inline]
fn slabs_of(
    class: usize,
    items: &[*mut u8],
    buf: &mut [MaybeUninit<(*mut u8, *mut Slab)>; CAP_MAX],
) -> (usize, Option<u32>) {
    // The last slab looked up, its object area `lo..lo + span` (0 bytes before the first).
    let (mut slab, mut lo, mut span) = (null_mut::<Slab>(), 0usize, 0usize);
    let (mut home, mut one_arena) = (u32::MAX, true);
    let mut n = 0;
    for (slot, &p) in buf.iter_mut().zip(items.iter()) {
        if (p as usize).wrapping_sub(lo) >= span {
            slab = arena::slab_of(p, class);
            // SAFETY: slab_of returns the live slab holding `p` (it aborts otherwise).
            let s = unsafe { &*slab };
            (lo, span) = (s.addr, s.span as usize);
            if n == 0 {
                home = s.arena;
            }
            one_arena &= s.arena == home;
        }
        slot.write((p, slab));
        n += 1;
    }
    (n, one_arena.then_some(home))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thp::Thp;

    /// A pop from bin `class`, refilling it when empty (`alloc::cache_take`'s steps).
    fn pop(t: &mut Tcache, class: usize) -> *mut u8 {
        let bin = &mut t.bins[class];
        if bin.count == 0 {
            return t.alloc_slow(class);
        }
        bin.count -= 1;
        // SAFETY: items[class][count] is a cached pointer (count was above it).
        unsafe { *t.items[class].add(bin.count as usize) }
    }

    /// `rounds` times: `n` blocks of `class` allocated, then freed in the same order.
    fn churn(t: &mut Tcache, class: usize, n: usize, rounds: usize) {
        let mut held = std::vec![null_mut(); n];
        for _ in 0..rounds {
            for slot in held.iter_mut() {
                *slot = pop(t, class);
                assert!(!slot.is_null());
            }
            for &p in &held {
                t.push(class, p);
            }
        }
    }

    /// The `check` invariants of a cache's capacities, asserted whatever `check:full` says.
    fn assert_capacities(t: &Tcache) {
        let mut grown = 0;
        for (c, (b, i)) in t.bins.iter().zip(&t.info).enumerate() {
            assert!(b.count <= b.cap, "class {c}");
            assert!(b.cap as usize <= grow_max(c, i.base as usize, t.grow_slots));
            assert!(b.cap == i.base as u32 || b.cap <= i.own_slots as u32);
            grown += (b.cap as usize - i.base as usize) * class_size(c);
        }
        assert_eq!(grown, t.grown_bytes);
        assert!(grown <= GROW_THREAD_BYTES);
    }

    /// A fresh arena (index `index`, never destroyed: arenas live for the process) and a
    /// cache bound to it of `tcache_max` 32 KiB and `grow_slots` slots.
    fn arena_and_cache(index: u32, grow_slots: usize) -> (&'static Arena, *mut Tcache) {
        let a = Arena::create(index, Thp::Default);
        assert!(!a.is_null());
        let tc = Tcache::create(a, 32 << 10, grow_slots);
        assert!(!tc.is_null());
        // SAFETY: a fresh arena, never destroyed.
        (unsafe { &*a }, tc)
    }

    #[test]
    fn grown_stacks_come_in_few_sizes() {
        let mut sizes = std::collections::BTreeSet::new();
        for slots in [0, 100, 2048, 3000, crate::config::TCACHE_SLOTS_LIMIT] {
            for c in 0..NBINS {
                let base = bin_cap(c, usize::MAX);
                let most = grow_max(c, base, slots);
                assert!(most >= base && most <= slots.max(base), "class {c}");
                if most == base {
                    continue;
                }
                assert!(is_small(c), "class {c}");
                assert!(most * class_size(c) <= GROW_CLASS_BYTES, "class {c}");
                // With its null slot, a power of two of slots.
                assert!((most + 1).is_power_of_two(), "class {c}: {most}");
                sizes.insert(own_bytes(most));
            }
        }
        // The classes that grow at the default: every small one.
        let grows = (0..NSMALL)
            .filter(|&c| grow_max(c, bin_cap(c, usize::MAX), 2048) > bin_cap(c, usize::MAX))
            .count();
        assert_eq!(grows, NSMALL);
        // Few sizes for the base's exact-size free lists, whatever the option says: the powers
        // of two from 32 to 8,192 slots (per stack, with its null slot).
        assert!(sizes.len() <= 9, "{sizes:?}");
        assert!(sizes.len() * 2 <= crate::base::NLISTS, "{sizes:?}");
    }

    #[test]
    fn a_bin_that_refills_after_overflowing_grows_until_its_working_set_fits() {
        let (arena, tc) = arena_and_cache(901, 2048);
        // SAFETY: a fresh cache this test alone uses, destroyed at the end.
        let t = unsafe { &mut *tc };
        let class = class_of(16);
        let base = bin_cap(class, 32 << 10);
        assert_eq!(t.bins[class].cap as usize, base);
        let fills = || arena.bins[class].lock().stats.nfills;
        // 1,000 blocks: the base capacity (128) makes a round of them refill 16 times and
        // flush as often; each round after an overflow doubles the capacity.
        churn(t, class, 1000, 6);
        let bin = &t.bins[class];
        let cap = bin.cap as usize;
        let most = grow_max(class, base, 2048);
        assert_eq!(most, 2047, "2,048 slots with the null slot");
        assert!(
            cap >= 1000 && (cap.is_power_of_two() || cap == most),
            "128 doubled to {cap}"
        );
        assert_eq!(
            t.info[class].own_slots as usize,
            grow_max(class, base, 2048)
        );
        assert_eq!(t.grown_bytes, (cap - base) * 16);
        assert_capacities(t);
        // Now a round runs from the cache alone.
        let before = fills();
        churn(t, class, 1000, 3);
        assert_eq!(fills(), before, "no refill once the working set fits");

        // In use between GC visits (its count moves), though it never refills: not shrunk.
        let mut taken = std::vec::Vec::new();
        for _ in 0..8 {
            for _ in 0..3 {
                taken.push(pop(t, class));
            }
            for _ in 0..GC_EVERY {
                t.gc_tick();
            }
        }
        assert_eq!(
            t.bins[class].cap as usize, cap,
            "a bin in use keeps its capacity"
        );
        for p in taken {
            t.push(class, p);
        }

        // Idle: every second GC visit in a row that finds no refill and the count unchanged
        // halves the capacity towards the base and flushes what is past it.
        for _ in 0..(GC_EVERY as usize * 16) {
            t.gc_tick();
        }
        let bin = &t.bins[class];
        assert_eq!(bin.cap as usize, base);
        assert!(bin.count as usize <= base);
        assert_eq!(t.grown_bytes, 0);
        assert_capacities(t);
        // It grows again on demand, into the storage it kept.
        churn(t, class, 1000, 6);
        assert_eq!(t.bins[class].cap as usize, cap);
        // SAFETY: the cache came from `create` and is not used afterwards.
        unsafe { Tcache::destroy(tc) };
    }

    #[test]
    fn bins_grow_within_the_threads_budget_and_not_when_switched_off() {
        // `tcache_nslots_small_max:0`: no growth; every round refills.
        let (arena, tc) = arena_and_cache(902, 0);
        // SAFETY: a fresh cache this test alone uses, destroyed below.
        let t = unsafe { &mut *tc };
        let class = class_of(64);
        churn(t, class, 1000, 6);
        assert_eq!(t.bins[class].cap as usize, bin_cap(class, 32 << 10));
        assert_eq!(t.grown_bytes, 0);
        let before = arena.bins[class].lock().stats.nfills;
        churn(t, class, 1000, 1);
        assert!(arena.bins[class].lock().stats.nfills > before);
        // SAFETY: from `create`, not used afterwards.
        unsafe { Tcache::destroy(tc) };

        // A bin of a small base grows too: 1 KiB blocks, 32 at the base, to 511 (512 KiB of
        // blocks, the null slot making a power of two) for a working set of 400.
        let tc = Tcache::create(arena, 32 << 10, 8192);
        assert!(!tc.is_null());
        // SAFETY: as above.
        let t = unsafe { &mut *tc };
        let big = class_of(1024);
        assert_eq!(bin_cap(big, 32 << 10), 32);
        assert_eq!(grow_max(big, 32, 8192), 511);
        churn(t, big, 400, 8);
        assert_eq!(
            t.bins[big].cap,
            512 - 1,
            "32 doubled to 256, then to the most"
        );
        let before = arena.bins[big].lock().stats.nfills;
        churn(t, big, 400, 2);
        assert_eq!(arena.bins[big].lock().stats.nfills, before, "a round fits");
        // SAFETY: as above.
        unsafe { Tcache::destroy(tc) };
        let tc = Tcache::create(arena, 32 << 10, 8192);
        assert!(!tc.is_null());
        // SAFETY: as above.
        let t = unsafe { &mut *tc };

        // The classes of 160 to 256 B each grow to 2,048 blocks (over 300 KiB of them):
        // together past the thread's 1 MiB, so the budget binds and one at least stays short.
        let classes: std::vec::Vec<usize> = (0..NSMALL)
            .filter(|&c| (160..=256).contains(&class_size(c)))
            .collect();
        assert_eq!(classes.len(), 4);
        let most = |c: usize| grow_max(c, bin_cap(c, 32 << 10), 8192);
        let want: usize = classes
            .iter()
            .map(|&c| (most(c) - bin_cap(c, 32 << 10)) * class_size(c))
            .sum();
        assert!(want > GROW_THREAD_BYTES);
        // All in use at once: a round allocates 1,200 blocks of each, interleaved, then frees
        // them in the same order, so each bin refills soon after it overflowed.
        let mut held = std::vec![null_mut(); 1200 * classes.len()];
        for _ in 0..10 {
            for (i, slot) in held.iter_mut().enumerate() {
                *slot = pop(t, classes[i % classes.len()]);
                assert!(!slot.is_null());
            }
            for (i, &p) in held.iter().enumerate() {
                t.push(classes[i % classes.len()], p);
            }
            assert_capacities(t);
        }
        assert!(t.grown_bytes > GROW_THREAD_BYTES - 256 * 2048);
        let short = *classes
            .iter()
            .find(|&&c| (t.bins[c].cap as usize) < most(c))
            .expect("a class the budget held back");
        let held_back = t.bins[short].cap;
        assert!(held_back < 1200);
        // Used one class at a time, the idle ones shrink back (GC visits, driven by the
        // refills and overflows of the class in use: none once a class fits, so over the
        // rounds of the class held back; a visit every 64 of them, in turn over all bins,
        // so 200 rounds whatever the rotation's phase) and the budget goes to the class in
        // use: the short one, churned last, grows to hold its 1,200 blocks.
        for &c in classes
            .iter()
            .filter(|&&c| c != short)
            .chain([short].iter())
        {
            churn(t, c, 1200, if c == short { 200 } else { 8 });
            assert_capacities(t);
        }
        assert!(t.bins[short].cap >= 1200 && t.bins[short].cap > held_back);
        // SAFETY: as above.
        unsafe { Tcache::destroy(tc) };
    }

    #[test]
    fn caps() {
        assert_eq!(bin_cap(class_of(16), 32 << 10), CAP_MAX);
        // The bytes budget: 64 blocks of 256 B (twice a one-page slab's 16 would be 32).
        assert_eq!(bin_cap(class_of(256), 32 << 10), bin::SMALL_BIN_BYTES / 256);
        assert!(bin_cap(class_of(4096), 32 << 10) >= 16);
        assert_eq!(bin_cap(class_of(32 << 10), 32 << 10), 16);
        assert_eq!(bin_cap(class_of(40 << 10), 32 << 10), 0);
        assert_eq!(bin_cap(class_of(64), 0), 0);
        for (c, &objs) in SLAB_OBJS.iter().enumerate() {
            let twice = (objs as usize * 2).clamp(16, CAP_MAX);
            let by_bytes = bin::SMALL_BIN_BYTES / class_size(c);
            assert_eq!(bin_cap(c, usize::MAX), twice.max(by_bytes).min(CAP_MAX));
            // A remote stack: half of twice a slab's objects, whatever the bytes budget.
            assert_eq!(bin::remote_cap(c), twice.div_ceil(2));
        }
        // The remote stacks' storage: 16 B per block (the block and its slab);
        // docs/architecture.md quotes it.
        let small_slots: usize = (0..NSMALL)
            .map(|c| (SLAB_OBJS[c] as usize * 2).clamp(16, CAP_MAX).div_ceil(2))
            .sum();
        assert_eq!(bin::REMOTE_SLOTS, small_slots);
        assert_eq!(bin::REMOTE_STORAGE_BYTES, 15_680);
    }
}
