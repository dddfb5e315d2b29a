//! The operating-system layer: the only module that calls `mmap`, `munmap`, `madvise`, `prctl`,
//! `open`/`read` of `/sys` and `/proc`, `write` to stderr, `abort`, and `clock_gettime`.
//!
//! Contract every caller may rely on: addresses passed in are page aligned and lengths non-zero
//! and page multiples unless a function says otherwise; a failing call reports `false` or null
//! and never panics. Nothing here allocates.
//!
//! Here: memory (mapping, hugetlb pools, advice, populating); process services in `process`,
//! file reading in `files`, the thread-cache TLS slot in `tls`.

use core::ptr;

mod files;
mod process;
mod tls;
mod unwind;

pub use files::*;
pub use process::*;
pub use tls::*;
#[cfg(test)]
pub use unwind::walk_frame_chain;
pub use unwind::{backtrace, backtrace_fp};

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

/// A range whose advice is counted, for tests (`testing::os::watch_advice`): the advice
/// `advise` and `collapse` give to any byte of `[WATCH_START, WATCH_END)` is counted per kind
/// (`Advice as usize`). Empty (`WATCH_END` 0) unless a test set it, which costs one Relaxed load
/// beside each `madvise` system call. Core atomics: `os` sits below `sync` (as `process`'s
/// futex words do), and no protocol rests on these: Relaxed, a test reads them on the thread
/// that made the calls it watches.
static WATCH_START: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
static WATCH_END: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const ZERO: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
static WATCHED: [core::sync::atomic::AtomicU64; 5] = [ZERO; 5];

/// Counts `advice` for `[addr, addr + len)` if it reaches into the watched range.
fn count_watched(addr: *mut u8, len: usize, advice: Advice) {
    use core::sync::atomic::Ordering::Relaxed;
    let end = WATCH_END.load(Relaxed);
    let a = addr as usize;
    if end != 0 && a < end && WATCH_START.load(Relaxed) < a.saturating_add(len) {
        if let Some(slot) = WATCHED.get(advice as usize) {
            slot.fetch_add(1, Relaxed);
        }
    }
}

/// For tests: from now on, counts the advice given to any byte of `[start, start + len)`
/// (`len` 0: none), from zero. Returns nothing; [`watched_advice`] reads the counts.
pub fn watch_advice(start: usize, len: usize) {
    use core::sync::atomic::Ordering::Relaxed;
    WATCH_END.store(0, Relaxed);
    for slot in &WATCHED {
        slot.store(0, Relaxed);
    }
    WATCH_START.store(start, Relaxed);
    WATCH_END.store(start.saturating_add(len), Relaxed);
}

/// The advice counted in the watched range since [`watch_advice`], per kind, in `Advice`
/// order: `[Huge, NoHuge, DontNeed, Free, Collapse]`.
pub fn watched_advice() -> [u64; 5] {
    let mut out = [0; 5];
    for (o, slot) in out.iter_mut().zip(&WATCHED) {
        *o = slot.load(core::sync::atomic::Ordering::Relaxed);
    }
    out
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
    count_watched(addr, len, advice);
    // A refusal is reported by the result; errno stays as the program left it (C callers of
    // malloc and free must not see it change).
    let saved = errno();
    // SAFETY: madvise only changes how the kernel backs a range the caller owns.
    let ok = unsafe { libc::madvise(addr as *mut libc::c_void, len, flag) == 0 };
    set_errno(saved);
    ok
}

/// `MADV_COLLAPSE` (Linux 6.1+) on a range: collapses its 2 MiB-aligned parts into huge pages
/// now, on the calling thread (allocating and, if need be, compacting there). Precondition: the
/// range is mapped and page aligned. Returns the `errno` of a refusal: `EINVAL` (a kernel
/// without it, an `nh` range, or a part with no page table yet: a range never touched),
/// `ENOMEM`/`EAGAIN` (no huge page now). The program's `errno` is left as it was.
pub fn collapse(addr: *mut u8, len: usize) -> Result<(), i32> {
    const MADV_COLLAPSE: libc::c_int = 25;
    count_watched(addr, len, Advice::Collapse);
    let saved = errno();
    // SAFETY: madvise only changes how the kernel backs a range the caller owns.
    let rc = unsafe { libc::madvise(addr as *mut libc::c_void, len, MADV_COLLAPSE) };
    let err = errno();
    set_errno(saved);
    if rc == 0 {
        Ok(())
    } else {
        Err(err)
    }
}

/// Whether this kernel knows `MADV_COLLAPSE`: collapses one 2 MiB-aligned range of a fresh
/// mapping with one page touched (0 where the advice exists; `ENOMEM`/`EAGAIN` there too when no
/// huge page is free; `EINVAL` where it does not, or where THP is `never`). A smaller range or
/// an untouched one cannot tell (6.18 answers `EINVAL` to both). Maps, touches and unmaps 2 MiB
/// once; `errno` is left as it was.
pub fn collapse_supported() -> bool {
    const HUGE: usize = 2 << 20;
    let p = map_aligned(HUGE, HUGE);
    if p.is_null() {
        return false;
    }
    // SAFETY: p is a fresh writable mapping of HUGE bytes.
    unsafe { p.write_volatile(1) };
    let ok = !matches!(collapse(p, HUGE), Err(libc::EINVAL) | Err(libc::ENOSYS));
    unmap(p, HUGE);
    ok
}

/// How many pages of `[addr, addr + len)` are resident (`mincore`), for `len` of at most 2 MiB;
/// `None` where the kernel refuses (a range not mapped). Precondition: `addr` page aligned.
pub fn resident_pages(addr: *mut u8, len: usize) -> Option<usize> {
    let mut vec = [0u8; 512];
    let npages = len.div_ceil(PAGE);
    if npages > vec.len() {
        return None;
    }
    let saved = errno();
    // SAFETY: mincore writes one byte per page of the range into `vec`, which holds `npages`.
    let rc = unsafe { libc::mincore(addr as *mut libc::c_void, len, vec.as_mut_ptr()) };
    set_errno(saved);
    if rc != 0 {
        return None;
    }
    Some(vec.iter().take(npages).filter(|&&b| b & 1 != 0).count())
}
