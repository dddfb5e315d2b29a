//! Two-thread allocation throughput of hugealloc against glibc (`System`), jemalloc
//! (`tikv-jemallocator`) and mimalloc, each called directly through `GlobalAlloc` in the same
//! run (issue 3's measure). Three shapes, all with random small sizes (16 B to 1 KiB):
//!
//! - `pairs`: two threads each allocate and at once free a block, concurrently.
//! - `producer_consumer`: one thread allocates and passes each block through a lock-free
//!   single-producer single-consumer ring to the other, which frees it (every free is remote).
//! - `larson`: each thread keeps a working set of 1,024 blocks and replaces random ones; one
//!   new block in eight is handed to the other thread, which puts it in its working set (so it
//!   is freed remotely later).
//!
//! Each sample spawns its two threads, lets them warm up their caches, starts them together at
//! a barrier and takes the slower thread's time; spawning and thread exit are not timed. One
//! criterion iteration is one operation per thread (`pairs`, `larson`) or one block through
//! the ring (`producer_consumer`), so the reported throughput is operations per second.
//!
//! Run: `CARGO_TARGET_DIR=/tmp/target-bench cargo bench -p hugealloc-bench --bench threads`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

static SYSTEM: System = System;
static JEMALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
static MIMALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
static HUGEALLOC: hugealloc::HugeAlloc = hugealloc::HugeAlloc;

/// Random sizes, cycled through; a power of two long.
const NSIZES: usize = 4096;
/// Working set per thread in `larson`.
const WORKING_SET: usize = 1024;
/// Ring capacity (a power of two).
const RING: usize = 1024;

/// xorshift64*: cheap, deterministic, good enough to pick sizes and slots.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Sizes from 16 B to 1 KiB, log-uniform so small classes are as common as in real programs.
fn sizes(seed: u64) -> Vec<usize> {
    let mut r = Rng(seed);
    (0..NSIZES)
        .map(|_| {
            let shift = 4 + r.next() % 7; // 16 .. 1024
            let lo = 1usize << shift;
            (lo + (r.next() as usize % lo)).min(1024)
        })
        .collect()
}

/// Allocates a block of `size` (at least 16) bytes and records the size in its first word, so
/// whoever frees it can rebuild the layout.
fn alloc_sized<A: GlobalAlloc>(a: &A, size: usize) -> *mut u8 {
    assert!(size >= 16);
    let layout = Layout::from_size_align(size, 16).unwrap();
    // SAFETY: non-zero layout.
    let p = unsafe { a.alloc(layout) };
    assert!(!p.is_null());
    // SAFETY: the block holds at least 16 bytes and is 16-byte aligned.
    unsafe { (p as *mut usize).write(size) };
    p
}

/// Frees a block made by `alloc_sized`.
///
/// # Safety
/// `p` came from `alloc_sized` on `a` and is freed once.
unsafe fn free_sized<A: GlobalAlloc>(a: &A, p: *mut u8) {
    // SAFETY: the first word holds the size the block was allocated with.
    let size = unsafe { (p as *const usize).read() };
    // SAFETY: the layout it was allocated with.
    unsafe { a.dealloc(p, Layout::from_size_align_unchecked(size, 16)) };
}

#[repr(align(128))]
struct Padded(AtomicUsize);

/// A bounded lock-free single-producer single-consumer ring of block pointers.
struct Ring {
    slots: Box<[AtomicPtr<u8>]>,
    /// Next slot to read; written by the consumer only.
    head: Padded,
    /// Next slot to write; written by the producer only.
    tail: Padded,
}

impl Ring {
    fn new() -> Ring {
        Ring {
            slots: (0..RING)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            head: Padded(AtomicUsize::new(0)),
            tail: Padded(AtomicUsize::new(0)),
        }
    }

    /// Producer side; false when full.
    fn push(&self, p: *mut u8) -> bool {
        let t = self.tail.0.load(Ordering::Relaxed);
        // Acquire pairs with the consumer's Release store of head: the slot is free again.
        if t - self.head.0.load(Ordering::Acquire) == RING {
            return false;
        }
        self.slots[t % RING].store(p, Ordering::Relaxed);
        // Release pairs with the consumer's Acquire load of tail: publishes the slot.
        self.tail.0.store(t + 1, Ordering::Release);
        true
    }

    /// Consumer side; None when empty.
    fn pop(&self) -> Option<*mut u8> {
        let h = self.head.0.load(Ordering::Relaxed);
        // Acquire pairs with the producer's Release store of tail.
        if h == self.tail.0.load(Ordering::Acquire) {
            return None;
        }
        let p = self.slots[h % RING].load(Ordering::Relaxed);
        // Release pairs with the producer's Acquire load of head.
        self.head.0.store(h + 1, Ordering::Release);
        Some(p)
    }
}

