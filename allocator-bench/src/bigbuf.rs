//! `bigbuf`: the workload of the scipp report and of the project brief. `ITERS` times: allocate
//! a buffer of `--mib` MiB (`Vec<f64>` by default, `--type u8` for bytes), fill every element,
//! sum it, drop it. Each round pays for whatever pages the allocator hands back: fresh 4 KiB
//! faults (glibc's `mmap` per call), fresh huge-page faults (THP), or nothing (memory kept
//! dirty for reuse). Prints per-round median and best, the first round (which alone shows the
//! THP policy once an allocator reuses its memory), the total, and minor faults per round.

use crate::args::Args;
use crate::measure::{median, ms, Mark};
use std::hint::black_box;

fn round_f64(len: usize, round: usize) -> f64 {
    let mut v: Vec<f64> = Vec::with_capacity(len);
    let base = round as f64;
    v.extend((0..len).map(|i| i as f64 + base));
    black_box(&mut v);
    v.iter().sum()
}

fn round_u8(len: usize, round: usize) -> f64 {
    let mut v: Vec<u8> = Vec::with_capacity(len);
    v.resize(len, (round as u8).wrapping_add(1));
    black_box(&mut v);
    v.iter().map(|&b| b as u64).sum::<u64>() as f64
}

pub fn run(args: &Args) -> Result<(), String> {
    let iters: usize = args.number(10)?;
    let mib: usize = args.get("mib", 512)?;
    let kind = args.value("type").unwrap_or("f64");
    let round: fn(usize, usize) -> f64 = match kind {
        "f64" => round_f64,
        "u8" => round_u8,
        other => return Err(format!("--type: {other:?} is not f64 or u8")),
    };
    if iters == 0 || mib == 0 {
        return Err("ITERS and --mib must be at least 1".to_string());
    }
    let len = (mib << 20) / if kind == "f64" { 8 } else { 1 };
    let total = Mark::now();
    let mut times = Vec::new();
    let mut faults = Vec::new();
    let mut thp_faults = 0u64;
    let mut check = 0.0;
    for i in 0..iters {
        let m = Mark::now();
        check += round(len, i);
        let d = m.delta();
        println!(
            "round {i}: {} ms, {} minor faults, {} thp faults (system-wide)",
            ms(d.wall),
            d.minflt,
            d.thp_fault_alloc
                .map_or("n/a".to_string(), |t| t.to_string())
        );
        times.push(d.wall);
        faults.push(d.minflt);
        thp_faults += d.thp_fault_alloc.unwrap_or(0);
    }
    let t = total.delta();
    let (first_ms, first_minflt) = (ms(times[0]), faults[0]);
    let best = *times.iter().min().unwrap();
    let med = median(times);
    faults.sort_unstable();
    let med_faults = faults[(faults.len() - 1) / 2];
    println!("checksum: {check:e}");
    println!("total_ms: {}", ms(t.wall));
    println!(
        "result: sub=bigbuf alloc={} mib={mib} type={kind} iters={iters} median_ms={} \
         best_ms={} first_ms={first_ms} first_minflt={first_minflt} total_ms={} \
         minflt_per_round={med_faults} minflt_total={} thp_faults={thp_faults}",
        crate::global::allocator(),
        ms(med),
        ms(best),
        ms(t.wall),
        t.minflt
    );
    Ok(())
}
