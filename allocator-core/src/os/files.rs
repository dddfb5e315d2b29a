//! Files without allocating: reading whole small files (`/sys`, `/proc`), line by line
//! (`/proc/self/smaps`) and symbolic-link targets; writing and reading back profile dumps
//! (`open_write`, `memfd`, `read_at`, `close`).
//!
//! The contract of `os` holds: a file that cannot be opened reports `None` or `false` and
//! never panics; nothing here allocates.

use super::process::{errno, set_errno};

/// Reads up to `buf.len()` bytes of the file at `path` (NUL-terminated) into `buf`;
/// returns the number read, or `None` where the file cannot be opened.
pub fn read_file(path: &[u8], buf: &mut [u8]) -> Option<usize> {
    let fd = open_read(path)?;
    let mut len = 0;
    while len < buf.len() {
        let n = read_some(fd, &mut buf[len..]);
        if n == 0 {
            break;
        }
        len += n;
    }
    // SAFETY: fd was opened above and is closed once.
    unsafe { libc::close(fd) };
    Some(len)
}

/// Opens the file at `path` (NUL-terminated) for reading; `None` where it cannot be.
fn open_read(path: &[u8]) -> Option<i32> {
    debug_assert!(path.last() == Some(&0));
    // SAFETY: `path` is NUL-terminated (checked in debug builds; all callers pass literals).
    let fd = unsafe {
        libc::open(
            path.as_ptr() as *const libc::c_char,
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    (fd >= 0).then_some(fd)
}

/// Reads what is available into `buf` (retrying `EINTR`); 0 at the end or on an error.
fn read_some(fd: i32, buf: &mut [u8]) -> usize {
    loop {
        // SAFETY: reads into `buf`, which is writable for its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        return n.max(0) as usize;
    }
}

/// Calls `f` with each line (without its newline) of the file at `path` (NUL-terminated),
/// reading through a stack buffer of 4 KiB; a line longer than that is cut into pieces.
/// False where the file cannot be opened. Preserves `errno`.
pub fn for_each_line(path: &[u8], mut f: impl FnMut(&[u8])) -> bool {
    let saved = errno();
    let Some(fd) = open_read(path) else {
        set_errno(saved);
        return false;
    };
    let mut buf = [0u8; 4096];
    let mut len = 0;
    // Every slice below is taken with `get` (`len <= buf.len()` always holds, but the
    // compiler cannot see it through `read_some`): no panic site (tests/no_panic.rs).
    loop {
        let n = match buf.get_mut(len..) {
            Some(rest) => read_some(fd, rest),
            None => 0,
        };
        if n == 0 {
            if len > 0 {
                f(buf.get(..len).unwrap_or(&[]));
            }
            break;
        }
        len = (len + n).min(buf.len());
        let mut start = 0;
        while let Some(nl) = buf
            .get(start..len)
            .and_then(|s| s.iter().position(|&c| c == b'\n'))
        {
            f(buf.get(start..start + nl).unwrap_or(&[]));
            start += nl + 1;
        }
        if start == 0 && len == buf.len() {
            f(&buf);
            len = 0;
        } else {
            if start < len {
                buf.copy_within(start..len, 0);
            }
            len = len.saturating_sub(start);
        }
    }
    // SAFETY: fd was opened above and is closed once.
    unsafe { libc::close(fd) };
    set_errno(saved);
    true
}

/// The address range of an smaps mapping header (`start-end perms ...`), else `None`.
pub fn smaps_range(line: &[u8]) -> Option<(usize, usize)> {
    let hex = |s: &[u8]| -> Option<usize> {
        if s.is_empty() || s.len() > 16 {
            return None;
        }
        s.iter().try_fold(0usize, |v, &c| {
            Some(v << 4 | (c as char).to_digit(16)? as usize)
        })
    };
    let space = line.iter().position(|&c| c == b' ')?;
    let dash = line[..space].iter().position(|&c| c == b'-')?;
    Some((hex(&line[..dash])?, hex(&line[dash + 1..space])?))
}
/// Reads the target of the symbolic link at `path` (NUL-terminated) into `buf`, without a
/// NUL; returns its length, or `None` where `path` is missing or not a symbolic link. A
/// result of `buf.len()` means the target may have been cut short.
pub fn read_link(path: &[u8], buf: &mut [u8]) -> Option<usize> {
    debug_assert!(path.last() == Some(&0));
    // SAFETY: `path` is NUL-terminated (checked in debug builds; callers pass literals) and
    // readlink writes at most `buf.len()` bytes into `buf`.
    let n = unsafe {
        libc::readlink(
            path.as_ptr() as *const libc::c_char,
            buf.as_mut_ptr() as *mut libc::c_char,
            buf.len(),
        )
    };
    usize::try_from(n).ok()
}

/// Opens (creating or truncating, mode 0644) the file at `path` (NUL-terminated) for writing;
/// `None` where it cannot be. Preserves `errno`.
pub fn open_write(path: &[u8]) -> Option<i32> {
    debug_assert!(path.last() == Some(&0));
    let saved = errno();
    // SAFETY: `path` is NUL-terminated (the caller's contract, checked in debug builds).
    let fd = unsafe {
        libc::open(
            path.as_ptr() as *const libc::c_char,
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o644 as libc::c_uint,
        )
    };
    set_errno(saved);
    (fd >= 0).then_some(fd)
}

/// An anonymous in-memory file (`memfd_create`) to write a profile into; `None` where the
/// kernel has none. Preserves `errno`.
pub fn memfd() -> Option<i32> {
    let saved = errno();
    // SAFETY: the name is a NUL-terminated literal; memfd_create only creates a descriptor.
    let fd = unsafe { libc::memfd_create(c"hugealloc-prof".as_ptr(), libc::MFD_CLOEXEC) };
    set_errno(saved);
    (fd >= 0).then_some(fd)
}

/// Reads from `fd` at byte `offset` into `buf` (`pread`, retrying `EINTR`); the bytes read, 0
/// at the end or on an error. Preserves `errno`.
pub fn read_at(fd: i32, offset: u64, buf: &mut [u8]) -> usize {
    let saved = errno();
    let n = loop {
        // SAFETY: reads into `buf`, which is writable for its length.
        let n = unsafe {
            libc::pread(
                fd,
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                offset as libc::off_t,
            )
        };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        break n.max(0) as usize;
    };
    set_errno(saved);
    n
}

/// Closes `fd`, which the caller opened and does not use again. Preserves `errno`.
pub fn close(fd: i32) {
    let saved = errno();
    // SAFETY: per the contract the descriptor is the caller's own.
    unsafe { libc::close(fd) };
    set_errno(saved);
}
