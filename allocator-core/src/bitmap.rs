//! Fixed-size bitmaps: `Bitmap<W>` holds `64 * W` bits in plain words (slab free maps, chunk
//! page maps), with first-set and run searches. A set bit means "free" wherever hugealloc uses it.
//!
//! A bit index past the map (only corrupt metadata makes one) aborts with a message through
//! `diag`: no panic (whose hook would allocate inside the allocator), no wrong bit.

/// `64 * W` bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bitmap<const W: usize> {
    words: [u64; W],
}

/// A best fit of `Bitmap::find_fit`: bits `start..start + len` of the run of set bits
/// `run_start..run_end`, and the longest run of set bits other than that one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fit {
    pub start: usize,
    pub run_start: usize,
    pub run_end: usize,
    pub others: usize,
}

impl<const W: usize> Bitmap<W> {
    pub const BITS: usize = 64 * W;

    pub const fn new() -> Self {
        Bitmap { words: [0; W] }
    }

    /// The word holding bit `i`.
    #[inline(always)]
    fn word(&self, i: usize) -> u64 {
        match self.words.get(i / 64) {
            Some(&w) => w,
            None => past_end(i, Self::BITS),
        }
    }

    /// The word holding bit `i`, to change.
    #[inline(always)]
    fn word_mut(&mut self, i: usize) -> &mut u64 {
        match self.words.get_mut(i / 64) {
            Some(w) => w,
            None => past_end(i, Self::BITS),
        }
    }

    /// The words, bit `i` in word `i / 64` at bit `i % 64` (for scans a word at a time).
    #[inline]
    pub fn words(&self) -> &[u64; W] {
        &self.words
    }

    #[inline]
    pub fn get(&self, i: usize) -> bool {
        self.word(i) >> (i % 64) & 1 != 0
    }

    #[inline]
    pub fn set(&mut self, i: usize) {
        *self.word_mut(i) |= 1 << (i % 64);
    }

    #[inline]
    pub fn clear(&mut self, i: usize) {
        *self.word_mut(i) &= !(1 << (i % 64));
    }

    /// Sets the bits `bits` of word `w` (bits `64 * w..64 * w + 64`) with one store, if none of
    /// them is set already; otherwise changes nothing and returns those already set (a word
    /// past the map returns `bits`). Slab flushes return a word's worth of objects at once.
    #[inline]
    pub fn set_word_bits(&mut self, w: usize, bits: u64) -> Result<(), u64> {
        let Some(word) = self.words.get_mut(w) else {
            return Err(bits);
        };
        let both = *word & bits;
        if both != 0 {
            return Err(both);
        }
        *word |= bits;
        Ok(())
    }

    /// Clears bits `start..start + len` here and sets them in `other`, a word at a time in one
    /// pass; returns how many of them were set in `other` before (a page chunk's run taken:
    /// free bits cleared, dirty bits set, the dirty free pages counted).
    pub fn move_range_to(&mut self, other: &mut Self, start: usize, len: usize) -> usize {
        let (mut i, end, mut n) = (start, start + len, 0);
        while i < end {
            let lo = i % 64;
            let k = (64 - lo).min(end - i);
            let mask = if k == 64 {
                u64::MAX
            } else {
                ((1u64 << k) - 1) << lo
            };
            *self.word_mut(i) &= !mask;
            let o = other.word_mut(i);
            n += (*o & mask).count_ones() as usize;
            *o |= mask;
            i += k;
        }
        n
    }

    /// Sets bits `start..start + len`.
    pub fn set_range(&mut self, start: usize, len: usize) {
        self.fill_range(start, len, true)
    }

    /// Clears bits `start..start + len`.
    pub fn clear_range(&mut self, start: usize, len: usize) {
        self.fill_range(start, len, false)
    }

