//! Control and introspection by name: a subset of jemalloc's `mallctl` names, with jemalloc's
//! meanings where they match, served to Rust (`ctl::read("stats.allocated")`) and, through
//! `c_api`'s thin `mallctl` wrappers, to C.
//!
//! The namespace is one table of fixed names, `CTL_TABLE`, followed by four families
//! generated from the lists they describe, so a new option or statistic gets its name with no
//! edit here:
//! - `opt.<option>`: every row of `config::OPTION_TABLE` (read-only, the effective options);
//! - `stats.<figure>`: every field of `stats::Stats`;
//! - `stats.arenas.<i>.<figure>`: every figure of `stats::ArenaFigures` (`<i>` = 4096,
//!   [`ARENAS_ALL`], merges every arena);
//! - `stats.arenas.<i>.bins.<j>.<figure>`: every figure of `stats::BinFigures`.
//!
//! Each name pattern has an id, its position in that order; MIBs carry it in every component
//! but the `<i>`/`<j>` ones, which carry the index. Invariants: a failed call changes nothing
//! (every check runs before the handler acts); nothing here allocates or panics (names are
//! matched component by component, values are plain enums, strings `&'static CStr`).
//!
//! Here: the value types and the fixed names' table and handlers; the families, name
//! matching and [`Ctl`] are in `name`.

use crate::config::Hugetlb;
use crate::size_class::{class_size, NSMALL, SLAB_OBJS, SLAB_PAGES};
use crate::sync::Ordering;
use crate::thp::Thp;
use crate::thread;
use core::ffi::{c_uint, CStr};

pub use crate::stats::ARENAS_ALL;

mod name;

pub use name::{act, for_each_name, nnames, read, write, Ctl};

/// The C type of a name's value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CtlType {
    /// An action: no value either way (`thread.tcache.flush`).
    Void,
    /// `bool`.
    Bool,
    /// `unsigned`.
    Unsigned,
    /// `uint64_t`.
    U64,
    /// `ssize_t` (milliseconds, where -1 means never).
    I64,
    /// `size_t`.
    Size,
    /// `const char *`, a NUL-terminated string that lives as long as the program.
    Str,
}

impl CtlType {
    /// `sizeof` the C type (0 for an action).
    pub const fn size(self) -> usize {
        match self {
            CtlType::Void => 0,
            CtlType::Bool => 1,
            CtlType::Unsigned => core::mem::size_of::<c_uint>(),
            CtlType::U64 | CtlType::I64 => 8,
            CtlType::Size => core::mem::size_of::<usize>(),
            CtlType::Str => core::mem::size_of::<*const u8>(),
        }
    }

    /// The C type's name, as the documentation writes it.
    pub const fn c_name(self) -> &'static str {
        match self {
            CtlType::Void => "—",
            CtlType::Bool => "bool",
            CtlType::Unsigned => "unsigned",
            CtlType::U64 => "uint64_t",
            CtlType::I64 => "ssize_t",
            CtlType::Size => "size_t",
            CtlType::Str => "const char *",
        }
    }
}

/// A value read from or written to a name. Strings read are `'static`; a string written need
/// only live for the call.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CtlValue<'a> {
    /// An action's (no value).
    None,
    Bool(bool),
    Unsigned(c_uint),
    U64(u64),
    I64(i64),
    Size(usize),
    Str(&'a CStr),
}

impl CtlValue<'_> {
    /// The value's type.
    pub const fn ty(&self) -> CtlType {
        match self {
            CtlValue::None => CtlType::Void,
            CtlValue::Bool(_) => CtlType::Bool,
            CtlValue::Unsigned(_) => CtlType::Unsigned,
            CtlValue::U64(_) => CtlType::U64,
            CtlValue::I64(_) => CtlType::I64,
            CtlValue::Size(_) => CtlType::Size,
            CtlValue::Str(_) => CtlType::Str,
        }
    }
}

/// Why a call failed; [`CtlError::errno`] is what `mallctl` returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CtlError {
    /// No such name (`ENOENT`), an index out of range included (`stats.arenas.<i>` of an arena
    /// that does not exist, `bins.<j>` past the small classes).
    NotFound,
    /// A value of another type than the name's, or a read of an action, or an action asked
    /// for on a name with a value (`EINVAL`).
    WrongType,
    /// A value of the right type the name does not accept (`EINVAL`).
    BadValue,
    /// A write to a read-only name (`EPERM`).
    ReadOnly,
    /// `arena.<i>.*` of an arena that does not exist (`EFAULT`, as jemalloc).
    NoArena,
    /// No arena could be created (`EAGAIN`).
    Again,
}

