//! Statistics. Every figure is declared once, in one of three lists below (STYLE rule 7):
//! `global_stats!` (process-wide bytes, [`Stats`]), and `figures!` lists for one arena
//! ([`ArenaFigures`]) and one small size class of an arena ([`BinFigures`]). Each list gives
//! the struct, how each figure is gathered from the arena's counters, how figures merge over
//! arenas, the names `ctl` serves (`stats.<figure>`, `stats.arenas.<i>.<figure>`,
//! `stats.arenas.<i>.bins.<j>.<figure>`) and the printing ([`print`], text or JSON).
//!
//! Figures are gathered on request from counters the arenas keep under their own locks, so
//! nothing on a hot path is shared. Nothing here allocates: text goes out through a callback,
//! formatted in small stack buffers.
//!
//! Here: the lists, [`ArenaReport`] and gathering; printing is in `print`.

use crate::arena::{Arena, ArenaSnapshot, BinStats};
use crate::os::PAGE;
use crate::size_class::{class_size, NSMALL};
use crate::sync::Ordering;

mod print;

pub use print::{
    at_init, print, print_lines, print_summary, LineBuf, PrintOpts, LINE_MAX, VERSION,
};

macro_rules! global_stats {
    ($($name:ident: $doc:literal),* $(,)?) => {
        /// Process-wide figures in bytes (meanings as jemalloc's `stats.*`).
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct Stats {
            $(#[doc = $doc] pub $name: usize,)*
        }

        impl Stats {
            /// How many figures there are.
            pub const COUNT: usize = global_stats!(@count $($name)*);

            /// Each figure's name, value and meaning, in declaration order.
            pub fn fields(&self) -> [(&'static str, usize, &'static str); Self::COUNT] {
                [$((stringify!($name), self.$name, $doc),)*]
            }
        }
    };
    (@count $($n:ident)*) => { 0 $(+ global_stats!(@one $n))* };
    (@one $n:ident) => { 1 };
}

global_stats! {
    allocated: "bytes in blocks the program holds (usable sizes), including thread-cached blocks",
    active: "bytes of pages in active slabs, page runs and huge blocks",
    metadata: "bytes mapped for allocator metadata",
    resident: "bytes likely resident: active pages, dirty retained pages and metadata",
    mapped: "bytes of chunks mapped by arenas, plus metadata",
    retained: "bytes of address space kept clean (purged or never touched) for reuse",
    dirty: "bytes of freed pages kept dirty (resident) for reuse",
    huge_advised: "bytes of chunks advised MADV_HUGEPAGE",
    nohuge_advised: "bytes of chunks advised MADV_NOHUGEPAGE",
}

/// The C type a figure is read as through `mallctl`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FigureType {
    /// `unsigned`.
    Unsigned,
    /// `uint64_t`.
    U64,
    /// `size_t`.
    Size,
}

/// The part of the printed statistics a figure belongs to (see [`PrintOpts`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Section {
    /// Always printed with its arena (or bin).
    Main,
    /// Large and huge blocks (`l` leaves them out).
    Large,
    /// THP advice (`h` leaves it out).
    Thp,
    /// Lock contention (`x` leaves it out).
    Mutex,
}

/// One figure of a list: its name under `stats.arenas.<i>.` (or `...bins.<j>.`), C type,
/// section and meaning.
#[derive(Clone, Copy, Debug)]
pub struct Figure {
    pub name: &'static str,
    pub ty: FigureType,
    pub section: Section,
    pub doc: &'static str,
}

/// Merging over arenas: counts add up.
fn sum(total: &mut u64, v: u64) {
    *total = total.saturating_add(v);
}

/// Merging over arenas: a property of the size class, the same in every arena.
fn same(total: &mut u64, v: u64) {
    *total = (*total).max(v);
}

/// Declares a list of figures: `field "name" Type Section merge = expression, "doc";` per
/// figure, where the expression reads the source argument.
macro_rules! figures {
    ($(#[$meta:meta])* $S:ident($src:ident: $Src:ty) {
        $($field:ident $name:literal $ty:ident $sec:ident $merge:ident = $get:expr, $doc:literal;)*
    }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $S {
            $(#[doc = $doc] pub $field: u64,)*
        }

        impl $S {
            /// How many figures the list has.
            pub const COUNT: usize = 0 $(+ figures!(@one $field))*;
            /// The figures, in declaration order.
            pub const FIGURES: [Figure; Self::COUNT] = [$(Figure {
                name: $name,
                ty: FigureType::$ty,
                section: Section::$sec,
                doc: $doc,
            },)*];

            /// Reads every figure from the source.
            pub fn gather($src: $Src) -> $S {
                $S { $($field: $get,)* }
            }

            /// Adds `other`'s figures (another arena's) to these.
            pub fn merge(&mut self, other: &$S) {
                $($merge(&mut self.$field, other.$field);)*
            }

            /// Every figure 0.
            pub const ZERO: $S = $S { $($field: 0,)* };

            /// The values, in the order of `FIGURES`.
            pub fn values(&self) -> [u64; Self::COUNT] {
                [$(self.$field,)*]
            }
        }
    };
    (@one $f:ident) => { 1 };
}

/// What the per-arena figures are read from.
pub struct ArenaSource<'a> {
    pub arena: &'a Arena,
    pub snap: &'a ArenaSnapshot,
}

