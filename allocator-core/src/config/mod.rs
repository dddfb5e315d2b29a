//! Configuration: the one table of options (STYLE rule 6), the parser of `key:value,key:value`
//! strings (jemalloc's `MALLOC_CONF` syntax), the five sources a configuration comes from and
//! their order, and the one-line warnings for bad input.
//!
//! Invariants: nothing here allocates (fixed buffers only) or panics, whatever the input; every
//! option is written down once, as one row of the `options!` list, from which the [`Options`]
//! field, the [`OPTION_TABLE`] row, the default in [`Options::DEFAULT`] and the code storing and
//! reading the value are all generated; every value stored in an [`Options`] lies in its row's
//! range, whatever strings were applied to it.
//!
//! Sources, later wins (see [`load`]): the build-time default `HUGEALLOC_DEFAULT_CONF`, the
//! `hugealloc_conf` symbol a C program may define, the target of the `/etc/hugealloc.conf`
//! symbolic link, the `HUGEALLOC_CONF` environment variable, and the string the Rust program
//! gives (`HugeAlloc::with_conf`).
//!
//! Here: the option list, [`Options`] and the effective options ([`options`]). Value kinds
//! and their parsers are in `parse`; pair splitting, warnings and the sources in `load`.

use crate::os;
use crate::thp::Thp;

mod load;
mod parse;

pub use load::{for_each_option, load, load_from, parse_pairs, write_options, Pair, Source};
pub use parse::{Hugetlb, Kind, Unwind, Value};
#[cfg(test)]
use {
    load::{lookup, LoadOutcome, BUILTIN_CONF},
    parse::Problem,
};

use load::{abort_bad_conf, write_bad_pair};

/// The largest `narenas` accepted (the size of the arena registry).
pub const NARENAS_MAX: usize = 256;
/// Arenas `0..ARENA_THP_MAX` may have their own `arena.<i>.thp` policy.
pub const ARENA_THP_MAX: usize = 64;
/// The capacity of the `stats_print_opts` buffer.
pub const STATS_PRINT_OPTS_MAX: usize = 32;
/// The letters `stats_print_opts` accepts (jemalloc's `malloc_stats_print` options).
pub const STATS_PRINT_LETTERS: &[u8] = b"Jgmdablxehf";
/// The longest `prof_prefix` accepted, and the bytes it may hold (a path). (heap profiling)
pub const PROF_PREFIX_MAX: usize = 200;
/// The bytes a `prof_prefix` may hold.
pub const PROF_PREFIX_CHARS: &[u8] =
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+~";
/// The largest `tcache_nslots_small_max` accepted (a bin's slots are counted in 16 bits).
pub const TCACHE_SLOTS_LIMIT: usize = 8192;

/// The largest `tcache_max` accepted.
pub const TCACHE_MAX_LIMIT: usize = 1792 << 10;
/// The largest size any size option accepts (the largest Rust allocation).
const SIZE_LIMIT: usize = isize::MAX as usize;

/// One option: the row of the table that the parser, the defaults, `confirm_conf`, the
/// documentation check and (later) `opt.*` control reads all come from.
#[derive(Clone, Copy, Debug)]
pub struct OptionRow {
    /// The key; `arena.<i>.thp` stands for `arena.0.thp` .. `arena.63.thp`.
    pub name: &'static str,
    /// The value's type and range.
    pub kind: Kind,
    /// The built-in default (for `arena.<i>.thp`, of every arena).
    pub default: Value<'static>,
    /// One line for `docs/configuration.md`.
    pub doc: &'static str,
    field: Field,
}

