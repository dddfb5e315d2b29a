//! The hugetlb page source: chunks backed by the kernel's explicit huge-page pools (see `os`'s
//! hugetlb section for the kernel facts), beside `chunk::SOURCE`'s ordinary memory.
//!
//! What it owns:
//! - Fresh hugetlb chunks, mapped on demand: a 2 MiB page is one chunk; a 1 GiB page is 512
//!   chunks, mapped whole and handed whole to the one arena that asked (the chunks it did not
//!   ask for come back as `leftover`, as `ChunkSource::take` does with a reservation's tail), so
//!   that each 1 GiB page belongs to one arena and can go back to the pool once all its chunks
//!   are free there.
//! - The reserve (`hugetlb_reserve:SIZE`, mimalloc's `reserve_huge_os_pages`): one mapping taken
//!   and pre-faulted at start, shared by every hugetlb arena, whose chunks are handed out,
//!   taken back and handed out again, never unmapped. A bitmap (in metadata memory of its own)
//!   says which of its chunks are here and which were touched.
//! - The fallback: where the pool cannot serve a request (absent, empty, too small, forbidden),
//!   the request is served from `chunk::SOURCE` instead, with one warning per process naming
//!   the cause and a counter. So a hugetlb arena never fails while ordinary memory is there.
//!
//! What the arena keeps: each extent records its [`Backing`] (`chunk::Extent::backing`, a byte
//! in padding that was there anyway): whether its chunks are ordinary memory, fresh hugetlb
//! pages of 2 MiB or 1 GiB, or reserve chunks. From that byte and the address alone the arena
//! decides purging (a hugetlb chunk is never `MADV_DONTNEED`ed; a whole free page goes back
//! with [`HugetlbSource::give_back`]), merging (only equal backings, and 1 GiB chunks only
//! within their page: [`Backing::may_merge`]) and accounting.
//!
//! Lock: the reserve's lock ranks between the arena lock and the chunk source (see `sync`'s
//! list): an arena calls in with its lock held; the fallback takes the chunk source's lock
//! after this one is released. Fresh hugetlb mappings take no lock.
//!
//! Files: this one takes and gives back chunks (fresh pages, the reserve, the fallback, `fork`
//! headroom); `backing` says how an extent's chunks may be purged and merged; `status` names
//! why a pool refused, probes a pool and builds the public pool report.

mod backing;
mod status;

pub use backing::*;
pub use status::*;

use crate::chunk::SOURCE;
use crate::diag::Msg;
use crate::os::{self, HugePageSize};
use crate::size_class::{CHUNK, LG_CHUNK};
use crate::sync::plain::{AtomicBool, AtomicU64, AtomicU8};
use crate::sync::{ForkLock, Mutex, Ordering};

/// A run of chunks handed out by [`HugetlbSource::take`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Chunks {
    /// The first chunk's address; 0 for none.
    pub addr: usize,
    pub nchunks: usize,
    pub backing: Backing,
    /// Whether any chunk was touched before (reserve chunks taken back): the caller must zero
    /// it where zeroed memory is wanted. Fresh chunks are zero.
    pub dirty: bool,
}

impl Chunks {
    /// No chunks.
    pub const NONE: Chunks = Chunks {
        addr: 0,
        nchunks: 0,
        backing: Backing::Ordinary,
        dirty: false,
    };
}

/// Process-wide hugetlb figures (Relaxed counters: statistics, no protocol rests on them).
pub struct HugetlbStats {
    /// Hugetlb bytes mapped now (fresh pages and the reserve).
    pub mapped_bytes: AtomicU64,
    /// Of those, in 2 MiB and in 1 GiB pages (`HugePageSize::ALL` order).
    pub mapped_by_size: [AtomicU64; 2],
    /// Bytes of the reserve (mapped and pre-faulted at start).
    pub reserve_bytes: AtomicU64,
    /// Bytes of the reserve not handed out now.
    pub reserve_free_bytes: AtomicU64,
    /// Requests for hugetlb chunks served from ordinary memory.
    pub fallbacks: AtomicU64,
    /// Bytes those requests took.
    pub fallback_bytes: AtomicU64,
    /// Hugetlb bytes given back to the pool so far.
    pub returned_bytes: AtomicU64,
    /// The cause of the last fallback (a `Cause` byte).
    pub last_cause: AtomicU8,
}

