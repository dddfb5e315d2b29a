//! `sh6bench` and `sh8bench`: batched allocation and release in LIFO and FIFO order, after
//! MicroQuill's SmartHeap benchmarks. Each of `--threads` (2) threads repeats `SIZE` times:
//! allocate a batch of 500 to 2,000 blocks of 1 to 1,000 bytes (sizes cycle through the range
//! with a stride, as sh6bench's do), then free the odd-numbered ones in allocation order (FIFO)
//! and the even-numbered ones in reverse order (LIFO).
//!
//! - sh6bench: each thread frees its own blocks.
//! - sh8bench: every other batch is handed whole to the next thread, which frees it (FIFO)
//!   when it next gets round to it: about half of all frees are remote. (A thread that finds
//!   4 batches already waiting frees its own batch itself, so a thread that runs ahead does
//!   not pile up memory.)

use super::common::{finish, on_threads, Block};
use crate::args::Args;
use crate::measure::Mark;
use std::sync::Mutex;

/// Batches a thread may hold for the next one before it frees its own instead.
const BACKLOG: usize = 4;

fn batch(round: u64, t: usize) -> Vec<Block> {
    let n = 500 + ((round * 7919 + t as u64 * 104_729) % 1501) as usize;
    let mut size = 1 + (round as usize * 13) % 1000;
    (0..n)
        .map(|i| {
            size = 1 + (size + 397) % 1000;
            Block::new(size, (round << 24) ^ (t << 16) as u64 ^ i as u64)
        })
        .collect()
}

fn free_mixed(blocks: Vec<Block>) -> u64 {
    let mut sum = 0u64;
    let mut slots: Vec<Option<Block>> = blocks.into_iter().map(Some).collect();
    for b in slots.iter_mut().skip(1).step_by(2) {
        sum = sum.wrapping_add(b.take().unwrap().tag());
    }
    for i in (0..slots.len()).step_by(2).rev() {
        sum = sum.wrapping_add(slots[i].take().unwrap().tag());
    }
    assert!(slots.iter().all(Option::is_none));
    sum
}

fn run_one(args: &Args, remote: bool) -> Result<(), String> {
    let name = if remote { "sh8bench" } else { "sh6bench" };
    let rounds: u64 = args.number(super::default_size(name))?;
    let threads: usize = args.get("threads", 2)?;
    if threads == 0 {
        return Err("--threads must be at least 1".to_string());
    }
    let start = Mark::now();
    let inboxes: Vec<Mutex<Vec<Vec<Block>>>> =
        (0..threads).map(|_| Mutex::new(Vec::new())).collect();
    let sums = on_threads(threads, |t| {
        let mut sum = 0u64;
        for round in 0..rounds {
            let b = batch(round, t);
            if remote && round % 2 == 1 {
                // (One lock at a time: the guard ends with this statement.)
                let kept = {
                    let mut inbox = inboxes[(t + 1) % threads].lock().unwrap();
                    if inbox.len() < BACKLOG {
                        inbox.push(b);
                        None
                    } else {
                        Some(b)
                    }
                };
                if let Some(b) = kept {
                    sum = sum.wrapping_add(free_mixed(b));
                }
                let mine = std::mem::take(&mut *inboxes[t].lock().unwrap());
                for batch in mine {
                    // FIFO: in allocation order
                    for b in batch {
                        sum = sum.wrapping_add(b.tag());
                    }
                }
            } else {
                sum = sum.wrapping_add(free_mixed(b));
            }
        }
        sum
    });
    drop(inboxes);
    finish(
        name,
        rounds,
        threads,
        start,
        sums.into_iter().fold(0, u64::wrapping_add),
        "",
    );
    Ok(())
}

pub fn run_sh6(args: &Args) -> Result<(), String> {
    run_one(args, false)
}

pub fn run_sh8(args: &Args) -> Result<(), String> {
    run_one(args, true)
}
