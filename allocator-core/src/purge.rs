//! Purging of one arena: decay (free memory dirty for `dirty_decay_ms` goes back with
//! `MADV_DONTNEED`, or `MADV_FREE` first for `muzzy_decay_ms`), the `dirty_max` byte limit,
//! subrelease (purging the free pages of a huge-backed page chunk, which splits its huge page:
//! a last resort under `dirty_max`) and re-collapse of split chunks (`thp_collapse`). Whole
//! free extents go first, since purging them splits nothing. Also the process-wide decay
//! settings.
//!
//! Runs under the arena lock, called by `arena` after the operations that free memory.

use crate::arena_state::{ArenaInner, NFREE_BUCKETS};
use crate::chunk::*;
use crate::extent::system_mode;
use crate::os;
use crate::size_class::{CHUNK, CHUNK_PAGES};
use crate::sync::Ordering;
use crate::thp::SystemMode;

/// `dirty_decay_ms`: how long freed chunks stay dirty before they are purged (`u64::MAX`: never).
static DIRTY_DECAY_MS: crate::sync::AtomicU64 = crate::sync::AtomicU64::new(10_000);

/// An arena's `decay_ms` when it follows `DIRTY_DECAY_MS` (no `ms >= 0` encodes to it).
pub const DECAY_INHERIT: u64 = u64::MAX - 1;

/// Milliseconds as stored: negative (never) is `u64::MAX`.
pub fn decay_encode(ms: i64) -> u64 {
    if ms < 0 {
        u64::MAX
    } else {
        ms as u64
    }
}

/// Milliseconds as a setting: `u64::MAX` (never) is -1.
pub fn decay_decode(raw: u64) -> i64 {
    i64::try_from(raw).unwrap_or(-1)
}

/// The decay time an arena whose own setting is `own` (encoded, or `DECAY_INHERIT`) follows.
pub fn decay_resolve(own: u64) -> u64 {
    match own {
        // Relaxed: a tuning value; a racing reader uses the old or the new one.
        DECAY_INHERIT => DIRTY_DECAY_MS.load(Ordering::Relaxed),
        own => own,
    }
}

/// Sets the decay time every arena without its own follows (negative: never purge on a timer).
pub fn set_decay_ms(ms: i64) {
    // Relaxed: a tuning value; a racing reader uses the old or the new one.
    DIRTY_DECAY_MS.store(decay_encode(ms), Ordering::Relaxed);
}

/// The decay time of arenas without their own (`arenas.dirty_decay_ms`; -1: never).
pub fn decay_ms() -> i64 {
    // Relaxed: as in set_decay_ms.
    decay_decode(DIRTY_DECAY_MS.load(Ordering::Relaxed))
}

/// `muzzy_decay_ms` (0: no muzzy stage, purge with `MADV_DONTNEED` at once; `u64::MAX`: never).
static MUZZY_DECAY_MS: crate::sync::plain::AtomicU64 = crate::sync::plain::AtomicU64::new(0);

/// Sets `muzzy_decay_ms`: how long memory stays muzzy (`MADV_FREE`d) before `MADV_DONTNEED`;
/// 0 skips the muzzy stage, negative keeps muzzy memory until reuse.
pub fn set_muzzy_decay_ms(ms: i64) {
    // Relaxed: a tuning value, read on the purge path.
    MUZZY_DECAY_MS.store(decay_encode(ms), Ordering::Relaxed);
}

/// `dirty_max` (0: no limit) and `thp_collapse`, set once by the init.
static DIRTY_MAX: crate::sync::plain::AtomicUsize = crate::sync::plain::AtomicUsize::new(0);
static THP_COLLAPSE: crate::sync::plain::AtomicBool = crate::sync::plain::AtomicBool::new(false);

/// Sets the purging limits every arena follows: `dirty_max` bytes of dirty pages per arena (0:
/// none) and whether chunks that were split are collapsed again.
pub fn set_purge_globals(dirty_max: usize, collapse: bool) {
    // Relaxed: read on the purge path; a change applies from the next pass.
    DIRTY_MAX.store(dirty_max, Ordering::Relaxed);
    THP_COLLAPSE.store(collapse, Ordering::Relaxed);
}

