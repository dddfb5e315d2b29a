//! The three purge phases driven one by one on a private arena: a run being purged is not
//! handed out, not coalesced, counted as purging alone, and comes back clean.

use super::*;
use crate::arena::{owner_of, Arena, Owner};
use crate::pagemap::{PAGEMAP, TAG_MASK};
use crate::size_class::{class_of, large_pages};
use crate::thp::Thp;

/// A private arena that never purges on its own (so only the test's phases run).
fn private_arena() -> &'static Arena {
    crate::init::ensure_init();
    let idx = crate::registry::arena_create(Thp::Never).unwrap();
    let a = crate::registry::arena(idx);
    a.set_dirty_decay_ms(-1);
    a
}

fn extent_at(addr: usize) -> *mut Extent {
    let entry = PAGEMAP.get(addr);
    assert_eq!(entry & TAG_MASK, crate::pagemap::TAG_EXTENT);
    (entry & !TAG_MASK) as *mut Extent
}

#[test]
fn a_busy_extent_is_not_handed_out_nor_coalesced_and_comes_back_clean() {
    let a = private_arena();
    let (big, small) = (class_of(4 * CHUNK), class_of(2 * CHUNK));
    let p = a.huge_alloc(big, 4 * CHUNK, CHUNK, false);
    assert!(!p.is_null());
    // SAFETY: p is a live block of 4 chunks.
    unsafe { core::ptr::write_bytes(p, 0x5a, 4 * CHUNK) };
    let Owner::Huge { extent: h } = owner_of(p) else {
        panic!("not a huge block")
    };
    // The tail (2 chunks, dirty) becomes a free extent right after the block.
    assert!(a.huge_resize(h, small, 2 * CHUNK));
    let tail_addr = p as usize + 2 * CHUNK;
    let t = extent_at(tail_addr);

    let mut batch = PurgeBatch::new();
    let mut inner = a.inner.lock();
    let (dirty0, clean0, purged0) = (
        inner.stats.dirty_extent_bytes,
        inner.stats.clean_extent_bytes,
        inner.stats.purged_bytes,
    );
    inner.purge_choose(PurgeGoal::AllExtents, &mut batch);
    assert!(
        batch.runs().iter().any(|r| r.1 == tail_addr),
        "the dirty tail was not chosen"
    );
    // SAFETY: t is a live descriptor of this arena (lock held).
    assert_eq!(unsafe { (*t).state }, STATE_PURGING);
    assert_eq!(inner.stats.dirty_extent_bytes, 0);
    assert_eq!(inner.stats.purging_bytes, dirty0);
    // Not handed out: a request the tail would fit exactly gets other chunks.
    let (e2, _) = inner.extent_take(2, 1).unwrap();
    // SAFETY: e2 was just taken and is ours.
    let e2_addr = unsafe { (*e2).addr };
    assert!(
        e2_addr + 2 * CHUNK <= tail_addr || e2_addr >= tail_addr + 2 * CHUNK,
        "a busy extent was handed out"
    );
    // SAFETY: as above; it goes back free and clean.
    unsafe { (*e2).state = STATE_FREE };
    inner.extent_free(e2);
    drop(inner);

    // Not coalesced: the block before the busy tail is freed (dirty) and stays apart.
    a.huge_free(h);
    assert_eq!(extent_at(tail_addr), t, "a busy extent was merged");
    // SAFETY: h is a live descriptor (free now).
    assert_eq!(unsafe { (*h).nchunks }, 2);

    purge_advise(&batch);
    let mut inner = a.inner.lock();
    let purged = inner.purge_return(&mut batch, os::now_ms());
    assert!(batch.is_empty());
    assert_eq!(purged as u64, dirty0);
    assert_eq!(inner.stats.purging_bytes, 0);
    assert_eq!(inner.stats.purged_bytes, purged0 + dirty0);
    // SAFETY: the tail's descriptor (or the one it merged into) is live.
    let back = unsafe { &*extent_at(tail_addr) };
    assert_eq!(back.state, STATE_FREE);
    assert!(!back.dirty && !back.muzzy, "came back dirty");
    assert!(inner.stats.clean_extent_bytes >= clean0 + (2 * CHUNK) as u64);
    // The freed block (dirty) and the clean tail differ in dirtiness: still apart.
    assert_eq!(inner.stats.dirty_extent_bytes, (2 * CHUNK) as u64);

    // Purging the block too makes both clean, and they coalesce on return.
    inner.purge_choose(PurgeGoal::AllExtents, &mut batch);
    drop(inner);
    purge_advise(&batch);
    let mut inner = a.inner.lock();
    inner.purge_return(&mut batch, os::now_ms());
    let merged = extent_at(p as usize);
    assert_eq!(
        extent_at(tail_addr),
        merged,
        "returned runs did not coalesce"
    );
    // SAFETY: merged is a live free extent.
    assert!(unsafe { (*merged).nchunks } >= 4);
    // The contents are gone (MADV_DONTNEED on private anonymous memory reads back zero).
    // SAFETY: the chunks stay mapped while the arena holds them.
    assert_eq!(unsafe { *(tail_addr as *const u8) }, 0);
}

