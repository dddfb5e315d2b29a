//! Size classes, jemalloc-style: 8, 16, 32, 48, 64, then four classes per doubling
//! (`2^n + k * 2^(n-2)`, k = 1..4), so rounding up wastes at most 25% of a block, or less than
//! the 16-byte quantum that blocks of 16 bytes and more are aligned to (17 B takes 32 B).
//!
//! Indices: `0..NSMALL` are small classes (slab objects, up to `SMALL_MAX` = 16 KiB, where
//! jemalloc stops at 14 KiB: a 16 KiB block as a page run cost twice as much as a slab's);
//! `NSMALL..NSMALL + NLARGE` are large classes (page runs inside a chunk, up to 1.75 MiB);
//! from `HUGE_FIRST` on, huge classes (runs of whole 2 MiB chunks). Everything is `const fn`,
//! and the tables are computed at compile time.

use crate::bits::{align_up, lg_floor};
use crate::os::PAGE;

/// Chunk size: 2 MiB, the x86-64 PMD huge page.
pub const LG_CHUNK: u32 = 21;
pub const CHUNK: usize = 1 << LG_CHUNK;
/// Pages in a chunk.
pub const CHUNK_PAGES: usize = CHUNK / PAGE;

/// The number of small classes.
pub const NSMALL: usize = 37;
/// The largest small size.
pub const SMALL_MAX: usize = 16384;
/// The number of large classes.
pub const NLARGE: usize = 27;
/// The first huge class index (2 MiB).
pub const HUGE_FIRST: usize = NSMALL + NLARGE;
/// The largest large size.
pub const LARGE_MAX: usize = 1792 << 10;
/// The largest size any allocation may have (so rounding never overflows `isize`).
pub const MAX_SIZE: usize = 1 << 62;
/// Most objects a slab holds (the slab bitmap's bit count).
pub const SLAB_MAX_OBJS: usize = 512;

const TINY: [usize; 5] = [8, 16, 32, 48, 64];

/// The size of class `idx` (any index up to `class_of(MAX_SIZE)`).
#[inline]
pub const fn class_size(idx: usize) -> usize {
    if idx < 5 {
        return TINY[idx];
    }
    let g = (idx - 5) / 4;
    let k = (idx - 5) % 4 + 1;
    let lg = g + 6;
    (1 << lg) + (k << (lg - 2))
}

/// The smallest size of class `idx` (one more than the class before's size): the sizes of
/// class `idx` are `class_min_size(idx)..=class_size(idx)`.
#[inline]
pub const fn class_min_size(idx: usize) -> usize {
    if idx == 0 {
        1
    } else {
        class_size(idx - 1) + 1
    }
}

/// The class index for `size` (`1..=MAX_SIZE`; 0 is treated as 1).
#[inline(always)]
pub fn class_of(size: usize) -> usize {
    if size <= LOOKUP_MAX {
        return LOOKUP[(size + 7) >> 3] as usize;
    }
    class_of_computed(size)
}

/// `class_of` by arithmetic, for any size.
pub const fn class_of_computed(size: usize) -> usize {
    if size <= 64 {
        return match size {
            0..=8 => 0,
            9..=16 => 1,
            17..=32 => 2,
            33..=48 => 3,
            _ => 4,
        };
    }
    let lg = lg_floor(size - 1) as usize; // size in (2^lg, 2^(lg+1)]
    let delta_lg = lg - 2;
    let k = (size - (1 << lg) + (1 << delta_lg) - 1) >> delta_lg; // 1..=4
    5 + (lg - 6) * 4 + k - 1
}

const LOOKUP_MAX: usize = 4096;
static LOOKUP: [u8; LOOKUP_MAX / 8 + 1] = {
    let mut t = [0u8; LOOKUP_MAX / 8 + 1];
    let mut i = 0;
    while i < t.len() {
        let size = if i == 0 { 1 } else { i * 8 };
        t[i] = class_of_computed(size) as u8;
        i += 1;
    }
    t
};

/// Whether `idx` is a small (slab) class.
#[inline(always)]
pub const fn is_small(idx: usize) -> bool {
    idx < NSMALL
}

