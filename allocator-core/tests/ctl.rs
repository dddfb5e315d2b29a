//! Integration tests of the control names (`hugealloc::ctl`, and `ffi::mallctl` for C's
//! conventions) and of statistics printing: round trips, error codes, `opt.*` under a
//! `HUGEALLOC_CONF` given to a child process, per-bin counters, JSON that parses, and THP
//! advice that follows `arena.<i>.thp` changed at run time (read back from `/proc/self/smaps`).

use hugealloc::ctl::{self, Ctl, CtlError, CtlValue};
use hugealloc::ffi::{self, WriteCb};
use hugealloc::stats;
use hugealloc::testing::alloc;
use std::ffi::{c_char, c_void, CStr, CString};
use std::process::{Command, Output, Stdio};

// ---- allocation counting: System, counted per thread ----

mod common;
use common::allocations_in;

#[global_allocator]
static COUNTING: common::Counting = common::Counting;

// ---- helpers ----

fn read(name: &str) -> CtlValue<'static> {
    ctl::read(name).unwrap_or_else(|e| panic!("{name}: {e:?}"))
}

fn read_u64(name: &str) -> u64 {
    match read(name) {
        CtlValue::U64(v) => v,
        CtlValue::Size(v) => v as u64,
        CtlValue::Unsigned(v) => u64::from(v),
        other => panic!("{name}: {other:?}"),
    }
}

fn read_str(name: &str) -> String {
    match read(name) {
        CtlValue::Str(s) => s.to_str().unwrap().to_string(),
        other => panic!("{name}: {other:?}"),
    }
}

fn new_arena() -> usize {
    match read("arenas.create") {
        CtlValue::Unsigned(i) => i as usize,
        other => panic!("arenas.create: {other:?}"),
    }
}

/// `mallctl(name, &v, &len, NULL, 0)` with `len = sizeof v`.
fn mallctl_read<T: Copy>(name: &str, len: usize) -> Result<T, i32> {
    let name = CString::new(name).unwrap();
    // SAFETY: every T used here (integers, pointers) is valid all-zero.
    let mut v: T = unsafe { std::mem::zeroed() };
    let mut len = len;
    // SAFETY: v has size_of::<T>() >= len writable bytes (callers pass at most that).
    let r = unsafe {
        ffi::mallctl(
            name.as_ptr(),
            (&mut v as *mut T).cast(),
            &mut len,
            std::ptr::null(),
            0,
        )
    };
    if r == 0 {
        Ok(v)
    } else {
        Err(r)
    }
}

/// `mallctl(name, NULL, NULL, &v, len)`.
fn mallctl_write<T>(name: &str, v: &T, len: usize) -> i32 {
    let name = CString::new(name).unwrap();
    // SAFETY: v has size_of::<T>() >= len readable bytes (callers pass at most that).
    unsafe {
        ffi::mallctl(
            name.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (v as *const T).cast(),
            len,
        )
    }
}

unsafe extern "C" fn collect(opaque: *mut c_void, text: *const c_char) {
    // SAFETY: opaque is the Vec passed by `printed`; text is NUL-terminated.
    unsafe {
        let out = &mut *opaque.cast::<Vec<u8>>();
        out.extend_from_slice(CStr::from_ptr(text).to_bytes());
    }
}

/// What `malloc_stats_print(collect, ..., opts)` prints.
fn printed(opts: &str) -> String {
    let mut out: Vec<u8> = Vec::new();
    let opts = CString::new(opts).unwrap();
    // SAFETY: collect appends to `out`, which lives across the call; opts is NUL-terminated.
    unsafe {
        ffi::stats_print(
            Some(collect as WriteCb),
            (&mut out as *mut Vec<u8>).cast(),
            opts.as_ptr(),
        )
    };
    String::from_utf8(out).unwrap()
}

/// A block of `size` bytes from arena 0 (whichever arena this thread is bound to).
fn in_arena_0(size: usize) -> *mut u8 {
    let p = alloc::alloc_in(Some(0), size, 1, false, false);
    assert!(!p.is_null());
    p
}

/// The index of the small class whose blocks are `size` bytes.
fn small_class_of(size: usize) -> usize {
    let nbins = read_u64("arenas.nbins") as usize;
    (0..nbins)
        .find(|j| read_u64(&format!("arenas.bin.{j}.size")) == size as u64)
        .expect("a small class of that size")
}

