//! Slabs a thread owns: per small class, the slabs a thread's cache refills from and frees
//! into without a lock (issue 13). A thread adopts a slab from its arena's bin (under the bin
//! lock: `BinState::adopt`) and from then on alone writes its bitmap and free count: a refill
//! takes a word of free objects at a time, and a free past a full cache bin sets the block's
//! bit (a bit already set is a double free, caught exactly whatever happened in between). So a
//! block that goes through the cache's refill and flush costs a bit cleared and a bit set, not
//! a bin lock and a pagemap walk per flushed block.
//!
//! Blocks other threads give back to an owned slab (through their cache's flush or their
//! remote-free stacks, always under the slab's bin lock) go to the slab's `remote` bitmap, and
//! the slab goes on its owner's `pending` list (once: `Slab::rpending`). The owner takes the
//! list under the same lock when its own slabs run dry (or when its unlocked look at the head
//! sees a slab there) and merges each slab's remote blocks (`Slab::merge_remote`). Everything
//! on the hand-off is done under the bin lock; the owner's look at the head is a hint, so
//! Relaxed. A thread gives its slabs back under the bin lock too (`BinState::give_back`: thread
//! exit, `thread.tcache.flush`, a change of arena, the GC of an idle class, and an owned slab
//! that empties and is not the current one), merging its pending list first, so a flush that
//! reads `Slab::owner` under the lock may use it. `Slab::owner` holds the address of the
//! owner's pending-list head (`PendingHead`), which the owner's metadata block keeps outside its
//! `Tcache` header.
//!
//! Invariants (the owner's, no lock): `cur` is on no list; `partial` holds the owned slabs
//! other than `cur` with free and allocated objects, `full` those with no free object; an
//! owned slab that empties and is not `cur` is given back at once; every slab on the lists and
//! `cur` has `owner` equal to this `OwnedSlabs`.

use crate::list;
use crate::slab::Slab;
use crate::sync::{AtomicPtr, Ordering};
use core::ptr::null_mut;

/// The head of an owner's pending list: the value owned slabs carry in `Slab::owner`. It
/// lives outside the `Tcache` (in the metadata block after it), so another thread's push
/// under the bin lock never writes into memory the owner holds a `&mut` to.
pub type PendingHead = AtomicPtr<Slab>;

/// One thread's owned slabs of one small class (inside its `Tcache`).
pub struct OwnedSlabs {
    /// The slab refills take from (owned, on no list), or null.
    pub cur: *mut Slab,
    /// Owned slabs other than `cur` with free and allocated objects.
    pub partial: *mut Slab,
    /// Owned slabs other than `cur` with no free object.
    pub full: *mut Slab,
    /// The head of the list of owned slabs holding blocks other threads gave back
    /// (`Slab::remote`), linked by `Slab::rnext`: pushed and taken under the arena bin's lock
    /// only; the owner reads it without the lock as a hint. Null: no slab can be owned.
    pending: *const PendingHead,
}

// SAFETY: the raw slab pointers are used by the owning thread, or under the bin lock.
unsafe impl Send for OwnedSlabs {}

impl OwnedSlabs {
    /// No slab owned, with the pending list at `pending` (a head no other `OwnedSlabs` uses,
    /// live as long as this one owns a slab).
    pub const fn new(pending: *const PendingHead) -> OwnedSlabs {
        OwnedSlabs {
            cur: null_mut(),
            partial: null_mut(),
            full: null_mut(),
            pending,
        }
    }

    /// The value owned slabs carry in `Slab::owner`: the pending list's head.
    #[inline(always)]
    pub fn token(&self) -> *mut () {
        self.pending as *mut ()
    }

    /// The pending list's head.
    #[inline]
    pub fn pending(&self) -> &PendingHead {
        crate::diag::invariant(
            !self.pending.is_null(),
            "a thread's owned slabs have no pending list",
        );
        // SAFETY: `new`'s contract: live while this owns a slab (and checked non-null).
        unsafe { &*self.pending }
    }

    /// Whether `s` is one of these slabs (the owner's question: no other thread can change
    /// the answer).
    #[inline(always)]
    pub fn owns(&self, s: &Slab) -> bool {
        s.owner() == self.token()
    }

    /// Whether a slab waits on the pending list (a hint, read without the bin lock).
    #[inline]
    pub fn has_pending(&self) -> bool {
        // Relaxed: a hint; the list is taken under the bin lock, which orders it.
        !self.pending.is_null() && !self.pending().load(Ordering::Relaxed).is_null()
    }

