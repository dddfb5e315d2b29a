//! Soak: hugealloc as the global allocator under a bounded-time mixed load
//! (`HUGEALLOC_SOAK_SECS`, default 60 s). Worker threads do random operations on a shared table
//! of slots (allocate, free, realloc, replace; sizes 1 B – 4 MiB, some over-aligned), so most
//! frees are cross-thread; each worker periodically runs a short-lived thread doing the same
//! (thread churn) and forks (the child verifies and frees a block it inherited, allocates,
//! checks and exits 0). Every block carries a pattern derived from its seed, verified before
//! every free and realloc.
//!
//! Asserted: every block's contents; every fork child's status; resident memory stays under
//! `RSS_FACTOR * peak live bytes + RSS_SLACK`; at checkpoints (workers paused with their thread
//! caches flushed) `hugealloc::stats().allocated` equals the program's own count of live usable
//! bytes plus what was allocated before the run, within `AGREE_SLACK`. Thread-cached blocks
//! count as allocated in hugealloc's figure (lib.rs, stats.rs), so the caches are flushed first;
//! what is left of the difference is std's own allocations meanwhile (thread handles,
//! captured output). Prints ops/s, peak RSS and the agreement figures.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: hugealloc::HugeAlloc = hugealloc::HugeAlloc;

const SLOTS: usize = 2048;
const WORKERS: usize = 4;
/// Operations between two short-lived threads, per worker.
const CHURN_EVERY: u64 = 4000;
/// The longest time between two short-lived threads, per worker.
const CHURN_AT_LEAST: Duration = Duration::from_millis(500);
/// Operations of one short-lived thread.
const CHURN_OPS: u64 = 300;
/// Resident memory may reach this multiple of the peak live bytes, plus `RSS_SLACK`.
const RSS_FACTOR: usize = 4;
const RSS_SLACK: usize = 256 << 20;
/// `stats().allocated` agrees with the program's count within this many bytes.
const AGREE_SLACK: usize = 64 << 10;

