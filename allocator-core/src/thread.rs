//! Process and thread state: the one-time global initialisation, the arena registry, each
//! thread's binding and thread cache, the thread-exit hook and the fork handlers.
//!
//! The thread's state lives in one `thread_local!` with `const` init and no destructor (so std
//! registers nothing and reading it is a plain TLS access). Its life: NEW → INIT (binding an
//! arena, creating the cache, registering the exit hook; allocations made meanwhile, by libc
//! for instance, go straight to the arena) → READY (fast path through the cache) → DEAD (after
//! the exit hook ran; the arena serves any later allocation directly).
//!
//! Lock order: the registry lock (rank 1) is never held while anything else is taken except
//! arena creation in metadata (base, rank 5).

use crate::arena::Arena;
use crate::base::BASE;
use crate::chunk::SOURCE;
use crate::config::Options;
use crate::sync::plain::{AtomicPtr, AtomicUsize};
use crate::sync::{Mutex, Once, Ordering};
use crate::tcache::Tcache;
use crate::thp::{SystemMode, Thp};
use core::cell::Cell;
use core::ptr::null_mut;

/// Most arenas a process may have.
pub const MAX_ARENAS: usize = 256;
const _: () = assert!(MAX_ARENAS == crate::config::NARENAS_MAX);

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

#[allow(clippy::declare_interior_mutable_const)]
const NO_ARENA: AtomicPtr<Arena> = AtomicPtr::new(null_mut());
static ARENAS: [AtomicPtr<Arena>; MAX_ARENAS] = [NO_ARENA; MAX_ARENAS];
/// Arenas created so far.
static NARENAS: AtomicUsize = AtomicUsize::new(0);
/// Arenas threads are spread over automatically (`narenas`).
static NARENAS_AUTO: AtomicUsize = AtomicUsize::new(1);
static REGISTRY: Mutex<()> = Mutex::new(());

/// The one-time global initialisation.
static GLOBAL: Once = Once::new();
static mut OPTIONS: Options = Options::DEFAULT;
static mut PTHREAD_KEY: libc::pthread_key_t = 0;
/// A configuration string compiled into the program (see `HugeAlloc::with_conf`).
static API_CONF: AtomicPtr<u8> = AtomicPtr::new(null_mut());
static API_CONF_LEN: AtomicUsize = AtomicUsize::new(0);

/// The effective options (valid once `ensure_init` has returned).
pub fn options() -> &'static Options {
    // SAFETY: OPTIONS is written only by the global init, before GLOBAL becomes 2 (Release);
    // callers reach here after observing it (Acquire) or from the init thread itself.
    unsafe { &*core::ptr::addr_of!(OPTIONS) }
}

/// Records a compile-time configuration string to apply at init (last source, wins).
pub fn set_api_conf(conf: &'static [u8]) {
    // Relaxed pairs: both are read by the init, which happens-after through the caller.
    API_CONF_LEN.store(conf.len(), Ordering::Relaxed);
    API_CONF.store(conf.as_ptr() as *mut u8, Ordering::Release);
}

/// Whether the global init has completed.
#[inline(always)]
pub fn is_ready() -> bool {
    GLOBAL.is_done()
}

/// Makes sure the process-wide state exists. A nested call on the initialising thread (libc
/// allocating inside the init) returns at once; its allocation is served by arena 0.
#[cold]
pub fn ensure_init() {
    if is_ready() {
        return;
    }
    let ran = GLOBAL.call(|| {
        TLS.with(|t| t.in_global_init.set(true));
        // The init opens files that may be missing (ENOENT): the program must not see it.
        let saved = crate::os::errno();
        global_init();
        crate::os::set_errno(saved);
        TLS.with(|t| t.in_global_init.set(false));
    });
    // A nested allocation on the initialising thread proceeds on arena 0; others wait.
    if !ran && !TLS.with(|t| t.in_global_init.get()) {
        GLOBAL.wait();
    }
}

