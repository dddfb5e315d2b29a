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

use crate::diag::Msg;
use crate::os::{self, HugePageSize};
use crate::thp::Thp;

/// The largest `narenas` accepted (the size of the arena registry).
pub const NARENAS_MAX: usize = 256;
/// Arenas `0..ARENA_THP_MAX` may have their own `arena.<i>.thp` policy.
pub const ARENA_THP_MAX: usize = 64;
/// The capacity of the `stats_print_opts` buffer.
pub const STATS_PRINT_OPTS_MAX: usize = 32;
/// The letters `stats_print_opts` accepts (jemalloc's `malloc_stats_print` options).
pub const STATS_PRINT_LETTERS: &[u8] = b"Jgmdablxehf";
/// The largest `tcache_max` accepted.
pub const TCACHE_MAX_LIMIT: usize = 1792 << 10;
/// The largest size any size option accepts (the largest Rust allocation).
const SIZE_LIMIT: usize = isize::MAX as usize;

/// The configuration compiled in with `HUGEALLOC_DEFAULT_CONF="..." cargo build`: rustc records
/// the variable in the crate's dep-info, so cargo rebuilds hugealloc when it changes.
pub const BUILTIN_CONF: Option<&str> = option_env!("HUGEALLOC_DEFAULT_CONF");
/// The symbolic link whose target is read as a configuration string (not its contents).
pub const ETC_CONF_PATH: &[u8] = b"/etc/hugealloc.conf\0";
/// The environment variable read with `secure_getenv`.
pub const ENV_CONF_NAME: &[u8] = b"HUGEALLOC_CONF\0";
/// The buffer for the `/etc/hugealloc.conf` link target (Linux's `PATH_MAX`); a target that
/// fills it is ignored with a warning.
const ETC_LINK_MAX: usize = 4096;
/// How many bytes of a bad pair (after escaping) a warning shows, so a line stays well within
/// the 512-byte message buffer.
const PAIR_SHOWN_MAX: usize = 120;
/// How many bytes of a whole configuration string `confirm_conf` shows per source.
const CONF_SHOWN_MAX: usize = 300;

/// The type of an option's value and its range.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// `true` or `false` (`1` and `0` are accepted too).
    Bool,
    /// A decimal number in `0..=max`.
    Count { max: usize },
    /// Bytes in `0..=max`, with an optional binary suffix (`64k`, `2MiB`, `1G`).
    Size { max: usize },
    /// Milliseconds: -1 (never) or `0..=i64::MAX`.
    Millis,
    /// A THP policy: `always`, `madvise`, `never`, `default`.
    Thp,
    /// A THP policy or `inherit` (follow `thp`), for `arena.<i>.thp`.
    ArenaThp,
    /// The misuse checks: `cheap` (always on) or `full`.
    Check,
    /// A page source: `off`, `2M`, `1G`.
    Hugetlb,
    /// A page source or `inherit` (follow `hugetlb`), for `arena.<i>.hugetlb`.
    ArenaHugetlb,
    /// At most `max_len` bytes, each one of `allowed`; may be empty.
    Letters {
        allowed: &'static [u8],
        max_len: usize,
    },
}

/// A parsed option value. `Letters` borrows from the parsed string or the `Options`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Value<'a> {
    Bool(bool),
    Count(usize),
    Size(usize),
    Millis(i64),
    Thp(Thp),
    ArenaThp(Option<Thp>),
    Letters(&'a [u8]),
    /// `check`: whether the full checks are on.
    Check(bool),
    Hugetlb(Hugetlb),
    ArenaHugetlb(Option<Hugetlb>),
}

/// An arena's page source (`hugetlb:off|2M|1G`): ordinary memory under the arena's THP policy,
/// or the kernel's hugetlb pool of 2 MiB or 1 GiB pages (see `hugetlb.rs`, `docs/hugetlb.md`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Hugetlb {
    Off,
    Pages2M,
    Pages1G,
}

impl Hugetlb {
    /// Reads `off`, `2M` or `1G` (the letter in either case).
    pub fn parse(text: &[u8]) -> Option<Hugetlb> {
        if text == b"off" {
            Some(Hugetlb::Off)
        } else if text.eq_ignore_ascii_case(b"2M") {
            Some(Hugetlb::Pages2M)
        } else if text.eq_ignore_ascii_case(b"1G") {
            Some(Hugetlb::Pages1G)
        } else {
            None
        }
    }

