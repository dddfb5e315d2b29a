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
/// allocator in use does not export it). `--batch K` allocates K blocks, then frees them in
/// allocation order, until N blocks went through (the last batch may be shorter): the blocks
/// then go through the thread cache's refill and flush, as in criterion's `batch` bench. The
/// first batch's pointers are checked to be distinct (`distinct=` on the result line), which
/// costs the same in every run, so it cancels out of a difference of two runs.
pub fn pairs(args: &Args) -> Result<(), String> {
    let n: u64 = args.number(1_000_000)?;
    let bytes: usize = args.get("bytes", 64)?;
    let via: String = args.get("via", "c".to_string())?;
    let how: String = args.get("free", "plain".to_string())?;
    let batch: usize = args.get("batch", 1)?;
    if batch == 0 {
        return Err("--batch: at least 1".to_string());
    }
    let sized: Option<SizedFree> = match how.as_str() {
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
            Some(unsafe { std::mem::transmute::<*mut libc::c_void, SizedFree>(f) })
        }
        other => return Err(format!("--free {other}: plain, sized or sdallocx")),
    };
    if batch > 1 {
        return pairs_batched(n, bytes, &via, batch, sized);
    }
    let start = crate::measure::Mark::now();
    if via == "rust" {
        let mut sum = 0usize;
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
    let sum = c_pairs(n, bytes, sized);
    common::finish("pairs", n, 1, start, sum as u64, &format!("bytes={bytes}"));
    Ok(())
}

/// `pairs`'s C loop; returns a checksum of the addresses. A function of its own, not inlined,
/// so the registers it gets (and the instructions per pair it adds to the count, 12 with
/// plain `free`) do not change with the code around it.
#[inline(never)]
fn c_pairs(n: u64, bytes: usize, sized: Option<SizedFree>) -> usize {
    let mut sum = 0usize;
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
    sum
}

/// The sized free `pairs --free` looked up.
type SizedFree = unsafe extern "C" fn(*mut libc::c_void, usize, libc::c_int);

/// `pairs --batch K` with K > 1 (a function of its own: the plain pair's loop above keeps the
/// code it was measured with).
fn pairs_batched(
    n: u64,
    bytes: usize,
    via: &str,
    batch: usize,
    sized: Option<SizedFree>,
) -> Result<(), String> {
    let start = crate::measure::Mark::now();
    let (sum, distinct) = if via == "rust" {
        use std::alloc::{GlobalAlloc, Layout};
        let layout = Layout::from_size_align(bytes.max(1), 16).map_err(|e| e.to_string())?;
        batches(
            n,
            batch,
            // SAFETY: a non-zero layout.
            || unsafe { hugealloc::HugeAlloc.alloc(std::hint::black_box(layout)) },
            // SAFETY: `p` came from `alloc` with this layout and is freed once.
            |p| unsafe { hugealloc::HugeAlloc.dealloc(std::hint::black_box(p), layout) },
        )
    } else if via == "c" {
        batches(
            n,
            batch,
            // SAFETY: malloc of a non-zero size.
            || unsafe { libc::malloc(std::hint::black_box(bytes)).cast() },
            // SAFETY: `p` came from malloc of `bytes` and is freed once.
            |p| unsafe {
                match sized {
                    None => libc::free(std::hint::black_box(p).cast()),
                    Some(f) => f(std::hint::black_box(p).cast(), bytes, 0),
                }
            },
        )
    } else {
        return Err(format!("--via: c or rust, not {via:?}"));
    };
    let rust = if via == "rust" { " via=rust" } else { "" };
    common::finish(
        "pairs",
        n,
        1,
        start,
        sum as u64,
        &format!("bytes={bytes}{rust} batch={batch} distinct={distinct}"),
    );
    Ok(())
}

/// `pairs --batch`'s loop: `n` blocks from `alloc`, `batch` at a time, each batch given to
/// `free` in allocation order. Returns a checksum of the addresses and how many distinct
/// pointers the first batch held.
fn batches(
    n: u64,
    batch: usize,
    alloc: impl Fn() -> *mut u8,
    free: impl Fn(*mut u8),
) -> (usize, usize) {
    let mut sum = 0usize;
    let mut ptrs = vec![std::ptr::null_mut::<u8>(); batch];
    let (mut left, mut distinct) = (n, 0);
    while left > 0 {
        let k = (batch as u64).min(left) as usize;
        left -= k as u64;
        for slot in ptrs.iter_mut().take(k) {
            let p = alloc();
            assert!(!p.is_null(), "out of memory");
            sum = sum.wrapping_add(p as usize & 0xff);
            *slot = p;
        }
        std::hint::black_box(&mut ptrs);
        if distinct == 0 {
            let mut seen = ptrs[..k].to_vec();
            seen.sort_unstable();
            seen.dedup();
            distinct = seen.len();
        }
        for &p in ptrs.iter().take(k) {
            free(p);
        }
    }
    (sum, distinct)
}
