//! `espresso`: mixed sizes, after the espresso benchmark (two-level logic minimisation, whose
//! cubes and covers are bit sets of many widths). `SIZE` problems; each has its own number of
//! variables, so its cubes are 8 to 512 bytes, held in a cover (`Vec<Block>`, itself regrown
//! by `realloc`). Each problem: build a cover, then rounds of pairwise intersection (a new cube
//! per non-empty result, replacing a random old one), a scratch table of 1 to 16 KiB per round grown 4x by `realloc`,
//! and a "reduce" step that copies the survivors into a fresh cover. Each cube's stamp is a
//! hash of its bits, checked when the cube is freed.

use super::common::{finish, Block, Rng};
use crate::args::Args;
use crate::measure::Mark;

/// A cube: `words` 64-bit words of literals; word 0 is a hash of the rest (the check).
struct Cube {
    bits: Vec<u64>,
}

fn hash(words: &[u64]) -> u64 {
    words.iter().fold(0x51ed_270b_u64, |h, &w| {
        (h ^ w).wrapping_mul(0x100_0000_01b3)
    })
}

impl Cube {
    fn new(words: usize, rng: &mut Rng) -> Cube {
        let mut bits = Vec::with_capacity(words + 1);
        bits.push(0);
        // Dense cubes: most bits set, so intersections are often non-empty.
        bits.extend((0..words).map(|_| rng.word() | rng.word() | rng.word()));
        bits[0] = hash(&bits[1..]);
        Cube { bits }
    }

    fn and(&self, other: &Cube) -> Option<Cube> {
        let mut bits = Vec::with_capacity(self.bits.len());
        bits.push(0);
        bits.extend(
            self.bits[1..]
                .iter()
                .zip(&other.bits[1..])
                .map(|(a, b)| a & b),
        );
        if bits[1..].iter().all(|&w| w == 0) {
            return None;
        }
        bits[0] = hash(&bits[1..]);
        Some(Cube { bits })
    }

    fn ones(&self) -> u64 {
        self.bits[1..].iter().map(|w| w.count_ones() as u64).sum()
    }
}

impl Drop for Cube {
    fn drop(&mut self) {
        assert!(
            std::thread::panicking() || self.bits[0] == hash(&self.bits[1..]),
            "espresso: cube contents corrupted"
        );
    }
}

fn problem(seed: u64) -> u64 {
    let mut rng = Rng::new(seed);
    let words = 1 + rng.below(63) as usize;
    let n = 200 + rng.below(800) as usize;
    let mut cover: Vec<Cube> = Vec::new();
    for _ in 0..n {
        cover.push(Cube::new(words, &mut rng));
    }
    let mut sum = 0u64;
    for _round in 0..6 {
        let mut scratch = Block::new(rng.range(1 << 10, 16 << 10), seed);
        for _ in 0..cover.len() {
            let i = rng.below(cover.len() as u64) as usize;
            let j = rng.below(cover.len() as u64) as usize;
            if let Some(c) = cover[i].and(&cover[j]) {
                sum = sum.wrapping_add(c.ones());
                let k = rng.below(cover.len() as u64) as usize;
                cover[k] = c;
            } else if cover.len() < 2 * n {
                cover.push(Cube::new(words, &mut rng));
            }
        }
        // reduce: survivors with enough literals move to a new cover, grown one push at a time
        let mut next = Vec::new();
        for c in cover.drain(..) {
            if c.ones() > (words as u64 * 64) / 8 || next.len() < 64 {
                next.push(c);
            }
        }
        cover = next;
        scratch.resize(scratch.size() * 4);
        drop(scratch);
    }
    sum ^ cover.len() as u64
}

pub fn run(args: &Args) -> Result<(), String> {
    let size: u64 = args.number(super::default_size("espresso"))?;
    let start = Mark::now();
    let mut checksum = 0u64;
    for p in 0..size {
        checksum = checksum.rotate_left(3) ^ problem(p);
    }
    finish("espresso", size, 1, start, checksum, "");
    Ok(())
}
