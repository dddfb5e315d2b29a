//! The layer rule of `src/lib.rs`: modules are declared bottom-up, and each refers only to
//! modules declared before it (so the imports form a stack, with no cycle). Reads the module
//! order from `lib.rs` and every `crate::NAME` path in each module's files (`use` lines, groups
//! `use crate::{a, b::c}` and inline paths alike; comments are skipped, inline unit-test modules
//! are not), and fails naming each file and module that breaks the rule. A module's unit-test
//! file (`src/NAME/tests.rs`) is not part of the library's import graph and may drive the
//! module through the layers above it (`purge`'s tests run a real arena), so it is left out. A path to an item of the
//! crate root (`crate::purge()`) counts as a reference to the top layer.

use std::path::{Path, PathBuf};

/// The file modules `lib.rs` declares, in order.
fn module_order(lib: &str) -> Vec<String> {
    lib.lines()
        .filter_map(|line| {
            let rest = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("mod "))?;
            let name = rest.strip_suffix(';')?;
            Some(name.trim().to_string())
        })
        .collect()
}

/// `text` without its `//` comments (doc comments included).
fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first path segments after each `crate::` in `code`; a segment followed by `(` (a call
/// of a crate-root function) is reported as `()name`.
fn crate_refs(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            // A `use crate::{...}` group: the first segment of each top-level item.
            let mut depth = 0;
            let mut item_start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_ascii_alphabetic() || c == '_') => {
                        let name = ident_at(&group[j..]);
                        if name != "self" {
                            out.push(name.to_string());
                        }
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident_at(after);
            if after[name.len()..].starts_with('(') {
                out.push(format!("(){name}"));
            } else if !name.is_empty() {
                out.push(name.to_string());
            }
        }
        rest = after;
    }
    out
}

/// `src/NAME.rs` and every file under `src/NAME/`.
fn module_files(src: &Path, name: &str) -> Vec<PathBuf> {
    let mut files = vec![src.join(format!("{name}.rs"))];
    let mut dirs = vec![src.join(name)];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs")
                && path.file_name().is_some_and(|n| n != "tests.rs")
            {
                files.push(path);
            }
        }
    }
    files.retain(|f| f.exists());
    files
}

/// Every reference from a module to one declared after it (or to the crate root).
fn violations(src: &Path) -> Vec<String> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read src/lib.rs");
    let order = module_order(&lib);
    assert!(
        order.len() > 10,
        "found too few modules in lib.rs: {order:?}"
    );
    let mut found = Vec::new();
    for (rank, module) in order.iter().enumerate() {
        for file in module_files(src, module) {
            let text = std::fs::read_to_string(&file).expect("read a module file");
            let shown = file.strip_prefix(src.parent().unwrap()).unwrap_or(&file);
            for name in crate_refs(&strip_comments(&text)) {
                let what = match order.iter().position(|m| *m == name) {
                    Some(r) if r <= rank => continue,
                    Some(_) => format!("`{name}`, declared after it in lib.rs"),
                    None => format!("the crate root's `{}`", name.trim_start_matches("()")),
                };
                let line = format!("{}: module `{module}` refers to {what}", shown.display());
                if !found.contains(&line) {
                    found.push(line);
                }
            }
        }
    }
    found
}

#[test]
fn modules_use_only_modules_declared_before_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src);
    assert!(found.is_empty(), "layer rule broken:\n{}", found.join("\n"));
}

#[test]
fn the_scan_sees_every_kind_of_path() {
    let code = "use crate::{alloc, thread::{a, b}, Thp};\n\
                let x = crate::arena::owner_of(p); // crate::ctl in a comment\n\
                crate::purge();";
    assert_eq!(
        crate_refs(&strip_comments(code)),
        ["alloc", "thread", "Thp", "arena", "()purge"]
    );
}
