//! The public Rust API, re-exported by the crate root: the allocator types (`HugeAlloc`,
//! `ConfiguredAlloc`, `Arena`), the process-wide functions (`stats`, `purge`, `thp_status`,
//! `usable_size`, `thread_set_arena`) and heap profiling (`profile`). Each is a thin forward
//! into the layers below: the first use runs the global init, and nothing here holds state.
//! Not built under loom, which has no process-wide allocator.

use crate::hugetlb::HugetlbStatus;
use crate::thp::{SystemMode, Thp, ThpStatus};
use crate::{alloc, thread};
use core::alloc::{GlobalAlloc, Layout};

pub use crate::config::Hugetlb;
pub use crate::ctl::{CtlError, CtlValue};
pub use crate::stats::Stats;

/// Gathers the process-wide figures.
pub fn stats() -> Stats {
    crate::init::ensure_init();
    crate::stats::stats()
}

/// The allocator: the program's global allocator, or called directly through
/// `GlobalAlloc`. Options come from the environment (`HUGEALLOC_CONF`) and the other
/// sources of the crate guide; [`HugeAlloc::with_conf`] compiles some in.
///
/// ```
/// use hugealloc::HugeAlloc;
///
/// #[global_allocator]
/// static GLOBAL: HugeAlloc = HugeAlloc;
///
/// fn main() {
///     let s = String::from("served by hugealloc");
///     // SAFETY: the string's buffer is a live block from the global allocator.
///     let usable = unsafe { hugealloc::usable_size(s.as_ptr()) };
///     assert!(usable >= s.len());
/// }
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct HugeAlloc;

impl HugeAlloc {
    /// The allocator with a configuration string compiled in, as a [`ConfiguredAlloc`]
    /// (the type of the `#[global_allocator]` static). The string is applied at the first
    /// allocation, after every other source (`HUGEALLOC_CONF` included), so its options win;
    /// a bad pair gets a one-line warning on stderr and is ignored.
    ///
    /// ```
    /// use hugealloc::{ConfiguredAlloc, HugeAlloc};
    ///
    /// #[global_allocator]
    /// static GLOBAL: ConfiguredAlloc = HugeAlloc::with_conf("thp:never,narenas:2");
    ///
    /// fn main() {
    ///     let v = vec![1u32; 1000];
    ///     assert_eq!(v.iter().sum::<u32>(), 1000);
    ///     // The compiled-in options are in effect.
    ///     let thp = hugealloc::ctl::read("opt.thp");
    ///     assert_eq!(thp, Ok(hugealloc::CtlValue::Str(c"never")));
    /// }
    /// ```
    pub const fn with_conf(conf: &'static str) -> ConfiguredAlloc {
        ConfiguredAlloc { conf }
    }
}

// SAFETY: every method forwards to the allocator's entry points, which honour the size and
// alignment of the layout and return null on failure.
unsafe impl GlobalAlloc for HugeAlloc {
    #[inline(always)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        alloc::alloc(layout.size(), layout.align())
    }
    #[inline(always)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: GlobalAlloc's contract: ptr is a live block from this allocator,
        // allocated with this layout.
        unsafe { alloc::free_layout(ptr, layout.size(), layout.align()) }
    }
    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        alloc::alloc_zeroed(layout.size(), layout.align())
    }
    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: GlobalAlloc's contract: ptr is live with this layout.
        unsafe { alloc::realloc(ptr, new_size, layout.align()) }
    }
}

/// `HugeAlloc` with a compiled-in configuration string (see `HugeAlloc::with_conf`).
#[derive(Clone, Copy, Debug)]
pub struct ConfiguredAlloc {
    conf: &'static str,
}

impl ConfiguredAlloc {
    #[inline(always)]
    fn configure(&self) {
        if !crate::init::is_ready() {
            crate::init::set_api_conf(self.conf.as_bytes());
        }
    }
}

// SAFETY: forwards to HugeAlloc after recording the configuration, which the first
// allocation (the global init) applies.
unsafe impl GlobalAlloc for ConfiguredAlloc {
    #[inline(always)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.configure();
        // SAFETY: forwarded contract.
        unsafe { HugeAlloc.alloc(layout) }
    }
    #[inline(always)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { HugeAlloc.dealloc(ptr, layout) }
    }
    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.configure();
        // SAFETY: forwarded contract.
        unsafe { HugeAlloc.alloc_zeroed(layout) }
    }
    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded contract.
        unsafe { HugeAlloc.realloc(ptr, layout, new_size) }
    }
}

