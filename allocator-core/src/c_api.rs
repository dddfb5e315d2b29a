//! C semantics over the entry points of `alloc`: what `malloc` and friends promise a C program
//! (glibc's behaviour where the standards leave room), jemalloc's `*allocx` API with its flag
//! encoding, `mallctl`, and stats printing. `allocator-ffi` exports these as one-line
//! `#[no_mangle]` forwards; nothing here is exported itself.
//!
//! The rules this module keeps:
//! - a failed allocation returns null and sets `errno = ENOMEM`; `errno` is left alone on
//!   success;
//! - `malloc(0)` returns a unique, non-null, freeable pointer; blocks of 16 bytes and more are
//!   16-aligned (the size classes guarantee it);
//! - `calloc` and `reallocarray` check `n * size` for overflow; `posix_memalign` returns
//!   `EINVAL` for an alignment that is not a power of two multiple of `sizeof(void *)`;
//! - `realloc(p, 0)` with `p` non-null frees `p` and returns null, as glibc does
//!   (`REALLOC_ZERO_BYTES_FREES`); `realloc(NULL, n)` is `malloc(n)`; a failed `realloc` leaves
//!   `p` untouched.
//!
//! Nothing here allocates through the global allocator, and nothing can panic: no indexing,
//! no arithmetic that can overflow, text formatted into fixed stack buffers. The `mallctl`
//! names, their types and handlers live in `crate::ctl`; the `mallctl` functions here add
//! only C's conventions (sizes, `oldp`/`newp`, errno values).

use crate::alloc;
use crate::ctl::{Ctl, CtlValue};
use crate::os::{self, PAGE};
use core::ffi::{c_char, c_int, c_uint, c_void, CStr};
use core::ptr::{self, null_mut};

/// `sizeof(void *)`: `posix_memalign`'s alignment unit.
const PTR_SIZE: usize = core::mem::size_of::<*mut c_void>();
/// The alignment `malloc` gives every block of 16 bytes or more (glibc's `MALLOC_ALIGNMENT`).
const MALLOC_ALIGN: usize = crate::ctl::QUANTUM;

/// The null result of a failed allocation, with `errno = ENOMEM`.
#[cold]
#[inline(never)]
fn oom() -> *mut c_void {
    os::set_errno(libc::ENOMEM);
    null_mut()
}

/// `p` as a C result: null means out of memory.
#[inline(always)]
fn checked(p: *mut u8) -> *mut c_void {
    if p.is_null() {
        return oom();
    }
    p.cast()
}

/// Initialises hugealloc when the library is loaded (an ELF constructor of `allocator-ffi`):
/// the configuration is read and `stats_print` registered even in a program that never
/// allocates, and the first `malloc` finds everything ready. `errno` is kept: the program
/// starts with 0 there (C11 7.5), while the init meets files that are usually missing
/// (`/etc/hugealloc.conf`).
pub fn on_load() {
    let saved = os::errno();
    crate::init::ensure_init();
    os::set_errno(saved);
}

// ---- the standard and glibc entry points ---------------------------------------------------

/// `malloc`: at least `size` bytes (a unique block even for 0), or null with `ENOMEM`.
#[inline(always)]
pub fn malloc(size: usize) -> *mut c_void {
    checked(alloc::malloc(size))
}

/// `calloc`: `n * size` zeroed bytes; null with `ENOMEM` when the product overflows.
#[inline]
pub fn calloc(n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        Some(total) => checked(alloc::alloc_zeroed(total, 1)),
        None => oom(),
    }
}

/// `free`. Null is ignored.
///
/// # Safety
/// `p` is null or a live block from hugealloc, not used afterwards.
#[inline(always)]
pub unsafe fn free(p: *mut c_void) {
    // SAFETY: forwarded contract.
    unsafe { alloc::free(p.cast()) }
}

/// `realloc` as glibc: `realloc(NULL, n)` is `malloc(n)`; `realloc(p, 0)` frees `p` and
/// returns null; on failure returns null with `ENOMEM` and leaves `p` as it was.
///
/// # Safety
/// `p` is null or a live block from hugealloc; after a non-null result (or a size of 0) only
/// the result may be used.
#[inline]
pub unsafe fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        return malloc(size);
    }
    if size == 0 {
        // SAFETY: p is live (caller's contract) and the caller drops it with size 0.
        unsafe { alloc::free(p.cast()) };
        return null_mut();
    }
    // SAFETY: forwarded contract.
    checked(unsafe { alloc::realloc(p.cast(), size, 1) })
}

