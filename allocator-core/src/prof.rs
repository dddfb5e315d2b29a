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
//! table. Sized frees (Rust's `dealloc`) would skip the pagemap: under profiling each cache
//! sets `sized_max` to 0, so they take the pagemap path too.
//!
//! **Stacks.** libgcc's `_Unwind_Backtrace` (frame pointers are usually absent). Its first
//! use may call `malloc`; `init` primes it at start, and while a thread captures a stack its
//! cache's `prof_busy` is set, so a nested allocation is served unsampled and cannot
//! recurse. No lock of ours is held while unwinding.
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

use crate::base::BASE;
use crate::config::Options;
use crate::os;
use crate::sync::plain::{AtomicBool, AtomicU64, AtomicUsize};
use crate::sync::{Mutex, Ordering};
use crate::tcache::Tcache;
use core::ptr::null_mut;

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

/// Finds the mapping holding this code; if it is a shared object (not the executable),
/// records its range so that its frames are dropped from stacks.
fn find_self_range() {
    let here = find_self_range as fn() as usize;
    let mut exe = [0u8; 512];
    let exe_len = os::read_link(b"/proc/self/exe\0", &mut exe).unwrap_or(0);
    let mut path = [0u8; 512];
    let mut path_len = 0;
    os::for_each_line(b"/proc/self/maps\0", |line| {
        if let Some((lo, hi, p)) = parse_maps_line(line) {
            if (lo..hi).contains(&here) && p.len() <= path.len() {
                path[..p.len()].copy_from_slice(p);
                path_len = p.len();
            }
        }
    });
    if path_len == 0 || path[..path_len] == exe[..exe_len] {
        return;
    }
    let (mut start, mut end) = (usize::MAX, 0);
    os::for_each_line(b"/proc/self/maps\0", |line| {
        if let Some((lo, hi, p)) = parse_maps_line(line) {
            if p == &path[..path_len] {
                start = start.min(lo);
                end = end.max(hi);
            }
        }
    });
    // Relaxed: published by the GLOBAL Release store.
    SELF_START.store(start, Ordering::Relaxed);
    SELF_END.store(end, Ordering::Relaxed);
}

/// `start-end perms offset dev inode path` → (start, end, path).
fn parse_maps_line(line: &[u8]) -> Option<(usize, usize, &[u8])> {
    let dash = line.iter().position(|&c| c == b'-')?;
    let space = line.iter().position(|&c| c == b' ')?;
    let lo = parse_hex(&line[..dash])?;
    let hi = parse_hex(line.get(dash + 1..space)?)?;
    // The path starts at the first '/' or '[' after the five fixed fields.
    let path = match line.iter().position(|&c| c == b'/' || c == b'[') {
        Some(i) => &line[i..],
        None => &[][..],
    };
    Some((lo, hi, path))
}

fn parse_hex(text: &[u8]) -> Option<usize> {
    if text.is_empty() || text.len() > 16 {
        return None;
    }
    let mut v = 0usize;
    for &c in text {
        let d = (c as char).to_digit(16)?;
        v = v << 4 | d as usize;
    }
    Some(v)
}

// ---- sampling ------------------------------------------------------------------------------

/// The countdown ran out on an allocation of `size` bytes: draws the next interval and says
/// whether this allocation is to be sampled (profiling and sampling active, for this thread
/// too, and not inside another sample).
pub fn countdown_expired(t: &mut Tcache, size: usize) -> bool {
    if !enabled() {
        t.prof_countdown = u64::MAX;
        return false;
    }
    if t.prof_rng == 0 {
        // First use on this thread: seed, draw, and count this allocation like any other.
        t.prof_rng = (t as *mut Tcache as u64 ^ os::now_ms().rotate_left(32)) | 1;
        t.prof_countdown = next_interval(&mut t.prof_rng);
        match t.prof_countdown.checked_sub(size as u64) {
            Some(left) => {
                t.prof_countdown = left;
                return false;
            }
            None => t.prof_countdown = next_interval(&mut t.prof_rng),
        }
    } else {
        t.prof_countdown = next_interval(&mut t.prof_rng);
    }
    active() && !t.prof_thread_off && !t.prof_busy
}

