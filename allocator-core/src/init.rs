//! The one-time global initialisation: the effective options (`config`), the THP and purging
//! settings of the arena layer, the metadata advice, arena 0 and the automatic arena count
//! (`registry`), the thread-exit key (`thread`), the fork handlers, the at-exit statistics
//! printer (`stats`) and the background purging thread. Every entry point that may come first
//! calls `ensure_init` before it reaches the arenas or the thread's state.
//!
//! A nested allocation on the initialising thread (libc allocating inside the init) is served
//! by arena 0; other threads wait for the init to finish.
//!
//! Fork during the init: the fork handlers are the init's first step, and the prepare handler
//! waits for a running init to finish, so a child sees the init done or not started. A fork
//! that comes before the handlers exist leaves the child with an init marked running by a
//! thread it does not have, which had done nothing yet: the child's first `ensure_init` finds
//! that from the pid recorded with the init (`INIT_PID`) and runs the init itself.

use crate::base::BASE;
use crate::chunk::SOURCE;
use crate::config;
use crate::diag;
use crate::hugetlb::HUGETLB;
use crate::registry::{self, arena, narenas};
use crate::size_class::CHUNK;
use crate::sync::plain::{AtomicPtr, AtomicU32, AtomicUsize};
use crate::sync::{Once, Ordering};
use crate::thp::{SystemMode, Thp};
use crate::thread;
use core::ptr::null_mut;

/// The one-time global initialisation.
static GLOBAL: Once = Once::new();
/// A configuration string compiled into the program (see `HugeAlloc::with_conf`).
static API_CONF: AtomicPtr<u8> = AtomicPtr::new(null_mut());
static API_CONF_LEN: AtomicUsize = AtomicUsize::new(0);
/// The pid of the process whose thread started the init (0: none yet). Every thread entering
/// `ensure_init` sets it before trying `GLOBAL`, so a running init always comes with a pid; a
/// fork child finds its parent's pid there.
static INIT_PID: AtomicU32 = AtomicU32::new(0);
/// A test hook called at the init's steps (see `set_test_hook`), as a `fn(InitStep)`.
static TEST_HOOK: AtomicPtr<()> = AtomicPtr::new(null_mut());

/// The points of the init where `set_test_hook`'s function is called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitStep {
    /// The init has started, before the fork handlers are registered.
    Start,
    /// The fork handlers are registered; nothing else is done yet.
    ForkHandlers,
}

/// Calls `hook` at each `InitStep` of the global init (for tests of a fork during the init).
/// Set it before the first allocation.
#[doc(hidden)]
pub fn set_test_hook(hook: fn(InitStep)) {
    // Release pairs with the Acquire load in `test_hook`.
    TEST_HOOK.store(hook as *mut (), Ordering::Release);
}

fn test_hook(step: InitStep) {
    // Acquire pairs with the Release store in set_test_hook.
    let hook = TEST_HOOK.load(Ordering::Acquire);
    if !hook.is_null() {
        // SAFETY: a non-null TEST_HOOK was stored from a `fn(InitStep)` by set_test_hook.
        let hook: fn(InitStep) = unsafe { core::mem::transmute::<*mut (), fn(InitStep)>(hook) };
        hook(step);
    }
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
    let me = crate::os::pid();
    // SeqCst (both): this thread's own later load must see its claim or an earlier one.
    let _ = INIT_PID.compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst);
    let ran = GLOBAL.call(|| {
        thread::set_in_global_init(true);
        // The init opens files that may be missing (ENOENT): the program must not see it.
        let saved = crate::os::errno();
        global_init();
        crate::os::set_errno(saved);
        thread::set_in_global_init(false);
    });
    // A nested allocation on the initialising thread proceeds on arena 0; others wait.
    if ran || thread::in_global_init() {
        return;
    }
    while GLOBAL.is_running() {
        // SeqCst: see above.
        let owner = INIT_PID.load(Ordering::SeqCst);
        if owner != me
            && INIT_PID
                .compare_exchange(owner, me, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            // A fork child whose parent was in the init before the fork handlers existed
            // (they would have waited for it): the init did nothing yet. Run it here.
            // SAFETY: the initialising thread stayed in the parent, before its first step;
            // only the thread that won the claim above resets.
            unsafe { GLOBAL.reset_abandoned() };
            return ensure_init();
        }
        core::hint::spin_loop();
    }
    GLOBAL.wait();
}

