//! The calling thread's stack, for heap profiling (`prof`): libgcc's unwinder, which every
//! Rust program links through std (`backtrace`), or the frame-pointer chain (`backtrace_fp`).
//!
//! The frame-pointer walk reads only this thread's stack, between the current stack pointer
//! and the stack's end, found without allocating and without `/proc`: a thread glibc starts
//! has its thread descriptor at the top of its stack block (the thread pointer, `fs:0`, lies
//! just above every frame); the main thread's frames lie below `__libc_stack_end`. Each record
//! it reads must lie inside that range, 8-byte aligned, above the one before, and hold a
//! non-null return address, so a frame that uses `rbp` as an ordinary register (code built
//! without frame pointers) ends the walk instead of a read of a wild address.

use super::process::{errno, set_errno};

/// libgcc's unwinder (`unwind.h`), linked with every Rust program through std. Its first use
/// may allocate (it registers the loaded objects' unwind tables); `prof` primes it at init.
mod libgcc {
    pub type Trace = extern "C" fn(ctx: *mut libc::c_void, arg: *mut libc::c_void) -> libc::c_int;
    extern "C" {
        pub fn _Unwind_Backtrace(trace: Trace, arg: *mut libc::c_void) -> libc::c_int;
        pub fn _Unwind_GetIP(ctx: *mut libc::c_void) -> usize;
        pub fn _Unwind_GetGR(ctx: *mut libc::c_void, reg: libc::c_int) -> usize;
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

/// Where `backtrace_fp`'s libgcc part writes: the first frame outside `own` after `skip`, and
/// the frame-pointer register in that frame.
struct Handoff {
    skip: usize,
    own: (usize, usize),
    ip: usize,
    fp: usize,
}

/// DWARF's number of `rbp` on x86-64.
#[cfg(target_arch = "x86_64")]
const DWARF_RBP: libc::c_int = 6;

#[cfg(target_arch = "x86_64")]
extern "C" fn handoff_frame(ctx: *mut libc::c_void, arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Handoff` `backtrace_fp` passed, live for the whole walk.
    let h = unsafe { &mut *(arg as *mut Handoff) };
    if h.skip > 0 {
        h.skip -= 1;
        return 0;
    }
    // SAFETY: ctx is the unwinder's context for this frame, valid during the callback.
    let ip = unsafe { libgcc::_Unwind_GetIP(ctx) };
    if ip == 0 {
        return 4;
    }
    if (h.own.0..h.own.1).contains(&ip) {
        return 0; // Still inside the allocator: go on.
    }
    h.ip = ip;
    // SAFETY: as above; rbp is a callee-saved register the unwinder tracks in every frame.
    h.fp = unsafe { libgcc::_Unwind_GetGR(ctx, DWARF_RBP) };
    4 // _URC_NORMAL_STOP: the rest is the frame-pointer chain's.
}

/// Like `backtrace`, but only the allocator's own frames (the `skip` first, and those whose
/// address lies in `own`) are unwound by libgcc: from the first frame of the program on, the
/// walk follows the frame-pointer chain. hugealloc's own code is usually built without frame
/// pointers, so the chain could not name the program's function that called `malloc`; libgcc
/// gives that frame and its `rbp` from the unwind tables. Frames of code without frame
/// pointers end the walk early (their callers are missing) but never make it read outside the
/// thread's stack. Falls back to `backtrace` where the stack's end is unknown.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
pub fn backtrace_fp(out: &mut [usize], skip: usize, own: (usize, usize)) -> usize {
    let here = 0usize;
    let sp = &here as *const usize as usize;
    let Some(end) = stack_end(sp) else {
        return backtrace(out, skip + 1);
    };
    let saved = errno();
    let mut h = Handoff {
        skip,
        own,
        ip: 0,
        fp: 0,
    };
    // SAFETY: the callback only touches `h`, which outlives the walk.
    unsafe {
        libgcc::_Unwind_Backtrace(handoff_frame, &mut h as *mut Handoff as *mut libc::c_void)
    };
    set_errno(saved);
    let Some(first) = out.first_mut().filter(|_| h.ip != 0) else {
        return 0;
    };
    *first = h.ip;
    // SAFETY: [sp, end) is this thread's live stack (`stack_end`), mapped and readable.
    1 + unsafe { walk_frame_chain(out.get_mut(1..).unwrap_or(&mut []), h.fp, sp, end) }
}

/// Without x86-64's frame layout: libgcc's `backtrace`.
#[cfg(not(target_arch = "x86_64"))]
#[inline(never)]
pub fn backtrace_fp(out: &mut [usize], skip: usize, _own: (usize, usize)) -> usize {
    backtrace(out, skip + 1)
}

/// Follows the chain of frame records (saved `rbp`, return address) from `fp`, writing the
/// return addresses to `out`; every record read lies in `[lo, hi)`, 8-byte aligned, each above
/// the one before. Returns how many addresses it wrote.
///
/// # Safety
/// `[lo, hi)` must be mapped readable memory for the whole call (the thread's own stack).
pub unsafe fn walk_frame_chain(out: &mut [usize], mut fp: usize, lo: usize, hi: usize) -> usize {
    let mut n = 0;
    for slot in out.iter_mut() {
        let inside =
            fp >= lo && fp.is_multiple_of(8) && hi.checked_sub(16).is_some_and(|top| fp <= top);
        if !inside {
            break;
        }
        // SAFETY: [fp, fp + 16) lies in [lo, hi), which the caller guarantees is mapped and
        // readable; volatile: the compiler knows nothing of what the words hold.
        let (next, ret) = unsafe {
            (
                core::ptr::read_volatile(fp as *const usize),
                core::ptr::read_volatile((fp + 8) as *const usize),
            )
        };
        if ret == 0 {
            break;
        }
        *slot = ret;
        n += 1;
        if next <= fp {
            break;
        }
        fp = next;
    }
    n
}

/// The end (exclusive) of the calling thread's stack, above every frame, if it can be known
/// without allocating; `sp` is an address in the caller's frame. A thread glibc starts keeps
/// its descriptor (the thread pointer) at the top of its stack block; the main thread's frames
/// lie below `__libc_stack_end`. Either must lie above `sp` by at most `STACK_SPAN_MAX`, or the
/// stack is one this cannot bound (a coroutine's, a signal stack): `None`.
#[cfg(target_arch = "x86_64")]
fn stack_end(sp: usize) -> Option<usize> {
    /// The farthest a stack's end may lie above a frame in it.
    const STACK_SPAN_MAX: usize = 1 << 30;
    extern "C" {
        /// glibc (ld.so): the stack address at the program's entry; the main thread's frames
        /// all lie below it.
        static __libc_stack_end: *mut libc::c_void;
    }
    let tp: usize;
    // SAFETY: on x86-64 Linux, fs:0 holds the thread pointer (the TCB's pointer to itself).
    unsafe {
        core::arch::asm!(
            "mov {tp}, qword ptr fs:[0]",
            tp = out(reg) tp,
            options(nostack, preserves_flags, readonly, pure),
        );
    }
    // SAFETY: a word ld.so sets before any code of the program runs and never changes.
    let main_end = unsafe { __libc_stack_end } as usize;
    let near = |end: usize| end > sp && end - sp <= STACK_SPAN_MAX;
    if near(tp) {
        Some(tp)
    } else if near(main_end) {
        Some(main_end)
    } else {
        None
    }
}
