//! Deferred collapse, the `thp:defer` policy's second half: the chunks of a big block are
//! mapped without `MADV_HUGEPAGE` (so no fault of the allocating thread compacts memory
//! synchronously) and queued here; the background thread later collapses each chunk into a
//! huge page with `MADV_COLLAPSE`, at a bounded rate (`thp_defer_rate` bytes a second), without
//! any arena lock held.
//!
//! "Touched" is what `mincore` says: a chunk is collapsed only once all of its 512 pages are
//! resident. `MADV_COLLAPSE` fills the missing pages of a range it collapses (one page touched
//! is enough for it to make a whole 2 MiB page), so collapsing earlier would raise the RSS of a
//! block the program fills slowly or sparsely; collapsing only full chunks never does. Chunks
//! are collapsed in the order they fill, not in address order: each pass looks at a window of
//! `WINDOW` chunks past a request's handled prefix and collapses every fully resident one, so a
//! chunk not yet full (a block filled from the end, or at random) does not hold back those
//! behind it. A request with chunks still waiting goes to the back of the queue and is looked
//! at again on a later pass, until `GIVE_UP_MS` after it was queued (its remaining chunks then
//! count as `cold` and stay on small pages).
//!
//! A fork child has no background thread. Requests the parent queued are dropped in the child
//! (`clear_in_child`: the child shares those pages with the parent copy-on-write, and
//! collapsing them would copy them). The child's own first request asks for a thread
//! (`thread_wanted`), which the allocation path starts once the request's arena lock is
//! released (`init::start_wanted_collapse_thread`): `pthread_create` allocates, so it cannot
//! run under the lock.
//!
//! Skipping freed chunks: before each chunk the caller's `live` check (the arena's, under its
//! lock) says whether the chunk still belongs to a live huge block of a `defer` arena. A block
//! freed and the same chunks handed out again by then is collapsed for the new block, which is
//! right: the chunk is live and fully resident either way. Between that check and the collapse
//! the block may be freed and even purged; the caller's `record` step (under the arena lock
//! again) purges a chunk that ended up in a clean free extent, so no collapsed page is left
//! resident behind the arena's back.
//!
//! A refusal that may pass (`EAGAIN`: a page lock or the LRU busy; `ENOMEM`: no free huge page
//! just now, as on a machine whose memory other work holds for a moment) is not final: the chunk
//! is tried again `RETRY_MS` later, until the request's `GIVE_UP_MS`, and only then counts as
//! `failed`. Each transient refusal counts as `retried`. Any other error is final at once.
//!
//! Where the kernel has no `MADV_COLLAPSE` (before 6.1; probed once on the first pass), a fully
//! touched chunk gets `MADV_HUGEPAGE` instead and khugepaged collapses it in its own time (one
//! warning). Its pages are all resident by then, so the advice causes no fault-time compaction.
//!
//! The queue is a fixed ring of `QUEUE_LEN` requests in static memory under its own lock (rank
//! 3b in `sync`: taken under an arena lock by `enqueue`, never while taking another). A request
//! that finds it full is dropped (counted as `dropped`): its block keeps small pages, as under
//! `never` — the program is not made to wait, and no memory is allocated for an overflow.
//!
//! Invariant: `len <= QUEUE_LEN`; the live requests are `items[(head + k) % QUEUE_LEN]` for
//! `k < len`, each with `done < nchunks` and bit 0 of `ahead` clear (the prefix is maximal).

use crate::diag;
use crate::os;
use crate::size_class::{CHUNK, CHUNK_PAGES};
use crate::sync::{AtomicBool, AtomicU8, AtomicUsize, Mutex, Ordering};

/// How many blocks can wait for their collapse at once.
pub const QUEUE_LEN: usize = 1024;
/// How long a request waits for its next chunk to be fully touched before it is given up.
pub const GIVE_UP_MS: u64 = 10_000;
/// The background thread's pause while requests wait (ms): the latency of a collapse after the
/// chunk is filled, and the granularity of the rate limit.
pub const BUSY_WAIT_MS: u64 = 20;
/// How long a chunk whose collapse was refused transiently waits before it is tried again (ms).
pub const RETRY_MS: u64 = 500;
/// The `arena` of a request for metadata chunks (`metadata_thp:defer`, from `base`).
pub const METADATA: u32 = u32::MAX;
/// Chunks past a request's handled prefix that one pass looks at (the bits of `ahead`).
const WINDOW: usize = 64;

