//! Heap profiling from Rust (`prof:true` through `HugeAlloc::with_conf`): live bytes per site
//! within 15% of the truth, sampled blocks through every entry point (dealloc with a layout,
//! realloc, usable size), `prof.reset`, threads, thread exit and `fork`.

#[path = "common/heap_profile.rs"]
mod heap_profile;

use hugealloc::{ctl, CtlValue, HugeAlloc};
use std::sync::Mutex;

#[global_allocator]
static GLOBAL: hugealloc::ConfiguredAlloc = HugeAlloc::with_conf("prof:true,lg_prof_sample:12");

/// The profile is process-wide: tests that read totals run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const BLOCK: usize = 1000;

#[no_mangle]
#[inline(never)]
pub extern "C" fn prof_rs_grow_cache(keep: &mut Vec<Box<[u8]>>, total: usize) {
    for _ in 0..total / BLOCK {
        keep.push(vec![1u8; BLOCK].into_boxed_slice());
    }
}

#[no_mangle]
#[inline(never)]
pub extern "C" fn prof_rs_parse(keep: &mut Vec<Box<[u8]>>, total: usize) {
    for _ in 0..total / BLOCK {
        keep.push(vec![2u8; BLOCK].into_boxed_slice());
    }
}

#[test]
fn rust_sites_within_15_percent_of_the_truth() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(hugealloc::profile::enabled());
    let mut keep = Vec::with_capacity(30_000);
    let (cache, parse) = (14 << 20, 6 << 20);
    prof_rs_grow_cache(&mut keep, cache);
    prof_rs_parse(&mut keep, parse);
    let bytes = hugealloc::profile::bytes().expect("profiling is on");
    let p = heap_profile::parse(std::str::from_utf8(&bytes).unwrap());
    assert_eq!(p.period, 4096);
    let exe = std::env::current_exe().unwrap();
    let got = heap_profile::live_by_function(&p, &exe, &["prof_rs_grow_cache", "prof_rs_parse"]);
    for (site, est, want) in [
        ("grow_cache", got[0], (cache / BLOCK * BLOCK) as f64),
        ("parse", got[1], (parse / BLOCK * BLOCK) as f64),
    ] {
        assert!(
            (est - want).abs() / want < 0.15,
            "{site}: estimated {est:.0} live bytes, truly {want}"
        );
    }
    drop(keep);
    // Freed: the sites hold (almost) nothing any more.
    let bytes = hugealloc::profile::bytes().unwrap();
    let p = heap_profile::parse(std::str::from_utf8(&bytes).unwrap());
    let got = heap_profile::live_by_function(&p, &exe, &["prof_rs_grow_cache", "prof_rs_parse"]);
    assert!(
        got[0] + got[1] < 100_000.0,
        "{got:?} live after every block was freed"
    );
}

#[test]
fn sampled_blocks_through_every_entry_point() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = hugealloc::profile::sampled_totals();
    // Sizes and alignments of every kind; with a 4 KiB mean interval many are sampled.
    let mut blocks = Vec::new();
    for i in 0..4000usize {
        let size = [8, 100, 1000, 5000, 40_000, 300_000][i % 6] + i % 13;
        let align = [8, 16, 64, 4096][i % 4];
        let layout = std::alloc::Layout::from_size_align(size, align).unwrap();
        // SAFETY: a non-zero layout.
        let p = unsafe { std::alloc::alloc(layout) };
        assert!(!p.is_null() && (p as usize).is_multiple_of(align));
        // SAFETY: p is a live block of `size` bytes.
        unsafe {
            p.write_bytes(i as u8, size);
            assert!(hugealloc::usable_size(p) >= size);
        }
        blocks.push((p, layout));
    }
    let mid = hugealloc::profile::sampled_totals();
    assert!(
        mid[0] > before[0] + 100,
        "{before:?} -> {mid:?}: too few samples"
    );
    for (i, (p, layout)) in blocks.iter_mut().enumerate() {
        let new = layout.size() * 2 + 1;
        // SAFETY: p is live with this layout.
        let q = unsafe { std::alloc::realloc(*p, *layout, new) };
        assert!(!q.is_null());
        // SAFETY: q holds the old contents and `new` bytes.
        unsafe {
            assert!(std::slice::from_raw_parts(q, layout.size())
                .iter()
                .all(|&b| b == i as u8));
            q.add(layout.size()).write_bytes(0xee, new - layout.size());
        }
        *p = q;
        *layout = std::alloc::Layout::from_size_align(new, layout.align()).unwrap();
    }
    for (p, layout) in blocks {
        // SAFETY: live with this layout.
        unsafe { std::alloc::dealloc(p, layout) };
    }
    let after = hugealloc::profile::sampled_totals();
    // Every sampled block was removed at free (other threads of the harness may hold a few).
    assert!(after[0] <= before[0] + 20, "{before:?} -> {after:?}");
    assert!(after[2] > mid[2], "reallocations were sampled too");
}

