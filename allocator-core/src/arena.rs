//! Arenas. An arena owns chunks and serves everything a thread cache does not:
//! - per small class a `Bin` (its own lock, rank 2) with a current slab and a list of non-full
//!   slabs;
//! - page runs for slabs and large blocks inside page chunks, placed in the chunk whose longest
//!   free run fits most tightly (so chunks fill up and empty ones appear), under the arena lock
//!   (rank 3);
//! - huge blocks as runs of whole chunks, and free chunk runs ("extents"), coalesced with their
//!   free neighbours and kept dirty for reuse, under the arena lock.
//!
//! Invariants: every chunk an arena owns is described by exactly one `Extent`; every page
//! chunk sits in exactly one `chunk_buckets` list, the one of its longest free run; every free
//! extent sits in exactly one `free_buckets` list of its dirtiness. The arena's THP policy
//! decides the advice each chunk gets when it is put to use.

use crate::base::BASE;
use crate::bitmap::Bitmap;
use crate::chunk::*;
use crate::diag;
use crate::list;
use crate::os;
use crate::pagemap::{PAGEMAP, TAG_EXTENT, TAG_MASK, TAG_PAGES};
use crate::size_class::*;
use crate::slab::Slab;
use crate::sync::{AtomicU32, AtomicU8, AtomicUsize, Mutex, Ordering};
use crate::thp::{self, ChunkAdvice, SystemMode, Thp};
use core::ptr::{self, null_mut};

const NFREE_BUCKETS: usize = 64;

pub use crate::bin::{BinState, BinStats};

pub struct ArenaInner {
    /// Page chunks by longest free run (0..=512 pages).
    chunk_buckets: [*mut PageChunk; CHUNK_PAGES + 1],
    chunk_nonempty: Bitmap<9>,
    /// Free extents, dirty and clean, bucketed by chunk count.
    free_dirty: [*mut Extent; NFREE_BUCKETS],
    free_clean: [*mut Extent; NFREE_BUCKETS],
    /// Recycled extent descriptors.
    spare_extents: *mut Extent,
    /// When the last decay pass ran (ms).
    last_decay_ms: u64,
    /// Page chunks with every page free (one is kept to avoid churn).
    empty_chunks: usize,
    pub stats: ArenaStats,
}

// SAFETY: the raw pointers are only used under the arena lock.
unsafe impl Send for ArenaInner {}

/// Counters of one arena's page runs, huge blocks and chunks.
#[derive(Clone, Copy, Default, Debug)]
pub struct ArenaStats {
    pub large_nmalloc: u64,
    pub large_nfree: u64,
    pub large_allocated: u64,
    pub huge_nmalloc: u64,
    pub huge_nfree: u64,
    pub huge_allocated: u64,
    pub huge_active: u64,
    /// Pages in use by slabs and large runs.
    pub active_pages: u64,
    /// Chunks taken from the chunk source (all states).
    pub chunks: u64,
    pub page_chunks: u64,
    pub dirty_extent_bytes: u64,
    /// Free extents given `MADV_FREE` and not yet `MADV_DONTNEED` (`muzzy_decay_ms`).
    pub muzzy_extent_bytes: u64,
    pub clean_extent_bytes: u64,
    pub purged_bytes: u64,
    /// Bytes purged from chunks that were huge-backed (splitting their huge page), under
    /// `dirty_max`.
    pub subreleased_bytes: u64,
    /// Bytes of chunks collapsed back into huge pages (`thp_collapse`).
    pub collapsed_bytes: u64,
    pub advised_huge_bytes: u64,
    pub advised_nohuge_bytes: u64,
}

pub struct Arena {
    pub index: u32,
    thp: AtomicU8,
    /// This arena's own `dirty_decay_ms` (encoded as `DIRTY_DECAY_MS`), or `DECAY_INHERIT`.
    decay_ms: crate::sync::AtomicU64,
    pub nthreads: AtomicUsize,
    pub bins: [Mutex<BinState>; NSMALL],
    pub inner: Mutex<ArenaInner>,
}

/// The system THP mode, read once at start (`thp::SystemMode as u8`).
static SYSTEM_MODE: AtomicU8 = AtomicU8::new(SystemMode::Unknown as u8);
/// The `thp_threshold` option.
static THP_THRESHOLD: AtomicUsize = AtomicUsize::new(4 << 20);
/// `dirty_decay_ms`: how long freed chunks stay dirty before they are purged (`u64::MAX`: never).
static DIRTY_DECAY_MS: crate::sync::AtomicU64 = crate::sync::AtomicU64::new(10_000);

/// An arena's `decay_ms` when it follows `DIRTY_DECAY_MS` (no `ms >= 0` encodes to it).
const DECAY_INHERIT: u64 = u64::MAX - 1;

/// Milliseconds as stored: negative (never) is `u64::MAX`.
fn decay_encode(ms: i64) -> u64 {
    if ms < 0 {
        u64::MAX
    } else {
        ms as u64
    }
}

fn decay_decode(raw: u64) -> i64 {
    i64::try_from(raw).unwrap_or(-1)
}

/// Sets the decay time every arena without its own follows (negative: never purge on a timer).
pub fn set_decay_ms(ms: i64) {
    // Relaxed: a tuning value; a racing reader uses the old or the new one.
    DIRTY_DECAY_MS.store(decay_encode(ms), Ordering::Relaxed);
}

/// The decay time of arenas without their own (`arenas.dirty_decay_ms`; -1: never).
pub fn decay_ms() -> i64 {
    // Relaxed: as in set_decay_ms.
    decay_decode(DIRTY_DECAY_MS.load(Ordering::Relaxed))
}

