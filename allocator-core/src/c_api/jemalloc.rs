//! jemalloc's non-standard allocation API (`mallocx`, `rallocx`, `xallocx`, `sallocx`,
//! `dallocx`, `sdallocx`, `nallocx`) and its flag encoding ([`Flags`]), with the rules of
//! `c_api`: failures return null (or the old size) with `errno = ENOMEM`, nothing panics.

use super::{checked, oom};
use crate::alloc;
use core::ffi::{c_int, c_void};
use core::ptr;

// ---- jemalloc's non-standard API -----------------------------------------------------------

/// `MALLOCX_LG_ALIGN(la)` is `la` in the low six bits.
pub const MALLOCX_LG_ALIGN_MASK: c_int = 0x3f;
/// `MALLOCX_ZERO`.
pub const MALLOCX_ZERO: c_int = 0x40;
/// `MALLOCX_TCACHE(tc)` is `(tc + 2) << 8`, in twelve bits.
const MALLOCX_TCACHE_SHIFT: u32 = 8;
const MALLOCX_TCACHE_MASK: u32 = 0xfff << MALLOCX_TCACHE_SHIFT;
/// `MALLOCX_TCACHE_NONE` is `MALLOCX_TCACHE(-1)`.
pub const MALLOCX_TCACHE_NONE: c_int = 1 << MALLOCX_TCACHE_SHIFT;
/// `MALLOCX_ARENA(a)` is `(a + 1) << 20`.
const MALLOCX_ARENA_SHIFT: u32 = 20;

/// The `*allocx` flags, decoded.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Flags {
    /// The alignment asked for; 1 when none was.
    pub align: usize,
    pub zero: bool,
    /// False for `MALLOCX_TCACHE_NONE`. An explicit `MALLOCX_TCACHE(tc)` means the thread's
    /// cache: hugealloc has no `tcache.create`.
    pub tcache: bool,
    /// `MALLOCX_ARENA(a)`.
    pub arena: Option<usize>,
}

impl Flags {
    /// Decodes jemalloc's flag word.
    pub const fn decode(flags: c_int) -> Flags {
        let f = flags as u32;
        let lg = f & MALLOCX_LG_ALIGN_MASK as u32;
        // As jemalloc's MALLOCX_ALIGN_GET: lg 0 means "no alignment given".
        let align = if lg == 0 { 1 } else { 1usize << lg };
        let tcache = (f & MALLOCX_TCACHE_MASK) >> MALLOCX_TCACHE_SHIFT;
        let arena = f >> MALLOCX_ARENA_SHIFT;
        Flags {
            align,
            zero: flags & MALLOCX_ZERO != 0,
            tcache: tcache != 1,
            arena: if arena == 0 {
                None
            } else {
                Some(arena as usize - 1)
            },
        }
    }
}

/// Allocates as `mallocx` asks, without C's errno.
fn allocx(size: usize, f: Flags) -> *mut u8 {
    if f.arena.is_some() || !f.tcache {
        return alloc::alloc_in(f.arena, size, f.align, f.zero, f.tcache);
    }
    if f.zero {
        alloc::alloc_zeroed(size, f.align)
    } else {
        alloc::alloc(size, f.align)
    }
}

/// `mallocx`: at least `size` bytes with the flags' alignment, zeroing, arena and cache
/// choice. Null (with `ENOMEM`) when memory is short or the arena does not exist. A size of 0
/// (undefined in jemalloc) gives the smallest block.
#[inline]
pub fn mallocx(size: usize, flags: c_int) -> *mut c_void {
    checked(allocx(size, Flags::decode(flags)))
}

/// `nallocx`: the usable size `mallocx(size, flags)` would give, without allocating; 0 when
/// the request cannot be met.
#[inline]
pub fn nallocx(size: usize, flags: c_int) -> usize {
    alloc::good_size(size, Flags::decode(flags).align).unwrap_or(0)
}

/// `sallocx`: the usable size of a live block.
///
/// # Safety
/// `p` is a live block from hugealloc.
#[inline]
pub unsafe fn sallocx(p: *const c_void, _flags: c_int) -> usize {
    // SAFETY: forwarded contract.
    unsafe { alloc::usable_size(p.cast()) }
}

/// Zeroes bytes `from..to` of the live block `p` (nothing when `to <= from`).
///
/// # Safety
/// `p` is a live block of at least `to` usable bytes.
unsafe fn zero_tail(p: *mut u8, from: usize, to: usize) {
    if to > from {
        // SAFETY: from < to <= the block's usable size (caller's contract).
        unsafe { ptr::write_bytes(p.add(from), 0, to - from) };
    }
}

/// `rallocx`: resizes `p` to at least `size` bytes with the flags' alignment, in place when
/// possible; with `MALLOCX_ZERO`, bytes past the old usable size are zeroed; with
/// `MALLOCX_ARENA(a)` the block moves to arena `a`. Null (with `ENOMEM`, `p` untouched) on
/// failure.
///
/// # Safety
/// `p` is a live block from hugealloc; after a non-null result only the result may be used.
pub unsafe fn rallocx(p: *mut c_void, size: usize, flags: c_int) -> *mut c_void {
    let f = Flags::decode(flags);
    let p = p.cast::<u8>();
    // SAFETY: p is live (caller's contract).
    let old_usable = unsafe { alloc::usable_size(p) };
    let q = if f.arena.is_some() {
        let q = alloc::alloc_in(f.arena, size, f.align, false, f.tcache);
        if !q.is_null() {
            // SAFETY: p and q are distinct live blocks; the copy fits both.
            unsafe {
                ptr::copy_nonoverlapping(p, q, old_usable.min(size));
                alloc::free(p);
            }
        }
        q
    } else {
        // SAFETY: forwarded contract.
        unsafe { alloc::realloc(p, size, f.align) }
    };
    if q.is_null() {
        return oom();
    }
    if f.zero {
        // SAFETY: q is live; its usable size bounds the range.
        unsafe { zero_tail(q, old_usable, alloc::usable_size(q)) };
    }
    q.cast()
}

