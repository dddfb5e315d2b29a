//! Each thread's state: its arena binding, its thread cache, its byte counters, the
//! thread-exit hook and the reentrancy guard of the global init. Process-wide state lives below
//! (`registry`: the arena table; `config`: the options) and the global init above (`init`);
//! callers make sure the init has run (`init::ensure_init`) before they call in here.
//!
//! The thread's state lives in one `thread_local!` with `const` init and no destructor (so std
//! registers nothing and reading it is a plain TLS access). Its life: NEW → INIT (binding an
//! arena, creating the cache, registering the exit hook; allocations made meanwhile, by libc
//! for instance, go straight to the arena) → READY (fast path through the cache) → DEAD (after
//! the exit hook ran; the arena serves any later allocation directly).

use crate::arena::Arena;
use crate::config::options;
use crate::diag;
use crate::registry::{arena, arena_get_or_create, choose_arena};
use crate::sync::Ordering;
use crate::tcache::Tcache;
use core::cell::Cell;
use core::ptr::null_mut;

const NEW: u8 = 0;
const INIT: u8 = 1;
const READY: u8 = 2;
const DEAD: u8 = 3;
const UNBOUND: u32 = u32::MAX;

pub struct ThreadState {
    state: Cell<u8>,
    arena: Cell<u32>,
    /// Set on the thread running the global init, so its own nested allocations proceed.
    in_global_init: Cell<bool>,
    /// Bytes this thread allocated and freed through the arena paths (jemalloc's
    /// `thread.allocated` counts the same way: cache refills and flushes).
    pub allocated: Cell<u64>,
    pub deallocated: Cell<u64>,
}

std::thread_local! {
    pub static TLS: ThreadState = const {
        ThreadState {
            state: Cell::new(NEW),
            arena: Cell::new(UNBOUND),
            in_global_init: Cell::new(false),
            allocated: Cell::new(0),
            deallocated: Cell::new(0),
        }
    };
}

/// `EXIT_KEY` before the key exists (keys are below `PTHREAD_KEYS_MAX`, 1024 on Linux).
const NO_KEY: u32 = u32::MAX;
/// The key whose destructor is the thread-exit hook (`create_exit_key`).
static EXIT_KEY: crate::sync::plain::AtomicU32 = crate::sync::plain::AtomicU32::new(NO_KEY);

/// Marks the calling thread as running the global init (or no longer).
pub fn set_in_global_init(on: bool) {
    TLS.with(|t| t.in_global_init.set(on));
}

/// Whether the calling thread is running the global init (a nested allocation inside it).
pub fn in_global_init() -> bool {
    TLS.with(|t| t.in_global_init.get())
}

/// Creates the key whose destructor runs the thread-exit hook (the global init, once). On
/// failure thread caches are not flushed at thread exit (a warning says so).
pub fn create_exit_key() {
    match crate::os::thread_key_create(thread_exit) {
        // Relaxed: published by the global init's Once (Release).
        Some(key) => EXIT_KEY.store(key, Ordering::Relaxed),
        None => diag::warn("pthread_key_create failed: thread caches stay cached at thread exit"),
    }
}

/// The calling thread's arena (binding it on first use). The init has run.
pub fn current_arena() -> &'static Arena {
    let i = TLS.with(|t| t.arena.get());
    if i != UNBOUND {
        return arena(i as usize);
    }
    if in_global_init() {
        // A nested allocation inside the global init.
        return arena(0);
    }
    let i = choose_arena();
    TLS.with(|t| t.arena.set(i as u32));
    arena(i)
}

/// The calling thread's cache, creating it on first use; null while initialising, after the
/// thread's exit hook, when `tcache:false`, or under the debug modes (whose cache only
/// `debug_tcache` gives). The init has run.
#[cold]
#[inline(never)]
pub fn tcache_slow() -> *mut Tcache {
    if diag::debug() != 0 {
        return null_mut();
    }
    tcache_create()
}

/// Under the debug modes, the calling thread's cache once it exists: one initial-exec TLS
/// read (`os::tls_debug_cache`), the cache lives there under the debug modes, out of the fast
/// paths' slot. Null before the thread's first debug-path allocation and in normal operation;
/// a non-null answer means the init has run and a debug mode is on.
#[inline(always)]
pub fn debug_tcache_ready() -> *mut Tcache {
    crate::os::tls_debug_cache() as *mut Tcache
}