/// Declares every option once. Each row reads
/// `field "name": Kind { kind args } = default, "doc line";` and gives:
/// - the [`Options`] field (its type follows from the kind: `Count` and `Size` are `usize`,
///   `Millis` is `i64`, `Thp` is [`Thp`], `Bool` and `Check` are `bool`, `ArenaThp` is one
///   `Option<Thp>` per arena, `Letters` is [`Letters`], `Hugetlb` is [`Hugetlb`],
///   `ArenaHugetlb` is one `Option<Hugetlb>` per arena), documented with the doc line;
/// - the private `Field` enum (one variant per row, named as the field, numbered as the row);
/// - the row of [`OPTION_TABLE`] (name, kind, `Value::Kind(default)`, doc line);
/// - [`Options::DEFAULT`], each field set to its row's default;
/// - `Options::with` and [`Options::get`], storing and reading a [`Value`] of the row's kind.
///
/// Adding an option is adding a row (and, for a new kind, its `Kind`/`Value` variants and the
/// `@ty`/`@init`/`@store`/`@load` arms below).
macro_rules! options {
    ($(
        $field:ident $name:literal: $kind:ident $({ $($karg:ident: $kval:expr),* $(,)? })?
            = $default:expr, $doc:literal;
    )*) => {
        /// The effective options. Build one from [`Options::DEFAULT`] and [`Options::apply`]
        /// strings to it; every field always holds a value in its [`OPTION_TABLE`] row's range.
        /// Declared by the `options!` list: each field's doc is its row's doc line.
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        pub struct Options {
            $(#[doc = $doc] pub $field: options!(@ty $kind),)*
        }

        /// Which option a row sets (private: rows are the public face). Variant `i` is row `i`.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        #[repr(usize)]
        enum Field {
            $($field,)*
        }

        /// How many options there are.
        pub const OPTION_COUNT: usize = 0 $(+ options!(@one $field))*;

        const ROWS: [OptionRow; OPTION_COUNT] = [$(OptionRow {
            name: $name,
            kind: Kind::$kind $({ $($karg: $kval),* })?,
            default: Value::$kind($default),
            doc: $doc,
            field: Field::$field,
        },)*];

        impl Options {
            /// The built-in defaults, from the `default` column of [`OPTION_TABLE`] (for
            /// `arena.<i>.thp`, every arena's).
            pub const DEFAULT: Options = Options {
                $($field: options!(@init $kind, $default),)*
            };

            /// `self` with `value` stored in `field` (arena `index` for per-arena rows). A
            /// value of another kind than the field's is ignored: the parser only makes values
            /// of the row's kind, and `every_row_sets_its_own_field` tests each pairing. By
            /// value, to be a stable `const fn`.
            const fn with(mut self, field: Field, index: usize, value: Value) -> Options {
                match (field, value) {
                    $((Field::$field, Value::$kind(v)) => {
                        options!(@store $kind, self.$field, index, v);
                    })*
                    #[allow(unreachable_patterns)]
                    _ => {}
                }
                self
            }

            /// The value of `row`'s option (arena `index` for a per-arena row such as
            /// `arena.<i>.thp`; ignored otherwise).
            pub fn get(&self, row: &OptionRow, index: usize) -> Value<'_> {
                match row.field {
                    $(Field::$field => options!(@load $kind, self.$field, index),)*
                }
            }
        }
    };
    (@one $f:ident) => { 1 };

    (@ty Bool) => { bool };
    (@ty Count) => { usize };
    (@ty Size) => { usize };
    (@ty Millis) => { i64 };
    (@ty Thp) => { Thp };
    (@ty ArenaThp) => { [Option<Thp>; ARENA_THP_MAX] };
    (@ty Check) => { bool };
    (@ty Letters) => { Letters };
    (@ty Hugetlb) => { Hugetlb };
    (@ty ArenaHugetlb) => { [Option<Hugetlb>; ARENA_THP_MAX] };
    (@ty Unwind) => { Unwind };

    (@init ArenaThp, $default:expr) => { [$default; ARENA_THP_MAX] };
    (@init ArenaHugetlb, $default:expr) => { [$default; ARENA_THP_MAX] };
    (@init Letters, $default:expr) => { Letters::new($default) };
    (@init $kind:ident, $default:expr) => { $default };

    (@store ArenaThp, $place:expr, $index:ident, $v:ident) => {
        if $index < ARENA_THP_MAX {
            $place[$index] = $v;
        }
    };
    (@store ArenaHugetlb, $place:expr, $index:ident, $v:ident) => {
        if $index < ARENA_THP_MAX {
            $place[$index] = $v;
        }
    };
    (@store Letters, $place:expr, $index:ident, $v:ident) => { $place = Letters::new($v) };
    (@store $kind:ident, $place:expr, $index:ident, $v:ident) => { $place = $v };

    (@load ArenaThp, $place:expr, $index:ident) => {
        Value::ArenaThp(if $index < ARENA_THP_MAX { $place[$index] } else { None })
    };
    (@load ArenaHugetlb, $place:expr, $index:ident) => {
        Value::ArenaHugetlb(if $index < ARENA_THP_MAX { $place[$index] } else { None })
    };
    (@load Letters, $place:expr, $index:ident) => { Value::Letters($place.as_bytes()) };
    (@load $kind:ident, $place:expr, $index:ident) => { Value::$kind($place) };
}

