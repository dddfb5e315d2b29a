//! Bins: the slabs of one small class in one arena, and the batch moves between a bin and the
//! thread caches. A `BinState` lives inside its arena's per-class `Mutex` (rank 2), so every
//! method here runs under that lock; the arena supplies new slabs and takes back empty ones
//! through closures, which keeps this module free of global state (the loom models drive it
//! with slabs of their own).
//!
//! Invariants: `current` (when set) is on no list; every slab on the non-full list has at
//! least one free and one allocated object; every slab on the empty list is empty, and there
//! are `nempty` of them, at most `keep_empty(class)` (`KEEP_EMPTY_BYTES` of slabs or room
//! for `KEEP_EMPTY_OBJS` objects, whichever is fewer, at least one). So a program that
//! allocates and frees the same few hundred KiB over and over (a producer/consumer pair, a
//! batch of requests) reuses its slabs instead of giving their pages back and taking them
//! again at every batch. The arena's decay pass returns the kept
//! slabs no refill needed since the pass before (`decay`: the low-water mark of `nempty`
//! between two passes), down to `KEEP_EMPTY_MIN`, so an idle bin's kept slabs go back within
//! two passes (a fifth of `dirty_decay_ms`) and only `KEEP_EMPTY_MIN` stays until `purge`.
//! Another bin of the arena whose slabs have as many pages may take a kept slab
//! (`lend_empty`, under this bin's lock) instead of fresh pages.
//!
//! Under `check:full` each operation checks the slabs it touches, and both lists are scanned
//! whole once per as many operations as the last scan found slabs (at least
//! `SCAN_EVERY_MIN`): the scans cost O(1) slab checks per operation however long the list
//! grows, where a scan per operation made a program with a large heap quadratic.

use crate::diag;
use crate::list;
use crate::size_class::{class_size, compute_slab_pages, NSMALL, SLAB_OBJS, SLAB_PAGES};
use crate::slab::Slab;
use core::mem::MaybeUninit;
use core::ptr::null_mut;

/// Bytes of empty slabs a bin may keep for reuse instead of returning their pages at once
/// (at least one slab); the decay pass returns those that stay unused (see the module doc).
pub const KEEP_EMPTY_BYTES: usize = 1 << 20;

/// Objects of empty slabs a bin may keep (rounded up to whole slabs): the bytes budget alone
/// would let a bin of 16-byte objects keep 65,536 of them. (The compare suite's espresso
/// paid for the kept slabs in peak RSS, 5.9 -> 7.0 MiB, with or without this cap, until other
/// bins of the same page count could take them: `lend_empty`, docs/benchmarks.md, issue 13.)
pub const KEEP_EMPTY_OBJS: usize = 1024;

/// Empty slabs a bin keeps through decay passes (only `purge` returns it).
pub const KEEP_EMPTY_MIN: u32 = 1;

/// How many empty slabs a bin of small class `class` may keep: `KEEP_EMPTY_BYTES` of them or
/// enough for `KEEP_EMPTY_OBJS` objects, whichever is fewer, at least `KEEP_EMPTY_MIN` (a
/// class that is not small: `KEEP_EMPTY_MIN`).
#[inline]
pub fn keep_empty(class: usize) -> u32 {
    match KEEP_EMPTY.get(class) {
        Some(&n) => n,
        None => KEEP_EMPTY_MIN,
    }
}

/// `keep_empty` per class.
static KEEP_EMPTY: [u32; NSMALL] = {
    let mut t = [0u32; NSMALL];
    let mut i = 0;
    while i < NSMALL {
        let by_bytes = KEEP_EMPTY_BYTES / (SLAB_PAGES[i] as usize * crate::os::PAGE);
        let by_objs = KEEP_EMPTY_OBJS.div_ceil(SLAB_OBJS[i] as usize);
        let slabs = if by_bytes < by_objs {
            by_bytes
        } else {
            by_objs
        };
        t[i] = if slabs < KEEP_EMPTY_MIN as usize {
            KEEP_EMPTY_MIN
        } else {
            slabs as u32
        };
        i += 1;
    }
    t
};

/// Under `check:full`, the fewest operations between two scans of a bin's whole list.
pub const SCAN_EVERY_MIN: u32 = 64;

/// Per small class: the current slab, the partly used ones, the kept empty ones and the
/// counters.
pub struct BinState {
    current: *mut Slab,
    /// Slabs with free and allocated objects (not the current one).
    nonfull: *mut Slab,
    /// Kept empty slabs (not the current one), `nempty` of them.
    empty: *mut Slab,
    nempty: u32,
    /// The fewest kept empty slabs since the last `decay`: that many no refill needed.
    nempty_low: u32,
    /// What the arena's mask of bins with kept slabs last heard from this bin
    /// (`kept_changed`), so it is written only when that changes.
    kept_shown: bool,
    /// `check:full`: operations since the last whole scan, and how many to wait for the next.
    ops_since_scan: u32,
    scan_every: u32,
    pub stats: BinStats,
}

