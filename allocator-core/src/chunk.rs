//! Chunks: 2 MiB, 2 MiB-aligned pieces of address space, carved from larger reservations.
//!
//! An `Extent` describes a run of whole chunks owned by one arena: free (dirty or clean), a
//! huge block, or one chunk of pages (`PageChunk`). Every chunk of an extent has its pagemap
//! entry pointing at the extent (or, for a page chunk, at its `PageChunk`), so a pointer's
//! owner is always recoverable and a stale entry never outlives its descriptor.
//!
//! A `PageChunk` is a chunk cut into 512 pages: a free-page bitmap, a dirty-page bitmap (pages
//! touched since they were last known zero), and one `page_map` word per page saying which
//! slab or large run holds it.
//!
//! The global `ChunkSource` (lock rank 4) hands fresh chunks to arenas; only arenas in need of
//! new chunks touch it.

use crate::bitmap::{Bitmap, Fit};
use crate::list::linked;
use crate::os;
use crate::pagemap::{TAG_MASK, TAG_PAGES};
use crate::size_class::{CHUNK, CHUNK_PAGES, LG_CHUNK};
use crate::sync::{AtomicU64, ForkLock, Mutex, Ordering};

pub const STATE_FREE: u8 = 0;
pub const STATE_HUGE: u8 = 1;
pub const STATE_PAGES: u8 = 2;

/// Effective huge-page state of an extent's chunks: what the kernel was told last.
pub const ADVICE_NONE: u8 = 0;
pub const ADVICE_HUGE: u8 = 1;
pub const ADVICE_NOHUGE: u8 = 2;
pub const ADVICE_MIXED: u8 = 3;

/// `Extent::backing` of ordinary memory (`hugetlb::Backing::Ordinary`; every other value is
/// hugetlb pages). The only backing fact this layer needs, below `hugetlb`.
pub const BACKING_ORDINARY: u8 = 0;

#[repr(C)]
pub struct Extent {
    pub addr: usize,
    pub nchunks: usize,
    pub state: u8,
    /// Free extents: whether the pages were touched since last known zero.
    pub dirty: bool,
    /// Free dirty extents: already given `MADV_FREE` (muzzy: the kernel may reclaim them
    /// lazily; contents undefined, so still zeroed on reuse like dirty memory).
    pub muzzy: bool,
    pub advice: u8,
    /// Huge blocks: the size class.
    pub class: u8,
    /// Where the chunks come from: a `hugetlb::Backing` byte (0, ordinary memory, in a zeroed
    /// descriptor). Decides purging (hugetlb pages only whole) and merging.
    pub backing: u8,
    pub arena: u32,
    /// Free dirty extents: when they became dirty (decay), in ms.
    pub dirty_since_ms: u64,
    /// Huge blocks: the requested size (stats, realloc).
    pub size: usize,
    /// List links: size bucket list for free extents.
    pub next: *mut Extent,
    pub prev: *mut Extent,
    /// Page chunks: the page map.
    pub pages: *mut PageChunk,
}

linked!(Extent);

/// Page-map words (`PageChunk::page_map`): `0` free; a slab page is `slab_ptr | PAGE_SLAB`
/// (the class is the descriptor's, `Slab::class`, repeated in `PageChunk::page_class`); a
/// large run's first page `npages << 3 | PAGE_LARGE` with the size class in bits 56..64, its
/// other pages `offset << 3 | PAGE_INTERIOR`. A slab word is its descriptor's address plus
/// one, with nothing else in it, so `free` tests the kind and has the descriptor in one
/// subtraction and one test (`slab::slab_of_word`).
pub const PAGE_SLAB: u64 = 1;
pub const PAGE_LARGE: u64 = 2;
pub const PAGE_INTERIOR: u64 = 3;
pub const PAGE_KIND: u64 = 7;
pub const PAGE_CLASS_SHIFT: u32 = 56;
pub const PAGE_PAYLOAD: u64 = (1 << PAGE_CLASS_SHIFT) - 1;
/// Page-map word of a free page being purged (`PageChunk::purge_mark`): not free in the
/// chunk's bitmap, owned by no block, until `PageChunk::purge_unmark` gives it back.
pub const PAGE_PURGING: u64 = 4;

