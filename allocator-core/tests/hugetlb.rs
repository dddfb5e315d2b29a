//! Explicit huge pages: the hugetlb page source (`hugealloc::testing::hugetlb`) and the `os` functions
//! under it, checked against what the kernel recorded: the pool counters in
//! `/sys/kernel/mm/hugepages/hugepages-*/` and `KernelPageSize` / `Private_Hugetlb` of the
//! mapping in `/proc/self/smaps`.
//!
//! The tests resize the system's pools, so they need root and a kernel with hugetlbfs; where
//! the pool cannot be set they print why and skip. Each test holds `PoolLock` (a mutex within
//! this binary and an `flock` across processes, so two runs of this binary do not fight over
//! the pools) and a `PoolGuard` per pool it resizes, which puts the old size back when the test
//! ends, panics included. Pools stay small: a few 2 MiB pages, at most one 1 GiB page.

use hugealloc::testing::hugetlb::{Backing, Cause, Chunks, HugetlbSource};
use hugealloc::testing::os::{self, HugePageSize};
use std::sync::atomic::Ordering;

mod pools;
use pools::{pool, pool_or_skip, Pool, PoolLock};

const CHUNK: usize = 2 << 20;
const GIB: usize = 1 << 30;

/// The hugetlb ranges a test still holds, unmapped when it ends (also on a panic) so that the
/// pool can shrink back: declare it after the `PoolGuard`, so it drops first.
#[derive(Default)]
struct Held(Vec<(usize, usize)>);

impl Held {
    /// Records `c` (ordinary chunks are not recorded: the chunk source keeps those).
    fn hold(&mut self, c: Chunks) -> Chunks {
        if c.backing.is_hugetlb() && !c.backing.is_reserve() {
            self.0.push((c.addr, c.nchunks * CHUNK));
        }
        c
    }

    /// Records a range (the reserve).
    fn hold_range(&mut self, addr: usize, len: usize) {
        self.0.push((addr, len));
    }

    /// Gives `c` back to `s` and forgets the ranges it covers; returns what `give_back` did.
    fn give_back(&mut self, s: &HugetlbSource, c: Chunks) -> usize {
        let (lo, hi) = (c.addr, c.addr + c.nchunks * CHUNK);
        let mut kept = Vec::new();
        for &(a, len) in &self.0 {
            // Keep the parts of held ranges outside [lo, hi).
            if a + len <= lo || a >= hi {
                kept.push((a, len));
                continue;
            }
            if a < lo {
                kept.push((a, lo - a));
            }
            if a + len > hi {
                kept.push((hi, a + len - hi));
            }
        }
        self.0 = kept;
        // SAFETY: `c` came from `s` (the test's helpers take only from it) and the test no
        // longer uses it; the ranges are dropped from the held list above.
        unsafe { s.give_back(c) }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        for &(a, len) in &self.0 {
            // SAFETY: a range the test holds (taken from the source, not given back) and no
            // longer uses.
            unsafe { os::unmap(a as *mut u8, len) };
        }
    }
}

// ---- what the kernel recorded ---------------------------------------------------------------

/// `KernelPageSize`, `Private_Hugetlb` and `Shared_Hugetlb` (kB) of the mapping holding `addr`.
#[derive(Debug, Default)]
struct Mapping {
    kernel_page_kb: u64,
    private_hugetlb_kb: u64,
    shared_hugetlb_kb: u64,
}

impl Mapping {
    /// The mapping's resident hugetlb pages, kB. smaps splits them into private and shared by
    /// the kernel's guess of whether a page is mapped by more than one process
    /// (`folio_maybe_mapped_shared`), which can say shared for a page of a private mapping that
    /// only this process maps; the tests check the sum.
    fn hugetlb_kb(&self) -> u64 {
        self.private_hugetlb_kb + self.shared_hugetlb_kb
    }
}

fn mapping_of(addr: usize) -> Mapping {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    let mut found = false;
    let mut m = Mapping::default();
    let kb = |v: &str| -> u64 { v.trim().trim_end_matches("kB").trim().parse().unwrap() };
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ') {
            if let Some((lo, hi)) = range.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    if found {
                        break;
                    }
                    inside = lo <= addr && addr < hi;
                    found = inside;
                    continue;
                }
            }
        }
        if inside {
            if let Some(v) = line.strip_prefix("KernelPageSize:") {
                m.kernel_page_kb = kb(v);
            } else if let Some(v) = line.strip_prefix("Private_Hugetlb:") {
                m.private_hugetlb_kb = kb(v);
            } else if let Some(v) = line.strip_prefix("Shared_Hugetlb:") {
                m.shared_hugetlb_kb = kb(v);
            }
        }
    }
    assert!(found, "no mapping holds {addr:#x}");
    m
}

fn fill(addr: usize, len: usize, byte: u8) {
    // SAFETY: callers pass chunks they own, mapped read-write.
    unsafe { std::ptr::write_bytes(addr as *mut u8, byte, len) };
}

fn all_equal(addr: usize, len: usize, byte: u8) -> bool {
    // SAFETY: as in `fill`.
    let s = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
    s.iter().all(|&b| b == byte)
}

fn take(s: &HugetlbSource, want: Option<HugePageSize>, n: usize) -> Chunks {
    let mut left = Chunks::NONE;
    let got = s.take(want, n, 1, &mut left);
    assert_ne!(got.addr, 0, "a take failed while ordinary memory is there");
    assert_eq!(got.addr % CHUNK, 0);
    assert_eq!(got.nchunks, n);
    got
}

// ---- tests ----------------------------------------------------------------------------------

#[test]
fn pool_counters_follow_the_kernel() {
    let size = HugePageSize::Size2M;
    let Some(_pool) = Pool::set("pool_counters_follow_the_kernel", size, 4) else {
        return;
    };
    assert_eq!(
        pool(size),
        os::HugetlbPool {
            total: 4,
            free: 4,
            reserved: 0
        }
    );
    let p = os::map_hugetlb(2 * CHUNK, size, CHUNK).expect("4 free pages, 2 asked");
    // Reserved at mmap, faulted lazily.
    assert_eq!((pool(size).free, pool(size).reserved), (4, 2));
    fill(p as usize, 1, 7);
    assert_eq!((pool(size).free, pool(size).reserved), (3, 1));
    assert_eq!(pool(size).available(), 2);
    // SAFETY: the mapping above, no longer used.
    unsafe { os::unmap(p, 2 * CHUNK) };
    assert_eq!((pool(size).free, pool(size).reserved), (4, 0));
    // More than the pool has: refused at once with ENOMEM, errno untouched.
    os::set_errno(1234);
    assert_eq!(os::map_hugetlb(5 * CHUNK, size, CHUNK), Err(libc::ENOMEM));
    assert_eq!(os::errno(), 1234);
}

