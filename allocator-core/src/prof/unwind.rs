//! Stack capture for a sampled block: libgcc's unwinder, or with `prof_unwind:fp` the
//! frame-pointer chain from the program's first frame on (see `os::backtrace_fp`).

use super::{FRAMES_MAX, SELF_END, SELF_START, SKIP_FRAMES, UNWIND_FP};
use crate::os;
use crate::sync::Ordering;
use crate::tcache::Tcache;

/// Captures the calling thread's stack into `frames` (innermost first, allocator frames
/// dropped) with the cache's `prof_busy` set, so that an allocation the unwinder makes is
/// served unsampled. Returns the number of frames.
#[inline(never)]
pub fn capture(t: &mut Tcache, frames: &mut [usize; FRAMES_MAX]) -> usize {
    // Relaxed: published by the GLOBAL Release store.
    let (lo, hi) = (
        SELF_START.load(Ordering::Relaxed),
        SELF_END.load(Ordering::Relaxed),
    );
    t.prof_busy = true;
    // Relaxed: as the range.
    let n = if UNWIND_FP.load(Ordering::Relaxed) {
        os::backtrace_fp(frames, SKIP_FRAMES, (lo, hi))
    } else {
        os::backtrace(frames, SKIP_FRAMES)
    };
    t.prof_busy = false;
    let Some(got) = frames.get_mut(..n) else {
        return 0;
    };
    let inside = got.iter().take_while(|&&ip| lo <= ip && ip < hi).count();
    if inside > 0 && inside < got.len() {
        got.copy_within(inside.., 0);
        return n - inside;
    }
    n
}
