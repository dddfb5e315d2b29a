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

use crate::arena::{Arena, ArenaSnapshot, BinStats};
use crate::config::{self, Options, Value};
use crate::os::PAGE;
use crate::size_class::{class_size, NSMALL};
use crate::sync::Ordering;

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
        hugetlb_mapped "hugetlb.mapped" Size Thp sum = s.snap.arena.hugetlb_bytes,
            "bytes of hugetlb chunks the arena holds (explicit huge pages, reserve included)";
        hugetlb_active "hugetlb.active" Size Thp sum =
            s.snap.arena.hugetlb_bytes - s.snap.arena.hugetlb_free_bytes,
            "of those, bytes in use (huge blocks and page chunks)";
        hugetlb_reserved "hugetlb.reserved" Size Thp sum = s.snap.arena.hugetlb_reserve_bytes,
            "of those, bytes of hugetlb_reserve chunks";
        hugetlb_fallbacks "hugetlb.fallbacks" U64 Thp sum = s.snap.arena.hugetlb_fallbacks,
            "requests for hugetlb chunks served from ordinary memory (pool empty, short or absent)";
        hugetlb_returned "hugetlb.returned" U64 Thp sum = s.snap.arena.hugetlb_returned_bytes,
            "hugetlb bytes given back whole (pages to the pool, reserve chunks to the reserve)";
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

// ---- printing ------------------------------------------------------------------------------

/// What [`print`] prints, from `stats_print_opts` letters (jemalloc's `malloc_stats_print`
/// options): `J` JSON instead of text; each of these leaves a part out: `g` the general part
/// (version, options, process-wide figures), `m` the figures merged over arenas, `a` each
/// arena's, `b` the bins (small size classes), `l` the large and huge figures, `x` lock
/// contention, `h` THP advice. `d` (destroyed arenas) and `e` (extents) are accepted and change
/// nothing: hugealloc destroys no arena and prints no extent figures. `f` (full) leaves
/// nothing out: at exit it asks for this dump instead of the summary ([`print_summary`]).
/// Other bytes are ignored.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PrintOpts {
    pub json: bool,
    pub general: bool,
    pub merged: bool,
    pub arenas: bool,
    pub bins: bool,
    pub large: bool,
    pub mutex: bool,
    pub thp: bool,
}

impl PrintOpts {
    /// Everything, as text.
    pub const ALL: PrintOpts = PrintOpts {
        json: false,
        general: true,
        merged: true,
        arenas: true,
        bins: true,
        large: true,
        mutex: true,
        thp: true,
    };

    /// Reads `stats_print_opts` letters.
    pub fn parse(letters: &[u8]) -> PrintOpts {
        let mut o = PrintOpts::ALL;
        for &c in letters {
            match c {
                b'J' => o.json = true,
                b'g' => o.general = false,
                b'm' => o.merged = false,
                b'a' => o.arenas = false,
                b'b' => o.bins = false,
                b'l' => o.large = false,
                b'x' => o.mutex = false,
                b'h' => o.thp = false,
                _ => {}
            }
        }
        o
    }

    fn shows(&self, section: Section) -> bool {
        match section {
            Section::Main => true,
            Section::Large => self.large,
            Section::Thp => self.thp,
            Section::Mutex => self.mutex,
        }
    }
}

/// hugealloc's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Text out through a callback, with number formatting.
struct Out<'a> {
    f: &'a mut dyn FnMut(&[u8]),
}

