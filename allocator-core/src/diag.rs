//! Diagnostics: warnings and fatal errors formatted into a fixed stack buffer and written to
//! stderr with one `write`. Nothing here allocates or panics; text longer than the buffer is
//! cut short.

use crate::os;
use crate::sync::Ordering;

/// A message under construction in a fixed buffer. Appends past the end are dropped.
pub struct Msg {
    buf: [u8; 512],
    len: usize,
}

impl Msg {
    /// Starts a message with the `hugealloc: ` prefix.
    pub fn new() -> Msg {
        let mut m = Msg {
            buf: [0; 512],
            len: 0,
        };
        m.str("hugealloc: ");
        m
    }

    /// Appends raw bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Msg {
        // `get_mut`, not indexing: nothing on the message path may panic (`len <= buf.len()`).
        let room = self.buf.get_mut(self.len..).unwrap_or(&mut []);
        let n = b.len().min(room.len());
        room[..n].copy_from_slice(&b[..n]);
        self.len += n;
        self
    }

    /// Appends a string.
    pub fn str(&mut self, s: &str) -> &mut Msg {
        self.bytes(s.as_bytes())
    }

    /// Appends an unsigned decimal number.
    pub fn dec(&mut self, v: u64) -> &mut Msg {
        let mut tmp = [0u8; 20];
        self.bytes(dec_digits(v, &mut tmp))
    }

    /// Appends `0x` and a hexadecimal number (a pointer, usually).
    pub fn hex(&mut self, mut v: u64) -> &mut Msg {
        let mut tmp = [0u8; 16];
        let mut i = tmp.len();
        loop {
            i -= 1;
            tmp[i] = b"0123456789abcdef"[(v & 15) as usize];
            v >>= 4;
            if v == 0 {
                break;
            }
        }
        self.str("0x");
        self.bytes(&tmp[i..])
    }

    /// The text so far.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }

    /// Ends the line and writes it to stderr.
    pub fn emit(&mut self) {
        if self.len == self.buf.len() {
            self.len -= 1;
        }
        self.bytes(b"\n");
        os::write_stderr(self.as_bytes());
    }

    /// Writes the line and aborts the process.
    pub fn fatal(&mut self) -> ! {
        self.emit();
        os::abort()
    }
}

/// The decimal digits of `v`, written into the end of `tmp`.
pub fn dec_digits(mut v: u64, tmp: &mut [u8; 20]) -> &[u8] {
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &tmp[i..]
}

impl Default for Msg {
    fn default() -> Msg {
        Msg::new()
    }
}

/// Aborts with `hugealloc: <what> <ptr>` — the one-line message for misuse of a pointer.
#[cold]
#[inline(never)]
pub fn fatal_ptr(what: &str, ptr: *const u8) -> ! {
    Msg::new().str(what).str(" ").hex(ptr as u64).fatal()
}

/// Aborts with `hugealloc: <what>`.
#[cold]
#[inline(never)]
pub fn fatal(what: &str) -> ! {
    Msg::new().str(what).fatal()
}

/// Aborts with `hugealloc: <what>: index <i>, length <len>`: an index a table cannot hold,
/// which only corrupt metadata produces (instead of a panic, or a wrong entry).
#[cold]
#[inline(never)]
pub fn fatal_index(what: &str, i: usize, len: usize) -> ! {
    Msg::new()
        .str(what)
        .str(": index ")
        .dec(i as u64)
        .str(", length ")
        .dec(len as u64)
        .fatal()
}

/// Whether the full invariant scans run: always in debug and test builds, and in release builds
/// under `check:full` (set once by the init; the `check` cargo feature makes it the default).
static FULL_CHECKS: crate::sync::plain::AtomicBool = crate::sync::plain::AtomicBool::new(false);

/// Turns the full invariant scans on or off (`check:full`).
pub fn set_full_checks(on: bool) {
    // Relaxed: set by the init before any structure exists; read on the checked paths.
    FULL_CHECKS.store(on, Ordering::Relaxed);
}

/// Debug modes, set once by the init (`junk`, `zero`, `check:full`); with any of them on the
/// fast paths see no thread cache, so every block passes `alloc`'s debug path, which uses the
/// cache after its checks and fills (`thread::debug_tcache`).
pub const DEBUG_JUNK: u8 = 1;
pub const DEBUG_ZERO: u8 = 2;
pub const DEBUG_FULL: u8 = 4;
static DEBUG: crate::sync::plain::AtomicU8 = crate::sync::plain::AtomicU8::new(0);

/// Sets the debug modes (`DEBUG_*` bits); `DEBUG_FULL` also turns the invariant scans on.
pub fn set_debug(bits: u8) {
    // Relaxed: set by the init before the first block is handed out.
    DEBUG.store(bits, Ordering::Relaxed);
    set_full_checks(bits & DEBUG_FULL != 0);
}

/// The debug modes in force (0 in normal operation).
#[inline(always)]
pub fn debug() -> u8 {
    // Relaxed: see set_debug.
    DEBUG.load(Ordering::Relaxed)
}

/// Whether `check()` scans run now (STYLE.md rule 8).
#[inline(always)]
pub fn full_checks() -> bool {
    // Relaxed: see set_full_checks.
    cfg!(debug_assertions) || FULL_CHECKS.load(Ordering::Relaxed)
}

/// An invariant of a structure: aborts with `hugealloc: invariant broken: <what>` when false.
/// Used by the `check()` scans instead of `assert!`, whose panic would allocate.
#[inline(always)]
pub fn invariant(ok: bool, what: &str) {
    if !ok {
        invariant_broken(what);
    }
}

#[cold]
#[inline(never)]
fn invariant_broken(what: &str) -> ! {
    Msg::new().str("invariant broken: ").str(what).fatal()
}

/// Writes `hugealloc: <what>` to stderr.
#[cold]
pub fn warn(what: &str) {
    Msg::new().str(what).emit()
}

/// `warn(what)` from the first caller to find `warned` clear, which sets it: a fallback's one
/// warning per process.
pub fn warn_once(warned: &crate::sync::plain::AtomicBool, what: &str) {
    // Relaxed: only one caller may win the swap; nothing is published by it.
    if !warned.swap(true, Ordering::Relaxed) {
        warn(what);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_numbers() {
        let mut m = Msg::new();
        m.dec(0).str(" ").dec(1234567890).str(" ").hex(0xdead_beef);
        assert_eq!(m.as_bytes(), b"hugealloc: 0 1234567890 0xdeadbeef");
    }

    #[test]
    fn truncates_instead_of_overflowing() {
        let mut m = Msg::new();
        for _ in 0..100 {
            m.str("0123456789");
        }
        assert_eq!(m.as_bytes().len(), 512);
    }
}
