//! Out of memory, from Rust. A child process (this test binary re-executed with
//! `HUGEALLOC_OOM=<case>`) warms hugealloc up, lowers its own `RLIMIT_AS` to a little above
//! what it has mapped, so that `mmap` fails with `ENOMEM`, and then checks that:
//! - every `GlobalAlloc` entry point (`alloc`, `alloc_zeroed`, `realloc`, aligned `alloc`)
//!   returns null for a request that cannot be met, and a failed `realloc` leaves the block
//!   as it was;
//! - filling the address space with large, huge and small blocks ends in null, not in an
//!   abort;
//! - small blocks the thread cache holds are still handed out once nothing can be mapped;
//! - other threads, one warmed up before the limit and one that never allocated, can still
//!   call the allocator (it returns, null or a block: no deadlock, no abort), so no lock was
//!   left held by a failure;
//! - after the blocks are freed, allocations of the same kinds succeed again, and once the
//!   limit is raised a 1 GiB block can be had.
//!
//! The child allocates nothing from the system heap once the limit is set (messages are
//! formatted on the stack and written with `write(2)`), so a failure is hugealloc's. The parent
//! bounds the child's run time (a hang fails the test instead of stopping the suite).

use core::alloc::{GlobalAlloc, Layout};
use core::fmt::Write as _;
use hugealloc::HugeAlloc;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;
const GIB: usize = 1 << 30;
/// Address space the child may map past what it has when the limit is set.
const HEADROOM: usize = 64 * MIB;
/// Small blocks parked in the thread cache before the limit.
const CACHED: usize = 32;

/// A message formatted without allocating.
struct StackBuf {
    buf: [u8; 512],
    len: usize,
}

impl core::fmt::Write for StackBuf {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

fn say(args: core::fmt::Arguments) {
    let mut b = StackBuf {
        buf: [0; 512],
        len: 0,
    };
    let _ = b.write_fmt(args);
    let _ = b.write_str("\n");
    // SAFETY: writes the initialised prefix of a stack buffer to stderr.
    unsafe { libc::write(2, b.buf.as_ptr().cast(), b.len) };
}

/// Fails the child with a message, without allocating (a panic would format into a `String`).
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            say(format_args!("oom-child: FAILED at line {}: {}", line!(), format_args!($($fmt)+)));
            // SAFETY: leaving the child at once, with a failure status.
            unsafe { libc::_exit(1) };
        }
    };
}

fn layout(size: usize, align: usize) -> Layout {
    Layout::from_size_align(size, align).unwrap()
}

fn alloc(size: usize, align: usize) -> *mut u8 {
    // SAFETY: every size used here is non-zero.
    unsafe { HugeAlloc.alloc(layout(size, align)) }
}

/// Frees a block from `alloc(size, align)`.
fn free(p: *mut u8, size: usize, align: usize) {
    // SAFETY: p is a live block with this layout (callers pass what they allocated).
    unsafe { HugeAlloc.dealloc(p, layout(size, align)) }
}

/// Writes a byte pattern at the start and the end of a block and reads it back.
fn touch(p: *mut u8, size: usize, seed: u8) -> bool {
    // SAFETY: p is a live block of at least `size` bytes.
    unsafe {
        *p = seed;
        *p.add(size - 1) = seed ^ 0x5a;
        *p == seed && *p.add(size - 1) == seed ^ 0x5a
    }
}

fn vm_size() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmSize:")).unwrap();
    let kb: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

fn set_limit(bytes: u64) -> bool {
    let lim = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the local struct.
    unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) == 0 }
}

/// Fills with blocks of `size` bytes until the allocator returns null (at most `out.len()`
/// blocks); returns how many it got.
fn exhaust(out: &mut [usize], size: usize) -> usize {
    for (i, slot) in out.iter_mut().enumerate() {
        let p = alloc(size, 8);
        if p.is_null() {
            return i;
        }
        ensure!(
            touch(p, size, i as u8),
            "block {i} of {size} bytes not writable"
        );
        *slot = p as usize;
    }
    out.len()
}

/// A helper thread: the main thread asks for round `k` by storing `k` in `go`; the helper
/// runs it and stores its result, then `k` in `done`.
struct Helper {
    /// 1 once the thread runs (and, if warm, has allocated).
    ready: AtomicU32,
    go: AtomicU32,
    done: AtomicU32,
    result: AtomicU32,
}

const GOT_BLOCK: u32 = 1;
const GOT_NULL: u32 = 2;

