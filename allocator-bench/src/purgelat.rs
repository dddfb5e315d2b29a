//! `purge-latency`: allocation latency of one thread while another frees big batches and the
//! allocator purges (issue 12: a purge that held the arena lock across `madvise` stalled every
//! refill of that arena).
//!
//! - The measured thread allocates `BATCH` small blocks of one size (sizes rotate through
//!   16 B..2 KiB, so bins refill from slabs and flush back), writes a byte to each, then frees
//!   them all, timing every `malloc` and every `free` with `Instant` into two histograms
//!   allocated before the loop (the pointer array too: nothing in the loop allocates but the
//!   calls measured).
//! - The freeing thread allocates 64 MiB in blocks of 16 to 256 KiB (page runs) and 4 MiB
//!   (huge blocks), touches every page, and frees them all, again and again: dirty pages pile
//!   up and get purged.
//! - Purging: `HUGEALLOC_CONF=background_thread:true,dirty_decay_ms:50` (say) adds the
//!   background thread's decay; the freeing thread's own frees run decay passes too.
//!
//! Both threads are put on arena 0 through `mallctl("thread.arena")` when the process's
//! `malloc` has one (hugealloc or jemalloc preloaded), so purges of the freed memory compete
//! with the measured thread's refills. Prints p50, p99, p99.9, p99.99 and max of each
//! operation, in ns, and how many took 100 µs or more (the stalls).
//! Per-operation timing costs some 20-40 ns itself: compare runs, not absolute figures.

