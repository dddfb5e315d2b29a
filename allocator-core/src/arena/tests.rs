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