// One row per option, in the order `confirm_conf` and the documentation list them; rustfmt
// does not format macro input, so each row stays on its two lines.
options! {
    narenas "narenas": Count { max: NARENAS_MAX } = 0,
        "Arenas threads are spread over; 0 = 4 per CPU.";
    tcache "tcache": Bool = true,
        "Per-thread caches of small and cached large blocks.";
    tcache_max "tcache_max": Size { max: TCACHE_MAX_LIMIT } = 32 << 10,
        "The largest block size thread caches keep.";
    tcache_nslots_small_max "tcache_nslots_small_max": Count { max: TCACHE_SLOTS_LIMIT } = 2048,
        "The most blocks a small class's thread-cache bin grows to while the program keeps refilling it (and at most 512 KiB of its blocks); a bin whose base (16 to 128 blocks) this value does not exceed does not grow, and 0 keeps every bin at its base.";
    thp "thp": Thp = Thp::Madvise,
        "THP policy of every arena without its own `arena.<i>.thp`.";
    thp_threshold "thp_threshold": Size { max: SIZE_LIMIT } = 4 << 20,
        "Under `madvise`, blocks of at least this size get `MADV_HUGEPAGE`.";
    metadata_thp "metadata_thp": Thp = Thp::Default,
        "THP policy of the chunks holding allocator metadata.";
    arena_thp "arena.<i>.thp": ArenaThp = None,
        "THP policy of arena i (i < 64); `inherit` follows `thp`.";
    dirty_decay_ms "dirty_decay_ms": Millis = 10_000,
        "How long freed pages stay dirty before they are purged; -1 never, 0 at once.";
    muzzy_decay_ms "muzzy_decay_ms": Millis = 0,
        "How long purged pages stay lazily freed (`MADV_FREE`); 0 skips that stage.";
    dirty_max "dirty_max": Size { max: SIZE_LIMIT } = 0,
        "The most dirty bytes an arena retains, whatever the decay time; 0 = no limit.";
    dirty_growth_pct "dirty_growth_pct": Count { max: 10_000 } = 10,
        "When a huge block needs clean or fresh chunks, purge dirty chunks past this % over the arena's peak active bytes; 0 = off.";
    thp_collapse "thp_collapse": Bool = false,
        "Re-collapse a refilled, partly purged chunk with `MADV_COLLAPSE` (Linux 6.1+).";
    thp_defer_rate "thp_defer_rate": Size { max: SIZE_LIMIT } = 512 << 20,
        "Under `thp:defer`, the most bytes the background thread collapses a second.";
    background_thread "background_thread": Bool = false,
        "Also purge from a thread of its own, so memory freed before a quiet period goes back.";
    stats_print "stats_print": Bool = false,
        "Print statistics to stderr at exit.";
    stats_print_opts "stats_print_opts":
        Letters { allowed: STATS_PRINT_LETTERS, max_len: STATS_PRINT_OPTS_MAX } = b"",
        "Sections `stats_print` leaves out (jemalloc's letters); `J` prints JSON.";
    abort_conf "abort_conf": Bool = false,
        "Abort on a bad configuration pair instead of warning.";
    confirm_conf "confirm_conf": Bool = false,
        "Print the configuration sources and the effective options at start.";
    junk "junk": Bool = false,
        "Fill new blocks with 0xa5 and freed blocks with 0x5a (debugging).";
    zero "zero": Bool = false,
        "Zero every new block, as `calloc` does.";
    check_full "check": Check = cfg!(feature = "check"),
        "`full`: invariant scans, junk on free, redzones after small blocks, double-free checks.";
    hugetlb "hugetlb": Hugetlb = Hugetlb::Off,
        "Page source of every arena without its own `arena.<i>.hugetlb`: ordinary memory or a hugetlb pool.";
    arena_hugetlb "arena.<i>.hugetlb": ArenaHugetlb = None,
        "Page source of arena i (i < 64); `inherit` follows `hugetlb`.";
    hugetlb_reserve "hugetlb_reserve": Size { max: SIZE_LIMIT } = 0,
        "Hugetlb bytes mapped and pre-faulted at start, reused and never returned; 0 = none.";
    // ---- heap profiling (`prof.rs`, `docs/profiling.md`)
    prof "prof": Bool = false,
        "Heap profiling: sample allocations and record their stacks (fixed at start).";
    prof_active "prof_active": Bool = true,
        "Whether sampling starts active (`prof.active` switches it at run time).";
    lg_prof_sample "lg_prof_sample": Count { max: 62 } = 19,
        "Sample on average one allocation every 2^N bytes (19: 512 KiB).";
    prof_prefix "prof_prefix":
        Letters { allowed: PROF_PREFIX_CHARS, max_len: PROF_PREFIX_MAX } = b"hugealloc",
        "Dump files are named `<prefix>.<pid>.<seq>.<kind>.heap` (kind: f at exit, i by interval, m on request).";
    prof_final "prof_final": Bool = false,
        "Dump a profile at exit.";
    prof_leak "prof_leak": Bool = false,
        "Report at exit the sampled memory never freed, with its largest stacks, and dump it.";
    lg_prof_interval "lg_prof_interval": Count { max: 62 } = 0,
        "Dump a profile every 2^N bytes allocated (estimated from samples); 0 = never.";
    prof_unwind "prof_unwind": Unwind = Unwind::Libgcc,
        "How stacks are taken: `libgcc` (unwind tables) or `fp` (frame pointers: cheaper, needs them).";
}

