//! `larson`: a server simulation, after Larson and Krishnan's benchmark. Each of `--threads`
//! (2) worker chains owns 4,000 slots of blocks of 8 to 1,000 bytes. A worker replaces random
//! slots (free the old block, allocate a new one), and after each round of replacements hands
//! its slots to a new thread and exits, as a server hands connections to fresh threads: every
//! block is freed by a thread other than the one that allocated it (the first generation's by
//! threads other than `main`, which allocated them). `SIZE` replacements in all.

use super::common::{finish, on_threads, Block, Rng};
use crate::args::Args;
use crate::measure::Mark;

const SLOTS: usize = 4000;
const MIN: usize = 8;
const MAX: usize = 1000;
/// Generations (threads) per chain.
const GENERATIONS: u64 = 40;

fn worker(mut slots: Vec<Block>, mut rng: Rng, ops: u64, gens_left: u64) -> u64 {
    let mut sum = 0u64;
    for _ in 0..ops {
        let i = rng.below(SLOTS as u64) as usize;
        let size = rng.range(MIN, MAX);
        sum = sum.wrapping_add(slots[i].size() as u64);
        slots[i] = Block::new(size, rng.word());
    }
    if gens_left > 1 {
        // Hand the slots to a successor thread; its result is ours.
        let h = std::thread::spawn(move || worker(slots, rng, ops, gens_left - 1));
        sum.wrapping_add(h.join().expect("larson worker panicked"))
    } else {
        sum ^ slots.iter().map(|b| b.tag()).fold(0, u64::wrapping_add)
    }
}

pub fn run(args: &Args) -> Result<(), String> {
    let size: u64 = args.number(super::default_size("larson"))?;
    let threads: usize = args.get("threads", 2)?;
    if threads == 0 {
        return Err("--threads must be at least 1".to_string());
    }
    let start = Mark::now();
    let mut rng = Rng::new(11);
    let initial: Vec<Vec<Block>> = (0..threads)
        .map(|_| {
            (0..SLOTS)
                .map(|_| Block::new(rng.range(MIN, MAX), rng.word()))
                .collect()
        })
        .collect();
    let ops = (size / threads as u64 / GENERATIONS).max(1);
    let cells: Vec<std::sync::Mutex<Option<Vec<Block>>>> = initial
        .into_iter()
        .map(|v| std::sync::Mutex::new(Some(v)))
        .collect();
    let sums = on_threads(threads, |t| {
        let slots = cells[t].lock().unwrap().take().unwrap();
        worker(slots, Rng::new(100 + t as u64), ops, GENERATIONS)
    });
    let checksum = sums.into_iter().fold(0, u64::wrapping_add);
    finish("larson", size, threads, start, checksum, "");
    Ok(())
}
