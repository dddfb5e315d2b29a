//! hugealloc: a general-purpose memory allocator with first-class control of Linux
//! transparent huge pages. See `docs/architecture.md` for the layers and the paths a pointer
//! takes; modules are listed here bottom-up, and each uses only modules listed before it.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]

// std is used for `thread_local!` (const init, no destructor) and in tests only.
extern crate std;

// Layer order, bottom up (rustfmt keeps one-line groups as written). Under `--cfg loom` only
// the layers without process-wide state are built: the loom models drive local instances.
pub mod os;

pub mod sync;

pub mod diag;

pub mod bits;

pub mod bitmap;

pub mod size_class;

pub mod thp;

pub mod config;

pub mod pagemap;

pub mod list;

pub mod chunk;

pub mod base;

pub mod slab;

pub mod bin;

#[cfg(not(loom))]
pub mod owner;

#[cfg(not(loom))]
pub mod arena_state;

#[cfg(not(loom))]
pub mod extent;

#[cfg(not(loom))]
pub mod pages;

#[cfg(not(loom))]
pub mod purge;

#[cfg(not(loom))]
pub mod arena;

pub mod registry;

#[cfg(not(loom))]
pub mod tcache;

#[cfg(not(loom))]
pub mod thread;

#[cfg(not(loom))]
pub mod prof;

#[cfg(not(loom))]
pub mod stats;

#[cfg(not(loom))]
pub mod init;

#[cfg(not(loom))]
pub mod ctl;

#[cfg(not(loom))]
pub mod alloc;

#[cfg(not(loom))]
pub mod c_api;

pub use thp::{Defrag, SystemMode, Thp, ThpStatus};

#[cfg(not(loom))]
pub use api::*;

/// The public Rust API (not built under loom, which has no process-wide allocator).
#[cfg(not(loom))]
mod api {
    use crate::{alloc, thread, SystemMode, Thp, ThpStatus};
    use core::alloc::{GlobalAlloc, Layout};

    pub use crate::ctl::{CtlError, CtlValue};
    pub use crate::stats::Stats;

    /// Gathers the process-wide figures.
    pub fn stats() -> Stats {
        crate::init::ensure_init();
        crate::stats::stats()
    }

    /// The allocator, usable as `#[global_allocator] static GLOBAL: HugeAlloc = HugeAlloc;` or
    /// called directly.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct HugeAlloc;

    impl HugeAlloc {
        /// The allocator with a configuration string applied at start, after every other source
        /// (`HUGEALLOC_CONF` included): `static GLOBAL: HugeAlloc = HugeAlloc::with_conf("thp:always");`
        /// takes effect at the first allocation.
        pub const fn with_conf(conf: &'static str) -> ConfiguredAlloc {
            ConfiguredAlloc { conf }
        }
    }

