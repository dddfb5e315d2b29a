//! The state of one arena that its lock (rank 3) guards, and its counters. The arena layer's
//! jobs (`extent`, `pages`, `purge`) are methods of `ArenaInner`, each in its own module, and
//! `arena` takes the lock and calls them; none of them takes a lock.
//!
//! Invariants: every chunk the arena owns is described by exactly one `Extent`; every page
//! chunk sits in exactly one `chunk_buckets` list, the one of its longest free run (and its bit
//! of `chunk_nonempty` is set); every free extent sits in exactly one free list of its
//! dirtiness (`free_dirty` holds dirty and muzzy ones, `free_clean` the rest), bucketed by
//! chunk count (`extent::free_bucket`).

use crate::bitmap::Bitmap;
use crate::chunk::{Extent, PageChunk};
use crate::config::Hugetlb;
use crate::size_class::CHUNK_PAGES;
use core::ptr::null_mut;

/// Free-extent lists per dirtiness: one per chunk count up to 16, then one per doubling.
pub const NFREE_BUCKETS: usize = 64;

pub struct ArenaInner {
    /// The arena's index (descriptors carry it so a pointer's arena is found from them).
    pub(crate) index: u32,
    /// Page chunks by longest free run (0..=512 pages).
    pub(crate) chunk_buckets: [*mut PageChunk; CHUNK_PAGES + 1],
    pub(crate) chunk_nonempty: Bitmap<9>,
    /// Free extents, dirty and clean, bucketed by chunk count.
    pub(crate) free_dirty: [*mut Extent; NFREE_BUCKETS],
    pub(crate) free_clean: [*mut Extent; NFREE_BUCKETS],
    /// Recycled extent descriptors.
    pub(crate) spare_extents: *mut Extent,
    /// When the last decay pass ran (ms).
    pub(crate) last_decay_ms: u64,
    /// Page chunks with every page free (one is kept to avoid churn).
    pub(crate) empty_chunks: usize,
    /// The page source new chunks come from (`hugetlb_extent`): ordinary memory or a hugetlb
    /// pool. Changed only while the arena holds no chunk.
    pub(crate) hugetlb: Hugetlb,
    pub stats: ArenaStats,
}

// SAFETY: the raw pointers are only used under the arena lock.
unsafe impl Send for ArenaInner {}

impl ArenaInner {
    /// The empty state of arena `index`.
    pub fn new(index: u32) -> ArenaInner {
        ArenaInner {
            index,
            chunk_buckets: [null_mut(); CHUNK_PAGES + 1],
            chunk_nonempty: Bitmap::new(),
            free_dirty: [null_mut(); NFREE_BUCKETS],
            free_clean: [null_mut(); NFREE_BUCKETS],
            spare_extents: null_mut(),
            last_decay_ms: 0,
            empty_chunks: 0,
            hugetlb: Hugetlb::Off,
            stats: ArenaStats::default(),
        }
    }
}

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
    /// Bytes of hugetlb chunks the arena holds (fresh pages and reserve chunks, all states).
    pub hugetlb_bytes: u64,
    /// Of those, bytes in free extents.
    pub hugetlb_free_bytes: u64,
    /// Of `hugetlb_bytes`, bytes of reserve chunks (`hugetlb_reserve`).
    pub hugetlb_reserve_bytes: u64,
    /// Requests for hugetlb chunks this arena had served from ordinary memory.
    pub hugetlb_fallbacks: u64,
    /// Hugetlb bytes given back (fresh pages to the pool, reserve chunks to the reserve).
    pub hugetlb_returned_bytes: u64,
}
