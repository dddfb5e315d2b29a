//! `mallctl` from C (`tests/c/ctl.c`), preloaded, linked and linked statically: `opt.*` under
//! a `HUGEALLOC_CONF`, per-arena round trips, per-bin counters and MIBs, and the JSON of
//! `malloc_stats_print`, parsed here with python3's `json` where python3 exists.

mod common;

use common::*;
use std::io::Write;
use std::process::{Command, Stdio};

/// The configuration `ctl.c` checks its `opt.*` reads against.
const CTL_CONF: &str =
    "narenas:2,thp:never,arena.63.thp:always,dirty_decay_ms:4321,tcache_max:16k,stats_print_opts:Jb";

#[test]
fn ctl_from_c_in_every_mode() {
    let dir = scratch("ctl");
    for mode in MODES {
        let exe = compile_c("ctl", mode, &dir);
        let mut cmd = timed(120, &exe);
        cmd.env("HUGEALLOC_CONF", CTL_CONF);
        if mode == Mode::Preload {
            cmd.env("LD_PRELOAD", build().so());
        }
        let out = run_ok(&mut cmd, &format!("ctl ({mode:?})"));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let want = format!("ctl ({}): ok", format!("{mode:?}").to_lowercase());
        assert!(
            stdout.contains(&want),
            "ctl ({mode:?}):\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let start = stdout.find("JSON BEGIN\n").expect("JSON BEGIN") + "JSON BEGIN\n".len();
        let end = stdout.find("JSON END\n").expect("JSON END");
        check_json(&stdout[start..end]);
    }
}

/// Parses `json` with python3 (skips where there is none) and checks its shape.
fn check_json(json: &str) {
    let check = r#"
import json, sys
h = json.loads(sys.stdin.read())["hugealloc"]
assert h["opt"]["narenas"] == 2, h["opt"]
assert h["opt"]["thp"] == "never"
assert h["opt"]["arena.63.thp"] == "always"
assert h["opt"]["dirty_decay_ms"] == 4321
assert h["stats"]["mapped"] >= h["arenas"]["merged"]["mapped"] > 0
m = h["arenas"]["merged"]
assert m["small.nmalloc"] >= 500, m
assert any(b["size"] == 48 and b["nmalloc"] >= 500 for b in m["bins"].values())
print("json ok")
"#;
    let child = Command::new("python3")
        .args(["-c", check])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        eprintln!("skipped: no python3 to parse the JSON");
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(json.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("json ok"),
        "{}\n{json}",
        String::from_utf8_lossy(&out.stderr)
    );
}
