//! Control of the system's hugetlb pools for tests (`tests/hugetlb.rs`, and the `LD_PRELOAD`
//! tests of `allocator-ffi`, which include this file by path): `PoolLock` serialises the tests
//! that resize pools, within a process (a mutex) and across processes (an `flock` on
//! `/tmp/hugealloc-hugetlb-tests.lock`); `PoolGuard` puts a pool's old size back when dropped,
//! panics included; `Pool` is both, for a test that sets one pool. Resizing needs root; where
//! it cannot be done, the test prints why and skips.
#![allow(dead_code)]

use hugealloc::testing::os::{self, HugePageSize};
use std::sync::{Mutex, MutexGuard};

/// Serialises the tests that resize pools, within this binary and across processes.
pub struct PoolLock {
    _inner: MutexGuard<'static, ()>,
    fd: i32,
}

static IN_PROCESS: Mutex<()> = Mutex::new(());

impl PoolLock {
    pub fn take() -> PoolLock {
        let inner = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
        let path = c"/tmp/hugealloc-hugetlb-tests.lock";
        // SAFETY: open with a NUL-terminated path; flock on the descriptor it returned.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_CREAT | libc::O_RDWR, 0o666) };
        assert!(fd >= 0, "cannot open the pool lock file");
        // SAFETY: as above.
        assert_eq!(unsafe { libc::flock(fd, libc::LOCK_EX) }, 0);
        PoolLock { _inner: inner, fd }
    }
}

impl Drop for PoolLock {
    fn drop(&mut self) {
        // SAFETY: closing our descriptor releases the flock.
        unsafe { libc::close(self.fd) };
    }
}

pub fn nr_path(size: HugePageSize) -> String {
    format!("{}nr_hugepages", size.sysfs_dir())
}

/// Restores a pool's `nr_hugepages` when dropped.
pub struct PoolGuard {
    size: HugePageSize,
    old: u64,
}

impl PoolGuard {
    /// Sets the pool of `size` to `pages` pages; `Err` with the reason where that cannot be
    /// done (not root, no such pool, the kernel found fewer free pages).
    pub fn set(size: HugePageSize, pages: u64) -> Result<PoolGuard, String> {
        let Some(pool) = os::hugetlb_pool(size) else {
            return Err(format!("no {} hugetlb pool here", size.name()));
        };
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root: cannot resize the hugetlb pools".into());
        }
        let guard = PoolGuard {
            size,
            old: pool.total,
        };
        std::fs::write(nr_path(size), format!("{pages}\n"))
            .map_err(|e| format!("writing {}: {e}", nr_path(size)))?;
        let got = os::hugetlb_pool(size).map_or(0, |p| p.total);
        if got != pages {
            // The guard restores the old size.
            return Err(format!(
                "asked for {pages} {} pages, the kernel found {got} (fragmented memory?)",
                size.name()
            ));
        }
        Ok(guard)
    }
}

impl Drop for PoolGuard {
    fn drop(&mut self) {
        let _ = std::fs::write(nr_path(self.size), format!("{}\n", self.old));
        let now = os::hugetlb_pool(self.size).map_or(0, |p| p.total);
        if now != self.old {
            eprintln!(
                "warning: the {} pool could not be restored to {} pages (now {now}): pages still mapped?",
                self.size.name(),
                self.old
            );
        }
    }
}

/// The pool set to `pages`, or `None` after printing why the test skips.
pub fn pool_or_skip(test: &str, size: HugePageSize, pages: u64) -> Option<PoolGuard> {
    match PoolGuard::set(size, pages) {
        Ok(g) => Some(g),
        Err(why) => {
            eprintln!("{test}: skipped: {why}");
            None
        }
    }
}

pub fn pool(size: HugePageSize) -> os::HugetlbPool {
    os::hugetlb_pool(size).expect("the pool was there a moment ago")
}

/// The pool lock and one pool set to a size, restored (then unlocked) when dropped.
pub struct Pool {
    size: HugePageSize,
    _guard: PoolGuard,
    _lock: PoolLock,
}

impl Pool {
    /// Takes the pool lock and sets the pool of `size` to `pages` pages; `None` after printing
    /// why `test` skips.
    pub fn set(test: &str, size: HugePageSize, pages: u64) -> Option<Pool> {
        let lock = PoolLock::take();
        let guard = pool_or_skip(test, size, pages)?;
        Some(Pool {
            size,
            _guard: guard,
            _lock: lock,
        })
    }

    pub fn free(&self) -> u64 {
        pool(self.size).free
    }
}
