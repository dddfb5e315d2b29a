//! Option values: the kinds an option's value can have ([`Kind`]), a parsed value ([`Value`]),
//! the page-source value ([`Hugetlb`]), what is wrong with a bad one ([`Problem`]), and the
//! parsers and writers of sizes, milliseconds and decimal numbers.
//!
//! Invariants: nothing here allocates or panics, whatever the input; a value [`Kind::parse`]
//! returns lies in the kind's range, and [`Value::write`] writes it back in a form `parse`
//! reads.

use super::SIZE_LIMIT;
use crate::os::HugePageSize;
use crate::thp::Thp;

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
    /// How heap profiling takes a stack: `libgcc` or `fp`.
    Unwind,
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
    Unwind(Unwind),
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

/// How heap profiling takes a sampled block's stack (`prof_unwind:libgcc|fp`, see
/// `prof/unwind.rs`): libgcc's unwinder, which reads the unwind tables (`.eh_frame`) and needs
/// no frame pointers; or the frame-pointer chain (`fp`), cheaper and independent of the
/// unwind tables, which names the program's frames only where it keeps frame pointers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Unwind {
    Libgcc,
    Fp,
}

impl Unwind {
    /// Reads `libgcc` or `fp`.
    pub fn parse(text: &[u8]) -> Option<Unwind> {
        match text {
            b"libgcc" => Some(Unwind::Libgcc),
            b"fp" => Some(Unwind::Fp),
            _ => None,
        }
    }

    /// The name the parser reads back.
    pub const fn name(self) -> &'static str {
        match self {
            Unwind::Libgcc => "libgcc",
            Unwind::Fp => "fp",
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
            Kind::Unwind => Unwind::parse(text)
                .map(Value::Unwind)
                .ok_or(Problem::InvalidValue),
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
            Kind::Unwind => "unwinder",
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
            Kind::Unwind => out(b"libgcc|fp"),
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
pub(super) fn parse_decimal(digits: &[u8]) -> Result<u64, Problem> {
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
pub(super) fn parse_size(text: &[u8], max: usize) -> Result<usize, Problem> {
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
pub(super) fn parse_millis(text: &[u8]) -> Result<i64, Problem> {
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
pub(super) fn write_dec(v: u64, out: &mut dyn FnMut(&[u8])) {
    let mut tmp = [0u8; 20];
    out(crate::diag::dec_digits(v, &mut tmp));
}

/// Writes a size with the largest binary suffix that divides it (`4MiB`, `1536KiB`, `4097`).
pub(super) fn write_size(v: usize, out: &mut dyn FnMut(&[u8])) {
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
            Value::Unwind(u) => out(u.name().as_bytes()),
            Value::Letters(s) => out(s),
        }
    }
}
