//! `rptest`: the size distribution of a real program, after rpmalloc's rptest. Sizes come
//! from a histogram shaped like those measured in C and C++ programs (most requests 16 to
//! 64 bytes, a long tail to 256 KiB). Each of `--threads` (2) threads keeps a window of 8,192
//! live blocks: each operation frees the oldest (FIFO lifetimes) or, one time in four, a
//! random one, and allocates a new block. Every 64 operations a thread sends 16 of its blocks
//! to the other thread's mailbox and frees what its own mailbox holds; blocks for a thread
//! that has finished, or whose mailbox holds 1,024 already, are freed by their sender.
//! `SIZE` operations per thread.

use super::common::{finish, on_threads, Block, Rng};
use crate::args::Args;
use crate::measure::Mark;
use std::sync::Mutex;

const WINDOW: usize = 8192;
/// The most blocks a mailbox holds: about 64 sends, the exchange of 4,096 operations.
const BACKLOG: usize = 1024;

/// (weight, low, high): the histogram of request sizes in bytes.
const SIZES: [(u64, usize, usize); 9] = [
    (26, 8, 16),
    (22, 17, 32),
    (16, 33, 64),
    (12, 65, 128),
    (10, 129, 256),
    (7, 257, 1024),
    (4, 1025, 4096),
    (2, 4097, 32 << 10),
    (1, (32 << 10) + 1, 256 << 10),
];

fn size(rng: &mut Rng) -> usize {
    let total: u64 = SIZES.iter().map(|s| s.0).sum();
    let mut r = rng.below(total);
    for &(w, lo, hi) in &SIZES {
        if r < w {
            return rng.range(lo, hi);
        }
        r -= w;
    }
    unreachable!()
}

pub fn run(args: &Args) -> Result<(), String> {
    let ops: u64 = args.number(super::default_size("rptest"))?;
    let threads: usize = args.get("threads", 2)?;
    if threads == 0 {
        return Err("--threads must be at least 1".to_string());
    }
    let start = Mark::now();
    // Each mailbox: whether its thread has finished, and the blocks sent to it. A thread that
    // finishes drains its mailbox and marks it finished, under its lock; from then on, or
    // while the mailbox holds `BACKLOG` blocks (its thread is descheduled), a sender frees
    // its blocks itself. (Without that, the blocks sent to a thread that had finished or
    // stalled piled up: the peak RSS measured how far the threads had drifted apart on a busy
    // machine, whatever the allocator: 61 MB of backlog at the end, twice the usual peak.)
    let mailboxes: Vec<Mutex<(bool, Vec<Block>)>> = (0..threads)
        .map(|_| Mutex::new((false, Vec::new())))
        .collect();
    let sums = on_threads(threads, |t| {
        let mut rng = Rng::new(t as u64 + 77);
        let mut window: Vec<Block> = (0..WINDOW)
            .map(|_| Block::new(size(&mut rng), rng.word()))
            .collect();
        let mut sum = 0u64;
        let mut oldest = 0usize;
        for op in 0..ops {
            let i = if rng.below(4) == 0 {
                rng.below(WINDOW as u64) as usize
            } else {
                oldest = (oldest + 1) % WINDOW;
                oldest
            };
            let new = Block::new(size(&mut rng), rng.word());
            sum = sum.wrapping_add(std::mem::replace(&mut window[i], new).tag());
            if op % 64 == 63 {
                let to = (t + 1) % threads;
                let sent: Vec<Block> = (0..16)
                    .map(|_| {
                        let k = rng.below(WINDOW as u64) as usize;
                        std::mem::replace(&mut window[k], Block::new(size(&mut rng), rng.word()))
                    })
                    .collect();
                {
                    let mut to_box = mailboxes[to].lock().unwrap();
                    if to_box.0 || to_box.1.len() >= BACKLOG {
                        drop(to_box);
                        drop(sent);
                    } else {
                        to_box.1.extend(sent);
                    }
                }
                let mine = std::mem::take(&mut mailboxes[t].lock().unwrap().1);
                sum = sum.wrapping_add(mine.len() as u64);
            }
        }
        let mine = {
            let mut my_box = mailboxes[t].lock().unwrap();
            my_box.0 = true;
            std::mem::take(&mut my_box.1)
        };
        drop(mine);
        sum
    });
    drop(mailboxes);
    finish(
        "rptest",
        ops,
        threads,
        start,
        sums.into_iter().fold(0, u64::wrapping_add),
        "",
    );
    Ok(())
}