    fn fill_range(&mut self, start: usize, len: usize, value: bool) {
        let mut i = start;
        let end = start + len;
        while i < end {
            let lo = i % 64;
            let n = (64 - lo).min(end - i);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << lo
            };
            let word = self.word_mut(i);
            if value {
                *word |= mask;
            } else {
                *word &= !mask;
            }
            i += n;
        }
    }

    /// Whether bits `start..start + len` are all set.
    pub fn all_set(&self, start: usize, len: usize) -> bool {
        (start..start + len).all(|i| self.get(i))
    }

    /// The number of set bits.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The lowest set bit, if any.
    #[inline]
    pub fn first_set(&self) -> Option<usize> {
        for (w, &word) in self.words.iter().enumerate() {
            if word != 0 {
                return Some(w * 64 + word.trailing_zeros() as usize);
            }
        }
        None
    }

    /// Clears the lowest `max` set bits (all of them when fewer are set), handing each to `f`
    /// in increasing order as `f(k, i)`: the `k`-th bit taken (from 0, so `k < max`) is bit
    /// `i`; returns how many. Works a word at a time: each bit costs a count of trailing zeros
    /// and a clear of the lowest bit, each word one load and one store, with no search
    /// restarted per bit (slab refill, which writes the `k`-th block to slot `k`).
    #[inline]
    pub fn take_lowest(&mut self, max: usize, mut f: impl FnMut(usize, usize)) -> usize {
        let mut n = 0;
        for (w, word) in self.words.iter_mut().enumerate() {
            if n == max {
                break;
            }
            let mut bits = *word;
            while bits != 0 && n < max {
                f(n, w * 64 + bits.trailing_zeros() as usize);
                bits &= bits - 1;
                n += 1;
            }
            *word = bits;
        }
        n
    }

    /// The lowest set bit at or after `from`, below `Self::BITS`.
    pub fn next_set(&self, from: usize) -> Option<usize> {
        if from >= Self::BITS {
            return None;
        }
        let mut w = from / 64;
        let mut word = self.words[w] & (u64::MAX << (from % 64));
        loop {
            if word != 0 {
                return Some(w * 64 + word.trailing_zeros() as usize);
            }
            w += 1;
            if w == W {
                return None;
            }
            word = self.words[w];
        }
    }

    /// The lowest clear bit at or after `from`, or `Self::BITS`.
    pub fn next_clear(&self, from: usize) -> usize {
        if from >= Self::BITS {
            return Self::BITS;
        }
        let mut w = from / 64;
        let mut word = !self.words[w] & (u64::MAX << (from % 64));
        loop {
            if word != 0 {
                return w * 64 + word.trailing_zeros() as usize;
            }
            w += 1;
            if w == W {
                return Self::BITS;
            }
            word = !self.words[w];
        }
    }

    /// Best fit: the start of the shortest run of set bits of length at least `len` whose
    /// start is a multiple of `align` (a power of two, in bits); ties go to the lowest address.
    pub fn find_run(&self, len: usize, align: usize) -> Option<usize> {
        // A `longest` above every run lets the scan stop at the first exact fit.
        self.find_fit(len, align, Self::BITS + 1).map(|f| f.start)
    }

    /// `find_run`'s best fit, with what a caller keeping the map's longest run needs to update
    /// it after taking `len` bits at `start`, without a second scan: the run the fit lies in
    /// and the longest of the other runs. `longest` is the map's longest run, exact: the scan
    /// stops early only at a run of exactly `len` bits shorter than that, when a run of
    /// `longest` bits is among the others.
    pub fn find_fit(&self, len: usize, align: usize, longest: usize) -> Option<Fit> {
        // (aligned start, run start, run end) of the best run so far.
        let mut best: Option<(usize, usize, usize)> = None;
        // The two longest runs seen (a length seen twice fills both).
        let (mut top, mut second) = (0, 0);
        let mut i = 0;
        while let Some(start) = self.next_set(i) {
            let end = self.next_clear(start);
            let run = end - start;
            if run > top {
                (top, second) = (run, top);
            } else if run > second {
                second = run;
            }
            let astart = (start + align - 1) & !(align - 1);
            if astart + len <= end && best.is_none_or(|(_, s, e)| run < e - s) {
                best = Some((astart, start, end));
                if run == len && run < longest {
                    let others = longest;
                    return Some(Fit {
                        start: astart,
                        run_start: start,
                        run_end: end,
                        others,
                    });
                }
            }
            i = end;
        }
        let (start, run_start, run_end) = best?;
        // The chosen run is one of the runs seen: without it the longest is `second` if it
        // was the (or a) longest, else `top`.
        let others = if run_end - run_start == top {
            second
        } else {
            top
        };
        Some(Fit {
            start,
            run_start,
            run_end,
            others,
        })
    }

    /// The first bit of the run of set bits holding bit `i` (which must be set): one past the
    /// last clear bit below `i`, or 0.
    pub fn run_start(&self, i: usize) -> usize {
        debug_assert!(self.get(i));
        let mut w = i / 64;
        let mut clear = !self.word(i) & (u64::MAX >> (63 - i % 64));
        loop {
            if clear != 0 {
                return w * 64 + 64 - clear.leading_zeros() as usize;
            }
            if w == 0 {
                return 0;
            }
            w -= 1;
            clear = !self.word(w * 64);
        }
    }

    /// The length of the run of set bits holding bit `i` (which must be set).
    pub fn run_len_at(&self, i: usize) -> usize {
        self.next_clear(i) - self.run_start(i)
    }

    /// The length of the longest run of set bits.
    pub fn longest_run(&self) -> usize {
        let mut longest = 0;
        let mut i = 0;
        while let Some(start) = self.next_set(i) {
            let end = self.next_clear(start);
            longest = longest.max(end - start);
            i = end;
        }
        longest
    }
}

