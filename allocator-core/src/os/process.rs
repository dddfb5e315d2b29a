//! Process services: stderr, `abort`, `errno`, clocks and sleeping, the detached background
//! thread, the environment, CPUs, futexes, the pid, `fork` and exit hooks, thread-specific
//! keys, page-fault counts and the `hugealloc_conf` symbol.
//!
//! The contract of `os` holds: a failing call reports `false`, `None` or a fallback and never
//! panics; nothing here allocates.

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
            core::ptr::null::<libc::timespec>(),
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
