//! Slabs: a run of pages holding objects of one small class. Free objects are tracked in a
//! bitmap kept in the slab descriptor (out of band: a set bit is a free object), so no free
//! list lives in user memory. A slab is owned by one arena bin and touched only under that
//! bin's lock.

use crate::bitmap::Bitmap;
use crate::chunk::{PAGE_KIND, PAGE_SLAB};
use crate::list::linked;
use crate::size_class::{class_min_size, class_size, NSMALL, SLAB_MAX_OBJS, SLAB_OBJS};

/// What `give_all` reports for a pointer inside an object.
pub const INTERIOR: &str = "free of a pointer inside a block (not its start):";
/// What `give_all` reports for an object already free.
pub const DOUBLE: &str = "double free of";

/// The first cache line holds what `free`'s fast path reads (`addr`, `arena`, `div_test`,
/// `start_limit`, and a sized free's `size_min` and `size_range`).
#[repr(C)]
pub struct Slab {
    pub addr: usize,
    pub arena: u32,
    /// `nobjs * size`: the bytes of the object area, for `is_object_start`'s bound.
    pub span: u32,
    /// `u64::MAX / size + 1`: for `is_object_start`'s divisibility test (one multiply).
    pub div_test: u64,
    /// Below this, `off * div_test` (wrapping) is the offset of an object: the bound and the
    /// divisibility in one compare (`is_object_start_on_pages`).
    pub start_limit: u64,
    /// The smallest size of the class (`class_min_size`) and how many sizes it has: a sized
    /// free's check that its size is of the class (`holds_size`), in the line `free` reads.
    pub size_min: u64,
    pub size_range: u64,
    pub class: u32,
    pub nfree: u32,
    pub nobjs: u32,
    /// The object size.
    pub size: u32,
    /// Every object from this index up is free (`nobjs`: no such claim): a refill takes
    /// them in order with no bit work while they are the only free ones (`take`).
    pub untouched: u32,
    /// Bin list links (non-full slabs).
    pub next: *mut Slab,
    pub prev: *mut Slab,
    /// Whether it is on its bin's non-full list.
    pub listed: bool,
    pub free: Bitmap<{ SLAB_MAX_OBJS / 64 }>,
}

linked!(Slab);

/// The slab a page-map word names, when it is a slab page's (`slab_ptr | PAGE_SLAB`); `None`
/// for any other word. The word less `PAGE_SLAB` has its kind bits clear only for a slab
/// page's (every other kind, and a free page's 0, leaves some set): one subtraction and one
/// test, and the pointer needs no mask (`free`'s lookup; docs/benchmarks.md, Session 13).
#[inline(always)]
pub fn slab_of_word(word: u64) -> Option<*mut Slab> {
    crate::bits::untag(word, PAGE_SLAB, PAGE_KIND).map(|slab| slab as usize as *mut Slab)
}

/// `Slab::start_limit` for `nobjs` objects of `size` bytes, whose `div_test` is `c`. With
/// `c * size = 2^64 + e` (`0 <= e < size`), an offset `k * size` gives `off * c = k * e`
/// (mod 2^64, below 2^32 for offsets below 2^32), and any other offset at least `c`, which
/// is above 2^32 for every size up to 2^32 (Lemire, Kaser and Kurz, 2019). So `nobjs * e`
/// admits exactly the objects' offsets when `e > 0`, and the bytes past the last object (the
/// tail: the one object start there, at `span`, gives `nobjs * e`) are refused. When `e = 0`
/// (a size that is a power of two) every multiple gives 0, and the limit is any value between
/// 0 and `c`: a slab of as many objects as fit (`whole`) then has no multiple in its tail,
/// since a power-of-two size divides its slab's bytes (the test
/// `object_start_on_pages_is_bounded` checks every offset of every class's slab). A slab of
/// fewer (the loom models') gets 0 there: no block passes, and `free` sends each to
/// `free_slow`, whose check is bounded.
const fn start_limit(c: u64, size: usize, nobjs: usize, whole: bool) -> u64 {
    let e = c.wrapping_mul(size as u64);
    if e != 0 {
        nobjs as u64 * e
    } else if whole {
        u32::MAX as u64
    } else {
        0
    }
}