/// Aborts on bit `i` of a map of `bits` bits.
#[cold]
#[inline(never)]
fn past_end(i: usize, bits: usize) -> ! {
    crate::diag::fatal_index("a bitmap bit past the map (corrupt metadata)", i, bits)
}

impl<const W: usize> Default for Bitmap<W> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_word_bits_sets_all_or_nothing() {
        let mut m = Bitmap::<2>::new();
        assert_eq!(m.set_word_bits(1, 0b1010), Ok(()));
        assert!(m.get(65) && m.get(67) && !m.get(64) && !m.get(1));
        // One bit already set: nothing changes, the overlap is reported.
        assert_eq!(m.set_word_bits(1, 0b0110), Err(0b0010));
        assert!(!m.get(66));
        assert_eq!(m.count(), 2);
        assert_eq!(m.set_word_bits(0, u64::MAX), Ok(()));
        assert_eq!(m.count(), 66);
        // A word past the map.
        assert_eq!(m.set_word_bits(2, 1), Err(1));
    }

    #[test]
    fn take_lowest_takes_the_lowest_set_bits_in_order_and_clears_them() {
        // Patterns across word boundaries; the reference is next_set bit by bit.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..200 {
            let mut m = Bitmap::<4>::new();
            for w in 0..4 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                // Some empty and some full words.
                m.words[w] = match (seed >> 60) % 4 {
                    0 => 0,
                    1 => u64::MAX,
                    _ => seed,
                };
            }
            let max = round % 300;
            let mut want = std::vec::Vec::new();
            let mut from = 0;
            while want.len() < max {
                let Some(i) = m.next_set(from) else {
                    break;
                };
                want.push(i);
                from = i + 1;
            }
            let mut left = m;
            for &i in &want {
                left.clear(i);
            }
            let mut got = std::vec::Vec::new();
            // Each bit comes as the k-th taken (the refill writes block k to slot k).
            let taken = m.take_lowest(max, |k, i| {
                assert_eq!(k, got.len(), "round {round}");
                got.push(i)
            });
            assert_eq!(taken, want.len());
            assert_eq!(got, want, "round {round}");
            assert_eq!(
                m, left,
                "round {round}: the taken bits, and only those, cleared"
            );
        }
    }

    #[test]
    fn run_around_a_bit() {
        let mut b = Bitmap::<8>::new();
        b.set_range(60, 10);
        b.set_range(200, 1);
        b.set_range(0, 3);
        for i in 60..70 {
            assert_eq!(b.run_start(i), 60);
            assert_eq!(b.run_len_at(i), 10);
        }
        assert_eq!((b.run_start(200), b.run_len_at(200)), (200, 1));
        assert_eq!((b.run_start(1), b.run_len_at(1)), (0, 3));
        b.set_range(0, 512);
        assert_eq!((b.run_start(511), b.run_len_at(511)), (0, 512));
    }

    #[test]
    fn set_clear_search() {
        let mut b = Bitmap::<8>::new();
        assert_eq!(b.first_set(), None);
        b.set(300);
        b.set(5);
        assert_eq!(b.first_set(), Some(5));
        assert_eq!(b.next_set(6), Some(300));
        b.clear(5);
        assert_eq!(b.first_set(), Some(300));
        assert_eq!(b.count(), 1);
        b.set_range(60, 70);
        assert_eq!(b.count(), 71);
        assert!(b.all_set(60, 70));
        assert!(!b.all_set(59, 2));
        b.clear_range(60, 70);
        assert_eq!(b.count(), 1);
    }

    /// `find_fit` against a rescan: after taking each fit, the longest run it implies is the
    /// map's longest run, over random maps, lengths and alignments (a wrong `others` for
    /// duplicated longest runs, an early stop at the only longest run, or a fit's pieces left
    /// out make it disagree).
    #[test]
    fn find_fit_gives_the_longest_run_left_after_the_take() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..2000 {
            let mut b = Bitmap::<8>::new();
            // Runs of random length at random places, sometimes long ones.
            for _ in 0..(next() % 12) {
                let start = (next() % 512) as usize;
                let len = (next() % if next() % 4 == 0 { 300 } else { 24 }) as usize;
                b.set_range(start, len.min(512 - start));
            }
            let len = 1 + (next() % 40) as usize;
            let align = 1 << (next() % 4);
            let longest = b.longest_run();
            let fit = b.find_fit(len, align, longest);
            assert_eq!(fit.map(|f| f.start), b.find_run(len, align));
            let Some(f) = fit else { continue };
            assert_eq!(f.start % align, 0);
            assert_eq!(
                (f.run_start, f.run_end - f.run_start),
                (b.run_start(f.start), b.run_len_at(f.start))
            );
            b.clear_range(f.start, len);
            let implied = f
                .others
                .max(f.start - f.run_start)
                .max(f.run_end - f.start - len);
            assert_eq!(
                implied,
                b.longest_run(),
                "fit {f:?} of {len} aligned {align}"
            );
        }
    }

    #[test]
    fn move_range_to_clears_here_sets_there_and_counts() {
        let (mut free, mut dirty) = (Bitmap::<8>::new(), Bitmap::<8>::new());
        free.set_range(0, 512);
        dirty.set_range(60, 10);
        dirty.set(200);
        assert_eq!(free.move_range_to(&mut dirty, 50, 150), 10);
        assert_eq!(free.count(), 512 - 150);
        assert_eq!((free.next_clear(0), free.next_set(50)), (50, Some(200)));
        assert_eq!(dirty.count(), 151);
        assert!(dirty.all_set(50, 151));
        assert_eq!(free.move_range_to(&mut dirty, 200, 1), 1);
    }

    #[test]
    fn runs_best_fit_and_aligned() {
        let mut b = Bitmap::<8>::new();
        b.set_range(0, 10); // run of 10
        b.set_range(20, 4); // run of 4
        b.set_range(100, 300); // run of 300
        assert_eq!(b.find_run(4, 1), Some(20));
        assert_eq!(b.find_run(5, 1), Some(0));
        assert_eq!(b.find_run(11, 1), Some(100));
        assert_eq!(b.find_run(10, 64), Some(0));
        assert_eq!(b.find_run(11, 64), Some(128));
        assert_eq!(b.find_run(301, 1), None);
        assert_eq!(b.longest_run(), 300);
        b.set_range(0, 512);
        assert_eq!(b.find_run(512, 1), Some(0));
        assert_eq!(b.next_clear(0), 512);
    }
}
