//! The debug modes: `check:full` (redzones after small blocks checked at free, junk filling,
//! invariant scans of every structure touched), `junk:true` and `zero:true`. Each case runs in
//! a child process (this binary re-executed with `HUGEALLOC_CHECK_CASE=<case>` and the
//! configuration in `HUGEALLOC_CONF`, which the first allocation reads).

mod common;

use hugealloc::testing::alloc;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

const CASE: &str = "HUGEALLOC_CHECK_CASE";

fn byte(p: *mut u8, i: usize) -> u8 {
    // SAFETY: callers pass offsets inside memory hugealloc mapped (freed blocks stay mapped).
    unsafe { p.add(i).read_volatile() }
}

fn case(name: &str) {
    match name {
        "overflow" => {
            let p = alloc::malloc(24);
            // SAFETY: deliberately invalid: one byte past the 24 asked for.
            unsafe { p.add(24).write(1) };
            // SAFETY: p is live (its redzone broken).
            unsafe { alloc::free(p) };
        }
        "double" => {
            let p = alloc::malloc(100);
            let q = alloc::malloc(100);
            // SAFETY: deliberately invalid: the second free of p, with q pushed on the cache
            // in between (p is no longer the top of its cache bin).
            unsafe {
                alloc::free(p);
                alloc::free(q);
                alloc::free(p);
            }
        }
        "double_written" => {
            // The freed block's first bytes are written (a use after free) before its second
            // free: not found by the free's look into the cache bin, which only looks for a
            // block starting with the free junk; caught when the bin flushes (the bitmap).
            let p = alloc::malloc(100);
            let q = alloc::malloc(100);
            // SAFETY: deliberately invalid: a write after free, then the second free of p.
            unsafe {
                alloc::free(p);
                p.write(0);
                alloc::free(q);
                alloc::free(p);
            }
            hugealloc::testing::thread::flush_thread_cache();
        }
        "corrupt_page_map" => {
            // A page-map word on a free page (the chunk's last) is caught by the page-map scan
            // within PAGE_SCAN_EVERY page runs taken or given back in that chunk. 64 KiB
            // blocks are not cached: each malloc and free takes or gives a run.
            let p = alloc::malloc(64 << 10);
            let hugealloc::testing::arena::Owner::Large { chunk, .. } =
                hugealloc::testing::arena::owner_of(p)
            else {
                unreachable!()
            };
            // SAFETY: the live page chunk holding p; deliberately corrupts a free page's word.
            unsafe {
                assert!((*chunk).free.get(511));
                (*chunk).page_map[511] = 8;
            }
            for _ in 0..64 {
                let q = alloc::malloc(64 << 10);
                // SAFETY: q is live.
                unsafe { alloc::free(q) };
            }
            // SAFETY: live.
            unsafe { alloc::free(p) };
        }
        "double_after_flush" => {
            // The first free's block went back to its slab before the second free.
            let p = alloc::malloc(100);
            // SAFETY: deliberately invalid: the second free.
            unsafe {
                alloc::free(p);
                hugealloc::testing::thread::flush_thread_cache();
                alloc::free(p);
            }
        }
        "double_two_threads" => {
            // The first free leaves p in this thread's cache, the second in another thread's:
            // neither cache sees both, and the slab's bitmap catches it when both flush.
            let p = alloc::malloc(100) as usize;
            // SAFETY: p is live.
            unsafe { alloc::free(p as *mut u8) };
            std::thread::spawn(move || {
                // SAFETY: deliberately invalid: the second free, from another thread.
                unsafe { alloc::free(p as *mut u8) };
                hugealloc::testing::thread::flush_thread_cache();
            })
            .join()
            .unwrap();
            hugealloc::testing::thread::flush_thread_cache();
        }
        "cached" => {
            // The debug modes keep the thread cache: 10,000 malloc/free pairs of one class take
            // a handful of batches from the arena bin, not one bin operation each.
            let arena = match hugealloc::ctl::read("thread.arena") {
                Ok(hugealloc::ctl::CtlValue::Unsigned(i)) => i,
                other => panic!("thread.arena: {other:?}"),
            };
            // Under check:full a 40-byte block comes from the class of 40 + REDZONE.
            let class = hugealloc::testing::size_class::class_of(40 + alloc::REDZONE);
            let name = format!("stats.arenas.{arena}.bins.{class}.nmalloc");
            let nmalloc = || match hugealloc::ctl::read(&name) {
                Ok(hugealloc::ctl::CtlValue::U64(n)) => n,
                other => panic!("{name}: {other:?}"),
            };
            let before = nmalloc();
            for _ in 0..10_000 {
                let p = alloc::malloc(40);
                assert!((0..40).all(|i| byte(p, i) == alloc::JUNK_ALLOC));
                // SAFETY: p is live and freed once.
                unsafe { alloc::free(p) };
                assert!((0..40).all(|i| byte(p, i) == alloc::JUNK_FREE));
            }
            let taken = nmalloc() - before;
            assert!(
                taken < 1000,
                "{taken} blocks taken from the bin for 10,000 pairs"
            );
        }
        "large_double" => {
            // A cached large block freed twice with another block of its class in between.
            let p = alloc::malloc(20 << 10);
            let q = alloc::malloc(20 << 10);
            // SAFETY: deliberately invalid: the second free of p.
            unsafe {
                alloc::free(p);
                alloc::free(q);
                alloc::free(p);
            }
        }
        "corrupt_slab" => {
            let p = alloc::malloc(48);
            let q = alloc::malloc(48);
            let hugealloc::testing::arena::Owner::Small { slab, .. } =
                hugealloc::testing::arena::owner_of(p)
            else {
                unreachable!()
            };
            // SAFETY: deliberately corrupts the slab's free count, which the scan must catch.
            unsafe { (*slab).nfree += 3 };
            // SAFETY: live blocks.
            unsafe {
                alloc::free(q);
                alloc::free(p);
            }
            // The blocks reach their slab (and its checks) when the thread cache flushes.
            hugealloc::testing::thread::flush_thread_cache();
        }
        "fills" => {
            // check:full: usable size is what was asked; new bytes are 0xa5, freed ones 0x5a.
            let p = alloc::malloc(40);
            // SAFETY: p is live.
            assert_eq!(unsafe { alloc::usable_size(p) }, 40);
            assert!((0..40).all(|i| byte(p, i) == alloc::JUNK_ALLOC));
            // SAFETY: p is live; the write stays inside the 40 bytes.
            unsafe { p.write_bytes(7, 40) };
            // Reallocation moves and keeps the contents and the redzone right.
            // SAFETY: p is live.
            let q = unsafe { alloc::realloc(p, 100, 1) };
            assert!((0..40).all(|i| byte(q, i) == 7));
            // SAFETY: q is live.
            assert_eq!(unsafe { alloc::usable_size(q) }, 100);
            // SAFETY: q is live and freed once.
            unsafe { alloc::free(q) };
            assert!((0..100).all(|i| byte(q, i) == alloc::JUNK_FREE));
            // Large and huge blocks are junk-filled too.
            let big = alloc::malloc(3 << 20);
            assert_eq!(byte(big, (3 << 20) - 1), alloc::JUNK_ALLOC);
            // SAFETY: big is live.
            unsafe { alloc::free(big) };
            // calloc's memory is zero, not junk.
            let z = alloc::alloc_zeroed(64, 8);
            assert!((0..64).all(|i| byte(z, i) == 0));
            // SAFETY: z is live.
            unsafe { alloc::free(z) };
        }
        "big_junk" => {
            // junk:true fills small blocks whole but only the ends of big ones, so the pages
            // a program never touches stay unmapped (the RSS of `sort` grew 7x before).
            const LEN: usize = 256 << 20;
            let before = common::rss_bytes();
            let big = alloc::malloc(LEN);
            assert_eq!(byte(big, 0), alloc::JUNK_ALLOC);
            assert_eq!(byte(big, LEN - 1), alloc::JUNK_ALLOC);
            // SAFETY: big is live and freed once.
            unsafe { alloc::free(big) };
            let grown = common::rss_bytes().saturating_sub(before);
            assert!(
                grown < LEN / 4,
                "RSS grew by {grown} bytes for one {LEN}-byte block"
            );
            let small = alloc::malloc(3000);
            assert!((0..3000).all(|i| byte(small, i) == alloc::JUNK_ALLOC));
            // SAFETY: small is live and freed once.
            unsafe { alloc::free(small) };
        }
        "zero" => {
            // zero:true: memory comes back zeroed even when reused dirty.
            let p = alloc::malloc(256);
            // SAFETY: p is live.
            unsafe {
                p.write_bytes(0xff, 256);
                alloc::free(p);
            }
            for _ in 0..4 {
                let q = alloc::malloc(256);
                assert!((0..256).all(|i| byte(q, i) == 0), "a block came back dirty");
                // SAFETY: q is live.
                unsafe {
                    q.write_bytes(0xff, 256);
                    alloc::free(q);
                }
            }
        }
        _ => unreachable!(),
    }
    std::process::exit(0);
}

