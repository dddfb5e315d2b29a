//! The internals the workspace's tests, benches and fuzz targets use. Not API: hidden from the
//! documentation, no stability promise, not for programs (they use the crate root and `ctl`).
//!
//! One group per internal module, named after it, re-exporting only the items some test uses:
//! the crate's `crate::arena::set_decay_ms` is `hugealloc::testing::arena::set_decay_ms`
//! outside. A test needing one more item adds it to its module's group here (a new group for
//! a module not yet listed), never a `pub mod` in `lib.rs` (`tests/privacy.rs` fails on one).
//!
//! Rule for what goes here: a function that takes a raw pointer whose validity the caller must
//! keep is an `unsafe fn` with a `# Safety` section, here if not in its module (a wrapper where
//! the module's function is safe because every caller inside the crate keeps that contract).
//! A type whose methods trust raw pointers is exported only where those methods are `unsafe`
//! or not `pub`; the structures the loom models drive over local instances are exported only
//! under `cfg(loom)`, a test-only build.

/// `crate::alloc`: the entry points below the C and Rust APIs.
#[cfg(not(loom))]
pub mod alloc {
    pub use crate::alloc::{
        alloc, alloc_in, alloc_zeroed, free, free_no_cache, free_sized, malloc, realloc,
        usable_size, JUNK_ALLOC, JUNK_FREE, REDZONE,
    };
}

/// `crate::arena` (with what it re-exports from `owner` and `purge`).
#[cfg(not(loom))]
pub mod arena {
    pub use crate::arena::{
        arena_index_of, owner_of, set_decay_ms, set_dirty_growth_pct, set_muzzy_decay_ms,
        set_purge_globals, ArenaStats, Owner,
    };
}

/// `crate::config`: the option table and the parser.
#[cfg(not(loom))]
pub mod config {
    pub use crate::config::{
        load, load_from, option_names, parse_pairs, write_options, Kind, OptionRow, Options,
        Source, Value, ARENA_THP_MAX, OPTION_TABLE,
    };
}

/// `crate::ctl`: what the C side needs beyond the public `ctl` module.
#[cfg(not(loom))]
pub mod ctl {
    /// The names of the fixed rows of the control table (`CTL_TABLE`), in table order.
    pub fn fixed_names() -> impl Iterator<Item = &'static str> {
        crate::ctl::CTL_TABLE.iter().map(|row| row.name)
    }
}

/// `crate::hugetlb`: the hugetlb page source.
#[cfg(not(loom))]
pub mod hugetlb {
    pub use crate::hugetlb::{probe, start, Backing, Cause, Chunks, HugetlbSource, HUGETLB};
}

/// `crate::init`: the global init and its test hook.
#[cfg(not(loom))]
pub mod init {
    pub use crate::init::{
        background_thread_running, ensure_init, is_ready, set_test_hook, InitStep,
    };
}

/// `crate::os`: the hugetlb pool and mappings, errno.
#[cfg(not(loom))]
pub mod os {
    pub use crate::os::{
        errno, hugetlb_pool, map_hugetlb, set_errno, watch_advice, watched_advice, HugePageSize,
        HugetlbPool,
    };

    /// `os::unmap`.
    ///
    /// # Safety
    /// `addr..addr + len` is a page-aligned range hugealloc's `os` mapped (here: one the test
    /// mapped with [`map_hugetlb`]), which nothing uses any more.
    pub unsafe fn unmap(addr: *mut u8, len: usize) {
        crate::os::unmap(addr, len)
    }
}

/// `crate::prof`: the sized free's sampled-page test.
#[cfg(not(loom))]
pub mod prof {
    pub use crate::prof::{is_sampled, may_be_sampled};
}

/// `crate::registry`: the arena table and the placement rule.
pub mod registry {
    #[cfg(not(loom))]
    pub use crate::registry::{arena, arena_get, narenas, narenas_auto, MAX_ARENAS};
    pub use crate::registry::{choose, Slots};
}

/// `crate::size_class`: the class tables.
pub mod size_class {
    pub use crate::size_class::{class_of, CHUNK, SLAB_OBJS, SLAB_PAGES};
}

/// `crate::thread`: the calling thread's state.
#[cfg(not(loom))]
pub mod thread {
    pub use crate::thread::flush_thread_cache;
}

// The structures the loom models drive over local instances (`tests/loom.rs`).

/// `crate::sync` (loom builds only).
#[cfg(loom)]
pub mod sync {
    pub use crate::sync::{Mutex, Once};
}

/// `crate::pagemap` (loom builds only).
#[cfg(loom)]
pub mod pagemap {
    pub use crate::pagemap::{Leaf, LeafSource, Pagemap, TAG_EXTENT, TAG_PAGES};
}

/// `crate::chunk` (loom builds only).
#[cfg(loom)]
pub mod chunk {
    pub use crate::chunk::{ChunkSource, PageChunk, PAGE_PURGING};
}

/// `crate::base` (loom builds only).
#[cfg(loom)]
pub mod base {
    pub use crate::base::Base;
}

/// `crate::slab` (loom builds only).
#[cfg(loom)]
pub mod slab {
    pub use crate::slab::Slab;
}

/// `crate::bin` (the remote-free buffer and the bin itself in loom builds only).
pub mod bin {
    pub use crate::bin::remote_cap;
    #[cfg(loom)]
    pub use crate::bin::{for_each_group, BinState, RemoteFrees, REMOTE_STORAGE_BYTES};
}