/// The reserve: one pre-faulted hugetlb mapping and its chunk bitmaps (1 = here / touched).
struct Reserve {
    base: usize,
    nchunks: usize,
    size: HugePageSize,
    /// `nchunks` bits: the chunk is in the reserve (not handed out).
    here: *mut u64,
    /// `nchunks` bits: the chunk was handed out before (may hold old data).
    touched: *mut u64,
}

// SAFETY: the bitmaps are metadata memory owned by the reserve, reached only under its lock.
unsafe impl Send for Reserve {}

impl Reserve {
    fn bit(words: *mut u64, i: usize) -> bool {
        // SAFETY: callers pass `i < nchunks`; the bitmaps hold `nchunks` bits.
        unsafe { *words.add(i / 64) >> (i % 64) & 1 != 0 }
    }

    fn set_bits(words: *mut u64, start: usize, n: usize, on: bool) {
        for i in start..start + n {
            // SAFETY: as in `bit`.
            unsafe {
                let w = &mut *words.add(i / 64);
                if on {
                    *w |= 1 << (i % 64);
                } else {
                    *w &= !(1 << (i % 64));
                }
            }
        }
    }

    /// The first run of `n` chunks here whose address is a multiple of `align` bytes.
    fn find(&self, n: usize, align: usize) -> Option<usize> {
        if self.base == 0 || n > self.nchunks {
            return None;
        }
        let mut i = 0;
        while i + n <= self.nchunks {
            if !(self.base + (i << LG_CHUNK)).is_multiple_of(align) {
                i += 1;
                continue;
            }
            match (i..i + n).find(|&k| !Self::bit(self.here, k)) {
                None => return Some(i),
                Some(busy) => i = busy + 1,
            }
        }
        None
    }
}

/// The hugetlb page source. One per process ([`HUGETLB`]); tests build their own.
pub struct HugetlbSource {
    reserve: Mutex<Reserve>,
    pub stats: HugetlbStats,
    warned: AtomicBool,
    fork_warned: AtomicBool,
}

/// What [`HugetlbSource::take_reserve`] got.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ReserveOutcome {
    /// Bytes mapped and pre-faulted (0 where nothing could be had).
    pub bytes: usize,
    /// Why less than asked was had (`Cause::None` when all of it was).
    pub cause: Cause,
}

impl HugetlbSource {
    pub const fn new() -> HugetlbSource {
        HugetlbSource {
            reserve: Mutex::new(Reserve {
                base: 0,
                nchunks: 0,
                size: HugePageSize::Size2M,
                here: core::ptr::null_mut(),
                touched: core::ptr::null_mut(),
            }),
            stats: HugetlbStats {
                mapped_bytes: AtomicU64::new(0),
                mapped_by_size: [AtomicU64::new(0), AtomicU64::new(0)],
                reserve_bytes: AtomicU64::new(0),
                reserve_free_bytes: AtomicU64::new(0),
                fallbacks: AtomicU64::new(0),
                fallback_bytes: AtomicU64::new(0),
                returned_bytes: AtomicU64::new(0),
                last_cause: AtomicU8::new(0),
            },
            warned: AtomicBool::new(false),
            fork_warned: AtomicBool::new(false),
        }
    }

    /// Counts `len` bytes of pages of `size` mapped (`true`) or unmapped.
    fn count_mapped(&self, size: HugePageSize, len: usize, mapped: bool) {
        let slot = &self.stats.mapped_by_size[size as usize];
        // Relaxed: statistics.
        if mapped {
            self.stats
                .mapped_bytes
                .fetch_add(len as u64, Ordering::Relaxed);
            slot.fetch_add(len as u64, Ordering::Relaxed);
        } else {
            self.stats
                .mapped_bytes
                .fetch_sub(len as u64, Ordering::Relaxed);
            slot.fetch_sub(len as u64, Ordering::Relaxed);
        }
    }

