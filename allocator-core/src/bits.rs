//! `const fn` helpers for alignment and base-2 logarithms.

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
    }
}
