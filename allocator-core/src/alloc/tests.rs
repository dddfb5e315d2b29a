use super::*;
use crate::pagemap::TAG_MASK;
use std::vec::Vec;

fn fill(p: *mut u8, len: usize, seed: u8) {
    // SAFETY: p is a live block of at least len bytes.
    unsafe { core::slice::from_raw_parts_mut(p, len) }
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = seed.wrapping_add(i as u8));
}

fn check(p: *const u8, len: usize, seed: u8) {
    // SAFETY: p is a live block of at least len bytes.
    let s = unsafe { core::slice::from_raw_parts(p, len) };
    for (i, &b) in s.iter().enumerate() {
        assert_eq!(b, seed.wrapping_add(i as u8), "byte {i} of {len}");
    }
}

#[test]
fn every_size_round_trips() {
    let sizes = [
        0usize,
        1,
        8,
        9,
        16,
        17,
        100,
        1024,
        4096,
        5000,
        14336,
        14337,
        16384,
        16385,
        40000,
        300_000,
        1 << 20,
        1792 << 10,
        (1792 << 10) + 1,
        2 << 20,
        5 << 20,
        33 << 20,
    ];
    let mut live = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let p = malloc(size);
        assert!(!p.is_null());
        let want_align = if size >= 16 { 16 } else { 8 };
        assert_eq!(p as usize % want_align, 0, "size {size}");
        // SAFETY: p is live.
        assert!(unsafe { usable_size(p) } >= size);
        fill(p, size, i as u8);
        live.push((p, size, i as u8));
    }
    for &(p, size, seed) in &live {
        check(p, size, seed);
    }
    for (p, _, _) in live {
        // SAFETY: p is live and dropped here.
        unsafe { free(p) };
    }
}

#[test]
fn alignments_up_to_a_gibibyte_of_address() {
    for lg in 0..=27 {
        let align = 1usize << lg;
        for size in [1usize, 24, 3000, 20000, 3 << 20] {
            let p = alloc(size, align);
            assert!(!p.is_null(), "size {size} align {align}");
            assert_eq!(p as usize % align, 0, "size {size} align {align}");
            fill(p, size, 7);
            check(p, size, 7);
            // SAFETY: p is live.
            unsafe { free(p) };
        }
    }
    let p = alloc(100, 1 << 30);
    assert!(!p.is_null());
    assert_eq!(p as usize % (1 << 30), 0);
    // SAFETY: p is live.
    unsafe { free(p) };
}

#[test]
fn zeroed_is_zero_after_reuse() {
    for size in [10usize, 3000, 20000, 500_000, 3 << 20] {
        for _ in 0..3 {
            let p = malloc(size);
            fill(p, size, 0xff);
            // SAFETY: p is live.
            unsafe { free(p) };
            let q = alloc_zeroed(size, 8);
            // SAFETY: q is a live block of size bytes.
            let got = unsafe { core::slice::from_raw_parts(q, size) };
            assert!(got.iter().all(|&b| b == 0), "size {size}");
            // SAFETY: q is live.
            unsafe { free(q) };
        }
    }
}

#[test]
fn realloc_keeps_contents_and_grows_in_place_when_it_can() {
    let mut p = malloc(10);
    fill(p, 10, 3);
    let mut len = 10;
    while len < (40 << 20) {
        let next = len * 3 / 2 + 7;
        // SAFETY: p is live.
        let q = unsafe { realloc(p, next, 1) };
        assert!(!q.is_null());
        check(q, len, 3);
        fill(q, next, 3);
        p = q;
        len = next;
    }
    // Shrinking a huge block stays in place.
    // SAFETY: p is live.
    let q = unsafe { realloc(p, 3 << 20, 1) };
    assert_eq!(q, p);
    check(q, 3 << 20, 3);
    // SAFETY: q is live.
    unsafe { free(q) };
    // A large run followed by free pages grows in place.
    let a = malloc(20000);
    // SAFETY: a is live.
    let b = unsafe { realloc(a, 24000, 1) };
    assert!(!b.is_null());
    // SAFETY: b is live.
    unsafe { free(b) };
}

