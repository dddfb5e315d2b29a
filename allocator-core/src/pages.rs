//! Page chunks of one arena: chunks cut into 4 KiB pages that hold slabs and large blocks as
//! page runs. A run goes in the page chunk whose longest free run fits it most tightly (so
//! chunks fill up and empty ones appear); one empty page chunk is kept, further ones go back to
//! the free extents. The page map word of each page says which slab or large block it belongs
//! to (`chunk::PAGE_*`).
//!
//! Invariant: every page chunk sits in the `chunk_buckets` list of its longest free run, and
//! `empty_chunks` counts the filed ones with every page free. All of this runs under the arena
//! lock; these methods never purge (the caller runs `purge`'s decay after them).

use crate::arena_state::ArenaInner;
use crate::base::BASE;
use crate::bitmap::Fit;
use crate::chunk::*;
use crate::extent::{system_mode, thp_threshold};
use crate::list;
use crate::os;
use crate::pagemap::{PAGEMAP, TAG_EXTENT, TAG_PAGES};
use crate::size_class::CHUNK_PAGES;
use crate::thp::{self, Thp};
use core::ptr::null_mut;

impl ArenaInner {
    /// The list of page chunks whose longest free run is `b` pages; past a chunk's pages (a
    /// corrupt descriptor) it aborts.
    fn bucket(&mut self, b: usize) -> &mut *mut PageChunk {
        match self.chunk_buckets.get_mut(b) {
            Some(head) => head,
            None => crate::diag::fatal("hugealloc: a page chunk's longest free run is corrupt"),
        }
    }

    pub(crate) fn chunk_unfile(&mut self, pc: *mut PageChunk) {
        // SAFETY: pc is live and filed under its longest run.
        unsafe {
            let b = (*pc).longest as usize;
            list::remove(self.bucket(b), pc);
            if self.bucket(b).is_null() {
                self.chunk_nonempty.clear(b);
            }
            if (*pc).nfree as usize == CHUNK_PAGES {
                self.empty_chunks -= 1;
            }
        }
    }

    pub(crate) fn chunk_file(&mut self, pc: *mut PageChunk) {
        // SAFETY: pc is live and on no list.
        unsafe {
            let b = (*pc).longest as usize;
            list::push(self.bucket(b), pc);
            self.chunk_nonempty.set(b);
            if (*pc).nfree as usize == CHUNK_PAGES {
                self.empty_chunks += 1;
            }
        }
    }

    /// Finds `n` free pages aligned to `align_pages` pages in the page chunk whose longest free
    /// run fits most tightly, and takes them. Returns the chunk, the first page and whether any
    /// page was dirty; `None` when no page chunk has such a run (see `pages_take_fresh`).
    pub(crate) fn pages_find(
        &mut self,
        n: usize,
        align_pages: usize,
    ) -> Option<(*mut PageChunk, usize, bool)> {
        let mut b = n;
        while let Some(bucket) = self.chunk_nonempty.next_set(b) {
            let Some(&head) = self.chunk_buckets.get(bucket) else {
                break;
            };
            let mut pc = head;
            while !pc.is_null() {
                // SAFETY: filed chunks are live.
                let found = unsafe { (*pc).free.find_fit(n, align_pages, (*pc).longest as usize) };
                if let Some(fit) = found {
                    self.chunk_unfile(pc);
                    // SAFETY: pages fit.start..fit.start+n are free in pc, a fit of its map.
                    let dirty = unsafe {
                        (*pc).check_amortised();
                        (*pc).take_fit(fit, n)
                    };
                    self.chunk_file(pc);
                    return Some((pc, fit.start, dirty));
                }
                // SAFETY: as above.
                pc = unsafe { (*pc).next };
            }
            b = bucket + 1;
        }
        None
    }

    /// Takes the first `n` pages of `pc`, a page chunk `page_chunk_new` just made (all pages
    /// free). Returns as `pages_find`.
    pub(crate) fn pages_take_fresh(
        &mut self,
        pc: *mut PageChunk,
        n: usize,
    ) -> (*mut PageChunk, usize, bool) {
        self.chunk_unfile(pc);
        // A new page chunk has all pages free: one run of them all, whose first `n` pages are
        // a fit (aligned to anything dividing CHUNK_PAGES; callers never ask for more).
        let fit = Fit {
            start: 0,
            run_start: 0,
            run_end: CHUNK_PAGES,
            others: 0,
        };
        // SAFETY: pc is a live page chunk on no list; `fit` is one of its map, as above.
        let dirty = unsafe { (*pc).take_fit(fit, n) };
        self.chunk_file(pc);
        (pc, 0, dirty)
    }

    /// Gives back pages `start..start + n` of `pc`; a page chunk left empty goes back to the
    /// free extents when another empty one is kept already.
    pub(crate) fn pages_free(&mut self, pc: *mut PageChunk, start: usize, n: usize) {
        self.chunk_unfile(pc);
        // SAFETY: pages start..start+n of pc belonged to the run being freed.
        unsafe {
            if (*pc).ndirty_free == 0 {
                (*pc).dirty_since_ms = os::now_ms();
            }
            (*pc).give_pages(start, n);
            (*pc).check_amortised();
        }
        // SAFETY: as above.
        if unsafe { (*pc).nfree } as usize == CHUNK_PAGES && self.empty_chunks >= 1 {
            self.page_chunk_release(pc);
        } else {
            self.chunk_file(pc);
        }
    }

    /// Bytes of free dirty pages inside this arena's page chunks.
    pub(crate) fn dirty_page_bytes(&self) -> usize {
        let mut pages = 0usize;
        let mut b = 0;
        while let Some(bucket) = self.chunk_nonempty.next_set(b) {
            let Some(&head) = self.chunk_buckets.get(bucket) else {
                break;
            };
            let mut pc = head;
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

    /// Puts a free chunk to use as a page chunk (filed, all pages free), advised for `policy`.
    pub(crate) fn page_chunk_new(&mut self, policy: Thp) -> Option<*mut PageChunk> {
        let pc = BASE.alloc(core::mem::size_of::<PageChunk>()) as *mut PageChunk;
        if pc.is_null() {
            return None;
        }
        let Some((e, dirty)) = self.extent_take(1, 1) else {
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
        let want = thp::advice_for(policy, system_mode(), 0, thp_threshold());
        self.advise(e, want);
        self.stats.page_chunks += 1;
        self.chunk_file(pc);
        Some(pc)
    }

    pub(crate) fn page_chunk_release(&mut self, pc: *mut PageChunk) {
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
        self.stats.page_chunks -= 1;
        // SAFETY: no pagemap entry refers to pc any more.
        unsafe { BASE.free(pc as *mut u8, core::mem::size_of::<PageChunk>()) };
        self.extent_free(e);
    }
}
