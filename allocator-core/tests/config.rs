//! Integration tests of the configuration layer: `docs/configuration.md` against the option
//! table, the `hugealloc_conf` symbol (defined below, as a C program would), the real sources
//! and stderr lines in child processes, and that parsing allocates nothing.

use hugealloc::testing::config::{
    self, load, load_from, parse_pairs, write_options, Options, Source, OPTION_TABLE,
};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};

/// `const char *hugealloc_conf = "...";` in C.
#[repr(transparent)]
pub struct ConfPtr(*const u8);
// SAFETY: the pointer is to an immutable static string.
unsafe impl Sync for ConfPtr {}

#[no_mangle]
pub static hugealloc_conf: ConfPtr =
    ConfPtr(c"narenas:3,thp:never,dirty_decay_ms:7".as_ptr().cast());

// ---- allocation counting: System, counted per thread ----

mod common;
use common::allocations_in;

#[global_allocator]
static COUNTING: common::Counting = common::Counting;

#[test]
fn config_parsing_and_loading_allocate_nothing() {
    // The counter counts (else the zero below would prove nothing).
    assert_eq!(
        allocations_in(|| drop(std::hint::black_box(Vec::<u8>::with_capacity(8)))),
        1
    );
    let confs: &[&[u8]] = &[
        b"thp:always,narenas:4,tcache_max:64KiB,dirty_decay_ms:-1,stats_print_opts:Jg",
        b"bogus:1,thp:sometimes,,tcache_max:9G,arena.70.thp:never,thp,:x,narenas:,",
        b"arena.3.thp:never,confirm_conf:true,abort_conf:true,zero:1",
        &[0xff; 700],
    ];
    let n = allocations_in(|| {
        for conf in confs {
            let mut o = Options::DEFAULT;
            let mut lines = 0;
            for pair in parse_pairs(conf) {
                std::hint::black_box(pair.is_ok());
            }
            o.apply_with(conf, Source::Env, &mut |l| lines += l.len());
            write_options(&o, &mut |item| lines += item.len());
            let outcome = load_from(
                &mut o,
                &[(Source::Symbol, Some(conf)), (Source::Env, Some(conf))],
                &mut |l| lines += l.len(),
            );
            std::hint::black_box((lines, outcome));
        }
        // The real sources: the symbol of this binary, /etc, the environment.
        let mut o = Options::DEFAULT;
        load(&mut o, Some(b"junk:false"));
        std::hint::black_box(o);
    });
    assert_eq!(n, 0);
}

// ---- docs/configuration.md ----

const TABLE_START: &str = "<!-- options table: checked against config.rs by tests/config.rs -->";
const TABLE_END: &str = "<!-- end of options table -->";

/// The markdown row `docs/configuration.md` must have for `row`.
fn doc_row(row: &config::OptionRow) -> String {
    let mut default = Vec::new();
    row.default.write(&mut |b| default.extend_from_slice(b));
    let default = String::from_utf8(default).unwrap();
    let mut range = Vec::new();
    row.kind.write_range(&mut |b| range.extend_from_slice(b));
    let range = String::from_utf8(range).unwrap().replace('|', "\\|");
    let default = if default.is_empty() {
        String::from("(empty)")
    } else {
        format!("`{default}`")
    };
    format!(
        "| `{}` | {} | {} | {} | {} |",
        row.name,
        row.kind.type_name(),
        default,
        range,
        row.doc
    )
}

#[test]
fn config_docs_list_every_option_as_the_table_does() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
    let text = std::fs::read_to_string(path).expect("docs/configuration.md");
    let start = text.find(TABLE_START).expect("the table start marker") + TABLE_START.len();
    let end = text[start..].find(TABLE_END).expect("the table end marker") + start;
    let found: Vec<&str> = text[start..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .collect();
    let want: Vec<String> = OPTION_TABLE.iter().map(doc_row).collect();
    assert!(
        found == want,
        "docs/configuration.md's options table differs from config.rs; it should be:\n{}\n",
        want.join("\n")
    );
    // Every option is also named somewhere in the prose or examples around the table.
    for name in config::option_names() {
        assert!(text.matches(name).count() >= 1, "{name}");
    }
}

