//! hugealloc: a general-purpose memory allocator with first-class control of Linux
//! transparent huge pages (THP).
//!
//! Thread caches, size-class bins and arenas of 2 MiB chunks, in the style of jemalloc: blocks
//! of 4 MiB and more are advised onto 2 MiB huge pages by default, small objects are not, and
//! each arena can have its own THP policy. The same allocator serves C programs through the
//! `hugealloc-ffi` package (`libhugealloc.so`, the `hugealloc` launcher).
//!
//! # Using it
//!
//! | you want | use |
//! |---|---|
//! | hugealloc as the program's allocator | [`HugeAlloc`] as `#[global_allocator]` |
//! | the same, with options compiled in | [`HugeAlloc::with_conf`] (a [`ConfiguredAlloc`]) |
//! | options without recompiling | `HUGEALLOC_CONF="thp:always,..."` in the environment |
//! | how much memory the heap holds | [`stats()`] (a [`Stats`]) |
//! | memory with its own huge page policy | [`Arena::new`] with a [`Thp`] policy |
//! | a thread's allocations in a given arena | [`thread_set_arena`] |
//! | free memory back to the kernel now | [`purge`] |
//! | what the system does with huge pages | [`thp_status`] |
//! | whether explicit huge pages (hugetlb pools) can be had | [`hugetlb_status`] |
//! | the size a block really has | [`usable_size`] |
//! | every other knob and figure, by name | [`ctl`] (jemalloc's `mallctl` names) |
//!
//! # The global allocator
//!
//! ```
//! use hugealloc::HugeAlloc;
//!
//! #[global_allocator]
//! static GLOBAL: HugeAlloc = HugeAlloc;
//!
//! fn main() {
//!     let big = vec![0u8; 16 << 20]; // a huge block: whole 2 MiB chunks, advised MADV_HUGEPAGE
//!     let small: Vec<Box<u64>> = (0..1000).map(Box::new).collect(); // small classes
//!     let s = hugealloc::stats();
//!     assert!(s.allocated >= big.len() + small.len() * 8);
//!     assert!(s.mapped >= s.active && s.active >= big.len());
//! }
//! ```
//!
//! # Configuration
//!
//! Options are `name:value` pairs separated by commas, read at the first allocation from (in
//! order, later wins) the build's default, a `hugealloc_conf` symbol, `/etc/hugealloc.conf`,
//! `HUGEALLOC_CONF`, and [`HugeAlloc::with_conf`]. A bad pair gets a one-line warning on stderr
//! and is ignored. The options in effect can be read back as `opt.<name>` through [`ctl`]; every
//! option is described in `docs/configuration.md`. The most used: `thp` (the policy of every
//! arena: `madvise`, `always`, `never`, `default`), `thp_threshold`, `narenas`,
//! `dirty_decay_ms`, `dirty_max`, `stats_print` (statistics on stderr at exit) and `check`
//! (`check:full`: redzones, junk filling and invariant checks, for debugging).
//!
//! # Statistics and control
//!
//! [`stats()`] gives the process-wide byte counts; [`ctl`] reads and writes every figure and
//! setting by name, as `mallctl` does in C (`stats.arenas.<i>.mapped`, `arena.<i>.thp`,
//! `arena.<i>.purge`, ...):
//!
//! ```
//! use core::alloc::{GlobalAlloc, Layout};
//! use hugealloc::{ctl, CtlValue, HugeAlloc};
//!
//! // hugealloc need not be the global allocator: it can be called directly.
//! let layout = Layout::from_size_align(1 << 20, 64).unwrap();
//! let before = hugealloc::stats();
//! // SAFETY: the layout's size is not zero.
//! let p = unsafe { HugeAlloc.alloc(layout) };
//! assert!(!p.is_null());
//! let after = hugealloc::stats();
//! assert!(after.allocated >= before.allocated + layout.size());
//! assert_eq!(ctl::read("stats.allocated"), Ok(CtlValue::Size(after.allocated)));
//! // SAFETY: p is live and was allocated with this layout.
//! unsafe { HugeAlloc.dealloc(p, layout) };
//! ```
//!
//! # Huge pages
//!
//! Each arena has a [`Thp`] policy; the configuration's `thp` sets every arena's at start, and
//! [`Arena::new`] creates an arena with a policy of its own, through which a program can
//! allocate ([`Arena`] implements `GlobalAlloc`). [`thp_status`] says whether the system
//! honours the advice at all (`hugealloc thp` prints the same from the shell).
//!
//! # For contributors
//!
//! `docs/architecture.md` in the repository describes the layers and the paths a pointer
//! takes. The modules below are listed bottom-up; each uses only modules listed before it.
//! They are private: the API is what this page shows (the items of the crate root and
//! [`ctl`]). Two hidden modules give the rest of the workspace a deliberate way in, and are not
//! API either (no stability, no semver, absent from this documentation):
//! - `ffi`: the C entry points (`c_api`) that `hugealloc-ffi` exports as `malloc`, `mallctl`,
//!   ...; every function taking a raw pointer is an `unsafe fn` with its contract.
//! - `testing`: the internals the workspace's tests, benches and fuzz targets need, grouped by
//!   module (`hugealloc::testing::arena::set_decay_ms` is `crate::arena::set_decay_ms`); a
//!   function that takes a raw pointer is an `unsafe fn` there. A test needing one more item
//!   adds a re-export to its module's group in `testing.rs`, not a `pub mod`.
//!
//! `tests/privacy.rs` fails if a module other than `ctl`, `ffi` and `testing` becomes public.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
// Under loom only the layers the models drive are built, without the process-wide code that
// uses the rest of them: unused items there are expected, not dead code.
#![cfg_attr(loom, allow(dead_code, unused_imports))]

