//! The C test programs of `tests/c`, each run three ways: preloaded into a program built
//! without the library, linked with `-lhugealloc`, and linked statically with
//! `libhugealloc.a`. Each program checks its own results and prints `NAME (MODE): ok`.

mod common;

use common::*;
use std::process::Command;

/// Compiles and runs `name` in every mode; returns (mode, stdout, stderr) of each run.
fn run_everywhere(name: &str, limit_secs: u32) -> Vec<(Mode, String, String)> {
    let dir = scratch(name);
    let mut results = Vec::new();
    for mode in MODES {
        let exe = compile_c(name, mode, &dir);
        let mut cmd = timed(limit_secs, &exe);
        if mode == Mode::Preload {
            cmd.env("LD_PRELOAD", build().so());
        }
        let out = run_ok(&mut cmd, &format!("{name} ({mode:?})"));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let want = format!("{name} ({}): ok", format!("{mode:?}").to_lowercase());
        assert!(
            stdout.contains(&want),
            "{name} ({mode:?}):\n{stdout}\n{stderr}"
        );
        results.push((mode, stdout, stderr));
    }
    results
}

#[test]
fn abi_every_export_and_edge_case() {
    for (mode, stdout, stderr) in run_everywhere("abi", 120) {
        if mode != Mode::Static {
            // dladdr on malloc names the library, preloaded or linked.
            assert!(
                stdout.contains("dladdr(malloc): ") && stdout.contains("libhugealloc.so"),
                "{stdout}"
            );
        }
        // malloc_stats and malloc_stats_print(NULL, ...) write to stderr.
        assert!(printed_stats(stderr.as_bytes()), "{stderr}");
    }
}

/// `thp:defer` preloaded into a C program: a touched 64 MiB block is collapsed into huge
/// pages by the background thread, never advised `hg` (`tests/c/defer.c`).
#[test]
fn defer_collapses_a_touched_block_under_ld_preload() {
    let dir = scratch("defer");
    let exe = compile_c("defer", Mode::Preload, &dir);
    let mut cmd = timed(120, &exe);
    cmd.env("LD_PRELOAD", build().so())
        .env("HUGEALLOC_CONF", "thp:defer");
    let out = run_ok(&mut cmd, "defer (preload)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("defer (preload): ok") || stdout.contains("skipped"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{stdout}");
}

#[test]
fn threads_cross_thread_frees_and_thread_exit() {
    run_everywhere("threads", 300);
}

#[test]
fn fork_while_threads_allocate() {
    run_everywhere("fork", 300);
}

/// C++: new/delete (sized, over-aligned), containers, exceptions, threads; preloaded and
/// linked statically.
#[test]
fn cxx_new_delete_exceptions_threads() {
    let gxx = require("g++", "g++");
    let b = build();
    let dir = scratch("cxx");
    let src = c_dir().join("cxx.cc");
    let plain = dir.join("cxx");
    run_ok(
        Command::new(&gxx)
            .args(["-O2", "-std=c++17", "-fno-builtin"])
            .arg(&src)
            .arg("-o")
            .arg(&plain)
            .arg("-lpthread"),
        "g++ cxx.cc",
    );
    let out = run_ok(preload(&mut timed(120, &plain)), "cxx (preload)");
    assert!(String::from_utf8_lossy(&out.stdout).contains("cxx: ok"));
    assert!(printed_stats(&out.stderr));
    let linked = dir.join("cxx-static");
    run_ok(
        Command::new(&gxx)
            .args(["-O2", "-std=c++17", "-fno-builtin"])
            .arg(&src)
            .arg("-o")
            .arg(&linked)
            .arg(b.staticlib())
            .args(STATIC_LIBS),
        "g++ cxx.cc libhugealloc.a",
    );
    let out = run_ok(&mut timed(120, &linked), "cxx (static)");
    assert!(String::from_utf8_lossy(&out.stdout).contains("cxx: ok"));
}