/// The index of the object at offset `off` (below the slab's `span`) in a slab whose
/// `div_test` is `div_test`, or `None` when `off` is not an object's: one widening multiply
/// gives both, `is_object_start`'s test in its low half and the index in its high half. With
/// `div_test * size = 2^64 + e`, `e < size`, an offset `k * size` below 2^32 gives
/// `k * 2^64 + k * e`, where `k * e < 2^32`; any other offset leaves at least `div_test` in the
/// low half. (A function of the value, not of the slab: `give_leading`'s loop keeps
/// `div_test` in a register, where a read through `&mut self` reloaded it per block.)
#[inline(always)]
fn index_at(off: u64, div_test: u64) -> Option<usize> {
    let wide = off as u128 * div_test as u128;
    ((wide as u64) < div_test).then_some((wide >> 64) as usize)
}

impl Slab {
    /// Initialises a slab of `class` (a small class: anything else aborts) at `addr` with
    /// every object free.
    pub fn init(&mut self, addr: usize, class: usize, arena: u32) {
        let Some(&nobjs) = SLAB_OBJS.get(class) else {
            crate::diag::fatal_index("a slab of a class that is not small", class, NSMALL)
        };
        self.init_objs(addr, class, arena, nobjs as usize);
    }

    /// As `init`, with `nobjs` objects (at most the class's `SLAB_OBJS`): the loom models
    /// make slabs of two objects, so that a fill crosses slabs within the few steps a model
    /// can afford (every class holds at least 8: `SLAB_MIN_OBJS` up to 8 KiB).
    pub fn init_objs(&mut self, addr: usize, class: usize, arena: u32, nobjs: usize) {
        let Some(&most) = SLAB_OBJS.get(class) else {
            crate::diag::fatal_index("a slab of a class that is not small", class, NSMALL)
        };
        let nobjs = nobjs.min(most as usize);
        self.addr = addr;
        self.class = class as u32;
        self.arena = arena;
        self.nobjs = nobjs as u32;
        self.size = class_size(class) as u32;
        self.span = (nobjs * class_size(class)) as u32;
        self.div_test = u64::MAX / class_size(class) as u64 + 1;
        let whole = nobjs == most as usize;
        self.start_limit = start_limit(self.div_test, class_size(class), nobjs, whole);
        self.size_min = class_min_size(class) as u64;
        self.size_range = (class_size(class) + 1 - class_min_size(class)) as u64;
        self.nfree = nobjs as u32;
        self.untouched = 0;
        self.next = core::ptr::null_mut();
        self.prev = core::ptr::null_mut();
        self.listed = false;
        self.free = Bitmap::new();
        self.free.set_range(0, nobjs);
    }

    /// Takes up to `out.len()` free objects into `out` (lowest addresses first); returns how
    /// many.
    #[inline]
    pub fn take(&mut self, out: &mut [*mut u8]) -> usize {
        let (addr, size) = (self.addr, self.size as usize);
        let (want, dst) = (out.len(), out.as_mut_ptr());
        if self.nfree == self.nobjs {
            self.untouched = 0;
        }
        let from = self.untouched as usize;
        if self.nfree != 0 && (self.nfree + self.untouched) == self.nobjs {
            // The free objects are exactly those from `untouched` up (a fresh slab, or an
            // emptied one taken again, and the rest of it at the next refill): the lowest `n`
            // are consecutive, an add per object and no bit work (docs/benchmarks.md, Session
            // 14: 4 instructions a block where the bit scan took 11).
            let n = want.min(self.nfree as usize);
            let mut a = addr + from * size;
            for k in 0..n {
                // SAFETY: `k < n <= want`, the length of `out`.
                unsafe { dst.add(k).write(a as *mut u8) };
                a += size;
            }
            self.free.clear_range(from, n);
            self.nfree -= n as u32;
            self.untouched += n as u32;
            return n;
        }
        // Some free object lies below `untouched` (one given back since): the claim ends here,
        // as the scan below may take objects above it.
        self.untouched = self.nobjs;
        // A word of the bitmap at a time, lowest objects first (no search per object); the
        // k-th object to slot k, with no bounds check (an iterator over `out` cost a second
        // end test per object, `get_mut` a compare: callgrind, docs/benchmarks.md, Session 10).
        let n = self.free.take_lowest(want, |k, i| {
            // SAFETY: `take_lowest` hands out `k < want`, the length of `out`.
            unsafe { dst.add(k).write((addr + i * size) as *mut u8) };
        });
        self.nfree -= n as u32;
        n
    }

