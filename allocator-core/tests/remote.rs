//! Remote frees go home: a small block freed by a thread of another arena is not handed back
//! by that thread's own allocations (it goes to its remote-free stack, then to its owner's
//! bin), and its owner reuses it. Each test binds its threads to arenas it creates, so tests
//! running at once in this binary do not share bins.

use hugealloc::ctl::{self, CtlValue};
use hugealloc::testing::alloc::{free, malloc};
use hugealloc::testing::thread::flush_thread_cache;
use hugealloc::{thread_set_arena, Arena, HugeAlloc, Thp};
use std::alloc::{GlobalAlloc, Layout};
use std::collections::HashSet;
use std::sync::mpsc;

const BYTES: usize = 8;
/// One refill's worth of the 8 B class (half the cache bin's 128), so the owner's cache bin
/// is empty after allocating them and its next allocation refills from its arena's bin.
const HANDED: usize = 64;

/// A new arena bound to the calling thread.
fn own_arena() -> usize {
    let a = Arena::new(Thp::Default).expect("an arena");
    assert!(thread_set_arena(a.index()));
    a.index()
}

/// How the freeing thread frees: C's `free`, or Rust's sized `dealloc` (`free_layout`).
#[derive(Clone, Copy)]
enum Free {
    Plain,
    Sized,
}

fn release(p: usize, how: Free) {
    // SAFETY: a live block from this allocator of `BYTES` bytes, freed once.
    unsafe {
        match how {
            Free::Plain => free(p as *mut u8),
            Free::Sized => {
                HugeAlloc.dealloc(p as *mut u8, Layout::from_size_align(BYTES, 8).unwrap())
            }
        }
    }
}

/// The owner (in an arena of its own) allocates `HANDED` blocks and gives them to a thread
/// of another arena, which frees them (`how`), allocates 1,000 blocks of the class (none may be
/// one of them), frees its own, and then either flushes its cache (`flush`) or just exits.
/// Back in the owner, the next `HANDED` allocations are the handed blocks again.
fn handed_blocks_go_home(flush: bool, how: Free) {
    own_arena();
    let handed: Vec<usize> = (0..HANDED).map(|_| malloc(BYTES) as usize).collect();
    assert!(handed.iter().all(|&p| p != 0));
    let set: HashSet<usize> = handed.iter().copied().collect();
    let freed = set.clone();
    std::thread::spawn(move || {
        own_arena();
        // The thread's cache exists from its first allocation on (before it, frees go
        // straight to the arenas).
        let first = malloc(BYTES);
        // A sized free of one of its own blocks first: the thread's `home_chunk` is its own
        // arena's chunk, so a handed block is a miss the pagemap resolves.
        release(malloc(BYTES) as usize, how);
        for &p in &handed {
            release(p, how);
        }
        let mut mine: Vec<usize> = (0..1000).map(|_| malloc(BYTES) as usize).collect();
        mine.push(first as usize);
        let reused = mine.iter().filter(|p| freed.contains(p)).count();
        assert_eq!(
            reused, 0,
            "the freeing thread's malloc returned blocks it freed remotely"
        );
        for &p in &mine {
            // SAFETY: live blocks from this allocator, freed once.
            unsafe { free(p as *mut u8) };
        }
        if flush {
            flush_thread_cache();
        }
    })
    .join()
    .unwrap();
    let again: Vec<usize> = (0..HANDED).map(|_| malloc(BYTES) as usize).collect();
    let back = again.iter().filter(|p| set.contains(p)).count();
    assert_eq!(back, HANDED, "the owner did not get its blocks back");
    for p in again {
        // SAFETY: live blocks from this allocator, freed once.
        unsafe { free(p as *mut u8) };
    }
}

#[test]
fn remote_frees_go_home_on_flush() {
    std::thread::spawn(|| handed_blocks_go_home(true, Free::Plain))
        .join()
        .unwrap();
}

#[test]
fn remote_frees_go_home_at_thread_exit() {
    std::thread::spawn(|| handed_blocks_go_home(false, Free::Plain))
        .join()
        .unwrap();
}

#[test]
fn sized_remote_frees_go_home() {
    std::thread::spawn(|| handed_blocks_go_home(true, Free::Sized))
        .join()
        .unwrap();
}

/// A counter of the statistics, read after a new epoch.
fn stat(name: &str) -> u64 {
    ctl::write("epoch", CtlValue::U64(1)).unwrap();
    match ctl::read(name) {
        Ok(CtlValue::U64(v)) => v,
        other => panic!("{name}: {other:?}"),
    }
}

