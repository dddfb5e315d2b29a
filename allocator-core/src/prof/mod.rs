//! Sampled heap profiling (jemalloc's `prof`): which call stacks hold the live heap.
//!
//! **Sampling.** Each thread cache carries a byte countdown (`Tcache::prof_countdown`). Every
//! allocation subtracts its size; when the countdown would go below zero the allocation is
//! sampled and a new countdown is drawn from an exponential distribution with mean
//! `2^lg_prof_sample` bytes. A block of `s` bytes is thus sampled with probability
//! `1 - exp(-s / 2^lg_prof_sample)`, which the dumps undo (pprof) or state (jemalloc's
//! format, whose readers undo it). With profiling off the countdown is `u64::MAX` and never
//! runs out, so the fast path pays one subtraction and one branch.
//!
//! **Sampled blocks.** A sampled block is served from a page run of its own, one of the large
//! classes, and the program gets a pointer `offset` bytes (16, or the alignment asked for,
//! at most a page) past the run's start. That pointer is never page aligned, so `free`'s fast
//! path, which caches only page-aligned large blocks, passes it on to `free_slow`; there, and
//! in every other entry point that takes a pointer (`usable_size`, `realloc`, ...), the
//! pagemap word tells a sampled candidate from anything else without a lock (large run, not
//! page aligned; or a huge block, sampled with offset 0), and only candidates look in the
//! table. Sized frees (Rust's `dealloc`) skip the pagemap: under profiling each cache sets
//! `sized_max` to 0, and a sized free of at most `FAST_MAX` bytes pushes by size only when
//! `SAMPLED_PAGES`, a table of counts by page number, says no sampled block lies on the
//! block's page (one load); otherwise it takes the pagemap path.
//!
//! **Stacks.** libgcc's `_Unwind_Backtrace` (frame pointers are usually absent). Its first
//! use may call `malloc`; `init` primes it at start, and while a thread captures a stack its
//! cache's `prof_busy` is set, so a nested allocation is served unsampled and cannot
//! recurse. No lock of ours is held while unwinding. With `prof_unwind:fp`, libgcc unwinds
//! only the allocator's own frames and the program's are read from the frame-pointer chain,
//! bounded by the thread's stack (`os::backtrace_fp`).
//!
//! **Table.** One lock (in `sync`'s list between ranks 4 and 5: after the arena and chunk-source locks, before the base; no
//! arena lock is taken while it is held). Two open-addressing hash tables in metadata memory
//! (`base`): live sampled blocks by address (`Block`), and distinct stacks (`Stack`) with
//! their live and cumulative counts. Blocks are removed at free; stacks stay until
//! `prof.reset`. Nothing here allocates through the allocator.
//!
//! **Dumps**, written with `libc::write` through a stack buffer: jemalloc's `heap_v2` text
//! (`dump_heap`, what `jeprof` reads), ending with `/proc/self/maps` for symbolisation; and
//! pprof's protobuf (`dump_pprof`, hand-encoded, uncompressed), chosen by a `.pb` path.
//!
//! **Files.** `sample` (countdown, intervals, scaling), `unwind` (stack capture), `table` (the
//! sample table), `maps` (`/proc/self/maps` lines), `heap` (the writer and `heap_v2`), `pprof`
//! (protobuf), `dump` (files, exit and interval dumps, the leak report); this file holds the
//! settings and the hooks the allocator calls.

mod dump;
mod heap;
mod maps;
mod pprof;
mod sample;
mod table;
mod unwind;

pub use dump::{dump_auto_into, dump_to_memfd, dump_to_path};
pub use sample::countdown_expired;
pub use unwind::capture;

use crate::config::Options;
use crate::os;
use crate::sync::plain::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
use crate::sync::Ordering;
use core::ptr::null_mut;
use dump::{at_exit, dump_auto};
use maps::find_self_range;
use sample::scaled_bytes;
use table::TABLE;

/// Most frames recorded per stack.
pub const FRAMES_MAX: usize = 128;
/// Frames of the allocator itself at the top of every capture: `os::backtrace`,
/// `capture`, and `alloc::alloc_sampled`.
const SKIP_FRAMES: usize = 3;
/// The longest `prof_prefix` accepted (dump paths get 64 bytes more).
pub const PREFIX_MAX: usize = crate::config::PROF_PREFIX_MAX;

// ---- settings ------------------------------------------------------------------------------

