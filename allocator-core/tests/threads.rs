//! Multi-threaded stress: random sizes with cross-thread frees (thread churn is in churn.rs), and
//! fork while other threads allocate.

#[global_allocator]
static GLOBAL: hugealloc::HugeAlloc = hugealloc::HugeAlloc;

use std::sync::mpsc;

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

#[test]
fn random_sizes_with_cross_thread_frees() {
    let (tx, rx) = mpsc::sync_channel::<(usize, Vec<u8>)>(1024);
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut s = 0x9e3779b97f4a7c15 ^ t;
                let mut mine = Vec::new();
                for _ in 0..50_000 {
                    let size = match xorshift(&mut s) % 100 {
                        0 => (xorshift(&mut s) % (4 << 20)) as usize,
                        1..=10 => (xorshift(&mut s) % 65536) as usize,
                        _ => (xorshift(&mut s) % 512) as usize,
                    };
                    let v = vec![(size % 251) as u8; size];
                    if xorshift(&mut s).is_multiple_of(2) {
                        tx.send((size, v)).unwrap();
                    } else {
                        mine.push(v);
                        if mine.len() > 100 {
                            let v = mine.swap_remove((xorshift(&mut s) % 100) as usize);
                            assert!(v.iter().all(|&b| b == (v.len() % 251) as u8));
                        }
                    }
                }
            })
        })
        .collect();
    drop(tx);
    let checker = std::thread::spawn(move || {
        let mut n = 0;
        for (size, v) in rx {
            assert_eq!(v.len(), size);
            assert!(v.iter().all(|&b| b == (size % 251) as u8));
            n += 1;
        }
        n
    });
    for w in workers {
        w.join().unwrap();
    }
    assert!(checker.join().unwrap() > 50_000);
}

#[test]
fn fork_while_other_threads_allocate() {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy: Vec<_> = (0..3)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let v = vec![0u8; (n % 5000) as usize];
                    n += v.len() as u64 % 3 + 1;
                }
                n
            })
        })
        .collect();
    for _ in 0..20 {
        // SAFETY: the child only allocates through hugealloc and exits with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let mut ok = true;
            for i in 0..10_000usize {
                let v = vec![7u8; i % 3000 + 1];
                ok &= v[i % v.len()] == 7;
            }
            let big = vec![1u8; 16 << 20];
            ok &= big[12345] == 1;
            // SAFETY: leaving the child without running the parent's exit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child status {status:#x}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for b in busy {
        assert!(b.join().unwrap() > 0);
    }
}