/// An exponentially distributed interval with mean `2^lg_sample` bytes.
fn next_interval(rng: &mut u64) -> u64 {
    // xorshift64*: a uniform 53-bit fraction u in (0, 1].
    let mut x = *rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *rng = x;
    let bits = x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
    let u = (bits + 1) as f64 / (1u64 << 53) as f64;
    let mean = (1u64 << lg_sample().min(62)) as f64;
    let v = -u.ln() * mean;
    if v >= u64::MAX as f64 {
        u64::MAX - 1
    } else {
        v as u64
    }
}

/// Captures the calling thread's stack into `frames` (innermost first, allocator frames
/// dropped) with the cache's `prof_busy` set, so that an allocation the unwinder makes is
/// served unsampled. Returns the number of frames.
#[inline(never)]
pub fn capture(t: &mut Tcache, frames: &mut [usize; FRAMES_MAX]) -> usize {
    t.prof_busy = true;
    let n = os::backtrace(frames, SKIP_FRAMES);
    t.prof_busy = false;
    // Relaxed: published by the GLOBAL Release store.
    let (lo, hi) = (
        SELF_START.load(Ordering::Relaxed),
        SELF_END.load(Ordering::Relaxed),
    );
    let inside = frames[..n]
        .iter()
        .take_while(|&&ip| lo <= ip && ip < hi)
        .count();
    if inside > 0 && inside < n {
        frames.copy_within(inside..n, 0);
        return n - inside;
    }
    n
}

/// Records a sampled block: the program's pointer `p`, the run it lies in (`base`), the
/// requested `size` and its stack. Called with no allocator lock held.
pub fn record(p: *mut u8, base: *mut u8, size: usize, frames: &[usize]) {
    let weight = scaled_bytes(size as u64, 1, lg_sample());
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
    if remove && !stack.is_null() {
        // SAFETY: a live stack of the table, under its lock.
        let s = unsafe { &mut *stack };
        s.live_objects -= 1;
        s.live_bytes -= size as u64;
    }
    Some(base as *mut u8)
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
            let word = unsafe { (*pc).page_map[(*pc).page_of(addr)] };
            word & PAGE_KIND == PAGE_LARGE && addr & (os::PAGE - 1) != 0
        }
        TAG_EXTENT => true,
        _ => false,
    }
}

/// The chance that an object of the sampled objects' mean size (`bytes / count`) was sampled
/// at one sample per `2^lg` bytes on average: `1 - exp(-s / 2^lg)`. `None` when there is
/// nothing to scale (no object, or a chance of 0).
fn sample_chance(bytes: u64, count: u64, lg: usize) -> Option<f64> {
    if count == 0 {
        return None;
    }
    let mean = (1u64 << lg.min(62)) as f64;
    let avg = bytes as f64 / count as f64;
    let p = 1.0 - (-avg / mean).exp();
    (p > 0.0).then_some(p)
}

/// `bytes` over `count` sampled objects, scaled to the estimated bytes allocated: each object
/// of mean size `s` stood for `1 / (1 - exp(-s / 2^lg))` objects.
pub fn scaled_bytes(bytes: u64, count: u64, lg: usize) -> u64 {
    match sample_chance(bytes, count, lg) {
        None if count == 0 => 0,
        None => bytes,
        Some(p) => (bytes as f64 / p) as u64,
    }
}

/// `count` sampled objects of `bytes` in all, scaled as `scaled_bytes`.
pub fn scaled_objects(bytes: u64, count: u64, lg: usize) -> u64 {
    match sample_chance(bytes, count, lg) {
        None => count,
        Some(p) => (count as f64 / p) as u64,
    }
}

// ---- the table -----------------------------------------------------------------------------

/// A distinct stack and what was sampled at it.
#[repr(C)]
struct Stack {
    hash: u64,
    nframes: usize,
    live_objects: u64,
    live_bytes: u64,
    alloc_objects: u64,
    alloc_bytes: u64,
    frames: [usize; FRAMES_MAX],
}

/// A live sampled block (`addr` 0: an empty slot).
#[derive(Clone, Copy)]
#[repr(C)]
struct Block {
    addr: usize,
    base: usize,
    size: usize,
    /// Null for blocks sampled before a `prof.reset` (still freed as sampled, not counted).
    stack: *mut Stack,
}

struct Table {
    blocks: *mut Block,
    blocks_cap: usize,
    nblocks: usize,
    stacks: *mut *mut Stack,
    stacks_cap: usize,
    nstacks: usize,
}

