//! `mstress`: bursts of allocation with long-lived survivors, after mimalloc-bench's mstress.
//! Each of `--threads` (2) threads runs rounds: allocate a burst of 2,000 blocks (mostly 16 B
//! to 0.5 KiB, one in a hundred up to 64 KiB), keep one in eight in its long-lived pool of 20,000
//! (a random pool entry is evicted, i.e. freed, for each newcomer), free the rest of the burst
//! in random order. Every tenth round a thread swaps 500 pool entries with a shared exchange,
//! so survivors are freed by the other thread. `SIZE` rounds per thread.

use super::common::{finish, on_threads, Block, Rng};
use crate::args::Args;
use crate::measure::Mark;
use std::sync::Mutex;

const BURST: usize = 2000;
const POOL: usize = 20_000;
const SWAP: usize = 500;

fn size(rng: &mut Rng) -> usize {
    if rng.below(100) == 0 {
        rng.range(1024, 64 << 10)
    } else {
        (16usize << rng.below(6)) + rng.range(0, 15)
    }
}

pub fn run(args: &Args) -> Result<(), String> {
    let rounds: u64 = args.number(super::default_size("mstress"))?;
    let threads: usize = args.get("threads", 2)?;
    if threads == 0 {
        return Err("--threads must be at least 1".to_string());
    }
    let start = Mark::now();
    let exchange: Mutex<Vec<Block>> = Mutex::new(Vec::new());
    let sums = on_threads(threads, |t| {
        let mut rng = Rng::new(t as u64 + 31);
        let mut pool: Vec<Block> = Vec::with_capacity(POOL);
        let mut sum = 0u64;
        for round in 0..rounds {
            let mut burst: Vec<Option<Block>> = (0..BURST)
                .map(|_| Some(Block::new(size(&mut rng), rng.word())))
                .collect();
            for b in burst.iter_mut().step_by(8) {
                let b = b.take().unwrap();
                if pool.len() < POOL {
                    pool.push(b);
                } else {
                    let k = rng.below(POOL as u64) as usize;
                    sum = sum.wrapping_add(std::mem::replace(&mut pool[k], b).tag());
                }
            }
            // free the rest in random order
            for i in (1..burst.len()).rev() {
                let j = rng.below(i as u64 + 1) as usize;
                burst.swap(i, j);
            }
            drop(burst);
            if round % 10 == 9 && pool.len() >= SWAP {
                let mut ex = exchange.lock().unwrap();
                let mine: Vec<Block> = pool.drain(pool.len() - SWAP..).collect();
                let theirs = std::mem::replace(&mut *ex, mine);
                drop(ex);
                pool.extend(theirs);
            }
        }
        sum ^ pool.iter().map(|b| b.tag()).fold(0, u64::wrapping_add)
    });
    drop(exchange);
    finish(
        "mstress",
        rounds,
        threads,
        start,
        sums.into_iter().fold(0, u64::wrapping_add),
        "",
    );
    Ok(())
}
