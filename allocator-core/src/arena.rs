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
//! (an operation that frees memory is followed by a decay pass once every lock is released),
//! keeps the counters and zeroes memory outside the lock. A purge pass holds the arena's purge
//! lock (rank 2b: after the bin locks, before the arena lock; one purger per arena) and takes
//! the arena lock once per batch, never across `madvise` (see `purge`). The arena's THP policy decides the advice each chunk gets when it
//! is put to use.

use crate::arena_state::ArenaInner;
use crate::base::BASE;
use crate::chunk::*;
use crate::config::Hugetlb;
use crate::diag;
use crate::hugetlb::Backing;
use crate::os;
use crate::pagemap::{PAGEMAP, TAG_EXTENT, TAG_MASK};
use crate::purge::{
    decay_decode, decay_encode, decay_goal, decay_resolve, purge_advise, PurgeBatch, PurgeGoal,
    DECAY_INHERIT, PASS_BATCHES_MAX,
};
use crate::size_class::*;
use crate::slab::Slab;
use crate::sync::{AtomicU64, AtomicU8, AtomicUsize, Mutex, MutexGuard, Ordering};
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
    decay_ms: AtomicU64,
    /// When the last decay pass started (ms); written under `purge`.
    last_decay_ms: AtomicU64,
    pub nthreads: AtomicUsize,
    pub(crate) bins: [Mutex<BinState>; NSMALL],
    /// Held by the one purge pass of this arena running (rank 2b); `fork` prepare takes it, so
    /// no run is left busy in a child.
    purge: Mutex<()>,
    pub(crate) inner: Mutex<ArenaInner>,
}

