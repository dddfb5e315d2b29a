//! `compare`: every workload under every allocator, through `LD_PRELOAD`.
//!
//! 1. Builds what it needs with cargo: `libhugealloc.so` (`-p hugealloc-ffi --lib`) and the
//!    `hugealloc-workloads` binary (the suite with `System` as global allocator, so `malloc`
//!    is whatever the process resolves), both into the running binary's target directory.
//! 2. Finds the peers (Debian's libjemalloc2, libmimalloc2.0, libtcmalloc-minimal4), says which
//!    are missing and skips them, and checks for each configuration that the workload binary's
//!    `malloc` really comes from the preloaded library (`malloc_provider:`).
//! 3. Runs each workload (and each real program, [`real`]) under each configuration, `--reps`
//!    times, the configurations' order rotating from run to run so drift on a shared machine
//!    hits all alike, after one discarded warm-up run per workload under glibc. Each run goes
//!    through a small helper process ([`spawn_main`]) that starts the program and measures wall
//!    time around start..`wait4`; peak RSS (`ru_maxrss`) and minor faults (`ru_minflt`) come
//!    from `wait4`'s rusage (for a shell pipeline: the largest RSS and the sum of faults over
//!    the processes it waited for). A run that exits non-zero or lacks its `result:` line
//!    is a failure, shown as such and left out of the means.
//! 4. Prints markdown tables (median per cell, ratio to glibc, geometric means) and writes
//!    `bench-results.csv` (every run), `bench-summary.csv`, `bench-time.svg` and
//!    `bench-rss.svg` into `--out` (default: the workspace's `docs/`). See [`report`].

mod real;
mod report;

use crate::args::Args;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// One allocator configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub name: &'static str,
    /// The library to preload (`None`: glibc).
    pub preload: Option<PathBuf>,
    pub env: Vec<(&'static str, &'static str)>,
}

/// Environment variables that would change an allocator's behaviour: cleared in every child.
const CLEARED_ENV: &[&str] = &[
    "LD_PRELOAD",
    "HUGEALLOC_CONF",
    "MALLOC_CONF",
    "_RJEM_MALLOC_CONF",
    "MIMALLOC_OPTIONS",
    "MIMALLOC_VERBOSE",
    "MIMALLOC_SHOW_STATS",
    "TCMALLOC_RELEASE_RATE",
    "GLIBC_TUNABLES",
];

/// What one run measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    pub wall_ms: f64,
    pub maxrss_kib: u64,
    pub minflt: u64,
}

/// A workload as `compare` runs it.
pub struct Job {
    pub name: String,
    /// `suite` or `real`.
    pub group: &'static str,
    kind: JobKind,
}

enum JobKind {
    /// Arguments to `hugealloc-workloads`.
    Workload(Vec<String>),
    Real(real::Program),
}

struct Options {
    reps: usize,
    only: Option<Vec<String>>,
    allocators: Option<Vec<String>>,
    scale: f64,
    out: PathBuf,
    warmup: bool,
    build: bool,
    /// `--extra NAME=LIB[@VAR=VALUE]...,...`: more configurations preloading a given library
    /// (for example an older `libhugealloc.so`, to measure a change before and after in one
    /// run), with environment variables of their own.
    extra: Vec<Config>,
}

fn options(args: &Args) -> Result<Options, String> {
    args.only(&[
        "reps",
        "only",
        "size-scale",
        "out",
        "no-warmup",
        "no-build",
        "allocators",
        "extra",
    ])?;
    let list = |k: &str| {
        args.value(k).map(|v| {
            v.split(',')
                .map(str::to_string)
                .filter(|s| !s.is_empty())
                .collect()
        })
    };
    let o = Options {
        reps: args.get("reps", 3)?,
        only: list("only"),
        allocators: list("allocators"),
        scale: args.get("size-scale", 1.0)?,
        out: args.value("out").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs"),
            PathBuf::from,
        ),
        warmup: !args.has("no-warmup"),
        build: !args.has("no-build"),
        extra: match args.value("extra") {
            None => Vec::new(),
            Some(v) => extra_items(v)
                .iter()
                .map(|item| extra_config(item))
                .collect::<Result<_, _>>()?,
        },
    };
    if o.reps == 0 || o.scale <= 0.0 || !o.scale.is_finite() {
        return Err("--reps must be at least 1 and --size-scale positive".to_string());
    }
    Ok(o)
}

