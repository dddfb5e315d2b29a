//! Arenas: the coordinator of the arena layer. An arena owns chunks and serves everything a
//! thread cache does not:
//! - per small class a `Bin` (its own lock, rank 2) with a current slab and a list of non-full
//!   slabs, supplied with slabs from another bin's kept empty ones of the same page count
//!   (`slab_borrow`) or else from page runs;
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
//! the arena lock once per batch, never across `madvise` (see `purge`). The arena's THP
//! policy decides the advice each chunk gets when it is put to use.
//!
//! Files: this one holds the arena, its locks, decay, the small-object glue (bins and the slab
//! supply), purging, statistics and fork; `blocks` the large and huge blocks; `defer` the
//! `thp:defer` queueing and what the background thread reports back.

mod blocks;
mod defer;

use crate::arena_state::ArenaInner;
use crate::base::BASE;
use crate::chunk::*;
use crate::config::Hugetlb;
use crate::diag;
use crate::hugetlb::Backing;
use crate::os;
use crate::pagemap::{PAGEMAP, TAG_EXTENT, TAG_MASK};
use crate::purge::{
    decay_decode, decay_encode, decay_goal, decay_resolve, dirty_max_goal, growth_limit,
    purge_advise, PurgeBatch, PurgeGoal, DECAY_INHERIT, PASS_BATCHES_MAX,
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
pub use crate::purge::{
    decay_ms, set_decay_ms, set_dirty_growth_pct, set_muzzy_decay_ms, set_purge_globals,
};

/// The most pointers one batch between a thread cache and a bin holds (the thread cache's
/// largest bin; `tcache::flush_items` works through stack buffers of this many).
pub const BATCH_MAX: usize = 128;

pub struct Arena {
    pub index: u32,
    thp: AtomicU8,
    /// This arena's own `dirty_decay_ms` (encoded as `DIRTY_DECAY_MS`), or `DECAY_INHERIT`.
    decay_ms: AtomicU64,
    /// When the last decay pass started (ms); written under `purge`.
    last_decay_ms: AtomicU64,
    /// When the bins last gave back their idle kept empty slabs (ms; `bins_decay`).
    bins_decay_ms: AtomicU64,
    pub nthreads: AtomicUsize,
    /// Bit `c` set: bin `c` may keep an empty slab (`BinState::has_kept`); clear: it keeps
    /// none. Written only under bin `c`'s lock and only when that changes (`kept_note`):
    /// set by the flush that keeps a slab, cleared by a borrower that finds none (and by
    /// decay and purge), not by the refill that takes the last one, so a batch loop's
    /// refills and flushes do not write it each time. Read without the lock as a hint by
    /// `slab_borrow`, which then try-locks the bin. A cache line of its own: the bins' locks
    /// and the arena's other fields are not next to it.
    kept: KeptBins,
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
                    bins_decay_ms: AtomicU64::new(0),
                    nthreads: AtomicUsize::new(0),
                    kept: KeptBins(AtomicU64::new(0)),
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
        self.bins_decay(true);
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
        self.bins_decay(false);
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

    /// After a huge free that left this arena's dirty bytes above `dirty_max`: purges down to
    /// the limit now, not at the next decay pass (at most every tenth of the decay time), so
    /// a program freeing big blocks faster than that cannot overshoot it. Skipped while
    /// another pass of this arena runs (its goal holds the same limit).
    fn purge_over_dirty_max(&self) {
        let now = os::now_ms();
        let Some(goal) = dirty_max_goal(now) else {
            return;
        };
        let Some(guard) = self.purge.try_lock() else {
            return;
        };
        self.purge_pass(&guard, goal, now);
    }

    /// The growth rule (`dirty_growth_pct`): a huge allocation took clean or fresh chunks
    /// while this arena's active plus dirty bytes were past that percentage over its peak
    /// active bytes, so it purges whole dirty extents, the smallest first, down to `limit`
    /// dirty bytes. Memory a program frees and takes back whole (active bytes 0 between
    /// rounds) is never purged by this: its allocation is served dirty. Skipped while another
    /// pass of this arena runs.
    fn purge_for_growth(&self, limit: usize) {
        let Some(guard) = self.purge.try_lock() else {
            return;
        };
        let now = os::now_ms();
        let purged = self.purge_pass(&guard, PurgeGoal::Growth { limit }, now);
        self.inner.lock().stats.growth_purged += purged as u64;
    }

    /// The bins' part of decay: each bin gives back the kept empty slabs no refill took since
    /// the last time (`BinState::decay`), when a tenth of the decay time has passed since then
    /// (or `force`). Takes each bin lock in turn, and the arena lock under it for each slab
    /// given back, so it runs before the purge pass (which may then purge their pages), with
    /// no lock held; the timestamp's compare-and-swap elects one thread per tick.
    fn bins_decay(&self, force: bool) {
        let now = os::now_ms();
        // Relaxed: the swap below decides; this only avoids it when not due.
        let last = self.bins_decay_ms.load(Ordering::Relaxed);
        if decay_goal(self.decay_raw(), last, now, force).is_none() {
            return;
        }
        // Relaxed: elects one thread per tick; the bins' state is ordered by their locks.
        if self
            .bins_decay_ms
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        for (class, bin) in self.bins.iter().enumerate() {
            let mut b = bin.lock();
            b.decay(|s| self.slab_release(s));
            self.kept_note(class, &mut b);
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
        let mut bin = self.bin(class).lock();
        // SAFETY: `slab_new` returns null or a fresh slab of `class` of this arena, unlisted,
        // that only this bin refers to (its page map words name it; no bin lists it).
        let n = unsafe {
            bin.fill(out, || {
                grew = true;
                self.slab_new(class)
            })
        };
        // No `kept_note`: a fill only takes kept slabs, and a bit left set is a hint the next
        // borrower corrects (one `try_lock`), where clearing it here cost an atomic write per
        // refill in a batch loop (the flush after it set it again).
        drop(bin);
        if grew {
            self.maybe_decay();
        }
        n
    }

    /// Returns `ptrs` (all of small class `class`, all owned by this arena) to their slabs,
    /// taking the bin lock once (`bin_flush_ptrs`: a slab looked up per run). Aborts on a
    /// pointer that is not an object start or is already free, or of another arena's slab.
    pub(crate) fn bin_flush(&self, class: usize, ptrs: &[*mut u8]) {
        let done = self.bin_flush_ptrs(class, ptrs);
        diag::invariant(
            done == ptrs.len(),
            "a bin flush given a block of another arena's slab",
        );
    }

    /// As `bin_flush`, with each pointer's slab already looked up (`slab_of`), of any order
    /// (a remote-free drain's, the rest of a cache flush's).
    pub(crate) fn bin_flush_slabs(&self, class: usize, items: &[(*mut u8, *mut Slab)]) {
        self.bin_return(class, |bin, release| {
            // SAFETY: the caller looked each slab up with `slab_of(p, class)`: the live slab
            // of class `class` holding `p`, and (the caller grouped by home) one of this
            // arena's, so one this bin owns; `bin_return` holds the lock.
            unsafe { bin.flush(items, release) }
        })
    }

    /// Returns the leading blocks of `ptrs` (a thread cache's, all of small class `class`)
    /// that lie in this arena's slabs, under one bin lock, a slab looked up per run of blocks
    /// of one slab (`BinState::flush_ptrs`); returns how many: the caller sends the rest, from
    /// the first block of another arena's slab on, the general way. Aborts on a pointer that
    /// is not a block of `class` or is already free.
    pub(crate) fn bin_flush_ptrs(&self, class: usize, ptrs: &[*mut u8]) -> usize {
        self.bin_return(class, |bin, release| {
            // SAFETY: `slab_of(p, class)` returns the live slab of class `class` holding `p`
            // or aborts; `bin_return` holds the lock.
            unsafe { bin.flush_ptrs(ptrs, self.index, |p| slab_of(p, class), release) }
        })
    }

    /// The frame of a return of blocks to bin `class`: runs `give` under the bin's lock with
    /// the release of an emptied slab (`slab_release`), notes the bin's kept slabs, and once
    /// the lock is dropped aborts on the block `give` named (not an object start, or free
    /// already) or runs the decay pass when a slab was released.
    fn bin_return<T>(
        &self,
        class: usize,
        give: impl FnOnce(
            &mut BinState,
            &mut dyn FnMut(*mut Slab),
        ) -> Result<T, (*mut u8, &'static str)>,
    ) -> T {
        let mut released = false;
        let mut bin = self.bin(class).lock();
        let r = give(&mut bin, &mut |s| {
            released = true;
            self.slab_release(s)
        });
        self.kept_note(class, &mut bin);
        drop(bin);
        let v = match r {
            Ok(v) => v,
            Err((p, what)) => diag::fatal_ptr(what, p),
        };
        if released {
            self.maybe_decay();
        }
        v
    }

    /// Keeps bin `class`'s bit of `kept` equal to whether it keeps an empty slab. Called
    /// with that bin's lock held (`bin`), after each operation that may change it; touches
    /// the shared word only when it changed (`BinState::kept_changed`).
    fn kept_note(&self, class: usize, bin: &mut BinState) {
        let bit = 1u64 << (class % 64);
        // Relaxed: only holders of bin `class`'s lock write this bit, and the lock orders
        // them (its Acquire/Release); readers take it as a hint and check under the bin's
        // lock.
        match bin.kept_changed() {
            Some(true) => self.kept.0.fetch_or(bit, Ordering::Relaxed),
            Some(false) => self.kept.0.fetch_and(!bit, Ordering::Relaxed),
            None => return,
        };
    }

    /// A kept empty slab of another bin of the same page count, re-initialised for `class`
    /// (bin `class`'s lock held), or null when no such bin keeps one. The other bins' locks
    /// have bin `class`'s rank, so they are only tried (`try_lock`): two bins borrowing from
    /// each other cannot deadlock, and a busy bin is skipped. The slab's pages stay active;
    /// its descriptor and page-map words are rewritten under the arena lock, as `slab_new`
    /// writes them.
    fn slab_borrow(&self, class: usize) -> *mut Slab {
        // Relaxed: a hint (see `kept`); the bin's own state decides under its lock.
        let mut candidates = self.kept.0.load(Ordering::Relaxed) & same_pages(class);
        while candidates != 0 {
            let donor = candidates.trailing_zeros() as usize;
            candidates &= candidates - 1;
            let Some(mut bin) = self.bins.get(donor).and_then(|b| b.try_lock()) else {
                continue;
            };
            let slab = bin.lend_empty();
            self.kept_note(donor, &mut bin);
            drop(bin);
            if slab.is_null() {
                continue;
            }
            // SAFETY: a live slab of this arena the donor bin no longer refers to (off its
            // lists and counts); it is empty, so no cache, buffer or program holds a block of
            // it: only its page-map words name it, and they are rewritten below.
            let addr = unsafe { (*slab).addr };
            let pc = (PAGEMAP.get(addr) & !TAG_MASK) as *mut PageChunk;
            let start = crate::owner::page_index(addr);
            let mut inner = self.inner.lock();
            // SAFETY: as above; `pc` is the live page chunk holding the slab's pages (the
            // pagemap names it while the slab is live), which are this arena's.
            unsafe { self.slab_install(pc, start, slab, class) };
            inner.stats.slabs_moved += 1;
            return slab;
        }
        null_mut()
    }

    /// A new slab of `class` (bin lock held; takes the arena lock; the caller runs the decay
    /// pass once the bin lock is released): another bin's kept empty slab when one of the
    /// same page count is kept (`slab_borrow`), else fresh pages. Its descriptor is a
    /// recycled one of this arena's when there is one: only the first slabs take the base's
    /// lock (shared by all arenas).
    fn slab_new(&self, class: usize) -> *mut Slab {
        let borrowed = self.slab_borrow(class);
        if !borrowed.is_null() {
            return borrowed;
        }
        let npages = slab_pages(class);
        let mut inner = self.inner.lock();
        let slab = slab_desc_take(&mut inner);
        if slab.is_null() {
            return slab;
        }
        let Some((pc, start, _)) = self.pages_alloc(&mut inner, npages, 1) else {
            slab_desc_recycle(&mut inner, slab);
            return null_mut();
        };
        // SAFETY: pc is a live page chunk of this arena, pages start..start+npages are ours;
        // the descriptor is ours alone (fresh or recycled).
        unsafe { self.slab_install(pc, start, slab, class) };
        inner.stats.active_pages += npages as u64;
        slab
    }

    /// Makes `slab` the slab of `class` on pages `start..start + slab_pages(class)` of `pc`:
    /// its descriptor initialised for this arena, and those pages' page-map words naming it
    /// (a new slab in `slab_new`, a borrowed one in `slab_borrow`).
    ///
    /// # Safety
    /// The arena lock is held; `pc` is a live page chunk of this arena whose pages
    /// `start..start + slab_pages(class)` are this slab's; `slab` is a descriptor no cache,
    /// buffer, bin or program refers to.
    unsafe fn slab_install(&self, pc: *mut PageChunk, start: usize, slab: *mut Slab, class: usize) {
        // SAFETY: the contract.
        unsafe {
            let pcr = &mut *pc;
            (*slab).init(pcr.addr + start * os::PAGE, class, self.index);
            let word = slab as u64 | PAGE_SLAB;
            words(pcr, start, slab_pages(class)).fill(word);
            // `class < NSMALL` (`Slab::init` aborts on any other) fits the byte, and `words`
            // checked the run.
            let classes = pcr.page_class.get_mut(start..start + slab_pages(class));
            classes.unwrap_or_default().fill(class as u8);
        }
    }

    /// Gives an empty slab's pages back and keeps its descriptor for the next slab (bin lock
    /// held; takes the arena lock; the caller runs the decay pass once the bin lock is
    /// released).
    fn slab_release(&self, slab: *mut Slab) {
        // SAFETY: the slab is empty and unlisted; nobody else refers to it.
        let (addr, class) = unsafe { ((*slab).addr, (*slab).class as usize) };
        let npages = slab_pages(class);
        let entry = PAGEMAP.get(addr);
        let pc = (entry & !TAG_MASK) as *mut PageChunk;
        let mut inner = self.inner.lock();
        let start = crate::owner::page_index(addr);
        inner.pages_free(pc, start, npages);
        inner.stats.active_pages -= npages as u64;
        // No page map word refers to the descriptor now.
        slab_desc_recycle(&mut inner, slab);
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
        for (class, bin) in self.bins.iter().enumerate() {
            let mut b = bin.lock();
            b.drain_empty(|s| self.slab_release(s));
            self.kept_note(class, &mut b);
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

/// `Arena::kept`, on a cache line of its own.
#[repr(align(64))]
struct KeptBins(AtomicU64);

/// The classes (bits) whose slabs have as many pages as `class`'s, `class` itself left out:
/// the bins `slab_borrow` may take a kept slab from.
fn same_pages(class: usize) -> u64 {
    SAME_PAGES.get(class).copied().unwrap_or(0)
}

/// `same_pages` per small class.
static SAME_PAGES: [u64; NSMALL] = {
    let mut t = [0u64; NSMALL];
    let mut i = 0;
    while i < NSMALL {
        let mut j = 0;
        while j < NSMALL {
            if j != i && SLAB_PAGES[j] == SLAB_PAGES[i] {
                t[i] |= 1 << j;
            }
            j += 1;
        }
        i += 1;
    }
    t
};
const _: () = assert!(NSMALL <= 64, "`Arena::kept` has a bit per small class");
const _: () = assert!(
    NSMALL <= 256,
    "`PageChunk::page_class` holds a small class in a byte"
);

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

/// Recycled slab descriptors an arena keeps at most (each about 120 bytes of metadata);
/// more go back to the base.
pub const SPARE_SLABS_MAX: u32 = 64;

/// A slab descriptor for a new slab: a recycled one of this arena's, else one from the base
/// (null when out of memory). Arena lock held (`inner`).
fn slab_desc_take(inner: &mut ArenaInner) -> *mut Slab {
    let s = inner.spare_slabs;
    if s.is_null() {
        inner.slab_descs_from_base += 1;
        return BASE.alloc(core::mem::size_of::<Slab>()) as *mut Slab;
    }
    // SAFETY: spare descriptors are valid and linked through `next`; `init` rewrites every
    // field before the slab is used.
    inner.spare_slabs = unsafe { (*s).next };
    inner.nspare_slabs -= 1;
    s
}

/// Keeps the descriptor of a released (or never used) slab for the next one, or gives it to
/// the base once `SPARE_SLABS_MAX` are kept. Arena lock held (`inner`); nothing refers to
/// `slab` any more.
fn slab_desc_recycle(inner: &mut ArenaInner, slab: *mut Slab) {
    if inner.nspare_slabs < SPARE_SLABS_MAX {
        // SAFETY: a descriptor nothing else refers to.
        unsafe { (*slab).next = inner.spare_slabs };
        inner.spare_slabs = slab;
        inner.nspare_slabs += 1;
    } else {
        // SAFETY: every descriptor came from BASE.alloc of this size (`slab_desc_take`) and
        // nothing refers to it.
        unsafe { BASE.free(slab as *mut u8, core::mem::size_of::<Slab>()) };
    }
}

#[cfg(test)]
mod tests;