// The descriptor pointers the `pub(crate)` methods take (`PageChunk`, `Extent`, blocks and
// slabs) come only from `owner_of`, which validates them against the pagemap; making those
// methods `unsafe` would move that one fact to every call site without adding a check. They
// stay crate-internal: the arena is reachable from outside only through `testing`.
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
                    decay_ms: AtomicU64::new(DECAY_INHERIT),
                    last_decay_ms: AtomicU64::new(0),
                    nthreads: AtomicUsize::new(0),
                    bins: [BIN; NSMALL],
                    purge: Mutex::new(()),
                    inner: Mutex::new(ArenaInner::new(index)),
                },
            );
            (*a).inner.lock().hugetlb = crate::config::options().hugetlb_for_arena(index as usize);
        }
        a
    }

    /// Bin `class`'s lock; a class that is not small is a caller's bug: abort.
    fn bin(&self, class: usize) -> &Mutex<BinState> {
        match self.bins.get(class) {
            Some(bin) => bin,
            None => diag::fatal("hugealloc: a bin asked for a class that is not small"),
        }
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
        let guard = self.purge.lock();
        let now = os::now_ms();
        match decay_goal(self.decay_raw(), 0, now, true) {
            Some(goal) => {
                // Relaxed: written under the purge lock, read as a hint by `maybe_decay`.
                self.last_decay_ms.store(now, Ordering::Relaxed);
                self.purge_pass(&guard, goal, now)
            }
            None => 0,
        }
    }

    /// A decay pass if one is due (the background thread's tick); also how long until the
    /// next one may be due, in ms (a tenth of the decay time, 100 ms under `dirty_max` alone).
    pub fn decay_tick(&self) -> u64 {
        self.maybe_decay();
        match self.decay_raw() {
            u64::MAX => 100,
            d => d / 10,
        }
    }

    /// A decay pass if one is due and no other pass of this arena is running. Called after an
    /// operation that frees memory or maps a chunk, with no lock held.
    fn maybe_decay(&self) {
        let decay = self.decay_raw();
        let now = os::now_ms();
        // Relaxed: a hint; the check is repeated under the purge lock.
        if decay_goal(
            decay,
            self.last_decay_ms.load(Ordering::Relaxed),
            now,
            false,
        )
        .is_none()
        {
            return;
        }
        let Some(guard) = self.purge.try_lock() else {
            // Another pass runs: it does this work.
            return;
        };
        // Relaxed: the purge lock orders writers; see `decay_now`.
        let last = self.last_decay_ms.load(Ordering::Relaxed);
        if let Some(goal) = decay_goal(decay, last, now, false) {
            self.last_decay_ms.store(now, Ordering::Relaxed);
            self.purge_pass(&guard, goal, now);
        }
    }

    /// Purges toward `goal` in batches (`purge`'s three phases): each batch chosen and marked
    /// busy under the arena lock, advised without it, returned under it together with the
    /// choice of the next batch. The purge lock is held (`_guard`). Returns the bytes purged.
    fn purge_pass(&self, _guard: &MutexGuard<'_, ()>, goal: PurgeGoal, now_ms: u64) -> usize {
        let mut batch = PurgeBatch::new();
        let mut purged = 0;
        let mut inner = self.inner.lock();
        for _ in 0..PASS_BATCHES_MAX {
            inner.purge_choose(goal, &mut batch);
            if batch.is_empty() {
                break;
            }
            drop(inner);
            purge_advise(&batch);
            inner = self.inner.lock();
            purged += inner.purge_return(&mut batch, now_ms);
        }
        purged
    }

    // ---- small objects -------------------------------------------------------------------

    /// Fills `out` with up to `out.len()` objects of small class `class`; returns how many
    /// (fewer only when out of memory). Takes the bin lock once.
    pub fn bin_fill(&self, class: usize, out: &mut [*mut u8]) -> usize {
        let mut grew = false;
        // SAFETY: `slab_new` returns null or a fresh slab of `class` of this arena, unlisted,
        // that only this bin refers to (its page map words name it; no bin lists it).
        let n = unsafe {
            self.bin(class).lock().fill(out, || {
                grew = true;
                self.slab_new(class)
            })
        };
        if grew {
            self.maybe_decay();
        }
        n
    }

    /// Returns `ptrs` (all of small class `class`, all owned by this arena) to their slabs,
    /// taking the bin lock once. Aborts on a pointer that is not an object start or is
    /// already free.
    pub(crate) fn bin_flush(&self, class: usize, ptrs: &[*mut u8]) {
        let mut items = [(null_mut(), null_mut()); BATCH_MAX];
        for chunk in ptrs.chunks(items.len()) {
            for (item, &p) in items.iter_mut().zip(chunk) {
                *item = (p, slab_of(p, class));
            }
            self.bin_flush_slabs(class, items.get(..chunk.len()).unwrap_or(&[]));
        }
    }

    /// As `bin_flush`, with each pointer's slab already looked up (`slab_of`).
    pub(crate) fn bin_flush_slabs(&self, class: usize, items: &[(*mut u8, *mut Slab)]) {
        let mut released = false;
        // SAFETY: the caller looked each slab up with `slab_of(p, class)`: the live slab of
        // class `class` holding `p`, and (the caller grouped by home) one of this arena's, so
        // one this bin owns.
        let r = unsafe {
            self.bin(class).lock().flush(items, |s| {
                released = true;
                self.slab_release(s)
            })
        };
        if let Err((p, what)) = r {
            diag::fatal_ptr(what, p);
        }
        if released {
            self.maybe_decay();
        }
    }

    /// A new slab of `class` (bin lock held; takes the arena lock; the caller runs the decay
    /// pass once the bin lock is released).
    fn slab_new(&self, class: usize) -> *mut Slab {
        let slab = BASE.alloc(core::mem::size_of::<Slab>()) as *mut Slab;
        if slab.is_null() {
            return slab;
        }
        let npages = slab_pages(class);
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
            words(pcr, start, npages).fill(word);
        }
        inner.stats.active_pages += npages as u64;
        slab
    }

    /// Gives an empty slab's pages back (bin lock held; takes the arena lock; the caller runs
    /// the decay pass once the bin lock is released).
    fn slab_release(&self, slab: *mut Slab) {
        // SAFETY: the slab is empty and unlisted; nobody else refers to it.
        let (addr, class) = unsafe { ((*slab).addr, (*slab).class as usize) };
        let npages = slab_pages(class);
        let entry = PAGEMAP.get(addr);
        let pc = (entry & !TAG_MASK) as *mut PageChunk;
        let mut inner = self.inner.lock();
        // SAFETY: pc is the slab's live page chunk.
        let start = unsafe { (*pc).page_of(addr) };
        inner.pages_free(pc, start, npages);
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
        let chunks_before = inner.stats.chunks;
        let Some((pc, start, was_dirty)) = self.pages_alloc(&mut inner, n, align_pages) else {
            return null_mut();
        };
        // SAFETY: pc is a live page chunk of this arena; pages start..start+n are ours.
        let addr = unsafe {
            let pcr = &mut *pc;
            large_words(words(pcr, start, n), class, 0);
            pcr.addr + start * os::PAGE
        };
        let s = &mut inner.stats;
        s.large_nmalloc += 1;
        s.large_allocated += class_size(class) as u64;
        s.active_pages += n as u64;
        let grew = s.chunks != chunks_before;
        drop(inner);
        // Only a new chunk can push dirty memory past `dirty_max`: a reused run does not, so
        // the common case reads no clock (decay also runs on every free).
        if grew {
            self.maybe_decay();
        }
        if zero && was_dirty {
            // SAFETY: the run is ours, n pages long.
            unsafe { ptr::write_bytes(addr as *mut u8, 0, n * os::PAGE) };
        }
        addr as *mut u8
    }

    /// Frees a large block found by `owner_of`.
    pub(crate) fn large_free(&self, pc: *mut PageChunk, page: usize) {
        let mut inner = self.inner.lock();
        // SAFETY: pc is the block's live page chunk; its head word says how many pages.
        let (n, class) = unsafe {
            let w = word(&*pc, page);
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
        inner.pages_free(pc, page, n);
        let s = &mut inner.stats;
        s.large_nfree += 1;
        s.large_allocated -= class_size(class) as u64;
        s.active_pages -= n as u64;
        drop(inner);
        self.maybe_decay();
    }

    /// Resizes a large block in place to `new_class` (a large class); returns whether it could.
    pub(crate) fn large_resize(&self, pc: *mut PageChunk, page: usize, new_class: usize) -> bool {
        let mut inner = self.inner.lock();
        // SAFETY: pc is the block's live page chunk and we hold the arena lock.
        let pcr = unsafe { &mut *pc };
        let w = word(pcr, page);
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
            inner.pages_free(pc, page + m, n - m);
        }
        large_words(words(pcr, page, m), new_class, n.min(m));
        let s = &mut inner.stats;
        s.large_allocated =
            s.large_allocated + class_size(new_class) as u64 - class_size(old_class) as u64;
        s.active_pages = s.active_pages + m as u64 - n as u64;
        drop(inner);
        if m < n {
            self.maybe_decay();
        }
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
            self.defer_collapse(&mut inner, e, er.addr, size, size);
            er.addr
        };
        let s = &mut inner.stats;
        s.huge_nmalloc += 1;
        s.huge_allocated += class_size(class) as u64;
        s.huge_active += (n * CHUNK) as u64;
        drop(inner);
        self.maybe_decay();
        if zero && was_dirty {
            // SAFETY: the block is ours and at least `size` bytes.
            unsafe { ptr::write_bytes(addr as *mut u8, 0, size) };
        }
        addr as *mut u8
    }

    /// Frees a huge block found by `owner_of`.
    pub(crate) fn huge_free(&self, e: *mut Extent) {
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
        drop(inner);
        self.maybe_decay();
    }

    /// Resizes a huge block in place to `new_class` (requested `size`): shrinks by giving back
    /// tail chunks, grows into a free neighbour. Returns whether it could.
    pub(crate) fn huge_resize(&self, e: *mut Extent, new_class: usize, size: usize) -> bool {
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
            self.defer_collapse(&mut inner, e, end, size - n * CHUNK, size);
            inner.stats.huge_active += (need * CHUNK) as u64;
        }
        let s = &mut inner.stats;
        s.huge_allocated =
            s.huge_allocated + class_size(new_class) as u64 - class_size(er.class as usize) as u64;
        er.class = new_class as u8;
        er.size = size;
        true
    }

    // ---- deferred collapse (`thp:defer`) ---------------------------------------------------

    /// Under `thp:defer`, queues the whole chunks of `[addr, addr + bytes)`, part of huge
    /// block `e` of requested size `size`, for the background thread's collapse. Arena lock
    /// held.
    fn defer_collapse(
        &self,
        inner: &mut ArenaInner,
        e: *mut Extent,
        addr: usize,
        bytes: usize,
        size: usize,
    ) {
        // SAFETY: e is a live huge block of this arena (lock held).
        let (backing, advice) = unsafe { ((*e).backing, (*e).advice) };
        if backing != BACKING_ORDINARY
            || !thp::defers_collapse(self.thp(), system_mode(), size, thp_threshold())
        {
            return;
        }
        if advice == ADVICE_NOHUGE || advice == ADVICE_MIXED {
            // Chunks left `nh` by an earlier policy of this arena: `MADV_COLLAPSE` refuses
            // those, so they get `hg` (the only advice that clears `nh`).
            inner.advise(e, ChunkAdvice::Huge);
        }
        if crate::collapse::enqueue(addr, bytes, self.index, os::now_ms()) {
            inner.stats.collapse_queued += 1;
        } else if bytes >= CHUNK {
            inner.stats.collapse_dropped += 1;
        }
    }

    /// The collapse pass's check before chunk `chunk`: whether it still belongs to a live huge
    /// block of this arena, which is still under `thp:defer`. Counts a skip where not.
    pub fn collapse_live(&self, chunk: usize) -> bool {
        let mut inner = self.inner.lock();
        let entry = PAGEMAP.get(chunk);
        let live = entry & TAG_MASK == TAG_EXTENT && self.thp() == Thp::Defer && {
            let e = (entry & !TAG_MASK) as *const Extent;
            // SAFETY: a TAG_EXTENT entry points at a live descriptor; the lock is held.
            let er = unsafe { &*e };
            er.state == STATE_HUGE
                && er.backing == BACKING_ORDINARY
                && er.arena == self.index
                && chunk >= er.addr
                && chunk < er.addr + er.nchunks * CHUNK
        };
        if !live {
            inner.stats.collapse_skipped += 1;
        }
        live
    }

    /// Counts what the collapse pass did to `chunk`. A chunk collapsed (or advised) while its
    /// block was freed and purged is purged again: the collapse made it resident, and a clean
    /// free extent is not purged by decay.
    pub fn collapse_record(&self, chunk: usize, outcome: crate::collapse::Outcome) {
        use crate::collapse::Outcome;
        let mut inner = self.inner.lock();
        let s = &mut inner.stats;
        match outcome {
            Outcome::Done => {
                s.collapse_attempted += 1;
                s.collapse_done += 1;
            }
            Outcome::Failed => {
                s.collapse_attempted += 1;
                s.collapse_failed += 1;
            }
            Outcome::Fallback => s.collapse_fallback += 1,
            Outcome::Cold => {
                s.collapse_cold += 1;
                return;
            }
        }
        let entry = PAGEMAP.get(chunk);
        if entry & TAG_MASK == TAG_EXTENT {
            // SAFETY: a TAG_EXTENT entry points at a live descriptor; the lock is held.
            let er = unsafe { &*((entry & !TAG_MASK) as *const Extent) };
            // Never on hugetlb memory (a kept hugetlb extent is clean too).
            if er.state == STATE_FREE
                && !er.dirty
                && er.backing == BACKING_ORDINARY
                && er.arena == self.index
            {
                os::advise(chunk as *mut u8, CHUNK, os::Advice::DontNeed);
            }
        }
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
        Some(inner.pages_take_fresh(pc, n))
    }

    // ---- purging ---------------------------------------------------------------------------

    /// Returns the bins' kept empty slabs, then purges every dirty free extent
    /// (`MADV_DONTNEED`), making it clean. Returns bytes purged.
    pub fn purge_all(&self) -> usize {
        for bin in &self.bins {
            bin.lock().drain_empty(|s| self.slab_release(s));
        }
        let guard = self.purge.lock();
        self.purge_pass(&guard, PurgeGoal::AllExtents, os::now_ms())
    }

    // ---- statistics and fork -------------------------------------------------------------

    /// A snapshot of the arena's counters (takes each lock briefly).
    pub fn snapshot(&self) -> ArenaSnapshot {
        let mut snap = ArenaSnapshot::default();
        for ((class, bin), out) in self.bins.iter().enumerate().zip(snap.bins.iter_mut()) {
            let b = bin.lock();
            *out = b.stats;
            snap.small_allocated += (b.stats.nmalloc - b.stats.nfree) * class_size(class) as u64;
        }
        let inner = self.inner.lock();
        snap.arena = inner.stats;
        snap.dirty_page_bytes = inner.dirty_page_bytes() as u64;
        snap
    }

    /// Takes every lock of this arena in rank order (fork prepare). Taking the purge lock
    /// waits for a purge pass in flight, so the child finds no busy run.
    pub fn lock_all(&self) {
        for b in &self.bins {
            b.force_lock();
        }
        self.purge.force_lock();
        self.inner.force_lock();
    }

    /// # Safety
    /// After `lock_all`, in the parent.
    pub unsafe fn unlock_all(&self) {
        // SAFETY: per the contract, these locks are held by this thread.
        unsafe {
            self.inner.force_unlock();
            self.purge.force_unlock();
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
            self.purge.reset_in_child();
            for b in &self.bins {
                b.reset_in_child();
            }
        }
    }
}