/// `--extra`'s items: split at commas, except that a piece without `=` continues the item
/// before it (a configuration string such as `check:full,junk:true` in `@VAR=VALUE`).
fn extra_items(v: &str) -> Vec<String> {
    let mut items: Vec<String> = Vec::new();
    for piece in v.split(',').filter(|s| !s.is_empty()) {
        match items.last_mut() {
            Some(last) if !piece.contains('=') => {
                last.push(',');
                last.push_str(piece);
            }
            _ => items.push(piece.to_string()),
        }
    }
    items
}

/// One `--extra` item, `NAME=LIB[@VAR=VALUE]...`: a configuration preloading `LIB` with
/// those environment variables set (for example `chk=LIB@HUGEALLOC_CONF=check:full`).
fn extra_config(item: &str) -> Result<Config, String> {
    let Some((name, rest)) = item.split_once('=') else {
        return Err(format!("--extra {item}: expected NAME=LIB[@VAR=VALUE]..."));
    };
    let mut parts = rest.split('@');
    let lib = PathBuf::from(parts.next().unwrap_or(""));
    let mut env = Vec::new();
    for assignment in parts {
        match assignment.split_once('=') {
            Some((var, value)) if !var.is_empty() => {
                // Like the name below: these live for the whole run.
                let var: &'static str = Box::leak(var.to_string().into_boxed_str());
                let value: &'static str = Box::leak(value.to_string().into_boxed_str());
                env.push((var, value));
            }
            _ => return Err(format!("--extra {item}: expected VAR=VALUE after @")),
        }
    }
    if name.is_empty() || !lib.is_file() {
        return Err(format!(
            "--extra {item}: no name, or {} is not a file",
            lib.display()
        ));
    }
    // The name lives for the whole run; leaking one string per item is the simplest owner.
    let name: &'static str = Box::leak(name.to_string().into_boxed_str());
    Ok(Config {
        name,
        preload: Some(lib),
        env,
    })
}

/// `n * scale`, at least 1.
fn scaled(n: u64, scale: f64) -> String {
    ((n as f64 * scale).round() as u64).max(1).to_string()
}

/// The jobs in table order: the suite, the older workloads, then the real programs.
fn jobs(scale: f64) -> Vec<Job> {
    let w = |name: &str, args: Vec<String>| Job {
        name: name.to_string(),
        group: "suite",
        kind: JobKind::Workload(args),
    };
    let mut v: Vec<Job> = crate::suite::WORKLOADS
        .iter()
        .map(|s| {
            w(
                s.name,
                vec![s.name.to_string(), scaled(s.default_size, scale)],
            )
        })
        .collect();
    let s = |x: &str| x.to_string();
    v.push(w(
        "bigbuf",
        vec![s("bigbuf"), s("10"), s("--mib"), scaled(512, scale)],
    ));
    v.push(w("frag", vec![s("frag"), scaled(256, scale)]));
    v.push(w("workload", vec![s("workload"), scaled(1_000_000, scale)]));
    for p in real::programs(scale) {
        v.push(Job {
            name: p.name.to_string(),
            group: "real",
            kind: JobKind::Real(p),
        });
    }
    v
}

/// The first file in the library directories whose name starts with `prefix`.
fn find_lib(prefix: &str) -> Option<PathBuf> {
    let dirs = [
        "/usr/lib/x86_64-linux-gnu",
        "/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/lib",
    ];
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(d) else {
            continue;
        };
        let mut names: Vec<PathBuf> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(prefix))
            })
            .collect();
        names.sort();
        if let Some(p) = names.into_iter().next() {
            return Some(p);
        }
    }
    None
}

/// Every configuration whose library exists; reports the missing ones on stderr.
fn configs(target: &Path) -> Vec<Config> {
    let mut v = vec![Config {
        name: "glibc",
        preload: None,
        env: vec![],
    }];
    let huge = target.join("libhugealloc.so");
    v.push(Config {
        name: "hugealloc",
        preload: Some(huge.clone()),
        env: vec![],
    });
    v.push(Config {
        name: "hugealloc-thp",
        preload: Some(huge),
        env: vec![("HUGEALLOC_CONF", "thp:always")],
    });
    let peers: [(&str, &str, &str, &str); 3] = [
        (
            "jemalloc",
            "libjemalloc.so.2",
            "libjemalloc2",
            "MALLOC_CONF",
        ),
        ("mimalloc", "libmimalloc.so.2", "libmimalloc2.0", ""),
        (
            "tcmalloc",
            "libtcmalloc_minimal.so.4",
            "libtcmalloc-minimal4",
            "",
        ),
    ];
    for (name, prefix, package, conf) in peers {
        match find_lib(prefix) {
            Some(lib) => {
                v.push(Config {
                    name,
                    preload: Some(lib.clone()),
                    env: vec![],
                });
                if !conf.is_empty() {
                    v.push(Config {
                        name: "jemalloc-thp",
                        preload: Some(lib),
                        env: vec![(conf, "thp:always")],
                    });
                }
            }
            None => eprintln!(
                "compare: {name} not found ({prefix}*): skipped (apt-get install {package})"
            ),
        }
    }
    v
}