impl Out<'_> {
    fn b(&mut self, bytes: &[u8]) {
        (self.f)(bytes);
    }

    fn s(&mut self, s: &str) {
        (self.f)(s.as_bytes());
    }

    fn dec(&mut self, v: u64) {
        let mut tmp = [0u8; 20];
        (self.f)(crate::diag::dec_digits(v, &mut tmp));
    }

    /// `v` right-aligned in `width` columns.
    fn dec_padded(&mut self, v: u64, width: usize) {
        let mut tmp = [0u8; 20];
        let digits = crate::diag::dec_digits(v, &mut tmp);
        for _ in digits.len()..width {
            (self.f)(b" ");
        }
        (self.f)(digits);
    }

    fn signed(&mut self, v: i64) {
        if v < 0 {
            self.s("-");
        }
        self.dec(v.unsigned_abs());
    }

    /// A JSON string: quotes, with `"`, `\` and control bytes escaped.
    fn json_str(&mut self, bytes: &[u8]) {
        self.s("\"");
        for &c in bytes {
            match c {
                b'"' | b'\\' => self.b(&[b'\\', c]),
                0..=0x1f | 0x7f.. => {
                    let hex = b"0123456789abcdef";
                    self.b(b"\\u00");
                    self.b(&[hex[usize::from(c >> 4)], hex[usize::from(c & 15)]]);
                }
                _ => self.b(&[c]),
            }
        }
        self.s("\"");
    }

    /// `,` before every member of a JSON object but the first.
    fn sep(&mut self, first: &mut bool) {
        if !*first {
            self.s(",");
        }
        *first = false;
    }

    /// `"key":`.
    fn key(&mut self, first: &mut bool, key: &[u8]) {
        self.sep(first);
        self.json_str(key);
        self.s(":");
    }

    /// `hugealloc: ` and the `stats.arenas.<i>.` prefix of an arena's text lines.
    fn arena_prefix(&mut self, i: usize) {
        self.s("hugealloc: stats.arenas.");
        self.dec(i as u64);
        self.s(".");
    }
}

/// An option's value as JSON: numbers as numbers, policies and letters as strings.
fn json_value(out: &mut Out, v: Value) {
    match v {
        Value::Bool(b) => out.s(if b { "true" } else { "false" }),
        Value::Count(n) | Value::Size(n) => out.dec(n as u64),
        Value::Millis(n) => out.signed(n),
        Value::Thp(t) | Value::ArenaThp(Some(t)) => out.json_str(t.name().as_bytes()),
        Value::ArenaThp(None) | Value::ArenaHugetlb(None) => out.json_str(b"inherit"),
        Value::Hugetlb(h) | Value::ArenaHugetlb(Some(h)) => out.json_str(h.name().as_bytes()),
        Value::Letters(s) => out.json_str(s),
        Value::Check(full) => out.json_str(if full { b"full" } else { b"cheap" }),
    }
}

/// Whether an arena is worth printing: it has chunks or threads.
fn in_use(r: &ArenaReport) -> bool {
    r.figures.mapped > 0 || r.figures.nthreads > 0
}

/// Writes the statistics `opts` selects through `out`, in pieces (see [`LineBuf`] for whole
/// lines). Text is one `hugealloc: <ctl name>: <value>` line per figure, and a table of the
/// bins in use per arena; JSON is one object, `{"hugealloc":{"version":...,"stats":{...},
/// "opt":{...},"arenas":{"merged":{...},"0":{...}}}}`. Arenas with neither chunks nor threads,
/// and bins that never handed out a block, are left out.
pub fn print(opts: PrintOpts, options: &Options, out: &mut dyn FnMut(&[u8])) {
    let out = &mut Out { f: out };
    let merged = arena_report(ARENAS_ALL).unwrap_or(ArenaReport::EMPTY);
    if opts.json {
        print_json(opts, options, &merged, out);
    } else {
        print_text(opts, options, &merged, out);
    }
}

fn print_text(opts: PrintOpts, options: &Options, merged: &ArenaReport, out: &mut Out) {
    if opts.general {
        out.s("hugealloc: version: ");
        out.s(VERSION);
        out.s("\n");
        config::for_each_option(options, &mut |name, value| {
            out.s("hugealloc: opt.");
            out.b(name);
            out.s(": ");
            value.write(&mut |b| out.b(b));
            out.s("\n");
        });
        for (name, value, _) in Stats::from_merged(&merged.figures).fields() {
            out.s("hugealloc: stats.");
            out.s(name);
            out.s(": ");
            out.dec(value as u64);
            out.s("\n");
        }
    }
    if opts.merged {
        print_arena_text(opts, ARENAS_ALL, merged, out);
    }
    if opts.arenas {
        for i in 0..crate::registry::narenas() {
            let r = ArenaReport::of(crate::registry::arena(i));
            if !in_use(&r) {
                continue;
            }
            let a = crate::registry::arena(i);
            out.s("hugealloc: arena.");
            out.dec(i as u64);
            out.s(".thp: ");
            out.s(a.thp().name());
            out.s("\nhugealloc: arena.");
            out.dec(i as u64);
            out.s(".dirty_decay_ms: ");
            out.signed(a.dirty_decay_ms());
            out.s("\n");
            print_arena_text(opts, i, &r, out);
        }
    }
}