impl ArenaInner {
    /// Whether a page chunk's pages sit on a huge page (so purging part of it splits it): the
    /// chunk of a live page chunk of this arena, read under its lock.
    pub(crate) fn huge_backed(pc: *mut PageChunk) -> bool {
        // SAFETY: pc is a live page chunk of this arena (lock held); its extent is live.
        let (advice, backing) = unsafe { ((*(*pc).extent).advice, (*(*pc).extent).backing) };
        if crate::hugetlb::Backing::from_u8(backing).is_hugetlb() {
            // Never purged in part (`purge_hugetlb`): nothing to split.
            return false;
        }
        match advice {
            ADVICE_NOHUGE => false,
            ADVICE_NONE => system_mode() == SystemMode::Always,
            _ => true,
        }
    }

    /// With `thp_collapse`, collapses a chunk split by a partial purge once it is nearly
    /// full again (7/8 of its pages in use): `MADV_COLLAPSE`, whose failure (an old kernel's
    /// `EINVAL`, no memory) is harmless and not retried until the next split.
    pub(crate) fn maybe_collapse(&mut self, pc: *mut PageChunk) {
        // Relaxed: see set_purge_globals.
        if !THP_COLLAPSE.load(Ordering::Relaxed) {
            return;
        }
        // SAFETY: pc is a live page chunk of this arena (lock held).
        let p = unsafe { &mut *pc };
        if !p.split || p.nfree as usize * 8 > CHUNK_PAGES {
            return;
        }
        p.split = false;
        if os::advise(p.addr as *mut u8, CHUNK, os::Advice::Collapse) {
            self.stats.collapsed_bytes += CHUNK as u64;
        }
    }

    /// Purges the free dirty pages of the page chunks `pick` selects; returns bytes purged.
    /// Stops once `budget` bytes are purged.
    pub(crate) fn purge_page_chunks(
        &mut self,
        budget: usize,
        mut pick: impl FnMut(*mut PageChunk) -> bool,
    ) -> usize {
        let mut purged = 0;
        let mut b = 0;
        while let Some(bucket) = self.chunk_nonempty.next_set(b) {
            if bucket > CHUNK_PAGES || purged >= budget {
                break;
            }
            let mut pc = self.chunk_buckets[bucket];
            while !pc.is_null() && purged < budget {
                // SAFETY: filed chunks are live; purging does not change their filing.
                let (next, ndirty) = unsafe { ((*pc).next, (*pc).ndirty_free) };
                if ndirty > 0 && pick(pc) {
                    let huge = Self::huge_backed(pc);
                    // SAFETY: as above; the lock is held.
                    let bytes = unsafe { (*pc).purge_free_dirty() } * os::PAGE;
                    if huge {
                        // SAFETY: as above.
                        unsafe { (*pc).split = true };
                        self.stats.subreleased_bytes += bytes as u64;
                    }
                    purged += bytes;
                }
                pc = next;
            }
            b = bucket + 1;
        }
        purged
    }

