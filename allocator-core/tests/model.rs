//! A proptest model: random sequences of alloc / dealloc / realloc / alloc_zeroed against a
//! shadow model that records every live block. Checks: no two live blocks overlap, alignment,
//! `usable_size >= size`, contents kept (including across realloc), zeroed memory is zero.

use hugealloc::testing::alloc;
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        size: usize,
        lg_align: u32,
        zeroed: bool,
    },
    Free {
        pick: usize,
    },
    Realloc {
        pick: usize,
        size: usize,
    },
}

fn size_strategy() -> impl Strategy<Value = usize> {
    prop_oneof![
        8 => 0usize..=256,
        4 => 257usize..=16384,
        2 => 16385usize..=(2 << 20),
        1 => (2usize << 20)..=(64 << 20),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (size_strategy(), prop_oneof![6 => 0u32..=4, 2 => 5u32..=12, 1 => 13u32..=22], any::<bool>())
            .prop_map(|(size, lg_align, zeroed)| Op::Alloc { size, lg_align, zeroed }),
        4 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        2 => (any::<usize>(), size_strategy()).prop_map(|(pick, size)| Op::Realloc { pick, size }),
    ]
}

struct Block {
    size: usize,
    align: usize,
    seed: u8,
}

/// Offsets checked in a block: all of a small one, a sample of a big one.
fn probe_offsets(size: usize) -> impl Iterator<Item = usize> {
    let step = if size <= 8192 { 1 } else { 4093 };
    (0..size).step_by(step).chain(size.checked_sub(1))
}

fn byte(seed: u8, off: usize) -> u8 {
    seed.wrapping_add((off as u8).wrapping_mul(31))
        .wrapping_add((off >> 12) as u8)
}

fn write_pattern(p: *mut u8, size: usize, seed: u8) {
    for off in probe_offsets(size) {
        // SAFETY: off < size and p is a live block of at least size bytes.
        unsafe { *p.add(off) = byte(seed, off) };
    }
}

fn check_pattern(p: *const u8, size: usize, seed: u8) {
    for off in probe_offsets(size) {
        // SAFETY: as in write_pattern.
        let got = unsafe { *p.add(off) };
        assert_eq!(got, byte(seed, off), "block {p:?} size {size} offset {off}");
    }
}

fn check_no_overlap(live: &BTreeMap<usize, Block>, p: usize, size: usize) {
    let end = p + size.max(1);
    if let Some((&q, b)) = live.range(..end).next_back() {
        assert!(
            q + b.size.max(1) <= p || q >= end,
            "block {p:#x}+{size} overlaps {q:#x}+{}",
            b.size
        );
    }
}

fn run(ops: Vec<Op>) {
    let mut live: BTreeMap<usize, Block> = BTreeMap::new();
    let mut seed = 1u8;
    for op in ops {
        seed = seed.wrapping_add(1);
        match op {
            Op::Alloc {
                size,
                lg_align,
                zeroed,
            } => {
                let align = 1usize << lg_align;
                let p = if zeroed {
                    alloc::alloc_zeroed(size, align)
                } else {
                    alloc::alloc(size, align)
                };
                assert!(!p.is_null(), "alloc({size}, {align}) failed");
                assert_eq!(p as usize % align, 0, "alloc({size}, {align}) misaligned");
                if size >= 16 {
                    assert_eq!(p as usize % 16, 0);
                }
                // SAFETY: p is live.
                assert!(unsafe { alloc::usable_size(p) } >= size);
                if zeroed {
                    for off in probe_offsets(size) {
                        // SAFETY: off < size.
                        assert_eq!(unsafe { *p.add(off) }, 0, "zeroed block not zero at {off}");
                    }
                }
                check_no_overlap(&live, p as usize, size);
                write_pattern(p, size, seed);
                live.insert(p as usize, Block { size, align, seed });
            }
            Op::Free { pick } => {
                if live.is_empty() {
                    continue;
                }
                let key = *live.keys().nth(pick % live.len()).unwrap();
                let b = live.remove(&key).unwrap();
                check_pattern(key as *const u8, b.size, b.seed);
                // SAFETY: key is a live block, removed from the model.
                unsafe { alloc::free(key as *mut u8) };
            }
            Op::Realloc { pick, size } => {
                if live.is_empty() {
                    continue;
                }
                let key = *live.keys().nth(pick % live.len()).unwrap();
                let b = live.remove(&key).unwrap();
                // SAFETY: key is a live block with alignment b.align.
                let q = unsafe { alloc::realloc(key as *mut u8, size, b.align) };
                assert!(!q.is_null());
                assert_eq!(q as usize % b.align, 0);
                // SAFETY: q is live.
                assert!(unsafe { alloc::usable_size(q) } >= size);
                let kept = b.size.min(size);
                for off in probe_offsets(b.size).filter(|&o| o < kept) {
                    // SAFETY: off < kept <= size.
                    let got = unsafe { *q.add(off) };
                    assert_eq!(got, byte(b.seed, off), "realloc lost byte {off}");
                }
                check_no_overlap(&live, q as usize, size);
                write_pattern(q, size, seed);
                live.insert(
                    q as usize,
                    Block {
                        size,
                        align: b.align,
                        seed,
                    },
                );
            }
        }
    }
    for (p, b) in live {
        check_pattern(p as *const u8, b.size, b.seed);
        // SAFETY: p is live.
        unsafe { alloc::free(p as *mut u8) };
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_operations_keep_the_model(ops in proptest::collection::vec(op_strategy(), 1..300)) {
        run(ops);
    }
}

#[test]
fn many_small_blocks_do_not_overlap() {
    let mut ops = Vec::new();
    for i in 0..20_000 {
        ops.push(Op::Alloc {
            size: i % 300,
            lg_align: 0,
            zeroed: i % 7 == 0,
        });
        if i % 3 == 0 {
            ops.push(Op::Free { pick: i * 7919 });
        }
    }
    run(ops);
}
