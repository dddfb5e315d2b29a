//! No panic can start in the allocator's own code: a panic runs std's panic hook, which
//! allocates (re-entering malloc, perhaps with a bin or arena lock held) before
//! `panic = "abort"` aborts. The allocator aborts through `diag::fatal` instead (a message and
//! `abort`, no hook), so its compiled code must hold no call to a panic function.
//!
//! The check reads the release `libhugealloc.so` as shipped (thin LTO, `debug = 1`): every
//! `call`/`jmp` to a panic entry (`core::panicking::*`, `slice_index_fail`, `unwrap_failed`,
//! `expect_failed`, `len_mismatch_fail`, ...), direct or through the GOT, is attributed with
//! `addr2line -i` to the innermost inlined frame in `allocator-core/src` or `allocator-ffi/src`
//! (std's own panic sites have no such frame and are not ours). A site in a file not listed in
//! [`NOT_YET`] fails the test. Not seen: a panic inside a std function the allocator calls
//! without inlining it (today only `CStr::from_bytes_until_nul` and `memchr`, which cannot
//! panic). Needs binutils (`objdump`, `readelf`, `addr2line`); release builds only (a debug
//! build keeps every bounds and overflow check).

mod common;

use common::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::Command;

/// Files still holding panic sites (`allocator-core/src/<file>`), to be cleaned and removed
/// from this list; every other file of the project must have none. An entry `NAME.rs` also
/// covers the files of the directory module `NAME/` (`ctl.rs` covers `ctl/mod.rs` and
/// `ctl/name.rs`): see [`not_yet`].
const NOT_YET: &[&str] = &[];

/// Whether `file` (relative to `allocator-core/src/` or `allocator-ffi/src/`) is listed in
/// [`NOT_YET`]: by its own name, or as a file of a directory module whose `NAME.rs` is listed.
fn not_yet(file: &str) -> bool {
    covered_by(NOT_YET, file)
}