#[test]
fn an_8_mib_run_from_the_2m_pool_lies_in_2m_hugetlb_pages() {
    let size = HugePageSize::Size2M;
    let Some(_pool) = Pool::set("8 MiB from the 2M pool", size, 8) else {
        return;
    };
    let s = HugetlbSource::new();
    let mut held = Held::default();
    let got = held.hold(take(&s, Some(size), 4));
    assert_eq!(got.backing, Backing::Pages2M);
    assert!(!got.dirty);
    assert!(all_equal(got.addr, 4 * CHUNK, 0), "fresh pages are zero");
    fill(got.addr, 4 * CHUNK, 0x5c);
    let m = mapping_of(got.addr);
    assert_eq!(m.kernel_page_kb, 2048, "{m:?}");
    assert_eq!(m.hugetlb_kb(), 8192, "{m:?}");
    assert_eq!(
        pool(size).free,
        4,
        "HugePages_Free fell by the 4 pages touched"
    );
    assert_eq!(s.stats.mapped_bytes.load(Ordering::Relaxed), 8 << 20);
    assert_eq!(s.stats.fallbacks.load(Ordering::Relaxed), 0);

    // A 2 MiB page is one chunk: one goes back to the pool by itself.
    let one = Chunks {
        addr: got.addr + 3 * CHUNK,
        nchunks: 1,
        ..got
    };
    assert_eq!(held.give_back(&s, one), CHUNK);
    assert_eq!(pool(size).free, 5);
    assert!(
        all_equal(got.addr, 3 * CHUNK, 0x5c),
        "the others are intact"
    );
    assert_eq!(held.give_back(&s, Chunks { nchunks: 3, ..got }), 3 * CHUNK);
    assert_eq!(pool(size).free, 8);
    assert_eq!(s.stats.mapped_bytes.load(Ordering::Relaxed), 0);
    assert_eq!(s.stats.returned_bytes.load(Ordering::Relaxed), 8 << 20);
}

#[test]
fn a_run_with_a_larger_alignment_is_aligned() {
    let size = HugePageSize::Size2M;
    let Some(_pool) = Pool::set("aligned run", size, 4) else {
        return;
    };
    let s = HugetlbSource::new();
    let mut held = Held::default();
    let mut left = Chunks::NONE;
    let got = held.hold(s.take(Some(size), 2, 8, &mut left));
    assert_eq!(got.backing, Backing::Pages2M);
    assert_eq!(got.addr % (8 * CHUNK), 0);
    assert_eq!(left.nchunks, 0);
    fill(got.addr, 2 * CHUNK, 1);
    assert_eq!(mapping_of(got.addr).kernel_page_kb, 2048);
    assert_eq!(pool(size).free, 2, "only the pages asked for were taken");
    held.give_back(&s, got);
    assert_eq!(pool(size).free, 4);
}

#[test]
fn a_chunk_from_the_1g_pool_lies_in_a_1g_page_carved_into_512_chunks() {
    let size = HugePageSize::Size1G;
    let old = os::hugetlb_pool(size).map_or(0, |p| p.total);
    let Some(_pool) = Pool::set("1G pool", size, old + 1) else {
        return;
    };
    let free_before = pool(size).free;
    let s = HugetlbSource::new();
    let mut held = Held::default();
    let mut left = Chunks::NONE;
    let got = s.take(Some(size), 1, 1, &mut left);
    held.hold(Chunks {
        nchunks: 512,
        ..got
    });
    assert_eq!(got.backing, Backing::Pages1G);
    assert_eq!(
        got.addr % GIB,
        0,
        "a 1 GiB hugetlb mapping is 1 GiB aligned"
    );
    assert_eq!(
        left,
        Chunks {
            addr: got.addr + CHUNK,
            nchunks: 511,
            backing: Backing::Pages1G,
            dirty: false
        },
        "the rest of the page goes to the same caller"
    );
    fill(got.addr, CHUNK, 3);
    fill(left.addr + 510 * CHUNK, CHUNK, 4);
    let m = mapping_of(got.addr);
    assert_eq!(m.kernel_page_kb, 1048576, "{m:?}");
    assert_eq!(m.hugetlb_kb(), 1048576, "{m:?}");
    assert_eq!(pool(size).free, free_before - 1);
    let page = Chunks {
        nchunks: 512,
        ..got
    };
    assert_eq!(held.give_back(&s, page), GIB);
    assert_eq!(pool(size).free, free_before);
}

#[test]
fn an_empty_pool_falls_back_to_ordinary_memory_counted_and_warned_once() {
    let size = HugePageSize::Size2M;
    let Some(_pool) = Pool::set("empty pool", size, 0) else {
        return;
    };
    let s = HugetlbSource::new();
    let mut seen = Vec::new();
    for n in [1, 4, 1, 2, 1] {
        let got = take(&s, Some(size), n);
        assert_eq!(got.backing, Backing::Ordinary);
        fill(got.addr, n * CHUNK, 9);
        assert_eq!(mapping_of(got.addr).kernel_page_kb, 4, "ordinary pages");
        seen.push(got);
    }
    assert_eq!(s.stats.fallbacks.load(Ordering::Relaxed), 5);
    assert_eq!(
        s.stats.fallback_bytes.load(Ordering::Relaxed),
        9 * CHUNK as u64
    );
    assert_eq!(
        Cause::from_u8(s.stats.last_cause.load(Ordering::Relaxed)),
        Cause::Empty
    );
    assert!(s.warned());
    assert_eq!(s.stats.mapped_bytes.load(Ordering::Relaxed), 0);
    // Fallback chunks are ordinary: give_back refuses them (the arena purges those itself).
    // SAFETY: chunks from `s` the test no longer uses (and which are refused anyway).
    assert_eq!(unsafe { s.give_back(seen[0]) }, 0);
}

/// Runs `f` in a forked child whose stderr goes to a pipe; returns the child's exit status
/// and what it wrote. The child allocates nothing through the test's allocator.
fn in_child_capturing_stderr(f: impl FnOnce() -> bool) -> (i32, String) {
    let mut fds = [0i32; 2];
    // SAFETY: pipe fills the two-element array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child only calls the source, writes to descriptors and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: redirect stderr into the pipe, then leave without running destructors.
        unsafe {
            libc::dup2(fds[1], 2);
            libc::_exit(if f() { 0 } else { 1 });
        }
    }
    // SAFETY: close our copy of the write end; read the rest; wait for the child.
    unsafe { libc::close(fds[1]) };
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reads into the local buffer.
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    let mut status = 0;
    // SAFETY: waits for our own child; closes our descriptor.
    unsafe {
        libc::close(fds[0]);
        libc::waitpid(pid, &mut status, 0);
    }
    (status, String::from_utf8_lossy(&out).into_owned())
}

#[test]
fn the_fallback_warning_names_the_cause_and_appears_once() {
    let size = HugePageSize::Size2M;
    let Some(_pool) = Pool::set("fallback warning", size, 0) else {
        return;
    };
    let (status, err) = in_child_capturing_stderr(|| {
        let s = HugetlbSource::new();
        let mut ok = true;
        for _ in 0..4 {
            let mut left = Chunks::NONE;
            ok &= s.take(Some(size), 1, 1, &mut left).addr != 0;
        }
        ok && s.stats.fallbacks.load(Ordering::Relaxed) == 4
    });
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    assert_eq!(err.matches("hugealloc: ").count(), 1, "one warning: {err}");
    assert!(
        err.contains("hugetlb:2M: the 2M hugetlb pool is empty"),
        "{err}"
    );
    assert!(
        err.contains("echo N > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"),
        "{err}"
    );
}

#[test]
fn a_pool_smaller_than_the_demand_serves_what_it_can_then_falls_back() {
    let size = HugePageSize::Size2M;
    let Some(_pool) = Pool::set("small pool", size, 3) else {
        return;
    };
    let s = HugetlbSource::new();
    // Four chunks at once do not fit in three pages: all four come from ordinary memory.
    let big = take(&s, Some(size), 4);
    assert_eq!(big.backing, Backing::Ordinary);
    assert_eq!(
        Cause::from_u8(s.stats.last_cause.load(Ordering::Relaxed)),
        Cause::TooSmall
    );
    let mut held = Held::default();
    let backings: Vec<Backing> = (0..5)
        .map(|_| {
            let c = held.hold(take(&s, Some(size), 1));
            fill(c.addr, CHUNK, 1);
            c.backing
        })
        .collect();
    assert_eq!(
        backings,
        [
            Backing::Pages2M,
            Backing::Pages2M,
            Backing::Pages2M,
            Backing::Ordinary,
            Backing::Ordinary
        ]
    );
    assert_eq!(s.stats.fallbacks.load(Ordering::Relaxed), 3);
    assert_eq!(pool(size).free, 0);
    assert_eq!(
        s.stats.mapped_bytes.load(Ordering::Relaxed),
        3 * CHUNK as u64
    );
}

