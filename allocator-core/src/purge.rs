//! Purging of one arena: decay (free memory dirty for `dirty_decay_ms` goes back with
//! `MADV_DONTNEED`, or `MADV_FREE` first for `muzzy_decay_ms`), the `dirty_max` byte limit
//! (checked by each decay pass, and by a huge free at once: `dirty_max_goal`), the growth
//! rule (`dirty_growth_pct`: a huge allocation that takes clean or fresh chunks first purges
//! whole dirty extents past that share over the arena's peak active bytes, `growth_limit`),
//! subrelease (purging the free pages of a huge-backed page chunk, which splits its huge page:
//! a last resort under `dirty_max`) and re-collapse of split chunks (`thp_collapse`). Whole
//! free extents go first, since purging them splits nothing. Also the process-wide decay
//! settings.
//!
//! A purge runs in three phases, so that no `madvise` happens under the arena lock (which
//! `slab_new` takes under a bin lock: a purge under it would stall refills of every class):
//! 1. `purge_choose` (arena lock held) picks up to `PURGE_BATCH` runs toward a `PurgeGoal` and
//!    marks each one busy: a free extent goes to `STATE_PURGING` and off the free lists; free
//!    dirty pages of a page chunk leave its free bitmap with page-map words `PAGE_PURGING`.
//!    A busy run is on no free list (allocation takes another run or maps a new chunk), is not
//!    coalesced (neighbours merge only with `STATE_FREE` extents and free pages), keeps its
//!    pagemap entries (a pointer into it still resolves, and `free` of one aborts as for free
//!    memory), keeps its page chunk alive (a page chunk with busy pages is never all free, so
//!    never released) and is counted in `purging_bytes` instead of dirty (so `dirty_max`
//!    counts it as leaving, and a second chooser never sees it).
//! 2. `purge_advise` (no lock) gives each run `MADV_DONTNEED` or `MADV_FREE`, from the
//!    addresses the batch recorded (it reads no descriptor).
//! 3. `purge_return` (arena lock held) gives the runs back clean (or muzzy), coalescing them.
//!
//! The arena runs the phases under its purge lock (one purger per arena, so `fork` can wait
//! for a batch in flight), with one arena-lock round trip per batch: return and the next
//! choice share it. The batch lives on the purger's stack.

use crate::arena_state::{ArenaInner, NFREE_BUCKETS};
use crate::chunk::*;
use crate::extent::system_mode;
use crate::os;
use crate::purge_hugetlb::HugetlbChoice;
use crate::size_class::{CHUNK, CHUNK_PAGES};
use crate::sync::Ordering;
use crate::thp::SystemMode;
use core::ptr;

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

/// `dirty_growth_pct`: when a huge block needs chunks no dirty run provides, an arena whose
/// active plus dirty bytes would pass this percentage over the most active bytes it has had
/// purges dirty free extents until they do not (0: off).
static DIRTY_GROWTH_PCT: crate::sync::plain::AtomicUsize = crate::sync::plain::AtomicUsize::new(10);

/// Sets `dirty_growth_pct` (0 turns the growth rule off).
pub fn set_dirty_growth_pct(pct: usize) {
    // Relaxed: a tuning value, read when a huge allocation grows the arena.
    DIRTY_GROWTH_PCT.store(pct, Ordering::Relaxed);
}

/// The growth rule's limit for an arena with `active` bytes in use whose most active bytes
/// so far are `active_max`: the dirty extent bytes it may keep when a huge allocation takes
/// clean or fresh chunks, so that active + dirty stays within `dirty_growth_pct` over
/// `active_max`; `None` when the rule is off.
pub(crate) fn growth_limit(active: usize, active_max: usize) -> Option<usize> {
    // Relaxed: see set_dirty_growth_pct.
    match DIRTY_GROWTH_PCT.load(Ordering::Relaxed) {
        0 => None,
        pct => {
            let bound = (active_max / 100).saturating_mul(pct.saturating_add(100));
            Some(bound.saturating_sub(active))
        }
    }
}

/// Runs chosen per lock round trip (a batch lives on the purger's stack: 32 runs of 24 bytes).
pub(crate) const PURGE_BATCH: usize = 32;