// std is used for `thread_local!` (const init, no destructor) and in tests only.
extern crate std;

// Layer order, bottom up (rustfmt keeps one-line groups as written). Under `--cfg loom` only
// the layers without process-wide state are built: the loom models drive local instances.
mod os;

mod sync;

mod diag;

mod bits;

mod bitmap;

mod size_class;

mod thp;

mod config;

mod pagemap;

mod list;

mod chunk;

#[cfg(not(loom))]
mod collapse;

#[cfg(not(loom))]
mod hugetlb;

mod base;

mod slab;

mod bin;

#[cfg(not(loom))]
mod owner;

#[cfg(not(loom))]
mod arena_state;

#[cfg(not(loom))]
mod extent;

#[cfg(not(loom))]
mod purge_hugetlb;

#[cfg(not(loom))]
mod pages;

#[cfg(not(loom))]
mod purge;

#[cfg(not(loom))]
mod arena;

mod registry;

#[cfg(not(loom))]
mod tcache;

#[cfg(not(loom))]
mod thread;

#[cfg(not(loom))]
mod prof;

#[cfg(not(loom))]
mod stats;

#[cfg(not(loom))]
mod init;

#[cfg(not(loom))]
pub mod ctl;

#[cfg(not(loom))]
mod alloc;

#[cfg(not(loom))]
mod c_api;

// Not API (see "For contributors" above): the internals the workspace's tests use.
#[doc(hidden)]
pub mod testing;

/// The C entry points `hugealloc-ffi` exports (not API: see "For contributors" in the crate
/// documentation). Each is the C function of its name, with C's semantics (`errno`, overflow
/// checks, `EINVAL`) and the contract `hugealloc.h` states; each taking a raw pointer is an
/// `unsafe fn` whose `# Safety` section is that contract.
#[cfg(not(loom))]
#[doc(hidden)]
pub mod ffi {
    pub use crate::c_api::{
        aligned_alloc, calloc, dallocx, free, free_aligned_sized, free_sized, mallctl,
        mallctlbymib, mallctlnametomib, mallinfo, mallinfo2, malloc, malloc_stats, malloc_trim,
        malloc_usable_size, mallocx, mallopt, memalign, nallocx, on_load, posix_memalign, pvalloc,
        rallocx, realloc, reallocarray, sallocx, sdallocx, stats_print, valloc, xallocx, Mallinfo,
        Mallinfo2, WriteCb, MALLCTL_ARENAS_ALL, MALLOCX_LG_ALIGN_MASK, MALLOCX_TCACHE_NONE,
        MALLOCX_ZERO,
    };
}

pub use hugetlb::{HugetlbPoolStatus, HugetlbStatus};
pub use thp::{Defrag, SystemMode, Thp, ThpStatus};

