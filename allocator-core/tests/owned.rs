//! Slabs a thread owns (`owned`, issue 13): a thread refills from and flushes into its own
//! slabs without a lock; blocks of them another thread frees reach them through the bin lock
//! (the slab's remote bitmap, the owner's pending list) and the owner reuses them; a thread
//! gives its slabs back when it exits or flushes its cache. Each test binds its threads to
//! arenas it creates, so tests running at once in this binary do not share bins.

use hugealloc::ctl::{self, CtlValue};
use hugealloc::testing::alloc::{free, malloc};
use hugealloc::testing::size_class::{class_of, SLAB_OBJS};
use hugealloc::testing::thread::flush_thread_cache;
use hugealloc::{thread_set_arena, Arena, Thp};
use std::collections::HashSet;

const BYTES: usize = 48;

/// A new arena, not bound to any thread yet.
fn new_arena() -> usize {
    Arena::new(Thp::Default).expect("an arena").index()
}

/// A figure of arena `i`'s bin of `BYTES`' class, read after a new epoch.
fn bin_stat(i: usize, figure: &str) -> u64 {
    ctl::write("epoch", CtlValue::U64(1)).unwrap();
    let name = format!("stats.arenas.{i}.bins.{}.{figure}", class_of(BYTES));
    match ctl::read(&name) {
        Ok(CtlValue::U64(v)) => v,
        Ok(CtlValue::Size(v)) => v as u64,
        other => panic!("{name}: {other:?}"),
    }
}

/// A thread of the same arena frees the blocks another thread allocated (so they are blocks of
/// slabs that thread owns) and flushes its cache: they go to those slabs under the bin lock,
/// and the owner's next allocations are those blocks again, from no new slab.
#[test]
fn frees_of_another_threads_slabs_reach_their_owner() {
    const N: usize = 1024;
    let i = new_arena();
    std::thread::spawn(move || {
        assert!(thread_set_arena(i));
        let handed: Vec<usize> = (0..N).map(|_| malloc(BYTES) as usize).collect();
        assert!(handed.iter().all(|&p| p != 0));
        let set: HashSet<usize> = handed.iter().copied().collect();
        let slabs = bin_stat(i, "curslabs");
        std::thread::spawn(move || {
            assert!(thread_set_arena(i));
            for &p in &handed {
                // SAFETY: live blocks from this allocator, freed once.
                unsafe { free(p as *mut u8) };
            }
            flush_thread_cache();
        })
        .join()
        .unwrap();
        let again: Vec<usize> = (0..N).map(|_| malloc(BYTES) as usize).collect();
        let reused = again.iter().filter(|p| set.contains(p)).count();
        // All but what the owner's cache and current slab held before.
        assert!(reused >= N - 128, "{reused} of {N} blocks reused");
        assert_eq!(bin_stat(i, "curslabs"), slabs, "no slab added");
        for p in again {
            // SAFETY: live blocks from this allocator, freed once.
            unsafe { free(p as *mut u8) };
        }
    })
    .join()
    .unwrap();
}

/// A thread that exits gives its slabs back: every block it allocated and freed counts as
/// returned to its arena's bin (`curregs` 0), and its slabs are the bin's to hand out again
/// (another thread of the arena gets the same blocks, from no new slab).
#[test]
fn a_thread_gives_its_slabs_back_at_exit() {
    const N: usize = 1000;
    let i = new_arena();
    let first: HashSet<usize> = std::thread::spawn(move || {
        assert!(thread_set_arena(i));
        let blocks: Vec<usize> = (0..N).map(|_| malloc(BYTES) as usize).collect();
        assert!(bin_stat(i, "curregs") >= N as u64);
        for &p in &blocks {
            // SAFETY: live blocks from this allocator, freed once.
            unsafe { free(p as *mut u8) };
        }
        blocks.into_iter().collect()
    })
    .join()
    .unwrap();
    assert_eq!(
        bin_stat(i, "curregs"),
        0,
        "blocks of the exited thread still out"
    );
    assert_eq!(bin_stat(i, "nmalloc"), bin_stat(i, "ndalloc"));
    let slabs = bin_stat(i, "curslabs");
    assert!(slabs >= 1);
    let reused = std::thread::spawn(move || {
        assert!(thread_set_arena(i));
        let blocks: Vec<usize> = (0..N).map(|_| malloc(BYTES) as usize).collect();
        let reused = blocks.iter().filter(|p| first.contains(p)).count();
        assert_eq!(bin_stat(i, "curslabs"), slabs, "no slab added");
        for p in blocks {
            // SAFETY: live blocks from this allocator, freed once.
            unsafe { free(p as *mut u8) };
        }
        flush_thread_cache();
        assert_eq!(bin_stat(i, "curregs"), 0, "blocks out after a cache flush");
        reused
    })
    .join()
    .unwrap();
    // The same slabs, whose objects the first thread left unused (its last slab's) included.
    let slab_objs = SLAB_OBJS[class_of(BYTES)] as usize;
    assert!(
        reused >= N - slab_objs,
        "the second thread got {reused} of the first one's {N} blocks"
    );
}
