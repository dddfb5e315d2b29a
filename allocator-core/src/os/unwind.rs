//! The calling thread's stack, for heap profiling (`prof`): libgcc's unwinder, which every
//! Rust program links through std.

use super::process::{errno, set_errno};

/// libgcc's unwinder (`unwind.h`), linked with every Rust program through std. Its first use
/// may allocate (it registers the loaded objects' unwind tables); `prof` primes it at init.
mod libgcc {
    pub type Trace = extern "C" fn(ctx: *mut libc::c_void, arg: *mut libc::c_void) -> libc::c_int;
    extern "C" {
        pub fn _Unwind_Backtrace(trace: Trace, arg: *mut libc::c_void) -> libc::c_int;
        pub fn _Unwind_GetIP(ctx: *mut libc::c_void) -> usize;
    }
}

/// Where `backtrace` writes, and how many frames it skips first.
struct Frames<'a> {
    out: &'a mut [usize],
    skip: usize,
    len: usize,
}

extern "C" fn backtrace_frame(ctx: *mut libc::c_void, arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Frames` `backtrace` passed, live for the whole walk.
    let f = unsafe { &mut *(arg as *mut Frames) };
    if f.skip > 0 {
        f.skip -= 1;
        return 0;
    }
    let Some(slot) = f.out.get_mut(f.len) else {
        return 4; // _URC_NORMAL_STOP: the buffer is full.
    };
    // SAFETY: ctx is the unwinder's context for this frame, valid during the callback.
    let ip = unsafe { libgcc::_Unwind_GetIP(ctx) };
    if ip == 0 {
        return 4;
    }
    *slot = ip;
    f.len += 1;
    0 // _URC_NO_REASON: go on.
}

/// Writes the return addresses of the calling thread's stack into `out`, innermost first,
/// after skipping `skip` frames (this function's is the first); returns how many. May
/// allocate on its first use in the process (libgcc registers unwind tables): the caller
/// must cope with a nested `malloc`.
#[inline(never)]
pub fn backtrace(out: &mut [usize], skip: usize) -> usize {
    let saved = errno();
    let mut f = Frames { out, skip, len: 0 };
    // SAFETY: the callback only touches `f`, which outlives the walk.
    unsafe {
        libgcc::_Unwind_Backtrace(backtrace_frame, &mut f as *mut Frames as *mut libc::c_void)
    };
    set_errno(saved);
    f.len
}