    /// Whether no slab is owned (and none pending).
    pub fn is_empty(&self) -> bool {
        self.cur.is_null() && self.partial.is_null() && self.full.is_null() && !self.has_pending()
    }

    /// Takes up to `out.len()` free objects from the owned slabs into `out`: from `cur`, or
    /// the next partly used slab when `cur` is full (which goes on the full list). Returns how
    /// many; 0 when no owned slab has a free object (the caller goes to the bin).
    pub fn take(&mut self, out: &mut [*mut u8]) -> usize {
        loop {
            let cur = self.cur;
            if !cur.is_null() {
                // SAFETY: `cur` is a live slab this thread owns.
                let s = unsafe { &mut *cur };
                if !s.is_full() {
                    let n = s.take(out);
                    s.check();
                    return n;
                }
                // SAFETY: a full owned slab, on no list.
                unsafe { list::push(&mut self.full, cur) };
                self.cur = null_mut();
            }
            let next = self.partial;
            if next.is_null() {
                return 0;
            }
            // SAFETY: a live owned slab on the partial list.
            unsafe { list::remove(&mut self.partial, next) };
            self.cur = next;
        }
    }

    /// Makes `s` (just adopted: owned, on no list) the current slab; a current slab that is
    /// not full goes on the partial list, a full one on the full list.
    ///
    /// # Safety
    /// `s` is a live slab this thread owns, on no list; `cur` likewise when set.
    pub unsafe fn set_cur(&mut self, s: *mut Slab) {
        let old = self.cur;
        if !old.is_null() {
            // SAFETY: the contract.
            let head = if unsafe { (*old).is_full() } {
                &mut self.full
            } else {
                &mut self.partial
            };
            // SAFETY: the contract.
            unsafe { list::push(head, old) };
        }
        self.cur = s;
    }

    /// After blocks went back to owned slab `s` (full before when `was_full`): moves it from
    /// the full list to the partial one, or off the lists when it is empty. Returns whether the
    /// caller must give it back (empty and not `cur`).
    ///
    /// # Safety
    /// `s` is a live slab this thread owns, on the list its state before said.
    #[inline]
    pub unsafe fn settle(&mut self, s: *mut Slab, was_full: bool) -> bool {
        if s == self.cur {
            return false;
        }
        // SAFETY: the contract.
        let empty = unsafe { (*s).is_empty() };
        // SAFETY: the contract: a full slab is on the full list, else on the partial list.
        unsafe {
            if was_full {
                list::remove(&mut self.full, s);
                if !empty {
                    list::push(&mut self.partial, s);
                }
            } else if empty {
                list::remove(&mut self.partial, s);
            }
        }
        empty
    }

    /// Unlinks every owned slab and calls `f` with each (giving them back).
    pub fn drain(&mut self, mut f: impl FnMut(*mut Slab)) {
        let cur = core::mem::replace(&mut self.cur, null_mut());
        if !cur.is_null() {
            f(cur);
        }
        for head in [&mut self.partial, &mut self.full] {
            while !head.is_null() {
                let s = *head;
                // SAFETY: a live owned slab on this list.
                unsafe { list::remove(head, s) };
                f(s);
            }
        }
    }

    /// Invariant scan (debug and test builds, `check:full`; the owner only).
    pub fn check(&self) {
        if !crate::diag::full_checks() {
            return;
        }
        let me = self.token();
        if !self.cur.is_null() {
            // SAFETY: an owned slab is live.
            let s = unsafe { &*self.cur };
            crate::diag::invariant(s.owner() == me, "a thread's current slab is not its own");
            s.check();
        }
        for (head, full) in [(self.partial, false), (self.full, true)] {
            let mut s = head;
            let mut steps = 0u32;
            while !s.is_null() {
                // SAFETY: listed owned slabs are live.
                let slab = unsafe { &*s };
                crate::diag::invariant(
                    slab.owner() == me && s != self.cur,
                    "a thread's owned-slab list holds another's slab or its current one",
                );
                crate::diag::invariant(
                    slab.is_full() == full && !slab.is_empty(),
                    "a thread's owned-slab list holds a slab of the wrong state",
                );
                slab.check();
                s = slab.next;
                steps += 1;
                crate::diag::invariant(steps < 1 << 24, "an owned-slab list has a cycle");
            }
        }
    }
}