/// The malloc/free micro-benchmark of docs/c-api.md still builds and runs (figures there).
#[test]
fn tls_benchmark_runs() {
    let dir = scratch("bench");
    for mode in [Mode::Preload, Mode::Static] {
        let exe = compile_c("bench", mode, &dir);
        let mut cmd = timed(60, &exe);
        cmd.arg("200000");
        if mode == Mode::Preload {
            cmd.env("LD_PRELOAD", build().so());
        }
        let out = run_ok(&mut cmd, "bench");
        assert!(String::from_utf8_lossy(&out.stdout).contains("malloc+free pair: "));
    }
}

/// A block allocated in the constructor of another shared library, before `main`, is
/// hugealloc's (freeing it would abort otherwise): under LD_PRELOAD no allocation reaches
/// glibc's heap, however early.
#[test]
fn allocation_in_a_library_constructor() {
    let dir = scratch("early");
    let lib_src = dir.join("early.c");
    std::fs::write(
        &lib_src,
        r#"
#include <stdlib.h>
#include <string.h>
void *early_block;
__attribute__((constructor)) static void early(void) {
    early_block = malloc(1000);
    memset(early_block, 3, 1000);
}
"#,
    )
    .unwrap();
    let main_src = dir.join("main.c");
    std::fs::write(
        &main_src,
        r#"
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
extern void *early_block;
int main(void) {
    if (!early_block || malloc_usable_size(early_block) < 1000) return 1;
    free(early_block);
    puts("early: ok");
    return 0;
}
"#,
    )
    .unwrap();
    let lib = dir.join("libearly.so");
    run_ok(
        Command::new("gcc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&lib)
            .arg(&lib_src),
        "gcc libearly.so",
    );
    let exe = dir.join("early");
    run_ok(
        Command::new("gcc")
            .arg(&main_src)
            .arg("-o")
            .arg(&exe)
            .arg(format!("-L{}", dir.display()))
            .arg("-learly")
            .arg(format!("-Wl,-rpath,{}", dir.display())),
        "gcc early",
    );
    let out = run_ok(preload(&mut timed(30, &exe)), "early");
    assert!(String::from_utf8_lossy(&out.stdout).contains("early: ok"));
    assert!(printed_stats(&out.stderr));
}

/// A program that defines `hugealloc_conf` and links the library (dynamically or
/// statically) gets that configuration.
#[test]
fn conf_symbol() {
    let b = build();
    let dir = scratch("conf");
    let src = dir.join("conf.c");
    std::fs::write(
        &src,
        r#"
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hugealloc.h"
const char *hugealloc_conf = "thp:never";
int main(void) {
    const char *thp = NULL;
    size_t len = sizeof thp;
    if (mallctl("arena.0.thp", &thp, &len, NULL, 0) != 0) return 2;
    printf("arena.0.thp: %s\n", thp);
    return strcmp(thp, "never") != 0;
}
"#,
    )
    .unwrap();
    for (name, extra) in [
        (
            "dynamic",
            vec![
                format!("-L{}", b.profile_dir.display()),
                "-lhugealloc".to_string(),
                format!("-Wl,-rpath,{}", b.profile_dir.display()),
            ],
        ),
        ("static", {
            let mut v = vec![b.staticlib().display().to_string()];
            v.extend(STATIC_LIBS.iter().map(|s| s.to_string()));
            v
        }),
    ] {
        let exe = dir.join(name);
        let mut cc = Command::new("gcc");
        cc.arg("-I")
            .arg(include_dir())
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .args(&extra);
        run_ok(&mut cc, "gcc conf.c");
        let out = run_ok(&mut timed(30, &exe), name);
        assert!(String::from_utf8_lossy(&out.stdout).contains("arena.0.thp: never"));
    }
}

/// The header compiles cleanly as C11, C99 and C++, and declares every exported
/// `hugealloc_*` symbol.
#[test]
fn header_compiles_and_declares_every_export() {
    let dir = scratch("header");
    let src = dir.join("h.c");
    std::fs::write(
        &src,
        "#include <stdlib.h>\n#include <malloc.h>\n#include \"hugealloc.h\"\nint main(void) { return hugealloc_nallocx(1, MALLOCX_ALIGN(64) | MALLOCX_ZERO) == 0; }\n",
    )
    .unwrap();
    for (compiler, std) in [
        ("gcc", "-std=c11"),
        ("gcc", "-std=gnu99"),
        ("g++", "-std=c++11"),
    ] {
        let mut cc = Command::new(require(compiler, compiler));
        cc.args([
            std,
            "-Wall",
            "-Wextra",
            "-pedantic",
            "-Werror",
            "-fsyntax-only",
        ]);
        if compiler == "g++" {
            cc.args(["-x", "c++"]);
        }
        cc.arg("-I").arg(include_dir()).arg(&src);
        run_ok(&mut cc, &format!("{compiler} {std} hugealloc.h"));
    }
    let header = std::fs::read_to_string(include_dir().join("hugealloc.h")).unwrap();
    let out = run_ok(
        Command::new("nm")
            .args(["-D", "--defined-only"])
            .arg(build().so()),
        "nm",
    );
    let nm = String::from_utf8_lossy(&out.stdout).into_owned();
    let symbols: Vec<&str> = nm
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let ours: Vec<&&str> = symbols
        .iter()
        .filter(|s| s.starts_with("hugealloc_"))
        .collect();
    assert!(ours.len() >= 29, "{symbols:?}");
    for s in ours {
        assert!(
            header.contains(&format!(" {s}(")) || header.contains(&format!("*{s}(")),
            "hugealloc.h does not declare {s}"
        );
        // Each prefixed name has its plain twin in the default build (malloc_stats_print for
        // hugealloc_stats_print).
        let plain = match *s {
            "hugealloc_stats_print" => "malloc_stats_print",
            other => &other["hugealloc_".len()..],
        };
        assert!(symbols.contains(&plain), "{plain} is not exported");
    }
    // Nothing but the C API leaks out of the library.
    for s in &symbols {
        assert!(
            !s.starts_with("_ZN") && !s.starts_with("_R") && !s.contains("rust"),
            "Rust symbol exported: {s}"
        );
    }
}

/// Every mallctl name and statistic is documented in the header and in docs/c-api.md.
#[test]
fn every_ctl_name_is_documented() {
    let header = std::fs::read_to_string(include_dir().join("hugealloc.h")).unwrap();
    let docs = std::fs::read_to_string(manifest_dir().join("../docs/c-api.md")).unwrap();
    let mut names: Vec<String> = hugealloc::testing::ctl::fixed_names()
        .map(str::to_string)
        .collect();
    names.extend(
        hugealloc::Stats::default()
            .fields()
            .iter()
            .map(|f| format!("stats.{}", f.0)),
    );
    for n in names {
        assert!(header.contains(&n), "hugealloc.h does not document {n}");
        assert!(
            docs.contains(&format!("`{n}`")),
            "docs/c-api.md does not document `{n}`"
        );
    }
}

/// Misuse from C under `LD_PRELOAD` on the default configuration (`tests/c/misuse.c`): a free
/// of a pointer inside a small block, and a double free after the block went back to its slab,
/// each abort with one line naming the pointer.
#[test]
fn misuse_aborts_naming_the_pointer_under_ld_preload() {
    use std::os::unix::process::ExitStatusExt;
    let dir = scratch("misuse");
    let exe = compile_c("misuse", Mode::Preload, &dir);
    for (case, what) in [
        (
            "interior",
            "free of a pointer inside a block (not its start):",
        ),
        ("double_late", "double free of"),
    ] {
        let out = timed(60, &exe)
            .arg(case)
            .env("LD_PRELOAD", build().so())
            .env_remove("HUGEALLOC_CONF")
            .output()
            .expect("running misuse");
        let stderr = String::from_utf8_lossy(&out.stderr);
        // `timeout` passes the child's SIGABRT on, or exits with 128 + 6.
        assert!(
            out.status.signal() == Some(libc::SIGABRT) || out.status.code() == Some(134),
            "{case}: {:?}\n{}\n{stderr}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
        let p = stderr
            .lines()
            .find_map(|l| l.strip_prefix("pointer "))
            .unwrap_or_else(|| panic!("{case}: no pointer printed: {stderr}"));
        let line = stderr
            .lines()
            .find(|l| l.starts_with("hugealloc: "))
            .unwrap_or_else(|| panic!("{case}: no message in {stderr}"));
        assert_eq!(line, format!("hugealloc: {what} {p}"), "{case}: {stderr}");
    }
}
