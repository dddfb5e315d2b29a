//! Purging of an arena's hugetlb chunks (issue 14): a hugetlb page cannot be returned in part
//! (`MADV_DONTNEED` on part of one does nothing useful, on a whole one it drops the page and
//! the next touch needs another from the pool), so where `purge` would advise a free extent of
//! hugetlb chunks, it calls `purge_hugetlb` instead:
//! - the whole pages inside the extent leave the arena: fresh pages go back to the pool
//!   (`HugetlbSource::give_back`, `munmap`), reserve chunks go back to the reserve, which keeps
//!   them mapped for the next taker (the reserve is never returned to the pool);
//! - what is left (the free chunks of a 1 GiB page still partly in use) is *kept*: filed clean
//!   with `muzzy` set, meaning "touched, zero it before reuse, not dirty": it no longer counts
//!   against `dirty_max` and decay passes over it, until the page's last chunk in use is freed
//!   and the page gathers into one dirty extent again (`hugetlb::may_merge`).
//!
//! Page chunks on hugetlb pages are never purged page by page (`PageChunk::purge_free_dirty`
//! returns 0 for them); an empty one goes back to the free extents and from there as above.
//! Runs under the arena lock.

use crate::arena_state::ArenaInner;
use crate::chunk::{Extent, STATE_FREE};
use crate::hugetlb::{Backing, Chunks, HUGETLB};
use crate::pagemap::{PAGEMAP, TAG_EXTENT};
use crate::size_class::{CHUNK, LG_CHUNK};

impl ArenaInner {
    /// The hugetlb branch of purging `e`, a free dirty extent filed in this arena: `None` where
    /// its chunks are ordinary memory (the caller purges them). Otherwise gives back the whole
    /// pages inside it, keeps the rest, and returns the bytes that left the arena.
    pub(crate) fn purge_hugetlb(&mut self, e: *mut Extent) -> Option<usize> {
        // SAFETY: e is a live free extent of this arena (lock held).
        let (addr, n, backing) = unsafe { ((*e).addr, (*e).nchunks, (*e).backing) };
        let backing = Backing::from_u8(backing);
        if !backing.is_hugetlb() {
            return None;
        }
        self.free_unfile(e);
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
            self.hugetlb_keep(e);
            return Some(0);
        }
        // Descriptors for the pieces outside [lo, hi) first, so nothing fails half-way.
        let head = if lo > addr { self.extent_desc() } else { None };
        let tail = if hi < end { self.extent_desc() } else { None };
        if (lo > addr && head.is_none()) || (hi < end && tail.is_none()) {
            for d in [head, tail].into_iter().flatten() {
                self.extent_recycle(d);
            }
            self.hugetlb_keep(e);
            return Some(0);
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
        // SAFETY: [lo, hi) are whole pages (or reserve chunks) of a free extent of this
        // arena, taken from HUGETLB; nothing refers to them now that the pagemap forgot them.
        unsafe {
            HUGETLB.give_back(Chunks {
                addr: lo,
                nchunks: k,
                backing,
                dirty: true,
            })
        };
        self.extent_recycle(e);
        let bytes = (k << LG_CHUNK) as u64;
        let s = &mut self.stats;
        s.chunks -= k as u64;
        s.hugetlb_bytes -= bytes;
        if backing.is_reserve() {
            s.hugetlb_reserve_bytes -= bytes;
        }
        s.hugetlb_returned_bytes += bytes;
        for d in [head, tail].into_iter().flatten() {
            self.hugetlb_keep(d);
        }
        Some(bytes as usize)
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