    // SAFETY: every method forwards to the allocator's entry points, which honour the size and
    // alignment of the layout and return null on failure.
    unsafe impl GlobalAlloc for HugeAlloc {
        #[inline(always)]
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            alloc::alloc(layout.size(), layout.align())
        }
        #[inline(always)]
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: GlobalAlloc's contract: ptr is a live block from this allocator,
            // allocated with this layout.
            unsafe { alloc::free_layout(ptr, layout.size(), layout.align()) }
        }
        #[inline]
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            alloc::alloc_zeroed(layout.size(), layout.align())
        }
        #[inline]
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: GlobalAlloc's contract: ptr is live with this layout.
            unsafe { alloc::realloc(ptr, new_size, layout.align()) }
        }
    }

    /// `HugeAlloc` with a compiled-in configuration string (see `HugeAlloc::with_conf`).
    #[derive(Clone, Copy, Debug)]
    pub struct ConfiguredAlloc {
        conf: &'static str,
    }

    impl ConfiguredAlloc {
        #[inline(always)]
        fn configure(&self) {
            if !crate::init::is_ready() {
                crate::init::set_api_conf(self.conf.as_bytes());
            }
        }
    }

    // SAFETY: forwards to HugeAlloc after recording the configuration, which the first
    // allocation (the global init) applies.
    unsafe impl GlobalAlloc for ConfiguredAlloc {
        #[inline(always)]
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            self.configure();
            // SAFETY: forwarded contract.
            unsafe { HugeAlloc.alloc(layout) }
        }
        #[inline(always)]
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: forwarded contract.
            unsafe { HugeAlloc.dealloc(ptr, layout) }
        }
        #[inline]
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            self.configure();
            // SAFETY: forwarded contract.
            unsafe { HugeAlloc.alloc_zeroed(layout) }
        }
        #[inline]
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: forwarded contract.
            unsafe { HugeAlloc.realloc(ptr, layout, new_size) }
        }
    }

    /// Heap profiling (`prof:true`): dumps of the sampled live heap. See `docs/profiling.md`.
    pub mod profile {
        extern crate alloc as std_alloc;
        use std_alloc::vec::Vec;

        /// Writes the profile (jemalloc's `heap_v2` text, read by `jeprof` and
        /// `hugealloc profile`) to `path`. False when profiling is off (`prof:false`) or the
        /// file cannot be written.
        pub fn dump(path: &str) -> bool {
            crate::init::ensure_init();
            crate::prof::dump_to_path(path.as_bytes())
        }

        /// The profile as bytes (as `dump` writes it); `None` when profiling is off. The
        /// profile is written to an anonymous file first and read back here, after every
        /// lock of the profiler is released, so this vector's allocation cannot deadlock.
        pub fn bytes() -> Option<Vec<u8>> {
            crate::init::ensure_init();
            let (fd, len) = crate::prof::dump_to_memfd()?;
            let mut v: Vec<u8> = std_alloc::vec![0; len as usize];
            let mut at = 0;
            while at < v.len() {
                let n = crate::os::read_at(fd, at as u64, &mut v[at..]);
                if n == 0 {
                    break;
                }
                at += n;
            }
            v.truncate(at);
            crate::os::close(fd);
            Some(v)
        }

        /// Whether profiling is on (`opt.prof`).
        pub fn enabled() -> bool {
            crate::init::ensure_init();
            crate::prof::enabled()
        }

        /// Sampled totals, not scaled: (live objects, live bytes, allocated objects,
        /// allocated bytes) since start or the last `prof.reset`.
        pub fn sampled_totals() -> [u64; 4] {
            crate::prof::totals()
        }

        /// `prof.reset`: forgets every sample so far.
        pub fn reset() {
            crate::prof::reset(None)
        }
    }

    /// The system's transparent huge page settings: `enabled` (as read at init), `defrag` and
    /// whether hugealloc's `MADV_HUGEPAGE` advice has any effect here.
    pub fn thp_status() -> ThpStatus {
        crate::init::ensure_init();
        let enabled = crate::arena::system_mode();
        let mut buf = [0u8; 128];
        let defrag =
            match crate::os::read_file(b"/sys/kernel/mm/transparent_hugepage/defrag\0", &mut buf) {
                Some(n) => crate::thp::parse_defrag(&buf[..n]),
                None => crate::thp::Defrag::Unknown,
            };
        ThpStatus {
            enabled,
            defrag,
            advice_effective: matches!(enabled, SystemMode::Always | SystemMode::Madvise),
        }
    }

    /// The usable size of a live block from hugealloc (at least the size asked for).
    ///
    /// # Safety
    /// `ptr` is a live block from this allocator.
    pub unsafe fn usable_size(ptr: *const u8) -> usize {
        // SAFETY: forwarded contract.
        unsafe { alloc::usable_size(ptr) }
    }

    /// Moves the calling thread to arena `i`; false if there is no such arena.
    pub fn thread_set_arena(i: usize) -> bool {
        crate::init::ensure_init();
        thread::set_thread_arena(i)
    }

    /// Returns every dirty free chunk of every arena to the kernel; returns the bytes purged.
    pub fn purge() -> usize {
        crate::ctl::purge_all()
    }

    /// A handle on an arena of its own, created at run time with a THP policy. Allocating through
    /// it (it implements `GlobalAlloc`) takes memory from that arena only, bypassing the thread
    /// cache; blocks may be freed through any hugealloc entry point.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Arena {
        index: usize,
    }

    impl Arena {
        /// Creates an arena with `policy`; `None` when the arena table is full or memory short.
        pub fn new(policy: Thp) -> Option<Arena> {
            crate::init::ensure_init();
            crate::registry::arena_create(policy).map(|index| Arena { index })
        }

        /// The handle of existing arena `index`.
        pub fn from_index(index: usize) -> Option<Arena> {
            crate::init::ensure_init();
            crate::registry::arena_get(index).map(|_| Arena { index })
        }

        /// The arena's index (as in `arena.<i>.*` control names and `MALLOCX_ARENA`).
        /// Bytes of this arena's chunks backed by huge pages now (`AnonHugePages` read from
        /// `/proc/self/smaps`; see `arena::huge_backed_bytes`).
        pub fn huge_backed_bytes(&self) -> u64 {
            crate::arena::huge_backed_bytes(self.index as u32)
        }

        pub fn index(&self) -> usize {
            self.index
        }

        /// The arena's THP policy.
        pub fn thp(&self) -> Thp {
            crate::registry::arena(self.index).thp()
        }

        /// Changes the policy; chunks put to use afterwards get the new advice.
        pub fn set_thp(&self, policy: Thp) {
            crate::registry::arena(self.index).set_thp(policy)
        }
    }

    // SAFETY: allocation honours size and alignment (alloc_in), frees go to the owning arena.
    unsafe impl GlobalAlloc for Arena {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            alloc::alloc_in(
                Some(self.index),
                layout.size(),
                layout.align(),
                false,
                false,
            )
        }
        unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
            // SAFETY: GlobalAlloc's contract: ptr is a live block from hugealloc.
            unsafe { alloc::free_no_cache(ptr) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            alloc::alloc_in(Some(self.index), layout.size(), layout.align(), true, false)
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: GlobalAlloc's contract: ptr is live with this layout.
            unsafe {
                if alloc::resize_in_place(ptr, new_size, layout.align()) >= new_size
                    && alloc::good_size(new_size, layout.align()) == Some(alloc::usable_size(ptr))
                {
                    return ptr;
                }
                let q = alloc::alloc_in(Some(self.index), new_size, layout.align(), false, false);
                if !q.is_null() {
                    core::ptr::copy_nonoverlapping(ptr, q, layout.size().min(new_size));
                    alloc::free_no_cache(ptr);
                }
                q
            }
        }
    }
}
