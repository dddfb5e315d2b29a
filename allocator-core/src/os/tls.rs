//! The thread-cache pointer in an initial-exec TLS slot of the library's own.

// ---- the thread cache pointer in initial-exec TLS ---------------------------------------------
//
// `thread_local!` in a shared library uses the general-dynamic model: every access calls
// `__tls_get_addr` (about 20 instructions). The one word the fast paths read, the thread's
// cache pointer, lives instead in a `.tbss` slot of our own reached with the initial-exec
// model (`%fs`-relative through a GOT entry; relaxed to local-exec in an executable), as
// jemalloc does. A library using it must be loaded at start (`LD_PRELOAD`, linking), or have
// static TLS room to spare when `dlopen`ed, which glibc reserves for this.

#[cfg(all(target_os = "linux", target_arch = "x86_64", not(loom)))]
core::arch::global_asm!(
    ".section .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl hugealloc_tls_cache",
    ".hidden hugealloc_tls_cache",
    ".type hugealloc_tls_cache, @object",
    ".size hugealloc_tls_cache, 8",
    "hugealloc_tls_cache:",
    ".zero 8",
    ".text",
);

/// The calling thread's cache pointer (null until set).
#[cfg(all(target_os = "linux", target_arch = "x86_64", not(loom)))]
#[inline(always)]
pub fn tls_cache() -> *mut u8 {
    let v: *mut u8;
    // SAFETY: reads this thread's own 8-byte TLS slot defined above, through its GOT offset.
    unsafe {
        core::arch::asm!(
            "mov {off}, qword ptr [rip + hugealloc_tls_cache@GOTTPOFF]",
            "mov {v}, qword ptr fs:[{off}]",
            off = out(reg) _,
            v = out(reg) v,
            options(nostack, preserves_flags, readonly, pure),
        );
    }
    v
}

/// Sets the calling thread's cache pointer.
#[cfg(all(target_os = "linux", target_arch = "x86_64", not(loom)))]
#[inline(always)]
pub fn set_tls_cache(p: *mut u8) {
    // SAFETY: writes this thread's own 8-byte TLS slot defined above.
    unsafe {
        core::arch::asm!(
            "mov {off}, qword ptr [rip + hugealloc_tls_cache@GOTTPOFF]",
            "mov qword ptr fs:[{off}], {p}",
            off = out(reg) _,
            p = in(reg) p,
            options(nostack, preserves_flags),
        );
    }
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64", not(loom))))]
std::thread_local! {
    static TLS_CACHE: core::cell::Cell<*mut u8> = const { core::cell::Cell::new(core::ptr::null_mut()) };
}

/// The calling thread's cache pointer (null until set).
#[cfg(not(all(target_os = "linux", target_arch = "x86_64", not(loom))))]
#[inline(always)]
pub fn tls_cache() -> *mut u8 {
    TLS_CACHE.with(|c| c.get())
}

/// Sets the calling thread's cache pointer.
#[cfg(not(all(target_os = "linux", target_arch = "x86_64", not(loom))))]
#[inline(always)]
pub fn set_tls_cache(p: *mut u8) {
    TLS_CACHE.with(|c| c.set(p))
}
