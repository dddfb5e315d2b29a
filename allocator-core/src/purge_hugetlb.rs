//! Purging of an arena's hugetlb chunks (issue 14): a hugetlb page cannot be returned in part
//! (`MADV_DONTNEED` on part of one does nothing useful, on a whole one it drops the page and
//! the next touch needs another from the pool), so where `purge`'s choose phase meets a free
//! extent of hugetlb chunks, it calls [`ArenaInner::choose_hugetlb`] instead of marking the
//! extent busy for `madvise`:
//! - the whole pages inside the extent leave the arena's lists and its pagemap entries (a
//!   stale `free` into them aborts) and `purge` adds them to its batch as a busy
//!   `PurgeRun::Hugetlb` run,
//!   counted in `purging_bytes`; the advise phase, with no lock held, gives them back
//!   (`HugetlbSource::give_back`: fresh pages `munmap`ped to the pool, reserve chunks back to
//!   the reserve, which keeps them mapped for the next taker and never returns them to the
//!   pool); the return phase only settles the counters;
//! - what is left (the free chunks of a 1 GiB page still partly in use) is *kept*: filed clean
//!   with `muzzy` set, meaning "touched, zero it before reuse, not dirty": it no longer counts
//!   against `dirty_max` and decay passes over it, until the page's last chunk in use is freed
//!   and the page gathers into one dirty extent again (`hugetlb::may_merge`).
//!
//! Hugetlb memory never gets `MADV_DONTNEED` or `MADV_FREE`: page chunks on hugetlb pages are
//! never chosen page by page (`on_hugetlb`); an empty one goes back to the free extents and
//! from there as above. Runs under the arena lock.

use crate::arena_state::ArenaInner;
use crate::chunk::{Extent, PageChunk, BACKING_ORDINARY, STATE_FREE};
use crate::hugetlb::{Backing, Chunks, HUGETLB};
use crate::pagemap::{PAGEMAP, TAG_EXTENT};
use crate::size_class::{CHUNK, LG_CHUNK};

/// What [`ArenaInner::choose_hugetlb`] did with an extent.
pub(crate) enum HugetlbChoice {
    /// No whole page in it: kept (off the dirty lists).
    Kept,
    /// Whole pages in it but the batch has no room: left as it was.
    Full,
    /// `[addr, addr + len)`, whole pages, is busy: off every list and out of the pagemap,
    /// counted in `purging_bytes`; the caller adds it to its batch. The rest is kept.
    Pages { addr: usize, len: usize },
}

impl ArenaInner {
    /// Whether page chunk `pc` lies on a hugetlb page (never purged in part).
    pub(crate) fn on_hugetlb(pc: *mut PageChunk) -> bool {
        // SAFETY: pc is a live page chunk of this arena (lock held); its extent is live.
        unsafe { (*(*pc).extent).backing != BACKING_ORDINARY }
    }

    /// The choose phase for `e`, a free dirty extent filed in this arena whose chunks are
    /// hugetlb memory: the whole pages inside it become busy (when `room`: the batch can take
    /// one more run), the rest is kept (see the module doc).
    pub(crate) fn choose_hugetlb(&mut self, e: *mut Extent, room: bool) -> HugetlbChoice {
        // SAFETY: e is a live free extent of this arena (lock held).
        let (addr, n, backing) = unsafe { ((*e).addr, (*e).nchunks, (*e).backing) };
        let backing = Backing::from_u8(backing);
        debug_assert!(backing.is_hugetlb());
        let end = addr + n * CHUNK;
        // Reserve chunks go back one by one; fresh pages whole.
        let unit = if backing.is_reserve() {
            CHUNK
        } else {
            backing.page_chunks() << LG_CHUNK
        };
        let lo = addr.next_multiple_of(unit);
        let hi = end & !(unit - 1);
        if lo >= hi {
            self.free_unfile(e);
            self.hugetlb_keep(e);
            return HugetlbChoice::Kept;
        }
        if !room {
            return HugetlbChoice::Full;
        }
        self.free_unfile(e);
        // Descriptors for the pieces outside [lo, hi) first, so nothing fails half-way.
        let head = if lo > addr { self.extent_desc() } else { None };
        let tail = if hi < end { self.extent_desc() } else { None };
        if (lo > addr && head.is_none()) || (hi < end && tail.is_none()) {
            for d in [head, tail].into_iter().flatten() {
                self.extent_recycle(d);
            }
            self.hugetlb_keep(e);
            return HugetlbChoice::Kept;
        }
        for (d, from, to) in [(head, addr, lo), (tail, hi, end)] {
            if let Some(d) = d {
                // SAFETY: d is a spare descriptor; [from, to) is part of e, which is unfiled.
                unsafe {
                    let dr = &mut *d;
                    dr.addr = from;
                    dr.nchunks = (to - from) >> LG_CHUNK;
                    dr.state = STATE_FREE;
                    dr.backing = backing as u8;
                }
                PAGEMAP.set(from, (to - from) >> LG_CHUNK, d as usize | TAG_EXTENT);
            }
        }
        let k = (hi - lo) >> LG_CHUNK;
        // No pointer may find the chunks any more: a stale free of one aborts.
        PAGEMAP.set(lo, k, 0);
        self.extent_recycle(e);
        let bytes = (k << LG_CHUNK) as u64;
        let s = &mut self.stats;
        s.purging_bytes += bytes;
        s.hugetlb_bytes -= bytes;
        if backing.is_reserve() {
            s.hugetlb_reserve_bytes -= bytes;
        }
        s.hugetlb_returned_bytes += bytes;
        for d in [head, tail].into_iter().flatten() {
            self.hugetlb_keep(d);
        }
        HugetlbChoice::Pages {
            addr: lo,
            len: hi - lo,
        }
    }

    /// The return phase of a hugetlb run of `len` bytes (given back in the advise phase; the
    /// caller took it out of `purging_bytes`): the chunks have left the arena.
    pub(crate) fn return_hugetlb(&mut self, len: usize) {
        self.stats.chunks -= (len >> LG_CHUNK) as u64;
    }

    /// Files `e`, unfiled, as kept: touched, not dirty (see the module doc).
    fn hugetlb_keep(&mut self, e: *mut Extent) {
        // SAFETY: e is a live unfiled free extent of this arena (lock held).
        unsafe {
            (*e).dirty = false;
            (*e).muzzy = true;
        }
        self.extent_free(e);
    }
}

/// The advise phase of a hugetlb run: gives `[addr, addr + len)` back to `HUGETLB`.
///
/// # Safety
/// The range is the `Pages` of a `choose_hugetlb` of backing `backing`, not yet
/// given back: whole pages (or reserve chunks) taken from `HUGETLB`, which nothing (no list,
/// no pagemap entry, no block) refers to any more.
pub(crate) unsafe fn give_back_run(backing: u8, addr: usize, len: usize) {
    let chunks = Chunks {
        addr,
        nchunks: len >> LG_CHUNK,
        backing: Backing::from_u8(backing),
        dirty: true,
    };
    // SAFETY: the caller's contract is give_back's.
    unsafe { HUGETLB.give_back(chunks) };
}