// ---- round trips ----

#[test]
fn ctl_thread_arena_round_trips() {
    let target = new_arena();
    std::thread::spawn(move || {
        let old = read_u64("thread.arena") as usize;
        assert_ne!(old, target, "a new arena has no thread yet");
        let before = ctl::write("thread.arena", CtlValue::Unsigned(target as u32)).unwrap();
        assert_eq!(before, CtlValue::Unsigned(old as u32));
        assert_eq!(read_u64("thread.arena") as usize, target);
        assert_eq!(read_u64(&format!("stats.arenas.{target}.nthreads")), 1);
        // Through C: the same value, and a move back.
        assert_eq!(mallctl_read::<u32>("thread.arena", 4), Ok(target as u32));
        assert_eq!(mallctl_write("thread.arena", &(old as u32), 4), 0);
        assert_eq!(read_u64("thread.arena") as usize, old);
        // An arena that does not exist: EFAULT, and the thread stays.
        assert_eq!(
            ctl::write("thread.arena", CtlValue::Unsigned(100_000)),
            Err(CtlError::NoArena)
        );
        assert_eq!(read_u64("thread.arena") as usize, old);
    })
    .join()
    .unwrap();
}

#[test]
fn ctl_arena_thp_round_trips() {
    let i = new_arena();
    let name = format!("arena.{i}.thp");
    let initial = read_str(&name);
    assert_eq!(initial, read_str("opt.thp"), "a new arena follows thp");
    match ctl::write(&name, CtlValue::Str(c"never")) {
        Ok(CtlValue::Str(old)) => assert_eq!(old.to_str(), Ok(initial.as_str())),
        other => panic!("{other:?}"),
    }
    assert_eq!(read_str(&name), "never");
    assert_eq!(
        hugealloc::Arena::from_index(i).unwrap().thp(),
        hugealloc::Thp::Never
    );
    assert_eq!(
        ctl::write(&name, CtlValue::Str(c"always")),
        Ok(CtlValue::Str(c"never"))
    );
    assert_eq!(read_str(&name), "always");
    assert_eq!(
        ctl::write(&name, CtlValue::Str(c"sometimes")),
        Err(CtlError::BadValue)
    );
    assert_eq!(read_str(&name), "always", "a bad value changes nothing");
    // Through C: a const char * each way.
    let never: *const c_char = c"never".as_ptr();
    assert_eq!(mallctl_write(&name, &never, 8), 0);
    let got = mallctl_read::<*const c_char>(&name, 8).unwrap();
    // SAFETY: mallctl returns a program-lifetime NUL-terminated string.
    assert_eq!(unsafe { CStr::from_ptr(got) }, c"never");
    let null: *const c_char = std::ptr::null();
    assert_eq!(mallctl_write(&name, &null, 8), libc::EINVAL);
    assert_eq!(
        ctl::read("arena.100000.thp"),
        Err(CtlError::NoArena),
        "EFAULT as jemalloc"
    );
}

#[test]
fn ctl_arena_dirty_decay_ms_round_trips() {
    let i = new_arena();
    let name = format!("arena.{i}.dirty_decay_ms");
    let default = read("arenas.dirty_decay_ms");
    assert_eq!(
        read(&name),
        default,
        "a new arena follows arenas.dirty_decay_ms"
    );
    assert_eq!(ctl::write(&name, CtlValue::I64(1234)), Ok(default));
    assert_eq!(read(&name), CtlValue::I64(1234));
    assert_eq!(
        ctl::write(&name, CtlValue::I64(-1)),
        Ok(CtlValue::I64(1234))
    );
    assert_eq!(read(&name), CtlValue::I64(-1));
    assert_eq!(
        ctl::write(&name, CtlValue::I64(-2)),
        Err(CtlError::BadValue)
    );
    assert_eq!(read(&name), CtlValue::I64(-1));
    // Through C: ssize_t.
    assert_eq!(mallctl_write(&name, &250i64, 8), 0);
    assert_eq!(mallctl_read::<i64>(&name, 8), Ok(250));
    assert_eq!(
        read("arenas.dirty_decay_ms"),
        default,
        "the default is untouched"
    );
}

