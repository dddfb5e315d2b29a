//! `frag`: the fragmentation workload of issue 4. Many small objects, most freed, a few kept
//! in every chunk, so pages and huge pages stay pinned by a few survivors.
//!
//! 1. fill: objects of 16 to 512 bytes (mixed sizes) until `MIB` MiB are requested, each
//!    written in full;
//! 2. thin: all freed but one in `--keep` (64), spread evenly through the heap;
//! 3. refill: `MIB`/4 MiB of objects of 1 to 2 KiB, classes the freed slots cannot take, so the
//!    allocator must reuse free pages or map new ones;
//! 4. with `--wait-ms`, a pause and a little allocation activity of small, large and huge
//!    blocks (decay runs on activity), then a last look.
//!
//! After each phase it prints RSS (`/proc/self/statm`), `AnonHugePages` (`smaps_rollup`), the
//! bytes the program holds, and hugealloc's `resident` when it is the allocator. The pointer
//! lists live in an `mmap` of their own, advised `MADV_NOHUGEPAGE`, so the only heap is the
//! objects'; their resident size is subtracted in `heap_rss_mib`.

use crate::args::Args;
use crate::measure::{anon_huge_kib, mib, ms, rss_kib, Mark};
use crate::workload::mix;
use std::alloc::{alloc, dealloc, Layout};

/// A list of object pointers outside the heap under test.
struct Holder {
    base: *mut *mut u8,
    cap: usize,
    len: usize,
}

impl Holder {
    fn new(cap: usize) -> Holder {
        let bytes = cap.max(1) * 8;
        // SAFETY: a fresh anonymous mapping; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert!(p != libc::MAP_FAILED, "mmap of the pointer list failed");
        // SAFETY: advising our own fresh mapping; failure (no THP) is harmless.
        unsafe { libc::madvise(p, bytes, libc::MADV_NOHUGEPAGE) };
        Holder {
            base: p as *mut *mut u8,
            cap: cap.max(1),
            len: 0,
        }
    }

    fn push(&mut self, p: *mut u8) {
        assert!(self.len < self.cap);
        // SAFETY: len < cap, inside the mapping.
        unsafe { self.base.add(self.len).write(p) };
        self.len += 1;
    }

    fn get(&self, i: usize) -> *mut u8 {
        assert!(i < self.len);
        // SAFETY: i < len, a slot written by push.
        unsafe { self.base.add(i).read() }
    }

    fn set(&mut self, i: usize, p: *mut u8) {
        assert!(i < self.len);
        // SAFETY: i < len.
        unsafe { self.base.add(i).write(p) };
    }

    /// KiB of the list's pages that have been touched.
    fn touched_kib(&self) -> u64 {
        (self.len * 8).div_ceil(4096) as u64 * 4
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // SAFETY: our own mapping, of this length.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.cap * 8) };
    }
}

/// Size of small object `i` of the fill: 16 to 512 bytes, small sizes more common.
fn small_size(i: usize) -> usize {
    let r = mix(i as u64);
    let shift = 4 + r % 6; // 16 .. 512
    ((1usize << shift) + (r >> 8) as usize % (1usize << shift)).min(512)
}

/// Size of object `i` of the refill: 1 KiB to 2 KiB.
fn medium_size(i: usize) -> usize {
    1024 + (mix(i as u64 ^ 0xabcdef) % 1025) as usize
}

fn new_object(size: usize, fill: u8) -> *mut u8 {
    let layout = Layout::from_size_align(size, 8).unwrap();
    // SAFETY: non-zero layout. `black_box`: the activity phase's alloc-and-free pairs have no
    // other observable effect, and the compiler may otherwise elide them.
    let p = std::hint::black_box(unsafe { alloc(layout) });
    assert!(!p.is_null(), "out of memory");
    // SAFETY: a fresh block of `size` bytes.
    unsafe { p.write_bytes(fill, size) };
    p
}

/// # Safety
/// `p` came from `new_object(size, _)` and is freed once.
unsafe fn free_object(p: *mut u8, size: usize) {
    // SAFETY: the layout it was allocated with.
    unsafe { dealloc(p, Layout::from_size_align_unchecked(size, 8)) };
}

struct Phase {
    name: &'static str,
    rss_kib: Option<u64>,
    heap_rss_kib: Option<u64>,
    huge_kib: Option<u64>,
    live_bytes: usize,
    resident: String,
    ms: String,
}

