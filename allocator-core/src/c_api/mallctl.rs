//! jemalloc's `mallctl`, `mallctlnametomib`, `mallctlbymib` and `malloc_stats_print` in C's
//! conventions (`oldp`/`oldlenp`/`newp`, sizes checked, errno values); the names, their types
//! and handlers are `crate::ctl`'s.

use crate::ctl::{Ctl, CtlValue};
use crate::os;
use core::ffi::{c_char, c_int, c_uint, c_void, CStr};

// ---- mallctl -------------------------------------------------------------------------------
//
// The names, their types and handlers live in `crate::ctl`; what follows adds C's
// conventions only: sizes, `oldp`/`oldlenp`/`newp`, errno values.

use crate::ctl::CtlType;

/// jemalloc's `MALLCTL_ARENAS_ALL`: `arena.<i>.*` for every arena.
pub const MALLCTL_ARENAS_ALL: usize = crate::ctl::ARENAS_ALL;

/// Reads a value of type `ty` from `p`; `None` for a value C cannot hand over (a null
/// string, a `bool` other than 0 or 1).
///
/// # Safety
/// `p` is valid for reading `ty.size()` bytes; a `const char *` read is null or
/// NUL-terminated and outlives the returned value.
unsafe fn read_value<'a>(ty: CtlType, p: *const c_void) -> Option<CtlValue<'a>> {
    // SAFETY: p holds ty.size() readable bytes (caller's contract); unaligned reads allowed.
    unsafe {
        Some(match ty {
            CtlType::Void => CtlValue::None,
            CtlType::Bool => match p.cast::<u8>().read() {
                0 => CtlValue::Bool(false),
                1 => CtlValue::Bool(true),
                _ => return None,
            },
            CtlType::Unsigned => CtlValue::Unsigned(p.cast::<c_uint>().read_unaligned()),
            CtlType::U64 => CtlValue::U64(p.cast::<u64>().read_unaligned()),
            CtlType::I64 => CtlValue::I64(p.cast::<i64>().read_unaligned()),
            CtlType::Size => CtlValue::Size(p.cast::<usize>().read_unaligned()),
            CtlType::Str => {
                let s = p.cast::<*const c_char>().read_unaligned();
                if s.is_null() {
                    return None;
                }
                // SAFETY: a non-null string written is NUL-terminated (mallctl's contract).
                CtlValue::Str(CStr::from_ptr(s))
            }
        })
    }
}

/// Writes `v` to `p`.
///
/// # Safety
/// `p` is valid for writing the size of `v`'s type.
unsafe fn write_value(v: CtlValue<'static>, p: *mut c_void) {
    // SAFETY: p has room for the value (caller's contract); unaligned writes allowed.
    unsafe {
        match v {
            CtlValue::None => {}
            CtlValue::Bool(x) => p.cast::<u8>().write(u8::from(x)),
            CtlValue::Unsigned(x) => p.cast::<c_uint>().write_unaligned(x),
            CtlValue::U64(x) => p.cast::<u64>().write_unaligned(x),
            CtlValue::I64(x) => p.cast::<i64>().write_unaligned(x),
            CtlValue::Size(x) => p.cast::<usize>().write_unaligned(x),
            CtlValue::Str(x) => p.cast::<*const c_char>().write_unaligned(x.as_ptr()),
        }
    }
}

/// `mallctl`'s work once the name is resolved, in C's terms. Every check comes before the
/// name acts, so a call that fails has no effect: read-only names written (or actions given
/// a value either way) are `EPERM`, a `*oldlenp` or `newlen` other than the type's size
/// `EINVAL` (unlike jemalloc, nothing is copied then).
///
/// # Safety
/// As `mallctl`.
unsafe fn ctl_call(
    c: Ctl,
    oldp: *mut c_void,
    oldlenp: *mut usize,
    newp: *const c_void,
    newlen: usize,
) -> c_int {
    let ty = c.ty();
    let writing = !newp.is_null() || newlen != 0;
    if writing && !c.writable() {
        return libc::EPERM;
    }
    if ty == CtlType::Void && (!oldp.is_null() || !oldlenp.is_null()) {
        return libc::EPERM;
    }
    let reading = !oldp.is_null() && !oldlenp.is_null();
    // SAFETY: oldlenp is non-null here, and valid (caller's contract).
    if reading && unsafe { *oldlenp } != ty.size() {
        return libc::EINVAL;
    }
    let new = if newp.is_null() {
        None
    } else if newlen != ty.size() {
        return libc::EINVAL;
    } else {
        // SAFETY: newp holds newlen == ty.size() bytes (caller's contract).
        match unsafe { read_value(ty, newp) } {
            Some(v) => Some(v),
            None => return libc::EINVAL,
        }
    };
    match c.call(new) {
        Ok(v) => {
            if reading {
                // SAFETY: oldp has *oldlenp == ty.size() bytes (checked above).
                unsafe { write_value(v, oldp) };
            }
            0
        }
        Err(e) => e.errno(),
    }
}