/// Small blocks the bins of arena `i` took back (`stats.arenas.<i>.small.ndalloc`).
fn small_ndalloc(i: usize) -> u64 {
    stat(&format!("stats.arenas.{i}.small.ndalloc"))
}

/// A thread that frees more remote blocks than its remote stack of their class holds (64 for
/// 8 B) sends them home in batches while it runs, the rest when it exits; none comes back
/// through its own allocations.
#[test]
fn a_full_remote_buffer_goes_home_while_the_thread_runs() {
    const N: usize = 1000;
    std::thread::spawn(|| {
        let owner = own_arena();
        let handed: Vec<usize> = (0..N).map(|_| malloc(BYTES) as usize).collect();
        let set: HashSet<usize> = handed.iter().copied().collect();
        let before = small_ndalloc(owner);
        let (freed_tx, freed_rx) = mpsc::channel();
        let (exit_tx, exit_rx) = mpsc::channel::<()>();
        let freeing = std::thread::spawn(move || {
            own_arena();
            let mut mine = vec![malloc(BYTES) as usize];
            for &p in &handed {
                // SAFETY: a live block from this allocator, freed once.
                unsafe { free(p as *mut u8) };
                mine.push(malloc(BYTES) as usize);
            }
            assert!(mine.iter().all(|p| !set.contains(p)));
            for p in mine {
                // SAFETY: live blocks from this allocator, freed once.
                unsafe { free(p as *mut u8) };
            }
            freed_tx.send(()).unwrap();
            exit_rx.recv().unwrap();
        });
        freed_rx.recv().unwrap();
        // Full buffers went home while the thread ran: all but the last partial batch.
        let home = small_ndalloc(owner) - before;
        assert!(
            home >= (N - 127) as u64 && home < N as u64,
            "{home} blocks home"
        );
        exit_tx.send(()).unwrap();
        freeing.join().unwrap();
        // The rest went home at thread exit.
        assert_eq!(small_ndalloc(owner) - before, N as u64);
    })
    .join()
    .unwrap();
}

/// Blocks of arena `i`'s bin of class `j` its bins took back.
fn bin_ndalloc(i: usize, j: usize) -> u64 {
    stat(&format!("stats.arenas.{i}.bins.{j}.ndalloc"))
}

/// Flushes into arena `i`'s bin of class `j` (`stats.arenas.<i>.bins.<j>.nflushes`).
fn bin_nflushes(i: usize, j: usize) -> u64 {
    stat(&format!("stats.arenas.{i}.bins.{j}.nflushes"))
}

/// Remote frees of several classes, interleaved, go home each to its own class's bin (each
/// class has a remote stack of its own), a whole stack per bin lock: the owner's bin of each
/// class sees one flush per `remote_cap` blocks of it, as a cache flush would bring (a
/// buffer shared by the classes, drained whole when full, brought a few blocks per flush).
#[test]
fn remote_frees_of_mixed_classes_go_to_their_own_bins() {
    const SIZES: [usize; 5] = [8, 512, 64, 16, 256];
    const N: usize = 600;
    std::thread::spawn(|| {
        let owner = own_arena();
        let classes = SIZES.map(hugealloc::testing::size_class::class_of);
        let before = classes.map(|j| bin_ndalloc(owner, j));
        let flushes_before = classes.map(|j| bin_nflushes(owner, j));
        let handed: Vec<usize> = (0..N).map(|i| malloc(SIZES[i % 5]) as usize).collect();
        std::thread::spawn(move || {
            own_arena();
            let first = malloc(8);
            for &p in &handed {
                // SAFETY: a live block from this allocator, freed once.
                unsafe { free(p as *mut u8) };
            }
            // SAFETY: as above.
            unsafe { free(first) };
            flush_thread_cache();
        })
        .join()
        .unwrap();
        for (k, &j) in classes.iter().enumerate() {
            assert_eq!(
                bin_ndalloc(owner, j) - before[k],
                (N / 5) as u64,
                "class of {} B",
                SIZES[k]
            );
            let cap = hugealloc::testing::bin::remote_cap(j);
            assert_eq!(
                bin_nflushes(owner, j) - flushes_before[k],
                (N / 5).div_ceil(cap) as u64,
                "flushes of the class of {} B (batches of {cap})",
                SIZES[k]
            );
        }
    })
    .join()
    .unwrap();
}