fn look(name: &'static str, baseline: Option<u64>, lists_kib: u64, live: usize, m: Mark) -> Phase {
    let rss = rss_kib();
    let p = Phase {
        name,
        rss_kib: rss,
        heap_rss_kib: match (rss, baseline) {
            (Some(r), Some(b)) => Some(r.saturating_sub(b + lists_kib)),
            _ => None,
        },
        huge_kib: anon_huge_kib(),
        live_bytes: live,
        resident: crate::measure::allocator_resident_mib(),
        ms: ms(m.delta().wall),
    };
    println!(
        "phase {:>6}: {:>9} ms  rss {:>8} MiB  heap_rss {:>8} MiB  anon_huge {:>8} MiB  \
         live {:>8.1} MiB  allocator_resident {:>8} MiB",
        p.name,
        p.ms,
        mib(p.rss_kib),
        mib(p.heap_rss_kib),
        mib(p.huge_kib),
        p.live_bytes as f64 / (1 << 20) as f64,
        p.resident
    );
    p
}

pub fn run(args: &Args) -> Result<(), String> {
    let total_mib: usize = args.number(256)?;
    let keep: usize = args.get("keep", 64)?;
    let wait_ms: u64 = args.get("wait-ms", 0)?;
    if total_mib == 0 || keep == 0 {
        return Err("MIB and --keep must be at least 1".to_string());
    }
    let total = total_mib << 20;
    let baseline = rss_kib();
    let mut phases = Vec::new();

    // 1. fill
    let m = Mark::now();
    let mut objs = Holder::new(total / 16 + 1);
    let mut live = 0usize;
    while live < total {
        let size = small_size(objs.len);
        objs.push(new_object(size, objs.len as u8));
        live += size;
    }
    phases.push(look("fill", baseline, objs.touched_kib(), live, m));

    // 2. thin: keep one in `keep`, compacted to the front of the list.
    let m = Mark::now();
    let mut kept = 0usize;
    for i in 0..objs.len {
        let p = objs.get(i);
        if i % keep == 0 {
            objs.set(kept, p);
            kept += 1;
        } else {
            // SAFETY: object i was made with small_size(i) and is freed once.
            unsafe { free_object(p, small_size(i)) };
            live -= small_size(i);
        }
    }
    let n_fill = objs.len;
    phases.push(look("thin", baseline, objs.touched_kib(), live, m));

    // 3. refill with sizes the freed slots cannot take.
    let m = Mark::now();
    let mut more = Holder::new(total / 4 / 1024 + 1);
    let mut added = 0usize;
    while added < total / 4 {
        let size = medium_size(more.len);
        more.push(new_object(size, 0x5a));
        added += size;
    }
    live += added;
    let lists = objs.touched_kib() + more.touched_kib();
    phases.push(look("refill", baseline, lists, live, m));

    // 4. optional wait, then some activity so time-based decay gets a chance to run.
    if wait_ms > 0 {
        let m = Mark::now();
        std::thread::sleep(std::time::Duration::from_millis(wait_ms));
        // Small (thread-cache), large (arena page runs) and huge blocks, so every layer of
        // each allocator sees some traffic: jemalloc, for one, advances its decay only every
        // 1,000 arena-level events, which thread-cached small blocks do not reach.
        for (count, size) in [(10_000, 64), (20_000, 256 << 10), (16, 4 << 20)] {
            for i in 0..count {
                let p = new_object(size, i as u8);
                // SAFETY: just made with this size.
                unsafe { free_object(p, size) };
            }
        }
        phases.push(look("waited", baseline, lists, live, m));
    }

    // Free everything (not measured beyond a last look).
    let m = Mark::now();
    for k in 0..kept {
        // SAFETY: slot k holds object k * keep of the fill, still live.
        unsafe { free_object(objs.get(k), small_size(k * keep)) };
    }
    for i in 0..more.len {
        // SAFETY: made with medium_size(i), still live.
        unsafe { free_object(more.get(i), medium_size(i)) };
    }
    phases.push(look("freed", baseline, lists, 0, m));

    let mut line = format!(
        "result: sub=frag alloc={} mib={total_mib} keep={keep} objects={n_fill}",
        crate::global::allocator()
    );
    for p in &phases {
        line.push_str(&format!(
            " {0}_rss_mib={1} {0}_heap_rss_mib={2} {0}_anon_huge_mib={3}",
            p.name,
            mib(p.rss_kib),
            mib(p.heap_rss_kib),
            mib(p.huge_kib)
        ));
    }
    println!("{line}");
    Ok(())
}
