//! The buffered descriptor writer of the dumps, and jemalloc's `heap_v2` text format.

use super::lg_sample;
use super::table::TABLE;
use crate::os;

/// A buffered writer to a descriptor: no allocation, errors ignored.
pub(super) struct Out {
    fd: i32,
    /// Bytes of `buf` in use: at most its length.
    len: usize,
    buf: [u8; 4096],
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
        match self.buf.get_mut(self.len..self.len + b.len()) {
            Some(room) => {
                room.copy_from_slice(b);
                self.len += b.len();
            }
            // Longer than the buffer: written directly.
            None => os::write_fd(self.fd, b),
        }
        self
    }
    pub(super) fn dec(&mut self, v: u64) -> &mut Out {
        let mut tmp = [0u8; 20];
        self.bytes(crate::diag::dec_digits(v, &mut tmp))
    }
    pub(super) fn hex(&mut self, v: u64) -> &mut Out {
        let mut tmp = *b"0x0000000000000000";
        let digits = if v == 0 {
            1
        } else {
            16 - v.leading_zeros() as usize / 4
        };
        for (slot, k) in tmp[2..].iter_mut().zip((0..digits).rev()) {
            *slot = b"0123456789abcdef"[(v >> (k * 4)) as usize & 15];
        }
        self.bytes(tmp.get(..2 + digits).unwrap_or(&tmp))
    }
    pub(super) fn flush(&mut self) {
        os::write_fd(self.fd, self.buf.get(..self.len).unwrap_or(&self.buf));
        self.len = 0;
    }
}

/// Writes jemalloc's `heap_v2` profile of the live samples to `fd` (what `jeprof` reads).
pub fn dump_heap(fd: i32) {
    let lg = lg_sample();
    let mut out = Out::new(fd);
    {
        let g = TABLE.lock();
        let t = g.totals();
        out.bytes(b"heap_v2/").dec(1u64 << lg.min(62)).bytes(b"\n");
        counts_line(&mut out, &t);
        g.for_each_stack(|s| {
            if s.live_objects == 0 && s.alloc_objects == 0 {
                return;
            }
            out.bytes(b"@");
            for &ip in s.frames() {
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