    /// The name the parser reads back.
    pub const fn name(self) -> &'static str {
        match self {
            Hugetlb::Off => "off",
            Hugetlb::Pages2M => "2M",
            Hugetlb::Pages1G => "1G",
        }
    }

    /// The hugetlb page size, `None` for `off`.
    pub const fn page_size(self) -> Option<HugePageSize> {
        match self {
            Hugetlb::Off => None,
            Hugetlb::Pages2M => Some(HugePageSize::Size2M),
            Hugetlb::Pages1G => Some(HugePageSize::Size1G),
        }
    }
}

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
        "`full`: invariant scans, junk on free, redzones after small blocks (no thread cache).";
    hugetlb "hugetlb": Hugetlb = Hugetlb::Off,
        "Page source of every arena without its own `arena.<i>.hugetlb`: ordinary memory or a hugetlb pool.";
    arena_hugetlb "arena.<i>.hugetlb": ArenaHugetlb = None,
        "Page source of arena i (i < 64); `inherit` follows `hugetlb`.";
    hugetlb_reserve "hugetlb_reserve": Size { max: SIZE_LIMIT } = 0,
        "Hugetlb bytes mapped and pre-faulted at start, reused and never returned; 0 = none.";
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

/// The capacity of a [`Letters`] value; every `Letters` row's `max_len` is at most this.
pub const LETTERS_MAX: usize = STATS_PRINT_OPTS_MAX;

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

/// Where a configuration string came from, in precedence order (later wins).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Source {
    /// The build-time default, `HUGEALLOC_DEFAULT_CONF` at `cargo build`.
    Builtin,
    /// The `const char *hugealloc_conf` a C program defines.
    Symbol,
    /// The target of the `/etc/hugealloc.conf` symbolic link.
    EtcFile,
    /// The `HUGEALLOC_CONF` environment variable.
    Env,
    /// The string the Rust program gives (`HugeAlloc::with_conf`).
    Api,
}

impl Source {
    /// Every source, in the order `load` applies them.
    pub const ALL: [Source; 5] = [
        Source::Builtin,
        Source::Symbol,
        Source::EtcFile,
        Source::Env,
        Source::Api,
    ];

    /// The name warnings give the source.
    pub fn name(self) -> &'static str {
        match self {
            Source::Builtin => "HUGEALLOC_DEFAULT_CONF (built in)",
            Source::Symbol => "hugealloc_conf",
            Source::EtcFile => "/etc/hugealloc.conf",
            Source::Env => "HUGEALLOC_CONF",
            Source::Api => "HugeAlloc::with_conf",
        }
    }
}

/// What is wrong with a bad pair.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Problem {
    /// Nothing between two commas, or a leading comma.
    EmptyPair,
    /// A comma ends the string.
    TrailingComma,
    /// No `:` in the pair.
    MissingColon,
    /// Nothing before the `:`.
    EmptyKey,
    /// No option has that name.
    UnknownKey,
    /// `arena.<i>.thp` with `i` of 64 or more.
    ArenaIndex,
    /// Nothing after the `:` (where the empty string is not a value of the option).
    EmptyValue,
    /// The value is not of the option's type.
    InvalidValue,
    /// The value is of the option's type but outside its range (or overflows).
    OutOfRange,
}

impl Problem {
    /// The words warnings use for the problem.
    pub fn text(self) -> &'static str {
        match self {
            Problem::EmptyPair => "empty pair",
            Problem::TrailingComma => "trailing comma",
            Problem::MissingColon => "missing colon",
            Problem::EmptyKey => "empty key",
            Problem::UnknownKey => "unknown option",
            Problem::ArenaIndex => "arena index out of range",
            Problem::EmptyValue => "empty value",
            Problem::InvalidValue => "invalid value",
            Problem::OutOfRange => "out of range",
        }
    }
}

/// A good pair: the option's row, the arena index (`arena.<i>.thp`; else 0) and the value.
#[derive(Clone, Copy, Debug)]
pub struct Pair<'a> {
    pub key: &'a [u8],
    pub row: &'static OptionRow,
    pub index: usize,
    pub value: Value<'a>,
}