/// One block's chunks waiting for their collapse.
#[derive(Clone, Copy, Debug)]
struct Request {
    /// The block's first chunk.
    addr: usize,
    /// Chunks of the block to collapse (whole chunks inside its requested size).
    nchunks: usize,
    /// Chunks already handled (collapsed, skipped, failed), from the first: the prefix.
    done: usize,
    /// Chunks past the prefix already handled: bit `i` is chunk `done + i`.
    ahead: u64,
    /// Chunks past the prefix whose collapse was refused transiently (bit `i` as in `ahead`;
    /// never set where `ahead` is): tried again from `retry_ms` on.
    refused: u64,
    /// When the refused chunks may be tried again (ms).
    retry_ms: u64,
    /// The owning arena's index.
    arena: u32,
    /// When it was queued (ms).
    queued_ms: u64,
}

const EMPTY: Request = Request {
    addr: 0,
    nchunks: 0,
    done: 0,
    ahead: 0,
    refused: 0,
    retry_ms: 0,
    arena: 0,
    queued_ms: 0,
};

/// The ring of waiting requests and the rate limiter's credit.
pub struct Queue {
    items: [Request; QUEUE_LEN],
    head: usize,
    len: usize,
    /// Bytes the rate limit still allows (at most one second's worth).
    credit_bytes: usize,
    /// When the last pass ran (ms; 0: none yet).
    last_pass_ms: u64,
}

impl Queue {
    const fn new() -> Queue {
        Queue {
            items: [EMPTY; QUEUE_LEN],
            head: 0,
            len: 0,
            credit_bytes: 0,
            last_pass_ms: 0,
        }
    }

    /// The invariant of the module doc (debug and test builds only).
    fn check(&self) {
        debug_assert!(self.len <= QUEUE_LEN && self.head < QUEUE_LEN);
    }

    fn push(&mut self, r: Request) -> bool {
        self.check();
        if self.len == QUEUE_LEN {
            return false;
        }
        if let Some(slot) = self.items.get_mut((self.head + self.len) % QUEUE_LEN) {
            *slot = r;
            self.len += 1;
            return true;
        }
        false
    }

    fn pop(&mut self) -> Option<Request> {
        self.check();
        if self.len == 0 {
            return None;
        }
        let r = self.items.get(self.head).copied();
        self.head = (self.head + 1) % QUEUE_LEN;
        self.len -= 1;
        r
    }
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue::new());
/// `thp_defer_rate`: bytes collapsed per second at most.
static RATE_BYTES_PER_S: AtomicUsize = AtomicUsize::new(512 << 20);
/// Whether the kernel has `MADV_COLLAPSE`: 0 not probed yet, 1 yes, 2 no.
static SUPPORT: AtomicU8 = AtomicU8::new(0);
/// A fork child without a background thread (set by `clear_in_child`).
static ORPHANED: AtomicBool = AtomicBool::new(false);
/// The orphaned child queued a request: the allocation path starts a background thread.
static THREAD_WANTED: AtomicBool = AtomicBool::new(false);

/// Sets `thp_defer_rate` (bytes a second; at least one chunk a second).
pub fn set_rate(bytes_per_s: usize) {
    // Relaxed: a tuning value read by the background thread on its next pass.
    RATE_BYTES_PER_S.store(bytes_per_s.max(CHUNK), Ordering::Relaxed);
}

/// Queues the whole chunks of a block of `block_bytes` at `addr` (chunk aligned) of arena
/// `arena` for a deferred collapse. Returns false when there is nothing to queue or the queue
/// is full (the block then keeps small pages). Called under the arena lock.
pub fn enqueue(addr: usize, block_bytes: usize, arena: u32, now_ms: u64) -> bool {
    let nchunks = block_bytes / CHUNK;
    if nchunks == 0 {
        return false;
    }
    let queued = QUEUE.lock().push(Request {
        addr,
        nchunks,
        arena,
        queued_ms: now_ms,
        ..EMPTY
    });
    // Relaxed (both): the flags only ask for a thread; the queue's lock orders the requests.
    if queued && ORPHANED.load(Ordering::Relaxed) {
        THREAD_WANTED.store(true, Ordering::Relaxed);
    }
    queued
}

