//! Large blocks (page runs inside page chunks) and huge blocks (runs of whole chunks): their
//! allocation, free and resizing in place, for the arena coordinator in `mod.rs`.

use super::*;

impl Arena {
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
        self.large_free_all(&[(pc, page)]);
    }

    /// Frees the large blocks `blocks` (each found by `owner_of`, this arena's) under one
    /// arena lock, then runs a decay pass if one is due: a thread cache's flush of a large bin.
    pub(crate) fn large_free_all(&self, blocks: &[(*mut PageChunk, usize)]) {
        let mut inner = self.inner.lock();
        for &(pc, page) in blocks {
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
        }
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
        let reusable_before = inner.stats.dirty_extent_bytes + inner.stats.muzzy_extent_bytes;
        let Some((e, was_dirty)) = inner.extent_take(n, align_chunks) else {
            return null_mut();
        };
        // Served whole from dirty (or muzzy) runs: the take removed n chunks of them. Anything
        // less means clean or fresh chunks are about to be faulted in: the arena grows (the
        // growth rule, `dirty_growth_pct`; not in a hugetlb arena, whose chunks are a pool's).
        let reused = reusable_before
            .saturating_sub(inner.stats.dirty_extent_bytes + inner.stats.muzzy_extent_bytes);
        let grew = reused < (n * CHUNK) as u64 && inner.hugetlb.page_size().is_none();
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
        let active = s.huge_active as usize + s.active_pages as usize * os::PAGE;
        let dirty = s.dirty_extent_bytes as usize;
        inner.active_max = inner.active_max.max(active);
        let growth = if grew {
            growth_limit(active, inner.active_max).filter(|&limit| dirty > limit)
        } else {
            None
        };
        drop(inner);
        if let Some(limit) = growth {
            self.purge_for_growth(limit);
        }
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
        let over = inner.over_dirty_max();
        drop(inner);
        self.maybe_decay();
        if over {
            self.purge_over_dirty_max();
        }
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
}
