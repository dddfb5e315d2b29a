//! `thp:defer`: big blocks get no advice at fault time and are collapsed into huge pages by the
//! background thread once touched (`collapse`). These read what the kernel recorded in
//! `/proc/self/smaps` (`VmFlags`, `AnonHugePages`) and the `thp.collapse.*` counters; they
//! skip with a printed reason where THP is unavailable. The waits are hang bounds (30 s), not
//! speed assertions: each polls until the state it expects appears.
//!
//! A binary of its own, and the tests take turns (`SERIAL`): `AnonHugePages` is counted per
//! mapping, and another test's huge pages next to the block would blur what is measured.

use hugealloc::ctl::{self, CtlValue};
use hugealloc::testing::alloc;
use hugealloc::{Arena, Thp};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

const MIB: usize = 1 << 20;
const BLOCK: usize = 64 * MIB;
const CHUNKS: u64 = (BLOCK / (2 * MIB)) as u64;
const DEADLINE: Duration = Duration::from_secs(30);

/// The tests' serial lock, or `None` (with the reason printed) where THP is unavailable and
/// the test is skipped.
fn serial_with_thp() -> Option<std::sync::MutexGuard<'static, ()>> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(why) = thp_unavailable() {
        eprintln!("skipped: {why}");
        return None;
    }
    Some(g)
}

fn thp_unavailable() -> Option<&'static str> {
    match std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled") {
        Err(_) => Some("/sys/kernel/mm/transparent_hugepage/enabled is missing"),
        Ok(s) if s.contains("[never]") => Some("THP is disabled on this system (never)"),
        Ok(_) => None,
    }
}

fn counter(arena: usize, name: &str) -> u64 {
    let key = format!("stats.arenas.{arena}.thp.collapse.{name}");
    match ctl::read(&key) {
        Ok(CtlValue::U64(v)) => v,
        other => panic!("{key}: {other:?}"),
    }
}

/// Over the mappings overlapping `[addr, addr + len)`: whether any has `hg` in its `VmFlags`,
/// and their `AnonHugePages` in bytes.
fn range_state(addr: usize, len: usize) -> (bool, usize) {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let (mut inside, mut hg, mut huge) = (false, false, 0);
    for line in smaps.lines() {
        let head = line.split_once(' ').map_or(line, |(h, _)| h);
        if let Some((lo, hi)) = head.split_once('-') {
            if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = lo < addr + len && addr < hi;
                continue;
            }
        }
        if !inside {
            continue;
        }
        if let Some(v) = line.strip_prefix("AnonHugePages:") {
            huge += v
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<usize>()
                .unwrap()
                * 1024;
        }
        if let Some(flags) = line.strip_prefix("VmFlags:") {
            hg |= flags.split_whitespace().any(|f| f == "hg");
        }
    }
    (hg, huge)
}

fn touch_page_by_page(p: *mut u8, len: usize) {
    for off in (0..len).step_by(4096) {
        // SAFETY: off < len, inside the live block.
        unsafe { p.add(off).write_volatile(1) };
    }
}

