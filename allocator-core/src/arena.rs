//! Arenas: the coordinator of the arena layer. An arena owns chunks and serves everything a
//! thread cache does not:
//! - per small class a `Bin` (its own lock, rank 2) with a current slab and a list of non-full
//!   slabs, supplied with slabs from page runs;
//! - large blocks as page runs inside page chunks (`pages`);
//! - huge blocks as runs of whole chunks, and free chunk runs ("extents"), coalesced with their
//!   free neighbours and kept dirty for reuse (`extent`);
//! - decay and purging of what is free (`purge`).
//!
//! The state those modules work on is one `ArenaInner` under the arena lock (rank 3, taken
//! under a bin lock when a bin needs a slab); this module takes the locks, calls them in order
//! (an operation that frees memory is followed by a decay pass), keeps the counters and zeroes
//! memory outside the lock. The arena's THP policy decides the advice each chunk gets when it
//! is put to use.

use crate::arena_state::ArenaInner;
use crate::base::BASE;
use crate::chunk::*;
use crate::config::Hugetlb;
use crate::diag;
use crate::hugetlb::Backing;
use crate::os;
use crate::pagemap::{PAGEMAP, TAG_EXTENT, TAG_MASK};
use crate::purge::{decay_decode, decay_encode, decay_resolve, DECAY_INHERIT};
use crate::size_class::*;
use crate::slab::Slab;
use crate::sync::{AtomicU8, AtomicUsize, Mutex, Ordering};
use crate::thp::{self, ChunkAdvice, Thp};
use core::ptr::{self, null_mut};

pub use crate::arena_state::ArenaStats;
pub use crate::bin::{BinState, BinStats};
pub use crate::extent::{set_thp_globals, system_mode, thp_threshold};
pub use crate::owner::{arena_index_of, class_of_ptr, huge_backed_bytes, owner_of, slab_of, Owner};
pub use crate::purge::{decay_ms, set_decay_ms, set_muzzy_decay_ms, set_purge_globals};

/// The most pointers one batch between a thread cache and a bin holds (the thread cache's
/// largest bin; `bin_flush` works through a stack buffer of this many).
pub const BATCH_MAX: usize = 128;

pub struct Arena {
    pub index: u32,
    thp: AtomicU8,
    /// This arena's own `dirty_decay_ms` (encoded as `DIRTY_DECAY_MS`), or `DECAY_INHERIT`.
    decay_ms: crate::sync::AtomicU64,
    pub nthreads: AtomicUsize,
    pub bins: [Mutex<BinState>; NSMALL],
    pub inner: Mutex<ArenaInner>,
}

// The descriptor pointers these methods take (`PageChunk`, `Extent`) come only from
// `owner_of`, which validates them against the pagemap; making every method `unsafe` would
// move that one fact to every call site without adding a check.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
impl Arena {
    /// Creates arena number `index` in metadata memory, with the page source its options give
    /// (`arena.<i>.hugetlb`, else `hugetlb`). Null when out of memory.
    pub fn create(index: u32, policy: Thp) -> *mut Arena {
        let a = BASE.alloc(core::mem::size_of::<Arena>()) as *mut Arena;
        if a.is_null() {
            return a;
        }
        #[allow(clippy::declare_interior_mutable_const)]
        const BIN: Mutex<BinState> = Mutex::new(BinState::new());
        // SAFETY: `a` is fresh, suitably aligned (64) metadata memory of the right size.
        unsafe {
            ptr::write(
                a,
                Arena {
                    index,
                    thp: AtomicU8::new(policy as u8),
                    decay_ms: crate::sync::AtomicU64::new(DECAY_INHERIT),
                    nthreads: AtomicUsize::new(0),
                    bins: [BIN; NSMALL],
                    inner: Mutex::new(ArenaInner::new(index)),
                },
            );
            (*a).inner.lock().hugetlb = crate::config::options().hugetlb_for_arena(index as usize);
        }
        a
    }

    /// The arena's page source: ordinary memory (`Off`) or a hugetlb pool.
    pub fn hugetlb(&self) -> Hugetlb {
        self.inner.lock().hugetlb
    }

    /// Sets the arena's page source; false (nothing changed) once the arena holds chunks,
    /// whose backing could then no longer follow from the arena's setting alone.
    pub fn set_hugetlb(&self, source: Hugetlb) -> bool {
        let mut inner = self.inner.lock();
        if inner.stats.chunks != 0 && inner.hugetlb != source {
            return false;
        }
        inner.hugetlb = source;
        true
    }

