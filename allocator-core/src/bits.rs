//! `const fn` helpers for alignment, base-2 logarithms and tagged words.

/// Rounds `v` up to a multiple of `align` (a power of two); `None` on overflow.
#[inline(always)]
pub const fn align_up(v: usize, align: usize) -> Option<usize> {
    match v.checked_add(align - 1) {
        Some(s) => Some(s & !(align - 1)),
        None => None,
    }
}

/// `floor(log2(v))` for `v > 0`.
#[inline(always)]
pub const fn lg_floor(v: usize) -> u32 {
    usize::BITS - 1 - v.leading_zeros()
}

/// The rest of `word` when its low bits (`mask`) hold `tag`: `word - tag`, whose masked bits
/// are clear exactly then (any other tag, 0 included, leaves some set), so a tagged pointer is
/// tested and untagged with one subtraction and one test, and needs no mask.
#[inline(always)]
pub const fn untag(word: u64, tag: u64, mask: u64) -> Option<u64> {
    let rest = word.wrapping_sub(tag);
    if rest & mask == 0 {
        Some(rest)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(align_up(0, 16), Some(0));
        assert_eq!(align_up(17, 16), Some(32));
        assert_eq!(align_up(usize::MAX, 16), None);
        assert_eq!(lg_floor(1), 0);
        assert_eq!(lg_floor(4096), 12);
        assert_eq!(lg_floor(4097), 12);
        assert_eq!(untag(0x1000 | 1, 1, 7), Some(0x1000));
        assert_eq!(untag(0x1000 | 2, 1, 7), None);
        assert_eq!(untag(0, 1, 7), None);
        assert_eq!(untag(0x1000 | 3, 3, 7), Some(0x1000));
    }
}
