//! The state of one arena that its lock (rank 3) guards, and its counters. The arena layer's
//! jobs (`extent`, `pages`, `purge`) are methods of `ArenaInner`, each in its own module, and
//! `arena` takes the lock and calls them; none of them takes a lock.
//!
//! Invariants: every chunk the arena owns is described by exactly one `Extent`; every page
//! chunk sits in exactly one `chunk_buckets` list, the one of its longest free run (and its bit
//! of `chunk_nonempty` is set); every free extent sits in exactly one free list of its
//! dirtiness (`free_dirty` holds dirty and muzzy ones, `free_clean` the rest), bucketed by
//! chunk count (`extent::free_bucket`). An extent or page run being purged (busy, see `purge`)
//! is on no list and counted in `purging_bytes` alone.

use crate::bin::counters;
use crate::bitmap::Bitmap;
use crate::chunk::{Extent, PageChunk};
use crate::config::Hugetlb;
use crate::size_class::CHUNK_PAGES;
use crate::slab::Slab;
use core::ptr::null_mut;

/// Free-extent lists per dirtiness: one per chunk count up to 16, then one per doubling.
pub const NFREE_BUCKETS: usize = 64;
const _: () = assert!(NFREE_BUCKETS.is_power_of_two());

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
    /// Recycled slab descriptors (linked through `next`), at most `SPARE_SLABS_MAX`, and
    /// their count: a slab's creation and release take no lock shared by all arenas.
    pub(crate) spare_slabs: *mut Slab,
    pub(crate) nspare_slabs: u32,
    /// Slab descriptors this arena took from the base (a test proves the recycling with it).
    pub(crate) slab_descs_from_base: u64,
    /// Page chunks with every page free (one is kept to avoid churn).
    pub(crate) empty_chunks: usize,
    /// The page source new chunks come from (`hugetlb_extent`): ordinary memory or a hugetlb
    /// pool. Changed only while the arena holds no chunk.
    pub(crate) hugetlb: Hugetlb,
    /// The most active bytes (huge blocks, slabs and page runs) seen at a huge allocation:
    /// the growth rule (`purge::growth_limit`) bounds the footprint against it.
    pub(crate) active_max: usize,
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
            spare_slabs: null_mut(),
            nspare_slabs: 0,
            slab_descs_from_base: 0,
            empty_chunks: 0,
            hugetlb: Hugetlb::Off,
            active_max: 0,
            stats: ArenaStats::default(),
        }
    }
}

