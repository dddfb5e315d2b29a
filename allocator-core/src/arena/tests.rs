//! Unit tests of the arena's slab supply.

use super::*;

#[test]
fn a_second_slab_reuses_the_first_ones_descriptor() {
    let a = Arena::create(900, Thp::Default);
    assert!(!a.is_null());
    // SAFETY: a fresh arena, never destroyed (arenas live for the process).
    let a = unsafe { &*a };
    let class = class_of(256);
    let mut slabs = [null_mut(); 2];
    for slab in slabs.iter_mut() {
        let mut one = [null_mut()];
        assert_eq!(a.bin_fill(class, &mut one), 1);
        *slab = slab_of(one[0], class);
        a.bin_flush(class, &one);
        // The bin's empty current slab goes back: its pages and its descriptor.
        a.purge_all();
        assert_eq!(a.bins[class].lock().stats.nslabs, 0);
    }
    let inner = a.inner.lock();
    assert_eq!(
        inner.slab_descs_from_base, 1,
        "the second slab asked the base"
    );
    assert_eq!(slabs[0], slabs[1]);
    assert_eq!(inner.nspare_slabs, 1);
}

/// `PageChunk::page_class` names the class of the slab on each of its pages: written for a
/// new slab, and rewritten when another bin of the same page count borrows a kept empty one
/// (`slab_borrow`), as `free`'s fast path reads it in place of `Slab::class`.
#[test]
fn page_class_follows_a_slab_into_the_bin_that_borrows_it() {
    use crate::size_class::SLAB_PAGES;
    let a = Arena::create(903, Thp::Default);
    assert!(!a.is_null());
    // SAFETY: a fresh arena, never destroyed (arenas live for the process).
    let a = unsafe { &*a };
    let (lender, borrower) = (class_of(256), class_of(224));
    assert_eq!(SLAB_PAGES[lender], SLAB_PAGES[borrower]);
    let class_at = |p: *mut u8| {
        let pc = page_chunk_of_entry(PAGEMAP.get(p as usize)).expect("a page chunk's block");
        // SAFETY: a TAG_PAGES entry names its chunk's live PageChunk.
        unsafe { (*pc).page_class[crate::owner::page_index(p as usize)] as usize }
    };
    // Two slabs' worth of 256 B blocks, then all back: the bin keeps the slab that is not its
    // current one.
    let objs = SLAB_OBJS[lender] as usize;
    let mut blocks = std::vec![null_mut(); 2 * objs];
    assert_eq!(a.bin_fill(lender, &mut blocks), blocks.len());
    assert!(blocks.iter().all(|&p| class_at(p) == lender));
    a.bin_flush(lender, &blocks);
    let moved = a.inner.lock().stats.slabs_moved;
    let mut one = [null_mut()];
    assert_eq!(a.bin_fill(borrower, &mut one), 1);
    assert_eq!(
        a.inner.lock().stats.slabs_moved,
        moved + 1,
        "no slab was borrowed"
    );
    assert!(
        blocks.contains(&one[0]),
        "the 224 B block is not on the lent pages"
    );
    assert_eq!(class_at(one[0]), borrower);
    a.bin_flush(borrower, &one);
}
