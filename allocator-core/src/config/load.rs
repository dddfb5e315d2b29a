//! Configuration strings: splitting `key:value,key:value` into pairs and finding each key's
//! row, the one-line warnings for bad pairs (with a suggestion for a likely typo), the
//! `abort_conf` abort, the five sources a configuration comes from and their order, and the
//! `confirm_conf` listing of the effective options.
//!
//! Invariants: nothing here allocates (fixed buffers only) or panics, whatever the input.

use super::parse::{write_dec, Problem, Value};
use super::{
    OptionRow, Options, ARENA_HUGETLB_ROW, ARENA_ROW, ARENA_ROWS, ARENA_THP_MAX, LETTERS_MAX,
    OPTION_TABLE,
};
use crate::diag::Msg;
use crate::os;

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

/// Room for the longest option name `for_each_option` gives (a per-arena row's `<i>` becomes
/// at most two digits: `ARENA_THP_MAX` is 64).
const NAME_MAX: usize = 32;
/// The longest value `Value::write` writes: a `Letters` value (the longest, `prof_prefix`'s
/// `PROF_PREFIX_MAX`), or a number of at most 20 digits and a sign.
const VALUE_MAX: usize = if LETTERS_MAX > 21 { LETTERS_MAX } else { 21 };
const _: () = {
    assert!(ARENA_THP_MAX <= 100);
    let mut i = 0;
    while i < super::ROWS.len() {
        assert!(super::ROWS[i].name.len() <= NAME_MAX);
        i += 1;
    }
};

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
            let mut name = Buf::<NAME_MAX>::new();
            name.push(b"arena.");
            write_dec(i as u64, &mut |b| name.push(b));
            name.push(suffix.as_bytes());
            f(name.as_bytes(), value);
        }
    }
}

/// Calls `out` once per option (as in `for_each_option`) with `name:value`, a pair the parser
/// reads back: joined with commas, the pairs rebuild `opts` from `Options::DEFAULT`.
pub fn write_options(opts: &Options, out: &mut dyn FnMut(&[u8])) {
    for_each_option(opts, &mut |name, value| {
        // Room for the longest name, the colon and the longest value: a `prof_prefix` of
        // `PROF_PREFIX_MAX` bytes (with 96 bytes, one past 84 was cut short, and the pair no
        // longer read back to the same options: found by the `conf` fuzz target).
        let mut item = Buf::<{ NAME_MAX + 1 + VALUE_MAX }>::new();
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
pub(super) fn suggest(key: &[u8]) -> Option<&'static str> {
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
pub(super) fn write_bad_pair(bad: &BadPair, source: Source, out: &mut dyn FnMut(&[u8])) {
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
pub(super) fn abort_bad_conf(bad: usize, source: Source) -> ! {
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
