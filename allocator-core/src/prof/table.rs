//! The sample table: live sampled blocks by address and distinct stacks with their counts,
//! two open-addressing hash tables in metadata memory under one lock.

use super::FRAMES_MAX;
use crate::base::BASE;
use crate::sync::Mutex;
use core::ptr::null_mut;

/// A distinct stack and what was sampled at it.
#[repr(C)]
pub(super) struct Stack {
    pub(super) hash: u64,
    pub(super) nframes: usize,
    pub(super) live_objects: u64,
    pub(super) live_bytes: u64,
    pub(super) alloc_objects: u64,
    pub(super) alloc_bytes: u64,
    pub(super) frames: [usize; FRAMES_MAX],
}

/// A live sampled block (`addr` 0: an empty slot).
#[derive(Clone, Copy)]
#[repr(C)]
pub(super) struct Block {
    pub(super) addr: usize,
    pub(super) base: usize,
    pub(super) size: usize,
    /// Null for blocks sampled before a `prof.reset` (still freed as sampled, not counted).
    pub(super) stack: *mut Stack,
}

pub(super) struct Table {
    pub(super) blocks: *mut Block,
    pub(super) blocks_cap: usize,
    pub(super) nblocks: usize,
    pub(super) stacks: *mut *mut Stack,
    pub(super) stacks_cap: usize,
    pub(super) nstacks: usize,
}

// SAFETY: the raw pointers are metadata only touched under the table lock.
unsafe impl Send for Table {}

pub(super) static TABLE: Mutex<Table> = Mutex::new(Table::EMPTY);

pub(super) const BLOCKS_MIN: usize = 1024;
pub(super) const STACKS_MIN: usize = 256;