    /// For the `fork` prepare handler: whether each pool has as many pages available as this
    /// process has mapped in that size, so that a child (or the parent, while a child lives)
    /// can copy every page it writes (docs/hugetlb.md, "fork"). Where one falls short, warns
    /// once per process. Reads sysfs only where hugetlb pages are mapped; allocates nothing.
    pub fn fork_headroom(&self) -> bool {
        let mut ok = true;
        for size in HugePageSize::ALL {
            // Relaxed: a statistic.
            let mapped = self.stats.mapped_by_size[size as usize].load(Ordering::Relaxed);
            if mapped == 0 {
                continue;
            }
            let pages = mapped >> size.lg_bytes();
            let available = os::hugetlb_pool(size).map_or(0, |p| p.available());
            if available >= pages {
                continue;
            }
            ok = false;
            // Relaxed: only one caller may win the swap.
            if !self.fork_warned.swap(true, Ordering::Relaxed) {
                Msg::new()
                    .str("fork with ")
                    .dec(pages)
                    .str(" hugetlb pages of ")
                    .str(size.name())
                    .str(" mapped and ")
                    .dec(available)
                    .str(" available in the pool: a child that writes them may get SIGBUS ")
                    .str("(see docs/hugetlb.md, fork; warned once)")
                    .emit();
            }
        }
        ok
    }

    /// Takes `n` chunks aligned to `align_chunks` chunks for an arena whose page source is
    /// `want` (`None`: ordinary memory, straight from `chunk::SOURCE`). With `Some(size)`: from
    /// the reserve if it has such a run (whatever its page size), else fresh pages of `size`,
    /// else ordinary memory (the fallback: counted, and warned about once per process).
    /// Chunks the caller did not ask for but now owns (the rest of a 1 GiB page, the tail of an
    /// ordinary reservation) come back in `leftover`, fresh and clean, for the caller to keep
    /// as free chunks (`leftover.nchunks` is 0 when there are none). The result's `addr` is 0
    /// only where ordinary memory is exhausted too.
    pub fn take(
        &self,
        want: Option<HugePageSize>,
        n: usize,
        align_chunks: usize,
        leftover: &mut Chunks,
    ) -> Chunks {
        *leftover = Chunks::NONE;
        if let Some(size) = want {
            if let Some(got) = self.take_from_reserve(n, align_chunks) {
                return got;
            }
            match self.map_fresh(size, n, align_chunks, leftover) {
                Ok(got) => return got,
                Err(cause) => self.fell_back(size, n, cause),
            }
        }
        let mut tail = (0, 0);
        let p = SOURCE.take(n, align_chunks, &mut tail);
        *leftover = fresh_run(tail.0, tail.1, Backing::Ordinary);
        if p.is_null() {
            return Chunks::NONE;
        }
        fresh_run(p as usize, n, Backing::Ordinary)
    }

    fn take_from_reserve(&self, n: usize, align_chunks: usize) -> Option<Chunks> {
        let r = self.reserve.lock();
        let i = r.find(n, align_chunks << LG_CHUNK)?;
        let dirty = (i..i + n).any(|k| Reserve::bit(r.touched, k));
        Reserve::set_bits(r.here, i, n, false);
        Reserve::set_bits(r.touched, i, n, true);
        // Relaxed: a statistic.
        self.stats
            .reserve_free_bytes
            .fetch_sub((n << LG_CHUNK) as u64, Ordering::Relaxed);
        Some(Chunks {
            addr: r.base + (i << LG_CHUNK),
            nchunks: n,
            backing: Backing::reserve(r.size),
            dirty,
        })
    }

    /// Maps fresh pages of `size` for `n` chunks; the chunks past `n` (1 GiB pages) go to
    /// `leftover`.
    fn map_fresh(
        &self,
        size: HugePageSize,
        n: usize,
        align_chunks: usize,
        leftover: &mut Chunks,
    ) -> Result<Chunks, Cause> {
        let page = size.bytes();
        let len = n
            .checked_mul(CHUNK)
            .and_then(|b| b.checked_next_multiple_of(page))
            .ok_or(Cause::Other)?;
        let align = (align_chunks << LG_CHUNK).max(page);
        let p = os::map_hugetlb(len, size, align).map_err(|e| Cause::classify(e, size))? as usize;
        self.count_mapped(size, len, true);
        let backing = Backing::fresh(size);
        let total = len >> LG_CHUNK;
        *leftover = fresh_run(p + (n << LG_CHUNK), total - n, backing);
        Ok(fresh_run(p, n, backing))
    }

