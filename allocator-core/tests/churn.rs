//! Thread churn: thousands of short-lived threads leave no cache behind. Alone in its test
//! binary, so that no other test moves `stats().active` meanwhile.

#[global_allocator]
static GLOBAL: hugealloc::HugeAlloc = hugealloc::HugeAlloc;

#[test]
fn thread_churn_does_not_leak() {
    // Warm up so that arenas and caches of the test harness exist.
    let spawn_round = |n: usize| {
        for _ in 0..n {
            std::thread::spawn(|| {
                let v: Vec<Vec<u8>> = (0..50).map(|i| vec![1u8; i * 37]).collect();
                v.len()
            })
            .join()
            .unwrap();
        }
    };
    spawn_round(200);
    let before = hugealloc::stats().active;
    spawn_round(3000);
    let after = hugealloc::stats().active;
    // Each exited thread flushed its cache: a leak of even one cache per thread would show
    // as megabytes over 3,000 threads.
    assert!(
        after < before + (4 << 20),
        "active grew from {before} to {after} over 3000 threads"
    );
}
