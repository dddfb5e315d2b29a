//! The buffered descriptor writer of the dumps, and jemalloc's `heap_v2` text format.

use super::lg_sample;
use super::table::TABLE;
use crate::os;

// ---- dumps ---------------------------------------------------------------------------------

/// A buffered writer to a descriptor: no allocation, errors ignored.
pub(super) struct Out {
    pub(super) fd: i32,
    pub(super) len: usize,
    pub(super) buf: [u8; 4096],
}

impl Out {
    pub(super) fn new(fd: i32) -> Out {
        Out {
            fd,
            len: 0,
            buf: [0; 4096],
        }
    }
    pub(super) fn bytes(&mut self, b: &[u8]) -> &mut Out {
        if self.len + b.len() > self.buf.len() {
            self.flush();
        }
        if b.len() > self.buf.len() {
            os::write_fd(self.fd, b);
        } else {
            self.buf[self.len..self.len + b.len()].copy_from_slice(b);
            self.len += b.len();
        }
        self
    }
    pub(super) fn dec(&mut self, v: u64) -> &mut Out {
        let mut tmp = [0u8; 20];
        let digits = crate::diag::dec_digits(v, &mut tmp);
        let mut copy = [0u8; 20];
        copy[..digits.len()].copy_from_slice(digits);
        let n = digits.len();
        self.bytes(&copy[..n])
    }
    pub(super) fn hex(&mut self, v: u64) -> &mut Out {
        let mut tmp = [0u8; 18];
        tmp[0] = b'0';
        tmp[1] = b'x';
        let mut n = 2;
        let digits = if v == 0 {
            1
        } else {
            16 - v.leading_zeros() as usize / 4
        };
        for k in (0..digits).rev() {
            tmp[n] = b"0123456789abcdef"[(v >> (k * 4)) as usize & 15];
            n += 1;
        }
        self.bytes(&tmp[..n])
    }
    pub(super) fn flush(&mut self) {
        os::write_fd(self.fd, &self.buf[..self.len]);
        self.len = 0;
    }
}

/// Writes jemalloc's `heap_v2` profile of the live samples to `fd` (what `jeprof` reads).
pub fn dump_heap(fd: i32) {
    let lg = lg_sample();
    let mut out = Out::new(fd);
    {
        let g = TABLE.lock();
        let mut t = [0u64; 4];
        g.for_each_stack(|s| {
            t[0] += s.live_objects;
            t[1] += s.live_bytes;
            t[2] += s.alloc_objects;
            t[3] += s.alloc_bytes;
        });
        out.bytes(b"heap_v2/").dec(1u64 << lg.min(62)).bytes(b"\n");
        counts_line(&mut out, &t);
        g.for_each_stack(|s| {
            if s.live_objects == 0 && s.alloc_objects == 0 {
                return;
            }
            out.bytes(b"@");
            for &ip in &s.frames[..s.nframes] {
                out.bytes(b" ").hex(ip as u64);
            }
            out.bytes(b"\n");
            counts_line(
                &mut out,
                &[s.live_objects, s.live_bytes, s.alloc_objects, s.alloc_bytes],
            );
        });
    }
    out.bytes(b"\nMAPPED_LIBRARIES:\n");
    os::for_each_line(b"/proc/self/maps\0", |line| {
        out.bytes(line).bytes(b"\n");
    });
    out.flush();
}

pub(super) fn counts_line(out: &mut Out, t: &[u64; 4]) {
    out.bytes(b"  t*: ")
        .dec(t[0])
        .bytes(b": ")
        .dec(t[1])
        .bytes(b" [")
        .dec(t[2])
        .bytes(b": ")
        .dec(t[3])
        .bytes(b"]\n");
}
