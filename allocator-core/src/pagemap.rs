//! Address → chunk metadata. A two-level radix table indexed by `addr >> 21` (the chunk
//! number): a static root of `2^ROOT_BITS` leaf pointers and lazily mapped leaves of
//! `2^LEAF_BITS` entries. Reads are lock-free (one Acquire load of the leaf pointer, one load of
//! the entry); leaves are installed with a compare-and-swap and never freed. A root slot with
//! no leaf yet points at `EMPTY_LEAF`, a static leaf of zeros that is never written, so a read
//! needs no test for a missing leaf (2 of `free`'s instructions; docs/benchmarks.md, Session
//! 12). The root is 1,024 slots (8 KiB of initialised data, one relocation each) and a leaf
//! 1 MiB of address space reserved at its first use, of which only the pages holding entries
//! in use are touched (one 4 KiB page per GiB of heap addresses).
//!
//! An entry is a tagged word: 0 for a chunk hugealloc does not own, `ptr | TAG_PAGES` for a
//! chunk holding slabs and page runs (`ptr` is its `chunk::PageChunk`), `ptr | TAG_EXTENT` for a
//! chunk in a huge block or free extent (`ptr` is its `chunk::Extent`).
//!
//! Publication protocol (what the loom model `pagemap_leaf_publication` drives): a leaf comes
//! from a [`LeafSource`] with every entry 0 and is installed with a Release CAS; a reader's
//! Acquire load of the root slot therefore sees either the empty leaf (null under loom) or a
//! leaf whose initialisation happened before; a thread that loses the race gives its own leaf
//! back and uses the winner's (Acquire on failure). The allocator's source is `os`
//! (kernel-zeroed mappings); under loom the table is small (4 x 4 entries) and the model
//! supplies heap leaves.

use crate::os;
use crate::size_class::LG_CHUNK;
use crate::sync::{AtomicPtr, AtomicUsize, Ordering};

/// Bits of user address space (x86-64 and aarch64 with 4-level tables: 47/48).
#[cfg(not(loom))]
const ADDR_BITS: u32 = 48;
#[cfg(not(loom))]
const LEAF_BITS: u32 = 17;
/// Under loom every atomic is tracked: a table of 4 leaves of 4 entries.
#[cfg(loom)]
const ADDR_BITS: u32 = LG_CHUNK + 4;
#[cfg(loom)]
const LEAF_BITS: u32 = 2;
const KEY_BITS: u32 = ADDR_BITS - LG_CHUNK;
const ROOT_BITS: u32 = KEY_BITS - LEAF_BITS;
const LEAF_LEN: usize = 1 << LEAF_BITS;
const ROOT_LEN: usize = 1 << ROOT_BITS;

pub const TAG_PAGES: usize = 1;
pub const TAG_EXTENT: usize = 2;
pub const TAG_MASK: usize = 7;

/// The second level: one entry per chunk.
pub struct Leaf {
    entries: [AtomicUsize; LEAF_LEN],
}

/// What every root slot without a leaf points at: all entries 0 ("not hugealloc's"), never
/// written (`leaf_for` replaces it, never writes into it). In `.bss`: read, its pages are the
/// kernel's shared zero page.
#[cfg(not(loom))]
static EMPTY_LEAF: Leaf = Leaf {
    entries: [const { AtomicUsize::new(0) }; LEAF_LEN],
};

/// The value of a root slot without a leaf: `EMPTY_LEAF`; null under loom, whose models
/// build their tables at run time.
#[inline(always)]
fn unset() -> *mut Leaf {
    #[cfg(not(loom))]
    {
        (&raw const EMPTY_LEAF).cast_mut()
    }
    #[cfg(loom)]
    {
        core::ptr::null_mut()
    }
}

impl Leaf {
    /// A leaf with every entry 0 (loom builds: there, leaves come from the model's heap).
    #[cfg(loom)]
    pub fn new() -> Leaf {
        Leaf {
            entries: core::array::from_fn(|_| AtomicUsize::new(0)),
        }
    }
}

#[cfg(loom)]
impl Default for Leaf {
    fn default() -> Leaf {
        Leaf::new()
    }
}

/// Where leaves come from.
pub trait LeafSource {
    /// A leaf with every entry 0 whose initialisation is complete when this returns, or null
    /// (out of memory).
    fn alloc(&self) -> *mut Leaf;
    /// Takes back a leaf from [`alloc`](LeafSource::alloc) that was never published.
    ///
    /// # Safety
    /// `leaf` came from this source's `alloc` and no other thread has seen it.
    unsafe fn free(&self, leaf: *mut Leaf);
}