/// A bad pair: its text (between the commas), what is wrong, and its option where known.
#[derive(Clone, Copy, Debug)]
pub struct BadPair<'a> {
    pub pair: &'a [u8],
    pub problem: Problem,
    pub row: Option<&'static OptionRow>,
}

/// The pairs of a configuration string, parsed and checked but applied to nothing and reported
/// nowhere: the pure half of [`Options::apply`]. The empty string has no pairs.
pub fn parse_pairs(conf: &[u8]) -> Pairs<'_> {
    Pairs {
        rest: conf,
        done: conf.is_empty(),
        after_comma: false,
    }
}

/// The iterator of [`parse_pairs`].
#[derive(Clone, Debug)]
pub struct Pairs<'a> {
    rest: &'a [u8],
    done: bool,
    /// Whether a comma came before the next segment.
    after_comma: bool,
}

impl<'a> Iterator for Pairs<'a> {
    type Item = Result<Pair<'a>, BadPair<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let (segment, last) = match self.rest.iter().position(|&c| c == b',') {
            Some(i) => {
                let segment = &self.rest[..i];
                self.rest = &self.rest[i + 1..];
                (segment, false)
            }
            None => {
                self.done = true;
                (self.rest, true)
            }
        };
        let after_comma = self.after_comma;
        self.after_comma = !last;
        if segment.is_empty() {
            let problem = if last && after_comma {
                Problem::TrailingComma
            } else {
                Problem::EmptyPair
            };
            return Some(Err(BadPair {
                pair: segment,
                problem,
                row: None,
            }));
        }
        Some(parse_pair(segment))
    }
}

/// Parses one `key:value` pair (the value is everything after the first colon).
pub fn parse_pair(pair: &[u8]) -> Result<Pair<'_>, BadPair<'_>> {
    let bad = |problem, row| BadPair { pair, problem, row };
    let Some(colon) = pair.iter().position(|&c| c == b':') else {
        return Err(bad(Problem::MissingColon, None));
    };
    let (key, value) = (&pair[..colon], &pair[colon + 1..]);
    if key.is_empty() {
        return Err(bad(Problem::EmptyKey, None));
    }
    let (row, index) = lookup(key).map_err(|p| bad(p, None))?;
    let value = row.kind.parse(value).map_err(|p| bad(p, Some(row)))?;
    Ok(Pair {
        key,
        row,
        index,
        value,
    })
}

/// The row of option `key` and its arena index (`arena.7.thp` gives the `arena.<i>.thp` row and
/// 7, `arena.7.hugetlb` the `arena.<i>.hugetlb` row and 7). Keys are exact and case-sensitive.
pub fn lookup(key: &[u8]) -> Result<(&'static OptionRow, usize), Problem> {
    if let Some(r) = OPTION_TABLE
        .iter()
        .find(|r| !r.field.per_arena() && r.name.as_bytes() == key)
    {
        return Ok((r, 0));
    }
    for &(suffix, row) in ARENA_ROWS.iter() {
        let Some(digits) = key
            .strip_prefix(b"arena.")
            .and_then(|k| k.strip_suffix(suffix))
        else {
            continue;
        };
        if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) {
            let index = digits.iter().fold(0usize, |n, &d| {
                n.saturating_mul(10).saturating_add(usize::from(d - b'0'))
            });
            if index < ARENA_THP_MAX {
                return Ok((row, index));
            }
            return Err(Problem::ArenaIndex);
        }
    }
    Err(Problem::UnknownKey)
}

/// Size suffixes (compared ignoring ASCII case) and their binary shifts.
const SIZE_SUFFIXES: [(&[u8], u32); 14] = [
    (b"", 0),
    (b"b", 0),
    (b"k", 10),
    (b"kb", 10),
    (b"kib", 10),
    (b"m", 20),
    (b"mb", 20),
    (b"mib", 20),
    (b"g", 30),
    (b"gb", 30),
    (b"gib", 30),
    (b"t", 40),
    (b"tb", 40),
    (b"tib", 40),
];