/// Every option, in the order `confirm_conf` and the documentation list them.
pub static OPTION_TABLE: [OptionRow; OPTION_COUNT] = ROWS;

/// The index of the `arena.<i>.thp` row.
const ARENA_ROW: usize = Field::arena_thp as usize;
/// The index of the `arena.<i>.hugetlb` row.
const ARENA_HUGETLB_ROW: usize = Field::arena_hugetlb as usize;

/// The per-arena rows: the key suffix after `arena.<i>` and the row (a reference, not an
/// index, so `lookup` has no bounds check to panic on).
static ARENA_ROWS: [(&[u8], &OptionRow); 2] = [
    (b".thp", &OPTION_TABLE[ARENA_ROW]),
    (b".hugetlb", &OPTION_TABLE[ARENA_HUGETLB_ROW]),
];

impl Field {
    /// Whether the row is a per-arena one (`arena.<i>.…`), stored once per arena.
    const fn per_arena(self) -> bool {
        matches!(self, Field::arena_thp | Field::arena_hugetlb)
    }
}
const _: () = {
    // Field `i` is row `i`, so a row's field indexes the table.
    let mut i = 0;
    while i < OPTION_COUNT {
        assert!(ROWS[i].field as usize == i);
        if let Kind::Letters { max_len, .. } = ROWS[i].kind {
            assert!(max_len <= LETTERS_MAX);
        }
        i += 1;
    }
    assert!(matches!(ROWS[ARENA_ROW].kind, Kind::ArenaThp));
    assert!(matches!(ROWS[ARENA_HUGETLB_ROW].kind, Kind::ArenaHugetlb));
};

/// The names of every option (`arena.<i>.thp` as such).
pub fn option_names() -> impl Iterator<Item = &'static str> {
    OPTION_TABLE.iter().map(|r| r.name)
}

/// The value of a `Letters` option: at most [`LETTERS_MAX`] bytes, kept in place (no
/// allocation).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Letters {
    /// The bytes; those past `len` are 0.
    bytes: [u8; LETTERS_MAX],
    len: usize,
}

