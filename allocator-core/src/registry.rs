//! The process-wide arena table and the placement rule that binds a thread to an arena: the
//! automatic arena with the fewest threads, where a slot not yet created beats every arena that
//! already has a thread (so the first `narenas` threads each get an arena of their own, as in
//! jemalloc). The rule runs under the registry lock (rank 1), over the table as `Slots`, so the
//! loom models can run the same code over a table of their own (the table itself is not built
//! under loom).
//!
//! Invariants: slots fill in order and are never emptied (arenas live for the whole process);
//! `NARENAS` counts the filled ones and is published after the slot (Release).
//!
//! Lock order: the registry lock (rank 1) is never held while anything else is taken except
//! arena creation in metadata (base, rank 5).

use crate::sync::Mutex;

/// The arena table as the placement rule sees it.
pub trait Slots {
    /// Threads bound to arena `i`, or `None` when slot `i` holds no arena yet (slots fill in
    /// order, so the first empty slot ends the table).
    fn load(&self, i: usize) -> Option<usize>;
    /// Creates the next arena; its index, or `None` when out of memory or the table is full.
    fn create(&self) -> Option<usize>;
    /// Counts one more thread on arena `i`.
    fn bind(&self, i: usize);
}

/// Picks an arena for a new thread among the first `auto` slots, creating one when an empty
/// slot wins, and counts the thread on it. Takes `lock` (the registry lock) for the whole
/// decision, so two threads never both take the last free slot.
pub fn choose(lock: &Mutex<()>, auto: usize, slots: &impl Slots) -> usize {
    let _g = lock.lock();
    let mut best = 0;
    let mut best_n = usize::MAX;
    for i in 0..auto {
        match slots.load(i) {
            Some(n) => {
                if n < best_n {
                    best = i;
                    best_n = n;
                }
            }
            None => {
                if best_n > 0 {
                    if let Some(created) = slots.create() {
                        best = created;
                    }
                }
                break;
            }
        }
    }
    slots.bind(best);
    best
}

#[cfg(not(loom))]
pub use table::*;

/// The process-wide table.
#[cfg(not(loom))]
mod table {
    use crate::arena::Arena;
    use crate::config::options;
    use crate::sync::plain::{AtomicPtr, AtomicUsize};
    use crate::sync::{Mutex, Ordering};
    use crate::thp::Thp;
    use core::ptr::null_mut;

    /// Most arenas a process may have.
    pub const MAX_ARENAS: usize = 256;
    const _: () = assert!(MAX_ARENAS == crate::config::NARENAS_MAX);

    #[allow(clippy::declare_interior_mutable_const)]
    const NO_ARENA: AtomicPtr<Arena> = AtomicPtr::new(null_mut());
    static ARENAS: [AtomicPtr<Arena>; MAX_ARENAS] = [NO_ARENA; MAX_ARENAS];
    /// Arenas created so far.
    static NARENAS: AtomicUsize = AtomicUsize::new(0);
    /// Arenas threads are spread over automatically (`narenas`).
    static NARENAS_AUTO: AtomicUsize = AtomicUsize::new(1);
    /// The registry lock (rank 1).
    static REGISTRY: Mutex<()> = Mutex::new(());