const _: () = assert!(PAGE_PURGING & !PAGE_KIND == 0 && PAGE_PURGING > PAGE_INTERIOR);

#[repr(C)]
pub struct PageChunk {
    pub addr: usize,
    pub extent: *mut Extent,
    pub arena: u32,
    pub nfree: u32,
    /// The longest run of free pages (the arena files chunks by it).
    pub longest: u32,
    /// Free pages that are dirty (touched): resident memory not in use.
    pub ndirty_free: u32,
    /// Set when free pages were purged while the chunk was huge-backed (the huge page was
    /// split); cleared when the chunk is collapsed again (`thp_collapse`).
    pub split: bool,
    /// When the oldest free dirty page still unpurged was freed (ms): the chunk's free pages
    /// are purged once that is older than the decay time.
    pub dirty_since_ms: u64,
    /// `check:full`: page runs taken or given back since the last page-map scan
    /// (`check_amortised`).
    pub ops_since_scan: u32,
    /// Bucket list links (arena's chunks by longest free run).
    pub next: *mut PageChunk,
    pub prev: *mut PageChunk,
    pub free: Bitmap<8>,
    pub dirty: Bitmap<8>,
    pub page_map: [u64; CHUNK_PAGES],
    /// Per page, where its page-map word names a slab: that slab's class (`Slab::class`),
    /// written with the word (`Arena::slab_install`); any value elsewhere. `free` reads it
    /// beside the word, so the cache bin it pushes on does not wait for the load of the slab
    /// descriptor: one load less on the path from a pointer to the bin, which the next
    /// `malloc` of the class depends on (docs/benchmarks.md, Session 14: cfrac -9%).
    pub page_class: [u8; CHUNK_PAGES],
}

linked!(PageChunk);

const _: () = assert!(Bitmap::<8>::BITS == CHUNK_PAGES);

impl PageChunk {
    /// The page index of `addr` inside this chunk.
    #[inline(always)]
    pub fn page_of(&self, addr: usize) -> usize {
        (addr - self.addr) >> os::LG_PAGE
    }

    /// Marks pages `start..start+n` used and touched; returns whether any was already dirty
    /// (so zeroing must write). Taking from a longest run rescans the map for the new longest
    /// run (`take_fit` needs no scan).
    pub fn take_pages(&mut self, start: usize, n: usize) -> bool {
        debug_assert!(self.free.all_set(start, n));
        // Only taking from a longest run can shorten the longest run.
        let from_longest = self.free.run_len_at(start) == self.longest as usize;
        let dirty = self.take_marked(start, n, self.longest as usize);
        if from_longest {
            self.longest = self.free.longest_run() as u32;
        }
        dirty
    }

    /// `take_pages` of the `n` pages at `fit.start`, a fit `free.find_fit(n, ..)` returned
    /// (with nothing changed since): the longest free run after it is the longest of the other
    /// runs and the two pieces left of the fit's run, with no scan of the map.
    pub fn take_fit(&mut self, fit: Fit, n: usize) -> bool {
        debug_assert!(fit.run_start <= fit.start && fit.start + n <= fit.run_end);
        debug_assert_eq!(self.free.run_len_at(fit.start), fit.run_end - fit.run_start);
        let left = fit.start - fit.run_start;
        let right = fit.run_end - (fit.start + n);
        self.take_marked(fit.start, n, fit.others.max(left).max(right))
    }

    /// Marks the free pages `start..start+n` used and touched and sets the longest free run
    /// to `longest`; returns whether any page was dirty.
    #[inline]
    fn take_marked(&mut self, start: usize, n: usize, longest: usize) -> bool {
        // Free bits cleared, dirty bits set, in one pass; the dirty bits of free pages are
        // their own (a used page's is always set).
        let was_dirty = self.free.move_range_to(&mut self.dirty, start, n) as u32;
        self.nfree -= n as u32;
        self.ndirty_free -= was_dirty;
        self.longest = longest as u32;
        was_dirty != 0
    }

