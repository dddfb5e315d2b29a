//! Fuzzes the allocator's entry points with operation sequences checked against a shadow
//! model. The input is read as a sequence of operations (an opcode byte and its arguments):
//! malloc, calloc, realloc, free (plain and sized), aligned allocation with alignments from 1
//! to 4 MiB, `mallocx` with alignment/zero/arena flags, usable size, a free and an allocation
//! carried out on a second, short-lived thread (a cross-thread free and a thread exit), and a
//! switch of the calling thread's arena.
//!
//! Checked at every step: no two live blocks overlap (usable sizes included), every block is
//! aligned as asked, its usable size covers the size asked for, calloc/zeroing gives zeros,
//! and every block keeps the pattern derived from its id across `realloc` (up to the smaller
//! size) until it is freed, where the whole pattern is verified.
//!
//! The shadow model is a fixed-size array of slots, so the target's own bookkeeping does not
//! allocate (std's allocations, e.g. spawning the helper thread, go to the system allocator:
//! this target installs no global allocator and calls hugealloc directly).
#![no_main]

use core::alloc::{GlobalAlloc, Layout};
use hugealloc::ffi;
use hugealloc::HugeAlloc;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

/// Live blocks the model tracks at once.
const SLOTS: usize = 64;
/// Operations per input at most (bounds the time of one run).
const MAX_OPS: usize = 512;
/// Bytes of a block the model writes and verifies at most: beyond this only the first and
/// last `VERIFY_CAP / 2` bytes carry the pattern (keeps multi-MiB blocks cheap).
const VERIFY_CAP: usize = 16 << 10;

#[derive(Clone, Copy)]
struct Block {
    ptr: *mut u8,
    /// The size asked for.
    size: usize,
    /// The alignment asked for (the layout's alignment for realloc and dealloc).
    align: usize,
    id: u64,
}

const EMPTY: Option<Block> = None;

/// The pattern word at word index `w` of block `id`; byte `i` of the block is byte `i % 8`
/// (little-endian) of word `i / 8`, whatever the block's size.
#[inline]
fn pattern_word(id: u64, w: usize) -> u64 {
    let x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (w as u64).wrapping_mul(0xff51_afd7_ed55_8ccd);
    (x ^ (x >> 29)) | 0x0101_0101_0101_0101
}

#[inline]
fn pattern(id: u64, i: usize) -> u8 {
    (pattern_word(id, i / 8) >> ((i % 8) * 8)) as u8
}

/// The offset ranges of a block of `size` bytes the model writes and checks.
fn ranges(size: usize) -> [(usize, usize); 2] {
    if size <= VERIFY_CAP {
        [(0, size), (size, size)]
    } else {
        [(0, VERIFY_CAP / 2), (size - VERIFY_CAP / 2, size)]
    }
}

/// Splits `lo..hi` into single bytes up to a multiple of 8, whole words, and single bytes:
/// `(head bytes, word range, tail bytes)`. Word steps keep the coverage instrumentation of the
/// loops below cheap.
#[inline]
fn split(
    lo: usize,
    hi: usize,
) -> (
    core::ops::Range<usize>,
    core::ops::Range<usize>,
    core::ops::Range<usize>,
) {
    let a = lo.next_multiple_of(8).min(hi);
    let b = a + (hi - a) / 8 * 8;
    (lo..a, a..b, b..hi)
}

fn fill(b: &Block, from: usize) {
    for (lo, hi) in ranges(b.size) {
        let (head, words, tail) = split(lo.max(from).min(hi), hi);
        for i in head.chain(tail) {
            // SAFETY: i < b.size: inside the live block.
            unsafe { *b.ptr.add(i) = pattern(b.id, i) };
        }
        for i in words.step_by(8) {
            // SAFETY: i + 8 <= b.size: inside the live block.
            unsafe {
                (b.ptr.add(i) as *mut u64).write_unaligned(pattern_word(b.id, i / 8).to_le())
            };
        }
    }
}