/// `opt.prof`: fixed at init.
static ENABLED: AtomicBool = AtomicBool::new(false);
/// `prof.active`.
static ACTIVE: AtomicBool = AtomicBool::new(true);
/// `prof.lg_sample`: the mean sampling interval is `2^LG_SAMPLE` bytes.
static LG_SAMPLE: AtomicUsize = AtomicUsize::new(19);
/// `prof_final`, `prof_leak`, `lg_prof_interval` (0 = off).
static FINAL: AtomicBool = AtomicBool::new(false);
static LEAK: AtomicBool = AtomicBool::new(false);
static LG_INTERVAL: AtomicUsize = AtomicUsize::new(0);
/// Sampled bytes (scaled) since the last interval dump.
static INTERVAL_BYTES: AtomicU64 = AtomicU64::new(0);
/// Dumps written by this process (the `<seq>` of a file name).
static DUMP_SEQ: AtomicU64 = AtomicU64::new(0);
/// The address range of the shared object holding hugealloc (`LD_PRELOAD`): frames inside it
/// are the allocator's own and are dropped from the top of a stack. Empty when hugealloc is
/// linked into the program.
static SELF_START: AtomicUsize = AtomicUsize::new(0);
static SELF_END: AtomicUsize = AtomicUsize::new(0);
/// `prof_unwind:fp`: the program's frames come from the frame-pointer chain.
static UNWIND_FP: AtomicBool = AtomicBool::new(false);

/// Slots of `SAMPLED_PAGES`: one per page of a 256 MiB window of addresses.
const SAMPLED_SLOTS: usize = 1 << 16;
/// The sized free's test (`may_be_sampled`): slot `i` counts the live sampled blocks of at most
/// `tcache::FAST_MAX` bytes (the only ones a sized free could push into a small bin) whose
/// pointer lies on a page whose number is `i` modulo `SAMPLED_SLOTS`. A sampled block has its
/// page run to itself, so within one 256 MiB window every page has its own slot and a block
/// on a page with no sample reads 0; pages a window apart share a slot (a false positive: the
/// free looks in the pagemap, as it would without this table). A slot never wraps: it counts at
/// most one block per page, and 2^19 pages of a 47-bit address space share it.
/// 256 KiB of zeroed static memory; only the pages of slots in use are ever written.
static SAMPLED_PAGES: [AtomicU32; SAMPLED_SLOTS] = [const { AtomicU32::new(0) }; SAMPLED_SLOTS];

/// The slot of `SAMPLED_PAGES` for the page holding `addr`.
#[inline(always)]
fn sampled_slot(addr: usize) -> &'static AtomicU32 {
    // The mask keeps the index in bounds (no panic path).
    &SAMPLED_PAGES[(addr / os::PAGE) & (SAMPLED_SLOTS - 1)]
}

/// Whether a block of `size` bytes sampled at `addr` is counted in `SAMPLED_PAGES`.
fn counted(size: usize) -> bool {
    size <= crate::tcache::FAST_MAX
}

/// Whether the block at `addr`, freed with a size of at most `tcache::FAST_MAX`, may be a
/// sampled block: false means it certainly is not, so a sized free may push it straight into
/// the small bin its size names. One load; for profiling only (the table is all zero when off).
#[inline(always)]
pub fn may_be_sampled(addr: usize) -> bool {
    // Relaxed: `record` counts a block before `malloc` returns it, so any thread freeing it got
    // the pointer through an ordering that also carries the count (happens-before); a count
    // dropped by a free of another block on the slot can only make this read a larger value,
    // never 0 while a counted block lies on the slot.
    sampled_slot(addr).load(Ordering::Relaxed) != 0
}

/// Whether profiling is on (`opt.prof`). A relaxed load: the cold paths' test.
#[inline(always)]
pub fn enabled() -> bool {
    // Relaxed: written once by the global init, before any sampled block exists.
    ENABLED.load(Ordering::Relaxed)
}

/// `prof.active`.
pub fn active() -> bool {
    // Relaxed: a setting; a sample taken just before or after a change is as good.
    ACTIVE.load(Ordering::Relaxed)
}

/// Sets `prof.active`; returns the old value.
pub fn set_active(on: bool) -> bool {
    // Relaxed: as `active`.
    ACTIVE.swap(on, Ordering::Relaxed)
}

/// `prof.lg_sample`.
pub fn lg_sample() -> usize {
    // Relaxed: a setting.
    LG_SAMPLE.load(Ordering::Relaxed)
}

/// The profiling setup, from the options; called once by the global init (after the fork
/// handlers of `thread` are registered, so ours run around them: prepare first, then theirs).
pub fn init(opts: &Options) {
    if !opts.prof {
        return;
    }
    // Relaxed: the GLOBAL Release store publishes all of these.
    ACTIVE.store(opts.prof_active, Ordering::Relaxed);
    LG_SAMPLE.store(opts.lg_prof_sample, Ordering::Relaxed);
    FINAL.store(opts.prof_final, Ordering::Relaxed);
    LEAK.store(opts.prof_leak, Ordering::Relaxed);
    LG_INTERVAL.store(opts.lg_prof_interval, Ordering::Relaxed);
    UNWIND_FP.store(
        opts.prof_unwind == crate::config::Unwind::Fp,
        Ordering::Relaxed,
    );
    find_self_range();
    // Prime the unwinder: its first use registers unwind tables and may allocate, which here
    // (inside the global init) is served by arena 0.
    let mut frames = [0usize; 4];
    os::backtrace(&mut frames, 0);
    os::at_fork(fork_prepare, fork_parent, fork_child);
    if opts.prof_final || opts.prof_leak {
        os::at_exit(at_exit);
    }
    crate::tcache::PROFILING.store(true, Ordering::Relaxed);
    ENABLED.store(true, Ordering::Relaxed);
}

