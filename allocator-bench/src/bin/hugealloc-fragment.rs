//! `hugealloc-fragment`: fragments the machine's free memory on purpose, so the compaction
//! stall of a huge page fault (`defrag=madvise`) can be shown and measured (issue 17).
//!
//! It maps anonymous memory advised `MADV_NOHUGEPAGE` (so it is built of 4 KiB pages), touches
//! all of it, and only then gives back every other 4 KiB page (`MADV_DONTNEED`): the kernel's free memory is
//! then half of what was filled, in single 4 KiB holes, and a 2 MiB page can only be had by
//! compacting (migrating the held pages). It holds that until killed, or for `--secs N`.
//!
//! The held pages are pinned (io_uring fixed buffers: a long-term pin), so compaction cannot
//! migrate them: without the pin, kcompactd's proactive compaction rebuilt over 1 GiB of free
//! 2–4 MiB blocks within the fill's 26 s, and `mlock` does not stop it where
//! `vm.compact_unevictable_allowed` is 1 (the default). `mlock2(MLOCK_ONFAULT)` is the fallback
//! where io_uring is unavailable. A huge-page fault then finds no free 2 MiB block and no
//! movable pages to make one from: it compacts in vain (`compact_stall`, `compact_fail`) and
//! falls back to small pages, or takes a block another process freed meanwhile.
//!
//! How much: `MemAvailable` less `--keep-mib` (default 256, at least 128) of unfragmented
//! memory, capped by `--mib` when given, and so that the free memory afterwards (the kept part
//! plus the holes, half of what was filled) is at least 4 GiB: the machine keeps that much for
//! 4 KiB allocations, but few or no free 2 MiB blocks. While it fills, only `--keep-mib` is free
//! (for some seconds): it sets its `oom_score_adj` to 1000, so it is the one killed should
//! another process need the memory, and it stops filling early if `MemAvailable` drops. Prints `ready: filled N MiB, holding N/2
//! MiB` on stdout once done (scripts wait for that line), then the free blocks of order 9 and
//! more in `/proc/buddyinfo` (2 MiB and 4 MiB), which should be near 0.
//!
//! ```sh
//! hugealloc-fragment --mib 2048 --secs 60 &      # a small run
//! hugealloc-fragment                              # all but 256 MiB of MemAvailable, until killed
//! ```

use std::io::Write;
use std::time::{Duration, Instant};

const PAGE: usize = 4096;
const PIECE: usize = 64 << 20;
const MIB: usize = 1 << 20;
/// The free memory (in 4 KiB holes or not) the machine keeps at least.
const FREE_MIN_MIB: usize = 4096;

/// `/proc/buddyinfo`'s free blocks of order 9 and 10 (2 and 4 MiB), per zone, as text.
fn free_huge_blocks() -> String {
    let text = std::fs::read_to_string("/proc/buddyinfo").unwrap_or_default();
    let mut out = String::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        // "Node 0, zone Normal c0 c1 ... c10"
        if let (Some(zone), Some(o9), Some(o10)) = (f.get(3), f.get(13), f.get(14)) {
            out += &format!("{zone}: order9={o9} order10={o10}; ");
        }
    }
    out
}

fn mem_available_mib() -> usize {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// Registered buffers per io_uring (the kernel's `IORING_MAX_REG_BUFFERS`).
const RING_BUFFERS: usize = 1 << 14;

/// Pins the held pages (every other 4 KiB page of each piece) as io_uring fixed buffers, one
/// 4 KiB buffer each: a long-term pin, so compaction (kcompactd's proactive pass included)
/// cannot migrate them and rebuild free 2 MiB blocks, which `mlock` does not prevent where
/// `vm.compact_unevictable_allowed` is 1. The rings stay open (leaked) until exit. Where
/// io_uring is unavailable, falls back to `mlock2(MLOCK_ONFAULT)` (only present pages; the
/// holes stay free). Returns how many pages io_uring pinned.
fn pin_held_pages(held: &[*mut u8]) -> usize {
    let pages: Vec<libc::iovec> = held
        .iter()
        .flat_map(|&p| (0..PIECE).step_by(2 * PAGE).map(move |off| (p, off)))
        .map(|(p, off)| libc::iovec {
            // SAFETY: off < PIECE, inside the piece.
            iov_base: unsafe { p.add(off) }.cast(),
            iov_len: PAGE,
        })
        .collect();
    let mut pinned = 0;
    for batch in pages.chunks(RING_BUFFERS) {
        // struct io_uring_params: 120 bytes, zeroed = defaults.
        let mut params = [0u8; 120];
        // SAFETY: io_uring_setup(entries, params) with a params buffer of the kernel's size.
        let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
        if fd < 0 {
            break;
        }
        // SAFETY: IORING_REGISTER_BUFFERS (0) with `batch.len()` valid iovecs of held pages.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_uring_register,
                fd as libc::c_int,
                0u32,
                batch.as_ptr(),
                batch.len() as u32,
            )
        };
        if r < 0 {
            // SAFETY: fd is ours.
            unsafe { libc::close(fd as libc::c_int) };
            break;
        }
        pinned += batch.len();
    }
    if pinned < pages.len() {
        for &p in held {
            // SAFETY: p maps PIECE bytes.
            unsafe { libc::syscall(libc::SYS_mlock2, p, PIECE, libc::MLOCK_ONFAULT) };
        }
    }
    pinned
}