#[test]
fn the_reserve_is_prefaulted_and_its_chunks_are_reused() {
    let size = HugePageSize::Size2M;
    let Some(_pool) = Pool::set("reserve", size, 6) else {
        return;
    };
    let s = HugetlbSource::new();
    let r = s.take_reserve(size, 8 << 20);
    let mut held = Held::default();
    if let Some((base, nchunks, _)) = s.reserve_range() {
        held.hold_range(base, nchunks * CHUNK);
    }
    assert_eq!((r.bytes, r.cause), (8 << 20, Cause::None));
    // Pre-faulted: the pages left the free pool at once; nothing is merely promised.
    assert_eq!((pool(size).free, pool(size).reserved), (2, 0));
    let (base, nchunks, rsize) = s.reserve_range().unwrap();
    assert_eq!((nchunks, rsize), (4, size));
    assert_eq!(mapping_of(base).hugetlb_kb(), 8192);
    // A second reserve changes nothing.
    assert_eq!(s.take_reserve(size, 64 << 20).bytes, 8 << 20);

    // A request of either page size takes reserve chunks first.
    let a = take(&s, Some(HugePageSize::Size1G), 1);
    assert_eq!(a.backing, Backing::Reserve2M);
    assert_eq!(a.addr, base);
    assert!(!a.dirty && all_equal(a.addr, CHUNK, 0));
    fill(a.addr, CHUNK, 0xab);
    let b = take(&s, Some(size), 3);
    assert_eq!((b.backing, b.addr), (Backing::Reserve2M, base + CHUNK));
    assert_eq!(s.stats.reserve_free_bytes.load(Ordering::Relaxed), 0);

    // Given back, a reserve chunk stays mapped (never returned piecemeal) and is reused,
    // marked dirty: it holds the old data.
    // SAFETY: `a` came from `s` and the test no longer uses it.
    assert_eq!(unsafe { s.give_back(Chunks { dirty: true, ..a }) }, 0);
    assert_eq!(pool(size).free, 2, "nothing went back to the pool");
    let again = take(&s, Some(size), 1);
    assert_eq!(
        (again.addr, again.backing, again.dirty),
        (base, Backing::Reserve2M, true)
    );
    assert!(all_equal(again.addr, CHUNK, 0xab));

    // The reserve exhausted, fresh pages come from the pool.
    let fresh = held.hold(take(&s, Some(size), 1));
    assert_eq!(fresh.backing, Backing::Pages2M);
    assert_eq!(s.stats.reserve_bytes.load(Ordering::Relaxed), 8 << 20);
    assert_eq!(s.stats.mapped_bytes.load(Ordering::Relaxed), 10 << 20);
    assert_eq!(s.stats.fallbacks.load(Ordering::Relaxed), 0);
    // The reserve is the source's for the life of the process; `held` unmaps it here so the
    // pool can shrink back when the guard restores it.
}

#[test]
fn a_reserve_larger_than_the_pool_takes_what_the_pool_has() {
    let size = HugePageSize::Size2M;
    let Some(_pool) = Pool::set("reserve shortfall", size, 2) else {
        return;
    };
    let s = HugetlbSource::new();
    let r = s.take_reserve(size, 8 << 20);
    let mut held = Held::default();
    if let Some((base, nchunks, _)) = s.reserve_range() {
        held.hold_range(base, nchunks * CHUNK);
    }
    assert_eq!((r.bytes, r.cause), (4 << 20, Cause::TooSmall));
    assert_eq!(pool(size).free, 0);
    let (_, nchunks, _) = s.reserve_range().unwrap();
    assert_eq!(nchunks, 2);
}

/// Forks; the child checks `addr..addr+len` holds `old`, writes `new` and checks it, and
/// exits 0 on success. Returns the wait status.
fn fork_and_rewrite(addr: usize, len: usize, old: u8, new: u8) -> i32 {
    // SAFETY: the child touches only the given range and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let ok_read = all_equal(addr, len, old);
        fill(addr, len, new);
        let ok_write = all_equal(addr, len, new);
        // SAFETY: leaves the child at once.
        unsafe { libc::_exit(if ok_read && ok_write { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    status
}

#[test]
fn a_fork_child_reads_and_writes_inherited_hugetlb_memory() {
    let size = HugePageSize::Size2M;
    let Some(_pool) = Pool::set("fork", size, 6) else {
        return;
    };
    let s = HugetlbSource::new();
    let mut held = Held::default();
    let got = held.hold(take(&s, Some(size), 2));
    assert_eq!(got.backing, Backing::Pages2M);
    fill(got.addr, 2 * CHUNK, 0x11);
    // Free pages in the pool for the child's copy-on-write copies: it may read and write.
    let status = fork_and_rewrite(got.addr, 2 * CHUNK, 0x11, 0x22);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x}"
    );
    assert!(
        all_equal(got.addr, 2 * CHUNK, 0x11),
        "private mapping: the child's writes stay in the child"
    );
    fill(got.addr, 2 * CHUNK, 0x33);
    assert_eq!(
        pool(size).free,
        4,
        "the child's copies went back to the pool"
    );
    held.give_back(&s, got);
}

#[test]
fn a_fork_child_that_writes_with_the_pool_exhausted_gets_sigbus() {
    // The documented hazard of private hugetlb mappings (docs/hugetlb.md, "fork"): the child
    // reads inherited memory freely, but its first write to a page must copy it, and with no
    // free page in the pool the kernel sends SIGBUS. This test pins that behaviour down.
    let size = HugePageSize::Size2M;
    let Some(_pool) = Pool::set("fork with the pool exhausted", size, 1) else {
        return;
    };
    let s = HugetlbSource::new();
    let mut held = Held::default();
    let got = held.hold(take(&s, Some(size), 1));
    assert_eq!(got.backing, Backing::Pages2M);
    fill(got.addr, CHUNK, 0x44);
    assert_eq!(pool(size).free, 0);
    let status = fork_and_rewrite(got.addr, CHUNK, 0x44, 0x55);
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGBUS,
        "child status {status:#x}"
    );
    assert!(all_equal(got.addr, CHUNK, 0x44), "the parent is unharmed");
    held.give_back(&s, got);
}

// ---- the options, end to end ----------------------------------------------------------------

const OPT_CHILD: &str = "HUGEALLOC_HUGETLB_TEST_CHILD";

#[test]
fn the_hugetlb_options_read_back_through_ctl() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "opt_child", "--ignored", "--nocapture"])
        .env(OPT_CHILD, "1")
        .env(
            "HUGEALLOC_CONF",
            "hugetlb:1G,arena.3.hugetlb:off,arena.5.hugetlb:2M,hugetlb_reserve:64M",
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("opt values checked"), "{stdout}");
}

