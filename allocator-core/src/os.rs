//! The operating-system layer: the only module that calls `mmap`, `munmap`, `madvise`, `prctl`,
//! `open`/`read` of `/sys` and `/proc`, `write` to stderr, `abort`, and `clock_gettime`.
//!
//! Contract every caller may rely on: addresses passed in are page aligned and lengths non-zero
//! and page multiples unless a function says otherwise; a failing call reports `false` or null
//! and never panics. Nothing here allocates.

use core::ptr;

/// The base page size hugealloc assumes (x86-64 and most aarch64 Linux configurations).
pub const PAGE: usize = 4096;
pub const LG_PAGE: u32 = 12;

/// Maps `len` bytes of fresh zeroed read-write anonymous memory aligned to `align`.
/// Preconditions: `len` and `align` are page multiples, `align` a power of two.
/// Returns null when the kernel refuses (ENOMEM, `ulimit -v`).
pub fn map_aligned(len: usize, align: usize) -> *mut u8 {
    if align <= PAGE {
        return map(len);
    }
    let Some(over) = len.checked_add(align - PAGE) else {
        return ptr::null_mut();
    };
    let raw = map(over);
    if raw.is_null() {
        return raw;
    }
    let start = raw as usize;
    let aligned = (start + align - 1) & !(align - 1);
    let head = aligned - start;
    let tail = over - head - len;
    if head != 0 {
        unmap(raw, head);
    }
    if tail != 0 {
        unmap((aligned + len) as *mut u8, tail);
    }
    aligned as *mut u8
}

/// Maps `len` bytes (a page multiple) of fresh zeroed anonymous memory, or returns null.
/// `errno` is left as it was either way: a refusal is reported by the null result (`c_api`
/// sets `ENOMEM` where C wants it), and a refusal that a caller recovers from (a smaller
/// reservation, another source) must not leave a successful `malloc` with `errno` changed.
pub fn map(len: usize) -> *mut u8 {
    let saved = errno();
    // SAFETY: an anonymous private mapping with a null hint touches no existing memory.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        set_errno(saved);
        ptr::null_mut()
    } else {
        name_mapping(p as *mut u8, len);
        p as *mut u8
    }
}

/// Unmaps a range this module mapped. Preconditions: page-aligned start, page-multiple length.
pub fn unmap(addr: *mut u8, len: usize) {
    // SAFETY: the caller owns the range and nothing refers to it any more.
    unsafe {
        libc::munmap(addr as *mut libc::c_void, len);
    }
}

// ---- explicit huge pages (hugetlb) ------------------------------------------------------------
//
// The kernel's hugetlb pools (`/sys/kernel/mm/hugepages/hugepages-<kB>kB/`): pages set aside at
// boot or by `nr_hugepages`, handed out only to `MAP_HUGETLB` (or hugetlbfs) mappings. Facts the
// callers rely on:
// - A hugetlb mapping is aligned to its page size by the kernel (a 1 GiB mapping starts on a
//   1 GiB boundary), and `munmap` of it works only at page-size granularity.
// - Without `MAP_NORESERVE` (hugealloc never passes it for hugetlb), `mmap` reserves the pages
//   from the pool at once and fails with `ENOMEM` when the pool cannot cover the length: a
//   mapping that succeeded never faults with `SIGBUS` in the process that made it (a cgroup
//   `hugetlb.<size>.max` limit, charged at fault time, is the exception; `populate_write`
//   turns it into an error).
// - `MADV_DONTNEED` of part of a hugetlb page does nothing useful; only `munmap` of whole pages
//   gives them back to the pool.

/// The hugetlb page sizes hugealloc maps: 2 MiB (one chunk) and 1 GiB (512 chunks).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum HugePageSize {
    Size2M,
    Size1G,
}

impl HugePageSize {
    /// Both sizes, smaller first.
    pub const ALL: [HugePageSize; 2] = [HugePageSize::Size2M, HugePageSize::Size1G];

    /// log2 of the page size in bytes.
    pub const fn lg_bytes(self) -> u32 {
        match self {
            HugePageSize::Size2M => 21,
            HugePageSize::Size1G => 30,
        }
    }

    /// The page size in bytes.
    pub const fn bytes(self) -> usize {
        1 << self.lg_bytes()
    }

