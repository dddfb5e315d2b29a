//! Out of memory through the C ABI: `tests/c/oom.c` lowers its own `RLIMIT_AS` after warming
//! up and checks every allocating export for `NULL` + `ENOMEM`, that cached blocks and another
//! thread are still served, and that everything recovers once memory is freed or the limit is
//! raised. Run preloaded (the program is built without the library), linked and static.

mod common;

use common::*;

#[test]
fn every_entry_point_fails_with_enomem_and_recovers() {
    let dir = scratch("oom");
    for mode in MODES {
        let exe = compile_c("oom", mode, &dir);
        let mut cmd = timed(180, &exe);
        if mode == Mode::Preload {
            cmd.env("LD_PRELOAD", build().so());
        }
        let out = run_ok(&mut cmd, &format!("oom ({mode:?})"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let want = format!("oom ({}): ok", format!("{mode:?}").to_lowercase());
        assert!(
            stdout.contains(&want),
            "oom ({mode:?}):\n{stdout}\n{stderr}"
        );
        // The program reached the exhaustion phase and saw the other thread served.
        assert!(
            stderr.contains("before NULL") && stderr.contains("small block served"),
            "{stderr}"
        );
        eprintln!("oom ({mode:?}): {}", stderr.trim());
    }
}