#[test]
#[ignore = "a helper: the_hugetlb_options_read_back_through_ctl runs it in a child process"]
fn opt_child() {
    use hugealloc::ctl::{self, CtlError, CtlValue};
    if std::env::var(OPT_CHILD).is_err() {
        return;
    }
    let s = |name: &str| match ctl::read(name) {
        Ok(CtlValue::Str(v)) => v.to_str().unwrap().to_string(),
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(s("opt.hugetlb"), "1G");
    assert_eq!(s("opt.arena.3.hugetlb"), "off");
    assert_eq!(s("opt.arena.5.hugetlb"), "2M");
    assert_eq!(s("opt.arena.4.hugetlb"), "inherit");
    assert!(matches!(
        ctl::read("opt.hugetlb_reserve"),
        Ok(CtlValue::Size(n)) if n == 64 << 20
    ));
    assert!(matches!(
        ctl::read("opt.arena.64.hugetlb"),
        Err(CtlError::NotFound)
    ));
    println!("opt values checked");
}

#[test]
fn the_reserve_follows_the_options() {
    let size = HugePageSize::Size2M;
    let Some(_pool) = Pool::set("reserve from the options", size, 3) else {
        return;
    };
    // In a child: the process's own source is taken once, and the child's exit gives the
    // reserve back to the pool.
    let (status, err) = in_child_capturing_stderr(|| {
        let mut opts = hugealloc::testing::config::Options::DEFAULT;
        opts.apply_with(
            b"hugetlb:2M,hugetlb_reserve:4M",
            hugealloc::testing::config::Source::Api,
            &mut |_| {},
        );
        let got = hugealloc::testing::hugetlb::start(&opts);
        let range = hugealloc::testing::hugetlb::HUGETLB.reserve_range();
        got.bytes == 4 << 20
            && got.cause == Cause::None
            && matches!(range, Some((_, 2, HugePageSize::Size2M)))
            && os::hugetlb_pool(size).is_some_and(|p| p.free == 1)
    });
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x}: {err}"
    );
    assert_eq!(
        pool(size).free,
        3,
        "the child's reserve went back at its exit"
    );
}

#[test]
fn wipe_on_fork_is_refused_on_hugetlb_memory() {
    // Why hugealloc keeps private hugetlb mappings across fork (docs/hugetlb.md, "fork"): the
    // kernel refuses MADV_WIPEONFORK on hugetlb ranges, and MADV_DONTFORK would leave the child
    // without its inherited heap.
    let size = HugePageSize::Size2M;
    let Some(_pool) = Pool::set("wipe on fork", size, 1) else {
        return;
    };
    let p = os::map_hugetlb(CHUNK, size, CHUNK).expect("one free page");
    let mut held = Held::default();
    held.hold_range(p as usize, CHUNK);
    // SAFETY: madvise on our own mapping; errno read right after.
    let (rc, err) = unsafe {
        let rc = libc::madvise(p.cast(), CHUNK, libc::MADV_WIPEONFORK);
        (rc, *libc::__errno_location())
    };
    assert_eq!((rc, err), (-1, libc::EINVAL));
}

#[test]
fn a_parent_write_with_the_pool_exhausted_takes_the_page_from_the_child() {
    // The other half of the hazard: the parent owns the mapping's reservation, so when its own
    // copy-on-write finds the pool empty, the kernel unmaps the page from the child instead of
    // failing the parent; the child dies at its next touch, even a read.
    let size = HugePageSize::Size2M;
    let Some(_pool) = Pool::set("parent write with the pool exhausted", size, 1) else {
        return;
    };
    let s = HugetlbSource::new();
    let mut held = Held::default();
    let got = held.hold(take(&s, Some(size), 1));
    assert_eq!(got.backing, Backing::Pages2M);
    fill(got.addr, CHUNK, 0x66);
    let mut fds = [0i32; 2];
    // SAFETY: pipe fills the array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child waits for one byte, reads the inherited memory and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let mut b = 0u8;
        // SAFETY: reads one byte into a local; then leaves at once.
        unsafe {
            libc::read(fds[0], (&mut b as *mut u8).cast(), 1);
            libc::_exit(if all_equal(got.addr, CHUNK, 0x66) {
                0
            } else {
                1
            });
        }
    }
    fill(got.addr, CHUNK, 0x77);
    let mut status = 0;
    // SAFETY: wake the child, wait for it, close our descriptors.
    unsafe {
        libc::write(fds[1], [1u8].as_ptr().cast(), 1);
        libc::waitpid(pid, &mut status, 0);
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    // SIGBUS on 6.18 (the kernel's reservation notes speak of SIGKILL on older ones).
    assert!(
        libc::WIFSIGNALED(status) && matches!(libc::WTERMSIG(status), libc::SIGBUS | libc::SIGKILL),
        "child status {status:#x}"
    );
    assert!(
        all_equal(got.addr, CHUNK, 0x77),
        "the parent wrote without a fault"
    );
    held.give_back(&s, got);
}

#[test]
fn the_fork_headroom_check_compares_mapped_pages_with_the_pool() {
    let size = HugePageSize::Size2M;
    let Some(_pool) = Pool::set("fork headroom", size, 4) else {
        return;
    };
    let s = HugetlbSource::new();
    assert!(s.fork_headroom(), "nothing mapped, nothing needed");
    let mut held = Held::default();
    let a = held.hold(take(&s, Some(size), 2));
    fill(a.addr, 2 * CHUNK, 1);
    assert_eq!(s.stats.mapped_by_size[0].load(Ordering::Relaxed), 4 << 20);
    assert!(s.fork_headroom(), "2 mapped, 2 available");
    let b = held.hold(take(&s, Some(size), 1));
    assert_eq!(b.backing, Backing::Pages2M);
    let (status, err) = in_child_capturing_stderr(|| !s.fork_headroom() && !s.fork_headroom());
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x}: {err}"
    );
    assert_eq!(err.matches("hugealloc: ").count(), 1, "warned once: {err}");
    assert!(
        err.contains("fork with 3 hugetlb pages of 2M mapped and 1 available in the pool"),
        "{err}"
    );
    held.give_back(&s, b);
    assert!(s.fork_headroom(), "2 mapped, 2 available again");
    assert_eq!(s.stats.mapped_by_size[0].load(Ordering::Relaxed), 4 << 20);
}

#[test]
fn the_probe_says_whether_a_page_can_be_had() {
    let _lock = PoolLock::take();
    let size = HugePageSize::Size2M;
    {
        let Some(_pool) = pool_or_skip("probe, empty pool", size, 0) else {
            return;
        };
        assert_eq!(hugealloc::testing::hugetlb::probe(size), Err(Cause::Empty));
    }
    let Some(_pool) = pool_or_skip("probe, one page", size, 1) else {
        return;
    };
    assert_eq!(hugealloc::testing::hugetlb::probe(size), Ok(()));
    assert_eq!(pool(size).free, 1, "the probe gave its page back");
}

// ---- arenas drawing their chunks from the pools (issue 14, part 2) ---------------------------

/// An arena of a test's own with a page source, which purges only when the test says
/// (`decay`): then every free dirty extent goes.
struct TestArena(hugealloc::Arena);

impl TestArena {
    fn new(source: hugealloc::Hugetlb) -> TestArena {
        TestArena::with_thp(hugealloc::Thp::Default, source)
    }

