//! The thread-cache pointers in initial-exec TLS slots of the library's own.

// ---- the thread cache pointers in initial-exec TLS --------------------------------------------
//
// `thread_local!` in a shared library uses the general-dynamic model: every access calls
// `__tls_get_addr` (about 20 instructions). The words the allocation paths read on every
// call, the thread's cache pointers, live instead in `.tbss` slots of our own reached with
// the initial-exec model (`%fs`-relative through a GOT entry; relaxed to local-exec in an
// executable), as jemalloc does. A library using them must be loaded at start (`LD_PRELOAD`,
// linking), or have static TLS room to spare when `dlopen`ed, which glibc reserves for this.
//
// Two slots: `tls_cache`, the one the fast paths read, and `tls_debug_cache`, where the cache
// lives under the debug modes (`junk`, `zero`, `check:full`), out of the fast paths' sight,
// read by the debug paths on every call (in `thread_local!` it cost three `__tls_get_addr`
// calls per `malloc`: 10% of `cfrac`'s time under `junk:true`).

/// Defines an 8-byte initial-exec TLS slot named `$sym` with its getter and setter.
#[cfg(all(target_os = "linux", target_arch = "x86_64", not(loom)))]
macro_rules! tls_slot {
    ($sym:literal, $(#[$gdoc:meta])* $get:ident, $(#[$sdoc:meta])* $set:ident) => {
        core::arch::global_asm!(
            ".section .tbss,\"awT\",@nobits",
            ".p2align 3",
            concat!(".globl ", $sym),
            concat!(".hidden ", $sym),
            concat!(".type ", $sym, ", @object"),
            concat!(".size ", $sym, ", 8"),
            concat!($sym, ":"),
            ".zero 8",
            ".text",
        );

        $(#[$gdoc])*
        #[inline(always)]
        pub fn $get() -> *mut u8 {
            let v: *mut u8;
            // SAFETY: reads this thread's own 8-byte TLS slot defined above, through its GOT
            // offset.
            unsafe {
                core::arch::asm!(
                    concat!("mov {off}, qword ptr [rip + ", $sym, "@GOTTPOFF]"),
                    "mov {v}, qword ptr fs:[{off}]",
                    off = out(reg) _,
                    v = out(reg) v,
                    options(nostack, preserves_flags, readonly, pure),
                );
            }
            v
        }

        $(#[$sdoc])*
        #[inline(always)]
        pub fn $set(p: *mut u8) {
            // SAFETY: writes this thread's own 8-byte TLS slot defined above.
            unsafe {
                core::arch::asm!(
                    concat!("mov {off}, qword ptr [rip + ", $sym, "@GOTTPOFF]"),
                    "mov qword ptr fs:[{off}], {p}",
                    off = out(reg) _,
                    p = in(reg) p,
                    options(nostack, preserves_flags),
                );
            }
        }
    };
}

/// Elsewhere, the same slot in `thread_local!`.
#[cfg(not(all(target_os = "linux", target_arch = "x86_64", not(loom))))]
macro_rules! tls_slot {
    ($sym:literal, $(#[$gdoc:meta])* $get:ident, $(#[$sdoc:meta])* $set:ident) => {
        std::thread_local! {
            static SLOT: core::cell::Cell<*mut u8> =
                const { core::cell::Cell::new(core::ptr::null_mut()) };
        }

        $(#[$gdoc])*
        #[inline(always)]
        pub fn $get() -> *mut u8 {
            SLOT.with(|c| c.get())
        }

        $(#[$sdoc])*
        #[inline(always)]
        pub fn $set(p: *mut u8) {
            SLOT.with(|c| c.set(p))
        }
    };
}

mod fast {
    tls_slot!(
        "hugealloc_tls_cache",
        /// The calling thread's cache pointer the fast paths read (null until set).
        tls_cache,
        /// Sets the calling thread's cache pointer the fast paths read.
        set_tls_cache
    );
}

mod debug {
    tls_slot!(
        "hugealloc_tls_debug_cache",
        /// The calling thread's cache under the debug modes (null until set).
        tls_debug_cache,
        /// Sets the calling thread's cache under the debug modes.
        set_tls_debug_cache
    );
}

pub use debug::{set_tls_debug_cache, tls_debug_cache};
pub use fast::{set_tls_cache, tls_cache};