/// `reallocarray`: `realloc(p, n * size)` with the product checked (overflow: null, `ENOMEM`,
/// `p` untouched).
///
/// # Safety
/// As `realloc`.
#[inline]
pub unsafe fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: forwarded contract.
        Some(total) => unsafe { realloc(p, total) },
        None => oom(),
    }
}

/// C23 `free_sized`: frees a block from `malloc`, `calloc` or `realloc` whose requested size
/// was `size` (anything up to its usable size is accepted). A size of another size class
/// aborts the program with the pointer's address.
///
/// # Safety
/// As `free`.
#[inline]
pub unsafe fn free_sized(p: *mut c_void, size: usize) {
    // SAFETY: forwarded contract.
    unsafe { alloc::free_sized(p.cast(), size, 1) }
}

/// C23 `free_aligned_sized`: frees a block from `aligned_alloc(alignment, size)`; a mismatch
/// that changes the size class aborts as in `free_sized`.
///
/// # Safety
/// As `free`.
#[inline]
pub unsafe fn free_aligned_sized(p: *mut c_void, alignment: usize, size: usize) {
    // SAFETY: forwarded contract.
    unsafe { alloc::free_sized(p.cast(), size, alignment.max(1)) }
}

/// `posix_memalign`: stores a block of `size` bytes aligned to `alignment` in `*out` and
/// returns 0; `EINVAL` when `alignment` is not a power of two multiple of `sizeof(void *)`,
/// `ENOMEM` when memory is short (`*out` and `errno` untouched in both cases).
///
/// # Safety
/// `out` is valid for writing a pointer.
#[inline]
pub unsafe fn posix_memalign(out: *mut *mut c_void, alignment: usize, size: usize) -> c_int {
    if !alignment.is_power_of_two() || alignment < PTR_SIZE {
        return libc::EINVAL;
    }
    let p = alloc::alloc(size, alignment);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: out is writable (caller's contract).
    unsafe { out.write(p.cast()) };
    0
}

/// C11 `aligned_alloc` as glibc 2.38 and later: `alignment` must be a power of two (else null
/// with `EINVAL`); `size` need not be a multiple of it (C17, DR 460).
#[inline]
pub fn aligned_alloc(alignment: usize, size: usize) -> *mut c_void {
    if !alignment.is_power_of_two() {
        os::set_errno(libc::EINVAL);
        return null_mut();
    }
    checked(alloc::alloc(size, alignment))
}

/// `memalign` as glibc: an alignment up to 16 is `malloc`'s; one that is not a power of two is
/// rounded up to the next; one past `SIZE_MAX / 2 + 1` gives null with `EINVAL`.
#[inline]
pub fn memalign(alignment: usize, size: usize) -> *mut c_void {
    if alignment <= MALLOC_ALIGN {
        return malloc(size);
    }
    let Some(alignment) = alignment.checked_next_power_of_two() else {
        os::set_errno(libc::EINVAL);
        return null_mut();
    };
    checked(alloc::alloc(size, alignment))
}

/// `valloc`: `memalign(page size, size)`.
#[inline]
pub fn valloc(size: usize) -> *mut c_void {
    checked(alloc::alloc(size, PAGE))
}

/// `pvalloc`: page-aligned, with the size rounded up to whole pages (0 gives one page), so the
/// usable size is whole pages as well.
#[inline]
pub fn pvalloc(size: usize) -> *mut c_void {
    let Some(rounded) = size.max(1).checked_next_multiple_of(PAGE) else {
        return oom();
    };
    checked(alloc::alloc(rounded, PAGE))
}

/// `malloc_usable_size`: the bytes usable in a live block (at least the size asked for); 0 for
/// null.
///
/// # Safety
/// `p` is null or a live block from hugealloc.
#[inline]
pub unsafe fn malloc_usable_size(p: *mut c_void) -> usize {
    if p.is_null() {
        return 0;
    }
    // SAFETY: forwarded contract.
    unsafe { alloc::usable_size(p.cast()) }
}

/// `malloc_trim`: returns every free dirty chunk of every arena to the kernel (the padding
/// argument is ignored); 1 when some memory was released, else 0, as glibc.
pub fn malloc_trim(_pad: usize) -> c_int {
    c_int::from(crate::ctl::purge_all() > 0)
}

/// `mallopt`: hugealloc has no knobs through this interface (use `HUGEALLOC_CONF` or
/// `mallctl`), so every parameter is accepted and ignored: returns 1, what glibc returns for a
/// parameter it accepts (glibc also returns 1 for parameters it does not know), so programs
/// that tune glibc's heap keep running unchanged.
pub fn mallopt(_param: c_int, _value: c_int) -> c_int {
    1
}

/// glibc's `struct mallinfo2`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mallinfo2 {
    pub arena: usize,
    pub ordblks: usize,
    pub smblks: usize,
    pub hblks: usize,
    pub hblkhd: usize,
    pub usmblks: usize,
    pub fsmblks: usize,
    pub uordblks: usize,
    pub fordblks: usize,
    pub keepcost: usize,
}

