//! The README's C example, run as a new user would: its ```c block is written to `hello.c`, and
//! every line of the ```sh blocks that mention `hello` (build, preload, launcher, configuration)
//! runs in a scratch folder where `target/release` is this build's profile folder. Each line
//! that runs `./hello` must print the program's greeting and hugealloc's statistics (the
//! library served it). The README's Rust examples are doctests of the core crate (`lib.rs`).

mod common;

use common::*;
use std::path::Path;

/// The bodies of the README's fenced blocks of language `lang`, in order.
fn blocks(readme: &str, lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in readme.lines() {
        match &mut current {
            None if line.trim_start() == format!("```{lang}") => current = Some(String::new()),
            None => {}
            Some(_) if line.trim_start().starts_with("```") => out.push(current.take().unwrap()),
            Some(body) => {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    out
}

#[test]
fn readme_c_example_builds_and_runs_under_hugealloc() {
    let b = build();
    // The launcher the README runs is built next to the library for integration tests.
    assert!(Path::new(env!("CARGO_BIN_EXE_hugealloc")).starts_with(&b.profile_dir));
    let readme = std::fs::read_to_string(manifest_dir().join("../README.md")).unwrap();

    let c = blocks(&readme, "c");
    assert_eq!(c.len(), 1, "the README has one C example");
    let lines: Vec<String> = blocks(&readme, "sh")
        .iter()
        .flat_map(|b| b.lines().map(str::to_string).collect::<Vec<_>>())
        .filter(|l| l.contains("hello"))
        .collect();
    assert!(
        lines.len() >= 4,
        "build, preload, launcher, configuration: {lines:?}"
    );

    let dir = scratch("readme");
    std::fs::write(dir.join("hello.c"), &c[0]).unwrap();
    std::fs::create_dir(dir.join("target")).unwrap();
    std::os::unix::fs::symlink(&b.profile_dir, dir.join("target/release")).unwrap();

    let mut runs = 0;
    for line in &lines {
        let out = run_ok(
            timed(120, "sh")
                .arg("-c")
                .arg(line)
                .current_dir(&dir)
                .env_remove("LD_PRELOAD")
                .env("HUGEALLOC_CONF", "stats_print:true"),
            line,
        );
        if line.contains("./hello") {
            runs += 1;
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(stdout.starts_with("hello from 0x"), "{line}: {stdout}");
            assert!(
                printed_stats(&out.stderr),
                "{line}: not served by hugealloc:\n{}",
                tail(&out.stderr)
            );
        }
    }
    assert!(runs >= 3, "preload, launcher, configuration: {lines:?}");

    // The linked program finds the library by its rpath alone.
    let out = run_ok(
        timed(60, dir.join("hello"))
            .env_remove("LD_PRELOAD")
            .env("HUGEALLOC_CONF", "stats_print:true"),
        "linked hello",
    );
    assert!(printed_stats(&out.stderr), "{}", tail(&out.stderr));
}

/// The README's Rust path, as a new user takes it: a new cargo project next to a folder
/// `hugealloc` (this repository) whose `Cargo.toml` has the README's ```toml block as written,
/// and each ```rust example as its `main.rs`, built and run. The first example prints what
/// `hugealloc::stats()` saw (at least its 8 MB vector allocated).
#[test]
fn readme_rust_examples_build_in_a_new_project_from_its_dependency_line() {
    let readme = std::fs::read_to_string(manifest_dir().join("../README.md")).unwrap();
    let toml = blocks(&readme, "toml");
    assert_eq!(toml.len(), 1, "the README has one Cargo block");
    assert!(toml[0].contains("[dependencies]"), "{}", toml[0]);
    let examples = blocks(&readme, "rust");
    assert!(examples.len() >= 2, "the global allocator and with_conf");

    let dir = scratch("readme-rust");
    let repo = manifest_dir().join("..").canonicalize().unwrap();
    std::os::unix::fs::symlink(&repo, dir.join("hugealloc")).unwrap();
    let app = dir.join("app");
    std::fs::create_dir_all(app.join("src")).unwrap();
    std::fs::write(
        app.join("Cargo.toml"),
        format!(
            "[package]\nname = \"readme-app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [workspace]\n\n{}",
            toml[0]
        ),
    )
    .unwrap();
    // The workspace's lock file pins the versions this build has (and works offline).
    std::fs::copy(repo.join("Cargo.lock"), app.join("Cargo.lock")).unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    for (i, example) in examples.iter().enumerate() {
        std::fs::write(app.join("src/main.rs"), example).unwrap();
        let out = run_ok(
            timed(600, &cargo)
                .args(["run", "--offline", "--quiet"])
                .current_dir(&app)
                .env("CARGO_TARGET_DIR", dir.join("target"))
                .env_remove("LD_PRELOAD")
                .env_remove("HUGEALLOC_CONF")
                .env_remove("RUSTFLAGS"),
            &format!("README Rust example {}", i + 1),
        );
        if i == 0 {
            let stdout = String::from_utf8_lossy(&out.stdout);
            let allocated: usize = stdout
                .strip_prefix("allocated ")
                .and_then(|r| r.split(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("unexpected output: {stdout}"));
            assert!(allocated >= 8_000_000, "{stdout}");
        }
    }
}