/// How many arenas have been created.
/// `dirty_max` (0: no limit) and `thp_collapse`, set once by the init.
/// `muzzy_decay_ms` (0: no muzzy stage, purge with `MADV_DONTNEED` at once; `u64::MAX`: never).
static MUZZY_DECAY_MS: crate::sync::plain::AtomicU64 = crate::sync::plain::AtomicU64::new(0);

/// Sets `muzzy_decay_ms`: how long memory stays muzzy (`MADV_FREE`d) before `MADV_DONTNEED`;
/// 0 skips the muzzy stage, negative keeps muzzy memory until reuse.
pub fn set_muzzy_decay_ms(ms: i64) {
    // Relaxed: a tuning value, read on the purge path.
    MUZZY_DECAY_MS.store(decay_encode(ms), Ordering::Relaxed);
}

static DIRTY_MAX: crate::sync::plain::AtomicUsize = crate::sync::plain::AtomicUsize::new(0);
static THP_COLLAPSE: crate::sync::plain::AtomicBool = crate::sync::plain::AtomicBool::new(false);

/// Sets the purging limits every arena follows: `dirty_max` bytes of dirty pages per arena (0:
/// none) and whether chunks that were split are collapsed again.
pub fn set_purge_globals(dirty_max: usize, collapse: bool) {
    // Relaxed: read on the purge path; a change applies from the next pass.
    DIRTY_MAX.store(dirty_max, Ordering::Relaxed);
    THP_COLLAPSE.store(collapse, Ordering::Relaxed);
}

static ARENA_COUNT: AtomicU32 = AtomicU32::new(0);

/// Sets the process-wide THP facts every arena consults.
pub fn set_thp_globals(mode: SystemMode, threshold: usize) {
    // Relaxed: read by arenas created after init, which is ordered by the init Once.
    SYSTEM_MODE.store(mode as u8, Ordering::Relaxed);
    THP_THRESHOLD.store(threshold, Ordering::Relaxed);
}

pub fn system_mode() -> SystemMode {
    // Relaxed: set once at init before any arena exists.
    match SYSTEM_MODE.load(Ordering::Relaxed) {
        0 => SystemMode::Always,
        1 => SystemMode::Madvise,
        2 => SystemMode::Never,
        _ => SystemMode::Unknown,
    }
}

pub fn thp_threshold() -> usize {
    // Relaxed: as in system_mode.
    THP_THRESHOLD.load(Ordering::Relaxed)
}

fn free_bucket(n: usize) -> usize {
    if n <= 16 {
        n - 1
    } else {
        (12 + crate::bits::lg_floor(n) as usize).min(NFREE_BUCKETS - 1)
    }
}

/// What a pointer is, from the pagemap alone.
pub enum Owner {
    Small {
        chunk: *mut PageChunk,
        slab: *mut Slab,
        class: usize,
    },
    Large {
        chunk: *mut PageChunk,
        page: usize,
        class: usize,
    },
    Huge {
        extent: *mut Extent,
    },
}

/// Finds the owner of `p`, or aborts naming the pointer if hugealloc did not hand it out.
#[inline(always)]
pub fn owner_of(p: *mut u8) -> Owner {
    let addr = p as usize;
    let entry = PAGEMAP.get(addr);
    match entry & TAG_MASK {
        TAG_PAGES => {
            let pc = (entry & !TAG_MASK) as *mut PageChunk;
            // SAFETY: a TAG_PAGES entry always points at the live PageChunk of its chunk.
            let page = unsafe { (*pc).page_of(addr) };
            // SAFETY: page < CHUNK_PAGES since addr lies in the chunk.
            let word = unsafe { (*pc).page_map[page] };
            let class = (word >> PAGE_CLASS_SHIFT) as usize;
            match word & PAGE_KIND {
                PAGE_SLAB => Owner::Small {
                    chunk: pc,
                    slab: (word & PAGE_PAYLOAD & !PAGE_KIND) as *mut Slab,
                    class,
                },
                PAGE_LARGE if addr & (os::PAGE - 1) == 0 => Owner::Large {
                    chunk: pc,
                    page,
                    class,
                },
                _ => diag::fatal_ptr(
                    "free of a pointer hugealloc does not own (inside a page run or a free page):",
                    p,
                ),
            }
        }
        TAG_EXTENT => {
            let e = (entry & !TAG_MASK) as *mut Extent;
            // SAFETY: a TAG_EXTENT entry always points at the live Extent of its chunk.
            let (state, start) = unsafe { ((*e).state, (*e).addr) };
            if state != STATE_HUGE || start != addr {
                diag::fatal_ptr("free of a pointer hugealloc does not own (inside a huge block or a free chunk):", p);
            }
            Owner::Huge { extent: e }
        }
        _ => diag::fatal_ptr("free of a pointer hugealloc never returned:", p),
    }
}

/// The slab holding `p`, which the caller says is of small class `class`; aborts naming the
/// pointer when it is not a small block of that class.
#[inline]
pub fn slab_of(p: *mut u8, class: usize) -> *mut Slab {
    match owner_of(p) {
        Owner::Small { slab, class: c, .. } if c == class => slab,
        _ => diag::fatal_ptr("free with a size of another class:", p),
    }
}

/// The class of a live block, from the pagemap alone.
#[inline(always)]
pub fn class_of_ptr(p: *mut u8) -> usize {
    match owner_of(p) {
        Owner::Small { class, .. } | Owner::Large { class, .. } => class,
        // SAFETY: owner_of checked the extent is a live huge block.
        Owner::Huge { extent } => unsafe { (*extent).class as usize },
    }
}

