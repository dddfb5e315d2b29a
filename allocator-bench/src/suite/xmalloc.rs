//! `xmalloc`: producers and consumers, after xmalloc-test. `--threads` (1) producers allocate
//! blocks of 8 to 512 bytes and pass them in batches of 256 through bounded channels to as many
//! consumers, which check and free them: every free is a remote free, and the producer's
//! thread cache never sees its blocks again. `SIZE` blocks in all.

use super::common::{finish, Block, Rng};
use crate::args::Args;
use crate::measure::Mark;
use std::sync::mpsc::sync_channel;

const BATCH: usize = 256;

pub fn run(args: &Args) -> Result<(), String> {
    let size: u64 = args.number(super::default_size("xmalloc"))?;
    let pairs: usize = args.get("threads", 1)?;
    if pairs == 0 {
        return Err("--threads must be at least 1".to_string());
    }
    let start = Mark::now();
    let per = size / pairs as u64;
    let checksum = std::thread::scope(|s| {
        let mut consumers = Vec::new();
        for p in 0..pairs {
            let (tx, rx) = sync_channel::<Vec<Block>>(16);
            s.spawn(move || {
                let mut rng = Rng::new(p as u64 + 1);
                let mut left = per;
                while left > 0 {
                    let n = (left as usize).min(BATCH);
                    let batch: Vec<Block> = (0..n)
                        .map(|_| Block::new(rng.range(8, 512), rng.word()))
                        .collect();
                    left -= n as u64;
                    tx.send(batch).expect("consumer alive");
                }
            });
            consumers.push(s.spawn(move || {
                let mut sum = 0u64;
                let mut count = 0u64;
                for batch in rx {
                    for b in batch {
                        sum = sum.wrapping_add(b.tag());
                        count += 1;
                    }
                }
                assert_eq!(count, per, "xmalloc: blocks lost");
                sum
            }));
        }
        consumers
            .into_iter()
            .map(|h| h.join().expect("consumer panicked"))
            .fold(0, u64::wrapping_add)
    });
    finish("xmalloc", size, 2 * pairs, start, checksum, "");
    Ok(())
}