/// Whether `file` is one of `list`'s entries or a file of a listed directory module.
fn covered_by(list: &[&str], file: &str) -> bool {
    list.iter().any(|entry| {
        file == *entry
            || entry
                .strip_suffix(".rs")
                .and_then(|module| file.strip_prefix(module))
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// Whether a symbol (demangled) is a panic entry point.
fn is_panic_entry(name: &str) -> bool {
    name.starts_with("core::panicking::")
        || name.starts_with("core::slice::index::slice_index_fail")
        || name.starts_with("core::slice::index::slice_")
        || name.starts_with("core::option::unwrap_failed")
        || name.starts_with("core::option::expect_failed")
        || name.starts_with("core::result::unwrap_failed")
        || name.starts_with("core::slice::copy_from_slice_impl::len_mismatch_fail")
        || name.starts_with("core::str::slice_error_fail")
        || name.starts_with("core::cell::panic_already")
        || name.starts_with("std::panicking::")
        || name.starts_with("std::rt::begin_panic")
}

fn stdout_of(cmd: &mut Command, what: &str) -> String {
    String::from_utf8_lossy(&run_ok(cmd, what).stdout).into_owned()
}

/// The panic call sites of `so`, each with its innermost project frame (`file:line`), or
/// `None` where no project code is inlined there (std's own sites); and, as a control of the
/// attribution itself, the project frame of the first instruction of `hugealloc::alloc::free_slow`
/// (a function of the allocator's own, never inlined).
#[allow(clippy::type_complexity)]
fn panic_sites(so: &std::path::Path) -> (Vec<(u64, String, Option<String>)>, Option<String>) {
    let dis = stdout_of(
        Command::new("objdump")
            .args(["-d", "--no-show-raw-insn", "-C"])
            .arg(so),
        "objdump",
    );
    // Function starts: "0000000000034820 <name>:".
    let mut panic_entries = HashSet::new();
    for line in dis.lines() {
        if let Some(rest) = line.strip_suffix(">:") {
            if let Some((addr, name)) = rest.split_once(" <") {
                if is_panic_entry(name) {
                    panic_entries.insert(u64::from_str_radix(addr, 16).unwrap());
                }
            }
        }
    }
    assert!(
        !panic_entries.is_empty(),
        "no panic entry found: symbols stripped?"
    );
    // GOT slots: "offset info R_X86_64_RELATIVE addend" (the target address).
    let relocs = stdout_of(Command::new("readelf").arg("-rW").arg(so), "readelf");
    let mut got = HashMap::new();
    for line in relocs.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 4 && f[2] == "R_X86_64_RELATIVE" {
            if let (Ok(slot), Ok(target)) =
                (u64::from_str_radix(f[0], 16), u64::from_str_radix(f[3], 16))
            {
                got.insert(slot, target);
            }
        }
    }
    // Calls and jumps: "   23a76:\tcall   1e6f0 <sym>" or "call   *0x47eba(%rip)   # 6bab8 <...>".
    let mut sites = Vec::new();
    let mut function = String::new();
    let mut control = None;
    for line in dis.lines() {
        if let Some(rest) = line.strip_suffix(">:") {
            function = rest.split_once(" <").map_or("", |(_, n)| n).to_string();
            continue;
        }
        let Some((addr, insn)) = line.trim_start().split_once(":\t") else {
            continue;
        };
        if control.is_none() && function == "hugealloc::alloc::free_slow" {
            control = u64::from_str_radix(addr, 16).ok();
        }
        let Some(operand) = insn
            .strip_prefix("call")
            .or_else(|| insn.strip_prefix("jmp"))
        else {
            continue;
        };
        let operand = operand.trim_start();
        let target = if operand.starts_with('*') {
            operand
                .split_once("# ")
                .and_then(|(_, s)| s.split_whitespace().next())
                .and_then(|slot| u64::from_str_radix(slot, 16).ok())
                .and_then(|slot| got.get(&slot).copied())
        } else {
            operand
                .split_whitespace()
                .next()
                .and_then(|t| u64::from_str_radix(t, 16).ok())
        };
        if target.is_some_and(|t| panic_entries.contains(&t)) {
            if let Ok(a) = u64::from_str_radix(addr, 16) {
                sites.push((a, function.clone()));
            }
        }
    }
    // addr2line -a -i: the address, then its frames innermost first.
    let mut cmd = Command::new("addr2line");
    cmd.args(["-a", "-i", "-e"]).arg(so);
    for a in sites.iter().map(|(a, _)| a).chain(&control) {
        cmd.arg(format!("{a:#x}"));
    }
    let lines = stdout_of(&mut cmd, "addr2line");
    let mut frame_of: HashMap<u64, Option<String>> = HashMap::new();
    let mut current = None;
    for line in lines.lines() {
        if let Some(hex) = line.strip_prefix("0x") {
            let a = u64::from_str_radix(hex, 16).unwrap();
            frame_of.insert(a, None);
            current = Some(a);
        } else if let Some(a) = current {
            let slot = frame_of.get_mut(&a).unwrap();
            if slot.is_none() {
                for dir in ["/allocator-core/src/", "/allocator-ffi/src/"] {
                    if let Some((_, rel)) = line.split_once(dir) {
                        *slot = Some(rel.to_string());
                    }
                }
            }
        }
    }
    let control = control.and_then(|a| frame_of.get(&a).cloned().flatten());
    let sites = sites
        .into_iter()
        .map(|(a, f)| (a, f, frame_of.get(&a).cloned().flatten()))
        .collect();
    (sites, control)
}

/// The NOT_YET matching: a directory module's files are covered by its `NAME.rs` entry, and
/// only those (so the main test still fails for a file not listed).
#[test]
fn not_yet_covers_directory_modules_only() {
    let list = ["ctl.rs", "prof.rs"];
    assert!(covered_by(&list, "ctl.rs"));
    assert!(covered_by(&list, "ctl/mod.rs"));
    assert!(covered_by(&list, "ctl/name.rs"));
    assert!(!covered_by(&list, "ctlx.rs"));
    assert!(!covered_by(&list, "ctlx/mod.rs"));
    assert!(!covered_by(&list, "config/parse.rs"));
    assert!(!covered_by(&list, "lib.rs"));
    assert!(NOT_YET.iter().all(|f| not_yet(f)) && !not_yet("lib.rs"));
}

#[test]
fn no_panic_site_in_allocator_code() {
    if cfg!(debug_assertions) {
        eprintln!("skipped: a debug build keeps every bounds and overflow check");
        return;
    }
    let b = build();
    let (sites, control) = panic_sites(&b.so());
    // The check sees something: an allocator function's own code is attributed to its file.
    assert!(
        control.as_deref().is_some_and(|f| f.starts_with("alloc")),
        "hugealloc::alloc::free_slow attributed to {control:?}: is the attribution broken?"
    );
    let mut ours: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (addr, function, frame) in &sites {
        if let Some(frame) = frame {
            let file = frame.split(':').next().unwrap_or("").to_string();
            ours.entry(file)
                .or_default()
                .push(format!("{addr:#x} {frame} in {function}"));
        }
    }
    for (file, list) in &ours {
        eprintln!("{} panic site(s) in {file}", list.len());
    }
    // While files are listed, they do hold sites (else the entry is stale: remove it).
    for entry in NOT_YET {
        assert!(
            ours.keys().any(|f| covered_by(&[entry], f)),
            "{entry} is listed in NOT_YET but holds no panic site: remove it"
        );
    }
    let bad: Vec<&String> = ours
        .iter()
        .filter(|(file, _)| !not_yet(file))
        .flat_map(|(_, l)| l)
        .collect();
    assert!(
        bad.is_empty(),
        "panic sites in code that must not panic (use `get`, a masked index, or an unchecked \
         access with a SAFETY comment, or `diag::fatal`):\n{}",
        bad.iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}