    /// Whether `p` is the start of one of this slab's objects: `index_of`'s bound compare and
    /// multiply (an offset `off < 2^32` is a multiple of `size` exactly when `off * div_test`
    /// wraps to below `div_test`: Lemire, Kaser and Kurz, "Faster remainder by direct
    /// computation", 2019), the reference `free`'s one-compare test is checked against.
    #[inline(always)]
    pub fn is_object_start(&self, p: usize) -> bool {
        self.index_of(p).is_some()
    }

    /// `is_object_start` for a `p` on one of this slab's pages (the page map named the slab),
    /// as `free` asks it: one multiply and one compare, with `start_limit`. The bounded test
    /// cost `free` 3 more instructions (docs/benchmarks.md, Session 12).
    #[inline(always)]
    pub fn is_object_start_on_pages(&self, p: usize) -> bool {
        (p.wrapping_sub(self.addr) as u64).wrapping_mul(self.div_test) < self.start_limit
    }

    /// Whether `size` is a size of this slab's class (`class_of(size) == class`): a sized
    /// free's check, one subtract and one compare (a size of 0 is of no class here).
    #[inline(always)]
    pub fn holds_size(&self, size: usize) -> bool {
        (size as u64).wrapping_sub(self.size_min) < self.size_range
    }

    /// Whether this slab belongs to arena `arena`: `free` sends a block of a slab of another
    /// arena to the thread's remote-free buffer (`bin::RemoteFrees`), not to its cache.
    #[inline(always)]
    pub fn belongs_to(&self, arena: u32) -> bool {
        self.arena == arena
    }

    /// The object index of `p`, or `None` if `p` is not the start of an object.
    #[inline]
    pub fn index_of(&self, p: usize) -> Option<usize> {
        let off = p.wrapping_sub(self.addr) as u64;
        if off >= self.span as u64 {
            return None;
        }
        index_at(off, self.div_test)
    }

    /// Returns object `i` to the slab. Returns false if it was already free (a double free).
    #[inline]
    pub fn give(&mut self, i: usize) -> bool {
        if self.free.get(i) {
            return false;
        }
        self.free.set(i);
        self.nfree += 1;
        true
    }

    /// Returns the objects of the leading `items` whose slab is `me` (this slab's address), in
    /// any order, and says how many that was: a flush's run of one slab, found and returned in
    /// one pass. One bitmap store per run of pointers in the same bitmap word: a flush hands
    /// back objects in about the order a refill took them, so a run is usually a whole word.
    /// Per object a subtract, a bound compare, one widening multiply (`index_at`: the
    /// object-start test and the index at once), a shift and a bit test. Returns the first
    /// pointer that is not an object start or is already free (here or earlier in the run),
    /// with what is wrong; the words before its word were returned (the caller aborts).
    #[inline]
    pub fn give_all(
        &mut self,
        me: *mut Slab,
        items: &[(*mut u8, *mut Slab)],
    ) -> Result<usize, (*mut u8, &'static str)> {
        self.give_leading(items, |&(p, s)| (s == me).then_some(p), false)
    }