/// Builds a counter struct from a list of counters and figures (STYLE rule 7: every statistic
/// declared once). A list is a macro such as [`bin_figures!`] that hands its rows to the macro
/// it is given: `counters!` here makes the struct of the counters an owner updates under its
/// lock (`BinStats`, `arena_state::ArenaStats`), and `stats`'s `figures!` makes, from the same
/// rows, the figure struct, its gathering and merge, the `ctl` names and the printing. A row
/// is one of:
/// - `count field "name" Type Section merge, "doc";`: a counter (a `u64` field `field`),
///   shown as figure `name` (figure field `field`);
/// - `count field as shown "name" Type Section merge, "doc";`: the same, figure field `shown`;
/// - `count field, "doc";`: a counter no figure shows as it is (derived figures read it);
/// - `figure field "name" Type Section merge, "doc";`: a figure with no counter of its own,
///   computed by `stats` (the method `field()` of the list's source there).
///
/// `Type` is the C type `mallctl` reads (`Unsigned`, `U64`, `Size`), `Section` the printed
/// part (`Main`, `Large`, `Thp`, `Mutex`), `merge` how arenas merge (`sum`, `same`). Gives the
/// struct (`Clone`, `Copy`, `Debug`, `PartialEq`), `ZERO` (usable in a `const fn`) and
/// `Default`. The rows are read one macro step each: a list of more than about 120 rows needs
/// a higher `recursion_limit`.
macro_rules! counters {
    (@rows $h:tt [$($acc:tt)*] count $field:ident, $doc:literal; $($rest:tt)*) => {
        counters!(@rows $h [$($acc)* ($field $doc)] $($rest)*);
    };
    (@rows $h:tt [$($acc:tt)*]
        count $field:ident $(as $shown:ident)? $name:literal $ty:ident $sec:ident $merge:ident,
        $doc:literal; $($rest:tt)*) => {
        counters!(@rows $h [$($acc)* ($field $doc)] $($rest)*);
    };
    (@rows $h:tt [$($acc:tt)*]
        figure $field:ident $name:literal $ty:ident $sec:ident $merge:ident, $doc:literal;
        $($rest:tt)*) => {
        counters!(@rows $h [$($acc)*] $($rest)*);
    };
    (@rows [$(#[$meta:meta])* $S:ident] [$(($field:ident $doc:literal))*]) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $S {
            $(#[doc = $doc] pub $field: u64,)*
        }

        impl $S {
            /// Every counter 0.
            pub const ZERO: $S = $S { $($field: 0,)* };
        }

        impl Default for $S {
            fn default() -> $S {
                $S::ZERO
            }
        }
    };
    ($(#[$meta:meta])* $S:ident { $($rows:tt)* }) => {
        counters!(@rows [$(#[$meta])* $S] [] $($rows)*);
    };
}
// Used by `arena_state`, which `--cfg loom` builds leave out.
#[cfg_attr(loom, allow(unused_imports))]
pub(crate) use counters;

/// The counters and figures of one bin (`stats.arenas.<i>.bins.<j>.*`), one row each (the
/// forms are [`counters!`]'s): `bin_figures!(then! { header })` hands them to `then!`. Rows
/// are in the order `ctl` and the printing list the figures.
macro_rules! bin_figures {
    ($then:ident! { $($head:tt)* }) => {
        $then! { $($head)* {
            figure size "size" Size Main same, "the class's block size in bytes";
            count nmalloc "nmalloc" U64 Main sum,
                "blocks handed out (to thread caches in batches)";
            count nfree as ndalloc "ndalloc" U64 Main sum, "blocks returned";
            figure curregs "curregs" Size Main sum,
                "blocks out (held by the program or a thread cache)";
            count nslabs as curslabs "curslabs" Size Main sum, "slabs the bin holds";
            count nfills "nfills" U64 Main sum, "thread-cache fills from the bin";
            count nflushes "nflushes" U64 Main sum, "thread-cache flushes to the bin";
            figure lock_waits "lock_waits" U64 Mutex sum, "times the bin lock was found held";
        } }
    };
}
// Used by `stats`, which `--cfg loom` builds leave out.
#[cfg_attr(loom, allow(unused_imports))]
pub(crate) use bin_figures;

bin_figures!(counters! {
    /// Counters of one bin (objects and slabs), from [`bin_figures!`]; `nslabs` counts the
    /// current, non-full and full slabs.
    BinStats
});

// SAFETY: the raw slab pointers are only used under the bin lock.
unsafe impl Send for BinState {}

impl Default for BinState {
    fn default() -> BinState {
        BinState::new()
    }
}

impl BinState {
    pub const fn new() -> BinState {
        BinState {
            current: null_mut(),
            nonfull: null_mut(),
            empty: null_mut(),
            nempty: 0,
            nempty_low: 0,
            kept_shown: false,
            ops_since_scan: 0,
            scan_every: SCAN_EVERY_MIN,
            stats: BinStats::ZERO,
        }
    }

    /// Fills `out` with up to `out.len()` free objects; `new_slab` supplies a fresh slab (or
    /// null when out of memory) whenever no slab has room. Returns how many were taken.
    ///
    /// # Safety
    /// Every slab `new_slab` returns is live, initialised for this bin's class, unlisted and
    /// owned by this bin from then on (until `flush` or `drain_empty` hands it to `release`).
    pub unsafe fn fill(
        &mut self,
        out: &mut [*mut u8],
        mut new_slab: impl FnMut() -> *mut Slab,
    ) -> usize {
        self.check_amortised();
        let mut n = 0;
        while n < out.len() {
            let mut slab = self.current;
            // SAFETY: the current slab, when set, is a live slab of this bin.
            if slab.is_null() || unsafe { (*slab).is_full() } {
                // Partly used slabs first (they fill up, the empty ones may go back), then a
                // kept empty one, then a new one.
                if !self.nonfull.is_null() {
                    slab = self.nonfull;
                    // SAFETY: non-full slabs are live and listed in this bin.
                    unsafe { list::remove(&mut self.nonfull, slab) };
                } else if !self.empty.is_null() {
                    slab = self.empty;
                    // SAFETY: kept empty slabs are live and listed in this bin.
                    unsafe { list::remove(&mut self.empty, slab) };
                    self.nempty -= 1;
                    self.nempty_low = self.nempty_low.min(self.nempty);
                } else {
                    slab = new_slab();
                    if slab.is_null() {
                        break;
                    }
                    self.stats.nslabs += 1;
                }
                // SAFETY: a live slab of this bin, off every list now.
                unsafe { (*slab).listed = false };
                self.current = slab;
            }
            // SAFETY: `slab` is live and owned by this bin (the contract for new slabs).
            n += unsafe { (*slab).take(out.get_mut(n..).unwrap_or(&mut [])) };
            // SAFETY: as above.
            unsafe { (*slab).check() };
        }
        self.stats.nmalloc += n as u64;
        self.stats.nfills += 1;
        n
    }

    /// Returns objects to their slabs: each item is a pointer and the slab of this bin
    /// holding it. Items of the same slab that follow each other are returned together (one
    /// bitmap store per word, one list update per slab): a thread cache flushes its oldest
    /// objects, which a refill took from one slab in address order, so a flush is a few long
    /// runs (no sort: it would cost more than it saves on such batches).
    /// A slab that empties goes on the kept list, or to `release` when `keep_empty(class)` are
    /// kept already. Returns the first pointer that is not an object start or is already free,
    /// with what is wrong (the runs before it were returned; the caller aborts).
    ///
    /// # Safety
    /// Each item's slab is a live slab this bin owns (one `fill` took from it, and it was not
    /// released since), and the bin's lock is held, as for every method here.
    pub unsafe fn flush(
        &mut self,
        items: &[(*mut u8, *mut Slab)],
        mut release: impl FnMut(*mut Slab),
    ) -> Result<(), (*mut u8, &'static str)> {
        self.check_amortised();
        let mut rest = items;
        while let Some(&(_, slab)) = rest.first() {
            // SAFETY: the contract: each pointer's live slab of this bin, under its lock.
            let s = unsafe { &mut *slab };
            let was_full = s.is_full();
            // The run of `slab` at the front of `rest`: at least its first item.
            let run = s.give_all(slab, rest)?;
            // `run <= rest.len()`; `get` keeps the split free of a panic site.
            rest = rest.get(run..).unwrap_or(&[]);
            // SAFETY: as above.
            unsafe { self.settle(slab, was_full, run, &mut release) };
        }
        self.stats.nflushes += 1;
        Ok(())
    }

    /// As `flush`, for a thread cache's blocks as bare pointers (`tcache::flush_items`): a
    /// run's slab is found by `slab_of` for its first block only, and `Slab::give_run` takes
    /// the blocks after it that lie in the same slab, so a flush of blocks a refill took in
    /// address order looks up one slab per run, not one per block. Stops before the first
    /// block whose slab is not arena `arena`'s (this bin's arena), and returns how many were
    /// returned: the caller sends the rest the general way. Errors as `flush`.
    ///
    /// # Safety
    /// `slab_of(p)` returns the live slab of this bin's class holding `p` (or aborts), and the
    /// bin's lock is held, as for every method here.
    pub unsafe fn flush_ptrs(
        &mut self,
        ptrs: &[*mut u8],
        arena: u32,
        slab_of: impl Fn(*mut u8) -> *mut Slab,
        mut release: impl FnMut(*mut Slab),
    ) -> Result<usize, (*mut u8, &'static str)> {
        self.check_amortised();
        let mut done = 0;
        while let Some(&p) = ptrs.get(done) {
            let slab = slab_of(p);
            // SAFETY: the contract: the live slab of this bin's class holding `p`.
            let s = unsafe { &mut *slab };
            if s.arena != arena {
                break;
            }
            let was_full = s.is_full();
            // The run of `slab` at `done`: at least `p` (or an error naming it).
            let run = s.give_run(ptrs.get(done..).unwrap_or(&[]))?;
            done += run;
            // SAFETY: a live slab of this bin's class and arena: one this bin owns.
            unsafe { self.settle(slab, was_full, run, &mut release) };
        }
        if done > 0 {
            self.stats.nflushes += 1;
        }
        Ok(done)
    }

    /// After `run` objects went back to `slab` (`was_full` before): counts them and moves the
    /// slab to the list it now belongs on: the non-full list, the kept empty slabs, or
    /// `release` when `keep_empty(class)` are kept already.
    ///
    /// # Safety
    /// `slab` is a live slab this bin owns; the bin's lock is held.
    #[inline]
    unsafe fn settle(
        &mut self,
        slab: *mut Slab,
        was_full: bool,
        run: usize,
        release: &mut impl FnMut(*mut Slab),
    ) {
        // SAFETY: the contract.
        let s = unsafe { &mut *slab };
        s.check();
        self.stats.nfree += run as u64;
        if slab == self.current {
            return;
        }
        if s.is_empty() {
            if s.listed {
                // SAFETY: a listed slab that was not empty (it had objects to give back) is on
                // this bin's non-full list.
                unsafe { list::remove(&mut self.nonfull, slab) };
                s.listed = false;
            }
            if self.nempty < keep_empty(s.class as usize) {
                // SAFETY: an unlisted live slab of this bin.
                unsafe { list::push(&mut self.empty, slab) };
                s.listed = true;
                self.nempty += 1;
                return;
            }
            self.stats.nslabs -= 1;
            release(slab);
        } else if was_full {
            // SAFETY: a full slab is never listed; now it has a free object.
            unsafe { list::push(&mut self.nonfull, slab) };
            s.listed = true;
        }
    }

    /// Whether the bin keeps an empty slab (one `lend_empty` would give).
    #[inline]
    pub fn has_kept(&self) -> bool {
        self.nempty > 0
    }

    /// Whether the bin keeps an empty slab, when that changed since the last call (`None`
    /// when it did not): the arena publishes it in its mask of bins with kept slabs, which
    /// so costs nothing on a fill or flush that changes nothing.
    #[inline]
    pub fn kept_changed(&mut self) -> Option<bool> {
        let now = self.has_kept();
        if now == self.kept_shown {
            return None;
        }
        self.kept_shown = now;
        Some(now)
    }

    /// Hands one kept empty slab to another bin of the same arena that needs a new slab of
    /// the same page count, or null when none is kept: the kept slabs of one class are pages
    /// another class can use, so a program that frees in one class and then allocates in
    /// another reuses them instead of faulting in fresh pages. The slab leaves this bin (off
    /// its list and counts; the low-water mark counts it as needed, like a refill's); the
    /// taker re-initialises it for its class. The top of the list, as a refill would take:
    /// O(1), and the pages touched last.
    pub fn lend_empty(&mut self) -> *mut Slab {
        let s = self.empty;
        if s.is_null() {
            return s;
        }
        // SAFETY: `s` is on this bin's empty list.
        unsafe {
            list::remove(&mut self.empty, s);
            (*s).listed = false;
        }
        self.nempty -= 1;
        self.nempty_low = self.nempty_low.min(self.nempty);
        self.stats.nslabs -= 1;
        s
    }

    /// Gives every kept empty slab (and an empty current one) to `release`: purging.
    pub fn drain_empty(&mut self, mut release: impl FnMut(*mut Slab)) {
        self.release_empty(self.nempty, &mut release);
        let cur = self.current;
        // SAFETY: the current slab, when set, is live.
        if !cur.is_null() && unsafe { (*cur).is_empty() } {
            self.current = null_mut();
            self.stats.nslabs -= 1;
            release(cur);
        }
        self.check();
        self.ops_since_scan = 0;
    }

    /// The decay pass's step (see the module doc): gives `release` the kept empty slabs no
    /// refill took since the last call (the low-water mark of `nempty`), keeping at least
    /// `KEEP_EMPTY_MIN`. Returns how many went back.
    pub fn decay(&mut self, mut release: impl FnMut(*mut Slab)) -> u32 {
        let idle = self
            .nempty_low
            .min(self.nempty.saturating_sub(KEEP_EMPTY_MIN));
        self.release_empty(idle, &mut release);
        self.nempty_low = self.nempty;
        self.check();
        idle
    }

    /// Gives `n <= nempty` kept empty slabs to `release`: the ones longest on the list (the
    /// list is a stack: refills take its top, the slabs they touched last).
    fn release_empty(&mut self, n: u32, release: &mut impl FnMut(*mut Slab)) {
        let mut s = self.empty;
        // Past the `nempty - n` kept at the top.
        for _ in n..self.nempty {
            // SAFETY: kept slabs are live and listed.
            s = unsafe { (*s).next };
        }
        while !s.is_null() {
            // SAFETY: `s` is on this bin's empty list; read the link before unlinking.
            let next = unsafe { (*s).next };
            // SAFETY: as above.
            unsafe {
                list::remove(&mut self.empty, s);
                (*s).listed = false;
            }
            self.nempty -= 1;
            self.stats.nslabs -= 1;
            release(s);
            s = next;
        }
        self.nempty_low = self.nempty_low.min(self.nempty);
    }

    /// The checks of one operation under `check:full`: the current slab always, the whole list
    /// when its turn comes (see the module doc). Nothing in normal operation.
    #[inline]
    fn check_amortised(&mut self) {
        if !diag::full_checks() {
            return;
        }
        if !self.current.is_null() {
            // SAFETY: the current slab is live while the bin lock is held.
            unsafe { (*self.current).check() };
        }
        self.ops_since_scan += 1;
        if self.ops_since_scan >= self.scan_every {
            let listed = self.scan();
            self.ops_since_scan = 0;
            self.scan_every = listed.max(SCAN_EVERY_MIN);
        }
    }

    /// Invariant scan (debug and test builds, `check:full`): the listed slabs have room and
    /// are sound, `nempty` is right. Walks the whole list: the operations call it at a rate
    /// (`check_amortised`).
    pub fn check(&self) {
        if diag::full_checks() {
            self.scan();
        }
    }

    /// The scan of `check`; returns how many slabs are listed.
    fn scan(&self) -> u32 {
        let mut steps = 0;
        let mut empties = 0;
        // The bin's class, from any slab it holds (`keep_empty`'s bound).
        let mut keep = KEEP_EMPTY_MIN;
        for (head, empty) in [(self.nonfull, false), (self.empty, true)] {
            let mut s = head;
            while !s.is_null() {
                // SAFETY: listed slabs are live while the bin lock is held.
                let slab = unsafe { &*s };
                diag::invariant(
                    slab.listed && !slab.is_full() && s != self.current,
                    "a bin's slab list holds a full, unlisted or current slab",
                );
                diag::invariant(
                    slab.is_empty() == empty,
                    "a bin's non-full list holds an empty slab, or its empty list a used one",
                );
                slab.check();
                keep = keep_empty(slab.class as usize);
                empties += empty as u32;
                s = slab.next;
                steps += 1;
                diag::invariant(steps < 1 << 24, "a bin's slab list has a cycle");
            }
        }
        if !self.current.is_null() {
            // SAFETY: the current slab is live while the bin lock is held.
            unsafe { (*self.current).check() };
        }
        diag::invariant(
            empties == self.nempty,
            "a bin's count of empty slabs is wrong",
        );
        diag::invariant(
            self.nempty <= keep && self.nempty_low <= self.nempty,
            "a bin keeps too many empty slabs",
        );
        steps
    }
}

/// The first `n` items of `buf` as initialised values (a flush's stack buffer, filled in order
/// and not zeroed first).
///
/// # Safety
/// `n <= buf.len()` and `buf[..n]` are initialised.
#[inline(always)]
pub unsafe fn init_prefix<T>(buf: &mut [MaybeUninit<T>], n: usize) -> &mut [T] {
    debug_assert!(n <= buf.len());
    // SAFETY: per the contract, the first `n` items are initialised `T`s, and
    // `MaybeUninit<T>` has `T`'s layout.
    unsafe { core::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<T>(), n) }
}

/// Calls `f(key, group)` once per distinct key of `items`, where each group holds the items
/// of that key (reordering `items`): a flush takes each owner's lock once per batch.
pub fn for_each_group<T>(
    mut items: &mut [T],
    key: impl Fn(&T) -> u32,
    mut f: impl FnMut(u32, &mut [T]),
) {
    while let Some(first) = items.first() {
        let home = key(first);
        // Moves the matches to the front: `k` of them so far, so `k <= i`; the swap is written
        // with `split_at_mut_checked` and `get_mut` so it compiles to no bounds check (`k == i` needs
        // no swap, and `k > i` cannot happen).
        let mut k = 0;
        for i in 0..items.len() {
            let Some((before, from_i)) = items.split_at_mut_checked(i) else {
                break;
            };
            let Some(item) = from_i.first_mut() else {
                break;
            };
            if key(item) == home {
                if let Some(slot) = before.get_mut(k) {
                    core::mem::swap(slot, item);
                }
                k += 1;
            }
        }
        // k <= len (the count of matches); `_checked` keeps the split free of a panic site.
        let Some((mine, rest)) = items.split_at_mut_checked(k) else {
            return;
        };
        f(home, mine);
        items = rest;
    }
}

/// The largest small-class batch capacity (`small_batch_cap`): the thread cache's largest bin
/// capacity, `arena::BATCH_MAX`, which `tcache` asserts equal.
pub const BATCH_CAP_MAX: usize = 128;

/// A small class's cache bin holds at least this many bytes of blocks (within
/// 16..=`BATCH_CAP_MAX` blocks): twice a slab's objects alone gave a 256-byte class 32 slots,
/// so a refill and a flush (a bin lock each) every 16 blocks; with this budget it holds 64 and
/// moves 32 at a time (callgrind, a batch of 1,000 blocks of 256 B: 222 -> 206 instructions
/// per block; docs/benchmarks.md, "Session 8, F8"). Classes of 512 B and up keep twice a
/// slab's objects (at least 32 up to 8 KiB, `size_class::SLAB_MIN_OBJS`).
pub const SMALL_BIN_BYTES: usize = 16 << 10;

/// Capacity of the thread cache's bin of small class `class` (`tcache::bin_cap`): twice the
/// objects of one of its slabs or `SMALL_BIN_BYTES` of blocks, whichever is more, at least 16
/// and at most `BATCH_CAP_MAX`. A refill takes half of it and a flush gives back half.
pub const fn small_batch_cap(class: usize) -> usize {
    // A table (no division or index that could panic at run time: `tcache::bin_cap` runs
    // when a cache is created); 0 past the small classes.
    if class < NSMALL {
        SMALL_BATCH_CAPS[class] as usize
    } else {
        0
    }
}

/// Twice a slab's objects of class `i`, within 16..=`BATCH_CAP_MAX` (compile time only).
const fn slab_batch(i: usize) -> usize {
    let twice = compute_slab_pages(i) * crate::os::PAGE / class_size(i) * 2;
    if twice < 16 {
        16
    } else if twice > BATCH_CAP_MAX {
        BATCH_CAP_MAX
    } else {
        twice
    }
}

/// `small_batch_cap` per small class, computed at compile time.
const SMALL_BATCH_CAPS: [u8; NSMALL] = {
    let mut t = [0u8; NSMALL];
    let mut i = 0;
    while i < NSMALL {
        let by_bytes = SMALL_BIN_BYTES / class_size(i);
        let by_slab = slab_batch(i);
        let want = if by_bytes > by_slab {
            by_bytes
        } else {
            by_slab
        };
        t[i] = if want > BATCH_CAP_MAX {
            BATCH_CAP_MAX as u8
        } else {
            want as u8
        };
        i += 1;
    }
    t
};
const _: () = assert!(BATCH_CAP_MAX <= u8::MAX as usize);

/// `remote_cap` per small class, computed at compile time.
const REMOTE_CAPS: [u8; NSMALL] = {
    let mut t = [0u8; NSMALL];
    let mut i = 0;
    while i < NSMALL {
        t[i] = slab_batch(i).div_ceil(2) as u8;
        i += 1;
    }
    t
};

/// Capacity of the remote-free stack of small class `class`: half of twice a slab's objects
/// (8 to 64 blocks), the batch a cache flush carried before `SMALL_BIN_BYTES` (which made some
/// bins larger). A full stack goes home whole; a larger stack would park more blocks away
/// from their arena (larson: peak RSS 154.0 MiB at this size, 161.3 with whole-bin stacks) for
/// fewer bin locks.
pub const fn remote_cap(class: usize) -> usize {
    if class < NSMALL {
        REMOTE_CAPS[class] as usize
    } else {
        0
    }
}

/// Where each class's stack starts in a remote-free storage block, in items; entry `NSMALL`
/// is the block's length (`REMOTE_SLOTS`).
static REMOTE_START: [u16; NSMALL + 1] = {
    let mut t = [0u16; NSMALL + 1];
    let mut i = 0;
    while i < NSMALL {
        t[i + 1] = t[i] + remote_cap(i) as u16;
        i += 1;
    }
    t
};

/// Items in a remote-free storage block: the sum of every small class's stack capacity.
pub const REMOTE_SLOTS: usize = {
    let mut n = 0;
    let mut i = 0;
    while i < NSMALL {
        n += remote_cap(i);
        i += 1;
    }
    n
};

/// One buffered remote free: the block and the slab holding it.
pub type RemoteItem = (*mut u8, *mut Slab);

/// Bytes of a remote-free storage block ([`RemoteFrees::attach`]): 16 per item, 15,680 in all
/// (as much as the thread cache's own small-class stacks, which hold twice the items at 8 B).
pub const REMOTE_STORAGE_BYTES: usize = REMOTE_SLOTS * core::mem::size_of::<RemoteItem>();

const _: () = assert!(
    REMOTE_SLOTS <= u16::MAX as usize,
    "REMOTE_START counts in u16"
);
const _: () = assert!(NSMALL <= 64, "one bit per small class in a u64 mask");

/// Small blocks a thread freed that belong to another arena's bins ("remote" frees), each
/// with its slab, buffered until they go home in batches. They never reach the freeing
/// thread's cache, so its next `malloc` cannot return a block another core may be writing
/// next to: a free from another thread would otherwise hand it memory on a cache line its
/// owner's neighbouring objects share (passive false sharing, mimalloc-bench's
/// `cache-scratch`).
///
/// One stack per small class, of what a cache flush of the class carries (`remote_cap`: half
/// the cache bin, 8 to 64 blocks): a full stack goes home whole
/// ([`RemoteFrees::drain_class`]), one lock of the owner's bin per arena present (usually
/// one), so a thread whose every free is remote (a consumer) takes a bin lock per flush-sized
/// batch, as its cache flushes did before remote frees had a path of their own. (A single
/// buffer shared by all classes took a lock per 7-8 blocks in `xmalloc`'s 17 classes; stacks
/// of the whole bin's capacity cost larson 7 MiB more peak RSS under callgrind, for 0.2%
/// fewer instructions in `xmalloc`: docs/benchmarks.md.) The stacks live in one storage block of `REMOTE_STORAGE_BYTES`
/// that the owner attaches at the thread's first remote free (`attach`), so a thread that
/// frees only its own blocks pays nothing but this header.
///
/// The buffer is the thread's own (inside its `Tcache`): no atomics. Invariants: with no
/// storage every count is 0; `counts[c] <= remote_cap(c)`; bit `c` of `nonempty` is set
/// exactly when `counts[c] > 0`; every item of stack `c` is a block its slab holds, the slab
/// is of class `c` and its `arena` is not the thread's. The slab's bitmap stays the truth: a
/// block here is allocated as far as its slab knows until it is drained, so a second free of
/// it is caught by the drain's `give_all` (or by `push` when it repeats the last one of its
/// class).
pub struct RemoteFrees {
    /// The storage block (`REMOTE_SLOTS` items; class `c`'s stack at `REMOTE_START[c]`), or
    /// null before `attach`.
    items: *mut RemoteItem,
    counts: [u16; NSMALL],
    /// Bit `c`: stack `c` holds something.
    nonempty: u64,
    /// Bit `c`: stack `c` filled up and went home since the last `drain_idle` (it is in use:
    /// the GC step leaves it alone).
    busy: u64,
}

impl Default for RemoteFrees {
    fn default() -> Self {
        Self::new()
    }
}

impl RemoteFrees {
    /// Empty, with no storage.
    pub const fn new() -> Self {
        RemoteFrees {
            items: null_mut(),
            counts: [0; NSMALL],
            nonempty: 0,
            busy: 0,
        }
    }

    /// Whether a storage block is attached.
    #[inline]
    pub fn has_storage(&self) -> bool {
        !self.items.is_null()
    }

    /// Gives the buffer its storage block.
    ///
    /// # Safety
    /// `storage` is `REMOTE_STORAGE_BYTES` of writable memory aligned for pointers, used by
    /// nothing else until `detach` returns it; no storage is attached yet.
    pub unsafe fn attach(&mut self, storage: *mut u8) {
        diag::invariant(
            self.items.is_null(),
            "a remote-free buffer given a second storage block",
        );
        self.items = storage.cast::<RemoteItem>();
    }

    /// Takes the storage block back (null when none was attached); the buffer must be empty
    /// (drained), and has no storage afterwards.
    pub fn detach(&mut self) -> *mut u8 {
        diag::invariant(
            self.is_empty(),
            "a remote-free buffer's storage taken back with blocks in it",
        );
        core::mem::replace(&mut self.items, null_mut()).cast::<u8>()
    }

    /// Blocks buffered (all classes).
    #[cfg(any(test, loom))]
    pub fn len(&self) -> usize {
        self.counts.iter().map(|&n| n as usize).sum()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.nonempty == 0
    }

    /// Buffers `p` (held by `slab`, of small class `class`) on its class's stack; false when
    /// there is no storage or the stack is full (the caller attaches storage or drains the
    /// class, then pushes again). A pointer equal to the last one on its stack is an
    /// immediate double free: it aborts naming the pointer.
    ///
    /// # Safety
    /// `slab` is the live slab holding `p`, an allocated object start of it, and `class` is
    /// the slab's class (`check` and the drains read the slab).
    #[inline]
    pub unsafe fn push(&mut self, p: *mut u8, slab: *mut Slab, class: usize) -> bool {
        let (Some(n), Some(&start), Some(&end)) = (
            self.counts.get_mut(class),
            REMOTE_START.get(class),
            REMOTE_START.get(class + 1),
        ) else {
            diag::fatal_index(
                "a remote free of a class past the small ones",
                class,
                NSMALL,
            )
        };
        let count = *n as usize;
        if self.items.is_null() || count >= (end - start) as usize {
            return false;
        }
        // SAFETY: `start + count < end <= REMOTE_SLOTS`: inside the storage block, whose
        // items `0..count` of this stack were written by earlier pushes.
        unsafe {
            let top = self.items.add(start as usize + count);
            if count > 0 && (*top.sub(1)).0 == p {
                diag::fatal_ptr(crate::slab::DOUBLE, p);
            }
            top.write((p, slab));
        }
        *n += 1;
        self.nonempty |= 1 << class;
        true
    }

    /// Empties stack `class`: calls `home(arena, class, group)` once per arena present, where
    /// `group` holds that arena's blocks of the stack with their slabs (the arena's bin of
    /// that class flushes them under its lock: `BinState::flush`), and marks the class busy.
    ///
    /// # Safety
    /// Every buffered slab is live (a slab holding an allocated block is never released, and
    /// its `arena` and `class` never change while it is live).
    pub unsafe fn drain_class(
        &mut self,
        class: usize,
        mut home: impl FnMut(u32, usize, &mut [RemoteItem]),
    ) {
        let (Some(n), Some(&start)) = (self.counts.get_mut(class), REMOTE_START.get(class)) else {
            return;
        };
        let count = core::mem::replace(n, 0) as usize;
        self.nonempty &= !(1u64 << class);
        self.busy |= 1u64 << class;
        if count == 0 {
            return;
        }
        // SAFETY: a non-empty stack has storage; items `start..start + count` are inside it
        // and were written by `push`; nothing else refers to them until the next push.
        let run = unsafe { core::slice::from_raw_parts_mut(self.items.add(start as usize), count) };
        for_each_group(
            run,
            // SAFETY: the contract (live slabs, fields fixed while live).
            |&(_, s)| unsafe { (*s).arena },
            |arena, group| home(arena, class, group),
        );
    }

    /// Empties every stack (`drain_class` each non-empty one): thread exit, `flush_all`.
    ///
    /// # Safety
    /// As `drain_class`.
    pub unsafe fn drain(&mut self, mut home: impl FnMut(u32, usize, &mut [RemoteItem])) {
        while self.nonempty != 0 {
            let class = self.nonempty.trailing_zeros() as usize;
            // SAFETY: forwarded contract.
            unsafe { self.drain_class(class, &mut home) };
        }
        self.busy = 0;
    }

    /// The GC step's drain: empties the stacks that did not fill up and go home since the
    /// last call (a stack in use drains itself when full; an idle one waits at most two
    /// calls), then forgets which did.
    ///
    /// # Safety
    /// As `drain_class`.
    pub unsafe fn drain_idle(&mut self, mut home: impl FnMut(u32, usize, &mut [RemoteItem])) {
        let mut idle = self.nonempty & !self.busy;
        while idle != 0 {
            let class = idle.trailing_zeros() as usize;
            idle &= idle - 1;
            // SAFETY: forwarded contract.
            unsafe { self.drain_class(class, &mut home) };
        }
        self.busy = 0;
    }

    /// Invariant scan (debug and test builds, `check:full`): counts in bounds and matching
    /// the mask, and every buffered block of its stack's class and not of arena `mine`.
    pub fn check(&self, mine: u32) {
        if !diag::full_checks() {
            return;
        }
        for (class, (&n, ends)) in self.counts.iter().zip(REMOTE_START.windows(2)).enumerate() {
            // `windows(2)` gives two-item slices; `REMOTE_START` is the compile-time table (a
            // call of `remote_cap` here would compute the class size at run time).
            let cap = match ends {
                &[start, end] => end - start,
                _ => 0,
            };
            diag::invariant(n <= cap, "a remote-free stack holds more than its capacity");
            diag::invariant(
                (n > 0) == (self.nonempty & (1 << class) != 0),
                "a remote-free stack's count disagrees with the non-empty mask",
            );
            if n == 0 {
                continue;
            }
            diag::invariant(
                !self.items.is_null(),
                "a remote-free stack holds blocks without storage",
            );
            let start = ends.first().copied().unwrap_or(0) as usize;
            for i in 0..n as usize {
                // SAFETY: items `start..start + n` of the storage block were written by `push`.
                let (_, s) = unsafe { *self.items.add(start + i) };
                // SAFETY: buffered slabs are live (see `drain_class`).
                let (arena, slab_class) = unsafe { ((*s).arena, (*s).class as usize) };
                diag::invariant(
                    arena != mine,
                    "a remote-free buffer holds a block of the thread's own arena",
                );
                diag::invariant(
                    slab_class == class,
                    "a remote-free stack holds a block of another class",
                );
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::size_class::class_of;
    extern crate std;
    use std::boxed::Box;
    use std::vec::Vec;

    fn new_slab(addr: usize, class: usize) -> *mut Slab {
        // SAFETY: Slab is plain data; all-zero is a valid value before init.
        let s: *mut Slab = Box::into_raw(Box::new(unsafe { core::mem::zeroed() }));
        // SAFETY: fresh box.
        unsafe { (*s).init(addr, class, 0) };
        s
    }

    #[test]
    fn full_scans_come_once_per_as_many_operations_as_slabs_listed() {
        let was_on = diag::full_checks();
        diag::set_full_checks(true);
        let class = class_of(1024);
        let mut bin = BinState::new();
        let mut made = Vec::new();
        let mut next_addr = 0x100000;
        let mut out = std::vec![null_mut(); 20_000];
        // SAFETY: each slab is fresh, of `class`, and given to the bin only.
        let n = unsafe {
            bin.fill(&mut out, || {
                let s = new_slab(next_addr, class);
                next_addr += 0x10000;
                made.push(s);
                s
            })
        };
        assert_eq!(n, out.len());
        assert!(made.len() > 500, "{} slabs", made.len());
        let owner = |p: *mut u8| -> *mut Slab {
            // Test slabs are 64 KiB apart from 0x100000, in the order made.
            made[(p as usize - 0x100000) / 0x10000]
        };
        // One free per slab (the current one aside) lists every slab as non-full; a second
        // round of one free per slab is as many operations as slabs listed.
        let mut scans = 0;
        for round in 0..2 {
            for &p in out.iter().skip(round) {
                let slab = owner(p);
                // SAFETY: test slabs are live.
                let first = unsafe { (*slab).index_of(p as usize) } == Some(round);
                if slab == bin.current || !first {
                    continue;
                }
                // SAFETY: `slab` is the live test slab holding p, which this bin owns.
                unsafe { bin.flush(&[(p, slab)], |_| {}) }.unwrap();
                scans += (bin.ops_since_scan == 0) as usize;
            }
        }
        let listed = made.len() - 1;
        assert_eq!(bin.scan(), listed as u32);
        // A scan per operation would be about 2 * listed (10,000) scans, one per
        // SCAN_EVERY_MIN operations 150; the wait doubling with the list, a few per round.
        assert!(scans <= 32, "{scans} scans for {listed} slabs listed");
        assert!(bin.scan_every as usize >= listed, "{}", bin.scan_every);
        if !was_on {
            diag::set_full_checks(false);
        }
        for s in made {
            // SAFETY: every test slab came from Box::into_raw and is no longer used.
            drop(unsafe { Box::from_raw(s) });
        }
    }

    /// The slab of `p` among test slabs made 64 KiB apart from 0x100000, in order.
    fn owner_in(made: &[*mut Slab], p: *mut u8) -> *mut Slab {
        made[(p as usize - 0x100000) / 0x10000]
    }

    #[test]
    fn keeps_empty_slabs_up_to_the_budget_and_decay_returns_the_idle_ones() {
        let class = class_of(1024);
        let keep = keep_empty(class) as usize;
        // 1 KiB slabs are four pages of 16 objects (`SLAB_MIN_OBJS`): the bytes and the
        // objects budgets agree.
        let objs = SLAB_OBJS[class] as usize;
        assert_eq!((SLAB_PAGES[class], objs), (4, 16));
        assert_eq!(keep, KEEP_EMPTY_BYTES / 16384);
        let mut bin = BinState::new();
        let mut made = Vec::new();
        let mut next_addr = 0x100000;
        let mut new_slab_fn = |made: &mut Vec<*mut Slab>| {
            let s = new_slab(next_addr, class);
            next_addr += 0x10000;
            made.push(s);
            s
        };
        // Ten slabs more than the bin may keep, all handed out.
        let mut out = std::vec![null_mut(); (keep + 10) * objs];
        // SAFETY: each slab is fresh, of `class`, and given to the bin only.
        let n = unsafe { bin.fill(&mut out, || new_slab_fn(&mut made)) };
        assert_eq!(n, out.len());
        assert_eq!(made.len(), keep + 10);
        let items: Vec<_> = out.iter().map(|&p| (p, owner_in(&made, p))).collect();
        let mut released = Vec::new();
        // SAFETY: each item names its live test slab, owned by this bin.
        unsafe { bin.flush(&items, |s| released.push(s)) }.unwrap();
        // The current slab stays, `keep` are kept empty, the rest go back.
        assert_eq!(bin.nempty as usize, keep);
        assert_eq!(released.len(), made.len() - 1 - keep);
        assert_eq!(bin.stats.nslabs as usize, 1 + keep);
        bin.check();
        // A decay right after: the refill above needed no kept slab, but none was kept
        // then, so nothing is idle yet.
        assert_eq!(bin.decay(|s| released.push(s)), 0);
        // A refill takes the current slab's objects and two kept slabs: those two were
        // needed since the last pass, the others were not.
        let mut again = std::vec![null_mut(); 3 * objs];
        // SAFETY: as above; no new slab is needed.
        assert_eq!(unsafe { bin.fill(&mut again, || unreachable!()) }, 3 * objs);
        assert_eq!(bin.nempty as usize, keep - 2);
        let back: Vec<_> = again.iter().map(|&p| (p, owner_in(&made, p))).collect();
        // SAFETY: as above.
        unsafe { bin.flush(&back, |s| released.push(s)) }.unwrap();
        assert_eq!(bin.nempty as usize, keep);
        let before = released.len();
        assert_eq!(bin.decay(|s| released.push(s)) as usize, keep - 2);
        assert_eq!(released.len() - before, keep - 2);
        assert_eq!(bin.nempty, 2);
        bin.check();
        // The two the refill used go back at the next pass, down to KEEP_EMPTY_MIN.
        assert_eq!(bin.decay(|s| released.push(s)), 2 - KEEP_EMPTY_MIN);
        assert_eq!(bin.nempty, KEEP_EMPTY_MIN);
        assert_eq!(bin.decay(|s| released.push(s)), 0);
        // A double free is reported, naming the pointer.
        let cur = out
            .iter()
            .position(|&p| owner_in(&made, p) == bin.current)
            .unwrap();
        // SAFETY: as above (the current slab is never released).
        let err = unsafe { bin.flush(&items[cur..cur + 1], |_| {}) };
        assert_eq!(err, Err((out[cur], "double free of")));
        let mut drained = Vec::new();
        bin.drain_empty(|s| drained.push(s));
        assert_eq!(drained.len(), KEEP_EMPTY_MIN as usize + 1);
        assert_eq!(bin.stats.nslabs, 0);
        // Every slab went back exactly once.
        released.extend(drained);
        released.sort();
        released.dedup();
        assert_eq!(released.len(), made.len());
        for s in made {
            // SAFETY: every test slab came from Box::into_raw and is no longer used.
            drop(unsafe { Box::from_raw(s) });
        }
    }

    /// A cache's flush as bare pointers: one slab lookup per run of blocks of one slab, the
    /// blocks back in their bitmaps, a stop before a block of another arena's slab, and a
    /// double free named.
    #[test]
    fn flush_ptrs_looks_up_one_slab_per_run() {
        let class = class_of(1024);
        let objs = SLAB_OBJS[class] as usize;
        let mut bin = BinState::new();
        let mut made = Vec::new();
        let mut next_addr = 0x100000;
        let mut out = std::vec![null_mut(); 3 * objs];
        // SAFETY: each slab is fresh, of `class`, and given to the bin only.
        let n = unsafe {
            bin.fill(&mut out, || {
                let s = new_slab(next_addr, class);
                next_addr += 0x10000;
                made.push(s);
                s
            })
        };
        assert_eq!((n, made.len()), (out.len(), 3));
        let lookups = std::cell::Cell::new(0);
        let lookup = |p: *mut u8| {
            lookups.set(lookups.get() + 1);
            owner_in(&made, p)
        };
        // SAFETY: `lookup` gives each block's live test slab, which this bin owns.
        let r = unsafe { bin.flush_ptrs(&out, 0, lookup, |_| {}) };
        assert_eq!(r, Ok(out.len()));
        assert_eq!(lookups.get(), 3, "one lookup per slab's run");
        assert_eq!((bin.stats.nmalloc, bin.stats.nfree), (n as u64, n as u64));
        for &s in &made {
            // SAFETY: test slabs are live.
            assert!(unsafe { (*s).is_empty() });
        }
        // The same blocks again: a double free, named.
        // SAFETY: as above.
        let r = unsafe { bin.flush_ptrs(&out[..1], 0, |p| owner_in(&made, p), |_| {}) };
        assert_eq!(r, Err((out[0], crate::slab::DOUBLE)));
        // Two slabs' worth out again; the second slab's blocks belong to arena 9 (a chunk
        // that changed hands): the flush stops there and says how far it went.
        let mut again = std::vec![null_mut(); 2 * objs];
        // SAFETY: as above; kept slabs serve the refill.
        assert_eq!(unsafe { bin.fill(&mut again, null_mut) }, again.len());
        let second = owner_in(&made, again[objs]);
        assert!(again[..objs].iter().all(|&p| owner_in(&made, p) != second));
        // SAFETY: a test slab, not touched by anything else.
        unsafe { (*second).arena = 9 };
        // SAFETY: as above.
        let r = unsafe { bin.flush_ptrs(&again, 0, |p| owner_in(&made, p), |_| {}) };
        assert_eq!(r, Ok(objs));
        // SAFETY: a live test slab.
        let untouched = unsafe { (*second).nfree } == 0;
        assert!(untouched, "the other arena's slab untouched");
        for s in made {
            // SAFETY: every test slab came from Box::into_raw and is no longer used.
            drop(unsafe { Box::from_raw(s) });
        }
    }

    /// The remote stacks: a block goes on its class's stack, a full stack refuses the next
    /// push, `drain_class` sends one class home grouped by arena, and the GC step's
    /// `drain_idle` leaves a class that went home full since the last step and takes the
    /// others; `drain` takes everything.
    #[test]
    fn remote_stacks_fill_per_class_and_drain_by_class() {
        let (c8, c64) = (class_of(8), class_of(64));
        // Two arenas' slabs (1 and 2) of each class; the thread's own arena is 0.
        let slabs: Vec<*mut Slab> = [(c8, 1), (c8, 2), (c64, 1)]
            .iter()
            .enumerate()
            .map(|(i, &(c, arena))| {
                let s = new_slab(0x100000 + i * 0x10000, c);
                // SAFETY: a fresh test slab.
                unsafe { (*s).arena = arena };
                s
            })
            .collect();
        let mut storage = std::vec![0u64; REMOTE_STORAGE_BYTES / 8];
        let mut remote = RemoteFrees::new();
        // SAFETY: test slabs are live; the pointers are never dereferenced.
        assert!(!unsafe { remote.push(0x100000 as *mut u8, slabs[0], c8) });
        // SAFETY: REMOTE_STORAGE_BYTES of aligned memory, the buffer's alone.
        unsafe { remote.attach(storage.as_mut_ptr().cast()) };
        let cap8 = remote_cap(c8);
        for i in 0..cap8 {
            let slab = slabs[i % 2];
            let p = (0x100000 + (i % 2) * 0x10000 + 8 * i) as *mut u8;
            // SAFETY: as above.
            assert!(unsafe { remote.push(p, slab, c8) }, "push {i}");
        }
        // SAFETY: as above.
        assert!(!unsafe { remote.push(0x100008 as *mut u8, slabs[0], c8) });
        // SAFETY: as above.
        assert!(unsafe { remote.push(0x120000 as *mut u8, slabs[2], c64) });
        assert_eq!(remote.len(), cap8 + 1);
        remote.check(0);
        let mut homes = Vec::new();
        let mut home = |arena: u32, class: usize, group: &mut [RemoteItem]| {
            // SAFETY: test slabs are live.
            assert!(group.iter().all(|&(_, s)| unsafe { (*s).arena } == arena));
            homes.push((arena, class, group.len()));
        };
        // SAFETY: test slabs are live.
        unsafe { remote.drain_class(c8, &mut home) };
        homes.sort();
        assert_eq!(homes, [(1, c8, cap8 / 2), (2, c8, cap8 / 2)]);
        assert_eq!(remote.len(), 1);
        // The 8 B class went home full: the GC step leaves it, takes the idle 64 B one.
        // SAFETY: as above.
        assert!(unsafe { remote.push(0x100010 as *mut u8, slabs[0], c8) });
        let mut homes = Vec::new();
        // SAFETY: as above.
        unsafe { remote.drain_idle(|a, c, g| homes.push((a, c, g.len()))) };
        assert_eq!(homes, [(1, c64, 1)]);
        // At the next step the 8 B class is idle.
        homes.clear();
        // SAFETY: as above.
        unsafe { remote.drain_idle(|a, c, g| homes.push((a, c, g.len()))) };
        assert_eq!(homes, [(1, c8, 1)]);
        assert!(remote.is_empty());
        // SAFETY: as above.
        assert!(unsafe { remote.push(0x120010 as *mut u8, slabs[2], c64) });
        // SAFETY: as above.
        unsafe { remote.drain(|_, _, _| {}) };
        assert!(remote.is_empty());
        assert_eq!(remote.detach(), storage.as_mut_ptr().cast::<u8>());
        for s in slabs {
            // SAFETY: every test slab came from Box::into_raw and is no longer used.
            drop(unsafe { Box::from_raw(s) });
        }
    }

    #[test]
    fn groups_by_key() {
        let mut v = [3u32, 1, 3, 2, 1, 3];
        let mut seen = Vec::new();
        for_each_group(
            &mut v,
            |x| *x,
            |k, g| {
                assert!(g.iter().all(|x| *x == k));
                seen.push((k, g.len()));
            },
        );
        // One group per key, each whole (the order of later groups follows the swaps).
        seen.sort();
        assert_eq!(seen, [(1, 2), (2, 1), (3, 3)]);
    }
}