fn global_init() {
    // SAFETY: only the initialising thread writes OPTIONS, before publishing GLOBAL = 2.
    let opts = unsafe { &mut *core::ptr::addr_of_mut!(OPTIONS) };
    // Acquire pairs with the Release store in set_api_conf.
    let api = API_CONF.load(Ordering::Acquire);
    let api_conf = if api.is_null() {
        None
    } else {
        // SAFETY: set_api_conf stored a &'static [u8]'s pointer and length.
        Some(unsafe { core::slice::from_raw_parts(api, API_CONF_LEN.load(Ordering::Relaxed)) })
    };
    crate::config::load(opts, api_conf);
    let debug = (opts.junk as u8 * crate::diag::DEBUG_JUNK)
        | (opts.zero as u8 * crate::diag::DEBUG_ZERO)
        | (opts.check_full as u8 * crate::diag::DEBUG_FULL);
    crate::diag::set_debug(debug);
    if debug != 0 {
        // Every block must pass the debug path, which the thread cache would bypass.
        opts.tcache = false;
    }
    let mode = read_system_mode();
    crate::arena::set_thp_globals(mode, opts.thp_threshold);
    crate::arena::set_decay_ms(opts.dirty_decay_ms);
    crate::arena::set_purge_globals(opts.dirty_max, opts.thp_collapse);
    crate::arena::set_muzzy_decay_ms(opts.muzzy_decay_ms);
    let meta = crate::thp::advice_for(opts.metadata_thp, mode, 0, usize::MAX);
    // Relaxed: read by the base under its lock, after this init.
    BASE.advice.store(
        match meta {
            crate::thp::ChunkAdvice::Huge => 1,
            crate::thp::ChunkAdvice::NoHuge => 2,
            crate::thp::ChunkAdvice::None => 0,
        },
        Ordering::Relaxed,
    );
    let n = if opts.narenas == 0 {
        4 * crate::os::ncpus()
    } else {
        opts.narenas
    };
    // Relaxed: published by the GLOBAL Release store.
    NARENAS_AUTO.store(n.clamp(1, MAX_ARENAS), Ordering::Relaxed);
    let a0 = Arena::create(0, opts.thp_for_arena(0));
    if a0.is_null() {
        crate::diag::fatal("out of memory creating the first arena");
    }
    // Release pairs with the Acquire in `arena`.
    ARENAS[0].store(a0, Ordering::Release);
    NARENAS.store(1, Ordering::Release);
    // SAFETY: the key slot is written once, here, before any thread reads it.
    unsafe {
        libc::pthread_key_create(core::ptr::addr_of_mut!(PTHREAD_KEY), Some(thread_exit));
    }
    crate::os::at_fork(fork_prepare, fork_parent, fork_child);
    crate::stats::at_init(opts);
    crate::prof::init(opts); // heap profiling: settings, unwinder priming, fork and exit hooks
    if opts.background_thread {
        // pthread_create allocates; on this thread that is served by arena 0 (the init is
        // running), and the new thread's own first allocation waits for the init to finish.
        // Relaxed: a flag for stats and tests.
        BACKGROUND.store(
            crate::os::spawn_detached(background_main),
            Ordering::Relaxed,
        );
    }
}

/// Whether the background purging thread runs (`background_thread:true`). A fork child has
/// none; there, as without it, purging runs on allocation activity.
static BACKGROUND: crate::sync::plain::AtomicBool = crate::sync::plain::AtomicBool::new(false);

/// Whether this process has a background purging thread.
pub fn background_thread_running() -> bool {
    // Relaxed: see BACKGROUND.
    BACKGROUND.load(Ordering::Relaxed)
}

/// The background thread: every arena's decay pass when due, so memory freed before a quiet
/// period goes back without waiting for the next allocation.
extern "C" fn background_main(_: *mut libc::c_void) -> *mut libc::c_void {
    ensure_init();
    loop {
        let mut wait = 1000u64;
        for i in 0..narenas() {
            wait = wait.min(arena(i).decay_tick());
        }
        crate::os::sleep_ms(wait.clamp(10, 1000));
    }
}

/// Reads `/sys/kernel/mm/transparent_hugepage/enabled` (missing: unknown).
pub fn read_system_mode() -> SystemMode {
    let mut buf = [0u8; 128];
    match crate::os::read_file(b"/sys/kernel/mm/transparent_hugepage/enabled\0", &mut buf) {
        Some(n) => crate::thp::parse_system_mode(&buf[..n]),
        None => SystemMode::Unknown,
    }
}

