//! Reuse of freed huge blocks (issue 17, `malloc-large`): when no free run of chunks is long
//! enough, a dirty free run is extended by the clean chunks right after it instead of taking
//! fresh chunks elsewhere, so memory already faulted in is reused and peak RSS stays lower.
//! A binary of its own: the chunk layout it builds must not be disturbed by other tests.

use hugealloc::ctl::{self, CtlValue};
use hugealloc::testing::alloc;
use hugealloc::{Arena, Thp};

const MIB: usize = 1 << 20;

fn counter(arena: usize, name: &str) -> u64 {
    let key = format!("stats.arenas.{arena}.{name}");
    match ctl::read(&key) {
        Ok(CtlValue::U64(v)) => v,
        other => panic!("{key}: {other:?}"),
    }
}

#[test]
fn dirty_run_is_extended_by_the_clean_chunks_after_it() {
    let arena = Arena::new(Thp::Never).expect("an arena").index();
    // 80 MiB freed and purged: one clean free run of 40 chunks.
    let x = alloc::alloc_in(Some(arena), 80 * MIB, 1, false, false);
    assert!(!x.is_null());
    // SAFETY: x is live.
    unsafe { alloc::free(x) };
    hugealloc::purge();
    // 6 MiB from its start, touched and freed: a dirty run of 3 chunks, then 37 clean ones.
    let a = alloc::alloc_in(Some(arena), 6 * MIB, 1, false, false);
    assert_eq!(a, x, "the 6 MiB block is not at the start of the clean run");
    // SAFETY: a is live, 6 MiB.
    unsafe { a.write_bytes(7, 6 * MIB) };
    // SAFETY: a is live.
    unsafe { alloc::free(a) };
    let before = counter(arena, "huge.extended");
    // 16 MiB: no free run of 8 chunks is dirty; the dirty 3 plus 5 clean ones after them are.
    let b = alloc::alloc_in(Some(arena), 16 * MIB, 1, true, false);
    assert_eq!(b, a, "the dirty run was not reused");
    assert_eq!(counter(arena, "huge.extended"), before + 1);
    // Zeroed as asked, over the dirty part and the clean part.
    let zero = (0..16 * MIB).step_by(4096).all(|o| {
        // SAFETY: b is live, 16 MiB, and o is below that.
        unsafe { *b.add(o) == 0 }
    });
    assert!(zero, "the extended block was not zeroed");
    // SAFETY: b is live.
    unsafe { alloc::free(b) };
}
