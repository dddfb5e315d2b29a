//! Single-thread allocation cost of hugealloc against glibc (`System`), jemalloc
//! (`tikv-jemallocator`) and mimalloc, every allocator called directly through `GlobalAlloc`
//! in the same run (none of them is this binary's global allocator).
//!
//! Two shapes per size: `pair` (allocate one block and free it at once: the thread-cache fast
//! path for small sizes) and `batch` (allocate 1,000 blocks, then free them in allocation
//! order: refills and flushes of the cache, slab and page-run management). Blocks are not
//! touched, so the figures are the allocators' own bookkeeping, not page faults.
//!
//! Run: `CARGO_TARGET_DIR=/tmp/target-bench cargo bench -p hugealloc-bench --bench alloc`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::time::Duration;

static SYSTEM: System = System;
static JEMALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
static MIMALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
static HUGEALLOC: hugealloc::HugeAlloc = hugealloc::HugeAlloc;

/// The sizes of issue 2's table.
const SIZES: [usize; 7] = [16, 64, 256, 1 << 10, 16 << 10, 256 << 10, 4 << 20];
/// Blocks per batch.
const BATCH: usize = 1000;

/// Runs `f(name, allocator)` for each allocator under test, in the order of the tables.
macro_rules! for_each_allocator {
    ($f:ident, $($arg:expr),*) => {
        $f("system", &SYSTEM, $($arg),*);
        $f("jemalloc", &JEMALLOC, $($arg),*);
        $f("mimalloc", &MIMALLOC, $($arg),*);
        $f("hugealloc", &HUGEALLOC, $($arg),*);
    };
}

fn label(size: usize) -> String {
    match size {
        s if s >= 1 << 20 => format!("{}MiB", s >> 20),
        s if s >= 1 << 10 => format!("{}KiB", s >> 10),
        s => format!("{s}B"),
    }
}

fn pair<A: GlobalAlloc>(
    name: &str,
    a: &'static A,
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    size: usize,
) {
    let layout = Layout::from_size_align(size, 16).unwrap();
    g.bench_function(name, |b| {
        b.iter(|| {
            // SAFETY: a non-zero layout; the block is freed with the same layout.
            unsafe {
                let p = a.alloc(black_box(layout));
                assert!(!p.is_null());
                a.dealloc(black_box(p), layout);
            }
        })
    });
}

fn batch<A: GlobalAlloc>(
    name: &str,
    a: &'static A,
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    size: usize,
) {
    let layout = Layout::from_size_align(size, 16).unwrap();
    let mut ptrs = vec![std::ptr::null_mut::<u8>(); BATCH];
    g.bench_function(name, |b| {
        b.iter(|| {
            for slot in ptrs.iter_mut() {
                // SAFETY: a non-zero layout.
                let p = unsafe { a.alloc(black_box(layout)) };
                assert!(!p.is_null());
                *slot = p;
            }
            black_box(&mut ptrs);
            for &p in ptrs.iter() {
                // SAFETY: each block came from `a` with this layout and is freed once.
                unsafe { a.dealloc(p, layout) };
            }
        })
    });
}

fn bench_pairs(c: &mut Criterion) {
    for &size in &SIZES {
        let mut g = c.benchmark_group(format!("pair/{}", label(size)));
        g.throughput(Throughput::Elements(1));
        for_each_allocator!(pair, &mut g, size);
        g.finish();
    }
}

fn bench_batches(c: &mut Criterion) {
    for &size in &SIZES {
        let mut g = c.benchmark_group(format!("batch/{}", label(size)));
        g.throughput(Throughput::Elements(BATCH as u64));
        for_each_allocator!(batch, &mut g, size);
        g.finish();
    }
}

fn settings() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = settings();
    targets = bench_pairs, bench_batches
}
criterion_main!(benches);