/// Rust's sized `dealloc` under profiling pushes a small block straight into its cache bin
/// unless `may_be_sampled` marks its page: a live sampled block's page is marked (else the
/// push would file it in a small bin), and the mark goes when the block is freed (else every
/// free on that page would keep taking the pagemap path).
#[test]
fn sized_free_sees_the_pages_of_sampled_blocks() {
    use hugealloc::testing::prof::{is_sampled, may_be_sampled};
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let layout = std::alloc::Layout::from_size_align(100, 8).unwrap();
    // SAFETY: a non-zero layout.
    let blocks: Vec<*mut u8> = (0..4000)
        .map(|_| unsafe { std::alloc::alloc(layout) })
        .collect();
    let sampled: Vec<usize> = blocks
        .iter()
        .map(|&p| p as usize)
        .filter(|&a| is_sampled(a))
        .collect();
    assert!(sampled.len() >= 20, "{} of 4000 sampled", sampled.len());
    for &a in &sampled {
        assert!(
            may_be_sampled(a),
            "sampled block {a:#x}: its page is not marked"
        );
    }
    for &p in &blocks {
        // SAFETY: live with this layout, freed once.
        unsafe { std::alloc::dealloc(p, layout) };
    }
    assert!(sampled.iter().all(|&a| !is_sampled(a)));
    // The harness's other threads may sample a block on one of these pages meanwhile.
    let still = sampled.iter().filter(|&&a| may_be_sampled(a)).count();
    assert!(
        still * 4 < sampled.len(),
        "{still} of {} freed sampled blocks' pages still marked",
        sampled.len()
    );
}

#[test]
fn reset_clears_and_old_blocks_still_free() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut keep = Vec::new();
    prof_rs_parse(&mut keep, 2 << 20);
    assert!(hugealloc::profile::sampled_totals()[0] > 0);
    ctl::write("prof.reset", CtlValue::Size(12)).unwrap();
    let t = hugealloc::profile::sampled_totals();
    assert!(t[0] < 10 && t[2] < 10, "after prof.reset: {t:?}");
    drop(keep); // blocks sampled before the reset are still freed as sampled blocks
    let t = hugealloc::profile::sampled_totals();
    assert!(t[0] < 10, "{t:?}");
}

