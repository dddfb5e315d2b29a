//! Statistics. Every figure is declared once, in one of three lists (STYLE rule 7):
//! `global_stats!` below (process-wide bytes, [`Stats`]), `arena_state::arena_figures!` (one
//! arena, [`ArenaFigures`]) and `bin::bin_figures!` (one small size class of an arena,
//! [`BinFigures`]). The last two also declare the counters the arenas and bins keep
//! (`ArenaStats`, `BinStats`, built by `bin::counters!`), so a counter and its figure are one
//! row; `figures!` below builds from each the figure struct, how each figure is gathered from
//! the counters, how figures merge over arenas, the names `ctl` serves (`stats.<figure>`,
//! `stats.arenas.<i>.<figure>`, `stats.arenas.<i>.bins.<j>.<figure>`) and the printing
//! ([`print`], text or JSON).
//!
//! Figures are gathered on request from counters the arenas keep under their own locks, so
//! nothing on a hot path is shared. Nothing here allocates: text goes out through a callback,
//! formatted in small stack buffers.
//!
//! Here: `global_stats!`, `figures!`, [`ArenaReport`] and gathering; printing is in `print`.

use crate::arena::{Arena, ArenaSnapshot, BinStats};
use crate::os::PAGE;
use crate::size_class::{class_size, CHUNK, NSMALL};
use crate::sync::Ordering;

mod print;

pub use print::{at_init, print_lines, PrintOpts, LINE_MAX};

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
    metadata_thp_queued: "bytes of metadata chunks queued for a deferred collapse (metadata_thp:defer)",
    metadata_thp_collapsed: "bytes of metadata chunks collapsed into huge pages (metadata_thp:defer)",
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

/// Builds a figure struct from a list of counters and figures: `arena_state::arena_figures!`
/// or `bin::bin_figures!` (the row forms are `bin::counters!`'s), which also gives the counter
/// struct the owner updates, so a figure and its counter are declared once, by one row. The
/// header `Name(src: &Source, counters: expression)` names the source figures are read from
/// and where its counters are: a `count` row's figure is the counter `expression.field`, a
/// `figure` row's is `src.field()`, a method of the source (a compile error until written).
/// Gives the struct, `FIGURES` (name, C type, section, doc: what `ctl` and the printing read),
/// `gather`, `merge`, `ZERO` and `values`.
macro_rules! figures {
    (@rows $h:tt $src:ident $c:tt [$($acc:tt)*] count $field:ident, $doc:literal; $($rest:tt)*) => {
        figures!(@rows $h $src $c [$($acc)*] $($rest)*);
    };
    (@rows $h:tt $src:ident $c:tt [$($acc:tt)*]
        count $field:ident as $shown:ident $name:literal $ty:ident $sec:ident $merge:ident,
        $doc:literal; $($rest:tt)*) => {
        figures!(@rows $h $src $c
            [$($acc)* ($shown $name $ty $sec $merge [$c.$field] $doc)] $($rest)*);
    };
    (@rows $h:tt $src:ident $c:tt [$($acc:tt)*]
        count $field:ident $name:literal $ty:ident $sec:ident $merge:ident, $doc:literal;
        $($rest:tt)*) => {
        figures!(@rows $h $src $c
            [$($acc)* ($field $name $ty $sec $merge [$c.$field] $doc)] $($rest)*);
    };
    (@rows $h:tt $src:ident $c:tt [$($acc:tt)*]
        figure $field:ident $name:literal $ty:ident $sec:ident $merge:ident, $doc:literal;
        $($rest:tt)*) => {
        figures!(@rows $h $src $c
            [$($acc)* ($field $name $ty $sec $merge [$src.$field()] $doc)] $($rest)*);
    };
    (@rows [$(#[$meta:meta])* $S:ident [$Src:ty]] $src:ident $c:tt
        [$(($field:ident $name:literal $ty:ident $sec:ident $merge:ident [$($get:tt)*]
            $doc:literal))*]) => {
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
                $S { $($field: $($get)*,)* }
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
    ($(#[$meta:meta])* $S:ident($src:ident: $Src:ty, counters: $c:expr) { $($rows:tt)* }) => {
        figures!(@rows [$(#[$meta])* $S [$Src]] $src ($c) [] $($rows)*);
    };
    (@one $f:ident) => { 1 };
}

/// What the per-arena figures are read from.
pub struct ArenaSource<'a> {
    pub arena: &'a Arena,
    pub snap: &'a ArenaSnapshot,
}

/// The per-arena figures with no counter of their own (`figure` rows of `arena_figures!`).
impl ArenaSource<'_> {
    fn nthreads(&self) -> u64 {
        // Relaxed: a statistic.
        self.arena.nthreads.load(Ordering::Relaxed) as u64
    }

    fn pactive(&self) -> u64 {
        self.snap.arena.active_pages + pages(self.snap.arena.huge_active)
    }

    fn pdirty(&self) -> u64 {
        pages(self.snap.dirty_page_bytes + self.snap.arena.dirty_extent_bytes)
    }

    fn pmuzzy(&self) -> u64 {
        pages(self.snap.arena.muzzy_extent_bytes)
    }

    fn mapped(&self) -> u64 {
        self.snap.arena.chunks * crate::size_class::CHUNK as u64
    }

    fn small_allocated(&self) -> u64 {
        self.snap.small_allocated
    }

    fn small_nmalloc(&self) -> u64 {
        self.snap.bins.iter().map(|b| b.nmalloc).sum()
    }

    fn small_ndalloc(&self) -> u64 {
        self.snap.bins.iter().map(|b| b.nfree).sum()
    }

    fn hugetlb_active(&self) -> u64 {
        let a = &self.snap.arena;
        a.hugetlb_bytes.saturating_sub(a.hugetlb_free_bytes)
    }

    fn lock_waits(&self) -> u64 {
        self.arena.inner.contended()
    }
}

/// What the per-bin figures are read from.
pub struct BinSource<'a> {
    pub class: usize,
    pub stats: &'a BinStats,
    /// Times the bin lock was found held.
    pub contended: u64,
}

/// The per-bin figures with no counter of their own (`figure` rows of `bin_figures!`).
impl BinSource<'_> {
    fn size(&self) -> u64 {
        class_size(self.class) as u64
    }

    fn curregs(&self) -> u64 {
        self.stats.nmalloc.saturating_sub(self.stats.nfree)
    }

    fn lock_waits(&self) -> u64 {
        self.contended
    }
}

fn pages(bytes: u64) -> u64 {
    bytes / PAGE as u64
}

crate::arena_state::arena_figures!(figures! {
    /// One arena's figures (`stats.arenas.<i>.*`; jemalloc's names where the meaning matches).
    ArenaFigures(s: &ArenaSource, counters: s.snap.arena)
});

crate::bin::bin_figures!(figures! {
    /// One small size class of an arena (`stats.arenas.<i>.bins.<j>.*`).
    BinFigures(b: &BinSource, counters: b.stats)
});

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
            let contended = arena.bins.get(class).map_or(0, |b| b.contended());
            *out = BinFigures::gather(&BinSource {
                class,
                stats,
                contended,
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
        let base = &crate::base::BASE;
        let metadata = base.mapped_bytes.load(Ordering::Relaxed) as usize;
        let chunks = |n: &crate::sync::AtomicU64| n.load(Ordering::Relaxed) as usize * CHUNK;
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
            metadata_thp_queued: chunks(&base.queued_chunks),
            metadata_thp_collapsed: chunks(&base.collapsed_chunks),
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
