//! hugealloc as the `#[global_allocator]` of a test binary running a std-heavy workload:
//! collections, strings, formatting, threads, cross-thread drops.

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;

#[global_allocator]
static GLOBAL: hugealloc::HugeAlloc = hugealloc::HugeAlloc;

#[test]
fn std_workload() {
    let mut map: HashMap<String, Vec<u64>> = HashMap::new();
    for i in 0..50_000u64 {
        map.entry(format!("key-{}", i % 5000)).or_default().push(i);
    }
    assert_eq!(map.len(), 5000);
    assert_eq!(map["key-42"].len(), 10);
    let mut words: Vec<String> = (0..20_000)
        .map(|i| format!("{:x}", i * 2654435761u64 % 1000003))
        .collect();
    words.sort();
    assert!(words.windows(2).all(|w| w[0] <= w[1]));
    let tree: BTreeMap<u32, Box<[u8]>> = (0..10_000u32)
        .map(|i| (i, vec![i as u8; (i % 700) as usize].into_boxed_slice()))
        .collect();
    assert_eq!(tree[&699].len(), 699);
    assert!(tree[&300].iter().all(|&b| b == 300u32 as u8));
    let big: Vec<u64> = (0..4_000_000).collect();
    assert_eq!(big.iter().sum::<u64>(), 4_000_000 * 3_999_999 / 2);
}

#[test]
fn threads_and_cross_thread_frees() {
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let producer = std::thread::spawn(move || {
        for i in 0..100_000usize {
            tx.send(vec![(i % 251) as u8; i % 2000 + 1]).unwrap();
        }
    });
    let consumer = std::thread::spawn(move || {
        let mut n = 0usize;
        for v in rx {
            assert!(v.iter().all(|&b| b == v[0]));
            n += 1;
        }
        n
    });
    producer.join().unwrap();
    assert_eq!(consumer.join().unwrap(), 100_000);
    let handles: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let mut keep = Vec::new();
                for i in 0..20_000usize {
                    let s = format!("{t}-{i}-{}", "x".repeat(i % 100));
                    if i % 10 == 0 {
                        keep.push(s);
                    }
                }
                keep.len()
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), 2000);
    }
}

#[test]
fn direct_calls_do_not_need_global_registration() {
    use std::alloc::{GlobalAlloc, Layout};
    let a = hugealloc::HugeAlloc;
    let layout = Layout::from_size_align(1000, 64).unwrap();
    // SAFETY: layout is non-zero-sized; the block is freed with the same layout.
    unsafe {
        let p = a.alloc(layout);
        assert!(!p.is_null());
        assert_eq!(p as usize % 64, 0);
        let q = a.realloc(p, layout, 5000);
        assert_eq!(q as usize % 64, 0);
        assert!(hugealloc::usable_size(q) >= 5000);
        a.dealloc(q, Layout::from_size_align(5000, 64).unwrap());
    }
}