    fn with_thp(thp: hugealloc::Thp, source: hugealloc::Hugetlb) -> TestArena {
        let a = hugealloc::Arena::with_hugetlb(thp, source).expect("an arena");
        assert_eq!(a.hugetlb(), source);
        hugealloc::testing::registry::arena(a.index()).set_dirty_decay_ms(-1);
        TestArena(a)
    }

    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len, 64).unwrap()
    }

    /// A block of `len` bytes, filled with `byte`.
    fn alloc(&self, len: usize, byte: u8) -> usize {
        use std::alloc::GlobalAlloc;
        // SAFETY: len is not zero.
        let p = unsafe { self.0.alloc(Self::layout(len)) } as usize;
        assert_ne!(p, 0, "an allocation of {len} bytes failed");
        fill(p, len, byte);
        p
    }

    fn free(&self, p: usize, len: usize) {
        use std::alloc::GlobalAlloc;
        // SAFETY: p is a live block of this arena allocated with this layout.
        unsafe { self.0.dealloc(p as *mut u8, Self::layout(len)) };
    }

    /// `p` (a block of `len` bytes) resized to `new_len` bytes.
    fn realloc(&self, p: usize, len: usize, new_len: usize) -> usize {
        use std::alloc::GlobalAlloc;
        // SAFETY: p is a live block of this arena allocated with this layout; new_len is not
        // zero.
        let q = unsafe { self.0.realloc(p as *mut u8, Self::layout(len), new_len) } as usize;
        assert_ne!(q, 0, "a realloc to {new_len} bytes failed");
        q
    }

    /// A block of `len` bytes, as the arena hands it out (not written).
    fn alloc_unfilled(&self, len: usize) -> usize {
        use std::alloc::GlobalAlloc;
        // SAFETY: len is not zero.
        let p = unsafe { self.0.alloc(Self::layout(len)) } as usize;
        assert_ne!(p, 0, "an allocation of {len} bytes failed");
        p
    }

    /// `arena.<i>.purge`: every free dirty extent of the arena goes now.
    fn purge(&self) {
        hugealloc::ctl::act(&format!("arena.{}.purge", self.0.index())).unwrap();
    }

    /// A decay pass now with a decay time of 0: every free dirty extent goes.
    fn decay(&self) {
        let a = hugealloc::testing::registry::arena(self.0.index());
        a.set_dirty_decay_ms(0);
        a.decay_now();
        a.set_dirty_decay_ms(-1);
    }

    fn stats(&self) -> hugealloc::testing::arena::ArenaStats {
        hugealloc::testing::registry::arena(self.0.index())
            .snapshot()
            .arena
    }
}

#[test]
fn an_8_mib_block_of_a_2m_arena_lies_in_2m_pages_that_go_back_whole() {
    let size = HugePageSize::Size2M;
    let Some(pool) = Pool::set("8 MiB block, 2M arena", size, 8) else {
        return;
    };
    let a = TestArena::new(hugealloc::Hugetlb::Pages2M);
    let p = a.alloc(8 << 20, 0x5c);
    let m = mapping_of(p);
    assert_eq!(m.kernel_page_kb, 2048, "{m:?}");
    assert_eq!(m.hugetlb_kb(), 8192, "{m:?}");
    assert_eq!(pool.free(), 4, "HugePages_Free fell by the 4 pages touched");
    let s = a.stats();
    assert_eq!(s.hugetlb_bytes, 8 << 20);
    assert_eq!(s.hugetlb_free_bytes, 0);
    assert_eq!(s.hugetlb_fallbacks, 0);
    let stat = |name: &str| -> u64 {
        let name = format!("stats.arenas.{}.hugetlb.{name}", a.0.index());
        match hugealloc::ctl::read(&name) {
            Ok(hugealloc::CtlValue::Size(n)) => n as u64,
            Ok(hugealloc::CtlValue::U64(n)) => n,
            other => panic!("{name}: {other:?}"),
        }
    };
    assert_eq!(
        [
            stat("mapped"),
            stat("active"),
            stat("reserved"),
            stat("fallbacks")
        ],
        [8 << 20, 8 << 20, 0, 0]
    );
    a.free(p, 8 << 20);
    assert_eq!(
        a.stats().hugetlb_free_bytes,
        8 << 20,
        "free, not yet decayed"
    );
    assert_eq!(pool.free(), 4);
    a.decay();
    assert_eq!(pool.free(), 8, "decay gave the free pages back to the pool");
    let s = a.stats();
    assert_eq!((s.hugetlb_bytes, s.hugetlb_free_bytes), (0, 0));
    assert_eq!(s.hugetlb_returned_bytes, 8 << 20);
    assert_eq!(s.chunks, 0, "the arena holds no chunk any more");
}

#[test]
fn a_1g_arena_carves_a_page_and_gives_it_back_once_all_its_chunks_are_free() {
    let size = HugePageSize::Size1G;
    let old = os::hugetlb_pool(size).map_or(0, |p| p.total);
    let Some(pool) = Pool::set("1G arena", size, old + 1) else {
        return;
    };
    let free_before = pool.free();
    let a = TestArena::new(hugealloc::Hugetlb::Pages1G);
    let p = a.alloc(8 << 20, 1);
    let q = a.alloc(4 << 20, 2);
    for x in [p, q] {
        let m = mapping_of(x);
        assert_eq!(m.kernel_page_kb, 1048576, "{m:?}");
    }
    assert_eq!(p / GIB, q / GIB, "both blocks carved from one page");
    assert_eq!(pool.free(), free_before - 1);
    assert_eq!(a.stats().hugetlb_bytes, GIB as u64);
    // Part of the page is free, part in use: nothing can go back.
    a.free(p, 8 << 20);
    a.decay();
    assert_eq!(
        pool.free(),
        free_before - 1,
        "the page is still partly in use"
    );
    // The kept chunks are reused, and zeroed where asked.
    {
        use std::alloc::GlobalAlloc;
        let l = TestArena::layout(8 << 20);
        // SAFETY: the size is not zero.
        let z = unsafe { a.0.alloc_zeroed(l) } as usize;
        assert_eq!(z / GIB, p / GIB, "the page's free chunks are reused");
        assert!(
            all_equal(z, 8 << 20, 0),
            "a kept chunk is zeroed for alloc_zeroed"
        );
        a.free(z, 8 << 20);
    }
    a.free(q, 4 << 20);
    a.decay();
    assert_eq!(pool.free(), free_before, "the whole page went back");
    let s = a.stats();
    assert_eq!((s.hugetlb_bytes, s.chunks), (0, 0));
    assert_eq!(s.hugetlb_returned_bytes, GIB as u64);
}

#[test]
fn a_2m_arena_with_an_empty_pool_serves_every_allocation_and_counts_the_fallbacks() {
    let size = HugePageSize::Size2M;
    let Some(_pool) = Pool::set("empty pool, arena", size, 0) else {
        return;
    };
    let global_before = hugealloc::testing::hugetlb::HUGETLB
        .stats
        .fallbacks
        .load(Ordering::Relaxed);
    let a = TestArena::new(hugealloc::Hugetlb::Pages2M);
    let mut blocks = Vec::new();
    for i in 0..600usize {
        let len = [24, 3000, 100_000, 3 << 20][i % 4];
        blocks.push((a.alloc(len, i as u8), len));
    }
    let s = a.stats();
    assert_eq!(s.hugetlb_bytes, 0);
    assert!(s.hugetlb_fallbacks >= 150, "{s:?}");
    assert_eq!(
        s.hugetlb_fallbacks,
        hugealloc::testing::hugetlb::HUGETLB
            .stats
            .fallbacks
            .load(Ordering::Relaxed)
            - global_before,
        "each fallback of the arena is one of the source"
    );
    assert_eq!(mapping_of(blocks[3].0).kernel_page_kb, 4);
    for (p, len) in blocks {
        a.free(p, len);
    }
}

#[test]
fn a_2m_arena_with_a_pool_too_small_takes_what_there_is_then_falls_back() {
    let size = HugePageSize::Size2M;
    let Some(pool) = Pool::set("small pool, arena", size, 3) else {
        return;
    };
    let a = TestArena::new(hugealloc::Hugetlb::Pages2M);
    let blocks: Vec<usize> = (0..5).map(|i| a.alloc(CHUNK, i)).collect();
    let pages: Vec<u64> = blocks
        .iter()
        .map(|&p| mapping_of(p).kernel_page_kb)
        .collect();
    assert_eq!(pages, [2048, 2048, 2048, 4, 4]);
    let s = a.stats();
    assert_eq!(s.hugetlb_fallbacks, 2);
    assert_eq!(s.hugetlb_bytes, 3 * CHUNK as u64);
    assert_eq!(pool.free(), 0);
    for p in blocks {
        a.free(p, CHUNK);
    }
    a.decay();
    assert_eq!(pool.free(), 3);
    assert_eq!(a.stats().hugetlb_bytes, 0);
}

