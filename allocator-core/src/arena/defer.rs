//! `thp:defer` at the arena: huge blocks' chunks queued for the background thread's collapse,
//! and what the thread reports back, for the arena coordinator in `mod.rs`.

use super::*;

impl Arena {
    // ---- deferred collapse (`thp:defer`) ---------------------------------------------------

    /// Under `thp:defer`, queues the whole chunks of `[addr, addr + bytes)`, part of huge
    /// block `e` of requested size `size`, for the background thread's collapse. Arena lock
    /// held.
    pub(super) fn defer_collapse(
        &self,
        inner: &mut ArenaInner,
        e: *mut Extent,
        addr: usize,
        bytes: usize,
        size: usize,
    ) {
        // SAFETY: e is a live huge block of this arena (lock held).
        let (backing, advice) = unsafe { ((*e).backing, (*e).advice) };
        if backing != BACKING_ORDINARY
            || !thp::defers_collapse(self.thp(), system_mode(), size, thp_threshold())
        {
            return;
        }
        if advice == ADVICE_NOHUGE || advice == ADVICE_MIXED {
            // Chunks left `nh` by an earlier policy of this arena: `MADV_COLLAPSE` refuses
            // those, so they get `hg` (the only advice that clears `nh`).
            inner.advise(e, ChunkAdvice::Huge);
        }
        if crate::collapse::enqueue(addr, bytes, self.index, os::now_ms()) {
            inner.stats.collapse_queued += 1;
        } else if bytes >= CHUNK {
            inner.stats.collapse_dropped += 1;
        }
    }

    /// The collapse pass's check before chunk `chunk`: whether it still belongs to a live huge
    /// block of this arena, which is still under `thp:defer`. Counts a skip where not.
    pub fn collapse_live(&self, chunk: usize) -> bool {
        let mut inner = self.inner.lock();
        let entry = PAGEMAP.get(chunk);
        let live = entry & TAG_MASK == TAG_EXTENT && self.thp() == Thp::Defer && {
            let e = (entry & !TAG_MASK) as *const Extent;
            // SAFETY: a TAG_EXTENT entry points at a live descriptor; the lock is held.
            let er = unsafe { &*e };
            er.state == STATE_HUGE
                && er.backing == BACKING_ORDINARY
                && er.arena == self.index
                && chunk >= er.addr
                && chunk < er.addr + er.nchunks * CHUNK
        };
        if !live {
            inner.stats.collapse_skipped += 1;
        }
        live
    }

    /// Counts what the collapse pass did to `chunk`. A chunk collapsed (or advised) while its
    /// block was freed and purged is purged again: the collapse made it resident, and a clean
    /// free extent is not purged by decay.
    pub fn collapse_record(&self, chunk: usize, outcome: crate::collapse::Outcome) {
        use crate::collapse::Outcome;
        let mut inner = self.inner.lock();
        let s = &mut inner.stats;
        match outcome {
            Outcome::Done => {
                s.collapse_attempted += 1;
                s.collapse_done += 1;
            }
            Outcome::Failed => {
                s.collapse_attempted += 1;
                s.collapse_failed += 1;
            }
            Outcome::Fallback => s.collapse_fallback += 1,
            // Not collapsed (so nothing made resident): nothing to purge again.
            Outcome::Retried => {
                s.collapse_attempted += 1;
                s.collapse_retried += 1;
                return;
            }
            Outcome::Exhausted => {
                s.collapse_failed += 1;
                return;
            }
            Outcome::Cold => {
                s.collapse_cold += 1;
                return;
            }
        }
        let entry = PAGEMAP.get(chunk);
        if entry & TAG_MASK == TAG_EXTENT {
            // SAFETY: a TAG_EXTENT entry points at a live descriptor; the lock is held.
            let er = unsafe { &*((entry & !TAG_MASK) as *const Extent) };
            // Never on hugetlb memory (a kept hugetlb extent is clean too).
            if er.state == STATE_FREE
                && !er.dirty
                && er.backing == BACKING_ORDINARY
                && er.arena == self.index
            {
                os::advise(chunk as *mut u8, CHUNK, os::Advice::DontNeed);
            }
        }
    }
}