/// Column width of the bin tables.
const COLUMN: usize = 11;

fn print_arena_text(opts: PrintOpts, i: usize, r: &ArenaReport, out: &mut Out) {
    for (f, v) in ArenaFigures::FIGURES.iter().zip(r.figures.values()) {
        if opts.shows(f.section) {
            out.arena_prefix(i);
            out.s(f.name);
            out.s(": ");
            out.dec(v);
            out.s("\n");
        }
    }
    if !opts.bins {
        return;
    }
    out.arena_prefix(i);
    out.s("bins.<j>:");
    for f in BinFigures::FIGURES.iter().filter(|f| opts.shows(f.section)) {
        for _ in f.name.len()..COLUMN {
            out.s(" ");
        }
        out.s(" ");
        out.s(f.name);
    }
    out.s("\n");
    for (j, bin) in r.bins.iter().enumerate().filter(|(_, b)| b.nmalloc > 0) {
        out.arena_prefix(i);
        out.s("bins.");
        out.dec(j as u64);
        out.s(":");
        // Align the rows under the header (`<j>` is three columns).
        let digits = if j < 10 { 1 } else { 2 };
        for _ in digits..3 {
            out.s(" ");
        }
        for (f, v) in BinFigures::FIGURES.iter().zip(bin.values()) {
            if opts.shows(f.section) {
                out.s(" ");
                out.dec_padded(v, COLUMN);
            }
        }
        out.s("\n");
    }
}

fn print_json(opts: PrintOpts, options: &Options, merged: &ArenaReport, out: &mut Out) {
    out.s("{\"hugealloc\":{\"version\":");
    out.json_str(VERSION.as_bytes());
    if opts.general {
        out.s(",\"stats\":{");
        let mut first = true;
        for (name, value, _) in Stats::from_merged(&merged.figures).fields() {
            out.key(&mut first, name.as_bytes());
            out.dec(value as u64);
        }
        out.s("},\n\"opt\":{");
        let mut first = true;
        config::for_each_option(options, &mut |name, value| {
            out.key(&mut first, name);
            json_value(out, value);
        });
        out.s("}");
    }
    if opts.merged || opts.arenas {
        out.s(",\n\"arenas\":{");
        let mut first = true;
        if opts.merged {
            out.key(&mut first, b"merged");
            print_arena_json(opts, None, merged, out);
        }
        if opts.arenas {
            for i in 0..crate::registry::narenas() {
                let r = ArenaReport::of(crate::registry::arena(i));
                if !in_use(&r) {
                    continue;
                }
                out.s("\n");
                let mut tmp = [0u8; 20];
                out.key(&mut first, crate::diag::dec_digits(i as u64, &mut tmp));
                print_arena_json(opts, Some(crate::registry::arena(i)), &r, out);
            }
        }
        out.s("}");
    }
    out.s("}}\n");
}

fn print_arena_json(opts: PrintOpts, arena: Option<&Arena>, r: &ArenaReport, out: &mut Out) {
    out.s("{");
    let mut first = true;
    if let Some(a) = arena {
        out.key(&mut first, b"thp");
        out.json_str(a.thp().name().as_bytes());
        out.key(&mut first, b"dirty_decay_ms");
        out.signed(a.dirty_decay_ms());
    }
    for (f, v) in ArenaFigures::FIGURES.iter().zip(r.figures.values()) {
        if opts.shows(f.section) {
            out.key(&mut first, f.name.as_bytes());
            out.dec(v);
        }
    }
    if opts.bins {
        out.key(&mut first, b"bins");
        out.s("{");
        let mut first_bin = true;
        for (j, bin) in r.bins.iter().enumerate().filter(|(_, b)| b.nmalloc > 0) {
            let mut tmp = [0u8; 20];
            out.key(&mut first_bin, crate::diag::dec_digits(j as u64, &mut tmp));
            out.s("{");
            let mut first_figure = true;
            for (f, v) in BinFigures::FIGURES.iter().zip(bin.values()) {
                if opts.shows(f.section) {
                    out.key(&mut first_figure, f.name.as_bytes());
                    out.dec(v);
                }
            }
            out.s("}");
        }
        out.s("}");
    }
    out.s("}");
}