#[test]
fn a_fork_child_uses_the_blocks_of_a_hugetlb_arena() {
    let size = HugePageSize::Size2M;
    let Some(pool) = Pool::set("fork, arena", size, 6) else {
        return;
    };
    let a = TestArena::new(hugealloc::Hugetlb::Pages2M);
    let p = a.alloc(4 << 20, 0x11);
    assert_eq!(mapping_of(p).kernel_page_kb, 2048);
    let status = fork_and_rewrite(p, 4 << 20, 0x11, 0x22);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x}"
    );
    assert!(
        all_equal(p, 4 << 20, 0x11),
        "the child's writes stay in the child"
    );
    assert_eq!(pool.free(), 4, "the child's copies went back to the pool");
    a.free(p, 4 << 20);
    a.decay();
    assert_eq!(pool.free(), 6);
}

/// Runs helper test `name` (ignored, it does nothing unless asked) in a process of its own,
/// with `conf` as `HUGEALLOC_CONF`: a fresh allocator, whose once-per-process warnings and
/// pages are its own. Returns its stdout and stderr after checking that it passed.
fn run_child(name: &str, conf: &str) -> (String, String) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(OPT_CHILD, name)
        .env("HUGEALLOC_CONF", conf)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{name}: {stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("{name} checked")),
        "{name}: {stdout}\n{stderr}"
    );
    (stdout, stderr)
}

/// Whether this process is the child `run_child` started for helper `name`.
fn is_child(name: &str) -> bool {
    std::env::var(OPT_CHILD).is_ok_and(|v| v == name)
}

#[test]
fn two_arenas_with_different_page_sources_keep_their_page_sizes() {
    let size = HugePageSize::Size2M;
    let Some(pool) = Pool::set("two arenas", size, 4) else {
        return;
    };
    run_child("child_two_arenas", "");
    assert_eq!(pool.free(), 4, "the child's pages went back at its exit");
}

#[test]
#[ignore = "a helper: two_arenas_with_different_page_sources_keep_their_page_sizes runs it"]
fn child_two_arenas() {
    if !is_child("child_two_arenas") {
        return;
    }
    let free = || pool(HugePageSize::Size2M).free;
    let h = TestArena::new(hugealloc::Hugetlb::Pages2M);
    let t = TestArena::with_thp(hugealloc::Thp::Never, hugealloc::Hugetlb::Off);
    let ph = h.alloc(4 << 20, 1);
    let pt = t.alloc(4 << 20, 2);
    let small_h = h.alloc(1000, 3);
    let small_t = t.alloc(1000, 4);
    assert_eq!(mapping_of(ph).kernel_page_kb, 2048);
    assert_eq!(mapping_of(small_h).kernel_page_kb, 2048, "page chunks too");
    for p in [pt, small_t] {
        let m = mapping_of(p);
        assert_eq!(m.kernel_page_kb, 4, "{m:?}");
        assert_eq!(m.hugetlb_kb(), 0, "{m:?}");
    }
    assert_eq!(t.stats().hugetlb_bytes, 0);
    assert_eq!(h.stats().hugetlb_bytes, 3 * CHUNK as u64);
    assert_eq!(free(), 1);
    h.free(ph, 4 << 20);
    t.free(pt, 4 << 20);
    h.decay();
    assert_eq!(
        h.stats().hugetlb_bytes,
        CHUNK as u64,
        "the page chunk stays"
    );
    assert_eq!(free(), 3);
    println!("child_two_arenas checked");
}

#[test]
fn an_empty_pool_under_hugetlb_2m_warns_once_and_every_allocation_succeeds() {
    let size = HugePageSize::Size2M;
    let Some(_pool) = Pool::set("empty pool, warned once", size, 0) else {
        return;
    };
    let (_, err) = run_child("child_empty_pool", "hugetlb:2M");
    assert_eq!(err.matches("hugealloc: ").count(), 1, "warned once: {err}");
    assert!(
        err.contains("hugealloc: hugetlb:2M: the 2M hugetlb pool is empty (nr_hugepages 0)"),
        "{err}"
    );
}

#[test]
#[ignore = "a helper: an_empty_pool_under_hugetlb_2m_warns_once_and_every_allocation_succeeds"]
fn child_empty_pool() {
    if !is_child("child_empty_pool") {
        return;
    }
    let mut blocks = Vec::new();
    for i in 0..2000usize {
        let len = [24, 3000, 100_000, 3 << 20, 9 << 20][i % 5];
        let p = hugealloc::testing::alloc::alloc(len, 16);
        assert!(!p.is_null(), "alloc({len}) failed");
        fill(p as usize, len.min(4096), 1);
        blocks.push(p);
    }
    let a0 = hugealloc::Arena::from_index(0).unwrap();
    assert_eq!(a0.hugetlb(), hugealloc::Hugetlb::Pages2M);
    let mut fallbacks = 0;
    for i in 0..hugealloc::testing::registry::narenas() {
        let s = hugealloc::testing::registry::arena(i).snapshot().arena;
        assert_eq!(s.hugetlb_bytes, 0);
        fallbacks += s.hugetlb_fallbacks;
    }
    assert!(fallbacks >= 400, "{fallbacks}");
    assert_eq!(
        fallbacks,
        hugealloc::testing::hugetlb::HUGETLB
            .stats
            .fallbacks
            .load(Ordering::Relaxed),
        "the arenas' fallbacks are the source's"
    );
    for p in blocks {
        // SAFETY: p is a live block.
        unsafe { hugealloc::testing::alloc::free(p) };
    }
    println!("child_empty_pool checked");
}

#[test]
fn a_fork_with_the_pool_short_of_headroom_warns_once() {
    let size = HugePageSize::Size2M;
    let Some(_pool) = Pool::set("fork headroom, arena", size, 2) else {
        return;
    };
    let (_, err) = run_child("child_fork_headroom", "");
    assert_eq!(err.matches("hugealloc: ").count(), 1, "warned once: {err}");
    assert!(
        err.contains("fork with 2 hugetlb pages of 2M mapped and 0 available in the pool"),
        "{err}"
    );
}

#[test]
#[ignore = "a helper: a_fork_with_the_pool_short_of_headroom_warns_once runs it"]
fn child_fork_headroom() {
    if !is_child("child_fork_headroom") {
        return;
    }
    let a = TestArena::new(hugealloc::Hugetlb::Pages2M);
    let p = a.alloc(4 << 20, 0x11);
    assert_eq!(pool(HugePageSize::Size2M).free, 0);
    // The prepare handler checks the headroom at each fork; the children exit at once.
    for _ in 0..2 {
        // SAFETY: the child only `_exit`s.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: leaves at once.
            unsafe { libc::_exit(0) };
        }
        let mut st = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
    }
    a.free(p, 4 << 20);
    println!("child_fork_headroom checked");
}

#[test]
fn an_arenas_page_source_reads_and_writes_through_ctl_until_it_holds_chunks() {
    use hugealloc::ctl::{self, CtlError, CtlValue};
    // Its fallbacks count in the source's figures, which other tests compare.
    let _lock = PoolLock::take();
    let a = hugealloc::Arena::new(hugealloc::Thp::Default).unwrap();
    let name = format!("arena.{}.hugetlb", a.index());
    let read = || match ctl::read(&name) {
        Ok(CtlValue::Str(s)) => s.to_str().unwrap().to_string(),
        other => panic!("{other:?}"),
    };
    assert_eq!(read(), "off");
    assert!(ctl::write(&name, CtlValue::Str(c"2M")).is_ok());
    assert_eq!(read(), "2M");
    assert_eq!(a.hugetlb(), hugealloc::Hugetlb::Pages2M);
    assert_eq!(
        ctl::write(&name, CtlValue::Str(c"4K")),
        Err(CtlError::BadValue)
    );
    let t = TestArena(a);
    let p = t.alloc(CHUNK, 1);
    assert_eq!(
        ctl::write(&name, CtlValue::Str(c"1G")),
        Err(CtlError::ReadOnly),
        "the arena holds chunks now"
    );
    assert!(!a.set_hugetlb(hugealloc::Hugetlb::Off));
    assert_eq!(read(), "2M");
    t.free(p, CHUNK);
    t.decay();
    assert!(ctl::read("arena.100000.hugetlb").is_err());
}