/// Heap profiling (`prof:true`): dumps of the sampled live heap. See `docs/profiling.md`.
pub mod profile {
    extern crate alloc as std_alloc;
    use std_alloc::vec::Vec;

    /// Writes the profile (jemalloc's `heap_v2` text, read by `jeprof` and
    /// `hugealloc profile`) to `path`. False when profiling is off (`prof:false`) or the
    /// file cannot be written.
    pub fn dump(path: &str) -> bool {
        crate::init::ensure_init();
        crate::prof::dump_to_path(path.as_bytes())
    }

    /// The profile as bytes (as `dump` writes it); `None` when profiling is off. The
    /// profile is written to an anonymous file first and read back here, after every
    /// lock of the profiler is released, so this vector's allocation cannot deadlock.
    pub fn bytes() -> Option<Vec<u8>> {
        crate::init::ensure_init();
        let (fd, len) = crate::prof::dump_to_memfd()?;
        let mut v: Vec<u8> = std_alloc::vec![0; len as usize];
        let mut at = 0;
        while at < v.len() {
            let n = crate::os::read_at(fd, at as u64, &mut v[at..]);
            if n == 0 {
                break;
            }
            at += n;
        }
        v.truncate(at);
        crate::os::close(fd);
        Some(v)
    }

    /// Whether profiling is on (`opt.prof`).
    pub fn enabled() -> bool {
        crate::init::ensure_init();
        crate::prof::enabled()
    }

    /// Sampled totals, not scaled: (live objects, live bytes, allocated objects,
    /// allocated bytes) since start or the last `prof.reset`.
    pub fn sampled_totals() -> [u64; 4] {
        crate::prof::totals()
    }

    /// `prof.reset`: forgets every sample so far.
    pub fn reset() {
        crate::prof::reset(None)
    }
}

/// The system's transparent huge page settings: `enabled` (as read at init), `defrag` and
/// whether hugealloc's `MADV_HUGEPAGE` advice has any effect here.
///
/// ```
/// use hugealloc::SystemMode;
///
/// let st = hugealloc::thp_status();
/// // Advice works where the system setting is `always` or `madvise`.
/// assert_eq!(
///     st.advice_effective,
///     matches!(st.enabled, SystemMode::Always | SystemMode::Madvise)
/// );
/// if !st.advice_effective {
///     eprintln!("no huge pages here: {:?} (see `hugealloc thp`)", st.enabled);
/// }
/// ```
pub fn thp_status() -> ThpStatus {
    crate::init::ensure_init();
    let enabled = crate::arena::system_mode();
    let mut buf = [0u8; 128];
    let defrag =
        match crate::os::read_file(b"/sys/kernel/mm/transparent_hugepage/defrag\0", &mut buf) {
            Some(n) => crate::thp::parse_defrag(&buf[..n]),
            None => crate::thp::Defrag::Unknown,
        };
    ThpStatus {
        enabled,
        defrag,
        advice_effective: matches!(enabled, SystemMode::Always | SystemMode::Madvise),
    }
}

/// The explicit huge page pools (2 MiB, then 1 GiB): their sizes and free pages as sysfs
/// shows them, and whether a page can be had now (one is mapped, touched and given back:
/// the pool is as before afterwards). What `hugetlb:2M|1G` and `hugetlb_reserve` draw
/// from (`docs/hugetlb.md`); `hugealloc thp` prints the same. Allocates nothing.
///
/// ```
/// use hugealloc::Hugetlb;
///
/// let st = hugealloc::hugetlb_status();
/// assert_eq!(st.pools[0].source, Hugetlb::Pages2M);
/// assert_eq!(st.pools[1].page_bytes, 1 << 30);
/// for pool in st.pools {
///     // No page can be had from a pool the kernel does not have.
///     assert!(pool.present || !pool.test_page);
///     assert!(pool.available() <= pool.free);
///     if !pool.test_page {
///         eprintln!(
///             "hugetlb:{} would fall back ({}); reserve pages with: echo N > {}nr_hugepages",
///             pool.source.name(),
///             pool.why_not,
///             pool.sysfs_dir
///         );
///     }
/// }
/// ```
pub fn hugetlb_status() -> HugetlbStatus {
    crate::hugetlb::status()
}