    /// Marks pages `start..start+n` free (and dirty) and clears their page-map words.
    pub fn give_pages(&mut self, start: usize, n: usize) {
        debug_assert!(!self.free.get(start));
        self.free.set_range(start, n);
        let Some(words) = self.page_map.get_mut(start..start.wrapping_add(n)) else {
            crate::diag::fatal_index(
                "a page run past its chunk (corrupt metadata)",
                start.wrapping_add(n),
                CHUNK_PAGES,
            )
        };
        for w in words {
            *w = 0;
        }
        self.nfree += n as u32;
        self.ndirty_free += n as u32;
        // Freeing only lengthens runs: the merged run is the only candidate.
        self.longest = self.longest.max(self.free.run_len_at(start) as u32);
    }

    /// Marks the free dirty pages `start..start+n` busy for a purge (`purge`'s first phase,
    /// under the arena lock): they leave the free pages as if allocated (their dirty bits stay
    /// set, so no allocation can take them and no neighbour merges with them) and their words
    /// become `PAGE_PURGING`. The caller recomputes `longest` once its marking is done.
    pub fn purge_mark(&mut self, start: usize, n: usize) {
        debug_assert!(self.free.all_set(start, n) && self.dirty.all_set(start, n));
        self.free.clear_range(start, n);
        for w in self.page_map.iter_mut().skip(start).take(n) {
            *w = PAGE_PURGING;
        }
        self.nfree -= n as u32;
        self.ndirty_free -= n as u32;
    }

    /// Gives back the busy pages `start..start+n` of `purge_mark`, now purged (`purge`'s last
    /// phase, under the arena lock): free and clean, merged with their free neighbours.
    pub fn purge_unmark(&mut self, start: usize, n: usize) {
        for w in self.page_map.iter_mut().skip(start).take(n) {
            debug_assert_eq!(*w, PAGE_PURGING);
            *w = 0;
        }
        self.free.set_range(start, n);
        self.dirty.clear_range(start, n);
        self.nfree += n as u32;
        self.longest = self.longest.max(self.free.run_len_at(start) as u32);
    }

    /// Purges every free dirty page (`MADV_DONTNEED`, run by run), leaving them clean; returns
    /// the pages purged. The pages in use are untouched. A chunk on a hugetlb page is never
    /// purged in part (it returns 0): the page goes back whole once the chunk is free.
    pub fn purge_free_dirty(&mut self) -> usize {
        // SAFETY: a live page chunk's extent is live (the arena lock guards both).
        if unsafe { (*self.extent).backing } != BACKING_ORDINARY {
            return 0;
        }
        let mut purged = 0;
        let mut i = 0;
        while let Some((start, n)) = self.free_dirty_run(i) {
            i = start + n;
            os::advise(
                (self.addr + start * os::PAGE) as *mut u8,
                n * os::PAGE,
                os::Advice::DontNeed,
            );
            self.dirty.clear_range(start, n);
            purged += n;
        }
        self.ndirty_free -= purged as u32;
        purged
    }

    /// The first run of pages both free and dirty at or after page `from`: its first page and
    /// length (what purging advises).
    pub fn free_dirty_run(&self, from: usize) -> Option<(usize, usize)> {
        let mut i = from;
        while i < CHUNK_PAGES && !(self.free.get(i) && self.dirty.get(i)) {
            i += 1;
        }
        let start = i;
        while i < CHUNK_PAGES && self.free.get(i) && self.dirty.get(i) {
            i += 1;
        }
        (i > start).then_some((start, i - start))
    }