/// Whether a fork child queued a request and has no thread to collapse it (one load: the
/// allocation path asks after every huge block).
#[inline]
pub fn thread_wanted() -> bool {
    // Relaxed: see enqueue.
    THREAD_WANTED.load(Ordering::Relaxed)
}

/// The wanted thread is being started (once: a failed start is not retried).
pub fn thread_started() {
    // Relaxed: see enqueue.
    ORPHANED.store(false, Ordering::Relaxed);
    THREAD_WANTED.store(false, Ordering::Relaxed);
}

/// How many requests wait (tests and stats).
#[cfg(test)]
pub fn queued() -> usize {
    QUEUE.lock().len
}

/// What happened to one chunk.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// `MADV_COLLAPSE` made (or found) a huge page.
    Done,
    /// `MADV_COLLAPSE` refused for good (an `nh` range, an error that is not transient).
    Failed,
    /// `MADV_COLLAPSE` refused for now (`EAGAIN`, `ENOMEM`): tried again `RETRY_MS` later.
    Retried,
    /// Refused transiently at every try until `GIVE_UP_MS` (no call made now): counts as
    /// failed, its calls already counted as retried.
    Exhausted,
    /// No `MADV_COLLAPSE` on this kernel: `MADV_HUGEPAGE` given instead, for khugepaged.
    Fallback,
    /// Not fully touched within `GIVE_UP_MS`: left on small pages.
    Cold,
}

/// Whether `MADV_COLLAPSE` works here (probed once, with one warning where it does not).
pub fn supported() -> bool {
    // Relaxed: a fact about the kernel; racing probes agree.
    match SUPPORT.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let ok = os::collapse_supported();
            SUPPORT.store(if ok { 1 } else { 2 }, Ordering::Relaxed);
            if !ok {
                diag::warn(
                    "thp:defer: this kernel has no MADV_COLLAPSE (Linux 6.1+); touched chunks get MADV_HUGEPAGE for khugepaged instead",
                );
            }
            ok
        }
    }
}

/// One pass of the background thread at `now_ms`: collapses the chunks the rate limit allows.
/// `live(arena, chunk)` says (under that arena's lock) whether the chunk still belongs to a
/// live huge block of a `defer` arena, counting a skip where it does not; `record(arena,
/// chunk, outcome)` counts what happened (and re-purges a chunk freed and purged meanwhile).
/// Takes no arena lock itself and holds the queue's only to push and pop. Returns how long the
/// thread may sleep before the next pass (ms).
pub fn pass(
    now_ms: u64,
    live: impl FnMut(u32, usize) -> bool,
    record: impl FnMut(u32, usize, Outcome),
) -> u64 {
    pass_with(now_ms, live, record, |chunk| {
        os::collapse(chunk as *mut u8, CHUNK)
    })
}

/// Whether a `MADV_COLLAPSE` error may pass if the chunk is tried again later.
fn transient(err: i32) -> bool {
    err == libc::EAGAIN || err == libc::ENOMEM
}

