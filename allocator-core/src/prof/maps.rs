//! `/proc/self/maps` lines: parsing, and the range of the shared object holding hugealloc
//! (its frames are dropped from the top of captured stacks).

use super::{SELF_END, SELF_START};
use crate::os;
use crate::sync::Ordering;

/// Finds the mapping holding this code; if it is a shared object (not the executable),
/// records its range so that its frames are dropped from stacks.
pub(super) fn find_self_range() {
    let here = find_self_range as fn() as usize;
    let mut exe = [0u8; 512];
    let exe_len = os::read_link(b"/proc/self/exe\0", &mut exe).unwrap_or(0);
    let mut path = [0u8; 512];
    let mut path_len = 0;
    os::for_each_line(b"/proc/self/maps\0", |line| {
        if let Some((lo, hi, p)) = parse_maps_line(line) {
            if let Some(room) = path.get_mut(..p.len()).filter(|_| (lo..hi).contains(&here)) {
                room.copy_from_slice(p);
                path_len = p.len();
            }
        }
    });
    let path = path.get(..path_len).unwrap_or(&[]);
    if path.is_empty() || exe.get(..exe_len) == Some(path) {
        return;
    }
    let (mut start, mut end) = (usize::MAX, 0);
    os::for_each_line(b"/proc/self/maps\0", |line| {
        if let Some((lo, hi, p)) = parse_maps_line(line) {
            if p == path {
                start = start.min(lo);
                end = end.max(hi);
            }
        }
    });
    // Relaxed: published by the GLOBAL Release store.
    SELF_START.store(start, Ordering::Relaxed);
    SELF_END.store(end, Ordering::Relaxed);
}

/// `start-end perms offset dev inode path` → (start, end, path).
pub(super) fn parse_maps_line(line: &[u8]) -> Option<(usize, usize, &[u8])> {
    let dash = line.iter().position(|&c| c == b'-')?;
    let space = line.iter().position(|&c| c == b' ')?;
    let lo = parse_hex(line.get(..dash)?)?;
    let hi = parse_hex(line.get(dash + 1..space)?)?;
    // The path starts at the first '/' or '[' after the five fixed fields.
    let path = match line.iter().position(|&c| c == b'/' || c == b'[') {
        Some(i) => line.get(i..).unwrap_or(&[]),
        None => &[],
    };
    Some((lo, hi, path))
}

pub(super) fn parse_hex(text: &[u8]) -> Option<usize> {
    if text.is_empty() || text.len() > 16 {
        return None;
    }
    let mut v = 0usize;
    for &c in text {
        let d = (c as char).to_digit(16)?;
        v = v << 4 | d as usize;
    }
    Some(v)
}