/// Arena `i`, which must exist.
#[inline]
pub fn arena(i: usize) -> &'static Arena {
    // Acquire pairs with the Release store when the arena was created.
    let a = ARENAS[i].load(Ordering::Acquire);
    debug_assert!(!a.is_null());
    // SAFETY: arenas are never destroyed; index i was handed out only after creation.
    unsafe { &*a }
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

/// Creates one more arena with `policy`; returns its index, or `None` when the table is full
/// or memory is short.
pub fn arena_create(policy: Thp) -> Option<usize> {
    ensure_init();
    let _g = REGISTRY.lock();
    publish_arena(policy)
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

impl crate::registry::Slots for ArenaTable {
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

/// Picks the automatic arena with the fewest threads, creating it if needed.
fn choose_arena() -> usize {
    // Relaxed: published through GLOBAL.
    let auto = NARENAS_AUTO.load(Ordering::Relaxed);
    crate::registry::choose(&REGISTRY, auto, &ArenaTable)
}

/// The calling thread's arena (binding it on first use).
pub fn current_arena() -> &'static Arena {
    ensure_init();
    let i = TLS.with(|t| t.arena.get());
    if i != UNBOUND {
        return arena(i as usize);
    }
    if !is_ready() {
        // A nested allocation inside the global init.
        return arena(0);
    }
    let i = choose_arena();
    TLS.with(|t| t.arena.set(i as u32));
    arena(i)
}

/// The calling thread's cache, creating it on first use; null while initialising, after the
/// thread's exit hook, or when `tcache:false`.
#[cold]
#[inline(never)]
pub fn tcache_slow() -> *mut Tcache {
    ensure_init();
    if !is_ready() {
        return null_mut();
    }
    let state = TLS.with(|t| t.state.get());
    if state != NEW {
        return tcache();
    }
    TLS.with(|t| t.state.set(INIT));
    let arena = current_arena();
    let opts = options();
    if !opts.tcache {
        TLS.with(|t| t.state.set(READY));
        return null_mut();
    }
    let tc = Tcache::create(arena, opts.tcache_max);
    if tc.is_null() {
        TLS.with(|t| t.state.set(NEW));
        return tc;
    }
    // SAFETY: the key was created by the init; setspecific may allocate (served by the arena
    // path, since this thread's state is INIT).
    unsafe { libc::pthread_setspecific(PTHREAD_KEY, tc as *const libc::c_void) };
    crate::os::set_tls_cache(tc as *mut u8);
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

/// Moves the calling thread to arena `i` (which must exist): flushes its cache first so that
/// nothing cached belongs to the old binding. Returns false if there is no such arena.
pub fn set_thread_arena(i: usize) -> bool {
    ensure_init();
    let Some(new) = arena_get(i) else {
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
    let tc = tcache();
    if !tc.is_null() {
        // SAFETY: the thread's own live cache.
        unsafe {
            (*tc).flush_all();
            (*tc).arena = new;
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
    let tc = tcache();
    if !tc.is_null() {
        // SAFETY: the thread's own live cache.
        unsafe { (*tc).flush_all() };
    }
}

extern "C" fn thread_exit(arg: *mut libc::c_void) {
    let tc = arg as *mut Tcache;
    crate::os::set_tls_cache(null_mut());
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

extern "C" fn fork_prepare() {
    REGISTRY.force_lock();
    for i in 0..narenas() {
        arena(i).lock_all();
    }
    SOURCE.fork_lock().force_lock();
    BASE.fork_lock().force_lock();
}

extern "C" fn fork_parent() {
    // SAFETY: fork_prepare took every one of these locks on this thread.
    unsafe {
        BASE.fork_lock().force_unlock();
        SOURCE.fork_lock().force_unlock();
        for i in (0..narenas()).rev() {
            arena(i).unlock_all();
        }
        REGISTRY.force_unlock();
    }
}

extern "C" fn fork_child() {
    // Relaxed: the child is single-threaded; its parent's background thread is not copied.
    BACKGROUND.store(false, Ordering::Relaxed);
    // SAFETY: in the child only this thread exists; every lock is reset to free.
    unsafe {
        BASE.fork_lock().reset_in_child();
        SOURCE.fork_lock().reset_in_child();
        for i in (0..narenas()).rev() {
            arena(i).reset_locks_in_child();
        }
        REGISTRY.reset_in_child();
    }
}