/// Batches one pass takes at most: a pass with a decay time of 0 while other threads keep
/// freeing could otherwise run for ever.
pub(crate) const PASS_BATCHES_MAX: usize = 256;

/// Extent state of a free extent being purged (the states are in `chunk`): on no free list,
/// merged with nothing, handed out to nobody, until `purge_return` makes it `STATE_FREE`.
pub const STATE_PURGING: u8 = 3;

const _: () = assert!(STATE_PURGING != STATE_FREE && STATE_PURGING > STATE_PAGES);

/// One busy run of a batch.
#[derive(Clone, Copy)]
pub(crate) enum PurgeRun {
    /// A free extent in `STATE_PURGING`; `lazy`: it gets `MADV_FREE` and comes back muzzy,
    /// else `MADV_DONTNEED` and it comes back clean.
    Extent { e: *mut Extent, lazy: bool },
    /// Pages `start..start + n` of page chunk `pc`, marked `PAGE_PURGING`; `huge`: the chunk
    /// was huge-backed, so this purge splits its huge page (`subreleased_bytes`).
    Pages {
        pc: *mut PageChunk,
        start: u32,
        n: u32,
        huge: bool,
    },
    /// Whole hugetlb pages (or reserve chunks) of backing `backing` (`hugetlb::Backing`), off
    /// every list and out of the pagemap: given back to `HUGETLB` in the advise phase
    /// (`purge_hugetlb`), never advised.
    Hugetlb { backing: u8 },
}

/// Up to `PURGE_BATCH` busy runs with the address range each covers.
pub(crate) struct PurgeBatch {
    runs: [(PurgeRun, usize, usize); PURGE_BATCH],
    len: usize,
}

impl PurgeBatch {
    pub(crate) fn new() -> PurgeBatch {
        PurgeBatch {
            runs: [(
                PurgeRun::Extent {
                    e: ptr::null_mut(),
                    lazy: false,
                },
                0,
                0,
            ); PURGE_BATCH],
            len: 0,
        }
    }

    /// The runs, each with its address and length in bytes.
    pub(crate) fn runs(&self) -> &[(PurgeRun, usize, usize)] {
        self.runs.get(..self.len).unwrap_or(&[])
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn is_full(&self) -> bool {
        self.len >= PURGE_BATCH
    }

    /// Adds a run; false (and nothing added) when full.
    fn push(&mut self, run: PurgeRun, addr: usize, len: usize) -> bool {
        match self.runs.get_mut(self.len) {
            Some(slot) => {
                *slot = (run, addr, len);
                self.len += 1;
                true
            }
            None => false,
        }
    }
}

/// What a purge pass works toward.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PurgeGoal {
    /// A decay pass at `now_ms`: free extents dirty (or muzzy) for their decay time, free
    /// pages of page chunks dirty that long which no huge page backs, then down to
    /// `dirty_max` bytes (0: no limit). `decay_ms` as stored (`u64::MAX`: never).
    Decay {
        now_ms: u64,
        decay_ms: u64,
        muzzy_decay_ms: u64,
        dirty_max: usize,
    },
    /// Every dirty (or muzzy) free extent, with `MADV_DONTNEED` (`arena.<i>.purge`).
    AllExtents,
    /// The growth rule (`dirty_growth_pct`, `growth_limit`): whole dirty free extents,
    /// smallest first, until the arena's dirty extent bytes are at most `limit`; never pages
    /// of page chunks.
    Growth { limit: usize },
}

/// The decay pass due at `now_ms` for an arena whose decay time is `decay_ms` (as stored) and
/// whose last pass ran at `last_ms`: `None` when nothing purges on a timer or the last pass
/// was less than a tenth of the decay time ago (100 ms under `dirty_max` alone). `force`
/// ignores that rate limit (`arena.<i>.decay`).
pub(crate) fn decay_goal(
    decay_ms: u64,
    last_ms: u64,
    now_ms: u64,
    force: bool,
) -> Option<PurgeGoal> {
    // Relaxed: see set_purge_globals.
    let dirty_max = DIRTY_MAX.load(Ordering::Relaxed);
    if decay_ms == u64::MAX && dirty_max == 0 {
        return None;
    }
    let every = if decay_ms == u64::MAX {
        100
    } else {
        decay_ms / 10
    };
    if !force && now_ms.saturating_sub(last_ms) < every {
        return None;
    }
    Some(PurgeGoal::Decay {
        now_ms,
        decay_ms,
        // Relaxed: see set_muzzy_decay_ms.
        muzzy_decay_ms: MUZZY_DECAY_MS.load(Ordering::Relaxed),
        dirty_max,
    })
}

