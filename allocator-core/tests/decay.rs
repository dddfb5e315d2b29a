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

/// A bin keeps the slabs a batch emptied (so the next batch does not make them again), and
/// the arena's decay passes give back those no refill needed between two passes, down to
/// one kept slab.
#[test]
fn kept_empty_slabs_go_back_after_an_idle_decay_pass() {
    use hugealloc::testing::arena::{arena_index_of, owner_of};
    use hugealloc::testing::size_class::{class_of, SLAB_OBJS};
    let class = class_of(1024);
    let blocks: Vec<*mut u8> = (0..1000).map(|_| alloc::malloc(1024)).collect();
    assert!(blocks.iter().all(|p| !p.is_null()));
    let arena = hugealloc::testing::registry::arena(arena_index_of(&owner_of(blocks[0])) as usize);
    let slabs = || arena.snapshot().bins[class].nslabs;
    let in_use = slabs();
    assert!(in_use >= 1000 / SLAB_OBJS[class] as u64, "{in_use} slabs");
    for p in blocks {
        // SAFETY: p is live.
        unsafe { alloc::free(p) };
    }
    hugealloc::testing::thread::flush_thread_cache();
    // All of them empty now, and kept (1 MiB of 4 KiB slabs is more than these).
    assert!(slabs() + 8 >= in_use, "{} of {in_use} kept", slabs());
    // Two passes: the first finds none idle for a whole pass (the refills above emptied the
    // kept list), the second gives back all but one (a pass of another test may come between:
    // then the first already does).
    arena.decay_now();
    arena.decay_now();
    assert!(slabs() <= 4, "{} slabs after two passes", slabs());
}

/// A bin that needs a slab takes another bin's kept empty slab of the same page count before
/// it takes fresh pages (issue 13: espresso's peak RSS), counted in `small.slabs_moved`;
/// a bin of another page count does not. A private arena with decay off for it, so no other
/// test's allocation or decay pass (this file shortens the decay time) moves its slabs.
#[test]
fn kept_empty_slabs_move_to_a_class_of_the_same_page_count() {
    use hugealloc::ctl::{self, CtlValue};
    use hugealloc::testing::size_class::{class_of, SLAB_OBJS};
    use std::collections::HashSet;
    let arena = hugealloc::Arena::new(hugealloc::Thp::Default)
        .expect("an arena")
        .index();
    ctl::write(
        &format!("arena.{arena}.dirty_decay_ms"),
        CtlValue::I64(3_600_000),
    )
    .unwrap();
    let counter = |name: &str| -> u64 {
        let key = format!("stats.arenas.{arena}.{name}");
        match ctl::read(&key) {
            Ok(CtlValue::U64(v)) => v,
            Ok(CtlValue::Size(v)) => v as u64,
            other => panic!("{key}: {other:?}"),
        }
    };
    let page = |p: *mut u8| p as usize & !4095;
    let alloc_n = |size: usize, n: usize| -> Vec<*mut u8> {
        (0..n)
            .map(|_| {
                let p = alloc::alloc_in(Some(arena), size, 8, false, false);
                assert!(!p.is_null());
                p
            })
            .collect()
    };
    // 256 B and 224 B slabs are one page; 160 B slabs are two.
    use hugealloc::testing::size_class::SLAB_PAGES;
    let (quarter, half, odd) = (class_of(256), class_of(224), class_of(160));
    assert_eq!(
        (SLAB_PAGES[quarter], SLAB_PAGES[half], SLAB_PAGES[odd]),
        (1, 1, 2)
    );
    let k = alloc_n(256, 64 * SLAB_OBJS[quarter] as usize);
    let pages: HashSet<usize> = k.iter().map(|&p| page(p)).collect();
    assert_eq!(pages.len(), 64);
    for p in k {
        // SAFETY: p is live.
        unsafe { alloc::free_no_cache(p) };
    }
    // 63 kept empty by the 256 B bin (the 64th is its current slab).
    let active = counter("pactive");
    let moved = counter("small.slabs_moved");
    let h = alloc_n(224, 32 * SLAB_OBJS[half] as usize);
    assert_eq!(
        counter("small.slabs_moved"),
        moved + 32,
        "224 B slabs not taken from 256 B"
    );
    assert_eq!(counter("pactive"), active, "fresh pages taken");
    assert!(
        h.iter().all(|&p| pages.contains(&page(p))),
        "a 224 B block outside the pages 256 B emptied"
    );
    let o = alloc_n(160, 1);
    assert_eq!(
        counter("small.slabs_moved"),
        moved + 32,
        "a two-page slab took a one-page one"
    );
    assert!(!pages.contains(&page(o[0])));
    for p in h.into_iter().chain(o) {
        // SAFETY: p is live.
        unsafe { alloc::free_no_cache(p) };
    }
    // The bins' figures follow the slabs: 256 B holds its current slab and 31 kept.
    let slabs = |class: usize| {
        let key = format!("stats.arenas.{arena}.bins.{class}.curslabs");
        match ctl::read(&key) {
            Ok(CtlValue::Size(v)) => v,
            other => panic!("{key}: {other:?}"),
        }
    };
    assert_eq!(slabs(quarter), 32);
    assert_eq!(slabs(half), 32);
    // `purge` gives every kept slab back, borrowed ones included.
    hugealloc::purge();
    assert_eq!(slabs(quarter) + slabs(half) + slabs(odd), 0);
}
