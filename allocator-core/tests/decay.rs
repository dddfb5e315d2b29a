//! Decay returns memory: after a 256 MiB working set is freed and the (short) decay time has
//! passed, allocation activity purges it: `stats().resident` falls back and so does the
//! process's RSS.

use hugealloc::testing::alloc;

mod common;
use common::rss_bytes;

#[test]
fn freed_working_set_is_purged_after_the_decay_time() {
    let _ = hugealloc::stats(); // initialise, so the setting below is not overwritten
    hugealloc::testing::arena::set_decay_ms(200);
    let base_resident = hugealloc::stats().resident;
    let base_rss = rss_bytes();
    let blocks: Vec<*mut u8> = (0..32).map(|_| alloc::malloc(8 << 20)).collect();
    for &p in &blocks {
        assert!(!p.is_null());
        // SAFETY: p is a live 8 MiB block.
        unsafe { std::ptr::write_bytes(p, 0x5a, 8 << 20) };
    }
    let full = hugealloc::stats();
    assert!(full.resident >= base_resident + (250 << 20), "{full:?}");
    assert!(rss_bytes() >= base_rss + (250 << 20));
    for p in blocks {
        // SAFETY: p is live.
        unsafe { alloc::free(p) };
    }
    // Still dirty right after the free: kept for reuse.
    assert!(hugealloc::stats().dirty >= 250 << 20);
    std::thread::sleep(std::time::Duration::from_millis(400));
    // Allocation activity drives decay.
    for _ in 0..4 {
        let p = alloc::malloc(2 << 20);
        // SAFETY: p is live.
        unsafe { alloc::free(p) };
        std::thread::sleep(std::time::Duration::from_millis(30));
    }
    let after = hugealloc::stats();
    assert!(
        after.resident < base_resident + (32 << 20),
        "resident {} after, {} before",
        after.resident,
        base_resident
    );
    assert!(after.dirty < 32 << 20, "{after:?}");
    let rss = rss_bytes();
    assert!(
        rss < base_rss + (64 << 20),
        "RSS {rss} stayed above {base_rss} + 64 MiB"
    );
}