/// The counters and figures of one arena (`stats.arenas.<i>.*`; jemalloc's names where the
/// meaning matches), one row each (the forms are `bin::counters!`'s):
/// `arena_figures!(then! { header })` hands them to `then!`. The figure rows are in the order
/// `ctl` and the printing list them; the counters no figure shows as they are come last.
macro_rules! arena_figures {
    ($then:ident! { $($head:tt)* }) => {
        $then! { $($head)* {
            figure nthreads "nthreads" Unsigned Main sum, "threads bound to the arena";
            figure pactive "pactive" Size Main sum,
                "pages in active slabs, page runs and huge blocks";
            figure pdirty "pdirty" Size Main sum, "freed pages kept dirty (resident) for reuse";
            figure pmuzzy "pmuzzy" Size Main sum,
                "freed pages given MADV_FREE and not yet purged (muzzy_decay_ms)";
            figure mapped "mapped" Size Main sum, "bytes of chunks the arena took (all states)";
            count clean_extent_bytes as retained "retained" Size Main sum,
                "bytes of free chunks kept clean (purged or never touched) for reuse";
            count chunks "chunks" Size Main sum, "chunks the arena took (2 MiB each)";
            count page_chunks "page_chunks" Size Main sum,
                "chunks holding slabs and large page runs";
            count purged_bytes "purged_bytes" U64 Main sum, "bytes purged (MADV_DONTNEED) so far";
            figure small_allocated "small.allocated" Size Main sum,
                "bytes in small blocks handed out (thread-cached ones included)";
            figure small_nmalloc "small.nmalloc" U64 Main sum,
                "small blocks handed out by the bins (to thread caches in batches)";
            figure small_ndalloc "small.ndalloc" U64 Main sum, "small blocks returned to the bins";
            count slabs_moved as small_slabs_moved "small.slabs_moved" U64 Main sum,
                "empty slabs a bin kept and another bin of the same page count took";
            count large_allocated "large.allocated" Size Large sum,
                "bytes in large blocks (page runs)";
            count large_nmalloc "large.nmalloc" U64 Large sum,
                "large blocks allocated from the arena";
            count large_nfree as large_ndalloc "large.ndalloc" U64 Large sum,
                "large blocks freed to the arena";
            count huge_allocated "huge.allocated" Size Large sum,
                "bytes in huge blocks (runs of whole chunks)";
            count huge_nmalloc "huge.nmalloc" U64 Large sum, "huge blocks allocated";
            count huge_nfree as huge_ndalloc "huge.ndalloc" U64 Large sum, "huge blocks freed";
            count huge_extended "huge.extended" U64 Large sum,
                "huge blocks placed on a dirty free run extended by the clean chunks after it";
            count growth_purged as huge_growth_purged "huge.growth_purged" U64 Large sum,
                "bytes of dirty free chunks purged as a huge block took clean ones (dirty_growth_pct)";
            count advised_huge_bytes as thp_huge_advised "thp.huge_advised" Size Thp sum,
                "bytes of chunks advised MADV_HUGEPAGE (hg in smaps), counted at each advice";
            count advised_nohuge_bytes as thp_nohuge_advised "thp.nohuge_advised" Size Thp sum,
                "bytes of chunks advised MADV_NOHUGEPAGE (nh in smaps), counted at each advice";
            count subreleased_bytes as thp_subreleased "thp.subreleased" U64 Thp sum,
                "bytes purged from huge-backed chunks (splitting their huge page) under dirty_max";
            count collapsed_bytes as thp_collapsed "thp.collapsed" U64 Thp sum,
                "bytes of split chunks collapsed into huge pages again (thp_collapse)";
            count collapse_queued as thp_collapse_queued "thp.collapse.queued" U64 Thp sum,
                "thp:defer: blocks queued for a deferred collapse";
            count collapse_dropped as thp_collapse_dropped "thp.collapse.dropped" U64 Thp sum,
                "thp:defer: blocks not queued, the queue being full (they keep small pages)";
            count collapse_attempted as thp_collapse_attempted "thp.collapse.attempted" U64 Thp sum,
                "thp:defer: MADV_COLLAPSE calls by the background thread (a chunk tried again counts each time)";
            count collapse_done as thp_collapse_done "thp.collapse.done" U64 Thp sum,
                "thp:defer: chunks collapsed into huge pages";
            count collapse_skipped as thp_collapse_skipped "thp.collapse.skipped" U64 Thp sum,
                "thp:defer: chunks skipped, their block freed before their turn";
            count collapse_failed as thp_collapse_failed "thp.collapse.failed" U64 Thp sum,
                "thp:defer: chunks MADV_COLLAPSE refused for good (left on small pages)";
            count collapse_retried as thp_collapse_retried "thp.collapse.retried" U64 Thp sum,
                "thp:defer: transient MADV_COLLAPSE refusals (EAGAIN, ENOMEM), the chunk tried again 500 ms later";
            count collapse_fallback as thp_collapse_fallback "thp.collapse.fallback" U64 Thp sum,
                "thp:defer: chunks given MADV_HUGEPAGE for khugepaged (no MADV_COLLAPSE here)";
            count collapse_cold as thp_collapse_cold "thp.collapse.cold" U64 Thp sum,
                "thp:defer: chunks never fully touched in time, left on small pages";
            count hugetlb_bytes as hugetlb_mapped "hugetlb.mapped" Size Thp sum,
                "bytes of hugetlb chunks the arena holds (explicit huge pages, reserve included)";
            figure hugetlb_active "hugetlb.active" Size Thp sum,
                "of those, bytes in use (huge blocks and page chunks)";
            count hugetlb_reserve_bytes as hugetlb_reserved "hugetlb.reserved" Size Thp sum,
                "of those, bytes of hugetlb_reserve chunks";
            count hugetlb_fallbacks "hugetlb.fallbacks" U64 Thp sum,
                "requests for hugetlb chunks served from ordinary memory (pool empty, short or absent)";
            count hugetlb_returned_bytes as hugetlb_returned "hugetlb.returned" U64 Thp sum,
                "hugetlb bytes given back whole (pages to the pool, reserve chunks to the reserve)";
            figure lock_waits "lock_waits" U64 Mutex sum, "times the arena lock was found held";
            count huge_active, "bytes of the chunks of live huge blocks";
            count active_pages, "pages in use by slabs and large runs";
            count dirty_extent_bytes, "bytes of free extents kept dirty";
            count muzzy_extent_bytes,
                "bytes of free extents given MADV_FREE and not yet MADV_DONTNEED (muzzy_decay_ms)";
            count purging_bytes,
                "bytes of free runs being purged (busy, see `purge`): in none of dirty, muzzy, clean";
            count hugetlb_free_bytes, "of `hugetlb_bytes`, bytes in free extents";
        } }
    };
}
pub(crate) use arena_figures;

arena_figures!(counters! {
    /// Counters of one arena's page runs, huge blocks and chunks, from [`arena_figures!`].
    ArenaStats
});
