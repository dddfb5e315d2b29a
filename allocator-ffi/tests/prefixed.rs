//! A build without the `override` feature exports only `hugealloc_*` names, so it links
//! beside glibc's malloc (or any other allocator) without replacing it. Built into its own
//! target directory, `<target>/prefixed-only`, so the default build is left alone.

mod common;

use common::*;
use std::process::Command;

#[test]
fn prefixed_only_build_links_beside_glibc() {
    let b = build();
    let target = b.target_dir.join("prefixed-only");
    cargo_build_lib(b, &target, &["--no-default-features"]);
    let mut lib_dir = target.clone();
    if let Some(t) = &b.triple {
        lib_dir.push(t);
    }
    lib_dir.push(b.profile_dir.file_name().unwrap());
    let so = lib_dir.join("libhugealloc.so");
    let out = run_ok(
        Command::new("nm").args(["-D", "--defined-only"]).arg(&so),
        "nm",
    );
    let nm = String::from_utf8_lossy(&out.stdout).into_owned();
    let symbols: Vec<&str> = nm
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    assert!(symbols.contains(&"hugealloc_malloc") && symbols.contains(&"hugealloc_mallctl"));
    for s in &symbols {
        assert!(
            s.starts_with("hugealloc_"),
            "exported without the prefix: {s}"
        );
    }

    let dir = scratch("prefixed");
    let src = dir.join("beside.c");
    std::fs::write(
        &src,
        r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#define HUGEALLOC_NO_JEMALLOC_NAMES
#include "hugealloc.h"
int main(void) {
    Dl_info info;
    /* malloc stays glibc's ... */
    if (!dladdr((void *)malloc, &info) || !strstr(info.dli_fname, "libc.so")) return 1;
    void *g = malloc(100);
    /* ... and hugealloc's heap is beside it. */
    void *h = hugealloc_malloc(100);
    if (!g || !h || hugealloc_malloc_usable_size(h) < 100) return 2;
    const char *v = NULL;
    size_t n = sizeof v;
    if (hugealloc_mallctl("version", &v, &n, NULL, 0) || strcmp(v, HUGEALLOC_VERSION)) return 3;
    h = hugealloc_rallocx(h, 5000, MALLOCX_ZERO);
    hugealloc_sdallocx(h, 5000, 0);
    free(g);
    puts("beside: ok");
    return 0;
}
"#,
    )
    .unwrap();
    for (name, link) in [
        (
            "dynamic",
            vec![
                format!("-L{}", lib_dir.display()),
                "-lhugealloc".to_string(),
                format!("-Wl,-rpath,{}", lib_dir.display()),
            ],
        ),
        ("static", {
            let mut v = vec![lib_dir.join("libhugealloc.a").display().to_string()];
            v.extend(STATIC_LIBS.iter().map(|s| s.to_string()));
            v
        }),
    ] {
        let exe = dir.join(name);
        run_ok(
            Command::new("gcc")
                .arg("-I")
                .arg(include_dir())
                .arg(&src)
                .arg("-o")
                .arg(&exe)
                .args(&link)
                .arg("-ldl"),
            "gcc beside.c",
        );
        let out = run_ok(&mut timed(30, &exe), name);
        assert!(String::from_utf8_lossy(&out.stdout).contains("beside: ok"));
    }
}