    /// The name options and messages use: `2M` or `1G`.
    pub const fn name(self) -> &'static str {
        match self {
            HugePageSize::Size2M => "2M",
            HugePageSize::Size1G => "1G",
        }
    }

    /// The pool's sysfs directory, with a trailing `/` and no NUL.
    pub const fn sysfs_dir(self) -> &'static str {
        match self {
            HugePageSize::Size2M => "/sys/kernel/mm/hugepages/hugepages-2048kB/",
            HugePageSize::Size1G => "/sys/kernel/mm/hugepages/hugepages-1048576kB/",
        }
    }

    /// `KernelPageSize` in `/proc/self/smaps` for a mapping of this size, in kB.
    pub const fn kernel_page_kb(self) -> u64 {
        (self.bytes() >> 10) as u64
    }
}

/// One hugetlb pool's counters (pages), as sysfs shows them.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct HugetlbPool {
    /// `nr_hugepages`: pages in the pool.
    pub total: u64,
    /// `free_hugepages`: pages not backing any mapping (reserved ones included).
    pub free: u64,
    /// `resv_hugepages`: free pages promised to mappings that have not faulted them yet.
    pub reserved: u64,
}

impl HugetlbPool {
    /// Pages a new mapping can still reserve: free and not promised.
    pub const fn available(&self) -> u64 {
        self.free.saturating_sub(self.reserved)
    }
}

/// The counters of the pool of `size`, or `None` where its sysfs directory is missing (no
/// hugetlbfs support, a kernel without that page size, a container without `/sys`). A counter
/// that cannot be read counts 0. Preserves `errno`; allocates nothing.
pub fn hugetlb_pool(size: HugePageSize) -> Option<HugetlbPool> {
    let total = read_pool_counter(size, "nr_hugepages")?;
    Some(HugetlbPool {
        total,
        free: read_pool_counter(size, "free_hugepages").unwrap_or(0),
        reserved: read_pool_counter(size, "resv_hugepages").unwrap_or(0),
    })
}

/// Reads the decimal number in `<sysfs_dir>/<file>`; `None` where the file cannot be opened.
fn read_pool_counter(size: HugePageSize, file: &str) -> Option<u64> {
    let mut path = [0u8; 80];
    let dir = size.sysfs_dir().as_bytes();
    let end = dir.len() + file.len();
    // The longest directory (45 bytes) and file name (14) fit with their NUL.
    path[..dir.len()].copy_from_slice(dir);
    path[dir.len()..end].copy_from_slice(file.as_bytes());
    let saved = errno();
    let mut buf = [0u8; 32];
    let n = read_file(&path[..=end], &mut buf);
    set_errno(saved);
    let n = n?;
    let mut v: u64 = 0;
    // `get`: `read_file` returns at most `buf.len()`, but that is not visible here (no_panic).
    for &c in buf.get(..n)?.iter().take_while(|c| c.is_ascii_digit()) {
        v = v.saturating_mul(10).saturating_add(u64::from(c - b'0'));
    }
    Some(v)
}

/// Maps `len` bytes of fresh zeroed read-write private memory from the hugetlb pool of `size`,
/// aligned to `align` (to the page size at least; a larger `align` costs an ordinary
/// `PROT_NONE` placeholder of `len + align` bytes, trimmed after).
/// Preconditions: `len` a non-zero multiple of the page size, `align` a power of two.
/// Returns the address, or the `errno` of the refusal: `ENOMEM` (the pool cannot cover `len`,
/// or no address space), `EINVAL` (no pool of that size), `EPERM`/`EACCES` (forbidden, for
/// example by a seccomp filter or `hugetlb_shm_group`). `errno` itself is left as it was.
/// The pages are reserved from the pool at once but faulted lazily (see `populate_write`).
pub fn map_hugetlb(len: usize, size: HugePageSize, align: usize) -> Result<*mut u8, i32> {
    debug_assert!(len != 0 && len.is_multiple_of(size.bytes()) && align.is_power_of_two());
    let saved = errno();
    let result = map_hugetlb_inner(len, size, align);
    set_errno(saved);
    result
}

