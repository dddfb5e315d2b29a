//! loom models of hugealloc's concurrent structures, each driving the real code over local
//! instances (loom's atomics cannot sit in `static`s, so the process-wide allocator is not
//! built under loom):
//! - the futex mutex and the once-init (`sync`);
//! - a bin's batch refill racing a batch flush (`bin`, under its `Mutex`);
//! - the remote-free path: a block freed by another thread goes home to its own arena's bin
//!   while the owner refills from that bin (`bin::for_each_group` + `BinState::flush`);
//! - a thread cache's flush racing another thread's remote free of a block of the same slab
//!   into the same bin (`bin::for_each_group` keyed by the slab's arena, as
//!   `tcache::flush_items` does, + `BinState::flush`);
//! - the remote-free hand-off: a thread's buffer of blocks of another arena (never its own
//!   allocations) drained home under the owner's bin lock while the owner frees and refills
//!   in the same slab (`Slab::belongs_to`, `bin::RemoteFrees`, `BinState::flush`);
//! - the pagemap's leaf publication: two threads creating the same leaf, a reader meanwhile
//!   (`pagemap::Pagemap` with heap leaves from a `LeafSource`);
//! - chunk hand-out from the shared chunk source to two arenas (`chunk::ChunkSource`);
//! - the busy-run hand-off of the three-phase purge: a purger marks a page run busy under the
//!   lock, advises it without, returns it under the lock, while another thread allocates and
//!   frees pages of the same chunk (`chunk::PageChunk`: `purge_mark`, `purge_unmark`,
//!   `take_pages`, `give_pages`, under its arena's `Mutex`);
//! - metadata allocation racing (`base::Base`);
//! - arena selection by two threads starting at once (`registry::choose`).
//!
//! Run (release, bounded preemptions so it finishes in minutes):
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p hugealloc --release --test loom`
#![cfg(loom)]

use hugealloc::testing::bin::{for_each_group, BinState, RemoteFrees, REMOTE_STORAGE_BYTES};
use hugealloc::testing::chunk::{PageChunk, PAGE_PURGING};
use hugealloc::testing::pagemap::{Leaf, LeafSource, Pagemap, TAG_EXTENT, TAG_PAGES};
use hugealloc::testing::registry::{self, Slots};
use hugealloc::testing::size_class::{class_of, SLAB_OBJS};
use hugealloc::testing::slab::Slab;
use hugealloc::testing::sync::{Mutex, Once};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::collections::HashSet;

/// A pool of slab descriptors with fake, disjoint addresses (slabs never touch their memory).
struct Pool {
    slabs: Vec<*mut Slab>,
    next: AtomicUsize,
}

// SAFETY: the descriptors are handed out once each (atomic counter) and then used only under
// their bin's lock.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

impl Pool {
    fn new(n: usize, class: usize, arena: u32) -> Pool {
        let slabs = (0..n)
            .map(|i| {
                // SAFETY: Slab is plain data; all-zero is valid before init.
                let s: *mut Slab = Box::into_raw(Box::new(unsafe { std::mem::zeroed() }));
                let addr = 0x1000_0000 * (arena as usize + 1) + i * 0x10_0000;
                // SAFETY: a fresh box.
                unsafe { (*s).init_objs(addr, class, arena, OBJS_PER_SLAB) };
                s
            })
            .collect();
        Pool {
            slabs,
            next: AtomicUsize::new(0),
        }
    }
    fn take(&self) -> *mut Slab {
        // Relaxed: called under the bin lock, which orders the takes.
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        self.slabs.get(i).copied().unwrap_or(std::ptr::null_mut())
    }
    fn owner(&self, p: *mut u8) -> *mut Slab {
        *self
            .slabs
            .iter()
            // SAFETY: pool slabs are live for the pool's life.
            .find(|&&s| unsafe { (*s).index_of(p as usize).is_some() })
            .expect("pointer from this pool")
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for &s in &self.slabs {
            // SAFETY: every slab came from Box::into_raw and is no longer used.
            drop(unsafe { Box::from_raw(s) });
        }
    }
}

/// Objects in a pool's slab: two, so a fill of three crosses a slab boundary (every class's
/// real slabs hold at least 8: `Slab::init_objs` makes smaller ones).
const OBJS_PER_SLAB: usize = 2;

/// The class of the models' slabs (of `OBJS_PER_SLAB` objects each).
fn two_per_slab() -> usize {
    let class = class_of(2048);
    assert!(SLAB_OBJS[class] as usize >= OBJS_PER_SLAB);
    class
}

#[test]
fn mutex_excludes_and_publishes() {
    loom::model(|| {
        let m = Arc::new(Mutex::new(0usize));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let m = m.clone();
                thread::spawn(move || {
                    *m.lock() += 1;
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(*m.lock(), 2);
        assert!(m.try_lock().is_some());
    });
}

#[test]
fn once_runs_once_and_publishes() {
    loom::model(|| {
        let once = Arc::new(Once::new());
        let runs = Arc::new(AtomicUsize::new(0));
        let value = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (once, runs, value) = (once.clone(), runs.clone(), value.clone());
                thread::spawn(move || {
                    let ran = once.call(|| {
                        // Relaxed: published by the once's Release store.
                        runs.fetch_add(1, Ordering::Relaxed);
                        value.store(42, Ordering::Relaxed);
                    });
                    if !ran {
                        once.wait();
                    }
                    // Relaxed: the once's Acquire load orders this after the init's writes.
                    assert_eq!(value.load(Ordering::Relaxed), 42);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(runs.load(Ordering::Relaxed), 1);
    });
}

#[test]
fn bin_refill_races_flush() {
    let class = two_per_slab();
    loom::model(move || {
        let pool = Arc::new(Pool::new(4, class, 0));
        let bin = Arc::new(Mutex::new(BinState::new()));
        // The flushing thread starts with three objects of its own.
        let mut held = [std::ptr::null_mut(); 3];
        // SAFETY: pool slabs are live, of the bin's class, handed out once each.
        assert_eq!(unsafe { bin.lock().fill(&mut held, || pool.take()) }, 3);
        let flusher = {
            let (pool, bin) = (pool.clone(), bin.clone());
            let held: Vec<usize> = held.iter().map(|&p| p as usize).collect();
            thread::spawn(move || {
                let items: Vec<_> = held
                    .iter()
                    .map(|&p| (p as *mut u8, pool.owner(p as *mut u8)))
                    .collect();
                let mut released = 0;
                // SAFETY: each item names the live pool slab holding it, of that bin.
                unsafe { bin.lock().flush(&items, |_| released += 1) }.unwrap();
                released
            })
        };
        let mut got = [std::ptr::null_mut(); 3];
        // SAFETY: pool slabs are live, of the bin's class, handed out once each.
        let n = unsafe { bin.lock().fill(&mut got, || pool.take()) };
        let released = flusher.join().unwrap();
        assert_eq!(n, 3);
        // Nothing handed out twice: the refill never returns an object still held.
        let got: HashSet<usize> = got.iter().map(|&p| p as usize).collect();
        assert_eq!(got.len(), 3);
        let b = bin.lock();
        b.check();
        assert_eq!(b.stats.nmalloc - b.stats.nfree, 3);
        // Slabs the bin holds plus those released add up to those it took.
        let taken = pool.next.load(Ordering::Relaxed).min(4) as u64;
        assert_eq!(b.stats.nslabs + released, taken);
    });
}

#[test]
fn remote_free_goes_home() {
    let class = two_per_slab();
    loom::model(move || {
        let pools = Arc::new([Pool::new(3, class, 0), Pool::new(3, class, 1)]);
        let bins = Arc::new([Mutex::new(BinState::new()), Mutex::new(BinState::new())]);
        // Thread 0 (arena 0) allocated two blocks and hands one to thread 1 (arena 1).
        let mut mine = [std::ptr::null_mut(); 2];
        // SAFETY: pool slabs are live, of the bin's class, handed out once each.
        assert_eq!(
            unsafe { bins[0].lock().fill(&mut mine, || pools[0].take()) },
            2
        );
        let handed = mine[1] as usize;
        let remote = {
            let (pools, bins) = (pools.clone(), bins.clone());
            thread::spawn(move || {
                let mut own = [std::ptr::null_mut(); 1];
                // SAFETY: pool slabs are live, of the bin's class, handed out once each.
                assert_eq!(
                    unsafe { bins[1].lock().fill(&mut own, || pools[1].take()) },
                    1
                );
                // Thread 1's cache flushes a mixed batch: its own block and the remote one.
                let mut batch: Vec<(*mut u8, *mut Slab)> = [own[0], handed as *mut u8]
                    .iter()
                    .map(|&p| {
                        let s = pools.iter().find_map(|pool| {
                            pool.slabs
                                .iter()
                                // SAFETY: pool slabs are live.
                                .find(|&&s| unsafe { (*s).index_of(p as usize).is_some() })
                                .copied()
                        });
                        (p, s.unwrap())
                    })
                    .collect();
                for_each_group(
                    &mut batch,
                    // SAFETY: pool slabs are live.
                    |&(_, s)| unsafe { (*s).arena },
                    |home, group| {
                        // SAFETY: each item names the live pool slab holding it, of that bin.
                        unsafe { bins[home as usize].lock().flush(group, |_| {}) }.unwrap();
                    },
                );
            })
        };
        // Meanwhile thread 0 keeps allocating from its own bin.
        let mut more = [std::ptr::null_mut(); 2];
        // SAFETY: pool slabs are live, of the bin's class, handed out once each.
        assert_eq!(
            unsafe { bins[0].lock().fill(&mut more, || pools[0].take()) },
            2
        );
        remote.join().unwrap();
        assert!(!more.contains(&mine[0]));
        for (i, bin) in bins.iter().enumerate() {
            let b = bin.lock();
            b.check();
            // Arena 0: three blocks live (mine[0] and `more`); arena 1: none.
            let live = if i == 0 { 3 } else { 0 };
            assert_eq!(b.stats.nmalloc - b.stats.nfree, live, "arena {i}");
        }
    });
}

/// The slab of `p` among `pools`.
fn slab_in(pools: &[Pool], p: *mut u8) -> *mut Slab {
    pools
        .iter()
        .find_map(|pool| {
            pool.slabs
                .iter()
                // SAFETY: pool slabs are live for the pool's life.
                .find(|&&s| unsafe { (*s).index_of(p as usize).is_some() })
                .copied()
        })
        .expect("pointer from these pools")
}

/// Frees `items` as `tcache::flush_items` does for a small class: grouped by each slab's home
/// arena, each group under its home bin's lock. Returns the slabs released.
fn flush_home(pools: &[Pool], bins: &[Mutex<BinState>], items: &[*mut u8]) -> usize {
    let mut pairs: Vec<(*mut u8, *mut Slab)> =
        items.iter().map(|&p| (p, slab_in(pools, p))).collect();
    let mut released = 0;
    for_each_group(
        &mut pairs,
        // SAFETY: pool slabs are live.
        |&(_, s)| unsafe { (*s).arena },
        |home, group| {
            // SAFETY: each item names the live pool slab holding it, of that bin.
            unsafe { bins[home as usize].lock().flush(group, |_| released += 1) }.unwrap();
        },
    );
    released
}

#[test]
fn tcache_flush_races_remote_free() {
    let class = two_per_slab();
    loom::model(move || {
        let pools = Arc::new([Pool::new(2, class, 0), Pool::new(1, class, 1)]);
        let bins = Arc::new([Mutex::new(BinState::new()), Mutex::new(BinState::new())]);
        // Thread 0 (arena 0) takes three blocks: a full slab (a0, a1) and one of the current
        // slab (b0). It hands a1 to thread 1 (arena 1).
        let mut mine = [std::ptr::null_mut(); 3];
        // SAFETY: pool slabs are live, of the bin's class, handed out once each.
        assert_eq!(
            unsafe { bins[0].lock().fill(&mut mine, || pools[0].take()) },
            3
        );
        let (a0, a1, b0) = (mine[0], mine[1], mine[2]);
        let slab = slab_in(&pools[..], a0);
        assert_eq!(slab, slab_in(&pools[..], a1));
        assert_ne!(slab, slab_in(&pools[..], b0));
        let remote = {
            let (pools, bins) = (pools.clone(), bins.clone());
            let a1 = a1 as usize;
            thread::spawn(move || {
                let mut own = [std::ptr::null_mut(); 1];
                // SAFETY: pool slabs are live, of the bin's class, handed out once each.
                assert_eq!(
                    unsafe { bins[1].lock().fill(&mut own, || pools[1].take()) },
                    1
                );
                // Thread 1's cache frees a1 remotely, in a batch with a block of its own.
                flush_home(&pools[..], &bins[..], &[own[0], a1 as *mut u8])
            })
        };
        // Meanwhile thread 0's cache flushes a0, the other block of the same slab.
        let released_here = flush_home(&pools[..], &bins[..], &[a0]);
        let released = released_here + remote.join().unwrap();
        // The slab emptied once; the bin keeps one empty slab, so nothing went back.
        assert_eq!(released, 0);
        // SAFETY: pool slabs are live; both flushes are done.
        assert!(unsafe { (*slab).is_empty() });
        for (i, bin) in bins.iter().enumerate() {
            let b = bin.lock();
            b.check();
            // Arena 0: only b0 is live; arena 1: none.
            let live = if i == 0 { 1 } else { 0 };
            assert_eq!(b.stats.nmalloc - b.stats.nfree, live, "arena {i}");
        }
        // The emptied slab is the one kept: the next fills take its blocks again, once each.
        let mut again = [std::ptr::null_mut(); 3];
        // SAFETY: pool slabs are live, of the bin's class, handed out once each.
        assert_eq!(
            unsafe { bins[0].lock().fill(&mut again, || pools[0].take()) },
            3
        );
        let again: HashSet<usize> = again.iter().map(|&p| p as usize).collect();
        assert_eq!(again.len(), 3);
        assert!(again.contains(&(a0 as usize)) && again.contains(&(a1 as usize)));
        assert!(!again.contains(&(b0 as usize)));
    });
}

/// The hand-off of remote frees (`bin::RemoteFrees`, as `Tcache::free_remote` and
/// `remote_flush` drive it): thread 1 (arena 1) frees a block of arena 0 — `Slab::belongs_to`
/// sends it to its remote buffer, not to its cache — allocates from its cache and its own bin
/// without ever getting it, and drains the buffer home (grouped by arena and class, each group
/// flushed under that arena's bin lock) while thread 0 frees and refills in the same slab;
/// a second drain (a thread exit after a drain) finds nothing. Thread 0 then gets the block
/// back, and no block is handed out twice.
#[test]
fn remote_buffer_hands_blocks_home() {
    let class = two_per_slab();
    loom::model(move || {
        let pools = Arc::new([Pool::new(2, class, 0), Pool::new(2, class, 1)]);
        let bins = Arc::new([Mutex::new(BinState::new()), Mutex::new(BinState::new())]);
        // Thread 0 (arena 0) takes one slab's two blocks and hands a1 to thread 1.
        let mut mine = [std::ptr::null_mut(); 2];
        // SAFETY: pool slabs are live, of the bin's class, handed out once each.
        assert_eq!(
            unsafe { bins[0].lock().fill(&mut mine, || pools[0].take()) },
            2
        );
        let (a0, a1) = (mine[0], mine[1]);
        let remote = {
            let (pools, bins) = (pools.clone(), bins.clone());
            let a1 = a1 as usize;
            thread::spawn(move || {
                const HOME: u32 = 1;
                // Thread 1's cache (one class) and remote buffer.
                let mut cache: Vec<*mut u8> = Vec::new();
                let mut remote = Box::new(RemoteFrees::new());
                // Its stacks' storage, as `Tcache::free_remote` takes it at the first remote
                // free (u64s: aligned for pointers).
                let mut storage = vec![0u64; REMOTE_STORAGE_BYTES / 8];
                // SAFETY: `REMOTE_STORAGE_BYTES` of writable memory aligned for pointers, the
                // buffer's alone until `detach`.
                unsafe { remote.attach(storage.as_mut_ptr().cast()) };
                let mut own = [std::ptr::null_mut(); 1];
                // SAFETY: pool slabs are live, of the bin's class, handed out once each.
                assert_eq!(
                    unsafe { bins[1].lock().fill(&mut own, || pools[1].take()) },
                    1
                );
                // `free` of its own block and of a1: the slab's arena decides where each goes.
                for p in [own[0], a1 as *mut u8] {
                    let slab = slab_in(&pools[..], p);
                    // SAFETY: pool slabs are live.
                    if unsafe { (*slab).belongs_to(HOME) } {
                        cache.push(p);
                    } else {
                        // SAFETY: `slab` is the live pool slab holding p, allocated.
                        assert!(unsafe { remote.push(p, slab, class) });
                    }
                }
                assert_eq!(remote.len(), 1);
                // Two allocations: the cache first, then a refill from its own bin.
                let mut got = Vec::new();
                for _ in 0..2 {
                    let p = cache.pop().unwrap_or_else(|| {
                        let mut one = [std::ptr::null_mut(); 1];
                        // SAFETY: as above.
                        assert_eq!(
                            unsafe { bins[1].lock().fill(&mut one, || pools[1].take()) },
                            1
                        );
                        one[0]
                    });
                    got.push(p as usize);
                }
                assert!(
                    !got.contains(&a1),
                    "the freeing thread got the remote block"
                );
                // The drain of the class's stack (a full stack or a GC step), then thread
                // exit's drain of every stack.
                let mut home = |home: u32, c: usize, group: &mut [(*mut u8, *mut Slab)]| {
                    assert_eq!(c, class);
                    // SAFETY: grouped by arena: each slab is one of that bin's.
                    unsafe { bins[home as usize].lock().flush(group, |_| {}) }.unwrap();
                };
                // SAFETY: buffered slabs are live pool slabs.
                unsafe { remote.drain_class(class, &mut home) };
                // SAFETY: as above.
                unsafe { remote.drain(&mut home) };
                assert!(remote.is_empty());
                assert_eq!(remote.detach(), storage.as_mut_ptr().cast());
                // Thread 1's own blocks go back to its own bin.
                let items: Vec<_> = got
                    .iter()
                    .map(|&p| (p as *mut u8, slab_in(&pools[..], p as *mut u8)))
                    .collect();
                // SAFETY: each item names the live pool slab holding it, of bin 1.
                unsafe { bins[1].lock().flush(&items, |_| {}) }.unwrap();
            })
        };
        // Meanwhile thread 0 frees a0 and allocates two blocks.
        // SAFETY: a0's live pool slab, of bin 0.
        unsafe {
            bins[0]
                .lock()
                .flush(&[(a0, slab_in(&pools[..], a0))], |_| {})
        }
        .unwrap();
        let mut more = [std::ptr::null_mut(); 2];
        // SAFETY: pool slabs are live, of the bin's class, handed out once each.
        assert_eq!(
            unsafe { bins[0].lock().fill(&mut more, || pools[0].take()) },
            2
        );
        remote.join().unwrap();
        for (i, bin) in bins.iter().enumerate() {
            let b = bin.lock();
            b.check();
            // Arena 0: `more` is live; arena 1: nothing.
            let live = if i == 0 { 2 } else { 0 };
            assert_eq!(b.stats.nmalloc - b.stats.nfree, live, "arena {i}");
        }
        // Arena 0's four blocks: `more` and the two left, a1 among them, each once.
        let mut rest = [std::ptr::null_mut(); 2];
        // SAFETY: as above.
        assert_eq!(
            unsafe { bins[0].lock().fill(&mut rest, || pools[0].take()) },
            2
        );
        let all: HashSet<usize> = more.iter().chain(&rest).map(|&p| p as usize).collect();
        assert_eq!(all.len(), 4);
        assert!(
            all.contains(&(a1 as usize)),
            "the owner never got the block back"
        );
    });
}

/// Heap leaves for the pagemap model; `live` lists the leaves allocated and not given back.
#[derive(Default)]
struct HeapLeaves {
    live: std::sync::Mutex<Vec<usize>>,
}

impl LeafSource for HeapLeaves {
    fn alloc(&self) -> *mut Leaf {
        let leaf = Box::into_raw(Box::new(Leaf::new()));
        self.live.lock().unwrap().push(leaf as usize);
        leaf
    }

    unsafe fn free(&self, leaf: *mut Leaf) {
        self.live.lock().unwrap().retain(|&l| l != leaf as usize);
        // SAFETY: per the contract, from `alloc` (Box::into_raw) and seen by nobody else.
        drop(unsafe { Box::from_raw(leaf) });
    }
}

impl Drop for HeapLeaves {
    fn drop(&mut self) {
        for &leaf in self.live.get_mut().unwrap().iter() {
            // SAFETY: from `alloc`, not given back; the pagemap using it is gone or unused.
            drop(unsafe { Box::from_raw(leaf as *mut Leaf) });
        }
    }
}

#[test]
fn pagemap_leaf_publication() {
    use hugealloc::testing::size_class::CHUNK;
    // Two chunks under the same (second) leaf of the loom-sized table.
    let (a, b) = (4 * CHUNK, 5 * CHUNK);
    let (va, vb) = (0x1000 | TAG_PAGES, 0x2000 | TAG_EXTENT);
    loom::model(move || {
        let leaves = Arc::new(HeapLeaves::default());
        let pm = Arc::new(Pagemap::new());
        let writer = {
            let (pm, leaves) = (pm.clone(), leaves.clone());
            thread::spawn(move || assert!(pm.set_with(a, 1, va, &*leaves)))
        };
        let reader = {
            let pm = pm.clone();
            // A reader meanwhile sees no leaf (0) or a whole one: 0 or the value stored.
            thread::spawn(move || {
                let (ea, eb) = (pm.get(a), pm.get(b));
                assert!(ea == 0 || ea == va, "{ea:#x}");
                assert!(eb == 0 || eb == vb, "{eb:#x}");
            })
        };
        assert!(pm.set_with(b, 1, vb, &*leaves));
        writer.join().unwrap();
        reader.join().unwrap();
        assert_eq!((pm.get(a), pm.get(b)), (va, vb));
        // Both threads may have made a leaf; the loser gave its own back.
        assert_eq!(leaves.live.lock().unwrap().len(), 1);
    });
}

#[test]
fn chunk_source_hands_out_disjoint_chunks() {
    loom::model(|| {
        let source = Arc::new(hugealloc::testing::chunk::ChunkSource::new());
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let source = source.clone();
                thread::spawn(move || {
                    let mut leftover = (0, 0);
                    let p = source.take(1, 1, &mut leftover);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % hugealloc::testing::size_class::CHUNK, 0);
                    p as usize
                })
            })
            .collect();
        let got: Vec<usize> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_ne!(got[0], got[1]);
    });
}

#[test]
fn base_blocks_are_disjoint() {
    loom::model(|| {
        let base = Arc::new(hugealloc::testing::base::Base::new());
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let base = base.clone();
                thread::spawn(move || {
                    let p = base.alloc(64);
                    assert!(!p.is_null());
                    p as usize
                })
            })
            .collect();
        let got: Vec<usize> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(got[0].abs_diff(got[1]) >= 64);
    });
}

/// An arena table of loom atomics: `counts[i]` threads on arena `i`, `created` arenas.
struct Table {
    counts: [AtomicUsize; 3],
    created: AtomicUsize,
}

impl Slots for Table {
    fn load(&self, i: usize) -> Option<usize> {
        // Relaxed: the registry lock orders every access.
        (i < self.created.load(Ordering::Relaxed)).then(|| self.counts[i].load(Ordering::Relaxed))
    }
    fn create(&self) -> Option<usize> {
        // Relaxed: as above.
        let n = self.created.load(Ordering::Relaxed);
        (n < self.counts.len()).then(|| {
            self.created.store(n + 1, Ordering::Relaxed);
            n
        })
    }
    fn bind(&self, i: usize) {
        // Relaxed: as above.
        self.counts[i].fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn arena_selection_spreads_threads() {
    loom::model(|| {
        let lock = Arc::new(Mutex::new(()));
        let table = Arc::new(Table {
            counts: [
                AtomicUsize::new(0),
                AtomicUsize::new(0),
                AtomicUsize::new(0),
            ],
            created: AtomicUsize::new(1),
        });
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (lock, table) = (lock.clone(), table.clone());
                thread::spawn(move || registry::choose(&lock, 2, &*table))
            })
            .collect();
        let mut picks: Vec<usize> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        picks.sort();
        // Two automatic arenas, two threads: one each, and exactly one arena was created.
        assert_eq!(picks, [0, 1]);
        assert_eq!(table.created.load(Ordering::Relaxed), 2);
        let third = registry::choose(&lock, 2, &*table);
        assert!(third < 2);
        assert_eq!(table.counts[third].load(Ordering::Relaxed), 2);
    });
}

/// A page chunk behind its arena's lock, with one cell per page standing for the page's
/// memory: the purger "advises" (writes) the pages of its busy run with no lock held, the
/// allocating thread writes the pages it was handed, so loom reports a race if both ever hold
/// the same page; `holder` says who holds each page, checked at every hand-out.
struct PurgeChunk {
    pc: Mutex<Box<PageChunk>>,
    memory: Vec<loom::cell::UnsafeCell<u64>>,
    holder: Vec<AtomicUsize>,
}

// SAFETY: the page chunk is used only under its mutex; the memory cells are loom's, which
// check every access.
unsafe impl Send for PurgeChunk {}
// SAFETY: as above.
unsafe impl Sync for PurgeChunk {}

/// Pages 0..3 free and dirty (the purge's run), 3..5 free and clean, the rest in use.
const PURGE_DIRTY: usize = 3;
const PURGE_FREE: usize = 5;

impl PurgeChunk {
    fn new() -> PurgeChunk {
        // SAFETY: PageChunk is plain data (bitmaps, counters, words, null links): all-zero is
        // a chunk with every page in use and clean.
        let mut pc: Box<PageChunk> = Box::new(unsafe { std::mem::zeroed() });
        pc.addr = 0x4000_0000;
        pc.free.set_range(0, PURGE_FREE);
        pc.dirty.set_range(0, PURGE_DIRTY);
        pc.nfree = PURGE_FREE as u32;
        pc.ndirty_free = PURGE_DIRTY as u32;
        pc.longest = pc.free.longest_run() as u32;
        PurgeChunk {
            pc: Mutex::new(pc),
            memory: (0..PURGE_FREE)
                .map(|_| loom::cell::UnsafeCell::new(1))
                .collect(),
            holder: (0..PURGE_FREE).map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    /// Records that `who` now holds pages `start..start+n`: none may be held already.
    fn hold(&self, who: usize, start: usize, n: usize) {
        for page in start..start + n {
            // Relaxed: each hand-out happens under the chunk's lock, which orders them.
            let was = self.holder[page].swap(who, Ordering::Relaxed);
            assert_eq!(was, 0, "page {page} handed to {who} while {was} holds it");
        }
    }

    fn release(&self, start: usize, n: usize) {
        for page in start..start + n {
            // Relaxed: as in hold.
            self.holder[page].store(0, Ordering::Relaxed);
        }
    }

    /// Writes every page of `start..start+n` (a purge's `madvise`, or the program's stores).
    fn touch(&self, start: usize, n: usize, value: u64) {
        for page in start..start + n {
            // SAFETY: the caller holds these pages (the hand-off under test guarantees it;
            // loom reports the race if it does not).
            self.memory[page].with_mut(|p| unsafe { *p = value });
        }
    }

    /// The runs of free dirty pages, as the purge's first phase finds them.
    fn dirty_free_runs(pc: &PageChunk) -> Vec<(usize, usize)> {
        let mut runs = Vec::new();
        let mut i = 0;
        while i < PURGE_FREE {
            if !(pc.free.get(i) && pc.dirty.get(i)) {
                i += 1;
                continue;
            }
            let start = i;
            while i < PURGE_FREE && pc.free.get(i) && pc.dirty.get(i) {
                i += 1;
            }
            runs.push((start, i - start));
        }
        runs
    }
}

#[test]
fn purge_busy_run_is_not_handed_out() {
    const PURGER: usize = 1;
    const PROGRAM: usize = 2;
    loom::model(|| {
        let chunk = Arc::new(PurgeChunk::new());
        let purger = {
            let chunk = chunk.clone();
            thread::spawn(move || {
                // Phase 1 (lock held): choose the free dirty runs and mark them busy.
                let batch = {
                    let mut pc = chunk.pc.lock();
                    let runs = PurgeChunk::dirty_free_runs(&pc);
                    for &(start, n) in &runs {
                        pc.purge_mark(start, n);
                        chunk.hold(PURGER, start, n);
                    }
                    pc.longest = pc.free.longest_run() as u32;
                    runs
                };
                // Pages 1 and 2 are dirty whatever the program holds (it takes the first).
                assert!(!batch.is_empty());
                // Phase 2 (no lock): MADV_DONTNEED zeroes the pages.
                for &(start, n) in &batch {
                    chunk.touch(start, n, 0);
                }
                // Phase 3 (lock held): give the runs back, clean.
                let mut pc = chunk.pc.lock();
                for &(start, n) in &batch {
                    chunk.release(start, n);
                    pc.purge_unmark(start, n);
                }
            })
        };
        // The program allocates a page, uses it, frees it, twice.
        for round in 0..2 {
            let start = {
                let mut pc = chunk.pc.lock();
                let start = pc.free.find_run(1, 1).expect("a free page");
                pc.take_pages(start, 1);
                chunk.hold(PROGRAM, start, 1);
                start
            };
            chunk.touch(start, 1, 0xab + round);
            let mut pc = chunk.pc.lock();
            chunk.release(start, 1);
            pc.give_pages(start, 1);
        }
        purger.join().unwrap();
        // The busy run came back: every page free again, none left busy, the counts whole.
        let pc = chunk.pc.lock();
        assert!(pc.free.all_set(0, PURGE_FREE));
        assert_eq!(pc.nfree as usize, PURGE_FREE);
        assert!(pc.page_map[..PURGE_FREE].iter().all(|&w| w != PAGE_PURGING));
        let dirty = (0..PURGE_FREE).filter(|&i| pc.dirty.get(i)).count();
        assert_eq!(pc.ndirty_free as usize, dirty);
        assert_eq!(pc.longest as usize, pc.free.longest_run());
    });
}