/// The bits that differ from the words `want_word` gives, over the model's ranges of a block
/// of `size` bytes at `p`, below `upto`; 0 when all match.
fn differs(p: *const u8, size: usize, upto: usize, want_word: impl Fn(usize) -> u64) -> u64 {
    let mut acc = 0u64;
    for (lo, hi) in ranges(size) {
        let hi = hi.min(upto);
        let (head, words, tail) = split(lo.min(hi), hi);
        for i in head.chain(tail) {
            let want = (want_word(i / 8).to_le() >> ((i % 8) * 8)) as u8;
            // SAFETY: i < size: inside the live block.
            acc |= (unsafe { *p.add(i) } ^ want) as u64;
        }
        for i in words.step_by(8) {
            // SAFETY: i + 8 <= size: inside the live block.
            acc |= unsafe { (p.add(i) as *const u64).read_unaligned() } ^ want_word(i / 8).to_le();
        }
    }
    acc
}

/// The first offset below `upto` in the model's ranges whose byte is not `want(i)`.
fn first_difference(p: *const u8, size: usize, upto: usize, want: impl Fn(usize) -> u8) -> usize {
    for (lo, hi) in ranges(size) {
        for i in lo..hi.min(upto) {
            // SAFETY: i < size.
            if unsafe { *p.add(i) } != want(i) {
                return i;
            }
        }
    }
    usize::MAX
}

/// Verifies the pattern of `b` on offsets below `upto` (a realloc keeps only the prefix).
fn verify(b: &Block, upto: usize, what: &str) {
    if differs(b.ptr, b.size, upto, |w| pattern_word(b.id, w)) != 0 {
        let i = first_difference(b.ptr, b.size, upto, |i| pattern(b.id, i));
        // SAFETY: i < b.size.
        let got = unsafe { *b.ptr.add(i) };
        panic!(
            "{what}: block {} ({} bytes, align {}) byte {i} is {got:#x}, not {:#x}",
            b.id,
            b.size,
            b.align,
            pattern(b.id, i)
        );
    }
}

fn check_zero(p: *mut u8, size: usize, what: &str) {
    if differs(p, size, size, |_| 0) != 0 {
        let i = first_difference(p, size, size, |_| 0);
        panic!("{what}: byte {i} of {size} not zero");
    }
}

struct Model {
    slots: [Option<Block>; SLOTS],
    next_id: u64,
}

impl Model {
    /// Checks a block fresh from the allocator against every live one, then records it.
    fn admit(&mut self, slot: usize, ptr: *mut u8, size: usize, align: usize) -> Block {
        assert!(
            !ptr.is_null(),
            "allocation of {size} bytes (align {align}) failed"
        );
        assert_eq!(
            ptr as usize % align,
            0,
            "{size} bytes: {ptr:p} not {align}-aligned"
        );
        // SAFETY: ptr is a live block from hugealloc.
        let usable = unsafe { hugealloc::usable_size(ptr) };
        assert!(usable >= size, "usable {usable} < {size}");
        let (lo, hi) = (ptr as usize, ptr as usize + usable);
        for (j, other) in self.slots.iter().enumerate() {
            if let Some(o) = other {
                if j == slot {
                    continue;
                }
                // SAFETY: o.ptr is live.
                let ou = unsafe { hugealloc::usable_size(o.ptr) };
                let (olo, ohi) = (o.ptr as usize, o.ptr as usize + ou);
                assert!(
                    hi <= olo || ohi <= lo,
                    "block {lo:#x}..{hi:#x} overlaps live block {} at {olo:#x}..{ohi:#x}",
                    o.id
                );
            }
        }
        self.next_id += 1;
        let b = Block {
            ptr,
            size,
            align,
            id: self.next_id,
        };
        self.slots[slot] = Some(b);
        b
    }