// ---- docs/configuration.md: the control names ----

const CTL_START: &str = "<!-- ctl table: checked against ctl.rs by tests/config.rs -->";
const CTL_END: &str = "<!-- end of ctl table -->";

/// The markdown row `docs/configuration.md` must have for a control name.
fn ctl_doc_row(name: &hugealloc::ctl::CtlName) -> String {
    let mut pattern = Vec::new();
    name.write(&mut |b| pattern.extend_from_slice(b));
    format!(
        "| `{}` | {} | {} | {} |",
        String::from_utf8(pattern).unwrap(),
        name.ty.c_name(),
        name.access(),
        name.doc.replace('|', "\\|")
    )
}

#[test]
fn config_docs_list_every_ctl_name_as_ctl_does() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
    let text = std::fs::read_to_string(path).expect("docs/configuration.md");
    let start = text.find(CTL_START).expect("the ctl table start marker") + CTL_START.len();
    let end = text[start..]
        .find(CTL_END)
        .expect("the ctl table end marker")
        + start;
    let found: Vec<&str> = text[start..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .collect();
    let mut want = Vec::new();
    hugealloc::ctl::for_each_name(&mut |n| want.push(ctl_doc_row(n)));
    assert!(
        found == want,
        "docs/configuration.md's ctl table differs from ctl.rs; it should be:\n{}\n",
        want.join("\n")
    );
    // Every option has its opt.* name.
    for name in config::option_names() {
        assert!(text.contains(&format!("| `opt.{name}` |")), "opt.{name}");
    }
}

// ---- the real sources and stderr, in child processes ----

const CHILD: &str = "HUGEALLOC_CONFIG_TEST_CHILD";

/// Runs the `config_child` test below in a fresh process with `scenario` and `HUGEALLOC_CONF`.
fn run_child(scenario: &str, env_conf: Option<&str>) -> Output {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "config_child",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, scenario)
    .env_remove("HUGEALLOC_CONF");
    if let Some(conf) = env_conf {
        cmd.env("HUGEALLOC_CONF", conf);
    }
    cmd.output().unwrap()
}

fn stderr_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("hugealloc: "))
        .map(String::from)
        .collect()
}

#[test]
#[ignore = "a helper: the other tests run it in a child process"]
fn config_child() {
    let Ok(scenario) = std::env::var(CHILD) else {
        return;
    };
    let mut o = Options::DEFAULT;
    match scenario.as_str() {
        "load" => load(&mut o, Some(b"dirty_decay_ms:5")),
        "apply" => {
            let bad = o.apply(b"bogus:1,narenas:2", Source::Api);
            println!("RESULT bad={bad}");
        }
        "apply-abort" => {
            o.apply(b"abort_conf:true,bogus:1", Source::Api);
            println!("RESULT not aborted");
        }
        other => panic!("unknown scenario {other}"),
    }
    println!(
        "RESULT narenas={} thp={} dirty_decay_ms={}",
        o.narenas,
        o.thp.name(),
        o.dirty_decay_ms
    );
}

/// The last `RESULT ...` the child printed (libtest may print `test child ... ` before it).
fn result_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.find("RESULT ").map(|i| l[i..].to_string()))
        .next_back()
        .unwrap_or_default()
}

/// Whether `/etc/hugealloc.conf` exists here, which would come between the symbol and the
/// environment.
fn etc_conf() -> Option<String> {
    std::fs::read_link("/etc/hugealloc.conf")
        .ok()
        .map(|p| p.display().to_string())
}