impl Config {
    /// The environment of a run under this configuration (besides [`CLEARED_ENV`], removed).
    fn env_pairs(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if let Some(lib) = &self.preload {
            v.push(("LD_PRELOAD".to_string(), lib.display().to_string()));
        }
        v
    }

    /// What `malloc_provider:` must contain under this configuration.
    fn provider(&self) -> String {
        match &self.preload {
            None => "libc.so".to_string(),
            Some(p) => p.file_name().unwrap().to_string_lossy().into_owned(),
        }
    }
}

/// Runs `cmd` under `config` through the `spawn` helper (see [`spawn_main`]), with stdout
/// and stderr into files, and returns what it measured, or an error naming the exit status
/// and the end of its stderr.
fn measure(
    ctx: &Ctx,
    cmd: &Command,
    config: &Config,
    out: &Path,
    err: &Path,
) -> Result<Sample, String> {
    let figures = ctx.tmp.join("rusage");
    let _ = std::fs::remove_file(&figures);
    let mut sp = Command::new(&ctx.workloads_bin);
    sp.arg("spawn").arg(&figures);
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            sp.arg(format!("{}={}", k.to_string_lossy(), v.to_string_lossy()));
        }
    }
    for (k, v) in config.env_pairs() {
        sp.arg(format!("{k}={v}"));
    }
    sp.arg("--").arg(cmd.get_program()).args(cmd.get_args());
    if let Some(d) = cmd.get_current_dir() {
        sp.current_dir(d);
    }
    for k in CLEARED_ENV {
        sp.env_remove(k);
    }
    sp.stdin(Stdio::null());
    sp.stdout(Stdio::from(
        std::fs::File::create(out).map_err(|e| e.to_string())?,
    ));
    sp.stderr(Stdio::from(
        std::fs::File::create(err).map_err(|e| e.to_string())?,
    ));
    let status = sp
        .status()
        .map_err(|e| format!("cannot start {sp:?}: {e}"))?;
    let text = std::fs::read_to_string(&figures).unwrap_or_default();
    let f: Vec<f64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    if !status.success() || f.len() != 3 {
        let tail = std::fs::read_to_string(err).unwrap_or_default();
        let tail: Vec<&str> = tail.lines().rev().take(5).collect();
        return Err(format!(
            "{status}; stderr ends: {}",
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ));
    }
    Ok(Sample {
        wall_ms: f[0],
        maxrss_kib: f[1] as u64,
        minflt: f[2] as u64,
    })
}

/// `spawn FILE [KEY=VALUE]... -- PROGRAM ARGS...`: runs PROGRAM with the extra environment,
/// waits for it with `wait4` and writes `wall_ms peak_rss_kib minor_faults` to FILE; exits
/// with PROGRAM's status (128 + signal if killed).
///
/// Why a helper: Linux keeps a process's peak RSS across `execve`, and a child started with
/// `vfork` (as `posix_spawn` does) inherits the peak of the parent's memory, so a child of the
/// `compare` process (which holds generated inputs) would report at least that. This helper
/// is a fresh, small process (about 2 MiB resident, under glibc whatever the configuration,
/// as `LD_PRELOAD` goes to PROGRAM only): that is the floor of every peak RSS figure, the same
/// for every allocator, as with GNU time.
pub fn spawn_main(args: &[String]) -> Result<i32, String> {
    let (file, rest) = args.split_first().ok_or("spawn: FILE missing")?;
    let sep = rest
        .iter()
        .position(|a| a == "--")
        .ok_or("spawn: -- missing")?;
    let (env, prog) = (&rest[..sep], &rest[sep + 1..]);
    let (prog, prog_args) = prog.split_first().ok_or("spawn: PROGRAM missing")?;
    let mut cmd = Command::new(prog);
    cmd.args(prog_args);
    for kv in env {
        let (k, v) = kv
            .split_once('=')
            .ok_or(format!("spawn: not KEY=VALUE: {kv}"))?;
        cmd.env(k, v);
    }
    let start = Instant::now();
    let child = cmd
        .spawn()
        .map_err(|e| format!("spawn: cannot start {prog}: {e}"))?;
    let mut status = 0;
    // SAFETY: rusage is plain data that wait4 fills.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pid is our child's, not yet waited for; valid out-pointers.
    let r = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru) };
    let wall = start.elapsed();
    if r < 0 {
        return Err(format!("spawn: wait4: {}", std::io::Error::last_os_error()));
    }
    let figures = format!(
        "{:.3} {} {}\n",
        wall.as_secs_f64() * 1e3,
        ru.ru_maxrss,
        ru.ru_minflt
    );
    std::fs::write(file, figures).map_err(|e| format!("spawn: {file}: {e}"))?;
    Ok(if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    })
}