fn map_hugetlb_inner(len: usize, size: HugePageSize, align: usize) -> Result<*mut u8, i32> {
    const MAP_HUGE_SHIFT: libc::c_int = 26;
    let flags = libc::MAP_PRIVATE
        | libc::MAP_ANONYMOUS
        | libc::MAP_HUGETLB
        | ((size.lg_bytes() as libc::c_int) << MAP_HUGE_SHIFT);
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    if align <= size.bytes() {
        // SAFETY: a new anonymous mapping with a null hint touches no existing memory.
        let p = unsafe { libc::mmap(ptr::null_mut(), len, prot, flags, -1, 0) };
        return if p == libc::MAP_FAILED {
            Err(errno())
        } else {
            Ok(p as *mut u8)
        };
    }
    // A placeholder holds an aligned window; the hugetlb mapping replaces part of it.
    let over = len.checked_add(align).ok_or(libc::ENOMEM)?;
    // SAFETY: as above; PROT_NONE and MAP_NORESERVE: address space only.
    let raw = unsafe {
        libc::mmap(
            ptr::null_mut(),
            over,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(errno());
    }
    let start = raw as usize;
    let aligned = (start + align - 1) & !(align - 1);
    // SAFETY: MAP_FIXED replaces only `[aligned, aligned + len)`, which lies inside the
    // placeholder this function mapped and nobody else knows of.
    let p = unsafe {
        libc::mmap(
            aligned as *mut libc::c_void,
            len,
            prot,
            flags | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let e = errno();
        unmap(raw as *mut u8, over);
        return Err(e);
    }
    let head = aligned - start;
    let tail = over - head - len;
    if head != 0 {
        unmap(raw as *mut u8, head);
    }
    if tail != 0 {
        unmap((aligned + len) as *mut u8, tail);
    }
    Ok(aligned as *mut u8)
}

/// Faults in every page of `[addr, addr + len)` for writing now, so later first touches do
/// not stall on the kernel (zeroing a 1 GiB page takes a while). Uses
/// `MADV_POPULATE_WRITE` (Linux 5.14+), which reports a failure (a hugetlb cgroup limit, a
/// page the pool no longer has) as `false` instead of a `SIGBUS`; on older kernels (`EINVAL`)
/// writes a zero into each `page_bytes` page, as `MAP_POPULATE` would fault them.
/// Preserves `errno`.
///
/// # Safety
/// `[addr, addr + len)` is a fresh, zeroed, writable mapping of this module, owned by the
/// caller, whose page size is `page_bytes` (`addr` and `len` multiples of it).
pub unsafe fn populate_write(addr: *mut u8, len: usize, page_bytes: usize) -> bool {
    let saved = errno();
    // SAFETY: madvise only faults in pages of a range the caller owns.
    let rc = unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) };
    let ok = if rc == 0 {
        true
    } else if errno() == libc::EINVAL {
        let mut off = 0;
        while off < len {
            // SAFETY: `addr + off` lies in the caller's fresh writable mapping, whose bytes are
            // zero: writing zero changes nothing but faults the page in.
            unsafe { ptr::write_volatile(addr.add(off), 0) };
            off += page_bytes;
        }
        true
    } else {
        false
    };
    set_errno(saved);
    ok
}

/// Names an anonymous mapping `[anon:hugealloc]` in `/proc/self/maps` where the kernel has
/// `PR_SET_VMA_ANON_NAME` (5.17+ with `CONFIG_ANON_VMA_NAME`); elsewhere does nothing.
fn name_mapping(addr: *mut u8, len: usize) {
    const PR_SET_VMA: libc::c_int = 0x53564d41;
    const PR_SET_VMA_ANON_NAME: libc::c_ulong = 0;
    static NAME: &[u8] = b"hugealloc\0";
    // A failure (EINVAL) is harmless, but must not leave errno changed by a successful malloc.
    let saved = errno();
    // SAFETY: prctl reads the NUL-terminated static name.
    unsafe {
        libc::prctl(
            PR_SET_VMA,
            PR_SET_VMA_ANON_NAME,
            addr as libc::c_ulong,
            len as libc::c_ulong,
            NAME.as_ptr() as libc::c_ulong,
        );
    }
    set_errno(saved);
}