#[cfg(not(loom))]
pub use api::*;

/// The public Rust API (not built under loom, which has no process-wide allocator).
#[cfg(not(loom))]
mod api {
    use crate::{alloc, thread, HugetlbStatus, SystemMode, Thp, ThpStatus};
    use core::alloc::{GlobalAlloc, Layout};

    pub use crate::config::Hugetlb;
    pub use crate::ctl::{CtlError, CtlValue};
    pub use crate::stats::Stats;

    /// Gathers the process-wide figures.
    pub fn stats() -> Stats {
        crate::init::ensure_init();
        crate::stats::stats()
    }

    /// The allocator: the program's global allocator, or called directly through
    /// `GlobalAlloc`. Options come from the environment (`HUGEALLOC_CONF`) and the other
    /// sources of the crate guide; [`HugeAlloc::with_conf`] compiles some in.
    ///
    /// ```
    /// use hugealloc::HugeAlloc;
    ///
    /// #[global_allocator]
    /// static GLOBAL: HugeAlloc = HugeAlloc;
    ///
    /// fn main() {
    ///     let s = String::from("served by hugealloc");
    ///     // SAFETY: the string's buffer is a live block from the global allocator.
    ///     let usable = unsafe { hugealloc::usable_size(s.as_ptr()) };
    ///     assert!(usable >= s.len());
    /// }
    /// ```
    #[derive(Clone, Copy, Debug, Default)]
    pub struct HugeAlloc;

    impl HugeAlloc {
        /// The allocator with a configuration string compiled in, as a [`ConfiguredAlloc`]
        /// (the type of the `#[global_allocator]` static). The string is applied at the first
        /// allocation, after every other source (`HUGEALLOC_CONF` included), so its options win;
        /// a bad pair gets a one-line warning on stderr and is ignored.
        ///
        /// ```
        /// use hugealloc::{ConfiguredAlloc, HugeAlloc};
        ///
        /// #[global_allocator]
        /// static GLOBAL: ConfiguredAlloc = HugeAlloc::with_conf("thp:never,narenas:2");
        ///
        /// fn main() {
        ///     let v = vec![1u32; 1000];
        ///     assert_eq!(v.iter().sum::<u32>(), 1000);
        ///     // The compiled-in options are in effect.
        ///     let thp = hugealloc::ctl::read("opt.thp");
        ///     assert_eq!(thp, Ok(hugealloc::CtlValue::Str(c"never")));
        /// }
        /// ```
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
    ///
    /// ```
    /// use hugealloc::SystemMode;
    ///
    /// let st = hugealloc::thp_status();
    /// // Advice works where the system setting is `always` or `madvise`.
    /// assert_eq!(
    ///     st.advice_effective,
    ///     matches!(st.enabled, SystemMode::Always | SystemMode::Madvise)
    /// );
    /// if !st.advice_effective {
    ///     eprintln!("no huge pages here: {:?} (see `hugealloc thp`)", st.enabled);
    /// }
    /// ```
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

    /// The explicit huge page pools (2 MiB, then 1 GiB): their sizes and free pages as sysfs
    /// shows them, and whether a page can be had now (one is mapped, touched and given back:
    /// the pool is as before afterwards). What `hugetlb:2M|1G` and `hugetlb_reserve` draw
    /// from (`docs/hugetlb.md`); `hugealloc thp` prints the same. Allocates nothing.
    ///
    /// ```
    /// use hugealloc::Hugetlb;
    ///
    /// let st = hugealloc::hugetlb_status();
    /// assert_eq!(st.pools[0].source, Hugetlb::Pages2M);
    /// assert_eq!(st.pools[1].page_bytes, 1 << 30);
    /// for pool in st.pools {
    ///     // No page can be had from a pool the kernel does not have.
    ///     assert!(pool.present || !pool.test_page);
    ///     assert!(pool.available() <= pool.free);
    ///     if !pool.test_page {
    ///         eprintln!(
    ///             "hugetlb:{} would fall back ({}); reserve pages with: echo N > {}nr_hugepages",
    ///             pool.source.name(),
    ///             pool.why_not,
    ///             pool.sysfs_dir
    ///         );
    ///     }
    /// }
    /// ```
    pub fn hugetlb_status() -> HugetlbStatus {
        crate::hugetlb::status()
    }