#[test]
fn config_load_reads_symbol_then_env_then_the_rust_string() {
    let out = run_child(
        "load",
        Some("thp:always,dirty_decay_ms:1000,confirm_conf:true"),
    );
    assert!(out.status.success(), "{out:?}");
    let result = result_line(&out);
    let lines = stderr_lines(&out);
    // thp: the symbol says never, HUGEALLOC_CONF always; dirty_decay_ms: 7, 1000, then 5.
    assert!(result.contains("thp=always dirty_decay_ms=5"), "{result}");
    assert!(
        lines.contains(&String::from("hugealloc: opt.thp: always")),
        "{lines:?}"
    );
    assert!(lines.contains(&String::from("hugealloc: opt.dirty_decay_ms: 5")));
    assert!(lines.contains(&String::from(
        "hugealloc: conf from hugealloc_conf: \"narenas:3,thp:never,dirty_decay_ms:7\""
    )));
    assert!(lines.contains(&String::from(
        "hugealloc: conf from HUGEALLOC_CONF: \"thp:always,dirty_decay_ms:1000,confirm_conf:true\""
    )));
    assert!(lines.contains(&String::from(
        "hugealloc: conf from HugeAlloc::with_conf: \"dirty_decay_ms:5\""
    )));
    match etc_conf() {
        // narenas comes from the weak `hugealloc_conf` symbol this binary defines.
        None => {
            assert!(result.contains("narenas=3"), "{result}");
            assert!(lines.contains(&String::from("hugealloc: opt.narenas: 3")));
        }
        Some(target) => eprintln!("/etc/hugealloc.conf -> {target:?}: narenas not checked"),
    }
}

#[test]
fn config_a_bad_pair_in_the_environment_warns_on_stderr() {
    let out = run_child("load", Some("thp:sometimes,narenas:2"));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stderr_lines(&out),
        ["hugealloc: HUGEALLOC_CONF: bad pair \"thp:sometimes\" \
             (invalid value; expected always|madvise|never|default|defer)"]
    );
    let result = result_line(&out);
    assert!(result.contains("narenas=2 thp=never"), "{result}");
}

#[test]
fn config_abort_conf_aborts_after_the_warnings() {
    let out = run_child("load", Some("abort_conf:true,thp:sometimes,bogus:1"));
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{out:?}");
    assert_eq!(
        stderr_lines(&out),
        [
            "hugealloc: HUGEALLOC_CONF: bad pair \"thp:sometimes\" \
             (invalid value; expected always|madvise|never|default|defer)",
            "hugealloc: HUGEALLOC_CONF: bad pair \"bogus:1\" \
             (unknown option; see docs/configuration.md)",
            "hugealloc: aborting: abort_conf:true and 2 bad pairs \
             (see above; last source read: HUGEALLOC_CONF)",
        ]
    );
    assert_eq!(result_line(&out), "");
}

#[test]
fn config_apply_warns_or_aborts() {
    let out = run_child("apply", None);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("RESULT bad=1"));
    assert_eq!(
        stderr_lines(&out),
        ["hugealloc: HugeAlloc::with_conf: bad pair \"bogus:1\" \
          (unknown option; see docs/configuration.md)"]
    );
    let out = run_child("apply-abort", None);
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{out:?}");
    assert_eq!(
        stderr_lines(&out).last().map(String::as_str),
        Some(
            "hugealloc: aborting: abort_conf:true and 1 bad pair \
             (see above; last source read: HugeAlloc::with_conf)"
        )
    );
}

#[test]
fn config_the_weak_symbol_is_found_when_defined() {
    // No HUGEALLOC_CONF: every value but the Rust string's comes from the symbol above (the
    // unit tests check that a binary without the symbol reads none).
    let out = run_child("load", None);
    assert!(out.status.success(), "{out:?}");
    if etc_conf().is_none() {
        assert_eq!(
            result_line(&out),
            "RESULT narenas=3 thp=never dirty_decay_ms=5"
        );
        assert_eq!(stderr_lines(&out), Vec::<String>::new());
    }
}