/// `xallocx`: resizes `p` in place to at least `size` bytes, and up to `size + extra` if
/// possible; returns the usable size afterwards (the old one if no resize was possible).
/// With `MALLOCX_ZERO`, bytes past the old usable size are zeroed.
///
/// # Safety
/// `p` is a live block from hugealloc.
pub unsafe fn xallocx(p: *mut c_void, size: usize, extra: usize, flags: c_int) -> usize {
    let f = Flags::decode(flags);
    let p = p.cast::<u8>();
    // SAFETY: p is live (caller's contract), here and for each resize below.
    let old_usable = unsafe { alloc::usable_size(p) };
    let want = size.saturating_add(extra);
    let mut usable = old_usable;
    if extra > 0 {
        // SAFETY: as above.
        usable = unsafe { alloc::resize_in_place(p, want, f.align) };
    }
    if extra == 0 || usable < size {
        // SAFETY: as above.
        usable = unsafe { alloc::resize_in_place(p, size, f.align) };
    }
    if f.zero {
        // SAFETY: p is live with `usable` bytes.
        unsafe { zero_tail(p, old_usable, usable) };
    }
    usable
}

/// `dallocx`: frees `p`; with `MALLOCX_TCACHE_NONE`, straight to its arena.
///
/// # Safety
/// As `free`.
#[inline]
pub unsafe fn dallocx(p: *mut c_void, flags: c_int) {
    if Flags::decode(flags).tcache {
        // SAFETY: forwarded contract.
        unsafe { alloc::free(p.cast()) }
    } else {
        // SAFETY: forwarded contract.
        unsafe { alloc::free_no_cache(p.cast()) }
    }
}

/// `sdallocx`: frees `p`, allocated with `size` (anything from the size asked for up to the
/// usable size) and `flags`. A size of another size class aborts with the pointer's address.
///
/// # Safety
/// As `free`.
#[inline]
pub unsafe fn sdallocx(p: *mut c_void, size: usize, flags: c_int) {
    if flags != 0 {
        // SAFETY: forwarded contract.
        return unsafe { sdallocx_flags(p, size, flags) };
    }
    // The common call (no alignment, the thread's cache, its arena): `free_sized`'s path with
    // the alignment a constant, so its tests fold, and no flag decoding (callgrind: 117 -> 63
    // instructions per call, as `free`; docs/benchmarks.md, session 8).
    // SAFETY: forwarded contract.
    unsafe { alloc::free_sized(p.cast(), size, 1) }
}

/// `sdallocx` with flags: decoded here, out of the common call's way.
///
/// # Safety
/// As `free`.
#[inline(never)]
unsafe fn sdallocx_flags(p: *mut c_void, size: usize, flags: c_int) {
    let f = Flags::decode(flags);
    if f.tcache {
        // SAFETY: forwarded contract.
        return unsafe { alloc::free_sized(p.cast(), size, f.align) };
    }
    if p.is_null() {
        return;
    }
    // SAFETY: p is live (caller's contract).
    let usable = unsafe { alloc::usable_size(p.cast()) };
    if alloc::good_size(size, f.align) != Some(usable) {
        crate::diag::fatal_ptr("free with a size of another class:", p.cast());
    }
    // SAFETY: forwarded contract.
    unsafe { alloc::free_no_cache(p.cast()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_decode_as_jemalloc() {
        // jemalloc's macros, spelled out.
        let lg_align = |la: c_int| la;
        let align = |a: c_int| a.trailing_zeros() as c_int; // ffs(a) - 1
        let tcache = |tc: c_int| (tc + 2) << 8;
        let arena = |a: c_int| (a + 1) << 20;
        assert_eq!(Flags::decode(0).align, 1);
        assert_eq!(Flags::decode(lg_align(12)).align, 4096);
        assert_eq!(Flags::decode(align(64)).align, 64);
        assert!(Flags::decode(MALLOCX_ZERO).zero);
        assert_eq!(tcache(-1), MALLOCX_TCACHE_NONE);
        assert!(!Flags::decode(MALLOCX_TCACHE_NONE).tcache);
        assert!(Flags::decode(tcache(3)).tcache);
        assert_eq!(Flags::decode(arena(0)).arena, Some(0));
        assert_eq!(Flags::decode(arena(7) | MALLOCX_ZERO).arena, Some(7));
        assert_eq!(Flags::decode(0).arena, None);
        let all = Flags::decode(arena(2) | MALLOCX_TCACHE_NONE | MALLOCX_ZERO | align(256));
        assert_eq!(
            all,
            Flags {
                align: 256,
                zero: true,
                tcache: false,
                arena: Some(2)
            }
        );
    }
}
