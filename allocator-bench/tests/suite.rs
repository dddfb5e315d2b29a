//! Runs every workload of the benchmark suite at a tiny size, under the default build's global
//! allocator (`hugealloc-bench`: hugealloc unless a feature picks another) and under `System`
//! (`hugealloc-workloads`, the binary `compare` preloads into): each must exit 0 and print its
//! `result:` line. Also the `spawn` helper `compare` measures through. Nothing here depends on
//! timing.

use std::process::Command;

const BENCH: &str = env!("CARGO_BIN_EXE_hugealloc-bench");
const WORKLOADS: &str = env!("CARGO_BIN_EXE_hugealloc-workloads");

/// (workload, tiny size)
const TINY: &[(&str, &str)] = &[
    ("cfrac", "300"),
    ("espresso", "3"),
    ("larson", "20000"),
    ("xmalloc", "10000"),
    ("cache-scratch", "50"),
    ("cache-thrash", "50"),
    ("mstress", "3"),
    ("rptest", "3000"),
    ("sh6bench", "20"),
    ("sh8bench", "20"),
    ("realloc", "4"),
];

fn run(bin: &str, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .env_remove("LD_PRELOAD")
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{bin} {args:?} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn result_line(out: &str) -> &str {
    out.lines()
        .find(|l| l.starts_with("result: "))
        .unwrap_or_else(|| panic!("no result line:\n{out}"))
}

#[test]
fn every_workload_runs_tiny_under_the_default_allocator() {
    for (w, size) in TINY {
        let out = run(BENCH, &[w, size]);
        let r = result_line(&out);
        assert!(r.contains(&format!("sub={w} ")), "{r}");
        assert!(r.contains(&format!("size={size} ")), "{r}");
        assert!(r.contains("checksum="), "{r}");
    }
}

#[test]
fn every_workload_runs_tiny_under_the_system_allocator() {
    for (w, size) in TINY {
        let out = run(WORKLOADS, &[w, size]);
        let r = result_line(&out);
        assert!(r.contains(&format!("sub={w} alloc=system ")), "{r}");
        let provider = out
            .lines()
            .find_map(|l| l.strip_prefix("malloc_provider: "))
            .unwrap_or_else(|| panic!("no malloc_provider line:\n{out}"));
        assert!(provider.contains("libc"), "{provider}");
    }
}

#[test]
fn the_suite_is_all_here() {
    // Every workload the usage names is one this test runs.
    let usage = run(BENCH, &["--help"]);
    for (w, _) in TINY {
        assert!(usage.contains(w), "{w} missing from the usage");
    }
}

#[test]
fn threads_flag_and_bad_flags() {
    let out = run(BENCH, &["larson", "5000", "--threads", "3"]);
    assert!(result_line(&out).contains("threads=3"));
    for args in [
        &["cfrac", "--threads", "2"][..],
        &["larson", "--threads", "0"],
        &["rptest", "x"],
    ] {
        let st = Command::new(BENCH).args(args).output().unwrap();
        assert_eq!(st.status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn pairs_counts_its_pairs() {
    let out = run(WORKLOADS, &["pairs", "1000", "--bytes", "48"]);
    let r = result_line(&out);
    assert!(
        r.contains("sub=pairs") && r.contains("size=1000") && r.contains("bytes=48"),
        "{r}"
    );
}

#[test]
fn pairs_in_batches_holds_a_batch_at_once() {
    // 1,050 blocks, 100 at a time: the first batch's 100 pointers are live together, so all
    // distinct (a loop that freed each block at once would see one pointer again and again).
    for via in ["c", "rust"] {
        let out = run(
            WORKLOADS,
            &[
                "pairs", "1050", "--bytes", "256", "--batch", "100", "--via", via,
            ],
        );
        let r = result_line(&out);
        assert!(
            r.contains("size=1050") && r.contains("batch=100") && r.contains("distinct=100"),
            "{via}: {r}"
        );
    }
}

#[test]
fn spawn_measures_and_passes_the_status_on() {
    let dir = std::env::temp_dir().join(format!("hugealloc-spawn-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rusage");
    let f = file.to_str().unwrap();
    // The child sees the KEY=VALUE pairs; the figures are three numbers.
    let st = Command::new(WORKLOADS)
        .args([
            "spawn",
            f,
            "HB_TEST=7",
            "--",
            "sh",
            "-c",
            "test \"$HB_TEST\" = 7",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    let text = std::fs::read_to_string(&file).unwrap();
    let nums: Vec<f64> = text
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    assert_eq!(nums.len(), 3, "{text}");
    assert!(nums[1] > 0.0, "peak RSS is positive: {text}");
    let st = Command::new(WORKLOADS)
        .args(["spawn", f, "--", "sh", "-c", "exit 3"])
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(3));
    std::fs::remove_dir_all(&dir).unwrap();
}