/// The pass a huge free runs when it leaves the arena's dirty bytes above `dirty_max`
/// (`ArenaInner::over_dirty_max`): down to the limit at once, whatever the decay pass's rate
/// limit (a tenth of the decay time), and nothing else. `None` without a limit.
pub(crate) fn dirty_max_goal(now_ms: u64) -> Option<PurgeGoal> {
    // Relaxed: see set_purge_globals.
    let dirty_max = DIRTY_MAX.load(Ordering::Relaxed);
    if dirty_max == 0 {
        return None;
    }
    Some(PurgeGoal::Decay {
        now_ms,
        decay_ms: u64::MAX,
        muzzy_decay_ms: u64::MAX,
        dirty_max,
    })
}

/// Phase 2: advises every run of `batch` (no lock held; reads only the batch).
pub(crate) fn purge_advise(batch: &PurgeBatch) {
    for &(run, addr, len) in batch.runs() {
        let advice = match run {
            PurgeRun::Extent { lazy: true, .. } => os::Advice::Free,
            PurgeRun::Hugetlb { backing } => {
                // SAFETY: a hugetlb run of a batch is built only by `choose_hugetlb`, which
                // took it off every list and out of the pagemap; each batch is advised once.
                unsafe { crate::purge_hugetlb::give_back_run(backing, addr, len) };
                continue;
            }
            _ => os::Advice::DontNeed,
        };
        os::advise(addr as *mut u8, len, advice);
    }
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

    /// Phase 1: chooses runs toward `goal` into `batch` (empty on entry) and marks them busy.
    /// Leaves `batch` empty when the goal is met.
    pub(crate) fn purge_choose(&mut self, goal: PurgeGoal, batch: &mut PurgeBatch) {
        debug_assert!(batch.is_empty());
        match goal {
            PurgeGoal::AllExtents => {
                for b in 0..NFREE_BUCKETS {
                    while let Some(&e) = self.free_dirty.get(b) {
                        if e.is_null() || !self.choose_extent(e, false, batch) {
                            break;
                        }
                    }
                }
            }
            PurgeGoal::Growth { limit } => {
                let dirty = self.stats.dirty_extent_bytes as usize;
                if dirty > limit {
                    self.choose_extents_smallest(dirty - limit, batch);
                }
            }
            PurgeGoal::Decay {
                now_ms,
                decay_ms,
                muzzy_decay_ms,
                dirty_max,
            } => {
                if decay_ms != u64::MAX {
                    self.choose_decayed(now_ms, decay_ms, muzzy_decay_ms, batch);
                }
                if dirty_max != 0 && !batch.is_full() {
                    self.choose_over_dirty_max(dirty_max, batch);
                }
            }
        }
    }

    /// Whole free chunks first: purging them splits nothing. With a muzzy stage, dirty
    /// extents get `MADV_FREE` first and `MADV_DONTNEED` once muzzy for its time. Then the
    /// free pages of chunks dirty for the decay time, where no huge page backs them (purging
    /// those costs nothing but the page faults of reuse; pages freed since the chunk's oldest
    /// go with them, a little early). A huge-backed chunk is purged in part (split) only when
    /// `dirty_max` demands it.
    fn choose_decayed(&mut self, now: u64, decay: u64, muzzy_decay: u64, batch: &mut PurgeBatch) {
        for b in 0..NFREE_BUCKETS {
            let mut e = self.free_dirty.get(b).copied().unwrap_or(ptr::null_mut());
            while !e.is_null() {
                // SAFETY: filed extents are live; `next` is read before e is unfiled.
                let (next, since, muzzy) = unsafe { ((*e).next, (*e).dirty_since_ms, (*e).muzzy) };
                let age = now.saturating_sub(since);
                let chosen = if muzzy {
                    muzzy_decay != u64::MAX && age >= muzzy_decay
                } else {
                    age >= decay
                };
                // A dirty extent goes muzzy first where there is a muzzy stage.
                let lazy = !muzzy && muzzy_decay != 0;
                if chosen && !self.choose_extent(e, lazy, batch) {
                    return;
                }
                e = next;
            }
        }
        self.choose_page_chunks(usize::MAX, batch, |pc| {
            // SAFETY: pc is a live filed page chunk.
            let old = now.saturating_sub(unsafe { (*pc).dirty_since_ms }) >= decay;
            old && !Self::huge_backed(pc)
        });
    }

    /// Under `dirty_max`, chooses until the arena's dirty bytes (busy runs not counted: they
    /// are leaving) fit: whole free extents first, then free pages of chunks not on huge
    /// pages, and only then of huge-backed ones.
    fn choose_over_dirty_max(&mut self, limit: usize, batch: &mut PurgeBatch) {
        let dirty = self.dirty_bytes();
        if dirty <= limit {
            return;
        }
        let Some(mut need) = self.choose_extents_smallest(dirty - limit, batch) else {
            return;
        };
        if need > 0 {
            need = need
                .saturating_sub(self.choose_page_chunks(need, batch, |pc| !Self::huge_backed(pc)));
        }
        if need > 0 {
            self.choose_page_chunks(need, batch, |_| true);
        }
    }

    /// Chooses whole dirty free extents, the smallest buckets first, until `need` bytes are
    /// chosen; returns the bytes still needed, or `None` when the batch filled up first.
    fn choose_extents_smallest(
        &mut self,
        mut need: usize,
        batch: &mut PurgeBatch,
    ) -> Option<usize> {
        for b in 0..NFREE_BUCKETS {
            while need > 0 {
                let e = self.free_dirty.get(b).copied().unwrap_or(ptr::null_mut());
                if e.is_null() {
                    break;
                }
                // SAFETY: filed extents are live.
                let len = unsafe { (*e).nchunks } * CHUNK;
                if !self.choose_extent(e, false, batch) {
                    return None;
                }
                need = need.saturating_sub(len);
            }
        }
        Some(need)
    }

    /// Marks free extent `e` (filed) busy and adds it to `batch`; false when the batch is full
    /// (and `e` left as it was).
    pub(crate) fn choose_extent(
        &mut self,
        e: *mut Extent,
        lazy: bool,
        batch: &mut PurgeBatch,
    ) -> bool {
        // SAFETY: e is a live filed free extent of this arena (lock held).
        let (addr, len, backing) = unsafe { ((*e).addr, (*e).nchunks * CHUNK, (*e).backing) };
        if backing != BACKING_ORDINARY {
            // Never advised: whole pages go back to the pool instead.
            return match self.choose_hugetlb(e, !batch.is_full()) {
                HugetlbChoice::Kept => true,
                HugetlbChoice::Full => false,
                HugetlbChoice::Pages { addr, len } => {
                    let pushed = batch.push(PurgeRun::Hugetlb { backing }, addr, len);
                    debug_assert!(pushed, "the batch had room");
                    true
                }
            };
        }
        if !batch.push(PurgeRun::Extent { e, lazy }, addr, len) {
            return false;
        }
        self.free_unfile(e);
        // SAFETY: as above; now on no list.
        unsafe { (*e).state = STATE_PURGING };
        self.stats.purging_bytes += len as u64;
        true
    }

    /// Chooses the free dirty pages of the page chunks `pick` selects, until `budget` bytes
    /// are chosen or the batch is full; returns the bytes chosen.
    fn choose_page_chunks(
        &mut self,
        budget: usize,
        batch: &mut PurgeBatch,
        mut pick: impl FnMut(*mut PageChunk) -> bool,
    ) -> usize {
        let mut chosen = 0;
        let mut b = 0;
        while let Some(bucket) = self.chunk_nonempty.next_set(b) {
            let Some(&head) = self.chunk_buckets.get(bucket) else {
                break;
            };
            let mut pc = head;
            while !pc.is_null() && chosen < budget && !batch.is_full() {
                // SAFETY: filed chunks are live. Choosing only shortens pc's longest free
                // run, so it is refiled in this bucket's list head or a bucket already
                // passed, and `next` (read first) stays the rest of this list.
                let (next, ndirty) = unsafe { ((*pc).next, (*pc).ndirty_free) };
                if ndirty > 0 && !Self::on_hugetlb(pc) && pick(pc) {
                    chosen += self.choose_pages(pc, batch);
                }
                pc = next;
            }
            if chosen >= budget || batch.is_full() {
                break;
            }
            b = bucket + 1;
        }
        chosen
    }

    /// Marks the runs of free dirty pages of `pc` busy, adding each to `batch` while it has
    /// room; returns the bytes chosen.
    fn choose_pages(&mut self, pc: *mut PageChunk, batch: &mut PurgeBatch) -> usize {
        let huge = Self::huge_backed(pc);
        self.chunk_unfile(pc);
        // SAFETY: pc is a live page chunk of this arena, now unfiled (lock held).
        let p = unsafe { &mut *pc };
        let mut chosen = 0;
        let mut i = 0;
        while let Some((start, n)) = p.free_dirty_run(i) {
            i = start + n;
            let run = PurgeRun::Pages {
                pc,
                start: start as u32,
                n: n as u32,
                huge,
            };
            if !batch.push(run, p.addr + start * os::PAGE, n * os::PAGE) {
                break;
            }
            p.purge_mark(start, n);
            if huge {
                p.split = true;
            }
            chosen += n * os::PAGE;
        }
        p.longest = p.free.longest_run() as u32;
        p.check();
        self.stats.purging_bytes += chosen as u64;
        self.chunk_file(pc);
        chosen
    }

    /// Phase 3: gives every run of `batch` back, clean (muzzy from `now_ms` if lazy), merged
    /// with its free neighbours; empties the batch. Returns the bytes purged with
    /// `MADV_DONTNEED` (also counted in `purged_bytes`).
    pub(crate) fn purge_return(&mut self, batch: &mut PurgeBatch, now_ms: u64) -> usize {
        let mut purged = 0;
        for &(run, _, len) in batch.runs() {
            self.stats.purging_bytes -= len as u64;
            match run {
                PurgeRun::Extent { e, lazy } => {
                    // SAFETY: a busy extent is live and ours alone until it is refiled.
                    unsafe {
                        let er = &mut *e;
                        debug_assert_eq!(er.state, STATE_PURGING);
                        er.state = STATE_FREE;
                        er.dirty = lazy;
                        er.muzzy = lazy;
                        if lazy {
                            er.dirty_since_ms = now_ms;
                        }
                    }
                    self.extent_free(e);
                    if !lazy {
                        purged += len;
                    }
                }
                PurgeRun::Hugetlb { .. } => {
                    self.return_hugetlb(len);
                    purged += len;
                }
                PurgeRun::Pages { pc, start, n, huge } => {
                    let (start, n) = (start as usize, n as usize);
                    self.chunk_unfile(pc);
                    // SAFETY: a page chunk with busy pages is live (never all free, so never
                    // released); the pages are ours until given back here.
                    let p = unsafe { &mut *pc };
                    p.purge_unmark(start, n);
                    p.check();
                    if p.nfree as usize == CHUNK_PAGES && self.empty_chunks >= 1 {
                        self.page_chunk_release(pc);
                    } else {
                        self.chunk_file(pc);
                    }
                    if huge {
                        self.stats.subreleased_bytes += len as u64;
                    }
                    purged += len;
                }
            }
        }
        batch.len = 0;
        self.stats.purged_bytes += purged as u64;
        purged
    }

    /// Whether this arena's dirty bytes exceed `dirty_max` (false without a limit).
    pub(crate) fn over_dirty_max(&self) -> bool {
        // Relaxed: see set_purge_globals.
        let limit = DIRTY_MAX.load(Ordering::Relaxed);
        limit != 0 && self.dirty_bytes() > limit
    }

    /// Dirty bytes this arena holds: free dirty extents and free dirty pages of page chunks
    /// (runs being purged are not counted: they are leaving).
    pub(crate) fn dirty_bytes(&self) -> usize {
        self.stats.dirty_extent_bytes as usize + self.dirty_page_bytes()
    }
}

#[cfg(test)]
mod tests;