    /// As `give_all` for bare pointers, the first of which the caller found in this slab: the
    /// run is the leading pointers inside this slab's object area, so a thread cache's flush
    /// looks a slab up once per run, not per block (`BinState::flush_ptrs`). The first pointer
    /// outside the object area ends the run, unless it is the first (a pointer on the slab's
    /// pages past its objects: not an object start).
    #[inline]
    pub fn give_run(&mut self, ptrs: &[*mut u8]) -> Result<usize, (*mut u8, &'static str)> {
        self.give_leading(ptrs, |&p| Some(p), true)
    }

    /// The loop of `give_all` and `give_run`: `ptr` gives an item's pointer, or `None` where the
    /// run ends; with `outside_ends`, so does a pointer past the object area after the first.
    #[inline(always)]
    fn give_leading<T>(
        &mut self,
        items: &[T],
        ptr: impl Fn(&T) -> Option<*mut u8>,
        outside_ends: bool,
    ) -> Result<usize, (*mut u8, &'static str)> {
        let (addr, span, div_test) = (self.addr, self.span as u64, self.div_test);
        // The word being gathered (`usize::MAX`: none yet), its bits, and `n` when it began
        // (its bits' count without a population count: x86-64's baseline has no `popcnt`,
        // and the software one was 15 instructions a word).
        let (mut word, mut bits, mut from) = (usize::MAX, 0u64, 0);
        let mut n = 0;
        for item in items {
            let Some(p) = ptr(item) else {
                break;
            };
            let off = (p as usize).wrapping_sub(addr) as u64;
            if off >= span {
                if outside_ends && n > 0 {
                    break;
                }
                return give_failed(p, INTERIOR);
            }
            let Some(i) = index_at(off, div_test) else {
                return give_failed(p, INTERIOR);
            };
            if i / 64 != word {
                self.give_bits(word, bits, n - from)?;
                (word, bits, from) = (i / 64, 0, n);
            }
            let before = bits;
            bits |= 1u64 << (i % 64);
            if bits == before {
                return give_failed(p, DOUBLE);
            }
            n += 1;
        }
        self.give_bits(word, bits, n - from)?;
        Ok(n)
    }

    /// Marks the objects `bits` of bitmap word `word` free (nothing when `bits` is 0), `count`
    /// of them (`bits`' population); an object already free is a double free, reported with
    /// its address.
    #[inline]
    fn give_bits(
        &mut self,
        word: usize,
        bits: u64,
        count: usize,
    ) -> Result<(), (*mut u8, &'static str)> {
        debug_assert_eq!(bits.count_ones() as usize, count);
        if bits == 0 {
            return Ok(());
        }
        match self.free.set_word_bits(word, bits) {
            Ok(()) => {
                self.nfree += count as u32;
                Ok(())
            }
            Err(both) => {
                let i = word * 64 + both.trailing_zeros() as usize;
                Err(((self.addr + i * self.size as usize) as *mut u8, DOUBLE))
            }
        }
    }

    pub fn is_full(&self) -> bool {
        self.nfree == 0
    }

    pub fn is_empty(&self) -> bool {
        self.nfree == self.nobjs
    }

    /// Invariant scan (debug and test builds, `check:full`). Inlined to the flag test: a flush
    /// calls it once per slab, and as a call it was 1-3% of the batch bench's time.
    #[inline]
    pub fn check(&self) {
        if crate::diag::full_checks() {
            self.scan();
        }
    }

    /// The scan of `check`.
    #[cold]
    #[inline(never)]
    fn scan(&self) {
        use crate::diag::invariant;
        invariant(
            self.free.count() == self.nfree as usize,
            "a slab's free count disagrees with its bitmap",
        );
        invariant(
            self.nfree <= self.nobjs,
            "a slab has more free objects than objects",
        );
        invariant(
            self.free.next_set(self.nobjs as usize).is_none(),
            "a slab's bitmap marks objects past its end",
        );
        let untouched = self.untouched.min(self.nobjs) as usize;
        invariant(
            self.free
                .all_set(untouched, self.nobjs as usize - untouched),
            "a slab's objects past `untouched` are not all free",
        );
    }
}

