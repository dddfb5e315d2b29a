//! `hugealloc-workloads`: the workload programs with `std::alloc::System` as the global
//! allocator, whatever the crate's features, so that `malloc` is whichever the process
//! resolves: glibc's, or the library named in `LD_PRELOAD`. This is the binary `compare` runs
//! under every allocator; its header prints `malloc_provider:` (the object that defines
//! `malloc`), which `compare` checks before it believes a figure.

fn main() {
    hugealloc_bench::main(hugealloc_bench::global::Global::System)
}