impl CtlError {
    /// The `errno` value `mallctl` returns for it.
    pub const fn errno(self) -> i32 {
        match self {
            CtlError::NotFound => libc::ENOENT,
            CtlError::WrongType | CtlError::BadValue => libc::EINVAL,
            CtlError::ReadOnly => libc::EPERM,
            CtlError::NoArena => libc::EFAULT,
            CtlError::Again => libc::EAGAIN,
        }
    }
}

/// What a fixed name's handler gets: the values of the name's `<i>` and `<j>` components (0
/// when absent) and the new value, already checked against the row's type and writability
/// (`None` when nothing is written).
pub(crate) type CtlHandler =
    fn(ix: [usize; 2], new: Option<CtlValue<'_>>) -> Result<CtlValue<'static>, CtlError>;

/// One fixed name. `name` may contain `<i>` components, each matched by a decimal number.
pub(crate) struct CtlRow {
    pub name: &'static str,
    pub ty: CtlType,
    pub writable: bool,
    pub handler: CtlHandler,
    pub doc: &'static str,
}

/// A name pattern: `prefix.leaf` (just `leaf` when `prefix` is empty), with its type, access
/// and meaning.
#[derive(Clone, Copy, Debug)]
pub struct CtlName {
    pub prefix: &'static str,
    pub leaf: &'static str,
    pub ty: CtlType,
    pub writable: bool,
    pub doc: &'static str,
}

impl CtlName {
    /// The components, split at the dots.
    fn components(&self) -> impl Iterator<Item = &'static [u8]> {
        let prefix: &'static [u8] = self.prefix.as_bytes();
        let leaf: &'static [u8] = self.leaf.as_bytes();
        (!prefix.is_empty())
            .then_some(prefix)
            .into_iter()
            .flat_map(|p| p.split(|&c| c == b'.'))
            .chain(leaf.split(|&c| c == b'.'))
    }

    /// Writes the pattern (`stats.arenas.<i>.pactive`).
    pub fn write(&self, out: &mut dyn FnMut(&[u8])) {
        if !self.prefix.is_empty() {
            out(self.prefix.as_bytes());
            out(b".");
        }
        out(self.leaf.as_bytes());
    }

    /// `r`, `rw` or `action`, as the documentation writes it.
    pub const fn access(&self) -> &'static str {
        match (self.ty, self.writable) {
            (CtlType::Void, _) => "action",
            (_, true) => "rw",
            (_, false) => "r",
        }
    }
}

// ---- the fixed names -----------------------------------------------------------------------

/// hugealloc's version as a C string.
static VERSION: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(s) => s,
        Err(_) => panic!("the version string has an interior NUL"),
    };

/// The alignment of every block of 16 bytes or more (the size classes' quantum).
pub(crate) const QUANTUM: usize = 16;
const _: () = assert!(class_size(1) == QUANTUM);

/// Bumped by each write of `epoch` (statistics are always current; the epoch only counts).
static EPOCH: crate::sync::AtomicU64 = crate::sync::AtomicU64::new(1);

/// The program-lifetime C string of a THP policy name.
fn thp_cstr(policy: Thp) -> &'static CStr {
    match policy {
        Thp::Default => c"default",
        Thp::Always => c"always",
        Thp::Madvise => c"madvise",
        Thp::Never => c"never",
        Thp::Defer => c"defer",
    }
}

fn hugetlb_cstr(source: Hugetlb) -> &'static CStr {
    match source {
        Hugetlb::Off => c"off",
        Hugetlb::Pages2M => c"2M",
        Hugetlb::Pages1G => c"1G",
    }
}

fn unsigned(v: usize) -> CtlValue<'static> {
    CtlValue::Unsigned(c_uint::try_from(v).unwrap_or(c_uint::MAX))
}

/// Arena `i` for `arena.<i>.*` (`EFAULT` when it does not exist).
fn arena_of(i: usize) -> Result<&'static crate::arena::Arena, CtlError> {
    crate::init::ensure_init();
    crate::registry::arena_get(i).ok_or(CtlError::NoArena)
}