fn run(name: &str, conf: &str) -> (Option<i32>, Option<i32>, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CASE, name)
        .env("HUGEALLOC_CONF", conf)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), out.status.signal(), err)
}

fn expect_abort(name: &str, conf: &str, words: &str) {
    let (_, signal, err) = run(name, conf);
    assert_eq!(
        signal,
        Some(libc::SIGABRT),
        "{name}: not aborted; stderr: {err}"
    );
    let line = err
        .lines()
        .find(|l| l.starts_with("hugealloc: "))
        .unwrap_or("");
    assert!(
        line.contains(words),
        "{name}: message {line:?} lacks {words:?}"
    );
}

fn expect_success(name: &str, conf: &str) {
    let (code, _, err) = run(name, conf);
    assert_eq!(code, Some(0), "{name} under {conf}: {err}");
}

#[test]
fn child_entry() {
    if let Ok(name) = std::env::var(CASE) {
        case(&name);
    }
}

#[test]
fn overflow_into_the_redzone_aborts_at_free() {
    expect_abort(
        "overflow",
        "check:full",
        "heap overflow: the redzone after a block was overwritten: 0x",
    );
    // Without the full checks the same overflow goes unnoticed (it stays inside the class).
    expect_success("overflow", "check:cheap");
}

#[test]
fn double_free_aborts_before_the_junk_fill() {
    expect_abort("double", "check:full", "double free of 0x");
    expect_abort("double", "check:full,tcache:false", "double free of 0x");
    // Under junk alone too: the freed block starts with the free junk, so the bin is scanned.
    expect_abort("double", "junk:true", "double free of 0x");
    expect_abort("double_written", "check:full", "double free of 0x");
    expect_abort("double_after_flush", "check:full", "double free of 0x");
    expect_abort("double_after_flush", "junk:true", "double free of 0x");
    expect_abort("large_double", "check:full", "double free of 0x");
}

#[test]
fn double_free_through_two_thread_caches_aborts_at_flush() {
    expect_abort("double_two_threads", "check:full", "double free of 0x");
}

#[test]
fn corrupted_slab_is_caught_by_the_invariant_scan() {
    expect_abort(
        "corrupt_slab",
        "check:full",
        "invariant broken: a slab's free count disagrees",
    );
}

#[test]
fn corrupted_page_map_is_caught_by_the_amortised_scan() {
    expect_abort(
        "corrupt_page_map",
        "check:full",
        "invariant broken: a free page has a page-map word",
    );
}

#[test]
fn full_checks_fill_new_and_freed_blocks() {
    expect_success("fills", "check:full");
    expect_success("fills", "junk:true,check:full");
}

#[test]
fn debug_modes_keep_the_thread_cache() {
    expect_success("cached", "check:full");
    expect_success("cached", "junk:true,check:full");
}

#[test]
fn junk_fills_only_the_ends_of_big_blocks() {
    expect_success("big_junk", "junk:true");
    expect_success("big_junk", "check:full");
}

#[test]
fn zero_option_zeroes_reused_blocks() {
    expect_success("zero", "zero:true");
}