/// The allocator's leaves: fresh anonymous mappings (zero-filled by the kernel).
pub struct OsLeaves;

impl LeafSource for OsLeaves {
    fn alloc(&self) -> *mut Leaf {
        os::map(core::mem::size_of::<Leaf>()) as *mut Leaf
    }

    unsafe fn free(&self, leaf: *mut Leaf) {
        os::unmap(leaf as *mut u8, core::mem::size_of::<Leaf>());
    }
}

pub struct Pagemap {
    root: [AtomicPtr<Leaf>; ROOT_LEN],
}

impl Pagemap {
    /// An empty table (not `const` under loom, whose atomics are not).
    #[cfg(loom)]
    pub fn new() -> Pagemap {
        Pagemap {
            root: core::array::from_fn(|_| AtomicPtr::new(core::ptr::null_mut())),
        }
    }

    #[cfg(not(loom))]
    pub const fn new() -> Pagemap {
        Pagemap {
            root: [const { AtomicPtr::new((&raw const EMPTY_LEAF).cast_mut()) }; ROOT_LEN],
        }
    }

    #[inline(always)]
    fn split(addr: usize) -> Option<(usize, usize)> {
        let key = addr >> LG_CHUNK;
        if key >> KEY_BITS != 0 {
            return None;
        }
        Some((key >> LEAF_BITS, key & (LEAF_LEN - 1)))
    }

    /// The entry for the chunk holding `addr` (0 when unknown).
    #[inline(always)]
    pub fn get(&self, addr: usize) -> usize {
        let Some((r, l)) = Self::split(addr) else {
            return 0;
        };
        self.entry(r, l)
    }

    /// Addresses `get` knows: below `1 << (LG_CHUNK + KEY_BITS)`; `ADDR_HIGH` is the mask of the
    /// bits above.
    pub const ADDR_HIGH: usize = !((1usize << (LG_CHUNK + KEY_BITS)) - 1);

    /// `get` for an address the caller found below the map's range (`addr & ADDR_HIGH == 0`,
    /// tested with whatever other bits it tests: `free` tests the alignment in the same
    /// instruction). An address past the range would be looked up with its high bits dropped
    /// (debug builds assert).
    #[inline(always)]
    pub fn get_in_range(&self, addr: usize) -> usize {
        debug_assert_eq!(addr & Self::ADDR_HIGH, 0);
        let key = (addr & !Self::ADDR_HIGH) >> LG_CHUNK;
        self.entry(key >> LEAF_BITS, key & (LEAF_LEN - 1))
    }

    /// The entry at root index `r`, leaf index `l` (`get`'s and `get_in_range`'s lookup); 0
    /// when no leaf is installed there. Each caller derives `r < ROOT_LEN` and `l < LEAF_LEN`
    /// from the address.
    #[inline(always)]
    fn entry(&self, r: usize, l: usize) -> usize {
        debug_assert!(r < ROOT_LEN && l < LEAF_LEN);
        // Acquire pairs with the Release CAS in `leaf_for` so the zeroed leaf is visible.
        // SAFETY: `r < ROOT_LEN` (each caller's derivation; unchecked: `get` is on `free`'s
        // fast path, where nothing may panic).
        let leaf = unsafe { self.root.get_unchecked(r) }.load(Ordering::Acquire);
        #[cfg(loom)]
        if leaf.is_null() {
            return 0;
        }
        // SAFETY: a root slot holds `EMPTY_LEAF` or an installed leaf (never freed); `l` is
        // below LEAF_LEN. Acquire pairs with the Release store in `set`, publishing the
        // metadata it points to.
        unsafe { (*leaf).entries[l].load(Ordering::Acquire) }
    }

    /// Sets the entry for every chunk of `[addr, addr + nchunks * CHUNK)`. Returns false when a
    /// leaf could not be mapped (out of memory); entries already written stay written.
    pub fn set(&self, addr: usize, nchunks: usize, value: usize) -> bool {
        self.set_with(addr, nchunks, value, &OsLeaves)
    }

