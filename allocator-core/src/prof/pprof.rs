//! pprof's protobuf format, hand-encoded.

use super::heap::Out;
use super::maps::{parse_hex, parse_maps_line};
use super::sample::{scaled_bytes, scaled_objects};
use super::table::TABLE;
use super::{lg_sample, FRAMES_MAX};
use crate::os;

/// A protobuf message built on the stack in `N` bytes, which its caller sizes for the most
/// the message can hold (an overrun is a bug and aborts).
struct Pb<const N: usize> {
    buf: [u8; N],
    /// Bytes of `buf` in use: at most `N`.
    len: usize,
}

impl<const N: usize> Pb<N> {
    fn new() -> Self {
        Pb {
            buf: [0; N],
            len: 0,
        }
    }

    fn byte(&mut self, b: u8) {
        match self.buf.get_mut(self.len) {
            Some(slot) => *slot = b,
            None => crate::diag::fatal_index("pprof: a message past its buffer", self.len, N),
        }
        self.len += 1;
    }

    /// Appends `v` as a varint.
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte(v as u8 | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }

    /// A varint field (wire type 0).
    fn field_varint(&mut self, field: u32, v: u64) {
        self.varint((field as u64) << 3);
        self.varint(v);
    }

    /// A length-delimited field (wire type 2) holding `body`.
    fn field_bytes(&mut self, field: u32, body: &[u8]) {
        self.varint((field as u64) << 3 | 2);
        self.varint(body.len() as u64);
        for &b in body {
            self.byte(b);
        }
    }

    fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&self.buf)
    }
}

/// A length-delimited field (wire type 2) holding `body`, written to `out`.
fn field_bytes(out: &mut Out, field: u32, body: &[u8]) {
    let mut head = Pb::<20>::new();
    head.varint((field as u64) << 3 | 2);
    head.varint(body.len() as u64);
    out.bytes(head.as_bytes()).bytes(body);
}

/// The executable mappings of `/proc/self/maps`, for pprof's `Mapping` and `Location`.
const PPROF_MAPPINGS_MAX: usize = 512;

/// Writes the profile in pprof's protobuf format (uncompressed; `pprof` reads it as is):
/// sample types `alloc_objects`, `alloc_space`, `inuse_objects`, `inuse_space`, values
/// scaled for sampling (pprof expects estimates, as Go's runtime writes them), one mapping
/// per executable file mapping so that `pprof` can symbolise, one location per frame.
pub fn dump_pprof(fd: i32) {
    let lg = lg_sample();
    let mut out = Out::new(fd);
    // The string table is written as it grows: index 0 must be "".
    const STRINGS: [&[u8]; 8] = [
        b"",
        b"alloc_objects",
        b"count",
        b"alloc_space",
        b"bytes",
        b"inuse_objects",
        b"inuse_space",
        b"space",
    ];
    for s in STRINGS {
        field_bytes(&mut out, 6, s);
    }
    let mut nstrings = STRINGS.len() as u64;
    // sample_type (1) for each value, then period_type (11): ValueType{type, unit}.
    for (field, ty, unit) in [(1, 1, 2), (1, 3, 4), (1, 5, 2), (1, 6, 4), (11, 7, 4)] {
        let mut m = Pb::<32>::new();
        m.field_varint(1, ty);
        m.field_varint(2, unit);
        field_bytes(&mut out, field, m.as_bytes());
    }
    // period (12) and default_sample_type (14).
    let mut head = Pb::<32>::new();
    head.field_varint(12, 1u64 << lg.min(62));
    head.field_varint(14, 6);
    out.bytes(head.as_bytes());
    // Mappings: executable, backed by a file, as `/proc/self/maps` gives them.
    let mut maps = [(0usize, 0usize); PPROF_MAPPINGS_MAX];
    let mut nmaps = 0;
    os::for_each_line(b"/proc/self/maps\0", |line| {
        let Some((lo, hi, path)) = parse_maps_line(line) else {
            return;
        };
        let perms = line.split(|&c| c == b' ').nth(1).unwrap_or(b"");
        let offset = line
            .split(|&c| c == b' ')
            .nth(2)
            .and_then(parse_hex)
            .unwrap_or(0);
        if perms.get(2) != Some(&b'x') || path.first() != Some(&b'/') {
            return;
        }
        let Some(slot) = maps.get_mut(nmaps) else {
            return;
        };
        // The mapping starts where the executable segment's first byte lies, not at the
        // page holding it: see `segment_offset`.
        let seg = segment_offset(path, offset as u64);
        let start = lo.saturating_add((seg - offset as u64) as usize).min(hi);
        *slot = (start, hi);
        nmaps += 1;
        field_bytes(&mut out, 6, path);
        let name = nstrings;
        nstrings += 1;
        let mut b = Pb::<80>::new();
        b.field_varint(1, nmaps as u64);
        b.field_varint(2, start as u64);
        b.field_varint(3, hi as u64);
        b.field_varint(4, seg);
        b.field_varint(5, name);
        field_bytes(&mut out, 3, b.as_bytes());
    });
    let maps = maps.get(..nmaps).unwrap_or(&maps);
    // Samples, each with its own locations (pprof merges equal addresses itself).
    let g = TABLE.lock();
    let mut next_loc = 1u64;
    g.for_each_stack(|s| {
        if s.live_objects == 0 && s.alloc_objects == 0 {
            return;
        }
        // location_id (packed) and value (packed): at most 128 * 10 and 4 * 10 bytes.
        let mut ids = Pb::<{ FRAMES_MAX * 10 }>::new();
        for &ip in s.frames() {
            // Return addresses point after the call: the call itself is one byte earlier
            // (the innermost frame too, since it is a call into the allocator).
            let addr = ip.saturating_sub(1);
            let mapping = maps
                .iter()
                .position(|&(lo, hi)| lo <= addr && addr < hi)
                .map_or(0, |i| i as u64 + 1);
            let mut b = Pb::<40>::new();
            b.field_varint(1, next_loc);
            if mapping != 0 {
                b.field_varint(2, mapping);
            }
            b.field_varint(3, addr as u64);
            field_bytes(&mut out, 4, b.as_bytes());
            ids.varint(next_loc);
            next_loc += 1;
        }
        let mut vals = Pb::<48>::new();
        for v in [
            scaled_objects(s.alloc_bytes, s.alloc_objects, lg),
            scaled_bytes(s.alloc_bytes, s.alloc_objects, lg),
            scaled_objects(s.live_bytes, s.live_objects, lg),
            scaled_bytes(s.live_bytes, s.live_objects, lg),
        ] {
            vals.varint(v);
        }
        let mut b = Pb::<{ FRAMES_MAX * 10 + 80 }>::new();
        b.field_bytes(1, ids.as_bytes());
        b.field_bytes(2, vals.as_bytes());
        field_bytes(&mut out, 2, b.as_bytes());
    });
    drop(g);
    out.flush();
}