    /// The checks of one page run taken or given back (`check:full`, debug and test builds):
    /// the counts and the longest run always (a few words of the bitmaps), the page-map words
    /// of the free pages once per `PAGE_SCAN_EVERY` operations on this chunk. That scan
    /// visits up to 512 pages; at every operation it was 15% of `sh6bench`'s time under
    /// `check:full` even a word at a time.
    pub fn check_amortised(&mut self) {
        if !crate::diag::full_checks() {
            return;
        }
        self.ops_since_scan += 1;
        let scan = self.ops_since_scan >= PAGE_SCAN_EVERY;
        if scan {
            self.ops_since_scan = 0;
        }
        self.check_counts(scan);
    }

    /// Invariant scan (debug and test builds, `check:full`): everything, the page map too.
    pub fn check(&self) {
        if crate::diag::full_checks() {
            self.check_counts(true);
        }
    }

    /// The counts, the longest run and the dirty free count against the bitmaps; with
    /// `page_map`, also that no free page has a page-map word.
    fn check_counts(&self, page_map: bool) {
        use crate::diag::invariant;
        invariant(
            self.free.count() == self.nfree as usize,
            "a page chunk's free count disagrees with its bitmap",
        );
        invariant(
            self.free.longest_run() == self.longest as usize,
            "a page chunk's longest free run is stale",
        );
        // A word of the bitmaps at a time, visiting only the free pages: a page at a time this
        // scan was a fifth of `sh6bench`'s time under `check:full` (it runs at every page run
        // taken or given back).
        let mut dirty_free = 0;
        let mut owned = 0u64;
        let words = self.free.words().iter().zip(self.dirty.words());
        for (w, (&free, &dirty)) in words.enumerate() {
            dirty_free += (free & dirty).count_ones();
            let mut bits = if page_map { free } else { 0 };
            while bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                owned |= self.page_map.get(i).copied().unwrap_or(0);
                bits &= bits - 1;
            }
        }
        invariant(owned == 0, "a free page has a page-map word");
        invariant(
            dirty_free == self.ndirty_free,
            "a page chunk's dirty free count is wrong",
        );
    }
}

/// The page chunk a pagemap entry names, when it is a `TAG_PAGES` entry; `None` for any
/// other. The entry less `TAG_PAGES` has its tag bits clear only for a page chunk's (0 and an
/// extent's leave some set): one subtraction and one test, and the pointer needs no mask
/// (`free`'s lookup; docs/benchmarks.md, Session 13).
#[inline(always)]
pub fn page_chunk_of_entry(entry: usize) -> Option<*const PageChunk> {
    crate::bits::untag(entry as u64, TAG_PAGES as u64, TAG_MASK as u64)
        .map(|pc| pc as usize as *const PageChunk)
}

/// Under `check:full`, the page runs taken or given back in a page chunk between two scans
/// of its page map (`PageChunk::check_amortised`).
pub const PAGE_SCAN_EVERY: u32 = 16;

/// A reservation being carved into chunks.
struct SourceInner {
    next: usize,
    end: usize,
    /// The size of the next reservation (grows to `MAX_RESERVE`).
    reserve: usize,
}

pub struct ChunkSource {
    inner: Mutex<SourceInner>,
    /// Bytes of address space reserved from the OS.
    pub reserved_bytes: AtomicU64,
}

const MIN_RESERVE: usize = 16 * CHUNK;
const MAX_RESERVE: usize = 512 * CHUNK;

impl ChunkSource {
    crate::sync::const_unless_loom! {
        pub fn new() -> ChunkSource {
            ChunkSource {
                inner: Mutex::new(SourceInner {
                    next: 0,
                    end: 0,
                    reserve: MIN_RESERVE,
                }),
                reserved_bytes: AtomicU64::new(0),
            }
        }
    }