    /// Counts a fallback and warns the first time in the process.
    #[cold]
    fn fell_back(&self, size: HugePageSize, n: usize, cause: Cause) {
        // Relaxed: statistics.
        self.stats.fallbacks.fetch_add(1, Ordering::Relaxed);
        self.stats
            .fallback_bytes
            .fetch_add((n << LG_CHUNK) as u64, Ordering::Relaxed);
        self.stats.last_cause.store(cause as u8, Ordering::Relaxed);
        // Relaxed: only one caller may win the swap; nothing else is published by it.
        if !self.warned.swap(true, Ordering::Relaxed) {
            let mut m = Msg::new();
            m.str("hugetlb:").str(size.name()).str(": ");
            let available = os::hugetlb_pool(size).map_or(0, |p| p.available());
            write_cause(&mut m, size, cause, n, available);
            m.str("; using ordinary memory with the arena's THP policy (warned once; ")
                .str("counted in stats hugetlb fallbacks)")
                .emit();
        }
    }

    /// Whether the fallback warning was written in this process.
    pub fn warned(&self) -> bool {
        // Relaxed: a flag read for reporting.
        self.warned.load(Ordering::Relaxed)
    }

    /// Takes back `chunks`, free and no longer referred to by anything: reserve chunks return
    /// to the reserve (`chunks.dirty` says whether they were touched); fresh hugetlb pages go
    /// back to the pool (`munmap`). Returns the bytes given back to the pool.
    /// Precondition: for fresh pages, whole pages (`chunks.addr` and `chunks.nchunks` multiples
    /// of `backing.page_chunks()`): a hugetlb page cannot be given back in part. Ordinary chunks
    /// are the caller's business (purged, or kept) and are refused (returns 0).
    ///
    /// # Safety
    /// `chunks` came from this source's `take` (or is a whole-page part of what it returned),
    /// is not given back twice, and nothing uses its memory any more: fresh pages are unmapped.
    pub unsafe fn give_back(&self, chunks: Chunks) -> usize {
        let unit = chunks.backing.page_chunks();
        if chunks.backing.is_reserve() {
            let r = self.reserve.lock();
            let inside = r.base != 0
                && chunks.addr >= r.base
                && ((chunks.addr - r.base) >> LG_CHUNK) + chunks.nchunks <= r.nchunks;
            debug_assert!(inside, "reserve chunks outside the reserve");
            if !inside {
                return 0;
            }
            let i = (chunks.addr - r.base) >> LG_CHUNK;
            Reserve::set_bits(r.here, i, chunks.nchunks, true);
            if !chunks.dirty {
                Reserve::set_bits(r.touched, i, chunks.nchunks, false);
            }
            // Relaxed: a statistic.
            self.stats
                .reserve_free_bytes
                .fetch_add((chunks.nchunks << LG_CHUNK) as u64, Ordering::Relaxed);
            return 0;
        }
        if !chunks.backing.is_hugetlb()
            || chunks.nchunks == 0
            || !chunks.nchunks.is_multiple_of(unit)
            || chunks.backing.page_base(chunks.addr) != chunks.addr
        {
            debug_assert!(
                !chunks.backing.is_hugetlb(),
                "hugetlb pages are given back whole"
            );
            return 0;
        }
        let len = chunks.nchunks << LG_CHUNK;
        os::unmap(chunks.addr as *mut u8, len);
        if let Some(size) = chunks.backing.page_size() {
            self.count_mapped(size, len, false);
        }
        // Relaxed: a statistic.
        self.stats
            .returned_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
        len
    }