fn usage() -> ! {
    eprintln!("usage: hugealloc-fragment [--mib N] [--keep-mib N (>= 128)] [--secs N]");
    std::process::exit(2)
}

fn main() {
    let mut cap_mib = usize::MAX;
    let mut keep_mib = 256usize;
    let mut secs: Option<u64> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = || -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage())
        };
        match a.as_str() {
            "--mib" => cap_mib = num() as usize,
            "--keep-mib" => keep_mib = (num() as usize).max(128),
            "--secs" => secs = Some(num()),
            _ => usage(),
        }
    }
    let avail = mem_available_mib();
    // Free afterwards: avail - fill / 2 >= FREE_MIN_MIB.
    let fill_max = 2 * avail.saturating_sub(FREE_MIN_MIB);
    let fill_mib = avail.saturating_sub(keep_mib).min(fill_max).min(cap_mib);
    let pieces = fill_mib * MIB / PIECE;
    eprintln!(
        "hugealloc-fragment: MemAvailable {avail} MiB, keeping {keep_mib} MiB: filling {} MiB",
        pieces * PIECE / MIB
    );
    // The first victim should memory run short for other processes meanwhile.
    let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    let start = Instant::now();
    // Phase 1: touch every page of every piece, holding all of it, so the pages come from the
    // free 2 MiB blocks (a hole freed early would be handed back to the next piece's faults
    // first, and the big blocks would survive). Stops early if other processes' use brings
    // MemAvailable down to the kept amount.
    let mut held: Vec<*mut u8> = Vec::with_capacity(pieces);
    for _ in 0..pieces {
        if mem_available_mib() <= keep_mib {
            eprintln!("hugealloc-fragment: MemAvailable down to {keep_mib} MiB; stopping here");
            break;
        }
        // SAFETY: a fresh private anonymous mapping, kept until exit.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PIECE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            eprintln!("hugealloc-fragment: mmap failed; stopping here");
            break;
        }
        let p = p as *mut u8;
        // SAFETY: p maps PIECE bytes; every offset below is inside it.
        unsafe {
            libc::madvise(p.cast(), PIECE, libc::MADV_NOHUGEPAGE);
            for off in (0..PIECE).step_by(PAGE) {
                p.add(off).write_volatile(1);
            }
        }
        held.push(p);
    }
    // Phase 2: every other 4 KiB page of every piece back, then the rest pinned.
    for &p in &held {
        // SAFETY: p maps PIECE bytes; every offset below is inside it.
        unsafe {
            for off in (PAGE..PIECE).step_by(2 * PAGE) {
                libc::madvise(p.add(off).cast(), PAGE, libc::MADV_DONTNEED);
            }
        }
    }
    let pinned = pin_held_pages(&held);
    let pieces = held.len();
    println!(
        "pinned: {pinned} of {} held pages",
        pieces * PIECE / PAGE / 2
    );
    let filled = pieces * PIECE / MIB;
    println!(
        "ready: filled {filled} MiB, holding {} MiB in every other 4 KiB page ({:.1} s)",
        filled / 2,
        start.elapsed().as_secs_f64()
    );
    println!("buddyinfo: {}", free_huge_blocks());
    let _ = std::io::stdout().flush();
    match secs {
        Some(s) => std::thread::sleep(Duration::from_secs(s)),
        None => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
    }
}