impl Kind {
    /// Parses `text` as a value of this kind.
    pub fn parse<'a>(&self, text: &'a [u8]) -> Result<Value<'a>, Problem> {
        if text.is_empty() && !matches!(self, Kind::Letters { .. }) {
            return Err(Problem::EmptyValue);
        }
        match *self {
            Kind::Bool => match text {
                b"true" | b"1" => Ok(Value::Bool(true)),
                b"false" | b"0" => Ok(Value::Bool(false)),
                _ => Err(Problem::InvalidValue),
            },
            Kind::Count { max } => {
                let n = parse_decimal(text)?;
                match usize::try_from(n) {
                    Ok(n) if n <= max => Ok(Value::Count(n)),
                    _ => Err(Problem::OutOfRange),
                }
            }
            Kind::Size { max } => parse_size(text, max).map(Value::Size),
            Kind::Millis => parse_millis(text).map(Value::Millis),
            Kind::Thp => Thp::parse(text)
                .map(Value::Thp)
                .ok_or(Problem::InvalidValue),
            Kind::ArenaThp => {
                if text == b"inherit" {
                    Ok(Value::ArenaThp(None))
                } else {
                    Thp::parse(text)
                        .map(|t| Value::ArenaThp(Some(t)))
                        .ok_or(Problem::InvalidValue)
                }
            }
            Kind::Check => match text {
                b"cheap" => Ok(Value::Check(false)),
                b"full" => Ok(Value::Check(true)),
                _ => Err(Problem::InvalidValue),
            },
            Kind::Hugetlb => Hugetlb::parse(text)
                .map(Value::Hugetlb)
                .ok_or(Problem::InvalidValue),
            Kind::ArenaHugetlb => {
                if text == b"inherit" {
                    Ok(Value::ArenaHugetlb(None))
                } else {
                    Hugetlb::parse(text)
                        .map(|h| Value::ArenaHugetlb(Some(h)))
                        .ok_or(Problem::InvalidValue)
                }
            }
            Kind::Letters { allowed, max_len } => {
                if !text.iter().all(|c| allowed.contains(c)) {
                    Err(Problem::InvalidValue)
                } else if text.len() > max_len {
                    Err(Problem::OutOfRange)
                } else {
                    Ok(Value::Letters(text))
                }
            }
        }
    }

    /// The type's name in `docs/configuration.md`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Kind::Bool => "bool",
            Kind::Count { .. } => "count",
            Kind::Size { .. } => "size",
            Kind::Millis => "milliseconds",
            Kind::Thp => "thp",
            Kind::ArenaThp => "thp or inherit",
            Kind::Check => "check level",
            Kind::Letters { .. } => "letters",
            Kind::Hugetlb => "page source",
            Kind::ArenaHugetlb => "page source or inherit",
        }
    }

    /// Writes the values accepted, compactly (`0..=1792KiB`, `always|madvise|never|default|defer`).
    pub fn write_range(&self, out: &mut dyn FnMut(&[u8])) {
        match *self {
            Kind::Bool => out(b"true|false"),
            Kind::Count { max } => {
                out(b"0..=");
                write_dec(max as u64, out);
            }
            Kind::Size { max } => {
                out(b"0..=");
                if max == SIZE_LIMIT {
                    out(b"isize::MAX");
                } else {
                    write_size(max, out);
                }
            }
            Kind::Millis => out(b"-1..=i64::MAX"),
            Kind::Thp => out(b"always|madvise|never|default|defer"),
            Kind::ArenaThp => out(b"always|madvise|never|default|defer|inherit"),
            Kind::Check => out(b"cheap|full"),
            Kind::Hugetlb => out(b"off|2M|1G"),
            Kind::ArenaHugetlb => out(b"off|2M|1G|inherit"),
            Kind::Letters { allowed, max_len } => {
                out(b"at most ");
                write_dec(max_len as u64, out);
                out(b" of ");
                out(allowed);
            }
        }
    }

    /// Writes what a warning says is expected: the range with a word on the form.
    pub fn write_expected(&self, out: &mut dyn FnMut(&[u8])) {
        match self {
            Kind::Count { .. } => out(b"a decimal number in "),
            Kind::Size { .. } => out(b"a size like 65536, 64k, 2MiB in "),
            Kind::Millis => out(b"milliseconds in "),
            _ => {}
        }
        self.write_range(out);
    }
}

/// Decimal digits only (no sign, no spaces); too large a number is out of range.
fn parse_decimal(digits: &[u8]) -> Result<u64, Problem> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(Problem::InvalidValue);
    }
    digits.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d - b'0')))
            .ok_or(Problem::OutOfRange)
    })
}

