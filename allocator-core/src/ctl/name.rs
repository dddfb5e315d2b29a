//! The namespace and its lookup: the id of every name pattern (the fixed table, then the
//! `opt.*`, `stats.*`, `stats.arenas.<i>.*` and `stats.arenas.<i>.bins.<j>.*` families),
//! matching a name component by component, and [`Ctl`], a resolved name read, written or
//! acted on.
//!
//! Invariants: a failed call changes nothing (every check runs before the handler acts);
//! nothing here allocates or panics.

use super::{
    hugetlb_cstr, thp_cstr, unsigned, CtlError, CtlHandler, CtlName, CtlType, CtlValue, CTL_TABLE,
};
use crate::config::{Kind, OptionRow, Value, ARENA_THP_MAX, OPTION_TABLE};
use crate::stats::{ArenaFigures, BinFigures, FigureType, Stats};
use crate::sync::{Once, UnsafeCell};
use core::ffi::{c_uint, CStr};

// ---- the families --------------------------------------------------------------------------

/// What serves a name.
#[derive(Clone, Copy)]
enum Target {
    Fixed(CtlHandler),
    Opt(&'static OptionRow),
    Global(usize),
    Arena(usize),
    Bin(usize),
}

/// The C type `opt.<name>` is read as.
fn opt_type(kind: &Kind) -> CtlType {
    match kind {
        Kind::Bool => CtlType::Bool,
        Kind::Count { .. } => CtlType::Unsigned,
        Kind::Size { .. } => CtlType::Size,
        Kind::Millis => CtlType::I64,
        Kind::Thp
        | Kind::ArenaThp
        | Kind::Check
        | Kind::Letters { .. }
        | Kind::Hugetlb
        | Kind::ArenaHugetlb
        | Kind::Unwind => CtlType::Str,
    }
}

fn figure_type(ty: FigureType) -> CtlType {
    match ty {
        FigureType::Unsigned => CtlType::Unsigned,
        FigureType::U64 => CtlType::U64,
        FigureType::Size => CtlType::Size,
    }
}

const GLOBALS: usize = Stats::COUNT;

/// The pattern and target of name `id`.
fn entry(id: usize) -> Option<(CtlName, Target)> {
    let read_only = |prefix, leaf, ty, doc| CtlName {
        prefix,
        leaf,
        ty,
        writable: false,
        doc,
    };
    let mut k = id;
    if let Some(r) = CTL_TABLE.get(k) {
        let name = CtlName {
            prefix: "",
            leaf: r.name,
            ty: r.ty,
            writable: r.writable,
            doc: r.doc,
        };
        return Some((name, Target::Fixed(r.handler)));
    }
    k -= CTL_TABLE.len();
    if let Some(r) = OPTION_TABLE.get(k) {
        let name = read_only("opt", r.name, opt_type(&r.kind), r.doc);
        return Some((name, Target::Opt(r)));
    }
    k -= OPTION_TABLE.len();
    if let Some(&(leaf, _, doc)) = Stats::default().fields().get(k) {
        return Some((
            read_only("stats", leaf, CtlType::Size, doc),
            Target::Global(k),
        ));
    }
    k -= GLOBALS;
    if let Some(f) = ArenaFigures::FIGURES.get(k) {
        let name = read_only("stats.arenas.<i>", f.name, figure_type(f.ty), f.doc);
        return Some((name, Target::Arena(k)));
    }
    k -= ArenaFigures::COUNT;
    if let Some(f) = BinFigures::FIGURES.get(k) {
        let name = read_only(
            "stats.arenas.<i>.bins.<j>",
            f.name,
            figure_type(f.ty),
            f.doc,
        );
        return Some((name, Target::Bin(k)));
    }
    None
}

/// How many name patterns there are.
pub fn nnames() -> usize {
    CTL_TABLE.len() + OPTION_TABLE.len() + GLOBALS + ArenaFigures::COUNT + BinFigures::COUNT
}

/// Calls `f` with every name pattern, in id order.
pub fn for_each_name(f: &mut dyn FnMut(&CtlName)) {
    for id in 0..nnames() {
        if let Some((name, _)) = entry(id) {
            f(&name);
        }
    }
}

/// Parses a decimal index of at most 19 digits.
fn parse_index(s: &[u8]) -> Option<usize> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    s.iter().try_fold(0usize, |v, &c| {
        c.is_ascii_digit().then(|| v * 10 + usize::from(c - b'0'))
    })
}

fn is_index(component: &[u8]) -> bool {
    component == b"<i>" || component == b"<j>"
}

/// Matches `name` against a pattern: the values of its index components (in order) and the
/// number of components.
fn match_name(pattern: &CtlName, name: &[u8]) -> Option<([usize; 2], usize)> {
    let mut parts = name.split(|&c| c == b'.');
    let mut ix = [0usize; 2];
    let mut nix = 0;
    let mut n = 0;
    for p in pattern.components() {
        let part = parts.next()?;
        if is_index(p) {
            *ix.get_mut(nix)? = parse_index(part)?;
            nix += 1;
        } else if p != part {
            return None;
        }
        n += 1;
    }
    parts.next().is_none().then_some((ix, n))
}

