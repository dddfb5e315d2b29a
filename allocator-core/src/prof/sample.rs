//! Sampling: the per-thread byte countdown, its exponential intervals, and the scaling that
//! undoes sampling in the dumps.

use super::{active, enabled, lg_sample};
use crate::os;
use crate::tcache::Tcache;

// ---- sampling ------------------------------------------------------------------------------

/// The countdown ran out on an allocation of `size` bytes: draws the next interval and says
/// whether this allocation is to be sampled (profiling and sampling active, for this thread
/// too, and not inside another sample).
pub fn countdown_expired(t: &mut Tcache, size: usize) -> bool {
    if !enabled() {
        t.prof_countdown = u64::MAX;
        return false;
    }
    if t.prof_rng == 0 {
        // First use on this thread: seed, draw, and count this allocation like any other.
        t.prof_rng = (t as *mut Tcache as u64 ^ os::now_ms().rotate_left(32)) | 1;
        t.prof_countdown = next_interval(&mut t.prof_rng);
        match t.prof_countdown.checked_sub(size as u64) {
            Some(left) => {
                t.prof_countdown = left;
                return false;
            }
            None => t.prof_countdown = next_interval(&mut t.prof_rng),
        }
    } else {
        t.prof_countdown = next_interval(&mut t.prof_rng);
    }
    active() && !t.prof_thread_off && !t.prof_busy
}

/// An exponentially distributed interval with mean `2^lg_sample` bytes.
pub(super) fn next_interval(rng: &mut u64) -> u64 {
    // xorshift64*: a uniform 53-bit fraction u in (0, 1].
    let mut x = *rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *rng = x;
    let bits = x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
    let u = (bits + 1) as f64 / (1u64 << 53) as f64;
    let mean = (1u64 << lg_sample().min(62)) as f64;
    let v = -u.ln() * mean;
    if v >= u64::MAX as f64 {
        u64::MAX - 1
    } else {
        v as u64
    }
}

/// The chance that an object of the sampled objects' mean size (`bytes / count`) was sampled
/// at one sample per `2^lg` bytes on average: `1 - exp(-s / 2^lg)`. `None` when there is
/// nothing to scale (no object, or a chance of 0).
pub(super) fn sample_chance(bytes: u64, count: u64, lg: usize) -> Option<f64> {
    if count == 0 {
        return None;
    }
    let mean = (1u64 << lg.min(62)) as f64;
    let avg = bytes as f64 / count as f64;
    let p = 1.0 - (-avg / mean).exp();
    (p > 0.0).then_some(p)
}

/// `bytes` over `count` sampled objects, scaled to the estimated bytes allocated: each object
/// of mean size `s` stood for `1 / (1 - exp(-s / 2^lg))` objects.
pub fn scaled_bytes(bytes: u64, count: u64, lg: usize) -> u64 {
    match sample_chance(bytes, count, lg) {
        None if count == 0 => 0,
        None => bytes,
        Some(p) => (bytes as f64 / p) as u64,
    }
}

/// `count` sampled objects of `bytes` in all, scaled as `scaled_bytes`.
pub fn scaled_objects(bytes: u64, count: u64, lg: usize) -> u64 {
    match sample_chance(bytes, count, lg) {
        None => count,
        Some(p) => (count as f64 / p) as u64,
    }
}