    /// [`set`](Pagemap::set) with leaves from `leaves`.
    pub fn set_with(
        &self,
        addr: usize,
        nchunks: usize,
        value: usize,
        leaves: &impl LeafSource,
    ) -> bool {
        for i in 0..nchunks {
            let a = addr + (i << LG_CHUNK);
            let Some((r, l)) = Self::split(a) else {
                return false;
            };
            let leaf = self.leaf_for(r, leaves);
            if leaf.is_null() {
                return false;
            }
            // SAFETY: as in `get`. Release pairs with the Acquire load in `get`.
            unsafe { (*leaf).entries[l].store(value, Ordering::Release) };
        }
        true
    }

    /// Makes sure leaves exist for the range, so a later `set` cannot fail.
    pub fn prepare(&self, addr: usize, nchunks: usize) -> bool {
        let mut i = 0;
        while i < nchunks {
            let Some((r, _)) = Self::split(addr + (i << LG_CHUNK)) else {
                return false;
            };
            if self.leaf_for(r, &OsLeaves).is_null() {
                return false;
            }
            i += 1;
        }
        true
    }

    /// The leaf of root slot `r < ROOT_LEN`, installed from `leaves` if there is none yet;
    /// null when out of memory.
    fn leaf_for(&self, r: usize, leaves: &impl LeafSource) -> *mut Leaf {
        let Some(slot) = self.root.get(r) else {
            return core::ptr::null_mut();
        };
        // Acquire pairs with the Release CAS below.
        let leaf = slot.load(Ordering::Acquire);
        if leaf != unset() {
            return leaf;
        }
        let fresh = leaves.alloc();
        if fresh.is_null() {
            return fresh;
        }
        // Release publishes the (zeroed) leaf; Acquire on failure sees the winner's leaf.
        match slot.compare_exchange(unset(), fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => fresh,
            Err(winner) => {
                // SAFETY: `fresh` came from `leaves.alloc` and was never published.
                unsafe { leaves.free(fresh) };
                winner
            }
        }
    }
}

impl Default for Pagemap {
    fn default() -> Pagemap {
        Pagemap::new()
    }
}

/// The process-wide pagemap.
#[cfg(not(loom))]
pub static PAGEMAP: Pagemap = Pagemap::new();

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::size_class::CHUNK;

    #[test]
    fn set_get_unknown() {
        static PM: Pagemap = Pagemap::new();
        let base = 0x7f00_0000_0000usize;
        assert_eq!(PM.get(base), 0);
        assert!(PM.set(base, 3, 0x1000 | TAG_EXTENT));
        assert_eq!(PM.get(base), 0x1000 | TAG_EXTENT);
        assert_eq!(PM.get(base + CHUNK - 1), 0x1000 | TAG_EXTENT);
        assert_eq!(PM.get(base + 2 * CHUNK + 5), 0x1000 | TAG_EXTENT);
        assert_eq!(PM.get(base + 3 * CHUNK), 0);
        assert_eq!(PM.get(base - 1), 0);
        // Addresses past the table's range are never known.
        assert_eq!(PM.get(usize::MAX), 0);
        assert!(!PM.set(1usize << 60, 1, 8));
        // A leaf boundary.
        let edge = (1usize << (LG_CHUNK + LEAF_BITS)) * 3 - CHUNK;
        assert!(PM.set(edge, 2, 0x2000 | TAG_PAGES));
        assert_eq!(PM.get(edge + CHUNK), 0x2000 | TAG_PAGES);
        // `get_in_range` (free's lookup after its range test) agrees with `get` on every
        // address of the range, known or not; the range's mask is what `get` refuses.
        for addr in [
            base,
            base + CHUNK - 1,
            base + 3 * CHUNK,
            base - 1,
            edge,
            edge + CHUNK,
            0,
        ] {
            assert_eq!(PM.get_in_range(addr), PM.get(addr), "{addr:#x}");
        }
        let last = !Pagemap::ADDR_HIGH;
        assert_eq!(PM.get_in_range(last), PM.get(last));
        assert_eq!(PM.get(last + 1), 0, "past the range");
        assert_eq!((last + 1) & Pagemap::ADDR_HIGH, last + 1);
        // The slots with no leaf still share the empty leaf, untouched by the sets: the same
        // leaf index under another root slot reads 0.
        let other = base + (1usize << (LG_CHUNK + LEAF_BITS)) * 5;
        assert_eq!(PM.get(other), 0);
        assert!(EMPTY_LEAF
            .entries
            .iter()
            .all(|e| e.load(Ordering::Relaxed) == 0));
        assert_ne!(
            PM.root[base >> (LG_CHUNK + LEAF_BITS)].load(Ordering::Relaxed),
            unset()
        );
    }
}
