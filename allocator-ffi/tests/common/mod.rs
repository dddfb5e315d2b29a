//! Shared by the integration tests: builds `libhugealloc.so`/`.a` (cargo does not build a
//! cdylib-only library for integration tests, so the first test of each binary runs
//! `cargo build -p hugealloc-ffi --lib` into the same target directory and profile as the
//! test itself), compiles the C programs of `tests/c`, and runs programs with a time limit.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

pub struct Build {
    /// `target/<profile>`: holds `libhugealloc.so`, `libhugealloc.a` and the launcher.
    pub profile_dir: PathBuf,
    pub target_dir: PathBuf,
    pub profile: String,
    pub triple: Option<String>,
}

impl Build {
    pub fn so(&self) -> PathBuf {
        self.profile_dir.join("libhugealloc.so")
    }
    pub fn staticlib(&self) -> PathBuf {
        self.profile_dir.join("libhugealloc.a")
    }
}

pub fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn include_dir() -> PathBuf {
    manifest_dir().join("include")
}

pub fn c_dir() -> PathBuf {
    manifest_dir().join("tests/c")
}

/// A scratch folder for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("hugealloc-ffi")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Where this test binary was built: `<target>/[<triple>/]<profile>/deps/<test>`.
fn locate() -> Build {
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary inside <target>/<profile>/deps")
        .to_path_buf();
    let dir_name = profile_dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let profile = if dir_name == "debug" {
        "dev".to_string()
    } else {
        dir_name
    };
    let mut target_dir = profile_dir.parent().unwrap().to_path_buf();
    let mut triple = None;
    if !target_dir.join("CACHEDIR.TAG").exists()
        && target_dir
            .parent()
            .is_some_and(|p| p.join("CACHEDIR.TAG").exists())
    {
        triple = Some(
            target_dir
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned(),
        );
        target_dir = target_dir.parent().unwrap().to_path_buf();
    }
    Build {
        profile_dir,
        target_dir,
        profile,
        triple,
    }
}

/// Builds the library (once per test binary) and returns where it is.
pub fn build() -> &'static Build {
    static BUILD: OnceLock<Build> = OnceLock::new();
    BUILD.get_or_init(|| {
        let b = locate();
        cargo_build_lib(&b, &b.target_dir, &[]);
        assert!(
            b.so().is_file(),
            "{} missing after the build",
            b.so().display()
        );
        assert!(b.staticlib().is_file());
        b
    })
}

/// Runs `cargo build -p hugealloc-ffi --lib` for `b`'s profile into `target_dir`.
pub fn cargo_build_lib(b: &Build, target_dir: &Path, extra: &[&str]) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "--quiet",
        "-p",
        "hugealloc-ffi",
        "--lib",
        "--profile",
    ])
    .arg(&b.profile)
    .arg("--target-dir")
    .arg(target_dir)
    .args(extra)
    .current_dir(manifest_dir());
    if let Some(t) = &b.triple {
        cmd.args(["--target", t]);
    }
    let out = cmd.output().expect("running cargo");
    assert!(
        out.status.success(),
        "cargo build of the library failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How a C program meets the library.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Built without it, run with `LD_PRELOAD`.
    Preload,
    /// Linked with `-lhugealloc` (and an rpath).
    Linked,
    /// Linked with `libhugealloc.a`.
    Static,
}

pub const MODES: [Mode; 3] = [Mode::Preload, Mode::Linked, Mode::Static];

/// The libraries a static link of `libhugealloc.a` needs (`rustc --print native-static-libs`).
pub const STATIC_LIBS: &[&str] = &["-lpthread", "-ldl", "-lm", "-lgcc_s", "-lutil", "-lrt"];

/// Compiles `tests/c/<name>.c` for `mode` into `dir`; returns the executable.
pub fn compile_c(name: &str, mode: Mode, dir: &Path) -> PathBuf {
    let b = build();
    let out = dir.join(format!("{name}-{mode:?}").to_lowercase());
    let mut cmd = Command::new("gcc");
    // -fno-builtin: gcc may otherwise fold or drop malloc/free pairs the tests rely on.
    cmd.args(["-O1", "-g", "-fno-builtin", "-Wall", "-Wextra"])
        .args([
            "-Wno-alloc-size-larger-than",
            "-Wno-use-after-free",
            "-Wno-deprecated-declarations",
        ])
        .arg("-I")
        .arg(include_dir())
        .arg(c_dir().join(format!("{name}.c")))
        .arg("-o")
        .arg(&out);
    match mode {
        Mode::Preload => {}
        Mode::Linked => {
            cmd.arg("-DHA_LINKED")
                .arg(format!("-L{}", b.profile_dir.display()))
                .arg("-lhugealloc")
                .arg(format!("-Wl,-rpath,{}", b.profile_dir.display()));
        }
        Mode::Static => {
            cmd.args(["-DHA_LINKED", "-DHA_STATIC"]).arg(b.staticlib());
        }
    }
    cmd.args(["-lpthread", "-ldl"]);
    if mode == Mode::Static {
        cmd.args(STATIC_LIBS);
    }
    let o = cmd.output().expect("running gcc");
    assert!(
        o.status.success(),
        "gcc {name} ({mode:?}) failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// `cmd` under `timeout` (so a deadlock fails the test instead of hanging it). Without the
/// `LD_LIBRARY_PATH` cargo gives tests (`target/<profile>` first), which would make a
/// program find the default `libhugealloc.so` ahead of the one it was linked with.
pub fn timed(secs: u32, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("timeout");
    c.arg("-k").arg("5").arg(secs.to_string()).arg(program);
    c.stdin(Stdio::null()).env_remove("LD_LIBRARY_PATH");
    c
}

/// The configuration `preload` sets: statistics at exit, and the effective options at start
/// (`confirm_conf`), which show up even where the program closes stderr before exiting (as
/// coreutils do), so that its statistics are lost.
pub const PRELOAD_CONF: &str = "stats_print:true,confirm_conf:true";

/// Sets the environment that preloads the library (see `PRELOAD_CONF`).
pub fn preload(cmd: &mut Command) -> &mut Command {
    cmd.env("LD_PRELOAD", build().so())
        .env("HUGEALLOC_CONF", PRELOAD_CONF)
}

/// Runs and returns the output, failing the test with both streams on a non-zero exit.
pub fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        tail(&out.stdout),
        tail(&out.stderr)
    );
    out
}

/// The last 4 KiB of some output, as text.
pub fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(4096);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

/// True when the stats hugealloc prints at exit are in `stderr` (the library was loaded and
/// served the program).
pub fn printed_stats(stderr: &[u8]) -> bool {
    String::from_utf8_lossy(stderr).contains("hugealloc: stats.allocated: ")
}

/// True when hugealloc's start-up lines (`confirm_conf`) are in `stderr`: the library was
/// preloaded and initialised in that process.
pub fn printed_confirmation(stderr: &[u8]) -> bool {
    String::from_utf8_lossy(stderr).contains("hugealloc: opt.thp: ")
}

/// Finds `name` in PATH (or an absolute path that exists).
pub fn which(name: &str) -> Option<PathBuf> {
    if name.starts_with('/') {
        return Path::new(name).is_file().then(|| PathBuf::from(name));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}

/// Like `which`, failing the test with the Debian package to install when it is missing
/// (`.ci/run` installs them): these tests must not pass silently without their program.
pub fn require(name: &str, package: &str) -> PathBuf {
    which(name).unwrap_or_else(|| {
        panic!("`{name}` is not installed: install the Debian package `{package}` (.ci/run does)")
    })
}
