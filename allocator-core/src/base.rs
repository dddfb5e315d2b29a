//! Metadata allocation. Descriptors (extents, page-chunk maps, slabs, arenas, thread caches)
//! live in chunks the base maps for itself, never beside user data, so a heap overflow cannot
//! reach them. A bump allocator over 2 MiB mappings, plus free lists of exact sizes so that
//! descriptors are reused. One lock (rank 5, the last): callers may hold any other lock.

use crate::os;
use crate::size_class::CHUNK;
use crate::sync::{AtomicU64, ForkLock, Mutex, Ordering};

/// Free lists of exact sizes: the metadata's few sizes (descriptors, page chunks, caches, the
/// remote-free storage, heap profiling's tables) and a grown cache bin's stacks (7 sizes at the
/// default `tcache_nslots_small_max`, up to 9 at others: `tcache::grow_max`). A block of a size
/// past the lists stays unused.
pub const NLISTS: usize = 32;

struct FreeNode {
    next: *mut FreeNode,
}

struct BaseInner {
    /// The unused tail of the current mapping.
    bump: usize,
    end: usize,
    /// Free lists of exact sizes (size 0: unused slot).
    sizes: [usize; NLISTS],
    heads: [*mut FreeNode; NLISTS],
}

// SAFETY: the raw pointers are only touched under the base lock.
unsafe impl Send for BaseInner {}

pub struct Base {
    inner: Mutex<BaseInner>,
    /// Bytes mapped for metadata.
    pub mapped_bytes: AtomicU64,
    /// Bytes handed out and not freed.
    pub allocated_bytes: AtomicU64,
    /// The THP advice for metadata chunks (`metadata_thp`): 0 none, 1 huge, 2 no huge,
    /// `ADVICE_DEFER` none now and a deferred collapse (`collapse`) once touched.
    pub advice: crate::sync::plain::AtomicU8,
    /// `metadata_thp:defer`: metadata chunks queued for a deferred collapse.
    pub queued_chunks: AtomicU64,
    /// `metadata_thp:defer`: metadata chunks collapsed into huge pages.
    pub collapsed_chunks: AtomicU64,
}

/// `Base::advice` under `metadata_thp:defer`.
pub const ADVICE_DEFER: u8 = 3;

impl Base {
    crate::sync::const_unless_loom! {
        pub fn new() -> Base {
            Base {
                inner: Mutex::new(BaseInner {
                    bump: 0,
                    end: 0,
                    sizes: [0; NLISTS],
                    heads: [core::ptr::null_mut(); NLISTS],
                }),
                mapped_bytes: AtomicU64::new(0),
                allocated_bytes: AtomicU64::new(0),
                advice: crate::sync::plain::AtomicU8::new(0),
                queued_chunks: AtomicU64::new(0),
                collapsed_chunks: AtomicU64::new(0),
            }
        }
    }

    /// Allocates `size` bytes aligned to 64 (zeroed when fresh; reused blocks are zeroed too).
    /// Null when out of memory.
    pub fn alloc(&self, size: usize) -> *mut u8 {
        let size = (size + 63) & !63;
        let mut g = self.inner.lock();
        for i in 0..NLISTS {
            if g.sizes[i] == size && !g.heads[i].is_null() {
                let node = g.heads[i];
                // SAFETY: free-list nodes are blocks of `size` bytes this base handed out.
                g.heads[i] = unsafe { (*node).next };
                drop(g);
                // SAFETY: the block is `size` bytes, now owned by the caller.
                unsafe { core::ptr::write_bytes(node as *mut u8, 0, size) };
                // Relaxed: a statistic.
                self.allocated_bytes
                    .fetch_add(size as u64, Ordering::Relaxed);
                return node as *mut u8;
            }
        }
        let mut fresh = None;
        if g.end - g.bump < size {
            let len = size.max(CHUNK).next_multiple_of(CHUNK);
            let p = os::map_aligned(len, CHUNK);
            if p.is_null() {
                return p;
            }
            // Relaxed: reads and the advice value are independent settings.
            match self.advice.load(Ordering::Relaxed) {
                1 => {
                    os::advise(p, len, os::Advice::Huge);
                }
                2 => {
                    os::advise(p, len, os::Advice::NoHuge);
                }
                ADVICE_DEFER => fresh = Some((p as usize, len)),
                _ => {}
            }
            // Relaxed: a statistic.
            self.mapped_bytes.fetch_add(len as u64, Ordering::Relaxed);
            g.bump = p as usize;
            g.end = p as usize + len;
        }
        let p = g.bump;
        g.bump += size;
        drop(g);
        // After the base lock: the queue's lock ranks below it. A full queue leaves the chunk
        // on small pages. (Loom builds have no collapse queue: `defer` is never set there.)
        #[cfg(not(loom))]
        if let Some((addr, len)) = fresh {
            if crate::collapse::enqueue(addr, len, crate::collapse::METADATA, os::now_ms()) {
                // Relaxed: a statistic.
                self.queued_chunks
                    .fetch_add((len / CHUNK) as u64, Ordering::Relaxed);
            }
        }
        #[cfg(loom)]
        let _ = fresh;
        // Relaxed: a statistic.
        self.allocated_bytes
            .fetch_add(size as u64, Ordering::Relaxed);
        p as *mut u8
    }

    /// Returns a block of `size` bytes from `alloc` for reuse.
    ///
    /// # Safety
    /// `p` came from `alloc(size)` of this base and is not used afterwards.
    pub unsafe fn free(&self, p: *mut u8, size: usize) {
        let size = (size + 63) & !63;
        let mut g = self.inner.lock();
        // Relaxed: a statistic.
        self.allocated_bytes
            .fetch_sub(size as u64, Ordering::Relaxed);
        let mut slot = NLISTS;
        for i in 0..NLISTS {
            if g.sizes[i] == size {
                slot = i;
                break;
            }
            if g.sizes[i] == 0 && slot == NLISTS {
                slot = i;
            }
        }
        if slot == NLISTS {
            // More distinct sizes than lists: keep the block leaked (metadata sizes are few).
            return;
        }
        g.sizes[slot] = size;
        let node = p as *mut FreeNode;
        // SAFETY: the caller gives up the block, which is at least 64 bytes and aligned.
        unsafe { (*node).next = g.heads[slot] };
        g.heads[slot] = node;
    }

    /// The lock `fork` handlers take (rank 5).
    pub fn fork_lock(&self) -> &dyn ForkLock {
        &self.inner
    }
}

#[cfg(not(loom))]
impl Default for Base {
    fn default() -> Base {
        Base::new()
    }
}

/// The process-wide metadata allocator.
#[cfg(not(loom))]
pub static BASE: Base = Base::new();

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn bump_free_reuse() {
        static B: Base = Base::new();
        let a = B.alloc(100);
        let b = B.alloc(100);
        assert!(!a.is_null() && !b.is_null());
        assert_eq!(a as usize % 64, 0);
        assert_eq!(b as usize - a as usize, 128);
        // SAFETY: a is a 128-byte block from B.
        unsafe { a.write_bytes(0xaa, 128) };
        // SAFETY: a came from B.alloc(100) and is not used again.
        unsafe { B.free(a, 100) };
        let c = B.alloc(128);
        assert_eq!(c, a);
        // SAFETY: c is a 128-byte block.
        assert!(unsafe { core::slice::from_raw_parts(c, 128) }
            .iter()
            .all(|&x| x == 0));
        let big = B.alloc(3 << 20);
        assert!(!big.is_null());
        assert!(B.mapped_bytes.load(Ordering::Relaxed) >= 5 << 20);
    }
}