/// A decay time written: -1 (never) or milliseconds.
fn decay_ms_of(new: Option<CtlValue<'_>>) -> Result<Option<i64>, CtlError> {
    match new {
        Some(CtlValue::I64(ms)) if ms < -1 => Err(CtlError::BadValue),
        Some(CtlValue::I64(ms)) => Ok(Some(ms)),
        _ => Ok(None),
    }
}

fn ctl_version(_: [usize; 2], _: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    Ok(CtlValue::Str(VERSION))
}

fn ctl_epoch(_: [usize; 2], new: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    if new.is_some() {
        // Relaxed: a counter with no data behind it (jemalloc refreshes its stats here).
        EPOCH.fetch_add(1, Ordering::Relaxed);
    }
    // Relaxed: as above.
    Ok(CtlValue::U64(EPOCH.load(Ordering::Relaxed)))
}

fn ctl_narenas(_: [usize; 2], _: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    crate::init::ensure_init();
    Ok(unsigned(crate::registry::narenas()))
}

fn ctl_arenas_create(_: [usize; 2], _: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    crate::init::ensure_init();
    // The policy `arena.<n>.thp` names for the index this creation will most likely get
    // (a concurrent creation may take it first; then the new arena has the other's policy).
    let policy = crate::config::options().thp_for_arena(crate::registry::narenas());
    crate::registry::arena_create(policy)
        .map(unsigned)
        .ok_or(CtlError::Again)
}

fn ctl_page(_: [usize; 2], _: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    Ok(CtlValue::Size(crate::os::PAGE))
}

fn ctl_quantum(_: [usize; 2], _: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    Ok(CtlValue::Size(QUANTUM))
}

fn ctl_arenas_decay_ms(
    _: [usize; 2],
    new: Option<CtlValue>,
) -> Result<CtlValue<'static>, CtlError> {
    crate::init::ensure_init();
    let new = decay_ms_of(new)?;
    let old = crate::arena::decay_ms();
    if let Some(ms) = new {
        crate::arena::set_decay_ms(ms);
    }
    Ok(CtlValue::I64(old))
}

fn ctl_nbins(_: [usize; 2], _: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    Ok(unsigned(NSMALL))
}

fn ctl_bin_size(ix: [usize; 2], _: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    match ix[0] {
        j if j < NSMALL => Ok(CtlValue::Size(class_size(j))),
        _ => Err(CtlError::NotFound),
    }
}

fn ctl_bin_nregs(ix: [usize; 2], _: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    match SLAB_OBJS.get(ix[0]) {
        Some(&n) => Ok(unsigned(usize::from(n))),
        None => Err(CtlError::NotFound),
    }
}

fn ctl_bin_slab_size(ix: [usize; 2], _: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    match SLAB_PAGES.get(ix[0]) {
        Some(&n) => Ok(CtlValue::Size(usize::from(n) * crate::os::PAGE)),
        None => Err(CtlError::NotFound),
    }
}

fn ctl_thread_arena(_: [usize; 2], new: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    crate::init::ensure_init();
    if let Some(CtlValue::Unsigned(i)) = new {
        // As jemalloc: an arena that does not exist is EFAULT (checked before anything moves);
        // an automatic arena not created yet is created.
        crate::registry::arena_get_or_create(i as usize).ok_or(CtlError::NoArena)?;
    }
    let old = thread::thread_arena_index();
    if let Some(CtlValue::Unsigned(i)) = new {
        if !thread::set_thread_arena(i as usize) {
            return Err(CtlError::NoArena);
        }
    }
    Ok(unsigned(old))
}

// ---- heap profiling ----------------------------------------------------------------------

fn prof_on() -> Result<(), CtlError> {
    crate::init::ensure_init();
    if crate::prof::enabled() {
        Ok(())
    } else {
        Err(CtlError::NotFound)
    }
}

fn ctl_prof_active(_: [usize; 2], new: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    prof_on()?;
    Ok(CtlValue::Bool(match new {
        Some(CtlValue::Bool(on)) => crate::prof::set_active(on),
        _ => crate::prof::active(),
    }))
}

fn ctl_prof_dump(_: [usize; 2], new: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    prof_on()?;
    let ok = match new {
        Some(CtlValue::Str(path)) => crate::prof::dump_to_path(path.to_bytes()),
        _ => {
            let mut path = [0u8; crate::prof::PREFIX_MAX + 65];
            crate::prof::dump_auto_into(b'm', &mut path).is_some()
        }
    };
    if ok {
        Ok(CtlValue::Str(c""))
    } else {
        Err(CtlError::NoArena)
    }
}