#[test]
fn busy_pages_are_not_handed_out_and_come_back_clean() {
    let a = private_arena();
    let class = class_of(64 << 10);
    let n = large_pages(class);
    let p = a.large_alloc(class, os::PAGE, false);
    let q = a.large_alloc(class, os::PAGE, false);
    assert!(!p.is_null() && !q.is_null());
    // SAFETY: p is a live block of n pages.
    unsafe { core::ptr::write_bytes(p, 0x5a, n * os::PAGE) };
    let Owner::Large {
        chunk: pc, page, ..
    } = owner_of(p)
    else {
        panic!("not a large block")
    };
    a.large_free(pc, page);

    let mut batch = PurgeBatch::new();
    let mut inner = a.inner.lock();
    // SAFETY: pc is a live page chunk of this arena (q keeps it in use; lock held).
    let (nfree0, ndirty0) = unsafe { ((*pc).nfree, (*pc).ndirty_free) };
    assert!(ndirty0 as usize >= n);
    let decay_all = PurgeGoal::Decay {
        now_ms: u64::MAX / 2,
        decay_ms: 0,
        muzzy_decay_ms: 0,
        dirty_max: 0,
    };
    inner.purge_choose(decay_all, &mut batch);
    let run = batch
        .runs()
        .iter()
        .find(|r| r.1 <= p as usize && p as usize + n * os::PAGE <= r.1 + r.2)
        .copied()
        .expect("the freed run was not chosen");
    // SAFETY: as above.
    unsafe {
        assert_eq!((*pc).page_map[page], PAGE_PURGING);
        assert!(!(*pc).free.get(page), "a busy page is still free");
        assert_eq!((*pc).ndirty_free, 0, "busy pages still count as dirty");
    }
    assert_eq!(inner.stats.purging_bytes as usize, batch_bytes(&batch));
    assert_eq!(inner.dirty_page_bytes(), 0);
    drop(inner);

    // Not handed out: blocks of the same size go elsewhere while the run is busy.
    let mut got = [core::ptr::null_mut(); 8];
    for g in &mut got {
        *g = a.large_alloc(class, os::PAGE, false);
        let g = *g as usize;
        assert!(
            g + n * os::PAGE <= run.1 || g >= run.1 + run.2,
            "a busy page run was handed out"
        );
    }
    // A pointer into a busy run is no block.
    assert!(matches!(
        // SAFETY: pc is live (q keeps it); read-only.
        unsafe { (*pc).page_map[page] } & PAGE_KIND,
        PAGE_PURGING
    ));

    purge_advise(&batch);
    let mut inner = a.inner.lock();
    inner.purge_return(&mut batch, os::now_ms());
    // SAFETY: as above.
    unsafe {
        assert_eq!((*pc).page_map[page], 0);
        assert!((*pc).free.get(page), "the run did not come back free");
        assert!(!(*pc).dirty.get(page), "the run came back dirty");
        assert!((*pc).nfree >= nfree0 - (8 * n) as u32);
        (*pc).check();
    }
    assert_eq!(inner.stats.purging_bytes, 0);
    drop(inner);
    // SAFETY: the run is free again and still mapped; purged memory reads back zero.
    assert_eq!(unsafe { *p }, 0);
    for g in got {
        let Owner::Large { chunk, page, .. } = owner_of(g) else {
            panic!("not a large block")
        };
        a.large_free(chunk, page);
    }
    let Owner::Large { chunk, page, .. } = owner_of(q) else {
        panic!("not a large block")
    };
    a.large_free(chunk, page);
}

fn batch_bytes(b: &PurgeBatch) -> usize {
    b.runs().iter().map(|r| r.2).sum()
}
