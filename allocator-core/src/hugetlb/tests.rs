use super::*;

const GIB: usize = 1 << 30;

#[test]
fn backing_bytes_round_trip() {
    for b in [
        Backing::Ordinary,
        Backing::Pages2M,
        Backing::Pages1G,
        Backing::Reserve2M,
        Backing::Reserve1G,
    ] {
        assert_eq!(Backing::from_u8(b as u8), b);
    }
    // A zeroed descriptor reads ordinary memory.
    assert_eq!(Backing::from_u8(0), Backing::Ordinary);
    assert_eq!(Backing::from_u8(200), Backing::Ordinary);
}

#[test]
fn backing_units_and_pages() {
    assert_eq!(Backing::Ordinary.page_chunks(), 1);
    assert_eq!(Backing::Pages2M.page_chunks(), 1);
    assert_eq!(Backing::Pages1G.page_chunks(), 512);
    assert_eq!(Backing::Reserve1G.page_chunks(), 512);
    assert!(!Backing::Ordinary.is_hugetlb());
    assert!(Backing::Reserve2M.is_hugetlb() && Backing::Reserve2M.is_reserve());
    assert!(!Backing::Pages1G.is_reserve());
    let a = 5 * GIB + 7 * CHUNK;
    assert_eq!(Backing::Pages1G.page_base(a), 5 * GIB);
    assert_eq!(Backing::Pages2M.page_base(a), a);
    assert_eq!(Backing::Reserve1G.page_size(), Some(HugePageSize::Size1G));
    assert_eq!(Backing::Ordinary.page_size(), None);
}

#[test]
fn merging_keeps_backings_and_1g_pages_apart() {
    let a = 4 * GIB;
    assert!(Backing::Ordinary.may_merge(a, Backing::Ordinary, a + CHUNK));
    assert!(!Backing::Ordinary.may_merge(a, Backing::Pages2M, a + CHUNK));
    assert!(!Backing::Pages2M.may_merge(a, Backing::Reserve2M, a + CHUNK));
    assert!(Backing::Pages1G.may_merge(a, Backing::Pages1G, a + 511 * CHUNK));
    // The last chunk of one 1 GiB page and the first of the next go back separately.
    assert!(!Backing::Pages1G.may_merge(a + 511 * CHUNK, Backing::Pages1G, a + GIB));
    assert!(!Backing::Pages1G.may_merge(a + GIB, Backing::Pages1G, a + 511 * CHUNK));
    // A block of 600 chunks spans two pages from the start: the free rest of its second page
    // joins it, so both pages can go back.
    assert!(Backing::Pages1G.may_merge(a, Backing::Pages1G, a + 600 * CHUNK));
}

#[test]
fn reserve_find_honours_alignment_and_holes() {
    let mut words = [0u64; 2];
    let mut touched = [0u64; 2];
    let r = Reserve {
        base: 64 * CHUNK,
        nchunks: 100,
        size: HugePageSize::Size2M,
        here: words.as_mut_ptr(),
        touched: touched.as_mut_ptr(),
    };
    assert_eq!(r.find(1, CHUNK), None, "an empty reserve has nothing");
    Reserve::set_bits(r.here, 0, 100, true);
    assert_eq!(r.find(3, CHUNK), Some(0));
    assert_eq!(r.find(100, CHUNK), Some(0));
    assert_eq!(r.find(101, CHUNK), None);
    Reserve::set_bits(r.here, 2, 1, false);
    assert_eq!(r.find(3, CHUNK), Some(3), "the run skips the busy chunk");
    // base is 64 chunks, so chunk i is 4-chunk aligned where i % 4 == 0.
    assert_eq!(r.find(2, 4 * CHUNK), Some(0));
    assert_eq!(
        r.find(3, 4 * CHUNK),
        Some(4),
        "the next aligned run after the busy chunk"
    );
    assert!(Reserve::bit(r.here, 99) && !Reserve::bit(r.here, 2));
}

#[test]
fn ordinary_requests_never_count_as_fallbacks() {
    let s = HugetlbSource::new();
    let mut left = Chunks::NONE;
    let got = s.take(None, 2, 1, &mut left);
    assert_ne!(got.addr, 0);
    assert_eq!(got.backing, Backing::Ordinary);
    assert_eq!(got.addr % CHUNK, 0);
    assert_eq!(s.stats.fallbacks.load(Ordering::Relaxed), 0);
    assert!(!s.warned());
}
