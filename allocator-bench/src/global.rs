//! The binary's global allocator, chosen at build time by the crate's features (the only place
//! with `cfg` on them), and the hugealloc-only controls the workloads use. The functions here
//! answer `None` (or an error) when hugealloc is not the global allocator, so callers need no
//! `cfg` of their own.

#[cfg(any(
    all(feature = "system", feature = "jemalloc"),
    all(feature = "system", feature = "mimalloc"),
    all(feature = "jemalloc", feature = "mimalloc"),
))]
compile_error!("enable at most one of the features `system`, `jemalloc`, `mimalloc`");

#[cfg(feature = "system")]
#[global_allocator]
static GLOBAL: std::alloc::System = std::alloc::System;

#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(not(any(feature = "system", feature = "jemalloc", feature = "mimalloc")))]
#[global_allocator]
static GLOBAL: hugealloc::HugeAlloc = hugealloc::HugeAlloc;

/// Whether hugealloc is the global allocator of this build.
pub const IS_HUGEALLOC: bool = cfg!(not(any(
    feature = "system",
    feature = "jemalloc",
    feature = "mimalloc"
)));

/// The global allocator's name.
pub const ALLOCATOR: &str = if cfg!(feature = "system") {
    "system"
} else if cfg!(feature = "jemalloc") {
    "jemalloc"
} else if cfg!(feature = "mimalloc") {
    "mimalloc"
} else {
    "hugealloc"
};

/// hugealloc's arenas created so far (arenas are made lazily, as threads first allocate).
fn arenas() -> Vec<hugealloc::Arena> {
    (0..).map_while(hugealloc::Arena::from_index).collect()
}

/// The THP policy of hugealloc's arenas created so far, e.g. `madvise (all 1 arenas so far)`.
pub fn hugealloc_policy() -> Option<String> {
    if !IS_HUGEALLOC {
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
    if !IS_HUGEALLOC {
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
    IS_HUGEALLOC.then(hugealloc::stats)
}