/// Digits with an optional binary suffix; at most `max` bytes.
fn parse_size(text: &[u8], max: usize) -> Result<usize, Problem> {
    let split = text
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    if digits.is_empty() {
        return Err(Problem::InvalidValue);
    }
    let Some(&(_, shift)) = SIZE_SUFFIXES
        .iter()
        .find(|(s, _)| s.eq_ignore_ascii_case(suffix))
    else {
        return Err(Problem::InvalidValue);
    };
    let bytes = parse_decimal(digits)?
        .checked_mul(1u64 << shift)
        .ok_or(Problem::OutOfRange)?;
    match usize::try_from(bytes) {
        Ok(bytes) if bytes <= max => Ok(bytes),
        _ => Err(Problem::OutOfRange),
    }
}

/// `-1` or a non-negative decimal number of milliseconds up to `i64::MAX`.
fn parse_millis(text: &[u8]) -> Result<i64, Problem> {
    let (negative, digits) = match text.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let n = parse_decimal(digits)?;
    match (negative, n) {
        (true, 0) => Ok(0),
        (true, 1) => Ok(-1),
        (true, _) => Err(Problem::OutOfRange),
        (false, n) => i64::try_from(n).map_err(|_| Problem::OutOfRange),
    }
}

/// Writes an unsigned decimal number.
fn write_dec(v: u64, out: &mut dyn FnMut(&[u8])) {
    let mut tmp = [0u8; 20];
    out(crate::diag::dec_digits(v, &mut tmp));
}

/// Writes a size with the largest binary suffix that divides it (`4MiB`, `1536KiB`, `4097`).
fn write_size(v: usize, out: &mut dyn FnMut(&[u8])) {
    let v = v as u64;
    for (suffix, shift) in [(b"TiB", 40), (b"GiB", 30), (b"MiB", 20), (b"KiB", 10)] {
        if v != 0 && v.trailing_zeros() >= shift {
            write_dec(v >> shift, out);
            out(suffix);
            return;
        }
    }
    write_dec(v, out);
}

impl Value<'_> {
    /// Writes the value in the form the parser reads back.
    pub fn write(&self, out: &mut dyn FnMut(&[u8])) {
        match *self {
            Value::Bool(b) => out(if b { b"true" } else { b"false" }),
            Value::Count(n) => write_dec(n as u64, out),
            Value::Size(n) => write_size(n, out),
            Value::Millis(n) => {
                if n < 0 {
                    out(b"-");
                }
                write_dec(n.unsigned_abs(), out);
            }
            Value::Thp(t) | Value::ArenaThp(Some(t)) => out(t.name().as_bytes()),
            Value::Check(full) => out(if full { b"full" } else { b"cheap" }),
            Value::ArenaThp(None) | Value::ArenaHugetlb(None) => out(b"inherit"),
            Value::Hugetlb(h) | Value::ArenaHugetlb(Some(h)) => out(h.name().as_bytes()),
            Value::Letters(s) => out(s),
        }
    }
}

/// A small fixed buffer that drops what does not fit.
struct Buf<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> Buf<N> {
    fn new() -> Self {
        Buf {
            bytes: [0; N],
            len: 0,
        }
    }

    fn push(&mut self, b: &[u8]) {
        // `get_mut`, not indexing: no panic path (`len <= N` always holds).
        let room = self.bytes.get_mut(self.len..).unwrap_or(&mut []);
        let n = b.len().min(room.len());
        room[..n].copy_from_slice(&b[..n]);
        self.len += n;
    }

    fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or(&[])
    }
}