#[test]
fn overflowing_sizes_fail() {
    assert!(malloc(usize::MAX).is_null());
    assert!(alloc(usize::MAX - 4096, 4096).is_null());
    assert!(alloc((1 << 62) + 1, 16).is_null());
    assert!(alloc_zeroed(usize::MAX / 2, 8).is_null());
}

#[test]
fn stats_move_with_allocations() {
    // A private arena, so that tests running beside this one cannot move its figures.
    crate::init::ensure_init();
    let idx = crate::registry::arena_create(crate::thp::Thp::Default).unwrap();
    let arena = crate::registry::arena(idx);
    let before = arena.snapshot().arena;
    let p = alloc_in(Some(idx), 64 << 20, 1, false, false);
    // SAFETY: p is a live 64 MiB block.
    unsafe { core::ptr::write_bytes(p, 1, 64 << 20) };
    let during = arena.snapshot().arena;
    assert_eq!(during.huge_allocated, before.huge_allocated + (64 << 20));
    assert_eq!(during.huge_nmalloc, before.huge_nmalloc + 1);
    let global = crate::stats::stats();
    assert!(
        global.allocated >= 64 << 20 && global.active >= 64 << 20,
        "{global:?}"
    );
    assert!(global.mapped >= global.active && global.resident >= 64 << 20);
    // SAFETY: p is live.
    unsafe { free(p) };
    let after = arena.snapshot().arena;
    assert_eq!(after.huge_allocated, before.huge_allocated);
    assert_eq!(after.huge_nfree, before.huge_nfree + 1);
    assert!(
        after.dirty_extent_bytes >= 64 << 20,
        "freed chunks are kept dirty: {after:?}"
    );
}

#[test]
fn huge_shrink_gives_back_its_tail() {
    // A private arena, so that tests running beside this one cannot take the tail.
    crate::init::ensure_init();
    let idx = crate::registry::arena_create(crate::thp::Thp::Default).unwrap();
    let a = crate::registry::arena(idx);
    let (big, small) = (class_of(8 * CHUNK), class_of(2 * CHUNK));
    let p = a.huge_alloc(big, 8 * CHUNK, CHUNK, false);
    assert!(!p.is_null());
    let Owner::Huge { extent } = arena::owner_of(p) else {
        panic!("not a huge block")
    };
    assert!(a.huge_resize(extent, small, 2 * CHUNK));
    // The freed tail is a free extent of its own in the pagemap...
    let entry = PAGEMAP.get(p as usize + 2 * CHUNK);
    assert_eq!(entry & TAG_MASK, crate::pagemap::TAG_EXTENT);
    assert_ne!(
        entry & !TAG_MASK,
        extent as usize,
        "the freed tail still names the live block"
    );
    // ...so the block grows back into it in place.
    assert!(a.huge_resize(extent, big, 8 * CHUNK));
    a.huge_free(extent);
}

/// `LARGE_SIZES` (sized free's check for large blocks) says `class_of(size) == class` for
/// every large class, and matches no size for the other class bytes.
#[test]
fn large_sizes_rows_are_the_large_classes() {
    let in_row = |size: usize, byte: usize| {
        let (min, range) = LARGE_SIZES[byte];
        (size as u64).wrapping_sub(min) < range
    };
    for byte in 0..256 {
        let large = (NSMALL..HUGE_FIRST).contains(&byte);
        // Each class's edges and a few sizes inside, and sizes of no class here.
        let mut sizes: Vec<usize> = (NSMALL.saturating_sub(1)..HUGE_FIRST + 1)
            .flat_map(|c| {
                let (lo, hi) = (class_min_size(c), class_size(c));
                [lo - 1, lo, lo + 1, (lo + hi) / 2, hi - 1, hi, hi + 1]
            })
            .collect();
        sizes.extend([0, 1, 8, SMALL_MAX, usize::MAX, 1 << 40]);
        for size in sizes {
            let want = large && (1..=MAX_SIZE).contains(&size) && class_of(size) == byte;
            assert_eq!(in_row(size, byte), want, "byte {byte} size {size}");
        }
    }
}