fn ctl_prof_reset(_: [usize; 2], new: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    prof_on()?;
    let lg = match new {
        Some(CtlValue::Size(lg)) if lg > 62 => return Err(CtlError::BadValue),
        Some(CtlValue::Size(lg)) => Some(lg),
        _ => None,
    };
    let old = crate::prof::lg_sample();
    crate::prof::reset(lg);
    Ok(CtlValue::Size(old))
}

fn ctl_prof_lg_sample(_: [usize; 2], _: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    prof_on()?;
    Ok(CtlValue::Size(crate::prof::lg_sample()))
}

fn ctl_thread_prof_active(
    _: [usize; 2],
    new: Option<CtlValue>,
) -> Result<CtlValue<'static>, CtlError> {
    prof_on()?;
    let tc = thread::tcache_slow();
    if tc.is_null() {
        return Err(CtlError::NotFound);
    }
    // SAFETY: the calling thread's own live cache.
    let t = unsafe { &mut *tc };
    let old = !t.prof_thread_off;
    if let Some(CtlValue::Bool(on)) = new {
        t.prof_thread_off = !on;
    }
    Ok(CtlValue::Bool(old))
}

fn ctl_tcache_flush(_: [usize; 2], _: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    thread::flush_thread_cache();
    Ok(CtlValue::None)
}

fn ctl_thread_allocated(_: [usize; 2], _: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    Ok(CtlValue::U64(thread::TLS.with(|t| t.allocated.get())))
}

fn ctl_thread_deallocated(
    _: [usize; 2],
    _: Option<CtlValue>,
) -> Result<CtlValue<'static>, CtlError> {
    Ok(CtlValue::U64(thread::TLS.with(|t| t.deallocated.get())))
}

/// Flushes the calling thread's cache, then returns every dirty free chunk of every arena to
/// the kernel (`arena.4096.purge`, `malloc_trim`, `hugealloc::purge`); returns the bytes purged.
pub(crate) fn purge_all() -> usize {
    crate::init::ensure_init();
    thread::flush_thread_cache();
    (0..crate::registry::narenas())
        .map(|i| crate::registry::arena(i).purge_all())
        .sum()
}

fn ctl_arena_purge(ix: [usize; 2], _: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    if ix[0] == ARENAS_ALL {
        purge_all();
    } else {
        arena_of(ix[0])?.purge_all();
    }
    Ok(CtlValue::None)
}

fn ctl_arena_decay(ix: [usize; 2], _: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    if ix[0] == ARENAS_ALL {
        crate::init::ensure_init();
        for i in 0..crate::registry::narenas() {
            crate::registry::arena(i).decay_now();
        }
    } else {
        arena_of(ix[0])?.decay_now();
    }
    Ok(CtlValue::None)
}

fn ctl_arena_thp(ix: [usize; 2], new: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    let a = arena_of(ix[0])?;
    let old = a.thp();
    if let Some(CtlValue::Str(s)) = new {
        let policy = Thp::parse(s.to_bytes()).ok_or(CtlError::BadValue)?;
        a.set_thp(policy);
        crate::init::policy_changed(policy);
    }
    Ok(CtlValue::Str(thp_cstr(old)))
}

fn ctl_arena_hugetlb(ix: [usize; 2], new: Option<CtlValue>) -> Result<CtlValue<'static>, CtlError> {
    let a = arena_of(ix[0])?;
    let old = a.hugetlb();
    if let Some(CtlValue::Str(s)) = new {
        let source = Hugetlb::parse(s.to_bytes()).ok_or(CtlError::BadValue)?;
        if !a.set_hugetlb(source) {
            // The arena's chunks already came from the old source.
            return Err(CtlError::ReadOnly);
        }
    }
    Ok(CtlValue::Str(hugetlb_cstr(old)))
}

fn ctl_arena_decay_ms(
    ix: [usize; 2],
    new: Option<CtlValue>,
) -> Result<CtlValue<'static>, CtlError> {
    let a = arena_of(ix[0])?;
    let new = decay_ms_of(new)?;
    let old = a.dirty_decay_ms();
    if let Some(ms) = new {
        a.set_dirty_decay_ms(ms);
    }
    Ok(CtlValue::I64(old))
}