#[test]
fn ctl_arena_decay_purges_what_is_older_than_the_decay_time() {
    let i = new_arena();
    let decay = format!("arena.{i}.dirty_decay_ms");
    ctl::write(&decay, CtlValue::I64(-1)).unwrap();
    let p = alloc::alloc_in(Some(i), 8 << 20, 1, false, false);
    assert!(!p.is_null());
    // SAFETY: p is a live 8 MiB block.
    unsafe {
        std::ptr::write_bytes(p, 1, 8 << 20);
        alloc::free(p);
    }
    let pdirty = format!("stats.arenas.{i}.pdirty");
    let purged = format!("stats.arenas.{i}.purged_bytes");
    assert!(read_u64(&pdirty) >= 2048, "8 MiB stays dirty under -1");
    let purged_before = read_u64(&purged);
    // Under -1 a decay pass purges nothing...
    ctl::act(&format!("arena.{i}.decay")).unwrap();
    assert!(read_u64(&pdirty) >= 2048);
    // ...under 0 it purges everything, at once, without any allocation activity.
    ctl::write(&decay, CtlValue::I64(0)).unwrap();
    ctl::act(&format!("arena.{i}.decay")).unwrap();
    assert_eq!(read_u64(&pdirty), 0);
    assert!(read_u64(&purged) >= purged_before + (8 << 20));
    assert_eq!(ctl::act("arena.100000.decay"), Err(CtlError::NoArena));
    ctl::act("arena.4096.decay").unwrap();
}

// ---- error codes ----

#[test]
fn ctl_errors_are_enoent_einval_eperm() {
    // Unknown names.
    for name in [
        "no.such.name",
        "stats",
        "opt.bogus",
        "stats.arenas.0.bogus",
        "arena.x.thp",
    ] {
        assert_eq!(ctl::read(name), Err(CtlError::NotFound), "{name}");
        assert_eq!(mallctl_read::<u64>(name, 8), Err(libc::ENOENT), "{name}");
    }
    // Indices past what exists are ENOENT under stats (as jemalloc), EFAULT under arena.
    assert_eq!(
        ctl::read("stats.arenas.100000.pactive"),
        Err(CtlError::NotFound)
    );
    assert_eq!(
        ctl::read("stats.arenas.0.bins.999.nmalloc"),
        Err(CtlError::NotFound)
    );
    assert_eq!(ctl::read("arenas.bin.999.size"), Err(CtlError::NotFound));
    assert_eq!(ctl::read("opt.arena.64.thp"), Err(CtlError::NotFound));
    // Wrong sizes.
    assert_eq!(
        mallctl_read::<u64>("stats.arenas.0.pactive", 4),
        Err(libc::EINVAL)
    );
    assert_eq!(mallctl_read::<u64>("opt.narenas", 8), Err(libc::EINVAL));
    assert_eq!(mallctl_read::<u64>("opt.tcache", 4), Err(libc::EINVAL));
    assert_eq!(mallctl_write("epoch", &1u64, 4), libc::EINVAL);
    assert_eq!(
        ctl::write("epoch", CtlValue::Size(1)),
        Err(CtlError::WrongType)
    );
    // Writes to read-only names.
    assert_eq!(mallctl_write("opt.narenas", &1u32, 4), libc::EPERM);
    assert_eq!(mallctl_write("stats.allocated", &1usize, 8), libc::EPERM);
    assert_eq!(
        mallctl_write("stats.arenas.0.bins.0.nmalloc", &1u64, 8),
        libc::EPERM
    );
    assert_eq!(
        ctl::write("opt.thp", CtlValue::Str(c"never")),
        Err(CtlError::ReadOnly)
    );
    assert_eq!(mallctl_read::<u64>("arena.0.purge", 0), Err(libc::EPERM));
    // The right sizes work.
    assert!(mallctl_read::<usize>("stats.arenas.0.pactive", 8).is_ok());
    assert!(mallctl_read::<u32>("opt.narenas", 4).is_ok());
    assert!(mallctl_read::<u8>("opt.tcache", 1).is_ok());
}

