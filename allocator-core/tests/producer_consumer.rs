//! A producer/consumer pair: one thread allocates, the other frees, for millions of blocks.
//! Every block goes home to the producer's arena through the consumer's cache flushes; the
//! footprint must stay flat (no unbounded growth of the remote-free path). Alone in its test
//! binary so that no other test moves the figures. Bounded by a block count, not by time.

#[global_allocator]
static GLOBAL: hugealloc::HugeAlloc = hugealloc::HugeAlloc;

use std::sync::mpsc;

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Runs `batches` batches of 256 blocks from producer to consumer; returns `stats().active`.
fn run(tx: &mpsc::SyncSender<Vec<Box<[u8]>>>, seed: &mut u64, batches: usize) -> usize {
    for _ in 0..batches {
        let batch: Vec<Box<[u8]>> = (0..256)
            .map(|_| {
                let size = match xorshift(seed) % 64 {
                    0 => 1 + (xorshift(seed) % (32 << 10)) as usize,
                    _ => 1 + (xorshift(seed) % 1024) as usize,
                };
                vec![(size % 251) as u8; size].into_boxed_slice()
            })
            .collect();
        tx.send(batch).unwrap();
    }
    hugealloc::stats().active
}

#[test]
fn producer_consumer_footprint_stays_flat() {
    let (tx, rx) = mpsc::sync_channel::<Vec<Box<[u8]>>>(8);
    let consumer = std::thread::spawn(move || {
        let mut freed = 0usize;
        for batch in rx {
            for b in batch {
                assert!(
                    b.iter().all(|&x| x == (b.len() % 251) as u8),
                    "block corrupted"
                );
                freed += 1;
            }
        }
        freed
    });
    let mut seed = 0x2545f4914f6cdd1d;
    // Warm up: caches, slabs and the channel reach their steady state.
    let warm = run(&tx, &mut seed, 2_000);
    let mut peak = warm;
    // Then ten times as many blocks (5 million in all) in rounds, watching the footprint.
    for _ in 0..10 {
        peak = peak.max(run(&tx, &mut seed, 2_000));
    }
    drop(tx);
    let freed = consumer.join().unwrap();
    assert_eq!(freed, 22_000 * 256);
    eprintln!("active after warm-up {warm} B, peak over 10 rounds {peak} B");
    // Flat: growth past warm-up bounded by a few MiB (a leak of even one block in a thousand
    // would add tens of MiB over these 5 million blocks).
    assert!(
        peak < warm + (8 << 20),
        "footprint grew from {warm} to {peak} bytes"
    );
}