/// `mallctl`: reads and/or writes the control name `name` (jemalloc's convention: the old
/// value to `oldp` when `oldp` and `oldlenp` are non-null, a new one from `newp`). Returns 0,
/// or `ENOENT` (unknown name), `EINVAL` (wrong size or value), `EPERM` (read-only name
/// written), `EFAULT` (no such arena), `EAGAIN` (no arena could be created).
///
/// # Safety
/// `name` is a NUL-terminated string; `oldp`, when `oldlenp` is non-null, has `*oldlenp`
/// writable bytes; `newp` has `newlen` readable bytes.
pub unsafe fn mallctl(
    name: *const c_char,
    oldp: *mut c_void,
    oldlenp: *mut usize,
    newp: *const c_void,
    newlen: usize,
) -> c_int {
    if name.is_null() {
        return libc::ENOENT;
    }
    // SAFETY: name is NUL-terminated (caller's contract).
    let name = unsafe { CStr::from_ptr(name) }.to_bytes();
    match Ctl::lookup(name) {
        // SAFETY: forwarded contract.
        Ok(c) => unsafe { ctl_call(c, oldp, oldlenp, newp, newlen) },
        Err(e) => e.errno(),
    }
}

/// Fills `mib[..*miblenp]` with the name's management information base: one entry per
/// component of the name; the `<i>` component holds the arena index, as jemalloc's, so a
/// program may translate `arena.0.purge` once and change `mib[1]`.
///
/// # Safety
/// `name` is NUL-terminated; `mib` has `*miblenp` writable entries.
pub unsafe fn mallctlnametomib(name: *const c_char, mib: *mut usize, miblenp: *mut usize) -> c_int {
    if name.is_null() || mib.is_null() || miblenp.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: name is NUL-terminated (caller's contract).
    let name = unsafe { CStr::from_ptr(name) }.to_bytes();
    let c = match Ctl::lookup(name) {
        Ok(c) => c,
        Err(e) => return e.errno(),
    };
    // SAFETY: miblenp is valid and mib has *miblenp writable entries (caller's contract).
    let out = unsafe { core::slice::from_raw_parts_mut(mib, *miblenp) };
    match c.to_mib(out) {
        Ok(n) => {
            // SAFETY: as above.
            unsafe { *miblenp = n };
            0
        }
        Err(e) => e.errno(),
    }
}

/// `mallctlbymib`: `mallctl` on a MIB from `mallctlnametomib` (with the `<i>` entry possibly
/// changed).
///
/// # Safety
/// `mib` has `miblen` readable entries; the rest as `mallctl`.
pub unsafe fn mallctlbymib(
    mib: *const usize,
    miblen: usize,
    oldp: *mut c_void,
    oldlenp: *mut usize,
    newp: *const c_void,
    newlen: usize,
) -> c_int {
    if mib.is_null() || miblen == 0 {
        return libc::ENOENT;
    }
    // SAFETY: mib has miblen >= 1 readable entries (caller's contract).
    let mib = unsafe { core::slice::from_raw_parts(mib, miblen) };
    match Ctl::from_mib(mib) {
        // SAFETY: forwarded contract.
        Ok(c) => unsafe { ctl_call(c, oldp, oldlenp, newp, newlen) },
        Err(e) => e.errno(),
    }
}

// ---- statistics printing -------------------------------------------------------------------

/// jemalloc's `write_cb`: called with a NUL-terminated piece of text.
pub type WriteCb = unsafe extern "C" fn(cbopaque: *mut c_void, text: *const c_char);

/// `malloc_stats_print` as jemalloc: writes the statistics through `write_cb(cbopaque, text)`,
/// one NUL-terminated line per call (stderr when `write_cb` is null). `opts` holds
/// `stats_print_opts` letters (`J` JSON; `g`, `m`, `a`, `b`, `l`, `x`, `h` leave parts out;
/// see `stats::PrintOpts`); other bytes are ignored. Nothing is allocated.
///
/// # Safety
/// `opts` is null or NUL-terminated; `write_cb`, when given, may be called with `cbopaque`.
pub unsafe fn stats_print(write_cb: Option<WriteCb>, cbopaque: *mut c_void, opts: *const c_char) {
    let letters = if opts.is_null() {
        &[][..]
    } else {
        // SAFETY: opts is NUL-terminated (caller's contract).
        unsafe { CStr::from_ptr(opts) }.to_bytes()
    };
    let opts = crate::stats::PrintOpts::parse(letters);
    crate::init::ensure_init();
    let options = crate::config::options();
    match write_cb {
        Some(cb) => crate::stats::print_lines(opts, options, &mut |line| {
            let mut buf = [0u8; crate::stats::LINE_MAX + 1];
            for (slot, &b) in buf.iter_mut().zip(line) {
                *slot = b;
            }
            // SAFETY: the callback's contract (jemalloc's): a NUL-terminated string it may
            // read until it returns (lines are at most LINE_MAX bytes, so the last byte of
            // buf stays 0), and the opaque pointer the caller gave.
            unsafe { cb(cbopaque, buf.as_ptr().cast()) };
        }),
        None => crate::stats::print_lines(opts, options, &mut |line| os::write_stderr(line)),
    }
}