/// Objects a slab should hold at least, where `SLAB_OBJS_PAGES` pages can: a refill or a
/// flush then moves a slab's worth of blocks per slab created or released, and a cache bin
/// (twice a slab's objects, `bin::small_batch_cap`) moves 16 blocks per refill and flush
/// where its class's bytes alone gave 8. With one-object slabs of 4 KiB, every 4 KiB block
/// cost a slab of its own: 1,043 instructions per block through a batch's refill and flush,
/// 326 with slabs of 8 (docs/benchmarks.md, "Session 9"), 216 with slabs of 16 (1 KiB: 220
/// -> 178, mimalloc's 178; "Session 12"). Classes above 8 KiB hold what 32 pages fit (8-12).
pub const SLAB_MIN_OBJS: usize = 16;
/// The most pages a slab takes to reach `SLAB_MIN_OBJS` objects: 32, so that every class
/// up to 8 KiB reaches it (16 pages) and the larger small classes hold at least 8 (16 KiB in
/// 32 pages). At 8 pages, 10–16 KiB slabs held 2 objects: 821 instructions per 12 KiB block
/// through a batch, 444 at 32.
pub const SLAB_OBJS_PAGES: usize = 32;

/// Pages in one slab of small class `idx`. Among the counts of at most `SLAB_OBJS_PAGES`
/// pages that waste at most 1/64 of the slab: the fewest that hold `SLAB_MIN_OBJS` objects,
/// else the one holding the most objects (the fewest pages among equals); every class up to
/// 8 KiB reaches `SLAB_MIN_OBJS` and every class 8 objects (the `slabs_hold_min_objs` test).
/// Where no count is that tight (no class today): the least wasteful of up to 16 pages.
/// Never more than `SLAB_MAX_OBJS` objects.
pub const fn compute_slab_pages(idx: usize) -> usize {
    let size = class_size(idx);
    // The tight count of at most SLAB_OBJS_PAGES pages with the most objects so far.
    let (mut tight, mut tight_objs) = (0, 0);
    let mut p = 1;
    while p <= SLAB_OBJS_PAGES {
        let bytes = p * PAGE;
        let objs = bytes / size;
        if objs > SLAB_MAX_OBJS {
            break;
        }
        if objs >= 1 && (bytes - objs * size) * 64 <= bytes && objs > tight_objs {
            if objs >= SLAB_MIN_OBJS {
                return p;
            }
            (tight, tight_objs) = (p, objs);
        }
        p += 1;
    }
    if tight > 0 {
        return tight;
    }
    least_wasteful_slab_pages(size)
}

/// The count of at most 16 pages that wastes the smallest share of a slab of `size`-byte
/// objects (the fewest pages among equals), never more than `SLAB_MAX_OBJS` objects.
const fn least_wasteful_slab_pages(size: usize) -> usize {
    let mut best = 1;
    let mut best_waste_num = usize::MAX;
    let mut best_den = 1;
    let mut p = 1;
    while p <= 16 {
        let bytes = p * PAGE;
        let objs = bytes / size;
        if objs > SLAB_MAX_OBJS {
            break;
        }
        if objs >= 1 {
            let waste = bytes - objs * size;
            // Compare waste/bytes fractions without division.
            if waste * best_den < best_waste_num.saturating_mul(bytes)
                || best_waste_num == usize::MAX
            {
                best = p;
                best_waste_num = waste;
                best_den = bytes;
            }
        }
        p += 1;
    }
    best
}

/// Per small class: pages per slab.
pub static SLAB_PAGES: [u8; NSMALL] = {
    let mut t = [0u8; NSMALL];
    let mut i = 0;
    while i < NSMALL {
        t[i] = compute_slab_pages(i) as u8;
        i += 1;
    }
    t
};

/// Per small class: objects per slab.
pub static SLAB_OBJS: [u16; NSMALL] = {
    let mut t = [0u16; NSMALL];
    let mut i = 0;
    while i < NSMALL {
        t[i] = (compute_slab_pages(i) * PAGE / class_size(i)) as u16;
        i += 1;
    }
    t
};

// A slab's offsets stay below 2^32, which `Slab::index_at`'s exactness needs: every slab is
// far smaller.
const _: () = assert!(SLAB_OBJS_PAGES * PAGE < 1 << 31);

/// The usable size of a request of `size` bytes aligned to `align` (a power of two), and the
/// class serving it; `None` if it cannot be served (too big).
///
/// Small classes are used when some small class of at least `size` is a multiple of `align`
/// (objects sit at multiples of the class size from a page-aligned slab start); page-run and
/// chunk alignment cover larger alignments.
#[inline]
pub fn class_for(size: usize, align: usize) -> Option<usize> {
    if size > MAX_SIZE || align > MAX_SIZE {
        return None;
    }
    let size = if size == 0 { 1 } else { size };
    if align <= 16 {
        let idx = class_of(size);
        // The 8-byte class is only 8-aligned.
        return Some(if align == 16 && idx == 0 { 1 } else { idx });
    }
    if align <= PAGE {
        let mut idx = class_of(align_up(size, align)?);
        while idx < NSMALL {
            if class_size(idx).is_multiple_of(align) {
                return Some(idx);
            }
            idx += 1;
        }
        return Some(idx.max(NSMALL));
    }
    if align > CHUNK {
        // Only chunk runs can be aligned past a chunk.
        return Some(class_of(size).max(HUGE_FIRST));
    }
    // Past a page of alignment: a page run or chunk run aligned by placement.
    Some(class_of(size.max(SMALL_MAX + 1)))
}

