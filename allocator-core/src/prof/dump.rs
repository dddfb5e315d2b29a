//! Dump files: by path, automatic (`prof_prefix` naming, interval and final dumps), the
//! `prof_leak` report, and dumps into an anonymous file.

use super::heap::dump_heap;
use super::pprof::dump_pprof;
use super::sample::{scaled_bytes, scaled_objects};
use super::table::TABLE;
use super::{enabled, lg_sample, totals, DUMP_SEQ, FINAL, LEAK, PREFIX_MAX};
use crate::os;
use crate::sync::Ordering;

/// Writes the profile to the file at `path` (without a NUL; at most `PREFIX_MAX + 64`
/// bytes): pprof's protobuf when the path ends in `.pb`, else jemalloc's `heap_v2` text.
/// False where it cannot be created or profiling is off.
pub fn dump_to_path(path: &[u8]) -> bool {
    if !enabled() {
        return false;
    }
    let mut z = [0u8; PREFIX_MAX + 65];
    if path.is_empty() || path.len() >= z.len() || path.contains(&0) {
        return false;
    }
    // The NUL after the path is one of the zeros left.
    let Some(fd) = z
        .get_mut(..path.len())
        .map(|room| room.copy_from_slice(path))
        .and_then(|()| z.get(..path.len() + 1))
        .and_then(os::open_write)
    else {
        return false;
    };
    if path.ends_with(b".pb") {
        dump_pprof(fd);
    } else {
        dump_heap(fd);
    }
    os::close(fd);
    true
}

/// Writes the profile to `<prof_prefix>.<pid>.<seq>.<kind>.heap` (jemalloc's naming; `kind`
/// `f` at exit, `i` at an interval, `m` on request). Returns the path's length in `path`.
pub fn dump_auto_into(kind: u8, path: &mut [u8; PREFIX_MAX + 65]) -> Option<usize> {
    let mut n = 0;
    let prefix = crate::config::options().prof_prefix();
    // Each piece is cut to the room left (one byte stays free, as `dump_to_path` asks).
    let mut push = |b: &[u8], n: &mut usize| {
        let room = path.get_mut(*n..PREFIX_MAX + 64).unwrap_or(&mut []);
        for (slot, &c) in room.iter_mut().zip(b) {
            *slot = c;
            *n += 1;
        }
    };
    push(prefix, &mut n);
    let mut tmp = [0u8; 20];
    push(b".", &mut n);
    push(crate::diag::dec_digits(os::pid() as u64, &mut tmp), &mut n);
    push(b".", &mut n);
    // Relaxed: a counter for unique names.
    let seq = DUMP_SEQ.fetch_add(1, Ordering::Relaxed);
    push(crate::diag::dec_digits(seq, &mut tmp), &mut n);
    push(&[b'.', kind], &mut n);
    push(b".heap", &mut n);
    dump_to_path(path.get(..n)?).then_some(n)
}

pub(super) fn dump_auto(kind: u8) {
    let mut path = [0u8; PREFIX_MAX + 65];
    dump_auto_into(kind, &mut path);
}

/// At exit: `prof_final` dumps; `prof_leak` reports what was never freed.
pub(super) extern "C" fn at_exit() {
    // Relaxed: settings.
    if FINAL.load(Ordering::Relaxed) {
        dump_auto(b'f');
    }
    if LEAK.load(Ordering::Relaxed) {
        leak_report();
    }
}

/// `prof_leak`: a one-line summary of live sampled memory, the largest stacks by live bytes
/// (addresses, innermost first), and a dump to read with `hugealloc profile`.
pub(super) fn leak_report() {
    let t = totals();
    if t[0] == 0 {
        return;
    }
    let lg = lg_sample();
    let mut m = crate::diag::Msg::new();
    m.str("leak summary: ")
        .dec(scaled_bytes(t[1], t[0], lg))
        .str(" bytes, ")
        .dec(scaled_objects(t[1], t[0], lg))
        .str(" objects (estimated from ")
        .dec(t[0])
        .str(" samples)\n");
    m.emit();
    // The three largest stacks.
    let mut top: [(u64, [usize; 8], usize); 3] = [(0, [0; 8], 0); 3];
    {
        let g = TABLE.lock();
        g.for_each_stack(|s| {
            if s.live_bytes == 0 {
                return;
            }
            let mut f = [0usize; 8];
            for (slot, &ip) in f.iter_mut().zip(s.frames()) {
                *slot = ip;
            }
            // Insertion into the list kept largest first: the entry carried along is swapped
            // with each smaller one, the smallest falls off the end.
            let mut carried = (s.live_bytes, f, s.frames().len().min(8));
            for e in top.iter_mut() {
                if carried.0 > e.0 {
                    core::mem::swap(e, &mut carried);
                }
            }
        });
    }
    for (bytes, frames, n) in top.iter().filter(|e| e.0 > 0) {
        let mut m = crate::diag::Msg::new();
        m.str("leaked ").dec(*bytes).str(" sampled bytes at");
        for &ip in frames.get(..*n).unwrap_or(frames) {
            m.str(" ").hex(ip as u64);
        }
        m.str("\n");
        m.emit();
    }
    let mut path = [0u8; PREFIX_MAX + 65];
    if let Some(n) = dump_auto_into(b'f', &mut path) {
        let mut m = crate::diag::Msg::new();
        m.str("leak detail: hugealloc profile ")
            .bytes(path.get(..n).unwrap_or(&path))
            .str("\n");
        m.emit();
    }
}

/// Writes the profile into an anonymous file and returns its descriptor and length, so a
/// caller can read it back after every lock is released (`profile::bytes`).
pub fn dump_to_memfd() -> Option<(i32, u64)> {
    if !enabled() {
        return None;
    }
    let fd = os::memfd()?;
    let mut counter = Counter { fd, len: 0 };
    counter.dump();
    Some((fd, counter.len))
}

pub(super) struct Counter {
    pub(super) fd: i32,
    pub(super) len: u64,
}

impl Counter {
    pub(super) fn dump(&mut self) {
        dump_heap(self.fd);
        let mut buf = [0u8; 4096];
        loop {
            let n = os::read_at(self.fd, self.len, &mut buf);
            if n == 0 {
                break;
            }
            self.len += n as u64;
        }
    }
}
