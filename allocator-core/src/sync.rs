//! Locks and atomics. Every other module takes its atomics and `UnsafeCell` from here, so a
//! `--cfg loom` build swaps in loom's model-checked types everywhere at once.
//!
//! `Mutex` is a three-state futex lock (0 free, 1 locked, 2 locked with waiters) that spins a
//! little before sleeping. It allocates nothing and needs no initialisation beyond `const`.
//!
//! Lock ranks (take only in increasing rank; `fork` prepare takes them in this order):
//! 1. `thread` registry lock (arena binding counts)
//! 2. arena bin locks, one per small size class, in class order; then (2b) the arena's purge
//!    lock, held by its one purge pass across `madvise` (taken with no other lock held)
//! 3. arena lock (page runs, chunks, extents, huge blocks, decay); then the hugetlb reserve's
//!    (`hugetlb::HUGETLB`), taken under an arena lock, or under the purge lock alone (a purge
//!    pass giving whole pages back), and never with the chunk source's; and
//!    the deferred-collapse queue's (`collapse`), taken under an arena lock or alone, and
//!    never with the hugetlb reserve's or a lock of rank 4 or 5
//! 4. the global chunk source (fresh reservations from the OS)
//!
//!    The heap profiler's sample table (`prof`) is held only to take the base (5); no other
//!    lock is held when it is taken, so its `fork` prepare takes it first, before rank 1.
//! 5. the base (metadata) lock
//!
//! Pagemap leaves are installed lock-free (compare-and-swap).

#[cfg(loom)]
pub use loom::cell::UnsafeCell;
#[cfg(loom)]
pub use loom::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

// The full set, for every module to take from; some go unused in a given build.
#[cfg(not(loom))]
#[allow(unused_imports)]
pub use core::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

/// Defines a constructor that is `const` in ordinary builds and a plain `fn` under loom, whose
/// atomics cannot be built in a `const` context (crossbeam's pattern): one body for both.
#[macro_export]
#[doc(hidden)]
macro_rules! const_unless_loom {
    ($(#[$m:meta])* $v:vis fn $name:ident($($arg:ident: $t:ty),*) -> $ret:ty $body:block) => {
        #[cfg(not(loom))]
        $(#[$m])* $v const fn $name($($arg: $t),*) -> $ret $body
        #[cfg(loom)]
        $(#[$m])* $v fn $name($($arg: $t),*) -> $ret $body
    };
}
pub use const_unless_loom;

/// Atomics for process-wide statics that hold settings or statistics and take part in no
/// protocol a loom model checks: always `core`'s, so they can sit in `static`s in every build.
pub mod plain {
    #[allow(unused_imports)]
    pub use core::sync::atomic::{
        AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
    };
}

/// `core::cell::UnsafeCell` with loom's closure-based access API, so code is written once.
#[cfg(not(loom))]
#[derive(Debug)]
pub struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub const fn new(v: T) -> UnsafeCell<T> {
        UnsafeCell(core::cell::UnsafeCell::new(v))
    }
    #[inline(always)]
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
    #[inline(always)]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// A mutual-exclusion lock around `T`.
pub struct Mutex<T> {
    state: AtomicU32,
    /// Times `lock` found the lock held (a statistic; relaxed).
    contended: AtomicU64,
    value: UnsafeCell<T>,
}

// SAFETY: the lock gives exclusive access to `value`, so sharing the Mutex is as safe as
// sending T between threads.
unsafe impl<T: Send> Sync for Mutex<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Mutex<T> {}

impl<T> Mutex<T> {
    const_unless_loom! {
        pub fn new(value: T) -> Mutex<T> {
            Mutex {
                state: AtomicU32::new(0),
                contended: AtomicU64::new(0),
                value: UnsafeCell::new(value),
            }
        }
    }

    /// Takes the lock, spinning briefly and then sleeping on the futex.
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        // Acquire pairs with the Release store in `unlock`.
        if self
            .state
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
        MutexGuard { mutex: self }
    }

    /// Takes the lock if it is free.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        // Acquire pairs with the Release store in `unlock`.
        self.state
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| MutexGuard { mutex: self })
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self) {
        // Relaxed: a statistic only.
        self.contended.fetch_add(1, Ordering::Relaxed);
        // Under loom each spin is a scheduling point: one is enough to model the race.
        for _ in 0..if cfg!(loom) { 1 } else { 100 } {
            // Relaxed probe; the CAS below acquires.
            if self.state.load(Ordering::Relaxed) == 0
                // Acquire pairs with the Release store in `unlock`.
                && self.state.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                return;
            }
            spin_hint();
        }
        // Mark the lock contended (2) so that unlock wakes a sleeper. Acquire pairs with unlock.
        while self.state.swap(2, Ordering::Acquire) != 0 {
            wait(&self.state, 2);
        }
    }

    fn unlock(&self) {
        // Release pairs with the Acquire in `lock`/`lock_slow`.
        if self.state.swap(0, Ordering::Release) == 2 {
            wake(&self.state);
        }
    }

    /// How many times `lock` had to wait.
    pub fn contended(&self) -> u64 {
        // Relaxed: a statistic only.
        self.contended.load(Ordering::Relaxed)
    }

    /// Leaves the lock held with no guard: `fork` prepare takes every lock this way.
    pub fn force_lock(&self) {
        core::mem::forget(self.lock());
    }

    /// Releases a lock taken with `force_lock`.
    ///
    /// # Safety
    /// The lock must be held through `force_lock` by this thread (or, in a fork child, by the
    /// thread that forked).
    pub unsafe fn force_unlock(&self) {
        self.unlock();
    }

    /// Resets the lock to free in a fork child, whatever its state.
    ///
    /// # Safety
    /// Only in a fork child, where no other thread exists that could hold it.
    pub unsafe fn reset_in_child(&self) {
        // Relaxed: the child is single-threaded here.
        self.state.store(0, Ordering::Relaxed);
    }

    /// The protected value without locking.
    ///
    /// # Safety
    /// The caller must hold the lock (through `force_lock`) or otherwise know no other thread
    /// can touch the value.
    pub unsafe fn get_unchecked(&self) -> *mut T {
        self.value.with_mut(|p| p)
    }
}

