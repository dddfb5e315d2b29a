//! `hugealloc-bench`: workload programs under a global allocator chosen at build time
//! (hugealloc by default; features `system`, `jemalloc`, `mimalloc`), and `compare`, which runs
//! them under every allocator through `LD_PRELOAD`. Everything but the choice of global
//! allocator is in the library (`src/lib.rs`); `hugealloc-workloads` is the same program with
//! `System` always, for `LD_PRELOAD`.

#[cfg(any(
    all(feature = "system", feature = "jemalloc"),
    all(feature = "system", feature = "mimalloc"),
    all(feature = "jemalloc", feature = "mimalloc"),
))]
compile_error!("enable at most one of the features `system`, `jemalloc`, `mimalloc`");

use hugealloc_bench::global::Global;

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

const CHOSEN: Global = if cfg!(feature = "system") {
    Global::System
} else if cfg!(feature = "jemalloc") {
    Global::Jemalloc
} else if cfg!(feature = "mimalloc") {
    Global::Mimalloc
} else {
    Global::HugeAlloc
};

fn main() {
    hugealloc_bench::main(CHOSEN)
}
