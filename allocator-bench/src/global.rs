//! Which allocator the running program measures. The binaries choose their global allocator
//! (`src/main.rs` by cargo feature, `src/bin/hugealloc-workloads.rs` always `System`) and tell
//! this module once, at the start of `main`, with [`set`]; the workloads ask here, so no code
//! outside the two `main` files depends on features. Under `System`, `malloc` may be glibc's or
//! one preloaded with `LD_PRELOAD`: [`malloc_provider`] names the shared object that defines
//! the `malloc` the process actually calls.

use std::sync::OnceLock;

/// A binary's global allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Global {
    HugeAlloc,
    /// `std::alloc::System`: the process's `malloc` (glibc's, or an `LD_PRELOAD`ed one).
    System,
    Jemalloc,
    Mimalloc,
}

static GLOBAL: OnceLock<Global> = OnceLock::new();
static NAME: OnceLock<String> = OnceLock::new();

/// Records the binary's global allocator; the first call wins.
pub fn set(global: Global) {
    let _ = GLOBAL.set(global);
}

/// The global allocator recorded by [`set`] (`System` if nobody said).
pub fn global() -> Global {
    GLOBAL.get().copied().unwrap_or(Global::System)
}

/// Whether hugealloc is the global allocator of this binary.
pub fn is_hugealloc() -> bool {
    global() == Global::HugeAlloc
}

/// The path of the shared object defining the `malloc` this process calls (e.g.
/// `/lib/x86_64-linux-gnu/libc.so.6`, or a preloaded library), if `dladdr` can tell.
pub fn malloc_provider() -> Option<String> {
    // SAFETY: Dl_info is plain data that dladdr fills.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let malloc: unsafe extern "C" fn(libc::size_t) -> *mut libc::c_void = libc::malloc;
    // SAFETY: any address may be passed; info is a valid out-pointer.
    let found = unsafe { libc::dladdr(malloc as *const libc::c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr set dli_fname to a NUL-terminated string owned by the loader.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    Some(name.to_string_lossy().into_owned())
}

/// The global allocator's name: `hugealloc`, `jemalloc`, `mimalloc`, or for `System`
/// `system` when `malloc` is libc's and otherwise the preloaded library's file name (e.g.
/// `libjemalloc.so.2`).
pub fn allocator() -> &'static str {
    NAME.get_or_init(|| match global() {
        Global::HugeAlloc => "hugealloc".to_string(),
        Global::Jemalloc => "jemalloc".to_string(),
        Global::Mimalloc => "mimalloc".to_string(),
        Global::System => match malloc_provider() {
            Some(p) if !p.contains("libc.so") => p.rsplit('/').next().unwrap_or(&p).to_string(),
            _ => "system".to_string(),
        },
    })
}

/// hugealloc's arenas created so far (arenas are made lazily, as threads first allocate).
fn arenas() -> Vec<hugealloc::Arena> {
    (0..).map_while(hugealloc::Arena::from_index).collect()
}

/// The THP policy of hugealloc's arenas created so far, e.g. `madvise (all 1 arenas so far)`.
pub fn hugealloc_policy() -> Option<String> {
    if !is_hugealloc() {
        return None;
    }
    let arenas = arenas();
    let first = arenas.first()?.thp();
    Some(if arenas.iter().all(|a| a.thp() == first) {
        format!("{} (all {} arenas so far)", first.name(), arenas.len())
    } else {
        format!("{} (arena 0; arenas differ)", first.name())
    })
}

/// The policy `HUGEALLOC_CONF` asks for with `thp:VALUE`, if any (the last one wins).
fn conf_thp() -> Option<String> {
    let conf = std::env::var("HUGEALLOC_CONF").ok()?;
    conf.split(',')
        .filter_map(|kv| kv.strip_prefix("thp:"))
        .next_back()
        .map(str::to_string)
}

/// Warns on stderr when `HUGEALLOC_CONF` asks for a `thp:` policy that arena 0 does not have
/// (a bad value, or a core that does not read the variable), so a comparison is never
/// silently run under the wrong policy.
pub fn check_conf_honoured() {
    if !is_hugealloc() {
        return;
    }
    let Some(want) = conf_thp() else { return };
    let Some(have) = hugealloc::Arena::from_index(0).map(|a| a.thp().name()) else {
        return;
    };
    if want != have {
        eprintln!(
            "warning: HUGEALLOC_CONF asks for thp:{want} but arena 0's policy is {have}: \
             the setting is not honoured"
        );
    }
}

/// hugealloc's statistics, when it is the global allocator.
pub fn hugealloc_stats() -> Option<hugealloc::Stats> {
    is_hugealloc().then(hugealloc::stats)
}