/// `pass` with the collapse of one chunk given by the caller (`os::collapse` outside tests;
/// the unit tests script refusals).
fn pass_with(
    now_ms: u64,
    mut live: impl FnMut(u32, usize) -> bool,
    mut record: impl FnMut(u32, usize, Outcome),
    mut collapse: impl FnMut(usize) -> Result<(), i32>,
) -> u64 {
    let mut n = {
        let mut q = QUEUE.lock();
        if q.len == 0 {
            q.last_pass_ms = 0;
            return 1000;
        }
        // Relaxed: see set_rate.
        let rate = RATE_BYTES_PER_S.load(Ordering::Relaxed);
        let elapsed = match q.last_pass_ms {
            0 => BUSY_WAIT_MS,
            last => now_ms.saturating_sub(last).min(1000),
        };
        q.last_pass_ms = now_ms;
        let earned = (rate as u64).saturating_mul(elapsed) / 1000;
        q.credit_bytes = q.credit_bytes.saturating_add(earned as usize).min(rate);
        q.len
    };
    let collapse_works = supported();
    // Each request present at the start is looked at once per pass.
    while n > 0 {
        n -= 1;
        let Some(mut r) = ({
            let mut q = QUEUE.lock();
            if q.credit_bytes < CHUNK {
                None
            } else {
                q.pop()
            }
        }) else {
            break;
        };
        let mut requeue = false;
        let mut out_of_credit = false;
        let window = (r.nchunks - r.done).min(WINDOW);
        for i in 0..window {
            if r.ahead & (1 << i) != 0 || (r.refused & (1 << i) != 0 && now_ms < r.retry_ms) {
                continue;
            }
            let chunk = r.addr + (r.done + i) * CHUNK;
            if !live(r.arena, chunk) {
                r.ahead |= 1 << i;
                r.refused &= !(1 << i);
                continue;
            }
            let resident = os::resident_pages(chunk as *mut u8, CHUNK).unwrap_or(0);
            if resident < CHUNK_PAGES {
                // Not full yet: the chunks behind it still get their turn.
                continue;
            }
            {
                let mut q = QUEUE.lock();
                if q.credit_bytes < CHUNK {
                    out_of_credit = true;
                    break;
                }
                q.credit_bytes -= CHUNK;
            }
            let outcome = if collapse_works {
                match collapse(chunk) {
                    Ok(()) => Outcome::Done,
                    Err(e) if transient(e) => Outcome::Retried,
                    Err(_) => Outcome::Failed,
                }
            } else {
                os::advise(chunk as *mut u8, CHUNK, os::Advice::Huge);
                Outcome::Fallback
            };
            record(r.arena, chunk, outcome);
            if outcome == Outcome::Retried {
                r.refused |= 1 << i;
                r.retry_ms = now_ms + RETRY_MS;
            } else {
                r.ahead |= 1 << i;
                r.refused &= !(1 << i);
            }
        }
        // Moves the handled prefix on.
        let handled = (r.ahead.trailing_ones() as usize).min(r.nchunks - r.done);
        r.done += handled;
        r.ahead = r.ahead.checked_shr(handled as u32).unwrap_or(0);
        r.refused = r.refused.checked_shr(handled as u32).unwrap_or(0);
        if r.done < r.nchunks {
            if !out_of_credit && now_ms.saturating_sub(r.queued_ms) >= GIVE_UP_MS {
                give_up(&mut r, &mut record);
            } else {
                requeue = true;
            }
        }
        if requeue {
            // Back to the end of the ring: requests behind it get their turn. It was popped
            // from the same ring, so there is room unless enqueues filled it meanwhile.
            let mut q = QUEUE.lock();
            if !q.push(r) {
                drop(q);
                give_up(&mut r, &mut record);
            }
        }
        if out_of_credit {
            break;
        }
    }
    if QUEUE.lock().len == 0 {
        1000
    } else {
        BUSY_WAIT_MS
    }
}

/// Counts every chunk of `r` not handled yet as `cold` (it stays on small pages), or as
/// `failed` where its collapse was refused transiently and never succeeded since.
fn give_up(r: &mut Request, record: &mut impl FnMut(u32, usize, Outcome)) {
    for i in r.done..r.nchunks {
        let bit = i - r.done;
        if bit >= WINDOW || r.ahead & (1 << bit) == 0 {
            let refused = bit < WINDOW && r.refused & (1 << bit) != 0;
            let outcome = if refused {
                Outcome::Exhausted
            } else {
                Outcome::Cold
            };
            record(r.arena, r.addr + i * CHUNK, outcome);
        }
    }
    r.done = r.nchunks;
    r.ahead = 0;
    r.refused = 0;
}

/// The queue's lock, for the fork handlers (taken after the arena locks).
pub fn fork_lock() -> &'static Mutex<Queue> {
    &QUEUE
}