/// A lock the `fork` handlers take without a guard: prepare locks, the parent unlocks, the
/// child resets. Lets owners of private locks hand them out without exposing the data.
pub trait ForkLock {
    /// Leaves the lock held with no guard.
    fn force_lock(&self);
    /// # Safety
    /// The lock is held through `force_lock` by this thread.
    unsafe fn force_unlock(&self);
    /// # Safety
    /// Only in a fork child.
    unsafe fn reset_in_child(&self);
}

impl<T> ForkLock for Mutex<T> {
    fn force_lock(&self) {
        Mutex::force_lock(self)
    }
    unsafe fn force_unlock(&self) {
        // SAFETY: forwarded contract.
        unsafe { Mutex::force_unlock(self) }
    }
    unsafe fn reset_in_child(&self) {
        // SAFETY: forwarded contract.
        unsafe { Mutex::reset_in_child(self) }
    }
}

/// Holds a `Mutex` until dropped.
pub struct MutexGuard<'a, T> {
    mutex: &'a Mutex<T>,
}

impl<T> core::ops::Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves the lock is held, so no other reference exists.
        self.mutex.value.with(|p| unsafe { &*p })
    }
}

impl<T> core::ops::DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard proves the lock is held and `&mut self` makes this access unique.
        self.mutex.value.with_mut(|p| unsafe { &mut *p })
    }
}

impl<T> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        self.mutex.unlock();
    }
}

#[cfg(not(loom))]
#[inline(always)]
fn spin_hint() {
    core::hint::spin_loop();
}
#[cfg(loom)]
fn spin_hint() {
    loom::thread::yield_now();
}

#[cfg(not(loom))]
fn wait(state: &AtomicU32, expected: u32) {
    crate::os::futex_wait(state, expected);
}
#[cfg(loom)]
fn wait(_state: &AtomicU32, _expected: u32) {
    loom::thread::yield_now();
}

#[cfg(not(loom))]
fn wake(state: &AtomicU32) {
    crate::os::futex_wake_one(state);
}
#[cfg(loom)]
fn wake(_state: &AtomicU32) {}

/// Runs an initialiser once; later callers wait until it has finished.
pub struct Once {
    /// 0 not started, 1 running, 2 done.
    state: AtomicU8,
}

impl Once {
    const_unless_loom! {
        pub fn new() -> Once {
            Once {
                state: AtomicU8::new(0),
            }
        }
    }

    /// Whether the initialiser has completed.
    #[inline(always)]
    pub fn is_done(&self) -> bool {
        // Acquire pairs with the Release store after `f` ran, so its writes are visible.
        self.state.load(Ordering::Acquire) == 2
    }

    /// Runs `f` if nobody has; returns once it has completed (by this or another thread).
    /// A reentrant call from inside `f` on the same thread returns at once without waiting
    /// (the caller must cope with the unfinished state: see `thread`'s reentrancy guard).
    pub fn call(&self, f: impl FnOnce()) -> bool {
        if self.is_done() {
            return true;
        }
        // Acquire pairs with the Release store below.
        match self
            .state
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Acquire)
        {
            Ok(_) => {
                f();
                // Release pairs with the Acquire loads in `is_done` and the wait loop.
                self.state.store(2, Ordering::Release);
                true
            }
            Err(_) => false,
        }
    }

    /// Waits until the initialiser has completed.
    pub fn wait(&self) {
        while !self.is_done() {
            spin_hint();
        }
    }

    /// Whether the initialiser has neither completed nor been found unstarted: running, or
    /// (in a fork child) abandoned by a thread the child does not have.
    pub fn is_running(&self) -> bool {
        // Acquire: as in `is_done`.
        self.state.load(Ordering::Acquire) == 1
    }

    /// Sets a running initialiser back to not started, so that `call` runs it again; false if
    /// it was not running.
    ///
    /// # Safety
    /// The thread that started it does not exist (a fork child) and had changed nothing the
    /// initialiser relies on; only one thread calls this.
    pub unsafe fn reset_abandoned(&self) -> bool {
        // AcqRel: a later `call` re-runs `f` from the start; nothing is published here.
        self.state
            .compare_exchange(1, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

#[cfg(not(loom))]
impl Default for Once {
    fn default() -> Once {
        Once::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    extern crate std;

    #[test]
    fn mutex_excludes() {
        static M: Mutex<u64> = Mutex::new(0);
        let threads: std::vec::Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..100_000 {
                        *M.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*M.lock(), 400_000);
    }

    #[test]
    fn once_runs_once() {
        static O: Once = Once::new();
        static N: AtomicU32 = AtomicU32::new(0);
        for _ in 0..3 {
            O.call(|| {
                N.fetch_add(1, Ordering::Relaxed);
            });
        }
        assert!(O.is_done());
        assert_eq!(N.load(Ordering::Relaxed), 1);
    }
}
