//! Statistics. Every process-wide figure is declared once, in the `global_stats!` list below,
//! from which the `Stats` struct and its printing come. Figures are gathered on request from
//! the arenas' counters (kept under their locks), so nothing on a hot path is shared.

use crate::config::Options;
use crate::size_class::CHUNK;
use crate::sync::Ordering;

macro_rules! global_stats {
    ($($name:ident: $doc:literal),* $(,)?) => {
        /// Process-wide figures in bytes (meanings as jemalloc's `stats.*`).
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct Stats {
            $(#[doc = $doc] pub $name: usize,)*
        }

        impl Stats {
            /// Each figure's name, value and meaning, in declaration order.
            pub fn fields(&self) -> [(&'static str, usize, &'static str); global_stats!(@count $($name)*)] {
                [$((stringify!($name), self.$name, $doc),)*]
            }
        }
    };
    (@count $($n:ident)*) => { 0 $(+ global_stats!(@one $n))* };
    (@one $n:ident) => { 1 };
}

global_stats! {
    allocated: "bytes in blocks the program holds (usable sizes), including thread-cached blocks",
    active: "bytes of pages in active slabs, page runs and huge blocks",
    metadata: "bytes mapped for allocator metadata",
    resident: "bytes likely resident: active pages, dirty retained pages and metadata",
    mapped: "bytes of chunks mapped by arenas, plus metadata",
    retained: "bytes of address space kept clean (purged or never touched) for reuse",
    dirty: "bytes of freed pages kept dirty (resident) for reuse",
    huge_advised: "bytes of chunks advised MADV_HUGEPAGE",
    nohuge_advised: "bytes of chunks advised MADV_NOHUGEPAGE",
}

/// Gathers the process-wide figures.
pub fn stats() -> Stats {
    crate::thread::ensure_init();
    let mut s = Stats::default();
    let mut chunk_bytes = 0usize;
    let mut clean = 0usize;
    for i in 0..crate::thread::narenas() {
        let a = crate::thread::arena(i).snapshot();
        let st = &a.arena;
        s.allocated += (a.small_allocated + st.large_allocated + st.huge_allocated) as usize;
        s.active += st.active_pages as usize * crate::os::PAGE + st.huge_active as usize;
        s.dirty += (a.dirty_page_bytes + st.dirty_extent_bytes) as usize;
        chunk_bytes += st.chunks as usize * CHUNK;
        clean += st.clean_extent_bytes as usize;
        s.huge_advised += st.advised_huge_bytes as usize;
        s.nohuge_advised += st.advised_nohuge_bytes as usize;
    }
    // Relaxed: statistics.
    s.metadata = crate::base::BASE.mapped_bytes.load(Ordering::Relaxed) as usize;
    let reserved = crate::chunk::SOURCE.reserved_bytes.load(Ordering::Relaxed) as usize;
    s.resident = s.active + s.dirty + s.metadata;
    s.mapped = chunk_bytes + s.metadata;
    s.retained = clean + reserved.saturating_sub(chunk_bytes);
    s
}

/// Writes the figures as `name: value` lines through `out`.
pub fn write_stats(s: &Stats, out: &mut dyn FnMut(&[u8])) {
    for (name, value, _) in s.fields() {
        let mut m = crate::diag::Msg::new();
        m.str("stats.")
            .str(name)
            .str(": ")
            .dec(value as u64)
            .str("\n");
        // One write per line, so processes sharing stderr do not interleave inside a line.
        out(m.as_bytes());
    }
}

/// The descriptor stats are printed to at exit.
static STATS_FD: crate::sync::AtomicI32 = crate::sync::AtomicI32::new(2);

/// Hooks printing at exit when `stats_print:true`.
pub fn at_init(opts: &Options) {
    if opts.stats_print {
        // Programs (coreutils among them) close stderr in their own exit handlers, which run
        // before ours: print to a duplicate taken now.
        STATS_FD.store(crate::os::dup_stderr(), Ordering::Relaxed);
        extern "C" fn print_at_exit() {
            // Relaxed: written once at init, before this handler can run.
            let fd = STATS_FD.load(Ordering::Relaxed);
            write_stats(&stats(), &mut |b| crate::os::write_fd(fd, b));
        }
        // SAFETY: registering a plain function; atexit may allocate, which the init allows.
        unsafe { libc::atexit(print_at_exit) };
    }
}