/// Empties the queue (a fork child, after the queue's lock was reset: the child has no
/// background thread, so its copies of the parent's requests would only fill the ring).
pub fn clear_in_child() {
    let mut q = QUEUE.lock();
    q.head = 0;
    q.len = 0;
    q.last_pass_ms = 0;
    // Relaxed: the child is single-threaded here.
    ORPHANED.store(true, Ordering::Relaxed);
    THREAD_WANTED.store(false, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests that drive the global queue take turns.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn ring_keeps_order_and_refuses_when_full() {
        let mut q = Queue::new();
        for i in 0..QUEUE_LEN {
            assert!(q.push(Request {
                addr: i * CHUNK,
                nchunks: 1,
                ..EMPTY
            }));
        }
        assert!(!q.push(EMPTY), "a full ring refuses");
        for i in 0..QUEUE_LEN / 2 {
            assert_eq!(q.pop().map(|r| r.addr), Some(i * CHUNK));
        }
        // Wraps around.
        for i in 0..QUEUE_LEN / 2 {
            assert!(q.push(Request {
                addr: (QUEUE_LEN + i) * CHUNK,
                nchunks: 1,
                ..EMPTY
            }));
        }
        for i in QUEUE_LEN / 2..QUEUE_LEN + QUEUE_LEN / 2 {
            assert_eq!(q.pop().map(|r| r.addr), Some(i * CHUNK));
        }
        assert!(q.pop().is_none());
    }

    /// Order of fill: in a request whose first chunk is only half touched, the full chunk
    /// behind it is collapsed on the first pass, and only the half one is given up later.
    #[test]
    fn pass_collapses_a_full_chunk_behind_a_partial_one() {
        let base = os::map_aligned(2 * CHUNK, CHUNK);
        assert!(!base.is_null());
        let at = |i: usize| base as usize + i * CHUNK;
        // Chunk 0 must fault small pages even where THP is `always`.
        assert!(os::advise(base, CHUNK, os::Advice::NoHuge));
        // SAFETY: the two chunks are mapped and ours.
        unsafe {
            core::ptr::write_bytes(base, 1, CHUNK / 2);
            core::ptr::write_bytes(base.add(CHUNK), 1, CHUNK);
        }
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let mut seen = std::vec::Vec::new();
        let t0 = 1_000_000;
        assert!(enqueue(at(0), 2 * CHUNK, 3, t0));
        pass(t0, |_, _| true, |a, c, o| seen.push((a, c, o)));
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!((seen[0].0, seen[0].1), (3, at(1)), "{seen:?}");
        assert!(seen[0].2 != Outcome::Cold, "{seen:?}");
        assert_eq!(queued(), 1, "the half-touched chunk waits");
        seen.clear();
        pass(t0 + GIVE_UP_MS, |_, _| true, |a, c, o| seen.push((a, c, o)));
        assert_eq!(seen.as_slice(), &[(3, at(0), Outcome::Cold)]);
        assert_eq!(queued(), 0);
        os::unmap(base, 2 * CHUNK);
    }

    /// A transient refusal (`EAGAIN`, `ENOMEM`) is tried again `RETRY_MS` later and not before;
    /// one that lasts until `GIVE_UP_MS` ends as `Exhausted` (failed); any other error is final
    /// at once. The collapse itself is scripted; the chunk is real (`pass` asks `mincore`).
    #[test]
    fn transient_refusals_are_tried_again_until_the_request_gives_up() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        if !supported() {
            std::eprintln!("skipped: no MADV_COLLAPSE here (the retry path is not taken)");
            return;
        }
        let base = os::map_aligned(CHUNK, CHUNK);
        assert!(!base.is_null());
        // SAFETY: the chunk is mapped and ours.
        unsafe { core::ptr::write_bytes(base, 1, CHUNK) };
        let c = base as usize;
        let mut seen = std::vec::Vec::new();
        let mut calls = 0;
        // Refused once, then collapsed RETRY_MS later (not earlier).
        let t0 = 5_000_000;
        assert!(enqueue(c, CHUNK, 2, t0));
        let refuse = |e: i32, calls: &mut usize| {
            *calls += 1;
            Err(e)
        };
        pass_with(
            t0,
            |_, _| true,
            |_, _, o| seen.push(o),
            |_| refuse(libc::EAGAIN, &mut calls),
        );
        assert_eq!((seen.as_slice(), calls), (&[Outcome::Retried][..], 1));
        assert_eq!(queued(), 1, "a refused chunk waits for its retry");
        pass_with(
            t0 + RETRY_MS / 2,
            |_, _| true,
            |_, _, o| seen.push(o),
            |_| refuse(0, &mut calls),
        );
        assert_eq!(calls, 1, "tried again before RETRY_MS");
        pass_with(
            t0 + RETRY_MS,
            |_, _| true,
            |_, _, o| seen.push(o),
            |_| Ok(()),
        );
        assert_eq!(seen.as_slice(), &[Outcome::Retried, Outcome::Done]);
        assert_eq!(queued(), 0);
        // Refused at every try: exhausted at GIVE_UP_MS.
        seen.clear();
        let t1 = 9_000_000;
        assert!(enqueue(c, CHUNK, 2, t1));
        pass_with(
            t1,
            |_, _| true,
            |_, _, o| seen.push(o),
            |_| Err(libc::ENOMEM),
        );
        pass_with(
            t1 + GIVE_UP_MS,
            |_, _| true,
            |_, _, o| seen.push(o),
            |_| Err(libc::ENOMEM),
        );
        let want = [Outcome::Retried, Outcome::Retried, Outcome::Exhausted];
        assert_eq!(seen.as_slice(), &want[..]);
        assert_eq!(queued(), 0);
        // Not transient: failed at the first call.
        seen.clear();
        let t2 = 30_000_000;
        assert!(enqueue(c, CHUNK, 2, t2));
        pass_with(
            t2,
            |_, _| true,
            |_, _, o| seen.push(o),
            |_| Err(libc::EINVAL),
        );
        assert_eq!(seen.as_slice(), &[Outcome::Failed]);
        assert_eq!(queued(), 0);
        os::unmap(base, CHUNK);
    }

    /// `pass` on real memory: a fully touched chunk is collapsed (or refused, or advised where
    /// the kernel lacks `MADV_COLLAPSE`) and recorded; a partly touched one waits (requeued)
    /// until `GIVE_UP_MS`, then counts as cold; a chunk `live` rejects is neither. The
    /// tests of this binary that use the global queue take turns (`SERIAL`).
    #[test]
    fn pass_collapses_full_chunks_waits_for_partial_ones_and_skips_dead_ones() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let base = os::map_aligned(3 * CHUNK, CHUNK);
        assert!(!base.is_null());
        let at = |i: usize| base as usize + i * CHUNK;
        // Chunk 1 must fault small pages even where THP is `always`.
        assert!(os::advise(at(1) as *mut u8, CHUNK, os::Advice::NoHuge));
        // SAFETY: the three chunks are mapped and ours.
        unsafe {
            core::ptr::write_bytes(base, 1, CHUNK);
            core::ptr::write_bytes(base.add(CHUNK), 1, CHUNK / 2);
        }
        let mut seen = std::vec::Vec::new();
        let t0 = 1_000_000;
        assert!(enqueue(at(0), 2 * CHUNK, 7, t0));
        assert!(enqueue(at(2), CHUNK, 7, t0));
        let dead = at(2);
        let wait = pass(t0, |_, c| c != dead, |a, c, o| seen.push((a, c, o)));
        assert_eq!(seen.len(), 1, "{seen:?}");
        let (a, c, o) = seen[0];
        assert_eq!((a, c), (7, at(0)));
        assert!(o != Outcome::Cold, "{o:?}");
        assert_eq!(queued(), 1, "the half-touched chunk waits");
        assert_eq!(wait, BUSY_WAIT_MS);
        // Still not touched: given up after GIVE_UP_MS.
        seen.clear();
        let wait = pass(t0 + GIVE_UP_MS, |_, _| true, |a, c, o| seen.push((a, c, o)));
        assert_eq!(seen.as_slice(), &[(7, at(1), Outcome::Cold)]);
        assert_eq!(queued(), 0);
        assert_eq!(wait, 1000);
        os::unmap(base, 3 * CHUNK);
    }
}
