//! `background_thread:true`: memory freed before a quiet period is purged by the allocator's
//! own thread, with no allocation activity at all; without it the same memory stays dirty
//! until the next allocation. Each case runs in a child process (the option is read at init).

use hugealloc::testing::alloc;
use std::process::Command;

const CHILD: &str = "HUGEALLOC_TEST_BACKGROUND_CHILD";

/// In the child: frees a 64 MiB working set, stays quiet for 800 ms (decay 200 ms), prints
/// whether the thread runs and the dirty bytes left.
fn child() {
    let p = alloc::malloc(64 << 20);
    assert!(!p.is_null());
    // SAFETY: a live 64 MiB block, written and freed.
    unsafe {
        std::ptr::write_bytes(p, 1, 64 << 20);
        alloc::free(p);
    }
    assert!(
        hugealloc::stats().dirty >= 60 << 20,
        "not dirty after the free"
    );
    std::thread::sleep(std::time::Duration::from_millis(800));
    println!(
        "running={} dirty={}",
        hugealloc::testing::init::background_thread_running(),
        hugealloc::stats().dirty
    );
}

fn run_child(conf: &str) -> (bool, usize) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "quiet_period_purge",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("HUGEALLOC_CONF", conf)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // libtest's own "test ... " text may share the line.
    let line = text
        .lines()
        .find_map(|l| l.find("running=").map(|at| &l[at..]))
        .unwrap_or_else(|| panic!("no figures from the child: {text}"));
    let mut it = line.split(' ');
    let running = it.next().unwrap() == "running=true";
    let dirty = it
        .next()
        .unwrap()
        .trim_start_matches("dirty=")
        .parse()
        .unwrap();
    (running, dirty)
}

#[test]
fn quiet_period_purge() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let (running, dirty) = run_child("background_thread:true,dirty_decay_ms:200");
    assert!(running, "the background thread did not start");
    assert!(
        dirty < 8 << 20,
        "{dirty} bytes still dirty with the background thread"
    );
    let (running, dirty) = run_child("background_thread:false,dirty_decay_ms:200");
    assert!(!running);
    assert!(
        dirty >= 60 << 20,
        "without the thread nothing should purge: {dirty}"
    );
}
