//! The debug modes of the entry points (`junk`, `zero`, `check:full`): junk fills, the
//! redzone after each small block under `check:full` and its check at free, the double and
//! interior free checks before a fill. Everything here is off the fast paths: `alloc` comes
//! here only when `diag::debug()` is set.

use super::{alloc_arena_plain, cache_take, free_arena_plain};
use crate::arena::{self, Owner};
use crate::diag;
use crate::size_class::*;
use crate::tcache::Tcache;
use core::ptr::{self, null_mut};

/// Under `check:full`, every small block ends in a redzone: `REDZONE_BYTE`s after the
/// requested bytes, then the requested size as a little-endian `u32` in the block's last four
/// bytes. Requests are served from the class of `size + REDZONE`, so every small block has
/// one and `free` checks it; blocks that become large through the extra bytes have none.
pub const REDZONE: usize = 16;
const REDZONE_BYTE: u8 = 0xfe;
/// jemalloc's junk bytes: new blocks, freed blocks.
pub const JUNK_ALLOC: u8 = 0xa5;
pub const JUNK_FREE: u8 = 0x5a;
/// Small blocks are junk-filled whole; larger ones only this many bytes at each end. Filling
/// a whole large or huge block faults in every page of it, where programs often touch only the
/// start of a big buffer: `sort` of a 10 MB file reached 789 MB of peak RSS under `junk:true`
/// against 111 MB without (its buffer is sized for far more than the file).
pub const JUNK_EDGE: usize = 4096;

/// Fills `len` bytes at `p` with `byte`: all of a small block, the first and last
/// `JUNK_EDGE` bytes of a larger one.
///
/// # Safety
/// `p` is valid for writes of `len` bytes.
pub(super) unsafe fn junk(p: *mut u8, len: usize, byte: u8, small: bool) {
    // SAFETY: both ranges lie inside the caller's `len` bytes.
    unsafe {
        if small || len <= 2 * JUNK_EDGE {
            ptr::write_bytes(p, byte, len);
        } else {
            ptr::write_bytes(p, byte, JUNK_EDGE);
            ptr::write_bytes(p.add(len - JUNK_EDGE), byte, JUNK_EDGE);
        }
    }
}

/// Allocates under the debug modes: from the cache `tc` when not null and the class is
/// cached, else from `arena`; then the redzone and the fills.
#[cold]
#[inline(never)]
pub(super) fn alloc_arena_debug(
    arena: &arena::Arena,
    tc: *mut Tcache,
    size: usize,
    align: usize,
    zero: bool,
    debug: u8,
) -> *mut u8 {
    let full = debug & diag::DEBUG_FULL != 0;
    let zero = zero || debug & diag::DEBUG_ZERO != 0;
    let want = if full {
        size.saturating_add(REDZONE)
    } else {
        size
    };
    let Some(class) = class_for(want, align) else {
        return null_mut();
    };
    // SAFETY: a non-null `tc` is the calling thread's own live cache (`debug_tcache`).
    let p = match unsafe { tc.as_mut() }.and_then(|t| cache_take(t, class, align)) {
        Some(p) => {
            if zero && !p.is_null() {
                // SAFETY: p is a live block of class_size(class) >= want bytes.
                unsafe { ptr::write_bytes(p, 0, want) };
            }
            p
        }
        None => alloc_arena_plain(arena, class, want, align, zero),
    };
    if p.is_null() {
        return p;
    }
    if full && is_small(class) {
        let usable = class_size(class);
        // SAFETY: p is a live block of `usable` bytes and usable >= size + REDZONE.
        unsafe {
            ptr::write_bytes(p.add(size), REDZONE_BYTE, usable - 4 - size);
            ptr::copy_nonoverlapping((size as u32).to_le_bytes().as_ptr(), p.add(usable - 4), 4);
        }
    }
    if !zero && debug & (diag::DEBUG_JUNK | diag::DEBUG_FULL) != 0 {
        // SAFETY: p is a live block of at least `size` bytes.
        unsafe { junk(p, size, JUNK_ALLOC, is_small(class)) };
    }
    p
}

/// Whether the `len` bytes at `p` all equal `byte`: eight at a time, the last eight
/// overlapping (a redzone is up to a quarter of its class, so this beat a byte loop by about
/// 3x in `sh6bench`'s profile), no early exit.
///
/// # Safety
/// `p` is valid for reads of `len` bytes.
unsafe fn all_bytes(p: *const u8, len: usize, byte: u8) -> bool {
    let pattern = u64::from_ne_bytes([byte; 8]);
    let mut diff = 0u64;
    // SAFETY: every read lies inside the caller's `len` bytes.
    unsafe {
        if len < 8 {
            for i in 0..len {
                diff |= u64::from(*p.add(i) ^ byte);
            }
            return diff == 0;
        }
        let mut i = 0;
        while i + 8 <= len {
            diff |= ptr::read_unaligned(p.add(i) as *const u64) ^ pattern;
            i += 8;
        }
        diff |= ptr::read_unaligned(p.add(len - 8) as *const u64) ^ pattern;
    }
    diff == 0
}

