//! The privacy rule of `src/lib.rs`: the internal modules are private, so nothing outside the
//! crate reaches their safe functions that trust raw pointers. The only public modules are
//! `ctl` (part of the API) and the two hidden ways in for the workspace, `ffi` (the C entry
//! points for `hugealloc-ffi`) and `testing` (internals for tests), both `#[doc(hidden)]`.
//! Reads `lib.rs`: a module made `pub` again, or one of the hidden modules shown in the
//! documentation, fails here.

use std::path::Path;

/// The modules the crate root may declare `pub`, and whether each must be `#[doc(hidden)]`.
const PUBLIC: &[(&str, bool)] = &[("ctl", false), ("ffi", true), ("testing", true)];

/// Every `pub mod NAME` at the start of a line of `lib`, with the attribute lines above it.
fn public_modules(lib: &str) -> Vec<(String, Vec<String>)> {
    let lines: Vec<&str> = lib.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        // `pub(crate) mod` is private to the crate: not matched.
        let Some(rest) = line.strip_prefix("pub mod ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let attrs = lines[..i]
            .iter()
            .rev()
            .take_while(|l| l.starts_with("#[") || l.starts_with("///"))
            .map(|l| l.to_string())
            .collect();
        found.push((name, attrs));
    }
    found
}

/// What breaks the rule in `lib`.
fn violations(lib: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (name, attrs) in public_modules(lib) {
        match PUBLIC.iter().find(|(n, _)| *n == name) {
            None => found.push(format!(
                "`pub mod {name}`: internal modules are private (`mod {name};`); \
                 export what tests need from `testing`"
            )),
            Some((_, true)) if !attrs.iter().any(|a| a.trim() == "#[doc(hidden)]") => found.push(
                format!("`pub mod {name}` is not `#[doc(hidden)]`: it is not API"),
            ),
            Some(_) => {}
        }
    }
    found
}

#[test]
fn only_ctl_and_the_hidden_modules_are_public() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
        .expect("read src/lib.rs");
    let found = violations(&lib);
    assert!(
        found.is_empty(),
        "privacy rule broken:\n{}",
        found.join("\n")
    );
    // The scan sees the modules it allows: a change of lib.rs's layout cannot blind it.
    let seen: Vec<String> = public_modules(&lib).into_iter().map(|m| m.0).collect();
    for (name, _) in PUBLIC {
        assert!(
            seen.iter().any(|s| s == name),
            "no `pub mod {name}` found in lib.rs"
        );
    }
}

#[test]
fn the_scan_catches_a_public_internal_module_and_a_shown_hidden_one() {
    let lib = "mod os;\n\
               pub mod arena;\n\
               #[cfg(not(loom))]\n\
               pub mod ctl;\n\
               #[cfg(not(loom))]\n\
               pub mod ffi {\n\
               }\n\
               #[doc(hidden)]\n\
               pub mod testing;\n";
    assert_eq!(
        violations(lib),
        [
            "`pub mod arena`: internal modules are private (`mod arena;`); \
             export what tests need from `testing`",
            "`pub mod ffi` is not `#[doc(hidden)]`: it is not API",
        ]
    );
}