fn cargo_build(workspace: &Path, what: &[&str]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    eprintln!("compare: {cargo} build --release {}", what.join(" "));
    let st = Command::new(&cargo)
        .current_dir(workspace)
        .args(["build", "--release"])
        .args(what)
        .status()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if !st.success() {
        return Err(format!("cargo build {what:?} failed: {st}"));
    }
    Ok(())
}

/// State shared by the runs: where binaries and scratch files are.
pub struct Ctx {
    pub workloads_bin: PathBuf,
    pub tmp: PathBuf,
}

impl Ctx {
    /// Runs `job` once under `config`.
    fn run(&self, job: &Job, config: &Config) -> Result<Sample, String> {
        let out = self.tmp.join("stdout");
        let err = self.tmp.join("stderr");
        match &job.kind {
            JobKind::Workload(args) => {
                let mut cmd = Command::new(&self.workloads_bin);
                cmd.args(args);
                let s = measure(self, &cmd, config, &out, &err)?;
                let text = std::fs::read_to_string(&out).unwrap_or_default();
                check_workload_output(&text, &config.provider())?;
                Ok(s)
            }
            JobKind::Real(p) => {
                let cmd = p.command(self)?;
                let s = measure(self, &cmd, config, &out, &err)?;
                p.check(self, &out)?;
                Ok(s)
            }
        }
    }
}

/// A workload's stdout must name the expected `malloc` provider and end with `result:`.
fn check_workload_output(text: &str, provider: &str) -> Result<(), String> {
    let got = text
        .lines()
        .find_map(|l| l.strip_prefix("malloc_provider: "))
        .ok_or("no malloc_provider line")?;
    if !got.contains(provider) {
        return Err(format!(
            "malloc comes from {got}, not {provider}: LD_PRELOAD not in effect"
        ));
    }
    if !text.lines().any(|l| l.starts_with("result: ")) {
        return Err("no result: line".to_string());
    }
    Ok(())
}

