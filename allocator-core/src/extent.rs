//! Runs of whole chunks ("extents") of one arena: taking `n` aligned chunks off the free lists
//! or from the chunk source, splitting, filing free extents by dirtiness and chunk count,
//! coalescing a freed extent with its free neighbours (found through the pagemap), recycling
//! descriptors, and THP advice per extent. Huge blocks are extents in state `STATE_HUGE`. Also
//! the process-wide THP facts every arena consults (system mode, `thp_threshold`).
//!
//! Invariant: a free extent's chunks all name it in the pagemap, and it sits in exactly one
//! free list; two adjacent free extents of one arena with the same dirtiness and muzziness are
//! merged. All of this runs under the arena lock.

use crate::arena_state::{ArenaInner, NFREE_BUCKETS};
use crate::base::BASE;
use crate::chunk::*;
use crate::hugetlb::{self, Backing, Chunks, HUGETLB};
use crate::list;
use crate::os;
use crate::pagemap::{PAGEMAP, TAG_EXTENT, TAG_MASK};
use crate::size_class::{CHUNK, LG_CHUNK};
use crate::sync::{AtomicU8, AtomicUsize, Ordering};
use crate::thp::{ChunkAdvice, SystemMode};
use core::ptr;

/// The system THP mode, read once at start (`thp::SystemMode as u8`).
static SYSTEM_MODE: AtomicU8 = AtomicU8::new(SystemMode::Unknown as u8);
/// The `thp_threshold` option.
static THP_THRESHOLD: AtomicUsize = AtomicUsize::new(4 << 20);

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
    debug_assert!(n > 0);
    if n <= 16 {
        n.wrapping_sub(1)
    } else {
        (12 + crate::bits::lg_floor(n) as usize).min(NFREE_BUCKETS - 1)
    }
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