/// Waits a little for the other side of a ring: spins first (both threads have a core of their
/// own on a quiet machine), yields the CPU only after a while (a shared or busy machine).
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 256 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// Runs `body(thread_index, barrier)` on two threads; each body warms up, waits at the barrier
/// and returns its own elapsed time. Returns the slower thread's time.
fn two_threads<F>(body: F) -> Duration
where
    F: Fn(usize, &Barrier) -> Duration + Sync,
{
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|t| {
                let (body, barrier) = (&body, &barrier);
                s.spawn(move || body(t, barrier))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
    })
}

fn pairs<A: GlobalAlloc + Sync>(a: &'static A, iters: u64) -> Duration {
    two_threads(|t, barrier| {
        let sizes = sizes(0x9e37_79b9 + t as u64);
        for &s in &sizes {
            // SAFETY: a fresh block of `a`, freed once.
            unsafe { free_sized(a, alloc_sized(a, s)) };
        }
        barrier.wait();
        let start = Instant::now();
        for i in 0..iters as usize {
            let p = alloc_sized(a, sizes[i % NSIZES]);
            // SAFETY: as above.
            unsafe { free_sized(a, black_box(p)) };
        }
        start.elapsed()
    })
}

fn producer_consumer<A: GlobalAlloc + Sync>(a: &'static A, iters: u64) -> Duration {
    let ring = Ring::new();
    two_threads(|t, barrier| {
        let sizes = sizes(0x5151 + t as u64);
        for &s in &sizes {
            // SAFETY: a fresh block of `a`, freed once.
            unsafe { free_sized(a, alloc_sized(a, s)) };
        }
        barrier.wait();
        let start = Instant::now();
        if t == 0 {
            for i in 0..iters as usize {
                // The consumer frees the block.
                let p = alloc_sized(a, sizes[i % NSIZES]);
                let mut spins = 0;
                while !ring.push(p) {
                    backoff(&mut spins);
                }
            }
        } else {
            let (mut left, mut spins) = (iters, 0);
            while left > 0 {
                match ring.pop() {
                    // SAFETY: the producer made it with alloc_sized on `a`; popped once.
                    Some(p) => unsafe {
                        free_sized(a, p);
                        left -= 1;
                        spins = 0;
                    },
                    None => backoff(&mut spins),
                }
            }
        }
        start.elapsed()
    })
}

fn larson<A: GlobalAlloc + Sync>(a: &'static A, iters: u64) -> Duration {
    let rings = [Ring::new(), Ring::new()];
    let d = two_threads(|t, barrier| {
        let sizes = sizes(0x1a45_0000 + t as u64);
        let mut r = Rng(0xdead_beef + t as u64);
        let (out, inbox) = (&rings[t], &rings[1 - t]);
        let mut set: Vec<*mut u8> = (0..WORKING_SET).map(|i| alloc_sized(a, sizes[i])).collect();
        barrier.wait();
        let start = Instant::now();
        for i in 0..iters as usize {
            let x = r.next();
            let slot = (x as usize) % WORKING_SET;
            // SAFETY: every slot holds a live block of `a` made by alloc_sized, owned by this
            // thread (a block handed over leaves the set at once), and is refilled below.
            unsafe { free_sized(a, set[slot]) };
            let p = alloc_sized(a, sizes[i % NSIZES]);
            set[slot] = if (x >> 32).is_multiple_of(8) && out.push(p) {
                inbox
                    .pop()
                    .unwrap_or_else(|| alloc_sized(a, sizes[(i + 1) % NSIZES]))
            } else {
                p
            };
        }
        let elapsed = start.elapsed();
        for &p in &set {
            // SAFETY: live blocks of this thread's set, each freed once.
            unsafe { free_sized(a, p) };
        }
        elapsed
    });
    // Both threads are done: free what is still in flight.
    for ring in &rings {
        while let Some(p) = ring.pop() {
            // SAFETY: a block made by alloc_sized on `a`, popped once.
            unsafe { free_sized(a, p) };
        }
    }
    d
}

macro_rules! per_allocator {
    ($c:expr, $group:literal, $per_iter:expr, $f:ident) => {{
        let mut g = $c.benchmark_group($group);
        g.throughput(Throughput::Elements($per_iter));
        g.bench_function("system", |b| b.iter_custom(|n| $f(&SYSTEM, n)));
        g.bench_function("jemalloc", |b| b.iter_custom(|n| $f(&JEMALLOC, n)));
        g.bench_function("mimalloc", |b| b.iter_custom(|n| $f(&MIMALLOC, n)));
        g.bench_function("hugealloc", |b| b.iter_custom(|n| $f(&HUGEALLOC, n)));
        g.finish();
    }};
}

fn bench_threads(c: &mut Criterion) {
    per_allocator!(c, "threads/pairs", 2, pairs);
    per_allocator!(c, "threads/producer_consumer", 1, producer_consumer);
    per_allocator!(c, "threads/larson", 2, larson);
}

fn settings() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
}

criterion_group! {
    name = benches;
    config = settings();
    targets = bench_threads
}
criterion_main!(benches);