/// A resolved name: the pattern's id and the values of its `<i>`/`<j>` components. Resolve
/// once and call many times (as with a MIB).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Ctl {
    pub(super) id: usize,
    pub(super) ix: [usize; 2],
}

impl Ctl {
    /// Resolves a name such as `stats.arenas.0.bins.3.nmalloc`.
    pub fn lookup(name: &[u8]) -> Result<Ctl, CtlError> {
        for id in 0..nnames() {
            let Some((pattern, _)) = entry(id) else { break };
            if let Some((ix, _)) = match_name(&pattern, name) {
                return Ok(Ctl { id, ix });
            }
        }
        Err(CtlError::NotFound)
    }

    fn pattern(&self) -> CtlName {
        match entry(self.id) {
            Some((name, _)) => name,
            // Ctl values are only made from ids entry() knows.
            None => CtlName {
                prefix: "",
                leaf: "",
                ty: CtlType::Void,
                writable: false,
                doc: "",
            },
        }
    }

    /// The name's pattern, type, access and meaning.
    pub fn name(&self) -> CtlName {
        self.pattern()
    }

    /// The values of the name's `<i>` and `<j>` components (0 when absent).
    pub fn indices(&self) -> [usize; 2] {
        self.ix
    }

    /// The name's type.
    pub fn ty(&self) -> CtlType {
        self.pattern().ty
    }

    /// Whether the name takes a value.
    pub fn writable(&self) -> bool {
        self.pattern().writable
    }

    /// Writes the name's MIB (as jemalloc's `mallctlnametomib`): one entry per component,
    /// the id in each but the `<i>`/`<j>` components, which hold the index. Returns the entries
    /// used; `WrongType` (`EINVAL`) when `mib` is too short.
    pub fn to_mib(&self, mib: &mut [usize]) -> Result<usize, CtlError> {
        let pattern = self.pattern();
        let n = pattern.components().count();
        if mib.len() < n {
            return Err(CtlError::WrongType);
        }
        let mut nix = 0;
        for (slot, c) in mib.iter_mut().zip(pattern.components()) {
            *slot = if is_index(c) {
                nix += 1;
                self.ix.get(nix - 1).copied().unwrap_or(0)
            } else {
                self.id
            };
        }
        Ok(n)
    }

    /// The name a MIB from [`Ctl::to_mib`] stands for (its index entries possibly changed).
    pub fn from_mib(mib: &[usize]) -> Result<Ctl, CtlError> {
        let id = mib.first().copied().ok_or(CtlError::NotFound)?;
        let (pattern, _) = entry(id).ok_or(CtlError::NotFound)?;
        if pattern.components().count() != mib.len() {
            return Err(CtlError::NotFound);
        }
        let mut ix = [0usize; 2];
        let mut nix = 0;
        for (&v, c) in mib.iter().zip(pattern.components()) {
            if is_index(c) {
                *ix.get_mut(nix).ok_or(CtlError::NotFound)? = v;
                nix += 1;
            } else if v != id {
                return Err(CtlError::NotFound);
            }
        }
        Ok(Ctl { id, ix })
    }

    /// Reads the value, or writes `new` and returns the value before (`epoch`, as jemalloc's,
    /// returns the new one; actions: runs the action when `new` is `None`). Every check comes
    /// first, so an error changes nothing.
    pub fn call(&self, new: Option<CtlValue<'_>>) -> Result<CtlValue<'static>, CtlError> {
        let (pattern, target) = entry(self.id).ok_or(CtlError::NotFound)?;
        if let Some(v) = new {
            if !pattern.writable {
                return Err(CtlError::ReadOnly);
            }
            if v.ty() != pattern.ty {
                return Err(CtlError::WrongType);
            }
        }
        let [i, j] = self.ix;
        if matches!(
            target,
            Target::Global(_) | Target::Arena(_) | Target::Bin(_)
        ) {
            // The figures read the arena table, which the init fills.
            crate::init::ensure_init();
        }
        match target {
            Target::Fixed(handler) => handler(self.ix, new),
            Target::Opt(row) => opt_value(row, i),
            Target::Global(k) => match crate::stats::stats().fields().get(k) {
                Some(&(_, v, _)) => Ok(CtlValue::Size(v)),
                None => Err(CtlError::NotFound),
            },
            Target::Arena(k) => {
                let r = crate::stats::arena_report(i).ok_or(CtlError::NotFound)?;
                figure(&ArenaFigures::FIGURES, &r.figures.values(), k)
            }
            Target::Bin(k) => {
                let r = crate::stats::arena_report(i).ok_or(CtlError::NotFound)?;
                let bin = r.bins.get(j).ok_or(CtlError::NotFound)?;
                figure(&BinFigures::FIGURES, &bin.values(), k)
            }
        }
    }

    /// Reads the value (`WrongType` for an action).
    pub fn read(&self) -> Result<CtlValue<'static>, CtlError> {
        if self.ty() == CtlType::Void {
            return Err(CtlError::WrongType);
        }
        self.call(None)
    }