#[test]
fn touched_block_is_collapsed_without_ever_being_advised() {
    let Some(_g) = serial_with_thp() else {
        return;
    };
    let arena = Arena::new(Thp::Defer).expect("an arena").index();
    let p = alloc::alloc_in(Some(arena), BLOCK, 1, false, false);
    assert!(!p.is_null());
    assert_eq!(counter(arena, "queued"), 1, "the block was not queued");
    let addr = p as usize;
    assert!(!range_state(addr, BLOCK).0, "hg right after malloc");
    touch_page_by_page(p, BLOCK);
    let start = Instant::now();
    loop {
        let (hg, huge) = range_state(addr, BLOCK);
        assert!(!hg, "the block's mapping got hg (MADV_HUGEPAGE)");
        if huge >= BLOCK && counter(arena, "done") >= CHUNKS {
            eprintln!(
                "64 MiB huge-backed {:?} after the touch; counters: attempted {} done {} failed {}",
                start.elapsed(),
                counter(arena, "attempted"),
                counter(arena, "done"),
                counter(arena, "failed"),
            );
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "not collapsed within {DEADLINE:?}: AnonHugePages {} MiB, done {}, failed {}, \
             retried {}, cold {}, fallback {}",
            huge / MIB,
            counter(arena, "done"),
            counter(arena, "failed"),
            counter(arena, "retried"),
            counter(arena, "cold"),
            counter(arena, "fallback"),
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The contents survived the collapse.
    // SAFETY: p is live, BLOCK bytes.
    assert!((0..BLOCK).step_by(4096).all(|o| unsafe { *p.add(o) } == 1));
    // SAFETY: p is live.
    unsafe { alloc::free(p) };
}

#[test]
fn block_freed_before_its_collapse_is_skipped() {
    let Some(_g) = serial_with_thp() else {
        return;
    };
    let arena = Arena::new(Thp::Defer).expect("an arena").index();
    // Never touched, so no pass can collapse it before the free (a chunk is collapsed only
    // once all its pages are resident; fresh chunks of a new arena are not).
    let p = alloc::alloc_in(Some(arena), BLOCK, 1, false, false);
    assert!(!p.is_null());
    assert_eq!(counter(arena, "queued"), 1);
    // SAFETY: p is live.
    unsafe { alloc::free(p) };
    let start = Instant::now();
    while counter(arena, "skipped") < CHUNKS {
        assert!(
            start.elapsed() < DEADLINE,
            "freed chunks not skipped within {DEADLINE:?}: skipped {}",
            counter(arena, "skipped")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        counter(arena, "attempted"),
        0,
        "a freed block was collapsed"
    );
    assert_eq!(counter(arena, "done"), 0);
}

#[test]
fn other_policies_queue_nothing() {
    let Some(_g) = serial_with_thp() else {
        return;
    };
    for policy in [Thp::Always, Thp::Madvise, Thp::Never, Thp::Default] {
        let arena = Arena::new(policy).expect("an arena").index();
        let p = alloc::alloc_in(Some(arena), BLOCK, 1, false, false);
        assert!(!p.is_null());
        touch_page_by_page(p, 4 * MIB);
        assert_eq!(counter(arena, "queued"), 0, "{policy:?} queued a collapse");
        // SAFETY: p is live.
        unsafe { alloc::free(p) };
    }
    // And `defer` does, below the threshold not.
    let arena = Arena::new(Thp::Defer).expect("an arena").index();
    let small = alloc::alloc_in(Some(arena), 3 * MIB, 1, false, false);
    assert_eq!(
        counter(arena, "queued"),
        0,
        "3 MiB (below thp_threshold) queued"
    );
    let big = alloc::alloc_in(Some(arena), BLOCK, 1, false, false);
    assert_eq!(counter(arena, "queued"), 1);
    // SAFETY: both are live.
    unsafe {
        alloc::free(small);
        alloc::free(big);
    }
}

/// A fork child has no background thread: its first deferred block starts one, and the block
/// is collapsed in the child as in the parent. The child reports through its exit status.
#[test]
fn fork_child_collapses_its_own_deferred_block() {
    let Some(_g) = serial_with_thp() else {
        return;
    };
    // The parent's defer arena starts the parent's background thread; the child gets none.
    let arena = Arena::new(Thp::Defer).expect("an arena").index();
    // SAFETY: the child only allocates, reads /proc and exits with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(|| {
            let p = alloc::alloc_in(Some(arena), BLOCK, 1, false, false);
            assert!(!p.is_null());
            let before = counter(arena, "done");
            touch_page_by_page(p, BLOCK);
            let start = Instant::now();
            loop {
                let (hg, huge) = range_state(p as usize, BLOCK);
                assert!(!hg, "hg in the child");
                if huge >= BLOCK && counter(arena, "done") >= before + CHUNKS {
                    break;
                }
                assert!(
                    start.elapsed() < DEADLINE,
                    "child: not collapsed within {DEADLINE:?}: AnonHugePages {} MiB, queued {}",
                    huge / MIB,
                    counter(arena, "queued"),
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        })
        .map_or(1, |()| 0);
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: pid is our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child's deferred block was not collapsed (status {status:#x})"
    );
}

// ---- metadata_thp:defer, in a child process (the option is read at init) ----

const META_CHILD: &str = "HUGEALLOC_THP_DEFER_META_CHILD";

/// Runs `metadata_child` in a child process under `HUGEALLOC_CONF=conf`; returns its
/// `RESULT name=value` lines as pairs.
fn run_metadata_child(conf: &str) -> Vec<(String, usize)> {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "metadata_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(META_CHILD, "1")
        .env("HUGEALLOC_CONF", conf)
        .output()
        .unwrap();
    assert!(out.status.success(), "child under {conf:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_string()))
        .filter_map(|r| {
            let (k, v) = r.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn global_figure(name: &str) -> usize {
    match ctl::read(name) {
        Ok(CtlValue::Size(v)) => v,
        other => panic!("{name}: {other:?}"),
    }
}

/// `AnonHugePages` of the whole process, bytes.
fn process_huge_bytes() -> usize {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .map_or(0, |v| {
            v.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<usize>()
                .unwrap()
                * 1024
        })
}

/// The child: fills several metadata chunks with page-chunk descriptors (one per 2 MiB chunk
/// of 1.5 MiB blocks, which are below `thp_threshold` and never touched, so no user memory is
/// huge-backed), then, if anything was queued, waits until a metadata chunk is collapsed.
#[test]
#[ignore = "a helper: metadata_thp_defer_collapses_metadata_chunks runs it in a child process"]
fn metadata_child() {
    if std::env::var(META_CHILD).is_err() {
        return;
    }
    const BLOCK: usize = 3 * MIB / 2;
    let start_metadata = global_figure("stats.metadata");
    let mut blocks = Vec::new();
    // At least four metadata chunks of descriptors (hang bound: 20,000 blocks).
    while global_figure("stats.metadata") < start_metadata + 8 * MIB && blocks.len() < 20_000 {
        let p = alloc::alloc_in(None, BLOCK, 1, false, false);
        assert!(!p.is_null());
        blocks.push(p);
    }
    let start = Instant::now();
    while global_figure("stats.metadata_thp_queued") > 0
        && global_figure("stats.metadata_thp_collapsed") == 0
        && start.elapsed() < DEADLINE
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    for name in [
        "stats.metadata",
        "stats.metadata_thp_queued",
        "stats.metadata_thp_collapsed",
    ] {
        println!("RESULT {name}={}", global_figure(name));
    }
    println!("RESULT anon_huge={}", process_huge_bytes());
    println!("RESULT blocks={}", blocks.len());
    for p in blocks {
        // SAFETY: p is live, from alloc_in.
        unsafe { alloc::free(p) };
    }
}

/// Under `metadata_thp:defer` the base's chunks are queued when mapped and collapsed by the
/// background thread once full (`stats.metadata_thp_queued`, `stats.metadata_thp_collapsed`,
/// and the process's `AnonHugePages`); under the default `metadata_thp` nothing is queued.
#[test]
fn metadata_thp_defer_collapses_metadata_chunks() {
    let Some(_g) = serial_with_thp() else {
        return;
    };
    let got = run_metadata_child("metadata_thp:defer");
    let get = |k: &str| got.iter().find(|(n, _)| n == k).map(|&(_, v)| v);
    let (queued, collapsed, huge) = (
        get("stats.metadata_thp_queued").expect("queued"),
        get("stats.metadata_thp_collapsed").expect("collapsed"),
        get("anon_huge").expect("anon_huge"),
    );
    eprintln!("metadata_thp:defer: {got:?}");
    assert!(queued >= 4 * 2 * MIB, "metadata chunks not queued: {got:?}");
    assert!(
        collapsed >= 2 * MIB && collapsed <= queued,
        "no metadata chunk collapsed within {DEADLINE:?}: {got:?}"
    );
    assert!(huge >= collapsed, "collapsed but not huge-backed: {got:?}");
    // The default metadata policy queues nothing.
    let got = run_metadata_child("");
    let get = |k: &str| got.iter().find(|(n, _)| n == k).map(|&(_, v)| v);
    assert_eq!(get("stats.metadata_thp_queued"), Some(0), "{got:?}");
    assert_eq!(get("stats.metadata_thp_collapsed"), Some(0), "{got:?}");
}