// SAFETY: the raw pointers are metadata only touched under the table lock.
unsafe impl Send for Table {}

static TABLE: Mutex<Table> = Mutex::new(Table {
    blocks: null_mut(),
    blocks_cap: 0,
    nblocks: 0,
    stacks: null_mut(),
    stacks_cap: 0,
    nstacks: 0,
});

const BLOCKS_MIN: usize = 1024;
const STACKS_MIN: usize = 256;

fn hash_addr(addr: usize) -> usize {
    ((addr as u64 >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20) as usize
}

fn hash_frames(frames: &[usize]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &f in frames {
        h = (h ^ f as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Table {
    /// Inserts a block; false when the table cannot grow.
    fn block_insert(&mut self, addr: usize, base: usize, size: usize, stack: *mut Stack) -> bool {
        if (self.nblocks + 1) * 4 > self.blocks_cap * 3 && !self.blocks_grow() {
            return false;
        }
        let mask = self.blocks_cap - 1;
        let mut i = hash_addr(addr) & mask;
        loop {
            // SAFETY: i < blocks_cap, a slot of the live array.
            let slot = unsafe { &mut *self.blocks.add(i) };
            if slot.addr == 0 || slot.addr == addr {
                if slot.addr == 0 {
                    self.nblocks += 1;
                }
                *slot = Block {
                    addr,
                    base,
                    size,
                    stack,
                };
                return true;
            }
            i = (i + 1) & mask;
        }
    }

    fn blocks_grow(&mut self) -> bool {
        let cap = (self.blocks_cap * 2).max(BLOCKS_MIN);
        let bytes = cap * core::mem::size_of::<Block>();
        let new = BASE.alloc(bytes) as *mut Block;
        if new.is_null() {
            return false;
        }
        let (old, old_cap) = (self.blocks, self.blocks_cap);
        self.blocks = new;
        self.blocks_cap = cap;
        self.nblocks = 0;
        for i in 0..old_cap {
            // SAFETY: i < old_cap, a slot of the old array.
            let b = unsafe { *old.add(i) };
            if b.addr != 0 {
                self.block_insert(b.addr, b.base, b.size, b.stack);
            }
        }
        if !old.is_null() {
            // SAFETY: the old array came from BASE.alloc of this size and is not used again.
            unsafe { BASE.free(old as *mut u8, old_cap * core::mem::size_of::<Block>()) };
        }
        true
    }

    /// Finds `addr`; with `remove`, deletes it (backward-shift deletion keeps probe runs
    /// unbroken without tombstones). Returns (base, size, stack).
    fn block_find(&mut self, addr: usize, remove: bool) -> Option<(usize, usize, *mut Stack)> {
        if self.blocks_cap == 0 {
            return None;
        }
        let mask = self.blocks_cap - 1;
        let mut i = hash_addr(addr) & mask;
        loop {
            // SAFETY: i < blocks_cap.
            let b = unsafe { *self.blocks.add(i) };
            if b.addr == 0 {
                return None;
            }
            if b.addr == addr {
                if remove {
                    self.block_delete(i);
                }
                return Some((b.base, b.size, b.stack));
            }
            i = (i + 1) & mask;
        }
    }

    fn block_delete(&mut self, mut hole: usize) {
        let mask = self.blocks_cap - 1;
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            // SAFETY: j < blocks_cap.
            let b = unsafe { *self.blocks.add(j) };
            if b.addr == 0 {
                break;
            }
            let home = hash_addr(b.addr) & mask;
            // Move b into the hole unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                // SAFETY: hole, j < blocks_cap.
                unsafe { *self.blocks.add(hole) = b };
                hole = j;
            }
        }
        // SAFETY: hole < blocks_cap.
        unsafe { (*self.blocks.add(hole)).addr = 0 };
        self.nblocks -= 1;
    }

    /// The stack record for `frames`, created if new; null when metadata is short.
    fn stack_for(&mut self, frames: &[usize]) -> *mut Stack {
        if (self.nstacks + 1) * 4 > self.stacks_cap * 3 && !self.stacks_grow() {
            return null_mut();
        }
        let h = hash_frames(frames);
        let mask = self.stacks_cap - 1;
        let mut i = h as usize & mask;
        loop {
            // SAFETY: i < stacks_cap.
            let slot = unsafe { &mut *self.stacks.add(i) };
            if slot.is_null() {
                let s = BASE.alloc(core::mem::size_of::<Stack>()) as *mut Stack;
                if s.is_null() {
                    return s;
                }
                // SAFETY: fresh zeroed metadata of a Stack's size.
                unsafe {
                    let st = &mut *s;
                    st.hash = h;
                    st.nframes = frames.len();
                    st.frames[..frames.len()].copy_from_slice(frames);
                }
                *slot = s;
                self.nstacks += 1;
                return s;
            }
            // SAFETY: a live stack of the table.
            let st = unsafe { &**slot };
            if st.hash == h && &st.frames[..st.nframes] == frames {
                return *slot;
            }
            i = (i + 1) & mask;
        }
    }

    fn stacks_grow(&mut self) -> bool {
        let cap = (self.stacks_cap * 2).max(STACKS_MIN);
        let bytes = cap * core::mem::size_of::<*mut Stack>();
        let new = BASE.alloc(bytes) as *mut *mut Stack;
        if new.is_null() {
            return false;
        }
        let mask = cap - 1;
        for k in 0..self.stacks_cap {
            // SAFETY: k < stacks_cap.
            let s = unsafe { *self.stacks.add(k) };
            if s.is_null() {
                continue;
            }
            // SAFETY: a live stack.
            let mut i = unsafe { (*s).hash } as usize & mask;
            // SAFETY: i < cap, slots of the new zeroed array.
            while !unsafe { *new.add(i) }.is_null() {
                i = (i + 1) & mask;
            }
            // SAFETY: as above.
            unsafe { *new.add(i) = s };
        }
        if !self.stacks.is_null() {
            // SAFETY: the old array came from BASE.alloc of this size and is not used again.
            unsafe {
                BASE.free(
                    self.stacks as *mut u8,
                    self.stacks_cap * core::mem::size_of::<*mut Stack>(),
                )
            };
        }
        self.stacks = new;
        self.stacks_cap = cap;
        true
    }

    /// Calls `f` on every stack.
    fn for_each_stack(&self, mut f: impl FnMut(&Stack)) {
        for k in 0..self.stacks_cap {
            // SAFETY: k < stacks_cap.
            let s = unsafe { *self.stacks.add(k) };
            if !s.is_null() {
                // SAFETY: a live stack.
                f(unsafe { &*s });
            }
        }
    }

    /// `prof.reset`: forgets every stack; blocks sampled so far stay known (they must still be
    /// freed as sampled blocks) but count no more.
    fn reset(&mut self) {
        for k in 0..self.stacks_cap {
            // SAFETY: k < stacks_cap.
            let slot = unsafe { &mut *self.stacks.add(k) };
            if !slot.is_null() {
                // SAFETY: a stack from BASE.alloc of this size; nothing refers to it after
                // the blocks' links are cleared below.
                unsafe { BASE.free(*slot as *mut u8, core::mem::size_of::<Stack>()) };
                *slot = null_mut();
            }
        }
        self.nstacks = 0;
        for i in 0..self.blocks_cap {
            // SAFETY: i < blocks_cap.
            unsafe { (*self.blocks.add(i)).stack = null_mut() };
        }
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
    let g = TABLE.lock();
    let mut t = [0u64; 4];
    g.for_each_stack(|s| {
        t[0] += s.live_objects;
        t[1] += s.live_bytes;
        t[2] += s.alloc_objects;
        t[3] += s.alloc_bytes;
    });
    t
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

// ---- dumps ---------------------------------------------------------------------------------

/// A buffered writer to a descriptor: no allocation, errors ignored.
struct Out {
    fd: i32,
    len: usize,
    buf: [u8; 4096],
}

impl Out {
    fn new(fd: i32) -> Out {
        Out {
            fd,
            len: 0,
            buf: [0; 4096],
        }
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Out {
        if self.len + b.len() > self.buf.len() {
            self.flush();
        }
        if b.len() > self.buf.len() {
            os::write_fd(self.fd, b);
        } else {
            self.buf[self.len..self.len + b.len()].copy_from_slice(b);
            self.len += b.len();
        }
        self
    }
    fn dec(&mut self, v: u64) -> &mut Out {
        let mut tmp = [0u8; 20];
        let digits = crate::diag::dec_digits(v, &mut tmp);
        let mut copy = [0u8; 20];
        copy[..digits.len()].copy_from_slice(digits);
        let n = digits.len();
        self.bytes(&copy[..n])
    }
    fn hex(&mut self, v: u64) -> &mut Out {
        let mut tmp = [0u8; 18];
        tmp[0] = b'0';
        tmp[1] = b'x';
        let mut n = 2;
        let digits = if v == 0 {
            1
        } else {
            16 - v.leading_zeros() as usize / 4
        };
        for k in (0..digits).rev() {
            tmp[n] = b"0123456789abcdef"[(v >> (k * 4)) as usize & 15];
            n += 1;
        }
        self.bytes(&tmp[..n])
    }
    fn flush(&mut self) {
        os::write_fd(self.fd, &self.buf[..self.len]);
        self.len = 0;
    }
}

/// Writes jemalloc's `heap_v2` profile of the live samples to `fd` (what `jeprof` reads).
pub fn dump_heap(fd: i32) {
    let lg = lg_sample();
    let mut out = Out::new(fd);
    {
        let g = TABLE.lock();
        let mut t = [0u64; 4];
        g.for_each_stack(|s| {
            t[0] += s.live_objects;
            t[1] += s.live_bytes;
            t[2] += s.alloc_objects;
            t[3] += s.alloc_bytes;
        });
        out.bytes(b"heap_v2/").dec(1u64 << lg.min(62)).bytes(b"\n");
        counts_line(&mut out, &t);
        g.for_each_stack(|s| {
            if s.live_objects == 0 && s.alloc_objects == 0 {
                return;
            }
            out.bytes(b"@");
            for &ip in &s.frames[..s.nframes] {
                out.bytes(b" ").hex(ip as u64);
            }
            out.bytes(b"\n");
            counts_line(
                &mut out,
                &[s.live_objects, s.live_bytes, s.alloc_objects, s.alloc_bytes],
            );
        });
    }
    out.bytes(b"\nMAPPED_LIBRARIES:\n");
    os::for_each_line(b"/proc/self/maps\0", |line| {
        out.bytes(line).bytes(b"\n");
    });
    out.flush();
}

fn counts_line(out: &mut Out, t: &[u64; 4]) {
    out.bytes(b"  t*: ")
        .dec(t[0])
        .bytes(b": ")
        .dec(t[1])
        .bytes(b" [")
        .dec(t[2])
        .bytes(b": ")
        .dec(t[3])
        .bytes(b"]\n");
}

// ---- pprof -------------------------------------------------------------------------------

/// Appends `v` as a protobuf varint to `buf` at `*n` (the buffer is large enough: callers
/// size it for the most a message can hold).
fn varint(buf: &mut [u8], n: &mut usize, mut v: u64) {
    while v >= 0x80 {
        buf[*n] = v as u8 | 0x80;
        v >>= 7;
        *n += 1;
    }
    buf[*n] = v as u8;
    *n += 1;
}

/// A varint field (wire type 0).
fn field_varint(buf: &mut [u8], n: &mut usize, field: u32, v: u64) {
    varint(buf, n, (field as u64) << 3);
    varint(buf, n, v);
}

/// A length-delimited field (wire type 2) holding `body`.
fn field_bytes(out: &mut Out, field: u32, body: &[u8]) {
    let mut head = [0u8; 20];
    let mut n = 0;
    varint(&mut head, &mut n, (field as u64) << 3 | 2);
    varint(&mut head, &mut n, body.len() as u64);
    out.bytes(&head[..n]).bytes(body);
}

/// The executable mappings of `/proc/self/maps`, for pprof's `Mapping` and `Location`.
const PPROF_MAPPINGS_MAX: usize = 512;

/// Writes the profile in pprof's protobuf format (uncompressed; `pprof` reads it as is):
/// sample types `alloc_objects`, `alloc_space`, `inuse_objects`, `inuse_space`, values
/// scaled for sampling (pprof expects estimates, as Go's runtime writes them), one mapping
/// per executable file mapping so that `pprof` can symbolise, one location per frame.
pub fn dump_pprof(fd: i32) {
    let lg = lg_sample();
    let mut out = Out::new(fd);
    // The string table is written as it grows: index 0 must be "".
    const STRINGS: [&[u8]; 8] = [
        b"",
        b"alloc_objects",
        b"count",
        b"alloc_space",
        b"bytes",
        b"inuse_objects",
        b"inuse_space",
        b"space",
    ];
    for s in STRINGS {
        field_bytes(&mut out, 6, s);
    }
    let mut nstrings = STRINGS.len() as u64;
    let mut m = [0u8; 64];
    for (ty, unit) in [(1, 2), (3, 4), (5, 2), (6, 4)] {
        let mut n = 0;
        field_varint(&mut m, &mut n, 1, ty);
        field_varint(&mut m, &mut n, 2, unit);
        field_bytes(&mut out, 1, &m[..n]);
    }
    let mut n = 0;
    field_varint(&mut m, &mut n, 1, 7);
    field_varint(&mut m, &mut n, 2, 4);
    field_bytes(&mut out, 11, &m[..n]);
    let mut head = [0u8; 32];
    let mut n = 0;
    field_varint(&mut head, &mut n, 12, 1u64 << lg.min(62));
    field_varint(&mut head, &mut n, 14, 6);
    out.bytes(&head[..n]);
    // Mappings: executable, backed by a file, as `/proc/self/maps` gives them.
    let mut maps = [(0usize, 0usize); PPROF_MAPPINGS_MAX];
    let mut nmaps = 0;
    os::for_each_line(b"/proc/self/maps\0", |line| {
        let Some((lo, hi, path)) = parse_maps_line(line) else {
            return;
        };
        let perms = line.split(|&c| c == b' ').nth(1).unwrap_or(b"");
        let offset = line
            .split(|&c| c == b' ')
            .nth(2)
            .and_then(parse_hex)
            .unwrap_or(0);
        if perms.get(2) != Some(&b'x') || path.first() != Some(&b'/') || nmaps == maps.len() {
            return;
        }
        field_bytes(&mut out, 6, path);
        let name = nstrings;
        nstrings += 1;
        maps[nmaps] = (lo, hi);
        nmaps += 1;
        let mut b = [0u8; 80];
        let mut n = 0;
        field_varint(&mut b, &mut n, 1, nmaps as u64);
        field_varint(&mut b, &mut n, 2, lo as u64);
        field_varint(&mut b, &mut n, 3, hi as u64);
        field_varint(&mut b, &mut n, 4, offset as u64);
        field_varint(&mut b, &mut n, 5, name);
        field_bytes(&mut out, 3, &b[..n]);
    });
    let maps = &maps[..nmaps];
    // Samples, each with its own locations (pprof merges equal addresses itself).
    let g = TABLE.lock();
    let mut next_loc = 1u64;
    g.for_each_stack(|s| {
        if s.live_objects == 0 && s.alloc_objects == 0 {
            return;
        }
        // location_id (packed) and value (packed): at most 128 * 10 and 4 * 10 bytes.
        let mut ids = [0u8; FRAMES_MAX * 10];
        let mut nids = 0;
        for &ip in &s.frames[..s.nframes] {
            // Return addresses point after the call: the call itself is one byte earlier
            // (the innermost frame too, since it is a call into the allocator).
            let addr = ip.saturating_sub(1);
            let mapping = maps
                .iter()
                .position(|&(lo, hi)| lo <= addr && addr < hi)
                .map_or(0, |i| i as u64 + 1);
            let mut b = [0u8; 40];
            let mut n = 0;
            field_varint(&mut b, &mut n, 1, next_loc);
            if mapping != 0 {
                field_varint(&mut b, &mut n, 2, mapping);
            }
            field_varint(&mut b, &mut n, 3, addr as u64);
            field_bytes(&mut out, 4, &b[..n]);
            varint(&mut ids, &mut nids, next_loc);
            next_loc += 1;
        }
        let mut vals = [0u8; 48];
        let mut nvals = 0;
        for v in [
            scaled_objects(s.alloc_bytes, s.alloc_objects, lg),
            scaled_bytes(s.alloc_bytes, s.alloc_objects, lg),
            scaled_objects(s.live_bytes, s.live_objects, lg),
            scaled_bytes(s.live_bytes, s.live_objects, lg),
        ] {
            varint(&mut vals, &mut nvals, v);
        }
        let mut b = [0u8; FRAMES_MAX * 10 + 80];
        let mut n = 0;
        varint(&mut b, &mut n, 1 << 3 | 2);
        varint(&mut b, &mut n, nids as u64);
        b[n..n + nids].copy_from_slice(&ids[..nids]);
        n += nids;
        varint(&mut b, &mut n, 2 << 3 | 2);
        varint(&mut b, &mut n, nvals as u64);
        b[n..n + nvals].copy_from_slice(&vals[..nvals]);
        n += nvals;
        field_bytes(&mut out, 2, &b[..n]);
    });
    drop(g);
    out.flush();
}

/// Writes the profile to the file at `path` (without a NUL; at most `PREFIX_MAX + 64`
/// bytes): pprof's protobuf when the path ends in `.pb`, else jemalloc's `heap_v2` text.
/// False where it cannot be created or profiling is off.
pub fn dump_to_path(path: &[u8]) -> bool {
    if !enabled() {
        return false;
    }
    let mut z = [0u8; PREFIX_MAX + 65];
    if path.is_empty() || path.len() >= z.len() || path.contains(&0) {
        return false;
    }
    z[..path.len()].copy_from_slice(path);
    let Some(fd) = os::open_write(&z[..path.len() + 1]) else {
        return false;
    };
    if path.ends_with(b".pb") {
        dump_pprof(fd);
    } else {
        dump_heap(fd);
    }
    os::close(fd);
    true
}

/// Writes the profile to `<prof_prefix>.<pid>.<seq>.<kind>.heap` (jemalloc's naming; `kind`
/// `f` at exit, `i` at an interval, `m` on request). Returns the path's length in `path`.
pub fn dump_auto_into(kind: u8, path: &mut [u8; PREFIX_MAX + 65]) -> Option<usize> {
    let mut n = 0;
    let prefix = crate::config::options().prof_prefix();
    let mut push = |b: &[u8], n: &mut usize| {
        let m = b.len().min(path.len() - 1 - *n);
        path[*n..*n + m].copy_from_slice(&b[..m]);
        *n += m;
    };
    push(prefix, &mut n);
    let mut tmp = [0u8; 20];
    push(b".", &mut n);
    push(crate::diag::dec_digits(os::pid() as u64, &mut tmp), &mut n);
    push(b".", &mut n);
    // Relaxed: a counter for unique names.
    let seq = DUMP_SEQ.fetch_add(1, Ordering::Relaxed);
    push(crate::diag::dec_digits(seq, &mut tmp), &mut n);
    push(&[b'.', kind], &mut n);
    push(b".heap", &mut n);
    dump_to_path(&path[..n]).then_some(n)
}

fn dump_auto(kind: u8) {
    let mut path = [0u8; PREFIX_MAX + 65];
    dump_auto_into(kind, &mut path);
}

/// At exit: `prof_final` dumps; `prof_leak` reports what was never freed.
extern "C" fn at_exit() {
    // Relaxed: settings.
    if FINAL.load(Ordering::Relaxed) {
        dump_auto(b'f');
    }
    if LEAK.load(Ordering::Relaxed) {
        leak_report();
    }
}

/// `prof_leak`: a one-line summary of live sampled memory, the largest stacks by live bytes
/// (addresses, innermost first), and a dump to read with `hugealloc profile`.
fn leak_report() {
    let t = totals();
    if t[0] == 0 {
        return;
    }
    let lg = lg_sample();
    let mut m = crate::diag::Msg::new();
    m.str("leak summary: ")
        .dec(scaled_bytes(t[1], t[0], lg))
        .str(" bytes, ")
        .dec(scaled_objects(t[1], t[0], lg))
        .str(" objects (estimated from ")
        .dec(t[0])
        .str(" samples)\n");
    m.emit();
    // The three largest stacks.
    let mut top: [(u64, [usize; 8], usize); 3] = [(0, [0; 8], 0); 3];
    {
        let g = TABLE.lock();
        g.for_each_stack(|s| {
            if s.live_bytes == 0 {
                return;
            }
            let k = top.iter().position(|e| s.live_bytes > e.0);
            if let Some(k) = k {
                top.copy_within(k..2, k + 1);
                let mut f = [0usize; 8];
                let n = s.nframes.min(8);
                f[..n].copy_from_slice(&s.frames[..n]);
                top[k] = (s.live_bytes, f, n);
            }
        });
    }
    for (bytes, frames, n) in top.iter().filter(|e| e.0 > 0) {
        let mut m = crate::diag::Msg::new();
        m.str("leaked ").dec(*bytes).str(" sampled bytes at");
        for &ip in &frames[..*n] {
            m.str(" ").hex(ip as u64);
        }
        m.str("\n");
        m.emit();
    }
    let mut path = [0u8; PREFIX_MAX + 65];
    if let Some(n) = dump_auto_into(b'f', &mut path) {
        let mut m = crate::diag::Msg::new();
        m.str("leak detail: hugealloc profile ")
            .bytes(&path[..n])
            .str("\n");
        m.emit();
    }
}

/// Writes the profile into an anonymous file and returns its descriptor and length, so a
/// caller can read it back after every lock is released (`profile::bytes`).
pub fn dump_to_memfd() -> Option<(i32, u64)> {
    if !enabled() {
        return None;
    }
    let fd = os::memfd()?;
    let mut counter = Counter { fd, len: 0 };
    counter.dump();
    Some((fd, counter.len))
}

struct Counter {
    fd: i32,
    len: u64,
}

impl Counter {
    fn dump(&mut self) {
        dump_heap(self.fd);
        let mut buf = [0u8; 4096];
        loop {
            let n = os::read_at(self.fd, self.len, &mut buf);
            if n == 0 {
                break;
            }
            self.len += n as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines() {
        let l = b"7f00a000-7f00b000 r-xp 00001000 08:01 1234   /usr/lib/libx.so";
        assert_eq!(
            parse_maps_line(l),
            Some((0x7f00a000, 0x7f00b000, &b"/usr/lib/libx.so"[..]))
        );
        assert_eq!(
            parse_maps_line(b"1000-2000 rw-p 00000000 00:00 0"),
            Some((0x1000, 0x2000, &b""[..]))
        );
        assert_eq!(parse_maps_line(b"garbage"), None);
    }

    #[test]
    fn intervals_have_the_mean() {
        let mut rng = 12345u64;
        let n = 100_000u64;
        let sum: u64 = (0..n).map(|_| next_interval(&mut rng)).sum();
        let mean = sum as f64 / n as f64;
        let want = (1u64 << lg_sample()) as f64;
        assert!((mean / want - 1.0).abs() < 0.02, "mean {mean}, want {want}");
    }

    #[test]
    fn scaling_undoes_sampling() {
        // One sample of 2^19 bytes at lg 19: probability 1 - 1/e.
        let b = scaled_bytes(1 << 19, 1, 19);
        let want = (1u64 << 19) as f64 / (1.0 - (-1.0f64).exp());
        assert!((b as f64 - want).abs() < 2.0);
        // Tiny blocks: each stood for about 2^19 / size of them.
        assert!(scaled_objects(16, 1, 19) > 30_000);
        assert_eq!(scaled_bytes(0, 0, 19), 0);
    }

    #[test]
    fn block_table_insert_find_delete() {
        let mut t = Table {
            blocks: null_mut(),
            blocks_cap: 0,
            nblocks: 0,
            stacks: null_mut(),
            stacks_cap: 0,
            nstacks: 0,
        };
        // Many keys, then delete every other one: the rest must stay findable.
        for k in 1..5000usize {
            assert!(t.block_insert(k * 4096 + 16, k * 4096, k, null_mut()));
        }
        for k in (1..5000usize).step_by(2) {
            assert!(t.block_find(k * 4096 + 16, true).is_some());
        }
        for k in 1..5000usize {
            let found = t.block_find(k * 4096 + 16, false);
            assert_eq!(found.is_some(), k % 2 == 0, "key {k}");
            if let Some((base, size, _)) = found {
                assert_eq!((base, size), (k * 4096, k));
            }
        }
        assert_eq!(t.nblocks, 2499);
        let a = t.stack_for(&[1, 2, 3]);
        let b = t.stack_for(&[1, 2, 4]);
        assert!(!a.is_null() && a != b);
        assert_eq!(t.stack_for(&[1, 2, 3]), a);
        for k in 0..1000usize {
            assert!(!t.stack_for(&[k, 7]).is_null());
        }
        assert_eq!(t.stack_for(&[1, 2, 3]), a);
        assert_eq!(t.nstacks, 1002);
    }
}