    /// Takes `n` fresh (zero, never touched) chunks aligned to `align_chunks` chunks. When the
    /// current reservation is too small, its leftover is returned as `(addr, nchunks)` in
    /// `leftover` for the caller to keep as free clean chunks. Null on out of memory.
    pub fn take(&self, n: usize, align_chunks: usize, leftover: &mut (usize, usize)) -> *mut u8 {
        let align = align_chunks << LG_CHUNK;
        let Some(len) = n.checked_mul(CHUNK) else {
            return core::ptr::null_mut();
        };
        let mut g = self.inner.lock();
        let start = (g.next + align - 1) & !(align - 1);
        if g.next != 0 && start >= g.next && start.checked_add(len).is_some_and(|e| e <= g.end) {
            if start != g.next {
                *leftover = (g.next, (start - g.next) >> LG_CHUNK);
            }
            g.next = start + len;
            return start as *mut u8;
        }
        // A new reservation: big enough for the request, growing geometrically.
        let want = g.reserve.max(len);
        let mut p = os::map_aligned(want, align.max(CHUNK));
        let mut got = want;
        if p.is_null() && want > len {
            p = os::map_aligned(len, align.max(CHUNK));
            got = len;
        }
        if p.is_null() {
            return p;
        }
        // Relaxed: a statistic.
        self.reserved_bytes.fetch_add(got as u64, Ordering::Relaxed);
        if g.reserve < MAX_RESERVE && got == want {
            g.reserve *= 2;
        }
        if got > len {
            if g.end > g.next {
                *leftover = (g.next, (g.end - g.next) >> LG_CHUNK);
            }
            g.next = p as usize + len;
            g.end = p as usize + got;
        }
        p
    }

    /// Takes the `n` fresh chunks at `addr` if they are the next ones the current reservation
    /// would hand out (`addr` is the end of chunks taken earlier); false otherwise.
    pub fn take_at(&self, addr: usize, n: usize) -> bool {
        let mut g = self.inner.lock();
        let fits = n
            .checked_mul(CHUNK)
            .and_then(|len| addr.checked_add(len))
            .is_some_and(|end| end <= g.end);
        if g.next == 0 || g.next != addr || !fits {
            return false;
        }
        g.next = addr + n * CHUNK;
        true
    }

    /// The lock `fork` handlers take (rank 4).
    pub fn fork_lock(&self) -> &dyn ForkLock {
        &self.inner
    }
}

#[cfg(not(loom))]
impl Default for ChunkSource {
    fn default() -> ChunkSource {
        ChunkSource::new()
    }
}

#[cfg(not(loom))]
pub static SOURCE: ChunkSource = ChunkSource::new();

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_aligned_and_fresh() {
        static S: ChunkSource = ChunkSource::new();
        let mut left = (0, 0);
        let a = S.take(1, 1, &mut left);
        let b = S.take(3, 1, &mut left);
        let c = S.take(2, 4, &mut left);
        for p in [a, b, c] {
            assert!(!p.is_null());
            assert_eq!(p as usize % CHUNK, 0);
        }
        assert_eq!(c as usize % (4 * CHUNK), 0);
        assert_ne!(a, b);
        // SAFETY: b is 3 fresh chunks.
        let s = unsafe { core::slice::from_raw_parts(b, 3 * CHUNK) };
        assert!(s.iter().all(|&x| x == 0));
        let huge = S.take(600, 1, &mut left);
        assert!(!huge.is_null());
        assert_eq!(huge as usize % CHUNK, 0);
    }

    /// `page_chunk_of_entry` names the page chunk of a `TAG_PAGES` entry and nothing for an
    /// empty entry, an extent's, or any other tag: `free` trusts it with no other test.
    #[test]
    fn only_a_pages_entry_names_a_page_chunk() {
        use crate::pagemap::TAG_EXTENT;
        assert_eq!(page_chunk_of_entry(0), None);
        for pc in [0x1000usize, 0x7fff_ffff_f000, 0x4_0040] {
            let got = page_chunk_of_entry(pc | TAG_PAGES);
            assert_eq!(got, Some(pc as *const PageChunk));
            assert_eq!(page_chunk_of_entry(pc | TAG_EXTENT), None);
            for tag in 0..8 {
                assert_eq!(page_chunk_of_entry(pc | tag).is_some(), tag == TAG_PAGES);
            }
        }
    }
}