/// What the per-bin figures are read from.
pub struct BinSource<'a> {
    pub class: usize,
    pub stats: &'a BinStats,
    pub lock_waits: u64,
}

fn pages(bytes: u64) -> u64 {
    bytes / PAGE as u64
}

figures! {
    /// One arena's figures (`stats.arenas.<i>.*`; jemalloc's names where the meaning matches).
    ArenaFigures(s: &ArenaSource) {
        nthreads "nthreads" Unsigned Main sum =
            // Relaxed: a statistic.
            s.arena.nthreads.load(Ordering::Relaxed) as u64,
            "threads bound to the arena";
        pactive "pactive" Size Main sum =
            s.snap.arena.active_pages + pages(s.snap.arena.huge_active),
            "pages in active slabs, page runs and huge blocks";
        pdirty "pdirty" Size Main sum =
            pages(s.snap.dirty_page_bytes + s.snap.arena.dirty_extent_bytes),
            "freed pages kept dirty (resident) for reuse";
        pmuzzy "pmuzzy" Size Main sum = pages(s.snap.arena.muzzy_extent_bytes),
            "freed pages given MADV_FREE and not yet purged (muzzy_decay_ms)";
        mapped "mapped" Size Main sum =
            s.snap.arena.chunks * crate::size_class::CHUNK as u64,
            "bytes of chunks the arena took (all states)";
        retained "retained" Size Main sum = s.snap.arena.clean_extent_bytes,
            "bytes of free chunks kept clean (purged or never touched) for reuse";
        chunks "chunks" Size Main sum = s.snap.arena.chunks,
            "chunks the arena took (2 MiB each)";
        page_chunks "page_chunks" Size Main sum = s.snap.arena.page_chunks,
            "chunks holding slabs and large page runs";
        purged_bytes "purged_bytes" U64 Main sum = s.snap.arena.purged_bytes,
            "bytes purged (MADV_DONTNEED) so far";
        small_allocated "small.allocated" Size Main sum = s.snap.small_allocated,
            "bytes in small blocks handed out (thread-cached ones included)";
        small_nmalloc "small.nmalloc" U64 Main sum =
            s.snap.bins.iter().map(|b| b.nmalloc).sum(),
            "small blocks handed out by the bins (to thread caches in batches)";
        small_ndalloc "small.ndalloc" U64 Main sum =
            s.snap.bins.iter().map(|b| b.nfree).sum(),
            "small blocks returned to the bins";
        large_allocated "large.allocated" Size Large sum = s.snap.arena.large_allocated,
            "bytes in large blocks (page runs)";
        large_nmalloc "large.nmalloc" U64 Large sum = s.snap.arena.large_nmalloc,
            "large blocks allocated from the arena";
        large_ndalloc "large.ndalloc" U64 Large sum = s.snap.arena.large_nfree,
            "large blocks freed to the arena";
        huge_allocated "huge.allocated" Size Large sum = s.snap.arena.huge_allocated,
            "bytes in huge blocks (runs of whole chunks)";
        huge_nmalloc "huge.nmalloc" U64 Large sum = s.snap.arena.huge_nmalloc,
            "huge blocks allocated";
        huge_ndalloc "huge.ndalloc" U64 Large sum = s.snap.arena.huge_nfree,
            "huge blocks freed";
        thp_huge_advised "thp.huge_advised" Size Thp sum = s.snap.arena.advised_huge_bytes,
            "bytes of chunks advised MADV_HUGEPAGE (hg in smaps), counted at each advice";
        thp_nohuge_advised "thp.nohuge_advised" Size Thp sum =
            s.snap.arena.advised_nohuge_bytes,
            "bytes of chunks advised MADV_NOHUGEPAGE (nh in smaps), counted at each advice";
        thp_subreleased "thp.subreleased" U64 Thp sum = s.snap.arena.subreleased_bytes,
            "bytes purged from huge-backed chunks (splitting their huge page) under dirty_max";
        thp_collapsed "thp.collapsed" U64 Thp sum = s.snap.arena.collapsed_bytes,
            "bytes of split chunks collapsed into huge pages again (thp_collapse)";
        lock_waits "lock_waits" U64 Mutex sum = s.arena.inner.contended(),
            "times the arena lock was found held";
    }
}