/// Test binary `name` of this package, built beside this one (`cargo test` builds every test
/// binary before it runs any): the newest `<name>-<hash>` in this binary's folder.
fn sibling_test_binary(name: &str) -> Option<std::path::PathBuf> {
    let me = std::env::current_exe().ok()?;
    let prefix = format!("{name}-");
    std::fs::read_dir(me.parent()?)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| {
            let f = e.file_name().to_string_lossy().into_owned();
            f.strip_prefix(&prefix)
                .is_some_and(|h| h.chars().all(|c| c.is_ascii_hexdigit()))
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max()
        .map(|(_, p)| p)
}

#[test]
fn the_proptest_model_and_thread_churn_run_on_hugetlb_arenas() {
    // The model (`tests/model.rs`) and the churn test (`tests/churn.rs`) as they are, in their
    // own processes, with every arena drawing from a 2M pool of 48 pages: blocks up to 64 MiB
    // find it short at times, so both the pool and the fallback serve.
    let Some(_pool) = Pool::set("model and churn", HugePageSize::Size2M, 48) else {
        return;
    };
    for name in ["model", "churn"] {
        let Some(exe) = sibling_test_binary(name) else {
            eprintln!(
                "{name} on hugetlb: skipped: build it first \
                 (cargo test -p hugealloc --release --test {name} --no-run)"
            );
            continue;
        };
        let out = std::process::Command::new(&exe)
            .arg("--test-threads=1")
            .env(
                "HUGEALLOC_CONF",
                "hugetlb:2M,stats_print:true,stats_print_opts:f",
            )
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{name}: {stdout}\n{stderr}");
        assert!(stdout.contains("test result: ok"), "{name}: {stdout}");
        // The process's own merged figures at exit: pages were had from the pool.
        let figure = |key: &str| -> u64 {
            let key = format!("hugealloc: stats.arenas.4096.hugetlb.{key}: ");
            let line = stderr.lines().find(|l| l.starts_with(&key));
            line.map_or_else(
                || panic!("{name}: no {key} in {stderr}"),
                |l| l[key.len()..].trim().parse().unwrap(),
            )
        };
        let used = figure("mapped") + figure("returned");
        assert!(used > 0, "{name} got no hugetlb page: {stderr}");
    }
}

// ---- what hugetlb memory never gets, what collapse never takes, the reserve under load -------

/// The advice kinds `watched_advice` counts, in its order (for messages).
const ADVICE_KINDS: &str =
    "[MADV_HUGEPAGE, MADV_NOHUGEPAGE, MADV_DONTNEED, MADV_FREE, MADV_COLLAPSE]";

#[test]
fn hugetlb_chunks_get_no_advice_of_any_kind() {
    // A 2 MiB hugetlb page cannot be partly purged, must not be `MADV_DONTNEED`ed whole (that
    // would zero a reserve chunk that is to be reused), and takes no THP advice. Counted by
    // `os` for the chunks' range (`testing::os::watch_advice`), in a child: the range's
    // addresses are nobody else's there.
    let size = HugePageSize::Size2M;
    let Some(pool) = Pool::set("no advice", size, 12) else {
        return;
    };
    run_child("child_no_advice", "thp:always,hugetlb_reserve:8M");
    assert_eq!(pool.free(), 12, "the child's pages went back at its exit");
}

#[test]
#[ignore = "a helper: hugetlb_chunks_get_no_advice_of_any_kind runs it"]
fn child_no_advice() {
    use hugealloc::testing::os::{watch_advice, watched_advice};
    if !is_child("child_no_advice") {
        return;
    }
    // thp:always: every ordinary chunk of this arena would be advised MADV_HUGEPAGE.
    let a = TestArena::with_thp(hugealloc::Thp::Always, hugealloc::Hugetlb::Pages2M);
    let (base, n, _) = hugealloc::testing::hugetlb::HUGETLB
        .reserve_range()
        .expect("the 8 MiB reserve");
    assert_eq!(n, 4);
    let reserve = base..base + n * CHUNK;
    // The reserve's range is known before any chunk of it is handed out: advice at take time
    // is watched too.
    watch_advice(base, n * CHUNK);
    let big = a.alloc(CHUNK, 0xa5);
    let runs: Vec<usize> = (0..16).map(|i| a.alloc(64 << 10, i as u8)).collect();
    for &p in runs.iter().chain([&big]) {
        assert!(
            reserve.contains(&p),
            "{p:#x} is not a reserve chunk: the test would test nothing"
        );
    }
    // Free page runs inside a chunk whose other runs are in use (what a subrelease would
    // `MADV_DONTNEED`), and a whole free chunk; then both kinds of purge.
    for &p in runs.iter().step_by(2) {
        a.free(p, 64 << 10);
    }
    a.free(big, CHUNK);
    a.purge();
    a.decay();
    assert_eq!(
        watched_advice(),
        [0; 5],
        "advice given to reserve chunks, {ADVICE_KINDS}"
    );
    // The chunk went back to the reserve as it was: taken again, it still holds what was
    // written (a `MADV_DONTNEED`ed hugetlb page reads zeros).
    let again = a.alloc_unfilled(CHUNK);
    assert_eq!(again, big, "the free reserve chunk is reused");
    assert!(
        all_equal(again, CHUNK, 0xa5),
        "the reserve chunk was zeroed"
    );
    for (i, &p) in runs.iter().enumerate().skip(1).step_by(2) {
        assert!(all_equal(p, 64 << 10, i as u8), "a live page run changed");
    }
    // A huge block grown in place over the next free reserve chunk (the run extension of a
    // huge block, which advises the chunks it takes on an ordinary arena) takes none either.
    // (`again` and the page runs' chunk hold the reserve's first two chunks: the pair is the
    // last two.)
    let two = a.alloc(2 * CHUNK, 0x11);
    assert!(reserve.contains(&two) && reserve.contains(&(two + CHUNK)));
    a.free(two, 2 * CHUNK);
    let one = a.alloc(CHUNK, 0x12);
    assert_eq!(one, two, "the first chunk of the freed pair is reused");
    let grown = a.realloc(one, CHUNK, 2 * CHUNK);
    assert_eq!(
        grown, one,
        "the block did not grow in place: the test would test nothing"
    );
    assert!(
        all_equal(grown, CHUNK, 0x12),
        "the grown block lost its contents"
    );
    assert_eq!(
        watched_advice(),
        [0; 5],
        "advice given to reserve chunks a huge block grew over, {ADVICE_KINDS}"
    );
    a.free(grown, 2 * CHUNK);
    a.free(again, CHUNK);
    // Fresh pages (the reserve is in use now): watched from their allocation to their return.
    let fresh = a.alloc(8 << 20, 0x3c);
    assert!(!reserve.contains(&fresh));
    assert_eq!(mapping_of(fresh).kernel_page_kb, 2048);
    watch_advice(fresh, 8 << 20);
    let tail = a.alloc(100 << 10, 0x3d);
    a.free(fresh, 8 << 20);
    a.purge();
    a.decay();
    assert_eq!(
        watched_advice(),
        [0; 5],
        "advice given to fresh hugetlb pages, {ADVICE_KINDS}"
    );
    a.free(tail, 100 << 10);
    watch_advice(0, 0);
    println!("child_no_advice checked");
}

/// Whether THP is unavailable here, and why.
fn thp_unavailable() -> Option<&'static str> {
    match std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled") {
        Err(_) => Some("/sys/kernel/mm/transparent_hugepage/enabled is missing"),
        Ok(s) if s.contains("[never]") => Some("THP is disabled on this system (never)"),
        Ok(_) => None,
    }
}

