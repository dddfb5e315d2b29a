//! Runs every subcommand of the workload binary at a tiny size, as CI does: each must exit
//! successfully and print its `result:` line (and hugealloc's statistics when it is the global
//! allocator). Nothing here depends on timing.

use std::process::Command;

fn run(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hugealloc-bench"))
        .args(args)
        .output()
        .expect("the workload binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn check(args: &[&str], sub: &str) {
    let out = run(args);
    let result = out
        .lines()
        .find(|l| l.starts_with("result:"))
        .unwrap_or_else(|| panic!("no result line for {args:?}:\n{out}"));
    assert!(result.contains(&format!("sub={sub} ")), "{result}");
    assert!(out.contains("peak_rss_mib:"), "{out}");
    if !cfg!(any(
        feature = "system",
        feature = "jemalloc",
        feature = "mimalloc"
    )) {
        assert!(result.contains("alloc=hugealloc"), "{result}");
        assert!(out.contains("hugealloc stats (MiB):"), "{out}");
        assert!(out.contains("resident:"), "{out}");
    }
}

#[test]
fn workload_tiny() {
    check(&["workload", "2000"], "workload");
}

#[test]
fn default_subcommand_is_workload() {
    check(&["1000"], "workload");
}

#[test]
fn bigbuf_tiny() {
    check(&["bigbuf", "2", "--mib", "4"], "bigbuf");
    check(&["bigbuf", "1", "--mib", "1", "--type", "u8"], "bigbuf");
}

#[test]
fn scipp_tiny() {
    check(
        &[
            "scipp",
            "2",
            "--rounds",
            "1",
            "--reps",
            "2",
            "--chase-steps",
            "1000",
        ],
        "scipp",
    );
}

#[test]
fn frag_tiny() {
    check(&["frag", "2", "--keep", "8", "--wait-ms", "1"], "frag");
}

#[test]
fn hugealloc_conf_sets_the_policy() {
    if cfg!(any(
        feature = "system",
        feature = "jemalloc",
        feature = "mimalloc"
    )) {
        return;
    }
    for policy in ["always", "never", "default", "madvise"] {
        let out = Command::new(env!("CARGO_BIN_EXE_hugealloc-bench"))
            .args(["bigbuf", "1", "--mib", "1"])
            .env("HUGEALLOC_CONF", format!("thp:{policy}"))
            .output()
            .expect("the workload binary runs");
        assert!(out.status.success());
        let out = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.contains(&format!("hugealloc_thp_policy: {policy} (all")),
            "{out}"
        );
    }
}

#[test]
fn bad_arguments_are_refused() {
    for args in [
        &["nosuch"][..],
        &["bigbuf", "--type", "u16"],
        &["frag", "--keep", "0"],
        &["scipp", "--reps", "x"],
        &["bigbuf", "--thp", "always"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_hugealloc-bench"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}