    /// Arena `i`, which must exist: an index past the table or of an arena not created (only
    /// corrupt metadata or a caller's bug makes one) aborts with a message, never a panic or
    /// a wrong arena. One compare and branch, to a cold function.
    #[inline]
    pub fn arena(i: usize) -> &'static Arena {
        let Some(slot) = ARENAS.get(i) else {
            no_arena(i)
        };
        // Acquire pairs with the Release store when the arena was created.
        let a = slot.load(Ordering::Acquire);
        if a.is_null() {
            no_arena(i);
        }
        // SAFETY: arenas are never destroyed, and a non-null slot holds a created arena.
        unsafe { &*a }
    }

    /// Aborts on arena index `i`, which names no arena.
    #[cold]
    #[inline(never)]
    fn no_arena(i: usize) -> ! {
        crate::diag::fatal_index("no such arena (corrupt metadata?)", i, narenas())
    }

    /// Arena `i` if it exists.
    pub fn arena_get(i: usize) -> Option<&'static Arena> {
        if i >= MAX_ARENAS {
            return None;
        }
        // Acquire pairs with the Release store when the arena was created.
        let a = ARENAS[i].load(Ordering::Acquire);
        // SAFETY: as in `arena`.
        (!a.is_null()).then(|| unsafe { &*a })
    }

    /// The number of arenas created.
    pub fn narenas() -> usize {
        // Acquire pairs with the Release store after creating an arena.
        NARENAS.load(Ordering::Acquire)
    }

    /// The number of arenas threads are spread over automatically (`narenas`, resolved).
    pub fn narenas_auto() -> usize {
        // Relaxed: set by the global init, published through its Once.
        NARENAS_AUTO.load(Ordering::Relaxed)
    }

    /// Creates arena 0 with `policy` and sets the automatic arena count (the global init, once,
    /// before any other arena exists). False when out of memory.
    pub fn init(auto: usize, policy: Thp) -> bool {
        // Relaxed: published by the global init's Once (Release).
        NARENAS_AUTO.store(auto.clamp(1, MAX_ARENAS), Ordering::Relaxed);
        let _g = REGISTRY.lock();
        publish_arena(policy).is_some()
    }

    /// Creates one more arena with `policy`; returns its index, or `None` when the table is
    /// full or memory is short, or before the global init (which creates arena 0).
    pub fn arena_create(policy: Thp) -> Option<usize> {
        let _g = REGISTRY.lock();
        if narenas() == 0 {
            return None;
        }
        publish_arena(policy)
    }

    /// Arena `i`, creating it (and the slots before it, with their configured policies) when
    /// it is one of the automatic arenas not created yet; `None` past them.
    pub fn arena_get_or_create(i: usize) -> Option<&'static Arena> {
        if let Some(a) = arena_get(i) {
            return Some(a);
        }
        if i >= narenas_auto() {
            return None;
        }
        let _g = REGISTRY.lock();
        while (1..=i).contains(&narenas()) {
            publish_arena(options().thp_for_arena(narenas()))?;
        }
        arena_get(i)
    }

    /// Creates the next arena with `policy` and publishes it (registry lock held).
    fn publish_arena(policy: Thp) -> Option<usize> {
        let i = narenas();
        if i >= MAX_ARENAS {
            return None;
        }
        let a = Arena::create(i as u32, policy);
        if a.is_null() {
            return None;
        }
        // Release pairs with the Acquire loads in `arena`.
        ARENAS[i].store(a, Ordering::Release);
        NARENAS.store(i + 1, Ordering::Release);
        Some(i)
    }

    /// The process-wide arena table as the placement rule sees it.
    struct ArenaTable;

    impl super::Slots for ArenaTable {
        fn load(&self, i: usize) -> Option<usize> {
            // Relaxed: counts only steer placement.
            arena_get(i).map(|a| a.nthreads.load(Ordering::Relaxed))
        }
        fn create(&self) -> Option<usize> {
            // Called under the registry lock.
            publish_arena(options().thp_for_arena(narenas()))
        }
        fn bind(&self, i: usize) {
            // Relaxed: counts only steer placement.
            arena(i).nthreads.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Picks the automatic arena with the fewest threads for a new thread, creating it if
    /// needed, and counts the thread on it.
    pub fn choose_arena() -> usize {
        super::choose(&REGISTRY, narenas_auto(), &ArenaTable)
    }

    /// Takes the registry lock (fork prepare).
    pub fn fork_lock() {
        REGISTRY.force_lock();
    }

    /// # Safety
    /// After `fork_lock`, in the parent, on the thread that took it.
    pub unsafe fn fork_unlock() {
        // SAFETY: per the contract.
        unsafe { REGISTRY.force_unlock() };
    }

    /// # Safety
    /// Only in a fork child.
    pub unsafe fn fork_reset_in_child() {
        // SAFETY: per the contract.
        unsafe { REGISTRY.reset_in_child() };
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use core::cell::RefCell;
    extern crate std;
    use std::vec::Vec;

    struct Table(RefCell<Vec<usize>>, usize);
    impl Slots for Table {
        fn load(&self, i: usize) -> Option<usize> {
            self.0.borrow().get(i).copied()
        }
        fn create(&self) -> Option<usize> {
            let mut t = self.0.borrow_mut();
            (t.len() < self.1).then(|| {
                t.push(0);
                t.len() - 1
            })
        }
        fn bind(&self, i: usize) {
            self.0.borrow_mut()[i] += 1;
        }
    }

    #[test]
    fn spreads_then_balances() {
        let lock = Mutex::new(());
        let t = Table(RefCell::new(Vec::from([0])), 8);
        let picks: Vec<usize> = (0..7).map(|_| choose(&lock, 3, &t)).collect();
        // Three arenas, one thread each, then round robin by load.
        assert_eq!(&picks[..3], &[0, 1, 2]);
        assert_eq!(*t.0.borrow(), [3, 2, 2]);
        // Out of memory for a new arena: the least loaded existing one is used.
        let full = Table(RefCell::new(Vec::from([1])), 1);
        assert_eq!(choose(&lock, 4, &full), 0);
        assert_eq!(*full.0.borrow(), [2]);
    }
}
