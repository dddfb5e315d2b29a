//! Slabs: a run of pages holding objects of one small class. Free objects are tracked in a
//! bitmap kept in the slab descriptor (out of band: a set bit is a free object), so no free
//! list lives in user memory. A slab is owned by one arena bin and touched only under that
//! bin's lock.

use crate::bitmap::Bitmap;
use crate::list::linked;
use crate::size_class::{class_size, DIV_MAGIC, NSMALL, SLAB_MAX_OBJS, SLAB_OBJS};

#[repr(C)]
pub struct Slab {
    pub addr: usize,
    pub class: u32,
    pub arena: u32,
    pub nfree: u32,
    pub nobjs: u32,
    /// The object size and its `DIV_MAGIC`, kept here so `index_of` reads one cache line.
    pub size: u32,
    pub magic: u32,
    /// Bin list links (non-full slabs).
    pub next: *mut Slab,
    pub prev: *mut Slab,
    /// Whether it is on its bin's non-full list.
    pub listed: bool,
    pub free: Bitmap<{ SLAB_MAX_OBJS / 64 }>,
}

linked!(Slab);

impl Slab {
    /// Initialises a slab of `class` (a small class: anything else aborts) at `addr` with
    /// every object free.
    pub fn init(&mut self, addr: usize, class: usize, arena: u32) {
        let (Some(&nobjs), Some(&magic)) = (SLAB_OBJS.get(class), DIV_MAGIC.get(class)) else {
            crate::diag::fatal_index("a slab of a class that is not small", class, NSMALL)
        };
        let nobjs = nobjs as usize;
        self.addr = addr;
        self.class = class as u32;
        self.arena = arena;
        self.nobjs = nobjs as u32;
        self.size = class_size(class) as u32;
        self.magic = magic;
        self.nfree = nobjs as u32;
        self.next = core::ptr::null_mut();
        self.prev = core::ptr::null_mut();
        self.listed = false;
        self.free = Bitmap::new();
        self.free.set_range(0, nobjs);
    }

    /// Takes up to `out.len()` free objects into `out` (lowest addresses first); returns how
    /// many.
    #[inline]
    pub fn take(&mut self, out: &mut [*mut u8]) -> usize {
        let (addr, size) = (self.addr, self.size as usize);
        let mut slots = out.iter_mut();
        // A word of the bitmap at a time, lowest objects first (no search per object).
        let n = self.free.take_lowest(slots.len(), |i| {
            if let Some(slot) = slots.next() {
                *slot = (addr + i * size) as *mut u8;
            }
        });
        self.nfree -= n as u32;
        n
    }

    /// The object index of `p`, or `None` if `p` is not the start of an object.
    #[inline]
    pub fn index_of(&self, p: usize) -> Option<usize> {
        let off = p.wrapping_sub(self.addr);
        let size = self.size as usize;
        if off >= self.nobjs as usize * size {
            return None;
        }
        // A multiply instead of a divide (see `DIV_MAGIC`); exact for multiples of the size,
        // so a pointer between objects gives an `i` whose start differs from it.
        let i = ((off as u64 * self.magic as u64) >> 32) as usize;
        (i * size == off).then_some(i)
    }

    /// Returns object `i` to the slab. Returns false if it was already free (a double free).
    #[inline]
    pub fn give(&mut self, i: usize) -> bool {
        if self.free.get(i) {
            return false;
        }
        self.free.set(i);
        self.nfree += 1;
        true
    }

    pub fn is_full(&self) -> bool {
        self.nfree == 0
    }

    pub fn is_empty(&self) -> bool {
        self.nfree == self.nobjs
    }

    /// Invariant scan (debug and test builds, `check:full`).
    pub fn check(&self) {
        if !crate::diag::full_checks() {
            return;
        }
        use crate::diag::invariant;
        invariant(
            self.free.count() == self.nfree as usize,
            "a slab's free count disagrees with its bitmap",
        );
        invariant(
            self.nfree <= self.nobjs,
            "a slab has more free objects than objects",
        );
        invariant(
            self.free.next_set(self.nobjs as usize).is_none(),
            "a slab's bitmap marks objects past its end",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_of_matches_division_for_every_class() {
        for class in 0..crate::size_class::NSMALL {
            // SAFETY: Slab is plain data; all-zero is a valid (empty) value before init.
            let mut s: Slab = unsafe { core::mem::zeroed() };
            s.init(0x200000, class, 0);
            let size = class_size(class);
            for off in 0..s.nobjs as usize * size {
                let want = (off % size == 0).then_some(off / size);
                assert_eq!(
                    s.index_of(0x200000 + off),
                    want,
                    "class {class} offset {off}"
                );
            }
        }
    }

    #[test]
    fn take_give_double_free() {
        // SAFETY: Slab is plain data; all-zero is a valid (empty) value before init.
        let mut s: Slab = unsafe { core::mem::zeroed() };
        let class = crate::size_class::class_of(48);
        s.init(0x10000, class, 0);
        s.check();
        let mut out = [core::ptr::null_mut(); 4];
        assert_eq!(s.take(&mut out), 4);
        assert_eq!(out[1] as usize, 0x10000 + 48);
        assert_eq!(s.index_of(0x10000 + 48), Some(1));
        assert_eq!(s.index_of(0x10000 + 47), None);
        assert_eq!(s.index_of(0x10000 - 48), None);
        assert_eq!(s.index_of(0x10000 + 48 * s.nobjs as usize), None);
        assert!(s.give(1));
        assert!(!s.give(1));
        s.check();
        let mut all = [core::ptr::null_mut(); 512];
        let n = s.take(&mut all);
        assert_eq!(n + 3, s.nobjs as usize);
        assert!(s.is_full());
    }
}