/// Calls `f` with the name and value of every option of `opts`, in table order; a per-arena
/// option (`arena.<i>.thp`, `arena.<i>.hugetlb`) appears once per arena that has its own value
/// (as `arena.3.thp`), not at all otherwise.
pub fn for_each_option(opts: &Options, f: &mut dyn FnMut(&[u8], Value<'_>)) {
    for r in OPTION_TABLE.iter() {
        if !r.field.per_arena() {
            f(r.name.as_bytes(), opts.get(r, 0));
            continue;
        }
        let suffix = r.name.strip_prefix("arena.<i>").unwrap_or(r.name);
        for i in 0..ARENA_THP_MAX {
            let value = opts.get(r, i);
            if matches!(value, Value::ArenaThp(None) | Value::ArenaHugetlb(None)) {
                continue;
            }
            let mut name = Buf::<32>::new();
            name.push(b"arena.");
            write_dec(i as u64, &mut |b| name.push(b));
            name.push(suffix.as_bytes());
            f(name.as_bytes(), value);
        }
    }
}

/// Calls `out` once per option (as in [`for_each_option`]) with `name:value`, a pair the parser
/// reads back: joined with commas, the pairs rebuild `opts` from `Options::DEFAULT`.
pub fn write_options(opts: &Options, out: &mut dyn FnMut(&[u8])) {
    for_each_option(opts, &mut |name, value| {
        let mut item = Buf::<96>::new();
        item.push(name);
        item.push(b":");
        value.write(&mut |b| item.push(b));
        out(item.as_bytes());
    });
}

/// Appends `bytes` to `m` with `"`, `\` and non-printable bytes escaped, at most `cap` bytes of
/// output, and `...` when cut short.
fn push_escaped(m: &mut Msg, bytes: &[u8], cap: usize) {
    let mut shown = 0;
    for &c in bytes {
        let mut esc = [b'\\', 0, 0, 0];
        let n = match c {
            b'"' | b'\\' => {
                esc[1] = c;
                2
            }
            0x20..=0x7e => {
                esc[0] = c;
                1
            }
            _ => {
                esc[1] = b'x';
                esc[2] = b"0123456789abcdef"[usize::from(c >> 4)];
                esc[3] = b"0123456789abcdef"[usize::from(c & 15)];
                4
            }
        };
        if shown + n > cap {
            m.str("...");
            return;
        }
        m.bytes(esc.get(..n).unwrap_or(&[]));
        shown += n;
    }
}

/// The option name closest to an unknown `key` (ignoring ASCII case), if close enough to be a
/// likely typo.
fn suggest(key: &[u8]) -> Option<&'static str> {
    if key.starts_with(b"arena.") {
        let row = if key.ends_with(b"hugetlb") {
            ARENA_HUGETLB_ROW
        } else {
            ARENA_ROW
        };
        return Some(OPTION_TABLE[row].name);
    }
    const MAX: usize = 32;
    if key.len() > MAX {
        return None;
    }
    let mut best: Option<(usize, &'static str)> = None;
    for r in OPTION_TABLE.iter().filter(|r| !r.field.per_arena()) {
        let name = r.name.as_bytes();
        // Levenshtein distance with two rows on the stack.
        let mut prev = [0usize; MAX + 1];
        let mut cur = [0usize; MAX + 1];
        for (j, p) in prev.iter_mut().enumerate().take(key.len() + 1) {
            *p = j;
        }
        for (i, &a) in name.iter().enumerate() {
            cur[0] = i + 1;
            // `take(MAX)` (a no-op: `key.len() <= MAX`) lets the compiler drop the bounds
            // checks, so no panic path.
            for (j, &b) in key.iter().enumerate().take(MAX) {
                let cost = usize::from(!a.eq_ignore_ascii_case(&b));
                cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
            }
            prev = cur;
        }
        let d = prev[key.len()];
        if d <= 1 + name.len() / 5 && !matches!(best, Some((bd, _)) if bd <= d) {
            best = Some((d, r.name));
        }
    }
    best.map(|(_, name)| name)
}

/// Writes the warning line for a bad pair to `out`.
fn write_bad_pair(bad: &BadPair, source: Source, out: &mut dyn FnMut(&[u8])) {
    let mut m = Msg::new();
    m.str(source.name()).str(": bad pair \"");
    push_escaped(&mut m, bad.pair, PAIR_SHOWN_MAX);
    m.str("\" (").str(bad.problem.text());
    match bad.problem {
        Problem::EmptyPair => {
            m.str("; remove the extra comma");
        }
        Problem::TrailingComma => {
            m.str("; remove it");
        }
        Problem::MissingColon | Problem::EmptyKey => {
            m.str("; expected key:value");
        }
        Problem::UnknownKey => {
            let key = match bad.pair.iter().position(|&c| c == b':') {
                Some(colon) => &bad.pair[..colon],
                None => bad.pair,
            };
            match suggest(key) {
                Some(name) => m.str("; did you mean ").str(name).str("?"),
                None => m.str("; see docs/configuration.md"),
            };
        }
        Problem::ArenaIndex => {
            m.str("; expected arena.<i>.thp with i in 0..=")
                .dec(ARENA_THP_MAX as u64 - 1);
        }
        Problem::EmptyValue | Problem::InvalidValue | Problem::OutOfRange => {
            if let Some(r) = bad.row {
                m.str("; expected ");
                r.kind.write_expected(&mut |b| {
                    m.bytes(b);
                });
            }
        }
    }
    m.str(")\n");
    out(m.as_bytes());
}

/// Ends the program after bad pairs under `abort_conf:true`.
#[cold]
fn abort_bad_conf(bad: usize, source: Source) -> ! {
    Msg::new()
        .str("aborting: abort_conf:true and ")
        .dec(bad as u64)
        .str(if bad == 1 { " bad pair" } else { " bad pairs" })
        .str(" (see above; last source read: ")
        .str(source.name())
        .str(")")
        .fatal()
}

/// The result of [`load_from`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LoadOutcome {
    /// Bad pairs over all the sources read.
    pub bad_pairs: usize,
    /// `Some(source)` when reading stopped after `source` because `abort_conf` was true and a
    /// pair had been bad: the caller is to abort.
    pub abort_after: Option<Source>,
}