pub fn run(args: &Args) -> Result<(), String> {
    let o = options(args)?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let target = exe.parent().ok_or("no target directory")?.to_path_buf();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    if o.build {
        cargo_build(&workspace, &["-p", "hugealloc-ffi", "--lib"])?;
        cargo_build(
            &workspace,
            &["-p", "hugealloc-bench", "--bin", "hugealloc-workloads"],
        )?;
    }
    let ctx = Ctx {
        workloads_bin: target.join("hugealloc-workloads"),
        tmp: std::env::temp_dir().join(format!("hugealloc-compare-{}", std::process::id())),
    };
    for f in [&ctx.workloads_bin, &target.join("libhugealloc.so")] {
        if !f.exists() {
            return Err(format!(
                "{} is missing (build it, or drop --no-build)",
                f.display()
            ));
        }
    }
    std::fs::create_dir_all(&ctx.tmp).map_err(|e| e.to_string())?;

    let mut configs = configs(&target);
    configs.extend(o.extra.iter().cloned());
    if let Some(only) = &o.allocators {
        configs.retain(|c| c.name == "glibc" || only.iter().any(|a| a == c.name));
    }
    // Each configuration must really replace malloc before any figure is believed.
    for c in &configs {
        let probe = Job {
            name: "probe".to_string(),
            group: "suite",
            kind: JobKind::Workload(vec!["pairs".to_string(), "10".to_string()]),
        };
        ctx.run(&probe, c).map_err(|e| format!("{}: {e}", c.name))?;
    }
    eprintln!(
        "compare: allocators: {}",
        configs
            .iter()
            .map(|c| c.name)
            .collect::<Vec<_>>()
            .join(", ")
    );

    let mut jobs = jobs(o.scale);
    if let Some(only) = &o.only {
        for name in only {
            if !jobs.iter().any(|j| &j.name == name) {
                let all: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
                return Err(format!(
                    "--only: no workload {name:?} (known: {})",
                    all.join(",")
                ));
            }
        }
        jobs.retain(|j| only.contains(&j.name));
    }
    let mut usable = Vec::new();
    for mut j in jobs {
        if let JobKind::Real(p) = &mut j.kind {
            match p.prepare(&ctx) {
                Ok(()) => usable.push(j),
                Err(e) => eprintln!("compare: {} skipped: {e}", j.name),
            }
        } else {
            usable.push(j);
        }
    }
    let jobs = usable;

    let glibc = &configs[0];
    if o.warmup {
        for j in &jobs {
            eprintln!("compare: warm-up {} (glibc, not counted)", j.name);
            if let Err(e) = ctx.run(j, glibc) {
                eprintln!("compare: warm-up of {} failed: {e}", j.name);
            }
        }
    }
    let mut results = report::Results::new(&jobs, &configs);
    let total = o.reps * jobs.len() * configs.len();
    let mut done = 0;
    let started = Instant::now();
    for rep in 0..o.reps {
        for (wi, j) in jobs.iter().enumerate() {
            for k in 0..configs.len() {
                let ci = (k + rep + wi) % configs.len();
                let c = &configs[ci];
                done += 1;
                let r = ctx.run(j, c);
                match &r {
                    Ok(s) => eprintln!(
                        "[{done}/{total} {:.0}s] rep {} {} {}: {:.0} ms, {:.1} MiB, {} faults",
                        started.elapsed().as_secs_f64(),
                        rep + 1,
                        j.name,
                        c.name,
                        s.wall_ms,
                        s.maxrss_kib as f64 / 1024.0,
                        s.minflt
                    ),
                    Err(e) => eprintln!(
                        "[{done}/{total}] rep {} {} {}: FAILED: {e}",
                        rep + 1,
                        j.name,
                        c.name
                    ),
                }
                results.add(wi, ci, rep, r);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&ctx.tmp);
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    results.print(&command);
    std::fs::create_dir_all(&o.out).map_err(|e| e.to_string())?;
    results.write_files(&o.out)?;
    eprintln!(
        "compare: wrote bench-results.csv, bench-summary.csv, bench-time.svg, bench-rss.svg in {}",
        o.out.display()
    );
    if results.failures() > 0 {
        return Err(format!(
            "{} runs failed (see FAIL cells)",
            results.failures()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_configuration_items() {
        let lib = std::env::current_exe().unwrap();
        let c = extra_config(&format!("old={}", lib.display())).unwrap();
        assert_eq!(c.name, "old");
        assert_eq!(c.preload.as_deref(), Some(lib.as_path()));
        assert!(extra_config("no-equals-sign").is_err());
        assert!(extra_config(&format!("={}", lib.display())).is_err());
        assert!(extra_config("x=/no/such/lib.so").is_err());
        let item = format!(
            "chk={}@HUGEALLOC_CONF=check:full,junk:true@X=1",
            lib.display()
        );
        let c = extra_config(&item).unwrap();
        assert_eq!(c.preload.as_deref(), Some(lib.as_path()));
        assert_eq!(
            c.env,
            vec![("HUGEALLOC_CONF", "check:full,junk:true"), ("X", "1")]
        );
        assert!(extra_config(&format!("bad={}@NOVALUE", lib.display())).is_err());
        let items = extra_items(&format!("a={0},b={0}@HUGEALLOC_CONF=x:1,y:2,c={0}", "L"));
        assert_eq!(items, ["a=L", "b=L@HUGEALLOC_CONF=x:1,y:2", "c=L"]);
    }

    #[test]
    fn workload_output_checks() {
        let good = "malloc_provider: /usr/lib/libjemalloc.so.2\nresult: sub=x\n";
        assert!(check_workload_output(good, "libjemalloc.so.2").is_ok());
        assert!(check_workload_output(good, "libc.so").is_err());
        assert!(
            check_workload_output("malloc_provider: libjemalloc.so.2\n", "libjemalloc.so.2")
                .is_err()
        );
        assert!(check_workload_output("result: a\n", "libc.so").is_err());
    }

    #[test]
    fn scaling_never_reaches_zero() {
        assert_eq!(scaled(1000, 0.5), "500");
        assert_eq!(scaled(3, 0.01), "1");
    }

    #[test]
    fn every_suite_workload_is_a_job() {
        let jobs = jobs(1.0);
        for w in crate::suite::WORKLOADS {
            assert!(jobs.iter().any(|j| j.name == w.name));
        }
    }
}