fn global_init() {
    test_hook(InitStep::Start);
    // First, so that a fork from here on waits for the rest (see `fork_prepare`).
    if !crate::os::at_fork(fork_prepare, fork_parent, fork_child) {
        diag::warn("pthread_atfork failed: a fork child may find the allocator's locks held");
    }
    test_hook(InitStep::ForkHandlers);
    // SAFETY: this is the global init, on its own thread, before GLOBAL is published done.
    let opts = unsafe { config::options_mut() };
    // Acquire pairs with the Release store in set_api_conf.
    let api = API_CONF.load(Ordering::Acquire);
    let api_conf = if api.is_null() {
        None
    } else {
        // SAFETY: set_api_conf stored a &'static [u8]'s pointer and length.
        Some(unsafe { core::slice::from_raw_parts(api, API_CONF_LEN.load(Ordering::Relaxed)) })
    };
    config::load(opts, api_conf);
    let debug = (opts.junk as u8 * diag::DEBUG_JUNK)
        | (opts.zero as u8 * diag::DEBUG_ZERO)
        | (opts.check_full as u8 * diag::DEBUG_FULL);
    // The debug modes keep the thread caches, out of the fast paths' sight (`thread`).
    diag::set_debug(debug);
    let mode = read_system_mode();
    crate::arena::set_thp_globals(mode, opts.thp_threshold);
    crate::arena::set_decay_ms(opts.dirty_decay_ms);
    crate::arena::set_purge_globals(opts.dirty_max, opts.thp_collapse);
    crate::arena::set_dirty_growth_pct(opts.dirty_growth_pct);
    crate::arena::set_muzzy_decay_ms(opts.muzzy_decay_ms);
    crate::collapse::set_rate(opts.thp_defer_rate);
    let meta = crate::thp::advice_for(opts.metadata_thp, mode, 0, usize::MAX);
    // Relaxed: read by the base under its lock, after this init.
    let meta_defer = crate::thp::defers_collapse(opts.metadata_thp, mode, CHUNK, CHUNK);
    BASE.advice.store(
        match meta {
            _ if meta_defer => crate::base::ADVICE_DEFER,
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
    // The hugetlb reserve before any arena takes chunks (it may warn: diag allocates nothing).
    crate::hugetlb::start(opts);
    if !registry::init(n, opts.thp_for_arena(0)) {
        diag::fatal("out of memory creating the first arena");
    }
    thread::create_exit_key();
    crate::stats::at_init(opts);
    crate::prof::init(opts); // heap profiling: settings, unwinder priming, fork and exit hooks
                             // `thp:defer` needs the background thread for its collapses: asking for the policy starts
                             // it, whatever `background_thread` says.
    let defer = opts.thp == Thp::Defer
        || opts.arena_thp.contains(&Some(Thp::Defer))
        || opts.metadata_thp == Thp::Defer;
    if opts.background_thread || defer {
        // pthread_create allocates; on this thread that is served by arena 0 (the init is
        // running), and the new thread's own first allocation waits for the init to finish.
        start_background();
    }
}

/// Whether the background thread runs (`background_thread:true`, or a `thp:defer` arena). A
/// fork child has none; there, as without it, purging runs on allocation activity and no
/// deferred collapse happens until the child asks for `defer` again.
static BACKGROUND: crate::sync::plain::AtomicBool = crate::sync::plain::AtomicBool::new(false);

/// Starts the background thread unless it runs. Where `pthread_create` allocates, this must
/// not run inside an allocation (the init, or a control call such as `arena.<i>.thp`).
fn start_background() {
    // Relaxed (both): the flag only keeps a second thread from starting; the thread itself
    // synchronises through `ensure_init`.
    if BACKGROUND
        .compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
        && !crate::os::spawn_detached(background_main)
    {
        BACKGROUND.store(false, Ordering::Relaxed);
    }
}

/// A policy was set at run time (`arena.<i>.thp`, `Arena::set_thp`, a new arena): `defer`
/// needs the background thread. Call outside any allocation.
pub fn policy_changed(policy: Thp) {
    if policy == Thp::Defer {
        start_background();
    }
}

/// A fork child queued a deferred collapse and has no background thread: starts one (once).
/// Call with no lock held, outside the allocator's own bookkeeping (after a huge block is
/// handed out): `pthread_create` allocates.
pub fn start_wanted_collapse_thread() {
    if crate::collapse::thread_wanted() {
        crate::collapse::thread_started();
        start_background();
    }
}

/// Whether this process has a background purging thread.
pub fn background_thread_running() -> bool {
    // Relaxed: see BACKGROUND.
    BACKGROUND.load(Ordering::Relaxed)
}

/// The background thread: every arena's decay pass when due, so memory freed before a quiet
/// period goes back without waiting for the next allocation; and the deferred collapses of
/// `thp:defer` (`collapse::pass`), with no arena lock held.
extern "C" fn background_main(_: *mut libc::c_void) -> *mut libc::c_void {
    ensure_init();
    loop {
        let mut wait = 1000u64;
        for i in 0..narenas() {
            wait = wait.min(arena(i).decay_tick());
        }
        let collapse_wait = crate::collapse::pass(
            crate::os::now_ms(),
            // Metadata chunks are never given back: always live.
            |i, chunk| {
                i == crate::collapse::METADATA
                    || registry::arena_get(i as usize).is_some_and(|a| a.collapse_live(chunk))
            },
            |i, chunk, outcome| {
                if i == crate::collapse::METADATA {
                    if outcome == crate::collapse::Outcome::Done {
                        // Relaxed: a statistic.
                        BASE.collapsed_chunks.fetch_add(1, Ordering::Relaxed);
                    }
                } else if let Some(a) = registry::arena_get(i as usize) {
                    a.collapse_record(chunk, outcome);
                }
            },
        );
        crate::os::sleep_ms(wait.min(collapse_wait).clamp(10, 1000));
    }
}

/// Reads `/sys/kernel/mm/transparent_hugepage/enabled` (missing: unknown).
pub fn read_system_mode() -> SystemMode {
    let mut buf = [0u8; 128];
    let n = crate::os::read_file(b"/sys/kernel/mm/transparent_hugepage/enabled\0", &mut buf);
    // `get`: `read_file` returns at most the buffer's length, but no bounds check may panic.
    match n.and_then(|n| buf.get(..n)) {
        Some(text) => crate::thp::parse_system_mode(text),
        None => SystemMode::Unknown,
    }
}

extern "C" fn fork_prepare() {
    // An init running on another thread finishes first, so the child never sees it half done
    // (its remaining steps take no lock a forking thread holds: they run before the fork takes
    // any of ours, and glibc's atfork lock is needed only to register handlers, done already).
    if !is_ready() && !thread::in_global_init() {
        GLOBAL.wait();
    }
    // Outside every lock (it reads sysfs): warns once where a child's writes could find the
    // hugetlb pool short (docs/hugetlb.md, "fork").
    HUGETLB.fork_headroom();
    registry::fork_lock();
    for i in 0..narenas() {
        arena(i).lock_all();
    }
    crate::collapse::fork_lock().force_lock();
    HUGETLB.fork_lock().force_lock();
    SOURCE.fork_lock().force_lock();
    BASE.fork_lock().force_lock();
}

extern "C" fn fork_parent() {
    // SAFETY: fork_prepare took every one of these locks on this thread.
    unsafe {
        BASE.fork_lock().force_unlock();
        SOURCE.fork_lock().force_unlock();
        HUGETLB.fork_lock().force_unlock();
        crate::collapse::fork_lock().force_unlock();
        for i in (0..narenas()).rev() {
            arena(i).unlock_all();
        }
        registry::fork_unlock();
    }
}

extern "C" fn fork_child() {
    // Relaxed: the child is single-threaded; its parent's background thread is not copied.
    BACKGROUND.store(false, Ordering::Relaxed);
    // SAFETY: in the child only this thread exists; every lock is reset to free.
    unsafe {
        BASE.fork_lock().reset_in_child();
        SOURCE.fork_lock().reset_in_child();
        HUGETLB.fork_lock().reset_in_child();
        crate::collapse::fork_lock().reset_in_child();
        for i in (0..narenas()).rev() {
            arena(i).reset_locks_in_child();
        }
        registry::fork_reset_in_child();
    }
    crate::collapse::clear_in_child();
}
