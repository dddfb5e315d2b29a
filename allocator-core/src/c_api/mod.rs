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
//!
//! Here: the standard and glibc entry points; jemalloc's `*allocx` API in `jemalloc`,
//! `mallctl*` and `malloc_stats_print` in `mallctl`.

use crate::alloc;
use crate::os::{self, PAGE};
use core::ffi::{c_int, c_void};
use core::ptr::null_mut;

mod jemalloc;
mod mallctl;

pub use jemalloc::*;
pub use mallctl::*;

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
    // A hit is never null: only the misses' result needs the `errno` check.
    match alloc::cache_hit(size) {
        Ok(p) => p.cast(),
        // Its own tail call, with no second argument: with one call for every miss, LLVM set
        // the miss's discriminant before the first test, on the hit's path too.
        Err(alloc::Miss::Uncounted) => malloc_uncounted(size),
        Err(miss) => malloc_miss(size, miss),
    }
}

/// `malloc`'s `Miss::Uncounted` (no cache yet, or a size past `tcache::FAST_MAX`): the generic
/// path, with C's `errno` on failure.
#[cold]
#[inline(never)]
fn malloc_uncounted(size: usize) -> *mut c_void {
    checked(alloc::alloc_slow(size, 1, false))
}

/// `malloc`'s misses (`alloc::alloc_miss`), with C's `errno` on failure: out of line, so the
/// hit needs no stack frame and the miss is a tail call.
#[cold]
#[inline(never)]
fn malloc_miss(size: usize, miss: alloc::Miss) -> *mut c_void {
    checked(alloc::alloc_miss(size, miss))
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
