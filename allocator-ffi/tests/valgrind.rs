//! The C test programs under valgrind's memcheck, with hugealloc serving every allocation:
//! preloaded (built without the library) and linked with `-lhugealloc`. Zero errors required
//! (`--error-exitcode=99`), and each program must still report ok.
//!
//! Memcheck replaces every exported `malloc` it finds, in any shared object, with its own
//! unless told otherwise; `--soname-synonyms=somalloc=nouserintercepts` limits that to libc, so
//! hugealloc's own code runs (a static link cannot be tested this way: memcheck always replaces
//! the executable's `malloc`). Memcheck then checks hugealloc's code for reads of undefined
//! values, bad accesses and bad system-call arguments; it does not know where hugealloc's
//! blocks begin and end (no client requests, see docs/reliability.md), so it cannot check the
//! programs' use of them. Skipped, with the reason printed, where valgrind is not installed.

mod common;

use common::*;
use std::process::Command;

const PROGRAMS: &[&str] = &["abi", "threads", "fork"];

fn valgrind() -> Option<std::path::PathBuf> {
    let v = which("valgrind")?;
    // A valgrind that cannot run (no tool for this machine) counts as missing.
    let ok = Command::new(&v)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(v)
}

#[test]
fn c_programs_under_memcheck() {
    let Some(vg) = valgrind() else {
        eprintln!("skipped: valgrind is not installed (Debian package `valgrind`)");
        return;
    };
    let dir = scratch("valgrind");
    for name in PROGRAMS {
        // fork.c's 60 children make it the slow one: preloaded only.
        let modes: &[Mode] = if *name == "fork" {
            &[Mode::Preload]
        } else {
            &[Mode::Preload, Mode::Linked]
        };
        for &mode in modes {
            let exe = compile_c(name, mode, &dir);
            let mut cmd = timed(900, &vg);
            cmd.args([
                "--tool=memcheck",
                "--error-exitcode=99",
                "--soname-synonyms=somalloc=nouserintercepts",
                "--child-silent-after-fork=no",
                // valgrind runs one thread at a time; with its default scheduling a thread
                // can be left waiting for the big lock while others run on: fork.c's `fork`
                // (whose prepare handler takes every arena lock while 4 threads churn) once
                // took 9 minutes of the 15 allowed in CI, 12-22 s when run alone. Fair
                // scheduling hands the lock round in order.
                "--fair-sched=yes",
            ])
            .arg(&exe)
            // memcheck runs ~20x slower: stretch fork.c's deadlock alarms to match.
            .env("HUGEALLOC_TEST_SLOW", "10");
            if mode == Mode::Preload {
                // Set for valgrind, which hands it to the program after its own preloads.
                cmd.env("LD_PRELOAD", build().so());
            }
            let what = format!("{name} ({mode:?}) under memcheck");
            let out = run_ok(&mut cmd, &what);
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let want = format!("{name} ({}): ok", format!("{mode:?}").to_lowercase());
            assert!(stdout.contains(&want), "{what}:\n{stdout}\n{stderr}");
            let summaries: Vec<&str> = stderr
                .lines()
                .filter(|l| l.contains("ERROR SUMMARY:"))
                .collect();
            assert!(
                !summaries.is_empty(),
                "{what}: no memcheck summary:\n{stderr}"
            );
            for s in &summaries {
                assert!(
                    s.contains("ERROR SUMMARY: 0 errors"),
                    "{what}: {s}\n{stderr}"
                );
            }
            // hugealloc served the program: memcheck's own heap saw nothing.
            assert!(
                stderr.contains("total heap usage: 0 allocs"),
                "{what}: memcheck replaced hugealloc's malloc:\n{}",
                tail(&out.stderr)
            );
            eprintln!("{what}: {} process(es), 0 errors", summaries.len());
        }
    }
}
