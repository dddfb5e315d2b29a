//! `scipp`: the workload of issue 4, after the scipp report. Two inputs `a`, `b` of `MIB` MiB of
//! `f64` each; every round computes `c = a + b`, `d = c * a + 1`, `e = sqrt(d)`, each into a
//! freshly allocated output (as NumPy and scipp do), so the cost is mostly the allocator's
//! pages: faults, zeroing, huge or not. Then a dependent random-read pass (pointer chasing)
//! over a buffer of `--chase-mib` MiB of indices, where the TLB reach of huge pages shows.
//! Every figure is the best of `--reps` repetitions; minor faults are for the best one.

use crate::args::Args;
use crate::measure::{ms, Delta, Mark};
use std::hint::black_box;

/// A full-period linear congruential step modulo a power of two: following `next` from any
/// index visits every index once before coming back (Hull–Dobell), in a scattered order.
#[inline]
fn lcg_next(i: u64, mask: u64) -> u64 {
    i.wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407)
        & mask
}

fn elementwise(a: &[f64], b: &[f64], rounds: usize) -> f64 {
    let mut acc = 0.0;
    for r in 0..rounds {
        let c: Vec<f64> = a.iter().zip(b).map(|(x, y)| x + y).collect();
        let d: Vec<f64> = c.iter().zip(a).map(|(x, y)| x * y + 1.0).collect();
        drop(black_box(c));
        let e: Vec<f64> = d.iter().map(|x| x.sqrt()).collect();
        drop(black_box(d));
        acc += e[(r * 7919) % e.len()];
    }
    acc
}

fn best(results: &[Delta]) -> Delta {
    *results.iter().min_by_key(|d| d.wall).unwrap()
}

fn fmt_thp(d: &Delta) -> String {
    d.thp_fault_alloc
        .map_or_else(|| "n/a".to_string(), |t| t.to_string())
}

pub fn run(args: &Args) -> Result<(), String> {
    let mib: usize = args.number(512)?;
    let rounds: usize = args.get("rounds", 3)?;
    let reps: usize = args.get("reps", 3)?;
    let chase_mib: usize = args.get("chase-mib", mib)?;
    let steps: u64 = args.get("chase-steps", 20_000_000)?;
    if mib == 0 || rounds == 0 || reps == 0 || chase_mib == 0 {
        return Err("MIB, --rounds, --reps and --chase-mib must be at least 1".to_string());
    }
    let n = (mib << 20) / 8;
    let setup = Mark::now();
    let a: Vec<f64> = (0..n).map(|i| (i % 1000) as f64 * 0.5).collect();
    let b: Vec<f64> = (0..n).map(|i| (i % 777) as f64 * 0.25).collect();
    let s = setup.delta();
    println!(
        "setup (inputs): {} ms, {} minor faults",
        ms(s.wall),
        s.minflt
    );

    let mut check = 0.0;
    let mut ew = Vec::new();
    for rep in 0..reps {
        let m = Mark::now();
        check += elementwise(&a, &b, rounds);
        let d = m.delta();
        println!(
            "elementwise rep {rep}: {} ms ({} rounds of 3 fresh outputs), {} minor faults, {} thp faults",
            ms(d.wall),
            rounds,
            d.minflt,
            fmt_thp(&d)
        );
        ew.push(d);
    }
    drop((a, b));

    // The chase buffer: the largest power-of-two count of u64 that fits in chase_mib.
    let words = (chase_mib << 20) / 8;
    let count = if words.is_power_of_two() {
        words
    } else {
        words.next_power_of_two() / 2
    };
    let mask = count as u64 - 1;
    let mut fill = Vec::new();
    let mut chase = Vec::new();
    for rep in 0..reps {
        let m = Mark::now();
        let next: Vec<u64> = (0..count as u64).map(|i| lcg_next(i, mask)).collect();
        fill.push(m.delta());
        let m = Mark::now();
        let mut p = 0u64;
        for _ in 0..steps {
            // Each load depends on the one before: latency (cache and TLB misses), not bandwidth.
            p = next[p as usize];
        }
        check += black_box(p) as f64;
        let d = m.delta();
        println!(
            "chase rep {rep}: fill {} ms ({} minor faults), {} steps in {} ms = {:.1} ns/step",
            ms(fill[rep].wall),
            fill[rep].minflt,
            steps,
            ms(d.wall),
            d.wall.as_secs_f64() * 1e9 / steps.max(1) as f64
        );
        chase.push(d);
    }
    let (e, f, c) = (best(&ew), best(&fill), best(&chase));
    println!("checksum: {check:e}");
    println!(
        "result: sub=scipp alloc={} mib={mib} rounds={rounds} elementwise_best_ms={} \
         elementwise_minflt={} elementwise_thp_faults={} chase_mib={} chase_fill_best_ms={} \
         chase_ns_per_step={:.1} setup_ms={}",
        crate::global::allocator(),
        ms(e.wall),
        e.minflt,
        fmt_thp(&e),
        (count * 8) >> 20,
        ms(f.wall),
        c.wall.as_secs_f64() * 1e9 / steps.max(1) as f64,
        ms(s.wall)
    );
    Ok(())
}