#[test]
fn ctl_mibs_reach_the_same_values() {
    let i = new_arena();
    ctl::write(&format!("arena.{i}.dirty_decay_ms"), CtlValue::I64(777)).unwrap();
    let mut mib = [0usize; 4];
    let mut miblen = mib.len();
    let name = CString::new("arena.0.dirty_decay_ms").unwrap();
    // SAFETY: mib has miblen entries; name is NUL-terminated.
    let r = unsafe { ffi::mallctlnametomib(name.as_ptr(), mib.as_mut_ptr(), &mut miblen) };
    assert_eq!(r, 0);
    assert_eq!(miblen, 3);
    mib[1] = i;
    let mut v = 0i64;
    let mut len = 8;
    // SAFETY: v has len writable bytes.
    let r = unsafe {
        ffi::mallctlbymib(
            mib.as_ptr(),
            miblen,
            (&mut v as *mut i64).cast(),
            &mut len,
            std::ptr::null(),
            0,
        )
    };
    assert_eq!((r, v), (0, 777));
    let c = Ctl::lookup(format!("stats.arenas.{i}.bins.2.size").as_bytes()).unwrap();
    assert_eq!(c.read(), Ok(CtlValue::Size(32)));
}

// ---- values ----

#[test]
fn ctl_bin_nmalloc_grows_with_allocations_of_that_class() {
    let i = new_arena();
    let j = small_class_of(48);
    let nmalloc = format!("stats.arenas.{i}.bins.{j}.nmalloc");
    let ndalloc = format!("stats.arenas.{i}.bins.{j}.ndalloc");
    let other = format!("stats.arenas.{i}.bins.{}.nmalloc", j + 1);
    let merged = format!("stats.arenas.4096.bins.{j}.nmalloc");
    let (before, other_before, merged_before) =
        (read_u64(&nmalloc), read_u64(&other), read_u64(&merged));
    std::thread::spawn(move || {
        ctl::write("thread.arena", CtlValue::Unsigned(i as u32)).unwrap();
        let blocks: Vec<usize> = (0..1000).map(|_| alloc::malloc(48) as usize).collect();
        assert!(read_u64(&format!("stats.arenas.{i}.bins.{j}.curregs")) >= 1000);
        assert!(read_u64(&format!("stats.arenas.{i}.bins.{j}.curslabs")) >= 1);
        for p in blocks {
            // SAFETY: p is a live block.
            unsafe { alloc::free(p as *mut u8) };
        }
        ctl::act("thread.tcache.flush").unwrap();
    })
    .join()
    .unwrap();
    assert!(read_u64(&nmalloc) >= before + 1000);
    assert!(read_u64(&ndalloc) >= 1000);
    assert!(read_u64(&merged) >= merged_before + 1000);
    assert_eq!(read_u64(&other), other_before, "another class is untouched");
    assert!(read_u64(&format!("stats.arenas.{i}.bins.{j}.nfills")) >= 1);
    assert!(read_u64(&format!("stats.arenas.{i}.bins.{j}.nflushes")) >= 1);
    assert!(read_u64(&format!("stats.arenas.{i}.small.nmalloc")) >= 1000);
}

#[test]
fn ctl_arena_figures_follow_a_huge_block() {
    let i = new_arena();
    let allocated = format!("stats.arenas.{i}.huge.allocated");
    let before = read_u64(&allocated);
    let p = alloc::alloc_in(Some(i), 6 << 20, 1, false, false);
    assert!(!p.is_null());
    assert!(read_u64(&allocated) >= before + (6 << 20));
    assert!(read_u64(&format!("stats.arenas.{i}.pactive")) >= (6 << 20) / 4096);
    assert!(read_u64(&format!("stats.arenas.{i}.mapped")) >= 6 << 20);
    assert!(read_u64(&format!("stats.arenas.{i}.huge.nmalloc")) >= 1);
    // The merged figures include this arena's.
    assert!(read_u64("stats.arenas.4096.huge.allocated") >= 6 << 20);
    assert!(read_u64("stats.allocated") >= 6 << 20);
    // SAFETY: p is live.
    unsafe { alloc::free(p) };
    assert_eq!(read_u64(&allocated), before);
}