    pub fn thp(&self) -> Thp {
        // Relaxed: a policy read when mapping chunks; a concurrent change applies to later ones.
        Thp::from_u8(self.thp.load(Ordering::Relaxed))
    }

    pub fn set_thp(&self, policy: Thp) {
        // Relaxed: see `thp`.
        self.thp.store(policy as u8, Ordering::Relaxed);
    }

    /// The decay time this arena follows, encoded as `DIRTY_DECAY_MS` (`u64::MAX`: never).
    fn decay_raw(&self) -> u64 {
        // Relaxed: a tuning value; a racing reader uses the old or the new one.
        decay_resolve(self.decay_ms.load(Ordering::Relaxed))
    }

    /// The decay time this arena follows (`arena.<i>.dirty_decay_ms`; -1: never).
    pub fn dirty_decay_ms(&self) -> i64 {
        decay_decode(self.decay_raw())
    }

    /// Gives this arena a decay time of its own (negative: never purge on a timer).
    pub fn set_dirty_decay_ms(&self, ms: i64) {
        // Relaxed: see `decay_raw`.
        self.decay_ms.store(decay_encode(ms), Ordering::Relaxed);
    }

    /// Runs a decay pass now (`arena.<i>.decay`): purges the dirty free chunks that have been
    /// dirty for at least the decay time, however recently the last pass ran. Returns the
    /// bytes purged.
    pub fn decay_now(&self) -> usize {
        let mut inner = self.inner.lock();
        let before = inner.stats.purged_bytes;
        // A last pass at time 0 lets `maybe_decay` run whatever its rate limit.
        inner.last_decay_ms = 0;
        inner.maybe_decay(self.decay_raw());
        (inner.stats.purged_bytes - before) as usize
    }

    /// A decay pass if one is due (the background thread's tick); also how long until the
    /// next one may be due, in ms (a tenth of the decay time, 100 ms under `dirty_max` alone).
    pub fn decay_tick(&self) -> u64 {
        let mut inner = self.inner.lock();
        inner.maybe_decay(self.decay_raw());
        match self.decay_raw() {
            u64::MAX => 100,
            d => d / 10,
        }
    }

    // ---- small objects -------------------------------------------------------------------

    /// Fills `out` with up to `out.len()` objects of small class `class`; returns how many
    /// (fewer only when out of memory). Takes the bin lock once.
    pub fn bin_fill(&self, class: usize, out: &mut [*mut u8]) -> usize {
        self.bins[class].lock().fill(out, || self.slab_new(class))
    }

    /// Returns `ptrs` (all of small class `class`, all owned by this arena) to their slabs,
    /// taking the bin lock once. Aborts on a pointer that is not an object start or is
    /// already free.
    pub fn bin_flush(&self, class: usize, ptrs: &[*mut u8]) {
        let mut items = [(null_mut(), null_mut()); BATCH_MAX];
        for chunk in ptrs.chunks(items.len()) {
            for (item, &p) in items.iter_mut().zip(chunk) {
                *item = (p, slab_of(p, class));
            }
            self.bin_flush_slabs(class, &items[..chunk.len()]);
        }
    }

    /// As `bin_flush`, with each pointer's slab already looked up (`slab_of`).
    pub fn bin_flush_slabs(&self, class: usize, items: &[(*mut u8, *mut Slab)]) {
        let r = self.bins[class]
            .lock()
            .flush(items, |s| self.slab_release(s));
        if let Err((p, what)) = r {
            diag::fatal_ptr(what, p);
        }
    }

    /// A new slab of `class` (bin lock held; takes the arena lock).
    fn slab_new(&self, class: usize) -> *mut Slab {
        let slab = BASE.alloc(core::mem::size_of::<Slab>()) as *mut Slab;
        if slab.is_null() {
            return slab;
        }
        let npages = SLAB_PAGES[class] as usize;
        let mut inner = self.inner.lock();
        let Some((pc, start, _)) = self.pages_alloc(&mut inner, npages, 1) else {
            drop(inner);
            // SAFETY: the slab descriptor came from BASE.alloc and was never published.
            unsafe { BASE.free(slab as *mut u8, core::mem::size_of::<Slab>()) };
            return null_mut();
        };
        // SAFETY: pc is a live page chunk of this arena, pages start..start+npages are ours.
        unsafe {
            let pcr = &mut *pc;
            (*slab).init(pcr.addr + start * os::PAGE, class, self.index);
            let word = (class as u64) << PAGE_CLASS_SHIFT | slab as u64 | PAGE_SLAB;
            for w in &mut pcr.page_map[start..start + npages] {
                *w = word;
            }
        }
        inner.stats.active_pages += npages as u64;
        slab
    }