/// The usable size of a live block from hugealloc (at least the size asked for: the size
/// of its class, which the program may use whole).
///
/// ```
/// use core::alloc::{GlobalAlloc, Layout};
/// use hugealloc::HugeAlloc;
///
/// let layout = Layout::from_size_align(100, 8).unwrap();
/// // SAFETY: the size is not zero.
/// let p = unsafe { HugeAlloc.alloc(layout) };
/// assert!(!p.is_null());
/// // SAFETY: p is a live block from hugealloc.
/// let n = unsafe { hugealloc::usable_size(p) };
/// assert!(n >= 100 && n < 200);
/// // SAFETY: p is live and was allocated with this layout.
/// unsafe { HugeAlloc.dealloc(p, layout) };
/// ```
///
/// # Safety
/// `ptr` is a live block from this allocator.
pub unsafe fn usable_size(ptr: *const u8) -> usize {
    // SAFETY: forwarded contract.
    unsafe { alloc::usable_size(ptr) }
}

/// Moves the calling thread to arena `i`: its later allocations (through [`HugeAlloc`],
/// the thread cache included, which is flushed first) come from that arena. False if there
/// is no such arena. Arena indices are those of [`Arena::index`] and of `arena.<i>.*` in
/// [`ctl`](crate::ctl).
///
/// ```
/// use hugealloc::{Arena, Thp};
///
/// let a = Arena::new(Thp::Never).expect("an arena");
/// assert!(hugealloc::thread_set_arena(a.index()));
/// assert_eq!(
///     hugealloc::ctl::read("thread.arena"),
///     Ok(hugealloc::CtlValue::Unsigned(a.index() as u32))
/// );
/// assert!(!hugealloc::thread_set_arena(usize::MAX));
/// ```
pub fn thread_set_arena(i: usize) -> bool {
    crate::init::ensure_init();
    thread::set_thread_arena(i)
}

/// Returns the free memory every arena keeps dirty for reuse to the kernel now, after
/// flushing the calling thread's cache, instead of waiting for decay
/// (`dirty_decay_ms`); returns the bytes purged. Resident memory drops; the address
/// space stays reserved (`retained`) for later use.
///
/// ```
/// use core::alloc::{GlobalAlloc, Layout};
/// use hugealloc::HugeAlloc;
///
/// let layout = Layout::from_size_align(8 << 20, 4096).unwrap();
/// // SAFETY: the size is not zero.
/// let p = unsafe { HugeAlloc.alloc(layout) };
/// assert!(!p.is_null());
/// // SAFETY: p holds 8 MiB.
/// unsafe { p.write_bytes(1, 8 << 20) };
/// // SAFETY: p is live and was allocated with this layout.
/// unsafe { HugeAlloc.dealloc(p, layout) };
/// assert!(hugealloc::stats().dirty > 0); // kept for reuse
/// assert!(hugealloc::purge() >= 8 << 20);
/// assert_eq!(hugealloc::stats().dirty, 0);
/// ```
pub fn purge() -> usize {
    crate::ctl::purge_all()
}

/// A handle on an arena of its own, created at run time with a THP policy. Allocating through
/// it (it implements `GlobalAlloc`) takes memory from that arena only, bypassing the thread
/// cache; blocks may be freed through any hugealloc entry point. Use one to keep, say, a
/// large table on huge pages (`Thp::Always`) while the rest of the program's memory
/// follows the default, or the other way round (`Thp::Never`).
///
/// ```
/// use core::alloc::{GlobalAlloc, Layout};
/// use hugealloc::{Arena, Thp};
///
/// let table = Arena::new(Thp::Always).expect("an arena");
/// assert_eq!(table.thp(), Thp::Always);
/// let layout = Layout::from_size_align(8 << 20, 2 << 20).unwrap();
/// // SAFETY: the size is not zero.
/// let p = unsafe { table.alloc(layout) };
/// assert!(!p.is_null());
/// // SAFETY: p holds 8 MiB.
/// unsafe { p.write_bytes(0, 8 << 20) };
/// let mapped = hugealloc::ctl::read(&format!("stats.arenas.{}.mapped", table.index()));
/// assert!(matches!(mapped, Ok(hugealloc::CtlValue::Size(n)) if n >= 8 << 20));
/// // Huge-backed where the system allows it (see `thp_status`); never more than mapped.
/// assert!(table.huge_backed_bytes() <= 16 << 20);
/// // SAFETY: p is live and was allocated with this layout.
/// unsafe { table.dealloc(p, layout) };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arena {
    index: usize,
}