/// glibc's `struct mallinfo` (the same fields as `int`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mallinfo {
    pub arena: c_int,
    pub ordblks: c_int,
    pub smblks: c_int,
    pub hblks: c_int,
    pub hblkhd: c_int,
    pub usmblks: c_int,
    pub fsmblks: c_int,
    pub uordblks: c_int,
    pub fordblks: c_int,
    pub keepcost: c_int,
}

/// `mallinfo2`, from hugealloc's statistics: `arena` = bytes mapped (`stats.mapped`),
/// `uordblks` = bytes allocated (`stats.allocated`), `fordblks` = the difference, `keepcost` =
/// dirty free bytes `malloc_trim` could release; the other fields are 0.
pub fn mallinfo2() -> Mallinfo2 {
    crate::init::ensure_init();
    let s = crate::stats::stats();
    Mallinfo2 {
        arena: s.mapped,
        uordblks: s.allocated,
        fordblks: s.mapped.saturating_sub(s.allocated),
        keepcost: s.dirty,
        ..Mallinfo2::default()
    }
}

/// `mallinfo`: `mallinfo2` with each figure clamped to `INT_MAX`.
pub fn mallinfo() -> Mallinfo {
    let m = mallinfo2();
    let c = |v: usize| c_int::try_from(v).unwrap_or(c_int::MAX);
    Mallinfo {
        arena: c(m.arena),
        ordblks: c(m.ordblks),
        smblks: c(m.smblks),
        hblks: c(m.hblks),
        hblkhd: c(m.hblkhd),
        usmblks: c(m.usmblks),
        fsmblks: c(m.fsmblks),
        uordblks: c(m.uordblks),
        fordblks: c(m.fordblks),
        keepcost: c(m.keepcost),
    }
}

/// glibc's `malloc_stats`: hugealloc's statistics on stderr (everything, as text).
pub fn malloc_stats() {
    crate::init::ensure_init();
    crate::stats::print_lines(
        crate::stats::PrintOpts::ALL,
        crate::config::options(),
        &mut |line| os::write_stderr(line),
    );
}

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

// ---- mallctl -------------------------------------------------------------------------------
//
// The names, their types and handlers live in `crate::ctl`; what follows adds C's
// conventions only: sizes, `oldp`/`oldlenp`/`newp`, errno values.

use crate::ctl::CtlType;

/// jemalloc's `MALLCTL_ARENAS_ALL`: `arena.<i>.*` for every arena.
pub const MALLCTL_ARENAS_ALL: usize = crate::ctl::ARENAS_ALL;