/// The capacity of a [`Letters`] value; every `Letters` row's `max_len` is at most this (the
/// larger of `stats_print_opts`'s and `prof_prefix`'s).
pub const LETTERS_MAX: usize = if STATS_PRINT_OPTS_MAX > PROF_PREFIX_MAX {
    STATS_PRINT_OPTS_MAX
} else {
    PROF_PREFIX_MAX
};

impl Letters {
    /// The first [`LETTERS_MAX`] bytes of `v`.
    const fn new(v: &[u8]) -> Letters {
        let mut bytes = [0u8; LETTERS_MAX];
        let len = if v.len() < LETTERS_MAX {
            v.len()
        } else {
            LETTERS_MAX
        };
        let mut k = 0;
        while k < len {
            bytes[k] = v[k];
            k += 1;
        }
        Letters { bytes, len }
    }

    /// The letters.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or(&[])
    }
}

impl Options {
    /// The THP policy of arena `i`: its own `arena.<i>.thp`, else `thp`.
    pub fn thp_for_arena(&self, i: usize) -> Thp {
        match self.arena_thp.get(i) {
            Some(Some(policy)) => *policy,
            _ => self.thp,
        }
    }

    /// The page source of arena `i`: its own `arena.<i>.hugetlb`, else `hugetlb`.
    pub fn hugetlb_for_arena(&self, i: usize) -> Hugetlb {
        match self.arena_hugetlb.get(i) {
            Some(Some(source)) => *source,
            _ => self.hugetlb,
        }
    }

    /// The `stats_print_opts` letters.
    pub fn stats_print_opts(&self) -> &[u8] {
        self.stats_print_opts.as_bytes()
    }

    /// The `prof_prefix` bytes (a path prefix, without a NUL).
    pub fn prof_prefix(&self) -> &[u8] {
        self.prof_prefix.as_bytes()
    }

    /// Stores a parsed pair.
    pub fn set(&mut self, pair: &Pair) {
        *self = self.with(pair.row.field, pair.index, pair.value);
    }

    /// Applies a `key:value,key:value` string: each good pair sets its option (the last of
    /// repeated keys wins); each bad pair writes one warning line naming the pair and `source`
    /// to stderr and is skipped. Returns the number of bad pairs. When `abort_conf` is true once
    /// the whole string is applied (set by it or before it) and a pair was bad, aborts instead.
    pub fn apply(&mut self, conf: &[u8], source: Source) -> usize {
        let bad = self.apply_with(conf, source, &mut |line| os::write_stderr(line));
        if bad > 0 && self.abort_conf {
            abort_bad_conf(bad, source);
        }
        bad
    }

    /// `apply` with the warning lines (each `hugealloc: ...\n`, one call per line) given to
    /// `out` instead of stderr; never aborts.
    pub fn apply_with(&mut self, conf: &[u8], source: Source, out: &mut dyn FnMut(&[u8])) -> usize {
        let mut bad = 0;
        for item in parse_pairs(conf) {
            match item {
                Ok(pair) => self.set(&pair),
                Err(e) => {
                    bad += 1;
                    write_bad_pair(&e, source, out);
                }
            }
        }
        bad
    }
}

impl Default for Options {
    fn default() -> Options {
        Options::DEFAULT
    }
}

#[cfg(test)]
mod tests;

// ---- the effective options (written once by the global init, `init`) -----------------------

static mut OPTIONS: Options = Options::DEFAULT;

/// The effective options (valid once `init::ensure_init` has returned).
pub fn options() -> &'static Options {
    // SAFETY: OPTIONS is written only by the global init (`options_mut`), before the init's
    // `Once` is published done (Release); callers reach here after observing that (Acquire)
    // or from the init thread itself.
    unsafe { &*core::ptr::addr_of!(OPTIONS) }
}

/// The effective options, for the global init to fill in.
///
/// # Safety
/// Only the global init calls this, once, on its own thread, before it publishes that it is
/// done; no other thread reads the options before that.
pub unsafe fn options_mut() -> &'static mut Options {
    // SAFETY: per the contract, nothing else refers to OPTIONS meanwhile.
    unsafe { &mut *core::ptr::addr_of_mut!(OPTIONS) }
}