    /// The usable size of a live block from hugealloc (at least the size asked for: the size
    /// of its class, which the program may use whole).
    ///
    /// ```
    /// use core::alloc::{GlobalAlloc, Layout};
    /// use hugealloc::HugeAlloc;
    ///
    /// let layout = Layout::from_size_align(100, 8).unwrap();
    /// // SAFETY: the size is not zero.
    /// let p = unsafe { HugeAlloc.alloc(layout) };
    /// assert!(!p.is_null());
    /// // SAFETY: p is a live block from hugealloc.
    /// let n = unsafe { hugealloc::usable_size(p) };
    /// assert!(n >= 100 && n < 200);
    /// // SAFETY: p is live and was allocated with this layout.
    /// unsafe { HugeAlloc.dealloc(p, layout) };
    /// ```
    ///
    /// # Safety
    /// `ptr` is a live block from this allocator.
    pub unsafe fn usable_size(ptr: *const u8) -> usize {
        // SAFETY: forwarded contract.
        unsafe { alloc::usable_size(ptr) }
    }

    /// Moves the calling thread to arena `i`: its later allocations (through [`HugeAlloc`],
    /// the thread cache included, which is flushed first) come from that arena. False if there
    /// is no such arena. Arena indices are those of [`Arena::index`] and of `arena.<i>.*` in
    /// [`ctl`](crate::ctl).
    ///
    /// ```
    /// use hugealloc::{Arena, Thp};
    ///
    /// let a = Arena::new(Thp::Never).expect("an arena");
    /// assert!(hugealloc::thread_set_arena(a.index()));
    /// assert_eq!(
    ///     hugealloc::ctl::read("thread.arena"),
    ///     Ok(hugealloc::CtlValue::Unsigned(a.index() as u32))
    /// );
    /// assert!(!hugealloc::thread_set_arena(usize::MAX));
    /// ```
    pub fn thread_set_arena(i: usize) -> bool {
        crate::init::ensure_init();
        thread::set_thread_arena(i)
    }

    /// Returns the free memory every arena keeps dirty for reuse to the kernel now, after
    /// flushing the calling thread's cache, instead of waiting for decay
    /// (`dirty_decay_ms`); returns the bytes purged. Resident memory drops; the address
    /// space stays reserved (`retained`) for later use.
    ///
    /// ```
    /// use core::alloc::{GlobalAlloc, Layout};
    /// use hugealloc::HugeAlloc;
    ///
    /// let layout = Layout::from_size_align(8 << 20, 4096).unwrap();
    /// // SAFETY: the size is not zero.
    /// let p = unsafe { HugeAlloc.alloc(layout) };
    /// assert!(!p.is_null());
    /// // SAFETY: p holds 8 MiB.
    /// unsafe { p.write_bytes(1, 8 << 20) };
    /// // SAFETY: p is live and was allocated with this layout.
    /// unsafe { HugeAlloc.dealloc(p, layout) };
    /// assert!(hugealloc::stats().dirty > 0); // kept for reuse
    /// assert!(hugealloc::purge() >= 8 << 20);
    /// assert_eq!(hugealloc::stats().dirty, 0);
    /// ```
    pub fn purge() -> usize {
        crate::ctl::purge_all()
    }

    /// A handle on an arena of its own, created at run time with a THP policy. Allocating through
    /// it (it implements `GlobalAlloc`) takes memory from that arena only, bypassing the thread
    /// cache; blocks may be freed through any hugealloc entry point. Use one to keep, say, a
    /// large table on huge pages (`Thp::Always`) while the rest of the program's memory
    /// follows the default, or the other way round (`Thp::Never`).
    ///
    /// ```
    /// use core::alloc::{GlobalAlloc, Layout};
    /// use hugealloc::{Arena, Thp};
    ///
    /// let table = Arena::new(Thp::Always).expect("an arena");
    /// assert_eq!(table.thp(), Thp::Always);
    /// let layout = Layout::from_size_align(8 << 20, 2 << 20).unwrap();
    /// // SAFETY: the size is not zero.
    /// let p = unsafe { table.alloc(layout) };
    /// assert!(!p.is_null());
    /// // SAFETY: p holds 8 MiB.
    /// unsafe { p.write_bytes(0, 8 << 20) };
    /// let mapped = hugealloc::ctl::read(&format!("stats.arenas.{}.mapped", table.index()));
    /// assert!(matches!(mapped, Ok(hugealloc::CtlValue::Size(n)) if n >= 8 << 20));
    /// // Huge-backed where the system allows it (see `thp_status`); never more than mapped.
    /// assert!(table.huge_backed_bytes() <= 16 << 20);
    /// // SAFETY: p is live and was allocated with this layout.
    /// unsafe { table.dealloc(p, layout) };
    /// ```
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Arena {
        index: usize,
    }