/// The kinds of advice hugealloc gives the kernel about a range.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Advice {
    /// `MADV_HUGEPAGE`: back with PMD huge pages where possible (`hg` in `VmFlags`).
    Huge,
    /// `MADV_NOHUGEPAGE`: never back with huge pages (`nh` in `VmFlags`).
    NoHuge,
    /// `MADV_DONTNEED`: drop the pages now; the next touch faults in zeroed pages.
    DontNeed,
    /// `MADV_FREE`: the kernel may drop the pages lazily; contents undefined until rewritten.
    Free,
    /// `MADV_COLLAPSE`: collapse the range into huge pages synchronously (6.1+).
    Collapse,
}

/// Gives `advice` for a page-aligned range; returns whether the kernel accepted it.
/// `EINVAL` (old kernel, unsupported advice) is reported as `false` and is otherwise harmless.
pub fn advise(addr: *mut u8, len: usize, advice: Advice) -> bool {
    const MADV_COLLAPSE: libc::c_int = 25;
    let flag = match advice {
        Advice::Huge => libc::MADV_HUGEPAGE,
        Advice::NoHuge => libc::MADV_NOHUGEPAGE,
        Advice::DontNeed => libc::MADV_DONTNEED,
        Advice::Free => libc::MADV_FREE,
        Advice::Collapse => MADV_COLLAPSE,
    };
    // A refusal is reported by the result; errno stays as the program left it (C callers of
    // malloc and free must not see it change).
    let saved = errno();
    // SAFETY: madvise only changes how the kernel backs a range the caller owns.
    let ok = unsafe { libc::madvise(addr as *mut libc::c_void, len, flag) == 0 };
    set_errno(saved);
    ok
}

/// Writes all of `bytes` to stderr, retrying short writes; errors are ignored.
pub fn write_stderr(bytes: &[u8]) {
    write_fd(2, bytes)
}

/// A close-on-exec duplicate of stderr (stderr itself where `dup` fails).
pub fn dup_stderr() -> i32 {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) only creates a descriptor.
    let fd = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3) };
    if fd < 0 {
        2
    } else {
        fd
    }
}

/// Writes all of `bytes` to descriptor `fd`, retrying short writes; errors are ignored and
/// `errno` is left as it was.
pub fn write_fd(fd: i32, bytes: &[u8]) {
    let saved = errno();
    write_all(fd, bytes);
    set_errno(saved);
}

fn write_all(fd: i32, bytes: &[u8]) {
    let mut rest = bytes;
    while !rest.is_empty() {
        // SAFETY: the pointer and length describe the live slice `rest`.
        let n = unsafe { libc::write(fd, rest.as_ptr() as *const libc::c_void, rest.len()) };
        if n <= 0 {
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            return;
        }
        // `get`, not indexing: no panic path (`write` never reports more than asked).
        rest = rest.get(n as usize..).unwrap_or(&[]);
    }
}

/// Ends the process at once with `SIGABRT`.
pub fn abort() -> ! {
    // SAFETY: abort has no preconditions and does not return.
    unsafe { libc::abort() }
}

/// The calling thread's `errno`.
pub fn errno() -> i32 {
    // SAFETY: __errno_location always returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno`.
pub fn set_errno(value: i32) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = value }
}

/// Monotonic time in milliseconds.
pub fn now_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// Sleeps the calling thread for `ms` milliseconds (an interrupted sleep just ends early).
pub fn sleep_ms(ms: u64) {
    let ts = libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    };
    // SAFETY: nanosleep reads the local timespec; the remainder pointer may be null.
    unsafe { libc::nanosleep(&ts, core::ptr::null_mut()) };
}

/// Starts a detached thread running `f(null)`; false when the system refuses. `pthread_create`
/// allocates (its stack and TLS): call it only where a nested allocation is served.
pub fn spawn_detached(f: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void) -> bool {
    let saved = errno();
    // SAFETY: a zeroed pthread_t is a valid out slot; null attributes are the defaults; the
    // thread is detached at once so nothing has to join it.
    let ok = unsafe {
        let mut t: libc::pthread_t = core::mem::zeroed();
        let rc = libc::pthread_create(&mut t, core::ptr::null(), f, core::ptr::null_mut());
        rc == 0 && libc::pthread_detach(t) == 0
    };
    set_errno(saved);
    ok
}

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