    /// Verifies and frees the block in `slot`, if any.
    fn release(&mut self, slot: usize, how: u8) {
        if let Some(b) = self.slots[slot].take() {
            verify(&b, b.size, "before free");
            free_block(&b, how);
        }
    }
}

/// Frees `b` through one of the entry points.
fn free_block(b: &Block, how: u8) {
    // SAFETY: b is a live block with this size and alignment, not used afterwards.
    unsafe {
        match how % 3 {
            0 => HugeAlloc.dealloc(b.ptr, Layout::from_size_align_unchecked(b.size, b.align)),
            1 => hugealloc::testing::alloc::free_sized(b.ptr, b.size, b.align),
            _ => ffi::sdallocx(b.ptr.cast(), b.size, align_flag(b.align)),
        }
    }
}

/// jemalloc's `MALLOCX_LG_ALIGN` for an alignment (0 for "none").
fn align_flag(align: usize) -> i32 {
    if align <= 1 {
        0
    } else {
        align.trailing_zeros() as i32
    }
}

/// Reads the input as bytes, 0 once exhausted.
struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
    fn slot(&mut self) -> usize {
        self.byte() as usize % SLOTS
    }
    /// A size from 1 byte to 6 MiB: mostly small, with large, huge and chunk-edge sizes.
    fn size(&mut self) -> usize {
        let b0 = self.byte();
        let v = ((b0 as usize & 31) << 8) | self.byte() as usize; // 0..8191
        match b0 >> 5 {
            0..=2 => 1 + v % 512,
            3 => 1 + v * 2,            // up to 16 KiB: the small/large edge
            4 => 1 + v * 8,            // up to 64 KiB
            5 => 1 + v * 256,          // up to 2 MiB: large runs
            6 => (2 << 20) - 4096 + v, // around the 2 MiB huge edge
            _ => 1 + v * 768,          // up to 6 MiB: huge
        }
    }
    /// An alignment from 1 to 4 MiB (powers of two).
    fn align(&mut self) -> usize {
        1 << (self.byte() % 23)
    }
}

/// Extra arenas the arena-switch operation moves between (created once per process).
fn arenas() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        for policy in [hugealloc::Thp::Never, hugealloc::Thp::Always] {
            let _ = hugealloc::Arena::new(policy);
        }
        hugealloc::stats(); // initialises the allocator
        (0..)
            .take_while(|&i| hugealloc::Arena::from_index(i).is_some())
            .count()
    })
}