/// Reads a value of type `ty` from `p`; `None` for a value C cannot hand over (a null
/// string, a `bool` other than 0 or 1).
///
/// # Safety
/// `p` is valid for reading `ty.size()` bytes; a `const char *` read is null or
/// NUL-terminated and outlives the returned value.
unsafe fn read_value<'a>(ty: CtlType, p: *const c_void) -> Option<CtlValue<'a>> {
    // SAFETY: p holds ty.size() readable bytes (caller's contract); unaligned reads allowed.
    unsafe {
        Some(match ty {
            CtlType::Void => CtlValue::None,
            CtlType::Bool => match p.cast::<u8>().read() {
                0 => CtlValue::Bool(false),
                1 => CtlValue::Bool(true),
                _ => return None,
            },
            CtlType::Unsigned => CtlValue::Unsigned(p.cast::<c_uint>().read_unaligned()),
            CtlType::U64 => CtlValue::U64(p.cast::<u64>().read_unaligned()),
            CtlType::I64 => CtlValue::I64(p.cast::<i64>().read_unaligned()),
            CtlType::Size => CtlValue::Size(p.cast::<usize>().read_unaligned()),
            CtlType::Str => {
                let s = p.cast::<*const c_char>().read_unaligned();
                if s.is_null() {
                    return None;
                }
                // SAFETY: a non-null string written is NUL-terminated (mallctl's contract).
                CtlValue::Str(CStr::from_ptr(s))
            }
        })
    }
}

/// Writes `v` to `p`.
///
/// # Safety
/// `p` is valid for writing the size of `v`'s type.
unsafe fn write_value(v: CtlValue<'static>, p: *mut c_void) {
    // SAFETY: p has room for the value (caller's contract); unaligned writes allowed.
    unsafe {
        match v {
            CtlValue::None => {}
            CtlValue::Bool(x) => p.cast::<u8>().write(u8::from(x)),
            CtlValue::Unsigned(x) => p.cast::<c_uint>().write_unaligned(x),
            CtlValue::U64(x) => p.cast::<u64>().write_unaligned(x),
            CtlValue::I64(x) => p.cast::<i64>().write_unaligned(x),
            CtlValue::Size(x) => p.cast::<usize>().write_unaligned(x),
            CtlValue::Str(x) => p.cast::<*const c_char>().write_unaligned(x.as_ptr()),
        }
    }
}

/// `mallctl`'s work once the name is resolved, in C's terms. Every check comes before the
/// name acts, so a call that fails has no effect: read-only names written (or actions given
/// a value either way) are `EPERM`, a `*oldlenp` or `newlen` other than the type's size
/// `EINVAL` (unlike jemalloc, nothing is copied then).
///
/// # Safety
/// As `mallctl`.
unsafe fn ctl_call(
    c: Ctl,
    oldp: *mut c_void,
    oldlenp: *mut usize,
    newp: *const c_void,
    newlen: usize,
) -> c_int {
    let ty = c.ty();
    let writing = !newp.is_null() || newlen != 0;
    if writing && !c.writable() {
        return libc::EPERM;
    }
    if ty == CtlType::Void && (!oldp.is_null() || !oldlenp.is_null()) {
        return libc::EPERM;
    }
    let reading = !oldp.is_null() && !oldlenp.is_null();
    // SAFETY: oldlenp is non-null here, and valid (caller's contract).
    if reading && unsafe { *oldlenp } != ty.size() {
        return libc::EINVAL;
    }
    let new = if newp.is_null() {
        None
    } else if newlen != ty.size() {
        return libc::EINVAL;
    } else {
        // SAFETY: newp holds newlen == ty.size() bytes (caller's contract).
        match unsafe { read_value(ty, newp) } {
            Some(v) => Some(v),
            None => return libc::EINVAL,
        }
    };
    match c.call(new) {
        Ok(v) => {
            if reading {
                // SAFETY: oldp has *oldlenp == ty.size() bytes (checked above).
                unsafe { write_value(v, oldp) };
            }
            0
        }
        Err(e) => e.errno(),
    }
}

/// `mallctl`: reads and/or writes the control name `name` (jemalloc's convention: the old
/// value to `oldp` when `oldp` and `oldlenp` are non-null, a new one from `newp`). Returns 0,
/// or `ENOENT` (unknown name), `EINVAL` (wrong size or value), `EPERM` (read-only name
/// written), `EFAULT` (no such arena), `EAGAIN` (no arena could be created).
///
/// # Safety
/// `name` is a NUL-terminated string; `oldp`, when `oldlenp` is non-null, has `*oldlenp`
/// writable bytes; `newp` has `newlen` readable bytes.
pub unsafe fn mallctl(
    name: *const c_char,
    oldp: *mut c_void,
    oldlenp: *mut usize,
    newp: *const c_void,
    newlen: usize,
) -> c_int {
    if name.is_null() {
        return libc::ENOENT;
    }
    // SAFETY: name is NUL-terminated (caller's contract).
    let name = unsafe { CStr::from_ptr(name) }.to_bytes();
    match Ctl::lookup(name) {
        // SAFETY: forwarded contract.
        Ok(c) => unsafe { ctl_call(c, oldp, oldlenp, newp, newlen) },
        Err(e) => e.errno(),
    }
}

