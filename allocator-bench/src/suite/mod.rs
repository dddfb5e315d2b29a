//! The allocator benchmark suite: workload programs with the allocation patterns of the
//! standard allocator benchmarks (cfrac, espresso, larson, xmalloc, cache-scratch,
//! cache-thrash, mstress, rptest, sh6bench, sh8bench), plus `realloc` growth, written here from
//! their published descriptions. Each takes one size argument (its unit is in its module doc),
//! runs 1 to 10 s at the default size on 2 cores, checks its own results (stamped blocks, or an
//! arithmetic identity) so a broken allocator fails loudly, and ends with a `result:` line.
//!
//! `pairs` is not a workload: it calls `malloc` and `free` of the C library directly (or, with
//! `--via rust`, hugealloc's `GlobalAlloc`), for counting instructions per pair under
//! `valgrind --tool=callgrind` (`scripts/callgrind_fastpath.sh`).

mod cache;
mod cfrac;
mod common;
mod espresso;
mod larson;
mod mstress;
mod realloc;
mod rptest;
mod sh;
mod xmalloc;

pub use common::Rng;

use crate::args::Args;

/// One workload of the suite.
pub struct Workload {
    pub name: &'static str,
    /// The size argument at which it runs 1-10 s on 2 cores.
    pub default_size: u64,
    /// What the size counts.
    pub unit: &'static str,
    /// The flags it accepts besides the size.
    pub flags: &'static [&'static str],
    pub run: fn(&Args) -> Result<(), String>,
}

const THREADS: &[&str] = &["threads"];

/// Every workload of the suite, in the order of the tables.
pub const WORKLOADS: &[Workload] = &[
    Workload {
        name: "cfrac",
        default_size: 1_500_000,
        unit: "continued fractions",
        flags: &[],
        run: cfrac::run,
    },
    Workload {
        name: "espresso",
        default_size: 3_000,
        unit: "problems",
        flags: &[],
        run: espresso::run,
    },
    Workload {
        name: "larson",
        default_size: 60_000_000,
        unit: "replacements",
        flags: THREADS,
        run: larson::run,
    },
    Workload {
        name: "xmalloc",
        default_size: 40_000_000,
        unit: "blocks",
        flags: THREADS,
        run: xmalloc::run,
    },
    Workload {
        name: "cache-scratch",
        default_size: 150_000,
        unit: "objects per thread",
        flags: THREADS,
        run: cache::run_scratch,
    },
    Workload {
        name: "cache-thrash",
        default_size: 100_000,
        unit: "objects per thread",
        flags: THREADS,
        run: cache::run_thrash,
    },
    Workload {
        name: "mstress",
        default_size: 5_000,
        unit: "rounds per thread",
        flags: THREADS,
        run: mstress::run,
    },
    Workload {
        name: "rptest",
        default_size: 3_000_000,
        unit: "operations per thread",
        flags: THREADS,
        run: rptest::run,
    },
    Workload {
        name: "sh6bench",
        default_size: 10_000,
        unit: "batches per thread",
        flags: THREADS,
        run: sh::run_sh6,
    },
    Workload {
        name: "sh8bench",
        default_size: 10_000,
        unit: "batches per thread",
        flags: THREADS,
        run: sh::run_sh8,
    },
    Workload {
        name: "realloc",
        default_size: 1_536,
        unit: "MiB appended",
        flags: &[],
        run: realloc::run,
    },
];

/// The workload called `name`.
pub fn find(name: &str) -> Option<&'static Workload> {
    WORKLOADS.iter().find(|w| w.name == name)
}

/// The default size of workload `name` (a name not in the table is a bug: panics).
pub fn default_size(name: &str) -> u64 {
    find(name).expect("a workload of the table").default_size
}

/// `pairs N`: N times `malloc(--bytes)` then `free`, straight through the C library's entry
/// points (whatever the binary's global allocator), for instruction counts per pair.
/// `--free sized` frees with C23's `free_sized(p, bytes)` instead, `--free sdallocx` with
/// jemalloc's `sdallocx(p, bytes, 0)` (each looked up with `dlsym`: an error where the
/// allocator in use does not export it).
pub fn pairs(args: &Args) -> Result<(), String> {
    let n: u64 = args.number(1_000_000)?;
    let bytes: usize = args.get("bytes", 64)?;
    let via: String = args.get("via", "c".to_string())?;
    let how: String = args.get("free", "plain".to_string())?;
    type Sized = unsafe extern "C" fn(*mut libc::c_void, usize, libc::c_int);
    let sized: Option<Sized> = match how.as_str() {
        "plain" => None,
        "sized" | "sdallocx" => {
            let name: &[u8] = if how == "sized" {
                b"free_sized\0"
            } else {
                b"sdallocx\0"
            };
            // SAFETY: a NUL-terminated name looked up in the global scope.
            let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr().cast()) };
            if f.is_null() {
                return Err(format!(
                    "--free {how}: the allocator in use does not export it"
                ));
            }
            // SAFETY: both have this C signature (`free_sized` takes no third argument, which
            // the x86-64 and AArch64 calling conventions let a caller pass and the callee
            // ignore).
            Some(unsafe { std::mem::transmute::<*mut libc::c_void, Sized>(f) })
        }
        other => return Err(format!("--free {other}: plain, sized or sdallocx")),
    };
    let start = crate::measure::Mark::now();
    let mut sum = 0usize;
    if via == "rust" {
        // hugealloc's `GlobalAlloc` called directly (this binary's global allocator is
        // `System`): Rust's sized `dealloc`, which `HUGEALLOC_CONF=prof:true` changes.
        use std::alloc::{GlobalAlloc, Layout};
        let layout = Layout::from_size_align(bytes.max(1), 16).map_err(|e| e.to_string())?;
        for _ in 0..n {
            // SAFETY: a non-zero layout; the block is freed at once with the same layout.
            unsafe {
                let p = hugealloc::HugeAlloc.alloc(std::hint::black_box(layout));
                assert!(!p.is_null(), "out of memory");
                sum = sum.wrapping_add(p as usize & 0xff);
                hugealloc::HugeAlloc.dealloc(std::hint::black_box(p), layout);
            }
        }
        common::finish(
            "pairs",
            n,
            1,
            start,
            sum as u64,
            &format!("bytes={bytes} via=rust"),
        );
        return Ok(());
    } else if via != "c" {
        return Err(format!("--via: c or rust, not {via:?}"));
    }
    for _ in 0..n {
        // SAFETY: malloc of a non-zero size; the result is freed at once (or is null), with
        // the size it was allocated with.
        unsafe {
            let p = libc::malloc(std::hint::black_box(bytes));
            assert!(!p.is_null(), "out of memory");
            sum = sum.wrapping_add(p as usize & 0xff);
            match sized {
                None => libc::free(std::hint::black_box(p)),
                Some(f) => f(std::hint::black_box(p), bytes, 0),
            }
        }
    }
    common::finish("pairs", n, 1, start, sum as u64, &format!("bytes={bytes}"));
    Ok(())
}