/// `give_all`'s error, out of line: built inside the loop, its message's address and length
/// were set up in registers on every object's path.
#[cold]
#[inline(never)]
fn give_failed(p: *mut u8, what: &'static str) -> Result<usize, (*mut u8, &'static str)> {
    Err((p, what))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `slab_of_word` names the descriptor of a slab page's word and nothing for every other
    /// kind of word, whatever its payload or class byte: `free` trusts it with no other test.
    #[test]
    fn only_a_slab_pages_word_names_a_slab() {
        use crate::chunk::{PAGE_CLASS_SHIFT, PAGE_INTERIOR, PAGE_LARGE, PAGE_PURGING};
        for slab in [0x1000u64, 0x7fff_ffff_f040, 0xdead_bee8] {
            assert_eq!(slab_of_word(slab | PAGE_SLAB), Some(slab as *mut Slab));
        }
        assert_eq!(slab_of_word(0), None, "a free page");
        for kind in [PAGE_LARGE, PAGE_INTERIOR, PAGE_PURGING] {
            for payload in [0u64, 1 << 3, 511 << 3, 0x10_0000 << 3] {
                for class in [0u64, 37, 255] {
                    let word = class << PAGE_CLASS_SHIFT | payload | kind;
                    assert_eq!(slab_of_word(word), None, "{word:#x}");
                }
            }
        }
        // Every other value of the kind bits, with a pointer-like payload.
        for kind in 0..8u64 {
            let word = 0x5550_0000 | kind;
            assert_eq!(slab_of_word(word).is_some(), kind == PAGE_SLAB, "{word:#x}");
        }
    }

    #[test]
    fn index_of_matches_division_for_every_class() {
        for class in 0..crate::size_class::NSMALL {
            // SAFETY: Slab is plain data; all-zero is a valid (empty) value before init.
            let mut s: Slab = unsafe { core::mem::zeroed() };
            s.init(0x200000, class, 0);
            let size = class_size(class);
            assert_eq!(s.span as usize, s.nobjs as usize * size);
            // Past the object area (the slab's tail and beyond) and below it, too.
            for off in 0..s.nobjs as usize * size + 2 * size {
                let inside = off < s.nobjs as usize * size;
                let want = (inside && off % size == 0).then_some(off / size);
                assert_eq!(
                    s.index_of(0x200000 + off),
                    want,
                    "class {class} offset {off}"
                );
                assert_eq!(
                    s.is_object_start(0x200000 + off),
                    want.is_some(),
                    "class {class} offset {off}"
                );
            }
            for below in 1..=size {
                assert!(
                    !s.is_object_start(0x200000 - below),
                    "class {class} -{below}"
                );
            }
        }
    }

    /// `free`'s one-compare test agrees with the bounded one at every offset of a slab's
    /// pages, in every class, the tail's object-sized offset included.
    #[test]
    fn object_start_on_pages_is_bounded() {
        use crate::size_class::SLAB_PAGES;
        for (class, &npages) in SLAB_PAGES.iter().enumerate() {
            // SAFETY: Slab is plain data; all-zero is a valid (empty) value before init.
            let mut s: Slab = unsafe { core::mem::zeroed() };
            s.init(0x200000, class, 0);
            let pages = npages as usize * crate::os::PAGE;
            for off in 0..pages {
                assert_eq!(
                    s.is_object_start_on_pages(0x200000 + off),
                    s.is_object_start(0x200000 + off),
                    "class {class} offset {off}"
                );
            }
            // A slab of fewer objects (as the loom models make) lets no block through that is
            // past its objects.
            s.init_objs(0x200000, class, 0, 2);
            for off in 0..pages {
                if s.is_object_start_on_pages(0x200000 + off) {
                    assert!(
                        s.is_object_start(0x200000 + off),
                        "class {class} offset {off}"
                    );
                }
            }
        }
    }

    /// `give_run`'s one widening multiply (object-start test and index) in every class: each
    /// object comes back once, in any order, and every other offset inside the object area is
    /// refused as a pointer inside a block.
    #[test]
    fn give_run_indexes_every_object_of_every_class() {
        for class in 0..crate::size_class::NSMALL {
            // SAFETY: Slab is plain data; all-zero is a valid (empty) value before init.
            let mut s: Slab = unsafe { core::mem::zeroed() };
            s.init(0x200000, class, 0);
            let (size, nobjs) = (class_size(class), s.nobjs as usize);
            let mut out = std::vec![core::ptr::null_mut(); nobjs];
            assert_eq!(s.take(&mut out), nobjs);
            assert!(s.is_full());
            // Odd indices first, each half reversed: every word is gathered twice.
            let mut order: std::vec::Vec<*mut u8> = out.iter().rev().copied().collect();
            order.sort_by_key(|&p| ((p as usize - 0x200000) / size).is_multiple_of(2));
            assert_eq!(s.give_run(&order), Ok(nobjs), "class {class}");
            assert!(s.is_empty(), "class {class}");
            s.check();
            assert_eq!(
                s.give_run(&order[nobjs - 1..]),
                Err((order[nobjs - 1], DOUBLE))
            );
            for i in 0..nobjs {
                for r in [1, 8, size / 2, size - 1] {
                    if r == 0 || r >= size {
                        continue;
                    }
                    let p = (0x200000 + i * size + r) as *mut u8;
                    assert_eq!(
                        s.give_run(&[p]),
                        Err((p, INTERIOR)),
                        "class {class} {i} {r}"
                    );
                }
            }
        }
    }

    /// A refill takes the untouched objects of a slab in order with no bit work, and an object
    /// given back below them is taken first (the bitmap's scan), after which the claim ends.
    #[test]
    fn take_uses_untouched_objects_in_order() {
        // SAFETY: Slab is plain data; all-zero is a valid (empty) value before init.
        let mut s: Slab = unsafe { core::mem::zeroed() };
        let class = crate::size_class::class_of(48);
        s.init(0x10000, class, 0);
        let at = |i: usize| (0x10000 + 48 * i) as *mut u8;
        let mut five = [core::ptr::null_mut(); 5];
        assert_eq!(s.take(&mut five), 5);
        assert_eq!(five, [at(0), at(1), at(2), at(3), at(4)]);
        assert_eq!(s.untouched, 5);
        assert_eq!(s.take(&mut five[..2]), 2);
        assert_eq!(five[..2], [at(5), at(6)]);
        s.check();
        // Object 3 back: the next refill finds it first, then 7 and 8 above the old claim.
        assert_eq!(s.give_run(&[at(3)]), Ok(1));
        assert_eq!(s.take(&mut five[..3]), 3);
        assert_eq!(five[..3], [at(3), at(7), at(8)]);
        assert_eq!(s.untouched, s.nobjs);
        s.check();
        // Everything back: the slab is untouched again from 0.
        let back: std::vec::Vec<*mut u8> = (0..9).map(at).collect();
        assert_eq!(s.give_run(&back), Ok(9));
        assert!(s.is_empty());
        assert_eq!(s.take(&mut five[..1]), 1);
        assert_eq!((five[0], s.untouched), (at(0), 1));
        s.check();
    }

    #[test]
    fn holds_size_is_class_of_for_every_class() {
        use crate::size_class::{class_of, SMALL_MAX};
        for class in 0..crate::size_class::NSMALL {
            // SAFETY: Slab is plain data; all-zero is a valid (empty) value before init.
            let mut s: Slab = unsafe { core::mem::zeroed() };
            s.init(0x200000, class, 0);
            assert!(!s.holds_size(0), "class {class}: size 0");
            for size in 1..=SMALL_MAX + 64 {
                assert_eq!(
                    s.holds_size(size),
                    class_of(size) == class,
                    "class {class} size {size}"
                );
            }
            for size in [usize::MAX, usize::MAX - 7, 1 << 40, (1 << 32) + 16] {
                assert!(!s.holds_size(size), "class {class} size {size}");
            }
        }
    }

    #[test]
    fn take_give_double_free() {
        // SAFETY: Slab is plain data; all-zero is a valid (empty) value before init.
        let mut s: Slab = unsafe { core::mem::zeroed() };
        let class = crate::size_class::class_of(48);
        s.init(0x10000, class, 0);
        s.check();
        let mut out = [core::ptr::null_mut(); 4];
        assert_eq!(s.take(&mut out), 4);
        assert_eq!(out[1] as usize, 0x10000 + 48);
        assert_eq!(s.index_of(0x10000 + 48), Some(1));
        assert_eq!(s.index_of(0x10000 + 47), None);
        assert_eq!(s.index_of(0x10000 - 48), None);
        assert_eq!(s.index_of(0x10000 + 48 * s.nobjs as usize), None);
        assert!(s.give(1));
        assert!(!s.give(1));
        s.check();
        // Batched returns: a double free inside the batch, against the bitmap, and an
        // interior pointer, each named; a run ends at the first item of another slab.
        let at = |i: usize| (0x10000 + 48 * i) as *mut u8;
        let me: *mut Slab = &mut s;
        let other = 0x40 as *mut Slab;
        let run = |ps: &[*mut u8]| ps.iter().map(|&p| (p, me)).collect::<std::vec::Vec<_>>();
        assert_eq!(
            s.give_all(me, &run(&[at(0), at(2), at(0)])),
            Err((at(0), DOUBLE))
        );
        assert_eq!(s.give_all(me, &run(&[at(3), at(1)])), Err((at(1), DOUBLE)));
        assert_eq!(
            s.give_all(me, &run(&[(0x10000 + 49) as *mut u8])),
            Err(((0x10000 + 49) as *mut u8, INTERIOR))
        );
        // Nothing of a failed word was marked: 0, 2 and 3 are still out.
        assert_eq!(s.nfree + 3, s.nobjs);
        // Past the object area and below it: not object starts.
        let end = (0x10000 + 48 * s.nobjs as usize) as *mut u8;
        assert_eq!(s.give_all(me, &run(&[end])), Err((end, INTERIOR)));
        let below = (0x10000 - 48) as *mut u8;
        assert_eq!(s.give_all(me, &run(&[below])), Err((below, INTERIOR)));
        // Only the leading items of this slab are taken.
        assert_eq!(
            s.give_all(me, &[(at(2), me), (at(0), other), (at(3), me)]),
            Ok(1)
        );
        assert_eq!(
            s.give_all(me, &run(&[at(0), at(3), at(70)])),
            Err((at(70), DOUBLE))
        );
        s.check();
        assert!(s.is_empty());
        // Bare pointers: the run ends at the first pointer outside the object area; a first
        // pointer there, or inside an object, is not an object start.
        let mut two = [core::ptr::null_mut(); 2];
        assert_eq!(s.take(&mut two), 2);
        let outside = (0x10000 + 48 * s.nobjs as usize + 8) as *mut u8;
        assert_eq!(s.give_run(&[at(1), at(0), outside, at(5)]), Ok(2));
        assert_eq!(s.give_run(&[outside, at(5)]), Err((outside, INTERIOR)));
        assert_eq!(s.give_run(&[below, at(5)]), Err((below, INTERIOR)));
        let inside = (0x10000 + 48 * 3 + 16) as *mut u8;
        assert_eq!(s.give_run(&[inside]), Err((inside, INTERIOR)));
        assert_eq!(s.give_run(&[at(0)]), Err((at(0), DOUBLE)));
        assert!(s.is_empty());
        let mut all = [core::ptr::null_mut(); 512];
        let n = s.take(&mut all);
        assert_eq!(n, s.nobjs as usize);
        assert!(s.is_full());
    }
}