    /// Maps and pre-faults the reserve: `bytes` rounded up to pages of `size`, or as many pages
    /// as the pool has available where it has fewer (a warning names the shortfall). Once per
    /// source: a second call changes nothing and reports the reserve there is.
    pub fn take_reserve(&self, size: HugePageSize, bytes: usize) -> ReserveOutcome {
        let mut r = self.reserve.lock();
        if r.base != 0 || bytes == 0 {
            return ReserveOutcome {
                bytes: r.nchunks << LG_CHUNK,
                cause: Cause::None,
            };
        }
        let page = size.bytes();
        let want = bytes.div_ceil(page);
        let mut cause = Cause::None;
        let mut available = 0;
        let mut pages = want;
        let mut p = os::map_hugetlb(pages * page, size, page);
        if let Err(e) = p {
            cause = Cause::classify(e, size);
            available = os::hugetlb_pool(size).map_or(0, |pool| pool.available());
            pages = (available as usize).min(want);
            if e == libc::ENOMEM && pages > 0 {
                p = os::map_hugetlb(pages * page, size, page);
            }
        }
        let base = match p {
            // SAFETY: `base` is the fresh hugetlb mapping of `pages` pages just made, ours alone.
            Ok(base) if unsafe { os::populate_write(base, pages * page, page) } => base,
            Ok(base) => {
                os::unmap(base, pages * page);
                cause = Cause::Other;
                pages = 0;
                core::ptr::null_mut()
            }
            Err(_) => {
                pages = 0;
                core::ptr::null_mut()
            }
        };
        let nchunks = (pages * page) >> LG_CHUNK;
        let words = nchunks.div_ceil(64);
        let bitmaps = if nchunks == 0 {
            core::ptr::null_mut()
        } else {
            os::map((2 * words * 8).next_multiple_of(os::PAGE)) as *mut u64
        };
        if nchunks != 0 && bitmaps.is_null() {
            os::unmap(base, pages * page);
            cause = Cause::Other;
        } else if nchunks != 0 {
            r.base = base as usize;
            r.nchunks = nchunks;
            r.size = size;
            r.here = bitmaps;
            // SAFETY: the bitmap mapping holds `2 * words` words.
            r.touched = unsafe { bitmaps.add(words) };
            Reserve::set_bits(r.here, 0, nchunks, true);
            let got = (nchunks << LG_CHUNK) as u64;
            self.count_mapped(size, got as usize, true);
            // Relaxed: statistics.
            self.stats.reserve_bytes.fetch_add(got, Ordering::Relaxed);
            self.stats
                .reserve_free_bytes
                .fetch_add(got, Ordering::Relaxed);
        }
        let got = r.nchunks << LG_CHUNK;
        drop(r);
        if cause != Cause::None {
            self.stats.last_cause.store(cause as u8, Ordering::Relaxed);
            let mut m = Msg::new();
            m.str("hugetlb_reserve: ");
            write_cause(&mut m, size, cause, want * (page >> LG_CHUNK), available);
            m.str("; reserved ")
                .dec((got >> 20) as u64)
                .str(" MiB of the ")
                .dec(((want * page) >> 20) as u64)
                .str(" MiB asked")
                .emit();
        }
        ReserveOutcome { bytes: got, cause }
    }

    /// The reserve: its first chunk's address, its length in chunks, its page size (`None`
    /// where there is none).
    pub fn reserve_range(&self) -> Option<(usize, usize, HugePageSize)> {
        let r = self.reserve.lock();
        (r.base != 0).then_some((r.base, r.nchunks, r.size))
    }

    /// The lock `fork` handlers take (after the arena locks, before the chunk source's).
    pub fn fork_lock(&self) -> &dyn ForkLock {
        &self.reserve
    }
}

impl Default for HugetlbSource {
    fn default() -> HugetlbSource {
        HugetlbSource::new()
    }
}

/// `nchunks` fresh (never touched) chunks of `backing` at `addr`; `Chunks::NONE` for none.
const fn fresh_run(addr: usize, nchunks: usize, backing: Backing) -> Chunks {
    if nchunks == 0 {
        return Chunks::NONE;
    }
    Chunks {
        addr,
        nchunks,
        backing,
        dirty: false,
    }
}

/// The process's hugetlb source.
pub static HUGETLB: HugetlbSource = HugetlbSource::new();

/// Takes the reserve `opts` ask for (`hugetlb_reserve`), in pages of the global `hugetlb` size,
/// or 2 MiB pages where that is `off` (the reserve then serves `arena.<i>.hugetlb` arenas).
/// For the allocator's one-time init; does nothing when no reserve is asked for.
pub fn start(opts: &crate::config::Options) -> ReserveOutcome {
    let size = opts.hugetlb.page_size().unwrap_or(HugePageSize::Size2M);
    HUGETLB.take_reserve(size, opts.hugetlb_reserve)
}

#[cfg(test)]
mod tests;
