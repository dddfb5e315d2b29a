//! The C ABI of hugealloc: `libhugealloc.so` and `libhugealloc.a`. This file is only the
//! table of exported symbols, each a one-line forward into `hugealloc::ffi` (the core's
//! `c_api` module, re-exported for this crate and hidden from the core's documentation), where
//! the C semantics live (errno, overflow checks, `EINVAL`); see `include/hugealloc.h` for the
//! contract of each and `docs/c-api.md` for linking and preloading.
//!
//! Every function is exported as `hugealloc_<name>`; with the `override` feature (the
//! default) also under its plain name, replacing glibc's (and as glibc's `__libc_*` aliases),
//! so that a program never mixes glibc's heap with hugealloc's.
//!
//! Nothing here may panic or allocate: the forwards call `ffi` only.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]

use core::ffi::{c_char, c_int, c_void};
use hugealloc::ffi::{self, Mallinfo, Mallinfo2, WriteCb};

/// `export!(target(args) -> ret: "hugealloc_name", override "name", "alias", ...);` defines
/// one `extern "C"` function per symbol name, each calling `ffi::target(args)`. The names
/// after `override` exist only with the `override` feature.
macro_rules! export {
    ($target:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?: $prefixed:literal
        $(, override $($plain:literal),+)?) => {
        export!(@names { $target($($arg: $ty),*) $(-> $ret)? } $prefixed;
            $($($plain)+)?);
    };
    (@names $sig:tt $prefixed:literal; $($plain:literal)*) => {
        export!(@one $sig $prefixed);
        $(
            #[cfg(feature = "override")]
            export!(@one $sig $plain);
        )*
    };
    (@one { $target:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)? } $name:literal) => {
        const _: () = {
            #[export_name = $name]
            #[allow(unused_unsafe)]
            unsafe extern "C" fn export($($arg: $ty),*) $(-> $ret)? {
                // SAFETY: the C caller takes on the contract of the `ffi` function, which
                // hugealloc.h states for the exported name.
                unsafe { ffi::$target($($arg),*) }
            }
        };
    };
}

/// Runs `ffi::on_load` when the library is loaded (preloaded, linked or statically linked),
/// before `main`. Priority 100 (`.init_array.00100`, a priority reserved to the C
/// implementation, which an allocator is part of) puts it ahead of the program's own
/// constructors in a static link, so their allocations find hugealloc initialised.
#[used]
#[link_section = ".init_array.00100"]
static ON_LOAD: extern "C" fn() = on_load;

extern "C" fn on_load() {
    ffi::on_load()
}

// The standard and glibc entry points.
export!(malloc(size: usize) -> *mut c_void: "hugealloc_malloc", override "malloc", "__libc_malloc");
export!(calloc(n: usize, size: usize) -> *mut c_void: "hugealloc_calloc", override "calloc", "__libc_calloc");
export!(realloc(p: *mut c_void, size: usize) -> *mut c_void: "hugealloc_realloc", override "realloc", "__libc_realloc");
export!(reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void: "hugealloc_reallocarray", override "reallocarray");
export!(free(p: *mut c_void): "hugealloc_free", override "free", "__libc_free", "cfree");
export!(free_sized(p: *mut c_void, size: usize): "hugealloc_free_sized", override "free_sized");
export!(free_aligned_sized(p: *mut c_void, alignment: usize, size: usize): "hugealloc_free_aligned_sized", override "free_aligned_sized");
export!(posix_memalign(out: *mut *mut c_void, alignment: usize, size: usize) -> c_int: "hugealloc_posix_memalign", override "posix_memalign");
export!(aligned_alloc(alignment: usize, size: usize) -> *mut c_void: "hugealloc_aligned_alloc", override "aligned_alloc");
export!(memalign(alignment: usize, size: usize) -> *mut c_void: "hugealloc_memalign", override "memalign", "__libc_memalign");
export!(valloc(size: usize) -> *mut c_void: "hugealloc_valloc", override "valloc", "__libc_valloc");
export!(pvalloc(size: usize) -> *mut c_void: "hugealloc_pvalloc", override "pvalloc", "__libc_pvalloc");
export!(malloc_usable_size(p: *mut c_void) -> usize: "hugealloc_malloc_usable_size", override "malloc_usable_size");
export!(malloc_trim(pad: usize) -> c_int: "hugealloc_malloc_trim", override "malloc_trim");
export!(mallopt(param: c_int, value: c_int) -> c_int: "hugealloc_mallopt", override "mallopt", "__libc_mallopt");
export!(mallinfo() -> Mallinfo: "hugealloc_mallinfo", override "mallinfo", "__libc_mallinfo");
export!(mallinfo2() -> Mallinfo2: "hugealloc_mallinfo2", override "mallinfo2");
export!(malloc_stats(): "hugealloc_malloc_stats", override "malloc_stats");

// jemalloc's non-standard API.
export!(mallocx(size: usize, flags: c_int) -> *mut c_void: "hugealloc_mallocx", override "mallocx");
export!(rallocx(p: *mut c_void, size: usize, flags: c_int) -> *mut c_void: "hugealloc_rallocx", override "rallocx");
export!(xallocx(p: *mut c_void, size: usize, extra: usize, flags: c_int) -> usize: "hugealloc_xallocx", override "xallocx");
export!(sallocx(p: *const c_void, flags: c_int) -> usize: "hugealloc_sallocx", override "sallocx");
export!(dallocx(p: *mut c_void, flags: c_int): "hugealloc_dallocx", override "dallocx");
export!(sdallocx(p: *mut c_void, size: usize, flags: c_int): "hugealloc_sdallocx", override "sdallocx");
export!(nallocx(size: usize, flags: c_int) -> usize: "hugealloc_nallocx", override "nallocx");
export!(mallctl(name: *const c_char, oldp: *mut c_void, oldlenp: *mut usize, newp: *const c_void, newlen: usize) -> c_int: "hugealloc_mallctl", override "mallctl");
export!(mallctlnametomib(name: *const c_char, mib: *mut usize, miblenp: *mut usize) -> c_int: "hugealloc_mallctlnametomib", override "mallctlnametomib");
export!(mallctlbymib(mib: *const usize, miblen: usize, oldp: *mut c_void, oldlenp: *mut usize, newp: *const c_void, newlen: usize) -> c_int: "hugealloc_mallctlbymib", override "mallctlbymib");
export!(stats_print(write_cb: Option<WriteCb>, cbopaque: *mut c_void, opts: *const c_char): "hugealloc_stats_print", override "malloc_stats_print");