#[derive(Clone, Copy)]
struct Blk {
    ptr: usize,
    size: usize,
    align: usize,
    seed: u64,
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn word(seed: u64, i: usize) -> u64 {
    seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Writes the pattern of `seed` over bytes `from..size` (from a multiple of 8).
fn fill(p: *mut u8, size: usize, seed: u64, from: usize) {
    let words = size / 8;
    for i in from / 8..words {
        // SAFETY: word i lies inside the live block of `size` bytes.
        unsafe { (p as *mut u64).add(i).write_unaligned(word(seed, i)) };
    }
    for j in (words * 8).max(from)..size {
        // SAFETY: j < size.
        unsafe { *p.add(j) = word(seed, j) as u8 };
    }
}

/// Whether bytes `0..upto` of the block hold the pattern of `seed` (the pattern is laid per
/// 8-byte word, so a prefix that ends inside a word is compared byte by byte).
fn intact(p: *const u8, size: usize, seed: u64, upto: usize) -> bool {
    let upto = upto.min(size);
    let words = size / 8;
    let full = (upto / 8).min(words);
    for i in 0..full {
        // SAFETY: word i lies inside the live block.
        if unsafe { (p as *const u64).add(i).read_unaligned() } != word(seed, i) {
            return false;
        }
    }
    for j in full * 8..upto {
        let want = if j < words * 8 {
            word(seed, j / 8).to_le_bytes()[j % 8]
        } else {
            word(seed, j) as u8
        };
        // SAFETY: j < size.
        if unsafe { *p.add(j) } != want {
            return false;
        }
    }
    true
}

fn random_size(s: &mut u64) -> usize {
    let r = xorshift(s);
    let v = (r >> 8) as usize;
    match r % 100 {
        0..=69 => 1 + v % 256,
        70..=89 => 257 + v % (16 << 10),
        90..=97 => (16 << 10) + v % (496 << 10),
        _ => (512 << 10) + v % ((4 << 20) - (512 << 10) + 1),
    }
}

fn random_align(s: &mut u64, size: usize) -> usize {
    match xorshift(s) % 100 {
        0..=4 => 64,
        5..=7 => 4096,
        8 if size >= 1 << 20 => 2 << 20,
        _ => 8,
    }
}

/// The program's own count of live bytes (usable sizes, as `stats.allocated` counts them).
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK_LIVE: AtomicUsize = AtomicUsize::new(0);
static OPS: AtomicU64 = AtomicU64::new(0);
static FORKS: AtomicU64 = AtomicU64::new(0);
static CHURNED: AtomicU64 = AtomicU64::new(0);

fn new_block(s: &mut u64) -> Blk {
    let size = random_size(s);
    let align = random_align(s, size);
    let layout = Layout::from_size_align(size, align).unwrap();
    let zeroed = xorshift(s).is_multiple_of(8);
    // SAFETY: size >= 1.
    let p = unsafe {
        if zeroed {
            GLOBAL.alloc_zeroed(layout)
        } else {
            GLOBAL.alloc(layout)
        }
    };
    assert!(!p.is_null(), "allocation of {size} bytes failed");
    assert_eq!(p as usize % align, 0, "{size} bytes not {align}-aligned");
    if zeroed {
        // SAFETY: p is a live block of `size` bytes.
        let z = unsafe { std::slice::from_raw_parts(p, size) };
        assert!(z.iter().all(|&b| b == 0), "alloc_zeroed({size}) not zero");
    }
    // SAFETY: p is live.
    let usable = unsafe { hugealloc::usable_size(p) };
    assert!(usable >= size);
    let now = LIVE.fetch_add(usable, Ordering::Relaxed) + usable;
    PEAK_LIVE.fetch_max(now, Ordering::Relaxed);
    let seed = xorshift(s);
    fill(p, size, seed, 0);
    Blk {
        ptr: p as usize,
        size,
        align,
        seed,
    }
}

fn free_block(b: Blk) {
    let p = b.ptr as *mut u8;
    assert!(
        intact(p, b.size, b.seed, b.size),
        "block of {} bytes at {p:p} changed before free",
        b.size
    );
    // SAFETY: p is live.
    let usable = unsafe { hugealloc::usable_size(p) };
    LIVE.fetch_sub(usable, Ordering::Relaxed);
    // SAFETY: p is a live block with this layout, not used afterwards.
    unsafe { GLOBAL.dealloc(p, Layout::from_size_align_unchecked(b.size, b.align)) };
}

fn realloc_block(b: Blk, s: &mut u64) -> Blk {
    let p = b.ptr as *mut u8;
    assert!(
        intact(p, b.size, b.seed, b.size),
        "block changed before realloc"
    );
    let new_size = random_size(s);
    // SAFETY: p is live.
    let old_usable = unsafe { hugealloc::usable_size(p) };
    // SAFETY: p is live with this layout; new_size >= 1.
    let q = unsafe {
        GLOBAL.realloc(
            p,
            Layout::from_size_align_unchecked(b.size, b.align),
            new_size,
        )
    };
    assert!(!q.is_null(), "realloc to {new_size} failed");
    assert_eq!(q as usize % b.align, 0, "realloc lost the alignment");
    // The prefix was laid out for the old size.
    assert!(
        intact(q, b.size, b.seed, b.size.min(new_size)),
        "realloc {} -> {new_size} lost the contents",
        b.size
    );
    // SAFETY: q is live.
    let usable = unsafe { hugealloc::usable_size(q) };
    let now = LIVE.fetch_add(usable, Ordering::Relaxed) + usable;
    LIVE.fetch_sub(old_usable, Ordering::Relaxed);
    PEAK_LIVE.fetch_max(now.saturating_sub(old_usable), Ordering::Relaxed);
    // The surviving prefix keeps its words; the rest gets the same seed's pattern.
    let keep = b.size.min(new_size) / 8 * 8;
    fill(q, new_size, b.seed, keep);
    Blk {
        ptr: q as usize,
        size: new_size,
        ..b
    }
}

type Table = Arc<Vec<Mutex<Option<Blk>>>>;

/// One random operation on a random slot.
fn step(table: &Table, s: &mut u64) {
    let i = (xorshift(s) % SLOTS as u64) as usize;
    let mut slot = table[i].lock().unwrap();
    *slot = match slot.take() {
        None => Some(new_block(s)),
        Some(b) => match xorshift(s) % 4 {
            0 | 1 => {
                free_block(b);
                None
            }
            2 => Some(realloc_block(b, s)),
            _ => {
                free_block(b);
                Some(new_block(s))
            }
        },
    };
    OPS.fetch_add(1, Ordering::Relaxed);
}

/// Forks; the child verifies and frees `inherited` (its copy), allocates and checks blocks of
/// every kind, and exits 0. The parent asserts the child's status.
fn fork_check(inherited: Blk, s: &mut u64) {
    let seed = xorshift(s);
    // SAFETY: the child touches only its own copies of memory and leaves with _exit; hugealloc
    // resets its locks in the child (fork handlers).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let mut ok = intact(
            inherited.ptr as *const u8,
            inherited.size,
            inherited.seed,
            usize::MAX,
        );
        // SAFETY: the child's copy of a live block, freed once.
        unsafe {
            GLOBAL.dealloc(
                inherited.ptr as *mut u8,
                Layout::from_size_align_unchecked(inherited.size, inherited.align),
            )
        };
        let mut s = seed | 1;
        let mut mine = Vec::with_capacity(256);
        for k in 0..256u64 {
            let size = random_size(&mut s);
            let v = vec![(k % 251) as u8; size];
            mine.push(v);
        }
        let big = vec![7u8; 8 << 20];
        ok &= big[(8 << 20) - 1] == 7;
        for (k, v) in mine.iter().enumerate() {
            ok &= v.iter().all(|&b| b == (k % 251) as u8);
        }
        drop(mine);
        // SAFETY: leaving the child without running the parent's exit handlers.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "fork child failed: status {status:#x}"
    );
    FORKS.fetch_add(1, Ordering::Relaxed);
}