#[test]
fn controls() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(ctl::read("opt.prof").unwrap(), CtlValue::Bool(true));
    assert_eq!(
        ctl::read("opt.lg_prof_sample").unwrap(),
        CtlValue::Unsigned(12)
    );
    assert_eq!(ctl::read("prof.lg_sample").unwrap(), CtlValue::Size(12));
    assert_eq!(
        ctl::read("opt.prof_prefix").unwrap(),
        CtlValue::Str(c"hugealloc")
    );
    assert_eq!(
        ctl::read("opt.prof_unwind").unwrap(),
        CtlValue::Str(c"libgcc")
    );
    // Inactive: nothing new is sampled, on this thread or globally.
    let before = hugealloc::profile::sampled_totals()[2];
    assert_eq!(
        ctl::write("thread.prof.active", CtlValue::Bool(false)).unwrap(),
        CtlValue::Bool(true)
    );
    let mut keep = Vec::new();
    prof_rs_parse(&mut keep, 1 << 20);
    // The totals are process-wide and the test harness's own threads allocate (and may be
    // sampled) meanwhile: a few samples of theirs are tolerated; this thread's 1 MiB would
    // make about 256.
    let thread_off = hugealloc::profile::sampled_totals()[2];
    assert!(
        thread_off < before + 10,
        "sampled while thread.prof.active was false"
    );
    ctl::write("thread.prof.active", CtlValue::Bool(true)).unwrap();
    assert_eq!(
        ctl::write("prof.active", CtlValue::Bool(false)).unwrap(),
        CtlValue::Bool(true)
    );
    prof_rs_parse(&mut keep, 1 << 20);
    let inactive = hugealloc::profile::sampled_totals()[2];
    ctl::write("prof.active", CtlValue::Bool(true)).unwrap();
    prof_rs_parse(&mut keep, 1 << 20);
    assert!(
        inactive < thread_off + 10,
        "sampled while prof.active was false"
    );
    assert!(hugealloc::profile::sampled_totals()[2] > inactive + 50);
    // prof.dump to a path, and the Rust API.
    let dir = std::env::temp_dir().join(format!("hugealloc-prof-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("x.heap");
    let cpath = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    ctl::write("prof.dump", CtlValue::Str(&cpath)).unwrap();
    assert!(std::fs::read_to_string(&path)
        .unwrap()
        .starts_with("heap_v2/4096\n"));
    assert!(hugealloc::profile::dump(
        dir.join("y.heap").to_str().unwrap()
    ));
    assert!(!hugealloc::profile::dump("/nonexistent-dir/z.heap"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn threads_thread_exit_and_fork() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = hugealloc::profile::sampled_totals();
    // Blocks allocated on threads that exit, freed here.
    let handles: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let mut keep = Vec::new();
                for i in 0..3000usize {
                    let v = vec![t as u8; 100 + (i * 37) % 9000];
                    if i % 3 == 0 {
                        keep.push(v);
                    }
                }
                keep
            })
        })
        .collect();
    let kept: Vec<Vec<Vec<u8>>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(hugealloc::profile::sampled_totals()[0] > before[0]);
    for (t, keep) in kept.iter().enumerate() {
        assert!(keep.iter().all(|v| v.iter().all(|&b| b == t as u8)));
    }
    drop(kept);
    // SAFETY: the child only allocates, frees and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut ok = true;
        for i in 0..2000usize {
            let v = vec![7u8; 10 + i * 11];
            ok &= v[i * 11] == 7;
        }
        ok &= hugealloc::profile::bytes().is_some_and(|b| b.starts_with(b"heap_v2/"));
        // SAFETY: leaves the child at once.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{status:#x}"
    );
    let after = hugealloc::profile::sampled_totals();
    assert!(after[0] <= before[0] + 20, "{before:?} -> {after:?}");
}

/// `go tool pprof` reads the protobuf dump of a Rust executable and names its sites. lld
/// starts this PIE's text segment mid-page (`p_vaddr % 4096 != 0`); Go's pprof takes the load
/// bias as `Mapping.start - p_vaddr`, so the dump's mapping must start at the segment's first
/// byte (docs/profiling.md, "pprof and Rust executables").
#[test]
fn pprof_names_the_sites_of_a_rust_program() {
    let Some(go) = ["/usr/bin/go", "/usr/local/go/bin/go"]
        .iter()
        .find(|p| std::path::Path::new(p).is_file())
    else {
        eprintln!("SKIPPED: go (Debian golang-go) is not installed");
        return;
    };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    hugealloc::profile::reset();
    let mut keep = Vec::with_capacity(30_000);
    prof_rs_grow_cache(&mut keep, 14 << 20);
    prof_rs_parse(&mut keep, 6 << 20);
    let dir = std::env::temp_dir().join(format!("hugealloc-pprof-rs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pb = dir.join("p.pb");
    assert!(hugealloc::profile::dump(pb.to_str().unwrap()));
    drop(keep);
    let out = std::process::Command::new(go)
        .args([
            "tool",
            "pprof",
            "-top",
            "-sample_index=inuse_space",
            "-unit=B",
        ])
        .arg(std::env::current_exe().unwrap())
        .arg(&pb)
        .env("HOME", &dir)
        .env("GOCACHE", dir.join("gocache"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Rows: flat flat% sum% cum cum% name. The sites hold 70% and 30% of what was sampled.
    let cum = |site: &str| -> f64 {
        text.lines()
            .find(|l| l.split_whitespace().last() == Some(site))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|v| v.trim_end_matches('B').parse().ok())
            .unwrap_or_else(|| panic!("{site} not named:\n{text}"))
    };
    let (grow, parse) = (cum("prof_rs_grow_cache"), cum("prof_rs_parse"));
    assert!(
        (grow / parse - 14.0 / 6.0).abs() < 0.6,
        "{grow} vs {parse}\n{text}"
    );
}
