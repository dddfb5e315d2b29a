//! Explicit huge pages end to end under `LD_PRELOAD`: a C program built without the library
//! (`tests/c/hugetlb.c`) allocates 8 MiB blocks and small ones with `hugetlb:2M` or
//! `hugetlb:1G`, and reports the `KernelPageSize` of its blocks' mappings, the pool's free
//! pages and the hugetlb fallbacks (`mallctl`). The tests resize the system's pools (root;
//! elsewhere they print why and skip) under the lock `allocator-core`'s hugetlb tests use, and
//! put them back.

mod common;
#[path = "../../allocator-core/tests/pools/mod.rs"]
mod pools;

use common::*;
use hugealloc::testing::os::HugePageSize;
use pools::Pool;

/// Runs the program with `conf` and `blocks` blocks of 8 MiB; returns its stdout and stderr.
fn run(conf: &str, blocks: u32) -> (String, String) {
    let dir = scratch("hugetlb");
    let exe = compile_c("hugetlb", Mode::Preload, &dir);
    // Not under `timed`: `timeout` would be preloaded too, and take pages (and warn) itself.
    let mut cmd = std::process::Command::new(&exe);
    cmd.arg(blocks.to_string())
        .env_remove("LD_LIBRARY_PATH")
        .env("LD_PRELOAD", build().so())
        .env("HUGEALLOC_CONF", conf);
    let out = run_ok(&mut cmd, &format!("hugetlb.c ({conf})"));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(stdout.contains("hugetlb: ok"), "{stdout}\n{stderr}");
    (stdout, stderr)
}

/// The number after `key` on its line of `text`.
fn figure(text: &str, key: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("no {key} in {text}"));
    line[key.len()..].trim().parse().unwrap()
}

fn page_sizes(stdout: &str) -> Vec<u64> {
    stdout
        .lines()
        .filter_map(|l| l.split_once(": KernelPageSize "))
        .map(|(_, v)| v.trim_end_matches(" kB").parse().unwrap())
        .collect()
}

#[test]
fn a_preloaded_program_under_hugetlb_2m_gets_2m_pages() {
    let Some(pool) = Pool::set("preload, 2M", HugePageSize::Size2M, 12) else {
        return;
    };
    let (stdout, stderr) = run("hugetlb:2M", 2);
    assert_eq!(page_sizes(&stdout), [2048, 2048], "{stdout}");
    // Two blocks of 4 pages and at least one page chunk of small blocks.
    assert!(
        figure(&stdout, "free_hugepages 2M") <= 3,
        "HugePages_Free fell: {stdout}"
    );
    assert_eq!(figure(&stdout, "fallbacks"), 0, "{stdout}");
    assert!(!stderr.contains("hugealloc: "), "no warning: {stderr}");
    assert_eq!(pool.free(), 12, "the pages went back at the program's exit");
}

#[test]
fn a_preloaded_program_under_hugetlb_2m_with_an_empty_pool_falls_back_with_one_warning() {
    let Some(_pool) = Pool::set("preload, empty pool", HugePageSize::Size2M, 0) else {
        return;
    };
    let (stdout, stderr) = run("hugetlb:2M", 3);
    assert_eq!(page_sizes(&stdout), [4, 4, 4], "{stdout}");
    assert!(
        figure(&stdout, "fallbacks") >= 4,
        "3 blocks and small ones: {stdout}"
    );
    assert_eq!(
        stderr.matches("hugealloc: ").count(),
        1,
        "one warning: {stderr}"
    );
    assert!(
        stderr.contains("hugealloc: hugetlb:2M: the 2M hugetlb pool is empty"),
        "{stderr}"
    );
}

#[test]
fn a_preloaded_program_under_hugetlb_1g_gets_a_1g_page() {
    let size = HugePageSize::Size1G;
    let old = hugealloc::testing::os::hugetlb_pool(size).map_or(0, |p| p.total);
    let Some(pool) = Pool::set("preload, 1G", size, old + 1) else {
        return;
    };
    let free = pool.free();
    let (stdout, _) = run("hugetlb:1G", 2);
    assert_eq!(page_sizes(&stdout), [1048576, 1048576], "{stdout}");
    assert_eq!(figure(&stdout, "fallbacks"), 0, "{stdout}");
    assert_eq!(
        pool.free(),
        free,
        "the page went back at the program's exit"
    );
}
