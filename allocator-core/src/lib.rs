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

// The public Rust API, re-exported below (the top layer: it may use every module above).
#[cfg(not(loom))]
mod api;

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

#[cfg(not(loom))]
pub use hugetlb::{HugetlbPoolStatus, HugetlbStatus};
pub use thp::{Defrag, SystemMode, Thp, ThpStatus};

#[cfg(not(loom))]
pub use api::*;

// The Rust examples of the README and of docs/*.md, compiled and run by `cargo test --doc` so
// that none of them can go stale (a ```rust block there is a doctest; blocks in other languages
// carry their language and are skipped).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/configuration.md")]
pub struct ConfigurationDoctests;