#[test]
fn ctl_fixed_values() {
    assert_eq!(read_str("version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(read("arenas.page"), CtlValue::Size(4096));
    assert_eq!(read("arenas.quantum"), CtlValue::Size(16));
    assert_eq!(read_u64("arenas.nbins"), 37);
    assert_eq!(read("arenas.bin.0.size"), CtlValue::Size(8));
    let nregs = read_u64("arenas.bin.3.nregs");
    let slab = read_u64("arenas.bin.3.slab_size");
    assert!(
        nregs * 48 <= slab && slab - nregs * 48 < 48,
        "{nregs} {slab}"
    );
    let epoch = read_u64("epoch");
    // As jemalloc: a write of epoch reads the new epoch.
    assert_eq!(
        ctl::write("epoch", CtlValue::U64(1)),
        Ok(CtlValue::U64(epoch + 1))
    );
    assert!(read_u64("epoch") > epoch);
    // Every stats.<figure> is a size_t.
    for (name, _, _) in stats().fields() {
        assert!(
            matches!(read(&format!("stats.{name}")), CtlValue::Size(_)),
            "{name}"
        );
    }
}

#[test]
fn ctl_reads_and_printing_allocate_nothing() {
    let _ = stats(); // the init, outside the count
    struct Sink {
        buf: [u8; 1 << 16],
        len: usize,
        calls: usize,
    }
    unsafe extern "C" fn sink(opaque: *mut c_void, text: *const c_char) {
        // SAFETY: opaque is the Sink below; text is NUL-terminated.
        unsafe {
            let s = &mut *opaque.cast::<Sink>();
            let t = CStr::from_ptr(text).to_bytes();
            let n = t.len().min(s.buf.len() - s.len);
            s.buf[s.len..s.len + n].copy_from_slice(&t[..n]);
            s.len += n;
            s.calls += 1;
        }
    }
    let mut s = Box::new(Sink {
        buf: [0; 1 << 16],
        len: 0,
        calls: 0,
    });
    let sp: *mut Sink = &mut *s;
    let n = allocations_in(|| {
        for name in [
            "stats.allocated",
            "stats.arenas.0.pactive",
            "stats.arenas.4096.bins.3.nmalloc",
            "opt.stats_print_opts",
            "opt.thp",
            "opt.arena.3.thp",
            "arenas.bin.5.size",
            "arena.0.thp",
        ] {
            std::hint::black_box(ctl::read(name).unwrap());
        }
        ctl::write(
            "arena.0.dirty_decay_ms",
            ctl::read("arena.0.dirty_decay_ms").unwrap(),
        )
        .unwrap();
        for opts in [c"", c"J", c"Jgb"] {
            // SAFETY: sink writes into the live Sink; opts is NUL-terminated.
            unsafe { ffi::stats_print(Some(sink as WriteCb), sp.cast(), opts.as_ptr()) };
        }
    });
    assert_eq!(n, 0);
    assert!(s.calls > 3 && s.len > 100);
}

// ---- printing ----

/// Runs `python3 -c CHECK` with `json` on stdin; `None` when python3 is missing.
fn python_json_check(json: &str, check: &str) -> Option<Output> {
    let mut child = match Command::new("python3")
        .args(["-c", check])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(_) => {
            eprintln!("skipped: no python3 to parse the JSON");
            return None;
        }
    };
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(json.as_bytes())
        .unwrap();
    Some(child.wait_with_output().unwrap())
}

/// Parses a printed JSON object and prints what the assertions look at.
const JSON_CHECK: &str = r#"
import json, sys
h = json.loads(sys.stdin.read())["hugealloc"]
print("version", h["version"])
print("keys", " ".join(sorted(h)))
if "stats" in h:
    print("allocated", h["stats"]["allocated"])
    print("opt.thp", h["opt"]["thp"])
    print("opt.dirty_decay_ms", h["opt"]["dirty_decay_ms"])
for k, a in h.get("arenas", {}).items():
    print("arena", k, "bins" in a, "large.allocated" in a, "lock_waits" in a,
          "thp.huge_advised" in a, a.get("thp", "-"))
    for j, b in a.get("bins", {}).items():
        assert b["nmalloc"] >= b["curregs"], (k, j, b)
"#;

fn json_check(json: &str) -> Option<String> {
    let out = python_json_check(json, JSON_CHECK)?;
    assert!(
        out.status.success(),
        "the JSON does not parse: {}\n{json}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

#[test]
fn ctl_json_output_parses_and_letters_leave_parts_out() {
    // Something in a bin of arena 0 and a large block, so arena 0 is printed in full.
    let keep: Vec<usize> = (0..50).map(|_| in_arena_0(100) as usize).collect();
    let large = in_arena_0(100 << 10);
    let all = printed("J");
    assert!(
        all.starts_with(&format!(
            "{{\"hugealloc\":{{\"version\":\"{}\",\"stats\":{{",
            env!("CARGO_PKG_VERSION")
        )),
        "{all}"
    );
    assert!(all.ends_with("}}\n"));
    if let Some(summary) = json_check(&all) {
        assert!(
            summary.contains("keys arenas opt stats version"),
            "{summary}"
        );
        assert!(
            summary.contains("arena merged True True True True -"),
            "{summary}"
        );
        assert!(
            summary.contains("arena 0 True True True True "),
            "{summary}"
        );
    }
    let some = printed("Jgblxh");
    assert!(!some.contains("\"stats\":"), "{some}");
    if let Some(summary) = json_check(&some) {
        assert!(summary.contains("keys arenas version"), "{summary}");
        assert!(
            summary.contains("arena 0 False False False False "),
            "{summary}"
        );
    }
    let bare = printed("Jgma");
    if let Some(summary) = json_check(&bare) {
        assert!(summary.contains("keys version"), "{summary}");
    }
    for p in keep {
        // SAFETY: p is live.
        unsafe { alloc::free(p as *mut u8) };
    }
    // SAFETY: large is live.
    unsafe { alloc::free(large) };
}

#[test]
fn ctl_text_output_names_each_figure_by_its_ctl_name() {
    let keep = in_arena_0(100);
    let text = printed("");
    for line in text.lines() {
        assert!(line.starts_with("hugealloc: "), "{line}");
    }
    for want in [
        "hugealloc: version: ",
        "hugealloc: opt.thp: ",
        "hugealloc: stats.allocated: ",
        "hugealloc: stats.arenas.4096.pactive: ",
        "hugealloc: stats.arenas.4096.large.allocated: ",
        "hugealloc: stats.arenas.4096.lock_waits: ",
        "hugealloc: stats.arenas.4096.thp.huge_advised: ",
        "hugealloc: stats.arenas.0.nthreads: ",
        "hugealloc: arena.0.thp: ",
        "hugealloc: arena.0.dirty_decay_ms: ",
        "hugealloc: stats.arenas.0.bins.<j>: ",
    ] {
        assert!(text.contains(want), "{want} missing from\n{text}");
    }
    // Each figure line's value is what the name reads now (or was, for figures that move).
    let line = text
        .lines()
        .find(|l| l.starts_with("hugealloc: stats.arenas.0.page_chunks: "))
        .unwrap();
    let v: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(v >= 1);
    let parts = printed("gmblxh");
    assert!(!parts.contains("hugealloc: stats.allocated: "));
    assert!(!parts.contains("stats.arenas.4096."));
    assert!(!parts.contains("bins"));
    assert!(!parts.contains("large.allocated"));
    assert!(!parts.contains("lock_waits"));
    assert!(!parts.contains("thp.huge_advised"));
    assert!(parts.contains("hugealloc: stats.arenas.0.small.allocated: "));
    // SAFETY: keep is live.
    unsafe { alloc::free(keep) };
}

// ---- child processes: opt.* under HUGEALLOC_CONF, printing at exit ----

const CHILD: &str = "HUGEALLOC_CTL_TEST_CHILD";

fn run_child(scenario: &str, conf: &str) -> Output {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "ctl_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, scenario)
        .env("HUGEALLOC_CONF", conf)
        .output()
        .unwrap()
}

#[test]
#[ignore = "a helper: the other tests run it in a child process"]
fn ctl_child() {
    let Ok(scenario) = std::env::var(CHILD) else {
        return;
    };
    match scenario.as_str() {
        "opt" => {
            for name in [
                "opt.narenas",
                "opt.tcache",
                "opt.tcache_max",
                "opt.tcache_nslots_small_max",
                "opt.thp",
                "opt.thp_threshold",
                "opt.metadata_thp",
                "opt.arena.1.thp",
                "opt.arena.2.thp",
                "opt.dirty_decay_ms",
                "opt.dirty_max",
                "opt.stats_print_opts",
                "opt.zero",
                "arenas.dirty_decay_ms",
                "arena.0.dirty_decay_ms",
                "arena.0.thp",
            ] {
                println!("RESULT {name}={:?}", ctl::read(name).unwrap());
            }
            // The C view of a string option.
            let s = mallctl_read::<*const c_char>("opt.stats_print_opts", 8).unwrap();
            // SAFETY: mallctl returns a program-lifetime NUL-terminated string.
            println!("RESULT C opt.stats_print_opts={:?}", unsafe {
                CStr::from_ptr(s)
            });
        }
        "uncached" => {
            // Under `tcache_max:1k` the bins of 2 KiB and 1 KiB + 8 have capacity 0: `malloc`'s
            // empty-bin miss and `free`'s full-bin push (the fast paths' direct refill and
            // flush) send every block to the arena, one at a time; 512 B is cached.
            let a = read_u64("thread.arena");
            for size in [2048usize, 1032, 512] {
                let class = hugealloc::testing::size_class::class_of(size);
                let count = |n: &str| read_u64(&format!("stats.arenas.{a}.bins.{class}.{n}"));
                let (m0, f0) = (count("nmalloc"), count("ndalloc"));
                let blocks: Vec<*mut u8> = (0..100)
                    .map(|i| {
                        let p = alloc::malloc(size);
                        assert!(!p.is_null());
                        // SAFETY: a live block of `size` bytes.
                        unsafe { p.write_bytes(i as u8, size) };
                        p
                    })
                    .collect();
                let m1 = count("nmalloc");
                for (i, &p) in blocks.iter().enumerate() {
                    // SAFETY: live, written above; freed once below.
                    assert_eq!(unsafe { *p.add(size - 1) }, i as u8);
                }
                for p in blocks {
                    // SAFETY: live, not used afterwards.
                    unsafe { alloc::free(p) };
                }
                let f1 = count("ndalloc");
                println!("RESULT {size} {} {}", m1 - m0, f1 - f0);
            }
        }
        "exit" => {
            let p = alloc::malloc(200);
            println!("RESULT allocated {}", !p.is_null());
        }
        other => panic!("unknown scenario {other}"),
    }
}

fn results(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.find("RESULT ").map(|i| l[i + 7..].to_string()))
        .collect()
}

/// A class past `tcache_max` has a bin of capacity 0: each block of it goes to and from its
/// arena alone (`nmalloc` and `ndalloc` count one per call), where a cached class moves in
/// batches and keeps its freed blocks.
#[test]
fn classes_past_tcache_max_go_to_the_arena_one_at_a_time() {
    let out = run_child("uncached", "tcache_max:1k");
    assert!(out.status.success(), "{out:?}");
    let got = results(&out);
    assert_eq!(got[..2], ["2048 100 100", "1032 100 100"], "{got:?}");
    // The 512 B bin keeps at least 17 of the 100 freed (it flushes 16 of 32 when full).
    let cached: Vec<u64> = got[2].split(' ').map(|v| v.parse().unwrap()).collect();
    assert!(cached[2] < 100, "512 B cached: {got:?}");
}

#[test]
fn ctl_opt_values_reflect_hugealloc_conf() {
    let out = run_child(
        "opt",
        "narenas:3,tcache:false,tcache_max:64k,tcache_nslots_small_max:300,thp:never,thp_threshold:8M,metadata_thp:always,\
         arena.2.thp:always,dirty_decay_ms:1234,dirty_max:1G,stats_print_opts:Jg,zero:true",
    );
    assert!(out.status.success(), "{out:?}");
    let got = results(&out);
    for want in [
        "opt.narenas=Unsigned(3)",
        "opt.tcache=Bool(false)",
        "opt.tcache_max=Size(65536)",
        "opt.tcache_nslots_small_max=Unsigned(300)",
        "opt.thp=Str(\"never\")",
        "opt.thp_threshold=Size(8388608)",
        "opt.metadata_thp=Str(\"always\")",
        "opt.arena.1.thp=Str(\"inherit\")",
        "opt.arena.2.thp=Str(\"always\")",
        "opt.dirty_decay_ms=I64(1234)",
        "opt.dirty_max=Size(1073741824)",
        "opt.stats_print_opts=Str(\"Jg\")",
        "opt.zero=Bool(true)",
        "arenas.dirty_decay_ms=I64(1234)",
        "arena.0.dirty_decay_ms=I64(1234)",
        "arena.0.thp=Str(\"never\")",
        "C opt.stats_print_opts=\"Jg\"",
    ] {
        assert!(got.iter().any(|l| l == want), "{want} not in {got:?}");
    }
    // And the defaults, without a configuration.
    let out = run_child("opt", "");
    let got = results(&out);
    assert!(
        got.iter().any(|l| l == "opt.tcache_max=Size(32768)"),
        "{got:?}"
    );
    assert!(
        got.iter()
            .any(|l| l == "opt.tcache_nslots_small_max=Unsigned(2048)"),
        "{got:?}"
    );
    assert!(
        got.iter().any(|l| l == "opt.stats_print_opts=Str(\"\")"),
        "{got:?}"
    );
}

#[test]
fn ctl_stats_print_at_exit_follows_stats_print_opts() {
    let out = run_child("exit", "stats_print:true,stats_print_opts:J");
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let start = stderr.find("{\"hugealloc\":").expect("JSON on stderr");
    let json = &stderr[start..];
    if let Some(summary) = json_check(json) {
        assert!(
            summary.contains("keys arenas opt stats version"),
            "{summary}"
        );
    }
    let out = run_child("exit", "stats_print:true,stats_print_opts:gm");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("hugealloc: stats.arenas.0.nthreads: "),
        "{stderr}"
    );
    assert!(!stderr.contains("hugealloc: stats.allocated: "), "{stderr}");
    assert!(!stderr.contains("stats.arenas.4096."), "{stderr}");
}

// ---- THP advice follows arena.<i>.thp changed at run time ----

fn thp_mode() -> Option<String> {
    let s = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    let start = s.find('[')? + 1;
    let end = s[start..].find(']')? + start;
    Some(s[start..end].to_string())
}

/// The `VmFlags` of the mapping holding `addr`.
fn vm_flags_of(addr: usize) -> String {
    common::mapping_of(addr).0
}

fn has_flag(flags: &str, f: &str) -> bool {
    flags.split_whitespace().any(|x| x == f)
}

#[test]
fn ctl_arena_thp_changes_the_advice_of_chunks_mapped_afterwards() {
    match thp_mode() {
        None => {
            eprintln!("skipped: /sys/kernel/mm/transparent_hugepage/enabled is missing");
            return;
        }
        Some(m) if m == "never" => {
            eprintln!("skipped: THP is disabled on this system (never)");
            return;
        }
        Some(_) => {}
    }
    let i = new_arena();
    let name = format!("arena.{i}.thp");
    let big = |fill: u8| {
        let p = alloc::alloc_in(Some(i), 8 << 20, 1, false, false);
        assert!(!p.is_null());
        // SAFETY: p is a live 8 MiB block.
        unsafe { std::ptr::write_bytes(p, fill, 4096) };
        p
    };
    ctl::write(&name, CtlValue::Str(c"never")).unwrap();
    let never = big(1);
    let f = vm_flags_of(never as usize);
    assert!(has_flag(&f, "nh") && !has_flag(&f, "hg"), "never: {f}");
    ctl::write(&name, CtlValue::Str(c"always")).unwrap();
    let always = big(2);
    let f = vm_flags_of(always as usize);
    assert!(has_flag(&f, "hg") && !has_flag(&f, "nh"), "always: {f}");
    // Set back to never: the next chunks get nh, while the block mapped before keeps hg.
    ctl::write(&name, CtlValue::Str(c"never")).unwrap();
    let never_again = big(3);
    let f = vm_flags_of(never_again as usize);
    assert!(has_flag(&f, "nh"), "never again: {f}");
    assert!(has_flag(&vm_flags_of(always as usize), "hg"));
    // The advice is counted too.
    assert!(read_u64(&format!("stats.arenas.{i}.thp.huge_advised")) >= 8 << 20);
    assert!(read_u64(&format!("stats.arenas.{i}.thp.nohuge_advised")) >= 16 << 20);
    // SAFETY: all are live.
    unsafe {
        alloc::free(never);
        alloc::free(always);
        alloc::free(never_again);
    }
}

#[test]
fn ctl_reads_back_metadata_thp_defer() {
    let out = run_child("opt", "metadata_thp:defer");
    assert!(out.status.success(), "{out:?}");
    let got = results(&out);
    assert!(
        got.iter().any(|l| l == "opt.metadata_thp=Str(\"defer\")"),
        "{got:?}"
    );
}