    /// Gives an empty slab's pages back (bin lock held; takes the arena lock).
    fn slab_release(&self, slab: *mut Slab) {
        // SAFETY: the slab is empty and unlisted; nobody else refers to it.
        let (addr, class) = unsafe { ((*slab).addr, (*slab).class as usize) };
        let npages = SLAB_PAGES[class] as usize;
        let entry = PAGEMAP.get(addr);
        let pc = (entry & !TAG_MASK) as *mut PageChunk;
        let mut inner = self.inner.lock();
        // SAFETY: pc is the slab's live page chunk.
        let start = unsafe { (*pc).page_of(addr) };
        self.pages_free(&mut inner, pc, start, npages);
        inner.stats.active_pages -= npages as u64;
        drop(inner);
        // SAFETY: the descriptor came from BASE.alloc and no page map word refers to it now.
        unsafe { BASE.free(slab as *mut u8, core::mem::size_of::<Slab>()) };
    }

    // ---- large blocks ----------------------------------------------------------------------

    /// A large block of `class` aligned to `align`; null when out of memory.
    pub fn large_alloc(&self, class: usize, align: usize, zero: bool) -> *mut u8 {
        let n = large_pages(class);
        let align_pages = (align / os::PAGE).max(1);
        let mut inner = self.inner.lock();
        let Some((pc, start, was_dirty)) = self.pages_alloc(&mut inner, n, align_pages) else {
            return null_mut();
        };
        // SAFETY: pc is a live page chunk of this arena; pages start..start+n are ours.
        let addr = unsafe {
            let pcr = &mut *pc;
            pcr.page_map[start] = (class as u64) << PAGE_CLASS_SHIFT | (n as u64) << 3 | PAGE_LARGE;
            for i in 1..n {
                pcr.page_map[start + i] = (i as u64) << 3 | PAGE_INTERIOR;
            }
            pcr.addr + start * os::PAGE
        };
        let s = &mut inner.stats;
        s.large_nmalloc += 1;
        s.large_allocated += class_size(class) as u64;
        s.active_pages += n as u64;
        drop(inner);
        if zero && was_dirty {
            // SAFETY: the run is ours, n pages long.
            unsafe { ptr::write_bytes(addr as *mut u8, 0, n * os::PAGE) };
        }
        addr as *mut u8
    }

    /// Frees a large block found by `owner_of`.
    pub fn large_free(&self, pc: *mut PageChunk, page: usize) {
        let mut inner = self.inner.lock();
        // SAFETY: pc is the block's live page chunk; its head word says how many pages.
        let (n, class) = unsafe {
            let w = (*pc).page_map[page];
            if w & PAGE_KIND != PAGE_LARGE {
                diag::fatal_ptr(
                    "double free of",
                    ((*pc).addr + page * os::PAGE) as *const u8,
                );
            }
            (
                ((w & PAGE_PAYLOAD) >> 3) as usize,
                (w >> PAGE_CLASS_SHIFT) as usize,
            )
        };
        self.pages_free(&mut inner, pc, page, n);
        let s = &mut inner.stats;
        s.large_nfree += 1;
        s.large_allocated -= class_size(class) as u64;
        s.active_pages -= n as u64;
    }

    /// Resizes a large block in place to `new_class` (a large class); returns whether it could.
    pub fn large_resize(&self, pc: *mut PageChunk, page: usize, new_class: usize) -> bool {
        let mut inner = self.inner.lock();
        // SAFETY: pc is the block's live page chunk and we hold the arena lock.
        let pcr = unsafe { &mut *pc };
        let w = pcr.page_map[page];
        let n = ((w & PAGE_PAYLOAD) >> 3) as usize;
        let old_class = (w >> PAGE_CLASS_SHIFT) as usize;
        let m = large_pages(new_class);
        if m > n {
            if page + m > CHUNK_PAGES || !pcr.free.all_set(page + n, m - n) {
                return false;
            }
            inner.chunk_unfile(pc);
            pcr.take_pages(page + n, m - n);
            inner.chunk_file(pc);
        } else if m < n {
            self.pages_free(&mut inner, pc, page + m, n - m);
        }
        pcr.page_map[page] = (new_class as u64) << PAGE_CLASS_SHIFT | (m as u64) << 3 | PAGE_LARGE;
        for i in n.min(m)..m {
            pcr.page_map[page + i] = (i as u64) << 3 | PAGE_INTERIOR;
        }
        let s = &mut inner.stats;
        s.large_allocated =
            s.large_allocated + class_size(new_class) as u64 - class_size(old_class) as u64;
        s.active_pages = s.active_pages + m as u64 - n as u64;
        true
    }

