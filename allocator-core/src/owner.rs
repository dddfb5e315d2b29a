//! What a pointer is, from the pagemap alone: a small object (its slab and class), a large
//! block (its page chunk and first page) or a huge block (its extent), and the arena owning it.
//! A pointer hugealloc did not hand out aborts with a message naming it. Lock-free: it reads the
//! pagemap and descriptors that live as long as their chunk is in use. Also the huge-backed
//! bytes of an arena, matched from `/proc/self/smaps` through the pagemap.

use crate::chunk::*;
use crate::diag;
use crate::os;
use crate::pagemap::{PAGEMAP, TAG_EXTENT, TAG_MASK, TAG_PAGES};
use crate::size_class::{CHUNK, CHUNK_PAGES};
use crate::slab::{slab_of_word, Slab};

/// What a pointer is, from the pagemap alone.
pub enum Owner {
    Small {
        chunk: *mut PageChunk,
        slab: *mut Slab,
        class: usize,
    },
    Large {
        chunk: *mut PageChunk,
        page: usize,
        class: usize,
    },
    Huge {
        extent: *mut Extent,
    },
}

/// Finds the owner of `p`, or aborts naming the pointer if hugealloc did not hand it out.
#[inline(always)]
pub fn owner_of(p: *mut u8) -> Owner {
    let addr = p as usize;
    let entry = PAGEMAP.get(addr);
    match entry & TAG_MASK {
        TAG_PAGES => {
            let pc = (entry & !TAG_MASK) as *mut PageChunk;
            let page = page_index(addr);
            // SAFETY: a TAG_PAGES entry always points at the live PageChunk of its chunk;
            // `page < CHUNK_PAGES`, the page map's length.
            let word = unsafe { *(*pc).page_map.get_unchecked(page) };
            if let Some(slab) = slab_of_word(word) {
                // SAFETY: a slab page's word names the live slab holding the page.
                let class = unsafe { (*slab).class } as usize;
                return Owner::Small {
                    chunk: pc,
                    slab,
                    class,
                };
            }
            match word & PAGE_KIND {
                PAGE_LARGE if addr & (os::PAGE - 1) == 0 => Owner::Large {
                    chunk: pc,
                    page,
                    class: (word >> PAGE_CLASS_SHIFT) as usize,
                },
                _ => diag::fatal_ptr(
                    "free of a pointer hugealloc does not own (inside a page run or a free page):",
                    p,
                ),
            }
        }
        TAG_EXTENT => {
            let e = (entry & !TAG_MASK) as *mut Extent;
            // SAFETY: a TAG_EXTENT entry always points at the live Extent of its chunk.
            let (state, start) = unsafe { ((*e).state, (*e).addr) };
            if state != STATE_HUGE || start != addr {
                diag::fatal_ptr("free of a pointer hugealloc does not own (inside a huge block or a free chunk):", p);
            }
            Owner::Huge { extent: e }
        }
        _ => diag::fatal_ptr("free of a pointer hugealloc never returned:", p),
    }
}

/// The index of the page holding `addr` inside its chunk. Chunks are `CHUNK`-aligned, so it is
/// the address's bits below the chunk: no load of the chunk's base, and always below
/// `CHUNK_PAGES` (the page map's length).
#[inline(always)]
pub const fn page_index(addr: usize) -> usize {
    (addr >> os::LG_PAGE) & (CHUNK_PAGES - 1)
}

const _: () = assert!(CHUNK_PAGES.is_power_of_two() && CHUNK_PAGES << os::LG_PAGE == CHUNK);

/// The slab holding `p`, which the caller says is of small class `class`, in one pagemap
/// lookup (the chunk's entry, then the page's word: `slab | PAGE_SLAB`, the class the
/// descriptor's); aborts naming the pointer when it is not a small block of that class (a
/// flush's check of every block it returns).
#[inline(always)]
pub fn slab_of(p: *mut u8, class: usize) -> *mut Slab {
    let addr = p as usize;
    if let Some(pc) = page_chunk_of_entry(PAGEMAP.get(addr)) {
        // SAFETY: a TAG_PAGES entry points at the live PageChunk of its chunk; `page_index`
        // is below CHUNK_PAGES, the page map's length.
        let word = unsafe { *(*pc).page_map.get_unchecked(page_index(addr)) };
        if let Some(slab) = slab_of_word(word) {
            // SAFETY: a slab page's word names the live slab holding the page.
            if unsafe { (*slab).class } as usize == class {
                return slab;
            }
        }
    }
    slab_of_bad(p)
}

/// `slab_of`'s abort: `owner_of`'s message for a pointer hugealloc does not own, else a size
/// of another class.
#[cold]
#[inline(never)]
fn slab_of_bad(p: *mut u8) -> ! {
    let _ = owner_of(p);
    diag::fatal_ptr("free with a size of another class:", p)
}

/// The class of a live block, from the pagemap alone.
#[inline(always)]
pub fn class_of_ptr(p: *mut u8) -> usize {
    match owner_of(p) {
        Owner::Small { class, .. } | Owner::Large { class, .. } => class,
        // SAFETY: owner_of checked the extent is a live huge block.
        Owner::Huge { extent } => unsafe { (*extent).class as usize },
    }
}

/// The arena owning a block.
#[inline]
pub fn arena_index_of(owner: &Owner) -> u32 {
    // SAFETY: owners come from owner_of, which returns live descriptors.
    unsafe {
        match *owner {
            Owner::Small { slab, .. } => (*slab).arena,
            Owner::Large { chunk, .. } => (*chunk).arena,
            Owner::Huge { extent } => (*extent).arena,
        }
    }
}

// The descriptor pointers these methods take (`PageChunk`, `Extent`) come only from
// `owner_of`, which validates them against the pagemap; making every method `unsafe` would
// move that one fact to every call site without adding a check.

/// Bytes of arena `index`'s chunks backed by huge pages now: `AnonHugePages` of the mappings
/// in `/proc/self/smaps` holding its chunks. A mapping holding chunks of several arenas has its
/// figure shared in proportion to their chunk counts (advice usually splits mappings along
/// extents, so this is mostly exact). Reads the file: call it on request, not on a hot path.
pub fn huge_backed_bytes(index: u32) -> u64 {
    let mut total = 0u64;
    let (mut mine, mut known) = (0u64, 0u64);
    os::for_each_line(b"/proc/self/smaps\0", |line| {
        if let Some((start, end)) = os::smaps_range(line) {
            (mine, known) = (0, 0);
            let mut addr = (start + CHUNK - 1) & !(CHUNK - 1);
            while addr + CHUNK <= end {
                let entry = PAGEMAP.get(addr);
                // SAFETY: tagged entries point at live descriptors (a racing change of
                // owner only skews this estimate).
                let owner = unsafe {
                    match entry & TAG_MASK {
                        TAG_PAGES => Some((*((entry & !TAG_MASK) as *const PageChunk)).arena),
                        TAG_EXTENT => Some((*((entry & !TAG_MASK) as *const Extent)).arena),
                        _ => None,
                    }
                };
                if let Some(a) = owner {
                    known += 1;
                    mine += (a == index) as u64;
                }
                addr += CHUNK;
            }
        } else if let Some(rest) = line.strip_prefix(b"AnonHugePages:") {
            if mine > 0 {
                let kib = rest
                    .iter()
                    .filter(|c| c.is_ascii_digit())
                    .fold(0u64, |v, &c| v * 10 + (c - b'0') as u64);
                // `known >= mine > 0`: the division cannot fail.
                total += (kib * 1024 * mine).checked_div(known).unwrap_or(0);
            }
        }
    });
    total
}