    /// Writes `new`; returns the value before.
    pub fn write(&self, new: CtlValue<'_>) -> Result<CtlValue<'static>, CtlError> {
        self.call(Some(new))
    }

    /// Runs an action (`WrongType` for a name with a value).
    pub fn act(&self) -> Result<(), CtlError> {
        if self.ty() != CtlType::Void {
            return Err(CtlError::WrongType);
        }
        self.call(None).map(|_| ())
    }
}

/// Reads the value of `name`: `ctl::read("opt.narenas")`.
pub fn read(name: &str) -> Result<CtlValue<'static>, CtlError> {
    Ctl::lookup(name.as_bytes())?.read()
}

/// Writes `new` to `name` and returns the value before:
/// `ctl::write("arena.0.thp", CtlValue::Str(c"never"))`.
pub fn write(name: &str, new: CtlValue<'_>) -> Result<CtlValue<'static>, CtlError> {
    Ctl::lookup(name.as_bytes())?.write(new)
}

/// Runs the action `name`: `ctl::act("arena.4096.purge")`.
pub fn act(name: &str) -> Result<(), CtlError> {
    Ctl::lookup(name.as_bytes())?.act()
}

fn figure(
    figures: &[crate::stats::Figure],
    values: &[u64],
    k: usize,
) -> Result<CtlValue<'static>, CtlError> {
    match (figures.get(k), values.get(k)) {
        (Some(f), Some(&v)) => Ok(match f.ty {
            FigureType::Unsigned => CtlValue::Unsigned(c_uint::try_from(v).unwrap_or(c_uint::MAX)),
            FigureType::U64 => CtlValue::U64(v),
            FigureType::Size => CtlValue::Size(v as usize),
        }),
        _ => Err(CtlError::NotFound),
    }
}

/// `opt.<row>`: the effective option (arena `i` for `opt.arena.<i>.thp`).
fn opt_value(row: &'static OptionRow, i: usize) -> Result<CtlValue<'static>, CtlError> {
    if matches!(row.kind, Kind::ArenaThp | Kind::ArenaHugetlb) && i >= ARENA_THP_MAX {
        return Err(CtlError::NotFound);
    }
    crate::init::ensure_init();
    Ok(match crate::config::options().get(row, i) {
        Value::Bool(b) => CtlValue::Bool(b),
        Value::Count(n) => unsigned(n),
        Value::Size(n) => CtlValue::Size(n),
        Value::Millis(ms) => CtlValue::I64(ms),
        Value::Thp(t) | Value::ArenaThp(Some(t)) => CtlValue::Str(thp_cstr(t)),
        Value::ArenaThp(None) | Value::ArenaHugetlb(None) => CtlValue::Str(c"inherit"),
        Value::Hugetlb(h) | Value::ArenaHugetlb(Some(h)) => CtlValue::Str(hugetlb_cstr(h)),
        Value::Letters(letters) if row.name == "prof_prefix" => {
            CtlValue::Str(PROF_PREFIX.cstr(letters))
        }
        Value::Letters(letters) => CtlValue::Str(LETTERS.cstr(letters)),
        Value::Check(full) => CtlValue::Str(if full { c"full" } else { c"cheap" }),
        Value::Unwind(u) => CtlValue::Str(match u {
            crate::config::Unwind::Libgcc => c"libgcc",
            crate::config::Unwind::Fp => c"fp",
        }),
    })
}

/// A NUL-terminated copy of a letters option, made once: the options never change after the
/// init, so every caller would write the same bytes. One cell per letters option.
struct LettersCell<const N: usize> {
    once: Once,
    buf: UnsafeCell<[u8; N]>,
}

// SAFETY: `buf` is written once, inside `once`, and read only after `once` completed.
unsafe impl<const N: usize> Sync for LettersCell<N> {}

static LETTERS: LettersCell<{ crate::config::STATS_PRINT_OPTS_MAX + 1 }> = LettersCell {
    once: Once::new(),
    buf: UnsafeCell::new([0; crate::config::STATS_PRINT_OPTS_MAX + 1]),
};

/// `opt.prof_prefix` (heap profiling).
static PROF_PREFIX: LettersCell<{ crate::config::PROF_PREFIX_MAX + 1 }> = LettersCell {
    once: Once::new(),
    buf: UnsafeCell::new([0; crate::config::PROF_PREFIX_MAX + 1]),
};

impl<const N: usize> LettersCell<N> {
    fn cstr(&'static self, letters: &[u8]) -> &'static CStr {
        self.once.call(|| {
            self.buf.with_mut(|p| {
                // SAFETY: inside the Once: nobody else reads or writes the buffer yet.
                let buf = unsafe { &mut *p };
                let n = N - 1;
                for (slot, &c) in buf[..n].iter_mut().zip(letters.iter().filter(|&&c| c != 0)) {
                    *slot = c;
                }
            })
        });
        self.once.wait();
        // SAFETY: the Once has completed (wait), so the buffer is never written again.
        let buf: &'static [u8; N] = self.buf.with(|p| unsafe { &*p });
        // The last byte is never written, so there is always a NUL.
        CStr::from_bytes_until_nul(buf).unwrap_or(c"")
    }
}
