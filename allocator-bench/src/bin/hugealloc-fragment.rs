//! `hugealloc-fragment`: fragments the machine's free memory on purpose, so the compaction
//! stall of a huge page fault (`defrag=madvise`) can be shown and measured (issue 17).
//!
//! It maps anonymous memory advised `MADV_NOHUGEPAGE` (so it is built of 4 KiB pages), touches
//! it, then gives back every other 4 KiB page (`MADV_DONTNEED`): the kernel's free memory is
//! then half of what was filled, in single 4 KiB holes, and a 2 MiB page can only be had by
//! compacting (migrating the held pages). It holds that until killed, or for `--secs N`.
//!
//! How much: `MemAvailable` less `--keep-mib` (at least 4096: never leave the machine less than
//! 4 GiB), capped by `--mib` when given. Prints `ready: filled N MiB, holding N/2 MiB` on
//! stdout once done (scripts wait for that line).
//!
//! ```sh
//! hugealloc-fragment --mib 2048 --secs 60 &      # a small run
//! hugealloc-fragment                              # all but 4 GiB of MemAvailable, until killed
//! ```

use std::io::Write;
use std::time::{Duration, Instant};

const PAGE: usize = 4096;
const PIECE: usize = 64 << 20;
const MIB: usize = 1 << 20;

fn mem_available_mib() -> usize {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .map_or(0, |kb| kb / 1024)
}

fn usage() -> ! {
    eprintln!("usage: hugealloc-fragment [--mib N] [--keep-mib N (>= 4096)] [--secs N]");
    std::process::exit(2)
}

fn main() {
    let mut cap_mib = usize::MAX;
    let mut keep_mib = 4096usize;
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
            "--keep-mib" => keep_mib = (num() as usize).max(4096),
            "--secs" => secs = Some(num()),
            _ => usage(),
        }
    }
    let avail = mem_available_mib();
    let fill_mib = avail.saturating_sub(keep_mib).min(cap_mib);
    let pieces = fill_mib * MIB / PIECE;
    eprintln!(
        "hugealloc-fragment: MemAvailable {avail} MiB, keeping {keep_mib} MiB: filling {} MiB",
        pieces * PIECE / MIB
    );
    let start = Instant::now();
    for _ in 0..pieces {
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
            for off in (PAGE..PIECE).step_by(2 * PAGE) {
                libc::madvise(p.add(off).cast(), PAGE, libc::MADV_DONTNEED);
            }
        }
    }
    let filled = pieces * PIECE / MIB;
    println!(
        "ready: filled {filled} MiB, holding {} MiB in every other 4 KiB page ({:.1} s)",
        filled / 2,
        start.elapsed().as_secs_f64()
    );
    let _ = std::io::stdout().flush();
    match secs {
        Some(s) => std::thread::sleep(Duration::from_secs(s)),
        None => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
    }
}
