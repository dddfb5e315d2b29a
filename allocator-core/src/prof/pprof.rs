//! pprof's protobuf format, hand-encoded.

use super::heap::Out;
use super::maps::{parse_hex, parse_maps_line};
use super::sample::{scaled_bytes, scaled_objects};
use super::table::TABLE;
use super::{lg_sample, FRAMES_MAX};
use crate::os;

// ---- pprof -------------------------------------------------------------------------------

/// Appends `v` as a protobuf varint to `buf` at `*n` (the buffer is large enough: callers
/// size it for the most a message can hold).
pub(super) fn varint(buf: &mut [u8], n: &mut usize, mut v: u64) {
    while v >= 0x80 {
        buf[*n] = v as u8 | 0x80;
        v >>= 7;
        *n += 1;
    }
    buf[*n] = v as u8;
    *n += 1;
}

/// A varint field (wire type 0).
pub(super) fn field_varint(buf: &mut [u8], n: &mut usize, field: u32, v: u64) {
    varint(buf, n, (field as u64) << 3);
    varint(buf, n, v);
}

/// A length-delimited field (wire type 2) holding `body`.
pub(super) fn field_bytes(out: &mut Out, field: u32, body: &[u8]) {
    let mut head = [0u8; 20];
    let mut n = 0;
    varint(&mut head, &mut n, (field as u64) << 3 | 2);
    varint(&mut head, &mut n, body.len() as u64);
    out.bytes(&head[..n]).bytes(body);
}

/// The executable mappings of `/proc/self/maps`, for pprof's `Mapping` and `Location`.
pub(super) const PPROF_MAPPINGS_MAX: usize = 512;

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
    let mut m = [0u8; 64];
    for (ty, unit) in [(1, 2), (3, 4), (5, 2), (6, 4)] {
        let mut n = 0;
        field_varint(&mut m, &mut n, 1, ty);
        field_varint(&mut m, &mut n, 2, unit);
        field_bytes(&mut out, 1, &m[..n]);
    }
    let mut n = 0;
    field_varint(&mut m, &mut n, 1, 7);
    field_varint(&mut m, &mut n, 2, 4);
    field_bytes(&mut out, 11, &m[..n]);
    let mut head = [0u8; 32];
    let mut n = 0;
    field_varint(&mut head, &mut n, 12, 1u64 << lg.min(62));
    field_varint(&mut head, &mut n, 14, 6);
    out.bytes(&head[..n]);
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
        if perms.get(2) != Some(&b'x') || path.first() != Some(&b'/') || nmaps == maps.len() {
            return;
        }
        field_bytes(&mut out, 6, path);
        let name = nstrings;
        nstrings += 1;
        maps[nmaps] = (lo, hi);
        nmaps += 1;
        let mut b = [0u8; 80];
        let mut n = 0;
        field_varint(&mut b, &mut n, 1, nmaps as u64);
        field_varint(&mut b, &mut n, 2, lo as u64);
        field_varint(&mut b, &mut n, 3, hi as u64);
        field_varint(&mut b, &mut n, 4, offset as u64);
        field_varint(&mut b, &mut n, 5, name);
        field_bytes(&mut out, 3, &b[..n]);
    });
    let maps = &maps[..nmaps];
    // Samples, each with its own locations (pprof merges equal addresses itself).
    let g = TABLE.lock();
    let mut next_loc = 1u64;
    g.for_each_stack(|s| {
        if s.live_objects == 0 && s.alloc_objects == 0 {
            return;
        }
        // location_id (packed) and value (packed): at most 128 * 10 and 4 * 10 bytes.
        let mut ids = [0u8; FRAMES_MAX * 10];
        let mut nids = 0;
        for &ip in &s.frames[..s.nframes] {
            // Return addresses point after the call: the call itself is one byte earlier
            // (the innermost frame too, since it is a call into the allocator).
            let addr = ip.saturating_sub(1);
            let mapping = maps
                .iter()
                .position(|&(lo, hi)| lo <= addr && addr < hi)
                .map_or(0, |i| i as u64 + 1);
            let mut b = [0u8; 40];
            let mut n = 0;
            field_varint(&mut b, &mut n, 1, next_loc);
            if mapping != 0 {
                field_varint(&mut b, &mut n, 2, mapping);
            }
            field_varint(&mut b, &mut n, 3, addr as u64);
            field_bytes(&mut out, 4, &b[..n]);
            varint(&mut ids, &mut nids, next_loc);
            next_loc += 1;
        }
        let mut vals = [0u8; 48];
        let mut nvals = 0;
        for v in [
            scaled_objects(s.alloc_bytes, s.alloc_objects, lg),
            scaled_bytes(s.alloc_bytes, s.alloc_objects, lg),
            scaled_objects(s.live_bytes, s.live_objects, lg),
            scaled_bytes(s.live_bytes, s.live_objects, lg),
        ] {
            varint(&mut vals, &mut nvals, v);
        }
        let mut b = [0u8; FRAMES_MAX * 10 + 80];
        let mut n = 0;
        varint(&mut b, &mut n, 1 << 3 | 2);
        varint(&mut b, &mut n, nids as u64);
        b[n..n + nids].copy_from_slice(&ids[..nids]);
        n += nids;
        varint(&mut b, &mut n, 2 << 3 | 2);
        varint(&mut b, &mut n, nvals as u64);
        b[n..n + nvals].copy_from_slice(&vals[..nvals]);
        n += nvals;
        field_bytes(&mut out, 2, &b[..n]);
    });
    drop(g);
    out.flush();
}