/// Fills `mib[..*miblenp]` with the name's management information base: one entry per
/// component of the name; the `<i>` component holds the arena index, as jemalloc's, so a
/// program may translate `arena.0.purge` once and change `mib[1]`.
///
/// # Safety
/// `name` is NUL-terminated; `mib` has `*miblenp` writable entries.
pub unsafe fn mallctlnametomib(name: *const c_char, mib: *mut usize, miblenp: *mut usize) -> c_int {
    if name.is_null() || mib.is_null() || miblenp.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: name is NUL-terminated (caller's contract).
    let name = unsafe { CStr::from_ptr(name) }.to_bytes();
    let c = match Ctl::lookup(name) {
        Ok(c) => c,
        Err(e) => return e.errno(),
    };
    // SAFETY: miblenp is valid and mib has *miblenp writable entries (caller's contract).
    let out = unsafe { core::slice::from_raw_parts_mut(mib, *miblenp) };
    match c.to_mib(out) {
        Ok(n) => {
            // SAFETY: as above.
            unsafe { *miblenp = n };
            0
        }
        Err(e) => e.errno(),
    }
}

/// `mallctlbymib`: `mallctl` on a MIB from `mallctlnametomib` (with the `<i>` entry possibly
/// changed).
///
/// # Safety
/// `mib` has `miblen` readable entries; the rest as `mallctl`.
pub unsafe fn mallctlbymib(
    mib: *const usize,
    miblen: usize,
    oldp: *mut c_void,
    oldlenp: *mut usize,
    newp: *const c_void,
    newlen: usize,
) -> c_int {
    if mib.is_null() || miblen == 0 {
        return libc::ENOENT;
    }
    // SAFETY: mib has miblen >= 1 readable entries (caller's contract).
    let mib = unsafe { core::slice::from_raw_parts(mib, miblen) };
    match Ctl::from_mib(mib) {
        // SAFETY: forwarded contract.
        Ok(c) => unsafe { ctl_call(c, oldp, oldlenp, newp, newlen) },
        Err(e) => e.errno(),
    }
}

// ---- statistics printing -------------------------------------------------------------------

/// jemalloc's `write_cb`: called with a NUL-terminated piece of text.
pub type WriteCb = unsafe extern "C" fn(cbopaque: *mut c_void, text: *const c_char);

/// `malloc_stats_print` as jemalloc: writes the statistics through `write_cb(cbopaque, text)`,
/// one NUL-terminated line per call (stderr when `write_cb` is null). `opts` holds
/// `stats_print_opts` letters (`J` JSON; `g`, `m`, `a`, `b`, `l`, `x`, `h` leave parts out;
/// see `stats::PrintOpts`); other bytes are ignored. Nothing is allocated.
///
/// # Safety
/// `opts` is null or NUL-terminated; `write_cb`, when given, may be called with `cbopaque`.
pub unsafe fn stats_print(write_cb: Option<WriteCb>, cbopaque: *mut c_void, opts: *const c_char) {
    let letters = if opts.is_null() {
        &[][..]
    } else {
        // SAFETY: opts is NUL-terminated (caller's contract).
        unsafe { CStr::from_ptr(opts) }.to_bytes()
    };
    let opts = crate::stats::PrintOpts::parse(letters);
    crate::init::ensure_init();
    let options = crate::config::options();
    match write_cb {
        Some(cb) => crate::stats::print_lines(opts, options, &mut |line| {
            let mut buf = [0u8; crate::stats::LINE_MAX + 1];
            for (slot, &b) in buf.iter_mut().zip(line) {
                *slot = b;
            }
            // SAFETY: the callback's contract (jemalloc's): a NUL-terminated string it may
            // read until it returns (lines are at most LINE_MAX bytes, so the last byte of
            // buf stays 0), and the opaque pointer the caller gave.
            unsafe { cb(cbopaque, buf.as_ptr().cast()) };
        }),
        None => crate::stats::print_lines(opts, options, &mut |line| os::write_stderr(line)),
    }
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
