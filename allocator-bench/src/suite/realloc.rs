//! `realloc`: growth by `realloc`. 16 buffers grow side by side, each from 8 bytes to a target
//! of 1 KiB to 4 MiB (log-uniform), by steps of 1 byte to a quarter of the current length, as
//! strings and vectors grow when their code appends without reserving. Every appended byte is
//! a function of its position, and a finished buffer is read back whole before it is freed:
//! a `realloc` that loses or moves contents wrongly fails. `SIZE` MiB appended in all.

use super::common::{finish, Rng};
use crate::args::Args;
use crate::measure::Mark;
use std::alloc::{alloc, dealloc, realloc, Layout};

const BUFFERS: usize = 16;

struct Growing {
    ptr: *mut u8,
    len: usize,
    target: usize,
    seed: u8,
}

#[inline]
fn byte(seed: u8, i: usize) -> u8 {
    seed.wrapping_add((i as u8).wrapping_mul(7)) ^ (i >> 8) as u8
}

impl Growing {
    fn new(rng: &mut Rng) -> Growing {
        let target = 1usize << rng.range(10, 22);
        let target = target + rng.below(target as u64) as usize;
        let seed = rng.word() as u8;
        // SAFETY: non-zero layout.
        let ptr = unsafe { alloc(Layout::from_size_align(8, 1).unwrap()) };
        assert!(!ptr.is_null(), "out of memory");
        for i in 0..8 {
            // SAFETY: inside the 8-byte block.
            unsafe { ptr.add(i).write(byte(seed, i)) };
        }
        Growing {
            ptr,
            len: 8,
            target: target.min(4 << 20),
            seed,
        }
    }

    /// Appends `n` bytes; returns whether the buffer reached its target.
    fn grow(&mut self, n: usize) -> bool {
        let new = self.len + n;
        // SAFETY: ptr has layout (len, 1); new > 0.
        let p = unsafe { realloc(self.ptr, Layout::from_size_align(self.len, 1).unwrap(), new) };
        assert!(!p.is_null(), "out of memory");
        for i in self.len..new {
            // SAFETY: inside the new block.
            unsafe { p.add(i).write(byte(self.seed, i)) };
        }
        self.ptr = p;
        self.len = new;
        new >= self.target
    }

    /// Reads the buffer back, frees it, returns a checksum.
    fn finish(self) -> u64 {
        // SAFETY: ptr holds len initialised bytes.
        let s = unsafe { std::slice::from_raw_parts(self.ptr, self.len) };
        let bad = s
            .iter()
            .enumerate()
            .position(|(i, &b)| b != byte(self.seed, i));
        assert!(
            bad.is_none(),
            "realloc: byte {bad:?} of a {}-byte buffer lost",
            self.len
        );
        let sum = s.iter().step_by(4096).map(|&b| b as u64).sum::<u64>() + self.len as u64;
        // SAFETY: allocated with this layout, freed once.
        unsafe { dealloc(self.ptr, Layout::from_size_align(self.len, 1).unwrap()) };
        sum
    }
}

pub fn run(args: &Args) -> Result<(), String> {
    let mib: u64 = args.number(super::default_size("realloc"))?;
    let start = Mark::now();
    let mut rng = Rng::new(5);
    let mut bufs: Vec<Growing> = (0..BUFFERS).map(|_| Growing::new(&mut rng)).collect();
    let (mut appended, mut sum, mut reallocs) = (0u64, 0u64, 0u64);
    while appended < mib << 20 {
        let k = rng.below(BUFFERS as u64) as usize;
        let n = 1 + rng.below(1 + bufs[k].len as u64 / 4) as usize;
        appended += n as u64;
        reallocs += 1;
        if bufs[k].grow(n) {
            let fresh = Growing::new(&mut rng);
            sum = sum.wrapping_add(std::mem::replace(&mut bufs[k], fresh).finish());
        }
    }
    for b in bufs {
        sum = sum.wrapping_add(b.finish());
    }
    finish(
        "realloc",
        mib,
        1,
        start,
        sum,
        &format!("reallocs={reallocs}"),
    );
    Ok(())
}