/// Pages of a slab of small class `class` (a class that is not small aborts).
fn slab_pages(class: usize) -> usize {
    match SLAB_PAGES.get(class) {
        Some(&n) => n as usize,
        None => diag::fatal("hugealloc: a slab asked for a class that is not small"),
    }
}

/// Page-map words `start..start + n` of `pc`; a run past the chunk (a corrupt descriptor)
/// aborts.
fn words(pc: &mut PageChunk, start: usize, n: usize) -> &mut [u64] {
    match pc.page_map.get_mut(start..start.wrapping_add(n)) {
        Some(w) => w,
        None => diag::fatal("hugealloc: a page run past its chunk"),
    }
}

/// Page-map word `page` of `pc` (0, a free page, past the chunk: callers then abort).
fn word(pc: &PageChunk, page: usize) -> u64 {
    pc.page_map.get(page).copied().unwrap_or(0)
}

/// Writes a large block's page-map words (`words` is the whole run): the head word (class and
/// length), and the interior words (offsets) from word `from` on (those before are right).
fn large_words(words: &mut [u64], class: usize, from: usize) {
    let n = words.len() as u64;
    if let Some(head) = words.first_mut() {
        *head = (class as u64) << PAGE_CLASS_SHIFT | n << 3 | PAGE_LARGE;
    }
    for (i, w) in words.iter_mut().enumerate().skip(from.max(1)) {
        *w = (i as u64) << 3 | PAGE_INTERIOR;
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