fn run(data: &[u8]) {
    let narenas = arenas();
    let mut m = Model {
        slots: [EMPTY; SLOTS],
        next_id: 0,
    };
    let mut input = Input { data, pos: 0 };
    let mut ops = 0;
    while !input.done() && ops < MAX_OPS {
        ops += 1;
        match input.byte() % 12 {
            // malloc (GlobalAlloc::alloc with the minimum alignment)
            0 | 1 => {
                let (s, size) = (input.slot(), input.size());
                m.release(s, input.byte());
                // SAFETY: size >= 1.
                let p = unsafe { HugeAlloc.alloc(Layout::from_size_align(size, 1).unwrap()) };
                let b = m.admit(s, p, size, 1);
                fill(&b, 0);
            }
            // calloc (GlobalAlloc::alloc_zeroed), aligned or not
            2 => {
                let (s, size, align) = (input.slot(), input.size(), input.align());
                m.release(s, input.byte());
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: size >= 1.
                let p = unsafe { HugeAlloc.alloc_zeroed(layout) };
                assert!(!p.is_null());
                check_zero(p, size, "alloc_zeroed");
                let b = m.admit(s, p, size, align);
                fill(&b, 0);
            }
            // realloc: the common prefix survives, the alignment holds
            3 | 4 => {
                let (s, size) = (input.slot(), input.size());
                let Some(old) = m.slots[s] else { continue };
                verify(&old, old.size, "before realloc");
                // SAFETY: old is live with this layout; size >= 1.
                let p = unsafe {
                    HugeAlloc.realloc(
                        old.ptr,
                        Layout::from_size_align_unchecked(old.size, old.align),
                        size,
                    )
                };
                assert!(!p.is_null(), "realloc to {size} failed");
                // The old block's layout of the pattern, at the new address.
                let moved = Block { ptr: p, ..old };
                verify(&moved, old.size.min(size), "after realloc");
                m.slots[s] = None;
                let b = m.admit(s, p, size, old.align);
                // The new id's pattern over the whole block.
                fill(&b, 0);
            }
            // free
            5 | 6 => {
                let (s, how) = (input.slot(), input.byte());
                m.release(s, how);
            }
            // aligned allocation, up to 4 MiB alignment
            7 => {
                let (s, size, align) = (input.slot(), input.size(), input.align());
                m.release(s, input.byte());
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: size >= 1.
                let p = unsafe { HugeAlloc.alloc(layout) };
                let b = m.admit(s, p, size, align);
                fill(&b, 0);
            }
            // mallocx with alignment, zeroing, arena and cache flags
            8 => {
                let (s, size, align, f) = (input.slot(), input.size(), input.align(), input.byte());
                m.release(s, input.byte());
                let zero = f & 1 != 0;
                let mut flags = align_flag(align);
                if zero {
                    flags |= ffi::MALLOCX_ZERO;
                }
                if f & 2 != 0 {
                    flags |= ffi::MALLOCX_TCACHE_NONE;
                }
                if f & 4 != 0 {
                    flags |= ((f as i32 >> 3) % narenas as i32 + 1) << 20; // MALLOCX_ARENA
                }
                let p = ffi::mallocx(size, flags).cast::<u8>();
                assert!(!p.is_null(), "mallocx({size}, {flags:#x}) failed");
                if zero {
                    check_zero(p, size, "mallocx zero");
                }
                let b = m.admit(s, p, size, align);
                fill(&b, 0);
            }
            // usable size of every live block covers it; nallocx agrees with it
            9 => {
                for b in m.slots.iter().flatten() {
                    // SAFETY: b.ptr is live.
                    let u = unsafe { hugealloc::usable_size(b.ptr) };
                    assert!(u >= b.size);
                    // The size `mallocx` would give for this request is the block's (a block
                    // is always of the class of its last requested size and alignment).
                    let n = ffi::nallocx(b.size, align_flag(b.align));
                    assert_eq!(u, n, "usable size of {} bytes (align {})", b.size, b.align);
                    verify(b, b.size, "usable size check");
                }
            }
            // a free and an allocation on a second thread, which then exits
            10 => {
                let (s, t, size) = (input.slot(), input.slot(), input.size());
                let victim = m.slots[s].take();
                if let Some(v) = &victim {
                    verify(v, v.size, "before cross-thread free");
                }
                let victim_addr = victim.map(|v| v.ptr as usize);
                let (vsize, valign) = victim.map_or((0, 1), |v| (v.size, v.align));
                let got = std::thread::spawn(move || {
                    if let Some(a) = victim_addr {
                        // SAFETY: the block is live and handed over to this thread.
                        unsafe {
                            HugeAlloc.dealloc(
                                a as *mut u8,
                                Layout::from_size_align_unchecked(vsize, valign),
                            )
                        };
                    }
                    // SAFETY: size >= 1.
                    let p = unsafe { HugeAlloc.alloc(Layout::from_size_align(size, 1).unwrap()) };
                    p as usize
                })
                .join()
                .unwrap();
                m.release(t, 0);
                let b = m.admit(t, got as *mut u8, size, 1);
                fill(&b, 0);
            }
            // the calling thread moves to another arena
            _ => {
                let i = input.byte() as usize % narenas;
                assert!(hugealloc::thread_set_arena(i));
            }
        }
    }
    for s in 0..SLOTS {
        m.release(s, s as u8);
    }
    // Back to arena 0 so that every input starts alike.
    hugealloc::thread_set_arena(0);
}

fuzz_target!(|data: &[u8]| run(data));