fn vm_rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<usize>()
        .unwrap()
        * 1024
}

/// Signals from the main thread: pause at the next operation (checkpoint), or stop.
struct Control {
    pause: AtomicBool,
    stop: AtomicBool,
    /// A worker panicked.
    failed: AtomicBool,
    /// Workers plus the main thread: all flushed and stopped.
    stopped: Barrier,
    /// Released by the main thread after measuring.
    resume: Barrier,
}

/// Runs `worker`; if it panics, records the failure and keeps joining the checkpoints (so the
/// main thread never waits for it in vain) until told to stop, then re-raises the panic.
fn worker_guarded(id: u64, table: Table, ctl: Arc<Control>, fork_every: Duration) {
    let c = ctl.clone();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        worker(id, table, c, fork_every)
    }));
    if let Err(e) = r {
        ctl.failed.store(true, Ordering::Release);
        while !ctl.stop.load(Ordering::Acquire) {
            if ctl.pause.load(Ordering::Acquire) {
                ctl.stopped.wait();
                ctl.resume.wait();
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        std::panic::resume_unwind(e);
    }
}

fn worker(id: u64, table: Table, ctl: Arc<Control>, fork_every: Duration) {
    let mut s = 0x2545_f491_4f6c_dd1d ^ (id + 1).wrapping_mul(0x9e37_79b9);
    let mut n = 0u64;
    let mut last_fork = Instant::now();
    let mut last_churn = Instant::now();
    while !ctl.stop.load(Ordering::Relaxed) {
        if ctl.pause.load(Ordering::Acquire) {
            hugealloc::testing::thread::flush_thread_cache();
            ctl.stopped.wait();
            ctl.resume.wait();
            continue;
        }
        step(&table, &mut s);
        n += 1;
        // By count, or by time where operations are slow (debug or sanitizer builds).
        if n.is_multiple_of(CHURN_EVERY) || last_churn.elapsed() >= CHURN_AT_LEAST {
            last_churn = Instant::now();
            let t = table.clone();
            let mut cs = xorshift(&mut s);
            std::thread::spawn(move || {
                for _ in 0..CHURN_OPS {
                    step(&t, &mut cs);
                }
            })
            .join()
            .unwrap();
            CHURNED.fetch_add(1, Ordering::Relaxed);
        }
        if last_fork.elapsed() >= fork_every {
            last_fork = Instant::now();
            let i = (xorshift(&mut s) % SLOTS as u64) as usize;
            // The block leaves the table while the child runs, so nothing else frees it.
            let taken = table[i].lock().unwrap().take();
            let b = taken.unwrap_or_else(|| new_block(&mut s));
            fork_check(b, &mut s);
            let mut slot = table[i].lock().unwrap();
            if let Some(other) = slot.take() {
                free_block(other);
            }
            *slot = Some(b);
        }
    }
    // Final pause so the main thread can measure with every cache flushed.
    hugealloc::testing::thread::flush_thread_cache();
}

#[test]
fn soak() {
    let secs: u64 = std::env::var("HUGEALLOC_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let table: Table = Arc::new((0..SLOTS).map(|_| Mutex::new(None)).collect());
    let ctl = Arc::new(Control {
        pause: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        failed: AtomicBool::new(false),
        stopped: Barrier::new(WORKERS + 1),
        resume: Barrier::new(WORKERS + 1),
    });
    // Everything allocated before the run (the table, the harness): the baseline.
    hugealloc::testing::thread::flush_thread_cache();
    let base = hugealloc::stats().allocated;
    let rss_start = vm_rss();
    let start = Instant::now();
    let handles: Vec<_> = (0..WORKERS as u64)
        .map(|id| {
            let (t, c) = (table.clone(), ctl.clone());
            std::thread::spawn(move || worker_guarded(id, t, c, Duration::from_millis(700)))
        })
        .collect();
    let mut peak_rss = 0usize;
    let mut peak_rss_live = 0usize;
    let mut worst_rss_excess: isize = isize::MIN;
    let mut checkpoints = Vec::new();
    let mut last_checkpoint = Instant::now();
    let end = start + Duration::from_secs(secs);
    while Instant::now() < end && !ctl.failed.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
        let rss = vm_rss();
        let peak_live = PEAK_LIVE.load(Ordering::Relaxed);
        if rss > peak_rss {
            peak_rss = rss;
            peak_rss_live = peak_live;
        }
        let bound = RSS_FACTOR * peak_live + RSS_SLACK;
        worst_rss_excess = worst_rss_excess.max(rss as isize - bound as isize);
        assert!(
            rss <= bound,
            "RSS {} MiB over the bound {} MiB (peak live {} MiB)",
            rss >> 20,
            bound >> 20,
            peak_live >> 20
        );
        if last_checkpoint.elapsed() >= Duration::from_secs(5) || checkpoints.is_empty() {
            last_checkpoint = Instant::now();
            ctl.pause.store(true, Ordering::Release);
            ctl.stopped.wait();
            ctl.pause.store(false, Ordering::Release);
            hugealloc::testing::thread::flush_thread_cache();
            let st = hugealloc::stats();
            let allocated = st.allocated;
            let live = LIVE.load(Ordering::Relaxed);
            let diff = allocated as isize - (base + live) as isize;
            checkpoints.push((live, allocated, diff));
            eprintln!(
                "soak: at {:.0} s: VmRSS {} MiB, stats.resident {} MiB, active {} MiB, dirty {} MiB, metadata {} MiB, live {} MiB",
                start.elapsed().as_secs_f64(),
                vm_rss() >> 20,
                st.resident >> 20,
                st.active >> 20,
                st.dirty >> 20,
                st.metadata >> 20,
                live >> 20
            );
            ctl.resume.wait();
        }
    }
    ctl.stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().expect("a worker failed (see its panic above)");
    }
    let elapsed = start.elapsed().as_secs_f64();
    let ops = OPS.load(Ordering::Relaxed);
    // Final agreement: only this thread is left.
    hugealloc::testing::thread::flush_thread_cache();
    let allocated = hugealloc::stats().allocated;
    let live = LIVE.load(Ordering::Relaxed);
    checkpoints.push((live, allocated, allocated as isize - (base + live) as isize));
    let worst = checkpoints
        .iter()
        .map(|c| c.2.unsigned_abs())
        .max()
        .unwrap();
    eprintln!(
        "soak: {secs} s, {WORKERS} workers, {ops} ops ({:.0} ops/s), {} short-lived threads, {} forks",
        ops as f64 / elapsed,
        CHURNED.load(Ordering::Relaxed),
        FORKS.load(Ordering::Relaxed)
    );
    eprintln!(
        "soak: RSS at start {} MiB, peak {} MiB (peak live bytes then {} MiB, overall {} MiB); bound {RSS_FACTOR} x live + {} MiB, worst margin {} MiB",
        rss_start >> 20,
        peak_rss >> 20,
        peak_rss_live >> 20,
        PEAK_LIVE.load(Ordering::Relaxed) >> 20,
        RSS_SLACK >> 20,
        -worst_rss_excess >> 20
    );
    for (k, (live, allocated, diff)) in checkpoints.iter().enumerate() {
        eprintln!(
            "soak: checkpoint {k}: live {live} B, stats.allocated - baseline {} B, difference {diff} B",
            *allocated as isize - base as isize
        );
    }
    eprintln!("soak: worst difference {worst} B (tolerance {AGREE_SLACK} B)");
    assert!(ops > 0 && FORKS.load(Ordering::Relaxed) > 0 && CHURNED.load(Ordering::Relaxed) > 0);
    assert!(
        worst <= AGREE_SLACK,
        "stats().allocated disagrees with the live bytes by {worst} B"
    );
    // Everything freed: hugealloc's figure comes back to the baseline.
    for slot in table.iter() {
        if let Some(b) = slot.lock().unwrap().take() {
            free_block(b);
        }
    }
    hugealloc::testing::thread::flush_thread_cache();
    let after = hugealloc::stats().allocated as isize - base as isize;
    eprintln!("soak: after freeing every block: stats.allocated - baseline = {after} B");
    assert!(
        after.unsigned_abs() <= AGREE_SLACK,
        "{after} B left allocated"
    );
}
