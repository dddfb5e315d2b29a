//! What the suite's workloads share: a small random generator, `Block` (an allocation that
//! carries a stamp and checks it before it is freed, so overlapping or corrupted blocks abort
//! the run with a message), and the `result:` line.

use crate::measure::{ms, Mark};
use std::alloc::{alloc, dealloc, realloc, Layout};
use std::ptr::NonNull;

/// xorshift64*: fast, deterministic per seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(crate::workload::mix(seed) | 1)
    }

    #[inline]
    pub fn word(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0; the slight bias does not matter here).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.word() >> 32) * n) >> 32
    }

    /// Uniform in `lo..=hi`.
    #[inline]
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below((hi - lo + 1) as u64) as usize
    }
}

/// The smallest block the suite allocates: room for the stamp word.
pub const MIN_BLOCK: usize = 8;

/// A heap block of `size` bytes written in full when made: the stamp word `tag` at offset 0,
/// then the byte `tag as u8` everywhere else. [`Block::check`] (and drop) reads back the stamp,
/// the middle byte and the last byte: a block that overlaps another live block, or that the
/// allocator scribbled on, fails loudly.
pub struct Block {
    ptr: NonNull<u8>,
    size: usize,
    tag: u64,
}

// SAFETY: a Block owns its allocation exclusively; freeing it on another thread is what the
// cross-thread workloads are for, and every allocator under test allows it.
unsafe impl Send for Block {}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).expect("block size fits a layout")
}

impl Block {
    pub fn new(size: usize, tag: u64) -> Block {
        let size = size.max(MIN_BLOCK);
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc(layout(size)) };
        let Some(ptr) = NonNull::new(p) else {
            panic!("out of memory allocating {size} bytes")
        };
        // SAFETY: a fresh block of `size` >= 8 bytes, aligned to 8.
        unsafe {
            ptr.as_ptr().cast::<u64>().write(tag);
            ptr.as_ptr().add(8).write_bytes(tag as u8, size - 8);
        }
        Block { ptr, size, tag }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// The block's address.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// Panics (aborts, in release builds) if the block's contents are not what was written.
    pub fn check(&self) {
        let p = self.ptr.as_ptr();
        // SAFETY: the block is live and `size` >= 8 bytes long.
        let (word, mid, last) = unsafe {
            (
                p.cast::<u64>().read(),
                p.add((self.size / 2).max(8).min(self.size - 1)).read(),
                p.add(self.size - 1).read(),
            )
        };
        let b = self.tag as u8;
        let ok = word == self.tag && (self.size == 8 || (mid == b && last == b));
        assert!(
            ok,
            "block {:p} of {} bytes corrupted: stamp {word:#x} (want {:#x}), middle {mid:#x}, \
             last {last:#x} (want {b:#x})",
            p, self.size, self.tag
        );
    }

    /// Grows or shrinks the block with `realloc`, checking the kept part and writing the rest.
    pub fn resize(&mut self, new_size: usize) {
        let new_size = new_size.max(MIN_BLOCK);
        self.check();
        // SAFETY: ptr came from alloc with this layout; new_size is non-zero.
        let p = unsafe { realloc(self.ptr.as_ptr(), layout(self.size), new_size) };
        let Some(ptr) = NonNull::new(p) else {
            panic!("out of memory reallocating to {new_size} bytes")
        };
        if new_size > self.size {
            // SAFETY: bytes size..new_size are ours now.
            unsafe {
                ptr.as_ptr()
                    .add(self.size)
                    .write_bytes(self.tag as u8, new_size - self.size)
            };
        }
        self.ptr = ptr;
        self.size = new_size;
        self.check();
    }

    /// Writes `v` to the block's stamp word and returns the word read back (for loops that
    /// hammer one object).
    #[inline]
    pub fn poke(&mut self, v: u64) -> u64 {
        let p = self.ptr.as_ptr().cast::<u64>();
        // SAFETY: live block of at least 8 bytes; volatile so every write happens.
        unsafe {
            p.write_volatile(v);
            p.read_volatile()
        }
    }

    /// Restores the stamp after [`Block::poke`].
    pub fn restamp(&mut self) {
        self.poke(self.tag);
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.check();
        }
        // SAFETY: allocated by Block::new/resize with this layout, freed once.
        unsafe { dealloc(self.ptr.as_ptr(), layout(self.size)) };
    }
}

/// Runs `f(thread index)` on `threads` threads and collects their results in order.
pub fn on_threads<T: Send>(threads: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn({
                    let f = &f;
                    move || f(t)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("worker thread panicked"))
            .collect()
    })
}

/// Prints the workload's closing lines: `wall_ms`, `checksum`, and the `result:` line.
pub fn finish(sub: &str, size: u64, threads: usize, start: Mark, checksum: u64, extra: &str) {
    let d = start.delta();
    println!("wall_ms: {}", ms(d.wall));
    println!("checksum: {checksum:x}");
    println!(
        "result: sub={sub} alloc={} size={size} threads={threads} wall_ms={} minflt={} \
         peak_rss_mib={:.1} checksum={checksum:x}{}{extra}",
        crate::global::allocator(),
        ms(d.wall),
        d.minflt,
        crate::measure::peak_rss_kib() as f64 / 1024.0,
        if extra.is_empty() { "" } else { " " },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_round_trip() {
        let mut b = Block::new(3, 0x1234);
        assert_eq!(b.size(), MIN_BLOCK);
        b.check();
        b.resize(5000);
        b.resize(100);
        assert_eq!(b.size(), 100);
        assert_eq!(b.poke(7), 7);
        b.restamp();
    }

    #[test]
    #[should_panic(expected = "corrupted")]
    fn corruption_is_caught() {
        let mut b = Block::new(64, 0xabcd);
        b.poke(1);
        b.check();
    }

    #[test]
    fn rng_ranges() {
        let mut r = Rng::new(1);
        for _ in 0..1000 {
            let v = r.range(3, 9);
            assert!((3..=9).contains(&v));
            assert!(r.below(5) < 5);
        }
    }
}