    impl Arena {
        /// Creates an arena with `policy`; `None` when the arena table is full or memory short.
        /// Arenas live as long as the process.
        pub fn new(policy: Thp) -> Option<Arena> {
            crate::init::ensure_init();
            crate::init::policy_changed(policy);
            crate::registry::arena_create(policy).map(|index| Arena { index })
        }

        /// Creates an arena with `policy` whose chunks come from `source`: ordinary memory
        /// (`Hugetlb::Off`) or the kernel's pool of explicit 2 MiB or 1 GiB pages, falling back
        /// to ordinary memory (with `policy`) where the pool cannot serve (docs/hugetlb.md).
        ///
        /// ```
        /// use hugealloc::{Arena, Hugetlb, Thp};
        ///
        /// let a = Arena::with_hugetlb(Thp::Default, Hugetlb::Pages2M).expect("an arena");
        /// assert_eq!(a.hugetlb(), Hugetlb::Pages2M);
        /// ```
        pub fn with_hugetlb(policy: Thp, source: Hugetlb) -> Option<Arena> {
            let a = Arena::new(policy)?;
            // A new arena holds no chunks yet: the source can be set.
            crate::registry::arena(a.index).set_hugetlb(source);
            Some(a)
        }

        /// The arena's page source (`arena.<i>.hugetlb`).
        pub fn hugetlb(&self) -> Hugetlb {
            crate::registry::arena(self.index).hugetlb()
        }

        /// Changes the page source; only while the arena holds no chunks yet (false, nothing
        /// changed, after that).
        pub fn set_hugetlb(&self, source: Hugetlb) -> bool {
            crate::registry::arena(self.index).set_hugetlb(source)
        }

        /// The handle of existing arena `index` (0 is the first automatic arena).
        ///
        /// ```
        /// let a0 = hugealloc::Arena::from_index(0).expect("arena 0 always exists");
        /// assert_eq!(a0.index(), 0);
        /// assert_eq!(hugealloc::Arena::from_index(usize::MAX), None);
        /// ```
        pub fn from_index(index: usize) -> Option<Arena> {
            crate::init::ensure_init();
            crate::registry::arena_get(index).map(|_| Arena { index })
        }

        /// Bytes of this arena's chunks backed by huge pages now: `AnonHugePages` read from
        /// `/proc/self/smaps`, so it costs a read of that file (see the example of
        /// [`Arena`]).
        pub fn huge_backed_bytes(&self) -> u64 {
            crate::arena::huge_backed_bytes(self.index as u32)
        }

        /// The arena's index, as in `arena.<i>.*` and `stats.arenas.<i>.*` control names, in
        /// [`thread_set_arena`] and in C's `MALLOCX_ARENA(i)`.
        pub fn index(&self) -> usize {
            self.index
        }

        /// The arena's THP policy.
        pub fn thp(&self) -> Thp {
            crate::registry::arena(self.index).thp()
        }

        /// Changes the policy; chunks put to use afterwards get the new advice (chunks in use
        /// keep theirs).
        ///
        /// ```
        /// use hugealloc::{Arena, Thp};
        ///
        /// let a = Arena::new(Thp::Madvise).expect("an arena");
        /// a.set_thp(Thp::Never);
        /// assert_eq!(a.thp(), Thp::Never);
        /// ```
        pub fn set_thp(&self, policy: Thp) {
            crate::registry::arena(self.index).set_thp(policy);
            crate::init::policy_changed(policy);
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

// The Rust examples of the README and of docs/*.md, compiled and run by `cargo test --doc` so
// that none of them can go stale (a ```rust block there is a doctest; blocks in other languages
// carry their language and are skipped).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/configuration.md")]
pub struct ConfigurationDoctests;
