//! How an extent's chunks may be purged and merged: the [`Backing`] byte each extent carries.

use crate::chunk::Extent;
use crate::os::HugePageSize;
use crate::size_class::{CHUNK, LG_CHUNK};

/// Where an extent's chunks come from: stored as a byte in `chunk::Extent::backing`; a zeroed
/// descriptor reads `Ordinary`.
#[repr(u8)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Backing {
    /// Ordinary anonymous memory (`chunk::SOURCE`), under the arena's THP policy.
    Ordinary = 0,
    /// Fresh 2 MiB hugetlb pages, one per chunk; a free chunk goes back to the pool by itself.
    Pages2M = 1,
    /// Fresh 1 GiB hugetlb pages of 512 chunks; a page goes back once all 512 are free.
    Pages1G = 2,
    /// Chunks of the reserve mapped in 2 MiB pages: given back to the reserve, never unmapped.
    Reserve2M = 3,
    /// Chunks of the reserve mapped in 1 GiB pages.
    Reserve1G = 4,
}

impl Backing {
    /// The backing stored as `byte` (an unknown byte reads `Ordinary`).
    pub const fn from_u8(byte: u8) -> Backing {
        match byte {
            1 => Backing::Pages2M,
            2 => Backing::Pages1G,
            3 => Backing::Reserve2M,
            4 => Backing::Reserve1G,
            _ => Backing::Ordinary,
        }
    }

    /// Fresh pages of `size` (not the reserve).
    pub const fn fresh(size: HugePageSize) -> Backing {
        match size {
            HugePageSize::Size2M => Backing::Pages2M,
            HugePageSize::Size1G => Backing::Pages1G,
        }
    }

    /// Reserve chunks mapped in pages of `size`.
    pub const fn reserve(size: HugePageSize) -> Backing {
        match size {
            HugePageSize::Size2M => Backing::Reserve2M,
            HugePageSize::Size1G => Backing::Reserve1G,
        }
    }

    /// The hugetlb page size, `None` for ordinary memory.
    pub const fn page_size(self) -> Option<HugePageSize> {
        match self {
            Backing::Ordinary => None,
            Backing::Pages2M | Backing::Reserve2M => Some(HugePageSize::Size2M),
            Backing::Pages1G | Backing::Reserve1G => Some(HugePageSize::Size1G),
        }
    }

    /// Whether the chunks are hugetlb pages (so no part of one may be purged).
    pub const fn is_hugetlb(self) -> bool {
        !matches!(self, Backing::Ordinary)
    }

    /// Whether the chunks belong to the reserve (given back to it, never to the kernel).
    pub const fn is_reserve(self) -> bool {
        matches!(self, Backing::Reserve2M | Backing::Reserve1G)
    }

    /// The unit the chunks can be given back in, in chunks: 512 for 1 GiB pages, else 1.
    pub const fn page_chunks(self) -> usize {
        match self.page_size() {
            Some(size) => size.bytes() >> LG_CHUNK,
            None => 1,
        }
    }

    /// The start of the hugetlb page holding `addr` (`addr`'s chunk for ordinary memory).
    pub const fn page_base(self, addr: usize) -> usize {
        addr & !((self.page_chunks() << LG_CHUNK) - 1)
    }

    /// Whether two adjacent free extents, `self` starting at `a` and `other` at `b`, may become
    /// one: the same backing, and for 1 GiB pages no page boundary between them (the later one
    /// starts at the boundary), so a page's chunks gather into one extent and merging never
    /// makes an extent span two pages that go back to the pool separately. (A huge block of
    /// more than a page spans pages from the start; its tail page's free rest still joins it.)
    pub const fn may_merge(self, a: usize, other: Backing, b: usize) -> bool {
        let boundary = if a > b { a } else { b };
        self as u8 == other as u8
            && (!matches!(self, Backing::Pages1G) || self.page_base(boundary) != boundary)
    }
}

const _: () = assert!(HugePageSize::Size2M.bytes() == CHUNK);
const _: () = assert!(Backing::Ordinary as u8 == crate::chunk::BACKING_ORDINARY);

/// Whether free extent `filed`, being filed, may merge with its free neighbour `other`: the
/// same backing (and page, `Backing::may_merge`), and the same dirtiness and muzziness, except
/// that a dirty extent of 1 GiB pages absorbs its page's free neighbours whatever their state
/// (clean leftovers, or pieces kept by `purge_hugetlb`), so a page whose chunks are all free
/// gathers into one extent that can go back to the pool.
pub fn may_merge(filed: &Extent, other: &Extent) -> bool {
    let (bf, bo) = (
        Backing::from_u8(filed.backing),
        Backing::from_u8(other.backing),
    );
    bf.may_merge(filed.addr, bo, other.addr)
        && ((filed.dirty == other.dirty && filed.muzzy == other.muzzy)
            || (bf == Backing::Pages1G && filed.dirty && !filed.muzzy))
}

/// The state of `into` after `from` merged into it (`may_merge` said yes): the older age of
/// the two; a dirty 1 GiB-page extent that absorbed another state stays dirty, with its age.
pub fn merge_state(into: &mut Extent, from: &Extent) {
    if into.dirty == from.dirty && into.muzzy == from.muzzy {
        into.dirty_since_ms = into.dirty_since_ms.min(from.dirty_since_ms);
        return;
    }
    let age = |x: &Extent| {
        if x.dirty && !x.muzzy {
            x.dirty_since_ms
        } else {
            u64::MAX
        }
    };
    into.dirty_since_ms = age(into).min(age(from));
    into.dirty = true;
    into.muzzy = false;
}
