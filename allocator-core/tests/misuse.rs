//! Bad input: each misuse runs in a child process (this test binary re-executed with
//! `HUGEALLOC_MISUSE=<case>`), which must abort with a one-line message naming the pointer.

use hugealloc::testing::{alloc, registry};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

fn misuse(case: &str) {
    let mut stack_word = 0u64;
    let p = alloc::malloc(64);
    match case {
        "foreign" => {
            let q = Box::into_raw(Box::new(stack_word)) as *mut u8; // the system allocator's
                                                                    // SAFETY: deliberately invalid: this pointer is not hugealloc's.
            unsafe { alloc::free(q) };
        }
        "stack" => {
            stack_word += 1;
            // SAFETY: deliberately invalid.
            unsafe { alloc::free(&mut stack_word as *mut u64 as *mut u8) };
        }
        "interior" => {
            // SAFETY: deliberately invalid: a pointer inside a block.
            unsafe { alloc::free_no_cache(p.add(16)) };
        }
        "interior_cached" => {
            // Through the thread cache (plain `free`): must abort, not be cached.
            // SAFETY: deliberately invalid: a pointer inside a block.
            unsafe { alloc::free(p.add(16)) };
        }
        "double_late" => {
            // `p` freed, 5,000 blocks of its class allocated and freed (so `p` went back to
            // its slab through a flush), then `p` freed again: the flush that takes it home
            // finds it free in the bitmap. More blocks are cycled to make that flush happen.
            // A neighbour from the same refill stays live, so `p`'s slab never empties and is
            // never released (a free into a released slab's page aborts as "does not own").
            let neighbour = alloc::malloc(64);
            eprintln!("pointer {p:p}");
            let mut blocks = vec![std::ptr::null_mut(); 5000];
            // SAFETY: deliberately invalid: the second free of `p`.
            unsafe {
                alloc::free(p);
                for _ in 0..2 {
                    for b in blocks.iter_mut() {
                        *b = alloc::malloc(64);
                    }
                    for &b in blocks.iter() {
                        alloc::free(b);
                    }
                }
                alloc::free(p);
                for b in blocks.iter_mut() {
                    *b = alloc::malloc(64);
                }
                for &b in blocks.iter() {
                    alloc::free(b);
                }
                alloc::free(neighbour);
            }
        }
        "misaligned" => {
            // SAFETY: deliberately invalid.
            unsafe { alloc::free(p.add(3)) };
        }
        "double" => {
            // SAFETY: deliberately invalid: the second free.
            unsafe {
                alloc::free(p);
                alloc::free(p);
            }
        }
        "double_huge" => {
            let h = alloc::malloc(8 << 20);
            // SAFETY: deliberately invalid: the second free.
            unsafe {
                alloc::free(h);
                alloc::free(h);
            }
        }
        "huge_interior" => {
            let h = alloc::malloc(8 << 20);
            // SAFETY: deliberately invalid.
            unsafe { alloc::free(h.add(4 << 20)) };
        }
        "wrong_size" => {
            // SAFETY: deliberately invalid: 64-byte block freed as 4096.
            unsafe { alloc::free_sized(p, 4096, 1) };
        }
        "wrong_size_smaller" => {
            // A size of the class below (48 B): the fast path's lower bound.
            // SAFETY: deliberately invalid: 64-byte block freed as 48.
            unsafe { alloc::free_sized(p, 48, 1) };
        }
        "wrong_size_large" => {
            // A cached large block (20 KiB, class 20 KiB) freed with a size of the class
            // below (16 KiB).
            let q = alloc::malloc(20 << 10);
            // SAFETY: deliberately invalid.
            unsafe { alloc::free_sized(q, 16 << 10, 1) };
        }
        "arena_past_table" => {
            let _ = registry::arena(registry::MAX_ARENAS + 3);
        }
        "arena_not_created" => {
            // The test creates no arena: the last slot of the table is empty.
            let _ = registry::arena(registry::MAX_ARENAS - 1);
        }
        _ => unreachable!(),
    }
    std::process::exit(0);
}

fn expect_abort(case: &str, words: &str) {
    let line = expect_abort_message(case, words);
    assert!(
        line.contains("0x"),
        "case {case}: message names no pointer: {line}"
    );
}

/// Runs `case` in a child, which must abort (SIGABRT, not a panic) with a `hugealloc:` line
/// containing `words`; returns that line.
fn expect_abort_message(case: &str, words: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("HUGEALLOC_MISUSE", case)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "case {case}: {:?}, stderr {stderr}",
        out.status
    );
    let line = stderr
        .lines()
        .find(|l| l.starts_with("hugealloc: "))
        .unwrap_or_else(|| panic!("case {case}: no message in {stderr}"));
    assert!(line.contains(words), "case {case}: {line}");
    line.to_string()
}

#[test]
fn child_entry() {
    if let Ok(case) = std::env::var("HUGEALLOC_MISUSE") {
        misuse(&case);
    }
}

#[test]
fn foreign_pointer_aborts() {
    expect_abort("foreign", "never returned");
}

#[test]
fn stack_pointer_aborts() {
    expect_abort("stack", "never returned");
}

#[test]
fn interior_pointer_aborts() {
    expect_abort("interior", "inside a block");
}

/// Plain `free` of a pointer inside a small block aborts at once (before the cache could
/// hand it out again).
#[test]
fn interior_pointer_through_the_cache_aborts() {
    expect_abort("interior_cached", "inside a block");
}

/// A double free of a block that already went back to its slab aborts when the flush takes
/// it home, naming it.
#[test]
fn late_double_free_aborts_naming_the_pointer() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("HUGEALLOC_MISUSE", "double_late")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{stderr}");
    let p = stderr
        .lines()
        .find_map(|l| l.strip_prefix("pointer "))
        .unwrap_or_else(|| panic!("no pointer printed: {stderr}"));
    let line = stderr
        .lines()
        .find(|l| l.starts_with("hugealloc: "))
        .unwrap_or_else(|| panic!("no message in {stderr}"));
    assert_eq!(line, format!("hugealloc: double free of {p}"), "{stderr}");
}

#[test]
fn misaligned_pointer_aborts() {
    expect_abort("misaligned", "inside a block");
}

#[test]
fn double_free_aborts() {
    expect_abort("double", "double free");
}

#[test]
fn double_free_of_huge_block_aborts() {
    expect_abort("double_huge", "does not own");
}

#[test]
fn interior_huge_pointer_aborts() {
    expect_abort("huge_interior", "does not own");
}

#[test]
fn free_with_wrong_size_aborts() {
    expect_abort("wrong_size", "another class");
}

/// A size below the block's class, small and large: the sized fast path checks both bounds
/// (`Slab::holds_size`, `alloc`'s `LARGE_SIZES`).
#[test]
fn free_with_smaller_size_aborts() {
    expect_abort("wrong_size_smaller", "another class");
    expect_abort("wrong_size_large", "another class");
}

/// An arena index past the table aborts with a message (no panic, no other arena).
#[test]
fn arena_index_past_the_table_aborts() {
    let line = expect_abort_message("arena_past_table", "no such arena");
    assert!(
        line.contains(&format!("index {}", registry::MAX_ARENAS + 3)),
        "{line}"
    );
}

/// The index of an arena not created aborts with a message (no null dereference).
#[test]
fn arena_index_not_created_aborts() {
    expect_abort_message("arena_not_created", "no such arena");
}