/// Records a sampled block: the program's pointer `p`, the run it lies in (`base`), the
/// requested `size` and its stack. Called with no allocator lock held.
pub fn record(p: *mut u8, base: *mut u8, size: usize, frames: &[usize]) {
    let weight = scaled_bytes(size as u64, 1, lg_sample());
    if counted(size) {
        // Relaxed: see `may_be_sampled` (the count precedes the block's return to the program).
        sampled_slot(p as usize).fetch_add(1, Ordering::Relaxed);
    }
    {
        let mut g = TABLE.lock();
        let stack = g.stack_for(frames);
        if stack.is_null() || !g.block_insert(p as usize, base as usize, size, stack) {
            // Out of metadata memory: the block stays unrecorded, but must still be freed as
            // a sampled block, so record it without a stack.
            let _ = g.block_insert(p as usize, base as usize, size, null_mut());
            return;
        }
        // SAFETY: a live stack of the table, under its lock.
        let s = unsafe { &mut *stack };
        s.live_objects += 1;
        s.live_bytes += size as u64;
        s.alloc_objects += 1;
        s.alloc_bytes += size as u64;
    }
    // Relaxed: the interval counter only decides when to dump.
    let lg = LG_INTERVAL.load(Ordering::Relaxed);
    if lg > 0 {
        let total = INTERVAL_BYTES.fetch_add(weight, Ordering::Relaxed) + weight;
        if total >= 1u64 << lg.min(63) {
            INTERVAL_BYTES.store(0, Ordering::Relaxed);
            dump_auto(b'i');
        }
    }
}

/// The run start of `p` if `p` is a sampled block, or `None`. `remove` also drops its record.
/// A lock-free pagemap test first: only sampled candidates look in the table.
pub fn sampled_base(p: *mut u8, remove: bool) -> Option<*mut u8> {
    if !enabled() || !candidate(p as usize) {
        return None;
    }
    let mut g = TABLE.lock();
    let (base, size, stack) = g.block_find(p as usize, remove)?;
    if remove && counted(size) {
        // Relaxed: see `may_be_sampled`; the block's run is given back after this.
        sampled_slot(p as usize).fetch_sub(1, Ordering::Relaxed);
    }
    if remove && !stack.is_null() {
        // SAFETY: a live stack of the table, under its lock.
        let s = unsafe { &mut *stack };
        s.live_objects -= 1;
        s.live_bytes -= size as u64;
    }
    Some(base as *mut u8)
}

/// Whether `addr` is the pointer of a live sampled block (tests).
pub fn is_sampled(addr: usize) -> bool {
    sampled_base(addr as *mut u8, false).is_some()
}

/// Whether `addr` could be a sampled block: inside a large run's first page but not at its
/// start, or the start of a huge block.
fn candidate(addr: usize) -> bool {
    use crate::chunk::{PageChunk, PAGE_KIND, PAGE_LARGE};
    use crate::pagemap::{PAGEMAP, TAG_EXTENT, TAG_MASK, TAG_PAGES};
    let entry = PAGEMAP.get(addr);
    match entry & TAG_MASK {
        TAG_PAGES => {
            let pc = (entry & !TAG_MASK) as *const PageChunk;
            // SAFETY: a TAG_PAGES entry points at its chunk's live page map.
            // A page past the map (impossible for an address the entry covers) reads as free.
            let word = unsafe { (*pc).page_map.get((*pc).page_of(addr)).copied() }.unwrap_or(0);
            word & PAGE_KIND == PAGE_LARGE && addr & (os::PAGE - 1) != 0
        }
        TAG_EXTENT => true,
        _ => false,
    }
}

/// `prof.reset`: clears every count; with `lg`, also sets `prof.lg_sample`.
pub fn reset(lg: Option<usize>) {
    let mut g = TABLE.lock();
    g.reset();
    if let Some(lg) = lg {
        // Relaxed: a setting.
        LG_SAMPLE.store(lg.min(62), Ordering::Relaxed);
    }
}

/// Totals over every stack: (live objects, live bytes, allocated objects, allocated bytes),
/// as sampled (not scaled).
pub fn totals() -> [u64; 4] {
    TABLE.lock().totals()
}

// ---- fork ----------------------------------------------------------------------------------

extern "C" fn fork_prepare() {
    TABLE.force_lock();
}

extern "C" fn fork_parent() {
    // SAFETY: fork_prepare took the lock on this thread.
    unsafe { TABLE.force_unlock() };
}

extern "C" fn fork_child() {
    // SAFETY: in the child only this thread exists.
    unsafe { TABLE.reset_in_child() };
}

#[cfg(test)]
mod tests;