/// Applies `confs` in order (later wins; `None` means the source is absent), warning through
/// `out`. As jemalloc, the abort check runs after each source: once `abort_conf` is true and
/// any pair read so far was bad, reading stops and the outcome says so. Otherwise, with
/// `confirm_conf:true`, writes the strings read and then every effective option
/// (`hugealloc: opt.thp: madvise`), one line each.
pub fn load_from(
    opts: &mut Options,
    confs: &[(Source, Option<&[u8]>)],
    out: &mut dyn FnMut(&[u8]),
) -> LoadOutcome {
    let mut bad_pairs = 0;
    for &(source, conf) in confs {
        let Some(conf) = conf else { continue };
        bad_pairs += opts.apply_with(conf, source, out);
        if bad_pairs > 0 && opts.abort_conf {
            return LoadOutcome {
                bad_pairs,
                abort_after: Some(source),
            };
        }
    }
    if opts.confirm_conf {
        write_confirmation(opts, confs, out);
    }
    LoadOutcome {
        bad_pairs,
        abort_after: None,
    }
}

/// The `confirm_conf` lines: each string read, then each option.
fn write_confirmation(
    opts: &Options,
    confs: &[(Source, Option<&[u8]>)],
    out: &mut dyn FnMut(&[u8]),
) {
    for &(source, conf) in confs {
        if let Some(conf) = conf {
            let mut m = Msg::new();
            m.str("conf from ").str(source.name()).str(": \"");
            push_escaped(&mut m, conf, CONF_SHOWN_MAX);
            m.str("\"\n");
            out(m.as_bytes());
        }
    }
    for_each_option(opts, &mut |name, value| {
        let mut m = Msg::new();
        m.str("opt.").bytes(name).str(": ");
        value.write(&mut |b| {
            m.bytes(b);
        });
        m.str("\n");
        out(m.as_bytes());
    });
}

/// Reads every source into `opts`, later wins: the build-time default, the `hugealloc_conf`
/// symbol, the `/etc/hugealloc.conf` link target, `HUGEALLOC_CONF`, then `api_conf`. Bad pairs
/// are warned about on stderr; under `abort_conf:true` they abort the program (see
/// [`load_from`]). Allocates nothing; uses about 5 KiB of stack.
pub fn load(opts: &mut Options, api_conf: Option<&[u8]>) {
    let mut link = [0u8; ETC_LINK_MAX];
    let etc = match crate::os::read_link(ETC_CONF_PATH, &mut link) {
        Some(n) if n < link.len() => Some(&link[..n]),
        Some(_) => {
            Msg::new()
                .str(Source::EtcFile.name())
                .str(": link target of 4096 bytes or more, ignored")
                .emit();
            None
        }
        None => None,
    };
    let confs = [
        (Source::Builtin, BUILTIN_CONF.map(str::as_bytes)),
        (Source::Symbol, crate::os::conf_symbol()),
        (Source::EtcFile, etc),
        (Source::Env, os::getenv(ENV_CONF_NAME)),
        (Source::Api, api_conf),
    ];
    let outcome = load_from(opts, &confs, &mut |line| os::write_stderr(line));
    if let Some(source) = outcome.abort_after {
        abort_bad_conf(outcome.bad_pairs, source);
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
