//! Helpers shared by the integration tests (each test binary uses some of them).
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The process's resident set (`VmRSS` of `/proc/self/status`), bytes.
pub fn rss_bytes() -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<usize>()
        .unwrap()
        * 1024
}

/// The `VmFlags` and `AnonHugePages` (kB) of the mapping holding `addr` in `/proc/self/smaps`.
pub fn mapping_of(addr: usize) -> (String, u64) {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    let mut huge_kb = 0;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ') {
            if let Some((lo, hi)) = range.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = lo <= addr && addr < hi;
                    continue;
                }
            }
        }
        if inside {
            if let Some(v) = line.strip_prefix("AnonHugePages:") {
                huge_kb = v.trim().trim_end_matches(" kB").trim().parse().unwrap();
            }
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                return (flags.trim().to_string(), huge_kb);
            }
        }
    }
    panic!("no mapping holds {addr:#x}");
}

/// The system allocator, counting the calling thread's allocations (a test binary declares
/// `#[global_allocator] static A: common::Counting = common::Counting;` to use it).
pub struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: forwards to System, which honours the layouts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded contract.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Allocations the calling thread makes (through `Counting`) while `f` runs.
pub fn allocations_in(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

/// Waits for child `pid` and returns its wait status; a child still running after `hang_s`
/// seconds is killed and reaped, and the test fails with `what` (a hang is what this bounds,
/// not a speed: the children of these tests finish in milliseconds).
pub fn wait_child(pid: libc::pid_t, hang_s: u64, what: &str) -> i32 {
    let start = std::time::Instant::now();
    let mut status = 0;
    loop {
        // SAFETY: pid is the caller's child; status is a valid out slot.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            return status;
        }
        if start.elapsed() > std::time::Duration::from_secs(hang_s) {
            // SAFETY: killing and reaping the caller's own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!("{what} hung (killed after {hang_s} s)");
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}