/// Reads an environment variable without allocating, ignoring it in set-uid programs
/// (`secure_getenv`). `name` is NUL-terminated. The slice lives as long as the environment.
pub fn getenv(name: &[u8]) -> Option<&'static [u8]> {
    debug_assert!(name.last() == Some(&0));
    // SAFETY: `name` is NUL-terminated; the returned pointer, when non-null, is a C string in
    // the environment block that stays valid while nobody calls setenv on that name.
    unsafe {
        let p = secure_getenv(name.as_ptr() as *const libc::c_char);
        if p.is_null() {
            return None;
        }
        Some(core::slice::from_raw_parts(p as *const u8, libc::strlen(p)))
    }
}

extern "C" {
    fn secure_getenv(name: *const libc::c_char) -> *mut libc::c_char;
}

/// The number of CPUs online (at least 1).
pub fn ncpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n < 1 {
        1
    } else {
        n as usize
    }
}

/// Blocks while `*word == expected` (futex wait, private). Spurious wake-ups are possible.
#[cfg(not(loom))]
pub fn futex_wait(word: &core::sync::atomic::AtomicU32, expected: u32) {
    // EAGAIN (the word changed) and EINTR are normal here; a malloc that waited for a lock
    // must not return with errno changed.
    let saved = errno();
    // SAFETY: the futex word is a live, aligned u32 for the duration of the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            ptr::null::<libc::timespec>(),
        );
    }
    set_errno(saved);
}

/// Wakes one waiter blocked in `futex_wait` on `word`.
#[cfg(not(loom))]
pub fn futex_wake_one(word: &core::sync::atomic::AtomicU32) {
    // SAFETY: as in `futex_wait`.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        );
    }
}

/// The calling process's id (`getpid`; a system call, not cached: call it off hot paths).
pub fn pid() -> u32 {
    // SAFETY: getpid has no preconditions and cannot fail.
    unsafe { libc::getpid() as u32 }
}

/// Registers fork handlers (`pthread_atfork`). Returns whether registration succeeded.
pub fn at_fork(prepare: extern "C" fn(), parent: extern "C" fn(), child: extern "C" fn()) -> bool {
    // SAFETY: the handlers are plain functions valid for the life of the process.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) == 0 }
}

/// Creates a thread-specific key whose destructor `dtor` runs at each thread's exit with the
/// value that thread set (`pthread_key_create`); `None` when the system refuses (no keys left).
/// glibc allocates nothing here.
pub fn thread_key_create(dtor: extern "C" fn(*mut libc::c_void)) -> Option<u32> {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is a valid out slot; dtor is a plain function valid for the whole process.
    let rc = unsafe { libc::pthread_key_create(&mut key, Some(dtor)) };
    (rc == 0).then_some(key)
}

/// Sets the calling thread's value of `key` (`pthread_setspecific`); false on failure (an
/// invalid key, or no memory for a key past the first 32). glibc may allocate here: the
/// caller must cope with a nested allocation.
///
/// # Safety
/// `key` came from `thread_key_create`, whose destructor accepts `value`.
pub unsafe fn thread_key_set(key: u32, value: *mut u8) -> bool {
    // SAFETY: per the contract.
    unsafe { libc::pthread_setspecific(key, value as *const libc::c_void) == 0 }
}

/// Registers `f` to run at normal process exit (`atexit`); false when the system refuses.
/// glibc may allocate here.
pub fn at_exit(f: extern "C" fn()) -> bool {
    // SAFETY: registering a plain function valid for the whole process.
    unsafe { libc::atexit(f) == 0 }
}

