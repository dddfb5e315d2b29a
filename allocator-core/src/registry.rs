//! The placement rule that binds a thread to an arena: the automatic arena with the fewest
//! threads, where a slot not yet created beats every arena that already has a thread (so the
//! first `narenas` threads each get an arena of their own, as in jemalloc). The rule runs
//! under the registry lock (rank 1); the arena table itself is `thread`'s, reached through
//! `Slots`, so the loom models can run the same code over a table of their own.

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