/// The longest piece [`LineBuf`] hands on at once.
pub const LINE_MAX: usize = 512;

/// Collects text into lines and hands each whole line, newline included, to a callback (a
/// line longer than [`LINE_MAX`] goes in pieces). One call per line keeps processes sharing
/// stderr from interleaving inside a line.
pub struct LineBuf<'a> {
    out: &'a mut dyn FnMut(&[u8]),
    buf: [u8; LINE_MAX],
    len: usize,
}

impl<'a> LineBuf<'a> {
    pub fn new(out: &'a mut dyn FnMut(&[u8])) -> LineBuf<'a> {
        LineBuf {
            out,
            buf: [0; LINE_MAX],
            len: 0,
        }
    }

    /// Appends text; hands on each line it completes.
    pub fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if let Some(slot) = self.buf.get_mut(self.len) {
                *slot = b;
                self.len += 1;
            }
            if b == b'\n' || self.len >= LINE_MAX {
                self.flush();
            }
        }
    }

    /// Hands on what is buffered, if anything.
    pub fn flush(&mut self) {
        if self.len > 0 {
            (self.out)(self.buf.get(..self.len).unwrap_or(&[]));
            self.len = 0;
        }
    }
}

/// [`print`] through a [`LineBuf`]: `out` gets whole lines.
pub fn print_lines(opts: PrintOpts, options: &Options, out: &mut dyn FnMut(&[u8])) {
    let mut lines = LineBuf::new(out);
    print(opts, options, &mut |b| lines.push(b));
    lines.flush();
}

// ---- the summary at exit -----------------------------------------------------------------

/// How many bins the summary lists.
const SUMMARY_BINS: usize = 5;

/// `bytes` as `34.1 MiB` (one decimal, binary units), right-aligned in 10 columns.
fn human(out: &mut Out, bytes: u64) {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut unit = 0;
    let mut scaled = bytes;
    while scaled >= 1024 * 1024 && unit + 2 < UNITS.len() {
        scaled /= 1024;
        unit += 1;
    }
    // `scaled` < 1 MiB of the current unit: print it in the next unit with one decimal.
    let (whole, tenths, name) = if scaled < 1024 {
        (scaled, None, UNITS[unit])
    } else {
        let tenths = (scaled * 10 + 512) / 1024;
        (tenths / 10, Some(tenths % 10), UNITS[unit + 1])
    };
    let mut tmp = [0u8; 20];
    let digits = crate::diag::dec_digits(whole, &mut tmp).len();
    let len = digits + if tenths.is_some() { 2 } else { 0 } + 1 + name.len();
    for _ in len..10 {
        out.s(" ");
    }
    out.dec(whole);
    if let Some(t) = tenths {
        out.s(".");
        out.dec(t);
    }
    out.s(" ");
    out.s(name);
}