    /// Under `dirty_max`, purges until the arena's dirty bytes fit: whole free extents first,
    /// then free pages of chunks not on huge pages, and only then of huge-backed ones.
    pub(crate) fn enforce_dirty_max(&mut self, limit: usize) -> usize {
        let dirty = self.dirty_bytes();
        if dirty <= limit {
            return 0;
        }
        let mut need = dirty - limit;
        let mut purged = 0;
        for b in 0..NFREE_BUCKETS {
            while need > 0 {
                let e = self.free_dirty[b];
                if e.is_null() {
                    break;
                }
                let n = self.purge_extent(e);
                purged += n;
                need = need.saturating_sub(n);
            }
        }
        if need > 0 {
            let n = self.purge_page_chunks(need, |pc| !Self::huge_backed(pc));
            purged += n;
            need = need.saturating_sub(n);
        }
        if need > 0 {
            purged += self.purge_page_chunks(need, |_| true);
        }
        purged
    }
    /// Decay, driven by allocation activity (and the background thread): at most every tenth
    /// of the decay time, purge the dirty free extents dirty for longer than `dirty_decay_ms`,
    /// and the free pages of page chunks dirty that long which no huge page backs. A
    /// huge-backed chunk is purged in part (split) only when `dirty_max` demands it. `decay` is
    /// the arena's decay time as stored (`u64::MAX`: never).
    pub(crate) fn maybe_decay(&mut self, decay: u64) {
        // Relaxed: see set_purge_globals.
        let limit = DIRTY_MAX.load(Ordering::Relaxed);
        if decay == u64::MAX && limit == 0 {
            return;
        }
        let now = os::now_ms();
        let every = if decay == u64::MAX { 100 } else { decay / 10 };
        if now.saturating_sub(self.last_decay_ms) < every {
            return;
        }
        self.last_decay_ms = now;
        let mut purged = 0;
        if decay != u64::MAX {
            // Whole free chunks first: purging them splits nothing. With a muzzy stage, dirty
            // extents get `MADV_FREE` first and `MADV_DONTNEED` once muzzy for its time.
            // Relaxed: see set_muzzy_decay_ms.
            let muzzy_decay = MUZZY_DECAY_MS.load(Ordering::Relaxed);
            for b in 0..NFREE_BUCKETS {
                let mut e = self.free_dirty[b];
                while !e.is_null() {
                    // SAFETY: filed extents are live; `next` is read before e is refiled.
                    let (next, since, muzzy) =
                        unsafe { ((*e).next, (*e).dirty_since_ms, (*e).muzzy) };
                    let age = now.saturating_sub(since);
                    if muzzy {
                        if muzzy_decay != u64::MAX && age >= muzzy_decay {
                            purged += self.purge_extent(e);
                        }
                    } else if age >= decay {
                        if muzzy_decay == 0 {
                            purged += self.purge_extent(e);
                        } else {
                            // It may merge with muzzy neighbours, `next` among them: walk
                            // this list again (it now holds one more muzzy extent).
                            self.lazy_purge_extent(e, now);
                            e = self.free_dirty[b];
                            continue;
                        }
                    }
                    e = next;
                }
            }
            // Then the free pages of chunks dirty for the decay time, where no huge page backs
            // them (purging those costs nothing but the page faults of reuse). Pages freed
            // since the chunk's oldest go with them, a little early.
            purged += self.purge_page_chunks(usize::MAX, |pc| {
                // SAFETY: pc is a live filed page chunk.
                let old = now.saturating_sub(unsafe { (*pc).dirty_since_ms }) >= decay;
                old && !Self::huge_backed(pc)
            });
        }
        if limit != 0 {
            purged += self.enforce_dirty_max(limit);
        }
        self.stats.purged_bytes += purged as u64;
    }

    /// Gives a dirty free extent `MADV_FREE` (muzzy from `now`); refiles it.
    pub(crate) fn lazy_purge_extent(&mut self, e: *mut Extent, now: u64) {
        if self.purge_hugetlb(e).is_some() {
            return;
        }
        self.free_unfile(e);
        // SAFETY: e is a live free extent of this arena, now unfiled.
        unsafe {
            os::advise((*e).addr as *mut u8, (*e).nchunks * CHUNK, os::Advice::Free);
            (*e).muzzy = true;
            (*e).dirty_since_ms = now;
        }
        self.extent_free(e);
    }

    pub(crate) fn purge_extent(&mut self, e: *mut Extent) -> usize {
        if let Some(bytes) = self.purge_hugetlb(e) {
            return bytes;
        }
        self.free_unfile(e);
        // SAFETY: e is a live free extent of this arena, now unfiled.
        let len = unsafe {
            let len = (*e).nchunks * CHUNK;
            os::advise((*e).addr as *mut u8, len, os::Advice::DontNeed);
            (*e).dirty = false;
            (*e).muzzy = false;
            len
        };
        self.extent_free(e);
        len
    }

    /// Returns the bins' kept empty slabs, then purges every dirty free extent
    /// Dirty bytes this arena holds: free dirty extents and free dirty pages of page chunks.
    pub(crate) fn dirty_bytes(&self) -> usize {
        self.stats.dirty_extent_bytes as usize + self.dirty_page_bytes()
    }

    /// Purges every dirty free extent (`MADV_DONTNEED`), making it clean; returns bytes purged
    /// (also counted in `purged_bytes`).
    pub(crate) fn purge_all_extents(&mut self) -> usize {
        let mut purged = 0;
        for b in 0..NFREE_BUCKETS {
            loop {
                let e = self.free_dirty[b];
                if e.is_null() {
                    break;
                }
                purged += self.purge_extent(e);
            }
        }
        self.stats.purged_bytes += purged as u64;
        purged
    }
}