/// Under the debug modes, the calling thread's cache, creating it on first use (null as in
/// `tcache_slow`, and whenever no debug mode is on). `alloc`'s debug path pops and pushes here
/// after its checks and fills; the fast paths never see this cache. The init has run.
#[inline]
pub fn debug_tcache() -> *mut Tcache {
    let tc = debug_tcache_ready();
    if !tc.is_null() || diag::debug() == 0 {
        return tc;
    }
    debug_tcache_slow()
}

#[cold]
#[inline(never)]
fn debug_tcache_slow() -> *mut Tcache {
    tcache_create()
}

/// The calling thread's cache, whichever slot holds it (the fast path's or the debug modes').
pub fn any_tcache() -> *mut Tcache {
    let tc = tcache();
    if !tc.is_null() {
        return tc;
    }
    debug_tcache_ready()
}

/// The calling thread's cache, creating it in state NEW (see `tcache_slow`); under the debug
/// modes it goes in the debug slot (`os::tls_debug_cache`), else in the fast path's slot.
fn tcache_create() -> *mut Tcache {
    if in_global_init() {
        return null_mut();
    }
    let state = TLS.with(|t| t.state.get());
    if state != NEW {
        return any_tcache();
    }
    TLS.with(|t| t.state.set(INIT));
    let arena = current_arena();
    let opts = options();
    if !opts.tcache {
        TLS.with(|t| t.state.set(READY));
        return null_mut();
    }
    let tc = Tcache::create(arena, opts.tcache_max, opts.tcache_nslots_small_max);
    if tc.is_null() {
        TLS.with(|t| t.state.set(NEW));
        return tc;
    }
    // Relaxed: written by the global init, published through its Once.
    let key = EXIT_KEY.load(Ordering::Relaxed);
    // SAFETY: a key other than NO_KEY was created by the init with `thread_exit`, which takes
    // a cache pointer; setspecific may allocate, served by the arena path, since this
    // thread's state is INIT.
    if key != NO_KEY && !unsafe { crate::os::thread_key_set(key, tc as *mut u8) } {
        diag::warn("pthread_setspecific failed: this thread's cache stays cached at its exit");
    }
    if diag::debug() != 0 {
        crate::os::set_tls_debug_cache(tc as *mut u8);
    } else {
        crate::os::set_tls_cache(tc as *mut u8);
    }
    TLS.with(|t| {
        t.state.set(READY);
    });
    tc
}

/// The calling thread's cache if it has one ready (the fast-path read).
#[inline(always)]
pub fn tcache() -> *mut Tcache {
    // The one TLS word the fast paths read, in initial-exec TLS (see `os::tls_cache`).
    crate::os::tls_cache() as *mut Tcache
}

/// Moves the calling thread to arena `i`: flushes its cache first so that nothing cached
/// belongs to the old binding. An automatic arena (`i < narenas`) not created yet is created.
/// Returns false if there is no such arena. The init has run.
pub fn set_thread_arena(i: usize) -> bool {
    let Some(new) = arena_get_or_create(i) else {
        return false;
    };
    let old = TLS.with(|t| t.arena.get());
    if old != UNBOUND {
        // Relaxed: counts only steer placement.
        arena(old as usize).nthreads.fetch_sub(1, Ordering::Relaxed);
    }
    // Relaxed: as above.
    new.nthreads.fetch_add(1, Ordering::Relaxed);
    TLS.with(|t| t.arena.set(i as u32));
    let tc = any_tcache();
    if !tc.is_null() {
        // SAFETY: the thread's own live cache.
        unsafe {
            (*tc).flush_all();
            (*tc).set_arena(new);
        }
    }
    true
}

/// The calling thread's arena index (binding it if needed).
pub fn thread_arena_index() -> usize {
    current_arena().index as usize
}

/// Flushes the calling thread's cache.
pub fn flush_thread_cache() {
    let tc = any_tcache();
    if !tc.is_null() {
        // SAFETY: the thread's own live cache.
        unsafe { (*tc).flush_all() };
    }
}

extern "C" fn thread_exit(arg: *mut libc::c_void) {
    let tc = arg as *mut Tcache;
    crate::os::set_tls_cache(null_mut());
    crate::os::set_tls_debug_cache(null_mut());
    let _ = TLS.try_with(|t| {
        t.state.set(DEAD);
        let a = t.arena.get();
        if a != UNBOUND {
            // Relaxed: counts only steer placement.
            // Later allocations on this thread (other exit hooks) still use the same arena.
            arena(a as usize).nthreads.fetch_sub(1, Ordering::Relaxed);
        }
    });
    if !tc.is_null() {
        // SAFETY: the cache was this thread's and nothing refers to it any more.
        unsafe { Tcache::destroy(tc) };
    }
}
