//! `workload`: the mixed job, on two threads at once.
//!
//! - Thread 1: a `HashMap<String, Vec<u64>>` of `ENTRIES` entries (keys of 20 bytes, values of
//!   1 to 16 words), a third of them removed, the keys cloned and sorted, a `BTreeMap` of every
//!   other key, a sum over all of it.
//! - Thread 2: a JSON-like tree of boxed nodes (objects, arrays, strings, numbers) with about
//!   `ENTRIES` nodes, walked and serialised into one growing `String`; then big buffers of
//!   8 to 64 MiB, each filled, summed and dropped, twice over.
//!
//! Each phase's time is printed; a checksum keeps the work from being optimised away.

use crate::args::Args;
use crate::measure::{ms, Mark};
use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;

/// splitmix64: spreads an index into a well-mixed word.
pub fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn maps(n: u64, log: &mut Vec<(&'static str, Mark)>) -> u64 {
    log.push(("hashmap", Mark::now()));
    let mut map: HashMap<String, Vec<u64>> = HashMap::new();
    for i in 0..n {
        let key = format!("key-{:016x}", mix(i));
        let len = (mix(i ^ 0x55) % 16 + 1) as usize;
        map.insert(key, (0..len as u64).map(|j| j.wrapping_mul(i)).collect());
    }
    map.retain(|k, _| k.as_bytes()[k.len() - 1] % 3 != 0);
    log.push(("sort", Mark::now()));
    let mut keys: Vec<String> = map.keys().cloned().collect();
    keys.sort_unstable();
    log.push(("btreemap", Mark::now()));
    let tree: BTreeMap<u64, String> = keys
        .iter()
        .step_by(2)
        .enumerate()
        .map(|(i, k)| (mix(i as u64) ^ map[k].len() as u64, k.clone()))
        .collect();
    let mut sum = keys.len() as u64;
    for (k, v) in &tree {
        sum = sum.wrapping_add(*k ^ v.len() as u64);
    }
    for v in map.values() {
        sum = sum.wrapping_add(v.iter().sum::<u64>());
    }
    log.push(("drop_maps", Mark::now()));
    drop((map, keys, tree));
    sum
}

/// A JSON-like value; children are boxed so every node is its own allocation (the point of
/// the exercise, hence the allowed lint).
#[allow(clippy::vec_box)]
enum Node {
    Num(f64),
    Str(String),
    Arr(Vec<Box<Node>>),
    Obj(Vec<(String, Box<Node>)>),
}

/// Builds a tree of about `budget` nodes.
fn build(seed: u64, depth: u32, budget: &mut i64) -> Box<Node> {
    *budget -= 1;
    let r = mix(seed);
    if depth >= 8 || *budget <= 0 || r.is_multiple_of(4) {
        return Box::new(if r & 16 == 0 {
            Node::Num((r % 1000) as f64 / 7.0)
        } else {
            Node::Str(format!("s{}", r % 100_000))
        });
    }
    let fan = (r >> 8) % 12 + 1;
    let kids = (0..fan).map(|i| build(seed.wrapping_mul(31).wrapping_add(i), depth + 1, budget));
    Box::new(if r & 32 == 0 {
        Node::Arr(kids.collect())
    } else {
        Node::Obj(
            kids.enumerate()
                .map(|(i, k)| (format!("k{i}"), k))
                .collect(),
        )
    })
}

fn write(n: &Node, out: &mut String) {
    match n {
        Node::Num(x) => out.push_str(&format!("{x:.3}")),
        Node::Str(s) => {
            out.push('"');
            out.push_str(s);
            out.push('"');
        }
        Node::Arr(v) => {
            out.push('[');
            for (i, k) in v.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(k, out);
            }
            out.push(']');
        }
        Node::Obj(v) => {
            out.push('{');
            for (i, (key, k)) in v.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push('"');
                out.push_str(key);
                out.push_str("\":");
                write(k, out);
            }
            out.push('}');
        }
    }
}

fn tree_and_buffers(n: u64, log: &mut Vec<(&'static str, Mark)>) -> u64 {
    log.push(("tree", Mark::now()));
    let mut sum = 0u64;
    let mut built = 0i64;
    let mut forest = Vec::new();
    let mut seed = 1;
    while built < n as i64 {
        let mut budget = (n as i64 - built).min(100_000);
        let want = budget;
        forest.push(build(seed, 0, &mut budget));
        built += want - budget.max(0);
        seed += 1;
    }
    log.push(("serialise", Mark::now()));
    let mut out = String::new();
    for t in &forest {
        write(t, &mut out);
    }
    sum = sum.wrapping_add(out.len() as u64 + out.bytes().filter(|&b| b == b'"').count() as u64);
    drop((out, forest));
    log.push(("big_buffers", Mark::now()));
    for round in 0..2u64 {
        for mib in [8usize, 16, 32, 64] {
            let len = (mib << 20) / 8;
            let mut v: Vec<u64> = Vec::with_capacity(len);
            v.extend((0..len as u64).map(|i| i ^ round));
            sum = sum.wrapping_add(black_box(&v).iter().sum::<u64>());
        }
    }
    sum
}

fn report(thread: &str, log: &[(&'static str, Mark)], end: Mark) {
    for (i, (name, mark)) in log.iter().enumerate() {
        let next = log.get(i + 1).map_or(end, |(_, m)| *m);
        let d = mark.delta_to(&next);
        println!(
            "phase {thread}.{name}: {} ms, {} minor faults (this thread)",
            ms(d.wall),
            d.thread_minflt
        );
    }
}

pub fn run(args: &Args) -> Result<(), String> {
    let n: u64 = args.number(1_000_000)?;
    let start = Mark::now();
    let (sum, log1, end1, log2, end2) = std::thread::scope(|s| {
        let a = s.spawn(|| {
            let mut log = Vec::new();
            let sum = maps(n, &mut log);
            (sum, log, Mark::now())
        });
        let b = s.spawn(|| {
            let mut log = Vec::new();
            let sum = tree_and_buffers(n, &mut log);
            (sum, log, Mark::now())
        });
        let (s1, l1, e1) = a.join().unwrap();
        let (s2, l2, e2) = b.join().unwrap();
        (s1.wrapping_add(s2), l1, e1, l2, e2)
    });
    let total = start.delta();
    report("maps", &log1, end1);
    report("tree", &log2, end2);
    println!("checksum: {sum:x}");
    println!("wall_ms: {}", ms(total.wall));
    println!("minor_faults: {}", total.minflt);
    println!(
        "result: sub=workload alloc={} entries={n} wall_ms={} minflt={} peak_rss_mib={:.1}",
        crate::global::allocator(),
        ms(total.wall),
        total.minflt,
        crate::measure::peak_rss_kib() as f64 / 1024.0
    );
    Ok(())
}