pub(super) fn hash_addr(addr: usize) -> usize {
    ((addr as u64 >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20) as usize
}

pub(super) fn hash_frames(frames: &[usize]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &f in frames {
        h = (h ^ f as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Stack {
    /// The recorded frames, innermost first.
    pub(super) fn frames(&self) -> &[usize] {
        self.frames.get(..self.nframes).unwrap_or(&self.frames)
    }
}

impl Table {
    /// No blocks, no stacks, nothing allocated yet.
    pub(super) const EMPTY: Table = Table {
        blocks: null_mut(),
        blocks_cap: 0,
        nblocks: 0,
        stacks: null_mut(),
        stacks_cap: 0,
        nstacks: 0,
    };

    /// Inserts a block; false when the table cannot grow.
    pub(super) fn block_insert(
        &mut self,
        addr: usize,
        base: usize,
        size: usize,
        stack: *mut Stack,
    ) -> bool {
        if (self.nblocks + 1) * 4 > self.blocks_cap * 3 && !self.blocks_grow() {
            return false;
        }
        let mask = self.blocks_cap - 1;
        let mut i = hash_addr(addr) & mask;
        loop {
            // SAFETY: i < blocks_cap, a slot of the live array.
            let slot = unsafe { &mut *self.blocks.add(i) };
            if slot.addr == 0 || slot.addr == addr {
                if slot.addr == 0 {
                    self.nblocks += 1;
                }
                *slot = Block {
                    addr,
                    base,
                    size,
                    stack,
                };
                return true;
            }
            i = (i + 1) & mask;
        }
    }

    pub(super) fn blocks_grow(&mut self) -> bool {
        let cap = (self.blocks_cap * 2).max(BLOCKS_MIN);
        let bytes = cap * core::mem::size_of::<Block>();
        let new = BASE.alloc(bytes) as *mut Block;
        if new.is_null() {
            return false;
        }
        let (old, old_cap) = (self.blocks, self.blocks_cap);
        self.blocks = new;
        self.blocks_cap = cap;
        self.nblocks = 0;
        for i in 0..old_cap {
            // SAFETY: i < old_cap, a slot of the old array.
            let b = unsafe { *old.add(i) };
            if b.addr != 0 {
                self.block_insert(b.addr, b.base, b.size, b.stack);
            }
        }
        if !old.is_null() {
            // SAFETY: the old array came from BASE.alloc of this size and is not used again.
            unsafe { BASE.free(old as *mut u8, old_cap * core::mem::size_of::<Block>()) };
        }
        true
    }

    /// Finds `addr`; with `remove`, deletes it (backward-shift deletion keeps probe runs
    /// unbroken without tombstones). Returns (base, size, stack).
    pub(super) fn block_find(
        &mut self,
        addr: usize,
        remove: bool,
    ) -> Option<(usize, usize, *mut Stack)> {
        if self.blocks_cap == 0 {
            return None;
        }
        let mask = self.blocks_cap - 1;
        let mut i = hash_addr(addr) & mask;
        loop {
            // SAFETY: i < blocks_cap.
            let b = unsafe { *self.blocks.add(i) };
            if b.addr == 0 {
                return None;
            }
            if b.addr == addr {
                if remove {
                    self.block_delete(i);
                }
                return Some((b.base, b.size, b.stack));
            }
            i = (i + 1) & mask;
        }
    }

    pub(super) fn block_delete(&mut self, mut hole: usize) {
        let mask = self.blocks_cap - 1;
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            // SAFETY: j < blocks_cap.
            let b = unsafe { *self.blocks.add(j) };
            if b.addr == 0 {
                break;
            }
            let home = hash_addr(b.addr) & mask;
            // Move b into the hole unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                // SAFETY: hole, j < blocks_cap.
                unsafe { *self.blocks.add(hole) = b };
                hole = j;
            }
        }
        // SAFETY: hole < blocks_cap.
        unsafe { (*self.blocks.add(hole)).addr = 0 };
        self.nblocks -= 1;
    }

    /// The stack record for `frames`, created if new; null when metadata is short.
    pub(super) fn stack_for(&mut self, frames: &[usize]) -> *mut Stack {
        if (self.nstacks + 1) * 4 > self.stacks_cap * 3 && !self.stacks_grow() {
            return null_mut();
        }
        let h = hash_frames(frames);
        let mask = self.stacks_cap - 1;
        let mut i = h as usize & mask;
        loop {
            // SAFETY: i < stacks_cap.
            let slot = unsafe { &mut *self.stacks.add(i) };
            if slot.is_null() {
                let s = BASE.alloc(core::mem::size_of::<Stack>()) as *mut Stack;
                if s.is_null() {
                    return s;
                }
                // SAFETY: fresh zeroed metadata of a Stack's size.
                let st = unsafe { &mut *s };
                st.hash = h;
                st.nframes = frames.len().min(FRAMES_MAX);
                for (slot, &ip) in st.frames.iter_mut().zip(frames) {
                    *slot = ip;
                }
                *slot = s;
                self.nstacks += 1;
                return s;
            }
            // SAFETY: a live stack of the table.
            let st = unsafe { &**slot };
            if st.hash == h && st.frames() == frames {
                return *slot;
            }
            i = (i + 1) & mask;
        }
    }

    pub(super) fn stacks_grow(&mut self) -> bool {
        let cap = (self.stacks_cap * 2).max(STACKS_MIN);
        let bytes = cap * core::mem::size_of::<*mut Stack>();
        let new = BASE.alloc(bytes) as *mut *mut Stack;
        if new.is_null() {
            return false;
        }
        let mask = cap - 1;
        for k in 0..self.stacks_cap {
            // SAFETY: k < stacks_cap.
            let s = unsafe { *self.stacks.add(k) };
            if s.is_null() {
                continue;
            }
            // SAFETY: a live stack.
            let mut i = unsafe { (*s).hash } as usize & mask;
            // SAFETY: i < cap, slots of the new zeroed array.
            while !unsafe { *new.add(i) }.is_null() {
                i = (i + 1) & mask;
            }
            // SAFETY: as above.
            unsafe { *new.add(i) = s };
        }
        if !self.stacks.is_null() {
            // SAFETY: the old array came from BASE.alloc of this size and is not used again.
            unsafe {
                BASE.free(
                    self.stacks as *mut u8,
                    self.stacks_cap * core::mem::size_of::<*mut Stack>(),
                )
            };
        }
        self.stacks = new;
        self.stacks_cap = cap;
        true
    }

    /// Calls `f` on every stack.
    pub(super) fn for_each_stack(&self, mut f: impl FnMut(&Stack)) {
        for k in 0..self.stacks_cap {
            // SAFETY: k < stacks_cap.
            let s = unsafe { *self.stacks.add(k) };
            if !s.is_null() {
                // SAFETY: a live stack.
                f(unsafe { &*s });
            }
        }
    }

    /// Over every stack: (live objects, live bytes, allocated objects, allocated bytes), as
    /// sampled (not scaled).
    pub(super) fn totals(&self) -> [u64; 4] {
        let mut t = [0u64; 4];
        self.for_each_stack(|s| {
            t[0] += s.live_objects;
            t[1] += s.live_bytes;
            t[2] += s.alloc_objects;
            t[3] += s.alloc_bytes;
        });
        t
    }

    /// `prof.reset`: forgets every stack; blocks sampled so far stay known (they must still be
    /// freed as sampled blocks) but count no more.
    pub(super) fn reset(&mut self) {
        for k in 0..self.stacks_cap {
            // SAFETY: k < stacks_cap.
            let slot = unsafe { &mut *self.stacks.add(k) };
            if !slot.is_null() {
                // SAFETY: a stack from BASE.alloc of this size; nothing refers to it after
                // the blocks' links are cleared below.
                unsafe { BASE.free(*slot as *mut u8, core::mem::size_of::<Stack>()) };
                *slot = null_mut();
            }
        }
        self.nstacks = 0;
        for i in 0..self.blocks_cap {
            // SAFETY: i < blocks_cap.
            unsafe { (*self.blocks.add(i)).stack = null_mut() };
        }
    }
}