/// The arena owning a block.
#[inline]
pub fn arena_index_of(owner: &Owner) -> u32 {
    // SAFETY: owners come from owner_of, which returns live descriptors.
    unsafe {
        match *owner {
            Owner::Small { slab, .. } => (*slab).arena,
            Owner::Large { chunk, .. } => (*chunk).arena,
            Owner::Huge { extent } => (*extent).arena,
        }
    }
}

// The descriptor pointers these methods take (`PageChunk`, `Extent`) come only from
// `owner_of`, which validates them against the pagemap; making every method `unsafe` would
// move that one fact to every call site without adding a check.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
impl Arena {
    /// Creates arena number `index` in metadata memory. Null when out of memory.
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
                    inner: Mutex::new(ArenaInner {
                        chunk_buckets: [null_mut(); CHUNK_PAGES + 1],
                        chunk_nonempty: Bitmap::new(),
                        free_dirty: [null_mut(); NFREE_BUCKETS],
                        free_clean: [null_mut(); NFREE_BUCKETS],
                        spare_extents: null_mut(),
                        last_decay_ms: 0,
                        empty_chunks: 0,
                        stats: ArenaStats::default(),
                    }),
                },
            );
        }
        // Relaxed: a count for statistics.
        ARENA_COUNT.fetch_add(1, Ordering::Relaxed);
        a
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
        // Relaxed (both): tuning values; a racing reader uses the old or the new one.
        match self.decay_ms.load(Ordering::Relaxed) {
            DECAY_INHERIT => DIRTY_DECAY_MS.load(Ordering::Relaxed),
            own => own,
        }
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
        self.maybe_decay(&mut inner);
        (inner.stats.purged_bytes - before) as usize
    }

    /// A decay pass if one is due (the background thread's tick); also how long until the
    /// next one may be due, in ms (a tenth of the decay time, 100 ms under `dirty_max` alone).
    pub fn decay_tick(&self) -> u64 {
        let mut inner = self.inner.lock();
        self.maybe_decay(&mut inner);
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
        let mut items = [(null_mut(), null_mut()); crate::tcache::CAP_MAX];
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
            self.chunk_unfile(&mut inner, pc);
            pcr.take_pages(page + n, m - n);
            self.chunk_file(&mut inner, pc);
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
        let Some((e, was_dirty)) = self.extent_take(&mut inner, n, align_chunks) else {
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
            self.advise(&mut inner, e, want);
            er.addr
        };
        self.maybe_decay(&mut inner);
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
        self.extent_free(&mut inner, e);
        self.maybe_decay(&mut inner);
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
            let Some(tail) = self.extent_desc(&mut inner) else {
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
                // The tail's chunks name their own descriptor from now on, so that it
                // coalesces and the block can grow back into it.
                PAGEMAP.set(t.addr, t.nchunks, tail as usize | TAG_EXTENT);
            }
            er.nchunks = m;
            inner.stats.huge_active -= ((n - m) * CHUNK) as u64;
            self.extent_free(&mut inner, tail);
        } else if m > n {
            let end = er.addr + n * CHUNK;
            let entry = PAGEMAP.get(end);
            if entry & TAG_MASK != TAG_EXTENT {
                return false;
            }
            let next = (entry & !TAG_MASK) as *mut Extent;
            // SAFETY: a TAG_EXTENT entry points at a live extent.
            let nx = unsafe { &mut *next };
            if nx.state != STATE_FREE
                || nx.arena != self.index
                || nx.addr != end
                || nx.nchunks < m - n
            {
                return false;
            }
            let need = m - n;
            self.free_unfile(&mut inner, next);
            if nx.nchunks == need {
                self.extent_recycle(&mut inner, next);
            } else {
                nx.addr += need * CHUNK;
                nx.nchunks -= need;
                self.free_file(&mut inner, next);
            }
            er.nchunks = m;
            PAGEMAP.set(end, need, e as usize | TAG_EXTENT);
            let want = thp::advice_for(self.thp(), system_mode(), size, thp_threshold());
            if want != ChunkAdvice::None {
                self.advise_range(&mut inner, end, need, want);
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

    // ---- page runs -------------------------------------------------------------------------

    fn chunk_unfile(&self, inner: &mut ArenaInner, pc: *mut PageChunk) {
        // SAFETY: pc is live and filed under its longest run.
        unsafe {
            let b = (*pc).longest as usize;
            list::remove(&mut inner.chunk_buckets[b], pc);
            if inner.chunk_buckets[b].is_null() {
                inner.chunk_nonempty.clear(b);
            }
            if (*pc).nfree as usize == CHUNK_PAGES {
                inner.empty_chunks -= 1;
            }
        }
    }

    fn chunk_file(&self, inner: &mut ArenaInner, pc: *mut PageChunk) {
        // SAFETY: pc is live and on no list.
        unsafe {
            let b = (*pc).longest as usize;
            list::push(&mut inner.chunk_buckets[b], pc);
            inner.chunk_nonempty.set(b);
            if (*pc).nfree as usize == CHUNK_PAGES {
                inner.empty_chunks += 1;
            }
        }
    }

    /// Finds `n` free pages aligned to `align_pages` pages: in the page chunk whose longest
    /// free run fits most tightly, else in a new page chunk. Returns the chunk, the first page
    /// and whether any page was dirty.
    fn pages_alloc(
        &self,
        inner: &mut ArenaInner,
        n: usize,
        align_pages: usize,
    ) -> Option<(*mut PageChunk, usize, bool)> {
        let mut b = n;
        while let Some(bucket) = inner.chunk_nonempty.next_set(b) {
            if bucket > CHUNK_PAGES {
                break;
            }
            let mut pc = inner.chunk_buckets[bucket];
            while !pc.is_null() {
                // SAFETY: filed chunks are live.
                let found = unsafe { (*pc).free.find_run(n, align_pages) };
                if let Some(start) = found {
                    self.chunk_unfile(inner, pc);
                    // SAFETY: pages start..start+n are free in pc.
                    let dirty = unsafe {
                        (*pc).check();
                        (*pc).take_pages(start, n)
                    };
                    self.chunk_file(inner, pc);
                    self.maybe_collapse(inner, pc);
                    return Some((pc, start, dirty));
                }
                // SAFETY: as above.
                pc = unsafe { (*pc).next };
            }
            b = bucket + 1;
        }
        let pc = self.page_chunk_new(inner)?;
        self.chunk_unfile(inner, pc);
        // SAFETY: a new page chunk has all pages free; an aligned run exists since
        // align_pages divides CHUNK_PAGES and n fits (callers never ask for more).
        let dirty = unsafe { (*pc).take_pages(0, n) };
        self.chunk_file(inner, pc);
        Some((pc, 0, dirty))
    }

    fn pages_free(&self, inner: &mut ArenaInner, pc: *mut PageChunk, start: usize, n: usize) {
        self.chunk_unfile(inner, pc);
        // SAFETY: pages start..start+n of pc belonged to the run being freed.
        unsafe {
            if (*pc).ndirty_free == 0 {
                (*pc).dirty_since_ms = os::now_ms();
            }
            (*pc).give_pages(start, n);
            (*pc).check();
        }
        // SAFETY: as above.
        if unsafe { (*pc).nfree } as usize == CHUNK_PAGES && inner.empty_chunks >= 1 {
            self.page_chunk_release(inner, pc);
        } else {
            self.chunk_file(inner, pc);
            self.maybe_decay(inner);
        }
    }

    /// Whether a page chunk's pages sit on a huge page (so purging part of it splits it): the
    /// chunk of a live page chunk of this arena, read under its lock.
    fn huge_backed(pc: *mut PageChunk) -> bool {
        // SAFETY: pc is a live page chunk of this arena (lock held); its extent is live.
        match unsafe { (*(*pc).extent).advice } {
            ADVICE_NOHUGE => false,
            ADVICE_NONE => system_mode() == SystemMode::Always,
            _ => true,
        }
    }

    /// With `thp_collapse`, collapses a chunk split by a partial purge once it is nearly
    /// full again (7/8 of its pages in use): `MADV_COLLAPSE`, whose failure (an old kernel's
    /// `EINVAL`, no memory) is harmless and not retried until the next split.
    fn maybe_collapse(&self, inner: &mut ArenaInner, pc: *mut PageChunk) {
        // Relaxed: see set_purge_globals.
        if !THP_COLLAPSE.load(Ordering::Relaxed) {
            return;
        }
        // SAFETY: pc is a live page chunk of this arena (lock held).
        let p = unsafe { &mut *pc };
        if !p.split || p.nfree as usize * 8 > CHUNK_PAGES {
            return;
        }
        p.split = false;
        if os::advise(p.addr as *mut u8, CHUNK, os::Advice::Collapse) {
            inner.stats.collapsed_bytes += CHUNK as u64;
        }
    }

    /// Purges the free dirty pages of the page chunks `pick` selects; returns bytes purged.
    /// Stops once `budget` bytes are purged.
    fn purge_page_chunks(
        &self,
        inner: &mut ArenaInner,
        budget: usize,
        mut pick: impl FnMut(*mut PageChunk) -> bool,
    ) -> usize {
        let mut purged = 0;
        let mut b = 0;
        while let Some(bucket) = inner.chunk_nonempty.next_set(b) {
            if bucket > CHUNK_PAGES || purged >= budget {
                break;
            }
            let mut pc = inner.chunk_buckets[bucket];
            while !pc.is_null() && purged < budget {
                // SAFETY: filed chunks are live; purging does not change their filing.
                let (next, ndirty) = unsafe { ((*pc).next, (*pc).ndirty_free) };
                if ndirty > 0 && pick(pc) {
                    let huge = Self::huge_backed(pc);
                    // SAFETY: as above; the lock is held.
                    let bytes = unsafe { (*pc).purge_free_dirty() } * os::PAGE;
                    if huge {
                        // SAFETY: as above.
                        unsafe { (*pc).split = true };
                        inner.stats.subreleased_bytes += bytes as u64;
                    }
                    purged += bytes;
                }
                pc = next;
            }
            b = bucket + 1;
        }
        purged
    }

    /// Dirty bytes this arena holds: free dirty extents and free dirty pages of page chunks.
    fn dirty_bytes(&self, inner: &ArenaInner) -> usize {
        inner.stats.dirty_extent_bytes as usize + Self::dirty_page_bytes(inner)
    }

    /// Bytes of free dirty pages inside this arena's page chunks.
    fn dirty_page_bytes(inner: &ArenaInner) -> usize {
        let mut pages = 0usize;
        let mut b = 0;
        while let Some(bucket) = inner.chunk_nonempty.next_set(b) {
            if bucket > CHUNK_PAGES {
                break;
            }
            let mut pc = inner.chunk_buckets[bucket];
            while !pc.is_null() {
                // SAFETY: filed chunks are live.
                unsafe {
                    pages += (*pc).ndirty_free as usize;
                    pc = (*pc).next;
                }
            }
            b = bucket + 1;
        }
        pages * os::PAGE
    }

    /// Under `dirty_max`, purges until the arena's dirty bytes fit: whole free extents first,
    /// then free pages of chunks not on huge pages, and only then of huge-backed ones.
    fn enforce_dirty_max(&self, inner: &mut ArenaInner, limit: usize) -> usize {
        let dirty = self.dirty_bytes(inner);
        if dirty <= limit {
            return 0;
        }
        let mut need = dirty - limit;
        let mut purged = 0;
        for b in 0..NFREE_BUCKETS {
            while need > 0 {
                let e = inner.free_dirty[b];
                if e.is_null() {
                    break;
                }
                let n = self.purge_extent(inner, e);
                purged += n;
                need = need.saturating_sub(n);
            }
        }
        if need > 0 {
            let n = self.purge_page_chunks(inner, need, |pc| !Self::huge_backed(pc));
            purged += n;
            need = need.saturating_sub(n);
        }
        if need > 0 {
            purged += self.purge_page_chunks(inner, need, |_| true);
        }
        purged
    }

    /// Puts a free chunk to use as a page chunk (filed, all pages free).
    fn page_chunk_new(&self, inner: &mut ArenaInner) -> Option<*mut PageChunk> {
        let pc = BASE.alloc(core::mem::size_of::<PageChunk>()) as *mut PageChunk;
        if pc.is_null() {
            return None;
        }
        let Some((e, dirty)) = self.extent_take(inner, 1, 1) else {
            // SAFETY: pc came from BASE.alloc and was never published.
            unsafe { BASE.free(pc as *mut u8, core::mem::size_of::<PageChunk>()) };
            return None;
        };
        // SAFETY: pc is fresh zeroed metadata; e is an extent of one chunk just taken.
        unsafe {
            let p = &mut *pc;
            p.addr = (*e).addr;
            p.extent = e;
            p.arena = self.index;
            p.nfree = CHUNK_PAGES as u32;
            p.longest = CHUNK_PAGES as u32;
            p.free.set_range(0, CHUNK_PAGES);
            if dirty {
                p.dirty.set_range(0, CHUNK_PAGES);
                p.ndirty_free = CHUNK_PAGES as u32;
                p.dirty_since_ms = (*e).dirty_since_ms;
            }
            (*e).state = STATE_PAGES;
            (*e).pages = pc;
            PAGEMAP.set(p.addr, 1, pc as usize | TAG_PAGES);
        }
        let want = thp::advice_for(self.thp(), system_mode(), 0, thp_threshold());
        self.advise(inner, e, want);
        inner.stats.page_chunks += 1;
        self.chunk_file(inner, pc);
        self.maybe_decay(inner);
        Some(pc)
    }

    fn page_chunk_release(&self, inner: &mut ArenaInner, pc: *mut PageChunk) {
        // SAFETY: pc is live, unfiled and has every page free.
        let e = unsafe {
            let e = (*pc).extent;
            (*e).state = STATE_FREE;
            (*e).dirty = (*pc).ndirty_free != 0;
            (*e).muzzy = false;
            (*e).dirty_since_ms = os::now_ms();
            (*e).pages = null_mut();
            PAGEMAP.set((*e).addr, 1, e as usize | TAG_EXTENT);
            e
        };
        inner.stats.page_chunks -= 1;
        // SAFETY: no pagemap entry refers to pc any more.
        unsafe { BASE.free(pc as *mut u8, core::mem::size_of::<PageChunk>()) };
        self.extent_free(inner, e);
        self.maybe_decay(inner);
    }

    // ---- extents ---------------------------------------------------------------------------

    fn extent_desc(&self, inner: &mut ArenaInner) -> Option<*mut Extent> {
        let e = if inner.spare_extents.is_null() {
            BASE.alloc(core::mem::size_of::<Extent>()) as *mut Extent
        } else {
            let e = inner.spare_extents;
            // SAFETY: spare descriptors are valid and linked through `next`.
            inner.spare_extents = unsafe { (*e).next };
            e
        };
        if e.is_null() {
            return None;
        }
        // SAFETY: e is a descriptor nobody else refers to.
        unsafe {
            ptr::write_bytes(e, 0, 1);
            (*e).arena = self.index;
        }
        Some(e)
    }

    fn extent_recycle(&self, inner: &mut ArenaInner, e: *mut Extent) {
        // SAFETY: e is a descriptor no pagemap entry or list refers to any more.
        unsafe { (*e).next = inner.spare_extents };
        inner.spare_extents = e;
    }

    fn free_list(inner: &mut ArenaInner, dirty: bool, n: usize) -> &mut *mut Extent {
        let b = free_bucket(n);
        if dirty {
            &mut inner.free_dirty[b]
        } else {
            &mut inner.free_clean[b]
        }
    }

    fn free_file(&self, inner: &mut ArenaInner, e: *mut Extent) {
        // SAFETY: e is a live free extent on no list.
        let (dirty, muzzy, n) = unsafe { ((*e).dirty, (*e).muzzy, (*e).nchunks) };
        let bytes = (n * CHUNK) as u64;
        if dirty && muzzy {
            inner.stats.muzzy_extent_bytes += bytes;
        } else if dirty {
            inner.stats.dirty_extent_bytes += bytes;
        } else {
            inner.stats.clean_extent_bytes += bytes;
        }
        // SAFETY: as above.
        unsafe { list::push(Self::free_list(inner, dirty, n), e) };
    }

    fn free_unfile(&self, inner: &mut ArenaInner, e: *mut Extent) {
        // SAFETY: e is a live free extent on its list.
        let (dirty, muzzy, n) = unsafe { ((*e).dirty, (*e).muzzy, (*e).nchunks) };
        let bytes = (n * CHUNK) as u64;
        if dirty && muzzy {
            inner.stats.muzzy_extent_bytes -= bytes;
        } else if dirty {
            inner.stats.dirty_extent_bytes -= bytes;
        } else {
            inner.stats.clean_extent_bytes -= bytes;
        }
        // SAFETY: as above.
        unsafe { list::remove(Self::free_list(inner, dirty, n), e) };
    }

    /// Files a free extent, merging it with free neighbours of the same dirtiness first. A
    /// merged dirty extent keeps the older age, so steady reuse cannot keep old dirty memory
    /// from decaying.
    fn extent_free(&self, inner: &mut ArenaInner, mut e: *mut Extent) {
        // SAFETY: e and every extent found through the pagemap are live descriptors; the
        // arena lock guards all of this arena's extents.
        unsafe {
            let (dirty, muzzy) = ((*e).dirty, (*e).muzzy);
            let before = PAGEMAP.get((*e).addr - 1);
            if before & TAG_MASK == TAG_EXTENT {
                let p = (before & !TAG_MASK) as *mut Extent;
                if (*p).state == STATE_FREE
                    && (*p).arena == self.index
                    && (*p).dirty == dirty
                    && (*p).muzzy == muzzy
                    && (*p).addr + (*p).nchunks * CHUNK == (*e).addr
                {
                    self.free_unfile(inner, p);
                    (*p).nchunks += (*e).nchunks;
                    (*p).advice = merge_advice((*p).advice, (*e).advice);
                    (*p).dirty_since_ms = (*p).dirty_since_ms.min((*e).dirty_since_ms);
                    PAGEMAP.set((*e).addr, (*e).nchunks, p as usize | TAG_EXTENT);
                    self.extent_recycle(inner, e);
                    e = p;
                }
            }
            let end = (*e).addr + (*e).nchunks * CHUNK;
            let after = PAGEMAP.get(end);
            if after & TAG_MASK == TAG_EXTENT {
                let x = (after & !TAG_MASK) as *mut Extent;
                if (*x).state == STATE_FREE
                    && (*x).arena == self.index
                    && (*x).dirty == dirty
                    && (*x).muzzy == muzzy
                    && (*x).addr == end
                {
                    self.free_unfile(inner, x);
                    (*e).nchunks += (*x).nchunks;
                    (*e).advice = merge_advice((*e).advice, (*x).advice);
                    (*e).dirty_since_ms = (*e).dirty_since_ms.min((*x).dirty_since_ms);
                    PAGEMAP.set((*x).addr, (*x).nchunks, e as usize | TAG_EXTENT);
                    self.extent_recycle(inner, x);
                }
            }
        }
        self.free_file(inner, e);
    }

    /// Takes `n` chunks aligned to `align_chunks` chunks off the free lists (dirty first, so
    /// memory already faulted in is reused), else from the chunk source. Returns the extent
    /// (state free, exactly `n` chunks, not filed) and whether it was dirty.
    fn extent_take(
        &self,
        inner: &mut ArenaInner,
        n: usize,
        align_chunks: usize,
    ) -> Option<(*mut Extent, bool)> {
        let align = align_chunks * CHUNK;
        // Two spare descriptors up front, so that splitting cannot fail half-way.
        let head_desc = self.extent_desc(inner)?;
        let Some(tail_desc) = self.extent_desc(inner) else {
            self.extent_recycle(inner, head_desc);
            return None;
        };
        for dirty in [true, false] {
            for b in free_bucket(n)..NFREE_BUCKETS {
                let mut e = *Self::free_list(inner, dirty, b_first(b));
                while !e.is_null() {
                    // SAFETY: filed extents are live.
                    let (addr, len) = unsafe { ((*e).addr, (*e).nchunks * CHUNK) };
                    let start = (addr + align - 1) & !(align - 1);
                    if start + n * CHUNK <= addr + len {
                        self.free_unfile(inner, e);
                        let head = (start - addr) / CHUNK;
                        let tail = (addr + len - start) / CHUNK - n;
                        // SAFETY: e is ours now; the spare descriptors are unused.
                        unsafe {
                            if head > 0 {
                                self.split_off(inner, e, head_desc, addr, head);
                            } else {
                                self.extent_recycle(inner, head_desc);
                            }
                            if tail > 0 {
                                self.split_off(inner, e, tail_desc, start + n * CHUNK, tail);
                            } else {
                                self.extent_recycle(inner, tail_desc);
                            }
                            (*e).addr = start;
                            (*e).nchunks = n;
                        }
                        return Some((e, dirty));
                    }
                    // SAFETY: as above.
                    e = unsafe { (*e).next };
                }
            }
        }
        self.extent_recycle(inner, tail_desc);
        // Fresh chunks from the source.
        let mut leftover = (0, 0);
        let p = crate::chunk::SOURCE.take(n, align_chunks, &mut leftover);
        if leftover.1 > 0 && PAGEMAP.prepare(leftover.0, leftover.1) {
            // SAFETY: head_desc is a spare descriptor; the leftover chunks are fresh and ours.
            unsafe {
                let l = &mut *head_desc;
                l.addr = leftover.0;
                l.nchunks = leftover.1;
                l.state = STATE_FREE;
                l.dirty = false;
                l.muzzy = false;
                PAGEMAP.set(l.addr, l.nchunks, head_desc as usize | TAG_EXTENT);
            }
            inner.stats.chunks += leftover.1 as u64;
            self.extent_free(inner, head_desc);
        } else {
            self.extent_recycle(inner, head_desc);
        }
        if p.is_null() {
            return None;
        }
        if !PAGEMAP.prepare(p as usize, n) {
            os::unmap(p, n * CHUNK);
            return None;
        }
        let e = self.extent_desc(inner)?;
        // SAFETY: e is a fresh descriptor for the fresh chunks.
        unsafe {
            (*e).addr = p as usize;
            (*e).nchunks = n;
            (*e).state = STATE_FREE;
            PAGEMAP.set(p as usize, n, e as usize | TAG_EXTENT);
        }
        inner.stats.chunks += n as u64;
        Some((e, false))
    }

    /// Splits `[addr, addr + n chunks)` off free extent `e` into descriptor `d` and files it.
    ///
    /// # Safety
    /// `d` is a spare descriptor; the range is part of `e`, which is unfiled.
    unsafe fn split_off(
        &self,
        inner: &mut ArenaInner,
        e: *mut Extent,
        d: *mut Extent,
        addr: usize,
        n: usize,
    ) {
        // SAFETY: per the contract.
        unsafe {
            let dr = &mut *d;
            dr.addr = addr;
            dr.nchunks = n;
            dr.state = STATE_FREE;
            dr.dirty = (*e).dirty;
            dr.muzzy = (*e).muzzy;
            dr.advice = (*e).advice;
            dr.dirty_since_ms = (*e).dirty_since_ms;
        }
        PAGEMAP.set(addr, n, d as usize | TAG_EXTENT);
        self.free_file(inner, d);
    }

    /// Applies THP advice `want` to extent `e`'s chunks, unless its chunks already behave so.
    fn advise(&self, inner: &mut ArenaInner, e: *mut Extent, want: ChunkAdvice) {
        // SAFETY: e is a live extent of this arena, guarded by the arena lock.
        let er = unsafe { &mut *e };
        let have = er.advice;
        let huge_by_default = system_mode() == SystemMode::Always;
        let target = match want {
            ChunkAdvice::Huge => ADVICE_HUGE,
            ChunkAdvice::NoHuge => ADVICE_NOHUGE,
            // No advice wanted: only undo advice that makes the chunks behave otherwise than
            // the system default would.
            ChunkAdvice::None => match have {
                ADVICE_HUGE if !huge_by_default => ADVICE_NOHUGE,
                ADVICE_NOHUGE if huge_by_default => ADVICE_HUGE,
                ADVICE_MIXED => {
                    if huge_by_default {
                        ADVICE_HUGE
                    } else {
                        ADVICE_NOHUGE
                    }
                }
                _ => return,
            },
        };
        if have == target {
            return;
        }
        let kind = if target == ADVICE_HUGE {
            ChunkAdvice::Huge
        } else {
            ChunkAdvice::NoHuge
        };
        self.advise_range(inner, er.addr, er.nchunks, kind);
        er.advice = target;
    }

    fn advise_range(&self, inner: &mut ArenaInner, addr: usize, n: usize, kind: ChunkAdvice) {
        let (advice, counter) = match kind {
            ChunkAdvice::Huge => (os::Advice::Huge, &mut inner.stats.advised_huge_bytes),
            ChunkAdvice::NoHuge => (os::Advice::NoHuge, &mut inner.stats.advised_nohuge_bytes),
            ChunkAdvice::None => return,
        };
        if os::advise(addr as *mut u8, n * CHUNK, advice) {
            *counter += (n * CHUNK) as u64;
        }
    }

    // ---- purging ---------------------------------------------------------------------------

    /// Decay, driven by allocation activity (and the background thread): at most every tenth
    /// of the decay time, purge the dirty free extents dirty for longer than `dirty_decay_ms`,
    /// and the free pages of page chunks dirty that long which no huge page backs. A
    /// huge-backed chunk is purged in part (split) only when `dirty_max` demands it.
    fn maybe_decay(&self, inner: &mut ArenaInner) {
        let decay = self.decay_raw();
        // Relaxed: see set_purge_globals.
        let limit = DIRTY_MAX.load(Ordering::Relaxed);
        if decay == u64::MAX && limit == 0 {
            return;
        }
        let now = os::now_ms();
        let every = if decay == u64::MAX { 100 } else { decay / 10 };
        if now.saturating_sub(inner.last_decay_ms) < every {
            return;
        }
        inner.last_decay_ms = now;
        let mut purged = 0;
        if decay != u64::MAX {
            // Whole free chunks first: purging them splits nothing. With a muzzy stage, dirty
            // extents get `MADV_FREE` first and `MADV_DONTNEED` once muzzy for its time.
            // Relaxed: see set_muzzy_decay_ms.
            let muzzy_decay = MUZZY_DECAY_MS.load(Ordering::Relaxed);
            for b in 0..NFREE_BUCKETS {
                let mut e = inner.free_dirty[b];
                while !e.is_null() {
                    // SAFETY: filed extents are live; `next` is read before e is refiled.
                    let (next, since, muzzy) =
                        unsafe { ((*e).next, (*e).dirty_since_ms, (*e).muzzy) };
                    let age = now.saturating_sub(since);
                    if muzzy {
                        if muzzy_decay != u64::MAX && age >= muzzy_decay {
                            purged += self.purge_extent(inner, e);
                        }
                    } else if age >= decay {
                        if muzzy_decay == 0 {
                            purged += self.purge_extent(inner, e);
                        } else {
                            // It may merge with muzzy neighbours, `next` among them: walk
                            // this list again (it now holds one more muzzy extent).
                            self.lazy_purge_extent(inner, e, now);
                            e = inner.free_dirty[b];
                            continue;
                        }
                    }
                    e = next;
                }
            }
            // Then the free pages of chunks dirty for the decay time, where no huge page backs
            // them (purging those costs nothing but the page faults of reuse). Pages freed
            // since the chunk's oldest go with them, a little early.
            purged += self.purge_page_chunks(inner, usize::MAX, |pc| {
                // SAFETY: pc is a live filed page chunk.
                let old = now.saturating_sub(unsafe { (*pc).dirty_since_ms }) >= decay;
                old && !Self::huge_backed(pc)
            });
        }
        if limit != 0 {
            purged += self.enforce_dirty_max(inner, limit);
        }
        inner.stats.purged_bytes += purged as u64;
    }

    /// Gives a dirty free extent `MADV_FREE` (muzzy from `now`); refiles it.
    fn lazy_purge_extent(&self, inner: &mut ArenaInner, e: *mut Extent, now: u64) {
        self.free_unfile(inner, e);
        // SAFETY: e is a live free extent of this arena, now unfiled.
        unsafe {
            os::advise((*e).addr as *mut u8, (*e).nchunks * CHUNK, os::Advice::Free);
            (*e).muzzy = true;
            (*e).dirty_since_ms = now;
        }
        self.extent_free(inner, e);
    }

    fn purge_extent(&self, inner: &mut ArenaInner, e: *mut Extent) -> usize {
        self.free_unfile(inner, e);
        // SAFETY: e is a live free extent of this arena, now unfiled.
        let len = unsafe {
            let len = (*e).nchunks * CHUNK;
            os::advise((*e).addr as *mut u8, len, os::Advice::DontNeed);
            (*e).dirty = false;
            (*e).muzzy = false;
            len
        };
        self.extent_free(inner, e);
        len
    }

    /// Returns the bins' kept empty slabs, then purges every dirty free extent
    /// (`MADV_DONTNEED`), making it clean. Returns bytes purged.
    pub fn purge_all(&self) -> usize {
        for bin in &self.bins {
            bin.lock().drain_empty(|s| self.slab_release(s));
        }
        let mut inner = self.inner.lock();
        let mut purged = 0;
        for b in 0..NFREE_BUCKETS {
            loop {
                let e = inner.free_dirty[b];
                if e.is_null() {
                    break;
                }
                purged += self.purge_extent(&mut inner, e);
            }
        }
        inner.stats.purged_bytes += purged as u64;
        purged
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
        snap.dirty_page_bytes = Self::dirty_page_bytes(&inner) as u64;
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

/// Bytes of arena `index`'s chunks backed by huge pages now: `AnonHugePages` of the mappings
/// in `/proc/self/smaps` holding its chunks. A mapping holding chunks of several arenas has its
/// figure shared in proportion to their chunk counts (advice usually splits mappings along
/// extents, so this is mostly exact). Reads the file: call it on request, not on a hot path.
pub fn huge_backed_bytes(index: u32) -> u64 {
    let mut total = 0u64;
    let (mut mine, mut known) = (0u64, 0u64);
    crate::os::for_each_line(b"/proc/self/smaps\0", |line| {
        if let Some((start, end)) = smaps_range(line) {
            (mine, known) = (0, 0);
            let mut addr = (start + CHUNK - 1) & !(CHUNK - 1);
            while addr + CHUNK <= end {
                let entry = PAGEMAP.get(addr);
                // SAFETY: tagged entries point at live descriptors (a racing change of
                // owner only skews this estimate).
                let owner = unsafe {
                    match entry & TAG_MASK {
                        TAG_PAGES => Some((*((entry & !TAG_MASK) as *const PageChunk)).arena),
                        TAG_EXTENT => Some((*((entry & !TAG_MASK) as *const Extent)).arena),
                        _ => None,
                    }
                };
                if let Some(a) = owner {
                    known += 1;
                    mine += (a == index) as u64;
                }
                addr += CHUNK;
            }
        } else if let Some(rest) = line.strip_prefix(b"AnonHugePages:") {
            if mine > 0 {
                let kib = rest
                    .iter()
                    .filter(|c| c.is_ascii_digit())
                    .fold(0u64, |v, &c| v * 10 + (c - b'0') as u64);
                total += kib * 1024 * mine / known;
            }
        }
    });
    total
}

/// The address range of an smaps mapping header (`start-end perms ...`), else `None`.
fn smaps_range(line: &[u8]) -> Option<(usize, usize)> {
    let hex = |s: &[u8]| -> Option<usize> {
        if s.is_empty() || s.len() > 16 {
            return None;
        }
        s.iter().try_fold(0usize, |v, &c| {
            Some(v << 4 | (c as char).to_digit(16)? as usize)
        })
    };
    let space = line.iter().position(|&c| c == b' ')?;
    let dash = line[..space].iter().position(|&c| c == b'-')?;
    Some((hex(&line[..dash])?, hex(&line[dash + 1..space])?))
}

fn b_first(bucket: usize) -> usize {
    // A chunk count that files into `bucket` (the inverse of `free_bucket`).
    match bucket {
        0..16 => bucket + 1,
        16 => 17,
        _ => 1 << (bucket - 12),
    }
}

fn merge_advice(a: u8, b: u8) -> u8 {
    if a == b {
        a
    } else {
        ADVICE_MIXED
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_shrink_gives_back_its_tail() {
        // A private arena, so that tests running beside this one cannot take the tail.
        let idx = crate::thread::arena_create(Thp::Default).unwrap();
        let a = crate::thread::arena(idx);
        let (big, small) = (class_of(8 * CHUNK), class_of(2 * CHUNK));
        let p = a.huge_alloc(big, 8 * CHUNK, CHUNK, false);
        assert!(!p.is_null());
        let Owner::Huge { extent } = owner_of(p) else {
            panic!("not a huge block")
        };
        assert!(a.huge_resize(extent, small, 2 * CHUNK));
        // The freed tail is a free extent of its own in the pagemap...
        let entry = PAGEMAP.get(p as usize + 2 * CHUNK);
        assert_eq!(entry & TAG_MASK, TAG_EXTENT);
        assert_ne!(
            entry & !TAG_MASK,
            extent as usize,
            "the freed tail still names the live block"
        );
        // ...so the block grows back into it in place.
        assert!(a.huge_resize(extent, big, 8 * CHUNK));
        a.huge_free(extent);
    }

    #[test]
    fn free_buckets_invert() {
        for n in 1..100_000 {
            let b = free_bucket(n);
            assert!(b < NFREE_BUCKETS);
            assert_eq!(free_bucket(b_first(b)), b, "n {n}");
        }
    }
}