/// The short statistics printed at exit by default: the process-wide bytes that say how much
/// memory the program uses and where it went, bytes on huge pages, and the small size classes
/// holding the most bytes. Every line starts `hugealloc: `; a figure's line starts with its
/// `ctl` name (`hugealloc: stats.allocated: `). `docs/stats.md` explains each line.
pub fn print_summary(out: &mut dyn FnMut(&[u8])) {
    let out = &mut Out { f: out };
    let merged = arena_report(ARENAS_ALL).unwrap_or(ArenaReport::EMPTY);
    let s = Stats::from_merged(&merged.figures);
    out.s("hugealloc: statistics of process ");
    out.dec(u64::from(crate::os::pid()));
    out.s(" at exit (every figure: stats_print_opts:f; meanings: docs/stats.md)\n");
    let huge_backed: u64 = (0..crate::registry::narenas())
        .filter(|&i| in_use(&ArenaReport::of(crate::registry::arena(i))))
        .map(|i| crate::arena::huge_backed_bytes(i as u32))
        .sum();
    let rows: [(&str, u64, &str); 8] = [
        (
            "stats.allocated",
            s.allocated as u64,
            "in blocks the program holds",
        ),
        (
            "stats.active",
            s.active as u64,
            "in pages holding those blocks",
        ),
        (
            "stats.dirty",
            s.dirty as u64,
            "freed pages kept in RAM for reuse",
        ),
        (
            "stats.resident",
            s.resident as u64,
            "likely in RAM: active + dirty + metadata",
        ),
        (
            "stats.mapped",
            s.mapped as u64,
            "mapped by hugealloc (chunks + metadata)",
        ),
        (
            "stats.retained",
            s.retained as u64,
            "address space kept, not in RAM",
        ),
        (
            "stats.metadata",
            s.metadata as u64,
            "hugealloc's own structures",
        ),
        (
            "huge_backed",
            huge_backed,
            "on 2 MiB huge pages now (AnonHugePages)",
        ),
    ];
    for (name, bytes, meaning) in rows {
        out.s("hugealloc: ");
        out.s(name);
        out.s(": ");
        for _ in name.len()..16 {
            out.s(" ");
        }
        out.dec_padded(bytes, 13);
        out.s(" ");
        human(out, bytes);
        out.s("  ");
        out.s(meaning);
        out.s("\n");
    }
    // The bins holding the most bytes now, by repeated selection (no allocation, 5 passes).
    let held = |j: usize| merged.bins[j].curregs * merged.bins[j].size;
    let mut shown = [usize::MAX; SUMMARY_BINS];
    for k in 0..SUMMARY_BINS {
        let best = (0..NSMALL)
            .filter(|j| !shown.contains(j) && merged.bins[*j].nmalloc > 0)
            .max_by_key(|&j| (held(j), merged.bins[j].nmalloc));
        let Some(j) = best else { break };
        shown[k] = j;
        if k == 0 {
            out.s("hugealloc: top bins:     size    blocks out     bytes out     slabs       nmalloc\n");
        }
        let b = &merged.bins[j];
        out.s("hugealloc: bins.");
        out.dec(j as u64);
        for _ in if j < 10 { 1 } else { 2 }..3 {
            out.s(" ");
        }
        out.dec_padded(b.size, 10);
        out.dec_padded(b.curregs, 14);
        out.dec_padded(held(j), 14);
        out.dec_padded(b.curslabs, 10);
        out.dec_padded(b.nmalloc, 14);
        out.s("\n");
    }
}

/// The descriptor stats are printed to at exit.
static STATS_FD: crate::sync::AtomicI32 = crate::sync::AtomicI32::new(2);

/// Hooks printing at exit when `stats_print:true`: the summary ([`print_summary`]), or where
/// `stats_print_opts` has letters, the dump ([`print`]) with the parts they select (`f`: all).
/// Every process that loads the library and has `stats_print:true` prints its own (each has
/// its own heap); the summary's first line names the process.
pub fn at_init(opts: &Options) {
    if opts.stats_print {
        // Programs (coreutils among them) close stderr in their own exit handlers, which run
        // before ours: print to a duplicate taken now.
        STATS_FD.store(crate::os::dup_stderr(), Ordering::Relaxed);
        extern "C" fn print_at_exit() {
            // Relaxed: written once at init, before this handler can run.
            let fd = STATS_FD.load(Ordering::Relaxed);
            let options = crate::config::options();
            let letters = options.stats_print_opts();
            if letters.is_empty() {
                let mut write = |line: &[u8]| crate::os::write_fd(fd, line);
                let mut lines = LineBuf::new(&mut write);
                print_summary(&mut |b| lines.push(b));
                lines.flush();
            } else {
                print_lines(PrintOpts::parse(letters), options, &mut |line| {
                    crate::os::write_fd(fd, line)
                });
            }
        }
        // atexit may allocate, which the init allows.
        if !crate::os::at_exit(print_at_exit) {
            crate::diag::warn("atexit failed: stats_print will print nothing at exit");
        }
    }
}