impl ArenaInner {
    pub(crate) fn extent_desc(&mut self) -> Option<*mut Extent> {
        let e = if self.spare_extents.is_null() {
            BASE.alloc(core::mem::size_of::<Extent>()) as *mut Extent
        } else {
            let e = self.spare_extents;
            // SAFETY: spare descriptors are valid and linked through `next`.
            self.spare_extents = unsafe { (*e).next };
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

    pub(crate) fn extent_recycle(&mut self, e: *mut Extent) {
        // SAFETY: e is a descriptor no pagemap entry or list refers to any more.
        unsafe { (*e).next = self.spare_extents };
        self.spare_extents = e;
    }

    pub(crate) fn free_list(&mut self, dirty: bool, n: usize) -> &mut *mut Extent {
        // Masked: `free_bucket` is below NFREE_BUCKETS (a power of two), so this changes
        // nothing and leaves no bounds check.
        let b = free_bucket(n) & (NFREE_BUCKETS - 1);
        if dirty {
            &mut self.free_dirty[b]
        } else {
            &mut self.free_clean[b]
        }
    }

    pub(crate) fn free_file(&mut self, e: *mut Extent) {
        // SAFETY: e is a live free extent on no list.
        let (dirty, muzzy, n) = unsafe { ((*e).dirty, (*e).muzzy, (*e).nchunks) };
        let bytes = (n * CHUNK) as u64;
        if dirty && muzzy {
            self.stats.muzzy_extent_bytes += bytes;
        } else if dirty {
            self.stats.dirty_extent_bytes += bytes;
        } else {
            self.stats.clean_extent_bytes += bytes;
        }
        // SAFETY: as above.
        if Backing::from_u8(unsafe { (*e).backing }).is_hugetlb() {
            self.stats.hugetlb_free_bytes += bytes;
        }
        // SAFETY: as above.
        unsafe { list::push(self.free_list(dirty, n), e) };
    }

    pub(crate) fn free_unfile(&mut self, e: *mut Extent) {
        // SAFETY: e is a live free extent on its list.
        let (dirty, muzzy, n) = unsafe { ((*e).dirty, (*e).muzzy, (*e).nchunks) };
        let bytes = (n * CHUNK) as u64;
        if dirty && muzzy {
            self.stats.muzzy_extent_bytes -= bytes;
        } else if dirty {
            self.stats.dirty_extent_bytes -= bytes;
        } else {
            self.stats.clean_extent_bytes -= bytes;
        }
        // SAFETY: as above.
        if Backing::from_u8(unsafe { (*e).backing }).is_hugetlb() {
            self.stats.hugetlb_free_bytes -= bytes;
        }
        // SAFETY: as above.
        unsafe { list::remove(self.free_list(dirty, n), e) };
    }

    /// Files a free extent, merging it with free neighbours of the same dirtiness and backing
    /// first (`hugetlb::may_merge`). A merged dirty extent keeps the older age, so steady reuse
    /// cannot keep old dirty memory from decaying.
    pub(crate) fn extent_free(&mut self, mut e: *mut Extent) {
        // SAFETY: e and every extent found through the pagemap are live descriptors; the
        // arena lock guards all of this arena's extents.
        unsafe {
            let before = PAGEMAP.get((*e).addr - 1);
            if before & TAG_MASK == TAG_EXTENT {
                let p = (before & !TAG_MASK) as *mut Extent;
                if (*p).state == STATE_FREE
                    && (*p).arena == self.index
                    && (*p).addr + (*p).nchunks * CHUNK == (*e).addr
                    && hugetlb::may_merge(&*e, &*p)
                {
                    self.free_unfile(p);
                    (*p).nchunks += (*e).nchunks;
                    (*p).advice = merge_advice((*p).advice, (*e).advice);
                    hugetlb::merge_state(&mut *p, &*e);
                    PAGEMAP.set((*e).addr, (*e).nchunks, p as usize | TAG_EXTENT);
                    self.extent_recycle(e);
                    e = p;
                }
            }
            let end = (*e).addr + (*e).nchunks * CHUNK;
            let after = PAGEMAP.get(end);
            if after & TAG_MASK == TAG_EXTENT {
                let x = (after & !TAG_MASK) as *mut Extent;
                if (*x).state == STATE_FREE
                    && (*x).arena == self.index
                    && (*x).addr == end
                    && hugetlb::may_merge(&*e, &*x)
                {
                    self.free_unfile(x);
                    (*e).nchunks += (*x).nchunks;
                    (*e).advice = merge_advice((*e).advice, (*x).advice);
                    hugetlb::merge_state(&mut *e, &*x);
                    PAGEMAP.set((*x).addr, (*x).nchunks, e as usize | TAG_EXTENT);
                    self.extent_recycle(x);
                }
            }
        }
        self.free_file(e);
    }

    /// Takes `n` chunks aligned to `align_chunks` chunks off the free lists (dirty first, so
    /// memory already faulted in is reused; then, in an arena of ordinary memory, a dirty run
    /// extended by the clean chunks after it, see `extent_extend`; then clean runs), else from
    /// the arena's page source (`hugetlb`: ordinary chunks, or hugetlb pages with ordinary
    /// chunks as the fallback). Returns the extent (state free, exactly `n` chunks, not filed)
    /// and whether it may hold old data (so zeroing must write).
    pub(crate) fn extent_take(
        &mut self,
        n: usize,
        align_chunks: usize,
    ) -> Option<(*mut Extent, bool)> {
        let align = align_chunks * CHUNK;
        // Two spare descriptors up front, so that splitting cannot fail half-way.
        let head_desc = self.extent_desc()?;
        let Some(tail_desc) = self.extent_desc() else {
            self.extent_recycle(head_desc);
            return None;
        };
        for dirty in [true, false] {
            // No dirty run is long enough: extend one rather than fault clean chunks (not in
            // a hugetlb arena, whose new chunks come from the pool).
            if !dirty && self.hugetlb.page_size().is_none() {
                if let Some(e) = self.extent_extend(n, align_chunks) {
                    self.extent_recycle(head_desc);
                    self.extent_recycle(tail_desc);
                    return Some((e, true));
                }
            }
            for b in free_bucket(n)..NFREE_BUCKETS {
                let mut e = *self.free_list(dirty, b_first(b));
                while !e.is_null() {
                    // SAFETY: filed extents are live.
                    let (addr, len) = unsafe { ((*e).addr, (*e).nchunks * CHUNK) };
                    let start = (addr + align - 1) & !(align - 1);
                    if start + n * CHUNK <= addr + len {
                        self.free_unfile(e);
                        let head = (start - addr) / CHUNK;
                        let tail = (addr + len - start) / CHUNK - n;
                        // SAFETY: e is ours now; the spare descriptors are unused.
                        unsafe {
                            if head > 0 {
                                self.split_off(e, head_desc, addr, head);
                            } else {
                                self.extent_recycle(head_desc);
                            }
                            if tail > 0 {
                                self.split_off(e, tail_desc, start + n * CHUNK, tail);
                            } else {
                                self.extent_recycle(tail_desc);
                            }
                            (*e).addr = start;
                            (*e).nchunks = n;
                            // Kept pieces of 1 GiB pages (`purge_hugetlb`) sit in the clean
                            // lists, touched: `muzzy` says so.
                            return Some((e, dirty || (*e).muzzy));
                        }
                    }
                    // SAFETY: as above.
                    e = unsafe { (*e).next };
                }
            }
        }
        self.extent_recycle(tail_desc);
        // Fresh chunks from the page source.
        let want = self.hugetlb.page_size();
        let mut left = Chunks::NONE;
        let got = HUGETLB.take(want, n, align_chunks, &mut left);
        if left.nchunks > 0 && PAGEMAP.prepare(left.addr, left.nchunks) {
            // SAFETY: head_desc is a spare descriptor; the leftover chunks are fresh and ours.
            unsafe {
                let l = &mut *head_desc;
                l.addr = left.addr;
                l.nchunks = left.nchunks;
                l.state = STATE_FREE;
                l.dirty = false;
                l.muzzy = false;
                l.backing = left.backing as u8;
                PAGEMAP.set(l.addr, l.nchunks, head_desc as usize | TAG_EXTENT);
            }
            self.chunks_in(left);
            self.extent_free(head_desc);
        } else {
            self.extent_recycle(head_desc);
        }
        if got.addr == 0 {
            return None;
        }
        if want.is_some() && !got.backing.is_hugetlb() {
            self.stats.hugetlb_fallbacks += 1;
        }
        if !PAGEMAP.prepare(got.addr, n) {
            if got.backing.is_hugetlb() {
                // SAFETY: `got` came from HUGETLB.take just now and nothing refers to it.
                unsafe { HUGETLB.give_back(got) };
            } else {
                os::unmap(got.addr as *mut u8, n * CHUNK);
            }
            return None;
        }
        let e = self.extent_desc()?;
        // SAFETY: e is a fresh descriptor for the fresh chunks.
        unsafe {
            (*e).addr = got.addr;
            (*e).nchunks = n;
            (*e).state = STATE_FREE;
            (*e).backing = got.backing as u8;
            PAGEMAP.set(got.addr, n, e as usize | TAG_EXTENT);
        }
        self.chunks_in(got);
        Some((e, got.dirty))
    }

    /// Counts chunks that came into the arena from its page source.
    fn chunks_in(&mut self, c: Chunks) {
        self.stats.chunks += c.nchunks as u64;
        let bytes = (c.nchunks << LG_CHUNK) as u64;
        if c.backing.is_hugetlb() {
            self.stats.hugetlb_bytes += bytes;
        }
        if c.backing.is_reserve() {
            self.stats.hugetlb_reserve_bytes += bytes;
        }
    }

    /// When no free extent holds `n` chunks: a dirty free extent of fewer chunks, extended by
    /// the clean chunks right after it (a clean free extent, or the chunk source's next fresh
    /// chunks), so that memory already faulted in is reused and fewer fresh chunks are
    /// touched. Looks at no more than `EXTEND_SCAN` dirty extents, the largest buckets first.
    /// Returns the extent (state free, exactly `n` chunks, not filed, part of it dirty).
    fn extent_extend(&mut self, n: usize, align_chunks: usize) -> Option<*mut Extent> {
        /// Bounds the walk on the path that would otherwise take fresh chunks.
        const EXTEND_SCAN: usize = 64;
        let mut seen = 0;
        for b in (0..free_bucket(n).saturating_add(1).min(NFREE_BUCKETS)).rev() {
            let mut e = *self.free_list(true, b_first(b));
            while !e.is_null() && seen < EXTEND_SCAN {
                seen += 1;
                // SAFETY: filed extents are live; the arena lock guards them.
                let (addr, have, backing, next) =
                    unsafe { ((*e).addr, (*e).nchunks, (*e).backing, (*e).next) };
                if have < n && backing == 0 && (addr / CHUNK).is_multiple_of(align_chunks) {
                    let end = addr + have * CHUNK;
                    let need = n - have;
                    let mut added = self.take_clean_after(end, need);
                    if added.is_none() && crate::chunk::SOURCE.take_at(end, need) {
                        self.stats.chunks += need as u64;
                        added = Some(ADVICE_NONE);
                    }
                    if let Some(advice) = added {
                        self.free_unfile(e);
                        // SAFETY: e is ours now; the `need` chunks after it are ours too.
                        unsafe {
                            (*e).nchunks = n;
                            (*e).advice = merge_advice((*e).advice, advice);
                        }
                        PAGEMAP.set(end, need, e as usize | TAG_EXTENT);
                        self.stats.huge_extended += 1;
                        return Some(e);
                    }
                }
                e = next;
            }
        }
        None
    }

    /// Takes the first `need` chunks of the clean free extent starting at `addr`, if there is
    /// one of this arena with that many, and returns its THP advice; the caller points their
    /// pagemap entries elsewhere.
    fn take_clean_after(&mut self, addr: usize, need: usize) -> Option<u8> {
        let entry = PAGEMAP.get(addr);
        if entry & TAG_MASK != TAG_EXTENT {
            return None;
        }
        let x = (entry & !TAG_MASK) as *mut Extent;
        // SAFETY: a TAG_EXTENT entry points at a live descriptor; the arena lock is held.
        let xr = unsafe { &mut *x };
        if xr.state != STATE_FREE
            || xr.arena != self.index
            || xr.dirty
            || xr.backing != 0
            || xr.addr != addr
            || xr.nchunks < need
        {
            return None;
        }
        let advice = xr.advice;
        self.free_unfile(x);
        if xr.nchunks == need {
            self.extent_recycle(x);
        } else {
            xr.addr += need * CHUNK;
            xr.nchunks -= need;
            self.free_file(x);
        }
        Some(advice)
    }

    /// Splits `[addr, addr + n chunks)` off free extent `e` into descriptor `d` and files it.
    ///
    /// # Safety
    /// `d` is a spare descriptor; the range is part of `e`, which is unfiled.
    pub(crate) unsafe fn split_off(
        &mut self,
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
            dr.backing = (*e).backing;
            dr.dirty_since_ms = (*e).dirty_since_ms;
        }
        PAGEMAP.set(addr, n, d as usize | TAG_EXTENT);
        self.free_file(d);
    }

    /// Applies THP advice `want` to extent `e`'s chunks, unless its chunks already behave so.
    pub(crate) fn advise(&mut self, e: *mut Extent, want: ChunkAdvice) {
        // SAFETY: e is a live extent of this arena, guarded by the arena lock.
        let er = unsafe { &mut *e };
        if Backing::from_u8(er.backing).is_hugetlb() {
            // THP advice means nothing to hugetlb pages (and collapse would fail on them).
            return;
        }
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
        self.advise_range(er.addr, er.nchunks, kind);
        er.advice = target;
    }

    pub(crate) fn advise_range(&mut self, addr: usize, n: usize, kind: ChunkAdvice) {
        let (advice, counter) = match kind {
            ChunkAdvice::Huge => (os::Advice::Huge, &mut self.stats.advised_huge_bytes),
            ChunkAdvice::NoHuge => (os::Advice::NoHuge, &mut self.stats.advised_nohuge_bytes),
            ChunkAdvice::None => return,
        };
        if os::advise(addr as *mut u8, n * CHUNK, advice) {
            *counter += (n * CHUNK) as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_buckets_invert() {
        for n in 1..100_000 {
            let b = free_bucket(n);
            assert!(b < NFREE_BUCKETS);
            assert_eq!(free_bucket(b_first(b)), b, "n {n}");
        }
    }
}