    // ---- huge blocks -----------------------------------------------------------------------

    /// A huge block of `class` (requested `size`) aligned to `align`; null when out of memory.
    pub fn huge_alloc(&self, class: usize, size: usize, align: usize, zero: bool) -> *mut u8 {
        let n = huge_chunks(class);
        let align_chunks = (align >> LG_CHUNK).max(1);
        let mut inner = self.inner.lock();
        let Some((e, was_dirty)) = inner.extent_take(n, align_chunks) else {
            return null_mut();
        };
        // SAFETY: e is an extent this arena just took off its free lists.
        let addr = unsafe {
            let er = &mut *e;
            er.state = STATE_HUGE;
            er.class = class as u8;
            er.size = size;
            PAGEMAP.set(er.addr, n, e as usize | TAG_EXTENT);
            let want = thp::advice_for(self.thp(), system_mode(), size, thp_threshold());
            inner.advise(e, want);
            er.addr
        };
        inner.maybe_decay(self.decay_raw());
        let s = &mut inner.stats;
        s.huge_nmalloc += 1;
        s.huge_allocated += class_size(class) as u64;
        s.huge_active += (n * CHUNK) as u64;
        drop(inner);
        if zero && was_dirty {
            // SAFETY: the block is ours and at least `size` bytes.
            unsafe { ptr::write_bytes(addr as *mut u8, 0, size) };
        }
        addr as *mut u8
    }

    /// Frees a huge block found by `owner_of`.
    pub fn huge_free(&self, e: *mut Extent) {
        let mut inner = self.inner.lock();
        // SAFETY: e is a live huge block of this arena (checked by owner_of).
        unsafe {
            let er = &mut *e;
            if er.state != STATE_HUGE {
                diag::fatal_ptr("double free of", er.addr as *const u8);
            }
            let s = &mut inner.stats;
            s.huge_nfree += 1;
            s.huge_allocated -= class_size(er.class as usize) as u64;
            s.huge_active -= (er.nchunks * CHUNK) as u64;
            er.state = STATE_FREE;
            er.dirty = true;
            er.muzzy = false;
            er.dirty_since_ms = os::now_ms();
        }
        inner.extent_free(e);
        inner.maybe_decay(self.decay_raw());
    }

    /// Resizes a huge block in place to `new_class` (requested `size`): shrinks by giving back
    /// tail chunks, grows into a free neighbour. Returns whether it could.
    pub fn huge_resize(&self, e: *mut Extent, new_class: usize, size: usize) -> bool {
        let mut inner = self.inner.lock();
        // SAFETY: e is a live huge block of this arena and we hold the arena lock.
        let er = unsafe { &mut *e };
        let n = er.nchunks;
        let m = huge_chunks(new_class);
        if m < n {
            let Some(tail) = inner.extent_desc() else {
                return false;
            };
            // SAFETY: tail is a fresh descriptor.
            unsafe {
                let t = &mut *tail;
                t.addr = er.addr + m * CHUNK;
                t.nchunks = n - m;
                t.state = STATE_FREE;
                t.dirty = true;
                t.muzzy = false;
                t.dirty_since_ms = os::now_ms();
                t.advice = er.advice;
                t.backing = er.backing;
                // The tail's chunks name their own descriptor from now on, so that it
                // coalesces and the block can grow back into it.
                PAGEMAP.set(t.addr, t.nchunks, tail as usize | TAG_EXTENT);
            }
            er.nchunks = m;
            inner.stats.huge_active -= ((n - m) * CHUNK) as u64;
            inner.extent_free(tail);
        } else if m > n {
            let end = er.addr + n * CHUNK;
            let entry = PAGEMAP.get(end);
            if entry & TAG_MASK != TAG_EXTENT {
                return false;
            }
            let next = (entry & !TAG_MASK) as *mut Extent;
            // SAFETY: a TAG_EXTENT entry points at a live extent.
            let nx = unsafe { &mut *next };
            let backing = Backing::from_u8(er.backing);
            if nx.state != STATE_FREE
                || nx.arena != self.index
                || nx.addr != end
                || nx.nchunks < m - n
                || !backing.may_merge(er.addr, Backing::from_u8(nx.backing), nx.addr)
            {
                return false;
            }
            let need = m - n;
            inner.free_unfile(next);
            if nx.nchunks == need {
                inner.extent_recycle(next);
            } else {
                nx.addr += need * CHUNK;
                nx.nchunks -= need;
                inner.free_file(next);
            }
            er.nchunks = m;
            PAGEMAP.set(end, need, e as usize | TAG_EXTENT);
            let want = thp::advice_for(self.thp(), system_mode(), size, thp_threshold());
            if want != ChunkAdvice::None && !backing.is_hugetlb() {
                inner.advise_range(end, need, want);
            }
            inner.stats.huge_active += (need * CHUNK) as u64;
        }
        let s = &mut inner.stats;
        s.huge_allocated =
            s.huge_allocated + class_size(new_class) as u64 - class_size(er.class as usize) as u64;
        er.class = new_class as u8;
        er.size = size;
        true
    }

