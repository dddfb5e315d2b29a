//! The process-wide arena table: an automatic arena (`i < narenas`) exists by configuration,
//! so a thread can be moved to it before any thread was placed there. Alone in its binary, so
//! no other test creates arenas meanwhile.

use hugealloc::testing::registry;

#[test]
fn thread_set_arena_creates_an_automatic_arena() {
    hugealloc::testing::init::ensure_init();
    let last = registry::narenas_auto() - 1;
    assert!(last > 0, "needs more than one automatic arena");
    assert!(
        registry::arena_get(last).is_none(),
        "arena {last} already exists: the test proves nothing"
    );
    assert!(hugealloc::thread_set_arena(last), "automatic arena {last}");
    assert!(registry::arena_get(last).is_some());
    assert_eq!(
        registry::narenas(),
        last + 1,
        "the slots before it are filled too"
    );
    // The thread allocates from it now.
    let p = hugealloc::testing::alloc::alloc_in(None, 3 << 20, 8, false, false);
    assert!(!p.is_null());
    let owner = hugealloc::testing::arena::owner_of(p);
    assert_eq!(
        hugealloc::testing::arena::arena_index_of(&owner) as usize,
        last
    );
    // SAFETY: p is a live block from hugealloc.
    unsafe { hugealloc::testing::alloc::free(p) };
    // Past the automatic arenas, only arenas created explicitly exist.
    assert!(!hugealloc::thread_set_arena(registry::MAX_ARENAS - 1));
}
