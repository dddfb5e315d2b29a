//! loom models of hugealloc's concurrent structures, each driving the real code over local
//! instances (loom's atomics cannot sit in `static`s, so the process-wide allocator is not
//! built under loom):
//! - the futex mutex and the once-init (`sync`);
//! - a bin's batch refill racing a batch flush (`bin`, under its `Mutex`);
//! - the remote-free path: a block freed by another thread goes home to its own arena's bin
//!   while the owner refills from that bin (`bin::for_each_group` + `BinState::flush`);
//! - chunk hand-out from the shared chunk source to two arenas (`chunk::ChunkSource`);
//! - metadata allocation racing (`base::Base`);
//! - arena selection by two threads starting at once (`registry::choose`).
//!
//! Run (release, bounded preemptions so it finishes in minutes):
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p hugealloc --release --test loom`
#![cfg(loom)]

use hugealloc::bin::{for_each_group, BinState};
use hugealloc::registry::{self, Slots};
use hugealloc::size_class::{class_of, SLAB_OBJS};
use hugealloc::slab::Slab;
use hugealloc::sync::{Mutex, Once};
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
                unsafe { (*s).init(addr, class, arena) };
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

/// A class with two objects per slab, so a fill of three crosses a slab boundary.
fn two_per_slab() -> usize {
    let class = class_of(2048);
    assert_eq!(SLAB_OBJS[class], 2);
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
        assert_eq!(bin.lock().fill(&mut held, || pool.take()), 3);
        let flusher = {
            let (pool, bin) = (pool.clone(), bin.clone());
            let held: Vec<usize> = held.iter().map(|&p| p as usize).collect();
            thread::spawn(move || {
                let items: Vec<_> = held
                    .iter()
                    .map(|&p| (p as *mut u8, pool.owner(p as *mut u8)))
                    .collect();
                let mut released = 0;
                bin.lock().flush(&items, |_| released += 1).unwrap();
                released
            })
        };
        let mut got = [std::ptr::null_mut(); 3];
        let n = bin.lock().fill(&mut got, || pool.take());
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
        assert_eq!(bins[0].lock().fill(&mut mine, || pools[0].take()), 2);
        let handed = mine[1] as usize;
        let remote = {
            let (pools, bins) = (pools.clone(), bins.clone());
            thread::spawn(move || {
                let mut own = [std::ptr::null_mut(); 1];
                assert_eq!(bins[1].lock().fill(&mut own, || pools[1].take()), 1);
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
                        bins[home as usize].lock().flush(group, |_| {}).unwrap();
                    },
                );
            })
        };
        // Meanwhile thread 0 keeps allocating from its own bin.
        let mut more = [std::ptr::null_mut(); 2];
        assert_eq!(bins[0].lock().fill(&mut more, || pools[0].take()), 2);
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

#[test]
fn chunk_source_hands_out_disjoint_chunks() {
    loom::model(|| {
        let source = Arc::new(hugealloc::chunk::ChunkSource::new());
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let source = source.clone();
                thread::spawn(move || {
                    let mut leftover = (0, 0);
                    let p = source.take(1, 1, &mut leftover);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % hugealloc::size_class::CHUNK, 0);
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
        let base = Arc::new(hugealloc::base::Base::new());
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