/// The file offset of the executable `PT_LOAD` segment that a `/proc/self/maps` line of
/// `path` at file offset `map_offset` (page aligned) holds, or `map_offset` if the file's
/// program headers cannot be read or none matches.
///
/// Why: a linker may start the text segment in the middle of a page (lld does, and rustc links
/// with lld: `p_offset` 0x3cd70, `p_vaddr` 0x3dd70); the mapping then starts at the page below.
/// `go tool pprof` (Go's own object reader, at least up to Go 1.19) takes the load bias as
/// `Mapping.start - p_vaddr`, ignoring `Mapping.offset`, so with the page's start every
/// address was off by `p_vaddr % 4096` and named the wrong functions. Starting the mapping at
/// the segment's first byte (and its offset at `p_offset`) describes the same addresses and
/// gives that formula the true bias; google/pprof's `start - offset + p_offset - p_vaddr`
/// gives it too.
fn segment_offset(path: &[u8], map_offset: u64) -> u64 {
    let mut name = [0u8; 512];
    let Some(room) = name.get_mut(..path.len()).filter(|_| path.len() < 512) else {
        return map_offset;
    };
    room.copy_from_slice(path);
    let mut head = [0u8; 4096];
    match os::read_file(&name, &mut head) {
        Some(n) => exec_segment_offset(head.get(..n).unwrap_or(&[]), map_offset),
        None => None,
    }
    .unwrap_or(map_offset)
}

/// From the start of a 64-bit little-endian ELF file (`head`): the `p_offset` of the
/// executable `PT_LOAD` whose page-rounded offset is `map_offset`.
pub(super) fn exec_segment_offset(head: &[u8], map_offset: u64) -> Option<u64> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(head.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(head.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(head.get(at..at + 8)?.try_into().ok()?));
    // ELF magic, ELFCLASS64, ELFDATA2LSB.
    if head.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let (phentsize, phnum) = (u16_at(0x36)? as usize, u16_at(0x38)? as usize);
    (0..phnum).find_map(|i| {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        const PT_LOAD: u32 = 1;
        const PF_X: u32 = 1;
        let (ty, flags, off) = (u32_at(ph)?, u32_at(ph + 4)?, u64_at(ph + 8)?);
        (ty == PT_LOAD && flags & PF_X != 0 && off & !(os::PAGE as u64 - 1) == map_offset)
            .then_some(off)
    })
}