impl Arena {
    /// Creates an arena with `policy`; `None` when the arena table is full or memory short.
    /// Arenas live as long as the process.
    pub fn new(policy: Thp) -> Option<Arena> {
        crate::init::ensure_init();
        crate::init::policy_changed(policy);
        crate::registry::arena_create(policy).map(|index| Arena { index })
    }

    /// Creates an arena with `policy` whose chunks come from `source`: ordinary memory
    /// (`Hugetlb::Off`) or the kernel's pool of explicit 2 MiB or 1 GiB pages, falling back
    /// to ordinary memory (with `policy`) where the pool cannot serve (docs/hugetlb.md).
    ///
    /// ```
    /// use hugealloc::{Arena, Hugetlb, Thp};
    ///
    /// let a = Arena::with_hugetlb(Thp::Default, Hugetlb::Pages2M).expect("an arena");
    /// assert_eq!(a.hugetlb(), Hugetlb::Pages2M);
    /// ```
    pub fn with_hugetlb(policy: Thp, source: Hugetlb) -> Option<Arena> {
        let a = Arena::new(policy)?;
        // A new arena holds no chunks yet: the source can be set.
        crate::registry::arena(a.index).set_hugetlb(source);
        Some(a)
    }

    /// The arena's page source (`arena.<i>.hugetlb`).
    pub fn hugetlb(&self) -> Hugetlb {
        crate::registry::arena(self.index).hugetlb()
    }

    /// Changes the page source; only while the arena holds no chunks yet (false, nothing
    /// changed, after that).
    pub fn set_hugetlb(&self, source: Hugetlb) -> bool {
        crate::registry::arena(self.index).set_hugetlb(source)
    }

    /// The handle of existing arena `index` (0 is the first automatic arena).
    ///
    /// ```
    /// let a0 = hugealloc::Arena::from_index(0).expect("arena 0 always exists");
    /// assert_eq!(a0.index(), 0);
    /// assert_eq!(hugealloc::Arena::from_index(usize::MAX), None);
    /// ```
    pub fn from_index(index: usize) -> Option<Arena> {
        crate::init::ensure_init();
        crate::registry::arena_get(index).map(|_| Arena { index })
    }

    /// Bytes of this arena's chunks backed by huge pages now: `AnonHugePages` read from
    /// `/proc/self/smaps`, so it costs a read of that file (see the example of
    /// [`Arena`]).
    pub fn huge_backed_bytes(&self) -> u64 {
        crate::arena::huge_backed_bytes(self.index as u32)
    }

    /// The arena's index, as in `arena.<i>.*` and `stats.arenas.<i>.*` control names, in
    /// [`thread_set_arena`] and in C's `MALLOCX_ARENA(i)`.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The arena's THP policy.
    pub fn thp(&self) -> Thp {
        crate::registry::arena(self.index).thp()
    }

    /// Changes the policy; chunks put to use afterwards get the new advice (chunks in use
    /// keep theirs).
    ///
    /// ```
    /// use hugealloc::{Arena, Thp};
    ///
    /// let a = Arena::new(Thp::Madvise).expect("an arena");
    /// a.set_thp(Thp::Never);
    /// assert_eq!(a.thp(), Thp::Never);
    /// ```
    pub fn set_thp(&self, policy: Thp) {
        crate::registry::arena(self.index).set_thp(policy);
        crate::init::policy_changed(policy);
    }
}

// SAFETY: allocation honours size and alignment (alloc_in), frees go to the owning arena.
unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        alloc::alloc_in(
            Some(self.index),
            layout.size(),
            layout.align(),
            false,
            false,
        )
    }
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: GlobalAlloc's contract: ptr is a live block from hugealloc.
        unsafe { alloc::free_no_cache(ptr) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        alloc::alloc_in(Some(self.index), layout.size(), layout.align(), true, false)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: GlobalAlloc's contract: ptr is live with this layout.
        unsafe {
            if alloc::resize_in_place(ptr, new_size, layout.align()) >= new_size
                && alloc::good_size(new_size, layout.align()) == Some(alloc::usable_size(ptr))
            {
                return ptr;
            }
            let q = alloc::alloc_in(Some(self.index), new_size, layout.align(), false, false);
            if !q.is_null() {
                core::ptr::copy_nonoverlapping(ptr, q, layout.size().min(new_size));
                alloc::free_no_cache(ptr);
            }
            q
        }
    }
}