use crate::args::Args;
use std::alloc::{alloc, dealloc, Layout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Blocks the measured thread holds at once (enough to go past the thread cache).
const BATCH: usize = 4096;
/// Small sizes the measured thread cycles through.
const SIZES: [usize; 8] = [16, 48, 96, 192, 384, 768, 1536, 2048];

/// A log-linear histogram of nanoseconds: exact below 32, then 16 buckets per doubling
/// (each within 1/16 of its value).
pub struct Histogram {
    counts: [u64; 1024],
    max: u64,
    n: u64,
}

impl Histogram {
    pub fn new() -> Histogram {
        Histogram {
            counts: [0; 1024],
            max: 0,
            n: 0,
        }
    }

    fn index(v: u64) -> usize {
        if v < 32 {
            return v as usize;
        }
        let shift = 63 - v.leading_zeros() - 4;
        (shift as usize * 16 + (v >> shift) as usize).min(1023)
    }

    /// The smallest value of bucket `i`.
    fn low(i: usize) -> u64 {
        if i < 32 {
            return i as u64;
        }
        let shift = i / 16 - 1;
        ((i - shift * 16) as u64) << shift
    }

    pub fn record(&mut self, v: u64) {
        self.counts[Self::index(v)] += 1;
        self.max = self.max.max(v);
        self.n += 1;
    }

    /// The value at quantile `q` (0..1): the low end of its bucket.
    pub fn quantile(&self, q: f64) -> u64 {
        let rank = ((self.n as f64 * q).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::low(i);
            }
        }
        self.max
    }

    /// How many values were at least `v` (to within a bucket).
    pub fn at_least(&self, v: u64) -> u64 {
        self.counts.iter().skip(Self::index(v)).sum()
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    pub fn count(&self) -> u64 {
        self.n
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

type MallctlFn = unsafe extern "C" fn(
    *const libc::c_char,
    *mut libc::c_void,
    *mut usize,
    *mut libc::c_void,
    usize,
) -> libc::c_int;

/// Moves the calling thread to arena 0 through `mallctl`, if the process's `malloc` has one;
/// returns whether it did.
fn to_arena_zero() -> bool {
    if crate::global::is_hugealloc() {
        return hugealloc::thread_set_arena(0);
    }
    // SAFETY: looks a symbol up in the loaded objects; the name is NUL-terminated.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"mallctl".as_ptr()) };
    if sym.is_null() {
        return false;
    }
    // SAFETY: `mallctl` has jemalloc's signature in every library that exports it.
    let mallctl: MallctlFn = unsafe { std::mem::transmute(sym) };
    let mut zero: libc::c_uint = 0;
    // SAFETY: writes an unsigned (the type `thread.arena` takes); no old value asked for.
    let r = unsafe {
        mallctl(
            c"thread.arena".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&mut zero as *mut libc::c_uint).cast(),
            std::mem::size_of::<libc::c_uint>(),
        )
    };
    r == 0
}

fn freeing_thread(stop: Arc<AtomicBool>) -> u64 {
    to_arena_zero();
    let mut rounds = 0u64;
    let mut blocks: Vec<(*mut u8, Layout)> = Vec::with_capacity(1024);
    while !stop.load(Ordering::Relaxed) {
        let mut bytes = 0usize;
        let mut i = 0u64;
        while bytes < 64 << 20 {
            let size = if i % 16 == 15 {
                4 << 20
            } else {
                16384 + (crate::workload::mix(i ^ rounds) % (240 << 10)) as usize
            };
            let layout = Layout::from_size_align(size, 16).expect("a valid layout");
            // SAFETY: the size is not zero.
            let p = unsafe { alloc(layout) };
            assert!(!p.is_null(), "out of memory");
            for off in (0..size).step_by(4096) {
                // SAFETY: off < size, inside the block.
                unsafe { p.add(off).write(1) };
            }
            blocks.push((p, layout));
            bytes += size;
            i += 1;
        }
        for (p, layout) in blocks.drain(..) {
            // SAFETY: p is live and was allocated with this layout.
            unsafe { dealloc(p, layout) };
        }
        rounds += 1;
        std::thread::sleep(Duration::from_millis(2));
    }
    rounds
}

pub fn run(args: &Args) -> Result<(), String> {
    let run_ms: u64 = args.number(2000)?;
    let on_arena_zero = to_arena_zero();
    let stop = Arc::new(AtomicBool::new(false));
    let freer = {
        let stop = stop.clone();
        std::thread::spawn(move || freeing_thread(stop))
    };
    let mut alloc_ns = Box::new(Histogram::new());
    let mut free_ns = Box::new(Histogram::new());
    let mut ptrs: Vec<*mut u8> = vec![std::ptr::null_mut(); BATCH];
    let start = Instant::now();
    let mut round = 0usize;
    while start.elapsed() < Duration::from_millis(run_ms) {
        let size = SIZES[round % SIZES.len()];
        let layout = Layout::from_size_align(size, 8).expect("a valid layout");
        for slot in ptrs.iter_mut() {
            let t = Instant::now();
            // SAFETY: the size is not zero.
            let p = unsafe { alloc(layout) };
            alloc_ns.record(t.elapsed().as_nanos() as u64);
            assert!(!p.is_null(), "out of memory");
            // SAFETY: p is a live block of at least one byte.
            unsafe { p.write(round as u8) };
            *slot = p;
        }
        for &p in ptrs.iter() {
            let t = Instant::now();
            // SAFETY: p is live and was allocated with this layout.
            unsafe { dealloc(p, layout) };
            free_ns.record(t.elapsed().as_nanos() as u64);
        }
        round += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let freer_rounds = freer.join().map_err(|_| "the freeing thread panicked")?;
    println!("same_arena: {on_arena_zero}  freeing rounds: {freer_rounds}");
    for (name, h) in [("malloc", &alloc_ns), ("free", &free_ns)] {
        println!(
            "{name:7} n={} p50={} ns p99={} ns p99.9={} ns p99.99={} ns max={} ns \
             >=100us: {}",
            h.count(),
            h.quantile(0.5),
            h.quantile(0.99),
            h.quantile(0.999),
            h.quantile(0.9999),
            h.max(),
            h.at_least(100_000)
        );
    }
    println!(
        "result: ops={} malloc_p50_ns={} malloc_p99_ns={} malloc_p999_ns={} malloc_max_ns={} \
         free_p50_ns={} free_p99_ns={} free_p999_ns={} free_max_ns={} freer_rounds={}",
        alloc_ns.count(),
        alloc_ns.quantile(0.5),
        alloc_ns.quantile(0.99),
        alloc_ns.quantile(0.999),
        alloc_ns.max(),
        free_ns.quantile(0.5),
        free_ns.quantile(0.99),
        free_ns.quantile(0.999),
        free_ns.max(),
        freer_rounds
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_their_values() {
        for v in (0..100_000u64).chain([1 << 40, u32::MAX as u64]) {
            let i = Histogram::index(v);
            assert!(Histogram::low(i) <= v, "v {v} bucket {i}");
            assert!(
                v - Histogram::low(i) <= v / 16,
                "v {v} bucket {i} too coarse"
            );
        }
        let mut h = Histogram::new();
        for v in 1..=1000 {
            h.record(v);
        }
        assert_eq!(h.quantile(0.5), 496);
        assert_eq!(h.max(), 1000);
    }
}
