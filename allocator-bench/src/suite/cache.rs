//! `cache-thrash` and `cache-scratch`: false sharing between threads' objects, after Hoard's
//! benchmarks. Each of `--threads` (2) threads repeats `SIZE` times: allocate an 8-byte object,
//! write it 10,000 times, check it, free it. If the allocator hands two threads objects on one
//! cache line, every write moves the line between cores.
//!
//! - thrash (active false sharing): each thread's objects are its own from the start.
//! - scratch (passive false sharing): `main` first allocates one object per thread, back to
//!   back (so they share a line), and each thread starts by freeing the one it was given; an
//!   allocator that reuses a freed block in the freeing thread then keeps handing the threads
//!   neighbouring objects.
//!
//! The `result:` line's `shared_lines=K/64` counts thread 0's first 64 objects that share a
//! cache line with one of the other threads' first 64.

use super::common::{finish, on_threads, Block};
use crate::args::Args;
use crate::measure::Mark;
use std::sync::Mutex;

const OBJECT: usize = 8;
const WRITES: u64 = 10_000;

/// Objects per thread whose addresses are kept to count shared cache lines.
const SAMPLED: usize = 64;

/// Returns a checksum and the addresses of the first [`SAMPLED`] objects.
fn hammer(iters: u64, t: usize) -> (u64, Vec<usize>) {
    let mut sum = 0u64;
    let mut addrs = Vec::with_capacity(SAMPLED);
    for i in 0..iters {
        let mut b = Block::new(OBJECT, (t as u64) << 32 | i);
        if addrs.len() < SAMPLED {
            addrs.push(b.addr());
        }
        let mut last = 0;
        for w in 0..WRITES {
            last = b.poke(w);
        }
        assert_eq!(last, WRITES - 1, "cache: object changed under a writer");
        b.restamp();
        sum = sum.wrapping_add(last);
    }
    (sum, addrs)
}

/// How many of thread 0's sampled objects lie on a cache line (64 bytes) that one of another
/// thread's sampled objects also occupies: a sign (not proof: they may not be live at the
/// same time) of false sharing.
fn shared_lines(addrs: &[Vec<usize>]) -> usize {
    let others: std::collections::HashSet<usize> =
        addrs.iter().skip(1).flatten().map(|a| a / 64).collect();
    addrs.first().map_or(0, |a| {
        a.iter().filter(|x| others.contains(&(*x / 64))).count()
    })
}

fn run_one(args: &Args, scratch: bool) -> Result<(), String> {
    let name = if scratch {
        "cache-scratch"
    } else {
        "cache-thrash"
    };
    let size: u64 = args.number(super::default_size(name))?;
    let threads: usize = args.get("threads", 2)?;
    if threads == 0 {
        return Err("--threads must be at least 1".to_string());
    }
    let start = Mark::now();
    let given: Vec<Mutex<Option<Block>>> = (0..threads)
        .map(|t| Mutex::new(scratch.then(|| Block::new(OBJECT, t as u64))))
        .collect();
    let results = on_threads(threads, |t| {
        drop(given[t].lock().unwrap().take());
        hammer(size, t)
    });
    let addrs: Vec<Vec<usize>> = results.iter().map(|r| r.1.clone()).collect();
    let sums = results.into_iter().map(|r| r.0);
    let extra = format!("shared_lines={}/{}", shared_lines(&addrs), addrs[0].len());
    finish(
        name,
        size,
        threads,
        start,
        sums.fold(0, u64::wrapping_add),
        &extra,
    );
    Ok(())
}

pub fn run_thrash(args: &Args) -> Result<(), String> {
    run_one(args, false)
}

pub fn run_scratch(args: &Args) -> Result<(), String> {
    run_one(args, true)
}
