//! Purging off the arena lock (issue 12), raced: one thread allocates and frees small, large
//! and huge blocks, checking their contents, while another forces purge passes over and over
//! (a busy run handed out would be zeroed under its owner, and the invariant scans of a debug
//! build see every page chunk after each step); and a `fork` while a purge is in flight must
//! leave the child no busy run. Runs in the debug stage of `scripts/test-all.sh` too.

#[global_allocator]
static GLOBAL: hugealloc::HugeAlloc = hugealloc::HugeAlloc;

mod common;

use hugealloc::{ctl, CtlValue};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of runs being purged, summed over every arena.
fn purging_bytes() -> u64 {
    (0..hugealloc::testing::registry::narenas())
        .map(|i| {
            hugealloc::testing::registry::arena(i)
                .snapshot()
                .arena
                .purging_bytes
        })
        .sum()
}

fn fill_check_free(blocks: Vec<Vec<u8>>) {
    for (i, v) in blocks.iter().enumerate() {
        let want = (i % 251) as u8 | 1;
        assert!(
            v.iter().all(|&b| b == want),
            "block {i} of {} bytes lost its contents",
            v.len()
        );
    }
}

#[test]
fn allocation_races_forced_purges() {
    let _ = hugealloc::stats();
    ctl::write("arenas.dirty_decay_ms", CtlValue::I64(0)).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let purger = {
        let done = done.clone();
        std::thread::spawn(move || {
            // Both threads on arena 0, so every pass races the allocating thread.
            assert!(hugealloc::thread_set_arena(0));
            let mut passes = 0u64;
            while !done.load(Ordering::Relaxed) {
                hugealloc::purge();
                let _ = ctl::act("arena.0.decay");
                passes += 1;
            }
            passes
        })
    };
    assert!(hugealloc::thread_set_arena(0));
    let rounds = if cfg!(debug_assertions) { 10 } else { 60 };
    let mut s = 0x2545f4914f6cdd1du64;
    for _ in 0..rounds {
        let mut blocks = Vec::with_capacity(1600);
        for i in 0..1600 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let size = match s % 800 {
                0 => (2 << 20) + (s >> 20) as usize % (2 << 20),
                1..=20 => 16384 + (s >> 20) as usize % (128 << 10),
                _ => 1 + (s >> 20) as usize % 4096,
            };
            blocks.push(vec![(i % 251) as u8 | 1; size]);
        }
        fill_check_free(blocks);
    }
    done.store(true, Ordering::Relaxed);
    let passes = purger.join().unwrap();
    assert!(passes > 0);
    assert_eq!(purging_bytes(), 0, "runs left busy after every purge ended");
    ctl::write("arenas.dirty_decay_ms", CtlValue::I64(10_000)).unwrap();
}

/// A child stuck (a purge lock left held) is killed after this long and fails the test: a
/// hang, not a speed, is what is tested.
const HANG_S: u64 = 30;

#[test]
fn fork_during_a_purge_leaves_the_child_no_busy_run() {
    let _ = hugealloc::stats();
    let stop = Arc::new(AtomicBool::new(false));
    let purger = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // 64 MiB touched and freed, then purged: a purge long enough to fork into.
                let blocks: Vec<Vec<u8>> = (0..16).map(|_| vec![7u8; 4 << 20]).collect();
                drop(blocks);
                hugealloc::purge();
            }
        })
    };
    for round in 0..60u64 {
        std::thread::sleep(Duration::from_micros(300 + round * 37 % 900));
        // SAFETY: the child reads counters, allocates through hugealloc and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = if purging_bytes() != 0 {
                1
            } else {
                let v = vec![1u8; 8 << 20];
                drop(v);
                hugealloc::purge();
                if purging_bytes() != 0 {
                    2
                } else {
                    0
                }
            };
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(code) };
        }
        let status = common::wait_child(pid, HANG_S, &format!("child {round}"));
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child {round} found runs left busy (status {status:#x})"
        );
    }
    stop.store(true, Ordering::Relaxed);
    purger.join().unwrap();
}