/// Spins (yielding) until `flag` reaches `value`; allocates nothing.
fn wait_until(flag: &AtomicU32, value: u32) {
    // Acquire pairs with the Release store of the other thread.
    while flag.load(Ordering::Acquire) < value {
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
}

/// One round on a helper thread: a small block (from its cache, if it has one), a large and
/// a huge one. Under the limit the huge one must fail and the others may (every call must
/// return); with the limit raised all must succeed.
fn helper_round(name: &str, limited: bool) -> u32 {
    let small = alloc(48, 8);
    let large = alloc(MIB, 8);
    let huge = alloc(GIB, 8);
    if limited {
        ensure!(huge.is_null(), "{name}: 1 GiB under the limit");
    } else {
        ensure!(
            !small.is_null() && !large.is_null() && !huge.is_null(),
            "{name}: no limit"
        );
    }
    for (p, size) in [(small, 48), (large, MIB), (huge, GIB)] {
        if !p.is_null() {
            ensure!(touch(p, size, 9), "{name}: block not writable");
            free(p, size, 8);
        }
    }
    if small.is_null() {
        GOT_NULL
    } else {
        GOT_BLOCK
    }
}

fn spawn_helper(name: &'static str, warm: bool, h: &'static Helper) {
    std::thread::spawn(move || {
        if warm {
            let p = alloc(48, 8);
            ensure!(!p.is_null(), "{name}: warm-up");
            free(p, 48, 8);
        }
        // Release pairs with the Acquire in wait_until.
        h.ready.store(1, Ordering::Release);
        for round in 1..=2 {
            wait_until(&h.go, round);
            let r = helper_round(name, round == 1);
            h.result.store(r, Ordering::Relaxed);
            // Release pairs with the Acquire in wait_until (publishes `result`).
            h.done.store(round, Ordering::Release);
        }
    });
}

/// Runs round `k` on `h` and returns its result.
fn helper_run(h: &Helper, k: u32) -> u32 {
    // Release pairs with the helper's Acquire in wait_until.
    h.go.store(k, Ordering::Release);
    wait_until(&h.done, k);
    // Relaxed: ordered by the Acquire of `done`.
    h.result.load(Ordering::Relaxed)
}

fn child() {
    static WARM: Helper = Helper {
        ready: AtomicU32::new(0),
        go: AtomicU32::new(0),
        done: AtomicU32::new(0),
        result: AtomicU32::new(0),
    };
    static FRESH: Helper = Helper {
        ready: AtomicU32::new(0),
        go: AtomicU32::new(0),
        done: AtomicU32::new(0),
        result: AtomicU32::new(0),
    };

    // Warm up before the limit: the allocator's state, the helper threads' stacks, and the
    // bookkeeping arrays (from the system heap).
    let first = alloc(100, 8);
    ensure!(!first.is_null(), "first allocation");
    spawn_helper("warm thread", true, &WARM);
    spawn_helper("fresh thread", false, &FRESH);
    let mut large = vec![0usize; 4096];
    let mut huge = vec![0usize; 1024];
    let mut small = vec![0usize; 400_000];
    // A live block to resize, and blocks parked in this thread's cache.
    let keep = alloc(1000, 8);
    ensure!(!keep.is_null(), "keep");
    // SAFETY: keep is a live 1000-byte block.
    unsafe { keep.write_bytes(0xab, 1000) };
    let mut parked = [core::ptr::null_mut::<u8>(); CACHED];
    for p in parked.iter_mut() {
        *p = alloc(64, 8);
        ensure!(!p.is_null(), "parking");
    }
    for p in parked {
        free(p, 64, 8);
    }
    // Warm the stderr path too (std's stderr is unbuffered; this only makes sure).
    say(format_args!(
        "oom-child: limit at VmSize + {} MiB",
        HEADROOM / MIB
    ));
    wait_until(&WARM.ready, 1);
    wait_until(&FRESH.ready, 1);
    let limit = vm_size() + HEADROOM;
    ensure!(set_limit(limit as u64), "setrlimit");

    // 1. Requests that cannot be met: every entry point returns null.
    ensure!(alloc(GIB, 8).is_null(), "alloc 1 GiB");
    ensure!(alloc(GIB, 2 * MIB).is_null(), "alloc 1 GiB aligned 2 MiB");
    ensure!(
        alloc(256 * MIB, 64 * MIB).is_null(),
        "alloc 256 MiB aligned 64 MiB"
    );
    // SAFETY: non-zero size.
    let z = unsafe { HugeAlloc.alloc_zeroed(layout(GIB, 8)) };
    ensure!(z.is_null(), "alloc_zeroed 1 GiB");
    // SAFETY: keep is live with this layout.
    let r = unsafe { HugeAlloc.realloc(keep, layout(1000, 8), GIB) };
    ensure!(r.is_null(), "realloc to 1 GiB");
    // SAFETY: keep is still live (the realloc failed).
    let intact = unsafe { core::slice::from_raw_parts(keep, 1000) }
        .iter()
        .all(|&b| b == 0xab);
    ensure!(intact, "a failed realloc changed the block");
    // SAFETY: keep is live.
    let usable = unsafe { hugealloc::usable_size(keep) };
    ensure!(usable >= 1000, "usable size after realloc");

    // 2. Fill the address space: huge blocks, large runs, then small objects.
    let nhuge = exhaust(&mut huge, 3 * MIB);
    let nlarge = exhaust(&mut large, MIB);
    let nsmall = exhaust(&mut small, 1000);
    say(format_args!(
        "oom-child: filled with {nlarge} x 1 MiB, {nhuge} x 3 MiB, {nsmall} x 1000 B before null"
    ));
    ensure!(nhuge > 0 && nhuge < huge.len(), "3 MiB blocks: {nhuge}");
    ensure!(nlarge < large.len(), "1 MiB blocks never failed");
    ensure!(nsmall < small.len(), "1000-byte blocks never failed");
    ensure!(
        nlarge + nhuge * 3 + nsmall / 1024 <= HEADROOM / MIB + 64,
        "more than the limit?"
    );
    ensure!(alloc(MIB, 8).is_null(), "1 MiB after exhaustion");
    // A huge block whose realloc cannot grow in place or move.
    {
        let h = huge[0] as *mut u8;
        // SAFETY: h is a live 3 MiB block.
        let r = unsafe { HugeAlloc.realloc(h, layout(3 * MIB, 8), 64 * MIB) };
        ensure!(r.is_null(), "huge realloc to 64 MiB under the limit");
        ensure!(touch(h, 3 * MIB, 1), "huge block after failed realloc");
    }

    // 3. The thread cache still serves what it holds.
    for (i, p) in parked.iter_mut().enumerate() {
        *p = alloc(64, 8);
        ensure!(
            !p.is_null(),
            "cached small block {i} of {CACHED} not served under OOM"
        );
    }

    // 4. Other threads are not blocked by anything a failure left behind.
    for (name, h) in [("warm", &WARM), ("fresh", &FRESH)] {
        let r = helper_run(h, 1);
        say(format_args!(
            "oom-child: {name} thread under OOM: small block {}",
            if r == GOT_BLOCK { "served" } else { "null" }
        ));
        if name == "warm" {
            ensure!(
                r == GOT_BLOCK,
                "the warm thread's cached small block was not served"
            );
        }
    }

    // 5. Freed memory is reusable under the same limit.
    for p in parked {
        free(p, 64, 8);
    }
    for &p in &large[..nlarge] {
        free(p as *mut u8, MIB, 8);
    }
    for &p in &huge[..nhuge] {
        free(p as *mut u8, 3 * MIB, 8);
    }
    for &p in &small[..nsmall] {
        free(p as *mut u8, 1000, 8);
    }
    let again_large = exhaust(&mut large[..nlarge.max(1)], MIB);
    ensure!(
        again_large == nlarge.max(1),
        "after frees: {again_large} of {nlarge} x 1 MiB"
    );
    for &p in &large[..again_large] {
        free(p as *mut u8, MIB, 8);
    }
    {
        let again_huge = exhaust(&mut huge[..nhuge], 3 * MIB);
        ensure!(
            again_huge == nhuge,
            "after frees: {again_huge} of {nhuge} x 3 MiB"
        );
        for &p in &huge[..again_huge] {
            free(p as *mut u8, 3 * MIB, 8);
        }
    }
    let again_small = exhaust(&mut small[..nsmall], 1000);
    ensure!(
        again_small == nsmall,
        "after frees: {again_small} of {nsmall} x 1000 B"
    );
    for &p in &small[..again_small] {
        free(p as *mut u8, 1000, 8);
    }

    // 6. The limit raised: big requests succeed, here and on the other threads.
    ensure!(set_limit(libc::RLIM_INFINITY), "raising the limit");
    let big = alloc(GIB, 2 * MIB);
    ensure!(!big.is_null(), "1 GiB after the limit was raised");
    ensure!((big as usize).is_multiple_of(2 * MIB), "alignment");
    ensure!(touch(big, GIB, 3), "1 GiB block");
    free(big, GIB, 2 * MIB);
    // SAFETY: keep is live with this layout.
    let grown = unsafe { HugeAlloc.realloc(keep, layout(1000, 8), 64 * MIB) };
    ensure!(!grown.is_null(), "realloc after the limit was raised");
    // SAFETY: grown holds the 1000 bytes of keep.
    let intact = unsafe { core::slice::from_raw_parts(grown, 1000) }
        .iter()
        .all(|&b| b == 0xab);
    ensure!(intact, "realloc lost the contents");
    free(grown, 64 * MIB, 8);
    for (name, h) in [("warm", &WARM), ("fresh", &FRESH)] {
        let r = helper_run(h, 2);
        ensure!(
            r == GOT_BLOCK,
            "{name} thread after the limit was raised: {r}"
        );
    }
    free(first, 100, 8);
    say(format_args!("oom-child: ok"));
    // SAFETY: leaving without running exit handlers of the test harness.
    unsafe { libc::_exit(0) };
}

#[test]
fn child_entry() {
    if std::env::var("HUGEALLOC_OOM").is_ok() {
        child();
    }
}

/// Runs the child and returns its stderr, failing on a crash, a failure or a hang.
fn run_child(case: &str) -> String {
    let mut c = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("HUGEALLOC_OOM", case)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = c.kill();
            let out = c.wait_with_output().unwrap();
            panic!(
                "the child hung (deadlock?) past 180 s:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = c.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        status.success(),
        "child {case}: {status:?} (signal {:?})\n{stderr}",
        status.signal()
    );
    assert!(stderr.contains("oom-child: ok"), "{stderr}");
    stderr
}

#[test]
fn entry_points_return_null_and_recover_under_rlimit_as() {
    let stderr = run_child("rlimit");
    eprint!("{stderr}");
}
