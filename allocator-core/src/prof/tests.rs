use super::lg_sample;
use super::maps::parse_maps_line;
use super::sample::{next_interval, scaled_bytes, scaled_objects};
use super::table::Table;
use core::ptr::null_mut;

#[test]
fn maps_lines() {
    let l = b"7f00a000-7f00b000 r-xp 00001000 08:01 1234   /usr/lib/libx.so";
    assert_eq!(
        parse_maps_line(l),
        Some((0x7f00a000, 0x7f00b000, &b"/usr/lib/libx.so"[..]))
    );
    assert_eq!(
        parse_maps_line(b"1000-2000 rw-p 00000000 00:00 0"),
        Some((0x1000, 0x2000, &b""[..]))
    );
    assert_eq!(parse_maps_line(b"garbage"), None);
}

#[test]
fn intervals_have_the_mean() {
    let mut rng = 12345u64;
    let n = 100_000u64;
    let sum: u64 = (0..n).map(|_| next_interval(&mut rng)).sum();
    let mean = sum as f64 / n as f64;
    let want = (1u64 << lg_sample()) as f64;
    assert!((mean / want - 1.0).abs() < 0.02, "mean {mean}, want {want}");
}

#[test]
fn scaling_undoes_sampling() {
    // One sample of 2^19 bytes at lg 19: probability 1 - 1/e.
    let b = scaled_bytes(1 << 19, 1, 19);
    let want = (1u64 << 19) as f64 / (1.0 - (-1.0f64).exp());
    assert!((b as f64 - want).abs() < 2.0);
    // Tiny blocks: each stood for about 2^19 / size of them.
    assert!(scaled_objects(16, 1, 19) > 30_000);
    assert_eq!(scaled_bytes(0, 0, 19), 0);
}

#[test]
fn block_table_insert_find_delete() {
    let mut t = Table::EMPTY;
    // Many keys, then delete every other one: the rest must stay findable.
    for k in 1..5000usize {
        assert!(t.block_insert(k * 4096 + 16, k * 4096, k, null_mut()));
    }
    for k in (1..5000usize).step_by(2) {
        assert!(t.block_find(k * 4096 + 16, true).is_some());
    }
    for k in 1..5000usize {
        let found = t.block_find(k * 4096 + 16, false);
        assert_eq!(found.is_some(), k % 2 == 0, "key {k}");
        if let Some((base, size, _)) = found {
            assert_eq!((base, size), (k * 4096, k));
        }
    }
    assert_eq!(t.nblocks, 2499);
    let a = t.stack_for(&[1, 2, 3]);
    let b = t.stack_for(&[1, 2, 4]);
    assert!(!a.is_null() && a != b);
    assert_eq!(t.stack_for(&[1, 2, 3]), a);
    for k in 0..1000usize {
        assert!(!t.stack_for(&[k, 7]).is_null());
    }
    assert_eq!(t.stack_for(&[1, 2, 3]), a);
    assert_eq!(t.nstacks, 1002);
}

/// The frame-pointer walk follows records upward and stops at the first one outside the
/// range, misaligned, not above the one before, or with a null return address.
#[test]
fn frame_chain_walk_stays_in_bounds() {
    // A fake stack of 16 words; a record is (next record's address, return address).
    let mut stack = [0usize; 16];
    let base = stack.as_ptr() as usize;
    let at = |i: usize| base + i * 8;
    let (lo, hi) = (base, base + stack.len() * 8);
    let chain = |stack: &mut [usize; 16], links: &[(usize, usize)]| {
        stack.iter_mut().for_each(|w| *w = 0);
        for &(i, ret) in links {
            stack[i] = 0;
            stack[i + 1] = ret;
        }
    };
    let walk = |stack: &[usize; 16], first: usize, lo: usize, hi: usize| {
        let _ = stack;
        let mut out = [0usize; 8];
        // SAFETY: [lo, hi) lies inside `stack`, live for the call.
        let n = unsafe { crate::os::walk_frame_chain(&mut out, first, lo, hi) };
        out[..n].to_vec()
    };
    // 0 -> 4 -> 10 -> 14, the last record's next (0) below it: four frames, then stop.
    chain(&mut stack, &[(0, 0x11), (4, 0x22), (10, 0x33), (14, 0x44)]);
    stack[0] = at(4);
    stack[4] = at(10);
    stack[10] = at(14);
    assert_eq!(walk(&stack, at(0), lo, hi), [0x11, 0x22, 0x33, 0x44]);
    // The range ends before record 10: its words are never read.
    assert_eq!(walk(&stack, at(0), lo, at(11)), [0x11, 0x22]);
    // A start below the range, a misaligned start or a wild one: nothing.
    assert!(walk(&stack, at(0), at(1), hi).is_empty());
    assert!(walk(&stack, at(0) + 4, lo, hi).is_empty());
    assert!(walk(&stack, usize::MAX - 7, lo, hi).is_empty());
    // A link pointing down (or to itself) ends the walk after that record.
    stack[4] = at(2);
    assert_eq!(walk(&stack, at(0), lo, hi), [0x11, 0x22]);
    stack[4] = at(4);
    assert_eq!(walk(&stack, at(0), lo, hi), [0x11, 0x22]);
    // A null return address ends it before that record.
    stack[4] = at(10);
    stack[11] = 0;
    assert_eq!(walk(&stack, at(0), lo, hi), [0x11, 0x22]);
    // A link out of the range ends it.
    stack[11] = 0x33;
    stack[10] = hi + 64;
    assert_eq!(walk(&stack, at(0), lo, hi), [0x11, 0x22, 0x33]);
}

/// The executable segment's file offset is read from the program headers: the one whose
/// page-rounded offset is the mapping's.
#[test]
fn exec_segment_offset_reads_the_program_headers() {
    use super::pprof::exec_segment_offset;
    // An ELF header (64 bytes) and three program headers of 56 bytes at 0x40.
    let mut elf = [0u8; 64 + 3 * 56];
    elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
    elf[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
    elf[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
    elf[0x38..0x3a].copy_from_slice(&3u16.to_le_bytes());
    // (type, flags, offset): read-only at 0, text at 0x3cd70, data at 0x116c90.
    for (i, (ty, flags, off)) in [(1u32, 4u32, 0u64), (1, 5, 0x3cd70), (1, 6, 0x116c90)]
        .into_iter()
        .enumerate()
    {
        let ph = 64 + i * 56;
        elf[ph..ph + 4].copy_from_slice(&ty.to_le_bytes());
        elf[ph + 4..ph + 8].copy_from_slice(&flags.to_le_bytes());
        elf[ph + 8..ph + 16].copy_from_slice(&off.to_le_bytes());
    }
    assert_eq!(exec_segment_offset(&elf, 0x3c000), Some(0x3cd70));
    // Only executable segments, and only the one the mapping holds.
    assert_eq!(exec_segment_offset(&elf, 0x116000), None);
    assert_eq!(exec_segment_offset(&elf, 0), None);
    // Truncated headers or not an ELF file: nothing, no panic.
    assert_eq!(exec_segment_offset(&elf[..64 + 60], 0x3c000), None);
    assert_eq!(exec_segment_offset(b"#!/bin/sh", 0x3c000), None);
}