/// The requested size stored in a small block's redzone (`check:full`); aborts naming the
/// block when the redzone was overwritten.
fn redzone_size(p: *mut u8, class: usize) -> usize {
    let usable = class_size(class);
    let mut word = [0u8; 4];
    // SAFETY: p is a live small block of `usable` bytes (the caller looked it up).
    unsafe { ptr::copy_nonoverlapping(p.add(usable - 4), word.as_mut_ptr(), 4) };
    let size = u32::from_le_bytes(word) as usize;
    if size + REDZONE > usable {
        diag::fatal_ptr(
            "heap overflow: the size kept after a block was overwritten:",
            p,
        );
    }
    // SAFETY: bytes size..usable-4 lie inside the block.
    if !unsafe { all_bytes(p.add(size), usable - 4 - size, REDZONE_BYTE) } {
        diag::fatal_ptr(
            "heap overflow: the redzone after a block was overwritten:",
            p,
        );
    }
    size
}

/// The usable size of a live block, as the program sees it: under `check:full` a small
/// block's requested size (what lies beyond is the redzone).
pub fn usable_of(p: *mut u8, owner: &Owner) -> usize {
    match *owner {
        Owner::Small { class, .. } if diag::debug() & diag::DEBUG_FULL != 0 => {
            redzone_size(p, class)
        }
        Owner::Small { class, .. } | Owner::Large { class, .. } => class_size(class),
        // SAFETY: owner_of checked the extent is a live huge block.
        Owner::Huge { extent } => unsafe { class_size((*extent).class as usize) },
    }
}

/// Checks and junk-fills a block about to be freed (debug modes).
#[cold]
#[inline(never)]
pub(super) fn free_debug(owner: &Owner, p: *mut u8, debug: u8) {
    let usable = free_check(owner, p);
    free_fill(owner, p, usable, debug);
}

/// The checks of a block about to be freed: a small block already back in its slab (double
/// free) or not an object start, and under `check:full` its redzone. Returns the block's
/// usable size as the program sees it (`usable_of`).
fn free_check(owner: &Owner, p: *mut u8) -> usize {
    if let Owner::Small { slab, .. } = *owner {
        // A second free of a block already back in its slab must abort before the fill, which
        // would write into whoever holds the block now. (Read without the bin lock: a race
        // with another thread's free of the same block is itself the bug being caught.)
        // SAFETY: owner_of returned the live slab holding p.
        match unsafe { (*slab).index_of(p as usize).map(|i| (*slab).free.get(i)) } {
            None => diag::fatal_ptr("free of a pointer inside a block (not its start):", p),
            Some(true) => diag::fatal_ptr("double free of", p),
            Some(false) => {}
        }
    }
    usable_of(p, owner)
}

/// The free junk fill (`junk`, `check:full`) of `usable` bytes at `p`.
fn free_fill(owner: &Owner, p: *mut u8, usable: usize, debug: u8) {
    if debug & (diag::DEBUG_JUNK | diag::DEBUG_FULL) != 0 {
        let small = matches!(owner, Owner::Small { .. });
        // SAFETY: p is a live block of at least `usable` bytes, being freed.
        unsafe { junk(p, usable, JUNK_FREE, small) };
    }
}

/// Frees `p` under the debug modes: the checks and the junk fill of `free_debug`, then onto
/// the thread's cache (`thread::debug_tcache`) when its class is cached (a small block of
/// another arena to its remote-free buffer, as in `free`), else to the arena.
/// A block already in this thread's cache bin aborts as a double free before the fill. The
/// bin's top is compared always; the whole bin is scanned when the block may be a freed one:
/// under `junk` and `check:full` every freed block starts with the free junk (`JUNK_FREE`),
/// so only a block whose first bytes (up to eight) are that junk is looked for in the bin — a
/// live block's scan of up to 128 pointers (a bin's size then) was a quarter of `cfrac`'s time
/// under `check:full`. (A block written after its free, then freed again, is not found in the bin
/// unless on top; its second copy is caught when the bin flushes, by the slab's bitmap.)
/// A block already back in its slab is caught by `free_check`, and one in another thread's
/// cache when either cache flushes (the slab's bitmap).
#[cold]
#[inline(never)]
pub(super) fn free_debug_cached(owner: Owner, p: *mut u8, debug: u8) {
    let tc = crate::thread::debug_tcache();
    let class = match owner {
        Owner::Small { class, .. } | Owner::Large { class, .. } => class,
        Owner::Huge { .. } => usize::MAX,
    };
    // SAFETY: a non-null `tc` is the calling thread's own live cache.
    let Some(t) = (unsafe { tc.as_mut() }).filter(|t| t.bins.get(class).is_some_and(|b| b.cap > 0))
    else {
        free_debug(&owner, p, debug);
        return free_arena_plain(owner, p);
    };
    let (Some(bin), Some(&items)) = (t.bins.get(class), t.items.get(class)) else {
        return;
    };
    // SAFETY: items[0..count] are the bin's cached pointers.
    let cached = unsafe { core::slice::from_raw_parts(items, bin.count as usize) };
    if cached.last() == Some(&p) {
        diag::fatal_ptr("double free of", p);
    }
    let usable = free_check(&owner, p);
    let junked = debug & (diag::DEBUG_JUNK | diag::DEBUG_FULL) != 0;
    // SAFETY: p is a live block of at least `usable` bytes.
    if junked && unsafe { all_bytes(p, usable.min(8), JUNK_FREE) } && cached.contains(&p) {
        diag::fatal_ptr("double free of", p);
    }
    free_fill(&owner, p, usable, debug);
    if let Owner::Small { slab, .. } = owner {
        // SAFETY: owner_of returned the live slab holding p; free_check checked that p is an
        // object start, not free.
        if unsafe { !(*slab).belongs_to(t.home_arena) } {
            // SAFETY: as above; `owner_of` gave the slab's class.
            return unsafe { t.free_remote(p, slab, class) };
        }
    }
    t.push(class, p);
}