/// The calling thread's minor and major page-fault counts (`getrusage(RUSAGE_SELF)` is
/// process-wide; this returns the process figures).
pub fn minor_faults() -> u64 {
    // SAFETY: getrusage writes into the zeroed local struct.
    unsafe {
        let mut ru: libc::rusage = core::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru.ru_minflt as u64
    }
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

/// The string of the `const char *hugealloc_conf` a program may define, as jemalloc's
/// `malloc_conf`. The reference is weak, so programs that do not define it link and run;
/// then, or where the pointer is null, returns `None`. The symbol must be visible to the
/// linker of the library: defined in the executable linked against the library (a program
/// that only `LD_PRELOAD`s it does not export the symbol), or in the same static link.
///
/// The address is taken in assembly, through the GOT: a Rust `extern static` is assumed
/// non-null, so the compiler may fold a null check of its address away.
#[inline(never)]
pub fn conf_symbol() -> Option<&'static [u8]> {
    let addr: *const *const libc::c_char;
    // SAFETY: loads the GOT slot of the weak symbol `hugealloc_conf`: its address, or 0
    // where no object defines it. Reads only the GOT, touches no stack or flags.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!(
            ".weak hugealloc_conf",
            "mov {addr}, qword ptr [rip + hugealloc_conf@GOTPCREL]",
            addr = out(reg) addr,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    // SAFETY: as above, with the aarch64 GOT relocations.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        core::arch::asm!(
            ".weak hugealloc_conf",
            "adrp {addr}, :got:hugealloc_conf",
            "ldr {addr}, [{addr}, :got_lo12:hugealloc_conf]",
            addr = out(reg) addr,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        addr = core::ptr::null();
    }
    if addr.is_null() {
        return None;
    }
    // SAFETY: a defined `hugealloc_conf` is a `const char *` variable, so `addr` points to
    // a readable pointer.
    let conf = unsafe { addr.read() };
    if conf.is_null() {
        return None;
    }
    // SAFETY: the program's contract (as for `malloc_conf`): a NUL-terminated string that
    // lives as long as the program and does not change.
    unsafe {
        Some(core::slice::from_raw_parts(
            conf as *const u8,
            libc::strlen(conf),
        ))
    }
}

// ---- the thread cache pointer in initial-exec TLS ---------------------------------------------
//
// `thread_local!` in a shared library uses the general-dynamic model: every access calls
// `__tls_get_addr` (about 20 instructions). The one word the fast paths read, the thread's
// cache pointer, lives instead in a `.tbss` slot of our own reached with the initial-exec
// model (`%fs`-relative through a GOT entry; relaxed to local-exec in an executable), as
// jemalloc does. A library using it must be loaded at start (`LD_PRELOAD`, linking), or have
// static TLS room to spare when `dlopen`ed, which glibc reserves for this.

#[cfg(all(target_os = "linux", target_arch = "x86_64", not(loom)))]
core::arch::global_asm!(
    ".section .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl hugealloc_tls_cache",
    ".hidden hugealloc_tls_cache",
    ".type hugealloc_tls_cache, @object",
    ".size hugealloc_tls_cache, 8",
    "hugealloc_tls_cache:",
    ".zero 8",
    ".text",
);

/// The calling thread's cache pointer (null until set).
#[cfg(all(target_os = "linux", target_arch = "x86_64", not(loom)))]
#[inline(always)]
pub fn tls_cache() -> *mut u8 {
    let v: *mut u8;
    // SAFETY: reads this thread's own 8-byte TLS slot defined above, through its GOT offset.
    unsafe {
        core::arch::asm!(
            "mov {off}, qword ptr [rip + hugealloc_tls_cache@GOTTPOFF]",
            "mov {v}, qword ptr fs:[{off}]",
            off = out(reg) _,
            v = out(reg) v,
            options(nostack, preserves_flags, readonly, pure),
        );
    }
    v
}

/// Sets the calling thread's cache pointer.
#[cfg(all(target_os = "linux", target_arch = "x86_64", not(loom)))]
#[inline(always)]
pub fn set_tls_cache(p: *mut u8) {
    // SAFETY: writes this thread's own 8-byte TLS slot defined above.
    unsafe {
        core::arch::asm!(
            "mov {off}, qword ptr [rip + hugealloc_tls_cache@GOTTPOFF]",
            "mov qword ptr fs:[{off}], {p}",
            off = out(reg) _,
            p = in(reg) p,
            options(nostack, preserves_flags),
        );
    }
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64", not(loom))))]
std::thread_local! {
    static TLS_CACHE: core::cell::Cell<*mut u8> = const { core::cell::Cell::new(core::ptr::null_mut()) };
}

/// The calling thread's cache pointer (null until set).
#[cfg(not(all(target_os = "linux", target_arch = "x86_64", not(loom))))]
#[inline(always)]
pub fn tls_cache() -> *mut u8 {
    TLS_CACHE.with(|c| c.get())
}

/// Sets the calling thread's cache pointer.
#[cfg(not(all(target_os = "linux", target_arch = "x86_64", not(loom))))]
#[inline(always)]
pub fn set_tls_cache(p: *mut u8) {
    TLS_CACHE.with(|c| c.set(p))
}