figures! {
    /// One small size class of an arena (`stats.arenas.<i>.bins.<j>.*`).
    BinFigures(b: &BinSource) {
        size "size" Size Main same = class_size(b.class) as u64,
            "the class's block size in bytes";
        nmalloc "nmalloc" U64 Main sum = b.stats.nmalloc,
            "blocks handed out (to thread caches in batches)";
        ndalloc "ndalloc" U64 Main sum = b.stats.nfree,
            "blocks returned";
        curregs "curregs" Size Main sum = b.stats.nmalloc.saturating_sub(b.stats.nfree),
            "blocks out (held by the program or a thread cache)";
        curslabs "curslabs" Size Main sum = b.stats.nslabs,
            "slabs the bin holds";
        nfills "nfills" U64 Main sum = b.stats.nfills,
            "thread-cache fills from the bin";
        nflushes "nflushes" U64 Main sum = b.stats.nflushes,
            "thread-cache flushes to the bin";
        lock_waits "lock_waits" U64 Mutex sum = b.lock_waits,
            "times the bin lock was found held";
    }
}

/// jemalloc's `MALLCTL_ARENAS_ALL`: as an arena index, every arena (merged figures).
pub const ARENAS_ALL: usize = 4096;

/// Everything counted for one arena, or merged over all.
#[derive(Clone, Copy, Debug)]
pub struct ArenaReport {
    pub figures: ArenaFigures,
    pub bins: [BinFigures; NSMALL],
}

impl ArenaReport {
    /// No arena: every figure 0.
    pub const EMPTY: ArenaReport = ArenaReport {
        figures: ArenaFigures::ZERO,
        bins: [BinFigures::ZERO; NSMALL],
    };

    /// Gathers `arena`'s figures (takes each of its locks briefly).
    pub fn of(arena: &Arena) -> ArenaReport {
        let snap = arena.snapshot();
        let mut r = ArenaReport::EMPTY;
        r.figures = ArenaFigures::gather(&ArenaSource { arena, snap: &snap });
        for (class, (out, stats)) in r.bins.iter_mut().zip(snap.bins.iter()).enumerate() {
            let lock_waits = arena.bins.get(class).map_or(0, |b| b.contended());
            *out = BinFigures::gather(&BinSource {
                class,
                stats,
                lock_waits,
            });
        }
        r
    }

    /// Adds another arena's report to this one.
    pub fn merge(&mut self, other: &ArenaReport) {
        self.figures.merge(&other.figures);
        for (b, o) in self.bins.iter_mut().zip(other.bins.iter()) {
            b.merge(o);
        }
    }
}

/// The report of arena `i`, or merged over every arena for [`ARENAS_ALL`]; `None` when there
/// is no such arena (callers run the init first).
pub fn arena_report(i: usize) -> Option<ArenaReport> {
    if i == ARENAS_ALL {
        let mut r = ArenaReport::EMPTY;
        for k in 0..crate::registry::narenas() {
            r.merge(&ArenaReport::of(crate::registry::arena(k)));
        }
        return Some(r);
    }
    crate::registry::arena_get(i).map(ArenaReport::of)
}

impl Stats {
    /// The process-wide figures from the arenas' merged figures and the global counters.
    fn from_merged(a: &ArenaFigures) -> Stats {
        // Relaxed: statistics.
        let metadata = crate::base::BASE.mapped_bytes.load(Ordering::Relaxed) as usize;
        let reserved = crate::chunk::SOURCE.reserved_bytes.load(Ordering::Relaxed) as usize;
        let bytes = |pages: u64| pages as usize * PAGE;
        let active = bytes(a.pactive);
        let dirty = bytes(a.pdirty);
        let mapped = a.mapped as usize;
        Stats {
            allocated: (a.small_allocated + a.large_allocated + a.huge_allocated) as usize,
            active,
            metadata,
            resident: active + dirty + metadata,
            mapped: mapped + metadata,
            retained: a.retained as usize + reserved.saturating_sub(mapped),
            dirty,
            huge_advised: a.thp_huge_advised as usize,
            nohuge_advised: a.thp_nohuge_advised as usize,
        }
    }
}

/// Gathers the process-wide figures (each field's meaning is on [`Stats`]; all are bytes; of the arenas
/// that exist: callers run the init first).
///
/// ```
/// let s = hugealloc::stats();
/// assert!(s.resident >= s.active && s.mapped >= s.metadata);
/// println!("allocated {} B, resident {} B, mapped {} B", s.allocated, s.resident, s.mapped);
/// ```
pub fn stats() -> Stats {
    let merged = arena_report(ARENAS_ALL).unwrap_or(ArenaReport::EMPTY);
    Stats::from_merged(&merged.figures)
}