const fn fixed(
    name: &'static str,
    ty: CtlType,
    writable: bool,
    handler: CtlHandler,
    doc: &'static str,
) -> CtlRow {
    CtlRow {
        name,
        ty,
        writable,
        handler,
        doc,
    }
}

use CtlType::{
    Bool as BOOL, Size as SIZE, Str as STR, Unsigned as UNSIGNED, Void as VOID, I64, U64,
};

/// Every fixed name (the families `opt.*` and `stats.*` follow it; see the module doc).
// One row per line; rustfmt would spread each row over seven lines.
#[rustfmt::skip]
pub(crate) static CTL_TABLE: &[CtlRow] = &[
    fixed("version", STR, false, ctl_version, "hugealloc's version"),
    fixed("epoch", U64, true, ctl_epoch,
        "a counter each write advances, reading the new value (statistics are always current)"),
    fixed("arenas.narenas", UNSIGNED, false, ctl_narenas, "arenas created so far"),
    fixed("arenas.create", UNSIGNED, false, ctl_arenas_create,
        "creates an arena (policy from `arena.<i>.thp` or `thp` of the configuration) and reads its index"),
    fixed("arenas.page", SIZE, false, ctl_page, "the page size"),
    fixed("arenas.quantum", SIZE, false, ctl_quantum,
        "the alignment of every block of 16 bytes or more"),
    fixed("arenas.dirty_decay_ms", I64, true, ctl_arenas_decay_ms,
        "the decay time of every arena without its own `arena.<i>.dirty_decay_ms`; -1 never"),
    fixed("arenas.nbins", UNSIGNED, false, ctl_nbins, "the number of small size classes"),
    fixed("arenas.bin.<i>.size", SIZE, false, ctl_bin_size, "small class i's block size"),
    fixed("arenas.bin.<i>.nregs", UNSIGNED, false, ctl_bin_nregs,
        "blocks in one slab of small class i"),
    fixed("arenas.bin.<i>.slab_size", SIZE, false, ctl_bin_slab_size,
        "bytes of one slab of small class i"),
    fixed("thread.arena", UNSIGNED, true, ctl_thread_arena,
        "the calling thread's arena; a write moves the thread (flushing its cache), EFAULT if there is no such arena"),
    fixed("thread.tcache.flush", VOID, false, ctl_tcache_flush,
        "flushes the calling thread's cache"),
    fixed("thread.allocated", U64, false, ctl_thread_allocated,
        "bytes the calling thread took from arenas (cache refills count, as in jemalloc)"),
    fixed("thread.deallocated", U64, false, ctl_thread_deallocated,
        "bytes the calling thread returned to arenas"),
    fixed("arena.<i>.purge", VOID, false, ctl_arena_purge,
        "returns arena i's free dirty memory to the kernel (i = 4096: every arena)"),
    fixed("arena.<i>.decay", VOID, false, ctl_arena_decay,
        "purges arena i's free chunks dirty for longer than its decay time, now (i = 4096: every arena)"),
    fixed("arena.<i>.thp", STR, true, ctl_arena_thp,
        "arena i's THP policy: always, madvise, never or default; applies to chunks put to use afterwards"),
    fixed("arena.<i>.hugetlb", STR, true, ctl_arena_hugetlb,
        "arena i's page source: off, 2M or 1G (hugetlb pools); writable while the arena holds no chunk (EPERM after)"),
    fixed("arena.<i>.dirty_decay_ms", I64, true, ctl_arena_decay_ms,
        "arena i's decay time (a write gives the arena its own); -1 never"),
    // ---- heap profiling (`prof.rs`); ENOENT unless `opt.prof`
    fixed("prof.active", BOOL, true, ctl_prof_active, "whether allocations are sampled"),
    fixed("prof.dump", STR, true, ctl_prof_dump,
        "writes the heap profile to the path written (read: to `<prof_prefix>.<pid>.<seq>.m.heap`); EFAULT if it cannot"),
    fixed("prof.reset", SIZE, true, ctl_prof_reset,
        "forgets every sample so far; a write also sets `prof.lg_sample`; reads the sampling exponent"),
    fixed("prof.lg_sample", SIZE, false, ctl_prof_lg_sample,
        "the mean sampling interval is 2^N bytes"),
    fixed("thread.prof.active", BOOL, true, ctl_thread_prof_active,
        "whether the calling thread's allocations are sampled"),
];

#[cfg(test)]
mod tests;
