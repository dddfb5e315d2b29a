//! A fork from another thread while the global init runs: the child must find the init done
//! or not started, and allocate. The init thread is held at one step by the init's test hook
//! while the other thread forks; the child allocates and exits. A child stuck in the init is
//! killed after `HANG_S` seconds and fails the test (a hang, not a speed, is what is tested:
//! a correct child finishes in milliseconds).

use hugealloc::testing::init::{self, InitStep};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

const HANG_S: u64 = 30;

/// The step to hold the init at (`InitStep as u8`).
static HOLD_AT: AtomicU8 = AtomicU8::new(0);
/// Set by the hook when the init reached that step; the forking thread waits for it.
static REACHED: AtomicBool = AtomicBool::new(false);

fn hook(step: InitStep) {
    if step as u8 == HOLD_AT.load(Ordering::SeqCst) {
        REACHED.store(true, Ordering::SeqCst);
        // Long enough for the other thread's fork to land inside the init (if it lands later,
        // the test passes without proving anything: it cannot fail wrongly).
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Runs the scenario with the init held at `step`; panics if the child fails or hangs.
pub fn fork_during_init(step: InitStep) {
    assert!(
        !init::is_ready(),
        "the init ran already: the test proves nothing"
    );
    HOLD_AT.store(step as u8, Ordering::SeqCst);
    init::set_test_hook(hook);
    let initialiser = std::thread::spawn(|| {
        let p = hugealloc::testing::alloc::malloc(64);
        assert!(!p.is_null());
    });
    while !REACHED.load(Ordering::SeqCst) {
        std::hint::spin_loop();
    }
    // SAFETY: the child only allocates through hugealloc and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let p = hugealloc::testing::alloc::malloc(100);
        let code = if p.is_null() { 2 } else { 0 };
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    initialiser.join().unwrap();
    let status = super::common::wait_child(
        pid,
        HANG_S,
        &format!("the fork child in the global init ({step:?})"),
    );
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x}"
    );
}