/// Number of pages of a large class.
#[inline]
pub const fn large_pages(idx: usize) -> usize {
    class_size(idx) / PAGE
}

/// Number of chunks of a huge class.
#[inline]
pub const fn huge_chunks(idx: usize) -> usize {
    class_size(idx).div_ceil(CHUNK)
}

const _: () = assert!(class_size(NSMALL - 1) == SMALL_MAX);
const _: () = assert!(class_size(NSMALL) == 20480, "the first large class");
const _: () = assert!(class_size(HUGE_FIRST - 1) == LARGE_MAX);
const _: () = assert!(class_size(HUGE_FIRST) == CHUNK);
const _: () = assert!(LARGE_MAX < CHUNK);
const _: () = assert!(class_of_computed(MAX_SIZE) < 256);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_waste_bound() {
        let mut sizes = [0usize; 2000];
        let mut n = 0;
        let mut s = 1usize;
        while s < (1 << 40) && n < sizes.len() {
            sizes[n] = s;
            n += 1;
            s = s + s / 7 + 1;
        }
        for &size in &sizes[..n] {
            for probe in [size, size + 1, size.saturating_sub(1).max(1)] {
                let idx = class_of(probe);
                let cs = class_size(idx);
                assert!(cs >= probe, "class {idx} ({cs}) too small for {probe}");
                if idx > 0 {
                    assert!(
                        class_size(idx - 1) < probe,
                        "{probe} not in the smallest class"
                    );
                }
                // At most 25% waste, except where the 16-byte quantum forces more (17 -> 32).
                assert!(
                    (cs - probe) * 4 <= cs || cs - probe < 16,
                    "waste over 25% for {probe} in {cs}"
                );
                assert_eq!(class_of(cs), idx);
            }
        }
    }

    #[test]
    fn lookup_table_matches_arithmetic() {
        for size in 1..=8192 {
            assert_eq!(class_of(size), class_of_computed(size), "size {size}");
        }
    }

    #[test]
    fn classes_increase_and_are_aligned() {
        for i in 1..HUGE_FIRST + 40 {
            assert!(class_size(i) > class_size(i - 1));
            if class_size(i) >= 16 {
                assert_eq!(class_size(i) % 16, 0);
            }
        }
        for i in NSMALL..HUGE_FIRST {
            assert_eq!(class_size(i) % PAGE, 0);
        }
    }

    #[test]
    fn slabs_are_tight() {
        for i in 0..NSMALL {
            let bytes = SLAB_PAGES[i] as usize * PAGE;
            let objs = SLAB_OBJS[i] as usize;
            assert!((1..=SLAB_MAX_OBJS).contains(&objs));
            assert!(objs * class_size(i) <= bytes);
            let waste = bytes - objs * class_size(i);
            assert!(waste * 8 <= bytes, "class {i}: {waste} of {bytes} wasted");
        }
    }

    #[test]
    fn slabs_hold_min_objs() {
        for i in 0..NSMALL {
            let want = if class_size(i) <= 8 << 10 {
                SLAB_MIN_OBJS
            } else {
                8
            };
            assert!(
                SLAB_OBJS[i] as usize >= want,
                "class {i} ({} B): {} objects in {} pages",
                class_size(i),
                SLAB_OBJS[i],
                SLAB_PAGES[i]
            );
            assert!(SLAB_PAGES[i] as usize <= SLAB_OBJS_PAGES, "class {i}");
        }
        // The 16 KiB class is small, in slabs of 32 pages; the first large class is 20 KiB.
        let c16 = class_of(16 << 10);
        assert!(is_small(c16) && !is_small(class_of((16 << 10) + 1)));
        assert_eq!((SLAB_PAGES[c16], SLAB_OBJS[c16]), (32, 8));
    }

    #[test]
    fn aligned_classes() {
        for lg in 0..=12 {
            let align = 1usize << lg;
            for size in [1, 7, 16, 33, 100, 1000, 5000, 14000] {
                let idx = class_for(size, align).unwrap();
                assert!(class_size(idx) >= size);
                if is_small(idx) {
                    assert_eq!(class_size(idx) % align, 0, "size {size} align {align}");
                }
            }
        }
        assert!(!is_small(class_for(8, 8192).unwrap()));
        assert_eq!(class_for(usize::MAX, 1), None);
        assert_eq!(class_for(MAX_SIZE + 1, 16), None);
    }
}