#[test]
fn collapse_never_queues_a_hugetlb_chunk() {
    if let Some(why) = thp_unavailable() {
        eprintln!("collapse of hugetlb chunks: skipped: {why}");
        return;
    }
    let Some(_pool) = Pool::set("thp:defer on hugetlb", HugePageSize::Size2M, 4) else {
        return;
    };
    // In a child: `thp:defer` starts the background thread, which this binary's other tests
    // do not expect.
    run_child("child_defer", "");
}

#[test]
#[ignore = "a helper: collapse_never_queues_a_hugetlb_chunk runs it"]
fn child_defer() {
    if !is_child("child_defer") {
        return;
    }
    let queued = |a: &TestArena| -> u64 {
        let name = format!("stats.arenas.{}.thp.collapse.queued", a.0.index());
        match hugealloc::ctl::read(&name) {
            Ok(hugealloc::CtlValue::U64(n)) => n,
            other => panic!("{name}: {other:?}"),
        }
    };
    let h = TestArena::with_thp(hugealloc::Thp::Defer, hugealloc::Hugetlb::Pages2M);
    let o = TestArena::with_thp(hugealloc::Thp::Defer, hugealloc::Hugetlb::Off);
    // Big touched blocks (`alloc` fills them), past thp_threshold.
    let ph = h.alloc(8 << 20, 1);
    let po = o.alloc(8 << 20, 2);
    assert_eq!(
        mapping_of(ph).kernel_page_kb,
        2048,
        "the block is in hugetlb pages (else the test would test nothing)"
    );
    assert_eq!(queued(&o), 1, "the ordinary defer arena queues its block");
    assert_eq!(
        queued(&h),
        0,
        "a hugetlb chunk was queued for MADV_COLLAPSE"
    );
    h.free(ph, 8 << 20);
    o.free(po, 8 << 20);
    h.decay();
    println!("child_defer checked");
}

#[test]
fn the_reserve_serves_a_churning_workload_whole() {
    // `hugetlb_reserve:8M` with `hugetlb:2M` through thread churn with blocks of every kind,
    // purges between rounds: the reserve's 4 pages stay mapped and in the process (never
    // returned piecemeal, never zeroed), the pool serves the rest (no fallback), and at the
    // end every reserve chunk is back in the reserve and every fresh page back in the pool.
    let size = HugePageSize::Size2M;
    let Some(pool) = Pool::set("reserve under churn", size, 4 + 96) else {
        return;
    };
    run_child("child_reserve_churn", "hugetlb:2M,hugetlb_reserve:8M");
    assert_eq!(pool.free(), 100, "the child's pages went back at its exit");
}

#[test]
#[ignore = "a helper: the_reserve_serves_a_churning_workload_whole runs it"]
fn child_reserve_churn() {
    use hugealloc::testing::hugetlb::HUGETLB;
    use std::alloc::{GlobalAlloc, Layout};
    if !is_child("child_reserve_churn") {
        return;
    }
    let size = HugePageSize::Size2M;
    let stat = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
    // The first allocation takes the reserve.
    let first = Layout::from_size_align(64, 8).unwrap();
    // SAFETY: the size is not zero.
    let p0 = unsafe { hugealloc::HugeAlloc.alloc(first) };
    let (base, n, got) = HUGETLB.reserve_range().expect("the 8 MiB reserve");
    assert_eq!((n, got), (4, size));
    let total = pool(size).total;
    // The reserve's pages are faulted in: `HugePages_Free` counts the rest of the pool.
    assert_eq!(pool(size).free, total - 4);
    let reserve_whole = |when: &str| {
        assert_eq!(stat(&HUGETLB.stats.reserve_bytes), 8 << 20, "{when}");
        let m = mapping_of(base);
        assert_eq!(m.kernel_page_kb, 2048, "{when}: {m:?}");
        assert!(m.hugetlb_kb() >= 8192, "{when}: a reserve page left: {m:?}");
        assert_eq!(stat(&HUGETLB.stats.fallbacks), 0, "{when}: a fallback");
    };
    reserve_whole("at start");
    let sizes = [24usize, 200, 3000, 40_000, 300_000, 1 << 20, 3 << 20];
    for round in 0..6usize {
        let threads: Vec<_> = (0..4usize)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut live: Vec<(usize, Layout, u8)> = Vec::new();
                    let mut x = ((round * 4 + t + 1) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    for i in 0..400usize {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        if live.len() > 6 || (x.is_multiple_of(3) && !live.is_empty()) {
                            let (p, l, b) = live.swap_remove((x as usize / 3) % live.len());
                            assert!(all_equal(p, l.size(), b), "a block changed under churn");
                            // SAFETY: p is live, allocated with l.
                            unsafe { hugealloc::HugeAlloc.dealloc(p as *mut u8, l) };
                            continue;
                        }
                        let l =
                            Layout::from_size_align(sizes[x as usize % sizes.len()], 64).unwrap();
                        // SAFETY: the size is not zero.
                        let p = unsafe { hugealloc::HugeAlloc.alloc(l) } as usize;
                        assert_ne!(p, 0);
                        fill(p, l.size(), i as u8);
                        live.push((p, l, i as u8));
                    }
                    for (p, l, b) in live {
                        assert!(all_equal(p, l.size(), b));
                        // SAFETY: as above.
                        unsafe { hugealloc::HugeAlloc.dealloc(p as *mut u8, l) };
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        hugealloc::ctl::act("arena.4096.purge").unwrap();
        reserve_whole(&format!("after round {round} and a purge"));
    }
    // SAFETY: p0 is live, allocated with `first`.
    unsafe { hugealloc::HugeAlloc.dealloc(p0, first) };
    hugealloc::testing::thread::flush_thread_cache();
    hugealloc::ctl::act("arena.4096.purge").unwrap();
    reserve_whole("at the end");
    assert!(
        stat(&HUGETLB.stats.returned_bytes) > 0,
        "no fresh page was needed: the workload did not outgrow the reserve"
    );
    // Every reserve chunk is in the reserve or held by an arena (which may keep a chunk for
    // its next blocks); every hugetlb byte mapped is the reserve's or an arena's; every page
    // the pool lacks is one of those.
    let merged = |key: &str| -> u64 {
        let name = format!("stats.arenas.4096.hugetlb.{key}");
        match hugealloc::ctl::read(&name) {
            Ok(hugealloc::CtlValue::Size(n)) => n as u64,
            Ok(hugealloc::CtlValue::U64(n)) => n,
            other => panic!("{name}: {other:?}"),
        }
    };
    let free_in_reserve = stat(&HUGETLB.stats.reserve_free_bytes);
    assert_eq!(
        free_in_reserve + merged("reserved"),
        8 << 20,
        "reserve chunks lost or counted twice"
    );
    let mapped = stat(&HUGETLB.stats.mapped_bytes);
    assert_eq!(
        mapped,
        merged("mapped") + free_in_reserve,
        "hugetlb bytes mapped that neither the reserve nor an arena holds"
    );
    assert_eq!(
        total - pool(size).free,
        mapped >> 21,
        "a page taken from the pool is unaccounted for, or one was given back in part"
    );
    println!("child_reserve_churn checked");
}
