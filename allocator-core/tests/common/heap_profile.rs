//! Reads jemalloc's `heap_v2` profiles (as hugealloc writes them) in tests: the stacks with
//! their counts, the mappings, and the live bytes per function, located with `nm` and undone
//! for sampling as `jeprof` does. Shared by the core's and the FFI crate's profiling tests.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

pub struct Profile {
    /// The mean sampling interval in bytes.
    pub period: u64,
    /// Each stack (return addresses, innermost first) with live objects, live bytes,
    /// allocated objects, allocated bytes (sampled, not scaled).
    pub stacks: Vec<(Vec<u64>, [u64; 4])>,
    /// (start, end, file offset, path) of each mapping.
    pub maps: Vec<(u64, u64, u64, String)>,
}

fn counts(line: &str) -> [u64; 4] {
    // "  t*: N: B [N: B]"
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(nums.len(), 4, "bad counts line {line:?}");
    [nums[0], nums[1], nums[2], nums[3]]
}

pub fn parse(text: &str) -> Profile {
    let mut lines = text.lines();
    let head = lines.next().expect("empty profile");
    let period = head
        .strip_prefix("heap_v2/")
        .unwrap_or_else(|| panic!("bad header {head:?}"))
        .parse()
        .unwrap();
    let mut p = Profile {
        period,
        stacks: Vec::new(),
        maps: Vec::new(),
    };
    let mut in_maps = false;
    let mut pending: Option<Vec<u64>> = None;
    for line in lines {
        if in_maps {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 5 {
                continue;
            }
            let (lo, hi) = f[0].split_once('-').unwrap();
            p.maps.push((
                u64::from_str_radix(lo, 16).unwrap(),
                u64::from_str_radix(hi, 16).unwrap(),
                u64::from_str_radix(f[2], 16).unwrap(),
                f.get(5).copied().unwrap_or("").to_string(),
            ));
        } else if line == "MAPPED_LIBRARIES:" {
            in_maps = true;
        } else if let Some(rest) = line.strip_prefix("@ ") {
            pending = Some(
                rest.split_whitespace()
                    .map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap())
                    .collect(),
            );
        } else if line.trim_start().starts_with("t*:") {
            if let Some(frames) = pending.take() {
                p.stacks.push((frames, counts(line)));
            }
        }
    }
    p
}

/// Sampled bytes over `count` objects scaled back to the estimated true bytes (jeprof's rule).
pub fn scaled(bytes: u64, count: u64, period: u64) -> f64 {
    if count == 0 {
        return 0.0;
    }
    let avg = bytes as f64 / count as f64;
    bytes as f64 / (1.0 - (-avg / period as f64).exp())
}

/// Total estimated live bytes.
pub fn live_total(p: &Profile) -> f64 {
    p.stacks
        .iter()
        .map(|(_, c)| scaled(c[1], c[0], p.period))
        .sum()
}

/// Estimated live bytes of the stacks passing through each function of `names` (global
/// symbols of `exe`, found with `nm`).
pub fn live_by_function(p: &Profile, exe: &Path, names: &[&str]) -> Vec<f64> {
    let out = Command::new("nm")
        .args(["-S", "--defined-only"])
        .arg(exe)
        .output()
        .expect("running nm");
    let text = String::from_utf8_lossy(&out.stdout);
    let exe_canon = std::fs::canonicalize(exe).unwrap();
    // The load base: the mapping of the file at offset 0 (0 for a non-PIE executable, whose
    // symbol values are absolute).
    let first = p
        .maps
        .iter()
        .find(|m| m.2 == 0 && Path::new(&m.3) == exe_canon)
        .unwrap_or_else(|| panic!("{} not in the profile's mappings", exe.display()));
    names
        .iter()
        .map(|name| {
            let (addr, size) = text
                .lines()
                .find_map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    (f.len() == 4 && f[3] == *name).then(|| {
                        (
                            u64::from_str_radix(f[0], 16).unwrap(),
                            u64::from_str_radix(f[1], 16).unwrap(),
                        )
                    })
                })
                .unwrap_or_else(|| panic!("{name} not in nm's output"));
            let base = if addr >= first.0 { 0 } else { first.0 };
            let (lo, hi) = (base + addr, base + addr + size);
            p.stacks
                .iter()
                .filter(|(frames, _)| frames.iter().any(|&f| lo < f && f <= hi))
                .map(|(_, c)| scaled(c[1], c[0], p.period))
                .sum()
        })
        .collect()
}