    // ---- the arena layer's steps, in order ------------------------------------------------

    /// Finds `n` free pages aligned to `align_pages` pages: in the page chunk whose longest
    /// free run fits most tightly (re-collapsing it if it was split and is full again), else in
    /// a new page chunk. Returns the chunk, the first page and whether any page was dirty.
    fn pages_alloc(
        &self,
        inner: &mut ArenaInner,
        n: usize,
        align_pages: usize,
    ) -> Option<(*mut PageChunk, usize, bool)> {
        if let Some(found) = inner.pages_find(n, align_pages) {
            inner.maybe_collapse(found.0);
            return Some(found);
        }
        let pc = inner.page_chunk_new(self.thp())?;
        inner.maybe_decay(self.decay_raw());
        Some(inner.pages_take_fresh(pc, n))
    }

    /// Gives back a page run, then runs a decay pass if one is due.
    fn pages_free(&self, inner: &mut ArenaInner, pc: *mut PageChunk, start: usize, n: usize) {
        inner.pages_free(pc, start, n);
        inner.maybe_decay(self.decay_raw());
    }

    // ---- purging ---------------------------------------------------------------------------

    /// Returns the bins' kept empty slabs, then purges every dirty free extent
    /// (`MADV_DONTNEED`), making it clean. Returns bytes purged.
    pub fn purge_all(&self) -> usize {
        for bin in &self.bins {
            bin.lock().drain_empty(|s| self.slab_release(s));
        }
        self.inner.lock().purge_all_extents()
    }

    // ---- statistics and fork -------------------------------------------------------------

    /// A snapshot of the arena's counters (takes each lock briefly).
    pub fn snapshot(&self) -> ArenaSnapshot {
        let mut snap = ArenaSnapshot::default();
        for (class, bin) in self.bins.iter().enumerate() {
            let b = bin.lock();
            snap.bins[class] = b.stats;
            snap.small_allocated += (b.stats.nmalloc - b.stats.nfree) * class_size(class) as u64;
        }
        let inner = self.inner.lock();
        snap.arena = inner.stats;
        snap.dirty_page_bytes = inner.dirty_page_bytes() as u64;
        snap
    }

    /// Takes every lock of this arena in rank order (fork prepare).
    pub fn lock_all(&self) {
        for b in &self.bins {
            b.force_lock();
        }
        self.inner.force_lock();
    }

    /// # Safety
    /// After `lock_all`, in the parent.
    pub unsafe fn unlock_all(&self) {
        // SAFETY: per the contract, these locks are held by this thread.
        unsafe {
            self.inner.force_unlock();
            for b in &self.bins {
                b.force_unlock();
            }
        }
    }

    /// # Safety
    /// Only in a fork child.
    pub unsafe fn reset_locks_in_child(&self) {
        // SAFETY: per the contract.
        unsafe {
            self.inner.reset_in_child();
            for b in &self.bins {
                b.reset_in_child();
            }
        }
    }
}

/// A copy of an arena's counters.
#[derive(Clone, Copy, Debug)]
pub struct ArenaSnapshot {
    pub bins: [BinStats; NSMALL],
    pub small_allocated: u64,
    pub arena: ArenaStats,
    pub dirty_page_bytes: u64,
}

impl Default for ArenaSnapshot {
    fn default() -> Self {
        ArenaSnapshot {
            bins: [BinStats::default(); NSMALL],
            small_allocated: 0,
            arena: ArenaStats::default(),
            dirty_page_bytes: 0,
        }
    }
}
